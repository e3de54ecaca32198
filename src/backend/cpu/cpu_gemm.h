/* ojas's own f32 GEMM (cpu_gemm.c), used by the matmul entry under
 * OJ_NUMERICS_EXACT (and whenever no BLAS is built in). */
#ifndef OJAS_CPU_GEMM_H
#define OJAS_CPU_GEMM_H

#include "core/internal.h"

/* One operand matrix of one batch: element (i, j) at base + i*rs + j*cs
 * (strides in elements), dtype dt (f32, bf16 or f16 for the f32 GEMM). */
typedef struct {
    const char *base;
    int64_t rs, cs;
    oj_dtype dt;
} oj_mm_mat;

/* c (m x n f32, row stride ldc, already initialised: zeros or the values
 * to accumulate onto) += a (m x k) @ b (k x n). tid < 0: called by the
 * engine's thread, threaded over output blocks; tid >= 0: serial, from
 * inside a parallel chunk run by thread tid (its scratch is used).
 * Every element is its initial value plus the products over k = 0..K-1 in
 * increasing order, a multiply then an add per term (never fused): the
 * bits of the plain in-order f32 sum on every SIMD level, whatever the
 * blocking and the thread count. fused: fused multiply-adds where the CPU
 * has them (FAST numerics; the same order, other bits, ~10% faster).
 * OJ_ERR_CAPACITY when scratch memory cannot be had. */
oj_status oj__cpu_sgemm(oj_engine *eng, int64_t m, int64_t n, int64_t k, const oj_mm_mat *a,
                        const oj_mm_mat *b, float *c, int64_t ldc, int tid, bool fused);

#endif /* OJAS_CPU_GEMM_H */
