/* Paged KV decoding (gpt.h, oj_kv_pool): a pool of fixed-size key/value
 * blocks shared by many sequences, and one forward over a packed batch of
 * sequences whose keys and values live in those blocks (Kwon et al.,
 * "Efficient Memory Management for Large Language Model Serving with
 * PagedAttention", 2023).
 *
 * The forward is gpt_forward.c's with two changes: the positions are per
 * token (a device tensor, as the static decode step reads them), and the
 * attention (oj__gpt_attend_paged) writes each sequence's new keys and
 * values into its blocks, then attends its queries to its own positions.
 * The projections, norms and MLP see the packed [1, N, C] rows, and every
 * one of them computes a row from that row alone, so a sequence's values
 * do not depend on what else is packed with it.
 *
 * On a backend with device-table entries (CUDA: attention_paged_varlen_forward,
 * paged_kv_write) the block tables, slots and positions of a step are
 * uploaded once, as one i32 tensor, and every layer runs two writes and one
 * attention kernel over the whole packed batch. oj_gpt_decode_paged runs a
 * step of one token per sequence padded to a bucket of B = 2^j rows (the
 * padding rows inactive: they write no key and attend to nothing), whose
 * inputs live in the pool's device tensors: a CUDA engine captures it once
 * per bucket as a graph and replays it.
 *
 * Shapes: N packed new tokens, P a sequence's cached positions, n its new
 * tokens, NB blocks, BS block size, H heads, Hkv KV heads, D head dim. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "backend/backend.h"
#include "core/internal.h"
#include "models/gpt_internal.h"
#include "ojas/ops.h"

oj_status oj_kv_pool_create(oj_gpt *m, int64_t n_blocks, int64_t block_size, oj_kv_pool **out) {
    if (m == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = m->eng;
    if (out == NULL) return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "kv_pool: out is NULL");
    *out = NULL;
    if (n_blocks <= 0 || block_size <= 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "kv_pool: n_blocks %lld and block_size %lld must be > 0",
                            (long long)n_blocks, (long long)block_size);
    if (n_blocks > INT32_MAX / block_size)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "kv_pool: %lld blocks of %lld positions exceed 2^31 positions",
                            (long long)n_blocks, (long long)block_size);
    if (m->cfg.family == OJ_NANOLAB)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "kv_pool: the nanolab family is not paged (its value residual and "
                            "sliding window need oj_generate); gpt2 and llama are");
    oj_kv_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->k = calloc((size_t)m->cfg.n_layer, sizeof *p->k);
        p->v = calloc((size_t)m->cfg.n_layer, sizeof *p->v);
    }
    if (p == NULL || p->k == NULL || p->v == NULL) {
        if (p) {
            free(p->k);
            free(p->v);
        }
        free(p);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "kv_pool: out of host memory");
    }
    p->m = m;
    p->n_layer = m->cfg.n_layer;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->max_blocks = (m->cfg.block_size + block_size - 1) / block_size;
    int64_t shape[4] = {n_blocks, m->cfg.n_kv_head, block_size, oj__gpt_head_dim(&m->cfg)};
    for (int64_t l = 0; l < m->cfg.n_layer; l++) {
        p->k[l] = oj_zeros(eng, 4, shape, m->wte->dtype); /* the weights' dtype */
        if (p->k[l]) oj__scope_detach(p->k[l]);
        p->v[l] = oj_zeros(eng, 4, shape, m->wte->dtype);
        if (p->v[l]) oj__scope_detach(p->v[l]);
        if (p->k[l] == NULL || p->v[l] == NULL) {
            oj_status st = oj_last_status(eng);
            oj_kv_pool_free(p);
            return st != OJ_OK ? st : OJ_ERR_INTERNAL;
        }
    }
    *out = p;
    return OJ_OK;
}

