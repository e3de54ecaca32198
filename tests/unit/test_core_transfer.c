// test: oj_to_device copies between engines explicitly; tensors of two
// engines never meet inside an op; oj_copy_from_host overwrites in place;
// a CPU engine refuses graph capture by name (tests/gpu covers CUDA); the
// capture's bookkeeping in core (graph.c) run over a stub graph backend.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "ojas/ops.h"

static void test_to_device_between_engines(void **state) {
    (void)state;
    oj_engine *a = NULL, *b = NULL;
    assert_int_equal(oj_engine_create(NULL, &a, NULL), OJ_OK);
    assert_int_equal(oj_engine_create(NULL, &b, NULL), OJ_OK);
    int64_t shape[2] = {2, 3};
    float v[6] = {1, -2, 3.5f, 4, 5, -6};
    oj_tensor *x = oj_from_host(a, 2, shape, OJ_F32, v, sizeof v);
    oj_tensor *xt = oj_transpose(x, 0, 1); // non-contiguous source
    oj_tensor *y = oj_to_device(xt, b);
    assert_non_null(y);
    assert_ptr_equal(oj_tensor_engine(y), b);
    assert_true(oj_is_contiguous(y));
    float got[6];
    assert_int_equal(oj_to_host(y, got, sizeof got), OJ_OK);
    float want[6] = {1, 4, -2, 5, 3.5f, -6};
    assert_memory_equal(got, want, sizeof want);
    // mixing engines inside an op is refused, naming the op
    assert_null(oj_add(x, y));
    assert_int_not_equal(oj_last_status(a), OJ_OK);
    assert_non_null(strstr(oj_last_error(a), "add"));
    oj_clear_error(a);
    assert_null(oj_to_device(NULL, b));
    oj_release(y);
    oj_release(xt);
    oj_release(x);
    oj_engine_free(a);
    oj_engine_free(b);
}

static void test_copy_from_host(void **state) {
    (void)state;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    int64_t shape[2] = {2, 2};
    float v[4] = {1, 2, 3, 4}, w[4] = {-1, 0.5f, 8, 9}, got[4];
    oj_tensor *x = oj_from_host(e, 2, shape, OJ_F32, v, sizeof v);
    uint64_t ver = oj_version(x);
    const void *addr = oj_data_ptr(x);
    assert_int_equal(oj_copy_from_host(x, w, sizeof w), OJ_OK);
    assert_ptr_equal(oj_data_ptr(x), addr); /* in place */
    assert_true(oj_version(x) > ver);
    assert_int_equal(oj_to_host(x, got, sizeof got), OJ_OK);
    assert_memory_equal(got, w, sizeof w);
    assert_int_equal(oj_copy_from_host(x, w, 8), OJ_ERR_SHAPE); /* wrong size */
    assert_non_null(strstr(oj_last_error(e), "copy_from_host"));
    oj_clear_error(e);
    oj_tensor *xt = oj_transpose(x, 0, 1);
    assert_int_equal(oj_copy_from_host(xt, w, sizeof w), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    assert_int_equal(oj_copy_from_host(x, NULL, sizeof w), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    assert_int_equal(oj_copy_from_host(NULL, w, sizeof w), OJ_ERR_INVALID_ARGUMENT);
    oj_release(xt);
    oj_release(x);
    oj_engine_free(e);
}

static void test_graph_refused_on_cpu(void **state) {
    (void)state;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    assert_int_equal(oj_graph_capture_begin(e), OJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(oj_last_error(e), "CUDA engines only"));
    assert_false(oj_graph_capturing(e));
    oj_clear_error(e);
    assert_null(oj_graph_capture_end(e));
    assert_int_equal(oj_last_status(e), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(e);
    assert_int_equal(oj_graph_replay(NULL), OJ_ERR_INVALID_ARGUMENT);
    oj_graph_free(NULL);
    oj_engine_free(e);
}

/* A CPU backend with stub graph entries: core's capture state machine
 * (graph.c) on a machine without a GPU. */
static int g_begun, g_ended, g_aborted, g_replayed, g_destroyed;
static oj_status stub_begin(oj_engine *eng) {
    (void)eng;
    g_begun++;
    return OJ_OK;
}
static oj_status stub_end(oj_engine *eng, void **graph) {
    (void)eng;
    g_ended++;
    *graph = &g_ended; /* any non-NULL handle */
    return OJ_OK;
}
static void stub_abort(oj_engine *eng) {
    (void)eng;
    g_aborted++;
}
static oj_status stub_replay(oj_engine *eng, void *graph) {
    (void)eng;
    (void)graph;
    g_replayed++;
    return OJ_OK;
}
static void stub_destroy(oj_engine *eng, void *graph) {
    (void)eng;
    (void)graph;
    g_destroyed++;
}

static void test_graph_capture_bookkeeping(void **state) {
    (void)state;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    static oj_backend stub;
    stub = *e->backend;
    stub.graph_begin = stub_begin;
    stub.graph_end = stub_end;
    stub.graph_abort = stub_abort;
    stub.graph_replay = stub_replay;
    stub.graph_destroy = stub_destroy;
    e->backend = &stub;
    /* begin, end, replay, free */
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    assert_true(oj_graph_capturing(e));
    oj_graph *g = oj_graph_capture_end(e);
    assert_non_null(g);
    assert_false(oj_graph_capturing(e));
    assert_int_equal(oj_graph_replay(g), OJ_OK);
    assert_int_equal(g_replayed, 1);
    oj_graph_free(g);
    assert_int_equal(g_destroyed, 1);
    /* a pending error refuses a capture; begin twice and a replay during a
     * capture are errors, which abandon it */
    oj_set_error(e, OJ_ERR_SHAPE, "earlier");
    assert_int_equal(oj_graph_capture_begin(e), OJ_ERR_SHAPE);
    assert_false(oj_graph_capturing(e));
    oj_clear_error(e);
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    assert_int_equal(oj_graph_capture_begin(e), OJ_ERR_INVALID_ARGUMENT);
    assert_null(oj_graph_capture_end(e));
    assert_int_equal(g_aborted, 1);
    assert_non_null(strstr(oj_last_error(e), "already in progress"));
    oj_clear_error(e);
    /* an error during the capture abandons it, also when it was cleared
     * before the end (a refused random draw would otherwise replay the
     * same numbers, or the refused op be missing) */
    int64_t n = 3;
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    oj_tensor *r = oj_rand_uniform(e, 1, &n, OJ_F32, 0.0, 1.0);
    assert_int_equal(oj_last_status(e), OJ_ERR_UNSUPPORTED);
    oj_release(r);
    oj_clear_error(e);
    assert_null(oj_graph_capture_end(e));
    assert_int_equal(oj_last_status(e), OJ_ERR_STATE);
    assert_non_null(strstr(oj_last_error(e), "was cleared"));
    assert_int_equal(g_aborted, 2);
    assert_false(oj_graph_capturing(e));
    oj_clear_error(e);
    /* the next capture starts clean */
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    g = oj_graph_capture_end(e);
    assert_non_null(g);
    /* the engine frees a capture still running and graphs still alive */
    assert_int_equal(oj_graph_capture_begin(e), OJ_OK);
    oj_engine_free(e);
    assert_int_equal(g_aborted, 3);
    assert_int_equal(g_destroyed, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_to_device_between_engines),
                                       cmocka_unit_test(test_copy_from_host),
                                       cmocka_unit_test(test_graph_refused_on_cpu),
                                       cmocka_unit_test(test_graph_capture_bookkeeping)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
