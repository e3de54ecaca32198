/* Two small open-addressing hash maps used by the tokenizer: byte strings
 * -> int64 (vocabulary, encode cache, training word counts) and
 * (int32, int32) pairs -> int32 (BPE merges). Internal to src/data. */
#ifndef OJAS_DATA_HASHMAP_H
#define OJAS_DATA_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ------------------------------------------------ byte string -> int64 */

typedef struct oj_strmap_ent {
    uint32_t off, len; /* key bytes in keys[off .. off+len) */
    int64_t value;
} oj_strmap_ent;

typedef struct oj_strmap {
    uint64_t *slots; /* (hash >> 32) << 32 | (entry index + 1); 0 = empty */
    size_t mask;     /* slot count - 1 */
    oj_strmap_ent *ents;
    size_t n, ents_cap;
    uint8_t *keys;
    size_t keys_len, keys_cap;
} oj_strmap;

static inline uint64_t oj_strmap_hash(const void *key, size_t len) {
    return XXH3_64bits(key, len);
}

/* 0 on success, -1 out of memory. `expect`: expected entries. */
int oj_strmap_init(oj_strmap *m, size_t expect);
void oj_strmap_free(oj_strmap *m);
/* Remove every entry, keeping the memory. */
void oj_strmap_clear(oj_strmap *m);
/* Insert key (hash h) with value, or find it. Returns the entry index, or
 * -1 out of memory (or key longer than 4 GiB); *added tells which. */
int64_t oj_strmap_put(oj_strmap *m, const void *key, size_t len, uint64_t h, int64_t value,
                      bool *added);

/* Entry index of key, or -1. */
static inline int64_t oj_strmap_find(const oj_strmap *m, const void *key, size_t len,
                                     uint64_t h) {
    uint64_t tag = h >> 32;
    size_t i = (size_t)h & m->mask;
    for (;;) {
        uint64_t s = m->slots[i];
        if (s == 0)
            return -1;
        if ((s >> 32) == tag) {
            const oj_strmap_ent *e = &m->ents[(uint32_t)s - 1];
            if (e->len == len && memcmp(m->keys + e->off, key, len) == 0)
                return (int64_t)((uint32_t)s - 1);
        }
        i = (i + 1) & m->mask;
    }
}

/* ------------------------------------------------ (a, b) -> int32 */

typedef struct oj_pairmap {
    uint64_t *keys; /* (a << 32) | b; UINT64_MAX = empty */
    int32_t *vals;
    size_t mask, n;
} oj_pairmap;

#define OJ_PAIR_EMPTY UINT64_MAX

static inline uint64_t oj_pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}
static inline size_t oj_pair_slot(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29) & mask;
}

int oj_pairmap_init(oj_pairmap *m, size_t expect);
void oj_pairmap_free(oj_pairmap *m);
/* Set (a, b) -> v (overwrites). 0 ok, -1 out of memory. */
int oj_pairmap_set(oj_pairmap *m, int32_t a, int32_t b, int32_t v);

/* Value of (a, b), or -1. */
static inline int32_t oj_pairmap_get(const oj_pairmap *m, int32_t a, int32_t b) {
    uint64_t key = oj_pair_key(a, b);
    size_t i = oj_pair_slot(key, m->mask);
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key)
            return m->vals[i];
        if (k == OJ_PAIR_EMPTY)
            return -1;
        i = (i + 1) & m->mask;
    }
}

#endif
