/* ojas GPT models: one definition, configured by a struct, run on the tape
 * for training and eagerly (grad mode off, KV cache) for decoding.
 *
 * Families:
 * - OJ_GPT2: GPT-2 (Radford et al. 2019): learned positions, LayerNorm,
 *   GELU (tanh) MLP 4x, biases, tied embedding. Parameter names and layouts
 *   are Hugging Face's (Conv1D weights stored [in, out]), so a GPT-2
 *   safetensors file exported from transformers loads unchanged.
 * - OJ_NANOLAB: no biases, RMSNorm (eps 1e-6), half-split rotary
 *   embeddings, parameter-free RMS QK-norm, causal attention with optional
 *   grouped-query KV heads, a per-head sigmoid output gate
 *   (sigmoid(x W_g + b_g) scales each head's output), value residual (each
 *   layer's V mixed with layer 0's V: v = s v + (1 - s) v0, s =
 *   sigmoid(lambda) learned per layer), SwiGLU MLP (silu(x W_gate) *
 *   (x W_up), then W_down), tied embedding.
 * - OJ_LLAMA: the Hugging Face Llama family (Touvron et al. 2023) and its
 *   relatives: no positions table, RMSNorm before attention and MLP and at
 *   the end, half-split rotary embeddings (rope_theta), causal attention
 *   with grouped-query KV heads of head_dim, SwiGLU MLP, a head tied to
 *   the embedding or its own (untied_head). Options: qkv_bias (Qwen2's
 *   q/k/v biases), qk_norm (Qwen3's RMSNorm over each head's D with a
 *   weight, before the rotation), rope_factor (Llama 3.1's frequency
 *   rescaling; the model then holds cos/sin tables [block_size, D], f32).
 *   Parameter names are HF's
 *   (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
 *   model.layers.N.mlp.gate_proj.weight, model.norm.weight,
 *   lm_head.weight; Linear layout [out, in]), so oj_gpt_load_dir reads a
 *   LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM /
 *   Qwen3ForCausalLM directory.
 *
 * Shapes: idx/targets [B, T] i64 or i32; logits [B, T, V]. */
#ifndef OJAS_GPT_H
#define OJAS_GPT_H

#include "ojas/core.h"
#include "ojas/data.h"
#include "ojas/io.h"
#include "ojas/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum oj_gpt_family { OJ_GPT2 = 0, OJ_NANOLAB = 1, OJ_LLAMA = 2 } oj_gpt_family;

typedef struct oj_gpt_config {
    oj_gpt_family family;
    int64_t vocab_size; /* V */
    int64_t block_size; /* maximum context T (learned positions / rope tables) */
    int64_t n_layer;
    int64_t n_head;     /* H */
    int64_t n_kv_head;  /* Hkv, divides H (nanolab; gpt2 uses H) */
    int64_t n_embd;     /* C = H * D */
    int64_t mlp_hidden; /* gpt2: 4C; nanolab: SwiGLU width */
    double norm_eps;    /* gpt2 1e-5, nanolab 1e-6 */
    double rope_theta;  /* nanolab, e.g. 10000 */
    double init_std;    /* 0.02 */
    /* llama family only (0 / false for the others): */
    int64_t head_dim;   /* D; 0: n_embd / n_head (Qwen3 sets its own) */
    bool qkv_bias;      /* biases on q, k, v projections (Qwen2) */
    bool qk_norm;       /* RMSNorm with a weight [D] on q and k per head (Qwen3) */
    bool untied_head;   /* lm_head.weight [V, C] of its own */
    /* llama family: Llama 3.1's rope_scaling "llama3" when rope_factor > 0
     * (0: none): each rotary frequency f = theta^(-2i/D) with wavelength
     * 2 pi / f above rope_original_context / rope_low_freq_factor is
     * divided by rope_factor, below rope_original_context /
     * rope_high_freq_factor kept, and in between interpolated:
     * (1 - s) f / rope_factor + s f, s = (rope_original_context / wavelength
     * - low) / (high - low) (transformers' _compute_llama3_parameters). */
    double rope_factor;            /* e.g. 8 (Llama 3.1) or 32 (Llama 3.2) */
    double rope_low_freq_factor;   /* 1 */
    double rope_high_freq_factor;  /* 4 */
    int64_t rope_original_context; /* original_max_position_embeddings, 8192 */
} oj_gpt_config;

/* Fill *cfg from a preset name: "gpt2-124m", "gpt2-355m", "gpt2-774m",
 * "gpt2-1558m", "nanolab-124m", and small ones for tests and the demo:
 * "nanolab-tiny" (2 layers, C 64), "nanolab-small" (4 layers, C 128),
 * "nanolab-demo" (6 layers, C 192), "gpt2-tiny". Returns false for an
 * unknown name. vocab_size / block_size may be overridden afterwards. */
