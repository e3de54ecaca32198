// test: GGUF round trips (metadata of every type, F32/F16/BF16/Q8_0/Q4_0/
// Q4_1 tensors, default and custom alignment), tensors and quantized
// matrices loaded from a file, every prefix of a valid file refused, each
// corruption class refused with OJ_ERR_CORRUPT naming the field, the
// writer's argument checks, and a failed write named with its reason
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/internal.h"
#include "io/gguf_internal.h"
#include "ojas/gguf.h"
#include "ojas/quant.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ojas-test-gguf-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return oj__rmtree(tmpdir, NULL) == OJ_OK ? 0 : -1;
}

static oj_engine *engine(void) {
    oj_engine *e = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = 1;
    assert_int_equal(oj_engine_create(&cfg, &e, NULL), OJ_OK);
    return e;
}

static void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = scale * sinf(0.37f * (float)i + 0.1f);
}

static void test_round_trip(void **state) {
    (void)state;
    oj_engine *eng = engine();
    enum { N = 3, K = 64 };
    float w[N * K], v5[15];
    fill(w, N * K, 0.5f);
    fill(v5, 15, 2.0f);
    uint16_t h[15], b[15];
    for (int i = 0; i < 15; i++) h[i] = oj_f32_to_f16(v5[i]), b[i] = oj_f32_to_bf16(v5[i]);
    oj_tensor *wt = oj_from_host(eng, 2, (int64_t[]){N, K}, OJ_F32, w, sizeof w);
    oj_qtensor *q[3];
    for (int t = 0; t < 3; t++) assert_non_null(q[t] = oj_quantize(wt, (oj_qtype)t));
    const char *names[3] = {"blk.0.q8", "blk.0.q4_0", "blk.0.q4_1"};
    for (uint32_t align = 32; align <= 64; align += 32) {
        oj_gguf_writer *gw = oj_gguf_writer_new();
        oj_error err = {0};
        uint8_t u8 = 200, bl = 1;
        int8_t i8 = -100;
        uint16_t u16 = 65000;
        int16_t i16 = -30000;
        uint32_t u32 = 4000000000u;
        int32_t i32 = -2000000000;
        float f32 = 1.5f;
        uint64_t u64 = UINT64_MAX;
        int64_t i64 = INT64_MIN;
        double f64 = -0.125;
        assert_int_equal(oj_gguf_writer_set_str(gw, "general.architecture", "gpt2", &err), 0);
        if (align != 32)
            assert_int_equal(oj_gguf_writer_set(gw, "general.alignment", OJ_GGUF_UINT32, &align,
                                                &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.u8", OJ_GGUF_UINT8, &u8, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.i8", OJ_GGUF_INT8, &i8, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.u16", OJ_GGUF_UINT16, &u16, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.i16", OJ_GGUF_INT16, &i16, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.u32", OJ_GGUF_UINT32, &u32, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.i32", OJ_GGUF_INT32, &i32, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.f32", OJ_GGUF_FLOAT32, &f32, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.bool", OJ_GGUF_BOOL, &bl, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.u64", OJ_GGUF_UINT64, &u64, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.i64", OJ_GGUF_INT64, &i64, &err), 0);
        assert_int_equal(oj_gguf_writer_set(gw, "t.f64", OJ_GGUF_FLOAT64, &f64, &err), 0);
        int32_t arr[4] = {1, -2, 3, -4};
        assert_int_equal(oj_gguf_writer_set_array(gw, "t.arr_i32", OJ_GGUF_INT32, 4, arr, &err), 0);
        assert_int_equal(oj_gguf_writer_set_array(gw, "t.empty", OJ_GGUF_FLOAT32, 0, NULL, &err), 0);
        const char *toks[3] = {"hello", "", "w\xc3\xb6rld"};
        assert_int_equal(oj_gguf_writer_set_str_array(gw, "tokenizer.ggml.tokens", 3, toks, &err),
                         0);
        assert_int_equal(oj_gguf_writer_add_tensor(gw, "v.f32", OJ_GGML_F32, 2,
                                                   (uint64_t[]){5, 3}, v5, sizeof v5, &err), 0);
        assert_int_equal(oj_gguf_writer_add_tensor(gw, "v.f16", OJ_GGML_F16, 1,
                                                   (uint64_t[]){15}, h, sizeof h, &err), 0);
        assert_int_equal(oj_gguf_writer_add_tensor(gw, "v.bf16", OJ_GGML_BF16, 3,
                                                   (uint64_t[]){5, 1, 3}, b, sizeof b, &err), 0);
        for (int t = 0; t < 3; t++)
            assert_int_equal(oj_gguf_writer_add_qtensor(gw, names[t], q[t], &err), 0);
        char path[300];
        snprintf(path, sizeof path, "%s/rt%u.gguf", tmpdir, align);
        assert_int_equal(oj_gguf_writer_write(gw, path, &err), OJ_OK);
        oj_gguf_writer_free(gw);

        oj_gguf *g = NULL;
        if (oj_gguf_open(path, &g, &err) != OJ_OK) fail_msg("%s", err.message);
        assert_int_equal(oj_gguf_version(g), 3);
        assert_int_equal(oj_gguf_alignment(g), align);
        assert_int_equal(oj_gguf_kv_count(g), align == 32 ? 15 : 16);
        assert_string_equal(oj_gguf_kv_key(g, 0), "general.architecture");
        assert_string_equal(oj_gguf_kv_str(g, 0, NULL), "gpt2");
        int64_t iv;
        uint64_t uv;
        double dv;
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.u8"), &iv) && iv == 200);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.i8"), &iv) && iv == -100);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.u16"), &iv) && iv == 65000);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.i16"), &iv) && iv == -30000);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.u32"), &iv) && iv == 4000000000);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.i32"), &iv) && iv == -2000000000);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.bool"), &iv) && iv == 1);
        assert_false(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.u64"), &iv));
        assert_true(oj_gguf_kv_uint(g, oj_gguf_find_key(g, "t.u64"), &uv) && uv == UINT64_MAX);
        assert_true(oj_gguf_kv_int(g, oj_gguf_find_key(g, "t.i64"), &iv) && iv == INT64_MIN);
        assert_false(oj_gguf_kv_uint(g, oj_gguf_find_key(g, "t.i64"), &uv));
        assert_true(oj_gguf_kv_float(g, oj_gguf_find_key(g, "t.f32"), &dv) && dv == 1.5);
        assert_true(oj_gguf_kv_float(g, oj_gguf_find_key(g, "t.f64"), &dv) && dv == -0.125);
        assert_false(oj_gguf_kv_float(g, oj_gguf_find_key(g, "t.u8"), &dv));
        int64_t ai = oj_gguf_find_key(g, "t.arr_i32");
        assert_int_equal(oj_gguf_kv_type(g, ai), OJ_GGUF_ARRAY);
        assert_int_equal(oj_gguf_kv_array_type(g, ai), OJ_GGUF_INT32);
        assert_int_equal(oj_gguf_kv_array_len(g, ai), 4);
        assert_memory_equal(oj_gguf_kv_array_data(g, ai), arr, sizeof arr);
        assert_int_equal(oj_gguf_kv_array_len(g, oj_gguf_find_key(g, "t.empty")), 0);
        int64_t ti = oj_gguf_find_key(g, "tokenizer.ggml.tokens");
        size_t len;
        assert_null(oj_gguf_kv_array_data(g, ti));
        assert_string_equal(oj_gguf_kv_array_str(g, ti, 0, &len), "hello");
        assert_string_equal(oj_gguf_kv_array_str(g, ti, 1, &len), "");
        assert_int_equal(len, 0);
        assert_string_equal(oj_gguf_kv_array_str(g, ti, 2, &len), "w\xc3\xb6rld");
        assert_null(oj_gguf_kv_array_str(g, ti, 3, &len));
        assert_int_equal(oj_gguf_find_key(g, "nope"), -1);

        assert_int_equal(oj_gguf_tensor_count(g), 6);
        for (int64_t i = 0; i < 6; i++) assert_int_equal(oj_gguf_tensor_offset(g, i) % align, 0);
        size_t nb;
        assert_memory_equal(oj_gguf_tensor_data(g, 0, &nb), v5, sizeof v5);
        assert_int_equal(nb, sizeof v5);
        assert_memory_equal(oj_gguf_tensor_data(g, 1, &nb), h, sizeof h);
        assert_memory_equal(oj_gguf_tensor_data(g, 2, &nb), b, sizeof b);
        assert_int_equal(oj_gguf_tensor_ndims(g, 2), 3);
        assert_int_equal(oj_gguf_tensor_dims(g, 2)[1], 1);
        for (int t = 0; t < 3; t++) {
            int64_t i = oj_gguf_find_tensor(g, names[t]);
            assert_int_equal(oj_gguf_tensor_type(g, i), oj_qtype_to_ggml((oj_qtype)t));
            assert_int_equal(oj_gguf_tensor_dims(g, i)[0], K);
            assert_int_equal(oj_gguf_tensor_dims(g, i)[1], N);
            assert_memory_equal(oj_gguf_tensor_data(g, i, &nb), oj_qtensor_data(q[t]),
                                oj_qtensor_nbytes(q[t]));
            oj_qtensor *back = oj_gguf_qtensor(g, eng, names[t]);
            assert_non_null(back);
            assert_int_equal(oj_qtensor_rows(back), N);
            assert_int_equal(oj_qtensor_cols(back), K);
            assert_memory_equal(oj_qtensor_data(back), oj_qtensor_data(q[t]),
                                oj_qtensor_nbytes(q[t]));
            oj_qtensor_free(back);
        }
        /* tensors of float types load with the dims reversed */
        oj_tensor *tf = oj_gguf_tensor(g, eng, "v.f32");
        assert_int_equal(oj_rank(tf), 2);
        assert_int_equal(oj_size(tf, 0), 3);
        assert_int_equal(oj_size(tf, 1), 5);
        float back[15];
        assert_int_equal(oj_to_host(tf, back, sizeof back), OJ_OK);
        assert_memory_equal(back, v5, sizeof v5);
        oj_tensor *tb = oj_gguf_tensor(g, eng, "v.bf16");
        assert_int_equal(oj_tensor_dtype(tb), OJ_BF16);
        assert_int_equal(oj_rank(tb), 3);
        assert_int_equal(oj_size(tb, 0), 3);
        oj_release(tf);
        oj_release(tb);
        assert_null(oj_gguf_tensor(g, eng, "blk.0.q8"));
        assert_int_equal(oj_last_status(eng), OJ_ERR_UNSUPPORTED);
        assert_non_null(strstr(oj_last_error(eng), "\"blk.0.q8\" is Q8_0"));
        oj_clear_error(eng);
        assert_null(oj_gguf_qtensor(g, eng, "v.f16"));
        assert_int_equal(oj_last_status(eng), OJ_ERR_UNSUPPORTED);
        oj_clear_error(eng);
        assert_null(oj_gguf_tensor(g, eng, "missing"));
        assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
        oj_clear_error(eng);
        oj_gguf_close(g);
    }
    for (int t = 0; t < 3; t++) oj_qtensor_free(q[t]);
    oj_release(wt);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

