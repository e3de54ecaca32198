// test: batch loader windows, resume equivalence, rank partition, prefetch, errors
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "data_testutil.h"

/* Shards whose token at global position g is g % 50000, so a window tells
 * where it came from. Sizes chosen so windows do not divide evenly. */
typedef struct fixture {
    char *dir;
    char *paths[3];
    int64_t len[3];
} fixture;

static const int64_t k_T = 16;

static void make_fixture(fixture *f) {
    f->dir = tu_tmpdir();
    assert_non_null(f->dir);
    const int64_t lens[3] = {1000, 517, 2049};
    int64_t g = 0;
    for (int s = 0; s < 3; s++) {
        char name[32];
        snprintf(name, sizeof name, "train_%06d.bin", s);
        f->paths[s] = tu_path(f->dir, name);
        f->len[s] = lens[s];
        int32_t *t = malloc((size_t)lens[s] * sizeof *t);
        for (int64_t i = 0; i < lens[s]; i++)
            t[i] = (int32_t)((g++ * 7) % 50000);
        assert_int_equal(oj_shard_write(f->paths[s], t, lens[s], s == 1 ? 2 : 1, NULL), OJ_OK);
        free(t);
    }
}

static void free_fixture(fixture *f) {
    for (int s = 0; s < 3; s++)
        free(f->paths[s]);
    tu_rmdir(f->dir);
    free(f->dir);
}

static oj_loader *open_loader(fixture *f, int64_t B, int rank, int world, bool shuffle,
                              bool prefetch, oj_dtype dt) {
    oj_loader_config c = oj_loader_config_default();
    c.paths = (const char *const *)f->paths;
    c.n_paths = 3;
    c.B = B;
    c.T = k_T;
    c.rank = rank;
    c.world_size = world;
    c.shuffle = shuffle;
    c.seed = 1234;
    c.prefetch = prefetch;
    c.dtype = dt;
    oj_loader *L = NULL;
    oj_error err = {0};
    assert_int_equal(oj_loader_open(&c, &L, &err), OJ_OK);
    return L;
}

static int64_t windows(const fixture *f) {
    int64_t w = 0;
    for (int s = 0; s < 3; s++)
        w += (f->len[s] - 1) / k_T;
    return w;
}

static void test_window_count_and_shift(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    oj_loader *L = open_loader(&f, 4, 0, 1, false, false, OJ_I64);
    assert_int_equal(oj_loader_num_windows(L), windows(&f));
    assert_int_equal(oj_loader_steps_per_epoch(L), windows(&f) / 4);
    int64_t in[4 * 16], tg[4 * 16];
    assert_int_equal(oj_loader_next_host(L, in, tg, NULL), OJ_OK);
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < k_T; t++) {
            int64_t g = b * k_T + t; /* sequential: window b of shard 0 */
            assert_int_equal(in[b * k_T + t], (g * 7) % 50000);
            assert_int_equal(tg[b * k_T + t], ((g + 1) * 7) % 50000);
        }
    oj_loader_free(L);
    free_fixture(&f);
}

/* Record `steps` batches (host, i32) from L. */
static int32_t *run(oj_loader *L, int64_t B, int steps) {
    size_t per = (size_t)(B * k_T);
    int32_t *out = malloc((size_t)steps * per * 2 * sizeof *out);
    for (int s = 0; s < steps; s++)
        assert_int_equal(oj_loader_next_host(L, out + (size_t)s * per * 2,
                                             out + (size_t)s * per * 2 + per, NULL),
                         OJ_OK);
    return out;
}

