/* Status names and the engine-free error report (oj_error). */
#include <stdio.h>

#include "core/internal.h"

const char *oj_status_name(oj_status st) {
    switch (st) {
    case OJ_OK: return "OJ_OK";
    case OJ_ERR_INVALID_ARGUMENT: return "OJ_ERR_INVALID_ARGUMENT";
    case OJ_ERR_SHAPE: return "OJ_ERR_SHAPE";
    case OJ_ERR_DTYPE: return "OJ_ERR_DTYPE";
    case OJ_ERR_DEVICE: return "OJ_ERR_DEVICE";
    case OJ_ERR_CAPACITY: return "OJ_ERR_CAPACITY";
    case OJ_ERR_OUT_OF_RANGE: return "OJ_ERR_OUT_OF_RANGE";
    case OJ_ERR_IO: return "OJ_ERR_IO";
    case OJ_ERR_CORRUPT: return "OJ_ERR_CORRUPT";
    case OJ_ERR_UNSUPPORTED: return "OJ_ERR_UNSUPPORTED";
    case OJ_ERR_NUMERIC: return "OJ_ERR_NUMERIC";
    case OJ_ERR_INTERNAL: return "OJ_ERR_INTERNAL";
    case OJ_ERR_STATE: return "OJ_ERR_STATE";
    }
    return "OJ_ERR_UNKNOWN";
}

oj_status oj__error_setv(oj_error *e, oj_status st, const char *fmt, va_list ap) {
    if (e == NULL || st == OJ_OK || e->status != OJ_OK) return st;
    e->status = st;
    e->message[0] = 0;
    if (fmt != NULL) vsnprintf(e->message, sizeof e->message, fmt, ap);
    return st;
}

oj_status oj_error_set(oj_error *e, oj_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oj_status r = oj__error_setv(e, st, fmt, ap);
    va_end(ap);
    return r;
}
