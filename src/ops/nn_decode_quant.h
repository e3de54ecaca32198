/* Fused ops of the batch-1 decode step with block-quantized weights
 * (nn_decode_quant.c), internal to the library: the quantized gpt2 fast
 * decode step (src/models/gpt_decode_quant.c) calls them. The bf16/f16
 * counterparts are in ops/nn_decode.h. Not recorded by autograd (they run
 * with grad mode off). */
#ifndef OJAS_OPS_NN_DECODE_QUANT_H
#define OJAS_OPS_NN_DECODE_QUANT_H

#include "ojas/core.h"
#include "ojas/quant.h"

/* Whether w (oj_qtensor [N, K]) suits the quantized decode entries on its
 * engine: a type of ojas/quant.h, rows of a multiple of 16 bytes (K a
 * multiple of 256 gives that for every type), K <= 4096, and the
 * backend has the decode_qlinear entry. No error recorded. */
bool oj__decode_qweight_ok(const oj_qtensor *w);

/* act(layer_norm(x, nw, nb, eps) @ W^T + b) for one row, W the matrix w
 * encodes: x [..., K] with one row (numel K), contiguous; nw, nb [K]
 * (both, or both NULL: no norm); b [N] or NULL; x, nw, nb, b, kv of one
 * dtype f32, bf16 or f16 (the output's). act OJ__DECODE_ACT_NONE or _GELU
 * (ops/nn_decode.h). kv, slot: as oj__decode_norm_linear (a gpt2 layer's
 * cache, keys and values of columns C .. 3 C written at the slot read on
 * the device). The norm's output, the product's and the GELU's are
 * rounded to the dtype as the unfused ops round. Returns a new [1, 1, N]
 * tensor in the current scope, or NULL with OJ_ERR_SHAPE / OJ_ERR_DTYPE /
 * OJ_ERR_INVALID_ARGUMENT / OJ_ERR_UNSUPPORTED (a weight
 * oj__decode_qweight_ok refuses, or no entry on the backend) recorded.
 * Values: x @ dequantize(W)^T (ojas/quant.h's formulas) up to the order
 * of the sums; on CUDA f32 sums (cuda_decode_quant.cu), on the CPU
 * double. */
oj_tensor *oj__decode_qnorm_linear(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                   const oj_qtensor *w, oj_tensor *b, int act, oj_tensor *kv,
                                   oj_tensor *slot);

/* oj__decode_qnorm_linear(x, nw, nb, eps, w, NULL, OJ__DECODE_ACT_NONE,
 * NULL, NULL) (the step's final norm and quantized head: nw, nb not
 * NULL) whose kernel also ends a greedy step, as oj__decode_norm_head's
 * does: tok = the argmax of the logits (as oj__decode_argmax_advance_:
 * lowest id on ties, a NaN first), pos += 1, and hist[pos] = tok for the
 * advanced pos inside hist. tok, pos i64 with one element, distinct
 * storages; hist contiguous i64 or NULL. Returns the logits [1, 1, N] in
 * the current scope, or NULL with the errors of oj__decode_qnorm_linear,
 * OJ_ERR_INVALID_ARGUMENT (tok, pos or the norm NULL) or
 * OJ_ERR_UNSUPPORTED (the backend lacks decode_qnorm_head:
 * oj__decode_qhead_supported) recorded. */
oj_tensor *oj__decode_qnorm_head(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                 const oj_qtensor *w, oj_tensor *tok, oj_tensor *pos,
                                 oj_tensor *hist);

/* Whether eng's backend has the decode_qnorm_head entry (optional). */
bool oj__decode_qhead_supported(const oj_engine *eng);

/* x = x + (y @ W^T + b) in place for one row (x numel N, y numel K, both
 * contiguous, distinct storages; b [N] or NULL; one dtype f32/bf16/f16),
 * the product rounded to the dtype before the add. OJ_OK or the status
 * recorded (as above). */
oj_status oj__decode_qlinear_residual_(oj_tensor *x, oj_tensor *y, const oj_qtensor *w,
                                       oj_tensor *b);

#endif /* OJAS_OPS_NN_DECODE_QUANT_H */