static void bucket_free(oj_paged_bucket *b) {
    oj_graph_free(b->graph);
    oj_tensor *ts[] = {b->logits, b->argmax, b->argmax_lp, b->greedy, b->pos, b->tables,
                       b->slot,   b->vpos,   b->seq,       b->idx,    b->in};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) oj_release(ts[i]);
    free(b->host_in);
    free(b->host_out);
    free(b->host_am);
    memset(b, 0, sizeof *b);
}

void oj_kv_pool_free(oj_kv_pool *p) {
    if (p == NULL) return;
    for (int i = 0; i < 4; i++) oj_release(p->pending.out[i]); /* a step begun, never ended */
    for (int j = 0; j < OJ_PAGED_BUCKETS; j++) bucket_free(&p->buckets[j]);
    for (int64_t l = 0; l < p->n_layer; l++) {
        oj_release(p->k[l]);
        oj_release(p->v[l]);
    }
    free(p->k);
    free(p->v);
    free(p->stage);
    free(p);
}

int64_t oj_kv_pool_blocks(const oj_kv_pool *p) { return p ? p->n_blocks : 0; }

void oj_kv_pool_set_timing(oj_kv_pool *p, bool sync) {
    if (p) p->timing_sync = sync;
}

oj_kv_pool_times oj_kv_pool_get_times(const oj_kv_pool *p) {
    oj_kv_pool_times t = {0};
    return p ? p->times : t;
}
int64_t oj_kv_pool_block_size(const oj_kv_pool *p) { return p ? p->block_size : 0; }

int64_t oj_kv_pool_block_bytes(const oj_gpt *m, int64_t block_size) {
    if (m == NULL || block_size <= 0) return 0;
    return 2 * m->cfg.n_layer * m->cfg.n_kv_head * block_size * oj__gpt_head_dim(&m->cfg) *
           (int64_t)oj_dtype_size(m->wte->dtype);
}

/* Block blk of layer tensor t [NB, Hkv, BS, D] as [1, Hkv, BS, D]. */
static oj_tensor *block_view(oj_tensor *t, int64_t blk) { return oj_narrow(t, 0, blk, 1); }

/* Write x [1, Hkv, n, D] (rows s0.. of the packed keys or values) at
 * positions past.. of a sequence's blocks of layer tensor t. */
static bool write_rows(oj_tensor *t, int64_t BS, const int32_t *blocks, int64_t past,
                       oj_tensor *x, int64_t s0, int64_t n) {
    for (int64_t j = 0; j < n;) {
        int64_t p = past + j, off = p % BS, run = BS - off < n - j ? BS - off : n - j;
        oj_tensor *b = block_view(t, blocks[p / BS]);
        oj_tensor *dst = b ? oj_narrow(b, 2, off, run) : NULL;
        oj_tensor *src = oj_narrow(x, 2, s0 + j, run);
        bool ok = dst && src && oj_copy_(dst, src) == OJ_OK;
        oj_release(src);
        oj_release(dst);
        oj_release(b);
        if (!ok) return false;
        j += run;
    }
    return true;
}

oj_tensor *oj__gpt_attend_paged(oj_kv_cache *c, int l, oj_tensor *q, oj_tensor *k, oj_tensor *v) {
    const oj_gpt_paged *pg = c->paged;
    const oj_kv_pool *pool = pg->pool;
    if (pg->slot) { /* device tables: two writes and one kernel for the batch */
        if (oj__paged_kv_write_(pool->k[l], k, pg->slot) != OJ_OK ||
            oj__paged_kv_write_(pool->v[l], v, pg->slot) != OJ_OK)
            return NULL;
        return oj__paged_attention_varlen(q, pool->k[l], pool->v[l], pg->tables, pg->seq, pg->vpos,
                                          NAN);
    }
    const int64_t BS = pool->block_size;
    oj_tensor **ys = calloc((size_t)pg->n_seq, sizeof *ys);
    if (ys == NULL) {
        oj_set_error(oj_tensor_engine(q), OJ_ERR_CAPACITY, "paged attention: out of host memory");
        return NULL;
    }
    bool ok = true;
    for (int64_t i = 0; i < pg->n_seq && ok; i++) {
        const int64_t s0 = pg->start[i], n = pg->start[i + 1] - s0, P = pg->past[i];
        const int32_t *bl = pg->blocks[i];
        ok = write_rows(pool->k[l], BS, bl, P, k, s0, n) && write_rows(pool->v[l], BS, bl, P, v, s0, n);
        oj_tensor *qi = ok ? oj_narrow(q, 2, s0, n) : NULL;
        /* causal, bottom-right aligned: new query j sees positions <= P + j */
        ys[i] = qi ? oj__paged_attention(qi, pool->k[l], pool->v[l], bl, P + n, NAN) : NULL;
        ok = ys[i] != NULL;
        oj_release(qi);
    }
    oj_tensor *y = !ok ? NULL : pg->n_seq == 1 ? oj_retain(ys[0]) : oj_cat((int)pg->n_seq, ys, 2);
    for (int64_t i = 0; i < pg->n_seq; i++) oj_release(ys[i]);
    free(ys);
    return y;
}

