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

/* ---------------------------------------------------------------- QK-norm + rotary + attention */

/* q = rms_norm_rotary(x) by the backend's fused entry (no weight), with
 * its rstd: the op's own kernel call (oj_rms_norm_rotary), unrecorded.
 * false with the error recorded. */
static bool qk_norm_rotary(oj_engine *eng, const char *op, const oj_tensor *x, double eps,
                           int64_t pos, double theta, oj_tensor **out, oj_tensor **rstd) {
    const int64_t D = x->shape[x->rank - 1];
    int64_t N[1] = {D > 0 ? oj_numel(x) / D : 0};
    *out = oj__tensor_alloc(eng, x->rank, x->shape, x->dtype, op);
    *rstd = *out ? oj__tensor_alloc(eng, 1, N, oj__nn_stat_dtype(x->dtype), op) : NULL;
    if (*rstd && oj__kernel_ok(eng, eng->backend->rms_norm_rotary_forward(eng, *out, *rstd, x, NULL,
                                                                         eps, pos, theta),
                               op))
        return true;
    oj_release(*out);
    oj_release(*rstd);
    *out = *rstd = NULL;
    return false;
}

/* v = value_mix(v1, v0, s) by the backend's entry into a new contiguous
 * tensor, unrecorded; NULL with the error recorded. */
static oj_tensor *mixed_v(oj_engine *eng, const char *op, const oj_tensor *v1, const oj_tensor *v0,
                          const oj_tensor *s) {
    oj_tensor *v = oj__tensor_alloc(eng, v1->rank, v1->shape, v1->dtype, op);
    if (v && !oj__kernel_ok(eng, eng->backend->value_mix_forward(eng, v, v1, v0, s), op)) {
        oj_release(v);
        v = NULL;
    }
    return v;
}

/* saved: 0 q1, 1 k1, 2 v (with the value residual: v1), 3 out, 4 lse,
 * and with it 5 v0, 6 s; i[0] position offset, i[1] the value residual
 * (inputs q1, k1, v1, v0, s); f[0] scale, f[1] eps, f[2] theta. q and k
 * (and v) are made again from q1 and k1 (v1, v0, s) by their kernels
 * (the same bits), then attention's backward entry, rms_norm_rotary's
 * and value_mix's, as the ops' nodes run them (the gradients of q1, k1
 * and v1 written through their strides where oj__mirror_grads lays them
 * out: the same values). */
