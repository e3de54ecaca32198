/* GPU microbenchmark of the fused cross-entropy kernel (the backend's
 * cross_entropy_fused entry, bf16 logits, dlogits written over them as
 * linear_cross_entropy does): the pipelined kernel (OJAS_CUDA_CE_PIPE=1,
 * k_ce_fused_pipe) against the one-row-per-block kernel (=0, k_ce_fused)
 * on gpt2-124m's shapes: a head chunk [2341, 50257] with rows of 50304
 * (ld), and the whole [16384, 50304].
 *
 * Bits: one call each way on copies of the same logits; loss, lse and the
 * whole logits storage (dlogits and the padding) must have the same bytes
 * (label smoothing 0 and 0.1). Time: each way, K in-place calls captured
 * into one CUDA graph (the entry's status-word reset and deferred target
 * check included: one small node per call, one read-back per replay),
 * replayed `reps` times alternating with the other way, wall time around
 * each replay (synchronised); the median per call is reported with the
 * bytes the kernel must move (N V s read, N V s written) in GB/s and as a
 * fraction of HBM_GBS (default 4000).
 *
 * usage: bench_gpu_xent [reps]   (77: no GPU; 1: bits differ) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "ojas/ojas.h"

static oj_engine *E;
static double BW_LIMIT = 4000.0;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static void die(const char *what) {
    fprintf(stderr, "bench_gpu_xent: %s: %s\n", what, oj_last_error(E));
    exit(2);
}

/* One chunk's inputs: logits storage [N, ld] bf16 (normal, std 2), the
 * targets (every 10th row ignored, -100) and dloss (ones, broadcast). */
typedef struct {
    int64_t N, V, ld;
    oj_tensor *xb, *t, *g;
} xcase;

static xcase make_case(int64_t N, int64_t V, int64_t ld) {
    xcase c = {N, V, ld, NULL, NULL, NULL};
    c.xb = oj_rand_normal(E, 2, (int64_t[2]){N, ld}, OJ_BF16, 0.0, 2.0);
    int64_t *tv = malloc((size_t)N * sizeof *tv);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tv[i] = i % 10 == 9 ? -100 : (int64_t)(s % (uint64_t)V);
    }
    c.t = oj_from_host(E, 1, &N, OJ_I64, tv, (size_t)N * sizeof *tv);
    free(tv);
    oj_tensor *one = oj_full(E, 1, (int64_t[1]){1}, OJ_F32, 1.0);
    c.g = one ? oj_expand(one, 1, &N) : NULL;
    if (!c.xb || !c.t || !c.g) die("inputs");
    return c;
}

/* cross_entropy_fused in place over x ([N, ld] storage, its first V
 * columns) with OJAS_CUDA_CE_PIPE=pipe. */
static void fused(const xcase *c, oj_tensor *x, oj_tensor *loss, oj_tensor *lse, int pipe,
                  double eps) {
    setenv("OJAS_CUDA_CE_PIPE", pipe ? "1" : "0", 1);
    oj_tensor *xv = oj_narrow(x, 1, 0, c->V);
    if (xv == NULL) die("narrow");
    if (E->backend->cross_entropy_fused(E, loss, lse, xv, xv, c->t, c->g, 1.0 / (double)c->N,
                                        -100, eps, NULL) != OJ_OK)
        die("cross_entropy_fused");
}

static bool same(oj_tensor *a, oj_tensor *b) {
    size_t nb = (size_t)oj_numel(a) * oj_dtype_size(oj_tensor_dtype(a));
    unsigned char *ha = malloc(nb), *hb = malloc(nb);
    if (!ha || !hb || oj_to_host(a, ha, nb) != OJ_OK || oj_to_host(b, hb, nb) != OJ_OK)
        die("read back");
    bool r = memcmp(ha, hb, nb) == 0;
    free(ha);
    free(hb);
    return r;
}

/* new == old bits for loss, lse and the logits storage; prints the lines. */
static bool check_bits(const xcase *c, const char *name) {
    bool ok = true;
    for (int ls = 0; ls < 2; ls++) {
        double eps = ls ? 0.1 : 0.0;
        oj_scope_begin(E);
        oj_tensor *x[2], *loss[2], *lse[2];
        for (int p = 0; p < 2; p++) {
            x[p] = oj_clone(c->xb);
            loss[p] = oj_empty(E, 1, &c->N, OJ_F32);
            lse[p] = oj_empty(E, 1, &c->N, OJ_F32);
            if (!x[p] || !loss[p] || !lse[p]) die("buffers");
            fused(c, x[p], loss[p], lse[p], p, eps);
        }
        bool b0 = same(loss[0], loss[1]), b1 = same(lse[0], lse[1]), b2 = same(x[0], x[1]);
        printf("%s %s eps %.1f: new == old bits: loss %s, lse %s, dlogits %s\n",
               b0 && b1 && b2 ? "PASS" : "FAIL", name, eps, b0 ? "same" : "DIFFER",
               b1 ? "same" : "DIFFER", b2 ? "same" : "DIFFER");
        ok = ok && b0 && b1 && b2;
        oj_scope_end(E);
    }
    return ok;
}

