/* Convolution and pooling on NCHW (NCL for 1-D): unfold (im2col) with a
 * col2im backward, and compositions of it with matmul, reductions and
 * index ops, so autograd and every backend come from the parts:
 *   conv2d          = matmul(weight rows, unfold(x)) + bias
 *   max_pool2d      = max over each unfolded window (-inf padding); the
 *                     gradient goes to the first maximum, as torch
 *   avg_pool2d      = mean over each unfolded window
 *   adaptive_avg    = P_h @ x @ P_w^T with averaging matrices
 *   upsample        = index_select with torch's nearest indices
 *   batch_norm      = the normalisation written out with ops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

#define SHAPE(t, buf) oj__shape_fmt(buf, sizeof buf, (t)->rank, (t)->shape)

static bool float_dtype(oj_engine *eng, const char *op, const oj_tensor *t, const char *what) {
    if (oj_dtype_is_float(t->dtype)) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s must be a float tensor, got %s", op, what,
                 oj_dtype_name(t->dtype));
    return false;
}

static bool rank_is(oj_engine *eng, const char *op, const oj_tensor *t, int rank,
                    const char *what, const char *layout) {
    char b[160];
    if (t->rank == rank) return true;
    oj_set_error(eng, OJ_ERR_SHAPE, "%s: %s must be %s (rank %d), got %s", op, what, layout, rank,
                 SHAPE(t, b));
    return false;
}

/* Window geometry for input [.., H, W]; false with an error naming op. */
static bool geometry(oj_engine *eng, const char *op, const oj_tensor *x, const int64_t *kernel,
                     const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                     oj_im2col_args *a) {
    char b[160];
    int64_t H = x->shape[x->rank - 2], W = x->shape[x->rank - 1];
    a->kh = kernel[0], a->kw = kernel[1];
    a->sh = stride ? stride[0] : 1, a->sw = stride ? stride[1] : 1;
    a->ph = padding ? padding[0] : 0, a->pw = padding ? padding[1] : 0;
    a->dh = dilation ? dilation[0] : 1, a->dw = dilation ? dilation[1] : 1;
    if (a->kh <= 0 || a->kw <= 0 || a->sh <= 0 || a->sw <= 0 || a->dh <= 0 || a->dw <= 0 ||
        a->ph < 0 || a->pw < 0 || a->kh > INT32_MAX || a->kw > INT32_MAX || a->sh > INT32_MAX ||
        a->sw > INT32_MAX || a->dh > INT32_MAX || a->dw > INT32_MAX || a->ph > INT32_MAX ||
        a->pw > INT32_MAX) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "%s: kernel (%lld, %lld), stride (%lld, %lld) and dilation (%lld, %lld) "
                     "must be positive and padding (%lld, %lld) non-negative",
                     op, (long long)a->kh, (long long)a->kw, (long long)a->sh, (long long)a->sw,
                     (long long)a->dh, (long long)a->dw, (long long)a->ph, (long long)a->pw);
        return false;
    }
    int64_t eh = a->dh * (a->kh - 1) + 1, ew = a->dw * (a->kw - 1) + 1;
    int64_t nh = H + 2 * a->ph - eh, nw = W + 2 * a->pw - ew;
    if (nh < 0 || nw < 0) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: input %s padded by (%lld, %lld) is smaller than the kernel's extent "
                     "(%lld, %lld)",
                     op, SHAPE(x, b), (long long)a->ph, (long long)a->pw, (long long)eh,
                     (long long)ew);
        return false;
    }
    a->oh = nh / a->sh + 1;
    a->ow = nw / a->sw + 1;
    return true;
}

/* ---------------------------------------------------------------- unfold */

/* x [N, C, H, W] made contiguous in g's dtype from cols' gradient. */
static oj_tensor *col2im_new(oj_engine *eng, const char *op, const int64_t *xshape,
                             const oj_tensor *cols, const oj_im2col_args *a) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_im2col_args *) =
        OJ_KERNEL(eng, col2im, op);
    if (k == NULL) return NULL;
    oj_tensor *dx = oj__tensor_alloc(eng, 4, xshape, cols->dtype, op);
    if (dx && !oj__kernel_ok(eng, k(eng, dx, cols, a), op)) {
        oj_release(dx);
        return NULL;
    }
    return dx;
}

