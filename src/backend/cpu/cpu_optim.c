/* CPU optimizer kernels: fused Adam/AdamW, SGD, Muon momentum and a scaled
 * parameter update (contracts in backend.h).
 *
 * Each element follows torch.optim's single-tensor code path (PyTorch 1.13,
 * torch/optim/{adam,adamw,sgd}.py) op by op, rounding to the parameter's
 * dtype after every tensor op and rounding scalar hyperparameters to that
 * dtype, as ATen does. ATen's CPU kernels fuse two of those ops, so we do
 * too (checked against torch element by element):
 *   x.add_(y, alpha=a)           x = fma(y, a, x)
 *   x.addcmul_(y, z, value=v)    x = fma(v * y, z, x)
 *   x.addcdiv_(y, z, value=v)    x = (v * y) / z + x     (not fused)
 *   x / scalar                   a true division
 * Everything else is one rounded operation. Where the CPU has FMA the
 * loops are compiled for it (fma() is then one instruction); elsewhere
 * libm's fma() gives the same bits, slower. */
#include <float.h>
#include <math.h>
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pool.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define OJ_OPTIM_FMA_TARGET 1
#if defined(__clang__)
#define OJ_TARGET_FMA __attribute__((target("avx2,fma")))
#define OJ_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma")))
#else
/* -O2 vectorises none of these loops; -O3 does, given -fno-math-errno for
 * Adam's sqrt (a vector sqrt is the same correctly rounded operation, and
 * the argument is never negative but for NaN input, which the check
 * reports). The AVX-512 variant asks for 512-bit vectors. */
#define OJ_TARGET_FMA                                                                              \
    __attribute__((target("avx2,fma"), optimize("O3", "no-math-errno")))
#define OJ_TARGET_AVX512                                                                           \
    __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512"),          \
                   optimize("O3", "no-math-errno")))
#endif
#else
#define OJ_OPTIM_FMA_TARGET 0
#define OJ_TARGET_FMA
#endif

/* Non-finite test without branches (so loops vectorise): !(|x| <= max) is
 * 1 for inf and NaN. */
#define NONFINITE(FABS, MAXV, x) (!(FABS(x) <= MAXV))

/* One Adam/AdamW element at index i (L2: a literal 0 or 1, so the unused
 * branch folds away): pi, mi, vi are the new values. */
#define ADAM_ELEM(T, FMA, SQRT, L2)                                                                \
    T pi = p[i] * decay, gi = g[i];       /* param.mul_(1 - lr * wd) (decay 1: exact no-op) */     \
    if (L2) gi = FMA(pi, wd, gi);         /* grad.add(param, alpha=wd) */                          \
    T mi = FMA(gi, omb1, m[i] * b1);      /* m.mul_(b1).add_(g, alpha=1-b1) */                     \
    T vi = FMA(omb2 * gi, gi, v[i] * b2); /* v.mul_(b2).addcmul_(g, g, value=1-b2) */              \
    T denom = SQRT(vi) / bc2_sqrt + eps;  /* (v.sqrt() / bc2_sqrt).add_(eps) */                    \
    pi = neg_step * mi / denom + pi;      /* param.addcdiv_(m, denom, value=-step_size) */

#define ADAM_CHECK(T, FMA, SQRT, FABS, MAXV, L2)                                                   \
    for (int64_t i = 0; i < n; i++) {                                                              \
        ADAM_ELEM(T, FMA, SQRT, L2)                                                                \
        bad |= NONFINITE(FABS, MAXV, pi) | NONFINITE(FABS, MAXV, mi) | NONFINITE(FABS, MAXV, vi);  \
    }

#define ADAM_WRITE(T, FMA, SQRT, L2)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                              \
        ADAM_ELEM(T, FMA, SQRT, L2)                                                                \
        p[i] = pi;                                                                                 \
        m[i] = mi;                                                                                 \
        v[i] = vi;                                                                                 \
    }

/* The four kernels for one element type T, with attribute ATTR and name
 * suffix SUF. Each returns false when check_only finds a non-finite value. */
