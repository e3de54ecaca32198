// test: the optimizer's batched paths: the clip's per-tensor norms reused
// by the next step (same grads, unwritten since) give the same step as
// norms measured again, and a grad written after the clip is measured
// again.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "ojas/autograd.h"
#include "ojas/io.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

static oj_engine *eng_new_num(oj_numerics num) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.numerics = num;
    cfg.seed = 5;
    cfg.threads = 2;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}
static oj_engine *eng_new(void) { return eng_new_num(OJ_NUMERICS_FAST); }

static uint64_t g_lcg = 0x9e3779b9u;
static double rnd(void) { /* [-1, 1) */
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_lcg >> 11) * 0x1p-52 - 1.0;
}

/* A tensor of random values in [-1, 1) (unscoped when no scope is open). */
static oj_tensor *rand_tensor(oj_engine *eng, const int64_t *shape, oj_dtype dt) {
    int64_t n = shape[0] * shape[1];
    double *v = malloc((size_t)n * sizeof *v);
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)(v[i] = rnd());
    oj_tensor *t = dt == OJ_F32 ? oj_from_host(eng, 2, shape, dt, f, (size_t)n * 4)
                                : oj_from_host(eng, 2, shape, dt, v, (size_t)n * 8);
    free(v);
    free(f);
    assert_non_null(t);
    return t;
}

/* p->grad = exactly g (a copy, unscoped), through backward of sum(p * g). */
static void set_grad(oj_tensor *p, oj_tensor *g) {
    oj_engine *eng = oj_tensor_engine(p);
    oj_zero_grad(p);
    oj_scope_begin(eng);
    oj_tensor *loss = oj_sum_all(oj_mul(p, g));
    assert_non_null(loss);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    oj_scope_end(eng);
}

static double max_abs_diff(oj_tensor *a, oj_tensor *b) {
    int64_t n = oj_numel(a);
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(oj_item_at(a, i) - oj_item_at(b, i));
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

/* Two identical AdamW runs, one after oj_optim_clip_grad_norm (whose
 * norms the step reuses), one after clipping by hand: same parameters and
 * info.grad_norm within rounding; a grad written after the clip (version
 * bumped) is measured again and a non-finite one skips the step. */
static void test_clip_norms_reused(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    const int64_t sh[2][2] = {{4, 5}, {3, 1}};
    const char *names[2] = {"w", "b"};
    oj_tensor *p[2][2];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 2; i++) {
            p[r][i] = oj_zeros(eng, 2, sh[i], OJ_F32);
            oj_set_requires_grad(p[r][i], true);
        }
    oj_optim *o[2];
    oj_optim_hparams h = oj_adamw_hparams(1e-2, 0.1);
    for (int r = 0; r < 2; r++) {
        o[r] = oj_optim_create(eng);
        oj_named_tensors nt = {.n = 2, .names = names, .tensors = p[r]};
        assert_int_equal(oj_optim_add_group(o[r], &h, &nt), 0);
    }
    oj_scope_begin(eng);
    for (int step = 0; step < 3; step++) {
        oj_optim_step_info info[2];
        for (int i = 0; i < 2; i++) {
            oj_tensor *g = rand_tensor(eng, sh[i], OJ_F32);
            oj_tensor *g5 = oj_mul_scalar(g, 5.0);
            set_grad(p[0][i], g5);
            set_grad(p[1][i], g5);
        }
        double n0 = oj_optim_clip_grad_norm(o[0], 1.0);
        double n1 = oj_clip_grad_norm(2, p[1], 1.0);
        assert_true(n0 == n1 && n0 > 1.0);
        assert_int_equal(oj_optim_step(o[0], &info[0]), OJ_OK);
        assert_int_equal(oj_optim_step(o[1], &info[1]), OJ_OK);
        assert_true(fabs(info[0].grad_norm - info[1].grad_norm) <= 1e-6 * info[1].grad_norm);
        assert_true(fabs(info[0].grad_norm - 1.0) < 1e-5);
        for (int i = 0; i < 2; i++) assert_true(max_abs_diff(p[0][i], p[1][i]) == 0.0);
    }
    /* written after the clip: measured again (here: infinite, skipped) */
    oj_tensor *g = rand_tensor(eng, sh[0], OJ_F32);
    set_grad(p[0][0], g);
    set_grad(p[0][1], rand_tensor(eng, sh[1], OJ_F32));
    assert_true(isfinite(oj_optim_clip_grad_norm(o[0], 1.0)));
    bool prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_fill_(oj_grad(p[0][0]), INFINITY), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    oj_optim_step_info info;
    assert_int_equal(oj_optim_step(o[0], &info), OJ_ERR_NUMERIC);
    assert_true(info.skipped && isinf(info.grad_norm));
    oj_scope_end(eng);
    for (int r = 0; r < 2; r++) {
        oj_optim_free(o[r]);
        for (int i = 0; i < 2; i++) oj_release(p[r][i]);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clip_norms_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
