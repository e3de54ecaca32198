/* The value residual of nanolab's attention, v = v0 + s (v1 - v0) (Zhou et
 * al. 2024, "Value Residual Learning For Alleviating Attention
 * Concentration In Transformers"; s = sigmoid(lambda) per layer, as
 * modded-nanogpt). Under autocast v1 and v0 are bf16/f16 and s is f32, so
 * the ops' chain runs sub in bf16, then the multiply and add in f32
 * (PyTorch's promotion of a bf16 tensor and an f32 one of one element), and
 * attention, where autocast casts its inputs to bf16, takes the sum back
 * in bf16: the op's result is that bf16 tensor, v1's dtype, whichever path
 * makes it. Where the backend has the fused entries, one pass each way
 * gives those bits directly (and saves v1 and v0, views of buffers kept
 * anyway, instead of the difference); elsewhere the chain ends with the
 * cast. */
#include "ops/nn_common.h"

/* saved: 0 v1, 1 v0, 2 s. */
static oj_status value_mix_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *v1 = oj__node_saved(n, 0), *v0 = oj__node_saved(n, 1), *s = oj__node_saved(n, 2);
    if (!v1 || !v0 || !s) return oj_last_status(eng);
    const oj_edge *e = &n->in[0];
    oj_tensor *g = go[0] ? oj_retain(go[0]) : oj_zeros(eng, e->rank, e->shape, e->dtype);
    const int r = g ? g->rank : 0;
    if (g && r > 0 && g->shape[r - 1] > 1 && g->stride[r - 1] != 1) { /* the kernel's layout */
        oj_tensor *c = oj__contiguous(g);
        oj_release(g);
        g = c;
    }
    oj_tensor *dv1 = NULL, *dv0 = NULL, *ds = NULL;
    bool ok = g != NULL;
    if (ok && oj__node_needs(n, 0))
        ok = (dv1 = oj__tensor_alloc(eng, e->rank, e->shape, e->dtype, n->op)) != NULL;
    if (ok && oj__node_needs(n, 1))
        ok = (dv0 = oj__tensor_alloc(eng, e->rank, e->shape, e->dtype, n->op)) != NULL;
    if (ok && oj__node_needs(n, 2))
        ok = (ds = oj__tensor_alloc(eng, n->in[2].rank, n->in[2].shape, OJ_F32, n->op)) != NULL;
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->value_mix_backward(eng, dv1, dv0, ds, g, v1, v0, s),
                           n->op);
    oj_release(g);
    if (!ok) {
        oj_release(dv1);
        oj_release(dv0);
        oj_release(ds);
        return oj_last_status(eng);
    }
    gi[0] = dv1, gi[1] = dv0, gi[2] = ds;
    return OJ_OK;
}

/* v1, v0 bf16/f16 of one dtype and s f32 with one element: the autocast
 * case, whose result is v1's dtype on either path. */
static bool low_mix(const oj_tensor *v1, const oj_tensor *v0, const oj_tensor *s) {
    return (v1->dtype == OJ_BF16 || v1->dtype == OJ_F16) && v0->dtype == v1->dtype &&
           s->dtype == OJ_F32 && oj_numel(s) == 1;
}

bool oj__value_mix_fits(const oj_engine *eng, const oj_tensor *v1, const oj_tensor *v0,
                        const oj_tensor *s) {
    const oj_backend *be = eng->backend;
    const int r = v1->rank;
    if (be->value_mix_forward == NULL || be->value_mix_backward == NULL || r < 1 || r > 4 ||
        !low_mix(v1, v0, s) || v0->rank != r || v0->eng != eng || s->eng != eng)
        return false;
    for (int d = 0; d < r; d++)
        if (v0->shape[d] != v1->shape[d]) return false;
    if (v1->shape[r - 1] > 1 && (v1->stride[r - 1] != 1 || v0->stride[r - 1] != 1)) return false;
    for (int d = 0; d < s->rank; d++)
        if (s->stride[d] != 1 && s->shape[d] != 1) return false;
    return true;
}

oj_tensor *oj__value_mix(oj_tensor *v1, oj_tensor *v0, oj_tensor *s) {
    const char *op = "value_mix";
    oj_tensor *ins[3] = {v1, v0, s};
    oj_engine *eng = oj__ops_engine(op, 3, ins);
    if (eng == NULL) return NULL;
    if (!oj__value_mix_fits(eng, v1, v0, s)) { /* the chain, each op with its node */
        oj_tensor *diff = oj_sub(v1, v0);
        oj_tensor *a = diff ? oj_mul(diff, s) : NULL;
        oj_tensor *v = a ? oj_add(v0, a) : NULL;
        oj_release(diff);
        oj_release(a);
        if (v && low_mix(v1, v0, s) && v->dtype != v1->dtype) { /* the fused entry's dtype */
            oj_tensor *c = oj_cast(v, v1->dtype);
            oj_release(v);
            v = c;
        }
        return v;
    }
    oj_tensor *out = oj__tensor_alloc(eng, v1->rank, v1->shape, v1->dtype, op);
    if (out == NULL) return NULL;
    if (!oj__kernel_ok(eng, eng->backend->value_mix_forward(eng, out, v1, v0, s), op)) {
        oj_release(out);
        return NULL;
    }
    oj_node *nd = oj__node_begin(eng, op, value_mix_backward, 3, v1, v0, s);
    if (nd) {
        oj__node_save(nd, v1);
        oj__node_save(nd, v0);
        oj__node_save(nd, s);
        oj__node_finish(nd, 1, &out);
    }
    return out;
}
