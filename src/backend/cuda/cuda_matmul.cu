/* CUDA batched matrix multiply through cuBLAS (cublasGemmStridedBatchedEx):
 * out[i] (+)= a[i] @ b[i] on rank-3 strided views, row-major.
 *
 * cuBLAS is column-major, so the row-major product C = A B is computed as
 * C^T = B^T A^T: a row-major matrix with unit column stride is its own
 * transpose in column-major with ld = row stride (op N), one with unit row
 * stride is passed with op T. An operand whose strides fit neither (or a
 * leading dimension beyond int) is packed contiguous first.
 *
 * Precision: f32 accumulates in f32 (TF32 tensor cores only under
 * OJ_NUMERICS_FAST; EXACT asks for the pedantic f32 path), bf16/f16 inputs
 * accumulate in f32 and round once into out (or, with an f32 out, add
 * into it unrounded: C type CUDA_R_32F, a type pair cublasGemmEx lists for
 * CUBLAS_COMPUTE_32F), f64 in f64. cuBLAS gives the
 * same bits on every run for the same shapes on the same GPU (its
 * reproducibility guarantee), which is what EXACT promises here; the
 * summation order over k is cuBLAS's, not the CPU's index order.
 *
 * One row of 16-bit floats (batch-1 decoding: M == 1, one batch) takes the
 * matrix-vector kernels of cuda_gemv.cu instead when the views suit them
 * (16-byte aligned weight rows, see oj_cuda_gemv_path): the same contract
 * (f32 accumulation, out rounded once, a fixed summation order, so EXACT
 * holds), a few us less per call. OJAS_CUDA_GEMV=0 keeps every call on
 * cuBLAS (comparisons). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "core/env.h"

/* cuda_gemv.cu: the one-row path. oj_cuda_gemv_path says which kernel
 * takes out[1, 1, N] = a[1, 1, K] @ b[1, K, N] (+ addend[N], out's dtype,
 * when not NULL: out itself to accumulate, or a bias): 1 (b's k-stride 1),
 * 2 (b's n-stride 1), or 0 (none: cuBLAS); oj_cuda_gemv launches it. */
int oj_cuda_gemv_path(const oj_tensor *out, const oj_tensor *a, const oj_tensor *b);
oj_status oj_cuda_gemv(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                       const void *addend, int path);

/* dst [nb, R, C] contiguous = src (batch stride sb, row stride rs, col
 * stride cs; elements of es bytes). */
__global__ void k_pack3(char *dst, const char *src, int64_t nb, int64_t R, int64_t C, int64_t sb,
                        int64_t rs, int64_t cs, int es) {
    int64_t n = nb * R * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % C, t = i / C, r = t % R, b = t / R;
        const char *s = src + (b * sb + r * rs + c * cs) * es;
        char *d = dst + i * es;
        switch (es) {
        case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
        case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
        default: *(unsigned long long *)d = *(const unsigned long long *)s; break;
        }
    }
}

/* One operand: a row-major R x C matrix stack wanted as its transpose in
 * column-major (C x R). */
struct mm_arg {
    const char *ptr;
    int64_t bstride; /* elements between batches (0: shared) */
    cublasOperation_t op;
    int64_t ld;
    oj_storage *packed; /* owned scratch, or NULL */
};

static bool layout(int64_t R, int64_t C, int64_t rs, int64_t cs, cublasOperation_t *op,
                   int64_t *ld) {
    int64_t c1 = C > 1 ? C : 1, r1 = R > 1 ? R : 1;
    if (rs < 0 || cs < 0) return false;
    if ((cs == 1 || C == 1) && (R == 1 || rs >= c1)) {
        *op = CUBLAS_OP_N;
        *ld = R == 1 ? c1 : rs;
        return *ld <= INT_MAX;
    }
    if ((rs == 1 || R == 1) && (C == 1 || cs >= r1)) {
        *op = CUBLAS_OP_T;
        *ld = C == 1 ? r1 : cs;
        return *ld <= INT_MAX;
    }
    return false;
}

