/* cuBLASLt algorithm choice for FAST numerics, timed per GEMM shape.
 *
 * cuBLASLt's heuristic ranks algorithms by a model, not by the clock: on
 * the H200 its first pick for a 2560-row chunk of gpt2-124m's head logits
 * GEMM ([2560, 768] @ [768, 50304], bf16) ran at 725 TFLOP/s, its sixth
 * at 806 (bench_gpu_gemm head), and the tuner kept another than the first
 * for 16 of the 19 GEMMs it timed in the training step (its log). On a shape's
 * first use the tuner asks the heuristic for up to OJ_TUNE_ALGOS
 * algorithms, times each (one warm-up, OJ_TUNE_REPS timed runs between
 * two events) and keeps the fastest in a per-engine cache keyed by
 * everything the choice depends on (dims, transposes, leading dims,
 * dtypes, compute type, epilogue, alignments); later uses, captured ones
 * included, run the cached algorithm. The same method as PyTorch's
 * TunableOp and cuBLASLt's own "auto-tuning" sample (LtSgemmSimpleAutoTuning).
 *
 * The timing runs on the tuner's own stream (non-blocking) over its own
 * device buffers (operands filled with small values, output, epilogue
 * vector and aux, workspace), never on the caller's tensors: it is safe
 * during a graph capture (relaxed mode: the captured stream is not
 * touched, and nothing is read or written that in-flight work may use),
 * so a training step captured before any eager step is tuned too.
 * Outside a capture the engine's stream is synchronised first so the
 * timings do not overlap queued work. The buffers (up to the largest
 * tuned GEMM's operands, ~350 MB for the head's logits, allocated outside
 * the engine's budget) are freed after each tuning outside a capture;
 * during one they are kept (and outgrown ones set aside) until it ends.
 *
 * FAST only: the algorithm (its summation order over k) then depends on
 * timings, so bits may differ between runs. EXACT never reaches
 * cuBLASLt (cuda_matmul.cu). OJAS_CUDA_GEMM_TUNE (read at each call):
 * unset or 1, products of at least OJ_TUNE_MIN_FLOP (2 m n k) are tuned,
 * smaller ones (decode, short prefills: timing them would cost more than
 * it saves) keep the heuristic's first; 2 tunes every shape (tests); 0
 * turns the tuner off (the heuristic's first everywhere). gpt2-124m's
 * graph step (B 16, T 1024, H200): 33.727 ms tuned against 33.991 off.
 * Any failure of the tuning (no memory, a refused algorithm) falls back
 * to the heuristic's first; only a heuristic that offers nothing is a
 * miss. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

#define OJ_TUNE_ALGOS 8
#define OJ_TUNE_REPS 5
#define OJ_TUNE_CACHE 256
/* 2^32 FLOP (~6 us at 700 TFLOP/s): the smallest of gpt2-124m's training
 * GEMMs at B 16, T 1024 is 19 GFLOP, a 124M model's prefill of 1024
 * tokens 3.6 GFLOP a GEMM */
#define OJ_TUNE_MIN_FLOP 4294967296.0

struct tune_entry {
    oj_cuda_gemm_key key;
    cublasLtMatmulAlgo_t algo;
    float us;
};

struct oj_cuda_tune {
    cudaStream_t stream;
    cudaEvent_t ev[2];
    void *buf; /* A, B, C/D, vector, aux, workspace; NULL between tunings */
    size_t buf_bytes;
    /* buffers outgrown during a capture (cudaFree is not risked there),
     * freed with buf when it ends (oj_cuda_gemm_tune_trim) */
    void *old[16];
    int nold;
    int n;
    struct tune_entry cache[OJ_TUNE_CACHE];
};

/* OJAS_CUDA_GEMM_TUNE: 0 off, 1 (unset, or any other value) products of
 * OJ_TUNE_MIN_FLOP on, 2 every product. */
static int tune_level(void) {
    const int64_t v = oj__env_int("OJAS_CUDA_GEMM_TUNE", 1);
    return v == 0 || v == 2 ? (int)v : 1;
}

bool oj_cuda_gemm_tune_wants(int64_t m, int64_t n, int64_t k) {
    int lv = tune_level();
    return lv == 2 || (lv == 1 && 2.0 * (double)m * (double)n * (double)k >= OJ_TUNE_MIN_FLOP);
}

void oj_cuda_gemm_tune_close(oj_cuda_state *s) {
    struct oj_cuda_tune *t = s->tune;
    if (t == NULL) return;
    if (t->buf) cudaFree(t->buf);
    for (int i = 0; i < t->nold; i++) cudaFree(t->old[i]);
    if (t->ev[0]) cudaEventDestroy(t->ev[0]);
    if (t->ev[1]) cudaEventDestroy(t->ev[1]);
    if (t->stream) cudaStreamDestroy(t->stream);
    free(t);
    s->tune = NULL;
}

