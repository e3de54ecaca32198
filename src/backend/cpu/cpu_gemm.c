/* ojas's f32 GEMM: cache-blocked, packed, vectorised, threaded (cpu_gemm.h).
 *
 * The GotoBLAS/BLIS structure (Goto & van de Geijn, "Anatomy of
 * high-performance matrix multiplication", TOMS 2008; Van Zee & van de
 * Geijn, "BLIS", TOMS 2015): for each NC-wide panel of columns and each
 * KC-deep block of k, the KC x NC block of b is packed once into slivers
 * of NR columns (shared by the threads), then every task (an MC-row block
 * of a times a chunk of the panel) packs its MC x KC block of a into
 * slivers of MR rows and runs an MR x NR register-tile kernel over them.
 * The kernel loads its tile of c, adds the products over the block's k in
 * order, and stores the tile back, so across blocks each element of c is
 * one chain over k = 0..K-1, a multiply then an add per term (never fused):
 * the bits of the plain in-order f32 sum, whatever the block sizes, the
 * tile shape, the thread count or the SIMD level. (On Zen 4/5 the adds and
 * multiplies issue on separate pipes, two of each per cycle, so unfused
 * costs no throughput against FMA; the dependency is on the add alone.)
 *
 * Register tiles: AVX-512 24 x 16 (24 zmm accumulators, one load of b per k
 * and an embedded broadcast of a per row), AVX2 6 x 16 (12 ymm), and a
 * baseline 4 x 8 tile in 16-byte vectors. Partial tiles at the edges are computed in full from zero-padded
 * slivers and stored with masks. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OJ_GEMM_X86 1
#endif

typedef void (*micro_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                         int h, int w);

typedef struct {
    int mr, nr;
    int64_t mc, kc, nc; /* block sizes: a block mc x kc (L2), b panel kc x nc */
    micro_fn micro;
} gemm_cfg;

/* ---------------------------------------------------------------- tiles */

#define S_MR 4
#define S_NR 8

#if defined(__GNUC__)
/* Baseline tile in 16-byte vectors (SSE2 on x86-64, NEON elsewhere). */
typedef float s_v4 __attribute__((vector_size(16)));

static void micro_scalar(int64_t kc, const float *restrict ap, const float *restrict bp,
                         float *restrict c, int64_t ldc, int h, int w) {
    s_v4 acc[S_MR][2];
    for (int i = 0; i < S_MR; i++) {
        float t[S_NR];
        for (int j = 0; j < S_NR; j++) t[j] = (i < h && j < w) ? c[i * ldc + j] : 0.0f;
        memcpy(&acc[i][0], t, 16);
        memcpy(&acc[i][1], t + 4, 16);
    }
    for (int64_t k = 0; k < kc; k++) {
        s_v4 b0, b1;
        memcpy(&b0, bp + k * S_NR, 16);
        memcpy(&b1, bp + k * S_NR + 4, 16);
        for (int i = 0; i < S_MR; i++) {
            float av = ap[k * S_MR + i];
            s_v4 a = {av, av, av, av};
            acc[i][0] += a * b0;
            acc[i][1] += a * b1;
        }
    }
    for (int i = 0; i < h; i++) {
        float t[S_NR];
        memcpy(t, &acc[i][0], 16);
        memcpy(t + 4, &acc[i][1], 16);
        for (int j = 0; j < w; j++) c[i * ldc + j] = t[j];
    }
}
#else
static void micro_scalar(int64_t kc, const float *restrict ap, const float *restrict bp,
                         float *restrict c, int64_t ldc, int h, int w) {
    float acc[S_MR][S_NR];
    for (int i = 0; i < S_MR; i++)
        for (int j = 0; j < S_NR; j++) acc[i][j] = (i < h && j < w) ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < S_MR; i++)
            for (int j = 0; j < S_NR; j++) acc[i][j] += ap[k * S_MR + i] * bp[k * S_NR + j];
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++) c[i * ldc + j] = acc[i][j];
}
#endif

#ifdef OJ_GEMM_X86
/* AVX-512: 24 rows x 16 columns: one load of b per k, and each row's
 * broadcast of a used once, so it folds into the multiply as an embedded
 * broadcast (one multiply and one add per row and k). */
