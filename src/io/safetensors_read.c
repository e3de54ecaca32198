/* Strict safetensors reader: validates the header against the bytes and
 * exposes names, dtypes, shapes, raw data and metadata. Every rule that a
 * file can break is checked here, before any tensor is made from it. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_internal.h"

const oj__st_dtype oj__st_dtypes[] = {
    {"F64", 64, OJ_F64},   {"F32", 32, OJ_F32},     {"BF16", 16, OJ_BF16},
    {"F16", 16, OJ_F16},   {"I64", 64, OJ_I64},     {"I32", 32, OJ_I32},
    {"U32", 32, OJ_U32},   {"U16", 16, OJ_U16},     {"U8", 8, OJ_U8},
    {"BOOL", 8, OJ_BOOL},
    /* defined by safetensors, no ojas type */
    {"I8", 8, OJ_DTYPE_COUNT}, {"I16", 16, OJ_DTYPE_COUNT}, {"U64", 64, OJ_DTYPE_COUNT},
    {"F8_E5M2", 8, OJ_DTYPE_COUNT}, {"F8_E4M3", 8, OJ_DTYPE_COUNT},
    {"F8_E8M0", 8, OJ_DTYPE_COUNT}, {"C64", 64, OJ_DTYPE_COUNT}, {"F4", 4, OJ_DTYPE_COUNT},
    {"F6_E2M3", 6, OJ_DTYPE_COUNT}, {"F6_E3M2", 6, OJ_DTYPE_COUNT},
};
const int oj__st_dtype_count = (int)(sizeof oj__st_dtypes / sizeof oj__st_dtypes[0]);

bool oj__shape_span_ok(int rank, const int64_t *shape, unsigned bits) {
    uint64_t span = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0) return false;
        uint64_t dim = shape[d] ? (uint64_t)shape[d] : 1;
        if (span > (uint64_t)INT64_MAX / dim) return false;
        span *= dim;
    }
    return span <= (uint64_t)INT64_MAX / bits;
}

static int dtype_lookup(const char *s) {
    for (int i = 0; i < oj__st_dtype_count; i++)
        if (strcmp(oj__st_dtypes[i].name, s) == 0) return i;
    return -1;
}

const char *oj_safetensors_dtype_to_str(oj_dtype dt) {
    for (int i = 0; i < oj__st_dtype_count; i++)
        if (oj__st_dtypes[i].dtype == dt && dt != OJ_DTYPE_COUNT) return oj__st_dtypes[i].name;
    return NULL;
}

static void st_free(oj_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n; i++) {
        free(st->t[i].name);
        free(st->t[i].shape);
    }
    free(st->t);
    for (int64_t i = 0; i < st->n_meta; i++) {
        free(st->meta_key[i]);
        free(st->meta_value[i]);
    }
    free(st->meta_key);
    free(st->meta_value);
    oj__map_release(st->map);
    free(st);
}

void oj_safetensors_close(oj_safetensors *st) {
    st_free(st);
}

/* ---------------------------------------------------------------- messages */

/* True when h[i] is not escaped by an odd run of backslashes before it. */
static bool unescaped(const uint8_t *h, size_t i) {
    size_t k = 0;
    while (k < i && h[i - 1 - k] == '\\') k++;
    return k % 2 == 0;
}

/* Render the JSON string token that contains (or ends just before) byte
 * `at` of the header: the nearest unescaped quote before `at` opens it. */
static const char *token_at(char *buf, size_t size, const uint8_t *h, size_t hl, size_t at) {
    size_t open = at;
    while (open > 0) {
        open--;
        if (h[open] == '"' && unescaped(h, open)) goto found;
    }
    return oj__quote(buf, size, (const char *)h, at < hl ? at : hl);
found:;
    size_t close = open + 1;
    while (close < hl && h[close] != '"') close += (h[close] == '\\') ? 2 : 1;
    if (close > hl) close = hl;
    return oj__quote(buf, size, (const char *)h + open + 1, close - (open + 1));
}

/* The key of a duplicate-key error: jansson stops right after its closing
 * quote; decode the token so escapes read as the name they spell. */