static void args_to_node(oj_node *nd, const oj_im2col_args *a) {
    int64_t v[10] = {a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->dh, a->dw, a->oh, a->ow};
    memcpy(nd->i, v, sizeof v);
}

static oj_im2col_args args_of_node(const oj_node *nd) {
    oj_im2col_args a = {nd->i[0], nd->i[1], nd->i[2], nd->i[3], nd->i[4],
                        nd->i[5], nd->i[6], nd->i[7], nd->i[8], nd->i[9]};
    return a;
}

static oj_status unfold_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_im2col_args a = args_of_node(n);
    gi[0] = col2im_new(n->eng, n->op, n->in[0].shape, go[0], &a);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

/* cols [N, C*kh*kw, OH*OW] of a 4-D x; records a node when `record`. */
static oj_tensor *unfold_raw(oj_engine *eng, const char *op, oj_tensor *x,
                             const oj_im2col_args *a, double pad_value, bool record) {
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_im2col_args *, double) =
        OJ_KERNEL(eng, im2col, op);
    if (k == NULL) return NULL;
    int64_t shape[3] = {x->shape[0], x->shape[1] * a->kh * a->kw, a->oh * a->ow};
    oj_tensor *cols = oj__tensor_alloc(eng, 3, shape, x->dtype, op);
    if (cols == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, cols, x, a, pad_value), op)) {
        oj_release(cols);
        return NULL;
    }
    if (record && oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, op, unfold_backward, 1, x);
        if (nd) {
            args_to_node(nd, a);
            oj__node_finish(nd, 1, &cols);
        }
    }
    return cols;
}

oj_tensor *oj_unfold(oj_tensor *x, const int64_t kernel[2], const int64_t dilation[2],
                     const int64_t padding[2], const int64_t stride[2]) {
    oj_engine *eng = oj__ops_engine1("unfold", x);
    if (eng == NULL) return NULL;
    if (kernel == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "unfold: kernel size is required");
        return NULL;
    }
    oj_im2col_args a;
    if (!rank_is(eng, "unfold", x, 4, "x", "[N, C, H, W]") ||
        !geometry(eng, "unfold", x, kernel, stride, padding, dilation, &a))
        return NULL;
    return unfold_raw(eng, "unfold", x, &a, 0.0, true);
}

/* ---------------------------------------------------------------- conv */

oj_tensor *oj_conv2d(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, const int64_t stride[2],
                     const int64_t padding[2], const int64_t dilation[2], int groups) {
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj_conv2d(ac[0], ac[1], ac[2], stride, padding, dilation, groups));
    oj_tensor *in[3] = {x, weight, bias};
    oj_engine *eng = oj__ops_engine("conv2d", bias ? 3 : 2, in);
    if (eng == NULL) return NULL;
    char b1[160], b2[160];
    if (!rank_is(eng, "conv2d", x, 4, "x", "[N, C, H, W]") ||
        !rank_is(eng, "conv2d", weight, 4, "weight", "[O, C/groups, kh, kw]") ||
        !float_dtype(eng, "conv2d", x, "x"))
        return NULL;
    if (weight->dtype != x->dtype || (bias && bias->dtype != x->dtype)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "conv2d: x (%s), weight (%s) and bias (%s) must share "
                     "one dtype", oj_dtype_name(x->dtype), oj_dtype_name(weight->dtype),
                     bias ? oj_dtype_name(bias->dtype) : "none");
        return NULL;
    }
    int64_t N = x->shape[0], C = x->shape[1], O = weight->shape[0];
    if (groups <= 0 || C % groups != 0 || O % groups != 0 || weight->shape[1] * groups != C) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "conv2d: weight %s does not fit x %s with groups %d (need C and O "
                     "divisible by groups and weight [O, C/groups, kh, kw])",
                     SHAPE(weight, b1), SHAPE(x, b2), groups);
        return NULL;
    }
    if (bias && (bias->rank != 1 || bias->shape[0] != O)) {
        oj_set_error(eng, OJ_ERR_SHAPE, "conv2d: bias %s must be [%lld] for weight %s",
                     SHAPE(bias, b1), (long long)O, SHAPE(weight, b2));
        return NULL;
    }
    oj_im2col_args a;
    if (!geometry(eng, "conv2d", x, weight->shape + 2, stride, padding, dilation, &a)) return NULL;
    int64_t g = groups, K = C / g * a.kh * a.kw, L = a.oh * a.ow;
    /* cols [N, g, K, L]; weight [g, O/g, K]; out [N, g, O/g, L] */
    oj_tensor *cols = unfold_raw(eng, "conv2d", x, &a, 0.0, true);
    oj_tensor *cg = cols ? oj_reshape(cols, 4, (const int64_t[]){N, g, K, L}) : NULL;
    oj_tensor *wg = cg ? oj_reshape(weight, 3, (const int64_t[]){g, O / g, K}) : NULL;
    oj_tensor *y = wg ? oj_matmul(wg, cg) : NULL;
    oj_tensor *yb = y ? oj_reshape(y, 3, (const int64_t[]){N, O, L}) : NULL;
    oj_tensor *bv = NULL, *ys = NULL;
    if (yb && bias) {
        bv = oj_reshape(bias, 2, (const int64_t[]){O, 1});
        ys = bv ? oj_add(yb, bv) : NULL;
    } else if (yb) {
        ys = oj_retain(yb);
    }
    oj_tensor *out = ys ? oj_reshape(ys, 4, (const int64_t[]){N, O, a.oh, a.ow}) : NULL;
    oj_release(cols);
    oj_release(cg);
    oj_release(wg);
    oj_release(y);
    oj_release(yb);
    oj_release(bv);
    oj_release(ys);
    return out;
}