static void resume_case(bool shuffle, bool prefetch) {
    fixture f;
    make_fixture(&f);
    const int64_t B = 5;
    const int total = 70; /* > two epochs of 44 steps: crosses epoch ends */
    oj_loader *L = open_loader(&f, B, 0, 1, shuffle, prefetch, OJ_I32);
    int32_t *ref = run(L, B, total);
    oj_loader_free(L);
    size_t per = (size_t)(B * k_T) * 2;
    const int ks[] = {0, 1, 17, 43, 44, 45, 69};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        int k = ks[i];
        oj_loader *a = open_loader(&f, B, 0, 1, shuffle, prefetch, OJ_I32);
        int32_t *head = run(a, B, k);
        oj_loader_state st;
        oj_loader_get_state(a, &st);
        /* the interrupted loader keeps going as well */
        int32_t *cont = run(a, B, total - k);
        oj_loader_free(a);
        /* a fresh loader restored from the state */
        oj_loader *b = open_loader(&f, B, 0, 1, shuffle, !prefetch, OJ_I32);
        assert_int_equal(oj_loader_set_state(b, &st, NULL), OJ_OK);
        int32_t *tail = run(b, B, total - k);
        oj_loader_free(b);
        assert_memory_equal(head, ref, (size_t)k * per * sizeof *ref);
        assert_memory_equal(cont, ref + (size_t)k * per, (size_t)(total - k) * per * sizeof *ref);
        assert_memory_equal(tail, ref + (size_t)k * per, (size_t)(total - k) * per * sizeof *ref);
        free(head);
        free(cont);
        free(tail);
    }
    free(ref);
    free_fixture(&f);
}

static void test_resume_sequential(void **state) {
    (void)state;
    resume_case(false, false);
    resume_case(false, true);
}

static void test_resume_shuffled(void **state) {
    (void)state;
    resume_case(true, true);
    resume_case(true, false);
}

static void test_restore_mid_prefetch(void **state) {
    (void)state;
    /* Rewinding a running prefetching loader gives the same batches again. */
    fixture f;
    make_fixture(&f);
    oj_loader *L = open_loader(&f, 3, 0, 1, true, true, OJ_I32);
    oj_loader_state st;
    free(run(L, 3, 0));
    free(run(L, 3, 5));
    oj_loader_get_state(L, &st);
    int32_t *a = run(L, 3, 10);
    assert_int_equal(oj_loader_set_state(L, &st, NULL), OJ_OK);
    int32_t *b = run(L, 3, 10);
    assert_memory_equal(a, b, 10 * 3 * 16 * 2 * sizeof *a);
    free(a);
    free(b);
    oj_loader_free(L);
    free_fixture(&f);
}

/* Window index of a batch row: token = (g * 7) % 50000 with g < 50000 here,
 * so invert g = token * 7^-1 mod 50000 (7 * 7143 = 50001). */
static int64_t row_start(const int32_t *row) { return ((int64_t)row[0] * 7143) % 50000; }

static void test_rank_partition(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    const int64_t B = 3;
    for (int shuffle = 0; shuffle < 2; shuffle++)
        for (int world = 1; world <= 4; world++) {
            int64_t W = windows(&f), steps = W / (B * world);
            uint8_t *seen = calloc(50000, 1);
            int64_t count = 0;
            for (int r = 0; r < world; r++) {
                oj_loader *L = open_loader(&f, B, r, world, shuffle, r & 1, OJ_I32);
                assert_int_equal(oj_loader_steps_per_epoch(L), steps);
                int32_t *all = run(L, B, (int)steps);
                for (int64_t s = 0; s < steps; s++)
                    for (int64_t b = 0; b < B; b++) {
                        int64_t g = row_start(all + (size_t)s * B * k_T * 2 + (size_t)b * k_T);
                        assert_true(g < 50000);
                        assert_int_equal(seen[g], 0); /* disjoint across ranks and steps */
                        seen[g] = 1;
                        count++;
                    }
                free(all);
                oj_loader_free(L);
            }
            /* complete: every rank-step slot of the epoch holds a distinct window */
            assert_int_equal(count, steps * B * world);
            if (!shuffle) /* sequential: exactly the first steps*B*world windows */
                for (int64_t p = 0; p < steps * B * world; p++) {
                    int64_t s = 0, k = p, base = 0;
                    while (k >= (f.len[s] - 1) / k_T) {
                        k -= (f.len[s] - 1) / k_T;
                        base += f.len[s];
                        s++;
                    }
                    assert_int_equal(seen[base + k * k_T], 1);
                }
            free(seen);
        }
    free_fixture(&f);
}

