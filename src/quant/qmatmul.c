/* oj_qmatmul: y = x @ W^T with W quantized (include/ojas/quant.h gives the
 * method, the error bound and the order guarantee).
 *
 * x's rows are quantized per block of 32 to int8 with an f32 scale (q8_0's
 * rounding). One dot product of a W row with an x row is, per block, an
 * exact int32 sum of 32 products, scaled by dw * dx and accumulated in f32:
 * the portable kernels in block order, the AVX2 / AVX-VNNI ones in 8 lanes
 * (lane l holds the partial sums of elements 4l..4l+3 of every block)
 * reduced by a fixed tree at the end, as ggml's vec_dot kernels do. The
 * AVX-512 VNNI kernels take the integer sums of two blocks in one 512-bit
 * vpdpbusd and then add them into the same 8 f32 lanes one block after the
 * other, so their results are bit-identical to the AVX2 kernels'. q4_k
 * runs per sub-block of 32: the weight scale is d * sc, and dmin * m * dx
 * * sum(qx) is subtracted (ggml's layout; x stays in blocks of 32). The
 * rows of W are split into chunks of QM_GRAIN rows (independent of the
 * thread count) and every output is summed inside one chunk, so results do
 * not depend on the number of threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_pool.h"
#include "ojas/ops.h"
#include "quant/quant_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define QM_X86 1
#endif

#define QM_GRAIN 16 /* rows of W per chunk */

/* One dot product: W row `w` (nb blocks of its type) with a quantized x row
 * (int8 xq[nb * 32], scales xd[nb], xs[b] = xd[b] * sum of block b's xq). */
typedef float (*qm_dot_fn)(const uint8_t *w, const int8_t *xq, const float *xd,
                           const float *xs, int64_t nb);

/* ---------------------------------------------------------------- portable */

static float dot_q8_0_c(const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,
                        int64_t nb) {
    (void)xs;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 34, xq += 32) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += (int8_t)w[2 + j] * xq[j];
        acc += oj__qf16(w) * xd[b] * (float)s;
    }
    return acc;
}

static float dot_q4_0_c(const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,
                        int64_t nb) {
    (void)xs;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 18, xq += 32) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += ((w[2 + j] & 15) - 8) * xq[j] + ((w[2 + j] >> 4) - 8) * xq[j + 16];
        acc += oj__qf16(w) * xd[b] * (float)s;
    }
    return acc;
}

static float dot_q4_1_c(const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,
                        int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += 20, xq += 32) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) s += (w[4 + j] & 15) * xq[j] + (w[4 + j] >> 4) * xq[j + 16];
        acc += oj__qf16(w) * xd[b] * (float)s + oj__qf16(w + 2) * xs[b];
    }
    return acc;
}

/* The eight 6-bit scales and mins of a q4_k super-block. */
static inline void q4_k_scales(const uint8_t *w, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 8; j++) oj__q4_k_scale_min(j, w + 4, &sc[j], &m[j]);
}

/* nb counts blocks of 32 (x's); a q4_k super-block is 8 of them. */
static float dot_q4_k_c(const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,
                        int64_t nb) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b = 0; b < nb; w += 144) {
        uint8_t sc[8], m[8];
        q4_k_scales(w, sc, m);
        const float d = oj__qf16(w), dmin = oj__qf16(w + 2);
        const uint8_t *qs = w + 16;
        for (int j = 0; j < 8; j++, b++, xq += 32) {
            const uint8_t *q = qs + 32 * (j / 2);
            const int sh = 4 * (j & 1);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += (q[l] >> sh & 15) * xq[l];
            acc += d * (float)sc[j] * xd[b] * (float)s;
            accm += dmin * (float)m[j] * xs[b];
        }
    }
    return acc - accm;
}

/* ---------------------------------------------------------------- AVX2 / AVX-VNNI */
#ifdef QM_X86

/* Little-endian f16 at p, widened by F16C (exact, as oj__qf16: the same
 * value, without a call per block). */
#define QM_F16(p) _cvtsh_ss((unsigned short)((p)[0] | (p)[1] << 8))

/* Fixed-tree sum of 8 lanes: (0+4, 1+5, 2+6, 3+7), then pairs, then the two. */
__attribute__((target("avx2,fma,f16c"))) static inline float qm_hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* acc + scale * (f32) p, one rounding (fused). */
#define QM_FMA(scale, p, acc) _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(p), acc)

