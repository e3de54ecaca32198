/* The persistent gpt2 decode step (nn_decode.h, oj__decode_mega):
 * validation and dispatch to the backend's decode_mega entry. */
#include <stdlib.h>

#include "ops/nn_common.h"
#include "ops/nn_decode.h"

bool oj__decode_mega_ok(const oj_engine *eng, int64_t C, int64_t H, int64_t S, oj_dtype dt) {
    return eng && eng->backend && eng->backend->decode_mega_ok && eng->backend->decode_mega &&
           eng->backend->decode_mega_ok(C, H, S, (int)dt);
}

/* Whether t has the shape (r dims of s). */
static bool shaped(const oj_tensor *t, int r, const int64_t *s) {
    if (t->rank != r) return false;
    for (int d = 0; d < r; d++)
        if (t->shape[d] != s[d]) return false;
    return true;
}

oj_tensor *oj__decode_mega(oj_tensor *wte, oj_tensor *wpe, oj_tensor *tok, oj_tensor *pos,
                           oj_tensor *mask, int64_t n_layer, oj_tensor *const *lw, double eps) {
    static const char op[] = "decode_mega";
    enum { NL = OJ__DECODE_MEGA_PER_LAYER };
    if (n_layer < 1 || lw == NULL) return NULL;
    const int64_t n = 5 + NL * n_layer;
    oj_tensor **ins = malloc((size_t)n * sizeof *ins);
    if (ins == NULL) return NULL;
    ins[0] = wte, ins[1] = wpe, ins[2] = tok, ins[3] = pos, ins[4] = mask;
    for (int64_t i = 0; i < NL * n_layer; i++) ins[5 + i] = lw[i];
    oj_engine *eng = oj__ops_engine(op, (int)n, ins);
    free(ins);
    if (eng == NULL) return NULL;
    const oj_tensor *kv0 = lw[NL - 1];
    if (kv0->rank != 5 || kv0->shape[0] != 2 || kv0->shape[1] != 1) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: the cache must be [2, 1, H, S, D]", op);
        return NULL;
    }
    const int64_t H = kv0->shape[2], S = kv0->shape[3], D = kv0->shape[4], C = H * D;
    const oj_dtype dt = wte->dtype;
    if (wte->rank != 2 || wte->shape[1] != C || !oj_is_contiguous(wte) || wpe->rank != 2 ||
        wpe->shape[1] != C || !oj_is_contiguous(wpe) || oj_numel(mask) != S ||
        !oj_is_contiguous(mask) || oj_numel(tok) != 1 || oj_numel(pos) != 1) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: wte [V, %lld] and wpe [P, %lld] contiguous, mask of %lld elements, tok "
                     "and pos of one",
                     op, (long long)C, (long long)C, (long long)S);
        return NULL;
    }
    if (wpe->dtype != dt || mask->dtype != OJ_BOOL || tok->dtype != OJ_I64 || pos->dtype != OJ_I64) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: wpe %s (wte %s), mask %s (bool), tok %s, pos %s (i64)",
                     op, oj_dtype_name(wpe->dtype), oj_dtype_name(dt), oj_dtype_name(mask->dtype),
                     oj_dtype_name(tok->dtype), oj_dtype_name(pos->dtype));
        return NULL;
    }
    /* each layer's tensors: vectors [N], weights [K, N] (oj__decode_weight_ok), the cache */
    const int64_t vec_n[NL] = {C, C, 0, 3 * C, 0, C, C, C, 0, 4 * C, 0, C, 0};
    const int64_t wk[NL] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0, 0};
    const int64_t wn[NL] = {0, 0, 3 * C, 0, C, 0, 0, 0, 4 * C, 0, C, 0, 0};
    const int64_t kvs[5] = {2, 1, H, S, D};
    for (int64_t l = 0; l < n_layer; l++) {
        for (int i = 0; i < NL; i++) {
            const oj_tensor *t = lw[l * NL + i];
            bool ok = t->dtype == dt;
            if (vec_n[i]) ok = ok && oj_numel(t) == vec_n[i] && oj_is_contiguous(t);
            else if (wk[i]) {
                const int64_t s2[2] = {wk[i], wn[i]};
                ok = ok && shaped(t, 2, s2) && oj__decode_weight_ok(t);
            } else {
                ok = ok && shaped(t, 5, kvs) && oj_is_contiguous(t);
            }
            if (!ok) {
                char b[96];
                oj_set_error(eng, t->dtype == dt ? OJ_ERR_SHAPE : OJ_ERR_DTYPE,
                             "%s: layer %lld tensor %d is %s %s: not the layer's (C %lld, %lld "
                             "heads, %lld slots, %s)",
                             op, (long long)l, i, oj_shape_str(t, b, sizeof b),
                             oj_dtype_name(t->dtype), (long long)C, (long long)H, (long long)S,
                             oj_dtype_name(dt));
                return NULL;
            }
        }
    }
    if (!oj__decode_mega_ok(eng, C, H, S, dt)) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "%s: the %s backend has no persistent step for C %lld, %lld heads, %lld "
                     "slots, %s",
                     op, eng->backend ? eng->backend->name : "?", (long long)C, (long long)H,
                     (long long)S, oj_dtype_name(dt));
        return NULL;
    }
    int64_t s3[3] = {1, 1, C};
    oj_tensor *x = oj__tensor_alloc(eng, 3, s3, dt, op);
    if (x == NULL) return NULL;
    if (!oj__kernel_ok(eng, eng->backend->decode_mega(eng, x, wte, wpe, tok, pos, mask, n_layer,
                                                      (const oj_tensor *const *)lw, eps),
                       op)) {
        oj_release(x);
        return NULL;
    }
    return x;
}
