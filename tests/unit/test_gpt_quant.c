// test: GPT models with quantized linear weights (oj_gpt_quantize) for the
// gpt2, llama (untied head) and nanolab families: logits close to the f32
// model's, the static decoder agreeing with the full forward, training
// (grad on) unaffected, and perplexity of a small model trained here (100 AdamW steps) on a
// noisy next-token rule within 0.5% of f32 for q8_0 and 5% for q4_0/q4_1;
// the quantized fast decode step (forced on the CPU) against the
// unquantized step over the same values, and where it is not taken
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "models/gpt_internal.h"
#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "ojas/quant.h"

static oj_engine *engine(void) {
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = 2;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

/* wide: C 256 and an MLP of 512, so every matrix's rows are whole q4_k
 * super-blocks (K a multiple of 256). */
static oj_gpt_config family_config(int which, bool wide) {
    oj_gpt_config c;
    if (which == 0) {
        assert_true(oj_gpt_preset("gpt2-tiny", &c));
    } else if (which == 1) {
        assert_true(oj_gpt_preset("nanolab-tiny", &c));
    } else {
        c = (oj_gpt_config){.family = OJ_LLAMA, .vocab_size = 96, .block_size = 64,
                            .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 64,
                            .mlp_hidden = 128, .norm_eps = 1e-6, .rope_theta = 10000.0,
                            .init_std = 0.02, .untied_head = true};
    }
    c.vocab_size = 96;
    c.block_size = 64;
    if (wide) {
        c.n_embd = 256;
        c.mlp_hidden = 512;
    }
    return c;
}

/* The data: x[t+1] = (5 x[t] + 3) mod V with probability 3/4, else a
 * pseudo-random token: a rule to learn plus noise, so the perplexity of a
 * trained model is well above 1 and below V. */
static void make_tokens(int32_t *ids, int64_t n, int64_t V, uint32_t seed) {
    uint32_t s = seed;
    ids[0] = (int32_t)(seed % (uint32_t)V);
    for (int64_t i = 1; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        ids[i] = (s >> 24) % 4 ? (int32_t)((5 * ids[i - 1] + 3) % V) : (int32_t)((s >> 8) % V);
    }
}

/* RMS of a - b; *scale the RMS of a. */
static double rms_diff(oj_tensor *a, oj_tensor *b, double *scale) {
    int64_t n = oj_numel(a);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(oj_to_host(a, x, sizeof(float) * (size_t)n), OJ_OK);
    assert_int_equal(oj_to_host(b, y, sizeof(float) * (size_t)n), OJ_OK);
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    free(x);
    free(y);
    if (scale) *scale = sqrt(s / (double)n);
    return sqrt(d / (double)n);
}

/* m2 := m with every weight oj_gpt_quantize quantizes replaced by its
 * dequantized value: the rank-2 parameters but the embeddings and
 * positions (gpt2's Conv1D weights [in, out] quantized as [out, in]). */
static void load_dequantized(oj_gpt *m, oj_gpt *m2, oj_qtype t) {
    oj_engine *eng = oj_gpt_engine(m);
    bool gpt2 = oj_gpt_get_config(m)->family == OJ_GPT2;
    oj_named_tensors a = oj_gpt_state_dict(m), b = oj_gpt_state_dict(m2);
    assert_int_equal(a.n, b.n);
    bool prev = oj_set_grad_enabled(eng, false);
    for (int64_t i = 0; i < a.n; i++) {
        const char *n = a.names[i];
        bool quantized = oj_rank(a.tensors[i]) == 2 && !strstr(n, "wte") && !strstr(n, "wpe") &&
                         !strstr(n, "embed_tokens");
        if (!quantized) {
            assert_int_equal(oj_copy_(b.tensors[i], a.tensors[i]), OJ_OK);
            continue;
        }
        oj_tensor *w = gpt2 ? oj_transpose(a.tensors[i], 0, 1) : oj_retain(a.tensors[i]);
        oj_qtensor *q = oj_quantize(w, t);
        oj_tensor *d = oj_dequantize(q);
        oj_tensor *dt = gpt2 ? oj_transpose(d, 0, 1) : oj_retain(d);
        assert_int_equal(oj_copy_(b.tensors[i], dt), OJ_OK);
        oj_release(dt);
        oj_release(d);
        oj_release(w);
        oj_qtensor_free(q);
    }
    oj_set_grad_enabled(eng, prev);
}

/* Each family, random weights: quantized logits near the f32 ones
 * (RMS error within 3% of the logits' RMS for q8_0, 40% for q4; random
 * weights amplify the weights' rounding), and within 4% of those of the f32
 * model holding the dequantized weights (what is left is the rounding of
 * the activations to int8; a tied head's matmul, which m2 cannot hold
 * dequantized apart from its embedding, is left f32 for that comparison), the decoder's
 * greedy tokens equal to the argmax of the quantized full forward, and the
 * forward with grad on (training) still the f32 one. */
static void test_families_close_to_f32(void **state) {
    (void)state;
    for (int run = 0; run < 6; run++) { /* each family, narrow then wide (q4_k) */
        const int fam = run % 3;
        const bool wide = run >= 3;
        oj_engine *eng = engine();
        oj_gpt_config c = family_config(fam, wide);
        c.init_std = 0.1; /* logits far from uniform */
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(eng, &c, 7, &m), OJ_OK);
        int32_t ids[24];
        make_tokens(ids, 24, c.vocab_size, 11);
        assert_int_equal(oj_scope_begin(eng), OJ_OK);
        bool prev = oj_set_grad_enabled(eng, false);
        oj_tensor *idx = oj_from_host(eng, 2, (int64_t[]){1, 24}, OJ_I32, ids, sizeof ids);
        oj_tensor *ref = oj_gpt_forward(m, idx);
        const int64_t f32_bytes = oj_gpt_decode_bytes(m);
        oj_gpt *m2 = NULL;
        assert_int_equal(oj_gpt_create(eng, &c, 8, &m2), OJ_OK);
        for (int t = wide ? OJ_Q4_K : 0; t < (wide ? OJ_QTYPE_COUNT : OJ_Q4_K); t++) {
            load_dequantized(m, m2, (oj_qtype)t);
            oj_tensor *ref2 = oj_gpt_forward(m2, idx);
            assert_int_equal(oj_gpt_quantize(m, (oj_qtype)t), OJ_OK);
            assert_int_equal(oj_gpt_quantized_type(m), t);
            /* the bytes a token reads shrink with the type */
            int64_t qb = oj_gpt_decode_bytes(m);
            assert_true(qb > 0 && qb < f32_bytes);
            oj_tensor *lq = oj_gpt_forward(m, idx);
            assert_non_null(lq);
            double scale, d = rms_diff(ref, lq, &scale);
            double tol = (t == OJ_Q8_0 ? 0.03 : 0.4) * scale;
            print_message("%s %s: logits' RMS error %.4f of their RMS %.4f\n",
                          oj_gpt_family_name(c.family), oj_qtype_name((oj_qtype)t), d, scale);
            if (!(d <= tol))
                fail_msg("%s %s: logits differ by %g (> %g)", oj_gpt_family_name(c.family),
                         oj_qtype_name((oj_qtype)t), d, tol);
            /* a tied head's quantized matmul has no f32 counterpart in m2
             * (its embedding rows stay f32): compared without it */
            oj_qtensor *qh = m->head == m->wte ? m->qhead : NULL;
            if (qh) m->qhead = NULL;
            oj_tensor *lq2 = oj_gpt_forward(m, idx);
            if (qh) m->qhead = qh;
            double s2, d2 = rms_diff(ref2, lq2, &s2);
            print_message("  against the dequantized weights: %.4f of %.4f\n", d2, s2);
            if (!(d2 <= 0.04 * s2))
                fail_msg("%s %s: logits differ from the dequantized model's by %g (> %g)",
                         oj_gpt_family_name(c.family), oj_qtype_name((oj_qtype)t), d2, 0.04 * s2);
            /* the static decoder against the quantized full forward */
            oj_gpt_decoder *dec = NULL;
            assert_int_equal(oj_gpt_decoder_create(m, 24, false, &dec), OJ_OK);
            int32_t got = -1;
            assert_int_equal(oj_gpt_decoder_prefill(dec, ids, 8, &got), OJ_OK);
            for (int i = 8; i < 16; i++) {
                assert_true(got >= 0 && got < c.vocab_size);
                assert_int_equal(oj_gpt_decoder_step(dec, &got), OJ_OK);
            }
            oj_gpt_decoder_free(dec);
        }
        /* grad on: the f32 weights */
        oj_set_grad_enabled(eng, true);
        oj_tensor *lg = oj_gpt_forward(m, idx);
        oj_set_grad_enabled(eng, false);
        assert_true(rms_diff(ref, lg, NULL) < 1e-4);
        oj_set_grad_enabled(eng, prev);
        assert_int_equal(oj_last_status(eng), OJ_OK);
        oj_scope_end(eng);
        oj_gpt_free(m2);
        oj_gpt_free(m);
        assert_int_equal(oj_engine_live_tensors(eng), 0);
        oj_engine_free(eng);
    }
}

