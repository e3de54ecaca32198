/* The start shared by the GPU test programs (tests/gpu): open cuda:0 once
 * to see whether a device is there. */
#ifndef OJAS_GPU_TESTUTIL_H
#define OJAS_GPU_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ojas/core.h"

/* 77 (ctest's skip code, after printing why) when no CUDA device opens,
 * else 0. With allow_cpu and OJAS_GPU_TEST_ON_CPU set in the environment
 * the device is not probed: *on_cpu becomes true and the program runs its
 * checks with a CPU engine in place of CUDA (a self-check of the harness). */
static inline int gpu_test_probe(bool allow_cpu, bool *on_cpu) {
    bool cpu = allow_cpu && getenv("OJAS_GPU_TEST_ON_CPU") != NULL;
    if (on_cpu) *on_cpu = cpu;
    if (cpu) {
        printf("OJAS_GPU_TEST_ON_CPU: self-check with a CPU engine in place of CUDA\n");
        return 0;
    }
    oj_engine_config c = oj_engine_config_default();
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *probe = NULL;
    oj_error err = {0};
    if (oj_engine_create(&c, &probe, &err) != OJ_OK) {
        printf("skipped: no usable CUDA device (%s)\n", err.message);
        return 77;
    }
    oj_engine_free(probe);
    return 0;
}

/* An engine with numerics num and RNG seed `seed`: on cuda:0 when gpu
 * (a CPU engine in its place in the on_cpu self-check), else on the CPU.
 * Fails the test when it cannot be made. */
static inline oj_engine *gpu_test_engine(bool gpu, bool on_cpu, oj_numerics num, uint64_t seed) {
    oj_engine_config c = oj_engine_config_default();
    c.seed = seed;
    c.numerics = num;
    if (gpu && !on_cpu) c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *e = NULL;
    oj_error err = {0};
    if (oj_engine_create(&c, &e, &err) != OJ_OK) fail_msg("engine_create: %s", err.message);
    return e;
}

#endif
