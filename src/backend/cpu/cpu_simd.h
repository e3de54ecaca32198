/* f32 building blocks of the CPU kernels, one table per SIMD level
 * (cpu_simd.c): scalar C, AVX2 + FMA and AVX-512, chosen at run time
 * (oj_simd_of(eng)); the library itself is compiled for baseline x86-64,
 * the wider paths through target attributes.
 *
 * Every entry sums in a fixed order for a given level (lanes accumulate
 * strided partial sums, reduced by a fixed tree), so results repeat bit
 * for bit on one machine; the levels differ from each other in the last
 * bits (FMA, lane order).
 *
 * exp is a Cephes-style polynomial (Moshier, "Methods and Programs for
 * Mathematical Functions", 1989): range reduction by ln 2 in two parts,
 * degree-6 polynomial, scaling by 2^n in two steps so that subnormal
 * results are kept: within 2 ulp of the correctly rounded value over the
 * whole f32 range (tested against libm), exp(-inf) = 0, exp(+inf) = inf,
 * NaN in NaN out. */
#ifndef OJAS_CPU_SIMD_H
#define OJAS_CPU_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_pool.h"

/* Elementwise f32 functions with a vector implementation (see
 * oj_simd.unary / unary_grad). */
typedef enum oj_simd_fn {
    OJ_SF_EXP, OJ_SF_SIGMOID, OJ_SF_SILU, OJ_SF_GELU_TANH, OJ_SF_TANH, OJ_SF_RELU,
    OJ_SF_NEG, OJ_SF_SQUARE, OJ_SF_AFFINE /* a x + b */, OJ_SF_SQRT, OJ_SF_RSQRT,
    OJ_SF_RECIPROCAL, OJ_SF_ABS, OJ_SF_GELU /* exact (erf) form */,
    OJ_SF_COUNT
} oj_simd_fn;

/* Elementwise f32 binary functions (out = a op b). */
typedef enum oj_simd_bin {
    OJ_SB_ADD, OJ_SB_SUB, OJ_SB_MUL, OJ_SB_DIV, OJ_SB_MAX, OJ_SB_MIN,
    OJ_SB_COUNT
} oj_simd_bin;

#define OJ_SIMD_ROWS 4 /* rows per rowdot/rowcomb/rank call, at most */

