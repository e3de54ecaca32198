// test: a tiny GPT trained on the GPU follows the CPU's loss curve (SGD on
// nanolab-tiny, AdamW on gpt2-tiny, Muon + AdamW on nanolab-tiny), and the
// parameters end where the CPU's do; a checkpoint written on the GPU
// resumes on the CPU and back. Skips (77) without a CUDA device.
//
// Both engines run EXACT numerics (cuBLAS pedantic f32 GEMMs on the GPU),
// so the curves agree to ~1e-5; the tolerance below leaves room for the
// different summation orders compounding over the steps. One FAST run
// (TF32 GEMMs) is held to a looser bound.
//
// OJAS_GPU_TEST_ON_CPU=1 runs the same checks with a CPU engine in place
// of the CUDA one (a self-check of this test without a GPU).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/io.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "gpu_testutil.h"

#define STEPS 6
#define B 2
#define TT 16

static bool on_cpu;
static bool autocast_bf16; /* forward under bf16 autocast (f32 master weights) */
static bool use_graph;     /* steps 1.. replay a CUDA graph of step 1's forward + backward */

static oj_engine *engine(bool gpu, oj_numerics num) {
    return gpu_test_engine(gpu, on_cpu, num, 3);
}

static oj_tensor *tokens(oj_engine *eng, int64_t V, uint32_t salt) {
    int64_t v[B * TT];
    uint32_t s = 12345u + salt;
    for (int64_t i = 0; i < B * TT; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (int64_t)((s >> 8) % (uint32_t)V);
    }
    int64_t shape[2] = {B, TT};
    oj_tensor *t = oj_from_host(eng, 2, shape, OJ_I64, v, sizeof v);
    assert_non_null(t);
    return t;
}

typedef enum { RUN_SGD, RUN_ADAMW, RUN_MUON } run_kind;

/* Train STEPS steps on a fixed batch; losses[] gets each step's loss and
 * params (malloc'd) the final parameters, concatenated as doubles. */
static void train(oj_engine *eng, const char *preset, run_kind kind, double *losses,
                  double **params, int64_t *nparams) {
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset(preset, &cfg));
    oj_gpt *m = NULL;
    if (oj_gpt_create(eng, &cfg, 1, &m) != OJ_OK) fail_msg("gpt_create: %s", oj_last_error(eng));
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_optim *o = oj_optim_create(eng);
    assert_non_null(o);
    if (kind == RUN_SGD) {
        oj_optim_hparams hp = oj_sgd_hparams(0.5);
        assert_int_equal(oj_optim_add_group(o, &hp, &sd), 0);
    } else if (kind == RUN_ADAMW) {
        oj_optim_hparams hp = oj_adamw_hparams(3e-3, 0.1);
        assert_int_equal(oj_optim_add_group(o, &hp, &sd), 0);
    } else {
        oj_optim_hparams mu = oj_muon_hparams(0.02), aw = oj_adamw_hparams(3e-3, 0.0);
        assert_int_equal(oj_optim_add_muon_split(o, &sd, &mu, &aw, NULL, NULL), 0);
    }
    oj_tensor *x = tokens(eng, cfg.vocab_size, 3);
    oj_tensor *y = tokens(eng, cfg.vocab_size, 4);
    oj_graph *graph = NULL;
    oj_tensor *graph_loss = NULL;
    for (int step = 0; step < STEPS; step++) {
        if (use_graph && step == 1) { /* capture after one eager step */
            assert_int_equal(oj_graph_capture_begin(eng), OJ_OK);
            oj_scope_begin(eng);
            oj_set_autocast(eng, autocast_bf16, OJ_BF16);
            graph_loss = oj_keep(oj_gpt_loss(m, x, y));
            oj_set_autocast(eng, false, OJ_BF16);
            if (graph_loss) oj_backward(graph_loss, false);
            oj_scope_end(eng);
            graph = oj_graph_capture_end(eng);
            if (graph == NULL) fail_msg("capture: %s", oj_last_error(eng));
        }
        oj_scope_begin(eng);
        oj_tensor *loss = NULL;
        if (graph) {
            if (oj_graph_replay(graph) != OJ_OK) fail_msg("replay: %s", oj_last_error(eng));
            loss = graph_loss;
        } else {
            oj_set_autocast(eng, autocast_bf16, OJ_BF16);
            loss = oj_gpt_loss(m, x, y);
            oj_set_autocast(eng, false, OJ_BF16);
        }
        if (loss == NULL) fail_msg("%s step %d: %s", preset, step, oj_last_error(eng));
        losses[step] = oj_item(loss);
        if (!graph && oj_backward(loss, false) != OJ_OK) fail_msg("backward: %s", oj_last_error(eng));
        oj_optim_step_info info;
        if (oj_optim_step(o, &info) != OJ_OK)
            fail_msg("optim_step: %s / %s", oj_last_error(eng), oj_optim_message(o));
        assert_false(info.skipped);
        if (!graph) oj_optim_zero_grad(o); /* the graph's replays rewrite its gradients */
        if (use_graph && step == 0) oj_optim_zero_grad(o);
        oj_scope_end(eng);
    }
    oj_graph_free(graph);
    oj_release(graph_loss);
    int64_t total = 0;
    for (int64_t i = 0; i < sd.n; i++) total += oj_numel(sd.tensors[i]);
    double *p = malloc((size_t)total * sizeof *p);
    float *tmp = malloc((size_t)total * sizeof *tmp);
    int64_t at = 0;
    for (int64_t i = 0; i < sd.n; i++) {
        int64_t n = oj_numel(sd.tensors[i]);
        assert_int_equal(oj_tensor_dtype(sd.tensors[i]), OJ_F32);
        assert_int_equal(oj_to_host(sd.tensors[i], tmp, (size_t)n * sizeof *tmp), OJ_OK);
        for (int64_t j = 0; j < n; j++) p[at + j] = tmp[j];
        at += n;
    }
    free(tmp);
    *params = p;
    *nparams = total;
    oj_release(x);
    oj_release(y);
    oj_optim_free(o);
    oj_gpt_free(m);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
}

