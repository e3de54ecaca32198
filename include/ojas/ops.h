/* ojas ops: tensor operations. Views share storage and copy nothing.
 *
 * Conventions for every op below:
 * - Returns a new tensor owned by the current scope, or NULL with the error
 *   (naming the op, the shapes and what was expected) recorded on the
 *   engine. A NULL input returns NULL without a second error.
 * - Inputs of two or more tensors must live on the same device
 *   (OJ_ERR_DEVICE otherwise) and engine.
 * - Broadcasting and type promotion follow NumPy/PyTorch: shapes align
 *   right, a dim of 1 stretches; float beats integer beats bool, wider
 *   beats narrower, bf16 with f16 gives f32.
 * - Negative dims count from the end.
 * - When grad mode is on and an input requires grad, the op is recorded for
 *   oj_backward (autograd.h). Ops marked "no grad" never record. */
#ifndef OJAS_OPS_H
#define OJAS_OPS_H

#include "ojas/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ views
 * Views share t's storage and copy nothing (except oj_reshape/oj_flatten
 * when the strides do not allow a view, which copy as torch.reshape does).
 * Each returns a new handle owned by the current scope, or NULL with an
 * error naming the op and the shapes: OJ_ERR_OUT_OF_RANGE for a bad dim or
 * index, OJ_ERR_SHAPE when shapes do not fit. Negative dims count from the
 * end. Writes through a view are seen by every tensor sharing the storage.
 * (Implemented in src/ops/views.c.) */

/* t viewed with `rank` dims `shape` (one dim may be -1: inferred). A view
 * when t's strides allow one, else a contiguous copy. numel must match. */
oj_tensor *oj_reshape(oj_tensor *t, int rank, const int64_t *shape);
/* Like oj_reshape but never copies: OJ_ERR_SHAPE when strides forbid it. */
oj_tensor *oj_view(oj_tensor *t, int rank, const int64_t *shape);
/* Dims reordered: out dim i is t's dim dims[i]. ndims must equal t's rank
 * and dims be a permutation (OJ_ERR_SHAPE / OJ_ERR_OUT_OF_RANGE). */
oj_tensor *oj_permute(oj_tensor *t, int ndims, const int *dims);
/* Dims d0 and d1 swapped. */
oj_tensor *oj_transpose(oj_tensor *t, int d0, int d1);
/* Elements [start, start + length) of dim `dim` (start < 0 counts from the
 * end). OJ_ERR_OUT_OF_RANGE when the range leaves the dim. */
oj_tensor *oj_narrow(oj_tensor *t, int dim, int64_t start, int64_t length);
/* Python slice start:end:step of dim `dim` (step > 0; start/end negative
 * count from the end and are clamped to [0, size] like torch; end <= start
 * gives an empty dim). Use INT64_MAX as end for "to the end". */
