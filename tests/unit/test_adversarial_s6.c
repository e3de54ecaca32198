// test: adversarial inputs for session 6's additions, each against a
// composition of simpler ops (or float64, or bit for bit): rms_norm_rotary
// (empty shapes, bad dtypes/shapes/eps/theta/offsets, NaN/inf, eps 0,
// extreme offsets, stride-0 and strided views, ranks 2-5, SIMD tails,
// backward twice, weight-only gradients, in-place writes after the
// forward, autocast bf16/f16, thread-count invariance, weight aliasing x);
// swiglu_linear on strided slices with bias; attention's [B, T, H, D]-stored
// output (contiguous copies, raw data, safetensors, in-place writes) and
// q/k/v gradients through one buffer (every order of the thirds, q = k = v,
// other tilings, every dtype, masks, T 1, H 1, empty, GQA, retain_grad, two
// backward calls); split/cat backward views; add + norm with mixed dtypes;
// linear_cross_entropy corners (all ignored, ignore_index a class, smoothing
// 1, V 1, C 1, bf16, chunks of 1 row, strided inputs, empty batch, errors,
// EXACT thread invariance); gpt under bf16 autocast (gradients near f32,
// bf16/f64 weights); out-of-memory sweeps (only OJ_ERR_CAPACITY, no leak).
#include <stdio.h>

#include "core/internal.h"
#include "nn_testutil.h"
#include "ojas/gpt.h"
#include "ojas/io.h"

static const double EPS = 1e-6, THETA = 10000.0;

/* a and b hold the same values (NaN matching NaN) within atol + rtol |b|. */
static void close_to(const char *what, oj_tensor *a, oj_tensor *b, double atol, double rtol) {
    if (a == NULL || b == NULL)
        fail_msg("%s: NULL tensor", what);
    assert_int_equal(oj_rank(a), oj_rank(b));
    for (int d = 0; d < oj_rank(a); d++)
        assert_int_equal(oj_size(a, d), oj_size(b, d));
    double *x = nt_host(a), *y = nt_host(b);
    nt_close(what, x, y, oj_numel(a), atol, rtol);
    free(x);
    free(y);
}

static oj_tensor *heads(oj_tensor *x, int64_t H, int64_t D) {
    int64_t s[4] = {oj_size(x, 0), oj_size(x, 1), H, D};
    oj_tensor *v = oj_reshape(x, 4, s);
    oj_tensor *t = oj_transpose(v, 1, 2);
    oj_release(v);
    return t;
}

static oj_tensor *unfused_nr(oj_tensor *x, oj_tensor *w, double eps, int64_t off) {
    oj_tensor *n = oj_rms_norm(x, w, eps);
    oj_tensor *y = n ? oj_rotary_embedding(n, off, THETA) : NULL;
    oj_release(n);
    return y;
}

/* ---------------------------------------------------------------- rms_norm_rotary */

static void test_nr_empty(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t shapes[4][3] = {{2, 3, 0}, {2, 0, 4}, {0, 3, 4}, {0, 0, 0}};
    for (int i = 0; i < 4; i++) {
        oj_tensor *x = nt_rand(eng, 3, shapes[i], OJ_F32, -1, 1);
        oj_tensor *w = nt_rand(eng, 1, &shapes[i][2], OJ_F32, 0.5, 1.5);
        oj_set_requires_grad(x, true);
        oj_set_requires_grad(w, true);
        oj_tensor *y = oj_rms_norm_rotary(x, w, EPS, 3, THETA);
        if (y == NULL)
            fail_msg("shape %d: %s", i, oj_last_error(eng));
        assert_int_equal(oj_numel(y), 0);
        assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        oj_tensor *g = oj_grad(w);
        assert_non_null(g);
        double *h = nt_host(g);
        for (int64_t k = 0; k < oj_numel(g); k++)
            assert_true(h[k] == 0.0);
        free(h);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_errors(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s1[1] = {4}, s3[3] = {2, 3, 4}, w4[1] = {4}, w22[2] = {2, 2};
    oj_tensor *x = nt_rand(eng, 3, s3, OJ_F32, -1, 1);
    nt_expect_error(eng,
                    oj_rms_norm_rotary(nt_rand(eng, 1, s1, OJ_F32, -1, 1), NULL, EPS, 0, THETA),
                    OJ_ERR_SHAPE, "rms_norm_rotary", NULL);
    nt_expect_error(eng, oj_rms_norm_rotary(oj_cast(x, OJ_I32), NULL, EPS, 0, THETA), OJ_ERR_DTYPE,
                    "rms_norm_rotary", NULL);
    nt_expect_error(eng, oj_rms_norm_rotary(x, nt_rand(eng, 1, w4, OJ_BF16, -1, 1), EPS, 0, THETA),
                    OJ_ERR_DTYPE, "rms_norm_rotary", "weight");
    nt_expect_error(
        eng,
        oj_rms_norm_rotary(x, oj_cast(nt_rand(eng, 1, w4, OJ_F32, -1, 1), OJ_I64), EPS, 0, THETA),
        OJ_ERR_DTYPE, "rms_norm_rotary", "weight");
    nt_expect_error(eng, oj_rms_norm_rotary(x, nt_rand(eng, 2, w22, OJ_F32, -1, 1), EPS, 0, THETA),
                    OJ_ERR_SHAPE, "rms_norm_rotary", "weight");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, NAN, 0, THETA), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "eps");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, INFINITY, 0, THETA), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "eps");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, 0, NAN), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "theta");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, 0, INFINITY), OJ_ERR_INVALID_ARGUMENT,
                    "rms_norm_rotary", "theta");
    nt_expect_error(eng, oj_rms_norm_rotary(x, NULL, EPS, INT64_MAX - 2, THETA),
                    OJ_ERR_OUT_OF_RANGE, "rms_norm_rotary", NULL);
    assert_null(oj_rms_norm_rotary(NULL, NULL, EPS, 0, THETA));
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* values and gradients against rms_norm then rotary_embedding */
static void check_nr(oj_engine *eng, const char *what, oj_tensor *x0, oj_tensor *w0, double eps,
                     int64_t off, double tol) {
    oj_tensor *g[2][2] = {{NULL, NULL}, {NULL, NULL}}, *y[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *x = oj_detach(x0), *w = w0 ? oj_detach(w0) : NULL;
        oj_set_requires_grad(x, true);
        if (w)
            oj_set_requires_grad(w, true);
        oj_tensor *xv = x;
        y[f] = f ? oj_rms_norm_rotary(xv, w, eps, off, THETA) : unfused_nr(xv, w, eps, off);
        if (y[f] == NULL)
            fail_msg("%s (%d): %s", what, f, oj_last_error(eng));
        oj_tensor *s = oj_sum_all(oj_mul(y[f], y[f]));
        if (oj_backward(s, false) != OJ_OK)
            fail_msg("%s: backward: %s", what, oj_last_error(eng));
        g[f][0] = oj_grad(x);
        g[f][1] = w ? oj_grad(w) : NULL;
    }
    char b[128];
    snprintf(b, sizeof b, "%s value", what);
    close_to(b, y[1], y[0], tol, tol);
    snprintf(b, sizeof b, "%s dx", what);
    close_to(b, g[1][0], g[0][0], tol, tol);
    snprintf(b, sizeof b, "%s dw", what);
    if (w0)
        close_to(b, g[1][1], g[0][1], tol, tol);
    (void)eng;
}

