/* CUDA reductions over a dim mask and cumsum. Deterministic in every mode:
 * the order in which each output's elements are folded depends only on the
 * shape and strides of x, never on the device, the launch or timing; no
 * atomics; states are kept in double as on the CPU (Welford for var, a
 * running max for logsumexp, first index for max/min/argmax/argmin).
 * Before a path is chosen, adjacent kept (and reduced) dims that are one
 * run of memory are merged and size-1 dims dropped: the flat indices, and
 * so the order of every fold, are unchanged; the per-element offset costs
 * fewer divisions (none with one kept or one reduced dim). Paths:
 * - columns: SUM/MEAN over outer rows of a dense inner block of >= 32
 *   kept columns (bias gradients), see k_colsum_chunks;
 * - rows: the reduced dims are one contiguous innermost run (stride 1) of
 *   at most ROWS_RED_MAX elements, short (<= ROWS_SHORT) or with many
 *   outputs (>= ROWS_MIN_OUT): one thread per output folds its elements in
 *   index order, exactly as the CPU kernel (cpu_reduce.c) does (the same
 *   bits for sum and mean), reading through shared-memory tiles so that
 *   global loads are coalesced (k_reduce_rows);
 * - serial: other short reductions (<= SERIAL_MAX elements per output), one
 *   thread per output, elements in index order, as on the CPU;
 * - split: a long reduction with few outputs (<= SPLIT_OUT_MAX; e.g. the
 *   gradient of a scalar broadcast over a whole activation: millions of
 *   elements into one value) runs in two passes: each output's reduced
 *   range is cut into chunks (a partition computed from n_out and n_red
 *   alone), one block reduces each chunk into a state in pooled scratch
 *   (thread t folds groups t, t + B, t + 2B, ... of SPLIT_G consecutive
 *   elements, each in order, then the block combines the per-thread states
 *   in its fixed tree), and a second kernel, one block per output, combines
 *   the chunk states the same way (thread t: chunks t, t + B, ... in order,
 *   then the tree);
 * - block: the rest, one block per output: thread t folds elements t,
 *   t + B, t + 2B, ... in order, then the block's fixed tree. The block
 *   size depends on the shape only.
 * A block's fixed tree: each warp's 32 states by shuffles (lane l takes
 * lane l + 16, then l + 8, ..., l + 1), then the warps' results the same way
 * in warp 0 (red_block). Vector loads are used where x is aligned, element
 * loads otherwise, with the same order. Same bits on every run, in every
 * numerics mode. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

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

/* red_step with SUM/MEAN (SUM true) inlined, and without SUM the L2 norm
 * and max/argmax (Muon's norms, greedy decoding) tested before the full
 * switch: the same arithmetic. With the switch in the unrolled loads the
 * split path ran ~20x under bandwidth (H200, ncu: argmax of 50,257 bf16
 * 29 us, Muon's norms of ~38 MB f32 207 us). */
