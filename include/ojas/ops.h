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
/* Gaussian error linear unit, exact (erf) form: x Phi(x), Phi the normal
 * CDF. Hendrycks & Gimpel 2016. f32 on the CPU: Phi from erfc (no
 * cancellation in the left tail, unlike 1 + erf), within 8 ulp of
 * float64; gelu(-inf) is NaN (-inf * 0), as in PyTorch. */
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
/* x ** exponent; gradient exponent x^(exponent-1), 0 for exponent 0
 * (pow(0, 0) = 1 with gradient 0, as torch). */
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
/* a ** b, float output (integers promote to f32). Gradients as torch:
 * d/da = g b a^(b-1), 0 where b == 0; d/db = g a^b log(a), 0 where a == 0
 * and b >= 0. So pow(0, 0) = 1 with gradients (0, 0). */
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

/* In place: a += b (b broadcast to a), a *= v. Bumps a's version. While
 * grad mode is on and a or b requires grad (a float), the write is
 * recorded by autograd as torch does: a's history becomes the in-place
 * op's node over its old one (y = 2 x; y += 1; backward is legal). Every
 * op saves only what its backward reads, so a write invalidates only the
 * nodes that read a (theirs refuse backward, naming the op: exp(y) then
 * y += 1). OJ_ERR_STATE with grad mode on for a leaf that requires grad
 * (update parameters under oj_set_grad_enabled(false)) and for an a whose
 * storage another live tensor shares (a view of a, or a a view of it:
 * autograd would not follow the write into the other; torch does). With
 * grad mode off nothing is recorded (the history stays the old one). */
oj_status oj_add_(oj_tensor *a, oj_tensor *b);
oj_status oj_mul_scalar_(oj_tensor *a, double v);

/* ================================================================ reductions
 * dims: `ndims` dims to reduce (ndims 0 and dims NULL: all dims). Duplicate
 * dims are OJ_ERR_INVALID_ARGUMENT. keepdim keeps reduced dims as size 1.
 * Float results accumulate in double in index order (deterministic);
 * integer/bool x sums exactly in int64 to an i64 result, wrapping modulo
 * 2^64 as torch (CPU backend; CUDA still sums integers in double). */
oj_tensor *oj_sum(oj_tensor *x, int ndims, const int *dims, bool keepdim);
oj_tensor *oj_mean(oj_tensor *x, int ndims, const int *dims, bool keepdim);
/* Sum of all elements (rank-0). */
oj_tensor *oj_sum_all(oj_tensor *x);
oj_tensor *oj_mean_all(oj_tensor *x);
/* More reductions (src/ops/reduce.c). dims/ndims/keepdim as above; a
 * single `dim` may be negative; a rank-0 x accepts dim 0 or -1. Errors:
 * OJ_ERR_OUT_OF_RANGE for a bad dim, OJ_ERR_INVALID_ARGUMENT for a
 * repeated dim. Accumulation is in double, in index order, except for
 * integer x on the CPU backend: prod, max/min, amax/amin and argmax/argmin
 * compute exactly in int64 (prod wraps modulo 2^64, as torch); the CUDA
 * backend still rounds them through double. */

/* Product. Integer/bool x gives i64. The gradient is the product of the
 * other elements (exact when x has zeros: one zero gets the product of the
 * rest, two or more give 0), as torch. */
oj_tensor *oj_prod(oj_tensor *x, int ndims, const int *dims, bool keepdim);
/* Largest (smallest) value along dim, in x's dtype; NaN wins (propagates).
 * If indices is non-NULL, *indices receives a new i64 tensor of the same
 * shape with the position along dim of the first occurrence (owned by the
 * current scope; NULL on error). The gradient flows to that position only.
 * OJ_ERR_SHAPE when dim has size 0. */
