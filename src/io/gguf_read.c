/* The GGUF reader: strict validation of the header, metadata and tensor
 * infos over a mapping of the file (rules: include/ojas/gguf.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/gguf_internal.h"

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *what; /* the file, in messages */
    oj_error *err;
} cur;

static bool corrupt(cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool corrupt(cur *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oj_error_set(c->err, OJ_ERR_CORRUPT, "%s: %s", c->what, msg);
    return false;
}

/* n more bytes, else a message naming `field` and where it starts. */
static bool need(cur *c, uint64_t n, const char *field, const char *ctx) {
    if (n <= c->len - c->pos) return true;
    return corrupt(c, "%s%s%s at byte %zu needs %llu bytes, %zu left", ctx, ctx[0] ? " " : "",
                   field, c->pos, (unsigned long long)n, c->len - c->pos);
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static bool u32(cur *c, uint32_t *v, const char *field, const char *ctx) {
    if (!need(c, 4, field, ctx)) return false;
    *v = rd32(c->p + c->pos);
    c->pos += 4;
    return true;
}
static bool u64(cur *c, uint64_t *v, const char *field, const char *ctx) {
    if (!need(c, 8, field, ctx)) return false;
    *v = rd64(c->p + c->pos);
    c->pos += 8;
    return true;
}

/* A string: u64 length and bytes; *s points into the file. */
static bool str(cur *c, const uint8_t **s, uint64_t *n, const char *field, const char *ctx) {
    if (!u64(c, n, field, ctx)) return false;
    if (!need(c, *n, field, ctx)) return false;
    *s = c->p + c->pos;
    c->pos += (size_t)*n;
    return true;
}

static char *dup_n(const uint8_t *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static bool oom(cur *c) {
    oj_error_set(c->err, OJ_ERR_CAPACITY, "%s: out of host memory", c->what);
    return false;
}

/* A scalar of type t at the cursor (bounds checked; bools 0 or 1). */
static bool scalar(cur *c, oj_gguf_type t, const char *ctx) {
    size_t sz = oj_gguf_type_size(t);
    if (!need(c, sz, "value", ctx)) return false;
    if (t == OJ_GGUF_BOOL && c->p[c->pos] > 1)
        return corrupt(c, "%s: bool value %u at byte %zu is neither 0 nor 1", ctx,
                       c->p[c->pos], c->pos);
    c->pos += sz;
    return true;
}

static bool parse_kv(cur *c, oj__gguf_kv *kv, int64_t idx) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "metadata %lld", (long long)idx);
    const uint8_t *k;
    uint64_t kn;
    if (!str(c, &k, &kn, "key", ctx)) return false;
    if (kn == 0 || kn > OJ__GGUF_MAX_KEY)
        return corrupt(c, "%s: key length %llu is not in 1..%d", ctx, (unsigned long long)kn,
                       OJ__GGUF_MAX_KEY);
    if (!oj__utf8_valid(k, (size_t)kn, NULL)) return corrupt(c, "%s: key is not UTF-8", ctx);
    if (memchr(k, 0, (size_t)kn)) return corrupt(c, "%s: key holds a NUL byte", ctx);
    if ((kv->key = dup_n(k, (size_t)kn)) == NULL) return oom(c);
    snprintf(ctx, sizeof ctx, "metadata \"%.60s\"", kv->key);
    uint32_t t;
    if (!u32(c, &t, "value type", ctx)) return false;
    if (t >= OJ_GGUF_TYPE_COUNT) return corrupt(c, "%s: unknown value type %u", ctx, t);
    kv->type = (oj_gguf_type)t;
    kv->arr_type = OJ_GGUF_TYPE_COUNT;
    kv->arr_len = -1;
    kv->raw = c->p + c->pos;
    if (t == OJ_GGUF_STRING) {
        const uint8_t *s;
        uint64_t n;
        if (!str(c, &s, &n, "string", ctx)) return false;
        if ((kv->str = dup_n(s, (size_t)n)) == NULL) return oom(c);
        kv->str_len = (size_t)n;
        return true;
    }
    if (t != OJ_GGUF_ARRAY) return scalar(c, kv->type, ctx);
    uint32_t at;
    uint64_t n;
    if (!u32(c, &at, "array type", ctx) || !u64(c, &n, "array length", ctx)) return false;
    if (at >= OJ_GGUF_TYPE_COUNT) return corrupt(c, "%s: unknown array element type %u", ctx, at);
    if (at == OJ_GGUF_ARRAY) return corrupt(c, "%s: nested arrays are not supported", ctx);
    kv->arr_type = (oj_gguf_type)at;
    kv->raw = c->p + c->pos;
    if (at != OJ_GGUF_STRING) {
        size_t sz = oj_gguf_type_size(kv->arr_type);
        if (n > (c->len - c->pos) / sz)
            return corrupt(c, "%s: array of %llu %s at byte %zu runs past the end", ctx,
                           (unsigned long long)n, oj_gguf_type_name(kv->arr_type), c->pos);
        kv->arr_len = (int64_t)n;
        if (at == OJ_GGUF_BOOL)
            for (uint64_t j = 0; j < n; j++)
                if (c->p[c->pos + j] > 1)
                    return corrupt(c, "%s: bool element %llu is neither 0 nor 1", ctx,
                                   (unsigned long long)j);
        c->pos += (size_t)(n * sz);
        return true;
    }
    /* strings: each at least its 8-byte length; sizes first, then copies */
    if (n > (c->len - c->pos) / 8)
        return corrupt(c, "%s: array of %llu strings at byte %zu runs past the end", ctx,
                       (unsigned long long)n, c->pos);
    size_t start = c->pos, total = 0;
    for (uint64_t j = 0; j < n; j++) {
        const uint8_t *s;
        uint64_t sn;
        char ectx[128];
        snprintf(ectx, sizeof ectx, "%s element %llu", ctx, (unsigned long long)j);
        if (!str(c, &s, &sn, "string", ectx)) return false;
        total += (size_t)sn + 1;
    }
    kv->arr_len = (int64_t)n;
    kv->strs = malloc(sizeof(char *) * (size_t)n + 1);
    kv->str_lens = malloc(sizeof(size_t) * (size_t)n + 1);
    kv->strbuf = malloc(total + 1);
    if (!kv->strs || !kv->str_lens || !kv->strbuf) return oom(c);
    size_t at_pos = start, off = 0;
    for (uint64_t j = 0; j < n; j++) {
        uint64_t sn = rd64(c->p + at_pos);
        memcpy(kv->strbuf + off, c->p + at_pos + 8, (size_t)sn);
        kv->strbuf[off + sn] = 0;
        kv->strs[j] = kv->strbuf + off;
        kv->str_lens[j] = (size_t)sn;
        off += (size_t)sn + 1;
        at_pos += 8 + (size_t)sn;
    }
    return true;
}

static bool parse_tensor(cur *c, oj__gguf_tensor *t, int64_t idx) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "tensor %lld", (long long)idx);
    const uint8_t *s;
    uint64_t n;
    if (!str(c, &s, &n, "name", ctx)) return false;
    if (n == 0 || n >= OJ__GGUF_MAX_NAME)
        return corrupt(c, "%s: name length %llu is not in 1..%d", ctx, (unsigned long long)n,
                       OJ__GGUF_MAX_NAME - 1);
    if (!oj__utf8_valid(s, (size_t)n, NULL) || memchr(s, 0, (size_t)n))
        return corrupt(c, "%s: name is not UTF-8 without NUL bytes", ctx);
    if ((t->name = dup_n(s, (size_t)n)) == NULL) return oom(c);
    snprintf(ctx, sizeof ctx, "tensor \"%s\"", t->name);
    uint32_t nd;
    if (!u32(c, &nd, "n_dims", ctx)) return false;
    if (nd < 1 || nd > OJ__GGUF_MAX_DIMS)
        return corrupt(c, "%s: n_dims %u is not in 1..%d", ctx, nd, OJ__GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    unsigned __int128 elems = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if (!u64(c, &t->dims[d], "dim", ctx)) return false;
        if (t->dims[d] == 0 || t->dims[d] > (uint64_t)INT64_MAX)
            return corrupt(c, "%s: dim %u is %llu", ctx, d, (unsigned long long)t->dims[d]);
        elems *= t->dims[d];
        if (elems > (unsigned __int128)INT64_MAX)
            return corrupt(c, "%s: element count overflows int64", ctx);
    }
    if (!u32(c, &t->type, "type", ctx) || !u64(c, &t->offset, "offset", ctx)) return false;
    int64_t be;
    if (!oj_ggml_type_block(t->type, &be, NULL))
        return corrupt(c, "%s: unknown ggml type %u", ctx, t->type);
    if (t->dims[0] % (uint64_t)be)
        return corrupt(c, "%s: dims[0] %llu is not a multiple of %s's block of %lld", ctx,
                       (unsigned long long)t->dims[0], oj_ggml_type_name(t->type),
                       (long long)be);
    if (!oj__ggml_nbytes(t->type, t->n_dims, t->dims, &t->nbytes))
        return corrupt(c, "%s: byte count overflows int64", ctx);
    return true;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void gguf_free(oj_gguf *g) {
    if (g == NULL) return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        free(g->kv[i].strs);
        free(g->kv[i].str_lens);
        free(g->kv[i].strbuf);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->t[i].name);
    free(g->kv);
    free(g->t);
    if (g->map) oj__map_release(g->map);
    free(g);
}

