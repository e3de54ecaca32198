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
#include "../unit/wcopy_testutil.h"

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
 * *proven: the optimizer's steps whose check pass its bounds made
 * unnecessary. */
/* train() without on_metrics (the trainer may then launch a step ahead):
 * the log read from metrics.jsonl (9 significant digits); g_ahead: the
 * steps launched ahead in the last run. */
static bool g_no_callback;
static int64_t g_ahead;

/* The value after "key": in line, or NaN. */
static double json_num(const char *line, const char *key) {
    char k[32];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *at = strstr(line, k);
    return at ? strtod(at + strlen(k), NULL) : NAN;
}

static void log_from_metrics(const char *out, step_log *r) {
    char p[400];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        int64_t s = (int64_t)json_num(line, "step");
        if (s < 1 || s > N_STEPS) continue;
        if (strstr(line, "\"type\":\"eval\"")) {
            r->val[s] = json_num(line, "val_loss");
        } else {
            r->loss[s] = json_num(line, "loss");
            r->norm[s] = json_num(line, "grad_norm");
        }
    }
    fclose(f);
}

static void train(const oj_train_config *c, const char *out, step_log *r, float **params,
                  int64_t *n, int64_t *proven) {
    oj_train_options o = {.out_dir = out, .on_metrics = on_metrics, .ctx = r};
    if (g_no_callback) o.on_metrics = NULL, o.ctx = NULL;
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
    *proven = t->optim->checks_proven;
    g_ahead = t->ahead_launches;
    oj_trainer_free(t);
    if (g_no_callback) log_from_metrics(out, r);
    *params = p;
    *n = total;
}

/* Two training runs over one data directory: each run's log, parameters
 * (f32, malloc'd, freed by pair_free), their count and proven check
 * passes (train). */
typedef struct {
    char dir[256];
    step_log log[2];
    float *p[2];
    int64_t n[2], proven[2];
} run_pair;

/* A fresh temporary directory holding tt_write_shards' data (3000
 * training tokens, 200 validation), for configs made from r->dir. */
static void pair_data(run_pair *r) {
    memset(r, 0, sizeof *r);
    assert_int_equal(tt_tmpdir(r->dir, sizeof r->dir), 0);
    assert_int_equal(tt_write_shards(r->dir, 3000, 200), 0);
}

/* Trains c0 into dir/name0, then c1 into dir/name1; removes the directory. */
static void pair_train(run_pair *r, const oj_train_config *c0, const char *name0,
                       const oj_train_config *c1, const char *name1) {
    const oj_train_config *c[2] = {c0, c1};
    const char *name[2] = {name0, name1};
    for (int k = 0; k < 2; k++) {
        char out[300];
        snprintf(out, sizeof out, "%s/%s", r->dir, name[k]);
        train(c[k], out, &r->log[k], &r->p[k], &r->n[k], &r->proven[k]);
    }
    tt_rmdir(r->dir);
}

/* The two runs' losses, gradient norms and validation losses: the same bits. */
static void assert_same_logs(const run_pair *r) {
    assert_memory_equal(r->log[0].loss, r->log[1].loss, sizeof r->log[0].loss);
    assert_memory_equal(r->log[0].norm, r->log[1].norm, sizeof r->log[0].norm);
    assert_memory_equal(r->log[0].val, r->log[1].val, sizeof r->log[0].val);
}

/* The two runs' parameters: as many, the same bits. */
static void assert_same_params(const run_pair *r) {
    assert_int_equal(r->n[0], r->n[1]);
    assert_memory_equal(r->p[0], r->p[1], (size_t)r->n[0] * sizeof *r->p[0]);
}

static void pair_free(run_pair *r) {
    free(r->p[0]);
    free(r->p[1]);
}

/* kv > 0: that many KV heads (nanolab with kv = n_head: the fused
 * projection's q, k, v heads alike, their gradients written in place) */
static void graph_case_kv(const char *model, bool bf16, int64_t kv) {
    run_pair r;
    pair_data(&r);
    oj_train_config ce = gpu_config(r.dir, model, bf16, false);
    oj_train_config cg = gpu_config(r.dir, model, bf16, true);
    ce.n_kv_head = cg.n_kv_head = kv;
    pair_train(&r, &ce, "eager", &cg, "graph");
    for (int s = 1; s <= N_STEPS; s++)
        printf("  %s%s step %d: eager %.9g graph %.9g\n", model, bf16 ? " bf16" : "", s,
               r.log[0].loss[s], r.log[1].loss[s]);
    assert_same_logs(&r);
    assert_true(isfinite(r.log[0].val[3]) && isfinite(r.log[0].val[6]));
    assert_same_params(&r);
    pair_free(&r);
}

