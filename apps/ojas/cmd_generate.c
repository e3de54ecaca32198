/* ojas generate: sample text from a checkpoint or a safetensors file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ojas/data.h"
#include "ojas/infer.h"
#include "ojas/train.h"

static const char *k_help =
    "usage: ojas generate (--checkpoint DIR | --weights FILE.safetensors --model PRESET)\n"
    "                     [--vocab DIR] --prompt TEXT [--max-new-tokens N] [--temperature T]\n"
    "                     [--top-k K] [--top-p P] [--repetition-penalty R] [--seed S]\n"
    "                     [--device cpu|cuda|cuda:N] [--dtype f32|bf16|f16] [--threads N]\n"
    "Sample from a model. --checkpoint takes a checkpoint directory written by\n"
    "'ojas train' (or its root: the newest good one is used); its state.json\n"
    "holds the model config, and its tokenizer_dir is the default for --vocab\n"
    "(relative to where the run was started). Tokens stream to stdout as they\n"
    "are generated. Defaults: --max-new-tokens 200, --temperature 0.8 (0:\n"
    "greedy), --top-k 40 (0: off), --top-p %g (1: off), --repetition-penalty %g\n"
    "(1: off), --seed %llu, --device cpu, --dtype f32. --dtype bf16 converts the\n"
    "weights after loading (half the bytes read per token on a GPU, the KV cache\n"
    "too; on the CPU bf16 is slower than f32).\n";

typedef struct {
    const oj_tokenizer *tok;
} stream_ctx;

static bool print_token(int64_t seq, int32_t token, void *vctx) {
    (void)seq;
    stream_ctx *c = vctx;
    char *text = NULL;
    size_t len = 0;
    oj_error e = {0};
    if (oj_tokenizer_decode(c->tok, &token, 1, OJ_DECODE_BYTES, &text, &len, &e) == OJ_OK) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    free(text);
    return true;
}

int cmd_generate(int argc, char **argv) {
    const char *ckpt = NULL, *weights = NULL, *preset = NULL, *vocab = NULL, *prompt = NULL;
    const char *device = "cpu", *dtype = "f32";
    int64_t threads = 0;
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 200;
    sc.temperature = 0.8;
    sc.top_k = 40;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) {
            printf(k_help, sc.top_p, sc.repetition_penalty, (unsigned long long)sc.seed);
            return CLI_OK;
        }
#define VAL() ((v = cli_value(argc, argv, &i)) != NULL)
        if (strcmp(a, "--checkpoint") == 0) { if (!VAL()) return CLI_USAGE; ckpt = v; }
        else if (strcmp(a, "--weights") == 0) { if (!VAL()) return CLI_USAGE; weights = v; }
        else if (strcmp(a, "--model") == 0) { if (!VAL()) return CLI_USAGE; preset = v; }
        else if (strcmp(a, "--vocab") == 0) { if (!VAL()) return CLI_USAGE; vocab = v; }
        else if (strcmp(a, "--prompt") == 0) { if (!VAL()) return CLI_USAGE; prompt = v; }
        else if (strcmp(a, "--device") == 0) { if (!VAL()) return CLI_USAGE; device = v; }
        else if (strcmp(a, "--dtype") == 0) { if (!VAL()) return CLI_USAGE; dtype = v; }
        else if (strcmp(a, "--threads") == 0) {
            if (!VAL() || !cli_parse_i64(a, v, 0, 4096, &threads)) return CLI_USAGE;
        } else if (strcmp(a, "--max-new-tokens") == 0) {
            if (!VAL() || !cli_parse_i64(a, v, 0, 1 << 20, &sc.max_new_tokens)) return CLI_USAGE;
        } else if (strcmp(a, "--top-k") == 0) {
            if (!VAL() || !cli_parse_i64(a, v, 0, INT32_MAX, &sc.top_k)) return CLI_USAGE;
        } else if (strcmp(a, "--seed") == 0) {
            int64_t s;
            if (!VAL() || !cli_parse_i64(a, v, 0, INT64_MAX, &s)) return CLI_USAGE;
            sc.seed = (uint64_t)s;
        } else if (strcmp(a, "--temperature") == 0) {
            if (!VAL() || !cli_parse_double(a, v, &sc.temperature)) return CLI_USAGE;
        } else if (strcmp(a, "--top-p") == 0) {
            if (!VAL() || !cli_parse_double(a, v, &sc.top_p)) return CLI_USAGE;
        } else if (strcmp(a, "--repetition-penalty") == 0) {
            if (!VAL() || !cli_parse_double(a, v, &sc.repetition_penalty)) return CLI_USAGE;
        } else {
            return cli_error(CLI_USAGE, "generate: unknown option '%s' (see --help)", a);
        }
#undef VAL
    }
    if ((ckpt == NULL) == (weights == NULL))
        return cli_error(CLI_USAGE, "generate: give exactly one of --checkpoint or --weights");
    if (weights && preset == NULL) return cli_error(CLI_USAGE, "generate: --weights needs --model PRESET");
    oj_train_config run_cfg = oj_train_config_default();
    if (vocab == NULL && ckpt && access(ckpt, F_OK) != 0) /* before asking for --vocab */
        return cli_error(CLI_FAIL, "generate: checkpoint '%s' does not exist", ckpt);
    if (vocab == NULL && ckpt) { /* the tokenizer the run was trained with */
        oj_error ce = {0};
        if (oj_train_config_from_checkpoint(ckpt, &run_cfg, &ce) == OJ_OK && run_cfg.tokenizer_dir[0])
            vocab = run_cfg.tokenizer_dir;
    }
    if (vocab == NULL)
        return cli_error(CLI_USAGE, "generate: --vocab DIR is required (the tokenizer; a checkpoint "
                                    "supplies it only when its run had a tokenizer_dir)");
    if (prompt == NULL || prompt[0] == '\0')
        return cli_error(CLI_USAGE, "generate: --prompt TEXT is required (and must not be empty)");
    if (!(sc.temperature >= 0) || isinf(sc.temperature) || !(sc.top_p > 0 && sc.top_p <= 1) ||
        !(sc.repetition_penalty > 0) || isinf(sc.repetition_penalty))
        return cli_error(CLI_USAGE, "generate: need a finite temperature >= 0, 0 < top-p <= 1 "
                                    "and a finite repetition-penalty > 0");

    oj_dtype wdt = strcmp(dtype, "bf16") == 0 ? OJ_BF16 : strcmp(dtype, "f16") == 0 ? OJ_F16 : OJ_F32;
    if (wdt == OJ_F32 && strcmp(dtype, "f32") != 0)
        return cli_error(CLI_USAGE, "generate: --dtype must be f32, bf16 or f16, got '%s'", dtype);

    oj_error e = {0};
    oj_tokenizer *tok = NULL;
    if (oj_tokenizer_load(vocab, &tok, &e) != OJ_OK)
        return cli_error(CLI_FAIL, "generate: %s%s", e.message,
                         vocab == run_cfg.tokenizer_dir
                             ? " (the run's tokenizer_dir, relative to where it was started: "
                               "give --vocab DIR)"
                             : "");
    oj_engine_config ec = oj_engine_config_default();
    if (!oj_device_parse(device, &ec.device)) {
        oj_tokenizer_free(tok);
        return cli_error(CLI_USAGE, "generate: --device must be cpu, cuda or cuda:N, got '%s'",
                         device);
    }
    ec.threads = (int)threads;
    oj_engine *eng = NULL;
    if (oj_engine_create(&ec, &eng, &e) != OJ_OK) {
        oj_tokenizer_free(tok);
        return cli_error(CLI_FAIL, "generate: %s", e.message);
    }
    int rc = CLI_FAIL;
    oj_gpt *m = NULL;
    oj_gpt_config cfg;
    oj_checkpoint_info info = {0};
    if (ckpt) {
        /* The model config is part of the training config in state.json.
         * As in the trainer, the tokenizer sets the vocabulary only when
         * the run had a tokenizer_dir (otherwise vocab_size or the preset's). */
        oj_train_config tc = oj_train_config_default();
        if (oj_train_config_from_checkpoint(ckpt, &tc, &e) != OJ_OK ||
            oj_train_model_config(&tc, tc.tokenizer_dir[0] ? oj_tokenizer_vocab_size(tok) : 0,
                                  &cfg, &e) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.message);
            goto done;
        }
        if (oj_gpt_create(eng, &cfg, 0, &m) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", oj_last_error(eng));
            goto done;
        }
        oj_named_tensors sd = oj_gpt_state_dict(m);
        /* ckpt is a checkpoint directory, or a root whose newest good one is used. */
        char manifest[4200];
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ckpt);
        bool is_dir = access(manifest, F_OK) == 0;
        if ((is_dir ? oj_checkpoint_load(ckpt, &sd, NULL, &info, &e)
                    : oj_checkpoint_resume(ckpt, &sd, NULL, &info, &e)) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.message);
            goto done;
        }
    } else {
        if (!oj_gpt_preset(preset, &cfg)) {
            char names[512];
            cli_error(CLI_USAGE, "generate: unknown model preset '%s' (presets: %s)", preset,
                      oj_gpt_preset_list(names, sizeof names));
            goto done;
        }
        if (oj_gpt_create(eng, &cfg, 0, &m) != OJ_OK ||
            oj_gpt_load_safetensors(m, weights, &e) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.status ? e.message : oj_last_error(eng));
            goto done;
        }
    }
    if (wdt != OJ_F32 && oj_gpt_to_dtype(m, wdt) != OJ_OK) {
        cli_error(CLI_FAIL, "generate: %s", oj_last_error(eng));
        goto done;
    }
    oj_tokens ids = {0};
    if (oj_tokenizer_encode(tok, prompt, strlen(prompt), OJ_ENCODE_ALLOW_SPECIAL, &ids, &e) != OJ_OK) {
        cli_error(CLI_FAIL, "generate: %s", e.message);
        goto done;
    }
    sc.stop_token = oj_tokenizer_eot(tok);
    fputs(prompt, stdout);
    stream_ctx sctx = {tok};
    const int32_t *pp = ids.ids;
    int64_t plen = (int64_t)ids.len;
    int32_t *gen = NULL;
    int64_t glen = 0;
    oj_status gs = oj_generate(m, 1, &pp, &plen, &sc, &gen, &glen, print_token, &sctx);
    fputc('\n', stdout);
    free(gen);
    oj_tokens_free(&ids);
    if (gs != OJ_OK) {
        cli_error(CLI_FAIL, "generate: %s", oj_last_error(eng));
        goto done;
    }
    if (cfg.family == OJ_GPT2 && glen < sc.max_new_tokens && plen + glen >= cfg.block_size)
        fprintf(stderr, "ojas: generate: stopped after %lld of %lld new tokens: the model's context "
                        "of %lld positions is full\n",
                (long long)glen, (long long)sc.max_new_tokens, (long long)cfg.block_size);
    rc = CLI_OK;
done:
    free(info.state_json);
    oj_gpt_free(m);
    oj_engine_free(eng);
    oj_tokenizer_free(tok);
    return rc;
}
