// test: adversarial inputs to the optimizers found by probing: NaN/Inf
// gradients skip the step for every algorithm (moments and parameters
// untouched), and oj_newton_schulz5 of a NaN matrix reports an error
// instead of returning NULL silently.
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
#include "ojas/optim.h"
#include "engine_testutil.h"

/* Was: NULL returned with OJ_OK still the engine's status. */
static void test_newton_schulz_nan_input(void **state) {
    (void)state;
    oj_clear_error(eng);
    oj_tensor *g = oj_full(eng, 2, (int64_t[]){3, 4}, OJ_F32, NAN);
    assert_null(oj_newton_schulz5(g, 5));
    assert_int_equal(oj_last_status(eng), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_last_error(eng), "newton_schulz5"));
    oj_clear_error(eng);
    /* a finite one still works afterwards */
    oj_fill_(g, 1.0);
    oj_tensor *x = oj_newton_schulz5(g, 5);
    assert_non_null(x);
    oj_release(x);
    oj_release(g);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

/* Held up under probing: kept as a guard. Every algorithm skips a step
 * whose gradient is NaN or Inf and leaves the parameter as it was. */
static void test_non_finite_grad_skips_every_algo(void **state) {
    (void)state;
    for (int a = 0; a < 4; a++) {
        oj_tensor *w = oj_ones(eng, 2, (int64_t[]){4, 4}, OJ_F32);
        oj_set_requires_grad(w, true);
        const char *names[1] = {"w"};
        oj_tensor *ts[1] = {w};
        oj_named_tensors nt = {1, names, ts};
        oj_optim *o = oj_optim_create(eng);
        oj_optim_hparams hp = a == 0   ? oj_sgd_hparams(0.1)
                              : a == 1 ? oj_adam_hparams(0.1)
                              : a == 2 ? oj_adamw_hparams(0.1, 0.1)
                                       : oj_muon_hparams(0.02);
        assert_int_equal(oj_optim_add_group(o, &hp, &nt), 0);
        for (int k = 0; k < 2; k++) {
            oj_scope_begin(eng);
            oj_tensor *c = oj_full(eng, 2, (int64_t[]){4, 4}, OJ_F32, k ? INFINITY : NAN);
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(w, c)), false), OJ_OK);
            oj_scope_end(eng);
            oj_optim_step_info info;
            assert_int_equal(oj_optim_step(o, &info), OJ_ERR_NUMERIC);
            assert_true(info.skipped);
            assert_int_equal(oj_last_status(eng), OJ_OK);
            assert_true(oj_item_at(w, 0) == 1.0);
            oj_optim_zero_grad(o);
        }
        assert_int_equal(oj_optim_skipped_steps(o), 2);
        assert_int_equal(oj_optim_steps(o), 0);
        oj_optim_free(o);
        oj_release(w);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newton_schulz_nan_input),
        cmocka_unit_test(test_non_finite_grad_skips_every_algo),
    };
    return cmocka_run_group_tests(tests, et_setup, et_teardown);
}
