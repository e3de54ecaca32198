// test: kept autocast weight copies (oj_optim_set_weight_copies) give the
// bits of casting each step: a tiny gpt2 (transposed Conv1D views, tied
// head) and nanolab (fused projections, Muon) trained under bf16 autocast
// with copies on and off have the same losses and parameters, a write to
// a parameter outside the optimizer included; a write makes the copy
// stale and the next cast reads the new values, a write through an
// exported pointer or by a replayed graph too; gradients flow through a
// copy as through a cast; turning copies off or freeing the parameter
// drops them.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "graph_emu_testutil.h"
#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "wcopy_testutil.h"

static oj_engine *new_engine(void) {
    oj_engine *e = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 11;
    cfg.threads = 2;
    cfg.numerics = OJ_NUMERICS_EXACT;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

/* Ends the scope a test opened on e and frees e: nothing recorded on e,
 * no tensor of it left alive. */
static void end_engine(oj_engine *e) {
    oj_scope_end(e);
    assert_int_equal(oj_last_status(e), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static bool same_bytes(oj_tensor *a, oj_tensor *b) {
    size_t n = (size_t)oj_numel(a) * oj_dtype_size(oj_tensor_dtype(a));
    return oj_tensor_dtype(a) == oj_tensor_dtype(b) && oj_numel(a) == oj_numel(b) &&
           memcmp(oj_data_ptr(a), oj_data_ptr(b), n) == 0;
}

enum { STEPS = 5 };

/* STEPS steps of preset under bf16 autocast (AdamW, or Muon + AdamW), with
 * weight copies on or off; before step 3 the first parameter of rank 2 is
 * scaled by 0.5 through oj_copy_ (a write outside the optimizer). Losses'
 * bits into loss, the FNV-1a hash of every parameter's bytes into *hash,
 * the copies alive after the last step into *copies. */
static void train(const char *preset, bool muon, bool copies, float *loss, uint64_t *hash,
                  int64_t *ncopies) {
    oj_engine *e = new_engine();
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset(preset, &cfg));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(e, &cfg, 5, &m), OJ_OK);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_optim *opt = oj_optim_create(e);
    oj_optim_hparams aw = oj_adamw_hparams(3e-3, 0.01);
    if (muon) {
        oj_optim_hparams mu = oj_muon_hparams(0.02);
        assert_true(oj_optim_add_muon_split(opt, &sd, &mu, &aw, NULL, NULL) >= 0);
    } else {
        assert_true(oj_optim_add_group(opt, &aw, &sd) >= 0);
    }
    assert_int_equal(oj_optim_set_weight_copies(opt, copies), OJ_OK);
    assert_true(oj_optim_weight_copies(opt) == copies);
    int64_t B = 2, T = 16, n = B * T + 1;
    int64_t *tok = malloc((size_t)n * sizeof *tok);
    for (int64_t i = 0; i < n; i++) tok[i] = (i * 7 + i / 3) % cfg.vocab_size;
    int64_t shape[2] = {B, T};
    oj_tensor *x = oj_from_host(e, 2, shape, OJ_I64, tok, (size_t)(B * T) * sizeof *tok);
    oj_tensor *y = oj_from_host(e, 2, shape, OJ_I64, tok + 1, (size_t)(B * T) * sizeof *tok);
    free(tok);
    for (int s = 0; s < STEPS; s++) {
        oj_scope_begin(e);
        if (s == 3) { /* a write outside the optimizer */
            oj_tensor *w = NULL;
            for (int64_t i = 0; i < sd.n && w == NULL; i++)
                if (oj_rank(sd.tensors[i]) == 2) w = sd.tensors[i];
            bool prev = oj_set_grad_enabled(e, false);
            oj_tensor *h = oj_mul_scalar(w, 0.5);
            assert_int_equal(oj_copy_(w, h), OJ_OK);
            oj_set_grad_enabled(e, prev);
        }
        oj_set_autocast(e, true, OJ_BF16);
        oj_tensor *l = oj_gpt_loss(m, x, y);
        oj_set_autocast(e, false, OJ_BF16);
        if (l == NULL) fail_msg("%s: %s", preset, oj_last_error(e));
        loss[s] = (float)oj_item(l);
        if (oj_backward(l, false) != OJ_OK) fail_msg("%s backward: %s", preset, oj_last_error(e));
        if (oj_optim_step(opt, NULL) != OJ_OK) fail_msg("%s step: %s", preset, oj_last_error(e));
        oj_optim_zero_grad(opt);
        oj_scope_end(e);
    }
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < sd.n; i++) {
        const unsigned char *p = oj_data_ptr(sd.tensors[i]);
        for (size_t k = 0; k < (size_t)oj_numel(sd.tensors[i]) * 4; k++)
            h = (h ^ p[k]) * 1099511628211ull;
    }
    *hash = h;
    *ncopies = oj__wcopies_count(e);
    oj_release(x);
    oj_release(y);
    oj_optim_free(opt);
    oj_gpt_free(m);
    assert_int_equal(oj__wcopies_count(e), 0); /* gone with the parameters */
    assert_int_equal(oj_engine_live_tensors(e), 0);
    oj_engine_free(e);
}

