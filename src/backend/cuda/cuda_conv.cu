/* CUDA im2col / col2im (torch's unfold / fold), contracts in backend.h,
 * reference cpu_conv.c. col2im runs one thread per x element and adds its
 * taps in increasing (i, j) order, the order the CPU adds them, rounding to
 * the dtype after each add as the CPU does: the CPU's bits, no atomics. */
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

struct conv_args {
    int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    int64_t xs[4], cs[3]; /* element strides */
    const char *src;
    char *dst;
    int dt, es;
    unsigned char pad[8];
};

// x (N,C,H,W) any strides -> cols (N, C*kh*kw, OH*OW) contiguous
__global__ void k_im2col(conv_args a) {
    int64_t L = a.oh * a.ow, rows = a.C * a.kh * a.kw, n_el = a.N * rows * L;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_el;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t l = e % L, t = e / L, row = t % rows, n = t / rows;
        int64_t j = row % a.kw, i = (row / a.kw) % a.kh, c = row / (a.kw * a.kh);
        int64_t oh = l / a.ow, ow = l % a.ow;
        int64_t ih = oh * a.sh - a.ph + i * a.dh, iw = ow * a.sw - a.pw + j * a.dw;
        const char *s = (const char *)a.pad;
        if (ih >= 0 && ih < a.H && iw >= 0 && iw < a.W)
            s = a.src + (n * a.xs[0] + c * a.xs[1] + ih * a.xs[2] + iw * a.xs[3]) * a.es;
        char *d = a.dst + e * a.es;
        switch (a.es) {
        case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
        case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
        default: *(unsigned long long *)d = *(const unsigned long long *)s; break;
        }
    }
}

oj_status oj_cuda_im2col(oj_engine *eng, oj_tensor *cols, const oj_tensor *x,
                         const oj_im2col_args *g, double pad_value) {
    if (oj_cuda_begin(eng, "im2col") != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, cols, "im2col", "cols") != OJ_OK) return oj_last_status(eng);
    conv_args a;
    memset(&a, 0, sizeof a);
    a.N = x->shape[0], a.C = x->shape[1], a.H = x->shape[2], a.W = x->shape[3];
    a.kh = g->kh, a.kw = g->kw, a.sh = g->sh, a.sw = g->sw, a.ph = g->ph, a.pw = g->pw;
    a.dh = g->dh, a.dw = g->dw, a.oh = g->oh, a.ow = g->ow;
    for (int d = 0; d < 4; d++) a.xs[d] = x->stride[d];
    a.src = oj_cuda_ptr(x);
    a.dst = oj_cuda_ptr(cols);
    a.dt = (int)x->dtype;
    a.es = (int)oj_dtype_size(x->dtype);
    oj__store(a.pad, x->dtype, pad_value);
    int64_t n = a.N * a.C * a.kh * a.kw * a.oh * a.ow;
    if (n == 0) return OJ_OK;
    k_im2col<<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "im2col");
}

// cols (N, C*kh*kw, OH*OW) any strides -> x (N,C,H,W) contiguous, overwritten
__global__ void k_col2im(conv_args a) {
    int64_t n_el = a.N * a.C * a.H * a.W;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_el;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = e % a.W, t = e / a.W, ih = t % a.H;
        t /= a.H;
        int64_t c = t % a.C, n = t / a.C;
        float accf = 0.0f;
        double accd = 0.0;
        for (int64_t i = 0; i < a.kh; i++) {
            int64_t hnum = ih + a.ph - i * a.dh; /* = oh * sh */
            if (hnum < 0 || hnum % a.sh != 0) continue;
            int64_t oh = hnum / a.sh;
            if (oh >= a.oh) continue;
            for (int64_t j = 0; j < a.kw; j++) {
                int64_t wnum = iw + a.pw - j * a.dw;
                if (wnum < 0 || wnum % a.sw != 0) continue;
                int64_t ow = wnum / a.sw;
                if (ow >= a.ow) continue;
                int64_t row = (c * a.kh + i) * a.kw + j;
                const char *s =
                    a.src + (n * a.cs[0] + row * a.cs[1] + (oh * a.ow + ow) * a.cs[2]) * a.es;
                if (a.dt == OJ_F32) {
                    accf = __fadd_rn(accf, *(const float *)s);
                } else if (a.dt == OJ_F64) {
                    accd = __dadd_rn(accd, *(const double *)s);
                } else { /* bf16/f16: the CPU rounds to the dtype after each add */
                    unsigned char tmp[8];
                    oj_cu_st((char *)tmp, a.dt, __dadd_rn((double)accf, oj_cu_ld(s, a.dt)));
                    accf = (float)oj_cu_ld((const char *)tmp, a.dt);
                }
            }
        }
        char *d = a.dst + e * a.es;
        if (a.dt == OJ_F64)
            *(double *)d = accd;
        else
            oj_cu_stf(d, a.dt, accf);
    }
}

oj_status oj_cuda_col2im(oj_engine *eng, oj_tensor *x, const oj_tensor *cols,
                         const oj_im2col_args *g) {
    if (oj_cuda_begin(eng, "col2im") != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, x, "col2im", "x") != OJ_OK) return oj_last_status(eng);
    conv_args a;
    memset(&a, 0, sizeof a);
    a.N = x->shape[0], a.C = x->shape[1], a.H = x->shape[2], a.W = x->shape[3];
    a.kh = g->kh, a.kw = g->kw, a.sh = g->sh, a.sw = g->sw, a.ph = g->ph, a.pw = g->pw;
    a.dh = g->dh, a.dw = g->dw, a.oh = g->oh, a.ow = g->ow;
    for (int d = 0; d < 3; d++) a.cs[d] = cols->stride[d];
    a.src = oj_cuda_ptr(cols);
    a.dst = oj_cuda_ptr(x);
    a.dt = (int)x->dtype;
    a.es = (int)oj_dtype_size(x->dtype);
    int64_t n = a.N * a.C * a.H * a.W;
    if (n == 0) return OJ_OK;
    if (a.sh <= 0 || a.sw <= 0)
        return oj_set_error(eng, OJ_ERR_INTERNAL, "col2im: stride %lld x %lld is not positive",
                            (long long)a.sh, (long long)a.sw);
    k_col2im<<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(a);
    return oj_cuda_check(eng, "col2im");
}