bool oj_gpt_preset(const char *name, oj_gpt_config *cfg);
/* The name of preset i (0, 1, ...), NULL past the last: for listing them. */
const char *oj_gpt_preset_name(int i);
/* The preset names joined by ", " into buf (truncated to len); buf. */
char *oj_gpt_preset_list(char *buf, size_t len);
/* OJ_OK or OJ_ERR_INVALID_ARGUMENT with a message naming the bad field. */
oj_status oj_gpt_config_check(const oj_gpt_config *cfg, oj_error *err);
/* Number of parameters oj_gpt_create makes for cfg, computed from the
 * shapes without allocating (saturating at INT64_MAX); -1 for a config
 * oj_gpt_config_check refuses. For memory checks before a model exists:
 * x 4 bytes for the f32 weights, as many again for their gradients, and
 * the optimizer's state. */
int64_t oj_gpt_config_num_params(const oj_gpt_config *cfg);
/* "nanolab" / "gpt2" / "llama". */
const char *oj_gpt_family_name(oj_gpt_family f);

typedef struct oj_gpt oj_gpt;

/* Create a model with parameters initialised from (seed, parameter name)
 * only, so initial values do not depend on creation order: normal(0,
 * init_std) for matrices and embeddings, init_std / sqrt(2 n_layer) for the
 * residual output projections, ones for norm weights, zeros for biases and
 * lambdas. Parameters are f32 leaves requiring grad, owned by the model
 * (unscoped), on eng's device. Before allocating anything the f32
 * weights' bytes (oj_gpt_config_num_params x 4) are checked against the
 * room left in eng's current budget and its ancestors, so a model too big
 * for the budget is refused at once (OJ_ERR_CAPACITY naming the parameter
 * count, the bytes and the budget) instead of after filling it. Errors:
 * OJ_ERR_INVALID_ARGUMENT (config), OJ_ERR_CAPACITY (budget). */
oj_status oj_gpt_create(oj_engine *eng, const oj_gpt_config *cfg, uint64_t seed, oj_gpt **out);
void oj_gpt_free(oj_gpt *m);
const oj_gpt_config *oj_gpt_get_config(const oj_gpt *m);
oj_engine *oj_gpt_engine(const oj_gpt *m);

/* The state_dict: names and tensors (borrowed; valid while m lives). The
 * tied lm_head is not listed (it is transformer.wte.weight). */
oj_named_tensors oj_gpt_state_dict(const oj_gpt *m);
/* Number of parameters (tied counted once). */
int64_t oj_gpt_num_params(const oj_gpt *m);
/* Convert the parameters to the float dtype dt in place (model.to(dtype);
 * oj_params_to_dtype's contract and errors): bf16 weights halve the bytes
 * read per decoded token; the forward then runs in that dtype (norm
 * statistics and softmax in f32 inside the kernels), and KV caches
 * created afterwards hold it too. For inference: train in f32 (with
 * autocast) and convert after. Free decoders (their captured graphs)
 * before converting. */
oj_status oj_gpt_to_dtype(oj_gpt *m, oj_dtype dt);
/* Quantize the model for inference (CPU engines): every linear weight of
 * the blocks (gpt2: c_attn, attn.c_proj, c_fc, mlp.c_proj; llama: q, k,
 * v, o, gate, up, down; nanolab: those and the attention gate) and the
 * head get a quantized copy of type t (oj_quantize of the [out, in]
 * weight, so each row's K = in features must be a multiple of 32). The
 * forward (oj_gpt_forward, _forward_cached, the decoder) uses the copies
 * with grad mode off, oj_qmatmul's error bound per linear; embedding
 * lookups (a tied head's too: only its matmul is quantized), positions,
 * norms and biases stay as they are;
 * with grad mode on the f32 weights are used (training is unchanged). The
 * f32 parameters stay (the state_dict); quantizing again replaces the
 * copies, and a later change of the parameters (load, optimizer step) is
 * not seen by them until quantized again. Errors: oj_quantize's
 * (OJ_ERR_SHAPE for a width not a multiple of 32, OJ_ERR_UNSUPPORTED on
 * CUDA, OJ_ERR_CAPACITY), OJ_ERR_INVALID_ARGUMENT for a bad t; on failure
 * the model is left unquantized. A llama model's q, k, v copies are
 * stored as one matrix, and its gate, up copies as another (rows stacked:
 * one product each in the forward, the same bits on the CPU; no extra
 * memory); OJAS_QFUSE=0 keeps them apart. */
