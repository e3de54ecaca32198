/* Helpers shared by the tests that run the `ojas` binary: read a file whole,
 * run `ojas ARGS` in a directory with its output in files, check that an
 * error is one line, and write a small fixed corpus. */
#ifndef OJAS_CLI_TESTUTIL_H
#define OJAS_CLI_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#define CT_OJAS OJAS_BINARY_DIR "/bin/ojas"

/* The whole of PATH, NUL-terminated, or NULL when it cannot be opened;
 * free() the result. */
static inline char *ct_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

/* Run `ojas ARGS` in DIR with stdout and stderr in DIR/out.txt and
 * DIR/err.txt; the exit code (-1 when it did not exit normally). Where OUT
 * or ERR is not NULL it gets that file's text (free it). */
static inline int ct_ojas(const char *dir, const char *args, char **out, char **err) {
    char cmd[8192], p[4200];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >out.txt 2>err.txt", dir, CT_OJAS, args);
    int rc = system(cmd);
    if (out) {
        snprintf(p, sizeof p, "%s/out.txt", dir);
        *out = ct_slurp(p);
    }
    if (err) {
        snprintf(p, sizeof p, "%s/err.txt", dir);
        *err = ct_slurp(p);
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* S is one line (ending in '\n', nothing after it) that holds NEEDLE. */
static inline void ct_assert_one_line(const char *s, const char *needle) {
    assert_non_null(s);
    if (!strstr(s, needle))
        fail_msg("'%s' lacks '%s'", s, needle);
    const char *nl = strchr(s, '\n');
    assert_non_null(nl);
    assert_int_equal(nl[1], 0);
}

/* About 14 KB of sentences over a small vocabulary (a fixed LCG, so the
 * corpus, the tokenizer and the shards are the same on every run). */
static inline int ct_write_corpus(const char *path) {
    static const char *words[] = {
        "the",  "king",   "said",  "unto",  "him",   "and",   "of",    "land", "people",
        "house", "lord",  "went",  "came",  "day",   "city",  "water", "over", "river",
        "bread", "stone", "light", "night", "in",    "they",  "shall", "be",   "upon"};
    const unsigned nw = sizeof words / sizeof words[0];
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    uint32_t s = 2024;
    for (int sent = 0; sent < 420; sent++) {
        s = s * 1664525u + 1013904223u;
        int n = 4 + (int)((s >> 24) % 7);
        for (int w = 0; w < n; w++) {
            s = s * 1664525u + 1013904223u;
            const char *word = words[(s >> 16) % nw];
            if (w == 0)
                fprintf(f, "%c%s", word[0] - 'a' + 'A', word + 1);
            else
                fprintf(f, " %s", word);
        }
        fputs(sent % 8 == 7 ? ".\n" : ". ", f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* ct_ojas(dir, args, out, NULL stderr): the exit status; on a non-zero one
 * prints the command, status and stderr to stderr. */
static inline int ct_ojas_logged(const char *dir, const char *args, char **out) {
    char *err = NULL;
    int rc = ct_ojas(dir, args, out, &err);
    if (rc != 0) fprintf(stderr, "ojas %s -> %d: %s\n", args, rc, err ? err : "(no stderr)");
    free(err);
    return rc;
}

/* A fresh $TMPDIR/ojas-<tag>-XXXXXX (/tmp without TMPDIR) written into dir
 * (n bytes), holding corpus.txt (ct_write_corpus) and c.json: a 4-step
 * nanolab-tiny run over the shards in "data", eval and checkpoint every 2
 * steps, one thread. No tokenizer_dir and no vocab_size: the model keeps
 * the preset's vocabulary (512 > the tokenizer's 300), as a user's first
 * config would. 0, or -1. */
static inline int ct_run_fixture(char *dir, size_t n, const char *tag) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, n, "%s/ojas-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(dir))
        return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/corpus.txt", dir);
    if (ct_write_corpus(p))
        return -1;
    snprintf(p, sizeof p, "%s/c.json", dir);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"model\": \"nanolab-tiny\", \"data_dir\": \"data\", \"batch_size\": 4,\n"
               " \"seq_len\": 32, \"max_steps\": 4, \"warmup_steps\": 1, \"eval_every\": 2,\n"
               " \"eval_batches\": 1, \"ckpt_every\": 2, \"peak_flops\": 1e10, \"threads\": 1}\n");
    return fclose(f) == 0 ? 0 : -1;
}

#endif
