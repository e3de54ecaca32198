/* Helpers shared by the tests of quantized weights (test_quant.c on the
 * CPU, tests/gpu/test_gpu_quant.c on a device). */
#ifndef OJAS_QUANT_TESTUTIL_H
#define OJAS_QUANT_TESTUTIL_H

#include <stdint.h>

/* x[0..n): deterministic values in [-scale, scale] from seed, every 29th
 * (i % 29 == 3) six times larger: an outlier in most quantization blocks. */
static inline void qt_fill(float *x, int64_t n, uint32_t seed, float scale) {
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float u = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
        x[i] = (i % 29 == 3 ? 6.0f : 1.0f) * scale * u;
    }
}

#endif
