// test: shape and indexing ops — cat, stack, split/chunk, flip, pad, gather,
// scatter_add, index_select, index_add, masked_fill, tril/triu, one_hot,
// repeat: forward values against hand-computed references, gradcheck on
// random non-zero f64 inputs (non-contiguous and zero-size included), and
// bad inputs returning clear errors.
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

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 11;
    cfg.threads = 1;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

static void eng_done(oj_engine *eng) {
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* f64 leaf of uniform values in [lo, hi) that requires grad. */
static oj_tensor *leaf(oj_engine *eng, int rank, const int64_t *shape, double lo, double hi) {
    oj_tensor *t = oj_rand_uniform(eng, rank, shape, OJ_F64, lo, hi);
    assert_non_null(t);
    oj_set_requires_grad(t, true);
    return t;
}

/* A tensor holding 0, 1, 2, ... of dtype dt. */
static oj_tensor *iota(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    oj_tensor *a = oj_arange(eng, 0, (double)n, 1, dt);
    oj_tensor *r = oj_reshape(a, rank, shape);
    oj_release(a);
    assert_non_null(r);
    return r;
}

static oj_tensor *idx_tensor(oj_engine *eng, int rank, const int64_t *shape, const int64_t *v) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    oj_tensor *t = oj_from_host(eng, rank, shape, OJ_I64, v, (size_t)n * sizeof *v);
    assert_non_null(t);
    return t;
}

static void expect_shape(oj_tensor *t, int rank, const int64_t *shape) {
    assert_non_null(t);
    assert_int_equal(oj_rank(t), rank);
    for (int d = 0; d < rank; d++) assert_int_equal(oj_size(t, d), shape[d]);
}

static void expect_values(oj_tensor *t, const double *want, int64_t n) {
    assert_int_equal(oj_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        double v = oj_item_at(t, i);
        if (fabs(v - want[i]) > 1e-12) fail_msg("element %lld: got %g, want %g", (long long)i, v, want[i]);
    }
}

static void expect_error(oj_engine *eng, oj_status st, const char *a, const char *b) {
    assert_int_equal(oj_last_status(eng), st);
    if (a && !strstr(oj_last_error(eng), a)) fail_msg("error '%s' lacks '%s'", oj_last_error(eng), a);
    if (b && !strstr(oj_last_error(eng), b)) fail_msg("error '%s' lacks '%s'", oj_last_error(eng), b);
    oj_clear_error(eng);
}

static void gradcheck_ok(oj_engine *eng, oj_gradcheck_fn f, void *ctx, oj_tensor *const *in,
                         int n, const char *what) {
    oj_status st = oj_gradcheck(eng, f, ctx, in, n, NULL);
    if (st != OJ_OK) fail_msg("gradcheck %s: %s", what, oj_last_error(eng));
}

/* ---------------------------------------------------------------- cat */

static oj_tensor *cat_fn(oj_tensor *const *in, int n, void *ctx) {
    int dim = *(int *)ctx;
    /* input 0 enters transposed (non-contiguous) */
    oj_tensor *t = oj_transpose(in[0], 0, 1);
    oj_tensor *parts[16];
    parts[0] = t;
    for (int k = 1; k < n; k++) parts[k] = in[k];
    oj_tensor *y = oj_cat(n, parts, dim);
    oj_release(t);
    return y;
}

static void test_cat(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s23[2] = {2, 3}, s22[2] = {2, 2}, s13[2] = {1, 3};
    oj_tensor *a = iota(eng, 2, s23, OJ_F64), *b = iota(eng, 2, s22, OJ_F64);
    oj_tensor *ab[2] = {a, b};
    oj_tensor *y = oj_cat(2, ab, 1);
    int64_t s25[2] = {2, 5};
    expect_shape(y, 2, s25);
    double w1[10] = {0, 1, 2, 0, 1, 3, 4, 5, 2, 3};
    expect_values(y, w1, 10);
    // dim -2, promotion i64 + f32 -> f32, and the legacy 1-D empty skipped
    oj_tensor *c = iota(eng, 2, s13, OJ_I64);
    oj_tensor *f = oj_full(eng, 2, s23, OJ_F32, 7);
    int64_t s0[1] = {0};
    oj_tensor *e = oj_zeros(eng, 1, s0, OJ_F64);
    oj_tensor *ce[3] = {c, e, f};
    oj_tensor *z = oj_cat(3, ce, -2);
    int64_t s33[2] = {3, 3};
    expect_shape(z, 2, s33);
    assert_int_equal(oj_tensor_dtype(z), OJ_F64); // the skipped f64 still promotes
    double w2[9] = {0, 1, 2, 7, 7, 7, 7, 7, 7};
    expect_values(z, w2, 9);
    // zero-size pieces along dim
    int64_t s20[2] = {2, 0};
    oj_tensor *empty = oj_zeros(eng, 2, s20, OJ_F64);
    oj_tensor *ea[3] = {empty, a, empty};
    oj_tensor *q = oj_cat(3, ea, 1);
    expect_shape(q, 2, s23);
    double wa[6] = {0, 1, 2, 3, 4, 5};
    expect_values(q, wa, 6);

    // gradcheck: two inputs, the first non-contiguous ([3,2] transposed), both dims
    int64_t s32[2] = {3, 2}, s43[2] = {4, 3}, s24[2] = {2, 4};
    for (int dim = 0; dim < 2; dim++) {
        oj_tensor *in[2] = {leaf(eng, 2, s32, -1, 1), leaf(eng, 2, dim ? s24 : s43, -1, 1)};
        gradcheck_ok(eng, cat_fn, &dim, in, 2, "cat");
    }
    // more inputs than an autograd node holds (grouped), and a zero-size one
    oj_tensor *many[11];
    for (int k = 0; k < 11; k++) {
        int64_t sk[2] = {k == 0 ? 3 : 2, k == 5 ? 0 : 1 + k % 2};
        if (k == 0) sk[1] = 2, sk[0] = 2; // transposed: [2, 2]
        many[k] = leaf(eng, 2, sk, -1, 1);
    }
    int dim1 = 1;
    gradcheck_ok(eng, cat_fn, &dim1, many, 11, "cat of 11");

    // errors
    oj_tensor *bad[2] = {a, c};
    assert_null(oj_cat(2, bad, 1)); // [2,3] and [1,3] along 1
    expect_error(eng, OJ_ERR_SHAPE, "[1, 3]", "[2, 3]");
    assert_null(oj_cat(2, ab, 2));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "cat", "dim 2");
    oj_tensor *sc = oj_scalar(eng, 1, OJ_F64);
    oj_tensor *scs[1] = {sc};
    assert_null(oj_cat(1, scs, 0));
    expect_error(eng, OJ_ERR_SHAPE, "zero-dimensional", NULL);
    assert_null(oj_cat(0, ab, 0));
    oj_tensor *withnull[2] = {a, NULL};
    assert_null(oj_cat(2, withnull, 0));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- stack */

