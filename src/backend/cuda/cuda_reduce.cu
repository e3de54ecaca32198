/* CUDA reductions over a dim mask and cumsum. Deterministic in every mode:
 * - a short reduction (<= SERIAL_MAX elements per output) runs one thread
 *   per output, elements in index order, exactly as the CPU kernel
 *   (cpu_reduce.c) does;
 * - a longer one runs one block per output: thread t folds elements t,
 *   t + B, t + 2B, ... in order, then the block combines the per-thread
 *   states in a fixed tree. The block size depends on the shape only;
 * - a long one with few outputs (the gradient of a tensor broadcast over a
 *   whole activation: millions of elements into one value) runs in two
 *   passes: each output's reduced range is cut into a fixed number of
 *   equal chunks (a partition computed from the shape alone, never from
 *   the device), one block reduces each chunk as above into a state in
 *   pooled scratch, and a second kernel combines each output's chunk
 *   states in chunk order. Same bits on every run, in every numerics mode.
 * Before launching, adjacent kept (and reduced) dims that are one run of
 * memory are merged and size-1 dims dropped: the flat indices, and so the
 * order of every fold, are unchanged; the per-element offset costs fewer
 * divisions.
 * States are kept in double as on the CPU (Welford for var, a running max
 * for logsumexp, first index for max/min/argmax/argmin). */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define SERIAL_MAX 32
#define RED_THREADS 256

struct red_state {
    double acc, acc2, m;
    long long n, arg;
};

struct red_geom {
    int nk, nr;
    int64_t kshape[OJ_MAX_RANK], kstride[OJ_MAX_RANK]; /* kept dims (x strides, elements) */
    int64_t rshape[OJ_MAX_RANK], rstride[OJ_MAX_RANK]; /* reduced dims */
    int64_t n_out, n_red;
    const char *x;
    int xdt, xes;
    char *out;
    int odt, oes;
    char *idx; /* i64 or NULL */
};

static __device__ __forceinline__ void red_init(oj_reduce_op op, red_state *s) {
    s->acc = 0.0;
    s->acc2 = 0.0;
    s->m = 0.0;
    s->n = 0;
    s->arg = 0;
    switch (op) {
    case OJ_RED_PROD: s->acc = 1.0; break;
    case OJ_RED_MAX: case OJ_RED_ARGMAX: s->acc = -INFINITY; s->arg = -1; break;
    case OJ_RED_MIN: case OJ_RED_ARGMIN: s->acc = INFINITY; s->arg = -1; break;
    case OJ_RED_LOGSUMEXP: s->m = -INFINITY; break;
    case OJ_RED_ALL: s->acc = 1.0; break;
    default: break;
    }
}

/* One element v at flat reduced index k (as red_step in cpu_reduce.c). */
static __device__ __forceinline__ void red_step(oj_reduce_op op, red_state *s, double v,
                                                long long k) {
    switch (op) {
    case OJ_RED_SUM: case OJ_RED_MEAN: s->acc += v; break;
    case OJ_RED_PROD: s->acc *= v; break;
    case OJ_RED_MAX: case OJ_RED_ARGMAX:
        if (isnan(s->acc)) break;
        if (isnan(v) || v > s->acc || s->arg < 0) { s->acc = v; s->arg = k; }
        break;
    case OJ_RED_MIN: case OJ_RED_ARGMIN:
        if (isnan(s->acc)) break;
        if (isnan(v) || v < s->acc || s->arg < 0) { s->acc = v; s->arg = k; }
        break;
    case OJ_RED_VAR: {
        double d = v - s->acc;
        s->acc += d / (double)(s->n + 1);
        s->acc2 += d * (v - s->acc);
        break;
    }
    case OJ_RED_LOGSUMEXP:
        if (v > s->m) {
            s->acc = s->acc * exp(s->m - v) + 1.0;
            s->m = v;
        } else if (isfinite(v) || v == INFINITY) {
            s->acc += exp(v - s->m);
        } else if (isnan(v)) {
            s->m = v;
        }
        break;
    case OJ_RED_NORM_L1: s->acc += fabs(v); break;
    case OJ_RED_NORM_L2: s->acc += v * v; break;
    case OJ_RED_NORM_INF:
        if (isnan(v) || fabs(v) > s->acc) s->acc = isnan(v) ? v : fabs(v);
        break;
    case OJ_RED_ANY: if (v != 0.0) s->acc = 1.0; break;
    case OJ_RED_ALL: if (v == 0.0) s->acc = 0.0; break;
    default: break;
    }
    s->n++;
}

