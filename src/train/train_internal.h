/* The trainer's state and the pieces shared by the files of src/train. */
#ifndef OJAS_TRAIN_INTERNAL_H
#define OJAS_TRAIN_INTERNAL_H

#include <jansson.h>
#include <stdio.h>

#include "core/clock.h"
#include "ojas/data.h"
#include "ojas/optim.h"
#include "ojas/train.h"

/* step_graph.c: a forward + backward of oj_gpt_loss captured as a CUDA
 * graph (a CUDA engine; grad_accum 1). capture clones x and y [B, T] into
 * the static inputs g->x, g->y, drops every parameter's grad, captures
 * (nothing runs yet) and keeps the loss; run copies x and y (NULL: keep
 * the static inputs) and queues a replay (returning before it ran),
 * leaving g->loss and the parameters' grads rewritten in stream order;
 * check reads the last replay's deferred index and target checks back
 * (OJ_ERR_OUT_OF_RANGE as the eager op reports it; OJ_OK before any
 * capture). Errors: those of the capture (OJ_ERR_UNSUPPORTED naming an op
 * that cannot be captured) and the launch. free releases all. */
typedef struct oj__step_graph {
    oj_graph *graph;
    oj_tensor *x, *y, *loss;
} oj__step_graph;
oj_status oj__step_graph_capture(oj_gpt *m, oj_tensor *x, oj_tensor *y, oj__step_graph *g);
oj_status oj__step_graph_run(oj__step_graph *g, oj_tensor *x, oj_tensor *y);
oj_status oj__step_graph_check(oj__step_graph *g);
void oj__step_graph_free(oj__step_graph *g);

struct oj_trainer {
    oj_train_config cfg;
    oj_train_options opts;
    char out_dir[4096];
    char resume[4096];
    char resume_root[4096]; /* the run directory resumed from */
    int resume_skipped;     /* newer checkpoints under opts.resume refused */
    char resume_refused[512]; /* the newest refused one's reason */
    char metrics_path[4200];
    char metrics_src[4300]; /* metrics.jsonl to continue from, when not out_dir's */
    int lock_fd;            /* out_dir/.lock, flock'd exclusively; -1 when none */

    /* lineage (state.json "run_id", "id", "parent"): 16 hex digits each */
    char run_id[17];
    char parent_id[17];     /* the checkpoint the current state descends from; "" at step 0 */
    int64_t ckpt_in_out;    /* step of the resumed checkpoint when it is in out_dir, else -1 */
    int64_t eval_logged;    /* step of an eval record already in metrics.jsonl, else -1 */
    int64_t sched_total;    /* the step the schedule decayed towards at the last step, -1: none */
    int64_t skipped_in_row; /* consecutive steps the optimizer skipped as non-finite */
    char skip_msg[256];     /* the optimizer's message for the last skip */
    oj_gpt_config mcfg;
    int64_t T; /* sequence length */

    oj_engine *eng;
    oj_gpt *model;
    oj_optim *optim;
    oj__step_graph graph; /* cfg.cuda_graph: captured at the first step */
    int64_t *batch_in, *batch_tg; /* cuda_graph: [B, T] host batch, uploaded into graph.x/y */
    /* the next step's batch, taken while the device finished the last step
     * (loop.c, one process and one micro-batch): uploaded into graph.x/y
     * (cuda_graph) or held in next_x/next_y (detached [B, T]); the loader
     * was at prefetch_from before it, which checkpoints record */
    bool prefetched;
    oj_tensor *next_x, *next_y;
    oj_loader_state prefetch_from;
    /* cuda_graph: the batch uploaded before batch_in/batch_tg (the one the
     * graph's last step ran on, once the next one is uploaded);
     * cur_valid / prev_valid: batch_in / prev_in hold such a batch (not
     * so for the batch the graph was captured with) */
    int64_t *prev_in, *prev_tg;
    bool cur_valid, prev_valid;
    /* The next step's forward and backward launched ahead, before this
     * step's read-back (loop.c: oj_trainer_run with cuda_graph, one process
     * and one micro-batch, no on_metrics callback; OJAS_TRAIN_AHEAD=0: off).
     * in_run: inside oj_trainer_run; ahead: the graph is queued for the next
     * step; ahead_read: this step's loss (loss_raw) and the graph's check
     * words were read deferred; reupload: batch_in/batch_tg must be uploaded
     * again (a rewind replayed prev_in/prev_tg); rewind_st: a failed rewind. */
    bool in_run, ahead, ahead_read, reupload;
    int64_t ahead_launches; /* steps launched ahead (tests) */
    unsigned char loss_raw[8];
    oj_status rewind_st;
    int profile;            /* OJAS_TRAIN_PROFILE at the run's start (loop.c) */
    oj_loader *train;
    char **train_paths;
    int n_train_paths;

    /* val: the first eval_batches batches, kept on the host */
    int64_t val_batches;     /* 0: no val data */
    int64_t *val_in, *val_tg; /* [val_batches, B, T] */
    double val_bytes;        /* byte length of every val target token */
    bool have_bpb;

