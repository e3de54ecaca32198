/* The trainer's memory preflight: before the model is created, its weights,
 * gradients, optimizer state and a lower bound of one micro-batch's saved
 * activations are checked against the engine's budget. */
#include "core/internal.h"
#include "train/train_internal.h"

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
static int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

oj_status oj__train_preflight(oj_trainer *t, oj_error *err) {
    const oj_gpt_config *m = &t->mcfg;
    const int64_t np = oj_gpt_config_num_params(m);
    if (np < 0)
        return OJ_OK; /* a bad config is reported by oj_gpt_create */
    const int64_t weights = sat_mul(np, 4), grads = weights;
    /* AdamW keeps two f32 moments per parameter; Muon one momentum buffer
     * (its AdamW groups keep two: one is the lower bound) */
    const int64_t optim = sat_mul(weights, t->cfg.optimizer == OJ_TRAIN_MUON ? 1 : 2);
    /* saved for backward, at the least: per layer the block's input, the
     * attention output and the MLP's hidden activations of one micro-batch,
     * in the autocast dtype (the loss is fused: no logits are kept) */
    const int64_t ab = t->cfg.dtype == OJ_TRAIN_F32 ? 4 : 2;
    const int64_t bt = sat_mul(t->cfg.batch_size, t->T);
    const int64_t act = sat_mul(sat_mul(m->n_layer, bt), sat_mul(2 * m->n_embd + m->mlp_hidden, ab));
    const int64_t need = sat_add(sat_add(weights, grads), sat_add(optim, act));
    oj_budget *tight = NULL;
    const int64_t room = oj__budget_room(t->eng, &tight);
    if (need <= room)
        return OJ_OK;
    return oj_error_set(err, OJ_ERR_CAPACITY,
                        "memory: training %lld parameters needs at least %lld bytes (weights %lld, "
                        "gradients %lld, optimizer state %lld, activations of B %lld x T %lld "
                        "%lld), more than the %lld bytes of budget '%s' (budget_bytes; 0 is what "
                        "the machine can give); nothing was allocated",
                        (long long)np, (long long)need, (long long)weights, (long long)grads,
                        (long long)optim, (long long)t->cfg.batch_size, (long long)t->T,
                        (long long)act, (long long)room, oj_budget_name(tight));
}
