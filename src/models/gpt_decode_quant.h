/* Whether the gpt2 fast decode step serves a model with block-quantized
 * weights (gpt_decode_quant.c), internal: gpt_decode_fast.c runs the
 * step over the quantized copies (oj_gpt_quantize, or a GGUF file of
 * quantized matrices): per layer the bf16 step's launches, each product
 * with its dequantization in the inner loop (ops/nn_decode_quant.h), then
 * the final norm and the quantized head in one kernel. Values: the generic
 * quantized step's (f32 products over the dequantized weights,
 * oj__gpt_linear) up to the order of the sums and, on the CPU, the
 * generic step's int8 rounding of x (oj_qmatmul), which this step does not
 * do. */
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

#endif /* OJAS_MODELS_GPT_DECODE_QUANT_H */