oj_tensor *oj_slice(oj_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* t broadcast to `rank` dims `shape` (rank >= t's rank; dims align right;
 * a size-1 dim stretches with stride 0; -1 keeps t's size). */
oj_tensor *oj_expand(oj_tensor *t, int rank, const int64_t *shape);
/* Dim `dim` removed if its size is 1 (otherwise an unchanged view). */
oj_tensor *oj_squeeze(oj_tensor *t, int dim);
/* Every size-1 dim removed. */
oj_tensor *oj_squeeze_all(oj_tensor *t);
/* A size-1 dim inserted at `dim` (-rank-1 <= dim <= rank). */
oj_tensor *oj_unsqueeze(oj_tensor *t, int dim);
/* Dims start_dim..end_dim merged into one (a rank-0 t gives [1]); a view
 * when strides allow, else a copy (as torch.flatten). */
oj_tensor *oj_flatten(oj_tensor *t, int start_dim, int end_dim);
/* Index `index` of dim `dim` (negative counts from the end), dim dropped. */
oj_tensor *oj_select(oj_tensor *t, int dim, int64_t index);
/* ================================================================ end of views */

/* ================================================================ elementwise
 * Unary: out has x's shape and dtype (integer inputs of float-only
 * functions such as exp give the default float dtype f32). */
oj_tensor *oj_neg(oj_tensor *x);
oj_tensor *oj_abs(oj_tensor *x);
oj_tensor *oj_exp(oj_tensor *x);
oj_tensor *oj_log(oj_tensor *x);
oj_tensor *oj_log1p(oj_tensor *x);
oj_tensor *oj_sqrt(oj_tensor *x);
oj_tensor *oj_rsqrt(oj_tensor *x);
oj_tensor *oj_square(oj_tensor *x);
oj_tensor *oj_sign(oj_tensor *x);
oj_tensor *oj_reciprocal(oj_tensor *x);
oj_tensor *oj_sin(oj_tensor *x);
oj_tensor *oj_cos(oj_tensor *x);
oj_tensor *oj_relu(oj_tensor *x);
/* max(0, x) + negative_slope * min(0, x). */
oj_tensor *oj_leaky_relu(oj_tensor *x, double negative_slope);
/* Gaussian error linear unit, exact (erf) form. Hendrycks & Gimpel 2016. */
oj_tensor *oj_gelu(oj_tensor *x);
/* GELU with the tanh approximation (GPT-2's "gelu_new"). */
oj_tensor *oj_gelu_tanh(oj_tensor *x);
/* x * sigmoid(x). Elfwing et al. 2017 / Ramachandran et al. 2017. */
oj_tensor *oj_silu(oj_tensor *x);
oj_tensor *oj_sigmoid(oj_tensor *x);
oj_tensor *oj_tanh(oj_tensor *x);
/* log(1 + exp(beta x)) / beta, linear above threshold (torch defaults 1, 20). */
oj_tensor *oj_softplus(oj_tensor *x, double beta, double threshold);
/* x if x > 0 else alpha (exp(x) - 1). Clevert et al. 2015. */
oj_tensor *oj_elu(oj_tensor *x, double alpha);
/* x tanh(softplus(x)). Misra 2019. */
oj_tensor *oj_mish(oj_tensor *x);
/* x ** exponent. */
oj_tensor *oj_pow_scalar(oj_tensor *x, double exponent);
/* Clamp to [min, max]; pass NAN for a missing bound. Gradient 0 outside. */
oj_tensor *oj_clamp(oj_tensor *x, double min, double max);
/* x * scale + shift (one fused op). */
oj_tensor *oj_affine(oj_tensor *x, double scale, double shift);
oj_tensor *oj_add_scalar(oj_tensor *x, double v);
oj_tensor *oj_mul_scalar(oj_tensor *x, double v);
/* Logical not, isnan, isfinite: bool output, no grad. */
oj_tensor *oj_logical_not(oj_tensor *x);
oj_tensor *oj_isnan(oj_tensor *x);
oj_tensor *oj_isfinite(oj_tensor *x);

/* Binary with broadcasting and type promotion. */
oj_tensor *oj_add(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_sub(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_mul(oj_tensor *a, oj_tensor *b);
/* True division (integers promote to f32). */
oj_tensor *oj_div(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_pow(oj_tensor *a, oj_tensor *b);
/* Elementwise max/min; NaN propagates; gradient split evenly on ties as torch. */
oj_tensor *oj_maximum(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_minimum(oj_tensor *a, oj_tensor *b);
/* Comparisons and logical ops: bool output, no grad. */
oj_tensor *oj_eq(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_ne(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_lt(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_le(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_gt(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_ge(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_logical_and(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_logical_or(oj_tensor *a, oj_tensor *b);
oj_tensor *oj_logical_xor(oj_tensor *a, oj_tensor *b);
/* cond ? a : b, broadcast; cond bool (or any dtype, nonzero = true). */
oj_tensor *oj_where(oj_tensor *cond, oj_tensor *a, oj_tensor *b);
/* New tensor of x converted to dt (gradient flows between float dtypes). */
oj_tensor *oj_cast(oj_tensor *x, oj_dtype dt);

/* In place (bump the version; not recorded by autograd: OJ_ERR_STATE on a
 * leaf that requires grad while grad mode is on, as torch). a += b, etc. */
oj_status oj_add_(oj_tensor *a, oj_tensor *b);
oj_status oj_mul_scalar_(oj_tensor *a, double v);

/* ================================================================ reductions
 * dims: `ndims` dims to reduce (ndims 0 and dims NULL: all dims). Duplicate
 * dims are OJ_ERR_INVALID_ARGUMENT. keepdim keeps reduced dims as size 1.
 * Float results accumulate in double in index order (deterministic). */
oj_tensor *oj_sum(oj_tensor *x, int ndims, const int *dims, bool keepdim);
oj_tensor *oj_mean(oj_tensor *x, int ndims, const int *dims, bool keepdim);
/* Sum of all elements (rank-0). */
oj_tensor *oj_sum_all(oj_tensor *x);
oj_tensor *oj_mean_all(oj_tensor *x);
/* ================================================================ end of reductions (sum, mean) */

/* ================================================================ linear algebra
 * Float inputs of one dtype (f32, f64, bf16, f16; bf16/f16 accumulate in
 * f32); OJ_ERR_DTYPE otherwise. Operands may be non-contiguous (transposed
 * views are not copied) or broadcast. Under OJ_NUMERICS_FAST the CPU uses
 * OpenBLAS when present; under OJ_NUMERICS_EXACT each element sums over
 * the inner dim in index order, bit-identical across runs and threads.
 * (Implemented in src/ops/linalg.c, kernel src/backend/cpu/cpu_matmul.c.) */

/* torch.matmul. a [K] . b [K] -> [] (dot); a [N, K] @ b [K] -> [N];
 * a [K] @ b [K, M] -> [M]; a [..., N, K] @ b [..., K, M] -> [..., N, M]
 * with the leading (batch) dims broadcast and a 1-D operand treated as a
 * row (a) or column (b) whose dim is then removed. OJ_ERR_SHAPE for a
 * rank-0 operand, inner dims that differ ("matmul: shapes [2, 3] and
 * [4, 5] do not fit: inner dims 3 != 4") or batch dims that do not
 * broadcast. */
oj_tensor *oj_matmul(oj_tensor *a, oj_tensor *b);
/* Batched matrix product without broadcasting: a [B, N, K], b [B, K, M]
 * -> [B, N, M]. OJ_ERR_SHAPE when ranks are not 3 or B or K differ. */
oj_tensor *oj_bmm(oj_tensor *a, oj_tensor *b);
/* x W^T + b: x [..., in], weight [out, in] (PyTorch layout), bias [out] or
 * NULL -> [..., out]. The leading dims of x are treated as rows [N, in]
 * (one GEMM; copied only when their strides cannot be walked as rows); the
 * backward gives dW [out, in] = g^T x and db = the row sum of g without
 * materialising broadcast copies. OJ_ERR_SHAPE when in features or the
 * bias size differ. */
oj_tensor *oj_linear(oj_tensor *x, oj_tensor *weight, oj_tensor *bias);
/* beta * input + alpha * (a @ b): a [N, K], b [K, M], input broadcastable
 * to [N, M] -> [N, M]. beta == 0 ignores input (NaN included), as
 * torch.addmm. OJ_ERR_SHAPE for non-2-D a/b or an input that does not
 * broadcast to [N, M]. */
oj_tensor *oj_addmm(oj_tensor *input, oj_tensor *a, oj_tensor *b, double beta, double alpha);
/* ================================================================ end of linear algebra */

#ifdef __cplusplus
}
#endif
#endif /* OJAS_OPS_H */
