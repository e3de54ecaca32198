/* Helpers shared by the tests that run their cases on one engine kept in a
 * file-scope variable: made in the group setup (test_core_*.c, test_views.c)
 * or afresh for each case (et_engine_in / et_engine_out, for files whose
 * other cases make their own engines). The variable is `eng` unless the file
 * defines ET_ENGINE to another name before including this header (a file
 * whose cases also name local engines `eng`, which -Wshadow refuses to hide).
 * Group and per-case setup/teardown, an error check. */
#ifndef OJAS_ENGINE_TESTUTIL_H
#define OJAS_ENGINE_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"

#ifndef ET_ENGINE
#define ET_ENGINE eng
#endif

static oj_engine *ET_ENGINE;

/* Group setup: ET_ENGINE with the default configuration. */
static inline int et_setup(void **state) {
    (void)state;
    return oj_engine_create(NULL, &ET_ENGINE, NULL) == OJ_OK ? 0 : -1;
}
/* Group teardown: free ET_ENGINE. */
static inline int et_teardown(void **state) {
    (void)state;
    oj_engine_free(ET_ENGINE);
    return 0;
}
/* Group teardown: check that no tensor is left, then free ET_ENGINE. */
static inline int et_teardown_no_leaks(void **state) {
    assert_int_equal(oj_engine_live_tensors(ET_ENGINE), 0);
    return et_teardown(state);
}
/* Per-case setup: open a scope. */
static inline int et_scope_in(void **state) {
    (void)state;
    return oj_scope_begin(ET_ENGINE) == OJ_OK ? 0 : -1;
}
/* Per-case teardown: no error may be left; close the scope. */
static inline int et_scope_out(void **state) {
    (void)state;
    assert_int_equal(oj_last_status(ET_ENGINE), OJ_OK);
    oj_scope_end(ET_ENGINE);
    oj_clear_error(ET_ENGINE);
    return 0;
}
/* Per-case setup or teardown: clear the engine's error. */
static inline int et_clear(void **state) {
    (void)state;
    oj_clear_error(ET_ENGINE);
    return 0;
}

/* Per-case setup: a fresh ET_ENGINE with the default configuration and a
 * scope open on it. */
static inline int et_engine_in(void **state) {
    (void)state;
    if (oj_engine_create(NULL, &ET_ENGINE, NULL) != OJ_OK)
        return -1;
    return oj_scope_begin(ET_ENGINE) == OJ_OK ? 0 : -1;
}
/* Per-case teardown after et_engine_in: autocast off and grad mode on again,
 * the error cleared, the scope closed; no tensor may be left; the engine is
 * freed. */
static inline int et_engine_out(void **state) {
    (void)state;
    oj_set_autocast(ET_ENGINE, false, OJ_BF16);
    oj_set_grad_enabled(ET_ENGINE, true);
    oj_clear_error(ET_ENGINE);
    oj_scope_end(ET_ENGINE);
    assert_int_equal(oj_engine_live_tensors(ET_ENGINE), 0);
    oj_engine_free(ET_ENGINE);
    ET_ENGINE = NULL;
    return 0;
}

/* The engine's error is ST with a message holding FRAGMENT; clear it. */
#define ET_EXPECT_ERR_HAS(st, fragment)                                     \
    do {                                                                    \
        assert_int_equal(oj_last_status(ET_ENGINE), (st));                        \
        if (!strstr(oj_last_error(ET_ENGINE), (fragment)))                        \
            fail_msg("'%s' lacks '%s'", oj_last_error(ET_ENGINE), (fragment));    \
        oj_clear_error(ET_ENGINE);                                                \
    } while (0)

#endif
