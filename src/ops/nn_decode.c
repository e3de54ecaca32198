/* The fused ops of the batch-1 decode step (nn_decode.h): validation and
 * dispatch to the backend's decode entries. */
#include "ops/nn_decode.h"

#include <math.h>

#include "backend/gemv_tiles.h"
#include "ops/nn_common.h"
#include "ops/views_internal.h"

bool oj__decode_weight_ok(const oj_tensor *w) {
    if (w == NULL || w->rank != 2) return false;
    const int64_t K = w->shape[0], N = w->shape[1];
    return K > 0 && K <= 8192 && N > 0 && N % 8 == 0 && (N == 1 || w->stride[1] == 1) &&
           w->stride[0] % 8 == 0 && w->stride[0] >= N && w->offset % 16 == 0 &&
           (w->dtype == OJ_BF16 || w->dtype == OJ_F16);
}

bool oj__decode_matches_unfused(const oj_tensor *w) {
    /* the tiles cuda_gemv.cu launches (backend/gemv_tiles.h) */
    return oj__decode_weight_ok(w) && oj_gemv_kn_unsplit(w->shape[1], w->shape[0]);
}

bool oj__decode_supported(const oj_engine *eng) {
    return eng && eng->backend && eng->backend->decode_norm_linear &&
           eng->backend->decode_linear_residual && eng->backend->decode_argmax_advance &&
           eng->backend->decode_embed_mask;
}

bool oj__decode_vec_ok(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t,
                       int64_t n, oj_dtype dt, const char *of) {
    if (oj_numel(t) != n || !oj_is_contiguous(t)) {
        char b[96];
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: %s must be contiguous with %lld elements, got %s%s",
                     op, arg, (long long)n, oj_shape_str(t, b, sizeof b),
                     oj_is_contiguous(t) ? "" : " (strided)");
        return false;
    }
    if (t->dtype != dt) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s is %s, %s %s", op, arg, oj_dtype_name(t->dtype),
                     of, oj_dtype_name(dt));
        return false;
    }
    return true;
}

static bool vec_ok(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t, int64_t n,
                   oj_dtype dt) {
    return oj__decode_vec_ok(eng, op, arg, t, n, dt, "the weight");
}

bool oj__decode_proj_args_ok(oj_engine *eng, const char *op, int act, double eps,
                             const oj_tensor *kv, const oj_tensor *slot, int64_t N, oj_dtype dt) {
    if (act != OJ__DECODE_ACT_NONE && act != OJ__DECODE_ACT_GELU) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: unknown activation %d", op, act);
        return false;
    }
    if (!(eps >= 0.0)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: eps must be >= 0, got %g", op, eps);
        return false;
    }
    if ((kv == NULL) != (slot == NULL)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: kv and slot go together (one is NULL)", op);
        return false;
    }
    if (kv == NULL) return true;
    char bs[96];
    bool shape = kv->rank == 5 && kv->shape[0] == 2 && kv->shape[1] == 1 &&
                 3 * kv->shape[2] * kv->shape[4] == N && oj_is_contiguous(kv);
    if (!shape) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: kv must be a contiguous cache [2, 1, H, S, D] with 3 H D = %lld, got %s",
                     op, (long long)N, oj_shape_str(kv, bs, sizeof bs));
        return false;
    }
    if (kv->dtype != dt || slot->dtype != OJ_I64 || oj_numel(slot) != 1) {
        oj_set_error(eng, OJ_ERR_DTYPE,
                     "%s: kv must be %s (got %s) and slot i64 [1] (got %s, %lld elements)", op,
                     oj_dtype_name(dt), oj_dtype_name(kv->dtype), oj_dtype_name(slot->dtype),
                     (long long)oj_numel(slot));
        return false;
    }
    return true;
}