#define CPU_OPTIM_KERNELS(T, FMA, SQRT, FABS, MAXV, ATTR, SUF)                                      \
    ATTR static bool adam_##SUF(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,   \
                                int64_t n, const oj_adam_args *a, bool check_only) {                \
        const T b1 = (T)a->beta1, omb1 = (T)(1.0 - a->beta1);                                       \
        const T b2 = (T)a->beta2, omb2 = (T)(1.0 - a->beta2);                                       \
        const T eps = (T)a->eps, wd = (T)a->weight_decay;                                           \
        const bool dec = a->weight_decay != 0.0 && a->decoupled;                                    \
        const bool l2 = a->weight_decay != 0.0 && !a->decoupled;                                    \
        const T decay = dec ? (T)(1.0 - a->lr * a->weight_decay) : (T)1;                            \
        const T neg_step = (T)(-(a->lr / a->bias_correction1));                                     \
        const T bc2_sqrt = (T)sqrt(a->bias_correction2);                                            \
        int bad = 0;                                                                                \
        if (check_only && l2) {                                                                     \
            ADAM_CHECK(T, FMA, SQRT, FABS, MAXV, 1)                                                 \
        } else if (check_only) {                                                                    \
            ADAM_CHECK(T, FMA, SQRT, FABS, MAXV, 0)                                                 \
        } else if (l2) {                                                                            \
            ADAM_WRITE(T, FMA, SQRT, 1)                                                             \
        } else {                                                                                    \
            ADAM_WRITE(T, FMA, SQRT, 0)                                                             \
        }                                                                                           \
        return bad == 0;                                                                            \
    }                                                                                               \
    ATTR static bool sgd_##SUF(T *restrict p, const T *restrict g, T *restrict buf, int64_t n,      \
                               const oj_sgd_args *a, bool check_only) {                             \
        const T wd = (T)a->weight_decay, mom = (T)a->momentum;                                      \
        const T omd = (T)(1.0 - a->dampening), neg_lr = (T)(-a->lr);                                \
        const bool has_wd = a->weight_decay != 0.0, has_mom = a->momentum != 0.0;                   \
        int bad = 0;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                           \
            T pi = p[i], d = g[i], bi = 0;                                                          \
            if (has_wd) d = FMA(pi, wd, d); /* d_p.add(param, alpha=wd) */                          \
            if (has_mom) {                                                                          \
                /* first: buf = clone(d_p); else buf.mul_(mom).add_(d_p, alpha=1-damp) */           \
                bi = a->first ? d : FMA(d, omd, buf[i] * mom);                                      \
                d = a->nesterov ? FMA(bi, mom, d) : bi; /* d_p.add(buf, alpha=mom) */               \
            }                                                                                       \
            pi = FMA(d, neg_lr, pi); /* param.add_(d_p, alpha=-lr) */                               \
            if (check_only) {                                                                       \
                bad |= NONFINITE(FABS, MAXV, pi) | NONFINITE(FABS, MAXV, bi);                       \
            } else {                                                                                \
                p[i] = pi;                                                                          \
                if (has_mom) buf[i] = bi;                                                           \
            }                                                                                       \
        }                                                                                           \
        return bad == 0;                                                                            \
    }                                                                                               \
    ATTR static void muon_momentum_##SUF(T *restrict buf, const T *restrict g, T *restrict u,       \
                                         int64_t n, double momentum, bool nesterov) {               \
        const T mu = (T)momentum;                                                                   \
        if (u == NULL) {                                                                            \
            for (int64_t i = 0; i < n; i++)                                                         \
                buf[i] = buf[i] * mu + g[i]; /* buf.mul_(mu).add_(g) */                             \
        } else if (nesterov) {                                                                      \
            for (int64_t i = 0; i < n; i++)                                                         \
                u[i] = FMA(buf[i] * mu + g[i], mu, g[i]); /* g.add(buf, alpha=mu) */                \
        } else {                                                                                    \
            for (int64_t i = 0; i < n; i++) u[i] = buf[i] * mu + g[i];                              \
        }                                                                                           \
    }                                                                                               \
    ATTR static bool apply_update_##SUF(T *restrict p, const T *restrict u, int64_t n,              \
                                        double alpha, double scale, double decay,                   \
                                        bool check_only) {                                          \
        /* update.mul_(scale); param.mul_(1 - lr * wd); param.add_(update, alpha=-lr)             \
         * (a factor of 1 is an exact no-op) */ \
        const T al = (T)alpha, sc = (T)scale, de = (T)decay;                                        \
        int bad = 0;                                                                                \
        if (check_only) {                                                                           \
            for (int64_t i = 0; i < n; i++)                                                         \
                bad |= NONFINITE(FABS, MAXV, FMA(u[i] * sc, al, p[i] * de));                        \
        } else {                                                                                    \
            for (int64_t i = 0; i < n; i++) p[i] = FMA(u[i] * sc, al, p[i] * de);                   \
        }                                                                                           \
        return bad == 0;                                                                            \
    }

