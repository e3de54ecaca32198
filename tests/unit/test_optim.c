// test: optimizers — SGD/Adam/AdamW against a float64 transcription of
// torch.optim, Muon against a float64 Newton-Schulz reference, skipped steps
// on non-finite gradients or updates (state untouched), clipping, LR
// schedules, the Muon/AdamW split, and the optimizer state_dict (round trip
// and strict refusal).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/io.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "optim/optim_internal.h"

/* This file's cases name their own engines `eng`; the shared ones use case_eng. */
#define ET_ENGINE case_eng
#include "engine_testutil.h"
#include "gpt_testutil.h"

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 11;
    cfg.threads = 1;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

/* Deterministic pseudo-random doubles in [-1, 1). */
static uint64_t g_lcg = 0x12345678u;
static double rnd(void) {
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_lcg >> 11) * 0x1p-52 - 1.0;
}

/* A leaf parameter from host values (unscoped when no scope is open). */
static oj_tensor *param_new(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                            const double *v) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    float *f = malloc((size_t)n * sizeof *f + 1);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    oj_tensor *t = dt == OJ_F32 ? oj_from_host(eng, rank, shape, dt, f, (size_t)n * 4)
                                : oj_from_host(eng, rank, shape, dt, v, (size_t)n * 8);
    free(f);
    assert_non_null(t);
    oj_set_requires_grad(t, true);
    return t;
}

/* Host copy of a tensor as doubles. */
static void to_doubles(oj_tensor *t, double *out) {
    int64_t n = oj_numel(t);
    for (int64_t i = 0; i < n; i++) out[i] = oj_item_at(t, i);
}

/* Set p's grad to exactly g, through backward of sum(p * g). */
static void set_grad(oj_tensor *p, const double *g) {
    oj_engine *eng = oj_tensor_engine(p);
    oj_zero_grad(p);
    oj_scope_begin(eng);
    int64_t n = oj_numel(p);
    oj_dtype dt = oj_tensor_dtype(p);
    void *buf = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        if (dt == OJ_F32)
            ((float *)buf)[i] = (float)g[i];
        else
            ((double *)buf)[i] = g[i];
    }
    oj_tensor *c =
        oj_from_host(eng, oj_rank(p), oj_shape(p), dt, buf, (size_t)n * oj_dtype_size(dt));
    free(buf);
    oj_tensor *loss = oj_sum_all(oj_mul(p, c));
    assert_non_null(loss);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    oj_scope_end(eng);
}

static oj_named_tensors one(const char **name, oj_tensor **t) {
    return (oj_named_tensors){.n = 1, .names = name, .tensors = t};
}

/* ---------------------------------------------------------------- torch.optim in f64 */

typedef struct {
    double m, v, buf;
    int64_t step;
} ref_state;

/* torch/optim/{sgd,adam,adamw}.py, single-tensor path, in double. */
static void ref_step(const oj_optim_hparams *h, double *p, const double *g0, ref_state *s,
                     int64_t n) {
    double lr = h->lr, wd = h->weight_decay;
    for (int64_t i = 0; i < n; i++) {
        double g = g0[i];
        ref_state *st = &s[i];
        if (h->algo == OJ_OPTIM_SGD) {
            if (wd != 0) g = g + wd * p[i];
            if (h->momentum != 0) {
                if (st->step == 0)
                    st->buf = g;
                else
                    st->buf = st->buf * h->momentum + (1 - h->dampening) * g;
                g = h->nesterov ? g + h->momentum * st->buf : st->buf;
            }
            p[i] = p[i] + (-lr) * g;
        } else {
            double step = (double)(st->step + 1);
            if (h->algo == OJ_OPTIM_ADAMW)
                p[i] = p[i] * (1 - lr * wd);
            else if (wd != 0)
                g = g + wd * p[i];
            st->m = st->m * h->beta1 + (1 - h->beta1) * g;
            st->v = st->v * h->beta2 + (1 - h->beta2) * g * g;
            double bc1 = 1 - pow(h->beta1, step), bc2 = 1 - pow(h->beta2, step);
            double denom = sqrt(st->v) / sqrt(bc2) + h->eps;
            p[i] = p[i] + (-(lr / bc1)) * st->m / denom;
        }
        st->step++;
    }
}

static void check_against_ref(oj_optim_hparams h, oj_dtype dt, double tol) {
    oj_engine *eng = eng_new();
    enum { N = 15, STEPS = 30 };
    int64_t shape[2] = {3, 5};
    double p0[N], pr[N], g[N], got[N];
    for (int i = 0; i < N; i++) p0[i] = pr[i] = rnd();
    ref_state st[N];
    memset(st, 0, sizeof st);
    oj_tensor *p = param_new(eng, 2, shape, dt, p0);
    const char *name = "w";
    oj_optim *o = oj_optim_create(eng);
    oj_named_tensors nt = one(&name, &p);
    assert_int_equal(oj_optim_add_group(o, &h, &nt), 0);
    for (int k = 0; k < STEPS; k++) {
        for (int i = 0; i < N; i++) g[i] = rnd() * (k % 3 + 1);
        if (dt == OJ_F32)
            for (int i = 0; i < N; i++) g[i] = (float)g[i];
        set_grad(p, g);
        ref_step(&h, pr, g, st, N);
        assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
    }
    to_doubles(p, got);
    for (int i = 0; i < N; i++)
        if (fabs(got[i] - pr[i]) > tol * fmax(1.0, fabs(pr[i])))
            fail_msg("%s %s: element %d: %.17g vs reference %.17g", oj_dtype_name(dt),
                     h.algo == OJ_OPTIM_SGD ? "sgd" : "adam(w)", i, got[i], pr[i]);
    assert_int_equal(oj_optim_steps(o), STEPS);
    oj_optim_free(o);
    oj_release(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_adamw_reference(void **state) {
    (void)state;
    oj_optim_hparams h = oj_adamw_hparams(1e-2, 0.1);
    h.beta2 = 0.99;
    check_against_ref(h, OJ_F64, 1e-14);
    check_against_ref(h, OJ_F32, 2e-6);
    h.eps = 1e-3;
    check_against_ref(h, OJ_F64, 1e-14);
}

static void test_adam_reference(void **state) {
    (void)state;
    oj_optim_hparams h = oj_adam_hparams(3e-3);
    check_against_ref(h, OJ_F64, 1e-14);
    h.weight_decay = 0.05; // L2 into the gradient
    check_against_ref(h, OJ_F64, 1e-14);
    check_against_ref(h, OJ_F32, 2e-6);
}

static void test_sgd_reference(void **state) {
    (void)state;
    oj_optim_hparams h = oj_sgd_hparams(0.05);
    check_against_ref(h, OJ_F64, 1e-14);
    h.momentum = 0.9;
    h.dampening = 0.1;
    h.weight_decay = 0.01;
    check_against_ref(h, OJ_F64, 1e-14);
    h.dampening = 0;
    h.nesterov = true;
    check_against_ref(h, OJ_F64, 1e-14);
    check_against_ref(h, OJ_F32, 2e-6);
}

/* ---------------------------------------------------------------- Muon in f64 */

/* c[m x n] = a[m x k] b[k x n] */
static void mm(const double *a, const double *b, double *c, int m, int k, int n) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += a[i * k + l] * b[l * n + j];
            c[i * n + j] = s;
        }
}