void oj_cuda_gemm_tune_trim(oj_cuda_state *s) {
    struct oj_cuda_tune *t = s->tune;
    if (t == NULL || s->capture || (t->buf == NULL && t->nold == 0)) return;
    cudaStreamSynchronize(t->stream);
    if (t->buf) cudaFree(t->buf);
    for (int i = 0; i < t->nold; i++) cudaFree(t->old[i]);
    t->buf = NULL;
    t->buf_bytes = 0;
    t->nold = 0;
    cudaGetLastError();
}

/* The tuner's stream and events, made once, outside any capture. */
static struct oj_cuda_tune *tune_state(oj_cuda_state *s) {
    if (s->tune) return s->tune;
    if (s->capture) return NULL;
    struct oj_cuda_tune *t = (struct oj_cuda_tune *)calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    if (cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&t->ev[0]) != cudaSuccess || cudaEventCreate(&t->ev[1]) != cudaSuccess) {
        cudaGetLastError();
        s->tune = t;
        oj_cuda_gemm_tune_close(s);
        return NULL;
    }
    s->tune = t;
    return t;
}

void oj_cuda_gemm_tune_prepare(oj_cuda_state *s) {
    if (tune_level() > 0) tune_state(s);
}

static size_t type_size(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : 2;
}

/* n elements of type ty in [-1, 1) from a hash of the index (timings on
 * zeros would run at the lower power of zero operands). */
__global__ void k_tune_fill(void *p, int64_t n, int ty) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 15;
        float v = (float)(h & 0xffff) * (2.0f / 65536.0f) - 1.0f;
        if (ty == CUDA_R_32F) ((float *)p)[i] = v;
        else if (ty == CUDA_R_16F) ((__half *)p)[i] = __float2half(v);
        else ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    }
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Time the heuristic's candidates on the tuner's buffers; *best the
 * fastest that ran, false when none did. */
static bool tune(oj_cuda_state *s, struct oj_cuda_tune *t, cublasLtMatmulDesc_t md,
                 cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                 const oj_cuda_gemm_key *k, const cublasLtMatmulHeuristicResult_t *res, int nres,
                 cublasLtMatmulAlgo_t *best, float *best_us) {
    size_t ea = type_size(k->tab), ec = type_size(k->tc);
    size_t na = (size_t)k->lda * (size_t)(k->ta == CUBLAS_OP_N ? k->k : k->m);
    size_t nb = (size_t)k->ldb * (size_t)(k->tb == CUBLAS_OP_N ? k->n : k->k);
    size_t nc = (size_t)k->ldc * (size_t)k->n;
    size_t nv = (size_t)(k->m > k->n ? k->m : k->n);
    size_t nx = k->aux_ld > 0 ? (size_t)k->aux_ld * (size_t)k->n : 0;
    size_t oa = 0, ob = oa + round256(na * ea), oc = ob + round256(nb * ea),
           ov = oc + round256(nc * ec), ox = ov + round256(nv * ec), ow = ox + round256(nx * ec),
           total = ow + round256(s->blas_ws_bytes);
    if (t->buf && t->buf_bytes < total) {
        if (s->capture && t->nold == (int)(sizeof t->old / sizeof t->old[0])) return false;
        if (s->capture) t->old[t->nold++] = t->buf;
        else cudaFree(t->buf);
        t->buf = NULL;
    }
    if (t->buf == NULL) {
        if (cudaMalloc(&t->buf, total) != cudaSuccess) {
            cudaGetLastError();
            t->buf = NULL;
            return false;
        }
        t->buf_bytes = total;
    }
    char *b = (char *)t->buf;
    k_tune_fill<<<oj_cuda_blocks((int64_t)na), OJ_CUDA_THREADS, 0, t->stream>>>(b + oa, (int64_t)na,
                                                                               (int)k->tab);
    k_tune_fill<<<oj_cuda_blocks((int64_t)nb), OJ_CUDA_THREADS, 0, t->stream>>>(b + ob, (int64_t)nb,
                                                                               (int)k->tab);
    k_tune_fill<<<oj_cuda_blocks((int64_t)nc), OJ_CUDA_THREADS, 0, t->stream>>>(b + oc, (int64_t)nc,
                                                                               (int)k->tc);
    if (cudaGetLastError() != cudaSuccess) {
        oj_cuda_gemm_tune_trim(s);
        return false;
    }
    /* the epilogue's pointers: the tuner's for the timing, the caller's
     * put back after */
    void *vec0 = NULL, *aux0 = NULL, *vec = b + ov, *aux = b + ox;
    size_t got = 0;
    if (k->has_vec)
        cublasLtMatmulDescGetAttribute(md, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec0, sizeof vec0,
                                       &got);
    if (k->aux_ld > 0)
        cublasLtMatmulDescGetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux0,
                                       sizeof aux0, &got);
    if (k->has_vec)
        cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec);
    if (k->aux_ld > 0)
        cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux);
    const float one = 1.0f, zero = 0.0f;
    const float *beta = k->beta1 ? &one : &zero;
    bool any = false;
    for (int i = 0; i < nres; i++) {
        if (res[i].workspaceSize > s->blas_ws_bytes) continue;
        cublasStatus_t st = cublasLtMatmul(s->lt, md, &one, b + oa, la, b + ob, lb, beta, b + oc,
                                           lc, b + oc, lc, &res[i].algo, b + ow,
                                           s->blas_ws_bytes, t->stream); /* warm-up */
        cudaEventRecord(t->ev[0], t->stream);
        for (int r = 0; st == CUBLAS_STATUS_SUCCESS && r < OJ_TUNE_REPS; r++)
            st = cublasLtMatmul(s->lt, md, &one, b + oa, la, b + ob, lb, beta, b + oc, lc, b + oc,
                                lc, &res[i].algo, b + ow, s->blas_ws_bytes, t->stream);
        cudaEventRecord(t->ev[1], t->stream);
        float ms = 0;
        if (cudaEventSynchronize(t->ev[1]) != cudaSuccess ||
            cudaEventElapsedTime(&ms, t->ev[0], t->ev[1]) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        if (st != CUBLAS_STATUS_SUCCESS) continue;
        float us = ms * 1e3f / OJ_TUNE_REPS;
        if (!any || us < *best_us) {
            *best = res[i].algo;
            *best_us = us;
            any = true;
        }
    }
    if (k->has_vec)
        cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec0, sizeof vec0);
    if (k->aux_ld > 0)
        cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux0,
                                       sizeof aux0);
    oj_cuda_gemm_tune_trim(s); /* the buffers go back now; kept through a capture */
    return any;
}

