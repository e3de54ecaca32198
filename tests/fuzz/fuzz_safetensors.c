/* Fuzz target: the safetensors reader over arbitrary bytes.
 * Checks, beyond "no crash, no sanitizer report":
 *  - a refusal is OJ_ERR_CORRUPT (or OJ_ERR_CAPACITY) with a message;
 *  - an accepted file's accessors agree with each other and every byte
 *    of every tensor lies inside the input;
 *  - an accepted file written back by the ojas writer reads back with the
 *    same names, dtypes, shapes, bytes and metadata;
 *  - tensors of an accepted file load into a CPU engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/io_internal.h"
#include "ojas/io.h"

#define CHECK(c)                                                          \
    do {                                                                  \
        if (!(c)) {                                                       \
            fprintf(stderr, "fuzz_safetensors: check failed: %s\n", #c); \
            abort();                                                      \
        }                                                                 \
    } while (0)

static oj_engine *engine(void) {
    static oj_engine *eng;
    if (!eng) {
        oj_engine_config c = oj_engine_config_default();
        c.threads = 1;
        c.budget_bytes = 64 << 20;
        CHECK(oj_engine_create(&c, &eng, NULL) == OJ_OK);
    }
    return eng;
}

static bool writable(const oj_safetensors *st) {
    for (int64_t i = 0; i < oj_safetensors_count(st); i++) {
        if (oj_safetensors_dtype(st, i) == OJ_DTYPE_COUNT) return false;
        if (oj_safetensors_rank(st, i) > OJ_MAX_RANK) return false;
        if (!oj_safetensors_name(st, i)[0]) return false; /* the writer refuses "" */
    }
    return oj_safetensors_count(st) <= 256;
}

/* Write st back through the ojas writer (to a memfd) and compare. */
static void roundtrip(const oj_safetensors *st) {
    int64_t n = oj_safetensors_count(st), nm = oj_safetensors_metadata_count(st);
    oj_safetensors_entry *e = calloc((size_t)n + 1, sizeof *e);
    const char **meta = calloc(2 * (size_t)nm + 1, sizeof *meta);
    CHECK(e && meta);
    for (int64_t i = 0; i < n; i++) {
        e[i].name = oj_safetensors_name(st, i);
        e[i].dtype = oj_safetensors_dtype(st, i);
        e[i].rank = oj_safetensors_rank(st, i);
        e[i].shape = oj_safetensors_shape(st, i);
        e[i].data = oj_safetensors_data(st, i, NULL);
    }
    for (int64_t i = 0; i < nm; i++) {
        meta[2 * i] = oj_safetensors_metadata_key(st, i);
        meta[2 * i + 1] = oj_safetensors_metadata_value(st, i);
    }
    int fd = memfd_create("fuzz", 0);
    CHECK(fd >= 0);
    oj_error err = {0};
    oj_status rc = oj__st_write_fd(fd, "memfd", n, e, NULL, NULL, meta, NULL, &err);
    if (rc != OJ_OK) {
        /* the only inputs the writer may refuse: shapes whose element
         * count overflows int64 although the byte count is 0 */
        CHECK(rc == OJ_ERR_INVALID_ARGUMENT && strstr(err.message, "shape"));
        goto out;
    }
    off_t len = lseek(fd, 0, SEEK_END);
    CHECK(len >= 8);
    uint8_t *buf = malloc((size_t)len);
    CHECK(buf && pread(fd, buf, (size_t)len, 0) == len);
    oj_safetensors *back = NULL;
    rc = oj_safetensors_open_memory(buf, (size_t)len, &back, &err);
    if (rc != OJ_OK) fprintf(stderr, "re-read failed: %s\n", err.message);
    CHECK(rc == OJ_OK);
    CHECK(oj_safetensors_count(back) == n && oj_safetensors_metadata_count(back) == nm);
    for (int64_t i = 0; i < n; i++) {
        CHECK(strcmp(oj_safetensors_name(back, i), e[i].name) == 0);
        CHECK(oj_safetensors_dtype(back, i) == e[i].dtype);
        CHECK(oj_safetensors_rank(back, i) == e[i].rank);
        for (int d = 0; d < e[i].rank; d++) CHECK(oj_safetensors_shape(back, i)[d] == e[i].shape[d]);
        size_t a, b;
        const void *pa = oj_safetensors_data(st, i, &a), *pb = oj_safetensors_data(back, i, &b);
        CHECK(a == b && (a == 0 || memcmp(pa, pb, a) == 0));
        /* the writer's layout: aligned to the element size */
        CHECK(((const uint8_t *)pb - buf) % oj_dtype_size(e[i].dtype) == 0);
    }
    for (int64_t i = 0; i < nm; i++) {
        CHECK(strcmp(oj_safetensors_metadata_key(back, i), meta[2 * i]) == 0);
        CHECK(strcmp(oj_safetensors_metadata_value(back, i), meta[2 * i + 1]) == 0);
    }
    oj_safetensors_close(back);
    free(buf);
out:
    close(fd);
    free(meta);
    free(e);
}