/* a = a (+) b where b's elements are not all after a's: index ties and
 * "first occurrence" are resolved by the stored indices. */
static __device__ __forceinline__ void red_combine(oj_reduce_op op, red_state *a,
                                                   const red_state *b) {
    if (b->n == 0) return;
    if (a->n == 0) {
        *a = *b;
        return;
    }
    switch (op) {
    case OJ_RED_SUM: case OJ_RED_MEAN: case OJ_RED_NORM_L1: case OJ_RED_NORM_L2:
        a->acc += b->acc;
        break;
    case OJ_RED_PROD: a->acc *= b->acc; break;
    case OJ_RED_MAX: case OJ_RED_ARGMAX: case OJ_RED_MIN: case OJ_RED_ARGMIN: {
        bool na = isnan(a->acc), nb = isnan(b->acc);
        bool take_b;
        if (na || nb)
            take_b = na && nb ? b->arg < a->arg : nb;
        else if (a->acc == b->acc)
            take_b = b->arg < a->arg;
        else if (op == OJ_RED_MAX || op == OJ_RED_ARGMAX)
            take_b = b->acc > a->acc;
        else
            take_b = b->acc < a->acc;
        if (take_b) {
            a->acc = b->acc;
            a->arg = b->arg;
        }
        break;
    }
    case OJ_RED_VAR: { /* Chan et al.: pairwise Welford */
        double na = (double)a->n, nb = (double)b->n, n = na + nb;
        double d = b->acc - a->acc;
        a->acc = a->acc + d * (nb / n);
        a->acc2 = a->acc2 + b->acc2 + d * d * (na * nb / n);
        break;
    }
    case OJ_RED_LOGSUMEXP: {
        if (isnan(a->m) || isnan(b->m)) {
            a->m = isnan(a->m) ? a->m : b->m;
            break;
        }
        double m = a->m > b->m ? a->m : b->m;
        if (m == -INFINITY || m == INFINITY) {
            a->m = m;
            break;
        }
        double sa = a->m == -INFINITY ? 0.0 : a->acc * exp(a->m - m);
        double sb = b->m == -INFINITY ? 0.0 : b->acc * exp(b->m - m);
        a->acc = sa + sb;
        a->m = m;
        break;
    }
    case OJ_RED_NORM_INF:
        if (isnan(a->acc) || isnan(b->acc)) a->acc = isnan(a->acc) ? a->acc : b->acc;
        else if (b->acc > a->acc) a->acc = b->acc;
        break;
    case OJ_RED_ANY: if (b->acc != 0.0) a->acc = 1.0; break;
    case OJ_RED_ALL: if (b->acc == 0.0) a->acc = 0.0; break;
    default: break;
    }
    a->n += b->n;
}

static __device__ __forceinline__ double red_final(oj_reduce_op op, const red_state *s, double p) {
    switch (op) {
    case OJ_RED_MEAN: return s->n ? s->acc / (double)s->n : __longlong_as_double(0x7ff8000000000000ll);
    case OJ_RED_VAR: {
        double den = (double)s->n - p;
        return s->acc2 / (den > 0 ? den : 0.0);
    }
    case OJ_RED_LOGSUMEXP:
        if (isnan(s->m)) return s->m;
        if (s->m == -INFINITY) return -INFINITY;
        if (s->m == INFINITY) return INFINITY;
        return s->m + log(s->acc);
    case OJ_RED_NORM_L2: return sqrt(s->acc);
    case OJ_RED_ARGMAX: case OJ_RED_ARGMIN: return (double)(s->arg < 0 ? 0 : s->arg);
    default: return s->acc;
    }
}