/* 32 nibbles of a 16-byte block as bytes 0..15 (low nibbles: elements
 * 0..15, high nibbles: 16..31). */
#define QM_NIBBLES(p)                                                             \
    __m128i raw = _mm_loadu_si128((const __m128i *)(p));                          \
    __m256i nib = _mm256_and_si256(                                               \
        _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15))

/* The kernels are written once and compiled twice: int8 dot products by
 * maddubs + madd (AVX2) or by dpbusd (AVX-VNNI). u: unsigned bytes, s:
 * signed; returns 8 int32 sums of 4 products each. Blocks alternate
 * between two f32 accumulators (even blocks a0, odd a1; the min terms
 * likewise m0, m1), added at the end: two independent FMA chains. */
#define QM_KERNELS(SFX, TARGET, DOT_US)                                           \
    __attribute__((target(TARGET))) static inline __m256i p_q8_0_##SFX(           \
        const uint8_t *w, const int8_t *xq) {                                      \
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w + 2));                 \
        __m256i xv = _mm256_loadu_si256((const __m256i *)xq);                      \
        return DOT_US(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));         \
    }                                                                              \
    __attribute__((target(TARGET))) static inline __m256i p_q4_0_##SFX(           \
        const uint8_t *w, const int8_t *xq) {                                      \
        QM_NIBBLES(w + 2);                                                         \
        __m256i wv = _mm256_sub_epi8(nib, _mm256_set1_epi8(8));                    \
        __m256i xv = _mm256_loadu_si256((const __m256i *)xq);                      \
        return DOT_US(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));         \
    }                                                                              \
    __attribute__((target(TARGET))) static inline __m256i p_q4_1_##SFX(           \
        const uint8_t *w, const int8_t *xq) {                                      \
        QM_NIBBLES(w + 4);                                                         \
        return DOT_US(nib, _mm256_loadu_si256((const __m256i *)xq));               \
    }                                                                              \
    __attribute__((target(TARGET))) static float dot_q8_0_##SFX(                  \
        const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,     \
        int64_t nb) {                                                              \
        (void)xs;                                                                  \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                 \
        int64_t b = 0;                                                             \
        for (; b + 1 < nb; b += 2, w += 68, xq += 64) {                            \
            a0 = QM_FMA(QM_F16(w) * xd[b], p_q8_0_##SFX(w, xq), a0);             \
            a1 = QM_FMA(QM_F16(w + 34) * xd[b + 1], p_q8_0_##SFX(w + 34, xq + 32), a1); \
        }                                                                          \
        if (b < nb) a0 = QM_FMA(QM_F16(w) * xd[b], p_q8_0_##SFX(w, xq), a0);     \
        return qm_hsum256(_mm256_add_ps(a0, a1));                                  \
    }                                                                              \
    __attribute__((target(TARGET))) static float dot_q4_0_##SFX(                  \
        const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,     \
        int64_t nb) {                                                              \
        (void)xs;                                                                  \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                 \
        int64_t b = 0;                                                             \
        for (; b + 1 < nb; b += 2, w += 36, xq += 64) {                            \
            a0 = QM_FMA(QM_F16(w) * xd[b], p_q4_0_##SFX(w, xq), a0);             \
            a1 = QM_FMA(QM_F16(w + 18) * xd[b + 1], p_q4_0_##SFX(w + 18, xq + 32), a1); \
        }                                                                          \
        if (b < nb) a0 = QM_FMA(QM_F16(w) * xd[b], p_q4_0_##SFX(w, xq), a0);     \
        return qm_hsum256(_mm256_add_ps(a0, a1));                                  \
    }                                                                              \
    __attribute__((target(TARGET))) static float dot_q4_1_##SFX(                  \
        const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,     \
        int64_t nb) {                                                              \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                 \
        float m0 = 0.0f, m1 = 0.0f;                                                \
        int64_t b = 0;                                                             \
        for (; b + 1 < nb; b += 2, w += 40, xq += 64) {                            \
            a0 = QM_FMA(QM_F16(w) * xd[b], p_q4_1_##SFX(w, xq), a0);             \
            a1 = QM_FMA(QM_F16(w + 20) * xd[b + 1], p_q4_1_##SFX(w + 20, xq + 32), a1); \
            m0 += QM_F16(w + 2) * xs[b];                                         \
            m1 += QM_F16(w + 22) * xs[b + 1];                                    \
        }                                                                          \
        if (b < nb) {                                                              \
            a0 = QM_FMA(QM_F16(w) * xd[b], p_q4_1_##SFX(w, xq), a0);             \
            m0 += QM_F16(w + 2) * xs[b];                                         \
        }                                                                          \
        return qm_hsum256(_mm256_add_ps(a0, a1)) + (m0 + m1);                      \
    }                                                                              \
    __attribute__((target(TARGET))) static float dot_q4_k_##SFX(                  \
        const uint8_t *w, const int8_t *xq, const float *xd, const float *xs,     \
        int64_t nb) {                                                              \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                 \
        float m0 = 0.0f, m1 = 0.0f;                                                \
        for (int64_t b = 0; b < nb; w += 144) {                                    \
            uint8_t sc[8], m[8];                                                   \
            q4_k_scales(w, sc, m);                                                 \
            const float d = QM_F16(w), dmin = QM_F16(w + 2);                   \
            for (int j = 0; j < 8; j += 2, b += 2, xq += 64) {                     \
                __m256i raw = _mm256_loadu_si256((const __m256i *)(w + 16 + 16 * j)); \
                __m256i lo4 = _mm256_and_si256(raw, _mm256_set1_epi8(15));         \
                __m256i hi4 = _mm256_and_si256(_mm256_srli_epi16(raw, 4),          \
                                               _mm256_set1_epi8(15));              \
                a0 = QM_FMA(d * (float)sc[j] * xd[b],                              \
                            DOT_US(lo4, _mm256_loadu_si256((const __m256i *)xq)), a0); \
                a1 = QM_FMA(d * (float)sc[j + 1] * xd[b + 1],                      \
                            DOT_US(hi4, _mm256_loadu_si256((const __m256i *)(xq + 32))), a1); \
                m0 += dmin * (float)m[j] * xs[b];                                  \
                m1 += dmin * (float)m[j + 1] * xs[b + 1];                          \
            }                                                                      \
        }                                                                          \
        return qm_hsum256(_mm256_add_ps(a0, a1)) - (m0 + m1);                      \
    }

__attribute__((target("avx2,fma,f16c"))) static inline __m256i qm_dot_avx2(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
QM_KERNELS(avx2, "avx2,fma,f16c", qm_dot_avx2)

__attribute__((target("avx2,fma,f16c,avxvnni"))) static inline __m256i qm_dot_vnni(__m256i u,
                                                                             __m256i s) {
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
}
QM_KERNELS(vnni, "avx2,fma,f16c,avxvnni", qm_dot_vnni)

/* AVX-512 VNNI: two blocks' integer sums per vpdpbusd (lanes 0..7 the
 * first block, 8..15 the second, each lane the sum of 4 products as in the
 * 256-bit kernels), then the two halves added into the 8 f32 lanes in block
 * order; an odd last block goes through the 256-bit VNNI form. Signed
 * weights use the sign trick with masks (|w| and x negated where w < 0). */
#define QM_T512 "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"

__attribute__((target(QM_T512))) static inline __m512i qm_dot512_ss(__m512i w, __m512i x) {
    __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx);
}

__attribute__((target(QM_T512))) static inline __m256i qm_dot256_ss(__m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w),
                               _mm256_sign_epi8(x, w));
}

/* a0 += s0 * p[0..7]; a1 += s1 * p[8..15] (the 256-bit kernels' two
 * chains) */
#define QM_FMA2(a0, a1, p, s0, s1)                                                \
    do {                                                                          \
        __m512 pf = _mm512_cvtepi32_ps(p);                                        \
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(s0), _mm512_castps512_ps256(pf), a0); \
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(s1), _mm512_extractf32x8_ps(pf, 1), a1); \
    } while (0)

/* Two 128-bit loads of 16 nibble bytes as 64 bytes: the low then the high
 * nibbles of a, the low then the high nibbles of b. */
__attribute__((target(QM_T512))) static inline __m512i qm_nibbles2(const uint8_t *a,
                                                                  const uint8_t *b) {
    __m128i ra = _mm_loadu_si128((const __m128i *)a), rb = _mm_loadu_si128((const __m128i *)b);
    __m256i va = _mm256_set_m128i(_mm_srli_epi16(ra, 4), ra);
    __m256i vb = _mm256_set_m128i(_mm_srli_epi16(rb, 4), rb);
    return _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(va), vb, 1),
                            _mm512_set1_epi8(15));
}

