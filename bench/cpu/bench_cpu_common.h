/* Helpers shared by the CPU benchmarks (bench/cpu/bench_cpu_*.c): a clock,
 * medians, the source root (for the PyTorch peer script), running a peer
 * command and reading one number out of its JSON line, engine creation. */
#ifndef OJAS_BENCH_CPU_COMMON_H
#define OJAS_BENCH_CPU_COMMON_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ojas/core.h"

static inline double bc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bc_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bc_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bc_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The source tree: the nearest directory above the executable holding
 * bench/cpu/torch_peer.py, else the current directory. */
static inline void bc_find_root(char *root, size_t len) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    snprintf(root, len, ".");
    if (n <= 0) return;
    exe[n] = 0;
    for (int up = 0; up < 4; up++) {
        char *s = strrchr(exe, '/');
        if (!s) return;
        *s = 0;
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/bench/cpu/torch_peer.py", exe);
        if (access(probe, R_OK) == 0) {
            snprintf(root, len, "%s", exe);
            return;
        }
    }
}

/* Run cmd; its stdout (at most cap - 1 bytes) into buf. False on failure. */
static inline int bc_run(const char *cmd, char *buf, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    int rc = pclose(p);
    return rc == 0 && n > 0;
}

/* The number after "key": in a JSON text (first occurrence), or -1. */
static inline double bc_json_num(const char *json, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    p += strlen(pat);
    while (*p == ' ') p++;
    return strtod(p, NULL);
}

static inline oj_engine *bc_engine(int threads, oj_numerics num) {
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = threads;
    cfg.numerics = num;
    cfg.seed = 1;
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (oj_engine_create(&cfg, &eng, &err) != OJ_OK) {
        fprintf(stderr, "engine: %s\n", err.message);
        exit(1);
    }
    return eng;
}

/* CPU model name from /proc/cpuinfo into buf. */
static inline void bc_cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

#endif /* OJAS_BENCH_CPU_COMMON_H */