/* w suits the entries, else the error naming op. */
static bool weight_ok(oj_engine *eng, const char *op, const oj_tensor *w) {
    if (oj__decode_weight_ok(w)) return true;
    char b[96];
    oj_set_error(eng, w->dtype == OJ_BF16 || w->dtype == OJ_F16 ? OJ_ERR_SHAPE : OJ_ERR_DTYPE,
                 "%s: the weight must be bf16/f16 [K, N] with n-stride 1, K <= 8192, N and the "
                 "row stride multiples of 8, 16-byte aligned; got %s %s",
                 op, oj_dtype_name(w->dtype), oj_shape_str(w, b, sizeof b));
    return false;
}

oj_tensor *oj__decode_norm_linear(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                  oj_tensor *w, oj_tensor *b, int act, oj_tensor *kv,
                                  oj_tensor *slot) {
    static const char op[] = "decode_norm_linear";
    oj_tensor *ins[7] = {x, nw, nb, w, b, kv, slot};
    int n = 4;
    if (b) ins[n++] = b;
    if (kv) ins[n++] = kv;
    if (slot) ins[n++] = slot;
    oj_engine *eng = oj__ops_engine(op, n, ins);
    if (eng == NULL) return NULL;
    if (!weight_ok(eng, op, w)) return NULL;
    const int64_t K = w->shape[0], N = w->shape[1];
    const oj_dtype dt = w->dtype;
    if (!vec_ok(eng, op, "x", x, K, dt) || !vec_ok(eng, op, "the norm's weight", nw, K, dt) ||
        !vec_ok(eng, op, "the norm's bias", nb, K, dt) || (b && !vec_ok(eng, op, "b", b, N, dt)))
        return NULL;
    if (!oj__decode_proj_args_ok(eng, op, act, eps, kv, slot, N, dt)) return NULL;
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                    const oj_tensor *, double, const oj_tensor *, const oj_tensor *, int,
                    oj_tensor *, const oj_tensor *) = OJ_KERNEL(eng, decode_norm_linear, op);
    if (fn == NULL) return NULL;
    int64_t shape[3] = {1, 1, N};
    oj_tensor *out = oj__tensor_alloc(eng, 3, shape, dt, op);
    if (out && !oj__kernel_ok(eng, fn(eng, out, x, nw, nb, eps, w, b, act, kv, slot), op)) {
        oj_release(out);
        return NULL;
    }
    return out;
}

oj_status oj__decode_linear_residual_(oj_tensor *x, oj_tensor *y, oj_tensor *w, oj_tensor *b) {
    static const char op[] = "decode_linear_residual_";
    oj_tensor *ins[4] = {x, y, w, b};
    oj_engine *eng = oj__ops_engine(op, b ? 4 : 3, ins);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT; /* a NULL or foreign input: recorded */
    if (!weight_ok(eng, op, w)) return oj_last_status(eng);
    const int64_t K = w->shape[0], N = w->shape[1];
    const oj_dtype dt = w->dtype;
    if (!vec_ok(eng, op, "x", x, N, dt) || !vec_ok(eng, op, "y", y, K, dt) ||
        (b && !vec_ok(eng, op, "b", b, N, dt)))
        return oj_last_status(eng);
    if (x->storage == y->storage) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: x and y share storage", op);
        return OJ_ERR_INVALID_ARGUMENT;
    }
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                    const oj_tensor *) = OJ_KERNEL(eng, decode_linear_residual, op);
    if (fn == NULL) return oj_last_status(eng);
    return oj__kernel_ok(eng, fn(eng, x, y, w, b), op) ? OJ_OK : oj_last_status(eng);
}

