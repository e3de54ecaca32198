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