oj_tensor *oj_max(oj_tensor *x, int dim, bool keepdim, oj_tensor **indices);
oj_tensor *oj_min(oj_tensor *x, int dim, bool keepdim, oj_tensor **indices);
/* Largest (smallest) value over dims, in x's dtype; the gradient is split
 * evenly among tied elements (torch.amax/amin). OJ_ERR_SHAPE when a
 * reduced dim has size 0. */
oj_tensor *oj_amax(oj_tensor *x, int ndims, const int *dims, bool keepdim);
oj_tensor *oj_amin(oj_tensor *x, int ndims, const int *dims, bool keepdim);
/* Position (i64) of the first largest (smallest) value along dim; a NaN
 * counts as largest (smallest). No grad. (Whole-tensor argmax: flatten
 * first.) OJ_ERR_SHAPE when dim has size 0. */
oj_tensor *oj_argmax(oj_tensor *x, int dim, bool keepdim);
oj_tensor *oj_argmin(oj_tensor *x, int dim, bool keepdim);
/* Variance sum((x - mean)^2) / max(0, N - correction) over dims (N the
 * reduced count; correction 1 is Bessel's, 0 the biased form; 0/0 is
 * NaN as torch); std is its square root (gradient 0 where std is 0).
 * Float x only (OJ_ERR_DTYPE). Welford's algorithm in double. */
oj_tensor *oj_var(oj_tensor *x, int ndims, const int *dims, double correction, bool keepdim);
oj_tensor *oj_std(oj_tensor *x, int ndims, const int *dims, double correction, bool keepdim);
/* log(sum(exp(x))) over dims, computed stably (running max); integer x
 * gives f32. Empty dims give -inf. Backward g exp(x - y), exactly 0 where
 * the upstream gradient g is 0; a nonzero g on a group of all -inf (y =
 * -inf) gives NaN there (x - y is -inf + inf; the limit depends on how the
 * values went to -inf), as torch. */
oj_tensor *oj_logsumexp(oj_tensor *x, int ndims, const int *dims, bool keepdim);
/* Vector p-norm over dims: p = 1 (sum |x|), 2 (sqrt of sum x^2) or
 * INFINITY (max |x|); other p are OJ_ERR_INVALID_ARGUMENT. Float x only.
 * Gradients as torch: 0 at a zero 2-norm; the inf-norm's split evenly
 * among ties. */
oj_tensor *oj_norm(oj_tensor *x, double p, int ndims, const int *dims, bool keepdim);
/* Inclusive prefix sum along dim, shaped like x; integer/bool x gives
 * i64. Backward: the reversed prefix sum of the gradient. */
oj_tensor *oj_cumsum(oj_tensor *x, int dim);
/* Is any (every) element over dims non-zero (NaN counts as non-zero)?
 * Bool output, no grad. Empty dims give false (any) and true (all). */
oj_tensor *oj_any(oj_tensor *x, int ndims, const int *dims, bool keepdim);
oj_tensor *oj_all(oj_tensor *x, int ndims, const int *dims, bool keepdim);
/* ================================================================ end of reductions */

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
/* linear(gelu(x), weight, bias) (approximate: the tanh form, gelu_tanh)
 * that keeps x, not gelu(x), for the backward and recomputes gelu(x) there:
 * one [..., in] activation less per MLP for one more elementwise pass
 * (activation recomputation: Chen et al. 2016; Korthikanti et al. 2022).
 * x [..., in], weight [out, in], bias [out] or NULL -> [..., out]. Values
 * and gradients equal the two ops'; under autocast every input is cast
 * first, so gelu runs in the autocast dtype. Errors: linear's. */
oj_tensor *oj_gelu_linear(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, bool approximate);
/* linear(silu(gate) * up, weight, bias), the SwiGLU MLP's down projection
 * (Shazeer 2020), keeping gate and up and recomputing silu(gate) and the
 * product in the backward (two [..., hidden] activations less). gate, up
 * [..., hidden] (one shape), weight [out, hidden], bias [out] or NULL ->
 * [..., out]. Values and gradients equal silu, mul and linear's; under
 * autocast every input is cast first. Errors: OJ_ERR_SHAPE (gate and up
 * differ), linear's. */