oj_status oj__decode_argmax_advance_(oj_tensor *tok, oj_tensor *logits, oj_tensor *pos) {
    static const char op[] = "decode_argmax_advance_";
    oj_tensor *ins[3] = {tok, logits, pos};
    oj_engine *eng = oj__ops_engine(op, 3, ins);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT; /* a NULL or foreign input: recorded */
    if (tok->dtype != OJ_I64 || pos->dtype != OJ_I64 || oj_numel(tok) != 1 ||
        oj_numel(pos) != 1)
        return oj_set_error(eng, OJ_ERR_DTYPE, "%s: tok and pos must be i64 with one element, got %s [%lld] and %s [%lld]",
                            op, oj_dtype_name(tok->dtype), (long long)oj_numel(tok),
                            oj_dtype_name(pos->dtype), (long long)oj_numel(pos));
    if (logits->dtype != OJ_F32 && logits->dtype != OJ_BF16 && logits->dtype != OJ_F16)
        return oj_set_error(eng, OJ_ERR_DTYPE, "%s: logits must be f32/bf16/f16, got %s", op,
                            oj_dtype_name(logits->dtype));
    if (oj_numel(logits) < 1 || oj_numel(logits) > INT32_MAX || !oj_is_contiguous(logits)) {
        char b[96];
        return oj_set_error(eng, OJ_ERR_SHAPE, "%s: logits must be contiguous with 1 .. 2^31-1 elements, got %s",
                            op, oj_shape_str(logits, b, sizeof b));
    }
    if (tok->storage == pos->storage)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: tok and pos share storage", op);
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, oj_tensor *) =
        OJ_KERNEL(eng, decode_argmax_advance, op);
    if (fn == NULL) return oj_last_status(eng);
    return oj__kernel_ok(eng, fn(eng, tok, logits, pos), op) ? OJ_OK : oj_last_status(eng);
}

/* The candidates decode_sample sorts for s over V logits: 1 for greedy,
 * else top_k, or V when top_k is 0 or >= V. */
static int64_t sample_candidates(const oj__decode_sampler *s, int64_t V) {
    if (s->temperature <= 0.0) return 1;
    return s->top_k > 0 && s->top_k < V ? s->top_k : V;
}

bool oj__decode_sample_ok(const oj_engine *eng, const oj__decode_sampler *s, int64_t V) {
    return eng && eng->backend && eng->backend->decode_sample && s && V >= 1 &&
           sample_candidates(s, V) <= OJ__DECODE_SAMPLE_MAX_K;
}

/* t is i64 with one element, else the error naming op and arg. */
static bool i64_scalar(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t) {
    if (t->dtype == OJ_I64 && oj_numel(t) == 1) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s must be i64 with one element, got %s [%lld]", op, arg,
                 oj_dtype_name(t->dtype), (long long)oj_numel(t));
    return false;
}

oj_status oj__decode_sample_(oj_tensor *tok, oj_tensor *logits, oj_tensor *pos, oj_tensor *seen,
                             oj_tensor *step, const oj__decode_sampler *s) {
    return oj__decode_sample_keep_(tok, logits, pos, seen, step, NULL, s);
}

