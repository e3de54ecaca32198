/* ojas quantize: write a model as a GGUF file (llama.cpp's layout) with
 * its linear weights quantized. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ojas/data.h"
#include "ojas/gpt.h"
#include "ojas/train.h"

static const char *k_help =
    "usage: ojas quantize (-m MODEL_DIR|FILE.gguf | --checkpoint DIR) --to TYPE -o FILE.gguf\n"
    "Write a GPT-2 or Llama-family model as a GGUF file in llama.cpp's layout, its linear\n"
    "weights quantized (embeddings, norms and biases stay f32).\n"
    "  -m, --model DIR|FILE       a Hugging Face model directory (GPT2LMHeadModel,\n"
    "                             LlamaForCausalLM, MistralForCausalLM) or a GGUF file\n"
    "      --checkpoint DIR       a checkpoint written by 'ojas train' (gpt2 preset), or its\n"
    "                             run directory\n"
    "      --to TYPE              q8_0 | q4_0 | q4_1 | q4_k (ggml's formats), or f32, bf16,\n"
    "                             f16: the matrices in that type, unquantized (fp8 has no\n"
    "                             GGUF type: 'ojas generate --quantize fp8')\n"
    "  -o, --out FILE.gguf        the file to write (replaced atomically)\n"
    "      --vocab DIR            a GPT-2 byte-level BPE tokenizer (encoder.json + vocab.bpe,\n"
    "                             or vocab.json + merges.txt) written into the file as\n"
    "                             tokenizer.ggml.* (default: the checkpoint run's\n"
    "                             tokenizer_dir, or the model directory's files; without\n"
    "                             one the file says no_vocab)\n"
    "      --name NAME            general.name in the file\n"
    "      --allow-requantize     quantize a file that is already quantized (its weights are\n"
    "                             rounded twice: refused without this, as llama.cpp does)\n"
    "  -j, --threads N            CPU threads (default 0: all usable CPUs)\n"
    "  -h, --help                 this help\n";

enum { OPT_CHECKPOINT = 256, OPT_TO, OPT_NAME, OPT_VOCAB, OPT_REQUANT };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, 'm'},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"to", required_argument, NULL, OPT_TO},
    {"out", required_argument, NULL, 'o'},
    {"name", required_argument, NULL, OPT_NAME},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"threads", required_argument, NULL, 'j'},
    {"allow-requantize", no_argument, NULL, OPT_REQUANT},
    {NULL, 0, NULL, 0},
};

static bool is_gguf(const char *path) {
    size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".gguf") == 0;
}

/* dir/a, else dir/b, into buf; false when neither exists. */
static bool find_file(char *buf, size_t n, const char *dir, const char *a, const char *b) {
    snprintf(buf, n, "%s/%s", dir, a);
    if (access(buf, R_OK) == 0) return true;
    snprintf(buf, n, "%s/%s", dir, b);
    return access(buf, R_OK) == 0;
}

/* The model of a checkpoint (its state.json's config, the tokenizer's
 * vocabulary when the run had one). */
static oj_status load_checkpoint(oj_engine *eng, const char *ckpt, oj_gpt **m, char *tok_dir,
                                 size_t tok_len, oj_error *e) {
    char dir[4096];
    oj_train_config tc = oj_train_config_default();
    oj_status s = cli_find_checkpoint("quantize", ckpt, dir, sizeof dir, &tc, e);
    if (s != OJ_OK) return s;
    snprintf(tok_dir, tok_len, "%s", tc.tokenizer_dir);
    oj_tokenizer *tok = NULL;
    if (tc.tokenizer_dir[0] && (s = oj_tokenizer_load(tc.tokenizer_dir, &tok, e)) != OJ_OK) return s;
    s = cli_gpt_from_checkpoint(eng, &tc, tok, dir, m, e);
    oj_tokenizer_free(tok);
    return s;
}