oj_tensor *oj_swiglu_linear(oj_tensor *gate, oj_tensor *up, oj_tensor *weight, oj_tensor *bias);
/* beta * input + alpha * (a @ b): a [N, K], b [K, M], input broadcastable
 * to [N, M] -> [N, M]. beta == 0 ignores input (NaN included), as
 * torch.addmm. OJ_ERR_SHAPE for non-2-D a/b or an input that does not
 * broadcast to [N, M]. */
oj_tensor *oj_addmm(oj_tensor *input, oj_tensor *a, oj_tensor *b, double beta, double alpha);
/* ================================================================ end of linear algebra */

/* ================================================================ nn
 * Neural-network ops with fused forward/backward kernels (src/ops/nn_*.c).
 * Float inputs: f32, f64, bf16 or f16, one dtype per call (OJ_ERR_DTYPE
 * otherwise); index inputs: i64 or i32. Inputs may be non-contiguous. Each
 * returns a new tensor owned by the current scope, or NULL with the error
 * recorded. Statistics saved for backward (mean, rstd, logsumexp) are f32
 * (f64 for f64 inputs). The CPU computes in double, except its f32 paths
 * (softmax, cross-entropy, attention and the norms over contiguous f32
 * rows), which sum in f32 on the SIMD level; a norm row whose float sums
 * overflow (finite values with a sum of squares past FLT_MAX, |x| from
 * about 1.8e19) is redone in double, so every finite row is normalised
 * right, with the same bits at any thread count. */

/* Reduction of a loss over its elements. MEAN over cross_entropy/nll_loss
 * divides by the number of rows whose target is not ignore_index (as
 * torch); if every row is ignored the mean is NaN (0/0), as torch. */
typedef enum oj_reduction {
    OJ_REDUCTION_MEAN = 0,
    OJ_REDUCTION_SUM = 1,
    OJ_REDUCTION_NONE = 2,
} oj_reduction;

/* Rows of a table: weight [V, C] float, indices [...] i64/i32 (any shape,
 * rank <= 7) -> [..., C] in weight's dtype. An index outside [0, V) is
 * OJ_ERR_OUT_OF_RANGE naming the index and its position. Gradient flows to
 * weight only, accumulated row by row in index order (deterministic). */
oj_tensor *oj_embedding(oj_tensor *weight, oj_tensor *indices);

/* Layer normalisation over the last dim: x [..., C], weight [C] or NULL,
 * bias [C] or NULL, eps >= 0 -> shaped like x. Biased variance, as torch.
 * Ba, Kiros & Hinton, "Layer Normalization", 2016. */
oj_tensor *oj_layer_norm(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, double eps);

/* Root-mean-square normalisation over the last dim: x [..., C], weight [C]
 * or NULL, eps >= 0 -> x / sqrt(mean(x^2) + eps) * weight, shaped like x.
 * Zhang & Sennrich, "Root Mean Square Layer Normalization", 2019. */
oj_tensor *oj_rms_norm(oj_tensor *x, oj_tensor *weight, double eps);

/* Residual add fused with a norm, as a transformer layer's `x = x + a;
 * h = norm(x)` (vLLM's fused_add_rms_norm): s = x + r, returned through
 * *sum (a new tensor owned by the current scope, as the result; sum must
 * not be NULL), and the function returns
 * oj_layer_norm(s, weight, bias, eps) / oj_rms_norm(s, weight, eps). x, r:
 * float, one shape [..., C] (no broadcasting); s is what oj_add(x, r) gives
 * (the promoted dtype: f32 + bf16 -> f32), value for value and bit for
 * bit, and the result what the norm of s gives (autocast included);
 * weight, bias [C] or NULL. One pass over the rows where the backend can
 * (CUDA: one kernel), else add then norm. Gradients flow into both outputs;
 * s and the result come from one node, so oj_retain_grad(s) keeps only the
 * gradient of s's own uses (not the norm's part), unlike add then norm.
 * NULL with *sum NULL on error: OJ_ERR_SHAPE (r's shape differs from x's,
 * weight/bias not [C], x a scalar), OJ_ERR_DTYPE (integer x or r;
 * weight/bias not of s's dtype), OJ_ERR_INVALID_ARGUMENT (sum NULL, eps).
 * Xiong et al., "On Layer Normalization in the Transformer Architecture",
 * 2020 (the pre-norm residual stream). */
