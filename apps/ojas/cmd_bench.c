/* ojas bench: time training steps of a GPT preset on this machine. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ojas/train.h"

static const char *k_help =
    "usage: ojas bench [--model PRESET] [--batch B] [--seq T] [--steps N] [--warmup N]\n"
    "                  [--device cpu|cuda|cuda:N] [--threads N] [--numerics fast|exact]\n"
    "                  [--dtype f32|bf16|f16] [--cuda-graph] [--peak-flops F]\n"
    "Time full training steps (forward, backward, optimizer) of a GPT preset on\n"
    "random tokens and print the median step time, tokens/s, achieved FLOP/s\n"
    "(6N + 12LCT per token) and, with --peak-flops, MFU. --dtype bf16 (f16) runs\n"
    "the forward under bf16 (f16) autocast (f32 master weights). --cuda-graph (--device\n"
    "cuda) captures the forward and backward once as a CUDA graph and replays\n"
    "it every step. Defaults: nanolab-small, B 8, T 128 (the preset's block size\n"
    "when smaller), 5 steps after 2 warm-up steps, cpu, f32. Presets: %s.\n";

int cmd_bench(int argc, char **argv) {
    const char *preset = "nanolab-small", *device = "cpu", *numerics = "fast", *dtype = "f32";
    int64_t B = 8, T = 0, steps = 5, warmup = 2, threads = 0; /* T 0: 128 or the block size */
    double peak = 0;
    bool graph = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) {
            char names[512];
            printf(k_help, oj_gpt_preset_list(names, sizeof names));
            return CLI_OK;
        }
#define VAL() ((v = cli_value(argc, argv, &i)) != NULL)
        if (strcmp(a, "--model") == 0) { if (!VAL()) return CLI_USAGE; preset = v; }
        else if (strcmp(a, "--cuda-graph") == 0) graph = true;
        else if (strcmp(a, "--device") == 0) { if (!VAL()) return CLI_USAGE; device = v; }
        else if (strcmp(a, "--numerics") == 0) { if (!VAL()) return CLI_USAGE; numerics = v; }
        else if (strcmp(a, "--dtype") == 0) { if (!VAL()) return CLI_USAGE; dtype = v; }
        else if (strcmp(a, "--batch") == 0) { if (!VAL() || !cli_parse_i64(a, v, 1, 1 << 20, &B)) return CLI_USAGE; }
        else if (strcmp(a, "--seq") == 0) { if (!VAL() || !cli_parse_i64(a, v, 1, 1 << 20, &T)) return CLI_USAGE; }
        else if (strcmp(a, "--steps") == 0) { if (!VAL() || !cli_parse_i64(a, v, 1, 100000, &steps)) return CLI_USAGE; }
        else if (strcmp(a, "--warmup") == 0) { if (!VAL() || !cli_parse_i64(a, v, 0, 100000, &warmup)) return CLI_USAGE; }
        else if (strcmp(a, "--threads") == 0) { if (!VAL() || !cli_parse_i64(a, v, 0, 4096, &threads)) return CLI_USAGE; }
        else if (strcmp(a, "--peak-flops") == 0) {
            if (!VAL() || !cli_parse_double(a, v, &peak) || !(peak > 0))
                return cli_error(CLI_USAGE, "bench: --peak-flops must be a positive number");
        } else {
            return cli_error(CLI_USAGE, "bench: unknown option '%s' (see --help)", a);
        }
#undef VAL
    }
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
