/* The oj_simd tables (cpu_simd.h): the scalar one written here, the AVX2
 * and AVX-512 ones by including cpu_simd_body.h under a target pragma with
 * the vector primitives defined for that width. */
#include <math.h>

#include "backend/cpu/cpu_simd.h"

/* ---------------------------------------------------------------- scalar */

/* As the vector kernels (cpu_simd_body.h): for x >= 0, e is clamped at
 * exp(-18) (1 + e is 1 below it), so no subnormal e is built. */
static inline float s_sigmoid(float x) {
    float e = oj_expf_poly(x >= 0 ? fmaxf(-x, -18.0f) : x);
    float s = 1.0f / (1.0f + e);
    return x >= 0 ? s : e * s;
}

static inline float s_tanh(float x) {
    float ax = fabsf(x);
    if (ax < 0.625f) {
        float z = x * x;
        float p = -5.70498872745e-3f;
        p = p * z + 2.06390887954e-2f;
        p = p * z - 5.37397155531e-2f;
        p = p * z + 1.33314422036e-1f;
        p = p * z - 3.33332819422e-1f;
        return p * z * x + x;
    }
    float e = oj_expf_poly(-2.0f * (ax > 9.0f ? 9.0f : ax)); /* exactly 1 beyond 9 */
    return copysignf((1.0f - e) / (1.0f + e), x);
}

static inline float s_gelu_s(float x) {
    const float k2 = 2.0f * 0.7978845608028654f;
    return s_sigmoid(x * (k2 * 0.044715f * (x * x) + k2));
}

/* The standard normal CDF in double (libm's erfc: no cancellation in the
 * left tail), *pdf its density; exactly 0 or 1 beyond |x| = 20, where
 * erfc would underflow. */
static inline double s_phi(double x, double *pdf) {
    if (fabs(x) > 20.0) {
        *pdf = 0.0;
        return x > 0 ? 1.0 : 0.0;
    }
    *pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
    return 0.5 * erfc(x * -0.70710678118654752440);
}

static inline float s_unary(oj_simd_fn f, float x, float a, float b) {
    double pdf;
    switch (f) {
    case OJ_SF_EXP: return oj_expf_poly(x);
    case OJ_SF_SIGMOID: return s_sigmoid(x);
    case OJ_SF_SILU: return x * s_sigmoid(x);
    case OJ_SF_GELU_TANH: return x * s_gelu_s(x);
    case OJ_SF_TANH: return s_tanh(x);
    case OJ_SF_RELU: return x > 0 || x != x ? x : 0.0f;
    case OJ_SF_NEG: return -x;
    case OJ_SF_SQUARE: return x * x;
    case OJ_SF_AFFINE: return a * x + b;
    case OJ_SF_SQRT: return sqrtf(x);
    case OJ_SF_RSQRT: return 1.0f / sqrtf(x);
    case OJ_SF_RECIPROCAL: return 1.0f / x;
    case OJ_SF_ABS: return fabsf(x);
    case OJ_SF_GELU: return (float)(x * s_phi(x, &pdf));
    default: return x;
    }
}

static inline float s_grad(oj_simd_fn f, float x, float y, float a) {
    double pdf, phi;
    switch (f) {
    case OJ_SF_EXP: return y;
    case OJ_SF_SIGMOID: return y * (1.0f - y);
    case OJ_SF_TANH: return 1.0f - y * y;
    case OJ_SF_SILU: {
        float s = s_sigmoid(x);
        return s * (x * (1.0f - s) + 1.0f);
    }
    case OJ_SF_GELU_TANH: {
        const float k = 0.7978845608028654f;
        float s = s_gelu_s(x);
        float du = k * 3.0f * 0.044715f * (x * x) + k;
        return (x + x) * s * (1.0f - s) * du + s;
    }
    case OJ_SF_RELU: return x > 0 ? 1.0f : 0.0f;
    case OJ_SF_NEG: return -1.0f;
    case OJ_SF_SQUARE: return x + x;
    case OJ_SF_AFFINE: return a;
    case OJ_SF_SQRT: return 0.5f / y;
    case OJ_SF_RSQRT: return -0.5f * (y * (y * y));
    case OJ_SF_RECIPROCAL: return -(y * y);
    case OJ_SF_ABS: return (float)((x > 0) - (x < 0));
    case OJ_SF_GELU: /* Phi(x) + x phi(x) */
        phi = s_phi(x, &pdf);
        return (float)(phi + x * pdf);
    default: return 1.0f;
    }
}

