/* Option parsing and file helpers shared by the subcommands. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(CLI_USAGE, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

char *cli_read_all(const char *path, size_t *len) {
    bool std = !path || strcmp(path, "-") == 0;
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f) {
        cli_error(CLI_FAIL, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb)
            free(b);
        b = nb;
    }
    bool bad = ferror(f);
    if (!std)
        fclose(f);
    if (!b || bad) {
        free(b);
        cli_error(CLI_FAIL, "cannot read %s: %s", std ? "stdin" : path,
                  b ? "read error" : "out of memory");
        return NULL;
    }
    b[n] = 0;
    *len = n;
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
