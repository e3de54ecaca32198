// test: the multi-tensor optimizer entries and the optimizer's use of them.
// adam_step_multi gives, tensor for tensor, adam_step's bits (f32 and f64
// mixed, sizes 0, 1, odd and larger than the pool's grain, per-tensor step
// counts, lr, weight decay, Adam and AdamW); its check_only reports a
// non-finite value as OJ_ERR_NUMERIC, writing and recording nothing; a
// non-f32/f64 parameter is OJ_ERR_DTYPE with nothing written.
// mul_scalar_multi gives unary(AFFINE, alpha, 0)'s bits on every float
// dtype (signed zeros, subnormals, infinities, one-element tensors).
// oj_optim_step and oj_optim_clip_grad_norm give the same bits with the
// entries as with a backend table that lacks them (one call per tensor),
// over steps of mixed groups (AdamW, SGD, Adam with L2) with per-parameter
// step counts and an lr change; a skipped step names the same parameter;
// counting calls through a spy table shows a step makes one
// adam_step_multi call per pass and the clip one mul_scalar_multi call,
// and that overlapping parameters fall back to per-tensor calls.
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

static oj_engine *eng_new(void) { return ot_engine(OJ_NUMERICS_FAST, 7); }

static uint64_t g_lcg = 0x2545f4914f6cdd1dull;

/* A tensor of n values lo + (hi - lo) * u (u uniform in [0, 1)) of dtype dt. */
static oj_tensor *rand_1d(oj_engine *eng, int64_t n, oj_dtype dt, double lo, double hi) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (ot_rnd(&g_lcg) + 1.0) * 0.5;
    oj_tensor *t = oj_from_host(eng, 1, &n, OJ_F64, v, (size_t)n * sizeof *v);
    free(v);
    assert_non_null(t);
    if (dt != OJ_F64) {
        oj_tensor *c = oj_cast(t, dt);
        assert_non_null(c);
        oj_release(t);
        t = c;
    }
    return t;
}

static void same_bits(oj_tensor *a, oj_tensor *b, const char *what, int i) {
    assert_int_equal(oj_tensor_dtype(a), oj_tensor_dtype(b));
    assert_int_equal(oj_numel(a), oj_numel(b));
    size_t nb = (size_t)oj_numel(a) * oj_dtype_size(oj_tensor_dtype(a));
    if (nb && memcmp(oj_data_ptr(a), oj_data_ptr(b), nb) != 0)
        fail_msg("%s %d: the multi-tensor entry and the per-tensor one differ", what, i);
}

/* ---------------------------------------------------------------- the entries */

enum { NA = 13 };

