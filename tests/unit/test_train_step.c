/* The trainer's step (src/train/loop.c) under EXACT numerics: every loss,
 * grad norm and checkpoint byte of a few steps equals the values recorded
 * for the step as it was before its read-backs were merged and reordered
 * (GOLDEN below, printed by a failing run as a table to compare), for
 * Muon + AdamW with gradient accumulation, AdamW alone, and bf16 autocast;
 * steps skipped as non-finite are skipped and max_skipped_steps stops the
 * run as before; OJAS_TRAIN_PROFILE=1 prints a line of per-phase times
 * for each step; oj_bench_trainer times this very step. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "ojas/ojas.h"
#include "train_testutil.h"

#define N_STEPS 6

typedef struct {
    double loss[N_STEPS + 1], norm[N_STEPS + 1];
    int64_t steps;
} step_log;

static void on_metrics(const oj_train_metrics *m, void *ctx) {
    step_log *r = ctx;
    if (m->is_eval || m->step < 1 || m->step > N_STEPS) return;
    r->loss[m->step] = m->loss;
    r->norm[m->step] = m->grad_norm;
    r->steps = m->step;
}

static uint64_t bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint64_t file_hash(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("cannot open %s", path);
    XXH64_state_t *s = XXH64_createState();
    XXH64_reset(s, 0);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) XXH64_update(s, buf, n);
    fclose(f);
    uint64_t h = XXH64_digest(s);
    XXH64_freeState(s);
    return h;
}

/* The bits of a run: losses and grad norms of steps 1..6, then the hashes
 * of ckpt-000006's model and optimizer files. */
typedef struct {
    const char *name;
    uint64_t loss[N_STEPS], norm[N_STEPS], model, optim;
} golden;

/* Recorded with the step that read the loss after each backward and the
 * norms in clip (commit adc3ac1). */
static const golden GOLDEN[] = {
    /* re-recorded when each micro-batch's gradient became summed whole,
     * in micro-batch order (train/dist.c), the sum every world size of a
     * data-parallel run shares: the tied wte/lm_head gradient used to take
     * a micro-batch's two contributions one at a time */
    {"nanolab-accum2",
     {0x4019138820000000ull, 0x4018e2a460000000ull, 0x4019061a80000000ull, 0x4018906d10000000ull, 0x4018570110000000ull, 0x4018508600000000ull},
     {0x3ffc224bba90d12aull, 0x3ffbcd00617c8e10ull, 0x3ff9bc0a74886edcull, 0x3ffcb0b208af4f7full, 0x3ff9cdd7c0195132ull, 0x3ff9b98a631c5c96ull},
     0x97c67ece5b42acdaull,
     0x3568050f18854243ull},
    {"gpt2-accum1",
     {0x40192af540000000ull, 0x4018c00040000000ull, 0x4019119720000000ull, 0x4018edc5c0000000ull, 0x4019221bc0000000ull, 0x4018926e00000000ull},
     {0x400b64bb6bfc2488ull, 0x400a2c7d1a9d0732ull, 0x400c994db805c827ull, 0x400a74d1d092826cull, 0x4006138af1431815ull, 0x4006d28efd7ceb00ull},
     0x2abaee5bf550e83bull,
     0x5733d41c61a77ff2ull},
    {"nanolab-bf16",
     {0x4018ffb820000000ull, 0x4019066400000000ull, 0x4018deb120000000ull, 0x4018dfa7e0000000ull, 0x4019239a20000000ull, 0x4018638d40000000ull},
     {0x4001b17f78192351ull, 0x4001c381fd2b16a8ull, 0x400431ec9998a93eull, 0x40033e09673aa36full, 0x4001bf686a917489ull, 0x40010d6c1c6e666dull},
     0x012a09fc66811111ull,
     0x042bebb9c6894b2cull},
};

static const golden *find_golden(const char *name) {
    for (size_t i = 0; i < sizeof GOLDEN / sizeof GOLDEN[0]; i++)
        if (strcmp(GOLDEN[i].name, name) == 0) return &GOLDEN[i];
    return NULL;
}

