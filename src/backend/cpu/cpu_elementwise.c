/* CPU elementwise kernels: copy/cast, fill, unary (+ backward), binary,
 * where, random fill, threaded over pieces of the iteration
 * (oj_iter_run_parallel; elements are independent, so any split gives the
 * same result).
 *
 * f32 in and out: the ops that have a vector form (cpu_simd.h: exp,
 * sigmoid, silu, gelu (erf), gelu-tanh, tanh, relu, neg, square, affine,
 * sqrt, rsqrt, reciprocal, abs; add, sub, mul, div, maximum, minimum) run
 * in f32 on the engine's SIMD level, strided operands gathered through
 * small buffers. add/sub/mul/div/sqrt/reciprocal/max/min/neg/abs/square/
 * relu give the same bits as the double path (a double result of two f32
 * operands, rounded once, is the f32 result); the transcendental ones are
 * within a few ulp of it (gelu's left tail closer to the true value than
 * the double path's 1 + erf, which is 0 from x = -8.4 on). Everything else
 * goes through double. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_iter.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pool.h"
#include "backend/scalar_ops.h"
#include "backend/cpu/cpu_simd.h"

#define EW_BLOCK 256 /* f32 elements gathered at a time for strided operands */

/* The vector form of a unary op, or -1. */
static int simd_unary_fn(oj_unary_op op) {
    switch (op) {
    case OJ_UN_EXP: return OJ_SF_EXP;
    case OJ_UN_SIGMOID: return OJ_SF_SIGMOID;
    case OJ_UN_SILU: return OJ_SF_SILU;
    case OJ_UN_GELU_TANH: return OJ_SF_GELU_TANH;
    case OJ_UN_GELU_ERF: return OJ_SF_GELU;
    case OJ_UN_TANH: return OJ_SF_TANH;
    case OJ_UN_RELU: return OJ_SF_RELU;
    case OJ_UN_NEG: return OJ_SF_NEG;
    case OJ_UN_SQUARE: return OJ_SF_SQUARE;
    case OJ_UN_AFFINE: return OJ_SF_AFFINE;
    case OJ_UN_SQRT: return OJ_SF_SQRT;
    case OJ_UN_RSQRT: return OJ_SF_RSQRT;
    case OJ_UN_RECIPROCAL: return OJ_SF_RECIPROCAL;
    case OJ_UN_ABS: return OJ_SF_ABS;
    default: return -1;
    }
}

static int simd_binary_op(oj_binary_op op) {
    switch (op) {
    case OJ_BIN_ADD: return OJ_SB_ADD;
    case OJ_BIN_SUB: return OJ_SB_SUB;
    case OJ_BIN_MUL: return OJ_SB_MUL;
    case OJ_BIN_DIV: return OJ_SB_DIV;
    case OJ_BIN_MAXIMUM: return OJ_SB_MAX;
    case OJ_BIN_MINIMUM: return OJ_SB_MIN;
    default: return -1;
    }
}

/* f32 operand k of a run: a pointer to m contiguous values starting at
 * element i0 (the run itself when unit-stride, else gathered into buf). */
static const float *f32_in(char *p, int64_t step, int64_t i0, int64_t m, float *buf) {
    if (step == 4) return (const float *)(p + i0 * 4);
    for (int64_t i = 0; i < m; i++) buf[i] = *(const float *)(p + (i0 + i) * step);
    return buf;
}

static void f32_out(char *p, int64_t step, int64_t i0, int64_t m, const float *buf) {
    if (step == 4) return;
    for (int64_t i = 0; i < m; i++) *(float *)(p + (i0 + i) * step) = buf[i];
}

static bool is_int_dtype(oj_dtype dt) {
    return dt == OJ_I64 || dt == OJ_I32 || dt == OJ_U32 || dt == OJ_U16 || dt == OJ_U8;
}

static int64_t load_i64(const void *p, oj_dtype dt) {
    switch (dt) {
    case OJ_I64: return *(const int64_t *)p;
    case OJ_I32: return *(const int32_t *)p;
    case OJ_U32: return *(const uint32_t *)p;
    case OJ_U16: return *(const uint16_t *)p;
    case OJ_U8: return *(const uint8_t *)p;
    case OJ_BOOL: return *(const uint8_t *)p != 0;
    default: return (int64_t)oj__load(p, dt);
    }
}

