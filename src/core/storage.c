/* Refcounted storage and the engine's host pool.
 *
 * Host blocks are rounded up to size classes (64 B, then 2^k, 1.25, 1.5 and
 * 1.75 x 2^k) and kept on per-class free lists when released, because a
 * fresh page costs ~13 us to fault in and a training step reallocates the
 * same sizes every iteration. Pooled bytes stay reserved on the root budget;
 * a block in use is charged to the budget that was current when it was
 * taken. When a reservation fails the pool is trimmed and the reservation
 * retried once. Device storage uses the same size classes: a released
 * device block goes to a per-class list of small host nodes (device memory
 * cannot hold the links) and is reused by the next request of its class;
 * with one stream per engine, reuse in stream order is safe. New device
 * blocks are reserved on the budget before the driver is asked. During a
 * graph capture device blocks come from, and go back to, the graph's
 * private pool instead (src/core/graph.c): ranges of one address range
 * where the backend has virtual memory (src/core/graph_pool.c). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"

/* Size class of n bytes and its capacity; -1 when too large. */
static int size_class(size_t n, size_t *cap) {
    if (n <= 64) {
        *cap = 64;
        return 0;
    }
    int k = 63 - __builtin_clzll((unsigned long long)n); /* 2^k <= n < 2^(k+1) */
    size_t base = (size_t)1 << k, quarter = base / 4;
    size_t j = (n - base + quarter - 1) / quarter; /* 0..4 quarters above base */
    if (j == 4) {
        k++;
        base <<= 1;
        j = 0;
    }
    if (k > 62) return -1;
    *cap = base + j * (base / 4);
    return (k - 6) * 4 + (int)j; /* 64 B is class 0 */
}

void oj__storage_capacity_error(oj_engine *eng, const char *op, size_t nbytes, oj_budget *over) {
    if (over)
        oj_set_error(eng, OJ_ERR_CAPACITY,
                     "%s: cannot allocate %zu bytes: budget '%s' would exceed its limit "
                     "(%lld of %lld bytes in use)",
                     op, nbytes, oj_budget_name(over), (long long)oj_budget_current(over),
                     (long long)oj_budget_limit(over));
    else
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: cannot allocate %zu bytes", op, nbytes);
}

bool oj__storage_reserve(oj_engine *eng, oj_budget *b, size_t bytes, const char *op, size_t nbytes) {
    oj_budget *over = NULL;
    if (bytes > (size_t)INT64_MAX) {
        oj__storage_capacity_error(eng, op, nbytes, NULL);
        return false;
    }
    if (oj__budget_reserve_ex(b, (int64_t)bytes, &over) == OJ_OK) return true;
    if (eng->pooled_bytes > 0) {
        oj_engine_trim_pool(eng);
        if (oj__budget_reserve_ex(b, (int64_t)bytes, &over) == OJ_OK) return true;
    }
    oj__storage_capacity_error(eng, op, nbytes, over);
    return false;
}

static void *host_alloc(oj_engine *eng, size_t cap) {
    return oj_cpu_backend.alloc(eng, cap);
}

/* s->data <- a block of size class cls (capacity cap): a free one of
 * the class (the graph pool gp's during a capture, else the engine's),
 * else a new one reserved on s's budget first. NULL with the error set
 * when it cannot. */
static void *class_take(oj_engine *eng, oj_storage *s, oj_graph_pool *gp, int cls, size_t cap,
                        const char *op) {
    const bool host = eng->device.type == OJ_DEVICE_CPU;
    oj_dev_block **dev_list = gp ? &gp->free_list[cls] : &eng->dev_pool[cls];
    void *pooled = host ? (void *)eng->pool[cls] : (void *)*dev_list;
    if (pooled) {
        oj_budget *over = NULL;
        if (oj__budget_move(eng->root_budget, s->budget, (int64_t)cap, &over) != OJ_OK) {
            oj__storage_capacity_error(eng, op, s->nbytes, over);
            return NULL;
        }
        if (host) {
            eng->pooled_bytes -= (int64_t)cap;
            eng->pool[cls] = eng->pool[cls]->next;
            return pooled;
        }
        if (!gp) eng->pooled_bytes -= (int64_t)cap;
        oj_dev_block *blk = pooled;
        *dev_list = blk->next;
        void *p = blk->ptr;
        free(blk);
        return p;
    }
    if (!oj__storage_reserve(eng, s->budget, cap, op, s->nbytes)) return NULL;
    void *p = host ? host_alloc(eng, cap) : eng->backend->alloc(eng, cap);
    if (p == NULL) {
        oj_budget_release(s->budget, (int64_t)cap);
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: %s out of memory allocating %zu bytes", op,
                     host ? "host" : eng->backend->name, cap);
    }
    return p;
}

