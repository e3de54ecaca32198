// test: status names, oj_error reports and the engine's sticky error
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"

static void test_status_names(void **state) {
    (void)state;
    assert_string_equal(oj_status_name(OJ_OK), "OJ_OK");
    assert_string_equal(oj_status_name(OJ_ERR_SHAPE), "OJ_ERR_SHAPE");
    assert_string_equal(oj_status_name(OJ_ERR_STATE), "OJ_ERR_STATE");
    assert_non_null(oj_status_name((oj_status)999));
    for (int s = 0; s <= OJ_ERR_STATE; s++)
        assert_int_equal(strncmp(oj_status_name((oj_status)s), "OJ_", 3), 0);
}

static void test_error_set_first_wins(void **state) {
    (void)state;
    oj_error e = {0};
    assert_int_equal(oj_error_set(&e, OJ_ERR_IO, "open %s: %d", "x.bin", 2), OJ_ERR_IO);
    assert_int_equal(e.status, OJ_ERR_IO);
    assert_string_equal(e.message, "open x.bin: 2");
    assert_int_equal(oj_error_set(&e, OJ_ERR_CORRUPT, "later"), OJ_ERR_CORRUPT);
    assert_int_equal(e.status, OJ_ERR_IO);
    assert_string_equal(e.message, "open x.bin: 2");
    assert_int_equal(oj_error_set(NULL, OJ_ERR_IO, "ignored"), OJ_ERR_IO);
}

static void test_engine_sticky_error(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_string_equal(oj_last_error(eng), "");
    assert_int_equal(oj_set_error(eng, OJ_ERR_SHAPE, "first %d", 1), OJ_ERR_SHAPE);
    assert_int_equal(oj_set_error(eng, OJ_ERR_DTYPE, "second"), OJ_ERR_DTYPE);
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_string_equal(oj_last_error(eng), "first 1");
    oj_clear_error(eng);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_string_equal(oj_last_error(eng), "");
    oj_set_error(eng, OJ_ERR_DTYPE, "second");
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_engine_free(eng);
}

static void test_null_propagates_once(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    int64_t bad = -1;
    oj_tensor *t = oj_zeros(eng, 1, &bad, OJ_F32); /* first error */
    assert_null(t);
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    char first[1024];
    strcpy(first, oj_last_error(eng));
    assert_non_null(strstr(first, "zeros"));
    assert_non_null(strstr(first, "[-1]"));
    /* NULL flows through without replacing the first message. */
    assert_null(oj_clone(t));
    assert_null(oj_contiguous(t));
    assert_string_equal(oj_last_error(eng), first);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_error_set_first_wins),
        cmocka_unit_test(test_engine_sticky_error),
        cmocka_unit_test(test_null_propagates_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
