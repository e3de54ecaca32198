/* Helpers shared by the GPU benchmarks (bench/gpu/bench_gpu_*.c): a clock,
 * a comparison for qsort, and the CUDA engine a benchmark runs on. */
#ifndef OJAS_BENCH_GPU_COMMON_H
#define OJAS_BENCH_GPU_COMMON_H

#include <stdio.h>
#include <time.h>

#include "ojas/core.h"

/* Milliseconds of CLOCK_MONOTONIC. */
static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* qsort's order of doubles. */
static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* *E = a CUDA engine (seed 1) with the given numerics: 0, or 77 (ctest's
 * skip code) after printing "skipped: <why>" when no device opens. */
static inline int bench_cuda_engine(oj_numerics numerics, oj_engine **E) {
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = OJ_DEVICE_CUDA;
    ec.numerics = numerics;
    ec.seed = 1;
    oj_error err = {0};
    if (oj_engine_create(&ec, E, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    return 0;
}

#endif