__attribute__((target(QM_T512))) static float dot_q8_0_512(const uint8_t *w, const int8_t *xq,
                                                           const float *xd, const float *xs,
                                                           int64_t nb) {
    (void)xs;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2, w += 68, xq += 64) {
        __m512i wv = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w + 2))),
            _mm256_loadu_si256((const __m256i *)(w + 36)), 1);
        __m512i p = qm_dot512_ss(wv, _mm512_loadu_si512(xq));
        QM_FMA2(a0, a1, p, QM_F16(w) * xd[b], QM_F16(w + 34) * xd[b + 1]);
    }
    if (b < nb) {
        __m256i p = qm_dot256_ss(_mm256_loadu_si256((const __m256i *)(w + 2)),
                                 _mm256_loadu_si256((const __m256i *)xq));
        a0 = QM_FMA(QM_F16(w) * xd[b], p, a0);
    }
    return qm_hsum256(_mm256_add_ps(a0, a1));
}

__attribute__((target(QM_T512))) static float dot_q4_0_512(const uint8_t *w, const int8_t *xq,
                                                           const float *xd, const float *xs,
                                                           int64_t nb) {
    (void)xs;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2, w += 36, xq += 64) {
        __m512i wv = _mm512_sub_epi8(qm_nibbles2(w + 2, w + 20), _mm512_set1_epi8(8));
        __m512i p = qm_dot512_ss(wv, _mm512_loadu_si512(xq));
        QM_FMA2(a0, a1, p, QM_F16(w) * xd[b], QM_F16(w + 18) * xd[b + 1]);
    }
    if (b < nb) {
        QM_NIBBLES(w + 2);
        __m256i p = qm_dot256_ss(_mm256_sub_epi8(nib, _mm256_set1_epi8(8)),
                                 _mm256_loadu_si256((const __m256i *)xq));
        a0 = QM_FMA(QM_F16(w) * xd[b], p, a0);
    }
    return qm_hsum256(_mm256_add_ps(a0, a1));
}

