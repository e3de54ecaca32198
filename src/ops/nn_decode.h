/* Fused ops of the batch-1 decode step (nn_decode.c), internal to the
 * library: the gpt2 fast decode step (src/models/gpt_decode_fast.c) calls
 * them. Not recorded by autograd (they run with grad mode off). */
#ifndef OJAS_OPS_NN_DECODE_H
#define OJAS_OPS_NN_DECODE_H

#include "ojas/core.h"

enum { OJ__DECODE_ACT_NONE = 0, OJ__DECODE_ACT_GELU = 1 };

/* act(linear(layer_norm(x, nw, nb, eps), w^T, b)) for one row, the
 * backend's decode_norm_linear entry (backend.h): x [..., K] with one row
 * (numel K), contiguous; nw, nb [K]; w [K, N] (HF Conv1D layout: n-stride
 * 1, row stride a multiple of 8, 16-byte aligned), N a multiple of 8,
 * K <= 8192; b [N] or NULL; all of one dtype, bf16 or f16. act
 * OJ__DECODE_ACT_NONE or _GELU (tanh form). With kv (a layer's KV cache
 * [2, 1, H, S, D], x's dtype, H D = N / 3) and slot (i64 [1]) the keys and
 * values of the output (columns C .. 3 C) are also written to the cache at
 * the slot read on the device. Returns a new tensor [1, 1, N] in the
 * current scope, or NULL with OJ_ERR_SHAPE / OJ_ERR_DTYPE /
 * OJ_ERR_UNSUPPORTED (no such entry on the backend) recorded. Values: the
 * unfused ops' up to the order of the sums (the norm's statistics and the
 * product). */
oj_tensor *oj__decode_norm_linear(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                  oj_tensor *w, oj_tensor *b, int act, oj_tensor *kv,
                                  oj_tensor *slot);

/* x = x + linear(y, w^T, b) in place for one row (x numel N, contiguous;
 * y numel K, contiguous; w [K, N] and b as above; one dtype bf16/f16): the
 * backend's decode_linear_residual entry, the rounding of add after
 * linear. Returns OJ_OK or the status recorded (as above). */
oj_status oj__decode_linear_residual_(oj_tensor *x, oj_tensor *y, oj_tensor *w, oj_tensor *b);

/* Whether w [K, N] (and N, K) suit the decode entries: n-stride 1, row
 * stride a multiple of 8, 16-byte aligned offset, N % 8 == 0, 0 < K <=
 * 8192. No error recorded. */
bool oj__decode_weight_ok(const oj_tensor *w);

/* tok = argmax(logits) (the lowest index on ties; a NaN above every
 * number, the first one), pos += 1, in one kernel: the end of a greedy
 * decode step. tok, pos: i64 with one element each; logits contiguous
 * f32/bf16/f16 with V >= 1 elements. OJ_OK or the status recorded
 * (OJ_ERR_DTYPE, OJ_ERR_SHAPE, OJ_ERR_UNSUPPORTED). */
oj_status oj__decode_argmax_advance_(oj_tensor *tok, oj_tensor *logits, oj_tensor *pos);

/* x = wte[tok] + wpe[pos] (a new [1, 1, C] tensor in the current scope,
 * the bits of embedding + add) and mask[j] = j <= pos (bool, contiguous,
 * written in place), in one kernel: the start of a gpt2 decode step. wte
 * [V, C], wpe [P, C] contiguous, one dtype f32/bf16/f16; tok, pos i64 with
 * one element. The caller keeps tok and pos in range (x is NaN where they
 * are not: nothing is read out of bounds). NULL with OJ_ERR_SHAPE /
 * OJ_ERR_DTYPE / OJ_ERR_UNSUPPORTED recorded. */
oj_tensor *oj__decode_embed_mask(oj_tensor *wte, oj_tensor *wpe, oj_tensor *tok, oj_tensor *pos,
                                 oj_tensor *mask);

/* Whether eng's backend has every decode entry. */
bool oj__decode_supported(const oj_engine *eng);

#endif /* OJAS_OPS_NN_DECODE_H */