static void sc_rowdot(int nr, const float *const *x, const float *mt, int64_t ld, int64_t d,
                      int64_t n, float scale, float *out, int64_t ldo) {
    for (int r = 0; r < nr; r++) {
        float *o = out + r * ldo;
        for (int64_t j = 0; j < n; j++) o[j] = 0.0f;
        for (int64_t c = 0; c < d; c++) {
            float xc = x[r][c];
            const float *row = mt + c * ld;
            for (int64_t j = 0; j < n; j++) o[j] += xc * row[j];
        }
        for (int64_t j = 0; j < n; j++) o[j] *= scale;
    }
}

static void sc_rowcomb(int nr, const float *w, int64_t ldw, int64_t n, const float *m,
                       int64_t ld, int64_t d, float *acc, int64_t lda) {
    for (int r = 0; r < nr; r++)
        for (int64_t j = 0; j < n; j++) {
            float wj = w[r * ldw + j];
            const float *row = m + j * ld;
            float *a = acc + r * lda;
            for (int64_t c = 0; c < d; c++) a[c] += wj * row[c];
        }
}

static void sc_rank(int nr, const float *w, int64_t ldw, int64_t n, const float *const *x,
                    int64_t d, float *y, int64_t ld) {
    for (int64_t j = 0; j < n; j++) {
        float *row = y + j * ld;
        for (int r = 0; r < nr; r++) {
            float wj = w[r * ldw + j];
            for (int64_t c = 0; c < d; c++) row[c] += wj * x[r][c];
        }
    }
}

static float sc_expsum(float *s, int64_t n, float m) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = oj_expf_poly(s[j] - m);
        acc += s[j];
    }
    return acc;
}

static float sc_max(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        if (x[j] != x[j]) return NAN;
        m = x[j] > m ? x[j] : m;
    }
    return m;
}

static float sc_dot(const float *a, const float *b, int64_t n) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; j++) acc += a[j] * b[j];
    return acc;
}

static float sc_sum(const float *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; j++) acc += x[j];
    return acc;
}

static void sc_scale(float *y, int64_t n, float a) {
    for (int64_t j = 0; j < n; j++) y[j] *= a;
}

static float sc_sumsq_dev(const float *x, int64_t n, float m) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; j++) acc += (x[j] - m) * (x[j] - m);
    return acc;
}

static void sc_norm_apply(float *y, const float *x, int64_t n, float m, float rs, const float *w,
                          const float *b) {
    for (int64_t j = 0; j < n; j++) {
        float v = (x[j] - m) * rs;
        if (w) v *= w[j];
        if (b) v += b[j];
        y[j] = v;
    }
}

static void sc_norm_bwd_sums(const float *x, const float *dy, const float *w, int64_t n, float m,
                             float rs, float *sg, float *sgx) {
    float a = 0.0f, c = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float g = w ? dy[j] * w[j] : dy[j];
        a += g;
        c += g * ((x[j] - m) * rs);
    }
    *sg = a;
    *sgx = c;
}

static void sc_norm_bwd_dx(float *dx, const float *x, const float *dy, const float *w, int64_t n,
                           float m, float rs, float a, float c) {
    for (int64_t j = 0; j < n; j++) {
        float g = w ? dy[j] * w[j] : dy[j];
        dx[j] = rs * (g - a - ((x[j] - m) * rs) * c);
    }
}

static void sc_norm_cols(double *dw, double *db, const float *x, const float *dy, int64_t ld,
                         int64_t nr, int64_t n, const float *mean, const float *rstd) {
    for (int64_t r = 0; r < nr; r++) {
        double m = mean ? (double)mean[r] : 0.0, rs = rstd[r];
        for (int64_t j = 0; j < n; j++) {
            double g = dy[r * ld + j];
            dw[j] += g * (((double)x[r * ld + j] - m) * rs);
            if (db) db[j] += g;
        }
    }
}

/* Transpose in 8 x 8 tiles (both sides stay in a few cache lines). */
static void sc_transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                         int64_t cols) {
    for (int64_t j0 = 0; j0 < rows; j0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            int64_t j1 = j0 + 8 < rows ? j0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t j = j0; j < j1; j++) dst[c * ldd + j] = src[j * lds + c];
        }
}

static void sc_acc_cols(double *acc, const float *x, int64_t ld, int64_t nr, int64_t n,
                        int kind) {
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < n; j++) {
            double v = x[r * ld + j];
            acc[j] += kind == 1 ? fabs(v) : kind == 2 ? v * v : v;
        }
}

