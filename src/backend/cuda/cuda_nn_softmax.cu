/* CUDA softmax / log-softmax over any dim, the fused cross-entropy
 * (log-softmax + NLL, label smoothing, ignore_index) and NLL. Rows along
 * the last dim of f32/bf16/f16 take the float fast paths (below: a warp or
 * block per row, online max + sum); the rest (f64, softmax over an inner
 * dim) is computed in double like the CPU kernels (cpu_nn_softmax.c), one
 * block per row (line). Row sums reduce in a fixed order either way, so
 * results are deterministic. Targets
 * are checked on the device: the first bad row (lowest index) is reported
 * with the CPU's message; the count of rows not ignored comes back through
 * an integer counter (exact, order-free). */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

static int line_threads(int64_t n) {
    int t = 32;
    while (t < 256 && t < n) t *= 2;
    return t;
}
static unsigned line_blocks(int64_t n) { return (unsigned)(n < (1 << 20) ? n : (1 << 20)); }

__device__ static __forceinline__ double max_nan(double a, double b) {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    return a > b ? a : b;
}

/* Max over the block with NaN propagating; every thread gets it. */
__device__ static __forceinline__ double block_max_nan(double v, double *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    double t = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) t = max_nan(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

/* ---------------------------------------------------------------- softmax */

struct sm_args {
    const char *x, *y, *dy;
    char *out;
    int xdt, ydt, gdt, odt, xes, yes, ges, oes;
    int64_t outer, n, inner;
    bool log;
};

__global__ void k_softmax_forward(sm_args a) {
    __shared__ double sh[32];
    int64_t lines = a.outer * a.inner;
    for (int64_t l = blockIdx.x; l < lines; l += gridDim.x) {
        int64_t o = l / a.inner, i = l - o * a.inner;
        int64_t base = o * a.n * a.inner + i;
        double m = -INFINITY;
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x) {
            double v = oj_cu_ld(a.x + (base + k * a.inner) * a.xes, a.xdt);
            if (v > m || isnan(v)) m = v;
        }
        m = block_max_nan(m, sh);
        double s = 0.0;
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x)
            s += exp(oj_cu_ld(a.x + (base + k * a.inner) * a.xes, a.xdt) - m);
        s = oj_cu_block_sum(s, sh);
        double lse = m + log(s);
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x) {
            double v = oj_cu_ld(a.x + (base + k * a.inner) * a.xes, a.xdt);
            oj_cu_st(a.out + (base + k * a.inner) * a.oes, a.odt, a.log ? v - lse : exp(v - m) / s);
        }
    }
}

__global__ void k_softmax_backward(sm_args a) {
    __shared__ double sh[32];
    int64_t lines = a.outer * a.inner;
    for (int64_t l = blockIdx.x; l < lines; l += gridDim.x) {
        int64_t o = l / a.inner, i = l - o * a.inner;
        int64_t base = o * a.n * a.inner + i;
        double s = 0.0;
        int nz = 0;
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x) {
            double g = oj_cu_ld(a.dy + (base + k * a.inner) * a.ges, a.gdt);
            nz |= g != 0.0;
            s += a.log ? g : g * oj_cu_ld(a.y + (base + k * a.inner) * a.yes, a.ydt);
        }
        s = oj_cu_block_sum(s, sh);
        nz = __syncthreads_or(nz); /* an all-zero upstream row gives exactly 0 */
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x) {
            double g = oj_cu_ld(a.dy + (base + k * a.inner) * a.ges, a.gdt);
            double y = oj_cu_ld(a.y + (base + k * a.inner) * a.yes, a.ydt);
            oj_cu_st(a.out + (base + k * a.inner) * a.oes, a.odt,
                     !nz ? 0.0 : a.log ? g - exp(y) * s : y * (g - s));
        }
    }
}

/* ---------------------------------------------------------------- fast paths
 * f32/bf16/f16 rows (softmax over the last dim; cross-entropy with f32
 * loss/lse): TPR threads per row, a warp (four rows per 128-thread block)
 * for rows of <= 1024 elements, a block of 512 above; float compute with
 * expf/logf, except that the sums of exp over 16-bit rows (softmax and
 * cross-entropy forward, the CE backward) take the __expf intrinsic and
 * the shift conversion of their loads: those kernels were issue-bound
 * (H200, ncu: 160 us forward, 281 us backward per [2341, 50304] bf16
 * chunk, ~1.5 TB/s); __expf is a few ulp off in float, far under the
 * inputs' 2^-9 rounding. The forward finds max and sum in
 * one pass (online softmax, Milakov & Gimelshein 2018): each thread takes
 * 8 elements at a time (c = tid + TPR j), rescales its running sum when
 * their max exceeds its running max, and adds exp(v - max); the threads'
 * (max, sum) pairs merge by an xor butterfly in each warp, then across
 * warps in warp order (fixed order: the same bits every run). NaN inputs
 * give NaN sums, as the CPU's.
 *
 * Bytes (N rows of V, element size s): softmax forward reads x (the
 * second read for the output mostly from L1/L2) and writes out: 2 s N V;
 * backward 3 s N V. cross-entropy forward reads the logits once (s N V:
 * gpt2-124m, N 16384, V 50257, f32: 3.3 GB, ~0.8 ms at 4.1 TB/s; bf16
 * half), backward reads logits and writes dlogits (2 s N V, ~1.6 ms f32).
 * Compute ~12 float instructions per element (one expf); bf16 logits may
 * be issue-bound near ~2 TB/s (estimates until measured). */

/* Add v into a running (max m, sum s of exp(v - m)). */
__device__ static __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
    if (m2 > m) {
        s = s * expf(m - m2) + s2;
        m = m2;
    } else if (m2 != -INFINITY) {
        s += s2 * expf(m2 - m);
    }
}

/* (max, sum) over the TPR threads of a row (see oj_cu_row_sumf). */
template <int TPR>
__device__ static __forceinline__ void row_ms_reduce(float &m, float &s, float *shm, float *shs) {
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    if (TPR == 32) return;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
        shm[w] = m;
        shs[w] = s;
    }
    __syncthreads();
    m = lane < TPR / 32 ? shm[lane] : -INFINITY;
    s = lane < TPR / 32 ? shs[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
}

