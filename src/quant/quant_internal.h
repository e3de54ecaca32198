/* What the quant layer's files share (internal). */
#ifndef OJAS_QUANT_INTERNAL_H
#define OJAS_QUANT_INTERNAL_H

#include "core/internal.h"
#include "ojas/quant.h"

struct oj_qtensor {
    oj_engine *eng;
    oj_qtype type;
    int64_t rows, cols;
    size_t row_bytes;
    oj_tensor *blocks; /* U8 [rows, row_bytes], contiguous, one reference ours */
};

/* Little-endian f16 at p, widened. */
static inline float oj__qf16(const uint8_t *p) {
    return oj_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* oj_quantize_row / oj_dequantize_row without the checks (t valid, k a
 * positive multiple of 32, x finite). */
void oj__quantize_row(oj_qtype t, const float *x, int64_t k, void *out);
void oj__dequantize_row(oj_qtype t, const void *q, int64_t k, float *y);

/* The int8 dot kernels oj_qmatmul uses on eng: "portable C", "AVX2" or
 * "AVX-VNNI" (OJAS_QUANT_DOT=avx2 caps VNNI at AVX2; OJAS_CPU_ISA=scalar
 * selects the portable ones). */
const char *oj__qmatmul_kernel_name(oj_engine *eng);

#endif /* OJAS_QUANT_INTERNAL_H */
