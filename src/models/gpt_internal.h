/* The GPT model's parameters and the pieces shared by its files. */
#ifndef OJAS_GPT_INTERNAL_H
#define OJAS_GPT_INTERNAL_H

#include "ojas/gpt.h"
#include "ojas/io.h"
#include "ojas/nn.h"
#include "ojas/quant.h"
#include "ops/nn_decode.h"

/* One transformer block. gpt2 uses ln/attn/mlp with biases and HF Conv1D
 * layouts ([in, out]); nanolab uses the PyTorch Linear layout ([out, in]). */
typedef struct oj_gpt_block {
    oj_tensor *ln_1_w, *ln_1_b, *ln_2_w, *ln_2_b; /* [C] (biases gpt2 only) */
    /* gpt2 */
    oj_tensor *c_attn_w, *c_attn_b; /* [C, 3C], [3C] */
    oj_tensor *attn_proj_w, *attn_proj_b; /* [C, C], [C] */
    oj_tensor *c_fc_w, *c_fc_b;     /* [C, 4C], [4C] */
    oj_tensor *mlp_proj_w, *mlp_proj_b; /* [4C, C], [C] */
    /* nanolab */
    oj_tensor *q_w, *k_w, *v_w, *o_w; /* [H D, C], [Hkv D, C] x2, [C, H D] */
    oj_tensor *gate_w, *gate_b;       /* [H, C], [H] */
    oj_tensor *lambda;                /* [1] value-residual mix (layers > 0) */
    oj_tensor *w_gate, *w_up, *w_down; /* [F, C], [F, C], [C, F] */
    /* llama (also q_w, k_w, v_w, o_w, w_gate, w_up, w_down; ln_1_w is
     * input_layernorm, ln_2_w post_attention_layernorm) */
    oj_tensor *q_b, *k_b, *v_b;       /* [H D], [Hkv D] x2 (qkv_bias) */
    oj_tensor *q_norm_w, *k_norm_w;   /* [D] (qk_norm) */
    /* LoRA adapters (gpt_lora.c), NULL where none: A [r, in], B [out, r]
     * per oj__lora_module, owned by oj_gpt.lora */
    oj_tensor *lora_a[11], *lora_b[11];
    /* quantized copies of the linear weights ([out, in]; gpt2's Conv1D
     * weights transposed), made by oj_gpt_quantize and used instead of the
     * f32 ones when no gradient is wanted; NULL otherwise */
    oj_qtensor *qc_attn, *qattn_proj, *qc_fc, *qmlp_proj;
    oj_qtensor *qq, *qk, *qv, *qo, *qgate, *qw_gate, *qw_up, *qw_down;
    /* llama: q, k, v ([H D + 2 Hkv D, C]) and gate, up ([2 F, C]) as one
     * matrix each, rows stacked, when their copies share type and K
     * (oj__gpt_qfuse); qq, qk, qv and qw_gate, qw_up are then views of
     * their rows. NULL otherwise */
    oj_qtensor *qqkv, *qgate_up;
} oj_gpt_block;

/* The linears LoRA adapts: gpt2's Conv1D modules, then the llama family's. */
typedef enum oj__lora_module {
    OJ__LORA_C_ATTN, OJ__LORA_ATTN_C_PROJ, OJ__LORA_C_FC, OJ__LORA_MLP_C_PROJ,
    OJ__LORA_Q, OJ__LORA_K, OJ__LORA_V, OJ__LORA_O, OJ__LORA_GATE, OJ__LORA_UP, OJ__LORA_DOWN,
    OJ__LORA_N
} oj__lora_module;

struct oj_gpt {
    oj_engine *eng;
    oj_gpt_config cfg;
    oj_params *params; /* the state_dict, in registration order */
    oj_tensor *wte;    /* [V, C] */
    oj_tensor *wpe;    /* [block_size, C] (gpt2) */
    oj_tensor *ln_f_w, *ln_f_b;
    oj_tensor *head;   /* [V, C]: wte when tied, else the llama lm_head */
    oj_tensor *rope_cos, *rope_sin; /* f32 [block_size, D] (llama3 rope scaling only) */
    bool zero_init;    /* parameters made as zeros (to be loaded over) */
    bool quantized;    /* oj_gpt_quantize ran: the blocks' q* weights are set */
    oj_qtype qtype;
    oj_qtensor *qhead; /* an untied head's quantized copy (llama), or NULL */
    oj_gpt_block *blocks;
    oj_params *lora;   /* the LoRA adapters (NULL: none), PEFT's names without
                        * "base_model.model." */
    oj_gpt_lora_config lora_cfg;
};

