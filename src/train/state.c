/* Checkpoints of a training run: state.json (step, tokens seen, RNG, loader
 * position, the config and the resolved model config), save and resume. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
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

void oj__train_new_id(char buf[17]) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) { /* no entropy source: time and pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    }
    snprintf(buf, 17, "%016llx", (unsigned long long)v);
}

/* A 16-hex-digit id under key, or NULL. */
static const char *get_id(const json_t *obj, const char *key) {
    const char *s = json_string_value(json_object_get(obj, key));
    if (!s || strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16)
        return NULL;
    return s;
}

char *oj__train_state_json(const oj_trainer *t, const char *id) {
    oj_loader_state ls;
    if (t->prefetched) /* the batch taken ahead is the next step's */
        ls = t->prefetch_from;
    else
        oj_loader_get_state(t->train, &ls);
    /* data parallel: stored as the one process that takes every rank's
     * batches would be (rank 0 of 1, world_size times the batches), so
     * that any world size can resume it */
    ls.step *= (uint64_t)ls.world_size;
    ls.rank = 0;
    ls.world_size = 1;
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
    json_object_set_new(root, "run_id", json_string(t->run_id));
    json_object_set_new(root, "id", json_string(id));
    json_object_set_new(root, "parent", t->parent_id[0] ? json_string(t->parent_id) : json_null());
    json_object_set_new(root, "schedule_total", json_integer(t->sched_total));
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
    /* a state of one process (how checkpoints are stored) split over the
     * world: each rank is at 1/world of its batches */
    if (ok && ls.world_size == 1 && t->world > 1) {
        if (ls.step % (uint64_t)t->world)
            return oj_error_set(err, OJ_ERR_STATE,
                                "resume %s: the checkpoint's loader is at batch %llu of its epoch, "
                                "which %d ranks cannot split evenly (grad_accum must be a "
                                "multiple of the world size in both runs)",
                                t->resume, (unsigned long long)ls.step, t->world);
        ls.step /= (uint64_t)t->world;
        ls.rank = t->rank;
        ls.world_size = t->world;
    }
    oj_error e2 = {0};
    oj__train_drop_prefetch(t);
    /* a block_size change moves an unset seq_len with it: name block_size */
    int64_t cbs;
    oj_status lst = oj_loader_set_state(t->train, &ls, &e2);
    if (lst && ls.T != t->T &&
        get_i64(json_object_get(state, "model"), "block_size", &cbs) && cbs != t->mcfg.block_size)
        return oj_error_set(err, OJ_ERR_STATE,
                            "resume %s: block_size changed (the checkpoint's %lld, now %lld), and "
                            "with it the sequence length (%lld, now %lld); resume with block_size "
                            "%lld",
                            t->resume, (long long)cbs, (long long)t->mcfg.block_size,
                            (long long)ls.T, (long long)t->T, (long long)cbs);
    if (lst)
        return oj_error_set(err, OJ_ERR_STATE,
                            "resume %s: the data does not match the checkpoint's loader "
                            "(batch_size, seq_len, shuffle or the train shards changed): %s",
                            t->resume, e2.message);
    oj_rng_set_seed(t->eng, rseed);
    oj_rng_set_offset(t->eng, roff);
    t->step = step;
    t->tokens = tokens;
    /* lineage: a checkpoint written before ids existed starts a new run id */
    const char *run_id = get_id(state, "run_id"), *id = get_id(state, "id");
    if (run_id)
        snprintf(t->run_id, sizeof t->run_id, "%s", run_id);
    snprintf(t->parent_id, sizeof t->parent_id, "%s", id ? id : "");
    if (!get_i64(state, "schedule_total", &t->sched_total) || t->sched_total < 0)
        t->sched_total = -1;
    return OJ_OK;
}

/* The JSON in file p into *out (the caller json_decrefs it), read through
 * core/fs.h's reader (a FIFO or a directory is refused, not waited on; at
 * most 64 MiB, the checkpoint reader's limit for its JSON files).
 * OJ_ERR_IO / OJ_ERR_CORRUPT naming p, *out NULL. */
static oj_status read_json(const char *p, json_t **out, oj_error *err) {
    uint8_t *b = NULL;
    size_t n = 0;
    *out = NULL;
    oj_status st = oj__read_file(p, (size_t)64 << 20, &b, &n, err);
    if (st)
        return st;
    json_error_t je;
    *out = json_loadb((const char *)b, n, 0, &je);
    free(b);
    if (!*out)
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: bad JSON: %s", p, je.text);
    return OJ_OK;
}