static void store_i64(void *p, oj_dtype dt, int64_t v) {
    switch (dt) {
    case OJ_I64: *(int64_t *)p = v; break;
    case OJ_I32: *(int32_t *)p = (int32_t)v; break;
    case OJ_U32: *(uint32_t *)p = (uint32_t)v; break;
    case OJ_U16: *(uint16_t *)p = (uint16_t)v; break;
    case OJ_U8: *(uint8_t *)p = (uint8_t)v; break;
    case OJ_BOOL: *(uint8_t *)p = v != 0; break;
    default: oj__store(p, dt, (double)v); break;
    }
}

/* ---------------------------------------------------------------- copy */

typedef struct {
    oj_dtype out, in;
} copy_ctx;

static void copy_run(char **p, const int64_t *st, int64_t n, void *vctx) {
    const copy_ctx *c = vctx;
    size_t es = oj_dtype_size(c->out);
    if (c->out == c->in && st[0] == (int64_t)es && st[1] == (int64_t)es) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    if (c->out == c->in) { /* strided: fixed-size moves (a memcpy call per element is slow) */
        char *d = p[0];
        const char *s = p[1];
        switch (es) {
        case 1: for (int64_t i = 0; i < n; i++) d[i * st[0]] = s[i * st[1]]; break;
        case 2: for (int64_t i = 0; i < n; i++) memcpy(d + i * st[0], s + i * st[1], 2); break;
        case 4: for (int64_t i = 0; i < n; i++) memcpy(d + i * st[0], s + i * st[1], 4); break;
        case 8: for (int64_t i = 0; i < n; i++) memcpy(d + i * st[0], s + i * st[1], 8); break;
        default: for (int64_t i = 0; i < n; i++) memcpy(d + i * st[0], s + i * st[1], es); break;
        }
        return;
    }
    if (is_int_dtype(c->out) && (is_int_dtype(c->in) || c->in == OJ_BOOL)) {
        for (int64_t i = 0; i < n; i++)
            store_i64(p[0] + i * st[0], c->out, load_i64(p[1] + i * st[1], c->in));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        oj__store(p[0] + i * st[0], c->out, oj__load(p[1] + i * st[1], c->in));
}

/* A transposing f32 copy: after merging, out's last dim is dense and x
 * walks the last two dims column-wise (x's stride of the dim before the last
 * is one element), as when a transposed weight gradient is made contiguous.
 * Element by element that is one cache line per element on the x side; the
 * SIMD level's tile transpose moves 16 x 16 blocks instead. Tasks are
 * (outer index, block of TR_ROWS output rows); every element is written by
 * one task and a copy is exact, so any split gives the same bits. */
#define TR_ROWS 64

typedef struct {
    const oj_iter *it;
    const oj_simd *sd;
    int64_t rblocks; /* row blocks per outer index */
} tr_ctx;

static void tr_chunk(void *vc, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const tr_ctx *c = vc;
    const oj_iter *it = c->it;
    const int r = it->rank; /* >= 2 */
    const int64_t R = it->shape[r - 2], C = it->shape[r - 1];
    const int64_t ldd = it->stride[0][r - 2] / 4, lds = it->stride[1][r - 1] / 4;
    for (int64_t t = begin; t < end; t++) {
        int64_t outer = t / c->rblocks, r0 = (t % c->rblocks) * TR_ROWS;
        int64_t nr = R - r0 < TR_ROWS ? R - r0 : TR_ROWS;
        char *dp = it->base[0], *sp = it->base[1];
        for (int d = r - 3; d >= 0; d--) { /* outer index -> offsets */
            int64_t i = outer % it->shape[d];
            outer /= it->shape[d];
            dp += i * it->stride[0][d];
            sp += i * it->stride[1][d];
        }
        /* out[i][j] = x[j * lds + i] for rows i in [r0, r0 + nr), j < C */
        c->sd->transpose((float *)dp + r0 * ldd, ldd, (const float *)sp + r0, lds, C, nr);
    }
}

static bool copy_transposed(oj_engine *eng, const oj_iter *it, oj_dtype out, oj_dtype in) {
    const int r = it->rank;
    if (out != OJ_F32 || in != OJ_F32 || r < 2) return false;
    const int64_t *so = it->stride[0], *si = it->stride[1];
    if (so[r - 1] != 4 || si[r - 2] != 4 || so[r - 2] % 4 || si[r - 1] % 4) return false;
    if (so[r - 2] < 4 * it->shape[r - 1] || si[r - 1] < 4 * it->shape[r - 2]) return false;
    if (it->shape[r - 2] < 16 || it->shape[r - 1] < 16) return false; /* tiles would not pay */
    tr_ctx c = {it, oj_simd_of(eng), (it->shape[r - 2] + TR_ROWS - 1) / TR_ROWS};
    int64_t outer = 1;
    for (int d = 0; d < r - 2; d++) outer *= it->shape[d];
    int64_t per = TR_ROWS * it->shape[r - 1]; /* elements per task */
    int64_t grain = OJ_ITER_GRAIN / per;
    oj_cpu_parallel_for(eng, outer * c.rblocks, grain < 1 ? 1 : grain, tr_chunk, &c);
    return true;
}

oj_status oj_cpu_copy(oj_engine *eng, oj_tensor *out, const oj_tensor *x) {
    const oj_tensor *ts[2] = {out, x};
    oj_iter it;
    oj_iter_init(&it, out->rank, out->shape, 2, ts);
    if (copy_transposed(eng, &it, out->dtype, x->dtype)) return OJ_OK;
    copy_ctx c = {out->dtype, x->dtype};
    oj_iter_run_parallel(eng, &it, copy_run, &c);
    return OJ_OK;
}

/* ---------------------------------------------------------------- fill */

typedef struct {
    oj_dtype dt;
    _Alignas(8) unsigned char bytes[8]; /* aligned: store_i64 writes through typed pointers */
} fill_ctx;

static void fill_run(char **p, const int64_t *st, int64_t n, void *vctx) {
    const fill_ctx *c = vctx;
    size_t es = oj_dtype_size(c->dt);
    if (st[0] == (int64_t)es) { /* a dense run: memset for zeros, else a typed loop */
        bool zero = true;
        for (size_t b = 0; b < es; b++) zero = zero && c->bytes[b] == 0;
        if (zero || es == 1) {
            memset(p[0], c->bytes[0], (size_t)n * es);
            return;
        }
        if (es == 4) {
            uint32_t v, *d = (uint32_t *)(void *)p[0];
            memcpy(&v, c->bytes, 4);
            for (int64_t i = 0; i < n; i++) d[i] = v;
            return;
        }
        if (es == 8) {
            uint64_t v, *d = (uint64_t *)(void *)p[0];
            memcpy(&v, c->bytes, 8);
            for (int64_t i = 0; i < n; i++) d[i] = v;
            return;
        }
    }
    for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * st[0], c->bytes, es);
}

