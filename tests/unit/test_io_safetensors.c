// test: safetensors round trips (every dtype, metadata, tensors of any
// layout), the writer's layout rules, zero-copy mapping lifetime, and every
// corruption class refused with OJ_ERR_CORRUPT naming the tensor
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/internal.h"
#include "io/io_internal.h"
#include "ojas/io.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ojas-test-st-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return oj__rmtree(tmpdir, NULL) == OJ_OK ? 0 : -1;
}

static void path_of(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", tmpdir, name);
}

static uint8_t *slurp(const char *path, size_t *len) {
    uint8_t *b;
    assert_int_equal(oj__read_file(path, (size_t)1 << 30, &b, len, NULL), OJ_OK);
    return b;
}

/* A file from header text (padded to 8 with spaces) and data bytes. */
static uint8_t *mk(const char *header, const void *data, size_t dlen, size_t *len) {
    size_t hl = strlen(header), pad = (8 - hl % 8) % 8;
    *len = 8 + hl + pad + dlen;
    uint8_t *b = malloc(*len);
    uint64_t n = hl + pad;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', pad);
    if (dlen) memcpy(b + 8 + hl + pad, data, dlen);
    return b;
}

/* Open bytes from memory; return the status and keep the message. */
static oj_status try_open(const uint8_t *b, size_t len, oj_error *err) {
    oj_safetensors *st = NULL;
    memset(err, 0, sizeof *err);
    oj_status rc = oj_safetensors_open_memory(b, len, &st, err);
    if (rc == OJ_OK) assert_non_null(st);
    else assert_null(st);
    oj_safetensors_close(st);
    return rc;
}

static void expect_corrupt(const char *header, const void *data, size_t dlen, const char *needle) {
    size_t len;
    uint8_t *b = mk(header, data, dlen, &len);
    oj_error err;
    oj_status rc = try_open(b, len, &err);
    if (rc != OJ_ERR_CORRUPT || (needle && !strstr(err.message, needle)))
        fail_msg("header %s: got %s \"%s\", wanted OJ_ERR_CORRUPT naming %s", header,
                 oj_status_name(rc), err.message, needle ? needle : "-");
    free(b);
}

/* ---------------------------------------------------------------- round trips */