/* y [.., out] + (alpha / r) B A x for x [.., in] when block b has an adapter
 * on `mod`; else y. Takes y's reference: returns y itself or a new tensor
 * (y released), NULL on failure (y released, error on the engine). */
oj_tensor *oj__gpt_lora(oj_gpt *m, oj_gpt_block *b, oj__lora_module mod, oj_tensor *x, oj_tensor *y);
/* y = x @ w^T + b (w [out, in], b [out] or NULL), through q (w's
 * quantized copy) when q is set and grad mode is off: then x is taken in
 * f32 and y is f32 (gpt_quant.c). */
oj_tensor *oj__gpt_linear(oj_tensor *x, oj_tensor *w, const oj_qtensor *q, oj_tensor *b);
/* Free the quantized copies (gpt_quant.c). */
void oj__gpt_free_quantized(oj_gpt *m);
/* A llama model's quantized q, k, v and gate, up copies stacked by rows
 * into one matrix per block (b->qqkv, b->qgate_up), the separate copies
 * replaced by views of its rows, so one qgemv serves each group (one
 * launch instead of three and two on a device); memory as before. Where
 * quantized weights become the model's: oj_gpt_quantize and the GGUF
 * load. A block whose copies differ in type (a mixed GGUF file) keeps
 * them apart. Skipped (true) for other families, unquantized models,
 * OJAS_QFUSE=0 (oj__env_flag, read here) and, on a device engine,
 * OJAS_QFUSE_GPU=0. false with the error recorded on the engine (the
 * blocks fused so far stay so, every copy valid). */
bool oj__gpt_qfuse(oj_gpt *m);
/* Whether the forward multiplies by the stacked matrix fused (b->qqkv or
 * b->qgate_up) rather than by its views: it is set, grad mode is off and
 * the engine is a CPU (the bits of the separate products: each output row
 * is an independent dot product), or a device under FAST unless
 * OJAS_QFUSE_GPU=0 (decode's GEMVs: the separate products' bits, each
 * row's sum order fixed by K; prefill's GEMM over the dequantized stack
 * may sum in another order than the separate GEMMs). */
bool oj__gpt_qfused(const oj_gpt *m, const oj_qtensor *fused);
/* Columns [c0, c0 + n) of y [B, T, N] (a view) plus bias b [n] when not
 * NULL: what oj__gpt_linear gives for rows [c0, c0 + n) of the stacked
 * matrix. NULL (y NULL or the engine's error) on failure. */
oj_tensor *oj__gpt_qcols(oj_tensor *y, int64_t c0, int64_t n, oj_tensor *b);

/* The head dim D: cfg->head_dim, or n_embd / n_head when 0. */
static inline int64_t oj__gpt_head_dim(const oj_gpt_config *cfg) {
    return cfg->head_dim > 0 ? cfg->head_dim : cfg->n_embd / cfg->n_head;
}

/* The index of the first of tokens[0..n) outside the vocabulary [0, V), or
 * -1 when every one is inside. */
static inline int64_t oj__gpt_bad_token(const int32_t *tokens, int64_t n, int64_t V) {
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) return i;
    return -1;
}

typedef enum { INIT_NORMAL, INIT_RESID, INIT_ONES, INIT_ZEROS } oj__gpt_init;
/* A parameter in m's registry; its values depend only on (seed, name)
 * (oj_init_tensor): normal(0, init_std), init_std / sqrt(2 n_layer) for
 * residual output projections, ones, zeros. f32, requires grad. NULL with
 * the engine's error on failure. */
oj_tensor *oj__gpt_param(oj_gpt *m, const char *name, int rank, const int64_t *shape,
                         oj__gpt_init kind);

/* oj_gpt_create with every parameter zero instead of initialised: for a
 * model whose every parameter is then loaded (skips drawing random
 * values: a minute for 0.5B parameters). */
oj_status oj__gpt_create_zeros(oj_engine *eng, const oj_gpt_config *cfg, oj_gpt **out);

/* Loading parameters from safetensors (gpt.c; oj_gpt_load_safetensors and
 * oj_gpt_load_dir). oj__gpt_st_shape_matches: does entry idx of st have
 * exactly dst's shape? oj__gpt_st_copy: copy entry idx of st (its dtype and
 * shape already checked) into parameter dst, converting to dst's dtype,
 * with gradients off and inside its own scope; on failure the status, with
 * err set to "<what>: copying <name>: <engine error>". */
