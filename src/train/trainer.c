/* Building a trainer: engine, model, optimizer, loaders, val batches and
 * their byte counts, peak FLOP/s, and the resumed state. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ojas/dist.h"
#include "ojas/io.h"

#include "core/fs.h"
#include "train/train_internal.h"

/* out_dir/.lock, held with flock(LOCK_EX) while the trainer lives (the
 * kernel drops it when the process dies) and holding the holder's PID. */
static oj_status lock_run(oj_trainer *t, oj_error *err) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", t->out_dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return oj_error_set(err, OJ_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char buf[32] = {0};
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        close(fd);
        long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
        if (e == EWOULDBLOCK) {
            char who[48] = "a process that has not written its PID yet";
            if (pid > 0)
                snprintf(who, sizeof who, "PID %ld", pid);
            return oj_error_set(err, OJ_ERR_STATE,
                                "run directory %s is in use by another trainer (%s holds %s): one "
                                "writer per run directory",
                                t->out_dir, who, p);
        }
        return oj_error_set(err, OJ_ERR_IO, "cannot lock %s: %s", p, strerror(e));
    }
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return oj_error_set(err, OJ_ERR_IO, "cannot write %s: %s", p, strerror(e));
    }
    t->lock_fd = fd;
    return OJ_OK;
}

/* A file or directory that a run writes into its directory. */
static bool is_run_entry(const char *name, bool dir) {
    if (dir)
        return (!strncmp(name, "ckpt-", 5) && name[5] &&
                strspn(name + 5, "0123456789") == strlen(name + 5)) ||
               !strncmp(name, "abandoned-step", 14) ||
               (!strncmp(name, ".ckpt-", 6) && (strstr(name, ".tmp-") || strstr(name, ".old-")));
    return !strcmp(name, "latest") || !strcmp(name, "metrics.jsonl") ||
           !strcmp(name, "metrics.jsonl.tmp") || !strcmp(name, "loss.gp") ||
           !strcmp(name, "loss.svg") || !strncmp(name, ".latest.tmp-", 12);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* HINT with each "{}" replaced by DIR, cut to fit N. */
static void fill_hint(char *buf, size_t n, const char *hint, const char *dir) {
    size_t used = 0;
    buf[0] = '\0';
    for (const char *h = hint; *h && used + 1 < n;) {
        bool hole = h[0] == '{' && h[1] == '}';
        int w = hole ? snprintf(buf + used, n - used, "%s", dir)
                     : snprintf(buf + used, n - used, "%c", *h);
        used += (size_t)w < n - used ? (size_t)w : n - used - 1;
        h += hole ? 2 : 1;
    }
}

/* A new run (no resume) needs an empty out_dir (.lock aside). With
 * overwrite, a directory holding only what a run writes (checkpoints,
 * latest, metrics.jsonl, loss.gp/svg, abandoned-* branches, temporaries)
 * is emptied first; anything else there is refused and nothing removed. */
static oj_status claim_out_dir(oj_trainer *t, oj_error *err) {
    DIR *d = opendir(t->out_dir);
    if (!d)
        return oj_error_set(err, OJ_ERR_IO, "cannot open %s: %s", t->out_dir, strerror(errno));
    char seen[256] = "", foreign[256] = "", p[4400];
    int n = 0;
    bool ckpt = false; /* a checkpoint directory: a run to resume */
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, ".lock"))
            continue;
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", t->out_dir, nm);
        bool dir = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        bool reg = lstat(p, &sb) == 0 && S_ISREG(sb.st_mode);
        size_t used = strlen(seen);
        if (n++ < 3 && used + strlen(nm) + 3 < sizeof seen) {
            if (used)
                strcat(seen, ", ");
            strcat(seen, nm);
        }
        ckpt |= dir && !strncmp(nm, "ckpt-", 5) && is_run_entry(nm, dir);
        if (!foreign[0] && !((dir || reg) && is_run_entry(nm, dir)))
            snprintf(foreign, sizeof foreign, "%.200s", nm);
    }
    closedir(d);
    if (n == 0)
        return OJ_OK;
    /* the advice in the caller's words (oj_train_options' *_hint) */
    const char *ow = t->opts.overwrite_hint ? t->opts.overwrite_hint : "overwrite";
    const char *od = t->opts.out_hint ? t->opts.out_hint : "out dir";
    char rs[1200];
    fill_hint(rs, sizeof rs, t->opts.resume_hint ? t->opts.resume_hint : "a resume from {}",
              t->out_dir);
    if (!t->opts.overwrite && !ckpt) /* a run stopped before its first checkpoint */
        return oj_error_set(err, OJ_ERR_STATE,
                            "out dir %s is not empty (%s%s) and holds no checkpoint to resume: "
                            "replace it with %s, or choose another %s",
                            t->out_dir, seen, n > 3 ? ", ..." : "", ow, od);
    if (!t->opts.overwrite)
        return oj_error_set(err, OJ_ERR_STATE,
                            "out dir %s is not empty (%s%s): continue its run with %s, "
                            "replace it with %s, or choose another %s",
                            t->out_dir, seen, n > 3 ? ", ..." : "", rs, ow, od);
    if (foreign[0])
        return oj_error_set(err, OJ_ERR_STATE,
                            "%s: out dir %s holds '%s', which is not a file of a training "
                            "run: nothing removed (remove it yourself or choose another %s)",
                            ow, t->out_dir, foreign, od);
    d = opendir(t->out_dir);
    if (!d)
        return oj_error_set(err, OJ_ERR_IO, "cannot open %s: %s", t->out_dir, strerror(errno));
    oj_status st = OJ_OK;
    while (!st && (de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, ".lock"))
            continue;
        snprintf(p, sizeof p, "%s/%s", t->out_dir, nm);
        if (nftw(p, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
            st = oj_error_set(err, OJ_ERR_IO, "%s: cannot remove %s: %s", ow, p,
                              strerror(errno));
    }
    closedir(d);
    if (!st)
        oj__train_say(t, "overwrite: removed the previous run in %s (%d entries: %s%s)", t->out_dir,
                      n, seen, n > 3 ? ", ..." : "");
    return st;
}

