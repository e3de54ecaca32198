/* The training loop: steps, the LR schedule, evals, checkpoints, the time
 * limit and the stop flag. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/internal.h"
#include "optim/optim_internal.h"
#include "ojas/autograd.h"
#include "ojas/ops.h"
#include "train/train_internal.h"
#include "core/env.h"

static oj_status eng_error(oj_trainer *t, oj_error *err, const char *what) {
    oj_status st = oj_last_status(t->eng) ? oj_last_status(t->eng) : OJ_ERR_INTERNAL;
    oj_error_set(err, st, "%s: %s", what, oj_last_error(t->eng));
    oj_clear_error(t->eng);
    return st;
}

static double elapsed(const oj_trainer *t) { return oj__now_s() - t->t0; }

/* Seconds to keep free at the end of a time-limited run: the final eval
 * and checkpoint, as long as they last took, or before they ran once, a
 * guess (a forward pass is about a third of a step's work). */
static double reserve_s(const oj_trainer *t) {
    double eval = t->eval_s > 0 ? t->eval_s
                                : (double)t->val_batches * t->step_ema / (double)t->cfg.grad_accum / 3;
    double ckpt = t->ckpt_s > 0 ? t->ckpt_s : 1.0;
    return (t->val_batches ? eval : 0) + ckpt;
}

/* The step the schedule decays towards: max_steps, or with a time limit
 * the step the remaining time is predicted to reach (re-estimated every
 * step from the mean step time), so the decay completes within the
 * budget. */
static int64_t schedule_total_at(const oj_trainer *t, int64_t step, int64_t run_steps,
                                 double step_ema) {
    int64_t total = t->cfg.max_steps;
    if (t->cfg.time_limit_seconds > 0 && run_steps >= 2 && step_ema > 0) {
        double left = t->cfg.time_limit_seconds - elapsed(t) - reserve_s(t);
        double est = (double)step + (left > 0 ? left / step_ema : 0);
        if (est < (double)total)
            total = (int64_t)est;
    }
    return total;
}

static int64_t schedule_total(const oj_trainer *t) {
    return schedule_total_at(t, t->step, t->run_steps, t->step_ema);
}

/* The schedule for a run ending at `total` steps. */
static oj_lr_schedule make_schedule(const oj_train_config *c, int64_t total) {
    double min_ratio = c->lr > 0 ? c->min_lr / c->lr : 0;
    int64_t w = c->warmup_steps;
    if (total <= w)
        total = w + 1;
    switch (c->schedule) {
    case OJ_SCHEDULE_COSINE:
        return oj_lr_cosine(w, total, min_ratio);
    case OJ_SCHEDULE_WSD: {
        int64_t d = (int64_t)llround(c->cooldown_frac * (double)total);
        if (d < 1)
            return oj_lr_constant(w);
        if (d > total - w)
            d = total - w;
        return oj_lr_wsd(w, total, d, min_ratio);
    }
    case OJ_SCHEDULE_CONSTANT:
        break;
    }
    return oj_lr_constant(w);
}

/* A line when the step the schedule decays towards moves so far that this
 * step's LR differs by more than 20% from what the previous total gave, at
 * the two steps where the total changes its source: the first step of a
 * run (against the resumed checkpoint's total: another max_steps, or a
 * time limit, which counts from each run's start) and the third, when a
 * time limit's estimate takes over. The estimate's drift from step to step
 * in between is the method, not news. */
static void say_schedule_change(oj_trainer *t, int64_t total, double factor) {
    int64_t was = t->sched_total;
    t->sched_total = total;
    bool switch_point = t->run_steps == 0 || (t->run_steps == 2 && t->cfg.time_limit_seconds > 0);
    if (!switch_point || was < 0 || was == total)
        return;
    oj_lr_schedule old = make_schedule(&t->cfg, was);
    double f0 = oj_lr_schedule_factor(&old, t->step);
    if (fabs(factor - f0) <= 0.2 * fabs(f0))
        return;
    oj__train_say(t,
                  "step %lld: the lr schedule now ends at step %lld (it ended at %lld%s): lr "
                  "%.3g instead of %.3g",
                  (long long)t->step + 1, (long long)total, (long long)was,
                  t->cfg.time_limit_seconds > 0 ? "; the time limit counts from this run's start"
                                                : "",
                  t->cfg.lr * factor, t->cfg.lr * f0);
}

/* OJAS_TRAIN_PROFILE=1: the host milliseconds of each phase of every step
 * on one line of stderr. Nothing waits for the device that would not
 * wait without it, so a phase that reads a value back (optim: the clip
 * and the step, which read the gradient norm and the skip decision back
 * once, after the update is queued on a device) also holds the device
 * time of the work queued before it. OJAS_TRAIN_PROFILE=2 waits for the
 * device at the end of every phase instead, so each phase holds its own
 * device time (the step is then slower: its figures are for attribution
 * only). */
