/* scaled_dot_product_attention: validation, GQA and mask broadcasting,
 * then the fused online-softmax kernels (forward saves out and the row
 * logsumexp; backward recomputes probabilities tile by tile). */
#include <math.h>

#include "ops/nn_common.h"

/* d[0..2] = gradients for q, k, v (x[0..2]): views of one buffer laid out
 * like x when they tile one block (oj__tiled_grads: no copy of dq, dk, dv
 * in the views' and the split's backward), else contiguous tensors. Only
 * the gradients wanted are made (the shared buffer needs all three).
 * false with the error recorded. */
static bool alloc_input_grads(oj_node *n, oj_tensor *const *x, oj_tensor **d) {
    oj_engine *eng = n->eng;
    bool all = oj__node_needs(n, 0) && oj__node_needs(n, 1) && oj__node_needs(n, 2);
    int r = all ? oj__tiled_grads(eng, n->op, 3, x, d) : 0;
    if (r != 0) return r > 0;
    for (int j = 0; j < 3; j++)
        if (oj__node_needs(n, j) &&
            (d[j] = oj__tensor_alloc(eng, 4, n->in[j].shape, n->in[j].dtype, n->op)) == NULL)
            return false;
    return true;
}

/* saved: 0 q, 1 k, 2 v, 3 out, 4 lse, 5 mask view (if i[1]).
 * i[0] is_causal, i[1] has mask; f[0] scale */
static oj_status attention_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    oj_tensor *s[6] = {0};
    int ns = n->i[1] ? 6 : 5;
    for (int j = 0; j < ns; j++)
        if ((s[j] = oj__node_saved(n, j)) == NULL) return oj_last_status(eng);
    oj_tensor *d[3] = {0};
    bool ok = alloc_input_grads(n, s, d);
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->attention_backward(eng, d[0], d[1], d[2], go[0], s[0],
                                                                 s[1], s[2], s[3], s[4], s[5],
                                                                 n->i[0] != 0, n->f[0]),
                           n->op);
    if (!ok) {
        for (int j = 0; j < 3; j++) oj_release(d[j]);
        return oj_last_status(eng);
    }
    for (int j = 0; j < 3; j++) gi[j] = d[j];
    return OJ_OK;
}

/* out [B, H, T, Dv] as a view of fresh [B, T, H, Dv] storage (strides
 * T H Dv, Dv, H Dv, 1): FlashAttention's native layout, so merging the
 * heads afterwards (transpose(1, 2) then reshape to [B, T, H Dv]) is a
 * view, not a copy. NULL with the error recorded. */
static oj_tensor *alloc_heads_last(oj_engine *eng, const int64_t *oshape, oj_dtype dt,
                                   const char *op) {
    int64_t B = oshape[0], H = oshape[1], T = oshape[2], Dv = oshape[3];
    int64_t bshape[4] = {B, T, H, Dv};
    oj_tensor *base = oj__tensor_alloc(eng, 4, bshape, dt, op);
    if (base == NULL) return NULL;
    int64_t st[4] = {T * H * Dv, Dv, H * Dv, 1};
    oj_tensor *out = oj__tensor_view(base, 4, oshape, st, base->offset);
    oj_release(base);
    return out;
}

