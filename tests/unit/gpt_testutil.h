/* Helpers shared by the tests that run tiny GPT models on one engine
 * (test_gpt.c, test_optim.c): a small model, a checksum of its weights,
 * token ids. */
#ifndef OJAS_GPT_TESTUTIL_H
#define OJAS_GPT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/gpt.h"

/* The preset with vocab_size 50 and block_size 16 (n_kv_head too when > 0),
 * made on e with seed 3; the caller frees it. */
static inline oj_gpt *gt_tiny_model(oj_engine *e, const char *preset, int64_t n_kv_head) {
    oj_gpt_config c;
    assert_true(oj_gpt_preset(preset, &c));
    c.vocab_size = 50;
    c.block_size = 16;
    if (n_kv_head > 0)
        c.n_kv_head = n_kv_head;
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(e, &c, 3, &m), OJ_OK);
    return m;
}

/* A weighted sum of every parameter's values (detects any change). */
static inline double gt_checksum(oj_gpt *m) {
    oj_named_tensors sd = oj_gpt_state_dict(m);
    double s = 0;
    for (int64_t i = 0; i < sd.n; i++)
        for (int64_t j = 0; j < oj_numel(sd.tensors[i]); j++)
            s += oj_item_at(sd.tensors[i], j) * (double)(j % 7 + 1);
    return s;
}

/* [B, T] i32 token ids below 50 (B T <= 64), owned by e's current scope. */
static inline oj_tensor *gt_ids(oj_engine *e, int64_t B, int64_t T) {
    int32_t ids[64];
    assert_true(B * T <= 64);
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = (int32_t)((i * 13 + 5) % 50);
    int64_t shape[2] = {B, T};
    return oj_from_host(e, 2, shape, OJ_I32, ids, (size_t)(B * T) * sizeof(int32_t));
}

#endif