static oj_status prepare(oj_engine *eng, const oj_tensor *t, int64_t bt, int64_t R, int64_t C,
                         mm_arg *m) {
    memset(m, 0, sizeof *m);
    int64_t sb = bt > 1 ? t->stride[0] : 0, rs = t->stride[1], cs = t->stride[2];
    if (sb >= 0 && layout(R, C, rs, cs, &m->op, &m->ld)) {
        m->ptr = oj_cuda_ptr(t);
        m->bstride = sb;
        return OJ_OK;
    }
    /* pack: one batch when shared (stride 0), else all */
    int64_t nb = sb == 0 ? 1 : bt;
    int es = (int)oj_dtype_size(t->dtype);
    void *p = oj_cuda_scratch(eng, (size_t)(nb * R * C) * (size_t)es, "matmul", &m->packed);
    if (p == NULL) return oj_last_status(eng);
    k_pack3<<<oj_cuda_blocks(nb * R * C), OJ_CUDA_THREADS, 0, OJ_STREAM>>>((char *)p, oj_cuda_ptr(t), nb, R, C,
                                                             sb, rs, cs, es);
    oj_status st = oj_cuda_check(eng, "matmul (pack operand)");
    if (st != OJ_OK) return st;
    m->ptr = (const char *)p;
    m->bstride = sb == 0 ? 0 : R * C;
    m->op = CUBLAS_OP_N;
    m->ld = C > 1 ? C : 1;
    return OJ_OK;
}

/* With OJAS_CUDA_PROFILE=1 each GEMM is charged under its shape, dtype
 * and operand layout ("matmul bf16 NT b16 1024x2304x768"; the one-row
 * kernels "gemv-nk" / "gemv-kn"), names interned for the profile's
 * lifetime (up to 128 distinct ones, then one bucket). */
static const char *prof_name(oj_dtype dt, const char *layout, int64_t bt, int64_t M, int64_t N,
                             int64_t K, bool acc) {
    static char names[128][128];
    static int n;
    char key[128];
    snprintf(key, sizeof key, "matmul %s %s b%lld %lldx%lldx%lld%s", oj_dtype_name(dt), layout,
             (long long)bt, (long long)M, (long long)N, (long long)K, acc ? " +=" : "");
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], key) == 0) return names[i];
    if (n == 128) return "matmul (other shapes)";
    memcpy(names[n], key, sizeof key);
    return names[n++];
}

static oj_status blas_error(oj_engine *eng, cublasStatus_t st, const char *what) {
    return oj_set_error(eng, OJ_ERR_DEVICE, "matmul: %s failed: %s", what,
                        cublasGetStatusString(st));
}

static oj_status lt_epilogue(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                             const oj_tensor *b, cublasLtEpilogue_t epi, const void *vec,
                             const void *aux, int64_t aux_ld, bool accumulate);

/* OJAS_CUDA_LT_PLAIN=1: plain products (one batch, not accumulating,
 * FAST numerics) go through cuBLASLt's heuristic (lt_epilogue with no
 * epilogue) before cublasGemmStridedBatchedEx: a comparison of the two
 * libraries' kernel choices (off by default). One-batch FAST products the
 * GEMM tuner wants (cuda_gemm_tune.cu: by default those of at least 2^32
 * FLOP; OJAS_CUDA_GEMM_TUNE) go there too, accumulating and f32-out ones
 * included, so that it picks their algorithm: cuBLAS and cuBLASLt's
 * heuristics pick the same kernels (bench_gpu_gemm head), and the timed
 * choice was another for 16 of the 19 GEMMs of gpt2-124m's step. Read
 * at each call (tests turn them on and off). */
static bool lt_plain(void) {
    return oj__env_flag("OJAS_CUDA_LT_PLAIN", false);
}

