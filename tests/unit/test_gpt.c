// test: GPT models — shapes, initial loss ~ ln V, init independent of
// creation order, cached decoding equal to full recompute, gradients reach
// every parameter, a few SGD steps lower the loss, bad inputs refused.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"

/* This file's cases name their own engines `eng`; the shared ones use case_eng. */
#define ET_ENGINE case_eng
#include "engine_testutil.h"
#include "gpt_testutil.h"
#include "nn_testutil.h"

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 3;
    cfg.numerics = OJ_NUMERICS_EXACT;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

static oj_tensor *tokens(oj_engine *eng, int64_t B, int64_t T, int64_t V, uint32_t salt) {
    int64_t *v = malloc((size_t)(B * T) * sizeof *v);
    uint32_t s = 12345u + salt;
    for (int64_t i = 0; i < B * T; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (int64_t)((s >> 8) % (uint32_t)V);
    }
    int64_t shape[2] = {B, T};
    oj_tensor *t = oj_from_host(eng, 2, shape, OJ_I64, v, (size_t)(B * T) * sizeof *v);
    free(v);
    return t;
}

static const char *k_presets[] = {"nanolab-tiny", "gpt2-tiny"};

static void test_forward_shapes_and_initial_loss(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        oj_engine *eng = eng_new();
        oj_gpt_config cfg;
        assert_true(oj_gpt_preset(k_presets[p], &cfg));
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(eng, &cfg, 1, &m), OJ_OK);
        oj_scope_begin(eng);
        oj_tensor *x = tokens(eng, 2, 16, cfg.vocab_size, 0), *y = tokens(eng, 2, 16, cfg.vocab_size, 1);
        oj_tensor *logits = oj_gpt_forward(m, x);
        if (logits == NULL) fail_msg("%s: %s", k_presets[p], oj_last_error(eng));
        assert_int_equal(oj_rank(logits), 3);
        assert_int_equal(oj_size(logits, 2), cfg.vocab_size);
        oj_tensor *loss = oj_gpt_loss(m, x, y);
        assert_non_null(loss);
        double l = oj_item(loss);
        assert_true(fabs(l - log((double)cfg.vocab_size)) < 0.5); // near uniform at init
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        oj_named_tensors sd = oj_gpt_state_dict(m);
        for (int64_t i = 0; i < sd.n; i++) {
            if (strstr(sd.names[i], "lambda")) continue; // zero-init mix may get a zero grad
            oj_tensor *g = oj_grad(sd.tensors[i]);
            if (g == NULL) fail_msg("%s: no gradient for %s", k_presets[p], sd.names[i]);
        }
        oj_scope_end(eng);
        oj_gpt_free(m);
        assert_int_equal(oj_engine_live_tensors(eng), 0);
        oj_engine_free(eng);
    }
}

static void test_init_depends_only_on_seed_and_name(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    oj_gpt *a = NULL, *b = NULL;
    assert_int_equal(oj_gpt_create(eng, &cfg, 9, &a), OJ_OK);
    oj_tensor *junk = oj_rand_normal(eng, 1, (int64_t[]){100}, OJ_F32, 0, 1); // move the RNG
    cfg.n_layer = 3; // an extra layer: shared names must still match (except the
                     // residual projections, whose std scales with 1/sqrt(2 n_layer))
    assert_int_equal(oj_gpt_create(eng, &cfg, 9, &b), OJ_OK);
    oj_named_tensors sa = oj_gpt_state_dict(a), sb = oj_gpt_state_dict(b);
    int matched = 0;
    for (int64_t i = 0; i < sa.n; i++)
        for (int64_t j = 0; j < sb.n; j++)
            if (strcmp(sa.names[i], sb.names[j]) == 0 && !strstr(sa.names[i], "o_proj") &&
                !strstr(sa.names[i], "down_proj")) {
                size_t n = (size_t)oj_numel(sa.tensors[i]) * sizeof(float);
                assert_memory_equal(oj_data_ptr(sa.tensors[i]), oj_data_ptr(sb.tensors[j]), n);
                matched++;
            }
    assert_int_equal(matched, sa.n - 2 * 2); // 2 layers x 2 residual projections
    oj_release(junk);
    oj_gpt_free(a);
    oj_gpt_free(b);
    oj_engine_free(eng);
}

