/* The optimizer object: groups of named parameters with their state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim_internal.h"

oj_optim *oj_optim_create(oj_engine *eng) {
    if (eng == NULL) return NULL;
    oj_optim *o = calloc(1, sizeof *o);
    if (o == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
        return NULL;
    }
    o->eng = eng;
    o->lr_scale = 1.0;
    o->check_update = true;
    int64_t two = 2;
    o->counters = oj__optim_zeros_unscoped(eng, 1, &two, OJ_I64);
    if (o->counters == NULL) {
        free(o);
        return NULL;
    }
    return o;
}

static void param_free(oj_optim_slot *p) {
    free(p->name);
    oj_release(p->exp_avg);
    oj_release(p->exp_avg_sq);
    oj_release(p->momentum_buffer);
    oj_release(p->step_tensor);
    oj_release(p->clip_grad);
    oj__optim_bounds_drop(p);
}

void oj__optim_truncate_groups(oj_optim *o, int ngroups) {
    while (o->ngroups > ngroups) {
        oj_optim_group *grp = &o->groups[--o->ngroups];
        for (int64_t i = 0; i < grp->n; i++) param_free(&grp->params[i]);
        free(grp->params);
    }
}

void oj_optim_free(oj_optim *o) {
    if (o == NULL) return;
    oj__optim_truncate_groups(o, 0);
    free(o->groups);
    for (int64_t i = 0; i < o->sd_n; i++) free(o->sd_names[i]);
    free(o->sd_names);
    free(o->sd_tensors);
    oj_release(o->counters);
    free(o);
}

oj_engine *oj_optim_engine(const oj_optim *o) { return o ? o->eng : NULL; }

oj_tensor *oj__optim_zeros_unscoped(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt) {
    oj_tensor *t = oj_zeros(eng, rank, shape, dt);
    if (t != NULL) oj__scope_detach(t);
    return t;
}

/* Is tensor t or name already in the optimizer? */
static const char *find_dup(const oj_optim *o, const char *name, const oj_tensor *t) {
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) {
            const oj_optim_slot *p = &o->groups[g].params[i];
            if (strcmp(p->name, name) == 0) return "name";
            if (p->param == t) return "tensor";
        }
    return NULL;
}

oj_status oj__optim_check_tensor(oj_engine *eng, const oj_optim_hparams *hp, const char *name,
                                 const oj_tensor *t, bool later) {
    const char *alg = oj__optim_algo_name(hp->algo);
    const char *now = later ? "now " : "";
    const char *why = later ? " (its data was replaced after it was added)" : "";
    char b[128];
    if (t->dtype != OJ_F32 && t->dtype != OJ_F64)
        return oj_set_error(eng, OJ_ERR_DTYPE, "optim %s: parameter '%s' is %s%s%s; f32 or f64 "
                            "expected%s", alg, name, now, oj_dtype_name(t->dtype), why,
                            later ? ": create the optimizer after converting" : "");
    if (!oj_is_contiguous(t) || t->grad_fn != NULL) {
        if (later)
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "optim %s: parameter '%s' %s is no "
                                "longer contiguous%s; it must be a contiguous leaf tensor", alg,
                                name, oj__shape_fmt(b, sizeof b, t->rank, t->shape), why);
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "optim %s: parameter '%s' must be a contiguous leaf tensor", alg, name);
    }
    return OJ_OK;
}

oj_status oj__optim_check_muon_shape(oj_engine *eng, const oj_optim_hparams *hp, const char *name,
                                     const oj_tensor *t, bool later) {
    char b[128];
    if (hp->algo == OJ_OPTIM_MUON && t->rank != 2)
        return oj_set_error(eng, OJ_ERR_SHAPE,
                            "optim muon: parameter '%s' %s %s; Muon takes 2-D matrices", name,
                            later ? "is now" : "has shape",
                            oj__shape_fmt(b, sizeof b, t->rank, t->shape));
    return OJ_OK;
}

static oj_status check_param(oj_optim *o, const oj_optim_hparams *hp, const char *name,
                             oj_tensor *t) {
    oj_engine *eng = o->eng;
    const char *alg = oj__optim_algo_name(hp->algo);
    if (name == NULL || name[0] == '\0')
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "optim %s: a parameter has no name", alg);
    if (t == NULL || !oj__live(t))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "optim %s: parameter '%s' is %s", alg,
                            name, t == NULL ? "NULL" : "a released tensor");
    if (t->eng != eng)
        return oj_set_error(eng, OJ_ERR_DEVICE,
                            "optim %s: parameter '%s' belongs to another engine", alg, name);
    if (!t->requires_grad) return OJ_OK; /* left out (frozen, buffer): nothing else to check */
    if (oj__optim_check_tensor(eng, hp, name, t, false) != OJ_OK ||
        oj__optim_check_muon_shape(eng, hp, name, t, false) != OJ_OK)
        return oj_last_status(eng);
    const char *dup = find_dup(o, name, t);
    if (dup != NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "optim %s: parameter '%s': the same %s is already in the optimizer",
                            alg, name, dup);
    return OJ_OK;
}