/* ---------------------------------------------------------------- corrupt files */

typedef struct {
    uint8_t b[4096];
    size_t n;
} buf;

static void p8(buf *x, uint8_t v) { x->b[x->n++] = v; }
static void p32(buf *x, uint32_t v) {
    memcpy(x->b + x->n, &v, 4);
    x->n += 4;
}
static void p64(buf *x, uint64_t v) {
    memcpy(x->b + x->n, &v, 8);
    x->n += 8;
}
static void pstr(buf *x, const char *s) {
    p64(x, strlen(s));
    memcpy(x->b + x->n, s, strlen(s));
    x->n += strlen(s);
}
static void ppad(buf *x, size_t a) {
    while (x->n % a) p8(x, 0);
}

/* Knobs of one hand-built file: by default valid (two KVs, two F32
 * tensors [8] and [4, 2]). */
typedef struct {
    uint32_t magic, version, kv_type, align, tensor_type, n_dims, bool_val;
    uint64_t n_tensors, dim0, offset1;
    const char *key2, *name2;
    int trailing, truncate_data;
} spec;

static spec valid(void) {
    return (spec){.magic = 0x46554747u, .version = 3, .kv_type = OJ_GGUF_UINT32, .align = 32,
                  .tensor_type = 0, .n_dims = 2, .bool_val = 1, .n_tensors = 2, .dim0 = 4,
                  .offset1 = 32, .key2 = "general.alignment", .name2 = "b"};
}

