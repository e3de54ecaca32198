/* ojas tokenizer encode | decode | train */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ojas/data.h"

static const char k_usage[] =
    "usage: ojas tokenizer <encode|decode|train> [options]\n"
    "\n"
    "  ojas tokenizer encode --vocab DIR [FILE]\n"
    "      print the token ids of FILE (default stdin), separated by spaces\n"
    "      --allow-special    map \"<|endoftext|>\" in the text to its id\n"
    "      --special-as-text  encode special-token text as ordinary text\n"
    "                         (default: refuse text that contains one)\n"
    "  -j, --threads N        encode on N threads (default: all usable CPUs)\n"
    "      --pcre2            use the PCRE2 reference pre-tokeniser\n"
    "  ojas tokenizer decode --vocab DIR [FILE]\n"
    "      read whitespace-separated ids from FILE (default stdin), write the text\n"
    "      --strict           fail on invalid UTF-8 (default: U+FFFD replacement)\n"
    "      --bytes            write the raw bytes, unchecked\n"
    "  ojas tokenizer train --vocab-size N -o DIR FILE...\n"
    "      learn byte-level BPE merges; writes encoder.json, vocab.bpe, ranks.tiktoken\n"
    "  -o, --out DIR          the tokenizer directory (created when training is done)\n"
    "  -j, --threads N        threads for counting (default: all usable CPUs)\n"
    "      --min-frequency N  stop when the best pair occurs fewer times (default 2)\n"
    "  -h, --help             this help\n"
    "\n"
    "DIR holds encoder.json + vocab.bpe or vocab.json + merges.txt (GPT-2), one *.tiktoken\n"
    "rank file, or a Hugging Face tokenizer.json (encode and decode; train writes the first).\n"
    "Options take their value as '--vocab DIR' or '--vocab=DIR' ('-j 4', '-j4').\n";

enum { OPT_VOCAB = 256, OPT_ALLOW_SPECIAL, OPT_SPECIAL_AS_TEXT, OPT_PCRE2, OPT_STRICT, OPT_BYTES,
       OPT_VOCAB_SIZE, OPT_MIN_FREQUENCY };

static int load(const char *vocab, oj_tokenizer **tok) {
    if (!vocab)
        return cli_error(CLI_USAGE, "tokenizer: --vocab DIR is required");
    oj_error err = {0};
    if (oj_tokenizer_load(vocab, tok, &err))
        return cli_error(CLI_FAIL, "%s", err.message);
    return CLI_OK;
}

/* The library names its encode flags (OJ_ENCODE_ALLOW_SPECIAL); on the
 * command line they are options. Rewritten in place (the options are
 * shorter). */
static void flags_as_options(char *msg) {
    static const char *const from[2] = {"OJ_ENCODE_ALLOW_SPECIAL", "OJ_ENCODE_SPECIAL_AS_TEXT"};
    static const char *const to[2] = {"--allow-special", "--special-as-text"};
    for (int k = 0; k < 2; k++) {
        char *p;
        while ((p = strstr(msg, from[k]))) {
            size_t fl = strlen(from[k]), tl = strlen(to[k]);
            memcpy(p, to[k], tl);
            memmove(p + tl, p + fl, strlen(p + fl) + 1);
        }
    }
}

