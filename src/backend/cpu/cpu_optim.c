/* CPU optimizer kernels: fused Adam/AdamW, SGD, Muon momentum and a scaled
 * parameter update (contracts in backend.h).
 *
 * Each element follows torch.optim's single-tensor code path (PyTorch 1.13,
 * torch/optim/{adam,adamw,sgd}.py) op by op, rounding to the parameter's
 * dtype after every tensor op as PyTorch does, with the scalar
 * hyperparameters rounded to that dtype as ATen does with Python scalars,
 * so f32 results match torch to the last bit or close to it, and f64 ones
 * to rounding. No contraction into FMA (the build is ISO C11, where GCC
 * does not contract). */
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

#define CPU_OPTIM_KERNELS(T, SQRT, SUF)                                                       \
    static bool adam_##SUF(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,  \
                           int64_t n, const oj_adam_args *a, bool check_only) {              \
        const T b1 = (T)a->beta1, omb1 = (T)(1.0 - a->beta1);                                 \
        const T b2 = (T)a->beta2, omb2 = (T)(1.0 - a->beta2);                                 \
        const T eps = (T)a->eps, wd = (T)a->weight_decay;                                     \
        const T decay = (T)(1.0 - a->lr * a->weight_decay);                                   \
        const T neg_step = (T)(-(a->lr / a->bias_correction1));                               \
        const T bc2_sqrt = (T)sqrt(a->bias_correction2);                                      \
        const bool has_wd = a->weight_decay != 0.0, decoupled = a->decoupled;                 \
        bool finite = true;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T pi = p[i], gi = g[i];                                                           \
            if (has_wd) {                                                                     \
                if (decoupled)                                                                \
                    pi = pi * decay; /* param.mul_(1 - lr * wd) */                            \
                else                                                                          \
                    gi = gi + wd * pi; /* grad.add(param, alpha=wd) */                        \
            }                                                                                 \
            T mi = m[i] * b1;                                                                 \
            mi = mi + omb1 * gi;                 /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */   \
            T vi = v[i] * b2;                                                                 \
            vi = vi + omb2 * gi * gi;            /* .addcmul_(g, g, value=1-b2) */            \
            T denom = SQRT(vi) / bc2_sqrt + eps; /* (v.sqrt() / bc2_sqrt).add_(eps) */        \
            pi = pi + neg_step * mi / denom;     /* param.addcdiv_(m, denom, -step_size) */   \
            if (check_only) {                                                                 \
                finite = finite && isfinite(pi) && isfinite(mi) && isfinite(vi);             \
            } else {                                                                          \
                p[i] = pi;                                                                    \
                m[i] = mi;                                                                    \
                v[i] = vi;                                                                    \
            }                                                                                 \
        }                                                                                     \
        return finite;                                                                        \
    }                                                                                         \
    static bool sgd_##SUF(T *restrict p, const T *restrict g, T *restrict buf, int64_t n,     \
                          const oj_sgd_args *a, bool check_only) {                            \
        const T wd = (T)a->weight_decay, mom = (T)a->momentum;                                \
        const T omd = (T)(1.0 - a->dampening), neg_lr = (T)(-a->lr);                          \
        const bool has_wd = a->weight_decay != 0.0, has_mom = a->momentum != 0.0;            \
        bool finite = true;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T pi = p[i], d = g[i], bi = 0;                                                    \
            if (has_wd) d = d + wd * pi; /* d_p.add(param, alpha=wd) */                       \
            if (has_mom) {                                                                    \
                if (a->first)                                                                 \
                    bi = d; /* buf = clone(d_p) */                                            \
                else                                                                          \
                    bi = buf[i] * mom, bi = bi + omd * d; /* mul_(mom).add_(d, 1-damp) */     \
                d = a->nesterov ? d + mom * bi : bi;                                          \
            }                                                                                 \
            pi = pi + neg_lr * d; /* param.add_(d_p, alpha=-lr) */                            \
            if (check_only) {                                                                 \
                finite = finite && isfinite(pi) && isfinite(bi);                             \
            } else {                                                                          \
                p[i] = pi;                                                                    \
                if (has_mom) buf[i] = bi;                                                     \
            }                                                                                 \
        }                                                                                     \
        return finite;                                                                        \
    }                                                                                         \
    static void muon_momentum_##SUF(T *restrict buf, const T *restrict g, T *restrict u,      \
                                    int64_t n, double momentum, bool nesterov) {              \
        const T mu = (T)momentum;                                                             \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T b = buf[i] * mu;                                                                \
            b = b + g[i]; /* buf.mul_(mu).add_(g) */                                          \
            if (u == NULL)                                                                    \
                buf[i] = b;                                                                   \
            else                                                                              \
                u[i] = nesterov ? g[i] + mu * b : b; /* g.add(buf, alpha=mu) */               \
        }                                                                                     \
    }                                                                                         \
    static bool apply_update_##SUF(T *restrict p, const T *restrict u, int64_t n, double alpha, \
                                   double scale, double decay, bool check_only) {             \
        const T al = (T)alpha, sc = (T)scale, de = (T)decay;                                  \
        const bool has_decay = decay != 1.0, has_scale = scale != 1.0;                        \
        bool finite = true;                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T pi = p[i], ui = u[i];                                                           \
            if (has_scale) ui = ui * sc;                                                      \
            if (has_decay) pi = pi * de;                                                      \
            pi = pi + al * ui;                                                                \
            if (check_only)                                                                   \
                finite = finite && isfinite(pi);                                              \
            else                                                                              \
                p[i] = pi;                                                                    \
        }                                                                                     \
        return finite;                                                                        \
    }