oj_status oj_cpu_fill(oj_engine *eng, oj_tensor *out, double value) {
    fill_ctx c = {.dt = out->dtype};
    if (is_int_dtype(out->dtype))
        store_i64(c.bytes, out->dtype, (int64_t)value);
    else
        oj__store(c.bytes, out->dtype, value);
    const oj_tensor *ts[1] = {out};
    oj_iter it;
    oj_iter_init(&it, out->rank, out->shape, 1, ts);
    oj_iter_run_parallel(eng, &it, fill_run, &c);
    return OJ_OK;
}

/* ---------------------------------------------------------------- unary */

typedef struct {
    oj_unary_op op;
    oj_dtype out, in, in2, in3;
    double a, b;
    const oj_simd *sd; /* f32 vector path, or NULL */
    int fn;
} ew_ctx;

static void unary_run(char **p, const int64_t *st, int64_t n, void *vctx) {
    const ew_ctx *c = vctx;
    if (c->sd) {
        float xb[EW_BLOCK], yb[EW_BLOCK];
        for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
            int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
            const float *x = f32_in(p[1], st[1], i0, m, xb);
            float *y = st[0] == 4 ? (float *)(p[0] + i0 * 4) : yb;
            c->sd->unary((oj_simd_fn)c->fn, y, x, m, (float)c->a, (float)c->b);
            f32_out(p[0], st[0], i0, m, yb);
        }
        return;
    }
    if (c->out == OJ_F32 && c->in == OJ_F32) {
        for (int64_t i = 0; i < n; i++) {
            double x = *(const float *)(p[1] + i * st[1]);
            *(float *)(p[0] + i * st[0]) = (float)oj_unary_d(c->op, x, c->a, c->b);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = oj__load(p[1] + i * st[1], c->in);
        oj__store(p[0] + i * st[0], c->out, oj_unary_d(c->op, x, c->a, c->b));
    }
}