oj_status oj_gpt_quantize(oj_gpt *m, oj_qtype t);
/* The type of the quantized copies, or OJ_QTYPE_COUNT when there are none. */
oj_qtype oj_gpt_quantized_type(const oj_gpt *m);
/* Bytes of weights one decode step (one token) reads: every matrix the
 * forward multiplies by (at its quantized size when it has a quantized
 * copy, the tied head in full), norms and biases, and one row of the
 * embedding and of the positions. */
int64_t oj_gpt_decode_bytes(const oj_gpt *m);

/* Write m to a GGUF file in llama.cpp's layout (its converter's tensor
 * names and metadata keys: general.architecture "gpt2" or "llama",
 * <arch>.context_length, embedding_length, feed_forward_length,
 * block_count, attention.head_count(_kv), the norm epsilon, rope.freq_base;
 * matrices [out, in], GPT-2's Conv1D weights transposed, llama's q and k
 * rows permuted to llama.cpp's interleaved rotary order, gpt2's tied head
 * written again as output.weight as llama.cpp's converter does). Weights
 * with a quantized copy (oj_gpt_quantize) are written as their blocks
 * (Q8_0, Q4_0, Q4_1, Q4_K; general.file_type 7, 2, 3, 14), the other
 * matrices in their dtype (F32, F16, BF16; file_type 0, 1, 32), 1-D
 * tensors (norms, biases) in F32 as llama.cpp's converter writes them
 * (exact: f16 and bf16 widen to f32). name (may be NULL) becomes general.name. extra (may
 * be NULL) is a writer holding metadata to write first, e.g. the
 * tokenizer's (tokenizer.ggml.*); the model's metadata and tensors are
 * added to it (the caller still frees it; after a failure it holds part
 * of them). Without tokenizer.ggml.model the file says "no_vocab" (token
 * ids only). Atomic (oj_gguf_writer_write). OJ_ERR_UNSUPPORTED for nanolab
 * and llama models with qkv_bias, qk_norm or rope scaling; the writer's
 * errors (OJ_ERR_INVALID_ARGUMENT for a key of extra the model sets). */
oj_status oj_gpt_save_gguf(oj_gpt *m, oj_gguf_writer *extra, const char *path, const char *name,
                           oj_error *err);
/* Add llama.cpp's tokenizer metadata of the GPT-2 byte-level BPE
 * tokenizer in dir (encoder.json + vocab.bpe, or Hugging Face's vocab.json
 * + merges.txt) to w, for a model of `vocab` ids: tokenizer.ggml.model
 * "gpt2", .pre "gpt-2", .tokens (the byte-level strings by id, padded to
 * vocab with unused "<|pad_N|>" entries), .token_type (1 normal, 3 control
 * for <|endoftext|>, 5 padding), .merges (the merges file without its
 * #version line), .bos_token_id and .eos_token_id (<|endoftext|>, when
 * present). Pass w to oj_gpt_save_gguf. OJ_ERR_IO (files missing),
 * OJ_ERR_CORRUPT (bad JSON, a bad or repeated id), OJ_ERR_INVALID_ARGUMENT
 * (more tokens than vocab), the writer's errors. */
oj_status oj_gguf_add_gpt2_tokenizer(oj_gguf_writer *w, const char *dir, int64_t vocab,
                                     oj_error *err);
/* The tokenizer a GGUF file carries, as oj_gguf_add_gpt2_tokenizer (and
 * llama.cpp's converter for GPT-2-style byte-level BPE) writes it:
 * tokenizer.ggml.model "gpt2", .tokens (byte-level strings by id), .merges
 * ("A B" in priority order), .token_type when present (entries of type 5,
 * unused, are left out). The tokenizer is built as
 * oj_tokenizer_from_gpt2_lists builds it (special tokens such as
 * <|endoftext|> from the tokens no merge makes), with the template
 * (oj_tokenizer_template) llama.cpp puts around a prompt: BOS / EOS under
 * tokenizer.ggml.add_bos_token / add_eos_token when present, else BOS for
 * the Llama 3 pre-tokenizers ("llama-bpe", "llama3", "llama-v3") only;
 * the ids from tokenizer.ggml.bos_token_id / eos_token_id. *out owns it. Errors
 * naming the file and key: OJ_ERR_OUT_OF_RANGE (no tokenizer.ggml.model,
 * or "no_vocab"), OJ_ERR_UNSUPPORTED (another model: "llama"'s
 * SentencePiece scores, ...), OJ_ERR_CORRUPT (a key of the wrong type or
 * length, a BOS / EOS asked for without its id, the list loader's errors). */
oj_status oj_gguf_tokenizer(const oj_gguf *g, const char *path, oj_tokenizer **out,
                            oj_error *err);
/* Copy every tokenizer.ggml.* key of g (whatever the tokenizer model) to
 * w, values as the file holds them: how a GGUF file rewritten by ojas
 * quantize keeps its tokenizer. Errors: the writer's (OJ_ERR_CAPACITY,
 * OJ_ERR_INVALID_ARGUMENT for a key already set on w). */
