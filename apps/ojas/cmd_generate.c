/* ojas generate: sample text from a checkpoint, a Hugging Face model
 * directory or a safetensors file. */
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
    "usage: ojas generate (--checkpoint DIR | -m MODEL_DIR|FILE.gguf | --weights FILE.safetensors\n"
    "                     -m PRESET) [--vocab DIR] -p TEXT [options]\n"
    "Sample from a model. Tokens stream to stdout as they are generated.\n"
    "      --checkpoint DIR       a checkpoint directory written by 'ojas train', or its\n"
    "                             run directory (the one 'latest' names, else the\n"
    "                             newest, that verifies; a warning names any newer one\n"
    "                             refused); its state.json holds the model config\n"
    "  -m, --model DIR|PRESET     a Hugging Face model directory (config.json and\n"
    "                             model.safetensors or its shards: GPT2LMHeadModel,\n"
    "                             LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,\n"
    "                             Qwen3ForCausalLM), a GGUF file in llama.cpp's layout\n"
    "                             (gpt2, llama; F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K tensors,\n"
    "                             as 'ojas quantize' writes, with its tokenizer), or the\n"
    "                             preset of --weights\n"
    "      --weights FILE         a safetensors file of preset --model\n"
    "      --adapter DIR          a PEFT LoRA adapter directory (adapter_config.json,\n"
    "                             adapter_model.safetensors) folded into the weights\n"
    "      --vocab DIR            the tokenizer (default: the model directory, the GGUF\n"
    "                             file's tokenizer.ggml.* metadata, or the checkpoint's\n"
    "                             run's tokenizer_dir, stored as an absolute path)\n"
    "  -p, --prompt TEXT          the text to continue (required, not empty)\n"
    "  -n, --max-new-tokens N     tokens to generate (default 200)\n"
    "  -t, --temperature T        0: greedy (default 0.8)\n"
    "  -k, --top-k K              0: off (default 40)\n"
    "      --top-p P              1: off (default %g)\n"
    "      --repetition-penalty R 1: off (default %g)\n"
    "                             A model directory's generation_config.json replaces\n"
    "                             these four defaults and the stop tokens with its own\n"
    "                             (as transformers reads it: greedy unless do_sample;\n"
    "                             max_new_tokens, else max_length less the prompt);\n"
    "                             options given here still win\n"
    "  -s, --seed S               sampling seed (default %llu)\n"
    "  -d, --device D             cpu | cuda | cuda:N (default cpu)\n"
    "      --dtype D              f32 | bf16 | f16 (default f32); bf16 converts the weights\n"
    "                             after loading (half the bytes read per token on a GPU,\n"
    "                             the KV cache too; on the CPU bf16 is slower than f32)\n"
    "      --quantize TYPE        q8_0 | q4_0 | q4_1 | q4_k | fp8: quantize the linear weights\n"
    "                             after loading (ggml's formats, int8 dot products on the\n"
    "                             CPU; fp8: E4M3 with a scale a row, for sm_90 GPUs)\n"
    "  -j, --threads N            CPU threads (default 0: all usable CPUs)\n"
    "      --numerics N           fast | exact (default fast); exact sums in a fixed order,\n"
    "                             the bits 'ojas serve' gives for the same request\n"
    "      --budget-bytes N       the engine's root memory budget in bytes (suffix K, M,\n"
    "                             G, T: powers of 1024); beyond it allocations are refused\n"
    "                             (default: the library's, oj_engine_config_default)\n"
    "      --timing               one line on stderr at the end: the setup's seconds (model\n"
    "                             load, conversion, quantization), the prompt's and first\n"
    "                             token's, and the decode speed after the first token:\n"
    "                             (n - 1) tokens / their seconds\n"
    "  -h, --help                 this help\n"
    "Options take their value as '--top-k 5' or '--top-k=5' ('-k 5', '-k5').\n";

typedef struct {
    const oj_tokenizer *tok;
    const int32_t *stops; /* more end-of-sequence ids (generation_config.json) */
    int n_stops;
    int64_t shown;         /* tokens printed */
    double first_s, last_s; /* cli_now() when the first and the last were printed */
    int64_t n_undecodable;  /* tokens the tokenizer cannot decode (not printed) */
    int32_t first_undecodable;
} stream_ctx;