enum { PH_LOADER, PH_FWD_BWD, PH_OPTIM, PH_LOSS, PH_METRICS, PH_N };
static const char *const k_phase[PH_N] = {"loader", "fwd_bwd", "optim", "loss", "metrics"};

typedef struct {
    int mode; /* 0 off, 1 host time, 2 with a device wait per phase */
    double last;
    double ms[PH_N];
    double graph0[3]; /* the engine's graph_{sync,launch,bump}_s at the step's start */
} step_prof;

/* The time since the last mark goes to `phase`. */
static void prof_mark(oj_trainer *t, step_prof *p, int phase) {
    if (!p->mode)
        return;
    if (p->mode == 2)
        oj_engine_synchronize(t->eng);
    double now = oj__now_s();
    p->ms[phase] += (now - p->last) * 1e3;
    p->last = now;
}

static void prof_print(const oj_trainer *t, const step_prof *p) {
    char line[512];
    int n = snprintf(line, sizeof line, "profile step %lld:", (long long)t->step);
    double total = 0;
    for (int i = 0; i < PH_N && n > 0 && (size_t)n < sizeof line; i++) {
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %.3f", k_phase[i], p->ms[i]);
        total += p->ms[i];
    }
    const oj_engine *eng = t->eng;
    if (t->cfg.cuda_graph) /* fwd_bwd's part in oj__graph_launch */
        fprintf(stderr, "%s | total %.3f ms | graph launch: copies %.3f call %.3f bumps %.3f\n",
                line, total, (eng->graph_sync_s - p->graph0[0]) * 1e3,
                (eng->graph_launch_s - p->graph0[1]) * 1e3,
                (eng->graph_bump_s - p->graph0[2]) * 1e3);
    else
        fprintf(stderr, "%s | total %.3f ms\n", line, total);
}

/* Upload the host batch batch_in/batch_tg into the graph's static inputs. */
static oj_status upload_host(oj_trainer *t) {
    oj__step_graph *g = &t->graph;
    size_t nbytes = (size_t)(t->cfg.batch_size * t->T) * sizeof(int64_t);
    oj_status st = oj_copy_from_host(g->x, t->batch_in, nbytes);
    return st ? st : oj_copy_from_host(g->y, t->batch_tg, nbytes);
}

static void swap_batches(oj_trainer *t) {
    int64_t *i = t->prev_in, *g = t->prev_tg;
    bool v = t->prev_valid;
    t->prev_in = t->batch_in, t->prev_tg = t->batch_tg, t->prev_valid = t->cur_valid;
    t->batch_in = i, t->batch_tg = g, t->cur_valid = v;
}

/* The graph path's next batch: the loader's host batch (t->batch_in,
 * t->batch_tg, made once; the one they held moves to prev_in/prev_tg)
 * uploaded into the graph's static inputs. The loader's error is
 * recorded on the engine (its position and the batches do not move);
 * OJ_ERR_CAPACITY when out of host memory. */
static oj_status upload_next(oj_trainer *t) {
    oj_engine *eng = t->eng;
    size_t nbytes = (size_t)(t->cfg.batch_size * t->T) * sizeof(int64_t);
    swap_batches(t);
    if (t->batch_in == NULL)
        t->batch_in = malloc(nbytes);
    if (t->batch_tg == NULL)
        t->batch_tg = malloc(nbytes);
    oj_status st = t->batch_in && t->batch_tg
                       ? OJ_OK
                       : oj_set_error(eng, OJ_ERR_CAPACITY, "train step: out of host memory for a batch");
    oj_error e2 = {0};
    if (!st && (st = oj_loader_next_host(t->train, t->batch_in, t->batch_tg, &e2)))
        oj_set_error(eng, st, "%s", e2.message);
    if (st) {
        swap_batches(t);
        return st;
    }
    t->cur_valid = true;
    return upload_host(t);
}

/* The graph path, when its inputs hold the next step's batch: run this
 * step's forward and backward again on its own batch (prev_in/prev_tg),
 * for a diagnosis that reads its gradients or its check words; the next
 * step then uploads batch_in/batch_tg again (reupload). The parameters
 * must be the ones the step ran with (its update refused) for the
 * gradients to be its own; the check words depend on the batch alone. */
static oj_status replay_this_step(oj_trainer *t) {
    if (!t->prev_valid)
        return oj_set_error(t->eng, OJ_ERR_STATE, "train step: the step's batch is not kept");
    swap_batches(t);
    oj_status st = upload_host(t);
    if (!st)
        st = oj__step_graph_run(&t->graph, NULL, NULL);
    swap_batches(t);
    t->ahead = false;
    t->reupload = t->prefetched; /* else the loader gives the next batch again */
    return st;
}

