/* Order-independent seeded initialisation: every value is a pure function of
 * (seed, parameter name, element index), drawn from Philox4x32-10 with the
 * name's XXH64 as the stream. Distributions and fans follow torch.nn.init. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "backend/backend.h"
#include "ojas/nn.h"

static oj_init make(oj_init_kind kind, double a, double b) {
    oj_init i = {0};
    i.kind = kind;
    i.a = a;
    i.b = b;
    i.gain = 1.0;
    return i;
}

oj_init oj_init_zeros(void) { return make(OJ_INIT_ZEROS, 0, 0); }
oj_init oj_init_ones(void) { return make(OJ_INIT_ONES, 0, 0); }
oj_init oj_init_constant(double value) { return make(OJ_INIT_CONSTANT, value, 0); }
oj_init oj_init_normal(double mean, double std) { return make(OJ_INIT_NORMAL, mean, std); }
oj_init oj_init_uniform(double low, double high) { return make(OJ_INIT_UNIFORM, low, high); }

oj_init oj_init_trunc_normal(double mean, double std, double lo, double hi) {
    oj_init i = make(OJ_INIT_TRUNC_NORMAL, mean, std);
    i.lo = lo;
    i.hi = hi;
    return i;
}

oj_init oj_init_xavier_uniform(double gain) {
    oj_init i = make(OJ_INIT_XAVIER_UNIFORM, 0, 0);
    i.gain = gain;
    return i;
}

oj_init oj_init_xavier_normal(double gain) {
    oj_init i = make(OJ_INIT_XAVIER_NORMAL, 0, 0);
    i.gain = gain;
    return i;
}

oj_init oj_init_kaiming_uniform(double gain, oj_fan_mode mode) {
    oj_init i = make(OJ_INIT_KAIMING_UNIFORM, 0, 0);
    i.gain = gain;
    i.mode = mode;
    return i;
}

oj_init oj_init_kaiming_normal(double gain, oj_fan_mode mode) {
    oj_init i = make(OJ_INIT_KAIMING_NORMAL, 0, 0);
    i.gain = gain;
    i.mode = mode;
    return i;
}

double oj_init_leaky_relu_gain(double negative_slope) {
    return sqrt(2.0 / (1.0 + negative_slope * negative_slope));
}

/* Inverse error function: Giles' single-precision approximation ("Approximating
 * the erfinv function", GPU Computing Gems, 2011) refined by two Newton steps
 * to double precision. |y| < 1. */
static double erfinv_d(double y) {
    if (y <= -1.0) return -INFINITY;
    if (y >= 1.0) return INFINITY;
    double w = -log((1.0 - y) * (1.0 + y)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    double x = p * y;
    for (int k = 0; k < 2; k++) x -= (erf(x) - y) / (M_2_SQRTPI * exp(-x * x));
    return x;
}

static double norm_cdf(double x) { return 0.5 * (1.0 + erf(x / M_SQRT2)); }

/* The Philox stream of one parameter. */
typedef struct {
    uint32_t key[2];
    uint32_t stream[2];
} init_rng;

static void block(const init_rng *r, uint64_t b, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), r->stream[0], r->stream[1]};
    oj_philox4x32_10(ctr, r->key, out);
}

/* U[0, 1) with 53 bits, element i. */
static double uniform_at(const init_rng *r, int64_t i) {
    uint32_t w[4];
    block(r, (uint64_t)i / 2, w);
    int j = (int)(i & 1);
    return (double)(((uint64_t)w[2 * j] << 21) ^ (w[2 * j + 1] >> 11)) * 0x1p-53;
}

/* N(0, 1), element i: Box-Muller over the block's two 53-bit uniforms. */
static double normal_at(const init_rng *r, int64_t i) {
    uint32_t w[4];
    block(r, (uint64_t)i / 2, w);
    double u1 = ((double)(((uint64_t)w[0] << 21) ^ (w[1] >> 11)) + 1.0) * 0x1p-53; /* (0, 1] */
    double u2 = (double)(((uint64_t)w[2] << 21) ^ (w[3] >> 11)) * 0x1p-53;         /* [0, 1) */
    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    return rad * ((i & 1) ? sin(th) : cos(th));
}

