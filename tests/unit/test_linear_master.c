// test: under FAST bf16 autocast, linear, gelu_linear, swiglu_linear and
// linear_cross_entropy over f32 weights give the f32 weight (and bias) its
// gradient from the GEMM's f32 sums (not rounded to bf16), in the weight's
// layout (a transposed view's leaf gets a contiguous gradient), matching a
// double reference of the same bf16 operands; EXACT and OJAS_LINEAR_MASTER=0
// / OJAS_LCE_MASTER=0 keep the bf16-rounded gradients.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_engine *new_engine(oj_numerics numerics) {
    oj_engine *e = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 5;
    cfg.threads = 2;
    cfg.numerics = numerics;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

static oj_tensor *randn(oj_engine *e, int rank, const int64_t *shape) {
    return oj_rand_normal(e, rank, shape, OJ_F32, 0.0, 1.0);
}

/* Is v (an f32 value) exactly a bf16 value? */
static bool is_bf16(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0xffffu) == 0;
}

/* Every element of t a bf16 value? */
static bool all_bf16(oj_tensor *t) {
    for (int64_t i = 0; i < oj_numel(t); i++)
        if (!is_bf16(oj_item_at(t, i))) return false;
    return true;
}

/* ref[o, i] = sum_n g[n, o] h[n, i] in double (g [N, O], h [N, I] read as
 * they are: the bf16 operands); max |got - ref| / max(1, max |ref|), got
 * [O, I] or, transposed, [I, O]. */
static double wgrad_err(oj_tensor *got, oj_tensor *g, oj_tensor *h, bool transposed) {
    int64_t N = oj_size(g, 0), O = oj_size(g, 1), I = oj_size(h, 1);
    double m = 0.0, ref = 1.0;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            double s = 0.0;
            for (int64_t n = 0; n < N; n++)
                s += oj_item_at(g, n * O + o) * oj_item_at(h, n * I + i);
            double v = oj_item_at(got, transposed ? i * O + o : o * I + i);
            m = fmax(m, fabs(v - s));
            ref = fmax(ref, fabs(s));
        }
    return m / ref;
}

/* The linear whose f32 weight gradient run_linear checks. */
typedef enum { LIN, GELU_LIN, SWIGLU_LIN } lin_kind;

/* y = linear(h, W) (W [O, I], or the transpose of a [I, O] leaf) + b, loss
 * sum(y * r); the leaf's gradient against the double reference. h: x
 * (LIN), gelu_tanh(x) in bf16 (GELU_LIN: gelu_linear, gpt2's second MLP
 * linear), or silu(gate) * up in bf16 with gate and up the halves of x [N,
 * 2I] (SWIGLU_LIN: swiglu_linear, nanolab's down projection). */