oj_tensor *oj_conv1d(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, int64_t stride,
                     int64_t padding, int64_t dilation, int groups) {
    oj_tensor *ac_in[3] = {x, weight, bias};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 3, ac_in, oj_conv1d(ac[0], ac[1], ac[2], stride, padding, dilation, groups));
    oj_tensor *in[3] = {x, weight, bias};
    oj_engine *eng = oj__ops_engine("conv1d", bias ? 3 : 2, in);
    if (eng == NULL) return NULL;
    if (!rank_is(eng, "conv1d", x, 3, "x", "[N, C, L]") ||
        !rank_is(eng, "conv1d", weight, 3, "weight", "[O, C/groups, K]"))
        return NULL;
    int64_t s[2] = {1, stride}, p[2] = {0, padding}, d[2] = {1, dilation};
    oj_tensor *x4 = oj_unsqueeze(x, 2), *w4 = oj_unsqueeze(weight, 2);
    oj_tensor *y = x4 && w4 ? oj_conv2d(x4, w4, bias, s, p, d, groups) : NULL;
    oj_tensor *out = y ? oj_squeeze(y, 2) : NULL;
    oj_release(x4);
    oj_release(w4);
    oj_release(y);
    return out;
}

/* ---------------------------------------------------------------- pooling */

/* x as [N, C, H, W]: rank 3 [C, H, W] is viewed with N = 1 (as torch). */
static oj_tensor *as_nchw(oj_engine *eng, const char *op, oj_tensor *x) {
    char b[160];
    if (x->rank == 4) return oj_retain(x);
    if (x->rank == 3) return oj_unsqueeze(x, 0);
    oj_set_error(eng, OJ_ERR_SHAPE, "%s: x must be [N, C, H, W] or [C, H, W], got %s", op,
                 SHAPE(x, b));
    return NULL;
}

/* y [N, C, oh, ow] back to x's rank. */
static oj_tensor *from_nchw(oj_tensor *x, oj_tensor *y) {
    if (y == NULL || x->rank == 4) return y;
    oj_tensor *s = oj_squeeze(y, 0);
    oj_release(y);
    return s;
}

static bool pool_padding_ok(oj_engine *eng, const char *op, const oj_im2col_args *a) {
    if (2 * a->ph <= a->kh && 2 * a->pw <= a->kw) return true;
    oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                 "%s: padding (%lld, %lld) must be at most half the kernel (%lld, %lld)", op,
                 (long long)a->ph, (long long)a->pw, (long long)a->kh, (long long)a->kw);
    return false;
}

