/* CUDA optimizer kernels: fused Adam/AdamW, SGD, Muon momentum and the
 * scaled parameter update, element for element the operations of the CPU
 * kernels (cpu_optim.c, torch.optim's single-tensor order): every multiply,
 * add, divide and square root is an explicitly rounded intrinsic (no FMA
 * contraction) and the fused steps ATen fuses use fma(), so the GPU update
 * is bit-identical to the CPU's. Hyperparameters are rounded to the
 * parameter dtype on the host exactly as the CPU does. check_only writes
 * nothing and reports a non-finite new value through a status word. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/scalar_ops.h"
#include "core/env.h"

static __device__ __forceinline__ float MUL(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double MUL(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ float ADD(float a, float b) { return __fadd_rn(a, b); }
static __device__ __forceinline__ double ADD(double a, double b) { return __dadd_rn(a, b); }
static __device__ __forceinline__ float DIV(float a, float b) { return __fdiv_rn(a, b); }
static __device__ __forceinline__ double DIV(double a, double b) { return __ddiv_rn(a, b); }
static __device__ __forceinline__ float SQRT(float a) { return __fsqrt_rn(a); }
static __device__ __forceinline__ double SQRT(double a) { return __dsqrt_rn(a); }
static __device__ __forceinline__ float FMA(float a, float b, float c) { return fmaf(a, b, c); }
static __device__ __forceinline__ double FMA(double a, double b, double c) { return fma(a, b, c); }

/* ---------------------------------------------------------------- the step gate
 * While a gate is open (oj_cuda_step_gate_open, backend.h step_gate_open)
 * the state's gate points at device doubles: [GATE_COEF] the clip factor
 * the gradients are multiplied by as they are read (1: not clipped),
 * [GATE_SKIP] 0, or 1 when a gradient is not finite, 2 when a check pass
 * found a new value that would not be finite. Writing kernels then do
 * nothing when GATE_SKIP is set; check passes set it instead of a status
 * word, so no value travels to the host between the norm and the update. */
enum { GATE_SUMSQ = 0, GATE_COEF = 1, GATE_SKIP = 2, GATE_NORM = 3, GATE_EACH = 4 };
/* After the n norms: [GATE_EACH + n] the safe word (oj_cuda_state.gate_safe:
 * 1 when the host's bound proves every new value finite, so the check
 * pass of adam_step_multi returns at once), then 2 n words of bounds (per
 * tensor 4 u32, 3 used: the bits of max |p|, max |m|, max v its writing
 * pass produced, by atomicMax; non-negative floats order as their bits,
 * NaN above +inf), which the host reads back with the gate and derives
 * the next step's safe norm from (step.c). */

/* g * coef with mul_scalar_multi's bits for a tensor of that dtype (one:
 * the tensor has one element, which that entry computes in double). */
static __device__ __forceinline__ float gate_scale(float g, double coef, bool one) {
    return one ? (float)oj_unary_d(OJ_UN_AFFINE, (double)g, coef, 0.0)
               : oj_unary_f(OJ_UN_AFFINE, g, (float)coef, 0.0f);
}
static __device__ __forceinline__ double gate_scale(double g, double coef, bool one) {
    (void)one;
    return oj_unary_d(OJ_UN_AFFINE, g, coef, 0.0);
}
/* Element i of a gradient as the gated step reads it (coef 1: as stored). */
template <typename T>
static __device__ __forceinline__ T gate_grad(const T *g, int64_t i, double coef, bool one) {
    return coef != 1.0 ? gate_scale(g[i], coef, one) : g[i];
}
/* A check pass found a non-finite new value: skip the step (keeping a
 * non-finite gradient's 1, which came first). */
static __device__ __forceinline__ void gate_refuse(double *gate) {
    if (gate[GATE_SKIP] == 0.0) gate[GATE_SKIP] = 2.0;
}

template <typename T> struct adam_c {
    T b1, omb1, b2, omb2, eps, wd, decay, neg_step, bc2_sqrt;
    bool l2, dec;
};

#define OPT_LOOP(i, n)                                                                       \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

/* Element i of one Adam/AdamW update (ADAM_ELEM's order in cpu_optim.c):
 * writes the new values, or with check_only writes nothing and returns
 * false when one would be non-finite. k_adam and k_adam_multi both run
 * it, so they give the same bits. The gradient is read times coef (the
 * step gate's clip factor; one: the tensor has one element). */
/* The new p, m, v of one element from its stored p, g, m, v, in place
 * (adam_elem's arithmetic; k_adam_multi loads a batch of elements first). */
template <typename T>
static __device__ __forceinline__ void adam_new(T &pi, T g, T &mi, T &vi, const adam_c<T> &c,
                                                double coef, bool one) {
    T gi = coef != 1.0 ? gate_scale(g, coef, one) : g;
    if (c.dec) pi = MUL(pi, c.decay);
    if (c.l2) gi = FMA(pi, c.wd, gi);
    mi = FMA(gi, c.omb1, MUL(mi, c.b1));
    vi = FMA(MUL(c.omb2, gi), gi, MUL(vi, c.b2));
    T denom = ADD(DIV(SQRT(vi), c.bc2_sqrt), c.eps);
    pi = ADD(DIV(MUL(c.neg_step, mi), denom), pi);
}

template <typename T>
static __device__ __forceinline__ bool adam_elem(T *p, const T *g, T *m, T *v, int64_t i,
                                                 const adam_c<T> &c, bool check_only,
                                                 double coef, bool one, T *nv = NULL) {
    T pi = p[i], mi = m[i], vi = v[i];
    adam_new(pi, g[i], mi, vi, c, coef, one);
    if (check_only) return isfinite(pi) && isfinite(mi) && isfinite(vi);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (nv) nv[0] = pi, nv[1] = mi, nv[2] = vi;
    return true;
}

/* A thread's running bounds of the new values (bits of |p|, |m|, v; a
 * negative v counts as +inf), then the block's, added by atomicMax into
 * bnd[0..3) (every thread of the block calls adam_bounds_flush). */
struct adam_bounds {
    unsigned p = 0, m = 0, v = 0;
    /* f64 values as the float rounded up (never below them; +inf past
     * FLT_MAX), so the bounds hold for them too */
    static __device__ __forceinline__ unsigned bits(float x) { return __float_as_uint(fabsf(x)); }
    static __device__ __forceinline__ unsigned bits(double x) {
        return __float_as_uint(__double2float_ru(fabs(x)));
    }
    template <typename T> __device__ __forceinline__ void add(const T *nv) {
        p = max(p, bits(nv[0]));
        m = max(m, bits(nv[1]));
        v = max(v, nv[2] < 0 ? 0x7f800000u : bits(nv[2]));
    }
};
static __device__ void adam_bounds_flush(adam_bounds b, unsigned *bnd) {
    __shared__ unsigned sh[3][32];
    const int t = (int)(threadIdx.y * blockDim.x + threadIdx.x), nw = (int)(blockDim.x * blockDim.y + 31) / 32;
    unsigned q[3] = {b.p, b.m, b.v};
    for (int j = 0; j < 3; j++) {
        q[j] = __reduce_max_sync(0xffffffffu, q[j]);
        if ((t & 31) == 0) sh[j][t >> 5] = q[j];
    }
    __syncthreads();
    if (t < 3) {
        unsigned mx = 0;
        for (int w = 0; w < nw; w++) mx = max(mx, sh[t][w]);
        if (mx) atomicMax(bnd + t, mx);
    }
}

template <typename T>
__global__ void k_adam(T *p, const T *g, T *m, T *v, int64_t n, adam_c<T> c, bool check_only,
                       unsigned long long *bad, double *gate) {
    double coef = 1.0;
    if (gate != NULL) {
        if (gate[GATE_SKIP] != 0.0) return;
        coef = gate[GATE_COEF];
    }
    OPT_LOOP(i, n) {
        if (!adam_elem(p, g, m, v, i, c, check_only, coef, n == 1)) {
            if (gate != NULL) gate_refuse(gate);
            else *bad = 1ull;
        }
    }
}

template <typename T> struct sgd_c {
    T wd, mom, omd, neg_lr;
    bool has_wd, has_mom, nesterov, first;
};

template <typename T>
__global__ void k_sgd(T *p, const T *g, T *buf, int64_t n, sgd_c<T> c, bool check_only,
                      unsigned long long *bad) {
    OPT_LOOP(i, n) {
        T pi = p[i], d = g[i], bi = 0;
        if (c.has_wd) d = FMA(pi, c.wd, d);
        if (c.has_mom) {
            bi = c.first ? d : FMA(d, c.omd, MUL(buf[i], c.mom));
            d = c.nesterov ? FMA(bi, c.mom, d) : bi;
        }
        pi = FMA(d, c.neg_lr, pi);
        if (check_only) {
            if (!(isfinite(pi) && isfinite(bi))) *bad = 1ull;
        } else {
            p[i] = pi;
            if (c.has_mom) buf[i] = bi;
        }
    }
}

template <typename T>
__global__ void k_muon_momentum(T *buf, const T *g, T *u, int64_t n, T mu, bool nesterov,
                                const double *gate) {
    double coef = 1.0;
    if (gate != NULL) {
        if (u == NULL && gate[GATE_SKIP] != 0.0) return; /* buf is state: written only on a step */
        coef = gate[GATE_COEF];
    }
    OPT_LOOP(i, n) {
        T gi = gate_grad(g, i, coef, n == 1);
        T b = ADD(MUL(buf[i], mu), gi);
        if (u == NULL)
            buf[i] = b;
        else
            u[i] = nesterov ? FMA(b, mu, gi) : b;
    }
}