/* Keller Jordan's zeropower_via_newtonschulz5 in double. g [r x c] -> x. */
static void ref_newton_schulz(const double *g, double *out, int r, int c, int steps) {
    const double a = 3.4445, b = -4.7750, cc = 2.0315;
    bool tall = r > c;
    int m = tall ? c : r, n = tall ? r : c; // X is [m x n], m <= n
    double *x = malloc(sizeof(double) * (size_t)(m * n)),
           *A = malloc(sizeof(double) * (size_t)(m * m));
    double *A2 = malloc(sizeof(double) * (size_t)(m * m)),
           *B = malloc(sizeof(double) * (size_t)(m * m));
    double *BX = malloc(sizeof(double) * (size_t)(m * n)),
           *xt = malloc(sizeof(double) * (size_t)(m * n));
    double norm = 0;
    for (int i = 0; i < r * c; i++) norm += g[i] * g[i];
    norm = sqrt(norm);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            double v = g[i * c + j] / (norm + 1e-7);
            if (tall)
                x[j * n + i] = v;
            else
                x[i * n + j] = v;
        }
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) xt[j * m + i] = x[i * n + j];
        mm(x, xt, A, m, n, m);
        mm(A, A, A2, m, m, m);
        for (int i = 0; i < m * m; i++) B[i] = b * A[i] + cc * A2[i];
        mm(B, x, BX, m, m, n);
        for (int i = 0; i < m * n; i++) x[i] = a * x[i] + BX[i];
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) out[i * c + j] = tall ? x[j * n + i] : x[i * n + j];
    free(x);
    free(A);
    free(A2);
    free(B);
    free(BX);
    free(xt);
}

static void muon_case(oj_dtype dt, int r, int c, double wd, double tol) {
    oj_engine *eng = eng_new();
    int n = r * c;
    int64_t shape[2] = {r, c};
    double *p0 = malloc(sizeof(double) * (size_t)n), *pr = malloc(sizeof(double) * (size_t)n);
    double *g = malloc(sizeof(double) * (size_t)n), *buf = calloc((size_t)n, sizeof(double));
    double *u = malloc(sizeof(double) * (size_t)n), *x = malloc(sizeof(double) * (size_t)n);
    double *got = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) p0[i] = pr[i] = (dt == OJ_F32) ? (float)rnd() : rnd();
    oj_tensor *p = param_new(eng, 2, shape, dt, p0);
    const char *name = "h.0.mlp.weight";
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams h = oj_muon_hparams(0.02);
    h.weight_decay = wd;
    oj_named_tensors nt = one(&name, &p);
    assert_int_equal(oj_optim_add_group(o, &h, &nt), 0);
    double lr = h.lr, mu = h.momentum, scale = sqrt(fmax(1.0, (double)r / c));
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < n; i++) g[i] = (dt == OJ_F32) ? (float)rnd() : rnd();
        set_grad(p, g);
        for (int i = 0; i < n; i++) {
            buf[i] = mu * buf[i] + g[i];
            u[i] = g[i] + mu * buf[i];
        }
        ref_newton_schulz(u, x, r, c, 5);
        for (int i = 0; i < n; i++) pr[i] = pr[i] * (1 - lr * wd) - lr * scale * x[i];
        assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
    }
    to_doubles(p, got);
    for (int i = 0; i < n; i++)
        if (fabs(got[i] - pr[i]) > tol)
            fail_msg("muon %s [%d, %d]: element %d: %.17g vs reference %.17g", oj_dtype_name(dt), r,
                     c, i, got[i], pr[i]);
    oj_optim_free(o);
    oj_release(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    free(p0);
    free(pr);
    free(g);
    free(buf);
    free(u);
    free(x);
    free(got);
}

static void test_muon_reference(void **state) {
    (void)state;
    muon_case(OJ_F64, 4, 6, 0.0, 1e-12); // wide
    muon_case(OJ_F64, 7, 3, 0.1, 1e-12); // tall: transposed, scaled by sqrt(7/3)
    muon_case(OJ_F32, 5, 8, 0.01, 2e-5); // f32 against the f64 reference
    muon_case(OJ_F32, 16, 4, 0.0, 2e-5);
}