static int encode(int argc, char **argv) {
    static const struct option lo[] = {
        {"help", no_argument, NULL, 'h'},
        {"vocab", required_argument, NULL, OPT_VOCAB},
        {"allow-special", no_argument, NULL, OPT_ALLOW_SPECIAL},
        {"special-as-text", no_argument, NULL, OPT_SPECIAL_AS_TEXT},
        {"threads", required_argument, NULL, 'j'},
        {"pcre2", no_argument, NULL, OPT_PCRE2},
        {NULL, 0, NULL, 0},
    };
    const char *vocab = NULL, *file = NULL;
    unsigned flags = OJ_ENCODE_REFUSE_SPECIAL;
    int64_t threads = 0;
    bool pcre2 = false;
    int c;
    cli_getopt_state g = {.cmd = "tokenizer encode", .shortopts = "hj:", .longopts = lo};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        switch (c) {
        case 'h':
            fputs(k_usage, stdout);
            return CLI_OK;
        case OPT_VOCAB: vocab = optarg; break;
        case OPT_ALLOW_SPECIAL: flags = OJ_ENCODE_ALLOW_SPECIAL; break;
        case OPT_SPECIAL_AS_TEXT: flags = OJ_ENCODE_SPECIAL_AS_TEXT; break;
        case OPT_PCRE2: pcre2 = true; break;
        case 'j':
            if (!cli_parse_i64("tokenizer encode: --threads", optarg, 0, 1024, &threads))
                return CLI_USAGE;
            break;
        default: return CLI_USAGE;
        }
    }
    if (optind < argc)
        file = argv[optind++];
    if (optind < argc)
        return cli_error(CLI_USAGE, "tokenizer encode: one FILE at most, got '%s' too",
                         argv[optind]);
    oj_tokenizer *tok;
    int rc = load(vocab, &tok);
    if (rc)
        return rc;
    oj_error err = {0};
    if (pcre2 && oj_tokenizer_set_pretokenizer(tok, OJ_PRETOK_PCRE2, &err)) {
        oj_tokenizer_free(tok);
        return cli_error(CLI_FAIL, "%s", err.message);
    }
    size_t len;
    char *text = cli_read_all(file, &len);
    if (!text) {
        oj_tokenizer_free(tok);
        return CLI_FAIL;
    }
    oj_tokens ids = {0};
    oj_status st = oj_tokenizer_encode_parallel(tok, text, len, flags, (int)threads, &ids, &err);
    free(text);
    if (!st) {
        /* Every write is checked: a failed one stops the output (a full
         * disk or closed pipe past stdio's buffer is otherwise lost). */
        char buf[1 << 16];
        size_t o = 0;
        bool wrote = true;
        for (size_t i = 0; i < ids.len && wrote; i++) {
            if (o > sizeof buf - 16) {
                wrote = fwrite(buf, 1, o, stdout) == o;
                o = 0;
            }
            o += (size_t)snprintf(buf + o, 16, i + 1 < ids.len ? "%d " : "%d", (int)ids.ids[i]);
        }
        if (wrote) {
            buf[o++] = '\n';
            wrote = fwrite(buf, 1, o, stdout) == o;
        }
        if (!wrote || fflush(stdout) != 0 || ferror(stdout))
            st = oj_error_set(&err, OJ_ERR_IO, "tokenizer encode: cannot write the output");
    }
    oj_tokens_free(&ids);
    oj_tokenizer_free(tok);
    if (st)
        flags_as_options(err.message);
    return st ? cli_error(CLI_FAIL, "%s", err.message) : CLI_OK;
}

static int decode(int argc, char **argv) {
    static const struct option lo[] = {
        {"help", no_argument, NULL, 'h'},
        {"vocab", required_argument, NULL, OPT_VOCAB},
        {"strict", no_argument, NULL, OPT_STRICT},
        {"bytes", no_argument, NULL, OPT_BYTES},
        {NULL, 0, NULL, 0},
    };
    const char *vocab = NULL, *file = NULL;
    unsigned flags = OJ_DECODE_LOSSY;
    int c;
    cli_getopt_state g = {.cmd = "tokenizer decode", .shortopts = "h", .longopts = lo};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        switch (c) {
        case 'h':
            fputs(k_usage, stdout);
            return CLI_OK;
        case OPT_VOCAB: vocab = optarg; break;
        case OPT_STRICT: flags = OJ_DECODE_STRICT; break;
        case OPT_BYTES: flags = OJ_DECODE_BYTES; break;
        default: return CLI_USAGE;
        }
    }
    if (optind < argc)
        file = argv[optind++];
    if (optind < argc)
        return cli_error(CLI_USAGE, "tokenizer decode: one FILE at most, got '%s' too",
                         argv[optind]);
    oj_tokenizer *tok;
    int rc = load(vocab, &tok);
    if (rc)
        return rc;
    size_t len;
    char *text = cli_read_all(file, &len);
    if (!text) {
        oj_tokenizer_free(tok);
        return CLI_FAIL;
    }
    oj_tokens ids = {0};
    char *p = text, *lim = text + len;
    rc = CLI_OK;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',')
            p++;
        if (p == lim)
            break;
        char *end = p;
        long v = *p ? strtol(p, &end, 10) : 0;
        /* The text has its length: a NUL before its end is in the input,
         * not the end of it (byte offsets from 0, as below). */
        char *nul = !*p ? p : end != p && end < lim && !*end ? end : NULL;
        if (nul) {
            rc = cli_error(CLI_FAIL, "tokenizer decode: a NUL byte at byte %zu is not a token id",
                           (size_t)(nul - text));
            break;
        }
        if (end == p || v < 0 || v > INT32_MAX ||
            (*end && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r' && *end != ',')) {
            rc = cli_error(CLI_FAIL, "tokenizer decode: '%.20s' at byte %zu is not a token id", p,
                           (size_t)(p - text));
            break;
        }
        if (oj_tokens_push(&ids, (int32_t)v)) {
            rc = cli_error(CLI_FAIL, "tokenizer decode: out of memory");
            break;
        }
        p = end;
    }
    free(text);
    if (!rc) {
        oj_error err = {0};
        char *out;
        size_t olen;
        if (oj_tokenizer_decode(tok, ids.ids, ids.len, flags, &out, &olen, &err))
            rc = cli_error(CLI_FAIL, "%s", err.message);
        else {
            if (fwrite(out, 1, olen, stdout) != olen || fflush(stdout) != 0)
                rc = cli_error(CLI_FAIL, "tokenizer decode: cannot write the output");
            free(out);
        }
    }
    oj_tokens_free(&ids);
    oj_tokenizer_free(tok);
    return rc;
}

