/* The trainer on a CUDA device: its step as a CUDA graph (each batch
 * uploaded from the loader's host buffer straight into the graph's static
 * inputs) trains exactly as its eager step under EXACT numerics (losses,
 * grad norms, val losses and parameters, bit for bit), and
 * oj_bench_trainer times that very step. The gated optimizer step and its
 * proven check: the checked step's bits, its refusals after a replayed
 * graph wrote a parameter, kept weight copies fresh after such a replay,
 * and the trainer's own graph leaving the proof on. Skips (77) without a
 * CUDA device. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../unit/train_testutil.h"
#include "core/internal.h"
#include "gpu_testutil.h"
#include "ojas/ojas.h"
#include "train/train_internal.h"
#include "../unit/optim_gate_testutil.h"

#define N_STEPS 6

typedef struct {
    double loss[N_STEPS + 1], norm[N_STEPS + 1], val[N_STEPS + 1];
} step_log;

static void on_metrics(const oj_train_metrics *m, void *ctx) {
    step_log *r = ctx;
    if (m->step < 1 || m->step > N_STEPS) return;
    if (m->is_eval) {
        r->val[m->step] = m->val_loss;
        return;
    }
    r->loss[m->step] = m->loss;
    r->norm[m->step] = m->grad_norm;
}

/* tt_config on cuda:0, EXACT, grad_accum 1 (what a graph needs). */
static oj_train_config gpu_config(const char *dir, const char *model, bool bf16, bool graph) {
    oj_train_config c = tt_config(dir);
    snprintf(c.model, sizeof c.model, "%s", model);
    c.optimizer = strncmp(model, "gpt2", 4) == 0 ? OJ_TRAIN_ADAMW : OJ_TRAIN_MUON;
    c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    c.grad_accum = 1;
    c.dtype = bf16 ? OJ_TRAIN_BF16 : OJ_TRAIN_F32;
    c.cuda_graph = graph;
    return c;
}

/* Train 6 steps; the log and every parameter's values (f32) into *params;
 * *proven (if not NULL): the optimizer's steps whose check pass its bounds
 * made unnecessary. */
static void train_proven(const oj_train_config *c, const char *out, step_log *r, float **params,
                         int64_t *n, int64_t *proven) {
    oj_train_options o = {.out_dir = out, .on_metrics = on_metrics, .ctx = r};
    oj_trainer *t = NULL;
    oj_error err = {0};
    if (oj_trainer_create(c, &o, &t, &err) != OJ_OK) fail_msg("create: %s", err.message);
    oj_train_result res;
    if (oj_trainer_run(t, &res, &err) != OJ_OK) fail_msg("run: %s", err.message);
    assert_int_equal(res.step, N_STEPS);
    oj_named_tensors sd = oj_gpt_state_dict(oj_trainer_model(t));
    int64_t total = 0;
    for (int64_t i = 0; i < sd.n; i++) total += oj_numel(sd.tensors[i]);
    float *p = malloc((size_t)total * sizeof *p);
    assert_non_null(p);
    int64_t at = 0;
    for (int64_t i = 0; i < sd.n; i++) {
        int64_t k = oj_numel(sd.tensors[i]);
        assert_int_equal(oj_tensor_dtype(sd.tensors[i]), OJ_F32);
        assert_int_equal(oj_to_host(sd.tensors[i], p + at, (size_t)k * sizeof *p), OJ_OK);
        at += k;
    }
    if (proven) *proven = t->optim->checks_proven;
    oj_trainer_free(t);
    *params = p;
    *n = total;
}

static void train(const oj_train_config *c, const char *out, step_log *r, float **params,
                  int64_t *n) {
    train_proven(c, out, r, params, n, NULL);
}

/* kv > 0: that many KV heads (nanolab with kv = n_head: the fused
 * projection's q, k, v heads alike, their gradients written in place) */