static void test_cached_decode_equals_recompute(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        oj_engine *eng = eng_new();
        oj_gpt_config cfg;
        assert_true(oj_gpt_preset(k_presets[p], &cfg));
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(eng, &cfg, 5, &m), OJ_OK);
        oj_set_grad_enabled(eng, false);
        const int64_t T = 12, V = cfg.vocab_size;
        oj_kv_cache *c = NULL;
        assert_int_equal(oj_kv_cache_create(m, 1, T, &c), OJ_OK);
        oj_scope_begin(eng);
        oj_tensor *x = tokens(eng, 1, T, V, 7);
        oj_tensor *full = oj_gpt_forward(m, x); // [1, T, V]
        assert_non_null(full);
        // prefill 5 tokens, then one at a time
        int64_t pos = 0, steps[] = {5, 1, 1, 1, 1, 1, 1, 1};
        for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
            oj_tensor *chunk = oj_narrow(x, 1, pos, steps[s]);
            oj_tensor *cc = oj_contiguous(chunk);
            oj_tensor *part = oj_gpt_forward_cached(m, c, cc);
            if (part == NULL) fail_msg("%s: %s", k_presets[p], oj_last_error(eng));
            oj_tensor *ref = oj_narrow(full, 1, pos, steps[s]);
            for (int64_t i = 0; i < steps[s] * V; i++) {
                double a = oj_item_at(part, i), b = oj_item_at(ref, i);
                if (fabs(a - b) > 1e-4 * (1 + fabs(b)))
                    fail_msg("%s: position %lld logit %lld: cached %g vs full %g", k_presets[p],
                             (long long)pos, (long long)(i % V), a, b);
            }
            pos += steps[s];
        }
        assert_int_equal(oj_kv_cache_len(c), pos);
        // generation is reproducible for a seed
        oj_sampler_config sc = oj_sampler_config_default();
        sc.max_new_tokens = 6;
        sc.seed = 11;
        int32_t prompt[3] = {1, 2, 3};
        const int32_t *pp = prompt;
        int64_t plen = 3, n1 = 0, n2 = 0;
        int32_t *g1 = NULL, *g2 = NULL;
        assert_int_equal(oj_generate(m, 1, &pp, &plen, &sc, &g1, &n1, NULL, NULL), OJ_OK);
        assert_int_equal(oj_generate(m, 1, &pp, &plen, &sc, &g2, &n2, NULL, NULL), OJ_OK);
        assert_int_equal(n1, 6);
        assert_int_equal(n1, n2);
        assert_memory_equal(g1, g2, (size_t)n1 * sizeof *g1);
        free(g1);
        free(g2);
        oj_scope_end(eng);
        oj_kv_cache_free(c);
        oj_gpt_free(m);
        oj_engine_free(eng);
    }
}

// A one-layer nanolab model with a full ring cache of W positions: the
// logits for a new token equal a fresh forward over the last W tokens,
// since rotary attention depends on relative positions only.
static void test_sliding_window_decode(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    cfg.n_layer = 1;
    cfg.block_size = 8;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &cfg, 4, &m), OJ_OK);
    oj_set_grad_enabled(eng, false);
    const int64_t W = 6, N = 13, V = cfg.vocab_size;
    oj_kv_cache *c = NULL;
    assert_int_equal(oj_kv_cache_create(m, 1, W, &c), OJ_OK);
    oj_scope_begin(eng);
    oj_tensor *x = tokens(eng, 1, N, V, 21);
    oj_tensor *pre = oj_narrow(x, 1, 0, W);
    oj_tensor *prec = oj_contiguous(pre);
    assert_non_null(oj_gpt_forward_cached(m, c, prec));
    for (int64_t t = W; t < N; t++) { // past block_size (8) too
        oj_tensor *one = oj_contiguous(oj_narrow(x, 1, t, 1));
        oj_tensor *got = oj_gpt_forward_cached(m, c, one);
        if (got == NULL) fail_msg("step %lld: %s", (long long)t, oj_last_error(eng));
        oj_tensor *win = oj_contiguous(oj_narrow(x, 1, t - W + 1, W));
        oj_tensor *full = oj_gpt_forward(m, win);
        oj_tensor *ref = oj_narrow(full, 1, W - 1, 1);
        for (int64_t i = 0; i < V; i++) {
            double a = oj_item_at(got, i), b = oj_item_at(ref, i);
            if (fabs(a - b) > 1e-4 * (1 + fabs(b)))
                fail_msg("position %lld logit %lld: window %g vs fresh %g", (long long)t,
                         (long long)i, a, b);
        }
    }
    // a prefill never wraps, and gpt2 stops at block_size
    oj_tensor *two = oj_contiguous(oj_narrow(x, 1, 0, 2));
    assert_null(oj_gpt_forward_cached(m, c, two));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_kv_cache_free(c);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