__attribute__((target(QM_T512))) static float dot_q4_1_512(const uint8_t *w, const int8_t *xq,
                                                           const float *xd, const float *xs,
                                                           int64_t nb) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    float m0 = 0.0f, m1 = 0.0f;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2, w += 40, xq += 64) {
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qm_nibbles2(w + 4, w + 24),
                                        _mm512_loadu_si512(xq));
        QM_FMA2(a0, a1, p, QM_F16(w) * xd[b], QM_F16(w + 20) * xd[b + 1]);
        m0 += QM_F16(w + 2) * xs[b];
        m1 += QM_F16(w + 22) * xs[b + 1];
    }
    if (b < nb) {
        QM_NIBBLES(w + 4);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nib,
                                        _mm256_loadu_si256((const __m256i *)xq));
        a0 = QM_FMA(QM_F16(w) * xd[b], p, a0);
        m0 += QM_F16(w + 2) * xs[b];
    }
    return qm_hsum256(_mm256_add_ps(a0, a1)) + (m0 + m1);
}

__attribute__((target(QM_T512))) static float dot_q4_k_512(const uint8_t *w, const int8_t *xq,
                                                           const float *xd, const float *xs,
                                                           int64_t nb) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    float m0 = 0.0f, m1 = 0.0f;
    for (int64_t b = 0; b < nb; w += 144) {
        uint8_t sc[8], m[8];
        q4_k_scales(w, sc, m);
        const float d = QM_F16(w), dmin = QM_F16(w + 2);
        for (int j = 0; j < 8; j += 2, b += 2, xq += 64) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(w + 16 + 16 * j));
            __m512i wv = _mm512_and_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1),
                _mm512_set1_epi8(15));
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, _mm512_loadu_si512(xq));
            QM_FMA2(a0, a1, p, d * (float)sc[j] * xd[b], d * (float)sc[j + 1] * xd[b + 1]);
            m0 += dmin * (float)m[j] * xs[b];
            m1 += dmin * (float)m[j + 1] * xs[b + 1];
        }
    }
    return qm_hsum256(_mm256_add_ps(a0, a1)) - (m0 + m1);
}

#endif /* QM_X86 */

/* ---------------------------------------------------------------- dispatch */

