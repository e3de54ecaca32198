// test: adversarial inputs to ops found by probing: released tensors given
// to ops record an error, overflowing index/position arithmetic is refused
// (no signed overflow under UBSan).
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

/* Found by probing: oj_add(t, t) and oj_exp(t) on a released t returned
 * NULL with no error recorded (the header promises OJ_ERR_INVALID_ARGUMENT). */
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

/* Found under UBSan: one_hot with num_classes -1 computed max + 1 for an
 * index of INT64_MAX (signed overflow). */
static void test_one_hot_infer_int64_max(void **state) {
    (void)state;
    int64_t v[2] = {INT64_MAX, 0};
    oj_tensor *idx = oj_from_host(eng, 1, (int64_t[]){2}, OJ_I64, v, sizeof v);
    assert_non_null(idx);
    assert_null(oj_one_hot(idx, -1));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    oj_release(idx);
}

/* Found under UBSan: rotary_embedding added position_offset + t in the
 * kernel without a check (signed overflow for a huge offset). */
static void test_rotary_offset_overflow(void **state) {
    (void)state;
    oj_tensor *x = oj_ones(eng, 4, (int64_t[]){1, 1, 3, 4}, OJ_F32);
    assert_null(oj_rotary_embedding(x, INT64_MAX, 10000.0));
    ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "position_offset");
    assert_null(oj_rotary_embedding(x, INT64_MAX - 2, 10000.0));
    ET_EXPECT_ERR_HAS(OJ_ERR_OUT_OF_RANGE, "overflows");
    /* the largest offset that fits still works */
    oj_tensor *y = oj_rotary_embedding(x, INT64_MAX - 3, 10000.0);
    assert_non_null(y);
    oj_release(y);
    oj_release(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_released_inputs_record_an_error, et_clear),
        cmocka_unit_test_setup(test_one_hot_infer_int64_max, et_clear),
        cmocka_unit_test_setup(test_rotary_offset_overflow, et_clear),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown);
}