/* This thread's running (max, sum of exp) over row[tid + TPR k], k >= 0,
 * and (when ax is not NULL) the plain sum of its values. */
template <typename T, int TPR>
__device__ static __forceinline__ void row_max_sum(const T *row, int64_t n, int tid, float *pm,
                                                   float *ps, float *ax) {
    constexpr int U = 8; /* 16 for 16-bit rows measured slower (216 vs 160 us per CE chunk) */
    float m = -INFINITY, s = 0.0f, sx = 0.0f;
    for (int64_t c0 = tid; c0 < n; c0 += (int64_t)TPR * U) {
        float v[U];
        float mc = -INFINITY;
#pragma unroll
        for (int j = 0; j < U; j++) { /* every load issued first: past n, element n - 1 */
            int64_t c = c0 + (int64_t)TPR * j;
            v[j] = oj_cu_hw_tof(row[c < n ? c : n - 1]); /* a NaN stays a NaN */
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            int64_t c = c0 + (int64_t)TPR * j;
            if (c >= n) v[j] = -INFINITY;
            mc = fmaxf(mc, v[j]); /* NaN skipped here; it reaches s below */
            if (ax && c < n) sx += v[j];
        }
        if (mc > m) {
            s *= expf(m - mc);
            m = mc;
        }
#pragma unroll
        for (int j = 0; j < U; j++) /* 16-bit rows: __expf (see the CE backward) */
            if (v[j] != -INFINITY) s += sizeof(T) == 2 ? __expf(v[j] - m) : expf(v[j] - m);
    }
    *pm = m;
    *ps = s;
    if (ax) *ax = sx;
}

#define SM_GEOM()                                                                            \
    const int tid = TPR == 32 ? (int)(threadIdx.x & 31) : (int)threadIdx.x;                   \
    const int64_t rpb = TPR == 32 ? blockDim.x / 32 : 1;                                       \
    const int64_t r0 = (int64_t)blockIdx.x * rpb + (TPR == 32 ? threadIdx.x / 32 : 0);        \
    const int64_t rstep = (int64_t)gridDim.x * rpb

// x (rows, n) -> out (rows, n), softmax or log-softmax of each row
template <typename T, int TPR>
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR)
    k_softmax_fwd_fast(const T *x, T *out, int64_t rows, int64_t n, bool log) {
    __shared__ float shm[32], shs[32];
    SM_GEOM();
    for (int64_t r = r0; r < rows; r += rstep) {
        const T *xr = x + r * n;
        float m, s;
        row_max_sum<T, TPR>(xr, n, tid, &m, &s, NULL);
        row_ms_reduce<TPR>(m, s, shm, shs);
        const float ls = logf(s), inv = 1.0f / s;
        T *orow = out + r * n;
        for (int64_t c = tid; c < n; c += TPR) {
            float v = oj_cu_tof(xr[c]);
            orow[c] = oj_cu_fromf<T>(log ? (v - m) - ls : expf(v - m) * inv);
        }
    }
}

// y, dy (rows, n) -> dx (rows, n)
template <typename T, int TPR>
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR)
    k_softmax_bwd_fast(const T *y, const T *dy, T *dx, int64_t rows, int64_t n, bool log) {
    __shared__ float sh[32];
    SM_GEOM();
    for (int64_t r = r0; r < rows; r += rstep) {
        const T *yr = y + r * n, *gr = dy + r * n;
        float s = 0.0f;
        int nz = 0;
        for (int64_t c = tid; c < n; c += TPR) {
            float g = oj_cu_tof(gr[c]);
            nz |= g != 0.0f;
            s += log ? g : g * oj_cu_tof(yr[c]);
        }
        s = oj_cu_row_sumf<TPR>(s, sh);
        /* an all-zero upstream row gives exactly 0 (even where y is NaN) */
        nz = TPR == 32 ? __any_sync(0xffffffffu, nz) : __syncthreads_or(nz);
        T *dr = dx + r * n;
        for (int64_t c = tid; c < n; c += TPR) {
            float g = oj_cu_tof(gr[c]), yv = oj_cu_tof(yr[c]);
            dr[c] = oj_cu_fromf<T>(!nz ? 0.0f : log ? g - expf(yv) * s : yv * (g - s));
        }
    }
}

template <typename T>
static void softmax_fwd_fast_launch(const T *x, T *out, int64_t rows, int64_t n, bool log) {
    if (n <= 1024)
        k_softmax_fwd_fast<T, 32><<<line_blocks((rows + 3) / 4), 128, 0, OJ_STREAM>>>(x, out, rows, n, log);
    else
        k_softmax_fwd_fast<T, 512><<<line_blocks(rows), 512, 0, OJ_STREAM>>>(x, out, rows, n, log);
}
template <typename T>
static void softmax_bwd_fast_launch(const T *y, const T *dy, T *dx, int64_t rows, int64_t n,
                                    bool log) {
    if (n <= 1024)
        k_softmax_bwd_fast<T, 32><<<line_blocks((rows + 3) / 4), 128, 0, OJ_STREAM>>>(y, dy, dx, rows, n, log);
    else
        k_softmax_bwd_fast<T, 512><<<line_blocks(rows), 512, 0, OJ_STREAM>>>(y, dy, dx, rows, n, log);
}

static void split_dim(const oj_tensor *x, int dim, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= x->shape[d];
    for (int d = dim + 1; d < x->rank; d++) *inner *= x->shape[d];
    *n = x->shape[dim];
}

oj_status oj_cuda_softmax_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *x, int dim,
                                  bool log) {
    const char *op = log ? "log_softmax" : "softmax";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, out, op, "out") != OJ_OK ||
        oj_cuda_need_contig(eng, x, op, "x") != OJ_OK)
        return oj_last_status(eng);
    sm_args a;
    memset(&a, 0, sizeof a);
    split_dim(x, dim, &a.outer, &a.n, &a.inner);
    if (a.outer * a.inner == 0 || a.n == 0) return OJ_OK;
    a.x = oj_cuda_ptr(x);
    a.xdt = (int)x->dtype;
    a.xes = (int)oj_dtype_size(x->dtype);
    a.out = oj_cuda_ptr(out);
    a.odt = (int)out->dtype;
    a.oes = (int)oj_dtype_size(out->dtype);
    a.log = log;
    if (a.inner == 1 && x->dtype == out->dtype && oj_cu_is_f16ish(x->dtype)) {
        OJ_CU_FLOAT_TYPE(x->dtype, T,
                         softmax_fwd_fast_launch<T>((const T *)a.x, (T *)a.out, a.outer, a.n, log));
        return oj_cuda_check(eng, log ? "log_softmax_forward" : "softmax_forward");
    }
    k_softmax_forward<<<line_blocks(a.outer * a.inner), line_threads(a.n), 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, log ? "log_softmax_forward" : "softmax_forward");
}