oj_status oj_cuda_matmul(oj_engine *eng, oj_tensor *out, const oj_tensor *a, const oj_tensor *b,
                         bool accumulate) {
    const char *op = "matmul";
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    int64_t bt = out->shape[0], M = out->shape[1], N = out->shape[2], K = a->shape[2];
    if (bt == 0 || M == 0 || N == 0) return OJ_OK;
    oj_dtype dt = out->dtype;
    size_t es = oj_dtype_size(dt);
    int64_t ldc = M > 1 ? out->stride[1] : (N > 1 ? N : 1);
    int64_t sc = bt > 1 ? out->stride[0] : M * N;
    if ((N > 1 && out->stride[2] != 1) || ldc < N || (bt > 1 && sc < M * ldc))
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "matmul: the cuda kernel expects a row-major out, got strides [%lld, "
                            "%lld, %lld]",
                            (long long)out->stride[0], (long long)out->stride[1],
                            (long long)out->stride[2]);
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || ldc > INT_MAX)
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "matmul: dims M %lld, N %lld, K %lld exceed cuBLAS's int range",
                            (long long)M, (long long)N, (long long)K);
    if (K == 0) { /* out = 0, or unchanged when accumulating */
        if (accumulate) return OJ_OK;
        cudaError_t e = cudaSuccess;
        for (int64_t i = 0; i < bt && e == cudaSuccess; i++)
            e = cudaMemset2DAsync(oj_cuda_ptr(out) + i * sc * (int64_t)es, (size_t)ldc * es, 0,
                             (size_t)N * es, (size_t)M, OJ_STREAM);
        return e == cudaSuccess ? OJ_OK : oj_cuda_fail(eng, e, "matmul (zero out)");
    }
    int gemv = oj_cuda_gemv_path(out, a, b);
    if (gemv != 0) {
        if (oj_cuda_gemv(eng, out, a, b, accumulate ? oj_cuda_ptr(out) : NULL, gemv) != OJ_OK)
            return oj_last_status(eng);
        if (oj_cuda_state_of(eng)->prof)
            return oj_cuda_check(eng, prof_name(dt, gemv == 1 ? "gemv-nk" : "gemv-kn", bt, M, N,
                                                K, accumulate));
        return oj_cuda_check(eng, "matmul (gemv)");
    }
    if ((!accumulate && lt_plain()) || oj_cuda_gemm_tune_wants(M, N, K)) {
        oj_status lst =
            lt_epilogue(eng, out, a, b, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, accumulate);
        if (lst != OJ_ERR_UNSUPPORTED) return lst;
    }
    cublasHandle_t h = oj_cuda_blas(eng, op);
    if (h == NULL) return oj_last_status(eng);
    mm_arg A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    /* A^T: a is M x K; B^T: b is K x N */
    oj_status st = prepare(eng, a, bt, M, K, &A);
    if (st == OJ_OK) st = prepare(eng, b, bt, K, N, &B);
    if (st != OJ_OK) {
        if (A.packed) oj__storage_release(A.packed);
        if (B.packed) oj__storage_release(B.packed);
        return st;
    }
    bool exact = eng->numerics == OJ_NUMERICS_EXACT;
    cudaDataType_t ty, tc; /* a and b's type; out's (f32 over bf16/f16 operands) */
    cublasComputeType_t ct;
    float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
    double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
    const void *alpha = &alpha_f, *beta = &beta_f;
    switch (a->dtype) {
    case OJ_F32:
        ty = CUDA_R_32F;
        ct = exact ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F_FAST_TF32;
        break;
    case OJ_F64:
        ty = CUDA_R_64F;
        ct = exact ? CUBLAS_COMPUTE_64F_PEDANTIC : CUBLAS_COMPUTE_64F;
        alpha = &alpha_d;
        beta = &beta_d;
        break;
    case OJ_BF16:
        ty = CUDA_R_16BF;
        ct = exact ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
        break;
    default:
        ty = CUDA_R_16F;
        ct = exact ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
        break;
    }
    tc = dt == a->dtype ? ty : CUDA_R_32F;
    const int64_t aes = (int64_t)oj_dtype_size(a->dtype);
    char *c = oj_cuda_ptr(out);
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    const int64_t chunk = 65535;
    for (int64_t b0 = 0; b0 < bt && cs == CUBLAS_STATUS_SUCCESS; b0 += chunk) {
        int64_t nb = bt - b0 < chunk ? bt - b0 : chunk;
        const char *pa = A.ptr + b0 * A.bstride * aes;
        const char *pb = B.ptr + b0 * B.bstride * aes;
        char *pc = c + b0 * sc * (int64_t)es;
        for (int attempt = 0; attempt < 2; attempt++) {
            /* column-major: C^T (N x M) = op(B) (N x K) * op(A) (K x M) */
            cs = cublasGemmStridedBatchedEx(h, B.op, A.op, (int)N, (int)M, (int)K, alpha, pb, ty,
                                            (int)B.ld, (long long)B.bstride, pa, ty, (int)A.ld,
                                            (long long)A.bstride, beta, pc, tc, (int)ldc,
                                            (long long)sc, (int)nb, ct, CUBLAS_GEMM_DEFAULT);
            /* Some cuBLAS builds refuse the pedantic mode for half types:
             * the plain f32-accumulating mode is the same contract. */
            if (cs == CUBLAS_STATUS_NOT_SUPPORTED && ct == CUBLAS_COMPUTE_32F_PEDANTIC) {
                ct = CUBLAS_COMPUTE_32F;
                continue;
            }
            break;
        }
    }
    if (A.packed) oj__storage_release(A.packed);
    if (B.packed) oj__storage_release(B.packed);
    if (cs != CUBLAS_STATUS_SUCCESS) return blas_error(eng, cs, "cublasGemmStridedBatchedEx");
    if (oj_cuda_state_of(eng)->prof) {
        const char lay[3] = {A.op == CUBLAS_OP_N ? 'N' : 'T', B.op == CUBLAS_OP_N ? 'N' : 'T', 0};
        return oj_cuda_check(eng, prof_name(dt, lay, bt, M, N, K, accumulate));
    }
    return oj_cuda_check(eng, "matmul (cublasGemmStridedBatchedEx)");
}

