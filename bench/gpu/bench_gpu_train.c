/* GPU training-step benchmark: the trainer's own step (oj_bench_trainer:
 * what `ojas train` runs, loader, clipping, schedule, optimizer with its
 * non-finite check, read-backs and metrics included) of a GPT preset, B x
 * T tokens per step, on the train_*.bin shards of --data DIR or on a
 * generated shard of random tokens. Prints one JSON line
 * (docs/bench-gpu.md): step_ms and tok_s are the trainer's step; kernel_ms
 * is the same device work back to back on one resident batch, overhead_ms
 * the difference (the CLI-to-kernel overhead). OJAS_TRAIN_PROFILE=1 adds a
 * per-phase line for every step on stderr.
 *
 * FLOPs per token = 6 N + 12 L C T (N: parameters that take part in
 * matmuls, i.e. all but the position table), the anchors' formula; MFU is
 * reported against 989 TFLOP/s (H200 dense bf16 datasheet) and against the
 * GEMM ceiling in MM_TFLOPS (measured by the anchors in the same run).
 * peak_gib: the root budget's peak (pooled free blocks included, like
 * max_memory_reserved); peak_alloc_gib: live storage only, PyTorch's
 * max_memory_allocated.
 *
 * usage: bench_gpu_train PRESET B T [steps] [warmup] [cpu|cuda] [f32|bf16] [graph]
 *                        [--data DIR] [--vocab V] [--set KEY=VALUE]...
 * bf16: the forward runs under bf16 autocast (f32 master weights); graph:
 * forward and backward captured once as a CUDA graph, replayed each step.
 * gpt2 presets train with AdamW (lr 6e-4, weight decay 0.1) at vocab 50304
 * unless --vocab says otherwise (the anchors' nanoGPT-style model);
 * nanolab presets with the trainer's default Muon + AdamW. --set applies a
 * training config key last (as `ojas train --set`), e.g. weight_copies=false. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/ojas.h"

int main(int argc, char **argv) {
    const char *data = NULL, *pos[8] = {0}, *sets[16] = {0};
    long long vocab = 0;
    int np = 0, ns = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--data") == 0 && i + 1 < argc) data = argv[++i];
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && ns < 16) sets[ns++] = argv[++i];
        else if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) vocab = atoll(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1] == '-') np = -1000;
        else if (np >= 0 && np < 8) pos[np++] = argv[i];
        else np = -1000;
    }
    if (np < 3) {
        fprintf(stderr, "usage: %s PRESET B T [steps] [warmup] [cpu|cuda] [f32|bf16] [graph] "
                        "[--data DIR] [--vocab V] [--set KEY=VALUE]...\n", argv[0]);
        return 2;
    }
    const char *preset = pos[0];
    int64_t B = atoll(pos[1]), T = atoll(pos[2]);
    int steps = pos[3] ? atoi(pos[3]) : 20, warmup = pos[4] ? atoi(pos[4]) : 5;
    bool on_cpu = pos[5] && strcmp(pos[5], "cpu") == 0;
    bool bf16 = pos[6] && strcmp(pos[6], "bf16") == 0;
    bool graph = pos[7] && strcmp(pos[7], "graph") == 0;
    oj_gpt_config mc;
    if (!oj_gpt_preset(preset, &mc)) {
        fprintf(stderr, "unknown preset %s\n", preset);
        return 2;
    }
    oj_train_config c = oj_train_config_default();
    snprintf(c.model, sizeof c.model, "%s", preset);
    c.data_dir[0] = '\0';
    if (data) snprintf(c.data_dir, sizeof c.data_dir, "%s", data);
    c.vocab_size = vocab > 0 ? vocab : mc.family == OJ_GPT2 ? 50304 : 0;
    c.batch_size = B;
    c.seq_len = T;
    c.device.type = on_cpu ? OJ_DEVICE_CPU : OJ_DEVICE_CUDA;
    c.dtype = bf16 ? OJ_TRAIN_BF16 : OJ_TRAIN_F32;
    c.cuda_graph = graph;
    c.peak_flops = 989e12;
    if (mc.family == OJ_GPT2) {
        c.optimizer = OJ_TRAIN_ADAMW;
        c.lr = 6e-4;
        c.weight_decay = 0.1;
    }
    oj_error err = {0};
    for (int i = 0; i < ns; i++)
        if (oj_train_config_set(&c, sets[i], &err) != OJ_OK) {
            fprintf(stderr, "bench: --set %s: %s\n", sets[i], err.message);
            return 2;
        }
    oj_bench_result r;
    oj_train_config chk = c; /* the data directory is checked when the trainer opens it */
    if (!data) snprintf(chk.data_dir, sizeof chk.data_dir, ".");
    oj_status st = oj_train_config_check(&chk, &err);
    if (!st) st = oj_bench_trainer(&c, warmup, steps, true, &r, &err);
    if (st) {
        bool no_dev = st == OJ_ERR_UNSUPPORTED || st == OJ_ERR_DEVICE;
        fprintf(stderr, "%s: %s\n", no_dev ? "skipped" : "bench", err.message);
        return no_dev && !on_cpu ? 77 : 1;
    }
    oj_gpt_config used;
    if (oj_train_model_config(&c, 0, &used, &err)) used.vocab_size = c.vocab_size;
    const char *mm = getenv("MM_TFLOPS");
    double mm_tflops = mm ? atof(mm) : 798.0;
    printf("{\"system\": \"ojas\", \"preset\": \"%s\", \"device\": \"%s\", \"B\": %lld, \"T\": %lld, "
           "\"dtype\": \"%s\", \"step_ms\": %.3f, \"min_ms\": %.3f, \"tok_s\": %.0f, "
           "\"kernel_ms\": %.3f, \"overhead_ms\": %.3f, \"overhead_measurable\": %s, \"step\": \"trainer\", \"data\": \"%s\", "
           "\"vocab\": %lld, "
           "\"flops_per_token\": %.4g, \"mfu_989\": %.4f, \"mfu_mm\": %.4f, \"peak_gib\": %.3f, "
           "\"peak_alloc_gib\": %.3f, \"cuda_graph\": %s, \"weight_copies\": %s, "
           "\"loss\": %.4f, \"params\": %lld}\n",
           preset, on_cpu ? "cpu" : "cuda", (long long)B, (long long)T,
           bf16 ? "bf16 autocast, f32 master" : "f32 (TF32 GEMMs)", r.step_ms, r.min_ms,
           r.tokens_per_s, r.kernel_ms, r.overhead_ms, r.overhead_measurable ? "true" : "false",
           data ? data : "random",
           (long long)used.vocab_size, r.flops_per_token, r.achieved_flops / 989e12,
           r.achieved_flops / (mm_tflops * 1e12), (double)r.peak_bytes / (1024.0 * 1024 * 1024),
           (double)r.peak_allocated_bytes / (1024.0 * 1024 * 1024), graph ? "true" : "false",
           c.weight_copies && bf16 ? "true" : "false", r.loss, (long long)r.params);
    return 0;
}