static void test_newton_schulz_orthogonalises(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {8, 32};
    oj_tensor *g = oj_rand_normal(eng, 2, s, OJ_F64, 0, 1);
    oj_tensor *x = oj_newton_schulz5(g, 5);
    assert_non_null(x);
    // singular values of X land near 1 (the quintic's band is roughly [0.7, 1.2]):
    // the diagonal of X X^T is the sum of squares of each row
    oj_tensor *xxt = oj_matmul(x, oj_transpose(x, 0, 1));
    for (int i = 0; i < 8; i++) {
        double d = oj_item_at(xxt, i * 8 + i);
        assert_true(d > 0.3 && d < 1.6);
    }
    // errors: rank and dtype
    int64_t s1[1] = {4};
    assert_null(oj_newton_schulz5(oj_zeros(eng, 1, s1, OJ_F32), 5));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- skipping */

static void snapshot(oj_tensor *const *ts, int n, double *out) {
    for (int k = 0; k < n; k++) {
        to_doubles(ts[k], out);
        out += oj_numel(ts[k]);
    }
}

static void test_skip_nonfinite(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s[2] = {2, 3};
    double p0[6] = {1, 2, 3, 4, 5, 6}, g[6] = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6};
    oj_tensor *a = param_new(eng, 2, s, OJ_F32, p0);
    oj_tensor *m = param_new(eng, 2, s, OJ_F32, p0);
    const char *na = "a", *nm = "blocks.0.w";
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams adam = oj_adamw_hparams(1e-2, 0.1), muon = oj_muon_hparams(0.02);
    oj_named_tensors ta = one(&na, &a), tm = one(&nm, &m);
    assert_int_equal(oj_optim_add_group(o, &adam, &ta), 0);
    assert_int_equal(oj_optim_add_group(o, &muon, &tm), 1);
    set_grad(a, g);
    set_grad(m, g);
    assert_int_equal(oj_optim_step(o, NULL), OJ_OK);

    oj_named_tensors sd;
    assert_int_equal(oj_optim_state(o, &sd), OJ_OK);
    oj_tensor *watch[16];
    int nw = 0;
    watch[nw++] = a;
    watch[nw++] = m;
    for (int64_t i = 0; i < sd.n; i++) watch[nw++] = sd.tensors[i];
    double before[256], after[256];
    snapshot(watch, nw, before);

    // a NaN gradient: skipped, reported, nothing changed, not an engine error
    g[4] = NAN;
    set_grad(a, g);
    g[4] = 0.5;
    set_grad(m, g);
    oj_optim_step_info info;
    assert_int_equal(oj_optim_step(o, &info), OJ_ERR_NUMERIC);
    assert_true(info.skipped);
    assert_true(isnan(info.grad_norm));
    assert_int_equal(oj_optim_skipped_steps(o), 1);
    assert_int_equal(oj_optim_steps(o), 1);
    assert_non_null(strstr(oj_optim_message(o), "'a'"));
    assert_non_null(strstr(oj_optim_message(o), "not finite"));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    snapshot(watch, nw, after);
    assert_memory_equal(before, after, sizeof(double) * (size_t)(oj_numel(a) * 2));

    // an infinite gradient on the Muon parameter
    set_grad(a, g);
    g[0] = INFINITY;
    set_grad(m, g);
    g[0] = 0.1;
    assert_int_equal(oj_optim_step(o, &info), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_optim_message(o), "blocks.0.w"));

    // finite gradients but an update that overflows f32: skipped too
    oj_optim_group_hparams(o, 0)->lr = 1e38;
    set_grad(a, g);
    set_grad(m, g);
    assert_int_equal(oj_optim_step(o, &info), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_optim_message(o), "update of 'a'"));
    assert_int_equal(oj_optim_skipped_steps(o), 3);
    assert_int_equal(oj_optim_state(o, &sd), OJ_OK); // refreshes step tensors (unchanged)
    snapshot(watch, nw, after);
    int64_t total = 0;
    for (int k = 0; k < nw; k++) total += oj_numel(watch[k]);
    for (int64_t i = 0; i < total; i++) {
        // the counters tensor (skipped count) is the only thing allowed to change
        if (i >= 12 && i < 14) continue;
        if (before[i] != after[i])
            fail_msg("state element %lld changed on a skipped step", (long long)i);
    }

    // back to a sane lr: the step applies and the message clears
    oj_optim_group_hparams(o, 0)->lr = 1e-2;
    assert_int_equal(oj_optim_step(o, &info), OJ_OK);
    assert_false(info.skipped);
    assert_int_equal(info.params_updated, 2);
    assert_string_equal(oj_optim_message(o), "");
    assert_int_equal(oj_optim_steps(o), 2);

    // changing a group's algorithm is refused
    oj_optim_group_hparams(o, 0)->algo = OJ_OPTIM_SGD;
    assert_int_equal(oj_optim_step(o, NULL), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);

    oj_optim_free(o);
    oj_release(a);
    oj_release(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- clipping */

/* oj__optim_clip_grad_norm_then calls its callback once, after the norms
 * and before the grads are scaled (the trainer reads its losses there),
 * and clips as oj_optim_clip_grad_norm does. */
typedef struct {
    oj_tensor *p;
    int calls;
    double seen;
} clip_probe;

static void probe_grad(void *arg) {
    clip_probe *c = arg;
    c->calls++;
    c->seen = oj_item_at(oj_grad(c->p), 0);
}

static void test_clip_callback_before_scaling(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s2[1] = {2};
    double z2[2] = {0, 0};
    oj_tensor *p = param_new(eng, 1, s2, OJ_F64, z2);
    oj_optim *o = oj_optim_create(eng);
    const char *names[1] = {"p"};
    oj_named_tensors nt = {1, names, &p};
    oj_optim_hparams h = oj_sgd_hparams(0.1);
    assert_int_equal(oj_optim_add_group(o, &h, &nt), 0);
    set_grad(p, (double[]){3, 4});
    clip_probe c = {.p = p};
    assert_float_equal(oj__optim_clip_grad_norm_then(o, 1.0, probe_grad, &c), 5.0, 1e-12);
    assert_int_equal(c.calls, 1);
    assert_float_equal(c.seen, 3.0, 0); /* not yet scaled */
    double a = oj_item_at(oj_grad(p), 0);
    set_grad(p, (double[]){3, 4});
    assert_float_equal(oj_optim_clip_grad_norm(o, 1.0), 5.0, 1e-12);
    assert_memory_equal(&a, &(double){oj_item_at(oj_grad(p), 0)}, sizeof a);
    assert_float_equal(a, 3.0 / (5.0 + 1e-6), 1e-12);
    oj_optim_free(o);
    oj_release(p);
    oj_engine_free(eng);
}

static void test_clip_grad_norm(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s2[1] = {2}, s1[1] = {1};
    double z2[2] = {0, 0}, z1[1] = {0};
    oj_tensor *ps[3];
    ps[0] = param_new(eng, 1, s2, OJ_F64, z2);
    ps[1] = param_new(eng, 1, s1, OJ_F64, z1);
    ps[2] = param_new(eng, 1, s1, OJ_F64, z1); // no grad: counts as zero
    set_grad(ps[0], (double[]){3, 4});
    set_grad(ps[1], (double[]){12});
    assert_float_equal(oj_grad_norm(3, ps), 13.0, 1e-12);
    // below the limit: untouched
    assert_float_equal(oj_clip_grad_norm(3, ps, 20.0), 13.0, 1e-12);
    assert_float_equal(oj_item_at(oj_grad(ps[1]), 0), 12.0, 0);
    // above: scaled by max / (norm + 1e-6), returns the norm before clipping
    assert_float_equal(oj_clip_grad_norm(3, ps, 6.5), 13.0, 1e-12);
    double c = 6.5 / (13.0 + 1e-6);
    assert_float_equal(oj_item_at(oj_grad(ps[0]), 0), 3 * c, 1e-12);
    assert_float_equal(oj_item_at(oj_grad(ps[0]), 1), 4 * c, 1e-12);
    assert_float_equal(oj_item_at(oj_grad(ps[1]), 0), 12 * c, 1e-12);
    assert_float_equal(oj_grad_norm(3, ps), 6.5, 1e-6);
    // non-finite: returned as is, grads untouched
    set_grad(ps[1], (double[]){INFINITY});
    assert_true(isinf(oj_clip_grad_norm(3, ps, 1.0)));
    assert_float_equal(oj_item_at(oj_grad(ps[0]), 0), 3 * c, 1e-12);
    // f32, a length that is not a multiple of the kernel's 8 lanes: sqrt(1^2 + ... + 13^2)
    double z13[13] = {0}, g13[13];
    for (int i = 0; i < 13; i++) g13[i] = i + 1;
    oj_tensor *p13 = param_new(eng, 1, (int64_t[]){13}, OJ_F32, z13);
    set_grad(p13, g13);
    assert_float_equal(oj_grad_norm(1, &p13), sqrt(819.0), 1e-12);
    oj_release(p13);
    // bad max_norm
    assert_true(isnan(oj_clip_grad_norm(3, ps, 0.0)));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    // through an optimizer
    oj_optim *o = oj_optim_create(eng);
    const char *names[3] = {"a", "b", "c"};
    oj_named_tensors nt = {3, names, ps};
    oj_optim_hparams h = oj_sgd_hparams(0.1);
    assert_int_equal(oj_optim_add_group(o, &h, &nt), 0);
    set_grad(ps[1], (double[]){12});
    assert_float_equal(oj_optim_clip_grad_norm(o, 1.0), sqrt(25 * c * c + 144), 1e-9);
    assert_float_equal(oj_grad_norm(3, ps), 1.0, 1e-6);
    oj_optim_free(o);
    for (int i = 0; i < 3; i++) oj_release(ps[i]);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- schedules */

static void test_lr_schedules(void **state) {
    (void)state;
    oj_lr_schedule s = oj_lr_constant(0);
    assert_float_equal(oj_lr_schedule_factor(&s, 0), 1.0, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 1000), 1.0, 0);
    s = oj_lr_constant(4);
    assert_float_equal(oj_lr_schedule_factor(&s, 0), 0.25, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 3), 1.0, 0);

    s = oj_lr_cosine(10, 110, 0.1);
    assert_float_equal(oj_lr_schedule_factor(&s, 0), 0.1, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 4), 0.5, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 9), 1.0, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 10), 1.0, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 60), 0.55, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 35), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 4)), 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 110), 0.1, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 5000), 0.1, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, -3), 0.1, 1e-15);

    s = oj_lr_wsd(10, 100, 20, 0.0);
    assert_float_equal(oj_lr_schedule_factor(&s, 5), 0.6, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 50), 1.0, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 79), 1.0, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 80), 1.0, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 90), 0.5, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 95), 0.25, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 100), 0.0, 0);

    s = oj_lr_step(0, 30, 0.1);
    assert_float_equal(oj_lr_schedule_factor(&s, 29), 1.0, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 30), 0.1, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 65), 0.01, 1e-15);
    s = oj_lr_step(5, 10, 0.5);
    assert_float_equal(oj_lr_schedule_factor(&s, 2), 0.6, 1e-15);
    assert_float_equal(oj_lr_schedule_factor(&s, 14), 1.0, 0);
    assert_float_equal(oj_lr_schedule_factor(&s, 15), 0.5, 0);

    // invalid schedules: NaN and a message
    oj_error err = {0};
    s = oj_lr_cosine(10, 10, 0.1);
    assert_true(isnan(oj_lr_schedule_factor(&s, 0)));
    assert_int_equal(oj_lr_schedule_check(&s, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "total_steps"));
    s = oj_lr_wsd(10, 100, 91, 0.0);
    assert_int_equal(oj_lr_schedule_check(&s, NULL), OJ_ERR_INVALID_ARGUMENT);
    s = oj_lr_step(0, 0, 0.1);
    assert_int_equal(oj_lr_schedule_check(&s, NULL), OJ_ERR_INVALID_ARGUMENT);

    // the optimizer's lr scale multiplies every group's lr
    oj_engine *eng = eng_new();
    int64_t sh[1] = {1};
    oj_tensor *p = param_new(eng, 1, sh, OJ_F64, (double[]){1.0});
    const char *nm = "p";
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams h = oj_sgd_hparams(0.5);
    oj_named_tensors nt = one(&nm, &p);
    assert_int_equal(oj_optim_add_group(o, &h, &nt), 0);
    s = oj_lr_cosine(0, 10, 0.0);
    oj_optim_set_lr_scale(o, oj_lr_schedule_factor(&s, 5)); // 0.5
    assert_float_equal(oj_optim_lr_scale(o), 0.5, 1e-15);
    set_grad(p, (double[]){1.0});
    assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
    assert_float_equal(oj_item(p), 1.0 - 0.25, 1e-15);
    oj_optim_free(o);
    oj_release(p);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- split, groups */

