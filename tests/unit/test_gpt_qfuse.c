// test: a quantized llama's q, k, v and gate, up copies stacked into one
// matrix each (oj__gpt_qfuse, default on; OJAS_QFUSE=0 keeps them apart)
// change no bit on the CPU: for q8_0, q4_0, q4_k and fp8 on a tiny GQA
// llama (k, v narrower than q; with and without qkv biases) the full
// forward's logits and the decoder's greedy tokens and step logits equal
// the separate copies' bit for bit; the views hold the separate copies'
// bytes inside the stacked matrix (no second copy: the engine's live
// storage and oj_gpt_decode_bytes unchanged); a GGUF file written from the fused model
// is byte for byte the separate model's (separate attn_q/k/v and
// ffn_gate/up tensors) and loads back fused, or apart under OJAS_QFUSE=0,
// with the same logits
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/fs.h"
#include "models/gpt_internal.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/quant.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ojas-test-gpt-qfuse-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    unsetenv("OJAS_QFUSE");
    return oj__rmtree(tmpdir, NULL) == OJ_OK ? 0 : -1;
}

static oj_engine *engine(void) {
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = 2;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

/* GQA (4 heads, 2 KV heads of 64), widths whole q4_k super-blocks. */
static oj_gpt_config config(bool bias) {
    return (oj_gpt_config){.family = OJ_LLAMA, .vocab_size = 96, .block_size = 64,
                           .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 256,
                           .mlp_hidden = 512, .norm_eps = 1e-6, .rope_theta = 10000.0,
                           .init_std = 0.2, .untied_head = true, .qkv_bias = bias};
}

/* Whether every block of m holds its stacked matrices. */
static bool all_fused(const oj_gpt *m) {
    for (int64_t l = 0; l < m->cfg.n_layer; l++)
        if (m->blocks[l].qqkv == NULL || m->blocks[l].qgate_up == NULL) return false;
    return true;
}

static bool none_fused(const oj_gpt *m) {
    for (int64_t l = 0; l < m->cfg.n_layer; l++)
        if (m->blocks[l].qqkv != NULL || m->blocks[l].qgate_up != NULL) return false;
    return true;
}

/* m (seed 11) quantized to t with OJAS_QFUSE unset (fused) or "0";
 * *bytes the growth of the engine's live storage for it. */
static oj_gpt *make(oj_engine *eng, bool bias, oj_qtype t, bool fused, int64_t *bytes) {
    oj_gpt_config c = config(bias);
    if (fused) unsetenv("OJAS_QFUSE");
    else setenv("OJAS_QFUSE", "0", 1);
    const int64_t before = oj_engine_memory_allocated(eng);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 11, &m), OJ_OK);
    if (oj_gpt_quantize(m, t) != OJ_OK) fail_msg("quantize %s: %s", oj_qtype_name(t), oj_last_error(eng));
    *bytes = oj_engine_memory_allocated(eng) - before;
    unsetenv("OJAS_QFUSE");
    assert_true(fused ? all_fused(m) : none_fused(m));
    return m;
}

