// test: hierarchical budgets: limits, peaks, failure changes nothing, threads;
// the fused ops under every byte budget fail only with OJ_ERR_CAPACITY, leaking nothing
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/internal.h"
#include "ojas/core.h"
#include "core/internal.h"
#include "nn_testutil.h"

static void test_reserve_release_peak(void **state) {
    (void)state;
    oj_budget *root = oj_budget_create(NULL, "root", 1000);
    assert_non_null(root);
    assert_string_equal(oj_budget_name(root), "root");
    assert_null(oj_budget_parent(root));
    assert_int_equal(oj_budget_reserve(root, 400), OJ_OK);
    assert_int_equal(oj_budget_reserve(root, 600), OJ_OK);
    assert_int_equal(oj_budget_current(root), 1000);
    assert_int_equal(oj_budget_reserve(root, 1), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_current(root), 1000);
    assert_int_equal(oj_budget_release(root, 700), OJ_OK);
    assert_int_equal(oj_budget_current(root), 300);
    assert_int_equal(oj_budget_peak(root), 1000);
    oj_budget_reset_peak(root);
    assert_int_equal(oj_budget_peak(root), 300);
    assert_int_equal(oj_budget_release(root, 301), OJ_ERR_STATE);
    assert_int_equal(oj_budget_reserve(root, -1), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_budget_reserve(NULL, 1), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_budget_free(root), OJ_ERR_STATE); /* bytes still reserved */
    assert_int_equal(oj_budget_release(root, 300), OJ_OK);
    assert_int_equal(oj_budget_free(root), OJ_OK);
    assert_int_equal(oj_budget_free(NULL), OJ_OK);
    assert_null(oj_budget_create(NULL, "neg", -5));
}

static void test_hierarchy(void **state) {
    (void)state;
    oj_budget *root = oj_budget_create(NULL, "root", 1000);
    oj_budget *a = oj_budget_create(root, "a", 600);
    oj_budget *b = oj_budget_create(root, "b", OJ_UNLIMITED);
    oj_budget *a1 = oj_budget_create(a, "a1", 500);
    assert_ptr_equal(oj_budget_parent(a1), a);
    assert_int_equal(oj_budget_reserve(a1, 500), OJ_OK);
    assert_int_equal(oj_budget_current(a), 500);
    assert_int_equal(oj_budget_current(root), 500);
    /* a1's own limit */
    assert_int_equal(oj_budget_reserve(a1, 1), OJ_ERR_CAPACITY);
    /* a has room for 100 only */
    assert_int_equal(oj_budget_reserve(a, 101), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_reserve(a, 100), OJ_OK);
    /* b is unlimited but the root has 400 left */
    assert_int_equal(oj_budget_reserve(b, 401), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_current(b), 0);
    assert_int_equal(oj_budget_current(root), 600);
    assert_int_equal(oj_budget_reserve(b, 400), OJ_OK);
    assert_int_equal(oj_budget_current(root), 1000);
    /* limits */
    assert_int_equal(oj_budget_set_limit(a, 10), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_limit(a), 600);
    assert_int_equal(oj_budget_set_limit(a, 700), OJ_OK);
    assert_int_equal(oj_budget_limit(a), 700);
    /* freeing with children or bytes fails */
    assert_int_equal(oj_budget_free(a), OJ_ERR_STATE);
    assert_int_equal(oj_budget_release(a1, 500), OJ_OK);
    assert_int_equal(oj_budget_free(a1), OJ_OK);
    assert_int_equal(oj_budget_release(a, 100), OJ_OK);
    assert_int_equal(oj_budget_release(b, 400), OJ_OK);
    assert_int_equal(oj_budget_current(root), 0);
    assert_int_equal(oj_budget_peak(root), 1000);
    assert_int_equal(oj_budget_free(root), OJ_ERR_STATE); /* children */
    assert_int_equal(oj_budget_free(a), OJ_OK);
    assert_int_equal(oj_budget_free(b), OJ_OK);
    assert_int_equal(oj_budget_free(root), OJ_OK);
}

