/* Helpers shared by the test_data_*.c tests: temporary directories, files,
 * a deterministic random generator, the GPT-2 tokenizer, and the plumbing
 * of the node peer tests (records, their file format, the peers' output). */
#ifndef OJAS_DATA_TESTUTIL_H
#define OJAS_DATA_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
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

/* ---------------------------------------------------------------- node peers
 * test_data_peer.c and test_data_hf_peer.c hand their inputs to a node
 * script (tests/peer/, .mjs) as records and read back one line of ids per
 * record. */

/* One input: its bytes (owned, NUL-terminated), a mode byte whose meaning
 * the peer script defines, and a label for messages. */
typedef struct tu_record {
    char *text;
    size_t len;
    int mode;
    const char *what;
} tu_record;

/* Append a copy of text[0..len) to the array *rec of *n records (capacity
 * *cap, grown as needed). */
static inline void tu_record_add(tu_record **rec, size_t *n, size_t *cap, const char *text,
                                 size_t len, int mode, const char *what) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        *rec = realloc(*rec, *cap * sizeof **rec);
    }
    char *t = malloc(len + 1);
    memcpy(t, text, len);
    t[len] = 0;
    (*rec)[(*n)++] = (tu_record){t, len, mode, what};
}

/* Free n records and the array. */
static inline void tu_records_free(tu_record *rec, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(rec[i].text);
    free(rec);
}

/* One record as the peer scripts read it: mode (1 byte), length (4 bytes,
 * host order), the bytes. */
static inline void tu_record_write(FILE *f, int mode, const char *text, size_t len) {
    uint8_t m = (uint8_t)mode;
    uint32_t l = (uint32_t)len;
    fwrite(&m, 1, 1, f);
    fwrite(&l, 4, 1, f);
    fwrite(text, 1, len, f);
}

/* Parse the line of space-separated ids at *p (a peer's output) into out
 * (emptied first) and move *p past its '\n'. false when the line is not
 * ids ending in '\n'. */
static inline bool tu_parse_ids(char **p, oj_tokens *out) {
    char *s = *p;
    out->len = 0;
    while (*s && *s != '\n') {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s)
            return false;
        oj_tokens_push(out, (int32_t)v);
        s = e;
        while (*s == ' ')
            s++;
    }
    if (*s != '\n')
        return false;
    *p = s + 1;
    return true;
}

/* "  label (n): id id ..." (the first 40) on stderr. */
static inline void tu_show_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* The King James Bible from `bible` (bible-kjv), up to 8 MiB, in a malloc'd
 * buffer (not NUL-terminated) with its length in *n (0 when `bible` cannot
 * run). */
static inline char *tu_bible(size_t *n) {
    FILE *p = popen("bible 'gen1:1-rev22:21' 2>/dev/null", "r");
    size_t cap = 8 << 20;
    char *bible = malloc(cap);
    *n = p ? fread(bible, 1, cap, p) : 0;
    if (p)
        pclose(p);
    return bible;
}

#endif
