/* ojas bench: time training steps of a GPT preset on this machine. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ojas/train.h"

static const char *k_help =
    "usage: ojas bench [options]\n"
    "Time full training steps (forward, backward, optimizer) of a GPT preset on\n"
    "random tokens and print the median step time, tokens/s, achieved FLOP/s\n"
    "(6N + 12LCT per token) and, with --peak-flops, MFU.\n"
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
    "      --peak-flops F     the device's peak FLOP/s, for MFU\n"
    "  -h, --help             this help\n"
    "Options take their value as '--steps 3' or '--steps=3' ('-m PRESET', '-mPRESET').\n";

enum { OPT_BATCH = 256, OPT_SEQ, OPT_STEPS, OPT_WARMUP, OPT_NUMERICS, OPT_DTYPE, OPT_GRAPH,
       OPT_PEAK };

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
    {NULL, 0, NULL, 0},
};

int cmd_bench(int argc, char **argv) {
    const char *preset = "nanolab-small", *device = "cpu", *numerics = "fast", *dtype = "f32";
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
    oj_engine_config ec = oj_engine_config_default();
    if (!oj_device_parse(device, &ec.device))
        return cli_error(CLI_USAGE, "bench: --device must be cpu, cuda or cuda:N, got '%s'", device);
    if (strcmp(numerics, "exact") == 0) ec.numerics = OJ_NUMERICS_EXACT;
    else if (strcmp(numerics, "fast") != 0) return cli_error(CLI_USAGE, "bench: --numerics must be fast or exact");
    if (graph && ec.device.type != OJ_DEVICE_CUDA)
        return cli_error(CLI_USAGE, "bench: --cuda-graph needs --device cuda (CUDA graphs are a "
                                    "CUDA feature)");
    oj_dtype ad = strcmp(dtype, "bf16") == 0 ? OJ_BF16 : strcmp(dtype, "f16") == 0 ? OJ_F16 : OJ_F32;
    if (ad == OJ_F32 && strcmp(dtype, "f32") != 0)
        return cli_error(CLI_USAGE, "bench: --dtype must be f32, bf16 or f16, got '%s'", dtype);
    ec.threads = (int)threads;
    oj_engine *eng = NULL;
    oj_error e = {0};
    if (oj_engine_create(&ec, &eng, &e) != OJ_OK) return cli_error(CLI_FAIL, "bench: %s", e.message);
    if (ad != OJ_F32) oj_set_autocast(eng, true, ad);
    printf("bench: %s (%s), B %lld x T %lld, %s, %d threads, %s numerics, %s\n", preset,
           oj_gpt_family_name(mc.family), (long long)B, (long long)T, device,
           oj_engine_threads(eng), numerics,
           ad == OJ_BF16 ? "bf16 autocast" : ad == OJ_F16 ? "f16 autocast" : "f32");
    oj_bench_result r;
    if (oj_bench_train_step(eng, &mc, B, T, (int)warmup, (int)steps, graph, &r) != OJ_OK) {
        int rc = cli_error(CLI_FAIL, "bench: %s", oj_last_error(eng));
        oj_engine_free(eng);
        return rc;
    }
    printf("params %.2fM | step %.1f ms (median of %lld; min %.1f, max %.1f) | %.0f tokens/s | "
           "%.2f GFLOP/s",
           (double)r.params / 1e6, r.step_ms, (long long)steps, r.min_ms, r.max_ms, r.tokens_per_s,
           r.achieved_flops / 1e9);
    if (peak > 0) printf(" | MFU %.1f%% of %.0f GFLOP/s", 100.0 * r.achieved_flops / peak, peak / 1e9);
    printf(" | peak memory %.1f MB (%.1f MB in live tensors)\n", (double)r.peak_bytes / 1e6,
           (double)r.peak_allocated_bytes / 1e6);
    oj_engine_free(eng);
    return CLI_OK;
}
