/* ojas optim: SGD, Adam, AdamW and Muon over named parameter tensors,
 * parameter groups, learning-rate schedules, gradient clipping, and an
 * optimizer state_dict.
 *
 * SGD, Adam and AdamW follow torch.optim (PyTorch 1.13, single-tensor path)
 * op by op: same update order, eps placement and bias correction, per
 * parameter step counts, parameters whose grad is NULL left alone; 100 steps
 * on the same gradients match torch to 1e-6 relative in f32
 * (tests/reference/test_optim.py). The arithmetic runs in the backend's
 * fused kernel entries (adam_step, sgd_step, muon_momentum, apply_update),
 * so it runs wherever the parameters live.
 *
 * A step is all or nothing: when the global gradient norm is not finite, or
 * (with check_update on, the default) some parameter or state value would
 * become non-finite, nothing is changed, the step is counted as skipped and
 * reported (OJ_ERR_NUMERIC with a message from oj_optim_message). */
#ifndef OJAS_OPTIM_H
#define OJAS_OPTIM_H

#include "ojas/core.h"
#include "ojas/io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- hyperparameters */

typedef enum oj_optim_algo {
    OJ_OPTIM_SGD = 0,
    OJ_OPTIM_ADAM = 1,
    OJ_OPTIM_ADAMW = 2,
    OJ_OPTIM_MUON = 3,
} oj_optim_algo;

/* Hyperparameters of one parameter group. The learning rate a step uses is
 * lr * the optimizer's lr scale (oj_optim_set_lr_scale, e.g. a schedule's
 * factor). Fields an algorithm does not use are ignored. */
typedef struct oj_optim_hparams {
    oj_optim_algo algo;
    double lr;           /* > 0 */
    double weight_decay; /* >= 0; SGD/Adam: L2 added to the gradient; AdamW/Muon: decoupled */
    double momentum;     /* SGD, Muon; in [0, 1) */
    double dampening;    /* SGD */
    bool nesterov;       /* SGD (needs momentum > 0, dampening 0), Muon */
    double beta1, beta2; /* Adam(W); in [0, 1) */
    double eps;          /* Adam(W); >= 0 */
    int ns_steps;        /* Muon: Newton-Schulz iterations (>= 1) */
} oj_optim_hparams;

/* torch.optim.SGD defaults: momentum 0, dampening 0, no nesterov, wd 0. */
oj_optim_hparams oj_sgd_hparams(double lr);
/* torch.optim.Adam defaults: betas (0.9, 0.999), eps 1e-8, wd 0. */
oj_optim_hparams oj_adam_hparams(double lr);
/* torch.optim.AdamW defaults: betas (0.9, 0.999), eps 1e-8, wd 0.01. */
oj_optim_hparams oj_adamw_hparams(double lr, double weight_decay);
/* Muon defaults (Keller Jordan, 2024): momentum 0.95, nesterov, 5
 * Newton-Schulz steps, wd 0. Typical lr 0.02. */
oj_optim_hparams oj_muon_hparams(double lr);

/* ---------------------------------------------------------------- optimizer */

/* An optimizer: parameter groups, each with its algorithm, hyperparameters
 * and parameters (borrowed leaf tensors; they must outlive the optimizer),
 * and per parameter its state (moments, momentum buffer, step count), owned
 * by the optimizer, unscoped, on the parameters' device. */
typedef struct oj_optim oj_optim;

/* A new optimizer without groups, or NULL with OJ_ERR_CAPACITY recorded on
 * eng. Free with oj_optim_free. */
oj_optim *oj_optim_create(oj_engine *eng);
/* Free the optimizer and its state (not the parameters). NULL is a no-op. */
void oj_optim_free(oj_optim *o);
oj_engine *oj_optim_engine(const oj_optim *o);

/* Add a group of `params` (names copied; names unique across the whole
 * optimizer, tensors not already in a group) with hyperparameters *hp.
 * Every tensor must be a contiguous f32 or f64 leaf on eng's device; Muon
 * takes rank-2 tensors only. Tensors that do not require grad (frozen,
 * buffers) are left out. State is allocated now (zeros). Returns the group
 * index, or -1 with the error recorded on the engine:
 * OJ_ERR_INVALID_ARGUMENT (bad hyperparameter, duplicate name or tensor,
 * NULL), OJ_ERR_DTYPE, OJ_ERR_SHAPE (Muon and rank != 2), OJ_ERR_DEVICE,
 * OJ_ERR_CAPACITY. On failure the optimizer is unchanged. */
int oj_optim_add_group(oj_optim *o, const oj_optim_hparams *hp, const oj_named_tensors *params);

int oj_optim_group_count(const oj_optim *o);

