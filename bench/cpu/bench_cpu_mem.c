/* ojas elementwise ops and reductions against the machine's memory
 * bandwidth, measured in the same run: a STREAM-like triad (a = b + s c,
 * f32, three 64 MiB arrays, larger than the last-level cache, on the same
 * number of threads), then ojas ops on tensors of the same size. GB/s
 * counts bytes as STREAM does (each array read or written once; no
 * write-allocate traffic), and each op is reported as a fraction of the
 * triad's GB/s. Then the activations (tanh, sigmoid, silu, gelu_tanh,
 * gelu) on ordinary against saturated inputs, FAST and EXACT numerics.
 *
 * usage: bench_cpu_mem [--threads N] [--mib M] [--iters N] [--smoke] [--acts]
 *   --acts: the activation table only */
#include <math.h>
#include <pthread.h>

#include "bench_cpu_common.h"
#include "ojas/ops.h"

typedef struct {
    float *a, *b, *c;
    int64_t begin, end;
} triad_part;

/* Vectorised like STREAM's -O3 build (baseline SSE2: no ISA assumption). */
__attribute__((optimize("O3"))) static void *triad_worker(void *vp) {
    triad_part *p = vp;
    const float s = 3.0f;
    for (int64_t i = p->begin; i < p->end; i++) p->a[i] = p->b[i] + s * p->c[i];
    return NULL;
}

/* Best-of-iters triad GB/s over n floats on `threads` threads (each
 * thread touches its own part first, as STREAM's OpenMP loops do). */