static oj_tensor *stack_fn(oj_tensor *const *in, int n, void *ctx) {
    return oj_stack(n, in, *(int *)ctx);
}

static void test_stack(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s2[1] = {2};
    double av[2] = {1, 2}, bv[2] = {3, 4};
    oj_tensor *ab[2] = {oj_from_host(eng, 1, s2, OJ_F64, av, sizeof av),
                        oj_from_host(eng, 1, s2, OJ_F64, bv, sizeof bv)};
    oj_tensor *y0 = oj_stack(2, ab, 0), *y1 = oj_stack(2, ab, -1);
    int64_t s22[2] = {2, 2};
    expect_shape(y0, 2, s22);
    double w0[4] = {1, 2, 3, 4}, w1[4] = {1, 3, 2, 4};
    expect_values(y0, w0, 4);
    expect_values(y1, w1, 4);
    int64_t s23[2] = {2, 3};
    for (int dim = -3; dim <= 2; dim++) {
        oj_tensor *in[3] = {leaf(eng, 2, s23, -1, 1), leaf(eng, 2, s23, -1, 1),
                            leaf(eng, 2, s23, -1, 1)};
        gradcheck_ok(eng, stack_fn, &dim, in, 3, "stack");
    }
    int64_t s3[1] = {3};
    oj_tensor *bad[2] = {ab[0], oj_zeros(eng, 1, s3, OJ_F64)};
    assert_null(oj_stack(2, bad, 0));
    expect_error(eng, OJ_ERR_SHAPE, "[3]", "[2]");
    assert_null(oj_stack(2, ab, 2));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "stack", NULL);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- split/chunk */

static oj_tensor *split_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *p[4] = {0};
    int cnt = oj_split(in[0], 2, 1, 4, p); // [3, 5] -> [3,2] [3,2] [3,1]
    if (cnt != 3) return NULL;
    oj_tensor *m = oj_mul(p[0], p[1]);
    oj_tensor *y = oj_add(m, p[2]); // broadcast [3,1]
    oj_release(m);
    for (int k = 0; k < cnt; k++) oj_release(p[k]);
    return y;
}

static oj_tensor *chunk_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    (void)ctx;
    oj_tensor *t = oj_transpose(in[0], 0, 1); // [5, 3], non-contiguous
    oj_tensor *p[3] = {0};
    int cnt = oj_chunk(t, 3, 0, 3, p); // 2, 2, 1 rows
    oj_release(t);
    if (cnt != 3) return NULL;
    oj_tensor *y = oj_cat(3, (oj_tensor *const[]){p[2], p[0], p[1]}, 0);
    for (int k = 0; k < cnt; k++) oj_release(p[k]);
    return y;
}

