/* Option parsing and file helpers shared by the subcommands. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "core/fs.h"

bool cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ojas: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

bool cli_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(CLI_USAGE, "%s: expected an integer in [%lld, %lld], got '%s'", opt,
                  (long long)lo, (long long)hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_double(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        cli_error(CLI_USAGE, "%s: expected a number, got '%s'", opt, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_bytes(const char *opt, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int shift = 0;
    if (end != s && *end) {
        const char *units = "kmgt", *u = strchr(units, tolower((unsigned char)*end));
        if (u) {
            shift = 10 * (int)(u - units + 1);
            end++;
            if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
                end += strlen(end);
        }
    }
    if (errno || end == s || *end || v <= 0 || v > (INT64_MAX >> shift)) {
        cli_error(CLI_USAGE, "%s: expected a positive byte count (suffix K, M, G or T: powers of "
                             "1024), got '%s'",
                  opt, s);
        return false;
    }
    *out = (int64_t)v << shift;
    return true;
}

/* The long option whose val is `val`, or NULL. */
static const struct option *long_by_val(const struct option *lo, int val) {
    for (; lo->name; lo++)
        if (lo->val == val && !lo->flag)
            return lo;
    return NULL;
}

/* Print how an option's name was written: "--name" for a long option (the
 * argument that failed, up to any '='), "-c" for a short one. */
static void option_name(char *buf, size_t len, const char *arg, const cli_getopt_state *g, int val) {
    if (arg && strncmp(arg, "--", 2) == 0) {
        snprintf(buf, len, "%.*s", (int)strcspn(arg, "="), arg);
        return;
    }
    const struct option *lo = long_by_val(g->longopts, val);
    if (val > 0 && val < 256)
        snprintf(buf, len, "-%c", val);
    else
        snprintf(buf, len, "--%s", lo ? lo->name : "?");
}

int cli_getopt(cli_getopt_state *g, int argc, char **argv) {
    char optstring[128];
    /* ':' first: a missing value is reported as ':' rather than '?' */
    snprintf(optstring, sizeof optstring, ":%s", g->shortopts);
    if (!g->started) {
        optind = 0; /* glibc: a full re-initialisation */
        g->started = true;
    }
    opterr = 0;
    optopt = 0;
    int c = getopt_long(argc, argv, optstring, g->longopts, NULL);
    if (c != '?' && c != ':')
        return c;
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : NULL;
    char name[128];
    if (c == ':') {
        option_name(name, sizeof name, arg, g, optopt);
        cli_error(CLI_USAGE, "%s: option '%s' needs a value", g->cmd, name);
    } else if (optopt == 0) { /* an unknown or ambiguous long option; optind is past it */
        option_name(name, sizeof name, arg, g, 0);
        char matches[256] = "";
        int n = 0;
        size_t nl = strlen(name + 2);
        for (const struct option *lo = g->longopts; lo->name; lo++)
            if (strncmp(lo->name, name + 2, nl) == 0) {
                size_t ml = strlen(matches);
                snprintf(matches + ml, sizeof matches - ml, "%s--%s", n++ ? ", " : "", lo->name);
            }
        if (n > 1)
            cli_error(CLI_USAGE, "%s: option '%s' is ambiguous (%s)", g->cmd, name, matches);
        else
            cli_error(CLI_USAGE, "%s: unknown option '%s' (see 'ojas %s --help')", g->cmd, name,
                      g->cmd);
    } else if (long_by_val(g->longopts, optopt) && arg && strncmp(arg, "--", 2) == 0 &&
               strchr(arg, '=')) { /* "--flag=value" for a flag */
        option_name(name, sizeof name, arg, g, optopt);
        cli_error(CLI_USAGE, "%s: option '%s' takes no value", g->cmd, name);
    } else {
        cli_error(CLI_USAGE, "%s: unknown option '-%c' (see 'ojas %s --help')", g->cmd,
                  optopt > 32 && optopt < 127 ? optopt : '?', g->cmd);
    }
    return '?';
}

int cli_unexpected(const char *cmd, const char *arg) {
    return cli_error(CLI_USAGE, "%s: unexpected argument '%s' (see 'ojas %s --help')", cmd, arg,
                     cmd);
}

