// test: N training steps in one run equal N/2 steps, a stop (as on
// SIGINT), a resume from the checkpoint and N/2 more steps: the same train
// and val losses bit for bit and byte-identical model and optimizer files,
// under EXACT numerics with Muon + AdamW, grad accumulation and shuffled
// data; and the same under bf16 autocast for gpt2-tiny and nanolab-tiny
// (the low-dtype norm outputs and norm_backward_add, the fused norm +
// rotary, attention's shared q/k/v gradients on the training path); a
// shard truncated mid-run stops the run with a clear error, no crash
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ojas/io.h"
#include "train_testutil.h"

#define N_STEPS 6

typedef struct {
    double loss[N_STEPS + 1], val[N_STEPS + 1];
    int64_t stop_at;
    int64_t accum; /* the run's grad_accum; 0: tt_config's 2 */
    volatile sig_atomic_t stop;
} run_log;

static void on_metrics(const oj_train_metrics *m, void *ctx) {
    run_log *r = ctx;
    assert_true(m->step >= 1 && m->step <= N_STEPS);
    if (m->is_eval) {
        r->val[m->step] = m->val_loss;
        return;
    }
    r->loss[m->step] = m->loss;
    assert_true(m->tokens == m->step * 2 * 16 * (r->accum ? r->accum : 2));
    assert_true(m->grad_norm > 0 && m->lr > 0 && m->tokens_per_s > 0 && m->peak_bytes > 0);
    if (m->step == r->stop_at)
        r->stop = 1; /* what the SIGINT handler does */
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

static void assert_same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, na);
    free(x);
    free(y);
}

static void run(const oj_train_config *c, const char *out, const char *resume, run_log *r,
                oj_train_result *res) {
    oj_train_options o = {.out_dir = out, .resume = resume, .stop = &r->stop,
                          .on_metrics = on_metrics, .ctx = r};
    oj_error err = {0};
    oj_status st = oj_train(c, &o, res, &err);
    if (st)
        fail_msg("train: %s", err.message);
}

/* The model and optimizer files of checkpoint `step` in run directories
 * a and b: the same bytes. */
static void assert_same_ckpt(const char *a, const char *b, int step) {
    char pa[400], pb[400];
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(pa, sizeof pa, "%s/ckpt-%06d/%s", a, step, files[i]);
        snprintf(pb, sizeof pb, "%s/ckpt-%06d/%s", b, step, files[i]);
        assert_same_file(pa, pb);
    }
}

/* model NULL: tt_config's; bf16: bf16 autocast training; accum: grad_accum
 * (1: the trainer takes each next batch during the step before, and a run
 * with OJAS_TRAIN_PREFETCH=0 gives the same bits too) */
