/* Reductions (sum, mean, prod, max/min, var/std, logsumexp, norm, cumsum,
 * any/all, ...) and their backward rules. */
#include <math.h>
#include <string.h>

#include "ops/ops_common.h"

/* Parse dims into a bit mask; 0 dims means all. */
static bool reduce_mask(oj_engine *eng, const char *op, const oj_tensor *x, int ndims,
                        const int *dims, uint32_t *mask) {
    *mask = 0;
    if (ndims == 0 || dims == NULL) {
        *mask = x->rank ? (uint32_t)((1u << x->rank) - 1) : 0;
        return true;
    }
    for (int i = 0; i < ndims; i++) {
        int d = dims[i];
        if (!oj__norm_dim(eng, op, &d, x->rank)) return false;
        if (x->rank == 0) continue;
        if (*mask & (1u << d)) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: dim %d appears more than once", op,
                         dims[i]);
            return false;
        }
        *mask |= 1u << d;
    }
    return true;
}

/* Output shape (keepdim or not) for a mask. */
static int reduced_shape(const oj_tensor *x, uint32_t mask, bool keepdim, int64_t *shape) {
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
        if (mask & (1u << d)) {
            if (keepdim) shape[r++] = 1;
        } else {
            shape[r++] = x->shape[d];
        }
    }
    return r;
}

/* Run the reduce kernel into a new keepdim-shaped tensor of dtype odt; with
 * idx non-NULL also allocate and fill the i64 index tensor (MAX/MIN). */
static oj_tensor *reduce_kd(oj_engine *eng, const char *op, oj_reduce_op rop, oj_tensor *x,
                            uint32_t mask, oj_dtype odt, double p, oj_tensor **idx) {
    int64_t kshape[OJ_MAX_RANK];
    int kr = reduced_shape(x, mask, true, kshape);
    oj_status (*k)(oj_engine *, oj_reduce_op, oj_tensor *, oj_tensor *, const oj_tensor *,
                   uint32_t, double) = OJ_KERNEL(eng, reduce, op);
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, kr, kshape, odt, op);
    if (out == NULL) return NULL;
    if (idx) {
        *idx = oj__tensor_alloc(eng, kr, kshape, OJ_I64, op);
        if (*idx == NULL) {
            oj_release(out);
            return NULL;
        }
    }
    if (!oj__kernel_ok(eng, k(eng, rop, out, idx ? *idx : NULL, x, mask, p), op)) {
        oj_release(out);
        if (idx) {
            oj_release(*idx);
            *idx = NULL;
        }
        return NULL;
    }
    return out;
}

/* kd (contiguous, keepdim-shaped) without the reduced dims unless keepdim:
 * a new handle either way. */
static oj_tensor *drop_reduced(oj_tensor *kd, const oj_tensor *x, uint32_t mask, bool keepdim) {
    if (keepdim) return oj_retain(kd);
    int64_t shape[OJ_MAX_RANK];
    int r = reduced_shape(x, mask, false, shape);
    return oj__tensor_view(kd, r, shape, NULL, kd->offset);
}

/* Run the reduce kernel and return the result in keepdim or reduced form. */
static oj_tensor *reduce_raw(oj_engine *eng, const char *op, oj_reduce_op rop, oj_tensor *x,
                             uint32_t mask, bool keepdim, oj_dtype odt, double p) {
    oj_tensor *kd = reduce_kd(eng, op, rop, x, mask, odt, p, NULL);
    if (kd == NULL || keepdim) return kd;
    oj_tensor *v = drop_reduced(kd, x, mask, false);
    oj_release(kd);
    return v;
}