bool oj__gpt_st_shape_matches(oj_safetensors *st, int64_t idx, oj_tensor *dst);
oj_status oj__gpt_st_copy(oj_tensor *dst, oj_safetensors *st, int64_t idx, const char *what,
                          const char *name, oj_error *err);

/* Register the llama family's parameters on m (gpt_llama.c), HF's names
 * in HF's order. false with the engine's error recorded on failure. */
bool oj__gpt_llama_params(oj_gpt *m);
/* The llama family's attention for block l on h [B, T, C] at positions
 * pos.. (or the static step's device positions): [B, T, C] (gpt_llama.c). */
oj_tensor *oj__gpt_llama_attention(oj_gpt *m, oj_gpt_block *b, int l, oj_tensor *h, int64_t pos,
                                   oj_kv_cache *cache);
/* The attention helpers gpt_forward.c shares with gpt_llama.c. */
oj_tensor *oj__gpt_split_heads(oj_tensor *x, int64_t n, int64_t D);
oj_tensor *oj__gpt_merge_heads(oj_tensor *y);
oj_tensor *oj__gpt_attend_cached(oj_kv_cache *c, int l, oj_tensor *q, oj_tensor *k, oj_tensor *v);

/* The positions of a static decode step (gpt_decoder.c), held on the
 * device so that nothing the step does depends on a host value that
 * changes from one token to the next: it can be captured once into a CUDA
 * graph and replayed for every token. */
typedef struct oj_gpt_dev_pos {
    oj_tensor *pos;  /* i64 [1] (paged: i32 [N]): the new tokens' positions (rotary angle,
                      * gpt2's wpe row) */
    oj_tensor *slot; /* i64 [1]: the cache slot its key and value go to (pos mod capacity) */
    oj_tensor *mask; /* bool [1, 1, 1, capacity]: the slots written so far, attended to */
} oj_gpt_dev_pos;

/* A packed batch of sequences over a paged KV pool (gpt_paged.c):
 * sequence i's new tokens are rows start[i]..start[i+1] of the packed
 * [1, N] input, at positions past[i].., their keys and values stored in
 * pool blocks blocks[i][p / block_size], slot p % block_size. */
typedef struct oj_gpt_paged {
    const oj_kv_pool *pool;
    int64_t n_seq;
    const int64_t *start;
    const int64_t *past;
    const int32_t *const *blocks;
    /* Device form, or NULL (then the host arrays above): packed row t
     * belongs to sequence seq[t] (i32 [N]), sits at position vpos[t] (i32
     * [N], < 0: an inactive row) and its key and value go to slot[t]
     * (block id * block_size + row, < 0: not written); tables i32 [n_seq,
     * MB] holds the block tables. */
    oj_tensor *tables, *seq, *vpos, *slot;
} oj_gpt_paged;

/* The inputs and output of one decode-step bucket of B rows
 * (oj_gpt_decode_paged): device tensors overwritten before every step, so
 * that a captured graph reads them at fixed addresses, and the host
 * staging of the inputs (allocated once). */
typedef struct oj_paged_bucket {
    int64_t B;
    oj_tensor *in;  /* i32 [B (5 + MB)]: the storage of the six views below */
    oj_tensor *idx; /* i32 [1, B]: the tokens */
    oj_tensor *seq, *vpos, *slot; /* i32 [B]: i; its position (-1: inactive); its slot */
    oj_tensor *pos;               /* i32 [B]: the positions (0 for inactive rows) */
    oj_tensor *tables;            /* i32 [B, MB]: the block tables */
    oj_tensor *logits;            /* f32 [1, B, V]: the graph's static outputs */
    oj_tensor *argmax;            /* i64 [1, B]: each row's first largest logit */
    oj_tensor *argmax_lp;         /* f32 [1, B]: its log-probability (max - logsumexp) */
    oj_tensor *greedy;            /* f32 [2, B]: argmax (exact: V <= 2^24) and argmax_lp,
                                   * one read-back; NULL when V > 2^24 */
    int32_t *host_in;             /* [B (5 + MB)]: in's host staging */
    float *host_out;              /* [2 B]: greedy's */
    int64_t *host_am;             /* [B]: argmax's when greedy is NULL */
    oj_graph *graph;              /* captured lazily; NULL: not (yet) */
} oj_paged_bucket;

#define OJ_PAGED_BUCKETS 21 /* B = 1, 2, 4, .. 2^20 */