/* oj__step_hooks.rewind: a refused update is about to be named from the
 * gradients, which the next step's graph launched ahead has rewritten. */
static void rewind_step(void *ctx) {
    oj_trainer *t = ctx;
    if (t->ahead && !t->rewind_st)
        t->rewind_st = replay_this_step(t);
}

/* Launch the next step's forward and backward ahead (its batch just
 * uploaded): in oj_trainer_run only (a caller driving the steps may
 * change the parameters between them), with the batch this step ran on
 * kept for a rewind, on a backend that defers read-backs. */
static bool ahead_wanted(const oj_trainer *t, bool uploaded) {
    return t->cfg.cuda_graph && t->graph.graph && t->in_run && t->opts.on_metrics == NULL &&
           (uploaded ? t->prev_valid : t->cur_valid) && !t->reupload &&
           oj__read_deferrable(t->eng) && oj__env_flag("OJAS_TRAIN_AHEAD", true);
}

/* This step's loss and check words, read deferred (filled by the step's
 * read-back), then the next step's graph: OJ_OK when it is launched. */
static oj_status launch_ahead(oj_trainer *t) {
    oj_engine *eng = t->eng;
    oj__step_graph *g = &t->graph;
    oj_tensor *loss = g->loss;
    size_t es = oj_dtype_size(loss->dtype);
    oj_status st = es <= sizeof t->loss_raw ? OJ_OK : OJ_ERR_INTERNAL;
    if (!st)
        st = oj__read_defer(eng, t->loss_raw, (const char *)loss->storage->data + loss->offset, es);
    if (!st)
        st = oj__graph_checks_defer(g->graph);
    if (st)
        return st;
    t->ahead_read = true; /* read by the step's read-back from here on */
    st = oj__step_graph_run(g, NULL, NULL);
    if (!st) {
        t->ahead = true;
        t->ahead_launches++;
    }
    return st;
}

/* The next step's batch, taken while the device finishes this step's
 * update (oj__optim_clip_step_then's callback, before its read-back): the
 * loader's host work and the upload are then off the time between steps.
 * One process and one micro-batch; the loader's position before it is
 * kept for checkpoints. A failure leaves nothing taken: the next step
 * takes the batch again and reports the error. OJAS_TRAIN_PREFETCH=0: off. */
static void prefetch_next(void *ctx) {
    oj_trainer *t = ctx;
    oj_engine *eng = t->eng;
    if (t->prefetched)
        return;
    oj_loader_get_state(t->train, &t->prefetch_from);
    oj_status st = OJ_OK;
    if (t->cfg.cuda_graph) {
        st = t->graph.graph ? upload_next(t) : OJ_ERR_STATE; /* captured at the first step */
        if (!st && ahead_wanted(t, true))
            st = launch_ahead(t);
    } else {
        /* new tensors outside the step's scopes (the callback runs inside them) */
        oj_tensor *x = NULL, *y = NULL;
        st = oj_loader_next(t->train, eng, &x, &y);
        if (!st) {
            oj__scope_detach(x);
            oj__scope_detach(y);
            t->next_x = x;
            t->next_y = y;
        }
    }
    t->prefetched = true; /* for the drop below */
    if (st) {
        oj__train_drop_prefetch(t);
        oj_clear_error(eng);
    }
}

void oj__train_drop_prefetch(oj_trainer *t) {
    if (!t->prefetched)
        return;
    t->prefetched = false;
    t->ahead = t->reupload = false; /* the next step takes its batch again */
    oj_release(t->next_x);
    oj_release(t->next_y);
    t->next_x = t->next_y = NULL;
    oj_error e2 = {0};
    oj_loader_set_state(t->train, &t->prefetch_from, &e2); /* its own state: cannot fail */
}

/* Whether this step takes the next one's batch ahead: one process, one
 * micro-batch, a next step within max_steps, no stop asked. */
static bool prefetch_wanted(const oj_trainer *t) {
    return !t->collect && t->cfg.grad_accum == 1 && t->step + 1 < t->cfg.max_steps &&
           !(t->opts.stop && *t->opts.stop) && oj__env_flag("OJAS_TRAIN_PREFETCH", true);
}

/* The graph path's micro-step: the next batch is uploaded straight into
 * the graph's static inputs (no per-step device tensors or copies), then
 * the graph replays. The first step captures from a loaded batch. */
