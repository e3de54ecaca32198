// test: linear algebra ops — matmul (all torch.matmul cases, broadcast
// batches, transposed operands), bmm, linear, addmm: forward against a
// double-precision reference in FAST and EXACT numerics, gradcheck, EXACT
// determinism and in-order f32 accumulation, zero-size dims, bad input.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/ops.h"
#include "nn_testutil.h"
#include "ops/ops_common.h"

static oj_engine *eng_new(oj_numerics num) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 11;
    cfg.numerics = num;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

static oj_tensor *rnd(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt) {
    oj_tensor *t = oj_rand_uniform(eng, rank, shape, dt, -1, 1);
    assert_non_null(t);
    return t;
}

static oj_tensor *leaf(oj_engine *eng, int rank, const int64_t *shape) {
    oj_tensor *t = rnd(eng, rank, shape, OJ_F64);
    oj_set_requires_grad(t, true);
    return t;
}

static double *host(oj_tensor *t) {
    int64_t n = oj_numel(t);
    double *p = malloc((size_t)(n ? n : 1) * sizeof(double));
    oj_tensor *d = oj_cast(t, OJ_F64);
    assert_int_equal(oj_to_host(d, p, (size_t)n * sizeof(double)), OJ_OK);
    oj_release(d);
    return p;
}

/* torch.matmul in double on row-major host data. Writes out (numel of the
 * result) and returns its element count. */
static int64_t ref_matmul(const double *a, int ra, const int64_t *sa, const double *b, int rb,
                          const int64_t *sb, double *out) {
    int64_t M = ra == 1 ? 1 : sa[ra - 2], K = sa[ra - 1];
    int64_t N = rb == 1 ? 1 : sb[rb - 1];
    int nba = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
    int nb = nba > nbb ? nba : nbb;
    int64_t bs[8], total = 1;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - nba), db = d - (nb - nbb);
        int64_t x = da >= 0 ? sa[da] : 1, y = db >= 0 ? sb[db] : 1;
        bs[d] = x == 1 ? y : x;
        total *= bs[d];
    }
    for (int64_t t = 0; t < total; t++) {
        int64_t rem = t, ia = 0, ib = 0, mula = 1, mulb = 1;
        for (int d = nb - 1; d >= 0; d--) {
            int64_t i = rem % bs[d];
            rem /= bs[d];
            int da = d - (nb - nba), db = d - (nb - nbb);
            if (da >= 0) {
                ia += (sa[da] == 1 ? 0 : i) * mula;
                mula *= sa[da];
            }
            if (db >= 0) {
                ib += (sb[db] == 1 ? 0 : i) * mulb;
                mulb *= sb[db];
            }
        }
        const double *pa = a + ia * M * K, *pb = b + ib * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += pa[i * K + k] * pb[k * N + j];
                out[t * M * N + i * N + j] = s;
            }
    }
    return total * M * N;
}

static void check_against_ref(oj_tensor *a, oj_tensor *b, oj_tensor *y, double tol) {
    assert_non_null(y);
    double *ha = host(a), *hb = host(b), *hy = host(y);
    double *r = malloc((size_t)(oj_numel(y) + 1) * sizeof(double));
    int64_t n = ref_matmul(ha, oj_rank(a), oj_shape(a), hb, oj_rank(b), oj_shape(b), r);
    assert_int_equal(n, oj_numel(y));
    for (int64_t i = 0; i < n; i++)
        if (fabs(hy[i] - r[i]) > tol * (1 + fabs(r[i])))
            fail_msg("element %lld: got %.17g, want %.17g", (long long)i, hy[i], r[i]);
    free(ha);
    free(hb);
    free(hy);
    free(r);
}

typedef struct {
    int ra, rb;
    int64_t sa[4], sb[4];
    int orank;
    int64_t oshape[4];
} mm_case;

static const mm_case mm_cases[] = {
    {1, 1, {5}, {5}, 0, {0}},                          // dot
    {2, 1, {3, 5}, {5}, 1, {3}},                       // matrix-vector
    {1, 2, {5}, {5, 4}, 1, {4}},                       // vector-matrix
    {2, 2, {3, 5}, {5, 4}, 2, {3, 4}},                 // matrix-matrix
    {3, 2, {2, 3, 5}, {5, 4}, 3, {2, 3, 4}},           // batch folds into M
    {2, 3, {3, 5}, {2, 5, 4}, 3, {2, 3, 4}},           // broadcast a
    {4, 3, {2, 1, 3, 5}, {3, 5, 4}, 4, {2, 3, 3, 4}},  // broadcast both
    {1, 3, {5}, {2, 5, 4}, 2, {2, 4}},                 // 1-D with batch
    {3, 1, {2, 3, 5}, {5}, 2, {2, 3}},
    {3, 3, {2, 70, 300}, {2, 300, 37}, 3, {2, 70, 37}}, // crosses the block sizes
};

