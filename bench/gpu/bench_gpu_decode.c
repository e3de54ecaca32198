/* Batch-1 decode benchmark, the PyTorch anchors' inference setting
 * (../shared/anchors/infer_bench.py): GPT-2 124M from random init, greedy,
 * a 64-token prompt, 512 new tokens, these ways:
 * - eager: oj_generate's eager loop (OJAS_GENERATE_STATIC=0: KV cache, one
 *   forward per token run op by op from the host, logits of the new
 *   position read back and argmax'd on the host): tok_s, ms_per_token,
 *   first_call_s;
 * - generate: oj_generate as `ojas generate --device cuda` calls it (the
 *   static decoder, its step a CUDA graph replay), greedy: gen_tok_s,
 *   gen_ms_per_token, gen_tokens_equal (against eager); and sampled with
 *   the CLI's defaults (temperature 0.8, top-k 40, seed 1337):
 *   sample_tok_s, sample_ms_per_token, sample_tokens_equal (against the
 *   eager loop sampling with the same seed, when eager runs);
 * - graph: oj_gpt_decoder (static KV cache of prompt + new positions, the
 *   decode step captured into a CUDA graph on its first call and replayed
 *   for every token, argmax on the device, one token read back per step;
 *   the anchors' "static KV cache + CUDA graph" variant): graph_tok_s,
 *   graph_ms_per_token, graph_first_call_s (the capture included),
 *   graph_tokens_equal (of new_tokens, against eager) and
 *   graph_first_diff (-1: none); static_tok_s is the same decoder with
 *   the step run eagerly (graphs off), which separates the graph's gain
 *   from the static step's.
 * tok/s = new tokens / wall time of the whole generation, prefill
 * included; the median over the repeats after the first call. Prints one
 * JSON line.
 *
 * usage: bench_gpu_decode [repeats] [cpu|cuda] [f32|bf16|bf16w] [all|eager|graph|generate] [preset]
 * (generate: the two oj_generate runs alone; all runs everything)
 * (preset default gpt2-124m; nanolab-124m runs the same way).
 * bf16: the forward runs under bf16 autocast (weights stay f32 and are
 * cast per use, inside the graph too); bf16w: the weights converted to
 * bf16 (oj_gpt_to_dtype), as the anchors hold them: half the bytes. */
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { PROMPT = 64, NEW = 512 };

/* Median of t[1..repeats] (t[0] is the first call); sorts them. */
static double median_after_first(double *t, int repeats) {
    qsort(t + 1, (size_t)repeats, sizeof *t, cmp_double);
    return t[1 + repeats / 2];
}

/* oj_generate, greedy or with the CLI's sampling defaults, through the
 * eager loop (OJAS_GENERATE_STATIC=0) or its default path: wall times
 * t[0..repeats], tokens of the last run. */
static oj_status run_generate(oj_gpt *m, const int32_t *prompt, bool eager, bool sampled,
                              int repeats, double *t, int32_t *toks) {
    oj_engine *eng = oj_gpt_engine(m);
    const int32_t *prompts[1] = {prompt};
    int64_t plen[1] = {PROMPT}, olen[1] = {0};
    oj_sampler_config sc = oj_sampler_config_default();
    sc.temperature = 0.0; /* greedy */
    if (sampled) sc.temperature = 0.8, sc.top_k = 40, sc.seed = 1337; /* ojas generate's */
    sc.max_new_tokens = NEW;
    if (eager) setenv("OJAS_GENERATE_STATIC", "0", 1);
    else unsetenv("OJAS_GENERATE_STATIC");
    oj_status st = OJ_OK;
    for (int r = 0; st == OJ_OK && r <= repeats; r++) { /* r == 0: the first call */
        int32_t *out[1] = {NULL};
        oj_engine_synchronize(eng);
        double t0 = now_s();
        st = oj_generate(m, 1, prompts, plen, &sc, out, olen, NULL, NULL);
        t[r] = now_s() - t0;
        if (st == OJ_OK && olen[0] != NEW) {
            fprintf(stderr, "bench: generated %lld tokens, wanted %d\n", (long long)olen[0], NEW);
            st = OJ_ERR_INTERNAL;
        }
        if (st == OJ_OK) memcpy(toks, out[0], NEW * sizeof *toks);
        free(out[0]);
    }
    unsetenv("OJAS_GENERATE_STATIC");
    return st;
}

