/* Printing in PyTorch's format (torch/_tensor_str.py: precision 4,
 * threshold 1000, edgeitems 3, linewidth 80), e.g.
 *   tensor([[1., 2.],
 *           [3., 4.]])
 * Non-default dtypes get a suffix with the ojas name (", dtype=f64" where
 * PyTorch writes dtype=torch.float64). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define PRECISION 4
#define THRESHOLD 1000
#define EDGEITEMS 3
#define LINEWIDTH 80

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_rep(sbuf *b, char c, int n) {
    for (int i = 0; i < n; i++) sb_put(b, &c, 1);
}

typedef struct {
    oj_dtype dt;
    const char *data; /* contiguous host copy */
    const int64_t *shape;
    int rank;
    bool summarize;
    bool floating, int_mode, sci;
    int width;
} printer;

static bool shown(const printer *pr, int d, int64_t i) {
    int64_t n = pr->shape[d];
    return !pr->summarize || n <= 2 * EDGEITEMS || i < EDGEITEMS || i >= n - EDGEITEMS;
}

/* Unpadded text of a value as the formatter would produce it. */
static int raw_text(const printer *pr, const char *p, char *out, size_t len) {
    if (!pr->floating) {
        if (pr->dt == OJ_BOOL) return snprintf(out, len, "%s", *p ? "True" : "False");
        return snprintf(out, len, "%lld", (long long)oj__load_i64(p, pr->dt));
    }
    double v = oj__load(p, pr->dt);
    if (isnan(v)) return snprintf(out, len, "nan");
    if (isinf(v)) return snprintf(out, len, v < 0 ? "-inf" : "inf");
    if (pr->sci) return snprintf(out, len, "%.*e", PRECISION, v);
    if (pr->int_mode) return snprintf(out, len, "%.0f.", v);
    return snprintf(out, len, "%.*f", PRECISION, v);
}

/* Visit every shown element (summarised view), row-major. */
typedef void (*visit_fn)(printer *pr, const char *p, void *ctx);
static void visit(printer *pr, int d, int64_t off, visit_fn fn, void *ctx) {
    size_t es = oj_dtype_size(pr->dt);
    if (d == pr->rank) {
        fn(pr, pr->data + off * (int64_t)es, ctx);
        return;
    }
    int64_t inner = 1;
    for (int k = d + 1; k < pr->rank; k++) inner *= pr->shape[k];
    for (int64_t i = 0; i < pr->shape[d]; i++)
        if (shown(pr, d, i)) visit(pr, d + 1, off + i * inner, fn, ctx);
}

typedef struct {
    bool any;
    double mn, mx;
    bool all_int;
} stats;

static void stat_fn(printer *pr, const char *p, void *ctx) {
    stats *s = ctx;
    if (!pr->floating) {
        char buf[64];
        int w = raw_text(pr, p, buf, sizeof buf);
        if (w > pr->width) pr->width = w;
        return;
    }
    double v = oj__load(p, pr->dt);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (!s->any || a < s->mn) s->mn = a;
    if (!s->any || a > s->mx) s->mx = a;
    s->any = true;
    if (v != ceil(v)) s->all_int = false;
}

static void width_fn(printer *pr, const char *p, void *ctx) {
    (void)ctx;
    double v = oj__load(p, pr->dt);
    if (!isfinite(v) || v == 0) return;
    char buf[64];
    int w = raw_text(pr, p, buf, sizeof buf);
    if (w > pr->width) pr->width = w;
}

static void setup(printer *pr) {
    pr->width = 1;
    pr->int_mode = true;
    pr->sci = false;
    stats s = {false, 0, 0, true};
    visit(pr, 0, 0, stat_fn, &s);
    if (!pr->floating || !s.any) return;
    pr->int_mode = s.all_int;
    if (s.mx / s.mn > 1000.0 || s.mx > 1e8 || (!s.all_int && s.mn < 1e-4)) {
        pr->sci = true;
        pr->int_mode = false;
    }
    visit(pr, 0, 0, width_fn, NULL);
}

static void put_elem(sbuf *b, const printer *pr, const char *p) {
    char buf[64];
    int w = raw_text(pr, p, buf, sizeof buf);
    sb_rep(b, ' ', pr->width - w);
    sb_str(b, buf);
}

static void put_vector(sbuf *b, const printer *pr, int64_t off, int indent) {
    size_t es = oj_dtype_size(pr->dt);
    int64_t n = pr->shape[pr->rank - 1];
    int per_line = (LINEWIDTH - indent) / (pr->width + 2);
    if (per_line < 1) per_line = 1;
    sb_str(b, "[");
    int col = 0;
    bool first = true;
    for (int64_t i = 0; i < n; i++) {
        bool ellipsis = pr->summarize && n > 2 * EDGEITEMS && i == EDGEITEMS;
        if (!first) {
            if (col == per_line) {
                sb_str(b, ",\n");
                sb_rep(b, ' ', indent + 1);
                col = 0;
            } else {
                sb_str(b, ", ");
            }
        }
        first = false;
        col++;
        if (ellipsis) {
            sb_str(b, " ...");
            i = n - EDGEITEMS - 1;
            continue;
        }
        put_elem(b, pr, pr->data + (off + i) * (int64_t)es);
    }
    sb_str(b, "]");
}

