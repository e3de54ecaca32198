/* Best-fit allocation of byte ranges inside one growing region, with
 * splitting and coalescing: the offsets a graph's memory pool hands out
 * inside its reserved address range (src/core/graph_pool.c).
 *
 * The region is [0, top): `top` grows by oj__rheap_grow and never shrinks.
 * Free ranges are kept sorted by offset and never adjacent (coalesced), so
 * a released range merges with its free neighbours. A request takes the
 * smallest free range that holds it (lowest offset among equals), from that
 * range's start. Method: the best-fit, address-ordered, coalescing free list
 * of Knuth TAOCP vol. 1 section 2.5 and PyTorch's caching allocator (which
 * splits and merges blocks inside a segment the same way). Offsets and
 * lengths are bytes; alignment is the caller's (it rounds lengths). */
#ifndef OJ_CORE_RANGE_HEAP_H
#define OJ_CORE_RANGE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct oj__range {
    size_t off, len;
} oj__range;

typedef struct oj__range_heap {
    oj__range *free; /* sorted by off, none adjacent */
    int64_t n, cap;
    int64_t live; /* ranges taken and not given back */
    size_t top;   /* the region's end */
} oj__range_heap;

/* Take len > 0 bytes: true with *off set, false when no free range holds
 * len (grow and retry) or the host is out of memory (*oom set). Keeps
 * room for every live range to come back as its own free range, so
 * oj__rheap_give never allocates. */
bool oj__rheap_take(oj__range_heap *h, size_t len, size_t *off, bool *oom);

/* Give back a range taken by oj__rheap_take (merged with its free
 * neighbours). Never fails. */
void oj__rheap_give(oj__range_heap *h, size_t off, size_t len);

/* Free bytes at the region's end (0 when the last byte is taken): a
 * request of len needs the region grown by len minus this. */
size_t oj__rheap_tail(const oj__range_heap *h);

/* Add [top, top + bytes) as free (merged with the tail). False when the
 * host is out of memory (nothing changed). */
bool oj__rheap_grow(oj__range_heap *h, size_t bytes);

/* True when [off, off + len) lies inside one free range. */
bool oj__rheap_is_free(const oj__range_heap *h, size_t off, size_t len);

void oj__rheap_clear(oj__range_heap *h);

#endif