/* Gradient of sum/mean: grad (reduced shape) broadcast back to the input. */
static oj_status sum_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    uint32_t mask = (uint32_t)n->i[0];
    const oj_edge *e = &n->in[0];
    /* Reinsert reduced dims as size 1, then expand. */
    int64_t kshape[OJ_MAX_RANK];
    for (int d = 0; d < e->rank; d++) kshape[d] = (mask & (1u << d)) ? 1 : e->shape[d];
    oj_tensor *g = go[0];
    oj_tensor *gk = oj__tensor_view(g, e->rank, kshape, NULL, g->offset);
    oj_tensor *gc = NULL;
    if (!oj_is_contiguous(g)) { /* view above assumed contiguous strides */
        oj_release(gk);
        gc = oj__contiguous(g);
        if (gc == NULL) return oj_last_status(n->eng);
        gk = oj__tensor_view(gc, e->rank, kshape, NULL, gc->offset);
    }
    oj_tensor *gx = oj__broadcast_view(gk, e->rank, e->shape);
    oj_tensor *scaled = NULL;
    if (n->f[0] != 1.0) scaled = oj_mul_scalar(gx, n->f[0]);
    else scaled = oj__contiguous(gx);
    if (scaled && scaled->dtype != e->dtype) {
        oj_tensor *c = oj_cast(scaled, e->dtype);
        oj_release(scaled);
        scaled = c;
    }
    gi[0] = scaled;
    oj_release(gx);
    oj_release(gk);
    oj_release(gc);
    return scaled ? OJ_OK : oj_last_status(n->eng);
}

static oj_tensor *sum_mean(const char *op, oj_tensor *x, int ndims, const int *dims,
                           bool keepdim, bool mean) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask)) return NULL;
    oj_dtype odt = x->dtype;
    if (mean) odt = oj__float_dtype(odt);
    else if (!oj_dtype_is_float(odt)) odt = OJ_I64; /* torch: integer sums are int64 */
    oj_tensor *out = reduce_raw(eng, op, mean ? OJ_RED_MEAN : OJ_RED_SUM, x, mask, keepdim, odt, 0);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(eng, op, sum_backward, 1, x);
    if (nd) {
        int64_t cnt = 1;
        for (int d = 0; d < x->rank; d++)
            if (mask & (1u << d)) cnt *= x->shape[d];
        nd->i[0] = mask;
        nd->f[0] = mean ? 1.0 / (double)(cnt ? cnt : 1) : 1.0;
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_sum(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    return sum_mean("sum", x, ndims, dims, keepdim, false);
}
oj_tensor *oj_mean(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    return sum_mean("mean", x, ndims, dims, keepdim, true);
}
oj_tensor *oj_sum_all(oj_tensor *x) { return oj_sum(x, 0, NULL, false); }
oj_tensor *oj_mean_all(oj_tensor *x) { return oj_mean(x, 0, NULL, false); }

/* ---------------------------------------------------------------- sum_to */

oj_tensor *oj__sum_to(oj_tensor *grad, int rank, const int64_t *shape) {
    if (grad == NULL) return NULL;
    bool same = grad->rank == rank;
    for (int d = 0; same && d < rank; d++) same = grad->shape[d] == shape[d];
    if (same) return oj_retain(grad);
    int lead = grad->rank - rank;
    int dims[OJ_MAX_RANK], nd = 0;
    for (int d = 0; d < grad->rank; d++) {
        int sd = d - lead;
        if (sd < 0 || (shape[sd] == 1 && grad->shape[d] != 1)) dims[nd++] = d;
    }
    if (nd == 0) { /* only size-1 leading dims differ */
        oj_tensor *c = oj__contiguous(grad);
        oj_tensor *v = c ? oj__tensor_view(c, rank, shape, NULL, c->offset) : NULL;
        oj_release(c);
        return v;
    }
    oj_tensor *s = oj_sum(grad, nd, dims, true);
    if (s == NULL) return NULL;
    /* drop the leading dims: s is contiguous [1.., shape] */
    oj_tensor *v = oj__tensor_view(s, rank, shape, NULL, s->offset);
    oj_release(s);
    return v;
}

oj_tensor *oj__sum_to_input(oj_node *n, int i, oj_tensor *grad) {
    return oj__sum_to(grad, n->in[i].rank, n->in[i].shape);
}

oj_tensor *oj__zeros_like_output(oj_node *n, int j) {
    return oj_zeros(n->eng, n->out_rank[j], n->out_shape[j], n->out_dtype[j]);
}

/* ================================================================ more reductions
 * prod, max/min (values and indices), amax/amin, argmax/argmin, var/std,
 * logsumexp, norm, cumsum, any/all. Forward: the backend's reduce (and
 * cumsum) kernels. Backward rules compose ops (grad mode is off there). */

/* The reduced dims of a mask as a list; returns how many. */
static int mask_dims(uint32_t mask, int rank, int *dims) {
    int n = 0;
    for (int d = 0; d < rank; d++)
        if (mask & (1u << d)) dims[n++] = d;
    return n;
}

/* Elements reduced into each output element. */
static int64_t mask_count(uint32_t mask, int rank, const int64_t *shape) {
    int64_t c = 1;
    for (int d = 0; d < rank; d++)
        if (mask & (1u << d)) c *= shape[d];
    return c;
}

/* Reductions without an identity (max, min, arg*) refuse empty dims. */
static bool check_nonempty(oj_engine *eng, const char *op, const oj_tensor *x, uint32_t mask) {
    for (int d = 0; d < x->rank; d++) {
        if ((mask & (1u << d)) && x->shape[d] == 0) {
            char b[128];
            oj_set_error(eng, OJ_ERR_SHAPE,
                         "%s: cannot reduce dim %d of size 0 of %s (the reduction has no identity)",
                         op, d, oj__shape_fmt(b, sizeof b, x->rank, x->shape));
            return false;
        }
    }
    return true;
}

static bool check_float(oj_engine *eng, const char *op, const oj_tensor *x) {
    if (oj_dtype_is_float(x->dtype)) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: expected a float tensor (f32, f64, bf16, f16), got %s", op,
                 oj_dtype_name(x->dtype));
    return false;
}

