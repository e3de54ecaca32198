// test: adversarial use of the GPT and generation API found by probing: a
// KV cache created for one model and used with another (heap overflow
// under ASan), a NULL cache, a NULL prompt, NaN sampling settings, the
// context error message, and a cache freed after its model.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/core.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/ops.h"

static oj_engine *eng;
static oj_gpt *m2, *m4; /* 2 and 4 layers, same width */

static int setup(void **state) {
    (void)state;
    if (oj_engine_create(NULL, &eng, NULL) != OJ_OK) return -1;
    oj_gpt_config c;
    if (!oj_gpt_preset("nanolab-tiny", &c)) return -1;
    c.vocab_size = 50;
    c.block_size = 8;
    c.n_layer = 2;
    if (oj_gpt_create(eng, &c, 1, &m2) != OJ_OK) return -1;
    c.n_layer = 4;
    return oj_gpt_create(eng, &c, 1, &m4) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    oj_gpt_free(m2);
    oj_gpt_free(m4);
    oj_engine_free(eng);
    return 0;
}

#define EXPECT_ERR(st, fragment)                                            \
    do {                                                                    \
        assert_int_equal(oj_last_status(eng), (st));                        \
        if (!strstr(oj_last_error(eng), (fragment)))                        \
            fail_msg("'%s' lacks '%s'", oj_last_error(eng), (fragment));    \
        oj_clear_error(eng);                                                \
    } while (0)

/* Was: the 4-layer model read c->k[2] of the 2-layer model's cache
 * (heap-buffer-overflow in cache_append). */
static void test_cache_of_another_model(void **state) {
    (void)state;
    oj_kv_cache *c = NULL;
    assert_int_equal(oj_kv_cache_create(m2, 1, 8, &c), OJ_OK);
    oj_scope_begin(eng);
    oj_tensor *idx = oj_zeros(eng, 2, (int64_t[]){1, 2}, OJ_I64);
    assert_null(oj_gpt_forward_cached(m4, c, idx));
    EXPECT_ERR(OJ_ERR_INVALID_ARGUMENT, "another model");
    assert_int_equal(oj_kv_cache_len(c), 0);
    /* Was: NULL returned with no error recorded. */
    assert_null(oj_gpt_forward_cached(m2, NULL, idx));
    EXPECT_ERR(OJ_ERR_INVALID_ARGUMENT, "KV cache is NULL");
    /* its own model still works */
    assert_non_null(oj_gpt_forward_cached(m2, c, idx));
    assert_int_equal(oj_kv_cache_len(c), 2);
    oj_scope_end(eng);
    oj_kv_cache_free(c);
}

/* Was: oj_kv_cache_free read the layer count from the freed model
 * (heap-use-after-free under ASan). */
static void test_cache_freed_after_model(void **state) {
    (void)state;
    const int64_t live = oj_engine_live_tensors(eng);
    oj_gpt_config c = *oj_gpt_get_config(m2);
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 3, &m), OJ_OK);
    oj_kv_cache *kc = NULL;
    assert_int_equal(oj_kv_cache_create(m, 2, 8, &kc), OJ_OK);
    oj_gpt_free(m);
    oj_kv_cache_free(kc);
    assert_int_equal(oj_engine_live_tensors(eng), live);
}

/* Was: "positions 0..8 exceed the context (block_size 80)" for block_size 8
 * (a stray 0 printed for the missing cache capacity). */
static void test_context_message(void **state) {
    (void)state;
    oj_scope_begin(eng);
    oj_tensor *idx = oj_zeros(eng, 2, (int64_t[]){1, 9}, OJ_I64);
    assert_null(oj_gpt_forward(m2, idx));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(eng), "(block_size 8)"));
    oj_clear_error(eng);
    oj_scope_end(eng);
}

/* Was: a NULL prompt with a length was dereferenced (SIGSEGV), and a NaN
 * temperature sampled the least likely token every step with OJ_OK. */
static void test_generate_bad_arguments(void **state) {
    (void)state;
    const int32_t *prompts[1] = {NULL};
    int64_t lens[1] = {1};
    int32_t *out[1] = {NULL};
    int64_t olen[1] = {0};
    oj_sampler_config sc = oj_sampler_config_default();
    sc.max_new_tokens = 2;
    assert_int_equal(oj_generate(m2, 1, prompts, lens, &sc, out, olen, NULL, NULL),
                     OJ_ERR_INVALID_ARGUMENT);
    EXPECT_ERR(OJ_ERR_INVALID_ARGUMENT, "prompt 0 is NULL");
    int32_t p[1] = {3};
    prompts[0] = p;
    const double bad[][3] = {{NAN, 1, 1}, {INFINITY, 1, 1}, {1, NAN, 1}, {1, 1, NAN},
                             {1, 1, 0},   {1, 1, -2},       {1, 1, INFINITY}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sc.temperature = bad[i][0];
        sc.top_p = bad[i][1];
        sc.repetition_penalty = bad[i][2];
        assert_int_equal(oj_generate(m2, 1, prompts, lens, &sc, out, olen, NULL, NULL),
                         OJ_ERR_INVALID_ARGUMENT);
        EXPECT_ERR(OJ_ERR_INVALID_ARGUMENT, "generate: temperature");
    }
    /* greedy still works */
    sc = oj_sampler_config_default();
    sc.temperature = 0;
    sc.max_new_tokens = 2;
    assert_int_equal(oj_generate(m2, 1, prompts, lens, &sc, out, olen, NULL, NULL), OJ_OK);
    assert_int_equal(olen[0], 2);
    free(out[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_of_another_model),
        cmocka_unit_test(test_cache_freed_after_model),
        cmocka_unit_test(test_context_message),
        cmocka_unit_test(test_generate_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