template <typename T>
__global__ void k_apply_update(T *p, const T *u, int64_t n, T al, T sc, T de, bool has_scale,
                               bool has_decay, bool check_only, unsigned long long *bad,
                               double *gate) {
    if (gate != NULL && gate[GATE_SKIP] != 0.0) return;
    OPT_LOOP(i, n) {
        T pi = p[i], ui = u[i];
        if (has_scale) ui = MUL(ui, sc);
        if (has_decay) pi = MUL(pi, de);
        pi = FMA(ui, al, pi);
        if (check_only) {
            if (!isfinite(pi)) {
                if (gate != NULL) gate_refuse(gate);
                else *bad = 1ull;
            }
        } else {
            p[i] = pi;
        }
    }
}

/* ---------------------------------------------------------------- host */

#define PTR(T, t) ((T *)oj_cuda_ptr(t))

static oj_status check_args(oj_engine *eng, const char *op, const oj_tensor *const *ts, int n) {
    for (int i = 0; i < n; i++)
        if (oj_cuda_need_contig(eng, ts[i], op, "every tensor") != OJ_OK) return oj_last_status(eng);
    return OJ_OK;
}

/* After a launch: the kernel's status, then with check_only the flag
 * (OJ_ERR_NUMERIC, recorded nowhere, as the CPU). */
static oj_status finish(oj_engine *eng, const char *kernel, bool check_only) {
    if (oj_cuda_check(eng, kernel) != OJ_OK) return oj_last_status(eng);
    if (!check_only) return OJ_OK;
    unsigned long long f;
    if (oj_cuda_flags_read(eng, &f, 1, kernel) != OJ_OK) return oj_last_status(eng);
    return f ? OJ_ERR_NUMERIC : OJ_OK;
}

template <typename T>
static void adam_consts(adam_c<T> *c, const oj_adam_args *a) {
    c->b1 = (T)a->beta1;
    c->omb1 = (T)(1.0 - a->beta1);
    c->b2 = (T)a->beta2;
    c->omb2 = (T)(1.0 - a->beta2);
    c->eps = (T)a->eps;
    c->wd = (T)a->weight_decay;
    c->decay = (T)(1.0 - a->lr * a->weight_decay);
    c->neg_step = (T)(-(a->lr / a->bias_correction1));
    c->bc2_sqrt = (T)sqrt(a->bias_correction2);
    c->l2 = a->weight_decay != 0.0 && !a->decoupled;
    c->dec = a->weight_decay != 0.0 && a->decoupled;
}

oj_status oj_cuda_adam_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                            oj_tensor *exp_avg, oj_tensor *exp_avg_sq, const oj_adam_args *args,
                            bool check_only) {
    const char *op = "adam_step";
    if (param->dtype != OJ_F32 && param->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[4] = {param, grad, exp_avg, exp_avg_sq};
    if (check_args(eng, op, ts, 4) != OJ_OK) return oj_last_status(eng);
    int64_t n = oj_cuda_numel(param);
    if (n == 0) return OJ_OK;
    double *gate = oj_cuda_state_of(eng)->gate;
    bool read = check_only && gate == NULL;
    if (read && oj_cuda_flags_reset(eng, 1, 0, 0, op) != OJ_OK) return oj_last_status(eng);
    unsigned long long *bad = oj_cuda_state_of(eng)->flags;
    if (param->dtype == OJ_F32) {
        adam_c<float> c;
        adam_consts(&c, args);
        k_adam<float><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(float, param), PTR(const float, grad), PTR(float, exp_avg), PTR(float, exp_avg_sq),
            n, c, check_only, bad, gate);
    } else {
        adam_c<double> c;
        adam_consts(&c, args);
        k_adam<double><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(double, param), PTR(const double, grad), PTR(double, exp_avg),
            PTR(double, exp_avg_sq), n, c, check_only, bad, gate);
    }
    return finish(eng, op, read);
}

template <typename T>
static void sgd_consts(sgd_c<T> *c, const oj_sgd_args *a) {
    c->wd = (T)a->weight_decay;
    c->mom = (T)a->momentum;
    c->omd = (T)(1.0 - a->dampening);
    c->neg_lr = (T)(-a->lr);
    c->has_wd = a->weight_decay != 0.0;
    c->has_mom = a->momentum != 0.0;
    c->nesterov = a->nesterov;
    c->first = a->first;
}

oj_status oj_cuda_sgd_step(oj_engine *eng, oj_tensor *param, const oj_tensor *grad,
                           oj_tensor *momentum_buf, const oj_sgd_args *args, bool check_only) {
    const char *op = "sgd_step";
    if (param->dtype != OJ_F32 && param->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[3] = {param, grad, momentum_buf};
    if (check_args(eng, op, ts, 3) != OJ_OK) return oj_last_status(eng);
    if (args->momentum != 0.0 && momentum_buf == NULL)
        return oj_set_error(eng, OJ_ERR_INTERNAL, "sgd_step: momentum %g without a buffer",
                            args->momentum);
    int64_t n = oj_cuda_numel(param);
    if (n == 0) return OJ_OK;
    if (check_only && oj_cuda_flags_reset(eng, 1, 0, 0, op) != OJ_OK) return oj_last_status(eng);
    unsigned long long *bad = oj_cuda_state_of(eng)->flags;
    if (param->dtype == OJ_F32) {
        sgd_c<float> c;
        sgd_consts(&c, args);
        k_sgd<float><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(float, param), PTR(const float, grad),
            momentum_buf ? PTR(float, momentum_buf) : NULL, n, c, check_only, bad);
    } else {
        sgd_c<double> c;
        sgd_consts(&c, args);
        k_sgd<double><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(double, param), PTR(const double, grad),
            momentum_buf ? PTR(double, momentum_buf) : NULL, n, c, check_only, bad);
    }
    return finish(eng, op, check_only);
}

oj_status oj_cuda_muon_momentum(oj_engine *eng, oj_tensor *buf, const oj_tensor *grad,
                                oj_tensor *update, double momentum, bool nesterov) {
    const char *op = "muon_momentum";
    if (buf->dtype != OJ_F32 && buf->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[3] = {buf, grad, update};
    if (check_args(eng, op, ts, 3) != OJ_OK) return oj_last_status(eng);
    int64_t n = oj_cuda_numel(buf);
    if (n == 0) return OJ_OK;
    const double *gate = oj_cuda_state_of(eng)->gate;
    if (buf->dtype == OJ_F32)
        k_muon_momentum<float><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(float, buf), PTR(const float, grad), update ? PTR(float, update) : NULL, n,
            (float)momentum, nesterov, gate);
    else
        k_muon_momentum<double><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(double, buf), PTR(const double, grad), update ? PTR(double, update) : NULL, n,
            momentum, nesterov, gate);
    return finish(eng, op, false);
}

oj_status oj_cuda_apply_update(oj_engine *eng, oj_tensor *param, const oj_tensor *update,
                               double alpha, double scale, double decay, bool check_only) {
    const char *op = "apply_update";
    if (param->dtype != OJ_F32 && param->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[2] = {param, update};
    if (check_args(eng, op, ts, 2) != OJ_OK) return oj_last_status(eng);
    int64_t n = oj_cuda_numel(param);
    if (n == 0) return OJ_OK;
    double *gate = oj_cuda_state_of(eng)->gate;
    bool read = check_only && gate == NULL;
    if (read && oj_cuda_flags_reset(eng, 1, 0, 0, op) != OJ_OK) return oj_last_status(eng);
    unsigned long long *bad = oj_cuda_state_of(eng)->flags;
    bool has_scale = scale != 1.0, has_decay = decay != 1.0;
    if (param->dtype == OJ_F32)
        k_apply_update<float><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(float, param), PTR(const float, update), n, (float)alpha, (float)scale,
            (float)decay, has_scale, has_decay, check_only, bad, gate);
    else
        k_apply_update<double><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(double, param), PTR(const double, update), n, alpha, scale, decay, has_scale,
            has_decay, check_only, bad, gate);
    return finish(eng, op, read);
}

/* ---------------------------------------------------------------- Muon's normalisation
 * out[m] = u[m] * (T)(1 / (norms[m] + 1e-7)) for every matrix m of a stack,
 * rounded to out's dtype: in one pass the values of muon.c's chain
 * (add_scalar and reciprocal on the f64 norms, the cast to u's dtype, the
 * broadcast multiply, the cast to bf16), each step the same IEEE
 * operation, so the same bits. */
template <typename T, typename O>
__global__ void k_muon_normalize(const T *u, const double *norms, O *out, int64_t per,
                                 int64_t n) {
    OPT_LOOP(i, n) {
        double d = oj_unary_d(OJ_UN_AFFINE, norms[i / per], 1.0, 1e-7);
        T s = (T)oj_unary_d(OJ_UN_RECIPROCAL, d, 0.0, 0.0);
        T x = MUL(u[i], s);
        if constexpr (std::is_same<O, oj_cu_bf16>::value) out[i] = oj_cu_fromf<oj_cu_bf16>(x);
        else out[i] = (O)x;
    }
}

/* The same values with the factor computed once per matrix (blockIdx.y)
 * and 16-byte loads (4 f32 a thread; per % 4 == 0, aligned): the per
 * element 64-bit division and double reciprocal made the kernel above
 * ~1 TB/s. */
template <typename O>
__global__ void k_muon_normalize_v(const float *u, const double *norms, O *out, int64_t per) {
    const int64_t m = blockIdx.y;
    const float s = (float)oj_unary_d(OJ_UN_RECIPROCAL,
                                      oj_unary_d(OJ_UN_AFFINE, norms[m], 1.0, 1e-7), 0.0, 0.0);
    const float4 *um = (const float4 *)(u + m * per);
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < per / 4;
         q += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = um[q];
        float x[4] = {MUL(v.x, s), MUL(v.y, s), MUL(v.z, s), MUL(v.w, s)};
        if constexpr (std::is_same<O, oj_cu_bf16>::value)
            oj_cu_stv<oj_cu_bf16, 4>(out + m * per + 4 * q, x);
        else
            ((float4 *)(out + m * per))[q] = make_float4(x[0], x[1], x[2], x[3]);
    }
}