/* The output gradient reshaped to the input's keepdim shape (reduced dims
 * of size 1), ready to broadcast against the input. */
static oj_tensor *grad_keepdim(oj_node *n, oj_tensor *g, uint32_t mask) {
    const oj_edge *e = &n->in[0];
    int64_t kshape[OJ_MAX_RANK];
    for (int d = 0; d < e->rank; d++) kshape[d] = (mask & (1u << d)) ? 1 : e->shape[d];
    return oj_reshape(g, e->rank, kshape);
}

/* Save kd through a separate handle, so the node never owns its output. */
static void save_view(oj_node *nd, oj_tensor *kd) {
    oj_tensor *v = oj__tensor_view(kd, kd->rank, kd->shape, kd->stride, kd->offset);
    if (v) oj__node_save(nd, v);
    oj_release(v);
}

/* Cast a gradient to the input's dtype if an op promoted it. */
static oj_tensor *as_input_dtype(oj_node *n, oj_tensor *g) {
    if (g == NULL || g->dtype == n->in[0].dtype) return g;
    oj_tensor *c = oj_cast(g, n->in[0].dtype);
    oj_release(g);
    return c;
}

/* ---------------------------------------------------------------- prod */

/* d prod / d x_i = product of the others: y / x_i when the group has no
 * zero; with exactly one zero only that element gets the product of the
 * non-zeros; with two or more every gradient is 0. */
static oj_status prod_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *x = oj__node_saved(n, 0);
    if (x == NULL) return oj_last_status(n->eng);
    uint32_t mask = (uint32_t)n->i[0];
    int dims[OJ_MAX_RANK], nd = mask_dims(mask, x->rank, dims);
    oj_tensor *gk = grad_keepdim(n, go[0], mask);
    oj_tensor *zero = oj_scalar(n->eng, 0.0, x->dtype), *one = oj_scalar(n->eng, 1.0, x->dtype);
    oj_tensor *isz = oj_eq(x, zero);
    oj_tensor *nz = oj_sum(isz, nd, nd ? dims : NULL, true);
    oj_tensor *xnz = oj_where(isz, one, x);
    oj_tensor *pnz = oj_prod(xnz, nd, nd ? dims : NULL, true);
    oj_tensor *q = oj_div(pnz, xnz); /* y / x, or the others' product at the zero */
    oj_tensor *nz0 = oj_eq(nz, zero), *nz1 = oj_eq(nz, one);
    oj_tensor *one_zero = oj_logical_and(nz1, isz);
    oj_tensor *sel = oj_logical_or(nz0, one_zero);
    oj_tensor *f = oj_where(sel, q, zero);
    gi[0] = as_input_dtype(n, oj_mul(f, gk));
    oj_tensor *tmp[] = {gk, zero, one, isz, nz, xnz, pnz, q, nz0, nz1, one_zero, sel, f};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return oj_last_status(n->eng);
}

