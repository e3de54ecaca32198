/* Fuzz target: the GGUF reader over arbitrary bytes.
 * Checks, beyond "no crash, no sanitizer report":
 *  - a refusal is OJ_ERR_CORRUPT (or OJ_ERR_CAPACITY) with a message;
 *  - an accepted file's accessors agree with each other, every tensor lies
 *    inside the input at an offset that is a multiple of the alignment,
 *    and its byte count is what its type and dims take;
 *  - an accepted file written back by the ojas writer reads back with the
 *    same metadata (keys, types, values) and tensors (names, types, dims,
 *    bytes);
 *  - small F32/F16/BF16 tensors load into a CPU engine with their bytes,
 *    Q8_0/Q4_0/Q4_1/Q4_K ones as quantized matrices with their blocks;
 *  - tokenizer.ggml.* metadata builds a tokenizer or is refused with a
 *    message (oj_gguf_tokenizer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/gguf_internal.h"
#include "ojas/gguf.h"
#include "ojas/gpt.h"
#include "ojas/quant.h"

static oj_engine *engine(void) {
    static oj_engine *eng;
    if (!eng) {
        oj_engine_config c = oj_engine_config_default();
        c.threads = 1;
        c.budget_bytes = 64 << 20;
        FZ_CHECK(oj_engine_create(&c, &eng, NULL) == OJ_OK);
    }
    return eng;
}

/* Copy kv i of g into w (same key, type, value). */
static void copy_kv(const oj_gguf *g, int64_t i, oj_gguf_writer *w) {
    const char *key = oj_gguf_kv_key(g, i);
    oj_gguf_type t = oj_gguf_kv_type(g, i);
    oj_error err = {0};
    oj_status rc;
    if (t == OJ_GGUF_STRING) {
        size_t n;
        const char *s = oj_gguf_kv_str(g, i, &n);
        /* the writer takes NUL-terminated UTF-8 only */
        if (strlen(s) != n || !oj__utf8_valid((const uint8_t *)s, n, NULL)) return;
        rc = oj_gguf_writer_set_str(w, key, s, &err);
    } else if (t == OJ_GGUF_ARRAY) {
        oj_gguf_type at = oj_gguf_kv_array_type(g, i);
        int64_t n = oj_gguf_kv_array_len(g, i);
        if (at == OJ_GGUF_STRING) {
            const char **v = calloc((size_t)n + 1, sizeof *v);
            FZ_CHECK(v);
            for (int64_t j = 0; j < n; j++) {
                size_t l;
                v[j] = oj_gguf_kv_array_str(g, i, j, &l);
                FZ_CHECK(v[j]);
                if (strlen(v[j]) != l || !oj__utf8_valid((const uint8_t *)v[j], l, NULL)) {
                    free(v);
                    return;
                }
            }
            rc = oj_gguf_writer_set_str_array(w, key, n, v, &err);
            free(v);
        } else {
            rc = oj_gguf_writer_set_array(w, key, at, n, oj_gguf_kv_array_data(g, i), &err);
        }
    } else {
        rc = oj_gguf_writer_set(w, key, t, oj__gguf_kv_raw(g, i), &err);
    }
    if (rc != OJ_OK) fprintf(stderr, "fuzz_gguf: writer refused kv: %s\n", err.message);
    FZ_CHECK(rc == OJ_OK);
}

