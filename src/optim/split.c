/* Splitting a model's parameters between Muon (hidden matrices) and AdamW
 * (embeddings, head, norms, biases), as in Keller Jordan's Muon setups. */
#include <stdlib.h>
#include <string.h>

#include "optim/optim_internal.h"

static const char *const default_excludes[] = {"wte",  "wpe", "embed", "lm_head",
                                               "norm", "ln_", "bias",  NULL};

const char *const *oj_muon_default_excludes(void) { return default_excludes; }

bool oj_muon_eligible(const char *name, const oj_tensor *t, const char *const *exclude) {
    if (name == NULL || !oj__live(t) || t->rank != 2) return false;
    if (exclude == NULL) exclude = default_excludes;
    for (int i = 0; exclude[i] != NULL; i++)
        if (strstr(name, exclude[i]) != NULL) return false;
    return true;
}

int oj_optim_add_muon_split(oj_optim *o, const oj_named_tensors *params,
                            const oj_optim_hparams *muon, const oj_optim_hparams *adamw,
                            const oj_optim_hparams *adamw_1d, const char *const *exclude) {
    if (o == NULL) return -1;
    oj_engine *eng = o->eng;
    if (params == NULL || params->n < 0 ||
        (params->n > 0 && (!params->names || !params->tensors))) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "optim muon split: no parameter list");
        return -1;
    }
    if (muon == NULL || muon->algo != OJ_OPTIM_MUON || adamw == NULL ||
        adamw->algo == OJ_OPTIM_MUON || (adamw_1d && adamw_1d->algo == OJ_OPTIM_MUON)) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "optim muon split: need Muon hyperparameters and non-Muon ones for the rest");
        return -1;
    }
    for (int64_t i = 0; i < params->n; i++)
        if (!oj__live(params->tensors[i])) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "optim muon split: tensor '%s' is %s",
                         params->names[i] ? params->names[i] : "(null)",
                         params->tensors[i] ? "released" : "NULL");
            return -1;
        }
    size_t n = params->n ? (size_t)params->n : 1;
    const char **names = malloc(3 * n * sizeof *names);
    oj_tensor **ts = malloc(3 * n * sizeof *ts);
    if (names == NULL || ts == NULL) {
        free(names);
        free(ts);
        oj_set_error(eng, OJ_ERR_CAPACITY, "optim muon split: out of host memory");
        return -1;
    }
    int64_t cnt[3] = {0, 0, 0};
    for (int64_t i = 0; i < params->n; i++) {
        oj_tensor *t = params->tensors[i];
        int k = oj_muon_eligible(params->names[i], t, exclude) ? 0
                : (t->rank >= 2 || !adamw_1d)                  ? 1
                                                               : 2;
        names[(size_t)k * n + (size_t)cnt[k]] = params->names[i];
        ts[(size_t)k * n + (size_t)cnt[k]] = t;
        cnt[k]++;
    }
    const oj_optim_hparams *hps[3] = {muon, adamw, adamw_1d};
    int ngroups = adamw_1d ? 3 : 2, first = -1, before = o->ngroups;
    for (int k = 0; k < ngroups; k++) {
        oj_named_tensors nt = {
            .n = cnt[k], .names = names + (size_t)k * n, .tensors = ts + (size_t)k * n};
        int g = oj_optim_add_group(o, hps[k], &nt);
        if (g < 0) {
            first = -1;
            break;
        }
        if (k == 0) first = g;
    }
    if (first < 0) oj__optim_truncate_groups(o, before); /* roll back */
    free(names);
    free(ts);
    return first;
}