static void check_same(const char *preset, bool muon) {
    float l0[STEPS], l1[STEPS];
    uint64_t h0 = 0, h1 = 0;
    int64_t c0 = -1, c1 = -1;
    train(preset, muon, false, l0, &h0, &c0);
    train(preset, muon, true, l1, &h1, &c1);
    assert_int_equal(c0, 0);
    if (c1 <= 0) fail_msg("%s: no weight copy was kept", preset);
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&l0[s], &l1[s], sizeof l0[s]) != 0)
            fail_msg("%s step %d: loss %.9g with copies, %.9g without", preset, s, l1[s], l0[s]);
    if (h0 != h1) fail_msg("%s: the parameters differ with copies kept", preset);
}

static void test_gpt2_adamw_same_bits(void **state) {
    (void)state;
    check_same("gpt2-tiny", false);
}

static void test_nanolab_muon_same_bits(void **state) {
    (void)state;
    check_same("nanolab-tiny", true);
}

/* One linear under autocast over w (kept) and over its transposed view,
 * against an engine-identical w that keeps none: the outputs and w's
 * gradient are the same bytes; after oj_fill_ on a slice of w the next
 * forward reads the new values; off drops the copies. */
static void test_copy_follows_writes(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    int64_t xs[2] = {6, 8}, ws[2] = {8, 8};
    oj_tensor *x = oj_rand_normal(e, 2, xs, OJ_F32, 0.0, 1.0);
    oj_tensor *w = oj_rand_normal(e, 2, ws, OJ_F32, 0.0, 1.0), *w2 = oj_clone(w);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(w2, true);
    oj_optim *opt = oj_optim_create(e);
    oj_optim_hparams hp = oj_adamw_hparams(1e-3, 0.0);
    oj_named_tensors one = {1, (const char *const[]){"w"}, (oj_tensor *const[]){w}};
    assert_true(oj_optim_add_group(opt, &hp, &one) >= 0);
    assert_int_equal(oj_optim_set_weight_copies(opt, true), OJ_OK);
    for (int round = 0; round < 3; round++) {
        if (round == 2) { /* a write: the copies are stale now */
            oj_tensor *row = oj_narrow(w, 0, 2, 1), *row2 = oj_narrow(w2, 0, 2, 1);
            bool prev = oj_set_grad_enabled(e, false);
            assert_int_equal(oj_fill_(row, 3.25), OJ_OK);
            assert_int_equal(oj_fill_(row2, 3.25), OJ_OK);
            oj_set_grad_enabled(e, prev);
            oj_release(row);
            oj_release(row2);
        }
        for (int t = 0; t < 2; t++) { /* w, then its transposed view */
            oj_tensor *a = t ? oj_transpose(w, 0, 1) : oj_retain(w);
            oj_tensor *b = t ? oj_transpose(w2, 0, 1) : oj_retain(w2);
            oj_set_autocast(e, true, OJ_BF16);
            oj_tensor *ya = oj_linear(x, a, NULL), *yb = oj_linear(x, b, NULL);
            oj_set_autocast(e, false, OJ_BF16);
            assert_non_null(ya);
            assert_non_null(yb);
            assert_int_equal(oj_tensor_dtype(ya), OJ_BF16);
            assert_true(same_bytes(ya, yb));
            oj_tensor *sa = oj_sum(oj_cast(ya, OJ_F32), 0, NULL, false),
                      *sb = oj_sum(oj_cast(yb, OJ_F32), 0, NULL, false);
            assert_int_equal(oj_backward(sa, false), OJ_OK);
            assert_int_equal(oj_backward(sb, false), OJ_OK);
            assert_true(same_bytes(oj_grad(w), oj_grad(w2)));
            oj_zero_grad(w);
            oj_zero_grad(w2);
            oj_release(a);
            oj_release(b);
        }
    }
    assert_int_equal(oj__wcopies_count(e), 2); /* w and its transposed view */
    assert_int_equal(oj_optim_set_weight_copies(opt, false), OJ_OK);
    assert_int_equal(oj__wcopies_count(e), 0);
    assert_int_equal(oj_optim_set_weight_copies(NULL, true), OJ_ERR_INVALID_ARGUMENT);
    oj_optim_free(opt);
    end_engine(e);
}

