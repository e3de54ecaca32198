/* Paged attention (internal; oj__paged_attention in core/internal.h): one
 * sequence's queries over its keys and values held in blocks of a KV pool
 * (PagedAttention, Kwon et al. 2023). The backend's
 * attention_paged_forward reads the blocks in place; a backend without one
 * (or a dtype it does not take) gets the blocks gathered into one tensor
 * and scaled_dot_product_attention, which gives the same values. */
#include <math.h>
#include <stdlib.h>

#include "ops/nn_common.h"

static bool paged_check(oj_engine *eng, const char *op, oj_tensor *q, oj_tensor *k, oj_tensor *v,
                        const int32_t *blocks, int64_t S) {
    if (!oj__nn_check_float(eng, op, "q", q) || !oj__nn_check_same_dtype(eng, op, "k_pool", k, "q", q) ||
        !oj__nn_check_same_dtype(eng, op, "v_pool", v, "q", q))
        return false;
    char b1[160], b2[160], b3[160];
    oj__shape_fmt(b1, sizeof b1, q->rank, q->shape);
    oj__shape_fmt(b2, sizeof b2, k->rank, k->shape);
    oj__shape_fmt(b3, sizeof b3, v->rank, v->shape);
    const char *why = NULL;
    if (q->rank != 4 || k->rank != 4 || v->rank != 4)
        why = "q must be [1, H, T, D] and the pools [NB, Hkv, BS, D]";
    else if (q->shape[0] != 1)
        why = "q holds one sequence (B = 1)";
    else if (k->shape[3] != q->shape[3] || v->shape[3] != q->shape[3])
        why = "the head dims D differ";
    else if (k->shape[0] != v->shape[0] || k->shape[1] != v->shape[1] || k->shape[2] != v->shape[2])
        why = "the key and value pools differ in shape";
    else if (k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0)
        why = "the number of query heads H must be a multiple of the kv heads Hkv";
    else if (!oj_is_contiguous(k) || !oj_is_contiguous(v))
        why = "the pools must be contiguous";
    else if (blocks == NULL || S < q->shape[2] || S > k->shape[0] * k->shape[2])
        why = "need a block table and T <= S <= NB BS keys";
    if (why) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: q %s, k_pool %s, v_pool %s, S %lld do not fit: %s",
                     op, b1, b2, b3, (long long)S, why);
        return false;
    }
    for (int64_t i = 0; i < (S + k->shape[2] - 1) / k->shape[2]; i++)
        if (blocks[i] < 0 || blocks[i] >= k->shape[0]) {
            oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: block %lld of the table is %d, outside "
                         "the pool's [0, %lld)", op, (long long)i, blocks[i], (long long)k->shape[0]);
            return false;
        }
    return true;
}

/* Keys 0..S of a block table of pool t [NB, Hkv, BS, D] gathered into a
 * new [1, Hkv, S, D] (the blocks' values unchanged). */
static oj_tensor *gather(oj_tensor *t, const int32_t *blocks, int64_t S) {
    const int64_t BS = t->shape[2], nb = (S + BS - 1) / BS;
    oj_tensor **parts = calloc((size_t)nb, sizeof *parts);
    if (parts == NULL) {
        oj_set_error(t->eng, OJ_ERR_CAPACITY, "paged_attention: out of host memory");
        return NULL;
    }
    bool ok = true;
    for (int64_t i = 0; i < nb && ok; i++) ok = (parts[i] = oj_narrow(t, 0, blocks[i], 1)) != NULL;
    oj_tensor *all = !ok ? NULL : nb == 1 ? oj_retain(parts[0]) : oj_cat((int)nb, parts, 2);
    oj_tensor *out = all ? oj_narrow(all, 2, 0, S) : NULL;
    oj_release(all);
    for (int64_t i = 0; i < nb; i++) oj_release(parts[i]);
    free(parts);
    return out;
}

/* A new output for q [1, H, T, D]: [1, H, T, D] as a view of [1, T, H, D]
 * storage, as scaled_dot_product_attention lays it out; NULL with the error
 * recorded. */
static oj_tensor *heads_out(oj_engine *eng, oj_tensor *q, const char *op) {
    const int64_t H = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t bshape[4] = {1, T, H, D}, oshape[4] = {1, H, T, D};
    int64_t st[4] = {T * H * D, D, H * D, 1};
    oj_tensor *base = oj__tensor_alloc(eng, 4, bshape, q->dtype, op);
    oj_tensor *out = base ? oj__tensor_view(base, 4, oshape, st, base->offset) : NULL;
    oj_release(base);
    return out;
}