static void compare_runs(const char *preset, run_kind kind, oj_numerics num, double loss_rtol,
                         double param_tol) {
    oj_engine *ce = engine(false, num), *ge = engine(true, num);
    double lc[STEPS], lg[STEPS];
    double *pc = NULL, *pg = NULL;
    int64_t nc = 0, ng = 0;
    train(ce, preset, kind, lc, &pc, &nc);
    train(ge, preset, kind, lg, &pg, &ng);
    assert_int_equal(nc, ng);
    for (int s = 0; s < STEPS; s++) {
        printf("  %s %s step %d: cpu %.7f cuda %.7f\n", preset,
               kind == RUN_SGD ? "sgd" : kind == RUN_ADAMW ? "adamw" : "muon", s, lc[s], lg[s]);
        assert_true(isfinite(lg[s]));
        if (fabs(lg[s] - lc[s]) > loss_rtol * fabs(lc[s]))
            fail_msg("%s step %d: cuda loss %.9g vs cpu %.9g (rtol %g)", preset, s, lg[s], lc[s],
                     loss_rtol);
    }
    assert_true(lg[STEPS - 1] < lg[0]); /* it learns */
    /* Relative L2 distance of all parameters: Adam-type updates move an
     * element by ~lr whatever the size of its gradient, so an element whose
     * gradient is ~0 may legitimately go either way on the two devices;
     * a norm over all parameters tolerates such elements, a max would not. */
    double nd = 0, np = 0;
    for (int64_t i = 0; i < nc; i++) {
        assert_true(isfinite(pg[i]));
        nd += (pg[i] - pc[i]) * (pg[i] - pc[i]);
        np += pc[i] * pc[i];
    }
    double rel = sqrt(nd) / (sqrt(np) > 0 ? sqrt(np) : 1);
    printf("  %s: parameters' relative L2 distance %.3g (tol %g)\n", preset, rel, param_tol);
    if (!(rel <= param_tol))
        fail_msg("%s: parameters differ: relative L2 distance %g > %g", preset, rel, param_tol);
    free(pc);
    free(pg);
    oj_engine_free(ce);
    oj_engine_free(ge);
}

static void test_nanolab_sgd(void **state) {
    (void)state;
    compare_runs("nanolab-tiny", RUN_SGD, OJ_NUMERICS_EXACT, 1e-4, 1e-4);
}

static void test_gpt2_adamw(void **state) {
    (void)state;
    compare_runs("gpt2-tiny", RUN_ADAMW, OJ_NUMERICS_EXACT, 1e-4, 2e-3);
}

static void test_nanolab_muon(void **state) {
    (void)state;
    compare_runs("nanolab-tiny", RUN_MUON, OJ_NUMERICS_EXACT, 1e-4, 2e-3);
}

