/* rotary_embedding (RoFormer, Su et al. 2021), half-split layout, at
 * positions offset + t or read from a positions tensor (rotary_embedding_at);
 * the backward is the rotation by the negative angle. */
#include <math.h>

#include "ops/nn_common.h"

/* Rotate contiguous x into a new tensor (inverse: by -angle), at positions
 * pos + t, or positions[t] when positions is not NULL. */
static oj_tensor *rotate(oj_engine *eng, const char *op, oj_tensor *x, int64_t pos,
                         const oj_tensor *positions, double theta, bool inverse) {
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    oj_tensor *xc = out ? oj__nn_contig(x) : NULL;
    const oj_backend *be = eng->backend;
    bool ok = xc && oj__kernel_ok(eng,
                                  positions ? be->rotary_embedding_at(eng, out, xc, positions,
                                                                      theta, inverse)
                                            : be->rotary_embedding(eng, out, xc, pos, theta,
                                                                   inverse),
                                  op);
    oj_release(xc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}

/* i[0] position_offset; f[0] theta */
static oj_status rotary_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = rotate(n->eng, n->op, go[0], n->i[0], NULL, n->f[0], true);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

/* x [..., T, D] float with D even and a finite theta > 0; else the error. */
static bool rotary_check(oj_engine *eng, const char *op, const oj_tensor *x, double theta) {
    if (!oj__nn_check_float(eng, op, "x", x)) return false;
    if (x->rank < 2 || x->shape[x->rank - 1] % 2 != 0) {
        char b[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: x must be [B, H, T, D] (or [..., T, D]) with D even, got %s",
                     op, oj__shape_fmt(b, sizeof b, x->rank, x->shape));
        return false;
    }
    if (!(theta > 0.0) || isinf(theta)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: theta must be finite and > 0, got %g", op,
                     theta);
        return false;
    }
    return true;
}