static oj_status max_pool_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *idx = oj__node_saved(n, 0);
    if (idx == NULL) return oj_last_status(n->eng);
    oj_im2col_args a = args_of_node(n);
    const oj_edge *e = &n->in[0];
    int64_t N = e->shape[0], C = e->shape[1], KK = a.kh * a.kw, L = a.oh * a.ow;
    oj_engine *eng = n->eng;
    /* g [N, C, oh, ow] -> [N, C, 1, L] scattered at idx along the window dim */
    oj_tensor *g4 = oj_reshape(go[0], 4, (const int64_t[]){N, C, 1, L});
    oj_tensor *dcols = g4 ? oj_zeros(eng, 4, (const int64_t[]){N, C, KK, L}, go[0]->dtype) : NULL;
    oj_status (*k)(oj_engine *, oj_tensor *, int, const oj_tensor *, const oj_tensor *) =
        dcols ? OJ_KERNEL(eng, scatter_add, n->op) : NULL;
    oj_tensor *dx = NULL;
    if (k && oj__kernel_ok(eng, k(eng, dcols, 2, idx, g4), n->op)) {
        oj_tensor *d3 = oj__tensor_view(dcols, 3, (const int64_t[]){N, C * KK, L}, NULL,
                                        dcols->offset);
        dx = d3 ? col2im_new(eng, n->op, e->shape, d3, &a) : NULL;
        oj_release(d3);
    }
    oj_release(g4);
    oj_release(dcols);
    gi[0] = dx;
    return dx ? OJ_OK : oj_last_status(eng);
}

static oj_tensor *max_pool_nchw(oj_engine *eng, oj_tensor *x, const oj_im2col_args *a) {
    int64_t N = x->shape[0], C = x->shape[1], KK = a->kh * a->kw, L = a->oh * a->ow;
    oj_status (*k)(oj_engine *, oj_reduce_op, oj_tensor *, oj_tensor *, const oj_tensor *,
                   uint32_t, double) = OJ_KERNEL(eng, reduce, "max_pool2d");
    if (k == NULL) return NULL;
    oj_tensor *cols = unfold_raw(eng, "max_pool2d", x, a, -INFINITY, false);
    oj_tensor *c4 = cols ? oj__tensor_view(cols, 4, (const int64_t[]){N, C, KK, L}, NULL,
                                           cols->offset)
                         : NULL;
    const int64_t ks[4] = {N, C, 1, L};
    oj_tensor *mx = c4 ? oj__tensor_alloc(eng, 4, ks, x->dtype, "max_pool2d") : NULL;
    oj_tensor *idx = mx ? oj__tensor_alloc(eng, 4, ks, OJ_I64, "max_pool2d") : NULL;
    oj_tensor *out = NULL;
    if (idx && oj__kernel_ok(eng, k(eng, OJ_RED_MAX, mx, idx, c4, 1u << 2, 0), "max_pool2d"))
        out = oj__tensor_view(mx, 4, (const int64_t[]){N, C, a->oh, a->ow}, NULL, mx->offset);
    if (out) {
        oj_node *nd = oj__node_begin(eng, "max_pool2d", max_pool_backward, 1, x);
        if (nd) {
            args_to_node(nd, a);
            oj__node_save(nd, idx);
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(cols);
    oj_release(c4);
    oj_release(mx);
    oj_release(idx);
    return out;
}

oj_tensor *oj_max_pool2d(oj_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2]) {
    oj_engine *eng = oj__ops_engine1("max_pool2d", x);
    if (eng == NULL) return NULL;
    if (kernel == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "max_pool2d: kernel size is required");
        return NULL;
    }
    if (!float_dtype(eng, "max_pool2d", x, "x")) return NULL;
    oj_tensor *x4 = as_nchw(eng, "max_pool2d", x);
    if (x4 == NULL) return NULL;
    oj_im2col_args a;
    oj_tensor *y = NULL;
    if (geometry(eng, "max_pool2d", x4, kernel, stride ? stride : kernel, padding, NULL, &a) &&
        pool_padding_ok(eng, "max_pool2d", &a))
        y = max_pool_nchw(eng, x4, &a);
    oj_release(x4);
    return from_nchw(x, y);
}

