/* Kept low-precision copies of parameters (autocast's weight casts kept
 * between steps; oj_optim_set_weight_copies turns them on).
 *
 * An entry holds, for one view of a parameter's storage (offset, shape,
 * strides, dtype: the operand autocast casts, e.g. gpt2's transposed
 * Conv1D weight) and one target dtype, a contiguous copy made by the
 * backend's copy kernel, the kernel oj_cast runs: the same bits as a cast.
 * It is fresh while the storage's version is the one it was made at;
 * every write through the library bumps that version (copy_, fill_,
 * loads, init, the optimizer's mark_written, each replay of a graph that
 * writes the storage: oj__storage_written), so a stale copy is made
 * again by the next oj__wcopy_get, or, for CUDA graphs (which read the
 * copy's memory without asking), by oj__wcopies_sync before each replay.
 * A storage whose memory was exported (oj_data_ptr, DLPack...) may be
 * written unseen: its copies are never fresh, made again before each use
 * and each replay.
 * The optimizer may write a copy in its own update pass and then declare
 * it fresh (oj__wcopy_fresh). The copy's memory never moves while the
 * entry lives (graphs hold its address); entries die with the parameter's
 * storage (oj__storage_release) or when copies are turned off.
 * Each entry is on two lists: its storage's (a parameter has a few: its
 * views times dtypes, at most OJ__WCOPY_VIEWS_MAX), which a cast searches,
 * so finding a copy costs the same for a model of any size; and the
 * engine's (doubly linked), which the sync before a replay walks. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"

enum { OJ__WCOPY_VIEWS_MAX = 4 };

struct oj_wcopy {
    oj_storage *src;   /* the parameter's storage (not retained) */
    oj_tensor view;    /* the source view's geometry (a plain struct, no refs) */
    oj_dtype dt;       /* the copy's dtype */
    oj_storage *copy;  /* contiguous, owned */
    uint64_t version;  /* src->version the copy holds */
    bool filled;       /* written at least once */
    struct oj_wcopy *next, *prev; /* the engine's list */
    struct oj_wcopy *snext;       /* the storage's list */
};

static bool same_view(const oj_wcopy *e, const oj_tensor *x, oj_dtype dt);

/* Must e be made again before it is read? */
static bool stale(const oj_wcopy *e) {
    return !e->filled || e->version != e->src->version || e->src->exported;
}

/* s's entry for view x and dtype dt, or NULL; *n_src: s's entries. */
static oj_wcopy *find(oj_engine *eng, oj_storage *s, const oj_tensor *x, oj_dtype dt,
                      int *n_src) {
    int n = 0;
    oj_wcopy *e = s->wcopies;
    for (; e; e = e->snext, n++) {
        eng->wcopy_probes++;
        if (same_view(e, x, dt)) break;
    }
    if (n_src) *n_src = n;
    return e;
}

/* Unlink e from the engine's list (the storage's list is the caller's). */
static void unlink_entry(oj_engine *eng, oj_wcopy *e) {
    if (e->prev) e->prev->next = e->next;
    else eng->wcopies = e->next;
    if (e->next) e->next->prev = e->prev;
}

static bool same_view(const oj_wcopy *e, const oj_tensor *x, oj_dtype dt) {
    if (e->src != x->storage || e->dt != dt || e->view.dtype != x->dtype ||
        e->view.offset != x->offset || e->view.rank != x->rank)
        return false;
    for (int d = 0; d < x->rank; d++)
        if (e->view.shape[d] != x->shape[d] || (x->shape[d] > 1 && e->view.stride[d] != x->stride[d]))
            return false;
    return true;
}

/* The contiguous destination struct over e's copy. */
static void copy_view(const oj_wcopy *e, oj_tensor *out) {
    *out = e->view;
    out->storage = e->copy;
    out->offset = 0;
    out->dtype = e->dt;
    oj__contiguous_strides(out->rank, out->shape, out->stride);
}

/* The copy made again from the source, with the cast's kernel. */
static oj_status refresh(oj_engine *eng, oj_wcopy *e) {
    oj_tensor out;
    copy_view(e, &out);
    oj_status st = eng->backend->copy(eng, &out, &e->view);
    if (st != OJ_OK) {
        if (oj_last_status(eng) == OJ_OK)
            oj_set_error(eng, st, "weight copy: the cast kernel failed on the %s backend",
                         eng->backend->name);
        return oj_last_status(eng);
    }
    e->version = e->src->version;
    e->filled = true;
    oj__storage_written(e->copy); /* saved aliases of the old values see the write */
    return OJ_OK;
}

