/* Helpers shared by the test_data_*.c tests: temporary directories, files,
 * a deterministic random generator and the GPT-2 tokenizer. */
#ifndef OJAS_DATA_TESTUTIL_H
#define OJAS_DATA_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ojas/data.h"

/* A fresh directory under $TMPDIR (or /tmp); free() the result. */
static inline char *tu_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/ojas-data-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

static inline void tu_rmdir(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

static inline char *tu_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static inline int tu_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* Whole file, NUL-terminated; NULL if unreadable. */
static inline char *tu_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return b;
}

/* splitmix64 */
static inline uint64_t tu_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define TU_GPT2_DIR OJAS_SOURCE_DIR "/third_party/gpt2"

/* The GPT-2 tokenizer from third_party/gpt2 (scripts/deps.sh), or NULL. */
static inline oj_tokenizer *tu_gpt2(void) {
    oj_tokenizer *tok = NULL;
    oj_error err = {0};
    if (oj_tokenizer_load(TU_GPT2_DIR, &tok, &err) != OJ_OK) {
        fprintf(stderr, "cannot load GPT-2 tokenizer (run scripts/deps.sh): %s\n", err.message);
        return NULL;
    }
    return tok;
}

#endif