static void run_linear(oj_numerics numerics, bool transposed, lin_kind kind, bool *bf16_grad,
                       double *err, double *berr) {
    oj_engine *e = new_engine(numerics);
    oj_scope_begin(e);
    const int64_t N = 64, I = 48, O = 24;
    oj_tensor *x = randn(e, 2, (int64_t[]){N, kind == SWIGLU_LIN ? 2 * I : I});
    oj_tensor *leaf = transposed ? randn(e, 2, (int64_t[]){I, O}) : randn(e, 2, (int64_t[]){O, I});
    oj_tensor *b = randn(e, 1, (int64_t[]){O});
    oj_tensor *r = oj_cast(randn(e, 2, (int64_t[]){N, O}), OJ_BF16);
    oj_set_requires_grad(leaf, true);
    oj_set_requires_grad(b, true);
    oj_set_requires_grad(x, true);
    assert_false(oj_set_autocast(e, true, OJ_BF16));
    oj_tensor *w = transposed ? oj_transpose(leaf, 0, 1) : leaf;
    oj_tensor *gate = NULL, *up = NULL;
    if (kind == SWIGLU_LIN) gate = oj_narrow(x, 1, 0, I), up = oj_narrow(x, 1, I, I);
    oj_tensor *y = kind == GELU_LIN     ? oj_gelu_linear(x, w, b, true)
                   : kind == SWIGLU_LIN ? oj_swiglu_linear(gate, up, w, b)
                                        : oj_linear(x, w, b);
    assert_non_null(y);
    assert_int_equal(oj_tensor_dtype(y), OJ_BF16);
    oj_tensor *s = oj_sum(oj_mul(y, r), 0, NULL, false);
    assert_int_equal(oj_backward(s, false), OJ_OK);
    assert_true(oj_set_autocast(e, false, OJ_BF16));
    oj_tensor *gw = oj_grad(leaf), *gb = oj_grad(b);
    assert_non_null(gw);
    assert_int_equal(oj_tensor_dtype(gw), OJ_F32);
    assert_int_equal(oj_tensor_dtype(gb), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_F32);
    assert_true(oj_is_contiguous(gw));
    oj_tensor *xb = oj_cast(x, OJ_BF16);
    oj_tensor *h = kind == GELU_LIN ? oj_gelu_tanh(xb) : xb; // the bf16 input of the GEMM
    if (kind == SWIGLU_LIN)
        h = oj_mul(oj_silu(oj_cast(gate, OJ_BF16)), oj_cast(up, OJ_BF16));
    *err = wgrad_err(gw, r, h, transposed);
    *bf16_grad = all_bf16(gw);
    double m = 0.0; // db = column sums of r
    for (int64_t o = 0; o < O; o++) {
        double sum = 0.0;
        for (int64_t n = 0; n < N; n++) sum += oj_item_at(r, n * O + o);
        m = fmax(m, fabs(oj_item_at(gb, o) - sum));
    }
    *berr = m;
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void test_fast_linear_wgrad_f32(void **state) {
    (void)state;
    for (int t = 0; t < 2; t++)
        for (int k = LIN; k <= SWIGLU_LIN; k++) {
            bool bf = true;
            double err = 1.0, berr = 1.0;
            run_linear(OJ_NUMERICS_FAST, t, (lin_kind)k, &bf, &err, &berr);
            assert_false(bf);           // f32 sums, not rounded to bf16
            assert_true(err < 2e-6);    // bf16 rounding would be ~2e-3
            assert_true(berr < 0.25);   // the bf16 column sum, as before
        }
}

static void test_exact_and_switch_keep_bf16_wgrad(void **state) {
    (void)state;
    for (int t = 0; t < 2; t++)
        for (int k = LIN; k <= SWIGLU_LIN; k++) {
            bool bf = false;
            double err = 1.0, berr = 1.0;
            run_linear(OJ_NUMERICS_EXACT, t, (lin_kind)k, &bf, &err, &berr);
            assert_true(bf);
            assert_true(err < 1e-2);
            setenv("OJAS_LINEAR_MASTER", "0", 1);
            bf = false;
            run_linear(OJ_NUMERICS_FAST, t, (lin_kind)k, &bf, &err, &berr);
            unsetenv("OJAS_LINEAR_MASTER");
            assert_true(bf);
            assert_true(err < 1e-2);
        }
}

/* linear_cross_entropy's dW for the f32 weight w (x [N, C], targets t):
 * all bf16 values or not, and *g its values (f64, in the caller's scope). */
static bool lce_wgrad(oj_engine *e, oj_tensor *x, oj_tensor *w, oj_tensor *t, oj_tensor **g) {
    oj_zero_grad(x);
    oj_zero_grad(w);
    assert_false(oj_set_autocast(e, true, OJ_BF16));
    oj_tensor *loss = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    assert_non_null(loss);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    assert_true(oj_set_autocast(e, false, OJ_BF16));
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_F32);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_F32);
    *g = oj_cast(oj_grad(w), OJ_F64);
    return all_bf16(oj_grad(w));
}