#define Z_MR 24
#define Z_NR 16

#define Z_ROWS(X)                                                                          \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)  \
    X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

/* The tile body, with MAC(acc, a, b) the per-term operation. */
#define Z_BODY(MAC)                                                                        \
    __mmask16 m0 = (__mmask16)(w >= 16 ? 0xffffu : (1u << w) - 1u);                       \
    Z_ROWS(Z_DECL)                                                                         \
    for (int64_t k = 0; k < kc; k++) {                                                     \
        __m512 b0 = _mm512_load_ps(bp);                                                    \
        Z_ROWS(MAC)                                                                        \
        ap += Z_MR;                                                                        \
        bp += Z_NR;                                                                        \
    }                                                                                      \
    Z_ROWS(Z_STORE)
#define Z_DECL(i)                                                                          \
    __m512 c##i = (i) < h ? _mm512_maskz_loadu_ps(m0, c + (i) * ldc) : _mm512_setzero_ps();
#define Z_STORE(i)                                                                         \
    if ((i) < h) _mm512_mask_storeu_ps(c + (i) * ldc, m0, c##i);
#define Z_MULADD(i) c##i = _mm512_add_ps(c##i, _mm512_mul_ps(_mm512_set1_ps(ap[i]), b0));
#define Z_FMA(i) c##i = _mm512_fmadd_ps(_mm512_set1_ps(ap[i]), b0, c##i);

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void
micro_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float *restrict c,
             int64_t ldc, int h, int w) {
    Z_BODY(Z_MULADD)
}

/* FAST numerics: the same tile with fused multiply-adds. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) static void
micro_avx512_fma(int64_t kc, const float *restrict ap, const float *restrict bp,
                 float *restrict c, int64_t ldc, int h, int w) {
    Z_BODY(Z_FMA)
}

/* AVX2: 6 rows x 16 columns. */
#define Y_MR 6
#define Y_NR 16

#define Y_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

#define Y_BODY(MAC)                                                                        \
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                       \
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w > 8 ? 8 : w), lanes);              \
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w > 16 ? 8 : w > 8 ? w - 8 : 0), lanes); \
    Y_ROWS(Y_DECL)                                                                         \
    for (int64_t k = 0; k < kc; k++) {                                                     \
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);                       \
        __m256 a;                                                                          \
        Y_ROWS(MAC)                                                                        \
        ap += Y_MR;                                                                        \
        bp += Y_NR;                                                                        \
    }                                                                                      \
    Y_ROWS(Y_STORE)
#define Y_DECL(i)                                                                          \
    __m256 c##i##a = (i) < h ? _mm256_maskload_ps(c + (i) * ldc, m0) : _mm256_setzero_ps(); \
    __m256 c##i##b = (i) < h ? _mm256_maskload_ps(c + (i) * ldc + 8, m1) : _mm256_setzero_ps();
