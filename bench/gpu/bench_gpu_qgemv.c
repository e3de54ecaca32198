/* GPU microbenchmark of the dequantizing GEMV (the backend's qgemv entry:
 * out [M, N] f32 = x [M, K] f32 @ W^T, W quantized): the bandwidth kernel
 * (k_qgemv_fast, OJAS_CUDA_QGEMV_FAST=1, the default under FAST numerics)
 * against the one-warp-a-row kernel (=0, k_qgemv) for q8_0, q4_0, q4_1,
 * q4_k and fp8, and for fp8 the row kernel (k_qgemv_fp8row, the default
 * under FAST: "row" lines; "new" is k_qgemv_fast, OJAS_CUDA_QGEMV_FP8ROW=0;
 * the row way runs with the caller's OJAS_CUDA_QGEMV_FP8ROW when it is set
 * and not "0", e.g. 2: two rows a warp), on llama3.2-1b's shapes (K 2048: N 2048 q/o, 512 k/v, 8192
 * gate/up, 128256 head; K 8192 N 2048 down) and GPT-2 124M's (K 768: N
 * 2304, 768, 3072, 50257; K 3072 N 768), M 1 and 4.
 *
 * Weights: random blocks (f16 scales in [2^-10, 2^-5), random quants; fp8
 * without its NaN codes), in as many device copies as make >= 64 MB (at
 * most 64: the smallest gpt2 matrices stay partly in the 50 MB L2), the
 * calls walking the copies, so that the matrix comes from HBM as in a
 * decode step. Time: each way, one call a copy captured into one CUDA
 * graph, replayed `reps` times alternating with the other way, wall time
 * around each replay (synchronised); the median per call, the weight
 * bytes per second and their fraction of HBM_GBS (default 4000).
 * Check: each way's output (copy 0) against the f64 product over the
 * dequantized rows (oj_dequantize_row) at 64 rows spread over N and the
 * last: |y - ref| <= (K / 32 + 48) 2^-24 sum |x w| (test_gpu_quant's
 * bound). ESTIMATE: llama3.2-1b's 16 layers (q, k, v, o, gate, up, down)
 * and the head, summed from the rows above, per token (fp8: also "row").
 * ROW lines (fp8): the row kernel's time, GB/s and fraction, and its
 * speed-up over "new".
 *
 * usage: bench_gpu_qgemv [reps (5)] [--quick: q4_0 and fp8, M 4 on llama's
 *                                    shapes only]
 * (77: no GPU; 1: a check failed) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "bench_gpu_common.h"
#include "ojas/ojas.h"
#include "quant/quant_internal.h"

static oj_engine *E;
static double BW_LIMIT = 4000.0;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static void die(const char *what) {
    fprintf(stderr, "bench_gpu_qgemv: %s: %s\n", what, oj_last_error(E));
    exit(2);
}

/* An f16 in [2^-10, 2^-5), either sign when `sign`. */
static void put_f16(uint8_t *p, bool sign) {
    uint64_t r = next_u64();
    uint16_t h = (uint16_t)(((5 + r % 5) << 10) | ((r >> 8) & 0x3ff));
    if (sign && (r >> 20 & 1)) h |= 0x8000;
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

/* Random blocks of n rows of k elements of type t (rb bytes a row). */
static void fill_blocks(oj_qtype t, uint8_t *b, int64_t n, int64_t k, size_t rb) {
    for (size_t i = 0; i + 8 <= (size_t)n * rb; i += 8) {
        uint64_t r = next_u64();
        memcpy(b + i, &r, 8);
    }
    for (int64_t row = 0; row < n; row++) {
        uint8_t *p = b + (size_t)row * rb;
        if (t == OJ_FP8_E4M3) {
            float s = 0.01f * (1.0f + (float)(next_u64() % 1000) / 1000.0f);
            memcpy(p, &s, 4);
            memset(p + 4, 0, 12);
            for (int64_t j = 0; j < k; j++)
                if ((p[16 + j] & 0x7f) == 0x7f) p[16 + j] ^= 1; /* no NaN codes */
            continue;
        }
        const size_t bb = oj_qtype_block_bytes(t);
        for (size_t o = 0; o < rb; o += bb) {
            put_f16(p + o, false);
            if (t == OJ_Q4_1 || t == OJ_Q4_K) put_f16(p + o + 2, t == OJ_Q4_1);
        }
    }
}

typedef struct {
    const char *name;
    int64_t K, N;
} shape;

static const shape SHAPES[] = {
    {"llama1b q/o", 2048, 2048},    {"llama1b k/v", 2048, 512},  {"llama1b gate/up", 2048, 8192},
    {"llama1b down", 8192, 2048},   {"llama1b head", 2048, 128256}, {"gpt2 c_attn", 768, 2304},
    {"gpt2 attn.c_proj", 768, 768}, {"gpt2 c_fc", 768, 3072},   {"gpt2 mlp.c_proj", 3072, 768},
    {"gpt2 head", 768, 50257},
};
#define NSHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

/* One way's output for copy 0 against the f64 reference at sampled rows;
 * prints the line, returns pass. */
static bool check(oj_qtype t, const shape *s, int64_t M, const uint8_t *hb, size_t rb,
                  const float *x, oj_tensor *out, const char *way) {
    float *y = malloc(sizeof(float) * (size_t)(M * s->N)), *wd = malloc(sizeof(float) * (size_t)s->K);
    if (!y || !wd || oj_to_host(out, y, sizeof(float) * (size_t)(M * s->N)) != OJ_OK) die("read back");
    double worst = 0.0;
    bool ok = true;
    for (int i = 0; i <= 64; i++) {
        const int64_t n = i == 64 ? s->N - 1 : (int64_t)i * s->N / 64;
        oj__dequantize_row(t, hb + (size_t)n * rb, s->K, wd);
        for (int64_t m = 0; m < M; m++) {
            double ref = 0, mag = 0;
            for (int64_t j = 0; j < s->K; j++) {
                ref += (double)x[m * s->K + j] * wd[j];
                mag += fabs((double)x[m * s->K + j] * wd[j]);
            }
            const double bound = (double)(s->K / 32 + 48) * ldexp(1, -24) * mag;
            const double e = fabs(y[m * s->N + n] - ref), r = bound > 0 ? e / bound : e;
            if (!(e <= bound)) ok = false;
            if (!(r <= worst)) worst = r;
        }
    }
    printf("%s check %-5s %-17s M %lld %-4s: worst error %.3f of the bound\n", ok ? "PASS" : "FAIL",
           oj_qtype_name(t), s->name, (long long)M, way, worst);
    free(y);
    free(wd);
    return ok;
}

static void run_qgemv(oj_qtensor *q, oj_tensor *x, oj_tensor *out) {
    if (E->backend->qgemv(E, out, x, q->blocks, (int)q->type, q->cols) != OJ_OK) die("qgemv");
}

/* The caller's OJAS_CUDA_QGEMV_FP8ROW (main: before the bench sets it). */
static char fp8row_env[32];

/* Times and checks one (type, shape, M); returns the median us per call
 * of each way in us[0] (old), us[1] (new) and, fp8, us[2] (row); *ok
 * cleared on a failed check. */
static void bench_one(oj_qtype t, const shape *s, int64_t M, int reps, double *us, bool *ok) {
    const size_t rb = oj_qtype_row_bytes(t, s->K), bytes = rb * (size_t)s->N;
    uint8_t *hb = malloc(bytes);
    float *hx = malloc(sizeof(float) * (size_t)(M * s->K));
    if (!hb || !hx) die("host memory");
    fill_blocks(t, hb, s->N, s->K, rb);
    for (int64_t i = 0; i < M * s->K; i++) hx[i] = (float)((int64_t)(next_u64() % 2001) - 1000) / 1000.0f;
    int copies = (int)((64e6 + (double)bytes - 1) / (double)bytes);
    if (copies > 64) copies = 64;
    if (copies < 1) copies = 1;
    const int R = copies;
    oj_scope_begin(E);
    oj_qtensor **q = malloc(sizeof(oj_qtensor *) * (size_t)copies);
    for (int c = 0; c < copies; c++)
        if ((q[c] = oj_qtensor_from_blocks(E, t, s->N, s->K, hb, bytes)) == NULL) die("blocks");
    oj_tensor *x = oj_from_host(E, 2, (int64_t[]){M, s->K}, OJ_F32, hx, sizeof(float) * (size_t)(M * s->K));
    oj_tensor *out[3] = {oj_empty(E, 2, (int64_t[]){M, s->N}, OJ_F32),
                         oj_empty(E, 2, (int64_t[]){M, s->N}, OJ_F32),
                         oj_empty(E, 2, (int64_t[]){M, s->N}, OJ_F32)};
    if (!x || !out[0] || !out[1] || !out[2]) die("buffers");
    oj_graph *gr[3];
    const char *ways[3] = {"old", "new", "row"};
    const int W = t == OJ_FP8_E4M3 ? 3 : 2;
    const char *row = fp8row_env[0] && strcmp(fp8row_env, "0") != 0 ? fp8row_env : "1";
    for (int p = 0; p < W; p++) {
        setenv("OJAS_CUDA_QGEMV_FAST", p ? "1" : "0", 1);
        setenv("OJAS_CUDA_QGEMV_FP8ROW", p == 2 ? row : "0", 1);
        run_qgemv(q[0], x, out[p]); /* warm-up (attributes, occupancy) and the check's output */
        if (oj_engine_synchronize(E) != OJ_OK) die("synchronize");
        *ok = check(t, s, M, hb, rb, hx, out[p], ways[p]) && *ok;
        if (oj_graph_capture_begin(E) != OJ_OK) die("capture");
        for (int r = 0; r < R; r++) run_qgemv(q[r % copies], x, out[p]);
        if ((gr[p] = oj_graph_capture_end(E)) == NULL) die("capture end");
        if (oj_graph_replay(gr[p]) != OJ_OK) die("replay");
    }
    unsetenv("OJAS_CUDA_QGEMV_FAST");
    unsetenv("OJAS_CUDA_QGEMV_FP8ROW");
    double *v[3] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps),
                    malloc(sizeof(double) * (size_t)reps)};
    for (int r = 0; r < reps; r++)
        for (int p = 0; p < W; p++) {
            if (oj_engine_synchronize(E) != OJ_OK) die("synchronize");
            const double t0 = now_ms();
            if (oj_graph_replay(gr[p]) != OJ_OK) die("replay");
            if (oj_engine_synchronize(E) != OJ_OK) die("synchronize");
            v[p][r] = (now_ms() - t0) * 1e3 / R;
        }
    for (int p = 0; p < 3; p++) {
        if (p < W) {
            qsort(v[p], (size_t)reps, sizeof(double), cmp_d);
            us[p] = v[p][reps / 2];
            oj_graph_free(gr[p]);
        }
        free(v[p]);
    }
    const double g0 = (double)bytes / (us[0] * 1e-6) / 1e9, g1 = (double)bytes / (us[1] * 1e-6) / 1e9;
    printf("TIME %-5s %-17s K %5lld N %6lld M %lld  %6.2f MB | old %8.1f us %6.0f GB/s %5.1f%% | "
           "new %8.1f us %6.0f GB/s %5.1f%% | %.2fx  (%d copies)\n",
           oj_qtype_name(t), s->name, (long long)s->K, (long long)s->N, (long long)M,
           (double)bytes / 1e6, us[0], g0, 100.0 * g0 / BW_LIMIT, us[1], g1,
           100.0 * g1 / BW_LIMIT, us[0] / us[1], copies);
    if (W == 3) {
        const double g2 = (double)bytes / (us[2] * 1e-6) / 1e9;
        printf("ROW  %-5s %-17s K %5lld N %6lld M %lld  %6.2f MB | row %8.1f us %6.0f GB/s %5.1f%% | "
               "%.2fx new (OJAS_CUDA_QGEMV_FP8ROW=%s)\n",
               oj_qtype_name(t), s->name, (long long)s->K, (long long)s->N, (long long)M,
               (double)bytes / 1e6, us[2], g2, 100.0 * g2 / BW_LIMIT, us[1] / us[2], row);
    }
    fflush(stdout);
    for (int c = 0; c < copies; c++) oj_qtensor_free(q[c]);
    free(q);
    oj_scope_end(E);
    free(hb);
    free(hx);
}