template <bool SUM>
static __device__ __forceinline__ void red_step_t(oj_reduce_op op, red_state *s, double v,
                                                  long long k) {
    if (SUM) {
        s->acc += v;
        s->n++;
    } else if (op == OJ_RED_NORM_L2) {
        s->acc += v * v;
        s->n++;
    } else if (op == OJ_RED_MAX || op == OJ_RED_ARGMAX) {
        if (!isnan(s->acc) && (isnan(v) || v > s->acc || s->arg < 0)) {
            s->acc = v;
            s->arg = k;
        }
        s->n++;
    } else {
        red_step(op, s, v, k);
    }
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

/* Offset (elements) of output o's first input element (o < n_out). */
static __device__ __forceinline__ int64_t kept_offset(const red_geom &g, int64_t o) {
    if (g.nk == 1) return o * g.kstride[0];
    int64_t off = 0;
    for (int i = g.nk - 1; i >= 0; i--) {
        int64_t q = o / g.kshape[i];
        off += (o - q * g.kshape[i]) * g.kstride[i];
        o = q;
    }
    return off;
}
/* Offset (elements) of reduced element k (k < n_red) from its output's first. */
static __device__ __forceinline__ int64_t red_offset(const red_geom &g, int64_t k) {
    if (g.nr == 1) return k * g.rstride[0];
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

/* red_combine with SUM/MEAN (SUM true) inlined: the same result. */
template <bool SUM>
static __device__ __forceinline__ void red_combine_t(oj_reduce_op op, red_state *a,
                                                     const red_state *b) {
    if (SUM) {
        if (b->n == 0) return;
        if (a->n == 0) {
            *a = *b;
            return;
        }
        a->acc += b->acc;
        a->n += b->n;
    } else {
        red_combine(op, a, b);
    }
}

/* The state of lane + off (lanes past 31: their own); SUM: acc and n only. */
template <bool SUM>
static __device__ __forceinline__ red_state red_shfl_down(const red_state &s, int off) {
    red_state r;
    r.acc = __shfl_down_sync(0xffffffffu, s.acc, off);
    r.n = __shfl_down_sync(0xffffffffu, s.n, off);
    if (SUM) {
        r.acc2 = 0.0;
        r.m = 0.0;
        r.arg = 0;
    } else {
        r.acc2 = __shfl_down_sync(0xffffffffu, s.acc2, off);
        r.m = __shfl_down_sync(0xffffffffu, s.m, off);
        r.arg = __shfl_down_sync(0xffffffffu, s.arg, off);
    }
    return r;
}

/* Lane 0 := the warp's 32 states in a fixed tree (lane l takes lane l + 16,
 * then l + 8, ..., l + 1). Every lane of the warp calls it. */
template <bool SUM>
static __device__ __forceinline__ void red_warp(oj_reduce_op op, red_state *s) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        red_state o = red_shfl_down<SUM>(*s, off);
        if (lane < off) red_combine_t<SUM>(op, s, &o);
    }
}

/* Thread 0's *s := the states of all blockDim.x threads (a multiple of 32,
 * at most 1024) combined in a fixed tree: each warp's, then the warps' in
 * warp 0. Every thread calls it; sh holds 32 states. Starts with a barrier
 * (sh may still be read from a previous call) and has one more inside. */
template <bool SUM>
static __device__ __forceinline__ void red_block(oj_reduce_op op, red_state *s, red_state *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    red_warp<SUM>(op, s);
    __syncthreads();
    if (lane == 0) sh[w] = *s;
    __syncthreads();
    if (w == 0) {
        if (lane < nw) {
            *s = sh[lane];
        } else {
            red_init(op, s);
        }
        red_warp<SUM>(op, s);
    }
}

/* ---------------------------------------------------------------- loads
 * red_ld<T> reads x of storage type T (float, oj_cu_bf16, oj_cu_f16)
 * through typed pointers; red_ld<red_any> any dtype through oj_cu_ld. Both
 * give the value oj_cu_ld gives. S: the shared-memory tile type of the rows
 * kernel (float holds f32/bf16/f16 exactly). Loads are issued before any
 * of their values is used, and without branches between them (indices
 * past the end are clamped to a valid element and the value ignored), so
 * that they are in flight together. */
#define SPLIT_G 8 /* elements per group (split path) */
#define SPLIT_U 4 /* groups per thread in flight */

template <typename T> static __device__ __forceinline__ void red_ld8(const T *q, float *f) {
    oj_cu_ldv<T, 8>(q, f); /* 16-bit types: 16 bytes */
}
template <> __device__ __forceinline__ void red_ld8<float>(const float *q, float *f) {
    oj_cu_ldv<float, 4>(q, f);
    oj_cu_ldv<float, 4>(q + 4, f + 4);
}

struct red_any {};

template <typename T> struct red_ld {
    typedef float S;
    static __device__ __forceinline__ float one(const red_geom &g, int64_t off) {
        return oj_cu_tof(((const T *)g.x)[off]);
    }
};
template <> struct red_ld<red_any> {
    typedef double S;
    static __device__ __forceinline__ double one(const red_geom &g, int64_t off) {
        return oj_cu_ld(g.x + off * g.xes, g.xdt);
    }
};