static const char *duplicate_key(char *buf, size_t size, const uint8_t *h, size_t hl, int pos) {
    if (pos < 2 || (size_t)pos > hl || h[pos - 1] != '"') return strcpy(buf, "(unknown)");
    size_t close = (size_t)pos - 1, open = close;
    while (open > 0) {
        open--;
        if (h[open] == '"' && unescaped(h, open)) {
            json_t *s = json_loadb((const char *)h + open, close - open + 1, JSON_DECODE_ANY, NULL);
            if (s && json_is_string(s)) {
                oj__quote(buf, size, json_string_value(s), json_string_length(s));
                json_decref(s);
                return buf;
            }
            json_decref(s);
            break;
        }
    }
    return token_at(buf, size, h, hl, close);
}

/* The top-level key (tensor name) whose entry holds header byte `pos`:
 * a scan that tracks strings and nesting depth. NULL when pos lies
 * outside every entry. */
static const char *enclosing_key(char *buf, size_t size, const uint8_t *h, size_t hl, size_t pos) {
    size_t depth = 0, key = 0, key_end = 0, str = 0;
    bool in_str = false, have = false;
    for (size_t i = 0; i < hl && i < pos; i++) {
        uint8_t c = h[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') {
                in_str = false;
                if (depth == 1) {
                    size_t j = i + 1;
                    while (j < hl && (h[j] == ' ' || h[j] == '\t' || h[j] == '\n' || h[j] == '\r')) j++;
                    if (j < hl && h[j] == ':') key = str, key_end = i, have = true;
                }
            }
        } else if (c == '"') {
            in_str = true, str = i + 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth) depth--;
        }
    }
    if (!have) return NULL;
    return oj__quote(buf, size, (const char *)h + key, key_end - key);
}

static void shape_str(char *buf, size_t size, int rank, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < rank && o < size; d++) {
        if (d == 16 && rank > 17) {
            o += (size_t)snprintf(buf + o, size - o, ", ...");
            break;
        }
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, d ? ", " : "", shape[d]);
    }
    if (o < size) snprintf(buf + o, size - o, "]");
}

/* ---------------------------------------------------------------- parsing */