oj_status oj__decode_sample_keep_(oj_tensor *tok, oj_tensor *logits, oj_tensor *pos,
                                  oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                  const oj__decode_sampler *s) {
    static const char op[] = "decode_sample_";
    oj_tensor *ins[6] = {tok, logits, step, pos, seen, hist};
    int n = 3;
    if (pos) ins[n++] = pos;
    if (seen) ins[n++] = seen;
    if (hist) ins[n++] = hist;
    oj_engine *eng = oj__ops_engine(op, n, ins);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT; /* a NULL or foreign input: recorded */
    if (s == NULL) return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: the sampler is NULL", op);
    if (!i64_scalar(eng, op, "tok", tok) || !i64_scalar(eng, op, "step", step) ||
        (pos && !i64_scalar(eng, op, "pos", pos)))
        return oj_last_status(eng);
    if (logits->dtype != OJ_F32 && logits->dtype != OJ_BF16 && logits->dtype != OJ_F16)
        return oj_set_error(eng, OJ_ERR_DTYPE, "%s: logits must be f32/bf16/f16, got %s", op,
                            oj_dtype_name(logits->dtype));
    const int64_t V = oj_numel(logits);
    if (V < 1 || V > ((int64_t)1 << 30) || !oj_is_contiguous(logits)) {
        char b[96];
        return oj_set_error(eng, OJ_ERR_SHAPE,
                            "%s: logits must be contiguous with 1 .. 2^30 elements, got %s", op,
                            oj_shape_str(logits, b, sizeof b));
    }
    if (!(s->repetition_penalty > 0.0) || isinf(s->repetition_penalty) ||
        isnan(s->temperature) || isinf(s->temperature) || isnan(s->top_p))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "%s: temperature %g and repetition_penalty %g must be finite (penalty "
                            "> 0), top_p %g a number",
                            op, s->temperature, s->repetition_penalty, s->top_p);
    if (s->repetition_penalty != 1.0 && seen == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "%s: repetition_penalty %g needs the seen flags (seen is NULL)", op,
                            s->repetition_penalty);
    if (seen && (seen->dtype != OJ_U8 || oj_numel(seen) != V || !oj_is_contiguous(seen)))
        return oj_set_error(eng, OJ_ERR_DTYPE,
                            "%s: seen must be contiguous u8 with V = %lld elements, got %s [%lld]",
                            op, (long long)V, oj_dtype_name(seen->dtype), (long long)oj_numel(seen));
    if (hist && (pos == NULL || hist->dtype != OJ_I64 || !oj_is_contiguous(hist)))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "%s: hist must be contiguous i64 and comes with pos", op);
    oj_tensor *sc[4] = {tok, step, pos, hist};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (sc[i] && sc[j] && sc[i]->storage == sc[j]->storage)
                return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                    "%s: tok, step, pos and hist must not share storage", op);
    const int64_t k = sample_candidates(s, V);
    if (k > OJ__DECODE_SAMPLE_MAX_K)
        return oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                            "%s: top_k %lld over V = %lld needs %lld candidates, the device "
                            "sampler takes at most %d (sample on the host)",
                            op, (long long)s->top_k, (long long)V, (long long)k,
                            OJ__DECODE_SAMPLE_MAX_K);
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, oj_tensor *, oj_tensor *,
                    oj_tensor *, oj_tensor *, const oj__decode_sampler *) =
        OJ_KERNEL(eng, decode_sample, op);
    if (fn == NULL) return oj_last_status(eng);
    return oj__kernel_ok(eng, fn(eng, tok, logits, pos, seen, step, hist, s), op)
               ? OJ_OK
               : oj_last_status(eng);
}

oj_tensor *oj__decode_embed_mask(oj_tensor *wte, oj_tensor *wpe, oj_tensor *tok, oj_tensor *pos,
                                 oj_tensor *mask) {
    static const char op[] = "decode_embed_mask";
    oj_tensor *ins[5] = {wte, wpe, tok, pos, mask};
    oj_engine *eng = oj__ops_engine(op, 5, ins);
    if (eng == NULL) return NULL;
    char b1[96], b2[96];
    if (wte->rank != 2 || wpe->rank != 2 || wte->shape[1] != wpe->shape[1] ||
        !oj_is_contiguous(wte) || !oj_is_contiguous(wpe) || !oj_is_contiguous(mask)) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: wte [V, C] and wpe [P, C] must be contiguous with one C, and the mask "
                     "contiguous; got %s and %s",
                     op, oj_shape_str(wte, b1, sizeof b1), oj_shape_str(wpe, b2, sizeof b2));
        return NULL;
    }
    const oj_dtype dt = wte->dtype;
    if ((dt != OJ_F32 && dt != OJ_BF16 && dt != OJ_F16) || wpe->dtype != dt ||
        tok->dtype != OJ_I64 || pos->dtype != OJ_I64 || oj_numel(tok) != 1 ||
        oj_numel(pos) != 1 || mask->dtype != OJ_BOOL) {
        oj_set_error(eng, OJ_ERR_DTYPE,
                     "%s: wte and wpe must be one of f32/bf16/f16 (got %s, %s), tok and pos i64 "
                     "with one element, the mask bool",
                     op, oj_dtype_name(dt), oj_dtype_name(wpe->dtype));
        return NULL;
    }
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                    const oj_tensor *, const oj_tensor *, oj_tensor *) =
        OJ_KERNEL(eng, decode_embed_mask, op);
    if (fn == NULL) return NULL;
    int64_t shape[3] = {1, 1, wte->shape[1]};
    oj_tensor *x = oj__tensor_alloc(eng, 3, shape, dt, op);
    if (x && !oj__kernel_ok(eng, fn(eng, x, wte, wpe, tok, pos, mask), op)) {
        oj_release(x);
        return NULL;
    }
    return x;
}

