/* The optimizer's state_dict: moments, momentum buffers and step counts as
 * named tensors, saved and loaded through safetensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim_internal.h"

/* Append "<name>.<suffix>" -> t to the state_dict view. */
static bool sd_push(oj_optim *o, const char *name, const char *suffix, oj_tensor *t) {
    if (t == NULL) return true;
    if (o->sd_n == o->sd_cap) {
        int64_t cap = o->sd_cap ? 2 * o->sd_cap : 32;
        char **nn = realloc(o->sd_names, (size_t)cap * sizeof *nn);
        if (nn == NULL) return false;
        o->sd_names = nn;
        oj_tensor **nt = realloc(o->sd_tensors, (size_t)cap * sizeof *nt);
        if (nt == NULL) return false;
        o->sd_tensors = nt;
        o->sd_cap = cap;
    }
    size_t len = strlen(name) + strlen(suffix) + 2;
    char *s = malloc(len);
    if (s == NULL) return false;
    snprintf(s, len, "%s.%s", name, suffix);
    o->sd_names[o->sd_n] = s;
    o->sd_tensors[o->sd_n] = t;
    o->sd_n++;
    return true;
}

/* Rebuild the state_dict view from the groups (counters first). */
static bool sd_rebuild(oj_optim *o) {
    for (int64_t i = 0; i < o->sd_n; i++) free(o->sd_names[i]);
    o->sd_n = 0;
    if (!sd_push(o, "__optim__", "counters", o->counters)) return false;
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) {
            oj_optim_slot *p = &o->groups[g].params[i];
            if (!sd_push(o, p->name, "exp_avg", p->exp_avg) ||
                !sd_push(o, p->name, "exp_avg_sq", p->exp_avg_sq) ||
                !sd_push(o, p->name, "momentum_buffer", p->momentum_buffer) ||
                !sd_push(o, p->name, "step", p->step_tensor))
                return false;
        }
    return true;
}

oj_status oj_optim_state(oj_optim *o, oj_named_tensors *out) {
    if (o == NULL || out == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (!sd_rebuild(o))
        return oj_set_error(o->eng, OJ_ERR_CAPACITY, "optim state: out of host memory");
    oj_status st = OJ_OK;
    int64_t counts[2] = {o->steps, o->skipped};
    for (int k = 0; k < 2 && st == OJ_OK; k++) {
        oj_tensor *c = oj_narrow(o->counters, 0, k, 1);
        st = c ? oj_fill_(c, (double)counts[k]) : oj_last_status(o->eng);
        oj_release(c);
    }
    for (int g = 0; g < o->ngroups && st == OJ_OK; g++)
        for (int64_t i = 0; i < o->groups[g].n && st == OJ_OK; i++)
            st = oj_fill_(o->groups[g].params[i].step_tensor, (double)o->groups[g].params[i].step);
    if (st != OJ_OK) return st;
    out->n = o->sd_n;
    out->names = (const char *const *)o->sd_names;
    out->tensors = (oj_tensor *const *)o->sd_tensors;
    return OJ_OK;
}

/* Read every step count from the state tensors into steps[] (counters
 * first), checking they are >= 0. */
static oj_status read_counts(oj_optim *o, int64_t *vals) {
    int64_t k = 0;
    int64_t c[2];
    oj_status st = oj_to_host(o->counters, c, sizeof c);
    if (st != OJ_OK) return st;
    vals[k++] = c[0];
    vals[k++] = c[1];
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) {
            st = oj_to_host(o->groups[g].params[i].step_tensor, &vals[k], sizeof vals[k]);
            if (st != OJ_OK) return st;
            if (vals[k] < 0)
                return oj_set_error(o->eng, OJ_ERR_CORRUPT, "optim state: '%s.step' is %lld (< 0)",
                                    o->groups[g].params[i].name, (long long)vals[k]);
            k++;
        }
    if (c[0] < 0 || c[1] < 0)
        return oj_set_error(o->eng, OJ_ERR_CORRUPT,
                            "optim state: '__optim__.counters' holds %lld, %lld (< 0)",
                            (long long)c[0], (long long)c[1]);
    return OJ_OK;
}

static int64_t n_params(const oj_optim *o) {
    int64_t n = 0;
    for (int g = 0; g < o->ngroups; g++) n += o->groups[g].n;
    return n;
}

static void apply_counts(oj_optim *o, const int64_t *vals) {
    int64_t k = 2;
    o->steps = vals[0];
    o->skipped = vals[1];
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) o->groups[g].params[i].step = vals[k++];
}

oj_status oj_optim_state_sync(oj_optim *o) {
    if (o == NULL) return OJ_ERR_INVALID_ARGUMENT;
    int64_t *vals = malloc((size_t)(n_params(o) + 2) * sizeof *vals);
    if (vals == NULL)
        return oj_set_error(o->eng, OJ_ERR_CAPACITY, "optim state: out of host memory");
    oj_status st = read_counts(o, vals);
    if (st == OJ_OK) apply_counts(o, vals);
    free(vals);
    return st;
}

oj_status oj_optim_save(oj_optim *o, const char *path, oj_error *err) {
    if (o == NULL || path == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "optim save: NULL optimizer or path");
    oj_named_tensors sd;
    oj_status st = oj_optim_state(o, &sd);
    if (st != OJ_OK) return oj_error_set(err, st, "optim save: %s", oj_last_error(o->eng));
    return oj_safetensors_save(path, sd.n, sd.names, sd.tensors, NULL, err);
}