static void test_sgd_steps_lower_the_loss(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &cfg, 2, &m), OJ_OK);
    oj_tensor *x = tokens(eng, 2, 16, cfg.vocab_size, 3);
    oj_tensor *y = oj_narrow(x, 1, 0, 16); // memorise a fixed batch
    oj_named_tensors sd = oj_gpt_state_dict(m);
    double first = 0, last = 0;
    for (int step = 0; step < 8; step++) {
        oj_scope_begin(eng);
        oj_tensor *loss = oj_gpt_loss(m, x, y);
        assert_non_null(loss);
        if (step == 0) first = oj_item(loss);
        last = oj_item(loss);
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        oj_set_grad_enabled(eng, false);
        for (int64_t i = 0; i < sd.n; i++) {
            oj_tensor *g = oj_grad(sd.tensors[i]);
            if (g == NULL) continue;
            oj_tensor *u = oj_mul_scalar(g, -0.5);
            assert_int_equal(oj_add_(sd.tensors[i], u), OJ_OK);
            oj_zero_grad(sd.tensors[i]);
        }
        oj_set_grad_enabled(eng, true);
        oj_scope_end(eng);
    }
    assert_true(last < first - 0.5);
    oj_release(x);
    oj_release(y);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_bad_inputs(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_gpt_config cfg;
    assert_false(oj_gpt_preset("no-such-model", &cfg));
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    oj_gpt_config bad = cfg;
    bad.n_head = 3; // 64 % 3 != 0
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &bad, 1, &m), OJ_ERR_INVALID_ARGUMENT);
    assert_null(m);
    oj_clear_error(eng);
    assert_int_equal(oj_gpt_create(eng, &cfg, 1, &m), OJ_OK);
    oj_scope_begin(eng);
    oj_tensor *x = tokens(eng, 1, cfg.block_size + 1, cfg.vocab_size, 0);
    assert_null(oj_gpt_forward(m, x)); // longer than the context
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    int64_t big[2] = {1, 4};
    int64_t ids[4] = {1, 2, cfg.vocab_size, 3};
    oj_tensor *oov = oj_from_host(eng, 2, big, OJ_I64, ids, sizeof ids);
    assert_null(oj_gpt_forward(m, oov)); // token id outside the vocabulary
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_gpt_free(m);
    oj_engine_free(eng);
}

/* Parameter counts from the config equal the created models' (and GPT-2
 * small's published 124,439,808); a model too big for the budget is refused
 * before anything is allocated, naming the numbers (it used to fill the
 * budget, or the machine, tensor by tensor first). */
static void test_preflight_budget(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    const char *names[] = {"nanolab-tiny", "gpt2-tiny", "nanolab-small"};
    for (int i = 0; i < 3; i++) {
        oj_gpt_config c;
        assert_true(oj_gpt_preset(names[i], &c));
        oj_gpt *m;
        assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
        assert_int_equal(oj_gpt_config_num_params(&c), oj_gpt_num_params(m));
        oj_gpt_free(m);
    }
    oj_gpt_config g;
    assert_true(oj_gpt_preset("gpt2-124m", &g));
    assert_int_equal(oj_gpt_config_num_params(&g), 124439808);
    oj_engine_free(eng);

    oj_engine_config ec = oj_engine_config_default();
    ec.budget_bytes = INT64_C(256) << 20;
    assert_int_equal(oj_engine_create(&ec, &eng, NULL), OJ_OK);
    /* every tensor fits the budget, all of them (64 layers, C 1024) do not */
    oj_gpt_config c;
    assert_true(oj_gpt_preset("nanolab-tiny", &c));
    c.n_layer = 64;
    c.n_embd = 1024;
    c.n_head = 8;
    c.n_kv_head = 8;
    c.mlp_hidden = 2048;
    oj_gpt *m = (oj_gpt *)1;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_ERR_CAPACITY);
    assert_null(m);
    assert_int_equal(oj_budget_peak(oj_engine_budget(eng)), 0); /* nothing allocated */
    char want[160];
    snprintf(want, sizeof want, "the model's %lld parameters need %lld bytes",
             (long long)oj_gpt_config_num_params(&c), (long long)oj_gpt_config_num_params(&c) * 4);
    assert_non_null(strstr(oj_last_error(eng), want));
    assert_non_null(strstr(oj_last_error(eng), "budget 'root'"));
    /* n_embd 2^20 (a state.json's bad value): refused at once, not grown */
    c.n_layer = 2;
    c.n_embd = 1 << 20;
    c.n_head = 4;
    c.n_kv_head = 4;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_peak(oj_engine_budget(eng)), 0);
    assert_non_null(strstr(oj_last_error(eng), "nothing was allocated"));
    oj_engine_free(eng);
}