oj_status oj_cuda_softmax_backward(oj_engine *eng, oj_tensor *dx, const oj_tensor *y,
                                   const oj_tensor *dy, int dim, bool log) {
    const char *op = log ? "log_softmax" : "softmax";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, dx, op, "dx") != OJ_OK ||
        oj_cuda_need_contig(eng, y, op, "y") != OJ_OK ||
        oj_cuda_need_contig(eng, dy, op, "dy") != OJ_OK)
        return oj_last_status(eng);
    sm_args a;
    memset(&a, 0, sizeof a);
    split_dim(y, dim, &a.outer, &a.n, &a.inner);
    if (a.outer * a.inner == 0 || a.n == 0) return OJ_OK;
    a.y = oj_cuda_ptr(y);
    a.ydt = (int)y->dtype;
    a.yes = (int)oj_dtype_size(y->dtype);
    a.dy = oj_cuda_ptr(dy);
    a.gdt = (int)dy->dtype;
    a.ges = (int)oj_dtype_size(dy->dtype);
    a.out = oj_cuda_ptr(dx);
    a.odt = (int)dx->dtype;
    a.oes = (int)oj_dtype_size(dx->dtype);
    a.log = log;
    if (a.inner == 1 && y->dtype == dx->dtype && dy->dtype == dx->dtype &&
        oj_cu_is_f16ish(dx->dtype)) {
        OJ_CU_FLOAT_TYPE(dx->dtype, T,
                         softmax_bwd_fast_launch<T>((const T *)a.y, (const T *)a.dy, (T *)a.out,
                                                    a.outer, a.n, log));
        return oj_cuda_check(eng, log ? "log_softmax_backward" : "softmax_backward");
    }
    k_softmax_backward<<<line_blocks(a.outer * a.inner), line_threads(a.n), 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, log ? "log_softmax_backward" : "softmax_backward");
}

/* ---------------------------------------------------------------- class losses */

struct ce_args {
    const char *x, *t, *lse_in, *dloss;
    char *loss, *lse, *dx;
    int xdt, tdt, sdt, gdt, ddt, xes, tes, ses, ges, des;
    int64_t N, V, gstride;
    int64_t ld, dld; /* row strides (elements) of x and dx, >= V: padded rows (ce_row_stride) */
    long long ignore;
    double eps, scale;
    unsigned long long *flags; /* [0] first bad row, [1] rows counted */
};

/* Target of row n; sets *bad when not ignore_index and outside [0, V). */
__device__ static __forceinline__ long long target_of(const ce_args &a, int64_t n, bool *counted,
                                                      bool *bad) {
    long long t = oj_cu_ld_index(a.t + n * a.tes, a.tdt);
    *counted = t != a.ignore;
    *bad = *counted && (t < 0 || t >= a.V);
    return t;
}

// logits (N,V), targets (N) -> loss (N), lse (N)
__global__ void k_cross_entropy_forward(ce_args a) {
    __shared__ double sh[32];
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        const char *row = a.x + n * a.ld * a.xes;
        double m = -INFINITY;
        for (int64_t k = threadIdx.x; k < a.V; k += blockDim.x) {
            double v = oj_cu_ld(row + k * a.xes, a.xdt);
            if (v > m || isnan(v)) m = v;
        }
        m = block_max_nan(m, sh);
        double s = 0.0, sx = 0.0;
        for (int64_t k = threadIdx.x; k < a.V; k += blockDim.x) {
            double v = oj_cu_ld(row + k * a.xes, a.xdt);
            s += exp(v - m);
            sx += v;
        }
        s = oj_cu_block_sum(s, sh);
        if (a.eps != 0.0) sx = oj_cu_block_sum(sx, sh);
        double l = (isnan(m) || m == INFINITY || m == -INFINITY) ? m : m + log(s);
        if (threadIdx.x == 0) {
            bool counted, bad;
            long long t = target_of(a, n, &counted, &bad);
            double li = 0.0;
            if (bad) {
                atomicMin(&a.flags[0], (unsigned long long)n);
            } else if (counted) {
                li = (1.0 - a.eps) * (l - oj_cu_ld(row + t * a.xes, a.xdt));
                if (a.eps != 0.0) li += a.eps * (l - sx / (double)a.V);
            }
            if (counted) atomicAdd(&a.flags[1], 1ull);
            if (a.lse) oj_cu_st(a.lse + n * a.ses, a.sdt, l);
            oj_cu_st(a.loss + n * a.ses, a.sdt, li);
        }
    }
}

// logits (N,V), targets (N), lse (N), dloss (N) -> dlogits (N,V)
__global__ void k_cross_entropy_backward(ce_args a) {
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        bool counted, bad;
        long long t = target_of(a, n, &counted, &bad);
        const char *row = a.x + n * a.ld * a.xes;
        char *drow = a.dx + n * a.dld * a.des;
        if (!counted || bad) {
            for (int64_t k = threadIdx.x; k < a.V; k += blockDim.x) oj_cu_st(drow + k * a.des, a.ddt, 0.0);
            continue;
        }
        double l = oj_cu_ld(a.lse_in + n * a.ses, a.sdt);
        double g = a.scale * oj_cu_ld(a.dloss + n * a.gstride * a.ges, a.gdt);
        double off = a.eps / (double)a.V;
        for (int64_t k = threadIdx.x; k < a.V; k += blockDim.x) {
            double v = g * (exp(oj_cu_ld(row + k * a.xes, a.xdt) - l) - off);
            if (k == t) v -= g * (1.0 - a.eps);
            oj_cu_st(drow + k * a.des, a.ddt, v);
        }
    }
}