static void test_muon_split_and_groups(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    const int64_t C = 4, V = 10;
    struct {
        const char *name;
        int rank;
        int64_t shape[2];
        int want; // 0 muon, 1 adamw, 2 adamw_1d
    } spec[] = {
        {"transformer.wte.weight", 2, {V, C}, 1},
        {"transformer.h.0.ln_1.weight", 1, {C}, 2},
        {"transformer.h.0.attn.c_attn.weight", 2, {3 * C, C}, 0},
        {"transformer.h.0.attn.c_attn.bias", 1, {3 * C}, 2},
        {"transformer.h.0.mlp.c_fc.weight", 2, {4 * C, C}, 0},
        {"transformer.h.0.norm_scale", 2, {1, C}, 1},
        {"lm_head.weight", 2, {V, C}, 1},
        {"frozen.weight", 2, {C, C}, -1},
    };
    enum { N = sizeof spec / sizeof spec[0] };
    const char *names[N];
    oj_tensor *ts[N];
    for (int i = 0; i < N; i++) {
        names[i] = spec[i].name;
        ts[i] = oj_zeros(eng, spec[i].rank, spec[i].shape, OJ_F32);
        oj_set_requires_grad(ts[i], spec[i].want >= 0);
    }
    assert_true(oj_muon_eligible("transformer.h.0.attn.c_attn.weight", ts[2], NULL));
    assert_false(oj_muon_eligible("lm_head.weight", ts[6], NULL));
    const char *mine[] = {"c_fc", NULL};
    assert_false(oj_muon_eligible("transformer.h.0.mlp.c_fc.weight", ts[4], mine));
    assert_true(oj_muon_eligible("lm_head.weight", ts[6], mine));

    oj_optim *o = oj_optim_create(eng);
    oj_named_tensors nt = {N, names, ts};
    oj_optim_hparams mu = oj_muon_hparams(0.02), aw = oj_adamw_hparams(6e-4, 0.1),
                     aw1 = oj_adamw_hparams(6e-4, 0.0);
    assert_int_equal(oj_optim_add_muon_split(o, &nt, &mu, &aw, &aw1, NULL), 0);
    assert_int_equal(oj_optim_group_count(o), 3);
    for (int g = 0; g < 3; g++)
        for (int64_t i = 0; i < oj_optim_group_size(o, g); i++) {
            const char *nm = oj_optim_param_name(o, g, i);
            int k = 0;
            while (strcmp(spec[k].name, nm) != 0) k++;
            if (spec[k].want != g)
                fail_msg("%s went to group %d, expected %d", nm, g, spec[k].want);
            assert_ptr_equal(oj_optim_param(o, g, i), ts[k]);
        }
    assert_int_equal(
        oj_optim_group_size(o, 0) + oj_optim_group_size(o, 1) + oj_optim_group_size(o, 2), 7);
    assert_int_equal(oj_optim_group_hparams(o, 1)->algo, OJ_OPTIM_ADAMW);
    assert_null(oj_optim_group_hparams(o, 3));
    // adding the same tensors again is refused and changes nothing
    assert_int_equal(oj_optim_add_muon_split(o, &nt, &mu, &aw, NULL, NULL), -1);
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    assert_int_equal(oj_optim_group_count(o), 3);
    oj_optim_free(o);

    // without adamw_1d, norms and biases join the AdamW group
    o = oj_optim_create(eng);
    assert_int_equal(oj_optim_add_muon_split(o, &nt, &mu, &aw, NULL, NULL), 0);
    assert_int_equal(oj_optim_group_count(o), 2);
    assert_int_equal(oj_optim_group_size(o, 1), 5);
    oj_optim_free(o);

    // add_group validation
    o = oj_optim_create(eng);
    oj_named_tensors bad = {1, &names[1], &ts[1]};
    assert_int_equal(oj_optim_add_group(o, &mu, &bad), -1); // Muon needs rank 2
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    const char *dup[2] = {"x", "x"};
    oj_tensor *two[2] = {ts[0], ts[2]};
    oj_named_tensors d = {2, dup, two};
    assert_int_equal(oj_optim_add_group(o, &aw, &d), -1);
    assert_non_null(strstr(oj_last_error(eng), "twice"));
    oj_clear_error(eng);
    oj_optim_hparams wrong = oj_adamw_hparams(1e-3, 0.0);
    wrong.beta1 = 1.0;
    oj_named_tensors ok1 = {1, &names[0], &ts[0]};
    assert_int_equal(oj_optim_add_group(o, &wrong, &ok1), -1);
    assert_non_null(strstr(oj_last_error(eng), "betas"));
    oj_clear_error(eng);
    oj_tensor *it = oj_zeros(eng, 1, (int64_t[]){3}, OJ_F16); // f32/f64 only
    oj_set_requires_grad(it, true);
    oj_named_tensors ints = {1, &names[0], &it};
    assert_int_equal(oj_optim_add_group(o, &aw, &ints), -1);
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    assert_int_equal(oj_optim_group_count(o), 0);
    oj_optim_free(o);
    oj_release(it);

    // a parameter without a grad is skipped and keeps its step count
    o = oj_optim_create(eng);
    oj_tensor *pa = param_new(eng, 1, (int64_t[]){2}, OJ_F64, (double[]){1, 2});
    oj_tensor *pb = param_new(eng, 1, (int64_t[]){2}, OJ_F64, (double[]){3, 4});
    const char *nab[2] = {"a", "b"};
    oj_tensor *tab[2] = {pa, pb};
    oj_named_tensors ab = {2, nab, tab};
    oj_optim_hparams ad = oj_adam_hparams(0.1);
    assert_int_equal(oj_optim_add_group(o, &ad, &ab), 0);
    set_grad(pa, (double[]){1, 1});
    oj_optim_step_info info;
    assert_int_equal(oj_optim_step(o, &info), OJ_OK);
    assert_int_equal(info.params_updated, 1);
    assert_float_equal(oj_item_at(pb, 0), 3.0, 0);
    assert_float_equal(oj_item_at(pa, 0), 0.9, 1e-7); // Adam's first step moves by lr
    oj_named_tensors sd;
    assert_int_equal(oj_optim_state(o, &sd), OJ_OK);
    for (int64_t i = 0; i < sd.n; i++) {
        if (strcmp(sd.names[i], "a.step") == 0) assert_float_equal(oj_item(sd.tensors[i]), 1, 0);
        if (strcmp(sd.names[i], "b.step") == 0) assert_float_equal(oj_item(sd.tensors[i]), 0, 0);
    }
    oj_optim_free(o);
    oj_release(pa);
    oj_release(pb);

    for (int i = 0; i < N; i++) oj_release(ts[i]);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- state_dict */

typedef struct {
    oj_tensor *p[3];
    oj_optim *o;
} rig;

static const char *rig_names[3] = {"emb.weight", "h.0.w", "head.bias"};

/* Adam on emb, Muon on h.0.w, SGD+momentum on head.bias. */
static rig rig_new(oj_engine *eng, int64_t cols) {
    rig r;
    int64_t s0[2] = {5, 3}, s1[2] = {4, cols}, s2[1] = {3};
    double v[64];
    g_lcg = 99;
    for (int i = 0; i < 64; i++) v[i] = rnd();
    r.p[0] = param_new(eng, 2, s0, OJ_F32, v);
    r.p[1] = param_new(eng, 2, s1, OJ_F32, v + 15);
    r.p[2] = param_new(eng, 1, s2, OJ_F32, v + 40);
    r.o = oj_optim_create(eng);
    oj_optim_hparams ad = oj_adamw_hparams(1e-2, 0.1), mu = oj_muon_hparams(0.02),
                     sgd = oj_sgd_hparams(0.1);
    sgd.momentum = 0.9;
    oj_named_tensors a = {1, &rig_names[0], &r.p[0]}, b = {1, &rig_names[1], &r.p[1]},
                     c = {1, &rig_names[2], &r.p[2]};
    assert_int_equal(oj_optim_add_group(r.o, &ad, &a), 0);
    assert_int_equal(oj_optim_add_group(r.o, &mu, &b), 1);
    assert_int_equal(oj_optim_add_group(r.o, &sgd, &c), 2);
    return r;
}

static void rig_steps(rig *r, int k, uint64_t seed) {
    g_lcg = seed;
    for (int s = 0; s < k; s++) {
        for (int i = 0; i < 3; i++) {
            double g[64];
            for (int j = 0; j < 64; j++) g[j] = rnd();
            set_grad(r->p[i], g);
        }
        assert_int_equal(oj_optim_step(r->o, NULL), OJ_OK);
    }
}

static void rig_free(rig *r) {
    oj_optim_free(r->o);
    for (int i = 0; i < 3; i++) oj_release(r->p[i]);
}

static void rig_copy_params(rig *dst, rig *src) {
    for (int i = 0; i < 3; i++) assert_int_equal(oj_copy_(dst->p[i], src->p[i]), OJ_OK);
}

static void assert_same_params(rig *a, rig *b) {
    for (int i = 0; i < 3; i++) {
        int64_t n = oj_numel(a->p[i]);
        for (int64_t j = 0; j < n; j++)
            if (oj_item_at(a->p[i], j) != oj_item_at(b->p[i], j))
                fail_msg("%s[%lld] differs after resume", rig_names[i], (long long)j);
    }
}

static void test_state_dict_round_trip(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    char dir[] = "/tmp/ojas_optim_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], bad[256], ck[256];
    snprintf(path, sizeof path, "%s/optim.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/other.safetensors", dir);
    snprintf(ck, sizeof ck, "%s/ckpt", dir);

    rig a = rig_new(eng, 6);
    rig_steps(&a, 3, 1);
    oj_error err = {0};
    assert_int_equal(oj_optim_save(a.o, path, &err), OJ_OK);

    oj_safetensors *st = NULL;
    assert_int_equal(oj_safetensors_open(path, &st, NULL), OJ_OK);
    assert_true(oj_safetensors_find(st, "emb.weight.exp_avg") >= 0);
    assert_true(oj_safetensors_find(st, "emb.weight.exp_avg_sq") >= 0);
    assert_true(oj_safetensors_find(st, "h.0.w.momentum_buffer") >= 0);
    assert_true(oj_safetensors_find(st, "head.bias.momentum_buffer") >= 0);
    assert_true(oj_safetensors_find(st, "h.0.w.step") >= 0);
    assert_true(oj_safetensors_find(st, "__optim__.counters") >= 0);
    assert_int_equal(oj_safetensors_count(st), 1 + 3 + 2 + 2);
    oj_safetensors_close(st);

    // resume: fresh optimizer on copied params, load, continue; bitwise equal
    rig b = rig_new(eng, 6);
    rig_copy_params(&b, &a);
    assert_int_equal(oj_optim_load(b.o, path, &err), OJ_OK);
    assert_int_equal(oj_optim_steps(b.o), 3);
    rig_steps(&a, 2, 7);
    rig_steps(&b, 2, 7);
    assert_same_params(&a, &b);

    // the same through a checkpoint directory and oj_optim_state_sync
    rig c = rig_new(eng, 6);
    rig_copy_params(&c, &a);
    oj_named_tensors sa, sc;
    assert_int_equal(oj_optim_state(a.o, &sa), OJ_OK);
    oj_named_tensors model = {3, rig_names, a.p};
    assert_int_equal(oj_checkpoint_save(ck, 5, &model, &sa, NULL, 0, &err), OJ_OK);
    char cdir[512];
    assert_int_equal(oj_checkpoint_path(ck, 5, cdir, sizeof cdir), OJ_OK);
    assert_int_equal(oj_optim_state(c.o, &sc), OJ_OK);
    oj_named_tensors cmodel = {3, rig_names, c.p};
    assert_int_equal(oj_checkpoint_load(cdir, &cmodel, &sc, NULL, &err), OJ_OK);
    assert_int_equal(oj_optim_state_sync(c.o), OJ_OK);
    assert_int_equal(oj_optim_steps(c.o), 5);
    rig_steps(&a, 2, 9);
    rig_steps(&c, 2, 9);
    assert_same_params(&a, &c);

    // strict refusal: another shape; nothing changes
    rig d = rig_new(eng, 5); // h.0.w is [4, 5] instead of [4, 6]
    rig_steps(&d, 1, 3);
    oj_named_tensors sd;
    assert_int_equal(oj_optim_state(d.o, &sd), OJ_OK);
    double before[512], after[512];
    int nb = 0;
    for (int64_t i = 0; i < sd.n; i++)
        for (int64_t j = 0; j < oj_numel(sd.tensors[i]); j++)
            before[nb++] = oj_item_at(sd.tensors[i], j);
    err = (oj_error){0};
    assert_int_equal(oj_optim_load(d.o, path, &err), OJ_ERR_SHAPE);
    assert_non_null(strstr(err.message, "h.0.w"));
    assert_int_equal(oj_optim_steps(d.o), 1);
    assert_int_equal(oj_optim_state(d.o, &sd), OJ_OK);
    nb = 0;
    for (int64_t i = 0; i < sd.n; i++)
        for (int64_t j = 0; j < oj_numel(sd.tensors[i]); j++)
            after[nb++] = oj_item_at(sd.tensors[i], j);
    assert_memory_equal(before, after, sizeof(double) * (size_t)nb);

    // missing and unexpected names
    oj_optim *e = oj_optim_create(eng);
    oj_named_tensors only = {1, &rig_names[0], &d.p[0]};
    oj_optim_hparams ad = oj_adamw_hparams(1e-2, 0.1);
    assert_int_equal(oj_optim_add_group(e, &ad, &only), 0);
    err = (oj_error){0};
    assert_int_equal(oj_optim_load(e, path, &err), OJ_ERR_SHAPE);
    assert_non_null(strstr(err.message, "unexpected"));
    assert_int_equal(oj_optim_save(e, bad, NULL), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_optim_load(a.o, bad, &err), OJ_ERR_SHAPE);
    assert_non_null(strstr(err.message, "missing"));
    // dtype mismatch: an f64 optimizer state for the same names
    oj_optim *f = oj_optim_create(eng);
    oj_tensor *p64 = param_new(eng, 2, (int64_t[]){5, 3}, OJ_F64, (double[15]){0});
    oj_named_tensors o64 = {1, &rig_names[0], &p64};
    assert_int_equal(oj_optim_add_group(f, &ad, &o64), 0);
    err = (oj_error){0};
    assert_int_equal(oj_optim_load(f, bad, &err), OJ_ERR_DTYPE);
    // a negative step count is corrupt
    int64_t neg = -4, two[2] = {0, 0};
    const char *ns[4] = {"__optim__.counters", "emb.weight.exp_avg", "emb.weight.exp_avg_sq",
                         "emb.weight.step"};
    float zeros[15] = {0};
    int64_t sh2[1] = {2}, sh[2] = {5, 3};
    oj_safetensors_entry ents[4] = {{ns[0], OJ_I64, 1, sh2, two},
                                    {ns[1], OJ_F32, 2, sh, zeros},
                                    {ns[2], OJ_F32, 2, sh, zeros},
                                    {ns[3], OJ_I64, 0, NULL, &neg}};
    assert_int_equal(oj_safetensors_write(bad, 4, ents, NULL, NULL), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_optim_load(e, bad, &err), OJ_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "emb.weight.step"));
    neg = 4;
    assert_int_equal(oj_safetensors_write(bad, 4, ents, NULL, NULL), OJ_OK);
    assert_int_equal(oj_optim_load(e, bad, NULL), OJ_OK);

    oj_optim_free(e);
    oj_optim_free(f);
    oj_release(p64);
    rig_free(&a);
    rig_free(&b);
    rig_free(&c);
    rig_free(&d);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- non-finite input (a NaN matrix to oj_newton_schulz5, NaN/Inf gradients
 * for every algorithm) and parameters whose data changed after the
 * optimizer was made (oj_set_data to a bigger or expanded tensor,
 * oj_gpt_to_dtype): refused with a named error, nothing written. Each case
 * runs on a fresh engine `case_eng` (engine_testutil.h). */

/* sum(p * p) backward: p's gradient 2 p. */
static void grad_of_square(oj_tensor *p) {
    oj_scope_begin(case_eng);
    oj_tensor *y = oj_sum(oj_mul(p, p), 0, NULL, false);
    assert_int_equal(oj_backward(y, false), OJ_OK);
    oj_scope_end(case_eng);
}

static oj_optim *optim_of(oj_tensor *p, oj_optim_hparams hp) {
    const char *names[1] = {"w"};
    oj_tensor *ts[1] = {p};
    oj_named_tensors nt = {.n = 1, .names = names, .tensors = ts};
    oj_optim *o = oj_optim_create(case_eng);
    assert_non_null(o);
    assert_int_equal(oj_optim_add_group(o, &hp, &nt), 0);
    return o;
}

/* oj_newton_schulz5 of a NaN matrix: NULL with OJ_ERR_NUMERIC naming it;
 * a finite matrix afterwards works. */
static void test_newton_schulz_nan_input(void **state) {
    (void)state;
    oj_clear_error(case_eng);
    oj_tensor *g = oj_full(case_eng, 2, (int64_t[]){3, 4}, OJ_F32, NAN);
    assert_null(oj_newton_schulz5(g, 5));
    assert_int_equal(oj_last_status(case_eng), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_last_error(case_eng), "newton_schulz5"));
    oj_clear_error(case_eng);
    /* a finite one still works afterwards */
    oj_fill_(g, 1.0);
    oj_tensor *x = oj_newton_schulz5(g, 5);
    assert_non_null(x);
    oj_release(x);
    oj_release(g);
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
}