static void test_split_chunk(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {2, 5};
    oj_tensor *x = iota(eng, 2, s, OJ_F64);
    oj_tensor *p[4] = {0};
    assert_int_equal(oj_split(x, 2, 1, 0, NULL), 3);
    assert_int_equal(oj_split(x, 2, -1, 4, p), 3);
    assert_int_equal(oj_size(p[2], 1), 1);
    assert_true(oj_shares_storage(p[1], x));
    double w1[4] = {2, 3, 7, 8};
    expect_values(p[1], w1, 4);
    for (int k = 0; k < 3; k++) oj_release(p[k]);
    assert_int_equal(oj_chunk(x, 2, 1, 4, p), 2); // 3 + 2
    assert_int_equal(oj_size(p[0], 1), 3);
    assert_int_equal(oj_size(p[1], 1), 2);
    oj_release(p[0]);
    oj_release(p[1]);
    assert_int_equal(oj_chunk(x, 4, 1, 4, p), 3); // torch: ceil(5/4) = 2 -> 2, 2, 1
    for (int k = 0; k < 3; k++) oj_release(p[k]);
    int64_t sz[3] = {1, 3, 1};
    assert_int_equal(oj_split_sizes(x, 3, sz, 1, p), 3);
    double w2[6] = {1, 2, 3, 6, 7, 8};
    expect_values(p[1], w2, 6);
    for (int k = 0; k < 3; k++) oj_release(p[k]);
    // empty dim: split gives one empty piece, chunk gives `chunks`
    int64_t se[2] = {2, 0};
    oj_tensor *e = oj_zeros(eng, 2, se, OJ_F64);
    assert_int_equal(oj_split(e, 3, 1, 4, p), 1);
    oj_release(p[0]);
    assert_int_equal(oj_chunk(e, 3, 1, 4, p), 3);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(oj_size(p[k], 1), 0);
        oj_release(p[k]);
    }
    // split sizes near INT64_MAX: one piece (ceil without overflow)
    assert_int_equal(oj_split(x, INT64_MAX, 1, 4, p), 1);
    assert_int_equal(oj_size(p[0], 1), 5);
    oj_release(p[0]);
    assert_int_equal(oj_split(x, INT64_MAX - 2, 1, 4, p), 1);
    oj_release(p[0]);
    int64_t one = 1, huge = INT64_MAX;
    oj_tensor *o = oj_ones(eng, 1, &one, OJ_BOOL);
    oj_tensor *hx = oj_expand(o, 1, &huge); // a view of INT64_MAX elements
    assert_int_equal(oj_chunk(hx, 3, 0, 4, p), 3);
    assert_int_equal(oj_size(p[0], 0), 3074457345618258603); // ceil(INT64_MAX / 3)
    assert_int_equal(oj_size(p[2], 0), 3074457345618258601);
    for (int k = 0; k < 3; k++) oj_release(p[k]);
    oj_release(hx);
    oj_release(o);
    // gradients flow through the pieces
    int64_t s35[2] = {3, 5};
    oj_tensor *l = leaf(eng, 2, s35, -1, 1);
    gradcheck_ok(eng, split_fn, NULL, &l, 1, "split");
    gradcheck_ok(eng, chunk_fn, NULL, &l, 1, "chunk");
    // errors
    assert_int_equal(oj_split(x, 2, 1, 2, p), -1);
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "max_out 2", NULL);
    assert_int_equal(oj_split(x, 0, 1, 4, p), -1);
    expect_error(eng, OJ_ERR_INVALID_ARGUMENT, "split_size 0", NULL);
    assert_int_equal(oj_chunk(x, 0, 1, 4, p), -1);
    expect_error(eng, OJ_ERR_INVALID_ARGUMENT, "chunks", NULL);
    int64_t bad[2] = {1, 1};
    assert_int_equal(oj_split_sizes(x, 2, bad, 1, p), -1);
    expect_error(eng, OJ_ERR_SHAPE, "sum to 2", "[2, 5]");
    assert_int_equal(oj_split(x, 1, 3, 4, p), -1);
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "split", "dim 3");
    assert_int_equal(oj_split(NULL, 1, 0, 4, p), -1);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    eng_done(eng);
}

/* split/chunk record one node for all pieces (backward: one cat); its
 * gradients equal those of separate narrows when only some pieces are
 * used, a piece twice, a second backward with retain_graph, more pieces
 * than a node holds; a retained piece that no gradient reached keeps none,
 * as with narrow. */
static void test_split_one_node_grads(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {3, 7};
    oj_tensor *x = leaf(eng, 2, s, -1, 1);
    oj_tensor *w = leaf(eng, 2, s, -1, 1);
    oj_tensor *g[2] = {NULL, NULL};
    for (int pieces = 4; pieces <= 7; pieces += 3) { /* 7 > OJ_NODE_MAX_OUT (4) */
        for (int ref = 0; ref < 2; ref++) {
            oj_scope_begin(eng);
            oj_tensor *p[7] = {0}, *q[7] = {0};
            int64_t len = pieces == 4 ? 2 : 1;
            if (ref) {
                for (int k = 0; k < pieces; k++)
                    p[k] = oj_narrow(x, 1, k * len, k == pieces - 1 ? 7 - k * len : len);
            } else {
                assert_int_equal(oj_chunk(x, pieces, -1, 7, p), pieces);
            }
            for (int k = 0; k < pieces; k++)
                q[k] = oj_narrow(w, 1, k * len, k == pieces - 1 ? 7 - k * len : len);
            oj_retain_grad(p[0]);
            oj_retain_grad(p[1]);
            /* p[0] unused; p[1] twice; the last piece once */
            oj_tensor *a = oj_sum_all(oj_mul(oj_mul(p[1], p[1]), q[1]));
            oj_tensor *b = oj_sum_all(oj_mul(p[1], q[1]));
            oj_tensor *c = oj_sum_all(oj_mul(p[pieces - 1], q[pieces - 1]));
            oj_tensor *loss = oj_add(oj_add(a, b), c);
            assert_non_null(loss);
            assert_int_equal(oj_backward(loss, true), OJ_OK);
            assert_int_equal(oj_backward(loss, false), OJ_OK);
            assert_null(oj_grad(p[0]));
            assert_non_null(oj_grad(p[1]));
            g[ref] = oj_clone(oj_grad(x));
            oj_keep(g[ref]);
            oj_zero_grad(x);
            oj_scope_end(eng);
        }
        double *want = malloc(21 * sizeof *want);
        assert_int_equal(oj_to_host(g[1], want, 21 * sizeof *want), OJ_OK);
        expect_values(g[0], want, 21);
        free(want);
        oj_release(g[0]);
        oj_release(g[1]);
    }
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- flip */

static oj_tensor *flip_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    const int *dims = ctx;
    oj_tensor *t = oj_permute(in[0], 3, (const int[]){2, 0, 1});
    oj_tensor *y = oj_flip(t, dims[0], dims + 1);
    oj_release(t);
    return y;
}

