/* The llama family (gpt.h, OJ_LLAMA): its parameters under Hugging Face's
 * names and its attention. The rest of a block (RMSNorm, the residual
 * adds, the SwiGLU MLP, the head) is gpt_forward.c's, shared with nanolab.
 * Shapes: B batch, T new tokens, C width, H heads, Hkv KV heads, D head
 * dim, F MLP width, V vocabulary.
 *
 * The maths is transformers' LlamaForCausalLM (Touvron et al., "LLaMA",
 * 2023): per layer
 *   h = rms_norm(x) * input_layernorm
 *   q, k, v = h Wq^T (+ bq), h Wk^T (+ bk), h Wv^T (+ bv)   [heads of D]
 *   (Qwen3: q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm over D)
 *   q, k = rotary(q), rotary(k)       (half-split, rope_theta)
 *   x = x + softmax(q k^T / sqrt(D), causal) v Wo^T    (GQA: Hkv heads)
 *   x = x + (silu(h2 Wg^T) * (h2 Wu^T)) Wd^T, h2 = rms_norm(x) * post_attention_layernorm
 * then logits = rms_norm(x) * norm, times lm_head^T (or embed_tokens^T). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"

static bool add(oj_gpt *m, oj_tensor **dst, const char *name, int rank, int64_t d0, int64_t d1,
                oj__gpt_init kind) {
    int64_t s[2] = {d0, d1};
    *dst = oj__gpt_param(m, name, rank, s, kind);
    return *dst != NULL;
}

/* Llama 3's rope scaling: the cos and sin tables [block_size, D] of the
 * rescaled frequencies (gpt.h, rope_factor), each half of D repeating
 * the D/2 angles as transformers lays them out; f32, computed in double,
 * owned by m. */
static bool rope_tables(oj_gpt *m) {
    const oj_gpt_config *c = &m->cfg;
    const int64_t D = oj__gpt_head_dim(c), N = c->block_size, h = D / 2;
    const double pi = 3.14159265358979323846, ctx = (double)c->rope_original_context;
    const double lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    float *cs = malloc((size_t)(N * D) * sizeof *cs), *sn = malloc((size_t)(N * D) * sizeof *sn);
    double *f = malloc((size_t)h * sizeof *f);
    bool ok = cs && sn && f;
    for (int64_t i = 0; ok && i < h; i++) {
        double inv = pow(c->rope_theta, -2.0 * (double)i / (double)D), wl = 2.0 * pi / inv;
        if (wl > ctx / lo) {
            f[i] = inv / c->rope_factor; /* low frequencies: interpolated positions */
        } else if (wl < ctx / hi) {
            f[i] = inv; /* high frequencies: kept */
        } else {
            double s = (ctx / wl - lo) / (hi - lo);
            f[i] = (1.0 - s) * inv / c->rope_factor + s * inv;
        }
    }
    for (int64_t t = 0; ok && t < N; t++)
        for (int64_t i = 0; i < h; i++) {
            double a = (double)t * f[i];
            cs[t * D + i] = cs[t * D + h + i] = (float)cos(a);
            sn[t * D + i] = sn[t * D + h + i] = (float)sin(a);
        }
    int64_t shape[2] = {N, D};
    size_t nb = (size_t)(N * D) * sizeof(float);
    if (ok) {
        m->rope_cos = oj_from_host(m->eng, 2, shape, OJ_F32, cs, nb);
        m->rope_sin = oj_from_host(m->eng, 2, shape, OJ_F32, sn, nb);
        if (m->rope_cos) oj__scope_detach(m->rope_cos);
        if (m->rope_sin) oj__scope_detach(m->rope_sin);
        ok = m->rope_cos && m->rope_sin;
    } else {
        oj_set_error(m->eng, OJ_ERR_CAPACITY, "gpt: out of host memory for the rope tables");
    }
    free(cs);
    free(sn);
    free(f);
    return ok;
}