static bool kv_equal(const oj_gguf *a, int64_t i, const oj_gguf *b, int64_t j) {
    if (strcmp(oj_gguf_kv_key(a, i), oj_gguf_kv_key(b, j)) != 0) return false;
    oj_gguf_type t = oj_gguf_kv_type(a, i);
    if (t != oj_gguf_kv_type(b, j)) return false;
    if (t == OJ_GGUF_STRING) {
        size_t la, lb;
        const char *sa = oj_gguf_kv_str(a, i, &la), *sb = oj_gguf_kv_str(b, j, &lb);
        return la == lb && memcmp(sa, sb, la) == 0;
    }
    if (t != OJ_GGUF_ARRAY)
        return memcmp(oj__gguf_kv_raw(a, i), oj__gguf_kv_raw(b, j), oj_gguf_type_size(t)) == 0;
    oj_gguf_type at = oj_gguf_kv_array_type(a, i);
    int64_t n = oj_gguf_kv_array_len(a, i);
    if (at != oj_gguf_kv_array_type(b, j) || n != oj_gguf_kv_array_len(b, j)) return false;
    if (at != OJ_GGUF_STRING)
        return n == 0 || memcmp(oj_gguf_kv_array_data(a, i), oj_gguf_kv_array_data(b, j),
                                (size_t)n * oj_gguf_type_size(at)) == 0;
    for (int64_t k = 0; k < n; k++) {
        size_t la, lb;
        const char *sa = oj_gguf_kv_array_str(a, i, k, &la), *sb = oj_gguf_kv_array_str(b, j, k, &lb);
        if (la != lb || memcmp(sa, sb, la) != 0) return false;
    }
    return true;
}

static void roundtrip(const oj_gguf *g) {
    oj_gguf_writer *w = oj_gguf_writer_new();
    FZ_CHECK(w);
    for (int64_t i = 0; i < oj_gguf_kv_count(g); i++) copy_kv(g, i, w);
    for (int64_t i = 0; i < oj_gguf_tensor_count(g); i++) {
        size_t nb;
        const void *d = oj_gguf_tensor_data(g, i, &nb);
        oj_error err = {0};
        oj_status rc = oj_gguf_writer_add_tensor(w, oj_gguf_tensor_name(g, i),
                                                 oj_gguf_tensor_type(g, i), oj_gguf_tensor_ndims(g, i),
                                                 oj_gguf_tensor_dims(g, i), d, nb, &err);
        if (rc != OJ_OK) fprintf(stderr, "fuzz_gguf: writer refused tensor: %s\n", err.message);
        FZ_CHECK(rc == OJ_OK);
    }
    char path[512];
    fz_path(path, sizeof path, "rt.gguf");
    oj_error err = {0};
    FZ_CHECK(oj_gguf_writer_write(w, path, &err) == OJ_OK);
    oj_gguf_writer_free(w);
    oj_gguf *b = NULL;
    oj_status rc = oj_gguf_open(path, &b, &err);
    if (rc != OJ_OK) fprintf(stderr, "fuzz_gguf: re-read failed: %s\n", err.message);
    FZ_CHECK(rc == OJ_OK);
    FZ_CHECK(oj_gguf_alignment(b) == oj_gguf_alignment(g));
    FZ_CHECK(oj_gguf_tensor_count(b) == oj_gguf_tensor_count(g));
    /* keys the writer could not take (strings with NUL or invalid UTF-8)
     * are skipped; every other key comes back equal */
    for (int64_t j = 0; j < oj_gguf_kv_count(b); j++) {
        int64_t i = oj_gguf_find_key(g, oj_gguf_kv_key(b, j));
        FZ_CHECK(i >= 0 && kv_equal(g, i, b, j));
    }
    for (int64_t i = 0; i < oj_gguf_tensor_count(g); i++) {
        FZ_CHECK(strcmp(oj_gguf_tensor_name(g, i), oj_gguf_tensor_name(b, i)) == 0);
        FZ_CHECK(oj_gguf_tensor_type(g, i) == oj_gguf_tensor_type(b, i));
        FZ_CHECK(oj_gguf_tensor_ndims(g, i) == oj_gguf_tensor_ndims(b, i));
        FZ_CHECK(memcmp(oj_gguf_tensor_dims(g, i), oj_gguf_tensor_dims(b, i),
                        8 * (size_t)oj_gguf_tensor_ndims(g, i)) == 0);
        size_t na, nb;
        const void *da = oj_gguf_tensor_data(g, i, &na), *db = oj_gguf_tensor_data(b, i, &nb);
        FZ_CHECK(na == nb && memcmp(da, db, na) == 0);
    }
    oj_gguf_close(b);
}