static void run_case(const char *name, const char *model, int64_t grad_accum, bool bf16) {
    char dir[256], out[300], p[400];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(out, sizeof out, "%s/run", dir);
    oj_train_config c = tt_config(dir);
    snprintf(c.model, sizeof c.model, "%s", model);
    c.grad_accum = grad_accum;
    c.optimizer = strncmp(model, "gpt2", 4) == 0 ? OJ_TRAIN_ADAMW : OJ_TRAIN_MUON;
    if (bf16) c.dtype = OJ_TRAIN_BF16;
    step_log r = {0};
    oj_train_options o = {.out_dir = out, .on_metrics = on_metrics, .ctx = &r};
    oj_train_result res;
    oj_error err = {0};
    if (oj_train(&c, &o, &res, &err) != OJ_OK) fail_msg("%s: train: %s", name, err.message);
    assert_int_equal(r.steps, N_STEPS);
    golden got = {.name = name};
    for (int s = 0; s < N_STEPS; s++) {
        got.loss[s] = bits(r.loss[s + 1]);
        got.norm[s] = bits(r.norm[s + 1]);
    }
    snprintf(p, sizeof p, "%s/ckpt-000006/model.safetensors", out);
    got.model = file_hash(p);
    snprintf(p, sizeof p, "%s/ckpt-000006/optimizer.safetensors", out);
    got.optim = file_hash(p);
    tt_rmdir(dir);
    const golden *want = find_golden(name);
    bool same = want != NULL && memcmp(want->loss, got.loss, sizeof got.loss) == 0 &&
                memcmp(want->norm, got.norm, sizeof got.norm) == 0 && want->model == got.model &&
                want->optim == got.optim;
    if (!same) {
        fprintf(stderr, "    {\"%s\",\n     {", name);
        for (int s = 0; s < N_STEPS; s++)
            fprintf(stderr, "0x%016llxull%s", (unsigned long long)got.loss[s], s + 1 < N_STEPS ? ", " : "},\n     {");
        for (int s = 0; s < N_STEPS; s++)
            fprintf(stderr, "0x%016llxull%s", (unsigned long long)got.norm[s], s + 1 < N_STEPS ? ", " : "},\n");
        fprintf(stderr, "     0x%016llxull,\n     0x%016llxull},\n", (unsigned long long)got.model,
                (unsigned long long)got.optim);
        for (int s = 0; s < N_STEPS; s++)
            fprintf(stderr, "step %d: loss %.17g norm %.17g\n", s + 1, r.loss[s + 1], r.norm[s + 1]);
        fail_msg("%s: the step's losses, grad norms or checkpoint differ from the recorded bits", name);
    }
}

static void test_muon_accum_bits(void **state) {
    (void)state;
    run_case("nanolab-accum2", "nanolab-tiny", 2, false);
}

static void test_adamw_bits(void **state) {
    (void)state;
    run_case("gpt2-accum1", "gpt2-tiny", 1, false);
}

static void test_bf16_bits(void **state) {
    (void)state;
    run_case("nanolab-bf16", "nanolab-tiny", 1, true);
}

/* lr 1e30: the weights blow up after the first step; every later step is
 * skipped as non-finite (its loss and norm still reported) and the run
 * stops after max_skipped_steps of them in a row; 0 never stops. */