int main(int argc, char **argv) {
    int reps = 5;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if ((reps = atoi(argv[i])) < 1) {
            fprintf(stderr, "bench_gpu_qgemv: unknown argument '%s' (usage: [reps] [--quick])\n", argv[i]);
            return 2;
        }
    }
    if (getenv("HBM_GBS")) BW_LIMIT = atof(getenv("HBM_GBS"));
    if (getenv("OJAS_CUDA_QGEMV_FP8ROW"))
        snprintf(fp8row_env, sizeof fp8row_env, "%s", getenv("OJAS_CUDA_QGEMV_FP8ROW"));
    if (bench_cuda_engine(OJ_NUMERICS_FAST, &E)) return 77;
    oj_set_grad_enabled(E, false);
    printf("bench_gpu_qgemv: qgemv old (k_qgemv) vs new (k_qgemv_fast), fp8 also row "
           "(k_qgemv_fp8row), reps %d, %% of %.0f GB/s\n", reps, BW_LIMIT);
    bool ok = true;
    const oj_qtype types[] = {OJ_Q4_0, OJ_FP8_E4M3, OJ_Q8_0, OJ_Q4_1, OJ_Q4_K};
    const int ntypes = quick ? 2 : 5, nm = 2;
    for (int ti = 0; ti < ntypes; ti++)
        for (int mi = 0; mi < nm; mi++) {
            const int64_t M = mi ? 4 : 1;
            double us[NSHAPES][3];
            const int ns = quick && M > 1 ? 5 : NSHAPES; /* --quick: M 4 on llama's shapes only */
            for (int si = 0; si < ns; si++) bench_one(types[ti], &SHAPES[si], M, reps, us[si], &ok);
            /* 16 layers of q, k, v, o, gate, up, down and the head */
            for (int p = 0; p < (types[ti] == OJ_FP8_E4M3 ? 3 : 2); p++) {
                const double layer = 2 * us[0][p] + 2 * us[1][p] + 2 * us[2][p] + us[3][p];
                const double tok = 16 * layer + us[4][p];
                printf("ESTIMATE %-5s M %lld llama3.2-1b GEMVs a token, %s: %.3f ms (%.0f GEMV-only tok/s)\n",
                       oj_qtype_name(types[ti]), (long long)M, p == 2 ? "row" : p ? "new" : "old",
                       tok / 1e3, 1e6 / tok);
            }
        }
    oj_engine_free(E);
    printf("%s bench_gpu_qgemv checks\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
