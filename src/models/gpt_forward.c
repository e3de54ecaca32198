/* GPT forward pass, shared by training (tape), full recompute, cached
 * decoding and the static decode step (positions held on the device, so a
 * CUDA graph can replay it; gpt_decoder.c). Shapes: B batch, T new tokens,
 * P = past (cached) positions, C width, H heads, Hkv KV heads, D head dim,
 * F MLP width, V vocabulary, N the cache capacity. */
#include <math.h>
#include <stdio.h>

#include "core/env.h"
#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"
#include "ops/nn_common.h"

/* [B, T, n*D] -> [B, n, T, D] */
static oj_tensor *split_heads(oj_tensor *x, int64_t n, int64_t D) {
    int64_t s[4] = {oj_size(x, 0), oj_size(x, 1), n, D};
    oj_tensor *v = oj_reshape(x, 4, s);
    oj_tensor *t = oj_transpose(v, 1, 2);
    oj_release(v);
    return t;
}

/* [B, H, T, D] -> [B, T, H*D] */
static oj_tensor *merge_heads(oj_tensor *y) {
    int64_t s[3] = {oj_size(y, 0), oj_size(y, 2), oj_size(y, 1) * oj_size(y, 3)};
    oj_tensor *t = oj_transpose(y, 1, 2);
    oj_tensor *r = oj_reshape(t, 3, s);
    oj_release(t);
    return r;
}

/* HF Conv1D: x [.., in] @ w [in, out] + b (q: w^T quantized, or NULL). */
static oj_tensor *conv1d_hf(oj_tensor *x, oj_tensor *w, const oj_qtensor *q, oj_tensor *b) {
    oj_tensor *wt = oj_transpose(w, 0, 1); /* [out, in] view */
    oj_tensor *y = oj__gpt_linear(x, wt, q, b);
    oj_release(wt);
    return y;
}

/* cache [.., N, D] at slot `slot` (i64 [1] on the device) of its dim
 * `dim` (the positions) = x [.., 1, D], converted to the cache's dtype
 * (autocast computes k, v in bf16; the eager path's copy_ converts the
 * same way). */
static bool cache_write_at(oj_tensor *cache, int dim, oj_tensor *slot, oj_tensor *x) {
    oj_dtype dt = oj_tensor_dtype(cache);
    oj_tensor *xc = oj_tensor_dtype(x) == dt ? oj_retain(x) : oj_cast(x, dt);
    bool ok = xc && oj_index_copy_(cache, dim, slot, xc) == OJ_OK;
    oj_release(xc);
    return ok;
}

/* softmax(q k^T / sqrt(D)) v: over the new tokens alone or the cached
 * positions (causal, bottom-right aligned), or in the static step over
 * every slot of the cache with the slots not yet written masked. */
static oj_tensor *attend(oj_kv_cache *c, oj_tensor *q, oj_tensor *k, oj_tensor *v) {
    bool dev = c && c->dev;
    return oj_scaled_dot_product_attention(q, k, v, dev ? c->dev->mask : NULL, !dev, NAN);
}

/* Append k, v [B, Hkv, T, D] to the cache at its length and return views
 * of the keys/values to attend to in *k_all / *v_all: all cached positions
 * [B, Hkv, P+T, D] while they fit; once the cache is full it is a ring (a
 * sliding window): one new position overwrites the oldest slot and the
 * query attends to the whole ring. Order inside the ring does not matter:
 * rotary embeddings were applied at each key's absolute position before it
 * was cached, and a single query sees every cached key. */