/* ---- the KV cache, generation and dtype conversion misused: a cache of
 * another model, a NULL cache, a cache freed after its model, the context
 * error message, NULL prompts and non-finite sampling settings, a cache or
 * decoder made before oj_gpt_to_dtype, the conversion under a tight budget;
 * and nanolab's fused training projections (gradients against central
 * differences of the separate linears, frozen weights, grad-on == grad-off).
 * Each case runs on a fresh engine `case_eng` (engine_testutil.h). */

static oj_gpt *m2, *m4; /* 2 and 4 layers, same width */

/* Per-case setup: case_eng, and m2 and m4 on it. */
static int pair_in(void **state) {
    if (et_engine_in(state)) return -1;
    oj_gpt_config c;
    if (!oj_gpt_preset("nanolab-tiny", &c)) return -1;
    c.vocab_size = 50;
    c.block_size = 8;
    c.n_layer = 2;
    if (oj_gpt_create(case_eng, &c, 1, &m2) != OJ_OK) return -1;
    c.n_layer = 4;
    return oj_gpt_create(case_eng, &c, 1, &m4) == OJ_OK ? 0 : -1;
}
/* Per-case teardown: the models freed, then et_engine_out. */
static int pair_out(void **state) {
    oj_gpt_free(m2);
    oj_gpt_free(m4);
    return et_engine_out(state);
}

/* A KV cache created for one model and used with another (more layers) is
 * OJ_ERR_INVALID_ARGUMENT naming "another model", the cache untouched; a
 * NULL cache is an error too; the cache's own model still works. */
static void test_cache_of_another_model(void **state) {
    (void)state;
    oj_kv_cache *c = NULL;
    assert_int_equal(oj_kv_cache_create(m2, 1, 8, &c), OJ_OK);
    oj_scope_begin(case_eng);
    oj_tensor *idx = oj_zeros(case_eng, 2, (int64_t[]){1, 2}, OJ_I64);
    assert_null(oj_gpt_forward_cached(m4, c, idx));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "another model");
    assert_int_equal(oj_kv_cache_len(c), 0);
    /* a NULL cache: an error recorded */
    assert_null(oj_gpt_forward_cached(m2, NULL, idx));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "KV cache is NULL");
    /* its own model still works */
    assert_non_null(oj_gpt_forward_cached(m2, c, idx));
    assert_int_equal(oj_kv_cache_len(c), 2);
    oj_scope_end(case_eng);
    oj_kv_cache_free(c);
}

/* A KV cache freed after its model: no read of the freed model, no
 * tensor left. */
static void test_cache_freed_after_model(void **state) {
    (void)state;
    const int64_t live = oj_engine_live_tensors(case_eng);
    oj_gpt_config c = *oj_gpt_get_config(m2);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(case_eng, &c, 3, &m), OJ_OK);
    oj_kv_cache *kc = NULL;
    assert_int_equal(oj_kv_cache_create(m, 2, 8, &kc), OJ_OK);
    oj_gpt_free(m);
    oj_kv_cache_free(kc);
    assert_int_equal(oj_engine_live_tensors(case_eng), live);
}

/* The context error names the model's block_size (8), no stray digit. */
static void test_context_message(void **state) {
    (void)state;
    oj_scope_begin(case_eng);
    oj_tensor *idx = oj_zeros(case_eng, 2, (int64_t[]){1, 9}, OJ_I64);
    assert_null(oj_gpt_forward(m2, idx));
    assert_int_equal(oj_last_status(case_eng), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(case_eng), "(block_size 8)"));
    oj_clear_error(case_eng);
    oj_scope_end(case_eng);
}

/* oj_generate refuses a NULL prompt with a length and a NaN, infinite or
 * out-of-range temperature, top_p or repetition penalty
 * (OJ_ERR_INVALID_ARGUMENT, named); greedy decoding still works. */
static void test_generate_bad_arguments(void **state) {
    (void)state;
    const int32_t *prompts[1] = {NULL};
    int64_t lens[1] = {1};
    int32_t *out[1] = {NULL};
    int64_t olen[1] = {0};
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 2;
    assert_int_equal(oj_generate(m2, 1, prompts, lens, &sc, out, olen, NULL, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "prompt 0 is NULL");
    int32_t p[1] = {3};
    prompts[0] = p;
    const double bad[][3] = {{NAN, 1, 1}, {INFINITY, 1, 1}, {1, NAN, 1}, {1, 1, NAN},
                             {1, 1, 0},   {1, 1, -2},       {1, 1, INFINITY}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sc.temperature = bad[i][0];
        sc.top_p = bad[i][1];
        sc.repetition_penalty = bad[i][2];
        assert_int_equal(oj_generate(m2, 1, prompts, lens, &sc, out, olen, NULL, NULL),
                         OJ_ERR_INVALID_ARGUMENT);
        ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "generate: temperature");
    }
    /* greedy still works */
    sc = oj_sampler_config_default();
    sc.temperature = 0;
    sc.max_new_tokens = 2;
    assert_int_equal(oj_generate(m2, 1, prompts, lens, &sc, out, olen, NULL, NULL), OJ_OK);
    assert_int_equal(olen[0], 2);
    free(out[0]);
}