oj_status oj_gguf_copy_tokenizer(oj_gguf_writer *w, const oj_gguf *g, oj_error *err);
/* Read a GGUF file of architecture gpt2 or llama in the layout
 * oj_gpt_save_gguf writes (llama.cpp's), F32 / F16 / BF16 / Q8_0 / Q4_0 /
 * Q4_1 / Q4_K tensors: the config from the metadata (vocab_size from
 * token_embd.weight, an untied head when output.weight is present for
 * llama), every tensor checked against it; a tensor the model does not
 * use (blk.N.* past block_count) is refused by name. Quantized tensors of linear
 * weights become the model's quantized copies with the file's blocks (as
 * oj_gpt_quantize would make them, q, k, v and gate, up stacked where
 * each group shares one type) and, dequantized, its f32 parameters;
 * a quantized embedding is dequantized. *out owns the new model.
 * Errors, each naming the file and key or tensor: OJ_ERR_CORRUPT (the
 * file, a missing key or tensor), OJ_ERR_UNSUPPORTED (another
 * architecture or tensor type, rope scaling, a rope.dimension_count other
 * than the head dim, expert_count > 0; a vocab_size key other than the
 * embedding's rows is OJ_ERR_CORRUPT), OJ_ERR_SHAPE, OJ_ERR_IO,
 * OJ_ERR_CAPACITY. */
oj_status oj_gpt_load_gguf(oj_engine *eng, const char *path, oj_gpt **out, oj_error *err);

/* Load a safetensors file into the parameters (HF GPT-2 names with or
 * without the "transformer." prefix accepted; HF's attention-mask buffers
 * ignored). Everything is checked before any parameter changes:
 * OJ_ERR_SHAPE / OJ_ERR_DTYPE naming the tensor, OJ_ERR_CORRUPT, OJ_ERR_IO.
 * F32, BF16 and F16 files are converted to f32. */
oj_status oj_gpt_load_safetensors(oj_gpt *m, const char *path, oj_error *err);

/* Read a Hugging Face model directory: config.json (architectures
 * GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM; oj_gpt_config_from_hf) and its weights,
 * model.safetensors or, without it (transformers' order), the shards that
 * model.safetensors.index.json's weight_map names (each file memory-mapped, F32 / BF16 / F16 converted to
 * the f32 parameters). Every tensor is checked (present, float, the shape
 * config.json gives) before the model is returned; of the tensors the
 * model does not use, buffers (GPT-2's attention masks, rotary_emb.inv_freq)
 * and a tied lm_head.weight equal to the embedding are ignored, any other
 * (a layer past num_hidden_layers, a bias the architecture has no flag
 * for) is refused by name (OJ_ERR_SHAPE). *out: a new model owned by the caller
 * (oj_gpt_free), NULL on failure. Errors, each one line naming the file
 * and the field or tensor: OJ_ERR_IO (missing file or shard),
 * OJ_ERR_CORRUPT (bad JSON or safetensors), OJ_ERR_INVALID_ARGUMENT (an
 * unsupported architecture or config field), OJ_ERR_SHAPE / OJ_ERR_DTYPE (a
 * tensor that does not fit the config), OJ_ERR_CAPACITY. */
oj_status oj_gpt_load_dir(oj_engine *eng, const char *dir, oj_gpt **out, oj_error *err);
/* Write a Hugging Face model directory that transformers' from_pretrained
 * and oj_gpt_load_dir read back to the same logits: dir/config.json (the
 * architecture the config is: GPT2LMHeadModel for OJ_GPT2; for OJ_LLAMA
 * Qwen3ForCausalLM with qk_norm, Qwen2ForCausalLM with qkv_bias, else
 * LlamaForCausalLM; sizes, norm eps, rope_theta and rope_scaling "llama3",
 * tie_word_embeddings, torch_dtype) and dir/model.safetensors (the
 * state_dict under its names, which are transformers', in the parameters'
 * dtype, metadata format "pt"; a tied head is left out as save_pretrained
 * leaves it). vocab_size > 0 (at most the model's) keeps only the first
 * vocab_size rows of the embedding and head, e.g. the tokenizer's true size
 * when the model's was padded; 0 keeps the model's. dir is created if
 * missing; each file is written to a temporary sibling and renamed.
 * Errors: OJ_ERR_UNSUPPORTED (a nanolab model, or a llama-family one with
 * both qkv_bias and qk_norm: no transformers class), OJ_ERR_INVALID_ARGUMENT
 * (vocab_size too large), OJ_ERR_IO, OJ_ERR_CAPACITY. */
