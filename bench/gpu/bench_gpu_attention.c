/* Causal attention forward and backward on one GPU under FAST and EXACT
 * numerics (cuDNN's fused flash attention: its accumulator backward, and
 * its deterministic graphs; OJAS_CUDA_ATTN_CUDNN=0: ojas's tensor-core
 * kernels for both), bf16, q, k, v, out, dout, dq, dk, dv as the [B, H, T,
 * D] views of [B, T, H, D] storage the model passes, through the backend
 * entries (no autograd). Per shape: the implementation that ran (the
 * backend's attention_impl; a cuDNN refusal is printed with its reason),
 * the median time of `reps` batches of 10 calls after a warm-up, and the
 * counted TFLOP/s (forward 4 B H T^2 D / 2, backward 2.5x that), beside
 * FlashAttention-3's published H100 figures (Shah et al. 2024, causal,
 * seq 1k, bf16 forward: 265 TFLOP/s at D 64, 423 at D 128), and whether
 * two more backward calls give dq, dk, dv with the same bits.
 *
 * usage: bench_gpu_attention [reps] [B H T D ...]   (77: no GPU; default
 * shapes 16 12 1024 64 and 16 6 1024 128) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "bench_gpu_common.h"
#include "ojas/ojas.h"

static int REPS = 5;


/* [B, n, T, D] view of random [B, T, n, D] bf16 storage on e. */
static oj_tensor *view(oj_engine *e, int64_t B, int64_t n, int64_t T, int64_t D) {
    oj_tensor *t = oj_rand_normal(e, 4, (int64_t[4]){B, T, n, D}, OJ_BF16, 0.0, 1.0);
    return t ? oj_permute(t, 4, (int[4]){0, 2, 1, 3}) : NULL;
}

typedef struct {
    oj_tensor *q, *k, *v, *out, *lse, *g, *dq, *dk, *dv;
    double scale;
} args;

static oj_status run(oj_engine *e, const args *a, bool bwd) {
    if (!bwd)
        return e->backend->attention_forward(e, a->out, a->lse, a->q, a->k, a->v, NULL, true,
                                             a->scale);
    return e->backend->attention_backward(e, a->dq, a->dk, a->dv, a->g, a->q, a->k, a->v, a->out,
                                          a->lse, NULL, true, a->scale);
}

/* Median ms per call, or -1 (error printed). */
static double time_calls(oj_engine *e, const args *a, bool bwd) {
    double v[64];
    int reps = REPS < 64 ? REPS : 64;
    if (run(e, a, bwd) != OJ_OK || oj_engine_synchronize(e) != OJ_OK) {
        fprintf(stderr, "attention %s failed: %s\n", bwd ? "backward" : "forward",
                oj_last_error(e));
        oj_clear_error(e);
        return -1;
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        for (int i = 0; i < 10; i++) run(e, a, bwd);
        oj_engine_synchronize(e);
        v[r] = (now_ms() - t0) / 10;
    }
    qsort(v, (size_t)reps, sizeof *v, cmp_d);
    return v[reps / 2];
}

/* Bytes of t (contiguous copy), malloc'd; NULL on failure. */
static unsigned char *bytes_of(oj_tensor *t, size_t *n) {
    oj_tensor *c = oj_contiguous(t);
    *n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    unsigned char *b = malloc(*n);
    if (c == NULL || b == NULL || oj_to_host(c, b, *n) != OJ_OK) {
        free(b);
        return NULL;
    }
    return b;
}

/* Do two more backward calls give dq, dk, dv with the same bits? */
static const char *rerun_bits(oj_engine *e, const args *a) {
    oj_tensor *g[3] = {a->dq, a->dk, a->dv};
    unsigned char *first[3] = {NULL, NULL, NULL};
    size_t n[3];
    bool same = run(e, a, true) == OJ_OK;
    for (int i = 0; i < 3 && same; i++) same = (first[i] = bytes_of(g[i], &n[i])) != NULL;
    if (same) same = run(e, a, true) == OJ_OK;
    for (int i = 0; i < 3 && same; i++) {
        size_t m;
        unsigned char *again = bytes_of(g[i], &m);
        same = again != NULL && m == n[i] && memcmp(again, first[i], m) == 0;
        free(again);
    }
    for (int i = 0; i < 3; i++) free(first[i]);
    if (oj_last_status(e) != OJ_OK) {
        oj_clear_error(e);
        return "error";
    }
    return same ? "same" : "differ";
}

