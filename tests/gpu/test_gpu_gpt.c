// test: a tiny GPT trained on the GPU follows the CPU's loss curve (SGD on
// nanolab-tiny, AdamW on gpt2-tiny, Muon + AdamW on nanolab-tiny), and the
// parameters end where the CPU's do. Skips (77) without a CUDA device.
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
#include "ojas/ops.h"
#include "ojas/optim.h"

#define STEPS 6
#define B 2
#define TT 16

static bool on_cpu;

static oj_engine *engine(bool gpu, oj_numerics num) {
    oj_engine_config c = oj_engine_config_default();
    c.seed = 3;
    c.numerics = num;
    if (gpu && !on_cpu) c.device = (oj_device){OJ_DEVICE_CUDA, 0};
    oj_engine *e = NULL;
    oj_error err = {0};
    if (oj_engine_create(&c, &e, &err) != OJ_OK) fail_msg("engine_create: %s", err.message);
    return e;
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
    for (int step = 0; step < STEPS; step++) {
        oj_scope_begin(eng);
        oj_tensor *loss = oj_gpt_loss(m, x, y);
        if (loss == NULL) fail_msg("%s step %d: %s", preset, step, oj_last_error(eng));
        losses[step] = oj_item(loss);
        if (oj_backward(loss, false) != OJ_OK) fail_msg("backward: %s", oj_last_error(eng));
        oj_optim_step_info info;
        if (oj_optim_step(o, &info) != OJ_OK)
            fail_msg("optim_step: %s / %s", oj_last_error(eng), oj_optim_message(o));
        assert_false(info.skipped);
        oj_optim_zero_grad(o);
        oj_scope_end(eng);
    }
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

/* EXACT on the GPU: two runs give the same losses and parameters, bit for bit. */
static void test_exact_runs_identical(void **state) {
    (void)state;
    oj_engine *a = engine(true, OJ_NUMERICS_EXACT), *b = engine(true, OJ_NUMERICS_EXACT);
    double la[STEPS], lb[STEPS];
    double *pa = NULL, *pb = NULL;
    int64_t na = 0, nb = 0;
    train(a, "nanolab-tiny", RUN_MUON, la, &pa, &na);
    train(b, "nanolab-tiny", RUN_MUON, lb, &pb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(pa, pb, (size_t)na * sizeof *pa);
    free(pa);
    free(pb);
    oj_engine_free(a);
    oj_engine_free(b);
}

int main(void) {
    on_cpu = getenv("OJAS_GPU_TEST_ON_CPU") != NULL;
    if (!on_cpu) {
        oj_engine_config c = oj_engine_config_default();
        c.device = (oj_device){OJ_DEVICE_CUDA, 0};
        oj_engine *probe = NULL;
        oj_error err = {0};
        if (oj_engine_create(&c, &probe, &err) != OJ_OK) {
            printf("skipped: no CUDA device (%s)\n", err.message);
            return 77;
        }
        oj_engine_free(probe);
    } else {
        printf("OJAS_GPU_TEST_ON_CPU: self-check with a CPU engine in place of CUDA\n");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nanolab_sgd),
        cmocka_unit_test(test_gpt2_adamw),
        cmocka_unit_test(test_nanolab_muon),
        cmocka_unit_test(test_nanolab_sgd_fast),
        cmocka_unit_test(test_exact_runs_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