/* Median us per call of each way (K calls per graph, reps replays). */
static void time_case(const xcase *c, const char *name, int K, int reps) {
    oj_scope_begin(E);
    oj_graph *gr[2];
    for (int p = 0; p < 2; p++) {
        oj_tensor *x = oj_clone(c->xb);
        oj_tensor *loss = oj_empty(E, 1, &c->N, OJ_F32), *lse = oj_empty(E, 1, &c->N, OJ_F32);
        if (!x || !loss || !lse) die("buffers");
        fused(c, x, loss, lse, p, 0.0); /* warm-up: attributes, first launch */
        if (oj_engine_synchronize(E) != OJ_OK) die("synchronize");
        if (oj_graph_capture_begin(E) != OJ_OK) die("capture");
        for (int k = 0; k < K; k++) fused(c, x, loss, lse, p, 0.0);
        if ((gr[p] = oj_graph_capture_end(E)) == NULL) die("capture end");
        if (oj_graph_replay(gr[p]) != OJ_OK) die("replay"); /* warm-up */
    }
    double *v[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    for (int r = 0; r < reps; r++)
        for (int p = 0; p < 2; p++) {
            if (oj_engine_synchronize(E) != OJ_OK) die("synchronize");
            double t0 = now_ms();
            if (oj_graph_replay(gr[p]) != OJ_OK) die("replay");
            if (oj_engine_synchronize(E) != OJ_OK) die("synchronize");
            v[p][r] = (now_ms() - t0) * 1e3 / K;
        }
    double bytes = 2.0 * (double)c->N * (double)c->V * 2.0;
    double us[2];
    for (int p = 0; p < 2; p++) {
        qsort(v[p], (size_t)reps, sizeof(double), cmp_d);
        us[p] = v[p][reps / 2];
        double gbs = bytes / (us[p] * 1e-6) / 1e9;
        printf("TIME %s %-22s %8.1f us/call  %7.0f GB/s  %5.1f%% of %.0f GB/s"
               "  (min %.1f max %.1f)\n",
               name, p ? "pipe (CE_PIPE=1)" : "one row/block (=0)", us[p], gbs,
               100.0 * gbs / BW_LIMIT, BW_LIMIT, v[p][0], v[p][reps - 1]);
        free(v[p]);
        oj_graph_free(gr[p]);
    }
    printf("TIME %s speed-up %.3fx (floor %.1f us at %.0f GB/s)\n", name, us[0] / us[1],
           bytes / (BW_LIMIT * 1e9) * 1e6, BW_LIMIT);
    oj_scope_end(E);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1) reps = 1;
    if (getenv("HBM_GBS")) BW_LIMIT = atof(getenv("HBM_GBS"));
    oj_engine_config ec = oj_engine_config_default();
    ec.device.type = OJ_DEVICE_CUDA;
    ec.numerics = OJ_NUMERICS_FAST;
    ec.seed = 1;
    oj_error err = {0};
    if (oj_engine_create(&ec, &E, &err) != OJ_OK) {
        fprintf(stderr, "skipped: %s\n", err.message);
        return 77;
    }
    printf("bench_gpu_xent: cross_entropy_fused in place, bf16, reps %d\n", reps);
    bool ok = true;
    oj_scope_begin(E);
    xcase chunk = make_case(2341, 50257, 50304);
    ok = check_bits(&chunk, "chunk [2341, 50257 ld 50304]") && ok;
    time_case(&chunk, "chunk [2341, 50257 ld 50304]", 20, reps);
    oj_scope_end(E);
    oj_scope_begin(E);
    xcase whole = make_case(16384, 50304, 50304);
    ok = check_bits(&whole, "whole [16384, 50304]") && ok;
    time_case(&whole, "whole [16384, 50304]", 4, reps);
    oj_scope_end(E);
    unsetenv("OJAS_CUDA_CE_PIPE");
    oj_engine_free(E);
    printf("%s bench_gpu_xent bits\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
