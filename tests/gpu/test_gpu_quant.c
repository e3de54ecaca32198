// test: quantized weights on CUDA (q8_0, q4_0, q4_1, q4_k, fp8) against the CPU:
// the same matrix quantized on either engine dequantizes to the same bits;
// oj_qmatmul's dequantizing GEMV (1..8 rows) within f32 summation error of
// x @ dequantize(W)^T (f64 reference from the CPU's dequantized matrix; the
// bandwidth kernel and its fallback on every type, fp8's row kernel too,
// M 1..8, odd N, K 32 to 16384, the same bits on every run and whatever the grid), its
// prefill path (more rows: bf16 GEMM over the dequantized matrix) within
// bf16 rounding; a quantized GPT (gpt2 and llama, ggml's types, loaded from a GGUF file
// written on the CPU) decodes on CUDA to the greedy tokens of the CPU's
// f32 forward over the same dequantized weights, with and without a CUDA
// graph, up to a near tie of the CPU's logits; the quantized decode entry
// (decode_qlinear: norm, product over the blocks, bias, GELU, residual,
// KV write) within f32 (bf16) rounding of a double reference over the
// dequantized matrix, the keys and values in the cache the output's bits,
// its other loops (OJAS_DECODE_QLOOP=1, 2) the bits of the default one and
// the quantized head (decode_qnorm_head) its logits with their argmax;
// the quantized fast decode step (gpt_decode_quant.c) of a gpt2 with
// 124M's widths gives the generic quantized step's greedy tokens for 128
// steps and its logits within 1e-3 of their largest magnitude; a
// quantized llama's stacked q/k/v and gate/up (oj__gpt_qfuse, on by
// default under FAST) decode to the separate matrices' (OJAS_QFUSE=0)
// tokens and logits bit for bit, its full forward within 1e-3 (exit 77
// without a device; OJAS_GPU_TEST_ON_CPU=1 runs the entry's tests on a CPU
// engine, a self-check of the tests)
#include "gpu_testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/gpt_decode_quant.h"
#include "models/gpt_internal.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/quant.h"
#include "ops/nn_decode.h"
#include "ops/nn_decode_quant.h"
#include "../unit/quant_testutil.h"

static bool on_cpu;

static const oj_qtype all_types[] = {OJ_Q8_0, OJ_Q4_0, OJ_Q4_1, OJ_Q4_K, OJ_FP8_E4M3};
#define NTYPES 5
#define NGGML 4 /* the first NTYPES with a GGUF (ggml) type; fp8 has none */

/* sum_j x[j] w[j] in f64 over K; *absxw the sum of |x[j] w[j]|. */
static double ref_dot(const float *x, const float *w, int64_t K, double *absxw) {
    double ref = 0, a = 0;
    for (int64_t j = 0; j < K; j++) {
        ref += (double)x[j] * w[j];
        a += fabs((double)x[j] * w[j]);
    }
    *absxw = a;
    return ref;
}