static void test_permutation_bijective(void **state) {
    (void)state;
    const int64_t ns[] = {1, 2, 3, 5, 16, 17, 1000, 4097};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        int64_t n = ns[i];
        uint8_t *hit = calloc((size_t)n, 1);
        int64_t fixed = 0;
        for (int64_t p = 0; p < n; p++) {
            int64_t q = oj_loader_permute(99, 3, n, p);
            assert_true(q >= 0 && q < n);
            assert_int_equal(hit[q], 0);
            hit[q] = 1;
            fixed += q == p;
        }
        if (n >= 1000)
            assert_true(fixed < n / 50); /* it does shuffle */
        free(hit);
    }
    /* epochs and seeds give different orders */
    int diff_e = 0, diff_s = 0;
    for (int64_t p = 0; p < 100; p++) {
        diff_e += oj_loader_permute(1, 0, 1000, p) != oj_loader_permute(1, 1, 1000, p);
        diff_s += oj_loader_permute(1, 0, 1000, p) != oj_loader_permute(2, 0, 1000, p);
    }
    assert_true(diff_e > 90 && diff_s > 90);
}

static void test_tensors(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    for (int k = 0; k < 2; k++) {
        oj_dtype dt = k ? OJ_I32 : OJ_I64;
        oj_loader *L = open_loader(&f, 2, 0, 1, true, k == 0, dt);
        oj_loader *H = open_loader(&f, 2, 0, 1, true, false, dt);
        assert_int_equal(oj_scope_begin(eng), OJ_OK);
        for (int s = 0; s < 3; s++) {
            oj_tensor *x, *y;
            assert_int_equal(oj_loader_next(L, eng, &x, &y), OJ_OK);
            assert_int_equal(oj_tensor_dtype(x), dt);
            assert_int_equal(oj_rank(x), 2);
            assert_int_equal(oj_size(x, 0), 2);
            assert_int_equal(oj_size(y, 1), k_T);
            int64_t hin[2 * 16], htg[2 * 16];
            assert_int_equal(oj_loader_next_host(H, hin, htg, NULL), OJ_OK);
            size_t nb = 2 * 16 * oj_dtype_size(dt);
            assert_memory_equal(oj_data_ptr(x), hin, nb);
            assert_memory_equal(oj_data_ptr(y), htg, nb);
        }
        assert_int_equal(oj_scope_end(eng), OJ_OK);
        oj_loader_free(L);
        oj_loader_free(H);
    }
    oj_engine_free(eng);
    free_fixture(&f);
}