bool oj__decode_head_supported(const oj_engine *eng) {
    return eng && eng->backend && eng->backend->decode_norm_head;
}

bool oj__decode_head_weight_ok(const oj_tensor *w) {
    if (w == NULL || w->rank != 2) return false;
    const int64_t N = w->shape[0], K = w->shape[1];
    return K > 0 && K <= 8192 && K % 8 == 0 && N > 0 && N <= INT32_MAX &&
           (K == 1 || w->stride[1] == 1) && (N == 1 || (w->stride[0] % 8 == 0 && w->stride[0] >= K)) &&
           w->offset % 16 == 0 && (w->dtype == OJ_BF16 || w->dtype == OJ_F16);
}

/* The end of a step the head's kernel writes (tok, pos; step, hist and s
 * for a draw) is valid, else the error naming op. */
static bool head_end_ok(oj_engine *eng, const char *op, int64_t V, const oj_tensor *tok,
                        const oj_tensor *pos, const oj_tensor *step, const oj_tensor *hist,
                        const oj__decode_sampler *s) {
    if (s == NULL) {
        if ((tok == NULL) != (pos == NULL) || (hist && tok == NULL)) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                         "%s: tok and pos go together (one is NULL), and hist needs them", op);
            return false;
        }
        if (hist && (hist->dtype != OJ_I64 || !oj_is_contiguous(hist))) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: hist must be contiguous i64", op);
            return false;
        }
        if (hist && (hist->storage == tok->storage || hist->storage == pos->storage)) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: hist shares storage with tok or pos", op);
            return false;
        }
        if (tok && (!i64_scalar(eng, op, "tok", tok) || !i64_scalar(eng, op, "pos", pos)))
            return false;
        if (tok && tok->storage == pos->storage) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: tok and pos share storage", op);
            return false;
        }
        return true;
    }
    if (!i64_scalar(eng, op, "tok", tok) || !i64_scalar(eng, op, "pos", pos) ||
        !i64_scalar(eng, op, "step", step))
        return false;
    if (V > ((int64_t)1 << 30)) {
        oj_set_error(eng, OJ_ERR_SHAPE, "%s: the draw takes at most 2^30 logits, the head has %lld",
                     op, (long long)V);
        return false;
    }
    if (s->repetition_penalty != 1.0 || isnan(s->temperature) || isinf(s->temperature) ||
        isnan(s->top_p)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "%s: the sampler must have no repetition penalty (got %g: it needs the seen "
                     "flags of oj__decode_sample_keep_), a finite temperature (got %g) and a "
                     "top_p (got %g)",
                     op, s->repetition_penalty, s->temperature, s->top_p);
        return false;
    }
    if (hist && (hist->dtype != OJ_I64 || !oj_is_contiguous(hist))) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: hist must be contiguous i64", op);
        return false;
    }
    const oj_tensor *sc[4] = {tok, step, pos, hist};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (sc[i] && sc[j] && sc[i]->storage == sc[j]->storage) {
                oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                             "%s: tok, step, pos and hist must not share storage", op);
                return false;
            }
    const int64_t k = sample_candidates(s, V);
    if (k > OJ__DECODE_SAMPLE_MAX_K) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "%s: top_k %lld over V = %lld needs %lld candidates, the device sampler "
                     "takes at most %d (sample on the host)",
                     op, (long long)s->top_k, (long long)V, (long long)k, OJ__DECODE_SAMPLE_MAX_K);
        return false;
    }
    return true;
}