static void test_roundtrip_all_dtypes(void **state) {
    (void)state;
    static const oj_dtype dts[] = {OJ_F32, OJ_F64, OJ_BF16, OJ_F16, OJ_I64,
                                   OJ_I32, OJ_U32, OJ_U16,  OJ_U8,  OJ_BOOL};
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i64",
                                        "i32", "u32", "u16",  "u8",  "bool"};
    enum { N = 10 };
    oj_safetensors_entry e[N + 2];
    uint8_t *bufs[N];
    int64_t shapes[N][3];
    for (int i = 0; i < N; i++) {
        /* odd element counts, so small dtypes end unaligned */
        shapes[i][0] = 3, shapes[i][1] = i + 1, shapes[i][2] = 1;
        size_t nb = (size_t)(3 * (i + 1)) * oj_dtype_size(dts[i]);
        bufs[i] = malloc(nb);
        for (size_t k = 0; k < nb; k++) bufs[i][k] = (uint8_t)(k * 31 + (size_t)i * 7 + 1);
        if (dts[i] == OJ_BOOL)
            for (size_t k = 0; k < nb; k++) bufs[i][k] &= 1;
        e[i] = (oj_safetensors_entry){names[i], dts[i], 3, shapes[i], bufs[i]};
    }
    /* a scalar and an empty tensor too */
    double pi = 3.141592653589793;
    int64_t empty_shape[2] = {0, 5};
    e[N] = (oj_safetensors_entry){"scalar", OJ_F64, 0, NULL, &pi};
    e[N + 1] = (oj_safetensors_entry){"empty", OJ_F32, 2, empty_shape, NULL};
    const char *meta[] = {"format", "pt", "note", "ünïcode \"quoted\"\n", NULL};
    char path[512];
    path_of(path, sizeof path, "all.safetensors");
    oj_error err = {0};
    assert_int_equal(oj_safetensors_write(path, N + 2, e, meta, &err), OJ_OK);

    oj_safetensors *st = NULL;
    assert_int_equal(oj_safetensors_open(path, &st, &err), OJ_OK);
    assert_int_equal(oj_safetensors_count(st), N + 2);
    for (int i = 0; i < N + 2; i++) {
        int64_t k = oj_safetensors_find(st, e[i].name);
        assert_true(k >= 0);
        assert_string_equal(oj_safetensors_name(st, k), e[i].name);
        assert_int_equal(oj_safetensors_dtype(st, k), e[i].dtype);
        assert_string_equal(oj_safetensors_dtype_str(st, k), oj_safetensors_dtype_to_str(e[i].dtype));
        assert_int_equal(oj_safetensors_rank(st, k), e[i].rank);
        for (int d = 0; d < e[i].rank; d++) assert_int_equal(oj_safetensors_shape(st, k)[d], e[i].shape[d]);
        size_t nb;
        const void *p = oj_safetensors_data(st, k, &nb);
        int64_t numel;
        assert_int_equal(oj_shape_numel(e[i].rank, e[i].shape, e[i].dtype, &numel), OJ_OK);
        assert_int_equal(nb, (size_t)numel * oj_dtype_size(e[i].dtype));
        if (nb) assert_memory_equal(p, e[i].data, nb);
        /* every tensor is aligned to its element size in the file */
        assert_int_equal(((const uint8_t *)p - (const uint8_t *)st->map->base) %
                             oj_dtype_size(e[i].dtype), 0);
    }
    /* names come back sorted */
    for (int64_t k = 1; k < oj_safetensors_count(st); k++)
        assert_true(strcmp(oj_safetensors_name(st, k - 1), oj_safetensors_name(st, k)) < 0);
    assert_int_equal(oj_safetensors_find(st, "nope"), -1);
    assert_null(oj_safetensors_name(st, 99));
    assert_int_equal(oj_safetensors_metadata_count(st), 2);
    assert_string_equal(oj_safetensors_metadata_key(st, 0), "format");
    assert_string_equal(oj_safetensors_metadata_get(st, "note"), "ünïcode \"quoted\"\n");
    assert_null(oj_safetensors_metadata_get(st, "absent"));
    oj_safetensors_close(st);
    for (int i = 0; i < N; i++) free(bufs[i]);
}

