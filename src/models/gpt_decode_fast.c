/* The gpt2 decode step in few kernels (FAST numerics): per layer
 *   qkv = norm + c_attn (+ bias), keys/values written to the cache slot
 *         (decode_norm_linear: one kernel),
 *   y   = attention of q over the masked cache (two kernels, or one with
 *         OJAS_CUDA_ATTN_COMBINE=0; OJAS_DECODE_ATTN_EARLY=1: through
 *         decode_attention, the rows other than the slot's loaded before
 *         it waits),
 *   x  += c_proj(y) + bias (decode_linear_residual: one),
 *   h   = gelu(norm + c_fc (+ bias)) (decode_norm_linear: one),
 *   x  += mlp c_proj(h) + bias (decode_linear_residual: one),
 * six kernels where the generic forward launches ten (the add + norm, the
 * GEMV, the cache write, the GELU each apart); before the layers one
 * kernel writes x = wte[idx] + wpe[pos] and the attention mask (the
 * generic step: two embeddings, an add and a comparison), after them the
 * final norm, the head's product, and the argmax or the draw with pos + 1
 * (with OJAS_DECODE_HEAD=1 one kernel, decode_norm_head; quantized,
 * decode_qnorm_head with OJAS_DECODE_QHEAD=1). The caller
 * (gpt_decoder.c) keeps idx and pos in range and passes dp->mask as a
 * bool [1, 1, 1, S] tensor to be written. The values are rounded to the
 * weights' dtype where the generic step rounds and summed in its CUDA
 * kernels' order while the products are short (oj__gpt_fast_decode_exact:
 * then the generic step's bits), else in another order; the step runs
 * under OJ_NUMERICS_FAST only; EXACT keeps the generic one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/internal.h"
#include "models/gpt_decode_quant.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"
#include "ops/nn_decode.h"
#include "ops/nn_decode_quant.h"

/* The defaults of the fast step's switches (docs/architecture.md). */
#define DECODE_ATTN_EARLY_DEFAULT true
#define DECODE_HEAD_DEFAULT true
#define DECODE_QHEAD_DEFAULT false /* measured only with OJAS_DECODE_QLOOP=1 (slower) */
#define DECODE_MEGA_DEFAULT false

bool oj__gpt_fast_decode_ok(const oj_gpt *m, const oj_kv_cache *c) {
    if (!oj__env_flag("OJAS_DECODE_FAST", true)) return false;
    oj_engine *eng = m->eng;
    bool forced = oj__env_flag("OJAS_DECODE_FAST", false); /* set: on any device */
    if (!forced && oj_engine_device(eng).type != OJ_DEVICE_CUDA) return false;
    if (oj_engine_numerics(eng) != OJ_NUMERICS_FAST || m->cfg.family != OJ_GPT2) return false;
    if (m->quantized) return oj__gpt_qfast_decode_ok(m, c); /* gpt_decode_quant.c */
    if (!oj__decode_supported(eng)) return false;
    const oj_dtype dt = oj_tensor_dtype(m->wte);
    if (dt != OJ_BF16 && dt != OJ_F16) return false;
    if (m->wpe == NULL || oj_tensor_dtype(m->wpe) != dt || !oj_is_contiguous(m->wte) ||
        !oj_is_contiguous(m->wpe))
        return false;
    if (oj_autocast_enabled(eng) && oj_autocast_dtype(eng) != dt) return false;
    if (c->batch != 1 || oj_tensor_dtype(c->kv[0]) != dt) return false;
    for (int l = 0; l < (int)m->cfg.n_layer; l++) {
        const oj_gpt_block *b = &m->blocks[l];
        const oj_tensor *ts[] = {b->ln_1_w, b->ln_1_b, b->ln_2_w, b->ln_2_b, b->c_attn_b,
                                 b->attn_proj_b, b->c_fc_b, b->mlp_proj_b};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (ts[i] == NULL || oj_tensor_dtype(ts[i]) != dt || !oj_is_contiguous(ts[i]))
                return false;
        if (!oj__decode_weight_ok(b->c_attn_w) || !oj__decode_weight_ok(b->attn_proj_w) ||
            !oj__decode_weight_ok(b->c_fc_w) || !oj__decode_weight_ok(b->mlp_proj_w) ||
            oj_tensor_dtype(b->c_attn_w) != dt || oj_tensor_dtype(b->attn_proj_w) != dt ||
            oj_tensor_dtype(b->c_fc_w) != dt || oj_tensor_dtype(b->mlp_proj_w) != dt)
            return false;
        if (!oj_is_contiguous(c->kv[l])) return false;
    }
    return true;
}

bool oj__gpt_fast_decode_exact(const oj_gpt *m) {
    if (oj_engine_device(m->eng).type != OJ_DEVICE_CUDA) return false;
    if (!oj__env_flag("OJAS_CUDA_GEMV", true)) return false; /* the generic step takes cuBLAS */
    if (m->qhead) return false; /* the generic step's head is the quantized one */
    for (int l = 0; l < (int)m->cfg.n_layer; l++) {
        const oj_gpt_block *b = &m->blocks[l];
        if (!oj__decode_matches_unfused(b->c_attn_w) || !oj__decode_matches_unfused(b->attn_proj_w) ||
            !oj__decode_matches_unfused(b->c_fc_w) || !oj__decode_matches_unfused(b->mlp_proj_w))
            return false;
    }
    return true;
}

