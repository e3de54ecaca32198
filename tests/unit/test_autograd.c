// test: autograd engine — backward through elementwise ops and reductions,
// fan-out, retain_grad, saved-tensor version checks, second backward,
// gradcheck of every elementwise op on broadcast and non-contiguous inputs.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 7;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

/* The leaf hook's record: calls per leaf, and the leaf's gradient when
 * it was called. */
typedef struct {
    oj_tensor *w, *v;
    int calls_w, calls_v, calls_other;
    double w_at_call[3];
} hook_rec;

static void on_ready(void *ctx, oj_tensor *t) {
    hook_rec *r = ctx;
    if (t == r->w) {
        r->calls_w++;
        assert_int_equal(oj_to_host(oj_grad(t), r->w_at_call, sizeof r->w_at_call), OJ_OK);
    } else if (t == r->v) {
        r->calls_v++;
    } else {
        r->calls_other++;
    }
}

// test: a leaf whose grad is a given buffer not yet written (grad_fresh,
// the data-parallel gradient arena) takes its first gradient by copy, bit
// for bit (a -0 stays -0, which 0 + g would make +0), then adds the next,
// in the given tensor; the leaf hook is called once per leaf, after its
// last gradient (w gets two)
static void test_given_grad_buffer_and_leaf_hook(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t n = 3;
    double wv[3] = {1, 2, 3}, av[3] = {-0.0, 1, 2}, bv[3] = {-0.0, 3, 4}, junk[3] = {99, 99, 99};
    oj_tensor *w = oj_from_host(eng, 1, &n, OJ_F64, wv, sizeof wv);
    oj_tensor *v = oj_from_host(eng, 1, &n, OJ_F64, wv, sizeof wv);
    oj_tensor *a = oj_from_host(eng, 1, &n, OJ_F64, av, sizeof av);
    oj_tensor *b = oj_from_host(eng, 1, &n, OJ_F64, bv, sizeof bv);
    oj_tensor *buf = oj_from_host(eng, 1, &n, OJ_F64, junk, sizeof junk);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(v, true);
    w->grad = oj_retain(buf);
    w->grad_fresh = true;
    hook_rec r = {.w = w, .v = v};
    eng->leaf_grad_ready = on_ready;
    eng->leaf_grad_ready_ctx = &r;
    /* loss = sum(w a) + sum(w b) + sum(v): dloss/dw = a + b */
    oj_tensor *loss = oj_add(oj_add(oj_sum(oj_mul(w, a), 0, NULL, false),
                                    oj_sum(oj_mul(w, b), 0, NULL, false)),
                             oj_sum(v, 0, NULL, false));
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    eng->leaf_grad_ready = NULL;
    assert_ptr_equal(oj_grad(w), buf); /* written in place */
    assert_false(w->grad_fresh);
    double g[3];
    assert_int_equal(oj_to_host(buf, g, sizeof g), OJ_OK);
    assert_true(g[0] == 0 && signbit(g[0])); /* -0 + -0, never 0 + ... */
    assert_true(g[1] == 4 && g[2] == 6);
    assert_int_equal(r.calls_w, 1);
    assert_int_equal(r.calls_v, 1);
    assert_int_equal(r.calls_other, 0);
    assert_true(r.w_at_call[1] == 4 && r.w_at_call[2] == 6); /* final when reported */
    assert_int_equal(w->grad_pending, 0);
    oj_zero_grad(w);
    assert_false(w->grad_fresh);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static oj_tensor *leaf(oj_engine *eng, int rank, const int64_t *shape, double lo, double hi) {
    oj_tensor *t = oj_rand_uniform(eng, rank, shape, OJ_F64, lo, hi);
    assert_non_null(t);
    oj_set_requires_grad(t, true);
    return t;
}

static void test_mul_add_broadcast(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    double av[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {10, 20, 30};
    oj_tensor *a = oj_from_host(eng, 2, sa, OJ_F64, av, sizeof av);
    oj_tensor *b = oj_from_host(eng, 1, sb, OJ_F64, bv, sizeof bv);
    oj_set_requires_grad(a, true);
    oj_set_requires_grad(b, true);
    oj_tensor *y = oj_sum_all(oj_add(oj_mul(a, b), a)); // sum(a*b + a)
    assert_non_null(y);
    assert_float_equal(oj_item(y), 10 + 40 + 90 + 40 + 100 + 180 + 21, 1e-12);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    double ga[6], gb[3];
    assert_int_equal(oj_to_host(oj_grad(a), ga, sizeof ga), OJ_OK);
    assert_int_equal(oj_to_host(oj_grad(b), gb, sizeof gb), OJ_OK);
    for (int i = 0; i < 6; i++) assert_float_equal(ga[i], bv[i % 3] + 1, 1e-12);
    for (int j = 0; j < 3; j++) assert_float_equal(gb[j], av[j] + av[j + 3], 1e-12);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_fan_out_and_accumulate(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s[1] = {4};
    oj_tensor *x = leaf(eng, 1, s, -1, 1);
    for (int rep = 0; rep < 2; rep++) { // grads accumulate across backward calls
        oj_scope_begin(eng);
        oj_tensor *y = oj_mul(x, x); // x used twice
        oj_tensor *z = oj_sum_all(oj_add(y, x));
        assert_int_equal(oj_backward(z, false), OJ_OK);
        oj_scope_end(eng);
    }
    double xv[4], g[4];
    oj_to_host(x, xv, sizeof xv);
    oj_to_host(oj_grad(x), g, sizeof g);
    for (int i = 0; i < 4; i++) assert_float_equal(g[i], 2 * (2 * xv[i] + 1), 1e-12);
    oj_release(x);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_second_backward_and_inplace(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[1] = {3};
    oj_tensor *x = leaf(eng, 1, s, 0.5, 1);
    oj_tensor *y = oj_sum_all(oj_exp(x));
    assert_int_equal(oj_backward(y, false), OJ_OK);
    assert_int_equal(oj_backward(y, false), OJ_ERR_STATE);
    assert_non_null(strstr(oj_last_error(eng), "second time"));
    oj_clear_error(eng);

    // retain_graph allows a second pass; grads double
    oj_zero_grad(x);
    oj_tensor *y2 = oj_sum_all(oj_exp(x));
    assert_int_equal(oj_backward(y2, true), OJ_OK);
    assert_int_equal(oj_backward(y2, false), OJ_OK);
    double xv[3], g[3];
    oj_to_host(x, xv, sizeof xv);
    oj_to_host(oj_grad(x), g, sizeof g);
    for (int i = 0; i < 3; i++) assert_float_equal(g[i], 2 * exp(xv[i]), 1e-12);

    // an in-place write to a saved tensor makes backward fail, naming the op
    oj_tensor *a = oj_rand_uniform(eng, 1, s, OJ_F64, 1, 2);
    oj_tensor *p = oj_mul(x, a); // saves a
    oj_tensor *l = oj_sum_all(p);
    assert_int_equal(oj_mul_scalar_(a, 2.0), OJ_OK);
    assert_int_equal(oj_backward(l, false), OJ_ERR_STATE);
    assert_non_null(strstr(oj_last_error(eng), "mul"));
    assert_non_null(strstr(oj_last_error(eng), "modified in place"));
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static void test_retain_grad_and_detach(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[1] = {3};
    oj_tensor *x = leaf(eng, 1, s, -1, 1);
    oj_tensor *h = oj_mul_scalar(x, 3.0);
    oj_retain_grad(h);
    oj_tensor *d = oj_detach(h);
    assert_false(oj_requires_grad(d));
    oj_tensor *y = oj_sum_all(oj_square(h));
    assert_int_equal(oj_backward(y, false), OJ_OK);
    double hv[3], gh[3], gx[3];
    oj_to_host(h, hv, sizeof hv);
    assert_non_null(oj_grad(h));
    oj_to_host(oj_grad(h), gh, sizeof gh);
    oj_to_host(oj_grad(x), gx, sizeof gx);
    for (int i = 0; i < 3; i++) {
        assert_float_equal(gh[i], 2 * hv[i], 1e-12);
        assert_float_equal(gx[i], 6 * hv[i], 1e-12);
    }
    assert_string_equal(oj_grad_fn_name(h), "mul_scalar");
    assert_true(oj_is_leaf(x));
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* clone and contiguous pass the gradient through, as torch's: loss =
 * sum(contiguous(x^T)^2 * w) + sum(clone(x)) + sum(contiguous(x)) has
 * d/dx = 2 x w^T + 2 (a detached copy gave 1 or an error). */
static void test_clone_contiguous_record(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {2, 3}, st[2] = {3, 2};
    oj_tensor *x = leaf(eng, 2, s, -1, 1);
    oj_tensor *w = oj_rand_uniform(eng, 2, st, OJ_F64, -1, 1);
    oj_tensor *xt = oj_contiguous(oj_transpose(x, 0, 1)); /* a copy */
    oj_tensor *xc = oj_contiguous(x);                       /* a view */
    assert_true(oj_requires_grad(xt) && oj_requires_grad(xc) && oj_requires_grad(oj_clone(x)));
    assert_string_equal(oj_grad_fn_name(xt), "contiguous");
    oj_tensor *loss = oj_add(oj_add(oj_sum_all(oj_mul(oj_square(xt), w)), oj_sum_all(oj_clone(x))),
                             oj_sum_all(xc));
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    double xv[6], wv[6], g[6];
    oj_to_host(x, xv, sizeof xv);
    oj_to_host(w, wv, sizeof wv);
    oj_to_host(oj_grad(x), g, sizeof g);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            assert_float_equal(g[i * 3 + j], 2 * xv[i * 3 + j] * wv[j * 2 + i] + 2, 1e-12);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

// ---- gradcheck over every differentiable elementwise op

typedef oj_tensor *(*unary_fn)(oj_tensor *);
typedef struct {
    const char *name;
    unary_fn f;
    double lo, hi;
} unary_case;

static oj_tensor *w_leaky(oj_tensor *x) { return oj_leaky_relu(x, 0.1); }
static oj_tensor *w_softplus(oj_tensor *x) { return oj_softplus(x, 1.5, 20.0); }
static oj_tensor *w_elu(oj_tensor *x) { return oj_elu(x, 0.7); }
static oj_tensor *w_pow(oj_tensor *x) { return oj_pow_scalar(x, 2.5); }
static oj_tensor *w_clamp(oj_tensor *x) { return oj_clamp(x, -0.5, 0.5); }
static oj_tensor *w_affine(oj_tensor *x) { return oj_affine(x, -1.5, 0.25); }

static const unary_case unary_cases[] = {
    {"neg", oj_neg, -2, 2},         {"abs", oj_abs, 0.1, 2},
    {"exp", oj_exp, -2, 2},         {"log", oj_log, 0.2, 3},
    {"log1p", oj_log1p, -0.5, 2},   {"sqrt", oj_sqrt, 0.2, 3},
    {"rsqrt", oj_rsqrt, 0.2, 3},    {"square", oj_square, -2, 2},
    {"reciprocal", oj_reciprocal, 0.5, 2}, {"sin", oj_sin, -3, 3},
    {"cos", oj_cos, -3, 3},         {"relu", oj_relu, 0.1, 2},
    {"leaky_relu", w_leaky, -2, -0.1}, {"gelu", oj_gelu, -3, 3},
    {"gelu_tanh", oj_gelu_tanh, -3, 3}, {"silu", oj_silu, -3, 3},
    {"sigmoid", oj_sigmoid, -3, 3}, {"tanh", oj_tanh, -2, 2},
    {"softplus", w_softplus, -3, 3}, {"elu", w_elu, -2, 2},
    {"mish", oj_mish, -3, 3},       {"pow", w_pow, 0.2, 2},
    {"clamp", w_clamp, -0.45, 0.45}, {"affine", w_affine, -2, 2},
};

static const unary_case *g_unary;
static oj_tensor *unary_on_transposed(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *t = oj_transpose(in[0], 0, 1); // non-contiguous input
    oj_tensor *y = g_unary->f(t);
    oj_release(t);
    return y;
}

static void test_gradcheck_unary(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s[2] = {3, 4};
    for (size_t c = 0; c < sizeof unary_cases / sizeof unary_cases[0]; c++) {
        oj_scope_begin(eng);
        g_unary = &unary_cases[c];
        oj_tensor *x = leaf(eng, 2, s, g_unary->lo, g_unary->hi);
        oj_status st = oj_gradcheck(eng, unary_on_transposed, NULL, &x, 1, NULL);
        if (st != OJ_OK) fail_msg("gradcheck %s: %s", g_unary->name, oj_last_error(eng));
        oj_scope_end(eng);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

typedef oj_tensor *(*binary_fn)(oj_tensor *, oj_tensor *);
static binary_fn g_binary;
static oj_tensor *binary_wrap(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    return g_binary(in[0], in[1]);
}
static oj_tensor *where_wrap(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *c = oj_gt(in[0], in[1]);
    oj_tensor *y = oj_where(c, in[0], in[1]);
    oj_release(c);
    return y;
}
static oj_tensor *reduce_wrap(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int dims[2] = {0, 2};
    oj_tensor *s = *(int *)ctx ? oj_mean(in[0], 2, dims, true) : oj_sum(in[0], 1, dims + 1, false);
    return s;
}

static void test_gradcheck_binary_broadcast(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    binary_fn fns[] = {oj_add, oj_sub, oj_mul, oj_div, oj_pow, oj_maximum, oj_minimum};
    const char *names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
    int64_t sa[3] = {2, 3, 4}, sb[2] = {1, 4};
    for (size_t c = 0; c < sizeof fns / sizeof fns[0]; c++) {
        oj_scope_begin(eng);
        g_binary = fns[c];
        oj_tensor *in[2] = {leaf(eng, 3, sa, 0.5, 2), leaf(eng, 2, sb, 0.5, 2)};
        oj_status st = oj_gradcheck(eng, binary_wrap, NULL, in, 2, NULL);
        if (st != OJ_OK) fail_msg("gradcheck %s: %s", names[c], oj_last_error(eng));
        oj_scope_end(eng);
    }
    oj_scope_begin(eng);
    oj_tensor *in[2] = {leaf(eng, 3, sa, -1, 1), leaf(eng, 2, sb, -1, 1)};
    assert_int_equal(oj_gradcheck(eng, where_wrap, NULL, in, 2, NULL), OJ_OK);
    for (int mean = 0; mean < 2; mean++)
        assert_int_equal(oj_gradcheck(eng, reduce_wrap, &mean, in, 1, NULL), OJ_OK);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static void test_no_grad_and_errors(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[1] = {3}, s2[1] = {4};
    oj_tensor *x = leaf(eng, 1, s, -1, 1);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *y = oj_mul(x, x);
    assert_false(oj_requires_grad(y));
    oj_set_grad_enabled(eng, prev);
    assert_int_equal(oj_backward(y, false), OJ_ERR_SHAPE); // 3 elements
    oj_clear_error(eng);
    oj_tensor *z = oj_add(x, oj_ones(eng, 1, s2, OJ_F64));
    assert_null(z);
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "[3] and [4]"));
    oj_clear_error(eng);
    assert_null(oj_exp(NULL));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static void test_scoped_training_loop_frees_everything(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s[2] = {8, 8};
    oj_tensor *w = leaf(eng, 2, s, -1, 1);
    oj_set_requires_grad(w, true);
    int64_t before = oj_budget_current(oj_engine_budget(eng)) - oj_engine_pooled_bytes(eng);
    for (int it = 0; it < 2000; it++) {
        oj_scope_begin(eng);
        oj_tensor *l = oj_mean_all(oj_tanh(oj_mul(w, w)));
        assert_int_equal(oj_backward(l, false), OJ_OK);
        oj_scope_end(eng);
    }
    oj_zero_grad(w);
    int64_t after = oj_budget_current(oj_engine_budget(eng)) - oj_engine_pooled_bytes(eng);
    assert_int_equal(before, after);
    oj_release(w);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

// test: in-place writes that invalidate no saved tensor are legal, as in
// torch: y = 2x; y += 1; y *= 3; backward gives d sum(y^2)/dx = 12 (2x + 1)
// (mul_scalar saves nothing; the writes are recorded), also with the writes
// under no-grad (d/dx = 4 y of the written y); exp(h) then h *= 0.5 is
// legal (exp reads only its output). Refused: a write to exp's output, to
// sin's input, to a leaf that requires grad.
static void test_inplace_writes_saved_nothing(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[1] = {3};
    double xv[3], g[3], yv[3];
    for (int grad_mode = 1; grad_mode >= 0; grad_mode--) {
        oj_tensor *x = leaf(eng, 1, s, -1, 1);
        oj_to_host(x, xv, sizeof xv);
        oj_tensor *y = oj_mul_scalar(x, 2.0);
        bool prev = oj_set_grad_enabled(eng, grad_mode);
        assert_int_equal(oj_add_(y, oj_ones(eng, 1, s, OJ_F64)), OJ_OK);
        assert_int_equal(oj_mul_scalar_(y, 3.0), OJ_OK);
        oj_set_grad_enabled(eng, prev);
        if (oj_backward(oj_sum_all(oj_square(y)), false) != OJ_OK)
            fail_msg("backward after y += 1 (grad mode %d): %s", grad_mode, oj_last_error(eng));
        oj_to_host(oj_grad(x), g, sizeof g);
        oj_to_host(y, yv, sizeof yv);
        for (int i = 0; i < 3; i++) {
            assert_float_equal(yv[i], 3 * (2 * xv[i] + 1), 1e-12);
            // recorded: dy/dx = 6; unrecorded: y's history is 2x
            assert_float_equal(g[i], 2 * yv[i] * (grad_mode ? 6 : 2), 1e-12);
        }
    }
    oj_tensor *x = leaf(eng, 1, s, -1, 1);
    oj_tensor *h = oj_mul_scalar(x, 2.0);
    oj_tensor *e = oj_exp(h);
    assert_int_equal(oj_mul_scalar_(h, 0.5), OJ_OK);
    assert_int_equal(oj_backward(oj_sum_all(e), false), OJ_OK);
    oj_to_host(x, xv, sizeof xv);
    oj_to_host(oj_grad(x), g, sizeof g);
    for (int i = 0; i < 3; i++) assert_float_equal(g[i], 2 * exp(2 * xv[i]), 1e-12);
    // refused: exp's output, sin's input (read by their backwards)
    for (int k = 0; k < 2; k++) {
        oj_tensor *hk = oj_mul_scalar(x, 2.0);
        oj_tensor *yk = k ? oj_sin(hk) : oj_exp(hk);
        assert_int_equal(oj_mul_scalar_(k ? hk : yk, 2.0), OJ_OK);
        assert_int_equal(oj_backward(oj_sum_all(yk), false), OJ_ERR_STATE);
        assert_non_null(strstr(oj_last_error(eng), k ? "sin" : "exp"));
        assert_non_null(strstr(oj_last_error(eng), "modified in place"));
        oj_clear_error(eng);
    }
    // refused: a leaf that requires grad, with grad mode on
    assert_int_equal(oj_mul_scalar_(x, 2.0), OJ_ERR_STATE);
    assert_non_null(strstr(oj_last_error(eng), "leaf"));
    oj_clear_error(eng);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mul_add_broadcast),
        cmocka_unit_test(test_given_grad_buffer_and_leaf_hook),
        cmocka_unit_test(test_fan_out_and_accumulate),
        cmocka_unit_test(test_second_backward_and_inplace),
        cmocka_unit_test(test_inplace_writes_saved_nothing),
        cmocka_unit_test(test_retain_grad_and_detach),
        cmocka_unit_test(test_clone_contiguous_record),
        cmocka_unit_test(test_gradcheck_unary),
        cmocka_unit_test(test_gradcheck_binary_broadcast),
        cmocka_unit_test(test_no_grad_and_errors),
        cmocka_unit_test(test_scoped_training_loop_frees_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
