// test: the graph pool's range heap: best fit, splitting, coalescing, the
// tail and growth, checked op by op against a byte map under random use
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/range_heap.h"

static void test_best_fit_split_merge(void **state) {
    (void)state;
    oj__range_heap h = {0};
    size_t off;
    bool oom;
    assert_false(oj__rheap_take(&h, 10, &off, &oom)); /* empty region */
    assert_false(oom);
    assert_true(oj__rheap_grow(&h, 1000));
    assert_int_equal(oj__rheap_tail(&h), 1000);
    assert_true(oj__rheap_take(&h, 100, &off, &oom));
    assert_int_equal(off, 0);
    assert_true(oj__rheap_take(&h, 200, &off, &oom));
    assert_int_equal(off, 100);
    assert_true(oj__rheap_take(&h, 300, &off, &oom));
    assert_int_equal(off, 300);
    assert_int_equal(oj__rheap_tail(&h), 400);
    oj__rheap_give(&h, 0, 100); /* free: [0,100) and [600,1000) */
    assert_true(oj__rheap_is_free(&h, 0, 100));
    assert_false(oj__rheap_is_free(&h, 0, 101));
    assert_true(oj__rheap_take(&h, 60, &off, &oom)); /* the 100 fits best */
    assert_int_equal(off, 0);
    assert_true(oj__rheap_take(&h, 150, &off, &oom)); /* only the tail holds it */
    assert_int_equal(off, 600);
    assert_int_equal(oj__rheap_tail(&h), 250);
    assert_false(oj__rheap_take(&h, 251, &off, &oom));
    assert_false(oom);
    /* everything back: one range, the whole region */
    oj__rheap_give(&h, 600, 150);
    oj__rheap_give(&h, 100, 200);
    oj__rheap_give(&h, 0, 60);
    assert_int_equal(h.n, 2); /* [0,300) and [600,1000) around the 300 still taken */
    assert_int_equal(h.free[0].off, 0);
    assert_int_equal(h.free[0].len, 300);
    oj__rheap_give(&h, 300, 300);
    assert_int_equal(h.n, 1);
    assert_int_equal(h.free[0].len, 1000);
    assert_true(oj__rheap_is_free(&h, 0, 1000));
    /* growth merges with the free tail */
    assert_true(oj__rheap_grow(&h, 24));
    assert_int_equal(h.n, 1);
    assert_int_equal(oj__rheap_tail(&h), 1024);
    oj__rheap_clear(&h);
}

/* The map: 1 where taken. Checks the heap's free list is exactly the
 * map's zero runs, sorted and coalesced. */
static void check_against(const oj__range_heap *h, const unsigned char *map) {
    size_t x = 0;
    int64_t i = 0;
    while (x < h->top) {
        if (map[x]) {
            x++;
            continue;
        }
        size_t run = 0;
        while (x + run < h->top && !map[x + run]) run++;
        assert_true(i < h->n);
        assert_int_equal(h->free[i].off, x);
        assert_int_equal(h->free[i].len, run);
        i++;
        x += run;
    }
    assert_int_equal(i, h->n);
}

static void test_random_against_byte_map(void **state) {
    (void)state;
    enum { LIMIT = 1 << 16, SLOTS = 64 };
    unsigned char *map = calloc(LIMIT, 1);
    assert_non_null(map);
    size_t offs[SLOTS], lens[SLOTS] = {0};
    oj__range_heap h = {0};
    unsigned rng = 12345;
    int grows = 0, reuses = 0;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 1103515245u + 12345u;
        int slot = (int)((rng >> 8) % SLOTS);
        if (lens[slot]) { /* give it back */
            memset(map + offs[slot], 0, lens[slot]);
            oj__rheap_give(&h, offs[slot], lens[slot]);
            lens[slot] = 0;
        } else {
            rng = rng * 1103515245u + 12345u;
            size_t len = 1 + (rng >> 8) % 900;
            /* the smallest free range that holds len, from the map */
            size_t best_len = 0, best_off = 0;
            for (int64_t i = 0; i < h.n; i++)
                if (h.free[i].len >= len && (best_len == 0 || h.free[i].len < best_len))
                    best_len = h.free[i].len, best_off = h.free[i].off;
            size_t off;
            bool oom;
            bool took = oj__rheap_take(&h, len, &off, &oom);
            assert_false(oom);
            if (best_len) {
                assert_true(took);
                assert_int_equal(off, best_off);
                reuses++;
            } else {
                assert_false(took);
                size_t tail = oj__rheap_tail(&h);
                assert_true(tail < len);
                assert_true(h.top + len - tail <= LIMIT);
                assert_true(oj__rheap_grow(&h, len - tail));
                assert_true(oj__rheap_take(&h, len, &off, &oom));
                assert_int_equal(off + len, h.top);
                grows++;
            }
            for (size_t b = 0; b < len; b++) assert_int_equal(map[off + b], 0); /* no overlap */
            memset(map + off, 1, len);
            offs[slot] = off;
            lens[slot] = len;
        }
        check_against(&h, map);
    }
    assert_true(grows > 0 && reuses > grows);
    assert_true(h.top < SLOTS * 900 * 2); /* best fit keeps the region near the live peak */
    for (int s = 0; s < SLOTS; s++)
        if (lens[s]) oj__rheap_give(&h, offs[s], lens[s]);
    assert_int_equal(h.n, 1);
    assert_int_equal(h.live, 0);
    assert_int_equal(h.free[0].len, h.top);
    oj__rheap_clear(&h);
    free(map);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_fit_split_merge),
        cmocka_unit_test(test_random_against_byte_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
