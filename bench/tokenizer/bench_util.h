/* The harness pieces bench_tokenizer.c and bench_tokenizer_json.c share:
 * clocks, finding the source tree, reading a command's output, cutting a
 * text into documents. */
#ifndef OJAS_BENCH_TOKENIZER_UTIL_H
#define OJAS_BENCH_TOKENIZER_UTIL_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"

/* Wall-clock seconds (monotonic). */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the calling thread. */
static inline double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process (all threads). */
static inline double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The source tree into root[len]: the first of the executable's three
 * nearest ancestor directories holding the file `probe` (a path relative to
 * the tree, e.g. the peer script), else ".". */
static inline void find_root(char *root, size_t len, const char *probe) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    snprintf(root, len, ".");
    if (n <= 0)
        return;
    exe[n] = 0;
    for (int up = 0; up < 3; up++) {
        char *s = strrchr(exe, '/');
        if (!s)
            return;
        *s = 0;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", exe, probe);
        if (access(path, R_OK) == 0) {
            snprintf(root, len, "%s", exe);
            return;
        }
    }
}

/* The standard output of shell command cmd, NUL-terminated, in a malloc'd
 * buffer (the caller frees it) with its length in *len; NULL when the
 * command cannot run, fails (exit status not 0) or prints nothing. */
static inline char *read_cmd(const char *cmd, size_t *len) {
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    char *b;
    oj_status st = oj__read_stream(p, cmd, &b, len, NULL);
    int rc = pclose(p);
    if (st || rc != 0 || *len == 0) {
        free(b);
        return NULL;
    }
    return b;
}

/* Cut t[0..n) into documents after the first '\n' at or past every `size`
 * bytes, as the node peers do (documents() in tests/peer/peer_util.mjs).
 * *docs and *lens get malloc'd arrays (the caller frees them) of pointers
 * into t and lengths; returns the number of documents. */
static inline size_t make_docs(const char *t, size_t n, size_t size, const char ***docs,
                               size_t **lens) {
    size_t cap = n / size + 2, k = 0, start = 0;
    *docs = malloc(cap * sizeof **docs);
    *lens = malloc(cap * sizeof **lens);
    while (start < n) {
        size_t cut = n;
        if (n - start > size) {
            const char *nl = memchr(t + start + size, '\n', n - start - size);
            if (nl && (size_t)(nl - t) + 1 < n)
                cut = (size_t)(nl - t) + 1;
        }
        (*docs)[k] = t + start;
        (*lens)[k] = cut - start;
        k++;
        start = cut;
    }
    return k;
}

#endif /* OJAS_BENCH_TOKENIZER_UTIL_H */