static void bench_shape(oj_engine *fast, oj_engine *exact, int64_t B, int64_t H, int64_t T,
                        int64_t D) {
    double fl = 4.0 * (double)B * (double)H * (double)T * (double)T * (double)D / 2;
    double fa3 = D == 64 ? 265 : D == 128 ? 423 : NAN;
    oj_engine *es[2] = {fast, exact};
    for (int w = 0; w < 2; w++) {
        oj_engine *e = es[w];
        oj_scope_begin(e);
        args a = {view(e, B, H, T, D),
                  view(e, B, H, T, D),
                  view(e, B, H, T, D),
                  view(e, B, H, T, D),
                  oj_empty(e, 3, (int64_t[3]){B, H, T}, OJ_F32),
                  view(e, B, H, T, D),
                  view(e, B, H, T, D),
                  view(e, B, H, T, D),
                  view(e, B, H, T, D),
                  1.0 / sqrt((double)D)};
        if (a.dv == NULL || a.lse == NULL) {
            fprintf(stderr, "allocation failed: %s\n", oj_last_error(e));
            oj_clear_error(e);
            oj_scope_end(e);
            continue;
        }
        for (int bwd = 0; bwd < 2; bwd++) {
            double ms = time_calls(e, &a, bwd);
            char why[400] = "";
            const char *impl = e->backend->attention_impl
                                   ? e->backend->attention_impl(e, bwd, why, sizeof why)
                                   : "?";
            double tf = ms > 0 ? (bwd ? 2.5 : 1.0) * fl / (ms * 1e-3) / 1e12 : NAN;
            const char *bits = bwd ? rerun_bits(e, &a) : "-";
            printf("| %lld %lld %lld %lld | %s | %s | %-11s | %8.3f | %6.1f | %s | %s |\n",
                   (long long)B, (long long)H, (long long)T, (long long)D, w ? "EXACT" : "FAST",
                   bwd ? "bwd" : "fwd", impl, ms, tf,
                   bwd || isnan(fa3) ? "-" : (D == 64 ? "265" : "423"), bits);
            if (why[0]) printf("  (cuDNN not used: %s)\n", why);
        }
        oj_scope_end(e);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) REPS = atoi(argv[1]);
    if (REPS < 1) REPS = 1;
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = OJ_DEVICE_CUDA;
    ec.seed = 1;
    ec.numerics = OJ_NUMERICS_FAST;
    oj_engine *fast = NULL, *exact = NULL;
    oj_error err = {0};
    if (oj_engine_create(&ec, &fast, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    ec.numerics = OJ_NUMERICS_EXACT;
    if (oj_engine_create(&ec, &exact, &err) != OJ_OK) {
        fprintf(stderr, "engine: %s\n", err.message);
        oj_engine_free(fast);
        return 1;
    }
    printf("bench_gpu_attention: causal bf16, [B,T,H,D] views, reps %d (median of batches of 10)\n"
           "| B H T D | numerics | pass | impl | ms | TFLOP/s | FA3 H100 fwd | rerun bits |\n"
           "|---|---|---|---|---:|---:|---:|---|\n",
           REPS);
    if (argc > 5) {
        for (int i = 2; i + 3 < argc; i += 4)
            bench_shape(fast, exact, atoll(argv[i]), atoll(argv[i + 1]), atoll(argv[i + 2]),
                        atoll(argv[i + 3]));
    } else {
        bench_shape(fast, exact, 16, 12, 1024, 64);
        bench_shape(fast, exact, 16, 6, 1024, 128);
    }
    oj_engine_free(exact);
    oj_engine_free(fast);
    return 0;
}