static void test_nr_values(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s3[3] = {2, 3, 8}, w8[1] = {8};
    oj_tensor *x = nt_rand(eng, 3, s3, OJ_F32, -2, 2), *w = nt_rand(eng, 1, w8, OJ_F32, .5, 1.5);
    /* NaN, inf and a zero row */
    double v[48];
    double *h = nt_host(x);
    memcpy(v, h, sizeof v);
    free(h);
    v[3] = NAN;
    v[12] = INFINITY;
    for (int i = 16; i < 24; i++)
        v[i] = 0.0;
    oj_tensor *xn = nt_from(eng, 3, s3, OJ_F32, v);
    check_nr(eng, "nan/inf", xn, w, EPS, 0, 0);
    check_nr(eng, "eps 0 zero row", xn, NULL, 0.0, 0, 0);
    check_nr(eng, "negative offset", x, w, EPS, -7, 0);
    check_nr(eng, "INT64_MIN offset", x, w, EPS, INT64_MIN, 0);
    check_nr(eng, "max offset", x, w, EPS, INT64_MAX - 3, 0);
    check_nr(eng, "f64", oj_cast(x, OJ_F64), oj_cast(w, OJ_F64), EPS, 5, 0);
    check_nr(eng, "bf16", oj_cast(x, OJ_BF16), oj_cast(w, OJ_BF16), EPS, 5, 0);
    check_nr(eng, "f16", oj_cast(x, OJ_F16), oj_cast(w, OJ_F16), EPS, 5, 0);
    /* stride 0: one row expanded */
    int64_t r1[3] = {1, 1, 8};
    oj_tensor *e = oj_expand(nt_rand(eng, 3, r1, OJ_F32, -2, 2), 3, s3);
    check_nr(eng, "expanded", e, w, EPS, 1, 0);
    /* stride 0 along D itself (every row constant) */
    int64_t c1[3] = {2, 3, 1};
    oj_tensor *ed = oj_expand(nt_rand(eng, 3, c1, OJ_F32, -2, 2), 3, s3);
    check_nr(eng, "expanded D", ed, w, EPS, 1, 0);
    check_nr(eng, "expanded D f64", oj_cast(ed, OJ_F64), oj_cast(w, OJ_F64), EPS, 1, 0);
    /* a weight that is itself a strided view */
    oj_tensor *w16 = nt_rand(eng, 1, (int64_t[]){16}, OJ_F32, .5, 1.5);
    check_nr(eng, "strided weight", x, oj_slice(w16, 0, 0, 16, 2), EPS, 1, 0);
    /* a strided slice along D (stride 2) and along T */
    int64_t s16[3] = {2, 3, 16};
    oj_tensor *xs = oj_slice(nt_rand(eng, 3, s16, OJ_F32, -2, 2), 2, 1, 16, 2);
    check_nr(eng, "D stride 2", xs, w, EPS, 2, 0);
    oj_tensor *xt = oj_transpose(nt_rand(eng, 3, (int64_t[]){3, 2, 8}, OJ_F32, -2, 2), 0, 1);
    check_nr(eng, "transposed rows", xt, w, EPS, 2, 0);
    /* D with SIMD tails */
    const int64_t Ds[3] = {130, 18, 34};
    for (int i = 0; i < 3; i++) {
        int64_t sx[3] = {2, 5, Ds[i]}, sw[1] = {Ds[i]};
        check_nr(eng, "SIMD tail", nt_rand(eng, 3, sx, OJ_F32, -3, 3),
                 nt_rand(eng, 1, sw, OJ_F32, .5, 1.5), EPS, 11, 0);
    }
    /* D 2, T 1 */
    check_nr(eng, "D 2", nt_rand(eng, 3, (int64_t[]){1, 1, 2}, OJ_F32, -2, 2), NULL, EPS, 0, 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_backward_twice(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 16}, w8[1] = {8};
    for (int m = 0; m < 4; m++) { /* bit 0 weight needs grad, bit 1 x needs grad (not both 0) */
        if (m == 0)
            continue;
        oj_tensor *x = nt_rand(eng, 3, xs, OJ_F32, -2, 2),
                  *w = nt_rand(eng, 1, w8, OJ_F32, .5, 1.5);
        oj_set_requires_grad(x, (m & 2) != 0);
        oj_set_requires_grad(w, (m & 1) != 0);
        oj_tensor *y = oj_rms_norm_rotary(heads(x, 2, 8), w, EPS, 4, THETA);
        assert_non_null(y);
        oj_tensor *s = oj_sum_all(oj_mul(y, y));
        assert_int_equal(oj_backward(s, true), OJ_OK);
        oj_tensor *gx1 = (m & 2) ? oj_clone(oj_grad(x)) : NULL;
        oj_tensor *gw1 = (m & 1) ? oj_clone(oj_grad(w)) : NULL;
        assert_int_equal(oj_backward(s, false), OJ_OK);
        if (m & 2)
            close_to("dx twice", oj_grad(x), oj_mul_scalar(gx1, 2.0), 1e-6, 1e-6);
        if (m & 1)
            close_to("dw twice", oj_grad(w), oj_mul_scalar(gw1, 2.0), 1e-6, 1e-6);
        if (!(m & 2))
            assert_null(oj_grad(x));
        /* a third backward: the saved tensors are freed */
        assert_int_not_equal(oj_backward(s, false), OJ_OK);
        oj_clear_error(eng);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_inplace_after(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 8}, w8[1] = {8};
    for (int which = 0; which < 2; which++) {
        oj_tensor *x = nt_rand(eng, 3, xs, OJ_F32, -2, 2),
                  *w = nt_rand(eng, 1, w8, OJ_F32, .5, 1.5);
        oj_tensor *a = nt_rand(eng, 3, xs, OJ_F32, -2, 2);
        oj_set_requires_grad(a, true);
        oj_set_requires_grad(w, true);
        oj_tensor *xa = oj_mul(x, a);
        oj_tensor *y = oj_rms_norm_rotary(xa, w, EPS, 0, THETA);
        assert_non_null(y);
        bool prev = oj_set_grad_enabled(eng, false);
        assert_int_equal(oj_mul_scalar_(which ? w : xa, 2.0), OJ_OK);
        oj_set_grad_enabled(eng, prev);
        assert_int_not_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        oj_clear_error(eng);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

static void test_nr_autocast(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {2, 3, 16}, w8[1] = {8};
    oj_tensor *x = nt_rand(eng, 3, xs, OJ_BF16, -2, 2), *w = nt_rand(eng, 1, w8, OJ_BF16, .5, 1.5);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y = oj_rms_norm_rotary(heads(x, 2, 8), w, EPS, 4, THETA);
    oj_tensor *r = unfused_nr(heads(x, 2, 8), w, EPS, 4);
    oj_tensor *yf = oj_rms_norm_rotary(heads(oj_cast(x, OJ_F32), 2, 8), w, EPS, 4, THETA);
    oj_set_autocast(eng, false, OJ_BF16);
    if (y == NULL || r == NULL || yf == NULL)
        fail_msg("%s", oj_last_error(eng));
    close_to("autocast", y, r, 0, 0);
    close_to("autocast f32 x", yf, r, 0, 0);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, y)), false), OJ_OK);
    assert_int_equal(oj_tensor_dtype(oj_grad(x)), OJ_BF16);
    assert_int_equal(oj_tensor_dtype(oj_grad(w)), OJ_BF16);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ---------------------------------------------------------------- attention */

/* softmax(q k^T / sqrt(D) + causal) v by matmul and softmax */
static oj_tensor *ref_attn(oj_tensor *q, oj_tensor *k, oj_tensor *v) {
    oj_engine *eng = oj_tensor_engine(q);
    int64_t T = oj_size(q, 2), S = oj_size(k, 2), D = oj_size(q, 3);
    double *m = malloc((size_t)(T * S) * sizeof(double));
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++)
            m[i * S + j] = j <= i + (S - T) ? 0.0 : -INFINITY;
    oj_tensor *mask = nt_from(eng, 2, (int64_t[]){T, S}, oj_tensor_dtype(q), m);
    free(m);
    oj_tensor *kt = oj_transpose(k, 2, 3);
    oj_tensor *sc = oj_add(oj_mul_scalar(oj_matmul(q, kt), 1.0 / sqrt((double)D)), mask);
    return oj_matmul(oj_softmax(sc, -1), v);
}