/* Every algorithm skips a step whose gradient is NaN or Inf and leaves the
 * parameter as it was. */
static void test_non_finite_grad_skips_every_algo(void **state) {
    (void)state;
    for (int a = 0; a < 4; a++) {
        oj_tensor *w = oj_ones(case_eng, 2, (int64_t[]){4, 4}, OJ_F32);
        oj_set_requires_grad(w, true);
        const char *names[1] = {"w"};
        oj_tensor *ts[1] = {w};
        oj_named_tensors nt = {1, names, ts};
        oj_optim *o = oj_optim_create(case_eng);
        oj_optim_hparams hp = a == 0   ? oj_sgd_hparams(0.1)
                              : a == 1 ? oj_adam_hparams(0.1)
                              : a == 2 ? oj_adamw_hparams(0.1, 0.1)
                                       : oj_muon_hparams(0.02);
        assert_int_equal(oj_optim_add_group(o, &hp, &nt), 0);
        for (int k = 0; k < 2; k++) {
            oj_scope_begin(case_eng);
            oj_tensor *c = oj_full(case_eng, 2, (int64_t[]){4, 4}, OJ_F32, k ? INFINITY : NAN);
            assert_int_equal(oj_backward(oj_sum_all(oj_mul(w, c)), false), OJ_OK);
            oj_scope_end(case_eng);
            oj_optim_step_info info;
            assert_int_equal(oj_optim_step(o, &info), OJ_ERR_NUMERIC);
            assert_true(info.skipped);
            assert_int_equal(oj_last_status(case_eng), OJ_OK);
            assert_true(oj_item_at(w, 0) == 1.0);
            oj_optim_zero_grad(o);
        }
        assert_int_equal(oj_optim_skipped_steps(o), 2);
        assert_int_equal(oj_optim_steps(o), 0);
        oj_optim_free(o);
        oj_release(w);
    }
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
}

