/* Batch-1 decode benchmark, the PyTorch anchors' inference setting
 * (../shared/anchors/infer_bench.py): GPT-2 124M from random init, greedy,
 * a 64-token prompt, 512 new tokens through oj_generate (KV cache, one
 * forward per token, logits of the new position read back and argmax'd on
 * the host). tok/s = new tokens / wall time of the whole generation,
 * prefill included; the median over the repeats after the first call.
 * Prints one JSON line.
 *
 * usage: bench_gpu_decode [repeats] [cpu|cuda] [f32|bf16]
 * bf16: the forward runs under bf16 autocast (weights stay f32 and are
 * cast per use). */
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

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    bool on_cpu = argc > 2 && strcmp(argv[2], "cpu") == 0;
    bool bf16 = argc > 3 && strcmp(argv[3], "bf16") == 0;
    if (repeats < 1) repeats = 1;
    enum { PROMPT = 64, NEW = 512 };
    oj_gpt_config mc;
    if (!oj_gpt_preset("gpt2-124m", &mc)) return 2;
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
    int32_t prompt[PROMPT];
    uint32_t s = 2463534242u;
    for (int i = 0; i < PROMPT; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        prompt[i] = (int32_t)(s % (uint32_t)mc.vocab_size);
    }
    const int32_t *prompts[1] = {prompt};
    int64_t plen[1] = {PROMPT}, olen[1] = {0};
    oj_sampler_config sc = oj_sampler_config_default();
    sc.temperature = 0.0; /* greedy */
    sc.max_new_tokens = NEW;
    double *t = calloc((size_t)repeats + 1, sizeof *t);
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
        free(out[0]);
    }
    if (st != OJ_OK) {
        fprintf(stderr, "bench: %s\n", oj_last_error(eng));
        return 1;
    }
    double first = t[0];
    qsort(t + 1, (size_t)repeats, sizeof *t, cmp_double);
    double med = t[1 + repeats / 2];
    printf("{\"system\": \"ojas\", \"bench\": \"decode\", \"preset\": \"gpt2-124m\", \"device\": "
           "\"%s\", \"dtype\": \"%s\", \"prompt\": %d, \"new_tokens\": %d, \"ms_per_token\": %.4f, "
           "\"tok_s\": %.1f, \"first_call_s\": %.3f, \"peak_gib\": %.3f}\n",
           on_cpu ? "cpu" : "cuda", bf16 ? "bf16 autocast" : "f32", PROMPT, NEW, 1e3 * med / NEW,
           NEW / med, first, (double)oj_budget_peak(oj_engine_budget(eng)) / (1 << 30));
    free(t);
    oj_gpt_free(m);
    oj_engine_free(eng);
    return 0;
}