static bool cache_append(oj_kv_cache *c, int l, oj_tensor *k, oj_tensor *v, oj_tensor *kv,
                         oj_tensor **k_all, oj_tensor **v_all) {
    if (c->dev) { /* the static step: slot and positions live on the device */
        oj_tensor *slot = c->dev->slot;
        /* kv [2, B, Hkv, 1, D] (keys then values, one view): one write */
        bool ok = kv ? cache_write_at(c->kv[l], 3, slot, kv)
                     : cache_write_at(c->k[l], 2, slot, k) && cache_write_at(c->v[l], 2, slot, v);
        *k_all = ok ? oj_retain(c->k[l]) : NULL; /* every slot, masked by dev->mask */
        *v_all = ok ? oj_retain(c->v[l]) : NULL;
        return ok;
    }
    int64_t T = oj_size(k, 2);
    bool ring = c->len + T > c->capacity; /* then T == 1 (checked by the caller) */
    int64_t slot = ring ? c->len % c->capacity : c->len;
    oj_tensor *kd = oj_narrow(c->k[l], 2, slot, T);
    oj_tensor *vd = oj_narrow(c->v[l], 2, slot, T);
    bool ok = kd && vd && oj_copy_(kd, k) == OJ_OK && oj_copy_(vd, v) == OJ_OK;
    oj_release(kd);
    oj_release(vd);
    if (!ok) return false;
    int64_t n = ring ? c->capacity : c->len + T;
    *k_all = oj_narrow(c->k[l], 2, 0, n);
    *v_all = oj_narrow(c->v[l], 2, 0, n);
    return *k_all && *v_all;
}

/* x [.., C] times n (<= 4) weights w[i] [n_out[i], C] (no bias) as one
 * linear over the weights concatenated along dim 0, split back into
 * outs[i] [.., n_out[i]] (views of one tensor, one split node). The same
 * values as n linears up to the GEMM's summation order; used while
 * training, where it saves the input's autocast copy per extra weight and
 * launches one GEMM. Rows are padded with zeros to a multiple of 8 so the
 * output rows are 16-byte aligned (nanolab's 2,316 columns put the GEMMs
 * on cuBLAS's slow 4-byte-aligned kernels and the head views off the
 * tensor-core attention); the last piece carries the padding, as a fifth
 * piece would exceed a node's 4 outputs. The cat copies the weights, so
 * decoding keeps n linears. */
static bool project_fused(oj_tensor *x, int n, oj_tensor *const *w, const int64_t *n_out,
                          oj_tensor **outs) {
    oj_tensor *ws[5] = {NULL, NULL, NULL, NULL, NULL}, *parts[4] = {NULL, NULL, NULL, NULL};
    int64_t sizes[4], total = 0;
    /* under autocast the weights are cast before the cat (the values of
     * the cat's cast; half the bytes concatenated). Plain casts, not the
     * kept weight copies: the cat is a copy made per step anyway, and
     * kept copies of these weights would add their bytes to the peak
     * (measured +0.19 GiB on nanolab-124m) for no time saved */
    oj_engine *eng = oj_tensor_engine(w[0]);
    const oj_dtype adt = oj_autocast_dtype(eng);
    const bool low = oj_autocast_enabled(eng) && oj_tensor_dtype(w[0]) == OJ_F32;
    bool ok = true;
    for (int i = 0; i < n; i++) sizes[i] = n_out[i], total += n_out[i];
    const int64_t pad = (8 - total % 8) % 8;
    if (pad) sizes[n - 1] += pad; /* the last piece carries the padding: still one split node */
    oj_tensor *wc = NULL;
    /* OJAS_CAST_ROWS=1: the casts, the cat and the padding in one launch
     * (and the casts' backward in one). Off by default: nanolab-124m's
     * graph step measured 40.38 ms without it, 40.76-40.88 with it (H200,
     * 2026-12-02, docs/bench-gpu.md) */
    if (low && oj__env_flag("OJAS_CAST_ROWS", false) && oj__cast_rows_fits(n, w)) {
        wc = oj__cast_rows(n, w, adt, pad);
        ok = wc != NULL;
    } else {
        for (int i = 0; i < n; i++) {
            ws[i] = low ? oj_cast(w[i], adt) : oj_retain(w[i]);
            ok = ok && ws[i] != NULL;
        }
        if (pad && ok) {
            int64_t zs[2] = {pad, oj_size(w[0], 1)};
            ws[n] = oj_zeros(eng, 2, zs, low ? adt : oj_tensor_dtype(w[0]));
            ok = ws[n] != NULL;
        }
        wc = ok ? oj_cat(pad ? n + 1 : n, ws, 0) : NULL;
        for (int i = 0; i <= n; i++) oj_release(ws[i]);
    }
    oj_tensor *y = wc ? oj_linear(x, wc, NULL) : NULL;
    int got = y ? oj_split_sizes(y, n, sizes, oj_rank(y) - 1, parts) : -1;
    for (int i = 0; i < n; i++) outs[i] = parts[i];
    if (got == n && pad) { /* the last piece without the padding's columns */
        outs[n - 1] = oj_narrow(parts[n - 1], oj_rank(y) - 1, 0, n_out[n - 1]);
        oj_release(parts[n - 1]);
        if (outs[n - 1] == NULL) got = -1;
    }
    oj_release(wc);
    oj_release(y);
    return got == n;
}