/* The file as bytes obeys the layout rules other readers rely on. */
static void test_writer_layout(void **state) {
    (void)state;
    float a[3] = {1, 2, 3};
    uint8_t b[5] = {1, 2, 3, 4, 5};
    double c[2] = {4, 5};
    uint16_t d[1] = {7};
    int64_t s3[1] = {3}, s5[1] = {5}, s2[1] = {2}, s1[1] = {1};
    oj_safetensors_entry e[] = {{"z.bytes", OJ_U8, 1, s5, b},
                                {"a.float", OJ_F32, 1, s3, a},
                                {"m.double", OJ_F64, 1, s2, c},
                                {"b.half", OJ_F16, 1, s1, d}};
    const char *meta[] = {"zz", "1", "aa", "2", NULL};
    char path[512];
    path_of(path, sizeof path, "layout.safetensors");
    assert_int_equal(oj_safetensors_write(path, 4, e, meta, NULL), OJ_OK);
    size_t len;
    uint8_t *f = slurp(path, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | f[i];
    assert_int_equal((8 + hl) % 8, 0);
    /* the JSON ends with '}' then only spaces */
    size_t end = (size_t)hl;
    while (f[8 + end - 1] == ' ') end--;
    assert_int_equal(f[8 + end - 1], '}');
    json_t *h = json_loadb((const char *)f + 8, end, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(h);
    /* key order in the text: __metadata__ first, then names sorted */
    const char *prev = NULL;
    int i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v) {
        if (i++ == 0) {
            assert_string_equal(key, "__metadata__");
            continue;
        }
        if (prev) assert_true(strcmp(prev, key) < 0);
        prev = key;
    }
    /* data by element size (8, 4, 2, 1 bytes), no gaps, to the end */
    const char *order[] = {"m.double", "a.float", "b.half", "z.bytes"};
    json_int_t pos = 0;
    for (int k = 0; k < 4; k++) {
        json_t *off = json_object_get(json_object_get(h, order[k]), "data_offsets");
        assert_int_equal(json_integer_value(json_array_get(off, 0)), pos);
        pos = json_integer_value(json_array_get(off, 1));
    }
    assert_int_equal((size_t)pos, len - 8 - hl);
    json_decref(h);
    free(f);
}

static void test_save_tensors(void **state) {
    (void)state;
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    int64_t shape[2] = {2, 3};
    float v[6] = {1, 2, 3, 4, 5, 6};
    oj_tensor *x = oj_from_host(eng, 2, shape, OJ_F32, v, sizeof v);
    /* a transposed view: not contiguous, so it is staged through the host */
    int64_t tshape[2] = {3, 2}, tstride[2] = {1, 3};
    oj_tensor *xt = oj__tensor_view(x, 2, tshape, tstride, 0);
    oj_tensor *h = oj_full(eng, 1, shape, OJ_BF16, 1.5);
    assert_non_null(xt);
    assert_non_null(h);
    const char *names[] = {"x", "x.t", "h"};
    oj_tensor *ts[] = {x, xt, h};
    char path[512];
    path_of(path, sizeof path, "saved.safetensors");
    oj_error err = {0};
    assert_int_equal(oj_safetensors_save(path, 3, names, ts, NULL, &err), OJ_OK);

    oj_safetensors *st;
    assert_int_equal(oj_safetensors_open(path, &st, &err), OJ_OK);
    oj_tensor *y = oj_safetensors_tensor(st, eng, "x.t");
    assert_non_null(y);
    assert_int_equal(oj_size(y, 0), 3);
    const float want[6] = {1, 4, 2, 5, 3, 6};
    for (int i = 0; i < 6; i++) assert_true(oj_item_at(y, i) == want[i]);
    oj_tensor *hb = oj_safetensors_tensor(st, eng, "h");
    assert_int_equal(oj_tensor_dtype(hb), OJ_BF16);
    assert_true(oj_item_at(hb, 1) == 1.5);
    /* NULL and released tensors are refused */
    oj_tensor *bad[] = {x, NULL, h};
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_safetensors_save(path, 3, names, bad, NULL, &err), OJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "x.t"));
    oj_safetensors_close(st);
    oj_release(y);
    oj_release(hb);
    oj_release(xt);
    oj_release(h);
    oj_release(x);
    oj_engine_free(eng);
}

/* Lines of /proc/self/maps that map `path`. */
static int mapped(const char *path) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, path)) n++;
    if (f) fclose(f);
    return n;
}

static void test_zero_copy_lifetime(void **state) {
    (void)state;
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    float w[4] = {1, 2, 3, 4};
    int64_t s[2] = {2, 2};
    oj_safetensors_entry e[] = {{"w", OJ_F32, 2, s, w}};
    char path[512];
    path_of(path, sizeof path, "zc.safetensors");
    assert_int_equal(oj_safetensors_write(path, 1, e, NULL, NULL), OJ_OK);
    oj_safetensors *st;
    assert_int_equal(oj_safetensors_open(path, &st, NULL), OJ_OK);
    assert_true(mapped(path) > 0);
    oj_tensor *t = oj_safetensors_tensor(st, eng, "w");
    assert_non_null(t);
    /* zero-copy: the tensor's data is the mapped file */
    assert_ptr_equal(oj_data_ptr(t), oj_safetensors_data(st, 0, NULL));
    oj_safetensors_close(st);
    assert_true(mapped(path) > 0); /* kept alive by the tensor */
    assert_true(oj_item_at(t, 3) == 4.0);
    /* writes are private: the file keeps its bytes */
    ((float *)oj_data_ptr(t))[0] = 42;
    oj_tensor *t2 = oj_clone(t);
    oj_release(t);
    assert_int_equal(mapped(path), 0); /* last tensor gone: unmapped */
    assert_true(oj_item_at(t2, 0) == 42.0);
    assert_int_equal(oj_safetensors_open(path, &st, NULL), OJ_OK);
    assert_true(((const float *)oj_safetensors_data(st, 0, NULL))[0] == 1.0f);
    /* errors are recorded on the engine */
    assert_null(oj_safetensors_tensor(st, eng, "missing"));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(eng), "missing"));
    oj_clear_error(eng);
    oj_safetensors_close(st);
    oj_release(t2);
    oj_engine_free(eng);
}