static void skip_case(int64_t max_skipped, int64_t max_steps, oj_status want_st,
                      int64_t want_steps) {
    char dir[256], out[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(out, sizeof out, "%s/run", dir);
    oj_train_config c = tt_config(dir);
    c.lr = c.muon_lr = 1e30;
    c.warmup_steps = 0;
    c.max_steps = max_steps;
    c.max_skipped_steps = max_skipped;
    c.eval_every = c.ckpt_every = 0;
    step_log r = {0};
    oj_train_options o = {.out_dir = out, .on_metrics = on_metrics, .ctx = &r};
    oj_train_result res;
    oj_error err = {0};
    oj_status st = oj_train(&c, &o, &res, &err);
    tt_rmdir(dir);
    if (st != want_st) fail_msg("status %d, want %d: %s", (int)st, (int)want_st, err.message);
    if (want_st == OJ_ERR_NUMERIC)
        assert_non_null(strstr(err.message, "steps in a row were skipped as non-finite"));
    assert_int_equal(r.steps, want_steps);
    assert_true(isfinite(r.loss[1]) && isfinite(r.norm[1]));
    assert_false(isfinite(r.norm[want_steps]));
}

static void test_skipped_steps_stop_the_run(void **state) {
    (void)state;
    skip_case(3, N_STEPS, OJ_ERR_NUMERIC, 4); /* step 1 applied, 2..4 skipped */
}

static void test_skipped_steps_never_stop_at_zero(void **state) {
    (void)state;
    skip_case(0, N_STEPS, OJ_OK, N_STEPS);
}

/* oj_bench_trainer runs the trainer's own step: on the same config, its
 * last loss is the loss oj_train reports at the same step, bit for bit;
 * it reports the device work back to back and the difference. */
static void test_bench_runs_the_trainer_step(void **state) {
    (void)state;
    char dir[256], out[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(out, sizeof out, "%s/run", dir);
    oj_train_config c = tt_config(dir);
    c.max_steps = 3;
    oj_train_options o = {.out_dir = out};
    oj_train_result res;
    oj_error err = {0};
    if (oj_train(&c, &o, &res, &err) != OJ_OK) fail_msg("train: %s", err.message);
    oj_bench_result r;
    if (oj_bench_trainer(&c, 1, 2, true, &r, &err) != OJ_OK) fail_msg("bench: %s", err.message);
    assert_memory_equal(&r.loss, &res.train_loss, sizeof r.loss);
    assert_true(r.step_ms > 0 && r.min_ms <= r.step_ms && r.step_ms <= r.max_ms);
    assert_true(r.kernel_ms > 0);
    assert_memory_equal(&(double){r.step_ms - r.kernel_ms}, &r.overhead_ms, sizeof(double));
    assert_true(r.overhead_measurable == (r.overhead_ms >= 0));
    /* a negative overhead is noise, never printed as a cost */
    char buf[160];
    oj_bench_result q = {.step_ms = 3600, .min_ms = 3500, .max_ms = 3700, .overhead_ms = 1.25};
    assert_string_equal(oj_bench_overhead_text(&q, buf, sizeof buf), "1.25 ms");
    q.overhead_ms = -1955.74;
    assert_string_equal(oj_bench_overhead_text(&q, buf, sizeof buf),
                        "not measurable (-1955.74 ms: the two timings disagree beyond noise; a "
                        "loaded machine?)");
    q = (oj_bench_result){.step_ms = 42.63, .min_ms = 42.5, .max_ms = 42.7, .overhead_ms = -0.32};
    assert_string_equal(oj_bench_overhead_text(&q, buf, sizeof buf),
                        "none measurable (-0.32 ms, within noise)");
    q.overhead_ms = NAN;
    assert_string_equal(oj_bench_overhead_text(&q, buf, sizeof buf), "not measured");
    assert_true(r.tokens_per_s > 0 && r.params > 0 && r.peak_bytes > 0);
    /* without the kernel loop: not measured */
    if (oj_bench_trainer(&c, 0, 1, false, &r, &err) != OJ_OK) fail_msg("bench: %s", err.message);
    assert_true(isnan(r.kernel_ms) && isnan(r.overhead_ms));
    tt_rmdir(dir);
    /* no data directory: a generated shard below the model's vocabulary */
    c.data_dir[0] = '\0';
    if (oj_bench_trainer(&c, 1, 1, true, &r, &err) != OJ_OK) fail_msg("bench: %s", err.message);
    assert_true(isfinite(r.loss) && r.loss > 0);
    assert_int_equal(oj_bench_trainer(&c, 1, 0, true, &r, &err), OJ_ERR_INVALID_ARGUMENT);
    snprintf(c.data_dir, sizeof c.data_dir, "%s/nowhere", dir);
    err = (oj_error){0};
    oj_status bst = oj_bench_trainer(&c, 1, 1, true, &r, &err);
    if (bst == OJ_OK) fail_msg("bench on a missing directory ran");
    if (strstr(err.message, "nowhere") == NULL) fail_msg("%d: %s", (int)bst, err.message);
}

/* OJAS_TRAIN_PROFILE=1 (and 2): one line per step on stderr naming every
 * phase; the run's bits are unchanged. */
static void profile_case(const char *mode) {
    char dir[256], out[300], log[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(log, sizeof log, "%s/stderr.txt", dir);
    oj_train_config c = tt_config(dir);
    c.max_steps = 3;
    c.eval_every = c.ckpt_every = 0;
    step_log r = {0};
    oj_train_options o = {.out_dir = out, .on_metrics = on_metrics, .ctx = &r};
    oj_train_result res;
    oj_error err = {0};
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    dup2(fileno(f), 2);
    setenv("OJAS_TRAIN_PROFILE", mode, 1);
    oj_status st = oj_train(&c, &o, &res, &err);
    unsetenv("OJAS_TRAIN_PROFILE");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    if (st) fail_msg("train: %s", err.message);
    f = fopen(log, "r");
    char line[1024];
    int steps = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "profile step ", 13) != 0) continue;
        steps++;
        const char *want[] = {"loader ", "fwd_bwd ", "optim ", "loss ", "metrics ",
                              "total "};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            if (strstr(line, want[i]) == NULL) fail_msg("'%s' lacks '%s'", line, want[i]);
    }
    fclose(f);
    tt_rmdir(dir);
    assert_int_equal(steps, 3);
    const golden *g = find_golden("nanolab-accum2");
    for (int s = 0; s < 3; s++) {
        assert_int_equal(bits(r.loss[s + 1]), g->loss[s]);
        assert_int_equal(bits(r.norm[s + 1]), g->norm[s]);
    }
}

static void test_profile_lines(void **state) {
    (void)state;
    profile_case("1");
    profile_case("2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_muon_accum_bits),
        cmocka_unit_test(test_adamw_bits),
        cmocka_unit_test(test_bf16_bits),
        cmocka_unit_test(test_skipped_steps_stop_the_run),
        cmocka_unit_test(test_skipped_steps_never_stop_at_zero),
        cmocka_unit_test(test_bench_runs_the_trainer_step),
        cmocka_unit_test(test_profile_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