oj_status oj__train_read_state(const char *path, json_t **state, char *dir, size_t dir_len,
                               oj_error *err) {
    char d[4096];
    *state = NULL;
    /* the checkpoint oj_checkpoint_resume would load (verified), so that a
     * config read here and the tensors loaded later are of one checkpoint */
    oj_status st = oj_checkpoint_find(path, d, sizeof d, NULL, NULL, err);
    if (st)
        return st;
    char p[4400];
    snprintf(p, sizeof p, "%s/state.json", d);
    json_t *root = NULL;
    st = read_json(p, &root, err);
    if (st)
        return st;
    if (!json_is_object(root)) {
        json_decref(root);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s: not a JSON object", p);
    }
    if (dir_len)
        snprintf(dir, dir_len, "%s", d);
    *state = root;
    return OJ_OK;
}

oj_status oj__train_checkpoint(oj_trainer *t, oj_error *err) {
    double t0 = oj__now_s();
    oj_named_tensors sd = oj_gpt_state_dict(t->model), os;
    if (oj_optim_state(t->optim, &os))
        return oj_error_set(err, oj_last_status(t->eng), "checkpoint: optimizer state: %s",
                            oj_last_error(t->eng));
    char id[17];
    oj__train_new_id(id);
    char *state = oj__train_state_json(t, id);
    if (!state)
        return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint: out of memory");
    /* out_dir holds this lineage only (oj__train_branch), so keep_last
     * removes only its own older checkpoints */
    oj_error e = {0};
    oj_status st = oj_checkpoint_save(t->out_dir, t->step, &sd, &os, state, (int)t->cfg.keep_last,
                                      &e);
    free(state);
    if (!st || strstr(e.message, "saved, but")) /* the checkpoint is in place */
        snprintf(t->parent_id, sizeof t->parent_id, "%s", id);
    if (st) {
        if (err)
            *err = e;
        return st;
    }
    oj_checkpoint_path(t->out_dir, t->step, t->last_ckpt, sizeof t->last_ckpt);
    if (oj_gpt_lora_get_config(t->model)) { /* the adapter as PEFT's directory */
        char adir[4200];
        snprintf(adir, sizeof adir, "%s/adapter", t->out_dir);
        if ((st = oj_gpt_lora_save(t->model, adir, t->cfg.init_from, err)))
            return st;
    }
    t->ckpt_s = oj__now_s() - t0;
    return OJ_OK;
}