/* Check the file against the live state: same names, shapes, dtypes. */
static oj_status check_file(oj_optim *o, oj_safetensors *st, const char *path, oj_error *err) {
    if (oj_safetensors_count(st) != o->sd_n) {
        for (int64_t i = 0; i < oj_safetensors_count(st); i++) {
            const char *nm = oj_safetensors_name(st, i);
            bool found = false;
            for (int64_t j = 0; j < o->sd_n && !found; j++) found = strcmp(o->sd_names[j], nm) == 0;
            if (!found)
                return oj_error_set(err, OJ_ERR_SHAPE, "optim load %s: unexpected tensor '%s'",
                                    path, nm);
        }
    }
    for (int64_t j = 0; j < o->sd_n; j++) {
        const char *nm = o->sd_names[j];
        oj_tensor *t = o->sd_tensors[j];
        int64_t i = oj_safetensors_find(st, nm);
        if (i < 0)
            return oj_error_set(err, OJ_ERR_SHAPE, "optim load %s: missing tensor '%s'", path, nm);
        if (oj_safetensors_dtype(st, i) != t->dtype)
            return oj_error_set(err, OJ_ERR_DTYPE, "optim load %s: '%s' is %s, expected %s", path,
                                nm, oj_safetensors_dtype_str(st, i),
                                oj_safetensors_dtype_to_str(t->dtype));
        int r = oj_safetensors_rank(st, i);
        const int64_t *sh = oj_safetensors_shape(st, i);
        bool same = r == t->rank;
        for (int d = 0; same && d < r; d++) same = sh[d] == t->shape[d];
        if (!same) {
            char b1[128], b2[128];
            return oj_error_set(err, OJ_ERR_SHAPE, "optim load %s: '%s' has shape %s, expected %s",
                                path, nm, oj__shape_fmt(b1, sizeof b1, r, sh),
                                oj__shape_fmt(b2, sizeof b2, t->rank, t->shape));
        }
    }
    if (oj_safetensors_count(st) != o->sd_n)
        return oj_error_set(err, OJ_ERR_SHAPE, "optim load %s: %lld tensors, expected %lld", path,
                            (long long)oj_safetensors_count(st), (long long)o->sd_n);
    return OJ_OK;
}

/* Value(s) of the i64 tensor `name` in the file into vals, checked >= 0. */
static oj_status file_i64(oj_safetensors *st, const char *path, const char *name, int64_t *vals,
                          int64_t n, oj_error *err) {
    size_t nb = 0;
    const unsigned char *d = oj_safetensors_data(st, oj_safetensors_find(st, name), &nb);
    if (d == NULL || nb != (size_t)n * 8)
        return oj_error_set(err, OJ_ERR_CORRUPT, "optim load %s: '%s' is not %lld i64 values", path,
                            name, (long long)n);
    for (int64_t e = 0; e < n; e++) {
        memcpy(&vals[e], d + 8 * e, 8);
        if (vals[e] < 0)
            return oj_error_set(err, OJ_ERR_CORRUPT, "optim load %s: '%s' holds %lld (< 0)", path,
                                name, (long long)vals[e]);
    }
    return OJ_OK;
}

/* Step counts from the file, in apply_counts order. */
static oj_status file_counts(oj_optim *o, oj_safetensors *st, const char *path, int64_t *vals,
                             oj_error *err) {
    oj_status s = file_i64(st, path, "__optim__.counters", vals, 2, err);
    int64_t k = 2;
    for (int g = 0; g < o->ngroups && s == OJ_OK; g++)
        for (int64_t i = 0; i < o->groups[g].n && s == OJ_OK; i++) {
            const char *pn = o->groups[g].params[i].name;
            size_t len = strlen(pn) + 6;
            char *nm = malloc(len);
            if (nm == NULL)
                return oj_error_set(err, OJ_ERR_CAPACITY, "optim load: out of host memory");
            snprintf(nm, len, "%s.step", pn);
            s = file_i64(st, path, nm, &vals[k++], 1, err);
            free(nm);
        }
    return s;
}

oj_status oj_optim_load(oj_optim *o, const char *path, oj_error *err) {
    if (o == NULL || path == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "optim load: NULL optimizer or path");
    oj_engine *eng = o->eng;
    if (!sd_rebuild(o)) return oj_error_set(err, OJ_ERR_CAPACITY, "optim load: out of host memory");
    oj_safetensors *st = NULL;
    oj_status s = oj_safetensors_open(path, &st, err);
    if (s != OJ_OK) return s;
    int64_t *vals = malloc((size_t)(n_params(o) + 2) * sizeof *vals);
    oj_tensor **staged = calloc((size_t)o->sd_n, sizeof *staged);
    if (vals == NULL || staged == NULL)
        s = oj_error_set(err, OJ_ERR_CAPACITY, "optim load: out of host memory");
    if (s == OJ_OK) s = check_file(o, st, path, err);
    if (s == OJ_OK) s = file_counts(o, st, path, vals, err);
    if (s == OJ_OK) s = oj_scope_begin(eng);
    if (s == OJ_OK) {
        /* Stage every tensor on the device first; only then overwrite. */
        for (int64_t j = 0; j < o->sd_n && s == OJ_OK; j++) {
            staged[j] = oj_safetensors_tensor(st, eng, o->sd_names[j]);
            if (staged[j] == NULL)
                s = oj_error_set(err, oj_last_status(eng), "optim load %s: %s", path,
                                 oj_last_error(eng));
        }
        for (int64_t j = 0; j < o->sd_n && s == OJ_OK; j++) {
            s = oj_copy_(o->sd_tensors[j], staged[j]);
            if (s != OJ_OK)
                s = oj_error_set(err, s, "optim load %s: copying '%s' failed: %s", path,
                                 o->sd_names[j], oj_last_error(eng));
        }
        oj_scope_end(eng);
    }
    if (s == OJ_OK) apply_counts(o, vals);
    free(staged);
    free(vals);
    oj_safetensors_close(st);
    return s;
}