/* Muon's 16-byte kernels on (OJAS_CUDA_MUON_VEC, default 1; read per call)? */
static bool muon_vec_on(void) {
    return oj__env_flag("OJAS_CUDA_MUON_VEC", true);
}

oj_status oj_cuda_muon_normalize(oj_engine *eng, oj_tensor *out, const oj_tensor *u,
                                 const oj_tensor *norms); /* registered in cuda_backend.cu */
oj_status oj_cuda_muon_normalize(oj_engine *eng, oj_tensor *out, const oj_tensor *u,
                                 const oj_tensor *norms) {
    const char *op = "muon_normalize";
    bool ok = u->rank == 3 && out->rank == 3 && norms->dtype == OJ_F64 &&
              oj_cuda_numel(norms) == u->shape[0] && oj_cuda_numel(out) == oj_cuda_numel(u) &&
              ((u->dtype == OJ_F32 && (out->dtype == OJ_F32 || out->dtype == OJ_BF16)) ||
               (u->dtype == OJ_F64 && out->dtype == OJ_F64));
    if (!ok)
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: u [k, r, c] f32/f64, norms f64 [k], out like u (bf16 for f32 u) "
                            "expected",
                            op);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts[3] = {out, u, norms};
    if (check_args(eng, op, ts, 3) != OJ_OK) return oj_last_status(eng);
    int64_t n = oj_cuda_numel(u), per = u->shape[1] * u->shape[2];
    if (n == 0) return OJ_OK;
    const double *nm = PTR(const double, norms);
    if (u->dtype == OJ_F32 && per % 4 == 0 && u->shape[0] <= 65535 && muon_vec_on() &&
        oj_cu_aligned16(oj_cuda_ptr(u)) && (uintptr_t)oj_cuda_ptr(out) % 16 == 0) {
        const int64_t bx = (per / 4 + OJ_CUDA_THREADS - 1) / OJ_CUDA_THREADS;
        const dim3 grid((unsigned)(bx < 1024 ? bx : 1024), (unsigned)u->shape[0]);
        if (out->dtype == OJ_F32)
            k_muon_normalize_v<float><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
                PTR(const float, u), nm, PTR(float, out), per);
        else
            k_muon_normalize_v<oj_cu_bf16><<<grid, OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
                PTR(const float, u), nm, PTR(oj_cu_bf16, out), per);
        return oj_cuda_check(eng, "k_muon_normalize_v");
    }
    if (u->dtype == OJ_F64)
        k_muon_normalize<double, double><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(const double, u), nm, PTR(double, out), per, n);
    else if (out->dtype == OJ_F32)
        k_muon_normalize<float, float><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(const float, u), nm, PTR(float, out), per, n);
    else
        k_muon_normalize<float, oj_cu_bf16><<<oj_cuda_blocks(n), OJ_CUDA_THREADS, 0, OJ_STREAM>>>(
            PTR(const float, u), nm, PTR(oj_cu_bf16, out), per, n);
    return oj_cuda_check(eng, op);
}

/* ---------------------------------------------------------------- sum of squares
 * Fixed partition: SQ_BLOCKS blocks (fewer for short x) of SQ_THREADS
 * threads; thread t of block b folds elements b*SQ_THREADS + t + k*stride in
 * order, each block reduces in a fixed tree, and one thread sums the block
 * partials in order. The result depends on n only: deterministic. */
#define SQ_BLOCKS 256
#define SQ_THREADS 256

template <typename T>
__global__ void k_sum_squares(const T *x, int64_t n, double *partial) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        double v = (double)x[i];
        s = __dadd_rn(s, __dmul_rn(v, v));
    }
    s = oj_cu_block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void k_sum_partials(double *partial, int nb) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0.0;
    for (int b = 0; b < nb; b++) s += partial[b];
    partial[0] = s;
}

oj_status oj_cuda_sum_squares(oj_engine *eng, const oj_tensor *x, double *out) {
    const char *op = "sum_squares";
    if (x->dtype != OJ_F32 && x->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, x, op, "x") != OJ_OK) return oj_last_status(eng);
    int64_t n = oj_cuda_numel(x);
    *out = 0.0;
    if (n == 0) return OJ_OK;
    int64_t nb64 = (n + SQ_THREADS - 1) / SQ_THREADS;
    int nb = (int)(nb64 < SQ_BLOCKS ? nb64 : SQ_BLOCKS);
    oj_storage *hold = NULL;
    double *partial = (double *)oj_cuda_scratch(eng, (size_t)nb * sizeof(double), op, &hold);
    if (partial == NULL) return oj_last_status(eng);
    if (x->dtype == OJ_F32)
        k_sum_squares<float><<<nb, SQ_THREADS, 0, OJ_STREAM>>>(PTR(const float, x), n, partial);
    else
        k_sum_squares<double><<<nb, SQ_THREADS, 0, OJ_STREAM>>>(PTR(const double, x), n, partial);
    oj_status st = oj_cuda_check(eng, op);
    if (st == OJ_OK) {
        k_sum_partials<<<1, 32, 0, OJ_STREAM>>>(partial, nb);
        st = oj_cuda_check(eng, op);
    }
    if (st == OJ_OK) st = oj_cuda_d2h(eng, out, partial, sizeof(double), op);
    oj__storage_release(hold);
    return st;
}

/* ---------------------------------------------------------------- sum of squares of many tensors
 * Every tensor is cut into chunks of SQM_CHUNK elements; one block of
 * SQM_THREADS threads per (tensor, chunk) folds its chunk (thread t takes
 * elements t, t + SQM_THREADS, ... in order), reduces in the fixed block
 * tree and writes one double partial; then one thread per tensor sums that
 * tensor's partials in chunk order. The partition depends only on the
 * shapes: bit-identical across runs. The tensor table travels by value as
 * the kernels' argument (at most SQM_BATCH tensors per launch, under the
 * 4 KiB parameter limit), so nothing is uploaded; the n results are read
 * back with one copy. */
#define SQM_CHUNK 65536
#define SQM_THREADS 256
#define SQM_BATCH 128

struct sqm_batch {
    const void *ptr[SQM_BATCH];
    int64_t numel[SQM_BATCH];
    int64_t chunk0[SQM_BATCH + 1]; /* first chunk of tensor i in the batch; [count] = total */
    unsigned char dtype[SQM_BATCH];
    int count;
};
/* kernel parameters are limited to 4 KiB (the table and two pointers) */
static_assert(sizeof(sqm_batch) + 2 * sizeof(void *) <= 4096, "sqm_batch too large");

static __device__ __forceinline__ double sqm_load(const float *x, int64_t i) { return (double)x[i]; }
static __device__ __forceinline__ double sqm_load(const double *x, int64_t i) { return x[i]; }
static __device__ __forceinline__ double sqm_load(const oj_cu_bf16 *x, int64_t i) {
    return (double)oj_cu_tof(x[i]);
}
static __device__ __forceinline__ double sqm_load(const oj_cu_f16 *x, int64_t i) {
    return (double)oj_cu_tof(x[i]);
}

/* SQM_LOADS elements a thread loads before folding them (the same chain:
 * the fold waited on one load at a time, ~1.6 TB/s) */
#define SQM_LOADS 8
template <typename T>
static __device__ __forceinline__ double sqm_fold(const void *p, int64_t lo, int64_t hi) {
    const T *x = (const T *)p;
    double s = 0.0;
    int64_t i = lo + threadIdx.x;
    for (; i + (SQM_LOADS - 1) * SQM_THREADS < hi; i += SQM_LOADS * SQM_THREADS) {
        double v[SQM_LOADS];
#pragma unroll
        for (int k = 0; k < SQM_LOADS; k++) v[k] = sqm_load(x, i + k * SQM_THREADS);
#pragma unroll
        for (int k = 0; k < SQM_LOADS; k++) s = __dadd_rn(s, __dmul_rn(v[k], v[k]));
    }
    for (; i < hi; i += SQM_THREADS) {
        double v = sqm_load(x, i);
        s = __dadd_rn(s, __dmul_rn(v, v));
    }
    return s;
}

__global__ void __launch_bounds__(SQM_THREADS) k_sqm_chunks(const sqm_batch b, double *partial) {
    __shared__ double sh[32];
    int64_t c = blockIdx.x;
    /* the tensor holding chunk c: the last i with chunk0[i] <= c (empty
     * tensors own no chunk, so it is never one of them) */
    int lo = 0, hi = b.count;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (b.chunk0[mid] <= c) lo = mid;
        else hi = mid;
    }
    int64_t first = (c - b.chunk0[lo]) * SQM_CHUNK, n = b.numel[lo];
    int64_t last = first + SQM_CHUNK < n ? first + SQM_CHUNK : n;
    const void *p = b.ptr[lo];
    double s;
    switch (b.dtype[lo]) {
    case OJ_F32: s = sqm_fold<float>(p, first, last); break;
    case OJ_F64: s = sqm_fold<double>(p, first, last); break;
    case OJ_BF16: s = sqm_fold<oj_cu_bf16>(p, first, last); break;
    default: s = sqm_fold<oj_cu_f16>(p, first, last); break;
    }
    s = oj_cu_block_sum(s, sh);
    if (threadIdx.x == 0) partial[c] = s;
}

/* out[i] = the partials of tensor i summed in chunk order (0 when empty). */
__global__ void k_sqm_finish(const sqm_batch b, const double *partial, double *out) {
    int i = threadIdx.x;
    if (i >= b.count) return;
    double s = 0.0;
    for (int64_t c = b.chunk0[i]; c < b.chunk0[i + 1]; c++) s = __dadd_rn(s, partial[c]);
    out[i] = s;
}

/* Queue the sums of squares of ts[0..n) into res[0..n) (device doubles),
 * without reading them back; the chunk partials live in scratch held in
 * *hold until the caller releases it (after the launches: the stream
 * orders any reuse). */
