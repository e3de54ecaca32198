// test: bad input never crashes: NULL handles, bad shapes, overflow,
// released tensors (quarantine), invalid dtypes
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/ops.h"
#include "engine_testutil.h"

static void test_shape_numel_overflow(void **state) {
    (void)state;
    int64_t n;
    assert_int_equal(oj_shape_numel(2, (int64_t[]){INT64_MAX, 2}, OJ_U8, &n), OJ_ERR_OUT_OF_RANGE);
    assert_int_equal(oj_shape_numel(3, (int64_t[]){1LL << 31, 1LL << 31, 4}, OJ_U8, &n),
                     OJ_ERR_OUT_OF_RANGE);
    /* element count fits, bytes do not */
    assert_int_equal(oj_shape_numel(1, (int64_t[]){1LL << 62}, OJ_U8, &n), OJ_OK);
    assert_int_equal(n, 1LL << 62);
    assert_int_equal(oj_shape_numel(1, (int64_t[]){1LL << 62}, OJ_F32, &n), OJ_ERR_OUT_OF_RANGE);
    assert_int_equal(oj_shape_numel(1, (int64_t[]){INT64_MAX / 8 + 1}, OJ_I64, &n),
                     OJ_ERR_OUT_OF_RANGE);
    /* a zero dim wins over an overflowing product */
    assert_int_equal(oj_shape_numel(3, (int64_t[]){INT64_MAX, INT64_MAX, 0}, OJ_F32, &n), OJ_OK);
    assert_int_equal(n, 0);
    assert_int_equal(oj_shape_numel(0, NULL, OJ_F32, &n), OJ_OK);
    assert_int_equal(n, 1);
    assert_int_equal(oj_shape_numel(2, (int64_t[]){3, -1}, OJ_F32, &n), OJ_ERR_SHAPE);
    assert_int_equal(oj_shape_numel(9, (int64_t[9]){1}, OJ_F32, &n), OJ_ERR_SHAPE);
    assert_int_equal(oj_shape_numel(-1, NULL, OJ_F32, &n), OJ_ERR_SHAPE);
    assert_int_equal(oj_shape_numel(1, (int64_t[]){3}, OJ_DTYPE_COUNT, &n), OJ_ERR_DTYPE);
    /* the same through creation */
    assert_null(oj_zeros(eng, 2, (int64_t[]){1LL << 40, 1LL << 40}, OJ_F32));
    ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "overflows");
    assert_null(oj_empty(eng, 1, (int64_t[]){1LL << 62}, OJ_F64));
    ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "[4611686018427387904]");
}

static void test_bad_shapes(void **state) {
    (void)state;
    assert_null(oj_zeros(eng, 2, (int64_t[]){2, -3}, OJ_F32));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "[2, -3]");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_null(oj_ones(eng, 9, nine, OJ_F32));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "rank");
    assert_null(oj_full(eng, -1, nine, OJ_F32, 1));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "rank");
    assert_null(oj_empty(eng, 2, NULL, OJ_F32));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_null(oj_zeros(eng, 1, (int64_t[]){3}, (oj_dtype)77));
    ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "dtype");
    assert_null(oj_eye(eng, -1, 2, OJ_F32));
    ET_EXPECT_ERR_HAS(OJ_ERR_SHAPE, "eye");
    assert_null(oj_zeros(NULL, 1, (int64_t[]){3}, OJ_F32));
    assert_null(oj_arange(NULL, 0, 1, 1, OJ_F32));
    assert_null(oj_arange(eng, 0, 1e30, 1e-30, OJ_F32));
    ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "arange");
}