/* Whether the engine's backend reads block tables from device memory. */
static bool device_tables(oj_engine *eng) {
    return eng->backend->attention_paged_varlen_forward != NULL && eng->backend->paged_kv_write != NULL;
}

/* The device form of a packed batch (oj_gpt_paged): for each of the N
 * packed rows its sequence seq, position vpos and slot; the tables
 * [n_seq, pool->max_blocks] (unused entries 0). */
static void fill_tables(const oj_kv_pool *pool, int64_t n_seq, const int64_t *start,
                        const int64_t *past, const int32_t *const *blocks, int64_t N, int32_t *seq,
                        int32_t *vpos, int32_t *slot, int32_t *tables) {
    const int64_t BS = pool->block_size, MB = pool->max_blocks;
    (void)N;
    memset(tables, 0, (size_t)(n_seq * MB) * sizeof *tables);
    for (int64_t i = 0; i < n_seq; i++) {
        const int64_t n = start[i + 1] - start[i], nb = (past[i] + n + BS - 1) / BS;
        for (int64_t b = 0; b < nb; b++) tables[i * MB + b] = blocks[i][b];
        for (int64_t t = start[i]; t < start[i + 1]; t++) {
            const int64_t p = past[i] + t - start[i];
            seq[t] = (int32_t)i;
            vpos[t] = (int32_t)p;
            slot[t] = (int32_t)(blocks[i][p / BS] * BS + p % BS);
        }
    }
}

/* Check sequence i's n new tokens at positions past.. and its block ids. */
static bool check_seq(oj_gpt *m, const oj_kv_pool *pool, int64_t i, int64_t n, int64_t past,
                      const int32_t *blocks) {
    oj_engine *eng = m->eng;
    if (n <= 0 || past < 0 || blocks == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "gpt forward_paged: sequence %lld has %lld new tokens and %lld past "
                     "positions (need >= 1 and >= 0, and a block table)",
                     (long long)i, (long long)n, (long long)past);
        return false;
    }
    if (past + n > m->cfg.block_size) {
        oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                     "gpt forward_paged: sequence %lld's positions %lld..%lld exceed the "
                     "context (block_size %lld)",
                     (long long)i, (long long)past, (long long)(past + n - 1),
                     (long long)m->cfg.block_size);
        return false;
    }
    const int64_t nb = (past + n + pool->block_size - 1) / pool->block_size;
    for (int64_t b = 0; b < nb; b++)
        if (blocks[b] < 0 || blocks[b] >= pool->n_blocks) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                         "gpt forward_paged: sequence %lld's block %lld is %d, outside the "
                         "pool's [0, %lld)",
                         (long long)i, (long long)b, blocks[b], (long long)pool->n_blocks);
            return false;
        }
    return true;
}

