/* embedding: rows of a table picked by indices; backward scatters the
 * output gradient back into the rows in index order (deterministic). */
#include "ops/nn_common.h"

static oj_status embedding_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *idx = oj__node_saved(n, 0); // (N)
    if (idx == NULL) return oj_last_status(eng);
    const oj_edge *e = &n->in[0];         // weight (V,C)
    oj_tensor *gc = oj__nn_contig(go[0]); // (..., C)
    oj_tensor *g2 = gc ? oj__nn_rows(gc) : NULL;
    oj_tensor *dw = g2 ? oj__tensor_alloc(eng, 2, e->shape, e->dtype, n->op) : NULL;
    oj_status st = dw ? eng->backend->embedding_backward(eng, dw, g2, idx) : oj_last_status(eng);
    oj_release(g2);
    oj_release(gc);
    if (!oj__kernel_ok(eng, st, n->op)) {
        oj_release(dw);
        return oj_last_status(eng);
    }
    gi[0] = dw;
    return OJ_OK;
}

oj_tensor *oj_embedding(oj_tensor *weight, oj_tensor *indices) {
    const char *op = "embedding";
    oj_tensor *ins[2] = {weight, indices};
    oj_engine *eng = oj__ops_engine(op, 2, ins);
    if (eng == NULL) return NULL;
    if (!oj__nn_check_float(eng, op, "weight", weight) ||
        !oj__nn_check_index(eng, op, "indices", indices))
        return NULL;
    char b1[160];
    if (weight->rank != 2) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: weight must be [V, C], got %s", op,
                     oj__shape_fmt(b1, sizeof b1, weight->rank, weight->shape));
        return NULL;
    }
    if (indices->rank > OJ_MAX_RANK - 1) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: indices of rank %d leave no room for C (max rank %d)",
                     op, indices->rank, OJ_MAX_RANK - 1);
        return NULL;
    }
    oj_status (*k)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *) =
        OJ_KERNEL(eng, embedding_forward, op);
    if (k == NULL || OJ_KERNEL(eng, embedding_backward, op) == NULL) return NULL;
    int64_t C = weight->shape[1], N = oj_numel(indices);
    int64_t oshape[OJ_MAX_RANK], fshape[1] = {N}, o2[2] = {N, C};
    for (int d = 0; d < indices->rank; d++) oshape[d] = indices->shape[d];
    oshape[indices->rank] = C;
    oj_tensor *out = oj__tensor_alloc(eng, indices->rank + 1, oshape, weight->dtype, op);
    oj_tensor *wc = out ? oj__nn_contig(weight) : NULL;
    oj_tensor *ic = wc ? oj__nn_contig(indices) : NULL;
    oj_tensor *iflat = ic ? oj__tensor_view(ic, 1, fshape, NULL, ic->offset) : NULL;
    oj_tensor *out2 = iflat ? oj__tensor_view(out, 2, o2, NULL, out->offset) : NULL;
    bool ok = out2 && oj__kernel_ok(eng, k(eng, out2, wc, iflat), op);
    if (ok) {
        oj_node *nd = oj__node_begin(eng, op, embedding_backward, 1, weight);
        if (nd) {
            oj__nn_save_temp(nd, iflat);
            iflat = NULL;
            oj__node_finish(nd, 1, &out);
        }
    }
    oj_release(out2);
    oj_release(iflat);
    oj_release(ic);
    oj_release(wc);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}