/* Largest power of two <= 256 dividing the address (cuBLASLt's heuristic
 * otherwise assumes 256-byte aligned operands). */
static uint32_t align_of(const void *p) {
    uint32_t al = 256;
    while (al > 1 && ((uintptr_t)p & (al - 1)) != 0) al >>= 1;
    return al;
}

/* out = epilogue(a @ b) through cuBLASLt, one batch, f32/bf16/f16 (out's
 * dtype for a, b and the vectors):
 *  - CUBLASLT_EPILOGUE_BIAS: + bias [N] on every row of the row-major out
 *    (in f32 before the one rounding): one GEMM instead of a copy of the
 *    bias into every row and a GEMM reading it back (11-25 us of copies
 *    per linear of GPT-2 124M at B 16, T 1024);
 *  - CUBLASLT_EPILOGUE_DGELU: * gelu_tanh'(aux), aux [M, N] row-major
 *    (row stride aux_ld): the gradient of a GELU's input from the product
 *    giving its output's, without the product's own rounding and a 300 MB
 *    elementwise pass (110 us a layer of GPT-2 124M);
 *  - CUBLASLT_EPILOGUE_GELU_AUX_BIAS: out = gelu_tanh(a @ b + vec), and
 *    the sum a @ b + vec into aux (row stride aux_ld): a linear and the
 *    GELU after it, without a 200 MB elementwise pass (65 us a layer of
 *    GPT-2 124M); aux is written, not read;
 *  - CUBLASLT_EPILOGUE_BGRADB: vec[m] = sum over k of a[m, k] as well (a
 *    linear's bias gradient read along with dW = dy^T x, instead of a
 *    separate reduction of dy; cuBLASLt's B operand is a here).
 * vec: the bias (read) or the bias gradient (written), [M] or [N] of
 * out's dtype, contiguous and 16-byte aligned (the caller checks), or NULL.
 * CUBLASLT_EPILOGUE_DEFAULT with no vectors is a plain product; it alone
 * may accumulate (out += a @ b) and take an f32 out over bf16/f16 a and b
 * (summed in f32, added unrounded), as oj_cuda_matmul's contract.
 * The algorithm is oj_cuda_gemm_algo's (cuda_gemm_tune.cu): the fastest
 * of the heuristic's first 8, timed on the shape's first use, or for
 * shapes the tuner leaves (small ones, OJAS_CUDA_GEMM_TUNE=0) its first. OJ_ERR_UNSUPPORTED (nothing recorded)
 * when it does not apply or no algorithm fits: the caller takes the
 * unfused path. The algorithm may differ from the plain GEMM's (another
 * summation order over k), so OJ_NUMERICS_EXACT never comes here.
 * OJAS_CUDA_LT=0 turns it off (comparisons). */