/* Check the packed batch's offsets, positions and block ids. */
static bool check_batch(oj_gpt *m, const oj_kv_pool *pool, int64_t N, int64_t n_seq,
                        const int64_t *start, const int64_t *past, const int32_t *const *blocks) {
    oj_engine *eng = m->eng;
    if (n_seq <= 0 || start == NULL || past == NULL || blocks == NULL || start[0] != 0 ||
        start[n_seq] != N) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "gpt forward_paged: %lld sequences need start[0] = 0 and start[n_seq] = %lld "
                     "(the packed tokens), past and blocks",
                     (long long)n_seq, (long long)N);
        return false;
    }
    for (int64_t i = 0; i < n_seq; i++)
        if (!check_seq(m, pool, i, start[i + 1] - start[i], past[i], blocks[i])) return false;
    return true;
}

oj_tensor *oj_gpt_forward_paged(oj_gpt *m, oj_kv_pool *pool, oj_tensor *idx, int64_t n_seq,
                                const int64_t *start, const int64_t *past,
                                const int32_t *const *blocks) {
    if (m == NULL || idx == NULL) return NULL;
    oj_engine *eng = m->eng;
    if (pool == NULL || pool->m != m) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gpt forward_paged: %s",
                     pool ? "the KV pool was created for another model" : "the KV pool is NULL");
        return NULL;
    }
    if (oj_rank(idx) != 2 || oj_size(idx, 0) != 1) {
        char b[96];
        oj_set_error(eng, OJ_ERR_SHAPE, "gpt forward_paged: idx must be [1, N], got %s",
                     oj_shape_str(idx, b, sizeof b));
        return NULL;
    }
    const int64_t N = oj_size(idx, 1);
    if (!check_batch(m, pool, N, n_seq, start, past, blocks)) return NULL;
    /* The step's inputs in one i32 upload from the pool's host staging:
     * the positions [N] and each sequence's last row [n_seq], then, for a
     * backend that reads block tables on the device, seq, vpos, slot [N]
     * and the tables [n_seq, MB]. */
    const bool dt = device_tables(eng);
    const int64_t MB = pool->max_blocks, n_in = N + n_seq + (dt ? 3 * N + n_seq * MB : 0);
    if (n_in > pool->stage_cap) {
        int32_t *h = realloc(pool->stage, (size_t)n_in * sizeof *h);
        if (h == NULL) {
            oj_set_error(eng, OJ_ERR_CAPACITY, "gpt forward_paged: out of host memory");
            return NULL;
        }
        pool->stage = h;
        pool->stage_cap = n_in;
    }
    int32_t *pos = pool->stage, *last = pos + N;
    for (int64_t i = 0; i < n_seq; i++) {
        for (int64_t t = start[i]; t < start[i + 1]; t++) pos[t] = (int32_t)(past[i] + t - start[i]);
        last[i] = (int32_t)(start[i + 1] - 1);
    }
    if (dt) {
        int32_t *h = last + n_seq;
        fill_tables(pool, n_seq, start, past, blocks, N, h, h + N, h + 2 * N, h + 3 * N);
    }
    bool prev = oj_set_grad_enabled(eng, false);
    oj_tensor *logits = NULL;
    oj_scope_begin(eng);
    int64_t sin[1] = {n_in}, st[2] = {n_seq, MB};
    oj_tensor *in = oj_from_host(eng, 1, sin, OJ_I32, pool->stage, (size_t)n_in * sizeof *pool->stage);
    oj_tensor *pt = in ? oj_narrow(in, 0, 0, N) : NULL;
    oj_tensor *lt = in ? oj_narrow(in, 0, N, n_seq) : NULL;
    oj_gpt_paged pg = {pool, n_seq, start, past, blocks, NULL, NULL, NULL, NULL};
    if (in && dt) {
        const int64_t o = N + n_seq;
        oj_tensor *tn = oj_narrow(in, 0, o + 3 * N, n_seq * MB);
        pg.seq = oj_narrow(in, 0, o, N);
        pg.vpos = oj_narrow(in, 0, o + N, N);
        pg.slot = oj_narrow(in, 0, o + 2 * N, N);
        pg.tables = tn ? oj_reshape(tn, 2, st) : NULL;
        oj_release(tn);
    }
    const bool tables_ok = !dt || (pg.seq && pg.vpos && pg.slot && pg.tables);
    if (pt && lt && tables_ok) {
        oj_gpt_dev_pos dp = {pt, NULL, NULL};
        /* a cache of batch 1 whose attention is the pool's */
        oj_kv_cache c = {.m = m, .batch = 1, .capacity = m->cfg.block_size, .n_layer = pool->n_layer,
                         .k = pool->k, .v = pool->v, .dev = &dp, .paged = &pg};
        oj_tensor *xf = oj__gpt_hidden(m, idx, &c);           /* [1, N, C] */
        oj_tensor *xl = xf ? oj_index_select(xf, 1, lt) : NULL; /* [1, n_seq, C] */
        logits = xl ? oj_linear(xl, m->head, NULL) : NULL;     /* [1, n_seq, V] */
        oj_release(xl);
        oj_release(xf);
    }
    if (logits) oj_keep(logits);
    oj_tensor *tmp[] = {pg.tables, pg.seq, pg.vpos, pg.slot, pt, lt, in};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    oj_scope_end(eng);
    oj_set_grad_enabled(eng, prev);
    return logits;
}

