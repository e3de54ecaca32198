// test: autocast (oj_set_autocast) — which ops compute in bf16 and which in
// f32, f32 gradients for f32 parameters, grads of bf16 tensors stay bf16,
// backward runs with autocast off, a bad dtype is refused, and a tiny GPT
// trained under bf16 autocast follows the f32 loss curve and is
// bit-identical across two EXACT runs; generation under autocast works.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

static oj_engine *new_engine(void) {
    oj_engine *e = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 11;
    cfg.threads = 2;
    cfg.numerics = OJ_NUMERICS_EXACT;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

static oj_tensor *randn(oj_engine *e, int rank, const int64_t *shape) {
    return oj_rand_normal(e, rank, shape, OJ_F32, 0.0, 1.0);
}

/* max |a - b| / max(1, max |b|) over two f32-convertible tensors */
static double rel_err(oj_tensor *a, oj_tensor *b) {
    oj_tensor *fa = oj_cast(a, OJ_F64), *fb = oj_cast(b, OJ_F64);
    int64_t n = oj_numel(fb);
    double m = 0.0, ref = 1.0;
    for (int64_t i = 0; i < n; i++) {
        double x = oj_item_at(fa, i), y = oj_item_at(fb, i);
        if (!isfinite(x)) return INFINITY;
        m = fmax(m, fabs(x - y));
        ref = fmax(ref, fabs(y));
    }
    oj_release(fa);
    oj_release(fb);
    return m / ref;
}

static void test_linear_runs_in_bf16_with_f32_grads(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_tensor *x = randn(e, 2, (int64_t[]){16, 32}), *w = randn(e, 2, (int64_t[]){8, 32}),
              *b = randn(e, 1, (int64_t[]){8});
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(b, true);
    // f32 reference
    oj_tensor *y32 = oj_linear(x, w, b);
    assert_int_equal(oj_backward(oj_sum(y32, 0, NULL, false), false), OJ_OK);
    oj_tensor *gx32 = oj_clone(oj_grad(x)), *gw32 = oj_clone(oj_grad(w));
    oj_zero_grad(x);
    oj_zero_grad(w);
    oj_zero_grad(b);
    // autocast
    assert_false(oj_set_autocast(e, true, OJ_BF16));
    assert_true(oj_autocast_enabled(e));
    oj_tensor *y = oj_linear(x, w, b);
    assert_non_null(y);
    assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
    assert_true(rel_err(y, y32) < 2e-2);
    oj_tensor *s = oj_sum(y, 0, NULL, false);
    assert_int_equal(oj_backward(s, false), OJ_OK);
    assert_true(oj_autocast_enabled(e)); // restored after backward
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(b)), OJ_F32);
    assert_true(rel_err(oj_grad(x), gx32) < 2e-2);
    assert_true(rel_err(oj_grad(w), gw32) < 2e-2);
    assert_true(oj_set_autocast(e, false, OJ_BF16));
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void test_op_classes(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_set_autocast(e, true, OJ_BF16);
    oj_tensor *a = randn(e, 3, (int64_t[]){2, 4, 8}), *b = randn(e, 3, (int64_t[]){2, 8, 4});
    oj_tensor *h = oj_cast(a, OJ_BF16);
    // lower precision: matmul, bmm, sdpa
    assert_int_equal(oj_tensor_dtype(oj_matmul(a, b)), OJ_BF16);
    assert_int_equal(oj_tensor_dtype(oj_bmm(a, b)), OJ_BF16);
    oj_tensor *q = randn(e, 4, (int64_t[]){1, 2, 4, 8});
    assert_int_equal(oj_tensor_dtype(oj_scaled_dot_product_attention(q, q, q, NULL, true, NAN)), OJ_BF16);
    // f32: norms, softmax, losses (bf16 input in, f32 out)
    oj_tensor *w = oj_ones(e, 1, (int64_t[]){8}, OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_layer_norm(h, w, NULL, 1e-5)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_rms_norm(h, w, 1e-5)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_softmax(h, -1)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_log_softmax(h, -1)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_mse_loss(h, h, OJ_REDUCTION_MEAN)), OJ_F32);
    // everything else: type promotion (f32 + bf16 -> f32; bf16 unary stays bf16)
    assert_int_equal(oj_tensor_dtype(oj_add(a, h)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_gelu_tanh(h)), OJ_BF16);
    // f64 is never cast (as in PyTorch)
    oj_tensor *d = oj_cast(a, OJ_F64), *d2 = oj_cast(b, OJ_F64);
    assert_int_equal(oj_tensor_dtype(oj_matmul(d, d2)), OJ_F64);
    // a bad autocast dtype is refused and changes nothing
    oj_set_autocast(e, false, OJ_BF16);
    oj_set_autocast(e, true, OJ_F32);
    assert_int_equal(oj_last_status(e), OJ_ERR_DTYPE);
    assert_false(oj_autocast_enabled(e));
    oj_clear_error(e);
    oj_set_autocast(e, true, OJ_F16);
    assert_int_equal(oj_autocast_dtype(e), OJ_F16);
    assert_int_equal(oj_tensor_dtype(oj_matmul(a, b)), OJ_F16);
    oj_set_autocast(e, false, OJ_F16);
    assert_int_equal(oj_tensor_dtype(oj_matmul(a, b)), OJ_F32);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    oj_engine_free(e);
}