oj_tensor *oj_avg_pool2d(oj_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2], bool count_include_pad) {
    oj_engine *eng = oj__ops_engine1("avg_pool2d", x);
    if (eng == NULL) return NULL;
    if (kernel == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "avg_pool2d: kernel size is required");
        return NULL;
    }
    if (!float_dtype(eng, "avg_pool2d", x, "x")) return NULL;
    oj_tensor *x4 = as_nchw(eng, "avg_pool2d", x);
    if (x4 == NULL) return NULL;
    oj_im2col_args a;
    if (!geometry(eng, "avg_pool2d", x4, kernel, stride ? stride : kernel, padding, NULL, &a) ||
        !pool_padding_ok(eng, "avg_pool2d", &a)) {
        oj_release(x4);
        return NULL;
    }
    int64_t N = x4->shape[0], C = x4->shape[1], KK = a.kh * a.kw, L = a.oh * a.ow;
    oj_tensor *cols = unfold_raw(eng, "avg_pool2d", x4, &a, 0.0, true);
    oj_tensor *c4 = cols ? oj_reshape(cols, 4, (const int64_t[]){N, C, KK, L}) : NULL;
    oj_tensor *s = c4 ? oj_sum(c4, 1, (const int[]){2}, false) : NULL; /* [N, C, L] */
    oj_tensor *m = NULL;
    if (s && (count_include_pad || (a.ph == 0 && a.pw == 0))) {
        m = oj_mul_scalar(s, 1.0 / (double)KK);
    } else if (s) { /* divide by the in-bounds count of each window */
        bool prev = oj_set_grad_enabled(eng, false);
        int64_t one[4] = {1, 1, x4->shape[2], x4->shape[3]};
        oj_tensor *ones = oj_ones(eng, 4, one, x4->dtype);
        oj_tensor *oc = ones ? unfold_raw(eng, "avg_pool2d", ones, &a, 0.0, false) : NULL;
        oj_tensor *cnt = oc ? oj_sum(oc, 1, (const int[]){1}, false) : NULL; /* [1, L] */
        oj_set_grad_enabled(eng, prev);
        m = cnt ? oj_div(s, cnt) : NULL;
        oj_release(ones);
        oj_release(oc);
        oj_release(cnt);
    }
    oj_tensor *y = m ? oj_reshape(m, 4, (const int64_t[]){N, C, a.oh, a.ow}) : NULL;
    oj_release(cols);
    oj_release(c4);
    oj_release(s);
    oj_release(m);
    oj_release(x4);
    return from_nchw(x, y);
}

/* [out, in] averaging matrix of adaptive pooling: row i averages
 * [floor(i in / out), ceil((i + 1) in / out)). */
static oj_tensor *adaptive_matrix(oj_engine *eng, int64_t out, int64_t in, oj_dtype dt) {
    double *m = calloc((size_t)(out * in) + 1, sizeof *m);
    if (m == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "adaptive_avg_pool2d: out of host memory");
        return NULL;
    }
    for (int64_t i = 0; i < out; i++) {
        int64_t lo = i * in / out, hi = ((i + 1) * in + out - 1) / out;
        for (int64_t j = lo; j < hi; j++) m[i * in + j] = 1.0 / (double)(hi - lo);
    }
    int64_t shape[2] = {out, in};
    oj_tensor *t64 = oj_from_host(eng, 2, shape, OJ_F64, m, (size_t)(out * in) * sizeof *m);
    free(m);
    if (t64 == NULL || dt == OJ_F64) return t64;
    oj_tensor *t = oj_cast(t64, dt);
    oj_release(t64);
    return t;
}

oj_tensor *oj_adaptive_avg_pool2d(oj_tensor *x, int64_t out_h, int64_t out_w) {
    oj_engine *eng = oj__ops_engine1("adaptive_avg_pool2d", x);
    if (eng == NULL) return NULL;
    char b[160];
    if (!float_dtype(eng, "adaptive_avg_pool2d", x, "x")) return NULL;
    if (x->rank != 3 && x->rank != 4) {
        oj_set_error(eng, OJ_ERR_SHAPE, "adaptive_avg_pool2d: x must be [N, C, H, W] or "
                     "[C, H, W], got %s", SHAPE(x, b));
        return NULL;
    }
    int64_t H = x->shape[x->rank - 2], W = x->shape[x->rank - 1];
    if (out_h <= 0 || out_w <= 0 || H == 0 || W == 0 || out_h > ((int64_t)1 << 31) ||
        out_w > ((int64_t)1 << 31)) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "adaptive_avg_pool2d: output (%lld, %lld) must be positive and the input "
                     "%s non-empty in H and W",
                     (long long)out_h, (long long)out_w, SHAPE(x, b));
        return NULL;
    }
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *ph = adaptive_matrix(eng, out_h, H, x->dtype);
    oj_tensor *pw = ph ? adaptive_matrix(eng, out_w, W, x->dtype) : NULL;
    oj_tensor *pwt = pw ? oj_transpose(pw, 0, 1) : NULL;
    oj_set_grad_enabled(eng, prev);
    oj_tensor *t = pwt ? oj_matmul(ph, x) : NULL; /* [.., out_h, W] */
    oj_tensor *out = t ? oj_matmul(t, pwt) : NULL;
    oj_release(ph);
    oj_release(pw);
    oj_release(pwt);
    oj_release(t);
    return out;
}