/* Sum of squares in double: 8 interleaved partial sums (vectorisable, and
 * a fixed order), combined in index order. */
#define CPU_SUMSQ(T, ATTR, SUF)                                                                    \
    ATTR static double sumsq_##SUF(const T *restrict x, int64_t n) {                               \
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                  \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j];             \
        for (int j = 0; i + j < n; j++) acc[j] += (double)x[i + j] * (double)x[i + j];             \
        double s = 0;                                                                              \
        for (int j = 0; j < 8; j++) s += acc[j];                                                   \
        return s;                                                                                  \
    }

CPU_SUMSQ(float, , f32)
CPU_SUMSQ(double, , f64)
CPU_OPTIM_KERNELS(float, fmaf, sqrtf, fabsf, FLT_MAX, , f32)
CPU_OPTIM_KERNELS(double, fma, sqrt, fabs, DBL_MAX, , f64)
#if OJ_OPTIM_FMA_TARGET
CPU_OPTIM_KERNELS(float, fmaf, sqrtf, fabsf, FLT_MAX, OJ_TARGET_FMA, f32_fma)
CPU_OPTIM_KERNELS(double, fma, sqrt, fabs, DBL_MAX, OJ_TARGET_FMA, f64_fma)
CPU_OPTIM_KERNELS(float, fmaf, sqrtf, fabsf, FLT_MAX, OJ_TARGET_AVX512, f32_avx512)
CPU_OPTIM_KERNELS(double, fma, sqrt, fabs, DBL_MAX, OJ_TARGET_AVX512, f64_avx512)
CPU_SUMSQ(float, OJ_TARGET_FMA, f32_fma)
CPU_SUMSQ(double, OJ_TARGET_FMA, f64_fma)

/* f32 Adam/AdamW in explicit vectors: gcc does not vectorise the loop above
 * under -std=c11 (sqrtf keeps its errno path). The same operations in the
 * same order, each correctly rounded (vector sqrt, division and fused
 * multiply-add are the scalar ones lane by lane), so the bits are those of
 * ADAM_ELEM; the tail runs ADAM_ELEM itself. PFX: the intrinsic prefix,
 * V: the vector type, W: lanes; FINITE(x, maxv): all lanes finite. */
#define ADAM_F32_VEC(ATTR, SUF, PFX, V, W, FINITE, TAIL)                                                 \
    ATTR static bool adam_f32_##SUF(float *restrict p, const float *restrict g, float *restrict m, \
                                    float *restrict v, int64_t n, const oj_adam_args *a,           \
                                    bool check_only) {                                             \
        const bool dec = a->weight_decay != 0.0 && a->decoupled;                                   \
        const bool l2 = a->weight_decay != 0.0 && !a->decoupled;                                   \
        const V b1 = PFX##set1_ps((float)a->beta1), omb1 = PFX##set1_ps((float)(1.0 - a->beta1));  \
        const V b2 = PFX##set1_ps((float)a->beta2), omb2 = PFX##set1_ps((float)(1.0 - a->beta2));  \
        const V eps = PFX##set1_ps((float)a->eps), wd = PFX##set1_ps((float)a->weight_decay);      \
        const V decay = PFX##set1_ps(dec ? (float)(1.0 - a->lr * a->weight_decay) : 1.0f);         \
        const V neg_step = PFX##set1_ps((float)(-(a->lr / a->bias_correction1)));                  \
        const V bc2_sqrt = PFX##set1_ps((float)sqrt(a->bias_correction2));                         \
        const V maxv = PFX##set1_ps(FLT_MAX);                                                      \
        bool ok = true;                                                                            \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) {                                                               \
            V pi = PFX##mul_ps(PFX##loadu_ps(p + i), decay), gi = PFX##loadu_ps(g + i);            \
            if (l2) gi = PFX##fmadd_ps(pi, wd, gi);                                                \
            V mi = PFX##fmadd_ps(gi, omb1, PFX##mul_ps(PFX##loadu_ps(m + i), b1));                 \
            V vi = PFX##fmadd_ps(PFX##mul_ps(omb2, gi), gi, PFX##mul_ps(PFX##loadu_ps(v + i), b2)); \
            V denom = PFX##add_ps(PFX##div_ps(PFX##sqrt_ps(vi), bc2_sqrt), eps);                   \
            pi = PFX##add_ps(PFX##div_ps(PFX##mul_ps(neg_step, mi), denom), pi);                   \
            if (check_only) {                                                                      \
                ok &= FINITE(pi, maxv) & FINITE(mi, maxv) & FINITE(vi, maxv);                      \
            } else {                                                                               \
                PFX##storeu_ps(p + i, pi);                                                         \
                PFX##storeu_ps(m + i, mi);                                                         \
                PFX##storeu_ps(v + i, vi);                                                         \
            }                                                                                      \
        }                                                                                          \
        if (i < n) ok &= TAIL(p + i, g + i, m + i, v + i, n - i, a, check_only);          \
        return ok;                                                                                 \
    }
