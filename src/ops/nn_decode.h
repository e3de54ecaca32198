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

/* Shared checks of the fused decode ops (nn_decode.c, nn_decode_quant.c),
 * each recording the error naming op: t has n elements, is contiguous and
 * has dtype dt (else "... is X, <of> Y", of naming what dt is from); act
 * is an OJ__DECODE_ACT_*, eps >= 0, kv and slot given together, kv a
 * contiguous cache [2, 1, H, S, D] of dtype dt with 3 H D == N and slot
 * i64 [1]. */
bool oj__decode_vec_ok(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t,
                       int64_t n, oj_dtype dt, const char *of);
bool oj__decode_proj_args_ok(oj_engine *eng, const char *op, int act, double eps,
                             const oj_tensor *kv, const oj_tensor *slot, int64_t N, oj_dtype dt);

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

/* The sampler of a decode step (oj_sampler_config's fields that choose a
 * token, plus the sequence whose draws are taken). */
typedef struct oj__decode_sampler {
    double temperature;        /* <= 0: the argmax of the penalised logits */
    int64_t top_k;             /* 0 or >= V: every token */
    double top_p;              /* nucleus; outside (0, 1): off */
    double repetition_penalty; /* > 0; 1: off */
    uint64_t seed;             /* the draw of step s is oj_sample_uniform(seed, seq, s) */
    int64_t seq;
} oj__decode_sampler;

/* The largest top_k the device entries take (decode_sample); above it
 * (and for top_k 0 at V > this) oj__decode_sample_ refuses and callers
 * sample on the host. */
#define OJ__DECODE_SAMPLE_MAX_K 1024

/* Whether oj__decode_sample_ takes sampler s over V logits on eng: the
 * backend has the entry and s needs at most OJ__DECODE_SAMPLE_MAX_K
 * candidates (temperature <= 0 always fits). No error recorded. */
bool oj__decode_sample_ok(const oj_engine *eng, const oj__decode_sampler *s, int64_t V);

/* tok = oj_sample_logits(logits, V, s, history, n, oj_sample_uniform(s->seed,
 * s->seq, step)) computed on the device, where history is the set of ids
 * i with seen[i] != 0, then seen[tok] = 1, step += 1 and (pos != NULL)
 * pos += 1: the end of a sampled decode step, in one kernel, the same
 * token as the host sampler for the same logits (its ranking, its double
 * arithmetic, its draw). tok = -1 when the logits hold a NaN (seen is then
 * not written). tok, step, pos: i64 with one element, distinct storages;
 * logits contiguous f32/bf16/f16 [.., V], 1 <= V <= 2^30; seen u8 [V]
 * contiguous, or NULL when s->repetition_penalty == 1 (none then). OJ_OK,
 * or OJ_ERR_DTYPE / OJ_ERR_SHAPE / OJ_ERR_INVALID_ARGUMENT / OJ_ERR_UNSUPPORTED
 * (no entry, or more than OJ__DECODE_SAMPLE_MAX_K candidates) recorded.
 * Method: the host sampler's (src/infer/sample.c), its top-k set found on
 * the device by a threshold (the k-th largest of group maxima) and the
 * ranks of the candidates above it. */
oj_status oj__decode_sample_(oj_tensor *tok, oj_tensor *logits, oj_tensor *pos, oj_tensor *seen,
                             oj_tensor *step, const oj__decode_sampler *s);
/* oj__decode_sample_ that also writes the token to hist[pos] (pos after
 * its advance; hist contiguous i64, pos required; nothing is written when
 * pos is outside hist), in the same kernel: the decoder keeps each step's
 * token on the device to read several back at once. hist NULL: as
 * oj__decode_sample_. Errors as there, OJ_ERR_INVALID_ARGUMENT for hist
 * without pos or sharing a storage. */
oj_status oj__decode_sample_keep_(oj_tensor *tok, oj_tensor *logits, oj_tensor *pos,
                                  oj_tensor *seen, oj_tensor *step, oj_tensor *hist,
                                  const oj__decode_sampler *s);