static oj_status bad(oj_error *err, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static oj_status bad(oj_error *err, const char *what, const char *fmt, ...) {
    char msg[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return oj_error_set(err, OJ_ERR_CORRUPT, "safetensors %s: %s", what, msg);
}

static bool json_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static oj_status parse_tensor(const char *what, const char *key, json_t *val, uint64_t data_len,
                              oj__st_tensor *t, oj_error *err) {
    char q[160], s[160];
    oj__quote(q, sizeof q, key, strlen(key));
    if (!json_is_object(val)) return bad(err, what, "tensor %s: entry is not a JSON object", q);
    const char *k;
    json_t *v;
    json_object_foreach(val, k, v) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return bad(err, what, "tensor %s: unknown key %s", q, oj__quote(s, sizeof s, k, strlen(k)));
    }
    json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
           *jo = json_object_get(val, "data_offsets");
    if (!jd || !js || !jo)
        return bad(err, what, "tensor %s: missing \"%s\"", q,
                   !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd)) return bad(err, what, "tensor %s: dtype is not a string", q);
    t->dtype = dtype_lookup(json_string_value(jd));
    if (t->dtype < 0)
        return bad(err, what, "tensor %s: unknown dtype %s", q,
                   oj__quote(s, sizeof s, json_string_value(jd), json_string_length(jd)));
    if (!json_is_array(js)) return bad(err, what, "tensor %s: shape is not an array", q);
    size_t rank = json_array_size(js);
    if (rank > 1024) return bad(err, what, "tensor %s: rank %zu exceeds 1024", q, rank);
    t->rank = (int)rank;
    t->shape = malloc((rank ? rank : 1) * sizeof *t->shape);
    if (!t->shape) return oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
    /* span: the product of the dims with zeros counted as 1. It must fit
     * (in bits, then in int64 bytes) even when a zero dim empties the
     * tensor: strides are products of the dims, and a file that asks for
     * more is no real file. */
    uint64_t span = 1;
    bool overflow = false, empty = false;
    for (size_t d = 0; d < rank; d++) {
        uint64_t dim;
        if (!json_uint(json_array_get(js, d), &dim))
            return bad(err, what, "tensor %s: shape[%zu] is not a non-negative integer", q, d);
        t->shape[d] = (int64_t)dim;
        if (dim == 0) empty = true;
        else if (span > (uint64_t)INT64_MAX / dim) overflow = true;
        else span *= dim;
    }
    shape_str(s, sizeof s, t->rank, t->shape);
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_uint(json_array_get(jo, 0), &t->begin) || !json_uint(json_array_get(jo, 1), &t->end))
        return bad(err, what, "tensor %s: data_offsets is not [begin, end] of non-negative integers",
                   q);
    if (t->begin > t->end)
        return bad(err, what, "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                   q, t->begin, t->end);
    const oj__st_dtype *dt = &oj__st_dtypes[t->dtype];
    if (overflow || span > (uint64_t)INT64_MAX / dt->bits)
        return bad(err, what,
                   "tensor %s: shape %s of %s overflows (its dims, zeros counted as 1, exceed 2^63 bits)",
                   q, s, dt->name);
    uint64_t numel = empty ? 0 : span;
    uint64_t bits = numel * dt->bits;
    if (bits % 8)
        return bad(err, what, "tensor %s: shape %s of %s is not a whole number of bytes", q, s,
                   dt->name);
    if (t->end - t->begin != bits / 8)
        return bad(err, what,
                   "tensor %s: shape %s of %s needs %" PRIu64 " bytes but data_offsets [%" PRIu64
                   ", %" PRIu64 "] span %" PRIu64,
                   q, s, dt->name, bits / 8, t->begin, t->end, t->end - t->begin);
    if (t->end > data_len)
        return bad(err, what,
                   "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] run past the %" PRIu64
                   "-byte data section",
                   q, t->begin, t->end, data_len);
    return OJ_OK;
}

static oj_status parse_metadata(const char *what, json_t *meta, oj_safetensors *st, oj_error *err) {
    char q[160];
    if (!json_is_object(meta)) return bad(err, what, "__metadata__ is not a JSON object");
    size_t n = json_object_size(meta);
    st->meta_key = calloc(n ? n : 1, sizeof *st->meta_key);
    st->meta_value = calloc(n ? n : 1, sizeof *st->meta_value);
    if (!st->meta_key || !st->meta_value)
        return oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return bad(err, what, "__metadata__ value of %s is not a string",
                       oj__quote(q, sizeof q, k, strlen(k)));
        int64_t i = st->n_meta;
        st->meta_key[i] = strdup(k);
        st->meta_value[i] = malloc(json_string_length(v) + 1);
        st->n_meta++;
        if (!st->meta_key[i] || !st->meta_value[i])
            return oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
        memcpy(st->meta_value[i], json_string_value(v), json_string_length(v) + 1);
    }
    /* insertion sort by key: metadata maps are small */
    for (int64_t i = 1; i < st->n_meta; i++) {
        char *key = st->meta_key[i], *val = st->meta_value[i];
        int64_t j = i;
        for (; j > 0 && strcmp(st->meta_key[j - 1], key) > 0; j--) {
            st->meta_key[j] = st->meta_key[j - 1];
            st->meta_value[j] = st->meta_value[j - 1];
        }
        st->meta_key[j] = key;
        st->meta_value[j] = val;
    }
    return OJ_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const oj__st_tensor *)a)->name, ((const oj__st_tensor *)b)->name);
}

