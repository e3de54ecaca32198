/* ojas data prepare */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ojas/data.h"

static const char k_usage[] =
    "usage: ojas data prepare --vocab DIR -o DIR [options] FILE...\n"
    "\n"
    "  tokenise text files into llm.c token shards OUT/train_NNNNNN.bin and\n"
    "  OUT/val_NNNNNN.bin; each file is split into documents at \"<|endoftext|>\"\n"
    "  and at the separator's text, and every document starts with the separator:\n"
    "  <|endoftext|>, else the EOS token the tokenizer directory names\n"
    "  (tokenizer_config.json eos_token, generation_config.json or config.json\n"
    "  eos_token_id; Llama 2: </s>)\n"
    "      --vocab DIR        the tokenizer (encoder.json + vocab.bpe, vocab.json +\n"
    "                         merges.txt, a *.tiktoken or a tokenizer.json)\n"
    "  -o, --out DIR          the shard directory (created once the files are read)\n"
    "      --val-fraction F   the last fraction F of the tokens go to val (default 0.1)\n"
    "      --shard-tokens N   tokens per shard (default 100000000)\n"
    "  -j, --threads N        encoding threads (default: all usable CPUs)\n"
    "      --version V        1 = uint16 tokens, 2 = uint32 (default: 1 if they fit)\n"
    "  -h, --help             this help\n"
    "  Options take their value as '--out DIR' or '--out=DIR' ('-o DIR', '-oDIR').\n";

enum { OPT_VOCAB = 256, OPT_VAL_FRACTION, OPT_SHARD_TOKENS, OPT_VERSION };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"out", required_argument, NULL, 'o'},
    {"val-fraction", required_argument, NULL, OPT_VAL_FRACTION},
    {"shard-tokens", required_argument, NULL, OPT_SHARD_TOKENS},
    {"threads", required_argument, NULL, 'j'},
    {"version", required_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static int prepare(int argc, char **argv) {
    oj_prepare_config cfg = oj_prepare_config_default();
    cfg.val_fraction = 0.1;
    const char *vocab = NULL;
    int64_t v64;
    int c;
    cli_getopt_state g = {.cmd = "data prepare", .shortopts = "ho:j:", .longopts = k_long};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        const char *v = optarg;
        bool ok = true;
        switch (c) {
        case 'h':
            fputs(k_usage, stdout);
            return CLI_OK;
        case OPT_VOCAB: vocab = v; break;
        case 'o': cfg.out_dir = v; break;
        case OPT_VAL_FRACTION:
            if ((ok = cli_parse_double("data prepare: --val-fraction", v, &cfg.val_fraction)) &&
                !(cfg.val_fraction >= 0 && cfg.val_fraction < 1))
                return cli_error(CLI_USAGE, "data prepare: --val-fraction %s is not in [0, 1)", v);
            break;
        case OPT_SHARD_TOKENS:
            ok = cli_parse_i64("data prepare: --shard-tokens", v, 1, INT32_MAX, &cfg.shard_tokens);
            break;
        case 'j':
            if ((ok = cli_parse_i64("data prepare: --threads", v, 0, 1024, &v64)))
                cfg.threads = (int)v64;
            break;
        case OPT_VERSION:
            if ((ok = cli_parse_i64("data prepare: --version", v, 1, 2, &v64)))
                cfg.version = (int)v64;
            break;
        default: return CLI_USAGE;
        }
        if (!ok)
            return CLI_USAGE;
    }
    char **files = argv + optind;
    int nf = argc - optind, rc = CLI_OK;
    if (!vocab || !cfg.out_dir || !cfg.out_dir[0] || nf == 0)
        return cli_error(CLI_USAGE, "data prepare: --vocab DIR, --out DIR and at least one FILE "
                                    "are required");
    oj_tokenizer *tok = NULL;
    oj_error err = {0};
    oj_prepare_stats s;
    if (oj_tokenizer_load(vocab, &tok, &err) ||
        oj_data_prepare(tok, &cfg, nf, (const char *const *)files, &s, &err))
        rc = cli_error(CLI_FAIL, "%s", err.message);
    else {
        size_t sl = 0;
        const uint8_t *sep = oj_tokenizer_token_bytes(tok, s.separator, &sl);
        printf("%lld document%s, %.2f MB -> train %lld tokens in %d shard(s), val %lld tokens in "
               "%d shard(s) in %s; each document after %.*s (id %d)\n",
               (long long)s.documents, s.documents == 1 ? "" : "s", (double)s.bytes / 1e6,
               (long long)s.train_tokens, s.train_shards, (long long)s.val_tokens, s.val_shards,
               cfg.out_dir, sep ? (int)sl : 0, sep ? (const char *)sep : "", (int)s.separator);
    }
    oj_tokenizer_free(tok);
    return rc;
}

int cmd_data(int argc, char **argv) {
    static const cli_sub subs[] = {{"prepare", prepare}};
    return cli_dispatch(argc, argv, "data", k_usage, subs, 1);
}