static void run_forward_cases(oj_numerics num, oj_dtype dt, double tol) {
    oj_engine *eng = eng_new(num);
    for (size_t c = 0; c < sizeof mm_cases / sizeof mm_cases[0]; c++) {
        const mm_case *k = &mm_cases[c];
        oj_scope_begin(eng);
        oj_tensor *a = rnd(eng, k->ra, k->sa, dt), *b = rnd(eng, k->rb, k->sb, dt);
        oj_tensor *y = oj_matmul(a, b);
        if (y == NULL) fail_msg("case %zu: %s", c, oj_last_error(eng));
        assert_int_equal(oj_rank(y), k->orank);
        for (int d = 0; d < k->orank; d++) assert_int_equal(oj_size(y, d), k->oshape[d]);
        assert_int_equal(oj_tensor_dtype(y), dt);
        check_against_ref(a, b, y, tol);
        oj_scope_end(eng);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_matmul_forward(void **state) {
    (void)state;
    run_forward_cases(OJ_NUMERICS_FAST, OJ_F64, 1e-12);
    run_forward_cases(OJ_NUMERICS_EXACT, OJ_F64, 1e-12);
    run_forward_cases(OJ_NUMERICS_FAST, OJ_F32, 1e-5);
    run_forward_cases(OJ_NUMERICS_EXACT, OJ_F32, 1e-5);
    run_forward_cases(OJ_NUMERICS_FAST, OJ_BF16, 1e-2);
    run_forward_cases(OJ_NUMERICS_EXACT, OJ_F16, 2e-3);
}

// transposed, sliced and expanded (stride-0) operands, in both numerics
static void test_matmul_strided(void **state) {
    (void)state;
    for (int num = 0; num < 2; num++) {
        oj_engine *eng = eng_new(num ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST);
        for (int dt = 0; dt < 2; dt++) {
            oj_dtype t = dt ? OJ_F32 : OJ_F64;
            double tol = dt ? 1e-5 : 1e-12;
            oj_scope_begin(eng);
            int64_t s1[3] = {3, 6, 5}, s2[3] = {3, 4, 6}, s3[2] = {9, 8}, s4[2] = {6, 1};
            oj_tensor *a = oj_transpose(rnd(eng, 3, s1, t), 1, 2); // [3, 5, 6], inner stride 6
            oj_tensor *b = oj_transpose(rnd(eng, 3, s2, t), 1, 2); // [3, 6, 4]
            check_against_ref(a, b, oj_matmul(a, b), tol);
            // a sliced on both dims: no unit stride anywhere
            oj_tensor *big = rnd(eng, 2, s3, t);
            oj_tensor *as = oj_slice(oj_slice(big, 0, 0, 9, 2), 1, 1, 8, 2); // [5, 4] strides 16, 2
            oj_tensor *bb = rnd(eng, 2, (int64_t[]){4, 3}, t);
            check_against_ref(as, bb, oj_matmul(as, bb), tol);
            // expanded matrix (stride 0 rows) and expanded batch
            oj_tensor *col = rnd(eng, 2, s4, t);
            oj_tensor *ex = oj_expand(col, 2, (int64_t[]){6, 7}); // [6, 7] strides (1, 0)
            oj_tensor *m = rnd(eng, 2, (int64_t[]){3, 6}, t);
            check_against_ref(m, ex, oj_matmul(m, ex), tol);
            oj_tensor *eb = oj_expand(rnd(eng, 3, (int64_t[]){1, 6, 4}, t), 3,
                                      (int64_t[]){5, 6, 4}); // batch stride 0
            oj_tensor *ea = rnd(eng, 3, (int64_t[]){5, 2, 6}, t);
            check_against_ref(ea, eb, oj_matmul(ea, eb), tol);
            // a permuted 4-D batch that does not merge into one stride
            oj_tensor *p = oj_permute(rnd(eng, 4, (int64_t[]){3, 2, 4, 5}, t), 4,
                                      (int[]){1, 0, 2, 3}); // [2, 3, 4, 5]
            oj_tensor *q = rnd(eng, 4, (int64_t[]){2, 1, 5, 3}, t);
            check_against_ref(p, q, oj_matmul(p, q), tol);
            oj_scope_end(eng);
        }
        assert_int_equal(oj_engine_live_tensors(eng), 0);
        oj_engine_free(eng);
    }
}

// EXACT: the same bits on every run, and each element equals the plain
// in-order f32 sum (what a GEMM accumulating in f32 over k computes).
static void test_matmul_exact_determinism(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_EXACT);
    oj_scope_begin(eng);
    int64_t sa[2] = {67, 513}, sb[2] = {513, 45};
    oj_tensor *a = rnd(eng, 2, sa, OJ_F32), *b = rnd(eng, 2, sb, OJ_F32);
    float *y1 = malloc(67 * 45 * sizeof(float)), *y2 = malloc(67 * 45 * sizeof(float));
    float *ha = malloc(67 * 513 * sizeof(float)), *hb = malloc(513 * 45 * sizeof(float));
    assert_int_equal(oj_to_host(oj_matmul(a, b), y1, 67 * 45 * sizeof(float)), OJ_OK);
    for (int rep = 0; rep < 3; rep++) {
        assert_int_equal(oj_to_host(oj_matmul(a, b), y2, 67 * 45 * sizeof(float)), OJ_OK);
        assert_memory_equal(y1, y2, 67 * 45 * sizeof(float));
    }
    oj_to_host(a, ha, 67 * 513 * sizeof(float));
    oj_to_host(b, hb, 513 * 45 * sizeof(float));
    for (int i = 0; i < 67; i++)
        for (int j = 0; j < 45; j++) {
            float s = 0.0f;
            for (int k = 0; k < 513; k++) s += ha[i * 513 + k] * hb[k * 45 + j];
            if (memcmp(&s, &y1[i * 45 + j], sizeof s) != 0)
                fail_msg("(%d, %d): %.9g != in-order %.9g", i, j, y1[i * 45 + j], s);
        }
    // a transposed view gives the same bits as its contiguous copy
    oj_tensor *at = oj_transpose(oj_contiguous(oj_transpose(a, 0, 1)), 0, 1);
    assert_int_equal(oj_to_host(oj_matmul(at, b), y2, 67 * 45 * sizeof(float)), OJ_OK);
    assert_memory_equal(y1, y2, 67 * 45 * sizeof(float));
    free(y1);
    free(y2);
    free(ha);
    free(hb);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static void test_matmul_zero_size(void **state) {
    (void)state;
    for (int num = 0; num < 2; num++) {
        oj_engine *eng = eng_new(num ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST);
        oj_scope_begin(eng);
        oj_tensor *a = leaf(eng, 2, (int64_t[]){3, 0}), *b = leaf(eng, 2, (int64_t[]){0, 4});
        oj_tensor *y = oj_matmul(a, b); // K = 0: zeros [3, 4]
        assert_non_null(y);
        assert_int_equal(oj_numel(y), 12);
        for (int i = 0; i < 12; i++) assert_true(oj_item_at(y, i) == 0.0);
        assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
        assert_int_equal(oj_numel(oj_grad(a)), 0);
        oj_tensor *e = oj_matmul(rnd(eng, 3, (int64_t[]){0, 2, 3}, OJ_F32),
                                 rnd(eng, 2, (int64_t[]){3, 5}, OJ_F32));
        assert_non_null(e);
        assert_int_equal(oj_size(e, 0), 0);
        assert_int_equal(oj_size(e, 2), 5);
        oj_tensor *l = oj_linear(rnd(eng, 2, (int64_t[]){0, 3}, OJ_F32),
                                 rnd(eng, 2, (int64_t[]){4, 3}, OJ_F32),
                                 rnd(eng, 1, (int64_t[]){4}, OJ_F32));
        assert_non_null(l);
        assert_int_equal(oj_numel(l), 0);
        oj_scope_end(eng);
        oj_engine_free(eng);
    }
}

// ---- gradcheck

typedef struct {
    int ra, rb;
    int64_t sa[4], sb[4];
    int ta, tb; // operand given transposed (last two dims)
} gc_case;

static oj_tensor *mm_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    const gc_case *c = ctx;
    oj_tensor *a = c->ta ? oj_transpose(in[0], -1, -2) : oj_retain(in[0]);
    oj_tensor *b = c->tb ? oj_transpose(in[1], -1, -2) : oj_retain(in[1]);
    oj_tensor *y = oj_matmul(a, b);
    oj_release(a);
    oj_release(b);
    return y;
}

static void test_matmul_gradcheck(void **state) {
    (void)state;
    static const gc_case cases[] = {
        {1, 1, {4}, {4}, 0, 0},
        {2, 1, {3, 4}, {4}, 0, 0},
        {1, 2, {4}, {4, 2}, 0, 0},
        {2, 2, {3, 4}, {4, 2}, 0, 0},
        {2, 2, {4, 3}, {2, 4}, 1, 1},             // both transposed
        {3, 2, {2, 3, 4}, {4, 2}, 0, 0},          // folded batch, dB in one GEMM
        {3, 2, {2, 4, 3}, {4, 2}, 1, 0},          // folded batch, a transposed
        {2, 3, {3, 4}, {2, 4, 2}, 0, 0},          // a broadcast over the batch
        {4, 3, {2, 1, 3, 4}, {3, 4, 2}, 0, 0},    // both broadcast
        {1, 3, {4}, {2, 4, 3}, 0, 0},
        {3, 1, {2, 3, 4}, {4}, 0, 0},
        {3, 3, {2, 4, 3}, {2, 2, 4}, 1, 1},
    };
    for (int num = 0; num < 2; num++) {
        oj_engine *eng = eng_new(num ? OJ_NUMERICS_EXACT : OJ_NUMERICS_FAST);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            oj_scope_begin(eng);
            oj_tensor *in[2] = {leaf(eng, cases[c].ra, cases[c].sa),
                                leaf(eng, cases[c].rb, cases[c].sb)};
            oj_status st = oj_gradcheck(eng, mm_fn, (void *)&cases[c], in, 2, NULL);
            if (st != OJ_OK) fail_msg("matmul case %zu: %s", c, oj_last_error(eng));
            oj_scope_end(eng);
        }
        assert_int_equal(oj_engine_live_tensors(eng), 0);
        oj_engine_free(eng);
    }
}