/* ---------------------------------------------------------------- upsample */

/* torch's nearest source index (upsample_nearest2d without scales). */
static oj_tensor *nearest_index(oj_engine *eng, int64_t out, int64_t in) {
    int64_t *v = malloc((size_t)out * sizeof *v + 1);
    if (v == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "upsample_nearest2d: out of host memory");
        return NULL;
    }
    float scale = (float)in / (float)out;
    for (int64_t o = 0; o < out; o++) {
        if (out == in) v[o] = o;
        else if (out == 2 * in) v[o] = o >> 1;
        else {
            int64_t s = (int64_t)floorf((float)o * scale);
            v[o] = s < in - 1 ? s : in - 1;
        }
    }
    oj_tensor *t = oj_from_host(eng, 1, &out, OJ_I64, v, (size_t)out * sizeof *v);
    free(v);
    return t;
}

oj_tensor *oj_upsample_nearest2d(oj_tensor *x, int64_t out_h, int64_t out_w) {
    oj_engine *eng = oj__ops_engine1("upsample_nearest2d", x);
    if (eng == NULL) return NULL;
    char b[160];
    if (x->rank != 4 && x->rank != 3) {
        oj_set_error(eng, OJ_ERR_SHAPE, "upsample_nearest2d: x must be [N, C, H, W] or "
                     "[C, H, W], got %s", SHAPE(x, b));
        return NULL;
    }
    int64_t H = x->shape[x->rank - 2], W = x->shape[x->rank - 1];
    if (out_h <= 0 || out_w <= 0 || H == 0 || W == 0 || out_h > ((int64_t)1 << 31) ||
        out_w > ((int64_t)1 << 31)) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "upsample_nearest2d: output (%lld, %lld) must be positive and the input "
                     "%s non-empty in H and W",
                     (long long)out_h, (long long)out_w, SHAPE(x, b));
        return NULL;
    }
    oj_tensor *ih = nearest_index(eng, out_h, H);
    oj_tensor *iw = ih ? nearest_index(eng, out_w, W) : NULL;
    oj_tensor *t = iw ? oj_index_select(x, x->rank - 2, ih) : NULL;
    oj_tensor *out = t ? oj_index_select(t, x->rank - 1, iw) : NULL;
    oj_release(ih);
    oj_release(iw);
    oj_release(t);
    return out;
}

/* ---------------------------------------------------------------- batch_norm */

/* t [C] viewed as [1, C, 1, ...] for x of rank r. */
static oj_tensor *per_channel(oj_tensor *t, int r) {
    int64_t shape[OJ_MAX_RANK];
    for (int d = 0; d < r; d++) shape[d] = 1;
    shape[1] = t->shape[0];
    return oj_reshape(t, r, shape);
}

static bool channel_vec(oj_engine *eng, oj_tensor *t, int64_t C, oj_dtype dt, const char *what) {
    char b[160];
    if (t == NULL) return true;
    if (!oj__live(t)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "batch_norm: %s is a released tensor", what);
        return false;
    }
    if (t->eng != eng || t->storage->device.type != eng->device.type) {
        oj_set_error(eng, OJ_ERR_DEVICE, "batch_norm: %s is on another engine or device", what);
        return false;
    }
    if (t->rank != 1 || t->shape[0] != C) {
        oj_set_error(eng, OJ_ERR_SHAPE, "batch_norm: %s %s must be [%lld] (the channels of x)",
                     what, SHAPE(t, b), (long long)C);
        return false;
    }
    if (t->dtype != dt) {
        oj_set_error(eng, OJ_ERR_DTYPE, "batch_norm: %s is %s but x is %s", what,
                     oj_dtype_name(t->dtype), oj_dtype_name(dt));
        return false;
    }
    return true;
}