/* Tokens of a equal to b's, and the first index where they part (-1: none). */
static int same_tokens(const int32_t *a, const int32_t *b, int *first_diff) {
    int same = 0;
    *first_diff = -1;
    for (int i = 0; i < NEW; i++) {
        same += a[i] == b[i];
        if (*first_diff < 0 && a[i] != b[i]) *first_diff = i;
    }
    return same;
}

/* oj_gpt_decoder (graph or not): the first call creates the decoder (and
 * captures); every run is prefill + NEW - 1 steps. */
static oj_status run_decoder(oj_gpt *m, const int32_t *prompt, bool graph, int repeats, double *t,
                             int32_t *toks) {
    oj_engine *eng = oj_gpt_engine(m);
    oj_gpt_decoder *d = NULL;
    oj_status st = OJ_OK;
    for (int r = 0; st == OJ_OK && r <= repeats; r++) {
        oj_engine_synchronize(eng);
        double t0 = now_s();
        if (d == NULL) st = oj_gpt_decoder_create(m, PROMPT + NEW, graph, &d);
        if (st == OJ_OK) st = oj_gpt_decoder_prefill(d, prompt, PROMPT, &toks[0]);
        for (int i = 1; st == OJ_OK && i < NEW; i++) st = oj_gpt_decoder_step(d, &toks[i]);
        t[r] = now_s() - t0;
    }
    if (st == OJ_OK && graph && oj_engine_device(eng).type == OJ_DEVICE_CUDA &&
        !oj_gpt_decoder_graphed(d)) {
        fprintf(stderr, "bench: the decoder did not capture a graph\n");
        st = OJ_ERR_INTERNAL;
    }
    oj_gpt_decoder_free(d);
    return st;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    bool on_cpu = argc > 2 && strcmp(argv[2], "cpu") == 0;
    bool bf16 = argc > 3 && strcmp(argv[3], "bf16") == 0;
    bool bf16w = argc > 3 && strcmp(argv[3], "bf16w") == 0;
    const char *which = argc > 4 ? argv[4] : "all";
    const char *preset = argc > 5 ? argv[5] : "gpt2-124m";
    bool gen_only = strcmp(which, "generate") == 0;
    bool do_eager = strcmp(which, "graph") != 0 && !gen_only;
    bool do_graph = strcmp(which, "eager") != 0 && !gen_only;
    bool do_gen = strcmp(which, "all") == 0 || gen_only;
    if (repeats < 1) repeats = 1;
    oj_gpt_config mc;
    if (!oj_gpt_preset(preset, &mc)) {
        fprintf(stderr, "bench: unknown preset %s\n", preset);
        return 2;
    }
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = on_cpu ? OJ_DEVICE_CPU : OJ_DEVICE_CUDA;
    ec.seed = 1;
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (oj_engine_create(&ec, &eng, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    oj_gpt *m = NULL;
    if (oj_gpt_create(eng, &mc, 1, &m) != OJ_OK) {
        fprintf(stderr, "bench: %s\n", oj_last_error(eng));
        return 1;
    }
    if (bf16) oj_set_autocast(eng, true, OJ_BF16);
    if (bf16w && oj_gpt_to_dtype(m, OJ_BF16) != OJ_OK) {
        fprintf(stderr, "bench: %s\n", oj_last_error(eng));
        return 1;
    }
    int32_t prompt[PROMPT];
    uint32_t s = 2463534242u;
    for (int i = 0; i < PROMPT; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        prompt[i] = (int32_t)(s % (uint32_t)mc.vocab_size);
    }
    double *te = calloc((size_t)repeats + 1, sizeof *te), *tg = calloc((size_t)repeats + 1, sizeof *tg);
    double *ts = calloc((size_t)repeats + 1, sizeof *ts);
    int32_t *toks_e = calloc(NEW, sizeof *toks_e), *toks_g = calloc(NEW, sizeof *toks_g);
    int32_t *toks_s = calloc(NEW, sizeof *toks_s);
    double *tgen = calloc((size_t)repeats + 1, sizeof *tgen);
    double *tsam = calloc((size_t)repeats + 1, sizeof *tsam);
    double *tsame = calloc((size_t)repeats + 1, sizeof *tsame);
    int32_t *toks_gen = calloc(NEW, sizeof *toks_gen), *toks_sam = calloc(NEW, sizeof *toks_sam);
    int32_t *toks_same = calloc(NEW, sizeof *toks_same);
    oj_status st = OJ_OK;
    if (do_eager) st = run_generate(m, prompt, true, false, repeats, te, toks_e);
    if (st == OJ_OK && do_gen) st = run_generate(m, prompt, false, false, repeats, tgen, toks_gen);
    if (st == OJ_OK && do_gen) st = run_generate(m, prompt, false, true, repeats, tsam, toks_sam);
    /* the eager loop sampling (slow: the logits read back every token) */
    if (st == OJ_OK && do_gen && do_eager)
        st = run_generate(m, prompt, true, true, 1, tsame, toks_same);
    if (st == OJ_OK && do_graph) st = run_decoder(m, prompt, true, repeats, tg, toks_g);
    if (st == OJ_OK && do_graph) st = run_decoder(m, prompt, false, repeats, ts, toks_s);
    if (st != OJ_OK) {
        fprintf(stderr, "bench: %s\n", oj_last_error(eng));
        return 1;
    }
    printf("{\"system\": \"ojas\", \"bench\": \"decode\", \"preset\": \"%s\", \"device\": "
           "\"%s\", \"dtype\": \"%s\", \"prompt\": %d, \"new_tokens\": %d",
           preset, on_cpu ? "cpu" : "cuda", bf16 ? "bf16 autocast" : bf16w ? "bf16 weights" : "f32",
           PROMPT, NEW);
    if (do_eager) {
        double first = te[0], med = median_after_first(te, repeats);
        printf(", \"ms_per_token\": %.4f, \"tok_s\": %.1f, \"first_call_s\": %.3f",
               1e3 * med / NEW, NEW / med, first);
    }
    if (do_graph) {
        double first = tg[0], med = median_after_first(tg, repeats);
        double smed = median_after_first(ts, repeats);
        printf(", \"graph_capacity\": %d, \"graph_ms_per_token\": %.4f, \"graph_tok_s\": %.1f, "
               "\"graph_first_call_s\": %.3f, \"static_tok_s\": %.1f",
               PROMPT + NEW, 1e3 * med / NEW, NEW / med, first, NEW / smed);
        int same_s = 0;
        for (int i = 0; i < NEW; i++) same_s += toks_s[i] == toks_g[i];
        printf(", \"graph_tokens_equal_static\": %d", same_s);
        if (do_eager) {
            int same = 0, diff = -1;
            for (int i = 0; i < NEW; i++) {
                same += toks_e[i] == toks_g[i];
                if (diff < 0 && toks_e[i] != toks_g[i]) diff = i;
            }
            printf(", \"graph_tokens_equal\": %d, \"graph_first_diff\": %d", same, diff);
        }
    }
    if (do_gen) {
        double med = median_after_first(tgen, repeats), smed = median_after_first(tsam, repeats);
        printf(", \"gen_ms_per_token\": %.4f, \"gen_tok_s\": %.1f, \"gen_first_call_s\": %.3f, "
               "\"sample_ms_per_token\": %.4f, \"sample_tok_s\": %.1f, \"sample_first_call_s\": %.3f",
               1e3 * med / NEW, NEW / med, tgen[0], 1e3 * smed / NEW, NEW / smed, tsam[0]);
        int diff = -1;
        if (do_eager) {
            int same = same_tokens(toks_gen, toks_e, &diff);
            printf(", \"gen_tokens_equal\": %d, \"gen_first_diff\": %d", same, diff);
            same = same_tokens(toks_sam, toks_same, &diff);
            printf(", \"sample_tokens_equal\": %d, \"sample_first_diff\": %d, "
                   "\"sample_eager_tok_s\": %.1f",
                   same, diff, NEW / (tsame[0] < tsame[1] ? tsame[0] : tsame[1]));
        }
    }
    printf(", \"peak_gib\": %.3f}\n", (double)oj_budget_peak(oj_engine_budget(eng)) / (1 << 30));
    free(te);
    free(tg);
    free(ts);
    free(toks_e);
    free(toks_g);
    free(toks_s);
    free(tgen);
    free(tsam);
    free(tsame);
    free(toks_gen);
    free(toks_sam);
    free(toks_same);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return 0;
}
