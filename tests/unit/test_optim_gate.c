/* The gated optimizer step's host logic (src/optim/step.c, step_gated) on
 * the CPU: a CPU engine whose backend table gains the gate entries,
 * emulated here by the contract backend.h gives them (the gate in host
 * memory; the gated entries read each gradient scaled by the clip factor
 * through mul_scalar_multi, write nothing when the skip word is set, and
 * set it instead of returning OJ_ERR_NUMERIC in a check pass; the Muon
 * multi-tensor entries call the per-tensor ones in turn), trains
 * beside a plain CPU engine's clip-then-step bit for bit (og_compare). The
 * CUDA gate itself is checked against the same contract in
 * tests/gpu/test_gpu_ops.c (test_step_gate) and end to end in
 * tests/gpu/test_gpu_train.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "graph_emu_testutil.h"
#include "optim_gate_testutil.h"
#include "optim_testutil.h"

static oj_backend emu;             /* the CPU table plus the emulated gate */
static const oj_backend *cpu_table; /* the CPU's own */
static double *gate_words;          /* the open gate (host memory), or NULL */
static int gate_opens;

static int64_t gate_n;    /* the open gate's tensors */
static int safe_skips;    /* check passes the safe word skipped */

static oj_status emu_open(oj_engine *eng, int64_t n, const oj_tensor *const *grads,
                          double max_norm, double safe_norm, oj_tensor *gate) {
    if (gate_words != NULL) return oj_set_error(eng, OJ_ERR_STATE, "emulated gate: already open");
    double *w = (double *)((char *)gate->storage->data + gate->offset);
    double *ss = calloc((size_t)(n ? n : 1), sizeof *ss);
    assert_non_null(ss);
    oj_status st = n ? cpu_table->sum_squares_multi(eng, n, grads, ss) : OJ_OK;
    double sum = 0.0, skip = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = sqrt(ss[i]);
        if (!isfinite(v)) skip = 1.0;
        sum += v * v;
        w[4 + i] = v;
    }
    free(ss);
    double norm = sqrt(sum), coef = 1.0;
    if (max_norm > 0 && isfinite(norm) && max_norm / (norm + 1e-6) < 1.0)
        coef = max_norm / (norm + 1e-6);
    w[0] = sum, w[1] = coef, w[2] = skip, w[3] = norm;
    w[4 + n] = isfinite(norm) && norm <= safe_norm ? 1.0 : 0.0;
    for (int64_t i = 0; i < 2 * n; i++) w[5 + n + i] = 0.0;
    if (st == OJ_OK) gate_words = w, gate_n = n, gate_opens++;
    return st;
}

/* The float at least |x| (x itself when an f32 value). */
static float up_float(double x) {
    float f = (float)fabs(x);
    return (double)f < fabs(x) ? nextafterf(f, INFINITY) : f;
}

/* The writing pass's bounds of a tensor's new values (backend.h,
 * oj_adam_args.bound_at): max |p|, |m| and v (+inf for a negative v) as
 * the f32 bits atomicMax would leave. */
static void emu_bounds(const oj_tensor *p, const oj_tensor *m, const oj_tensor *v, int64_t at) {
    const oj_tensor *t[3] = {p, m, v};
    uint32_t *out = (uint32_t *)(gate_words + at);
    for (int k = 0; k < 3; k++) {
        const char *base = (const char *)t[k]->storage->data + t[k]->offset;
        bool f64 = oj_tensor_dtype(t[k]) == OJ_F64;
        for (int64_t i = 0; i < oj_numel(t[k]); i++) {
            double x = f64 ? ((const double *)base)[i] : ((const float *)base)[i];
            float a = k == 2 && x < 0 ? INFINITY : up_float(x);
            uint32_t b;
            memcpy(&b, &a, 4);
            if (b > out[k]) out[k] = b;
        }
    }
}

static void emu_close(oj_engine *eng) {
    (void)eng;
    gate_words = NULL;
}

/* g as the gated entries read it: a scaled copy (released by the caller)
 * when the factor is not 1, else g itself. */
static const oj_tensor *scaled(oj_engine *eng, const oj_tensor *g, oj_tensor **hold) {
    *hold = NULL;
    if (gate_words[1] == 1.0) return g;
    oj_tensor *c = oj__clone((oj_tensor *)g);
    assert_non_null(c);
    assert_int_equal(cpu_table->mul_scalar_multi(eng, 1, &c, gate_words[1]), OJ_OK);
    *hold = c;
    return c;
}