static void put_tensor(sbuf *b, const printer *pr, int d, int64_t off, int indent) {
    int dims = pr->rank - d;
    if (dims == 1) {
        put_vector(b, pr, off, indent);
        return;
    }
    int64_t n = pr->shape[d], inner = 1;
    for (int k = d + 1; k < pr->rank; k++) inner *= pr->shape[k];
    sb_str(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            sb_str(b, ",");
            sb_rep(b, '\n', dims - 1);
            sb_rep(b, ' ', indent + 1);
        }
        if (pr->summarize && n > 2 * EDGEITEMS && i == EDGEITEMS) {
            sb_str(b, "...");
            i = n - EDGEITEMS - 1;
            continue;
        }
        put_tensor(b, pr, d + 1, off + i * inner, indent + 1);
    }
    sb_str(b, "]");
}

/* PyTorch's _add_suffixes: a suffix goes on a new line past linewidth.
 * *last is the running length of the last line as PyTorch counts it. */
static void add_suffix(sbuf *b, const char *suffix, int indent, size_t *last) {
    if (*last == 0) { /* first suffix: measure the tensor text */
        const char *nl = b->p ? strrchr(b->p, '\n') : NULL;
        *last = nl ? b->len - (size_t)(nl - b->p) + 1 : b->len + 2;
    }
    size_t n = strlen(suffix);
    if (*last + n + 2 > LINEWIDTH) {
        sb_str(b, ",\n");
        sb_rep(b, ' ', indent);
        *last = (size_t)indent + n;
    } else {
        sb_str(b, ", ");
        *last += n + 2;
    }
    sb_str(b, suffix);
}

char *oj_tensor_to_string(oj_tensor *t) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "tensor_to_string", "tensor")) return NULL;
    int64_t n = oj_numel(t);
    size_t es = oj_dtype_size(t->dtype);
    char *data = malloc(n ? (size_t)n * es : 1);
    if (data == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "tensor_to_string: out of host memory");
        return NULL;
    }
    if (oj_to_host(t, data, (size_t)n * es) != OJ_OK) {
        free(data);
        return NULL;
    }
    printer pr = {.dt = t->dtype,
                  .data = data,
                  .shape = t->shape,
                  .rank = t->rank,
                  .summarize = n > THRESHOLD,
                  .floating = oj_dtype_is_float(t->dtype)};
    sbuf b = {0};
    const int indent = 7;
    sb_str(&b, "tensor(");
    char suffix[128];
    size_t last = 0;
    bool dev = t->storage->device.type == OJ_DEVICE_CUDA;
    if (n == 0) {
        sb_str(&b, "[]");
        if (dev) {
            snprintf(suffix, sizeof suffix, "device='cuda:%d'", t->storage->device.index);
            add_suffix(&b, suffix, indent, &last);
        }
        if (t->rank != 1) {
            int k = snprintf(suffix, sizeof suffix, "size=(");
            for (int d = 0; d < t->rank; d++)
                k += snprintf(suffix + k, sizeof suffix - (size_t)k, d ? ", %lld" : "%lld",
                              (long long)t->shape[d]);
            snprintf(suffix + k, sizeof suffix - (size_t)k, t->rank == 1 ? ",)" : ")");
            add_suffix(&b, suffix, indent, &last);
        }
        if (t->dtype != OJ_F32) {
            snprintf(suffix, sizeof suffix, "dtype=%s", oj_dtype_name(t->dtype));
            add_suffix(&b, suffix, indent, &last);
        }
    } else {
        setup(&pr);
        if (t->rank == 0) put_elem(&b, &pr, data);
        else put_tensor(&b, &pr, 0, 0, indent);
        if (dev) {
            snprintf(suffix, sizeof suffix, "device='cuda:%d'", t->storage->device.index);
            add_suffix(&b, suffix, indent, &last);
        }
        if (t->dtype != OJ_F32 && t->dtype != OJ_I64 && t->dtype != OJ_BOOL) {
            snprintf(suffix, sizeof suffix, "dtype=%s", oj_dtype_name(t->dtype));
            add_suffix(&b, suffix, indent, &last);
        }
    }
    if (t->grad_fn == NULL && t->requires_grad) add_suffix(&b, "requires_grad=True", indent, &last);
    sb_str(&b, ")");
    free(data);
    if (b.oom) {
        free(b.p);
        oj_set_error(eng, OJ_ERR_CAPACITY, "tensor_to_string: out of host memory");
        return NULL;
    }
    return b.p;
}

oj_status oj_print(oj_tensor *t) {
    char *s = oj_tensor_to_string(t);
    if (s == NULL) {
        oj_engine *eng = oj__engine_of(t);
        return eng && oj_last_status(eng) != OJ_OK ? oj_last_status(eng) : OJ_ERR_INVALID_ARGUMENT;
    }
    puts(s);
    free(s);
    return OJ_OK;
}