#define FINITE_512(x, maxv) (_mm512_cmp_ps_mask(_mm512_abs_ps(x), maxv, _CMP_LE_OQ) == 0xFFFF)
#define FINITE_256(x, maxv)                                                                        \
    (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), maxv,          \
                                      _CMP_LE_OQ)) == 0xFF)
ADAM_F32_VEC(OJ_TARGET_AVX512, vec512, _mm512_, __m512, 16, FINITE_512, adam_f32_avx512)
ADAM_F32_VEC(OJ_TARGET_FMA, vec256, _mm256_, __m256, 8, FINITE_256, adam_f32_fma)
/* The variant for eng's SIMD level (fmaf/fma give the same bits on every
 * level: one correctly rounded fused operation; so do the vector sqrt and
 * division). */
#define PICK(eng, fn, SUF)                                                                         \
    (oj_cpu_isa_of(eng) >= OJ_ISA_AVX512 ? fn##_##SUF##_avx512                                     \
     : oj_cpu_isa_of(eng) >= OJ_ISA_AVX2 ? fn##_##SUF##_fma                                        \
                                          : fn##_##SUF)
#define PICK_SUMSQ(eng, SUF) (oj_cpu_isa_of(eng) >= OJ_ISA_AVX2 ? sumsq_##SUF##_fma : sumsq_##SUF)
#else
#define PICK(eng, fn, SUF) fn##_##SUF
#define PICK_SUMSQ(eng, SUF) sumsq_##SUF
#endif

#define DATA(T, t) ((T *)((char *)(t)->storage->data + (t)->offset))

/* The updates are elementwise (each element's new value depends on that
 * element alone), so they run over the pool in chunks of OPTIM_GRAIN
 * elements: any split gives the same bits. */
#define OPTIM_GRAIN 32768

typedef enum { K_ADAM, K_SGD, K_MUON, K_APPLY } optim_kind;

typedef struct {
    optim_kind kind;
    size_t esize; /* 4 (f32) or 8 (f64) */
    void *p, *m, *v;
    const void *g;
    const oj_adam_args *adam;
    const oj_sgd_args *sgd;
    double momentum, alpha, scale, decay;
    bool nesterov, check_only;
    int bad; /* set (atomically) by a chunk that found a non-finite value */
    bool (*adam_f32)(float *restrict, const float *restrict, float *restrict, float *restrict,
                     int64_t, const oj_adam_args *, bool);
    bool (*adam_f64)(double *restrict, const double *restrict, double *restrict,
                     double *restrict, int64_t, const oj_adam_args *, bool);
    bool (*sgd_f32)(float *restrict, const float *restrict, float *restrict, int64_t,
                    const oj_sgd_args *, bool);
    bool (*sgd_f64)(double *restrict, const double *restrict, double *restrict, int64_t,
                    const oj_sgd_args *, bool);
    void (*muon_f32)(float *restrict, const float *restrict, float *restrict, int64_t, double,
                     bool);
    void (*muon_f64)(double *restrict, const double *restrict, double *restrict, int64_t, double,
                     bool);
    bool (*apply_f32)(float *restrict, const float *restrict, int64_t, double, double, double,
                      bool);
    bool (*apply_f64)(double *restrict, const double *restrict, int64_t, double, double, double,
                      bool);
} optim_job;

/* Element `begin` of buffer x (NULL stays NULL). */
static void *at(const optim_job *j, const void *x, int64_t begin) {
    return x ? (char *)x + (size_t)begin * j->esize : NULL;
}

static void optim_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    optim_job *j = ctx;
    int64_t n = end - begin;
    void *p = at(j, j->p, begin), *m = at(j, j->m, begin), *v = at(j, j->v, begin);
    const void *g = at(j, j->g, begin);
    bool f32 = j->esize == sizeof(float), ok = true;
    switch (j->kind) {
    case K_ADAM:
        ok = f32 ? j->adam_f32(p, g, m, v, n, j->adam, j->check_only)
                 : j->adam_f64(p, g, m, v, n, j->adam, j->check_only);
        break;
    case K_SGD:
        ok = f32 ? j->sgd_f32(p, g, m, n, j->sgd, j->check_only)
                 : j->sgd_f64(p, g, m, n, j->sgd, j->check_only);
        break;
    case K_MUON: /* p: the momentum buffer, m: the update (or NULL) */
        if (f32) j->muon_f32(p, g, m, n, j->momentum, j->nesterov);
        else j->muon_f64(p, g, m, n, j->momentum, j->nesterov);
        break;
    case K_APPLY:
        ok = f32 ? j->apply_f32(p, g, n, j->alpha, j->scale, j->decay, j->check_only)
                 : j->apply_f64(p, g, n, j->alpha, j->scale, j->decay, j->check_only);
        break;
    }
    if (!ok) __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
}