/* Greedy tokens of the decoder equal the argmax of the quantized full
 * forward over the sequence it produced (same qmatmul per row). */
static void test_decoder_matches_forward(void **state) {
    (void)state;
    oj_engine *eng = engine();
    oj_gpt_config c = family_config(2, false);
    c.init_std = 0.2;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 5, &m), OJ_OK);
    assert_int_equal(oj_gpt_quantize(m, OJ_Q4_0), OJ_OK);
    int32_t seq[20];
    make_tokens(seq, 6, c.vocab_size, 3);
    oj_gpt_decoder *dec = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, 20, false, &dec), OJ_OK);
    assert_int_equal(oj_gpt_decoder_prefill(dec, seq, 6, &seq[6]), OJ_OK);
    for (int i = 7; i < 20; i++) assert_int_equal(oj_gpt_decoder_step(dec, &seq[i]), OJ_OK);
    oj_gpt_decoder_free(dec);
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *idx = oj_from_host(eng, 2, (int64_t[]){1, 19}, OJ_I32, seq, sizeof(int32_t) * 19);
    oj_tensor *logits = oj_gpt_forward(m, idx);
    oj_tensor *am = oj_argmax(logits, 2, false); /* [1, 19] */
    int64_t best[19];
    assert_int_equal(oj_to_host(am, best, sizeof best), OJ_OK);
    for (int i = 6; i < 20; i++)
        if (best[i - 1] != seq[i])
            fail_msg("position %d: decoder gave %d, the full forward's argmax %lld", i, seq[i],
                     (long long)best[i - 1]);
    oj_set_grad_enabled(eng, prev);
    oj_scope_end(eng);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