// logp (N,V), targets (N) -> loss (N)
__global__ void k_nll_forward(ce_args a) {
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < a.N;
         n += (int64_t)gridDim.x * blockDim.x) {
        bool counted, bad;
        long long t = target_of(a, n, &counted, &bad);
        double li = 0.0;
        if (bad)
            atomicMin(&a.flags[0], (unsigned long long)n);
        else if (counted)
            li = -oj_cu_ld(a.x + (n * a.V + t) * a.xes, a.xdt);
        if (counted) atomicAdd(&a.flags[1], 1ull);
        oj_cu_st(a.loss + n * a.ses, a.sdt, li);
    }
}

// targets (N), dloss (N) -> dlogp (N,V) (zeroed before)
__global__ void k_nll_backward(ce_args a) {
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < a.N;
         n += (int64_t)gridDim.x * blockDim.x) {
        bool counted, bad;
        long long t = target_of(a, n, &counted, &bad);
        if (!counted || bad) continue;
        double g = -a.scale * oj_cu_ld(a.dloss + n * a.gstride * a.ges, a.gdt);
        oj_cu_st(a.dx + (n * a.V + t) * a.des, a.ddt, g);
    }
}

/* Fast paths of the fused cross-entropy (f32/bf16/f16 logits, f32 loss and
 * lse; see the comment on the softmax fast paths for the layout).
 *
 * The forward (k_ce_fwd_fast) and the one-pass forward + backward
 * (k_ce_fused) take each row's (max, sum of exp) from the same routine,
 * ce_row_stats, so their loss and lse have the same bits; the backward
 * (k_ce_bwd_fast) and k_ce_fused write each gradient with the same
 * ce_grad, so their dlogits have the same bits. ce_row_stats reads a row
 * as packs of W elements: 16-byte vectors (W = 16 / sizeof(T)) when every
 * row starts 16-byte aligned (VEC: the base aligned and V * sizeof(T) a
 * multiple of 16), else single elements (W = 1). Thread tid takes packs
 * tid + TPR j, U packs in flight (their loads issued first), keeps a
 * running (max, sum) rescaled when a group of U packs raises the max
 * (online softmax, Milakov & Gimelshein 2018), and the row's threads merge
 * in the fixed order of row_ms_reduce: the same bits every run. */

/* Pack of W elements of T as one load: a 16-byte vector, or T itself. */
template <typename T, bool VEC> struct ce_pack {
    typedef uint4 P;
    static constexpr int W = 16 / (int)sizeof(T);
};
template <typename T> struct ce_pack<T, false> {
    typedef T P;
    static constexpr int W = 1;
};

template <typename T, bool VEC>
__device__ static __forceinline__ void ce_unpack(typename ce_pack<T, VEC>::P r, float *f) {
    if constexpr (VEC)
        oj_cu_unpackv<T, ce_pack<T, VEC>::W>(r, f); /* a NaN stays a NaN */
    else
        f[0] = oj_cu_hw_tof(r);
}

/* Packs per thread in flight in the row loops. */
template <typename T, bool VEC> struct ce_unroll {
    static constexpr int U = VEC ? 4 : 8;
};

/* This thread's running (max m, sum s of exp(x - m)) over its packs of
 * row (np packs), and (ax not NULL) the plain sum of its values. stage
 * (not NULL): each pack read is also stored at stage[pack] (the fused
 * kernel reads it back from there: the row comes from DRAM once). */
template <typename T, int TPR, bool VEC>
__device__ static __forceinline__ void ce_row_stats(const typename ce_pack<T, VEC>::P *row,
                                                    int64_t np, int64_t V, int tid,
                                                    typename ce_pack<T, VEC>::P *stage, float *pm,
                                                    float *ps, float *ax) {
    typedef typename ce_pack<T, VEC>::P P;
    constexpr int W = ce_pack<T, VEC>::W, U = ce_unroll<T, VEC>::U;
    float m = -INFINITY, s = 0.0f, sx = 0.0f;
    for (int64_t p0 = tid; p0 < np; p0 += (int64_t)TPR * U) {
        P r[U];
#pragma unroll
        for (int j = 0; j < U; j++) { /* every load issued first: past np, the last pack */
            int64_t p = p0 + (int64_t)TPR * j;
            r[j] = row[p < np ? p : np - 1];
        }
        float mc = -INFINITY;
#pragma unroll
        for (int j = 0; j < U; j++) {
            int64_t p = p0 + (int64_t)TPR * j;
            if (p >= np) break;
            if (stage) stage[p] = r[j];
            float v[W];
            ce_unpack<T, VEC>(r[j], v);
#pragma unroll
            for (int k = 0; k < W; k++) {
                mc = fmaxf(mc, v[k]); /* NaN skipped here; it reaches s below */
                if (ax) sx += v[k];
            }
        }
        /* explicit roundings (never contracted into an FMA, whatever the
         * inlining context: the forward and the fused kernel agree) */
        if (mc > m) {
            s = __fmul_rn(s, expf(m - mc));
            m = mc;
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            int64_t p = p0 + (int64_t)TPR * j;
            if (p >= np) break;
            float v[W];
            ce_unpack<T, VEC>(r[j], v);
#pragma unroll
            for (int k = 0; k < W; k++) /* 16-bit rows: __expf (see ce_grad) */
                if (v[k] != -INFINITY)
                    s = __fadd_rn(s, sizeof(T) == 2 ? __expf(v[k] - m) : expf(v[k] - m));
        }
    }
    if (tid == 0 && np * W < V) { /* the tail past the last whole pack (< W elements) */
        const T *e = (const T *)row;
        float mc = -INFINITY;
        for (int64_t k = np * W; k < V; k++) {
            float v = oj_cu_hw_tof(e[k]);
            mc = fmaxf(mc, v);
            if (ax) sx += v;
        }
        if (mc > m) {
            s = __fmul_rn(s, expf(m - mc));
            m = mc;
        }
        for (int64_t k = np * W; k < V; k++) {
            float v = oj_cu_hw_tof(e[k]);
            if (v != -INFINITY) s = __fadd_rn(s, sizeof(T) == 2 ? __expf(v - m) : expf(v - m));
        }
    }
    *pm = m;
    *ps = s;
    if (ax) *ax = sx;
}

/* lse of a row from its merged (max, sum), as the forward stores it (in
 * double, then rounded to the f32 lse). */
