/* sgemm: ojas against OpenBLAS (cblas_sgemm) in one run, same threads.
 *
 * Square N = 256, 512, 1024, 2048 (C = A B, f32, row-major), then with
 * --model the products of one training step of the benchmark GPT (d 256,
 * 4d MLP, vocab 4096, B*T = 2048 rows): each linear layer's forward
 * (x W^T), input gradient (g W) and weight gradient (g^T x). Rows:
 *   openblas           cblas_sgemm on the same buffers (transposes passed
 *                      as flags; OpenBLAS threading itself over N threads)
 *   ojas FAST (own)    oj_matmul, FAST numerics with OJAS_GEMM=ojas: ojas's
 *                      GEMM with fused multiply-adds
 *   ojas FAST (blas)   oj_matmul, FAST numerics (the default): OpenBLAS,
 *                      single-threaded on blocks of c run by ojas's pool
 *   ojas EXACT         oj_matmul, EXACT numerics: ojas's GEMM, each element
 *                      the in-order f32 sum (--levels: every SIMD level)
 * GFLOP/s = 2 M N K / time (median of reps; oj_matmul rows include the
 * output allocation and op bookkeeping) and each row / openblas.
 * OpenBLAS picks its kernels from OPENBLAS_CORETYPE when set: run with
 * `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` to compare against its
 * AVX-512 kernels (the core it used is printed).
 *
 * usage: bench_cpu_gemm [--threads N] [--sizes 256,512] [--model] [--reps N]
 *                       [--levels] [--smoke] */
#include <math.h>

#include "bench_cpu_common.h"
#include "backend/cpu/cpu_pool.h"
#include "ojas/ops.h"

#ifdef OJAS_HAVE_OPENBLAS
#include <cblas.h>
#endif

typedef struct {
    oj_engine *eng;
    oj_tensor *a, *b; /* views with the shape's transposes */
    const float *ha, *hb;
    float *hc;
    int m, n, k;
    bool ta, tb;
} gctx;

static void run_ojas(gctx *g) {
    oj_scope_begin(g->eng);
    oj_tensor *c = oj_matmul(g->a, g->b);
    if (c == NULL) {
        fprintf(stderr, "matmul: %s\n", oj_last_error(g->eng));
        exit(1);
    }
    oj_scope_end(g->eng);
}

#ifdef OJAS_HAVE_OPENBLAS
static void run_blas(gctx *g) {
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                g->m, g->n, g->k, 1.0f, g->ha, g->ta ? g->m : g->k, g->hb, g->tb ? g->k : g->n,
                0.0f, g->hc, g->n);
}
#endif

static double time_med(void (*fn)(gctx *), gctx *g, int reps) {
    fn(g); /* warm-up */
    double ts[64];
    int n = reps < 64 ? reps : 64;
    for (int i = 0; i < n; i++) {
        double t0 = bc_now();
        fn(g);
        ts[i] = bc_now() - t0;
    }
    return bc_median(ts, n);
}

/* The operands of one product on engine eng: a stored [m, k] or, when ta,
 * [k, m] and viewed transposed (likewise b). */
static void operands(gctx *g, oj_engine *eng, const float *ha, const float *hb) {
    int64_t sa[2] = {g->ta ? g->k : g->m, g->ta ? g->m : g->k};
    int64_t sb[2] = {g->tb ? g->n : g->k, g->tb ? g->k : g->n};
    oj_tensor *a = oj_from_host(eng, 2, sa, OJ_F32, ha, (size_t)g->m * g->k * 4);
    oj_tensor *b = oj_from_host(eng, 2, sb, OJ_F32, hb, (size_t)g->k * g->n * 4);
    g->eng = eng;
    g->a = g->ta ? oj_transpose(a, 0, 1) : a;
    g->b = g->tb ? oj_transpose(b, 0, 1) : b;
}

static void row(const char *label, const char *name, double s, double flops, double blas_s) {
    printf("%-26s %-20s %9.3f %9.1f %10.2fx\n", label, name, s * 1e3, flops / s / 1e9,
           blas_s > 0 ? blas_s / s : 0);
    fflush(stdout);
}

