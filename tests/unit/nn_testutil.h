/* Helpers shared by the test_nn_*.c tests: engines, random leaves, host
 * copies as double, gradcheck wrappers and error checks. */
#ifndef OJAS_NN_TESTUTIL_H
#define OJAS_NN_TESTUTIL_H

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

static inline oj_engine *nt_engine(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.seed = 1234;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

/* Free eng after checking that no tensor and no error is left over. */
static inline void nt_engine_done(oj_engine *eng) {
    if (oj_last_status(eng) != OJ_OK) fail_msg("left-over error: %s", oj_last_error(eng));
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* U[lo, hi) tensor of dtype dt. */
static inline oj_tensor *nt_rand(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                                 double lo, double hi) {
    oj_tensor *t = oj_rand_uniform(eng, rank, shape, dt, lo, hi);
    assert_non_null(t);
    return t;
}

/* f64 leaf that requires grad. */
static inline oj_tensor *nt_leaf(oj_engine *eng, int rank, const int64_t *shape, double lo,
                                 double hi) {
    oj_tensor *t = nt_rand(eng, rank, shape, OJ_F64, lo, hi);
    oj_set_requires_grad(t, true);
    return t;
}

/* Row-major contents of t as a malloc'd double array (free it). */
static inline double *nt_host(oj_tensor *t) {
    assert_non_null(t);
    bool prev = oj_set_grad_enabled(oj_tensor_engine(t), false);
    oj_tensor *c = oj_cast(t, OJ_F64);
    oj_set_grad_enabled(oj_tensor_engine(t), prev);
    assert_non_null(c);
    int64_t n = oj_numel(c);
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    assert_int_equal(oj_to_host(c, p, (size_t)n * sizeof(double)), OJ_OK);
    oj_release(c);
    return p;
}

/* Tensor from host doubles converted to dt. */
static inline oj_tensor *nt_from(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                                 const double *v) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    oj_tensor *t = oj_from_host(eng, rank, shape, OJ_F64, v, (size_t)n * sizeof(double));
    assert_non_null(t);
    if (dt == OJ_F64) return t;
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    assert_non_null(c);
    return c;
}

static inline oj_tensor *nt_index(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt,
                                  const int64_t *v) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    oj_tensor *t = oj_from_host(eng, rank, shape, OJ_I64, v, (size_t)n * sizeof(int64_t));
    assert_non_null(t);
    if (dt == OJ_I64) return t;
    oj_tensor *c = oj_cast(t, dt);
    oj_release(t);
    return c;
}

/* |got[i] - want[i]| <= atol + rtol |want[i]| for i < n. */
static inline void nt_close(const char *what, const double *got, const double *want, int64_t n,
                            double atol, double rtol) {
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (isnan(w) && isnan(g)) continue;
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            fail_msg("%s: element %lld: got %.12g, want %.12g", what, (long long)i, g, w);
    }
}

/* Tensors a and b have one shape and the same values (NaN matching NaN)
 * within atol + rtol |b|. */
static inline void nt_close_tensors(const char *what, oj_tensor *a, oj_tensor *b, double atol,
                                    double rtol) {
    if (a == NULL || b == NULL)
        fail_msg("%s: NULL tensor", what);
    assert_int_equal(oj_rank(a), oj_rank(b));
    for (int d = 0; d < oj_rank(a); d++)
        assert_int_equal(oj_size(a, d), oj_size(b, d));
    double *x = nt_host(a), *y = nt_host(b);
    nt_close(what, x, y, oj_numel(a), atol, rtol);
    free(x);
    free(y);
}

/* [B, T, H*D] -> the head view [B, H, T, D] (strided, as the model's). */
static inline oj_tensor *nt_heads(oj_tensor *x, int64_t H, int64_t D) {
    int64_t s[4] = {oj_size(x, 0), oj_size(x, 1), H, D};
    oj_tensor *v = oj_reshape(x, 4, s);
    oj_tensor *t = oj_transpose(v, 1, 2);
    oj_release(v);
    return t;
}

/* The last call failed with status st and a message containing each
 * non-NULL needle; clears the error. */
static inline void nt_expect_error(oj_engine *eng, oj_tensor *got, oj_status st, const char *n1,
                                   const char *n2) {
    assert_null(got);
    if (oj_last_status(eng) != st)
        fail_msg("expected %s, got %s: %s", oj_status_name(st), oj_status_name(oj_last_status(eng)),
                 oj_last_error(eng));
    if (n1 && !strstr(oj_last_error(eng), n1)) fail_msg("'%s' not in '%s'", n1, oj_last_error(eng));
    if (n2 && !strstr(oj_last_error(eng), n2)) fail_msg("'%s' not in '%s'", n2, oj_last_error(eng));
    oj_clear_error(eng);
}

/* gradcheck that fails the test with the engine's message. */
static inline void nt_gradcheck(oj_engine *eng, const char *what, oj_gradcheck_fn f, void *ctx,
                                oj_tensor *const *in, int n) {
    oj_status st = oj_gradcheck(eng, f, ctx, in, n, NULL);
    if (st != OJ_OK) fail_msg("gradcheck %s: %s", what, oj_last_error(eng));
}

/* A transposed (non-contiguous) copy-free view of a 2-D leaf built as
 * [cols, rows]: returns t^T with shape [rows, cols]. */
static inline oj_tensor *nt_T(oj_tensor *t) { return oj_transpose(t, -2, -1); }

#endif /* OJAS_NN_TESTUTIL_H */