__device__ static __forceinline__ double ce_lse_of(float m, float s) {
    return (m == INFINITY || m == -INFINITY) ? (double)m : (double)m + log((double)s);
}

/* One gradient element: g (exp(x - l) - off), less gt at the target.
 * 16-bit gradients take __expf (relative ~1e-6 in float, under their 2^-9
 * rounding; the same bits every run). The product is rounded on its own
 * (__fmul_rn: never contracted with the target's subtraction), so every
 * kernel calling this gives the same bits. */
template <typename T>
__device__ static __forceinline__ float ce_grad(float x, float l, float g, float off, float gt,
                                                bool is_t) {
    float e = sizeof(T) == 2 ? __expf(x - l) : expf(x - l);
    float v = __fmul_rn(g, e - off);
    return is_t ? v - gt : v;
}

// logits (N,V), targets (N) -> loss (N), lse (N)
template <typename T, int TPR, bool VEC>
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR) k_ce_fwd_fast(ce_args a) {
    typedef typename ce_pack<T, VEC>::P P;
    constexpr int W = ce_pack<T, VEC>::W;
    __shared__ float shm[32], shs[32];
    SM_GEOM();
    const int64_t np = a.V / W;
    for (int64_t n = r0; n < a.N; n += rstep) {
        const T *row = (const T *)a.x + n * a.ld;
        float m, s, sx = 0.0f;
        ce_row_stats<T, TPR, VEC>((const P *)row, np, a.V, tid, NULL, &m, &s,
                                  a.eps != 0.0 ? &sx : NULL);
        row_ms_reduce<TPR>(m, s, shm, shs);
        if (a.eps != 0.0) sx = oj_cu_row_sumf<TPR>(sx, shm);
        if (tid == 0) {
            double l = ce_lse_of(m, s);
            bool counted, bad;
            long long t = target_of(a, n, &counted, &bad);
            double li = 0.0;
            if (bad) {
                atomicMin(&a.flags[0], (unsigned long long)n);
            } else if (counted) {
                li = (1.0 - a.eps) * (l - (double)oj_cu_tof(row[t]));
                if (a.eps != 0.0) li += a.eps * (l - (double)sx / (double)a.V);
            }
            if (counted) atomicAdd(&a.flags[1], 1ull);
            if (a.lse) ((float *)a.lse)[n] = (float)l;
            ((float *)a.loss)[n] = (float)li;
        }
    }
}

// logits (N,V), targets (N), lse (N), dloss (N) -> dlogits (N,V)
template <typename T, int TPR>
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR) k_ce_bwd_fast(ce_args a) {
    SM_GEOM();
    for (int64_t n = r0; n < a.N; n += rstep) {
        bool counted, bad;
        long long t = target_of(a, n, &counted, &bad);
        const T *row = (const T *)a.x + n * a.ld;
        T *drow = (T *)a.dx + n * a.dld;
        if (!counted || bad) {
            for (int64_t k = tid; k < a.V; k += TPR) drow[k] = oj_cu_fromf<T>(0.0f);
            continue;
        }
        const float l = ((const float *)a.lse_in)[n];
        const double gd = a.scale * oj_cu_ld(a.dloss + n * a.gstride * a.ges, a.gdt);
        const float g = (float)gd, gt = (float)(gd * (1.0 - a.eps));
        const float off = (float)(a.eps / (double)a.V);
        /* U loads in flight per thread (one after another they were a
         * latency chain: 281 us for [2341, 50304] bf16 on the H200, 1.7
         * TB/s) */
        constexpr int U = sizeof(T) == 2 ? 16 : 8;
        for (int64_t k0 = tid; k0 < a.V; k0 += (int64_t)TPR * U) {
            float x[U];
#pragma unroll
            for (int j = 0; j < U; j++) {
                int64_t k = k0 + (int64_t)TPR * j;
                x[j] = oj_cu_hw_tof(row[k < a.V ? k : a.V - 1]);
            }
#pragma unroll
            for (int j = 0; j < U; j++) {
                int64_t k = k0 + (int64_t)TPR * j;
                if (k >= a.V) break;
                drow[k] = oj_cu_fromf<T>(ce_grad<T>(x[j], l, g, off, gt, k == t));
            }
        }
    }
}

/* Forward and backward in one pass (the cross_entropy_fused entry): the
 * row's (max, sum) as k_ce_fwd_fast (ce_row_stats; the packs staged in
 * dynamic shared memory when `stage`, else read again from global memory,
 * where they are likely still in L2), loss and lse as it writes them,
 * then the gradient of each pack as k_ce_bwd_fast's (ce_grad, lse rounded
 * to f32 first). Each thread writes only the packs it read, after reading
 * them, and the target's logit is read before the block's barrier, so
 * dlogits may be the logits (in place). Bytes per row: V s read, V s
 * written (the two kernels: 2 V s read, V s written). Shared memory
 * (stage): ceil(V / W) packs of 16 (or s) bytes, <= the opt-in limit
 * (227 KiB on the H100/H200: bf16 rows up to ~116k classes; two blocks of
 * a 50304-class bf16 row, 98 KiB each, fit one SM). */