bool oj__gpt_llama_params(oj_gpt *m) {
    const oj_gpt_config *c = &m->cfg;
    const int64_t C = c->n_embd, V = c->vocab_size, H = c->n_head, Hkv = c->n_kv_head;
    const int64_t D = oj__gpt_head_dim(c), F = c->mlp_hidden;
    if (!add(m, &m->wte, "model.embed_tokens.weight", 2, V, C, INIT_NORMAL)) return false;
    m->head = m->wte;
    char n[160];
#define L(dst, suffix, rank, d0, d1, kind)                                             \
    do {                                                                               \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                        \
        if (!add(m, &(dst), n, rank, d0, d1, kind)) return false;                      \
    } while (0)
    for (int l = 0; l < (int)c->n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        L(b->q_w, "self_attn.q_proj.weight", 2, H * D, C, INIT_NORMAL);
        L(b->k_w, "self_attn.k_proj.weight", 2, Hkv * D, C, INIT_NORMAL);
        L(b->v_w, "self_attn.v_proj.weight", 2, Hkv * D, C, INIT_NORMAL);
        if (c->qkv_bias) {
            L(b->q_b, "self_attn.q_proj.bias", 1, H * D, 0, INIT_ZEROS);
            L(b->k_b, "self_attn.k_proj.bias", 1, Hkv * D, 0, INIT_ZEROS);
            L(b->v_b, "self_attn.v_proj.bias", 1, Hkv * D, 0, INIT_ZEROS);
        }
        L(b->o_w, "self_attn.o_proj.weight", 2, C, H * D, INIT_RESID);
        if (c->qk_norm) {
            L(b->q_norm_w, "self_attn.q_norm.weight", 1, D, 0, INIT_ONES);
            L(b->k_norm_w, "self_attn.k_norm.weight", 1, D, 0, INIT_ONES);
        }
        L(b->w_gate, "mlp.gate_proj.weight", 2, F, C, INIT_NORMAL);
        L(b->w_up, "mlp.up_proj.weight", 2, F, C, INIT_NORMAL);
        L(b->w_down, "mlp.down_proj.weight", 2, C, F, INIT_RESID);
        L(b->ln_1_w, "input_layernorm.weight", 1, C, 0, INIT_ONES);
        L(b->ln_2_w, "post_attention_layernorm.weight", 1, C, 0, INIT_ONES);
    }
#undef L
    if (!add(m, &m->ln_f_w, "model.norm.weight", 1, C, 0, INIT_ONES)) return false;
    if (c->untied_head && !add(m, &m->head, "lm_head.weight", 2, V, C, INIT_NORMAL)) return false;
    return c->rope_factor > 0 ? rope_tables(m) : true;
}

/* t in x's dtype (a new reference). */
static oj_tensor *like(oj_tensor *t, oj_tensor *x) {
    return t == NULL               ? NULL
           : oj_tensor_dtype(t) == oj_tensor_dtype(x) ? oj_retain(t)
                                                      : oj_cast(t, oj_tensor_dtype(x));
}

/* x [B, n, T, D] rotated by the model's tables: x cos + rotate_half(x)
 * sin with rotate_half(x) = cat(-x2, x1), the rows of the tables at
 * positions pos..pos+T-1 or, in the static step, the device position. */
static oj_tensor *rotate_tables(oj_gpt *m, oj_tensor *x, int64_t pos, oj_kv_cache *cache) {
    const int64_t T = oj_size(x, 2), D = oj_size(x, 3);
    bool dev = cache && cache->dev;
    oj_tensor *c0 = dev ? oj_embedding(m->rope_cos, cache->dev->pos) : oj_narrow(m->rope_cos, 0, pos, T);
    oj_tensor *s0 = dev ? oj_embedding(m->rope_sin, cache->dev->pos) : oj_narrow(m->rope_sin, 0, pos, T);
    oj_tensor *cs = like(c0, x), *sn = like(s0, x); /* [T, D] */
    oj_tensor *x1 = oj_narrow(x, 3, 0, D / 2), *x2 = oj_narrow(x, 3, D / 2, D / 2);
    oj_tensor *nx2 = oj_neg(x2);
    oj_tensor *parts[2] = {nx2, x1};
    oj_tensor *rh = nx2 && x1 ? oj_cat(2, parts, 3) : NULL;
    oj_tensor *a = cs ? oj_mul(x, cs) : NULL, *b = rh && sn ? oj_mul(rh, sn) : NULL;
    oj_tensor *out = a && b ? oj_add(a, b) : NULL;
    oj_tensor *tmp[] = {c0, s0, cs, sn, x1, x2, nx2, rh, a, b};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}