static void test_nanolab_sgd_fast(void **state) {
    (void)state;
    compare_runs("nanolab-tiny", RUN_SGD, OJ_NUMERICS_FAST, 2e-2, 5e-2);
}

/* bf16 autocast: bf16 GEMMs and attention on both devices; the CPU and
 * cuBLAS round their f32 sums to bf16 after different summation orders,
 * so the curves agree to bf16 precision (~4e-3 per rounding), not 1e-5. */
static void test_gpt2_adamw_bf16(void **state) {
    (void)state;
    autocast_bf16 = true;
    compare_runs("gpt2-tiny", RUN_ADAMW, OJ_NUMERICS_FAST, 2e-2, 5e-2);
    autocast_bf16 = false;
}

static void test_nanolab_muon_bf16(void **state) {
    (void)state;
    autocast_bf16 = true;
    compare_runs("nanolab-tiny", RUN_MUON, OJ_NUMERICS_FAST, 2e-2, 5e-2);
    autocast_bf16 = false;
}

/* preset trained twice on two EXACT GPU engines, the second run replaying
 * its step as a CUDA graph when graph: the same losses and parameters, bit
 * for bit; after a graph run its engine holds nothing (the pool is gone). */
static void train_twice_same(const char *preset, run_kind kind, bool graph) {
    oj_engine *a = engine(true, OJ_NUMERICS_EXACT), *b = engine(true, OJ_NUMERICS_EXACT);
    double la[STEPS], lb[STEPS];
    double *pa = NULL, *pb = NULL;
    int64_t na = 0, nb = 0;
    train(a, preset, kind, la, &pa, &na);
    use_graph = graph;
    train(b, preset, kind, lb, &pb, &nb);
    use_graph = false;
    if (graph)
        for (int s = 0; s < STEPS; s++)
            printf("  %s%s step %d: eager %.9g graph %.9g\n", preset,
                   autocast_bf16 ? " bf16" : "", s, la[s], lb[s]);
    assert_int_equal(na, nb);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(pa, pb, (size_t)na * sizeof *pa);
    free(pa);
    free(pb);
    if (graph) {
        oj_engine_trim_pool(b);
        assert_int_equal(oj_budget_current(oj_engine_budget(b)), 0);
    }
    oj_engine_free(a);
    oj_engine_free(b);
}

/* EXACT on the GPU: two runs give the same losses and parameters, bit for
 * bit, in f32 and under bf16 autocast. */
static void test_exact_runs_identical(void **state) {
    (void)state;
    for (int ac = 0; ac < 2; ac++) {
        autocast_bf16 = ac == 1;
        train_twice_same("nanolab-tiny", RUN_MUON, false);
    }
    autocast_bf16 = false;
}

/* CUDA graph: steps 1.. replay one captured forward + backward; under
 * EXACT the same kernels run in the same order, so losses and parameters
 * equal the eager run's bit for bit (gpt2 + AdamW and nanolab + Muon, f32
 * and bf16 autocast). */
static void test_graph_matches_eager(void **state) {
    (void)state;
    if (on_cpu) skip();
    for (int ac = 0; ac < 2; ac++)
        for (int k = 0; k < 2; k++) {
            autocast_bf16 = ac == 1;
            train_twice_same(k == 0 ? "gpt2-tiny" : "nanolab-tiny", k == 0 ? RUN_ADAMW : RUN_MUON,
                             true);
        }
    autocast_bf16 = false;
}

/* ---------------------------------------------------------------- checkpoints */

/* A model with its AdamW optimizer and a fixed batch on one engine. */
typedef struct {
    oj_engine *eng;
    oj_gpt *m;
    oj_optim *o;
    oj_tensor *x, *y;
    oj_named_tensors sd;
} run;

static void run_open(run *r, oj_engine *eng) {
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("gpt2-tiny", &cfg));
    r->eng = eng;
    if (oj_gpt_create(eng, &cfg, 1, &r->m) != OJ_OK) fail_msg("gpt_create: %s", oj_last_error(eng));
    r->sd = oj_gpt_state_dict(r->m);
    r->o = oj_optim_create(eng);
    assert_non_null(r->o);
    oj_optim_hparams hp = oj_adamw_hparams(3e-3, 0.1);
    assert_int_equal(oj_optim_add_group(r->o, &hp, &r->sd), 0);
    r->x = tokens(eng, cfg.vocab_size, 3);
    r->y = tokens(eng, cfg.vocab_size, 4);
}