template <typename T, int TPR, bool VEC> /* two blocks of 512 per SM: <= 64 registers */
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR, TPR == 32 ? 8 : 2)
    k_ce_fused(ce_args a, bool stage) {
    typedef typename ce_pack<T, VEC>::P P;
    constexpr int W = ce_pack<T, VEC>::W, U = ce_unroll<T, VEC>::U;
    extern __shared__ __align__(16) unsigned char ce_smem[];
    __shared__ float shm[32], shs[32];
    SM_GEOM();
    P *st = stage ? (P *)ce_smem : NULL;
    const int64_t np = a.V / W;
    for (int64_t n = r0; n < a.N; n += rstep) {
        const T *row = (const T *)a.x + n * a.ld;
        float m, s, sx = 0.0f;
        ce_row_stats<T, TPR, VEC>((const P *)row, np, a.V, tid, st, &m, &s,
                                  a.eps != 0.0 ? &sx : NULL);
        bool counted, bad;
        long long t = target_of(a, n, &counted, &bad);
        /* the target's logit, read before any thread of the row writes */
        float xt = tid == 0 && counted && !bad ? oj_cu_tof(row[t]) : 0.0f;
        row_ms_reduce<TPR>(m, s, shm, shs);
        if (a.eps != 0.0) sx = oj_cu_row_sumf<TPR>(sx, shm);
        if (TPR == 32)
            __syncwarp();
        else
            __syncthreads();
        const double l = ce_lse_of(m, s);
        if (tid == 0) {
            double li = 0.0;
            if (bad) {
                atomicMin(&a.flags[0], (unsigned long long)n);
            } else if (counted) {
                li = (1.0 - a.eps) * (l - (double)xt);
                if (a.eps != 0.0) li += a.eps * (l - (double)sx / (double)a.V);
            }
            if (counted) atomicAdd(&a.flags[1], 1ull);
            ((float *)a.lse)[n] = (float)l;
            ((float *)a.loss)[n] = (float)li;
        }
        T *drow = (T *)a.dx + n * a.dld;
        if (!counted || bad) {
            float z[W];
#pragma unroll
            for (int k = 0; k < W; k++) z[k] = 0.0f;
            for (int64_t p = tid; p < np; p += TPR) {
                if constexpr (VEC)
                    oj_cu_stv<T, W>(drow + p * W, z);
                else
                    drow[p] = oj_cu_fromf<T>(0.0f);
            }
            if (tid == 0)
                for (int64_t k = np * W; k < a.V; k++) drow[k] = oj_cu_fromf<T>(0.0f);
            continue;
        }
        const float lf = (float)l;
        const double gd = a.scale * oj_cu_ld(a.dloss + n * a.gstride * a.ges, a.gdt);
        const float g = (float)gd, gt = (float)(gd * (1.0 - a.eps));
        const float off = (float)(a.eps / (double)a.V);
        for (int64_t p0 = tid; p0 < np; p0 += (int64_t)TPR * U) {
            P r[U];
#pragma unroll
            for (int j = 0; j < U; j++) {
                int64_t p = p0 + (int64_t)TPR * j;
                if (p < np) r[j] = st ? st[p] : ((const P *)row)[p];
            }
#pragma unroll
            for (int j = 0; j < U; j++) {
                int64_t p = p0 + (int64_t)TPR * j;
                if (p >= np) break;
                float v[W];
                ce_unpack<T, VEC>(r[j], v);
#pragma unroll
                for (int k = 0; k < W; k++) v[k] = ce_grad<T>(v[k], lf, g, off, gt, p * W + k == t);
                if constexpr (VEC)
                    oj_cu_stv<T, W>(drow + p * W, v);
                else
                    drow[p] = oj_cu_fromf<T>(v[0]);
            }
        }
        if (tid == 0) /* the tail past the last whole pack, read by this thread in the stats */
            for (int64_t k = np * W; k < a.V; k++)
                drow[k] = oj_cu_fromf<T>(ce_grad<T>(oj_cu_hw_tof(row[k]), lf, g, off, gt, k == t));
    }
}

/* Rows start 16-byte aligned: the vector packs. */
template <typename T> static bool ce_vec_ok(const ce_args &a) {
    return oj_cu_aligned16(a.x) && ((size_t)a.ld * sizeof(T)) % 16 == 0;
}

template <typename T> static void ce_fwd_fast_launch(const ce_args &a) {
    bool vec = ce_vec_ok<T>(a);
    if (a.V <= 1024) {
        unsigned nb = line_blocks((a.N + 3) / 4);
        if (vec)
            k_ce_fwd_fast<T, 32, true><<<nb, 128, 0, OJ_STREAM>>>(a);
        else
            k_ce_fwd_fast<T, 32, false><<<nb, 128, 0, OJ_STREAM>>>(a);
    } else if (vec) {
        k_ce_fwd_fast<T, 512, true><<<line_blocks(a.N), 512, 0, OJ_STREAM>>>(a);
    } else {
        k_ce_fwd_fast<T, 512, false><<<line_blocks(a.N), 512, 0, OJ_STREAM>>>(a);
    }
}
template <typename T> static void ce_bwd_fast_launch(const ce_args &a) {
    if (a.V <= 1024)
        k_ce_bwd_fast<T, 32><<<line_blocks((a.N + 3) / 4), 128, 0, OJ_STREAM>>>(a);
    else
        k_ce_bwd_fast<T, 512><<<line_blocks(a.N), 512, 0, OJ_STREAM>>>(a);
}

/* The fused kernel for rows of T (the same TPR and packs as
 * ce_fwd_fast_launch, so the same loss bits); rows of > 1024 classes are
 * staged in shared memory when they fit the opt-in limit (opted into once
 * per device: oj_cuda_kernel_smem). ordinal: the engine's device, current. */
template <typename T, bool VEC>
static cudaError_t ce_fused_launch_v(const ce_args &a, int ordinal) {
    constexpr int W = ce_pack<T, VEC>::W;
    static oj_cuda_kfacts facts; /* of k_ce_fused<T, 512, VEC> */
    if (a.V <= 1024) {
        k_ce_fused<T, 32, VEC><<<line_blocks((a.N + 3) / 4), 128, 0, OJ_STREAM>>>(a, false);
        return cudaSuccess;
    }
    size_t smem = (size_t)(a.V / W) * sizeof(typename ce_pack<T, VEC>::P);
    int optin = 0;
    cudaError_t e =
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal);
    if (e != cudaSuccess) return e;
    /* the block's static shared memory (shm, shs) comes out of the same limit */
    bool stage = smem + 2 * 32 * sizeof(float) <= (size_t)optin;
    if (stage) {
        e = oj_cuda_kernel_smem(&facts, (const void *)k_ce_fused<T, 512, VEC>, ordinal, smem);
        if (e != cudaSuccess) return e;
    }
    k_ce_fused<T, 512, VEC><<<line_blocks(a.N), 512, stage ? smem : 0, OJ_STREAM>>>(a, stage);
    return cudaSuccess;
}
template <typename T> static cudaError_t ce_fused_launch(const ce_args &a, int ordinal) {
    return ce_vec_ok<T>(a) ? ce_fused_launch_v<T, true>(a, ordinal)
                           : ce_fused_launch_v<T, false>(a, ordinal);
}

static oj_status reset_flags(oj_engine *eng, const char *op) {
    /* [0] first bad row (none: all ones), [1] rows counted */
    return oj_cuda_flags_reset(eng, 2, 0xff, 0x00, op);
}