/* Offset (elements) of output o's first input element. */
static __device__ __forceinline__ int64_t kept_offset(const red_geom &g, int64_t o) {
    int64_t off = 0;
    for (int i = g.nk - 1; i >= 0; i--) {
        int64_t q = o / g.kshape[i];
        off += (o - q * g.kshape[i]) * g.kstride[i];
        o = q;
    }
    return off;
}
static __device__ __forceinline__ int64_t red_offset(const red_geom &g, int64_t k) {
    int64_t off = 0;
    for (int i = g.nr - 1; i >= 0; i--) {
        int64_t q = k / g.rshape[i];
        off += (k - q * g.rshape[i]) * g.rstride[i];
        k = q;
    }
    return off;
}

static __device__ __forceinline__ void red_store(const red_geom &g, oj_reduce_op op, int64_t o,
                                                 const red_state *s, double p) {
    oj_cu_st(g.out + o * g.oes, g.odt, red_final(op, s, p));
    if (g.idx) *(long long *)(g.idx + o * 8) = s->arg < 0 ? 0 : s->arg;
}

__global__ void k_reduce_serial(red_geom g, oj_reduce_op op, double p) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < g.n_out;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = kept_offset(g, o);
        red_state s;
        red_init(op, &s);
        for (int64_t k = 0; k < g.n_red; k++)
            red_step(op, &s, oj_cu_ld(g.x + (base + red_offset(g, k)) * g.xes, g.xdt), k);
        red_store(g, op, o, &s, p);
    }
}

__global__ void k_reduce_block(red_geom g, oj_reduce_op op, double p) {
    __shared__ red_state sh[RED_THREADS];
    int t = threadIdx.x, nt = blockDim.x;
    for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
        int64_t base = kept_offset(g, o);
        red_state s;
        red_init(op, &s);
        for (int64_t k = t; k < g.n_red; k += nt)
            red_step(op, &s, oj_cu_ld(g.x + (base + red_offset(g, k)) * g.xes, g.xdt), k);
        sh[t] = s;
        __syncthreads();
        for (int half = nt / 2; half > 0; half >>= 1) {
            if (t < half) {
                red_state a = sh[t], b = sh[t + half];
                red_combine(op, &a, &b);
                sh[t] = a;
            }
            __syncthreads();
        }
        if (t == 0) {
            red_state r = sh[0];
            red_store(g, op, o, &r, p);
        }
        __syncthreads();
    }
}

/* Pass 1 of the split path: block b reduces chunk b % nc of output
 * b / nc (reduced indices [c L, min((c+1) L, n_red))) into part[b]. */
__global__ void k_reduce_chunks(red_geom g, oj_reduce_op op, int64_t nc, int64_t L,
                                red_state *part) {
    __shared__ red_state sh[RED_THREADS];
    int t = threadIdx.x, nt = blockDim.x;
    for (int64_t b = blockIdx.x; b < g.n_out * nc; b += gridDim.x) {
        int64_t o = b / nc, c = b - o * nc;
        int64_t base = kept_offset(g, o);
        int64_t k0 = c * L, k1 = k0 + L < g.n_red ? k0 + L : g.n_red;
        red_state s;
        red_init(op, &s);
        for (int64_t k = k0 + t; k < k1; k += nt)
            red_step(op, &s, oj_cu_ld(g.x + (base + red_offset(g, k)) * g.xes, g.xdt), k);
        sh[t] = s;
        __syncthreads();
        for (int half = nt / 2; half > 0; half >>= 1) {
            if (t < half) {
                red_state a = sh[t], bb = sh[t + half];
                red_combine(op, &a, &bb);
                sh[t] = a;
            }
            __syncthreads();
        }
        if (t == 0) part[b] = sh[0];
        __syncthreads();
    }
}