oj_tensor *oj_add_layer_norm(oj_tensor *x, oj_tensor *r, oj_tensor *weight, oj_tensor *bias,
                             double eps, oj_tensor **sum);
oj_tensor *oj_add_rms_norm(oj_tensor *x, oj_tensor *r, oj_tensor *weight, double eps,
                           oj_tensor **sum);

/* Softmax / log-softmax of x over dim (numerically stable: the max is
 * subtracted; a row of all -inf gives NaN, as torch). Shaped like x. A
 * rank-0 x is treated as one element (dim 0 or -1). Backward: a row whose
 * upstream gradient is all zero gets exactly 0, also a row of all -inf
 * (torch gives NaN there); a row of all -inf with any nonzero upstream
 * gradient gets NaN in every element (its output is NaN). */
oj_tensor *oj_softmax(oj_tensor *x, int dim);
oj_tensor *oj_log_softmax(oj_tensor *x, int dim);

/* Cross-entropy with class indices, fused log-softmax + NLL (the softmax is
 * never stored): logits [..., V] float, targets [...] i64/i32 (logits'
 * shape without its last dim). Rows whose target is ignore_index count
 * neither in the loss nor in the mean. label_smoothing in [0, 1] mixes the
 * one-hot target with the uniform distribution as torch (Szegedy et al.
 * 2016). reduction NONE gives [...], else a rank-0 tensor; logits' dtype.
 * A target outside [0, V) (other than ignore_index) is OJ_ERR_OUT_OF_RANGE
 * naming the target and its row. */
oj_tensor *oj_cross_entropy(oj_tensor *logits, oj_tensor *targets, int64_t ignore_index,
                            double label_smoothing, oj_reduction reduction);
/* Negative log-likelihood: log_probs [..., V] float, targets [...]:
 * loss = -log_probs[..., target]; ignore_index, reduction and errors as
 * oj_cross_entropy. */
oj_tensor *oj_nll_loss(oj_tensor *log_probs, oj_tensor *targets, int64_t ignore_index,
                       oj_reduction reduction);
/* cross_entropy(linear(x, weight), targets) without the [N, V] logits:
 * x [..., C] float, weight [V, C] (same dtype), targets [...] i64/i32.
 * Rows are processed in chunks whose logits are freed at once; when a
 * gradient is wanted, dx and dweight are computed in the forward and kept
 * by the graph (Liger-Kernel / cut cross-entropy method: Hsu et al. 2024,
 * Wijmans et al. 2024), so peak memory is O(chunk V + V C + N C), not
 * O(N V). reduction MEAN or SUM (NONE: OJ_ERR_INVALID_ARGUMENT); returns a
 * rank-0 f32 tensor (f64 for f64 inputs). ignore_index, label_smoothing
 * and target errors as oj_cross_entropy. Under autocast the products run
 * in the autocast dtype and the softmax in f32. */
oj_tensor *oj_linear_cross_entropy(oj_tensor *x, oj_tensor *weight, oj_tensor *targets,
                                   int64_t ignore_index, double label_smoothing,
                                   oj_reduction reduction);