static void build(const spec *s, buf *x) {
    memset(x, 0, sizeof *x);
    p32(x, s->magic);
    p32(x, s->version);
    p64(x, s->n_tensors);
    p64(x, 3);
    pstr(x, "general.architecture");
    p32(x, OJ_GGUF_STRING);
    pstr(x, "llama");
    pstr(x, "flag");
    p32(x, OJ_GGUF_BOOL);
    p8(x, (uint8_t)s->bool_val);
    pstr(x, s->key2);
    p32(x, s->kv_type);
    if (s->kv_type == OJ_GGUF_ARRAY) {
        p32(x, OJ_GGUF_ARRAY);
        p64(x, 1);
    } else {
        p32(x, s->align);
    }
    pstr(x, "a");
    p32(x, 1);
    p64(x, 8);
    p32(x, 0);
    p64(x, 0);
    pstr(x, s->name2);
    p32(x, s->n_dims);
    p64(x, s->dim0);
    for (uint32_t d = 1; d < s->n_dims && d < 8; d++) p64(x, 2);
    p32(x, s->tensor_type);
    p64(x, s->offset1);
    ppad(x, s->align >= 1 && s->align <= 64 ? s->align : 32);
    for (int i = 0; i < 8; i++) p32(x, 0x3f800000u); /* tensor a: 8 x 1.0f */
    ppad(x, 32);
    for (int i = 0; i < 8; i++) p32(x, 0x40000000u); /* tensor b: 8 x 2.0f */
    ppad(x, 32);
    if (s->truncate_data) x->n -= 40;
    for (int i = 0; i < s->trailing; i++) p8(x, 0xee);
}

