/* ojas export --hf: write a Hugging Face model directory from an ojas
 * checkpoint or a model directory ojas loads. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "ojas/data.h"
#include "ojas/gpt.h"
#include "ojas/train.h"

static const char *k_help =
    "usage: ojas export --hf OUTDIR (--checkpoint DIR | -m MODEL_DIR) [--vocab DIR]\n"
    "                   [--adapter DIR] [--force]\n"
    "Write a Hugging Face model directory: config.json, model.safetensors (transformers'\n"
    "tensor names, a tied head left out) and the tokenizer's files, which transformers'\n"
    "from_pretrained and 'ojas generate -m OUTDIR' load. gpt2 and llama-family models\n"
    "(Llama, Mistral, Qwen2, Qwen3 shapes) export; nanolab ones have no transformers class.\n"
    "      --hf OUTDIR          the directory to write: created, or an empty one\n"
    "      --force              write into an OUTDIR that holds files: files of the\n"
    "                           names export writes are replaced, others stay (never\n"
    "                           the --model or checkpoint directory being read)\n"
    "      --checkpoint DIR     a checkpoint directory written by 'ojas train', or its run\n"
    "                           directory (its newest verified checkpoint)\n"
    "  -m, --model DIR          a Hugging Face model directory (re-exported with its\n"
    "                           generation_config.json unless --vocab names another)\n"
    "      --vocab DIR          the tokenizer (default: the checkpoint's run's tokenizer_dir,\n"
    "                           or the model directory); its files are copied, and the\n"
    "                           embedding and head keep its vocabulary's rows when the\n"
    "                           model's vocab_size is larger (padded)\n"
    "      --adapter DIR        a PEFT LoRA adapter directory (as 'ojas train' writes in\n"
    "                           OUT/adapter), folded into the exported weights\n"
    "  -h, --help               this help\n";

enum { OPT_HF = 256, OPT_CHECKPOINT, OPT_VOCAB, OPT_ADAPTER, OPT_FORCE };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"hf", required_argument, NULL, OPT_HF},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"model", required_argument, NULL, 'm'},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"adapter", required_argument, NULL, OPT_ADAPTER},
    {"force", no_argument, NULL, OPT_FORCE},
    {NULL, 0, NULL, 0},
};

/* OUTDIR may be written: it does not exist, or is an empty directory, or
 * force is set. CLI_OK, or the refusal printed and its code. */
