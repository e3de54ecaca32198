/* The harness pieces bench_tokenizer.c and bench_tokenizer_json.c share:
 * clocks, finding the source tree, reading a command's output. */
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

#endif /* OJAS_BENCH_TOKENIZER_UTIL_H */