/* The checkpoint directory to resume from (opts.resume itself, or the one
 * oj_checkpoint_resume would choose under a root) into t->resume. */
static oj_status resolve_resume(oj_trainer *t, oj_error *err) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/manifest.json", t->opts.resume);
    if (access(dir, F_OK) == 0) /* a checkpoint directory: the load verifies it */
        return OJ_OK;
    oj_error refused = {0};
    oj_status st = oj_checkpoint_find(t->opts.resume, dir, sizeof dir, &t->resume_skipped,
                                      &refused, err);
    if (st)
        return st;
    snprintf(t->resume, sizeof t->resume, "%s", dir);
    snprintf(t->resume_refused, sizeof t->resume_refused, "%s", refused.message);
    return OJ_OK;
}

static oj_status eng_error(oj_trainer *t, oj_error *err, const char *what) {
    return oj_error_set(err, oj_last_status(t->eng) ? oj_last_status(t->eng) : OJ_ERR_INTERNAL,
                        "%s: %s", what, oj_last_error(t->eng));
}

/* Optimizer groups: Muon on the eligible hidden matrices plus AdamW on the
 * other matrices (weight decay) and on vectors (no weight decay); or AdamW
 * alone with the same matrix / vector split. */
static oj_status make_groups(oj_trainer *t, oj_optim *o, const oj_named_tensors *sdp,
                             oj_error *err);

static oj_status make_optim_into(oj_trainer *t, bool all, oj_optim *o, oj_error *err) {
    const oj_train_config *c = &t->cfg;
    /* LoRA: the adapters alone (the base weights are frozen) */
    oj_named_tensors sd = oj_gpt_lora_get_config(t->model) ? oj_gpt_lora_params(t->model)
                                                           : oj_gpt_state_dict(t->model);
    /* ZeRO-1: this rank's run of whole tensors (train/dist.c) */
    const char **on = NULL;
    oj_tensor **ot = NULL;
    if (!all && c->zero && t->distributed) {
        on = malloc(sizeof *on * (size_t)(sd.n ? sd.n : 1));
        ot = malloc(sizeof *ot * (size_t)(sd.n ? sd.n : 1));
        if (!on || !ot) {
            free(on);
            free(ot);
            return oj_error_set(err, OJ_ERR_CAPACITY, "optimizer: out of memory");
        }
        int64_t n = 0;
        for (int64_t i = 0; i < sd.n; i++)
            for (int64_t j = 0; j < t->n_par; j++)
                if (t->par[j] == sd.tensors[i] && t->owned[j]) {
                    on[n] = sd.names[i];
                    ot[n++] = sd.tensors[i];
                }
        sd = (oj_named_tensors){n, on, ot};
    }
    oj_status st = make_groups(t, o, &sd, err);
    free(on);
    free(ot);
    return st;
}