/* Split path: fold the nfull full groups gi = t, t + B, ... (B =
 * RED_THREADS) of SPLIT_G elements of the chunk starting at reduced index
 * k0 of the output at base, each group in order. The typed version needs
 * one reduced dim (stride rs); VEC: rs == 1 and x + base + k0 16-byte
 * aligned (then every group is: k0 and the group size are multiples of 8
 * elements), groups read with 16-byte loads. */
template <typename T, bool SUM, bool VEC>
static __device__ __forceinline__ void red_groups_t(const red_geom &g, oj_reduce_op op,
                                                    int64_t base, int64_t k0, int64_t nfull,
                                                    red_state *s) {
    const T *x0 = (const T *)g.x + base + k0 * g.rstride[0];
    const int64_t rs = g.rstride[0];
    for (int64_t gi = threadIdx.x; gi < nfull; gi += SPLIT_U * RED_THREADS) {
        float f[SPLIT_U][SPLIT_G];
#pragma unroll
        for (int h = 0; h < SPLIT_U; h++) {
            int64_t gh = gi + h * RED_THREADS;
            if (gh >= nfull) gh = gi; /* loaded, not folded */
            if (VEC) {
                red_ld8<T>(x0 + gh * SPLIT_G, f[h]);
            } else {
#pragma unroll
                for (int j = 0; j < SPLIT_G; j++) f[h][j] = oj_cu_tof(x0[(gh * SPLIT_G + j) * rs]);
            }
        }
#pragma unroll
        for (int h = 0; h < SPLIT_U; h++) {
            const int64_t gh = gi + h * RED_THREADS;
            if (gh < nfull) {
#pragma unroll
                for (int j = 0; j < SPLIT_G; j++)
                    red_step_t<SUM>(op, s, (double)f[h][j], k0 + gh * SPLIT_G + j);
            }
        }
    }
}

template <typename L, bool SUM> struct red_groups {
    template <typename T>
    static __device__ __forceinline__ void run(const red_geom &g, oj_reduce_op op, int64_t base,
                                               int64_t k0, int64_t nfull, red_state *s) {
        const T *x0 = (const T *)g.x + base + k0;
        if (g.rstride[0] == 1 && oj_cu_aligned16(x0))
            red_groups_t<T, SUM, true>(g, op, base, k0, nfull, s);
        else
            red_groups_t<T, SUM, false>(g, op, base, k0, nfull, s);
    }
};

/* Any dtype and layout: element by element through red_offset. */
template <bool SUM>
static __device__ __forceinline__ void red_groups_any(const red_geom &g, oj_reduce_op op,
                                                      int64_t base, int64_t k0, int64_t nfull,
                                                      red_state *s) {
    for (int64_t gi = threadIdx.x; gi < nfull; gi += RED_THREADS)
        for (int j = 0; j < SPLIT_G; j++) {
            const int64_t k = k0 + gi * SPLIT_G + j;
            red_step_t<SUM>(op, s, oj_cu_ld(g.x + (base + red_offset(g, k)) * g.xes, g.xdt), k);
        }
}

/* ---------------------------------------------------------------- kernels */

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

/* Rows: x's reduced dims are one run of stride 1 (the innermost), n_red
 * >= 1. Block: ROWS_T consecutive outputs, thread t owns output o0 + t and
 * folds its elements in index order (the CPU's order). The block walks the
 * run in tiles of ROWS_KC columns: each warp loads one row's ROWS_KC
 * consecutive elements per instruction (coalesced; a thread's ROWS_KC
 * loads in flight together) into shared memory, then each thread folds its
 * row of the tile. Shared memory: ROWS_T x (ROWS_KC + 1) S (16.9 KB float,
 * 33.8 KB double; the +1 keeps a column read on 32 banks) + ROWS_T
 * offsets; at most 128 registers (72 for f32/bf16 sums).
 * Cost: n_out n_red elements read once (coalesced), n_out written; one
 * double add per element for sum/mean. The nanolab gate gradient, sum over
 * D of [16, 12, 1024, 64] bf16 (196,608 outputs of 64; 1,536 blocks):
 * 25.2 MB read + 0.4 MB written, 12.6 M double adds, estimated ~7 us at
 * 3.6 TB/s; measured on the H200 (ncu, 2026-11-29): 13.0-13.8 us (~1.9
 * TB/s; was 274 us as k_reduce_block, one 64-thread block per output). The
 * [16, 6, 1024, 128] layout (98,304 outputs of 128, 768 blocks): 13.2-14.3
 * us. */
