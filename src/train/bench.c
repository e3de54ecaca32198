/* Training-step benchmark (oj_bench_trainer), shared by `ojas bench` and
 * bench/gpu/bench_gpu_train: the trainer's own step, what `ojas train`
 * runs, then the same device work back to back for the overhead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/internal.h"
#include "optim/optim_internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "ojas/train.h"
#include "train/train_internal.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A fresh directory under $TMPDIR (or /tmp) into buf; "" on failure. */
static bool make_tmpdir(char *buf, size_t len, const char *what) {
    const char *base = getenv("TMPDIR");
    int n = snprintf(buf, len, "%s/ojas-bench-%s-XXXXXX", base && *base ? base : "/tmp", what);
    if (n > 0 && (size_t)n < len && mkdtemp(buf) != NULL) return true;
    buf[0] = '\0';
    return false;
}

/* Remove dir and what the bench wrote in it (one level of directories:
 * shards, metrics.jsonl, .lock). */
static void remove_tree(const char *dir) {
    if (dir[0] == '\0') return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench: warning: could not remove %s\n", dir);
}

/* dir/train_000000.bin: n pseudo-random tokens < V (xorshift64, the
 * tokens the benchmark drew before it ran the trainer). */
static oj_status write_random_shard(const char *dir, int64_t n, int64_t V, oj_error *err) {
    if (n > INT32_MAX)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "bench: %lld tokens are too many for one generated shard; pass a "
                            "data directory",
                            (long long)n);
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (tok == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "bench: out of host memory");
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int32_t)(s % (uint64_t)V);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    oj_status st = oj_shard_write(path, tok, n, 2, err);
    free(tok);
    return st;
}

/* The device work of the trainer's step back to back on one resident
 * batch: forward + backward (the trainer's graph, or eager), clip, the
 * trainer's optimizer step (its non-finite check included) and the loss
 * read-back; no loader, schedule or metrics. Median ms into *ms. */
static oj_status kernel_steps(oj_trainer *t, int steps, double *ms, oj_error *err) {
    oj_engine *eng = t->eng;
    const oj_train_config *c = &t->cfg;
    double *each = calloc((size_t)steps, sizeof *each);
    if (each == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "bench: out of host memory");
    oj_tensor *x = NULL, *y = NULL;
    oj_status st = OJ_OK;
    if (!c->cuda_graph && oj_loader_next(t->train, eng, &x, &y) != OJ_OK) st = oj_last_status(eng);
    if (x) oj__scope_detach(x);
    if (y) oj__scope_detach(y);
    for (int it = 0; st == OJ_OK && it < steps; it++) {
        double t0 = now_ms();
        oj_scope_begin(eng);
        oj_tensor *loss = NULL;
        if (c->cuda_graph) {
            if (oj__step_graph_run(&t->graph, NULL, NULL) == OJ_OK) loss = t->graph.loss;
        } else {
            for (int64_t k = 0; k < c->grad_accum; k++) {
                loss = oj_gpt_loss(t->model, x, y);
                oj_tensor *scaled =
                    c->grad_accum == 1 ? loss : oj_mul_scalar(loss, 1.0 / (double)c->grad_accum);
                if (scaled == NULL || oj_backward(scaled, false) != OJ_OK) break;
            }
        }
        /* the clip and the step as the trainer runs them (a skipped step
         * took its time too), then the loss read where the trainer reads it */
        if (oj_last_status(eng) == OJ_OK) oj__optim_clip_step(t->optim, c->grad_clip, NULL, NULL);
        if (oj_last_status(eng) == OJ_OK) oj_item(loss);
        if (c->cuda_graph && oj_last_status(eng) == OJ_OK) oj__step_graph_check(&t->graph);
        if (!c->cuda_graph) oj_optim_zero_grad(t->optim);
        oj_scope_end(eng);
        each[it] = now_ms() - t0;
        if (oj_last_status(eng) != OJ_OK) {
            st = oj_last_status(eng);
            oj_error_set(err, st, "bench: kernel step: %s", oj_last_error(eng));
            oj_clear_error(eng);
        }
    }
    if (st == OJ_OK) {
        qsort(each, (size_t)steps, sizeof *each, cmp_double);
        *ms = each[steps / 2];
    }
    oj_release(x);
    oj_release(y);
    free(each);
    return st;
}

