/* One optimizer step: gradient norm check, update computation, an optional
 * read-only finiteness pass, then the writing pass. All or nothing for
 * numerical problems. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "optim/optim_internal.h"

/* Per parameter, what the step computed before writing. */
typedef struct {
    oj_optim_slot *p;
    const oj_optim_hparams *hp;
    oj_tensor *grad;   /* contiguous */
    oj_tensor *update; /* Muon: orthogonalised update */
} work_item;

static oj_status skip(oj_optim *o, oj_optim_step_info *info, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static oj_status skip(oj_optim *o, oj_optim_step_info *info, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->message, sizeof o->message, fmt, ap);
    va_end(ap);
    o->skipped++;
    if (info) info->skipped = true;
    return OJ_ERR_NUMERIC;
}

static double lr_of(const oj_optim *o, const oj_optim_hparams *hp) { return hp->lr * o->lr_scale; }

/* Run the kernel of one item; check_only writes nothing. */
static oj_status run_item(oj_optim *o, work_item *w, bool check_only) {
    oj_engine *eng = o->eng;
    const oj_optim_hparams *hp = w->hp;
    oj_optim_slot *p = w->p;
    double lr = lr_of(o, hp);
    switch (hp->algo) {
    case OJ_OPTIM_ADAM:
    case OJ_OPTIM_ADAMW: {
        double step = (double)(p->step + 1);
        oj_adam_args a = {.lr = lr,
                          .beta1 = hp->beta1,
                          .beta2 = hp->beta2,
                          .eps = hp->eps,
                          .weight_decay = hp->weight_decay,
                          .bias_correction1 = 1.0 - pow(hp->beta1, step),
                          .bias_correction2 = 1.0 - pow(hp->beta2, step),
                          .decoupled = hp->algo == OJ_OPTIM_ADAMW};
        return eng->backend->adam_step(eng, p->param, w->grad, p->exp_avg, p->exp_avg_sq, &a,
                                       check_only);
    }
    case OJ_OPTIM_SGD: {
        oj_sgd_args a = {.lr = lr,
                         .momentum = hp->momentum,
                         .dampening = hp->dampening,
                         .weight_decay = hp->weight_decay,
                         .nesterov = hp->nesterov,
                         .first = p->step == 0};
        return eng->backend->sgd_step(eng, p->param, w->grad, p->momentum_buffer, &a, check_only);
    }
    case OJ_OPTIM_MUON: {
        oj_status st = OJ_OK;
        if (!check_only)
            st = eng->backend->muon_momentum(eng, p->momentum_buffer, w->grad, NULL, hp->momentum,
                                             hp->nesterov);
        if (st == OJ_OK)
            st = eng->backend->apply_update(eng, p->param, w->update, -lr, oj__muon_scale(p->param),
                                            1.0 - lr * hp->weight_decay, check_only);
        return st;
    }
    }
    return OJ_ERR_INTERNAL;
}

static bool kernels_present(oj_optim *o) {
    const oj_backend *b = o->eng->backend;
    for (int g = 0; g < o->ngroups; g++) {
        oj_optim_algo a = o->groups[g].hp.algo;
        bool ok = a == OJ_OPTIM_SGD    ? b->sgd_step != NULL
                  : a == OJ_OPTIM_MUON ? (b->muon_momentum != NULL && b->apply_update != NULL)
                                       : b->adam_step != NULL;
        if (!ok) {
            oj_set_error(o->eng, OJ_ERR_UNSUPPORTED, "optim %s: not implemented on the %s backend",
                         oj__optim_algo_name(a), b->name);
            return false;
        }
    }
    return true;
}