typedef enum { QM_C = 0, QM_AVX2 = 1, QM_VNNI = 2, QM_VNNI512 = 3 } qm_level;

static qm_level qm_level_of(oj_engine *eng) {
#ifdef QM_X86
    oj_cpu_isa isa = oj_cpu_isa_of(eng);
    if (isa < OJ_ISA_AVX2) return QM_C;
    unsigned a = 0, b = 0, c = 0, d = 0;
    /* the SIMD kernels widen scales with F16C (CPUID leaf 1, ECX bit 29),
     * which every AVX2 CPU has; without it, portable C */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 29 & 1)) return QM_C;
    /* The VNNI kernels give the AVX2 kernels' bits but were measured slower
     * than them on the Xeon of docs/quant.md: AVX2 unless OJAS_QUANT_DOT
     * asks for avxvnni or avx512vnni (each where the CPU has it, else the
     * next level down). */
    const char *want = getenv("OJAS_QUANT_DOT");
    const bool w512 = want && strcmp(want, "avx512vnni") == 0;
    if (!w512 && !(want && strcmp(want, "avxvnni") == 0)) return QM_AVX2;
    /* AVX-512 VNNI: CPUID leaf 7 subleaf 0, ECX bit 11, on an engine whose
     * level is AVX-512 (F/BW/DQ/VL and the OS's ZMM state known good) */
    if (w512 && isa >= OJ_ISA_AVX512 && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c >> 11 & 1))
        return QM_VNNI512;
    /* AVX-VNNI: CPUID leaf 7 subleaf 1, EAX bit 4 (the OS's YMM state is
     * known good: the engine's level is AVX2) */
    bool vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
    return vnni ? QM_VNNI : QM_AVX2;
#else
    (void)eng;
    return QM_C;
#endif
}

const char *oj__qmatmul_kernel_name(oj_engine *eng) {
    static const char *const names[] = {"portable C", "AVX2", "AVX-VNNI", "AVX-512 VNNI"};
    return names[qm_level_of(eng)];
}

static qm_dot_fn qm_dot(oj_qtype t, qm_level lv) {
    static const qm_dot_fn c[OJ_QTYPE_COUNT] = {dot_q8_0_c, dot_q4_0_c, dot_q4_1_c, dot_q4_k_c};
#ifdef QM_X86
    static const qm_dot_fn a[OJ_QTYPE_COUNT] = {dot_q8_0_avx2, dot_q4_0_avx2, dot_q4_1_avx2,
                                                dot_q4_k_avx2};
    static const qm_dot_fn v[OJ_QTYPE_COUNT] = {dot_q8_0_vnni, dot_q4_0_vnni, dot_q4_1_vnni,
                                                dot_q4_k_vnni};
    static const qm_dot_fn z[OJ_QTYPE_COUNT] = {dot_q8_0_512, dot_q4_0_512, dot_q4_1_512,
                                                dot_q4_k_512};
    if (lv == QM_VNNI512) return z[t];
    if (lv == QM_VNNI) return v[t];
    if (lv == QM_AVX2) return a[t];
#else
    (void)lv;
#endif
    return c[t];
}

/* ---------------------------------------------------------------- driver */

typedef struct {
    const float *x; /* contiguous [M, K] */
    int64_t m, n, k, nb;
    int8_t *xq;     /* [M, K] */
    float *xd, *xs; /* [M, nb] */
    const uint8_t *w;
    size_t wrow;
    qm_dot_fn dot;
    float *y; /* [M, N] */
} qm_ctx;

/* Rows [r0, r1) of x to int8 blocks: q8_0's rounding with the scale in f32. */
static void qm_quantize_x(void *vctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    qm_ctx *c = vctx;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t b = 0; b < c->nb; b++) {
            const float *x = c->x + r * c->k + b * 32;
            int8_t *q = c->xq + r * c->k + b * 32;
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            int32_t sum = 0;
            for (int j = 0; j < 32; j++) {
                q[j] = (int8_t)roundf(x[j] * id);
                sum += q[j];
            }
            c->xd[r * c->nb + b] = d;
            c->xs[r * c->nb + b] = d * (float)sum;
        }
}

