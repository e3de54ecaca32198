// test: tensor creation, accessors, host transfers, clone, contiguous, copy_, fill_
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/core.h"
#include "ojas/ops.h"
#include "engine_testutil.h"

static void expect_f64(oj_tensor *t, const double *want, int64_t n) {
    assert_non_null(t);
    assert_int_equal(oj_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        double v = oj_item_at(t, i);
        if (isnan(want[i])) assert_true(isnan(v));
        else assert_true(v == want[i]);
    }
}

static void test_empty_zeros_ones_full(void **state) {
    (void)state;
    int64_t s[3] = {2, 3, 4};
    oj_tensor *z = oj_zeros(eng, 3, s, OJ_F32);
    assert_non_null(z);
    assert_int_equal(oj_rank(z), 3);
    assert_int_equal(oj_size(z, 0), 2);
    assert_int_equal(oj_size(z, -1), 4);
    assert_int_equal(oj_size(z, 3), -1);
    assert_int_equal(oj_size(z, -4), -1);
    assert_int_equal(oj_numel(z), 24);
    assert_int_equal(oj_strides(z)[0], 12);
    assert_int_equal(oj_strides(z)[1], 4);
    assert_int_equal(oj_strides(z)[2], 1);
    assert_true(oj_is_contiguous(z));
    assert_int_equal(oj_tensor_dtype(z), OJ_F32);
    assert_int_equal(oj_tensor_device(z).type, OJ_DEVICE_CPU);
    assert_ptr_equal(oj_tensor_engine(z), eng);
    assert_int_equal(oj_offset_bytes(z), 0);
    assert_true(((uintptr_t)oj_data_ptr(z) & 63) == 0);
    char buf[64];
    assert_string_equal(oj_shape_str(z, buf, sizeof buf), "[2, 3, 4]");
    float out[24];
    assert_int_equal(oj_to_host(z, out, sizeof out), OJ_OK);
    for (int i = 0; i < 24; i++) assert_true(out[i] == 0.0f);

    oj_tensor *o = oj_ones(eng, 3, s, OJ_BF16);
    for (int i = 0; i < 24; i++) assert_true(oj_item_at(o, i) == 1.0);
    oj_tensor *f = oj_full(eng, 2, s, OJ_I32, -7.9);
    for (int i = 0; i < 6; i++) assert_true(oj_item_at(f, i) == -7.0); /* truncation */
    oj_tensor *b = oj_full(eng, 1, s, OJ_BOOL, 0.5);
    assert_true(oj_item_at(b, 1) == 1.0);
    oj_tensor *sc = oj_scalar(eng, 2.5, OJ_F64);
    assert_int_equal(oj_rank(sc), 0);
    assert_int_equal(oj_numel(sc), 1);
    assert_true(oj_item(sc) == 2.5);
    oj_tensor *e = oj_empty(eng, 3, s, OJ_U8);
    assert_non_null(e);
    int64_t zs[2] = {3, 0};
    oj_tensor *ze = oj_zeros(eng, 2, zs, OJ_F32);
    assert_non_null(ze);
    assert_int_equal(oj_numel(ze), 0);
    assert_int_equal(oj_to_host(ze, NULL, 0), OJ_OK);
}

static void test_arange_linspace_eye(void **state) {
    (void)state;
    oj_tensor *a = oj_arange(eng, 0, 5, 1, OJ_I64);
    expect_f64(a, (double[]){0, 1, 2, 3, 4}, 5);
    a = oj_arange(eng, 1, 2, 0.3, OJ_F64); /* ceil(1/0.3) = 4 */
    expect_f64(a, (double[]){1, 1.3, 1 + 2 * 0.3, 1 + 3 * 0.3}, 4);
    a = oj_arange(eng, 5, 0, -2, OJ_F32);
    expect_f64(a, (double[]){5, 3, 1}, 3);
    a = oj_arange(eng, 3, 3, 1, OJ_F32);
    assert_int_equal(oj_numel(a), 0);
    assert_null(oj_arange(eng, 0, 5, 0, OJ_F32));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_null(oj_arange(eng, 0, 5, -1, OJ_F32));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);

    oj_tensor *l = oj_linspace(eng, 0, 1, 5, OJ_F64);
    expect_f64(l, (double[]){0, 0.25, 0.5, 0.75, 1}, 5);
    /* f32 computes in f32 like torch: torch.linspace(-1, 1, 7) */
    l = oj_linspace(eng, -1, 1, 7, OJ_F32);
    float lv[7];
    assert_int_equal(oj_to_host(l, lv, sizeof lv), OJ_OK);
    const float step = 2.0f / 6.0f;
    assert_true(lv[0] == -1.0f && lv[6] == 1.0f);
    assert_true(lv[1] == -1.0f + step && lv[2] == -1.0f + 2 * step);
    assert_true(lv[5] == 1.0f - step && lv[3] == 1.0f - 3 * step);
    l = oj_linspace(eng, 3, 9, 1, OJ_F32);
    expect_f64(l, (double[]){3}, 1);
    l = oj_linspace(eng, 3, 9, 0, OJ_F32);
    assert_int_equal(oj_numel(l), 0);
    assert_null(oj_linspace(eng, 0, 1, -1, OJ_F32));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);

    oj_tensor *e = oj_eye(eng, 2, 3, OJ_F32);
    expect_f64(e, (double[]){1, 0, 0, 0, 1, 0}, 6);
    e = oj_eye(eng, 3, 2, OJ_I32);
    expect_f64(e, (double[]){1, 0, 0, 1, 0, 0}, 6);
}