static void graph_micro_step(oj_trainer *t, step_prof *pf) {
    oj_engine *eng = t->eng;
    oj__step_graph *g = &t->graph;
    if (g->graph == NULL) {
        oj_tensor *x = NULL, *y = NULL;
        bool got = oj_loader_next(t->train, eng, &x, &y) == OJ_OK; /* else reported below */
        prof_mark(t, pf, PH_LOADER);
        /* grad_accum 1 (config check): capture once (g->x, g->y: clones of
         * x, y), replay after */
        if (got && oj__step_graph_capture(t->model, x, y, g) == OJ_OK)
            oj__step_graph_run(g, NULL, NULL);
        prof_mark(t, pf, PH_FWD_BWD);
        return;
    }
    oj_status st = OJ_OK;
    const bool launched = t->ahead; /* during the last step */
    t->ahead = false;
    if (t->reupload) /* the last step's batch was replayed after this one's upload */
        st = upload_host(t);
    else if (!t->prefetched) /* else uploaded during the last step */
        st = upload_next(t);
    if (!st) /* a failed upload is tried again by the next step: no batch skipped */
        t->prefetched = t->reupload = false;
    prof_mark(t, pf, PH_LOADER);
    if (!st && !launched)
        oj__step_graph_run(g, NULL, NULL);
    prof_mark(t, pf, PH_FWD_BWD);
}

/* The graph replay's deferred index and target checks of this step:
 * read with the step's read-back when the next step was launched ahead.
 * A failure is named on this step's own batch (replayed when the inputs
 * hold the next one) and recorded on the engine. */
static bool step_checks_clean(oj_trainer *t) {
    oj__step_graph *g = &t->graph;
    if (t->ahead_read) {
        if (oj__graph_checks_clean(g->graph))
            return true;
    } else {
        if (oj__step_graph_check(g) == OJ_OK)
            return true;
        if (!t->prefetched || !t->prev_valid) /* named on the batch it ran on */
            return false;
        oj_clear_error(t->eng);
    }
    /* the inputs hold the next step's batch: this step's again */
    if (replay_this_step(t) != OJ_OK)
        return false;
    return oj__step_graph_check(g) == OJ_OK;
}

/* The collected path's record: the losses (read at once), the stop
 * flags, the schedule's end. Exchanged before the gradient's sum: its one
 * message per peer names a rank that died or hangs, which a collective
 * cannot. */
static oj_status step_record(oj_trainer *t, const double *mloss, int64_t n_micro,
                             double *loss_sum, bool *sched_set, oj_error *err) {
    const oj_train_config *c = &t->cfg;
    double flags[2] = {t->opts.stop && *t->opts.stop,
                       c->time_limit_seconds > 0 && t->run_steps > 0 &&
                           elapsed(t) + t->step_ema + reserve_s(t) > c->time_limit_seconds};
    t->sched_mine = schedule_total(t);
    *sched_set = true;
    oj_status st = OJ_OK;
    if (t->distributed) {
        st = oj__train_dist_record(t, mloss, loss_sum, flags, err);
        t->stop_agreed = flags[0] != 0;
        t->time_agreed = flags[1] != 0;
    } else {
        for (int64_t k = 0; k < n_micro; k++)
            *loss_sum += mloss[k];
    }
    return st;
}

/* The all-reduce path's record, its one host exchange of the step, made
 * after the step once its losses are read (the device has nothing
 * queued): the losses, and for the next step the stop flags and the
 * schedule's end, as the loop's next check and the next step's start
 * would see them (this step counted in the step time's average; dt its
 * time so far). The first step of a run needs no record before it: its
 * schedule's end is max_steps on every rank. */
static oj_status step_record_after(oj_trainer *t, const double *mloss, double dt,
                                   double *loss_sum, oj_error *err) {
    const oj_train_config *c = &t->cfg;
    const double ema = t->run_steps == 0 ? dt : 0.9 * t->step_ema + 0.1 * dt;
    double flags[2] = {t->opts.stop && *t->opts.stop,
                       c->time_limit_seconds > 0 &&
                           elapsed(t) + ema + reserve_s(t) > c->time_limit_seconds};
    t->sched_mine = schedule_total_at(t, t->step + 1, t->run_steps + 1, ema);
    oj_status st = oj__train_dist_record(t, mloss, loss_sum, flags, err); /* rank 0's schedule */
    t->stop_agreed = flags[0] != 0;
    t->time_agreed = flags[1] != 0;
    return st;
}

/* One optimizer step over grad_accum micro-batches: the clip and the
 * optimizer step (oj__optim_clip_step: on a device one read-back, after
 * the update is queued), then the losses, read when the device has
 * nothing queued. */