static void test_flip(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {2, 3};
    oj_tensor *x = iota(eng, 2, s, OJ_F64);
    oj_tensor *a = oj_flip(x, 1, (const int[]){0});
    oj_tensor *b = oj_flip(x, 1, (const int[]){-1});
    oj_tensor *c = oj_flip(x, 2, (const int[]){0, 1});
    double wa[6] = {3, 4, 5, 0, 1, 2}, wb[6] = {2, 1, 0, 5, 4, 3}, wc[6] = {5, 4, 3, 2, 1, 0};
    expect_values(a, wa, 6);
    expect_values(b, wb, 6);
    expect_values(c, wc, 6);
    // a flip of a transposed view
    oj_tensor *t = oj_transpose(x, 0, 1); // [[0,3],[1,4],[2,5]]
    oj_tensor *d = oj_flip(t, 1, (const int[]){0});
    double wd[6] = {2, 5, 1, 4, 0, 3};
    expect_values(d, wd, 6);
    int64_t s3[3] = {2, 3, 4}, s0[3] = {2, 0, 3};
    int dims1[3] = {2, 0, 2}, dims2[2] = {1, 1};
    oj_tensor *l = leaf(eng, 3, s3, -1, 1);
    gradcheck_ok(eng, flip_fn, dims1, &l, 1, "flip 2 dims");
    gradcheck_ok(eng, flip_fn, dims2, &l, 1, "flip 1 dim");
    oj_tensor *z = leaf(eng, 3, s0, -1, 1);
    gradcheck_ok(eng, flip_fn, dims1, &z, 1, "flip empty");
    assert_null(oj_flip(x, 2, (const int[]){1, -1}));
    expect_error(eng, OJ_ERR_INVALID_ARGUMENT, "more than once", NULL);
    assert_null(oj_flip(x, 1, (const int[]){2}));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "flip", NULL);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- pad */

static oj_tensor *pad_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    const int64_t *pads = ctx; // pads[0] = npad
    oj_tensor *t = oj_transpose(in[0], 0, 2);
    oj_tensor *y = oj_pad(t, (int)pads[0], pads + 1, 0.5);
    oj_release(t);
    return y;
}

static void test_pad(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {2, 2};
    oj_tensor *x = iota(eng, 2, s, OJ_F64);
    int64_t p1[2] = {1, 2};
    oj_tensor *a = oj_pad(x, 2, p1, -1);
    int64_t sa[2] = {2, 5};
    expect_shape(a, 2, sa);
    double wa[10] = {-1, 0, 1, -1, -1, -1, 2, 3, -1, -1};
    expect_values(a, wa, 10);
    int64_t p2[4] = {0, 0, 1, -1}; // dim 1 untouched, dim 0: one row on top, last cropped
    oj_tensor *b = oj_pad(x, 4, p2, 9);
    double wb[4] = {9, 9, 0, 1};
    expect_values(b, wb, 4);
    int64_t p3[2] = {-1, -1}; // crops everything of the last dim
    oj_tensor *c = oj_pad(x, 2, p3, 0);
    int64_t sc[2] = {2, 0};
    expect_shape(c, 2, sc);
    // integer dtype
    oj_tensor *xi = iota(eng, 2, s, OJ_I64);
    oj_tensor *ci = oj_pad(xi, 2, p1, 4);
    assert_int_equal(oj_tensor_dtype(ci), OJ_I64);
    assert_float_equal(oj_item_at(ci, 0), 4, 0);
    // gradcheck: pads, crops, a zero-size result dim and a rank-3 pad
    int64_t s3[3] = {3, 2, 4};
    oj_tensor *l = leaf(eng, 3, s3, -1, 1);
    int64_t g1[7] = {6, 1, 2, -1, 0, 2, -2}, g2[3] = {2, -2, -1}, g3[5] = {4, 0, 0, 3, 1};
    gradcheck_ok(eng, pad_fn, g1, &l, 1, "pad mixed");
    gradcheck_ok(eng, pad_fn, g2, &l, 1, "pad crop to empty");
    gradcheck_ok(eng, pad_fn, g3, &l, 1, "pad rank 2 of 3");
    // errors
    assert_null(oj_pad(x, 3, p2, 0));
    expect_error(eng, OJ_ERR_INVALID_ARGUMENT, "pad", "[2, 2]");
    int64_t p4[2] = {-2, -1};
    assert_null(oj_pad(x, 2, p4, 0));
    expect_error(eng, OJ_ERR_SHAPE, "negative", NULL);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- gather / scatter_add */

static oj_tensor *gather_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    oj_tensor *index = ctx;
    oj_tensor *t = oj_transpose(in[0], 0, 1); // [4, 3]
    oj_tensor *y = oj_gather(t, 0, index);
    oj_release(t);
    return y;
}

static oj_tensor *scatter_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    return oj_scatter_add(in[0], 1, ctx, in[1]);
}