static oj_status sqm_queue(oj_engine *eng, const char *op, int64_t n, const oj_tensor *const *ts,
                           double **res, oj_storage **hold) {
    *hold = NULL;
    for (int64_t i = 0; i < n; i++) {
        oj_dtype dt = ts[i]->dtype;
        if (dt != OJ_F32 && dt != OJ_F64 && dt != OJ_BF16 && dt != OJ_F16) return OJ_ERR_DTYPE;
    }
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    int64_t total = 0; /* chunks over all tensors */
    for (int64_t i = 0; i < n; i++) {
        if (oj_cuda_need_contig(eng, ts[i], op, "every tensor") != OJ_OK)
            return oj_last_status(eng);
        total += (oj_cuda_numel(ts[i]) + SQM_CHUNK - 1) / SQM_CHUNK;
    }
    /* scratch: the partials of every chunk, then the n results */
    double *partial =
        (double *)oj_cuda_scratch(eng, (size_t)(total + n) * sizeof(double), op, hold);
    if (partial == NULL) return oj_last_status(eng);
    *res = partial + total;
    oj_status st = OJ_OK;
    sqm_batch b;
    for (int64_t i0 = 0, p0 = 0; i0 < n && st == OJ_OK; i0 += SQM_BATCH) {
        memset(&b, 0, sizeof b);
        b.count = (int)(n - i0 < SQM_BATCH ? n - i0 : SQM_BATCH);
        for (int k = 0; k < b.count; k++) {
            const oj_tensor *t = ts[i0 + k];
            b.ptr[k] = oj_cuda_ptr(t);
            b.numel[k] = oj_cuda_numel(t);
            b.dtype[k] = (unsigned char)t->dtype;
            b.chunk0[k + 1] = b.chunk0[k] + (b.numel[k] + SQM_CHUNK - 1) / SQM_CHUNK;
        }
        int64_t chunks = b.chunk0[b.count];
        if (chunks > 0x7fffffff) {
            st = oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: %lld chunks in one launch", op,
                              (long long)chunks);
            break;
        }
        if (chunks > 0) {
            k_sqm_chunks<<<(unsigned)chunks, SQM_THREADS, 0, OJ_STREAM>>>(b, partial + p0);
            st = oj_cuda_check(eng, "sum_squares_multi_chunks");
        }
        if (st == OJ_OK) {
            k_sqm_finish<<<1, SQM_BATCH, 0, OJ_STREAM>>>(b, partial + p0, *res + i0);
            st = oj_cuda_check(eng, "sum_squares_multi_finish");
        }
        p0 += chunks;
    }
    return st;
}

oj_status oj_cuda_sum_squares_multi(oj_engine *eng, int64_t n, const oj_tensor *const *ts,
                                    double *out) {
    const char *op = "sum_squares_multi";
    if (n == 0) return OJ_OK;
    oj_storage *hold = NULL;
    double *res = NULL;
    oj_status st = sqm_queue(eng, op, n, ts, &res, &hold);
    if (st == OJ_OK) st = oj_cuda_d2h(eng, out, res, (size_t)n * sizeof(double), op);
    oj__storage_release(hold);
    return st;
}

/* ---------------------------------------------------------------- Muon's per-matrix norms
 * The k matrices of a stack are k tensors of one sum_squares_multi pass
 * (fixed chunks of every matrix in one launch: ~10 blocks per 768 x 768
 * matrix instead of the reduce entry's one block per output), then one
 * thread per matrix takes the square root. */
__global__ void k_sqrt_d(const double *ss, double *out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __dsqrt_rn(ss[i]);
}

/* One quintic Newton-Schulz step of a stack (backend.h muon_ns_step):
 * three strided-batched cuBLAS GEMMs, the scaled sums in their epilogues
 * (beta C) instead of five elementwise passes (two products and three
 * sums over the [k, m, m] and [k, m, n] stacks: for nanolab-124m's 84
 * matrices ~1.5 GB a step, ~0.4 ms at the H200's bandwidth, five steps an
 * update). cuBLAS reads C where it writes it, so B and xn start as copies
 * of A and x (device-to-device, ~0.5 GB). Row-major X [m, n] is the
 * column-major X^T [n, m] (leading dim n): A = X X^T is op(T) X^T times
 * op(N) X^T (m x m, k = n); A is read back column-major as A^T, so the
 * column-major B^T = c A^T A^T + b A^T is the row-major B; xn^T = X^T B^T
 * + a X^T is (n x m) = X^T (n x m) times B^T (m x m). */
oj_status oj_cuda_muon_ns_step(oj_engine *eng, oj_tensor *xn, const oj_tensor *x, double a,
                               double b, double c);
oj_status oj_cuda_muon_ns_step(oj_engine *eng, oj_tensor *xn, const oj_tensor *x, double a,
                               double b, double c) {
    const char *op = "muon_ns_step";
    bool ok = x->rank == 3 && xn->rank == 3 && x->dtype == xn->dtype &&
              (x->dtype == OJ_BF16 || x->dtype == OJ_F32);
    for (int d = 0; ok && d < 3; d++) ok = x->shape[d] == xn->shape[d];
    if (!ok || x->shape[1] > x->shape[2] || x->shape[2] > INT_MAX || x->shape[0] > 65535)
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: x and xn [k, m, n] of one dtype (bf16/f32), m <= n, n and k "
                            "within cuBLAS's ranges expected",
                            op);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    if (oj_cuda_need_contig(eng, x, op, "x") != OJ_OK ||
        oj_cuda_need_contig(eng, xn, op, "xn") != OJ_OK)
        return oj_last_status(eng);
    const int64_t k = x->shape[0], m = x->shape[1], n = x->shape[2];
    if (k * m * n == 0) return OJ_OK;
    cublasHandle_t h = oj_cuda_blas(eng, op);
    if (h == NULL) return oj_last_status(eng);
    const size_t es = oj_dtype_size(x->dtype), sq = (size_t)(k * m * m) * es;
    oj_storage *hold = NULL;
    char *A = (char *)oj_cuda_scratch(eng, 2 * sq, op, &hold), *B = A ? A + sq : NULL;
    if (A == NULL) return oj_last_status(eng);
    const cudaDataType_t ty = x->dtype == OJ_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const bool exact = eng->numerics == OJ_NUMERICS_EXACT;
    const cublasComputeType_t ct = x->dtype == OJ_F32 && !exact ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f, fa = (float)a, fb = (float)b, fc = (float)c;
    const char *X = oj_cuda_ptr(x);
    char *XN = oj_cuda_ptr(xn);
    const int M = (int)m, N = (int)n, K = (int)k;
    const long long sx = (long long)(m * n), sa = (long long)(m * m);
    cublasStatus_t cs = cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, M, N, &one, X,
                                                   ty, N, sx, X, ty, N, sx, &zero, A, ty, M, sa,
                                                   K, ct, CUBLAS_GEMM_DEFAULT);
    cudaError_t e = cudaSuccess;
    if (cs == CUBLAS_STATUS_SUCCESS) e = cudaMemcpyAsync(B, A, sq, cudaMemcpyDeviceToDevice, OJ_STREAM);
    if (cs == CUBLAS_STATUS_SUCCESS && e == cudaSuccess)
        cs = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &fc, A, ty, M, sa, A,
                                        ty, M, sa, &fb, B, ty, M, sa, K, ct, CUBLAS_GEMM_DEFAULT);
    if (cs == CUBLAS_STATUS_SUCCESS && e == cudaSuccess)
        e = cudaMemcpyAsync(XN, X, (size_t)(k * m * n) * es, cudaMemcpyDeviceToDevice, OJ_STREAM);
    if (cs == CUBLAS_STATUS_SUCCESS && e == cudaSuccess)
        cs = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, M, &one, X, ty, N, sx, B,
                                        ty, M, sa, &fa, XN, ty, N, sx, K, ct, CUBLAS_GEMM_DEFAULT);
    oj__storage_release(hold); /* stream-ordered: the pool reuses it after these */
    if (e != cudaSuccess) return oj_cuda_fail(eng, e, "muon_ns_step (copy)");
    if (cs != CUBLAS_STATUS_SUCCESS)
        return oj_set_error(eng, OJ_ERR_DEVICE, "%s: cublasGemmStridedBatchedEx failed: %s", op,
                            cublasGetStatusString(cs));
    return oj_cuda_check(eng, op);
}

oj_status oj_cuda_muon_norms(oj_engine *eng, oj_tensor *norms, const oj_tensor *u);
oj_status oj_cuda_muon_norms(oj_engine *eng, oj_tensor *norms, const oj_tensor *u) {
    const char *op = "muon_norms";
    if (u->rank != 3 || (u->dtype != OJ_F32 && u->dtype != OJ_F64) || norms->dtype != OJ_F64 ||
        oj_cuda_numel(norms) != u->shape[0])
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: u [k, r, c] f32/f64 and norms f64 with k elements expected", op);
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    const oj_tensor *ts0[2] = {norms, u};
    if (check_args(eng, op, ts0, 2) != OJ_OK) return oj_last_status(eng);
    const int64_t k = u->shape[0];
    if (k == 0) return OJ_OK;
    /* matrix m: u's struct narrowed to [1, r, c] at its offset (a view
     * that only this call reads, never released) */
    oj_tensor *sl = (oj_tensor *)malloc((size_t)k * sizeof *sl);
    const oj_tensor **ts = (const oj_tensor **)malloc((size_t)k * sizeof *ts);
    if (sl == NULL || ts == NULL) {
        free(sl);
        free(ts);
        return oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
    }
    const int64_t per = u->shape[1] * u->shape[2];
    for (int64_t m = 0; m < k; m++) {
        sl[m] = *u;
        sl[m].shape[0] = 1;
        sl[m].offset = u->offset + m * per * (int64_t)oj_dtype_size(u->dtype);
        ts[m] = &sl[m];
    }
    oj_storage *hold = NULL;
    double *ss = NULL;
    oj_status st = sqm_queue(eng, op, k, ts, &ss, &hold);
    if (st == OJ_OK) {
        k_sqrt_d<<<(unsigned)((k + 255) / 256), 256, 0, OJ_STREAM>>>(ss, PTR(double, norms), k);
        st = oj_cuda_check(eng, op);
    }
    oj__storage_release(hold);
    free(sl);
    free(ts);
    return st;
}

