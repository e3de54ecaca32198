/* Open-addressing maps with linear probing, kept at most half full. */
#include "data/hashmap.h"

#include <stdlib.h>

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

int oj_strmap_init(oj_strmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    size_t cap = pow2_at_least(expect * 2 + 1);
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return -1;
    m->mask = cap - 1;
    return 0;
}

void oj_strmap_free(oj_strmap *m) {
    free(m->slots);
    free(m->ents);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

void oj_strmap_clear(oj_strmap *m) {
    memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
    m->n = 0;
    m->keys_len = 0;
}

static int strmap_grow(oj_strmap *m) {
    size_t cap = (m->mask + 1) * 2;
    uint64_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t e = 0; e < m->n; e++) {
        const oj_strmap_ent *en = &m->ents[e];
        uint64_t h = oj_strmap_hash(m->keys + en->off, en->len);
        size_t i = (size_t)h & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = ((h >> 32) << 32) | (uint64_t)(e + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

int64_t oj_strmap_put(oj_strmap *m, const void *key, size_t len, uint64_t h, int64_t value,
                      bool *added) {
    *added = false;
    int64_t found = oj_strmap_find(m, key, len, h);
    if (found >= 0)
        return found;
    if (len > UINT32_MAX || m->n >= UINT32_MAX - 1 || m->keys_len + len > UINT32_MAX)
        return -1;
    if ((m->n + 1) * 2 > m->mask + 1 && strmap_grow(m) != 0)
        return -1;
    if (m->n == m->ents_cap) {
        size_t cap = m->ents_cap ? m->ents_cap * 2 : 64;
        oj_strmap_ent *e = realloc(m->ents, cap * sizeof *e);
        if (!e)
            return -1;
        m->ents = e;
        m->ents_cap = cap;
    }
    if (m->keys_len + len > m->keys_cap) {
        size_t cap = m->keys_cap ? m->keys_cap : 256;
        while (cap < m->keys_len + len)
            cap *= 2;
        uint8_t *k = realloc(m->keys, cap);
        if (!k)
            return -1;
        m->keys = k;
        m->keys_cap = cap;
    }
    if (len)
        memcpy(m->keys + m->keys_len, key, len);
    size_t e = m->n++;
    m->ents[e] = (oj_strmap_ent){(uint32_t)m->keys_len, (uint32_t)len, value};
    m->keys_len += len;
    size_t i = (size_t)h & m->mask;
    while (m->slots[i])
        i = (i + 1) & m->mask;
    m->slots[i] = ((h >> 32) << 32) | (uint64_t)(e + 1);
    *added = true;
    return (int64_t)e;
}

int oj_pairmap_init(oj_pairmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    size_t cap = pow2_at_least(expect * 2 + 1);
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        oj_pairmap_free(m);
        return -1;
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    m->mask = cap - 1;
    return 0;
}

void oj_pairmap_free(oj_pairmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int pairmap_grow(oj_pairmap *m) {
    oj_pairmap g;
    if (oj_pairmap_init(&g, (m->mask + 1)) != 0)
        return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == OJ_PAIR_EMPTY)
            continue;
        size_t j = oj_pair_slot(m->keys[i], g.mask);
        while (g.keys[j] != OJ_PAIR_EMPTY)
            j = (j + 1) & g.mask;
        g.keys[j] = m->keys[i];
        g.vals[j] = m->vals[i];
    }
    g.n = m->n;
    oj_pairmap_free(m);
    *m = g;
    return 0;
}

int oj_pairmap_set(oj_pairmap *m, int32_t a, int32_t b, int32_t v) {
    if ((m->n + 1) * 2 > m->mask + 1 && pairmap_grow(m) != 0)
        return -1;
    uint64_t key = oj_pair_key(a, b);
    size_t i = oj_pair_slot(key, m->mask);
    while (m->keys[i] != OJ_PAIR_EMPTY && m->keys[i] != key)
        i = (i + 1) & m->mask;
    if (m->keys[i] == OJ_PAIR_EMPTY)
        m->n++;
    m->keys[i] = key;
    m->vals[i] = v;
    return 0;
}
