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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_shapes_and_initial_loss),
        cmocka_unit_test(test_init_depends_only_on_seed_and_name),
        cmocka_unit_test(test_cached_decode_equals_recompute),
        cmocka_unit_test(test_sliding_window_decode),
        cmocka_unit_test(test_sgd_steps_lower_the_loss),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_preflight_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