static void test_errors(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    oj_loader_config c = oj_loader_config_default();
    c.paths = (const char *const *)f.paths;
    c.n_paths = 3;
    c.T = k_T;
    c.B = 1000; /* more than the 222 windows */
    oj_loader *L = NULL;
    oj_error e1 = {0};
    assert_int_equal(oj_loader_open(&c, &L, &e1), OJ_ERR_SHAPE);
    assert_null(L);
    c.B = 2;
    c.rank = 2;
    c.world_size = 2;
    oj_error e2 = {0};
    assert_int_equal(oj_loader_open(&c, &L, &e2), OJ_ERR_INVALID_ARGUMENT);
    c.rank = 0;
    c.world_size = 1;
    c.dtype = OJ_F32;
    assert_int_equal(oj_loader_open(&c, &L, NULL), OJ_ERR_INVALID_ARGUMENT);
    c.dtype = OJ_I64;
    /* a token out of the vocabulary is refused when the shards are opened,
     * not when its batch comes: token 8 of shard 0 is 56 */
    c.vocab_size = 50;
    for (int pf = 0; pf < 2; pf++) {
        c.prefetch = pf;
        oj_error e3 = {0};
        assert_int_equal(oj_loader_open(&c, &L, &e3), OJ_ERR_CORRUPT);
        assert_null(L);
        assert_non_null(strstr(e3.message, f.paths[0]));
        assert_non_null(strstr(e3.message, "token 8 (byte offset 1040) is id 56"));
        assert_non_null(strstr(e3.message, "vocabulary of 50"));
    }
    /* one bad token deep in the last shard (uint32 ids > INT32_MAX too) */
    c.vocab_size = 50000;
    {
        FILE *fp = fopen(f.paths[1], "r+b");
        uint32_t bad = 0x80000000u;
        fseek(fp, 1024 + 4 * 500, SEEK_SET);
        fwrite(&bad, 4, 1, fp);
        fclose(fp);
        oj_error e6 = {0};
        assert_int_equal(oj_loader_open(&c, &L, &e6), OJ_ERR_CORRUPT);
        assert_non_null(strstr(e6.message, "token 500 (byte offset 3024) is id 2147483648"));
        c.vocab_size = 0; /* no vocabulary: still not an int32 id */
        oj_error e7 = {0};
        assert_int_equal(oj_loader_open(&c, &L, &e7), OJ_ERR_CORRUPT);
        assert_non_null(strstr(e7.message, f.paths[1]));
        bad = 10500; /* what it was: (1500 * 7) % 50000 */
        fp = fopen(f.paths[1], "r+b");
        fseek(fp, 1024 + 4 * 500, SEEK_SET);
        fwrite(&bad, 4, 1, fp);
        fclose(fp);
    }
    c.vocab_size = 0;
    /* state for another configuration is refused */
    assert_int_equal(oj_loader_open(&c, &L, NULL), OJ_OK);
    oj_loader_state st;
    oj_loader_get_state(L, &st);
    st.B = 3;
    oj_error e4 = {0};
    assert_int_equal(oj_loader_set_state(L, &st, &e4), OJ_ERR_STATE);
    oj_loader_get_state(L, &st);
    st.step = (uint64_t)oj_loader_steps_per_epoch(L);
    assert_int_equal(oj_loader_set_state(L, &st, NULL), OJ_ERR_STATE);
    oj_loader_free(L);
    /* a corrupt shard is refused at open */
    FILE *fp = fopen(f.paths[1], "r+b");
    fseek(fp, 0, SEEK_SET);
    fputc(0, fp);
    fclose(fp);
    oj_error e5 = {0};
    assert_int_equal(oj_loader_open(&c, &L, &e5), OJ_ERR_CORRUPT);
    assert_non_null(strstr(e5.message, "magic"));
    free_fixture(&f);
}

static void test_engine_error_recorded(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    oj_loader_config c = oj_loader_config_default();
    c.paths = (const char *const *)f.paths;
    c.n_paths = 3;
    c.T = k_T;
    c.B = 2;
    c.vocab_size = 50000;
    c.prefetch = false;
    oj_loader *L;
    assert_int_equal(oj_loader_open(&c, &L, NULL), OJ_OK);
    /* the shards are checked at open; a token changed in the file after
     * that (the private mapping still shows the file's pages) is caught
     * when its batch is built */
    FILE *fp = fopen(f.paths[0], "r+b");
    uint16_t bad = 60000;
    fseek(fp, 1024 + 2 * 3, SEEK_SET);
    fwrite(&bad, 2, 1, fp);
    fclose(fp);
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    oj_tensor *x = (oj_tensor *)1, *y = (oj_tensor *)1;
    assert_int_equal(oj_loader_next(L, eng, &x, &y), OJ_ERR_CORRUPT);
    oj_loader_state ls;
    oj_loader_get_state(L, &ls);
    assert_int_equal(ls.step, 0); /* no advance on error */
    assert_null(x);
    assert_null(y);
    assert_int_equal(oj_last_status(eng), OJ_ERR_CORRUPT);
    oj_loader_free(L);
    oj_engine_free(eng);
    free_fixture(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_count_and_shift),
        cmocka_unit_test(test_resume_sequential),
        cmocka_unit_test(test_resume_shuffled),
        cmocka_unit_test(test_restore_mid_prefetch),
        cmocka_unit_test(test_rank_partition),
        cmocka_unit_test(test_permutation_bijective),
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_engine_error_recorded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
