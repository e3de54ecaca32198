/* safetensors writer: sorted header keys, space padding to an 8-byte
 * aligned data section, tensor data ordered by element size so each tensor
 * is aligned to its element size without gaps, atomic replacement. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/internal.h"
#include "io/io_internal.h"

typedef struct item {
    int64_t index; /* into entries / tensors */
    const char *name;
    oj_dtype dtype;
    int rank;
    int64_t shape[OJ_MAX_RANK];
    uint64_t nbytes, begin;
} item;

/* ---------------------------------------------------------------- text buffer */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

/* A JSON string: quotes, backslashes and control characters escaped,
 * UTF-8 written as is (as serde_json does). */
static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        char esc[8];
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                sb_put(b, esc, 6);
            } else {
                sb_put(b, p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

/* ---------------------------------------------------------------- validation */

static oj_status check_text(const char *what, const char *s, oj_error *err) {
    char q[160];
    size_t at;
    if (!s) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors write: %s is NULL", what);
    if (!oj__utf8_valid((const uint8_t *)s, strlen(s), &at))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "safetensors write: %s %s is not UTF-8 (byte %zu)", what,
                            oj__quote(q, sizeof q, s, strlen(s)), at);
    return OJ_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const item *)a)->name, ((const item *)b)->name);
}

/* Data order: larger elements first (keeps every tensor aligned to its
 * element size when the section starts 8-byte aligned), then by name. */
static int cmp_layout(const void *a, const void *b) {
    const item *x = *(const item *const *)a, *y = *(const item *const *)b;
    size_t sx = oj_dtype_size(x->dtype), sy = oj_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_str_pair(const void *a, const void *b) {
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

static oj_status collect(int64_t n, const oj_safetensors_entry *entries, const char *const *names,
                         oj_tensor *const *tensors, item *items, oj_error *err) {
    char q[160];
    for (int64_t i = 0; i < n; i++) {
        item *it = &items[i];
        it->index = i;
        if (tensors) {
            it->name = names ? names[i] : NULL;
            oj_tensor *t = tensors[i];
            it->rank = oj_rank(t);
            if (it->rank < 0)
                return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                    "safetensors write: tensor %" PRId64 " (%s) is NULL or released",
                                    i, it->name ? it->name : "unnamed");
            it->dtype = oj_tensor_dtype(t);
            memcpy(it->shape, oj_shape(t), (size_t)it->rank * sizeof(int64_t));
        } else {
            const oj_safetensors_entry *e = &entries[i];
            it->name = e->name;
            it->dtype = e->dtype;
            it->rank = e->rank;
            if (e->rank < 0 || e->rank > OJ_MAX_RANK || (e->rank > 0 && !e->shape))
                return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                    "safetensors write: tensor %s: rank %d (0..%d with a shape)",
                                    e->name ? e->name : "(NULL)", e->rank, OJ_MAX_RANK);
            if (e->rank) memcpy(it->shape, e->shape, (size_t)e->rank * sizeof(int64_t));
        }
        oj_status rc = check_text("tensor name", it->name, err);
        if (rc) return rc;
        oj__quote(q, sizeof q, it->name, strlen(it->name));
        if (!it->name[0] || strcmp(it->name, "__metadata__") == 0)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "safetensors write: tensor name %s is reserved or empty", q);
        if (!oj_safetensors_dtype_to_str(it->dtype))
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "safetensors write: tensor %s: invalid dtype %d", q, (int)it->dtype);
        int64_t numel;
        rc = oj_shape_numel(it->rank, it->shape, it->dtype, &numel);
        if (!rc && !oj__shape_span_ok(it->rank, it->shape, 8 * (unsigned)oj_dtype_size(it->dtype)))
            rc = OJ_ERR_OUT_OF_RANGE;
        if (rc)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "safetensors write: tensor %s: shape is negative or overflows", q);
        it->nbytes = (uint64_t)numel * oj_dtype_size(it->dtype);
        if (!tensors && it->nbytes && !entries[i].data)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "safetensors write: tensor %s: data is NULL", q);
    }
    qsort(items, (size_t)n, sizeof *items, cmp_name);
    for (int64_t i = 1; i < n; i++)
        if (strcmp(items[i - 1].name, items[i].name) == 0)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors write: duplicate name %s",
                                oj__quote(q, sizeof q, items[i].name, strlen(items[i].name)));
    return OJ_OK;
}

