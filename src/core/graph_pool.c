/* A graph's memory pool on one reserved address range (the backend's
 * virtual memory: cuMemAddressReserve / cuMemMap on CUDA): the capture's
 * device storages are ranges of it, taken best-fit and merged when given
 * back (range_heap.h), and memory is mapped only at the range's end as the
 * capture needs more. A block freed during the capture serves any smaller
 * request and merges with its free neighbours, so the pool's peak stays
 * near the capture's live bytes; the size-classed lists (storage.c) reuse
 * a block only for a request of its own class. Reuse inside one capture is
 * safe as before: the capture records one stream, so a range is taken
 * again only by work queued after its last use.
 *
 * Charges: a live range is charged to its storage's budget, mapped free
 * bytes to the root budget (as the size-classed pool's free blocks). */
#include <stdlib.h>

#include "backend/backend.h"
#include "core/internal.h"

#define GPOOL_ALIGN ((size_t)512) /* cudaMalloc's alignment */

static size_t round_up(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

/* The address range, reserved at the pool's first request. False when the
 * backend has no virtual memory (size classes then). */
static bool vm_ready(oj_engine *eng, oj_graph_pool *p) {
    if (p->vm_tried) return p->gran > 0;
    p->vm_tried = true;
    const oj_backend *be = eng->backend;
    if (be->vm_granularity == NULL || be->memory_info == NULL) return false;
    size_t gran = be->vm_granularity(eng);
    int64_t free_b = 0, total_b = 0;
    if (gran == 0 || be->memory_info(eng, &free_b, &total_b) != OJ_OK || total_b <= 0) return false;
    /* the whole device's memory: a pool never needs more */
    size_t bytes = round_up((size_t)total_b, gran);
    void *base = be->vm_reserve(eng, bytes);
    if (base == NULL) return false;
    p->gran = gran;
    p->va_base = base;
    p->va_bytes = bytes;
    return true;
}

/* Map len more bytes at the range's end and add them to the heap. */
static bool grow(oj_engine *eng, oj_graph_pool *p, size_t len, const char *op, size_t nbytes) {
    if (len > p->va_bytes - p->heap.top) {
        oj_set_error(eng, OJ_ERR_CAPACITY,
                     "%s: cannot allocate %zu bytes: the graph pool's address range (%zu bytes, "
                     "the device's memory) is used up",
                     op, nbytes, p->va_bytes);
        return false;
    }
    if (p->n_maps == p->cap_maps) {
        int64_t cap = p->cap_maps ? 2 * p->cap_maps : 32;
        oj_vm_map *m = realloc(p->maps, (size_t)cap * sizeof *m);
        if (m == NULL) {
            oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
            return false;
        }
        p->maps = m;
        p->cap_maps = cap;
    }
    if (!oj__storage_reserve(eng, eng->root_budget, len, op, nbytes)) return false;
    const size_t off = p->heap.top;
    if (!eng->backend->vm_map(eng, p->va_base, off, len)) {
        oj_budget_release(eng->root_budget, (int64_t)len);
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: %s out of memory allocating %zu bytes", op,
                     eng->backend->name, len);
        return false;
    }
    if (!oj__rheap_grow(&p->heap, len)) {
        eng->backend->vm_unmap(eng, p->va_base, off, len);
        oj_budget_release(eng->root_budget, (int64_t)len);
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        return false;
    }
    p->maps[p->n_maps++] = (oj_vm_map){off, len, true};
    return true;
}

void *oj__gpool_take(oj_engine *eng, oj_graph_pool *p, size_t nbytes, oj_budget *b, size_t *cap,
                     const char *op, bool *handled) {
    *handled = vm_ready(eng, p);
    if (!*handled) return NULL;
    if (nbytes > p->va_bytes) {
        oj__storage_capacity_error(eng, op, nbytes, NULL);
        return NULL;
    }
    const size_t len = round_up(nbytes, GPOOL_ALIGN);
    size_t off;
    bool oom;
    if (!oj__rheap_take(&p->heap, len, &off, &oom)) {
        if (oom || !grow(eng, p, round_up(len - oj__rheap_tail(&p->heap), p->gran), op, nbytes) ||
            !oj__rheap_take(&p->heap, len, &off, &oom)) {
            if (oom) oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
            return NULL;
        }
    }
    oj_budget *over = NULL;
    if (oj__budget_move(eng->root_budget, b, (int64_t)len, &over) != OJ_OK) {
        oj__rheap_give(&p->heap, off, len);
        oj__storage_capacity_error(eng, op, nbytes, over);
        return NULL;
    }
    *cap = len;
    return (char *)p->va_base + off;
}

/* Unmap every map inside [lo, hi) that no live range uses. */
static void unmap_free(oj_engine *eng, oj_graph_pool *p, size_t lo, size_t hi) {
    for (int64_t i = 0; i < p->n_maps; i++) {
        oj_vm_map *m = &p->maps[i];
        if (!m->mapped || m->off + m->len <= lo || m->off >= hi) continue;
        if (!oj__rheap_is_free(&p->heap, m->off, m->len)) continue;
        eng->backend->vm_unmap(eng, p->va_base, m->off, m->len);
        oj_budget_release(eng->root_budget, (int64_t)m->len);
        m->mapped = false;
    }
}

void oj__gpool_give(oj_engine *eng, oj_storage *s) {
    oj_graph_pool *p = s->gpool;
    const size_t off = (size_t)((char *)s->data - (char *)p->va_base);
    oj__budget_move(s->budget, eng->root_budget, (int64_t)s->capacity, NULL);
    oj__rheap_give(&p->heap, off, s->capacity);
    if (!p->graph_alive) unmap_free(eng, p, off, off + s->capacity);
}

void oj__gpool_drop(oj_engine *eng, oj_graph_pool *p) {
    if (p->gran) unmap_free(eng, p, 0, p->heap.top);
}

void oj__gpool_destroy(oj_engine *eng, oj_graph_pool *p) {
    if (p->gran == 0) return;
    unmap_free(eng, p, 0, p->heap.top); /* nothing is live now: all of it */
    eng->backend->vm_release(eng, p->va_base, p->va_bytes);
    oj__rheap_clear(&p->heap);
    free(p->maps);
    p->maps = NULL;
    p->n_maps = p->cap_maps = 0;
    p->gran = 0;
}
