/* Checkpoints of a training run: state.json (step, tokens seen, RNG, loader
 * position, the config and the resolved model config), save and resume. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ojas/io.h"
#include "train/train_internal.h"

/* uint64 as a JSON integer when it fits int64, else as a decimal string. */
static json_t *json_u64(uint64_t v) {
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return json_string(buf);
}

static bool get_u64(const json_t *obj, const char *key, uint64_t *out) {
    const json_t *v = json_object_get(obj, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(json_string_value(v), &end, 10);
        if (!errno && *end == 0 && end != json_string_value(v)) {
            *out = u;
            return true;
        }
    }
    return false;
}

static bool get_i64(const json_t *obj, const char *key, int64_t *out) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

static json_t *model_json(const oj_train_config *c, const oj_gpt_config *m) {
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "preset",
                     c->model, "family", oj_gpt_family_name(m->family), "vocab_size",
                     (json_int_t)m->vocab_size, "block_size", (json_int_t)m->block_size, "n_layer",
                     (json_int_t)m->n_layer, "n_head", (json_int_t)m->n_head, "n_kv_head",
                     (json_int_t)m->n_kv_head, "n_embd", (json_int_t)m->n_embd, "mlp_hidden",
                     (json_int_t)m->mlp_hidden, "norm_eps", m->norm_eps, "rope_theta",
                     m->rope_theta, "init_std", m->init_std);
}

char *oj__train_state_json(const oj_trainer *t) {
    oj_loader_state ls;
    oj_loader_get_state(t->train, &ls);
    json_t *loader = json_object();
    json_object_set_new(loader, "seed", json_u64(ls.seed));
    json_object_set_new(loader, "epoch", json_u64(ls.epoch));
    json_object_set_new(loader, "step", json_u64(ls.step));
    json_object_set_new(loader, "n_windows", json_integer(ls.n_windows));
    json_object_set_new(loader, "B", json_integer(ls.B));
    json_object_set_new(loader, "T", json_integer(ls.T));
    json_object_set_new(loader, "rank", json_integer(ls.rank));
    json_object_set_new(loader, "world_size", json_integer(ls.world_size));
    json_object_set_new(loader, "shuffle", json_integer(ls.shuffle));
    json_t *rng = json_object();
    json_object_set_new(rng, "seed", json_u64(oj_engine_seed(t->eng)));
    json_object_set_new(rng, "offset", json_u64(oj_rng_offset(t->eng)));
    json_t *root = json_object();
    json_object_set_new(root, "tokens_seen", json_integer(t->tokens));
    json_object_set_new(root, "rng", rng);
    json_object_set_new(root, "loader", loader);
    json_object_set_new(root, "model", model_json(&t->cfg, &t->mcfg));
    json_object_set_new(root, "config", oj__train_config_json(&t->cfg));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    return s;
}

oj_status oj__train_restore_state(oj_trainer *t, const json_t *state, oj_error *err) {
    const json_t *lj = json_object_get(state, "loader"), *rj = json_object_get(state, "rng");
    oj_loader_state ls;
    int64_t step, tokens, i64;
    uint64_t rseed, roff;
    bool ok = get_i64(state, "step", &step) && get_i64(state, "tokens_seen", &tokens) &&
              step >= 0 && tokens >= 0 && get_u64(rj, "seed", &rseed) &&
              get_u64(rj, "offset", &roff) && get_u64(lj, "seed", &ls.seed) &&
              get_u64(lj, "epoch", &ls.epoch) && get_u64(lj, "step", &ls.step) &&
              get_i64(lj, "n_windows", &ls.n_windows) && get_i64(lj, "B", &ls.B) &&
              get_i64(lj, "T", &ls.T);
    ok = ok && get_i64(lj, "rank", &i64) && (ls.rank = (int32_t)i64, true);
    ok = ok && get_i64(lj, "world_size", &i64) && (ls.world_size = (int32_t)i64, true);
    ok = ok && get_i64(lj, "shuffle", &i64) && (ls.shuffle = (int32_t)i64, true);
    if (!ok)
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "resume %s: state.json lacks a valid step, tokens_seen, rng or loader "
                            "entry (not a checkpoint written by 'ojas train'?)",
                            t->resume);
    oj_error e2 = {0};
    if (oj_loader_set_state(t->train, &ls, &e2))
        return oj_error_set(err, OJ_ERR_STATE,
                            "resume %s: the data does not match the checkpoint's loader "
                            "(batch_size, seq_len, shuffle or the train shards changed): %s",
                            t->resume, e2.message);
    oj_rng_set_seed(t->eng, rseed);
    oj_rng_set_offset(t->eng, roff);
    t->step = step;
    t->tokens = tokens;
    return OJ_OK;
}