#define Y_STORE(i)                                                                         \
    if ((i) < h) {                                                                         \
        _mm256_maskstore_ps(c + (i) * ldc, m0, c##i##a);                                   \
        _mm256_maskstore_ps(c + (i) * ldc + 8, m1, c##i##b);                               \
    }
#define Y_MULADD(i)                                                                        \
    a = _mm256_broadcast_ss(ap + (i));                                                     \
    c##i##a = _mm256_add_ps(c##i##a, _mm256_mul_ps(a, b0));                                \
    c##i##b = _mm256_add_ps(c##i##b, _mm256_mul_ps(a, b1));
#define Y_FMA(i)                                                                           \
    a = _mm256_broadcast_ss(ap + (i));                                                     \
    c##i##a = _mm256_fmadd_ps(a, b0, c##i##a);                                             \
    c##i##b = _mm256_fmadd_ps(a, b1, c##i##b);

__attribute__((target("avx2"))) static void micro_avx2(int64_t kc, const float *restrict ap,
                                                      const float *restrict bp,
                                                      float *restrict c, int64_t ldc, int h,
                                                      int w) {
    Y_BODY(Y_MULADD)
}

__attribute__((target("avx2,fma"))) static void micro_avx2_fma(int64_t kc,
                                                              const float *restrict ap,
                                                              const float *restrict bp,
                                                              float *restrict c, int64_t ldc,
                                                              int h, int w) {
    Y_BODY(Y_FMA)
}
#endif

static gemm_cfg cfg_for(oj_cpu_isa isa, bool fused) {
#ifdef OJ_GEMM_X86
    if (isa == OJ_ISA_AVX512)
        return (gemm_cfg){Z_MR, Z_NR, 144, 512, 3072, fused ? micro_avx512_fma : micro_avx512};
    if (isa == OJ_ISA_AVX2)
        return (gemm_cfg){Y_MR, Y_NR, 120, 256, 3072, fused ? micro_avx2_fma : micro_avx2};
#endif
    (void)isa, (void)fused;
    return (gemm_cfg){S_MR, S_NR, 64, 256, 1024, micro_scalar};
}

/* ---------------------------------------------------------------- packing */

static inline float ld32(const char *p, oj_dtype dt) {
    switch (dt) {
    case OJ_F32: return *(const float *)p;
    case OJ_BF16: return oj_bf16_to_f32(*(const uint16_t *)p);
    case OJ_F16: return oj_f16_to_f32(*(const uint16_t *)p);
    default: return (float)oj__load(p, dt);
    }
}

/* Slivers [s0, s1) of the kc x nc block of b at (k0, n0): sliver s holds
 * columns n0 + s*nr .. + nr as bp[s][k][j], zero beyond nc. */
static void pack_b(float *bp, const oj_mm_mat *b, int64_t k0, int64_t kc, int64_t n0,
                   int64_t nc, int nr, int64_t s0, int64_t s1) {
    int64_t es = (int64_t)oj_dtype_size(b->dt);
    for (int64_t s = s0; s < s1; s++) {
        float *dst = bp + s * kc * nr;
        int64_t j0 = s * nr, w = nc - j0 < nr ? nc - j0 : nr;
        const char *base = b->base + ((k0)*b->rs + (n0 + j0) * b->cs) * es;
        if (b->dt == OJ_F32 && b->cs == 1) {
            for (int64_t k = 0; k < kc; k++) {
                memcpy(dst + k * nr, (const float *)base + k * b->rs, (size_t)w * sizeof(float));
                for (int64_t j = w; j < nr; j++) dst[k * nr + j] = 0.0f;
            }
        } else if (b->dt == OJ_F32 && b->rs == 1) { /* columns contiguous along k */
            for (int64_t j = 0; j < w; j++) {
                const float *col = (const float *)base + j * b->cs;
                for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = col[k];
            }
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = w; j < nr; j++) dst[k * nr + j] = 0.0f;
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = 0; j < nr; j++)
                    dst[k * nr + j] = j < w ? ld32(base + (k * b->rs + j * b->cs) * es, b->dt) : 0.0f;
        }
    }
}

#ifdef OJ_GEMM_X86
/* The 24-row sliver of a row-major f32 a for the AVX-512 tile: 16 k at a
 * time, rows 0-15 as a 16 x 16 in-register transpose and rows 16-23 as an
 * 8 x 16 one, so every load and store is a full contiguous vector (gathers
 * and scalar copies ran at a few GB/s here). */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static inline void
