/* GEMM benchmark: the matrix products of a gpt2-124m training step at
 * B=16, T=1024 (M = 16384 rows) through oj_matmul on a CUDA engine, in
 * bf16 (f32 accumulation) and f32 (TF32 under FAST), each layout a step
 * uses: forward x W^T, backward dX = g W and dW = g^T x. Prints one JSON
 * line per case with the mean ms of `reps` products issued back to back
 * and TFLOP/s (2 M N K / time); bench/gpu/gemm_torch.py
 * times torch.matmul on the same shapes for the ratio.
 *
 * usage: bench_gpu_gemm [reps] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ojas/ojas.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* a [M, K] (or its transpose stored [K, M] when ta) times b [K, N] (or
 * stored [N, K] when tb). */
static double run(oj_engine *eng, oj_dtype dt, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                  int reps) {
    oj_scope_begin(eng);
    int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N};
    oj_tensor *a0 = oj_rand_normal(eng, 2, sa, dt, 0, 1), *b0 = oj_rand_normal(eng, 2, sb, dt, 0, 1);
    oj_tensor *a = ta ? oj_transpose(a0, 0, 1) : a0, *b = tb ? oj_transpose(b0, 0, 1) : b0;
    for (int r = 0; r < 2; r++) oj_release(oj_matmul(a, b)); /* warm-up */
    oj_engine_synchronize(eng);
    double t0 = now_s();
    for (int r = 0; r < reps; r++) { /* back to back: the host runs ahead of the device */
        oj_tensor *c = oj_matmul(a, b);
        if (c == NULL) {
            fprintf(stderr, "bench: %s\n", oj_last_error(eng));
            exit(1);
        }
        oj_release(c);
    }
    oj_engine_synchronize(eng);
    double best = (now_s() - t0) / reps; /* mean over reps */
    oj_scope_end(eng);
    return best;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = OJ_DEVICE_CUDA;
    oj_engine *eng = NULL;
    oj_error err = {0};
    if (oj_engine_create(&ec, &eng, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    const int64_t M = 16384;
    struct {
        const char *name;
        int64_t m, n, k;
        bool ta, tb;
    } cases[] = {
        {"qkv fwd x W^T", M, 2304, 768, false, true},   {"qkv dX g W", M, 768, 2304, false, false},
        {"qkv dW g^T x", 2304, 768, M, true, false},    {"fc fwd x W^T", M, 3072, 768, false, true},
        {"fc dW g^T x", 3072, 768, M, true, false},     {"proj fwd x W^T", M, 768, 3072, false, true},
        {"proj dX g W", M, 3072, 768, false, false},    {"head chunk x W^T", 1334, 50304, 768, false, true},
        {"head dX dl W", 1334, 768, 50304, false, false}, {"head dW dl^T x", 50304, 768, 1334, true, false},
    };
    oj_dtype dts[2] = {OJ_BF16, OJ_F32};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double t = run(eng, dts[d], cases[i].m, cases[i].n, cases[i].k, cases[i].ta,
                           cases[i].tb, reps);
            double fl = 2.0 * (double)cases[i].m * (double)cases[i].n * (double)cases[i].k;
            printf("{\"system\": \"ojas\", \"case\": \"%s\", \"dtype\": \"%s\", \"M\": %lld, \"N\": "
                   "%lld, \"K\": %lld, \"ms\": %.4f, \"tflops\": %.1f}\n",
                   cases[i].name, oj_dtype_name(dts[d]), (long long)cases[i].m,
                   (long long)cases[i].n, (long long)cases[i].k, t * 1e3, fl / t * 1e-12);
        }
    oj_engine_free(eng);
    return 0;
}
