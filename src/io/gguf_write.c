/* The GGUF writer (include/ojas/gguf.h): metadata values are encoded when
 * added, tensors borrowed, and the file streamed out through an atomic
 * replacement. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer copies values as they are in memory: little-endian hosts only"
#endif

typedef struct {
    char *key;
    oj_gguf_type type;
    uint8_t *val; /* the encoded value, as in the file */
    size_t val_len;
} wkv;

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    uint64_t dims[OJ__GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} wtensor;

struct oj_gguf_writer {
    wkv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
    uint32_t alignment;
};

oj_gguf_writer *oj_gguf_writer_new(void) {
    oj_gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = OJ__GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void oj_gguf_writer_free(oj_gguf_writer *w) {
    if (w == NULL) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static bool key_ok(oj_gguf_writer *w, const char *key, oj_error *err) {
    if (w == NULL || key == NULL) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_writer: NULL writer or key");
        return false;
    }
    size_t n = strlen(key);
    if (n == 0 || n > OJ__GGUF_MAX_KEY || !oj__utf8_valid((const uint8_t *)key, n, NULL)) {
        oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                     "gguf_writer: key \"%.60s\" is not 1..%d bytes of UTF-8", key,
                     OJ__GGUF_MAX_KEY);
        return false;
    }
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_writer: key \"%.60s\" already set",
                         key);
            return false;
        }
    return true;
}

/* Append key with an encoded value (val is taken over, freed on failure). */
static oj_status push_kv(oj_gguf_writer *w, const char *key, oj_gguf_type t, uint8_t *val,
                         size_t len, oj_error *err) {
    if (val == NULL && len) goto oom;
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, sizeof *kv * (size_t)cap);
        if (kv == NULL) goto oom;
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (k == NULL) goto oom;
    w->kv[w->n_kv++] = (wkv){k, t, val, len};
    return OJ_OK;
oom:
    free(val);
    return oj_error_set(err, OJ_ERR_CAPACITY, "gguf_writer: out of host memory");
}

static bool scalar_type_ok(oj_gguf_type t, const char *key, oj_error *err) {
    if ((unsigned)t < OJ_GGUF_TYPE_COUNT && t != OJ_GGUF_STRING && t != OJ_GGUF_ARRAY)
        return true;
    oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                 "gguf_writer: key \"%.60s\": type %s is not a scalar type", key,
                 oj_gguf_type_name(t));
    return false;
}

static bool alignment_rule(oj_gguf_type t, const char *key, const void *value, oj_error *err) {
    if (strcmp(key, "general.alignment") != 0) return true;
    uint32_t a = 0;
    if (t == OJ_GGUF_UINT32 && value) memcpy(&a, value, 4);
    if (a != 0 && (a & (a - 1)) == 0) return true;
    oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                 "gguf_writer: general.alignment must be a uint32 power of two");
    return false;
}

static bool bools_ok(oj_gguf_type t, const void *v, int64_t n, const char *key, oj_error *err) {
    if (t != OJ_GGUF_BOOL) return true;
    for (int64_t i = 0; i < n; i++)
        if (((const uint8_t *)v)[i] > 1) {
            oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                         "gguf_writer: key \"%.60s\": bool value %u is neither 0 nor 1", key,
                         ((const uint8_t *)v)[i]);
            return false;
        }
    return true;
}

bool oj_gguf_writer_has(const oj_gguf_writer *w, const char *key) {
    if (w == NULL || key == NULL) return false;
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return true;
    return false;
}

oj_status oj_gguf_writer_set(oj_gguf_writer *w, const char *key, oj_gguf_type t,
                             const void *value, oj_error *err) {
    if (!key_ok(w, key, err) || !scalar_type_ok(t, key, err) ||
        !alignment_rule(t, key, value, err))
        return OJ_ERR_INVALID_ARGUMENT;
    if (value == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_writer: key \"%.60s\": NULL value",
                            key);
    if (!bools_ok(t, value, 1, key, err)) return OJ_ERR_INVALID_ARGUMENT;
    size_t n = oj_gguf_type_size(t);
    uint8_t *v = malloc(n);
    if (v) memcpy(v, value, n);
    oj_status rc = push_kv(w, key, t, v, n, err);
    if (rc == OJ_OK && strcmp(key, "general.alignment") == 0) memcpy(&w->alignment, value, 4);
    return rc;
}