static oj_status fans(oj_tensor *t, double *fan_in, double *fan_out, const char *name) {
    if (t->rank < 2) {
        char b[128];
        return oj_set_error(t->eng, OJ_ERR_SHAPE,
                            "init '%s': fan in and fan out need rank >= 2, shape is %s", name,
                            oj__shape_fmt(b, sizeof b, t->rank, t->shape));
    }
    double rf = 1.0;
    for (int d = 2; d < t->rank; d++) rf *= (double)t->shape[d];
    *fan_in = (double)t->shape[1] * rf;
    *fan_out = (double)t->shape[0] * rf;
    return OJ_OK;
}

/* Reduce every kind to: constant c, or uniform [lo, hi), or normal(mean,
 * std), or truncated normal. */
typedef enum { GEN_CONST, GEN_UNIFORM, GEN_NORMAL, GEN_TRUNC } gen_kind;
typedef struct {
    gen_kind kind;
    double a, b;   /* const a; uniform [a, b); normal mean a std b */
    double lo, hi; /* trunc: bounds; ulo, uhi: 2 cdf - 1 of the bounds */
    double ulo, uhi;
} gen;

static oj_status plan(oj_tensor *t, const oj_init *in, const char *name, gen *g) {
    oj_engine *eng = t->eng;
    double fi = 0, fo = 0;
    memset(g, 0, sizeof *g);
    switch (in->kind) {
    case OJ_INIT_ZEROS:
        g->kind = GEN_CONST;
        g->a = 0;
        return OJ_OK;
    case OJ_INIT_ONES:
        g->kind = GEN_CONST;
        g->a = 1;
        return OJ_OK;
    case OJ_INIT_CONSTANT:
        g->kind = GEN_CONST;
        g->a = in->a;
        return OJ_OK;
    case OJ_INIT_NORMAL:
        g->kind = GEN_NORMAL;
        g->a = in->a;
        g->b = in->b;
        break;
    case OJ_INIT_UNIFORM:
        if (!(in->a < in->b) || !isfinite(in->a) || !isfinite(in->b))
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                "init '%s': uniform needs finite low %g < high %g", name, in->a,
                                in->b);
        g->kind = GEN_UNIFORM;
        g->a = in->a;
        g->b = in->b;
        return OJ_OK;
    case OJ_INIT_TRUNC_NORMAL:
        if (!(in->lo < in->hi))
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                                "init '%s': trunc_normal needs lo %g < hi %g", name, in->lo,
                                in->hi);
        g->kind = GEN_TRUNC;
        g->a = in->a;
        g->b = in->b;
        g->lo = in->lo;
        g->hi = in->hi;
        if (in->b > 0) {
            g->ulo = 2.0 * norm_cdf((in->lo - in->a) / in->b) - 1.0;
            g->uhi = 2.0 * norm_cdf((in->hi - in->a) / in->b) - 1.0;
        }
        break;
    case OJ_INIT_XAVIER_UNIFORM:
    case OJ_INIT_XAVIER_NORMAL:
    case OJ_INIT_KAIMING_UNIFORM:
    case OJ_INIT_KAIMING_NORMAL: {
        oj_status st = fans(t, &fi, &fo, name);
        if (st != OJ_OK) return st;
        if (!(in->gain >= 0) || !isfinite(in->gain))
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "init '%s': gain %g must be >= 0",
                                name, in->gain);
        bool xavier = in->kind == OJ_INIT_XAVIER_UNIFORM || in->kind == OJ_INIT_XAVIER_NORMAL;
        bool uni = in->kind == OJ_INIT_XAVIER_UNIFORM || in->kind == OJ_INIT_KAIMING_UNIFORM;
        double fan = xavier ? (fi + fo) / 2.0 : (in->mode == OJ_FAN_OUT ? fo : fi);
        if (fan <= 0)
            return oj_set_error(eng, OJ_ERR_SHAPE, "init '%s': fan is 0 (a dim of size 0)", name);
        double std = in->gain / sqrt(fan); /* xavier: g sqrt(2 / (fi + fo)) */
        if (uni) {
            double bound = sqrt(3.0) * std; /* uniform with that std */
            g->kind = bound > 0 ? GEN_UNIFORM : GEN_CONST;
            g->a = bound > 0 ? -bound : 0.0;
            g->b = bound;
            return OJ_OK;
        }
        g->kind = GEN_NORMAL;
        g->a = 0;
        g->b = std;
        break;
    }
    default:
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "init '%s': unknown kind %d", name,
                            (int)in->kind);
    }
    if (!(g->b >= 0) || !isfinite(g->b) || !isfinite(g->a))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                            "init '%s': mean %g and std %g must be finite, std >= 0", name, g->a,
                            g->b);
    return OJ_OK;
}