/* The gate from the n sums of squares ss (one thread): the global norm as
 * the host's clip computes it (each tensor's norm sqrt(ss[i]), their
 * squares summed in order, the square root), the clip factor max_norm /
 * (norm + 1e-6) when that is < 1 (else 1; 1 as well when max_norm is 0 or
 * the norm is not finite), and skip 1 when a tensor's norm is not finite. */
__global__ void k_gate_finish(const double *ss, int64_t n, double max_norm, double safe_norm,
                              double *gate) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double sum = 0.0, skip = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = __dsqrt_rn(ss[i]);
        if (!isfinite(v)) skip = 1.0;
        sum = __dadd_rn(sum, __dmul_rn(v, v));
        gate[GATE_EACH + i] = v;
    }
    double norm = __dsqrt_rn(sum), coef = 1.0;
    if (max_norm > 0.0 && isfinite(norm)) {
        double c = __ddiv_rn(max_norm, __dadd_rn(norm, 1e-6));
        if (c < 1.0) coef = c;
    }
    gate[GATE_SUMSQ] = sum;
    gate[GATE_COEF] = coef;
    gate[GATE_SKIP] = skip;
    gate[GATE_NORM] = norm;
    gate[GATE_EACH + n] = isfinite(norm) && norm <= safe_norm ? 1.0 : 0.0;
    for (int64_t i = 0; i < 2 * n; i++) gate[GATE_EACH + n + 1 + i] = 0.0; /* the bounds */
}

oj_status oj_cuda_step_gate_open(oj_engine *eng, int64_t n, const oj_tensor *const *grads,
                                 double max_norm, double safe_norm,
                                 oj_tensor *gate); /* registered in cuda_backend.cu */
oj_status oj_cuda_step_gate_open(oj_engine *eng, int64_t n, const oj_tensor *const *grads,
                                 double max_norm, double safe_norm, oj_tensor *gate) {
    const char *op = "step_gate_open";
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (gate->dtype != OJ_F64 || !oj_cuda_contig(gate) ||
        oj_cuda_numel(gate) < GATE_EACH + 1 + 3 * n)
        return oj_set_error(eng, OJ_ERR_INTERNAL,
                            "%s: the gate must be a contiguous f64 tensor of >= %lld elements", op,
                            (long long)(GATE_EACH + 1 + 3 * n));
    if (s->gate != NULL)
        return oj_set_error(eng, OJ_ERR_STATE, "%s: a step gate is already open", op);
    oj_storage *hold = NULL;
    double *res = NULL;
    oj_status st = n > 0 ? sqm_queue(eng, op, n, grads, &res, &hold) : oj_cuda_begin(eng, op);
    double *g = (double *)oj_cuda_ptr(gate);
    if (st == OJ_OK) {
        /* n == 0: no sums; the finish writes norm 0, factor 1, no skip */
        k_gate_finish<<<1, 32, 0, OJ_STREAM>>>(res, n, max_norm, safe_norm, g);
        st = oj_cuda_check(eng, "step_gate_finish");
    }
    oj__storage_release(hold);
    if (st == OJ_OK) {
        s->gate = g;
        s->gate_safe = g + GATE_EACH + n;
    }
    return st;
}

void oj_cuda_step_gate_close(oj_engine *eng); /* registered in cuda_backend.cu */
void oj_cuda_step_gate_close(oj_engine *eng) {
    oj_cuda_state *s = oj_cuda_state_of(eng);
    if (s != NULL) {
        s->gate = NULL;
        s->gate_safe = NULL;
    }
}

/* A low copy the multi-tensor updates may write: bf16, as many elements
 * as its f32 parameter (both contiguous: check_args). */
static bool low_fits(const oj_tensor *low, const oj_tensor *param) {
    return low->dtype == OJ_BF16 && param->dtype == OJ_F32 &&
           oj_cuda_numel(low) == oj_cuda_numel(param);
}

/* ---------------------------------------------------------------- multi-tensor updates
 * torch's foreach/fused form of a step: adam_step_multi and
 * mul_scalar_multi cut every tensor of the call into chunks of MT_CHUNK
 * elements; one block of MT_THREADS threads takes one (tensor, chunk) pair
 * (thread t: elements t, t + MT_THREADS, ... of the chunk, coalesced). The
 * tensor table (pointers, sizes, per-tensor scalars, and the first chunk
 * of each tensor, which a block searches for its own) travels by value as
 * the kernel's argument, under the 4 KiB parameter limit: nothing is
 * uploaded, a launch per table, and the launches can be captured into a
 * graph. Each element is computed by the per-tensor kernels' own code, so
 * the bits are theirs. The tensors of one call do not overlap (backend.h),
 * so the blocks are independent. */
#define MT_CHUNK 4096
#define MT_THREADS 256

/* The table entry that owns chunk c: the last k with chunk0[k] <= c (empty
 * tensors are left out of the tables, so each entry owns >= 1 chunk). */
template <typename B>
static __device__ __forceinline__ int mt_entry(const B &b, int c) {
    int lo = 0, hi = b.count;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (b.chunk0[mid] <= c) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Up to CAP Adam/AdamW tensors of one dtype: 40 f32 or 30 f64 (the
 * per-tensor constants are most of the table); f32 tensors may have a
 * bf16 copy written in the same pass (lo, NULL: none). */
template <typename T> struct adam_batch {
    enum { CAP = sizeof(T) == sizeof(float) ? 40 : 30, LO = sizeof(T) == sizeof(float) ? CAP : 1 };
    T *p[CAP];
    const T *g[CAP];
    T *m[CAP];
    T *v[CAP];
    oj_cu_bf16 *lo[LO];
    int64_t numel[CAP];
    adam_c<T> c[CAP];
    int chunk0[CAP + 1]; /* first chunk of entry k; [count] = the launch's blocks */
    int bound_at[CAP];   /* oj_adam_args.bound_at (0: none) */
    int count;
};
/* kernel parameters: the table, check_only, the status word, gate and safe pointers */
static_assert(sizeof(adam_batch<float>) + 4 * sizeof(void *) <= 4096, "adam_batch<float> too large");
static_assert(sizeof(adam_batch<double>) + 4 * sizeof(void *) <= 4096, "adam_batch<double> too large");

template <typename T, int U>
__global__ void __launch_bounds__(MT_THREADS)
    k_adam_multi(const adam_batch<T> b, bool check_only, unsigned long long *bad, double *gate,
                 const double *safe) {
    double coef = 1.0;
    if (gate != NULL) {
        if (gate[GATE_SKIP] != 0.0) return;
        if (check_only && safe != NULL && *safe != 0.0) return; /* proven finite (step.c) */
        coef = gate[GATE_COEF];
    }
    int c = (int)blockIdx.x, k = mt_entry(b, c);
    int64_t first = (int64_t)(c - b.chunk0[k]) * MT_CHUNK;
    int64_t last = first + MT_CHUNK < b.numel[k] ? first + MT_CHUNK : b.numel[k];
    T *p = b.p[k], *m = b.m[k], *v = b.v[k];
    const T *g = b.g[k];
    const adam_c<T> cc = b.c[k];
    constexpr bool F32 = sizeof(T) == sizeof(float);
    oj_cu_bf16 *lo = F32 && !check_only ? b.lo[F32 ? k : 0] : NULL;
    /* uniform over the block */
    unsigned *bnd = !check_only && gate != NULL && b.bound_at[k] ? (unsigned *)(gate + b.bound_at[k])
                                                                 : NULL;
    bool ok = true;
    adam_bounds bb;
    const bool one = b.numel[k] == 1;
    /* U elements a thread, their 4 U loads issued before any store (the
     * compiler cannot move a load above a store that may alias it) */
    for (int64_t i0 = first + threadIdx.x; i0 < last; i0 += U * MT_THREADS) {
        T pv[U], gv[U], mv[U], vv[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = i0 + u * MT_THREADS;
            if (i < last) pv[u] = p[i], gv[u] = g[i], mv[u] = m[i], vv[u] = v[i];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = i0 + u * MT_THREADS;
            if (i >= last) break;
            adam_new(pv[u], gv[u], mv[u], vv[u], cc, coef, one);
            if (check_only) {
                ok &= isfinite(pv[u]) && isfinite(mv[u]) && isfinite(vv[u]);
                continue;
            }
            p[i] = pv[u];
            m[i] = mv[u];
            v[i] = vv[u];
            if (lo) lo[i] = oj_cu_fromf<oj_cu_bf16>((float)pv[u]); /* copy's rounding */
            if (bnd) {
                const T nv[3] = {pv[u], mv[u], vv[u]};
                bb.add(nv);
            }
        }
    }
    if (bnd) adam_bounds_flush(bb, bnd);
    if (!ok) {
        if (gate != NULL) gate_refuse(gate);
        else *bad = 1ull;
    }
}

template <typename T>
static oj_status adam_multi_launch(oj_engine *eng, const adam_batch<T> &b, bool check_only,
                                   unsigned long long *bad) {
    /* OJAS_CUDA_ADAMW_U=1: one element at a time (comparisons) */
    if (oj__env_int("OJAS_CUDA_ADAMW_U", 4) == 1)
        k_adam_multi<T, 1><<<(unsigned)b.chunk0[b.count], MT_THREADS, 0, OJ_STREAM>>>(
            b, check_only, bad, oj_cuda_state_of(eng)->gate, oj_cuda_state_of(eng)->gate_safe);
    else
        k_adam_multi<T, 4><<<(unsigned)b.chunk0[b.count], MT_THREADS, 0, OJ_STREAM>>>(
            b, check_only, bad, oj_cuda_state_of(eng)->gate, oj_cuda_state_of(eng)->gate_safe);
    return oj_cuda_check(eng, "adam_step_multi");
}

/* Every non-empty tensor of dtype dt (element type T) of the call, in
 * tables of up to CAP tensors and INT_MAX chunks, one launch each. */
template <typename T>
static oj_status adam_multi_dtype(oj_engine *eng, oj_dtype dt, int64_t n,
                                  oj_tensor *const *params, const oj_tensor *const *grads,
                                  oj_tensor *const *exp_avgs, oj_tensor *const *exp_avg_sqs,
                                  const oj_adam_args *args, bool check_only,
                                  unsigned long long *bad) {
    adam_batch<T> b;
    memset(&b, 0, sizeof b);
    for (int64_t i = 0; i < n; i++) {
        /* a transposed copy is adam_tile's to write; its check pass is here */
        const bool tile = args[i].low && args[i].low_t;
        if (params[i]->dtype != dt || (tile && !check_only)) continue;
        int64_t ne = oj_cuda_numel(params[i]);
        if (ne == 0) continue;
        int64_t chunks = (ne + MT_CHUNK - 1) / MT_CHUNK;
        if (chunks > INT_MAX)
            return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE,
                                "adam_step_multi: a tensor of %lld elements", (long long)ne);
        if (b.count == adam_batch<T>::CAP || b.chunk0[b.count] + chunks > INT_MAX) {
            if (adam_multi_launch(eng, b, check_only, bad) != OJ_OK) return oj_last_status(eng);
            memset(&b, 0, sizeof b);
        }
        int k = b.count++;
        b.p[k] = PTR(T, params[i]);
        b.g[k] = PTR(const T, grads[i]);
        b.m[k] = PTR(T, exp_avgs[i]);
        b.v[k] = PTR(T, exp_avg_sqs[i]);
        if (sizeof(T) == sizeof(float))
            b.lo[sizeof(T) == sizeof(float) ? k : 0] =
                args[i].low && !tile ? PTR(oj_cu_bf16, args[i].low) : NULL;
        b.bound_at[k] = args[i].bound_at > 0 && args[i].bound_at < INT_MAX ? (int)args[i].bound_at : 0;
        b.numel[k] = ne;
        adam_consts(&b.c[k], &args[i]);
        b.chunk0[k + 1] = b.chunk0[k] + (int)chunks;
    }
    if (b.count > 0 && adam_multi_launch(eng, b, check_only, bad) != OJ_OK)
        return oj_last_status(eng);
    return OJ_OK;
}

