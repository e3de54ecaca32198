/* rotary_embedding (RoFormer, Su et al. 2021), half-split layout; the
 * backward is the rotation by the negative angle. */
#include <math.h>

#include "ops/nn_common.h"

/* Rotate contiguous x into a new tensor (inverse: by -angle). */
static oj_tensor *rotate(oj_engine *eng, const char *op, oj_tensor *x, int64_t pos, double theta,
                         bool inverse) {
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    oj_tensor *xc = out ? oj__nn_contig(x) : NULL;
    bool ok = xc && oj__kernel_ok(eng, eng->backend->rotary_embedding(eng, out, xc, pos, theta,
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
    gi[0] = rotate(n->eng, n->op, go[0], n->i[0], n->f[0], true);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

oj_tensor *oj_rotary_embedding(oj_tensor *x, int64_t position_offset, double theta) {
    const char *op = "rotary_embedding";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL || !oj__nn_check_float(eng, op, "x", x)) return NULL;
    if (x->rank < 2 || x->shape[x->rank - 1] % 2 != 0) {
        char b[160];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: x must be [B, H, T, D] (or [..., T, D]) with D even, got %s",
                     op, oj__shape_fmt(b, sizeof b, x->rank, x->shape));
        return NULL;
    }
    if (!(theta > 0.0) || isinf(theta)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: theta must be finite and > 0, got %g", op,
                     theta);
        return NULL;
    }
    if (position_offset > INT64_MAX - x->shape[x->rank - 2]) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                     "%s: position_offset %lld + %lld positions overflows int64", op,
                     (long long)position_offset, (long long)x->shape[x->rank - 2]);
        return NULL;
    }
    if (OJ_KERNEL(eng, rotary_embedding, op) == NULL) return NULL;
    oj_tensor *out = rotate(eng, op, x, position_offset, theta, false);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(eng, op, rotary_backward, 1, x);
    if (nd) {
        nd->i[0] = position_offset;
        nd->f[0] = theta;
        oj__node_finish(nd, 1, &out);
    }
    return out;
}