/* A file that places an f32 tensor at an odd address still loads (copied). */
static void test_misaligned_copied(void **state) {
    (void)state;
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    uint8_t data[1 + 8];
    data[0] = 9;
    float f[2] = {1.25f, -2.5f};
    memcpy(data + 1, f, 8);
    size_t len;
    uint8_t *b = mk("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}",
                    data, sizeof data, &len);
    oj_safetensors *st;
    assert_int_equal(oj_safetensors_open_memory(b, len, &st, NULL), OJ_OK);
    free(b); /* open_memory copied it */
    oj_tensor *t = oj_safetensors_tensor(st, eng, "b");
    assert_non_null(t);
    assert_true(oj_data_ptr(t) != oj_safetensors_data(st, 1, NULL));
    assert_true(oj_item_at(t, 1) == -2.5);
    oj_tensor *a = oj_safetensors_tensor(st, eng, "a");
    assert_true(oj_item_at(a, 0) == 9.0);
    oj_safetensors_close(st);
    oj_release(t);
    oj_release(a);
    oj_engine_free(eng);
}

/* Dtypes safetensors defines but ojas lacks are listed, not loaded. */
static void test_foreign_dtype(void **state) {
    (void)state;
    uint8_t data[4] = {1, 2, 3, 4};
    size_t len;
    uint8_t *b = mk("{\"q\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}", data, 4, &len);
    oj_safetensors *st;
    assert_int_equal(oj_safetensors_open_memory(b, len, &st, NULL), OJ_OK);
    assert_int_equal(oj_safetensors_dtype(st, 0), OJ_DTYPE_COUNT);
    assert_string_equal(oj_safetensors_dtype_str(st, 0), "I8");
    oj_engine *eng;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    assert_null(oj_safetensors_tensor(st, eng, "q"));
    assert_int_equal(oj_last_status(eng), OJ_ERR_UNSUPPORTED);
    oj_engine_free(eng);
    oj_safetensors_close(st);
    free(b);
    /* sub-byte F4: 3 elements are 12 bits, not whole bytes */
    expect_corrupt("{\"q\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", data, 2, "\"q\"");
}

/* ---------------------------------------------------------------- corruption */

static void test_every_prefix_refused(void **state) {
    (void)state;
    float a[3] = {1, 2, 3};
    int64_t s[1] = {3};
    oj_safetensors_entry e[] = {{"w", OJ_F32, 1, s, a}, {"v", OJ_F32, 1, s, a}};
    char path[512];
    path_of(path, sizeof path, "prefix.safetensors");
    assert_int_equal(oj_safetensors_write(path, 2, e, NULL, NULL), OJ_OK);
    size_t len;
    uint8_t *f = slurp(path, &len);
    oj_error err;
    assert_int_equal(try_open(f, len, &err), OJ_OK);
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, f, n);
        if (try_open(cut, n, &err) != OJ_ERR_CORRUPT) fail_msg("prefix %zu accepted", n);
        free(cut);
    }
    /* and one byte more is trailing garbage */
    uint8_t *more = malloc(len + 1);
    memcpy(more, f, len);
    more[len] = 0;
    assert_int_equal(try_open(more, len + 1, &err), OJ_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "trailing garbage"));
    free(more);
    free(f);
}