static oj_status train_step(oj_trainer *t, oj_train_metrics *m, step_prof *pf, oj_error *err) {
    const oj_train_config *c = &t->cfg;
    double t0 = oj__now_s(), loss_sum = 0;
    oj_engine *eng = t->eng;
    if (oj_scope_begin(eng))
        return eng_error(t, err, "step");
    oj_status st = OJ_OK;
    /* eager path: the micro-batch losses (detached handles), read after clip */
    oj_tensor *kept[64];
    oj_tensor **losses = c->grad_accum <= 64 ? kept : calloc((size_t)c->grad_accum, sizeof *losses);
    int64_t n_loss = 0;
    if (losses == NULL)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "step: out of host memory");
    /* data parallel or grad_accum > 1: each micro-batch's loss is read at
     * once and its gradient summed by train/dist.c */
    double mloss_kept[64], *mloss = t->accum <= 64 ? mloss_kept
                                                   : calloc((size_t)t->accum, sizeof *mloss);
    if (mloss == NULL)
        st = oj_error_set(err, OJ_ERR_CAPACITY, "step: out of host memory");
    const int64_t n_micro = t->collect ? t->accum : c->grad_accum;
    /* the all-reduce path: the schedule's end the ranks agreed at the last
     * step's record (step_record_after), max_steps on a run's first step */
    bool sched_set = false;
    if (t->allreduce) {
        if (t->run_steps == 0)
            t->sched_mine = schedule_total(t);
        sched_set = true;
    }
    /* the all-reduce path reads its losses after the step, as one process */
    const bool read_now = t->collect && !t->allreduce;
    for (int64_t k = 0; !st && k < n_micro; k++) {
        oj_scope_begin(eng);
        if (t->allreduce)
            st = oj__train_grads_attach(t, k, err);
        if (st) {
        } else if (c->cuda_graph) {
            graph_micro_step(t, pf);
            if (read_now && oj_last_status(eng) == OJ_OK) /* its gradient is summed below */
                mloss[k] = oj_item(t->graph.loss);
        } else {
            oj_tensor *x = NULL, *y = NULL, *own_x = NULL, *own_y = NULL;
            bool got;
            if (t->prefetched) { /* taken during the last step; released below */
                x = own_x = t->next_x;
                y = own_y = t->next_y;
                t->next_x = t->next_y = NULL;
                t->prefetched = false;
                got = true;
            } else {
                got = oj_loader_next(t->train, eng, &x, &y) == OJ_OK; /* else reported below */
            }
            prof_mark(t, pf, PH_LOADER);
            if (got) {
                // x, y [B, T] token ids; loss rank-0 mean over B*T
                oj_tensor *loss = oj_gpt_loss(t->model, x, y);
                oj_tensor *scaled =
                    c->grad_accum == 1 ? loss : oj_mul_scalar(loss, 1.0 / (double)c->grad_accum);
                oj_tensor *keep = NULL;
                if (scaled && oj_backward(scaled, false) == OJ_OK && read_now) {
                    mloss[k] = oj_item(loss);
                } else if (scaled && oj_last_status(eng) == OJ_OK && (keep = oj_detach(loss))) {
                    oj__scope_detach(keep); /* outlives this micro-step's scope */
                    losses[n_loss++] = keep;
                }
            }
            oj_release(own_x);
            oj_release(own_y);
            prof_mark(t, pf, PH_FWD_BWD);
        }
        if (!st && oj_last_status(eng))
            st = eng_error(t, err, "train step");
        if (!st && t->collect)
            st = oj__train_grads_micro(t, k, err);
        oj_scope_end(eng);
    }
    if (st && t->allreduce)
        oj__train_grads_unhook(t); /* a failed micro-batch leaves no hook behind */
    if (!st && t->collect && !t->allreduce)
        st = step_record(t, mloss, n_micro, &loss_sum, &sched_set, err);
    if (!st && t->collect)
        st = oj__train_grads_finish(t, err);
    double norm = NAN;
    if (!st && read_now) { /* the global norm's clip, in place (train/dist.c) */
        norm = oj__train_clip(t);
        if (oj_last_status(eng))
            st = eng_error(t, err, "grad clip");
    }
    int64_t total = sched_set ? t->sched_mine : schedule_total(t);
    oj_lr_schedule sch = make_schedule(c, total);
    double factor = oj_lr_schedule_factor(&sch, t->step);
    if (!st)
        say_schedule_change(t, total, factor);
    if (!st) {
        oj_optim_set_lr_scale(t->optim, factor);
        oj_optim_step_info info;
        /* collected gradients are clipped already; else clip and step in one
         * (on a device: gated, one read-back) */
        const bool pre = prefetch_wanted(t);
        const oj__step_hooks hooks = {.while_queued = pre ? prefetch_next : NULL,
                                      .ahead = pre && ahead_wanted(t, false),
                                      .rewind = rewind_step,
                                      .ctx = t};
        t->ahead_read = false;
        t->rewind_st = OJ_OK;
        oj_status os = read_now ? oj_optim_step(t->optim, &info)
                                : oj__optim_clip_step_then(t->optim, c->grad_clip, &norm, &info,
                                                           &hooks);
        if (t->rewind_st && !st) /* the refusal was named from other gradients */
            st = oj_error_set(err, t->rewind_st,
                              "optimizer step: replaying the step to name its refused update "
                              "failed: %s",
                              oj_last_error(eng));
        if (os == OJ_ERR_NUMERIC) {
            t->skipped_in_row++;
            snprintf(t->skip_msg, sizeof t->skip_msg, "%s", oj_optim_message(t->optim));
            oj__train_say(t, "warning: step %lld skipped: %s", (long long)t->step + 1,
                          oj_optim_message(t->optim));
        } else if (os) {
            st = eng_error(t, err, "optimizer step");
        } else {
            t->skipped_in_row = 0;
        }
        if (!st) /* ZeRO-1: the ranks agree on the step, then gather the parameters */
            st = oj__train_zero_after_step(t, os == OJ_ERR_NUMERIC, err);
        if (t->collect && !c->cuda_graph) /* every parameter's (ZeRO-1: not only this rank's run) */
            for (int64_t i = 0; i < t->n_par; i++)
                oj_zero_grad(t->par[i]);
        else if (!c->cuda_graph) /* the graph's replays rewrite its gradients */
            oj_optim_zero_grad(t->optim);
    }
    prof_mark(t, pf, PH_OPTIM);
    /* the losses, in micro-step order (the device is idle after the
     * step), and the graph replay's deferred checks */
    if (!st) {
        if (c->cuda_graph && !t->collect) /* read with the step's read-back when ahead */
            loss_sum += t->ahead_read ? oj__load(t->loss_raw, t->graph.loss->dtype)
                                      : oj_item(t->graph.loss);
        if (t->allreduce) { /* every rank's, in micro-batch order */
            if (c->cuda_graph) /* one micro-batch per rank */
                mloss[0] = oj_item(t->graph.loss);
            for (int64_t k = 0; k < n_loss; k++)
                mloss[k] = oj_item(losses[k]);
            if (oj_last_status(eng))
                st = eng_error(t, err, "reading the loss");
            else
                st = step_record_after(t, mloss, oj__now_s() - t0, &loss_sum, err);
        } else {
            for (int64_t k = 0; k < n_loss; k++)
                loss_sum += oj_item(losses[k]);
            if (oj_last_status(eng))
                st = eng_error(t, err, "reading the loss");
        }
    }
    if (mloss != mloss_kept)
        free(mloss);
    if (!st && c->cuda_graph && !step_checks_clean(t))
        st = eng_error(t, err, "train step");
    prof_mark(t, pf, PH_LOSS);
    for (int64_t k = 0; k < n_loss; k++)
        oj_release(losses[k]);
    if (losses != kept)
        free(losses);
    oj_scope_end(eng);
    if (st)
        return st;
    double dt = oj__now_s() - t0;
    int64_t tokens = c->batch_size * t->T * c->grad_accum;
    t->step++;
    t->tokens += tokens;
    t->run_steps++;
    t->run_step_s += dt;
    t->step_ema = t->run_steps == 1 ? dt : 0.9 * t->step_ema + 0.1 * dt;
    t->last_loss = loss_sum / (double)c->grad_accum;
    memset(m, 0, sizeof *m);
    m->step = t->step;
    m->max_steps = c->max_steps;
    m->tokens = t->tokens;
    m->elapsed_s = elapsed(t);
    m->loss = t->last_loss;
    m->lr = c->lr * factor;
    m->muon_lr = c->optimizer == OJ_TRAIN_MUON ? c->muon_lr * factor : NAN;
    m->grad_norm = norm;
    m->step_s = dt;
    m->tokens_per_s = (double)tokens / dt;
    m->mfu = t->peak_flops > 0 ? t->flops_per_token * m->tokens_per_s / t->peak_flops : NAN;
    m->peak_bytes = oj_budget_peak(oj_engine_budget(eng));
    m->val_loss = m->val_bpb = NAN;
    return OJ_OK;
}

