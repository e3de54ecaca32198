/* CUDA softmax / log-softmax over any dim, the fused cross-entropy
 * (log-softmax + NLL, label smoothing, ignore_index) and NLL, computed in
 * double like the CPU kernels (cpu_nn_softmax.c). One block per row (line);
 * row sums reduce in a fixed tree, so results are deterministic. Targets
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
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x) {
            double g = oj_cu_ld(a.dy + (base + k * a.inner) * a.ges, a.gdt);
            s += a.log ? g : g * oj_cu_ld(a.y + (base + k * a.inner) * a.yes, a.ydt);
        }
        s = oj_cu_block_sum(s, sh);
        for (int64_t k = threadIdx.x; k < a.n; k += blockDim.x) {
            double g = oj_cu_ld(a.dy + (base + k * a.inner) * a.ges, a.gdt);
            double y = oj_cu_ld(a.y + (base + k * a.inner) * a.yes, a.ydt);
            oj_cu_st(a.out + (base + k * a.inner) * a.oes, a.odt,
                     a.log ? g - exp(y) * s : y * (g - s));
        }
    }
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
    k_softmax_forward<<<line_blocks(a.outer * a.inner), line_threads(a.n)>>>(a);
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
    k_softmax_backward<<<line_blocks(a.outer * a.inner), line_threads(a.n)>>>(a);
    return oj_cuda_check(eng, log ? "log_softmax_backward" : "softmax_backward");
}

/* ---------------------------------------------------------------- class losses */

struct ce_args {
    const char *x, *t, *lse_in, *dloss;
    char *loss, *lse, *dx;
    int xdt, tdt, sdt, gdt, ddt, xes, tes, ses, ges, des;
    int64_t N, V, gstride;
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
        const char *row = a.x + n * a.V * a.xes;
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
        const char *row = a.x + n * a.V * a.xes;
        char *drow = a.dx + n * a.V * a.des;
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

static oj_status reset_flags(oj_engine *eng, const char *op) {
    if (oj_cuda_flags_reset(eng, 2, 0x00, op) != OJ_OK) return oj_last_status(eng);
    return oj_cuda_flags_reset(eng, 1, 0xff, op);
}

/* After a forward: *n_valid, or the CPU's error for the first bad row. */
static oj_status finish_forward(oj_engine *eng, const char *op, const oj_tensor *targets,
                                int64_t V, int64_t ignore_index, int64_t *n_valid) {
    unsigned long long f[2];
    if (oj_cuda_flags_read(eng, f, 2, op) != OJ_OK) return oj_last_status(eng);
    if (f[0] == ~0ull) {
        *n_valid = (int64_t)f[1];
        return OJ_OK;
    }
    size_t ts = oj_dtype_size(targets->dtype);
    unsigned char buf[8] = {0};
    if (oj_cuda_d2h(eng, buf, oj_cuda_ptr(targets) + (size_t)f[0] * ts, ts, op) != OJ_OK)
        return oj_last_status(eng);
    long long t;
    if (targets->dtype == OJ_I32) {
        int32_t v;
        memcpy(&v, buf, 4);
        t = v;
    } else {
        memcpy(&t, buf, 8);
    }
    return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                        "%s: target %lld at row %lld is out of range for %lld classes "
                        "(expected 0 <= target < %lld, or ignore_index %lld)",
                        op, t, (long long)f[0], (long long)V, (long long)V,
                        (long long)ignore_index);
}

static void ce_fill(ce_args *a, const oj_tensor *x, const oj_tensor *targets) {
    memset(a, 0, sizeof *a);
    a->N = targets->rank ? targets->shape[0] : 1;
    a->V = x->shape[1];
    a->x = x ? oj_cuda_ptr(x) : NULL;
    a->xdt = (int)x->dtype;
    a->xes = (int)oj_dtype_size(x->dtype);
    a->t = oj_cuda_ptr(targets);
    a->tdt = (int)targets->dtype;
    a->tes = (int)oj_dtype_size(targets->dtype);
}

oj_status oj_cuda_cross_entropy_forward(oj_engine *eng, oj_tensor *loss, oj_tensor *lse,
                                        const oj_tensor *logits, const oj_tensor *targets,
                                        int64_t ignore_index, double label_smoothing,
                                        int64_t *n_valid) {
    const char *op = "cross_entropy";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[4] = {loss, lse, logits, targets};
    for (int i = 0; i < 4; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, logits, targets);
    a.N = logits->shape[0];
    *n_valid = 0;
    if (a.N == 0) return OJ_OK;
    a.loss = oj_cuda_ptr(loss);
    a.lse = lse ? oj_cuda_ptr(lse) : NULL;
    a.sdt = (int)loss->dtype;
    a.ses = (int)oj_dtype_size(loss->dtype);
    a.ignore = ignore_index;
    a.eps = label_smoothing;
    a.flags = oj_cuda_state_of(eng)->flags;
    if (reset_flags(eng, op) != OJ_OK) return oj_last_status(eng);
    k_cross_entropy_forward<<<line_blocks(a.N), line_threads(a.V)>>>(a);
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
    const oj_tensor *chk[4] = {dlogits, logits, targets, lse};
    for (int i = 0; i < 4; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    ce_args a;
    ce_fill(&a, logits, targets);
    a.N = logits->shape[0];
    if (a.N == 0 || a.V == 0) return OJ_OK;
    a.lse_in = oj_cuda_ptr(lse);
    a.sdt = (int)lse->dtype;
    a.ses = (int)oj_dtype_size(lse->dtype);
    a.dloss = oj_cuda_ptr(dloss);
    a.gdt = (int)dloss->dtype;
    a.ges = (int)oj_dtype_size(dloss->dtype);
    a.gstride = dloss->rank ? dloss->stride[0] : 0;
    a.dx = oj_cuda_ptr(dlogits);
    a.ddt = (int)dlogits->dtype;
    a.des = (int)oj_dtype_size(dlogits->dtype);
    a.ignore = ignore_index;
    a.eps = label_smoothing;
    a.scale = scale;
    k_cross_entropy_backward<<<line_blocks(a.N), line_threads(a.V)>>>(a);
    return oj_cuda_check(eng, "cross_entropy_backward");
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
    *n_valid = 0;
    if (a.N == 0) return OJ_OK;
    a.loss = oj_cuda_ptr(loss);
    a.sdt = (int)loss->dtype;
    a.ses = (int)oj_dtype_size(loss->dtype);
    a.ignore = ignore_index;
    a.flags = oj_cuda_state_of(eng)->flags;
    if (reset_flags(eng, op) != OJ_OK) return oj_last_status(eng);
    k_nll_forward<<<oj_cuda_blocks(a.N), OJ_CUDA_THREADS>>>(a);
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
    cudaError_t e = bytes ? cudaMemset(oj_cuda_ptr(dlogp), 0, bytes) : cudaSuccess;
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
    k_nll_backward<<<oj_cuda_blocks(a.N), OJ_CUDA_THREADS>>>(a);
    return oj_cuda_check(eng, "nll_loss_backward");
}
