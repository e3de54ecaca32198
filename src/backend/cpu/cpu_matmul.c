/* CPU matrix multiply: out[b] (+)= a[b] @ b[b] on rank-3 strided views.
 *
 * Paths:
 * - OJ_NUMERICS_FAST, f32/bf16/f16: the GEMM of cpu_gemm.c with fused
 *   multiply-adds, or OpenBLAS's cblas_sgemm, as oj_cpu_fast_gemm says
 *   (OJAS_GEMM=ojas|openblas; OpenBLAS by default);
 *   f64: cblas_dgemm. BLAS gets each batch when a matrix has a unit stride
 *   in one of its last two dims (else it is packed to a contiguous copy
 *   first); bf16/f16 are widened to f32.
 * - otherwise (EXACT, or no OpenBLAS): our own kernels. f32 (and bf16/f16,
 *   widened) go to the packed, vectorised, threaded GEMM of cpu_gemm.c
 *   (small batched products run one batch per task instead); f64 to the
 *   cache-blocked scalar kernel below. Every output element is a sum over
 *   k in index-increasing order (k blocks are visited in increasing order
 *   and the partial sum stays in the output between blocks), so results
 *   do not depend on blocking or threads. f32 accumulates in f32, f64 in
 *   f64, as a GEMM does.
 *
 * Blocking follows the usual GotoBLAS/BLIS structure (Goto & van de Geijn,
 * "Anatomy of high-performance matrix multiplication", TOMS 2008): pack a
 * KC x NC panel of b and an MC x KC block of a, then an MR x NR register
 * tile loops over k with its accumulators held in locals. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pool.h"

#ifdef OJAS_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define MM_KC 256
#define MM_MC 64
#define MM_NC 512
#define MM_MR 4
#define MM_NRF 8 /* f32 register tile width (2 vectors) */
#define MM_NRD 4 /* f64 register tile width (2 vectors) */

typedef oj_mm_mat mm_mat;

static inline float ld_f(const char *p, oj_dtype dt) {
    switch (dt) {
    case OJ_F32: return *(const float *)p;
    case OJ_BF16: return oj_bf16_to_f32(*(const uint16_t *)p);
    case OJ_F16: return oj_f16_to_f32(*(const uint16_t *)p);
    default: return (float)*(const double *)p;
    }
}

/* The k loop of the register tile: tile[i][j] += ap[k][i] * bp[k][j] for
 * k = 0, 1, ... in order (one multiply and one add per term, never fused,
 * so the bits match a plain in-order sum). With GNU C vector extensions the
 * MR x NR accumulators live in 16-byte vector registers; otherwise plain C
 * that the compiler may vectorise. */
#if defined(__GNUC__)
typedef float mm_vf __attribute__((vector_size(16)));
typedef double mm_vd __attribute__((vector_size(16)));
#define MM_TILE_LOOP(T, NR, VT)                                                              \
    {                                                                                        \
        enum { VW = 16 / sizeof(T), NV = NR / VW };                                          \
        VT acc[MM_MR][NV];                                                                   \
        memcpy(acc, tile, sizeof acc);                                                       \
        for (int64_t k = 0; k < kc; k++) {                                                   \
            VT bv[NV];                                                                       \
            memcpy(bv, bp + k * NR, sizeof bv);                                              \
            _Pragma("GCC unroll 16") for (int i = 0; i < MM_MR; i++) {                       \
                VT av;                                                                       \
                _Pragma("GCC unroll 16") for (int q = 0; q < VW; q++) av[q] = ap[k * MM_MR + i]; \
                _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) acc[i][v] += av * bv[v]; \
            }                                                                                \
        }                                                                                    \
        memcpy(tile, acc, sizeof acc);                                                       \
    }
#else
typedef float mm_vf;
typedef double mm_vd;
#define MM_TILE_LOOP(T, NR, VT)                                                              \
    for (int64_t k = 0; k < kc; k++)                                                         \
        for (int i = 0; i < MM_MR; i++) {                                                    \
            T av = ap[k * MM_MR + i];                                                        \
            for (int j = 0; j < NR; j++) tile[i][j] += av * bp[k * NR + j];                  \
        }
#endif

/* ---------------------------------------------------------------- f32 / f64
 * The blocked kernel, written once for each compute type by a macro:
 *   T     compute type (float, double)
 *   NR    register tile width
 *   SFX   name suffix
 *   LOAD  element loader (char *p, dtype) -> T
 *   VT    16-byte vector type of T (GNU C vector extension) */