static oj_status qk_attention_backward(oj_node *n, oj_tensor *const *go, oj_tensor **gi) {
    oj_engine *eng = n->eng;
    const bool mix = n->i[1] != 0;
    oj_tensor *s[7] = {0};
    for (int j = 0; j < (mix ? 7 : 5); j++)
        if ((s[j] = oj__node_saved(n, j)) == NULL) return oj_last_status(eng);
    const int64_t pos = n->i[0];
    const double scale = n->f[0], eps = n->f[1], theta = n->f[2];
    oj_tensor *q = NULL, *rq = NULL, *k = NULL, *rk = NULL, *v = NULL, *d[3] = {NULL, NULL, NULL};
    oj_tensor *dq1 = NULL, *dk1 = NULL, *dv1 = NULL, *dv0 = NULL, *ds = NULL;
    const bool nq = oj__node_needs(n, 0), nk = oj__node_needs(n, 1), nv = oj__node_needs(n, 2);
    const bool nv0 = mix && oj__node_needs(n, 3), ns = mix && oj__node_needs(n, 4);
    bool ok = qk_norm_rotary(eng, n->op, s[0], eps, pos, theta, &q, &rq) &&
              qk_norm_rotary(eng, n->op, s[1], eps, pos, theta, &k, &rk);
    if (ok && mix) ok = (v = mixed_v(eng, n->op, s[2], s[5], s[6])) != NULL;
    /* q1, k1 and v1 (or v when it is a head view of the same projection)
     * get their gradients where they lie in a buffer laid out like the
     * projection (oj__mirror_grads): the views' and the split's backward
     * then pass them on without copies */
    oj_tensor *mg[3] = {NULL, NULL, NULL};
    const bool rows = s[0]->shape[3] <= 1 || s[0]->stride[3] == 1; /* the kernels' dx */
    int r = ok && rows && nq && nk && nv ? oj__mirror_grads(eng, n->op, 3, s, mg) : 0;
    if (r == 0 && ok && rows && nq && nk) r = oj__mirror_grads(eng, n->op, 2, s, mg);
    ok = ok && r >= 0;
    dq1 = mg[0], dk1 = mg[1];
    if (mix)
        dv1 = mg[2];
    else
        d[2] = mg[2];
    const bool ndv = mix ? nv || nv0 || ns : nv; /* attention's dv wanted */
    for (int j = 0; j < 3 && ok; j++) {
        const oj_tensor *t = j == 0 ? q : j == 1 ? k : mix ? v : s[2];
        if ((j == 0 && nq) || (j == 1 && nk) || (j == 2 && ndv && d[2] == NULL))
            ok = (d[j] = oj__tensor_alloc(eng, 4, t->shape, t->dtype, n->op)) != NULL;
    }
    if (ok)
        ok = oj__kernel_ok(eng, eng->backend->attention_backward(eng, d[0], d[1], d[2], go[0], q, k,
                                                                 mix ? v : s[2], s[3], s[4], NULL,
                                                                 true, scale),
                           n->op);
    if (ok && nq && dq1 == NULL)
        ok = (dq1 = oj__tensor_alloc(eng, 4, n->in[0].shape, n->in[0].dtype, n->op)) != NULL;
    if (ok && nq)
        ok = oj__kernel_ok(eng, eng->backend->rms_norm_rotary_backward(eng, dq1, d[0], s[0], rq, NULL,
                                                                       pos, theta),
                           n->op);
    if (ok && nk && dk1 == NULL)
        ok = (dk1 = oj__tensor_alloc(eng, 4, n->in[1].shape, n->in[1].dtype, n->op)) != NULL;
    if (ok && nk)
        ok = oj__kernel_ok(eng, eng->backend->rms_norm_rotary_backward(eng, dk1, d[1], s[1], rk, NULL,
                                                                       pos, theta),
                           n->op);
    if (mix && ok && (nv || nv0 || ns)) { /* value_mix's rule on attention's dv */
        const oj_edge *e1 = &n->in[2], *e0 = &n->in[3], *es = &n->in[4];
        if (nv && dv1 == NULL)
            ok = (dv1 = oj__tensor_alloc(eng, e1->rank, e1->shape, e1->dtype, n->op)) != NULL;
        if (ok && nv0)
            ok = (dv0 = oj__tensor_alloc(eng, e0->rank, e0->shape, e0->dtype, n->op)) != NULL;
        if (ok && ns) ok = (ds = oj__tensor_alloc(eng, es->rank, es->shape, OJ_F32, n->op)) != NULL;
        if (ok)
            ok = oj__kernel_ok(eng, eng->backend->value_mix_backward(eng, nv ? dv1 : NULL, dv0, ds,
                                                                     d[2], s[2], s[5], s[6]),
                               n->op);
    }
    oj_tensor *tmp[] = {q, rq, k, rk, v, d[0], d[1], mix ? d[2] : NULL};
    for (size_t j = 0; j < sizeof tmp / sizeof tmp[0]; j++) oj_release(tmp[j]);
    if (mix && !nv) { /* a mirror view made for v1 without its gradient wanted */
        oj_release(dv1);
        dv1 = NULL;
    }
    if (!ok) {
        oj_tensor *outs[] = {dq1, dk1, dv1, dv0, ds, mix ? NULL : d[2]};
        for (size_t j = 0; j < sizeof outs / sizeof outs[0]; j++) oj_release(outs[j]);
        return oj_last_status(eng) ? oj_last_status(eng) : OJ_ERR_INTERNAL;
    }
    gi[0] = dq1, gi[1] = dk1, gi[2] = mix ? dv1 : d[2];
    if (mix) gi[3] = dv0, gi[4] = ds;
    return OJ_OK;
}

oj_tensor *oj__attention_qk_norm_rotary(oj_tensor *q1, oj_tensor *k1, oj_tensor *v, double eps,
                                        int64_t pos, double theta) {
    return oj__attention_qk_norm_rotary_mix(q1, k1, v, NULL, NULL, eps, pos, theta);
}