static bool attention_check(oj_engine *eng, const char *op, oj_tensor *q, oj_tensor *k,
                            oj_tensor *v, oj_tensor *mask) {
    if (!oj__nn_check_float(eng, op, "q", q) || !oj__nn_check_same_dtype(eng, op, "k", k, "q", q) ||
        !oj__nn_check_same_dtype(eng, op, "v", v, "q", q))
        return false;
    char b1[160], b2[160], b3[160];
    oj__shape_fmt(b1, sizeof b1, q->rank, q->shape);
    oj__shape_fmt(b2, sizeof b2, k->rank, k->shape);
    oj__shape_fmt(b3, sizeof b3, v->rank, v->shape);
    const char *why = NULL;
    if (q->rank != 4 || k->rank != 4 || v->rank != 4)
        why = "q, k, v must be [B, H, T, D], [B, Hkv, S, D], [B, Hkv, S, Dv]";
    else if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0])
        why = "batch sizes B differ";
    else if (k->shape[3] != q->shape[3])
        why = "q and k head dims D differ";
    else if (v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2])
        why = "k and v must have the same Hkv and S";
    else if (k->shape[1] < 1 ? q->shape[1] != 0 : q->shape[1] % k->shape[1] != 0)
        why = "the number of query heads H must be a multiple of the kv heads Hkv";
    if (why) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: q %s, k %s, v %s do not fit: %s", op, b1, b2, b3,
                     why);
        return false;
    }
    if (mask == NULL) return true;
    if (mask->dtype != OJ_BOOL && !oj_dtype_is_float(mask->dtype)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: mask must be bool (true = keep) or float (added), got %s",
                     op, oj_dtype_name(mask->dtype));
        return false;
    }
    int64_t full[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]};
    bool fits = mask->rank <= 4;
    for (int d = 0; fits && d < mask->rank; d++) {
        int64_t m = mask->shape[d], f = full[4 - mask->rank + d];
        fits = m == f || m == 1;
    }
    if (!fits) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: mask %s does not broadcast to [B, H, T, S] = %s", op,
                     oj__shape_fmt(b1, sizeof b1, mask->rank, mask->shape),
                     oj__shape_fmt(b2, sizeof b2, 4, full));
        return false;
    }
    return true;
}

oj_tensor *oj_scaled_dot_product_attention(oj_tensor *q, oj_tensor *k, oj_tensor *v,
                                           oj_tensor *mask, bool is_causal, double scale) {
    const char *op = "scaled_dot_product_attention";
    oj_tensor *ins[4] = {q, k, v, mask};
    OJ__AUTOCAST(OJ__AUTOCAST_LOW, 4, ins,
                 oj_scaled_dot_product_attention(ac[0], ac[1], ac[2], ac[3], is_causal, scale));
    oj_engine *eng = q && k && v ? oj__ops_engine(op, mask ? 4 : 3, ins) : NULL;
    if (eng == NULL || !attention_check(eng, op, q, k, v, mask)) return NULL;
    if (OJ_KERNEL(eng, attention_forward, op) == NULL ||
        OJ_KERNEL(eng, attention_backward, op) == NULL)
        return NULL;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t S = k->shape[2], Dv = v->shape[3];
    if (isnan(scale)) scale = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
    int64_t full[4] = {B, H, T, S}, oshape[4] = {B, H, T, Dv};
    oj_tensor *mv = mask ? oj__broadcast_view(mask, 4, full) : NULL;
    oj_tensor *out = !mask || mv ? alloc_heads_last(eng, oshape, q->dtype, op) : NULL;
    bool ok = out != NULL;
    oj_node *nd = ok ? oj__node_begin(eng, op, attention_backward, 3, q, k, v) : NULL;
    oj_tensor *lse = NULL;
    if (nd) ok = (lse = oj__tensor_alloc(eng, 3, full, oj__nn_stat_dtype(q->dtype), op)) != NULL;
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->attention_forward(eng, out, lse, q, k, v, mv,
                                                                is_causal, scale),
                           op);
    if (ok && nd) {
        nd->i[0] = is_causal;
        nd->i[1] = mask != NULL;
        nd->f[0] = scale;
        oj__node_save(nd, q);
        oj__node_save(nd, k);
        oj__node_save(nd, v);
        oj__nn_save_temp(nd, oj__nn_alias(out));
        oj__nn_save_temp(nd, lse);
        lse = NULL;
        if (mv) {
            oj__nn_save_temp(nd, mv);
            mv = NULL;
        }
        oj__node_finish(nd, 1, &out);
    } else {
        oj__node_abort(nd);
    }
    oj_release(lse);
    oj_release(mv);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}
