/* sgemm: ojas against OpenBLAS (cblas_sgemm) in one run, square N = 256,
 * 512, 1024, 2048 (C = A B, f32, row-major), same threads. Rows:
 *   openblas    cblas_sgemm on the same buffers (OpenBLAS's threads set to N)
 *   ojas FAST   oj_matmul in FAST numerics (OpenBLAS underneath, plus the
 *               output allocation and op bookkeeping)
 *   ojas EXACT  oj_matmul in EXACT numerics (ojas's own packed GEMM, every
 *               element the in-order f32 sum) on the engine's SIMD level,
 *               and once per lower level (--levels)
 * Prints GFLOP/s (2 N^3 / time, median of reps) and each row / openblas.
 * OpenBLAS picks its kernels from OPENBLAS_CORETYPE when set: run this with
 * `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` to compare against its
 * AVX-512 kernels (the core it used is printed).
 *
 * usage: bench_cpu_gemm [--threads N] [--sizes 256,512] [--reps N] [--levels] [--smoke] */
#include <math.h>

#include "bench_cpu_common.h"
#include "backend/cpu/cpu_pool.h"
#include "ojas/ops.h"

#ifdef OJAS_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* Median seconds of fn over reps runs of at least min_s seconds total. */
typedef struct {
    oj_engine *eng;
    oj_tensor *a, *b;
    const float *ha, *hb;
    float *hc;
    int n;
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->ha, g->n,
                g->hb, g->n, 0.0f, g->hc, g->n);
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

int main(int argc, char **argv) {
    int threads = 1, reps = 7, levels = 0, smoke = 0;
    const char *sizes = "256,512,1024,2048";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--levels")) levels = 1;
        else if (!strcmp(argv[i], "--smoke")) smoke = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--sizes a,b] [--reps N] [--levels] [--smoke]\n",
                    argv[0]);
            return 2;
        }
    }
    if (smoke) sizes = "64,96", reps = 1, levels = 1;
    char cpu[256];
    bc_cpu_model(cpu, sizeof cpu);
    printf("bench_cpu_gemm: %s, threads %d", cpu, threads);
#ifdef OJAS_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
    printf(", OpenBLAS %s core %s", openblas_get_config(), openblas_get_corename());
#endif
    printf(", ojas SIMD %s\n", oj_cpu_isa_name(oj_cpu_isa_detect()));
    printf("%6s %-22s %10s %10s %12s\n", "N", "row", "ms", "GFLOP/s", "/ openblas");
    char list[256];
    snprintf(list, sizeof list, "%s", sizes);
    for (char *sv = NULL, *tok = strtok_r(list, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        int n = atoi(tok);
        double flops = 2.0 * n * (double)n * n;
        int64_t shape[2] = {n, n};
        double blas_s = -1;
        oj_engine *ef = bc_engine(threads, OJ_NUMERICS_FAST);
        oj_engine *ee = bc_engine(threads, OJ_NUMERICS_EXACT);
        gctx g = {.n = n};
        g.eng = ef;
        g.a = oj_rand_uniform(ef, 2, shape, OJ_F32, -1, 1);
        g.b = oj_rand_uniform(ef, 2, shape, OJ_F32, -1, 1);
        float *ha = malloc((size_t)n * n * 4), *hb = malloc((size_t)n * n * 4);
        g.hc = malloc((size_t)n * n * 4);
        oj_to_host(g.a, ha, (size_t)n * n * 4);
        oj_to_host(g.b, hb, (size_t)n * n * 4);
        g.ha = ha, g.hb = hb;
#ifdef OJAS_HAVE_OPENBLAS
        blas_s = time_med(run_blas, &g, reps);
        printf("%6d %-22s %10.3f %10.1f %11.2fx\n", n, "openblas", blas_s * 1e3,
               flops / blas_s / 1e9, 1.0);
#endif
        double s = time_med(run_ojas, &g, reps);
        printf("%6d %-22s %10.3f %10.1f %11.2fx\n", n, "ojas FAST", s * 1e3, flops / s / 1e9,
               blas_s > 0 ? blas_s / s : 0);
        gctx ge = g;
        ge.eng = ee;
        ge.a = oj_from_host(ee, 2, shape, OJ_F32, ha, (size_t)n * n * 4);
        ge.b = oj_from_host(ee, 2, shape, OJ_F32, hb, (size_t)n * n * 4);
        oj_cpu_isa best = oj_cpu_isa_of(ee);
        for (int l = (int)best; l >= (levels ? 0 : (int)best); l--) {
            oj__cpu_set_isa(ee, (oj_cpu_isa)l);
            double se = time_med(run_ojas, &ge, l == (int)best ? reps : (reps + 1) / 2);
            char name[64];
            snprintf(name, sizeof name, "ojas EXACT (%s)", oj_cpu_isa_name((oj_cpu_isa)l));
            printf("%6d %-22s %10.3f %10.1f %11.2fx\n", n, name, se * 1e3, flops / se / 1e9,
                   blas_s > 0 ? blas_s / se : 0);
        }
        fflush(stdout);
        free(ha), free(hb), free(g.hc);
        oj_engine_free(ef);
        oj_engine_free(ee);
    }
    return 0;
}