oj_status oj__train_make_optim(oj_trainer *t, bool all, oj_optim **out, oj_error *err) {
    *out = oj_optim_create(t->eng);
    if (!*out)
        return eng_error(t, err, "optimizer");
    oj_status st = make_optim_into(t, all, *out, err);
    if (!st && t->cfg.weight_copies && t->cfg.dtype != OJ_TRAIN_F32)
        st = oj_optim_set_weight_copies(*out, true) == OJ_OK ? OJ_OK
                                                             : eng_error(t, err, "optimizer");
    if (st) {
        oj_optim_free(*out);
        *out = NULL;
    }
    return st;
}

static oj_status make_groups(oj_trainer *t, oj_optim *o, const oj_named_tensors *sdp,
                             oj_error *err) {
    const oj_train_config *c = &t->cfg;
    oj_named_tensors sd = *sdp;
    oj_optim_hparams adam = oj_adamw_hparams(c->lr, c->weight_decay);
    adam.beta1 = c->beta1;
    adam.beta2 = c->beta2;
    adam.eps = c->adam_eps;
    oj_optim_hparams adam_1d = adam;
    adam_1d.weight_decay = 0;
    if (c->optimizer == OJ_TRAIN_MUON) {
        oj_optim_hparams muon = oj_muon_hparams(c->muon_lr);
        muon.momentum = c->muon_momentum;
        muon.weight_decay = c->weight_decay;
        if (oj_optim_add_muon_split(o, &sd, &muon, &adam, &adam_1d, NULL) < 0)
            return eng_error(t, err, "optimizer");
        return OJ_OK;
    }
    /* AdamW: matrices (rank >= 2) decay, the rest does not */
    const char **names = malloc((size_t)sd.n * 2 * sizeof *names);
    oj_tensor **ts = malloc((size_t)sd.n * 2 * sizeof *ts);
    oj_status st = OJ_OK;
    if (!names || !ts)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "optimizer: out of memory");
    int64_t n2 = 0, n1 = 0;
    for (int64_t i = 0; !st && i < sd.n; i++) {
        int64_t at = oj_rank(sd.tensors[i]) >= 2 ? n2++ : sd.n + n1++;
        names[at] = sd.names[i];
        ts[at] = sd.tensors[i];
    }
    oj_named_tensors g2 = {n2, names, ts}, g1 = {n1, names + sd.n, ts + sd.n};
    if (!st && (oj_optim_add_group(o, &adam, &g2) < 0 ||
                oj_optim_add_group(o, &adam_1d, &g1) < 0))
        st = eng_error(t, err, "optimizer");
    free(names);
    free(ts);
    return st;
}

/* A shard the loader refused: "what: message", and when a token lies
 * outside a vocabulary the preset chose (no tokenizer_dir, no vocab_size),
 * the keys that set it. */
static oj_status data_error(const oj_trainer *t, oj_status st, const char *what,
                            const char *msg, oj_error *err) {
    const bool preset_vocab = !t->cfg.tokenizer_dir[0] && t->cfg.vocab_size <= 0;
    if (preset_vocab && strstr(msg, "outside the vocabulary"))
        return oj_error_set(err, st,
                            "%s: %s (the model's vocab_size %lld is the preset's: give the "
                            "config key tokenizer_dir, the shards' tokenizer (--set "
                            "tokenizer_dir=DIR), or vocab_size (--set vocab_size=N))",
                            what, msg, (long long)t->mcfg.vocab_size);
    return oj_error_set(err, st, "%s: %s", what, msg);
}

/* The first eval_batches batches of the val split, kept on the host, and
 * the bytes their target tokens stand for. No val shards: no evals. */