/* x [40, 16], w [24, 16] (requires grad) random, targets (i * mul + add) % 24. */
static void lce_inputs(oj_engine *e, int64_t mul, int64_t add, oj_tensor **x, oj_tensor **w,
                       oj_tensor **t) {
    const int64_t N = 40, C = 16, V = 24;
    *x = randn(e, 2, (int64_t[]){N, C});
    *w = randn(e, 2, (int64_t[]){V, C});
    int64_t tv[40];
    for (int64_t i = 0; i < N; i++) tv[i] = (i * mul + add) % V;
    *t = oj_from_host(e, 1, (int64_t[]){N}, OJ_I64, tv, sizeof tv);
    oj_set_requires_grad(*w, true);
}

static void test_fast_lce_wgrad_f32(void **state) {
    (void)state;
    oj_engine *e = new_engine(OJ_NUMERICS_FAST);
    oj_scope_begin(e);
    oj_tensor *x, *w, *t;
    lce_inputs(e, 7, 3, &x, &w, &t);
    oj_set_requires_grad(x, true);
    oj_tensor *g_master, *g_cast;
    assert_false(lce_wgrad(e, x, w, t, &g_master));
    setenv("OJAS_LCE_MASTER", "0", 1);
    assert_true(lce_wgrad(e, x, w, t, &g_cast));
    unsetenv("OJAS_LCE_MASTER");
    // the same gradient but for the bf16 rounding of the switched-off path
    double m = 0.0, ref = 1e-30;
    for (int64_t i = 0; i < oj_numel(g_master); i++) {
        m = fmax(m, fabs(oj_item_at(g_master, i) - oj_item_at(g_cast, i)));
        ref = fmax(ref, fabs(oj_item_at(g_cast, i)));
    }
    assert_true(m > 0.0);
    assert_true(m / ref < 1e-2);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    oj_engine_free(e);
}

/* dW (f64 copy) of a FAST f32 linear_cross_entropy over chunks of `rows`
 * rows; dw_set false: OJAS_LCE_DW_SET=0 (dW starts as zeros). */
static oj_tensor *lce_dw_chunked(oj_engine *e, oj_tensor *x, oj_tensor *w, oj_tensor *t,
                                 const char *rows, bool dw_set) {
    oj_zero_grad(w);
    setenv("OJAS_LCE_CHUNK_ROWS", rows, 1);
    if (!dw_set) setenv("OJAS_LCE_DW_SET", "0", 1);
    oj_tensor *loss = oj_linear_cross_entropy(x, w, t, -1, 0.0, OJ_REDUCTION_MEAN);
    unsetenv("OJAS_LCE_CHUNK_ROWS");
    unsetenv("OJAS_LCE_DW_SET");
    assert_non_null(loss);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    return oj_cast(oj_grad(w), OJ_F64);
}

// test: under FAST the first chunk's GEMM writes dW (no zero fill): the
// same values as with the zeros (OJAS_LCE_DW_SET=0), and as one chunk
static void test_fast_lce_first_chunk_writes_dw(void **state) {
    (void)state;
    oj_engine *e = new_engine(OJ_NUMERICS_FAST);
    oj_scope_begin(e);
    oj_tensor *x, *w, *t;
    lce_inputs(e, 5, 1, &x, &w, &t);
    oj_tensor *a = lce_dw_chunked(e, x, w, t, "7", true);
    oj_tensor *b = lce_dw_chunked(e, x, w, t, "7", false);
    oj_tensor *one = lce_dw_chunked(e, x, w, t, "40", true);
    double m = 0.0, ref = 0.0;
    for (int64_t i = 0; i < oj_numel(a); i++) {
        double va = oj_item_at(a, i), vb = oj_item_at(b, i), vo = oj_item_at(one, i);
        assert_true(va == vb);
        m = fmax(m, fabs(va - vo));
        ref = fmax(ref, fabs(vo));
    }
    assert_true(ref > 0.0 && m / ref < 1e-5);
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_scope_end(e);
    oj_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_linear_wgrad_f32),
        cmocka_unit_test(test_exact_and_switch_keep_bf16_wgrad),
        cmocka_unit_test(test_fast_lce_wgrad_f32),
        cmocka_unit_test(test_fast_lce_first_chunk_writes_dw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
