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
#include "engine_testutil.h"

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

/* ---- autocast given bad or unusual input: dtypes other than bf16/f16,
 * nesting, f64 and integer inputs, an error inside an op, released inputs,
 * two engines, grad mode off, mixed-dtype graphs in backward, no second
 * order, the optimizer under autocast, seed dtypes, generation under f16.
 * Every bad input gives a named OJ_ERR_* status and message, leaves the
 * engine sane (grad mode, autocast state) and leaks no tensor; each case runs
 * on a fresh engine `eng` (engine_testutil.h). */

static oj_tensor *randn_dt(int rank, const int64_t *shape, oj_dtype dt) {
    oj_tensor *t = oj_rand_normal(eng, rank, shape, OJ_F32, 0.0, 1.0);
    if (dt == OJ_F32) return t;
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    return c;
}

static oj_tensor *targets_i64(int n, const int64_t *v) {
    return oj_from_host(eng, 1, (int64_t[]){n}, OJ_I64, v, (size_t)n * sizeof *v);
}

/* ------------------------------------------------------------ set_autocast */

/* A dtype other than bf16/f16 is OJ_ERR_DTYPE naming it, and changes
 * neither the on/off state nor the dtype; NULL engines do not crash. */
static void test_set_autocast_bad_dtype(void **state) {
    (void)state;
    assert_false(oj_set_autocast(eng, true, OJ_F16));
    oj_dtype bad[] = {OJ_F32, OJ_F64, OJ_I64, OJ_BOOL, (oj_dtype)99, (oj_dtype)-1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_true(oj_set_autocast(eng, true, bad[i])); /* returns the previous state */
        assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
        assert_non_null(strstr(oj_last_error(eng), "set_autocast"));
        oj_clear_error(eng);
        assert_true(oj_autocast_enabled(eng));
        assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    }
    /* turning it off needs no valid dtype and keeps the dtype */
    assert_true(oj_set_autocast(eng, false, (oj_dtype)99));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_false(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    /* NULL engine */
    assert_false(oj_set_autocast(NULL, true, OJ_BF16));
    assert_false(oj_autocast_enabled(NULL));
    assert_int_equal(oj_autocast_dtype(NULL), OJ_BF16);
    oj_set_autocast(eng, true, OJ_BF16);
}

/* Nested set/unset: each call returns the previous state, so a caller can
 * restore it; the dtype of the outer region survives an inner region. */
static void test_set_autocast_nesting(void **state) {
    (void)state;
    assert_false(oj_set_autocast(eng, true, OJ_F16));
    bool p1 = oj_set_autocast(eng, false, OJ_BF16);
    assert_true(p1);
    bool p2 = oj_set_autocast(eng, true, OJ_F16);
    assert_false(p2);
    oj_set_autocast(eng, p2, OJ_F16);
    assert_false(oj_autocast_enabled(eng));
    oj_set_autocast(eng, p1, oj_autocast_dtype(eng));
    assert_true(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    oj_tensor *a = randn_dt(2, (int64_t[]){3, 4}, OJ_F32), *b = randn_dt(2, (int64_t[]){4, 2}, OJ_F32);
    oj_tensor *c = oj_matmul(a, b);
    assert_int_equal(oj_tensor_dtype(c), OJ_F16);
    oj_release(c);
    oj_release(a);
    oj_release(b);
}

/* ------------------------------------------------------- autocast x dtypes */

/* f64 is never cast: an f64 matmul under autocast is bit-identical to the
 * same matmul with autocast off. */
static void test_autocast_leaves_f64_alone(void **state) {
    (void)state;
    oj_tensor *a = randn_dt(2, (int64_t[]){5, 7}, OJ_F64), *b = randn_dt(2, (int64_t[]){7, 3}, OJ_F64);
    oj_tensor *ref = oj_matmul(a, b);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *got = oj_matmul(a, b);
    oj_tensor *sm = oj_softmax(a, 1);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(got), OJ_F64);
    assert_int_equal(oj_tensor_dtype(sm), OJ_F64);
    for (int64_t i = 0; i < oj_numel(ref); i++)
        assert_true(oj_item_at(ref, i) == oj_item_at(got, i));
    oj_tensor *ts[] = {a, b, ref, got, sm};
    for (size_t i = 0; i < 5; i++) oj_release(ts[i]);
}

/* Integer inputs are never cast: cross_entropy on integer logits is still
 * OJ_ERR_DTYPE naming the logits, under autocast as without it. */
static void test_autocast_integer_inputs(void **state) {
    (void)state;
    int64_t v[6] = {1, 2, 3, 4, 5, 6}, tv[2] = {0, 1};
    oj_tensor *xi = oj_from_host(eng, 2, (int64_t[]){2, 3}, OJ_I64, v, sizeof v);
    oj_tensor *t = targets_i64(2, tv);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_cross_entropy(xi, t, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "logits");
    oj_tensor *w = randn_dt(2, (int64_t[]){4, 3}, OJ_F32);
    assert_null(oj_linear_cross_entropy(xi, w, t, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "linear_cross_entropy");
    assert_true(oj_autocast_enabled(eng));
    oj_set_autocast(eng, false, OJ_BF16);
    oj_release(w);
    oj_release(t);
    oj_release(xi);
}

/* An error inside an autocast op (shapes that do not fit) names the op and
 * the shapes, releases the casts, and leaves autocast on and usable. */
static void test_autocast_error_inside_op(void **state) {
    (void)state;
    oj_tensor *a = randn_dt(2, (int64_t[]){3, 4}, OJ_F32), *b = randn_dt(2, (int64_t[]){5, 2}, OJ_F32);
    oj_set_requires_grad(a, true);
    int64_t live = oj_engine_live_tensors(eng);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_matmul(a, b));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "[3, 4]");
    assert_int_equal(oj_engine_live_tensors(eng), live); /* the casts are gone */
    assert_true(oj_autocast_enabled(eng));
    assert_true(oj_grad_enabled(eng));
    oj_tensor *b2 = randn_dt(2, (int64_t[]){4, 2}, OJ_F32);
    oj_tensor *c = oj_matmul(a, b2);
    assert_non_null(c);
    assert_int_equal(oj_tensor_dtype(c), OJ_BF16);
    oj_set_autocast(eng, false, OJ_BF16);
    oj_release(c);
    oj_release(b2);
    oj_release(a);
    oj_release(b);
}