static void test_qmatmul_matches_cpu(void **state) {
    (void)state;
    oj_engine *cpu = gpu_test_engine(false, false, OJ_NUMERICS_FAST, 0);
    oj_engine *gpu = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 0);
    enum { N = 67, K = 512, MMAX = 33 };
    static float w[N * K], x[MMAX * K], wd[N * K], wg[N * K], y[MMAX * N];
    qt_fill(w, N * K, 3, 0.05f);
    qt_fill(x, MMAX * K, 4, 1.5f);
    const int64_t ms[] = {1, 3, 8, 9, 33};
    for (int ti = 0; ti < NTYPES; ti++) {
        oj_qtype t = all_types[ti];
        oj_scope_begin(cpu);
        oj_scope_begin(gpu);
        oj_qtensor *qc = oj_quantize(oj_from_host(cpu, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof w), t);
        assert_non_null(qc);
        assert_int_equal(oj_to_host(oj_dequantize(qc), wd, sizeof wd), OJ_OK);
        /* quantized on the device engine (on the host, then copied) and
         * from the CPU's blocks: both dequantize to the CPU's bits */
        oj_qtensor *qg = oj_quantize(oj_from_host(gpu, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof w), t);
        assert_non_null(qg);
        assert_null(oj_qtensor_data(qg)); /* device memory */
        assert_int_equal(oj_to_host(oj_dequantize(qg), wg, sizeof wg), OJ_OK);
        assert_memory_equal(wd, wg, sizeof wd);
        oj_qtensor *qb = oj_qtensor_from_blocks(gpu, t, N, K, oj_qtensor_data(qc),
                                                oj_qtensor_nbytes(qc));
        assert_non_null(qb);
        assert_int_equal(oj_to_host(oj_dequantize(qb), wg, sizeof wg), OJ_OK);
        assert_memory_equal(wd, wg, sizeof wd);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int64_t m = ms[mi];
            oj_tensor *xt = oj_from_host(gpu, 2, (int64_t[]){m, K}, OJ_F32, x,
                                         sizeof(float) * (size_t)(m * K));
            oj_tensor *yt = oj_qmatmul(xt, qb);
            if (yt == NULL) fail_msg("%s M %lld: %s", oj_qtype_name(t), (long long)m, oj_last_error(gpu));
            assert_int_equal(oj_to_host(yt, y, sizeof(float) * (size_t)(m * N)), OJ_OK);
            const bool gemv = m <= 8;
            for (int64_t r = 0; r < m; r++)
                for (int64_t i = 0; i < N; i++) {
                    double absxw;
                    const double ref = ref_dot(x + r * K, wd + i * K, K, &absxw);
                    /* GEMV: f32 products and sums (K / 32 + 32 roundings
                     * deep); GEMM: x, W and y each rounded to bf16 */
                    double bound = gemv ? (K / 32 + 40) * ldexp(1, -24) * absxw
                                        : 3 * ldexp(1, -8) * absxw + ldexp(1, -8) * fabs(ref);
                    double e = fabs(y[r * N + i] - ref);
                    if (!(e <= bound))
                        fail_msg("%s M %lld y[%lld, %lld] = %.9g, reference %.9g, error %g > %g",
                                 oj_qtype_name(t), (long long)m, (long long)r, (long long)i,
                                 y[r * N + i], ref, e, bound);
                }
        }
        /* the GEMV's sums in a fixed order: the same bits twice */
        oj_tensor *x1 = oj_from_host(gpu, 2, (int64_t[]){1, K}, OJ_F32, x, sizeof(float) * K);
        float a[N], b[N];
        assert_int_equal(oj_to_host(oj_qmatmul(x1, qb), a, sizeof a), OJ_OK);
        assert_int_equal(oj_to_host(oj_qmatmul(x1, qb), b, sizeof b), OJ_OK);
        assert_memory_equal(a, b, sizeof a);
        oj_qtensor_free(qb);
        oj_qtensor_free(qg);
        oj_qtensor_free(qc);
        assert_int_equal(oj_last_status(gpu), OJ_OK);
        oj_scope_end(gpu);
        oj_scope_end(cpu);
    }
    /* a device model's quantized tensors are not written to GGUF (the
     * writer reads host bytes) */
    oj_scope_begin(gpu);
    oj_qtensor *q = oj_quantize(oj_from_host(gpu, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof w), OJ_Q8_0);
    oj_gguf_writer *wr = oj_gguf_writer_new();
    oj_error err = {0};
    assert_int_equal(oj_gguf_writer_add_qtensor(wr, "w", q, &err), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "lives on a device"));
    oj_gguf_writer_free(wr);
    oj_qtensor_free(q);
    oj_scope_end(gpu);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    assert_int_equal(oj_engine_live_tensors(cpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* x [m, K] @ dequantize(W)^T on a FAST engine (the bandwidth GEMV,
 * k_qgemv_fast, where the rows are whole 16-byte chunks; else k_qgemv)
 * into y; NULL-safe: fails the test with the engine's error. */
static void qgemv_run(oj_engine *gpu, oj_qtensor *q, const float *x, int64_t m, int64_t K,
                      float *y, int64_t N) {
    oj_scope_begin(gpu);
    oj_tensor *xt = oj_from_host(gpu, 2, (int64_t[]){m, K}, OJ_F32, x, sizeof(float) * (size_t)(m * K));
    oj_tensor *yt = xt ? oj_qmatmul(xt, q) : NULL;
    if (yt == NULL) fail_msg("%s K %lld M %lld: %s", oj_qtype_name(oj_qtensor_type(q)), (long long)K,
                             (long long)m, oj_last_error(gpu));
    assert_int_equal(oj_to_host(yt, y, sizeof(float) * (size_t)(m * N)), OJ_OK);
    oj_scope_end(gpu);
}

/* The dequantizing GEMV on every type, M 1..8, odd N, K the smallest of
 * the type (32, fp8 and k_qgemv's q8_0 / q4_0 / q4_1; 256 for q4_k),
 * 256, 2048, 8192 and 16384 (x staged in shared memory at M 1, read through L1
 * at M 8), against the f64 product over the CPU's dequantized matrix:
 * |y - ref| <= (K / 32 + 48) 2^-24 sum |x w| (a block's 32 fused
 * multiply-adds, the lane's blocks, the scale's fma, 5 butterfly steps and
 * up to 8 parts: K / 32 + 47 roundings deep at most). The fast kernel's
 * bits are the same on every run and with 3 blocks walking all the tiles
 * (OJAS_CUDA_QGEMV_GRID=3: the order is fixed by K, not the grid) and
 * with x never staged (OJAS_CUDA_QGEMV_XS=0: read through L1 at every K
 * and M, the XS=false kernel) or staged when it fits (=1); they differ
 * from k_qgemv's (OJAS_CUDA_QGEMV_FAST=0) somewhere for each type (the
 * new kernel ran), and EXACT numerics gives k_qgemv's bits. fp8 runs twice:
 * through k_qgemv_fp8row (OJAS_CUDA_QGEMV_FP8ROW unset: a lane's K / 32
 * fused multiply-adds of e4m3(q) x, 5 butterfly steps, the row's scale
 * once, and the reference's own rounding of s e4m3(q): K / 32 + 7 deep,
 * inside the bound; its bits the same with two rows a warp (=2) and on
 * every run, and not k_qgemv_fast's everywhere) and through k_qgemv_fast
 * (=0), each checked as above. A wrong scale fails: at K 16384 the bound
 * is 3.3e-5 sum |x w| while |y| is about sum |x w| / sqrt(K), 7.8e-3 of
 * it, so a scale off by 1% (or a power of two) is caught. */
static void test_qgemv_fast(void **state) {
    (void)state;
    oj_engine *cpu = gpu_test_engine(false, false, OJ_NUMERICS_FAST, 0);
    oj_engine *gpu = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 0);
    oj_engine *gex = gpu_test_engine(true, false, OJ_NUMERICS_EXACT, 0);
    const int64_t Ks[] = {32, 256, 2048, 8192, 16384}, Ns[] = {67, 1001, 333, 45, 37};
    for (int ti = 0; ti < NTYPES; ti++) {
        const oj_qtype t = all_types[ti];
        bool differs = false, row_differs = false;
        for (int ki = 0; ki < 5; ki++) {
            const int64_t K = Ks[ki], N = Ns[ki];
            if (K % oj_qtype_block_elems(t)) continue;
            float *w = malloc(sizeof(float) * (size_t)(N * K)), *wd = malloc(sizeof(float) * (size_t)(N * K));
            float *x = malloc(sizeof(float) * (size_t)(8 * K));
            float *y = malloc(sizeof(float) * (size_t)(8 * N)), *y2 = malloc(sizeof(float) * (size_t)(8 * N));
            float *yr = malloc(sizeof(float) * (size_t)(8 * N));
            assert_true(w && wd && x && y && y2 && yr);
            qt_fill(w, N * K, 21 + (uint32_t)ki, 0.05f);
            qt_fill(x, 8 * K, 31 + (uint32_t)ki, 1.5f);
            oj_scope_begin(cpu);
            oj_qtensor *qc = oj_quantize(oj_from_host(cpu, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * (size_t)(N * K)), t);
            assert_non_null(qc);
            assert_int_equal(oj_to_host(oj_dequantize(qc), wd, sizeof(float) * (size_t)(N * K)), OJ_OK);
            oj_qtensor *qg = oj_qtensor_from_blocks(gpu, t, N, K, oj_qtensor_data(qc), oj_qtensor_nbytes(qc));
            oj_qtensor *qe = oj_qtensor_from_blocks(gex, t, N, K, oj_qtensor_data(qc), oj_qtensor_nbytes(qc));
            assert_non_null(qg);
            assert_non_null(qe);
            /* fp8: the row kernel (OJAS_CUDA_QGEMV_FP8ROW unset), then k_qgemv_fast (=0) */
            for (int64_t m = 1; m <= 8; m++)
                for (int fr = 0; fr < (t == OJ_FP8_E4M3 ? 2 : 1); fr++) {
                    if (fr) setenv("OJAS_CUDA_QGEMV_FP8ROW", "0", 1);
                    else unsetenv("OJAS_CUDA_QGEMV_FP8ROW");
                    qgemv_run(gpu, qg, x, m, K, y, N);
                    for (int64_t r = 0; r < m; r++)
                        for (int64_t i = 0; i < N; i++) {
                            double absxw;
                            const double ref = ref_dot(x + r * K, wd + i * K, K, &absxw);
                            const double bound = (double)(K / 32 + 48) * ldexp(1, -24) * absxw;
                            const double e = fabs(y[r * N + i] - ref);
                            if (!(e <= bound))
                                fail_msg("%s%s K %lld N %lld M %lld: y[%lld, %lld] = %.9g, reference %.9g, "
                                         "error %g > %g", oj_qtype_name(t), fr ? " (FP8ROW=0)" : "",
                                         (long long)K, (long long)N,
                                         (long long)m, (long long)r, (long long)i, y[r * N + i], ref, e, bound);
                        }
                    const size_t nb = sizeof(float) * (size_t)(m * N);
                    qgemv_run(gpu, qg, x, m, K, y2, N);
                    if (memcmp(y, y2, nb) != 0)
                        fail_msg("%s K %lld M %lld FP8ROW %s: two runs differ", oj_qtype_name(t), (long long)K,
                                 (long long)m, fr ? "0" : "unset");
                    if (t == OJ_FP8_E4M3 && !fr) { /* two rows a warp: each row's sum in the same order */
                        memcpy(yr, y, nb);
                        setenv("OJAS_CUDA_QGEMV_FP8ROW", "2", 1);
                        qgemv_run(gpu, qg, x, m, K, y2, N);
                        unsetenv("OJAS_CUDA_QGEMV_FP8ROW");
                        if (memcmp(y, y2, nb) != 0)
                            fail_msg("fp8 K %lld M %lld: OJAS_CUDA_QGEMV_FP8ROW=2 gives other bits", (long long)K,
                                     (long long)m);
                    }
                    if (fr) row_differs = row_differs || memcmp(yr, y, nb) != 0;
                    setenv("OJAS_CUDA_QGEMV_GRID", "3", 1);
                    qgemv_run(gpu, qg, x, m, K, y2, N);
                    unsetenv("OJAS_CUDA_QGEMV_GRID");
                    if (memcmp(y, y2, nb) != 0)
                        fail_msg("%s K %lld M %lld: 3 blocks give other bits", oj_qtype_name(t), (long long)K,
                                 (long long)m);
                    for (int xs = 0; xs < 2; xs++) {
                        setenv("OJAS_CUDA_QGEMV_XS", xs ? "1" : "0", 1);
                        qgemv_run(gpu, qg, x, m, K, y2, N);
                        unsetenv("OJAS_CUDA_QGEMV_XS");
                        if (memcmp(y, y2, nb) != 0)
                            fail_msg("%s K %lld M %lld: OJAS_CUDA_QGEMV_XS=%d gives other bits",
                                     oj_qtype_name(t), (long long)K, (long long)m, xs);
                    }
                    setenv("OJAS_CUDA_QGEMV_FAST", "0", 1);
                    qgemv_run(gpu, qg, x, m, K, y2, N);
                    unsetenv("OJAS_CUDA_QGEMV_FAST");
                    differs = differs || memcmp(y, y2, nb) != 0;
                    float *y3 = malloc(nb);
                    assert_non_null(y3);
                    qgemv_run(gex, qe, x, m, K, y3, N);
                    if (memcmp(y3, y2, nb) != 0)
                        fail_msg("%s K %lld M %lld: EXACT's bits are not k_qgemv's", oj_qtype_name(t),
                                 (long long)K, (long long)m);
                    free(y3);
                    unsetenv("OJAS_CUDA_QGEMV_FP8ROW");
                }
            oj_qtensor_free(qe);
            oj_qtensor_free(qg);
            oj_qtensor_free(qc);
            oj_scope_end(cpu);
            free(w);
            free(wd);
            free(x);
            free(y);
            free(y2);
            free(yr);
        }
        if (!differs) fail_msg("%s: k_qgemv_fast gave k_qgemv's bits everywhere (did it run?)", oj_qtype_name(t));
        if (t == OJ_FP8_E4M3 && !row_differs)
            fail_msg("fp8: k_qgemv_fp8row gave k_qgemv_fast's bits everywhere (did it run?)");
        print_message("%s: qgemv within (K / 32 + 48) 2^-24 sum |x w| of f64 at K 32..16384, M 1..8%s\n",
                      oj_qtype_name(t), t == OJ_FP8_E4M3 ? " (k_qgemv_fp8row and k_qgemv_fast)" : "");
    }
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    assert_int_equal(oj_engine_live_tensors(gex), 0);
    oj_engine_free(gex);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* Greedy tokens by full forwards on the CPU with grad on (the f32 weights,
 * which a GGUF load sets to the dequantized values); then the logits of
 * the whole sequence into logits [total, V]. */
static void cpu_greedy(oj_gpt *m, int32_t *seq, int prompt, int total, float *logits, int64_t V) {
    oj_engine *eng = oj_gpt_engine(m);
    bool prev = oj_set_grad_enabled(eng, true);
    for (int n = prompt; n <= total; n++) {
        oj_scope_begin(eng);
        oj_tensor *idx = oj_from_host(eng, 2, (int64_t[]){1, n}, OJ_I32, seq, sizeof(int32_t) * (size_t)n);
        oj_tensor *lg = oj_gpt_forward(m, idx); /* [1, n, V] */
        if (n == total) {
            assert_int_equal(oj_to_host(lg, logits, sizeof(float) * (size_t)(n * V)), OJ_OK);
        } else {
            oj_tensor *am = oj_argmax(lg, 2, false);
            int64_t best[64];
            assert_int_equal(oj_to_host(am, best, sizeof(int64_t) * (size_t)n), OJ_OK);
            seq[n] = (int32_t)best[n - 1];
        }
        oj_scope_end(eng);
    }
    oj_set_grad_enabled(eng, prev);
}

/* gpt2's head is tied to wte: the file's output.weight holds the quantized
 * head, token_embd the f32 rows. The CPU reference's f32 head (wte itself)
 * would then differ from the CUDA model's quantized one by the head's
 * quantization error; both models get wte := dequantize(output.weight)
 * (rows, host data), so the CPU's f32 head is the CUDA one's exact values
 * and the embeddings agree. */
static void tie_wte_to_head(oj_gpt *m, const float *rows, size_t nbytes) {
    oj_engine *eng = oj_gpt_engine(m);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    int64_t wi = -1;
    for (int64_t i = 0; i < sd.n; i++)
        if (strcmp(sd.names[i], "transformer.wte.weight") == 0) wi = i;
    assert_true(wi >= 0);
    bool prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_copy_from_host(sd.tensors[wi], rows, nbytes), OJ_OK);
    oj_set_grad_enabled(eng, prev);
}

static void test_quantized_gpt_decode(void **state) {
    (void)state;
    char dir[] = "/tmp/ojas_gpu_quant_XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (int fam = 0; fam < 2; fam++) {
        for (int ti = 0; ti < NGGML; ti++) {
            oj_gpt_config c;
            if (fam == 0) {
                assert_true(oj_gpt_preset("gpt2-tiny", &c));
                c.n_embd = 256;
                c.mlp_hidden = 512;
            } else {
                c = (oj_gpt_config){.family = OJ_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2,
                                    .n_embd = 256, .mlp_hidden = 512, .norm_eps = 1e-6,
                                    .rope_theta = 10000.0, .untied_head = true};
            }
            c.vocab_size = 96;
            c.block_size = 32;
            c.init_std = 0.2;
            oj_engine *cpu = gpu_test_engine(false, false, OJ_NUMERICS_FAST, 0);
            oj_gpt *m = NULL;
            assert_int_equal(oj_gpt_create(cpu, &c, 3, &m), OJ_OK);
            assert_int_equal(oj_gpt_quantize(m, all_types[ti]), OJ_OK);
            char path[300];
            snprintf(path, sizeof path, "%s/m%d%d.gguf", dir, fam, ti);
            oj_error err = {0};
            if (oj_gpt_save_gguf(m, NULL, path, "t", &err) != OJ_OK) fail_msg("%s", err.message);
            oj_gpt_free(m);
            oj_gpt *mc = NULL, *mg = NULL;
            if (oj_gpt_load_gguf(cpu, path, &mc, &err) != OJ_OK) fail_msg("%s", err.message);
            static float head[96 * 256];
            if (fam == 0) {
                oj_gguf *gf = NULL;
                assert_int_equal(oj_gguf_open(path, &gf, &err), OJ_OK);
                oj_qtensor *qh = oj_gguf_qtensor(gf, cpu, "output.weight");
                assert_non_null(qh);
                oj_scope_begin(cpu);
                assert_int_equal(oj_to_host(oj_dequantize(qh), head, sizeof head), OJ_OK);
                oj_scope_end(cpu);
                oj_qtensor_free(qh);
                oj_gguf_close(gf);
                tie_wte_to_head(mc, head, sizeof head);
            }
            enum { P = 6, TOTAL = 20, V = 96 };
            int32_t ref[TOTAL] = {1, 17, 4, 88, 30, 2};
            static float lref[TOTAL * V];
            cpu_greedy(mc, ref, P, TOTAL, lref, V);
            for (int graph = 0; graph < 2; graph++) {
                /* EXACT: the f32 GEMMs around the quantized ones in full f32
                 * (FAST would use TF32 tensor cores) */
                oj_engine *gpu = gpu_test_engine(true, false, OJ_NUMERICS_EXACT, 0);
                if (oj_gpt_load_gguf(gpu, path, &mg, &err) != OJ_OK) fail_msg("%s", err.message);
                assert_int_equal(oj_gpt_quantized_type(mg), all_types[ti]);
                if (fam == 0) tie_wte_to_head(mg, head, sizeof head);
                oj_gpt_decoder *d = NULL;
                if (oj_gpt_decoder_create(mg, TOTAL, graph == 1, &d) != OJ_OK)
                    fail_msg("decoder: %s", oj_last_error(gpu));
                int32_t seq[TOTAL];
                memcpy(seq, ref, sizeof(int32_t) * P);
                if (oj_gpt_decoder_prefill(d, seq, P, &seq[P]) != OJ_OK)
                    fail_msg("prefill: %s", oj_last_error(gpu));
                for (int i = P + 1; i < TOTAL; i++)
                    if (oj_gpt_decoder_step(d, &seq[i]) != OJ_OK)
                        fail_msg("step: %s", oj_last_error(gpu));
                /* The same tokens; where they part, the two must be a near tie
                 * of the CPU's logits at that step (the CUDA sums differ from
                 * the CPU's in order and use fused multiply-adds), and the
                 * sequences are compared no further. */
                int same = P;
                while (same < TOTAL && seq[same] == ref[same]) same++;
                if (same < TOTAL) {
                    const float *l = lref + (int64_t)(same - 1) * V;
                    float lo = l[0], hi = l[0];
                    for (int v = 1; v < V; v++) lo = l[v] < lo ? l[v] : lo, hi = l[v] > hi ? l[v] : hi;
                    const float gap = l[ref[same]] - l[seq[same]], tol = 1e-3f * (hi - lo);
                    print_message("%s %s%s: tokens equal to position %d, then %d on CUDA, %d on "
                                  "the CPU (logit gap %g, tie tolerance %g)\n",
                                  fam ? "llama" : "gpt2", oj_qtype_name(all_types[ti]),
                                  graph ? " (graph)" : "", same, seq[same], ref[same], gap, tol);
                    if (!(gap <= tol))
                        fail_msg("%s %s%s: token %d is %d on CUDA, %d on the CPU, whose logit is "
                                 "higher by %g (> %g: not a tie)",
                                 fam ? "llama" : "gpt2", oj_qtype_name(all_types[ti]),
                                 graph ? " (graph)" : "", same, seq[same], ref[same], gap, tol);
                }
                oj_gpt_decoder_free(d);
                oj_gpt_free(mg);
                assert_int_equal(oj_engine_live_tensors(gpu), 0);
                oj_engine_free(gpu);
            }
            oj_gpt_free(mc);
            oj_engine_free(cpu);
            unlink(path);
        }
    }
    rmdir(dir);
}

