/* Perplexity of a model trained by ojas on its validation shards with its
 * weights as trained (f32), cast to bf16, and quantized to q8_0, q4_0,
 * q4_1 and q4_k (oj_gpt_quantize: every linear weight and the head; q4_k
 * is left out when C or the MLP width is not a multiple of 256): the
 * accuracy bars of docs/quant.md (q8_0 within 0.5% of the f32/bf16
 * perplexity, q4 within 5%).
 *
 * The checkpoint is a run of `ojas train` (its model config and
 * tokenizer from state.json; the newest checkpoint that verifies); the
 * tokens are the first --tokens of its val_*.bin shards (the run's
 * data_dir, or --shards DIR), cut into windows of T = the run's seq_len
 * (--seq T), each window's T next-token losses averaged (oj_gpt_loss,
 * grad off), perplexity = exp(mean over windows). One JSON line per
 * variant with its change against f32.
 *
 * usage: bench_quant_ppl --checkpoint RUN [--shards DIR] [--tokens N]
 *                        [--seq T] [--threads N]
 *        bench_quant_ppl --smoke   (random gpt2, C 256, and random tokens:
 *                                   the code path, well under a second) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/ojas.h"

static double perplexity(oj_gpt *m, const int32_t *tok, int64_t nwin, int64_t T) {
    oj_engine *eng = oj_gpt_engine(m);
    bool prev = oj_set_grad_enabled(eng, false);
    double sum = 0;
    for (int64_t w = 0; w < nwin; w++) {
        oj_scope_begin(eng);
        const int32_t *p = tok + w * T;
        oj_tensor *x = oj_from_host(eng, 2, (int64_t[]){1, T}, OJ_I32, p, sizeof(int32_t) * (size_t)T);
        oj_tensor *y = oj_from_host(eng, 2, (int64_t[]){1, T}, OJ_I32, p + 1, sizeof(int32_t) * (size_t)T);
        oj_tensor *loss = oj_gpt_loss(m, x, y);
        double l = loss ? oj_item(loss) : NAN;
        oj_scope_end(eng);
        if (!isfinite(l)) {
            fprintf(stderr, "bench_quant_ppl: window %lld: %s\n", (long long)w, oj_last_error(eng));
            oj_set_grad_enabled(eng, prev);
            return NAN;
        }
        sum += l;
    }
    oj_set_grad_enabled(eng, prev);
    return exp(sum / (double)nwin);
}

/* A fresh copy of the model: random init for --smoke, else the checkpoint. */
typedef struct {
    bool smoke;
    oj_gpt_config cfg;
    char dir[4096];
} source;

