/* GEMM benchmark: the matrix products of a gpt2-124m training step at
 * B=16, T=1024 (M = 16384 rows) through oj_matmul on a CUDA engine, in
 * bf16 (f32 accumulation) and f32 (TF32 under FAST), each layout a step
 * uses: forward x W^T, backward dX = g W and dW = g^T x. Prints one JSON
 * line per case with the mean ms of `reps` products issued back to back
 * and TFLOP/s (2 M N K / time); bench/gpu/gemm_torch.py
 * times torch.matmul on the same shapes for the ratio. The products take
 * ojas's default path: cuBLASLt with the algorithm the GEMM tuner timed
 * (cuda_gemm_tune.cu); OJAS_CUDA_GEMM_TUNE=0 times cublasGemmStridedBatchedEx.
 *
 * `head` and `lt` (builds with the CUDA backend) call cuBLAS and cuBLASLt
 * directly, outside ojas, on bf16 operands of small random values:
 *  - head: the head's logits GEMM of the fused linear cross-entropy
 *    (logits [R, V] = x [R, 768] @ W^T) for chunk rows R 2668 (256 MiB of
 *    logits at V 50304), 2688, 2560, 2432 and 4096, with W stored [V, C]
 *    (ojas's layout) or [C, V], or the logits transposed (W x^T), and at
 *    V 50257 unpadded; each through cublasGemmEx, cublasGemmStridedBatchedEx
 *    with one batch (ojas's cuBLAS call) and each of cuBLASLt's heuristic's
 *    first `top` algorithms (its id, tile, stages, split-K and reduction
 *    scheme printed);
 *  - lt: the step's GEMMs (bf16) and the head chunk's dx and dW (f32 out,
 *    accumulating) the same way: which split-K algorithms are slower.
 * One JSON line per configuration: us (mean of reps after 2 warm-ups,
 * between two events) and TFLOP/s.
 *
 * usage: bench_gpu_gemm [reps]
 *        bench_gpu_gemm head|lt [reps] [top] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ojas/ojas.h"

#ifdef OJAS_BENCH_CUBLAS
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

/* n bf16 (es 2) or f32 (es 4) values in [-1, 1) at device p. */
static int fill(void *p, size_t n, int es) {
    void *h = malloc(n * (size_t)es);
    if (h == NULL) return -1;
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float v = (float)(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        if (es == 2) ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
        else ((float *)h)[i] = v;
    }
    int rc = cudaMemcpy(p, h, n * (size_t)es, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
    free(h);
    return rc;
}

/* One row-major product out [M, N] (+)= a [M, K] @ b [K, N], a stored
 * [K, M] when ta, b stored [N, K] when tb, bf16 operands, out bf16 or
 * (f32out) f32 with beta 1; as cuBLAS sees it (column-major): D [N, M] =
 * op(B) op(A). Every library path and cuBLASLt candidate, one line each. */
static void sweep(cublasHandle_t h, cublasLtHandle_t lt, void *ws, size_t wsb, cudaStream_t st,
                  const char *name, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                  int64_t ldc, bool f32out, int reps, int top) {
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    int64_t lda = tb ? K : N, ldb = ta ? M : K; /* cuBLAS's A is b, its B is a */
    size_t na = (size_t)N * (size_t)K, nb = (size_t)M * (size_t)K, nc = (size_t)ldc * (size_t)M;
    int ec = f32out ? 4 : 2;
    void *A = NULL, *B = NULL, *C = NULL;
    if (cudaMalloc(&A, na * 2) != cudaSuccess || cudaMalloc(&B, nb * 2) != cudaSuccess ||
        cudaMalloc(&C, nc * (size_t)ec) != cudaSuccess || fill(A, na, 2) || fill(B, nb, 2) ||
        (f32out && fill(C, nc, ec))) { /* C is read only when accumulating */
        fprintf(stderr, "bench: no device memory for %s\n", name);
        exit(1);
    }
    cudaDataType_t tc = f32out ? CUDA_R_32F : CUDA_R_16BF;
    const float one = 1.0f, zero = 0.0f, *beta = f32out ? &one : &zero;
    double fl = 2.0 * (double)M * (double)N * (double)K;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    /* cfg < 0: cublasGemmEx (-1), cublasGemmStridedBatchedEx (-2); else
     * cuBLASLt's candidate cfg */
    cublasLtMatmulDesc_t md = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[64];
    int nres = 0;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    uint64_t w64 = wsb;
    cublasLtMatmulDescCreate(&md, ct, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, opa == CUBLAS_OP_N ? N : K,
                               opa == CUBLAS_OP_N ? K : N, lda);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, opb == CUBLAS_OP_N ? K : M,
                               opb == CUBLAS_OP_N ? M : K, ldb);
    cublasLtMatrixLayoutCreate(&lc, tc, N, M, ldc);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w64,
                                         sizeof w64);
    if (top > 64) top = 64;
    cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pref, top, res, &nres);
    for (int cfg = -2; cfg < nres; cfg++) {
        cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
        float ms = 0;
        for (int r = -2; r < reps && s == CUBLAS_STATUS_SUCCESS; r++) {
            if (r == 0) cudaEventRecord(e0, st);
            if (cfg == -1)
                s = cublasGemmEx(h, opa, opb, (int)N, (int)M, (int)K, &one, A, CUDA_R_16BF,
                                 (int)lda, B, CUDA_R_16BF, (int)ldb, beta, C, tc, (int)ldc, ct,
                                 CUBLAS_GEMM_DEFAULT);
            else if (cfg == -2)
                s = cublasGemmStridedBatchedEx(h, opa, opb, (int)N, (int)M, (int)K, &one, A,
                                               CUDA_R_16BF, (int)lda, (long long)na, B,
                                               CUDA_R_16BF, (int)ldb, (long long)nb, beta, C, tc,
                                               (int)ldc, (long long)nc, 1, ct, CUBLAS_GEMM_DEFAULT);
            else
                s = cublasLtMatmul(lt, md, &one, A, la, B, lb, beta, C, lc, C, lc, &res[cfg].algo,
                                   ws, wsb, st);
        }
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        char lib[32], extra[192] = "";
        if (cfg == -1) snprintf(lib, sizeof lib, "cublasGemmEx");
        else if (cfg == -2) snprintf(lib, sizeof lib, "cublasGemmStridedBatchedEx");
        else {
            int id = 0, tile = 0, stages = 0, splitk = 0, red = 0, swz = 0, cust = 0;
            size_t got = 0;
            const cublasLtMatmulAlgo_t *al = &res[cfg].algo;
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                 sizeof tile, &got);
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                                 sizeof stages, &got);
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                 sizeof splitk, &got);
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                                 sizeof red, &got);
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz,
                                                 sizeof swz, &got);
            cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cust,
                                                 sizeof cust, &got);
            snprintf(lib, sizeof lib, "lt#%d", cfg);
            snprintf(extra, sizeof extra,
                     ", \"algo\": %d, \"tile\": %d, \"stages\": %d, \"splitk\": %d, "
                     "\"red\": %d, \"swizzle\": %d, \"custom\": %d, \"ws\": %zu",
                     id, tile, stages, splitk, red, swz, cust, res[cfg].workspaceSize);
        }
        double us = ms * 1e3 / reps;
        if (s != CUBLAS_STATUS_SUCCESS)
            printf("{\"case\": \"%s\", \"lib\": \"%s\", \"error\": \"%s\"}\n", name, lib,
                   cublasGetStatusString(s));
        else
            printf("{\"case\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, \"ldc\": "
                   "%lld, \"lib\": \"%s\", \"us\": %.1f, \"tflops\": %.1f%s}\n",
                   name, (long long)M, (long long)N, (long long)K, (long long)ldc, lib, us,
                   fl / us * 1e-6, extra);
        fflush(stdout);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(md);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
}