/* ------------------------------------------------ the bucketed decode step */

/* A pool-owned tensor: out of every scope, released by oj_kv_pool_free. */
static oj_tensor *own(oj_tensor *t) {
    if (t) oj__scope_detach(t);
    return t;
}

/* Bucket b's device inputs and host staging for B rows (allocated once). */
static oj_status bucket_init(oj_kv_pool *pool, oj_paged_bucket *b, int64_t B) {
    oj_engine *eng = pool->m->eng;
    const int64_t MB = pool->max_blocks, n_in = B * (5 + MB);
    int64_t sin[1] = {n_in}, s1b[2] = {1, B}, stab[2] = {B, MB};
    b->B = B;
    b->host_in = malloc((size_t)n_in * sizeof *b->host_in);
    b->host_out = malloc((size_t)(2 * B) * sizeof *b->host_out);
    b->host_am = malloc((size_t)B * sizeof *b->host_am);
    if (b->host_in == NULL || b->host_out == NULL || b->host_am == NULL) {
        bucket_free(b);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "gpt decode_paged: out of host memory");
    }
    b->in = own(oj_zeros(eng, 1, sin, OJ_I32));
    oj_tensor *i0 = b->in ? oj_narrow(b->in, 0, 0, B) : NULL;
    b->idx = i0 ? own(oj_reshape(i0, 2, s1b)) : NULL;
    oj_release(i0);
    b->seq = b->in ? own(oj_narrow(b->in, 0, B, B)) : NULL;
    b->vpos = b->in ? own(oj_narrow(b->in, 0, 2 * B, B)) : NULL;
    b->slot = b->in ? own(oj_narrow(b->in, 0, 3 * B, B)) : NULL;
    b->pos = b->in ? own(oj_narrow(b->in, 0, 4 * B, B)) : NULL;
    oj_tensor *tn = b->in ? oj_narrow(b->in, 0, 5 * B, B * MB) : NULL;
    b->tables = tn ? own(oj_reshape(tn, 2, stab)) : NULL;
    oj_release(tn);
    if (b->in && b->idx && b->seq && b->vpos && b->slot && b->tables && b->pos) return OJ_OK;
    oj_status st = oj_last_status(eng);
    bucket_free(b);
    return st != OJ_OK ? st : OJ_ERR_INTERNAL;
}

/* The step's device work over bucket b: out[0] f32 logits [1, B, V],
 * out[1] i64 argmax [1, B] (first largest), out[2] f32 [1, B] its
 * log-probability, out[3] f32 [2, B] the argmax as f32 (exact for V <=
 * 2^24; NULL beyond) over the log-probability, for one read-back (kept in
 * the caller's scope); false with the error recorded. */