oj_tensor *oj__gpt_split_heads(oj_tensor *x, int64_t n, int64_t D) { return split_heads(x, n, D); }
oj_tensor *oj__gpt_merge_heads(oj_tensor *y) { return merge_heads(y); }

/* Attention of q [B, H, T, D] over k, v [B, Hkv, T, D] and, with a cache,
 * the cached positions (k, v appended to layer l's cache first). */
oj_tensor *oj__gpt_attend_cached(oj_kv_cache *c, int l, oj_tensor *q, oj_tensor *k, oj_tensor *v) {
    if (c && c->paged) return q && k && v ? oj__gpt_attend_paged(c, l, q, k, v) : NULL;
    oj_tensor *ka = NULL, *va = NULL, *y = NULL;
    if (q && k && v && (c == NULL || cache_append(c, l, k, v, NULL, &ka, &va)))
        y = attend(c, q, ka ? ka : k, va ? va : v);
    oj_release(ka);
    oj_release(va);
    return y;
}

static oj_tensor *attention_gpt2(oj_gpt *m, oj_gpt_block *b, int l, oj_tensor *h,
                                 oj_kv_cache *cache) {
    const int64_t C = m->cfg.n_embd, H = m->cfg.n_head, D = C / H;
    oj_tensor *qkv = conv1d_hf(h, b->c_attn_w, b->qc_attn, b->c_attn_b); /* [B, T, 3C] */
    qkv = oj__gpt_lora(m, b, OJ__LORA_C_ATTN, h, qkv);
    oj_tensor *qkv3[3] = {NULL, NULL, NULL}; /* one split: its backward is one cat */
    if (qkv) oj_split(qkv, C, 2, 3, qkv3);
    oj_tensor *q = qkv3[0], *k = qkv3[1], *v = qkv3[2];
    oj_tensor *qh = split_heads(q, H, D), *kh = split_heads(k, H, D), *vh = split_heads(v, H, D);
    oj_tensor *kv = NULL; /* the static step: k and v side by side, [2, B, H, T, D] */
    if (cache && cache->dev && !cache->paged && qkv) {
        int64_t s5[5] = {oj_size(qkv, 0), oj_size(qkv, 1), 2, H, D};
        const int p5[5] = {2, 0, 3, 1, 4};
        oj_tensor *n = oj_narrow(qkv, 2, C, 2 * C);
        oj_tensor *r = n ? oj_reshape(n, 5, s5) : NULL;
        kv = r ? oj_permute(r, 5, p5) : NULL;
        oj_release(r);
        oj_release(n);
    }
    oj_tensor *ka = NULL, *va = NULL, *y = NULL;
    bool kv_ok = cache == NULL || cache->dev == NULL || cache->paged || kv != NULL;
    if (cache && cache->paged)
        y = qh && kh && vh ? oj__gpt_attend_paged(cache, l, qh, kh, vh) : NULL;
    else if (kv_ok && (cache == NULL || cache_append(cache, l, kh, vh, kv, &ka, &va)))
        y = attend(cache, qh, ka ? ka : kh, va ? va : vh);
    oj_tensor *ym = merge_heads(y);
    oj_tensor *out = oj__gpt_lora(m, b, OJ__LORA_ATTN_C_PROJ, ym,
                                  conv1d_hf(ym, b->attn_proj_w, b->qattn_proj, b->attn_proj_b));
    oj_tensor *tmp[] = {qkv, q, k, v, qh, kh, vh, kv, ka, va, y, ym};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}