static oj_tensor *bmm_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *bt = oj_transpose(in[1], 1, 2);
    oj_tensor *y = oj_bmm(in[0], bt);
    oj_release(bt);
    return y;
}

static int g_linear_mode; // 0: plain, 1: x transposed (non-contiguous rows), 2: x 1-D
static oj_tensor *linear_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    oj_tensor *x = g_linear_mode == 1 ? oj_transpose(in[0], 0, 1) : oj_retain(in[0]);
    oj_tensor *y = oj_linear(x, in[1], n > 2 ? in[2] : NULL);
    oj_release(x);
    return y;
}

static double g_beta, g_alpha;
static oj_tensor *addmm_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    return oj_addmm(in[0], in[1], in[2], g_beta, g_alpha);
}

static void test_bmm_linear_addmm_gradcheck(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_FAST);
    oj_scope_begin(eng);
    oj_tensor *bi[2] = {leaf(eng, 3, (int64_t[]){2, 3, 4}), leaf(eng, 3, (int64_t[]){2, 5, 4})};
    assert_int_equal(oj_gradcheck(eng, bmm_fn, NULL, bi, 2, NULL), OJ_OK);

    oj_tensor *w = leaf(eng, 2, (int64_t[]){5, 4}), *bias = leaf(eng, 1, (int64_t[]){5});
    oj_tensor *x3 = leaf(eng, 3, (int64_t[]){2, 3, 4});
    oj_tensor *xt = leaf(eng, 3, (int64_t[]){3, 2, 4});
    oj_tensor *x1 = leaf(eng, 1, (int64_t[]){4});
    for (int mode = 0; mode < 3; mode++) {
        g_linear_mode = mode;
        oj_tensor *x = mode == 0 ? x3 : mode == 1 ? xt : x1;
        oj_tensor *in3[3] = {x, w, bias};
        oj_status st = oj_gradcheck(eng, linear_fn, NULL, in3, 3, NULL);
        if (st != OJ_OK) fail_msg("linear mode %d: %s", mode, oj_last_error(eng));
        st = oj_gradcheck(eng, linear_fn, NULL, in3, 2, NULL); // no bias
        if (st != OJ_OK) fail_msg("linear mode %d, no bias: %s", mode, oj_last_error(eng));
    }
    // linear forward equals x W^T + b
    g_linear_mode = 0;
    oj_tensor *y = oj_linear(x3, w, bias);
    oj_tensor *wt = oj_transpose(w, 0, 1);
    oj_tensor *r = oj_add(oj_matmul(x3, wt), bias);
    for (int64_t i = 0; i < oj_numel(y); i++)
        assert_float_equal(oj_item_at(y, i), oj_item_at(r, i), 1e-12);
    assert_string_equal(oj_grad_fn_name(y), "linear");

    oj_tensor *a = leaf(eng, 2, (int64_t[]){3, 4}), *b = leaf(eng, 2, (int64_t[]){4, 2});
    oj_tensor *inputs[3] = {leaf(eng, 2, (int64_t[]){3, 2}), leaf(eng, 1, (int64_t[]){2}),
                            leaf(eng, 2, (int64_t[]){3, 1})};
    double betas[3] = {1.0, 0.5, 0.0}, alphas[3] = {1.0, -2.0, 3.0};
    for (int i = 0; i < 3; i++) {
        g_beta = betas[i];
        g_alpha = alphas[i];
        oj_tensor *in[3] = {inputs[i], a, b};
        oj_status st = oj_gradcheck(eng, addmm_fn, NULL, in, 3, NULL);
        if (st != OJ_OK) fail_msg("addmm %d: %s", i, oj_last_error(eng));
    }
    // one addmm node; with beta 0 the input still gets a (zero) gradient, as torch
    oj_tensor *am = oj_addmm(inputs[0], a, b, 0.0, 2.0);
    assert_string_equal(oj_grad_fn_name(am), "addmm");
    oj_zero_grad(inputs[0]);
    assert_int_equal(oj_backward(oj_sum_all(am), false), OJ_OK);
    assert_non_null(oj_grad(inputs[0]));
    for (int64_t i = 0; i < 6; i++) assert_true(oj_item_at(oj_grad(inputs[0]), i) == 0.0);
    oj_scope_end(eng);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