/* Scaled dot-product attention: q [B, H, T, D], k [B, Hkv, S, D],
 * v [B, Hkv, S, Dv] (one float dtype) -> [B, H, T, Dv] =
 * softmax(scale q k^T + mask) v. Grouped-query attention (Ainslie et al.
 * 2023) when Hkv divides H: head h uses kv head h / (H / Hkv).
 * mask: NULL, or broadcastable to [B, H, T, S], bool (true = keep) or
 * float (added to the scores); it receives no gradient.
 * is_causal: query i sees keys j <= i + (S - T), i.e. the causal mask is
 * aligned bottom-right, so T new queries at positions S-T..S-1 of a KV
 * cache see every key up to their own position. For T == S this is
 * torch's is_causal; for T != S torch 2.x aligns top-left (j <= i).
 * scale NAN means 1 / sqrt(D). A query row with every key masked gives 0
 * (not NaN) and no gradient. Tiled with an online softmax forward and
 * backward, never storing the [T, S] matrix (Milakov & Gimelshein 2018;
 * Dao et al., FlashAttention, 2022); saves out and a logsumexp [B, H, T].
 * The result is a [B, H, T, Dv] view of [B, T, H, Dv] storage (not
 * contiguous unless H == 1 or T == 1), so transpose(1, 2) then reshape to
 * [B, T, H Dv] is a view (oj_contiguous gives a contiguous copy).
 * Errors: OJ_ERR_SHAPE (ranks, B/D/S/Dv mismatches, H not a multiple of
 * Hkv, mask not broadcastable), OJ_ERR_DTYPE. */
oj_tensor *oj_scaled_dot_product_attention(oj_tensor *q, oj_tensor *k, oj_tensor *v,
                                           oj_tensor *mask, bool is_causal, double scale);

/* Rotary position embedding, half-split layout (GPT-NeoX/Llama): x
 * [B, H, T, D] (any rank >= 2: [..., T, D]), D even. With
 * a(t, i) = (position_offset + t) * theta^(-2i / D), i < D/2, x1 = x[..., :D/2],
 * x2 = x[..., D/2:]: out = cat(x1 cos a - x2 sin a, x2 cos a + x1 sin a).
 * Angles in double. Backward rotates by -a. theta > 0 (e.g. 10000).
 * Su et al., "RoFormer", 2021. */
oj_tensor *oj_rotary_embedding(oj_tensor *x, int64_t position_offset, double theta);
/* rotary_embedding with per-row positions: row t of x [..., T, D] is
 * rotated by positions[t] * theta^(-2i / D), positions [T] i64/i32 on x's
 * device (PyTorch's position_ids). The positions are read on the device,
 * so a position that changes from one replay of a CUDA graph to the next
 * needs no host value; the same position gives the bits of
 * oj_rotary_embedding. Backward rotates by -a. Errors as
 * oj_rotary_embedding, OJ_ERR_SHAPE / OJ_ERR_DTYPE for positions. */
oj_tensor *oj_rotary_embedding_at(oj_tensor *x, oj_tensor *positions, double theta);
/* RMS norm over D then the rotary embedding, fused (the QK-norm of
 * nanolab-style attention): the value and gradients of
 * oj_rotary_embedding(oj_rms_norm(x, weight, eps), position_offset, theta)
 * (the norm's output rounded to its dtype before the rotation, as the two
 * ops store it): bit for bit on the CPU, within float rounding on CUDA
 * (its own fused kernels; the same bits run to run). x [..., T, D] float with
 * D even and any strides (a head view [B, H, T, D] of a [B, T, H*D]
 * projection is read in place, no contiguous copy); weight [D] of x's
 * dtype or NULL; eps >= 0 -> a new contiguous tensor shaped like x.
 * Autocast: computes in f32 (as oj_rms_norm). Saves x (the view) and the
 * per-row rstd for the backward. Errors: those of the two ops. */
oj_tensor *oj_rms_norm_rotary(oj_tensor *x, oj_tensor *weight, double eps,
                              int64_t position_offset, double theta);