/* Pass 2: output o = its nc chunk states combined in chunk order. */
__global__ void k_reduce_combine(red_geom g, oj_reduce_op op, int64_t nc, const red_state *part,
                                 double p) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < g.n_out;
         o += (int64_t)gridDim.x * blockDim.x) {
        red_state s;
        red_init(op, &s);
        s.n = 0;
        for (int64_t c = 0; c < nc; c++) {
            red_state b = part[o * nc + c];
            red_combine(op, &s, &b);
        }
        red_store(g, op, o, &s, p);
    }
}

/* Split geometry: outputs up to SPLIT_OUT_MAX, chunks of at least
 * SPLIT_CHUNK elements, at most max(2, SPLIT_BLOCKS / n_out) chunks per
 * output. Depends on (n_out, n_red) only. */
#define SPLIT_OUT_MAX 512
#define SPLIT_CHUNK 16384
#define SPLIT_BLOCKS 4096

/* Merge adjacent dims of one list (shape, stride) that form one run of
 * memory, dropping size-1 dims; the row-major flat index is unchanged. */
static void merge_dims(int *n, int64_t *shape, int64_t *stride) {
    int m = 0;
    for (int i = 0; i < *n; i++) {
        if (shape[i] == 1) continue;
        if (m > 0 && stride[m - 1] == stride[i] * shape[i]) {
            shape[m - 1] *= shape[i];
            stride[m - 1] = stride[i];
            continue;
        }
        shape[m] = shape[i];
        stride[m] = stride[i];
        m++;
    }
    *n = m;
}

/* Column sums (SUM/MEAN over outer rows of a dense inner block of kept
 * columns: x viewed as [R, K] with column stride 1 and row stride rs,
 * e.g. a bias gradient summing [B*T, C] over rows). The one-block-per-
 * output kernel reads such columns with stride K (uncoalesced: ~13 ms per
 * gpt2 step); here threads own columns (coalesced across a warp), chunk
 * ch sums rows [ch L, (ch + 1) L) in row order in double, and a second
 * kernel adds the chunks in order. The partition depends on (R, K) only,
 * so EXACT reruns give the same bits. Bytes: R K s read once plus the
 * partials (8 K nch, nch <= 64): [16384, 768] f32 50 MB, ~15 us at
 * 4.1 TB/s (estimate until measured). */
__global__ void k_colsum_chunks(const char *x, int xdt, int xes, int64_t R, int64_t K, int64_t rs,
                                int64_t L, double *part) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, ch = blockIdx.y;
    if (col >= K) return;
    const int64_t r0 = ch * L, r1 = r0 + L < R ? r0 + L : R;
    double s = 0.0;
#pragma unroll 8
    for (int64_t r = r0; r < r1; r++) s += oj_cu_ld(x + (r * rs + col) * xes, xdt);
    part[ch * K + col] = s;
}

__global__ void k_colsum_final(const double *part, int64_t nch, int64_t K, double div, char *out,
                               int odt, int oes) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= K) return;
    double s = 0.0;
    for (int64_t ch = 0; ch < nch; ch++) s += part[ch * K + col];
    oj_cu_st(out + col * oes, odt, div != 0.0 ? s / div : s);
}

