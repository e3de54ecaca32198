/* The parameter registry: named tensors in registration order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "nn/nn_internal.h"
#include "ojas/ops.h"

oj_params *oj_params_create(oj_engine *eng, uint64_t seed) {
    if (eng == NULL) return NULL;
    oj_params *p = calloc(1, sizeof *p);
    if (p == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "params: out of host memory");
        return NULL;
    }
    p->eng = eng;
    p->seed = seed;
    p->training = true;
    return p;
}

void oj_params_free(oj_params *p) {
    if (p == NULL) return;
    for (int64_t i = 0; i < p->n; i++) {
        free(p->names[i]);
        oj_release(p->tensors[i]);
    }
    free(p->names);
    free(p->tensors);
    free(p->buffer);
    free(p);
}

oj_engine *oj_params_engine(const oj_params *p) { return p ? p->eng : NULL; }
uint64_t oj_params_seed(const oj_params *p) { return p ? p->seed : 0; }

char *oj_param_name(char *buf, size_t len, const char *prefix, const char *leaf) {
    if (buf == NULL || leaf == NULL) return NULL;
    int k = (prefix && prefix[0]) ? snprintf(buf, len, "%s.%s", prefix, leaf)
                                  : snprintf(buf, len, "%s", leaf);
    return (k < 0 || (size_t)k >= len) ? NULL : buf;
}

int64_t oj_params_find(const oj_params *p, const char *name) {
    if (p == NULL || name == NULL) return -1;
    for (int64_t i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0) return i;
    return -1;
}

static oj_status check_name(oj_params *p, const char *name) {
    if (name == NULL || name[0] == '\0')
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT, "params: empty parameter name");
    if (strlen(name) >= OJ_PARAM_NAME_MAX)
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT,
                            "params: name '%.64s...' is longer than %d bytes", name,
                            OJ_PARAM_NAME_MAX - 1);
    if (oj_params_find(p, name) >= 0)
        return oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT, "params: '%s' is already registered",
                            name);
    return OJ_OK;
}

/* Append (name copied, t's reference taken over). */
static bool push(oj_params *p, const char *name, oj_tensor *t, bool buffer) {
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 32;
        char **nn = realloc(p->names, (size_t)cap * sizeof *nn);
        if (nn) p->names = nn;
        oj_tensor **nt = nn ? realloc(p->tensors, (size_t)cap * sizeof *nt) : NULL;
        if (nt) p->tensors = nt;
        bool *nb = nt ? realloc(p->buffer, (size_t)cap * sizeof *nb) : NULL;
        if (nb) p->buffer = nb;
        if (nb == NULL) return false;
        p->cap = cap;
    }
    char *s = strdup(name);
    if (s == NULL) return false;
    p->names[p->n] = s;
    p->tensors[p->n] = t;
    p->buffer[p->n] = buffer;
    p->n++;
    return true;
}

static oj_tensor *add(oj_params *p, const char *name, int rank, const int64_t *shape, oj_dtype dt,
                      const oj_init *init, bool buffer) {
    if (p == NULL) return NULL;
    oj_engine *eng = p->eng;
    if (check_name(p, name) != OJ_OK) return NULL;
    if (init == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "params: '%s' has no initialiser", name);
        return NULL;
    }
    if (!buffer && !oj_dtype_is_float(dt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "params: parameter '%s' must have a float dtype, got %s",
                     name, oj_dtype_name(dt));
        return NULL;
    }
    oj_tensor *t = oj_empty(eng, rank, shape, dt);
    if (t == NULL) return NULL;
    oj__scope_detach(t);
    if (oj_init_tensor(t, init, p->seed, name) != OJ_OK ||
        (!buffer && oj_set_requires_grad(t, true) == NULL)) {
        oj_release(t);
        return NULL;
    }
    if (!push(p, name, t, buffer)) {
        oj_release(t);
        oj_set_error(eng, OJ_ERR_CAPACITY, "params: out of host memory adding '%s'", name);
        return NULL;
    }
    return t;
}

oj_tensor *oj_params_add(oj_params *p, const char *name, int rank, const int64_t *shape,
                         oj_dtype dt, const oj_init *init) {
    return add(p, name, rank, shape, dt, init, false);
}

oj_tensor *oj_params_add_buffer(oj_params *p, const char *name, int rank, const int64_t *shape,
                                oj_dtype dt, const oj_init *init) {
    return add(p, name, rank, shape, dt, init, true);
}

oj_tensor *oj_params_adopt(oj_params *p, const char *name, oj_tensor *t, bool buffer) {
    if (p == NULL || t == NULL) return NULL;
    oj_engine *eng = p->eng;
    if (!oj__live(t) || t->eng != eng) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "params: adopting '%s': tensor is %s",
                     name ? name : "(null)", oj__live(t) ? "from another engine" : "released");
        return NULL;
    }
    if (check_name(p, name) != OJ_OK) return NULL;
    if (t->grad_fn != NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "params: adopting '%s': not a leaf tensor",
                     name);
        return NULL;
    }
    if (buffer && t->requires_grad) oj_set_requires_grad(t, false);
    if (!push(p, name, oj_retain(t), buffer)) {
        oj_release(t);
        oj_set_error(eng, OJ_ERR_CAPACITY, "params: out of host memory adding '%s'", name);
        return NULL;
    }
    return t;
}

int64_t oj_params_count(const oj_params *p) { return p ? p->n : 0; }

const char *oj_params_name(const oj_params *p, int64_t i) {
    return (p && i >= 0 && i < p->n) ? p->names[i] : NULL;
}