/* A budget too small for the staged copies fails oj_gpt_to_dtype at any
 * point with every parameter still f32 with its values, nothing leaked, the
 * budget back where it was, and the error naming the tensor. With room it
 * succeeds and the weights' bytes halve. */
static void test_params_to_dtype_budget(void **state) {
    (void)state;
    oj_engine *saved = case_eng;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.budget_bytes = 64 << 20;
    assert_int_equal(oj_engine_create(&cfg, &case_eng, NULL), OJ_OK);
    oj_budget *B = oj_engine_budget(case_eng);
    oj_gpt *m = gt_tiny_model(case_eng, "nanolab-tiny", 0);
    const double cs = gt_checksum(m);
    const int64_t live0 = oj_engine_live_tensors(case_eng), np = oj_gpt_num_params(m);
    const int64_t alloc0 = oj_engine_memory_allocated(case_eng);
    int failures = 0;
    for (int64_t extra = 0; extra < np; extra += np / 8) { /* bf16 copies need 2 np bytes */
        oj_engine_trim_pool(case_eng);
        const int64_t cur = oj_budget_current(B);
        assert_int_equal(oj_budget_set_limit(B, cur + extra), OJ_OK);
        assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_ERR_CAPACITY);
        ET_EXPECT_ERR_HAS(OJ_ERR_CAPACITY, "params_to_dtype: converting 'transformer.");
        failures++;
        oj_named_tensors sd = oj_gpt_state_dict(m);
        for (int64_t i = 0; i < sd.n; i++) assert_int_equal(oj_tensor_dtype(sd.tensors[i]), OJ_F32);
        assert_int_equal(oj_engine_live_tensors(case_eng), live0);
        assert_int_equal(oj_engine_memory_allocated(case_eng), alloc0);
        oj_engine_trim_pool(case_eng);
        assert_int_equal(oj_budget_current(B), cur);
    }
    assert_true(failures >= 8);
    assert_true(gt_checksum(m) == cs);
    assert_int_equal(oj_budget_set_limit(B, 64 << 20), OJ_OK);
    assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(case_eng), live0);
    const int64_t alloc1 = oj_engine_memory_allocated(case_eng);
    assert_true(alloc1 <= alloc0 * 6 / 10 && alloc1 >= alloc0 * 4 / 10);
    assert_true(fabs(gt_checksum(m) - cs) <= 0.01 * fabs(cs) + 1.0);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
    assert_int_equal(oj_engine_memory_allocated(case_eng), 0);
    oj_engine_free(case_eng);
    case_eng = saved;
}

/* A KV cache or decoder made before oj_gpt_to_dtype is refused up front
 * (OJ_ERR_DTYPE naming the cache and the conversion) before any key is
 * written; under autocast (q, k, v cast to one dtype) the mix works; one
 * made after the conversion works. */
static void test_cache_made_before_conversion(void **state) {
    (void)state;
    const char *presets[2] = {"nanolab-tiny", "gpt2-tiny"};
    for (int k = 0; k < 2; k++) {
        oj_gpt *m = gt_tiny_model(case_eng, presets[k], 0);
        oj_kv_cache *c = NULL;
        oj_gpt_decoder *d = NULL;
        assert_int_equal(oj_kv_cache_create(m, 1, 16, &c), OJ_OK);
        assert_int_equal(oj_gpt_decoder_create(m, 16, false, &d), OJ_OK);
        assert_int_equal(oj_gpt_to_dtype(m, OJ_BF16), OJ_OK);
        oj_scope_begin(case_eng);
        oj_tensor *idx = gt_ids(case_eng, 1, 4);
        assert_null(oj_gpt_forward_cached(m, c, idx));
        ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "the KV cache holds f32 but the weights are bf16");
        assert_int_equal(oj_kv_cache_len(c), 0);
        const int32_t prompt[4] = {1, 2, 3, 4};
        int32_t next = -1;
        assert_int_equal(oj_gpt_decoder_prefill(d, prompt, 4, &next), OJ_ERR_DTYPE);
        ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "create caches and decoders after converting");
        oj_set_autocast(case_eng, true, OJ_BF16);
        assert_non_null(oj_gpt_forward_cached(m, c, idx));
        oj_set_autocast(case_eng, false, OJ_BF16);
        assert_int_equal(oj_kv_cache_len(c), 4);
        oj_scope_end(case_eng);
        oj_gpt_decoder_free(d);
        oj_kv_cache_free(c);
        /* made after the conversion: bf16, and it works */
        assert_int_equal(oj_gpt_decoder_create(m, 16, false, &d), OJ_OK);
        assert_int_equal(oj_gpt_decoder_prefill(d, prompt, 4, &next), OJ_OK);
        assert_int_equal(oj_gpt_decoder_step(d, &next), OJ_OK);
        assert_true(next >= 0 && next < 50);
        oj_gpt_decoder_free(d);
        oj_gpt_free(m);
    }
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
}