static oj_status load_val(oj_trainer *t, const oj_tokenizer *tok, oj_error *err) {
    char **paths = NULL;
    int n = 0;
    if (oj_shard_list(t->cfg.data_dir, "val", &paths, &n, NULL) != OJ_OK) {
        oj__train_say(t, "warning: no val_*.bin shards in %s: no evals", t->cfg.data_dir);
        return OJ_OK;
    }
    oj_loader_config lc = oj_loader_config_default();
    lc.paths = (const char *const *)paths;
    lc.n_paths = n;
    lc.B = t->cfg.batch_size;
    lc.T = t->T;
    lc.prefetch = false;
    lc.vocab_size = t->mcfg.vocab_size;
    oj_loader *L = NULL;
    oj_error e2 = {0};
    oj_status st = oj_loader_open(&lc, &L, &e2);
    oj_paths_free(paths, n);
    if (st == OJ_ERR_SHAPE) {
        oj__train_say(t, "warning: the val split is shorter than one batch: no evals (%s)",
                      e2.message);
        return OJ_OK;
    }
    if (st)
        return data_error(t, st, "val data", e2.message, err);
    int64_t nb = oj_loader_steps_per_epoch(L);
    if (nb > t->cfg.eval_batches)
        nb = t->cfg.eval_batches;
    size_t per = (size_t)(t->cfg.batch_size * t->T);
    t->val_in = malloc(per * (size_t)nb * sizeof *t->val_in);
    t->val_tg = malloc(per * (size_t)nb * sizeof *t->val_tg);
    if (!t->val_in || !t->val_tg)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "val data: out of memory");
    for (int64_t b = 0; !st && b < nb; b++)
        st = oj_loader_next_host(L, t->val_in + (size_t)b * per, t->val_tg + (size_t)b * per, err);
    oj_loader_free(L);
    if (st)
        return st;
    t->val_batches = nb;
    if (tok) {
        int32_t eot = oj_tokenizer_eot(tok);
        double bytes = 0;
        for (size_t i = 0; i < per * (size_t)nb; i++) {
            size_t len = 0;
            int32_t id = (int32_t)t->val_tg[i];
            if (id != eot && !oj_tokenizer_token_bytes(tok, id, &len))
                return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                                    "val data: token %d is not in the tokenizer %s", id,
                                    t->cfg.tokenizer_dir);
            bytes += id == eot ? 0 : (double)len;
        }
        t->val_bytes = bytes;
        t->have_bpb = bytes > 0;
    }
    return OJ_OK;
}

static oj_status open_train(oj_trainer *t, oj_error *err) {
    oj_error e1 = {0};
    oj_status st = oj_shard_list(t->cfg.data_dir, "train", &t->train_paths, &t->n_train_paths, &e1);
    if (st)
        return oj_error_set(err, st, "data_dir: %s", e1.message);
    oj_loader_config lc = oj_loader_config_default();
    lc.paths = (const char *const *)t->train_paths;
    lc.n_paths = t->n_train_paths;
    lc.B = t->cfg.batch_size;
    lc.T = t->T;
    lc.shuffle = t->cfg.shuffle;
    lc.seed = t->cfg.seed;
    lc.vocab_size = t->mcfg.vocab_size;
    lc.rank = t->rank; /* data parallel: this rank's slice of every step */
    lc.world_size = t->world;
    oj_error e2 = {0};
    st = oj_loader_open(&lc, &t->train, &e2);
    if (st)
        return data_error(t, st, "train data", e2.message, err);
    return OJ_OK;
}

/* init_from: the model is the directory's config.json, not the preset that
 * the 'model' key defaults to, so the run's model (log, state.json) is
 * "hf:<directory name>"; every reader of the config takes the model from
 * init_from, so a resume is unaffected. */
static void name_init_from(oj_train_config *c) {
    if (!c->init_from[0])
        return;
    char abs[PATH_MAX];
    const char *p = realpath(c->init_from, abs) ? abs : c->init_from;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && p[b - 1] != '/') b--;
    int len = (int)(n - b) < (int)sizeof c->model - 4 ? (int)(n - b) : (int)sizeof c->model - 4;
    snprintf(c->model, sizeof c->model, "hf:%.*s", len, p + b);
}

