/* Helpers shared by the tests that run every case on one engine made in
 * the group setup (test_core_*.c, test_views.c, test_adversarial_*.c): the
 * engine `eng`, group and per-case setup/teardown, an error check. */
#ifndef OJAS_ENGINE_TESTUTIL_H
#define OJAS_ENGINE_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"

static oj_engine *eng;

/* Group setup: eng with the default configuration. */
static inline int et_setup(void **state) {
    (void)state;
    return oj_engine_create(NULL, &eng, NULL) == OJ_OK ? 0 : -1;
}
/* Group teardown: free eng. */
static inline int et_teardown(void **state) {
    (void)state;
    oj_engine_free(eng);
    return 0;
}
/* Group teardown: check that no tensor is left, then free eng. */
static inline int et_teardown_no_leaks(void **state) {
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    return et_teardown(state);
}
/* Per-case setup: open a scope. */
static inline int et_scope_in(void **state) {
    (void)state;
    return oj_scope_begin(eng) == OJ_OK ? 0 : -1;
}
/* Per-case teardown: no error may be left; close the scope. */
static inline int et_scope_out(void **state) {
    (void)state;
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    oj_clear_error(eng);
    return 0;
}
/* Per-case setup or teardown: clear the engine's error. */
static inline int et_clear(void **state) {
    (void)state;
    oj_clear_error(eng);
    return 0;
}

/* The engine's error is ST with a message holding FRAGMENT; clear it. */
#define ET_EXPECT_ERR_HAS(st, fragment)                                     \
    do {                                                                    \
        assert_int_equal(oj_last_status(eng), (st));                        \
        if (!strstr(oj_last_error(eng), (fragment)))                        \
            fail_msg("'%s' lacks '%s'", oj_last_error(eng), (fragment));    \
        oj_clear_error(eng);                                                \
    } while (0)

#endif