oj_status oj_cpu_unary(oj_engine *eng, oj_unary_op op, oj_tensor *out, const oj_tensor *x,
                       double alpha, double beta) {
    const oj_tensor *ts[2] = {out, x};
    oj_iter it;
    oj_iter_init(&it, out->rank, out->shape, 2, ts);
    ew_ctx c = {.op = op, .out = out->dtype, .in = x->dtype, .a = alpha, .b = beta,
                .fn = simd_unary_fn(op)};
    if (c.fn >= 0 && out->dtype == OJ_F32 && x->dtype == OJ_F32) c.sd = oj_simd_of(eng);
    oj_iter_run_parallel(eng, &it, unary_run, &c);
    return OJ_OK;
}

static void unary_bwd_run(char **p, const int64_t *st, int64_t n, void *vctx) {
    const ew_ctx *c = vctx;
    if (c->sd) {
        float xb[EW_BLOCK], yb[EW_BLOCK], gb[EW_BLOCK], db[EW_BLOCK];
        for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
            int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
            const float *x = f32_in(p[1], st[1], i0, m, xb);
            const float *y = f32_in(p[2], st[2], i0, m, yb);
            const float *g = f32_in(p[3], st[3], i0, m, gb);
            float *dx = st[0] == 4 ? (float *)(p[0] + i0 * 4) : db;
            c->sd->unary_grad((oj_simd_fn)c->fn, dx, x, y, g, m, (float)c->a, (float)c->b);
            f32_out(p[0], st[0], i0, m, db);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = oj__load(p[1] + i * st[1], c->in);
        double y = oj__load(p[2] + i * st[2], c->in2);
        double dy = oj__load(p[3] + i * st[3], c->in3);
        oj__store(p[0] + i * st[0], c->out, dy * oj_unary_grad_d(c->op, x, y, c->a, c->b));
    }
}

oj_status oj_cpu_unary_backward(oj_engine *eng, oj_unary_op op, oj_tensor *dx, const oj_tensor *x,
                                const oj_tensor *y, const oj_tensor *dy, double alpha,
                                double beta) {
    const oj_tensor *ts[4] = {dx, x, y, dy};
    oj_iter it;
    oj_iter_init(&it, dx->rank, dx->shape, 4, ts);
    ew_ctx c = {.op = op, .out = dx->dtype, .in = x->dtype, .in2 = y->dtype, .in3 = dy->dtype,
                .a = alpha, .b = beta, .fn = simd_unary_fn(op)};
    if (c.fn >= 0 && dx->dtype == OJ_F32 && x->dtype == OJ_F32 && y->dtype == OJ_F32 &&
        dy->dtype == OJ_F32)
        c.sd = oj_simd_of(eng);
    oj_iter_run_parallel(eng, &it, unary_bwd_run, &c);
    return OJ_OK;
}

/* ---------------------------------------------------------------- binary */

typedef struct {
    oj_binary_op op;
    oj_dtype out, a, b;
    bool integer; /* exact int64 arithmetic */
    const oj_simd *sd; /* f32 vector path, or NULL */
    int sop;
} bin_ctx;

static int64_t binary_i64(oj_binary_op op, int64_t a, int64_t b) {
    switch (op) {
    case OJ_BIN_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case OJ_BIN_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case OJ_BIN_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case OJ_BIN_MAXIMUM: return a > b ? a : b;
    case OJ_BIN_MINIMUM: return a < b ? a : b;
    case OJ_BIN_EQ: return a == b;
    case OJ_BIN_NE: return a != b;
    case OJ_BIN_LT: return a < b;
    case OJ_BIN_LE: return a <= b;
    case OJ_BIN_GT: return a > b;
    case OJ_BIN_GE: return a >= b;
    case OJ_BIN_AND: return a && b;
    case OJ_BIN_OR: return a || b;
    case OJ_BIN_XOR: return (a != 0) != (b != 0);
    default: return 0; /* DIV/POW never reach here: the ops layer promotes */
    }
}

