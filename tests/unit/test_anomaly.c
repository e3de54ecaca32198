// test: detect-anomaly mode names the first op whose output (forward) or
// computed gradient (backward) holds a NaN or an inf, changes nothing for
// finite graphs, is off by default and on with OJAS_DETECT_ANOMALY=1.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/ops.h"

static oj_engine *new_engine(void) {
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    return e;
}

static oj_tensor *vec(oj_engine *e, const float *v, int64_t n, bool grad) {
    oj_tensor *t = oj_from_host(e, 1, &n, OJ_F32, v, (size_t)n * sizeof *v);
    oj_set_requires_grad(t, grad);
    return t;
}

static void test_off_by_default(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    assert_false(oj_detect_anomaly_enabled(e));
    oj_scope_begin(e);
    float v[3] = {1.0f, -1.0f, 2.0f};
    oj_tensor *y = oj_log(vec(e, v, 3, true));
    assert_non_null(y);
    assert_true(isnan(oj_item_at(y, 1)));
    assert_int_equal(oj_last_status(e), OJ_OK); // NaN passes silently when off
    oj_scope_end(e);
    oj_engine_free(e);
}

static void test_forward_names_the_op(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    assert_false(oj_set_detect_anomaly(e, true));
    oj_scope_begin(e);
    float v[3] = {1.0f, -1.0f, 2.0f};
    oj_tensor *x = vec(e, v, 3, true);
    oj_tensor *a = oj_mul_scalar(x, 2.0); // finite: no error
    assert_int_equal(oj_last_status(e), OJ_OK);
    oj_tensor *y = oj_log(a); // log(-2): NaN
    (void)y;
    assert_int_equal(oj_last_status(e), OJ_ERR_NUMERIC);
    const char *m = oj_last_error(e);
    assert_non_null(strstr(m, "detect_anomaly"));
    assert_non_null(strstr(m, "output 0 of log"));
    assert_non_null(strstr(m, "[3]"));
    assert_non_null(strstr(m, "NaN"));
    oj_clear_error(e);
    float big[2] = {100.0f, 1.0f};
    oj_tensor *z = oj_exp(vec(e, big, 2, true)); // exp(100) overflows f32: inf
    (void)z;
    assert_int_equal(oj_last_status(e), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_last_error(e), "output 0 of exp"));
    assert_non_null(strstr(oj_last_error(e), "inf"));
    oj_clear_error(e);
    oj_scope_end(e);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void test_backward_names_the_op(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_set_detect_anomaly(e, true);
    oj_scope_begin(e);
    float v[3] = {0.0f, 1.0f, 4.0f};
    oj_tensor *x = vec(e, v, 3, true);
    oj_tensor *y = oj_sqrt(x); // sqrt(0) = 0 is finite; its gradient 1 / (2 sqrt 0) is not
    oj_tensor *l = oj_sum(y, 0, NULL, false);
    assert_int_equal(oj_last_status(e), OJ_OK);
    assert_int_equal(oj_backward(l, false), OJ_ERR_NUMERIC);
    const char *m = oj_last_error(e);
    assert_non_null(strstr(m, "backward of sqrt"));
    assert_non_null(strstr(m, "inf"));
    oj_clear_error(e);
    oj_scope_end(e);
    oj_engine_free(e);
}

static void test_finite_graph_unchanged(void **state) {
    (void)state;
    double g[2][4];
    for (int on = 0; on < 2; on++) {
        oj_engine *e = new_engine();
        oj_set_detect_anomaly(e, on == 1);
        oj_scope_begin(e);
        float v[4] = {0.5f, -1.5f, 2.0f, 3.0f};
        oj_tensor *x = vec(e, v, 4, true);
        oj_tensor *l = oj_sum(oj_mul(oj_tanh(x), oj_exp(x)), 0, NULL, false);
        assert_int_equal(oj_backward(l, false), OJ_OK);
        for (int i = 0; i < 4; i++) g[on][i] = oj_item_at(oj_grad(x), i);
        assert_int_equal(oj_last_status(e), OJ_OK);
        oj_scope_end(e);
        oj_engine_free(e);
    }
    assert_memory_equal(g[0], g[1], sizeof g[0]);
}

static void test_environment_turns_it_on(void **state) {
    (void)state;
    setenv("OJAS_DETECT_ANOMALY", "1", 1);
    oj_engine *e = new_engine();
    unsetenv("OJAS_DETECT_ANOMALY");
    assert_true(oj_detect_anomaly_enabled(e));
    assert_true(oj_set_detect_anomaly(e, false));
    assert_false(oj_detect_anomaly_enabled(e));
    oj_engine_free(e);
    assert_false(oj_set_detect_anomaly(NULL, true)); // NULL engine: no crash
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_by_default),
        cmocka_unit_test(test_forward_names_the_op),
        cmocka_unit_test(test_backward_names_the_op),
        cmocka_unit_test(test_finite_graph_unchanged),
        cmocka_unit_test(test_environment_turns_it_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
