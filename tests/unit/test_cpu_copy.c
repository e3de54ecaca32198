// test: large host copies (clone, contiguous, copy_) go through the CPU
// backend's threaded copy kernel, which moves transposed f32 blocks in
// tiles: every layout gives exactly the elements of a plain index loop, on
// every SIMD level, with 1 and 3 threads and tiny chunks (grain shift).
// Layouts: 2-d transposes of odd sizes, permuted 3-d/4-d tensors (the
// transpose under batch dims), narrowed sources and destinations,
// broadcast sources, non-f32 dtypes and dtype casts (these stay in core).
// narrow/select backward zero only outside the view (threaded fills).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/cpu_pool.h"
#include "ojas/autograd.h"
#include "ojas/core.h"
#include "ojas/ops.h"

static oj_engine *engine(int threads, int shift, oj_cpu_isa isa) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = threads;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    oj__cpu_set_grain_shift(eng, shift);
    oj__cpu_set_isa(eng, isa);
    return eng;
}

/* A tensor of `n` distinct f32 values (bit patterns that survive a copy
 * only if moved exactly, including a NaN payload and -0). */
static oj_tensor *pattern(oj_engine *eng, int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    uint32_t *v = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) v[i] = 0x3f800000u + (uint32_t)i * 2654435761u % 0x00800000u;
    v[0] = 0x7fc01234u; /* a NaN with a payload */
    if (n > 1) v[1] = 0x80000000u; /* -0 */
    oj_tensor *t = oj_from_host(eng, rank, shape, OJ_F32, v, (size_t)n * 4);
    free(v);
    assert_non_null(t);
    return t;
}

/* The elements of t in row-major order, read through its strides by
 * oj_to_host (into the caller's buffer: never the copy kernel). */
static uint32_t *elements(oj_tensor *t) {
    int64_t n = oj_numel(t);
    uint32_t *out = malloc((size_t)n * 4);
    assert_int_equal(oj_to_host(t, out, (size_t)n * 4), OJ_OK);
    return out;
}

static void expect_same(oj_tensor *a, oj_tensor *b) {
    assert_int_equal(oj_numel(a), oj_numel(b));
    uint32_t *x = elements(a), *y = elements(b);
    assert_memory_equal(x, y, (size_t)oj_numel(a) * 4);
    free(x);
    free(y);
}