oj_tensor *oj_prod(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    const char *op = "prod";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask)) return NULL;
    oj_dtype odt = oj_dtype_is_float(x->dtype) ? x->dtype : OJ_I64;
    oj_tensor *out = reduce_raw(eng, op, OJ_RED_PROD, x, mask, keepdim, odt, 0);
    if (out == NULL || !oj_dtype_is_float(odt)) return out;
    oj_node *nd = oj__node_begin(eng, op, prod_backward, 1, x);
    if (nd) {
        nd->i[0] = mask;
        oj__node_save(nd, x);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* ---------------------------------------------------------------- max / min with indices */

/* The gradient goes to the position the forward picked (its index). */
static oj_status maxmin_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *idx = oj__node_saved(n, 0);
    if (idx == NULL) return oj_last_status(n->eng);
    const oj_edge *e = &n->in[0];
    uint32_t mask = (uint32_t)n->i[0];
    int dim = (int)n->i[1];
    oj_tensor *gk = grad_keepdim(n, go[0], mask);
    if (e->rank == 0) {
        gi[0] = gk;
        return gk ? OJ_OK : oj_last_status(n->eng);
    }
    int64_t ashape[OJ_MAX_RANK];
    for (int d = 0; d < e->rank; d++) ashape[d] = d == dim ? e->shape[d] : 1;
    oj_tensor *ar = oj_arange(n->eng, 0, (double)e->shape[dim], 1, OJ_I64);
    oj_tensor *arv = ar ? oj_reshape(ar, e->rank, ashape) : NULL;
    oj_tensor *hit = oj_eq(arv, idx);
    oj_tensor *zero = oj_scalar(n->eng, 0.0, e->dtype);
    gi[0] = as_input_dtype(n, oj_where(hit, gk, zero));
    oj_release(gk);
    oj_release(ar);
    oj_release(arv);
    oj_release(hit);
    oj_release(zero);
    return oj_last_status(n->eng);
}

static oj_tensor *max_min(const char *op, oj_reduce_op rop, oj_tensor *x, int dim, bool keepdim,
                          oj_tensor **indices) {
    if (indices) *indices = NULL;
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    if (!oj__norm_dim(eng, op, &dim, x->rank)) return NULL;
    uint32_t mask = x->rank ? 1u << dim : 0;
    if (!check_nonempty(eng, op, x, mask)) return NULL;
    oj_tensor *idx = NULL;
    oj_tensor *kd = reduce_kd(eng, op, rop, x, mask, x->dtype, 0, &idx);
    if (kd == NULL) return NULL;
    oj_tensor *out = drop_reduced(kd, x, mask, keepdim);
    if (out && indices) *indices = drop_reduced(idx, x, mask, keepdim);
    if (out && oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, op, maxmin_backward, 1, x);
        if (nd) {
            nd->i[0] = mask;
            nd->i[1] = dim;
            oj__node_save(nd, idx);
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(kd);
    oj_release(idx);
    return out;
}

oj_tensor *oj_max(oj_tensor *x, int dim, bool keepdim, oj_tensor **indices) {
    return max_min("max", OJ_RED_MAX, x, dim, keepdim, indices);
}
oj_tensor *oj_min(oj_tensor *x, int dim, bool keepdim, oj_tensor **indices) {
    return max_min("min", OJ_RED_MIN, x, dim, keepdim, indices);
}

/* ---------------------------------------------------------------- amax / amin */

/* Ties share the gradient evenly (torch's amax/amin rule). */
static oj_status amax_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *x = oj__node_saved(n, 0), *yk = oj__node_saved(n, 1);
    if (x == NULL || yk == NULL) return oj_last_status(n->eng);
    uint32_t mask = (uint32_t)n->i[0];
    int dims[OJ_MAX_RANK], nd = mask_dims(mask, x->rank, dims);
    oj_tensor *gk = grad_keepdim(n, go[0], mask);
    oj_tensor *hit = oj_eq(x, yk);
    oj_tensor *cnt = oj_sum(hit, nd, nd ? dims : NULL, true);
    oj_tensor *share = oj_div(gk, cnt);
    oj_tensor *zero = oj_scalar(n->eng, 0.0, x->dtype);
    gi[0] = as_input_dtype(n, oj_where(hit, share, zero));
    oj_tensor *tmp[] = {gk, hit, cnt, share, zero};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return oj_last_status(n->eng);
}