bool oj_cuda_gemm_algo(oj_engine *eng, cublasLtMatmulDesc_t md, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                       cublasLtMatmulPreference_t pref, const oj_cuda_gemm_key *key,
                       cublasLtMatmulAlgo_t *algo) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    cublasLtMatmulHeuristicResult_t res[OJ_TUNE_ALGOS];
    int nres = 0;
    struct oj_cuda_tune *t =
        oj_cuda_gemm_tune_wants(key->m, key->n, key->k) ? tune_state(s) : NULL;
    if (t) {
        for (int i = 0; i < t->n; i++)
            if (memcmp(&t->cache[i].key, key, sizeof *key) == 0) {
                *algo = t->cache[i].algo;
                return true;
            }
    }
    int want = t && t->n < OJ_TUNE_CACHE ? OJ_TUNE_ALGOS : 1;
    if (cublasLtMatmulAlgoGetHeuristic(s->lt, md, la, lb, lc, lc, pref, want, res, &nres) !=
            CUBLAS_STATUS_SUCCESS ||
        nres < 1)
        return false;
    *algo = res[0].algo;
    if (want == 1) return true;
    float us = 0;
    cublasLtMatmulAlgo_t best;
    if (nres > 1) {
        /* outside a capture: the engine's queued work first, so it does
         * not run beside the timings */
        if (!s->capture) cudaStreamSynchronize(s->stream);
        if (!tune(s, t, md, la, lb, lc, key, res, nres, &best, &us)) {
            cudaGetLastError();
            return true; /* the heuristic's first, untuned (tried again next use) */
        }
        *algo = best;
    }
    struct tune_entry *e = &t->cache[t->n++];
    e->key = *key;
    e->algo = *algo;
    e->us = us;
    if (oj__env_flag("OJAS_CUDA_GEMM_TUNE_LOG", false)) {
        int id = 0, tile = 0, stages = 0, splitk = 0;
        size_t got = 0;
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &got);
        fprintf(stderr,
                "gemm tune: m %lld n %lld k %lld op %c%c epi %d: %d candidates, chose algo %d "
                "tile %d stages %d splitk %d (%.1f us; the heuristic's first: %s)\n",
                (long long)key->m, (long long)key->n, (long long)key->k,
                key->ta == CUBLAS_OP_N ? 'N' : 'T', key->tb == CUBLAS_OP_N ? 'N' : 'T',
                (int)key->epi, nres, id, tile, stages, splitk, us,
                memcmp(algo, &res[0].algo, sizeof *algo) == 0 ? "yes" : "no");
    }
    return true;
}
