/* The gpt2 decode step with block-quantized weights in the fast step's
 * launches (gpt_decode_quant.h): the bf16 step of gpt_decode_fast.c with
 * each projection reading its quantized copy (ops/nn_decode_quant.h). */
#include "models/gpt_decode_quant.h"

#include "core/internal.h"
#include "ojas/ops.h"
#include "ops/nn_decode.h"
#include "ops/nn_decode_quant.h"

/* t is a contiguous vector of n elements of dtype dt. */
static bool vec(const oj_tensor *t, int64_t n, oj_dtype dt) {
    return t && oj_tensor_dtype(t) == dt && oj_is_contiguous(t) && oj_numel(t) == n;
}

/* q encodes an [n, k] matrix the decode entries take. */
static bool qmat(const oj_qtensor *q, int64_t n, int64_t k) {
    return q && oj__decode_qweight_ok(q) && oj_qtensor_rows(q) == n && oj_qtensor_cols(q) == k;
}

bool oj__gpt_qfast_decode_ok(const oj_gpt *m, const oj_kv_cache *c) {
    oj_engine *eng = m->eng;
    if (!m->quantized || !oj__decode_supported(eng)) return false;
    const oj_dtype dt = oj_tensor_dtype(m->wte);
    if (dt != OJ_F32 && dt != OJ_BF16 && dt != OJ_F16) return false;
    if (m->wpe == NULL || oj_tensor_dtype(m->wpe) != dt || !oj_is_contiguous(m->wte) ||
        !oj_is_contiguous(m->wpe))
        return false;
    if (oj_autocast_enabled(eng) && oj_autocast_dtype(eng) != dt) return false;
    if (c->batch != 1 || oj_tensor_dtype(c->kv[0]) != dt) return false;
    const int64_t C = m->cfg.n_embd, F = m->cfg.mlp_hidden, V = m->cfg.vocab_size;
    if (!vec(m->ln_f_w, C, dt) || !vec(m->ln_f_b, C, dt) || !qmat(m->qhead, V, C)) return false;
    for (int l = 0; l < (int)m->cfg.n_layer; l++) {
        const oj_gpt_block *b = &m->blocks[l];
        if (!vec(b->ln_1_w, C, dt) || !vec(b->ln_1_b, C, dt) || !vec(b->ln_2_w, C, dt) ||
            !vec(b->ln_2_b, C, dt) || !vec(b->c_attn_b, 3 * C, dt) ||
            !vec(b->attn_proj_b, C, dt) || !vec(b->c_fc_b, F, dt) || !vec(b->mlp_proj_b, C, dt))
            return false;
        if (!qmat(b->qc_attn, 3 * C, C) || !qmat(b->qattn_proj, C, C) || !qmat(b->qc_fc, F, C) ||
            !qmat(b->qmlp_proj, C, F))
            return false;
        if (oj_tensor_dtype(c->kv[l]) != dt || !oj_is_contiguous(c->kv[l])) return false;
    }
    return true;
}

oj_tensor *oj__gpt2_run_qfast(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                              const oj_gpt_dev_pos *dp) {
    oj_engine *eng = m->eng;
    const double eps = m->cfg.norm_eps;
    bool prev = oj_set_grad_enabled(eng, false);
    c->dev = dp;
    oj_scope_begin(eng);
    /* the residual stream x = wte[idx] + wpe[pos] [1, 1, C], updated in
     * place; dp->mask written in the same kernel */
    oj_tensor *x = oj__decode_embed_mask(m->wte, m->wpe, idx, dp->pos, dp->mask);
    bool ok = x != NULL;
    for (int l = 0; ok && l < (int)m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_tensor *qkv = oj__decode_qnorm_linear(x, b->ln_1_w, b->ln_1_b, eps, b->qc_attn,
                                                 b->c_attn_b, OJ__DECODE_ACT_NONE, c->kv[l],
                                                 dp->slot);
        oj_tensor *y = qkv ? oj__gpt_attend_fast(m, c, l, qkv) : NULL;
        ok = y && oj__decode_qlinear_residual_(x, y, b->qattn_proj, b->attn_proj_b) == OJ_OK;
        oj_tensor *h = ok ? oj__decode_qnorm_linear(x, b->ln_2_w, b->ln_2_b, eps, b->qc_fc,
                                                    b->c_fc_b, OJ__DECODE_ACT_GELU, NULL, NULL)
                          : NULL;
        ok = h && oj__decode_qlinear_residual_(x, h, b->qmlp_proj, b->mlp_proj_b) == OJ_OK;
        oj_release(qkv);
        oj_release(y);
        oj_release(h);
    }
    /* the final norm and the quantized head in one kernel: [1, 1, V] */
    oj_tensor *logits = ok ? oj__decode_qnorm_linear(x, m->ln_f_w, m->ln_f_b, eps, m->qhead, NULL,
                                                     OJ__DECODE_ACT_NONE, NULL, NULL)
                           : NULL;
    if (logits) oj_keep(logits);
    oj_scope_end(eng);
    c->dev = NULL;
    oj_set_grad_enabled(eng, prev);
    return logits;
}