char *cli_read_all(const char *path, size_t *len) {
    bool std = !path || strcmp(path, "-") == 0;
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f) {
        cli_error(CLI_FAIL, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *b;
    oj_status st = oj__read_stream(f, std ? "stdin" : path, &b, len, NULL);
    if (!std)
        fclose(f);
    if (st) {
        cli_error(CLI_FAIL, "cannot read %s: %s", std ? "stdin" : path,
                  st == OJ_ERR_CAPACITY ? "out of memory" : "read error");
        return NULL;
    }
    return b;
}

int cli_dispatch(int argc, char **argv, const char *cmd, const char *usage, const cli_sub *subs,
                 int n) {
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1])) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    for (int i = 0; i < n; i++)
        if (strcmp(argv[1], subs[i].name) == 0) return subs[i].fn(argc - 1, argv + 1);
    char names[256] = "";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                 subs[i].name);
    }
    return cli_error(CLI_USAGE, "%s: unknown subcommand '%s' (%s)", cmd, argv[1], names);
}

oj_status cli_gpt_from_checkpoint(oj_engine *eng, const oj_train_config *run,
                                  const oj_tokenizer *tok, const char *dir, oj_gpt **m,
                                  oj_error *e) {
    *m = NULL;
    oj_gpt_config cfg;
    oj_status s = oj_train_model_config(
        run, run->tokenizer_dir[0] && tok ? oj_tokenizer_vocab_size(tok) : 0, &cfg, e);
    if (s != OJ_OK) return s;
    if ((s = oj_gpt_create(eng, &cfg, 0, m)) != OJ_OK)
        return oj_error_set(e, s, "%s", oj_last_error(eng));
    oj_named_tensors sd = oj_gpt_state_dict(*m);
    oj_checkpoint_info info = {0};
    s = oj_checkpoint_load(dir, &sd, NULL, &info, e);
    free(info.state_json);
    if (s != OJ_OK) {
        oj_gpt_free(*m);
        *m = NULL;
    }
    return s;
}

bool cli_refuse_nanolab(const oj_gpt *m, const char *cmd, const char *src, const char *lacks,
                        const char *verb) {
    if (oj_gpt_get_config(m)->family != OJ_NANOLAB)
        return false;
    cli_error(CLI_FAIL,
              "%s: '%s' is a nanolab model, which has no %s (gpt2 and llama-family models %s): "
              "train a gpt2 preset (--set model=gpt2-tiny, ...) or fine-tune a Hugging Face "
              "model directory (--init-from DIR)",
              cmd, src, lacks, verb);
    return true;
}

bool cli_refuse_requantize(const oj_gpt *m, const char *cmd, const char *src, oj_qtype t) {
    oj_qtype have = oj_gpt_quantized_type(m);
    if (have == OJ_QTYPE_COUNT)
        return false;
    cli_error(CLI_FAIL,
              "%s: '%s' is already %s: quantizing it to %s would round its weights twice; quantize "
              "the f32/bf16 model instead%s",
              cmd, src ? src : "the model", oj_qtype_name(have), oj_qtype_name(t),
              strcmp(cmd, "quantize") == 0 ? " (or pass --allow-requantize)"
                                            : " (or run the file as it is, without --quantize)");
    return true;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool cli_add_template_prefix(const oj_tokenizer *tok, oj_tokens *ids) {
    const int32_t *pre = NULL;
    size_t n = 0;
    oj_tokenizer_template(tok, &pre, &n, NULL, NULL);
    if (n == 0 || (ids->len >= n && memcmp(ids->ids, pre, n * sizeof *pre) == 0)) return true;
    int32_t *v = malloc((ids->len + n) * sizeof *v);
    if (v == NULL) return false;
    memcpy(v, pre, n * sizeof *v);
    if (ids->len) memcpy(v + n, ids->ids, ids->len * sizeof *v);
    free(ids->ids);
    ids->ids = v;
    ids->len += n;
    ids->cap = ids->len;
    return true;
}

oj_status cli_find_checkpoint(const char *cmd, const char *ckpt, char *dir, size_t len,
                              oj_train_config *run, oj_error *e) {
    int skipped = 0;
    oj_error why = {0};
    oj_status s = oj_checkpoint_find(ckpt, dir, len, &skipped, &why, e);
    if (s == OJ_OK) s = oj_train_config_from_checkpoint(dir, run, e);
    if (s == OJ_OK && skipped)
        fprintf(stderr,
                "ojas: warning: %s: skipped %d newer checkpoint(s) under %s that failed "
                "verification (the newest: %s); using %s\n",
                cmd, skipped, ckpt, why.message, dir);
    return s;
}
