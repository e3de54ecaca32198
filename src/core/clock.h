/* The library's one clock for durations and deadlines (C and CUDA C++). */
#ifndef OJ_CORE_CLOCK_H
#define OJ_CORE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (not wall time: never jumps back). */
static inline double oj__now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