/* exp(mean cross-entropy) over [B, T] tokens. */
static double perplexity(oj_gpt *m, oj_tensor *idx, oj_tensor *tgt) {
    oj_engine *eng = oj_gpt_engine(m);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *logits = oj_gpt_forward(m, idx);
    int64_t V = oj_size(logits, 2);
    oj_tensor *flat = oj_reshape(logits, 2, (int64_t[]){oj_numel(logits) / V, V});
    oj_tensor *tf = oj_reshape(tgt, 1, (int64_t[]){oj_numel(tgt)});
    oj_tensor *loss = oj_cross_entropy(flat, tf, -1, 0.0, OJ_REDUCTION_MEAN);
    double l = oj_item(loss);
    oj_set_grad_enabled(eng, prev);
    return exp(l);
}

static void test_perplexity_trained_model(void **state) {
    (void)state;
    oj_engine *eng = engine();
    for (int run = 0; run < 4; run++) { /* gpt2 and llama, narrow then wide (q4_k) */
        const int fam = run % 2 * 2;
        const bool wide = run >= 2;
        oj_gpt_config c = family_config(fam, wide);
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
        oj_optim *o = oj_optim_create(eng);
        oj_optim_hparams h = oj_adamw_hparams(3e-3, 0.0);
        oj_named_tensors sd = oj_gpt_state_dict(m);
        assert_int_equal(oj_optim_add_group(o, &h, &sd), 0);
        enum { B = 8, T = 32 };
        static int32_t buf[B * (T + 1)];
        for (int step = 0; step < 100; step++) {
            oj_scope_begin(eng);
            for (int b = 0; b < B; b++)
                make_tokens(buf + b * (T + 1), T + 1, c.vocab_size, (uint32_t)(step * B + b + 1));
            int32_t x[B * T], y[B * T];
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    x[b * T + t] = buf[b * (T + 1) + t], y[b * T + t] = buf[b * (T + 1) + t + 1];
            oj_tensor *xi = oj_from_host(eng, 2, (int64_t[]){B, T}, OJ_I32, x, sizeof x);
            oj_tensor *yi = oj_from_host(eng, 2, (int64_t[]){B, T}, OJ_I32, y, sizeof y);
            oj_tensor *loss = oj_gpt_loss(m, xi, yi);
            assert_int_equal(oj_backward(loss, false), OJ_OK);
            assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
            oj_optim_zero_grad(o);
            oj_scope_end(eng);
        }
        /* held-out sequences */
        oj_scope_begin(eng);
        int32_t x[B * T], y[B * T];
        for (int b = 0; b < B; b++) {
            make_tokens(buf, T + 1, c.vocab_size, (uint32_t)(100000 + b));
            for (int t = 0; t < T; t++) x[b * T + t] = buf[t], y[b * T + t] = buf[t + 1];
        }
        oj_tensor *xi = oj_from_host(eng, 2, (int64_t[]){B, T}, OJ_I32, x, sizeof x);
        oj_tensor *yi = oj_from_host(eng, 2, (int64_t[]){B, T}, OJ_I32, y, sizeof y);
        double p32 = perplexity(m, xi, yi);
        /* trained: far below uniform (V = 96), above the noise floor */
        if (!(p32 < 20 && p32 > 1.5)) fail_msg("f32 perplexity %g: the model did not train", p32);
        for (int t = wide ? OJ_Q4_K : 0; t < (wide ? OJ_QTYPE_COUNT : OJ_Q4_K); t++) {
            assert_int_equal(oj_gpt_quantize(m, (oj_qtype)t), OJ_OK);
            double pq = perplexity(m, xi, yi);
            double rel = fabs(pq / p32 - 1), bar = t == OJ_Q8_0 ? 0.005 : 0.05;
            print_message("%s %s: perplexity %.4f vs f32 %.4f (%+.3f%%)\n",
                          oj_gpt_family_name(c.family), oj_qtype_name((oj_qtype)t), pq, p32,
                          100 * (pq / p32 - 1));
            if (!(rel <= bar))
                fail_msg("%s %s: perplexity %g vs f32 %g (%.3f%% > %.1f%%)",
                         oj_gpt_family_name(c.family), oj_qtype_name((oj_qtype)t), pq, p32,
                         100 * rel, 100 * bar);
        }
        assert_int_equal(oj_last_status(eng), OJ_OK);
        oj_scope_end(eng);
        oj_optim_free(o);
        oj_gpt_free(m);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_quantize_errors(void **state) {
    (void)state;
    oj_engine *eng = engine();
    oj_gpt_config c = family_config(2, false);
    c.n_embd = 48; /* K = 48: not a multiple of 32 */
    c.n_head = 4;
    c.n_kv_head = 2;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
    assert_int_equal(oj_gpt_quantize(m, OJ_Q8_0), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "K a positive multiple of 32"));
    assert_int_equal(oj_gpt_quantized_type(m), OJ_QTYPE_COUNT);
    oj_clear_error(eng);
    c.n_embd = 64; /* K = 64: not a multiple of q4_k's 256 */
    oj_gpt *m64 = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m64), OJ_OK);
    assert_int_equal(oj_gpt_quantize(m64, OJ_Q4_K), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "q4_k needs [N, K] with N > 0 and K a positive "
                                               "multiple of 256"));
    assert_int_equal(oj_gpt_quantized_type(m64), OJ_QTYPE_COUNT);
    oj_clear_error(eng);
    oj_gpt_free(m64);
    assert_int_equal(oj_gpt_quantize(m, (oj_qtype)5), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* A gpt2's quantized copies set aside (the forward then reads the f32 /
 * bf16 weights), and put back. */