static void sc_softmax_bwd(float *dx, const float *y, const float *dy, int64_t n, float s,
                           bool log) {
    for (int64_t j = 0; j < n; j++)
        dx[j] = log ? dy[j] - oj_expf_poly(y[j]) * s : y[j] * (dy[j] - s);
}

static void sc_unary(oj_simd_fn f, float *y, const float *x, int64_t n, float a, float b) {
    for (int64_t j = 0; j < n; j++) y[j] = s_unary(f, x[j], a, b);
}

static void sc_unary_grad(oj_simd_fn f, float *dx, const float *x, const float *y,
                          const float *dy, int64_t n, float a, float b) {
    (void)b;
    for (int64_t j = 0; j < n; j++) dx[j] = dy[j] * s_grad(f, x[j], y[j], a);
}

static inline float s_bin(oj_simd_bin op, float a, float b) {
    switch (op) {
    case OJ_SB_ADD: return a + b;
    case OJ_SB_SUB: return a - b;
    case OJ_SB_MUL: return a * b;
    case OJ_SB_DIV: return a / b;
    case OJ_SB_MAX: return (a != a || b != b) ? a + b : (a > b ? a : b);
    case OJ_SB_MIN: return (a != a || b != b) ? a + b : (a < b ? a : b);
    default: return a;
    }
}

static void sc_binary(oj_simd_bin op, float *out, const float *a, int64_t a_step,
                      const float *b, int64_t b_step, int64_t n) {
    for (int64_t j = 0; j < n; j++) out[j] = s_bin(op, a[j * a_step], b[j * b_step]);
}

static const oj_simd scalar_table = {
    .isa = OJ_ISA_SCALAR,
    .rowdot = sc_rowdot,
    .rowcomb = sc_rowcomb,
    .rank = sc_rank,
    .expsum = sc_expsum,
    .max = sc_max,
    .dot = sc_dot,
    .sum = sc_sum,
    .scale = sc_scale,
    .sumsq_dev = sc_sumsq_dev,
    .norm_apply = sc_norm_apply,
    .norm_bwd_sums = sc_norm_bwd_sums,
    .norm_bwd_dx = sc_norm_bwd_dx,
    .norm_cols = sc_norm_cols,
    .acc_cols = sc_acc_cols,
    .softmax_bwd = sc_softmax_bwd,
    .transpose = sc_transpose,
    .unary = sc_unary,
    .unary_grad = sc_unary_grad,
    .binary = sc_binary,
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OJ_SIMD_X86 1

#define OJ_CAT2(a, b) a##_##b
#define OJ_CAT(a, b) OJ_CAT2(a, b)
#define NAME(x) OJ_CAT(x, OJ_SFX)

/* ---------------------------------------------------------------- AVX-512 */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")
#define OJ_SFX avx512
#define isa_level_avx512 OJ_ISA_AVX512
typedef __m512 V;
typedef __m512i VI;
typedef __mmask16 M;
typedef __mmask16 B;
#define VL 16
#define QD 4
#define OJ_DISPATCH_Q34(K, ...)                                                            \
    case 11: K(1, 3, __VA_ARGS__); break;                                                  \
    case 12: K(1, 4, __VA_ARGS__); break;                                                  \
    case 19: K(2, 3, __VA_ARGS__); break;                                                  \
    case 20: K(2, 4, __VA_ARGS__); break;                                                  \
    case 27: K(3, 3, __VA_ARGS__); break;                                                  \
    case 28: K(3, 4, __VA_ARGS__); break;                                                  \
    case 35: K(4, 3, __VA_ARGS__); break;                                                  \
    case 36: K(4, 4, __VA_ARGS__); break;
#define v_set1(a) _mm512_set1_ps(a)
#define v_zero() _mm512_setzero_ps()
#define v_load(p) _mm512_loadu_ps(p)
#define v_store(p, v) _mm512_storeu_ps(p, v)
#define v_tailmask(n) ((M)((n) >= 16 ? 0xffffu : ((1u << (n)) - 1u)))
#define v_loadm(p, m) _mm512_maskz_loadu_ps(m, p)
#define v_storem(p, v, m) _mm512_mask_storeu_ps(p, m, v)
#define v_add(a, b) _mm512_add_ps(a, b)
#define v_sub(a, b) _mm512_sub_ps(a, b)
#define v_mul(a, b) _mm512_mul_ps(a, b)
#define v_div(a, b) _mm512_div_ps(a, b)
#define v_min(a, b) _mm512_min_ps(a, b)
#define v_max(a, b) _mm512_max_ps(a, b)
#define v_sqrt(a) _mm512_sqrt_ps(a)
/* 1 / a for a in [1, 2] (sigmoid, tanh): 14-bit estimate and one Newton
 * step, about 2^-28 relative, cheaper than a division */
static inline __m512 avx512_recip(__m512 a) {
    __m512 r = _mm512_rcp14_ps(a);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(a, r, _mm512_set1_ps(2.0f)));
}
#define v_recip(a) avx512_recip(a)
#define v_fmadd(a, b, c) _mm512_fmadd_ps(a, b, c)
#define v_fnmadd(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define v_abs(a) _mm512_abs_ps(a)
#define v_neg(a) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)))
#define v_copysign(mag, sgn)                                                                \
    _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag),                \
                                                  _mm512_castps_si512(sgn),                \
                                                  _mm512_set1_epi32(0x7fffffff), 0xe4))