static oj_status lt_epilogue(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                             const oj_tensor *b, cublasLtEpilogue_t epi, const void *vec,
                             const void *aux, int64_t aux_ld, bool accumulate) {
    static int off = -1;
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_LT", true);
    }
    oj_cuda_state *s = oj_cuda_state_of(eng);
    oj_dtype dt = out->dtype, at = a->dtype;
    int64_t bt = out->shape[0], M = out->shape[1], N = out->shape[2], K = a->shape[2];
    int64_t ldc = M > 1 ? out->stride[1] : N;
    /* out's dtype is a's, or f32 over bf16/f16 operands in a plain product */
    bool mixed = dt == OJ_F32 && (at == OJ_BF16 || at == OJ_F16) &&
                 epi == CUBLASLT_EPILOGUE_DEFAULT && !vec && !aux;
    if (off || eng->numerics == OJ_NUMERICS_EXACT || bt != 1 || M < 2 || N < 2 || K < 1 ||
        (at != OJ_BF16 && at != OJ_F16 && at != OJ_F32) || b->dtype != at ||
        (dt != at && !mixed) || out->stride[2] != 1 || ldc < N || M > INT_MAX || N > INT_MAX ||
        K > INT_MAX || ldc > INT_MAX || (accumulate && epi != CUBLASLT_EPILOGUE_DEFAULT))
        return OJ_ERR_UNSUPPORTED;
    if (vec && !oj_cu_aligned16(vec)) return OJ_ERR_UNSUPPORTED;
    if (aux && (aux_ld < N || aux_ld % 8 != 0 || !oj_cu_aligned16(aux))) return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_blas(eng, "matmul") == NULL) return oj_last_status(eng); /* the workspace */
    if (!s->lt_ready) {
        if (s->capture || cublasLtCreate(&s->lt) != CUBLAS_STATUS_SUCCESS)
            return OJ_ERR_UNSUPPORTED;
        s->lt_ready = true;
    }
    mm_arg A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    oj_status st = prepare(eng, a, 1, M, K, &A);
    if (st == OJ_OK) st = prepare(eng, b, 1, K, N, &B);
    if (st != OJ_OK) {
        if (A.packed) oj__storage_release(A.packed);
        if (B.packed) oj__storage_release(B.packed);
        return st;
    }
    cudaDataType_t ty = at == OJ_BF16 ? CUDA_R_16BF : at == OJ_F16 ? CUDA_R_16F : CUDA_R_32F;
    cudaDataType_t tc = dt == at ? ty : CUDA_R_32F;
    cublasComputeType_t ct = at == OJ_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t md = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulAlgo_t algo;
    char *c = oj_cuda_ptr(out);
    const void *bp = vec;
    int64_t ald = aux_ld;
    uint64_t wsb = s->blas_ws_bytes;
    uint32_t al[3] = {align_of(B.ptr), align_of(A.ptr), align_of(c)};
    /* what the algorithm's choice depends on (the tuner's cache key) */
    oj_cuda_gemm_key key;
    memset(&key, 0, sizeof key);
    key.m = N, key.n = M, key.k = K, key.lda = B.ld, key.ldb = A.ld, key.ldc = ldc;
    key.aux_ld = aux ? aux_ld : 0;
    key.ta = B.op, key.tb = A.op, key.tab = ty, key.tc = tc, key.ct = ct, key.epi = epi;
    key.align[0] = al[0], key.align[1] = al[1], key.align[2] = key.align[3] = al[2];
    key.ordinal = s->ordinal, key.has_vec = vec != NULL, key.beta1 = accumulate;
#define LT_OK(x) ((x) == CUBLAS_STATUS_SUCCESS)
    /* column-major: C^T (N x M) = op(B) (N x K) * op(A) (K x M); the bias
     * runs along C^T's rows (out's columns), aux is laid out as C^T */
    bool ok = LT_OK(cublasLtMatmulDescCreate(&md, ct, CUDA_R_32F)) &&
              LT_OK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &B.op,
                                                   sizeof B.op)) &&
              LT_OK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSB, &A.op,
                                                   sizeof A.op)) &&
              LT_OK(cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                   sizeof epi)) &&
              (!bp || LT_OK(cublasLtMatmulDescSetAttribute(
                          md, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp))) &&
              (!aux || (LT_OK(cublasLtMatmulDescSetAttribute(
                            md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux)) &&
                        LT_OK(cublasLtMatmulDescSetAttribute(
                            md, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ald, sizeof ald)))) &&
              LT_OK(cublasLtMatrixLayoutCreate(&la, ty, B.op == CUBLAS_OP_N ? N : K,
                                               B.op == CUBLAS_OP_N ? K : N, B.ld)) &&
              LT_OK(cublasLtMatrixLayoutCreate(&lb, ty, A.op == CUBLAS_OP_N ? K : M,
                                               A.op == CUBLAS_OP_N ? M : K, A.ld)) &&
              LT_OK(cublasLtMatrixLayoutCreate(&lc, tc, N, M, ldc)) &&
              LT_OK(cublasLtMatmulPreferenceCreate(&pref)) &&
              LT_OK(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb)) &&
              LT_OK(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0])) &&
              LT_OK(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1])) &&
              LT_OK(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2])) &&
              LT_OK(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2])) &&
              oj_cuda_gemm_algo(eng, md, la, lb, lc, pref, &key, &algo);