/* A parameter made bigger by oj_set_data after its optimizer was made:
 * AdamW's step is OJ_ERR_STATE naming both shapes, nothing written (the
 * moment buffers are not overrun). */
static void test_optim_after_set_data_bigger(void **state) {
    (void)state;
    int64_t n = 4, big = 1000;
    oj_tensor *p = oj_set_requires_grad(oj_full(case_eng, 1, &n, OJ_F32, 1.0), true);
    oj_optim *o = optim_of(p, oj_adamw_hparams(0.1, 0.1));
    oj_tensor *src = oj_full(case_eng, 1, &big, OJ_F32, 2.0);
    assert_int_equal(oj_set_data(p, src), OJ_OK);
    grad_of_square(p);
    assert_int_equal(oj_optim_step(o, NULL), OJ_ERR_STATE);
    ET_EXPECT_ERR_HAS(OJ_ERR_STATE, "parameter 'w' is now f32 [1000] but its optimizer state is f32 [4]");
    for (int64_t i = 0; i < big; i += 333) assert_true(oj_item_at(p, i) == 2.0);
    assert_int_equal(oj_optim_steps(o), 0);
    oj_optim_free(o);
    oj_release(src);
    oj_release(p);
}

/* A parameter whose data became a view expanded from one element: SGD
 * with momentum refuses it as no longer contiguous (OJ_ERR_INVALID_ARGUMENT),
 * nothing written through the view. */
