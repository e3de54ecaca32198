/* Autograd for views. Every view maps input elements to output elements
 * one to one, except expand (many to one), so the backward rules are:
 * - reshape-like (reshape, view, flatten, squeeze, unsqueeze): reshape the
 *   gradient back to the input's shape;
 * - expand: sum the gradient over the broadcast dims;
 * - permute, transpose: the inverse view of the gradient (no copy);
 * - the others (narrow, slice, select): apply the same view to a zero
 *   tensor shaped like the input and copy the gradient in (narrow and
 *   select zero only the part outside the view). */
#include "ops/ops_common.h"
#include "ops/views_internal.h"

/* The same view of z as the node recorded for its input. */
static bool reapply(oj_node *n, oj_tensor *z, oj_view_geom *g) {
    const int64_t *p = n->i + 1;
    switch ((oj_view_kind)n->i[0]) {
    case OJ_VIEW_PERMUTE: {
        int dims[OJ_MAX_RANK];
        for (int d = 0; d < z->rank; d++) dims[d] = (int)p[d];
        return oj__view_permute(z, "permute", z->rank, dims, g);
    }
    case OJ_VIEW_TRANSPOSE: return oj__view_transpose(z, (int)p[0], (int)p[1], g);
    case OJ_VIEW_NARROW: return oj__view_narrow(z, (int)p[0], p[1], p[2], g);
    case OJ_VIEW_SLICE: return oj__view_slice(z, (int)p[0], p[1], p[2], p[3], g);
    case OJ_VIEW_SELECT: return oj__view_select(z, (int)p[0], p[1], g);
    default: return false;
    }
}

/* Zeros in z outside [lo, hi) of dim `dim`. */
static oj_status zero_outside(oj_tensor *z, int dim, int64_t lo, int64_t hi) {
    const int64_t part[2][2] = {{0, lo}, {hi, z->shape[dim]}};
    for (int k = 0; k < 2; k++) {
        if (part[k][1] <= part[k][0]) continue;
        oj_view_geom g;
        if (!oj__view_narrow(z, dim, part[k][0], part[k][1] - part[k][0], &g))
            return oj_last_status(z->eng);
        oj_tensor *v = oj__view_make(z, &g);
        oj_status st = v ? oj_fill_(v, 0.0) : oj_last_status(z->eng);
        oj_release(v);
        if (st != OJ_OK) return st;
    }
    return OJ_OK;
}

static oj_status view_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    const oj_edge *e = &n->in[0];
    oj_tensor *g = go[0];
    oj_view_kind kind = (oj_view_kind)n->i[0];
    if (kind == OJ_VIEW_RESHAPE) {
        gi[0] = oj_reshape(g, e->rank, e->shape);
    } else if (kind == OJ_VIEW_TRANSPOSE) { /* its own inverse: a view of g, no copy */
        gi[0] = oj_transpose(g, (int)n->i[1], (int)n->i[2]);
    } else if (kind == OJ_VIEW_PERMUTE) { /* the inverse permutation of g */
        int inv[OJ_MAX_RANK];
        for (int d = 0; d < e->rank; d++) {
            int k = (int)n->i[1 + d];
            inv[k < 0 ? k + e->rank : k] = d; /* dims were validated by the forward */
        }
        gi[0] = oj_permute(g, e->rank, inv);
    } else if (kind == OJ_VIEW_EXPAND) {
        gi[0] = oj__sum_to(g, e->rank, e->shape);
    } else {
        /* narrow and select cover one range [lo, hi) of one dim: only the
         * rest of z needs zeros (the range is overwritten by the copy). */
        int64_t lo = 0, hi = 0;
        int dim = -1;
        if (kind == OJ_VIEW_NARROW || kind == OJ_VIEW_SELECT) {
            dim = (int)(n->i[1] < 0 ? n->i[1] + e->rank : n->i[1]);
            int64_t size = e->shape[dim], start = n->i[2] < 0 ? n->i[2] + size : n->i[2];
            lo = start;
            hi = kind == OJ_VIEW_NARROW ? start + n->i[3] : start + 1;
        }
        oj_tensor *z = dim >= 0 ? oj_empty(n->eng, e->rank, e->shape, g->dtype)
                                : oj_zeros(n->eng, e->rank, e->shape, g->dtype);
        oj_view_geom geom;
        if (z == NULL) return oj_last_status(n->eng);
        if (dim >= 0 && zero_outside(z, dim, lo, hi) != OJ_OK) {
            oj_release(z);
            return oj_last_status(n->eng);
        }
        if (!reapply(n, z, &geom)) {
            oj_release(z);
            return oj_set_error(n->eng, OJ_ERR_INTERNAL, "%s: backward could not rebuild the view",
                                n->op);
        }
        oj_tensor *v = oj__view_make(z, &geom);
        oj_status st = v ? oj_copy_(v, g) : oj_last_status(n->eng);
        oj_release(v);
        if (st != OJ_OK) {
            oj_release(z);
            return st;
        }
        gi[0] = z;
    }
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

oj_tensor *oj__view_record(oj_tensor *in, oj_tensor *out, const char *op, oj_view_kind kind,
                           int nparams, const int64_t *params) {
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(in->eng, op, view_backward, 1, in);
    if (nd == NULL) return out;
    nd->i[0] = kind;
    for (int k = 0; k < nparams && k + 1 < (int)(sizeof nd->i / sizeof nd->i[0]); k++)
        nd->i[k + 1] = params[k];
    oj__node_finish(nd, 1, &out);
    return out;
}