/* Collect the parameters that have a grad, checking each grad. */
static oj_status collect(oj_optim *o, work_item *items, int64_t *n_out) {
    int64_t n = 0;
    for (int g = 0; g < o->ngroups; g++) {
        oj_optim_group *grp = &o->groups[g];
        for (int64_t i = 0; i < grp->n; i++) {
            oj_optim_slot *p = &grp->params[i];
            if (!oj__live(p->param))
                return oj_set_error(
                    o->eng, OJ_ERR_INVALID_ARGUMENT,
                    "optim: parameter '%s' was released while the optimizer uses it", p->name);
            oj_tensor *g0 = p->param->grad;
            if (g0 == NULL) continue;
            if (g0->dtype != p->param->dtype || oj_numel(g0) != oj_numel(p->param)) {
                char b1[128], b2[128];
                return oj_set_error(
                    o->eng, OJ_ERR_SHAPE, "optim: grad of '%s' is %s %s, parameter %s %s", p->name,
                    oj_dtype_name(g0->dtype), oj__shape_fmt(b1, sizeof b1, g0->rank, g0->shape),
                    oj_dtype_name(p->param->dtype),
                    oj__shape_fmt(b2, sizeof b2, p->param->rank, p->param->shape));
            }
            oj_tensor *gc = oj_contiguous(g0);
            if (gc == NULL) return oj_last_status(o->eng);
            items[n++] = (work_item){.p = p, .hp = &grp->hp, .grad = gc, .update = NULL};
        }
    }
    *n_out = n;
    return OJ_OK;
}

/* Same Newton-Schulz batch: same param group (hp), shape and dtype. */
static bool same_batch(const work_item *a, const work_item *b) {
    const oj_tensor *x = a->p->param, *y = b->p->param;
    return a->hp == b->hp && x->dtype == y->dtype && x->shape[0] == y->shape[0] &&
           x->shape[1] == y->shape[1];
}

/* Muon's orthogonalised updates, the items grouped by (param group, shape,
 * dtype) in order of first appearance, one batched Newton-Schulz per
 * group. */
static oj_status muon_updates(oj_optim *o, work_item *items, int64_t n) {
    oj_engine *eng = o->eng;
    int64_t *member = malloc((size_t)(n ? n : 1) * sizeof *member);
    oj_optim_slot **ps = malloc((size_t)(n ? n : 1) * sizeof *ps);
    oj_tensor **gs = malloc((size_t)(n ? n : 1) * sizeof *gs);
    oj_tensor **us = malloc((size_t)(n ? n : 1) * sizeof *us);
    oj_status st = OJ_OK;
    if (member == NULL || ps == NULL || gs == NULL || us == NULL)
        st = oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    for (int64_t i = 0; i < n && st == OJ_OK; i++) {
        if (items[i].hp->algo != OJ_OPTIM_MUON || items[i].update != NULL) continue;
        int64_t k = 0;
        for (int64_t j = i; j < n; j++)
            if (items[j].hp->algo == OJ_OPTIM_MUON && items[j].update == NULL &&
                same_batch(&items[i], &items[j])) {
                member[k] = j;
                ps[k] = items[j].p;
                gs[k++] = items[j].grad;
            }
        st = oj__muon_update_batch(k, ps, gs, items[i].hp, us);
        for (int64_t m = 0; m < k && st == OJ_OK; m++) items[member[m]].update = us[m];
    }
    free(member);
    free(ps);
    free(gs);
    free(us);
    return st;
}