oj_status oj_gpt_save_hf_dir(const oj_gpt *m, const char *dir, int64_t vocab_size, oj_error *err);
/* Copy a tokenizer directory's files into dst (created if missing) under
 * the names transformers reads: tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, tokenizer.model and generation_config.json as
 * they are; GPT-2's encoder.json / vocab.bpe as vocab.json / merges.txt;
 * and any *.tiktoken rank file (ojas reads it; transformers does not).
 * Each copy is atomic. OJ_ERR_IO when src holds no tokenizer file or a
 * copy fails. */
oj_status oj_hf_copy_files(const char *src, const char *dst, oj_error *err);
/* Fill *cfg from a Hugging Face config.json (its path): GPT2LMHeadModel
 * (n_layer, n_head, n_embd, n_positions, n_inner, vocab_size,
 * layer_norm_epsilon; activation_function gelu_new) becomes OJ_GPT2; the
 * Llama family (hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps,
 * rope_theta, max_position_embeddings, vocab_size, tie_word_embeddings;
 * hidden_act silu; rope_scaling null, "default" or "llama3") OJ_LLAMA,
 * with qkv_bias for Qwen2 and qk_norm for Qwen3.
 * block_size is max_position_embeddings (n_positions), or a Mistral's
 * sliding_window when that is smaller (within it attention is full
 * causal). A field that would change the maths and is not implemented
 * (other rope scalings, attention or MLP biases, another activation, a sliding
 * window in use on Qwen, GPT-2's attention-scaling variants) is refused
 * with OJ_ERR_INVALID_ARGUMENT naming the file and field; OJ_ERR_IO,
 * OJ_ERR_CORRUPT for an unreadable file. */
oj_status oj_gpt_config_from_hf(const char *path, oj_gpt_config *cfg, oj_error *err);

/* LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models",
 * 2021; PEFT's LoraLayer): each adapted linear computes W x + (alpha / r)
 * B A x with A [r, in], B [out, r]. */
typedef struct oj_gpt_lora_config {
    int64_t r;          /* rank, >= 1 */
    double alpha;       /* lora_alpha, > 0 */
    /* comma-separated module names, matched against the last component of
     * each linear's path as PEFT's target_modules list is: gpt2 c_attn,
     * c_proj (attention and MLP), c_fc; llama family q_proj, k_proj,
     * v_proj, o_proj, gate_proj, up_proj, down_proj (q, k, v, o, gate, up,
     * down accepted as short forms). "" or "all-linear": every one. */
    char targets[256];
    double dropout;     /* lora_dropout: 0 only */
} oj_gpt_lora_config;

/* Add LoRA adapters to m (gpt2 or llama family) on the linears lc->targets
 * names, in every block: A initialised as nn.Linear's default (PEFT's
 * kaiming_uniform_(a = sqrt(5)): U(-1 / sqrt(in), 1 / sqrt(in))) from
 * (seed, name), B zero, both f32 requiring grad; every base parameter is
 * frozen (requires_grad off, no gradient, so an optimizer over
 * oj_gpt_lora_params holds no state for it). The adapters are named
 * "<module path>.lora_A.weight" / ".lora_B.weight" with transformers'
 * module paths (PEFT's names without "base_model.model."). Errors, one
 * line naming the field: OJ_ERR_INVALID_ARGUMENT (r < 1, alpha <= 0,
 * dropout != 0, an unknown or empty target, a nanolab model, adapters
 * already added), OJ_ERR_CAPACITY. */
oj_status oj_gpt_lora_add(oj_gpt *m, const oj_gpt_lora_config *lc, uint64_t seed, oj_error *err);
/* The adapters (borrowed; n = 0 when none), in block order. */
oj_named_tensors oj_gpt_lora_params(const oj_gpt *m);
/* m's LoRA config, or NULL when it has no adapters. */
const oj_gpt_lora_config *oj_gpt_lora_get_config(const oj_gpt *m);
/* Write a PEFT adapter directory (created if missing): adapter_config.json
 * (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout 0,
 * target_modules, base_model_name_or_path = base (may be NULL: null),
 * fan_in_fan_out true for gpt2's Conv1D, bias "none") and
 * adapter_model.safetensors (f32, "base_model.model.<module
 * path>.lora_A.weight" / "lora_B.weight"), each written to a temporary
 * sibling and renamed. OJ_ERR_INVALID_ARGUMENT without adapters, OJ_ERR_IO,
 * OJ_ERR_CAPACITY. */