/* A decode step begun (oj_gpt_decode_paged_begin) and not yet ended. */
typedef struct oj_paged_pending {
    bool active;
    bool graph;         /* the bucket's graph ran (else out holds the eager step's outputs) */
    bool launched;      /* its replay was queued: its index checks are read at the end */
    int bucket;
    int64_t n_seq;
    oj_tensor *out[4];  /* the eager step's outputs (decode_body's), unscoped */
} oj_paged_pending;

struct oj_kv_pool {
    oj_gpt *m;
    int64_t n_blocks, block_size, n_layer;
    oj_tensor **k, **v; /* per layer [n_blocks, Hkv, block_size, D] */
    int64_t max_blocks; /* MB: a sequence's blocks at most, ceil(context / block_size) */
    oj_paged_bucket buckets[OJ_PAGED_BUCKETS]; /* bucket j holds 2^j rows */
    int32_t *stage;       /* oj_gpt_forward_paged's host staging of its inputs [stage_cap] */
    int64_t stage_cap;
    oj_paged_pending pending; /* a decode step between its begin and its end */
    bool timing_sync;     /* oj_kv_pool_set_timing: wait for the device after the launch */
    oj_kv_pool_times times; /* oj_gpt_decode_paged's host-side phases */
};

struct oj_kv_cache {
    oj_gpt *m;
    int64_t batch, capacity, len;
    int64_t n_layer; /* m's, kept so the cache can be freed after m */
    oj_tensor **kv;     /* per layer [2, batch, Hkv, capacity, D]: keys, values */
    oj_tensor **k, **v; /* per layer [batch, Hkv, capacity, D]: views of kv[l] */
    const oj_gpt_dev_pos *dev; /* set during oj__gpt_run_static only */
    const oj_gpt_paged *paged; /* set during oj_gpt_forward_paged only (dev->pos then
                                * holds the packed tokens' positions) */
};

/* The paged attention of layer l (gpt_paged.c): writes k, v [1, Hkv, N, D]
 * of the packed tokens into their blocks, then attends each sequence's
 * queries of q [1, H, N, D] to its cached and new positions (causal).
 * [1, H, N, D]. */
oj_tensor *oj__gpt_attend_paged(oj_kv_cache *c, int l, oj_tensor *q, oj_tensor *k, oj_tensor *v);
/* The final hidden states [B, T, C] (after the last norm) of idx
 * (gpt_forward.c). */
oj_tensor *oj__gpt_hidden(oj_gpt *m, oj_tensor *idx, oj_kv_cache *cache);

/* Run the blocks and the head on x = embeddings [B, T, C] at positions
 * pos..pos+T-1; cache may be NULL (training / full recompute). */
oj_tensor *oj__gpt_run(oj_gpt *m, oj_tensor *idx, oj_kv_cache *cache);
/* The static decode step: logits [B, 1, V] of idx [B, 1] at the positions
 * of dp, writing each layer's key and value into slot dp->slot of c and
 * attending to every slot dp->mask keeps. Grad mode off. Reads and changes
 * no host position (c->len is left to the caller, which also checks the
 * positions against block_size and the capacity). */
oj_tensor *oj__gpt_run_static(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                              const oj_gpt_dev_pos *dp);

/* Make d's steps (and prefills) sampled by s (NULL: greedy, the
 * default). A sampled decoder runs the generic step, whose logits are the
 * eager loop's, unless the fast step's are its bits
 * (oj__gpt_fast_decode_exact); elsewhere the fast step's differ by the
 * order of sums, enough to change sampled tokens (OJAS_DECODE_FAST=1
 * takes it anyway). on_device:
 * the token is drawn on the device by oj__decode_sample_ (ops/nn_decode.h)
 * in the prefill and inside the step (the token alone read back),
 * penalising the prompt's and the drawn tokens; otherwise the step writes
 * the argmax and the caller samples oj_gpt_decoder_logits on the host.
 * Changing the sampler drops the captured graph and needs a new prefill.
 * OJ_ERR_UNSUPPORTED when on_device and !oj__decode_sample_ok;
 * OJ_ERR_CAPACITY. */
oj_status oj__gpt_decoder_set_sampler(oj_gpt_decoder *d, const oj__decode_sampler *s,
                                      bool on_device);

/* Make d's step also keep its token on the device (at its position + 1 of
 * a [capacity + 1] buffer: written by the device draw itself, by an
 * index_copy_ after a greedy step; drops the captured graph), so that
 * oj__gpt_decoder_steps can run several steps and read their tokens back
 * at once. Not for a ring cache (nanolab): OJ_ERR_UNSUPPORTED;
 * OJ_ERR_CAPACITY. */