tr16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* r[4g + j] now holds, per 128-bit lane L, rows 4g..4g+3 of column 4L + j */
    for (int i = 0; i < 8; i++) {
        int g = i / 4, j = i % 4; /* pair groups (0,1) and (2,3) */
        t[i] = _mm512_shuffle_f32x4(r[8 * g + j], r[8 * g + 4 + j], 0x88);
        t[i + 8] = _mm512_shuffle_f32x4(r[8 * g + j], r[8 * g + 4 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[4 + j], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[4 + j], 0xdd);
        r[j + 4] = _mm512_shuffle_f32x4(t[8 + j], t[12 + j], 0x88);
        r[j + 12] = _mm512_shuffle_f32x4(t[8 + j], t[12 + j], 0xdd);
    }
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void
pack_a_rows24(float *dst, const float *base, int64_t rs, int64_t h, int64_t kc) {
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16, dst += 16 * 24) {
        __m512 r[16], q[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < h ? _mm512_loadu_ps(base + i * rs + k) : _mm512_setzero_ps();
        for (int i = 0; i < 16; i++)
            q[i] = 16 + i < h && i < 8 ? _mm512_loadu_ps(base + (16 + i) * rs + k) : _mm512_setzero_ps();
        tr16(r);
        tr16(q);
        for (int j = 0; j < 16; j++) { /* k + j: rows 0-15, then 16-23 */
            _mm512_storeu_ps(dst + j * 24, r[j]);
            _mm512_mask_storeu_ps(dst + j * 24 + 16, 0xff, q[j]);
        }
    }
    for (; k < kc; k++, dst += 24)
        for (int64_t i = 0; i < 24; i++) dst[i] = i < h ? base[i * rs + k] : 0.0f;
}
#endif

/* The mc x kc block of a at (m0, k0) as slivers of mr rows: ap[s][k][i],
 * zero beyond mc. */
static void pack_a(float *ap, const oj_mm_mat *a, int64_t m0, int64_t mc, int64_t k0, int64_t kc,
                   int mr) {
    int64_t es = (int64_t)oj_dtype_size(a->dt);
    for (int64_t i0 = 0; i0 < mc; i0 += mr) {
        float *dst = ap + (i0 / mr) * kc * mr;
        int64_t h = mc - i0 < mr ? mc - i0 : mr;
        const char *base = a->base + ((m0 + i0) * a->rs + k0 * a->cs) * es;
#ifdef OJ_GEMM_X86
        if (a->dt == OJ_F32 && a->cs == 1 && mr == 24 && a->rs * 24 < INT32_MAX &&
            oj_cpu_isa_detect() >= OJ_ISA_AVX512) {
            pack_a_rows24(dst, (const float *)base, a->rs, h, kc);
            continue;
        }
#endif
        if (a->dt == OJ_F32 && a->cs == 1) { /* rows contiguous along k */
            const float *rows[32];
            for (int64_t i = 0; i < mr; i++) rows[i] = (const float *)base + (i < h ? i : 0) * a->rs;
            for (int64_t k = 0; k < kc; k++, dst += mr) /* writes in order */
                for (int64_t i = 0; i < mr; i++) dst[i] = i < h ? rows[i][k] : 0.0f;
        } else if (a->dt == OJ_F32 && a->rs == 1) {
            for (int64_t k = 0; k < kc; k++) {
                memcpy(dst + k * mr, (const float *)base + k * a->cs, (size_t)h * sizeof(float));
                for (int64_t i = h; i < mr; i++) dst[k * mr + i] = 0.0f;
            }
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int64_t i = 0; i < mr; i++)
                    dst[k * mr + i] = i < h ? ld32(base + (i * a->rs + k * a->cs) * es, a->dt) : 0.0f;
        }
    }
}

/* ---------------------------------------------------------------- driver */

typedef struct {
    oj_engine *eng;
    gemm_cfg cfg;
    const oj_mm_mat *a, *b;
    float *c;
    int64_t ldc, m;
    int64_t n0, nc, k0, kc; /* current panel and k block */
    int64_t nct;            /* columns per compute task (multiple of nr) */
    float *bp;              /* packed panel */
    float *ap;              /* packed a block when serial (else per-thread scratch) */
} drv;

static void pack_b_chunk(void *vd, int64_t s0, int64_t s1, int tid) {
    (void)tid;
    const drv *d = vd;
    pack_b(d->bp, d->b, d->k0, d->kc, d->n0, d->nc, d->cfg.nr, s0, s1);
}

/* c[m0 .. m0+mc, j0 .. j0+w] += packed a (ap) @ packed panel slivers. */
static void compute_block(const drv *d, const float *ap, int64_t m0, int64_t mc, int64_t jb,
                          int64_t je) {
    int mr = d->cfg.mr, nr = d->cfg.nr;
    for (int64_t j = jb; j < je; j += nr) {
        int w = (int)(d->nc - j < nr ? d->nc - j : nr);
        const float *bs = d->bp + (j / nr) * d->kc * nr;
        for (int64_t i = 0; i < mc; i += mr) {
            int h = (int)(mc - i < mr ? mc - i : mr);
            d->cfg.micro(d->kc, ap + (i / mr) * d->kc * mr, bs,
                         d->c + (m0 + i) * d->ldc + d->n0 + j, d->ldc, h, w);
        }
    }
}