static void expect_corrupt(const spec *s, const char *needle) {
    buf x;
    build(s, &x);
    oj_gguf *g = NULL;
    oj_error err = {0};
    oj_status rc = oj_gguf_open_memory(x.b, x.n, &g, &err);
    if (rc != OJ_ERR_CORRUPT) fail_msg("expected OJ_ERR_CORRUPT (%s), got %d", needle, rc);
    assert_null(g);
    if (strstr(err.message, needle) == NULL)
        fail_msg("message \"%s\" does not name \"%s\"", err.message, needle);
}

static void test_valid_hand_built(void **state) {
    (void)state;
    spec s = valid();
    buf x;
    build(&s, &x);
    oj_gguf *g = NULL;
    oj_error err = {0};
    if (oj_gguf_open_memory(x.b, x.n, &g, &err) != OJ_OK) fail_msg("%s", err.message);
    assert_int_equal(oj_gguf_tensor_count(g), 2);
    const float *bdata = oj_gguf_tensor_data(g, 1, NULL);
    assert_true(bdata[7] == 2.0f);
    oj_gguf_close(g);
    /* every proper prefix is refused (the last tensor ends the file) */
    for (size_t n = 0; n < x.n; n++) {
        err = (oj_error){0};
        assert_int_equal(oj_gguf_open_memory(x.b, n, &g, &err), OJ_ERR_CORRUPT);
        assert_null(g);
        assert_true(err.message[0] != 0);
    }
    /* a version 2 file reads as version 3 does */
    s.version = 2;
    build(&s, &x);
    assert_int_equal(oj_gguf_open_memory(x.b, x.n, &g, NULL), OJ_OK);
    assert_int_equal(oj_gguf_version(g), 2);
    oj_gguf_close(g);
}