bool oj__gpt_mega_decode_ok(const oj_gpt *m, const oj_kv_cache *c) {
    /* OJAS_DECODE_MEGA=1: the layers in the persistent kernel where the
     * backend takes the shapes (else, silently, the six kernels a layer) */
    if (!oj__env_flag("OJAS_DECODE_MEGA", DECODE_MEGA_DEFAULT)) return false;
    if (m->quantized || c->kv[0] == NULL || c->kv[0]->rank != 5) return false;
    const oj_tensor *kv = c->kv[0];
    return oj__decode_mega_ok(m->eng, m->cfg.n_embd, m->cfg.n_head, kv->shape[3],
                              oj_tensor_dtype(m->wte)) &&
           kv->shape[2] == m->cfg.n_head && kv->shape[2] * kv->shape[4] == m->cfg.n_embd;
}

/* The residual after the layers, by oj__decode_mega (x [1, 1, C] in the
 * current scope; dp->mask written), or NULL with the error recorded. */
static oj_tensor *layers_mega(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx, const oj_gpt_dev_pos *dp) {
    const int64_t L = m->cfg.n_layer;
    oj_tensor **lw = malloc((size_t)(L * OJ__DECODE_MEGA_PER_LAYER) * sizeof *lw);
    if (lw == NULL) {
        oj_set_error(m->eng, OJ_ERR_CAPACITY, "gpt decode: out of host memory");
        return NULL;
    }
    for (int64_t l = 0; l < L; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_tensor *ts[OJ__DECODE_MEGA_PER_LAYER] = {
            b->ln_1_w,   b->ln_1_b, b->c_attn_w, b->c_attn_b,   b->attn_proj_w,
            b->attn_proj_b, b->ln_2_w, b->ln_2_b, b->c_fc_w, b->c_fc_b,
            b->mlp_proj_w, b->mlp_proj_b, c->kv[l]};
        memcpy(lw + l * OJ__DECODE_MEGA_PER_LAYER, ts, sizeof ts);
    }
    oj_tensor *x = oj__decode_mega(m->wte, m->wpe, idx, dp->pos, dp->mask, L, lw, m->cfg.norm_eps);
    free(lw);
    return x;
}

/* Attention of the new token's q (columns 0 .. C of qkv [1, 1, 3C]) over
 * every slot of layer l's cache under the step's mask: [1, 1, C]
 * (attention's output is stored [B, T, H, D], so merging is a view). */
static oj_tensor *attend_fast(oj_gpt *m, oj_kv_cache *c, int l, oj_tensor *qkv) {
    const int64_t C = m->cfg.n_embd, H = m->cfg.n_head, D = C / H;
    /* the backend's decode attention: scaled_dot_product_attention's bits,
     * the cache rows other than this step's read early */
    /* OJAS_DECODE_ATTN_EARLY=0: scaled_dot_product_attention */
    if (oj__env_flag("OJAS_DECODE_ATTN_EARLY", DECODE_ATTN_EARLY_DEFAULT) &&
        oj__decode_attention_supported(m->eng))
        return oj__decode_attention(qkv, c->kv[l], c->dev->mask, c->dev->slot);
    oj_tensor *q = oj_narrow(qkv, 2, 0, C);
    oj_tensor *qh = q ? oj__gpt_split_heads(q, H, D) : NULL;
    oj_tensor *y = qh ? oj_scaled_dot_product_attention(qh, c->k[l], c->v[l], c->dev->mask, false,
                                                        NAN)
                      : NULL;
    oj_tensor *ym = y ? oj__gpt_merge_heads(y) : NULL;
    oj_tensor *yc = ym && !oj_is_contiguous(ym) ? oj__contiguous(ym) : NULL;
    oj_tensor *out = yc ? yc : ym ? oj_retain(ym) : NULL;
    oj_tensor *tmp[] = {q, qh, y, ym};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    return out;
}

/* Else layer_norm and linear, whose bits the fused head gives on CUDA (the
 * head's layout takes the "nk" matmul kernel exactly when it suits the
 * entry). */
bool oj__gpt_fast_head_fused(const oj_gpt *m) {
    /* OJAS_DECODE_HEAD=0: layer_norm, linear, then the argmax or draw */
    if (!oj__env_flag("OJAS_DECODE_HEAD", DECODE_HEAD_DEFAULT)) return false;
    /* OJAS_DECODE_QHEAD=1: the quantized head ends the step too
     * (decode_qnorm_head); else its logits, then the argmax's kernel */
    if (m->quantized)
        return oj__env_flag("OJAS_DECODE_QHEAD", DECODE_QHEAD_DEFAULT) &&
               oj__decode_qhead_supported(m->eng);
    return oj__decode_head_supported(m->eng) && oj__decode_head_weight_ok(m->head) &&
           oj_tensor_dtype(m->head) == oj_tensor_dtype(m->wte) && m->ln_f_w && m->ln_f_b &&
           oj_tensor_dtype(m->ln_f_w) == oj_tensor_dtype(m->wte) &&
           oj_tensor_dtype(m->ln_f_b) == oj_tensor_dtype(m->wte);
}

