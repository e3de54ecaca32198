/* CPU im2col / col2im (torch's unfold / fold): the window gathering that
 * turns a convolution into a matrix multiply. Contracts in backend.h. */
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

/* Input position of kernel tap t at output position o (may be outside). */
static inline int64_t tap(int64_t o, int64_t t, int64_t stride, int64_t pad, int64_t dil) {
    return o * stride - pad + t * dil;
}

oj_status oj_cpu_im2col(oj_engine *eng, oj_tensor *cols, const oj_tensor *x,
                        const oj_im2col_args *a, double pad_value) {
    (void)eng;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t L = a->oh * a->ow;
    size_t es = oj_dtype_size(x->dtype);
    unsigned char padv[8];
    oj__store(padv, x->dtype, pad_value);
    const char *xb = (const char *)x->storage->data + x->offset;
    char *cb = (char *)cols->storage->data + cols->offset;
    const int64_t *xs = x->stride;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < a->kh; i++)
                for (int64_t j = 0; j < a->kw; j++) {
                    int64_t row = (c * a->kh + i) * a->kw + j;
                    char *dst = cb + ((n * C * a->kh * a->kw + row) * L) * (int64_t)es;
                    for (int64_t oh = 0; oh < a->oh; oh++) {
                        int64_t ih = tap(oh, i, a->sh, a->ph, a->dh);
                        bool hin = ih >= 0 && ih < H;
                        for (int64_t ow = 0; ow < a->ow; ow++, dst += es) {
                            int64_t iw = tap(ow, j, a->sw, a->pw, a->dw);
                            if (hin && iw >= 0 && iw < W)
                                memcpy(dst, xb + (n * xs[0] + c * xs[1] + ih * xs[2] + iw * xs[3]) *
                                                     (int64_t)es, es);
                            else
                                memcpy(dst, padv, es);
                        }
                    }
                }
    return OJ_OK;
}

oj_status oj_cpu_col2im(oj_engine *eng, oj_tensor *x, const oj_tensor *cols,
                        const oj_im2col_args *a) {
    (void)eng;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    size_t es = oj_dtype_size(x->dtype);
    oj_dtype dt = x->dtype;
    char *xb = (char *)x->storage->data + x->offset;
    const char *cb = (const char *)cols->storage->data + cols->offset;
    const int64_t *cs = cols->stride;
    memset(xb, 0, (size_t)(N * C * H * W) * es);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < a->kh; i++)
                for (int64_t j = 0; j < a->kw; j++) {
                    int64_t row = (c * a->kh + i) * a->kw + j;
                    for (int64_t oh = 0; oh < a->oh; oh++) {
                        int64_t ih = tap(oh, i, a->sh, a->ph, a->dh);
                        if (ih < 0 || ih >= H) continue;
                        for (int64_t ow = 0; ow < a->ow; ow++) {
                            int64_t iw = tap(ow, j, a->sw, a->pw, a->dw);
                            if (iw < 0 || iw >= W) continue;
                            const char *s = cb + (n * cs[0] + row * cs[1] + (oh * a->ow + ow) * cs[2]) *
                                                     (int64_t)es;
                            char *d = xb + (((n * C + c) * H + ih) * W + iw) * (int64_t)es;
                            if (dt == OJ_F32)
                                *(float *)d += *(const float *)s;
                            else if (dt == OJ_F64)
                                *(double *)d += *(const double *)s;
                            else
                                oj__store(d, dt, oj__load(d, dt) + oj__load(s, dt));
                        }
                    }
                }
    return OJ_OK;
}