static int by_offsets(const void *a, const void *b) {
    const oj__st_tensor *x = *(const oj__st_tensor *const *)a, *y = *(const oj__st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The tensors must tile the data section exactly: sorted by offsets, the
 * first begins at 0, each begins where the previous ends, the last ends
 * at the end of the file. */
static oj_status check_layout(const char *what, oj_safetensors *st, oj_error *err) {
    char q[160], q2[160];
    if (st->n == 0) {
        if (st->data_len)
            return bad(err, what, "%" PRIu64 " bytes of trailing garbage after a header with no tensors",
                       st->data_len);
        return OJ_OK;
    }
    oj__st_tensor **ord = malloc((size_t)st->n * sizeof *ord);
    if (!ord) return oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
    for (int64_t i = 0; i < st->n; i++) ord[i] = &st->t[i];
    qsort(ord, (size_t)st->n, sizeof *ord, by_offsets);
    oj_status rc = OJ_OK;
    uint64_t pos = 0;
    for (int64_t i = 0; i < st->n && !rc; i++) {
        const oj__st_tensor *t = ord[i];
        oj__quote(q, sizeof q, t->name, t->name_len);
        if (t->begin < pos)
            rc = bad(err, what,
                     "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor %s [%" PRIu64
                     ", %" PRIu64 "]",
                     q, t->begin, t->end, oj__quote(q2, sizeof q2, ord[i - 1]->name, ord[i - 1]->name_len),
                     ord[i - 1]->begin, ord[i - 1]->end);
        else if (t->begin > pos)
            rc = bad(err, what,
                     "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] leave a gap of %" PRIu64
                     " bytes before them",
                     q, t->begin, t->end, t->begin - pos);
        pos = t->end;
    }
    if (!rc && pos != st->data_len) {
        const oj__st_tensor *t = ord[st->n - 1];
        rc = bad(err, what,
                 "%" PRIu64 " bytes of trailing garbage after the last tensor %s (data ends at %" PRIu64
                 ", file data section is %" PRIu64 " bytes)",
                 st->data_len - pos, oj__quote(q, sizeof q, t->name, t->name_len), pos, st->data_len);
    }
    free(ord);
    return rc;
}

oj_status oj__st_parse(oj__mapping *m, const char *what, oj_safetensors **out, oj_error *err) {
    *out = NULL;
    const uint8_t *b = m->base;
    size_t len = m->len;
    char q[160];
    if (len < 8)
        return bad(err, what, "%zu bytes, too short for the 8-byte header length", len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
    if (hlen > len - 8)
        return bad(err, what, "header length %" PRIu64 " runs past the end of the file (%zu bytes after it)",
                   hlen, len - 8);
    if (hlen > OJ__ST_MAX_HEADER)
        return bad(err, what, "header length %" PRIu64 " exceeds the %u-byte limit", hlen,
                   OJ__ST_MAX_HEADER);
    if (hlen < 2) return bad(err, what, "header length %" PRIu64 " cannot hold a JSON object", hlen);
    const uint8_t *h = b + 8;
    if (h[0] != '{') return bad(err, what, "header does not start with '{'");
    size_t hl = (size_t)hlen;
    while (hl > 0 && h[hl - 1] == ' ') hl--; /* padding */
    size_t at;
    if (!oj__utf8_valid(h, hl, &at))
        return bad(err, what, "header byte %zu is not UTF-8, in %s (a tensor name or string)", at,
                   token_at(q, sizeof q, h, hl, at));
    json_error_t je;
    json_t *root = json_loadb((const char *)h, hl, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_duplicate_key)
            return bad(err, what, "duplicate name %s in the header",
                       duplicate_key(q, sizeof q, h, hl, je.position));
        const char *k = enclosing_key(q, sizeof q, h, hl, je.position > 0 ? (size_t)je.position : 0);
        return bad(err, what, "header is not valid JSON at byte %d%s%s: %s", je.position,
                   k ? ", in the entry of " : "", k ? k : "", je.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return bad(err, what, "header is not a JSON object");
    }
    oj_safetensors *st = calloc(1, sizeof *st);
    oj_status rc = OJ_OK;
    if (!st) {
        json_decref(root);
        return oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
    }
    st->map = m;
    oj__map_retain(m);
    st->data = h + hlen;
    st->data_len = len - 8 - hlen;
    json_t *meta = json_object_get(root, "__metadata__");
    size_t cap = json_object_size(root) - (meta ? 1 : 0);
    st->t = calloc(cap ? cap : 1, sizeof *st->t);
    if (!st->t) rc = oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
    if (!rc && meta) rc = parse_metadata(what, meta, st, err);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (rc) break;
        if (strcmp(key, "__metadata__") == 0) continue;
        oj__st_tensor *t = &st->t[st->n++];
        t->name_len = strlen(key);
        t->name = strdup(key);
        if (!t->name) {
            rc = oj_error_set(err, OJ_ERR_CAPACITY, "safetensors %s: out of memory", what);
            break;
        }
        rc = parse_tensor(what, key, val, st->data_len, t, err);
    }
    json_decref(root);
    if (!rc) {
        qsort(st->t, (size_t)st->n, sizeof *st->t, by_name);
        rc = check_layout(what, st, err);
    }
    if (rc) {
        st_free(st);
        return rc;
    }
    *out = st;
    return OJ_OK;
}

oj_status oj_safetensors_open(const char *path, oj_safetensors **out, oj_error *err) {
    if (!out) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors_open: out is NULL");
    *out = NULL;
    if (!path) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors_open: path is NULL");
    oj__mapping *m;
    oj_status rc = oj__map_file(path, &m, err);
    if (rc) return rc;
    rc = oj__st_parse(m, path, out, err);
    oj__map_release(m);
    return rc;
}

oj_status oj_safetensors_open_memory(const void *data, size_t len, oj_safetensors **out,
                                     oj_error *err) {
    if (!out) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors_open_memory: out is NULL");
    *out = NULL;
    if (!data && len)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "safetensors_open_memory: data is NULL");
    oj__mapping *m;
    oj_status rc = oj__map_memory(data, len, true, &m, err);
    if (rc) return rc;
    rc = oj__st_parse(m, "(memory)", out, err);
    oj__map_release(m);
    return rc;
}

/* ---------------------------------------------------------------- accessors */

static const oj__st_tensor *entry(const oj_safetensors *st, int64_t i) {
    return (st && i >= 0 && i < st->n) ? &st->t[i] : NULL;
}

int64_t oj_safetensors_count(const oj_safetensors *st) {
    return st ? st->n : 0;
}

const char *oj_safetensors_name(const oj_safetensors *st, int64_t i) {
    const oj__st_tensor *t = entry(st, i);
    return t ? t->name : NULL;
}

int64_t oj_safetensors_find(const oj_safetensors *st, const char *name) {
    if (!st || !name) return -1;
    int64_t lo = 0, hi = st->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[mid].name, name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

oj_dtype oj_safetensors_dtype(const oj_safetensors *st, int64_t i) {
    const oj__st_tensor *t = entry(st, i);
    return t ? oj__st_dtypes[t->dtype].dtype : OJ_DTYPE_COUNT;
}

const char *oj_safetensors_dtype_str(const oj_safetensors *st, int64_t i) {
    const oj__st_tensor *t = entry(st, i);
    return t ? oj__st_dtypes[t->dtype].name : NULL;
}

int oj_safetensors_rank(const oj_safetensors *st, int64_t i) {
    const oj__st_tensor *t = entry(st, i);
    return t ? t->rank : -1;
}

const int64_t *oj_safetensors_shape(const oj_safetensors *st, int64_t i) {
    const oj__st_tensor *t = entry(st, i);
    return t ? t->shape : NULL;
}

const void *oj_safetensors_data(const oj_safetensors *st, int64_t i, size_t *nbytes) {
    const oj__st_tensor *t = entry(st, i);
    if (!t) return NULL;
    if (nbytes) *nbytes = (size_t)(t->end - t->begin);
    return st->data + t->begin;
}

int64_t oj_safetensors_metadata_count(const oj_safetensors *st) {
    return st ? st->n_meta : 0;
}

const char *oj_safetensors_metadata_key(const oj_safetensors *st, int64_t i) {
    return (st && i >= 0 && i < st->n_meta) ? st->meta_key[i] : NULL;
}

const char *oj_safetensors_metadata_value(const oj_safetensors *st, int64_t i) {
    return (st && i >= 0 && i < st->n_meta) ? st->meta_value[i] : NULL;
}

const char *oj_safetensors_metadata_get(const oj_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int64_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0) return st->meta_value[i];
    return NULL;
}