#define T(name, dtype, shape, off) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" off "}"

static void test_corruption_classes(void **state) {
    (void)state;
    uint8_t d[64] = {0};
    /* header length field */
    uint8_t small[7] = {0};
    oj_error err;
    assert_int_equal(try_open(small, sizeof small, &err), OJ_ERR_CORRUPT);
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    assert_int_equal(try_open(huge, sizeof huge, &err), OJ_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "header length"));
    uint8_t beyond[12] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    assert_int_equal(try_open(beyond, sizeof beyond, &err), OJ_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "past the end"));
    uint8_t zero[8] = {0};
    assert_int_equal(try_open(zero, sizeof zero, &err), OJ_ERR_CORRUPT);
    /* JSON */
    expect_corrupt("[1, 2]", NULL, 0, "start with");
    expect_corrupt(" {}", NULL, 0, "start with '{'");
    expect_corrupt("{\"a\":", NULL, 0, "not valid JSON");
    expect_corrupt("{} x", NULL, 0, "not valid JSON");
    expect_corrupt("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\x01", d, 4, NULL);
    /* duplicate names, named even when long */
    expect_corrupt("{" T("transformer.h.0.attn.c_attn.weight", "F32", "[1]", "[0,4]") ","
                   T("transformer.h.0.attn.c_attn.weight", "F32", "[1]", "[4,8]") "}",
                   d, 8, "\"transformer.h.0.attn.c_attn.weight\"");
    expect_corrupt("{" T("a\\\"b", "F32", "[1]", "[0,4]") "," T("a\\\"b", "F32", "[1]", "[4,8]") "}",
                   d, 8, "a\\\"b");
    /* non-UTF-8 names, NUL in names, unpaired surrogates */
    expect_corrupt("{" T("bad\xff\xfename", "F32", "[1]", "[0,4]") "}", d, 4, "bad\\xff\\xfename");
    expect_corrupt("{" T("over\xc0\xaflong", "F32", "[1]", "[0,4]") "}", d, 4, "over");
    expect_corrupt("{" T("nul\\u0000", "F32", "[1]", "[0,4]") "}", d, 4, NULL);
    expect_corrupt("{" T("sur\\ud800", "F32", "[1]", "[0,4]") "}", d, 4, NULL);
    /* dtype / shape / byte count */
    expect_corrupt("{" T("w", "F32", "[2]", "[0,4]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F64", "[1]", "[0,4]") "}", d, 4, "needs 8 bytes");
    expect_corrupt("{" T("w", "F31", "[1]", "[0,4]") "}", d, 4, "unknown dtype");
    expect_corrupt("{" T("w", "F32", "[-1]", "[0,4]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F32", "[1.0]", "[0,4]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F32", "3", "[0,4]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F32", "[4294967296,4294967296]", "[0,0]") "}", NULL, 0, "overflow");
    expect_corrupt("{" T("w", "F32", "[4611686018427387904]", "[0,0]") "}", NULL, 0, "overflow");
    /* empty, but its dims would overflow strides (found by fuzzing) */
    expect_corrupt("{" T("w", "F32", "[429496729294,64967296,0]", "[0,0]") "}", NULL, 0, "overflow");
    expect_corrupt("{" T("w", "F32", "[0,4294967296,4294967296]", "[0,0]") "}", NULL, 0, "overflow");
    expect_corrupt("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", d, 4, "missing \"data_offsets\"");
    expect_corrupt("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", d, 4,
                   "unknown key");
    expect_corrupt("{\"w\":[1]}", d, 4, "\"w\"");
    expect_corrupt("{\"w\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4, "\"w\"");
    /* offsets */
    expect_corrupt("{" T("w", "F32", "[1]", "[0,4,8]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F32", "[1]", "[-4,0]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F32", "[1]", "[8,4]") "}", d, 8, "\"w\"");
    expect_corrupt("{" T("w", "F32", "[1]", "[0.0,4]") "}", d, 4, "\"w\"");
    expect_corrupt("{" T("w", "F32", "[1]", "[4,8]") "}", d, 4, "run past");
    expect_corrupt("{" T("w", "F32", "[1]", "[9223372036854775800,9223372036854775804]") "}", d, 4,
                   "\"w\"");
    expect_corrupt("{" T("w", "F32", "[2]", "[0,8]") "," T("v", "F32", "[1]", "[4,8]") "}", d, 8,
                   "overlap");
    expect_corrupt("{" T("w", "F32", "[1]", "[0,4]") "," T("v", "F32", "[1]", "[0,4]") "}", d, 8,
                   "overlap");
    expect_corrupt("{" T("w", "F32", "[2]", "[0,8]") "," T("e", "F32", "[0]", "[4,4]") "}", d, 8,
                   "\"e\"");
    expect_corrupt("{" T("w", "F32", "[1]", "[4,8]") "}", d, 8, "gap");
    expect_corrupt("{" T("w", "F32", "[1]", "[0,4]") "," T("v", "F32", "[1]", "[8,12]") "}", d, 12,
                   "\"v\"");
    expect_corrupt("{" T("w", "F32", "[1]", "[0,4]") "}", d, 8, "trailing garbage");
    expect_corrupt("{}", d, 1, "trailing garbage");
    /* metadata */
    expect_corrupt("{\"__metadata__\":{\"k\":1}}", NULL, 0, "\"k\"");
    expect_corrupt("{\"__metadata__\":[]}", NULL, 0, "__metadata__");
    expect_corrupt("{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", NULL, 0, "\"k\"");
}