/* ---- nanolab's fused training projections (q/k/v/gate and gate/up as
 * one GEMM over concatenated weights while grad mode is on) */

typedef struct {
    oj_gpt *m;
    oj_tensor *idx;
} loss_ctx;

static oj_tensor *model_loss(oj_tensor *const *inputs, int n, void *vctx) {
    (void)inputs;
    (void)n;
    loss_ctx *ctx = vctx;
    return oj_gpt_loss(ctx->m, ctx->idx, ctx->idx);
}

static oj_tensor *param(oj_gpt *m, const char *name) {
    oj_named_tensors sd = oj_gpt_state_dict(m);
    for (int64_t i = 0; i < sd.n; i++)
        if (strcmp(sd.names[i], name) == 0) return sd.tensors[i];
    fail_msg("no parameter %s", name);
    return NULL;
}

/* nanolab's fused training projections: the analytic gradients (the fused
 * GEMM's backward, grad mode on) of every fused weight equal f64 central
 * differences of the loss, which gradcheck evaluates with grad mode off:
 * the separate linears. GQA (2 KV heads of 4), one KV head, and 4 of 4
 * (q, k, v heads alike: their gradients written where they lie in the
 * projection's, the split filling in the gate's). */
static void test_fused_projections_gradcheck(void **state) {
    (void)state;
    const int64_t kvs[3] = {2, 1, 4};
    for (int k = 0; k < 3; k++) {
        oj_gpt_config c;
        assert_true(oj_gpt_preset("nanolab-tiny", &c));
        c.vocab_size = 11;
        c.block_size = 4;
        c.n_layer = 1;
        c.n_embd = 8;
        c.n_head = 4; /* D 2 */
        c.n_kv_head = kvs[k];
        c.mlp_hidden = 6;
        c.init_std = 0.5; /* far from zero, so every path matters */
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(case_eng, &c, 11, &m), OJ_OK);
        assert_int_equal(oj_gpt_to_dtype(m, OJ_F64), OJ_OK);
        /* the gate bias starts at zero: make it matter */
        oj_tensor *gb = param(m, "transformer.h.0.attn.gate.bias");
        bool prev = oj_set_grad_enabled(case_eng, false);
        oj_scope_begin(case_eng);
        assert_int_equal(oj_copy_(gb, oj_rand_normal(case_eng, 1, (int64_t[]){c.n_head}, OJ_F64, 0.0, 0.5)),
                         OJ_OK);
        oj_scope_end(case_eng);
        oj_set_grad_enabled(case_eng, prev);
        const char *names[7] = {"transformer.h.0.attn.q_proj.weight",
                                "transformer.h.0.attn.k_proj.weight",
                                "transformer.h.0.attn.v_proj.weight",
                                "transformer.h.0.attn.gate.weight",
                                "transformer.h.0.attn.gate.bias",
                                "transformer.h.0.mlp.gate_proj.weight",
                                "transformer.h.0.mlp.up_proj.weight"};
        oj_tensor *ins[7];
        for (int i = 0; i < 7; i++) ins[i] = param(m, names[i]);
        oj_scope_begin(case_eng);
        int32_t ids[8] = {1, 7, 3, 9, 2, 2, 10, 5};
        loss_ctx ctx = {m, oj_from_host(case_eng, 2, (int64_t[]){2, 4}, OJ_I32, ids, sizeof ids)};
        oj_gradcheck_opts o = {1e-6, 1e-7, 1e-5};
        oj_status st = oj_gradcheck(case_eng, model_loss, &ctx, ins, 7, &o);
        if (st != OJ_OK) fail_msg("n_kv_head %lld: %s", (long long)kvs[k], oj_last_error(case_eng));
        oj_scope_end(case_eng);
        oj_gpt_free(m);
    }
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
}

/* With k_proj frozen in every layer the fused (cat) path leaves it without
 * a gradient while q/v/gate get theirs; the grad-on (fused) loss equals the
 * grad-off (separate) loss, to f32 rounding, and under bf16 autocast to
 * bf16 rounding. */
