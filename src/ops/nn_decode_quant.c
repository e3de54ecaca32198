/* The quantized fused ops of the batch-1 decode step
 * (nn_decode_quant.h): validation and dispatch to the backend's
 * decode_qlinear and decode_qnorm_head entries. */
#include "ops/nn_decode_quant.h"

#include "ops/nn_common.h"
#include "ops/nn_decode.h"
#include "quant/quant_internal.h"

enum { EPI_RESID = 2 }; /* backend.h, decode_qlinear: 0 and 1 are the acts */

bool oj__decode_qweight_ok(const oj_qtensor *w) {
    if (w == NULL || w->blocks == NULL || (unsigned)w->type >= OJ_QTYPE_COUNT) return false;
    const oj_engine *eng = w->eng;
    return eng && eng->backend && eng->backend->decode_qlinear && w->cols > 0 &&
           w->cols <= 4096 && w->cols % 32 == 0 && w->row_bytes % 16 == 0 &&
           w->rows > 0 && w->rows <= INT32_MAX && w->blocks->offset % 16 == 0;
}

static bool vec_ok(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t, int64_t n,
                   oj_dtype dt) {
    return oj__decode_vec_ok(eng, op, arg, t, n, dt, "the row");
}

/* w suits the entry on eng (x's engine), else the error naming op. */
static bool qweight_ok(oj_engine *eng, const char *op, const oj_qtensor *w) {
    if (w == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: the quantized weight is NULL", op);
        return false;
    }
    if (w->eng != eng) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: the quantized weight belongs to another engine", op);
        return false;
    }
    if (eng->backend == NULL || eng->backend->decode_qlinear == NULL) {
        oj_set_error(eng, OJ_ERR_UNSUPPORTED, "%s: not implemented on the %s backend", op,
                     eng->backend ? eng->backend->name : "(none)");
        return false;
    }
    if (oj__decode_qweight_ok(w)) return true;
    oj_set_error(eng, OJ_ERR_SHAPE,
                 "%s: the quantized weight must have K <= 4096 and rows of a multiple of 16 "
                 "bytes; got %s [%lld, %lld] (%lld bytes a row)",
                 op, oj_qtype_name(w->type), (long long)w->rows, (long long)w->cols,
                 (long long)w->row_bytes);
    return false;
}

static bool float_dt(oj_dtype dt) { return dt == OJ_F32 || dt == OJ_BF16 || dt == OJ_F16; }

/* oj__decode_qnorm_linear, and with tok (oj__decode_qnorm_head: nw, nb
 * given, b, kv, slot NULL, act none) the head's end. */