/* Whether the decode entries' product with w [K, N] sums in the order of
 * the CUDA one-row matmul (cuda_gemv.cu, "kn": the same column tile, no
 * split of K), so that with the norm's order (which they always follow)
 * their outputs are the unfused ops' bits on a CUDA engine: the matmul's
 * own tile rule says so (backend/gemv_tiles.h oj_gemv_kn_unsplit: K <
 * 4096 and no split of K, which happens when fewer than 264 blocks cover
 * N and a thread would sum >= 32 rows). No error recorded; false for a
 * weight oj__decode_weight_ok refuses. */
bool oj__decode_matches_unfused(const oj_tensor *w);

/* Whether w [N, K] suits oj__decode_norm_head: bf16/f16, k-stride 1
 * (nn.Linear's layout, the tied lm head), K and the row stride multiples
 * of 8, 0 < K <= 8192, 1 <= N <= 2^31 - 1, 16-byte aligned offset: the
 * conditions under which the CUDA one-row matmul takes its "nk" kernel,
 * whose sums the entry repeats. No error recorded. */
bool oj__decode_head_weight_ok(const oj_tensor *w);

/* linear(layer_norm(x, nw, nb, eps), w) for one row, the backend's
 * decode_norm_head entry: x [..., K] with one row (numel K), contiguous;
 * nw, nb [K]; w [N, K] as oj__decode_head_weight_ok takes it (the tied lm
 * head); all of one dtype, bf16 or f16. With tok and pos (i64 with one
 * element each, distinct storages; both or neither) the same kernel also
 * writes tok = argmax (as oj__decode_argmax_advance_) and pos += 1: the
 * end of a greedy decode step; with hist (contiguous i64, or NULL; needs
 * tok) also hist[pos] = tok for the advanced pos when it is inside hist
 * (the decoder keeps each step's token to read several back at once). Returns a new tensor [1, 1, N] in the
 * current scope (the logits), or NULL with OJ_ERR_SHAPE / OJ_ERR_DTYPE /
 * OJ_ERR_INVALID_ARGUMENT / OJ_ERR_UNSUPPORTED (no such entry on the
 * backend) recorded. Values: layer_norm then linear up to the order of
 * the sums; on CUDA their bits (the layer_norm kernel's and the "nk"
 * matmul kernel's order). */
oj_tensor *oj__decode_norm_head(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                oj_tensor *w, oj_tensor *tok, oj_tensor *pos, oj_tensor *hist);

/* Whether tok, pos and hist suit the end of a greedy head over V logits
 * (oj__decode_norm_head's conditions: tok and pos i64 with one element,
 * distinct storages, both or neither; hist contiguous i64 or NULL, needing
 * tok, sharing neither's storage); else false with OJ_ERR_INVALID_ARGUMENT
 * / OJ_ERR_DTYPE naming op recorded on eng. */
bool oj__decode_head_end_ok(oj_engine *eng, const char *op, int64_t V, const oj_tensor *tok,
                            const oj_tensor *pos, const oj_tensor *hist);

/* oj__decode_norm_head whose kernel ends a sampled step instead: tok =
 * the draw of oj__decode_sample_keep_(tok, logits, pos, NULL, step, hist,
 * s) over its own logits (the host sampler's token; tok -1 on a NaN),
 * step += 1, pos += 1, hist[pos] = tok. s without a repetition penalty
 * (1: the draw has no seen flags) and within OJ__DECODE_SAMPLE_MAX_K
 * candidates; tok, pos, step i64 with one element, hist contiguous i64 or
 * NULL, none sharing a storage. The logits, or NULL with the errors of
 * both ops recorded (OJ_ERR_INVALID_ARGUMENT for a NULL sampler or one
 * with a penalty). On CUDA the draw runs in the head's last block where
 * it fits (K <= 1024; the candidates' groups, a power of two >= 2 top_k
 * and >= 32, at most 256, no more than the head's blocks: top_k 40 over
 * gpt2's head fits), else in decode_sample's kernel after it: the same
 * token either way. */
oj_tensor *oj__decode_norm_head_sample(oj_tensor *x, oj_tensor *nw, oj_tensor *nb, double eps,
                                       oj_tensor *w, oj_tensor *tok, oj_tensor *pos,
                                       oj_tensor *step, oj_tensor *hist,
                                       const oj__decode_sampler *s);