static void say_setup(oj_trainer *t) {
    const oj_train_config *c = &t->cfg;
    const oj_gpt_config *m = &t->mcfg;
    char dev[32];
    oj_device_name(oj_engine_device(t->eng), dev, sizeof dev);
    oj__train_say(t,
                  "model %s (%s): %lld layers, %lld heads (%lld kv), C %lld, MLP %lld, V %lld, "
                  "%.2fM parameters",
                  c->model, oj_gpt_family_name(m->family), (long long)m->n_layer,
                  (long long)m->n_head, (long long)m->n_kv_head, (long long)m->n_embd,
                  (long long)m->mlp_hidden, (long long)m->vocab_size,
                  (double)oj_gpt_num_params(t->model) / 1e6);
    const oj_gpt_lora_config *lc = oj_gpt_lora_get_config(t->model);
    if (lc) {
        oj_named_tensors ad = oj_gpt_lora_params(t->model);
        int64_t n = 0;
        for (int64_t i = 0; i < ad.n; i++) n += oj_numel(ad.tensors[i]);
        oj__train_say(t, "lora r %lld, alpha %g, targets %s: %.3fM trainable parameters (%.2f%%); "
                         "the base weights frozen",
                      (long long)lc->r, lc->alpha, lc->targets[0] ? lc->targets : "all", (double)n / 1e6,
                      100.0 * (double)n / (double)oj_gpt_num_params(t->model));
    }
    oj__train_say(t, "data %s: %lld train windows of %lld tokens; %lld tokens per step (B %lld x T "
                     "%lld x accum %lld)",
                  c->data_dir, (long long)oj_loader_num_windows(t->train), (long long)t->T,
                  (long long)(c->batch_size * t->T * c->grad_accum), (long long)c->batch_size,
                  (long long)t->T, (long long)c->grad_accum);
    if (c->time_limit_seconds > 0)
        oj__train_say(t, "stops after step %lld or before %.0f s, whichever comes first (the "
                         "schedule decays towards the step the time is predicted to reach)",
                      (long long)c->max_steps, c->time_limit_seconds);
    if (c->optimizer == OJ_TRAIN_MUON)
        oj__train_say(t, "optimizer muon lr %g (hidden matrices) + adamw lr %g, %s schedule, "
                         "warmup %lld, min lr %g",
                      c->muon_lr, c->lr, oj__train_enum_name("schedule", (int)c->schedule),
                      (long long)c->warmup_steps, c->min_lr);
    else
        oj__train_say(t, "optimizer adamw lr %g, %s schedule, warmup %lld, min lr %g", c->lr,
                      oj__train_enum_name("schedule", (int)c->schedule),
                      (long long)c->warmup_steps, c->min_lr);
    char mfu[96];
    if (t->peak_flops > 0)
        snprintf(mfu, sizeof mfu, "MFU against %.1f GFLOP/s (%s)", t->peak_flops / 1e9,
                 t->peak_measured ? "measured f32 matmul" : "config peak_flops");
    else if (t->peak_measured)
        snprintf(mfu, sizeof mfu, "no MFU (the f32 matmul measurement failed)");
    else
        snprintf(mfu, sizeof mfu, "no MFU (set peak_flops, FLOP/s, to see it)");
    oj__train_say(t, "engine %s, %d threads, %s numerics, %s%s%s; %s",
                  dev, oj_engine_threads(t->eng),
                  c->numerics == OJ_NUMERICS_EXACT ? "exact" : "fast",
                  c->dtype == OJ_TRAIN_BF16  ? "bf16 autocast"
                  : c->dtype == OJ_TRAIN_F16 ? "f16 autocast"
                                             : "f32",
                  c->cuda_graph ? ", forward + backward as a CUDA graph" : "",
                  oj_detect_anomaly_enabled(t->eng) ? ", detect_anomaly on (slow)" : "", mfu);
    if (t->val_batches)
        oj__train_say(t, "eval every %lld steps on %lld val batches%s", (long long)c->eval_every,
                      (long long)t->val_batches, t->have_bpb ? "" : " (no tokenizer_dir: no bpb)");
    if (t->have_bpb)
        oj__train_say(t, "val: %.3f bytes per token", t->val_bytes /
                                                          (double)(t->val_batches * c->batch_size * t->T));
}