/* A released input under autocast: OJ_ERR_INVALID_ARGUMENT "released",
 * not a crash or a cast of freed memory; the live input's cast is freed. */
static void test_autocast_released_input(void **state) {
    (void)state;
    oj_tensor *a = randn_dt(2, (int64_t[]){3, 4}, OJ_F32), *b = randn_dt(2, (int64_t[]){4, 2}, OJ_F32);
    oj_release(b);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_matmul(a, b));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_linear_cross_entropy(a, b, a, -1, 0.0, OJ_REDUCTION_MEAN));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    oj_set_autocast(eng, false, OJ_BF16);
    oj_release(a);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

/* Inputs of two engines under autocast: OJ_ERR_DEVICE "different
 * engines" whichever engine has autocast on, and nothing leaks on either. */
static void test_autocast_two_engines(void **state) {
    (void)state;
    oj_engine *e2 = NULL;
    assert_int_equal(oj_engine_create(NULL, &e2, NULL), OJ_OK);
    oj_tensor *a = randn_dt(2, (int64_t[]){3, 4}, OJ_F32);
    oj_tensor *b = oj_ones(e2, 2, (int64_t[]){4, 2}, OJ_F32);
    oj_set_autocast(eng, true, OJ_BF16);
    assert_null(oj_matmul(a, b));
    ET_EXPECT_ERR_HAS(OJ_ERR_DEVICE, "different engines");
    assert_null(oj_matmul(b, a)); /* e2 reports; autocast is off there */
    assert_int_equal(oj_last_status(e2), OJ_ERR_DEVICE);
    oj_clear_error(e2);
    oj_set_autocast(eng, false, OJ_BF16);
    oj_set_autocast(e2, true, OJ_BF16);
    assert_null(oj_matmul(b, a));
    assert_int_equal(oj_last_status(e2), OJ_ERR_DEVICE);
    assert_non_null(strstr(oj_last_error(e2), "different engines"));
    oj_release(b);
    assert_int_equal(oj_engine_live_tensors(e2), 0);
    oj_engine_free(e2);
    oj_release(a);
}

/* Under no_grad the autocast casts record nothing. */
static void test_autocast_no_grad(void **state) {
    (void)state;
    oj_tensor *a = randn_dt(2, (int64_t[]){3, 4}, OJ_F32), *w = randn_dt(2, (int64_t[]){2, 4}, OJ_F32);
    oj_set_requires_grad(w, true);
    oj_set_autocast(eng, true, OJ_BF16);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *y = oj_linear(a, w, NULL);
    oj_set_grad_enabled(eng, prev);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
    assert_false(oj_requires_grad(y));
    assert_null(oj_grad_fn_name(y));
    oj_release(y);
    oj_release(a);
    oj_release(w);
}