/* An f32 [R, C] parameter whose kept bf16 copy is its transpose [C, R]
 * (oj_adam_args.low_t): one block of 32 x 8 threads per 32 x 32 tile runs
 * adam_elem on the tile's elements (rows coalesced, the multi kernel's
 * bits) and stages their bf16 roundings in shared memory, written out
 * along the copy's rows (coalesced too). BATCH: a thread's 4 elements'
 * 16 loads issued before any store (one element at a time, p, g, m, v
 * may alias as far as the compiler knows: 4 loads in flight a thread);
 * OJAS_CUDA_ADAMW_U=1 takes the element-at-a-time form, here and in
 * k_adam_multi (comparisons). */
template <bool BATCH>
__global__ void __launch_bounds__(256)
    k_adam_tile(float *p, const float *g, float *m, float *v, oj_cu_bf16 *lo, int64_t R,
                int64_t C, adam_c<float> c, bool check_only, unsigned long long *bad,
                double *gate, int64_t bound_at) {
    __shared__ oj_cu_bf16 tile[32][33];
    double coef = 1.0;
    if (gate != NULL) {
        if (gate[GATE_SKIP] != 0.0) return; /* uniform over the block */
        coef = gate[GATE_COEF];
    }
    unsigned *bnd = !check_only && gate != NULL && bound_at > 0 ? (unsigned *)(gate + bound_at)
                                                                : NULL;
    const int64_t tc = (C + 31) / 32, r0 = (int64_t)(blockIdx.x / tc) * 32,
                  c0 = (int64_t)(blockIdx.x % tc) * 32;
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    bool ok = true;
    adam_bounds bb;
    const int64_t cc = c0 + tx;
    if (BATCH) { /* the thread's 4 rows loaded before any store (as k_adam_multi) */
        float pv[4], gv[4], mv[4], vv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t r = r0 + ty + 8 * u, i = r * C + cc;
            if (r < R && cc < C) pv[u] = p[i], gv[u] = g[i], mv[u] = m[i], vv[u] = v[i];
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int k = ty + 8 * u;
            const int64_t r = r0 + k, i = r * C + cc;
            if (!(r < R && cc < C)) continue;
            adam_new(pv[u], gv[u], mv[u], vv[u], c, coef, R * C == 1);
            if (check_only) {
                ok &= isfinite(pv[u]) && isfinite(mv[u]) && isfinite(vv[u]);
                continue;
            }
            p[i] = pv[u];
            m[i] = mv[u];
            v[i] = vv[u];
            tile[k][tx] = oj_cu_fromf<oj_cu_bf16>(pv[u]);
            if (bnd) {
                const float nv[3] = {pv[u], mv[u], vv[u]};
                bb.add(nv);
            }
        }
    } else {
        for (int k = ty; k < 32; k += 8) {
            int64_t r = r0 + k;
            if (r < R && cc < C) {
                float nv[3];
                ok &= adam_elem(p, g, m, v, r * C + cc, c, check_only, coef, R * C == 1, nv);
                if (!check_only) {
                    tile[k][tx] = oj_cu_fromf<oj_cu_bf16>(nv[0]);
                    if (bnd) bb.add(nv);
                }
            }
        }
    }
    if (bnd) adam_bounds_flush(bb, bnd); /* its barrier before the tile's is harmless */
    if (!ok) {
        if (gate != NULL) gate_refuse(gate);
        else *bad = 1ull;
    }
    if (check_only) return; /* uniform */
    __syncthreads();
    for (int k = ty; k < 32; k += 8) {
        int64_t cc = c0 + k, r = r0 + tx;
        if (r < R && cc < C) lo[cc * R + r] = tile[tx][k];
    }
}

oj_status oj_cuda_adam_step_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                  const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                  oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                  bool check_only); /* registered in cuda_backend.cu */
oj_status oj_cuda_adam_step_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                  const oj_tensor *const *grads, oj_tensor *const *exp_avgs,
                                  oj_tensor *const *exp_avg_sqs, const oj_adam_args *args,
                                  bool check_only) {
    const char *op = "adam_step_multi";
    for (int64_t i = 0; i < n; i++)
        if (params[i]->dtype != OJ_F32 && params[i]->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (n == 0) return OJ_OK;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    for (int64_t i = 0; i < n; i++) {
        const oj_tensor *ts[5] = {params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], args[i].low};
        if (check_args(eng, op, ts, args[i].low ? 5 : 4) != OJ_OK) return oj_last_status(eng);
        if (args[i].low && (!low_fits(args[i].low, params[i]) || (args[i].low_t && params[i]->rank != 2)))
            return oj_set_error(eng, OJ_ERR_INTERNAL,
                                "%s: a low copy must be bf16 shaped like its f32 parameter (or its "
                                "transpose, for a 2-D one)", op);
    }
    bool read = check_only && oj_cuda_state_of(eng)->gate == NULL;
    if (read && oj_cuda_flags_reset(eng, 1, 0, 0, op) != OJ_OK) return oj_last_status(eng);
    unsigned long long *bad = oj_cuda_state_of(eng)->flags;
    oj_status st = adam_multi_dtype<float>(eng, OJ_F32, n, params, grads, exp_avgs, exp_avg_sqs,
                                           args, check_only, bad);
    if (st == OJ_OK)
        st = adam_multi_dtype<double>(eng, OJ_F64, n, params, grads, exp_avgs, exp_avg_sqs, args,
                                      check_only, bad);
    /* the transposed copies, one launch each; their check pass (nothing
     * written, no copy) ran with the others' above, in the tables */
    for (int64_t i = 0; i < n && st == OJ_OK && !check_only; i++) {
        if (!args[i].low || !args[i].low_t || oj_cuda_numel(params[i]) == 0) continue;
        int64_t R = params[i]->shape[0], C = params[i]->shape[1];
        int64_t tiles = ((R + 31) / 32) * ((C + 31) / 32);
        if (tiles > 0x7fffffffll)
            return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: a [%lld, %lld] tensor", op,
                                (long long)R, (long long)C);
        adam_c<float> cc;
        adam_consts(&cc, &args[i]);
        /* OJAS_CUDA_ADAMW_U=1: a row at a time (comparisons) */
        auto kern =
            oj__env_int("OJAS_CUDA_ADAMW_U", 4) == 1 ? k_adam_tile<false> : k_adam_tile<true>;
        kern<<<(unsigned)tiles, dim3(32, 8), 0, OJ_STREAM>>>(
            PTR(float, params[i]), PTR(const float, grads[i]), PTR(float, exp_avgs[i]),
            PTR(float, exp_avg_sqs[i]), PTR(oj_cu_bf16, args[i].low), R, C, cc, check_only, bad,
            oj_cuda_state_of(eng)->gate, args[i].bound_at);
        st = oj_cuda_check(eng, "adam_step_multi (tile)");
    }
    if (st != OJ_OK || !read) return st;
    unsigned long long f;
    if (oj_cuda_flags_read(eng, &f, 1, op) != OJ_OK) return oj_last_status(eng);
    return f ? OJ_ERR_NUMERIC : OJ_OK;
}

