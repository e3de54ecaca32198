/* oj_qmatmul's CPU kernel levels side by side (AVX2, AVX-VNNI, AVX-512
 * VNNI: the same bits, OJAS_QUANT_DOT picks one) on one batch-1 matmul the
 * size of GPT-2's MLP down projection, x [1, 3072] @ W^T, W [768, 3072],
 * for each quantized type, one thread. The levels are interleaved and each
 * is timed `iters` times per round, three rounds; the figure is the
 * minimum over all (the run least disturbed by other work on a shared
 * machine) and the weight bytes it read per second. One JSON line per
 * (type, level).
 *
 * usage: bench_quant_kernels [--iters N] [--smoke] */
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

int main(int argc, char **argv) {
    int iters = 200;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0) iters = 2;
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "bench_quant_kernels: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (iters < 1) return 2;
    oj_engine_config c = oj_engine_config_default();
    c.threads = 1;
    oj_engine *e = NULL;
    oj_error err = {0};
    if (oj_engine_create(&c, &e, &err) != OJ_OK) {
        fprintf(stderr, "bench_quant_kernels: %s\n", err.message);
        return 1;
    }
    enum { N = 768, K = 3072 };
    float *w = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * K);
    if (!w || !x) return 1;
    for (int64_t i = 0; i < (int64_t)N * K; i++) w[i] = (float)((uint32_t)(i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (int64_t i = 0; i < K; i++) x[i] = (float)((i * 7919) % 100) / 100.0f - 0.5f;
    oj_tensor *wt = oj_from_host(e, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * N * K);
    oj_tensor *xt = oj_from_host(e, 2, (int64_t[]){1, K}, OJ_F32, x, sizeof(float) * K);
    const char *levels[] = {"avx2", "avxvnni", "avx512vnni"};
    int rc = 0;
    for (int t = 0; t < OJ_QTYPE_COUNT && rc == 0; t++) {
        oj_qtensor *q = oj_quantize(wt, (oj_qtype)t);
        double best[3] = {1e9, 1e9, 1e9};
        for (int round = 0; round < 3 && rc == 0; round++)
            for (int l = 0; l < 3; l++) {
                setenv("OJAS_QUANT_DOT", levels[l], 1);
                for (int it = 0; it < iters; it++) {
                    double t0 = now_s();
                    oj_tensor *y = oj_qmatmul(xt, q);
                    double dt = now_s() - t0;
                    if (y == NULL) {
                        fprintf(stderr, "bench_quant_kernels: %s\n", oj_last_error(e));
                        rc = 1;
                        break;
                    }
                    oj_release(y);
                    if (dt < best[l]) best[l] = dt;
                }
            }
        for (int l = 0; l < 3 && rc == 0; l++)
            printf("{\"bench\": \"quant_kernels\", \"type\": \"%s\", \"requested\": \"%s\", "
                   "\"N\": %d, \"K\": %d, \"min_us\": %.1f, \"weight_GB_s\": %.2f}\n",
                   oj_qtype_name((oj_qtype)t), levels[l], N, K, best[l] * 1e6,
                   (double)oj_qtensor_nbytes(q) / best[l] / 1e9);
        oj_qtensor_free(q);
    }
    unsetenv("OJAS_QUANT_DOT");
    oj_release(xt);
    oj_release(wt);
    free(w);
    free(x);
    oj_engine_free(e);
    return rc;
}