static int train(int argc, char **argv) {
    static const struct option lo[] = {
        {"help", no_argument, NULL, 'h'},
        {"vocab-size", required_argument, NULL, OPT_VOCAB_SIZE},
        {"out", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, 'j'},
        {"min-frequency", required_argument, NULL, OPT_MIN_FREQUENCY},
        {NULL, 0, NULL, 0},
    };
    oj_bpe_train_config cfg = oj_bpe_train_config_default();
    const char *out = NULL;
    int64_t vs = -1, threads = 0, minf = 2;
    int c, rc = CLI_OK;
    cli_getopt_state g = {.cmd = "tokenizer train", .shortopts = "ho:j:", .longopts = lo};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        bool ok = true;
        switch (c) {
        case 'h':
            fputs(k_usage, stdout);
            return CLI_OK;
        case OPT_VOCAB_SIZE: ok = cli_parse_i64("tokenizer train: --vocab-size", optarg, 257, INT32_MAX - 1, &vs); break;
        case 'o': out = optarg; break;
        case 'j': ok = cli_parse_i64("tokenizer train: --threads", optarg, 0, 1024, &threads); break;
        case OPT_MIN_FREQUENCY: ok = cli_parse_i64("tokenizer train: --min-frequency", optarg, 1, INT64_MAX, &minf); break;
        default: return CLI_USAGE;
        }
        if (!ok)
            return CLI_USAGE;
    }
    char **files = argv + optind;
    int nf = argc - optind;
    if (vs < 0 || !out || !out[0] || nf == 0)
        return cli_error(CLI_USAGE, "tokenizer train: --vocab-size N, --out DIR and at least one "
                                    "FILE are required");
    char **texts = rc ? NULL : calloc((size_t)nf, sizeof *texts);
    size_t *lens = rc ? NULL : calloc((size_t)nf, sizeof *lens);
    if (!rc && (!texts || !lens))
        rc = cli_error(CLI_FAIL, "out of memory");
    size_t total = 0;
    for (int i = 0; i < nf && !rc; i++) {
        if (!(texts[i] = cli_read_all(files[i], &lens[i])))
            rc = CLI_FAIL;
        else
            total += lens[i];
    }
    if (!rc) {
        cfg.vocab_size = (int32_t)vs;
        cfg.threads = (int)threads;
        cfg.min_frequency = minf;
        oj_tokenizer *tok = NULL;
        oj_error err = {0};
        double t0 = cli_now();
        if (oj_bpe_train(&cfg, (size_t)nf, (const char *const *)texts, lens, &tok, &err) ||
            oj_tokenizer_save(tok, out, &err))
            rc = cli_error(CLI_FAIL, "%s", err.message);
        else
            fprintf(stderr, "ojas: trained %d ids (%d requested) on %.2f MB in %.2f s -> %s\n",
                    (int)oj_tokenizer_vocab_size(tok), (int)vs, (double)total / 1e6, cli_now() - t0,
                    out);
        oj_tokenizer_free(tok);
    }
    for (int i = 0; texts && i < nf; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    static const cli_sub subs[] = {{"encode", encode}, {"decode", decode}, {"train", train}};
    return cli_dispatch(argc, argv, "tokenizer", k_usage, subs, 3);
}
