/* Detect-anomaly mode (oj_set_detect_anomaly; torch.autograd's
 * detect_anomaly): every recorded op's outputs and every gradient the
 * backward computes are checked for NaN and inf, and the first one found is
 * reported as OJ_ERR_NUMERIC naming the op. A debugging mode: each check is
 * a reduction and a read-back (a device synchronisation). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "backend/backend.h"
#include "core/internal.h"

bool oj_set_detect_anomaly(oj_engine *eng, bool enabled) {
    if (eng == NULL) return false;
    bool prev = eng->detect_anomaly;
    eng->detect_anomaly = enabled;
    return prev;
}

bool oj_detect_anomaly_enabled(const oj_engine *eng) { return eng ? eng->detect_anomaly : false; }

/* Largest |element| of float tensor t (NaN when one is NaN), through the
 * backend's reduction; NAN with an error recorded when it fails. */
static double max_abs(oj_engine *eng, oj_tensor *t) {
    oj_status st;
    double v = oj__reduce_all(t, OJ_RED_NORM_INF, "detect_anomaly", &st);
    if (st != OJ_OK) oj_set_error(eng, st, "detect_anomaly: the reduction failed");
    return v;
}

void oj__anomaly_check(oj_tensor *t, const char *fmt, ...) {
    if (t == NULL || !oj__live(t)) return;
    oj_engine *eng = t->eng;
    if (!eng->detect_anomaly || oj_last_status(eng) != OJ_OK) return;
    if (!oj_dtype_is_float(t->dtype) || oj_numel(t) == 0 || eng->backend->reduce == NULL) return;
    double m = max_abs(eng, t);
    if (isfinite(m) || oj_last_status(eng) != OJ_OK) return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char b[128];
    oj_set_error(eng, OJ_ERR_NUMERIC, "detect_anomaly: %s %s holds a non-finite value (%s)",
                 what, oj_shape_str(t, b, sizeof b), isnan(m) ? "NaN" : "inf");
}