/* Header JSON for items sorted by name, metadata pairs sorted by key. */
static void build_header(sbuf *b, int64_t n, const item *items, const char *const **meta,
                         int64_t n_meta) {
    char num[64];
    sb_str(b, "{");
    if (n_meta) {
        sb_str(b, "\"__metadata__\":{");
        for (int64_t i = 0; i < n_meta; i++) {
            if (i) sb_str(b, ",");
            sb_json_string(b, meta[i][0]);
            sb_str(b, ":");
            sb_json_string(b, meta[i][1]);
        }
        sb_str(b, "}");
    }
    for (int64_t i = 0; i < n; i++) {
        const item *it = &items[i];
        if (i || n_meta) sb_str(b, ",");
        sb_json_string(b, it->name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, oj_safetensors_dtype_to_str(it->dtype));
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < it->rank; d++) {
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", it->shape[d]);
            sb_str(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", it->begin,
                 it->begin + it->nbytes);
        sb_str(b, num);
    }
    sb_str(b, "}");
    while ((8 + b->len) % 8) sb_str(b, " ");
}

static oj_status emit(int fd, const char *path, const void *p, size_t len, XXH3_state_t *h,
                      oj_error *err) {
    if (h && len) XXH3_64bits_update(h, p, len);
    return oj__write_all(fd, p, len, path, err);
}

oj_status oj__st_write_fd(int fd, const char *path, int64_t n, const oj_safetensors_entry *entries,
                          const char *const *names, oj_tensor *const *tensors,
                          const char *const *metadata, void *hash, oj_error *err) {
    if (n < 0 || (n > 0 && !entries && !tensors) || (tensors && !names))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "safetensors write %s: %" PRId64 " tensors without names or data", path, n);
    int64_t n_meta = 0;
    while (metadata && metadata[2 * n_meta]) n_meta++;
    item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    item **order = calloc((size_t)(n ? n : 1), sizeof *order);
    const char *const **meta = calloc((size_t)(n_meta ? n_meta : 1), sizeof *meta);
    sbuf hb = {0};
    void *scratch = NULL;
    size_t scratch_len = 0;
    oj_status rc = OJ_OK;
    if (!items || !order || !meta) {
        rc = oj_error_set(err, OJ_ERR_CAPACITY, "safetensors write %s: out of host memory", path);
        goto done;
    }
    for (int64_t i = 0; i < n_meta && !rc; i++) {
        meta[i] = &metadata[2 * i];
        rc = check_text("metadata key", metadata[2 * i], err);
        if (!rc) rc = check_text("metadata value", metadata[2 * i + 1], err);
    }
    if (rc) goto done;
    qsort(meta, (size_t)n_meta, sizeof *meta, cmp_str_pair);
    for (int64_t i = 1; i < n_meta; i++)
        if (strcmp(meta[i - 1][0], meta[i][0]) == 0) {
            char q[160];
            rc = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                              "safetensors write %s: duplicate metadata key %s", path,
                              oj__quote(q, sizeof q, meta[i][0], strlen(meta[i][0])));
            goto done;
        }
    rc = collect(n, entries, names, tensors, items, err);
    if (rc) goto done;
    for (int64_t i = 0; i < n; i++) order[i] = &items[i];
    qsort(order, (size_t)n, sizeof *order, cmp_layout);
    uint64_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
        order[i]->begin = pos;
        pos += order[i]->nbytes;
    }
    build_header(&hb, n, items, meta, n_meta);
    if (hb.oom) {
        rc = oj_error_set(err, OJ_ERR_CAPACITY, "safetensors write %s: out of host memory", path);
        goto done;
    }
    if (hb.len > OJ__ST_MAX_HEADER) { /* the reader (ours and the reference) would refuse it */
        rc = oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                          "safetensors write %s: header length %zu exceeds the %u-byte limit", path,
                          hb.len, OJ__ST_MAX_HEADER);
        goto done;
    }
    uint8_t len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)hb.len >> (8 * k));
    rc = emit(fd, path, len8, 8, hash, err);
    if (!rc) rc = emit(fd, path, hb.p, hb.len, hash, err);
    for (int64_t i = 0; i < n && !rc; i++) {
        const item *it = order[i];
        if (!it->nbytes) continue;
        const void *src;
        if (!tensors) {
            src = entries[it->index].data;
        } else {
            oj_tensor *t = tensors[it->index];
            if (oj_tensor_device(t).type == OJ_DEVICE_CPU && oj_is_contiguous(t)) {
                src = oj__data_ptr(t);
            } else {
                if (scratch_len < it->nbytes) {
                    free(scratch);
                    scratch_len = 0;
                    scratch = malloc((size_t)it->nbytes);
                    if (!scratch) {
                        rc = oj_error_set(err, OJ_ERR_CAPACITY,
                                          "safetensors write %s: no host memory to stage %s", path,
                                          it->name);
                        break;
                    }
                    scratch_len = (size_t)it->nbytes;
                }
                if (oj_to_host(t, scratch, (size_t)it->nbytes) != OJ_OK) {
                    oj_engine *eng = oj_tensor_engine(t);
                    rc = oj_error_set(err, OJ_ERR_DEVICE, "safetensors write %s: copy of %s to the host failed: %s",
                                      path, it->name, eng ? oj_last_error(eng) : "");
                    break;
                }
                src = scratch;
            }
        }
        rc = emit(fd, path, src, (size_t)it->nbytes, hash, err);
    }