/* Attention of a gpt2 decode step's query over layer l's cache: q =
 * columns 0 .. C of qkv [1, 1, 3 C] (contiguous) split into H heads of D,
 * keys and values kv [2, 1, H, S, D] (contiguous, qkv's dtype), slot j
 * attended where mask[j] (bool, S elements, contiguous), scale 1 / sqrt(D):
 * a new [1, 1, C] tensor in the current scope, the values and bits of
 * scaled_dot_product_attention (the same kernels), computed by the
 * backend's decode_attention entry. slot (i64, one element): the cache row
 * the kernel before writes (this step's key and value); the backend may
 * read every other row before that kernel finishes. NULL with
 * OJ_ERR_SHAPE / OJ_ERR_DTYPE / OJ_ERR_UNSUPPORTED (no entry, or shapes
 * its kernels do not take) recorded. */
oj_tensor *oj__decode_attention(oj_tensor *qkv, oj_tensor *kv, oj_tensor *mask, oj_tensor *slot);

/* Whether eng's backend has the decode_attention entry (optional). */
bool oj__decode_attention_supported(const oj_engine *eng);

/* Whether eng's backend has the decode_norm_head entry (optional: the fast
 * step takes layer_norm and linear without it). */
bool oj__decode_head_supported(const oj_engine *eng);

/* The tensors of one gpt2 layer that oj__decode_mega takes, in its
 * order (OJ__DECODE_MEGA_PER_LAYER of them): ln_1 weight, bias [C],
 * c_attn weight [C, 3C], bias [3C], attention c_proj weight [C, C], bias
 * [C], ln_2 weight, bias [C], c_fc weight [C, 4C], bias [4C], mlp c_proj
 * weight [4C, C], bias [C] (weights as oj__decode_weight_ok takes them),
 * the layer's KV cache [2, 1, H, S, D] (contiguous, C = H D). */
#define OJ__DECODE_MEGA_PER_LAYER 13

/* Whether eng's backend runs oj__decode_mega for gpt2 layers of width C
 * with H heads over a cache of S slots in dtype dt (the backend's
 * decode_mega_ok: on CUDA bf16/f16, head dim 64 or 128, C < 2048). No
 * error recorded. */
bool oj__decode_mega_ok(const oj_engine *eng, int64_t C, int64_t H, int64_t S, oj_dtype dt);

/* The layers of a gpt2 decode step (FAST numerics) in one persistent
 * kernel per MEGA_MAX_LAYERS (12) layers, the backend's decode_mega
 * entry: x = wte[tok] + wpe[pos] (wte [V, C], wpe [P, C] contiguous; tok,
 * pos i64 [1] device values, pos also the cache slot), mask (bool [S],
 * contiguous) [j] = j <= pos, then n_layer layers whose tensors are
 * lw[OJ__DECODE_MEGA_PER_LAYER l ..] (above), all of one dtype: each the
 * fast step's layer (oj__decode_norm_linear, oj__decode_attention,
 * oj__decode_linear_residual, oj__decode_norm_linear with GELU,
 * oj__decode_linear_residual) with its bits. Returns the residual after
 * the last layer, a new tensor [1, 1, C] in the current scope, or NULL
 * with OJ_ERR_SHAPE / OJ_ERR_DTYPE / OJ_ERR_UNSUPPORTED (no entry, or
 * shapes oj__decode_mega_ok refuses) recorded. The caller keeps tok and
 * pos in range (x is NaN where they are not). Method: one cooperative
 * launch, a grid-wide barrier between dependent stages (the "no bubbles"
 * megakernel idea, Hazy Research 2025); src/backend/cuda/cuda_decode_mega.cu. */
oj_tensor *oj__decode_mega(oj_tensor *wte, oj_tensor *wpe, oj_tensor *tok, oj_tensor *pos,
                           oj_tensor *mask, int64_t n_layer, oj_tensor *const *lw, double eps);

/* Whether eng's backend has every decode entry. */
bool oj__decode_supported(const oj_engine *eng);

#endif /* OJAS_OPS_NN_DECODE_H */