static void graph_case_kv(const char *model, bool bf16, int64_t kv) {
    char dir[256], a[300], b[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/eager", dir);
    snprintf(b, sizeof b, "%s/graph", dir);
    step_log le = {0}, lg = {0};
    float *pe = NULL, *pg = NULL;
    int64_t ne = 0, ng = 0;
    oj_train_config ce = gpu_config(dir, model, bf16, false), cg = gpu_config(dir, model, bf16, true);
    ce.n_kv_head = cg.n_kv_head = kv;
    train(&ce, a, &le, &pe, &ne);
    train(&cg, b, &lg, &pg, &ng);
    tt_rmdir(dir);
    for (int s = 1; s <= N_STEPS; s++)
        printf("  %s%s step %d: eager %.9g graph %.9g\n", model, bf16 ? " bf16" : "", s,
               le.loss[s], lg.loss[s]);
    assert_memory_equal(le.loss, lg.loss, sizeof le.loss);
    assert_memory_equal(le.norm, lg.norm, sizeof le.norm);
    assert_memory_equal(le.val, lg.val, sizeof le.val);
    assert_true(isfinite(le.val[3]) && isfinite(le.val[6]));
    assert_int_equal(ne, ng);
    assert_memory_equal(pe, pg, (size_t)ne * sizeof *pe);
    free(pe);
    free(pg);
}

static void graph_case(const char *model, bool bf16) { graph_case_kv(model, bf16, 0); }

static bool on_cpu;

/* Kept weight copies (key weight_copies, oj_optim_set_weight_copies): the
 * optimizer's kernels write the bf16 copies the graph's forward reads,
 * bit for bit the casts they replace: the same losses, norms and
 * parameters with the key on and off (bf16, graph and eager). */
static void copies_case(const char *model, bool graph) {
    char dir[256], a[300], b[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/off", dir);
    snprintf(b, sizeof b, "%s/on", dir);
    step_log l0 = {0}, l1 = {0};
    float *p0 = NULL, *p1 = NULL;
    int64_t n0 = 0, n1 = 0;
    oj_train_config c0 = gpu_config(dir, model, true, graph), c1 = c0;
    c0.weight_copies = false;
    c1.weight_copies = true;
    train(&c0, a, &l0, &p0, &n0);
    train(&c1, b, &l1, &p1, &n1);
    tt_rmdir(dir);
    for (int s = 1; s <= N_STEPS; s++)
        printf("  %s%s step %d: copies off %.9g on %.9g\n", model, graph ? " graph" : "", s,
               l0.loss[s], l1.loss[s]);
    assert_memory_equal(l0.loss, l1.loss, sizeof l0.loss);
    assert_memory_equal(l0.norm, l1.norm, sizeof l0.norm);
    assert_memory_equal(l0.val, l1.val, sizeof l0.val);
    assert_int_equal(n0, n1);
    assert_memory_equal(p0, p1, (size_t)n0 * sizeof *p0);
    free(p0);
    free(p1);
}

static void test_weight_copies_same_bits(void **state) {
    (void)state;
    if (on_cpu) skip();
    copies_case("gpt2-tiny", true);
    copies_case("nanolab-tiny", true);
    copies_case("nanolab-tiny", false);
}

static void test_graph_step_matches_eager(void **state) {
    (void)state;
    if (on_cpu) skip(); /* a CUDA graph needs a CUDA device */
    graph_case("gpt2-tiny", false);
    graph_case("gpt2-tiny", true);
    graph_case("nanolab-tiny", true);
    graph_case_kv("nanolab-tiny", true, 4);
}

/* nanolab (4 KV heads of 4) under FAST numerics, bf16, the step as a
 * graph: Muon's Newton-Schulz steps as fused GEMMs (muon_ns_step, in
 * bf16) inside the captured step; against the same run under EXACT (the
 * ops' iteration in f32): 6 steps' losses finite and within 2%, the
 * parameters within 5% normwise (six Muon steps at the test's lr move
 * the matrices by a large part of their scale, so a wrong update lands
 * far outside). */
static void test_nanolab_fast_graph(void **state) {
    (void)state;
    if (on_cpu) skip();
    char dir[256], a[300], b[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/exact", dir);
    snprintf(b, sizeof b, "%s/fast", dir);
    step_log le = {0}, lf = {0};
    float *pe = NULL, *pf = NULL;
    int64_t ne = 0, nf = 0;
    oj_train_config ce = gpu_config(dir, "nanolab-tiny", true, true), cf = ce;
    ce.n_kv_head = cf.n_kv_head = 4;
    cf.numerics = OJ_NUMERICS_FAST;
    train(&ce, a, &le, &pe, &ne);
    train(&cf, b, &lf, &pf, &nf);
    tt_rmdir(dir);
    for (int s = 1; s <= N_STEPS; s++) {
        printf("  nanolab fast graph step %d: exact %.9g fast %.9g\n", s, le.loss[s], lf.loss[s]);
        if (!(isfinite(lf.loss[s]) && fabs(lf.loss[s] - le.loss[s]) <= 0.02 * fabs(le.loss[s])))
            fail_msg("step %d: FAST loss %.9g, EXACT %.9g", s, lf.loss[s], le.loss[s]);
    }
    assert_int_equal(ne, nf);
    double dd = 0.0, ww = 0.0;
    for (int64_t i = 0; i < ne; i++) {
        dd += ((double)pf[i] - pe[i]) * ((double)pf[i] - pe[i]);
        ww += (double)pe[i] * pe[i];
    }
    if (!(sqrt(dd) <= 0.05 * sqrt(ww)))
        fail_msg("FAST parameters %.3g (normwise) from EXACT's", sqrt(dd / ww));
    free(pe);
    free(pf);
}

/* oj_bench_trainer on the graph step: its last loss is oj_train's at the
 * same step, bit for bit; the device work back to back is measured. */
static void test_bench_graph_step(void **state) {
    (void)state;
    if (on_cpu) skip();
    char dir[256], out[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(out, sizeof out, "%s/run", dir);
    oj_train_config c = gpu_config(dir, "gpt2-tiny", true, true);
    c.max_steps = 4;
    oj_train_options o = {.out_dir = out};
    oj_train_result res;
    oj_error err = {0};
    if (oj_train(&c, &o, &res, &err) != OJ_OK) fail_msg("train: %s", err.message);
    oj_bench_result r;
    if (oj_bench_trainer(&c, 2, 2, true, &r, &err) != OJ_OK) fail_msg("bench: %s", err.message);
    tt_rmdir(dir);
    printf("  bench: step %.3f ms, kernel %.3f ms, overhead %.3f ms\n", r.step_ms, r.kernel_ms,
           r.overhead_ms);
    assert_memory_equal(&r.loss, &res.train_loss, sizeof r.loss);
    assert_true(r.step_ms > 0 && r.kernel_ms > 0);
}

/* oj__optim_clip_step on CUDA (the gated step: norm, clip factor and
 * skip decision on the device, one read-back) against
 * oj_optim_clip_grad_norm + oj_optim_step on the same device, bit for bit
 * (og_compare: clipped, not clipped, no clip, an infinite gradient, an
 * overflowing update; Muon, AdamW, Adam, f32, f64, one element), by
 * default with the check pass proven unnecessary where the last write's
 * bounds allow, and with OJAS_CUDA_ADAMW1=0 never. */
static void test_gated_step_matches_checked(void **state) {
    (void)state;
    oj_engine *eng = gpu_test_engine(true, on_cpu, OJ_NUMERICS_EXACT, 1);
    setenv("OJAS_CUDA_ADAMW1", "0", 1); /* off: the check pass every step */
    og_compare(eng, eng, !on_cpu);
    unsetenv("OJAS_CUDA_ADAMW1");
    assert_int_equal(og_last_proven, 0);
    og_compare(eng, eng, !on_cpu); /* the default: the proven check */
    /* steps 1 and 2 skipped the check pass on the bounds of the write before */
    assert_int_equal(og_last_proven, on_cpu ? 0 : 2);
    oj_engine_free(eng);
}

/* A user graph that writes a parameter in place (oj_copy_ of a value
 * whose Adam update overflows), replayed: the next gated step refuses it
 * as the checked step does, though the bounds of its last write were
 * valid a step before the replay (the replay bumps the version the
 * capture bumped once). */
static void test_replayed_write_refuses(void **state) {
    (void)state;
    if (on_cpu) skip(); /* graphs need a CUDA device */
    oj_engine *eng = gpu_test_engine(true, on_cpu, OJ_NUMERICS_EXACT, 1);
    og_side a, b;
    og_side_make(eng, &a);
    og_side_make(eng, &b);
    int64_t one = 1;
    oj_tensor *big = oj_full(eng, 1, &one, OJ_F32, 3e38); /* scale.x: Adam with an L2 term */
    assert_non_null(big);
    assert_int_equal(og_step_both(&a, &b, 0), OJ_OK);
    bool prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_graph_capture_begin(eng), OJ_OK);
    assert_int_equal(oj_copy_(a.w[4], big), OJ_OK);
    oj_graph *g = oj_graph_capture_end(eng);
    oj_set_grad_enabled(eng, prev);
    assert_non_null(g);
    assert_int_equal(og_step_both(&a, &b, 1), OJ_OK); /* the capture moved the version */
    assert_int_equal(og_step_both(&a, &b, 2), OJ_OK);
    assert_int_equal(a.o->checks_proven, 1); /* step 2 ran on step 1's bounds */
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_copy_(b.w[4], big), OJ_OK);
    oj_set_grad_enabled(eng, prev);
    assert_int_equal(og_step_both(&a, &b, 3), OJ_ERR_NUMERIC);
    assert_non_null(strstr(oj_optim_message(a.o), "update of 'scale.x'"));
    assert_int_equal(a.o->checks_proven, 1);
    og_fill(a.w[4], 0.5);
    og_fill(b.w[4], 0.5);
    assert_int_equal(og_step_both(&a, &b, 4), OJ_OK);
    oj_graph_free(g);
    oj_release(big);
    og_side_free(&a);
    og_side_free(&b);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_engine_free(eng);
}

/* A kept bf16 copy of a parameter that a replayed graph writes in place
 * (oj_copy_ from a static input given new values before each replay) is
 * the bytes of a fresh cast after each replay: the first replay's sync
 * makes the copy stale since the capture again before the graph writes,
 * and each replay's version bump after that leaves the copy stale. */
static void test_replayed_write_wcopy(void **state) {
    (void)state;
    if (on_cpu) skip();
    oj_engine *eng = gpu_test_engine(true, on_cpu, OJ_NUMERICS_EXACT, 1);
    oj_scope_begin(eng);
    int64_t ws[2] = {16, 24};
    float v[16 * 24];
    oj_tensor *w = oj_rand_normal(eng, 2, ws, OJ_F32, 0.0, 1.0);
    oj_tensor *src = oj_rand_normal(eng, 2, ws, OJ_F32, 0.0, 1.0);
    assert_non_null(w);
    assert_non_null(src);
    oj__wcopy_keep(w, true);
    oj_tensor *c = NULL;
    assert_true(oj__wcopy_get(w, OJ_BF16, &c)); /* made now */
    oj_release(c);
    assert_int_equal(oj_graph_capture_begin(eng), OJ_OK);
    assert_int_equal(oj_copy_(w, src), OJ_OK);
    oj_graph *g = oj_graph_capture_end(eng);
    assert_non_null(g);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 16 * 24; i++) v[i] = 0.5f * (float)round - 0.01f * (float)i;
        assert_int_equal(oj_copy_from_host(src, v, sizeof v), OJ_OK);
        assert_int_equal(oj_graph_replay(g), OJ_OK);
        assert_true(oj__wcopy_get(w, OJ_BF16, &c));
        assert_non_null(c);
        oj_tensor *want = oj_cast(w, OJ_BF16);
        assert_non_null(want);
        uint16_t x[16 * 24], y[16 * 24];
        assert_int_equal(oj_to_host(c, x, sizeof x), OJ_OK);
        assert_int_equal(oj_to_host(want, y, sizeof y), OJ_OK);
        if (memcmp(x, y, sizeof x) != 0)
            fail_msg("round %d: the kept copy after the replay is not the fresh cast", round);
        oj_release(c);
        oj_release(want);
    }
    oj_graph_free(g);
    oj__wcopy_keep(w, false);
    oj_scope_end(eng);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_engine_free(eng);
}