static void test_huge_values_do_not_overflow(void **state) {
    (void)state;
    oj_budget *root = oj_budget_create(NULL, "root", OJ_UNLIMITED);
    assert_int_equal(oj_budget_reserve(root, INT64_MAX - 10), OJ_OK);
    assert_int_equal(oj_budget_reserve(root, 11), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_reserve(root, INT64_MAX), OJ_ERR_CAPACITY);
    assert_int_equal(oj_budget_current(root), INT64_MAX - 10);
    assert_int_equal(oj_budget_release(root, INT64_MAX - 10), OJ_OK);
    assert_int_equal(oj_budget_free(root), OJ_OK);
}

enum { THREADS = 8, ITERS = 20000 };

typedef struct {
    oj_budget *b;
    int failures;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = p;
    for (int i = 0; i < ITERS; i++) {
        int64_t n = 1 + (i % 7);
        if (oj_budget_reserve(w->b, n) == OJ_OK) oj_budget_release(w->b, n);
        else w->failures++;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    /* Each thread holds at most 7 bytes at a time: 8 x 7 = 56 <= 64, so
     * with a correct lock no reservation ever fails and the totals return
     * to zero. */
    oj_budget *root = oj_budget_create(NULL, "root", 64);
    oj_budget *kids[THREADS];
    pthread_t th[THREADS];
    worker_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        kids[i] = oj_budget_create(root, "kid", OJ_UNLIMITED);
        args[i] = (worker_arg){kids[i], 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
        assert_int_equal(oj_budget_current(kids[i]), 0);
    }
    assert_int_equal(oj_budget_current(root), 0);
    assert_true(oj_budget_peak(root) <= 56);
    assert_true(oj_budget_peak(root) >= 1);
    for (int i = 0; i < THREADS; i++) assert_int_equal(oj_budget_free(kids[i]), OJ_OK);
    assert_int_equal(oj_budget_free(root), OJ_OK);
}

static void test_threads_contended_limit(void **state) {
    (void)state;
    /* Limit below demand: some reservations fail, but the root never
     * exceeds its limit and ends at zero. */
    oj_budget *root = oj_budget_create(NULL, "root", 20);
    pthread_t th[THREADS];
    worker_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (worker_arg){root, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    assert_int_equal(oj_budget_current(root), 0);
    assert_true(oj_budget_peak(root) <= 20);
    assert_int_equal(oj_budget_free(root), OJ_OK);
}

static void test_engine_budget_capacity(void **state) {
    (void)state;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.budget_bytes = 1 << 20;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    oj_budget *root = oj_engine_budget(eng);
    assert_int_equal(oj_budget_limit(root), 1 << 20);
    int64_t big = 1 << 19; /* f32: 2 MiB > 1 MiB */
    assert_null(oj_empty(eng, 1, &big, OJ_F32));
    assert_int_equal(oj_last_status(eng), OJ_ERR_CAPACITY);
    assert_non_null(strstr(oj_last_error(eng), "root"));
    assert_int_equal(oj_budget_current(root), 0);
    oj_clear_error(eng);
    /* A child budget charged by tensors; freed tensors return the bytes. */
    oj_budget *act = oj_budget_create(root, "activations", 4096);
    assert_ptr_equal(oj_engine_use_budget(eng, act), root);
    int64_t n = 512; /* 2 KiB */
    oj_tensor *t = oj_zeros(eng, 1, &n, OJ_F32);
    assert_non_null(t);
    assert_int_equal(oj_budget_current(act), 2048);
    oj_tensor *u = oj_zeros(eng, 1, &n, OJ_F32);
    assert_non_null(u);
    assert_null(oj_zeros(eng, 1, &n, OJ_F32)); /* 6 KiB > 4 KiB */
    assert_int_equal(oj_last_status(eng), OJ_ERR_CAPACITY);
    assert_non_null(strstr(oj_last_error(eng), "activations"));
    oj_clear_error(eng);
    oj_release(t);
    oj_release(u);
    assert_int_equal(oj_budget_current(act), 0);
    /* pooled bytes stay on the root */
    assert_int_equal(oj_budget_current(root), oj_engine_pooled_bytes(eng));
    assert_true(oj_engine_pooled_bytes(eng) >= 4096);
    /* reuse from the pool moves the charge back to the child */
    t = oj_zeros(eng, 1, &n, OJ_F32);
    assert_int_equal(oj_budget_current(act), 2048);
    oj_release(t);
    oj_engine_use_budget(eng, NULL);
    assert_int_equal(oj_budget_free(act), OJ_OK);
    oj_engine_trim_pool(eng);
    assert_int_equal(oj_engine_pooled_bytes(eng), 0);
    assert_int_equal(oj_budget_current(root), 0);
    oj_engine_free(eng);
}

static void test_pool_trimmed_when_full(void **state) {
    (void)state;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.budget_bytes = 1 << 20;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    int64_t a = 600 * 1024 / 4, b = 700 * 1024 / 4;
    oj_tensor *t = oj_empty(eng, 1, &a, OJ_F32);
    assert_non_null(t);
    oj_release(t); /* ~600 KiB pooled in a class that does not fit 700 KiB */
    assert_true(oj_engine_pooled_bytes(eng) > 0);
    t = oj_empty(eng, 1, &b, OJ_F32); /* needs the pool trimmed to fit */
    assert_non_null(t);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_release(t);
    oj_engine_free(eng);
}

/* memory_allocated counts live storage only: a released tensor's block
 * goes to the pool (still on the budget) and leaves memory_allocated;
 * max_memory_allocated keeps the high-water mark. */
static void test_memory_allocated_excludes_pool(void **state) {
    (void)state;
    oj_engine *e = NULL;
    assert_int_equal(oj_engine_create(NULL, &e, NULL), OJ_OK);
    assert_int_equal(oj_engine_memory_allocated(e), 0);
    int64_t shape[1] = {1 << 20}; /* 4 MiB of f32 */
    oj_tensor *a = oj_zeros(e, 1, shape, OJ_F32), *b = oj_zeros(e, 1, shape, OJ_F32);
    int64_t both = oj_engine_memory_allocated(e);
    assert_true(both >= 2 * (4 << 20));
    assert_int_equal(oj_engine_max_memory_allocated(e), both);
    oj_release(a);
    int64_t one = oj_engine_memory_allocated(e);
    assert_true(one < both && one >= (4 << 20));
    assert_true(oj_engine_pooled_bytes(e) > 0); /* a's block waits in the pool */
    assert_true(oj_budget_current(oj_engine_budget(e)) >= both); /* and stays on the budget */
    assert_int_equal(oj_engine_max_memory_allocated(e), both);
    oj_tensor *c = oj_zeros(e, 1, shape, OJ_F32); /* reuses the pooled block */
    assert_int_equal(oj_engine_memory_allocated(e), both);
    oj_release(b);
    oj_release(c);
    assert_int_equal(oj_engine_memory_allocated(e), 0);
    assert_int_equal(oj_engine_max_memory_allocated(e), both);
    oj_engine_free(e);
}

/* A file holding `text` at root/rel (directories made). */
static void put(const char *root, const char *rel, const char *text) {
    char p[1024], cmd[1200];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", p);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The host memory limit: physical memory capped by the cgroup v2
 * memory.max of the process's cgroup or an ancestor, and by cgroup v1's
 * memory.limit_in_bytes ("max" and v1's 2^63 mean none); the default root
 * budget leaves a margin of it. */
static void test_host_memory_limit(void **state) {
    (void)state;
    char dir[] = "/tmp/ojas-cgroup-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char proc[1100];
    snprintf(proc, sizeof proc, "%s/proc-cgroup", dir);
    const int64_t phys = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
    const int64_t gib = INT64_C(1) << 30;
    /* no cgroup files: physical memory */
    put(dir, "proc-cgroup", "0::/a/b\n");
    assert_int_equal(oj__host_memory_bytes(dir, proc), phys);
    /* v2: own cgroup "max", the parent 1 GiB */
    put(dir, "a/b/memory.max", "max\n");
    put(dir, "a/memory.max", "1073741824\n");
    assert_int_equal(oj__host_memory_bytes(dir, proc), gib < phys ? gib : phys);
    /* v2: a tighter own limit wins */
    put(dir, "a/b/memory.max", "268435456\n");
    assert_int_equal(oj__host_memory_bytes(dir, proc), INT64_C(256) << 20);
    /* v1: the memory controller's line, 2^63 (none) at the root */
    put(dir, "proc-cgroup", "4:cpu,memory:/x\n1:name=systemd:/\n");
    put(dir, "memory/memory.limit_in_bytes", "9223372036854771712\n");
    assert_int_equal(oj__host_memory_bytes(dir, proc), phys);
    put(dir, "memory/x/memory.limit_in_bytes", "536870912\n");
    assert_int_equal(oj__host_memory_bytes(dir, proc), INT64_C(512) << 20);
    /* margin: 10%, at least 64 MiB, at most 2 GiB, at most half */
    assert_int_equal(oj__budget_with_margin(10 * gib), 9 * gib);
    assert_int_equal(oj__budget_with_margin(100 * gib), 98 * gib);
    assert_int_equal(oj__budget_with_margin(INT64_C(100) << 20), INT64_C(50) << 20);
    assert_int_equal(oj__budget_with_margin(INT64_C(512) << 20), INT64_C(448) << 20);
    assert_int_equal(oj__budget_with_margin(0), OJ_UNLIMITED);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    /* an engine: 0 asks for the machine's (finite) limit, OJ_UNLIMITED for none */
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    int64_t host = oj__host_memory_bytes("/sys/fs/cgroup", "/proc/self/cgroup");
    assert_int_equal(oj_budget_limit(oj_engine_budget(eng)), oj__budget_with_margin(host));
    assert_true(oj_budget_limit(oj_engine_budget(eng)) < phys);
    oj_engine_free(eng);
    oj_engine_config c = oj_engine_config_default();
    c.budget_bytes = OJ_UNLIMITED;
    assert_int_equal(oj_engine_create(&c, &eng, NULL), OJ_OK);
    assert_int_equal(oj_budget_limit(oj_engine_budget(eng)), OJ_UNLIMITED);
    oj_engine_free(eng);
}

/* ---- the fused ops (rms_norm_rotary, attention, linear_cross_entropy,
 * swiglu_linear, add + norm to bf16) under every byte budget up to the one
 * they fit in: only OJ_ERR_CAPACITY, nothing leaked */

static const double EPS = 1e-6, THETA = 10000.0;

/* ---------------------------------------------------------------- out of memory */

/* Runs case k's forward and backward on the leaves in[]; false when a step
 * failed (the error left recorded). */
typedef bool (*oom_case)(oj_engine *eng, oj_tensor **in, int k);

static bool oom_nr(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    oj_tensor *y = oj_rms_norm_rotary(nt_heads(in[0], 2, 8), k ? in[1] : NULL, EPS, 3, THETA);
    return y && oj_backward(oj_sum_all(oj_mul(y, y)), false) == OJ_OK;
}

static bool oom_attn(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    const int ord[3] = {0, 1, 2};
    oj_tensor *h[3] = {NULL, NULL, NULL};
    oj_tensor *p[3] = {NULL, NULL, NULL};
    if (oj_split(in[0], 8, 2, 3, p) != 3)
        return false;
    (void)ord;
    int64_t s4[4] = {2, 5, 2, 4};
    for (int j = 0; j < 3; j++) {
        oj_tensor *r = oj_reshape(p[j], 4, s4);
        h[j] = r ? oj_transpose(r, 1, 2) : NULL;
        if (h[j] == NULL)
            return false;
    }
    oj_tensor *y = oj_scaled_dot_product_attention(h[0], h[1], h[2], NULL, k == 0, NAN);
    return y && oj_backward(oj_sum_all(oj_mul(y, y)), false) == OJ_OK;
}

static bool oom_lce(oj_engine *eng, oj_tensor **in, int k) {
    int64_t tg[10] = {1, 2, -100, 0, 6, 3, 3, 1, 0, 2}, ts[1] = {10};
    oj_tensor *t = oj_from_host(eng, 1, ts, OJ_I64, tg, sizeof tg);
    if (t == NULL)
        return false;
    oj_tensor *x = k ? oj_cast(in[0], OJ_BF16) : in[0], *w = k ? oj_cast(in[1], OJ_BF16) : in[1];
    oj_tensor *l = x && w ? oj_linear_cross_entropy(x, w, t, -100, 0.1, OJ_REDUCTION_MEAN) : NULL;
    return l && oj_backward(l, false) == OJ_OK;
}

static bool oom_swiglu(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    oj_tensor *g = oj_narrow(in[0], 1, 0, 8), *u = oj_narrow(in[0], 1, 8, 8);
    oj_tensor *y = g && u ? oj_swiglu_linear(g, u, in[1], k ? in[2] : NULL) : NULL;
    return y && oj_backward(oj_sum_all(oj_mul(y, y)), false) == OJ_OK;
}

static bool oom_addnorm(oj_engine *eng, oj_tensor **in, int k) {
    (void)eng;
    oj_tensor *r = oj_cast(in[1], OJ_BF16), *sum = NULL;
    oj_tensor *y = r ? (k ? oj__add_rms_norm_to(in[0], r, in[2], 1e-5, &sum, OJ_BF16)
                          : oj__add_layer_norm_to(in[0], r, in[2], NULL, 1e-5, &sum, OJ_BF16))
                     : NULL;
    if (y == NULL)
        return false;
    oj_tensor *l = oj_add(oj_cast(oj_sum_all(y), OJ_F32), oj_sum_all(oj_mul(sum, sum)));
    return l && oj_backward(l, false) == OJ_OK;
}

/* Every byte budget from 0 up to the one the case fits in: a failure is
 * OJ_ERR_CAPACITY, and nothing leaks (tensors, budget bytes). */
static void oom_sweep(const char *what, oom_case fn, int k, int nin, const int64_t shapes[][3],
                      const int *ranks) {
    oj_engine *eng = nt_engine();
    oj_tensor *in[3];
    for (int i = 0; i < nin; i++)
        in[i] = oj_set_requires_grad(nt_rand(eng, ranks[i], shapes[i], OJ_F32, -1, 1), true);
    int64_t live = oj_engine_live_tensors(eng);
    bool done = false;
    int fails = 0;
    for (int64_t lim = 0; !done && lim < (1 << 22); lim += lim < 16384 ? 16 : lim / 16) {
        oj_budget *b = oj_budget_create(oj_engine_budget(eng), "sweep", lim);
        assert_non_null(b);
        oj_engine_use_budget(eng, b);
        oj_scope_begin(eng);
        done = fn(eng, in, k);
        if (!done) {
            fails++;
            if (oj_last_status(eng) != OJ_ERR_CAPACITY)
                fail_msg("%s (%d) at %lld bytes: %s: %s", what, k, (long long)lim,
                         oj_status_name(oj_last_status(eng)), oj_last_error(eng));
            oj_clear_error(eng);
        }
        oj_scope_end(eng);
        for (int i = 0; i < nin; i++)
            oj_zero_grad(in[i]);
        oj_engine_use_budget(eng, NULL);
        if (oj_budget_current(b) != 0)
            fail_msg("%s (%d) at %lld bytes: %lld bytes left charged", what, k, (long long)lim,
                     (long long)oj_budget_current(b));
        assert_int_equal(oj_budget_free(b), OJ_OK);
        if (oj_engine_live_tensors(eng) != live)
            fail_msg("%s (%d) at %lld bytes: %lld tensors leaked", what, k, (long long)lim,
                     (long long)(oj_engine_live_tensors(eng) - live));
    }
    if (!done)
        fail_msg("%s (%d): never fit", what, k);
    if (getenv("OJAS_TEST_VERBOSE"))
        printf("%s (%d): %d failing budgets\n", what, k, fails);
    for (int i = 0; i < nin; i++)
        oj_release(in[i]);
    nt_engine_done(eng);
}

/* The process memory ceiling: set only while no engine is open and within
 * host memory; two CPU engines together are held to it (each alone fits),
 * the refusal naming it; released bytes come back; 0 removes it. */
static void test_memory_ceiling(void **state) {
    (void)state;
    oj_error e = {0};
    const int64_t mib = INT64_C(1) << 20;
    assert_int_equal(oj_engines_open(), 0);
    int64_t host = oj_host_memory_bytes();
    assert_true(host > 0);
    assert_int_equal(oj_set_memory_ceiling(host + 1, &e), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "above"));
    e = (oj_error){0};
    assert_int_equal(oj_set_memory_ceiling(-1, &e), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(oj_memory_ceiling(), 0);

    assert_int_equal(oj_set_memory_ceiling(64 * mib, NULL), OJ_OK);
    assert_int_equal(oj_memory_ceiling(), 64 * mib);
    oj_engine *a = NULL, *b = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.budget_bytes = 48 * mib;
    assert_int_equal(oj_engine_create(&cfg, &a, NULL), OJ_OK);
    cfg.budget_bytes = 0; /* the machine's default, lowered to the ceiling */
    assert_int_equal(oj_engine_create(&cfg, &b, NULL), OJ_OK);
    assert_int_equal(oj_budget_limit(oj_engine_budget(b)), 64 * mib);
    assert_int_equal(oj_engines_open(), 2);
    e = (oj_error){0};
    assert_int_equal(oj_set_memory_ceiling(128 * mib, &e), OJ_ERR_STATE);
    assert_non_null(strstr(e.message, "2 engine(s) are open"));
    assert_int_equal(oj_memory_ceiling(), 64 * mib);

    int64_t shape[1] = {40 * mib / 4};
    oj_tensor *ta = oj_zeros(a, 1, shape, OJ_F32);
    assert_non_null(ta);
    assert_true(oj_memory_ceiling_current() >= 40 * mib);
    oj_tensor *tb = oj_zeros(b, 1, shape, OJ_F32); /* fits b's budget, not the ceiling */
    assert_null(tb);
    assert_int_equal(oj_last_status(b), OJ_ERR_CAPACITY);
    assert_non_null(strstr(oj_last_error(b), "process memory ceiling"));
    oj_clear_error(b);
    oj_release(ta);
    oj_engine_trim_pool(a);
    tb = oj_zeros(b, 1, shape, OJ_F32); /* a's bytes came back */
    assert_non_null(tb);
    oj_release(tb);
    oj_engine_free(a);
    oj_engine_free(b);
    assert_int_equal(oj_engines_open(), 0);
    assert_int_equal(oj_memory_ceiling_current(), 0);

    /* a CUDA engine that cannot open is not counted as open */
    cfg.device.type = OJ_DEVICE_CUDA;
    if (oj_engine_create(&cfg, &a, NULL) != OJ_OK) assert_int_equal(oj_engines_open(), 0);
    else oj_engine_free(a);
    assert_int_equal(oj_set_memory_ceiling(0, NULL), OJ_OK);
    assert_int_equal(oj_memory_ceiling(), 0);
}

static void test_fused_ops_out_of_memory(void **state) {
    (void)state;
    const int64_t nr[2][3] = {{2, 5, 16}, {8}}, at[1][3] = {{2, 5, 24}};
    const int64_t lce[2][3] = {{10, 6}, {7, 6}}, sw[3][3] = {{4, 16}, {3, 8}, {3}};
    const int64_t an[3][3] = {{4, 12}, {4, 12}, {12}};
    const int r31[2] = {3, 1}, r3[1] = {3}, r22[2] = {2, 2}, r221[3] = {2, 2, 1};
    for (int k = 0; k < 2; k++) {
        oom_sweep("rms_norm_rotary", oom_nr, k, 2, nr, r31);
        oom_sweep("attention", oom_attn, k, 1, at, r3);
        oom_sweep("linear_cross_entropy", oom_lce, k, 2, lce, r22);
        oom_sweep("swiglu_linear", oom_swiglu, k, 3, sw, r221);
        oom_sweep("add norm to bf16", oom_addnorm, k, 3, an, r221);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_release_peak),
        cmocka_unit_test(test_hierarchy),
        cmocka_unit_test(test_huge_values_do_not_overflow),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_contended_limit),
        cmocka_unit_test(test_engine_budget_capacity),
        cmocka_unit_test(test_pool_trimmed_when_full),
        cmocka_unit_test(test_memory_allocated_excludes_pool),
        cmocka_unit_test(test_host_memory_limit),
        cmocka_unit_test(test_memory_ceiling),
        cmocka_unit_test(test_fused_ops_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