oj_status oj_trainer_create(const oj_train_config *cfg, const oj_train_options *opts,
                            oj_trainer **out, oj_error *err) {
    if (!cfg || !opts || !out || !opts->out_dir || !opts->out_dir[0])
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "trainer: NULL config, options or out_dir");
    *out = NULL;
    oj_status st = oj_train_config_check(cfg, err);
    if (st)
        return st;
    oj_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return oj_error_set(err, OJ_ERR_CAPACITY, "trainer: out of memory");
    t->cfg = *cfg;
    t->opts = *opts;
    name_init_from(&t->cfg);
    t->lock_fd = -1;
    t->ckpt_in_out = t->eval_logged = t->sched_total = -1;
    oj__train_new_id(t->run_id); /* a resume takes its checkpoint's */
    snprintf(t->out_dir, sizeof t->out_dir, "%s", opts->out_dir);
    t->opts.out_dir = t->out_dir;
    if (opts->resume) {
        snprintf(t->resume, sizeof t->resume, "%s", opts->resume);
        t->opts.resume = t->resume;
    }
    t->last_loss = t->last_val_loss = t->last_val_bpb = NAN;
    t->rank = oj_dist_rank(opts->dist);
    t->world = oj_dist_world_size(opts->dist);
    st = oj__train_check_world(cfg, t->world, oj_dist_active(opts->dist), err);
    /* oj_dist_bind refuses this too, but only after out_dir is made */
    if (!st)
        st = oj_dist_check_device(opts->dist, cfg->device, err);
    if (t->rank != 0) { /* rank 0 reports for the group */
        t->opts.log = NULL;
        t->opts.progress_bar = false;
        t->opts.plot = false;
    }

    oj_tokenizer *tok = NULL;
    int64_t tok_vocab = 0;
    if (!st && cfg->tokenizer_dir[0]) {
        oj_error e2 = {0};
        char abs[PATH_MAX];
        if ((st = oj_tokenizer_load(cfg->tokenizer_dir, &tok, &e2)))
            oj_error_set(err, st, "tokenizer %s: %s", cfg->tokenizer_dir, e2.message);
        else
            tok_vocab = oj_tokenizer_vocab_size(tok);
        /* stored absolute, so that the run's checkpoints find it from anywhere */
        if (!st && realpath(cfg->tokenizer_dir, abs) && strlen(abs) < sizeof t->cfg.tokenizer_dir)
            memcpy(t->cfg.tokenizer_dir, abs, strlen(abs) + 1);
    }
    if (!st)
        st = oj_train_model_config(cfg, tok_vocab, &t->mcfg, err);
    if (!st && tok && t->mcfg.vocab_size < tok_vocab)
        st = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                          "config: vocab_size %lld is smaller than the tokenizer's %lld",
                          (long long)t->mcfg.vocab_size, (long long)tok_vocab);
    t->T = cfg->seq_len > 0 ? cfg->seq_len : t->mcfg.block_size;
    if (!st) {
        oj_engine_config ec = oj_engine_config_default();
        ec.device = cfg->device;
        /* one GPU per rank of a machine, unless the launcher already gave
         * each rank its own (CUDA_VISIBLE_DEVICES naming one device) */
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (ec.device.type == OJ_DEVICE_CUDA && !(vis && vis[0] && !strchr(vis, ',')))
            ec.device.index += oj_dist_local_rank(opts->dist);
        ec.numerics = cfg->numerics;
        ec.threads = (int)cfg->threads;
        ec.seed = cfg->seed;
        ec.budget_bytes = cfg->budget_bytes;
        st = oj_engine_create(&ec, &t->eng, err);
    }
    if (!st) /* the memory the run needs, before anything is allocated or made */
        st = oj__train_preflight(t, err);
    if (!st && opts->resume) /* the checkpoint, before anything is built from it */
        st = resolve_resume(t, err);
    if (!st && cfg->dtype != OJ_TRAIN_F32) /* forward passes autocast; backward and steps do not */
        oj_set_autocast(t->eng, true, cfg->dtype == OJ_TRAIN_BF16 ? OJ_BF16 : OJ_F16);
    if (!st && cfg->lora_r > 0 && opts->resume)
        st = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                          "config key 'lora_r': a LoRA run does not resume (its adapter is in "
                          "OUT/adapter; start a new run)");
    if (!st && cfg->init_from[0] && !opts->resume) { /* fine-tune: the directory's weights */
        oj_error e2 = {0};
        char abs[PATH_MAX];
        if ((st = oj_gpt_load_dir(t->eng, cfg->init_from, &t->model, &e2)))
            oj_error_set(err, st, "init_from: %s", e2.message);
        else if (realpath(cfg->init_from, abs) && strlen(abs) < sizeof t->cfg.init_from)
            memcpy(t->cfg.init_from, abs, strlen(abs) + 1);
        if (!st && cfg->lora_r > 0) { /* adapters; the base weights frozen */
            oj_gpt_lora_config lc = {.r = cfg->lora_r, .alpha = cfg->lora_alpha,
                                     .dropout = cfg->lora_dropout};
            snprintf(lc.targets, sizeof lc.targets, "%s", cfg->lora_targets);
            if ((st = oj_gpt_lora_add(t->model, &lc, cfg->seed, &e2)))
                oj_error_set(err, st, "config key 'lora_targets': %s", e2.message);
        }
    } else if (!st && oj_gpt_create(t->eng, &t->mcfg, cfg->seed, &t->model))
        st = eng_error(t, err, "model");
    if (!st) /* the parameters' layout and ZeRO-1 runs, before the optimizer */
        st = oj__train_dist_setup(t, err);
    if (!st && t->distributed && cfg->lora_r > 0)
        st = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                          "config key 'lora_r': LoRA runs in one process (not data parallel)");
    if (!st)
        st = oj__train_make_optim(t, false, &t->optim, err);
    if (!st)
        st = open_train(t, err);
    if (!st)
        st = load_val(t, tok, err);
    oj_tokenizer_free(tok);
    if (!st) {
        t->flops_per_token = oj_gpt_flops_per_token(t->model, t->T);
        /* no peak_flops: a CUDA engine's f32 matmul is measured (4096^3,
         * steady); the CPU's is not (on a 2-core machine shared with other
         * work, 512^3 measured 13.7 to 31 GFLOP/s from one start to the
         * next: MFU 57% to 128% for the same step), so it has no MFU */
        t->peak_flops = cfg->peak_flops;
        if (!(t->peak_flops > 0) && oj_engine_device(t->eng).type == OJ_DEVICE_CUDA) {
            t->peak_flops = oj__train_measure_peak(t->eng);
            t->peak_measured = true;
        }
        if (opts->resume)
            st = t->cfg.zero && t->distributed ? oj__train_zero_resume(t, err)
                                               : oj__train_resume(t, err);
    }
    /* out_dir last: a config, device, model, data or checkpoint that fails
     * leaves no directory behind. Rank 0 alone writes it. */
    if (!st && t->rank == 0)
        st = oj__mkdirs(t->out_dir, err);
    if (!st && t->rank == 0) /* before anything in out_dir is read or written */
        st = lock_run(t, err);
    if (!st && t->rank == 0)
        st = opts->resume ? oj__train_branch(t, err) : claim_out_dir(t, err);
    if (!st && t->rank == 0)
        st = oj__train_metrics_open(t, err);
    /* every rank learns whether all could start (none waits for a failed
     * one), then the collectives are bound */
    st = oj__train_dist_start(t, st, err);
    if (st) {
        oj_trainer_free(t);
        return st;
    }
    /* the hints were for the out_dir checks above: not kept (the caller's strings) */
    t->opts.resume_hint = t->opts.overwrite_hint = t->opts.out_hint = NULL;
    say_setup(t);
    *out = t;
    return OJ_OK;
}