static bool print_token(int64_t seq, int32_t token, void *vctx) {
    (void)seq;
    stream_ctx *c = vctx;
    for (int i = 0; i < c->n_stops; i++)
        if (token == c->stops[i])
            return false; /* an end of sequence: stop, not shown */
    c->last_s = cli_now();
    if (c->shown++ == 0) c->first_s = c->last_s;
    char *text = NULL;
    size_t len = 0;
    oj_error e = {0};
    /* an id past the tokenizer (a padded vocab_size) has no text: skipped
     * as transformers' decode skips it, and counted for a warning */
    if (oj_tokenizer_decode(c->tok, &token, 1, OJ_DECODE_BYTES, &text, &len, &e) != OJ_OK) {
        if (c->n_undecodable++ == 0) c->first_undecodable = token;
        return true;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    free(text);
    return true;
}

enum { OPT_CHECKPOINT = 256, OPT_WEIGHTS, OPT_VOCAB, OPT_DTYPE, OPT_TOP_P, OPT_REP, OPT_BUDGET,
       OPT_NUMERICS,
       OPT_ADAPTER,
       OPT_QUANTIZE,
       OPT_TIMING };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"model", required_argument, NULL, 'm'},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"prompt", required_argument, NULL, 'p'},
    {"max-new-tokens", required_argument, NULL, 'n'},
    {"temperature", required_argument, NULL, 't'},
    {"top-k", required_argument, NULL, 'k'},
    {"top-p", required_argument, NULL, OPT_TOP_P},
    {"repetition-penalty", required_argument, NULL, OPT_REP},
    {"seed", required_argument, NULL, 's'},
    {"device", required_argument, NULL, 'd'},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"threads", required_argument, NULL, 'j'},
    {"budget-bytes", required_argument, NULL, OPT_BUDGET},
    {"numerics", required_argument, NULL, OPT_NUMERICS},
    {"adapter", required_argument, NULL, OPT_ADAPTER},
    {"quantize", required_argument, NULL, OPT_QUANTIZE},
    {"timing", no_argument, NULL, OPT_TIMING},
    {NULL, 0, NULL, 0},
};

