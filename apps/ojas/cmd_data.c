/* ojas data prepare */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ojas/data.h"

static const char k_usage[] =
    "usage: ojas data prepare --vocab DIR --out DIR [options] FILE...\n"
    "\n"
    "  tokenise text files into llm.c token shards OUT/train_NNNNNN.bin and\n"
    "  OUT/val_NNNNNN.bin; each file is split into documents at \"<|endoftext|>\"\n"
    "  and every document starts with the end-of-text token\n"
    "      --val-fraction F   the last fraction F of the tokens go to val (default 0.1)\n"
    "      --shard-tokens N   tokens per shard (default 100000000)\n"
    "      --threads N        encoding threads (default: all usable CPUs)\n"
    "      --version V        1 = uint16 tokens, 2 = uint32 (default: 1 if they fit)\n";

static int prepare(int argc, char **argv) {
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.val_fraction = 0.1;
    const char *vocab = NULL;
    int64_t v64;
    char **files = calloc((size_t)argc, sizeof *files);
    int nf = 0, rc = CLI_OK;
    if (!files)
        return cli_error(CLI_FAIL, "out of memory");
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) {
            fputs(k_usage, stdout);
            free(files);
            return CLI_OK;
        } else if (strcmp(a, "--vocab") == 0) {
            if (!(vocab = cli_value(argc, argv, &i)))
                rc = CLI_USAGE;
        } else if (strcmp(a, "--out") == 0) {
            if (!(cfg.out_dir = cli_value(argc, argv, &i)))
                rc = CLI_USAGE;
        } else if (strcmp(a, "--val-fraction") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_double(a, v, &cfg.val_fraction))
                rc = CLI_USAGE;
            else if (!(cfg.val_fraction >= 0 && cfg.val_fraction < 1))
                rc = cli_error(CLI_USAGE, "--val-fraction: %s is not in [0, 1)", v);
        } else if (strcmp(a, "--shard-tokens") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_i64(a, v, 1, INT32_MAX, &cfg.shard_tokens))
                rc = CLI_USAGE;
        } else if (strcmp(a, "--threads") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_i64(a, v, 0, 1024, &v64))
                rc = CLI_USAGE;
            else
                cfg.threads = (int)v64;
        } else if (strcmp(a, "--version") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_i64(a, v, 1, 2, &v64))
                rc = CLI_USAGE;
            else
                cfg.version = (int)v64;
        } else if (a[0] == '-' && a[1])
            rc = cli_error(CLI_USAGE, "data prepare: unknown option %s", a);
        else
            files[nf++] = argv[i];
    }
    if (!rc && (!vocab || !cfg.out_dir || nf == 0))
        rc = cli_error(CLI_USAGE, "data prepare: --vocab DIR, --out DIR and at least one FILE are "
                                  "required");
    if (!rc) {
        oj_tokenizer *tok = NULL;
        oj_error err = {0};
        oj_prepare_stats s;
        if (oj_tokenizer_load(vocab, &tok, &err) ||
            oj_data_prepare(tok, &cfg, nf, (const char *const *)files, &s, &err))
            rc = cli_error(CLI_FAIL, "%s", err.message);
        else
            printf("%lld documents, %.2f MB -> train %lld tokens in %d shard(s), val %lld tokens in "
                   "%d shard(s) in %s\n",
                   (long long)s.documents, (double)s.bytes / 1e6, (long long)s.train_tokens,
                   s.train_shards, (long long)s.val_tokens, s.val_shards, cfg.out_dir);
        oj_tokenizer_free(tok);
    }
    free(files);
    return rc;
}

int cmd_data(int argc, char **argv) {
    static const cli_sub subs[] = {{"prepare", prepare}};
    return cli_dispatch(argc, argv, "data", k_usage, subs, 1);
}