done:
    free(scratch);
    free(hb.p);
    free(meta);
    free(order);
    free(items);
    return rc;
}

oj_status oj__st_write_file(const char *path, int64_t n, const oj_safetensors_entry *entries,
                            const char *const *names, oj_tensor *const *tensors,
                            const char *const *metadata, void *hash, oj_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return oj_error_set(err, OJ_ERR_IO, "create %s: %s", path, strerror(errno));
    oj_status rc = oj__st_write_fd(fd, path, n, entries, names, tensors, metadata, hash, err);
    if (!rc) rc = oj__fsync_fd(fd, path, err);
    if (close(fd) != 0 && !rc) rc = oj_error_set(err, OJ_ERR_IO, "close %s: %s", path, strerror(errno));
    if (rc) unlink(path);
    return rc;
}

static oj_status write_atomic(const char *path, int64_t n, const oj_safetensors_entry *entries,
                              const char *const *names, oj_tensor *const *tensors,
                              const char *const *metadata, oj_error *err) {
    if (!path) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors write: path is NULL");
    oj__atomic_file af;
    oj_status rc = oj__atomic_open(&af, path, err);
    if (rc) return rc;
    rc = oj__st_write_fd(fileno(af.f), af.tmp, n, entries, names, tensors, metadata, NULL, err);
    if (rc) {
        oj__atomic_abort(&af);
        return rc;
    }
    return oj__atomic_commit(&af, err);
}

oj_status oj_safetensors_write(const char *path, int64_t n, const oj_safetensors_entry *entries,
                               const char *const *metadata, oj_error *err) {
    return write_atomic(path, n, entries, NULL, NULL, metadata, err);
}

oj_status oj_safetensors_save(const char *path, int64_t n, const char *const *names,
                              oj_tensor *const *tensors, const char *const *metadata,
                              oj_error *err) {
    if (n > 0 && (!names || !tensors))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors save %s: names or tensors is NULL",
                            path ? path : "(NULL)");
    static oj_tensor *const none[1] = {NULL};
    static const char *const no_names[1] = {NULL};
    return write_atomic(path, n, NULL, names ? names : no_names, tensors ? tensors : none, metadata,
                        err);
}
