/* CUDA layer norm (Ba et al. 2016) and RMS norm (Zhang & Sennrich 2019)
 * over the last dim, forward and backward, computed in double like the
 * CPU kernels (cpu_nn_norm.c). One block per row; row sums reduce in a
 * fixed tree. Weight/bias gradients sum over rows in fixed chunks of rows
 * (partials per chunk, then the chunks in order), so every result depends
 * on the shape only: deterministic in every mode. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

struct norm_args {
    const char *x, *w, *b, *dy, *mean, *rstd;
    char *out, *mean_out, *rstd_out, *dx;
    int xdt, wdt, bdt, gdt, sdt, odt, dxdt, xes, wes, bes, ges, ses, oes, dxes;
    int64_t N, C;
    double eps;
    bool rms;
};

static int esz(const oj_tensor *t) { return t ? (int)oj_dtype_size(t->dtype) : 0; }

static int row_threads(int64_t C) {
    int t = 32;
    while (t < 256 && t < C) t *= 2;
    return t;
}

__device__ static __forceinline__ double wval(const norm_args &a, int64_t c) {
    return a.w ? oj_cu_ld(a.w + c * a.wes, a.wdt) : 1.0;
}
__device__ static __forceinline__ double bval(const norm_args &a, int64_t c) {
    return a.b ? oj_cu_ld(a.b + c * a.bes, a.bdt) : 0.0;
}

// x (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
__global__ void k_norm_forward(norm_args a) {
    __shared__ double sh[32];
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        const char *xr = a.x + n * a.C * a.xes;
        double m = 0.0, rs;
        if (a.rms) {
            double ss = 0.0;
            for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
                double v = oj_cu_ld(xr + c * a.xes, a.xdt);
                ss += v * v;
            }
            ss = oj_cu_block_sum(ss, sh);
            rs = 1.0 / sqrt(ss / (double)a.C + a.eps);
        } else {
            double s = 0.0;
            for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) s += oj_cu_ld(xr + c * a.xes, a.xdt);
            m = oj_cu_block_sum(s, sh) / (double)a.C;
            double v2 = 0.0;
            for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
                double d = oj_cu_ld(xr + c * a.xes, a.xdt) - m;
                v2 += d * d;
            }
            double var = oj_cu_block_sum(v2, sh) / (double)a.C;
            rs = 1.0 / sqrt(var + a.eps);
        }
        char *orow = a.out + n * a.C * a.oes;
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
            double v = oj_cu_ld(xr + c * a.xes, a.xdt);
            double y = a.rms ? v * rs * wval(a, c) : (v - m) * rs * wval(a, c) + bval(a, c);
            oj_cu_st(orow + c * a.oes, a.odt, y);
        }
        if (threadIdx.x == 0) {
            if (a.mean_out) oj_cu_st(a.mean_out + n * a.ses, a.sdt, m);
            if (a.rstd_out) oj_cu_st(a.rstd_out + n * a.ses, a.sdt, rs);
        }
    }
}

// dy (N,C), x (N,C), mean (N), rstd (N), weight (C) -> dx (N,C)
__global__ void k_norm_backward_dx(norm_args a) {
    __shared__ double sh[32];
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        const char *xr = a.x + n * a.C * a.xes, *gr = a.dy + n * a.C * a.ges;
        double m = a.rms ? 0.0 : oj_cu_ld(a.mean + n * a.ses, a.sdt);
        double rs = oj_cu_ld(a.rstd + n * a.ses, a.sdt);
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
            double xh = (oj_cu_ld(xr + c * a.xes, a.xdt) - m) * rs;
            double g = oj_cu_ld(gr + c * a.ges, a.gdt) * wval(a, c);
            sg += g;
            sgx += g * xh;
        }
        sg = a.rms ? 0.0 : oj_cu_block_sum(sg, sh) / (double)a.C;
        sgx = oj_cu_block_sum(sgx, sh) / (double)a.C;
        char *dr = a.dx + n * a.C * a.dxes;
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
            double xh = (oj_cu_ld(xr + c * a.xes, a.xdt) - m) * rs;
            double g = oj_cu_ld(gr + c * a.ges, a.gdt) * wval(a, c);
            oj_cu_st(dr + c * a.dxes, a.dxdt, rs * (g - sg - xh * sgx));
        }
    }
}

/* part [nchunks, 2, C]: sums over rows of chunk ch of dy * xhat and dy. */
__global__ void k_norm_wgrad_partial(norm_args a, int64_t chunk, double *part) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t ch = blockIdx.y;
    if (c >= a.C) return;
    int64_t n0 = ch * chunk, n1 = n0 + chunk < a.N ? n0 + chunk : a.N;
    double sw = 0.0, sb = 0.0;
    for (int64_t n = n0; n < n1; n++) {
        double m = a.rms ? 0.0 : oj_cu_ld(a.mean + n * a.ses, a.sdt);
        double rs = oj_cu_ld(a.rstd + n * a.ses, a.sdt);
        double xh = (oj_cu_ld(a.x + (n * a.C + c) * a.xes, a.xdt) - m) * rs;
        double g = oj_cu_ld(a.dy + (n * a.C + c) * a.ges, a.gdt);
        sw += g * xh;
        sb += g;
    }
    part[(ch * 2) * a.C + c] = sw;
    part[(ch * 2 + 1) * a.C + c] = sb;
}