typedef struct oj_simd {
    oj_cpu_isa isa;
    /* The three products of attention, for nr <= OJ_SIMD_ROWS rows at
     * once (the rows share every load of the matrix). Each output element
     * is one chain of fused multiply-adds in the order stated, so it does
     * not depend on nr or on where its row sits in a group.
     * rowdot:  out[r * ldo + j] = scale * sum_c x[r][c] * mt[c * ld + j]
     *          (j < n, c < d increasing): x[r] . column j of mt.
     * rowcomb: acc[r * lda + c] += sum_j w[r * ldw + j] * m[j * ld + c]
     *          (c < d, j < n increasing): rows of m combined by w[r].
     * rank:    y[j * ld + c] += sum_r w[r * ldw + j] * x[r][c]
     *          (j < n, c < d, r increasing): rank-nr update of y. */
    void (*rowdot)(int nr, const float *const *x, const float *mt, int64_t ld, int64_t d,
                   int64_t n, float scale, float *out, int64_t ldo);
    void (*rowcomb)(int nr, const float *w, int64_t ldw, int64_t n, const float *m,
                    int64_t ld, int64_t d, float *acc, int64_t lda);
    void (*rank)(int nr, const float *w, int64_t ldw, int64_t n, const float *const *x,
                 int64_t d, float *y, int64_t ld);
    /* s[j] = exp(s[j] - m) (0 where s[j] = -inf); returns their sum. */
    float (*expsum)(float *s, int64_t n, float m);
    /* Largest x[j]; NaN when some x[j] is NaN; -inf for n == 0. */
    float (*max)(const float *x, int64_t n);
    /* sum_j a[j] * b[j]. */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* sum_j x[j]. */
    float (*sum)(const float *x, int64_t n);
    /* y[j] *= a. */
    void (*scale)(float *y, int64_t n, float a);
    /* Row kernels of the norms (w, b NULL: ones, zeros):
     * sumsq_dev = sum_j (x[j] - m)^2;
     * norm_apply: y[j] = (x[j] - m) * rs * w[j] + b[j];
     * norm_bwd_sums: *sg = sum_j dy[j] w[j], *sgx = sum_j dy[j] w[j] xh[j]
     *   with xh[j] = (x[j] - m) rs;
     * norm_bwd_dx: dx[j] = rs (dy[j] w[j] - a - xh[j] c). */
    float (*sumsq_dev)(const float *x, int64_t n, float m);
    void (*norm_apply)(float *y, const float *x, int64_t n, float m, float rs, const float *w,
                       const float *b);
    void (*norm_bwd_sums)(const float *x, const float *dy, const float *w, int64_t n, float m,
                          float rs, float *sg, float *sgx);
    void (*norm_bwd_dx)(float *dx, const float *x, const float *dy, const float *w, int64_t n,
                        float m, float rs, float a, float c);
    /* Rows of the norms' weight/bias gradients, in double without fused
     * multiply-adds (the same bits on every level): for r < nr in order
     * and j < n, with xr = x + r ld, gr = dy + r ld, m = mean[r] (0 when
     * mean is NULL), rs = rstd[r]: dw[j] += gr[j] ((xr[j] - m) rs),
     * db[j] += gr[j] (db may be NULL). */
    void (*norm_cols)(double *dw, double *db, const float *x, const float *dy, int64_t ld,
                      int64_t nr, int64_t n, const float *mean, const float *rstd);
    /* For r < nr in order: acc[j] += x[r * ld + j] (kind 0), |x[..]| (1)
     * or x[..]^2 (2), in double, j < n: steps of column sums (no FMA: the
     * same bits on every level). */
    void (*acc_cols)(double *acc, const float *x, int64_t ld, int64_t nr, int64_t n, int kind);
    /* softmax backward of a row: dx[j] = y[j] (dy[j] - s); with log true
     * (y = log-softmax): dx[j] = dy[j] - exp(y[j]) s. */
    void (*softmax_bwd)(float *dx, const float *y, const float *dy, int64_t n, float s,
                        bool log);
    /* dst[c * ldd + j] = src[j * lds + c] for j < rows, c < cols (a
     * transpose; exact, the same on every level). */
    void (*transpose)(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                      int64_t cols);
    /* y[j] = f(x[j]; a, b) (y may equal x). */
    void (*unary)(oj_simd_fn f, float *y, const float *x, int64_t n, float a, float b);
    /* dx[j] = dy[j] * f'(x[j]) given y = f(x) (for EXP, SIGMOID, TANH, SQRT,
     * RSQRT, RECIPROCAL y is used; the others use x). */
    void (*unary_grad)(oj_simd_fn f, float *dx, const float *x, const float *y,
                       const float *dy, int64_t n, float a, float b);
    /* out[j] = a[j] op b[j]; a_step / b_step 0 broadcast one value, 1 walk
     * the array. */
    void (*binary)(oj_simd_bin op, float *out, const float *a, int64_t a_step, const float *b,
                   int64_t b_step, int64_t n);
} oj_simd;

/* The norms' f32 rows where the float sums overflow (cpu_nn_norm.c; also
 * used by cpu_nn_rotary.c). */
bool oj_cpu_norm_stats_f32(const oj_simd *sd, const float *x, int64_t C, bool rms, double eps,
                           float *m, float *rs);
void oj_cpu_norm_apply_d(float *y, uint16_t *yl, oj_dtype ldt, const float *x, int64_t C, float m,
                         float rs, const float *w, const float *b);
void oj_cpu_norm_bwd_dx_d(float *dx, const float *x, const float *dy, const float *w, int64_t C,
                          float m, float rs, bool rms);

/* The table for a level (a level this CPU lacks must not be asked for). */
const oj_simd *oj_simd_for(oj_cpu_isa isa);
/* The table eng's kernels use. */
static inline const oj_simd *oj_simd_of(oj_engine *eng) { return oj_simd_for(oj_cpu_isa_of(eng)); }

/* Scalar exp of the same algorithm as the vector ones (no FMA). */
static inline float oj_expf_poly(float x) {
    if (!(x < 88.72283935546875f)) return x != x ? x : INFINITY; /* NaN, overflow */
    if (x < -103.97208404541015625f) return 0.0f;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return p * s1 * s2;
}

#endif /* OJAS_CPU_SIMD_H */