#define v_round(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_cvt_i(a) _mm512_cvtps_epi32(a)
#define v_i_srai1(a) _mm512_srai_epi32(a, 1)
#define v_i_sub(a, b) _mm512_sub_epi32(a, b)
#define v_pow2(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23))
#define v_scalef(p, n) _mm512_scalef_ps(p, n)
/* 16 x 16 in-register transpose (unpack, then shuffles of 32-bit pairs
 * and of 128-bit lanes), for the transpose entry's full tiles */
#define v_transpose16 avx512_tr16
static inline void avx512_tr16(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        int g = i / 4, j = i % 4;
        t[i] = _mm512_shuffle_f32x4(r[8 * g + j], r[8 * g + 4 + j], 0x88);
        t[i + 8] = _mm512_shuffle_f32x4(r[8 * g + j], r[8 * g + 4 + j], 0xdd);
    }
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[4 + j], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[4 + j], 0xdd);
        r[j + 4] = _mm512_shuffle_f32x4(t[8 + j], t[12 + j], 0x88);
        r[j + 12] = _mm512_shuffle_f32x4(t[8 + j], t[12 + j], 0xdd);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
#define v_gt(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define v_ge(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define v_lt(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define v_nge(a, b) _mm512_cmp_ps_mask(a, b, _CMP_NGE_UQ) /* a < b or NaN */
#define v_isnan(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define v_or_mask(a, b) ((B)((a) | (b)))
#define v_blend(m, a, b) _mm512_mask_blend_ps(m, a, b)
#define v_and_tail(v, m) _mm512_maskz_mov_ps(m, v)
#define v_blend_tail(a, b, m) _mm512_mask_blend_ps(m, a, b)
/* NaN tracking for max: a vector whose lanes turn NaN once one was seen */
#define v_or_nan(acc, v) _mm512_mask_blend_ps(v_isnan(v), acc, v)
#define v_has_nan(acc) (v_isnan(acc) != 0)
#define v_hsum(v) _mm512_reduce_add_ps(v)
#define v_hmax(v) _mm512_reduce_max_ps(v)
/* double vectors: VLD lanes, loaded from f32 */
#define VD __m512d
#define VLD 8
#define vd_set1(a) _mm512_set1_pd(a)
#define vd_load(p) _mm512_loadu_pd(p)
#define vd_store(p, v) _mm512_storeu_pd(p, v)
#define vd_from_f32(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define vd_add(a, b) _mm512_add_pd(a, b)
#define vd_sub(a, b) _mm512_sub_pd(a, b)
#define vd_mul(a, b) _mm512_mul_pd(a, b)
#define vd_abs(a) _mm512_abs_pd(a)
#include "backend/cpu/cpu_simd_body.h"
#undef OJ_SFX
#undef VL
#undef QD
#undef OJ_DISPATCH_Q34
#undef OJ_AI
#undef v_set1
#undef v_zero
#undef v_load
#undef v_store
#undef v_tailmask
#undef v_loadm
#undef v_storem
#undef v_add
#undef v_sub
#undef v_mul
#undef v_div
#undef v_min
#undef v_max
#undef v_sqrt
#undef v_recip
#undef v_fmadd
#undef v_fnmadd
#undef v_abs
#undef v_neg
#undef v_copysign
#undef v_round
#undef v_cvt_i
#undef v_i_srai1
#undef v_i_sub
#undef v_pow2
#undef v_scalef
#undef v_transpose16
#undef v_gt
#undef v_ge
#undef v_lt
#undef v_nge
#undef v_isnan
#undef v_or_mask
#undef v_blend
#undef v_and_tail
#undef v_blend_tail
#undef v_or_nan
#undef v_has_nan
#undef v_hsum
#undef v_hmax
#undef VD
#undef VLD
#undef vd_set1
#undef vd_load
#undef vd_store
#undef vd_from_f32
#undef vd_add
#undef vd_sub
#undef vd_mul
#undef vd_abs
#pragma GCC pop_options