typedef struct {
    oj_qtensor *q[64][4], *head;
} gpt2_copies;

static void copies_hide(oj_gpt *m, gpt2_copies *h) {
    assert_true(m->cfg.n_layer <= 64);
    for (int64_t l = 0; l < m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_qtensor **q[4] = {&b->qc_attn, &b->qattn_proj, &b->qc_fc, &b->qmlp_proj};
        for (int i = 0; i < 4; i++) h->q[l][i] = *q[i], *q[i] = NULL;
    }
    h->head = m->qhead;
    m->qhead = NULL;
    m->quantized = false;
}

static void copies_restore(oj_gpt *m, const gpt2_copies *h) {
    for (int64_t l = 0; l < m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_qtensor **q[4] = {&b->qc_attn, &b->qattn_proj, &b->qc_fc, &b->qmlp_proj};
        for (int i = 0; i < 4; i++) *q[i] = h->q[l][i];
    }
    m->qhead = h->head;
    m->quantized = true;
}

/* Greedy decode (no graph) of m: toks[0..steps] and each step's logits
 * [V] into lg. prefill_unquantized: the prompt runs over the f32 / bf16
 * weights (the quantized copies set aside), the steps over the copies. */
static void decode_greedy(oj_gpt *m, const int32_t *prompt, int n, int steps, int32_t *toks,
                          float *lg, int64_t V, bool prefill_unquantized) {
    oj_engine *eng = oj_gpt_engine(m);
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, n + steps + 1, false, &d), OJ_OK);
    static gpt2_copies h;
    if (prefill_unquantized) copies_hide(m, &h);
    oj_status st = oj_gpt_decoder_prefill(d, prompt, n, &toks[0]);
    if (prefill_unquantized) copies_restore(m, &h);
    if (st != OJ_OK) fail_msg("prefill: %s", oj_last_error(eng));
    for (int s = 0; s <= steps; s++) {
        if (s > 0 && oj_gpt_decoder_step(d, &toks[s]) != OJ_OK)
            fail_msg("step %d: %s", s, oj_last_error(eng));
        oj_scope_begin(eng);
        oj_tensor *l = oj_gpt_decoder_logits(d);
        oj_tensor *f = oj_tensor_dtype(l) == OJ_F32 ? l : oj_cast(l, OJ_F32);
        assert_int_equal(oj_to_host(f, lg + (int64_t)s * V, sizeof(float) * (size_t)V), OJ_OK);
        oj_scope_end(eng);
    }
    oj_gpt_decoder_free(d);
}