/* Rows [n0, n1) of W against every x row. */
static void qm_rows(void *vctx, int64_t n0, int64_t n1, int tid) {
    (void)tid;
    qm_ctx *c = vctx;
    for (int64_t r = 0; r < c->m; r++) {
        const int8_t *xq = c->xq + r * c->k;
        const float *xd = c->xd + r * c->nb, *xs = c->xs + r * c->nb;
        for (int64_t i = n0; i < n1; i++)
            c->y[r * c->n + i] = c->dot(c->w + (size_t)i * c->wrow, xq, xd, xs, c->nb);
    }
}

/* fp8 on the CPU (no int8 kernel): each row of W dequantized
 * (oj__dequantize_row, into the thread's row of wd) and multiplied by
 * every x row in f32, summed in element order: x @ dequantize(W)^T with
 * f32 sums, x not rounded to int8. */
typedef struct {
    const float *x; /* contiguous [M, K] */
    int64_t m, n, k;
    const uint8_t *w;
    size_t wrow;
    float *wd; /* [threads, K] */
    float *y;  /* [M, N] */
} qm_fp8_ctx;

static void qm_rows_fp8(void *vctx, int64_t n0, int64_t n1, int tid) {
    qm_fp8_ctx *c = vctx;
    float *wd = c->wd + (int64_t)tid * c->k;
    for (int64_t i = n0; i < n1; i++) {
        oj__dequantize_row(OJ_FP8_E4M3, c->w + (size_t)i * c->wrow, c->k, wd);
        for (int64_t r = 0; r < c->m; r++) {
            const float *x = c->x + r * c->k;
            float s = 0.0f;
            for (int64_t j = 0; j < c->k; j++) s += x[j] * wd[j];
            c->y[r * c->n + i] = s;
        }
    }
}

/* A device engine (backend entries qgemv, qdequant): up to QM_GEMV_ROWS
 * rows of x through the dequantizing GEMV in f32; more (prefill) as
 * cast(x, bf16) @ dequantize(W, bf16)^T by the backend's GEMM, back to
 * f32. x is not checked for NaN or infinity here (that would read it
 * back). xc: x contiguous. */
#define QM_GEMV_ROWS 8
static oj_tensor *qmatmul_device(oj_engine *eng, oj_tensor *x, oj_tensor *xc,
                                 const oj_qtensor *q) {
    const int rank = oj_rank(x);
    const int64_t m = oj_numel(x) / q->cols;
    int64_t shape[OJ_MAX_RANK];
    memcpy(shape, oj_shape(x), sizeof(int64_t) * (size_t)rank);
    shape[rank - 1] = q->rows;
    if (m >= 1 && m <= QM_GEMV_ROWS) {
        oj_tensor *y = oj_empty(eng, rank, shape, OJ_F32);
        if (y == NULL) return NULL;
        if (eng->backend->qgemv(eng, y, xc, q->blocks, (int)q->type, q->cols) != OJ_OK) {
            oj_release(y);
            return NULL;
        }
        return y;
    }
    if (m == 0) return oj_zeros(eng, rank, shape, OJ_F32);
    oj_tensor *wd = oj_empty(eng, 2, (int64_t[]){q->rows, q->cols}, OJ_BF16);
    if (wd == NULL) return NULL;
    if (eng->backend->qdequant(eng, wd, q->blocks, (int)q->type) != OJ_OK) {
        oj_release(wd);
        return NULL;
    }
    oj_tensor *x2 = oj_reshape(xc, 2, (int64_t[]){m, q->cols});
    oj_tensor *xb = x2 ? oj_cast(x2, OJ_BF16) : NULL;
    oj_tensor *wt = oj_transpose(wd, 0, 1);
    oj_tensor *yb = xb && wt ? oj_matmul(xb, wt) : NULL; /* [m, N] bf16 */
    oj_tensor *yf = yb ? oj_cast(yb, OJ_F32) : NULL;
    oj_tensor *y = yf ? oj_reshape(yf, rank, shape) : NULL;
    oj_release(yf);
    oj_release(yb);
    oj_release(wt);
    oj_release(xb);
    oj_release(x2);
    oj_release(wd);
    return y;
}