oj_status oj_trainer_eval(oj_trainer *t, double *val_loss, double *val_bpb, oj_error *err) {
    if (!t)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "eval: NULL trainer");
    if (!t->val_batches)
        return oj_error_set(err, OJ_ERR_STATE, "eval: no val data in %s", t->cfg.data_dir);
    double t0 = oj__now_s(), sum = 0;
    oj_engine *eng = t->eng;
    const int64_t B = t->cfg.batch_size, T = t->T, shape[2] = {B, T};
    const size_t per = (size_t)(B * T);
    bool grad = oj_set_grad_enabled(eng, false);
    oj_status st = OJ_OK;
    for (int64_t b = 0; !st && b < t->val_batches; b++) {
        oj_scope_begin(eng);
        // x, y [B, T] i64 from the kept val batches
        oj_tensor *x = oj_from_host(eng, 2, shape, OJ_I64, t->val_in + b * (int64_t)per,
                                    per * sizeof(int64_t));
        oj_tensor *y = oj_from_host(eng, 2, shape, OJ_I64, t->val_tg + b * (int64_t)per,
                                    per * sizeof(int64_t));
        double l = oj_item(oj_gpt_loss(t->model, x, y));
        if (oj_last_status(eng))
            st = eng_error(t, err, "eval");
        sum += l;
        oj_scope_end(eng);
    }
    oj_set_grad_enabled(eng, grad);
    if (st)
        return st;
    double loss = sum / (double)t->val_batches;
    // bits per byte = nats per token / ln 2 * tokens / bytes
    double bpb = t->have_bpb ? loss / log(2.0) * (double)(t->val_batches * (int64_t)per) / t->val_bytes
                             : NAN;
    t->last_val_loss = loss;
    t->last_val_bpb = bpb;
    t->eval_s = oj__now_s() - t0;
    if (val_loss)
        *val_loss = loss;
    if (val_bpb)
        *val_bpb = bpb;
    return OJ_OK;
}