// linear on a GPT-sized activation: one GEMM, grads match the matmul path
static void test_linear_matches_matmul(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_FAST);
    oj_scope_begin(eng);
    oj_tensor *x = rnd(eng, 3, (int64_t[]){2, 16, 32}, OJ_F32);
    oj_tensor *w = rnd(eng, 2, (int64_t[]){48, 32}, OJ_F32);
    oj_tensor *b = rnd(eng, 1, (int64_t[]){48}, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(b, true);
    oj_tensor *y1 = oj_linear(x, w, b);
    assert_int_equal(oj_backward(oj_sum_all(oj_square(y1)), false), OJ_OK);
    oj_tensor *gx1 = oj_clone(oj_grad(x)), *gw1 = oj_clone(oj_grad(w)), *gb1 = oj_clone(oj_grad(b));
    oj_zero_grad(x);
    oj_zero_grad(w);
    oj_zero_grad(b);
    oj_tensor *y2 = oj_add(oj_matmul(x, oj_transpose(w, 0, 1)), b);
    assert_int_equal(oj_backward(oj_sum_all(oj_square(y2)), false), OJ_OK);
    oj_tensor *pairs[4][2] = {{y1, y2}, {gx1, oj_grad(x)}, {gw1, oj_grad(w)}, {gb1, oj_grad(b)}};
    for (int p = 0; p < 4; p++)
        for (int64_t i = 0; i < oj_numel(pairs[p][0]); i++) {
            double u = oj_item_at(pairs[p][0], i), v = oj_item_at(pairs[p][1], i);
            assert_true(fabs(u - v) <= 1e-4 * (1 + fabs(v)));
        }
    oj_scope_end(eng);
    oj_engine_free(eng);
}

// test: a linear over a transposed weight (GPT-2's Conv1D [in, out] seen as
// [out, in]) under bf16 autocast: its bf16 copy holds the same values, the
// gradient reaches the stored [in, out] leaf contiguous, and values and
// gradients equal those of the same weight stored [out, in] bit for bit
// (EXACT)
static void test_linear_conv1d_layout(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_EXACT);
    oj_scope_begin(eng);
    oj_tensor *x = rnd(eng, 3, (int64_t[]){2, 5, 24}, OJ_F32);
    oj_tensor *wc = rnd(eng, 2, (int64_t[]){24, 40}, OJ_F32); /* [in, out] */
    oj_tensor *wl = oj_contiguous(oj_transpose(wc, 0, 1));     /* [out, in] */
    oj_tensor *b = rnd(eng, 1, (int64_t[]){40}, OJ_F32);
    oj_set_requires_grad(wc, true);
    oj_set_requires_grad(wl, true);
    /* cast of a transposed matrix: the same values */
    oj_tensor *wt = oj_transpose(wc, 0, 1);
    oj_tensor *wb = oj_cast(wt, OJ_BF16);
    assert_non_null(wb);
    oj_tensor *wr = oj_cast(oj_contiguous(wt), OJ_BF16);
    for (int64_t i = 0; i < oj_numel(wb); i++)
        assert_true(oj_item_at(wb, i) == oj_item_at(wr, i));
    oj_tensor *r = rnd(eng, 3, (int64_t[]){2, 5, 40}, OJ_F32);
    oj_set_autocast(eng, true, OJ_BF16);
    oj_tensor *y1 = oj_linear(x, wt, b), *y2 = oj_linear(x, wl, b);
    oj_set_autocast(eng, false, OJ_BF16);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y1, r)), false), OJ_OK);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y2, r)), false), OJ_OK);
    for (int64_t i = 0; i < oj_numel(y1); i++)
        assert_true(oj_item_at(y1, i) == oj_item_at(y2, i));
    oj_tensor *g1 = oj_grad(wc), *g2 = oj_grad(wl);
    assert_non_null(g1);
    assert_non_null(g2);
    assert_true(oj_is_contiguous(g1));
    assert_int_equal(oj_tensor_dtype(g1), OJ_F32);
    oj_tensor *g1t = oj_transpose(g1, 0, 1); /* [out, in] */
    for (int64_t i = 0; i < oj_numel(g2); i++)
        assert_true(oj_item_at(g1t, i) == oj_item_at(g2, i));
    oj_scope_end(eng);
    oj_engine_free(eng);
}