oj_tensor *oj_rotary_embedding(oj_tensor *x, int64_t position_offset, double theta) {
    const char *op = "rotary_embedding";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL || !rotary_check(eng, op, x, theta)) return NULL;
    if (position_offset > INT64_MAX - x->shape[x->rank - 2]) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                     "%s: position_offset %lld + %lld positions overflows int64", op,
                     (long long)position_offset, (long long)x->shape[x->rank - 2]);
        return NULL;
    }
    if (OJ_KERNEL(eng, rotary_embedding, op) == NULL) return NULL;
    oj_tensor *out = rotate(eng, op, x, position_offset, NULL, theta, false);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(eng, op, rotary_backward, 1, x);
    if (nd) {
        nd->i[0] = position_offset;
        nd->f[0] = theta;
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* saved: 0 positions; f[0] theta */
static oj_status rotary_at_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_tensor *positions = oj__node_saved(n, 0);
    if (positions == NULL) return oj_last_status(n->eng);
    gi[0] = rotate(n->eng, n->op, go[0], 0, positions, n->f[0], true);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

oj_tensor *oj_rotary_embedding_at(oj_tensor *x, oj_tensor *positions, double theta) {
    const char *op = "rotary_embedding_at";
    oj_tensor *in[2] = {x, positions};
    oj_engine *eng = oj__ops_engine(op, 2, in);
    if (eng == NULL || !rotary_check(eng, op, x, theta) ||
        !oj__nn_check_index(eng, op, "positions", positions))
        return NULL;
    int64_t T = x->shape[x->rank - 2];
    if (positions->rank != 1 || positions->shape[0] != T) {
        char b1[160], b2[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: positions must be [T] = [%lld] for x %s, got %s", op,
                     (long long)T, oj__shape_fmt(b1, sizeof b1, x->rank, x->shape),
                     oj__shape_fmt(b2, sizeof b2, positions->rank, positions->shape));
        return NULL;
    }
    if (OJ_KERNEL(eng, rotary_embedding_at, op) == NULL) return NULL;
    oj_tensor *out = rotate(eng, op, x, 0, positions, theta, false);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(eng, op, rotary_at_backward, 1, x);
    if (nd) {
        nd->f[0] = theta;
        oj__node_save(nd, positions);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}

/* ---------------------------------------------------------------- rms_norm_rotary */

/* saved: 0 x (the input as given: any strides), 1 rstd (N), 2 weight (D)
 * when i[1]; i[0] position_offset; f[0] theta. dx by the fused entry when
 * the backend has it and the weight needs no gradient; else the two ops'
 * rules: the inverse rotation of dy (rotary's entry, dy's dtype), then
 * rms_norm_backward on a contiguous copy of x (dx and dweight). */
static oj_status rms_norm_rotary_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *x = oj__node_saved(n, 0), *rstd = oj__node_saved(n, 1);
    oj_tensor *w = n->i[1] ? oj__node_saved(n, 2) : NULL;
    if (!x || !rstd || (n->i[1] && !w)) return oj_last_status(eng);
    const oj_backend *be = eng->backend;
    const bool ndx = oj__node_needs(n, 0), ndw = n->i[1] && oj__node_needs(n, 1);
    const oj_edge *ex = &n->in[0];
    oj_tensor *dx = ndx ? oj__tensor_alloc(eng, ex->rank, ex->shape, ex->dtype, n->op) : NULL;
    if (ndx && dx == NULL) return oj_last_status(eng);
    if (!ndw && be->rms_norm_rotary_backward) {
        if (dx && !oj__kernel_ok(eng, be->rms_norm_rotary_backward(eng, dx, go[0], x, rstd, w,
                                                                   n->i[0], n->f[0]),
                                 n->op)) {
            oj_release(dx);
            return oj_last_status(eng);
        }
        gi[0] = dx;
        return OJ_OK;
    }
    oj_tensor *dw = ndw ? oj__tensor_alloc(eng, 1, n->in[1].shape, n->in[1].dtype, n->op) : NULL;
    oj_tensor *g = ndw && !dw ? NULL : rotate(eng, n->op, go[0], n->i[0], NULL, n->f[0], true);
    oj_tensor *g2 = g ? oj__nn_rows(g) : NULL;
    oj_tensor *xc = g2 ? oj__nn_contig(x) : NULL;
    oj_tensor *x2 = xc ? oj__nn_rows(xc) : NULL;
    oj_tensor *dx2 = x2 && dx ? oj__nn_rows(dx) : NULL;
    bool ok = x2 && (!dx || dx2) &&
              oj__kernel_ok(eng, be->rms_norm_backward(eng, dx2, dw, g2, x2, rstd, w), n->op);
    oj_tensor *tmp[] = {g, g2, xc, x2, dx2};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    if (!ok) {
        oj_release(dx);
        oj_release(dw);
        return oj_last_status(eng);
    }
    gi[0] = dx;
    gi[1] = dw;
    return OJ_OK;
}

oj_tensor *oj_rms_norm_rotary(oj_tensor *x, oj_tensor *weight, double eps,
                              int64_t position_offset, double theta) {
    oj_tensor *ac_in[2] = {x, weight};
    OJ__AUTOCAST(OJ__AUTOCAST_F32, 2, ac_in,
                 oj_rms_norm_rotary(ac[0], ac[1], eps, position_offset, theta));
    const char *op = "rms_norm_rotary";
    oj_tensor *ins[2] = {x, weight};
    oj_engine *eng = x ? oj__ops_engine(op, weight ? 2 : 1, ins) : NULL;
    if (eng == NULL || !rotary_check(eng, op, x, theta)) return NULL;
    const int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1];
    if (weight && (!oj__nn_check_vec(eng, op, "weight", weight, D, x) ||
                   !oj__nn_check_same_dtype(eng, op, "weight", weight, "x", x)))
        return NULL;
    if (!(eps >= 0.0) || isinf(eps)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, got %g", op,
                     eps);
        return NULL;
    }
    if (position_offset > INT64_MAX - T) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                     "%s: position_offset %lld + %lld positions overflows int64", op,
                     (long long)position_offset, (long long)T);
        return NULL;
    }
    const oj_backend *be = eng->backend;
    if (be->rms_norm_rotary_forward == NULL) { /* the two ops, each with its node */
        oj_tensor *nx = oj_rms_norm(x, weight, eps);
        oj_tensor *out = nx ? oj_rotary_embedding(nx, position_offset, theta) : NULL;
        oj_release(nx);
        return out;
    }
    if (OJ_KERNEL(eng, rms_norm_backward, op) == NULL ||
        OJ_KERNEL(eng, rotary_embedding, op) == NULL)
        return NULL;
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    oj_tensor *wc = weight && out ? oj__nn_contig(weight) : NULL;
    bool ok = out && (!weight || wc);
    oj_node *nd = ok ? oj__node_begin(eng, op, rms_norm_rotary_backward, 2, x, weight) : NULL;
    oj_tensor *rstd = NULL;
    if (nd) {
        int64_t N[1] = {D > 0 ? oj_numel(x) / D : 0};
        ok = (rstd = oj__tensor_alloc(eng, 1, N, oj__nn_stat_dtype(x->dtype), op)) != NULL;
    }
    if (ok)
        ok = oj__kernel_ok(eng, be->rms_norm_rotary_forward(eng, out, rstd, x, wc, eps,
                                                            position_offset, theta),
                           op);
    if (ok && nd) {
        nd->i[0] = position_offset;
        nd->i[1] = weight != NULL;
        nd->f[0] = theta;
        oj__node_save(nd, x);
        oj__nn_save_temp(nd, rstd);
        if (weight) oj__nn_save_temp(nd, wc);
        wc = NULL;
        oj__node_finish(nd, 1, &out);
    } else {
        oj__node_abort(nd);
        oj_release(rstd);
    }
    oj_release(wc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}
