/* Best-fit range allocation with coalescing (see range_heap.h). A linear
 * scan: a graph capture holds a few hundred free ranges at most and
 * allocates only while it is captured. */
#include <stdlib.h>
#include <string.h>

#include "core/range_heap.h"

/* Room for `want` free ranges. */
static bool reserve(oj__range_heap *h, int64_t want) {
    if (want <= h->cap) return true;
    int64_t cap = h->cap ? h->cap : 16;
    while (cap < want) cap *= 2;
    oj__range *r = realloc(h->free, (size_t)cap * sizeof *r);
    if (r == NULL) return false;
    h->free = r;
    h->cap = cap;
    return true;
}

static void remove_at(oj__range_heap *h, int64_t i) {
    memmove(h->free + i, h->free + i + 1, (size_t)(h->n - i - 1) * sizeof *h->free);
    h->n--;
}

bool oj__rheap_take(oj__range_heap *h, size_t len, size_t *off, bool *oom) {
    *oom = false;
    if (len == 0) return false;
    /* every live range may come back as its own free range: room for all */
    if (!reserve(h, h->n + h->live + 2)) {
        *oom = true;
        return false;
    }
    int64_t best = -1;
    for (int64_t i = 0; i < h->n; i++)
        if (h->free[i].len >= len && (best < 0 || h->free[i].len < h->free[best].len)) best = i;
    if (best < 0) return false;
    *off = h->free[best].off;
    if (h->free[best].len == len) remove_at(h, best);
    else {
        h->free[best].off += len;
        h->free[best].len -= len;
    }
    h->live++;
    return true;
}

/* Index of the first free range with off > x (binary search). */
static int64_t upper(const oj__range_heap *h, size_t x) {
    int64_t lo = 0, hi = h->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (h->free[mid].off <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Insert [off, off + len) as free, merged with its neighbours; room is
 * there (reserve). */
static void insert(oj__range_heap *h, size_t off, size_t len) {
    int64_t i = upper(h, off); /* free[i - 1] is before it, free[i] after */
    bool left = i > 0 && h->free[i - 1].off + h->free[i - 1].len == off;
    bool right = i < h->n && off + len == h->free[i].off;
    if (left && right) {
        h->free[i - 1].len += len + h->free[i].len;
        remove_at(h, i);
    } else if (left) {
        h->free[i - 1].len += len;
    } else if (right) {
        h->free[i].off = off;
        h->free[i].len += len;
    } else {
        memmove(h->free + i + 1, h->free + i, (size_t)(h->n - i) * sizeof *h->free);
        h->free[i] = (oj__range){off, len};
        h->n++;
    }
}

void oj__rheap_give(oj__range_heap *h, size_t off, size_t len) {
    h->live--;
    insert(h, off, len);
}

size_t oj__rheap_tail(const oj__range_heap *h) {
    if (h->n == 0) return 0;
    const oj__range *last = &h->free[h->n - 1];
    return last->off + last->len == h->top ? last->len : 0;
}

bool oj__rheap_grow(oj__range_heap *h, size_t bytes) {
    if (bytes == 0) return true;
    if (!reserve(h, h->n + h->live + 2)) return false;
    insert(h, h->top, bytes);
    h->top += bytes;
    return true;
}

bool oj__rheap_is_free(const oj__range_heap *h, size_t off, size_t len) {
    int64_t i = upper(h, off) - 1;
    return i >= 0 && off + len <= h->free[i].off + h->free[i].len;
}

void oj__rheap_clear(oj__range_heap *h) {
    free(h->free);
    memset(h, 0, sizeof *h);
}