/* Items: (m block, column chunk) pairs of the current panel. */
static void compute_chunk(void *vd, int64_t begin, int64_t end, int tid) {
    const drv *d = vd;
    int64_t mc = d->cfg.mc, nchunk = (d->nc + d->nct - 1) / d->nct;
    float *ap = d->ap ? d->ap : oj_cpu_scratch(d->eng, tid, (size_t)(mc * d->kc) * sizeof(float));
    int64_t packed_m = -1;
    for (int64_t it = begin; it < end; it++) {
        int64_t mb = it / nchunk, cb = it % nchunk;
        int64_t m0 = mb * mc, h = d->m - m0 < mc ? d->m - m0 : mc;
        if (packed_m != m0) {
            pack_a(ap, d->a, m0, h, d->k0, d->kc, d->cfg.mr);
            packed_m = m0;
        }
        int64_t jb = cb * d->nct, je = jb + d->nct < d->nc ? jb + d->nct : d->nc;
        compute_block(d, ap, m0, h, jb, je);
    }
}

oj_status oj__cpu_sgemm(oj_engine *eng, int64_t m, int64_t n, int64_t k, const oj_mm_mat *a,
                        const oj_mm_mat *b, float *c, int64_t ldc, int tid, bool fused) {
    if (m == 0 || n == 0 || k == 0) return OJ_OK;
    drv d = {.eng = eng, .cfg = cfg_for(oj_cpu_isa_of(eng), fused), .a = a, .b = b, .c = c,
             .ldc = ldc, .m = m};
    gemm_cfg *g = &d.cfg;
    bool parallel = tid < 0;
    int threads = parallel ? oj_cpu_threads(eng) : 1;
    int64_t kcmax = k < g->kc ? k : g->kc;
    int64_t ncmax = n < g->nc ? n : g->nc;
    size_t ablock = (size_t)(g->mc * kcmax), panel = (size_t)((ncmax + g->nr - 1) / g->nr * g->nr * kcmax);
    if (parallel) { /* a blocks in each thread's scratch, the panel shared */
        for (int t = 0; t < threads; t++)
            if (oj_cpu_scratch(eng, t, ablock * sizeof(float)) == NULL) return OJ_ERR_CAPACITY;
        d.bp = oj_cpu_workspace(eng, panel * sizeof(float));
    } else { /* both in this thread's scratch */
        d.ap = oj_cpu_scratch(eng, tid, (ablock + panel) * sizeof(float));
        d.bp = d.ap ? d.ap + ablock : NULL;
    }
    if (d.bp == NULL) return OJ_ERR_CAPACITY;
    int64_t mblocks = (m + g->mc - 1) / g->mc;
    for (int64_t n0 = 0; n0 < n; n0 += g->nc) {
        d.n0 = n0;
        d.nc = n - n0 < g->nc ? n - n0 : g->nc;
        int64_t slivers = (d.nc + g->nr - 1) / g->nr;
        /* column chunks only when the m blocks alone cannot feed the threads */
        int64_t want = mblocks >= 2 * threads ? 1 : (2 * threads + mblocks - 1) / mblocks;
        int64_t per = (slivers + want - 1) / want;
        d.nct = (per < 1 ? 1 : per) * g->nr;
        int64_t items = mblocks * ((d.nc + d.nct - 1) / d.nct);
        for (int64_t k0 = 0; k0 < k; k0 += g->kc) {
            d.k0 = k0;
            d.kc = k - k0 < g->kc ? k - k0 : g->kc;
            if (parallel) {
                oj_cpu_parallel_for(eng, slivers, 4, pack_b_chunk, &d);
                oj_cpu_parallel_for(eng, items, 1, compute_chunk, &d);
            } else {
                pack_b_chunk(&d, 0, slivers, tid);
                compute_chunk(&d, 0, items, tid);
            }
        }
    }
    return OJ_OK;
}