/* q or k heads x [B, n, T, D]: the optional QK-norm (weight w [D]), then
 * the rotation at positions pos.. or, in the static step, at the device
 * position. */
static oj_tensor *norm_rotate(oj_gpt *m, oj_tensor *x, oj_tensor *w, int64_t pos,
                              oj_kv_cache *cache) {
    const double eps = m->cfg.norm_eps, theta = m->cfg.rope_theta;
    if (x == NULL) return NULL;
    if (m->rope_cos) { /* rescaled frequencies: the tables */
        oj_tensor *n = w ? oj_rms_norm(x, w, eps) : oj_retain(x);
        oj_tensor *r = n ? rotate_tables(m, n, pos, cache) : NULL;
        oj_release(n);
        return r;
    }
    if (cache && cache->dev) { /* the position is read on the device */
        oj_tensor *n = w ? oj_rms_norm(x, w, eps) : oj_retain(x);
        oj_tensor *r = n ? oj_rotary_embedding_at(n, cache->dev->pos, theta) : NULL;
        oj_release(n);
        return r;
    }
    return w ? oj_rms_norm_rotary(x, w, eps, pos, theta) : oj_rotary_embedding(x, pos, theta);
}

oj_tensor *oj__gpt_llama_attention(oj_gpt *m, oj_gpt_block *b, int l, oj_tensor *h, int64_t pos,
                                   oj_kv_cache *cache) {
    const oj_gpt_config *c = &m->cfg;
    const int64_t H = c->n_head, Hkv = c->n_kv_head, D = oj__gpt_head_dim(c);
    oj_tensor *q0, *k0, *v0; /* [B, T, H D], [B, T, Hkv D] x2 */
    if (oj__gpt_qfused(m, b->qqkv)) { /* one product, [B, T, (H + 2 Hkv) D] */
        oj_tensor *y = oj__gpt_linear(h, NULL, b->qqkv, NULL);
        q0 = oj__gpt_qcols(y, 0, H * D, b->q_b);
        k0 = oj__gpt_qcols(y, H * D, Hkv * D, b->k_b);
        v0 = oj__gpt_qcols(y, (H + Hkv) * D, Hkv * D, b->v_b);
        oj_release(y);
    } else {
        q0 = oj__gpt_linear(h, b->q_w, b->qq, b->q_b);
        k0 = oj__gpt_linear(h, b->k_w, b->qk, b->k_b);
        v0 = oj__gpt_linear(h, b->v_w, b->qv, b->v_b);
    }
    q0 = oj__gpt_lora(m, b, OJ__LORA_Q, h, q0);
    k0 = oj__gpt_lora(m, b, OJ__LORA_K, h, k0);
    v0 = oj__gpt_lora(m, b, OJ__LORA_V, h, v0);
    oj_tensor *q1 = q0 ? oj__gpt_split_heads(q0, H, D) : NULL; /* [B, H, T, D] */
    oj_tensor *k1 = k0 ? oj__gpt_split_heads(k0, Hkv, D) : NULL;
    oj_tensor *v = v0 ? oj__gpt_split_heads(v0, Hkv, D) : NULL;
    oj_tensor *q = norm_rotate(m, q1, b->q_norm_w, pos, cache);
    oj_tensor *k = norm_rotate(m, k1, b->k_norm_w, pos, cache);
    oj_tensor *y = oj__gpt_attend_cached(cache, l, q, k, v); /* [B, H, T, D] */
    oj_tensor *ym = y ? oj__gpt_merge_heads(y) : NULL;       /* [B, T, H D] */
    oj_tensor *out = ym ? oj__gpt_lora(m, b, OJ__LORA_O, ym, oj__gpt_linear(ym, b->o_w, b->qo, NULL)) : NULL;
    oj_tensor *tmp[] = {q0, k0, v0, q1, k1, v, q, k, y, ym};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}