/* A parameter whose memory was exported (oj_data_ptr) and then written
 * through the pointer, with no version bump: its kept copy is made again
 * before each use, the bytes of a fresh cast. */
static void test_exported_write_seen(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    int64_t ws[2] = {4, 8};
    oj_tensor *w = oj_rand_normal(e, 2, ws, OJ_F32, 0.0, 1.0);
    float *p = oj_data_ptr(w); /* exported, as a numpy view or DLPack would */
    assert_non_null(p);
    oj__wcopy_keep(w, true);
    for (int round = 0; round < 3; round++) {
        if (round > 0)
            for (int i = 0; i < 32; i++) p[i] = 1.5f * (float)round + 0.25f * (float)i;
        oj_tensor *c = NULL;
        assert_true(oj__wcopy_get(w, OJ_BF16, &c));
        assert_non_null(c);
        oj_tensor *want = oj_cast(w, OJ_BF16);
        assert_true(same_bytes(c, want));
        oj_release(c);
        oj_release(want);
    }
    assert_int_equal(oj__wcopies_count(e), 1);
    oj__wcopy_keep(w, false);
    end_engine(e);
}

/* A graph that writes a parameter in place (oj_copy_ from a static input
 * given new values before each replay): after each replay the kept copy
 * is the bytes of a fresh cast (the replay's sync makes a stale copy
 * before the graph writes, the replay's version bump after it makes the
 * copy stale). The graph's entries are emulated on the host
 * (graph_emu_testutil.h); tests/gpu/test_gpu_train.c runs the same on a
 * CUDA graph. */
static void test_replayed_write_seen(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    static oj_backend table;
    const oj_backend *cpu = e->backend;
    table = *cpu;
    ge_install(&table);
    e->backend = &table;
    oj_scope_begin(e);
    int64_t ws[2] = {4, 8};
    oj_tensor *w = oj_rand_normal(e, 2, ws, OJ_F32, 0.0, 1.0);
    oj_tensor *in = oj_rand_normal(e, 2, ws, OJ_F32, 0.0, 1.0);
    oj_graph *g = wc_capture_write(e, w, in);
    ge_replay_copies(1, &w, &in); /* what the emulated replay does */
    wc_replay_rounds(g, w, in, 3, 1.5f, 0.125f);
    oj_graph_free(g);
    oj__wcopy_keep(w, false);
    e->backend = cpu; /* the graph is freed: the CPU's own table again */
    end_engine(e);
}

/* A parameter cast through ever new views (a narrow per length) keeps
 * copies of at most 4 of them and casts the others as usual: every
 * output is the bytes of the plain cast's. */
