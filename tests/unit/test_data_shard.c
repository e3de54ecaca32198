// test: token shards round-trip (v1, v2) and every malformed file is OJ_ERR_CORRUPT
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "data_testutil.h"

static void roundtrip(int version, int64_t n) {
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *path = tu_path(dir, "train_000000.bin");
    int32_t *tok = malloc((size_t)(n ? n : 1) * sizeof *tok);
    uint64_t s = 7;
    int32_t limit = version == 1 ? 65536 : 1 << 30;
    for (int64_t i = 0; i < n; i++)
        tok[i] = (int32_t)(tu_rand(&s) % (uint64_t)limit);
    if (n > 1) {
        tok[0] = 0;
        tok[1] = limit - 1;
    }
    oj_error err = {0};
    assert_int_equal(oj_shard_write(path, tok, n, version, &err), OJ_OK);
    size_t len;
    char *raw = tu_read(path, &len);
    assert_int_equal(len, 1024 + (size_t)n * (version == 1 ? 2 : 4));
    int32_t h[3];
    memcpy(h, raw, sizeof h);
    assert_int_equal(h[0], 20240520);
    assert_int_equal(h[1], version);
    assert_int_equal(h[2], n);
    free(raw);
    oj_shard *sh;
    assert_int_equal(oj_shard_open(path, &sh, &err), OJ_OK);
    assert_int_equal(oj_shard_len(sh), n);
    assert_int_equal(oj_shard_version(sh), version);
    int32_t *back = malloc((size_t)(n ? n : 1) * sizeof *back);
    assert_int_equal(oj_shard_read(sh, 0, n, back, &err), OJ_OK);
    assert_memory_equal(back, tok, (size_t)n * sizeof *tok);
    if (n > 3) {
        assert_int_equal(oj_shard_read(sh, 2, 1, back, &err), OJ_OK);
        assert_int_equal(back[0], tok[2]);
    }
    oj_error e2 = {0};
    assert_int_equal(oj_shard_read(sh, n, 1, back, &e2), OJ_ERR_OUT_OF_RANGE);
    oj_shard_close(sh);
    free(back);
    free(tok);
    free(path);
    tu_rmdir(dir);
    free(dir);
}

static void test_roundtrip_v1(void **state) {
    (void)state;
    roundtrip(1, 100000);
    roundtrip(1, 0);
}

static void test_roundtrip_v2(void **state) {
    (void)state;
    roundtrip(2, 70001);
    roundtrip(2, 1);
}

static void test_write_refuses(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "x.bin");
    int32_t big[2] = {1, 65536}, neg[1] = {-1};
    oj_error e1 = {0}, e2 = {0}, e3 = {0};
    assert_int_equal(oj_shard_write(path, big, 2, 1, &e1), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(e1.message, "65536"));
    assert_int_equal(oj_shard_write(path, neg, 1, 2, &e2), OJ_ERR_OUT_OF_RANGE);
    assert_int_equal(oj_shard_write(path, big, 2, 3, &e3), OJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(access(path, F_OK), -1); /* nothing left behind */
    assert_int_equal(oj_shard_write(path, big, 2, 2, NULL), OJ_OK);
    free(path);
    tu_rmdir(dir);
    free(dir);
}

/* Write a good v1 shard of 10 tokens, apply `edit`, expect CORRUPT. */
static void expect_corrupt(void (*edit)(uint8_t *buf, size_t *len), const char *needle) {
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "s.bin");
    int32_t t[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_int_equal(oj_shard_write(path, t, 10, 1, NULL), OJ_OK);
    size_t len;
    uint8_t *buf = (uint8_t *)tu_read(path, &len);
    buf = realloc(buf, len + 64);
    edit(buf, &len);
    assert_int_equal(tu_write(path, buf, len), 0);
    oj_shard *sh = (oj_shard *)1;
    oj_error err = {0};
    assert_int_equal(oj_shard_open(path, &sh, &err), OJ_ERR_CORRUPT);
    assert_null(sh);
    assert_non_null(strstr(err.message, needle));
    free(buf);
    free(path);
    tu_rmdir(dir);
    free(dir);
}