/* Run job j over n elements on eng's pool; OJ_ERR_DTYPE for a dtype other
 * than f32/f64, OJ_ERR_NUMERIC when a chunk found a non-finite value. */
static oj_status optim_run(oj_engine *eng, optim_job *j, oj_dtype dt, int64_t n) {
    if (dt != OJ_F32 && dt != OJ_F64) return OJ_ERR_DTYPE;
    j->esize = dt == OJ_F32 ? sizeof(float) : sizeof(double);
#if OJ_OPTIM_FMA_TARGET
    j->adam_f32 = oj_cpu_isa_of(eng) >= OJ_ISA_AVX512 ? adam_f32_vec512
                  : oj_cpu_isa_of(eng) >= OJ_ISA_AVX2 ? adam_f32_vec256
                                                       : adam_f32;
#else
    j->adam_f32 = adam_f32;
#endif
    j->adam_f64 = PICK(eng, adam, f64);
    j->sgd_f32 = PICK(eng, sgd, f32);
    j->sgd_f64 = PICK(eng, sgd, f64);
    j->muon_f32 = PICK(eng, muon_momentum, f32);
    j->muon_f64 = PICK(eng, muon_momentum, f64);
    j->apply_f32 = PICK(eng, apply_update, f32);
    j->apply_f64 = PICK(eng, apply_update, f64);
    oj_cpu_parallel_for(eng, n, OPTIM_GRAIN, optim_chunk, j);
    return j->bad ? OJ_ERR_NUMERIC : OJ_OK;
}

oj_status oj_cpu_adam_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                           bool check_only) {
    optim_job j = {.kind = K_ADAM,
                   .p = DATA(char, param),
                   .g = DATA(const char, grad),
                   .m = DATA(char, exp_avg),
                   .v = DATA(char, exp_avg_sq),
                   .adam = args,
                   .check_only = check_only};
    return optim_run(eng, &j, param->dtype, oj_numel(param));
}

oj_status oj_cpu_sgd_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                          oj_tensor *momentum_buf, const oj_sgd_args *args, bool check_only) {
    optim_job j = {.kind = K_SGD,
                   .p = DATA(char, param),
                   .g = DATA(const char, grad),
                   .m = momentum_buf ? DATA(char, momentum_buf) : NULL,
                   .sgd = args,
                   .check_only = check_only};
    return optim_run(eng, &j, param->dtype, oj_numel(param));
}

oj_status oj_cpu_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                               oj_tensor *update, double momentum, bool nesterov) {
    optim_job j = {.kind = K_MUON,
                   .p = DATA(char, buf),
                   .g = DATA(const char, grad),
                   .m = update ? DATA(char, update) : NULL,
                   .momentum = momentum,
                   .nesterov = nesterov};
    return optim_run(eng, &j, buf->dtype, oj_numel(buf));
}

oj_status oj_cpu_apply_update(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                              double alpha, double scale, double decay, bool check_only) {
    optim_job j = {.kind = K_APPLY,
                   .p = DATA(char, param),
                   .g = DATA(const char, update),
                   .alpha = alpha,
                   .scale = scale,
                   .decay = decay,
                   .check_only = check_only};
    return optim_run(eng, &j, param->dtype, oj_numel(param));
}