static void test_grad_of_bf16_tensor_is_bf16(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    oj_tensor *a = randn(e, 1, (int64_t[]){5}), *h = oj_cast(randn(e, 1, (int64_t[]){5}), OJ_BF16);
    oj_set_requires_grad(a, true);
    oj_set_requires_grad(h, true);
    oj_tensor *s = oj_add(a, h); // f32
    assert_int_equal(oj_backward(oj_sum(s, 0, NULL, false), false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(a)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(h)), OJ_BF16);
    assert_true(fabs(oj_item_at(oj_grad(h), 3) - 1.0) == 0.0);
    oj_scope_end(e);
    oj_engine_free(e);
}

/* Train nanolab-tiny / gpt2-tiny for `steps` AdamW steps on fixed tokens;
 * losses into out[]. */
static void train(const char *preset, bool autocast, int steps, double *out, uint64_t *hash) {
    oj_engine *e = new_engine();
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset(preset, &cfg));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(e, &cfg, 5, &m), OJ_OK);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_optim *opt = oj_optim_create(e);
    oj_optim_hparams hp = oj_adamw_hparams(3e-3, 0.0);
    assert_true(oj_optim_add_group(opt, &hp, &sd) >= 0);
    int64_t B = 2, T = 16, n = B * T + 1;
    int64_t *tok = malloc((size_t)n * sizeof *tok);
    for (int64_t i = 0; i < n; i++) tok[i] = (i * 7 + i / 3) % cfg.vocab_size;
    int64_t shape[2] = {B, T};
    oj_tensor *x = oj_from_host(e, 2, shape, OJ_I64, tok, (size_t)(B * T) * sizeof *tok);
    oj_tensor *y = oj_from_host(e, 2, shape, OJ_I64, tok + 1, (size_t)(B * T) * sizeof *tok);
    free(tok);
    for (int s = 0; s < steps; s++) {
        oj_scope_begin(e);
        oj_set_autocast(e, autocast, OJ_BF16);
        oj_tensor *l = oj_gpt_loss(m, x, y);
        oj_set_autocast(e, false, OJ_BF16);
        if (l == NULL) fail_msg("%s: %s", preset, oj_last_error(e));
        assert_int_equal(oj_tensor_dtype(l), OJ_F32);
        out[s] = oj_item(l);
        if (oj_backward(l, false) != OJ_OK) fail_msg("%s backward: %s", preset, oj_last_error(e));
        if (oj_optim_step(opt, NULL) != OJ_OK) fail_msg("%s step: %s", preset, oj_last_error(e));
        oj_optim_zero_grad(opt);
        oj_scope_end(e);
    }
    uint64_t h = 1469598103934665603ull; // FNV-1a over every parameter's bytes
    for (int64_t i = 0; i < sd.n; i++) {
        assert_int_equal(oj_tensor_dtype(sd.tensors[i]), OJ_F32); // master weights stay f32
        const unsigned char *p = oj_data_ptr(sd.tensors[i]);
        for (size_t k = 0; k < (size_t)oj_numel(sd.tensors[i]) * 4; k++)
            h = (h ^ p[k]) * 1099511628211ull;
    }
    *hash = h;
    oj_release(x);
    oj_release(y);
    oj_optim_free(opt);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void test_gpt_trains_under_autocast(void **state) {
    (void)state;
    const char *presets[] = {"nanolab-tiny", "gpt2-tiny"};
    enum { STEPS = 12 };
    for (int p = 0; p < 2; p++) {
        double l32[STEPS], lbf[STEPS], lbf2[STEPS];
        uint64_t h32, hbf, hbf2;
        train(presets[p], false, STEPS, l32, &h32);
        train(presets[p], true, STEPS, lbf, &hbf);
        train(presets[p], true, STEPS, lbf2, &hbf2);
        for (int s = 0; s < STEPS; s++) {
            if (fabs(lbf[s] - l32[s]) > 0.05 * fabs(l32[s]))
                fail_msg("%s step %d: bf16 loss %g vs f32 %g", presets[p], s, lbf[s], l32[s]);
            assert_true(lbf[s] == lbf2[s]); // EXACT: bit-identical reruns
        }
        assert_true(lbf[STEPS - 1] < lbf[0] - 0.3); // it learns
        assert_true(hbf == hbf2);
        assert_true(hbf != h32); // bf16 really changed the arithmetic
    }
}

