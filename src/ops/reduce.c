/* Reductions (sum, mean, ...) and their backward rules. */
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

/* Run the reduce kernel into a keepdim-shaped tensor, then view it without
 * the reduced dims when !keepdim. */
static oj_tensor *reduce_raw(oj_engine *eng, const char *op, oj_reduce_op rop, oj_tensor *x,
                             uint32_t mask, bool keepdim, oj_dtype odt, double p) {
    int64_t kshape[OJ_MAX_RANK], shape[OJ_MAX_RANK];
    int kr = reduced_shape(x, mask, true, kshape);
    int r = reduced_shape(x, mask, keepdim, shape);
    oj_status (*k)(oj_engine *, oj_reduce_op, oj_tensor *, oj_tensor *, const oj_tensor *,
                   uint32_t, double) = OJ_KERNEL(eng, reduce, op);
    if (k == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, kr, kshape, odt, op);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, k(eng, rop, out, NULL, x, mask, p), op)) {
        oj_release(out);
        return NULL;
    }
    if (keepdim) return out;
    oj_tensor *v = oj__tensor_view(out, r, shape, NULL, out->offset);
    oj_release(out);
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
        gc = oj_contiguous(g);
        if (gc == NULL) return oj_last_status(n->eng);
        gk = oj__tensor_view(gc, e->rank, kshape, NULL, gc->offset);
    }
    oj_tensor *gx = oj__broadcast_view(gk, e->rank, e->shape);
    oj_tensor *scaled = NULL;
    if (n->f[0] != 1.0) scaled = oj_mul_scalar(gx, n->f[0]);
    else scaled = oj_contiguous(gx);
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
        oj_tensor *c = oj_contiguous(grad);
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