/* The trainer's graph writes gradients, not parameters or moments: its
 * replays leave the optimizer's bounds valid, so gpt2-tiny (AdamW, bf16,
 * kept copies) proves as many check passes unnecessary with the graph as
 * eagerly, every step after the first but at most one. */
static void test_trainer_graph_keeps_bounds(void **state) {
    (void)state;
    if (on_cpu) skip();
    char dir[256], a[300], b[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/eager", dir);
    snprintf(b, sizeof b, "%s/graph", dir);
    step_log l0 = {0}, l1 = {0};
    float *p0 = NULL, *p1 = NULL;
    int64_t n0 = 0, n1 = 0, k0 = -1, k1 = -1;
    oj_train_config c0 = gpu_config(dir, "gpt2-tiny", true, false);
    oj_train_config c1 = gpu_config(dir, "gpt2-tiny", true, true);
    train_proven(&c0, a, &l0, &p0, &n0, &k0);
    train_proven(&c1, b, &l1, &p1, &n1, &k1);
    tt_rmdir(dir);
    printf("  gpt2-tiny: check passes proven unnecessary in %d steps: eager %lld, graph %lld\n",
           N_STEPS, (long long)k0, (long long)k1);
    assert_memory_equal(l0.loss, l1.loss, sizeof l0.loss);
    assert_int_equal(n0, n1);
    assert_memory_equal(p0, p1, (size_t)n0 * sizeof *p0);
    free(p0);
    free(p1);
    assert_int_equal(k1, k0);
    assert_true(k0 >= N_STEPS - 2);
}

int main(void) {
    if (gpu_test_probe(true, &on_cpu) != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_step_matches_eager),
        cmocka_unit_test(test_nanolab_fast_graph),
        cmocka_unit_test(test_weight_copies_same_bits),
        cmocka_unit_test(test_bench_graph_step),
        cmocka_unit_test(test_gated_step_matches_checked),
        cmocka_unit_test(test_replayed_write_refuses),
        cmocka_unit_test(test_replayed_write_wcopy),
        cmocka_unit_test(test_trainer_graph_keeps_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