static oj_gpt *load(oj_engine *eng, const source *src, oj_error *e) {
    oj_gpt *m = NULL;
    if (oj_gpt_create(eng, &src->cfg, 1, &m) != OJ_OK) {
        oj_error_set(e, oj_last_status(eng), "%s", oj_last_error(eng));
        return NULL;
    }
    if (src->smoke) return m;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    if (oj_checkpoint_load(src->dir, &sd, NULL, NULL, e) != OJ_OK) {
        oj_gpt_free(m);
        return NULL;
    }
    return m;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *shards = NULL;
    int64_t ntok = 65536, seq = 0;
    int threads = 2;
    bool smoke = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--smoke") == 0) smoke = true;
        else if (strcmp(a, "--checkpoint") == 0 && v) ckpt = v, i++;
        else if (strcmp(a, "--shards") == 0 && v) shards = v, i++;
        else if (strcmp(a, "--tokens") == 0 && v) ntok = atoll(v), i++;
        else if (strcmp(a, "--seq") == 0 && v) seq = atoll(v), i++;
        else if (strcmp(a, "--threads") == 0 && v) threads = atoi(v), i++;
        else {
            fprintf(stderr, "bench_quant_ppl: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!smoke && ckpt == NULL) {
        fprintf(stderr, "bench_quant_ppl: --checkpoint RUN (or --smoke) is required\n");
        return 2;
    }
    oj_error e = {0};
    source src = {.smoke = smoke};
    char data_dir[1024] = "";
    if (smoke) {
        oj_gpt_preset("gpt2-tiny", &src.cfg);
        src.cfg.n_embd = 256;
        src.cfg.mlp_hidden = 512;
        src.cfg.vocab_size = 300;
        seq = 32;
        ntok = 2 * seq;
    } else {
        oj_train_config tc = oj_train_config_default();
        oj_tokenizer *tok = NULL;
        if (oj_checkpoint_find(ckpt, src.dir, sizeof src.dir, NULL, NULL, &e) != OJ_OK ||
            oj_train_config_from_checkpoint(src.dir, &tc, &e) != OJ_OK ||
            (tc.tokenizer_dir[0] && oj_tokenizer_load(tc.tokenizer_dir, &tok, &e) != OJ_OK) ||
            oj_train_model_config(&tc, tok ? oj_tokenizer_vocab_size(tok) : 0, &src.cfg, &e) !=
                OJ_OK) {
            fprintf(stderr, "bench_quant_ppl: %s\n", e.message);
            oj_tokenizer_free(tok);
            return 1;
        }
        oj_tokenizer_free(tok);
        snprintf(data_dir, sizeof data_dir, "%s", shards ? shards : tc.data_dir);
        if (seq <= 0) seq = tc.seq_len > 0 ? tc.seq_len : src.cfg.block_size;
    }
    if (seq <= 0 || seq > src.cfg.block_size || ntok < seq + 1) {
        fprintf(stderr, "bench_quant_ppl: --seq %lld must be in 1..%lld and --tokens above it\n",
                (long long)seq, (long long)src.cfg.block_size);
        return 2;
    }
    /* the tokens: the val shards in order, up to ntok + 1 */
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(ntok + 1));
    int64_t have = 0;
    if (tok == NULL) return 1;
    if (smoke) {
        uint32_t s = 7;
        for (int64_t i = 0; i <= ntok; i++, have++) {
            s = s * 1664525u + 1013904223u;
            tok[i] = (int32_t)((s >> 8) % (uint32_t)src.cfg.vocab_size);
        }
    } else {
        char **paths = NULL;
        int np = 0;
        if (oj_shard_list(data_dir, "val", &paths, &np, &e) != OJ_OK) {
            fprintf(stderr, "bench_quant_ppl: %s\n", e.message);
            free(tok);
            return 1;
        }
        for (int i = 0; i < np && have <= ntok; i++) {
            oj_shard *sh = NULL;
            if (oj_shard_open(paths[i], &sh, &e) != OJ_OK ||
                oj_shard_check_vocab(sh, src.cfg.vocab_size, &e) != OJ_OK) {
                fprintf(stderr, "bench_quant_ppl: %s\n", e.message);
                oj_shard_close(sh);
                oj_paths_free(paths, np);
                free(tok);
                return 1;
            }
            int64_t n = oj_shard_len(sh), take = n < ntok + 1 - have ? n : ntok + 1 - have;
            if (oj_shard_read(sh, 0, take, tok + have, &e) != OJ_OK) {
                fprintf(stderr, "bench_quant_ppl: %s\n", e.message);
                oj_shard_close(sh);
                oj_paths_free(paths, np);
                free(tok);
                return 1;
            }
            have += take;
            oj_shard_close(sh);
        }
        oj_paths_free(paths, np);
    }
    const int64_t nwin = (have - 1) / seq;
    if (nwin < 1) {
        fprintf(stderr, "bench_quant_ppl: %lld val tokens in %s: fewer than one window of %lld\n",
                (long long)have, data_dir, (long long)seq);
        free(tok);
        return 1;
    }
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = threads;
    oj_engine *eng = NULL;
    if (oj_engine_create(&ec, &eng, &e) != OJ_OK) {
        fprintf(stderr, "bench_quant_ppl: %s\n", e.message);
        free(tok);
        return 1;
    }
    const char *names[] = {"f32", "bf16", "q8_0", "q4_0", "q4_1", "q4_k"};
    double p32 = 0;
    int rc = 0;
    for (int v = 0; v < 6 && rc == 0; v++) {
        if (v == 5 && (src.cfg.n_embd % OJ_QK_K || src.cfg.mlp_hidden % OJ_QK_K)) {
            fprintf(stderr, "bench_quant_ppl: q4_k left out: C %lld or MLP %lld is not a multiple "
                            "of %d\n", (long long)src.cfg.n_embd, (long long)src.cfg.mlp_hidden,
                    OJ_QK_K);
            continue;
        }
        oj_gpt *m = load(eng, &src, &e);
        oj_status s = m ? OJ_OK : OJ_ERR_IO;
        if (s == OJ_OK && v == 1) s = oj_gpt_to_dtype(m, OJ_BF16);
        if (s == OJ_OK && v >= 2) s = oj_gpt_quantize(m, (oj_qtype)(v - 2));
        double p = s == OJ_OK ? perplexity(m, tok, nwin, seq) : NAN;
        if (!isfinite(p)) {
            fprintf(stderr, "bench_quant_ppl: %s: %s\n", names[v],
                    m ? oj_last_error(eng) : e.message);
            rc = 1;
        } else {
            if (v == 0) p32 = p;
            printf("{\"bench\": \"quant_ppl\", \"variant\": \"%s\", \"windows\": %lld, \"seq\": %lld, "
                   "\"tokens\": %lld, \"perplexity\": %.5f, \"change_vs_f32_pct\": %.3f}\n",
                   names[v], (long long)nwin, (long long)seq, (long long)(nwin * seq), p,
                   100.0 * (p / p32 - 1));
            fflush(stdout);
        }
        oj_gpt_free(m);
    }
    oj_engine_free(eng);
    free(tok);
    return rc;
}