static void set_i32(uint8_t *b, int k, int32_t v) { memcpy(b + 4 * k, &v, 4); }
static void ed_magic(uint8_t *b, size_t *n) { (void)n; set_i32(b, 0, 20240521); }
static void ed_version0(uint8_t *b, size_t *n) { (void)n; set_i32(b, 1, 0); }
static void ed_version3(uint8_t *b, size_t *n) { (void)n; set_i32(b, 1, 3); }
static void ed_version2(uint8_t *b, size_t *n) { (void)n; set_i32(b, 1, 2); } /* size now wrong */
static void ed_negcount(uint8_t *b, size_t *n) { (void)n; set_i32(b, 2, -5); }
static void ed_count_big(uint8_t *b, size_t *n) { (void)n; set_i32(b, 2, 11); }
static void ed_count_small(uint8_t *b, size_t *n) { (void)n; set_i32(b, 2, 9); }
static void ed_trunc_data(uint8_t *b, size_t *n) { (void)b; *n -= 1; }
static void ed_trunc_header(uint8_t *b, size_t *n) { (void)b; *n = 1000; }
static void ed_empty(uint8_t *b, size_t *n) { (void)b; *n = 0; }
static void ed_trailing(uint8_t *b, size_t *n) { b[*n] = 0; b[*n + 1] = 0; *n += 2; }
static void ed_reserved(uint8_t *b, size_t *n) { (void)n; set_i32(b, 200, 7); }

static void test_corrupt_refused(void **state) {
    (void)state;
    expect_corrupt(ed_magic, "magic");
    expect_corrupt(ed_version0, "version");
    expect_corrupt(ed_version3, "version");
    expect_corrupt(ed_version2, "truncated");
    expect_corrupt(ed_negcount, "negative");
    expect_corrupt(ed_count_big, "truncated");
    expect_corrupt(ed_count_small, "trailing");
    expect_corrupt(ed_trunc_data, "truncated");
    expect_corrupt(ed_trunc_header, "header");
    expect_corrupt(ed_empty, "header");
    expect_corrupt(ed_trailing, "trailing");
    expect_corrupt(ed_reserved, "header int 200 (byte offset 800) is 7");
}

/* oj_shard_check_vocab finds the first id >= V anywhere in a shard (past
 * the first scan block too), naming the shard, the token, its byte offset
 * and the id; versions that cannot hold such an id pass unread. */
static void test_check_vocab(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "s.bin");
    const int64_t n = 200000;
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++)
        t[i] = (int32_t)(i % 1000);
    t[150001] = 5000;
    t[180000] = 7000;
    for (int version = 1; version <= 2; version++) {
        assert_int_equal(oj_shard_write(path, t, n, version, NULL), OJ_OK);
        oj_shard *sh;
        assert_int_equal(oj_shard_open(path, &sh, NULL), OJ_OK);
        assert_int_equal(oj_shard_check_vocab(sh, 7001, NULL), OJ_OK);
        oj_error e = {0};
        assert_int_equal(oj_shard_check_vocab(sh, 1000, &e), OJ_ERR_CORRUPT);
        char want[128];
        snprintf(want, sizeof want, "token 150001 (byte offset %lld) is id 5000",
                 (long long)(1024 + 150001 * (version == 1 ? 2 : 4)));
        assert_non_null(strstr(e.message, want));
        assert_non_null(strstr(e.message, path));
        assert_int_equal(oj_shard_check_vocab(sh, 0, NULL), OJ_ERR_INVALID_ARGUMENT);
        if (version == 1)
            assert_int_equal(oj_shard_check_vocab(sh, 65536, NULL), OJ_OK);
        oj_shard_close(sh);
    }
    free(t);
    free(path);
    tu_rmdir(dir);
    free(dir);
}

static void test_open_missing_is_io(void **state) {
    (void)state;
    oj_shard *sh;
    oj_error err = {0};
    assert_int_equal(oj_shard_open("/nonexistent/ojas.bin", &sh, &err), OJ_ERR_IO);
    assert_non_null(strstr(err.message, "/nonexistent/ojas.bin"));
}

static void test_list(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    const char *names[] = {"train_000002.bin", "train_000000.bin", "val_000000.bin",
                           "train_000001.bin", "trainx_000000.bin", "train_000003.txt"};
    int32_t t[2] = {1, 2};
    for (int i = 0; i < 6; i++) {
        char *p = tu_path(dir, names[i]);
        assert_int_equal(oj_shard_write(p, t, 2, 1, NULL), OJ_OK);
        free(p);
    }
    char **paths;
    int n;
    assert_int_equal(oj_shard_list(dir, "train", &paths, &n, NULL), OJ_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        char want[32];
        snprintf(want, sizeof want, "/train_%06d.bin", i);
        assert_non_null(strstr(paths[i], want));
    }
    oj_paths_free(paths, n);
    oj_error err = {0};
    assert_int_equal(oj_shard_list(dir, "test", &paths, &n, &err), OJ_ERR_IO);
    tu_rmdir(dir);
    free(dir);
}