/* x [B, T, 3 H D] -> q, k, v head views of its thirds in the order ord */
static void qkv_heads(oj_tensor *x, int64_t H, int64_t D, const int *ord, oj_tensor **h) {
    int64_t B = oj_size(x, 0), T = oj_size(x, 1);
    oj_tensor *p[3] = {NULL, NULL, NULL};
    assert_int_equal(oj_split(x, H * D, 2, 3, p), 3);
    int64_t s4[4] = {B, T, H, D};
    for (int j = 0; j < 3; j++)
        h[j] = oj_transpose(oj_reshape(p[ord[j]], 4, s4), 1, 2);
}

static void test_attn_output_use(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t B = 2, T = 5, H = 3, D = 4;
    int64_t xs[3] = {B, T, 3 * H * D};
    const int ord[3] = {0, 1, 2};
    oj_tensor *x = nt_rand(eng, 3, xs, OJ_F64, -1, 1), *h[3];
    qkv_heads(x, H, D, ord, h);
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
    oj_tensor *r = ref_attn(h[0], h[1], h[2]);
    close_to("attention", y, r, 1e-12, 1e-12);
    /* a contiguous copy and its raw data */
    oj_tensor *yc = oj_contiguous(y);
    assert_true(oj_is_contiguous(yc));
    double *rh = nt_host(r);
    const double *yp = oj_data_ptr(yc);
    nt_close("contiguous data_ptr", yp, rh, oj_numel(r), 1e-12, 1e-12);
    /* the raw data of y itself in its [B, T, H, D] storage order */
    const double *yr = oj_data_ptr(y);
    const int64_t *st = oj_strides(y);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    double got = yr[b * st[0] + hh * st[1] + t * st[2] + d * st[3]];
                    double want = rh[((b * H + hh) * T + t) * D + d];
                    assert_true(fabs(got - want) <= 1e-12);
                }
    /* save through safetensors and read back */
    const char *path = "/tmp/ojas_adv_s6_attn.safetensors";
    const char *names[1] = {"y"};
    oj_tensor *ts[1] = {y};
    assert_int_equal(oj_safetensors_save(path, 1, names, ts, NULL, NULL), OJ_OK);
    oj_safetensors *sf = NULL;
    assert_int_equal(oj_safetensors_open(path, &sf, NULL), OJ_OK);
    oj_tensor *back = oj_safetensors_tensor(sf, eng, "y");
    assert_non_null(back);
    close_to("safetensors", back, y, 0, 0);
    oj_safetensors_close(sf);
    remove(path);
    /* in place into the output: value, and through a merged-heads view */
    assert_int_equal(oj_add_(y, oj_ones(eng, 4, (int64_t[]){B, H, T, D}, OJ_F64)), OJ_OK);
    close_to("add_ into output", y, oj_add_scalar(r, 1.0), 1e-12, 1e-12);
    oj_tensor *merged = oj_reshape(oj_transpose(y, 1, 2), 3, (int64_t[]){B, T, H * D});
    oj_tensor *rm =
        oj_reshape(oj_transpose(oj_add_scalar(r, 1.0), 1, 2), 3, (int64_t[]){B, T, H * D});
    close_to("merged view", merged, rm, 1e-12, 1e-12);
    assert_int_equal(oj_add_(merged, merged), OJ_OK);
    close_to("add_ merged into itself", y, oj_mul_scalar(oj_add_scalar(r, 1.0), 2.0), 1e-12, 1e-12);
    free(rh);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* in-place into the output after the forward: the saved output changed */
static void test_attn_inplace_then_backward(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[3] = {1, 4, 3 * 2 * 2};
    const int ord[3] = {0, 1, 2};
    oj_tensor *x = nt_leaf(eng, 3, xs, -1, 1), *h[3];
    qkv_heads(x, 2, 2, ord, h);
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *merged = oj_reshape(oj_transpose(y, 1, 2), 3, (int64_t[]){1, 4, 4});
    assert_int_equal(oj_mul_scalar_(merged, 3.0), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    assert_int_not_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
    oj_clear_error(eng);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* gradients through q, k, v views of one buffer (every order of the
 * thirds, and q, k, v one tensor), retain_grad on q, accumulation over
 * two backward calls: against the composition */
static void test_attn_shared_grads(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const int64_t B = 2, T = 5, H = 2, D = 3;
    int64_t xs[3] = {B, T, 3 * H * D}, gs[4] = {B, H, T, D};
    const int ords[5][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 0, 0}, {1, 1, 2}};
    for (int o = 0; o < 5; o++) {
        oj_scope_begin(eng);
        oj_tensor *x0 = nt_rand(eng, 3, xs, OJ_F64, -1, 1), *g = nt_rand(eng, 4, gs, OJ_F64, -1, 1);
        oj_tensor *gx[2], *gq[2];
        for (int f = 0; f < 2; f++) {
            oj_tensor *x = oj_set_requires_grad(oj_clone(x0), true), *h[3];
            qkv_heads(x, H, D, ords[o], h);
            oj_retain_grad(h[0]);
            oj_tensor *y = f ? oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN)
                             : ref_attn(h[0], h[1], h[2]);
            assert_non_null(y);
            oj_tensor *s = oj_sum_all(oj_mul(y, g));
            assert_int_equal(oj_backward(s, true), OJ_OK);
            oj_tensor *g1 = oj_clone(oj_grad(x)), *q1 = oj_clone(oj_grad(h[0]));
            assert_int_equal(oj_backward(s, false), OJ_OK);
            close_to("second backward adds", oj_grad(x), oj_mul_scalar(g1, 2.0), 1e-12, 1e-12);
            close_to("retained q twice", oj_grad(h[0]), oj_mul_scalar(q1, 2.0), 1e-12, 1e-12);
            gx[f] = g1;
            gq[f] = q1;
        }
        char what[64];
        snprintf(what, sizeof what, "order %d dx", o);
        close_to(what, gx[1], gx[0], 1e-10, 1e-10);
        snprintf(what, sizeof what, "order %d dq", o);
        close_to(what, gq[1], gq[0], 1e-10, 1e-10);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* the leaf's gradient taken from the shared buffer, then an optimizer-like
 * in-place update of the leaf's grad and a second step's accumulation */
static void test_attn_grad_reuse(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t B = 1, T = 3, H = 2, D = 2;
    int64_t xs[3] = {B, T, 3 * H * D};
    const int ord[3] = {0, 1, 2};
    oj_tensor *x = nt_leaf(eng, 3, xs, -1, 1);
    oj_tensor *xr = oj_set_requires_grad(oj_clone(x), true);
    for (int step = 0; step < 2; step++) {
        oj_tensor *h[3], *hr[3];
        qkv_heads(x, H, D, ord, h);
        qkv_heads(xr, H, D, ord, hr);
        oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
        oj_tensor *yr = ref_attn(hr[0], hr[1], hr[2]);
        /* y used twice: attention's gradient is summed with another */
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, oj_add(y, h[2]))), false), OJ_OK);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(yr, oj_add(yr, hr[2]))), false), OJ_OK);
        close_to("grad reuse", oj_grad(x), oj_grad(xr), 1e-12, 1e-12);
        assert_int_equal(oj_mul_scalar_(oj_grad(x), 0.5), OJ_OK);
        assert_int_equal(oj_mul_scalar_(oj_grad(xr), 0.5), OJ_OK);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* q, k, v selected from one [B, T, H, 3, D] (interleaved per head) or
 * [3, B, H, T, D] tensor: they tile a block with other strides */
