/* A kept weight copy under a replayed graph that writes its parameter,
 * shared by the CPU check (test_weight_copies.c, the graph's entries
 * emulated on the host by graph_emu_testutil.h) and the CUDA one
 * (tests/gpu/test_gpu_train.c): after each replay the kept copy is the
 * bytes of a fresh cast. */
#ifndef OJAS_WCOPY_TESTUTIL_H
#define OJAS_WCOPY_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "ojas/ojas.h"

/* w (f32) keeps a bf16 copy, made now; then a graph is captured that
 * writes in (w's shape, f32) into w in place with oj_copy_. Returns the
 * graph (the caller frees it; w keeps its copy until
 * oj__wcopy_keep(w, false)). */
static inline oj_graph *wc_capture_write(oj_engine *eng, oj_tensor *w, oj_tensor *in) {
    assert_non_null(w);
    assert_non_null(in);
    oj__wcopy_keep(w, true);
    oj_tensor *c = NULL;
    assert_true(oj__wcopy_get(w, OJ_BF16, &c)); /* made now */
    oj_release(c);
    assert_int_equal(oj_graph_capture_begin(eng), OJ_OK);
    assert_int_equal(oj_copy_(w, in), OJ_OK);
    oj_graph *g = oj_graph_capture_end(eng);
    assert_non_null(g);
    return g;
}

/* rounds replays of g (from wc_capture_write), in given the values
 * per_round * round - per_elem * i (i its flat index) before each: after
 * each replay w's kept bf16 copy has the dtype, size and bytes of a fresh
 * oj_cast of w (both read back to the host, so any device). */
static inline void wc_replay_rounds(oj_graph *g, oj_tensor *w, oj_tensor *in, int rounds,
                                    float per_round, float per_elem) {
    int64_t n = oj_numel(in);
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int round = 0; round < rounds; round++) {
        for (int64_t i = 0; i < n; i++) v[i] = per_round * (float)round - per_elem * (float)i;
        assert_int_equal(oj_copy_from_host(in, v, (size_t)n * sizeof *v), OJ_OK);
        assert_int_equal(oj_graph_replay(g), OJ_OK);
        oj_tensor *c = NULL;
        assert_true(oj__wcopy_get(w, OJ_BF16, &c));
        assert_non_null(c);
        oj_tensor *want = oj_cast(w, OJ_BF16);
        assert_non_null(want);
        assert_int_equal(oj_tensor_dtype(c), oj_tensor_dtype(want));
        assert_int_equal(oj_numel(c), oj_numel(want));
        size_t nb = (size_t)oj_numel(c) * oj_dtype_size(oj_tensor_dtype(c));
        unsigned char *x = malloc(nb), *y = malloc(nb);
        assert_true(x && y);
        assert_int_equal(oj_to_host(c, x, nb), OJ_OK);
        assert_int_equal(oj_to_host(want, y, nb), OJ_OK);
        bool same = memcmp(x, y, nb) == 0;
        free(x);
        free(y);
        if (!same) fail_msg("round %d: the kept copy after the replay is not the fresh cast", round);
        oj_release(c);
        oj_release(want);
    }
    free(v);
}

#endif