/* Muon's multi-tensor entries: muon_momentum_multi and apply_update_multi
 * over tables of tensors of one dtype, the element code of k_muon_momentum
 * and k_apply_update (so their bits), the step gate honoured as they
 * honour it. */
template <typename T> struct mom_batch {
    enum { CAP = 80 };
    T *buf[CAP];
    const T *g[CAP];
    T *u[CAP];
    int64_t numel[CAP];
    int chunk0[CAP + 1];
    int count;
    T mu;
    bool nesterov, to_buf; /* to_buf: every u is NULL (buf is written) */
    bool vec; /* every pointer 16-byte aligned: 4 elements a thread (f32) */
};
static_assert(sizeof(mom_batch<double>) + sizeof(void *) <= 4096, "mom_batch too large");

template <typename T>
__global__ void __launch_bounds__(MT_THREADS) k_muon_momentum_multi(const mom_batch<T> b,
                                                                    const double *gate) {
    double coef = 1.0;
    if (gate != NULL) {
        if (b.to_buf && gate[GATE_SKIP] != 0.0) return; /* buf is state: written only on a step */
        coef = gate[GATE_COEF];
    }
    int c = (int)blockIdx.x, k = mt_entry(b, c);
    int64_t n = b.numel[k], first = (int64_t)(c - b.chunk0[k]) * MT_CHUNK;
    int64_t last = first + MT_CHUNK < n ? first + MT_CHUNK : n;
    T *buf = b.buf[k], *u = b.u[k];
    const T *g = b.g[k];
    int64_t i = first + threadIdx.x;
    if constexpr (sizeof(T) == 4) if (b.vec) { /* 4 elements a thread: the same code per element */
        const int64_t lv = first + (last - first) / 4 * 4;
        for (int64_t q = first + 4 * threadIdx.x; q < lv; q += 4 * MT_THREADS) {
            const float4 bv = *(const float4 *)(buf + q);
            float4 gv = *(const float4 *)(g + q);
            float bi[4] = {bv.x, bv.y, bv.z, bv.w}, gi[4] = {gv.x, gv.y, gv.z, gv.w}, o[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const T ge = coef != 1.0 ? gate_scale((T)gi[e], coef, false) : (T)gi[e];
                const T bb = ADD(MUL((T)bi[e], b.mu), ge);
                o[e] = (float)(b.to_buf || !b.nesterov ? bb : FMA(bb, b.mu, ge));
            }
            *(float4 *)(b.to_buf ? (float *)buf + q : (float *)u + q) =
                make_float4(o[0], o[1], o[2], o[3]);
        }
        i = lv + threadIdx.x;
    }
    for (; i < last; i += MT_THREADS) {
        T gi = gate_grad(g, i, coef, n == 1);
        T bb = ADD(MUL(buf[i], b.mu), gi);
        if (b.to_buf)
            buf[i] = bb;
        else
            u[i] = b.nesterov ? FMA(bb, b.mu, gi) : bb;
    }
}

template <typename T> struct apl_batch {
    enum { CAP = 64, LO = sizeof(T) == sizeof(float) ? CAP : 1 };
    T *p[CAP];
    const T *u[CAP];
    oj_cu_bf16 *lo[LO]; /* f32: the bf16 copy written in the same pass, or NULL */
    int64_t numel[CAP];
    T al[CAP], sc[CAP], de[CAP];
    bool has_scale[CAP], has_decay[CAP];
    int chunk0[CAP + 1];
    int count;
    bool vec; /* p, u 16-byte and lo 8-byte aligned everywhere: 4 elements a thread (f32) */
};
static_assert(sizeof(apl_batch<double>) + 3 * sizeof(void *) <= 4096, "apl_batch too large");

template <typename T>
__global__ void __launch_bounds__(MT_THREADS)
    k_apply_update_multi(const apl_batch<T> b, bool check_only, unsigned long long *bad,
                         double *gate) {
    if (gate != NULL && gate[GATE_SKIP] != 0.0) return;
    int c = (int)blockIdx.x, k = mt_entry(b, c);
    int64_t n = b.numel[k], first = (int64_t)(c - b.chunk0[k]) * MT_CHUNK;
    int64_t last = first + MT_CHUNK < n ? first + MT_CHUNK : n;
    T *p = b.p[k];
    const T *u = b.u[k];
    oj_cu_bf16 *lo = sizeof(T) == sizeof(float) && !check_only ? b.lo[sizeof(T) == sizeof(float) ? k : 0] : NULL;
    T al = b.al[k], sc = b.sc[k], de = b.de[k];
    bool hs = b.has_scale[k], hd = b.has_decay[k], ok = true;
    int64_t i = first + threadIdx.x;
    if constexpr (sizeof(T) == 4) if (b.vec) { /* 4 elements a thread: the same code per element */
        const int64_t lv = first + (last - first) / 4 * 4;
        for (int64_t q = first + 4 * threadIdx.x; q < lv; q += 4 * MT_THREADS) {
            const float4 pv = *(const float4 *)(p + q), uv = *(const float4 *)(u + q);
            float pe[4] = {pv.x, pv.y, pv.z, pv.w}, ue[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                T pi = (T)pe[e], ui = (T)ue[e];
                if (hs) ui = MUL(ui, sc);
                if (hd) pi = MUL(pi, de);
                pi = FMA(ui, al, pi);
                if (check_only) ok &= (bool)isfinite(pi);
                pe[e] = (float)pi;
            }
            if (!check_only) *(float4 *)((float *)p + q) = make_float4(pe[0], pe[1], pe[2], pe[3]);
            if (lo) oj_cu_stv<oj_cu_bf16, 4>(lo + q, pe); /* copy's rounding */
        }
        i = lv + threadIdx.x;
    }
    for (; i < last; i += MT_THREADS) {
        T pi = p[i], ui = u[i];
        if (hs) ui = MUL(ui, sc);
        if (hd) pi = MUL(pi, de);
        pi = FMA(ui, al, pi);
        if (check_only) ok &= (bool)isfinite(pi);
        else p[i] = pi;
        if (lo) lo[i] = oj_cu_fromf<oj_cu_bf16>((float)pi); /* copy's rounding */
    }
    if (!ok) {
        if (gate != NULL) gate_refuse(gate);
        else *bad = 1ull;
    }
}

/* The chunks of a tensor of ne elements; OJ_ERR_OUT_OF_RANGE past INT_MAX. */
static oj_status mt_chunks(oj_engine *eng, const char *op, int64_t ne, int64_t *chunks) {
    *chunks = (ne + MT_CHUNK - 1) / MT_CHUNK;
    if (*chunks > INT_MAX)
        return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: a tensor of %lld elements", op,
                            (long long)ne);
    return OJ_OK;
}

template <typename T>
static oj_status mom_multi_dtype(oj_engine *eng, oj_dtype dt, int64_t n, oj_tensor *const *bufs,
                                 const oj_tensor *const *grads, oj_tensor *const *updates,
                                 double momentum, bool nesterov) {
    const char *op = "muon_momentum_multi";
    mom_batch<T> b;
    memset(&b, 0, sizeof b);
    auto reset = [&]() {
        memset(&b, 0, sizeof b);
        b.mu = (T)momentum;
        b.nesterov = nesterov;
        b.to_buf = updates == NULL;
        b.vec = muon_vec_on();
    };
    auto launch = [&]() {
        k_muon_momentum_multi<T><<<(unsigned)b.chunk0[b.count], MT_THREADS, 0, OJ_STREAM>>>(
            b, oj_cuda_state_of(eng)->gate);
        return oj_cuda_check(eng, op);
    };
    reset();
    for (int64_t i = 0; i < n; i++) {
        if (bufs[i]->dtype != dt) continue;
        int64_t ne = oj_cuda_numel(bufs[i]), chunks;
        if (ne == 0) continue;
        if (mt_chunks(eng, op, ne, &chunks) != OJ_OK) return oj_last_status(eng);
        if (b.count == mom_batch<T>::CAP || b.chunk0[b.count] + chunks > INT_MAX) {
            if (launch() != OJ_OK) return oj_last_status(eng);
            reset();
        }
        int k = b.count++;
        b.buf[k] = PTR(T, bufs[i]);
        b.g[k] = PTR(const T, grads[i]);
        b.u[k] = updates ? PTR(T, updates[i]) : NULL;
        b.vec = b.vec && oj_cu_aligned16(b.buf[k]) && oj_cu_aligned16(b.g[k]) &&
                (b.u[k] == NULL || oj_cu_aligned16(b.u[k]));
        b.numel[k] = ne;
        b.chunk0[k + 1] = b.chunk0[k] + (int)chunks;
    }
    if (b.count > 0 && launch() != OJ_OK) return oj_last_status(eng);
    return OJ_OK;
}

oj_status oj_cuda_muon_momentum_multi(oj_engine *eng, int64_t n, oj_tensor *const *bufs,
                                      const oj_tensor *const *grads, oj_tensor *const *updates,
                                      double momentum, bool nesterov); /* cuda_backend.cu */