static void test_attn_other_tilings(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    for (int m = 0; m < 3; m++) {
        oj_scope_begin(eng);
        const int64_t B = m == 2 ? 1 : 2, T = m == 2 ? 1 : 4, H = 2, D = 3;
        int64_t s5a[5] = {B, T, H, 3, D}, s5b[5] = {3, B, H, T, D}, gs[4] = {B, H, T, D};
        oj_tensor *x0 = nt_rand(eng, 5, m == 1 ? s5b : s5a, OJ_F64, -1, 1);
        oj_tensor *g = nt_rand(eng, 4, gs, OJ_F64, -1, 1), *gx[2];
        for (int f = 0; f < 2; f++) {
            oj_tensor *x = oj_set_requires_grad(oj_clone(x0), true), *h[3];
            for (int j = 0; j < 3; j++)
                h[j] = m == 1 ? oj_select(x, 0, j) : oj_transpose(oj_select(x, 3, j), 1, 2);
            oj_tensor *y = f ? oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN)
                             : ref_attn(h[0], h[1], h[2]);
            assert_non_null(y);
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, g)), false), OJ_OK);
            gx[f] = oj_grad(x);
        }
        close_to("other tiling dx", gx[1], gx[0], 1e-10, 1e-10);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* ---------------------------------------------------------------- swiglu_linear */