oj_status oj__train_resume(oj_trainer *t, oj_error *err) {
    oj_named_tensors sd = oj_gpt_state_dict(t->model), os;
    if (oj_optim_state(t->optim, &os))
        return oj_error_set(err, oj_last_status(t->eng), "resume: optimizer state: %s",
                            oj_last_error(t->eng));
    oj_checkpoint_info info;
    memset(&info, 0, sizeof info);
    /* t->resume is the checkpoint directory oj_checkpoint_find chose */
    oj_status st = oj_checkpoint_load(t->resume, &sd, &os, &info, err);
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
    if (!st) { /* the run directory: the checkpoint's parent */
        snprintf(t->resume_root, sizeof t->resume_root, "%s", info.dir);
        for (size_t k = strlen(t->resume_root); k > 1 && t->resume_root[k - 1] == '/'; k--)
            t->resume_root[k - 1] = 0; /* "run/ckpt-000002/" */
        char *slash = strrchr(t->resume_root, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(t->resume_root, sizeof t->resume_root, ".");
    }
    if (!st && t->resume_skipped)
        oj__train_say(t, "warning: skipped %d newer checkpoint(s) that failed verification "
                         "(the newest: %s)",
                      t->resume_skipped, t->resume_refused);
    json_decref(state);
    if (!st)
        oj__train_say(t, "resumed from %s at step %lld (%lld tokens seen)", info.dir,
                      (long long)t->step, (long long)t->tokens);
    return st;
}

/* The same directory (device and inode). */
static bool same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

oj_status oj__train_branch(oj_trainer *t, oj_error *err) {
    const char *cid = t->parent_id[0] ? t->parent_id : NULL; /* the resumed checkpoint's id */
    const int64_t s = t->step;
    bool here = same_dir(t->resume_root, t->out_dir);
    int64_t *steps = NULL, n = 0;
    oj_status st = oj_checkpoint_list(t->out_dir, &steps, &n, err);
    if (st)
        return st;
    char (*ids)[17] = calloc((size_t)(n ? n : 1), sizeof *ids);
    char (*parents)[17] = calloc((size_t)(n ? n : 1), sizeof *parents);
    bool *mine = calloc((size_t)(n ? n : 1), sizeof *mine);
    bool *legacy = calloc((size_t)(n ? n : 1), sizeof *legacy); /* written before ids */
    int64_t *moved = malloc((size_t)(n ? n : 1) * sizeof *moved), n_moved = 0, n_mine = 0;
    if (!ids || !parents || !mine || !legacy || !moved)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "resume: out of memory");
    char p[4400];
    for (int64_t i = 0; !st && i < n; i++) { /* ids only: unreadable ones count as another run's */
        oj_checkpoint_path(t->out_dir, steps[i], p, sizeof p - 16);
        strcat(p, "/state.json");
        json_t *js = NULL;
        read_json(p, &js, NULL);
        const char *id = get_id(js, "id"), *parent = get_id(js, "parent");
        snprintf(ids[i], 17, "%s", id ? id : "");
        snprintf(parents[i], 17, "%s", parent ? parent : "");
        legacy[i] = js && !id;
        json_decref(js);
    }
    /* the resumed checkpoint and its ancestors, by following "parent" */
    int64_t oldest = s;
    bool chain_starts = cid == NULL; /* the chain reached a checkpoint without a parent */
    for (const char *cur = cid; !st && cur && cur[0];) {
        const char *next = NULL;
        for (int64_t i = 0; i < n; i++)
            if (!mine[i] && !strcmp(ids[i], cur)) {
                mine[i] = true;
                next = parents[i];
                oldest = steps[i] < oldest ? steps[i] : oldest;
                chain_starts = !next[0];
                break;
            }
        cur = next;
    }
    /* checkpoints written before lineage ids: ancestors when older than
     * the oldest of the chain, if the chain started from one of them */
    for (int64_t i = 0; !st && chain_starts && i < n; i++)
        if (legacy[i] && (cid ? steps[i] < oldest : steps[i] <= s))
            mine[i] = true;
    for (int64_t i = 0; !st && i < n; i++) {
        if (!mine[i])
            moved[n_moved++] = steps[i];
        else
            n_mine++;
        if (mine[i] && steps[i] == s && (cid ? !strcmp(ids[i], cid) : here)) {
            t->ckpt_in_out = s; /* the resumed checkpoint itself is in out_dir */
            oj_checkpoint_path(t->out_dir, s, t->last_ckpt, sizeof t->last_ckpt);
        }
    }
    snprintf(p, sizeof p, "%s/metrics.jsonl", t->out_dir);
    bool metrics = access(p, F_OK) == 0;
    /* out_dir's metrics.jsonl is this lineage's history when it holds an
     * ancestor or is the resumed run's own directory */
    bool own_metrics = here || n_mine > 0;
    if (!st && (n_moved > 0 || (metrics && !own_metrics))) {
        char name[64], dir[4200];
        for (int k = 1;; k++) {
            if (k == 1)
                snprintf(name, sizeof name, "abandoned-step%lld", (long long)s);
            else
                snprintf(name, sizeof name, "abandoned-step%lld-%d", (long long)s, k);
            snprintf(dir, sizeof dir, "%s/%s", t->out_dir, name);
            if (access(dir, F_OK) != 0)
                break;
        }
        st = oj_checkpoint_move_aside(t->out_dir, moved, n_moved, name, err);
        char to[4300];
        snprintf(to, sizeof to, "%s/metrics.jsonl", dir);
        if (!st && metrics && rename(p, to) != 0)
            st = oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", p, to, strerror(errno));
        if (!st && metrics && own_metrics && t->ckpt_in_out >= 0) /* continue its records */
            snprintf(t->metrics_src, sizeof t->metrics_src, "%s", to);
        if (!st && n_moved == 0)
            oj__train_say(t, "%s: moved the metrics.jsonl of another run aside to %s", t->out_dir,
                          dir);
        else if (!st)
            oj__train_say(t,
                          "%s: moved %lld checkpoint(s) that are not %s or its ancestors (the "
                          "later steps of an abandoned branch, or another run)%s aside to %s",
                          t->out_dir, (long long)n_moved, t->resume,
                          metrics ? ", with their metrics.jsonl," : "", dir);
    }
    /* resumed from elsewhere: that run's records up to step s */
    char theirs[4300];
    snprintf(theirs, sizeof theirs, "%s/metrics.jsonl", t->resume_root);
    if (!st && t->ckpt_in_out < 0 && !here && access(theirs, F_OK) == 0)
        snprintf(t->metrics_src, sizeof t->metrics_src, "%s", theirs);
    free(steps);
    free(ids);
    free(parents);
    free(mine);
    free(legacy);
    free(moved);
    return st;
}