static int direct(const char *mode, int reps, int top) {
    cublasHandle_t h;
    cublasLtHandle_t lt;
    cudaStream_t st;
    void *ws = NULL;
    size_t wsb = 32u << 20; /* ojas's cuBLAS workspace */
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "skipped: no CUDA device\n");
        return 77;
    }
    if (cudaStreamCreate(&st) != cudaSuccess || cudaMalloc(&ws, wsb) != cudaSuccess ||
        cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench: CUDA/cuBLAS setup failed\n");
        return 1;
    }
    cublasSetStream(h, st);
    cublasSetWorkspace(h, ws, wsb);
    const int64_t C = 768, V = 50304;
    if (strcmp(mode, "head") == 0) {
        const int64_t rows[] = {2668, 2688, 2560, 2432, 4096};
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            int64_t R = rows[i];
            sweep(h, lt, ws, wsb, st, "head x W^T (W [V, C])", R, V, C, false, true, V, false,
                  reps, top);
            sweep(h, lt, ws, wsb, st, "head x W (W [C, V])", R, V, C, false, false, V, false,
                  reps, top);
            sweep(h, lt, ws, wsb, st, "head (W x^T) logits^T", V, R, C, false, true, R, false,
                  reps, top);
        }
        sweep(h, lt, ws, wsb, st, "head x W^T V 50257", 2668, 50257, C, false, true, 50257, false,
              reps, top);
    } else {
        const int64_t M = 16384, R = 2668;
        struct {
            const char *name;
            int64_t m, n, k;
            bool ta, tb, f32;
        } cs[] = {
            {"qkv fwd x W^T", M, 2304, 768, false, true, false},
            {"qkv dX g W", M, 768, 2304, false, false, false},
            {"qkv dW g^T x", 2304, 768, M, true, false, false},
            {"fc fwd x W^T", M, 3072, 768, false, true, false},
            {"fc dW g^T x", 3072, 768, M, true, false, false},
            {"proj fwd x W^T", M, 768, 3072, false, true, false},
            {"proj dX g W", M, 3072, 768, false, false, false},
            {"attn-proj fwd x W^T", M, 768, 768, false, true, false},
            {"attn-proj dW g^T x", 768, 768, M, true, false, false},
            {"head dX dl W", R, C, V, false, false, false},
            {"head dW += dl^T x (f32)", V, C, R, true, false, true},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
            sweep(h, lt, ws, wsb, st, cs[i].name, cs[i].m, cs[i].n, cs[i].k, cs[i].ta, cs[i].tb,
                  cs[i].n, cs[i].f32, reps, top);
    }
    cublasLtDestroy(lt);
    cublasDestroy(h);
    cudaFree(ws);
    cudaStreamDestroy(st);
    return 0;
}
#endif

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
    if (argc > 1 && (strcmp(argv[1], "head") == 0 || strcmp(argv[1], "lt") == 0)) {
#ifdef OJAS_BENCH_CUBLAS
        return direct(argv[1], argc > 2 ? atoi(argv[2]) : 20, argc > 3 ? atoi(argv[3]) : 8);
#else
        fprintf(stderr, "skipped: %s needs a build with the CUDA backend\n", argv[1]);
        return 77;
#endif
    }
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
        {"head chunk 2668 x W^T", 2668, 50304, 768, false, true},
        {"head chunk 2560 x W^T", 2560, 50304, 768, false, true},
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