static void test_bad_input(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_FAST);
    oj_scope_begin(eng);
    oj_tensor *a = rnd(eng, 2, (int64_t[]){2, 3}, OJ_F32);
    oj_tensor *b = rnd(eng, 2, (int64_t[]){4, 5}, OJ_F32);
    assert_null(oj_matmul(a, b));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_string_equal(oj_last_error(eng),
                        "matmul: shapes [2, 3] and [4, 5] do not fit: inner dims 3 != 4");
    oj_clear_error(eng);

    oj_tensor *s = oj_scalar(eng, 1.0, OJ_F32);
    assert_null(oj_matmul(s, a));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "at least 1 dim"));
    oj_clear_error(eng);

    oj_tensor *d = rnd(eng, 2, (int64_t[]){3, 2}, OJ_F64);
    assert_null(oj_matmul(a, d));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    assert_non_null(strstr(oj_last_error(eng), "f32 and f64"));
    oj_clear_error(eng);

    oj_tensor *ia = oj_zeros(eng, 2, (int64_t[]){2, 2}, OJ_I64);
    assert_null(oj_matmul(ia, ia));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);

    // batch dims that do not broadcast
    oj_tensor *x = rnd(eng, 3, (int64_t[]){2, 2, 3}, OJ_F32);
    oj_tensor *y = rnd(eng, 3, (int64_t[]){3, 3, 2}, OJ_F32);
    assert_null(oj_matmul(x, y));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "do not broadcast"));
    oj_clear_error(eng);

    assert_null(oj_bmm(a, b));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "bmm"));
    oj_clear_error(eng);
    assert_null(oj_bmm(x, oj_transpose(y, 1, 2)));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);

    oj_tensor *w = rnd(eng, 2, (int64_t[]){4, 5}, OJ_F32);
    assert_null(oj_linear(a, w, NULL));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_string_equal(oj_last_error(eng),
                        "linear: x [2, 3] and weight [4, 5] do not fit: expected x [..., in] "
                        "and weight [out, in]");
    oj_clear_error(eng);
    oj_tensor *w2 = rnd(eng, 2, (int64_t[]){4, 3}, OJ_F32);
    oj_tensor *bias = rnd(eng, 1, (int64_t[]){5}, OJ_F32);
    assert_null(oj_linear(a, w2, bias));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "bias [5]"));
    oj_clear_error(eng);

    oj_tensor *big = rnd(eng, 2, (int64_t[]){4, 4}, OJ_F32);
    assert_null(oj_addmm(big, a, w2 /* [4,3] */, 1, 1));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    oj_tensor *okb = rnd(eng, 2, (int64_t[]){3, 3}, OJ_F32);
    assert_null(oj_addmm(big, okb, okb, 1, 1)); // [4,4] does not broadcast to [3,3]
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "addmm"));
    oj_clear_error(eng);

    assert_null(oj_matmul(NULL, a)); // NULL in: NULL out, no second error
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_null(oj_linear(a, NULL, NULL));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- gelu_linear */

static bool g_gl_tanh;
static oj_tensor *g_w1; /* [6, 6]: the MLP's first product in gl_run */
static oj_tensor *gelu_linear_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return oj_gelu_linear(in[0], in[1], n > 2 ? in[2] : NULL, g_gl_tanh);
}

/* Values and gradients of x, W, b through one of the two forms. */
static void gl_run(oj_engine *eng, bool fused, bool tanh_form, bool with_bias, oj_tensor *x,
                   oj_tensor *w, oj_tensor *b, float *out, float *gx, float *gw, float *gb) {
    oj_zero_grad(x);
    oj_zero_grad(w);
    oj_zero_grad(b);
    oj_scope_begin(eng);
    oj_tensor *bb = with_bias ? b : NULL, *y;
    /* an MLP's shape: u = x W1^T (bf16 under autocast, as gelu's input is in
     * a GPT), then the two forms on u */
    oj_tensor *u = oj_linear(x, g_w1, NULL);
    if (fused) {
        y = oj_gelu_linear(u, w, bb, tanh_form);
    } else {
        oj_tensor *h = tanh_form ? oj_gelu_tanh(u) : oj_gelu(u);
        y = oj_linear(h, w, bb);
    }
    assert_non_null(y);
    int64_t ny = oj_numel(y);
    oj_tensor *yf = oj_cast(y, OJ_F32);
    assert_int_equal(oj_to_host(yf, out, (size_t)ny * sizeof(float)), OJ_OK);
    /* a non-uniform upstream gradient */
    oj_tensor *wgt = oj_rand_uniform(eng, oj_rank(y), oj_shape(y), oj_tensor_dtype(y), -1, 1);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, wgt)), false), OJ_OK);
    oj_tensor *grads[3] = {oj_grad(x), oj_grad(w), with_bias ? oj_grad(b) : NULL};
    float *dst[3] = {gx, gw, gb};
    for (int i = 0; i < 3; i++) {
        if (grads[i] == NULL) continue;
        oj_tensor *gf = oj_cast(grads[i], OJ_F32);
        assert_int_equal(oj_to_host(gf, dst[i], (size_t)oj_numel(gf) * sizeof(float)), OJ_OK);
    }
    oj_scope_end(eng);
}

/* gelu_linear equals gelu + linear bit for bit (values and the three
 * gradients; erf and tanh forms; with and without bias; f32 and under
 * bf16 autocast), keeps x instead of gelu(x), and passes gradcheck. */
