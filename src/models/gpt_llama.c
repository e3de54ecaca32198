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
#include <stdio.h>

#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"

static bool add(oj_gpt *m, oj_tensor **dst, const char *name, int rank, int64_t d0, int64_t d1,
                oj__gpt_init kind) {
    int64_t s[2] = {d0, d1};
    *dst = oj__gpt_param(m, name, rank, s, kind);
    return *dst != NULL;
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
    return true;
}

/* q or k heads x [B, n, T, D]: the optional QK-norm (weight w [D]), then
 * the rotation at positions pos.. or, in the static step, at the device
 * position. */
static oj_tensor *norm_rotate(oj_gpt *m, oj_tensor *x, oj_tensor *w, int64_t pos,
                              oj_kv_cache *cache) {
    const double eps = m->cfg.norm_eps, theta = m->cfg.rope_theta;
    if (x == NULL) return NULL;
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
    oj_tensor *q0 = oj_linear(h, b->q_w, b->q_b); /* [B, T, H D] */
    oj_tensor *k0 = oj_linear(h, b->k_w, b->k_b); /* [B, T, Hkv D] */
    oj_tensor *v0 = oj_linear(h, b->v_w, b->v_b);
    oj_tensor *q1 = q0 ? oj__gpt_split_heads(q0, H, D) : NULL; /* [B, H, T, D] */
    oj_tensor *k1 = k0 ? oj__gpt_split_heads(k0, Hkv, D) : NULL;
    oj_tensor *v = v0 ? oj__gpt_split_heads(v0, Hkv, D) : NULL;
    oj_tensor *q = norm_rotate(m, q1, b->q_norm_w, pos, cache);
    oj_tensor *k = norm_rotate(m, k1, b->k_norm_w, pos, cache);
    oj_tensor *y = oj__gpt_attend_cached(cache, l, q, k, v); /* [B, H, T, D] */
    oj_tensor *ym = y ? oj__gpt_merge_heads(y) : NULL;       /* [B, T, H D] */
    oj_tensor *out = ym ? oj_linear(ym, b->o_w, NULL) : NULL;
    oj_tensor *tmp[] = {q0, k0, v0, q1, k1, v, q, k, y, ym};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}
