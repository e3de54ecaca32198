/* GPU training-step benchmark: one full step (forward, backward, optimizer)
 * of a GPT preset on B x T random tokens on a CUDA engine, timed as the
 * PyTorch anchors (../shared/anchors/train_bench.py) time theirs
 * (oj_bench_train_step). Prints one JSON line (docs/bench-gpu.md).
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
 * bf16: the forward runs under bf16 autocast (f32 master weights); graph:
 * forward and backward captured once as a CUDA graph, replayed each step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/ojas.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PRESET B T [steps] [warmup] [cpu|cuda] [f32|bf16] [graph]\n", argv[0]);
        return 2;
    }
    const char *preset = argv[1];
    int64_t B = atoll(argv[2]), T = atoll(argv[3]);
    int steps = argc > 4 ? atoi(argv[4]) : 20, warmup = argc > 5 ? atoi(argv[5]) : 5;
    bool on_cpu = argc > 6 && strcmp(argv[6], "cpu") == 0;
    bool bf16 = argc > 7 && strcmp(argv[7], "bf16") == 0;
    bool graph = argc > 8 && strcmp(argv[8], "graph") == 0;
    oj_gpt_config mc;
    if (!oj_gpt_preset(preset, &mc)) {
        fprintf(stderr, "unknown preset %s\n", preset);
        return 2;
    }
    if (mc.family == OJ_GPT2) mc.vocab_size = 50304; /* as the anchors' nanoGPT-style model */
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = on_cpu ? OJ_DEVICE_CPU : OJ_DEVICE_CUDA;
    ec.seed = 1;
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (oj_engine_create(&ec, &eng, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    if (bf16) oj_set_autocast(eng, true, OJ_BF16);
    oj_bench_result r;
    if (oj_bench_train_step(eng, &mc, B, T, warmup, steps, graph, &r) != OJ_OK) {
        fprintf(stderr, "bench: %s\n", oj_last_error(eng));
        oj_engine_free(eng);
        return 1;
    }
    const char *mm = getenv("MM_TFLOPS");
    double mm_tflops = mm ? atof(mm) : 798.0;
    printf("{\"system\": \"ojas\", \"preset\": \"%s\", \"device\": \"%s\", \"B\": %lld, \"T\": %lld, "
           "\"dtype\": \"%s\", \"step_ms\": %.3f, \"min_ms\": %.3f, \"tok_s\": %.0f, "
           "\"flops_per_token\": %.4g, \"mfu_989\": %.4f, \"mfu_mm\": %.4f, \"peak_gib\": %.3f, "
           "\"peak_alloc_gib\": %.3f, \"cuda_graph\": %s, "
           "\"loss\": %.4f, \"params\": %lld}\n",
           preset, on_cpu ? "cpu" : "cuda", (long long)B, (long long)T,
           bf16 ? "bf16 autocast, f32 master" : "f32 (TF32 GEMMs)", r.step_ms, r.min_ms,
           r.tokens_per_s, r.flops_per_token, r.achieved_flops / 989e12,
           r.achieved_flops / (mm_tflops * 1e12), (double)r.peak_bytes / (1024.0 * 1024 * 1024),
           (double)r.peak_allocated_bytes / (1024.0 * 1024 * 1024), graph ? "true" : "false",
           r.loss, (long long)r.params);
    oj_engine_free(eng);
    return 0;
}