#define ROWS_T 128
#define ROWS_KC 32
#define ROWS_SHORT 64      /* any number of outputs */
#define ROWS_RED_MAX 4096  /* longer: block or split path */
#define ROWS_MIN_OUT 16384 /* 128 blocks */

template <typename L, bool SUM>
__global__ void __launch_bounds__(ROWS_T, 4) k_reduce_rows(red_geom g, oj_reduce_op op, double p) {
    typedef typename L::S S;
    __shared__ S tile[ROWS_T][ROWS_KC + 1];
    __shared__ int64_t rowbase[ROWS_T];
    const int t = threadIdx.x, c = t % ROWS_KC;
    for (int64_t o0 = (int64_t)blockIdx.x * ROWS_T; o0 < g.n_out;
         o0 += (int64_t)gridDim.x * ROWS_T) {
        const int nrow = g.n_out - o0 < ROWS_T ? (int)(g.n_out - o0) : ROWS_T;
        rowbase[t] = kept_offset(g, o0 + (t < nrow ? t : 0));
        red_state s;
        red_init(op, &s);
        __syncthreads();
        for (int64_t k0 = 0; k0 < g.n_red; k0 += ROWS_KC) {
            const int kc = g.n_red - k0 < ROWS_KC ? (int)(g.n_red - k0) : ROWS_KC;
            /* tile element j ROWS_T + t: row j (ROWS_T / ROWS_KC) + t / ROWS_KC,
             * column c; rows past nrow read their block's row 0, columns past
             * kc column 0 (valid elements, never folded) */
            const int64_t cc = k0 + (c < kc ? c : 0);
            S v[ROWS_KC];
#pragma unroll
            for (int j = 0; j < ROWS_KC; j++) {
                const int r = j * (ROWS_T / ROWS_KC) + t / ROWS_KC;
                v[j] = (S)L::one(g, rowbase[r] + cc);
            }
#pragma unroll
            for (int j = 0; j < ROWS_KC; j++) tile[j * (ROWS_T / ROWS_KC) + t / ROWS_KC][c] = v[j];
            __syncthreads();
            if (t < nrow) {
                if (kc == ROWS_KC) {
#pragma unroll
                    for (int q = 0; q < ROWS_KC; q++)
                        red_step_t<SUM>(op, &s, (double)tile[t][q], k0 + q);
                } else {
                    for (int q = 0; q < kc; q++)
                        red_step_t<SUM>(op, &s, (double)tile[t][q], k0 + q);
                }
            }
            __syncthreads();
        }
        if (t < nrow) red_store(g, op, o0 + t, &s, p);
    }
}

__global__ void __launch_bounds__(RED_THREADS) k_reduce_block(red_geom g, oj_reduce_op op,
                                                              double p) {
    __shared__ red_state sh[32];
    int t = threadIdx.x, nt = blockDim.x;
    for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
        int64_t base = kept_offset(g, o);
        red_state s;
        red_init(op, &s);
        for (int64_t k = t; k < g.n_red; k += nt)
            red_step(op, &s, oj_cu_ld(g.x + (base + red_offset(g, k)) * g.xes, g.xdt), k);
        red_block<false>(op, &s, sh);
        if (t == 0) red_store(g, op, o, &s, p);
    }
}