static bool is_dir_with(const char *dir, const char *file) {
    char p[4400];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

oj_status oj__train_read_state(const char *path, json_t **state, char *dir, size_t dir_len,
                               oj_error *err) {
    char d[4096];
    *state = NULL;
    if (is_dir_with(path, "manifest.json")) {
        snprintf(d, sizeof d, "%s", path);
    } else {
        int64_t *steps = NULL, n = 0, step = -1;
        oj_status st = oj_checkpoint_list(path, &steps, &n, err);
        if (st)
            return st;
        /* the newest that verifies; why each newer one was refused */
        char why[sizeof err->message] = "";
        size_t wl = 0;
        for (int64_t i = n - 1; i >= 0 && step < 0; i--) {
            oj_checkpoint_path(path, steps[i], d, sizeof d);
            oj_error ve = {0};
            if (oj_checkpoint_verify(d, &ve) == OJ_OK)
                step = steps[i];
            else if (wl < sizeof why)
                wl += (size_t)snprintf(why + wl, sizeof why - wl, "; ckpt-%06lld refused: %s",
                                       (long long)steps[i], ve.message);
        }
        free(steps);
        if (n == 0)
            return oj_error_set(err, OJ_ERR_IO, "%s: no checkpoint (no ckpt-NNNNNN directory)", path);
        if (step < 0)
            return oj_error_set(err, OJ_ERR_IO, "%s: no good checkpoint found%s", path, why);
    }
    oj_status st = oj_checkpoint_verify(d, err);
    if (st)
        return st;
    char p[4400];
    snprintf(p, sizeof p, "%s/state.json", d);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: bad JSON: %s", p, je.text);
    }
    if (dir_len)
        snprintf(dir, dir_len, "%s", d);
    *state = root;
    return OJ_OK;
}

oj_status oj__train_checkpoint(oj_trainer *t, oj_error *err) {
    double t0 = oj__train_now();
    oj_named_tensors sd = oj_gpt_state_dict(t->model), os;
    if (oj_optim_state(t->optim, &os))
        return oj_error_set(err, oj_last_status(t->eng), "checkpoint: optimizer state: %s",
                            oj_last_error(t->eng));
    char *state = oj__train_state_json(t);
    if (!state)
        return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint: out of memory");
    oj_status st = oj_checkpoint_save(t->out_dir, t->step, &sd, &os, state, (int)t->cfg.keep_last,
                                      err);
    free(state);
    if (st)
        return st;
    oj_checkpoint_path(t->out_dir, t->step, t->last_ckpt, sizeof t->last_ckpt);
    t->ckpt_s = oj__train_now() - t0;
    return OJ_OK;
}

oj_status oj__train_resume(oj_trainer *t, oj_error *err) {
    oj_named_tensors sd = oj_gpt_state_dict(t->model), os;
    if (oj_optim_state(t->optim, &os))
        return oj_error_set(err, oj_last_status(t->eng), "resume: optimizer state: %s",
                            oj_last_error(t->eng));
    oj_checkpoint_info info;
    memset(&info, 0, sizeof info);
    oj_status st = is_dir_with(t->resume, "manifest.json")
                       ? oj_checkpoint_load(t->resume, &sd, &os, &info, err)
                       : oj_checkpoint_resume(t->resume, &sd, &os, &info, err);
    if (st) {
        free(info.state_json);
        return st;
    }
    if (oj_optim_state_sync(t->optim)) {
        free(info.state_json);
        return oj_error_set(err, oj_last_status(t->eng), "resume %s: %s", info.dir,
                            oj_last_error(t->eng));
    }
    json_error_t je;
    json_t *state = json_loads(info.state_json, 0, &je);
    free(info.state_json);
    if (!state)
        return oj_error_set(err, OJ_ERR_CORRUPT, "resume %s: bad state.json: %s", info.dir, je.text);
    st = oj__train_restore_state(t, state, err);
    json_decref(state);
    if (!st) { /* the run directory: the checkpoint's parent */
        snprintf(t->resume_root, sizeof t->resume_root, "%s", info.dir);
        char *slash = strrchr(t->resume_root, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(t->resume_root, sizeof t->resume_root, ".");
    }
    if (!st && info.skipped)
        oj__train_say(t, "warning: skipped %d newer checkpoint(s) that failed verification",
                      info.skipped);
    if (!st)
        oj__train_say(t, "resumed from %s at step %lld (%lld tokens seen)", info.dir,
                      (long long)t->step, (long long)t->tokens);
    return st;
}