static void test_views_capped(void **state) {
    (void)state;
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    int64_t xs[2] = {3, 8}, ws[2] = {16, 8};
    oj_tensor *x = oj_rand_normal(e, 2, xs, OJ_F32, 0.0, 1.0);
    oj_tensor *w = oj_rand_normal(e, 2, ws, OJ_F32, 0.0, 1.0), *w2 = oj_clone(w);
    oj_set_requires_grad(w, true);
    oj_optim *opt = oj_optim_create(e);
    oj_optim_hparams hp = oj_adamw_hparams(1e-3, 0.0);
    oj_named_tensors one = {1, (const char *const[]){"w"}, (oj_tensor *const[]){w}};
    assert_true(oj_optim_add_group(opt, &hp, &one) >= 0);
    assert_int_equal(oj_optim_set_weight_copies(opt, true), OJ_OK);
    for (int64_t len = 1; len <= 8; len++) {
        oj_tensor *a = oj_narrow(w, 0, 0, len), *b = oj_narrow(w2, 0, 0, len);
        oj_set_autocast(e, true, OJ_BF16);
        oj_tensor *ya = oj_linear(x, a, NULL), *yb = oj_linear(x, b, NULL);
        oj_set_autocast(e, false, OJ_BF16);
        assert_non_null(ya);
        assert_true(same_bytes(ya, yb));
        oj_release(a);
        oj_release(b);
        oj_release(ya);
        oj_release(yb);
    }
    assert_int_equal(oj__wcopies_count(e), 4);
    oj_optim_free(opt);
    end_engine(e);
}

/* 2000 parameters keeping copies: each cast finds its parameter's own
 * copy (the cast's bytes) by comparing only that parameter's entries, not
 * every entry of the engine; releasing a parameter drops its copy. */
static void test_many_params(void **state) {
    (void)state;
    enum { NP = 2000 };
    oj_engine *e = new_engine();
    oj_scope_begin(e);
    int64_t s2[2] = {4, 8};
    oj_tensor **p = calloc(NP, sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < NP; i++) {
        assert_non_null(p[i] = oj_rand_normal(e, 2, s2, OJ_F32, 0.0, 1.0));
        oj__scope_detach(p[i]);
        oj__wcopy_keep(p[i], true);
    }
    for (int round = 0; round < 2; round++) {
        int64_t probes0 = oj__wcopy_probes(e);
        for (int i = 0; i < NP; i++) {
            oj_tensor *c = NULL, *want = oj_cast(p[i], OJ_BF16);
            assert_true(oj__wcopy_get(p[i], OJ_BF16, &c));
            assert_non_null(c);
            assert_true(same_bytes(c, want));
            oj_release(c);
            oj_release(want);
        }
        /* round 0 makes the copies (no entry to compare yet), round 1
         * finds each as its parameter's only entry */
        int64_t probes = oj__wcopy_probes(e) - probes0;
        if (probes > (round ? NP : 0))
            fail_msg("round %d: %lld entries compared for %d casts", round, (long long)probes, NP);
    }
    assert_int_equal(oj__wcopies_count(e), NP);
    for (int i = 0; i < NP; i += 2) oj_release(p[i]);
    assert_int_equal(oj__wcopies_count(e), NP / 2);
    for (int i = 1; i < NP; i += 2) {
        oj_tensor *c = NULL, *want = oj_cast(p[i], OJ_BF16);
        assert_true(oj__wcopy_get(p[i], OJ_BF16, &c));
        assert_true(same_bytes(c, want));
        oj_release(c);
        oj_release(want);
        oj_release(p[i]);
    }
    assert_int_equal(oj__wcopies_count(e), 0);
    free(p);
    end_engine(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_params),
        cmocka_unit_test(test_gpt2_adamw_same_bits),
        cmocka_unit_test(test_nanolab_muon_same_bits),
        cmocka_unit_test(test_copy_follows_writes),
        cmocka_unit_test(test_exported_write_seen),
        cmocka_unit_test(test_replayed_write_seen),
        cmocka_unit_test(test_views_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