static oj_tensor *amax_amin(const char *op, oj_reduce_op rop, oj_tensor *x, int ndims,
                            const int *dims, bool keepdim) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask) || !check_nonempty(eng, op, x, mask))
        return NULL;
    oj_tensor *kd = reduce_kd(eng, op, rop, x, mask, x->dtype, 0, NULL);
    if (kd == NULL) return NULL;
    oj_tensor *out = drop_reduced(kd, x, mask, keepdim);
    if (out && oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, op, amax_backward, 1, x);
        if (nd) {
            nd->i[0] = mask;
            oj__node_save(nd, x);
            save_view(nd, kd);
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(kd);
    return out;
}

oj_tensor *oj_amax(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    return amax_amin("amax", OJ_RED_MAX, x, ndims, dims, keepdim);
}
oj_tensor *oj_amin(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    return amax_amin("amin", OJ_RED_MIN, x, ndims, dims, keepdim);
}

/* ---------------------------------------------------------------- argmax / argmin */

static oj_tensor *arg_maxmin(const char *op, oj_reduce_op rop, oj_tensor *x, int dim,
                             bool keepdim) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    if (!oj__norm_dim(eng, op, &dim, x->rank)) return NULL;
    uint32_t mask = x->rank ? 1u << dim : 0;
    if (!check_nonempty(eng, op, x, mask)) return NULL;
    return reduce_raw(eng, op, rop, x, mask, keepdim, OJ_I64, 0);
}

oj_tensor *oj_argmax(oj_tensor *x, int dim, bool keepdim) {
    return arg_maxmin("argmax", OJ_RED_ARGMAX, x, dim, keepdim);
}
oj_tensor *oj_argmin(oj_tensor *x, int dim, bool keepdim) {
    return arg_maxmin("argmin", OJ_RED_ARGMIN, x, dim, keepdim);
}

/* ---------------------------------------------------------------- var / std */

/* var: dx = g * 2 (x - mean) / (N - correction).
 * std: dx = g * (x - mean) / ((N - correction) std), 0 where std == 0
 * (as torch). n->i[1] tells std; n->f[0] = N - correction. */
static oj_status var_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *x = oj__node_saved(n, 0);
    if (x == NULL) return oj_last_status(n->eng);
    uint32_t mask = (uint32_t)n->i[0];
    bool is_std = n->i[1] != 0;
    int dims[OJ_MAX_RANK], nd = mask_dims(mask, x->rank, dims);
    oj_tensor *gk = grad_keepdim(n, go[0], mask);
    oj_tensor *mean = oj_mean(x, nd, nd ? dims : NULL, true);
    oj_tensor *xm = oj_sub(x, mean);
    oj_tensor *gs = NULL, *zero = NULL, *isz = NULL, *q = NULL;
    if (is_std) {
        oj_tensor *sk = oj__node_saved(n, 1);
        zero = oj_scalar(n->eng, 0.0, x->dtype);
        q = oj_div(gk, sk);
        isz = oj_eq(sk, zero);
        gs = oj_where(isz, zero, q);
    } else {
        gs = oj_mul_scalar(gk, 2.0);
    }
    oj_tensor *p = oj_mul(xm, gs);
    gi[0] = as_input_dtype(n, oj_mul_scalar(p, 1.0 / n->f[0]));
    oj_tensor *tmp[] = {gk, mean, xm, gs, zero, isz, q, p};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return oj_last_status(n->eng);
}