int cmd_quantize(int argc, char **argv) {
    const char *model = NULL, *ckpt = NULL, *to = NULL, *out = NULL, *name = NULL, *vocab = NULL;
    int64_t threads = 0;
    bool requant = false;
    int c;
    cli_getopt_state g = {.cmd = "quantize", .shortopts = "hm:o:j:", .longopts = k_long};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        bool ok = true;
        switch (c) {
        case 'h': fputs(k_help, stdout); return CLI_OK;
        case 'm': model = optarg; break;
        case OPT_CHECKPOINT: ckpt = optarg; break;
        case OPT_TO: to = optarg; break;
        case 'o': out = optarg; break;
        case OPT_NAME: name = optarg; break;
        case OPT_VOCAB: vocab = optarg; break;
        case OPT_REQUANT: requant = true; break;
        case 'j': ok = cli_parse_i64("quantize: --threads", optarg, 0, 4096, &threads); break;
        default: return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) return cli_unexpected("quantize", argv[optind]);
    if ((model != NULL) + (ckpt != NULL) != 1)
        return cli_error(CLI_USAGE, "quantize: give exactly one of --model and --checkpoint");
    oj_qtype qt = OJ_QTYPE_COUNT;
    /* unquantized: the matrices' dtype (f32 as loaded, or converted) */
    const oj_dtype half = to && strcmp(to, "bf16") == 0 ? OJ_BF16 : to && strcmp(to, "f16") == 0 ? OJ_F16 : OJ_F32;
    if (to == NULL || (strcmp(to, "f32") != 0 && half == OJ_F32 && !oj_qtype_parse(to, &qt)))
        return cli_error(CLI_USAGE, "quantize: --to must be q8_0, q4_0, q4_1, q4_k, f32, bf16 or f16%s%s%s",
                         to ? ", got '" : "", to ? to : "", to ? "'" : "");
    if (qt == OJ_FP8_E4M3)
        return cli_error(CLI_USAGE, "quantize: --to fp8 has no GGUF (ggml) type to write; quantize "
                                    "at load instead: ojas generate --quantize fp8");
    if (out == NULL || !is_gguf(out))
        return cli_error(CLI_USAGE, "quantize: --out FILE.gguf is required (a name ending in .gguf)");
    const char *src = model ? model : ckpt;
    if (access(src, F_OK) != 0)
        return cli_error(CLI_FAIL, "quantize: '%s' does not exist", src);

    oj_engine_config ec = oj_engine_config_default();
    ec.threads = (int)threads;
    oj_error e = {0};
    oj_engine *eng = NULL;
    if (oj_engine_create(&ec, &eng, &e) != OJ_OK) return cli_error(CLI_FAIL, "quantize: %s", e.message);
    oj_gpt *m = NULL;
    oj_gguf_writer *w = oj_gguf_writer_new();
    char run_tok[4096] = "", probe[4200];
    oj_status s = ckpt             ? load_checkpoint(eng, ckpt, &m, run_tok, sizeof run_tok, &e)
                  : is_gguf(model) ? oj_gpt_load_gguf(eng, model, &m, &e)
                                   : oj_gpt_load_dir(eng, model, &m, &e);
    int rc = CLI_FAIL;
    if (s != OJ_OK) {
        cli_error(CLI_FAIL, "quantize: %s", e.status ? e.message : oj_last_error(eng));
        goto done;
    }
    if (cli_refuse_nanolab(m, "quantize", ckpt ? ckpt : model, "GGUF layout", "quantize"))
        goto done;
    if (qt != OJ_QTYPE_COUNT && !requant && cli_refuse_requantize(m, "quantize", model, qt))
        goto done;
    if (qt != OJ_QTYPE_COUNT && oj_gpt_quantize(m, qt) != OJ_OK) {
        const char *why = oj_last_error(eng); /* the library's, which names its op already */
        cli_error(CLI_FAIL, "%s%s", strncmp(why, "quantize: ", 10) == 0 ? "" : "quantize: ", why);
        goto done;
    }
    if (qt == OJ_QTYPE_COUNT && oj_gpt_quantized_type(m) != OJ_QTYPE_COUNT) {
        cli_error(CLI_FAIL, "quantize: --to %s from a quantized file is not supported (its "
                            "weights would stay quantized values)", to);
        goto done;
    }
    if (half != OJ_F32 && oj_gpt_to_dtype(m, half) != OJ_OK) {
        cli_error(CLI_FAIL, "quantize: %s", oj_last_error(eng));
        goto done;
    }
    if (vocab == NULL && run_tok[0]) vocab = run_tok;
    if (vocab == NULL && model && !is_gguf(model) &&
        find_file(probe, sizeof probe, model, "encoder.json", "vocab.json"))
        vocab = model;
    if (vocab && oj_gguf_add_gpt2_tokenizer(w, vocab, oj_gpt_get_config(m)->vocab_size, &e) != OJ_OK) {
        cli_error(CLI_FAIL, "quantize: tokenizer: %s", e.message);
        goto done;
    }
    if (vocab == NULL && model && is_gguf(model)) { /* the source file's tokenizer.ggml.* */
        oj_gguf *src_file = NULL;
        oj_status ts = oj_gguf_open(model, &src_file, &e);
        if (ts == OJ_OK) ts = oj_gguf_copy_tokenizer(w, src_file, &e);
        oj_gguf_close(src_file);
        if (ts != OJ_OK) {
            cli_error(CLI_FAIL, "quantize: tokenizer of %s: %s", model, e.message);
            goto done;
        }
    }
    if (oj_gpt_save_gguf(m, w, out, name, &e) != OJ_OK) {
        cli_error(CLI_FAIL, "quantize: %s", e.message);
        goto done;
    }
    fprintf(stderr, "ojas: quantize: wrote %s (%s, %lld parameters, %.2f MiB of weights read per "
                    "token)\n",
            out, to, (long long)oj_gpt_num_params(m), (double)oj_gpt_decode_bytes(m) / 1048576.0);
    rc = CLI_OK;
done:
    oj_gguf_writer_free(w);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return rc;
}