/* Files as other writers lay them out are accepted. */
static void test_accepts_valid_variants(void **state) {
    (void)state;
    uint8_t d[16] = {0};
    size_t len;
    oj_error err;
    const char *ok[] = {
        "{}",
        "{\"__metadata__\":{}}",
        "{\"__metadata__\":{\"format\":\"pt\"}," T("b", "F32", "[2]", "[0,8]") "}",
        /* unsorted keys, data in another order than the keys */
        "{" T("z", "F32", "[1]", "[8,12]") "," T("a", "F64", "[1]", "[0,8]") "}",
        /* zero-size tensors anywhere, scalars */
        "{" T("e", "F32", "[0,3]", "[4,4]") "," T("s", "I32", "[]", "[0,4]") "}",
        /* escaped and non-ASCII names, JSON whitespace */
        "{ \"caf\\u00e9\" : { \"dtype\" : \"U8\", \"shape\" : [ 1 ], \"data_offsets\" : [ 0 , 1 ] } ,"
        "\"\xe6\x97\xa5\\n\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[1,2]}}\n",
    };
    const size_t dl[] = {0, 0, 8, 12, 4, 2};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint8_t *b = mk(ok[i], d, dl[i], &len);
        if (try_open(b, len, &err) != OJ_OK) fail_msg("%s refused: %s", ok[i], err.message);
        free(b);
    }
    /* header without padding at all */
    const char *h = "{" T("w", "U8", "[3]", "[0,3]") "}";
    size_t hl = strlen(h);
    uint8_t raw[128] = {(uint8_t)hl};
    memcpy(raw + 8, h, hl);
    assert_int_equal(try_open(raw, 8 + hl + 3, &err), OJ_OK);
    oj_safetensors *st;
    uint8_t *b = mk(ok[5], d, 2, &len);
    assert_int_equal(oj_safetensors_open_memory(b, len, &st, NULL), OJ_OK);
    assert_true(oj_safetensors_find(st, "caf\xc3\xa9") >= 0);
    assert_true(oj_safetensors_find(st, "\xe6\x97\xa5\n") >= 0);
    oj_safetensors_close(st);
    free(b);
}

