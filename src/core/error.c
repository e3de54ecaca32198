/* The engine's sticky error and the argument checks shared by every layer.
 * The first error recorded wins until oj_clear_error(): later failures are
 * usually consequences of the first (a NULL flowing through a composition),
 * so reporting the first keeps the cause visible. */
#include <stdio.h>

#include "core/internal.h"

oj_status oj_last_status(const oj_engine *eng) { return eng ? eng->err : OJ_ERR_INVALID_ARGUMENT; }

const char *oj_last_error(const oj_engine *eng) { return eng ? eng->errmsg : "engine is NULL"; }

void oj_clear_error(oj_engine *eng) {
    if (eng == NULL) return;
    eng->err = OJ_OK;
    eng->errmsg[0] = '\0';
}

oj_status oj_set_errorv(oj_engine *eng, oj_status st, const char *fmt, va_list ap) {
    if (eng == NULL || st == OJ_OK) return st;
    /* the capture is abandoned at its end, even if this error is cleared
     * before then (the refused op is missing from the graph) */
    if (eng->capture_pool) eng->capture_pool->failed = true;
    if (eng->err != OJ_OK) return st;
    eng->err = st;
    vsnprintf(eng->errmsg, sizeof eng->errmsg, fmt ? fmt : "", ap);
    return st;
}

oj_status oj_set_error(oj_engine *eng, oj_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oj_status r = oj_set_errorv(eng, st, fmt, ap);
    va_end(ap);
    return r;
}

oj_engine *oj__engine_of(const oj_tensor *t) {
    if (t == NULL) return NULL;
    if (t->magic == OJ_TENSOR_MAGIC || t->magic == OJ_TENSOR_DEAD) return t->eng;
    return NULL;
}

bool oj__check_tensor(oj_engine *eng, const oj_tensor *t, const char *op, const char *arg) {
    if (t == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, arg);
        return false;
    }
    if (t->magic == OJ_TENSOR_DEAD) {
        oj_set_error(eng ? eng : t->eng, OJ_ERR_INVALID_ARGUMENT,
                     "%s: %s is a released tensor (used after oj_release or its scope ended)",
                     op, arg);
        return false;
    }
    if (t->magic != OJ_TENSOR_MAGIC) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: %s is not a tensor handle", op, arg);
        return false;
    }
    if (eng != NULL && t->eng != eng) {
        /* Tensors of two devices never meet inside an op; copies between
         * devices are explicit. */
        bool other_device = t->eng->device.type != eng->device.type ||
                            t->eng->device.index != eng->device.index;
        oj_set_error(eng, other_device ? OJ_ERR_DEVICE : OJ_ERR_INVALID_ARGUMENT,
                     "%s: %s belongs to another engine%s", op, arg,
                     other_device ? " on another device (copy it with oj_to_device)" : "");
        return false;
    }
    return true;
}

bool oj__check_writable(oj_engine *eng, const oj_tensor *t, const char *op, const char *arg) {
    for (int d = 0; d < t->rank; d++)
        if (t->stride[d] == 0 && t->shape[d] > 1) {
            char b[160];
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                         "%s: %s %s has several elements at one memory location (an expanded "
                         "view); clone it first",
                         op, arg, oj__shape_fmt(b, sizeof b, t->rank, t->shape));
            return false;
        }
    return true;
}

char *oj__shape_fmt(char *buf, size_t len, int rank, const int64_t *shape) {
    if (buf == NULL || len == 0) return buf;
    if (rank < 0 || rank > OJ_MAX_RANK || (rank > 0 && shape == NULL)) {
        snprintf(buf, len, "rank %d", rank);
        return buf;
    }
    size_t n = 0;
    n += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < rank && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}