static void graph_case(const char *model, bool bf16) { graph_case_kv(model, bf16, 0); }

static bool on_cpu;

/* Kept weight copies (key weight_copies, oj_optim_set_weight_copies): the
 * optimizer's kernels write the bf16 copies the graph's forward reads,
 * bit for bit the casts they replace: the same losses, norms and
 * parameters with the key on and off (bf16, graph and eager). */
static void copies_case(const char *model, bool graph) {
    run_pair r;
    pair_data(&r);
    oj_train_config c0 = gpu_config(r.dir, model, true, graph), c1 = c0;
    c0.weight_copies = false;
    c1.weight_copies = true;
    pair_train(&r, &c0, "off", &c1, "on");
    for (int s = 1; s <= N_STEPS; s++)
        printf("  %s%s step %d: copies off %.9g on %.9g\n", model, graph ? " graph" : "", s,
               r.log[0].loss[s], r.log[1].loss[s]);
    assert_same_logs(&r);
    assert_same_params(&r);
    pair_free(&r);
}

static void test_weight_copies_same_bits(void **state) {
    (void)state;
    if (on_cpu) skip();
    copies_case("gpt2-tiny", true);
    copies_case("nanolab-tiny", true);
    copies_case("nanolab-tiny", false);
}

/* The next batch taken during the step before (loop.c prefetch_next: the
 * graph's inputs uploaded, or the eager step's tensors made, while the
 * device finishes the update) against OJAS_TRAIN_PREFETCH=0: the same
 * losses, norms and parameters. */
static void prefetch_case(const char *model, bool graph) {
    run_pair r;
    pair_data(&r);
    oj_train_config c = gpu_config(r.dir, model, true, graph);
    if (on_cpu) c.device = (oj_device){OJ_DEVICE_CPU, 0};
    char out[300];
    snprintf(out, sizeof out, "%s/on", r.dir);
    train(&c, out, &r.log[0], &r.p[0], &r.n[0], &r.proven[0]);
    setenv("OJAS_TRAIN_PREFETCH", "0", 1);
    snprintf(out, sizeof out, "%s/off", r.dir);
    train(&c, out, &r.log[1], &r.p[1], &r.n[1], &r.proven[1]);
    unsetenv("OJAS_TRAIN_PREFETCH");
    tt_rmdir(r.dir);
    for (int s = 1; s <= N_STEPS; s++)
        printf("  %s%s step %d: prefetched %.9g not %.9g\n", model, graph ? " graph" : "", s,
               r.log[0].loss[s], r.log[1].loss[s]);
    assert_same_logs(&r);
    assert_same_params(&r);
    pair_free(&r);
}

/* The next step's graph launched before this step's read-back (loop.c
 * launch_ahead: oj_trainer_run without on_metrics) against
 * OJAS_TRAIN_AHEAD=0: the same losses, norms, validation losses and
 * parameters, evals between steps included; steps 3 to N launched ahead
 * (the first step captures, its batch is not kept). */
static void ahead_case(const char *model) {
    run_pair r;
    pair_data(&r);
    oj_train_config c = gpu_config(r.dir, model, true, true);
    g_no_callback = true;
    char out[300];
    snprintf(out, sizeof out, "%s/ahead", r.dir);
    train(&c, out, &r.log[0], &r.p[0], &r.n[0], &r.proven[0]);
    const int64_t launched = g_ahead;
    setenv("OJAS_TRAIN_AHEAD", "0", 1);
    snprintf(out, sizeof out, "%s/not", r.dir);
    train(&c, out, &r.log[1], &r.p[1], &r.n[1], &r.proven[1]);
    unsetenv("OJAS_TRAIN_AHEAD");
    g_no_callback = false;
    tt_rmdir(r.dir);
    for (int s = 1; s <= N_STEPS; s++)
        printf("  %s step %d: ahead %.9g norm %.9g, not %.9g norm %.9g\n", model, s,
               r.log[0].loss[s], r.log[0].norm[s], r.log[1].loss[s], r.log[1].norm[s]);
    printf("  %s: %lld steps launched ahead, %lld with OJAS_TRAIN_AHEAD=0\n", model,
           (long long)launched, (long long)g_ahead);
    assert_same_logs(&r);
    assert_true(isfinite(r.log[0].loss[N_STEPS]) && isfinite(r.log[0].val[3]));
    assert_same_params(&r);
    assert_int_equal(launched, N_STEPS - 2);
    assert_int_equal(g_ahead, 0);
    pair_free(&r);
}