static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static bool str_ok(const char *s, const char *key, oj_error *err) {
    if (s != NULL && oj__utf8_valid((const uint8_t *)s, strlen(s), NULL)) return true;
    oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                 "gguf_writer: key \"%.60s\": string value is NULL or not UTF-8", key);
    return false;
}

oj_status oj_gguf_writer_set_str(oj_gguf_writer *w, const char *key, const char *value,
                                 oj_error *err) {
    if (!key_ok(w, key, err) || !str_ok(value, key, err) ||
        !alignment_rule(OJ_GGUF_STRING, key, NULL, err))
        return OJ_ERR_INVALID_ARGUMENT;
    size_t n = strlen(value);
    uint8_t *v = malloc(8 + n);
    if (v) {
        put64(v, n);
        memcpy(v + 8, value, n);
    }
    return push_kv(w, key, OJ_GGUF_STRING, v, 8 + n, err);
}

oj_status oj_gguf_writer_set_array(oj_gguf_writer *w, const char *key, oj_gguf_type t, int64_t n,
                                   const void *values, oj_error *err) {
    if (!key_ok(w, key, err) || !scalar_type_ok(t, key, err) ||
        !alignment_rule(OJ_GGUF_ARRAY, key, NULL, err))
        return OJ_ERR_INVALID_ARGUMENT;
    size_t sz = oj_gguf_type_size(t);
    if (n < 0 || (n > 0 && values == NULL) || (uint64_t)n > (SIZE_MAX - 12) / sz)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: key \"%.60s\": bad array length %lld or NULL values",
                            key, (long long)n);
    if (!bools_ok(t, values, n, key, err)) return OJ_ERR_INVALID_ARGUMENT;
    uint8_t *v = malloc(12 + (size_t)n * sz);
    if (v) {
        put32(v, (uint32_t)t);
        put64(v + 4, (uint64_t)n);
        if (n) memcpy(v + 12, values, (size_t)n * sz);
    }
    return push_kv(w, key, OJ_GGUF_ARRAY, v, 12 + (size_t)n * sz, err);
}

oj_status oj_gguf_writer_set_str_array(oj_gguf_writer *w, const char *key, int64_t n,
                                       const char *const *values, oj_error *err) {
    if (!key_ok(w, key, err) || !alignment_rule(OJ_GGUF_ARRAY, key, NULL, err))
        return OJ_ERR_INVALID_ARGUMENT;
    if (n < 0 || (n > 0 && values == NULL))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: key \"%.60s\": bad array length %lld or NULL values",
                            key, (long long)n);
    size_t total = 12;
    for (int64_t i = 0; i < n; i++) {
        if (!str_ok(values[i], key, err)) return OJ_ERR_INVALID_ARGUMENT;
        total += 8 + strlen(values[i]);
    }
    uint8_t *v = malloc(total);
    if (v) {
        put32(v, OJ_GGUF_STRING);
        put64(v + 4, (uint64_t)n);
        size_t at = 12;
        for (int64_t i = 0; i < n; i++) {
            size_t l = strlen(values[i]);
            put64(v + at, l);
            memcpy(v + at + 8, values[i], l);
            at += 8 + l;
        }
    }
    return push_kv(w, key, OJ_GGUF_ARRAY, v, total, err);
}