oj_status oj_cpu_sum_squares(oj_engine *eng, const oj_tensor *x, double *out) {
    int64_t n = oj_numel(x);
    if (x->dtype == OJ_F32)
        *out = PICK_SUMSQ(eng, f32)(DATA(const float, x), n);
    else if (x->dtype == OJ_F64)
        *out = PICK_SUMSQ(eng, f64)(DATA(const double, x), n);
    else
        return OJ_ERR_DTYPE;
    return OJ_OK;
}

/* Sum of squares of a bf16/f16 tensor in double, in the order of
 * CPU_SUMSQ (8 interleaved partial sums combined in index order). */
static double sumsq_half(const uint16_t *x, int64_t n, bool bf16) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        double v = bf16 ? (double)oj_bf16_to_f32(x[i]) : (double)oj_f16_to_f32(x[i]);
        acc[i & 7] += v * v;
    }
    double s = 0;
    for (int j = 0; j < 8; j++) s += acc[j];
    return s;
}

typedef struct {
    const oj_tensor *const *ts;
    double *out;
    double (*f32)(const float *restrict, int64_t);
    double (*f64)(const double *restrict, int64_t);
} sumsq_multi_job;

/* Tensors [begin, end): each one summed whole by one thread, so the bits
 * do not depend on the thread count. */
static void sumsq_multi_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const sumsq_multi_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        const oj_tensor *x = j->ts[i];
        int64_t n = oj_numel(x);
        switch (x->dtype) {
        case OJ_F32: j->out[i] = j->f32(DATA(const float, x), n); break;
        case OJ_F64: j->out[i] = j->f64(DATA(const double, x), n); break;
        case OJ_BF16: j->out[i] = sumsq_half(DATA(const uint16_t, x), n, true); break;
        default: j->out[i] = sumsq_half(DATA(const uint16_t, x), n, false); break;
        }
    }
}

oj_status oj_cpu_sum_squares_multi(oj_engine *eng, int64_t n, const oj_tensor *const *ts,
                                   double *out); /* registered in cpu_backend.c */
oj_status oj_cpu_sum_squares_multi(oj_engine *eng, int64_t n, const oj_tensor *const *ts,
                                   double *out) {
    for (int64_t i = 0; i < n; i++) {
        oj_dtype dt = ts[i]->dtype;
        if (dt != OJ_F32 && dt != OJ_F64 && dt != OJ_BF16 && dt != OJ_F16) return OJ_ERR_DTYPE;
    }
    sumsq_multi_job j = {.ts = ts, .out = out, .f32 = PICK_SUMSQ(eng, f32),
                         .f64 = PICK_SUMSQ(eng, f64)};
    if (n > 0) oj_cpu_parallel_for(eng, n, 1, sumsq_multi_chunk, &j);
    return OJ_OK;
}

/* ---------------------------------------------------------------- multi-tensor entries
 * The per-tensor kernels on each tensor in turn (each spread over the
 * pool), so the bits are theirs by construction; on the CPU a launch costs
 * nothing worth batching away. */

oj_status oj_cpu_adam_step_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                 const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                 oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                 bool check_only); /* registered in cpu_backend.c */
oj_status oj_cpu_adam_step_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                 const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                 oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                 bool check_only) {
    for (int64_t i = 0; i < n; i++)
        if (params[i]->dtype != OJ_F32 && params[i]->dtype != OJ_F64) return OJ_ERR_DTYPE;
    oj_status st = OJ_OK;
    for (int64_t i = 0; i < n && st == OJ_OK; i++)
        st = oj_cpu_adam_step(eng, params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], &args[i],
                              check_only);
    return st;
}

oj_status oj_cpu_mul_scalar_multi(oj_engine *eng, int64_t n, oj_tensor *const *ts,
                                  double alpha); /* registered in cpu_backend.c */
oj_status oj_cpu_mul_scalar_multi(oj_engine *eng, int64_t n, oj_tensor *const *ts,
                                  double alpha) {
    for (int64_t i = 0; i < n; i++) {
        oj_dtype dt = ts[i]->dtype;
        if (dt != OJ_F32 && dt != OJ_F64 && dt != OJ_BF16 && dt != OJ_F16) return OJ_ERR_DTYPE;
    }
    oj_status st = OJ_OK;
    for (int64_t i = 0; i < n && st == OJ_OK; i++)
        st = oj_cpu_unary(eng, OJ_UN_AFFINE, ts[i], ts[i], alpha, 0.0);
    return st;
}