/* running = (1 - momentum) running + momentum stat (stat [1, C, 1..]). */
static oj_status update_running(oj_tensor *running, oj_tensor *stat, double momentum) {
    oj_tensor *s = oj_reshape(stat, 1, running->shape);
    oj_tensor *a = s ? oj_affine(running, 1.0 - momentum, 0.0) : NULL;
    oj_tensor *b = a ? oj_mul_scalar(s, momentum) : NULL;
    oj_tensor *c = b ? oj_add(a, b) : NULL;
    oj_status st = c ? oj_copy_(running, c) : oj_last_status(running->eng);
    oj_release(s);
    oj_release(a);
    oj_release(b);
    oj_release(c);
    return st;
}

oj_tensor *oj_batch_norm(oj_tensor *x, oj_tensor *running_mean, oj_tensor *running_var,
                         oj_tensor *weight, oj_tensor *bias, bool training, double momentum,
                         double eps) {
    oj_engine *eng = oj__ops_engine1("batch_norm", x);
    if (eng == NULL) return NULL;
    char b[160];
    if (!float_dtype(eng, "batch_norm", x, "x")) return NULL;
    if (x->rank < 2) {
        oj_set_error(eng, OJ_ERR_SHAPE, "batch_norm: x must be [N, C, ...], got %s",
                     SHAPE(x, b));
        return NULL;
    }
    int64_t C = x->shape[1];
    if (!channel_vec(eng, running_mean, C, x->dtype, "running_mean") ||
        !channel_vec(eng, running_var, C, x->dtype, "running_var") ||
        !channel_vec(eng, weight, C, x->dtype, "weight") ||
        !channel_vec(eng, bias, C, x->dtype, "bias"))
        return NULL;
    if (!(eps >= 0) || !(momentum >= 0 && momentum <= 1)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "batch_norm: eps (%g) must be >= 0 and momentum (%g) in [0, 1]", eps,
                     momentum);
        return NULL;
    }
    if ((running_mean == NULL) != (running_var == NULL)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "batch_norm: give both running_mean and running_var or neither");
        return NULL;
    }
    if (!training && running_mean == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "batch_norm: evaluation mode needs running_mean and running_var");
        return NULL;
    }
    int dims[OJ_MAX_RANK], nd = 0;
    dims[nd++] = 0;
    for (int d = 2; d < x->rank; d++) dims[nd++] = d;
    int64_t count = oj_numel(x) / (C ? C : 1);
    if (training && count <= 1) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "batch_norm: training needs more than one value per channel, got x %s",
                     SHAPE(x, b));
        return NULL;
    }
    oj_tensor *mean = NULL, *var = NULL;
    if (training) { /* batch statistics, biased variance */
        mean = oj_mean(x, nd, dims, true);
        oj_tensor *xc = mean ? oj_sub(x, mean) : NULL;
        oj_tensor *sq = xc ? oj_mul(xc, xc) : NULL;
        var = sq ? oj_mean(sq, nd, dims, true) : NULL;
        oj_release(xc);
        oj_release(sq);
    } else {
        mean = per_channel(running_mean, x->rank);
        var = mean ? per_channel(running_var, x->rank) : NULL;
    }
    oj_tensor *xc = var ? oj_sub(x, mean) : NULL;
    oj_tensor *ve = xc ? oj_add_scalar(var, eps) : NULL;
    oj_tensor *rs = ve ? oj_rsqrt(ve) : NULL;
    oj_tensor *y = rs ? oj_mul(xc, rs) : NULL;
    oj_release(xc);
    oj_release(ve);
    oj_release(rs);
    if (y && weight) {
        oj_tensor *w = per_channel(weight, x->rank);
        oj_tensor *yw = w ? oj_mul(y, w) : NULL;
        oj_release(w);
        oj_release(y);
        y = yw;
    }
    if (y && bias) {
        oj_tensor *bb = per_channel(bias, x->rank);
        oj_tensor *yb = bb ? oj_add(y, bb) : NULL;
        oj_release(bb);
        oj_release(y);
        y = yb;
    }
    if (y && training && running_mean) { /* unbiased variance for the running estimate */
        bool prev = oj_set_grad_enabled(eng, false);
        oj_tensor *vu = oj_mul_scalar(var, (double)count / (double)(count - 1));
        oj_status st = vu ? update_running(running_mean, mean, momentum) : oj_last_status(eng);
        if (st == OJ_OK) st = update_running(running_var, vu, momentum);
        oj_release(vu);
        oj_set_grad_enabled(eng, prev);
        if (st != OJ_OK) {
            oj_release(y);
            y = NULL;
        }
    }
    oj_release(mean);
    oj_release(var);
    return y;
}
