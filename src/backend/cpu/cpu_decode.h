/* The CPU backend's batch-1 decode entries (cpu_decode.c; backend.h,
 * decode_norm_linear, decode_linear_residual, decode_argmax_advance,
 * decode_embed_mask, decode_norm_head, decode_sample). */
#ifndef OJAS_CPU_DECODE_H
#define OJAS_CPU_DECODE_H

#include "backend/backend.h"

oj_status oj_cpu_decode_norm_linear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                    const oj_tensor *nw, const oj_tensor *nb, double eps,
                                    const oj_tensor *w, const oj_tensor *b, int act, oj_tensor *kv,
                                    const oj_tensor *slot);
oj_status oj_cpu_decode_linear_residual(oj_engine *eng, oj_tensor *x, const oj_tensor *y,
                                        const oj_tensor *w, const oj_tensor *b);

oj_status oj_cpu_decode_argmax_advance(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                                       oj_tensor *pos);

oj_status oj_cpu_decode_embed_mask(oj_engine *eng, oj_tensor *x, const oj_tensor *wte,
                                   const oj_tensor *wpe, const oj_tensor *tok,
                                   const oj_tensor *pos, oj_tensor *mask);

oj_status oj_cpu_decode_norm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                  const oj_tensor *nw, const oj_tensor *nb, double eps,
                                  const oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                  oj_tensor *step, oj_tensor *hist,
                                  const struct oj__decode_sampler *s);

oj_status oj_cpu_decode_sample(oj_engine *eng, oj_tensor *tok, const oj_tensor *logits,
                               oj_tensor *pos, oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                               const struct oj__decode_sampler *s);

/* cpu_decode_quant.c: decode_qlinear, decode_qnorm_head (a block-quantized weight) */
oj_status oj_cpu_decode_qlinear(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                const oj_tensor *nw, const oj_tensor *nb, double eps,
                                const oj_tensor *blocks, int qtype, int64_t K, const oj_tensor *b,
                                int epi, oj_tensor *kv, const oj_tensor *slot);
oj_status oj_cpu_decode_qnorm_head(oj_engine *eng, oj_tensor *out, const oj_tensor *x,
                                   const oj_tensor *nw, const oj_tensor *nb, double eps,
                                   const oj_tensor *blocks, int qtype, int64_t K, oj_tensor *tok,
                                   oj_tensor *pos, oj_tensor *hist);

#endif /* OJAS_CPU_DECODE_H */