static bool decode_body(oj_gpt *m, oj_kv_pool *pool, oj_paged_bucket *b, oj_tensor *out[4]) {
    oj_engine *eng = m->eng;
    oj_scope_begin(eng);
    oj_gpt_dev_pos dp = {b->pos, NULL, NULL};
    oj_gpt_paged pg = {pool, b->B, NULL, NULL, NULL, b->tables, b->seq, b->vpos, b->slot};
    oj_kv_cache c = {.m = m, .batch = 1, .capacity = m->cfg.block_size, .n_layer = pool->n_layer,
                     .k = pool->k, .v = pool->v, .dev = &dp, .paged = &pg};
    oj_tensor *xf = oj__gpt_hidden(m, b->idx, &c);             /* [1, B, C] */
    oj_tensor *lg = xf ? oj_linear(xf, m->head, NULL) : NULL;  /* [1, B, V] */
    oj_tensor *l32 = lg && oj_tensor_dtype(lg) != OJ_F32 ? oj_cast(lg, OJ_F32) : oj_retain(lg);
    oj_tensor *am = NULL, *mx = l32 ? oj_max(l32, 2, false, &am) : NULL; /* [1, B] */
    const int d2[1] = {2};
    oj_tensor *lse = mx ? oj_logsumexp(l32, 1, d2, false) : NULL;
    oj_tensor *lp = lse ? oj_sub(mx, lse) : NULL;
    const bool exact_ids = m->cfg.vocab_size <= (1ll << 24);
    oj_tensor *amf = lp && am && exact_ids ? oj_cast(am, OJ_F32) : NULL;
    oj_tensor *pair[2] = {amf, lp};
    oj_tensor *gr = amf ? oj_cat(2, pair, 0) : NULL; /* [2, B] */
    const bool ok = lp && am && (gr || !exact_ids);
    out[0] = ok ? l32 : NULL;
    out[1] = ok ? am : NULL;
    out[2] = ok ? lp : NULL;
    out[3] = ok ? gr : NULL;
    if (ok) {
        for (int i = 0; i < 4; i++)
            if (out[i]) oj_keep(out[i]);
    } else {
        oj_tensor *o[] = {l32, am, lp, gr};
        for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) oj_release(o[i]);
    }
    oj_tensor *tmp[] = {lg, mx, lse, amf};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) oj_release(tmp[i]);
    oj_scope_end(eng);
    return ok;
}