static void test_optim_after_set_data_expanded(void **state) {
    (void)state;
    int64_t s2[2] = {2, 3}, one = 1;
    oj_tensor *p = oj_set_requires_grad(oj_full(case_eng, 2, s2, OJ_F32, 1.0), true);
    oj_optim_hparams hp = oj_sgd_hparams(0.1);
    hp.momentum = 0.9;
    oj_optim *o = optim_of(p, hp);
    oj_tensor *v = oj_full(case_eng, 1, &one, OJ_F32, 5.0);
    oj_tensor *ex = oj_expand(v, 2, s2);
    assert_int_equal(oj_set_data(p, ex), OJ_OK); /* allowed, as param.data = x.expand(..) */
    grad_of_square(p);
    assert_int_equal(oj_optim_step(o, NULL), OJ_ERR_INVALID_ARGUMENT);
    ET_EXPECT_ERR_HAS(OJ_ERR_INVALID_ARGUMENT, "parameter 'w' [2, 3] is no longer contiguous");
    assert_true(oj_item(v) == 5.0);
    oj_optim_free(o);
    oj_release(ex);
    oj_release(v);
    oj_release(p);
}

/* A model converted by oj_gpt_to_dtype after its optimizer was made: f64
 * is OJ_ERR_STATE naming the dtypes, bf16 OJ_ERR_DTYPE naming the
 * replaced data; no weight changes. An optimizer made after the conversion
 * works (f64) or refuses at once (bf16). */