int cmd_generate(int argc, char **argv) {
    const double t_start = cli_now();
    const char *ckpt = NULL, *weights = NULL, *preset = NULL, *vocab = NULL, *prompt = NULL;
    const char *device = "cpu", *dtype = "f32", *numerics = "fast", *adapter = NULL, *quantize = NULL;
    int64_t threads = 0;
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 200;
    sc.temperature = 0.8;
    sc.top_k = 40;
    int64_t budget = 0; /* 0: not given */
    bool given_n = false, given_t = false, given_k = false, given_p = false, given_r = false;
    bool timing = false;
    int c;
    cli_getopt_state g = {.cmd = "generate", .shortopts = "hm:p:n:t:k:s:d:j:", .longopts = k_long};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        const char *v = optarg;
        bool ok = true;
        switch (c) {
        case 'h':
            printf(k_help, sc.top_p, sc.repetition_penalty, (unsigned long long)sc.seed);
            return CLI_OK;
        case OPT_CHECKPOINT: ckpt = v; break;
        case OPT_WEIGHTS: weights = v; break;
        case 'm': preset = v; break;
        case OPT_VOCAB: vocab = v; break;
        case 'p': prompt = v; break;
        case 'd': device = v; break;
        case OPT_DTYPE: dtype = v; break;
        case OPT_NUMERICS: numerics = v; break;
        case 'j': ok = cli_parse_i64("generate: --threads", v, 0, 4096, &threads); break;
        case 'n': ok = given_n = cli_parse_i64("generate: --max-new-tokens", v, 0, 1 << 20, &sc.max_new_tokens); break;
        case 'k': ok = given_k = cli_parse_i64("generate: --top-k", v, 0, INT32_MAX, &sc.top_k); break;
        case 's': {
            int64_t sd;
            ok = cli_parse_i64("generate: --seed", v, 0, INT64_MAX, &sd);
            sc.seed = (uint64_t)sd;
            break;
        }
        case 't': ok = given_t = cli_parse_double("generate: --temperature", v, &sc.temperature); break;
        case OPT_TOP_P: ok = given_p = cli_parse_double("generate: --top-p", v, &sc.top_p); break;
        case OPT_REP: ok = given_r = cli_parse_double("generate: --repetition-penalty", v, &sc.repetition_penalty); break;
        case OPT_BUDGET: ok = cli_parse_bytes("generate: --budget-bytes", v, &budget); break;
        case OPT_ADAPTER: adapter = v; break;
        case OPT_QUANTIZE: quantize = v; break;
        case OPT_TIMING: timing = true; break;
        default: return CLI_USAGE;
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (optind < argc)
        return cli_unexpected("generate", argv[optind]);
    /* --model names a model directory unless --weights is given (then a preset) */
    const char *model_dir = weights == NULL ? preset : NULL;
    if (model_dir) preset = NULL;
    if ((ckpt != NULL) + (weights != NULL) + (model_dir != NULL) != 1)
        return cli_error(CLI_USAGE, "generate: give exactly one of --checkpoint, --model DIR or "
                                    "--weights FILE --model PRESET");
    if (weights && preset == NULL) return cli_error(CLI_USAGE, "generate: --weights needs --model PRESET");
    oj_gpt_config preset_cfg;
    size_t mlen = model_dir ? strlen(model_dir) : 0;
    const bool gguf = mlen > 5 && strcmp(model_dir + mlen - 5, ".gguf") == 0;
    if (model_dir && access(model_dir, F_OK) != 0)
        return cli_error(CLI_FAIL, "generate: %s '%s' does not exist%s",
                         gguf ? "GGUF file" : "model directory", model_dir,
                         oj_gpt_preset(model_dir, &preset_cfg) ? " (a preset goes with --weights FILE)"
                                                               : "");
    if (weights && !oj_gpt_preset(preset, &preset_cfg)) {
        char names[512];
        return cli_error(CLI_USAGE, "generate: unknown model preset '%s' (presets: %s)", preset,
                         oj_gpt_preset_list(names, sizeof names));
    }
    if (prompt == NULL || prompt[0] == '\0')
        return cli_error(CLI_USAGE, "generate: --prompt TEXT is required (and must not be empty)");
    /* each bad value by its option */
    if (!(sc.temperature >= 0) || isinf(sc.temperature))
        return cli_error(CLI_USAGE, "generate: --temperature: expected a finite value >= 0, got %g",
                         sc.temperature);
    if (!(sc.top_p > 0 && sc.top_p <= 1))
        return cli_error(CLI_USAGE, "generate: --top-p: expected a value in (0, 1], got %g", sc.top_p);
    if (!(sc.repetition_penalty > 0) || isinf(sc.repetition_penalty))
        return cli_error(CLI_USAGE,
                         "generate: --repetition-penalty: expected a finite value > 0, got %g",
                         sc.repetition_penalty);

    oj_qtype qt = OJ_QTYPE_COUNT;
    if (quantize && !oj_qtype_parse(quantize, &qt))
        return cli_error(CLI_USAGE, "generate: --quantize must be q8_0, q4_0, q4_1, q4_k or fp8, got '%s'",
                         quantize);
    if (quantize && strcmp(dtype, "f32") != 0)
        return cli_error(CLI_USAGE, "generate: --quantize goes with f32 weights, not --dtype %s",
                         dtype);
    oj_dtype wdt = strcmp(dtype, "bf16") == 0 ? OJ_BF16 : strcmp(dtype, "f16") == 0 ? OJ_F16 : OJ_F32;
    if (wdt == OJ_F32 && strcmp(dtype, "f32") != 0)
        return cli_error(CLI_USAGE, "generate: --dtype must be f32, bf16 or f16, got '%s'", dtype);

    oj_engine_config ec = oj_engine_config_default();
    if (!oj_device_parse(device, &ec.device))
        return cli_error(CLI_USAGE, "generate: --device must be cpu, cuda or cuda:N, got '%s'",
                         device);
    if (strcmp(numerics, "fast") != 0 && strcmp(numerics, "exact") != 0)
        return cli_error(CLI_USAGE, "generate: --numerics must be fast or exact, got '%s'", numerics);
    ec.numerics = strcmp(numerics, "exact") == 0 ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST;
    ec.threads = (int)threads;
    if (budget > 0)
        ec.budget_bytes = budget;

    /* The checkpoint first (a refused one is the real error, before any
     * question of --vocab), resolved once: the config and the weights come
     * from the same checkpoint directory. */
    oj_train_config run_cfg = oj_train_config_default();
    char ckpt_dir[4096] = "";
    if (ckpt) {
        if (access(ckpt, F_OK) != 0)
            return cli_error(CLI_FAIL, "generate: checkpoint '%s' does not exist", ckpt);
        oj_error ce = {0};
        if (cli_find_checkpoint("generate", ckpt, ckpt_dir, sizeof ckpt_dir, &run_cfg, &ce) != OJ_OK)
            return cli_error(CLI_FAIL, "generate: %s", ce.message);
        if (vocab == NULL && run_cfg.tokenizer_dir[0]) /* the tokenizer the run was trained with */
            vocab = run_cfg.tokenizer_dir;
    }
    if (vocab == NULL && model_dir && !gguf) vocab = model_dir; /* its tokenizer files */
    oj_error e = {0};
    oj_tokenizer *tok = NULL;
    if (vocab == NULL && model_dir && gguf) { /* the file's tokenizer.ggml.* */
        oj_gguf *file = NULL;
        oj_status gs = oj_gguf_open(model_dir, &file, &e);
        if (gs == OJ_OK) gs = oj_gguf_tokenizer(file, model_dir, &tok, &e);
        oj_gguf_close(file);
        if (gs != OJ_OK)
            return cli_error(gs == OJ_ERR_OUT_OF_RANGE ? CLI_USAGE : CLI_FAIL, "generate: %s%s",
                             e.message, gs == OJ_ERR_OUT_OF_RANGE ? ": give --vocab DIR" : "");
    } else {
        if (vocab == NULL)
            return cli_error(CLI_USAGE, "generate: --vocab DIR is required (the tokenizer; a "
                                        "checkpoint supplies it only when its run had a "
                                        "tokenizer_dir)");
        if (oj_tokenizer_load(vocab, &tok, &e) != OJ_OK)
            return cli_error(CLI_FAIL, "generate: %s%s", e.message,
                             vocab == run_cfg.tokenizer_dir
                                 ? " (the run's tokenizer_dir: give --vocab DIR)"
                             : vocab == model_dir ? " (the model directory's tokenizer: give --vocab DIR)"
                                                  : "");
    }
    oj_engine *eng = NULL;
    if (oj_engine_create(&ec, &eng, &e) != OJ_OK) {
        oj_tokenizer_free(tok);
        return cli_error(CLI_FAIL, "generate: %s", e.message);
    }
    int rc = CLI_FAIL;
    oj_gpt *m = NULL;
    oj_generation_config gc = {0};
    oj_gpt_config cfg;
    if (ckpt) { /* the model config is part of the training config in state.json */
        if (cli_gpt_from_checkpoint(eng, &run_cfg, tok, ckpt_dir, &m, &e) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.message);
            goto done;
        }
        cfg = *oj_gpt_get_config(m);
    } else if (model_dir) {
        if ((gguf ? oj_gpt_load_gguf(eng, model_dir, &m, &e)
                  : oj_gpt_load_dir(eng, model_dir, &m, &e)) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.message);
            goto done;
        }
        cfg = *oj_gpt_get_config(m);
        /* a GGUF file carries no generation_config.json */
        if (!gguf && oj_generation_config_load(model_dir, cfg.vocab_size, &gc, &e) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.message);
            goto done;
        }
    } else {
        oj_gpt_preset(preset, &cfg); /* known: checked with the arguments */
        if (oj_gpt_create(eng, &cfg, 0, &m) != OJ_OK ||
            oj_gpt_load_safetensors(m, weights, &e) != OJ_OK) {
            cli_error(CLI_FAIL, "generate: %s", e.status ? e.message : oj_last_error(eng));
            goto done;
        }
    }
    /* an adapter is folded into the weights first, so a quantized model
     * quantizes the merged weights */
    if (adapter && (oj_gpt_lora_load(m, adapter, &e) != OJ_OK || oj_gpt_lora_merge(m, &e) != OJ_OK)) {
        cli_error(CLI_FAIL, "generate: --adapter: %s", e.message);
        goto done;
    }
    if (qt != OJ_QTYPE_COUNT && cli_refuse_requantize(m, "generate", model_dir, qt))
        goto done;
    if (qt != OJ_QTYPE_COUNT && oj_gpt_quantize(m, qt) != OJ_OK) {
        cli_error(CLI_FAIL, "generate: %s", oj_last_error(eng));
        goto done;
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
    if (!cli_add_template_prefix(tok, &ids)) { /* Llama's BOS, as transformers' tokenizer adds it */
        oj_tokens_free(&ids);
        cli_error(CLI_FAIL, "generate: out of host memory");
        goto done;
    }
    sc.stop_token = oj_tokenizer_eot(tok);
    if (gc.found) { /* the model directory's defaults; options given win */
        if (!given_t) sc.temperature = gc.sampler.temperature;
        if (!given_k) sc.top_k = gc.sampler.top_k;
        if (!given_p) sc.top_p = gc.sampler.top_p;
        if (!given_r) sc.repetition_penalty = gc.sampler.repetition_penalty;
        if (!given_n && gc.sampler.max_new_tokens >= 0)
            sc.max_new_tokens = gc.sampler.max_new_tokens;
        else if (!given_n && gc.max_length >= 0)
            sc.max_new_tokens = gc.max_length > (int64_t)ids.len ? gc.max_length - (int64_t)ids.len : 0;
        if (sc.stop_token < 0 && gc.n_eos > 0) sc.stop_token = gc.eos_token_ids[0];
    }
    fputs(prompt, stdout);
    stream_ctx sctx = {tok, gc.eos_token_ids, gc.n_eos, 0, 0, 0, 0, -1};
    const double t_gen = cli_now();
    const int32_t *pp = ids.ids;
    int64_t plen = (int64_t)ids.len;
    int32_t *gen = NULL;
    int64_t glen = 0;
    oj_status gs = oj_generate(m, 1, &pp, &plen, &sc, &gen, &glen, print_token, &sctx);
    fputc('\n', stdout);
    fflush(stdout); /* the text's last line before any line on stderr */
    free(gen);
    oj_tokens_free(&ids);
    if (gs != OJ_OK) {
        cli_error(CLI_FAIL, "generate: %s", oj_last_error(eng));
        goto done;
    }
    if (sctx.n_undecodable > 0)
        fprintf(stderr,
                "ojas: generate: warning: %lld new token%s not shown: the tokenizer (%lld ids) "
                "cannot decode them (the first: id %d; the model's vocab_size is %lld)\n",
                (long long)sctx.n_undecodable, sctx.n_undecodable == 1 ? "" : "s",
                (long long)oj_tokenizer_vocab_size(tok), (int)sctx.first_undecodable,
                (long long)cfg.vocab_size);
    if (cfg.family != OJ_NANOLAB && glen < sc.max_new_tokens && plen + glen >= cfg.block_size)
        fprintf(stderr, "ojas: generate: stopped after %lld of %lld new tokens: the model's context "
                        "of %lld positions is full\n",
                (long long)glen, (long long)sc.max_new_tokens, (long long)cfg.block_size);
    if (timing && sctx.shown == 0) {
        fprintf(stderr, "ojas: generate: timing: setup %.3f s, prompt of %lld tokens, no new token\n",
                t_gen - t_start, (long long)plen);
    } else if (timing) { /* the decode speed: the tokens after the first, timed from it */
        const double dt = sctx.last_s - sctx.first_s;
        fprintf(stderr, "ojas: generate: timing: setup %.3f s, prompt of %lld tokens and first token "
                        "%.3f s",
                t_gen - t_start, (long long)plen, sctx.shown ? sctx.first_s - t_gen : 0.0);
        if (sctx.shown > 1 && dt > 0)
            fprintf(stderr, ", %lld more tokens in %.4f s: decode %.3f tok/s\n",
                    (long long)(sctx.shown - 1), dt, (double)(sctx.shown - 1) / dt);
        else
            fprintf(stderr, ", no decode to time (%lld token%s)\n", (long long)sctx.shown,
                    sctx.shown == 1 ? "" : "s");
    }
    rc = CLI_OK;
done:
    oj_gpt_free(m);
    oj_engine_free(eng);
    oj_tokenizer_free(tok);
    return rc;
}