oj_status oj_gguf_writer_add_tensor(oj_gguf_writer *w, const char *name, uint32_t type,
                                    int n_dims, const uint64_t *dims, const void *data,
                                    size_t nbytes, oj_error *err) {
    if (w == NULL || name == NULL || dims == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_writer: NULL argument");
    size_t n = strlen(name);
    if (n == 0 || n >= OJ__GGUF_MAX_NAME || !oj__utf8_valid((const uint8_t *)name, n, NULL))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: tensor name \"%.80s\" is not 1..%d bytes of UTF-8",
                            name, OJ__GGUF_MAX_NAME - 1);
    for (int64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "gguf_writer: tensor \"%s\" already added", name);
    if (oj_ggml_type_name(type) == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: tensor \"%s\": unknown ggml type %u", name, type);
    if (n_dims < 1 || n_dims > OJ__GGUF_MAX_DIMS)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: tensor \"%s\": n_dims %d is not in 1..%d", name,
                            n_dims, OJ__GGUF_MAX_DIMS);
    unsigned __int128 elems = 1;
    for (int d = 0; d < n_dims; d++) {
        elems *= dims[d];
        if (dims[d] == 0 || elems > (unsigned __int128)INT64_MAX)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "gguf_writer: tensor \"%s\": dim %d is %llu (or the count "
                                "overflows)",
                                name, d, (unsigned long long)dims[d]);
    }
    uint64_t want;
    if (!oj__ggml_nbytes(type, n_dims, dims, &want))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: tensor \"%s\": dims[0] %llu is not a multiple of "
                            "%s's block",
                            name, (unsigned long long)dims[0], oj_ggml_type_name(type));
    if (want != nbytes || data == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "gguf_writer: tensor \"%s\": %zu bytes given, %s of these dims "
                            "takes %llu",
                            name, nbytes, oj_ggml_type_name(type), (unsigned long long)want);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *t = realloc(w->t, sizeof *t * (size_t)cap);
        if (t == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "gguf_writer: out of host memory");
        w->t = t;
        w->cap_t = cap;
    }
    wtensor t = {.name = strdup(name), .type = type, .n_dims = n_dims, .data = data,
                 .nbytes = want};
    if (t.name == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "gguf_writer: out of host memory");
    memcpy(t.dims, dims, sizeof(uint64_t) * (size_t)n_dims);
    w->t[w->n_t++] = t;
    return OJ_OK;
}

static bool wr(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }
static bool wr32(FILE *f, uint32_t v) { return wr(f, &v, 4); }
static bool wr64(FILE *f, uint64_t v) { return wr(f, &v, 8); }
static bool wrstr(FILE *f, const char *s) { return wr64(f, strlen(s)) && wr(f, s, strlen(s)); }
static bool pad(FILE *f, uint64_t at, uint32_t a) {
    static const uint8_t zeros[256];
    uint64_t n = (a - at % a) % a;
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (!wr(f, zeros, k)) return false;
        n -= k;
    }
    return true;
}

oj_status oj_gguf_writer_write(const oj_gguf_writer *w, const char *path, oj_error *err) {
    if (w == NULL || path == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_writer_write: NULL argument");
    oj__atomic_file af;
    oj_status rc = oj__atomic_open(&af, path, err);
    if (rc != OJ_OK) return rc;
    FILE *f = af.f;
    const uint32_t a = w->alignment;
    bool ok = wr32(f, OJ__GGUF_MAGIC) && wr32(f, 3) && wr64(f, (uint64_t)w->n_t) &&
              wr64(f, (uint64_t)w->n_kv);
    uint64_t at = 24;
    for (int64_t i = 0; ok && i < w->n_kv; i++) {
        ok = wrstr(f, w->kv[i].key) && wr32(f, (uint32_t)w->kv[i].type) &&
             wr(f, w->kv[i].val, w->kv[i].val_len);
        at += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].val_len;
    }
    uint64_t off = 0;
    for (int64_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = wrstr(f, t->name) && wr32(f, (uint32_t)t->n_dims);
        for (int d = 0; ok && d < t->n_dims; d++) ok = wr64(f, t->dims[d]);
        ok = ok && wr32(f, t->type) && wr64(f, off);
        at += 8 + strlen(t->name) + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
        off += (t->nbytes + a - 1) / a * a;
    }
    ok = ok && pad(f, at, a);
    for (int64_t i = 0; ok && i < w->n_t; i++)
        ok = wr(f, w->t[i].data, (size_t)w->t[i].nbytes) && pad(f, w->t[i].nbytes, a);
    if (!ok) {
        const int e = ferror(f) && errno ? errno : EIO; /* the failed fwrite's reason */
        oj__atomic_abort(&af);
        return oj_error_set(err, OJ_ERR_IO, "gguf_writer_write: writing %s: %s", path,
                            strerror(e));
    }
    return oj__atomic_commit(&af, err);
}
