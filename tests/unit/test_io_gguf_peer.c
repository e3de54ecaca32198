// test: npm @huggingface/gguf (tests/peer/gguf_peer.mjs) reads GGUF files
// written by ojas and lists the same metadata (keys, value types, element
// types, values) and tensor infos (names, dims, ggml types, offsets, data
// section offset) as ojas's reader, for alignment 32 and 64.
//
// Needs node and third_party/npm/node_modules/@huggingface/gguf
// (scripts/deps.sh); exits 77 (skipped) with a message when one is missing.
#include <math.h>
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
#include "io/gguf_internal.h"
#include "ojas/gguf.h"
#include "ojas/quant.h"

#define PEER_SCRIPT OJAS_SOURCE_DIR "/tests/peer/gguf_peer.mjs"
#define NPM_PKG OJAS_SOURCE_DIR "/third_party/npm/node_modules/@huggingface/gguf/package.json"

static char tmpdir[256];

/* A file with every metadata type and the tensor types ojas writes. */
static void write_file(const char *path, uint32_t align, oj_engine *eng) {
    oj_gguf_writer *w = oj_gguf_writer_new();
    oj_error err = {0};
    uint8_t u8 = 250, bl = 0;
    int8_t i8 = -128;
    uint16_t u16 = 65535;
    int16_t i16 = -32768;
    uint32_t u32 = 4294967295u, ctx = 1024;
    int32_t i32 = -2147483647 - 1;
    float f32 = 0.1f;
    uint64_t u64 = 18446744073709551615ull;
    int64_t i64 = -9223372036854775807ll - 1;
    double f64 = 1e-300;
    assert_int_equal(oj_gguf_writer_set_str(w, "general.architecture", "gpt2", &err), 0);
    assert_int_equal(oj_gguf_writer_set_str(w, "general.name", "ojas \xe2\x9c\x93 test", &err), 0);
    if (align != 32)
        assert_int_equal(oj_gguf_writer_set(w, "general.alignment", OJ_GGUF_UINT32, &align, &err),
                         0);
    assert_int_equal(oj_gguf_writer_set(w, "gpt2.context_length", OJ_GGUF_UINT32, &ctx, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.u8", OJ_GGUF_UINT8, &u8, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.i8", OJ_GGUF_INT8, &i8, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.u16", OJ_GGUF_UINT16, &u16, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.i16", OJ_GGUF_INT16, &i16, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.u32", OJ_GGUF_UINT32, &u32, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.i32", OJ_GGUF_INT32, &i32, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.f32", OJ_GGUF_FLOAT32, &f32, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.bool", OJ_GGUF_BOOL, &bl, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.u64", OJ_GGUF_UINT64, &u64, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.i64", OJ_GGUF_INT64, &i64, &err), 0);
    assert_int_equal(oj_gguf_writer_set(w, "t.f64", OJ_GGUF_FLOAT64, &f64, &err), 0);
    const char *toks[4] = {"!", "\xc4\xa0the", "", "<|endoftext|>"};
    assert_int_equal(oj_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", 4, toks, &err), 0);
    int32_t types[4] = {1, 1, 3, 3};
    assert_int_equal(oj_gguf_writer_set_array(w, "tokenizer.ggml.token_type", OJ_GGUF_INT32, 4,
                                              types, &err), 0);
    float scores[3] = {-1.5f, 0.0f, 2.25f};
    assert_int_equal(oj_gguf_writer_set_array(w, "t.scores", OJ_GGUF_FLOAT32, 3, scores, &err), 0);
    uint8_t bools[2] = {1, 0};
    assert_int_equal(oj_gguf_writer_set_array(w, "t.bools", OJ_GGUF_BOOL, 2, bools, &err), 0);
    uint64_t big[2] = {0, UINT64_MAX};
    assert_int_equal(oj_gguf_writer_set_array(w, "t.u64s", OJ_GGUF_UINT64, 2, big, &err), 0);

    static float wf[4 * 64], v[7];
    static uint16_t h[7];
    for (int i = 0; i < 4 * 64; i++) wf[i] = sinf((float)i);
    for (int i = 0; i < 7; i++) v[i] = (float)i, h[i] = oj_f32_to_f16((float)i);
    oj_tensor *wt = oj_from_host(eng, 2, (int64_t[]){4, 64}, OJ_F32, wf, sizeof wf);
    oj_qtensor *q[3];
    const char *qn[3] = {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};
    assert_int_equal(oj_gguf_writer_add_tensor(w, "token_embd.weight", OJ_GGML_F32, 2,
                                               (uint64_t[]){64, 4}, wf, sizeof wf, &err), 0);
    assert_int_equal(oj_gguf_writer_add_tensor(w, "output_norm.weight", OJ_GGML_F16, 1,
                                               (uint64_t[]){7}, h, sizeof h, &err), 0);
    assert_int_equal(oj_gguf_writer_add_tensor(w, "output_norm.bias", OJ_GGML_BF16, 1,
                                               (uint64_t[]){7}, h, sizeof h, &err), 0);
    for (int t = 0; t < 3; t++) {
        q[t] = oj_quantize(wt, (oj_qtype)t);
        assert_int_equal(oj_gguf_writer_add_qtensor(w, qn[t], q[t], &err), 0);
    }
    assert_int_equal(oj_gguf_writer_add_tensor(w, "r3", OJ_GGML_F32, 3, (uint64_t[]){7, 1, 1}, v,
                                               sizeof v, &err), 0);
    if (oj_gguf_writer_write(w, path, &err) != OJ_OK) fail_msg("%s", err.message);
    oj_gguf_writer_free(w);
    for (int t = 0; t < 3; t++) oj_qtensor_free(q[t]);
    oj_release(wt);
}

/* node's JSON number or decimal string as int64 / uint64 text. */
static void int_text(json_t *v, char *buf, size_t len) {
    if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_true(v) || json_is_false(v)) snprintf(buf, len, "%d", json_is_true(v));
    else snprintf(buf, len, "?");
}

