/* CPU rotary position embedding, half-split layout (Su et al., "RoFormer:
 * Enhanced Transformer with Rotary Position Embedding", 2021; the layout of
 * GPT-NeoX and Llama). Angles are computed in double; rows of x run in
 * parallel (each row by one task, so the bits do not depend on threads). */
#include <math.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_nn_util.h"
#include "backend/cpu/cpu_pool.h"

typedef struct {
    oj_engine *eng;
    const oj_tensor *x;
    oj_tensor *out;
    int64_t T, D;
    const double *cs;
} rot_ctx;

/* Lines [begin, end) of x viewed as [rows * T, D]. */
static void rot_lines(void *vc, int64_t begin, int64_t end, int tid) {
    const rot_ctx *c = vc;
    int64_t T = c->T, D = c->D, half = D / 2;
    double *row = oj_cpu_scratch(c->eng, tid, (size_t)(2 * D) * sizeof(double)), *y = row + D;
    size_t es = oj_dtype_size(c->x->dtype);
    for (int64_t ln = begin; ln < end; ln++) {
        int64_t t = ln % T;
        size_t off = (size_t)(ln * D) * es;
        oj__nn_load(oj__nn_base(c->x) + off, c->x->dtype, D, 1, row);
        const double *cst = c->cs + 2 * t * half;
        for (int64_t i = 0; i < half; i++) {
            double co = cst[2 * i], si = cst[2 * i + 1];
            double x1 = row[i], x2 = row[half + i];
            y[i] = x1 * co - x2 * si;
            y[half + i] = x2 * co + x1 * si;
        }
        oj__nn_store(oj__nn_base(c->out) + off, c->out->dtype, D, y);
    }
}

/* Position of row t: positions[t] when given, else offset + t. */
static int64_t position_of(const oj_tensor *positions, int64_t offset, int64_t t) {
    if (positions == NULL) return offset + t;
    int64_t st = positions->rank ? positions->stride[0] : 0;
    const char *p = oj__nn_base(positions) + t * st * (int64_t)oj_dtype_size(positions->dtype);
    return positions->dtype == OJ_I32 ? *(const int32_t *)p : *(const int64_t *)p;
}

// x (..., T, D), out (..., T, D), positions (T) or NULL
static oj_status rotary(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                        const oj_tensor *positions, int64_t position_offset, double theta,
                        bool inverse) {
    int64_t T = x->shape[x->rank - 2], D = x->shape[x->rank - 1], half = D / 2;
    int64_t rows = T > 0 && D > 0 ? oj_numel(x) / (T * D) : 0;
    /* cos/sin table [T, D/2] */
    double *cs = oj__nn_scratch(eng, 2 * T * half, "rotary_embedding");
    if (cs == NULL) return OJ_ERR_CAPACITY;
    int nt = oj_cpu_threads(eng);
    for (int t = 0; t < nt; t++)
        if (oj_cpu_scratch(eng, t, (size_t)(2 * (D > 0 ? D : 1)) * sizeof(double)) == NULL) {
            free(cs);
            return oj_set_error(eng, OJ_ERR_CAPACITY, "rotary_embedding: out of host memory");
        }
    double sign = inverse ? -1.0 : 1.0;
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = position_of(positions, position_offset, t);
        for (int64_t i = 0; i < half; i++) {
            double freq = pow(theta, -2.0 * (double)i / (double)D);
            double a = (double)pos * freq;
            cs[2 * (t * half + i)] = cos(a);
            cs[2 * (t * half + i) + 1] = sign * sin(a);
        }
    }
    rot_ctx c = {eng, x, out, T, D, cs};
    int64_t grain = 16384 / (D > 0 ? D : 1);
    oj_cpu_parallel_for(eng, rows * T, grain < 1 ? 1 : grain, rot_lines, &c);
    free(cs);
    return OJ_OK;
}

oj_status oj_cpu_rotary_embedding(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  int64_t position_offset, double theta, bool inverse) {
    return rotary(eng, out, x, NULL, position_offset, theta, inverse);
}

oj_status oj_cpu_rotary_embedding_at(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                     const oj_tensor *positions, double theta, bool inverse) {
    return rotary(eng, out, x, positions, 0, theta, inverse);
}