static void test_gelu_linear(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_FAST);
    int64_t xs[3] = {2, 5, 6}, ws[2] = {7, 6}, bs[1] = {7};
    oj_tensor *x = rnd(eng, 3, xs, OJ_F32), *w = rnd(eng, 2, ws, OJ_F32), *b = rnd(eng, 1, bs, OJ_F32);
    oj_set_requires_grad(x, true);
    oj_set_requires_grad(w, true);
    oj_set_requires_grad(b, true);
    int64_t w1s[2] = {6, 6};
    g_w1 = rnd(eng, 2, w1s, OJ_F32);
    for (int ac = 0; ac < 2; ac++)
        for (int form = 0; form < 2; form++)
            for (int bias = 0; bias < 2; bias++) {
                oj_set_autocast(eng, ac == 1, OJ_BF16);
                float o1[70], o2[70], gx1[60], gx2[60], gw1[42], gw2[42], gb1[7] = {0}, gb2[7] = {0};
                uint64_t off = oj_rng_offset(eng);
                gl_run(eng, false, form, bias, x, w, b, o1, gx1, gw1, gb1);
                oj_rng_set_offset(eng, off); /* the same upstream gradient */
                gl_run(eng, true, form, bias, x, w, b, o2, gx2, gw2, gb2);
                oj_set_autocast(eng, false, OJ_BF16);
                if (memcmp(o1, o2, sizeof o1) || memcmp(gx1, gx2, sizeof gx1) ||
                    memcmp(gw1, gw2, sizeof gw1) || memcmp(gb1, gb2, sizeof gb1))
                    fail_msg("gelu_linear differs from gelu + linear (autocast %d, tanh %d, "
                             "bias %d)",
                             ac, form, bias);
            }
    oj_scope_begin(eng);
    oj_tensor *y = oj_gelu_linear(x, w, b, true);
    assert_string_equal(oj_grad_fn_name(y), "gelu_linear");
    oj_scope_end(eng);
    /* gradcheck in f64 */
    oj_scope_begin(eng);
    oj_tensor *in[3] = {leaf(eng, 3, xs), leaf(eng, 2, ws), leaf(eng, 1, bs)};
    for (int form = 0; form < 2; form++) {
        g_gl_tanh = form == 1;
        oj_status st = oj_gradcheck(eng, gelu_linear_fn, NULL, in, 3, NULL);
        if (st != OJ_OK) fail_msg("gelu_linear form %d: %s", form, oj_last_error(eng));
        st = oj_gradcheck(eng, gelu_linear_fn, NULL, in, 2, NULL);
        if (st != OJ_OK) fail_msg("gelu_linear form %d, no bias: %s", form, oj_last_error(eng));
    }
    /* a shape error names linear's check */
    int64_t bad[2] = {7, 5};
    assert_null(oj_gelu_linear(in[0], rnd(eng, 2, bad, OJ_F64), NULL, false));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_release(x);
    oj_release(w);
    oj_release(b);
    oj_release(g_w1);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* swiglu_linear equals silu + mul + linear bit for bit (values, the
 * gradients of x through both products, of W and b; f32 and bf16
 * autocast), and passes gradcheck. */
static void sw_run(oj_engine *eng, bool fused, bool with_bias, oj_tensor *x, oj_tensor *wg,
                   oj_tensor *wu, oj_tensor *w, oj_tensor *b, float *out, float *grads) {
    oj_tensor *ps[5] = {x, wg, wu, w, b};
    for (int i = 0; i < 5; i++) oj_zero_grad(ps[i]);
    oj_scope_begin(eng);
    oj_tensor *bb = with_bias ? b : NULL, *y;
    oj_tensor *gate = oj_linear(x, wg, NULL), *up = oj_linear(x, wu, NULL);
    if (fused) y = oj_swiglu_linear(gate, up, w, bb);
    else y = oj_linear(oj_mul(oj_silu(gate), up), w, bb);
    assert_non_null(y);
    oj_tensor *yf = oj_cast(y, OJ_F32);
    assert_int_equal(oj_to_host(yf, out, (size_t)oj_numel(yf) * sizeof(float)), OJ_OK);
    oj_tensor *wgt = oj_rand_uniform(eng, oj_rank(y), oj_shape(y), oj_tensor_dtype(y), -1, 1);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, wgt)), false), OJ_OK);
    size_t at = 0;
    for (int i = 0; i < 5; i++) {
        if (i == 4 && !with_bias) continue;
        oj_tensor *gf = oj_cast(oj_grad(ps[i]), OJ_F32);
        assert_non_null(gf);
        assert_int_equal(oj_to_host(gf, grads + at, (size_t)oj_numel(gf) * sizeof(float)), OJ_OK);
        at += (size_t)oj_numel(gf);
    }
    oj_scope_end(eng);
}

static oj_tensor *swiglu_linear_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return oj_swiglu_linear(in[0], in[1], in[2], n > 3 ? in[3] : NULL);
}