static double triad_gbs(int64_t n, int threads, int iters) {
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    pthread_t th[64];
    triad_part parts[64];
    double best = 0;
    for (int it = 0; it < iters; it++) {
        double t0 = bc_now();
        for (int t = 0; t < threads; t++) {
            parts[t] = (triad_part){a, b, c, n * t / threads, n * (t + 1) / threads};
            if (t > 0) pthread_create(&th[t], NULL, triad_worker, &parts[t]);
        }
        triad_worker(&parts[0]);
        for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
        double gbs = 3.0 * 4.0 * (double)n / (bc_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(a), free(b), free(c);
    return best;
}

typedef oj_tensor *(*op_fn)(oj_tensor *a, oj_tensor *b);
static oj_tensor *op_add(oj_tensor *a, oj_tensor *b) { return oj_add(a, b); }
static oj_tensor *op_mul(oj_tensor *a, oj_tensor *b) { return oj_mul(a, b); }
static oj_tensor *op_scale(oj_tensor *a, oj_tensor *b) { (void)b; return oj_mul_scalar(a, 0.5); }
static oj_tensor *op_exp(oj_tensor *a, oj_tensor *b) { (void)b; return oj_exp(a); }
static oj_tensor *op_gelu(oj_tensor *a, oj_tensor *b) { (void)b; return oj_gelu_tanh(a); }
static oj_tensor *op_silu(oj_tensor *a, oj_tensor *b) { (void)b; return oj_silu(a); }
static oj_tensor *op_copy(oj_tensor *a, oj_tensor *b) { (void)b; return oj_clone(a); }
static oj_tensor *op_sum_rows(oj_tensor *a, oj_tensor *b) {
    (void)b;
    int d = 0;
    return oj_sum(a, 1, &d, false); /* [R, C] -> [C]: a bias gradient */
}
static oj_tensor *op_sum_cols(oj_tensor *a, oj_tensor *b) {
    (void)b;
    int d = 1;
    return oj_sum(a, 1, &d, false); /* [R, C] -> [R] */
}
static oj_tensor *op_sum_all(oj_tensor *a, oj_tensor *b) { (void)b; return oj_sum_all(a); }

/* Median ms of y = fn(x) over iters runs (one warm-up). */
static double time_unary(oj_engine *eng, oj_tensor *(*fn)(oj_tensor *), oj_tensor *x, int iters,
                         const char *name) {
    double ts[64];
    int m = iters < 64 ? iters : 64;
    for (int it = -1; it < m; it++) {
        oj_scope_begin(eng);
        double t0 = bc_now();
        oj_tensor *y = fn(x);
        double dt = bc_now() - t0;
        if (y == NULL) {
            fprintf(stderr, "%s: %s\n", name, oj_last_error(eng));
            exit(1);
        }
        oj_scope_end(eng);
        if (it >= 0) ts[it] = dt;
    }
    return bc_median(ts, m) * 1e3;
}

/* The activations on ordinary inputs (uniform in [-4, 4]) and on
 * saturated ones (|x| uniform in [45, 1000], random sign), in FAST and
 * EXACT numerics: a saturated input must cost what an ordinary one does
 * (the exp inside them once made subnormals, 12-28x slower). */
static void saturated_table(int64_t n, const int64_t *shape, int threads, int iters) {
    struct {
        const char *name;
        oj_tensor *(*fn)(oj_tensor *);
    } acts[] = {{"tanh", oj_tanh}, {"sigmoid", oj_sigmoid}, {"silu", oj_silu},
                {"gelu_tanh", oj_gelu_tanh}, {"gelu (erf)", oj_gelu}};
    printf("\nactivations, ordinary inputs (U[-4, 4]) vs saturated (|x| in U[45, 1000]), "
           "ms for %lld elements\n", (long long)n);
    printf("%-12s %-6s %10s %10s %10s\n", "op", "mode", "ordinary", "saturated", "ratio");
    for (int mode = 0; mode < 2; mode++) {
        oj_engine *eng = bc_engine(threads, mode ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST);
        oj_tensor *x = oj_rand_uniform(eng, 2, shape, OJ_F32, -4, 4);
        oj_tensor *mag = oj_rand_uniform(eng, 2, shape, OJ_F32, 45, 1000);
        oj_tensor *s = oj_mul(oj_sign(oj_rand_uniform(eng, 2, shape, OJ_F32, -1, 1)), mag);
        if (x == NULL || s == NULL) {
            fprintf(stderr, "saturated inputs: %s\n", oj_last_error(eng));
            exit(1);
        }
        for (size_t k = 0; k < sizeof acts / sizeof *acts; k++) {
            double a = time_unary(eng, acts[k].fn, x, iters, acts[k].name);
            double b = time_unary(eng, acts[k].fn, s, iters, acts[k].name);
            printf("%-12s %-6s %10.3f %10.3f %9.2fx\n", acts[k].name, mode ? "exact" : "fast", a,
                   b, b / a);
        }
        oj_engine_free(eng);
    }
}

int main(int argc, char **argv) {
    int threads = 1, iters = 10, smoke = 0, acts_only = 0;
    int64_t mib = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--smoke")) smoke = 1;
        else if (!strcmp(argv[i], "--acts")) acts_only = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--mib M] [--iters N] [--smoke] [--acts]\n",
                    argv[0]);
            return 2;
        }
    }
    if (smoke) mib = 1, iters = 2;
    if (threads < 1 || threads > 64) threads = 1;
    int64_t n = mib * 1024 * 1024 / 4, C = 1024, R = n / C;
    n = R * C;
    char cpu[256];
    bc_cpu_model(cpu, sizeof cpu);
    int64_t shape[2] = {R, C};
    if (acts_only) {
        printf("bench_cpu_mem: %s, threads %d\n", cpu, threads);
        saturated_table(n, shape, threads, iters);
        return 0;
    }
    double triad = triad_gbs(n, threads, iters);
    printf("bench_cpu_mem: %s, threads %d, f32 tensors of %lld MiB ([%lld, %lld])\n", cpu,
           threads, (long long)mib, (long long)R, (long long)C);
    printf("STREAM-like triad (3 x %lld MiB): %.1f GB/s\n", (long long)mib, triad);
    printf("%-24s %10s %10s %10s\n", "op", "ms", "GB/s", "of triad");
    oj_engine *eng = bc_engine(threads, OJ_NUMERICS_FAST);
    oj_tensor *a = oj_rand_uniform(eng, 2, shape, OJ_F32, -1, 1);
    oj_tensor *b = oj_rand_uniform(eng, 2, shape, OJ_F32, -1, 1);
    struct {
        const char *name;
        op_fn fn;
        double arrays; /* arrays of n floats moved */
    } ops[] = {{"add (a + b)", op_add, 3},       {"mul (a * b)", op_mul, 3},
               {"mul_scalar (0.5 a)", op_scale, 2}, {"clone (core memcpy)", op_copy, 2},
               {"exp", op_exp, 2},               {"gelu_tanh", op_gelu, 2},
               {"silu", op_silu, 2},             {"sum over rows -> [C]", op_sum_rows, 1},
               {"sum over cols -> [R]", op_sum_cols, 1}, {"sum_all", op_sum_all, 1}};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        double ts[64];
        int m = iters < 64 ? iters : 64;
        for (int it = -1; it < m; it++) { /* one warm-up: the pool has the blocks after it */
            oj_scope_begin(eng);
            double t0 = bc_now();
            oj_tensor *y = ops[k].fn(a, b);
            double dt = bc_now() - t0;
            if (y == NULL) {
                fprintf(stderr, "%s: %s\n", ops[k].name, oj_last_error(eng));
                return 1;
            }
            oj_scope_end(eng);
            if (it >= 0) ts[it] = dt;
        }
        double med = bc_median(ts, m);
        double gbs = ops[k].arrays * 4.0 * (double)n / med / 1e9;
        printf("%-24s %10.3f %10.1f %9.0f%%\n", ops[k].name, med * 1e3, gbs, 100.0 * gbs / triad);
    }
    oj_engine_free(eng);
    saturated_table(n, shape, threads, iters);
    return 0;
}