/* After a forward: *n_valid (when wanted), or the CPU's error for the
 * first bad row. During a capture the check is deferred to the replays
 * and the count cannot be had. */
static oj_status finish_forward(oj_engine *eng, const char *op, const oj_tensor *targets,
                                int64_t V, int64_t ignore_index, int64_t *n_valid) {
    if (oj_cuda_capturing(eng)) {
        if (n_valid)
            return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                                "%s: the count of counted rows would be read back to the host, "
                                "which a CUDA graph capture cannot do",
                                op);
        return oj_cuda_flags_defer(eng, OJ_CUDA_CHECK_TARGET, op, targets, V, ignore_index);
    }
    unsigned long long f[2];
    if (oj_cuda_flags_read(eng, f, 2, op) != OJ_OK) return oj_last_status(eng);
    if (f[0] == ~0ull) {
        if (n_valid) *n_valid = (int64_t)f[1];
        return OJ_OK;
    }
    return oj_cuda_bad_index(eng, OJ_CUDA_CHECK_TARGET, op, oj_cuda_ptr(targets),
                             (int)targets->dtype, f[0], V, ignore_index);
}

/* The row stride of a [N, V] logits (or dlogits) tensor whose rows are
 * contiguous: V when packed, more for padded rows (linear_cross_entropy's
 * aligned layout, backend field ce_row_align); -1 when the rows are not
 * contiguous or overlap. */
static int64_t ce_row_stride(const oj_tensor *x) {
    int64_t N = x->shape[0], V = x->shape[1];
    if (V > 1 && x->stride[1] != 1) return -1;
    if (N <= 1) return V;
    return x->stride[0] >= V ? x->stride[0] : -1;
}

/* OJ_ERR_INTERNAL unless logits (and dlogits, may be NULL) have
 * contiguous rows (any row stride >= V). */
static oj_status ce_need_rows(oj_engine *eng, const char *op, const oj_tensor *logits,
                              const oj_tensor *dlogits) {
    const oj_tensor *t[2] = {logits, dlogits};
    for (int i = 0; i < 2; i++)
        if (t[i] && (t[i]->rank != 2 || ce_row_stride(t[i]) < 0))
            return oj_set_error(eng, OJ_ERR_INTERNAL,
                                "%s: the cuda kernel expects %s [N, V] with contiguous rows",
                                op, i ? "dlogits" : "logits");
    return OJ_OK;
}

static void ce_fill(ce_args *a, const oj_tensor *x, const oj_tensor *targets) {
    memset(a, 0, sizeof *a);
    a->N = targets->rank ? targets->shape[0] : 1;
    a->V = x->shape[1];
    a->x = x ? oj_cuda_ptr(x) : NULL;
    a->xdt = (int)x->dtype;
    a->xes = (int)oj_dtype_size(x->dtype);
    a->ld = a->dld = a->V;
    a->t = oj_cuda_ptr(targets);
    a->tdt = (int)targets->dtype;
    a->tes = (int)oj_dtype_size(targets->dtype);
}

/* The backward's part of a: dloss [N] (any stride, 0 broadcast), dlogits,
 * ignore_index, label smoothing and the scale. */
static void ce_fill_grad(ce_args *a, const oj_tensor *dloss, const oj_tensor *dlogits,
                         int64_t ignore_index, double label_smoothing, double scale) {
    a->dloss = oj_cuda_ptr(dloss);
    a->gdt = (int)dloss->dtype;
    a->ges = (int)oj_dtype_size(dloss->dtype);
    a->gstride = dloss->rank ? dloss->stride[0] : 0;
    a->dx = oj_cuda_ptr(dlogits);
    a->dld = dlogits->rank == 2 ? ce_row_stride(dlogits) : a->V;
    a->ddt = (int)dlogits->dtype;
    a->des = (int)oj_dtype_size(dlogits->dtype);
    a->ignore = ignore_index;
    a->eps = label_smoothing;
    a->scale = scale;
}

oj_status oj_cuda_cross_entropy_forward(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        int64_t ignore_index, double label_smoothing,
                                        int64_t *n_valid) {
    const char *op = "cross_entropy";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[3] = {loss, lse, targets};
    for (int i = 0; i < 3; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    if (ce_need_rows(eng, op, logits, NULL) != OJ_OK) return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, logits, targets);
    a.ld = ce_row_stride(logits);
    a.N = logits->shape[0];
    if (n_valid) *n_valid = 0;
    if (a.N == 0) return OJ_OK;
    a.loss = oj_cuda_ptr(loss);
    a.lse = lse ? oj_cuda_ptr(lse) : NULL;
    a.sdt = (int)loss->dtype;
    a.ses = (int)oj_dtype_size(loss->dtype);
    a.ignore = ignore_index;
    a.eps = label_smoothing;
    if (reset_flags(eng, op) != OJ_OK) return oj_last_status(eng);
    a.flags = oj_cuda_state_of(eng)->flags;
    if (oj_cu_is_f16ish(logits->dtype) && loss->dtype == OJ_F32 &&
        (lse == NULL || lse->dtype == OJ_F32) && a.V > 0)
        OJ_CU_FLOAT_TYPE(logits->dtype, T, ce_fwd_fast_launch<T>(a));
    else
        k_cross_entropy_forward<<<line_blocks(a.N), line_threads(a.V), 0, OJ_STREAM>>>(a);
    if (oj_cuda_check(eng, "cross_entropy_forward") != OJ_OK) return oj_last_status(eng);
    return finish_forward(eng, op, targets, a.V, ignore_index, n_valid);
}