oj_status oj_cuda_reduce(oj_engine *eng, oj_reduce_op op, oj_tensor *out, oj_tensor *idx,
                         const oj_tensor *x, uint32_t dim_mask, double p) {
    if (oj_cuda_begin(eng, "reduce") != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, "reduce", "out") != OJ_OK ||
        oj_cuda_need_contig(eng, idx, "reduce", "idx") != OJ_OK)
        return oj_last_status(eng);
    red_geom g;
    memset(&g, 0, sizeof g);
    g.n_out = 1;
    g.n_red = 1;
    for (int d = 0; d < x->rank; d++) {
        if (dim_mask & (1u << d)) {
            g.rshape[g.nr] = x->shape[d];
            g.rstride[g.nr++] = x->stride[d];
            g.n_red *= x->shape[d];
        } else {
            g.kshape[g.nk] = x->shape[d];
            g.kstride[g.nk++] = x->stride[d];
            g.n_out *= x->shape[d];
        }
    }
    g.x = oj_cuda_ptr(x);
    g.xdt = (int)x->dtype;
    g.xes = (int)oj_dtype_size(x->dtype);
    g.out = oj_cuda_ptr(out);
    g.odt = (int)out->dtype;
    g.oes = (int)oj_dtype_size(out->dtype);
    g.idx = idx ? oj_cuda_ptr(idx) : NULL;
    if (g.n_out == 0) return OJ_OK;
    merge_dims(&g.nk, g.kshape, g.kstride);
    merge_dims(&g.nr, g.rshape, g.rstride);
    if ((op == OJ_RED_SUM || op == OJ_RED_MEAN) && g.idx == NULL && g.nk == 1 && g.nr == 1 &&
        g.kstride[0] == 1 && g.n_out >= 32 && g.n_red > SERIAL_MAX) {
        int64_t R = g.n_red, K = g.n_out;
        int64_t L = (R + 63) / 64;
        if (L < 32) L = 32;
        int64_t nch = (R + L - 1) / L;
        oj_storage *hold = NULL;
        double *part = (double *)oj_cuda_scratch(eng, (size_t)(nch * K) * sizeof(double),
                                                 "reduce", &hold);
        if (part == NULL) return oj_last_status(eng);
        dim3 grid((unsigned)((K + 255) / 256), (unsigned)nch);
        k_colsum_chunks<<<grid, 256, 0, OJ_STREAM>>>(g.x, g.xdt, g.xes, R, K, g.rstride[0], L, part);
        oj_status st = oj_cuda_check(eng, "reduce (columns, chunks)");
        if (st == OJ_OK) {
            k_colsum_final<<<(unsigned)((K + 255) / 256), 256, 0, OJ_STREAM>>>(
                part, nch, K, op == OJ_RED_MEAN ? (double)R : 0.0, g.out, g.odt, g.oes);
            st = oj_cuda_check(eng, "reduce (columns, combine)");
        }
        oj__storage_release(hold);
        return st;
    }
    if (g.n_red <= SERIAL_MAX) {
        k_reduce_serial<<<oj_cuda_blocks(g.n_out), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(g, op, p);
        return oj_cuda_check(eng, "reduce (serial)");
    }
    if (g.n_out <= SPLIT_OUT_MAX && g.n_red >= 2 * (int64_t)SPLIT_CHUNK) {
        int64_t nc = (g.n_red + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
        int64_t cap = SPLIT_BLOCKS / g.n_out;
        if (cap < 2) cap = 2;
        if (nc > cap) nc = cap;
        int64_t L = (g.n_red + nc - 1) / nc;
        nc = (g.n_red + L - 1) / L; /* no empty chunk */
        oj_storage *hold = NULL;
        red_state *part = (red_state *)oj_cuda_scratch(
            eng, (size_t)(g.n_out * nc) * sizeof(red_state), "reduce", &hold);
        if (part == NULL) return oj_last_status(eng);
        int64_t nblk = g.n_out * nc;
        k_reduce_chunks<<<(unsigned)(nblk < (1 << 20) ? nblk : (1 << 20)), RED_THREADS, 0, OJ_STREAM>>>(
            g, op, nc, L, part);
        oj_status st = oj_cuda_check(eng, "reduce (split, chunks)");
        if (st == OJ_OK) {
            k_reduce_combine<<<oj_cuda_blocks(g.n_out, 64), 64, 0, OJ_STREAM>>>(g, op, nc, part, p);
            st = oj_cuda_check(eng, "reduce (split, combine)");
        }
        oj__storage_release(hold); /* later users run after these kernels (one stream) */
        return st;
    }
    int threads = 32;
    while (threads < RED_THREADS && threads < g.n_red) threads *= 2;
    int64_t blocks = g.n_out < (1 << 20) ? g.n_out : (1 << 20);
    k_reduce_block<<<(unsigned)blocks, threads, 0, OJ_STREAM>>>(g, op, p);
    return oj_cuda_check(eng, "reduce (block)");
}