/* Generation under autocast: the bf16 logits are converted for the
 * sampler, and every step yields a token of the vocabulary. */
static void test_generate_under_autocast(void **state) {
    (void)state;
    const char *presets[] = {"nanolab-tiny", "gpt2-tiny"};
    for (int p = 0; p < 2; p++) {
        oj_engine *e = new_engine();
        oj_gpt_config cfg;
        assert_true(oj_gpt_preset(presets[p], &cfg));
        oj_gpt *m = NULL;
        assert_int_equal(oj_gpt_create(e, &cfg, 7, &m), OJ_OK);
        int32_t prompt[5] = {1, 2, 3, 4, 5};
        const int32_t *ps[1] = {prompt};
        int64_t pl[1] = {5}, ol[2] = {0, 0};
        oj_sampler_config sc = oj_sampler_config_default();
        sc.temperature = 0.0;
        sc.max_new_tokens = 8;
        int32_t *o32[1] = {NULL}, *obf[1] = {NULL};
        assert_int_equal(oj_generate(m, 1, ps, pl, &sc, o32, &ol[0], NULL, NULL), OJ_OK);
        oj_set_autocast(e, true, OJ_BF16);
        if (oj_generate(m, 1, ps, pl, &sc, obf, &ol[1], NULL, NULL) != OJ_OK)
            fail_msg("%s: %s", presets[p], oj_last_error(e));
        oj_set_autocast(e, false, OJ_BF16);
        assert_int_equal(ol[0], 8);
        assert_int_equal(ol[1], 8);
        for (int i = 0; i < 8; i++) assert_true(obf[0][i] >= 0 && obf[0][i] < cfg.vocab_size);
        free(o32[0]);
        free(obf[0]);
        oj_gpt_free(m);
        assert_int_equal(oj_engine_live_tensors(e), 0);
        oj_engine_free(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_runs_in_bf16_with_f32_grads),
        cmocka_unit_test(test_op_classes),
        cmocka_unit_test(test_grad_of_bf16_tensor_is_bf16),
        cmocka_unit_test(test_gpt_trains_under_autocast),
        cmocka_unit_test(test_generate_under_autocast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
