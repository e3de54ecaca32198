/* state_dict files of a parameter registry: safetensors save, and a strict,
 * all-or-nothing load. */
#include <stdlib.h>

#include "core/internal.h"
#include "nn/nn_internal.h"

oj_status oj_params_save(const oj_params *p, const char *path, const char *const *metadata,
                         oj_error *err) {
    if (p == NULL || path == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "params save: NULL registry or path");
    return oj_safetensors_save(path, p->n, (const char *const *)p->names,
                               (oj_tensor *const *)p->tensors, metadata, err);
}

/* Check file tensor i against live tensor t (named nm). */
static oj_status check_one(oj_safetensors *st, int64_t i, oj_tensor *t, const char *nm,
                           const char *path, oj_error *err) {
    oj_dtype fd = oj_safetensors_dtype(st, i);
    bool conv = oj_dtype_is_float(fd) && oj_dtype_is_float(t->dtype);
    if (fd != t->dtype && !conv)
        return oj_error_set(err, OJ_ERR_DTYPE, "params load %s: '%s' is %s, expected %s", path, nm,
                            oj_safetensors_dtype_str(st, i), oj_safetensors_dtype_to_str(t->dtype));
    int r = oj_safetensors_rank(st, i);
    const int64_t *sh = oj_safetensors_shape(st, i);
    bool same = r == t->rank;
    for (int d = 0; same && d < r; d++) same = sh[d] == t->shape[d];
    if (!same) {
        char b1[128], b2[128];
        return oj_error_set(err, OJ_ERR_SHAPE, "params load %s: '%s' has shape %s, expected %s",
                            path, nm, oj__shape_fmt(b1, sizeof b1, r, sh),
                            oj__shape_fmt(b2, sizeof b2, t->rank, t->shape));
    }
    return OJ_OK;
}

oj_status oj_params_load(oj_params *p, const char *path, bool strict, oj_error *err) {
    if (p == NULL || path == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "params load: NULL registry or path");
    oj_engine *eng = p->eng;
    oj_safetensors *st = NULL;
    oj_status s = oj_safetensors_open(path, &st, err);
    if (s != OJ_OK) return s;
    int64_t *idx = malloc((size_t)(p->n ? p->n : 1) * sizeof *idx);
    oj_tensor **staged = calloc((size_t)(p->n ? p->n : 1), sizeof *staged);
    if (idx == NULL || staged == NULL)
        s = oj_error_set(err, OJ_ERR_CAPACITY, "params load: out of host memory");
    /* 1. names and shapes */
    for (int64_t j = 0; s == OJ_OK && j < p->n; j++) {
        idx[j] = oj_safetensors_find(st, p->names[j]);
        if (idx[j] < 0 && strict)
            s = oj_error_set(err, OJ_ERR_SHAPE, "params load %s: missing tensor '%s'", path,
                             p->names[j]);
        else if (idx[j] >= 0)
            s = check_one(st, idx[j], p->tensors[j], p->names[j], path, err);
    }
    for (int64_t i = 0; s == OJ_OK && strict && i < oj_safetensors_count(st); i++)
        if (oj_params_find(p, oj_safetensors_name(st, i)) < 0)
            s = oj_error_set(err, OJ_ERR_SHAPE, "params load %s: unexpected tensor '%s'", path,
                             oj_safetensors_name(st, i));
    /* 2. stage everything on the device, 3. then copy */
    if (s == OJ_OK) s = oj_scope_begin(eng);
    if (s == OJ_OK) {
        for (int64_t j = 0; s == OJ_OK && j < p->n; j++) {
            if (idx[j] < 0) continue;
            staged[j] = oj_safetensors_tensor(st, eng, p->names[j]);
            if (staged[j] == NULL)
                s = oj_error_set(err, oj_last_status(eng), "params load %s: %s", path,
                                 oj_last_error(eng));
        }
        bool prev = oj_set_grad_enabled(eng, false);
        for (int64_t j = 0; s == OJ_OK && j < p->n; j++) {
            if (staged[j] == NULL) continue;
            s = oj_copy_(p->tensors[j], staged[j]);
            if (s != OJ_OK)
                s = oj_error_set(err, s, "params load %s: copying '%s' failed: %s", path,
                                 p->names[j], oj_last_error(eng));
        }
        oj_set_grad_enabled(eng, prev);
        oj_scope_end(eng);
    }
    free(idx);
    free(staged);
    oj_safetensors_close(st);
    return s;
}
