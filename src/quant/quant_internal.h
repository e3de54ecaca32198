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

/* A CPU engine, or a device whose backend has the quantized entries
 * (qgemv, qdequant); else OJ_ERR_UNSUPPORTED naming op, the type and the
 * backend. */
bool oj__qdevice_ok(oj_engine *eng, const char *op, oj_qtype t);

/* Rows [r0, r0 + n) of q as an [n, K] matrix of q's type whose blocks are
 * a view of q's (no copy: the storage lives while either matrix does; row
 * bytes per row, so the view is contiguous). Owned by the caller
 * (oj_qtensor_free, in any order with q). NULL with OJ_ERR_OUT_OF_RANGE
 * (rows outside q) or OJ_ERR_CAPACITY recorded on q's engine. */
oj_qtensor *oj__qtensor_rows(const oj_qtensor *q, int64_t r0, int64_t n);
/* parts[0..n) (n >= 1, one engine, one type, one K) stacked by rows into
 * one new [sum of rows, K] matrix: every part's blocks copied, in order, on
 * their device. Exact: a row's blocks depend on that row alone. Owned by
 * the caller. NULL with OJ_ERR_INVALID_ARGUMENT (mismatched parts) or the
 * copy's error recorded on the engine. */
oj_qtensor *oj__qtensor_cat_rows(oj_qtensor *const *parts, int n);

/* Little-endian f16 at p, widened. */
static inline float oj__qf16(const uint8_t *p) {
    return oj_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* The 6-bit scale and min of sub-block j (0..7) of a q4_k super-block from
 * its 12 packed bytes (ggml's get_scale_min_k4). */
static inline void oj__q4_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* OCP FP8 E4M3 (include/ojas/quant.h, fp8): v rounded to the nearest
 * value, ties to the even mantissa, saturated at +-448 (NaN to S.1111.111);
 * and a code's value (NaN for S.1111.111). */
uint8_t oj__f32_to_e4m3(float v);
float oj__e4m3_to_f32(uint8_t c);

/* oj_quantize_row / oj_dequantize_row without the checks (t valid, k a
 * positive multiple of 32, x finite). */
void oj__quantize_row(oj_qtype t, const float *x, int64_t k, void *out);
void oj__dequantize_row(oj_qtype t, const void *q, int64_t k, float *y);

/* The int8 dot kernels oj_qmatmul uses on eng: "portable C", "AVX2",
 * "AVX-VNNI" or "AVX-512 VNNI" (AVX2 where the CPU has AVX2, FMA and F16C;
 * OJAS_QUANT_DOT=avxvnni or avx512vnni asks for the VNNI ones, bit-identical
 * and slower where measured; OJAS_CPU_ISA=scalar selects the portable
 * ones). */
const char *oj__qmatmul_kernel_name(oj_engine *eng);

#endif /* OJAS_QUANT_INTERNAL_H */