#undef LT_OK
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    if (ok) {
        const float one = 1.0f, zero = 0.0f;
        cs = cublasLtMatmul(s->lt, md, &one, B.ptr, la, A.ptr, lb, accumulate ? &one : &zero, c,
                            lc, c, lc, &algo, s->blas_ws, wsb, OJ_STREAM);
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (md) cublasLtMatmulDescDestroy(md);
    if (A.packed) oj__storage_release(A.packed);
    if (B.packed) oj__storage_release(B.packed);
    if (!ok) return OJ_ERR_UNSUPPORTED;
    if (cs != CUBLAS_STATUS_SUCCESS) return blas_error(eng, cs, "cublasLtMatmul (epilogue)");
    if (s->prof) {
        const char lay[4] = {A.op == CUBLAS_OP_N ? 'N' : 'T', B.op == CUBLAS_OP_N ? 'N' : 'T',
                             epi == CUBLASLT_EPILOGUE_BGRADB         ? 'd'
                             : epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? 'a'
                             : aux                                   ? 'g'
                             : vec                                   ? 'b'
                                                                     : 'p',
                             0};
        return oj_cuda_check(eng, prof_name(dt, lay, 1, M, N, K, accumulate));
    }
    return oj_cuda_check(eng, "matmul (cublasLtMatmul, epilogue)");
}

/* out = a @ b + bias (bias [N] contiguous, out's dtype, broadcast over the
 * rows). One row: the matrix-vector kernel adds the bias itself (a decode
 * step's linears: no copy node before each GEMM); more rows: cuBLASLt's
 * bias epilogue (lt_epilogue), or else the bias is copied into out and the
 * GEMM accumulates onto it. Each is the f32 sum plus the stored bias,
 * rounded once (the epilogue's GEMM may sum over k in another order). */
oj_status oj_cuda_matmul_bias(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                              const oj_tensor *b, const oj_tensor *bias) {
    if (oj_cuda_begin(eng, "matmul") != OJ_OK) return oj_last_status(eng);
    const int64_t N = out->shape[2];
    int gemv = out->shape[1] > 0 && a->shape[2] > 0 ? oj_cuda_gemv_path(out, a, b) : 0;
    if (gemv != 0 && bias->dtype == out->dtype && (N == 1 || bias->stride[0] == 1)) {
        if (oj_cuda_gemv(eng, out, a, b, oj_cuda_ptr(bias), gemv) != OJ_OK)
            return oj_last_status(eng);
        return oj_cuda_check(eng, "matmul (gemv, bias)");
    }
    oj_status lst = OJ_ERR_UNSUPPORTED;
    if (bias->dtype == out->dtype && (N == 1 || bias->stride[0] == 1))
        lst = lt_epilogue(eng, out, a, b, CUBLASLT_EPILOGUE_BIAS, oj_cuda_ptr(bias), NULL, 0, false);
    if (lst != OJ_ERR_UNSUPPORTED) return lst;
    oj_tensor bv = *out; /* bias seen as out's shape: stride 0 over batch and rows */
    bv.dtype = bias->dtype;
    bv.storage = bias->storage;
    bv.offset = bias->offset;
    bv.stride[0] = 0;
    bv.stride[1] = 0;
    bv.stride[2] = N > 1 ? bias->stride[0] : 1;
    oj_status st = oj_cuda_copy(eng, out, &bv);
    return st == OJ_OK ? oj_cuda_matmul(eng, out, a, b, true) : st;
}

/* out = (a @ b) * f'(x), f = GELU (tanh form): cuBLASLt's DGELU epilogue
 * (lt_epilogue) where it applies; OJ_ERR_UNSUPPORTED (nothing recorded)
 * otherwise, the caller then runs matmul and unary_backward. */