static bool param_init(oj_optim *o, const oj_optim_hparams *hp, const char *name, oj_tensor *t,
                       oj_optim_slot *p) {
    memset(p, 0, sizeof *p);
    p->param = t;
    p->name = strdup(name);
    if (p->name == NULL) {
        oj_set_error(o->eng, OJ_ERR_CAPACITY, "optim: out of host memory");
        return false;
    }
    bool ok = true;
    if (hp->algo == OJ_OPTIM_ADAM || hp->algo == OJ_OPTIM_ADAMW) {
        ok = (p->exp_avg = oj__optim_zeros_unscoped(o->eng, t->rank, t->shape, t->dtype)) &&
             (p->exp_avg_sq = oj__optim_zeros_unscoped(o->eng, t->rank, t->shape, t->dtype));
    } else if (hp->algo == OJ_OPTIM_MUON || hp->momentum != 0.0) {
        ok = (p->momentum_buffer = oj__optim_zeros_unscoped(o->eng, t->rank, t->shape, t->dtype));
    }
    if (ok) ok = (p->step_tensor = oj__optim_zeros_unscoped(o->eng, 0, NULL, OJ_I64)) != NULL;
    return ok;
}

int oj_optim_add_group(oj_optim *o, const oj_optim_hparams *hp, const oj_named_tensors *params) {
    if (o == NULL) return -1;
    oj_engine *eng = o->eng;
    if (oj__optim_hparams_check(eng, hp) != OJ_OK) return -1;
    if (params == NULL || params->n < 0 ||
        (params->n > 0 && (!params->names || !params->tensors))) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "optim: add_group given no parameter list");
        return -1;
    }
    /* Validate everything first, including duplicates inside the list. */
    int64_t take = 0;
    for (int64_t i = 0; i < params->n; i++) {
        oj_tensor *t = params->tensors[i];
        if (check_param(o, hp, params->names[i], t) != OJ_OK) return -1;
        if (!t->requires_grad) continue;
        for (int64_t j = 0; j < i; j++)
            if (strcmp(params->names[j], params->names[i]) == 0 || params->tensors[j] == t) {
                oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                             "optim %s: parameter '%s' is listed twice",
                             oj__optim_algo_name(hp->algo), params->names[i]);
                return -1;
            }
        take++;
    }
    oj_optim_group *ng = realloc(o->groups, (size_t)(o->ngroups + 1) * sizeof *ng);
    if (ng == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
        return -1;
    }
    o->groups = ng;
    oj_optim_group *grp = &o->groups[o->ngroups];
    memset(grp, 0, sizeof *grp);
    grp->hp = *hp;
    grp->algo = hp->algo;
    grp->momentum = hp->algo == OJ_OPTIM_MUON || hp->momentum != 0.0;
    grp->params = calloc(take ? (size_t)take : 1, sizeof *grp->params);
    bool ok = grp->params != NULL;
    if (!ok) oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    for (int64_t i = 0; ok && i < params->n; i++) {
        oj_tensor *t = params->tensors[i];
        if (!t->requires_grad) continue;
        ok = param_init(o, hp, params->names[i], t, &grp->params[grp->n]);
        grp->n++;
        if (ok && o->weight_copies) oj__wcopy_keep(t, true);
    }
    if (!ok) {
        if (oj_last_status(eng) == OJ_OK)
            oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of memory for parameter state");
        for (int64_t i = 0; i < grp->n; i++) param_free(&grp->params[i]);
        free(grp->params);
        return -1;
    }
    return o->ngroups++;
}

int oj_optim_group_count(const oj_optim *o) { return o ? o->ngroups : 0; }

oj_status oj_optim_set_weight_copies(oj_optim *o, bool on) {
    if (o == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (!on && o->weight_copies && o->eng->graphs != NULL)
        return oj_set_error(o->eng, OJ_ERR_STATE,
                            "optim: weight copies cannot be dropped while CUDA graphs are alive "
                            "(a graph may read them); free the graphs first");
    o->weight_copies = on;
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) oj__wcopy_keep(o->groups[g].params[i].param, on);
    return OJ_OK;
}

bool oj_optim_weight_copies(const oj_optim *o) { return o && o->weight_copies; }

oj_optim_hparams *oj_optim_group_hparams(oj_optim *o, int group) {
    if (o == NULL || group < 0 || group >= o->ngroups) return NULL;
    return &o->groups[group].hp;
}

int64_t oj_optim_group_size(const oj_optim *o, int group) {
    if (o == NULL || group < 0 || group >= o->ngroups) return 0;
    return o->groups[group].n;
}

static const oj_optim_slot *param_at(const oj_optim *o, int group, int64_t i) {
    if (o == NULL || group < 0 || group >= o->ngroups || i < 0 || i >= o->groups[group].n)
        return NULL;
    return &o->groups[group].params[i];
}

const char *oj_optim_param_name(const oj_optim *o, int group, int64_t i) {
    const oj_optim_slot *p = param_at(o, group, i);
    return p ? p->name : NULL;
}

oj_tensor *oj_optim_param(const oj_optim *o, int group, int64_t i) {
    const oj_optim_slot *p = param_at(o, group, i);
    return p ? p->param : NULL;
}

void oj_optim_set_lr_scale(oj_optim *o, double scale) {
    if (o) o->lr_scale = scale;
}
double oj_optim_lr_scale(const oj_optim *o) { return o ? o->lr_scale : 0.0; }

bool oj_optim_set_check_update(oj_optim *o, bool on) {
    if (o == NULL) return false;
    bool prev = o->check_update;
    o->check_update = on;
    return prev;
}

void oj_optim_zero_grad(oj_optim *o) {
    if (o == NULL) return;
    oj__optim_clip_cache_clear(o); /* its references would keep the grads alive */
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) oj_zero_grad(o->groups[g].params[i].param);
}

int64_t oj_optim_steps(const oj_optim *o) { return o ? o->steps : 0; }
int64_t oj_optim_skipped_steps(const oj_optim *o) { return o ? o->skipped : 0; }
const char *oj_optim_message(const oj_optim *o) { return o ? o->message : ""; }