oj_status oj_gpt_decode_paged_begin(oj_gpt *m, oj_kv_pool *pool, int64_t n_seq,
                                    const int32_t *tokens, const int64_t *past,
                                    const int32_t *const *blocks, bool use_graph) {
    if (m == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = m->eng;
    if (pool == NULL || pool->m != m)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gpt decode_paged: %s",
                            pool ? "the KV pool was created for another model" : "the KV pool is NULL");
    if (pool->pending.active)
        return oj_set_error(eng, OJ_ERR_STATE,
                            "gpt decode_paged: a step begun on this pool has not ended "
                            "(oj_gpt_decode_paged_end)");
    if (tokens == NULL || past == NULL || blocks == NULL || n_seq <= 0 ||
        n_seq > (1ll << (OJ_PAGED_BUCKETS - 1)))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "gpt decode_paged: %lld sequences (need 1..2^%d) and their tokens, "
                            "positions and block tables",
                            (long long)n_seq, OJ_PAGED_BUCKETS - 1);
    double t0 = oj__now_s();
    const int64_t V = m->cfg.vocab_size, BS = pool->block_size, MB = pool->max_blocks;
    const int64_t bad = oj__gpt_bad_token(tokens, n_seq, V);
    if (bad >= 0)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "gpt decode_paged: sequence %lld's token is %d, outside the "
                            "vocabulary [0, %lld)",
                            (long long)bad, tokens[bad], (long long)V);
    for (int64_t i = 0; i < n_seq; i++)
        if (!check_seq(m, pool, i, 1, past[i], blocks[i])) return oj_last_status(eng);
    int j = 0;
    while ((1ll << j) < n_seq) j++;
    oj_paged_bucket *b = &pool->buckets[j];
    const int64_t B = 1ll << j;
    oj_status st = b->in ? OJ_OK : bucket_init(pool, b, B);
    if (st != OJ_OK) return st;
    /* the step's inputs, one upload: rows n_seq.. are inactive (position
     * -1, no slot, embedding row 0) */
    const int64_t n_in = B * (5 + MB);
    int32_t *h = b->host_in;
    int32_t *seq = h + B, *vpos = h + 2 * B, *slot = h + 3 * B, *pos = h + 4 * B, *tab = h + 5 * B;
    memset(tab, 0, (size_t)(B * MB) * sizeof *tab);
    for (int64_t i = 0; i < B; i++) {
        h[i] = 0;
        seq[i] = (int32_t)i;
        vpos[i] = -1;
        slot[i] = -1;
        pos[i] = 0;
    }
    for (int64_t i = 0; i < n_seq; i++) {
        const int64_t p = past[i];
        h[i] = tokens[i];
        vpos[i] = (int32_t)p;
        pos[i] = (int32_t)p;
        slot[i] = (int32_t)(blocks[i][p / BS] * BS + p % BS);
        memcpy(tab + i * MB, blocks[i], (size_t)(p / BS + 1) * sizeof *tab);
    }
    double t1 = oj__now_s();
    st = oj_copy_from_host(b->in, h, (size_t)n_in * sizeof *h);
    double t2 = oj__now_s();
    bool prev = oj_set_grad_enabled(eng, false);
    const bool graph = use_graph && oj_engine_device(eng).type == OJ_DEVICE_CUDA;
    oj_paged_pending *pd = &pool->pending;
    memset(pd, 0, sizeof *pd);
    if (st == OJ_OK && graph && b->graph == NULL) {
        st = oj_graph_capture_begin(eng);
        oj_tensor *o[4] = {NULL, NULL, NULL, NULL};
        bool body = st == OJ_OK && decode_body(m, pool, b, o);
        oj_graph *g = st == OJ_OK ? oj_graph_capture_end(eng) : NULL; /* abandons after an error */
        if (g == NULL || !body) {
            oj_graph_free(g);
            for (int i = 0; i < 4; i++) oj_release(o[i]);
            if (st == OJ_OK) st = oj_last_status(eng) != OJ_OK ? oj_last_status(eng) : OJ_ERR_DEVICE;
        } else {
            b->graph = g;
            b->logits = own(o[0]);
            b->argmax = own(o[1]);
            b->argmax_lp = own(o[2]);
            b->greedy = o[3] ? own(o[3]) : NULL;
        }
    }
    /* the replay is only queued: the outputs are read by _end, then the
     * replay's deferred index checks (one wait for the device, not two) */
    if (st == OJ_OK && graph) {
        st = oj__graph_launch(b->graph);
        pd->launched = st == OJ_OK;
    } else if (st == OJ_OK) {
        oj_scope_begin(eng);
        if (decode_body(m, pool, b, pd->out)) {
            for (int i = 0; i < 4; i++)
                if (pd->out[i]) oj__scope_detach(pd->out[i]);
        } else {
            st = oj_last_status(eng);
        }
        oj_scope_end(eng);
    }
    oj_set_grad_enabled(eng, prev);
    double t3 = oj__now_s();
    oj_kv_pool_times *tm = &pool->times;
    tm->prepare_s += t1 - t0;
    tm->upload_s += t2 - t1;
    tm->launch_s += t3 - t2;
    if (st != OJ_OK) {
        for (int i = 0; i < 4; i++) oj_release(pd->out[i]);
        memset(pd, 0, sizeof *pd);
        tm->steps++;
        return st;
    }
    pd->active = true;
    pd->graph = graph;
    pd->bucket = j;
    pd->n_seq = n_seq;
    return OJ_OK;
}