oj_status oj_cuda_matmul_act_backward(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                                      const oj_tensor *b, const oj_tensor *x, oj_unary_op op) {
    if (op != OJ_UN_GELU_TANH || x->dtype != out->dtype || x->rank != 3 ||
        x->shape[0] != 1 || x->shape[1] != out->shape[1] || x->shape[2] != out->shape[2] ||
        x->stride[2] != 1 || (x->shape[1] > 1 && x->stride[1] < x->shape[2]))
        return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_begin(eng, "matmul") != OJ_OK) return oj_last_status(eng);
    int64_t ld = x->shape[1] > 1 ? x->stride[1] : x->shape[2];
    return lt_epilogue(eng, out, a, b, CUBLASLT_EPILOGUE_DGELU, NULL, oj_cuda_ptr(x), ld, false);
}

/* out = a @ b and dbias[m] = sum over k of a[m, k] in one cuBLASLt call
 * (the BGRADB epilogue, lt_epilogue): a linear's weight gradient dW = dy^T
 * x with its bias gradient, dy read once. dbias [M] contiguous of out's
 * dtype, summed in f32 and rounded once. Off unless OJAS_CUDA_BGRAD=1
 * (read at each call): on the H200 the gpt2-124m graph step measured 0.15
 * ms slower with it than with the separate ones @ dy GEMVs (36.00 against
 * 35.84 ms, an integration build at a485c55), the epilogue's dW GEMMs
 * costing what the GEMVs did. OJ_ERR_UNSUPPORTED (nothing recorded) where
 * it does not apply (off, EXACT numerics, OJAS_CUDA_LT=0, operands
 * cuBLASLt refuses): the caller then runs matmul and reduces dy itself. */
oj_status oj_cuda_matmul_bgrad(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                               const oj_tensor *b, oj_tensor *dbias) {
    if (!oj__env_flag("OJAS_CUDA_BGRAD", false) || dbias->dtype != out->dtype || dbias->rank != 1 ||
        dbias->shape[0] != out->shape[1] || dbias->stride[0] != 1)
        return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_begin(eng, "matmul") != OJ_OK) return oj_last_status(eng);
    return lt_epilogue(eng, out, a, b, CUBLASLT_EPILOGUE_BGRADB, oj_cuda_ptr(dbias), NULL, 0, false);
}

/* pre = a @ b + bias, out = gelu_tanh(pre) in one cuBLASLt call (the
 * GELU_AUX_BIAS epilogue, lt_epilogue): pre [1, M, N] row-major with a row
 * stride that is a multiple of 8 elements, bias [N] contiguous, one dtype
 * with out. The GELU reads the f32 sum before pre is rounded.
 * OJ_ERR_UNSUPPORTED (nothing recorded) where it does not apply (another
 * op, EXACT numerics, OJAS_CUDA_LT=0 or OJAS_CUDA_GELU_EPI=0, operands
 * cuBLASLt refuses): the caller runs the linear and the GELU. */
oj_status oj_cuda_matmul_bias_act(oj_engine *eng, oj_tensor *out, const oj_tensor *a,
                                  const oj_tensor *b, const oj_tensor *bias, oj_tensor *pre,
                                  oj_unary_op op) {
    static int off = -1;
    if (off < 0) {
        off = !oj__env_flag("OJAS_CUDA_GELU_EPI", true);
    }
    const int64_t M = out->shape[1], N = out->shape[2];
    if (off || op != OJ_UN_GELU_TANH || bias->dtype != out->dtype || bias->rank != 1 ||
        bias->shape[0] != N || (N > 1 && bias->stride[0] != 1) || pre->dtype != out->dtype ||
        pre->rank != 3 || pre->shape[0] != 1 || pre->shape[1] != M || pre->shape[2] != N ||
        pre->stride[2] != 1 || (M > 1 && pre->stride[1] < N))
        return OJ_ERR_UNSUPPORTED;
    if (oj_cuda_begin(eng, "matmul") != OJ_OK) return oj_last_status(eng);
    int64_t ld = M > 1 ? pre->stride[1] : N;
    return lt_epilogue(eng, out, a, b, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, oj_cuda_ptr(bias),
                       oj_cuda_ptr(pre), ld, false);
}