/* m's f32/bf16 weights := the values its quantized copies encode (the
 * blocks' matrices dequantized, gpt2's Conv1D ones transposed back; the
 * tied wte := the head's), so the unquantized forward computes what the
 * quantized one should. */
static void weights_from_copies(oj_gpt *m) {
    oj_engine *eng = oj_gpt_engine(m);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_scope_begin(eng);
    for (int64_t l = 0; l < m->cfg.n_layer; l++) {
        oj_gpt_block *b = &m->blocks[l];
        oj_tensor *w[4] = {b->c_attn_w, b->attn_proj_w, b->c_fc_w, b->mlp_proj_w};
        const oj_qtensor *q[4] = {b->qc_attn, b->qattn_proj, b->qc_fc, b->qmlp_proj};
        for (int i = 0; i < 4; i++)
            assert_int_equal(oj_copy_(w[i], oj_transpose(oj_dequantize(q[i]), 0, 1)), OJ_OK);
    }
    assert_true(m->head == m->wte);
    assert_int_equal(oj_copy_(m->wte, oj_dequantize(m->qhead)), OJ_OK);
    oj_scope_end(eng);
    oj_set_grad_enabled(eng, prev);
}

/* The quantized fast decode step (gpt_decode_quant.c, forced on the CPU
 * with OJAS_DECODE_FAST=1): it serves a quantized gpt2 whose matrices'
 * rows are whole 16-byte chunks (C 256, MLP 512), f32 (every type) or
 * bf16 (q8_0, q4_k) around them, and not one with C 64 (q8_0 rows of 68 bytes), nor any without
 * OJAS_DECODE_FAST=1 on the CPU. Against the unquantized generic step
 * over the weights its copies encode (weights_from_copies; the prompt
 * runs unquantized in both, so the caches agree): with f32
 * its logits are within 1e-4 of their largest magnitude (double sums on
 * the CPU, one rounding to f32 a product) and its greedy tokens equal;
 * with bf16 within 6e-2 (the bf16 roundings of the generic step's ops)
 * and the tokens equal up to a near tie; q4_0 and q4_k with the head
 * kernel ending the step (OJAS_DECODE_QHEAD=1), the others without. */