static void test_from_to_host(void **state) {
    (void)state;
    int64_t s[2] = {2, 3};
    float v[6] = {1, 2, 3, 4, 5, 6};
    oj_tensor *t = oj_from_host(eng, 2, s, OJ_F32, v, sizeof v);
    assert_non_null(t);
    assert_ptr_not_equal(oj_data_ptr(t), v); /* copied */
    v[0] = 100;
    float out[6];
    assert_int_equal(oj_to_host(t, out, sizeof out), OJ_OK);
    assert_true(out[0] == 1 && out[5] == 6);
    /* size mismatches */
    assert_null(oj_from_host(eng, 2, s, OJ_F32, v, sizeof v - 4));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    assert_int_equal(oj_to_host(t, out, sizeof out + 4), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    assert_null(oj_from_host(eng, 2, s, OJ_F32, NULL, sizeof v));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    /* item */
    assert_true(isnan(oj_item(t)));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    assert_true(isnan(oj_item_at(t, 6)));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    /* i64 exact beyond 2^53 */
    int64_t big[2] = {INT64_MAX, INT64_MIN};
    int64_t n2 = 2;
    oj_tensor *bi = oj_from_host(eng, 1, &n2, OJ_I64, big, sizeof big);
    int64_t back[2];
    assert_int_equal(oj_to_host(bi, back, sizeof back), OJ_OK);
    assert_true(back[0] == INT64_MAX && back[1] == INT64_MIN);
}

static void test_clone_contiguous(void **state) {
    (void)state;
    int64_t s[2] = {2, 3};
    float v[6] = {1, 2, 3, 4, 5, 6};
    oj_tensor *t = oj_from_host(eng, 2, s, OJ_F32, v, sizeof v);
    oj_tensor *c = oj_clone(t);
    assert_non_null(c);
    assert_false(oj_shares_storage(t, c));
    expect_f64(c, (double[]){1, 2, 3, 4, 5, 6}, 6);
    oj_tensor *same = oj_contiguous(t);
    assert_true(oj_shares_storage(t, same));
    oj_tensor *tr = oj_transpose(t, 0, 1); /* [3, 2] strides (1, 3) */
    assert_false(oj_is_contiguous(tr));
    expect_f64(tr, (double[]){1, 4, 2, 5, 3, 6}, 6);
    oj_tensor *ct = oj_contiguous(tr);
    assert_true(oj_is_contiguous(ct));
    assert_false(oj_shares_storage(tr, ct));
    float out[6];
    assert_int_equal(oj_to_host(ct, out, sizeof out), OJ_OK);
    assert_true(out[0] == 1 && out[1] == 4 && out[2] == 2 && out[3] == 5 && out[4] == 3 &&
                out[5] == 6);
    oj_tensor *cl = oj_clone(tr);
    assert_int_equal(oj_size(cl, 0), 3);
    assert_true(oj_is_contiguous(cl));
    expect_f64(cl, (double[]){1, 4, 2, 5, 3, 6}, 6);
}

static void test_copy_broadcast_cast(void **state) {
    (void)state;
    int64_t s[2] = {2, 3};
    oj_tensor *dst = oj_zeros(eng, 2, s, OJ_F32);
    int32_t row[3] = {7, -8, 9};
    int64_t n3 = 3;
    oj_tensor *src = oj_from_host(eng, 1, &n3, OJ_I32, row, sizeof row);
    uint64_t v0 = oj_version(dst);
    assert_int_equal(oj_copy_(dst, src), OJ_OK);
    assert_true(oj_version(dst) > v0);
    expect_f64(dst, (double[]){7, -8, 9, 7, -8, 9}, 6);
    /* column broadcast [2, 1] -> [2, 3], f64 -> f32 */
    double col[2] = {0.5, -1.25};
    int64_t cs[2] = {2, 1};
    oj_tensor *c = oj_from_host(eng, 2, cs, OJ_F64, col, sizeof col);
    assert_int_equal(oj_copy_(dst, c), OJ_OK);
    expect_f64(dst, (double[]){0.5, 0.5, 0.5, -1.25, -1.25, -1.25}, 6);
    /* into a strided view (transpose) */
    oj_tensor *dt = oj_transpose(dst, 0, 1); /* [3, 2] */
    double m[6] = {1, 2, 3, 4, 5, 6};
    int64_t ms[2] = {3, 2};
    oj_tensor *mm = oj_from_host(eng, 2, ms, OJ_F64, m, sizeof m);
    assert_int_equal(oj_copy_(dt, mm), OJ_OK);
    expect_f64(dst, (double[]){1, 3, 5, 2, 4, 6}, 6);
    /* float -> int truncates, -> bool is != 0 */
    oj_tensor *bi = oj_zeros(eng, 2, s, OJ_BOOL);
    double bz[3] = {0, -0.5, NAN};
    oj_tensor *bsrc = oj_from_host(eng, 1, &n3, OJ_F64, bz, sizeof bz);
    assert_int_equal(oj_copy_(bi, bsrc), OJ_OK);
    expect_f64(bi, (double[]){0, 1, 1, 0, 1, 1}, 6);
    /* shape mismatch */
    int64_t n4 = 4;
    oj_tensor *bad = oj_zeros(eng, 1, &n4, OJ_F32);
    assert_int_equal(oj_copy_(dst, bad), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "[4]"));
    assert_non_null(strstr(oj_last_error(eng), "[2, 3]"));
    oj_clear_error(eng);
    /* overlapping copy within one storage: shift a row right by one */
    oj_tensor *ar = oj_arange(eng, 0, 6, 1, OJ_F32);
    oj_tensor *hi = oj_narrow(ar, 0, 1, 5), *lo = oj_narrow(ar, 0, 0, 5);
    assert_int_equal(oj_copy_(hi, lo), OJ_OK);
    expect_f64(ar, (double[]){0, 0, 1, 2, 3, 4}, 6);
    /* expanded destination is refused */
    int64_t one = 1;
    oj_tensor *o1 = oj_zeros(eng, 1, &one, OJ_F32);
    oj_tensor *ex = oj_expand(o1, 1, &n3);
    assert_int_equal(oj_copy_(ex, src), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
}

static void test_fill(void **state) {
    (void)state;
    int64_t s[2] = {3, 4};
    oj_tensor *t = oj_zeros(eng, 2, s, OJ_F16);
    oj_tensor *col = oj_select(t, 1, 2);
    assert_int_equal(oj_fill_(col, 1.5), OJ_OK);
    for (int i = 0; i < 12; i++) assert_true(oj_item_at(t, i) == (i % 4 == 2 ? 1.5 : 0.0));
    assert_int_equal(oj_fill_(t, -2), OJ_OK);
    for (int i = 0; i < 12; i++) assert_true(oj_item_at(t, i) == -2.0);
}

static void test_grad_fields(void **state) {
    (void)state;
    int64_t n = 3;
    oj_tensor *f = oj_zeros(eng, 1, &n, OJ_F32);
    assert_false(oj_requires_grad(f));
    assert_ptr_equal(oj_set_requires_grad(f, true), f);
    assert_true(oj_requires_grad(f));
    assert_null(oj_grad(f));
    oj_zero_grad(f);
    oj_tensor *i = oj_zeros(eng, 1, &n, OJ_I64);
    assert_null(oj_set_requires_grad(i, true));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);
}

