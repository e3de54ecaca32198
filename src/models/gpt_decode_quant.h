/* The gpt2 fast decode step with block-quantized weights
 * (gpt_decode_quant.c), internal: gpt_decode_fast.c hands a quantized
 * model (oj_gpt_quantize, or a GGUF file of quantized matrices) to it. */
#ifndef OJAS_MODELS_GPT_DECODE_QUANT_H
#define OJAS_MODELS_GPT_DECODE_QUANT_H

#include "models/gpt_internal.h"

/* Whether the quantized fast step serves m (quantized: m->quantized) with
 * cache c. The caller (oj__gpt_fast_decode_ok) checked the device, the
 * numerics (FAST), the family (gpt2) and OJAS_DECODE_FAST. Also needed:
 * the backend's decode entries and decode_qlinear; every block's four
 * quantized copies and the head's (m->qhead) with rows of a multiple of
 * 16 bytes and K <= 4096 (oj__decode_qweight_ok: gpt2 124M's 768 and 3072
 * are); wte, wpe, the norms, the biases and the cache of one dtype f32,
 * bf16 or f16, contiguous; batch 1; autocast off or to that dtype. No
 * error recorded. */
bool oj__gpt_qfast_decode_ok(const oj_gpt *m, const oj_kv_cache *c);

/* The step (oj__gpt2_run_fast's contract: logits [1, 1, V] in the
 * weights' dtype, keys and values written at dp's slot, dp->mask
 * written), per layer
 *   qkv = c_attn(norm(x)) + b, K and V into the cache (one kernel),
 *   y   = attention (the fast step's, oj__gpt_attend_fast),
 *   x  += attn c_proj(y) + b (one),
 *   h   = gelu(c_fc(norm(x)) + b) (one),
 *   x  += mlp c_proj(h) + b (one),
 * each product over the quantized copy with its dequantization in the
 * inner loop (ops/nn_decode_quant.h), then the final norm and the
 * quantized head in one kernel: the bf16 step's launches. Values: the
 * generic quantized step's (f32 products over the dequantized weights,
 * oj__gpt_linear) up to the order of the sums and, on the CPU, the
 * generic step's int8 rounding of x (oj_qmatmul), which this step does
 * not do. NULL with the error recorded. */
oj_tensor *oj__gpt2_run_qfast(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                              const oj_gpt_dev_pos *dp);

/* The fast step's attention of layer l (gpt_decode_fast.c, attend_fast):
 * the new token's q (columns 0 .. C of qkv [1, 1, 3C]) over every slot of
 * the cache under c->dev's mask, [1, 1, C] in the current scope; NULL with
 * the error recorded. The quantized step shares it. */
oj_tensor *oj__gpt_attend_fast(oj_gpt *m, oj_kv_cache *c, int l, oj_tensor *qkv);

#endif /* OJAS_MODELS_GPT_DECODE_QUANT_H */
