/* Helpers shared by the optimizer tests that compare two ways of one
 * update (test_optim_batch.c, test_optim_multi.c): an engine, a seeded
 * stream of random values, and a gradient set to given values. */
#ifndef OJAS_OPTIM_TESTUTIL_H
#define OJAS_OPTIM_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/ops.h"

/* A CPU engine with 2 threads, numerics num and RNG seed `seed`. */
static inline oj_engine *ot_engine(oj_numerics num, uint64_t seed) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.numerics = num;
    cfg.seed = seed;
    cfg.threads = 2;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

/* The next value in [-1, 1) of the LCG whose state is *s. */
static inline double ot_rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1p-52 - 1.0;
}

/* p's grad = exactly the values of g (a copy, unscoped), through backward
 * of sum(p * g). */
static inline void ot_set_grad(oj_tensor *p, oj_tensor *g) {
    oj_engine *eng = oj_tensor_engine(p);
    oj_zero_grad(p);
    oj_scope_begin(eng);
    oj_tensor *loss = oj_sum_all(oj_mul(p, g));
    assert_non_null(loss);
    assert_int_equal(oj_backward(loss, false), OJ_OK);
    oj_scope_end(eng);
}

#endif