/* ---- reads whose range overflows int64 */

/* oj_shard_read with a start or count near INT64_MAX: OJ_ERR_OUT_OF_RANGE
 * with the start in the message (no signed overflow building it); an
 * in-range read still works. */
static void test_shard_read_huge_range(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *p = tu_path(dir, "s.bin");
    int32_t toks[4] = {1, 2, 3, 4};
    assert_int_equal(oj_shard_write(p, toks, 4, 1, NULL), OJ_OK);
    oj_shard *s = NULL;
    assert_int_equal(oj_shard_open(p, &s, NULL), OJ_OK);
    int32_t buf[4];
    oj_error e = {0};
    assert_int_equal(oj_shard_read(s, INT64_MAX, 2, buf, &e), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(e.message, "9223372036854775807"));
    oj_error e2 = {0};
    assert_int_equal(oj_shard_read(s, 1, INT64_MAX, buf, &e2), OJ_ERR_OUT_OF_RANGE);
    assert_int_equal(oj_shard_read(s, 1, 3, buf, NULL), OJ_OK);
    assert_int_equal(buf[2], 4);
    oj_shard_close(s);
    tu_rmdir(dir);
    free(p);
    free(dir);
}

/* ---- a shard truncated while open */

/* A shard file truncated after oj_shard_open (a user rewriting the data
 * directory in place during a run): every later read, of tokens past the
 * new end (the mapping would raise SIGBUS there) or before it (zeros
 * within its last page), is OJ_ERR_IO naming the shard, not a crash or
 * made-up tokens. A shard replaced by a new file (rename) keeps reading
 * the mapped one. */
static void test_shard_truncated_while_open(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *p = tu_path(dir, "s.bin");
    enum { N = 20000 }; /* 80 KB of tokens: pages past the cut */
    int32_t *toks = malloc(N * sizeof *toks);
    for (int i = 0; i < N; i++)
        toks[i] = i % 1000;
    assert_int_equal(oj_shard_write(p, toks, N, 2, NULL), OJ_OK);
    oj_shard *s = NULL;
    assert_int_equal(oj_shard_open(p, &s, NULL), OJ_OK);
    int32_t buf[8];
    assert_int_equal(oj_shard_read(s, N - 8, 8, buf, NULL), OJ_OK);
    assert_int_equal(buf[7], (N - 1) % 1000);
    /* replaced by rename: the mapped file is still read */
    toks[N - 1] = 7;
    assert_int_equal(oj_shard_write(p, toks, N, 2, NULL), OJ_OK);
    assert_int_equal(oj_shard_read(s, N - 8, 8, buf, NULL), OJ_OK);
    assert_int_equal(buf[7], (N - 1) % 1000);
    oj_shard_close(s);
    /* truncated in place: refused, far past the cut and just before it */
    assert_int_equal(oj_shard_open(p, &s, NULL), OJ_OK);
    assert_int_equal(truncate(p, 1024 + 100 * 4), 0);
    oj_error e = {0};
    assert_int_equal(oj_shard_read(s, N - 8, 8, buf, &e), OJ_ERR_IO);
    assert_non_null(strstr(e.message, "s.bin"));
    assert_non_null(strstr(e.message, "truncated"));
    oj_error e2 = {0};
    assert_int_equal(oj_shard_read(s, 96, 8, buf, &e2), OJ_ERR_IO);
    oj_shard_close(s);
    free(toks);
    tu_rmdir(dir);
    free(p);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_v1),      cmocka_unit_test(test_roundtrip_v2),
        cmocka_unit_test(test_write_refuses),     cmocka_unit_test(test_corrupt_refused),
        cmocka_unit_test(test_open_missing_is_io), cmocka_unit_test(test_list),
        cmocka_unit_test(test_check_vocab),
        cmocka_unit_test(test_shard_read_huge_range),
        cmocka_unit_test(test_shard_truncated_while_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
