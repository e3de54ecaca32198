/* GPU training-step benchmark: one full step (forward, backward, optimizer)
 * of a GPT preset on B x T random tokens on a CUDA engine, as the PyTorch
 * anchors (../shared/anchors/train_bench.py) time it: median step time over
 * the timed steps after warm-up, tokens/s, MFU and peak memory.
 *
 * FLOPs per token = 6 N + 12 L C T (N: parameters that take part in
 * matmuls, i.e. all but the position table), the anchors' formula; MFU is
 * reported against 989 TFLOP/s (H200 dense bf16 datasheet) and against the
 * GEMM ceiling given by MM_TFLOPS (measured by the anchors, 798 on the
 * 2026-11-29 H200).
 *
 * usage: bench_gpu_train PRESET B T [steps] [warmup]   (JSON line on stdout)
 * The optimizer is AdamW (lr 6e-4, wd 0.1) for gpt2 presets and Muon for
 * hidden matrices + AdamW for the rest for nanolab, clip 1.0 for gpt2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ojas/ojas.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PRESET B T [steps] [warmup] [cpu]\n", argv[0]);
        return 2;
    }
    const char *preset = argv[1];
    int64_t B = atoll(argv[2]), T = atoll(argv[3]);
    int steps = argc > 4 ? atoi(argv[4]) : 20, warmup = argc > 5 ? atoi(argv[5]) : 5;
    bool on_cpu = argc > 6 && strcmp(argv[6], "cpu") == 0;
    oj_gpt_config mc;
    if (!oj_gpt_preset(preset, &mc)) {
        fprintf(stderr, "unknown preset %s\n", preset);
        return 2;
    }
    if (mc.family == OJ_GPT2) mc.vocab_size = 50304; /* as the anchors' nanoGPT-style model */
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = on_cpu ? OJ_DEVICE_CPU : OJ_DEVICE_CUDA;
    ec.numerics = OJ_NUMERICS_FAST;
    ec.seed = 1;
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (oj_engine_create(&ec, &eng, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    oj_gpt *m = NULL;
    if (oj_gpt_create(eng, &mc, 1, &m) != OJ_OK) {
        fprintf(stderr, "model: %s\n", oj_last_error(eng));
        return 1;
    }
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_optim *opt = oj_optim_create(eng);
    oj_optim_hparams adamw = oj_adamw_hparams(6e-4, 0.1);
    int rc = mc.family == OJ_GPT2 ? oj_optim_add_group(opt, &adamw, &sd) : 0, rc2 = 0;
    if (mc.family != OJ_GPT2) {
        oj_optim_hparams muon = oj_muon_hparams(0.02);
        rc2 = oj_optim_add_muon_split(opt, &sd, &muon, &adamw, NULL, NULL);
    }
    if (rc < 0 || rc2 < 0) {
        fprintf(stderr, "optimizer: %s\n", oj_last_error(eng));
        return 1;
    }
    oj_optim_set_check_update(opt, false);
    /* Random tokens, uploaded once (the anchors time steps on resident data). */
    int64_t n = B * T;
    int64_t *tok = malloc((size_t)(n + 1) * sizeof *tok);
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i <= n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int64_t)(s % (uint64_t)mc.vocab_size);
    }
    int64_t shape[2] = {B, T};
    oj_tensor *x = oj_from_host(eng, 2, shape, OJ_I64, tok, (size_t)n * sizeof *tok);
    oj_tensor *y = oj_from_host(eng, 2, shape, OJ_I64, tok + 1, (size_t)n * sizeof *tok);
    free(tok);
    double *ms = calloc((size_t)steps, sizeof *ms);
    double loss_v = NAN;
    for (int it = 0; it < warmup + steps; it++) {
        double t0 = now_s();
        oj_scope_begin(eng);
        oj_tensor *loss = oj_gpt_loss(m, x, y);
        oj_status st = loss ? oj_backward(loss, false) : oj_last_status(eng);
        if (st == OJ_OK && mc.family == OJ_GPT2) {
            double norm = oj_optim_clip_grad_norm(opt, 1.0);
            (void)norm;
        }
        oj_optim_step_info info;
        if (st == OJ_OK) st = oj_optim_step(opt, &info);
        if (st == OJ_OK) loss_v = oj_item(loss); /* synchronises the stream */
        oj_optim_zero_grad(opt);
        oj_scope_end(eng);
        if (st != OJ_OK && st != OJ_ERR_NUMERIC) {
            fprintf(stderr, "step %d: %s\n", it, oj_last_error(eng));
            return 1;
        }
        double dt = (now_s() - t0) * 1e3;
        if (it >= warmup) ms[it - warmup] = dt;
        fprintf(stderr, "step %d: %.2f ms loss %.4f\n", it, dt, loss_v);
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_d);
    double med = ms[steps / 2];
    double flops_tok = oj_gpt_flops_per_token(m, T);
    double tok_s = (double)n / (med * 1e-3);
    const char *mm = getenv("MM_TFLOPS");
    double mm_tflops = mm ? atof(mm) : 798.0;
    double peak_gib = (double)oj_budget_peak(oj_engine_budget(eng)) / (1024.0 * 1024 * 1024);
    printf("{\"system\": \"ojas\", \"preset\": \"%s\", \"device\": \"%s\", \"B\": %lld, \"T\": %lld, "
           "\"dtype\": \"f32 (TF32 GEMMs)\", \"step_ms\": %.3f, \"tok_s\": %.0f, "
           "\"flops_per_token\": %.4g, \"mfu_989\": %.4f, \"mfu_mm\": %.4f, \"peak_gib\": %.3f, "
           "\"loss\": %.4f, \"params\": %lld}\n",
           preset, on_cpu ? "cpu" : "cuda", (long long)B, (long long)T, med, tok_s, flops_tok,
           flops_tok * tok_s / 989e12, flops_tok * tok_s / (mm_tflops * 1e12), peak_gib, loss_v,
           (long long)oj_gpt_num_params(m));
    free(ms);
    oj_release(x);
    oj_release(y);
    oj_optim_free(opt);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return 0;
}
