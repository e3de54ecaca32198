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

#include "backend/cpu/cpu_kernels.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define OJ_OPTIM_FMA_TARGET 1
#if defined(__clang__)
#define OJ_TARGET_FMA __attribute__((target("avx2,fma")))
#else /* -O2 vectorises none of these loops; -O3 most (Adam's sqrt needs -fno-math-errno) */
#define OJ_TARGET_FMA __attribute__((target("avx2,fma"), optimize("O3")))
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
CPU_SUMSQ(float, OJ_TARGET_FMA, f32_fma)
CPU_SUMSQ(double, OJ_TARGET_FMA, f64_fma)
static bool has_fma(void) {
    return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
}
#define PICK(fn, SUF) (has_fma() ? fn##_##SUF##_fma : fn##_##SUF)
#else
#define PICK(fn, SUF) fn##_##SUF
#endif

#define DATA(T, t) ((T *)((char *)(t)->storage->data + (t)->offset))

oj_status oj_cpu_adam_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                           bool check_only) {
    (void)eng;
    int64_t n = oj_numel(param);
    bool ok;
    if (param->dtype == OJ_F32)
        ok = PICK(adam, f32)(DATA(float, param), DATA(const float, grad), DATA(float, exp_avg),
                             DATA(float, exp_avg_sq), n, args, check_only);
    else if (param->dtype == OJ_F64)
        ok = PICK(adam, f64)(DATA(double, param), DATA(const double, grad), DATA(double, exp_avg),
                             DATA(double, exp_avg_sq), n, args, check_only);
    else
        return OJ_ERR_DTYPE;
    return ok ? OJ_OK : OJ_ERR_NUMERIC;
}

oj_status oj_cpu_sgd_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                          oj_tensor *momentum_buf, const oj_sgd_args *args, bool check_only) {
    (void)eng;
    int64_t n = oj_numel(param);
    bool ok;
    if (param->dtype == OJ_F32)
        ok = PICK(sgd, f32)(DATA(float, param), DATA(const float, grad),
                            momentum_buf ? DATA(float, momentum_buf) : NULL, n, args, check_only);
    else if (param->dtype == OJ_F64)
        ok = PICK(sgd, f64)(DATA(double, param), DATA(const double, grad),
                            momentum_buf ? DATA(double, momentum_buf) : NULL, n, args, check_only);
    else
        return OJ_ERR_DTYPE;
    return ok ? OJ_OK : OJ_ERR_NUMERIC;
}

oj_status oj_cpu_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                               oj_tensor *update, double momentum, bool nesterov) {
    (void)eng;
    int64_t n = oj_numel(buf);
    if (buf->dtype == OJ_F32) PICK(muon_momentum, f32)
    (DATA(float, buf), DATA(const float, grad), update ? DATA(float, update) : NULL, n, momentum,
     nesterov);
    else if (buf->dtype == OJ_F64)
        PICK(muon_momentum, f64)(DATA(double, buf), DATA(const double, grad),
                                 update ? DATA(double, update) : NULL, n, momentum, nesterov);
    else return OJ_ERR_DTYPE;
    return OJ_OK;
}

oj_status oj_cpu_apply_update(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                              double alpha, double scale, double decay, bool check_only) {
    (void)eng;
    int64_t n = oj_numel(param);
    bool ok;
    if (param->dtype == OJ_F32)
        ok = PICK(apply_update, f32)(DATA(float, param), DATA(const float, update), n, alpha, scale,
                                     decay, check_only);
    else if (param->dtype == OJ_F64)
        ok = PICK(apply_update, f64)(DATA(double, param), DATA(const double, update), n, alpha,
                                     scale, decay, check_only);
    else
        return OJ_ERR_DTYPE;
    return ok ? OJ_OK : OJ_ERR_NUMERIC;
}

oj_status oj_cpu_sum_squares(oj_engine *eng, const oj_tensor *x, double *out) {
    (void)eng;
    int64_t n = oj_numel(x);
    if (x->dtype == OJ_F32)
        *out = PICK(sumsq, f32)(DATA(const float, x), n);
    else if (x->dtype == OJ_F64)
        *out = PICK(sumsq, f64)(DATA(const double, x), n);
    else
        return OJ_ERR_DTYPE;
    return OJ_OK;
}