static void test_gather_scatter(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {3, 4};
    oj_tensor *x = iota(eng, 2, s, OJ_F64); // [[0..3],[4..7],[8..11]]
    int64_t si[2] = {2, 3};
    int64_t iv[6] = {3, 0, 0, 1, 1, 2};
    oj_tensor *index = idx_tensor(eng, 2, si, iv);
    oj_tensor *g = oj_gather(x, 1, index);
    expect_shape(g, 2, si);
    double wg[6] = {3, 0, 0, 5, 5, 6};
    expect_values(g, wg, 6);
    int64_t iv0[6] = {2, 0, 0, 1, 1, 2}; // dim 0: x[index[i][j]][j]
    oj_tensor *index0 = idx_tensor(eng, 2, si, iv0);
    oj_tensor *g0 = oj_gather(x, -2, index0);
    double wg0[6] = {8, 1, 2, 4, 5, 10};
    expect_values(g0, wg0, 6);
    // i32 index works too
    oj_tensor *i32 = oj_cast(index, OJ_I32);
    oj_tensor *g32 = oj_gather(x, 1, i32);
    expect_values(g32, wg, 6);
    // scatter_add with repeated targets, index smaller than src
    int64_t ss[2] = {2, 4};
    oj_tensor *src = oj_ones(eng, 2, ss, OJ_F64);
    oj_tensor *sa = oj_scatter_add(x, 1, index, src);
    double wsa[12] = {2, 1, 2, 4, 4, 7, 7, 7, 8, 9, 10, 11};
    expect_values(sa, wsa, 12);
    // gradcheck: duplicate indices accumulate
    int64_t sx[2] = {3, 4};
    oj_tensor *l = leaf(eng, 2, sx, -1, 1);
    gradcheck_ok(eng, gather_fn, index0, &l, 1, "gather");
    oj_tensor *in[2] = {leaf(eng, 2, sx, -1, 1), leaf(eng, 2, ss, -1, 1)};
    gradcheck_ok(eng, scatter_fn, index, in, 2, "scatter_add");
    // zero-size index
    int64_t se[2] = {0, 3};
    oj_tensor *ie = oj_zeros(eng, 2, se, OJ_I64);
    oj_tensor *ge = oj_gather(x, 1, ie);
    expect_shape(ge, 2, se);
    // errors: an index out of range names the op and the value
    int64_t bad[6] = {3, 0, 0, 1, 4, 2};
    oj_tensor *bi = idx_tensor(eng, 2, si, bad);
    assert_null(oj_gather(x, 1, bi));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "gather: index 4", "[1, 1]");
    assert_null(oj_scatter_add(x, 1, bi, src));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "scatter_add: index 4", NULL);
    int64_t neg[6] = {-1, 0, 0, 1, 1, 2};
    oj_tensor *ni = idx_tensor(eng, 2, si, neg);
    assert_null(oj_gather(x, 1, ni));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "index -1", NULL);
    oj_tensor *fi = oj_cast(index, OJ_F32);
    assert_null(oj_gather(x, 1, fi));
    expect_error(eng, OJ_ERR_DTYPE, "i64", NULL);
    int64_t sbig[2] = {4, 1};
    oj_tensor *big = oj_zeros(eng, 2, sbig, OJ_I64);
    assert_null(oj_gather(x, 1, big));
    expect_error(eng, OJ_ERR_SHAPE, "[4, 1]", "[3, 4]");
    int64_t s1[1] = {3};
    oj_tensor *r1 = oj_zeros(eng, 1, s1, OJ_I64);
    assert_null(oj_gather(x, 1, r1));
    expect_error(eng, OJ_ERR_SHAPE, "same rank", NULL);
    oj_tensor *srcf = oj_ones(eng, 2, ss, OJ_F32);
    assert_null(oj_scatter_add(x, 1, index, srcf));
    expect_error(eng, OJ_ERR_DTYPE, "f32", NULL);
    int64_t ssmall[2] = {2, 2};
    oj_tensor *small = oj_ones(eng, 2, ssmall, OJ_F64);
    assert_null(oj_scatter_add(x, 1, index, small));
    expect_error(eng, OJ_ERR_SHAPE, "src", NULL);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- index_select / index_add */

static oj_tensor *isel_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    oj_tensor *t = oj_transpose(in[0], 0, 1);
    oj_tensor *y = oj_index_select(t, 1, ctx);
    oj_release(t);
    return y;
}

static oj_tensor *iadd_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    return oj_index_add(in[0], 0, ctx, in[1], -2.5);
}

static void test_index_select_add(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {3, 2};
    oj_tensor *x = iota(eng, 2, s, OJ_F64); // [[0,1],[2,3],[4,5]]
    int64_t sk[1] = {4}, iv[4] = {2, 0, 2, 1};
    oj_tensor *index = idx_tensor(eng, 1, sk, iv);
    oj_tensor *y = oj_index_select(x, 0, index);
    int64_t sy[2] = {4, 2};
    expect_shape(y, 2, sy);
    double wy[8] = {4, 5, 0, 1, 4, 5, 2, 3};
    expect_values(y, wy, 8);
    oj_tensor *sc = oj_scalar(eng, 1, OJ_I64); // 0-D index keeps the dim (size 1)
    oj_tensor *y1 = oj_index_select(x, 1, sc);
    int64_t sy1[2] = {3, 1};
    expect_shape(y1, 2, sy1);
    double wy1[3] = {1, 3, 5};
    expect_values(y1, wy1, 3);
    oj_tensor *src = oj_ones(eng, 2, sy, OJ_F64);
    oj_tensor *a = oj_index_add(x, 0, index, src, 2.0);
    double wa[6] = {2, 3, 4, 5, 8, 9};
    expect_values(a, wa, 6);
    // integer index_add
    oj_tensor *xi = iota(eng, 2, s, OJ_I64), *si = oj_ones(eng, 2, sy, OJ_I64);
    oj_tensor *ai = oj_index_add(xi, 0, index, si, 3);
    double wai[6] = {3, 4, 5, 6, 10, 11};
    expect_values(ai, wai, 6);
    assert_null(oj_index_add(xi, 0, index, si, 0.5));
    expect_error(eng, OJ_ERR_INVALID_ARGUMENT, "alpha", NULL);
    // gradcheck
    int64_t s23[2] = {2, 3};
    oj_tensor *l = leaf(eng, 2, s23, -1, 1); // transposed to [3, 2], select on dim 1
    int64_t iv2[3] = {1, 1, 0};
    int64_t sk3[1] = {3};
    oj_tensor *index2 = idx_tensor(eng, 1, sk3, iv2);
    gradcheck_ok(eng, isel_fn, index2, &l, 1, "index_select");
    oj_tensor *in[2] = {leaf(eng, 2, s, -1, 1), leaf(eng, 2, sy, -1, 1)};
    gradcheck_ok(eng, iadd_fn, index, in, 2, "index_add");
    // errors
    int64_t bad[4] = {2, 0, 3, 1};
    oj_tensor *bi = idx_tensor(eng, 1, sk, bad);
    assert_null(oj_index_select(x, 0, bi));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "index_select: index 3", "size 3");
    assert_null(oj_index_add(x, 0, bi, src, 1));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "index_add: index 3", NULL);
    assert_null(oj_index_select(x, 0, y1));
    expect_error(eng, OJ_ERR_DTYPE, NULL, NULL);
    int64_t s2d[2] = {2, 2};
    oj_tensor *i2 = oj_zeros(eng, 2, s2d, OJ_I64);
    assert_null(oj_index_select(x, 0, i2));
    expect_error(eng, OJ_ERR_SHAPE, "1-D", NULL);
    assert_null(oj_index_add(x, 0, index, x, 1));
    expect_error(eng, OJ_ERR_SHAPE, "index_add", "[3, 2]");
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- masked_fill, tril, triu */

