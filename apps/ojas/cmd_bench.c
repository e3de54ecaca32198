/* ojas bench: time the trainer's step of a GPT preset on this machine. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ojas/train.h"

static const char *k_help =
    "usage: ojas bench [options]\n"
    "Time the training step of `ojas train` (loader, forward, backward, clipping,\n"
    "schedule, optimizer, read-backs, metrics) on a GPT preset and print the median\n"
    "step time, tokens/s, achieved FLOP/s (6N + 12LCT per token), with --peak-flops\n"
    "MFU, and the same device work timed back to back: the trainer's overhead.\n"
    "gpt2 presets train with AdamW (lr 6e-4, weight decay 0.1), nanolab presets\n"
    "with Muon + AdamW; the model's vocabulary is the preset's.\n"
    "  -m, --model PRESET     the model (default nanolab-small; presets: %s)\n"
    "      --batch B          sequences per step (default 8)\n"
    "      --seq T            tokens per sequence (default 128, or the preset's block\n"
    "                         size when smaller)\n"
    "      --steps N          timed steps (default 5)\n"
    "      --warmup N         untimed steps first (default 2)\n"
    "  -d, --device D         cpu | cuda | cuda:N (default cpu)\n"
    "  -j, --threads N        CPU threads (default 0: all usable CPUs)\n"
    "      --numerics M       fast | exact (default fast)\n"
    "      --dtype D          f32 | bf16 | f16 (default f32); bf16 (f16) runs the forward\n"
    "                         under bf16 (f16) autocast, f32 master weights\n"
    "      --cuda-graph       (--device cuda) capture the forward and backward once as a\n"
    "                         CUDA graph and replay it every step\n"
    "      --data DIR         train on DIR's train_*.bin shards (default: a generated\n"
    "                         shard of random tokens)\n"
    "      --peak-flops F     the device's peak FLOP/s, for MFU\n"
    "  -h, --help             this help\n"
    "Options take their value as '--steps 3' or '--steps=3' ('-m PRESET', '-mPRESET').\n";

enum { OPT_BATCH = 256, OPT_SEQ, OPT_STEPS, OPT_WARMUP, OPT_NUMERICS, OPT_DTYPE, OPT_GRAPH,
       OPT_PEAK, OPT_DATA };

static const struct option k_long[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, 'm'},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"seq", required_argument, NULL, OPT_SEQ},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"device", required_argument, NULL, 'd'},
    {"threads", required_argument, NULL, 'j'},
    {"numerics", required_argument, NULL, OPT_NUMERICS},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"cuda-graph", no_argument, NULL, OPT_GRAPH},
    {"peak-flops", required_argument, NULL, OPT_PEAK},
    {"data", required_argument, NULL, OPT_DATA},
    {NULL, 0, NULL, 0},
};

int cmd_bench(int argc, char **argv) {
    const char *preset = "nanolab-small", *device = "cpu", *numerics = "fast", *dtype = "f32";
    const char *data = NULL;
    int64_t B = 8, T = 0, steps = 5, warmup = 2, threads = 0; /* T 0: 128 or the block size */
    double peak = 0;
    bool graph = false;
    int c;
    cli_getopt_state g = {.cmd = "bench", .shortopts = "hm:d:j:", .longopts = k_long};
    while ((c = cli_getopt(&g, argc, argv)) != -1) {
        const char *v = optarg;
        bool ok = true;
        switch (c) {
        case 'h': {
            char names[512];
            printf(k_help, oj_gpt_preset_list(names, sizeof names));
            return CLI_OK;
        }
        case 'm': preset = v; break;
        case 'd': device = v; break;
        case OPT_NUMERICS: numerics = v; break;
        case OPT_DTYPE: dtype = v; break;
        case OPT_GRAPH: graph = true; break;
        case OPT_DATA: data = v; break;
        case OPT_BATCH: ok = cli_parse_i64("bench: --batch", v, 1, 1 << 20, &B); break;
        case OPT_SEQ: ok = cli_parse_i64("bench: --seq", v, 1, 1 << 20, &T); break;
        case OPT_STEPS: ok = cli_parse_i64("bench: --steps", v, 1, 100000, &steps); break;
        case OPT_WARMUP: ok = cli_parse_i64("bench: --warmup", v, 0, 100000, &warmup); break;
        case 'j': ok = cli_parse_i64("bench: --threads", v, 0, 4096, &threads); break;
        case OPT_PEAK:
            if ((ok = cli_parse_double("bench: --peak-flops", v, &peak)) && !(peak > 0))
                return cli_error(CLI_USAGE, "bench: --peak-flops must be a positive number");
            break;
        default: return CLI_USAGE;
        }
        if (!ok)
            return CLI_USAGE;
    }
    if (optind < argc)
        return cli_unexpected("bench", argv[optind]);
    oj_gpt_config mc;
    char names[512];
    if (!oj_gpt_preset(preset, &mc))
        return cli_error(CLI_USAGE, "bench: unknown model preset '%s' (presets: %s)", preset,
                         oj_gpt_preset_list(names, sizeof names));
    if (T == 0) T = mc.block_size < 128 ? mc.block_size : 128;
    if (T > mc.block_size)
        return cli_error(CLI_USAGE, "bench: --seq %lld exceeds the preset's block_size %lld",
                         (long long)T, (long long)mc.block_size);
    oj_train_config tc = oj_train_config_default();
    snprintf(tc.model, sizeof tc.model, "%s", preset);
    tc.data_dir[0] = '\0';
    if (data && snprintf(tc.data_dir, sizeof tc.data_dir, "%s", data) >= (int)sizeof tc.data_dir)
        return cli_error(CLI_USAGE, "bench: --data path is too long");
    if (!oj_device_parse(device, &tc.device))
        return cli_error(CLI_USAGE, "bench: --device must be cpu, cuda or cuda:N, got '%s'", device);
    if (strcmp(numerics, "exact") == 0) tc.numerics = OJ_NUMERICS_EXACT;
    else if (strcmp(numerics, "fast") != 0) return cli_error(CLI_USAGE, "bench: --numerics must be fast or exact");
    if (graph && tc.device.type != OJ_DEVICE_CUDA)
        return cli_error(CLI_USAGE, "bench: --cuda-graph needs --device cuda (CUDA graphs are a "
                                    "CUDA feature)");
    tc.dtype = strcmp(dtype, "bf16") == 0 ? OJ_TRAIN_BF16 : strcmp(dtype, "f16") == 0 ? OJ_TRAIN_F16 : OJ_TRAIN_F32;
    if (tc.dtype == OJ_TRAIN_F32 && strcmp(dtype, "f32") != 0)
        return cli_error(CLI_USAGE, "bench: --dtype must be f32, bf16 or f16, got '%s'", dtype);
    tc.threads = threads;
    tc.batch_size = B;
    tc.seq_len = T;
    tc.cuda_graph = graph;
    tc.peak_flops = peak > 0 ? peak : 1e15; /* no measurement before the steps */
    if (mc.family == OJ_GPT2) {
        tc.optimizer = OJ_TRAIN_ADAMW;
        tc.lr = 6e-4;
        tc.weight_decay = 0.1;
    }
    oj_error e = {0};
    oj_train_config chk = tc; /* the data directory is checked when the trainer opens it */
    if (!data) snprintf(chk.data_dir, sizeof chk.data_dir, ".");
    if (oj_train_config_check(&chk, &e) != OJ_OK) return cli_error(CLI_USAGE, "bench: %s", e.message);
    printf("bench: %s (%s), B %lld x T %lld, %s, %s numerics, %s, the trainer's step on %s\n",
           preset, oj_gpt_family_name(mc.family), (long long)B, (long long)T, device, numerics,
           tc.dtype == OJ_TRAIN_BF16 ? "bf16 autocast" : tc.dtype == OJ_TRAIN_F16 ? "f16 autocast" : "f32",
           data ? data : "random tokens");
    fflush(stdout);
    oj_bench_result r;
    if (oj_bench_trainer(&tc, (int)warmup, (int)steps, true, &r, &e) != OJ_OK)
        return cli_error(CLI_FAIL, "bench: %s", e.message);
    printf("params %.2fM | step %.1f ms (median of %lld; min %.1f, max %.1f) | %.0f tokens/s | "
           "%.2f GFLOP/s",
           (double)r.params / 1e6, r.step_ms, (long long)steps, r.min_ms, r.max_ms, r.tokens_per_s,
           r.achieved_flops / 1e9);
    if (peak > 0) printf(" | MFU %.1f%% of %.0f GFLOP/s", 100.0 * r.achieved_flops / peak, peak / 1e9);
    printf(" | peak memory %.1f MB (%.1f MB in live tensors)\n", (double)r.peak_bytes / 1e6,
           (double)r.peak_allocated_bytes / 1e6);
    char ov[160];
    printf("device work back to back %.1f ms | trainer overhead %s per step\n", r.kernel_ms,
           oj_bench_overhead_text(&r, ov, sizeof ov));
    return CLI_OK;
}
