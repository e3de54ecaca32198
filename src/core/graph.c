/* CUDA graphs, the device-independent half: the public API, each graph's
 * private memory pool (see oj_graph_pool in internal.h) and its written
 * set. The backend records and replays (src/backend/cuda/cuda_graph.cu);
 * storage.c takes blocks from the pool being captured into.
 *
 * Versions: a capture runs each op's host side once, so an in-place write
 * recorded in the graph bumps its storage's version once, at the capture;
 * every replay writes again. So the capture collects the storages it
 * writes that outlive it (oj__storage_written -> oj__graph_note_written:
 * not the graph's own pool, which only the graph reads) and each replay
 * bumps them once more, after it is queued and after the weight copies'
 * sync: a kept copy of a storage the graph writes is then stale, made
 * again before its next use, never taken as fresh. The trainer's graph
 * writes gradients (its pool's, or the data-parallel arena's), not
 * parameters or moments, so its replays leave the optimizer's bounds
 * valid. */
#include <stdlib.h>

#include "core/clock.h"
#include "backend/backend.h"
#include "core/internal.h"

struct oj_graph {
    oj_engine *eng;
    void *handle; /* the backend's instantiated graph */
    oj_graph_pool *pool;
    struct oj_graph *prev, *next; /* the engine's live graphs */
};

void oj__graph_pool_unref(oj_engine *eng, oj_graph_pool *p) {
    if (--p->refs > 0) return;
    oj__gpool_destroy(eng, p);
    free(p);
}

void oj__graph_note_written(oj_engine *eng, oj_storage *s) {
    oj_graph_pool *p = eng->capture_pool;
    if (p == NULL || s->gpool == p || s->written_in == eng->capture_serial) return;
    if (p->n_written == p->cap_written) {
        int64_t cap = p->cap_written ? 2 * p->cap_written : 16;
        oj_storage **w = realloc(p->written, (size_t)cap * sizeof *w);
        if (w == NULL) { /* the graph could not bump it at replay: no graph */
            p->failed = true;
            oj_set_error(eng, OJ_ERR_CAPACITY,
                         "graph capture: out of host memory recording a written tensor");
            return;
        }
        p->written = w;
        p->cap_written = cap;
    }
    oj__storage_retain(s);
    p->written[p->n_written++] = s;
    s->written_in = eng->capture_serial;
}

/* A replay was queued (or failed part way): each storage the graph
 * writes outside its pool is written again. */
static void bump_written(const oj_graph_pool *p) {
    for (int64_t i = 0; i < p->n_written; i++) oj__storage_written(p->written[i]);
}

/* The graph is gone (or its capture failed): free blocks go back to the
 * driver now, held ones when their storage is released. */
static void pool_drop(oj_engine *eng, oj_graph_pool *p) {
    p->graph_alive = false;
    for (int64_t i = 0; i < p->n_written; i++) oj__storage_release(p->written[i]);
    free(p->written);
    p->written = NULL;
    p->n_written = p->cap_written = 0;
    oj__gpool_drop(eng, p);
    for (int c = 0; c < OJ_POOL_CLASSES; c++)
        while (p->free_list[c]) {
            oj_dev_block *blk = p->free_list[c];
            p->free_list[c] = blk->next;
            eng->backend->free(eng, blk->ptr, blk->capacity);
            oj_budget_release(eng->root_budget, (int64_t)blk->capacity);
            free(blk);
        }
    oj__graph_pool_unref(eng, p);
}

void oj__graph_capture_abandon(oj_engine *eng) {
    oj_graph_pool *p = eng->capture_pool;
    if (p == NULL) return;
    eng->capture_pool = NULL;
    eng->backend->graph_abort(eng);
    pool_drop(eng, p);
}

bool oj_graph_capturing(const oj_engine *eng) { return eng != NULL && eng->capture_pool != NULL; }

oj_status oj_graph_capture_begin(oj_engine *eng) {
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (eng->err != OJ_OK) return eng->err; /* a capture starts from a clean state */
    const oj_backend *be = eng->backend;
    if (be->graph_begin == NULL)
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "graph_capture_begin: the %s backend has no graphs (CUDA engines only)",
                            be->name);
    if (eng->capture_pool)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "graph_capture_begin: a capture is already in progress");
    oj_graph_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return oj_set_error(eng, OJ_ERR_CAPACITY, "graph_capture_begin: out of host memory");
    p->refs = 1;
    p->graph_alive = true;
    /* the free blocks of eager work would sit beside the graph's own:
     * give them back first, so the graph's pool can reuse their memory */
    oj_engine_trim_pool(eng);
    oj_status st = be->graph_begin(eng);
    if (st != OJ_OK) {
        free(p);
        return st;
    }
    eng->capture_serial++;
    eng->capture_pool = p;
    return OJ_OK;
}