// test: oj_set_data swaps a leaf's data (dtype, shape) keeping the handle; refuses non-leaves, saved tensors, other engines' data
static void test_set_data(void **state) {
    (void)state;
    int64_t n = 3, s2[2] = {2, 2};
    double v3[3] = {1.5, -2.25, 3.0}, v4[4] = {1, 2, 3, 4};
    oj_tensor *p = oj_set_requires_grad(oj_full(eng, 1, &n, OJ_F32, 7.0), true);
    oj_tensor *b = oj_cast(oj_from_host(eng, 1, &n, OJ_F64, v3, sizeof v3), OJ_BF16);
    assert_non_null(b);
    /* a gradient of the old dtype is dropped */
    oj_tensor *pp = oj_mul(p, p), *loss = oj_sum(pp, 0, NULL, false);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    assert_non_null(oj_grad(p));
    oj_release(loss); /* the recorded nodes go with their outputs */
    oj_release(pp);
    assert_int_equal(oj_set_data(p, b), OJ_OK);
    assert_int_equal(oj_tensor_dtype(p), OJ_BF16);
    assert_true(oj_shares_storage(p, b));
    assert_null(oj_grad(p));
    assert_true(oj_requires_grad(p));
    expect_f64(p, v3, 3);
    /* a new shape */
    oj_tensor *q = oj_from_host(eng, 2, s2, OJ_F64, v4, sizeof v4);
    assert_int_equal(oj_set_data(p, q), OJ_OK);
    assert_int_equal(oj_rank(p), 2);
    expect_f64(p, v4, 4);
    /* a non-leaf */
    oj_tensor *y = oj_mul_scalar(p, 2.0);
    assert_int_equal(oj_set_data(y, q), OJ_ERR_STATE);
    oj_clear_error(eng);
    /* saved by a recorded node: refused, unchanged */
    oj_tensor *sq = oj_mul(p, p);
    assert_int_equal(oj_set_data(p, b), OJ_ERR_STATE);
    assert_int_equal(oj_tensor_dtype(p), OJ_F64);
    oj_clear_error(eng);
    oj_release(sq);
    oj_release(y);
    /* an integer src for a tensor requiring grad */
    oj_tensor *iz = oj_zeros(eng, 1, &n, OJ_I64);
    assert_int_equal(oj_set_data(p, iz), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    /* another engine's src */
    oj_engine *e2 = NULL;
    oj_engine_config c = oj_engine_config_default();
    assert_int_equal(oj_engine_create(&c, &e2, NULL), OJ_OK);
    oj_tensor *o = oj_zeros(e2, 1, &n, OJ_F32);
    assert_int_equal(oj_set_data(p, o), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    oj_engine_free(e2);
    assert_int_equal(oj_set_data(NULL, b), OJ_ERR_INVALID_ARGUMENT);
}

/* ---- oj_set_data's storage accounting */

/* sum(p * p) backward: p's gradient 2 p. */
static void grad_of_square(oj_tensor *p) {
    oj_scope_begin(eng);
    oj_tensor *y = oj_sum(oj_mul(p, p), 0, NULL, false);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    oj_scope_end(eng);
}

/* The storage accounting of oj_set_data. The old storage goes when its
 * last handle does, src's is shared (retained once), nothing is charged
 * twice; t = src, a view of t itself and a 0-element src work; NULL and
 * released tensors are refused with t unchanged. */
static void test_set_data_accounting(void **state) {
    (void)state;
    const int64_t live0 = oj_engine_live_tensors(eng), mem0 = oj_engine_memory_allocated(eng);
    int64_t n = 1000, m = 10, z[2] = {0, 3};
    oj_tensor *p = oj_set_requires_grad(oj_full(eng, 1, &n, OJ_F32, 1.0), true);
    const int64_t mem_p = oj_engine_memory_allocated(eng) - mem0;
    oj_tensor *src = oj_full(eng, 1, &m, OJ_F32, 2.0);
    const int64_t mem_src = oj_engine_memory_allocated(eng) - mem0 - mem_p;
    assert_int_equal(oj_set_data(p, src), OJ_OK);
    assert_int_equal(oj_engine_memory_allocated(eng) - mem0, mem_src); /* p's old storage freed */
    oj_release(src);
    assert_int_equal(oj_engine_memory_allocated(eng) - mem0, mem_src); /* still held by p */
    assert_true(oj_item_at(p, 9) == 2.0);
    assert_int_equal(oj_set_data(p, p), OJ_OK);
    assert_int_equal(oj_numel(p), m);
    /* a view of p's own storage (made with grad mode on, its node holds p:
     * refused; made without, it goes through) */
    oj_tensor *v = oj_narrow(p, 0, 2, 3);
    assert_int_equal(oj_set_data(p, v), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "saved by 1 recorded autograd node");
    oj_release(v);
    bool prev = oj_set_grad_enabled(eng, false);
    v = oj_narrow(p, 0, 2, 3);
    oj_set_grad_enabled(eng, prev);
    assert_int_equal(oj_set_data(p, v), OJ_OK);
    oj_release(v);
    assert_int_equal(oj_numel(p), 3);
    assert_int_equal(oj_engine_memory_allocated(eng) - mem0, mem_src);
    grad_of_square(p);
    assert_true(oj_item_at(oj_grad(p), 0) == 4.0);
    /* NULL, released: refused, p unchanged */
    assert_int_equal(oj_set_data(p, NULL), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "set_data: src is NULL");
    oj_tensor *dead = oj_full(eng, 1, &m, OJ_F32, 3.0);
    oj_release(dead);
    assert_int_equal(oj_set_data(p, dead), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "src is a released tensor");
    assert_int_equal(oj_numel(p), 3);
    /* 0 elements: the gradient of another shape is dropped */
    oj_tensor *e = oj_zeros(eng, 2, z, OJ_F32);
    assert_int_equal(oj_set_data(p, e), OJ_OK);
    oj_release(e);
    assert_null(oj_grad(p));
    grad_of_square(p);
    assert_int_equal(oj_numel(oj_grad(p)), 0);
    oj_release(p);
    assert_int_equal(oj_set_data(p, p), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "tensor is a released tensor");
    assert_int_equal(oj_engine_live_tensors(eng), live0);
    assert_int_equal(oj_engine_memory_allocated(eng), mem0);
}

static int external_released;
static void count_release(void *ctx) { external_released += *(int *)ctx; }

static void test_from_external(void **state) {
    (void)state;
    int64_t live0 = oj_engine_live_tensors(eng), mem0 = oj_engine_memory_allocated(eng);
    float buf[6] = {0, 1, 2, 3, 4, 5};
    int one = 1;
    external_released = 0;
    /* a transposed [3, 2] view of a row-major [2, 3] buffer, shared not copied */
    int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
    oj_tensor *t = oj_from_external(eng, buf, 2, shape, strides, OJ_F32, count_release, &one);
    assert_non_null(t);
    assert_ptr_equal(oj_data_ptr(t), buf);
    assert_ptr_equal(oj_device_data_ptr(t), buf);
    assert_false(oj_is_contiguous(t));
    assert_true(oj_item_at(t, 1) == 3.0); /* t[0, 1] = buf[3] */
    assert_int_equal(oj_engine_memory_allocated(eng), mem0); /* not charged */
    oj_tensor *v = oj_select(t, 1, 1);                    /* a view keeps the memory */
    oj_release(t);
    assert_int_equal(external_released, 0);
    buf[4] = 40;
    assert_true(oj_item_at(v, 1) == 40.0);
    oj_release(v);
    assert_int_equal(external_released, 1);
    /* contiguous strides (NULL) and an empty shape with NULL data */
    int64_t e[1] = {0};
    oj_tensor *z = oj_from_external(eng, NULL, 1, e, NULL, OJ_F32, NULL, NULL);
    assert_non_null(z);
    oj_release(z);
    /* an empty [0, 3] with the strides numpy and torch give it (3, 1): a dim
     * of 0 is no overflow of the strides */
    int64_t e03[2] = {0, 3}, s03[2] = {3, 1};
    z = oj_from_external(eng, buf, 2, e03, s03, OJ_F32, NULL, NULL);
    assert_non_null(z);
    assert_int_equal(oj_numel(z), 0);
    oj_release(z);
    /* bad input: no release call, the error names what was wrong */
    int64_t neg[2] = {3, -1};
    assert_null(oj_from_external(eng, buf, 2, shape, neg, OJ_F32, count_release, &one));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "stride -1 of dim 1 is negative");
    assert_null(oj_from_external(eng, NULL, 2, shape, NULL, OJ_F32, count_release, &one));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "data is NULL");
    assert_null(oj_from_external(eng, buf, 9, shape, NULL, OJ_F32, count_release, &one));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "invalid shape");
    assert_null(oj_from_external(eng, buf, 2, shape, NULL, OJ_DTYPE_COUNT, count_release, &one));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "invalid dtype");
    assert_int_equal(external_released, 1);
    assert_int_equal(oj_engine_live_tensors(eng), live0);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, et_scope_in, et_scope_out)
    const struct CMUnitTest tests[] = {
        T(test_empty_zeros_ones_full), T(test_arange_linspace_eye), T(test_from_to_host),
        T(test_clone_contiguous),      T(test_copy_broadcast_cast), T(test_fill),
        T(test_grad_fields),           T(test_set_data),             T(test_from_external),
        cmocka_unit_test_setup_teardown(test_set_data_accounting, et_clear, et_clear),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown_no_leaks);
}