oj_tensor *oj_params_tensor(const oj_params *p, int64_t i) {
    return (p && i >= 0 && i < p->n) ? p->tensors[i] : NULL;
}

bool oj_params_is_buffer(const oj_params *p, int64_t i) {
    return (p && i >= 0 && i < p->n) ? p->buffer[i] : false;
}

oj_tensor *oj_params_get(const oj_params *p, const char *name) {
    int64_t i = oj_params_find(p, name);
    return i >= 0 ? p->tensors[i] : NULL;
}

int64_t oj_params_numel(const oj_params *p, bool trainable_only) {
    int64_t n = 0;
    for (int64_t i = 0; p && i < p->n; i++) {
        if (p->buffer[i] || (trainable_only && !p->tensors[i]->requires_grad)) continue;
        n += oj_numel(p->tensors[i]);
    }
    return n;
}

int64_t oj_params_freeze(oj_params *p, const char *prefix, bool frozen) {
    if (p == NULL) return 0;
    size_t len = prefix ? strlen(prefix) : 0;
    int64_t hits = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const char *nm = p->names[i];
        bool match =
            len == 0 || (strncmp(nm, prefix, len) == 0 && (nm[len] == '\0' || nm[len] == '.'));
        if (!match || p->buffer[i]) continue;
        hits++;
        oj_tensor *t = p->tensors[i];
        if (frozen) oj_zero_grad(t);
        oj_set_requires_grad(t, !frozen);
    }
    return hits;
}

void oj_params_zero_grad(oj_params *p) {
    for (int64_t i = 0; p && i < p->n; i++) oj_zero_grad(p->tensors[i]);
}

oj_status oj_params_to_dtype(oj_params *p, oj_dtype dt) {
    if (p == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = p->eng;
    if (!oj_dtype_is_float(dt))
        return oj_set_error(eng, OJ_ERR_DTYPE, "params_to_dtype: %s is not a float dtype",
                            oj_dtype_name(dt));
    oj_tensor **staged = calloc((size_t)(p->n > 0 ? p->n : 1), sizeof *staged);
    if (staged == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "params_to_dtype: out of host memory");
    bool prev = oj_set_grad_enabled(eng, false);
    bool ok = true;
    /* stage every copy first and check every swap: a failure changes nothing */
    for (int64_t i = 0; ok && i < p->n; i++) {
        oj_tensor *t = p->tensors[i];
        if (!oj_dtype_is_float(t->dtype) || t->dtype == dt) continue;
        staged[i] = oj_cast(t, dt);
        if (staged[i]) oj__scope_detach(staged[i]); /* owned here, released below */
        ok = staged[i] != NULL && oj__set_data_ok(t, staged[i]);
        if (staged[i] == NULL) { /* name the tensor: "cast: cannot allocate ..." alone does not */
            oj_status st = oj_last_status(eng);
            char why[400];
            snprintf(why, sizeof why, "%s", st != OJ_OK ? oj_last_error(eng) : "cast failed");
            oj_clear_error(eng); /* the first error wins: replace it by the named one */
            oj_set_error(eng, st != OJ_OK ? st : OJ_ERR_INTERNAL,
                         "params_to_dtype: converting '%s' to %s (nothing was converted): %s",
                         p->names[i], oj_dtype_name(dt), why);
        }
    }
    for (int64_t i = 0; ok && i < p->n; i++)
        if (staged[i] && oj_set_data(p->tensors[i], staged[i]) != OJ_OK) ok = false;
    for (int64_t i = 0; i < p->n; i++) oj_release(staged[i]);
    free(staged);
    oj_set_grad_enabled(eng, prev);
    return ok ? OJ_OK : oj_last_status(eng);
}

void oj_params_set_training(oj_params *p, bool training) {
    if (p) p->training = training;
}
bool oj_params_training(const oj_params *p) { return p ? p->training : false; }

oj_named_tensors oj_params_state_dict(const oj_params *p) {
    oj_named_tensors nt = {0};
    if (p == NULL) return nt;
    nt.n = p->n;
    nt.names = (const char *const *)p->names;
    nt.tensors = (oj_tensor *const *)p->tensors;
    return nt;
}

void oj__params_truncate(oj_params *p, int64_t n) {
    while (p->n > n) {
        p->n--;
        free(p->names[p->n]);
        oj_release(p->tensors[p->n]);
    }
}

oj_tensor *oj__nn_add(oj_params *p, const char *prefix, const char *leaf, int rank,
                      const int64_t *shape, oj_dtype dt, const oj_init *init, bool buffer) {
    if (p == NULL) return NULL;
    char name[OJ_PARAM_NAME_MAX];
    if (oj_param_name(name, sizeof name, prefix, leaf) == NULL) {
        oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT, "params: name '%s.%s' is too long",
                     prefix ? prefix : "", leaf);
        return NULL;
    }
    return buffer ? oj_params_add_buffer(p, name, rank, shape, dt, init)
                  : oj_params_add(p, name, rank, shape, dt, init);
}

oj_status oj__nn_fail(oj_params *p, int64_t mark) {
    oj__params_truncate(p, mark);
    oj_status st = oj_last_status(p->eng);
    return st != OJ_OK ? st : OJ_ERR_INTERNAL;
}

bool oj__nn_positive(oj_params *p, const char *layer, const char *what, int64_t v) {
    if (v > 0) return true;
    oj_set_error(p->eng, OJ_ERR_INVALID_ARGUMENT, "%s: %s must be > 0, got %lld", layer, what,
                 (long long)v);
    return false;
}