static void load(const oj_gguf *g) {
    oj_engine *eng = engine();
    for (int64_t i = 0; i < oj_gguf_tensor_count(g) && i < 16; i++) {
        size_t nb;
        const void *d = oj_gguf_tensor_data(g, i, &nb);
        if (nb > (1 << 16)) continue;
        uint32_t t = oj_gguf_tensor_type(g, i);
        const char *name = oj_gguf_tensor_name(g, i);
        if (t == OJ_GGML_F32 || t == OJ_GGML_F16 || t == OJ_GGML_BF16) {
            oj_tensor *x = oj_gguf_tensor(g, eng, name);
            /* a tensor of the same name earlier in the file cannot exist */
            FZ_CHECK(x && (size_t)oj_numel(x) * oj_dtype_size(oj_tensor_dtype(x)) == nb);
            FZ_CHECK(memcmp(oj_data_ptr(x), d, nb) == 0);
            oj_release(x);
        } else if (oj_qtype_from_ggml(t, NULL) && oj_gguf_tensor_ndims(g, i) <= 2) {
            oj_qtensor *q = oj_gguf_qtensor(g, eng, name);
            FZ_CHECK(q && oj_qtensor_nbytes(q) == nb && memcmp(oj_qtensor_data(q), d, nb) == 0);
            oj_tensor *deq = oj_dequantize(q);
            FZ_CHECK(deq);
            oj_release(deq);
            oj_qtensor_free(q);
        } else {
            FZ_CHECK(oj_gguf_tensor(g, eng, name) == NULL &&
                     oj_last_status(eng) == OJ_ERR_UNSUPPORTED);
        }
        oj_clear_error(eng);
    }
}

static void tokenizer(const oj_gguf *g) {
    oj_tokenizer *tok = NULL;
    oj_error err = {0};
    oj_status rc = oj_gguf_tokenizer(g, "fuzz", &tok, &err);
    if (rc == OJ_OK) {
        FZ_CHECK(tok != NULL);
        oj_tokenizer_free(tok);
    } else {
        FZ_CHECK(tok == NULL && err.status == rc && err.message[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oj__mapping *m;
    FZ_CHECK(oj__map_memory(data, size, false, &m, NULL) == OJ_OK);
    oj_gguf *g = NULL;
    oj_error err = {0};
    oj_status rc = oj__gguf_parse(m, "fuzz", &g, &err);
    oj__map_release(m);
    if (rc != OJ_OK) {
        FZ_CHECK(g == NULL && err.status == rc && err.message[0]);
        FZ_CHECK(rc == OJ_ERR_CORRUPT || rc == OJ_ERR_CAPACITY);
        return 0;
    }
    uint32_t a = oj_gguf_alignment(g);
    FZ_CHECK(a && (a & (a - 1)) == 0);
    for (int64_t i = 0; i < oj_gguf_kv_count(g); i++) {
        const char *k = oj_gguf_kv_key(g, i);
        FZ_CHECK(k && oj_gguf_find_key(g, k) == i);
        FZ_CHECK(oj_gguf_kv_type(g, i) < OJ_GGUF_TYPE_COUNT);
    }
    uint64_t sum = 0;
    for (int64_t i = 0; i < oj_gguf_tensor_count(g); i++) {
        const char *name = oj_gguf_tensor_name(g, i);
        FZ_CHECK(name && oj_gguf_find_tensor(g, name) == i);
        FZ_CHECK(oj_gguf_tensor_offset(g, i) % a == 0);
        uint64_t want;
        FZ_CHECK(oj__ggml_nbytes(oj_gguf_tensor_type(g, i), oj_gguf_tensor_ndims(g, i),
                                 oj_gguf_tensor_dims(g, i), &want));
        size_t nb;
        const uint8_t *p = oj_gguf_tensor_data(g, i, &nb);
        FZ_CHECK(nb == want && p >= data && p + nb <= data + size);
        FZ_CHECK((size_t)(p - data) % a == 0);
        for (size_t k = 0; k < nb; k++) sum += p[k]; /* ASan checks each byte */
    }
    (void)sum;
    if (size < (1 << 20)) roundtrip(g);
    load(g);
    tokenizer(g);
    oj_gguf_close(g);
    return 0;
}