static void test_corruption_named(void **state) {
    (void)state;
    spec s;
    s = valid(), s.magic = 0x46554746u, expect_corrupt(&s, "magic is 0x46554746");
    s = valid(), s.version = 4, expect_corrupt(&s, "version 4 is not supported");
    s = valid(), s.version = 1, expect_corrupt(&s, "version 1 is not supported");
    s = valid(), s.n_tensors = (uint64_t)1 << 60, expect_corrupt(&s, "tensor count 1152921504606846976 cannot fit");
    s = valid(), s.key2 = "flag", expect_corrupt(&s, "metadata \"flag\": key repeated");
    s = valid(), s.key2 = "", expect_corrupt(&s, "metadata 2: key length 0");
    s = valid(), s.key2 = "bad\xff", expect_corrupt(&s, "metadata 2: key is not UTF-8");
    s = valid(), s.kv_type = 13, expect_corrupt(&s, "unknown value type 13");
    s = valid(), s.kv_type = OJ_GGUF_ARRAY, expect_corrupt(&s, "nested arrays");
    s = valid(), s.bool_val = 2, expect_corrupt(&s, "metadata \"flag\": bool value 2");
    s = valid(), s.align = 48, expect_corrupt(&s, "general.alignment\": must be a uint32 power of two");
    s = valid(), s.align = 0, expect_corrupt(&s, "general.alignment");
    s = valid(), s.kv_type = OJ_GGUF_INT32, expect_corrupt(&s, "power of two, got int32");
    s = valid(), s.name2 = "a", expect_corrupt(&s, "tensor \"a\": name repeated");
    s = valid(), s.name2 = "", expect_corrupt(&s, "tensor 1: name length 0");
    s = valid(), s.name2 = "a_name_of_sixty_four_bytes_is_one_too_long_for_ggml_0123456789ab",
    expect_corrupt(&s, "tensor 1: name length 64 is not in 1..63");
    s = valid(), s.n_dims = 5, expect_corrupt(&s, "tensor \"b\": n_dims 5");
    s = valid(), s.n_dims = 0, expect_corrupt(&s, "tensor \"b\": n_dims 0");
    s = valid(), s.dim0 = 0, expect_corrupt(&s, "tensor \"b\": dim 0 is 0");
    s = valid(), s.dim0 = (uint64_t)1 << 63, expect_corrupt(&s, "tensor \"b\": dim 0 is");
    s = valid(), s.dim0 = (uint64_t)1 << 62, expect_corrupt(&s, "element count overflows");
    s = valid(), s.tensor_type = 4, expect_corrupt(&s, "tensor \"b\": unknown ggml type 4");
    s = valid(), s.tensor_type = 99, expect_corrupt(&s, "unknown ggml type 99");
    s = valid(), s.tensor_type = OJ_GGML_Q8_0, expect_corrupt(&s, "dims[0] 4 is not a multiple of Q8_0's block of 32");
    s = valid(), s.offset1 = 0, expect_corrupt(&s, "tensor \"b\": offset 0, expected 32");
    s = valid(), s.offset1 = 64, expect_corrupt(&s, "tensor \"b\": offset 64, expected 32");
    s = valid(), s.trailing = 1, expect_corrupt(&s, "1 bytes after the data section");
    s = valid(), s.truncate_data = 1, expect_corrupt(&s, "tensor \"b\": data ends at byte");
    s = valid(), s.dim0 = 400, expect_corrupt(&s, "tensor \"b\": data ends at byte");
    s = valid(), s.align = 64, s.offset1 = 32, expect_corrupt(&s, "offset 32, expected 64");
}

static void test_open_errors(void **state) {
    (void)state;
    oj_gguf *g = (oj_gguf *)1;
    oj_error err = {0};
    char path[300];
    snprintf(path, sizeof path, "%s/none.gguf", tmpdir);
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err.message, "none.gguf"));
    err = (oj_error){0};
    assert_int_equal(oj_gguf_open(tmpdir, &g, &err), OJ_ERR_IO);
    err = (oj_error){0};
    assert_int_equal(oj_gguf_open_memory("GGUF", 4, &g, &err), OJ_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "header version at byte 4 needs 4 bytes, 0 left"));
}

