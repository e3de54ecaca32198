/* Training-step benchmark (oj_bench_train_step), shared by `ojas bench`
 * and bench/gpu/bench_gpu_train. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "ojas/autograd.h"
#include "ojas/optim.h"
#include "ojas/train.h"
#include "train/train_internal.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* OJAS_BENCH_PHASES=1: each phase of each step ends with a device
 * synchronisation and prints its wall, user and system time and minor page
 * faults to stderr, so host time can be told apart from device time. */
typedef struct {
    bool on;
    double wall, user, sys;
    long minflt;
} phase_clock;

static void phase_read(phase_clock *c) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    c->wall = now_ms();
    c->user = (double)ru.ru_utime.tv_sec * 1e3 + (double)ru.ru_utime.tv_usec * 1e-3;
    c->sys = (double)ru.ru_stime.tv_sec * 1e3 + (double)ru.ru_stime.tv_usec * 1e-3;
    c->minflt = ru.ru_minflt;
}

static void phase_end(oj_engine *eng, phase_clock *c, int it, const char *name) {
    if (!c->on) return;
    oj_engine_synchronize(eng);
    phase_clock n;
    phase_read(&n);
    fprintf(stderr, "phase step %d %-9s wall %9.2f ms  user %9.2f  sys %9.2f  minflt %ld\n", it,
            name, n.wall - c->wall, n.user - c->user, n.sys - c->sys, n.minflt - c->minflt);
    phase_read(c);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* B x T + 1 pseudo-random tokens (xorshift64), inputs and shifted targets. */
static oj_status random_batch(oj_engine *eng, int64_t B, int64_t T, int64_t V, oj_tensor **x,
                              oj_tensor **y) {
    int64_t n = B * T;
    int64_t *tok = malloc((size_t)(n + 1) * sizeof *tok);
    if (tok == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "bench: out of host memory");
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i <= n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int64_t)(s % (uint64_t)V);
    }
    int64_t shape[2] = {B, T};
    *x = oj_from_host(eng, 2, shape, OJ_I64, tok, (size_t)n * sizeof *tok);
    *y = oj_from_host(eng, 2, shape, OJ_I64, tok + 1, (size_t)n * sizeof *tok);
    free(tok);
    return *x && *y ? OJ_OK : oj_last_status(eng);
}

oj_status oj_bench_train_step(oj_engine *eng, const oj_gpt_config *mc, int64_t B, int64_t T,
                              int warmup, int steps, bool cuda_graph, oj_bench_result *out) {
    if (eng == NULL || mc == NULL || out == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (B < 1 || T < 1 || steps < 1 || warmup < 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "bench: need B, T, steps >= 1 and warmup >= 0 (got %lld, %lld, %d, %d)",
                            (long long)B, (long long)T, steps, warmup);
    oj_gpt *m = NULL;
    oj_status st = oj_gpt_create(eng, mc, 1, &m);
    if (st != OJ_OK) return st;
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_optim *opt = oj_optim_create(eng);
    oj_optim_hparams adamw = oj_adamw_hparams(6e-4, 0.1), muon = oj_muon_hparams(0.02);
    int g = opt == NULL ? -1
            : mc->family == OJ_GPT2
                ? oj_optim_add_group(opt, &adamw, &sd)
                : oj_optim_add_muon_split(opt, &sd, &muon, &adamw, NULL, NULL);
    oj_tensor *x = NULL, *y = NULL;
    double *ms = calloc((size_t)steps, sizeof *ms);
    if (g < 0 || ms == NULL) st = oj_last_status(eng) ? oj_last_status(eng) : OJ_ERR_CAPACITY;
    if (st == OJ_OK) st = random_batch(eng, B, T, mc->vocab_size, &x, &y);
    if (opt) oj_optim_set_check_update(opt, false);
    double loss = NAN;
    const char *ph = getenv("OJAS_BENCH_PHASES");
    phase_clock pc = {.on = ph && ph[0] == '1'};
    oj__step_graph sg = {0};
    for (int it = 0; st == OJ_OK && it < warmup + steps; it++) {
        /* with a graph: the first step runs eagerly (the optimizer's state
         * and cuBLAS come to exist), the capture follows (untimed when
         * warmup >= 2) */
        if (cuda_graph && sg.graph == NULL && (it == 1 || warmup + steps == 1)) {
            st = oj__step_graph_capture(m, x, y, &sg);
            if (st != OJ_OK) break;
        }
        if (pc.on) oj_engine_synchronize(eng), phase_read(&pc);
        double t0 = now_ms();
        oj_scope_begin(eng);
        oj_tensor *l = NULL;
        if (sg.graph) {
            st = oj__step_graph_run(&sg, NULL, NULL);
            l = sg.loss;
            phase_end(eng, &pc, it, "graph");
        } else {
            l = oj_gpt_loss(m, x, y);
            phase_end(eng, &pc, it, "forward");
            st = l ? oj_backward(l, false) : oj_last_status(eng);
            phase_end(eng, &pc, it, "backward");
        }
        if (st == OJ_OK) oj_optim_clip_grad_norm(opt, 1.0);
        phase_end(eng, &pc, it, "clip");
        if (st == OJ_OK) {
            st = oj_optim_step(opt, NULL);
            if (st == OJ_ERR_NUMERIC) st = OJ_OK; /* a skipped step still took its time */
        }
        phase_end(eng, &pc, it, "step");
        if (st == OJ_OK) loss = oj_item(l); /* waits for the device */
        if (sg.graph == NULL) oj_optim_zero_grad(opt); /* the graph rewrites its gradients */
        phase_end(eng, &pc, it, "zero_grad");
        oj_scope_end(eng);
        phase_end(eng, &pc, it, "scope_end");
        if (it >= warmup) ms[it - warmup] = now_ms() - t0;
        if (st == OJ_OK && oj_last_status(eng) != OJ_OK) st = oj_last_status(eng);
    }
    if (st == OJ_OK) {
        qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
        out->step_ms = ms[steps / 2];
        out->min_ms = ms[0];
        out->max_ms = ms[steps - 1];
        out->tokens_per_s = (double)(B * T) / (out->step_ms * 1e-3);
        out->flops_per_token = oj_gpt_flops_per_token(m, T);
        out->achieved_flops = out->flops_per_token * out->tokens_per_s;
        out->loss = loss;
        out->peak_bytes = oj_budget_peak(oj_engine_budget(eng));
        out->peak_allocated_bytes = oj_engine_max_memory_allocated(eng);
        out->params = oj_gpt_num_params(m);
    }
    free(ms);
    oj__step_graph_free(&sg);
    oj_release(x);
    oj_release(y);
    oj_optim_free(opt);
    oj_gpt_free(m);
    return st;
}