oj_status oj_cuda_cross_entropy_backward(oj_engine *eng, oj_tensor *dlogits,
                                         const oj_tensor *logits, const oj_tensor *targets,
                                         const oj_tensor *lse, const oj_tensor *dloss,
                                         double scale, int64_t ignore_index,
                                         double label_smoothing) {
    const char *op = "cross_entropy";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[2] = {targets, lse};
    for (int i = 0; i < 2; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    if (ce_need_rows(eng, op, logits, dlogits) != OJ_OK) return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, logits, targets);
    a.ld = ce_row_stride(logits);
    a.N = logits->shape[0];
    if (a.N == 0 || a.V == 0) return OJ_OK;
    a.lse_in = oj_cuda_ptr(lse);
    a.sdt = (int)lse->dtype;
    a.ses = (int)oj_dtype_size(lse->dtype);
    ce_fill_grad(&a, dloss, dlogits, ignore_index, label_smoothing, scale);
    if (oj_cu_is_f16ish(logits->dtype) && dlogits->dtype == logits->dtype &&
        lse->dtype == OJ_F32)
        OJ_CU_FLOAT_TYPE(logits->dtype, T, ce_bwd_fast_launch<T>(a));
    else
        k_cross_entropy_backward<<<line_blocks(a.N), line_threads(a.V), 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "cross_entropy_backward");
}

/* Forward + backward in one pass (k_ce_fused) when the logits take the
 * fast path; otherwise (f64, a non-f32 loss or lse, dlogits of another
 * dtype, or vector-aligned logits with a dlogits that is not) the two
 * kernels of the entries above one after the other, which is in place
 * safe too (the backward reads each element before it writes it). */
oj_status oj_cuda_cross_entropy_fused(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                      oj_tensor *dlogits, const oj_tensor *logits,
                                      const oj_tensor *targets, const oj_tensor *dloss,
                                      double scale, int64_t ignore_index,
                                      double label_smoothing, int64_t *n_valid) {
    const char *op = "cross_entropy";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (lse == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "cross_entropy: the fused entry needs lse (its gradient reads it)");
    const oj_tensor *chk[3] = {loss, lse, targets};
    for (int i = 0; i < 3; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    if (ce_need_rows(eng, op, logits, dlogits) != OJ_OK) return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, logits, targets);
    a.ld = ce_row_stride(logits);
    a.N = logits->shape[0];
    if (n_valid) *n_valid = 0;
    if (a.N == 0) return OJ_OK;
    a.loss = oj_cuda_ptr(loss);
    a.lse = oj_cuda_ptr(lse);
    a.lse_in = a.lse;
    a.sdt = (int)loss->dtype;
    a.ses = (int)oj_dtype_size(loss->dtype);
    ce_fill_grad(&a, dloss, dlogits, ignore_index, label_smoothing, scale);
    if (reset_flags(eng, op) != OJ_OK) return oj_last_status(eng);
    a.flags = oj_cuda_state_of(eng)->flags;
    bool fast = oj_cu_is_f16ish(logits->dtype) && loss->dtype == OJ_F32 &&
                lse->dtype == OJ_F32 && dlogits->dtype == logits->dtype && a.V > 0;
    if (fast) {
        cudaError_t e = cudaSuccess;
        bool fused = true;
        OJ_CU_FLOAT_TYPE(logits->dtype, T,
                         fused = !ce_vec_ok<T>(a) ||
                                 (oj_cu_aligned16(a.dx) && ((size_t)a.dld * sizeof(T)) % 16 == 0);
                         if (fused) e = ce_fused_launch<T>(a, oj_cuda_state_of(eng)->ordinal);
                         else {
                             ce_fwd_fast_launch<T>(a);
                             ce_bwd_fast_launch<T>(a);
                         });
        if (e != cudaSuccess) return oj_cuda_fail(eng, e, "cross_entropy_fused");
    } else {
        k_cross_entropy_forward<<<line_blocks(a.N), line_threads(a.V), 0, OJ_STREAM>>>(a);
        if (a.V > 0)
            k_cross_entropy_backward<<<line_blocks(a.N), line_threads(a.V), 0, OJ_STREAM>>>(a);
    }
    if (oj_cuda_check(eng, "cross_entropy_fused") != OJ_OK) return oj_last_status(eng);
    return finish_forward(eng, op, targets, a.V, ignore_index, n_valid);
}

oj_status oj_cuda_nll_loss_forward(oj_engine *eng, oj_tensor *loss, const oj_tensor *logp,
                                   const oj_tensor *targets, int64_t ignore_index,
                                   int64_t *n_valid) {
    const char *op = "nll_loss";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[3] = {loss, logp, targets};
    for (int i = 0; i < 3; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, logp, targets);
    a.N = logp->shape[0];
    if (n_valid) *n_valid = 0;
    if (a.N == 0) return OJ_OK;
    a.loss = oj_cuda_ptr(loss);
    a.sdt = (int)loss->dtype;
    a.ses = (int)oj_dtype_size(loss->dtype);
    a.ignore = ignore_index;
    if (reset_flags(eng, op) != OJ_OK) return oj_last_status(eng);
    a.flags = oj_cuda_state_of(eng)->flags;
    k_nll_forward<<<oj_cuda_blocks(a.N), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    if (oj_cuda_check(eng, "nll_loss_forward") != OJ_OK) return oj_last_status(eng);
    return finish_forward(eng, op, targets, a.V, ignore_index, n_valid);
}

oj_status oj_cuda_nll_loss_backward(oj_engine *eng, oj_tensor *dlogp, const oj_tensor *targets,
                                    const oj_tensor *dloss, double scale, int64_t ignore_index) {
    const char *op = "nll_loss";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, dlogp, op, "dlogp") != OJ_OK ||
        oj_cuda_need_contig(eng, targets, op, "targets") != OJ_OK)
        return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, dlogp, targets);
    a.N = dlogp->shape[0];
    a.x = NULL;
    size_t bytes = (size_t)(a.N * a.V) * oj_dtype_size(dlogp->dtype);
    cudaError_t e = bytes ? cudaMemsetAsync(oj_cuda_ptr(dlogp), 0, bytes, OJ_STREAM) : cudaSuccess;
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "nll_loss_backward (zero)");
    if (a.N == 0 || a.V == 0) return OJ_OK;
    a.dloss = oj_cuda_ptr(dloss);
    a.gdt = (int)dloss->dtype;
    a.ges = (int)oj_dtype_size(dloss->dtype);
    a.gstride = dloss->rank ? dloss->stride[0] : 0;
    a.dx = oj_cuda_ptr(dlogp);
    a.ddt = (int)dlogp->dtype;
    a.des = (int)oj_dtype_size(dlogp->dtype);
    a.ignore = ignore_index;
    a.scale = scale;
    k_nll_backward<<<oj_cuda_blocks(a.N), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "nll_loss_backward");
}