/* ---------------------------------------------------------------- AVX2 */
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define OJ_SFX avx2
#define isa_level_avx2 OJ_ISA_AVX2
#define V __m256
#define VI __m256i
#define M __m256i
#define VL 8
#define QD 2
#define OJ_DISPATCH_Q34(K, ...)

static inline __m256i avx2_tailmask(int64_t n) {
    int k = n >= 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float avx2_hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);                  /* 4 lanes */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));         /* 2 lanes */
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));  /* 1 lane */
    return _mm_cvtss_f32(s);
}

static inline float avx2_hmax(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_max_ps(lo, hi);
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

#define v_set1(a) _mm256_set1_ps(a)
#define v_zero() _mm256_setzero_ps()
#define v_load(p) _mm256_loadu_ps(p)
#define v_store(p, v) _mm256_storeu_ps(p, v)
#define v_tailmask(n) avx2_tailmask(n)
#define v_loadm(p, m) _mm256_maskload_ps(p, m)
#define v_storem(p, v, m) _mm256_maskstore_ps(p, m, v)
#define v_add(a, b) _mm256_add_ps(a, b)
#define v_sub(a, b) _mm256_sub_ps(a, b)
#define v_mul(a, b) _mm256_mul_ps(a, b)
#define v_div(a, b) _mm256_div_ps(a, b)
#define v_min(a, b) _mm256_min_ps(a, b)
#define v_max(a, b) _mm256_max_ps(a, b)
#define v_sqrt(a) _mm256_sqrt_ps(a)
#define v_recip(a) _mm256_div_ps(_mm256_set1_ps(1.0f), a) /* the 12-bit estimate is too coarse */
#define v_fmadd(a, b, c) _mm256_fmadd_ps(a, b, c)
#define v_fnmadd(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define v_abs(a) _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)))
#define v_neg(a) _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)))
#define v_copysign(mag, sgn)                                                                \
    _mm256_or_ps(_mm256_and_ps(mag, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))),   \
                 _mm256_and_ps(sgn, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))))
#define v_round(a) _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_cvt_i(a) _mm256_cvtps_epi32(a)
#define v_i_srai1(a) _mm256_srai_epi32(a, 1)
#define v_i_sub(a, b) _mm256_sub_epi32(a, b)
#define v_pow2(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23))
#define v_gt(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define v_ge(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define v_lt(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define v_nge(a, b) _mm256_cmp_ps(a, b, _CMP_NGE_UQ) /* a < b or NaN */
#define v_isnan(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define v_or_mask(a, b) _mm256_or_ps(a, b)
#define v_blend(m, a, b) _mm256_blendv_ps(a, b, m)
#define v_and_tail(v, m) _mm256_and_ps(v, _mm256_castsi256_ps(m))
#define v_blend_tail(a, b, m) _mm256_blendv_ps(a, b, _mm256_castsi256_ps(m))
#define v_or_nan(acc, v) _mm256_or_ps(acc, v_isnan(v))
#define v_has_nan(acc) (_mm256_movemask_ps(acc) != 0)
#define v_hsum(v) avx2_hsum(v)
#define v_hmax(v) avx2_hmax(v)
#define VD __m256d
#define VLD 4
#define vd_set1(a) _mm256_set1_pd(a)
#define vd_load(p) _mm256_loadu_pd(p)
#define vd_store(p, v) _mm256_storeu_pd(p, v)
#define vd_from_f32(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define vd_add(a, b) _mm256_add_pd(a, b)
#define vd_sub(a, b) _mm256_sub_pd(a, b)
#define vd_mul(a, b) _mm256_mul_pd(a, b)
#define vd_abs(a) _mm256_and_pd(a, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL)))
#include "backend/cpu/cpu_simd_body.h"
#pragma GCC pop_options
#endif

const oj_simd *oj_simd_for(oj_cpu_isa isa) {
#ifdef OJ_SIMD_X86
    if (isa == OJ_ISA_AVX512) return &table_avx512;
    if (isa == OJ_ISA_AVX2) return &table_avx2;
#endif
    (void)isa;
    return &scalar_table;
}