oj_status oj_gpt_decode_paged_end(oj_gpt *m, oj_kv_pool *pool, float *logits, int32_t *argmax,
                                  float *argmax_logprob) {
    if (m == NULL) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = m->eng;
    if (pool == NULL || pool->m != m || !pool->pending.active)
        return oj_set_error(eng, pool == NULL || pool->m != m ? OJ_ERR_INVALID_ARGUMENT : OJ_ERR_STATE,
                            "gpt decode_paged_end: %s",
                            pool == NULL      ? "the KV pool is NULL"
                            : pool->m != m    ? "the KV pool was created for another model"
                                              : "no step was begun on this pool");
    oj_paged_pending *pd = &pool->pending;
    oj_paged_bucket *b = &pool->buckets[pd->bucket];
    const int64_t V = m->cfg.vocab_size, B = b->B, n_seq = pd->n_seq;
    const bool graph = pd->graph;
    double t3 = oj__now_s(), t4 = t3;
    oj_status st = OJ_OK;
    if (pool->timing_sync) {
        st = oj_engine_synchronize(eng);
        t4 = oj__now_s();
    }
    /* the first n_seq rows of each output wanted (contiguous views) */
    oj_tensor *all[4] = {graph ? b->logits : pd->out[0], graph ? b->argmax : pd->out[1],
                         graph ? b->argmax_lp : pd->out[2], graph ? b->greedy : pd->out[3]};
    if (st == OJ_OK && logits) {
        oj_tensor *rows = oj_narrow(all[0], 1, 0, n_seq);
        st = rows ? oj_to_host(rows, logits, (size_t)(n_seq * V) * sizeof *logits) : oj_last_status(eng);
        oj_release(rows);
    }
    if (st == OJ_OK && (argmax || argmax_logprob) && all[3]) {
        /* both in one copy: [2, B] f32 */
        st = oj_to_host(all[3], b->host_out, (size_t)(2 * B) * sizeof *b->host_out);
        for (int64_t i = 0; st == OJ_OK && i < n_seq; i++) {
            if (argmax) argmax[i] = (int32_t)b->host_out[i];
            if (argmax_logprob) argmax_logprob[i] = b->host_out[B + i];
        }
    } else if (st == OJ_OK && (argmax || argmax_logprob)) { /* V > 2^24: two copies */
        if (argmax) st = oj_to_host(all[1], b->host_am, (size_t)B * sizeof *b->host_am);
        for (int64_t i = 0; st == OJ_OK && argmax && i < n_seq; i++) argmax[i] = (int32_t)b->host_am[i];
        if (st == OJ_OK && argmax_logprob) {
            oj_tensor *rows = oj_narrow(all[2], 1, 0, n_seq);
            st = rows ? oj_to_host(rows, argmax_logprob, (size_t)n_seq * sizeof *argmax_logprob)
                      : oj_last_status(eng);
            oj_release(rows);
        }
    }
    if (pd->launched) { /* the replay's checks, after its outputs (or their error) */
        oj_status ck = oj__graph_checks(b->graph);
        if (st == OJ_OK) st = ck;
    }
    for (int i = 0; i < 4; i++) oj_release(pd->out[i]);
    memset(pd, 0, sizeof *pd);
    double t5 = oj__now_s();
    oj_kv_pool_times *tm = &pool->times;
    tm->steps++;
    tm->wait_s += t4 - t3;
    tm->readback_s += t5 - t4;
    return st;
}

oj_status oj_gpt_decode_paged(oj_gpt *m, oj_kv_pool *pool, int64_t n_seq, const int32_t *tokens,
                              const int64_t *past, const int32_t *const *blocks, bool use_graph,
                              float *logits, int32_t *argmax, float *argmax_logprob) {
    oj_status st = oj_gpt_decode_paged_begin(m, pool, n_seq, tokens, past, blocks, use_graph);
    return st == OJ_OK ? oj_gpt_decode_paged_end(m, pool, logits, argmax, argmax_logprob) : st;
}

bool oj_gpt_decode_paged_graphed(const oj_kv_pool *pool, int64_t n_seq) {
    if (pool == NULL || n_seq <= 0 || n_seq > (1ll << (OJ_PAGED_BUCKETS - 1))) return false;
    int j = 0;
    while ((1ll << j) < n_seq) j++;
    return pool->buckets[j].graph != NULL;
}