static void test_fused_projections_frozen_and_modes(void **state) {
    (void)state;
    oj_gpt *m = gt_tiny_model(case_eng, "nanolab-tiny", 0);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    for (int64_t i = 0; i < sd.n; i++)
        if (strstr(sd.names[i], "attn.k_proj.weight")) oj_set_requires_grad(sd.tensors[i], false);
    for (int ac = 0; ac < 2; ac++) {
        oj_set_autocast(case_eng, ac == 1, OJ_BF16);
        oj_scope_begin(case_eng);
        oj_tensor *idx = gt_ids(case_eng, 2, 12);
        oj_tensor *loss = oj_gpt_loss(m, idx, idx);
        assert_non_null(loss);
        const double on = oj_item(loss);
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        bool prev = oj_set_grad_enabled(case_eng, false);
        const double off = oj_item(oj_gpt_loss(m, idx, idx));
        oj_set_grad_enabled(case_eng, prev);
        const double tol = ac ? 4e-3 : 1e-6;
        if (!(fabs(on - off) <= tol * fabs(off)))
            fail_msg("autocast %d: grad-on loss %.9g vs grad-off %.9g", ac, on, off);
        for (int64_t i = 0; i < sd.n; i++) {
            bool frozen = strstr(sd.names[i], "attn.k_proj.weight") != NULL;
            if (frozen != (oj_grad(sd.tensors[i]) == NULL))
                fail_msg("autocast %d: %s %s a gradient", ac, sd.names[i],
                         frozen ? "has" : "lacks");
        }
        for (int64_t i = 0; i < sd.n; i++) oj_zero_grad(sd.tensors[i]);
        oj_scope_end(case_eng);
    }
    oj_set_autocast(case_eng, false, OJ_BF16);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
}

/* ---- bf16 autocast: every parameter's gradient near the f32 one (the
 * low-dtype norm outputs, norm_backward_add, the fused QK-norm + rotary,
 * attention's shared gradients), and with bf16 and f64 weights finite;
 * the same bits run to run */

/* ---------------------------------------------------------------- gpt under autocast */

/* bf16 autocast gradients of every parameter (the low-dtype norm outputs,
 * norm_backward_add, the fused QK-norm + rotary, attention's shared
 * gradients) near the f32 ones, normwise; and the same bits run to run */
static void test_gpt_autocast_grads(void **state) {
    (void)state;
    const char *presets[2] = {"nanolab-tiny", "gpt2-tiny"};
    for (int p = 0; p < 2; p++) {
        oj_engine *eng = nt_engine();
        oj_gpt_config cfg;
        assert_true(oj_gpt_preset(presets[p], &cfg));
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(eng, &cfg, 2, &m), OJ_OK);
        const int64_t B = 2, T = 12;
        int64_t v[2 * 13], xs[2] = {B, T};
        for (int i = 0; i < 2 * 13; i++)
            v[i] = (i * 37 + 11) % cfg.vocab_size;
        oj_tensor *idx = oj_from_host(eng, 2, (int64_t[]){B, 13}, OJ_I64, v, sizeof v);
        oj_tensor *nx = oj_narrow(idx, 1, 0, T), *ny = oj_narrow(idx, 1, 1, T);
        oj_tensor *x = oj_contiguous(nx), *y = oj_contiguous(ny);
        oj_release(nx);
        oj_release(ny);
        (void)xs;
        oj_named_tensors sd = oj_gpt_state_dict(m);
        double *g[3][64];
        double loss[3];
        assert_true(sd.n <= 64);
        for (int run = 0; run < 3; run++) { /* f32, bf16, bf16 again */
            oj_scope_begin(eng);
            oj_set_autocast(eng, run > 0, OJ_BF16);
            oj_tensor *l = oj_gpt_loss(m, x, y);
            oj_set_autocast(eng, false, OJ_BF16);
            if (l == NULL)
                fail_msg("%s: %s", presets[p], oj_last_error(eng));
            loss[run] = oj_item(l);
            assert_int_equal(oj_backward(l, false), OJ_OK);
            for (int64_t i = 0; i < sd.n; i++) {
                oj_tensor *gr = oj_grad(sd.tensors[i]);
                if (gr == NULL)
                    fail_msg("%s: no gradient for %s", presets[p], sd.names[i]);
                g[run][i] = nt_host(gr);
                oj_zero_grad(sd.tensors[i]);
            }
            oj_scope_end(eng);
        }
        if (!(fabs(loss[1] - loss[0]) < 2e-2 * fabs(loss[0])))
            fail_msg("%s: loss f32 %g bf16 %g", presets[p], loss[0], loss[1]);
        assert_memory_equal(&loss[1], &loss[2], sizeof(double));
        for (int64_t i = 0; i < sd.n; i++) {
            int64_t n = oj_numel(sd.tensors[i]);
            double num = 0, den = 0;
            for (int64_t k = 0; k < n; k++) {
                double d = g[1][i][k] - g[0][i][k];
                num += d * d;
                den += g[0][i][k] * g[0][i][k];
                if (g[1][i][k] != g[2][i][k])
                    fail_msg("%s: %s not deterministic", presets[p], sd.names[i]);
            }
            if (!(sqrt(num) <= 0.1 * sqrt(den) + 1e-6))
                fail_msg("%s: %s gradient bf16 vs f32: rel %g", presets[p], sd.names[i],
                         sqrt(num / (den > 0 ? den : 1)));
            for (int run = 0; run < 3; run++)
                free(g[run][i]);
        }
        oj_release(idx);
        oj_release(x);
        oj_release(y);
        oj_gpt_free(m);
        nt_engine_done(eng);
    }
}

