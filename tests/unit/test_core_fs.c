// test: the shared file-system helpers (core/fs.h) used by io, data and
// train: mkdir -p, atomic replacement (no temporary left behind, the old file
// kept on failure), temporary names, whole-file reads, tree removal
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/fs.h"

static char tmpdir[512];

/* A fresh directory under $TMPDIR (or /tmp); oj__rmtree removes it. */
static int setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ojas-test-fs-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return oj__rmtree(tmpdir, NULL) == OJ_OK ? 0 : -1;
}

/* tmpdir/name into buf */
static void path_of(char *buf, size_t len, const char *name) {
    assert_int_equal(oj__path_join(buf, len, tmpdir, name, NULL), OJ_OK);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Names in dir (not . and ..), sorted, joined by spaces. */
static void listing(const char *dir, char *out, size_t len) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            if (out[0]) strncat(out, " ", len - strlen(out) - 1);
            strncat(out, names[i]->d_name, len - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

static void expect_content(const char *path, const char *text) {
    uint8_t *b = NULL;
    size_t n = 0;
    assert_int_equal(oj__read_file(path, 1 << 20, &b, &n, NULL), OJ_OK);
    assert_int_equal(n, strlen(text));
    assert_memory_equal(b, text, n);
    free(b);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_mkdirs(void **state) {
    (void)state;
    char p[512];
    path_of(p, sizeof p, "a/b/c");
    assert_int_equal(oj__mkdirs(p, NULL), OJ_OK);
    assert_true(is_dir(p));
    assert_int_equal(oj__mkdirs(p, NULL), OJ_OK); /* exists: fine */
    path_of(p, sizeof p, "a/b/c/");
    assert_int_equal(oj__mkdirs(p, NULL), OJ_OK);
    path_of(p, sizeof p, "a//d/./e");
    assert_int_equal(oj__mkdirs(p, NULL), OJ_OK);
    path_of(p, sizeof p, "a/d/e");
    assert_true(is_dir(p));

    /* a file in the way: the component is named */
    char f[512];
    path_of(f, sizeof f, "a/file");
    write_text(f, "x");
    path_of(p, sizeof p, "a/file/sub");
    oj_error e = {0};
    assert_int_equal(oj__mkdirs(p, &e), OJ_ERR_IO);
    assert_non_null(strstr(e.message, "cannot create directory"));
    assert_non_null(strstr(e.message, "a/file"));
    /* the path itself a file */
    memset(&e, 0, sizeof e);
    assert_int_equal(oj__mkdirs(f, &e), OJ_ERR_IO);
    assert_non_null(strstr(e.message, "is not a directory"));
}

/* A new directory tmpdir/sub into d[512] and the path of `file` in it into p[512]. */
static void subdir(const char *sub, const char *file, char *d, char *p) {
    path_of(d, 512, sub);
    assert_int_equal(oj__mkdirs(d, NULL), OJ_OK);
    assert_int_equal(oj__path_join(p, 512, d, file, NULL), OJ_OK);
}

static void test_atomic_write_replaces(void **state) {
    (void)state;
    char d[512], p[512], names[1024];
    subdir("w", "file.txt", d, p);
    assert_int_equal(oj__atomic_write(p, "first", 5, NULL), OJ_OK);
    expect_content(p, "first");
    assert_int_equal(oj__atomic_write(p, "second, longer", 14, NULL), OJ_OK);
    expect_content(p, "second, longer");
    assert_int_equal(oj__atomic_write(p, "", 0, NULL), OJ_OK);
    expect_content(p, "");
    listing(d, names, sizeof names);
    assert_string_equal(names, "file.txt"); /* no temporary left */

    /* through the stream: written only at commit */
    oj__atomic_file af;
    assert_int_equal(oj__atomic_open(&af, p, NULL), OJ_OK);
    fprintf(af.f, "%d %s\n", 42, "streamed");
    expect_content(p, "");
    assert_int_equal(oj__atomic_commit(&af, NULL), OJ_OK);
    expect_content(p, "42 streamed\n");
    oj__atomic_abort(&af); /* after commit: nothing to do */
    expect_content(p, "42 streamed\n");
    listing(d, names, sizeof names);
    assert_string_equal(names, "file.txt");

    /* a relative path (the directory is ".") */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(d), 0);
    assert_int_equal(oj__atomic_write("rel.txt", "r", 1, NULL), OJ_OK);
    assert_int_equal(chdir(cwd), 0);
    path_of(p, sizeof p, "w/rel.txt");
    expect_content(p, "r");
}

static void test_atomic_failures_keep_old(void **state) {
    (void)state;
    char d[512], p[512], names[1024];
    subdir("k", "keep.txt", d, p);
    assert_int_equal(oj__atomic_write(p, "old", 3, NULL), OJ_OK);

    /* abort: the old file stays, the temporary goes */
    oj__atomic_file af;
    assert_int_equal(oj__atomic_open(&af, p, NULL), OJ_OK);
    fputs("new", af.f);
    oj__atomic_abort(&af);
    oj__atomic_abort(&af); /* twice: nothing to do */
    expect_content(p, "old");
    listing(d, names, sizeof names);
    assert_string_equal(names, "keep.txt");

    /* rename fails (the target is a non-empty directory): named, cleaned up */
    char sub[512], inner[512];
    path_of(sub, sizeof sub, "k/dir");
    path_of(inner, sizeof inner, "k/dir/x");
    assert_int_equal(oj__mkdirs(inner, NULL), OJ_OK);
    oj_error e = {0};
    assert_int_equal(oj__atomic_write(sub, "data", 4, &e), OJ_ERR_IO);
    assert_int_equal(strncmp(e.message, "rename ", 7), 0);
    assert_non_null(strstr(e.message, "k/dir"));
    assert_true(is_dir(inner));
    listing(d, names, sizeof names);
    assert_string_equal(names, "dir keep.txt");

    /* the directory does not exist: create fails, nothing written */
    path_of(p, sizeof p, "k/missing/file");
    memset(&e, 0, sizeof e);
    assert_int_equal(oj__atomic_write(p, "x", 1, &e), OJ_ERR_IO);
    assert_int_equal(strncmp(e.message, "create ", 7), 0);
    assert_int_equal(access(p, F_OK), -1);
    /* a path naming no file */
    path_of(p, sizeof p, "k/");
    memset(&e, 0, sizeof e);
    assert_int_equal(oj__atomic_open(&af, p, &e), OJ_ERR_INVALID_ARGUMENT);
    oj__atomic_abort(&af); /* after a failed open: nothing to do */
    listing(d, names, sizeof names);
    assert_string_equal(names, "dir keep.txt");
}

static void test_temp_sibling_and_dirname(void **state) {
    (void)state;
    char a[256], b[256], pid[32];
    assert_int_equal(oj__temp_sibling("/x/y/name.bin", a, sizeof a, NULL), OJ_OK);
    assert_int_equal(oj__temp_sibling("/x/y/name.bin", b, sizeof b, NULL), OJ_OK);
    assert_string_not_equal(a, b); /* unique within the process */
    snprintf(pid, sizeof pid, "-%ld-", (long)getpid());
    assert_int_equal(strncmp(a, "/x/y/.name.bin.tmp-", 19), 0);
    assert_non_null(strstr(a, pid));
    assert_int_equal(oj__temp_sibling("plain", a, sizeof a, NULL), OJ_OK);
    assert_int_equal(strncmp(a, "./.plain.tmp-", 13), 0);
    char tiny[8];
    assert_int_equal(oj__temp_sibling("/x/name", tiny, sizeof tiny, NULL), OJ_ERR_OUT_OF_RANGE);

    assert_int_equal(oj__dirname("/x/y/z", a, sizeof a, NULL), OJ_OK);
    assert_string_equal(a, "/x/y");
    assert_int_equal(oj__dirname("/z", a, sizeof a, NULL), OJ_OK);
    assert_string_equal(a, "/");
    assert_int_equal(oj__dirname("z", a, sizeof a, NULL), OJ_OK);
    assert_string_equal(a, ".");
    assert_int_equal(oj__dirname("/abcdefgh/z", tiny, sizeof tiny, NULL), OJ_ERR_OUT_OF_RANGE);

    assert_int_equal(oj__path_join(a, sizeof a, "d", "f", NULL), OJ_OK);
    assert_string_equal(a, "d/f");
    assert_int_equal(oj__path_join(tiny, sizeof tiny, "dir", "file", NULL), OJ_ERR_OUT_OF_RANGE);
}

/* oj__read_stream: a stream larger than its first buffer (64 KiB) comes back
 * whole and NUL-terminated; a stream that cannot be read is OJ_ERR_IO. */
static void test_read_stream(void **state) {
    (void)state;
    char p[512];
    path_of(p, sizeof p, "stream.bin");
    size_t want = 200000;
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < want; i++) fputc('a' + (int)(i % 26), f);
    assert_int_equal(fclose(f), 0);
    f = fopen(p, "rb");
    assert_non_null(f);
    char *b = NULL;
    size_t n = 0;
    assert_int_equal(oj__read_stream(f, p, &b, &n, NULL), OJ_OK);
    fclose(f);
    assert_int_equal(n, want);
    for (size_t i = 0; i < want; i += 4099) assert_int_equal(b[i], 'a' + (int)(i % 26));
    assert_int_equal(b[want - 1], 'a' + (int)((want - 1) % 26));
    assert_int_equal(b[want], 0);
    free(b);
    f = fopen(p, "wb"); /* write-only: reading it fails */
    assert_non_null(f);
    oj_error e = {0};
    assert_int_equal(oj__read_stream(f, "w.bin", &b, &n, &e), OJ_ERR_IO);
    fclose(f);
    assert_null(b);
    assert_string_equal(e.message, "read w.bin: read error");
}

static void test_read_file_and_rmtree(void **state) {
    (void)state;
    char p[512], d[512];
    path_of(p, sizeof p, "r.txt");
    write_text(p, "0123456789");
    uint8_t *b = NULL;
    size_t n = 0;
    assert_int_equal(oj__read_file(p, 10, &b, &n, NULL), OJ_OK);
    assert_int_equal(n, 10);
    assert_int_equal(b[10], 0); /* NUL appended */
    free(b);
    oj_error e = {0};
    assert_int_equal(oj__read_file(p, 9, &b, &n, &e), OJ_ERR_CORRUPT);
    assert_null(b);
    memset(&e, 0, sizeof e);
    assert_int_equal(oj__read_file(tmpdir, 100, &b, &n, &e), OJ_ERR_IO);
    assert_non_null(strstr(e.message, "not a regular file"));
    path_of(p, sizeof p, "absent");
    assert_int_equal(oj__read_file(p, 100, &b, &n, NULL), OJ_ERR_IO);

    path_of(d, sizeof d, "tree/a/b");
    assert_int_equal(oj__mkdirs(d, NULL), OJ_OK);
    path_of(p, sizeof p, "tree/a/b/f");
    write_text(p, "x");
    path_of(d, sizeof d, "tree");
    assert_int_equal(oj__rmtree(d, NULL), OJ_OK);
    assert_int_equal(access(d, F_OK), -1);
    assert_int_equal(oj__rmtree(d, NULL), OJ_OK); /* missing: fine */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mkdirs),
        cmocka_unit_test(test_atomic_write_replaces),
        cmocka_unit_test(test_atomic_failures_keep_old),
        cmocka_unit_test(test_temp_sibling_and_dirname),
        cmocka_unit_test(test_read_stream),
        cmocka_unit_test(test_read_file_and_rmtree),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
