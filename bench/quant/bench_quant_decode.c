/* Batch-1 greedy decode on the CPU with f32, q8_0, q4_0, q4_1 and q4_k weights
 * (oj_gpt_quantize; with --cuda also fp8 E4M3): GPT-2 124M from random init (seed 1), a 16-token
 * prompt, then `new` tokens through oj_gpt_decoder (static KV cache, one
 * forward per token). tok/s = new tokens / wall time of the steps (the
 * prefill and one warm-up step excluded), the median of `repeats` runs;
 * bytes/token = oj_gpt_decode_bytes (weights one step reads). One JSON line
 * per variant, with its tokens, so a peer running the same GGUF file
 * (bench/quant/llama_peer.mjs) can be compared token for token. With --out
 * DIR each variant is also written to DIR/<variant>.gguf (llama.cpp's
 * layout; tokenizer metadata from --vocab DIR when given), and the same
 * weights in f16 to DIR/f16.gguf (not timed on the CPU).
 *
 * usage: bench_quant_decode [--preset P] [--threads N] [--new N] [--repeats N]
 *                           [--vocab DIR] [--out DIR] [--smoke] [--cuda [--graph]]
 * --cuda: the model on cuda:0 (f32 weights, the quantized copies in device
 * memory; --out is refused there: the files are written from the CPU);
 * --graph: the decoder replays a CUDA graph per step. On CUDA the run
 * starts with the bf16 model (oj_gpt_to_dtype, the same weights) on the
 * fast decode step, the bar's reference, and each quantized variant runs
 * twice: on the generic step (OJAS_DECODE_FAST=0, "step": "generic") and
 * on the default step ("step": "fast": the quantized fast step of
 * gpt_decode_quant.c where it serves the model, gpt2 with rows of whole
 * 16-byte chunks); "vs_bf16" is its tok/s over the bf16 fast step's,
 * "tokens_equal" whether its tokens are the generic step's (where not,
 * stderr names the first that differs); last, the same weights in f16 on
 * the fast step ("variant": "f16", with its tokens: the peer of f16.gguf).
 * --smoke: gpt2-tiny, 8 new tokens, one repeat (a few hundred ms); q4_k is
 * left out where C or the MLP width is not a multiple of 256 (gpt2-tiny).
 * --preset llama-small: a Llama-family model (GPT-2's vocabulary, C 256,
 * 4 layers, 8 heads, 4 KV heads, MLP 768, untied head, rope theta 10000),
 * for checking llama.cpp's reading of ojas's llama files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ojas/ojas.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median tok/s of `repeats` greedy runs of m (prefill, one warm-up
 * step, then nnew - 1 timed steps) into *tok_s, the tokens into toks
 * [nnew + 1]; false with the message printed. */
static bool time_decode(oj_gpt *m, const int32_t *prompt, int np, int nnew, int repeats,
                        bool graph, int32_t *toks, double *t, double *tok_s) {
    oj_engine *eng = oj_gpt_engine(m);
    oj_gpt_decoder *d = NULL;
    if (oj_gpt_decoder_create(m, np + nnew + 1, graph, &d) != OJ_OK) {
        fprintf(stderr, "bench_quant_decode: %s\n", oj_last_error(eng));
        return false;
    }
    bool ok = true;
    for (int r = 0; r < repeats && ok; r++) {
        oj_status s = oj_gpt_decoder_prefill(d, prompt, np, &toks[0]);
        if (s == OJ_OK) s = oj_gpt_decoder_step(d, &toks[1]); /* warm-up */
        double t0 = now_s();
        for (int i = 1; s == OJ_OK && i < nnew; i++) s = oj_gpt_decoder_step(d, &toks[i + 1]);
        t[r] = now_s() - t0;
        if (s != OJ_OK) {
            fprintf(stderr, "bench_quant_decode: %s\n", oj_last_error(eng));
            ok = false;
        }
    }
    oj_gpt_decoder_free(d);
    if (!ok) return false;
    qsort(t, (size_t)repeats, sizeof *t, cmp_double);
    *tok_s = nnew > 1 ? (nnew - 1) / t[repeats / 2] : 0;
    return true;
}

enum { PROMPT = 16 };

/* One JSON line: a variant's speed beside f32's (and bf16's fast step's
 * when bf16_tok_s > 0), its prompt and tokens; same >= 0: how many of the
 * tokens lead as the generic step's (tokens_equal when all). */