static oj_tensor *attention_nanolab(oj_gpt *m, oj_gpt_block *b, int l, oj_tensor *h,
                                    int64_t pos, oj_tensor **v_first, oj_kv_cache *cache) {
    const int64_t C = m->cfg.n_embd, H = m->cfg.n_head, Hkv = m->cfg.n_kv_head, D = C / H;
    const double eps = m->cfg.norm_eps, theta = m->cfg.rope_theta;
    oj_tensor *q0 = NULL, *k0 = NULL, *v0 = NULL, *g0 = NULL;
    if (oj_grad_enabled(m->eng)) {
        /* training: q, k, v and the gate as one GEMM over the weights
         * concatenated (one bf16 copy of h saved instead of four; the
         * input gradient summed inside one GEMM); b_g added to its slice */
        oj_tensor *w4[4] = {b->q_w, b->k_w, b->v_w, b->gate_w}, *o4[4] = {NULL, NULL, NULL, NULL};
        const int64_t n4[4] = {C, Hkv * D, Hkv * D, H};
        if (!project_fused(h, 4, w4, n4, o4)) return NULL;
        q0 = o4[0], k0 = o4[1], v0 = o4[2];
        /* the bias in the GEMM's dtype, as a linear under autocast adds it
         * (an f32 bias would promote the gate, and y * gate after it, to f32) */
        oj_tensor *gb = oj_tensor_dtype(b->gate_b) == oj_tensor_dtype(o4[3])
                            ? oj_retain(b->gate_b)
                            : oj_cast(b->gate_b, oj_tensor_dtype(o4[3]));
        g0 = oj_add(o4[3], gb);
        oj_release(gb);
        oj_release(o4[3]);
    } else {
        q0 = oj__gpt_linear(h, b->q_w, b->qq, NULL), k0 = oj__gpt_linear(h, b->k_w, b->qk, NULL);
        v0 = oj__gpt_linear(h, b->v_w, b->qv, NULL);
        g0 = oj__gpt_linear(h, b->gate_w, b->qgate, b->gate_b);
    }
    oj_tensor *q1 = split_heads(q0, H, D), *k1 = split_heads(k0, Hkv, D),
              *v1 = split_heads(v0, Hkv, D);
    /* RMS QK-norm over D (no weight), then rotary positions. Under
     * autocast the projections are already in the low dtype: the norm
     * reads them as they are (its kernels compute in f32) and writes the
     * low dtype, instead of autocast's f32 copy in, f32 out and a cast
     * back before attention: half the bytes saved for the backward (the
     * norm's input) and four fewer casts per layer. One rounding to bf16
     * more than PyTorch's autocast takes (the norm's output). */
    oj_engine *eng = m->eng;
    const bool ac = oj_autocast_enabled(eng);
    const oj_dtype adt = oj_autocast_dtype(eng);
    const bool low = ac && q1 && oj_tensor_dtype(q1) == adt;
    /* Value residual: v = s v + (1 - s) v0, s = sigmoid(lambda): under
     * autocast in the projections' dtype on every backend (the chain's
     * bits cast to it, as attention would cast it), one fused op where
     * the backend has it */
    oj_tensor *v = NULL, *s = NULL, *a = NULL, *c = NULL, *diff = NULL;
    const bool train = cache == NULL && oj_grad_enabled(eng) && q1 && k1 && v1 && (!ac || low);
    bool mix_joint = false; /* the value residual inside the joint node below */
    if (l == 0) {
        v = oj_retain(v1);
        *v_first = oj_retain(v1);
    } else {
        s = oj_sigmoid(b->lambda);
        mix_joint = train && s && oj__value_mix_fits(eng, v1, *v_first, s);
        v = s && v1 && !mix_joint ? oj__value_mix(v1, *v_first, s) : NULL;
    }
    /* training: norm, rotation and attention as one node that makes q
     * and k again in the backward rather than keeping them (the same
     * values; v in the projections' dtype, as the value residual gives
     * it), with the fused value residual also v, and v1's gradient
     * beside q1's and k1's in the projection's */
    const bool joint =
        train && (mix_joint || (v && oj_tensor_dtype(v) == oj_tensor_dtype(q1)));
    if (low) oj_set_autocast(eng, false, adt);
    oj_tensor *q2 = NULL, *k2 = NULL, *q = NULL, *k = NULL, *y = NULL;
    if (mix_joint) {
        y = oj__attention_qk_norm_rotary_mix(q1, k1, v1, *v_first, s, eps, pos, theta);
    } else if (joint) {
        y = oj__attention_qk_norm_rotary(q1, k1, v, eps, pos, theta);
    } else if (cache && cache->dev) { /* the position is read on the device */
        q2 = oj_rms_norm(q1, NULL, eps), k2 = oj_rms_norm(k1, NULL, eps);
        q = oj_rotary_embedding_at(q2, cache->dev->pos, theta);
        k = oj_rotary_embedding_at(k2, cache->dev->pos, theta);
    } else { /* norm and rotation in one pass over the head views */
        q = oj_rms_norm_rotary(q1, NULL, eps, pos, theta);
        k = oj_rms_norm_rotary(k1, NULL, eps, pos, theta);
    }
    if (low) oj_set_autocast(eng, true, adt);
    oj_tensor *ka = NULL, *va = NULL;
    if (!joint && (cache == NULL || cache_append(cache, l, k, v, NULL, &ka, &va)))
        y = attend(cache, q, ka ? ka : k, va ? va : v);
    /* Per-head output gate: sigmoid(h W_g + b_g) [B, T, H] -> [B, T, H, 1],
     * applied to y seen as [B, T, H, D] (attention's output is stored in
     * that order): the product comes out in the merged-head order, so
     * merging the heads is a view, not a copy */
    oj_tensor *g1 = oj_sigmoid(g0);
    oj_tensor *g3 = oj_unsqueeze(g1, 3);
    oj_tensor *g2 = y ? oj_transpose(y, 1, 2) : NULL; /* [B, T, H, D] */
    oj_tensor *yg = NULL, *ym = NULL, *out = NULL;
    if (oj_grad_enabled(eng)) { /* training: the gated output recomputed in the backward */
        out = g2 && g3 ? oj__mul_linear(g2, g3, b->o_w) : NULL;
    } else {
        yg = g2 && g3 ? oj_mul(g2, g3) : NULL;
        int64_t ms[3] = {oj_size(h, 0), oj_size(h, 1), C};
        ym = yg ? oj_reshape(yg, 3, ms) : NULL;
        out = oj__gpt_linear(ym, b->o_w, b->qo, NULL);
    }
    oj_tensor *tmp[] = {q0, k0, v0, q1, k1, v1, q2, k2, q, k, v, s, a, c, diff,
                        ka, va, y, g0, g1, g2, g3, yg, ym};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}