static void test_writer_checks(void **state) {
    (void)state;
    oj_gguf_writer *w = oj_gguf_writer_new();
    oj_error err = {0};
    uint32_t a = 24;
    float f[32] = {0};
#define REFUSED(call, needle)                                                     \
    do {                                                                          \
        err = (oj_error){0};                                                      \
        assert_int_equal((call), OJ_ERR_INVALID_ARGUMENT);                        \
        if (strstr(err.message, needle) == NULL)                                  \
            fail_msg("message \"%s\" does not name \"%s\"", err.message, needle); \
    } while (0)
    REFUSED(oj_gguf_writer_set(w, "general.alignment", OJ_GGUF_UINT32, &a, &err),
            "general.alignment must be a uint32 power of two");
    REFUSED(oj_gguf_writer_set(w, "general.alignment", OJ_GGUF_UINT64, &a, &err),
            "general.alignment");
    REFUSED(oj_gguf_writer_set(w, "x", OJ_GGUF_STRING, &a, &err), "type string is not a scalar");
    REFUSED(oj_gguf_writer_set(w, "", OJ_GGUF_UINT32, &a, &err), "is not 1..65535 bytes");
    uint8_t two = 2;
    REFUSED(oj_gguf_writer_set(w, "b", OJ_GGUF_BOOL, &two, &err), "bool value 2");
    assert_int_equal(oj_gguf_writer_set_str(w, "k", "v", &err), OJ_OK);
    REFUSED(oj_gguf_writer_set_str(w, "k", "again", &err), "key \"k\" already set");
    REFUSED(oj_gguf_writer_set_str(w, "s", "\xc3", &err), "not UTF-8");
    REFUSED(oj_gguf_writer_add_tensor(w, "t", OJ_GGML_F32, 1, (uint64_t[]){32}, f, 64, &err),
            "64 bytes given, F32 of these dims takes 128");
    REFUSED(oj_gguf_writer_add_tensor(w, "t", OJ_GGML_Q8_0, 1, (uint64_t[]){16}, f, 64, &err),
            "dims[0] 16 is not a multiple of Q8_0's block");
    REFUSED(oj_gguf_writer_add_tensor(w, "t", 5, 1, (uint64_t[]){16}, f, 64, &err),
            "unknown ggml type 5");
    REFUSED(oj_gguf_writer_add_tensor(w, "t", OJ_GGML_F32, 5, (uint64_t[]){1, 1, 1, 1, 1}, f, 4,
                                      &err),
            "n_dims 5");
    REFUSED(oj_gguf_writer_add_tensor(w, "a_name_of_sixty_four_bytes_is_one_too_long_for_ggml_0123456789ab",
                                      OJ_GGML_F32, 1, (uint64_t[]){1}, f, 4, &err),
            "is not 1..63 bytes");
    assert_int_equal(oj_gguf_writer_add_tensor(w, "t", OJ_GGML_F32, 1, (uint64_t[]){32}, f, 128,
                                               &err),
                     OJ_OK);
    REFUSED(oj_gguf_writer_add_tensor(w, "t", OJ_GGML_F32, 1, (uint64_t[]){32}, f, 128, &err),
            "tensor \"t\" already added");
#undef REFUSED
    /* a writer that refused adds still writes what it accepted */
    char path[300];
    snprintf(path, sizeof path, "%s/w.gguf", tmpdir);
    err = (oj_error){0};
    assert_int_equal(oj_gguf_writer_write(w, path, &err), OJ_OK);
    oj_gguf_writer_free(w);
    oj_gguf *g = NULL;
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    assert_int_equal(oj_gguf_kv_count(g), 1);
    assert_int_equal(oj_gguf_tensor_count(g), 1);
    oj_gguf_close(g);
    /* a file with no tensors */
    w = oj_gguf_writer_new();
    assert_int_equal(oj_gguf_writer_write(w, path, &err), OJ_OK);
    oj_gguf_writer_free(w);
    assert_int_equal(oj_gguf_open(path, &g, &err), OJ_OK);
    assert_int_equal(oj_gguf_tensor_count(g), 0);
    oj_gguf_close(g);
}

/* A write that fails (here past RLIMIT_FSIZE, as a full disk would) is
 * OJ_ERR_IO naming the file and the system's reason, and leaves neither
 * the file nor its temporary behind. */
static void test_write_failure_named(void **state) {
    (void)state;
    enum { N = 16384 }; /* 64 KB of F32, past the 8 KB limit in one fwrite */
    float *f = calloc(N, sizeof *f);
    oj_gguf_writer *w = oj_gguf_writer_new();
    oj_error err = {0};
    assert_int_equal(oj_gguf_writer_add_tensor(w, "t", OJ_GGML_F32, 1, (uint64_t[]){N}, f,
                                               N * sizeof *f, &err),
                     OJ_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/big.gguf", tmpdir);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 8192;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    oj_status st = oj_gguf_writer_write(w, path, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, OJ_ERR_IO);
    if (!strstr(err.message, "big.gguf") || !strstr(err.message, strerror(EFBIG)))
        fail_msg("message \"%s\" does not name the file and \"%s\"", err.message,
                 strerror(EFBIG));
    assert_int_equal(access(path, F_OK), -1);
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (strstr(de->d_name, "big.gguf"))
            fail_msg("%s left behind", de->d_name);
    closedir(d);
    oj_gguf_writer_free(w);
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_valid_hand_built),
        cmocka_unit_test(test_corruption_named),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_writer_checks),
        cmocka_unit_test(test_write_failure_named),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