static void test_swiglu_linear(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_FAST);
    int64_t xs[3] = {2, 3, 4}, hs[2] = {6, 4}, ws[2] = {5, 6}, bs[1] = {5};
    oj_tensor *x = rnd(eng, 3, xs, OJ_F32), *wg = rnd(eng, 2, hs, OJ_F32),
              *wu = rnd(eng, 2, hs, OJ_F32), *w = rnd(eng, 2, ws, OJ_F32), *b = rnd(eng, 1, bs, OJ_F32);
    oj_tensor *ps[5] = {x, wg, wu, w, b};
    for (int i = 0; i < 5; i++) oj_set_requires_grad(ps[i], true);
    for (int ac = 0; ac < 2; ac++)
        for (int bias = 0; bias < 2; bias++) {
            oj_set_autocast(eng, ac == 1, OJ_BF16);
            float o1[30], o2[30], g1[24 + 24 + 24 + 30 + 5] = {0}, g2[24 + 24 + 24 + 30 + 5] = {0};
            uint64_t off = oj_rng_offset(eng);
            sw_run(eng, false, bias, x, wg, wu, w, b, o1, g1);
            oj_rng_set_offset(eng, off);
            sw_run(eng, true, bias, x, wg, wu, w, b, o2, g2);
            oj_set_autocast(eng, false, OJ_BF16);
            if (memcmp(o1, o2, sizeof o1) || memcmp(g1, g2, sizeof g1))
                fail_msg("swiglu_linear differs from silu * up + linear (autocast %d, bias %d)",
                         ac, bias);
        }
    oj_scope_begin(eng);
    int64_t gs[3] = {2, 3, 6};
    oj_tensor *in[4] = {leaf(eng, 3, gs), leaf(eng, 3, gs), leaf(eng, 2, ws), leaf(eng, 1, bs)};
    assert_int_equal(oj_gradcheck(eng, swiglu_linear_fn, NULL, in, 4, NULL), OJ_OK);
    assert_int_equal(oj_gradcheck(eng, swiglu_linear_fn, NULL, in, 3, NULL), OJ_OK);
    /* gate and up the halves of one [.., 2F] tensor (a fused projection
     * split in two): their gradients are written as the halves of one
     * buffer that the split's backward passes on as a view; the same bits
     * as separate gate and up leaves */
    int64_t g2s[3] = {2, 3, 12};
    oj_tensor *gu = rnd(eng, 3, g2s, OJ_F32), *wd = rnd(eng, 2, ws, OJ_F32);
    oj_set_requires_grad(gu, true);
    oj_tensor *halves[2] = {NULL, NULL};
    assert_int_equal(oj_split(gu, 6, 2, 2, halves), 2);
    assert_int_equal(oj_backward(oj_sum_all(oj_square(oj_swiglu_linear(halves[0], halves[1], wd,
                                                                        NULL))),
                                 false),
                     OJ_OK);
    oj_tensor *ga = oj_contiguous(halves[0]), *ua = oj_contiguous(halves[1]);
    oj_tensor *gd = oj_detach(ga), *ud = oj_detach(ua);
    oj_set_requires_grad(gd, true);
    oj_set_requires_grad(ud, true);
    assert_int_equal(oj_backward(oj_sum_all(oj_square(oj_swiglu_linear(gd, ud, wd, NULL))), false),
                     OJ_OK);
    oj_tensor *gg = oj_grad(gu);
    assert_non_null(gg);
    for (int64_t r = 0; r < 6; r++)
        for (int64_t c = 0; c < 12; c++) {
            oj_tensor *ref = c < 6 ? oj_grad(gd) : oj_grad(ud);
            assert_true(oj_item_at(gg, r * 12 + c) == oj_item_at(ref, r * 6 + c % 6));
        }
    int64_t other[3] = {2, 3, 5};
    assert_null(oj_swiglu_linear(in[0], leaf(eng, 3, other), in[2], NULL));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "one shape"));
    oj_clear_error(eng);
    oj_scope_end(eng);
    for (int i = 0; i < 5; i++) oj_release(ps[i]);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---- swiglu_linear on strided (interleaved) gate/up slices with and without
 * a bias, gate and up one tensor, mismatched shapes and dtypes: against
 * linear(silu(gate) * up) bit for bit */

/* ---------------------------------------------------------------- swiglu_linear */

static void test_swiglu_strided(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    const int64_t N = 5, Hd = 7, O = 3;
    int64_t gu[2] = {N, 2 * Hd}, ws[2] = {O, Hd}, bs[1] = {O};
    const oj_dtype dts[3] = {OJ_F32, OJ_F64, OJ_BF16};
    for (int k = 0; k < 3; k++)
        for (int m = 0; m < 4; m++) { /* bit 0 bias, bit 1 interleaved (stride 2) gate/up */
            oj_scope_begin(eng);
            oj_tensor *h0 = nt_rand(eng, 2, gu, dts[k], -2, 2);
            oj_tensor *w0 = nt_rand(eng, 2, ws, dts[k], -1, 1),
                      *b0 = nt_rand(eng, 1, bs, dts[k], -1, 1);
            oj_tensor *y[2], *gh[2], *gw[2], *gb[2];
            for (int f = 0; f < 2; f++) {
                oj_tensor *h = oj_set_requires_grad(oj_clone(h0), true);
                oj_tensor *w = oj_set_requires_grad(oj_clone(w0), true);
                oj_tensor *b = (m & 1) ? oj_set_requires_grad(oj_clone(b0), true) : NULL;
                oj_tensor *gate = (m & 2) ? oj_slice(h, 1, 0, 2 * Hd, 2) : oj_narrow(h, 1, 0, Hd);
                oj_tensor *up = (m & 2) ? oj_slice(h, 1, 1, 2 * Hd, 2) : oj_narrow(h, 1, Hd, Hd);
                y[f] = f ? oj_swiglu_linear(gate, up, w, b)
                         : oj_linear(oj_mul(oj_silu(gate), up), w, b);
                if (y[f] == NULL)
                    fail_msg("%s", oj_last_error(eng));
                assert_int_equal(oj_backward(oj_sum_all(oj_mul(y[f], y[f])), false), OJ_OK);
                gh[f] = oj_grad(h);
                gw[f] = oj_grad(w);
                gb[f] = b ? oj_grad(b) : NULL;
            }
            nt_close_tensors("swiglu y", y[1], y[0], 0, 0);
            nt_close_tensors("swiglu dh", gh[1], gh[0], 0, 0);
            nt_close_tensors("swiglu dw", gw[1], gw[0], 0, 0);
            if (m & 1)
                nt_close_tensors("swiglu db", gb[1], gb[0], 0, 0);
            oj_scope_end(eng);
        }
    /* gate and up one tensor; mismatched shapes; dtypes */
    oj_scope_begin(eng);
    int64_t g1[2] = {N, Hd}, g2[2] = {N, Hd + 1}, g3[3] = {1, N, Hd};
    oj_tensor *a = oj_set_requires_grad(nt_rand(eng, 2, g1, OJ_F64, -2, 2), true);
    oj_tensor *w = nt_rand(eng, 2, ws, OJ_F64, -1, 1);
    oj_tensor *y = oj_swiglu_linear(a, a, w, NULL);
    assert_int_equal(oj_backward(oj_sum_all(y), false), OJ_OK);
    oj_tensor *ga = oj_clone(oj_grad(a));
    oj_zero_grad(a);
    assert_int_equal(oj_backward(oj_sum_all(oj_linear(oj_mul(oj_silu(a), a), w, NULL)), false),
                     OJ_OK);
    nt_close_tensors("gate == up", ga, oj_grad(a), 1e-12, 1e-12);
    nt_expect_error(eng, oj_swiglu_linear(a, nt_rand(eng, 2, g2, OJ_F64, -1, 1), w, NULL),
                    OJ_ERR_SHAPE, "swiglu_linear", "gate");
    nt_expect_error(eng, oj_swiglu_linear(a, nt_rand(eng, 3, g3, OJ_F64, -1, 1), w, NULL),
                    OJ_ERR_SHAPE, "swiglu_linear", "gate");
    nt_expect_error(eng, oj_swiglu_linear(a, oj_cast(a, OJ_F32), w, NULL), OJ_ERR_DTYPE,
                    "swiglu_linear", NULL);
    nt_expect_error(eng, oj_swiglu_linear(a, a, nt_rand(eng, 2, g2, OJ_F64, -1, 1), NULL),
                    OJ_ERR_SHAPE, NULL, NULL);
    nt_expect_error(eng, oj_swiglu_linear(a, a, w, nt_rand(eng, 1, g1, OJ_F64, -1, 1)),
                    OJ_ERR_SHAPE, NULL, NULL);
    nt_expect_error(eng, oj_swiglu_linear(a, a, w, nt_rand(eng, 1, bs, OJ_F32, -1, 1)),
                    OJ_ERR_DTYPE, NULL, NULL);
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* oj__mul_linear (nanolab's gated attention output into its projection)
 * equals mul + reshape + linear bit for bit: the values and the
 * gradients of a (a transposed view, as the model passes it), of the
 * broadcast gate b and of W, f32 and under bf16 autocast; gradcheck in
 * f64; a b that does not broadcast to a's shape is refused by name. */
static void ml_run(oj_engine *eng, bool fused, oj_tensor *x, oj_tensor *b, oj_tensor *w,
                   float *out, float *grads) {
    oj_tensor *ps[3] = {x, b, w};
    for (int i = 0; i < 3; i++) oj_zero_grad(ps[i]);
    oj_scope_begin(eng);
    oj_tensor *a = oj_transpose(x, 1, 2), *y; /* [2, 3, 4, 5] */
    if (fused) {
        y = oj__mul_linear(a, b, w);
    } else {
        int64_t ms[3] = {2, 3, 20};
        y = oj_linear(oj_reshape(oj_mul(a, b), 3, ms), w, NULL);
    }
    assert_non_null(y);
    oj_tensor *yf = oj_cast(y, OJ_F32);
    assert_int_equal(oj_to_host(yf, out, (size_t)oj_numel(yf) * sizeof(float)), OJ_OK);
    oj_tensor *wgt = oj_rand_uniform(eng, oj_rank(y), oj_shape(y), oj_tensor_dtype(y), -1, 1);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(y, wgt)), false), OJ_OK);
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        oj_tensor *gf = oj_cast(oj_grad(ps[i]), OJ_F32);
        assert_non_null(gf);
        assert_int_equal(oj_to_host(gf, grads + at, (size_t)oj_numel(gf) * sizeof(float)), OJ_OK);
        at += (size_t)oj_numel(gf);
    }
    oj_scope_end(eng);
}

