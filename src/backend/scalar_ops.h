/* Scalar definitions of the elementwise ops: the one source of their
 * semantics for every backend (the CPU kernels call them on host doubles,
 * the CUDA kernels on device doubles), so the backends differ only by the
 * math library's last-place rounding. Computed in double; kernels round to
 * the output dtype. Include after backend/backend.h (for the op enums). */
#ifndef OJAS_BACKEND_SCALAR_OPS_H
#define OJAS_BACKEND_SCALAR_OPS_H

#include <math.h>

#if defined(__CUDACC__)
#define OJ_SCALAR_FN __host__ __device__ static __forceinline__
#else
#define OJ_SCALAR_FN static inline
#endif
#define OJ_SCALAR_NAN nan("")

OJ_SCALAR_FN double oj_sigmoid_d(double x) {
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

OJ_SCALAR_FN double oj_softplus_d(double x, double beta, double threshold) {
    double bx = beta * x;
    return bx > threshold ? x : log1p(exp(bx)) / beta;
}

#define OJ_GELU_TANH_K 0.7978845608028654 /* sqrt(2/pi) */

OJ_SCALAR_FN double oj_unary_d(oj_unary_op op, double x, double a, double b) {
    switch (op) {
    case OJ_UN_NEG: return -x;
    case OJ_UN_ABS: return fabs(x);
    case OJ_UN_EXP: return exp(x);
    case OJ_UN_LOG: return log(x);
    case OJ_UN_LOG1P: return log1p(x);
    case OJ_UN_SQRT: return sqrt(x);
    case OJ_UN_RSQRT: return 1.0 / sqrt(x);
    case OJ_UN_SQUARE: return x * x;
    case OJ_UN_SIGN: return isnan(x) ? x : (double)((x > 0) - (x < 0));
    case OJ_UN_RELU: return x > 0 ? x : (isnan(x) ? x : 0.0);
    case OJ_UN_LEAKY_RELU: return x > 0 ? x : a * x;
    case OJ_UN_GELU_ERF: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case OJ_UN_GELU_TANH:
        return 0.5 * x * (1.0 + tanh(OJ_GELU_TANH_K * (x + 0.044715 * x * x * x)));
    case OJ_UN_SILU: return x * oj_sigmoid_d(x);
    case OJ_UN_SIGMOID: return oj_sigmoid_d(x);
    case OJ_UN_TANH: return tanh(x);
    case OJ_UN_SOFTPLUS: return oj_softplus_d(x, a, b);
    case OJ_UN_ELU: return x > 0 ? x : a * expm1(x);
    case OJ_UN_MISH: return x * tanh(oj_softplus_d(x, 1.0, 20.0));
    case OJ_UN_POW_SCALAR: return pow(x, a);
    case OJ_UN_RPOW_SCALAR: return pow(a, x);
    case OJ_UN_CLAMP: {
        double y = x;
        if (!isnan(a) && y < a) y = a;
        if (!isnan(b) && y > b) y = b;
        return y;
    }
    case OJ_UN_AFFINE: return a * x + b;
    case OJ_UN_RECIPROCAL: return 1.0 / x;
    case OJ_UN_SIN: return sin(x);
    case OJ_UN_COS: return cos(x);
    case OJ_UN_NOT: return x == 0.0 ? 1.0 : 0.0;
    case OJ_UN_ISNAN: return isnan(x) ? 1.0 : 0.0;
    case OJ_UN_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
    case OJ_UN_COUNT: break;
    }
    return OJ_SCALAR_NAN;
}

/* d f(x) / dx given x and y = f(x). */
OJ_SCALAR_FN double oj_unary_grad_d(oj_unary_op op, double x, double y, double a, double b) {
    switch (op) {
    case OJ_UN_NEG: return -1.0;
    case OJ_UN_ABS: return (double)((x > 0) - (x < 0));
    case OJ_UN_EXP: return y;
    case OJ_UN_LOG: return 1.0 / x;
    case OJ_UN_LOG1P: return 1.0 / (1.0 + x);
    case OJ_UN_SQRT: return 0.5 / y;
    case OJ_UN_RSQRT: return -0.5 * y * y * y;
    case OJ_UN_SQUARE: return 2.0 * x;
    case OJ_UN_SIGN: return 0.0;
    case OJ_UN_RELU: return x > 0 ? 1.0 : 0.0;
    case OJ_UN_LEAKY_RELU: return x > 0 ? 1.0 : a;
    case OJ_UN_GELU_ERF: {
        double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
        double pdf = exp(-0.5 * x * x) * 0.3989422804014327; /* 1/sqrt(2 pi) */
        return cdf + x * pdf;
    }
    case OJ_UN_GELU_TANH: {
        double u = OJ_GELU_TANH_K * (x + 0.044715 * x * x * x);
        double t = tanh(u);
        double du = OJ_GELU_TANH_K * (1.0 + 3.0 * 0.044715 * x * x);
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
    }
    case OJ_UN_SILU: {
        double s = oj_sigmoid_d(x);
        return s * (1.0 + x * (1.0 - s));
    }
    case OJ_UN_SIGMOID: return y * (1.0 - y);
    case OJ_UN_TANH: return 1.0 - y * y;
    case OJ_UN_SOFTPLUS: return a * x > b ? 1.0 : oj_sigmoid_d(a * x);
    case OJ_UN_ELU: return x > 0 ? 1.0 : y + a;
    case OJ_UN_MISH: {
        double sp = oj_softplus_d(x, 1.0, 20.0);
        double t = tanh(sp);
        return t + x * (1.0 - t * t) * oj_sigmoid_d(x);
    }
    case OJ_UN_POW_SCALAR: return a == 0.0 ? 0.0 : a * pow(x, a - 1.0);
    case OJ_UN_RPOW_SCALAR: return y * log(a);
    case OJ_UN_CLAMP:
        return ((!isnan(a) && x < a) || (!isnan(b) && x > b)) ? 0.0 : 1.0;
    case OJ_UN_AFFINE: return a;
    case OJ_UN_RECIPROCAL: return -y * y;
    case OJ_UN_SIN: return cos(x);
    case OJ_UN_COS: return -sin(x);
    default: break;
    }
    return 0.0;
}

OJ_SCALAR_FN double oj_binary_d(oj_binary_op op, double a, double b) {
    switch (op) {
    case OJ_BIN_ADD: return a + b;
    case OJ_BIN_SUB: return a - b;
    case OJ_BIN_MUL: return a * b;
    case OJ_BIN_DIV: return a / b;
    case OJ_BIN_POW: return pow(a, b);
    case OJ_BIN_MAXIMUM: return (isnan(a) || isnan(b)) ? OJ_SCALAR_NAN : (a > b ? a : b);
    case OJ_BIN_MINIMUM: return (isnan(a) || isnan(b)) ? OJ_SCALAR_NAN : (a < b ? a : b);
    case OJ_BIN_EQ: return a == b;
    case OJ_BIN_NE: return a != b;
    case OJ_BIN_LT: return a < b;
    case OJ_BIN_LE: return a <= b;
    case OJ_BIN_GT: return a > b;
    case OJ_BIN_GE: return a >= b;
    case OJ_BIN_AND: return (a != 0) && (b != 0);
    case OJ_BIN_OR: return (a != 0) || (b != 0);
    case OJ_BIN_XOR: return (a != 0) != (b != 0);
    case OJ_BIN_COUNT: break;
    }
    return OJ_SCALAR_NAN;
}

/* ---- float versions (f32 compute for f32/bf16/f16 tensors on the GPU).
 * The same formulas in float with the accurate libm functions (expf, tanhf,
 * erff, never the __expf intrinsics): a few ulp from the double versions,
 * deterministic run to run. */

OJ_SCALAR_FN float oj_sigmoid_f(float x) {
    return x >= 0 ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

OJ_SCALAR_FN float oj_softplus_f(float x, float beta, float threshold) {
    float bx = beta * x;
    return bx > threshold ? x : log1pf(expf(bx)) / beta;
}

#define OJ_GELU_TANH_KF 0.7978845608f /* sqrt(2/pi) */

/* gelu (tanh form) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi)
 * (x + 0.044715 x^3): the sigmoid form keeps the small results of large
 * negative x accurate (1 + tanh(u) would cancel), as the CPU's f32 kernel. */
OJ_SCALAR_FN float oj_gelu_tanh_s(float x) {
    return oj_sigmoid_f(2.0f * OJ_GELU_TANH_KF * (x + 0.044715f * x * x * x));
}

OJ_SCALAR_FN float oj_unary_f(oj_unary_op op, float x, float a, float b) {
    switch (op) {
    case OJ_UN_NEG: return -x;
    case OJ_UN_ABS: return fabsf(x);
    case OJ_UN_EXP: return expf(x);
    case OJ_UN_LOG: return logf(x);
    case OJ_UN_LOG1P: return log1pf(x);
    case OJ_UN_SQRT: return sqrtf(x);
    case OJ_UN_RSQRT: return 1.0f / sqrtf(x);
    case OJ_UN_SQUARE: return x * x;
    case OJ_UN_SIGN: return isnan(x) ? x : (float)((x > 0) - (x < 0));
    case OJ_UN_RELU: return x > 0 ? x : (isnan(x) ? x : 0.0f);
    case OJ_UN_LEAKY_RELU: return x > 0 ? x : a * x;
    case OJ_UN_GELU_ERF: return 0.5f * x * erfcf(x * -0.70710678f); /* 1 + erf(z) = erfc(-z) */
    case OJ_UN_GELU_TANH: return x * oj_gelu_tanh_s(x);
    case OJ_UN_SILU: return x * oj_sigmoid_f(x);
    case OJ_UN_SIGMOID: return oj_sigmoid_f(x);
    case OJ_UN_TANH: return tanhf(x);
    case OJ_UN_SOFTPLUS: return oj_softplus_f(x, a, b);
    case OJ_UN_ELU: return x > 0 ? x : a * expm1f(x);
    case OJ_UN_MISH: return x * tanhf(oj_softplus_f(x, 1.0f, 20.0f));
    case OJ_UN_POW_SCALAR: return powf(x, a);
    case OJ_UN_RPOW_SCALAR: return powf(a, x);
    case OJ_UN_CLAMP: {
        float y = x;
        if (!isnan(a) && y < a) y = a;
        if (!isnan(b) && y > b) y = b;
        return y;
    }
    case OJ_UN_AFFINE: return a * x + b;
    case OJ_UN_RECIPROCAL: return 1.0f / x;
    case OJ_UN_SIN: return sinf(x);
    case OJ_UN_COS: return cosf(x);
    case OJ_UN_NOT: return x == 0.0f ? 1.0f : 0.0f;
    case OJ_UN_ISNAN: return isnan(x) ? 1.0f : 0.0f;
    case OJ_UN_ISFINITE: return isfinite(x) ? 1.0f : 0.0f;
    case OJ_UN_COUNT: break;
    }
    return (float)OJ_SCALAR_NAN;
}

/* d f(x) / dx in float (as oj_unary_grad_d). */
OJ_SCALAR_FN float oj_unary_grad_f(oj_unary_op op, float x, float y, float a, float b) {
    switch (op) {
    case OJ_UN_NEG: return -1.0f;
    case OJ_UN_ABS: return (float)((x > 0) - (x < 0));
    case OJ_UN_EXP: return y;
    case OJ_UN_LOG: return 1.0f / x;
    case OJ_UN_LOG1P: return 1.0f / (1.0f + x);
    case OJ_UN_SQRT: return 0.5f / y;
    case OJ_UN_RSQRT: return -0.5f * y * y * y;
    case OJ_UN_SQUARE: return 2.0f * x;
    case OJ_UN_SIGN: return 0.0f;
    case OJ_UN_RELU: return x > 0 ? 1.0f : 0.0f;
    case OJ_UN_LEAKY_RELU: return x > 0 ? 1.0f : a;
    case OJ_UN_GELU_ERF: {
        float cdf = 0.5f * erfcf(x * -0.70710678f);
        float pdf = expf(-0.5f * x * x) * 0.39894228f; /* 1/sqrt(2 pi) */
        return cdf + x * pdf;
    }
    case OJ_UN_GELU_TANH: { /* s + 2 x s (1 - s) du, as the CPU's f32 kernel */
        float s = oj_gelu_tanh_s(x);
        float du = OJ_GELU_TANH_KF * (1.0f + 3.0f * 0.044715f * x * x);
        return s + 2.0f * x * s * (1.0f - s) * du;
    }
    case OJ_UN_SILU: {
        float s = oj_sigmoid_f(x);
        return s * (1.0f + x * (1.0f - s));
    }
    case OJ_UN_SIGMOID: return y * (1.0f - y);
    case OJ_UN_TANH: return 1.0f - y * y;
    case OJ_UN_SOFTPLUS: return a * x > b ? 1.0f : oj_sigmoid_f(a * x);
    case OJ_UN_ELU: return x > 0 ? 1.0f : y + a;
    case OJ_UN_MISH: {
        float sp = oj_softplus_f(x, 1.0f, 20.0f);
        float t = tanhf(sp);
        return t + x * (1.0f - t * t) * oj_sigmoid_f(x);
    }
    case OJ_UN_POW_SCALAR: return a == 0.0f ? 0.0f : a * powf(x, a - 1.0f);
    case OJ_UN_RPOW_SCALAR: return y * logf(a);
    case OJ_UN_CLAMP:
        return ((!isnan(a) && x < a) || (!isnan(b) && x > b)) ? 0.0f : 1.0f;
    case OJ_UN_AFFINE: return a;
    case OJ_UN_RECIPROCAL: return -y * y;
    case OJ_UN_SIN: return cosf(x);
    case OJ_UN_COS: return -sinf(x);
    default: break;
    }
    return 0.0f;
}

#endif /* OJAS_BACKEND_SCALAR_OPS_H */