__global__ void k_norm_wgrad_final(const double *part, int64_t nchunks, int64_t C, char *dw,
                                   int dwdt, char *db, int dbdt) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sw = 0.0, sb = 0.0;
    for (int64_t ch = 0; ch < nchunks; ch++) {
        sw += part[(ch * 2) * C + c];
        sb += part[(ch * 2 + 1) * C + c];
    }
    int wes = dwdt == OJ_F64 ? 8 : (dwdt == OJ_F32 ? 4 : 2);
    int bes = dbdt == OJ_F64 ? 8 : (dbdt == OJ_F32 ? 4 : 2);
    if (dw) oj_cu_st(dw + c * wes, dwdt, sw);
    if (db) oj_cu_st(db + c * bes, dbdt, sb);
}

static void rows_of(const oj_tensor *x, int64_t *N, int64_t *C) {
    *C = x->rank ? x->shape[x->rank - 1] : 1;
    *N = *C ? oj_cuda_numel(x) / *C : 0;
}

static unsigned row_blocks(int64_t N) { return (unsigned)(N < (1 << 20) ? N : (1 << 20)); }

static oj_status forward(oj_engine *eng, const char *op, bool rms, oj_tensor *out,
                         oj_tensor *mean, oj_tensor *rstd, const oj_tensor *x,
                         const oj_tensor *weight, const oj_tensor *bias, double eps) {
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[6] = {out, mean, rstd, x, weight, bias};
    for (int i = 0; i < 6; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    norm_args a;
    memset(&a, 0, sizeof a);
    rows_of(x, &a.N, &a.C);
    if (a.N == 0) return OJ_OK;
    a.x = oj_cuda_ptr(x);
    a.xdt = (int)x->dtype;
    a.xes = esz(x);
    a.w = weight ? oj_cuda_ptr(weight) : NULL;
    a.wdt = weight ? (int)weight->dtype : 0;
    a.wes = esz(weight);
    a.b = bias ? oj_cuda_ptr(bias) : NULL;
    a.bdt = bias ? (int)bias->dtype : 0;
    a.bes = esz(bias);
    a.out = oj_cuda_ptr(out);
    a.odt = (int)out->dtype;
    a.oes = esz(out);
    const oj_tensor *stat = mean ? mean : rstd;
    a.mean_out = mean ? oj_cuda_ptr(mean) : NULL;
    a.rstd_out = rstd ? oj_cuda_ptr(rstd) : NULL;
    a.sdt = stat ? (int)stat->dtype : 0;
    a.ses = esz(stat);
    a.eps = eps;
    a.rms = rms;
    k_norm_forward<<<row_blocks(a.N), row_threads(a.C)>>>(a);
    return oj_cuda_check(eng, rms ? "rms_norm_forward" : "layer_norm_forward");
}

static oj_status backward(oj_engine *eng, const char *op, bool rms, oj_tensor *dx,
                          oj_tensor *dweight, oj_tensor *dbias, const oj_tensor *dy,
                          const oj_tensor *x, const oj_tensor *mean, const oj_tensor *rstd,
                          const oj_tensor *weight) {
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *chk[8] = {dx, dweight, dbias, dy, x, mean, rstd, weight};
    for (int i = 0; i < 8; i++)
        if (oj_cuda_need_contig(eng, chk[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    norm_args a;
    memset(&a, 0, sizeof a);
    rows_of(x, &a.N, &a.C);
    a.x = oj_cuda_ptr(x);
    a.xdt = (int)x->dtype;
    a.xes = esz(x);
    a.dy = oj_cuda_ptr(dy);
    a.gdt = (int)dy->dtype;
    a.ges = esz(dy);
    a.w = weight ? oj_cuda_ptr(weight) : NULL;
    a.wdt = weight ? (int)weight->dtype : 0;
    a.wes = esz(weight);
    a.mean = mean ? oj_cuda_ptr(mean) : NULL;
    a.rstd = oj_cuda_ptr(rstd);
    a.sdt = (int)rstd->dtype;
    a.ses = esz(rstd);
    a.rms = rms;
    const char *kname = rms ? "rms_norm_backward" : "layer_norm_backward";
    if (dx && a.N > 0) {
        a.dx = oj_cuda_ptr(dx);
        a.dxdt = (int)dx->dtype;
        a.dxes = esz(dx);
        k_norm_backward_dx<<<row_blocks(a.N), row_threads(a.C)>>>(a);
        if (oj_cuda_check(eng, kname) != OJ_OK) return oj_last_status(eng);
    }
    if ((dweight == NULL && dbias == NULL) || a.C == 0) return OJ_OK;
    int64_t chunk = 64;
    while ((a.N + chunk - 1) / chunk > 65535) chunk *= 2;
    int64_t nchunks = (a.N + chunk - 1) / chunk;
    if (nchunks < 1) nchunks = 1;
    oj_storage *hold = NULL;
    double *part = (double *)oj_cuda_scratch(eng, (size_t)(nchunks * 2 * a.C) * sizeof(double), op,
                                             &hold);
    if (part == NULL) return oj_last_status(eng);
    oj_status st = OJ_OK;
    if (a.N > 0) {
        dim3 grid((unsigned)((a.C + 255) / 256), (unsigned)nchunks);
        k_norm_wgrad_partial<<<grid, 256>>>(a, chunk, part);
        st = oj_cuda_check(eng, kname);
    } else {
        cudaError_t e = cudaMemset(part, 0, (size_t)(2 * a.C) * sizeof(double));
        if (e != cudaSuccess) st = oj_cuda_fail(eng, e, kname);
    }
    if (st == OJ_OK) {
        k_norm_wgrad_final<<<(unsigned)((a.C + 255) / 256), 256>>>(
            part, nchunks, a.C, dweight ? oj_cuda_ptr(dweight) : NULL,
            dweight ? (int)dweight->dtype : 0, dbias ? oj_cuda_ptr(dbias) : NULL,
            dbias ? (int)dbias->dtype : 0);
        st = oj_cuda_check(eng, kname);
    }
    oj__storage_release(hold);
    return st;
}

oj_status oj_cuda_layer_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *mean,
                                     oj_tensor *rstd, const oj_tensor *x, const oj_tensor *weight,
                                     const oj_tensor *bias, double eps) {
    return forward(eng, "layer_norm", false, out, mean, rstd, x, weight, bias, eps);
}

oj_status oj_cuda_layer_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                      oj_tensor *dbias, const oj_tensor *dy, const oj_tensor *x,
                                      const oj_tensor *mean, const oj_tensor *rstd,
                                      const oj_tensor *weight) {
    return backward(eng, "layer_norm", false, dx, dweight, dbias, dy, x, mean, rstd, weight);
}

oj_status oj_cuda_rms_norm_forward(oj_engine *eng, oj_tensor *out, oj_tensor *rstd,
                                   const oj_tensor *x, const oj_tensor *weight, double eps) {
    return forward(eng, "rms_norm", true, out, NULL, rstd, x, weight, NULL, eps);
}

oj_status oj_cuda_rms_norm_backward(oj_engine *eng, oj_tensor *dx, oj_tensor *dweight,
                                    const oj_tensor *dy, const oj_tensor *x, const oj_tensor *rstd,
                                    const oj_tensor *weight) {
    return backward(eng, "rms_norm", true, dx, dweight, NULL, dy, x, NULL, rstd, weight);
}
