// test: oj_sample_logits — greedy (ties to the lowest id, the fast path and
// the penalised path agree), NaN and empty inputs refused, repetition
// penalty (CTRL), top-k, top-p and the draw from u.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ojas/infer.h"

static oj_sampler_config greedy(void) {
    oj_sampler_config c = oj_sampler_config_default();
    c.temperature = 0.0;
    return c;
}

static void test_greedy(void **state) {
    (void)state;
    oj_sampler_config c = greedy();
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, -INFINITY};
    assert_int_equal(oj_sample_logits(l, 6, &c, NULL, 0, 0.3), 1); // tie 1 vs 3: lowest id
    float neg[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(oj_sample_logits(neg, 3, &c, NULL, 0, 0.3), 0);
    float one[1] = {7.0f};
    assert_int_equal(oj_sample_logits(one, 1, &c, NULL, 0, 0.9), 0);
    /* a penalty of 1 with a history takes the same fast path result */
    int32_t hist[2] = {1, 1};
    assert_int_equal(oj_sample_logits(l, 6, &c, hist, 2, 0.3), 1);
}

static void test_refused(void **state) {
    (void)state;
    oj_sampler_config c = greedy();
    float l[3] = {0.0f, NAN, 1.0f};
    assert_int_equal(oj_sample_logits(l, 3, &c, NULL, 0, 0.5), -1); // NaN anywhere
    c.temperature = 1.0;
    assert_int_equal(oj_sample_logits(l, 3, &c, NULL, 0, 0.5), -1);
    assert_int_equal(oj_sample_logits(l, 0, &c, NULL, 0, 0.5), -1);
    assert_int_equal(oj_sample_logits(NULL, 3, &c, NULL, 0, 0.5), -1);
    assert_int_equal(oj_sample_logits(l, 3, NULL, NULL, 0, 0.5), -1);
}

static void test_repetition_penalty(void **state) {
    (void)state;
    oj_sampler_config c = greedy();
    c.repetition_penalty = 2.0;
    float l[3] = {3.0f, 2.0f, -1.0f};
    int32_t hist[3] = {0, 0, 2}; // token 0 seen (twice: penalised once): 3 / 2 = 1.5 < 2
    assert_int_equal(oj_sample_logits(l, 3, &c, hist, 3, 0.5), 1);
    c.repetition_penalty = 1.2; // 3 / 1.2 = 2.5 > 2: still 0
    assert_int_equal(oj_sample_logits(l, 3, &c, hist, 3, 0.5), 0);
}

static void test_top_k_top_p_and_draw(void **state) {
    (void)state;
    oj_sampler_config c = oj_sampler_config_default(); // temperature 1
    float l[4] = {0.0f, (float)log(3.0), (float)log(2.0), 0.0f}; // p = 1/7, 3/7, 2/7, 1/7
    /* sorted: id 1 (3/7), id 2 (2/7), id 0 (1/7), id 3 (1/7): cumulative 3/7, 5/7, 6/7, 1 */
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.0), 1);
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.5), 2);
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.8), 0);
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.99), 3);
    c.top_k = 1; // greedy whatever u
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.99), 1);
    c.top_k = 0;
    c.top_p = 0.5; // the smallest prefix reaching 0.5: ids 1 and 2, renormalised (3/5, 2/5)
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.55), 1);
    assert_int_equal(oj_sample_logits(l, 4, &c, NULL, 0, 0.65), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_top_k_top_p_and_draw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