#define MM_DEFINE_KERNEL(T, NR, SFX, LOAD, VT)                                                     \
    /* Bp[jt][k][j]: columns n0 + jt*NR + j, rows k0 + k; zero-padded. */                     \
    static void pack_b_##SFX(T *bp, const mm_mat *b, int64_t k0, int64_t kc, int64_t n0,     \
                             int64_t nc) {                                                   \
        size_t es = oj_dtype_size(b->dt);                                                    \
        for (int64_t jt = 0; jt < nc; jt += NR) {                                            \
            int64_t w = nc - jt < NR ? nc - jt : NR;                                         \
            for (int64_t k = 0; k < kc; k++) {                                               \
                const char *row = b->base + ((k0 + k) * b->rs + (n0 + jt) * b->cs) * (int64_t)es; \
                int64_t j = 0;                                                               \
                if (b->cs == 1 && b->dt == (sizeof(T) == 4 ? OJ_F32 : OJ_F64)) {                       \
                    memcpy(bp, row, (size_t)w * sizeof(T));                                  \
                    j = w;                                                                   \
                } else {                                                                     \
                    for (; j < w; j++) bp[j] = LOAD(row + j * b->cs * (int64_t)es, b->dt);   \
                }                                                                            \
                for (; j < NR; j++) bp[j] = 0;                                               \
                bp += NR;                                                                    \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    /* Ap[it][k][i]: rows m0 + it*MR + i, cols k0 + k; zero-padded. */                       \
    static void pack_a_##SFX(T *ap, const mm_mat *a, int64_t m0, int64_t mc, int64_t k0,     \
                             int64_t kc) {                                                   \
        size_t es = oj_dtype_size(a->dt);                                                    \
        for (int64_t it = 0; it < mc; it += MM_MR) {                                         \
            int64_t h = mc - it < MM_MR ? mc - it : MM_MR;                                   \
            for (int64_t k = 0; k < kc; k++) {                                               \
                const char *col = a->base + ((m0 + it) * a->rs + (k0 + k) * a->cs) * (int64_t)es; \
                int64_t i = 0;                                                               \
                for (; i < h; i++) ap[i] = LOAD(col + i * a->rs * (int64_t)es, a->dt);       \
                for (; i < MM_MR; i++) ap[i] = 0;                                            \
                ap += MM_MR;                                                                 \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    /* C tile (h x w valid of MR x NR, row stride ldc) += Ap-panel @ Bp-panel. */            \
    static void micro_##SFX(int64_t kc, const T *restrict ap, const T *restrict bp,          \
                            T *restrict c, int64_t ldc, int64_t h, int64_t w) {              \
        T tile[MM_MR][NR];                                                                   \
        for (int i = 0; i < MM_MR; i++)                                                      \
            for (int j = 0; j < NR; j++) tile[i][j] = (i < h && j < w) ? c[i * ldc + j] : 0; \
        MM_TILE_LOOP(T, NR, VT)                                                              \
        for (int64_t i = 0; i < h; i++)                                                      \
            for (int64_t j = 0; j < w; j++) c[i * ldc + j] = tile[i][j];                     \
    }                                                                                        \
    /* c (m x n, row stride ldc, already initialised) += a @ b. */                          \
    static oj_status gemm_##SFX(int64_t m, int64_t n, int64_t k, const mm_mat *a,            \
                                const mm_mat *b, T *c, int64_t ldc) {                        \
        int64_t kcmax = k < MM_KC ? k : MM_KC;                                               \
        int64_t ncmax = n < MM_NC ? n : MM_NC;                                               \
        int64_t mcmax = m < MM_MC ? m : MM_MC;                                               \
        T *bp = malloc((size_t)(kcmax * (ncmax + NR)) * sizeof(T));                          \
        T *ap = malloc((size_t)(kcmax * (mcmax + MM_MR)) * sizeof(T));                       \
        if (bp == NULL || ap == NULL) {                                                      \
            free(bp);                                                                        \
            free(ap);                                                                        \
            return OJ_ERR_CAPACITY;                                                          \
        }                                                                                    \
        for (int64_t n0 = 0; n0 < n; n0 += MM_NC) {                                          \
            int64_t nc = n - n0 < MM_NC ? n - n0 : MM_NC;                                    \
            for (int64_t k0 = 0; k0 < k; k0 += MM_KC) {                                      \
                int64_t kc = k - k0 < MM_KC ? k - k0 : MM_KC;                                \
                pack_b_##SFX(bp, b, k0, kc, n0, nc);                                         \
                for (int64_t m0 = 0; m0 < m; m0 += MM_MC) {                                  \
                    int64_t mc = m - m0 < MM_MC ? m - m0 : MM_MC;                            \
                    pack_a_##SFX(ap, a, m0, mc, k0, kc);                                     \
                    for (int64_t jt = 0; jt < nc; jt += NR) {                                \
                        int64_t w = nc - jt < NR ? nc - jt : NR;                             \
                        for (int64_t it = 0; it < mc; it += MM_MR) {                         \
                            int64_t h = mc - it < MM_MR ? mc - it : MM_MR;                   \
                            micro_##SFX(kc, ap + it * kc, bp + jt * kc,                      \
                                        c + (m0 + it) * ldc + n0 + jt, ldc, h, w);           \
                        }                                                                    \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        free(bp);                                                                            \
        free(ap);                                                                            \
        return OJ_OK;                                                                        \
    }

static inline double ld_d(const char *p, oj_dtype dt) { return oj__load(p, dt); }

MM_DEFINE_KERNEL(double, MM_NRD, f64, ld_d, mm_vd)

/* ---------------------------------------------------------------- OpenBLAS */

#ifdef OJAS_HAVE_OPENBLAS
/* Can a matrix (rows x cols, strides rs/cs) be passed to BLAS as is?
 * Sets *trans and *ld. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                        int64_t *ld) {
    int64_t c1 = cols > 1 ? cols : 1, r1 = rows > 1 ? rows : 1;
    if ((cs == 1 || cols == 1) && (rows == 1 || rs >= c1)) {
        *trans = false;
        *ld = rows == 1 ? c1 : rs;
        return *ld <= INT32_MAX;
    }
    if ((rs == 1 || rows == 1) && (cols == 1 || cs >= r1)) {
        *trans = true;
        *ld = cols == 1 ? r1 : cs;
        return *ld <= INT32_MAX;
    }
    return false;
}

/* Contiguous row-major copy of a matrix in compute type (f32 or f64). */
static void *pack_full(const mm_mat *x, int64_t rows, int64_t cols, bool dbl) {
    size_t es = oj_dtype_size(x->dt);
    size_t n = (size_t)(rows * cols);
    void *p = malloc((n ? n : 1) * (dbl ? sizeof(double) : sizeof(float)));
    if (p == NULL) return NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            const char *s = x->base + (i * x->rs + j * x->cs) * (int64_t)es;
            if (dbl)
                ((double *)p)[i * cols + j] = oj__load(s, x->dt);
            else
                ((float *)p)[i * cols + j] = ld_f(s, x->dt);
        }
    return p;
}

/* c (m x n, row stride ldc, compute type) = beta*c + a @ b through BLAS
 * on the calling thread. */
static oj_status blas_gemm1(int64_t m, int64_t n, int64_t k, const mm_mat *a, const mm_mat *b,
                            void *c, int64_t ldc64, bool dbl, bool beta1) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return OJ_ERR_UNSUPPORTED;
    bool ta, tb;
    int64_t lda, ldb;
    void *pa = NULL, *pb = NULL;
    const void *da, *db;
    oj_dtype want = dbl ? OJ_F64 : OJ_F32;
    if (a->dt == want && blas_layout(m, k, a->rs, a->cs, &ta, &lda)) {
        da = a->base;
    } else {
        pa = pack_full(a, m, k, dbl);
        if (pa == NULL) return OJ_ERR_CAPACITY;
        da = pa, ta = false, lda = k > 1 ? k : 1;
    }
    if (b->dt == want && blas_layout(k, n, b->rs, b->cs, &tb, &ldb)) {
        db = b->base;
    } else {
        pb = pack_full(b, k, n, dbl);
        if (pb == NULL) {
            free(pa);
            return OJ_ERR_CAPACITY;
        }
        db = pb, tb = false, ldb = n > 1 ? n : 1;
    }
    int ldc = (int)(ldc64 > 1 ? ldc64 : 1);
    if (dbl)
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, 1.0, da, (int)lda, db, (int)ldb, beta1 ? 1.0 : 0.0,
                    c, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, 1.0f, da, (int)lda, db, (int)ldb,
                    beta1 ? 1.0f : 0.0f, c, ldc);
    free(pa);
    free(pb);
    return OJ_OK;
}

/* BLAS split over our threads: OpenBLAS runs single-threaded inside each
 * chunk, a block of rows (or of columns when n > m) of c, so the process
 * has one thread pool (an idle OpenBLAS worker spins and yields for about
 * 0.1 s after every call, which on a small machine takes the CPU our
 * workers need). */
typedef struct {
    int64_t m, n, k;
    const mm_mat *a, *b;
    char *c;
    bool dbl, beta1, rows;
    atomic_int status;
} blas_split;

static void blas_chunk(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    blas_split *s = vc;
    size_t ces = s->dbl ? sizeof(double) : sizeof(float);
    mm_mat a = *s->a, b = *s->b;
    oj_status st;
    if (s->rows) {
        a.base += begin * a.rs * (int64_t)oj_dtype_size(a.dt);
        st = blas_gemm1(end - begin, s->n, s->k, &a, &b, s->c + (size_t)(begin * s->n) * ces, s->n,
                        s->dbl, s->beta1);
    } else {
        b.base += begin * b.cs * (int64_t)oj_dtype_size(b.dt);
        st = blas_gemm1(s->m, end - begin, s->k, &a, &b, s->c + (size_t)begin * ces, s->n, s->dbl,
                        s->beta1);
    }
    if (st != OJ_OK) atomic_store(&s->status, (int)st);
}

/* c (m x n contiguous) = beta*c + a @ b through BLAS, threaded by us. */
static oj_status blas_gemm(oj_engine *eng, int64_t m, int64_t n, int64_t k, const mm_mat *a,
                           const mm_mat *b, void *c, bool dbl, bool beta1) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return OJ_ERR_UNSUPPORTED;
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    int t = oj_cpu_threads(eng);
    if (t < 2 || m * n * k < ((int64_t)1 << 21))
        return blas_gemm1(m, n, k, a, b, c, n, dbl, beta1);
    blas_split s = {m, n, k, a, b, c, dbl, beta1, m >= n, 0};
    int64_t len = s.rows ? m : n, grain = (len + 2 * t - 1) / (2 * t);
    grain = (grain + 15) / 16 * 16;
    oj_cpu_parallel_for(eng, len, grain, blas_chunk, &s);
    return (oj_status)atomic_load(&s.status);
}
#endif

/* ---------------------------------------------------------------- entry */

/* f32 products in f32 outputs through cpu_gemm.c. */
typedef struct {
    oj_engine *eng;
    oj_tensor *out;
    const oj_tensor *a, *b;
    int64_t m, n, k;
    bool fused;
    atomic_int failed;
} f32_batches;

static void f32_batch_one(const f32_batches *fb, int64_t bi, int tid, atomic_int *failed) {
    const oj_tensor *a = fb->a, *b = fb->b;
    float *c = (float *)((char *)fb->out->storage->data + fb->out->offset) + bi * fb->m * fb->n;
    mm_mat ma = {(const char *)a->storage->data + a->offset +
                     bi * a->stride[0] * (int64_t)oj_dtype_size(a->dtype),
                 a->stride[1], a->stride[2], a->dtype};
    mm_mat mb = {(const char *)b->storage->data + b->offset +
                     bi * b->stride[0] * (int64_t)oj_dtype_size(b->dtype),
                 b->stride[1], b->stride[2], b->dtype};
    if (oj__cpu_sgemm(fb->eng, fb->m, fb->n, fb->k, &ma, &mb, c, fb->n, tid, fb->fused) != OJ_OK)
        atomic_store(failed, 1);
}

static void f32_batch_chunk(void *vc, int64_t begin, int64_t end, int tid) {
    f32_batches *fb = vc;
    for (int64_t bi = begin; bi < end; bi++) f32_batch_one(fb, bi, tid, &fb->failed);
}

static oj_status matmul_f32(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                            bool accumulate, bool fused) {
    int64_t bt = out->shape[0], m = out->shape[1], n = out->shape[2], k = a->shape[2];
    float *o = (float *)((char *)out->storage->data + out->offset);
    if (!accumulate) memset(o, 0, (size_t)(bt * m * n) * sizeof(float));
    f32_batches fb = {eng, out, a, b, m, n, k, fused, 0};
    /* Small products of a batch: one batch per task (the GEMM alone would
     * not feed the threads); large ones: the GEMM threads itself. Either
     * way every element's sum is the same. */
    if (bt > 1 && m * n * k <= ((int64_t)1 << 21) && oj_cpu_threads(eng) > 1)
        oj_cpu_parallel_for(eng, bt, 1, f32_batch_chunk, &fb);
    else
        for (int64_t bi = 0; bi < bt && !fb.failed; bi++) f32_batch_one(&fb, bi, -1, &fb.failed);
    if (fb.failed)
        return oj_set_error(eng, OJ_ERR_CAPACITY, "matmul: out of host memory for GEMM scratch");
    return OJ_OK;
}

oj_status oj_cpu_matmul(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                        bool accumulate) {
    int64_t bt = out->shape[0], m = out->shape[1], n = out->shape[2], k = a->shape[2];
    oj_dtype dt = out->dtype;
    bool dbl = dt == OJ_F64;
    bool direct = dt == OJ_F32 || dt == OJ_F64; /* accumulate straight into out */
    size_t oes = oj_dtype_size(dt), aes = oj_dtype_size(a->dtype), bes = oj_dtype_size(b->dtype);
    if (bt == 0 || m == 0 || n == 0) return OJ_OK;
    bool use_blas = false, fast = eng->numerics == OJ_NUMERICS_FAST;
    /* f32 out: f32 operands, or bf16/f16 ones widened (their f32 sums go
     * straight into out, never rounded to 16 bits) */
    bool use_own_f32 = dt == OJ_F32;
    /* FAST f32: our fused kernel or OpenBLAS, whichever oj_cpu_fast_gemm
     * picked (docs/bench-cpu.md has the measurements behind the default). */
    bool own_fast = fast && !dbl && oj_cpu_fast_gemm(eng) == OJ_GEMM_OWN;
#ifdef OJAS_HAVE_OPENBLAS
    use_blas = fast && k > 0 && !own_fast;
#else
    (void)own_fast; /* without OpenBLAS every f32 product takes our kernel */
#endif
    if (use_own_f32 && !use_blas) return matmul_f32(eng, out, a, b, accumulate, fast);
    size_t cbytes = (size_t)(m * n) * (dbl ? sizeof(double) : sizeof(float));
    void *tmp = NULL;
    if (!direct) {
        tmp = malloc(cbytes);
        if (tmp == NULL) return OJ_ERR_CAPACITY;
    }
    oj_status st = OJ_OK;
    for (int64_t bi = 0; bi < bt && st == OJ_OK; bi++) {
        char *ob = (char *)out->storage->data + out->offset + bi * m * n * (int64_t)oes;
        mm_mat ma = {(const char *)a->storage->data + a->offset + bi * a->stride[0] * (int64_t)aes,
                     a->stride[1], a->stride[2], a->dtype};
        mm_mat mb = {(const char *)b->storage->data + b->offset + bi * b->stride[0] * (int64_t)bes,
                     b->stride[1], b->stride[2], b->dtype};
        void *c = direct ? (void *)ob : tmp;
        /* initialise c: the old out when accumulating, else zeros (BLAS
         * with beta 0 overwrites c itself) */
        if (!direct && accumulate) {
            for (int64_t i = 0; i < m * n; i++)
                ((float *)c)[i] = ld_f(ob + i * (int64_t)oes, dt);
        } else if (!accumulate && !use_blas) {
            memset(c, 0, cbytes);
        }
        bool done = false;
#ifdef OJAS_HAVE_OPENBLAS
        if (use_blas) {
            st = blas_gemm(eng, m, n, k, &ma, &mb, c, dbl, accumulate);
            done = st != OJ_ERR_UNSUPPORTED;
            if (!done) { /* dims beyond BLAS's int: our kernel */
                if (!accumulate) memset(c, 0, cbytes);
                st = OJ_OK;
            }
        }
#endif
        if (!done && k > 0)
            st = dbl ? gemm_f64(m, n, k, &ma, &mb, c, n)
                     : oj__cpu_sgemm(eng, m, n, k, &ma, &mb, c, n, -1, fast);
        if (!direct && st == OJ_OK) {
            for (int64_t i = 0; i < m * n; i++) {
                float v = ((float *)c)[i];
                uint16_t h = dt == OJ_BF16 ? oj_f32_to_bf16(v) : oj_f32_to_f16(v);
                memcpy(ob + i * (int64_t)oes, &h, sizeof h);
            }
        }
    }
    free(tmp);
    return st;
}