/* ---------------------------------------------------------------- cumsum
 * One thread per line along dim, in order, in double (int64 for integers):
 * the same sums as the CPU kernel. */

struct cumsum_geom {
    int rank, dim;
    int64_t shape[OJ_MAX_RANK], xstride[OJ_MAX_RANK];
    int64_t n_lines, len, xs, os;
    const char *x;
    int xdt, xes;
    char *out;
    int odt, oes;
    bool integer, reverse;
};

__global__ void k_cumsum(cumsum_geom g) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < g.n_lines;
         o += (int64_t)gridDim.x * blockDim.x) {
        /* o indexes the dims other than dim, row-major */
        int64_t rem = o, xoff = 0, ooff = 0, ostride = 1;
        for (int d = g.rank - 1; d >= 0; d--) {
            if (d != g.dim) {
                int64_t q = rem / g.shape[d];
                int64_t i = rem - q * g.shape[d];
                rem = q;
                xoff += i * g.xstride[d];
                ooff += i * ostride;
            }
            ostride *= g.shape[d];
        }
        double acc = 0.0;
        unsigned long long iacc = 0;
        for (int64_t j = 0; j < g.len; j++) {
            int64_t i = g.reverse ? g.len - 1 - j : j;
            const char *src = g.x + (xoff + i * g.xs) * g.xes;
            char *dst = g.out + (ooff + i * g.os) * g.oes;
            if (g.integer) {
                long long v;
                switch (g.xdt) {
                case OJ_I64: v = *(const long long *)src; break;
                case OJ_I32: v = *(const int32_t *)src; break;
                case OJ_U32: v = *(const uint32_t *)src; break;
                case OJ_U16: v = *(const uint16_t *)src; break;
                case OJ_U8: v = *(const uint8_t *)src; break;
                case OJ_BOOL: v = *(const uint8_t *)src != 0; break;
                default: {
                    double f = oj_cu_ld(src, g.xdt);
                    v = f != f ? 0 : (long long)f;
                    break;
                }
                }
                iacc += (unsigned long long)v;
                oj_cu_st_i64(dst, g.odt, (long long)iacc);
            } else {
                acc += oj_cu_ld(src, g.xdt);
                oj_cu_st(dst, g.odt, acc);
            }
        }
    }
}

oj_status oj_cuda_cumsum(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                         bool reverse) {
    if (oj_cuda_begin(eng, "cumsum") != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, "cumsum", "out") != OJ_OK) return oj_last_status(eng);
    cumsum_geom g;
    memset(&g, 0, sizeof g);
    g.rank = x->rank;
    g.dim = x->rank ? dim : 0;
    for (int d = 0; d < x->rank; d++) {
        g.shape[d] = x->shape[d];
        g.xstride[d] = x->stride[d];
    }
    g.len = x->rank ? x->shape[dim] : 1;
    g.xs = x->rank ? x->stride[dim] : 0;
    g.os = 1;
    for (int d = x->rank - 1; d > dim; d--) g.os *= x->shape[d];
    g.n_lines = 1;
    for (int d = 0; d < x->rank; d++)
        if (d != dim) g.n_lines *= x->shape[d];
    if (g.len == 0 || g.n_lines == 0) return OJ_OK;
    g.x = oj_cuda_ptr(x);
    g.xdt = (int)x->dtype;
    g.xes = (int)oj_dtype_size(x->dtype);
    g.out = oj_cuda_ptr(out);
    g.odt = (int)out->dtype;
    g.oes = (int)oj_dtype_size(out->dtype);
    g.integer = !oj_dtype_is_float(out->dtype);
    g.reverse = reverse;
    k_cumsum<<<oj_cuda_blocks(g.n_lines), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(g);
    return oj_cuda_check(eng, "cumsum");
}