oj_status oj_gpt_lora_save(const oj_gpt *m, const char *dir, const char *base, oj_error *err);
/* Read a PEFT LoRA adapter directory (as oj_gpt_lora_save writes, or
 * PEFT's save_pretrained) onto m, which has no adapters yet: adds them as
 * oj_gpt_lora_add (lora_dropout is ignored: inference; fan_in_fan_out too,
 * as PEFT sets it from the layer) and copies the file's values in
 * (F32 / BF16 / F16). Every expected tensor must be present with its shape
 * and no other tensor may be: errors name the file and field or tensor:
 * OJ_ERR_IO, OJ_ERR_CORRUPT (bad JSON or safetensors),
 * OJ_ERR_INVALID_ARGUMENT (peft_type not LORA, use_rslora, use_dora, bias
 * other than "none", per-layer rank_pattern / alpha_pattern /
 * layers_to_transform, a target the model lacks, an unexpected tensor),
 * OJ_ERR_SHAPE (missing or misshaped tensor), OJ_ERR_DTYPE; on failure m
 * is left without adapters. */
oj_status oj_gpt_lora_load(oj_gpt *m, const char *dir, oj_error *err);
/* Fold the adapters into the base weights (W += (alpha / r) B A, transposed
 * for gpt2's Conv1D [in, out]) and remove them; the base parameters'
 * requires_grad is turned back on. OJ_ERR_INVALID_ARGUMENT without
 * adapters; the engine's errors. */
oj_status oj_gpt_lora_merge(oj_gpt *m, oj_error *err);

/* Forward FLOPs per token for training (6N + 12 L T C; Kaplan et al. 2020
 * and PaLM's appendix B, attention counted with causal masking ignored). */
double oj_gpt_flops_per_token(const oj_gpt *m, int64_t T);

/* Logits [B, T, V] (f32; the weights' dtype after oj_gpt_to_dtype, the
 * autocast dtype under autocast) for idx [B, T] (T <= block_size), recorded on the
 * tape when grad mode is on. Owned by the current scope. */
oj_tensor *oj_gpt_forward(oj_gpt *m, oj_tensor *idx);
/* Mean cross-entropy of next-token prediction: forward then
 * cross_entropy(logits, targets) over all B*T positions (targets < 0 are
 * ignored). Rank-0 f32. */
oj_tensor *oj_gpt_loss(oj_gpt *m, oj_tensor *idx, oj_tensor *targets);

/* ---------------------------------------------------------------- decoding
 * A KV cache of `capacity` positions per sequence for `batch` sequences:
 * keys/values [batch, Hkv, capacity, D] per layer in the weights' dtype
 * (f32 unless oj_gpt_to_dtype), on m's device, charged to the engine's
 * budget. */
typedef struct oj_kv_cache oj_kv_cache;

oj_status oj_kv_cache_create(oj_gpt *m, int64_t batch, int64_t capacity, oj_kv_cache **out);
/* Free c (NULL: nothing), before or after its model; before the engine. */
void oj_kv_cache_free(oj_kv_cache *c);
/* Positions filled so far. */
int64_t oj_kv_cache_len(const oj_kv_cache *c);
void oj_kv_cache_reset(oj_kv_cache *c);

/* Logits [B, T, V] for T new tokens idx [B, T] appended at the cache's
 * current length (positions len..len+T-1); appends their keys/values.
 * Runs with grad mode off. Once len reaches the capacity, a nanolab model
 * keeps decoding one token at a time over a sliding window: the cache is a
 * ring, each new key/value replaces the oldest, and the query attends to
 * the last `capacity` positions (rotary positions keep counting). Errors:
 * OJ_ERR_OUT_OF_RANGE when len + T exceeds the capacity or block_size
 * otherwise (gpt2 and llama end at block_size; a prefill never
 * wraps); OJ_ERR_DTYPE, with autocast off, for a cache whose dtype is not
 * the weights' (made before oj_gpt_to_dtype). */
oj_tensor *oj_gpt_forward_cached(oj_gpt *m, oj_kv_cache *c, oj_tensor *idx);

/* ------------------------------------------------- greedy static decoding
 * One sequence decoded greedily one token per step, with every value that
 * changes from token to token (the position, the cache slot, the
 * attention mask, the next token) held in device tensors: a step launches
 * the same work every time, so on a CUDA engine it is captured into a CUDA
 * graph on first use and replayed for every later token, with no host work
 * but the launch, the read-back of the replay's index checks and that of
 * the new token (PyTorch's static KV cache with CUDA graphs). On the CPU
 * (or with graphs off) the same step runs eagerly; it gives the tokens of
 * oj_generate at temperature 0 (same logits, bit for bit, on the CPU).
 *
 * Usage: create, prefill(prompt) -> first token, then step() -> each next
 * token; prefill again to start another sequence (the graph is kept).
 * The step's attention covers all `capacity` cache slots (the unwritten
 * ones masked), so capacity should be what the sequence needs (prompt +
 * new tokens), not more. */
typedef struct oj_gpt_decoder oj_gpt_decoder;

