/* Internal definitions of the optimizer (src/optim). */
#ifndef OJAS_OPTIM_INTERNAL_H
#define OJAS_OPTIM_INTERNAL_H

#include "backend/backend.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

/* One parameter and its state (state tensors owned, unscoped). */
typedef struct oj_optim_slot {
    char *name;
    oj_tensor *param;                /* borrowed */
    oj_tensor *exp_avg, *exp_avg_sq; /* Adam(W) */
    oj_tensor *momentum_buffer;      /* SGD with momentum, Muon */
    oj_tensor *step_tensor;          /* rank-0 i64 mirror of step, for the state_dict */
    int64_t step;                    /* updates applied to this parameter */
    /* Set by oj_optim_clip_grad_norm for the next step: the grad it saw
     * (retained, so the handle cannot be reused by another tensor), that
     * grad's storage version after the clip's own scaling, and its norm
     * after the scaling (the norm before times the clip factor). The step
     * reuses the norm only while param->grad is that handle at that
     * version; the step and zero_grad drop it. */
    oj_tensor *clip_grad;
    uint64_t clip_version;
    double clip_norm;
    /* the step's multi-tensor kernel was given param's kept bf16 copy
     * (oj_optim_set_weight_copies; 2: its transpose's): mark_written
     * declares it current */
    int low_queued;
    /* The bounds of the values the last gated step wrote (adam_step_multi's
     * bound_at words: max |p|, max |m|, max v), valid while bnd_st[0] is
     * not NULL and param, exp_avg and exp_avg_sq still have the storages
     * bnd_st (retained, so no other tensor can take their addresses),
     * offsets bnd_off and versions bnd_ver: the next step's check pass may
     * then be proven unnecessary (step.c, oj__optim_adam_safe_grad). */
    float bnd[3];
    oj_storage *bnd_st[3];
    int64_t bnd_off[3];
    uint64_t bnd_ver[3];
} oj_optim_slot;

typedef struct oj_optim_group {
    oj_optim_hparams hp;
    oj_optim_algo algo; /* hp.algo at creation (the state depends on it) */
    bool momentum;      /* SGD: momentum buffers were allocated */
    int64_t n;
    oj_optim_slot *params;
} oj_optim_group;

struct oj_optim {
    oj_engine *eng;
    oj_optim_group *groups;
    int ngroups;
    double lr_scale;
    bool check_update;
    bool weight_copies; /* oj_optim_set_weight_copies */
    int64_t steps, skipped;
    int64_t checks_proven; /* gated steps whose check pass the bounds made unnecessary */
    char message[512];
    oj_tensor *counters; /* i64 [2]: steps, skipped (state_dict mirror) */
    /* state_dict view, rebuilt by oj_optim_state */
    char **sd_names;
    oj_tensor **sd_tensors;
    int64_t sd_n, sd_cap;
};

/* OJ_OK, or OJ_ERR_INVALID_ARGUMENT recorded on eng naming the bad field. */
oj_status oj__optim_hparams_check(oj_engine *eng, const oj_optim_hparams *hp);
/* Name of an algorithm ("sgd", "adam", "adamw", "muon"). */
const char *oj__optim_algo_name(oj_optim_algo a);
/* A parameter tensor the optimizer can update: f32/f64 and a contiguous
 * leaf (check_tensor), 2-D for Muon (check_muon_shape). Checked when it is
 * added and, with later, at each step (its data may have been replaced
 * since: oj_set_data, oj_params_to_dtype; the message says so). OJ_OK or
 * the error recorded on eng. */
oj_status oj__optim_check_tensor(oj_engine *eng, const oj_optim_hparams *hp, const char *name,
                                 const oj_tensor *t, bool later);
oj_status oj__optim_check_muon_shape(oj_engine *eng, const oj_optim_hparams *hp, const char *name,
                                     const oj_tensor *t, bool later);
/* L2 norm of t accumulated in double (backend reduce); NaN with an error
 * recorded when the kernel fails. t non-NULL and live. */
double oj__optim_tensor_norm(oj_tensor *t);
/* out[i] = L2 norm of ts[i] (0 for NULL) for n tensors of eng; on a device
 * with one host read-back for all of them. */
oj_status oj__optim_norms(oj_engine *eng, int64_t n, oj_tensor *const *ts, double *out);
/* Do the n tensors (contiguous; NULL entries skipped) occupy disjoint
 * bytes? Multi-tensor entries write their tensors in no promised order,
 * so they are used only when this holds. */
bool oj__optim_disjoint(int64_t n, oj_tensor *const *ts);
/* A zero tensor shaped like t (dtype dt), unscoped; NULL with the error
 * recorded. */
