// test: quantized weights on CUDA (q8_0, q4_0, q4_1, q4_k) against the CPU:
// the same matrix quantized on either engine dequantizes to the same bits;
// oj_qmatmul's dequantizing GEMV (1..8 rows) within f32 summation error of
// x @ dequantize(W)^T (f64 reference from the CPU's dequantized matrix), its
// prefill path (more rows: bf16 GEMM over the dequantized matrix) within
// bf16 rounding; a quantized GPT (gpt2 and llama, loaded from a GGUF file
// written on the CPU) decodes on CUDA to the greedy tokens of the CPU's
// f32 forward over the same dequantized weights, with and without a CUDA
// graph, up to a near tie of the CPU's logits (exit 77 without a device)
#include "gpu_testutil.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/quant.h"
#include "../unit/quant_testutil.h"

static const oj_qtype all_types[] = {OJ_Q8_0, OJ_Q4_0, OJ_Q4_1, OJ_Q4_K};
#define NTYPES 4

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
                    double ref = 0, absxw = 0;
                    for (int64_t j = 0; j < K; j++) {
                        ref += (double)x[r * K + j] * wd[i * K + j];
                        absxw += fabs((double)x[r * K + j] * wd[i * K + j]);
                    }
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
        for (int ti = 0; ti < NTYPES; ti++) {
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

int main(void) {
    if (gpu_test_probe(false, NULL) != 0) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_qmatmul_matches_cpu),
                                       cmocka_unit_test(test_quantized_gpt_decode)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