void oj_gguf_close(oj_gguf *g) { gguf_free(g); }

static bool parse(cur *c, oj_gguf *g) {
    uint32_t magic;
    uint64_t nt, nkv;
    if (!u32(c, &magic, "magic", "header")) return false;
    if (magic != OJ__GGUF_MAGIC)
        return corrupt(c, "header: magic is 0x%08x, not \"GGUF\" (0x%08x)", magic,
                       OJ__GGUF_MAGIC);
    if (!u32(c, &g->version, "version", "header")) return false;
    if (g->version != 2 && g->version != 3)
        return corrupt(c, "header: version %u is not supported (2 or 3)", g->version);
    if (!u64(c, &nt, "tensor count", "header") || !u64(c, &nkv, "metadata count", "header"))
        return false;
    /* every metadata entry takes >= 13 bytes (key length, a 1-byte key,
     * type), every tensor info >= 33 (name length, name, n_dims, one dim,
     * type, offset): counts beyond what is left are corrupt, so nothing is
     * allocated from an unchecked count */
    size_t left = c->len - c->pos;
    if (nkv > left / 13)
        return corrupt(c, "header: metadata count %llu cannot fit in the %zu bytes left",
                       (unsigned long long)nkv, left);
    if (nt > left / 33)
        return corrupt(c, "header: tensor count %llu cannot fit in the %zu bytes left",
                       (unsigned long long)nt, left);
    g->kv = calloc((size_t)nkv + 1, sizeof *g->kv);
    g->t = calloc((size_t)nt + 1, sizeof *g->t);
    if (!g->kv || !g->t) return oom(c);
    g->alignment = OJ__GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < nkv; i++) {
        g->n_kv = (int64_t)i + 1;
        if (!parse_kv(c, &g->kv[i], (int64_t)i)) return false;
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(g->kv[j].key, g->kv[i].key) == 0)
                return corrupt(c, "metadata \"%.60s\": key repeated (entries %llu and %llu)",
                               g->kv[i].key, (unsigned long long)j, (unsigned long long)i);
        if (strcmp(g->kv[i].key, "general.alignment") == 0) {
            uint32_t a = g->kv[i].type == OJ_GGUF_UINT32 ? rd32(g->kv[i].raw) : 0;
            if (a == 0 || (a & (a - 1)))
                return corrupt(c, "metadata \"general.alignment\": must be a uint32 power of "
                                  "two, got %s %u",
                               oj_gguf_type_name(g->kv[i].type), a);
            g->alignment = a;
        }
    }
    for (uint64_t i = 0; i < nt; i++) {
        g->n_tensors = (int64_t)i + 1;
        if (!parse_tensor(c, &g->t[i], (int64_t)i)) return false;
    }
    /* names unique: a sorted copy of the pointers */
    if (nt > 1) {
        const char **names = malloc(sizeof(char *) * (size_t)nt);
        if (!names) return oom(c);
        for (uint64_t i = 0; i < nt; i++) names[i] = g->t[i].name;
        qsort(names, (size_t)nt, sizeof *names, cmp_names);
        for (uint64_t i = 1; i < nt; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                bool r = corrupt(c, "tensor \"%s\": name repeated", names[i]);
                free(names);
                return r;
            }
        free(names);
    }
    uint64_t a = g->alignment;
    uint64_t data_start = (c->pos + a - 1) / a * a, expect = 0;
    for (uint64_t i = 0; i < nt; i++) {
        oj__gguf_tensor *t = &g->t[i];
        if (t->offset != expect)
            return corrupt(c, "tensor \"%s\": offset %llu, expected %llu (tensors in order, "
                              "each padded to %u bytes)",
                           t->name, (unsigned long long)t->offset, (unsigned long long)expect,
                           g->alignment);
        if (t->nbytes > (uint64_t)INT64_MAX - expect - a)
            return corrupt(c, "tensor \"%s\": data section overflows", t->name);
        expect += (t->nbytes + a - 1) / a * a;
    }
    uint64_t end = nt ? data_start + g->t[nt - 1].offset + g->t[nt - 1].nbytes : c->pos;
    if (end > c->len) {
        const char *who = nt ? g->t[nt - 1].name : "header";
        return corrupt(c, "tensor \"%s\": data ends at byte %llu, past the end of the file "
                          "(%zu bytes)",
                       who, (unsigned long long)end, c->len);
    }
    uint64_t padded_end = nt ? data_start + expect : data_start;
    if (c->len > padded_end)
        return corrupt(c, "%zu bytes after the data section (which ends at byte %llu)",
                       c->len - (size_t)padded_end, (unsigned long long)padded_end);
    g->data = c->p + (data_start <= c->len ? data_start : c->len);
    return true;
}

