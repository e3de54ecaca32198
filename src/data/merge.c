/* byte_pair_merge: repeatedly merge the adjacent pair of parts whose
 * concatenation is the lowest-ranked token (leftmost on ties), as tiktoken
 * does. Short pieces use arrays (quadratic, but tiny); long ones (runs of
 * digits, spaces or punctuation) a heap of (rank, position), which merges in
 * the same order in O(n log n). */
#include "data/bpe.h"

#define OJ_MERGE_LINEAR_MAX 128

static oj_status merge_linear(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                              size_t n, int32_t max_rank, oj_tokens *out) {
    int32_t *id = s->part_id, *rk = s->part_rank;
    for (size_t i = 0; i < n; i++)
        id[i] = tok->byte_id[b[i]];
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = oj_pairmap_get(&tok->pairs, id[i], id[i + 1]);
        rk[i] = (r < 0 || r >= max_rank) ? INT32_MAX : r;
    }
    size_t m = n;
    while (m > 1) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rk[i] < best) {
                best = rk[i];
                bi = i;
            }
        if (best == INT32_MAX)
            break;
        id[bi] = tok->merge_id ? tok->merge_id[best] : best;
        memmove(id + bi + 1, id + bi + 2, (m - bi - 2) * sizeof *id);
        if (bi + 2 < m)
            memmove(rk + bi + 1, rk + bi + 2, (m - bi - 3) * sizeof *rk);
        m--;
        if (bi > 0) {
            int32_t r = oj_pairmap_get(&tok->pairs, id[bi - 1], id[bi]);
            rk[bi - 1] = (r < 0 || r >= max_rank) ? INT32_MAX : r;
        }
        if (bi + 1 < m) {
            int32_t r = oj_pairmap_get(&tok->pairs, id[bi], id[bi + 1]);
            rk[bi] = (r < 0 || r >= max_rank) ? INT32_MAX : r;
        }
    }
    if (out->len + m > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->len + m)
            cap *= 2;
        int32_t *p = realloc(out->ids, cap * sizeof *p);
        if (!p)
            return OJ_ERR_CAPACITY;
        out->ids = p;
        out->cap = cap;
    }
    memcpy(out->ids + out->len, id, m * sizeof *id);
    out->len += m;
    return OJ_OK;
}

/* Min-heap of (rank << 32 | left position). */
void oj_heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

uint64_t oj_heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (v <= h[c])
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = v;
    return top;
}

static oj_status merge_heap(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b, size_t n,
                            int32_t max_rank, oj_tokens *out) {
    int32_t *id = s->part_id, *next = s->part_next, *prev = s->part_prev;
    uint64_t *h = s->heap;
    size_t hn = 0;
    int32_t N = (int32_t)n;
    for (int32_t i = 0; i < N; i++) {
        id[i] = tok->byte_id[b[i]];
        next[i] = i + 1;
        prev[i] = i - 1;
    }
    for (int32_t i = 0; i + 1 < N; i++) {
        int32_t r = oj_pairmap_get(&tok->pairs, id[i], id[i + 1]);
        if (r >= 0 && r < max_rank)
            oj_heap_push(h, &hn, (uint64_t)r << 32 | (uint32_t)i);
    }
    while (hn) {
        uint64_t top = oj_heap_pop(h, &hn);
        int32_t r = (int32_t)(top >> 32), l = (int32_t)(uint32_t)top;
        if (id[l] < 0 || next[l] >= N || oj_pairmap_get(&tok->pairs, id[l], id[next[l]]) != r)
            continue; /* stale */
        int32_t rt = next[l];
        id[l] = tok->merge_id ? tok->merge_id[r] : r;
        id[rt] = -1;
        next[l] = next[rt];
        if (next[rt] < N)
            prev[next[rt]] = l;
        if (prev[l] >= 0) {
            int32_t q = oj_pairmap_get(&tok->pairs, id[prev[l]], id[l]);
            if (q >= 0 && q < max_rank)
                oj_heap_push(h, &hn, (uint64_t)q << 32 | (uint32_t)prev[l]);
        }
        if (next[l] < N) {
            int32_t q = oj_pairmap_get(&tok->pairs, id[l], id[next[l]]);
            if (q >= 0 && q < max_rank)
                oj_heap_push(h, &hn, (uint64_t)q << 32 | (uint32_t)l);
        }
    }
    for (int32_t i = 0; i < N; i = next[i])
        if (oj_tokens_push(out, id[i]) != OJ_OK)
            return OJ_ERR_CAPACITY;
    return OJ_OK;
}

oj_status oj_bpe_merge(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b, size_t len,
                       int32_t max_rank, oj_tokens *out) {
    if (len > INT32_MAX / 4)
        return OJ_ERR_CAPACITY;
    if (oj_tok_session_reserve(s, len) != 0)
        return OJ_ERR_CAPACITY;
    if (len <= OJ_MERGE_LINEAR_MAX)
        return merge_linear(tok, s, b, len, max_rank, out);
    return merge_heap(tok, s, b, len, max_rank, out);
}