/* Pass 1 of the split path (blockDim RED_THREADS): block b reduces chunk
 * c = b % nc of output o = b / nc (reduced indices [c len, min((c + 1) len,
 * n_red)), len a multiple of SPLIT_G) into part[b]. Thread t folds groups
 * t, t + B, t + 2B, ... of SPLIT_G elements (SPLIT_U groups' loads in
 * flight), the thread that owns the partial last group (if any) last; then
 * the block's shuffle tree.
 * Cost: n_out n_red elements read once + 40 bytes of state per chunk; one
 * double add per element for sum/mean. The nanolab value-residual
 * gradient, a sum of all of [16, 12, 1024, 64] f32 (12.6 M elements): 1,536
 * chunks of 8,192 (32 elements per thread, one iteration), 50.3 MB read
 * with 16-byte loads + 61 KB of states, estimated ~13 us at 3.9 TB/s;
 * measured on the H200 (ncu, 2026-11-29): 21-22 us (~2.4 TB/s), then 5.3
 * us for k_reduce_combine (was 129 us here, with a 64-bit division per
 * element, + 268 us to combine). The same in bf16: 15 us + 5.3 us; the gate
 * bias gradient, [16384, 12] bf16 over rows (stride 12): 7.9 us + 4.0 us. */
#define SPLIT_OUT_MAX 512
#define SPLIT_CHUNK 8192  /* elements per chunk (fewer chunks when capped) */
#define SPLIT_BLOCKS 4096 /* chunks per output at most max(2, this / n_out) */

template <typename L, bool SUM>
__global__ void __launch_bounds__(RED_THREADS) k_reduce_chunks(red_geom g, oj_reduce_op op,
                                                               int64_t nc, int64_t len,
                                                               red_state *part) {
    __shared__ red_state sh[32];
    for (int64_t b = blockIdx.x; b < g.n_out * nc; b += gridDim.x) {
        const int64_t o = b / nc, c = b - o * nc;
        const int64_t base = kept_offset(g, o);
        const int64_t k0 = c * len, k1 = k0 + len < g.n_red ? k0 + len : g.n_red;
        const int64_t nfull = (k1 - k0) / SPLIT_G; /* full groups */
        red_state s;
        red_init(op, &s);
        L::fold(g, op, base, k0, nfull, &s);
        if (k0 + nfull * SPLIT_G < k1 && threadIdx.x == nfull % RED_THREADS)
            for (int64_t k = k0 + nfull * SPLIT_G; k < k1; k++) /* the partial group */
                red_step_t<SUM>(op, &s, oj_cu_ld(g.x + (base + red_offset(g, k)) * g.xes, g.xdt),
                                k);
        red_block<SUM>(op, &s, sh);
        if (threadIdx.x == 0) part[b] = s;
    }
}

/* Folders for k_reduce_chunks: typed (one reduced dim, f32/bf16/f16) and any. */
template <typename T, bool SUM> struct red_fold_t {
    static __device__ __forceinline__ void fold(const red_geom &g, oj_reduce_op op, int64_t base,
                                                int64_t k0, int64_t nfull, red_state *s) {
        red_groups<red_ld<T>, SUM>::template run<T>(g, op, base, k0, nfull, s);
    }
};
template <bool SUM> struct red_fold_any {
    static __device__ __forceinline__ void fold(const red_geom &g, oj_reduce_op op, int64_t base,
                                                int64_t k0, int64_t nfull, red_state *s) {
        red_groups_any<SUM>(g, op, base, k0, nfull, s);
    }
};

/* Pass 2 (blockDim a power of two from 32 to 1024, >= nc where it can be):
 * output o = its nc chunk states, thread t combining chunks t, t + B, ...
 * in order, then the block's shuffle tree. One block per output (a single
 * thread walking 4,096 states one after another, each a dependent global
 * load, took 268 us). */
template <bool SUM>
__global__ void __launch_bounds__(1024) k_reduce_combine(red_geom g, oj_reduce_op op, int64_t nc,
                                                         const red_state *part, double p) {
    __shared__ red_state sh[32];
    for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
        red_state s;
        red_init(op, &s);
        for (int64_t c = threadIdx.x; c < nc; c += blockDim.x) {
            red_state b = part[o * nc + c];
            red_combine_t<SUM>(op, &s, &b);
        }
        red_block<SUM>(op, &s, sh);
        if (threadIdx.x == 0) red_store(g, op, o, &s, p);
    }
}