oj_graph *oj_graph_capture_end(oj_engine *eng) {
    if (eng == NULL) return NULL;
    oj_graph_pool *p = eng->capture_pool;
    if (p == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "graph_capture_end: no capture in progress");
        return NULL;
    }
    void *h = NULL;
    if (eng->err != OJ_OK || p->failed) { /* an op failed during the capture */
        oj_set_error(eng, OJ_ERR_STATE, "graph_capture_end: an error recorded during the capture "
                     "was cleared; the capture is abandoned (the failed op is not in it)");
        oj__graph_capture_abandon(eng);
        return NULL;
    }
    eng->capture_pool = NULL;
    oj_graph *g = calloc(1, sizeof *g);
    oj_status st = g ? eng->backend->graph_end(eng, &h)
                     : oj_set_error(eng, OJ_ERR_CAPACITY, "graph_capture_end: out of host memory");
    if (st != OJ_OK) {
        if (g == NULL) eng->backend->graph_abort(eng);
        free(g);
        pool_drop(eng, p);
        return NULL;
    }
    *g = (oj_graph){.eng = eng, .handle = h, .pool = p, .next = eng->graphs};
    if (eng->graphs) eng->graphs->prev = g;
    eng->graphs = g;
    return g;
}

oj_status oj_graph_replay(oj_graph *g) {
    if (g == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = g->eng;
    if (eng->capture_pool)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "graph_replay: cannot replay a graph during a capture");
    oj_status st = oj__wcopies_sync(eng); /* the graph reads kept copies as they are */
    if (st != OJ_OK) return st;
    st = eng->backend->graph_replay(eng, g->handle);
    bump_written(g->pool); /* after the sync: see the top of the file */
    return st;
}

oj_status oj__graph_launch(oj_graph *g) {
    if (g == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = g->eng;
    if (eng->backend->graph_launch == NULL || eng->backend->graph_checks == NULL)
        return oj_graph_replay(g);
    if (eng->capture_pool)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "graph_replay: cannot replay a graph during a capture");
    const double t0 = oj__now_s();
    oj_status st = oj__wcopies_sync(eng);
    const double t1 = oj__now_s();
    eng->graph_sync_s += t1 - t0;
    if (st != OJ_OK) return st;
    st = eng->backend->graph_launch(eng, g->handle);
    const double t2 = oj__now_s();
    bump_written(g->pool);
    eng->graph_launch_s += t2 - t1;
    eng->graph_bump_s += oj__now_s() - t2;
    return st;
}

oj_status oj__graph_checks(oj_graph *g) {
    if (g == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = g->eng;
    if (eng->backend->graph_launch == NULL || eng->backend->graph_checks == NULL)
        return OJ_OK; /* oj__graph_launch replayed with the checks */
    return eng->backend->graph_checks(eng, g->handle);
}

oj_status oj__read_defer(oj_engine *eng, void *dst, const void *src, size_t nbytes) {
    if (eng->backend->read_defer == NULL || eng->backend->read_wait == NULL)
        return eng->backend->copy_d2h(eng, dst, src, nbytes);
    return eng->backend->read_defer(eng, dst, src, nbytes);
}

bool oj__read_deferrable(const oj_engine *eng) {
    const oj_backend *b = eng->backend;
    return b->read_defer && b->read_wait && b->graph_launch && b->graph_checks &&
           b->graph_checks_defer && b->graph_checks_clean;
}

oj_status oj__read_wait(oj_engine *eng) {
    if (eng->backend->read_defer == NULL || eng->backend->read_wait == NULL) return OJ_OK;
    return eng->backend->read_wait(eng);
}

oj_status oj__graph_checks_defer(oj_graph *g) {
    if (g == NULL) return OJ_ERR_INVALID_ARGUMENT;
    const oj_backend *b = g->eng->backend;
    if (b->graph_launch == NULL || b->graph_checks == NULL) return OJ_OK; /* checked at replay */
    if (b->graph_checks_defer == NULL || b->graph_checks_clean == NULL)
        return oj_set_error(g->eng, OJ_ERR_UNSUPPORTED,
                            "graph checks: the %s backend cannot read them deferred",
                            b->name);
    return b->graph_checks_defer(g->eng, g->handle);
}

bool oj__graph_checks_clean(oj_graph *g) {
    if (g == NULL) return false;
    const oj_backend *b = g->eng->backend;
    if (b->graph_launch == NULL || b->graph_checks == NULL) return true; /* checked at replay */
    /* without deferred reads the words may be a later replay's: not clean */
    return b->graph_checks_clean != NULL && b->graph_checks_clean(g->eng, g->handle);
}

void oj_graph_free(oj_graph *g) {
    if (g == NULL) return;
    oj_engine *eng = g->eng;
    if (g->prev) g->prev->next = g->next;
    else eng->graphs = g->next;
    if (g->next) g->next->prev = g->prev;
    eng->backend->graph_destroy(eng, g->handle);
    pool_drop(eng, g->pool);
    free(g);
}

void oj__graph_free_all(oj_engine *eng) {
    while (eng->graphs) oj_graph_free(eng->graphs);
}