/* A layer's fused products over its weights, or over their quantized
 * copies (m->quantized: the dequantization inside the product,
 * ops/nn_decode_quant.h); the same launches either way. */
static oj_tensor *norm_linear(const oj_gpt *m, oj_tensor *x, oj_tensor *nw, oj_tensor *nb,
                              oj_tensor *w, const oj_qtensor *qw, oj_tensor *b, int act,
                              oj_tensor *kv, oj_tensor *slot) {
    const double eps = m->cfg.norm_eps;
    return m->quantized ? oj__decode_qnorm_linear(x, nw, nb, eps, qw, b, act, kv, slot)
                        : oj__decode_norm_linear(x, nw, nb, eps, w, b, act, kv, slot);
}

static bool linear_residual(const oj_gpt *m, oj_tensor *x, oj_tensor *y, oj_tensor *w,
                            const oj_qtensor *qw, oj_tensor *b) {
    return (m->quantized ? oj__decode_qlinear_residual_(x, y, qw, b)
                         : oj__decode_linear_residual_(x, y, w, b)) == OJ_OK;
}

oj_tensor *oj__gpt2_run_fast(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                             const oj_gpt_dev_pos *dp, const oj_gpt_fast_end *end, bool *ended) {
    oj_engine *eng = m->eng;
    const double eps = m->cfg.norm_eps;
    bool prev = oj_set_grad_enabled(eng, false);
    c->dev = dp;
    oj_scope_begin(eng);
    /* the residual stream x = wte[idx] + wpe[pos] [1, 1, C], updated in
     * place; dp->mask written in the same kernel (with OJAS_DECODE_MEGA=1:
     * every layer too, in the persistent kernel) */
    const bool mega = oj__gpt_mega_decode_ok(m, c);
    oj_tensor *x = mega ? layers_mega(m, c, idx, dp)
                        : oj__decode_embed_mask(m->wte, m->wpe, idx, dp->pos, dp->mask);
    bool ok = x != NULL;
    for (int l = 0; ok && !mega && l < (int)m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_tensor *qkv = norm_linear(m, x, b->ln_1_w, b->ln_1_b, b->c_attn_w, b->qc_attn,
                                     b->c_attn_b, OJ__DECODE_ACT_NONE, c->kv[l], dp->slot);
        oj_tensor *y = qkv ? attend_fast(m, c, l, qkv) : NULL;
        ok = y && linear_residual(m, x, y, b->attn_proj_w, b->qattn_proj, b->attn_proj_b);
        oj_tensor *h = ok ? norm_linear(m, x, b->ln_2_w, b->ln_2_b, b->c_fc_w, b->qc_fc,
                                        b->c_fc_b, OJ__DECODE_ACT_GELU, NULL, NULL)
                          : NULL;
        ok = h && linear_residual(m, x, h, b->mlp_proj_w, b->qmlp_proj, b->mlp_proj_b);
        oj_release(qkv);
        oj_release(y);
        oj_release(h);
    }
    oj_tensor *logits = NULL; /* [1, 1, V] */
    *ended = false;
    if (ok && m->quantized) { /* the final norm and the quantized head in one kernel */
        if (end && end->smp == NULL && oj__gpt_fast_head_fused(m)) { /* with the argmax, pos + 1 */
            logits = oj__decode_qnorm_head(x, m->ln_f_w, m->ln_f_b, eps, m->qhead, end->tok,
                                           end->pos, end->hist);
            *ended = logits != NULL;
        } else {
            logits = oj__decode_qnorm_linear(x, m->ln_f_w, m->ln_f_b, eps, m->qhead, NULL,
                                             OJ__DECODE_ACT_NONE, NULL, NULL);
        }
    } else if (ok && oj__gpt_fast_head_fused(m)) { /* one kernel; with the argmax or the draw, pos + 1 */
        if (end && end->smp)
            logits = oj__decode_norm_head_sample(x, m->ln_f_w, m->ln_f_b, eps, m->head, end->tok,
                                                 end->pos, end->step, end->hist, end->smp);
        else
            logits = oj__decode_norm_head(x, m->ln_f_w, m->ln_f_b, eps, m->head,
                                          end ? end->tok : NULL, end ? end->pos : NULL,
                                          end ? end->hist : NULL);
        *ended = logits && end;
    } else if (ok) {
        oj_tensor *xf = oj_layer_norm(x, m->ln_f_w, m->ln_f_b, eps);
        logits = xf ? oj_linear(xf, m->head, NULL) : NULL;
    }
    if (logits) oj_keep(logits);
    oj_scope_end(eng);
    c->dev = NULL;
    oj_set_grad_enabled(eng, prev);
    return logits;
}