static int check_out_dir(const char *out, bool force) {
    struct stat st;
    if (stat(out, &st) != 0) {
        if (errno == ENOENT) return CLI_OK;
        return cli_error(CLI_FAIL, "export: --hf '%s': %s", out, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return cli_error(CLI_FAIL, "export: --hf '%s' exists and is not a directory", out);
    if (force) return CLI_OK;
    DIR *d = opendir(out);
    if (d == NULL) return cli_error(CLI_FAIL, "export: --hf '%s': %s", out, strerror(errno));
    char first[256] = "";
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        size_t i = 0; /* a control character would break the one-line message */
        for (; de->d_name[i] && i + 1 < sizeof first; i++) {
            unsigned char ch = (unsigned char)de->d_name[i];
            first[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
        }
        first[i] = '\0';
        break;
    }
    closedir(d);
    if (first[0])
        return cli_error(CLI_FAIL, "export: --hf directory '%s' is not empty (it holds %s); give "
                                   "--force to write into it", out, first);
    return CLI_OK;
}

/* OUTDIR is not `src`, the directory the export reads (the same file by
 * device and inode, however either is spelled): --force would write over
 * the weights being read. CLI_OK, or the refusal printed and its code. */
static int check_not_source(const char *out, const char *src, const char *what) {
    struct stat a, b;
    if (stat(out, &a) != 0 || stat(src, &b) != 0) return CLI_OK; /* OUTDIR is new */
    if (a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return cli_error(CLI_FAIL, "export: --hf '%s' is the %s directory itself (%s); export "
                                   "to another directory", out, what, src);
    return CLI_OK;
}

int cmd_export(int argc, char **argv) {
    const char *out = NULL, *ckpt = NULL, *model_dir = NULL, *vocab = NULL, *adapter = NULL;
    bool force = false;
    int c;
    cli_getopt_state g = {.cmd = "export", .shortopts = "hm:", .longopts = k_long};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        switch (c) {
        case 'h': fputs(k_help, stdout); return CLI_OK;
        case OPT_HF: out = optarg; break;
        case OPT_CHECKPOINT: ckpt = optarg; break;
        case 'm': model_dir = optarg; break;
        case OPT_VOCAB: vocab = optarg; break;
        case OPT_ADAPTER: adapter = optarg; break;
        case OPT_FORCE: force = true; break;
        default: return CLI_USAGE;
        }
    }
    if (optind < argc) return cli_unexpected("export", argv[optind]);
    if (out == NULL || out[0] == '\0')
        return cli_error(CLI_USAGE, "export: --hf OUTDIR is required");
    if ((ckpt != NULL) + (model_dir != NULL) != 1)
        return cli_error(CLI_USAGE, "export: give exactly one of --checkpoint DIR or --model DIR");
    int orc = check_out_dir(out, force);
    if (orc != CLI_OK) return orc;

    oj_train_config run_cfg = oj_train_config_default();
    char ckpt_dir[4096] = "";
    if (ckpt) {
        oj_error ce = {0};
        if (access(ckpt, F_OK) != 0)
            return cli_error(CLI_FAIL, "export: checkpoint '%s' does not exist", ckpt);
        if (cli_find_checkpoint("export", ckpt, ckpt_dir, sizeof ckpt_dir, &run_cfg, &ce) != OJ_OK)
            return cli_error(CLI_FAIL, "export: %s", ce.message);
        if (vocab == NULL && run_cfg.tokenizer_dir[0]) vocab = run_cfg.tokenizer_dir;
        orc = check_not_source(out, ckpt_dir, "checkpoint");
    } else if (access(model_dir, F_OK) != 0) {
        return cli_error(CLI_FAIL, "export: model directory '%s' does not exist", model_dir);
    } else {
        orc = check_not_source(out, model_dir, "model");
    }
    if (orc != CLI_OK) return orc;
    oj_error e = {0};
    oj_tokenizer *tok = NULL;
    if (vocab && oj_tokenizer_load(vocab, &tok, &e) != OJ_OK)
        return cli_error(CLI_FAIL, "export: %s", e.message);
    if (vocab == NULL && model_dir) { /* the model directory's tokenizer, if it has one */
        if (oj_tokenizer_load(model_dir, &tok, NULL) == OJ_OK) vocab = model_dir;
    }
    oj_engine_config ec = oj_engine_config_default();
    ec.threads = 1;
    oj_engine *eng = NULL;
    if (oj_engine_create(&ec, &eng, &e) != OJ_OK) {
        oj_tokenizer_free(tok);
        return cli_error(CLI_FAIL, "export: %s", e.message);
    }
    int rc = CLI_FAIL;
    oj_gpt *m = NULL;
    if (ckpt) {
        if (cli_gpt_from_checkpoint(eng, &run_cfg, tok, ckpt_dir, &m, &e) != OJ_OK) {
            cli_error(CLI_FAIL, "export: %s", e.message);
            goto done;
        }
    } else if (oj_gpt_load_dir(eng, model_dir, &m, &e) != OJ_OK) {
        cli_error(CLI_FAIL, "export: %s", e.message);
        goto done;
    }
    if (cli_refuse_nanolab(m, "export", ckpt ? ckpt : model_dir, "transformers architecture",
                           "export"))
        goto done;
    if (adapter && (oj_gpt_lora_load(m, adapter, &e) != OJ_OK || oj_gpt_lora_merge(m, &e) != OJ_OK)) {
        cli_error(CLI_FAIL, "export: --adapter: %s", e.message);
        goto done;
    }
    int64_t V = oj_gpt_get_config(m)->vocab_size, tv = tok ? oj_tokenizer_vocab_size(tok) : 0;
    if (tv > V) {
        cli_error(CLI_FAIL, "export: the tokenizer of %s has %lld ids, more than the model's "
                            "vocab_size %lld",
                  vocab, (long long)tv, (long long)V);
        goto done;
    }
    if (oj_gpt_save_hf_dir(m, out, tv > 0 ? tv : 0, &e) != OJ_OK ||
        (vocab && oj_hf_copy_files(vocab, out, &e) != OJ_OK)) {
        cli_error(CLI_FAIL, "export: %s", e.message);
        goto done;
    }
    printf("exported %s (%lld of %lld vocabulary rows%s) to %s\n", ckpt ? ckpt_dir : model_dir,
           (long long)(tv > 0 ? tv : V), (long long)V, vocab ? ", tokenizer files copied" : "",
           out);
    rc = CLI_OK;
done:
    oj_gpt_free(m);
    oj_engine_free(eng);
    oj_tokenizer_free(tok);
    return rc;
}