static void test_null_handles(void **state) {
    (void)state;
    /* accessors */
    assert_null(oj_tensor_engine(NULL));
    assert_int_equal(oj_rank(NULL), -1);
    assert_int_equal(oj_size(NULL, 0), -1);
    assert_null(oj_shape(NULL));
    assert_null(oj_strides(NULL));
    assert_int_equal(oj_numel(NULL), 0);
    assert_false(oj_is_contiguous(NULL));
    assert_null(oj_data_ptr(NULL));
    assert_int_equal(oj_version(NULL), 0);
    oj_bump_version(NULL);
    assert_false(oj_shares_storage(NULL, NULL));
    char buf[32];
    assert_string_equal(oj_shape_str(NULL, buf, sizeof buf), "[null]");
    assert_false(oj_requires_grad(NULL));
    assert_null(oj_grad(NULL));
    oj_zero_grad(NULL);
    oj_release(NULL);
    /* operations */
    assert_null(oj_retain(NULL));
    assert_null(oj_clone(NULL));
    assert_null(oj_contiguous(NULL));
    assert_null(oj_keep(NULL));
    assert_null(oj_set_requires_grad(NULL, true));
    assert_int_equal(oj_to_host(NULL, buf, 4), OJ_ERR_INVALID_ARGUMENT);
    assert_true(isnan(oj_item(NULL)));
    assert_true(isnan(oj_item_at(NULL, 0)));
    assert_int_equal(oj_copy_(NULL, NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_fill_(NULL, 1), OJ_ERR_INVALID_ARGUMENT);
    assert_null(oj_tensor_to_string(NULL));
    assert_int_equal(oj_print(NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_null(oj_reshape(NULL, 1, (int64_t[]){1}));
    assert_null(oj_transpose(NULL, 0, 1));
    assert_null(oj_select(NULL, 0, 0));
    /* a NULL src with a live dst is recorded on dst's engine */
    oj_tensor *t = oj_zeros(eng, 1, (int64_t[]){2}, OJ_F32);
    assert_int_equal(oj_copy_(t, NULL), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "src is NULL");
    oj_release(t);
    /* engine-less calls */
    assert_int_equal(oj_last_status(NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_scope_begin(NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_scope_end(NULL), OJ_ERR_INVALID_ARGUMENT);
    assert_null(oj_engine_budget(NULL));
    oj_clear_error(NULL);
}

static void test_use_after_release(void **state) {
    (void)state;
    oj_tensor *t = oj_arange(eng, 0, 6, 1, OJ_F32);
    oj_tensor *v = oj_reshape(t, 2, (int64_t[]){2, 3});
    oj_release(t);
    /* the view keeps the storage; the handle t is dead */
    assert_true(oj_item_at(v, 5) == 5.0);
    assert_int_equal(oj_rank(t), -1);
    assert_int_equal(oj_numel(t), 0);
    assert_null(oj_shape(t));
    assert_null(oj_data_ptr(t));
    char buf[32];
    assert_string_equal(oj_shape_str(t, buf, sizeof buf), "[released]");
    assert_null(oj_clone(t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_reshape(t, 1, (int64_t[]){6}));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_narrow(t, 0, 0, 1));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_int_equal(oj_fill_(t, 1), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    float f[6];
    assert_int_equal(oj_to_host(t, f, sizeof f), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_copy_(v, t), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "src is a released tensor");
    assert_null(oj_retain(t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    oj_release(t); /* double release: an error, not a crash */
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "already released");
    assert_null(oj_tensor_to_string(t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    oj_release(v);
    /* a tensor released by its scope is detected the same way */
    oj_scope_begin(eng);
    oj_tensor *s = oj_ones(eng, 1, (int64_t[]){3}, OJ_F32);
    oj_scope_end(eng);
    assert_null(oj_unsqueeze(s, 0));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

static void test_quarantine_ring_recycles(void **state) {
    (void)state;
    /* Far more releases than the ring holds: old handles are freed (ASan
     * and LSan check that nothing leaks or is freed twice). */
    for (int i = 0; i < 10000; i++) {
        oj_tensor *t = oj_zeros(eng, 1, (int64_t[]){1}, OJ_F32);
        assert_non_null(t);
        oj_release(t);
    }
    oj_tensor *last = oj_zeros(eng, 1, (int64_t[]){1}, OJ_F32);
    oj_release(last);
    assert_int_equal(oj_rank(last), -1); /* most recent ones stay detectable */
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

static void test_foreign_engine(void **state) {
    (void)state;
    oj_engine *other = NULL;
    assert_int_equal(oj_engine_create(NULL, &other, NULL), OJ_OK);
    oj_tensor *a = oj_zeros(eng, 1, (int64_t[]){2}, OJ_F32);
    oj_tensor *b = oj_zeros(other, 1, (int64_t[]){2}, OJ_F32);
    assert_int_equal(oj_copy_(a, b), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "another engine");
    assert_int_equal(oj_last_status(other), OJ_OK);
    oj_release(a);
    oj_release(b);
    oj_engine_free(other);
}

/* ---- released tensors given to ops */

/* Ops given a released tensor (oj_add(t, t), oj_exp, oj_sum_all,
 * oj_softmax, oj_mul with one live input) return NULL with
 * OJ_ERR_INVALID_ARGUMENT naming the released input. */
static void test_released_inputs_record_an_error(void **state) {
    (void)state;
    oj_tensor *t = oj_ones(eng, 1, (int64_t[]){3}, OJ_F32);
    oj_release(t);
    assert_null(oj_add(t, t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_exp(t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_sum_all(t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    assert_null(oj_softmax(t, 0));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "released");
    /* with a live input as well, the error names the released one */
    oj_tensor *u = oj_ones(eng, 1, (int64_t[]){3}, OJ_F32);
    assert_null(oj_mul(u, t));
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "input 1 is a released tensor");
    oj_release(u);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, et_clear, et_clear)
    const struct CMUnitTest tests[] = {
        T(test_shape_numel_overflow), T(test_bad_shapes),
        T(test_null_handles),         T(test_use_after_release),
        T(test_quarantine_ring_recycles), T(test_foreign_engine),
        cmocka_unit_test_setup_teardown(test_released_inputs_record_an_error, et_clear, et_clear),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown);
}