static void test_adam_multi_entry(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    const oj_backend *be = eng->backend;
    static const int64_t sizes[NA] = {1, 0, 7, 32769, 65536, 3, 100003, 1, 5, 4096, 4097, 2, 77};
    oj_tensor *p[2][NA], *g[NA], *m[2][NA], *v[2][NA];
    oj_adam_args args[NA];
    oj_scope_begin(eng);
    for (int i = 0; i < NA; i++) {
        oj_dtype dt = i % 3 == 2 ? OJ_F64 : OJ_F32;
        p[0][i] = rand_1d(eng, sizes[i], dt, -1, 1);
        g[i] = rand_1d(eng, sizes[i], dt, -1, 1);
        m[0][i] = rand_1d(eng, sizes[i], dt, -0.1, 0.1);
        v[0][i] = rand_1d(eng, sizes[i], dt, 0.001, 0.1);
        p[1][i] = oj_clone(p[0][i]);
        m[1][i] = oj_clone(m[0][i]);
        v[1][i] = oj_clone(v[0][i]);
        double step = 1 + i % 4; /* per-parameter step counts */
        double lr = i % 2 ? 1e-3 : 3e-2, b1 = 0.9, b2 = i % 5 ? 0.95 : 0.999;
        args[i] = (oj_adam_args){.lr = lr, .beta1 = b1, .beta2 = b2, .eps = 1e-8,
                                 .weight_decay = i % 3 ? 0.1 : 0.0,
                                 .bias_correction1 = 1 - pow(b1, step),
                                 .bias_correction2 = 1 - pow(b2, step),
                                 .decoupled = i % 4 != 1};
    }
    for (int pass = 0; pass < 2; pass++) { /* the second from the first's state */
        assert_int_equal(be->adam_step_multi(eng, NA, p[0], (const oj_tensor *const *)g, m[0],
                                             v[0], args, true),
                         OJ_OK);
        assert_int_equal(be->adam_step_multi(eng, NA, p[0], (const oj_tensor *const *)g, m[0],
                                             v[0], args, false),
                         OJ_OK);
        for (int i = 0; i < NA; i++)
            assert_int_equal(be->adam_step(eng, p[1][i], g[i], m[1][i], v[1][i], &args[i], false),
                             OJ_OK);
        for (int i = 0; i < NA; i++) {
            same_bits(p[0][i], p[1][i], "adam param", i);
            same_bits(m[0][i], m[1][i], "adam exp_avg", i);
            same_bits(v[0][i], v[1][i], "adam exp_avg_sq", i);
        }
    }
    /* one non-finite gradient element: check_only says so, writes nothing,
     * records nothing */
    oj_tensor *keep = oj_clone(p[0][10]);
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *bad = oj_narrow(g[10], 0, 4000, 1);
    assert_int_equal(oj_fill_(bad, INFINITY), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    assert_int_equal(be->adam_step_multi(eng, NA, p[0], (const oj_tensor *const *)g, m[0], v[0],
                                         args, true),
                     OJ_ERR_NUMERIC);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    same_bits(p[0][10], keep, "check_only wrote a param", 10);
    same_bits(p[0][10], p[1][10], "check_only wrote a param", 10);
    /* a bf16 parameter: OJ_ERR_DTYPE before anything is written */
    oj_tensor *hb = rand_1d(eng, 5, OJ_BF16, -1, 1);
    oj_tensor *ps[2] = {p[0][0], hb}, *ms[2] = {m[0][0], hb}, *vs[2] = {v[0][0], hb};
    const oj_tensor *gs[2] = {g[0], hb};
    keep = oj_clone(p[0][0]);
    assert_int_equal(be->adam_step_multi(eng, 2, ps, gs, ms, vs, args, false), OJ_ERR_DTYPE);
    same_bits(p[0][0], keep, "a refused call wrote a param", 0);
    /* n = 0: nothing to do */
    assert_int_equal(be->adam_step_multi(eng, 0, ps, gs, ms, vs, args, true), OJ_OK);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_mul_scalar_multi_entry(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    const oj_backend *be = eng->backend;
    enum { NS = 12 };
    static const int64_t sizes[NS] = {1, 9, 40000, 0, 1, 3, 65537, 1, 17, 2, 1, 33};
    static const oj_dtype dts[4] = {OJ_F32, OJ_BF16, OJ_F64, OJ_F16};
    const double alpha = 0.3183098861837907; /* not representable in f32 or bf16 */
    oj_tensor *a[NS], *b[NS];
    oj_scope_begin(eng);
    for (int i = 0; i < NS; i++) {
        a[i] = rand_1d(eng, sizes[i], dts[i % 4], -3, 3);
        if (sizes[i] > 8) { /* signed zeros, a subnormal, infinities */
            bool prev = oj_set_grad_enabled(eng, false);
            static const double special[5] = {-0.0, 0.0, -1e-40, INFINITY, -INFINITY};
            for (int k = 0; k < 5; k++)
                assert_int_equal(oj_fill_(oj_narrow(a[i], 0, k, 1), special[k]), OJ_OK);
            oj_set_grad_enabled(eng, prev);
        }
        b[i] = oj_clone(a[i]);
    }
    assert_int_equal(be->mul_scalar_multi(eng, NS, a, alpha), OJ_OK);
    for (int i = 0; i < NS; i++) {
        assert_int_equal(be->unary(eng, OJ_UN_AFFINE, b[i], b[i], alpha, 0.0), OJ_OK);
        same_bits(a[i], b[i], "mul_scalar_multi tensor", i);
    }
    /* an integer tensor: OJ_ERR_DTYPE, nothing written */
    int64_t three = 3;
    oj_tensor *it = oj_zeros(eng, 1, &three, OJ_I64);
    oj_tensor *ts[2] = {a[1], it}, *keep = oj_clone(a[1]);
    assert_int_equal(be->mul_scalar_multi(eng, 2, ts, 2.0), OJ_ERR_DTYPE);
    same_bits(a[1], keep, "a refused call wrote a tensor", 1);
    assert_int_equal(be->mul_scalar_multi(eng, 0, ts, 2.0), OJ_OK);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- a spy table */

static const oj_backend *g_real;
static int c_adam, c_adam_multi, c_unary, c_mul_multi;

static oj_status spy_adam(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                          oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                          bool check_only) {
    c_adam++;
    return g_real->adam_step(eng, param, grad, exp_avg, exp_avg_sq, args, check_only);
}
static oj_status spy_adam_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                bool check_only) {
    c_adam_multi++;
    return g_real->adam_step_multi(eng, n, params, grads, exp_avgs, exp_avg_sqs, args,
                                   check_only);
}
static oj_status spy_unary(oj_engine *eng, oj_unary_op op, oj_tensor *out, const oj_tensor *x,
                           double alpha, double beta) {
    if (op == OJ_UN_AFFINE) c_unary++;
    return g_real->unary(eng, op, out, x, alpha, beta);
}
static oj_status spy_mul_multi(oj_engine *eng, int64_t n, oj_tensor *const *ts, double alpha) {
    c_mul_multi++;
    return g_real->mul_scalar_multi(eng, n, ts, alpha);
}

static oj_backend t_multi, t_single; /* with the multi entries / without */

static void spy_install(oj_engine *multi, oj_engine *single) {
    g_real = multi->backend;
    t_multi = *g_real;
    t_multi.adam_step = spy_adam;
    t_multi.adam_step_multi = spy_adam_multi;
    t_multi.unary = spy_unary;
    t_multi.mul_scalar_multi = spy_mul_multi;
    t_single = t_multi;
    t_single.adam_step_multi = NULL;
    t_single.mul_scalar_multi = NULL;
    multi->backend = &t_multi;
    single->backend = &t_single;
}
static void spy_reset(void) { c_adam = c_adam_multi = c_unary = c_mul_multi = 0; }

/* ---------------------------------------------------------------- the optimizer */

enum { NP = 9 };
static const char *pnames[NP] = {"a0", "a1", "a2", "a3", "s0", "b0", "b1", "c0", "c1"};
static const int64_t psize[NP] = {35, 1, 4097, 9, 6, 33, 70001, 4, 1};
static const oj_dtype pdt[NP] = {OJ_F32, OJ_F32, OJ_F64, OJ_F32, OJ_F32,
                                 OJ_F64, OJ_F32, OJ_F32, OJ_F64};

/* Groups: AdamW (a*), SGD with momentum (s0), Adam with L2 (b*), Adam (c*). */
static oj_optim *optim_new(oj_engine *eng, oj_tensor **p) {
    oj_optim *o = oj_optim_create(eng);
    assert_non_null(o);
    oj_optim_hparams h[4] = {oj_adamw_hparams(1e-2, 0.1), oj_sgd_hparams(0.1),
                             oj_adam_hparams(3e-3), oj_adam_hparams(1e-3)};
    h[1].momentum = 0.9;
    h[2].weight_decay = 0.05;
    h[3].beta2 = 0.95;
    h[3].eps = 1e-6;
    const int first[5] = {0, 4, 5, 7, NP};
    for (int k = 0; k < 4; k++) {
        oj_named_tensors nt = {.n = first[k + 1] - first[k], .names = pnames + first[k],
                               .tensors = p + first[k]};
        assert_int_equal(oj_optim_add_group(o, &h[k], &nt), k);
    }
    return o;
}

/* The same values on both engines (a copy through the host). */
static void twin(oj_engine *e0, oj_engine *e1, int64_t n, oj_dtype dt, double lo, double hi,
                 oj_tensor **t0, oj_tensor **t1) {
    *t0 = rand_1d(e0, n, dt, lo, hi);
    size_t nb = (size_t)n * oj_dtype_size(dt);
    *t1 = oj_from_host(e1, 1, &n, dt, oj_data_ptr(*t0), nb);
    assert_non_null(*t1);
}

static void same_state(oj_optim *o0, oj_optim *o1, oj_tensor **p0, oj_tensor **p1, int step) {
    for (int i = 0; i < NP; i++) same_bits(p0[i], p1[i], "param after a step", step * 100 + i);
    oj_named_tensors s0, s1;
    assert_int_equal(oj_optim_state(o0, &s0), OJ_OK);
    assert_int_equal(oj_optim_state(o1, &s1), OJ_OK);
    assert_int_equal(s0.n, s1.n);
    for (int64_t k = 0; k < s0.n; k++) {
        assert_string_equal(s0.names[k], s1.names[k]);
        same_bits(s0.tensors[k], s1.tensors[k], s0.names[k], step);
    }
}

static void test_step_multi_vs_single(void **state) {
    (void)state;
    oj_engine *e[2] = {eng_new(), eng_new()};
    spy_install(e[0], e[1]);
    oj_tensor *p[2][NP];
    for (int i = 0; i < NP; i++) {
        twin(e[0], e[1], psize[i], pdt[i], -1, 1, &p[0][i], &p[1][i]);
        for (int s = 0; s < 2; s++) oj_set_requires_grad(p[s][i], true);
    }
    oj_optim *o[2] = {optim_new(e[0], p[0]), optim_new(e[1], p[1])};
    int n_adam_items = 0;
    for (int step = 0; step < 5; step++) {
        if (step == 3) /* an lr change between steps */
            for (int s = 0; s < 2; s++) oj_optim_group_hparams(o[s], 0)->lr = 4e-3;
        n_adam_items = 0;
        for (int i = 0; i < NP; i++) {
            /* a1 and b0 have no grad in the first two steps: their step
             * counts lag the others' */
            if (step < 2 && (i == 1 || i == 5)) {
                for (int s = 0; s < 2; s++) oj_zero_grad(p[s][i]);
                continue;
            }
            n_adam_items += i != 4;
            oj_tensor *g0, *g1;
            for (int s = 0; s < 2; s++) oj_scope_begin(e[s]);
            twin(e[0], e[1], psize[i], pdt[i], -2, 2, &g0, &g1);
            ot_set_grad(p[0][i], g0);
            ot_set_grad(p[1][i], g1);
            for (int s = 0; s < 2; s++) oj_scope_end(e[s]);
        }
        spy_reset();
        double n0 = oj_optim_clip_grad_norm(o[0], 0.5);
        assert_true(n0 > 0.5);
        assert_int_equal(c_mul_multi, 1);
        assert_int_equal(c_unary, 0);
        spy_reset();
        double n1 = oj_optim_clip_grad_norm(o[1], 0.5);
        assert_true(memcmp(&n0, &n1, sizeof n0) == 0);
        assert_int_equal(c_mul_multi, 0);
        assert_int_equal(c_unary, n_adam_items + 1);
        oj_optim_step_info info[2];
        spy_reset();
        assert_int_equal(oj_optim_step(o[0], &info[0]), OJ_OK);
        assert_int_equal(c_adam_multi, 2); /* the check pass and the write pass */
        assert_int_equal(c_adam, 0);
        spy_reset();
        assert_int_equal(oj_optim_step(o[1], &info[1]), OJ_OK);
        assert_int_equal(c_adam_multi, 0);
        assert_int_equal(c_adam, 2 * n_adam_items);
        assert_true(memcmp(&info[0].grad_norm, &info[1].grad_norm, sizeof(double)) == 0);
        assert_int_equal(info[0].params_updated, info[1].params_updated);
        same_state(o[0], o[1], p[0], p[1], step);
    }
    /* an update that overflows (v = g^2 in f32) in a3 and b1: both skip,
     * name a3 (the first in order) and change nothing */
    oj_tensor *keep = oj_clone(p[0][6]);
    for (int i = 0; i < NP; i++) {
        oj_tensor *g0, *g1;
        for (int s = 0; s < 2; s++) oj_scope_begin(e[s]);
        double mag = (i == 3 || i == 6) ? 1e30 : 1;
        twin(e[0], e[1], psize[i], pdt[i], mag, 2 * mag, &g0, &g1);
        ot_set_grad(p[0][i], g0);
        ot_set_grad(p[1][i], g1);
        for (int s = 0; s < 2; s++) oj_scope_end(e[s]);
    }
    for (int s = 0; s < 2; s++) {
        oj_optim_step_info info;
        assert_int_equal(oj_optim_step(o[s], &info), OJ_ERR_NUMERIC);
        assert_true(info.skipped);
        assert_int_equal(oj_last_status(e[s]), OJ_OK);
        assert_non_null(strstr(oj_optim_message(o[s]), "'a3'"));
    }
    assert_string_equal(oj_optim_message(o[0]), oj_optim_message(o[1]));
    same_bits(p[0][6], keep, "a skipped step wrote a param", 6);
    same_state(o[0], o[1], p[0], p[1], 99);
    oj_release(keep);
    for (int s = 0; s < 2; s++) {
        oj_optim_free(o[s]);
        for (int i = 0; i < NP; i++) oj_release(p[s][i]);
        assert_int_equal(oj_engine_live_tensors(e[s]), 0);
        oj_engine_free(e[s]);
    }
}

/* Parameters that are views of one buffer: disjoint ones take the multi
 * entry; overlapping ones (the per-parameter order then matters) are
 * updated one by one, in order, with the bits of a table without the
 * entries. */
static void views_case(bool overlap) {
    oj_engine *e[2] = {eng_new(), eng_new()};
    spy_install(e[0], e[1]);
    oj_tensor *base[2], *p[2][2], *view[2][2];
    twin(e[0], e[1], 12, OJ_F32, -1, 1, &base[0], &base[1]);
    const char *names[2] = {"v0", "v1"};
    for (int s = 0; s < 2; s++) {
        view[s][0] = oj_narrow(base[s], 0, 0, 6);
        view[s][1] = oj_narrow(base[s], 0, overlap ? 4 : 6, 6);
        for (int i = 0; i < 2; i++) {
            p[s][i] = oj_detach(view[s][i]);
            assert_non_null(p[s][i]);
            oj_set_requires_grad(p[s][i], true);
        }
    }
    oj_optim *o[2];
    for (int s = 0; s < 2; s++) {
        o[s] = oj_optim_create(e[s]);
        oj_optim_hparams h = oj_adamw_hparams(1e-1, 0.1);
        oj_named_tensors nt = {.n = 2, .names = names, .tensors = p[s]};
        assert_int_equal(oj_optim_add_group(o[s], &h, &nt), 0);
    }
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 2; i++) {
            oj_tensor *g0, *g1;
            for (int s = 0; s < 2; s++) oj_scope_begin(e[s]);
            twin(e[0], e[1], 6, OJ_F32, -1, 1, &g0, &g1);
            ot_set_grad(p[0][i], g0);
            ot_set_grad(p[1][i], g1);
            for (int s = 0; s < 2; s++) oj_scope_end(e[s]);
        }
        spy_reset();
        assert_int_equal(oj_optim_step(o[0], NULL), OJ_OK);
        assert_int_equal(c_adam_multi, overlap ? 0 : 2);
        assert_int_equal(c_adam, overlap ? 4 : 0);
        assert_int_equal(oj_optim_step(o[1], NULL), OJ_OK);
        same_bits(base[0], base[1], "the shared buffer", step);
    }
    for (int s = 0; s < 2; s++) {
        oj_optim_free(o[s]);
        for (int i = 0; i < 2; i++) {
            oj_release(p[s][i]);
            oj_release(view[s][i]);
        }
        oj_release(base[s]);
        assert_int_equal(oj_engine_live_tensors(e[s]), 0);
        oj_engine_free(e[s]);
    }
}

static void test_step_views(void **state) {
    (void)state;
    views_case(false);
    views_case(true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adam_multi_entry),
        cmocka_unit_test(test_mul_scalar_multi_entry),
        cmocka_unit_test(test_step_multi_vs_single),
        cmocka_unit_test(test_step_views),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