/* autocast with bf16 and f64 weights (the low-dtype norms with bf16 norm
 * weights; f64 keeps the f32 norms): finite losses and gradients for
 * every parameter, the same bits run to run */
static void test_gpt_autocast_weight_dtypes(void **state) {
    (void)state;
    const char *presets[2] = {"nanolab-tiny", "gpt2-tiny"};
    const oj_dtype wdts[2] = {OJ_BF16, OJ_F64};
    for (int p = 0; p < 2; p++)
        for (int d = 0; d < 2; d++) {
            oj_engine *eng = nt_engine();
            oj_gpt_config cfg;
            assert_true(oj_gpt_preset(presets[p], &cfg));
            oj_gpt *m = NULL;
            assert_int_equal(oj_gpt_create(eng, &cfg, 2, &m), OJ_OK);
            assert_int_equal(oj_gpt_to_dtype(m, wdts[d]), OJ_OK);
            int64_t v[2 * 9], xs[2] = {2, 9};
            for (int i = 0; i < 18; i++)
                v[i] = (i * 53 + 7) % cfg.vocab_size;
            oj_tensor *x = oj_from_host(eng, 2, xs, OJ_I64, v, sizeof v);
            oj_named_tensors sd = oj_gpt_state_dict(m);
            double loss[2];
            for (int run = 0; run < 2; run++) {
                oj_scope_begin(eng);
                oj_set_autocast(eng, true, OJ_BF16);
                oj_tensor *l = oj_gpt_loss(m, x, x);
                oj_set_autocast(eng, false, OJ_BF16);
                if (l == NULL)
                    fail_msg("%s %d: %s", presets[p], d, oj_last_error(eng));
                loss[run] = oj_item(l);
                assert_true(isfinite(loss[run]));
                assert_int_equal(oj_backward(l, false), OJ_OK);
                for (int64_t i = 0; i < sd.n; i++) {
                    oj_tensor *g = oj_grad(sd.tensors[i]);
                    if (g == NULL)
                        fail_msg("%s %d: no gradient for %s", presets[p], d, sd.names[i]);
                    assert_int_equal(oj_tensor_dtype(g), wdts[d]);
                    double *h = nt_host(g);
                    for (int64_t k = 0; k < oj_numel(g); k++)
                        if (!isfinite(h[k]))
                            fail_msg("%s: %s not finite", presets[p], sd.names[i]);
                    free(h);
                    oj_zero_grad(sd.tensors[i]);
                }
                oj_scope_end(eng);
            }
            assert_memory_equal(&loss[0], &loss[1], sizeof(double));
            oj_release(x);
            oj_gpt_free(m);
            nt_engine_done(eng);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_shapes_and_initial_loss),
        cmocka_unit_test(test_init_depends_only_on_seed_and_name),
        cmocka_unit_test(test_cached_decode_equals_recompute),
        cmocka_unit_test(test_sliding_window_decode),
        cmocka_unit_test(test_sgd_steps_lower_the_loss),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_preflight_budget),
        cmocka_unit_test_setup_teardown(test_cache_of_another_model, pair_in, pair_out),
        cmocka_unit_test_setup_teardown(test_cache_freed_after_model, pair_in, pair_out),
        cmocka_unit_test_setup_teardown(test_context_message, pair_in, pair_out),
        cmocka_unit_test_setup_teardown(test_generate_bad_arguments, pair_in, pair_out),
        cmocka_unit_test_setup_teardown(test_params_to_dtype_budget, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_cache_made_before_conversion, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_fused_projections_gradcheck, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_fused_projections_frozen_and_modes, et_engine_in, et_engine_out),
        cmocka_unit_test(test_gpt_autocast_grads),
        cmocka_unit_test(test_gpt_autocast_weight_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
