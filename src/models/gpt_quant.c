/* Quantized inference weights of a GPT model (oj_gpt_quantize): every
 * linear weight of the blocks and the head get a block-quantized copy
 * ([out, in]) that the forward uses instead of the f32 weight when no
 * gradient is wanted. Embedding lookups, positions, norms and biases stay
 * in their dtype (llama.cpp's Q8_0 / Q4_0 files keep norms and biases in
 * f32 too, and quantize the output matrix). */
#include "core/env.h"
#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"
#include "quant/quant_internal.h"

oj_tensor *oj__gpt_linear(oj_tensor *x, oj_tensor *w, const oj_qtensor *q, oj_tensor *b) {
    if (q == NULL || x == NULL || oj_grad_enabled(oj_tensor_engine(x))) return oj_linear(x, w, b);
    oj_tensor *xf = oj_tensor_dtype(x) == OJ_F32 ? oj_retain(x) : oj_cast(x, OJ_F32);
    oj_tensor *y = xf ? oj_qmatmul(xf, q) : NULL;
    oj_release(xf);
    if (y == NULL || b == NULL) return y;
    oj_tensor *yb = oj_add(y, b);
    oj_release(y);
    return yb;
}

/* The quantized-copy slots of block b with their f32 weights ([out, in]
 * or, transposed, gpt2's Conv1D [in, out]). */
typedef struct {
    oj_qtensor **q;
    oj_tensor *w;
    bool transposed;
} qslot;

static int block_slots(oj_gpt *m, oj_gpt_block *b, qslot *s) {
    int n = 0;
    if (m->cfg.family == OJ_GPT2) {
        s[n++] = (qslot){&b->qc_attn, b->c_attn_w, true};
        s[n++] = (qslot){&b->qattn_proj, b->attn_proj_w, true};
        s[n++] = (qslot){&b->qc_fc, b->c_fc_w, true};
        s[n++] = (qslot){&b->qmlp_proj, b->mlp_proj_w, true};
        return n;
    }
    /* nanolab: llama's projections and MLP, and the attention gate */
    if (m->cfg.family == OJ_NANOLAB) s[n++] = (qslot){&b->qgate, b->gate_w, false};
    {
        s[n++] = (qslot){&b->qq, b->q_w, false};
        s[n++] = (qslot){&b->qk, b->k_w, false};
        s[n++] = (qslot){&b->qv, b->v_w, false};
        s[n++] = (qslot){&b->qo, b->o_w, false};
        s[n++] = (qslot){&b->qw_gate, b->w_gate, false};
        s[n++] = (qslot){&b->qw_up, b->w_up, false};
        s[n++] = (qslot){&b->qw_down, b->w_down, false};
    }
    return n;
}

void oj__gpt_free_quantized(oj_gpt *m) {
    if (m == NULL || m->blocks == NULL) return;
    for (int64_t l = 0; l < m->cfg.n_layer; l++) {
        qslot s[8];
        int n = block_slots(m, &m->blocks[l], s);
        for (int i = 0; i < n; i++) {
            oj_qtensor_free(*s[i].q);
            *s[i].q = NULL;
        }
        oj_qtensor_free(m->blocks[l].qqkv);
        oj_qtensor_free(m->blocks[l].qgate_up);
        m->blocks[l].qqkv = m->blocks[l].qgate_up = NULL;
    }
    oj_qtensor_free(m->qhead);
    m->qhead = NULL;
    m->quantized = false;
}

oj_status oj_gpt_quantize(oj_gpt *m, oj_qtype t) {
    if (m == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = m->eng;
    if ((unsigned)t >= OJ_QTYPE_COUNT)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gpt quantize: invalid type %d", (int)t);
    if (m->lora) /* the quantized forward has no adapter terms */
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "gpt quantize: the model has LoRA adapters; merge them first "
                            "(oj_gpt_lora_merge, ojas generate --adapter does)");
    oj__gpt_free_quantized(m);
    bool ok = true;
    for (int64_t l = 0; ok && l < m->cfg.n_layer; l++) {
        qslot s[8];
        int n = block_slots(m, &m->blocks[l], s);
        for (int i = 0; ok && i < n; i++) {
            oj_tensor *w = s[i].transposed ? oj_transpose(s[i].w, 0, 1) : oj_retain(s[i].w);
            *s[i].q = w ? oj_quantize(w, t) : NULL;
            oj_release(w);
            ok = *s[i].q != NULL;
        }
    }
    /* the head's matmul, also when it is tied to the embedding (whose
     * lookups keep reading the f32 rows) */
    if (ok) ok = (m->qhead = oj_quantize(m->head, t)) != NULL;
    if (ok) ok = oj__gpt_qfuse(m);
    if (!ok) {
        oj_status st = oj_last_status(eng);
        oj__gpt_free_quantized(m);
        return st != OJ_OK ? st : OJ_ERR_INTERNAL;
    }
    m->quantized = true;
    m->qtype = t;
    return OJ_OK;
}