static void load_tensors(oj_safetensors *st) {
    oj_engine *eng = engine();
    for (int64_t i = 0; i < oj_safetensors_count(st) && i < 64; i++) {
        size_t nb;
        oj_safetensors_data(st, i, &nb);
        if (nb > (1 << 20)) continue;
        oj_tensor *t = oj_safetensors_tensor(st, eng, oj_safetensors_name(st, i));
        if (oj_safetensors_dtype(st, i) == OJ_DTYPE_COUNT || oj_safetensors_rank(st, i) > OJ_MAX_RANK) {
            CHECK(t == NULL && oj_last_status(eng) == OJ_ERR_UNSUPPORTED);
        } else if (t) {
            CHECK(oj_tensor_dtype(t) == oj_safetensors_dtype(st, i));
            CHECK(oj_rank(t) == oj_safetensors_rank(st, i));
            CHECK((size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t)) == nb);
            if (nb) CHECK(memcmp(oj_data_ptr(t), oj_safetensors_data(st, i, NULL), nb) == 0);
        } else {
            /* only a shape whose element count overflows int64 */
            CHECK(oj_last_status(eng) == OJ_ERR_OUT_OF_RANGE);
        }
        oj_release(t);
        oj_clear_error(eng);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oj__mapping *m;
    CHECK(oj__map_memory(data, size, false, &m, NULL) == OJ_OK);
    oj_safetensors *st = NULL;
    oj_error err = {0};
    oj_status rc = oj__st_parse(m, "fuzz", &st, &err);
    oj__map_release(m);
    if (rc != OJ_OK) {
        CHECK(st == NULL && err.status == rc && err.message[0]);
        CHECK(rc == OJ_ERR_CORRUPT || rc == OJ_ERR_CAPACITY);
        return 0;
    }
    CHECK(err.status == OJ_OK);
    int64_t n = oj_safetensors_count(st);
    uint64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *name = oj_safetensors_name(st, i);
        CHECK(name && oj_safetensors_find(st, name) == i);
        CHECK(oj__utf8_valid((const uint8_t *)name, strlen(name), NULL));
        if (i) CHECK(strcmp(oj_safetensors_name(st, i - 1), name) < 0);
        CHECK(oj_safetensors_dtype_str(st, i) != NULL);
        const int64_t *shape = oj_safetensors_shape(st, i);
        for (int d = 0; d < oj_safetensors_rank(st, i); d++) CHECK(shape[d] >= 0);
        size_t nb;
        const uint8_t *p = oj_safetensors_data(st, i, &nb);
        CHECK(p >= data + 8 && p + nb <= data + size);
        for (size_t k = 0; k < nb; k++) sum += p[k]; /* ASan checks each byte */
    }
    for (int64_t i = 0; i < oj_safetensors_metadata_count(st); i++) {
        const char *k = oj_safetensors_metadata_key(st, i);
        CHECK(oj_safetensors_metadata_get(st, k) == oj_safetensors_metadata_value(st, i));
    }
    (void)sum;
    if (writable(st)) roundtrip(st);
    load_tensors(st);
    oj_safetensors_close(st);
    return 0;
}