/* A device tensor of dtype dt from host floats (cast on the device); the
 * values it holds back in v (rounded to dt). */
static oj_tensor *dev_vec(oj_engine *e, int rank, const int64_t *shape, oj_dtype dt, float *v,
                          int64_t n) {
    oj_tensor *f = oj_from_host(e, rank, shape, OJ_F32, v, sizeof(float) * (size_t)n);
    oj_tensor *t = f && dt != OJ_F32 ? oj_cast(f, dt) : f;
    if (t == NULL) fail_msg("dev_vec: %s", oj_last_error(e));
    oj_tensor *back = dt != OJ_F32 ? oj_cast(t, OJ_F32) : t;
    assert_int_equal(oj_to_host(back, v, sizeof(float) * (size_t)n), OJ_OK);
    return t;
}

/* t (any float dtype) as host floats (malloc'd). */
static float *host_f32(oj_tensor *t) {
    oj_engine *e = oj_tensor_engine(t);
    oj_tensor *f = oj_tensor_dtype(t) == OJ_F32 ? t : oj_cast(t, OJ_F32);
    if (f == NULL) fail_msg("host_f32: %s", oj_last_error(e));
    const int64_t n = oj_numel(f);
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_int_equal(oj_to_host(f, h, sizeof(float) * (size_t)n), OJ_OK);
    return h;
}

