/* Shared validation and helpers of the nn ops (src/ops/nn_*.c). */
#ifndef OJAS_NN_COMMON_H
#define OJAS_NN_COMMON_H

#include "ops/ops_common.h"

/* t has a float dtype (f32, f64, bf16, f16); else OJ_ERR_DTYPE naming op,
 * arg and the dtype. */
bool oj__nn_check_float(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t);
/* t has the same dtype as ref (named ref_arg); else OJ_ERR_DTYPE. */
bool oj__nn_check_same_dtype(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t,
                             const char *ref_arg, const oj_tensor *ref);
/* t is an index tensor (i64 or i32); else OJ_ERR_DTYPE. */
bool oj__nn_check_index(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t);
/* t is [C] (rank 1, size C); else OJ_ERR_SHAPE naming x's shape. */
bool oj__nn_check_vec(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t,
                      int64_t C, const oj_tensor *x);
/* reduction is one of oj_reduction; else OJ_ERR_INVALID_ARGUMENT. */
bool oj__nn_check_reduction(oj_engine *eng, const char *op, int reduction);
/* dtype of saved statistics: f64 for f64, else f32. */
oj_dtype oj__nn_stat_dtype(oj_dtype dt);
/* A contiguous handle on t (shares storage when already contiguous), or
 * NULL with the error recorded. Never recorded by autograd. */
oj_tensor *oj__nn_contig(oj_tensor *t);
/* t viewed as [N, C] where C is its last dim (contiguous t). */
oj_tensor *oj__nn_rows(oj_tensor *t);
/* A second handle on out (same storage) for saving in out's own node
 * without a reference cycle. */
oj_tensor *oj__nn_alias(oj_tensor *out);
/* Save a temporary created by this op (a scoped handle with one
 * reference) in node nd and drop the op's reference: the node's becomes
 * the only one (the handle leaves the scope). */
void oj__nn_save_temp(oj_node *nd, oj_tensor *t);
/* The MEAN of a class-index loss without a read-back (so a training step
 * can be captured into a CUDA graph): the rows of targets t [N] (i64/i32)
 * whose target is not ignore_index, counted on the device with ops, as a
 * rank-0 f64 tensor. Call it after the loss kernel accepted t (a target
 * outside [0, V) that is not ignore_index was refused there). NULL with
 * the error recorded. */
oj_tensor *oj__nn_count_rows(oj_tensor *t, int64_t ignore_index);

/* nanolab's value residual v = v0 + s * (v1 - v0) (nn_value_mix.c): v1, v0
 * of one shape, s one element broadcast. v1, v0 bf16/f16 of one dtype with
 * an f32 s (autocast's case): the result is v1's dtype, the bits of the
 * chain oj_sub, oj_mul, oj_add (f32) cast to it, on every backend: one
 * fused op with its node where the backend has value_mix_forward/backward
 * and the layout fits (oj__value_mix_fits), otherwise the chain and
 * oj_cast, each its node. Other dtypes: the chain, its result's dtype
 * promoted. A new tensor owned by the current scope, or NULL with the
 * error recorded (the ops' errors: OJ_ERR_SHAPE, OJ_ERR_DTYPE,
 * OJ_ERR_DEVICE). */
oj_tensor *oj__value_mix(oj_tensor *v1, oj_tensor *v0, oj_tensor *s);

/* Causal attention (default scale) of q = rms_norm_rotary(q1), k =
 * rms_norm_rotary(k1) (no weight; eps, position offset pos, theta) over v:
 * nanolab's QK-norm, rotation and attention (nn_attention.c). q1 [B, H,
 * T, D], k1 [B, Hkv, T, D] (any strides: head views of a projection), v
 * [B, Hkv, T, Dv], one dtype (the autocast dtype under autocast). Where
 * the backend has the fused norm-rotary and attention entries: the values
 * of oj_rms_norm_rotary twice and oj_scaled_dot_product_attention, and one
 * node whose backward makes q and k again from q1 and k1 instead of
 * keeping them ([B, H, T, D] x 2 less between forward and backward), with
 * those ops' gradients bit for bit. Elsewhere the three ops. NULL with
 * the ops' errors recorded. */
oj_tensor *oj__attention_qk_norm_rotary(oj_tensor *q1, oj_tensor *k1, oj_tensor *v, double eps,
                                        int64_t pos, double theta);
/* The same over v = oj__value_mix(v1, v0, s) (nanolab's value residual:
 * v1, v0 [B, Hkv, T, Dv] of q1's dtype, s f32 with one element) with v0
 * and s given (both NULL: oj__attention_qk_norm_rotary). Where the
 * backend also has the fused value_mix entries and they take v1, v0, s
 * (oj__value_mix_fits): one node that makes v again in the backward
 * rather than keeping it ([B, Hkv, T, Dv] less between forward and
 * backward) and writes v1's gradient beside q1's and k1's when they are
 * head views of one projection; the values and gradients of
 * oj__value_mix then oj__attention_qk_norm_rotary bit for bit. Elsewhere
 * those two ops. NULL with the ops' errors recorded. */
oj_tensor *oj__attention_qk_norm_rotary_mix(oj_tensor *q1, oj_tensor *k1, oj_tensor *v1,
                                            oj_tensor *v0, oj_tensor *s, double eps, int64_t pos,
                                            double theta);
/* Whether the backend's fused value_mix entries take v1, v0, s
 * (nn_value_mix.c: bf16/f16 v1, v0 of one shape of rank 1..4 with the
 * last dim contiguous, s f32 with one element, one engine). */
bool oj__value_mix_fits(const oj_engine *eng, const oj_tensor *v1, const oj_tensor *v0,
                        const oj_tensor *s);
/* 1 / count (count from oj__nn_count_rows) computed in f64 and rounded
 * once to dt, a rank-0 tensor. For the loss (grad false) a count of 0
 * gives inf: the loss sum, 0 then, times inf is NaN, as torch's 0/0. For
 * the gradient (grad true) it gives 0: nothing was counted, so nothing
 * moves (as torch). */
oj_tensor *oj__nn_inv_count(oj_tensor *count, oj_dtype dt, bool grad);
/* Reduce elementwise losses l by reduction (MEAN, SUM: rank 0; NONE:
 * l retained). Recorded by autograd like oj_mean_all/oj_sum_all. */
oj_tensor *oj__nn_reduce(oj_tensor *l, oj_reduction reduction);

/* linear_cross_entropy's rows per chunk for N rows of V logits of es
 * bytes (nn_linear_cross_entropy.c; OJAS_LCE_CHUNK_ROWS and
 * OJAS_LCE_ROW_ALIGN read here): in [1, N], N >= 1. */
int64_t oj__lce_chunk_rows(int64_t N, int64_t V, size_t es);

#endif /* OJAS_NN_COMMON_H */