static oj_status eval_report(oj_trainer *t, oj_error *err) {
    oj_train_metrics m;
    memset(&m, 0, sizeof m);
    oj_status st = oj_trainer_eval(t, &m.val_loss, &m.val_bpb, err);
    if (st)
        return st;
    m.is_eval = true;
    m.step = t->step;
    m.max_steps = t->cfg.max_steps;
    m.tokens = t->tokens;
    m.elapsed_s = elapsed(t);
    m.loss = m.lr = m.muon_lr = m.grad_norm = m.tokens_per_s = m.mfu = NAN;
    m.peak_bytes = oj_budget_peak(oj_engine_budget(t->eng));
    return oj__train_report(t, &m, err);
}

/* After max_skipped_steps steps in a row were skipped as non-finite: one
 * more forward + backward on the next batch with detect_anomaly on, to
 * name the first op whose output (or gradient) is not finite. The run
 * stops with OJ_ERR_NUMERIC. */
static oj_status diagnose_non_finite(oj_trainer *t, oj_error *err) {
    oj_engine *eng = t->eng;
    char found[512] = "";
    oj__train_drop_prefetch(t); /* the batch after the skipped steps */
    bool prev = oj_set_detect_anomaly(eng, true);
    oj_scope_begin(eng);
    oj_tensor *x = NULL, *y = NULL;
    if (oj_loader_next(t->train, eng, &x, &y) == OJ_OK) {
        oj_tensor *loss = oj_gpt_loss(t->model, x, y);
        if (loss && oj_last_status(eng) == OJ_OK)
            oj_backward(loss, false);
    }
    if (oj_last_status(eng) == OJ_ERR_NUMERIC)
        snprintf(found, sizeof found, "%s", oj_last_error(eng));
    oj_clear_error(eng);
    oj_scope_end(eng);
    oj_set_detect_anomaly(eng, prev);
    if (!t->cfg.cuda_graph)
        oj_optim_zero_grad(t->optim);
    return oj_error_set(err, OJ_ERR_NUMERIC,
                        "stopping: %lld steps in a row were skipped as non-finite "
                        "(max_skipped_steps %lld; the last checkpoint is %s): %s%s",
                        (long long)t->skipped_in_row, (long long)t->cfg.max_skipped_steps,
                        t->last_ckpt[0] ? t->last_ckpt : "none of this run",
                        found[0] ? found
                                 : "detect_anomaly found no op with a non-finite output on the "
                                   "next batch; the last skip: ",
                        found[0] ? "" : t->skip_msg);
}

static void plot(oj_trainer *t) {
    if (!t->opts.plot)
        return;
    oj_error e = {0};
    if (oj_train_plot(t->out_dir, &e) && !t->plot_warned) {
        oj__train_say(t, "warning: %s", e.message);
        t->plot_warned = true; /* once per run */
    }
}

static oj_status checkpoint(oj_trainer *t, bool final, oj_error *err) {
    oj_status st = t->distributed ? oj__train_dist_checkpoint(t, err) : oj__train_checkpoint(t, err);
    if (!st && (final || !t->opts.progress_bar))
        oj__train_say(t, "checkpoint %s", t->last_ckpt);
    plot(t);
    return st;
}

void oj__trainer_begin(oj_trainer *t) {
    t->profile = (int)oj__env_int("OJAS_TRAIN_PROFILE", 0);
    t->t0 = oj__now_s();
    t->run_steps = 0;
    t->run_step_s = 0;
    if (t->profile)
        fprintf(stderr, "profile: host ms per phase of each step (%s)\n",
                t->profile == 2 ? "each phase waits for the device at its end"
                                : "a phase that reads back holds the device time queued before it");
}