static void test_swiglu_strided(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const int64_t N = 5, Hd = 7, O = 3;
    int64_t gu[2] = {N, 2 * Hd}, ws[2] = {O, Hd}, bs[1] = {O};
    const oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
    for (int k = 0; k < 3; k++)
        for (int m = 0; m < 4; m++) { /* bit 0 bias, bit 1 interleaved (stride 2) gate/up */
            oj_scope_begin(eng);
            oj_tensor *h0 = nt_rand(eng, 2, gu, dts[k], -2, 2);
            oj_tensor *w0 = nt_rand(eng, 2, ws, dts[k], -1, 1),
                      *b0 = nt_rand(eng, 1, bs, dts[k], -1, 1);
            oj_tensor *y[2], *gh[2], *gw[2], *gb[2];
            for (int f = 0; f < 2; f++) {
                oj_tensor *h = oj_set_requires_grad(oj_clone(h0), true);
                oj_tensor *w = oj_set_requires_grad(oj_clone(w0), true);
                oj_tensor *b = (m & 1) ? oj_set_requires_grad(oj_clone(b0), true) : NULL;
                oj_tensor *gate = (m & 2) ? oj_slice(h, 1, 0, 2 * Hd, 2) : oj_narrow(h, 1, 0, Hd);
                oj_tensor *up = (m & 2) ? oj_slice(h, 1, 1, 2 * Hd, 2) : oj_narrow(h, 1, Hd, Hd);
                y[f] = f ? oj_swiglu_linear(gate, up, w, b)
                         : oj_linear(oj_mul(oj_silu(gate), up), w, b);
                if (y[f] == NULL)
                    fail_msg("%s", oj_last_error(eng));
                assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[f], y[f])), false), OJ_OK);
                gh[f] = oj_grad(h);
                gw[f] = oj_grad(w);
                gb[f] = b ? oj_grad(b) : NULL;
            }
            close_to("swiglu y", y[1], y[0], 0, 0);
            close_to("swiglu dh", gh[1], gh[0], 0, 0);
            close_to("swiglu dw", gw[1], gw[0], 0, 0);
            if (m & 1)
                close_to("swiglu db", gb[1], gb[0], 0, 0);
            oj_scope_end(eng);
        }
    /* gate and up one tensor; mismatched shapes; dtypes */
    oj_scope_begin(eng);
    int64_t g1[2] = {N, Hd}, g2[2] = {N, Hd + 1}, g3[3] = {1, N, Hd};
    oj_tensor *a = oj_set_requires_grad(nt_rand(eng, 2, g1, OJ_F64, -2, 2), true);
    oj_tensor *w = nt_rand(eng, 2, ws, OJ_F64, -1, 1);
    oj_tensor *y = oj_swiglu_linear(a, a, w, NULL);
    assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
    oj_tensor *ga = oj_clone(oj_grad(a));
    oj_zero_grad(a);
    assert_int_equal(oj_backward(oj_sum_all(oj_linear(oj_mul(oj_silu(a), a), w, NULL)), false),
                     OJ_OK);
    close_to("gate == up", ga, oj_grad(a), 1e-12, 1e-12);
    nt_expect_error(eng, oj_swiglu_linear(a, nt_rand(eng, 2, g2, OJ_F64, -1, 1), w, NULL),
                    OJ_ERR_SHAPE, "swiglu_linear", "gate");
    nt_expect_error(eng, oj_swiglu_linear(a, nt_rand(eng, 3, g3, OJ_F64, -1, 1), w, NULL),
                    OJ_ERR_SHAPE, "swiglu_linear", "gate");
    nt_expect_error(eng, oj_swiglu_linear(a, oj_cast(a, OJ_F32), w, NULL), OJ_ERR_DTYPE,
                    "swiglu_linear", NULL);
    nt_expect_error(eng, oj_swiglu_linear(a, a, nt_rand(eng, 2, g2, OJ_F64, -1, 1), NULL),
                    OJ_ERR_SHAPE, NULL, NULL);
    nt_expect_error(eng, oj_swiglu_linear(a, a, w, nt_rand(eng, 1, g1, OJ_F64, -1, 1)),
                    OJ_ERR_SHAPE, NULL, NULL);
    nt_expect_error(eng, oj_swiglu_linear(a, a, w, nt_rand(eng, 1, bs, OJ_F32, -1, 1)),
                    OJ_ERR_DTYPE, NULL, NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ---------------------------------------------------------------- linear_cross_entropy */

static void lce_case(oj_engine *eng, const char *what, oj_dtype dt, int64_t N, int64_t C, int64_t V,
                     const int64_t *tg, int64_t ignore, double ls, oj_reduction red, double tol) {
    int64_t xs[2] = {N, C}, ws[2] = {V, C}, ts[1] = {N};
    oj_tensor *x0 = nt_rand(eng, 2, xs, dt, -2, 2), *w0 = nt_rand(eng, 2, ws, dt, -1, 1);
    oj_tensor *t = oj_from_host(eng, 1, ts, OJ_I64, tg, (size_t)N * sizeof(int64_t));
    oj_tensor *l[2], *gx[2], *gw[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *x = oj_set_requires_grad(oj_clone(x0), true);
        oj_tensor *w = oj_set_requires_grad(oj_clone(w0), true);
        if (f) {
            l[f] = oj_linear_cross_entropy(x, w, t, ignore, ls, red);
        } else { /* in f32 (f64) from the same values: the fused op's loss dtype */
            oj_dtype wd = dt == OJ_F64 ? OJ_F64 : OJ_F32;
            l[f] = oj_cross_entropy(oj_linear(oj_cast(x, wd), oj_cast(w, wd), NULL), t, ignore, ls,
                                    red);
        }
        if (l[f] == NULL)
            fail_msg("%s: %s", what, oj_last_error(eng));
        assert_int_equal(oj_backward(oj_mul_scalar(l[f], 2.5), true), OJ_OK);
        assert_int_equal(oj_backward(l[f], false), OJ_OK); /* twice: 3.5 times the gradient */
        gx[f] = oj_grad(x);
        gw[f] = oj_grad(w);
    }
    char b[128];
    snprintf(b, sizeof b, "%s loss", what);
    close_to(b, l[1], l[0], tol, tol);
    snprintf(b, sizeof b, "%s dx", what);
    close_to(b, gx[1], gx[0], tol, tol);
    snprintf(b, sizeof b, "%s dw", what);
    close_to(b, gw[1], gw[0], tol, tol);
}

static void test_lce_corners(void **state) {
    (void)state;
    const char *chunks[3] = {"1", "2", NULL};
    for (int c = 0; c < 3; c++) {
        if (chunks[c])
            setenv("OJAS_LCE_CHUNK_ROWS", chunks[c], 1);
        else
            unsetenv("OJAS_LCE_CHUNK_ROWS");
        oj_engine *eng = nt_engine();
        oj_scope_begin(eng);
        const int64_t all_ig[5] = {-100, -100, -100, -100, -100}, mixed[5] = {0, 2, -100, 1, 0};
        const int64_t ig0[5] = {0, 0, 0, 0, 0}, zeros[5] = {0, 0, 0, 0, 0};
        const oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
        const double tols[3] = {1e-5, 1e-12, 2e-2};
        for (int k = 0; k < 3; k++)
            for (int r = 0; r < 2; r++) {
                oj_reduction red = r ? OJ_REDUCTION_SUM : OJ_REDUCTION_MEAN;
                double tol = tols[k];
                lce_case(eng, "all ignored", dts[k], 5, 4, 3, all_ig, -100, 0.0, red, tol);
                lce_case(eng, "all ignored smooth", dts[k], 5, 4, 3, all_ig, -100, 0.3, red, tol);
                lce_case(eng, "ignore 0", dts[k], 5, 4, 3, ig0, 0, 0.1, red, tol);
                lce_case(eng, "smoothing 1", dts[k], 5, 4, 3, mixed, -100, 1.0, red, tol);
                lce_case(eng, "V 1", dts[k], 5, 4, 1, zeros, -100, 0.0, red, tol);
                lce_case(eng, "V 1 smooth 1", dts[k], 5, 4, 1, zeros, -100, 1.0, red, tol);
                lce_case(eng, "one row", dts[k], 1, 6, 3, mixed + 1, -100, 0.2, red, tol);
                lce_case(eng, "C 1", dts[k], 5, 1, 3, mixed, -100, 0.0, red, tol);
            }
        oj_scope_end(eng);
        nt_engine_done(eng);
    }
    unsetenv("OJAS_LCE_CHUNK_ROWS");
}

/* strided x and weight, empty batch, bad arguments */
static void test_lce_views_errors(void **state) {
    (void)state;
    setenv("OJAS_LCE_CHUNK_ROWS", "1", 1);
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    const int64_t N = 4, C = 5, V = 6;
    int64_t xt[2] = {C, N}, wt[2] = {C, V}, ts[1] = {N}, tg[4] = {1, 5, -100, 0};
    oj_tensor *t = oj_from_host(eng, 1, ts, OJ_I64, tg, sizeof tg);
    oj_tensor *x0 = nt_rand(eng, 2, xt, OJ_F64, -2, 2), *w0 = nt_rand(eng, 2, wt, OJ_F64, -1, 1);
    oj_tensor *l[2], *gx[2], *gw[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *xl = oj_set_requires_grad(oj_clone(x0), true);
        oj_tensor *wl = oj_set_requires_grad(oj_clone(w0), true);
        oj_tensor *x = oj_transpose(xl, 0, 1), *w = oj_transpose(wl, 0, 1);
        l[f] = f ? oj_linear_cross_entropy(x, w, t, -100, 0.1, OJ_REDUCTION_MEAN)
                 : oj_cross_entropy(oj_linear(x, w, NULL), t, -100, 0.1, OJ_REDUCTION_MEAN);
        assert_non_null(l[f]);
        assert_int_equal(oj_backward(l[f], false), OJ_OK);
        gx[f] = oj_grad(xl);
        gw[f] = oj_grad(wl);
    }
    close_to("strided loss", l[1], l[0], 1e-12, 1e-12);
    close_to("strided dx", gx[1], gx[0], 1e-12, 1e-12);
    close_to("strided dw", gw[1], gw[0], 1e-12, 1e-12);
    /* empty batch */
    int64_t e2[2] = {0, C}, e1[1] = {0}, w2[2] = {V, C};
    oj_tensor *xe = oj_set_requires_grad(nt_rand(eng, 2, e2, OJ_F32, -1, 1), true);
    oj_tensor *we = oj_set_requires_grad(nt_rand(eng, 2, w2, OJ_F32, -1, 1), true);
    oj_tensor *te = oj_zeros(eng, 1, e1, OJ_I64);
    oj_tensor *ls = oj_linear_cross_entropy(xe, we, te, -100, 0.0, OJ_REDUCTION_SUM);
    if (ls == NULL)
        fail_msg("empty batch: %s", oj_last_error(eng));
    assert_true(oj_item(ls) == 0.0);
    assert_int_equal(oj_backward(ls, false), OJ_OK);
    oj_tensor *lm = oj_linear_cross_entropy(xe, we, te, -100, 0.0, OJ_REDUCTION_MEAN);
    assert_non_null(lm);
    assert_true(isnan(oj_item(lm)));
    /* errors */
    oj_tensor *x = nt_rand(eng, 2, (int64_t[]){N, C}, OJ_F32, -1, 1);
    oj_tensor *w = nt_rand(eng, 2, w2, OJ_F32, -1, 1);
    nt_expect_error(eng, oj_linear_cross_entropy(x, w, t, -100, NAN, OJ_REDUCTION_MEAN),
                    OJ_ERR_INVALID_ARGUMENT, "label_smoothing", NULL);
    nt_expect_error(eng, oj_linear_cross_entropy(x, w, t, -100, 1.5, OJ_REDUCTION_MEAN),
                    OJ_ERR_INVALID_ARGUMENT, "label_smoothing", NULL);
    nt_expect_error(eng, oj_linear_cross_entropy(x, w, t, -100, 0.0, OJ_REDUCTION_NONE),
                    OJ_ERR_INVALID_ARGUMENT, "reduction", NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, oj_cast(w, OJ_BF16), t, -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_DTYPE, "weight", NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, w, oj_cast(t, OJ_F32), -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_DTYPE, "targets", NULL);
    int64_t bad[4] = {1, 6, 0, 0};
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, w, oj_from_host(eng, 1, ts, OJ_I64, bad, sizeof bad),
                                            -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_OUT_OF_RANGE, NULL, NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, nt_rand(eng, 2, (int64_t[]){0, C}, OJ_F32, 0, 1), t,
                                            -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_SHAPE, NULL, NULL);
    nt_expect_error(eng,
                    oj_linear_cross_entropy(x, w, nt_rand(eng, 1, (int64_t[]){N + 1}, OJ_F32, 0, 1),
                                            -100, 0, OJ_REDUCTION_SUM),
                    OJ_ERR_DTYPE, NULL, NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
    unsetenv("OJAS_LCE_CHUNK_ROWS");
}

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

/* rank 2 and rank 5 inputs; f16 autocast; the same bits for 1, 2 and 3
 * threads (EXACT) */
static void test_nr_ranks_threads(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t s2[2] = {7, 6}, s5[5] = {2, 1, 3, 2, 4}, w6[1] = {6}, w4[1] = {4};
    check_nr(eng, "rank 2", nt_rand(eng, 2, s2, OJ_F32, -2, 2),
             nt_rand(eng, 1, w6, OJ_F32, .5, 1.5), EPS, 9, 0);
    check_nr(eng, "rank 5", nt_rand(eng, 5, s5, OJ_F64, -2, 2),
             nt_rand(eng, 1, w4, OJ_F64, .5, 1.5), EPS, 9, 0);
    oj_tensor *xh = nt_rand(eng, 2, s2, OJ_F16, -2, 2);
    oj_set_autocast(eng, true, OJ_F16);
    oj_tensor *y = oj_rms_norm_rotary(xh, NULL, EPS, 1, THETA), *r = unfused_nr(xh, NULL, EPS, 1);
    oj_set_autocast(eng, false, OJ_F16);
    close_to("f16 autocast", y, r, 0, 0);
    assert_int_equal(oj_tensor_dtype(y), OJ_F32);
    oj_scope_end(eng);
    nt_engine_done(eng);
    double *out[3], *dx[3];
    const int64_t xs[3] = {3, 37, 64};
    for (int t = 0; t < 3; t++) {
        oj_engine *e = NULL;
        oj_engine_config cfg = oj_engine_config_default();
        cfg.seed = 77;
        cfg.threads = t + 1;
        cfg.numerics = OJ_NUMERICS_EXACT;
        assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
        oj_scope_begin(e);
        oj_tensor *x = oj_set_requires_grad(nt_rand(e, 3, xs, OJ_F32, -2, 2), true);
        oj_tensor *yy = oj_rms_norm_rotary(heads(x, 4, 16), NULL, EPS, 3, THETA);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(yy, yy)), false), OJ_OK);
        out[t] = nt_host(yy);
        dx[t] = nt_host(oj_grad(x));
        oj_scope_end(e);
        nt_engine_done(e);
    }
    for (int t = 1; t < 3; t++) {
        assert_memory_equal(out[t], out[0], 3 * 37 * 64 * sizeof(double));
        assert_memory_equal(dx[t], dx[0], 3 * 37 * 64 * sizeof(double));
    }
    for (int t = 0; t < 3; t++) {
        free(out[t]);
        free(dx[t]);
    }
}