oj_storage *oj__storage_new(oj_engine *eng, size_t nbytes, const char *op) {
    oj_storage *s = calloc(1, sizeof *s);
    if (s == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        return NULL;
    }
    s->refcount = 1;
    s->eng = eng;
    s->device = eng->device;
    s->nbytes = nbytes;
    s->budget = eng->budget;
    s->pool_class = -1;
    const bool host = eng->device.type == OJ_DEVICE_CPU;
    size_t cap;
    int cls = size_class(host || nbytes >= 256 ? nbytes : 256, &cap);
    if (cls < 0) {
        oj__storage_capacity_error(eng, op, nbytes, NULL);
        free(s);
        return NULL;
    }
    /* During a graph capture device blocks come from the graph's pool: a
     * range of its address space where the backend maps memory
     * (graph_pool.c), else a block of the size class. */
    oj_graph_pool *gp = host ? NULL : eng->capture_pool;
    bool ranged = false;
    if (gp) s->data = oj__gpool_take(eng, gp, nbytes, s->budget, &cap, op, &ranged);
    if (ranged) cls = OJ_POOL_RANGE;
    else s->data = class_take(eng, s, gp, cls, cap, op);
    if (s->data == NULL) {
        free(s);
        return NULL;
    }
    if (gp) {
        s->gpool = gp;
        gp->refs++;
    }
    s->capacity = cap;
    s->pool_class = cls;
    eng->live_bytes += (int64_t)cap;
    if (eng->live_bytes > eng->live_peak) eng->live_peak = eng->live_bytes;
    return s;
}

oj_storage *oj__storage_wrap(oj_engine *eng, void *data, size_t nbytes, void (*release)(void *),
                             void *ctx) {
    oj_storage *s = calloc(1, sizeof *s);
    if (s == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "storage_wrap: out of host memory");
        return NULL;
    }
    s->refcount = 1;
    s->eng = eng;
    s->device = eng->device;
    s->data = data;
    s->nbytes = nbytes;
    s->capacity = nbytes;
    s->pool_class = -1;
    s->release = release;
    s->release_ctx = ctx;
    return s;
}

void oj__storage_retain(oj_storage *s) {
    if (s) s->refcount++;
}

void oj__storage_written(oj_storage *s) {
    if (s == NULL) return;
    s->version++;
    if (s->eng->capture_pool != NULL) oj__graph_note_written(s->eng, s);
}

/* Released device storage s onto lists[its class] (a small host node
 * holds the link; the charge moves to the root), or, with lists NULL or no
 * node, back to the driver (the charge released). True when kept. */
static bool device_block_keep(oj_engine *eng, oj_storage *s, oj_dev_block **lists) {
    oj_dev_block *blk = lists ? malloc(sizeof *blk) : NULL;
    if (blk == NULL) {
        const oj_backend *be = oj__backend_for(s->device.type);
        if (be && be->free) be->free(eng, s->data, s->capacity);
        oj_budget_release(s->budget, (int64_t)s->capacity);
        return false;
    }
    oj__budget_move(s->budget, eng->root_budget, (int64_t)s->capacity, NULL);
    blk->ptr = s->data;
    blk->capacity = s->capacity;
    blk->next = lists[s->pool_class];
    lists[s->pool_class] = blk;
    return true;
}

void oj__storage_release(oj_storage *s) {
    if (s == NULL || --s->refcount > 0) return;
    oj_engine *eng = s->eng;
    if (s->keep_copies) oj__wcopy_forget(s);
    if (s->budget != NULL) eng->live_bytes -= (int64_t)s->capacity;
    if (s->budget == NULL) { /* external memory */
        if (s->release) s->release(s->release_ctx);
    } else if (s->pool_class == OJ_POOL_RANGE) {
        oj__gpool_give(eng, s);
        oj__graph_pool_unref(eng, s->gpool);
    } else if (s->pool_class >= 0 && s->device.type != OJ_DEVICE_CPU) {
        /* back to its graph's pool while the graph lives, else the engine's */
        oj_graph_pool *gp = s->gpool;
        bool kept = device_block_keep(eng, s, gp ? (gp->graph_alive ? gp->free_list : NULL)
                                                 : eng->dev_pool);
        if (kept && !gp) eng->pooled_bytes += (int64_t)s->capacity;
        if (gp) oj__graph_pool_unref(eng, gp);
    } else if (s->pool_class >= 0) {
        /* Back to the pool: the charge moves to the root (cannot fail: the
         * root gets back exactly what the chain releases). */
        oj__budget_move(s->budget, eng->root_budget, (int64_t)s->capacity, NULL);
        oj_pool_block *blk = s->data;
        blk->capacity = s->capacity;
        blk->next = eng->pool[s->pool_class];
        eng->pool[s->pool_class] = blk;
        eng->pooled_bytes += (int64_t)s->capacity;
    } else {
        const oj_backend *be = oj__backend_for(s->device.type);
        if (be && be->free) be->free(eng, s->data, s->capacity);
        oj_budget_release(s->budget, (int64_t)s->capacity);
    }
    free(s);
}

void oj_engine_trim_pool(oj_engine *eng) {
    if (eng == NULL) return;
    for (int c = 0; c < OJ_POOL_CLASSES; c++) {
        while (eng->pool[c]) {
            oj_pool_block *blk = eng->pool[c];
            eng->pool[c] = blk->next;
            int64_t cap = (int64_t)blk->capacity;
            oj_cpu_backend.free(eng, blk, (size_t)cap);
            oj_budget_release(eng->root_budget, cap);
            eng->pooled_bytes -= cap;
        }
        while (eng->dev_pool[c]) {
            oj_dev_block *blk = eng->dev_pool[c];
            eng->dev_pool[c] = blk->next;
            int64_t cap = (int64_t)blk->capacity;
            if (eng->backend && eng->backend->free) eng->backend->free(eng, blk->ptr, (size_t)cap);
            oj_budget_release(eng->root_budget, cap);
            eng->pooled_bytes -= cap;
            free(blk);
        }
    }
}