CPU_OPTIM_KERNELS(float, sqrtf, f32)
CPU_OPTIM_KERNELS(double, sqrt, f64)

#define DATA(T, t) ((T *)((char *)(t)->storage->data + (t)->offset))

oj_status oj_cpu_adam_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                           bool check_only) {
    (void)eng;
    int64_t n = oj_numel(param);
    bool ok;
    if (param->dtype == OJ_F32)
        ok = adam_f32(DATA(float, param), DATA(const float, grad), DATA(float, exp_avg),
                      DATA(float, exp_avg_sq), n, args, check_only);
    else if (param->dtype == OJ_F64)
        ok = adam_f64(DATA(double, param), DATA(const double, grad), DATA(double, exp_avg),
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
        ok = sgd_f32(DATA(float, param), DATA(const float, grad),
                     momentum_buf ? DATA(float, momentum_buf) : NULL, n, args, check_only);
    else if (param->dtype == OJ_F64)
        ok = sgd_f64(DATA(double, param), DATA(const double, grad),
                     momentum_buf ? DATA(double, momentum_buf) : NULL, n, args, check_only);
    else
        return OJ_ERR_DTYPE;
    return ok ? OJ_OK : OJ_ERR_NUMERIC;
}

oj_status oj_cpu_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                               oj_tensor *update, double momentum, bool nesterov) {
    (void)eng;
    int64_t n = oj_numel(buf);
    if (buf->dtype == OJ_F32)
        muon_momentum_f32(DATA(float, buf), DATA(const float, grad),
                          update ? DATA(float, update) : NULL, n, momentum, nesterov);
    else if (buf->dtype == OJ_F64)
        muon_momentum_f64(DATA(double, buf), DATA(const double, grad),
                          update ? DATA(double, update) : NULL, n, momentum, nesterov);
    else
        return OJ_ERR_DTYPE;
    return OJ_OK;
}

oj_status oj_cpu_apply_update(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                              double alpha, double scale, double decay, bool check_only) {
    (void)eng;
    int64_t n = oj_numel(param);
    bool ok;
    if (param->dtype == OJ_F32)
        ok = apply_update_f32(DATA(float, param), DATA(const float, update), n, alpha, scale,
                              decay, check_only);
    else if (param->dtype == OJ_F64)
        ok = apply_update_f64(DATA(double, param), DATA(const double, update), n, alpha, scale,
                              decay, check_only);
    else
        return OJ_ERR_DTYPE;
    return ok ? OJ_OK : OJ_ERR_NUMERIC;
}