oj_status oj__gpt_decoder_keep_tokens(oj_gpt_decoder *d);
/* k >= 1 steps of d (oj_gpt_decoder_step, each feeding the token the one
 * before wrote on the device) with one read-back: toks[0..k) the tokens
 * they wrote, as k oj_gpt_decoder_step calls would return. The caller
 * keeps the positions within the context (each step's errors as
 * oj_gpt_decoder_step's; OJ_ERR_STATE without oj__gpt_decoder_keep_tokens). */
oj_status oj__gpt_decoder_steps(oj_gpt_decoder *d, int64_t k, int32_t *toks);
/* Whether d's step keeps its token (oj__gpt_decoder_keep_tokens) in its
 * last kernel, with no kernel added for it: the device draw, or the fast
 * step's head ending a greedy step (oj__gpt_fast_head_fused); else an
 * index_copy_ after the argmax keeps it. False for a ring cache. */
bool oj__gpt_decoder_keeps_in_step(const oj_gpt_decoder *d);

/* The gpt2 decode step in six kernels a layer (gpt_decode_fast.c): whether
 * it serves m with cache c (gpt2, weights and cache of one dtype bf16/f16,
 * batch 1, FAST numerics, the backend's decode entries; on a CUDA engine,
 * or any with OJAS_DECODE_FAST=1; never with OJAS_DECODE_FAST=0), and the
 * step itself: oj__gpt_run_static's contract (logits [1, 1, V] of idx
 * [1, 1] at dp's position, its key and value written at dp's slot),
 * except that dp->mask is a bool [1, 1, 1, S] tensor the step writes
 * (slot j attended once j <= pos). With end (not NULL) the step may also
 * end in its head's kernel (decode_norm_head): end->tok = the argmax of
 * the logits (end->smp NULL) or the device draw of end->smp (no penalty;
 * end->step as oj__decode_sample_keep_ writes it), end->pos += 1 and
 * end->hist[pos] = tok (end->hist not NULL); *ended says whether it did
 * (else the caller does). A quantized model (m->quantized) runs the same
 * launches over its quantized copies and ends with its logits (*ended
 * false). */
bool oj__gpt_fast_decode_ok(const oj_gpt *m, const oj_kv_cache *c);
/* Whether the fast step's logits are the generic step's bit for bit
 * (given oj__gpt_fast_decode_ok): a CUDA engine, its one-row matmul on
 * (OJAS_CUDA_GEMV unset or not "0") and every projection's product
 * summed in its order (oj__decode_matches_unfused: gpt2-124m's shapes
 * do, gpt2-medium's c_proj with K 4096 does not). Sampled sequences take
 * the fast step only then. */
bool oj__gpt_fast_decode_exact(const oj_gpt *m);
/* Whether the fast step runs its layers in the persistent kernel
 * (oj__decode_mega): OJAS_DECODE_MEGA=1 (default off) and the backend
 * takes the shapes (gpt2 bf16/f16, head dim 64 or 128, n_embd < 2048, not
 * quantized); otherwise the six kernels a layer. The same bits either way.
 * Read at each call (a captured step keeps what it read). */
bool oj__gpt_mega_decode_ok(const oj_gpt *m, const oj_kv_cache *c);
/* Whether the fast step's head is one decode_norm_head kernel (the final
 * norm, the tied head's product, and the argmax or the draw when the
 * caller asks): the backend has the entry and m's head and final norm
 * suit it (oj__decode_head_weight_ok, the weights' dtype); for a
 * quantized m, one decode_qnorm_head kernel ending greedy steps (the
 * backend has it and OJAS_DECODE_QHEAD=1; default no). */
bool oj__gpt_fast_head_fused(const oj_gpt *m);
typedef struct oj_gpt_fast_end {
    oj_tensor *tok, *pos, *step, *hist;
    const struct oj__decode_sampler *smp;
} oj_gpt_fast_end;
oj_tensor *oj__gpt2_run_fast(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx,
                             const oj_gpt_dev_pos *dp, const oj_gpt_fast_end *end, bool *ended);

/* s as a message may quote it: at most 64 bytes into buf (65 bytes), each
 * control character (< 0x20, 0x7f) as '?', so that a value read from a
 * file keeps a message on one line. buf. */
const char *oj__hf_quote(char buf[65], const char *s);

/* oj_gpt_config_from_hf on the text json[0..len) of a config.json;
 * `file` names it in messages. */
oj_status oj__gpt_config_from_hf_json(const char *json, size_t len, const char *file,
                                      oj_gpt_config *cfg, oj_error *err);

#endif /* OJAS_GPT_INTERNAL_H */