/* Dropout: when training and p > 0, each element is zeroed with
 * probability p and the rest scaled by 1 / (1 - p); the Philox4x32-10 mask
 * is keyed by the engine seed and a counter range reserved from the
 * engine's RNG, so it is the same for the same seed and RNG offset
 * whatever the thread count. p in [0, 1] (OJ_ERR_INVALID_ARGUMENT
 * otherwise). Otherwise returns a view of x (identity). Srivastava et al.
 * 2014. */
oj_tensor *oj_dropout(oj_tensor *x, double p, bool training);

/* Elementwise losses of a and b (broadcast together), reduced by reduction
 * (NONE keeps the broadcast shape; MEAN/SUM give rank 0). */
/* (a - b)^2 */
oj_tensor *oj_mse_loss(oj_tensor *a, oj_tensor *b, oj_reduction reduction);
/* |a - b| */
oj_tensor *oj_l1_loss(oj_tensor *a, oj_tensor *b, oj_reduction reduction);
/* Huber-like, torch's smooth_l1: 0.5 d^2 / beta where |d| < beta, else
 * |d| - 0.5 beta (d = a - b, beta >= 0; beta 0 is l1). Girshick 2015. */
oj_tensor *oj_smooth_l1_loss(oj_tensor *a, oj_tensor *b, double beta, oj_reduction reduction);
/* -(t log p + (1 - t) log(1 - p)), probs in [0, 1], logs clamped at -100
 * as torch (values outside [0, 1] give NaN). */
oj_tensor *oj_binary_cross_entropy(oj_tensor *probs, oj_tensor *targets, oj_reduction reduction);
/* softplus(x) - x t: the stable form of binary_cross_entropy(sigmoid(x), t),
 * with gradient sigmoid(x) - t. */
oj_tensor *oj_binary_cross_entropy_with_logits(oj_tensor *logits, oj_tensor *targets,
                                               oj_reduction reduction);
/* ================================================================ end of nn */

/* ================================================================ shape and indexing
 * Ops that build new tensors from pieces of others (src/ops/shape_ops.c,
 * src/ops/index_ops.c). Float inputs record autograd; the result is a new
 * contiguous tensor owned by the current scope unless said otherwise.
 * Index tensors are i64 (i32 accepted); an index value outside its dim
 * gives OJ_ERR_OUT_OF_RANGE naming the op, the value and its position.
 * Semantics follow the torch function of the same name. */

/* Concatenation of ts[0..n) along dim. Shapes must match except in dim
 * (OJ_ERR_SHAPE naming both shapes); 1-D empty tensors are skipped as in
 * torch; dtypes promote. n < 1 or ts NULL returns NULL (no engine to
 * record on). Any number of inputs. */
oj_tensor *oj_cat(int n, oj_tensor *const *ts, int dim);
/* ts[0..n) (all the same shape S) stacked along a new dim:
 * -rank(S)-1 <= dim <= rank(S). */
oj_tensor *oj_stack(int n, oj_tensor *const *ts, int dim);
/* Views of x cut along dim into pieces of split_size (the last may be
 * smaller; a size-0 dim gives one empty piece). Writes the pieces (each a
 * view owned by the current scope, with autograd) into outs and returns
 * their count, or -1 with an error: OJ_ERR_INVALID_ARGUMENT for
 * split_size <= 0 on a non-empty dim, OJ_ERR_OUT_OF_RANGE when the count
 * exceeds max_out. outs NULL: only returns the count. */
int oj_split(oj_tensor *x, int64_t split_size, int dim, int max_out, oj_tensor **outs);
/* Views of x along dim of sizes[0..n) (must sum to the dim's size,
 * OJ_ERR_SHAPE otherwise) into outs[0..n). Returns n or -1. */
int oj_split_sizes(oj_tensor *x, int n, const int64_t *sizes, int dim, oj_tensor **outs);
/* torch.chunk: split with split_size ceil(size / chunks), so it may give
 * fewer than `chunks` pieces (a size-0 dim gives `chunks` empty ones).
 * chunks > 0. Returns the count or -1, as oj_split. */