oj_tensor *oj__optim_zeros_unscoped(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt);
/* Muon updates of k >= 1 parameters ps[j] of one shape [r, c] and dtype
 * (f32/f64) with gradients grads[j] (contiguous) and one hp: updates[j] =
 * the orthogonalised update (a new scoped tensor, contiguous, [r, c]: a
 * view of one stack), computed from the momentum buffer and grad without
 * touching either. The momentum outputs are written into one [k, r, c]
 * stack, normalised per matrix on the device, and the Newton-Schulz
 * iteration runs on the stack with batched products. On failure the
 * updates are NULL and the error is recorded. */
oj_status oj__muon_update_batch(int64_t k, oj_optim_slot *const *ps, oj_tensor *const *grads,
                                const oj_optim_hparams *hp, oj_tensor **updates);
/* oj_optim_clip_grad_norm, calling after_norm(ctx) (when not NULL) once
 * the norms are read back and before the grads are scaled: on a device
 * the stream is then drained, so a read-back there waits for no work.
 * The results are oj_optim_clip_grad_norm's. (The trainer uses
 * oj__optim_clip_step instead.) */
double oj__optim_clip_grad_norm_then(oj_optim *o, double max_norm, void (*after_norm)(void *),
                                     void *ctx);
/* The trainer's clip and optimizer step: the grads clipped to a global
 * norm of max_norm (oj_optim_clip_grad_norm; max_norm 0: no clip), then
 * oj_optim_step, with its results (OJ_OK, OJ_ERR_NUMERIC for a skipped
 * step with the reason in oj_optim_message, other errors recorded on the
 * engine) and *info. *norm_out = the global gradient norm before the clip
 * (NaN when it could not be computed). On a device whose backend has
 * step_gate_open (CUDA) and with no SGD group, the norm, the clip factor
 * and the skip decision stay on the device and the host reads them back
 * once, after the update is queued; the gradients are then not scaled in
 * place (the update reads them scaled). Elsewhere the clip scales them in
 * place first. Either way the parameters and state get the same bits. */
oj_status oj__optim_clip_step(oj_optim *o, double max_norm, double *norm_out,
                              oj_optim_step_info *info);
/* What the trainer does while a step's update is queued (see
 * oj__optim_clip_step_then). while_queued(ctx) (may be NULL) runs once the
 * update is queued and before the host waits for it. ahead: while_queued
 * may queue work that rewrites the gradients (the next step's forward and
 * backward), so on a device with the gate the step's read-back is queued
 * before it (oj__read_defer) and waited for after (oj__read_wait, which
 * also fills what while_queued deferred), the parameters are marked
 * written before it (their kept low-precision copies then stay right:
 * a refused update writes neither), and rewind(ctx) (not NULL) puts this
 * step's gradients back before a refused update is named. */
typedef struct oj__step_hooks {
    void (*while_queued)(void *ctx);
    bool ahead;
    void (*rewind)(void *ctx);
    void *ctx;
} oj__step_hooks;
/* oj__optim_clip_step with hooks (NULL: none): while_queued is called on
 * a device with the gate before its one read-back, elsewhere after the
 * step returned (then a deferred read is waited for after it); it is not
 * called when the step fails before its update is queued. */
oj_status oj__optim_clip_step_then(oj_optim *o, double max_norm, double *norm_out,
                                   oj_optim_step_info *info, const oj__step_hooks *hooks);
/* Release every slot's clip cache (clip_grad). */
void oj__optim_clip_cache_clear(oj_optim *o);
/* Drop the groups from index `ngroups` on, freeing their state. */
void oj__optim_truncate_groups(oj_optim *o, int ngroups);
/* The largest power of 2 G in [2^-20, 2^100] such that the Adam/AdamW
 * update with hyperparameters a (f32 kernels' rounding, f64's within the
 * margin) keeps every value it computes finite for any |g| <= G, |p| <=
 * b[0], |m| <= b[1], 0 <= v <= b[2]; -1 when none is (or the bounds or
 * hyperparameters do not allow a proof). step.c, the proven check. */
double oj__optim_adam_safe_grad(const oj_adam_args *a, const float *b);
/* Forget p's bounds (oj_optim_slot.bnd), releasing their storages. */
void oj__optim_bounds_drop(oj_optim_slot *p);
/* sqrt(max(1, rows / cols)) for a [rows, cols] parameter. */
double oj__muon_scale(const oj_tensor *param);

#endif /* OJAS_OPTIM_INTERNAL_H */
