// test: the OJAS_* readers of src/core/env.h — oj__env_flag (unset or empty:
// the default, "0" off, any other value on) and oj__env_int (a whole base-10
// value, else the default: unset, empty, trailing characters, no digits, out
// of range; errno left as it was), read afresh at each call.
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/env.h"

#define NAME "OJAS_TEST_ENV_SWITCH"

static void test_flag(void **state) {
    (void)state;
    unsetenv(NAME);
    assert_true(oj__env_flag(NAME, true));
    assert_false(oj__env_flag(NAME, false));
    setenv(NAME, "", 1);
    assert_true(oj__env_flag(NAME, true));
    assert_false(oj__env_flag(NAME, false));
    setenv(NAME, "0", 1);
    assert_false(oj__env_flag(NAME, true));
    assert_false(oj__env_flag(NAME, false));
    const char *on[] = {"1", "2", "yes", "00", "off"}; /* only "0" is off */
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        setenv(NAME, on[i], 1);
        if (!oj__env_flag(NAME, false)) fail_msg("%s=%s read as off", NAME, on[i]);
    }
    unsetenv(NAME);
}

static void test_int(void **state) {
    (void)state;
    unsetenv(NAME);
    assert_int_equal(oj__env_int(NAME, 32), 32);
    const struct {
        const char *v;
        int64_t want;
    } cases[] = {
        {"", 32},   {"0", 0},       {"7", 7},    {"-3", -3},   {" 12", 12},
        {"+5", 5},  {"4096", 4096}, {"12x", 32}, {"abc", 32},  {"1.5", 32},
        {"-", 32},  {"7 ", 32},     {"99999999999999999999", 32},
        {"9223372036854775807", INT64_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(NAME, cases[i].v, 1);
        errno = EINTR;
        int64_t got = oj__env_int(NAME, 32);
        if (got != cases[i].want)
            fail_msg("%s='%s': %lld, want %lld", NAME, cases[i].v, (long long)got,
                     (long long)cases[i].want);
        if (errno != EINTR) fail_msg("%s='%s': errno changed to %d", NAME, cases[i].v, errno);
    }
    unsetenv(NAME);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag),
        cmocka_unit_test(test_int),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