int oj_chunk(oj_tensor *x, int chunks, int dim, int max_out, oj_tensor **outs);
/* Copy of x with the order of elements reversed along dims[0..ndims)
 * (duplicates: OJ_ERR_INVALID_ARGUMENT). */
oj_tensor *oj_flip(oj_tensor *x, int ndims, const int *dims);
/* Constant padding as torch.nn.functional.pad: pads[0..npad) holds
 * (left, right) pairs starting from the last dim; npad even and
 * <= 2 * rank. Negative pads crop. New elements hold `value`. */
oj_tensor *oj_pad(oj_tensor *x, int npad, const int64_t *pads, double value);
/* out[p] = x[p with p[dim] = index[p]]: out shaped like index (same rank
 * as x; index.size(d) <= x.size(d) for d != dim, OJ_ERR_SHAPE otherwise).
 * Gradient scatter-adds into x. */
oj_tensor *oj_gather(oj_tensor *x, int dim, oj_tensor *index);
/* Copy of x with src[p] added at x[p with p[dim] = index[p]] for every
 * position p of index (index no larger than src anywhere, nor than x
 * outside dim; x, src one dtype). Deterministic order. Gradient: g to x,
 * gather(g, dim, index) to src. */
oj_tensor *oj_scatter_add(oj_tensor *x, int dim, oj_tensor *index, oj_tensor *src);
/* x with dim replaced by x's entries index[0..K) along it (index 1-D or
 * rank 0). Gradient index-adds into x. */
oj_tensor *oj_index_select(oj_tensor *x, int dim, oj_tensor *index);
/* Copy of x with alpha * src[.., k, ..] added at x[.., index[k], ..]
 * (index [K]; src shaped like x with dim of size K; one dtype). */
oj_tensor *oj_index_add(oj_tensor *x, int dim, oj_tensor *index, oj_tensor *src, double alpha);
/* In place: x[.., index[k], ..] = src[.., k, ..] (torch.Tensor.index_copy_;
 * index [K] or rank 0, i64/i32; src shaped like x with dim of size K, x's
 * dtype); with a repeated index the last k wins. The index values are read
 * on the device (a KV cache written at a position a CUDA graph keeps on
 * the device). Not recorded by autograd: while grad mode is on a x that
 * requires grad is OJ_ERR_STATE. Bumps x's version. An index outside
 * [0, x.size(dim)) is OJ_ERR_OUT_OF_RANGE and writes nothing (in a captured
 * graph it fails the replay instead). */
oj_status oj_index_copy_(oj_tensor *x, int dim, oj_tensor *index, oj_tensor *src);
/* x with `value` where mask (bool, broadcastable to x's shape) is true;
 * no gradient flows to the filled elements. */
oj_tensor *oj_masked_fill(oj_tensor *x, oj_tensor *mask, double value);
/* Lower (tril) / upper (triu) triangle of the last two dims of x (rank
 * >= 2): keeps x[.., i, j] where j - i <= diagonal (tril) or >= diagonal
 * (triu), zero elsewhere. */
oj_tensor *oj_tril(oj_tensor *x, int64_t diagonal);
oj_tensor *oj_triu(oj_tensor *x, int64_t diagonal);
/* i64 [..., num_classes]: 1 where the last index equals indices[...].
 * num_classes -1 infers max + 1. No grad. A class outside [0,
 * num_classes) is OJ_ERR_OUT_OF_RANGE. */
oj_tensor *oj_one_hot(oj_tensor *indices, int64_t num_classes);
/* x tiled repeats[d] times along each dim (n >= rank(x), n <= 8; x is
 * treated as having n - rank leading size-1 dims), as torch.Tensor.repeat.
 * Gradient sums over the copies. */
oj_tensor *oj_repeat(oj_tensor *x, int n, const int64_t *repeats);
/* ================================================================ end of shape and indexing */

