/* The start shared by the GPU test programs (tests/gpu): open cuda:0 once
 * to see whether a device is there. */
#ifndef OJAS_GPU_TESTUTIL_H
#define OJAS_GPU_TESTUTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