enum { EPI_PLAIN, EPI_GELU, EPI_RESID };

/* One call of the quantized decode entry against a double reference over
 * the CPU's dequantized matrix: W [N, K] of type t, the row x in dtype
 * dt, with the layer norm (epi plain / GELU) or the residual add, a bias
 * or none, and (kv) the keys and values of a gpt2 attention projection
 * (N = 3 K, 12 heads) written at slot 3 of an 8-slot cache. */
static void qlinear_case(oj_engine *gpu, oj_engine *cpu, oj_qtype t, oj_dtype dt, int64_t K,
                         int64_t N, int epi, bool bias, bool kv) {
    oj_scope_begin(gpu);
    oj_scope_begin(cpu);
    float *w = malloc(sizeof(float) * (size_t)(N * K)), *wd = malloc(sizeof(float) * (size_t)(N * K));
    float *x = malloc(sizeof(float) * (size_t)K), *nw = malloc(sizeof(float) * (size_t)K);
    float *nb = malloc(sizeof(float) * (size_t)K), *b = malloc(sizeof(float) * (size_t)N);
    float *x0 = malloc(sizeof(float) * (size_t)N);
    qt_fill(w, N * K, 5, 0.05f);
    qt_fill(x, K, 6, 2.0f);
    qt_fill(nw, K, 7, 0.5f);
    for (int64_t k = 0; k < K; k++) nw[k] += 1.0f;
    qt_fill(nb, K, 8, 0.3f);
    qt_fill(b, N, 9, 0.5f);
    qt_fill(x0, N, 10, 1.0f);
    oj_qtensor *qc = oj_quantize(oj_from_host(cpu, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * (size_t)(N * K)), t);
    assert_non_null(qc);
    assert_int_equal(oj_to_host(oj_dequantize(qc), wd, sizeof(float) * (size_t)(N * K)), OJ_OK);
    oj_qtensor *qg = oj_qtensor_from_blocks(gpu, t, N, K, oj_qtensor_data(qc), oj_qtensor_nbytes(qc));
    assert_non_null(qg);
    assert_true(oj__decode_qweight_ok(qg));
    const bool resid = epi == EPI_RESID;
    oj_tensor *xt = dev_vec(gpu, 3, (int64_t[]){1, 1, K}, dt, x, K);
    oj_tensor *nwt = resid ? NULL : dev_vec(gpu, 1, (int64_t[]){K}, dt, nw, K);
    oj_tensor *nbt = resid ? NULL : dev_vec(gpu, 1, (int64_t[]){K}, dt, nb, K);
    oj_tensor *bt = bias ? dev_vec(gpu, 1, (int64_t[]){N}, dt, b, N) : NULL;
    const int64_t H = 12, S = 8, D = K / H, slot = 3;
    oj_tensor *kvt = NULL, *st = NULL;
    if (kv) {
        kvt = oj_zeros(gpu, 5, (int64_t[]){2, 1, H, S, D}, dt);
        st = oj_from_host(gpu, 1, (int64_t[]){1}, OJ_I64, &(int64_t){slot}, sizeof(int64_t));
    }
    oj_tensor *out;
    if (resid) {
        out = dev_vec(gpu, 3, (int64_t[]){1, 1, N}, dt, x0, N);
        if (oj__decode_qlinear_residual_(out, xt, qg, bt) != OJ_OK)
            fail_msg("%s %s residual: %s", oj_qtype_name(t), oj_dtype_name(dt), oj_last_error(gpu));
    } else {
        out = oj__decode_qnorm_linear(xt, nwt, nbt, 1e-5, qg, bt,
                                      epi == EPI_GELU ? OJ__DECODE_ACT_GELU : OJ__DECODE_ACT_NONE,
                                      kvt, st);
        if (out == NULL)
            fail_msg("%s %s norm_linear: %s", oj_qtype_name(t), oj_dtype_name(dt), oj_last_error(gpu));
        assert_int_equal(oj_tensor_dtype(out), dt);
    }
    float *got = host_f32(out);
    /* the reference in double: u = layer_norm(x) (unrounded), v = u W^T + b */
    double *u = malloc(sizeof(double) * (size_t)K);
    double mean = 0, var = 0;
    for (int64_t k = 0; k < K; k++) mean += x[k];
    mean /= (double)K;
    for (int64_t k = 0; k < K; k++) var += (x[k] - mean) * (x[k] - mean);
    const double rstd = 1.0 / sqrt(var / (double)K + 1e-5);
    for (int64_t k = 0; k < K; k++) u[k] = resid ? x[k] : (x[k] - mean) * rstd * nw[k] + nb[k];
    /* f32: sums in another order (and the norm's statistics in f32);
     * bf16: u, v, the GELU and the sum rounded to 8 bits each */
    const double rel = dt == OJ_F32 ? 1e-4 : ldexp(1, -7);
    for (int64_t n = 0; n < N; n++) {
        double v = bias ? b[n] : 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; k++) {
            v += u[k] * wd[n * K + k];
            mag += fabs(u[k] * wd[n * K + k]);
        }
        double ref = v, tol = rel * (mag + fabs(v) + (bias ? fabs(b[n]) : 0.0)) + 1e-6;
        if (epi == EPI_GELU) ref = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        if (resid) {
            ref = x0[n] + v;
            tol += rel * fabs(x0[n]);
        }
        if (!(fabs(got[n] - ref) <= tol))
            fail_msg("%s %s K %lld N %lld epi %d: out[%lld] = %.9g, reference %.9g (tolerance %g)",
                     oj_qtype_name(t), oj_dtype_name(dt), (long long)K, (long long)N, epi,
                     (long long)n, got[n], ref, tol);
    }
    if (kv) { /* columns C .. 3C at the slot, bit for bit; every other slot still 0 */
        float *kh = host_f32(kvt);
        for (int64_t which = 0; which < 2; which++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t s = 0; s < S; s++)
                    for (int64_t d = 0; d < D; d++) {
                        const float e = s == slot ? got[K + which * K + h * D + d] : 0.0f;
                        const float g = kh[((which * H + h) * S + s) * D + d];
                        if (memcmp(&e, &g, sizeof e) != 0)
                            fail_msg("%s %s kv[%lld, 0, %lld, %lld, %lld] = %g, expected %g",
                                     oj_qtype_name(t), oj_dtype_name(dt), (long long)which,
                                     (long long)h, (long long)s, (long long)d, g, e);
                    }
        free(kh);
    }
    free(got);
    free(u);
    oj_qtensor_free(qg);
    oj_qtensor_free(qc);
    free(w);
    free(wd);
    free(x);
    free(nw);
    free(nb);
    free(b);
    free(x0);
    assert_int_equal(oj_last_status(gpu), OJ_OK);
    oj_scope_end(cpu);
    oj_scope_end(gpu);
}