/* shared q/k/v gradients in every float dtype, with a mask, a scale, not
 * causal, T 1, H 1, against contiguous copies of q, k, v (the unshared
 * path) bit for bit; empty batch and empty T */
static void test_attn_shared_dtypes(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype dts[4] = {OJ_F32, OJ_F64, OJ_BF16, OJ_F16};
    const int64_t geo[3][4] = {{2, 5, 3, 4}, {1, 1, 2, 8}, {2, 6, 1, 5}}; /* B T H D */
    for (int k = 0; k < 4; k++)
        for (int gi = 0; gi < 3; gi++)
            for (int m = 0; m < 2; m++) { /* 0 causal, 1 bool mask + scale 0.3 */
                oj_scope_begin(eng);
                const int64_t B = geo[gi][0], T = geo[gi][1], H = geo[gi][2], D = geo[gi][3];
                int64_t xs[3] = {B, T, 3 * H * D}, gs[4] = {B, H, T, D};
                oj_tensor *x0 = nt_rand(eng, 3, xs, dts[k], -1, 1);
                oj_tensor *g = nt_rand(eng, 4, gs, dts[k], -1, 1);
                oj_tensor *mask = NULL;
                if (m) {
                    int64_t ms[2] = {T, T};
                    mask = oj_gt(nt_rand(eng, 2, ms, OJ_F32, 0, 1), oj_scalar(eng, 0.3, OJ_F32));
                }
                const int ord[3] = {0, 1, 2};
                oj_tensor *gx[2], *y[2];
                for (int c = 0; c < 2; c++) {
                    oj_tensor *x = oj_set_requires_grad(oj_clone(x0), true), *h[3];
                    qkv_heads(x, H, D, ord, h);
                    if (c)
                        for (int j = 0; j < 3; j++)
                            h[j] = oj_mul(h[j], oj_scalar(eng, 1.0, dts[k]));
                    y[c] =
                        oj_scaled_dot_product_attention(h[0], h[1], h[2], mask, !m, m ? 0.3 : NAN);
                    if (y[c] == NULL)
                        fail_msg("%s", oj_last_error(eng));
                    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[c], g)), false), OJ_OK);
                    gx[c] = oj_grad(x);
                }
                char what[96];
                snprintf(what, sizeof what, "%s geo %d mode %d", oj_dtype_name(dts[k]), gi, m);
                close_to(what, y[0], y[1], 0, 0);
                close_to(what, gx[0], gx[1], 0, 0);
                oj_scope_end(eng);
            }
    /* empty */
    oj_scope_begin(eng);
    const int64_t es[2][3] = {{0, 4, 3 * 2 * 2}, {2, 0, 3 * 2 * 2}};
    for (int e = 0; e < 2; e++) {
        const int ord[3] = {0, 1, 2};
        oj_tensor *x = oj_set_requires_grad(nt_rand(eng, 3, es[e], OJ_F32, -1, 1), true), *h[3];
        qkv_heads(x, 2, 2, ord, h);
        oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, true, NAN);
        if (y == NULL)
            fail_msg("empty %d: %s", e, oj_last_error(eng));
        assert_int_equal(oj_numel(y), 0);
        assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        assert_non_null(oj_grad(x));
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ---------------------------------------------------------------- add + norm */

/* the public add + norm ops with mixed-dtype x and r (norm_backward_add's
 * low input either one, or neither low), every subset of inputs needing a
 * gradient, s used again or not: bit for bit against add then the norm */
static void test_add_norm_mixed(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype pairs[5][2] = {{OJ_BF16, OJ_F32},
                                  {OJ_F32, OJ_BF16},
                                  {OJ_BF16, OJ_F16},
                                  {OJ_F16, OJ_F32},
                                  {OJ_F32, OJ_F32}};
    int64_t xs[2] = {3, 20}, cs[1] = {20};
    for (int p = 0; p < 5; p++)
        for (int rms = 0; rms < 2; rms++)
            for (int need = 1; need < 8; need++) /* bit 0 x, 1 r, 2 weight */
                for (int use = 0; use < 2; use++) {
                    oj_scope_begin(eng);
                    oj_tensor *x0 = nt_rand(eng, 2, xs, pairs[p][0], -2, 2);
                    oj_tensor *r0 = nt_rand(eng, 2, xs, pairs[p][1], -2, 2);
                    oj_dtype sdt = oj_tensor_dtype(oj_add(x0, r0));
                    oj_tensor *w0 = nt_rand(eng, 1, cs, sdt, 0.5, 1.5);
                    oj_tensor *g1 = nt_rand(eng, 2, xs, sdt, -1, 1);
                    oj_tensor *gr[2][3];
                    for (int f = 0; f < 2; f++) {
                        oj_tensor *x = oj_set_requires_grad(oj_clone(x0), need & 1);
                        oj_tensor *r = oj_set_requires_grad(oj_clone(r0), (need & 2) != 0);
                        oj_tensor *w = oj_set_requires_grad(oj_clone(w0), (need & 4) != 0);
                        oj_tensor *sum = NULL, *y;
                        if (f) {
                            y = rms ? oj_add_rms_norm(x, r, w, 1e-5, &sum)
                                    : oj_add_layer_norm(x, r, w, NULL, 1e-5, &sum);
                        } else {
                            sum = oj_add(x, r);
                            y = rms ? oj_rms_norm(sum, w, 1e-5) : oj_layer_norm(sum, w, NULL, 1e-5);
                        }
                        if (y == NULL)
                            fail_msg("%s", oj_last_error(eng));
                        oj_tensor *l = oj_sum_all(oj_mul(y, g1));
                        if (use)
                            l = oj_add(l, oj_sum_all(oj_mul(sum, sum)));
                        assert_int_equal(oj_backward(l, false), OJ_OK);
                        gr[f][0] = oj_grad(x);
                        gr[f][1] = oj_grad(r);
                        gr[f][2] = oj_grad(w);
                    }
                    for (int i = 0; i < 3; i++) {
                        char what[96];
                        snprintf(what, sizeof what, "pair %d rms %d need %d use %d grad %d", p, rms,
                                 need, use, i);
                        if (!(need >> i & 1)) {
                            assert_null(gr[1][i]);
                            continue;
                        }
                        if (gr[1][i] == NULL || gr[0][i] == NULL)
                            fail_msg("%s: no gradient", what);
                        assert_int_equal(oj_tensor_dtype(gr[1][i]), oj_tensor_dtype(gr[0][i]));
                        close_to(what, gr[1][i], gr[0][i], 0, 0);
                    }
                    oj_scope_end(eng);
                }
    nt_engine_done(eng);
}