static void test_write_errors(void **state) {
    (void)state;
    float a[1] = {1};
    int64_t s[1] = {1}, neg[1] = {-1}, huge_empty[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 0};
    char path[512];
    path_of(path, sizeof path, "keep.safetensors");
    oj_safetensors_entry good[] = {{"w", OJ_F32, 1, s, a}};
    assert_int_equal(oj_safetensors_write(path, 1, good, NULL, NULL), OJ_OK);
    size_t len0;
    uint8_t *before = slurp(path, &len0);
    struct {
        oj_safetensors_entry e[2];
        int n;
        const char *needle;
    } cases[] = {
        {{{"w", OJ_F32, 1, s, a}, {"w", OJ_F32, 1, s, a}}, 2, "duplicate"},
        {{{"bad\xff", OJ_F32, 1, s, a}}, 1, "UTF-8"},
        {{{"", OJ_F32, 1, s, a}}, 1, "empty"},
        {{{"__metadata__", OJ_F32, 1, s, a}}, 1, "reserved"},
        {{{"w", (oj_dtype)42, 1, s, a}}, 1, "dtype"},
        {{{"w", OJ_F32, 1, neg, a}}, 1, "shape"},
        {{{"w", OJ_F32, 9, s, a}}, 1, "rank"},
        {{{"w", OJ_F32, 3, huge_empty, a}}, 1, "shape"},
        {{{"w", OJ_F32, 1, s, NULL}}, 1, "NULL"},
        {{{NULL, OJ_F32, 1, s, a}}, 1, "NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oj_error err = {0};
        assert_int_equal(oj_safetensors_write(path, cases[i].n, cases[i].e, NULL, &err),
                         OJ_ERR_INVALID_ARGUMENT);
        if (!strstr(err.message, cases[i].needle)) fail_msg("case %zu: %s", i, err.message);
    }
    const char *dup_meta[] = {"k", "1", "k", "2", NULL};
    oj_error err = {0};
    assert_int_equal(oj_safetensors_write(path, 1, good, dup_meta, &err), OJ_ERR_INVALID_ARGUMENT);
    /* the old file is untouched by every refused write */
    size_t len1;
    uint8_t *after = slurp(path, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    free(before);
    free(after);
    memset(&err, 0, sizeof err);
    assert_int_equal(oj_safetensors_write("/nonexistent-dir/x.safetensors", 1, good, NULL, &err),
                     OJ_ERR_IO);
    /* no temporary left behind */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -q tmp", tmpdir);
    assert_int_not_equal(system(cmd), 0);
}

/* A header the reader would refuse (over 100,000,000 bytes) is refused at
 * write time with the reader's words, and nothing is left behind. */
static void test_write_header_limit(void **state) {
    (void)state;
    float a[1] = {1};
    int64_t s[1] = {1};
    char path[512];
    path_of(path, sizeof path, "big-header.safetensors");
    oj_safetensors_entry good[] = {{"w", OJ_F32, 1, s, a}};
    size_t vl = OJ__ST_MAX_HEADER;
    char *value = malloc(vl + 1);
    assert_non_null(value);
    memset(value, 'x', vl);
    value[vl] = '\0';
    const char *meta[] = {"k", value, NULL};
    oj_error err = {0};
    assert_int_equal(oj_safetensors_write(path, 1, good, meta, &err), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(err.message, "exceeds the 100000000-byte limit"));
    assert_int_not_equal(access(path, F_OK), 0);
    /* the reader's message for such a header says the same */
    size_t len = 8 + vl + 16;
    uint8_t *b = calloc(1, len);
    assert_non_null(b);
    uint64_t hl = vl + 16;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    oj_error rerr;
    assert_int_equal(try_open(b, len, &rerr), OJ_ERR_CORRUPT);
    assert_non_null(strstr(rerr.message, "exceeds the 100000000-byte limit"));
    free(b);
    free(value);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_dtypes), cmocka_unit_test(test_writer_layout),
        cmocka_unit_test(test_save_tensors),         cmocka_unit_test(test_zero_copy_lifetime),
        cmocka_unit_test(test_misaligned_copied),    cmocka_unit_test(test_foreign_dtype),
        cmocka_unit_test(test_every_prefix_refused), cmocka_unit_test(test_corruption_classes),
        cmocka_unit_test(test_accepts_valid_variants), cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_write_header_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
