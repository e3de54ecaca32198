/* One optimizer step: gradient norm check, update computation, an optional
 * read-only finiteness pass, then the writing pass. All or nothing for
 * numerical problems. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
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

static bool is_adam(const work_item *w) {
    return w->hp->algo == OJ_OPTIM_ADAM || w->hp->algo == OJ_OPTIM_ADAMW;
}

/* The Adam/AdamW hyperparameters of item w for this step (its slot's own
 * step count: parameters added later, or skipped, are at other steps). */
static oj_adam_args adam_args(const oj_optim *o, const work_item *w) {
    const oj_optim_hparams *hp = w->hp;
    double step = (double)(w->p->step + 1);
    return (oj_adam_args){.lr = lr_of(o, hp),
                          .beta1 = hp->beta1,
                          .beta2 = hp->beta2,
                          .eps = hp->eps,
                          .weight_decay = hp->weight_decay,
                          .bias_correction1 = 1.0 - pow(hp->beta1, step),
                          .bias_correction2 = 1.0 - pow(hp->beta2, step),
                          .decoupled = hp->algo == OJ_OPTIM_ADAMW};
}

/* Run the kernel of one item; check_only writes nothing. */
static oj_status run_item(oj_optim *o, work_item *w, bool check_only) {
    oj_engine *eng = o->eng;
    const oj_optim_hparams *hp = w->hp;
    oj_optim_slot *p = w->p;
    double lr = lr_of(o, hp);
    switch (hp->algo) {
    case OJ_OPTIM_ADAM:
    case OJ_OPTIM_ADAMW: {
        oj_adam_args a = adam_args(o, w);
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

/* Whether no two parameters or gradients of items[0..n) overlap, in
 * *disjoint; OJ_ERR_CAPACITY when the host is out of memory. */
static oj_status items_disjoint(oj_optim *o, const work_item *items, int64_t n, bool *disjoint) {
    oj_tensor **span = malloc(2 * (size_t)n * sizeof *span);
    if (span == NULL) return oj_set_error(o->eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    for (int64_t i = 0; i < n; i++) {
        span[2 * i] = items[i].p->param;
        span[2 * i + 1] = items[i].grad;
    }
    *disjoint = oj__optim_disjoint(2 * n, span);
    free(span);
    return OJ_OK;
}

/* The Adam/AdamW items of a step as one adam_step_multi call per pass
 * (torch's foreach form; on a device a few launches instead of one per
 * parameter and pass, and one status read-back for the check pass).
 * n == 0: each item runs alone. */
typedef struct {
    int64_t n;
    int64_t *idx; /* positions in items */
    oj_tensor **p, **m, **v;
    const oj_tensor **g;
    oj_adam_args *args;
    oj_optim_slot **slot;
} adam_batch;

/* The kept bf16 copy of p's parameter that the step's multi-tensor
 * kernels write beside it (an unscoped handle), or NULL; with
 * transposed_ok (adam_step_multi) the copy of its transpose where it has
 * none of its own layout (*transposed set). */
static oj_tensor *low_target(oj_optim *o, oj_optim_slot *p, bool transposed_ok, bool *transposed) {
    *transposed = false;
    if (!o->weight_copies || !o->eng->backend->low_copies) return NULL;
    oj_tensor *t = oj__wcopy_target(p->param, OJ_BF16, false);
    if (t == NULL && transposed_ok && (t = oj__wcopy_target(p->param, OJ_BF16, true)) != NULL)
        *transposed = true;
    return t;
}

static void adam_batch_free(adam_batch *b) {
    for (int64_t j = 0; b->args && j < b->n; j++) oj_release(b->args[j].low);
    free(b->slot);
    free(b->idx);
    free(b->p);
    free(b->m);
    free(b->v);
    free(b->g);
    free(b->args);
    memset(b, 0, sizeof *b);
}

/* Fill b with the Adam/AdamW items when the backend has adam_step_multi
 * and no two parameters or gradients of the step overlap (the entry's
 * order is not the items' order; with overlapping tensors only the
 * per-item order is defined). The arguments are this step's. */
static oj_status adam_batch_init(oj_optim *o, work_item *items, int64_t n, adam_batch *b) {
    memset(b, 0, sizeof *b);
    if (o->eng->backend->adam_step_multi == NULL) return OJ_OK;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += is_adam(&items[i]);
    if (k == 0) return OJ_OK;
    size_t K = (size_t)k;
    b->idx = malloc(K * sizeof *b->idx);
    b->p = malloc(K * sizeof *b->p);
    b->m = malloc(K * sizeof *b->m);
    b->v = malloc(K * sizeof *b->v);
    b->g = malloc(K * sizeof *b->g);
    b->args = calloc(K, sizeof *b->args);
    b->slot = malloc(K * sizeof *b->slot);
    if (!b->idx || !b->p || !b->m || !b->v || !b->g || !b->args || !b->slot) {
        adam_batch_free(b);
        return oj_set_error(o->eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    }
    bool disjoint = false;
    oj_status st = items_disjoint(o, items, n, &disjoint);
    if (st != OJ_OK || !disjoint) {
        adam_batch_free(b);
        return st;
    }
    for (int64_t i = 0, j = 0; i < n; i++) {
        if (!is_adam(&items[i])) continue;
        oj_optim_slot *p = items[i].p;
        b->idx[j] = i;
        b->p[j] = p->param;
        b->g[j] = items[i].grad;
        b->m[j] = p->exp_avg;
        b->v[j] = p->exp_avg_sq;
        b->args[j] = adam_args(o, &items[i]);
        b->slot[j] = p;
        b->args[j].low = low_target(o, p, true, &b->args[j].low_t);
        j++;
    }
    b->n = k;
    return OJ_OK;
}

static oj_status adam_batch_run(oj_optim *o, const adam_batch *b, bool check_only) {
    oj_engine *eng = o->eng;
    oj_status st = eng->backend->adam_step_multi(eng, b->n, b->p, b->g, b->m, b->v, b->args,
                                                 check_only);
    for (int64_t j = 0; j < b->n && st == OJ_OK && !check_only; j++)
        if (b->args[j].low) b->slot[j]->low_queued = b->args[j].low_t ? 2 : 1; /* written beside it */
    return st;
}

void oj__optim_bounds_drop(oj_optim_slot *p) {
    for (int k = 0; k < 3; k++) {
        oj__storage_release(p->bnd_st[k]);
        p->bnd_st[k] = NULL;
    }
}

/* After an item's update was written: its step count and versions (and
 * no bounds: step_gated records them again where its kernels wrote them). */
static void mark_written(oj_optim_slot *p) {
    oj__optim_bounds_drop(p);
    p->step++;
    oj_bump_version(p->param);
    if (p->low_queued) oj__wcopy_fresh(p->param, OJ_BF16, p->low_queued == 2); /* written beside it */
    p->low_queued = 0;
    if (p->exp_avg) oj_bump_version(p->exp_avg);
    if (p->exp_avg_sq) oj_bump_version(p->exp_avg_sq);
    if (p->momentum_buffer) oj_bump_version(p->momentum_buffer);
}

/* Before a step's outcome is known, for work queued after its update
 * that reads the parameters (oj__step_hooks.ahead): their versions move
 * (a kept copy not written beside them is made again before it is read:
 * from the updated values, or from the same ones when the update is
 * refused) and a copy the update writes beside them is theirs. A refused
 * update writes neither, so both stay consistent. mark_written follows
 * for an update that was taken. */
static void written_ahead(oj_optim_slot *p) {
    oj_bump_version(p->param);
    if (p->low_queued) oj__wcopy_fresh(p->param, OJ_BF16, p->low_queued == 2);
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

/* Does parameter p still fit what the optimizer made for it when it was
 * added? Its data may have been replaced since (oj_set_data,
 * oj_params_to_dtype: PyTorch's param.data = x): the kernels read and
 * write the parameter and its state densely in the parameter's dtype and
 * size, so another dtype, shape or layout would overrun the state or
 * write through an expanded view. Refused, nothing written. */
static oj_status check_slot(oj_optim *o, const oj_optim_hparams *hp, const oj_optim_slot *p) {
    const oj_tensor *t = p->param;
    char b1[128], b2[128];
    if (oj__optim_check_tensor(o->eng, hp, p->name, t, true) != OJ_OK) return oj_last_status(o->eng);
    const oj_tensor *state[3] = {p->exp_avg, p->exp_avg_sq, p->momentum_buffer};
    for (int i = 0; i < 3; i++) {
        const oj_tensor *s = state[i];
        if (s == NULL) continue;
        bool same = s->dtype == t->dtype && s->rank == t->rank;
        for (int d = 0; same && d < t->rank; d++) same = s->shape[d] == t->shape[d];
        if (!same)
            return oj_set_error(o->eng, OJ_ERR_STATE,
                                "optim: parameter '%s' is now %s %s but its optimizer state is %s "
                                "%s (its data was replaced after it was added, e.g. by "
                                "oj_set_data or oj_params_to_dtype); create the optimizer after "
                                "converting",
                                p->name, oj_dtype_name(t->dtype),
                                oj__shape_fmt(b1, sizeof b1, t->rank, t->shape),
                                oj_dtype_name(s->dtype),
                                oj__shape_fmt(b2, sizeof b2, s->rank, s->shape));
    }
    return oj__optim_check_muon_shape(o->eng, hp, p->name, t, true);
}

/* Collect the parameters that have a grad, checking each parameter and
 * grad. */
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
            oj_status cs = check_slot(o, &grp->hp, p);
            if (cs != OJ_OK) return cs;
            if (g0->dtype != p->param->dtype || oj_numel(g0) != oj_numel(p->param)) {
                char b1[128], b2[128];
                return oj_set_error(
                    o->eng, OJ_ERR_SHAPE, "optim: grad of '%s' is %s %s, parameter %s %s", p->name,
                    oj_dtype_name(g0->dtype), oj__shape_fmt(b1, sizeof b1, g0->rank, g0->shape),
                    oj_dtype_name(p->param->dtype),
                    oj__shape_fmt(b2, sizeof b2, p->param->rank, p->param->shape));
            }
            oj_tensor *gc = oj__contiguous(g0);
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

/* Steps 3 and 4: the read-only pass (nothing may become non-finite), then
 * the writing pass. The items of ab go through adam_step_multi together;
 * when that check finds a non-finite value, its items are checked one by
 * one in order (the same kernel bits) to name the first. */
static oj_status check_and_write(oj_optim *o, work_item *items, int64_t n, const adam_batch *ab,
                                 oj_optim_step_info *info) {
    oj_engine *eng = o->eng;
    const char *ab_algo = ab->n ? oj__optim_algo_name(items[ab->idx[0]].hp->algo) : "";
    oj_status st;
    if (o->check_update) {
        bool ab_bad = false;
        if (ab->n > 0) {
            st = adam_batch_run(o, ab, true);
            if (st == OJ_ERR_NUMERIC) ab_bad = true;
            else if (st != OJ_OK)
                return oj_set_error(eng, st, "optim %s: kernel failed on %lld parameters", ab_algo,
                                    (long long)ab->n);
        }
        for (int64_t i = 0; i < n; i++) {
            if (ab->n > 0 && is_adam(&items[i]) && !ab_bad) continue; /* all finite */
            st = run_item(o, &items[i], true);
            if (st == OJ_ERR_NUMERIC)
                return skip(o, info, "optim: step skipped: the %s update of '%s' is not finite",
                            oj__optim_algo_name(items[i].hp->algo), items[i].p->name);
            if (st != OJ_OK)
                return oj_set_error(eng, st, "optim %s: kernel failed on '%s'",
                                    oj__optim_algo_name(items[i].hp->algo), items[i].p->name);
        }
        if (ab_bad) /* not reached while the entries agree */
            return skip(o, info, "optim: step skipped: an %s update is not finite", ab_algo);
    }

    if (ab->n > 0) {
        st = adam_batch_run(o, ab, false);
        if (st != OJ_OK && st != OJ_ERR_NUMERIC)
            return oj_set_error(eng, st,
                                "optim %s: kernel failed on %lld parameters (step partly applied)",
                                ab_algo, (long long)ab->n);
        for (int64_t j = 0; j < ab->n; j++) mark_written(items[ab->idx[j]].p);
    }
    for (int64_t i = 0; i < n; i++) {
        oj_optim_slot *p = items[i].p;
        if (ab->n > 0 && is_adam(&items[i])) continue; /* written above */
        st = run_item(o, &items[i], false);
        if (st != OJ_OK && st != OJ_ERR_NUMERIC)
            return oj_set_error(eng, st, "optim %s: kernel failed on '%s' (step partly applied)",
                                oj__optim_algo_name(items[i].hp->algo), p->name);
        mark_written(p);
    }
    o->steps++;
    if (info) info->params_updated = n;
    return OJ_OK;
}

/* ---------------------------------------------------------------- the gated step
 * On a backend with step_gate_open (CUDA) the clip and the finiteness
 * checks stay on the device: one multi-tensor norm pass writes the clip
 * factor and a skip word into a small gate buffer, the update kernels read
 * them from there (each gradient element is read times the factor, with
 * the bits the clip's in-place scaling gives; nothing is written when the
 * step is skipped), the check pass (check_update) sets the skip word
 * instead of reading a status back, and the host reads the gate once,
 * after the whole update is queued. The host's bookkeeping (step counts,
 * versions, the message) follows the gate's verdict, as the checked step
 * would have left it. */

/* Can this step take the gated path? Every group Adam, AdamW or Muon (the
 * gated kernels), on a backend with the gate. */
static bool gate_usable(const oj_optim *o) {
    const oj_backend *b = o->eng->backend;
    if (b->step_gate_open == NULL || b->step_gate_close == NULL || b->copy_d2h == NULL)
        return false;
    for (int g = 0; g < o->ngroups; g++)
        if (o->groups[g].hp.algo == OJ_OPTIM_SGD) return false;
    return true;
}

/* The Muon items of a gated step for muon_momentum_multi and
 * apply_update_multi (one call each per pass instead of one per matrix),
 * when the backend has both and no two parameters or gradients of the
 * step overlap; n == 0: each item runs alone. */
typedef struct {
    int64_t n;
    oj_tensor **p, **buf, **u, **low;
    const oj_tensor **g;
    double *alpha, *scale, *decay;
    oj_optim_slot **slot;
} muon_batch;

static void muon_batch_free(muon_batch *b) {
    for (int64_t j = 0; b->low && j < b->n; j++) oj_release(b->low[j]);
    free(b->low);
    free(b->slot);
    free(b->p);
    free(b->buf);
    free(b->u);
    free(b->g);
    free(b->alpha);
    free(b->scale);
    free(b->decay);
    memset(b, 0, sizeof *b);
}

static oj_status muon_batch_init(oj_optim *o, work_item *items, int64_t n, muon_batch *b) {
    memset(b, 0, sizeof *b);
    const oj_backend *be = o->eng->backend;
    if (be->muon_momentum_multi == NULL || be->apply_update_multi == NULL) return OJ_OK;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += items[i].hp->algo == OJ_OPTIM_MUON;
    if (k < 2) return OJ_OK;
    size_t K = (size_t)k;
    b->p = malloc(K * sizeof *b->p);
    b->buf = malloc(K * sizeof *b->buf);
    b->u = malloc(K * sizeof *b->u);
    b->g = malloc(K * sizeof *b->g);
    b->alpha = malloc(K * sizeof *b->alpha);
    b->scale = malloc(K * sizeof *b->scale);
    b->decay = malloc(K * sizeof *b->decay);
    b->low = calloc(K, sizeof *b->low);
    b->slot = malloc(K * sizeof *b->slot);
    if (!b->p || !b->buf || !b->u || !b->g || !b->alpha || !b->scale || !b->decay || !b->low ||
        !b->slot) {
        muon_batch_free(b);
        return oj_set_error(o->eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    }
    bool disjoint = false;
    oj_status st = items_disjoint(o, items, n, &disjoint);
    if (st != OJ_OK || !disjoint) {
        muon_batch_free(b);
        return st;
    }
    for (int64_t i = 0, j = 0; i < n; i++) {
        if (items[i].hp->algo != OJ_OPTIM_MUON) continue;
        const oj_optim_hparams *hp = items[i].hp;
        double lr = lr_of(o, hp); /* as run_item passes them */
        b->p[j] = items[i].p->param;
        b->buf[j] = items[i].p->momentum_buffer;
        b->g[j] = items[i].grad;
        b->u[j] = items[i].update;
        b->alpha[j] = -lr;
        b->scale[j] = oj__muon_scale(items[i].p->param);
        bool tr = false;
        b->low[j] = low_target(o, items[i].p, false, &tr);
        b->slot[j] = items[i].p;
        b->decay[j++] = 1.0 - lr * hp->weight_decay;
    }
    b->n = k;
    return OJ_OK;
}

/* A pass over the Muon items of b, all of the group hp: check
 * (apply_update_multi, check_only) or write (muon_momentum_multi on the
 * buffers, then apply_update_multi): per item run_item's kernels and
 * bits. */
static oj_status muon_batch_run(oj_optim *o, const muon_batch *b, const oj_optim_hparams *hp,
                                bool check) {
    oj_engine *eng = o->eng;
    oj_status st = OJ_OK;
    if (!check)
        st = eng->backend->muon_momentum_multi(eng, b->n, b->buf, b->g, NULL, hp->momentum,
                                               hp->nesterov);
    if (st == OJ_OK)
        st = eng->backend->apply_update_multi(eng, b->n, b->p, (const oj_tensor *const *)b->u,
                                              b->alpha, b->scale, b->decay, check,
                                              check || !eng->backend->low_copies ? NULL : b->low);
    for (int64_t j = 0; j < b->n && st == OJ_OK && !check; j++)
        if (b->low[j]) b->slot[j]->low_queued = 1; /* written beside it */
    return st;
}

/* Queue the (optional) check pass and the writing pass under an open gate:
 * no status is read back. */
static oj_status queue_gated(oj_optim *o, work_item *items, int64_t n, const adam_batch *ab) {
    oj_engine *eng = o->eng;
    /* the Muon items batched when they all share one group (the momentum
     * and nesterov of a multi call are one); else one by one */
    muon_batch mb;
    oj_status ms = muon_batch_init(o, items, n, &mb);
    if (ms != OJ_OK) return ms;
    const oj_optim_hparams *mhp = NULL;
    for (int64_t i = 0; i < n && mb.n > 0; i++) {
        if (items[i].hp->algo != OJ_OPTIM_MUON) continue;
        if (mhp != NULL && items[i].hp != mhp) muon_batch_free(&mb); /* two Muon groups */
        mhp = items[i].hp;
    }
    for (int pass = o->check_update ? 0 : 1; pass < 2; pass++) {
        bool check = pass == 0;
        oj_status st = ab->n > 0 ? adam_batch_run(o, ab, check) : OJ_OK;
        if (st == OJ_OK && mb.n > 0) st = muon_batch_run(o, &mb, mhp, check);
        for (int64_t i = 0; i < n && st == OJ_OK; i++)
            if (!(ab->n > 0 && is_adam(&items[i])) &&
                !(mb.n > 0 && items[i].hp->algo == OJ_OPTIM_MUON))
                st = run_item(o, &items[i], check);
        if (st != OJ_OK) {
            if (oj_last_status(eng) == OJ_OK)
                oj_set_error(eng, st == OJ_ERR_NUMERIC ? OJ_ERR_INTERNAL : st,
                             "optim: a gated %s kernel failed%s", check ? "check" : "update",
                             check ? "" : " (step partly applied)");
            muon_batch_free(&mb);
            return oj_last_status(eng);
        }
    }
    muon_batch_free(&mb);
    return OJ_OK;
}

/* ---------------------------------------------------------------- the proven check
 * The check pass (check_update) reads every parameter, gradient and moment
 * once more before the writing pass, to skip a step that would write a
 * non-finite value. Under the gate the writing kernels also leave the
 * bounds of what they wrote (max |p|, |m|, v per tensor, oj_adam_args
 * .bound_at), read back with the gate; at the next step, while those
 * tensors are unchanged (storages, offsets and versions), the host bounds
 * every value adam_elem computes (cuda_optim.cu: each operation's result
 * at most twice its exact bound, the hyperparameters as the f32 kernels
 * round them, within that margin of the f64 ones, every bound below
 * FLT_MAX / 4) for gradients |g| <= G, and the gate sets its safe
 * word when the global norm (>= every |g|, and the clip only shrinks g) is
 * <= half the smallest G: adam_step_multi's check pass then returns at
 * once, since it could not have refused. Otherwise it runs as before. The
 * bits written are the same either way. Every write to those tensors
 * moves their versions: writes through the library and each replay of a
 * graph that writes them (oj__storage_written); writes through exported
 * memory cannot be seen, so an exported storage never has valid bounds.
 * On by default; OJAS_CUDA_ADAMW1=0 runs the check pass every step.
 * gpt2-124m: the pass reads 16 of the step's 50 bytes a parameter (~2 GB,
 * ~0.5 ms at the H200's 4 TB/s). */

/* Are p's bounds those of its tensors as they are now? Never for an
 * exported storage (written unseen). */
static bool bounds_valid(const oj_optim_slot *p) {
    const oj_tensor *t[3] = {p->param, p->exp_avg, p->exp_avg_sq};
    if (p->bnd_st[0] == NULL) return false;
    for (int k = 0; k < 3; k++)
        if (t[k] == NULL || t[k]->storage != p->bnd_st[k] || t[k]->offset != p->bnd_off[k] ||
            oj_version(t[k]) != p->bnd_ver[k] || t[k]->storage->exported)
            return false;
    return true;
}

/* Every value adam_elem computes in f32 from |p| <= b[0], |m| <= b[1],
 * 0 <= v <= b[2] and |g| <= G stays below FLT_MAX / 4 (so finite)? */
static bool adam_finite_for(const oj_adam_args *a, const float *b, double G) {
    const double L = FLT_MAX / 4;
    const double b1 = fabs((double)(float)a->beta1), omb1 = fabs((double)(float)(1.0 - a->beta1));
    const double b2 = (float)a->beta2, omb2 = (float)(1.0 - a->beta2), eps = (float)a->eps;
    const double wd = fabs((double)(float)a->weight_decay);
    const double decay = fabs((double)(float)(1.0 - a->lr * a->weight_decay));
    const double step = fabs((double)(float)(-(a->lr / a->bias_correction1)));
    const double bc2 = (float)sqrt(a->bias_correction2);
    const bool l2 = a->weight_decay != 0.0 && !a->decoupled;
    const bool dec = a->weight_decay != 0.0 && a->decoupled;
    const double P = b[0], M = b[1], V = b[2];
    /* v >= 0 keeps the new v >= 0 and the denominator >= eps > 0 */
    if (!(b2 >= 0 && omb2 >= 0 && eps > 0 && bc2 > 0 && P <= L && M <= L && V <= L)) return false;
    const double hyp[5] = {b1, omb1, wd, decay, step};
    for (int k = 0; k < 5; k++)
        if (!(hyp[k] <= L)) return false;
    const double P1 = dec ? 2 * P * decay : P;                     /* p (1 - lr wd) */
    const double G1 = l2 ? 2 * (P1 * wd + G) : G;                  /* g + wd p */
    const double M1 = 2 * (2 * G1 * omb1 + 2 * M * b1);            /* the new m */
    const double V1 = 2 * (2 * omb2 * G1 * G1 + 2 * V * b2);       /* the new v */
    const double D = 2 * (2 * sqrt(2 * V1) / bc2 + eps);           /* the denominator */
    const double S = 2 * step * M1;                                /* -step m */
    const double Q = 2 * S / eps;                                  /* / denominator >= eps */
    const double Pn = 2 * (Q + P1);                                /* the new p */
    const double all[9] = {P1, G1, M1, V1, D, S, Q, Pn, 2 * omb2 * G1};
    for (int k = 0; k < 9; k++)
        if (!(all[k] <= L)) return false;
    return true;
}

/* The largest power of 2 G in [2^-20, 2^100] for which adam_finite_for
 * holds (it is monotone in G: bisection over the exponent), or -1. */
double oj__optim_adam_safe_grad(const oj_adam_args *a, const float *b) {
    int lo = -20, hi = 100;
    if (!adam_finite_for(a, b, ldexp(1.0, lo))) return -1.0;
    while (lo < hi) { /* holds at lo */
        int mid = lo + (hi - lo + 1) / 2;
        if (adam_finite_for(a, b, ldexp(1.0, mid))) lo = mid;
        else hi = mid - 1;
    }
    return ldexp(1.0, lo);
}

/* The safe norm to pass to step_gate_open: half the smallest safe
 * gradient bound of the step's Adam/AdamW items, or -1 (never safe) when
 * one has no valid bounds or there is none. */
static double adam_safe_norm(const oj_optim *o, const work_item *items, int64_t n) {
    double G = INFINITY;
    bool any = false;
    for (int64_t i = 0; i < n; i++) {
        if (!is_adam(&items[i])) continue;
        const oj_optim_slot *p = items[i].p;
        if (!bounds_valid(p)) return -1.0;
        oj_adam_args a = adam_args(o, &items[i]);
        double g = oj__optim_adam_safe_grad(&a, p->bnd);
        if (g < 0) return -1.0;
        if (g < G) G = g;
        any = true;
    }
    return any ? G / 2 : -1.0;
}

/* After a gated step wrote its items: the bounds its Adam kernels left at
 * host[bound_at] for the items of ab that had them. */
static void bounds_record(const adam_batch *ab, const double *host) {
    for (int64_t j = 0; j < ab->n; j++) {
        if (ab->args[j].bound_at <= 0) continue;
        oj_optim_slot *p = ab->slot[j];
        oj_tensor *t[3] = {p->param, p->exp_avg, p->exp_avg_sq};
        oj__optim_bounds_drop(p);
        memcpy(p->bnd, host + ab->args[j].bound_at, sizeof p->bnd);
        for (int k = 0; k < 3; k++) {
            p->bnd_st[k] = t[k]->storage;
            oj__storage_retain(t[k]->storage);
            p->bnd_ver[k] = oj_version(t[k]);
            p->bnd_off[k] = t[k]->offset;
        }
    }
}

/* The gate found a new value that would not be finite: name it as the
 * checked step does. The gradients are scaled in place by the clip factor
 * (as the clip before a checked step leaves them), then each item runs its
 * check pass alone, in order. Nothing of the step was written. */
static oj_status name_refused(oj_optim *o, work_item *items, int64_t n, double coef,
                              oj_optim_step_info *info) {
    oj_engine *eng = o->eng;
    for (int64_t i = 0; i < n && coef != 1.0; i++)
        if (oj_mul_scalar_(items[i].grad, coef) != OJ_OK) return oj_last_status(eng);
    for (int64_t i = 0; i < n; i++) {
        oj_status st = run_item(o, &items[i], true);
        if (st == OJ_ERR_NUMERIC)
            return skip(o, info, "optim: step skipped: the %s update of '%s' is not finite",
                        oj__optim_algo_name(items[i].hp->algo), items[i].p->name);
        if (st != OJ_OK)
            return oj_set_error(eng, st, "optim %s: kernel failed on '%s'",
                                oj__optim_algo_name(items[i].hp->algo), items[i].p->name);
    }
    return skip(o, info, "optim: step skipped: an update is not finite");
}

/* The gated step over the n collected items; *norm_out = the global
 * gradient norm before clipping. */
static oj_status step_gated(oj_optim *o, work_item *items, int64_t n, double max_norm,
                            double *norm_out, oj_optim_step_info *info,
                            const oj__step_hooks *hooks) {
    oj_engine *eng = o->eng;
    /* [0, 4 + n) the norms and verdict, [4 + n] the safe word, then 2
     * words of bounds per item (backend.h step_gate_open) */
    const int64_t words = 5 + 3 * n;
    int64_t shape[1] = {words};
    oj_tensor *gate = oj__tensor_alloc(eng, 1, shape, OJ_F64, "optim");
    double *host = malloc((size_t)words * sizeof *host);
    const oj_tensor **gs = malloc((size_t)(n ? n : 1) * sizeof *gs);
    oj_status st = OJ_OK;
    if (gate == NULL) st = oj_last_status(eng);
    else if (host == NULL || gs == NULL)
        st = oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    for (int64_t i = 0; i < n && st == OJ_OK; i++) gs[i] = items[i].grad;
    /* skip the check pass where the bounds prove it cannot refuse (the
     * proven check above; OJAS_CUDA_ADAMW1=0: never) */
    const bool prove = o->check_update && oj__env_flag("OJAS_CUDA_ADAMW1", true);
    const double safe = prove ? adam_safe_norm(o, items, n) : -1.0;
    if (st == OJ_OK) st = eng->backend->step_gate_open(eng, n, gs, max_norm, safe, gate);
    adam_batch ab = {0};
    if (st == OJ_OK) {
        /* 2. updates that need more than one pass (Muon), state untouched */
        st = muon_updates(o, items, n);
        if (st == OJ_OK) st = adam_batch_init(o, items, n, &ab);
        for (int64_t j = 0; j < ab.n; j++) /* the items' bounds, into their gate words */
            ab.args[j].bound_at = 5 + n + 2 * ab.idx[j];
        /* the writing pass may be queued from here on: a step that fails
         * after it leaves no bounds of the old values (a success records
         * new ones) */
        for (int64_t i = 0; i < n && st == OJ_OK; i++) oj__optim_bounds_drop(items[i].p);
        if (st == OJ_OK) st = queue_gated(o, items, n, &ab);
        eng->backend->step_gate_close(eng);
    }
    const bool ahead = hooks && hooks->ahead && hooks->while_queued;
    const char *gate_at = gate ? (const char *)gate->storage->data + gate->offset : NULL;
    if (st == OJ_OK && ahead) { /* queued before what while_queued queues */
        st = oj__read_defer(eng, host, gate_at, (size_t)words * sizeof *host);
        for (int64_t i = 0; i < n && st == OJ_OK; i++) written_ahead(items[i].p);
    }
    if (st == OJ_OK && hooks && hooks->while_queued) hooks->while_queued(hooks->ctx);
    /* the one read-back: it waits for the queued update */
    if (st == OJ_OK)
        st = ahead ? oj__read_wait(eng)
                   : eng->backend->copy_d2h(eng, host, gate_at, (size_t)words * sizeof *host);
    free(gs);
    oj_release(gate);
    if (st != OJ_OK) {
        adam_batch_free(&ab);
        free(host);
        if (oj_last_status(eng) == OJ_OK)
            oj_set_error(eng, st, "optim: the gated step failed on the %s backend",
                         eng->backend->name);
        return oj_last_status(eng);
    }
    double coef = host[1], verdict = host[2];
    if (norm_out) *norm_out = host[3];
    if (verdict == 1.0) { /* a gradient is not finite: the first one is named */
        adam_batch_free(&ab);
        for (int64_t i = 0; i < n; i++) {
            double v = host[4 + i];
            if (isfinite(v)) continue;
            free(host);
            if (info) info->grad_norm = v;
            return skip(o, info,
                        "optim: step skipped: the gradient of '%s' is not finite (norm %g)",
                        items[i].p->name, v);
        }
    }
    /* the norm the step saw: each gradient's after the clip, as the
     * checked step takes them from the clip */
    double sumsq = 0.0;
    for (int64_t i = 0; i < n; i++) sumsq += (host[4 + i] * coef) * (host[4 + i] * coef);
    if (info) info->grad_norm = sqrt(sumsq);
    if (verdict != 0.0) {
        adam_batch_free(&ab);
        free(host);
        if (ahead && hooks->rewind) hooks->rewind(hooks->ctx); /* this step's gradients again */
        return name_refused(o, items, n, coef, info);
    }
    for (int64_t i = 0; i < n; i++) mark_written(items[i].p);
    bounds_record(&ab, host);
    if (host[4 + n] != 0.0 && ab.n > 0) o->checks_proven++;
    adam_batch_free(&ab);
    free(host);
    o->steps++;
    if (info) info->params_updated = n;
    return OJ_OK;
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

    /* the Adam/AdamW items: one multi-tensor call per pass */
    adam_batch ab;
    st = adam_batch_init(o, items, n, &ab);
    if (st != OJ_OK) return st;
    st = check_and_write(o, items, n, &ab, info);
    adam_batch_free(&ab);
    return st;
}

/* The checks every step starts with: the lr scale, each group's
 * hyperparameters and algorithm, the backend's kernels. */
static oj_status step_begin(oj_optim *o) {
    oj_engine *eng = o->eng;
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
    for (int g = 0; g < o->ngroups; g++)
        for (int64_t i = 0; i < o->groups[g].n; i++) {
            oj_optim_slot *p = &o->groups[g].params[i];
            p->low_queued = 0;
            /* a parameter given new storage since (oj_set_data) keeps its copies */
            if (o->weight_copies) oj__wcopy_keep(p->param, true);
        }
    return OJ_OK;
}

oj_status oj_optim_step(oj_optim *o, oj_optim_step_info *info) {
    if (o == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = o->eng;
    if (info) *info = (oj_optim_step_info){0};
    o->message[0] = '\0';
    oj_status bs = step_begin(o);
    if (bs != OJ_OK) return bs;
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

/* The trainer's clip and step on a device with the gate (step_gated),
 * elsewhere oj_optim_clip_grad_norm (or, without a clip, the norm alone)
 * followed by oj_optim_step. */
oj_status oj__optim_clip_step(oj_optim *o, double max_norm, double *norm_out,
                              oj_optim_step_info *info) {
    return oj__optim_clip_step_then(o, max_norm, norm_out, info, NULL);
}

oj_status oj__optim_clip_step_then(oj_optim *o, double max_norm, double *norm_out,
                                   oj_optim_step_info *info, const oj__step_hooks *hooks) {
    if (o == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = o->eng;
    if (norm_out) *norm_out = NAN;
    if (info) *info = (oj_optim_step_info){0};
    if (!(max_norm >= 0) || !isfinite(max_norm))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "clip_grad_norm: max_norm %g must be >= 0 (0: no clip)", max_norm);
    if (!gate_usable(o)) {
        double norm;
        if (max_norm > 0) {
            norm = oj_optim_clip_grad_norm(o, max_norm);
        } else {
            int64_t n = 0, k = 0;
            for (int g = 0; g < o->ngroups; g++) n += o->groups[g].n;
            oj_tensor **ps = malloc((size_t)(n ? n : 1) * sizeof *ps);
            if (ps == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
            for (int g = 0; g < o->ngroups; g++)
                for (int64_t i = 0; i < o->groups[g].n; i++) ps[k++] = o->groups[g].params[i].param;
            norm = oj_grad_norm(n, ps);
            free(ps);
        }
        if (norm_out) *norm_out = norm;
        if (isnan(norm) && oj_last_status(eng) != OJ_OK) return oj_last_status(eng);
        oj_status so = oj_optim_step(o, info);
        if ((so == OJ_OK || so == OJ_ERR_NUMERIC) && hooks && hooks->while_queued) {
            hooks->while_queued(hooks->ctx);
            oj_status sw = hooks->ahead ? oj__read_wait(eng) : OJ_OK;
            if (sw != OJ_OK) return sw;
        }
        return so;
    }
    o->message[0] = '\0';
    oj__optim_clip_cache_clear(o);
    oj_status st = step_begin(o);
    if (st != OJ_OK) return st;
    int64_t total = 0;
    for (int g = 0; g < o->ngroups; g++) total += o->groups[g].n;
    work_item *items = calloc(total ? (size_t)total : 1, sizeof *items);
    if (items == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "optim: out of host memory");
    st = oj_scope_begin(eng);
    if (st == OJ_OK) {
        bool prev = oj_set_grad_enabled(eng, false);
        bool prev_ac = oj_set_autocast(eng, false, OJ_BF16);
        int64_t n = 0;
        st = collect(o, items, &n);
        if (st == OJ_OK) st = step_gated(o, items, n, max_norm, norm_out, info, hooks);
        if (prev_ac) oj_set_autocast(eng, true, oj_autocast_dtype(eng));
        oj_set_grad_enabled(eng, prev);
        oj_scope_end(eng);
    }
    free(items);
    return st;
}
