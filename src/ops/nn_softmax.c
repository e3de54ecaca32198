/* softmax / log_softmax over one dim (fused, max-subtracted); the backward
 * uses the saved output only. */
#include "ops/nn_common.h"

/* A rank >= 1 view of contiguous t (a scalar becomes [1]). */
static oj_tensor *as_rank1(oj_tensor *t) {
    int64_t one = 1;
    if (t->rank > 0) return oj__tensor_view(t, t->rank, t->shape, NULL, t->offset);
    return oj__tensor_view(t, 1, &one, NULL, t->offset);
}

/* saved: 0 y (the output). i[0] dim, i[1] log */
static oj_status softmax_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *y = oj__node_saved(n, 0);
    if (y == NULL) return oj_last_status(eng);
    const oj_edge *e = &n->in[0];
    oj_tensor *gc = oj__nn_contig(go[0]);
    oj_tensor *g1 = gc ? as_rank1(gc) : NULL;
    oj_tensor *y1 = g1 ? as_rank1(y) : NULL;
    oj_tensor *dx = y1 ? oj__tensor_alloc(eng, e->rank, e->shape, e->dtype, n->op) : NULL;
    oj_tensor *dx1 = dx ? as_rank1(dx) : NULL;
    bool ok = dx1 && oj__kernel_ok(eng, eng->backend->softmax_backward(eng, dx1, y1, g1,
                                                                       (int)n->i[0], n->i[1] != 0),
                                   n->op);
    oj_release(dx1);
    oj_release(y1);
    oj_release(g1);
    oj_release(gc);
    if (!ok) {
        oj_release(dx);
        return oj_last_status(eng);
    }
    gi[0] = dx;
    return OJ_OK;
}

static oj_tensor *softmax_op(const char *op, oj_tensor *x, int dim, bool log) {
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL || !oj__nn_check_float(eng, op, "x", x) ||
        !oj__norm_dim(eng, op, &dim, x->rank))
        return NULL;
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, int, bool) =
        OJ_KERNEL(eng, softmax_forward, op);
    if (k == NULL || OJ_KERNEL(eng, softmax_backward, op) == NULL) return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    oj_tensor *xc = out ? oj__nn_contig(x) : NULL;
    oj_tensor *x1 = xc ? as_rank1(xc) : NULL;
    oj_tensor *o1 = x1 ? as_rank1(out) : NULL;
    bool ok = o1 && oj__kernel_ok(eng, k(eng, o1, x1, dim, log), op);
    oj_release(o1);
    oj_release(x1);
    oj_release(xc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    oj_node *nd = oj__node_begin(eng, op, softmax_backward, 1, x);
    if (nd) {
        nd->i[0] = dim;
        nd->i[1] = log;
        oj__nn_save_temp(nd, oj__nn_alias(out));
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

oj_tensor *oj_softmax(oj_tensor *x, int dim) {
    oj_tensor *ac_in[1] = {x};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 1, ac_in, oj_softmax(ac[0], dim));
    return softmax_op("softmax", x, dim, false);
}
oj_tensor *oj_log_softmax(oj_tensor *x, int dim) {
    oj_tensor *ac_in[1] = {x};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 1, ac_in, oj_log_softmax(ac[0], dim));
    return softmax_op("log_softmax", x, dim, true);
}