/* ================================================================ convolution and pooling
 * NCHW (NCL for 1-D) float tensors of one dtype (OJ_ERR_DTYPE otherwise),
 * any strides. Window geometry as torch: out = (in + 2 pad - dilation
 * (k - 1) - 1) / stride + 1 (floor); a window larger than the padded input
 * is OJ_ERR_SHAPE; non-positive kernel/stride/dilation or negative padding
 * OJ_ERR_INVALID_ARGUMENT. NULL stride/padding/dilation arrays mean 1/0/1
 * (pooling: NULL stride means the kernel size). Pooling, adaptive pooling
 * and upsampling also take [C, H, W]. Each returns a new tensor owned by
 * the current scope with autograd to every float input.
 * (src/ops/conv.c; kernels im2col/col2im in src/backend/cpu/cpu_conv.c.) */

/* torch.nn.functional.unfold: x [N, C, H, W] -> [N, C*kh*kw, OH*OW], row
 * (c*kh + i)*kw + j holding the window tap (i, j) of channel c (zero
 * padding). Gradient: the sum over overlapping windows (col2im). */
oj_tensor *oj_unfold(oj_tensor *x, const int64_t kernel[2], const int64_t dilation[2],
                     const int64_t padding[2], const int64_t stride[2]);
/* 2-D cross-correlation: x [N, C, H, W], weight [O, C/groups, kh, kw],
 * bias [O] or NULL -> [N, O, OH, OW]; groups >= 1 divides C and O
 * (OJ_ERR_SHAPE otherwise). Computed as unfold (im2col) + matmul. */
oj_tensor *oj_conv2d(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, const int64_t stride[2],
                     const int64_t padding[2], const int64_t dilation[2], int groups);
/* 1-D: x [N, C, L], weight [O, C/groups, K], bias [O] or NULL -> [N, O, OL]
 * (conv2d over a height of 1). */
oj_tensor *oj_conv1d(oj_tensor *x, oj_tensor *weight, oj_tensor *bias, int64_t stride,
                     int64_t padding, int64_t dilation, int groups);
/* Max over each kernel window (padding counts as -inf; at most half the
 * kernel, OJ_ERR_INVALID_ARGUMENT otherwise). The gradient goes to the
 * first maximum of each window in row-major order, as torch. */
oj_tensor *oj_max_pool2d(oj_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2]);
/* Mean over each kernel window (zero padding, at most half the kernel);
 * count_include_pad false divides by the in-bounds count instead. */
oj_tensor *oj_avg_pool2d(oj_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2], bool count_include_pad);
/* Output [.., out_h, out_w]; cell (i, j) averages rows [floor(i H / out_h),
 * ceil((i + 1) H / out_h)) and the same for columns, as torch. */
oj_tensor *oj_adaptive_avg_pool2d(oj_tensor *x, int64_t out_h, int64_t out_w);
/* Nearest-neighbour resize to [.., out_h, out_w] with torch's source index
 * min(floor(o * (float)in / out), in - 1). Gradient sums into the sources. */
oj_tensor *oj_upsample_nearest2d(oj_tensor *x, int64_t out_h, int64_t out_w);
/* Batch normalisation of x [N, C, ...] per channel, (x - mean) /
 * sqrt(var + eps) * weight + bias (weight, bias [C] or NULL). training:
 * batch statistics with the biased variance (more than one value per
 * channel needed, OJ_ERR_SHAPE otherwise); when running_mean/running_var
 * ([C], x's dtype, both or neither) are given they are updated in place,
 * running = (1 - momentum) running + momentum stat, with the unbiased
 * variance, as torch. Evaluation: the running statistics (required).
 * Ioffe & Szegedy, "Batch Normalization", 2015. */
oj_tensor *oj_batch_norm(oj_tensor *x, oj_tensor *running_mean, oj_tensor *running_var,
                         oj_tensor *weight, oj_tensor *bias, bool training, double momentum,
                         double eps);
/* ================================================================ end of convolution and pooling */

#ifdef __cplusplus
}
#endif
#endif /* OJAS_OPS_H */