static oj_tensor *var_std(const char *op, bool is_std, oj_tensor *x, int ndims, const int *dims,
                          double correction, bool keepdim) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask) || !check_float(eng, op, x)) return NULL;
    oj_tensor *kd = reduce_kd(eng, op, OJ_RED_VAR, x, mask, x->dtype, correction, NULL);
    if (kd && is_std) { /* sqrt in place of the fresh result */
        oj_status (*u)(oj_engine *, oj_unary_op, oj_tensor *, const oj_tensor *, double, double) =
            OJ_KERNEL(eng, unary, op);
        if (u == NULL || !oj__kernel_ok(eng, u(eng, OJ_UN_SQRT, kd, kd, 0, 0), op)) {
            oj_release(kd);
            return NULL;
        }
    }
    if (kd == NULL) return NULL;
    oj_tensor *out = drop_reduced(kd, x, mask, keepdim);
    if (out) {
        oj_node *nd = oj__node_begin(eng, op, var_backward, 1, x);
        if (nd) {
            nd->i[0] = mask;
            nd->i[1] = is_std;
            nd->f[0] = (double)mask_count(mask, x->rank, x->shape) - correction;
            oj__node_save(nd, x);
            if (is_std) save_view(nd, kd);
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(kd);
    return out;
}

oj_tensor *oj_var(oj_tensor *x, int ndims, const int *dims, double correction, bool keepdim) {
    return var_std("var", false, x, ndims, dims, correction, keepdim);
}
oj_tensor *oj_std(oj_tensor *x, int ndims, const int *dims, double correction, bool keepdim) {
    return var_std("std", true, x, ndims, dims, correction, keepdim);
}

/* ---------------------------------------------------------------- logsumexp */

/* dx = g * exp(x - y), exactly 0 where g is 0 (a row of all -inf has
 * x - y = -inf + inf = NaN; a zero gradient there must stay 0). */
static oj_status lse_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *x = oj__node_saved(n, 0), *yk = oj__node_saved(n, 1);
    if (x == NULL || yk == NULL) return oj_last_status(n->eng);
    oj_tensor *gk = grad_keepdim(n, go[0], (uint32_t)n->i[0]);
    oj_tensor *zero = gk ? oj_scalar(n->eng, 0.0, gk->dtype) : NULL;
    oj_tensor *d = oj_sub(x, yk);
    oj_tensor *e = oj_exp(d);
    oj_tensor *m = oj_mul(e, gk);
    oj_tensor *z = oj_eq(gk, zero);
    gi[0] = as_input_dtype(n, oj_where(z, zero, m));
    oj_release(gk);
    oj_release(zero);
    oj_release(d);
    oj_release(e);
    oj_release(m);
    oj_release(z);
    return oj_last_status(n->eng);
}

oj_tensor *oj_logsumexp(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    const char *op = "logsumexp";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask)) return NULL;
    oj_tensor *kd = reduce_kd(eng, op, OJ_RED_LOGSUMEXP, x, mask, oj__float_dtype(x->dtype), 0,
                              NULL);
    if (kd == NULL) return NULL;
    oj_tensor *out = drop_reduced(kd, x, mask, keepdim);
    if (out && oj_dtype_is_float(x->dtype)) {
        oj_node *nd = oj__node_begin(eng, op, lse_backward, 1, x);
        if (nd) {
            nd->i[0] = mask;
            oj__node_save(nd, x);
            save_view(nd, kd);
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(kd);
    return out;
}

/* ---------------------------------------------------------------- norm */

/* p = 1: g sign(x); p = 2: g x / y (0 where y == 0); p = inf: g sign(x)
 * shared evenly among the elements with |x| == y (torch's rules). */
static oj_status norm_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *x = oj__node_saved(n, 0), *yk = oj__node_saved(n, 1);
    if (x == NULL || yk == NULL) return oj_last_status(n->eng);
    uint32_t mask = (uint32_t)n->i[0];
    double p = n->f[0];
    int dims[OJ_MAX_RANK], nd = mask_dims(mask, x->rank, dims);
    oj_tensor *gk = grad_keepdim(n, go[0], mask);
    oj_tensor *zero = oj_scalar(n->eng, 0.0, x->dtype);
    oj_tensor *t[6] = {0};
    if (p == 1.0) {
        t[0] = oj_sign(x);
        gi[0] = oj_mul(t[0], gk);
    } else if (p == 2.0) {
        t[0] = oj_div(gk, yk);
        t[1] = oj_eq(yk, zero);
        t[2] = oj_where(t[1], zero, t[0]);
        gi[0] = oj_mul(x, t[2]);
    } else {
        t[0] = oj_abs(x);
        t[1] = oj_eq(t[0], yk);
        t[2] = oj_sum(t[1], nd, nd ? dims : NULL, true);
        t[3] = oj_div(gk, t[2]);
        t[4] = oj_sign(x);
        t[5] = oj_mul(t[4], t[3]);
        gi[0] = oj_where(t[1], t[5], zero);
    }
    gi[0] = as_input_dtype(n, gi[0]);
    for (int i = 0; i < 6; i++) oj_release(t[i]);
    oj_release(gk);
    oj_release(zero);
    return oj_last_status(n->eng);
}