/* Element j of an array or a scalar value (raw bytes at p) as text. */
static void scalar_text(oj_gguf_type t, const uint8_t *p, char *buf, size_t len) {
    int64_t s = 0;
    uint64_t u = 0;
    switch (t) {
    case OJ_GGUF_UINT8: case OJ_GGUF_BOOL: u = p[0]; break;
    case OJ_GGUF_INT8: s = (int8_t)p[0]; break;
    case OJ_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); u = x; break; }
    case OJ_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); s = x; break; }
    case OJ_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); u = x; break; }
    case OJ_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); s = x; break; }
    case OJ_GGUF_UINT64: memcpy(&u, p, 8); break;
    case OJ_GGUF_INT64: memcpy(&s, p, 8); break;
    default: break;
    }
    bool is_unsigned = t == OJ_GGUF_UINT8 || t == OJ_GGUF_BOOL || t == OJ_GGUF_UINT16 ||
                       t == OJ_GGUF_UINT32 || t == OJ_GGUF_UINT64;
    if (is_unsigned) snprintf(buf, len, "%llu", (unsigned long long)u);
    else snprintf(buf, len, "%lld", (long long)s);
}

static double float_of(oj_gguf_type t, const uint8_t *p) {
    if (t == OJ_GGUF_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    double d;
    memcpy(&d, p, 8);
    return d;
}

static void check_value(const char *key, oj_gguf_type t, const uint8_t *p, json_t *v) {
    if (t == OJ_GGUF_FLOAT32 || t == OJ_GGUF_FLOAT64) {
        if (!json_is_number(v) || json_number_value(v) != float_of(t, p))
            fail_msg("%s: peer reads %g, ojas %.17g", key, json_number_value(v), float_of(t, p));
        return;
    }
    char a[32], b[32];
    scalar_text(t, p, a, sizeof a);
    int_text(v, b, sizeof b);
    if (strcmp(a, b) != 0) fail_msg("%s: peer reads %s, ojas %s", key, b, a);
}

static void compare(const char *path) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "node '%s' '%s'", PEER_SCRIPT, path);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    assert_int_equal(pclose(f), 0);
    if (root == NULL) fail_msg("peer output is not JSON: %s", je.text);

    oj_gguf *g = NULL;
    oj_error err = {0};
    if (oj_gguf_open(path, &g, &err) != OJ_OK) fail_msg("%s", err.message);
    assert_int_equal(json_integer_value(json_object_get(root, "version")), 3);
    char buf[64];
    int_text(json_object_get(root, "kvCount"), buf, sizeof buf);
    assert_int_equal(strtoll(buf, NULL, 10), oj_gguf_kv_count(g));
    int_text(json_object_get(root, "tensorDataOffset"), buf, sizeof buf);
    assert_int_equal(strtoll(buf, NULL, 10), g->data - g->map->base);

    json_t *md = json_object_get(root, "metadata");
    assert_int_equal(json_object_size(md), oj_gguf_kv_count(g));
    for (int64_t i = 0; i < oj_gguf_kv_count(g); i++) {
        const char *key = oj_gguf_kv_key(g, i);
        json_t *e = json_object_get(md, key);
        if (e == NULL) fail_msg("peer lists no key %s", key);
        oj_gguf_type t = oj_gguf_kv_type(g, i);
        assert_int_equal(json_integer_value(json_object_get(e, "type")), t);
        json_t *v = json_object_get(e, "value");
        if (t == OJ_GGUF_STRING) {
            assert_string_equal(json_string_value(v), oj_gguf_kv_str(g, i, NULL));
        } else if (t == OJ_GGUF_ARRAY) {
            oj_gguf_type at = oj_gguf_kv_array_type(g, i);
            assert_int_equal(json_integer_value(json_object_get(e, "subType")), at);
            int64_t n = oj_gguf_kv_array_len(g, i);
            assert_int_equal(json_array_size(v), n);
            const uint8_t *raw = oj_gguf_kv_array_data(g, i);
            for (int64_t j = 0; j < n; j++) {
                json_t *ev = json_array_get(v, (size_t)j);
                if (at == OJ_GGUF_STRING)
                    assert_string_equal(json_string_value(ev), oj_gguf_kv_array_str(g, i, j, NULL));
                else
                    check_value(key, at, raw + j * (int64_t)oj_gguf_type_size(at), ev);
            }
        } else {
            check_value(key, t, oj__gguf_kv_raw(g, i), v);
        }
    }
    json_t *ts = json_object_get(root, "tensors");
    assert_int_equal(json_array_size(ts), oj_gguf_tensor_count(g));
    for (int64_t i = 0; i < oj_gguf_tensor_count(g); i++) {
        json_t *t = json_array_get(ts, (size_t)i);
        assert_string_equal(json_string_value(json_object_get(t, "name")), oj_gguf_tensor_name(g, i));
        assert_int_equal(json_integer_value(json_object_get(t, "dtype")), oj_gguf_tensor_type(g, i));
        assert_int_equal(json_integer_value(json_object_get(t, "n_dims")), oj_gguf_tensor_ndims(g, i));
        json_t *shape = json_object_get(t, "shape");
        assert_int_equal(json_array_size(shape), oj_gguf_tensor_ndims(g, i));
        for (int d = 0; d < oj_gguf_tensor_ndims(g, i); d++) {
            int_text(json_array_get(shape, (size_t)d), buf, sizeof buf);
            assert_int_equal(strtoull(buf, NULL, 10), oj_gguf_tensor_dims(g, i)[d]);
        }
        int_text(json_object_get(t, "offset"), buf, sizeof buf);
        assert_int_equal(strtoull(buf, NULL, 10), oj_gguf_tensor_offset(g, i));
    }
    oj_gguf_close(g);
    json_decref(root);
}

static void test_peer_reads_ojas_files(void **state) {
    (void)state;
    oj_engine *eng = NULL;
    assert_int_equal(oj_engine_create(NULL, &eng, NULL), OJ_OK);
    for (uint32_t align = 32; align <= 64; align *= 2) {
        char path[300];
        snprintf(path, sizeof path, "%s/peer%u.gguf", tmpdir, align);
        write_file(path, align, eng);
        compare(path);
    }
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static bool have(const char *cmd) { return system(cmd) == 0; }

int main(void) {
    if (!have("node --version >/dev/null 2>&1") || !have("test -f '" NPM_PKG "'")) {
        printf("SKIP: needs node and @huggingface/gguf in third_party/npm (run scripts/deps.sh)\n");
        return 77;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ojas-test-gguf-peer-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_peer_reads_ojas_files)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    oj__rmtree(tmpdir, NULL);
    return rc;
}