/* The quantized decode entry (decode_qlinear) for every type, f32 and
 * bf16 rows, gpt2 124M's four shapes and a head-like one (many rows a
 * block, a partial last block, no bias), against the double reference. */
static void test_decode_qlinear_entry(void **state) {
    (void)state;
    oj_engine *cpu = gpu_test_engine(false, false, OJ_NUMERICS_FAST, 0);
    oj_engine *gpu = gpu_test_engine(true, on_cpu, OJ_NUMERICS_FAST, 0);
    oj_set_grad_enabled(gpu, false);
    const oj_dtype dts[] = {OJ_F32, OJ_BF16};
    for (int ti = 0; ti < NTYPES; ti++)
        for (int di = 0; di < 2; di++) {
            const oj_qtype t = all_types[ti];
            const oj_dtype dt = dts[di];
            qlinear_case(gpu, cpu, t, dt, 768, 2304, EPI_PLAIN, true, true); /* c_attn + KV */
            qlinear_case(gpu, cpu, t, dt, 768, 768, EPI_RESID, true, false);  /* attn c_proj */
            qlinear_case(gpu, cpu, t, dt, 768, 3072, EPI_GELU, true, false);  /* c_fc */
            qlinear_case(gpu, cpu, t, dt, 3072, 768, EPI_RESID, true, false); /* mlp c_proj */
            qlinear_case(gpu, cpu, t, dt, 256, 5003, EPI_PLAIN, false, false); /* a head */
        }
    /* refusals name what was wrong: a row that is not whole 16-byte
     * chunks (q8_0 with K 32: 34 bytes), an x of another dtype */
    oj_scope_begin(gpu);
    float w[4 * 32];
    qt_fill(w, 4 * 32, 1, 1.0f);
    oj_qtensor *q = oj_quantize(oj_from_host(gpu, 2, (int64_t[]){4, 32}, OJ_F32, w, sizeof w), OJ_Q8_0);
    assert_non_null(q);
    assert_false(oj__decode_qweight_ok(q));
    oj_tensor *x = oj_zeros(gpu, 3, (int64_t[]){1, 1, 32}, OJ_F32);
    assert_null(oj__decode_qnorm_linear(x, NULL, NULL, 1e-5, q, NULL, 0, NULL, NULL));
    assert_int_equal(oj_last_status(gpu), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(gpu), "rows of a multiple of 16 bytes"));
    oj_clear_error(gpu);
    oj_qtensor_free(q);
    float w2[2 * 256];
    qt_fill(w2, 2 * 256, 2, 1.0f);
    q = oj_quantize(oj_from_host(gpu, 2, (int64_t[]){2, 256}, OJ_F32, w2, sizeof w2), OJ_Q8_0);
    assert_non_null(q);
    assert_true(oj__decode_qweight_ok(q));
    x = oj_zeros(gpu, 3, (int64_t[]){1, 1, 256}, OJ_F32);
    oj_tensor *b16 = oj_zeros(gpu, 1, (int64_t[]){2}, OJ_BF16);
    assert_null(oj__decode_qnorm_linear(x, NULL, NULL, 1e-5, q, b16, 0, NULL, NULL));
    assert_int_equal(oj_last_status(gpu), OJ_ERR_DTYPE);
    assert_non_null(strstr(oj_last_error(gpu), "b is bf16, the row f32"));
    oj_clear_error(gpu);
    oj_qtensor_free(q);
    oj_scope_end(gpu);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    assert_int_equal(oj_engine_live_tensors(cpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

/* The row loop (OJAS_DECODE_QLOOP=1) and the pair loop with dq_dotx (2)
 * against the default pair loop, and decode_qnorm_head against
 * decode_qlinear, every type, f32 and bf16,
 * shapes that give R 32 (a head of 8461 rows: 265 blocks, a partial
 * last one), 8, 2 (two warps a row) and 1 (four): the same bits; the
 * head's token is the argmax of its logits (lowest id on ties), pos + 1,
 * hist[pos] = tok. */
static void test_decode_qloop_and_head(void **state) {
    (void)state;
    oj_engine *gpu = gpu_test_engine(true, on_cpu, OJ_NUMERICS_FAST, 0);
    oj_set_grad_enabled(gpu, false);
    const oj_dtype dts[] = {OJ_F32, OJ_BF16};
    const int64_t shapes[][2] = {{768, 8461}, {768, 2304}, {3072, 768}, {768, 300}}; /* K, N */
    for (int ti = 0; ti < NTYPES; ti++)
        for (int di = 0; di < 2; di++)
            for (int si = 0; si < 4; si++) {
                const oj_qtype t = all_types[ti];
                const oj_dtype dt = dts[di];
                const int64_t K = shapes[si][0], N = shapes[si][1];
                oj_scope_begin(gpu);
                float *w = malloc(sizeof(float) * (size_t)(N * K));
                float hx[3072], hg[3072], hb[3072];
                assert_non_null(w);
                qt_fill(w, N * K, 11 + ti, 0.5f);
                qt_fill(hx, K, 12, 2.0f);
                qt_fill(hg, K, 13, 0.5f);
                qt_fill(hb, K, 14, 0.5f);
                for (int64_t k = 0; k < K; k++) hg[k] += 1.0f;
                oj_tensor *wt = oj_from_host(gpu, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof(float) * (size_t)(N * K));
                free(w);
                oj_qtensor *q = oj_quantize(wt, t);
                assert_non_null(q);
                oj_tensor *x = oj_cast(oj_from_host(gpu, 3, (int64_t[]){1, 1, K}, OJ_F32, hx, sizeof(float) * (size_t)K), dt);
                oj_tensor *nw = oj_cast(oj_from_host(gpu, 1, (int64_t[]){K}, OJ_F32, hg, sizeof(float) * (size_t)K), dt);
                oj_tensor *nb = oj_cast(oj_from_host(gpu, 1, (int64_t[]){K}, OJ_F32, hb, sizeof(float) * (size_t)K), dt);
                oj_tensor *y0 = oj__decode_qnorm_linear(x, nw, nb, 1e-5, q, NULL, 0, NULL, NULL);
                oj_tensor *r0 = oj__decode_qnorm_linear(x, NULL, NULL, 0.0, q, NULL, OJ__DECODE_ACT_GELU, NULL, NULL);
                setenv("OJAS_DECODE_QLOOP", "1", 1);
                oj_tensor *y1 = oj__decode_qnorm_linear(x, nw, nb, 1e-5, q, NULL, 0, NULL, NULL);
                oj_tensor *r1 = oj__decode_qnorm_linear(x, NULL, NULL, 0.0, q, NULL, OJ__DECODE_ACT_GELU, NULL, NULL);
                setenv("OJAS_DECODE_QLOOP", "2", 1);
                oj_tensor *y3 = oj__decode_qnorm_linear(x, nw, nb, 1e-5, q, NULL, 0, NULL, NULL);
                oj_tensor *r3 = oj__decode_qnorm_linear(x, NULL, NULL, 0.0, q, NULL, OJ__DECODE_ACT_GELU, NULL, NULL);
                unsetenv("OJAS_DECODE_QLOOP");
                int64_t p0 = 3;
                oj_tensor *tok = oj_zeros(gpu, 1, (int64_t[]){1}, OJ_I64);
                oj_tensor *pos = oj_from_host(gpu, 1, (int64_t[]){1}, OJ_I64, &p0, sizeof p0);
                oj_tensor *hist = oj_zeros(gpu, 1, (int64_t[]){8}, OJ_I64);
                oj_tensor *y2 = oj__decode_qnorm_head(x, nw, nb, 1e-5, q, tok, pos, hist);
                if (!y0 || !r0 || !y1 || !r1 || !y2 || !y3 || !r3) fail_msg("%s", oj_last_error(gpu));
                float *a = malloc(sizeof(float) * (size_t)N * 7);
                assert_non_null(a);
                oj_tensor *ys[7] = {y0, y1, y2, r0, r1, y3, r3};
                for (int i = 0; i < 7; i++)
                    assert_int_equal(oj_to_host(oj_cast(ys[i], OJ_F32), a + (int64_t)i * N, sizeof(float) * (size_t)N), OJ_OK);
                int64_t best = 0;
                for (int64_t n = 0; n < N; n++) {
                    if (a[n] != a[N + n] || a[N + n] != a[2 * N + n] || a[n] != a[5 * N + n] ||
                        a[3 * N + n] != a[4 * N + n] || a[3 * N + n] != a[6 * N + n])
                        fail_msg("%s %s K %lld N %lld row %lld: pair loop %g, row loop %g, head %g, "
                                 "pairs + dq_dotx %g; no norm + GELU: pair loop %g, row loop %g, "
                                 "pairs + dq_dotx %g",
                                 oj_qtype_name(t), oj_dtype_name(dt), (long long)K, (long long)N,
                                 (long long)n, a[n], a[N + n], a[2 * N + n], a[5 * N + n],
                                 a[3 * N + n], a[4 * N + n], a[6 * N + n]);
                    if (a[N + n] > a[N + best]) best = n;
                }
                int64_t tk = -1, ps = 0, h[8];
                assert_int_equal(oj_to_host(tok, &tk, sizeof tk), OJ_OK);
                assert_int_equal(oj_to_host(pos, &ps, sizeof ps), OJ_OK);
                assert_int_equal(oj_to_host(hist, h, sizeof h), OJ_OK);
                assert_int_equal(tk, best);
                assert_int_equal(ps, p0 + 1);
                for (int i = 0; i < 8; i++) assert_int_equal(h[i], i == p0 + 1 ? best : 0);
                free(a);
                oj_qtensor_free(q);
                oj_scope_end(gpu);
            }
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

/* Greedy decode of m with a graph: toks[0..steps] (toks[0] the prefill's)
 * and each step's logits [V] into lg (steps + 1 rows). */
static void decode_run(oj_gpt *m, const int32_t *prompt, int n, int steps, int32_t *toks,
                       float *lg, int64_t V) {
    oj_engine *e = oj_gpt_engine(m);
    oj_gpt_decoder *d = NULL;
    if (oj_gpt_decoder_create(m, n + steps + 1, true, &d) != OJ_OK)
        fail_msg("decoder: %s", oj_last_error(e));
    if (oj_gpt_decoder_prefill(d, prompt, n, &toks[0]) != OJ_OK)
        fail_msg("prefill: %s", oj_last_error(e));
    for (int s = 0; s <= steps; s++) {
        if (s > 0 && oj_gpt_decoder_step(d, &toks[s]) != OJ_OK)
            fail_msg("step %d: %s", s, oj_last_error(e));
        oj_tensor *l = oj_gpt_decoder_logits(d);
        oj_scope_begin(e);
        oj_tensor *f = oj_tensor_dtype(l) == OJ_F32 ? l : oj_cast(l, OJ_F32);
        assert_int_equal(oj_to_host(f, lg + (int64_t)s * V, sizeof(float) * (size_t)V), OJ_OK);
        oj_scope_end(e);
    }
    oj_gpt_decoder_free(d);
}

/* The quantized fast step against the generic quantized step
 * (OJAS_DECODE_FAST=0) on a gpt2 with 124M's widths (C 768, MLP 3072, V
 * 50257, 12 heads; 4 layers), f32 around the matrices, CUDA graphs: the
 * same 128 greedy tokens, logits within 1e-3 of the largest magnitude of
 * the step's (f32 sums in another order: the scale applied once a block,
 * the norm fused), for q8_0, q4_0, q4_1, q4_k and fp8. */
static void test_quantized_fast_step(void **state) {
    (void)state;
    oj_engine *gpu = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 0);
    oj_gpt_config c;
    assert_true(oj_gpt_preset("gpt2-124m", &c));
    c.n_layer = 4;
    c.block_size = 160;
    c.init_std = 0.2;
    oj_gpt *m = NULL;
    if (oj_gpt_create(gpu, &c, 7, &m) != OJ_OK) fail_msg("create: %s", oj_last_error(gpu));
    enum { P = 8, STEPS = 128 };
    const int64_t V = c.vocab_size;
    int32_t prompt[P], ta[STEPS + 1], tb[STEPS + 1];
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    float *la = malloc(sizeof(float) * (size_t)((STEPS + 1) * V));
    float *lb = malloc(sizeof(float) * (size_t)((STEPS + 1) * V));
    assert_non_null(la);
    assert_non_null(lb);
    for (int ti = 0; ti < NTYPES; ti++) {
        const oj_qtype t = all_types[ti];
        if (oj_gpt_quantize(m, t) != OJ_OK) fail_msg("quantize: %s", oj_last_error(gpu));
        oj_kv_cache *kc = NULL;
        assert_int_equal(oj_kv_cache_create(m, 1, 8, &kc), OJ_OK);
        assert_true(oj__gpt_qfast_decode_ok(m, kc));
        setenv("OJAS_DECODE_FAST", "0", 1);
        assert_false(oj__gpt_fast_decode_ok(m, kc));
        decode_run(m, prompt, P, STEPS, ta, la, V); /* the generic step */
        unsetenv("OJAS_DECODE_FAST");
        assert_true(oj__gpt_fast_decode_ok(m, kc)); /* by default on CUDA */
        oj_kv_cache_free(kc);
        decode_run(m, prompt, P, STEPS, tb, lb, V); /* the fast step */
        bool differs = false;
        for (int s = 0; s <= STEPS; s++) {
            const float *x = lb + (int64_t)s * V, *y = la + (int64_t)s * V;
            double scale = 1.0, worst = 0.0;
            int64_t wi = 0;
            for (int64_t i = 0; i < V; i++) scale = fmax(scale, fabs(y[i]));
            for (int64_t i = 0; i < V; i++) {
                const double e = fabs((double)x[i] - y[i]);
                if (!(e <= worst)) worst = e, wi = i;
                differs = differs || x[i] != y[i];
            }
            if (!(worst <= 1e-3 * scale))
                fail_msg("%s step %d: logit %lld fast %g, generic %g (largest |logit| %g)",
                         oj_qtype_name(t), s, (long long)wi, x[wi], y[wi], scale);
            if (ta[s] != tb[s])
                fail_msg("%s step %d: token %d on the fast step, %d on the generic (logits %g "
                         "and %g there)", oj_qtype_name(t), s, tb[s], ta[s], y[tb[s]], y[ta[s]]);
        }
        assert_true(differs); /* the fast step ran: its sums round differently somewhere */
        print_message("%s: fast step's %d greedy tokens equal the generic step's\n",
                      oj_qtype_name(t), STEPS);
    }
    free(la);
    free(lb);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

/* A quantized llama (GQA, C 256, MLP 512) under FAST on the device, each
 * type: the blocks' stacked q/k/v and gate/up (the default) against the
 * separate matrices (OJAS_QFUSE=0): the decoder's greedy tokens and step
 * logits (GEMVs, prompt of 8 rows then 1) the same bits, the full
 * forward's logits (prefill's GEMM over the dequantized stack) within
 * 1e-3 of their largest magnitude. */
static void test_llama_qfuse(void **state) {
    (void)state;
    oj_engine *gpu = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 0);
    const oj_gpt_config c = {.family = OJ_LLAMA, .vocab_size = 96, .block_size = 64,
                             .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 256,
                             .mlp_hidden = 512, .norm_eps = 1e-6, .rope_theta = 10000.0,
                             .init_std = 0.2, .untied_head = true};
    enum { P = 8, STEPS = 24, V = 96, BT = 2 * 12 };
    const int32_t prompt[P] = {3, 17, 42, 8, 90, 1, 64, 5};
    int32_t ids[BT];
    for (int i = 0; i < BT; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    static float lg[2][(STEPS + 1) * V], fw[2][BT * V];
    int32_t toks[2][STEPS + 1];
    for (int ti = 0; ti < NTYPES; ti++) {
        for (int apart = 0; apart < 2; apart++) {
            if (apart) setenv("OJAS_QFUSE", "0", 1);
            oj_gpt *m = NULL;
            assert_int_equal(oj_gpt_create(gpu, &c, 5, &m), OJ_OK);
            if (oj_gpt_quantize(m, all_types[ti]) != OJ_OK)
                fail_msg("quantize: %s", oj_last_error(gpu));
            unsetenv("OJAS_QFUSE");
            for (int64_t l = 0; l < c.n_layer; l++)
                assert_true((m->blocks[l].qqkv != NULL) == !apart &&
                            (m->blocks[l].qgate_up != NULL) == !apart);
            const bool grad = oj_set_grad_enabled(gpu, false); /* products fused: grad off */
            assert_true(oj__gpt_qfused(m, m->blocks[0].qqkv) == !apart);
            oj_set_grad_enabled(gpu, grad);
            decode_run(m, prompt, P, STEPS, toks[apart], lg[apart], V);
            oj_scope_begin(gpu);
            const bool prev = oj_set_grad_enabled(gpu, false);
            oj_tensor *idx = oj_from_host(gpu, 2, (int64_t[]){2, 12}, OJ_I32, ids, sizeof ids);
            oj_tensor *l = oj_gpt_forward(m, idx);
            if (l == NULL) fail_msg("forward: %s", oj_last_error(gpu));
            if (oj_tensor_dtype(l) != OJ_F32) l = oj_cast(l, OJ_F32);
            assert_int_equal(oj_to_host(l, fw[apart], sizeof fw[apart]), OJ_OK);
            oj_set_grad_enabled(gpu, prev);
            oj_scope_end(gpu);
            oj_gpt_free(m);
        }
        for (int s = 0; s <= STEPS; s++) {
            if (toks[0][s] != toks[1][s])
                fail_msg("%s step %d: token %d stacked, %d apart", oj_qtype_name(all_types[ti]), s,
                         toks[0][s], toks[1][s]);
            for (int i = 0; i < V; i++)
                if (memcmp(&lg[0][s * V + i], &lg[1][s * V + i], sizeof(float)) != 0)
                    fail_msg("%s step %d logit %d: %.9g stacked, %.9g apart",
                             oj_qtype_name(all_types[ti]), s, i, lg[0][s * V + i], lg[1][s * V + i]);
        }
        double scale = 1.0, worst = 0.0;
        for (int i = 0; i < BT * V; i++) scale = fmax(scale, fabs(fw[1][i]));
        for (int i = 0; i < BT * V; i++) worst = fmax(worst, fabs((double)fw[0][i] - fw[1][i]));
        if (!(worst <= 1e-3 * scale))
            fail_msg("%s forward: stacked and apart differ by %g (largest |logit| %g)",
                     oj_qtype_name(all_types[ti]), worst, scale);
        print_message("%s: stacked = apart: %d decode steps' bits; forward within %.3g\n",
                      oj_qtype_name(all_types[ti]), STEPS, worst);
    }
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
}

int main(void) {
    if (gpu_test_probe(true, &on_cpu) != 0) return 77;
    if (on_cpu) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_decode_qlinear_entry),
                                           cmocka_unit_test(test_decode_qloop_and_head)};
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
    /* OJAS_GPU_TEST_FILTER: a cmocka name pattern (say *qgemv*) */
    if (getenv("OJAS_GPU_TEST_FILTER")) cmocka_set_test_filter(getenv("OJAS_GPU_TEST_FILTER"));
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_qmatmul_matches_cpu),
                                       cmocka_unit_test(test_qgemv_fast),
                                       cmocka_unit_test(test_quantized_gpt_decode),
                                       cmocka_unit_test(test_decode_qlinear_entry),
                                       cmocka_unit_test(test_decode_qloop_and_head),
                                       cmocka_unit_test(test_quantized_fast_step),
                                       cmocka_unit_test(test_llama_qfuse)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