oj_tensor *oj_qmatmul(oj_tensor *x, const oj_qtensor *q) {
    if (x == NULL) return NULL;
    oj_engine *eng = oj__engine_of(x);
    if (eng == NULL || !oj__check_tensor(eng, x, "qmatmul", "x")) return NULL;
    if (q == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "qmatmul: w is NULL");
        return NULL;
    }
    if (q->eng != eng) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "qmatmul: x and w belong to different engines");
        return NULL;
    }
    if (!oj__qdevice_ok(eng, "qmatmul", q->type)) return NULL;
    if (oj_tensor_dtype(x) != OJ_F32) {
        oj_set_error(eng, OJ_ERR_DTYPE, "qmatmul: x is %s; f32 expected",
                     oj_dtype_name(oj_tensor_dtype(x)));
        return NULL;
    }
    int rank = oj_rank(x);
    if (rank < 1 || oj_size(x, -1) != q->cols) {
        char buf[64];
        oj_set_error(eng, OJ_ERR_SHAPE, "qmatmul: x %s does not fit %s w [%lld, %lld]",
                     oj__shape_fmt(buf, sizeof buf, rank, oj_shape(x)), oj_qtype_name(q->type),
                     (long long)q->rows, (long long)q->cols);
        return NULL;
    }
    oj_tensor *xc = oj_is_contiguous(x) ? x : oj__contiguous(x);
    if (xc == NULL) return NULL;
    if (oj_engine_device(eng).type != OJ_DEVICE_CPU) {
        oj_tensor *y = qmatmul_device(eng, x, xc, q);
        if (xc != x) oj_release(xc);
        return y;
    }
    int64_t shape[OJ_MAX_RANK];
    memcpy(shape, oj_shape(x), sizeof(int64_t) * (size_t)rank);
    shape[rank - 1] = q->rows;
    oj_tensor *y = oj_empty(eng, rank, shape, OJ_F32);
    const float *xp = oj__data_ptr(xc);
    for (int64_t i = 0; y && i < oj_numel(x); i++)
        if (!isfinite(xp[i])) {
            oj_set_error(eng, OJ_ERR_NUMERIC, "qmatmul: x element %lld is %s", (long long)i,
                         isnan(xp[i]) ? "NaN" : "infinite");
            if (xc != x) oj_release(xc);
            oj_release(y);
            return NULL;
        }
    if (q->type == OJ_FP8_E4M3) {
        qm_fp8_ctx f = {.x = oj__data_ptr(xc), .m = oj_numel(x) / q->cols, .n = q->rows,
                        .k = q->cols, .w = oj__data_ptr(q->blocks), .wrow = q->row_bytes};
        f.wd = malloc(sizeof(float) * (size_t)(oj_cpu_threads(eng) * f.k));
        if (y == NULL || f.wd == NULL) {
            if (y != NULL) oj_set_error(eng, OJ_ERR_CAPACITY, "qmatmul: out of host memory");
            free(f.wd);
            if (xc != x) oj_release(xc);
            oj_release(y);
            return NULL;
        }
        f.y = oj__data_ptr(y);
        if (f.m > 0) oj_cpu_parallel_for(eng, f.n, QM_GRAIN, qm_rows_fp8, &f);
        free(f.wd);
        if (xc != x) oj_release(xc);
        return y;
    }
    qm_ctx c = {.x = oj__data_ptr(xc), .m = oj_numel(x) / q->cols, .n = q->rows,
                .k = q->cols, .nb = q->cols / OJ_QBLOCK, .w = oj__data_ptr(q->blocks),
                .wrow = q->row_bytes, .dot = qm_dot(q->type, qm_level_of(eng))};
    c.xq = malloc((size_t)(c.m * c.k) + 1);
    c.xd = malloc(sizeof(float) * (size_t)(c.m * c.nb) + 1);
    c.xs = malloc(sizeof(float) * (size_t)(c.m * c.nb) + 1);
    if (y == NULL || c.xq == NULL || c.xd == NULL || c.xs == NULL) {
        if (y != NULL) oj_set_error(eng, OJ_ERR_CAPACITY, "qmatmul: out of host memory");
        goto fail;
    }
    c.y = oj__data_ptr(y);
    if (c.m > 0) {
        oj_cpu_parallel_for(eng, c.m, 8, qm_quantize_x, &c);
        oj_cpu_parallel_for(eng, c.n, QM_GRAIN, qm_rows, &c);
    }
    free(c.xq);
    free(c.xd);
    free(c.xs);
    if (xc != x) oj_release(xc);
    return y;
fail:
    free(c.xq);
    free(c.xd);
    free(c.xs);
    if (xc != x) oj_release(xc);
    oj_release(y);
    return NULL;
}