oj_tensor *oj__attention_qk_norm_rotary_mix(oj_tensor *q1, oj_tensor *k1, oj_tensor *v1,
                                            oj_tensor *v0, oj_tensor *s, double eps, int64_t pos,
                                            double theta) {
    const char *op = "attention_qk_norm_rotary";
    const bool mix = v0 != NULL || s != NULL;
    oj_tensor *ins[5] = {q1, k1, v1, v0, s};
    oj_engine *eng = q1 && k1 && v1 && (!mix || (v0 && s)) ? oj__ops_engine(op, mix ? 5 : 3, ins)
                                                            : NULL;
    if (eng == NULL) return NULL;
    const oj_backend *be = eng->backend;
    bool fused = be->rms_norm_rotary_forward && be->rms_norm_rotary_backward &&
                 be->attention_forward && be->attention_backward && q1->rank == 4 &&
                 k1->rank == 4 && k1->dtype == q1->dtype && v1->dtype == q1->dtype &&
                 (!oj_autocast_enabled(eng) || q1->dtype == oj_autocast_dtype(eng)) &&
                 q1->shape[3] % 2 == 0 && eps >= 0.0 && !isinf(eps) &&
                 (!mix || oj__value_mix_fits(eng, v1, v0, s));
    if (!fused) { /* the value residual as its op, then the joint node or the three ops */
        oj_tensor *v = mix ? oj__value_mix(v1, v0, s) : oj_retain(v1), *y = NULL;
        if (v && mix) {
            y = oj__attention_qk_norm_rotary(q1, k1, v, eps, pos, theta);
        } else if (v) {
            oj_tensor *q = oj_rms_norm_rotary(q1, NULL, eps, pos, theta);
            oj_tensor *k = q ? oj_rms_norm_rotary(k1, NULL, eps, pos, theta) : NULL;
            y = k ? oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN) : NULL;
            oj_release(q);
            oj_release(k);
        }
        oj_release(v);
        return y;
    }
    oj_tensor *q = NULL, *rq = NULL, *k = NULL, *rk = NULL, *out = NULL, *lse = NULL;
    oj_tensor *v = mix ? mixed_v(eng, op, v1, v0, s) : oj_retain(v1);
    bool ok = v && qk_norm_rotary(eng, op, q1, eps, pos, theta, &q, &rq) &&
              qk_norm_rotary(eng, op, k1, eps, pos, theta, &k, &rk) &&
              attention_check(eng, op, q, k, v, NULL);
    oj_release(rq);
    oj_release(rk);
    int64_t B = q1->shape[0], H = q1->shape[1], T = q1->shape[2], D = q1->shape[3];
    int64_t full[4] = {B, H, T, ok ? k->shape[2] : 0}, oshape[4] = {B, H, T, v1->shape[3]};
    const double scale = D > 0 ? 1.0 / sqrt((double)D) : 1.0;
    if (ok) ok = (out = alloc_heads_last(eng, oshape, q->dtype, op)) != NULL;
    oj_node *nd = ok ? oj__node_begin_v(eng, op, qk_attention_backward, mix ? 5 : 3, ins) : NULL;
    if (nd) ok = (lse = oj__tensor_alloc(eng, 3, full, oj__nn_stat_dtype(q->dtype), op)) != NULL;
    if (ok)
        ok = oj__kernel_ok(eng, be->attention_forward(eng, out, lse, q, k, v, NULL, true, scale),
                           op);
    oj_release(q);
    oj_release(k);
    oj_release(v); /* with the value residual: made again in the backward, not kept */
    if (ok && nd) {
        nd->i[0] = pos;
        nd->i[1] = mix;
        nd->f[0] = scale, nd->f[1] = eps, nd->f[2] = theta;
        oj__node_save(nd, q1);
        oj__node_save(nd, k1);
        oj__node_save(nd, v1);
        oj__nn_save_temp(nd, oj__nn_alias(out));
        oj__nn_save_temp(nd, lse);
        lse = NULL;
        if (mix) {
            oj__node_save(nd, v0);
            oj__node_save(nd, s);
        }
        oj__node_finish(nd, 1, &out);
    } else {
        oj__node_abort(nd);
    }
    oj_release(lse);
    if (!ok) {
        oj_release(out);
        return NULL;
    }
    return out;
}