/* A check pass's verdict into the skip word. */
static oj_status verdict(oj_status st) {
    if (st == OJ_ERR_NUMERIC) {
        if (gate_words[2] == 0.0) gate_words[2] = 2.0;
        return OJ_OK;
    }
    return st;
}

static oj_status emu_adam(oj_engine *eng, oj_tensor *p, const oj_tensor *g, oj_tensor *m,
                          oj_tensor *v, const oj_adam_args *a, bool check) {
    if (gate_words == NULL) return cpu_table->adam_step(eng, p, g, m, v, a, check);
    if (gate_words[2] != 0.0) return OJ_OK;
    oj_tensor *hold;
    const oj_tensor *gs = scaled(eng, g, &hold);
    oj_status st = cpu_table->adam_step(eng, p, gs, m, v, a, check);
    oj_release(hold);
    return check ? verdict(st) : st;
}

static oj_status emu_adam_multi(oj_engine *eng, int64_t n, oj_tensor *const *p,
                                const oj_tensor *const *g, oj_tensor *const *m,
                                oj_tensor *const *v, const oj_adam_args *a, bool check) {
    if (gate_words == NULL) return cpu_table->adam_step_multi(eng, n, p, g, m, v, a, check);
    if (gate_words[2] != 0.0) return OJ_OK;
    if (check && gate_words[4 + gate_n] != 0.0) { /* proven finite by the host */
        safe_skips++;
        return OJ_OK;
    }
    oj_tensor **hold = calloc((size_t)(n ? n : 1), sizeof *hold);
    const oj_tensor **gs = calloc((size_t)(n ? n : 1), sizeof *gs);
    assert_true(hold && gs);
    for (int64_t i = 0; i < n; i++) gs[i] = scaled(eng, g[i], &hold[i]);
    oj_status st = cpu_table->adam_step_multi(eng, n, p, gs, m, v, a, check);
    for (int64_t i = 0; i < n && st == OJ_OK && !check; i++)
        if (a[i].bound_at > 0) emu_bounds(p[i], m[i], v[i], a[i].bound_at);
    for (int64_t i = 0; i < n; i++) oj_release(hold[i]);
    free(hold);
    free(gs);
    return check ? verdict(st) : st;
}

static oj_status emu_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *g,
                                   oj_tensor *u, double mu, bool nesterov) {
    if (gate_words == NULL) return cpu_table->muon_momentum(eng, buf, g, u, mu, nesterov);
    if (u == NULL && gate_words[2] != 0.0) return OJ_OK;
    oj_tensor *hold;
    const oj_tensor *gs = scaled(eng, g, &hold);
    oj_status st = cpu_table->muon_momentum(eng, buf, gs, u, mu, nesterov);
    oj_release(hold);
    return st;
}

static oj_status emu_apply(oj_engine *eng, oj_tensor *p, const oj_tensor *u, double alpha,
                           double scale, double decay, bool check) {
    if (gate_words == NULL) return cpu_table->apply_update(eng, p, u, alpha, scale, decay, check);
    if (gate_words[2] != 0.0) return OJ_OK;
    oj_status st = cpu_table->apply_update(eng, p, u, alpha, scale, decay, check);
    return check ? verdict(st) : st;
}

static int multi_calls; /* calls of the emulated Muon multi-tensor entries */

static oj_status emu_momentum_multi(oj_engine *eng, int64_t n, oj_tensor *const *bufs,
                                    const oj_tensor *const *g, oj_tensor *const *u, double mu,
                                    bool nesterov) {
    multi_calls++;
    oj_status st = OJ_OK;
    for (int64_t i = 0; i < n && st == OJ_OK; i++)
        st = emu_muon_momentum(eng, bufs[i], g[i], u ? u[i] : NULL, mu, nesterov);
    return st;
}

static oj_status emu_apply_multi(oj_engine *eng, int64_t n, oj_tensor *const *p,
                                 const oj_tensor *const *u, const double *alpha,
                                 const double *scale, const double *decay, bool check,
                                 oj_tensor *const *lows) {
    assert_null(lows); /* low_copies is not set: the optimizer passes none */
    multi_calls++;
    oj_status st = OJ_OK, bad = OJ_OK;
    for (int64_t i = 0; i < n && st == OJ_OK; i++) {
        st = emu_apply(eng, p[i], u[i], alpha[i], scale[i], decay[i], check);
        if (st == OJ_ERR_NUMERIC) bad = st, st = OJ_OK; /* one status for the call */
    }
    return st != OJ_OK ? st : bad;
}