static oj_tensor *qnorm(const char *op, oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                        const oj_qtensor *w, oj_tensor *b, int act, oj_tensor *kv, oj_tensor *slot,
                        oj_tensor *tok, oj_tensor *pos, oj_tensor *hist) {
    oj_tensor *ins[9] = {x};
    int n = 1;
    if (nw) ins[n++] = nw;
    if (nb) ins[n++] = nb;
    if (b) ins[n++] = b;
    if (kv) ins[n++] = kv;
    if (slot) ins[n++] = slot;
    if (tok) ins[n++] = tok;
    if (pos) ins[n++] = pos;
    if (hist) ins[n++] = hist;
    oj_engine *eng = oj__ops_engine(op, n, ins);
    if (eng == NULL) return NULL;
    if (!qweight_ok(eng, op, w)) return NULL;
    const int64_t K = w->cols, N = w->rows;
    const oj_dtype dt = x->dtype;
    if (!float_dt(dt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: x must be f32, bf16 or f16, got %s", op,
                     oj_dtype_name(dt));
        return NULL;
    }
    if ((nw == NULL) != (nb == NULL)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "%s: the norm's weight and bias go together (one is NULL)", op);
        return NULL;
    }
    if (!vec_ok(eng, op, "x", x, K, dt) || (nw && !vec_ok(eng, op, "the norm's weight", nw, K, dt)) ||
        (nb && !vec_ok(eng, op, "the norm's bias", nb, K, dt)) || (b && !vec_ok(eng, op, "b", b, N, dt)))
        return NULL;
    if (!oj__decode_proj_args_ok(eng, op, act, eps, kv, slot, N, dt)) return NULL;
    if (tok) {
        if (nw == NULL) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: the head's norm weight and bias are NULL", op);
            return NULL;
        }
        if (pos == NULL) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: pos is NULL", op);
            return NULL;
        }
        if (!oj__decode_head_end_ok(eng, op, N, tok, pos, hist)) return NULL;
        if (eng->backend->decode_qnorm_head == NULL) {
            oj_set_error(eng, OJ_ERR_UNSUPPORTED, "%s: not implemented on the %s backend", op,
                         eng->backend->name);
            return NULL;
        }
    }
    int64_t shape[3] = {1, 1, N};
    oj_tensor *out = oj__tensor_alloc(eng, 3, shape, dt, op);
    if (out == NULL) return NULL;
    oj_status st = tok ? eng->backend->decode_qnorm_head(eng, out, x, nw, nb, eps, w->blocks,
                                                         (int)w->type, K, tok, pos, hist)
                       : eng->backend->decode_qlinear(eng, out, x, nw, nb, eps, w->blocks,
                                                      (int)w->type, K, b, act, kv, slot);
    if (!oj__kernel_ok(eng, st, op)) {
        oj_release(out);
        return NULL;
    }
    return out;
}

oj_tensor *oj__decode_qnorm_linear(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                   const oj_qtensor *w, oj_tensor *b, int act, oj_tensor *kv,
                                   oj_tensor *slot) {
    return qnorm("decode_qnorm_linear", x, nw, nb, eps, w, b, act, kv, slot, NULL, NULL, NULL);
}

bool oj__decode_qhead_supported(const oj_engine *eng) {
    return eng && eng->backend && eng->backend->decode_qnorm_head;
}

oj_tensor *oj__decode_qnorm_head(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                 const oj_qtensor *w, oj_tensor *tok, oj_tensor *pos,
                                 oj_tensor *hist) {
    static const char op[] = "decode_qnorm_head";
    if (tok == NULL) {
        oj_tensor *ins[1] = {x};
        oj_engine *eng = oj__ops_engine(op, 1, ins);
        if (eng) oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: tok is NULL", op);
        return NULL;
    }
    return qnorm(op, x, nw, nb, eps, w, NULL, OJ__DECODE_ACT_NONE, NULL, NULL, tok, pos, hist);
}

oj_status oj__decode_qlinear_residual_(oj_tensor *x, oj_tensor *y, const oj_qtensor *w,
                                       oj_tensor *b) {
    static const char op[] = "decode_qlinear_residual_";
    oj_tensor *ins[3] = {x, y, b};
    oj_engine *eng = oj__ops_engine(op, b ? 3 : 2, ins);
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT; /* a NULL or foreign input: recorded */
    if (!qweight_ok(eng, op, w)) return oj_last_status(eng);
    const int64_t K = w->cols, N = w->rows;
    const oj_dtype dt = x->dtype;
    if (!float_dt(dt))
        return oj_set_error(eng, OJ_ERR_DTYPE, "%s: x must be f32, bf16 or f16, got %s", op,
                            oj_dtype_name(dt));
    if (!vec_ok(eng, op, "x", x, N, dt) || !vec_ok(eng, op, "y", y, K, dt) ||
        (b && !vec_ok(eng, op, "b", b, N, dt)))
        return oj_last_status(eng);
    if (x->storage == y->storage)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: x and y share storage", op);
    oj_status st = eng->backend->decode_qlinear(eng, x, y, NULL, NULL, 0.0, w->blocks, (int)w->type,
                                                K, b, EPI_RESID, NULL, NULL);
    return oj__kernel_ok(eng, st, op) ? OJ_OK : oj_last_status(eng);
}