/* A decoder of one sequence for m with a KV cache of `capacity` positions
 * (> 0; gpt2 needs no more than block_size). use_graph: capture the step
 * into a CUDA graph on a CUDA engine (ignored elsewhere). The graph
 * records the autocast setting of the first step. Errors:
 * OJ_ERR_INVALID_ARGUMENT, OJ_ERR_CAPACITY. Free before m. */
oj_status oj_gpt_decoder_create(oj_gpt *m, int64_t capacity, bool use_graph, oj_gpt_decoder **out);
void oj_gpt_decoder_free(oj_gpt_decoder *d);
/* Start a sequence: run prompt[0..n) (1 <= n <= capacity, ids < V)
 * eagerly into the cache and write the greedy next token (argmax of the
 * last position's logits, lowest id on ties) to *next. Grad mode off.
 * Errors: OJ_ERR_INVALID_ARGUMENT (prompt), OJ_ERR_OUT_OF_RANGE (too long),
 * the model's. */
oj_status oj_gpt_decoder_prefill(oj_gpt_decoder *d, const int32_t *prompt, int64_t n,
                                 int32_t *next);
/* Feed the pending token (the one prefill or the last step returned, or
 * oj_gpt_decoder_set_token's) at the next position and write the greedy
 * token after it to *next. gpt2 and llama stop at min(capacity, block_size)
 * positions (OJ_ERR_OUT_OF_RANGE); nanolab goes on over a sliding window
 * of the last `capacity` positions, as oj_generate. NaN logits are not
 * detected (that would need a read-back): their argmax is returned.
 * next may be NULL: the token is then not read back (a caller that samples
 * from oj_gpt_decoder_logits saves the read). Errors: OJ_ERR_STATE (no
 * prefill), a failed capture or replay. */
oj_status oj_gpt_decoder_step(oj_gpt_decoder *d, int32_t *next);
/* Replace the pending token (e.g. by one sampled from the logits). */
oj_status oj_gpt_decoder_set_token(oj_gpt_decoder *d, int32_t token);
/* Logits [1, 1, V] of the last prefill or step (borrowed: valid until the
 * next call on d), NULL before a prefill. */
oj_tensor *oj_gpt_decoder_logits(const oj_gpt_decoder *d);
/* Positions in the cache (prompt + steps). */
int64_t oj_gpt_decoder_len(const oj_gpt_decoder *d);
/* Whether the steps replay a CUDA graph (after the first step). */
bool oj_gpt_decoder_graphed(const oj_gpt_decoder *d);

/* ------------------------------------------------------ paged KV decoding
 * A pool of fixed-size KV blocks shared by many sequences (vLLM's
 * PagedAttention: Kwon et al., "Efficient Memory Management for Large
 * Language Model Serving with PagedAttention", 2023): per layer keys and
 * values [n_blocks, Hkv, block_size, D] in the weights' dtype on m's
 * device, charged to the engine's current budget. A sequence owns a list
 * of block ids (its block table); which blocks are free is the caller's
 * business (src/serve keeps the free list). */
typedef struct oj_kv_pool oj_kv_pool;

/* A pool of n_blocks blocks of block_size positions each for m (gpt2 or
 * llama family; nanolab's value residual and sliding window are not
 * paged). *out: owned by the caller (oj_kv_pool_free), before m. Errors:
 * OJ_ERR_INVALID_ARGUMENT (sizes <= 0, a nanolab model), OJ_ERR_CAPACITY
 * (the budget cannot hold the blocks; nothing is kept). */
oj_status oj_kv_pool_create(oj_gpt *m, int64_t n_blocks, int64_t block_size, oj_kv_pool **out);
void oj_kv_pool_free(oj_kv_pool *p);
int64_t oj_kv_pool_blocks(const oj_kv_pool *p);
int64_t oj_kv_pool_block_size(const oj_kv_pool *p);
/* Bytes one block holds over all layers (keys and values). */
int64_t oj_kv_pool_block_bytes(const oj_gpt *m, int64_t block_size);

/* One forward over n_seq sequences packed into idx [1, N] (i32/i64):
 * sequence i's new tokens are idx[0, start[i]..start[i+1]) (start[0] = 0,
 * start[n_seq] = N, each at least one token), at positions past[i],
 * past[i] + 1, .. after the past[i] positions it already holds in the
 * pool. Their keys and values are written to blocks blocks[i][p /
 * block_size] (slot p % block_size; blocks[i] holds ceil((past[i] + n) /
 * block_size) ids < n_blocks, distinct between sequences); each sequence
 * attends causally to its own positions only. Every other op works row by
 * row, so on the CPU with OJ_NUMERICS_EXACT a sequence's logits are the
 * bits oj_gpt_forward_cached gives for it alone, whatever else is packed
 * with it. Returns logits [1, n_seq, V] of each sequence's last new token
 * (owned by the current scope), NULL with the engine's error:
 * OJ_ERR_INVALID_ARGUMENT (another model's pool, bad offsets or block
 * ids), OJ_ERR_OUT_OF_RANGE (past block_size), the model's. Grad mode off. */