oj_status oj__gguf_parse(oj__mapping *m, const char *what, oj_gguf **out, oj_error *err) {
    *out = NULL;
    oj_gguf *g = calloc(1, sizeof *g);
    if (g == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "%s: out of host memory", what);
    cur c = {.p = m->base, .len = m->len, .what = what, .err = err};
    if (!parse(&c, g)) {
        gguf_free(g);
        return err && err->status ? err->status : OJ_ERR_CORRUPT;
    }
    oj__map_retain(m);
    g->map = m;
    *out = g;
    return OJ_OK;
}

oj_status oj_gguf_open(const char *path, oj_gguf **out, oj_error *err) {
    if (out) *out = NULL;
    if (path == NULL || out == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_open: NULL argument");
    oj__mapping *m;
    oj_status rc = oj__map_file(path, &m, err);
    if (rc != OJ_OK) return rc;
    rc = oj__gguf_parse(m, path, out, err);
    oj__map_release(m);
    return rc;
}

oj_status oj_gguf_open_memory(const void *data, size_t len, oj_gguf **out, oj_error *err) {
    if (out) *out = NULL;
    if ((data == NULL && len) || out == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "gguf_open_memory: NULL argument");
    oj__mapping *m;
    oj_status rc = oj__map_memory(data, len, true, &m, err);
    if (rc != OJ_OK) return rc;
    rc = oj__gguf_parse(m, "gguf (memory)", out, err);
    oj__map_release(m);
    return rc;
}

/* ---------------------------------------------------------------- accessors */

uint32_t oj_gguf_version(const oj_gguf *g) { return g ? g->version : 0; }
uint32_t oj_gguf_alignment(const oj_gguf *g) { return g ? g->alignment : 0; }
int64_t oj_gguf_kv_count(const oj_gguf *g) { return g ? g->n_kv : 0; }

static const oj__gguf_kv *kv_at(const oj_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const char *oj_gguf_kv_key(const oj_gguf *g, int64_t i) {
    const oj__gguf_kv *kv = kv_at(g, i);
    return kv ? kv->key : NULL;
}

int64_t oj_gguf_find_key(const oj_gguf *g, const char *key) {
    if (g == NULL || key == NULL) return -1;
    for (int64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return i;
    return -1;
}

oj_gguf_type oj_gguf_kv_type(const oj_gguf *g, int64_t i) {
    const oj__gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : OJ_GGUF_TYPE_COUNT;
}

/* Signed and unsigned views of an integer or bool scalar. */
static bool kv_integer(const oj__gguf_kv *kv, int64_t *s, uint64_t *u, bool *is_unsigned) {
    if (kv == NULL) return false;
    const uint8_t *p = kv->raw;
    *is_unsigned = true;
    switch (kv->type) {
    case OJ_GGUF_UINT8: case OJ_GGUF_BOOL: *u = p[0]; break;
    case OJ_GGUF_UINT16: *u = (uint64_t)(p[0] | p[1] << 8); break;
    case OJ_GGUF_UINT32: *u = rd32(p); break;
    case OJ_GGUF_UINT64: *u = rd64(p); break;
    case OJ_GGUF_INT8: *s = (int8_t)p[0]; *is_unsigned = false; break;
    case OJ_GGUF_INT16: *s = (int16_t)(uint16_t)(p[0] | p[1] << 8); *is_unsigned = false; break;
    case OJ_GGUF_INT32: *s = (int32_t)rd32(p); *is_unsigned = false; break;
    case OJ_GGUF_INT64: *s = (int64_t)rd64(p); *is_unsigned = false; break;
    default: return false;
    }
    return true;
}

const void *oj__gguf_kv_raw(const oj_gguf *g, int64_t i) {
    const oj__gguf_kv *kv = kv_at(g, i);
    if (kv == NULL || kv->type == OJ_GGUF_STRING || kv->type == OJ_GGUF_ARRAY) return NULL;
    return kv->raw;
}

bool oj_gguf_kv_int(const oj_gguf *g, int64_t i, int64_t *out) {
    int64_t s = 0;
    uint64_t u = 0;
    bool un;
    if (!kv_integer(kv_at(g, i), &s, &u, &un) || out == NULL) return false;
    if (un && u > (uint64_t)INT64_MAX) return false;
    *out = un ? (int64_t)u : s;
    return true;
}

bool oj_gguf_kv_uint(const oj_gguf *g, int64_t i, uint64_t *out) {
    int64_t s = 0;
    uint64_t u = 0;
    bool un;
    if (!kv_integer(kv_at(g, i), &s, &u, &un) || out == NULL) return false;
    if (!un && s < 0) return false;
    *out = un ? u : (uint64_t)s;
    return true;
}

bool oj_gguf_kv_float(const oj_gguf *g, int64_t i, double *out) {
    const oj__gguf_kv *kv = kv_at(g, i);
    if (kv == NULL || out == NULL) return false;
    if (kv->type == OJ_GGUF_FLOAT32) {
        uint32_t b = rd32(kv->raw);
        float f;
        memcpy(&f, &b, 4);
        *out = f;
        return true;
    }
    if (kv->type == OJ_GGUF_FLOAT64) {
        uint64_t b = rd64(kv->raw);
        memcpy(out, &b, 8);
        return true;
    }
    return false;
}

const char *oj_gguf_kv_str(const oj_gguf *g, int64_t i, size_t *len) {
    const oj__gguf_kv *kv = kv_at(g, i);
    if (kv == NULL || kv->type != OJ_GGUF_STRING) return NULL;
    if (len) *len = kv->str_len;
    return kv->str;
}

oj_gguf_type oj_gguf_kv_array_type(const oj_gguf *g, int64_t i) {
    const oj__gguf_kv *kv = kv_at(g, i);
    return kv ? kv->arr_type : OJ_GGUF_TYPE_COUNT;
}

int64_t oj_gguf_kv_array_len(const oj_gguf *g, int64_t i) {
    const oj__gguf_kv *kv = kv_at(g, i);
    return kv ? kv->arr_len : -1;
}

const void *oj_gguf_kv_array_data(const oj_gguf *g, int64_t i) {
    const oj__gguf_kv *kv = kv_at(g, i);
    if (kv == NULL || kv->type != OJ_GGUF_ARRAY || kv->arr_type == OJ_GGUF_STRING) return NULL;
    return kv->raw;
}

const char *oj_gguf_kv_array_str(const oj_gguf *g, int64_t i, int64_t j, size_t *len) {
    const oj__gguf_kv *kv = kv_at(g, i);
    if (kv == NULL || kv->type != OJ_GGUF_ARRAY || kv->arr_type != OJ_GGUF_STRING || j < 0 ||
        j >= kv->arr_len)
        return NULL;
    if (len) *len = kv->str_lens[j];
    return kv->strs[j];
}

int64_t oj_gguf_tensor_count(const oj_gguf *g) { return g ? g->n_tensors : 0; }

static const oj__gguf_tensor *t_at(const oj_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->t[i] : NULL;
}

const char *oj_gguf_tensor_name(const oj_gguf *g, int64_t i) {
    const oj__gguf_tensor *t = t_at(g, i);
    return t ? t->name : NULL;
}

int64_t oj_gguf_find_tensor(const oj_gguf *g, const char *name) {
    if (g == NULL || name == NULL) return -1;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->t[i].name, name) == 0) return i;
    return -1;
}

uint32_t oj_gguf_tensor_type(const oj_gguf *g, int64_t i) {
    const oj__gguf_tensor *t = t_at(g, i);
    return t ? t->type : UINT32_MAX;
}

int oj_gguf_tensor_ndims(const oj_gguf *g, int64_t i) {
    const oj__gguf_tensor *t = t_at(g, i);
    return t ? t->n_dims : 0;
}

const uint64_t *oj_gguf_tensor_dims(const oj_gguf *g, int64_t i) {
    const oj__gguf_tensor *t = t_at(g, i);
    return t ? t->dims : NULL;
}

uint64_t oj_gguf_tensor_offset(const oj_gguf *g, int64_t i) {
    const oj__gguf_tensor *t = t_at(g, i);
    return t ? t->offset : 0;
}

const void *oj_gguf_tensor_data(const oj_gguf *g, int64_t i, size_t *nbytes) {
    const oj__gguf_tensor *t = t_at(g, i);
    if (t == NULL) return NULL;
    if (nbytes) *nbytes = (size_t)t->nbytes;
    return g->data + t->offset;
}

oj_tensor *oj_gguf_tensor(const oj_gguf *g, oj_engine *eng, const char *name) {
    if (eng == NULL) return NULL;
    if (g == NULL || name == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gguf_tensor: NULL argument");
        return NULL;
    }
    int64_t i = oj_gguf_find_tensor(g, name);
    if (i < 0) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "gguf_tensor: no tensor \"%s\" in the file", name);
        return NULL;
    }
    const oj__gguf_tensor *t = &g->t[i];
    oj_dtype dt = t->type == OJ_GGML_F32    ? OJ_F32
                  : t->type == OJ_GGML_F16  ? OJ_F16
                  : t->type == OJ_GGML_BF16 ? OJ_BF16
                                            : OJ_DTYPE_COUNT;
    if (dt == OJ_DTYPE_COUNT) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "gguf_tensor: \"%s\" is %s; only F32, F16 and BF16 load as tensors "
                     "(quantized ones through oj_gguf_qtensor)",
                     name, oj_ggml_type_name(t->type));
        return NULL;
    }
    int64_t shape[OJ__GGUF_MAX_DIMS];
    for (int d = 0; d < t->n_dims; d++) shape[d] = (int64_t)t->dims[t->n_dims - 1 - d];
    return oj_from_host(eng, t->n_dims, shape, dt, g->data + t->offset, (size_t)t->nbytes);
}