/* ---------------------------------------------------- backward x autocast */

/* A graph built partly under autocast (linear in bf16) and partly without
 * (an f32 product): f32 leaves get f32 gradients, backward restores the
 * autocast state it found, and the gradients do not depend on whether
 * autocast is on when backward runs (bit for bit). retain_graph lets a
 * second pass accumulate exactly twice the first. */
static void test_backward_mixed_graph(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(2, (int64_t[]){6, 8}, OJ_F32), *w = randn_dt(2, (int64_t[]){4, 8}, OJ_F32);
    oj_tensor *s = randn_dt(2, (int64_t[]){6, 4}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(s, true);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_linear(x, w, NULL); /* bf16 */
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
    oj_tensor *z = oj_mul(y, s); /* f32 by promotion */
    oj_tensor *l = oj_sum_all(z);
    assert_int_equal(oj_tensor_dtype(l), OJ_F32);
    assert_int_equal(oj_backward(l, true), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(s)), OJ_F32);
    oj_tensor *gw1 = oj_clone(oj_grad(w));
    /* second pass with autocast on (f16) while backward runs */
    oj_set_autocast(eng, true, OJ_F16);
    assert_int_equal(oj_backward(l, false), OJ_OK);
    assert_true(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    oj_set_autocast(eng, false, OJ_BF16);
    for (int64_t i = 0; i < oj_numel(gw1); i++)
        assert_true(oj_item_at(oj_grad(w), i) == 2.0 * oj_item_at(gw1, i));
    /* a third pass: the graph was freed */
    assert_int_equal(oj_backward(l, false), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "retain_graph");
    oj_tensor *ts[] = {x, w, s, y, z, l, gw1};
    for (size_t i = 0; i < 7; i++) oj_release(ts[i]);
}

/* Second order is not supported: a gradient does not require grad, and
 * backward from it is OJ_ERR_STATE with a message. */
static void test_no_second_order(void **state) {
    (void)state;
    oj_tensor *x = randn_dt(1, (int64_t[]){4}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_sum_all(oj_mul(x, x));
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    oj_tensor *g = oj_grad(x);
    assert_false(oj_requires_grad(g));
    oj_tensor *gs = oj_sum_all(g);
    assert_int_equal(oj_backward(gs, false), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "does not require grad");
    oj_release(gs);
    oj_release(y);
    oj_release(x);
}

/* ------------------------------------------------ optimizer x autocast */

/* oj_optim_step under autocast runs in the parameters' dtype: the same
 * gradients give bit-identical parameters with autocast on (bf16 or f16)
 * or off, the parameters stay f32, and the autocast state (including an
 * f16 dtype) is what it was before the step. */
static void test_optim_step_under_autocast(void **state) {
    (void)state;
    oj_tensor *p[3], *g = randn_dt(2, (int64_t[]){8, 8}, OJ_F32);
    oj_optim *o[3];
    for (int k = 0; k < 3; k++) {
        p[k] = oj_ones(eng, 2, (int64_t[]){8, 8}, OJ_F32);
        oj_set_requires_grad(p[k], true);
        o[k] = oj_optim_create(eng);
        oj_optim_hparams hp = oj_adamw_hparams(1e-2, 0.1);
        const char *names[1] = {"p"};
        oj_named_tensors nt = {.n = 1, .names = names, .tensors = &p[k]};
        assert_true(oj_optim_add_group(o[k], &hp, &nt) >= 0);
    }
    for (int step = 0; step < 2; step++)
        for (int k = 0; k < 3; k++) {
            oj_tensor *l = oj_sum_all(oj_mul(p[k], g));
            assert_int_equal(oj_backward(l, false), OJ_OK);
            oj_release(l);
            if (k > 0) oj_set_autocast(eng, true, k == 1 ? OJ_BF16 : OJ_F16);
            assert_int_equal(oj_optim_step(o[k], NULL), OJ_OK);
            if (k > 0) {
                assert_true(oj_autocast_enabled(eng));
                assert_int_equal(oj_autocast_dtype(eng), k == 1 ? OJ_BF16 : OJ_F16);
            }
            oj_set_autocast(eng, false, OJ_BF16);
            oj_optim_zero_grad(o[k]);
        }
    for (int k = 1; k < 3; k++) {
        assert_int_equal(oj_tensor_dtype(p[k]), OJ_F32);
        assert_memory_equal(oj_data_ptr(p[0]), oj_data_ptr(p[k]), 64 * sizeof(float));
    }
    for (int k = 0; k < 3; k++) {
        oj_optim_free(o[k]);
        oj_release(p[k]);
    }
    oj_release(g);
}

/* ------------------------------------------------- backward seed dtypes */

/* A gradient takes its tensor's dtype, the seed of oj_backward_seeded
 * too: an f64 seed on an f32 output gives f32 gradients to the f32 leaf
 * and to a retained f32 non-leaf. */
static void test_seed_dtype(void **state) {
    (void)state;
    oj_tensor *a = randn_dt(1, (int64_t[]){4}, OJ_F32);
    oj_set_requires_grad(a, true);
    oj_tensor *y = oj_mul_scalar(a, 3.0);
    oj_retain_grad(y);
    oj_tensor *seed = oj_ones(eng, 1, (int64_t[]){4}, OJ_F64);
    assert_int_equal(oj_backward_seeded(y, seed, false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(a)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(y)), OJ_F32);
    assert_true(oj_item_at(oj_grad(a), 2) == 3.0);
    oj_release(seed);
    oj_release(y);
    oj_release(a);
}

/* oj_backward_seeded leaves the caller's seed handle in its scope: a seed
 * left to its scope, as scoped code does, leaks no tensor per backward, and
 * the seed is not written to. */
static void test_seeded_backward_scoped_seed_not_leaked(void **state) {
    (void)state;
    int64_t live = oj_engine_live_tensors(eng);
    for (int k = 0; k < 2; k++) {
        oj_scope_begin(eng);
        oj_tensor *a = randn_dt(1, (int64_t[]){4}, OJ_F32);
        oj_set_requires_grad(a, true);
        oj_tensor *y = oj_mul_scalar(a, 3.0);
        oj_tensor *seed = oj_full(eng, 1, (int64_t[]){4}, k ? OJ_F64 : OJ_F32, 2.0);
        assert_int_equal(oj_backward_seeded(y, seed, false), OJ_OK);
        assert_true(oj_item_at(oj_grad(a), 1) == 6.0);
        assert_true(oj_item_at(seed, 1) == 2.0); /* the seed is not written to */
        oj_scope_end(eng);
        assert_int_equal(oj_engine_live_tensors(eng), live);
    }
}

/* -------------------------------------------------------- generation */

/* Generation under f16 autocast (not only bf16) gives tokens of the
 * vocabulary and leaves autocast as it was. */
static void test_generate_under_f16_autocast(void **state) {
    (void)state;
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &cfg, 3, &m), OJ_OK);
    int32_t prompt[3] = {1, 2, 3};
    const int32_t *ps[1] = {prompt};
    int64_t pl[1] = {3}, ol = 0;
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 5;
    int32_t *out[1] = {NULL};
    oj_set_autocast(eng, true, OJ_F16);
    if (oj_generate(m, 1, ps, pl, &sc, out, &ol, NULL, NULL) != OJ_OK)
        fail_msg("%s", oj_last_error(eng));
    assert_true(oj_autocast_enabled(eng));
    assert_int_equal(oj_autocast_dtype(eng), OJ_F16);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(ol, 5);
    for (int i = 0; i < 5; i++) assert_true(out[0][i] >= 0 && out[0][i] < cfg.vocab_size);
    free(out[0]);
    oj_gpt_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_runs_in_bf16_with_f32_grads),
        cmocka_unit_test(test_op_classes),
        cmocka_unit_test(test_grad_of_bf16_tensor_is_bf16),
        cmocka_unit_test(test_gpt_trains_under_autocast),
        cmocka_unit_test(test_generate_under_autocast),
        cmocka_unit_test_setup_teardown(test_set_autocast_bad_dtype, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_set_autocast_nesting, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_autocast_leaves_f64_alone, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_autocast_integer_inputs, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_autocast_error_inside_op, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_autocast_released_input, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_autocast_two_engines, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_autocast_no_grad, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_backward_mixed_graph, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_no_second_order, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_optim_step_under_autocast, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_seed_dtype, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_seeded_backward_scoped_seed_not_leaked, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_generate_under_f16_autocast, et_engine_in, et_engine_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