/* Launch the rows kernel for x's dtype (typed loads for f32/bf16/f16). */
template <bool SUM> static void launch_rows(const red_geom &g, oj_reduce_op op, double p,
                                            unsigned blocks) {
    switch (g.xdt) {
    case OJ_F32:
        k_reduce_rows<red_ld<float>, SUM><<<blocks, ROWS_T, 0, OJ_STREAM>>>(g, op, p);
        break;
    case OJ_BF16:
        k_reduce_rows<red_ld<oj_cu_bf16>, SUM><<<blocks, ROWS_T, 0, OJ_STREAM>>>(g, op, p);
        break;
    case OJ_F16:
        k_reduce_rows<red_ld<oj_cu_f16>, SUM><<<blocks, ROWS_T, 0, OJ_STREAM>>>(g, op, p);
        break;
    default:
        k_reduce_rows<red_ld<red_any>, SUM><<<blocks, ROWS_T, 0, OJ_STREAM>>>(g, op, p);
        break;
    }
}

/* Launch pass 1 of the split path; typed: one reduced dim and x f32, bf16
 * or f16 (typed loads), else red_offset and oj_cu_ld per element. */
template <bool SUM> static void launch_chunks(const red_geom &g, oj_reduce_op op, int64_t nc,
                                              int64_t len, red_state *part, unsigned blocks,
                                              bool typed) {
    const int dt = typed ? g.xdt : -1;
    switch (dt) {
    case OJ_F32:
        k_reduce_chunks<red_fold_t<float, SUM>, SUM>
            <<<blocks, RED_THREADS, 0, OJ_STREAM>>>(g, op, nc, len, part);
        break;
    case OJ_BF16:
        k_reduce_chunks<red_fold_t<oj_cu_bf16, SUM>, SUM>
            <<<blocks, RED_THREADS, 0, OJ_STREAM>>>(g, op, nc, len, part);
        break;
    case OJ_F16:
        k_reduce_chunks<red_fold_t<oj_cu_f16, SUM>, SUM>
            <<<blocks, RED_THREADS, 0, OJ_STREAM>>>(g, op, nc, len, part);
        break;
    default:
        k_reduce_chunks<red_fold_any<SUM>, SUM>
            <<<blocks, RED_THREADS, 0, OJ_STREAM>>>(g, op, nc, len, part);
        break;
    }
}

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
    const bool sum = op == OJ_RED_SUM || op == OJ_RED_MEAN;
    const bool inner = g.nr == 1 && g.rstride[0] == 1; /* reduced: one run of stride 1 */
    if (inner && g.n_red >= 1 && g.n_red <= ROWS_RED_MAX &&
        (g.n_red <= ROWS_SHORT || g.n_out >= ROWS_MIN_OUT)) {
        int64_t nb = (g.n_out + ROWS_T - 1) / ROWS_T;
        unsigned blocks = (unsigned)(nb < (1 << 20) ? nb : (1 << 20));
        if (sum) launch_rows<true>(g, op, p, blocks);
        else launch_rows<false>(g, op, p, blocks);
        return oj_cuda_check(eng, "reduce (rows)");
    }
    if (g.n_red <= SERIAL_MAX) {
        k_reduce_serial<<<oj_cuda_blocks(g.n_out), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(g, op, p);
        return oj_cuda_check(eng, "reduce (serial)");
    }
    if (g.n_out <= SPLIT_OUT_MAX && g.n_red >= 2 * (int64_t)SPLIT_CHUNK) {
        /* chunks halved (to one group per thread) while the blocks would
         * not cover two waves' worth of SMs: the argmax of one 50,257-logit
         * row ran 7 blocks, 28 us of latency chains (H200, ncu) */
        int64_t chunk = SPLIT_CHUNK;
        while (chunk > SPLIT_G * RED_THREADS && g.n_out * ((g.n_red + chunk - 1) / chunk) < 264)
            chunk /= 2;
        int64_t nc = (g.n_red + chunk - 1) / chunk;
        int64_t cap = SPLIT_BLOCKS / g.n_out;
        if (cap < 2) cap = 2;
        if (nc > cap) nc = cap;
        int64_t len = (g.n_red + nc - 1) / nc;
        len = (len + SPLIT_G - 1) / SPLIT_G * SPLIT_G; /* chunks start on a group */
        nc = (g.n_red + len - 1) / len;                /* no empty chunk */
        oj_storage *hold = NULL;
        red_state *part = (red_state *)oj_cuda_scratch(
            eng, (size_t)(g.n_out * nc) * sizeof(red_state), "reduce", &hold);
        if (part == NULL) return oj_last_status(eng);
        int64_t nblk = g.n_out * nc;
        unsigned blocks = (unsigned)(nblk < (1 << 20) ? nblk : (1 << 20));
        bool typed = g.nr == 1 && oj_cu_is_f16ish(x->dtype);
        if (sum) launch_chunks<true>(g, op, nc, len, part, blocks, typed);
        else launch_chunks<false>(g, op, nc, len, part, blocks, typed);
        oj_status st = oj_cuda_check(eng, "reduce (split, chunks)");
        if (st == OJ_OK) {
            int ct = 32;
            while (ct < 1024 && ct < nc) ct *= 2;
            if (sum)
                k_reduce_combine<true><<<(unsigned)g.n_out, ct, 0, OJ_STREAM>>>(g, op, nc, part, p);
            else
                k_reduce_combine<false><<<(unsigned)g.n_out, ct, 0, OJ_STREAM>>>(g, op, nc, part, p);
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

/* ---------------------------------------------------------------- col_sum */

/* backend.h col_sum: out [C] f32 = the column sums of x [R, C] (bf16/f16,
 * row stride ld, C, ld and x 16-byte multiples), a linear's bias gradient
 * (dy's rows summed) in one pass at memory speed. Block (tile, split):
 * 256 threads over a tile of 256 columns and one split's rows; thread (ty,
 * tx) = (t / 32, t % 32) loads 8 columns (16 bytes) of rows r0 + ty, r0 +
 * ty + 8, ... in order into f32 sums; the 8 row lanes' sums are then added
 * in lane order into the split's partial (or out, with one split); a
 * second kernel adds the splits' partials (k_colsum_combine). The splits are
 * a function of R and C alone, so the bits are the same on every run; the
 * order is not the CPU's, so the ops layer uses it only under FAST. */
#define COLSUM_TILE 256
#define COLSUM_LANES 8
#define COLSUM_BLOCKS 512 /* blocks aimed at: ~4 a multiprocessor on an H100/H200 */

template <bool BF16>
__device__ __forceinline__ void colsum_add8(float *acc, uint4 v) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint16_t lo = (uint16_t)(w[i] & 0xffffu), hi = (uint16_t)(w[i] >> 16);
        /* bf16: the high half of an f32 (a NaN stays a NaN in the sum) */
        acc[2 * i] += BF16 ? __uint_as_float((uint32_t)lo << 16) : oj_cu_f16_to_f32(lo);
        acc[2 * i + 1] += BF16 ? __uint_as_float((uint32_t)hi << 16) : oj_cu_f16_to_f32(hi);
    }
}