static oj_engine *emulated_engine(void) {
    oj_engine *eng = ot_engine(OJ_NUMERICS_EXACT, 1);
    cpu_table = eng->backend;
    emu = *cpu_table;
    emu.step_gate_open = emu_open;
    emu.step_gate_close = emu_close;
    emu.adam_step = emu_adam;
    emu.adam_step_multi = emu_adam_multi;
    emu.muon_momentum = emu_muon_momentum;
    emu.apply_update = emu_apply;
    emu.muon_momentum_multi = emu_momentum_multi;
    emu.apply_update_multi = emu_apply_multi;
    ge_install(&emu); /* and graphs, for test_replayed_write_refuses */
    eng->backend = &emu;
    return eng;
}

/* Frees ea (an emulated_engine, its CPU table put back first) and eb. */
static void engines_free(oj_engine *ea, oj_engine *eb) {
    ea->backend = cpu_table;
    oj_engine_free(ea);
    oj_engine_free(eb);
}

/* The gated side a on an emulated_engine ea beside the checked side b on
 * a plain CPU engine eb, from the same parameters (og_side_make). */
typedef struct {
    oj_engine *ea, *eb;
    og_side a, b;
} gate_pair;

/* Both engines and sides made, and step 0 taken by both (og_step_both). */
static void pair_make(gate_pair *p) {
    p->ea = emulated_engine();
    p->eb = ot_engine(OJ_NUMERICS_EXACT, 1);
    og_side_make(p->ea, &p->a);
    og_side_make(p->eb, &p->b);
    assert_int_equal(og_step_both(&p->a, &p->b, 0), OJ_OK);
}

static void pair_free(gate_pair *p) {
    og_side_free(&p->a);
    og_side_free(&p->b);
    engines_free(p->ea, p->eb);
}

/* The gated step (its host side: one gate read-back, the verdict, the
 * skip messages, the bookkeeping) trains as clip-then-step does. */
static void test_gated_step_matches_checked(void **state) {
    (void)state;
    oj_engine *ea = emulated_engine(), *eb = ot_engine(OJ_NUMERICS_EXACT, 1);
    gate_opens = multi_calls = safe_skips = 0;
    setenv("OJAS_CUDA_ADAMW1", "0", 1); /* off: the check pass every step */
    og_compare(ea, eb, true, false);
    unsetenv("OJAS_CUDA_ADAMW1");
    assert_int_equal(safe_skips, 0);
    assert_int_equal(og_last_proven, 0);
    gate_opens = multi_calls = safe_skips = 0;
    og_compare(ea, eb, true, false); /* the default: the proven check */
    assert_int_equal(gate_opens, 6); /* every step took the gate */
    /* steps 1 and 2 on the bounds of the writes before them (step 0 has
     * none, step 3 is skipped for its infinite gradient, step 4's
     * scale.x was refilled and step 5 follows that skipped step) */
    assert_int_equal(safe_skips, 2);
    assert_int_equal(og_last_proven, 2);
    assert_true(multi_calls > 0);    /* and the Muon multi-tensor entries */
    /* with the next step's work queued ahead of the read-back: the same
     * bits, the proven check alike, the rewind before the refused update */
    gate_opens = safe_skips = 0;
    og_compare(ea, eb, true, true);
    assert_int_equal(gate_opens, 6);
    assert_int_equal(safe_skips, 2);
    assert_null(gate_words);         /* and closed it */
    engines_free(ea, eb);
}

/* A parameter written through an exported pointer (oj_data_ptr: no
 * version bump) to a value whose update overflows: the gated step refuses
 * it as the checked step does, though its bounds of the last write were
 * valid a step before (the write is unseen: an exported storage never has
 * valid bounds, then or later). */