oj_status oj_bench_trainer(const oj_train_config *cfg, int warmup, int steps, bool kernel,
                           oj_bench_result *out, oj_error *err) {
    if (cfg == NULL || out == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "bench: NULL argument");
    if (steps < 1 || warmup < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "bench: need steps >= 1 and warmup >= 0 (got %d, %d)", steps, warmup);
    memset(out, 0, sizeof *out);
    oj_train_config c = *cfg;
    c.max_steps = warmup + steps;
    c.eval_every = c.ckpt_every = 0; /* evals and checkpoints only at a run's end: none here */
    char data_dir[sizeof c.data_dir] = "", out_dir[4096] = "";
    oj_status st = OJ_OK;
    if (c.data_dir[0] == '\0') {
        oj_gpt_config mc;
        st = oj_train_model_config(&c, 0, &mc, err);
        int64_t T = c.seq_len > 0 ? c.seq_len : mc.block_size;
        if (!st && !make_tmpdir(data_dir, sizeof data_dir, "data"))
            st = oj_error_set(err, OJ_ERR_IO, "bench: cannot create a temporary directory");
        if (!st) /* a batch per step, none repeated */
            st = write_random_shard(data_dir, (int64_t)(warmup + steps + 1) * c.grad_accum *
                                                      c.batch_size * T + 1,
                                    mc.vocab_size, err);
        memcpy(c.data_dir, data_dir, sizeof c.data_dir);
    }
    if (!st && !make_tmpdir(out_dir, sizeof out_dir, "run"))
        st = oj_error_set(err, OJ_ERR_IO, "bench: cannot create a temporary directory");
    /* the log and the metrics are written as for a user, to nowhere */
    FILE *log = st ? NULL : fopen("/dev/null", "w");
    oj_train_options o = {.out_dir = out_dir, .log = log};
    oj_trainer *t = NULL;
    if (!st) st = oj_trainer_create(&c, &o, &t, err);
    double *ms = st ? NULL : calloc((size_t)steps, sizeof *ms);
    if (!st && ms == NULL) st = oj_error_set(err, OJ_ERR_CAPACITY, "bench: out of host memory");
    if (!st) oj__trainer_begin(t);
    /* each step as oj_trainer_run takes it, timed from its start to the
     * start of the next: the step, its read-backs, its report */
    for (int it = 0; !st && it < warmup + steps; it++) {
        double t0 = now_ms();
        st = oj__trainer_step(t, NULL, err);
        if (it >= warmup) ms[it - warmup] = now_ms() - t0;
    }
    if (!st) {
        qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
        int64_t tokens = c.grad_accum * c.batch_size * t->T;
        out->step_ms = ms[steps / 2];
        out->min_ms = ms[0];
        out->max_ms = ms[steps - 1];
        out->tokens_per_s = (double)tokens / (out->step_ms * 1e-3);
        out->flops_per_token = t->flops_per_token;
        out->achieved_flops = out->flops_per_token * out->tokens_per_s;
        out->loss = t->last_loss;
        out->peak_bytes = oj_budget_peak(oj_engine_budget(t->eng));
        out->peak_allocated_bytes = oj_engine_max_memory_allocated(t->eng);
        out->params = oj_gpt_num_params(t->model);
        out->kernel_ms = out->overhead_ms = NAN;
        out->overhead_measurable = false;
        if (kernel && (st = kernel_steps(t, steps, &out->kernel_ms, err)) == OJ_OK) {
            out->overhead_ms = out->step_ms - out->kernel_ms;
            out->overhead_measurable = out->overhead_ms >= 0;
        }
    }
    free(ms);
    oj_trainer_free(t);
    if (log) fclose(log);
    remove_tree(out_dir);
    remove_tree(data_dir);
    return st;
}

const char *oj_bench_overhead_text(const oj_bench_result *r, char *buf, size_t n) {
    const double o = r->overhead_ms;
    const double noise = fmax(0.02 * r->step_ms, r->max_ms - r->min_ms);
    if (isnan(o))
        snprintf(buf, n, "not measured");
    else if (o >= 0)
        snprintf(buf, n, "%.2f ms", o);
    else if (-o <= noise)
        snprintf(buf, n, "none measurable (%.2f ms, within noise)", o);
    else
        snprintf(buf, n, "not measurable (%.2f ms: the two timings disagree beyond noise; a "
                         "loaded machine?)", o);
    return buf;
}