oj_tensor *oj_norm(oj_tensor *x, double p, int ndims, const int *dims, bool keepdim) {
    const char *op = "norm";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    if (p != 1.0 && p != 2.0 && p != INFINITY) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "norm: p must be 1, 2 or INFINITY, got %g", p);
        return NULL;
    }
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask) || !check_float(eng, op, x)) return NULL;
    oj_reduce_op rop = p == 1.0 ? OJ_RED_NORM_L1 : p == 2.0 ? OJ_RED_NORM_L2 : OJ_RED_NORM_INF;
    oj_tensor *kd = reduce_kd(eng, op, rop, x, mask, x->dtype, 0, NULL);
    if (kd == NULL) return NULL;
    oj_tensor *out = drop_reduced(kd, x, mask, keepdim);
    if (out) {
        oj_node *nd = oj__node_begin(eng, op, norm_backward, 1, x);
        if (nd) {
            nd->i[0] = mask;
            nd->f[0] = p;
            oj__node_save(nd, x);
            save_view(nd, kd);
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(kd);
    return out;
}

/* ---------------------------------------------------------------- cumsum */

static oj_tensor *cumsum_impl(oj_tensor *x, int dim, bool reverse);

/* The gradient of a prefix sum is the suffix sum of the gradient. */
static oj_status cumsum_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = as_input_dtype(n, cumsum_impl(go[0], (int)n->i[0], !n->i[1]));
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

static oj_tensor *cumsum_impl(oj_tensor *x, int dim, bool reverse) {
    const char *op = "cumsum";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    if (!oj__norm_dim(eng, op, &dim, x->rank)) return NULL;
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, int, bool) =
        OJ_KERNEL(eng, cumsum, op);
    if (k == NULL) return NULL;
    oj_dtype odt = oj_dtype_is_float(x->dtype) ? x->dtype : OJ_I64;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, odt, op);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, out, x, dim, reverse), op)) {
        oj_release(out);
        return NULL;
    }
    if (oj_dtype_is_float(odt)) {
        oj_node *nd = oj__node_begin(eng, op, cumsum_backward, 1, x);
        if (nd) {
            nd->i[0] = dim;
            nd->i[1] = reverse;
            oj__node_finish(nd, 1, &out);
        }
    }
    return out;
}

oj_tensor *oj_cumsum(oj_tensor *x, int dim) { return cumsum_impl(x, dim, false); }

/* ---------------------------------------------------------------- any / all */

static oj_tensor *any_all(const char *op, oj_reduce_op rop, oj_tensor *x, int ndims,
                          const int *dims, bool keepdim) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL) return NULL;
    uint32_t mask;
    if (!reduce_mask(eng, op, x, ndims, dims, &mask)) return NULL;
    return reduce_raw(eng, op, rop, x, mask, keepdim, OJ_BOOL, 0);
}

oj_tensor *oj_any(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    return any_all("any", OJ_RED_ANY, x, ndims, dims, keepdim);
}
oj_tensor *oj_all(oj_tensor *x, int ndims, const int *dims, bool keepdim) {
    return any_all("all", OJ_RED_ALL, x, ndims, dims, keepdim);
}