static void bench_one(const char *label, int m, int n, int k, bool ta, bool tb, int threads,
                      int reps, int levels) {
    double flops = 2.0 * m * (double)n * k;
    float *ha = malloc((size_t)m * k * 4), *hb = malloc((size_t)k * n * 4);
    uint32_t s = 1;
    for (int64_t i = 0; i < (int64_t)m * k; i++) ha[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int64_t i = 0; i < (int64_t)k * n; i++) hb[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    gctx g = {.ha = ha, .hb = hb, .m = m, .n = n, .k = k, .ta = ta, .tb = tb};
    g.hc = malloc((size_t)m * n * 4);
    double blas_s = -1;
#ifdef OJAS_HAVE_OPENBLAS
    /* ojas's FAST path leaves OpenBLAS single-threaded (it threads the calls
     * itself): give OpenBLAS its threads back for its own row */
    openblas_set_num_threads(threads);
    blas_s = time_med(run_blas, &g, reps);
    row(label, "openblas", blas_s, flops, blas_s);
#endif
    oj_engine *ef = bc_engine(threads, OJ_NUMERICS_FAST);
    operands(&g, ef, ha, hb);
    oj__cpu_set_fast_gemm(ef, OJ_GEMM_OWN);
    row(label, "ojas FAST (own)", time_med(run_ojas, &g, reps), flops, blas_s);
#ifdef OJAS_HAVE_OPENBLAS
    oj__cpu_set_fast_gemm(ef, OJ_GEMM_BLAS);
    row(label, "ojas FAST (blas)", time_med(run_ojas, &g, reps), flops, blas_s);
#endif
    oj_engine *ee = bc_engine(threads, OJ_NUMERICS_EXACT);
    operands(&g, ee, ha, hb);
    oj_cpu_isa best = oj_cpu_isa_of(ee);
    for (int l = (int)best; l >= (levels ? 0 : (int)best); l--) {
        oj__cpu_set_isa(ee, (oj_cpu_isa)l);
        char name[64];
        snprintf(name, sizeof name, "ojas EXACT (%s)", oj_cpu_isa_name((oj_cpu_isa)l));
        row(label, name, time_med(run_ojas, &g, l == (int)best ? reps : (reps + 1) / 2), flops,
            blas_s);
    }
    oj_engine_free(ef);
    oj_engine_free(ee);
    free(ha), free(hb), free(g.hc);
}

int main(int argc, char **argv) {
    int threads = 1, reps = 7, levels = 0, smoke = 0, model = 0;
    const char *sizes = "256,512,1024,2048";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--levels")) levels = 1;
        else if (!strcmp(argv[i], "--model")) model = 1;
        else if (!strcmp(argv[i], "--smoke")) smoke = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--sizes a,b] [--model] [--reps N] [--levels] "
                            "[--smoke]\n", argv[0]);
            return 2;
        }
    }
    if (smoke) sizes = "64,96", reps = 1, levels = 1;
    char cpu[256];
    bc_cpu_model(cpu, sizeof cpu);
    printf("bench_cpu_gemm: %s, threads %d", cpu, threads);
#ifdef OJAS_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
    printf(", OpenBLAS core %s", openblas_get_corename());
#endif
    printf(", ojas SIMD %s\n", oj_cpu_isa_name(oj_cpu_isa_detect()));
    printf("%-26s %-20s %9s %9s %11s\n", "product", "row", "ms", "GFLOP/s", "/ openblas");
    char list[256];
    snprintf(list, sizeof list, "%s", sizes);
    for (char *sv = NULL, *tok = strtok_r(list, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        int n = atoi(tok);
        char label[64];
        snprintf(label, sizeof label, "%d^3", n);
        bench_one(label, n, n, n, false, false, threads, reps, levels);
    }
    if (model || smoke) {
        /* layer: (in, out) of the benchmark GPT; rows = B*T */
        const int R = smoke ? 64 : 2048;
        const struct {
            const char *name;
            int in, out;
        } layers[] = {{"qkv", 256, 768}, {"attn.proj", 256, 256}, {"mlp.fc", 256, 1024},
                      {"mlp.proj", 1024, 256}, {"lm_head", 256, 4096}};
        for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
            int in = smoke ? layers[i].in / 8 : layers[i].in;
            int out = smoke ? layers[i].out / 8 : layers[i].out;
            char label[64];
            snprintf(label, sizeof label, "%s fwd x W^T", layers[i].name);
            bench_one(label, R, out, in, false, true, threads, reps, 0);
            snprintf(label, sizeof label, "%s dx = g W", layers[i].name);
            bench_one(label, R, in, out, false, false, threads, reps, 0);
            snprintf(label, sizeof label, "%s dW = g^T x", layers[i].name);
            bench_one(label, out, in, R, true, false, threads, reps, 0);
        }
    }
    return 0;
}