oj_tensor *oj_gpt_forward_paged(oj_gpt *m, oj_kv_pool *pool, oj_tensor *idx, int64_t n_seq,
                                const int64_t *start, const int64_t *past,
                                const int32_t *const *blocks);

/* One decode step of n_seq sequences, one new token each: tokens[i] at
 * position past[i] of sequence i (blocks[i] as oj_gpt_forward_paged's, for
 * positions 0..past[i]). The batch is padded to a bucket of B = 2^j >=
 * n_seq rows whose extra rows write no key and attend to nothing; the
 * step's inputs (tokens, positions, slots, block tables) are uploaded into
 * the pool's device tensors for that bucket, one upload. With use_graph on
 * a CUDA engine the bucket's step is captured as a CUDA graph on its first
 * use and replayed after (one graph per bucket, freed with the pool);
 * otherwise it runs eagerly, the same kernels. Outputs (host, row i for
 * sequence i; each may be NULL, and only those asked for are read back):
 * logits f32 [n_seq, V]; argmax [n_seq], each row's first largest logit
 * (a NaN counts as largest), and argmax_logprob f32 [n_seq], its
 * log-probability (largest logit - logsumexp, computed on the device; NaN
 * when the row holds one), so a greedy step reads back 8 bytes a row. On
 * the CPU with OJ_NUMERICS_EXACT the logits are the bits
 * oj_gpt_forward_paged gives. Errors: OJ_ERR_INVALID_ARGUMENT (another
 * model's pool, n_seq outside 1..2^20, a token outside the vocabulary,
 * bad block ids), OJ_ERR_OUT_OF_RANGE (past block_size), the model's, the
 * graph's. Grad mode off. */
oj_status oj_gpt_decode_paged(oj_gpt *m, oj_kv_pool *pool, int64_t n_seq, const int32_t *tokens,
                              const int64_t *past, const int32_t *const *blocks, bool use_graph,
                              float *logits, int32_t *argmax, float *argmax_logprob);
/* oj_gpt_decode_paged in two halves, so that a caller can queue other
 * work on the engine (a packed prefill forward of the same pool, whose
 * host-side launches then overlap the step on the device) between the
 * step's launch and its read-back. _begin checks the arguments (as
 * oj_gpt_decode_paged's), uploads the inputs and launches the step (the
 * eager step runs to completion on the CPU); _end reads back the outputs
 * asked for (as oj_gpt_decode_paged's; each may be NULL) and returns the
 * step's status, its graph's index checks included. Every successful
 * _begin needs its _end before the next _begin on the pool (or the
 * pool's free); work queued in between must not write the step's
 * sequences' blocks. Errors: _begin: oj_gpt_decode_paged's, and
 * OJ_ERR_STATE when a step begun has not ended; _end: OJ_ERR_STATE without
 * a step begun, and the step's (read-back, device, index checks). */
oj_status oj_gpt_decode_paged_begin(oj_gpt *m, oj_kv_pool *pool, int64_t n_seq,
                                    const int32_t *tokens, const int64_t *past,
                                    const int32_t *const *blocks, bool use_graph);
oj_status oj_gpt_decode_paged_end(oj_gpt *m, oj_kv_pool *pool, float *logits, int32_t *argmax,
                                  float *argmax_logprob);
/* Whether the bucket of n_seq rows holds a captured graph. */
bool oj_gpt_decode_paged_graphed(const oj_kv_pool *pool, int64_t n_seq);

/* Host-side seconds oj_gpt_decode_paged has spent on a pool since its
 * creation, by phase (CLOCK_MONOTONIC around each). */
typedef struct oj_kv_pool_times {
    int64_t steps;     /* decode steps run */
    double prepare_s;  /* checks and the inputs staged on the host */
    double upload_s;   /* the inputs' one host-to-device copy */
    double launch_s;   /* the graph's launch (eager: the step's kernels queued, or run on the CPU) */
    double wait_s;     /* waiting for the device at the end (only with timing on) */
    double readback_s; /* the outputs' copy to the host (without timing it includes the wait) */
} oj_kv_pool_times;
/* sync true: oj_gpt_decode_paged waits for the device after the launch,
 * so that wait_s and readback_s separate the device's time from the copy
 * (a profile; it costs nothing on the CPU and one synchronisation a step
 * on CUDA, where the read-back would wait anyway). NULL: nothing. */
void oj_kv_pool_set_timing(oj_kv_pool *p, bool sync);
/* p's times (zeros for NULL). */
oj_kv_pool_times oj_kv_pool_get_times(const oj_kv_pool *p);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_GPT_H */