oj_tensor *oj__paged_attention(oj_tensor *q, oj_tensor *k_pool, oj_tensor *v_pool,
                               const int32_t *blocks, int64_t S, double scale) {
    const char *op = "paged_attention";
    oj_tensor *ins[3] = {q, k_pool, v_pool};
    oj_engine *eng = q && k_pool && v_pool ? oj__ops_engine(op, 3, ins) : NULL;
    if (eng == NULL || !paged_check(eng, op, q, k_pool, v_pool, blocks, S)) return NULL;
    if (isnan(scale)) scale = 1.0 / sqrt((double)q->shape[3]);
    if (eng->backend->attention_paged_forward) {
        oj_tensor *out = heads_out(eng, q, op);
        if (out == NULL) return NULL;
        oj_status rc =
            eng->backend->attention_paged_forward(eng, out, q, k_pool, v_pool, blocks, S, scale);
        if (rc == OJ_OK) return out;
        oj_release(out);
        if (rc != OJ_ERR_UNSUPPORTED) {
            oj__kernel_ok(eng, rc, op);
            return NULL;
        }
    }
    oj_tensor *k = gather(k_pool, blocks, S);
    oj_tensor *v = k ? gather(v_pool, blocks, S) : NULL;
    oj_tensor *out = v ? oj_scaled_dot_product_attention(q, k, v, NULL, true, scale) : NULL;
    oj_release(k);
    oj_release(v);
    return out;
}

/* ------------------------------------------------ packed rows, device tables */

static bool varlen_check(oj_engine *eng, const char *op, oj_tensor *q, oj_tensor *k, oj_tensor *v,
                         oj_tensor *tables, oj_tensor *seq, oj_tensor *pos) {
    if (!oj__nn_check_float(eng, op, "q", q) || !oj__nn_check_same_dtype(eng, op, "k_pool", k, "q", q) ||
        !oj__nn_check_same_dtype(eng, op, "v_pool", v, "q", q))
        return false;
    const char *why = NULL;
    if (q->rank != 4 || k->rank != 4 || v->rank != 4 || q->shape[0] != 1)
        why = "q must be [1, H, N, D] and the pools [NB, Hkv, BS, D]";
    else if (k->shape[3] != q->shape[3] || v->shape[3] != q->shape[3] || k->shape[0] != v->shape[0] ||
             k->shape[1] != v->shape[1] || k->shape[2] != v->shape[2])
        why = "the pools differ in shape or their head dim from q's";
    else if (k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0)
        why = "the number of query heads H must be a multiple of the kv heads Hkv";
    else if (!oj_is_contiguous(k) || !oj_is_contiguous(v) || !oj_is_contiguous(tables) ||
             !oj_is_contiguous(seq) || !oj_is_contiguous(pos))
        why = "the pools, the block tables, seq and pos must be contiguous";
    else if (tables->dtype != OJ_I32 || seq->dtype != OJ_I32 || pos->dtype != OJ_I32)
        why = "tables, seq and pos must be i32";
    else if (tables->rank != 2 || seq->rank != 1 || pos->rank != 1 ||
             seq->shape[0] != q->shape[2] || pos->shape[0] != q->shape[2])
        why = "tables must be [B, MB], seq and pos [N] (N = q's rows)";
    if (why) {
        char b1[160], b2[160];
        oj__shape_fmt(b1, sizeof b1, q->rank, q->shape);
        oj__shape_fmt(b2, sizeof b2, k->rank, k->shape);
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: q %s, k_pool %s do not fit: %s", op, b1, b2, why);
        return false;
    }
    return true;
}

/* A contiguous i32 tensor's values on the host (malloc'd), or NULL with
 * the error recorded. */
static int32_t *host_i32(oj_engine *eng, oj_tensor *t, const char *op) {
    const int64_t n = oj_numel(t);
    int32_t *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (h == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        return NULL;
    }
    if (n > 0 && oj_to_host(t, h, (size_t)n * sizeof *h) != OJ_OK) {
        free(h);
        return NULL;
    }
    return h;
}