static double draw(const gen *g, const init_rng *r, int64_t i) {
    switch (g->kind) {
    case GEN_CONST: return g->a;
    case GEN_UNIFORM: {
        double v = g->a + (g->b - g->a) * uniform_at(r, i);
        return v < g->b ? v : nextafter(g->b, g->a);
    }
    case GEN_NORMAL: return g->a + g->b * normal_at(r, i);
    case GEN_TRUNC: {
        if (g->b == 0) return fmin(fmax(g->a, g->lo), g->hi);
        /* torch.nn.init.trunc_normal_: uniform in [2 cdf(lo) - 1, 2 cdf(hi) - 1],
         * erfinv, scale by std sqrt(2), shift by mean, clamp. */
        double u = g->ulo + (g->uhi - g->ulo) * uniform_at(r, i);
        double v = erfinv_d(u) * g->b * M_SQRT2 + g->a;
        return fmin(fmax(v, g->lo), g->hi);
    }
    }
    return NAN;
}

oj_status oj_init_tensor(oj_tensor *t, const oj_init *init, uint64_t seed, const char *name) {
    if (t == NULL || !oj__live(t)) return OJ_ERR_INVALID_ARGUMENT;
    oj_engine *eng = t->eng;
    if (init == NULL || name == NULL)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "init: NULL initialiser or name");
    if (!oj_is_contiguous(t))
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "init '%s': tensor must be contiguous",
                            name);
    gen g;
    oj_status st = plan(t, init, name, &g);
    if (st != OJ_OK) return st;
    if (g.kind != GEN_CONST && !oj_dtype_is_float(t->dtype))
        return oj_set_error(eng, OJ_ERR_DTYPE,
                            "init '%s': random initialisers need a float dtype, got %s", name,
                            oj_dtype_name(t->dtype));
    if (g.kind == GEN_CONST) {
        st = oj_fill_(t, g.a);
        return st;
    }
    uint64_t h = XXH64(name, strlen(name), 0);
    init_rng r = {{(uint32_t)seed, (uint32_t)(seed >> 32)}, {(uint32_t)h, (uint32_t)(h >> 32)}};
    int64_t n = oj_numel(t);
    size_t es = oj_dtype_size(t->dtype);
    char *buf = malloc(n ? (size_t)n * es : 1);
    if (buf == NULL)
        return oj_set_error(eng, OJ_ERR_CAPACITY, "init '%s': out of host memory", name);
    for (int64_t i = 0; i < n; i++) oj__store(buf + (size_t)i * es, t->dtype, draw(&g, &r, i));
    if (n > 0) {
        st = eng->backend->copy_h2d(eng, (char *)t->storage->data + t->offset, buf, (size_t)n * es);
        if (st != OJ_OK) oj_set_error(eng, st, "init '%s': copy to the device failed", name);
    }
    free(buf);
    if (st == OJ_OK) oj_bump_version(t);
    return st;
}