static void print_line(const char *device, const char *preset, const char *variant,
                       const char *step, int threads, int nnew, double tok_s, double bytes,
                       double f32_tok_s, double f32_bytes, double bf16_tok_s,
                       const int32_t *prompt, const int32_t *toks, int same) {
    printf("{\"bench\": \"quant_decode\", \"device\": \"%s\", \"preset\": \"%s\", "
           "\"variant\": \"%s\", \"step\": \"%s\", \"threads\": %d, \"kernel_isa\": \"%s\", "
           "\"new_tokens\": %d, \"tok_s\": %.2f, \"ms_per_token\": %.3f, "
           "\"bytes_per_token\": %.0f, \"speedup_vs_f32\": %.3f, \"bytes_ratio_vs_f32\": %.3f, ",
           device, preset, variant, step, threads,
           getenv("OJAS_CPU_ISA") ? getenv("OJAS_CPU_ISA") : "best", nnew, tok_s,
           tok_s > 0 ? 1000.0 / tok_s : 0.0, bytes, tok_s / f32_tok_s, f32_bytes / bytes);
    if (bf16_tok_s > 0) printf("\"vs_bf16\": %.3f, ", tok_s / bf16_tok_s);
    if (same >= 0)
        printf("\"tokens_equal\": %s, \"tokens_same_prefix\": %d, ", same == nnew ? "true" : "false",
               same);
    printf("\"prompt\": [");
    for (int i = 0; i < PROMPT; i++) printf("%s%d", i ? ", " : "", prompt[i]);
    printf("], \"tokens\": [");
    for (int i = 0; i < nnew; i++) printf("%s%d", i ? ", " : "", toks[i]);
    printf("]}\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *preset = "gpt2-124m", *vocab = NULL, *out = NULL;
    int threads = 2, nnew = 64, repeats = 3;
    bool cuda = false, graph = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--smoke") == 0) preset = "gpt2-tiny", nnew = 8, repeats = 1;
        else if (strcmp(a, "--preset") == 0 && v) preset = v, i++;
        else if (strcmp(a, "--threads") == 0 && v) threads = atoi(v), i++;
        else if (strcmp(a, "--new") == 0 && v) nnew = atoi(v), i++;
        else if (strcmp(a, "--repeats") == 0 && v) repeats = atoi(v), i++;
        else if (strcmp(a, "--vocab") == 0 && v) vocab = v, i++;
        else if (strcmp(a, "--out") == 0 && v) out = v, i++;
        else if (strcmp(a, "--cuda") == 0) cuda = true;
        else if (strcmp(a, "--graph") == 0) graph = true;
        else {
            fprintf(stderr, "bench_quant_decode: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (nnew < 1 || repeats < 1 || threads < 0) {
        fprintf(stderr, "bench_quant_decode: --new and --repeats must be >= 1\n");
        return 2;
    }
    if (cuda && out) {
        fprintf(stderr, "bench_quant_decode: --out goes with the CPU, not --cuda\n");
        return 2;
    }
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = threads;
    if (cuda) ec.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (oj_engine_create(&ec, &eng, &err) != OJ_OK) {
        fprintf(stderr, "bench_quant_decode: %s\n", err.message);
        return 1;
    }
    oj_gpt_config cfg;
    if (strcmp(preset, "llama-small") == 0) {
        cfg = (oj_gpt_config){.family = OJ_LLAMA, .vocab_size = 50257, .block_size = 1024,
                              .n_layer = 4, .n_head = 8, .n_kv_head = 4, .n_embd = 256,
                              .mlp_hidden = 768, .norm_eps = 1e-5, .rope_theta = 10000.0,
                              .init_std = 0.05, .untied_head = true};
    } else if (!oj_gpt_preset(preset, &cfg)) {
        fprintf(stderr, "bench_quant_decode: unknown preset %s\n", preset);
        return 2;
    }
    oj_gpt *m = NULL;
    if (oj_gpt_create(eng, &cfg, 1, &m) != OJ_OK) {
        fprintf(stderr, "bench_quant_decode: %s\n", oj_last_error(eng));
        return 1;
    }
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 7919 + 13) % cfg.vocab_size);
    const char *names[] = {"f32", "q8_0", "q4_0", "q4_1", "q4_k", "fp8"};
    const int nvar = cuda ? 6 : 5; /* fp8 (no GGUF type, no CPU kernel) on CUDA only */
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(nnew + 1));
    int32_t *gtoks = malloc(sizeof(int32_t) * (size_t)(nnew + 1)); /* the generic step's */
    double *t = malloc(sizeof(double) * (size_t)repeats);
    double f32_tok_s = 0, f32_bytes = 0, bf16_tok_s = 0;
    int rc = 0;
    if (cuda) { /* the reference: bf16 weights on the fast decode step */
        oj_gpt *mb = NULL;
        if (oj_gpt_create(eng, &cfg, 1, &mb) != OJ_OK || oj_gpt_to_dtype(mb, OJ_BF16) != OJ_OK ||
            !time_decode(mb, prompt, PROMPT, nnew, repeats, graph, toks, t, &bf16_tok_s)) {
            fprintf(stderr, "bench_quant_decode: bf16: %s\n", oj_last_error(eng));
            rc = 1;
        } else {
            printf("{\"bench\": \"quant_decode\", \"device\": \"%s\", \"preset\": \"%s\", "
                   "\"variant\": \"bf16\", \"step\": \"fast\", \"new_tokens\": %d, "
                   "\"tok_s\": %.2f, \"ms_per_token\": %.3f, \"bytes_per_token\": %.0f}\n",
                   graph ? "cuda (graph)" : "cuda", preset, nnew, bf16_tok_s,
                   bf16_tok_s > 0 ? 1000.0 / bf16_tok_s : 0.0, (double)oj_gpt_decode_bytes(mb));
            fflush(stdout);
        }
        oj_gpt_free(mb);
    }
    for (int v = 0; v < nvar && rc == 0; v++) {
        if (v == 1 + OJ_Q4_K && (cfg.n_embd % OJ_QK_K || cfg.mlp_hidden % OJ_QK_K)) {
            fprintf(stderr, "bench_quant_decode: q4_k left out: C %lld or MLP %lld is not a "
                            "multiple of %d\n", (long long)cfg.n_embd, (long long)cfg.mlp_hidden,
                    OJ_QK_K);
            continue;
        }
        if (v > 0 && oj_gpt_quantize(m, (oj_qtype)(v - 1)) != OJ_OK) {
            fprintf(stderr, "bench_quant_decode: %s\n", oj_last_error(eng));
            rc = 1;
            break;
        }
        if (out) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.gguf", out, names[v]);
            oj_gguf_writer *w = oj_gguf_writer_new();
            oj_status s = vocab ? oj_gguf_add_gpt2_tokenizer(w, vocab, cfg.vocab_size, &err) : OJ_OK;
            if (s == OJ_OK) s = oj_gpt_save_gguf(m, w, path, names[v], &err);
            oj_gguf_writer_free(w);
            if (s != OJ_OK) {
                fprintf(stderr, "bench_quant_decode: %s\n", err.message);
                rc = 1;
                break;
            }
        }
        /* on CUDA a quantized variant runs on the generic step, then on the
         * default one (the quantized fast step where it serves the model) */
        for (int pass = cuda && v > 0 ? 0 : 1; pass < 2 && rc == 0; pass++) {
            if (pass == 0) setenv("OJAS_DECODE_FAST", "0", 1);
            double tok_s = 0;
            bool ok = time_decode(m, prompt, PROMPT, nnew, repeats, graph, toks, t, &tok_s);
            if (pass == 0) unsetenv("OJAS_DECODE_FAST");
            if (!ok) {
                rc = 1;
                break;
            }
            double bytes = (double)oj_gpt_decode_bytes(m);
            if (v == 0) f32_tok_s = tok_s, f32_bytes = bytes;
            const char *step = cuda && v > 0 && pass == 1 ? "fast" : "generic";
            int same = -1; /* the fast step's tokens against the generic step's */
            if (cuda && v > 0 && pass == 0) memcpy(gtoks, toks, sizeof(int32_t) * (size_t)nnew);
            if (cuda && v > 0 && pass == 1) {
                for (same = 0; same < nnew && toks[same] == gtoks[same];) same++;
                if (same < nnew)
                    fprintf(stderr, "bench_quant_decode: %s: the fast step's token %d is %d, the "
                                    "generic step's %d (a near tie, or a bug)\n",
                            names[v], same, toks[same], gtoks[same]);
            }
            print_line(cuda ? (graph ? "cuda (graph)" : "cuda") : "cpu", preset, names[v], step,
                       oj_engine_threads(eng), nnew, tok_s, bytes, f32_tok_s, f32_bytes,
                       cuda ? bf16_tok_s : 0, prompt, toks, same);
        }
    }
    /* f16: the same weights in f16 (oj_gpt_to_dtype), llama.cpp's
     * unquantized type; on CUDA on the fast step, with --out its file */
    if (rc == 0 && (cuda || out)) {
        oj_gpt *mf = NULL;
        double tok_s = 0;
        if (oj_gpt_create(eng, &cfg, 1, &mf) != OJ_OK || oj_gpt_to_dtype(mf, OJ_F16) != OJ_OK) {
            fprintf(stderr, "bench_quant_decode: f16: %s\n", oj_last_error(eng));
            rc = 1;
        } else if (out) {
            char path[4096];
            snprintf(path, sizeof path, "%s/f16.gguf", out);
            oj_gguf_writer *w = oj_gguf_writer_new();
            oj_status s = vocab ? oj_gguf_add_gpt2_tokenizer(w, vocab, cfg.vocab_size, &err) : OJ_OK;
            if (s == OJ_OK) s = oj_gpt_save_gguf(mf, w, path, "f16", &err);
            oj_gguf_writer_free(w);
            if (s != OJ_OK) {
                fprintf(stderr, "bench_quant_decode: %s\n", err.message);
                rc = 1;
            }
        } else if (!time_decode(mf, prompt, PROMPT, nnew, repeats, graph, toks, t, &tok_s)) {
            rc = 1;
        } else {
            print_line(graph ? "cuda (graph)" : "cuda", preset, "f16", "fast", oj_engine_threads(eng),
                       nnew, tok_s, (double)oj_gpt_decode_bytes(mf), f32_tok_s, f32_bytes,
                       bf16_tok_s, prompt, toks, -1);
        }
        oj_gpt_free(mf);
    }
    free(t);
    free(gtoks);
    free(toks);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return rc;
}