/* grouped-query attention with T < S (a KV cache's bottom-right causal
 * mask) in f32 and f64: values and q/k/v gradients against the
 * composition on k, v repeated per query head */
static void test_attn_gqa(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const oj_dtype dts[2] = {OJ_F32, OJ_F64};
    for (int k = 0; k < 2; k++) {
        oj_scope_begin(eng);
        const int64_t B = 2, H = 4, Hkv = 2, T = 3, S = 7, D = 5;
        int64_t qs[4] = {B, T, H, D}, ks[4] = {B, Hkv, S, D}, gs[4] = {B, H, T, D};
        oj_tensor *q0 = nt_rand(eng, 4, qs, dts[k], -1, 1),
                  *k0 = nt_rand(eng, 4, ks, dts[k], -1, 1);
        oj_tensor *v0 = nt_rand(eng, 4, ks, dts[k], -1, 1), *g = nt_rand(eng, 4, gs, dts[k], -1, 1);
        oj_tensor *y[2], *gr[2][3];
        for (int f = 0; f < 2; f++) {
            oj_tensor *ql = oj_set_requires_grad(oj_clone(q0), true);
            oj_tensor *kl = oj_set_requires_grad(oj_clone(k0), true);
            oj_tensor *vl = oj_set_requires_grad(oj_clone(v0), true);
            oj_tensor *q = oj_transpose(ql, 1, 2);
            if (f) {
                y[f] = oj_scaled_dot_product_attention(q, kl, vl, NULL, true, NAN);
            } else {
                int64_t e5[5] = {B, Hkv, H / Hkv, S, D}, r4[4] = {B, H, S, D};
                oj_tensor *kr = oj_reshape(oj_expand(oj_unsqueeze(kl, 2), 5, e5), 4, r4);
                oj_tensor *vr = oj_reshape(oj_expand(oj_unsqueeze(vl, 2), 5, e5), 4, r4);
                y[f] = ref_attn(q, kr, vr);
            }
            if (y[f] == NULL)
                fail_msg("%s", oj_last_error(eng));
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[f], g)), false), OJ_OK);
            gr[f][0] = oj_grad(ql);
            gr[f][1] = oj_grad(kl);
            gr[f][2] = oj_grad(vl);
        }
        double tol = k ? 1e-12 : 1e-5;
        close_to("gqa y", y[1], y[0], tol, tol);
        for (int i = 0; i < 3; i++)
            close_to("gqa grad", gr[1][i], gr[0][i], tol, tol);
        oj_scope_end(eng);
    }
    nt_engine_done(eng);
}

/* the split's backward view when the pieces' gradients come side by side
 * from a cat's backward (not attention): values, and no aliasing between
 * the leaf's gradient and another leaf's that shared the seed */
static void test_split_cat_view(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {3, 6};
    for (int order = 0; order < 2; order++) {
        oj_tensor *x = nt_leaf(eng, 2, xs, -1, 1), *a = nt_leaf(eng, 2, xs, -1, 1);
        oj_tensor *p[3] = {NULL, NULL, NULL};
        assert_int_equal(oj_split(x, 2, 1, 3, p), 3);
        oj_tensor *q[3] = {order ? p[2] : p[0], p[1], order ? p[0] : p[2]};
        oj_tensor *z = oj_add(oj_cat(3, q, 1), a);
        oj_tensor *l = oj_add(oj_sum_all(z), oj_sum_all(oj_mul(x, x)));
        assert_int_equal(oj_backward(l, false), OJ_OK);
        /* d/dx = 1 + 2 x, d/da = 1 */
        oj_tensor *want = oj_add_scalar(oj_mul_scalar(x, 2.0), 1.0);
        close_to("split/cat dx", oj_grad(x), want, 1e-14, 1e-14);
        assert_int_equal(oj_mul_scalar_(oj_grad(a), 5.0), OJ_OK);
        close_to("dx unchanged by a.grad", oj_grad(x), want, 1e-14, 1e-14);
        close_to("da", oj_grad(a), oj_full(eng, 2, xs, OJ_F64, 5.0), 0, 0);
        for (int j = 0; j < 3; j++)
            oj_release(p[j]);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* ---------------------------------------------------------------- out of memory */

/* Runs case k's forward and backward on the leaves in[]; false when a step
 * failed (the error left recorded). */
typedef bool (*oom_case)(oj_engine *eng, oj_tensor **in, int k);

static bool oom_nr(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    oj_tensor *y = oj_rms_norm_rotary(heads(in[0], 2, 8), k ? in[1] : NULL, EPS, 3, THETA);
    return y && oj_backward(oj_sum_all(oj_mul(y, y)), false) == OJ_OK;
}

static bool oom_attn(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    const int ord[3] = {0, 1, 2};
    oj_tensor *h[3] = {NULL, NULL, NULL};
    oj_tensor *p[3] = {NULL, NULL, NULL};
    if (oj_split(in[0], 8, 2, 3, p) != 3)
        return false;
    (void)ord;
    int64_t s4[4] = {2, 5, 2, 4};
    for (int j = 0; j < 3; j++) {
        oj_tensor *r = oj_reshape(p[j], 4, s4);
        h[j] = r ? oj_transpose(r, 1, 2) : NULL;
        if (h[j] == NULL)
            return false;
    }
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, k == 0, NAN);
    return y && oj_backward(oj_sum_all(oj_mul(y, y)), false) == OJ_OK;
}

static bool oom_lce(oj_engine *eng, oj_tensor **in, int k) {
    int64_t tg[10] = {1, 2, -100, 0, 6, 3, 3, 1, 0, 2}, ts[1] = {10};
    oj_tensor *t = oj_from_host(eng, 1, ts, OJ_I64, tg, sizeof tg);
    if (t == NULL)
        return false;
    oj_tensor *x = k ? oj_cast(in[0], OJ_BF16) : in[0], *w = k ? oj_cast(in[1], OJ_BF16) : in[1];
    oj_tensor *l = x && w ? oj_linear_cross_entropy(x, w, t, -100, 0.1, OJ_REDUCTION_MEAN) : NULL;
    return l && oj_backward(l, false) == OJ_OK;
}

static bool oom_swiglu(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    oj_tensor *g = oj_narrow(in[0], 1, 0, 8), *u = oj_narrow(in[0], 1, 8, 8);
    oj_tensor *y = g && u ? oj_swiglu_linear(g, u, in[1], k ? in[2] : NULL) : NULL;
    return y && oj_backward(oj_sum_all(oj_mul(y, y)), false) == OJ_OK;
}

static bool oom_addnorm(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    oj_tensor *r = oj_cast(in[1], OJ_BF16), *sum = NULL;
    oj_tensor *y = r ? (k ? oj__add_rms_norm_to(in[0], r, in[2], 1e-5, &sum, OJ_BF16)
                          : oj__add_layer_norm_to(in[0], r, in[2], NULL, 1e-5, &sum, OJ_BF16))
                     : NULL;
    if (y == NULL)
        return false;
    oj_tensor *l = oj_add(oj_cast(oj_sum_all(y), OJ_F32), oj_sum_all(oj_mul(sum, sum)));
    return l && oj_backward(l, false) == OJ_OK;
}

/* Every byte budget from 0 up to the one the case fits in: a failure is
 * OJ_ERR_CAPACITY, and nothing leaks (tensors, budget bytes). */
static void oom_sweep(const char *what, oom_case fn, int k, int nin, const int64_t shapes[][3],
                      const int *ranks) {
    oj_engine *eng = nt_engine();
    oj_tensor *in[3];
    for (int i = 0; i < nin; i++)
        in[i] = oj_set_requires_grad(nt_rand(eng, ranks[i], shapes[i], OJ_F32, -1, 1), true);
    int64_t live = oj_engine_live_tensors(eng);
    bool done = false;
    int fails = 0;
    for (int64_t lim = 0; !done && lim < (1 << 22); lim += lim < 16384 ? 16 : lim / 16) {
        oj_budget *b = oj_budget_create(oj_engine_budget(eng), "sweep", lim);
        assert_non_null(b);
        oj_engine_use_budget(eng, b);
        oj_scope_begin(eng);
        done = fn(eng, in, k);
        if (!done) {
            fails++;
            if (oj_last_status(eng) != OJ_ERR_CAPACITY)
                fail_msg("%s (%d) at %lld bytes: %s: %s", what, k, (long long)lim,
                         oj_status_name(oj_last_status(eng)), oj_last_error(eng));
            oj_clear_error(eng);
        }
        oj_scope_end(eng);
        for (int i = 0; i < nin; i++)
            oj_zero_grad(in[i]);
        oj_engine_use_budget(eng, NULL);
        if (oj_budget_current(b) != 0)
            fail_msg("%s (%d) at %lld bytes: %lld bytes left charged", what, k, (long long)lim,
                     (long long)oj_budget_current(b));
        assert_int_equal(oj_budget_free(b), OJ_OK);
        if (oj_engine_live_tensors(eng) != live)
            fail_msg("%s (%d) at %lld bytes: %lld tensors leaked", what, k, (long long)lim,
                     (long long)(oj_engine_live_tensors(eng) - live));
    }
    if (!done)
        fail_msg("%s (%d): never fit", what, k);
    if (getenv("OJAS_ADV_VERBOSE"))
        printf("%s (%d): %d failing budgets\n", what, k, fails);
    for (int i = 0; i < nin; i++)
        oj_release(in[i]);
    nt_engine_done(eng);
}

static void test_out_of_memory(void **state) {
    (void)state;
    const int64_t nr[2][3] = {{2, 5, 16}, {8}}, at[1][3] = {{2, 5, 24}};
    const int64_t lce[2][3] = {{10, 6}, {7, 6}}, sw[3][3] = {{4, 16}, {3, 8}, {3}};
    const int64_t an[3][3] = {{4, 12}, {4, 12}, {12}};
    const int r31[2] = {3, 1}, r3[1] = {3}, r22[2] = {2, 2}, r221[3] = {2, 2, 1};
    for (int k = 0; k < 2; k++) {
        oom_sweep("rms_norm_rotary", oom_nr, k, 2, nr, r31);
        oom_sweep("attention", oom_attn, k, 1, at, r3);
        oom_sweep("linear_cross_entropy", oom_lce, k, 2, lce, r22);
        oom_sweep("swiglu_linear", oom_swiglu, k, 3, sw, r221);
        oom_sweep("add norm to bf16", oom_addnorm, k, 3, an, r221);
    }
}

/* x and weight views of one leaf: the two gradients summed into it */
static void test_nr_weight_aliases_x(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t as[2] = {1, 8}, ws[1] = {8};
    oj_tensor *a0 = nt_rand(eng, 2, as, OJ_F64, 0.5, 1.5), *g[2];
    for (int f = 0; f < 2; f++) {
        oj_tensor *a = oj_set_requires_grad(oj_clone(a0), true);
        oj_tensor *w = oj_reshape(a, 1, ws);
        oj_tensor *y = f ? oj_rms_norm_rotary(a, w, EPS, 2, THETA) : unfused_nr(a, w, EPS, 2);
        assert_non_null(y);
        assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, y)), false), OJ_OK);
        g[f] = oj_grad(a);
    }
    close_to("aliased weight", g[1], g[0], 0, 0);
    oj_scope_end(eng);
    nt_engine_done(eng);
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

