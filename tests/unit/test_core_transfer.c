// test: oj_to_device copies between engines explicitly; tensors of two
// engines never meet inside an op; oj_copy_from_host overwrites in place;
// a CPU engine refuses graph capture by name (tests/gpu covers CUDA).
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

static void test_copy_from_host(void **state) {
    (void)state;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    int64_t shape[2] = {2, 2};
    float v[4] = {1, 2, 3, 4}, w[4] = {-1, 0.5f, 8, 9}, got[4];
    oj_tensor *x = oj_from_host(e, 2, shape, OJ_F32, v, sizeof v);
    uint64_t ver = oj_version(x);
    const void *addr = oj_data_ptr(x);
    assert_int_equal(oj_copy_from_host(x, w, sizeof w), OJ_OK);
    assert_ptr_equal(oj_data_ptr(x), addr); /* in place */
    assert_true(oj_version(x) > ver);
    assert_int_equal(oj_to_host(x, got, sizeof got), OJ_OK);
    assert_memory_equal(got, w, sizeof w);
    assert_int_equal(oj_copy_from_host(x, w, 8), OJ_ERR_SHAPE); /* wrong size */
    assert_non_null(strstr(oj_last_error(e), "copy_from_host"));
    oj_clear_error(e);
    oj_tensor *xt = oj_transpose(x, 0, 1);
    assert_int_equal(oj_copy_from_host(xt, w, sizeof w), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    assert_int_equal(oj_copy_from_host(x, NULL, sizeof w), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    assert_int_equal(oj_copy_from_host(NULL, w, sizeof w), OJ_ERR_INVALID_ARGUMENT);
    oj_release(xt);
    oj_release(x);
    oj_engine_free(e);
}

static void test_graph_refused_on_cpu(void **state) {
    (void)state;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    assert_int_equal(oj_graph_capture_begin(e), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(oj_last_error(e), "CUDA engines only"));
    assert_false(oj_graph_capturing(e));
    oj_clear_error(e);
    assert_null(oj_graph_capture_end(e));
    assert_int_equal(oj_last_status(e), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    assert_int_equal(oj_graph_replay(NULL), OJ_ERR_INVALID_ARGUMENT);
    oj_graph_free(NULL);
    oj_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_to_device_between_engines),
                                       cmocka_unit_test(test_copy_from_host),
                                       cmocka_unit_test(test_graph_refused_on_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