/* Keep each parameter's autocast copy between steps (on), or drop the
 * copies (off; the default). Under autocast a forward casts every f32
 * weight to bf16/f16 before its GEMM; with copies kept, that cast is made
 * once into memory kept for the parameter and read by later forwards
 * while the parameter is unchanged. The optimizer's step writes the copy
 * in its own update pass where its kernel can (CUDA: AdamW, also a copy
 * of the transpose such as gpt2's Conv1D weights; Muon's batched step); any
 * other copy is made again by the first cast after a write (the step,
 * oj_copy_, loads, init: any write that bumps oj_version), or before a
 * CUDA graph replay. The values are the cast's, bit for bit: results are
 * unchanged. Costs one copy per parameter and view cast (half an f32
 * parameter's bytes for bf16), held until the parameter is freed or
 * copies are turned off; a copy first needed during a graph capture
 * is filled before the replay. Applies to the parameters in o now and added
 * later; a parameter cast through more than 4 views keeps copies of the
 * first 4. OJ_ERR_INVALID_ARGUMENT for a NULL o; OJ_ERR_STATE turning
 * them off while the engine holds CUDA graphs (a graph may read them). */
oj_status oj_optim_set_weight_copies(oj_optim *o, bool on);
bool oj_optim_weight_copies(const oj_optim *o);
/* The hyperparameters of `group`, writable (e.g. to change lr or
 * weight_decay between steps; changing algo is not allowed). NULL when out
 * of range. */
oj_optim_hparams *oj_optim_group_hparams(oj_optim *o, int group);
/* Parameters in `group` (0 when out of range), and the name / tensor of the
 * i-th (borrowed; NULL when out of range). */
int64_t oj_optim_group_size(const oj_optim *o, int group);
const char *oj_optim_param_name(const oj_optim *o, int group, int64_t i);
oj_tensor *oj_optim_param(const oj_optim *o, int group, int64_t i);

/* Multiplier applied to every group's lr (default 1). */
void oj_optim_set_lr_scale(oj_optim *o, double scale);
double oj_optim_lr_scale(const oj_optim *o);
/* Check that no parameter or state value becomes non-finite before writing
 * (default on; costs one extra read-only pass over the state). Returns the
 * previous setting. */
bool oj_optim_set_check_update(oj_optim *o, bool on);

/* What a step did. */
typedef struct oj_optim_step_info {
    bool skipped;     /* nothing was changed */
    double grad_norm; /* global L2 norm of the gradients seen by the step */
    int64_t params_updated;
} oj_optim_step_info;

/* One optimization step over every group, using each parameter's current
 * grad (parameters whose grad is NULL are skipped and keep their step
 * count). Runs with grad mode off. Returns OJ_OK when applied;
 * OJ_ERR_NUMERIC when skipped because a gradient or a resulting value is
 * not finite (nothing changed, oj_optim_skipped_steps incremented, the
 * reason in oj_optim_message; NOT recorded on the engine, so training can
 * go on); other codes (recorded on the engine) when a kernel fails, in
 * which case parameters may be partly updated. A parameter whose data was
 * replaced after it was added (oj_set_data, oj_params_to_dtype) so that
 * it no longer fits its state (dtype, shape, a contiguous f32/f64 leaf) is
 * refused before anything is written: OJ_ERR_STATE / OJ_ERR_DTYPE /
 * OJ_ERR_INVALID_ARGUMENT naming it. info may be NULL. */
oj_status oj_optim_step(oj_optim *o, oj_optim_step_info *info);
/* Drop the grad of every parameter (oj_zero_grad). */
void oj_optim_zero_grad(oj_optim *o);
/* Steps applied / skipped since creation (both saved in the state). */
int64_t oj_optim_steps(const oj_optim *o);
int64_t oj_optim_skipped_steps(const oj_optim *o);
/* Why the last step was skipped ("" if it was not). Owned by o. */
const char *oj_optim_message(const oj_optim *o);

/* ---------------------------------------------------------------- state_dict
 * Names: "<param>.exp_avg", "<param>.exp_avg_sq" (Adam, AdamW),
 * "<param>.momentum_buffer" (SGD with momentum, Muon), "<param>.step"
 * (rank-0 i64, per parameter), and "__optim__.counters" (i64 [2]: steps
 * applied, skipped). Moments have their parameter's dtype and shape. */

/* The state as named tensors (borrowed; valid until the next call on o),
 * step tensors refreshed from the counters first. For oj_checkpoint_save.
 * OJ_ERR_CAPACITY / device errors recorded on the engine. */
oj_status oj_optim_state(oj_optim *o, oj_named_tensors *out);
/* After bytes were loaded into the tensors oj_optim_state returned (e.g. by
 * oj_checkpoint_load), take the step counts back from them. OJ_ERR_CORRUPT
 * (recorded) for a negative count, and then nothing changes. */
oj_status oj_optim_state_sync(oj_optim *o);
/* Save the state to a safetensors file (oj_safetensors_save). */
oj_status oj_optim_save(oj_optim *o, const char *path, oj_error *err);
/* Load a file written by oj_optim_save into this optimizer, strictly: the
 * file must hold exactly the names of oj_optim_state with the same shapes
 * and dtypes (OJ_ERR_SHAPE / OJ_ERR_DTYPE naming the tensor), counts >= 0
 * (OJ_ERR_CORRUPT). Everything is checked before anything changes; a
 * failed load changes nothing. */
oj_status oj_optim_load(oj_optim *o, const char *path, oj_error *err);

/* ---------------------------------------------------------------- Muon split */