    int64_t step;   /* steps done */
    int64_t tokens; /* train tokens seen */
    double flops_per_token, peak_flops;
    bool peak_measured;
    FILE *metrics;

    /* timing of this run */
    double t0, step_ema, eval_s, ckpt_s;
    int64_t run_steps;
    double run_step_s;
    bool begun; /* oj_trainer_train_step began the run's clock */
    bool bar_drawn, plot_warned;
    double last_loss, last_val_loss, last_val_bpb;
    char last_ckpt[4096];

    /* data parallel (train/dist.c); a trainer alone is rank 0 of 1 */
    int rank, world;
    bool distributed;     /* opts.dist is an active group: collectives run */
    bool collect;         /* micro-batch gradients summed by train/dist.c (distributed
                           * or grad_accum > 1) */
    int64_t accum;        /* micro-batches per rank per step: grad_accum / world */
    int64_t n_par;        /* trainable parameters, state_dict order (borrowed) */
    oj_tensor **par;
    int64_t *par_off;     /* [n_par + 1] element offsets in the flat layout */
    oj_tensor **norm_order; /* [n_par] the whole optimizer's order (the clip's) */
    bool *owned;          /* [n_par] this rank's optimizer steps it (ZeRO-1 run) */
    int64_t *own_off;     /* [world + 1] ZeRO-1: the flat segment each rank owns */
    int64_t shard;        /* S: elements per rank of one bucket (world * S elements) */
    int64_t n_buckets;    /* nb: buckets of the flat layout, padded */
    oj_tensor *flat;      /* [nb * world * S] packed gradients, then the summed ones */
    oj_tensor *recv;      /* [world * S] one bucket's blocks received by the alltoall */
    oj_tensor *acc;       /* [nb * S] this rank's sub-shards of the step's gradient */
    oj_tensor **acc1;     /* one process: [n_par] the step's gradients so far */
    /* the all-reduce path (ZeRO-1 off, and FAST numerics or a group of
     * one): the gradients live in flat [P] (views[i]: parameter i's part,
     * which backward accumulates into), summed over the ranks in place */
    bool allreduce;
    oj_tensor **views;
    /* its buckets: runs of whole parameters [bk_first[b], bk_first[b + 1])
     * of at most dist_bucket_bytes (or one parameter), all-reduced from
     * the last to the first; with `overlap` (NCCL, eager) each is queued
     * during the last micro-batch's backward as soon as its parameters'
     * gradients are final (bk_pending[b] 0), on the communicator's stream */
    int64_t n_bk, next_bk;
    int64_t *bk_first, *bk_of;
    int32_t *bk_pending;
    bool overlap;
    oj_status bk_status; /* the first error of a bucket queued from backward */
    char bk_msg[600];
    int64_t sched_mine;   /* the schedule total the group uses this step */
    bool stop_agreed, time_agreed; /* from the last step record */
};

/* train/dist.c: data parallel (see there). setup: the parameters' flat
 * layout and ZeRO-1 runs, after the model is made; start: after the rest
 * of oj_trainer_create (st: its outcome on this rank), every rank learns
 * whether all could start, then the collectives are bound and their
 * buffers made. grads_micro after micro-batch k's backward (its gradient
 * whole in the parameters' grads) sums it into the step's; grads_finish
 * leaves the step's gradient in the grads. record: the step's exchange of
 * flags (signal, time limit: in, agreed out), the schedule total and the
 * losses (loss_sum: their sum in micro-batch order). zero_after_step: the
 * ZeRO-1 agreement on the step and the parameter gather. zero_resume loads
 * a checkpoint into the shard; zero_gather builds on rank 0 the whole
 * optimizer state (*full; NULL on the other ranks, which send theirs). */
oj_status oj__train_dist_setup(oj_trainer *t, oj_error *err);
/* The config's checks that need the world size (world ranks; distributed:
 * an active group, even of one): grad_accum a multiple of it, cuda_graph
 * one micro-batch per rank and only where the gradients are all-reduced.
 * OJ_ERR_INVALID_ARGUMENT / OJ_ERR_UNSUPPORTED naming the key. */
oj_status oj__train_check_world(const oj_train_config *c, int world, bool distributed,
                                oj_error *err);
oj_status oj__train_dist_start(oj_trainer *t, oj_status st, oj_error *err);
void oj__train_dist_free(oj_trainer *t);
oj_status oj__train_grads_micro(oj_trainer *t, int64_t k, oj_error *err);
oj_status oj__train_grads_finish(oj_trainer *t, oj_error *err);
/* The step's gradient clipped to grad_clip (or only measured): the norm
 * before, over every trainable tensor in the whole optimizer's order. */
double oj__train_clip(oj_trainer *t);
/* The step's one host exchange of the group (the collected path's before
 * the gradient's sum, the all-reduce path's after the step): flags[0] the
 * stop signal, flags[1] the time-limit stop, t->sched_mine the schedule's
 * end, this rank's accum micro-batch losses (or NULL) -> the flags any
 * rank raised (the time limit: rank 0's), rank 0's schedule end in
 * t->sched_mine, *loss_sum over every rank in micro-batch order;
 * OJ_ERR_STATE when the ranks are at different steps. */