/* linear_cross_entropy in bf16 under EXACT numerics: the same bits for
 * 1, 2 and 3 threads and chunks of 1 and 3 rows equal to each other in
 * the loss (the dW sums run in the matmul kernel's f32 accumulation) */
static void test_lce_exact_threads(void **state) {
    (void)state;
    double ref[3] = {0, 0, 0};
    for (int t = 0; t < 3; t++) {
        oj_engine *e = NULL;
        oj_engine_config cfg = oj_engine_config_default();
        cfg.seed = 9;
        cfg.threads = t + 1;
        cfg.numerics = OJ_NUMERICS_EXACT;
        assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
        oj_scope_begin(e);
        int64_t xs[2] = {33, 40}, ws[2] = {77, 40}, ts[1] = {33}, tg[33];
        for (int i = 0; i < 33; i++)
            tg[i] = i % 5 == 0 ? -100 : (i * 13) % 77;
        oj_tensor *x = oj_set_requires_grad(nt_rand(e, 2, xs, OJ_BF16, -2, 2), true);
        oj_tensor *w = oj_set_requires_grad(nt_rand(e, 2, ws, OJ_BF16, -1, 1), true);
        oj_tensor *tt = oj_from_host(e, 1, ts, OJ_I64, tg, sizeof tg);
        setenv("OJAS_LCE_CHUNK_ROWS", "4", 1);
        oj_tensor *l = oj_linear_cross_entropy(x, w, tt, -100, 0.05, OJ_REDUCTION_MEAN);
        unsetenv("OJAS_LCE_CHUNK_ROWS");
        assert_non_null(l);
        assert_int_equal(oj_backward(l, false), OJ_OK);
        double *gx = nt_host(oj_grad(x)), *gw = nt_host(oj_grad(w));
        double sx = 0, sw = 0;
        for (int i = 0; i < 33 * 40; i++)
            sx += gx[i] * (i + 1);
        for (int i = 0; i < 77 * 40; i++)
            sw += gw[i] * (i + 1);
        free(gx);
        free(gw);
        double got[3] = {oj_item(l), sx, sw};
        if (t == 0)
            memcpy(ref, got, sizeof ref);
        for (int k = 0; k < 3; k++)
            if (memcmp(&got[k], &ref[k], sizeof(double)) != 0)
                fail_msg("threads %d: value %d %.17g vs %.17g", t + 1, k, got[k], ref[k]);
        oj_scope_end(e);
        nt_engine_done(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nr_empty),
        cmocka_unit_test(test_nr_errors),
        cmocka_unit_test(test_nr_values),
        cmocka_unit_test(test_nr_backward_twice),
        cmocka_unit_test(test_nr_inplace_after),
        cmocka_unit_test(test_nr_autocast),
        cmocka_unit_test(test_attn_output_use),
        cmocka_unit_test(test_attn_inplace_then_backward),
        cmocka_unit_test(test_attn_shared_grads),
        cmocka_unit_test(test_attn_grad_reuse),
        cmocka_unit_test(test_attn_other_tilings),
        cmocka_unit_test(test_swiglu_strided),
        cmocka_unit_test(test_lce_corners),
        cmocka_unit_test(test_lce_views_errors),
        cmocka_unit_test(test_gpt_autocast_grads),
        cmocka_unit_test(test_nr_ranks_threads),
        cmocka_unit_test(test_attn_shared_dtypes),
        cmocka_unit_test(test_add_norm_mixed),
        cmocka_unit_test(test_attn_gqa),
        cmocka_unit_test(test_split_cat_view),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_nr_weight_aliases_x),
        cmocka_unit_test(test_gpt_autocast_weight_dtypes),
        cmocka_unit_test(test_lce_exact_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