/* Default name patterns that keep a rank-2 tensor out of Muon: "wte",
 * "wpe", "embed", "lm_head", "norm", "ln_", "bias". NULL-terminated. */
const char *const *oj_muon_default_excludes(void);
/* True when `t` suits Muon: rank 2 and `name` contains none of the
 * NULL-terminated substrings in `exclude` (NULL: the defaults). */
bool oj_muon_eligible(const char *name, const oj_tensor *t, const char *const *exclude);
/* Split `params` (e.g. a model's state_dict) and add groups: group g0 =
 * Muon(*muon) with the eligible hidden matrices, g0 + 1 = AdamW(*adamw)
 * with the other tensors of rank >= 2 (embeddings, head) and, when adamw_1d
 * is NULL, also those of rank 0/1 (norms, biases); with adamw_1d a third
 * group g0 + 2 = *adamw_1d (e.g. weight_decay 0) takes rank 0/1. Groups are
 * added even when empty, so indices are fixed. Returns g0, or -1 (error
 * recorded on the engine, optimizer unchanged). muon->algo must be
 * OJ_OPTIM_MUON; adamw/adamw_1d any of SGD/Adam/AdamW. */
int oj_optim_add_muon_split(oj_optim *o, const oj_named_tensors *params,
                            const oj_optim_hparams *muon, const oj_optim_hparams *adamw,
                            const oj_optim_hparams *adamw_1d, const char *const *exclude);

/* Newton-Schulz orthogonalisation as Muon uses it (Jordan 2024): G [M, N]
 * f32/f64 -> X ~ U V^T of G = U S V^T, with X = G / (||G||_F + 1e-7),
 * transposed when M > N, then `steps` times X <- a X + (b A + c A^2) X,
 * A = X X^T, (a, b, c) = (3.4445, -4.7750, 2.0315). Computed with
 * oj_matmul in G's dtype. A new tensor owned by the current scope, or NULL
 * with the error recorded. Not recorded by autograd. */
oj_tensor *oj_newton_schulz5(oj_tensor *g, int steps);

/* ---------------------------------------------------------------- clipping */

/* Global L2 norm of the grads of `params` (n tensors; NULL grads count as
 * zero), accumulated in double. NaN with the error recorded for a NULL or
 * released tensor. */
double oj_grad_norm(int64_t n, oj_tensor *const *params);
/* torch.nn.utils.clip_grad_norm_: when the global norm exceeds max_norm
 * (> 0), every grad is scaled by max_norm / (norm + 1e-6). Returns the norm
 * before clipping. A non-finite norm leaves the grads as they are (the step
 * that follows will be skipped) and is returned as is. NaN with the error
 * recorded on a bad argument. */
double oj_clip_grad_norm(int64_t n, oj_tensor *const *params, double max_norm);
/* The same over every parameter of the optimizer. */
double oj_optim_clip_grad_norm(oj_optim *o, double max_norm);

/* ---------------------------------------------------------------- schedules
 * A learning-rate schedule gives a factor for step s (0-based: the step
 * about to be taken), to multiply the base lr by (oj_optim_set_lr_scale).
 * Every kind starts with a linear warmup when warmup_steps > 0: factor
 * (s + 1) / warmup_steps for s < warmup_steps (nanoGPT's form). */
typedef enum oj_lr_kind {
    OJ_LR_CONSTANT = 0, /* 1 after warmup */
    OJ_LR_COSINE =
        1,          /* cosine from 1 at warmup_steps to min_ratio at total_steps, then min_ratio */
    OJ_LR_WSD = 2,  /* warmup-stable-decay: 1 until total_steps - decay_steps, then linear to
                           min_ratio at total_steps (Hu et al., MiniCPM, 2024) */
    OJ_LR_STEP = 3, /* gamma ^ floor((s - warmup_steps) / step_size) (torch StepLR) */
} oj_lr_kind;

typedef struct oj_lr_schedule {
    oj_lr_kind kind;
    int64_t warmup_steps; /* >= 0 */
    int64_t total_steps;  /* COSINE, WSD: > warmup_steps */
    int64_t decay_steps;  /* WSD: 0 < decay_steps <= total_steps - warmup_steps */
    int64_t step_size;    /* STEP: > 0 */
    double gamma;         /* STEP */
    double min_ratio;     /* COSINE, WSD: final factor in [0, 1] */
} oj_lr_schedule;

oj_lr_schedule oj_lr_constant(int64_t warmup_steps);
oj_lr_schedule oj_lr_cosine(int64_t warmup_steps, int64_t total_steps, double min_ratio);
oj_lr_schedule oj_lr_wsd(int64_t warmup_steps, int64_t total_steps, int64_t decay_steps,
                         double min_ratio);
oj_lr_schedule oj_lr_step(int64_t warmup_steps, int64_t step_size, double gamma);
/* OJ_OK or OJ_ERR_INVALID_ARGUMENT with a message naming the bad field. */
oj_status oj_lr_schedule_check(const oj_lr_schedule *s, oj_error *err);
/* The factor at step s (< 0 is treated as 0). NaN for an invalid schedule. */
double oj_lr_schedule_factor(const oj_lr_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_OPTIM_H */