static oj_tensor *masked_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    oj_tensor *t = oj_transpose(in[0], 0, 1);
    oj_tensor *y = oj_masked_fill(t, ctx, -3.0);
    oj_release(t);
    return y;
}

static oj_tensor *tri_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    int64_t d = *(int64_t *)ctx;
    oj_tensor *t = oj_transpose(in[0], 1, 2);
    oj_tensor *y = d >= 0 ? oj_tril(t, d - 1) : oj_triu(t, d + 2);
    oj_release(t);
    return y;
}

static void test_masked_tri(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {2, 3}, s13[2] = {1, 3};
    oj_tensor *x = iota(eng, 2, s, OJ_F64);
    uint8_t mv[3] = {1, 0, 1};
    oj_tensor *mask = oj_from_host(eng, 2, s13, OJ_BOOL, mv, sizeof mv);
    oj_tensor *y = oj_masked_fill(x, mask, -1);
    double wy[6] = {-1, 1, -1, -1, 4, -1};
    expect_values(y, wy, 6);
    oj_tensor *sq = iota(eng, 2, (const int64_t[]){3, 3}, OJ_F64); // 0..8
    double wl[9] = {0, 0, 0, 3, 4, 0, 6, 7, 8}, wu1[9] = {0, 1, 2, 0, 0, 5, 0, 0, 0};
    double wlm1[9] = {0, 0, 0, 3, 0, 0, 6, 7, 0};
    expect_values(oj_tril(sq, 0), wl, 9);
    expect_values(oj_triu(sq, 1), wu1, 9);
    expect_values(oj_tril(sq, -1), wlm1, 9);
    double wall[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    expect_values(oj_tril(sq, 100), wall, 9);
    expect_values(oj_triu(sq, -100), wall, 9);
    // batched, non-square
    int64_t s3[3] = {2, 2, 3};
    oj_tensor *b = iota(eng, 3, s3, OJ_F64);
    double wb[12] = {0, 1, 0, 3, 4, 5, 6, 7, 0, 9, 10, 11};
    expect_values(oj_tril(b, 1), wb, 12);
    // gradcheck
    int64_t s32[2] = {3, 2};
    uint8_t mv2[2] = {0, 1};
    int64_t s12[2] = {1, 2};
    oj_tensor *mask2 = oj_from_host(eng, 2, s12, OJ_BOOL, mv2, sizeof mv2);
    oj_tensor *l = leaf(eng, 2, s32, -1, 1); // transposed to [2, 3], mask [2, 1]
    oj_tensor *m21 = oj_reshape(mask2, 2, (const int64_t[]){2, 1});
    gradcheck_ok(eng, masked_fn, m21, &l, 1, "masked_fill");
    int64_t s334[3] = {2, 4, 3};
    oj_tensor *l3 = leaf(eng, 3, s334, -1, 1);
    for (int64_t d = -3; d <= 3; d++) gradcheck_ok(eng, tri_fn, &d, &l3, 1, "tril/triu");
    // errors
    oj_tensor *fm = oj_cast(mask, OJ_F32);
    assert_null(oj_masked_fill(x, fm, 0));
    expect_error(eng, OJ_ERR_DTYPE, "bool", NULL);
    oj_tensor *m3 = oj_zeros(eng, 2, (const int64_t[]){3, 3}, OJ_BOOL);
    assert_null(oj_masked_fill(x, m3, 0));
    expect_error(eng, OJ_ERR_SHAPE, "masked_fill", NULL);
    oj_tensor *bm = oj_zeros(eng, 3, (const int64_t[]){4, 2, 3}, OJ_BOOL); // x would grow
    assert_null(oj_masked_fill(x, bm, 0));
    expect_error(eng, OJ_ERR_SHAPE, "[4, 2, 3]", "[2, 3]");
    oj_tensor *v = oj_zeros(eng, 1, (const int64_t[]){3}, OJ_F64);
    assert_null(oj_tril(v, 0));
    expect_error(eng, OJ_ERR_SHAPE, "tril", "[3]");
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- one_hot */

static void test_one_hot(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[1] = {3}, iv[3] = {2, 0, 2};
    oj_tensor *ind = idx_tensor(eng, 1, s, iv);
    oj_tensor *y = oj_one_hot(ind, 4);
    int64_t sy[2] = {3, 4};
    expect_shape(y, 2, sy);
    assert_int_equal(oj_tensor_dtype(y), OJ_I64);
    double wy[12] = {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0};
    expect_values(y, wy, 12);
    oj_tensor *z = oj_one_hot(ind, -1); // infers 3
    assert_int_equal(oj_size(z, 1), 3);
    oj_tensor *e = oj_zeros(eng, 2, (const int64_t[]){0, 2}, OJ_I64);
    oj_tensor *ye = oj_one_hot(e, 5);
    expect_shape(ye, 3, (const int64_t[]){0, 2, 5});
    assert_null(oj_one_hot(ind, 2));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "class index 2", "[0, 2)");
    int64_t nv[3] = {0, -1, 1};
    assert_null(oj_one_hot(idx_tensor(eng, 1, s, nv), 3));
    expect_error(eng, OJ_ERR_OUT_OF_RANGE, "-1", NULL);
    assert_null(oj_one_hot(e, -1));
    expect_error(eng, OJ_ERR_INVALID_ARGUMENT, "infer", NULL);
    oj_tensor *f = oj_zeros(eng, 1, s, OJ_F32);
    assert_null(oj_one_hot(f, 3));
    expect_error(eng, OJ_ERR_DTYPE, NULL, NULL);
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---------------------------------------------------------------- repeat */

static oj_tensor *repeat_fn(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    const int64_t *r = ctx; // r[0] = count
    oj_tensor *t = oj_transpose(in[0], 0, 1);
    oj_tensor *y = oj_repeat(t, (int)r[0], r + 1);
    oj_release(t);
    return y;
}

/* Check repeat of x (contiguous iota values) against index arithmetic. */
static void check_repeat(oj_tensor *x, oj_tensor *y, int n, const int64_t *reps) {
    int xr = oj_rank(x);
    int64_t ys[8], xs[8];
    for (int d = 0; d < n; d++) {
        xs[d] = d < n - xr ? 1 : oj_size(x, d - (n - xr));
        ys[d] = xs[d] * reps[d];
        assert_int_equal(oj_size(y, d), ys[d]);
    }
    int64_t total = oj_numel(y), idx[8] = {0};
    for (int64_t i = 0; i < total; i++) {
        int64_t src = 0;
        for (int d = 0; d < n; d++) src = src * xs[d] + idx[d] % xs[d];
        if (oj_item_at(y, i) != oj_item_at(x, src)) fail_msg("repeat element %lld", (long long)i);
        for (int d = n - 1; d >= 0; d--) {
            if (++idx[d] < ys[d]) break;
            idx[d] = 0;
        }
    }
}

static void test_repeat(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    int64_t s[2] = {2, 3};
    oj_tensor *x = iota(eng, 2, s, OJ_F64);
    int64_t r1[3] = {2, 1, 2};
    oj_tensor *y = oj_repeat(x, 3, r1);
    expect_shape(y, 3, (const int64_t[]){2, 2, 6});
    double w[24] = {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5};
    expect_values(y, w, 24);
    check_repeat(x, y, 3, r1);
    int64_t r0[2] = {1, 1};
    oj_tensor *c = oj_repeat(x, 2, r0); // a copy
    assert_false(oj_shares_storage(c, x));
    check_repeat(x, c, 2, r0);
    int64_t rz[2] = {0, 2};
    oj_tensor *z = oj_repeat(x, 2, rz);
    expect_shape(z, 2, (const int64_t[]){0, 6});
    // rank 5 with every dim repeated: needs more than one pass
    int64_t s5[5] = {2, 2, 3, 2, 2}, r5[5] = {2, 3, 1, 2, 2};
    oj_tensor *x5 = iota(eng, 5, s5, OJ_F64);
    oj_tensor *y5 = oj_repeat(x5, 5, r5);
    check_repeat(x5, y5, 5, r5);
    int64_t r8[8] = {1, 2, 1, 2, 2, 1, 3, 2};
    oj_tensor *y8 = oj_repeat(x5, 8, r8);
    check_repeat(x5, y8, 8, r8);
    // gradcheck: leading new dims, size-1 dims, multi-pass
    int64_t s32[2] = {3, 2};
    oj_tensor *l = leaf(eng, 2, s32, -1, 1); // transposed to [2, 3]
    int64_t g1[4] = {3, 2, 2, 3}, g2[3] = {2, 1, 1}, g3[7] = {6, 2, 1, 2, 1, 2, 3};
    int64_t g4[3] = {2, 0, 2};
    gradcheck_ok(eng, repeat_fn, g1, &l, 1, "repeat");
    gradcheck_ok(eng, repeat_fn, g2, &l, 1, "repeat ones");
    gradcheck_ok(eng, repeat_fn, g4, &l, 1, "repeat zero");
    int64_t s1[2] = {1, 2};
    oj_tensor *l1 = leaf(eng, 2, s1, -1, 1);
    gradcheck_ok(eng, repeat_fn, g3, &l1, 1, "repeat many");
    oj_tensor *l5 = leaf(eng, 5, (const int64_t[]){2, 2, 1, 2, 2}, -1, 1);
    int64_t g5[6] = {5, 2, 2, 3, 2, 2};
    gradcheck_ok(eng, repeat_fn, g5, &l5, 1, "repeat rank 5");
    // errors
    assert_null(oj_repeat(x, 1, r1));
    expect_error(eng, OJ_ERR_SHAPE, "repeat", "[2, 3]");
    int64_t rn[2] = {1, -1};
    assert_null(oj_repeat(x, 2, rn));
    expect_error(eng, OJ_ERR_SHAPE, "negative", NULL);
    oj_scope_end(eng);
    eng_done(eng);
}


/* ---------------------------------------------------------------- zero-size */

typedef oj_tensor *(*op1_fn)(oj_tensor *x, void *ctx);
static oj_tensor *z_gather(oj_tensor *x, void *c) { return oj_gather(x, 1, c); }
static oj_tensor *z_isel(oj_tensor *x, void *c) { return oj_index_select(x, 0, c); }
static oj_tensor *z_tril(oj_tensor *x, void *c) { (void)c; return oj_tril(x, 0); }
static oj_tensor *z_mask(oj_tensor *x, void *c) { return oj_masked_fill(x, c, 2.0); }
static oj_tensor *z_stack(oj_tensor *x, void *c) {
    (void)c;
    return oj_stack(2, (oj_tensor *const[]){x, x}, 1);
}
static oj_tensor *z_repeat(oj_tensor *x, void *c) {
    (void)c;
    return oj_repeat(x, 3, (const int64_t[]){2, 1, 3});
}
static oj_tensor *z_flip(oj_tensor *x, void *c) {
    (void)c;
    return oj_flip(x, 1, (const int[]){0});
}

typedef struct {
    op1_fn f;
    void *ctx;
} z_case;

static oj_tensor *z_wrap(oj_tensor *const *in, int n, void *ctx) {
    (void)n;
    const z_case *c = ctx;
    oj_tensor *t = oj_transpose(in[0], 0, 1);
    oj_tensor *y = c->f(t, c->ctx);
    oj_release(t);
    return y;
}

static void test_zero_size_grads(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_scope_begin(eng);
    // x (transposed) [3, 4] with an empty index, or x [0, 4] / [3, 0]
    oj_tensor *x34 = leaf(eng, 2, (const int64_t[]){4, 3}, -1, 1);
    oj_tensor *x04 = leaf(eng, 2, (const int64_t[]){4, 0}, -1, 1);
    oj_tensor *x30 = leaf(eng, 2, (const int64_t[]){0, 3}, -1, 1);
    oj_tensor *i03 = oj_zeros(eng, 2, (const int64_t[]){0, 3}, OJ_I64);
    oj_tensor *i0 = oj_zeros(eng, 1, (const int64_t[]){0}, OJ_I64);
    oj_tensor *m = oj_ones(eng, 1, (const int64_t[]){4}, OJ_BOOL);
    z_case cases[] = {{z_gather, i03}, {z_isel, i0}, {z_tril, NULL}, {z_mask, m},
                      {z_stack, NULL}, {z_repeat, NULL}, {z_flip, NULL}};
    oj_tensor *xs[3] = {x34, x04, x30};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int k = 0; k < 3; k++) {
            if (c < 2 && k > 0) continue; // the empty-index cases use the full x
            if (c == 3 && k == 2) continue; // mask [4] vs x [3, 0]
            oj_status st = oj_gradcheck(eng, z_wrap, &cases[c], &xs[k], 1, NULL);
            if (st != OJ_OK) fail_msg("zero-size case %zu/%d: %s", c, k, oj_last_error(eng));
        }
    oj_scope_end(eng);
    eng_done(eng);
}

/* ---- split's backward view fed by cat's backward; one_hot inferring the
 * class count from an INT64_MAX index */

/* the split's backward view when the pieces' gradients come side by side
 * from a cat's backward (not attention): values, and no aliasing between
 * the leaf's gradient and another leaf's that shared the seed */
static void test_split_cat_view(void **state) {
    (void)state;
    oj_engine *eng = nt_engine();
    oj_scope_begin(eng);
    int64_t xs[2] = {3, 6};
    for (int order = 0; order < 2; order++) {
        oj_tensor *x = nt_leaf(eng, 2, xs, -1, 1), *a = nt_leaf(eng, 2, xs, -1, 1);
        oj_tensor *p[3] = {NULL, NULL, NULL};
        assert_int_equal(oj_split(x, 2, 1, 3, p), 3);
        oj_tensor *q[3] = {order ? p[2] : p[0], p[1], order ? p[0] : p[2]};
        oj_tensor *z = oj_add(oj_cat(3, q, 1), a);
        oj_tensor *l = oj_add(oj_sum_all(z), oj_sum_all(oj_mul(x, x)));
        assert_int_equal(oj_backward(l, false), OJ_OK);
        /* d/dx = 1 + 2 x, d/da = 1 */
        oj_tensor *want = oj_add_scalar(oj_mul_scalar(x, 2.0), 1.0);
        nt_close_tensors("split/cat dx", oj_grad(x), want, 1e-14, 1e-14);
        assert_int_equal(oj_mul_scalar_(oj_grad(a), 5.0), OJ_OK);
        nt_close_tensors("dx unchanged by a.grad", oj_grad(x), want, 1e-14, 1e-14);
        nt_close_tensors("da", oj_grad(a), oj_full(eng, 2, xs, OJ_F64, 5.0), 0, 0);
        for (int j = 0; j < 3; j++)
            oj_release(p[j]);
    }
    oj_scope_end(eng);
    nt_engine_done(eng);
}

/* one_hot with num_classes -1 and an index of INT64_MAX: OJ_ERR_OUT_OF_RANGE
 * (the class count max + 1 would overflow) */
static void test_one_hot_infer_int64_max(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t v[2] = {INT64_MAX, 0};
    oj_tensor *idx = oj_from_host(eng, 1, (int64_t[]){2}, OJ_I64, v, sizeof v);
    assert_non_null(idx);
    assert_null(oj_one_hot(idx, -1));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    oj_clear_error(eng);
    oj_release(idx);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cat),          cmocka_unit_test(test_stack),
        cmocka_unit_test(test_split_chunk),  cmocka_unit_test(test_split_one_node_grads),
        cmocka_unit_test(test_flip),
        cmocka_unit_test(test_pad),          cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_index_select_add), cmocka_unit_test(test_masked_tri),
        cmocka_unit_test(test_one_hot),      cmocka_unit_test(test_repeat),
        cmocka_unit_test(test_zero_size_grads),
        cmocka_unit_test(test_split_cat_view),
        cmocka_unit_test(test_one_hot_infer_int64_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
