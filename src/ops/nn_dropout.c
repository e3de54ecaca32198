/* dropout with a counter-based Philox mask: the node keeps only (seed,
 * counter), and the backward regenerates the same mask on the gradient. */
#include <math.h>

#include "ops/nn_common.h"

/* Apply the mask of (seed, offset) to contiguous x. */
static oj_tensor *apply_mask(oj_engine *eng, const char *op, oj_tensor *x, double p,
                             uint64_t seed, uint64_t offset) {
    oj_tensor *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    oj_tensor *xc = out ? oj__nn_contig(x) : NULL;
    bool ok = xc && oj__kernel_ok(eng, eng->backend->dropout(eng, out, xc, p, seed, offset), op);
    oj_release(xc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}

/* i[0] seed, i[1] counter offset; f[0] p */
static oj_status dropout_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    gi[0] = apply_mask(n->eng, n->op, go[0], n->f[0], (uint64_t)n->i[0], (uint64_t)n->i[1]);
    return gi[0] ? OJ_OK : oj_last_status(n->eng);
}

oj_tensor *oj_dropout(oj_tensor *x, double p, bool training) {
    const char *op = "dropout";
    oj_engine *eng = oj__ops_engine1(op, x);
    if (eng == NULL || !oj__nn_check_float(eng, op, "x", x)) return NULL;
    if (!(p >= 0.0 && p <= 1.0)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: p must be in [0, 1], got %g", op, p);
        return NULL;
    }
    if (!training || p == 0.0) return oj_expand(x, x->rank, x->shape); /* identity view */
    if (OJ_KERNEL(eng, dropout, op) == NULL) return NULL;
    uint64_t n = (uint64_t)oj_numel(x);
    uint64_t seed = eng->seed, offset = oj__rng_advance(eng, (n + 3) / 4);
    oj_tensor *out = apply_mask(eng, op, x, p, seed, offset);
    if (out == NULL) return NULL;
    oj_node *nd = oj__node_begin(eng, op, dropout_backward, 1, x);
    if (nd) {
        nd->i[0] = (int64_t)seed;
        nd->i[1] = (int64_t)offset;
        nd->f[0] = p;
        oj__node_finish(nd, 1, &out);
    }
    return out;
}