static oj_status step_scoped(oj_optim *o, work_item *items, oj_optim_step_info *info) {
    oj_engine *eng = o->eng;
    int64_t n = 0;
    oj_status st = collect(o, items, &n);
    if (st != OJ_OK) return st;

    /* 1. gradients must be finite: one global norm */
    double sumsq = 0.0;
    double *norms = calloc((size_t)(n ? n : 1), sizeof *norms);
    oj_tensor **gs = calloc((size_t)(n ? n : 1), sizeof *gs);
    if (norms == NULL || gs == NULL) {
        free(norms);
        free(gs);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    }
    /* oj_optim_clip_grad_norm just measured these very grads (same
     * handles, unwritten since its own scaling): take its norms, scaled as
     * the grads were, instead of measuring again */
    bool from_clip = n > 0;
    for (int64_t i = 0; i < n && from_clip; i++) {
        const oj_optim_slot *p = items[i].p;
        from_clip = p->clip_grad != NULL && p->clip_grad == p->param->grad &&
                    oj_version(p->clip_grad) == p->clip_version;
        norms[i] = p->clip_norm;
    }
    if (!from_clip) {
        for (int64_t i = 0; i < n; i++) gs[i] = items[i].grad;
        st = oj__optim_norms(eng, n, gs, norms); /* one read-back on a device */
    }
    free(gs);
    if (st != OJ_OK) {
        free(norms);
        return st;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = norms[i];
        if (!isfinite(v)) {
            free(norms);
            if (info) info->grad_norm = v;
            return skip(o, info,
                        "optim: step skipped: the gradient of '%s' is not finite (norm %g)",
                        items[i].p->name, v);
        }
        sumsq += v * v;
    }
    free(norms);
    if (info) info->grad_norm = sqrt(sumsq);

    /* 2. updates that need more than one pass (Muon), state untouched */
    st = muon_updates(o, items, n);
    if (st != OJ_OK) return st;

    /* 3. read-only pass: nothing may become non-finite */
    if (o->check_update)
        for (int64_t i = 0; i < n; i++) {
            st = run_item(o, &items[i], true);
            if (st == OJ_ERR_NUMERIC)
                return skip(o, info, "optim: step skipped: the %s update of '%s' is not finite",
                            oj__optim_algo_name(items[i].hp->algo), items[i].p->name);
            if (st != OJ_OK)
                return oj_set_error(eng, st, "optim %s: kernel failed on '%s'",
                                    oj__optim_algo_name(items[i].hp->algo), items[i].p->name);
        }

    /* 4. write */
    for (int64_t i = 0; i < n; i++) {
        oj_optim_slot *p = items[i].p;
        st = run_item(o, &items[i], false);
        if (st != OJ_OK && st != OJ_ERR_NUMERIC)
            return oj_set_error(eng, st, "optim %s: kernel failed on '%s' (step partly applied)",
                                oj__optim_algo_name(items[i].hp->algo), p->name);
        p->step++;
        oj_bump_version(p->param);
        if (p->exp_avg) oj_bump_version(p->exp_avg);
        if (p->exp_avg_sq) oj_bump_version(p->exp_avg_sq);
        if (p->momentum_buffer) oj_bump_version(p->momentum_buffer);
    }
    o->steps++;
    if (info) info->params_updated = n;
    return OJ_OK;
}

oj_status oj_optim_step(oj_optim *o, oj_optim_step_info *info) {
    if (o == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = o->eng;
    if (info) *info = (oj_optim_step_info){0};
    o->message[0] = '\0';
    if (!(isfinite(o->lr_scale) && o->lr_scale >= 0))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "optim: lr scale %g must be finite and >= 0", o->lr_scale);
    for (int g = 0; g < o->ngroups; g++) {
        const oj_optim_group *grp = &o->groups[g];
        oj_status hs = oj__optim_hparams_check(eng, &grp->hp);
        if (hs != OJ_OK) return hs;
        if (grp->hp.algo != grp->algo)
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                "optim: group %d was created as %s; its algorithm cannot change", g,
                                oj__optim_algo_name(grp->algo));
        if (grp->algo == OJ_OPTIM_SGD && (grp->hp.momentum != 0.0) != grp->momentum)
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                "optim: sgd group %d was created with%s momentum; it cannot be "
                                "switched %s",
                                g, grp->momentum ? "" : "out", grp->momentum ? "off" : "on");
    }
    if (!kernels_present(o)) return OJ_ERR_UNSUPPORTED;
    int64_t total = 0;
    for (int g = 0; g < o->ngroups; g++) total += o->groups[g].n;
    work_item *items = calloc(total ? (size_t)total : 1, sizeof *items);
    if (items == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    oj_status st = oj_scope_begin(eng);
    if (st == OJ_OK) {
        bool prev = oj_set_grad_enabled(eng, false);
        /* the update runs in the parameters' dtype (f32 master weights),
         * whatever autocast says */
        bool prev_ac = oj_set_autocast(eng, false, OJ_BF16);
        st = step_scoped(o, items, info);
        oj__optim_clip_cache_clear(o); /* good for this step only */
        if (prev_ac) oj_set_autocast(eng, true, oj_autocast_dtype(eng));
        oj_set_grad_enabled(eng, prev);
        oj_scope_end(eng);
    }
    free(items);
    return st;
}