/* *fused := the copies *parts[0..n) stacked by rows, each *parts[i]
 * replaced by a view of its rows; nothing changes when a copy is missing
 * or they differ in type or K (true), or on failure (false). */
static bool fuse(oj_qtensor **fused, oj_qtensor **parts[], int n) {
    oj_qtensor *p[3], *view[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++) {
        p[i] = *parts[i];
        if (p[i] == NULL || oj_qtensor_type(p[i]) != oj_qtensor_type(p[0]) ||
            oj_qtensor_cols(p[i]) != oj_qtensor_cols(p[0]))
            return true;
    }
    oj_qtensor *all = oj__qtensor_cat_rows(p, n);
    bool ok = all != NULL;
    for (int64_t i = 0, r0 = 0; ok && i < n; r0 += oj_qtensor_rows(p[i]), i++)
        ok = (view[i] = oj__qtensor_rows(all, r0, oj_qtensor_rows(p[i]))) != NULL;
    for (int i = 0; i < n; i++) {
        oj_qtensor_free(ok ? p[i] : view[i]);
        if (ok) *parts[i] = view[i];
    }
    if (!ok) oj_qtensor_free(all);
    else *fused = all;
    return ok;
}

bool oj__gpt_qfuse(oj_gpt *m) {
    if (m->cfg.family != OJ_LLAMA || !oj__env_flag("OJAS_QFUSE", true)) return true;
    if (oj_engine_device(m->eng).type != OJ_DEVICE_CPU && !oj__env_flag("OJAS_QFUSE_GPU", true))
        return true;
    bool ok = true;
    for (int64_t l = 0; ok && l < m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_qtensor **qkv[3] = {&b->qq, &b->qk, &b->qv}, **gu[2] = {&b->qw_gate, &b->qw_up};
        if (b->qqkv == NULL) ok = fuse(&b->qqkv, qkv, 3);
        if (ok && b->qgate_up == NULL) ok = fuse(&b->qgate_up, gu, 2);
    }
    return ok;
}

bool oj__gpt_qfused(const oj_gpt *m, const oj_qtensor *fused) {
    if (fused == NULL || oj_grad_enabled(m->eng)) return false;
    if (oj_engine_device(m->eng).type == OJ_DEVICE_CPU) return true;
    return oj_engine_numerics(m->eng) == OJ_NUMERICS_FAST && oj__env_flag("OJAS_QFUSE_GPU", true);
}

oj_tensor *oj__gpt_qcols(oj_tensor *y, int64_t c0, int64_t n, oj_tensor *b) {
    oj_tensor *v = y ? oj_narrow(y, 2, c0, n) : NULL;
    if (v == NULL || b == NULL) return v;
    oj_tensor *vb = oj_add(v, b);
    oj_release(v);
    return vb;
}

oj_qtype oj_gpt_quantized_type(const oj_gpt *m) {
    return m && m->quantized ? m->qtype : OJ_QTYPE_COUNT;
}

int64_t oj_gpt_decode_bytes(const oj_gpt *m) {
    if (m == NULL) return 0;
    int64_t all = 0;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    for (int64_t i = 0; i < sd.n; i++) {
        oj_tensor *t = sd.tensors[i];
        all += oj_numel(t) * (int64_t)oj_dtype_size(oj_tensor_dtype(t));
    }
    const oj_gpt_config *c = &m->cfg;
    const int64_t es = (int64_t)oj_dtype_size(oj_tensor_dtype(m->wte));
    /* lookups read one row of the embedding (and of the positions) */
    all -= (c->vocab_size - 1) * c->n_embd * es;
    if (m->wpe) all -= (c->block_size - 1) * c->n_embd * es;
    if (m->head == m->wte) /* the tied head's matmul reads all of it */
        all += m->qhead ? (int64_t)oj_qtensor_nbytes(m->qhead) : c->vocab_size * c->n_embd * es;
    else if (m->qhead)
        all += (int64_t)oj_qtensor_nbytes(m->qhead) - oj_numel(m->head) * es;
    if (m->quantized)
        for (int64_t l = 0; l < c->n_layer; l++) {
            qslot s[8];
            int n = block_slots((oj_gpt *)m, &m->blocks[l], s);
            for (int i = 0; i < n; i++)
                if (*s[i].q)
                    all += (int64_t)oj_qtensor_nbytes(*s[i].q) -
                           oj_numel(s[i].w) * (int64_t)oj_dtype_size(oj_tensor_dtype(s[i].w));
        }
    return all;
}
