// test: paged attention on the GPU (the CUDA kernel that reads the KV
// blocks through the block table) matches the CPU's over scattered blocks:
// one to many queries, block sizes that do and do not divide the keys,
// GQA, a strided q, f32 / bf16 / f16, D up to 128.
//
// Skips (77) without a CUDA device. OJAS_GPU_TEST_ON_CPU=1 runs the same
// checks with a CPU engine in place of the CUDA one (a self-check).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "ojas/ops.h"
#include "gpu_testutil.h"

static bool on_cpu;

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* A [rank, shape] tensor of uniform values in [-1, 1] from seed, dtype dt, on e. */
static oj_tensor *rnd(oj_engine *e, int rank, const int64_t *shape, oj_dtype dt, uint32_t seed) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    double *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = (double)(lcg(&seed) % 2001) / 1000.0 - 1.0;
    oj_tensor *t = oj_from_host(e, rank, shape, OJ_F64, h, (size_t)n * sizeof *h);
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    free(h);
    return c;
}

/* max |a - b| over a's and b's values (any devices) as f64. */
static double max_diff(oj_tensor *a, oj_tensor *b) {
    int64_t n = oj_numel(a);
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    oj_tensor *ca = oj_contiguous(oj_cast(a, OJ_F64)), *cb = oj_contiguous(oj_cast(b, OJ_F64));
    assert_non_null(ca);
    assert_non_null(cb);
    assert_int_equal(oj_to_host(ca, x, (size_t)n * sizeof *x), OJ_OK);
    assert_int_equal(oj_to_host(cb, y, (size_t)n * sizeof *y), OJ_OK);
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(x[i] - y[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    free(x);
    free(y);
    return m;
}

static void check(oj_engine *cpu, oj_engine *gpu, int64_t H, int64_t Hkv, int64_t D, int64_t T,
                  int64_t S, int64_t BS, oj_dtype dt, double tol) {
    oj_scope_begin(cpu);
    oj_scope_begin(gpu);
    const int64_t nb = (S + BS - 1) / BS, NB = 2 * nb + 1;
    int32_t *blocks = malloc((size_t)nb * sizeof *blocks);
    for (int64_t i = 0; i < nb; i++) blocks[i] = (int32_t)(NB - 1 - 2 * i); /* scattered, distinct */
    int64_t ps[4] = {NB, Hkv, BS, D}, qs[4] = {1, T, H, D};
    uint32_t seed = (uint32_t)(H * 7 + T * 131 + S * 3 + BS);
    oj_tensor *kc = rnd(cpu, 4, ps, dt, seed), *vc = rnd(cpu, 4, ps, dt, seed + 1);
    oj_tensor *q0c = rnd(cpu, 4, qs, dt, seed + 2);
    oj_tensor *kg = oj_to_device(kc, gpu), *vg = oj_to_device(vc, gpu), *q0g = oj_to_device(q0c, gpu);
    oj_tensor *qc = oj_transpose(q0c, 1, 2), *qg = oj_transpose(q0g, 1, 2); /* [1, H, T, D] views */
    oj_tensor *want = oj__paged_attention(qc, kc, vc, blocks, S, NAN);
    oj_tensor *got = oj__paged_attention(qg, kg, vg, blocks, S, NAN);
    if (want == NULL || got == NULL) fail_msg("paged_attention: %s / %s", oj_last_error(cpu), oj_last_error(gpu));
    double d = max_diff(got, want);
    if (!(d <= tol))
        fail_msg("%s H %lld Hkv %lld D %lld T %lld S %lld BS %lld: max |gpu - cpu| %g > %g",
                 oj_dtype_name(dt), (long long)H, (long long)Hkv, (long long)D, (long long)T,
                 (long long)S, (long long)BS, d, tol);
    free(blocks);
    oj_scope_end(gpu);
    oj_scope_end(cpu);
}

static void test_paged_matches_cpu(void **state) {
    (void)state;
    oj_engine *cpu = gpu_test_engine(false, on_cpu, OJ_NUMERICS_EXACT, 3);
    oj_engine *gpu = gpu_test_engine(true, on_cpu, OJ_NUMERICS_FAST, 3);
    const oj_dtype dts[3] = {OJ_F32, OJ_BF16, OJ_F16};
    const double tols[3] = {2e-6, 2e-2, 3e-3};
    for (int i = 0; i < 3; i++) {
        check(cpu, gpu, 4, 2, 64, 1, 1, 16, dts[i], tols[i]);
        check(cpu, gpu, 4, 2, 64, 1, 300, 16, dts[i], tols[i]);  /* a decode step */
        check(cpu, gpu, 12, 12, 64, 9, 57, 7, dts[i], tols[i]);  /* a chunk, an odd block */
        check(cpu, gpu, 14, 2, 64, 70, 70, 16, dts[i], tols[i]); /* a prompt, Qwen's GQA */
        check(cpu, gpu, 8, 4, 128, 3, 129, 32, dts[i], tols[i]);
    }
    assert_int_equal(oj_engine_live_tensors(gpu), 0);
    oj_engine_free(gpu);
    oj_engine_free(cpu);
}

int main(void) {
    int rc = gpu_test_probe(true, &on_cpu);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paged_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