oj_tensor *oj__paged_attention_varlen(oj_tensor *q, oj_tensor *k_pool, oj_tensor *v_pool,
                                      oj_tensor *tables, oj_tensor *seq, oj_tensor *pos,
                                      double scale) {
    const char *op = "paged_attention_varlen";
    oj_tensor *ins[6] = {q, k_pool, v_pool, tables, seq, pos};
    oj_engine *eng = q && k_pool && v_pool && tables && seq && pos ? oj__ops_engine(op, 6, ins) : NULL;
    if (eng == NULL || !varlen_check(eng, op, q, k_pool, v_pool, tables, seq, pos)) return NULL;
    const int64_t N = q->shape[2];
    if (isnan(scale)) scale = 1.0 / sqrt((double)q->shape[3]);
    if (eng->backend->attention_paged_varlen_forward) {
        oj_tensor *out = heads_out(eng, q, op);
        if (out == NULL) return NULL;
        oj_status rc = eng->backend->attention_paged_varlen_forward(eng, out, q, k_pool, v_pool,
                                                                     tables, seq, pos, scale);
        if (rc == OJ_OK) return out;
        oj_release(out);
        if (rc != OJ_ERR_UNSUPPORTED) {
            oj__kernel_ok(eng, rc, op);
            return NULL;
        }
    }
    /* row by row: row i is one query at the end of its S = pos[i] + 1 keys */
    const int64_t MB = tables->shape[1];
    int32_t *ht = host_i32(eng, tables, op), *hs = ht ? host_i32(eng, seq, op) : NULL;
    int32_t *hp = hs ? host_i32(eng, pos, op) : NULL;
    oj_tensor **ys = hp ? calloc((size_t)(N > 0 ? N : 1), sizeof *ys) : NULL;
    bool ok = ys != NULL;
    if (hp && ys == NULL) oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
    for (int64_t i = 0; i < N && ok; i++) {
        oj_tensor *qi = oj_narrow(q, 2, i, 1);
        if (qi && hp[i] < 0) {
            ys[i] = oj_zeros(eng, 4, qi->shape, qi->dtype);
        } else if (qi) {
            if (hs[i] < 0 || hs[i] >= tables->shape[0]) {
                oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: row %lld's sequence %d is outside "
                             "the tables' [0, %lld)", op, (long long)i, hs[i],
                             (long long)tables->shape[0]);
            } else {
                ys[i] = oj__paged_attention(qi, k_pool, v_pool, ht + (int64_t)hs[i] * MB,
                                            (int64_t)hp[i] + 1, scale);
            }
        }
        ok = ys[i] != NULL;
        oj_release(qi);
    }
    oj_tensor *y = !ok ? NULL : N == 1 ? oj_retain(ys[0]) : oj_cat((int)N, ys, 2);
    for (int64_t i = 0; ys && i < N; i++) oj_release(ys[i]);
    free(ys);
    free(ht);
    free(hs);
    free(hp);
    return y;
}

oj_status oj__paged_kv_write_(oj_tensor *pool, oj_tensor *x, oj_tensor *slot) {
    const char *op = "paged_kv_write";
    oj_tensor *ins[3] = {pool, x, slot};
    oj_engine *eng = pool && x && slot ? oj__ops_engine(op, 3, ins) : NULL;
    if (eng == NULL) return pool ? oj_last_status(pool->eng) : OJ_ERR_INVALID_ARGUMENT;
    if (!oj__nn_check_same_dtype(eng, op, "x", x, "pool", pool)) return oj_last_status(eng);
    if (pool->rank != 4 || x->rank != 4 || x->shape[0] != 1 || x->shape[1] != pool->shape[1] ||
        x->shape[3] != pool->shape[3] || !oj_is_contiguous(pool) || !oj_is_contiguous(slot) ||
        slot->dtype != OJ_I32 ||
        slot->rank != 1 || slot->shape[0] != x->shape[2]) {
        char b1[160], b2[160];
        oj__shape_fmt(b1, sizeof b1, pool->rank, pool->shape);
        oj__shape_fmt(b2, sizeof b2, x->rank, x->shape);
        return oj_set_error(eng, OJ_ERR_SHAPE, "%s: pool %s (contiguous [NB, Hkv, BS, D]) and x %s "
                            "([1, Hkv, N, D]) with slot i32 [N] (contiguous) do not fit", op, b1, b2);
    }
    if (eng->backend->paged_kv_write) {
        oj_status rc = eng->backend->paged_kv_write(eng, pool, x, slot);
        if (rc != OJ_ERR_UNSUPPORTED) return oj__kernel_ok(eng, rc, op) ? OJ_OK : oj_last_status(eng);
    }
    const int64_t N = x->shape[2], BS = pool->shape[2];
    int32_t *hs = host_i32(eng, slot, op);
    if (hs == NULL) return oj_last_status(eng);
    oj_status st = OJ_OK;
    for (int64_t t = 0; t < N && st == OJ_OK; t++) {
        if (hs[t] < 0) continue;
        oj_tensor *b = oj_narrow(pool, 0, hs[t] / BS, 1);
        oj_tensor *dst = b ? oj_narrow(b, 2, hs[t] % BS, 1) : NULL;
        oj_tensor *src = oj_narrow(x, 2, t, 1);
        st = dst && src ? oj_copy_(dst, src) : oj_last_status(eng);
        oj_release(src);
        oj_release(dst);
        oj_release(b);
    }
    free(hs);
    return st;
}