template <bool BF16>
__global__ void __launch_bounds__(COLSUM_TILE)
    k_colsum16(float *part, const unsigned short *x, int64_t ld, int64_t R, int64_t C,
               int64_t rows_per) {
    __shared__ float sm[COLSUM_LANES][COLSUM_TILE];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int64_t c = (int64_t)blockIdx.x * COLSUM_TILE + tx * 8;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per;
    const int64_t r1 = r0 + rows_per < R ? r0 + rows_per : R;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c < C) {
        const unsigned short *p = x + c;
        int64_t r = r0 + ty;
        for (; r + 3 * COLSUM_LANES < r1; r += 4 * COLSUM_LANES) { /* four loads in flight */
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = *(const uint4 *)(p + (r + u * COLSUM_LANES) * ld);
#pragma unroll
            for (int u = 0; u < 4; u++) colsum_add8<BF16>(acc, v[u]);
        }
        for (; r < r1; r += COLSUM_LANES) colsum_add8<BF16>(acc, *(const uint4 *)(p + r * ld));
    }
#pragma unroll
    for (int i = 0; i < 8; i++) sm[ty][tx * 8 + i] = acc[i];
    __syncthreads();
    const int64_t col = (int64_t)blockIdx.x * COLSUM_TILE + threadIdx.x;
    if (col < C) {
        float s = sm[0][threadIdx.x];
#pragma unroll
        for (int l = 1; l < COLSUM_LANES; l++) s += sm[l][threadIdx.x];
        part[(int64_t)blockIdx.y * C + col] = s;
    }
}