static void test_exported_write_refuses(void **state) {
    (void)state;
    gate_pair p;
    pair_make(&p);
    og_side *a = &p.a, *b = &p.b;
    assert_int_equal(og_step_both(a, b, 1), OJ_OK);
    assert_int_equal(a->o->checks_proven, 1); /* step 1 ran on step 0's bounds */
    float *pa = oj_data_ptr(a->w[4]), *pb = oj_data_ptr(b->w[4]); /* scale.x, Adam with L2 */
    assert_non_null(pa);
    assert_non_null(pb);
    *pa = *pb = 3e38f;
    assert_int_equal(og_step_both(a, b, 2), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_optim_message(a->o), "update of 'scale.x'"));
    *pa = *pb = 0.5f;
    for (int step = 3; step < 5; step++) assert_int_equal(og_step_both(a, b, step), OJ_OK);
    assert_int_equal(a->o->checks_proven, 1); /* never again over the exported storage */
    pair_free(&p);
}

/* A graph that writes a parameter in place (oj_copy_ from a static
 * input), replayed after the input was given a value whose update
 * overflows: the next gated step refuses it as the checked step does,
 * though the bounds of the parameter's last write were valid a step
 * before (each replay moves the version the capture moved once). The
 * graph's entries are emulated on the host (graph_emu_testutil.h);
 * tests/gpu/test_gpu_train.c runs the same on a CUDA graph. */
static void test_replayed_write_refuses(void **state) {
    (void)state;
    gate_pair p;
    pair_make(&p);
    oj_engine *ea = p.ea;
    og_side *a = &p.a, *b = &p.b;
    bool prev = oj_set_grad_enabled(ea, false);
    oj_tensor *in = oj_clone(a->w[4]); /* scale.x's value: Adam with an L2 term */
    assert_non_null(in);
    assert_int_equal(oj_graph_capture_begin(ea), OJ_OK);
    assert_int_equal(oj_copy_(a->w[4], in), OJ_OK);
    oj_graph *g = oj_graph_capture_end(ea);
    oj_set_grad_enabled(ea, prev);
    assert_non_null(g);
    ge_replay_copies(1, &a->w[4], &in);
    ge_replays = 0;
    assert_int_equal(og_step_both(a, b, 1), OJ_OK); /* the capture moved the version */
    assert_int_equal(og_step_both(a, b, 2), OJ_OK);
    assert_int_equal(a->o->checks_proven, 1); /* step 2 ran on step 1's bounds */
    og_fill(in, 3e38);
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    assert_int_equal(ge_replays, 1);
    og_fill(b->w[4], 3e38);
    assert_int_equal(og_step_both(a, b, 3), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_optim_message(a->o), "update of 'scale.x'"));
    og_fill(a->w[4], 0.5);
    og_fill(b->w[4], 0.5);
    for (int step = 4; step < 6; step++) assert_int_equal(og_step_both(a, b, step), OJ_OK);
    /* step 5 on step 4's bounds: the graph, not replayed since, takes nothing away */
    assert_int_equal(a->o->checks_proven, 2);
    oj_graph_free(g);
    oj_release(in);
    pair_free(&p);
}

/* An SGD group keeps the checked path (the gate has no SGD kernel). */
static void test_sgd_keeps_checked_path(void **state) {
    (void)state;
    oj_engine *eng = emulated_engine();
    gate_opens = 0;
    int64_t shape[1] = {8};
    oj_tensor *w = oj_set_requires_grad(oj_full(eng, 1, shape, OJ_F32, 1.0), true);
    oj_tensor *g = oj_full(eng, 1, shape, OJ_F32, 3.0);
    assert_non_null(w);
    assert_non_null(g);
    oj__scope_detach(w);
    oj__scope_detach(g);
    ot_set_grad(w, g);
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams sgd = oj_sgd_hparams(0.1);
    const char *names[1] = {"w"};
    oj_named_tensors p = {1, names, &w};
    assert_int_equal(oj_optim_add_group(o, &sgd, &p), 0);
    double norm = NAN;
    assert_int_equal(oj__optim_clip_step(o, 1.0, &norm, NULL), OJ_OK);
    assert_int_equal(gate_opens, 0);
    assert_true(fabs(norm - sqrt(72.0)) < 1e-12);
    float out[8];
    assert_int_equal(oj_to_host(w, out, sizeof out), OJ_OK);
    /* w = 1 - 0.1 * 3 / (sqrt(72) + 1e-6) in f32 */
    assert_true(fabsf(out[0] - (float)(1.0 - 0.1 * 3.0 / sqrt(72.0))) < 1e-6f);
    oj_optim_free(o);
    oj_release(w);
    oj_release(g);
    eng->backend = cpu_table;
    oj_engine_free(eng);
}