static void binary_run(char **p, const int64_t *st, int64_t n, void *vctx) {
    const bin_ctx *c = vctx;
    if (c->sd) {
        float ab[EW_BLOCK], bb[EW_BLOCK], ob[EW_BLOCK];
        for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
            int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
            /* a stride-0 operand is passed as one broadcast value */
            const float *a = st[1] == 0 ? (const float *)p[1] : f32_in(p[1], st[1], i0, m, ab);
            const float *b = st[2] == 0 ? (const float *)p[2] : f32_in(p[2], st[2], i0, m, bb);
            float *o = st[0] == 4 ? (float *)(p[0] + i0 * 4) : ob;
            c->sd->binary((oj_simd_bin)c->sop, o, a, st[1] != 0, b, st[2] != 0, m);
            f32_out(p[0], st[0], i0, m, ob);
        }
        return;
    }
    if (c->integer) {
        for (int64_t i = 0; i < n; i++) {
            int64_t a = load_i64(p[1] + i * st[1], c->a);
            int64_t b = load_i64(p[2] + i * st[2], c->b);
            store_i64(p[0] + i * st[0], c->out, binary_i64(c->op, a, b));
        }
        return;
    }
    if (c->out == OJ_F32 && c->a == OJ_F32 && c->b == OJ_F32) {
        for (int64_t i = 0; i < n; i++) {
            double a = *(const float *)(p[1] + i * st[1]);
            double b = *(const float *)(p[2] + i * st[2]);
            *(float *)(p[0] + i * st[0]) = (float)oj_binary_d(c->op, a, b);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double a = oj__load(p[1] + i * st[1], c->a);
        double b = oj__load(p[2] + i * st[2], c->b);
        oj__store(p[0] + i * st[0], c->out, oj_binary_d(c->op, a, b));
    }
}

oj_status oj_cpu_binary(oj_engine *eng, oj_binary_op op, oj_tensor *out, const oj_tensor *a,
                        const oj_tensor *b) {
    const oj_tensor *ts[3] = {out, a, b};
    oj_iter it;
    oj_iter_init(&it, out->rank, out->shape, 3, ts);
    /* Exact int64 arithmetic when both inputs and the result are integers
     * (integer division promotes to float in the ops layer). */
    bool ints = (is_int_dtype(a->dtype) || a->dtype == OJ_BOOL) &&
                (is_int_dtype(b->dtype) || b->dtype == OJ_BOOL) && !oj_dtype_is_float(out->dtype);
    bin_ctx c = {.op = op, .out = out->dtype, .a = a->dtype, .b = b->dtype, .integer = ints,
                 .sop = simd_binary_op(op)};
    if (c.sop >= 0 && out->dtype == OJ_F32 && a->dtype == OJ_F32 && b->dtype == OJ_F32)
        c.sd = oj_simd_of(eng);
    oj_iter_run_parallel(eng, &it, binary_run, &c);
    return OJ_OK;
}

/* ---------------------------------------------------------------- where */

typedef struct {
    oj_dtype out, c, a, b;
} where_ctx;

static void where_run(char **p, const int64_t *st, int64_t n, void *vctx) {
    const where_ctx *c = vctx;
    size_t es = oj_dtype_size(c->out);
    for (int64_t i = 0; i < n; i++) {
        bool take_a = oj__load(p[1] + i * st[1], c->c) != 0.0;
        const char *src = take_a ? p[2] + i * st[2] : p[3] + i * st[3];
        oj_dtype sdt = take_a ? c->a : c->b;
        if (sdt == c->out)
            memcpy(p[0] + i * st[0], src, es);
        else
            oj__store(p[0] + i * st[0], c->out, oj__load(src, sdt));
    }
}

oj_status oj_cpu_where(oj_engine *eng, oj_tensor *out, const oj_tensor *cond, const oj_tensor *a,
                       const oj_tensor *b) {
    const oj_tensor *ts[4] = {out, cond, a, b};
    oj_iter it;
    oj_iter_init(&it, out->rank, out->shape, 4, ts);
    where_ctx c = {out->dtype, cond->dtype, a->dtype, b->dtype};
    oj_iter_run_parallel(eng, &it, where_run, &c);
    return OJ_OK;
}

