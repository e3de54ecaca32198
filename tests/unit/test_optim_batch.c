// test: the optimizer's batched paths. Muon's batched Newton-Schulz (one
// [n, r, c] stack per param group, shape and dtype; src/optim/step.c,
// muon.c) gives the updates of the per-matrix oj_newton_schulz5, within
// 1e-6 (f32) / 1e-12 (f64), FAST and EXACT, for one group mixing wide, tall
// and square matrices of two shapes, over two steps (zero then non-zero
// momentum buffers). The clip's per-tensor norms reused by the next step
// (same grads, unwritten since) give the same step as norms measured
// again, and a grad written after the clip is measured again.
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
#include "optim_testutil.h"

static oj_engine *eng_new_num(oj_numerics num) { return ot_engine(num, 5); }
static oj_engine *eng_new(void) { return eng_new_num(OJ_NUMERICS_FAST); }

static uint64_t g_lcg = 0x9e3779b9u;

/* A tensor of random values in [-1, 1) (unscoped when no scope is open). */
static oj_tensor *rand_tensor(oj_engine *eng, const int64_t *shape, oj_dtype dt) {
    int64_t n = shape[0] * shape[1];
    double *v = malloc((size_t)n * sizeof *v);
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)(v[i] = ot_rnd(&g_lcg));
    oj_tensor *t = dt == OJ_F32 ? oj_from_host(eng, 2, shape, dt, f, (size_t)n * 4)
                                : oj_from_host(eng, 2, shape, dt, v, (size_t)n * 8);
    free(v);
    free(f);
    assert_non_null(t);
    return t;
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

#define NP 7

/* wide [6, 10] x2, tall [10, 6] x2, square [8, 8], and a second shape of
 * each orientation ([3, 12] wide, [12, 3] tall) */
static const int64_t shapes[NP][2] = {{6, 10}, {10, 6}, {8, 8}, {6, 10},
                                      {3, 12}, {10, 6}, {12, 3}};

static void batched_vs_single(oj_dtype dt, oj_numerics num, double tol) {
    oj_engine *eng = eng_new_num(num);
    oj_tensor *p[NP], *pref[NP], *bref[NP];
    const char *names[NP] = {"h.0.a", "h.0.b", "h.0.c", "h.1.a", "h.1.b", "h.1.c", "h.1.d"};
    for (int i = 0; i < NP; i++) {
        p[i] = oj_zeros(eng, 2, shapes[i], dt);
        pref[i] = oj_zeros(eng, 2, shapes[i], dt);
        bref[i] = oj_zeros(eng, 2, shapes[i], dt);
        assert_true(p[i] && pref[i] && bref[i]);
        oj_set_requires_grad(p[i], true);
    }
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams h = oj_muon_hparams(1.0); /* lr 1 on zero params: p = -update */
    h.weight_decay = 0.0;
    oj_named_tensors nt = {.n = NP, .names = names, .tensors = p};
    assert_int_equal(oj_optim_add_group(o, &h, &nt), 0);
    const oj_backend *be = eng->backend;
    for (int step = 0; step < 2; step++) {
        oj_scope_begin(eng);
        for (int i = 0; i < NP; i++) {
            bool prev = oj_set_grad_enabled(eng, false);
            assert_int_equal(oj_fill_(p[i], 0.0), OJ_OK);
            assert_int_equal(oj_fill_(pref[i], 0.0), OJ_OK);
            oj_set_grad_enabled(eng, prev);
            oj_tensor *g = rand_tensor(eng, shapes[i], dt);
            ot_set_grad(p[i], g);
            /* the reference: per-matrix momentum, oj_newton_schulz5, update */
            oj_tensor *u = oj_zeros(eng, 2, shapes[i], dt);
            assert_int_equal(be->muon_momentum(eng, bref[i], g, u, h.momentum, h.nesterov), OJ_OK);
            assert_int_equal(be->muon_momentum(eng, bref[i], g, NULL, h.momentum, h.nesterov),
                             OJ_OK);
            oj_tensor *x = oj_newton_schulz5(u, 5);
            assert_non_null(x);
            double r = (double)shapes[i][0] / (double)shapes[i][1], sc = sqrt(r > 1 ? r : 1);
            assert_int_equal(be->apply_update(eng, pref[i], x, -h.lr, sc, 1.0, false), OJ_OK);
        }
        oj_optim_step_info info;
        assert_int_equal(oj_optim_step(o, &info), OJ_OK);
        assert_int_equal(info.params_updated, NP);
        for (int i = 0; i < NP; i++) {
            /* p = -(update * sc) rounded: the updates differ by at most tol,
             * and the product's rounding adds at most an ulp */
            double r = (double)shapes[i][0] / (double)shapes[i][1], sc = sqrt(r > 1 ? r : 1);
            double ulp = dt == OJ_F32 ? 0x1p-23 : 0x1p-52;
            double d = max_abs_diff(p[i], pref[i]), lim = tol * sc + ulp * 2.0;
            if (!(d <= lim))
                fail_msg("muon batch %s step %d param %d [%lld, %lld]: max |diff| %g > %g",
                         oj_dtype_name(dt), step, i, (long long)shapes[i][0],
                         (long long)shapes[i][1], d, lim);
        }
        oj_scope_end(eng);
    }
    oj_optim_free(o);
    for (int i = 0; i < NP; i++) {
        oj_release(p[i]);
        oj_release(pref[i]);
        oj_release(bref[i]);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_muon_batched_f32(void **state) {
    (void)state;
    batched_vs_single(OJ_F32, OJ_NUMERICS_FAST, 1e-6);
    batched_vs_single(OJ_F32, OJ_NUMERICS_EXACT, 1e-6);
}

static void test_muon_batched_f64(void **state) {
    (void)state;
    batched_vs_single(OJ_F64, OJ_NUMERICS_FAST, 1e-12);
    batched_vs_single(OJ_F64, OJ_NUMERICS_EXACT, 1e-12);
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
            ot_set_grad(p[0][i], g5);
            ot_set_grad(p[1][i], g5);
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
    ot_set_grad(p[0][0], g);
    ot_set_grad(p[0][1], rand_tensor(eng, sh[1], OJ_F32));
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
        cmocka_unit_test(test_muon_batched_f32),
        cmocka_unit_test(test_muon_batched_f64),
        cmocka_unit_test(test_clip_norms_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