// test: the proven check's bound is sound: for random hyperparameters (Adam and AdamW, eps down to 1e-30, lr up to 10, weight decay up to 100, early steps) and state bounds up to 1e36, the CPU's Adam kernel (the CUDA kernels' bits) finds every update at the corners p = +-P, m = +-M, v = V, g = +-G, +-G / 3 finite with G = oj__optim_adam_safe_grad, and at 4096 G some case overflows (the bound is not vacuous)
static void test_safe_grad_sound(void **state) {
    (void)state;
    oj_engine *eng = ot_engine(OJ_NUMERICS_EXACT, 1);
    uint64_t rs = 0x1234567887654321ull;
    int proven = 0, caught = 0;
    for (int trial = 0; trial < 400; trial++) {
        double u[10];
        for (int k = 0; k < 10; k++) u[k] = (ot_rnd(&rs) + 1) / 2; /* [0, 1) */
        double b1 = 0.5 + 0.499 * u[0], b2 = 0.9 + 0.0999 * u[1], step = 1 + (int)(u[2] * 5);
        oj_adam_args a = {.lr = pow(10, -5 + 6 * u[3]), .beta1 = b1, .beta2 = b2,
                          .eps = pow(10, -30 + 24 * u[4]), .weight_decay = u[5] < 0.3 ? 0 : pow(10, -3 + 5 * u[5]),
                          .bias_correction1 = 1 - pow(b1, step), .bias_correction2 = 1 - pow(b2, step),
                          .decoupled = u[6] < 0.5};
        float bnd[3] = {(float)pow(10, -3 + 39 * u[7]), (float)pow(10, -3 + 39 * u[8]),
                        (float)pow(10, -3 + 39 * u[9])};
        double G = oj__optim_adam_safe_grad(&a, bnd);
        if (G < 0) continue;
        proven++;
        /* the 4 x 2 x 2 x 1 corners, as one tensor of 16 elements */
        float pv[16], mv[16], vv[16], gv[16];
        for (int i = 0; i < 16; i++) {
            pv[i] = i & 1 ? -bnd[0] : bnd[0];
            mv[i] = i & 2 ? -bnd[1] : bnd[1];
            vv[i] = bnd[2];
            double g = (i & 4 ? -G : G) / (i & 8 ? 3.0 : 1.0);
            gv[i] = (float)g;
            if (fabsf(gv[i]) > (float)G) gv[i] = nextafterf(gv[i], 0.0f);
        }
        for (int scale = 0; scale < 2; scale++) {
            float gs[16];
            for (int i = 0; i < 16; i++) gs[i] = scale ? gv[i] * 4096.0f : gv[i];
            int64_t n = 16;
            oj_tensor *p = oj_from_host(eng, 1, &n, OJ_F32, pv, sizeof pv);
            oj_tensor *m = oj_from_host(eng, 1, &n, OJ_F32, mv, sizeof mv);
            oj_tensor *v = oj_from_host(eng, 1, &n, OJ_F32, vv, sizeof vv);
            oj_tensor *g = oj_from_host(eng, 1, &n, OJ_F32, gs, sizeof gs);
            assert_true(p && m && v && g);
            oj_status st = eng->backend->adam_step(eng, p, g, m, v, &a, true);
            if (scale == 1 && st == OJ_ERR_NUMERIC) caught++;
            if (scale == 0 && st != OJ_OK)
                fail_msg("trial %d: G %g proven for P %g M %g V %g lr %g eps %g wd %g %s, but an "
                         "update is not finite", trial, G, bnd[0], bnd[1], bnd[2], a.lr, a.eps,
                         a.weight_decay, a.decoupled ? "AdamW" : "Adam");
            oj_release(p);
            oj_release(m);
            oj_release(v);
            oj_release(g);
        }
    }
    printf("  %d of 400 random cases proven, %d of them not finite at 4096 G\n", proven, caught);
    assert_true(proven > 100);
    assert_true(caught > 0); /* the bound is not far from the edge everywhere */
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safe_grad_sound),
        cmocka_unit_test(test_gated_step_matches_checked),
        cmocka_unit_test(test_exported_write_refuses),
        cmocka_unit_test(test_replayed_write_refuses),
        cmocka_unit_test(test_sgd_keeps_checked_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