/* ---------------------------------------------------------------- rand */

/* Element i of a contiguous tensor takes word i%4 of Philox block
 * offset + i/4 (uniform), or a Box-Muller pair from words (2j, 2j+1) of
 * that block (normal), so values never depend on how work is split. */
oj_status oj_cpu_rand(oj_engine *eng, oj_tensor *out, bool normal, double lo, double hi,
                      uint64_t seed, uint64_t offset) {
    int64_t n = oj_numel(out);
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    char *base = (char *)out->storage->data + out->offset;
    size_t es = oj_dtype_size(out->dtype);
    for (int64_t blk = 0; blk * 4 < n; blk++) {
        uint64_t cnum = offset + (uint64_t)blk;
        uint32_t ctr[4] = {(uint32_t)cnum, (uint32_t)(cnum >> 32), 0, 0};
        uint32_t r[4];
        oj_philox4x32_10(ctr, key, r);
        double v[4];
        if (normal) {
            for (int j = 0; j < 4; j += 2) {
                /* u1 in (0, 1], u2 in [0, 1) */
                double u1 = ((double)r[j] + 1.0) / 4294967296.0;
                double u2 = (double)r[j + 1] / 4294967296.0;
                double rad = sqrt(-2.0 * log(u1));
                v[j] = lo + hi * rad * cos(2.0 * M_PI * u2);
                v[j + 1] = lo + hi * rad * sin(2.0 * M_PI * u2);
            }
        } else {
            for (int j = 0; j < 4; j++) {
                double u = (double)r[j] / 4294967296.0; /* [0, 1) */
                v[j] = lo + (hi - lo) * u;
                if (v[j] >= hi && hi > lo) v[j] = nextafter(hi, lo); /* rounding guard */
            }
        }
        for (int j = 0; j < 4 && blk * 4 + j < n; j++) {
            void *p = base + (size_t)(blk * 4 + j) * es;
            oj__store(p, out->dtype, v[j]);
            if (!normal && out->dtype != OJ_F64 && oj__load(p, out->dtype) >= hi && hi > lo)
                oj__store(p, out->dtype, lo); /* rounding to f32/bf16 reached hi */
        }
    }
    return OJ_OK;
}

/* ---------------------------------------------------------------- swiglu
 * silu(gate) * up and its gradients through this file's own entries, the
 * outputs holding the intermediates (in-place elementwise calls): the bits
 * of the unfused unary / binary / unary_backward calls by construction. */

// gate, up (any strides) -> out = silu(gate) * up (contiguous)
oj_status oj_cpu_swiglu_forward(oj_engine *eng, oj_tensor *out, const oj_tensor *gate,
                                const oj_tensor *up) {
    oj_status st = oj_cpu_unary(eng, OJ_UN_SILU, out, gate, 0.0, 0.0); /* s */
    return st == OJ_OK ? oj_cpu_binary(eng, OJ_BIN_MUL, out, out, up) : st;
}

// gate, up, dp (any strides) -> dgate = silu'(gate) (dp up), dup = dp silu(gate)
oj_status oj_cpu_swiglu_backward(oj_engine *eng, oj_tensor *dgate, oj_tensor *dup,
                                 const oj_tensor *gate, const oj_tensor *up, const oj_tensor *dp) {
    oj_status st = OJ_OK;
    if (dup) st = oj_cpu_unary(eng, OJ_UN_SILU, dup, gate, 0.0, 0.0); /* s */
    if (st == OJ_OK && dgate) {
        st = oj_cpu_binary(eng, OJ_BIN_MUL, dgate, dp, up); /* ds */
        /* silu's rule reads x only; y (s, or gate when s is not made) has the dtype */
        if (st == OJ_OK)
            st = oj_cpu_unary_backward(eng, OJ_UN_SILU, dgate, gate, dup ? dup : gate, dgate, 0.0,
                                       0.0);
    }
    if (st == OJ_OK && dup) st = oj_cpu_binary(eng, OJ_BIN_MUL, dup, dp, dup);
    return st;
}