static oj_wcopy *entry_new(oj_engine *eng, const oj_tensor *x, oj_dtype dt) {
    int64_t n = 1;
    for (int d = 0; d < x->rank; d++) n *= x->shape[d];
    oj_wcopy *e = calloc(1, sizeof *e);
    if (e == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "weight copy: out of host memory");
        return NULL;
    }
    /* outside any graph's pool: the copy outlives the capture */
    oj_graph_pool *cp = eng->capture_pool;
    eng->capture_pool = NULL;
    e->copy = oj__storage_new(eng, (size_t)(n > 0 ? n : 1) * oj_dtype_size(dt), "weight copy");
    eng->capture_pool = cp;
    if (e->copy == NULL) {
        free(e);
        return NULL;
    }
    e->src = x->storage;
    e->view = *x;
    e->view.refcount = 0;
    e->view.holds = 0;
    e->view.grad = NULL;
    e->view.grad_fn = NULL;
    e->view.requires_grad = false;
    e->view.live_prev = e->view.live_next = NULL;
    e->dt = dt;
    e->next = eng->wcopies;
    if (e->next) e->next->prev = e;
    eng->wcopies = e;
    e->snext = x->storage->wcopies;
    x->storage->wcopies = e;
    return e;
}

void oj__wcopy_keep(oj_tensor *param, bool on) {
    if (!oj__live(param)) return;
    if (!on && param->storage->keep_copies) oj__wcopy_forget(param->storage);
    param->storage->keep_copies = on;
}

bool oj__wcopy_get(oj_tensor *x, oj_dtype dt, oj_tensor **out) {
    *out = NULL;
    if (!oj__live(x) || !x->storage->keep_copies || x->eng->backend->copy == NULL ||
        (dt != OJ_BF16 && dt != OJ_F16) || x->dtype != OJ_F32)
        return false;
    oj_engine *eng = x->eng;
    int same_src = 0;
    oj_wcopy *e = find(eng, x->storage, x, dt, &same_src);
    /* a few views per parameter (itself, its transpose): a parameter cast
     * through ever new views (narrowed by an input's length) is cast as
     * usual rather than kept once per view */
    if (e == NULL && same_src >= OJ__WCOPY_VIEWS_MAX) return false;
    if (e == NULL && (e = entry_new(eng, x, dt)) == NULL) return true;
    /* during a capture nothing runs: the replay's oj__wcopies_sync fills
     * a stale copy first */
    if (stale(e) && !oj_graph_capturing(eng) &&
        refresh(eng, e) != OJ_OK)
        return true;
    *out = oj__tensor_new(eng, e->copy, 0, x->rank, x->shape, NULL, dt);
    return true;
}

/* The geometry of param (rank 2 for transposed) or of its transpose. */
static bool param_view(const oj_tensor *param, bool transposed, oj_tensor *v) {
    *v = *param;
    if (!transposed) return true;
    if (param->rank != 2) return false;
    v->shape[0] = param->shape[1], v->shape[1] = param->shape[0];
    v->stride[0] = param->stride[1], v->stride[1] = param->stride[0];
    return true;
}

oj_tensor *oj__wcopy_target(oj_tensor *param, oj_dtype dt, bool transposed) {
    oj_tensor v;
    if (!oj__live(param) || !param->storage->keep_copies || !param_view(param, transposed, &v))
        return NULL;
    oj_wcopy *e = find(param->eng, param->storage, &v, dt, NULL);
    if (e == NULL) return NULL;
    oj_tensor *t = oj__tensor_new(param->eng, e->copy, 0, v.rank, v.shape, NULL, dt);
    if (t) oj__scope_detach(t);
    return t;
}

void oj__wcopy_fresh(oj_tensor *param, oj_dtype dt, bool transposed) {
    oj_tensor v;
    if (!oj__live(param) || !param_view(param, transposed, &v)) return;
    oj_wcopy *e = find(param->eng, param->storage, &v, dt, NULL);
    if (e) {
        e->version = param->storage->version;
        e->filled = true;
        oj__storage_written(e->copy);
    }
}

oj_status oj__wcopies_sync(oj_engine *eng) {
    for (oj_wcopy *e = eng->wcopies; e; e = e->next)
        if (stale(e)) {
            oj_status st = refresh(eng, e);
            if (st != OJ_OK) return st;
        }
    return OJ_OK;
}

int64_t oj__wcopies_count(const oj_engine *eng) {
    int64_t n = 0;
    for (const oj_wcopy *e = eng ? eng->wcopies : NULL; e; e = e->next) n++;
    return n;
}

int64_t oj__wcopy_probes(const oj_engine *eng) { return eng ? eng->wcopy_probes : 0; }

void oj__wcopy_forget(oj_storage *s) {
    while (s->wcopies) {
        oj_wcopy *e = s->wcopies;
        s->wcopies = e->snext;
        unlink_entry(s->eng, e);
        oj__storage_release(e->copy);
        free(e);
    }
}

void oj__wcopies_free(oj_engine *eng) {
    while (eng->wcopies) {
        oj_wcopy *e = eng->wcopies;
        eng->wcopies = e->next;
        e->src->wcopies = NULL; /* every entry goes */
        oj__storage_release(e->copy);
        free(e);
    }
}
