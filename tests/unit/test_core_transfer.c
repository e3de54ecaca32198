// test: oj_to_device copies between engines explicitly; tensors of two
// engines never meet inside an op.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/ops.h"

static void test_to_device_between_engines(void **state) {
    (void)state;
    oj_engine *a = NULL, *b = NULL;
    assert_int_equal(oj_engine_create(NULL, &a, NULL), OJ_OK);
    assert_int_equal(oj_engine_create(NULL, &b, NULL), OJ_OK);
    int64_t shape[2] = {2, 3};
    float v[6] = {1, -2, 3.5f, 4, 5, -6};
    oj_tensor *x = oj_from_host(a, 2, shape, OJ_F32, v, sizeof v);
    oj_tensor *xt = oj_transpose(x, 0, 1); // non-contiguous source
    oj_tensor *y = oj_to_device(xt, b);
    assert_non_null(y);
    assert_ptr_equal(oj_tensor_engine(y), b);
    assert_true(oj_is_contiguous(y));
    float got[6];
    assert_int_equal(oj_to_host(y, got, sizeof got), OJ_OK);
    float want[6] = {1, 4, -2, 5, 3.5f, -6};
    assert_memory_equal(got, want, sizeof want);
    // mixing engines inside an op is refused, naming the op
    assert_null(oj_add(x, y));
    assert_int_not_equal(oj_last_status(a), OJ_OK);
    assert_non_null(strstr(oj_last_error(a), "add"));
    oj_clear_error(a);
    assert_null(oj_to_device(NULL, b));
    oj_release(y);
    oj_release(xt);
    oj_release(x);
    oj_engine_free(a);
    oj_engine_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_to_device_between_engines)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
