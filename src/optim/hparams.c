/* Hyperparameter defaults (torch.optim's, Muon's) and their validation. */
#include <math.h>

#include "optim/optim_internal.h"

static oj_optim_hparams base(oj_optim_algo algo, double lr) {
    oj_optim_hparams h = {0};
    h.algo = algo;
    h.lr = lr;
    h.beta1 = 0.9;
    h.beta2 = 0.999;
    h.eps = 1e-8;
    h.ns_steps = 5;
    return h;
}

oj_optim_hparams oj_sgd_hparams(double lr) { return base(OJ_OPTIM_SGD, lr); }
oj_optim_hparams oj_adam_hparams(double lr) { return base(OJ_OPTIM_ADAM, lr); }

oj_optim_hparams oj_adamw_hparams(double lr, double weight_decay) {
    oj_optim_hparams h = base(OJ_OPTIM_ADAMW, lr);
    h.weight_decay = weight_decay;
    return h;
}

oj_optim_hparams oj_muon_hparams(double lr) {
    oj_optim_hparams h = base(OJ_OPTIM_MUON, lr);
    h.momentum = 0.95;
    h.nesterov = true;
    return h;
}

const char *oj__optim_algo_name(oj_optim_algo a) {
    switch (a) {
    case OJ_OPTIM_SGD: return "sgd";
    case OJ_OPTIM_ADAM: return "adam";
    case OJ_OPTIM_ADAMW: return "adamw";
    case OJ_OPTIM_MUON: return "muon";
    }
    return "invalid";
}

#define BAD(...) oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, __VA_ARGS__)

oj_status oj__optim_hparams_check(oj_engine *eng, const oj_optim_hparams *hp) {
    if (hp == NULL) return BAD("optim: hyperparameters are NULL");
    if ((unsigned)hp->algo > OJ_OPTIM_MUON)
        return BAD("optim: unknown algorithm %d", (int)hp->algo);
    const char *a = oj__optim_algo_name(hp->algo);
    if (!(isfinite(hp->lr) && hp->lr >= 0))
        return BAD("optim %s: lr %g must be finite and >= 0", a, hp->lr);
    if (!(isfinite(hp->weight_decay) && hp->weight_decay >= 0))
        return BAD("optim %s: weight_decay %g must be finite and >= 0", a, hp->weight_decay);
    switch (hp->algo) {
    case OJ_OPTIM_SGD:
        if (!(hp->momentum >= 0 && hp->momentum < 1))
            return BAD("optim sgd: momentum %g must be in [0, 1)", hp->momentum);
        if (!(hp->dampening >= 0 && hp->dampening <= 1))
            return BAD("optim sgd: dampening %g must be in [0, 1]", hp->dampening);
        if (hp->nesterov && (hp->momentum <= 0 || hp->dampening != 0))
            return BAD("optim sgd: nesterov needs momentum > 0 and dampening 0 (momentum %g, "
                       "dampening %g)",
                       hp->momentum, hp->dampening);
        break;
    case OJ_OPTIM_ADAM:
    case OJ_OPTIM_ADAMW:
        if (!(hp->beta1 >= 0 && hp->beta1 < 1) || !(hp->beta2 >= 0 && hp->beta2 < 1))
            return BAD("optim %s: betas (%g, %g) must be in [0, 1)", a, hp->beta1, hp->beta2);
        if (!(isfinite(hp->eps) && hp->eps >= 0))
            return BAD("optim %s: eps %g must be finite and >= 0", a, hp->eps);
        break;
    case OJ_OPTIM_MUON:
        if (!(hp->momentum >= 0 && hp->momentum < 1))
            return BAD("optim muon: momentum %g must be in [0, 1)", hp->momentum);
        if (hp->ns_steps < 1 || hp->ns_steps > 100)
            return BAD("optim muon: ns_steps %d must be in [1, 100]", hp->ns_steps);
        break;
    }
    return OJ_OK;
}