static oj_tensor *mlp(oj_gpt *m, oj_gpt_block *b, oj_tensor *h) {
    if (m->quantized && !oj_grad_enabled(m->eng)) { /* the quantized weights */
        oj_tensor *o = NULL;
        if (m->cfg.family == OJ_GPT2) {
            oj_tensor *u = conv1d_hf(h, b->c_fc_w, b->qc_fc, b->c_fc_b);
            oj_tensor *g = u ? oj_gelu_tanh(u) : NULL;
            oj_tensor *wt = g ? oj_transpose(b->mlp_proj_w, 0, 1) : NULL;
            o = wt ? oj__gpt_linear(g, wt, b->qmlp_proj, b->mlp_proj_b) : NULL;
            oj_release(u);
            oj_release(g);
            oj_release(wt);
            return o;
        }
        oj_tensor *gt, *up; /* [B, T, F] */
        if (oj__gpt_qfused(m, b->qgate_up)) { /* one product, [B, T, 2F] */
            const int64_t F = m->cfg.mlp_hidden;
            oj_tensor *y = oj__gpt_linear(h, NULL, b->qgate_up, NULL);
            gt = oj__gpt_qcols(y, 0, F, NULL);
            up = oj__gpt_qcols(y, F, F, NULL);
            oj_release(y);
        } else {
            gt = oj__gpt_linear(h, b->w_gate, b->qw_gate, NULL);
            up = oj__gpt_linear(h, b->w_up, b->qw_up, NULL);
        }
        oj_tensor *sg = gt ? oj_silu(gt) : NULL;
        oj_tensor *hu = sg && up ? oj_mul(sg, up) : NULL;
        o = hu ? oj__gpt_linear(hu, b->w_down, b->qw_down, NULL) : NULL;
        oj_tensor *tmp[] = {gt, up, sg, hu};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
        return o;
    }
    if (m->cfg.family == OJ_GPT2) {
        /* gelu(u) is recomputed in the backward instead of kept: [B, T, 4C]
         * less per layer (oj_gelu_linear); in the forward it comes from
         * the c_fc GEMM's epilogue where the backend has one (act, else
         * NULL: gelu_linear applies it) */
        oj_tensor *u = NULL, *act = NULL;
        if (b->lora_a[OJ__LORA_C_FC] == NULL && b->lora_a[OJ__LORA_MLP_C_PROJ] == NULL) {
            oj_tensor *ft = oj_transpose(b->c_fc_w, 0, 1); /* [out, in] view */
            u = ft ? oj__linear_gelu(h, ft, b->c_fc_b, &act) : NULL;
            oj_release(ft);
        } else {
            u = oj__gpt_lora(m, b, OJ__LORA_C_FC, h, conv1d_hf(h, b->c_fc_w, NULL, b->c_fc_b));
        }
        if (b->lora_a[OJ__LORA_MLP_C_PROJ]) { /* the adapter reads gelu(u): kept */
            oj_tensor *g = u ? oj_gelu_tanh(u) : NULL;
            oj_tensor *o = g ? conv1d_hf(g, b->mlp_proj_w, NULL, b->mlp_proj_b) : NULL;
            o = oj__gpt_lora(m, b, OJ__LORA_MLP_C_PROJ, g, o);
            oj_release(g);
            oj_release(u);
            return o;
        }
        oj_tensor *wt = oj_transpose(b->mlp_proj_w, 0, 1); /* [out, in] view */
        oj_tensor *o = u && wt ? oj__gelu_linear_act(u, act, wt, b->mlp_proj_b) : NULL;
        oj_release(wt);
        oj_release(act);
        oj_release(u);
        return o;
    }
    /* silu(gate) * up is recomputed in the backward (oj_swiglu_linear) */
    oj_tensor *gt = NULL, *up = NULL;
    if (oj_grad_enabled(m->eng)) { /* training: one GEMM, as the attention projections */
        oj_tensor *w2[2] = {b->w_gate, b->w_up}, *o2[2] = {NULL, NULL};
        const int64_t n2[2] = {m->cfg.mlp_hidden, m->cfg.mlp_hidden};
        if (!project_fused(h, 2, w2, n2, o2)) return NULL;
        gt = o2[0], up = o2[1];
    } else {
        gt = oj_linear(h, b->w_gate, NULL), up = oj_linear(h, b->w_up, NULL);
    }
    gt = oj__gpt_lora(m, b, OJ__LORA_GATE, h, gt);
    up = oj__gpt_lora(m, b, OJ__LORA_UP, h, up);
    oj_tensor *o = NULL;
    if (b->lora_a[OJ__LORA_DOWN]) { /* the adapter reads silu(gate) * up: kept */
        oj_tensor *sg = gt && up ? oj_silu(gt) : NULL;
        oj_tensor *a = sg ? oj_mul(sg, up) : NULL;
        o = a ? oj_linear(a, b->w_down, NULL) : NULL;
        o = oj__gpt_lora(m, b, OJ__LORA_DOWN, a, o);
        oj_release(sg);
        oj_release(a);
    } else {
        o = gt && up ? oj_swiglu_linear(gt, up, b->w_down, NULL) : NULL;
    }
    oj_release(gt);
    oj_release(up);
    return o;
}