oj_status oj_cuda_muon_momentum_multi(oj_engine *eng, int64_t n, oj_tensor *const *bufs,
                                      const oj_tensor *const *grads, oj_tensor *const *updates,
                                      double momentum, bool nesterov) {
    const char *op = "muon_momentum_multi";
    for (int64_t i = 0; i < n; i++)
        if (bufs[i]->dtype != OJ_F32 && bufs[i]->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (n == 0) return OJ_OK;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    for (int64_t i = 0; i < n; i++) {
        const oj_tensor *ts[3] = {bufs[i], grads[i], updates ? updates[i] : NULL};
        if (check_args(eng, op, ts, 3) != OJ_OK) return oj_last_status(eng);
    }
    oj_status st = mom_multi_dtype<float>(eng, OJ_F32, n, bufs, grads, updates, momentum, nesterov);
    if (st == OJ_OK)
        st = mom_multi_dtype<double>(eng, OJ_F64, n, bufs, grads, updates, momentum, nesterov);
    return st;
}

template <typename T>
static oj_status apl_multi_dtype(oj_engine *eng, oj_dtype dt, int64_t n, oj_tensor *const *params,
                                 const oj_tensor *const *updates, const double *alpha,
                                 const double *scale, const double *decay, bool check_only,
                                 oj_tensor *const *lows, unsigned long long *bad) {
    const char *op = "apply_update_multi";
    apl_batch<T> b;
    memset(&b, 0, sizeof b);
    b.vec = muon_vec_on();
    auto launch = [&]() {
        k_apply_update_multi<T><<<(unsigned)b.chunk0[b.count], MT_THREADS, 0, OJ_STREAM>>>(
            b, check_only, bad, oj_cuda_state_of(eng)->gate);
        return oj_cuda_check(eng, op);
    };
    for (int64_t i = 0; i < n; i++) {
        if (params[i]->dtype != dt) continue;
        int64_t ne = oj_cuda_numel(params[i]), chunks;
        if (ne == 0) continue;
        if (mt_chunks(eng, op, ne, &chunks) != OJ_OK) return oj_last_status(eng);
        if (b.count == apl_batch<T>::CAP || b.chunk0[b.count] + chunks > INT_MAX) {
            if (launch() != OJ_OK) return oj_last_status(eng);
            memset(&b, 0, sizeof b);
            b.vec = muon_vec_on();
        }
        int k = b.count++;
        b.p[k] = PTR(T, params[i]);
        b.u[k] = PTR(const T, updates[i]);
        if (sizeof(T) == sizeof(float))
            b.lo[sizeof(T) == sizeof(float) ? k : 0] = lows && lows[i] ? PTR(oj_cu_bf16, lows[i]) : NULL;
        b.vec = b.vec && oj_cu_aligned16(b.p[k]) && oj_cu_aligned16(b.u[k]) &&
                (sizeof(T) != sizeof(float) || (uintptr_t)b.lo[sizeof(T) == sizeof(float) ? k : 0] % 8 == 0);
        b.numel[k] = ne;
        /* as oj_cuda_apply_update rounds them */
        b.al[k] = (T)alpha[i];
        b.sc[k] = (T)scale[i];
        b.de[k] = (T)decay[i];
        b.has_scale[k] = scale[i] != 1.0;
        b.has_decay[k] = decay[i] != 1.0;
        b.chunk0[k + 1] = b.chunk0[k] + (int)chunks;
    }
    if (b.count > 0 && launch() != OJ_OK) return oj_last_status(eng);
    return OJ_OK;
}

oj_status oj_cuda_apply_update_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                     const oj_tensor *const *updates, const double *alpha,
                                     const double *scale, const double *decay, bool check_only,
                                     oj_tensor *const *lows); /* cuda_backend.cu */
oj_status oj_cuda_apply_update_multi(oj_engine *eng, int64_t n, oj_tensor *const *params,
                                     const oj_tensor *const *updates, const double *alpha,
                                     const double *scale, const double *decay, bool check_only,
                                     oj_tensor *const *lows) {
    const char *op = "apply_update_multi";
    for (int64_t i = 0; i < n; i++)
        if (params[i]->dtype != OJ_F32 && params[i]->dtype != OJ_F64) return OJ_ERR_DTYPE;
    if (n == 0) return OJ_OK;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    for (int64_t i = 0; i < n; i++) {
        const oj_tensor *ts[3] = {params[i], updates[i], lows ? lows[i] : NULL};
        if (check_args(eng, op, ts, 3) != OJ_OK) return oj_last_status(eng);
        if (lows && lows[i] && !low_fits(lows[i], params[i]))
            return oj_set_error(eng, OJ_ERR_INTERNAL, "%s: a low copy must be bf16 shaped like its f32 parameter", op);
    }
    bool read = check_only && oj_cuda_state_of(eng)->gate == NULL;
    if (read && oj_cuda_flags_reset(eng, 1, 0, 0, op) != OJ_OK) return oj_last_status(eng);
    unsigned long long *bad = oj_cuda_state_of(eng)->flags;
    oj_status st = apl_multi_dtype<float>(eng, OJ_F32, n, params, updates, alpha, scale, decay,
                                          check_only, lows, bad);
    if (st == OJ_OK)
        st = apl_multi_dtype<double>(eng, OJ_F64, n, params, updates, alpha, scale, decay,
                                     check_only, NULL, bad);
    if (st != OJ_OK || !read) return st;
    unsigned long long f;
    if (oj_cuda_flags_read(eng, &f, 1, op) != OJ_OK) return oj_last_status(eng);
    return f ? OJ_ERR_NUMERIC : OJ_OK;
}

/* mul_scalar_multi: up to SCL_BATCH tensors of any float dtype. The
 * per-tensor entry (oj_cuda_unary, OJ_UN_AFFINE with (alpha, 0)) computes
 * a tensor of more than one f32/bf16/f16 element on its fast path, in
 * float with (float)alpha (oj_unary_f), and everything else (f64, and a
 * single element, which its rows x cols plan does not take) on its
 * generic path, in double with alpha itself (oj_unary_d, oj_cu_ld/st); so
 * does this kernel, tensor by tensor. */
#define SCL_BATCH 160

struct scl_batch {
    void *ptr[SCL_BATCH];
    int64_t numel[SCL_BATCH];
    int chunk0[SCL_BATCH + 1];
    unsigned char dtype[SCL_BATCH];
    int count;
    float af, bf;  /* alpha and 0 for the float path */
    double ad, bd; /* and for the double path */
};
static_assert(sizeof(scl_batch) <= 4096, "scl_batch too large");

template <typename T>
static __device__ __forceinline__ void scl_float(void *ptr, int64_t lo, int64_t hi, float a,
                                                 float b) {
    T *x = (T *)ptr;
    for (int64_t i = lo + threadIdx.x; i < hi; i += MT_THREADS)
        x[i] = oj_cu_fromf<T>(oj_unary_f(OJ_UN_AFFINE, oj_cu_tof(x[i]), a, b));
}

__global__ void __launch_bounds__(MT_THREADS) k_mul_scalar_multi(const scl_batch b) {
    int c = (int)blockIdx.x, k = mt_entry(b, c);
    int64_t n = b.numel[k], first = (int64_t)(c - b.chunk0[k]) * MT_CHUNK;
    int64_t last = first + MT_CHUNK < n ? first + MT_CHUNK : n;
    int dt = b.dtype[k];
    if (dt == OJ_F64 || n == 1) { /* the generic path's double */
        int64_t es = dt == OJ_F64 ? 8 : dt == OJ_F32 ? 4 : 2;
        for (int64_t i = first + threadIdx.x; i < last; i += MT_THREADS) {
            char *p = (char *)b.ptr[k] + i * es;
            oj_cu_st(p, dt, oj_unary_d(OJ_UN_AFFINE, oj_cu_ld(p, dt), b.ad, b.bd));
        }
        return;
    }
    switch (dt) {
    case OJ_F32: scl_float<float>(b.ptr[k], first, last, b.af, b.bf); break;
    case OJ_BF16: scl_float<oj_cu_bf16>(b.ptr[k], first, last, b.af, b.bf); break;
    default: scl_float<oj_cu_f16>(b.ptr[k], first, last, b.af, b.bf); break;
    }
}

static oj_status scl_launch(oj_engine *eng, const scl_batch &b) {
    k_mul_scalar_multi<<<(unsigned)b.chunk0[b.count], MT_THREADS, 0, OJ_STREAM>>>(b);
    return oj_cuda_check(eng, "mul_scalar_multi");
}

static void scl_reset(scl_batch *b, double alpha) {
    memset(b, 0, sizeof *b);
    b->af = (float)alpha;
    b->bf = 0.0f;
    b->ad = alpha;
    b->bd = 0.0;
}

oj_status oj_cuda_mul_scalar_multi(oj_engine *eng, int64_t n, oj_tensor *const *ts,
                                   double alpha); /* registered in cuda_backend.cu */
oj_status oj_cuda_mul_scalar_multi(oj_engine *eng, int64_t n, oj_tensor *const *ts,
                                   double alpha) {
    const char *op = "mul_scalar_multi";
    for (int64_t i = 0; i < n; i++) {
        oj_dtype dt = ts[i]->dtype;
        if (dt != OJ_F32 && dt != OJ_F64 && dt != OJ_BF16 && dt != OJ_F16) return OJ_ERR_DTYPE;
    }
    if (n == 0) return OJ_OK;
    if (oj_cuda_begin(eng, op) != OJ_OK) return oj_last_status(eng);
    for (int64_t i = 0; i < n; i++)
        if (oj_cuda_need_contig(eng, ts[i], op, "every tensor") != OJ_OK)
            return oj_last_status(eng);
    scl_batch b;
    scl_reset(&b, alpha);
    for (int64_t i = 0; i < n; i++) {
        int64_t ne = oj_cuda_numel(ts[i]);
        if (ne == 0) continue;
        int64_t chunks = (ne + MT_CHUNK - 1) / MT_CHUNK;
        if (chunks > INT_MAX)
            return oj_set_error(eng, OJ_ERR_OUT_OF_RANGE, "%s: a tensor of %lld elements", op,
                                (long long)ne);
        if (b.count == SCL_BATCH || b.chunk0[b.count] + chunks > INT_MAX) {
            if (scl_launch(eng, b) != OJ_OK) return oj_last_status(eng);
            scl_reset(&b, alpha);
        }
        int k = b.count++;
        b.ptr[k] = oj_cuda_ptr(ts[i]);
        b.numel[k] = ne;
        b.dtype[k] = (unsigned char)ts[i]->dtype;
        b.chunk0[k + 1] = b.chunk0[k] + (int)chunks;
    }
    if (b.count > 0 && scl_launch(eng, b) != OJ_OK) return oj_last_status(eng);
    return OJ_OK;
}
