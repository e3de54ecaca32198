// test: the CPU backend's thread pool — every chunk of a parallel-for runs
// exactly once with the boundaries of (n, grain) whatever the thread count;
// nested calls run inline; per-thread scratch; thousands of back-to-back
// jobs (data races: run this test under ThreadSanitizer, docs/bench-cpu.md);
// the ISA level can be read and lowered; engines with started pools are
// freed cleanly (LeakSanitizer).
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/cpu_pool.h"
#include "ojas/core.h"

static oj_engine *engine(int threads) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = threads;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

typedef struct {
    int64_t n, grain;
    atomic_int *hits;         /* per item */
    atomic_int_fast64_t sum;  /* of chunk checksums */
    atomic_int bad;           /* chunk boundaries not those of (n, grain) */
    int threads;
    atomic_int tid_bad;
} cover_ctx;

static void cover_chunk(void *vc, int64_t b, int64_t e, int tid) {
    cover_ctx *c = vc;
    if (b % c->grain != 0 || (e != b + c->grain && e != c->n) || e > c->n || b >= e)
        atomic_fetch_add(&c->bad, 1);
    if (tid < 0 || tid >= c->threads) atomic_fetch_add(&c->tid_bad, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->sum, b * 31 + e);
}

static void test_cover_every_chunk_once(void **state) {
    (void)state;
    const int threads[] = {1, 2, 3, 7};
    const int64_t ns[] = {1, 2, 7, 64, 1000, 4097};
    const int64_t grains[] = {1, 3, 64, 5000};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        oj_engine *eng = engine(threads[t]);
        assert_int_equal(oj_cpu_threads(eng), threads[t]);
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t g = 0; g < sizeof grains / sizeof *grains; g++) {
                cover_ctx c = {.n = ns[a], .grain = grains[g], .threads = threads[t]};
                c.hits = calloc((size_t)ns[a], sizeof *c.hits);
                oj_cpu_parallel_for(eng, ns[a], grains[g], cover_chunk, &c);
                for (int64_t i = 0; i < ns[a]; i++) assert_int_equal(c.hits[i], 1);
                assert_int_equal(c.bad, 0);
                assert_int_equal(c.tid_bad, 0);
                int64_t want = 0;
                for (int64_t b = 0; b < ns[a]; b += grains[g])
                    want += b * 31 + (b + grains[g] < ns[a] ? b + grains[g] : ns[a]);
                assert_int_equal(c.sum, want);
                free(c.hits);
            }
        oj_cpu_parallel_for(eng, 0, 4, cover_chunk, NULL); /* nothing to do */
        oj_engine_free(eng);
    }
}

/* A chunk that calls parallel_for again: the inner loop runs inline on the
 * same thread with the same tid. */
typedef struct {
    oj_engine *eng;
    atomic_int inner_calls, tid_mismatch;
} nest_ctx;

typedef struct {
    nest_ctx *outer;
    int tid;
} nest_inner;

static void inner_chunk(void *vc, int64_t b, int64_t e, int tid) {
    nest_inner *in = vc;
    if (tid != in->tid) atomic_fetch_add(&in->outer->tid_mismatch, 1);
    atomic_fetch_add(&in->outer->inner_calls, (int)(e - b));
}

static void outer_chunk(void *vc, int64_t b, int64_t e, int tid) {
    nest_ctx *c = vc;
    for (int64_t i = b; i < e; i++) {
        nest_inner in = {c, tid};
        oj_cpu_parallel_for(c->eng, 10, 1, inner_chunk, &in);
    }
}

static void test_nested_runs_inline(void **state) {
    (void)state;
    oj_engine *eng = engine(3);
    nest_ctx c = {.eng = eng};
    oj_cpu_parallel_for(eng, 16, 1, outer_chunk, &c);
    assert_int_equal(c.inner_calls, 160);
    assert_int_equal(c.tid_mismatch, 0);
    oj_engine_free(eng);
}

/* Per-thread scratch: each chunk writes its tid's buffer and checks it is
 * not disturbed while it works. */
typedef struct {
    oj_engine *eng;
    atomic_int bad;
} scratch_ctx;