/* The forward's logits [2, 12, V] (grad off), malloc'd; *n their count. */
static float *logits_of(oj_gpt *m, size_t *n) {
    oj_engine *eng = oj_gpt_engine(m);
    int32_t ids[24] = {1, 5, 9, 2, 77, 3, 3, 40, 12, 0, 95, 8,
                       60, 61, 7, 7, 7, 30, 2, 88, 14, 15, 16, 1};
    assert_int_equal(oj_scope_begin(eng), OJ_OK);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *idx = oj_from_host(eng, 2, (int64_t[]){2, 12}, OJ_I32, ids, sizeof ids);
    oj_tensor *l = oj_gpt_forward(m, idx);
    if (l == NULL) fail_msg("forward: %s", oj_last_error(eng));
    *n = (size_t)oj_numel(l);
    float *out = malloc(sizeof(float) * *n);
    assert_non_null(out);
    assert_int_equal(oj_to_host(l, out, sizeof(float) * *n), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    oj_scope_end(eng);
    return out;
}

#define PROMPT 5
#define STEPS 12

/* Greedy decode (no graph) of a fixed prompt: toks[0..STEPS] and each
 * step's logits [V] into lg. */
static void decode(oj_gpt *m, int32_t *toks, float *lg) {
    oj_engine *eng = oj_gpt_engine(m);
    const int64_t V = m->cfg.vocab_size;
    const int32_t prompt[PROMPT] = {3, 17, 42, 8, 90};
    oj_gpt_decoder *d = NULL;
    assert_int_equal(oj_gpt_decoder_create(m, PROMPT + STEPS + 1, false, &d), OJ_OK);
    if (oj_gpt_decoder_prefill(d, prompt, PROMPT, &toks[0]) != OJ_OK)
        fail_msg("prefill: %s", oj_last_error(eng));
    for (int s = 0; s <= STEPS; s++) {
        if (s > 0 && oj_gpt_decoder_step(d, &toks[s]) != OJ_OK)
            fail_msg("step %d: %s", s, oj_last_error(eng));
        oj_scope_begin(eng);
        oj_tensor *l = oj_gpt_decoder_logits(d);
        assert_int_equal(oj_to_host(l, lg + (int64_t)s * V, sizeof(float) * (size_t)V), OJ_OK);
        oj_scope_end(eng);
    }
    oj_gpt_decoder_free(d);
}

/* The views of block b of f hold the bytes of sep's separate copies, at
 * their rows of the stacked matrices. */
static void views_are_rows(const oj_gpt_block *f, const oj_gpt_block *sep) {
    const oj_qtensor *fv[5] = {f->qq, f->qk, f->qv, f->qw_gate, f->qw_up};
    const oj_qtensor *sv[5] = {sep->qq, sep->qk, sep->qv, sep->qw_gate, sep->qw_up};
    const uint8_t *base[2] = {oj_qtensor_data(f->qqkv), oj_qtensor_data(f->qgate_up)};
    size_t at[2] = {0, 0};
    for (int i = 0; i < 5; i++) {
        const int g = i < 3 ? 0 : 1;
        assert_int_equal(oj_qtensor_rows(fv[i]), oj_qtensor_rows(sv[i]));
        assert_int_equal(oj_qtensor_nbytes(fv[i]), oj_qtensor_nbytes(sv[i]));
        assert_ptr_equal(oj_qtensor_data(fv[i]), base[g] + at[g]);
        assert_memory_equal(oj_qtensor_data(fv[i]), oj_qtensor_data(sv[i]), oj_qtensor_nbytes(sv[i]));
        at[g] += oj_qtensor_nbytes(sv[i]);
    }
    assert_int_equal(at[0], oj_qtensor_nbytes(f->qqkv));
    assert_int_equal(at[1], oj_qtensor_nbytes(f->qgate_up));
}

static void check_type(oj_qtype t, bool bias) {
    oj_engine *eng = engine();
    int64_t bs, bf;
    oj_gpt *sep = make(eng, bias, t, false, &bs);
    oj_gpt *fus = make(eng, bias, t, true, &bf);
    assert_int_equal(bs, bf);
    assert_int_equal(oj_gpt_decode_bytes(sep), oj_gpt_decode_bytes(fus));
    for (int64_t l = 0; l < fus->cfg.n_layer; l++) views_are_rows(&fus->blocks[l], &sep->blocks[l]);

    size_t ns, nf;
    float *ls = logits_of(sep, &ns), *lf = logits_of(fus, &nf);
    assert_int_equal(ns, nf);
    if (memcmp(ls, lf, sizeof(float) * ns) != 0)
        fail_msg("%s%s: the fused forward's logits differ from the separate copies'",
                 oj_qtype_name(t), bias ? " (qkv bias)" : "");
    free(ls);
    free(lf);

    const int64_t V = sep->cfg.vocab_size;
    int32_t ts[STEPS + 1], tf[STEPS + 1];
    float *gs = malloc(sizeof(float) * (size_t)(V * (STEPS + 1)));
    float *gf = malloc(sizeof(float) * (size_t)(V * (STEPS + 1)));
    assert_true(gs && gf);
    decode(sep, ts, gs);
    decode(fus, tf, gf);
    assert_memory_equal(ts, tf, sizeof ts);
    if (memcmp(gs, gf, sizeof(float) * (size_t)(V * (STEPS + 1))) != 0)
        fail_msg("%s%s: the fused decoder's step logits differ from the separate copies'",
                 oj_qtype_name(t), bias ? " (qkv bias)" : "");
    /* the greedy sequence is not one token repeated: the steps differ */
    bool varied = false;
    for (int s = 1; s <= STEPS; s++) varied = varied || ts[s] != ts[0];
    assert_true(varied);
    free(gs);
    free(gf);
    oj_gpt_free(fus);
    oj_gpt_free(sep);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_q8_0(void **state) {
    (void)state;
    check_type(OJ_Q8_0, false);
    check_type(OJ_Q8_0, true);
}

static void test_q4_0(void **state) {
    (void)state;
    check_type(OJ_Q4_0, false);
    check_type(OJ_Q4_0, true);
}

static void test_q4_k(void **state) {
    (void)state;
    check_type(OJ_Q4_K, false);
}

static void test_fp8(void **state) {
    (void)state;
    check_type(OJ_FP8_E4M3, false);
}

/* The whole file's bytes, malloc'd; *n its size. */
static uint8_t *file_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    uint8_t *b = malloc((size_t)len);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* GGUF: the fused model writes the separate model's file, and the file
 * loads back fused (or apart under OJAS_QFUSE=0) with the same logits. */
static void test_gguf_export(void **state) {
    (void)state;
    const oj_qtype types[3] = {OJ_Q8_0, OJ_Q4_0, OJ_Q4_K};
    for (int i = 0; i < 3; i++) {
        oj_engine *eng = engine();
        int64_t bs, bf;
        oj_gpt *sep = make(eng, false, types[i], false, &bs);
        oj_gpt *fus = make(eng, false, types[i], true, &bf);
        char ps[300], pf[300];
        snprintf(ps, sizeof ps, "%s/sep-%d.gguf", tmpdir, i);
        snprintf(pf, sizeof pf, "%s/fus-%d.gguf", tmpdir, i);
        oj_error err = {0};
        if (oj_gpt_save_gguf(sep, NULL, ps, "tiny", &err) != OJ_OK) fail_msg("%s", err.message);
        if (oj_gpt_save_gguf(fus, NULL, pf, "tiny", &err) != OJ_OK) fail_msg("%s", err.message);
        size_t ns, nf;
        uint8_t *bs_ = file_bytes(ps, &ns), *bf_ = file_bytes(pf, &nf);
        assert_int_equal(ns, nf);
        if (memcmp(bs_, bf_, ns) != 0)
            fail_msg("%s: the fused model's GGUF file differs from the separate one's",
                     oj_qtype_name(types[i]));
        free(bs_);
        free(bf_);
        oj_gguf *g = NULL;
        assert_int_equal(oj_gguf_open(pf, &g, &err), OJ_OK);
        assert_true(oj_gguf_find_tensor(g, "blk.1.attn_k.weight") >= 0);
        assert_true(oj_gguf_find_tensor(g, "blk.1.ffn_up.weight") >= 0);
        assert_int_equal(oj_gguf_tensor_dims(g, oj_gguf_find_tensor(g, "blk.1.attn_v.weight"))[1],
                         128); /* Hkv D rows, alone */
        oj_gguf_close(g);

        size_t nl, n0, n1;
        float *lf = logits_of(fus, &nl);
        oj_gpt *back = NULL;
        if (oj_gpt_load_gguf(eng, pf, &back, &err) != OJ_OK) fail_msg("%s", err.message);
        assert_true(all_fused(back));
        float *l1 = logits_of(back, &n1);
        oj_gpt_free(back);
        setenv("OJAS_QFUSE", "0", 1);
        oj_status st = oj_gpt_load_gguf(eng, pf, &back, &err);
        unsetenv("OJAS_QFUSE");
        if (st != OJ_OK) fail_msg("%s", err.message);
        assert_true(none_fused(back));
        float *l0 = logits_of(back, &n0);
        oj_gpt_free(back);
        assert_int_equal(nl, n1);
        assert_int_equal(nl, n0);
        assert_memory_equal(lf, l1, sizeof(float) * nl);
        assert_memory_equal(lf, l0, sizeof(float) * nl);
        free(lf);
        free(l1);
        free(l0);

        /* the state_dict: the same separate parameters */
        oj_named_tensors a = oj_gpt_state_dict(sep), b = oj_gpt_state_dict(fus);
        assert_int_equal(a.n, b.n);
        for (int64_t k = 0; k < a.n; k++) assert_string_equal(a.names[k], b.names[k]);
        oj_gpt_free(fus);
        oj_gpt_free(sep);
        oj_engine_free(eng);
    }
}

/* Quantizing again keeps the stacking; a gpt2 model has none. */
static void test_requantize_and_families(void **state) {
    (void)state;
    oj_engine *eng = engine();
    int64_t bytes;
    oj_gpt *m = make(eng, false, OJ_Q8_0, true, &bytes);
    assert_int_equal(oj_gpt_quantize(m, OJ_Q4_0), OJ_OK);
    assert_true(all_fused(m));
    assert_int_equal(oj_qtensor_type(m->blocks[0].qqkv), OJ_Q4_0);
    oj_gpt_free(m);
    oj_gpt_config c;
    assert_true(oj_gpt_preset("gpt2-tiny", &c));
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
    assert_int_equal(oj_gpt_quantize(m, OJ_Q8_0), OJ_OK);
    assert_true(none_fused(m));
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_gguf_export),
        cmocka_unit_test(test_requantize_and_families),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