static void test_ahead_same_bits(void **state) {
    (void)state;
    if (on_cpu) skip(); /* a graph needs the device */
    ahead_case("gpt2-tiny");
    ahead_case("nanolab-tiny");
}

static void test_prefetch_same_bits(void **state) {
    (void)state;
    prefetch_case("gpt2-tiny", false);
    prefetch_case("nanolab-tiny", false);
    if (on_cpu) return; /* a CUDA graph needs a CUDA device */
    prefetch_case("gpt2-tiny", true);
    prefetch_case("nanolab-tiny", true);
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
    run_pair r;
    pair_data(&r);
    oj_train_config ce = gpu_config(r.dir, "nanolab-tiny", true, true), cf = ce;
    ce.n_kv_head = cf.n_kv_head = 4;
    cf.numerics = OJ_NUMERICS_FAST;
    pair_train(&r, &ce, "exact", &cf, "fast");
    const step_log *le = &r.log[0], *lf = &r.log[1];
    const float *pe = r.p[0], *pf = r.p[1];
    const int64_t ne = r.n[0], nf = r.n[1];
    for (int s = 1; s <= N_STEPS; s++) {
        printf("  nanolab fast graph step %d: exact %.9g fast %.9g\n", s, le->loss[s], lf->loss[s]);
        if (!(isfinite(lf->loss[s]) && fabs(lf->loss[s] - le->loss[s]) <= 0.02 * fabs(le->loss[s])))
            fail_msg("step %d: FAST loss %.9g, EXACT %.9g", s, lf->loss[s], le->loss[s]);
    }
    assert_int_equal(ne, nf);
    double dd = 0.0, ww = 0.0;
    for (int64_t i = 0; i < ne; i++) {
        dd += ((double)pf[i] - pe[i]) * ((double)pf[i] - pe[i]);
        ww += (double)pe[i] * pe[i];
    }
    if (!(sqrt(dd) <= 0.05 * sqrt(ww)))
        fail_msg("FAST parameters %.3g (normwise) from EXACT's", sqrt(dd / ww));
    pair_free(&r);
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
    og_compare(eng, eng, !on_cpu, false);
    unsetenv("OJAS_CUDA_ADAMW1");
    assert_int_equal(og_last_proven, 0);
    og_compare(eng, eng, !on_cpu, false); /* the default: the proven check */
    /* steps 1 and 2 skipped the check pass on the bounds of the write before */
    assert_int_equal(og_last_proven, on_cpu ? 0 : 2);
    /* the read-back deferred ahead of queued work (the trainer's next step) */
    og_compare(eng, eng, !on_cpu, true);
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
    oj_tensor *w = oj_rand_normal(eng, 2, ws, OJ_F32, 0.0, 1.0);
    oj_tensor *src = oj_rand_normal(eng, 2, ws, OJ_F32, 0.0, 1.0);
    oj_graph *g = wc_capture_write(eng, w, src);
    wc_replay_rounds(g, w, src, 3, 0.5f, 0.01f);
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
    run_pair r;
    pair_data(&r);
    oj_train_config c0 = gpu_config(r.dir, "gpt2-tiny", true, false);
    oj_train_config c1 = gpu_config(r.dir, "gpt2-tiny", true, true);
    pair_train(&r, &c0, "eager", &c1, "graph");
    const int64_t k0 = r.proven[0], k1 = r.proven[1];
    printf("  gpt2-tiny: check passes proven unnecessary in %d steps: eager %lld, graph %lld\n",
           N_STEPS, (long long)k0, (long long)k1);
    assert_memory_equal(r.log[0].loss, r.log[1].loss, sizeof r.log[0].loss);
    assert_same_params(&r);
    pair_free(&r);
    assert_int_equal(k1, k0);
    assert_true(k0 >= N_STEPS - 2);
}

int main(void) {
    if (gpu_test_probe(true, &on_cpu) != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_step_matches_eager),
        cmocka_unit_test(test_prefetch_same_bits),
        cmocka_unit_test(test_ahead_same_bits),
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