oj_gpt *oj_trainer_model(oj_trainer *t) { return t ? t->model : NULL; }
oj_engine *oj_trainer_engine(oj_trainer *t) { return t ? t->eng : NULL; }
int64_t oj_trainer_step(const oj_trainer *t) { return t ? t->step : -1; }

void oj_trainer_free(oj_trainer *t) {
    if (!t)
        return;
    if (t->opts.log && t->bar_drawn)
        fputc('\n', t->opts.log);
    if (t->metrics)
        fclose(t->metrics);
    if (t->lock_fd >= 0)
        close(t->lock_fd); /* releases the lock */
    oj_loader_free(t->train);
    oj_paths_free(t->train_paths, t->n_train_paths);
    oj_release(t->next_x);
    oj_release(t->next_y);
    oj__step_graph_free(&t->graph);
    oj_optim_free(t->optim);
    oj__train_dist_free(t);
    oj_gpt_free(t->model);
    oj_engine_free(t->eng);
    free(t->batch_in);
    free(t->batch_tg);
    free(t->prev_in);
    free(t->prev_tg);
    free(t->val_in);
    free(t->val_tg);
    free(t);
}

oj_status oj_train(const oj_train_config *cfg, const oj_train_options *opts,
                   oj_train_result *res, oj_error *err) {
    oj_trainer *t = NULL;
    oj_status st = oj_trainer_create(cfg, opts, &t, err);
    if (!st)
        st = oj_trainer_run(t, res, err);
    oj_trainer_free(t);
    return st;
}