static oj_tensor *norm_head(const char *op, oj_tensor *x, oj_tensor *nw, oj_tensor *nb,
                            double eps, oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                            oj_tensor *step, oj_tensor *hist, const oj__decode_sampler *s) {
    oj_tensor *ins[8] = {x, nw, nb, w};
    int n = 4;
    if (s) { /* the draw's tensors are required (NULL is reported) */
        ins[n++] = tok;
        ins[n++] = pos;
        ins[n++] = step;
        if (hist) ins[n++] = hist;
    } else {
        if (tok) ins[n++] = tok;
        if (pos) ins[n++] = pos;
        if (hist) ins[n++] = hist;
    }
    oj_engine *eng = oj__ops_engine(op, n, ins);
    if (eng == NULL) return NULL;
    if (!oj__decode_head_weight_ok(w)) {
        char b[96];
        oj_set_error(eng, w->dtype == OJ_BF16 || w->dtype == OJ_F16 ? OJ_ERR_SHAPE : OJ_ERR_DTYPE,
                     "%s: the weight must be bf16/f16 [N, K] with k-stride 1, 0 < K <= 8192, K "
                     "and the row stride multiples of 8, 16-byte aligned; got %s %s",
                     op, oj_dtype_name(w->dtype), oj_shape_str(w, b, sizeof b));
        return NULL;
    }
    const int64_t N = w->shape[0], K = w->shape[1];
    const oj_dtype dt = w->dtype;
    if (!vec_ok(eng, op, "x", x, K, dt) || !vec_ok(eng, op, "the norm's weight", nw, K, dt) ||
        !vec_ok(eng, op, "the norm's bias", nb, K, dt))
        return NULL;
    if (!(eps >= 0.0)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: eps must be >= 0, got %g", op, eps);
        return NULL;
    }
    if (!head_end_ok(eng, op, N, tok, pos, step, hist, s)) return NULL;
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                    const oj_tensor *, double, const oj_tensor *, oj_tensor *, oj_tensor *,
                    oj_tensor *, oj_tensor *, const oj__decode_sampler *) =
        OJ_KERNEL(eng, decode_norm_head, op);
    if (fn == NULL) return NULL;
    int64_t shape[3] = {1, 1, N};
    oj_tensor *out = oj__tensor_alloc(eng, 3, shape, dt, op);
    if (out && !oj__kernel_ok(eng, fn(eng, out, x, nw, nb, eps, w, tok, pos, step, hist, s), op)) {
        oj_release(out);
        return NULL;
    }
    return out;
}

bool oj__decode_head_end_ok(oj_engine *eng, const char *op, int64_t V, const oj_tensor *tok,
                            const oj_tensor *pos, const oj_tensor *hist) {
    return head_end_ok(eng, op, V, tok, pos, NULL, hist, NULL);
}

oj_tensor *oj__decode_norm_head(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                oj_tensor *w, oj_tensor *tok, oj_tensor *pos, oj_tensor *hist) {
    return norm_head("decode_norm_head", x, nw, nb, eps, w, tok, pos, NULL, hist, NULL);
}

oj_tensor *oj__decode_norm_head_sample(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                       oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                       oj_tensor *step, oj_tensor *hist,
                                       const oj__decode_sampler *s) {
    static const char op[] = "decode_norm_head_sample";
    oj_tensor *ins[1] = {x};
    if (s == NULL) {
        oj_engine *eng = oj__ops_engine(op, 1, ins);
        if (eng) oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: the sampler is NULL", op);
        return NULL;
    }
    return norm_head(op, x, nw, nb, eps, w, tok, pos, step, hist, s);
}

/* A view of t's storage: shape, strides (elements), elem_off elements past
 * t's start. */
static oj_tensor *strided_view(oj_tensor *t, int rank, const int64_t *shape,
                               const int64_t *stride, int64_t elem_off) {
    oj_view_geom g;
    oj__view_of(t, &g);
    g.rank = rank;
    for (int i = 0; i < rank; i++) g.shape[i] = shape[i], g.stride[i] = stride[i];
    g.offset += elem_off * (int64_t)oj_dtype_size(t->dtype);
    return oj__view_make(t, &g);
}

bool oj__decode_attention_supported(const oj_engine *eng) {
    return eng && eng->backend && eng->backend->decode_attention;
}