oj_status oj__train_dist_record(oj_trainer *t, const double *losses, double *loss_sum,
                                double flags[2], oj_error *err);
/* The all-reduce path: before micro-batch k's forward, the parameters'
 * grads become their views of the arena (k 0: to be written by backward's
 * first gradient; EXACT, k > 0: detached, so the micro-batch's gradient
 * forms whole and grads_micro adds it in; nothing once a CUDA graph is
 * captured), the step's buckets are reset (k 0) and, before the last
 * micro-batch, backward's leaf hook queues them (overlap). */
oj_status oj__train_grads_attach(oj_trainer *t, int64_t k, oj_error *err);
/* Remove the trainer's backward leaf hook from its engine (the last
 * micro-batch's bucket launcher), if installed: after a failed step, so no
 * later backward launches a collective with a partial gradient. */
void oj__train_grads_unhook(oj_trainer *t);
oj_status oj__train_zero_after_step(oj_trainer *t, bool skipped, oj_error *err);
oj_status oj__train_zero_resume(oj_trainer *t, oj_error *err);
oj_status oj__train_zero_gather(oj_trainer *t, oj_optim **full, oj_error *err);
/* A checkpoint of the group: rank 0 writes it (ZeRO-1: with the gathered
 * state), then every rank learns whether it was written. */
oj_status oj__train_dist_checkpoint(oj_trainer *t, oj_error *err);
/* trainer.c: an optimizer over every trainable tensor (all) or this
 * rank's ZeRO-1 run, with the config's groups. */
oj_status oj__train_make_optim(oj_trainer *t, bool all, oj_optim **out, oj_error *err);

/* loop.c: begin a run (its clock, OJAS_TRAIN_PROFILE), then one step as
 * oj_trainer_run takes it: the optimizer step over grad_accum
 * micro-batches, its report (metrics.jsonl, on_metrics, the log) and,
 * after max_skipped_steps non-finite steps in a row, the diagnosis that
 * stops the run with OJ_ERR_NUMERIC. No eval or checkpoint. */
void oj__trainer_begin(oj_trainer *t);
/* loop.c: forget the batch taken ahead (t->prefetched), putting the loader
 * back where it was before it, so the next batch is taken again. */
void oj__train_drop_prefetch(oj_trainer *t);
/* m (may be NULL) receives the step's metrics. */
oj_status oj__trainer_step(oj_trainer *t, oj_train_metrics *m, oj_error *err);


/* config.c */
json_t *oj__train_config_json(const oj_train_config *c);
oj_status oj__train_config_from_json(oj_train_config *c, const json_t *obj, oj_error *err);
const char *oj__train_enum_name(const char *key, int v);

/* state.c: resolve `path` (a checkpoint directory or a root) to a directory
 * (copied into dir when dir_len > 0) and parse its state.json into *state
 * (json_decref it). The files are verified first. */
oj_status oj__train_read_state(const char *path, json_t **state, char *dir, size_t dir_len,
                               oj_error *err);
/* state.json's caller keys for the trainer's current position, for a
 * checkpoint with the id `id`. */
char *oj__train_state_json(const oj_trainer *t, const char *id);
/* Restore step, tokens, RNG and loader position from a parsed state. */
oj_status oj__train_restore_state(oj_trainer *t, const json_t *state, oj_error *err);
/* 16 random lower-case hex digits (a run or checkpoint id) into buf. */
void oj__train_new_id(char buf[17]);
/* After a resume (t->step, t->parent_id: the resumed checkpoint's step
 * and id) with out_dir locked: move out_dir's checkpoints that are not the
 * resumed checkpoint or its ancestors (another run, or the later steps of
 * an abandoned branch) aside into out_dir/abandoned-step<S>[-k]/, with
 * out_dir's metrics.jsonl, and choose the metrics.jsonl to continue. */
oj_status oj__train_branch(oj_trainer *t, oj_error *err);
/* Write a checkpoint of the current step. */
oj_status oj__train_checkpoint(oj_trainer *t, oj_error *err);
/* Refuse (OJ_ERR_CAPACITY naming each part) a run whose weights, gradients,
 * optimizer state and a lower bound of one micro-batch's activations do not
 * fit the engine's budget; called before anything is allocated
 * (preflight.c). */
oj_status oj__train_preflight(oj_trainer *t, oj_error *err);
/* Load the checkpoint at t->resume into the model and optimizer. */
oj_status oj__train_resume(oj_trainer *t, oj_error *err);

/* report.c: metrics.jsonl, log lines and the progress bar */
oj_status oj__train_metrics_open(oj_trainer *t, oj_error *err);
/* Append m to metrics.jsonl (unless it is an eval record already there),
 * call on_metrics and log. A failed write is OJ_ERR_IO naming the file. */
oj_status oj__train_report(oj_trainer *t, const oj_train_metrics *m, oj_error *err);
void oj__train_say(oj_trainer *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* peak.c: measured f32 GEMM FLOP/s of a CUDA engine. */
double oj__train_measure_peak(oj_engine *eng);

#endif