static void test_optim_after_params_to_dtype(void **state) {
    (void)state;
    const oj_dtype dts[2] = {OJ_F64, OJ_BF16};
    const oj_status want[2] = {OJ_ERR_STATE, OJ_ERR_DTYPE};
    const char *frag[2] = {"is now f64 [50, 64] but its optimizer state is f32 [50, 64]",
                           "is now bf16 (its data was replaced after it was added)"};
    for (int k = 0; k < 2; k++) {
        oj_gpt *m = gt_tiny_model(case_eng, "nanolab-tiny", 0);
        oj_named_tensors sd = oj_gpt_state_dict(m);
        oj_optim *o = oj_optim_create(case_eng);
        oj_optim_hparams hp = oj_adamw_hparams(1e-3, 0.1);
        assert_int_equal(oj_optim_add_group(o, &hp, &sd), 0);
        assert_int_equal(oj_gpt_to_dtype(m, dts[k]), OJ_OK);
        double before = gt_checksum(m);
        oj_scope_begin(case_eng);
        oj_tensor *idx = gt_ids(case_eng, 2, 8);
        assert_int_equal(oj_backward(oj_gpt_loss(m, idx, idx), false), OJ_OK);
        oj_scope_end(case_eng);
        assert_int_equal(oj_optim_step(o, NULL), want[k]);
        ET_EXPECT_ERR_HAS(want[k], frag[k]);
        assert_true(gt_checksum(m) == before);
        oj_optim_free(o);
        /* an optimizer made after the conversion works (f64) or refuses
         * at once (bf16, as before) */
        o = oj_optim_create(case_eng);
        if (dts[k] == OJ_F64) {
            assert_int_equal(oj_optim_add_group(o, &hp, &sd), 0);
            assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
            assert_true(gt_checksum(m) != before);
        } else {
            assert_int_equal(oj_optim_add_group(o, &hp, &sd), -1);
            ET_EXPECT_ERR_HAS(OJ_ERR_DTYPE, "is bf16; f32 or f64 expected");
        }
        oj_optim_free(o);
        oj_gpt_free(m);
    }
    assert_int_equal(oj_engine_live_tensors(case_eng), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_reference),
        cmocka_unit_test(test_adam_reference),
        cmocka_unit_test(test_sgd_reference),
        cmocka_unit_test(test_muon_reference),
        cmocka_unit_test(test_newton_schulz_orthogonalises),
        cmocka_unit_test(test_skip_nonfinite),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_clip_callback_before_scaling),
        cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_muon_split_and_groups),
        cmocka_unit_test(test_state_dict_round_trip),
        cmocka_unit_test_setup_teardown(test_newton_schulz_nan_input, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_non_finite_grad_skips_every_algo, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_optim_after_set_data_bigger, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_optim_after_set_data_expanded, et_engine_in, et_engine_out),
        cmocka_unit_test_setup_teardown(test_optim_after_params_to_dtype, et_engine_in, et_engine_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