oj_tensor *oj__decode_attention(oj_tensor *qkv, oj_tensor *kv, oj_tensor *mask, oj_tensor *slot) {
    static const char op[] = "decode_attention";
    oj_tensor *ins[4] = {qkv, kv, mask, slot};
    oj_engine *eng = oj__ops_engine(op, 4, ins);
    if (eng == NULL) return NULL;
    char b1[96], b2[96];
    if (kv->rank != 5 || kv->shape[0] != 2 || kv->shape[1] != 1 || !oj_is_contiguous(kv) ||
        oj_numel(qkv) != 3 * kv->shape[2] * kv->shape[4] || !oj_is_contiguous(qkv) ||
        oj_numel(mask) != kv->shape[3] || !oj_is_contiguous(mask)) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: kv must be a contiguous cache [2, 1, H, S, D], qkv contiguous with 3 H D "
                     "elements and mask S contiguous; got kv %s, qkv %s, mask %lld",
                     op, oj_shape_str(kv, b1, sizeof b1), oj_shape_str(qkv, b2, sizeof b2),
                     (long long)oj_numel(mask));
        return NULL;
    }
    if (qkv->dtype != kv->dtype || mask->dtype != OJ_BOOL || slot->dtype != OJ_I64 ||
        oj_numel(slot) != 1) {
        oj_set_error(eng, OJ_ERR_DTYPE,
                     "%s: qkv and kv of one dtype (got %s, %s), mask bool (got %s), slot i64 [1] "
                     "(got %s, %lld elements)",
                     op, oj_dtype_name(qkv->dtype), oj_dtype_name(kv->dtype),
                     oj_dtype_name(mask->dtype), oj_dtype_name(slot->dtype),
                     (long long)oj_numel(slot));
        return NULL;
    }
    oj_status (*fn)(oj_engine *, oj_tensor *, const oj_tensor *, const oj_tensor *,
                    const oj_tensor *, const oj_tensor *, const oj_tensor *, double) =
        OJ_KERNEL(eng, decode_attention, op);
    if (fn == NULL) return NULL;
    const int64_t H = kv->shape[2], S = kv->shape[3], D = kv->shape[4], C = H * D;
    /* views: q [1, H, 1, D] of qkv, k and v [1, H, S, D] of kv, the mask
     * [1, H, 1, S] (stride 0 over the heads), out [1, H, 1, D] of a
     * [1, 1, H, D] tensor (the layout scaled_dot_product_attention gives) */
    int64_t s4[4] = {1, 1, H, D}, sq[4] = {1, H, 1, D}, qst[4] = {3 * C, D, 3 * C, 1};
    int64_t skv[4] = {1, H, S, D}, kst[4] = {H * S * D, S * D, D, 1};
    int64_t sm[4] = {1, H, 1, S}, mst[4] = {0, 0, 0, 1}, ost[4] = {C, D, C, 1};
    oj_tensor *y = oj__tensor_alloc(eng, 4, s4, qkv->dtype, op);
    oj_tensor *q = strided_view(qkv, 4, sq, qst, 0);
    oj_tensor *k = strided_view(kv, 4, skv, kst, 0);
    oj_tensor *v = strided_view(kv, 4, skv, kst, H * S * D);
    oj_tensor *m = strided_view(mask, 4, sm, mst, 0);
    oj_tensor *o = y ? strided_view(y, 4, sq, ost, 0) : NULL;
    bool ok = y && q && k && v && m && o;
    const double scale = 1.0 / sqrt((double)D); /* scaled_dot_product_attention's default */
    if (ok) ok = oj__kernel_ok(eng, fn(eng, o, q, k, v, m, slot, scale), op);
    int64_t s3[3] = {1, 1, C};
    oj_tensor *out = ok ? oj_reshape(y, 3, s3) : NULL;
    oj_tensor *tmp[6] = {y, q, k, v, m, o};
    for (int i = 0; i < 6; i++) oj_release(tmp[i]);
    return out;
}