static void run_close(run *r) {
    oj_release(r->x);
    oj_release(r->y);
    oj_optim_free(r->o);
    oj_gpt_free(r->m);
    assert_int_equal(oj_last_status(r->eng), OJ_OK);
}

static void run_steps(run *r, int from, int to, double *losses) {
    for (int step = from; step < to; step++) {
        oj_scope_begin(r->eng);
        oj_tensor *loss = oj_gpt_loss(r->m, r->x, r->y);
        if (loss == NULL) fail_msg("step %d: %s", step, oj_last_error(r->eng));
        losses[step] = oj_item(loss);
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        if (oj_optim_step(r->o, NULL) != OJ_OK) fail_msg("optim_step: %s", oj_last_error(r->eng));
        oj_optim_zero_grad(r->o);
        oj_scope_end(r->eng);
    }
}

static void run_save(run *r, const char *root, int64_t step) {
    oj_named_tensors os;
    assert_int_equal(oj_optim_state(r->o, &os), OJ_OK);
    oj_error err = {0};
    if (oj_checkpoint_save(root, step, &r->sd, &os, NULL, 0, &err) != OJ_OK)
        fail_msg("checkpoint_save: %s", err.message);
}

static void run_resume(run *r, const char *root, int64_t want_step) {
    oj_named_tensors os;
    assert_int_equal(oj_optim_state(r->o, &os), OJ_OK);
    oj_error err = {0};
    oj_checkpoint_info info;
    memset(&info, 0, sizeof info);
    if (oj_checkpoint_resume(root, &r->sd, &os, &info, &err) != OJ_OK)
        fail_msg("checkpoint_resume: %s", err.message);
    free(info.state_json);
    assert_int_equal(info.step, want_step);
    assert_int_equal(oj_optim_state_sync(r->o), OJ_OK);
}

/* 6 AdamW steps: all on the CPU, against GPU 0-2 -> checkpoint -> CPU 3-4
 * -> checkpoint -> GPU 5. The losses agree within the GPU tolerance. */
static void test_checkpoint_gpu_cpu_gpu(void **state) {
    (void)state;
    char root[] = "/tmp/ojas_gpu_ckpt_XXXXXX";
    assert_non_null(mkdtemp(root));
    double ref[STEPS], mixed[STEPS];
    oj_engine *c0 = engine(false, OJ_NUMERICS_EXACT);
    run r;
    run_open(&r, c0);
    run_steps(&r, 0, STEPS, ref);
    run_close(&r);
    oj_engine_free(c0);

    oj_engine *g1 = engine(true, OJ_NUMERICS_EXACT);
    run_open(&r, g1);
    run_steps(&r, 0, 3, mixed);
    run_save(&r, root, 3);
    run_close(&r);
    oj_engine_free(g1);

    oj_engine *c2 = engine(false, OJ_NUMERICS_EXACT);
    run_open(&r, c2);
    run_resume(&r, root, 3);
    run_steps(&r, 3, 5, mixed);
    run_save(&r, root, 5);
    run_close(&r);
    oj_engine_free(c2);

    oj_engine *g3 = engine(true, OJ_NUMERICS_EXACT);
    run_open(&r, g3);
    run_resume(&r, root, 5);
    run_steps(&r, 5, STEPS, mixed);
    run_close(&r);
    oj_engine_free(g3);

    for (int s = 0; s < STEPS; s++) {
        printf("  checkpoint round trip step %d: cpu %.7f gpu/cpu/gpu %.7f\n", s, ref[s], mixed[s]);
        if (!(fabs(mixed[s] - ref[s]) <= 1e-4 * fabs(ref[s])))
            fail_msg("step %d: %.9g after the round trip vs %.9g on the CPU", s, mixed[s], ref[s]);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) print_error("could not remove %s\n", root);
}

int main(void) {
    if (gpu_test_probe(true, &on_cpu) != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nanolab_sgd),
        cmocka_unit_test(test_gpt2_adamw),
        cmocka_unit_test(test_nanolab_muon),
        cmocka_unit_test(test_nanolab_sgd_fast),
        cmocka_unit_test(test_gpt2_adamw_bf16),
        cmocka_unit_test(test_nanolab_muon_bf16),
        cmocka_unit_test(test_exact_runs_identical),
        cmocka_unit_test(test_graph_matches_eager),
        cmocka_unit_test(test_checkpoint_gpu_cpu_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