oj_status oj__trainer_step(oj_trainer *t, oj_train_metrics *out, oj_error *err) {
    step_prof pf = {.mode = t->profile,
                    .last = oj__now_s(),
                    .graph0 = {t->eng->graph_sync_s, t->eng->graph_launch_s, t->eng->graph_bump_s}};
    oj_train_metrics m;
    oj_status st = train_step(t, &m, &pf, err);
    if (!st && out)
        *out = m;
    if (!st)
        st = oj__train_report(t, &m, err);
    prof_mark(t, &pf, PH_METRICS);
    if (!st && pf.mode)
        prof_print(t, &pf);
    if (!st && t->cfg.max_skipped_steps > 0 && t->skipped_in_row >= t->cfg.max_skipped_steps)
        st = diagnose_non_finite(t, err);
    return st;
}

oj_status oj_trainer_run(oj_trainer *t, oj_train_result *res, oj_error *err) {
    if (!t)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "train: NULL trainer");
    const oj_train_config *c = &t->cfg;
    oj_train_stop why = OJ_TRAIN_DONE;
    oj_status st = OJ_OK;
    /* a resumed checkpoint already in out_dir is not written again */
    int64_t last_eval = -1, last_ckpt = t->ckpt_in_out;
    oj__trainer_begin(t);
    t->in_run = true; /* the steps may launch the next one ahead */
    while (!st && t->step < c->max_steps) {
        /* data parallel: what the ranks agreed at the last step's record */
        if (t->distributed ? t->stop_agreed : t->opts.stop && *t->opts.stop) {
            why = OJ_TRAIN_SIGNAL;
            break;
        }
        if (t->distributed ? t->time_agreed
                           : c->time_limit_seconds > 0 && t->run_steps > 0 &&
                                 elapsed(t) + t->step_ema + reserve_s(t) > c->time_limit_seconds) {
            why = OJ_TRAIN_TIME_LIMIT;
            break;
        }
        if ((st = oj__trainer_step(t, NULL, err)))
            break;
        bool last = t->step == c->max_steps;
        if (t->val_batches && c->eval_every > 0 && t->step % c->eval_every == 0 && !last) {
            if (!(st = eval_report(t, err)))
                last_eval = t->step;
        }
        if (!st && c->ckpt_every > 0 && t->step % c->ckpt_every == 0 && !last) {
            if (!(st = checkpoint(t, false, err)))
                last_ckpt = t->step;
        }
    }
    if (!st && why == OJ_TRAIN_DONE && (t->distributed ? t->stop_agreed : t->opts.stop && *t->opts.stop))
        why = OJ_TRAIN_SIGNAL;
    if (!st && why == OJ_TRAIN_SIGNAL)
        oj__train_say(t, "stopping at step %lld (signal): checkpointing", (long long)t->step);
    if (!st && why == OJ_TRAIN_TIME_LIMIT)
        oj__train_say(t, "stopping at step %lld: the time limit of %gs would be exceeded",
                      (long long)t->step, c->time_limit_seconds);
    if (!st && t->val_batches && last_eval != t->step)
        st = eval_report(t, err);
    if (!st && last_ckpt != t->step)
        st = checkpoint(t, true, err);
    /* a step launched ahead runs again when the caller takes it: the
     * parameters may change before */
    t->in_run = t->ahead = false;
    if (res) {
        memset(res, 0, sizeof *res);
        res->stop = why;
        res->step = t->step;
        res->tokens = t->tokens;
        res->train_loss = t->last_loss;
        res->val_loss = t->last_val_loss;
        res->val_bpb = t->last_val_bpb;
        res->tokens_per_s = t->run_step_s > 0 ? (double)(t->run_steps * c->batch_size * t->T *
                                                         c->grad_accum) /
                                                    t->run_step_s
                                              : NAN;
        res->elapsed_s = elapsed(t);
        res->peak_bytes = oj_budget_peak(oj_engine_budget(t->eng));
        snprintf(res->checkpoint, sizeof res->checkpoint, "%s", t->last_ckpt);
    }
    return st;
}

oj_status oj_trainer_train_step(oj_trainer *t, oj_train_metrics *m, oj_error *err) {
    if (!t)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "train step: NULL trainer");
    if (t->step >= t->cfg.max_steps)
        return oj_error_set(err, OJ_ERR_STATE, "train step: max_steps %lld already reached",
                            (long long)t->cfg.max_steps);
    if (!t->begun) {
        oj__trainer_begin(t);
        t->begun = true;
    }
    return oj__trainer_step(t, m, err);
}

oj_status oj_trainer_checkpoint(oj_trainer *t, char *path, size_t len, oj_error *err) {
    if (!t)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint: NULL trainer");
    oj_status st = oj__train_checkpoint(t, err);
    if (!st && path && len) {
        if (strlen(t->last_ckpt) >= len)
            return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                                "checkpoint: saved as %s, which does not fit %zu bytes", t->last_ckpt,
                                len);
        memcpy(path, t->last_ckpt, strlen(t->last_ckpt) + 1);
    }
    return st;
}