/* Whether the block norms write the autocast dtype (*dt) directly: under
 * autocast every use of their output is a linear (the attention
 * projections, the MLP's first GEMMs, the head or the fused head + loss),
 * which would cast the f32 norm to that dtype first; writing it from the
 * norm's kernel gives the same bits without the cast kernel and its
 * backward (oj__layer_norm_to). Weights of another dtype (f64: autocast
 * leaves them) keep the f32 norm. */
static bool norm_low(oj_gpt *m, oj_dtype *dt) {
    oj_engine *eng = m->eng;
    oj_dtype wdt = oj_tensor_dtype(m->wte);
    *dt = oj_autocast_dtype(eng);
    return oj_autocast_enabled(eng) && (wdt == OJ_F32 || wdt == OJ_BF16 || wdt == OJ_F16);
}

static oj_tensor *norm(oj_gpt *m, oj_tensor *x, oj_tensor *w, oj_tensor *bias) {
    const double eps = m->cfg.norm_eps;
    oj_dtype dt;
    if (norm_low(m, &dt))
        return m->cfg.family == OJ_GPT2 ? oj__layer_norm_to(x, w, bias, eps, dt)
                                        : oj__rms_norm_to(x, w, eps, dt);
    return m->cfg.family == OJ_GPT2 ? oj_layer_norm(x, w, bias, eps) : oj_rms_norm(x, w, eps);
}