static void resume_case(const char *model, bool bf16, int64_t accum) {
    char dir[256], a[300], b[300], o[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(o, sizeof o, "%s/o", dir);
    oj_train_config c = tt_config(dir);
    if (model) snprintf(c.model, sizeof c.model, "%s", model);
    if (bf16) c.dtype = OJ_TRAIN_BF16;
    c.grad_accum = accum;
    oj_train_result res;

    run_log full = {.stop_at = -1, .accum = accum};
    run(&c, a, NULL, &full, &res);
    assert_int_equal(res.stop, OJ_TRAIN_DONE);
    assert_int_equal(res.step, N_STEPS);
    for (int s = 1; s <= N_STEPS; s++) assert_true(isfinite(full.loss[s]));
    if (!(full.loss[N_STEPS] < full.loss[1]))
        fail_msg("%s: loss %g -> %g", c.model, full.loss[1], full.loss[N_STEPS]);

    run_log half = {.stop_at = N_STEPS / 2, .accum = accum};
    run(&c, b, NULL, &half, &res);
    assert_int_equal(res.stop, OJ_TRAIN_SIGNAL);
    assert_int_equal(res.step, N_STEPS / 2);
    half.stop = 0;
    half.stop_at = -1;
    run(&c, b, b, &half, &res); /* resume from the run directory */
    assert_int_equal(res.stop, OJ_TRAIN_DONE);
    assert_int_equal(res.step, N_STEPS);

    for (int s = 1; s <= N_STEPS; s++) {
        assert_memory_equal(&full.loss[s], &half.loss[s], sizeof(double));
        assert_memory_equal(&full.val[s], &half.val[s], sizeof(double));
    }
    assert_true(full.val[3] > 0 && full.val[6] > 0);
    assert_same_ckpt(a, b, N_STEPS);
    if (accum == 1) { /* the batch taken at the step's start instead */
        run_log off = {.stop_at = -1, .accum = accum};
        setenv("OJAS_TRAIN_PREFETCH", "0", 1);
        run(&c, o, NULL, &off, &res);
        unsetenv("OJAS_TRAIN_PREFETCH");
        for (int s = 1; s <= N_STEPS; s++)
            if (memcmp(&full.loss[s], &off.loss[s], sizeof(double)))
                fail_msg("step %d: loss %.17g vs not prefetched %.17g", s, full.loss[s],
                         off.loss[s]);
        assert_same_ckpt(a, o, N_STEPS);
    }
    char pb[400];
    /* a resumed run continues metrics.jsonl: 6 steps + 2 evals, no duplicates */
    snprintf(pb, sizeof pb, "%s/metrics.jsonl", b);
    size_t n;
    char *m = slurp(pb, &n);
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += m[i] == '\n';
    free(m);
    assert_int_equal(lines, N_STEPS + 2);
    tt_rmdir(dir);
}

/* A resume with another block_size (seq_len unset, so the sequence
 * length follows it) is refused naming block_size, not the loader. */
static void test_resume_block_size_changed(void **state) {
    (void)state;
    char dir[256], b[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(b, sizeof b, "%s/b", dir);
    oj_train_config c = tt_config(dir);
    c.seq_len = 0;
    c.block_size = 16;
    c.max_steps = 3;
    oj_train_result res;
    run_log r = {.stop_at = -1};
    run(&c, b, NULL, &r, &res);
    c.block_size = 32;
    c.max_steps = 6;
    oj_train_options o = {.out_dir = b, .resume = b, .stop = &r.stop};
    oj_error err = {0};
    assert_int_equal(oj_train(&c, &o, &res, &err), OJ_ERR_STATE);
    if (!strstr(err.message, "block_size changed (the checkpoint's 16, now 32)"))
        fail_msg("'%s' does not name block_size", err.message);
    tt_rmdir(dir);
}

static void test_resume_bit_identical(void **state) {
    (void)state;
    resume_case(NULL, false, 2);
}

static void test_resume_bf16_nanolab(void **state) {
    (void)state;
    resume_case("nanolab-tiny", true, 2);
}

static void test_resume_bf16_gpt2(void **state) {
    (void)state;
    resume_case("gpt2-tiny", true, 2);
}

/* One micro-batch a step: the trainer takes each next batch during the
 * step before (loop.c prefetch_next). A run stopped by a signal and
 * resumed, and one with OJAS_TRAIN_PREFETCH=0, give the bits of the run
 * that never stopped (losses, val losses, the checkpoint's files): the
 * checkpoint records the loader's position before the batch taken ahead. */
static void test_resume_prefetched_batch(void **state) {
    (void)state;
    resume_case(NULL, false, 1);
}

/* The train shard truncated in place after step 2 of a run with one
 * micro-batch (the next batch taken ahead, the loader's thread one more):
 * the run stops with the shard named as truncated at the first step whose
 * batch is read after the cut, without a crash (SIGBUS past the file's
 * end) or steps on made-up tokens (zeros within its last page), and the
 * last checkpoint is that of the last step that ran. */
typedef struct {
    char shard[400];
    int64_t last_step;
} trunc_log;

static void truncate_at_step2(const oj_train_metrics *m, void *ctx) {
    trunc_log *r = ctx;
    if (m->is_eval)
        return;
    r->last_step = m->step;
    if (m->step == 2)
        assert_int_equal(truncate(r->shard, 1024 + 20 * 2), 0);
}

static void test_shard_truncated_mid_run(void **state) {
    (void)state;
    char dir[256], b[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(b, sizeof b, "%s/b", dir);
    oj_train_config c = tt_config(dir);
    c.grad_accum = 1;
    c.max_steps = 20;
    c.ckpt_every = 1;
    c.eval_every = 0;
    trunc_log r = {.last_step = 0};
    snprintf(r.shard, sizeof r.shard, "%s/data/train_000000.bin", dir);
    oj_train_options o = {.out_dir = b, .on_metrics = truncate_at_step2, .ctx = &r};
    oj_train_result res;
    oj_error err = {0};
    assert_int_equal(oj_train(&c, &o, &res, &err), OJ_ERR_IO);
    if (!strstr(err.message, "train_000000.bin") || !strstr(err.message, "truncated"))
        fail_msg("the error: %s", err.message);
    /* the batches read before the cut (at most the two taken ahead) ran */
    assert_true(r.last_step >= 2 && r.last_step <= 4);
    int64_t step = -1;
    oj_error e2 = {0};
    assert_int_equal(oj_checkpoint_latest(b, &step, &e2), OJ_OK);
    assert_int_equal(step, r.last_step);
    tt_rmdir(dir);
}

/* ---- the dtype kept in the checkpoint */

/* A bf16 run (dtype=bf16) stopped and resumed: the checkpoint keeps the
 * dtype (oj_train_config_from_checkpoint gives bf16, what `ojas train
 * --resume` uses), and the resumed run is bit-identical to the run that
 * never stopped under EXACT numerics (losses, val losses, model and
 * optimizer files), and differs from the f32 run. */
static void test_train_bf16_resume(void **state) {
    (void)state;
    char dir[256], a[300], b[300], f[300];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(f, sizeof f, "%s/f", dir);
    oj_train_config c = tt_config(dir);
    c.max_steps = N_STEPS;
    c.eval_every = c.ckpt_every = 2;
    oj_error err = {0};
    assert_int_equal(oj_train_config_set(&c, "dtype=bf16", &err), OJ_OK);
    oj_train_result res;
    run_log full = {.stop_at = -1}, half = {.stop_at = N_STEPS / 2}, f32 = {.stop_at = -1};
    run(&c, a, NULL, &full, &res);
    assert_int_equal(res.step, N_STEPS);
    run(&c, b, NULL, &half, &res);
    assert_int_equal(res.stop, OJ_TRAIN_SIGNAL);
    oj_train_config rc;
    assert_int_equal(oj_train_config_from_checkpoint(b, &rc, &err), OJ_OK);
    assert_int_equal(rc.dtype, OJ_TRAIN_BF16);
    half.stop = 0;
    half.stop_at = -1;
    run(&rc, b, b, &half, &res);
    assert_int_equal(res.step, N_STEPS);
    for (int s = 1; s <= N_STEPS; s++) {
        if (memcmp(&full.loss[s], &half.loss[s], sizeof(double)))
            fail_msg("step %d: loss %.17g vs resumed %.17g", s, full.loss[s], half.loss[s]);
        if (s % 2 == 0) assert_memory_equal(&full.val[s], &half.val[s], sizeof(double));
    }
    assert_same_ckpt(a, b, N_STEPS);
    c.dtype = OJ_TRAIN_F32;
    run(&c, f, NULL, &f32, &res);
    assert_true(f32.loss[N_STEPS] != full.loss[N_STEPS]); /* bf16 really ran */
    assert_true(fabs(f32.loss[N_STEPS] - full.loss[N_STEPS]) < 0.05 * f32.loss[N_STEPS]);
    tt_rmdir(dir);
}

/* oj_trainer_train_step N times and oj_trainer_checkpoint write the same
 * model and optimizer files as oj_train over N steps, the metrics each
 * step returns are its on_metrics record, and a step past max_steps is
 * OJ_ERR_STATE. */
static void test_steps_by_hand(void **state) {
    (void)state;
    char dir[256], a[300], b[300], path[4096];
    assert_int_equal(tt_tmpdir(dir, sizeof dir), 0);
    assert_int_equal(tt_write_shards(dir, 3000, 200), 0);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    oj_train_config c = tt_config(dir);
    oj_train_result res;
    run_log full = {.stop_at = -1};
    run(&c, a, NULL, &full, &res);

    oj_train_options o = {.out_dir = b};
    oj_trainer *t = NULL;
    oj_error err = {0};
    if (oj_trainer_create(&c, &o, &t, &err)) fail_msg("create: %s", err.message);
    for (int s = 1; s <= N_STEPS; s++) {
        oj_train_metrics m;
        if (oj_trainer_train_step(t, &m, &err)) fail_msg("step %d: %s", s, err.message);
        assert_int_equal(m.step, s);
        assert_int_equal(m.tokens, s * 2 * 16 * 2);
        assert_memory_equal(&m.loss, &full.loss[s], sizeof(double));
        assert_true(m.grad_norm > 0 && m.lr > 0);
    }
    assert_int_equal(oj_trainer_train_step(t, NULL, &err), OJ_ERR_STATE);
    assert_non_null(strstr(err.message, "max_steps"));
    err = (oj_error){0};
    if (oj_trainer_checkpoint(t, path, sizeof path, &err)) fail_msg("ckpt: %s", err.message);
    assert_non_null(strstr(path, "ckpt-000006"));
    oj_trainer_free(t);
    assert_same_ckpt(a, b, 6);
    tt_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_bit_identical),
        cmocka_unit_test(test_resume_block_size_changed),
        cmocka_unit_test(test_resume_bf16_nanolab),
        cmocka_unit_test(test_resume_bf16_gpt2),
        cmocka_unit_test(test_resume_prefetched_batch),
        cmocka_unit_test(test_shard_truncated_mid_run),
        cmocka_unit_test(test_train_bf16_resume),
        cmocka_unit_test(test_steps_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