static void scratch_chunk(void *vc, int64_t b, int64_t e, int tid) {
    scratch_ctx *c = vc;
    int64_t *p = oj_cpu_scratch(c->eng, tid, 1000 * sizeof(int64_t));
    if (p == NULL || ((uintptr_t)p & 63) != 0) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    for (int64_t i = 0; i < 1000; i++) p[i] = b * 1000 + i;
    int64_t s = 0;
    for (int64_t r = 0; r < 50; r++)
        for (int64_t i = 0; i < 1000; i++) s += p[i] - (b * 1000 + i);
    if (s != 0 || e != b + 1) atomic_fetch_add(&c->bad, 1);
}

static void test_scratch_per_thread(void **state) {
    (void)state;
    oj_engine *eng = engine(4);
    scratch_ctx c = {.eng = eng};
    oj_cpu_parallel_for(eng, 200, 1, scratch_chunk, &c);
    assert_int_equal(c.bad, 0);
    /* grows and keeps alignment; out-of-range tids get NULL */
    assert_non_null(oj_cpu_scratch(eng, 0, 1 << 20));
    assert_null(oj_cpu_scratch(eng, 4, 16));
    assert_null(oj_cpu_scratch(eng, -1, 16));
    oj_engine_free(eng);
}

/* Many tiny jobs back to back: the generation/ticket handshake must never
 * lose or repeat a chunk, nor let a late worker run a stale job. */
typedef struct {
    atomic_int_fast64_t total;
} sum_ctx;

static void sum_chunk(void *vc, int64_t b, int64_t e, int tid) {
    (void)tid;
    sum_ctx *c = vc;
    int64_t s = 0;
    for (int64_t i = b; i < e; i++) s += i;
    atomic_fetch_add(&c->total, s);
}

static void test_many_jobs(void **state) {
    (void)state;
    for (int threads = 2; threads <= 7; threads += 5) {
        oj_engine *eng = engine(threads);
        for (int job = 0; job < 3000; job++) {
            sum_ctx c = {0};
            int64_t n = 1 + job % 97;
            oj_cpu_parallel_for(eng, n, 1 + job % 5, sum_chunk, &c);
            assert_int_equal(c.total, n * (n - 1) / 2);
        }
        oj_engine_free(eng);
    }
}

static void test_isa_levels(void **state) {
    (void)state;
    oj_engine *eng = engine(1);
    oj_cpu_isa best = oj_cpu_isa_detect();
    assert_int_equal(oj_cpu_isa_of(eng), best);
    assert_string_equal(oj_cpu_isa_name(OJ_ISA_SCALAR), "scalar");
    assert_string_equal(oj_cpu_isa_name(OJ_ISA_AVX2), "avx2");
    assert_string_equal(oj_cpu_isa_name(OJ_ISA_AVX512), "avx512");
    assert_int_equal(oj__cpu_set_isa(eng, OJ_ISA_SCALAR), OJ_ISA_SCALAR);
    assert_int_equal(oj_cpu_isa_of(eng), OJ_ISA_SCALAR);
    /* asking for more than the CPU has gives what it has */
    assert_int_equal(oj__cpu_set_isa(eng, OJ_ISA_AVX512), best);
    oj_engine_free(eng);
}

/* threads = 0 resolves to the usable CPUs (at least 1). */
static void test_default_threads(void **state) {
    (void)state;
    oj_engine *eng = engine(0);
    assert_true(oj_cpu_threads(eng) >= 1);
    assert_int_equal(oj_cpu_threads(eng), oj_engine_threads(eng));
    cover_ctx c = {.n = 100, .grain = 7, .threads = oj_cpu_threads(eng)};
    c.hits = calloc(100, sizeof *c.hits);
    oj_cpu_parallel_for(eng, 100, 7, cover_chunk, &c);
    for (int i = 0; i < 100; i++) assert_int_equal(c.hits[i], 1);
    free(c.hits);
    oj_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cover_every_chunk_once),
        cmocka_unit_test(test_nested_runs_inline),
        cmocka_unit_test(test_scratch_per_thread),
        cmocka_unit_test(test_many_jobs),
        cmocka_unit_test(test_isa_levels),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
