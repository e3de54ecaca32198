// test: oj_sample_logits — greedy (ties to the lowest id, the fast path and
// the penalised path agree), NaN, +inf, all -inf and empty inputs refused
// (a -inf logit is never drawn), repetition
// penalty (CTRL), top-k, top-p and the draw from u; top-k by selection
// gives the tokens of a full sort.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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
    c.top_k = 2; /* the one-pass top-k sees it too, wherever it sits */
    assert_int_equal(oj_sample_logits(l, 3, &c, NULL, 0, 0.5), -1);
    float late[4] = {3.0f, 2.0f, 1.0f, NAN}; /* below the heap's k-th best would not hide it */
    assert_int_equal(oj_sample_logits(late, 4, &c, NULL, 0, 0.5), -1);
    c.top_k = 0;
    assert_int_equal(oj_sample_logits(l, 0, &c, NULL, 0, 0.5), -1);
    assert_int_equal(oj_sample_logits(NULL, 3, &c, NULL, 0, 0.5), -1);
    assert_int_equal(oj_sample_logits(l, 3, NULL, NULL, 0, 0.5), -1);
}

/* +inf (a NaN softmax) and only -inf (nothing to draw) are refused on every
 * path; a -inf logit is a masked token and never drawn. */
static void test_inf_logits(void **state) {
    (void)state;
    float pos[4] = {0.0f, INFINITY, 1.0f, -INFINITY};
    float late[4] = {3.0f, 2.0f, 1.0f, INFINITY};
    float neg[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_string_equal(oj_logits_fault(pos, 4), "+inf");
    assert_string_equal(oj_logits_fault(neg, 3), "only -inf");
    float nan[2] = {-INFINITY, NAN};
    assert_string_equal(oj_logits_fault(nan, 2), "NaN");
    int32_t hist[1] = {2};
    for (int path = 0; path < 4; path++) {
        oj_sampler_config c = oj_sampler_config_default();
        c.temperature = path == 0 ? 0.0 : 1.0; /* greedy, full sort, top-k, penalised */
        c.top_k = path == 2 ? 2 : 0;
        c.repetition_penalty = path == 3 ? 1.5 : 1.0;
        const int64_t nh = path == 3 ? 1 : 0;
        for (double u = 0.0; u < 1.0; u += 0.25) {
            assert_int_equal(oj_sample_logits(pos, 4, &c, hist, nh, u), -1);
            assert_int_equal(oj_sample_logits(late, 4, &c, hist, nh, u), -1);
            assert_int_equal(oj_sample_logits(neg, 3, &c, hist, nh, u), -1);
        }
    }
    /* masked tokens 1, 3, 4: never drawn, whatever the draw; u = 1 (a draw
     * rounding to the total) falls back to the last token of nonzero
     * probability, not to a masked one */
    float m[5] = {0.0f, -INFINITY, 1.0f, -INFINITY, -INFINITY};
    const double us[] = {0.0, 0.3, 0.7, 0.999999, 1.0 - 0x1p-53, 1.0};
    for (int path = 0; path < 6; path++) {
        oj_sampler_config c = oj_sampler_config_default();
        c.temperature = path == 0 ? 0.0 : path == 5 ? 1e-3 : 1.0;
        c.top_k = path == 2 ? 4 : 0;                 /* k above the unmasked count */
        c.top_p = path == 3 ? 0.9999999999 : 1.0;    /* a nucleus rounding short of 1 */
        c.repetition_penalty = path == 4 ? 1.5 : 1.0; /* -inf times a penalty */
        for (size_t j = 0; j < sizeof us / sizeof us[0]; j++) {
            int32_t t = oj_sample_logits(m, 5, &c, hist, path == 4 ? 1 : 0, us[j]);
            assert_true(t == 0 || t == 2);
        }
    }
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

/* ---- the sampler as a full sort over every candidate (the reference the
 * top-k selection must agree with, token for token) */
typedef struct {
    double logit;
    int32_t id;
} ref_cand;

static int ref_desc(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static int32_t ref_sample(const float *l, int64_t V, const oj_sampler_config *cfg,
                          const int32_t *hist, int64_t n, double u) {
    ref_cand *c = malloc((size_t)V * sizeof *c);
    assert_non_null(c);
    for (int64_t i = 0; i < V; i++) c[i].logit = l[i], c[i].id = (int32_t)i;
    for (int64_t k = 0; k < n; k++) {
        bool seen = false;
        for (int64_t j = 0; j < k; j++) seen = seen || hist[j] == hist[k];
        if (seen) continue;
        double *x = &c[hist[k]].logit;
        *x = *x > 0 ? *x / cfg->repetition_penalty : *x * cfg->repetition_penalty;
    }
    qsort(c, (size_t)V, sizeof *c, ref_desc);
    int64_t keep = cfg->top_k > 0 && cfg->top_k < V ? cfg->top_k : V;
    double mx = c[0].logit, total = 0.0;
    for (int64_t i = 0; i < keep; i++) total += c[i].logit = exp((c[i].logit - mx) / cfg->temperature);
    if (cfg->top_p < 1.0) {
        double acc = 0.0;
        int64_t k = 0;
        while (k < keep) {
            acc += c[k++].logit / total;
            if (acc >= cfg->top_p) break;
        }
        keep = k;
        total = 0.0;
        for (int64_t i = 0; i < keep; i++) total += c[i].logit;
    }
    double r = u * total, acc = 0.0;
    int32_t out = c[keep - 1].id;
    for (int64_t i = 0; i < keep; i++)
        if (r < (acc += c[i].logit)) {
            out = c[i].id;
            break;
        }
    free(c);
    return out;
}

/* top-k picks the candidates a full sort would put first (O(V log k)):
 * the same token as the full sort for every k (1, small, V - 1, V, past V),
 * with many equal logits (ties go to the lower id), a penalty and top-p */
static void test_top_k_selection_matches_sort(void **state) {
    (void)state;
    enum { V = 3001 };
    float *l = malloc(V * sizeof *l);
    assert_non_null(l);
    uint32_t s = 12345u;
    int32_t hist[5] = {7, 100, 7, 2999, 0};
    const int64_t ks[] = {1, 2, 7, 40, 333, V - 1, V, V + 5};
    int checked = 0;
    for (int round = 0; round < 6; round++) {
        for (int64_t i = 0; i < V; i++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            /* rounds 0-2: a few distinct values (ties everywhere); 3-5: spread */
            l[i] = round < 3 ? (float)(s % 9) * 0.5f - 2.0f : (float)(s % 100000) * 1e-4f - 5.0f;
        }
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            oj_sampler_config c = oj_sampler_config_default();
            c.top_k = ks[ki];
            c.temperature = 0.7 + 0.2 * round;
            c.top_p = round % 2 ? 0.9 : 1.0;
            c.repetition_penalty = round % 3 == 2 ? 1.3 : 1.0;
            for (int d = 0; d < 8; d++) {
                double u = (d + 0.37) / 8.0;
                int32_t want = ref_sample(l, V, &c, hist, 5, u);
                int32_t got = oj_sample_logits(l, V, &c, hist, 5, u);
                if (got != want)
                    fail_msg("round %d top_k %lld u %g: %d, the full sort gives %d", round,
                             (long long)c.top_k, u, got, want);
                checked++;
            }
        }
    }
    assert_int_equal(checked, 6 * 8 * 8);
    free(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_inf_logits),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_top_k_top_p_and_draw),
        cmocka_unit_test(test_top_k_selection_matches_sort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