static void check_layouts(oj_engine *eng) {
    oj_scope_begin(eng);
    /* 2-d transposes, sizes around the 16-wide tiles and the 64-row tasks */
    const int64_t sizes[][2] = {{300, 129}, {17, 4000}, {1000, 33}, {256, 768}, {65, 257}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        oj_tensor *a = pattern(eng, 2, sizes[i]);
        oj_tensor *t = oj_transpose(a, 0, 1);
        oj_tensor *c = oj_contiguous(t);
        assert_true(oj_is_contiguous(c));
        expect_same(c, t);
        /* copy_ of the transposed view into a narrowed (row-strided) destination */
        int64_t ds[2] = {sizes[i][1], sizes[i][0] + 5};
        oj_tensor *big = oj_zeros(eng, 2, ds, OJ_F32);
        oj_tensor *dst = oj_narrow(big, 1, 3, sizes[i][0]);
        assert_int_equal(oj_copy_(dst, t), OJ_OK);
        expect_same(dst, t);
        oj_tensor *left = oj_narrow(big, 1, 0, 3);
        oj_tensor *z = oj_zeros(eng, 2, (int64_t[]){sizes[i][1], 3}, OJ_F32);
        expect_same(left, z); /* nothing written outside the view */
    }
    /* permuted 3-d and 4-d tensors (transposes under batch dims) */
    int64_t s3[3] = {5, 70, 90}, s4[4] = {2, 3, 40, 50};
    oj_tensor *a3 = pattern(eng, 3, s3);
    int p3[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
    for (size_t i = 0; i < 4; i++) {
        oj_tensor *v = oj_permute(a3, 3, p3[i]);
        expect_same(oj_contiguous(v), v);
        expect_same(oj_clone(v), v);
    }
    oj_tensor *a4 = pattern(eng, 4, s4);
    int p4[][4] = {{0, 1, 3, 2}, {1, 0, 3, 2}, {3, 2, 1, 0}, {0, 2, 1, 3}};
    for (size_t i = 0; i < 4; i++) {
        oj_tensor *v = oj_permute(a4, 4, p4[i]);
        expect_same(oj_contiguous(v), v);
    }
    /* a narrowed, transposed source (offset and row stride on the x side) */
    int64_t sw[2] = {200, 600};
    oj_tensor *w = pattern(eng, 2, sw);
    oj_tensor *wn = oj_narrow(w, 1, 200, 200);
    oj_tensor *wt = oj_transpose(wn, 0, 1);
    expect_same(oj_contiguous(wt), wt);
    /* a broadcast source (stride 0) */
    int64_t sb[1] = {300}, sd[2] = {200, 300};
    oj_tensor *b = pattern(eng, 1, sb);
    oj_tensor *d = oj_empty(eng, 2, sd, OJ_F32);
    assert_int_equal(oj_copy_(d, b), OJ_OK);
    oj_tensor *be = oj_expand(b, 2, sd);
    expect_same(d, be);
    /* other dtypes and casts */
    oj_tensor *f64 = oj_cast(oj_transpose(w, 0, 1), OJ_F64);
    oj_tensor *f64c = oj_contiguous(oj_transpose(f64, 0, 1));
    oj_tensor *back = oj_cast(f64c, OJ_F32);
    expect_same(back, w);
    int64_t si[2] = {600, 200};
    oj_tensor *i32 = oj_empty(eng, 2, si, OJ_I32);
    oj_status cst = oj_copy_(i32, oj_transpose(w, 0, 1)); /* cast: core's loop */
    if (cst != OJ_OK) print_message("%s\n", oj_last_error(eng));
    assert_int_equal(cst, OJ_OK);
    oj_tensor *i32c = oj_contiguous(oj_transpose(i32, 0, 1));
    assert_true(oj_is_contiguous(i32c));
    assert_int_equal(oj_item_at(i32c, 5), (int32_t)oj_item_at(w, 5));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_scope_end(eng);
}

static void test_copies_every_level_and_thread_count(void **state) {
    (void)state;
    const int threads[] = {1, 3};
    const oj_cpu_isa isas[] = {OJ_ISA_SCALAR, OJ_ISA_AVX2, OJ_ISA_AVX512};
    for (size_t t = 0; t < 2; t++)
        for (size_t i = 0; i < 3; i++)
            for (int shift = 0; shift <= 8; shift += 8) {
                oj_engine *eng = engine(threads[t], shift, isas[i]);
                check_layouts(eng);
                oj_engine_free(eng);
            }
}

/* narrow/select backward on tensors large enough for the threaded fill:
 * the gradient is g inside the view and exactly 0 elsewhere (the buffer
 * starts uninitialised, so a missed region would show), negative dims and
 * starts included. */
static void expect_view_grad(oj_tensor *x, oj_tensor *y) {
    oj_tensor *s = oj_sum_all(oj_mul(y, y));
    assert_int_equal(oj_backward(s, false), OJ_OK);
    oj_tensor *gx = oj_grad(x);
    assert_non_null(gx);
    /* expected: 2 x inside the view (every view element once), 0 outside */
    int64_t n = oj_numel(x);
    float *xv = malloc((size_t)n * 4), *gv = malloc((size_t)n * 4);
    assert_int_equal(oj_to_host(x, xv, (size_t)n * 4), OJ_OK);
    assert_int_equal(oj_to_host(gx, gv, (size_t)n * 4), OJ_OK);
    int64_t inside = 0;
    for (int64_t i = 0; i < n; i++) {
        if (gv[i] != 0.0f) {
            assert_true(gv[i] == 2.0f * xv[i]);
            inside++;
        }
    }
    assert_int_equal(inside, oj_numel(y)); /* x has no zeros */
    free(xv);
    free(gv);
    oj_zero_grad(x);
}

static void test_narrow_select_backward_zero_outside(void **state) {
    (void)state;
    for (int threads = 1; threads <= 3; threads += 2) {
        oj_engine *eng = engine(threads, 0, oj_cpu_isa_detect());
        oj_scope_begin(eng);
        int64_t s[3] = {4, 64, 192};
        oj_tensor *x = oj_set_requires_grad(oj_rand_uniform(eng, 3, s, OJ_F32, 1.0, 2.0), true);
        const int64_t narrows[][3] = {{2, 0, 64}, {2, 64, 64}, {-1, -64, 64}, {1, 10, 20},
                                      {0, 1, 2}, {-3, 0, 4}, {2, 0, 0}};
        for (size_t i = 0; i < sizeof narrows / sizeof *narrows; i++)
            expect_view_grad(x, oj_narrow(x, (int)narrows[i][0], narrows[i][1], narrows[i][2]));
        const int64_t selects[][2] = {{0, 0}, {0, -1}, {1, 33}, {-1, 191}, {2, -192}};
        for (size_t i = 0; i < sizeof selects / sizeof *selects; i++)
            expect_view_grad(x, oj_select(x, (int)selects[i][0], selects[i][1]));
        assert_int_equal(oj_last_status(eng), OJ_OK);
        oj_scope_end(eng);
        oj_engine_free(eng);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_every_level_and_thread_count),
        cmocka_unit_test(test_narrow_select_backward_zero_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