/* norm(x + r), *sum = x + r: the residual add and the next norm in one
 * kernel where the backend has it (oj_add_layer_norm / oj_add_rms_norm);
 * the norm's output as norm() writes it. */
static oj_tensor *add_norm(oj_gpt *m, oj_tensor *x, oj_tensor *r, oj_tensor *w, oj_tensor *bias,
                           oj_tensor **sum) {
    *sum = NULL;
    if (x == NULL || r == NULL) return NULL;
    const double eps = m->cfg.norm_eps;
    oj_dtype dt;
    if (norm_low(m, &dt))
        return m->cfg.family == OJ_GPT2 ? oj__add_layer_norm_to(x, r, w, bias, eps, sum, dt)
                                        : oj__add_rms_norm_to(x, r, w, eps, sum, dt);
    return m->cfg.family == OJ_GPT2 ? oj_add_layer_norm(x, r, w, bias, eps, sum)
                                    : oj_add_rms_norm(x, r, w, eps, sum);
}

/* The final hidden states xf [B, T, C] (after the last norm) of idx. */
static oj_tensor *gpt_hidden(oj_gpt *m, oj_tensor *idx, oj_kv_cache *cache) {
    oj_engine *eng = m->eng;
    if (idx == NULL) return NULL;
    if (oj_rank(idx) != 2) {
        char b[96];
        oj_set_error(eng, OJ_ERR_SHAPE, "gpt forward: idx must be [B, T], got %s",
                     oj_shape_str(idx, b, sizeof b));
        return NULL;
    }
    const int64_t B = oj_size(idx, 0), T = oj_size(idx, 1);
    const bool dev = cache && cache->dev; /* its caller checked the positions */
    const int64_t pos = cache && !dev ? cache->len : 0;
    /* Past a full cache, nanolab (rotary positions) decodes one token at a
     * time over a sliding window; gpt2's learned positions end at
     * block_size. */
    const bool window = cache && m->cfg.family == OJ_NANOLAB && T == 1 && T <= cache->capacity;
    const bool past_context = pos + T > m->cfg.block_size || (cache && pos + T > cache->capacity);
    if (((past_context && !window) || T == 0) && !dev) {
        char cap[48] = "";
        if (cache) snprintf(cap, sizeof cap, ", cache capacity %lld", (long long)cache->capacity);
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                     "gpt forward: positions %lld..%lld exceed the context (block_size %lld%s)",
                     (long long)pos, (long long)(pos + T - 1), (long long)m->cfg.block_size, cap);
        return NULL;
    }
    if (cache && B != cache->batch) {
        oj_set_error(eng, OJ_ERR_SHAPE, "gpt forward: batch %lld != cache batch %lld", (long long)B,
                     (long long)cache->batch);
        return NULL;
    }
    /* A cache made before oj_gpt_to_dtype holds the old dtype; without
     * autocast (which casts q, k, v to one dtype) attention would refuse
     * the mix deep inside, after layer 0's keys were written. */
    if (cache && !oj_autocast_enabled(eng) &&
        oj_tensor_dtype(cache->k[0]) != oj_tensor_dtype(m->wte)) {
        oj_set_error(eng, OJ_ERR_DTYPE,
                     "gpt forward: the KV cache holds %s but the weights are %s (converted by "
                     "oj_gpt_to_dtype after the cache or decoder was created); create caches and "
                     "decoders after converting",
                     oj_dtype_name(oj_tensor_dtype(cache->k[0])),
                     oj_dtype_name(oj_tensor_dtype(m->wte)));
        return NULL;
    }
    oj_scope_begin(eng);
    oj_tensor *x = oj_embedding(m->wte, idx); /* [B, T, C] */
    if (m->cfg.family == OJ_GPT2 && dev) {
        /* the row of wpe at the device position: [1, C] */
        oj_tensor *pe = oj_embedding(m->wpe, cache->dev->pos);
        oj_tensor *x2 = oj_add(x, pe);
        oj_release(pe);
        oj_release(x);
        x = x2;
    } else if (m->cfg.family == OJ_GPT2) {
        /* rows pos..pos+T-1 of wpe, a view (no index upload); its gradient
         * flows through narrow's backward */
        oj_tensor *pe = oj_narrow(m->wpe, 0, pos, T); /* [T, C] */
        oj_tensor *x2 = oj_add(x, pe);
        oj_release(x);
        x = x2;
    }
    /* each residual add runs with the norm after it: x1 = x + attn(ln_1(x))
     * and ln_2(x1) together, x + mlp(..) and the next block's ln_1 (or
     * ln_f) together */
    oj_tensor *v_first = NULL;
    oj_tensor *h = x ? norm(m, x, m->blocks[0].ln_1_w, m->blocks[0].ln_1_b) : NULL;
    for (int l = 0; l < (int)m->cfg.n_layer && h; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_tensor *a = m->cfg.family == OJ_GPT2    ? attention_gpt2(m, b, l, h, cache)
                       : m->cfg.family == OJ_LLAMA ? oj__gpt_llama_attention(m, b, l, h, pos, cache)
                                                   : attention_nanolab(m, b, l, h, pos, &v_first, cache);
        oj_tensor *x1 = NULL, *x2 = NULL;
        oj_tensor *h2 = add_norm(m, x, a, b->ln_2_w, b->ln_2_b, &x1);
        oj_tensor *f = h2 ? mlp(m, b, h2) : NULL;
        const bool last = l + 1 == (int)m->cfg.n_layer;
        oj_tensor *hn = add_norm(m, x1, f, last ? m->ln_f_w : m->blocks[l + 1].ln_1_w,
                                 last ? m->ln_f_b : m->blocks[l + 1].ln_1_b, &x2);
        oj_tensor *tmp[] = {x, h, a, x1, h2, f};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
        x = x2;
        h = hn;
    }
    oj_release(v_first);
    oj_tensor *xf = h;
    oj_release(x);
    if (xf) oj_keep(xf);
    oj_scope_end(eng);
    if (xf && cache && !dev) cache->len += T;
    return xf;
}