/* out[c] = the sum of part[s, c] over s < S: block (32 columns, 8 lanes);
 * lane l adds splits l, l + 8, l + 16, ... in order (four loads in flight),
 * then lane 0 adds the 8 lanes' sums in lane order (a fixed order: the
 * same bits every run). One chain of S dependent L2 loads a column took
 * ~S x 0.2 us. */
__global__ void __launch_bounds__(256) k_colsum_combine(float *out, const float *part, int64_t S,
                                                        int64_t C) {
    __shared__ float sm[COLSUM_LANES][32];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int64_t c = (int64_t)blockIdx.x * 32 + tx;
    float s = 0.0f;
    if (c < C) {
        int64_t i = ty;
        for (; i + 3 * COLSUM_LANES < S; i += 4 * COLSUM_LANES) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = part[(i + u * COLSUM_LANES) * C + c];
#pragma unroll
            for (int u = 0; u < 4; u++) s += v[u];
        }
        for (; i < S; i += COLSUM_LANES) s += part[i * C + c];
    }
    sm[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
        float t = sm[0][tx];
#pragma unroll
        for (int l = 1; l < COLSUM_LANES; l++) t += sm[l][tx];
        out[c] = t;
    }
}

oj_status oj_cuda_col_sum(oj_engine *eng, oj_tensor *out, const oj_tensor *x) {
    const char *op = "col_sum";
    static int off = -1; /* OJAS_CUDA_COLSUM=0: the ops layer's GEMV instead (comparisons) */
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_COLSUM", true);
    }
    if (x->rank != 2 || out->dtype != OJ_F32 || (x->dtype != OJ_BF16 && x->dtype != OJ_F16))
        return OJ_ERR_UNSUPPORTED;
    const int64_t R = x->shape[0], C = x->shape[1], ld = R > 1 ? x->stride[0] : C;
    if (off || R < 1 || C < 1 || C % 8 != 0 || ld % 8 != 0 || ld < C ||
        (C > 1 && x->stride[1] != 1) || !oj_cu_aligned16(oj_cuda_ptr(x)) || out->rank != 1 ||
        out->shape[0] != C || (C > 1 && out->stride[0] != 1))
        return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const int64_t tiles = (C + COLSUM_TILE - 1) / COLSUM_TILE;
    /* splits: ~COLSUM_BLOCKS blocks, at least 64 rows each, at most 65535 */
    int64_t S = (COLSUM_BLOCKS + tiles - 1) / tiles, smax = (R + 63) / 64;
    if (S > smax) S = smax;
    if (S > 65535) S = 65535;
    if (S < 1) S = 1;
    const int64_t rows_per = (R + S - 1) / S;
    S = (R + rows_per - 1) / rows_per;
    oj_storage *hold = NULL;
    float *part = (float *)oj_cuda_ptr(out);
    if (S > 1 && (part = (float *)oj_cuda_scratch(eng, (size_t)(S * C) * sizeof(float), op,
                                                  &hold)) == NULL)
        return oj_last_status(eng);
    dim3 grid((unsigned)tiles, (unsigned)S);
    const unsigned short *xp = (const unsigned short *)oj_cuda_ptr(x);
    if (x->dtype == OJ_BF16)
        k_colsum16<true><<<grid, COLSUM_TILE, 0, OJ_STREAM>>>(part, xp, ld, R, C, rows_per);
    else
        k_colsum16<false><<<grid, COLSUM_TILE, 0, OJ_STREAM>>>(part, xp, ld, R, C, rows_per);
    if (S > 1)
        k_colsum_combine<<<(unsigned)((C + 31) / 32), 256, 0, OJ_STREAM>>>(
            (float *)oj_cuda_ptr(out), part, S, C);
    if (hold) oj__storage_release(hold);
    return oj_cuda_check(eng, op);
}