static oj_tensor *mul_linear_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    return oj__mul_linear(in[0], in[1], in[2]);
}

static void test_mul_linear(void **state) {
    (void)state;
    oj_engine *eng = eng_new(OJ_NUMERICS_FAST);
    int64_t xs[4] = {2, 4, 3, 5}, bs[4] = {2, 3, 4, 1}, ws[2] = {6, 20};
    oj_tensor *w = rnd(eng, 2, ws, OJ_F32);
    oj_set_requires_grad(w, true);
    /* f32 a and b; under autocast f32 (the chain runs) and bf16 (fused) */
    for (int ac = 0; ac < 3; ac++) {
        oj_dtype dt = ac == 2 ? OJ_BF16 : OJ_F32;
        oj_tensor *x = rnd(eng, 4, xs, dt), *b = rnd(eng, 4, bs, dt);
        oj_set_requires_grad(x, true);
        oj_set_requires_grad(b, true);
        oj_set_autocast(eng, ac >= 1, OJ_BF16);
        float o1[36], o2[36], g1[120 + 24 + 120] = {0}, g2[120 + 24 + 120] = {0};
        uint64_t off = oj_rng_offset(eng);
        ml_run(eng, false, x, b, w, o1, g1);
        oj_rng_set_offset(eng, off);
        ml_run(eng, true, x, b, w, o2, g2);
        oj_set_autocast(eng, false, OJ_BF16);
        if (memcmp(o1, o2, sizeof o1) || memcmp(g1, g2, sizeof g1))
            fail_msg("mul_linear differs from mul + reshape + linear (case %d)", ac);
        oj_release(x);
        oj_release(b);
    }
    oj_scope_begin(eng);
    int64_t as[4] = {2, 3, 4, 5};
    oj_tensor *in[3] = {leaf(eng, 4, as), leaf(eng, 4, bs), leaf(eng, 2, ws)};
    assert_int_equal(oj_gradcheck(eng, mul_linear_fn, NULL, in, 3, NULL), OJ_OK);
    int64_t big[4] = {2, 3, 4, 7};
    assert_null(oj__mul_linear(in[1], leaf(eng, 4, big), in[2]));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "mul_linear"));
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_forward),
        cmocka_unit_test(test_matmul_strided),
        cmocka_unit_test(test_matmul_exact_determinism),
        cmocka_unit_test(test_matmul_zero_size),
        cmocka_unit_test(test_matmul_gradcheck),
        cmocka_unit_test(test_bmm_linear_addmm_gradcheck),
        cmocka_unit_test(test_linear_matches_matmul),
        cmocka_unit_test(test_linear_conv1d_layout),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_gelu_linear),
        cmocka_unit_test(test_swiglu_linear),
        cmocka_unit_test(test_mul_linear),
        cmocka_unit_test(test_swiglu_strided),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