oj_tensor *oj__gpt_hidden(oj_gpt *m, oj_tensor *idx, oj_kv_cache *cache) {
    return gpt_hidden(m, idx, cache);
}

oj_tensor *oj__gpt_run(oj_gpt *m, oj_tensor *idx, oj_kv_cache *cache) {
    oj_tensor *xf = gpt_hidden(m, idx, cache);
    oj_tensor *logits = xf ? oj__gpt_linear(xf, m->head, m->qhead, NULL) : NULL; /* [B, T, V] */
    oj_release(xf);
    return logits;
}

oj_tensor *oj__gpt_run_static(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                              const oj_gpt_dev_pos *dp) {
    if (idx && oj_rank(idx) == 2 && oj_size(idx, 1) != 1) {
        oj_set_error(m->eng, OJ_ERR_SHAPE, "gpt decode step: idx must be [B, 1], got T %lld",
                     (long long)oj_size(idx, 1));
        return NULL;
    }
    c->dev = dp;
    bool prev = oj_set_grad_enabled(m->eng, false);
    oj_tensor *out = oj__gpt_run(m, idx, c);
    oj_set_grad_enabled(m->eng, prev);
    c->dev = NULL;
    return out;
}

oj_tensor *oj_gpt_forward(oj_gpt *m, oj_tensor *idx) {
    if (m == NULL) return NULL;
    return oj__gpt_run(m, idx, NULL);
}

oj_tensor *oj_gpt_loss(oj_gpt *m, oj_tensor *idx, oj_tensor *targets) {
    if (m == NULL || targets == NULL) return NULL;
    /* the head and the loss fused: the [B, T, V] logits never exist */
    oj_tensor *xf = gpt_hidden(m, idx, NULL);
    if (xf == NULL) return NULL;
    oj_tensor *loss = oj_linear_cross_entropy(xf, m->head, targets, -1, 0.0, OJ_REDUCTION_MEAN);
    oj_release(xf);
    return loss;
}

oj_tensor *oj_gpt_forward_cached(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx) {
    if (m == NULL) return NULL;
    if (c == NULL || c->m != m) { /* another model's cache has other layers and shapes */
        oj_set_error(m->eng, OJ_ERR_INVALID_ARGUMENT, "gpt forward: %s",
                     c ? "the KV cache was created for another model" : "the KV cache is NULL");
        return NULL;
    }
    bool prev = oj_set_grad_enabled(m->eng, false);
    oj_tensor *out = oj__gpt_run(m, idx, c);
    oj_set_grad_enabled(m->eng, prev);
    return out;
}
