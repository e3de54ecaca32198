/* Whether the gpt2 fast decode step can run over block-quantized weights
 * (gpt_decode_quant.h); the step itself is gpt_decode_fast.c's, each
 * projection reading its quantized copy (ops/nn_decode_quant.h). */
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