static void test_fast_step_quantized(void **state) {
    (void)state;
    oj_engine *eng = engine();
    enum { P = 6, STEPS = 16 };
    const oj_qtype types[] = {OJ_Q8_0, OJ_Q4_0, OJ_Q4_1, OJ_Q4_K, OJ_FP8_E4M3};
    int32_t prompt[P], ta[STEPS + 1], tb[STEPS + 1];
    make_tokens(prompt, P, 96, 11);
    static float la[(STEPS + 1) * 96], lb[(STEPS + 1) * 96];
    for (int wide = 0; wide < 2; wide++) { /* C 64, then C 256 */
        oj_gpt_config c = family_config(0, wide == 1);
        c.init_std = 0.2;
        const int64_t V = c.vocab_size;
        assert_true(V == 96);
        for (int di = 0; di < 2; di++)
            for (int ti = 0; ti < 5; ti++) {
                if (!wide && (ti != 0 || di != 0)) continue;
                if (di == 1 && types[ti] != OJ_Q8_0 && types[ti] != OJ_Q4_K) continue; /* time */
                const char *what = di ? "bf16" : "f32";
                oj_gpt *m = NULL;
                assert_int_equal(oj_gpt_create(eng, &c, 3, &m), OJ_OK);
                if (di == 1) assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
                assert_int_equal(oj_gpt_quantize(m, types[ti]), OJ_OK);
                oj_kv_cache *kc = NULL;
                assert_int_equal(oj_kv_cache_create(m, 1, 8, &kc), OJ_OK);
                assert_false(oj__gpt_fast_decode_ok(m, kc)); /* the CPU: only when forced */
                setenv("OJAS_DECODE_FAST", "1", 1);
                const bool served = oj__gpt_fast_decode_ok(m, kc);
                oj_kv_cache_free(kc);
                if (!wide) { /* q8_0 rows of 2 blocks, 68 bytes */
                    unsetenv("OJAS_DECODE_FAST");
                    assert_false(served);
                    oj_gpt_free(m);
                    continue;
                }
                assert_true(served);
                weights_from_copies(m);
                /* q4_0 and q4_k with the head ending the step (decode_qnorm_head) */
                setenv("OJAS_DECODE_QHEAD", ti % 2 ? "1" : "0", 1);
                decode_greedy(m, prompt, P, STEPS, tb, lb, V, true); /* the quantized fast step */
                unsetenv("OJAS_DECODE_QHEAD");
                unsetenv("OJAS_DECODE_FAST");
                oj__gpt_free_quantized(m);
                decode_greedy(m, prompt, P, STEPS, ta, la, V, false); /* unquantized, generic */
                const double tol = di ? 6e-2 : 1e-4;
                for (int s = 0; s <= STEPS; s++) {
                    const float *x = lb + s * V, *y = la + s * V;
                    double scale = 1.0;
                    for (int64_t i = 0; i < V; i++) scale = fmax(scale, fabs(y[i]));
                    for (int64_t i = 0; i < V; i++)
                        if (!(fabs((double)x[i] - y[i]) <= tol * scale))
                            fail_msg("%s %s step %d logit %lld: fast %g, generic %g (scale %g)",
                                     oj_qtype_name(types[ti]), what, s, (long long)i, x[i], y[i],
                                     scale);
                    if (ta[s] != tb[s]) {
                        const double gap = fabs((double)y[ta[s]] - y[tb[s]]);
                        if (!di || gap > 2 * tol * scale)
                            fail_msg("%s %s step %d: token fast %d, generic %d (gap %g)",
                                     oj_qtype_name(types[ti]), what, s, tb[s], ta[s], gap);
                        break; /* a near tie: the sequences may part here */
                    }
                }
                oj_gpt_free(m);
            }
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families_close_to_f32),
        cmocka_unit_test(test_decoder_matches_forward),
        cmocka_unit_test(test_perplexity_trained_model),
        cmocka_unit_test(test_quantize_errors),
        cmocka_unit_test(test_fast_step_quantized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
