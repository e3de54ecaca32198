/* ojas train: the GPT training loop behind `ojas train`.
 *
 * One step = grad_accum micro-batches of [B, T] tokens from the train
 * shards (each micro-batch's loss scaled by 1 / grad_accum before
 * backward), global grad-norm clipping (the pre-clip norm is reported), the
 * LR schedule, an optimizer step (Muon for 2-D hidden matrices + AdamW for
 * the rest, or AdamW for everything) and zeroed gradients, all inside one
 * oj_scope. Every eval_every steps (and at the end) the model is evaluated
 * on the first eval_batches batches of the val split.
 *
 * Reported per step: train loss, lr, pre-clip grad norm, tokens/s, MFU and
 * the peak bytes of the engine's root budget; per eval: val loss and val
 * bits per byte,
 *   bpb = val_loss / ln 2 * tokens / bytes,
 * where bytes sums the tokenizer's byte length of every evaluated target
 * token (the end-of-text token counts 0 bytes: it is not text).
 * MFU = flops_per_token * tokens/s / peak_flops with flops_per_token =
 * oj_gpt_flops_per_token = 6 N + 12 L T C (N parameters without the
 * position table, forward + backward, causal masking ignored; Kaplan et al.
 * 2020, PaLM appendix B). peak_flops is the configured value, or else, on
 * a CUDA engine, measured at start-up as the f32 GEMM throughput of the
 * engine's own oj_matmul on square 4096 matrices; a CPU engine without
 * peak_flops has no MFU (NaN: left out of the log, null in metrics.jsonl),
 * since a measurement on a machine shared with other work varies by 2x.
 *
 * Output under out_dir: ckpt-NNNNNN/ checkpoints (oj_checkpoint_save: model
 * state_dict, optimizer state, state.json holding the lineage ids run_id,
 * id and parent, the step, loader state, engine RNG seed/offset, tokens
 * seen, the schedule's end, the full training config and the resolved
 * model config), metrics.jsonl (one JSON object per step and per eval),
 * loss.gp + loss.svg (gnuplot, when installed), .lock, and abandoned-stepS/
 * when a resume from step S set a later branch aside (docs/formats.md).
 *
 * Resume is bit-identical under OJ_NUMERICS_EXACT: N steps in one run equal
 * N/2 steps + resume + N/2 steps, losses and parameters byte for byte.
 *
 * With grad_accum > 1 each micro-batch's gradient is formed whole and added
 * to the step's gradient in micro-batch order. Data parallel (opts.dist, a
 * process group of include/ojas/dist.h): the world_size ranks share each
 * step's grad_accum micro-batches and sum their gradients in that same
 * order, so under EXACT numerics every world size dividing grad_accum
 * gives the bits of one process, and checkpoints resume at any such world
 * size (docs/distributed.md). */
#ifndef OJAS_TRAIN_H
#define OJAS_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "ojas/core.h"
#include "ojas/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- config */

typedef enum oj_train_optimizer {
    OJ_TRAIN_ADAMW = 0, /* AdamW for every parameter */
    OJ_TRAIN_MUON = 1,  /* Muon for 2-D hidden matrices, AdamW for the rest */
} oj_train_optimizer;

typedef enum oj_train_schedule {
    OJ_SCHEDULE_COSINE = 0,   /* linear warmup, cosine decay to min_lr at max_steps */
    OJ_SCHEDULE_WSD = 1,      /* warmup, stable, linear decay to min_lr over the last cooldown_frac */
    OJ_SCHEDULE_CONSTANT = 2, /* linear warmup, then lr */
} oj_train_schedule;

typedef enum oj_train_dtype {
    OJ_TRAIN_F32 = 0,  /* f32 everywhere (TF32 GEMMs on a GPU under FAST numerics) */
    OJ_TRAIN_BF16 = 1, /* bf16 autocast forward (oj_set_autocast), f32 master weights and moments */
    OJ_TRAIN_F16 = 2,  /* f16 autocast forward (no loss scaling: prefer bf16) */
} oj_train_dtype;

/* Every key of a training config. Integer model fields set to 0 keep the
 * preset's value (vocab_size 0: the tokenizer's vocabulary when
 * tokenizer_dir is set, else the preset's); seq_len 0 means block_size. */
typedef struct oj_train_config {
    char model[64];          /* preset name (oj_gpt_preset), "nanolab-small" */
    int64_t vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, mlp_hidden;
    char data_dir[1024];     /* train_*.bin / val_*.bin shards, "data" */
    char tokenizer_dir[1024]; /* for bits per byte; "" = no bpb */
    int64_t batch_size;      /* B per micro-batch, 8 */
    int64_t seq_len;         /* T, 0 */
    int64_t grad_accum;      /* micro-batches per step (over all ranks of a process
                              * group: a multiple of its world size), 1 */
    int64_t max_steps;       /* 1000 */
    double time_limit_seconds; /* 0 = none; else stop (and checkpoint) before exceeding it */
    oj_train_optimizer optimizer; /* "muon" */
    double lr;               /* AdamW peak lr, 1e-3 */
    double muon_lr;          /* Muon peak lr, 0.02 */
    double min_lr;           /* AdamW lr at the end of the decay, 1e-4 (Muon: same ratio) */
    double muon_momentum;    /* 0.95 */
    int64_t warmup_steps;    /* 100 */
    oj_train_schedule schedule; /* "cosine" */
    double cooldown_frac;    /* wsd: fraction of max_steps spent decaying, 0.2 */
    double weight_decay;     /* decoupled, on 2-D matrices only; 0.1 */
    double beta1, beta2;     /* key "betas": [0.9, 0.95] */
    double adam_eps;         /* 1e-8 */
    double grad_clip;        /* max global grad norm, 1.0; 0 = no clipping */
    int64_t eval_every;      /* 100; 0 = only at the end */
    int64_t eval_batches;    /* 20 */
    int64_t ckpt_every;      /* 500; 0 = only at the end */
    int64_t keep_last;       /* checkpoints kept, 3; 0 = all */
    int64_t log_every;       /* plain-text log line cadence, 10 */
    uint64_t seed;           /* model init and data order, 1337 */
    bool shuffle;            /* shuffled train windows, true */
    int64_t threads;         /* 0 = usable CPUs */
    oj_numerics numerics;    /* "fast" | "exact" */
    oj_device device;        /* "cpu" | "cuda" | "cuda:N" */
    oj_train_dtype dtype;    /* compute dtype: "f32" | "bf16" | "f16" */
    bool cuda_graph;         /* replay forward + backward as a CUDA graph, false
                              * (device cuda, grad_accum 1; oj_graph_capture_begin) */
    double peak_flops;       /* FLOP/s for MFU; 0 = measure at start-up on CUDA,
                              * no MFU on the CPU */
    int64_t budget_bytes;    /* engine root budget; 0 = what the machine can give, less a
                              * margin (oj_engine_create); 9e18 = no limit */
    int64_t max_skipped_steps; /* stop with OJ_ERR_NUMERIC after this many steps in a row
                                * skipped as non-finite, naming the first op with a
                                * non-finite output (detect_anomaly); 10; 0 = never */
    int64_t zero;            /* data parallel: 1 = ZeRO-1 (optimizer state sharded across
                              * ranks by whole tensors), 0 = every rank keeps all of it; 0 */
    double dist_timeout;     /* data parallel: seconds a rank waits for the others before
                              * ending the job, naming the silent ranks; 300 */
    int64_t dist_bucket_bytes; /* data parallel: the gradient is exchanged in buckets of
                                * at most this many bytes; 64 MiB */
    char init_from[1024];    /* a Hugging Face model directory (oj_gpt_load_dir) to
                              * fine-tune: its config.json is the model (the preset
                              * and the model-shape keys then stay unset) and a new
                              * run starts from its weights; "" = none. Stored
                              * absolute; a resume takes the weights of its
                              * checkpoint. */
    /* LoRA fine-tuning of init_from's model (oj_gpt_lora_add): lora_r > 0
     * trains adapters of rank lora_r on the linears lora_targets names
     * (comma-separated, "" = every one) with scale lora_alpha / lora_r;
     * the base weights stay frozen (no gradient, no optimizer state). The
     * adapter is written as PEFT's directory OUT/adapter at each
     * checkpoint. Needs init_from, optimizer adamw, grad_accum 1, one
     * process, no cuda_graph, a new run (no resume); lora_dropout 0 only. */
    int64_t lora_r;          /* 0 = off */
    double lora_alpha;       /* 16 */
    char lora_targets[256];  /* "" */
    double lora_dropout;     /* 0 */
    bool weight_copies;      /* with dtype bf16/f16, the optimizer keeps each weight's
                              * autocast copy between steps instead of the forward
                              * casting it every step (oj_optim_set_weight_copies:
                              * the same bits, half an f32 weight's bytes more); true */
} oj_train_config;

/* The defaults listed above. */
oj_train_config oj_train_config_default(void);

/* Apply every key of the JSON object `json` (text) to *c. Unknown keys,
 * values of the wrong type or out of range are OJ_ERR_INVALID_ARGUMENT
 * naming the key; *c is left unchanged on error. */
oj_status oj_train_config_apply_json(oj_train_config *c, const char *json, oj_error *err);
/* Read a JSON config file and apply it (OJ_ERR_IO if unreadable,
 * OJ_ERR_INVALID_ARGUMENT for bad JSON naming line and column). */
oj_status oj_train_config_load(oj_train_config *c, const char *path, oj_error *err);
/* Apply one "key=value" override (as `--set key=value`): numbers and
 * booleans are parsed from text, strings taken as they are, betas as
 * "0.9,0.95" or "[0.9,0.95]". Same errors as oj_train_config_apply_json. */
oj_status oj_train_config_set(oj_train_config *c, const char *assignment, oj_error *err);
/* Cross-field checks (the optimizer, schedule and preset exist, the model
 * config is valid, seq_len <= block_size, ...). */
oj_status oj_train_config_check(const oj_train_config *c, oj_error *err);
/* The whole config as a JSON object (every key), malloc'd; free() it.
 * NULL when out of memory. Applying it to a default config gives *c back. */
char *oj_train_config_to_json(const oj_train_config *c);
/* The model config the trainer builds: the preset, the overrides, and
 * vocab_size from tok_vocab (> 0: the tokenizer's vocabulary) when the
 * config leaves it 0. */
oj_status oj_train_model_config(const oj_train_config *c, int64_t tok_vocab, oj_gpt_config *out,
                                oj_error *err);
/* The training config stored in a checkpoint's state.json. `path` is a
 * checkpoint directory or a root holding them (the one oj_checkpoint_find
 * chooses: what a resume from `path` loads). The result replaces *c. */
oj_status oj_train_config_from_checkpoint(const char *path, oj_train_config *c, oj_error *err);

/* ---------------------------------------------------------------- running */

/* What a step or an eval reports (to on_metrics and metrics.jsonl). */
typedef struct oj_train_metrics {
    bool is_eval;           /* false: a train step; true: an eval */
    int64_t step;           /* steps done (1-based after the first step) */
    int64_t max_steps;
    int64_t tokens;         /* train tokens seen so far */
    double elapsed_s;       /* wall time of this run (excluding resumed runs) */
    /* train step */
    double loss;            /* mean micro-batch loss */
    double lr, muon_lr;     /* this step's learning rates */
    double grad_norm;       /* global L2 norm before clipping */
    double step_s;          /* wall time of the step */
    double tokens_per_s;    /* tokens of the step / step_s */
    double mfu;             /* flops_per_token * tokens_per_s / peak_flops */
    int64_t peak_bytes;     /* oj_budget_peak of the engine's root budget */
    /* eval */
    double val_loss;
    double val_bpb;         /* NaN when no tokenizer was configured */
} oj_train_metrics;

/* Why a run ended. */
typedef enum oj_train_stop {
    OJ_TRAIN_DONE = 0,       /* max_steps reached */
    OJ_TRAIN_TIME_LIMIT = 1, /* time_limit_seconds would have been exceeded */
    OJ_TRAIN_SIGNAL = 2,     /* *stop became non-zero */
} oj_train_stop;

typedef struct oj_train_options {
    const char *out_dir; /* required: checkpoints, metrics.jsonl, loss.svg */
    const char *resume;  /* NULL, or a checkpoint directory or root to continue from */
    FILE *log;           /* human-readable progress; NULL = silent */
    bool progress_bar;   /* redraw one line with \r (for a TTY) instead of log lines */
    bool plot;           /* write loss.gp and run gnuplot for loss.svg */
    /* Polled after every step: non-zero finishes the step, checkpoints and
     * returns OJ_TRAIN_SIGNAL. Set it from a signal handler. May be NULL. */
    const volatile sig_atomic_t *stop;
    /* Called after every step and eval (may be NULL). */
    void (*on_metrics)(const oj_train_metrics *m, void *ctx);
    void *ctx;
    /* A new run (resume NULL) refuses a non-empty out_dir; overwrite first
     * removes what a previous run wrote there (checkpoints, latest,
     * metrics.jsonl, loss.gp/svg, abandoned-* branches), and still refuses,
     * removing nothing, when out_dir holds anything else. */
    bool overwrite;
    /* The caller's own spelling of resume, overwrite and out_dir in the
     * advice of a refused out_dir, e.g. the CLI's "--resume {}" ({} stands
     * for out_dir), "--overwrite" and "--out"; NULL (each): neutral words
     * ("a resume from DIR", "overwrite", "out dir"). Read by
     * oj_trainer_create alone (not kept). */
    const char *resume_hint, *overwrite_hint, *out_hint;
    /* Data parallel: the process group (include/ojas/dist.h, borrowed;
     * NULL: this process trains alone). Each of its world_size ranks runs
     * a trainer with the same config, taking grad_accum / world_size of
     * every step's micro-batches; rank 0 alone writes out_dir and logs
     * (log, progress_bar and plot are ignored on the others). */
    struct oj_dist *dist;
} oj_train_options;

/* The end of a run. */
typedef struct oj_train_result {
    oj_train_stop stop;
    int64_t step;          /* steps done */
    int64_t tokens;        /* train tokens seen */
    double train_loss;     /* last step's loss (NaN if no step ran) */
    double val_loss, val_bpb; /* last eval (NaN if none) */
    double tokens_per_s;   /* mean over this run's steps */
    double elapsed_s;
    int64_t peak_bytes;
    char checkpoint[4096]; /* the last checkpoint written ("" if none) */
} oj_train_result;

typedef struct oj_trainer oj_trainer;

/* Build everything a run needs from a checked config: the engine (device,
 * numerics, threads, seed, budget; OJ_ERR_DEVICE if the device cannot be
 * opened, never a fallback), the model, the optimizer, the train and val
 * loaders, the tokenizer's byte lengths (tokenizer_dir is stored
 * absolute); with opts->resume, the checkpoint (model, optimizer, step,
 * loader position, RNG, tokens seen; a root resolves by
 * oj_checkpoint_find); and last the out_dir, so that a failure of any of
 * the others leaves no directory behind. The out_dir is then locked with
 * flock on out_dir/.lock until oj_trainer_free (a second trainer gets
 * OJ_ERR_STATE naming the holder's PID); a new run (no opts->resume) needs
 * it empty unless opts->overwrite (OJ_ERR_STATE, see there); a resume moves
 * out_dir's checkpoints that are not the resumed one or its ancestors to
 * out_dir/abandoned-stepS/. `opts` is copied (its strings too). On success
 * *out owns the trainer (oj_trainer_free). */
oj_status oj_trainer_create(const oj_train_config *cfg, const oj_train_options *opts,
                            oj_trainer **out, oj_error *err);
/* Train until max_steps, the time limit or *opts->stop; checkpoint every
 * ckpt_every steps and at the end; write metrics.jsonl and the plot.
 * `res` may be NULL. A signal or the time limit is a clean stop (OJ_OK).
 * Errors stop the run at once: OJ_ERR_IO when metrics.jsonl cannot be
 * written, OJ_ERR_NUMERIC after max_skipped_steps steps in a row skipped as
 * non-finite (naming the first non-finite op found by detect_anomaly), and
 * those of steps, evals and checkpoints. */
oj_status oj_trainer_run(oj_trainer *t, oj_train_result *res, oj_error *err);
/* One training step exactly as oj_trainer_run takes it (grad_accum
 * micro-batches, clipping, the schedule, the optimizer with its non-finite
 * check, the metrics.jsonl record and the log line), for callers that
 * drive the loop themselves (the Go module's TrainStep). No eval and no
 * checkpoint: call oj_trainer_eval and oj_trainer_checkpoint when wanted.
 * The first call starts the run's clock (elapsed_s). *m (may be NULL)
 * receives the step's metrics. A run of N oj_trainer_train_step calls and
 * an oj_trainer_checkpoint writes the same model and optimizer tensors as
 * oj_trainer_run over N steps. Errors: OJ_ERR_STATE once max_steps steps
 * are done, those of oj_trainer_run's steps. */
oj_status oj_trainer_train_step(oj_trainer *t, oj_train_metrics *m, oj_error *err);
/* Write a checkpoint of the current step under out_dir now (as the run
 * does every ckpt_every steps: model, optimizer, loader position, RNG and
 * lineage, keeping keep_last) and copy its directory into path (len bytes;
 * path may be NULL). A checkpoint of the same step is replaced. Errors:
 * those of oj_checkpoint_save; OJ_ERR_OUT_OF_RANGE when the directory does
 * not fit path (it is written all the same). */
oj_status oj_trainer_checkpoint(oj_trainer *t, char *path, size_t len, oj_error *err);
/* The model, engine and steps done (borrowed; valid while t lives). */
oj_gpt *oj_trainer_model(oj_trainer *t);
oj_engine *oj_trainer_engine(oj_trainer *t);
int64_t oj_trainer_step(const oj_trainer *t);
/* Evaluate on the val split now: mean loss over eval_batches batches and
 * bits per byte (NaN without a tokenizer). OJ_ERR_STATE without val data. */
oj_status oj_trainer_eval(oj_trainer *t, double *val_loss, double *val_bpb, oj_error *err);
/* Free the trainer, its model, optimizer, loaders and engine. NULL is a
 * no-op. */
void oj_trainer_free(oj_trainer *t);

/* oj_trainer_create + oj_trainer_run + oj_trainer_free. */
oj_status oj_train(const oj_train_config *cfg, const oj_train_options *opts,
                   oj_train_result *res, oj_error *err);

/* Write out_dir/loss.gp from out_dir/metrics.jsonl (train loss and val loss
 * against step) and run gnuplot on it to make out_dir/loss.svg. The script
 * also draws in a terminal: `gnuplot -e ascii=1 loss.gp`.
 * OJ_ERR_UNSUPPORTED when gnuplot is not installed (the script is still
 * written), OJ_ERR_IO when reading or writing fails or gnuplot fails. */
oj_status oj_train_plot(const char *out_dir, oj_error *err);

/* ---------------------------------------------------------------- benchmark */

/* What oj_bench_trainer measured. */
typedef struct oj_bench_result {
    double step_ms;         /* median over the timed steps of the trainer's step */
    double min_ms, max_ms;
    double tokens_per_s;    /* tokens per step / median step */
    double flops_per_token; /* oj_gpt_flops_per_token: 6 N + 12 L C T */
    double achieved_flops;  /* flops_per_token * tokens_per_s, FLOP/s */
    double loss;            /* the last timed step's loss */
    int64_t peak_bytes;     /* peak of the engine's root budget (pooled free blocks included) */
    int64_t peak_allocated_bytes; /* oj_engine_max_memory_allocated (live storage only) */
    int64_t params;
    double kernel_ms;       /* median of the same device work back to back (NaN: not measured) */
    double overhead_ms;     /* step_ms - kernel_ms: the trainer's cost beyond its device work
                             * (raw: negative when the two timings' noise exceeds it) */
    bool overhead_measurable; /* overhead_ms measured and >= 0 */
} oj_bench_result;

/* Time the trainer's own step: an oj_trainer built from *cfg runs `warmup`
 * untimed then `steps` timed steps exactly as oj_trainer_run takes them
 * (what `ojas train` runs: the loader and its host-to-device copies, the
 * forward and backward or their CUDA graph, clipping, the schedule, the
 * optimizer step with its non-finite check, the loss read-back, the
 * metrics.jsonl record and the log), each timed from its start to the
 * next's. cfg->data_dir "" trains on a generated shard of pseudo-random
 * tokens below the model's vocabulary (a batch per step); otherwise on
 * the train_*.bin shards there. max_steps becomes warmup + steps; evals
 * and checkpoints do not run. The run directory (and the generated shard)
 * live in a temporary directory removed on return. Give cfg->peak_flops,
 * or the trainer measures the peak before the first step. With `kernel`,
 * kernel_ms then times the same device work back to back on one resident
 * batch (forward + backward, clip, the optimizer step with its check, the
 * loss read-back; no loader, schedule or metrics), and overhead_ms =
 * step_ms - kernel_ms, the trainer's cost around it. Errors: those of
 * oj_trainer_create and the steps (in err); OJ_ERR_INVALID_ARGUMENT for
 * steps < 1 or warmup < 0; OJ_ERR_IO when no temporary directory can be
 * made. */
oj_status oj_bench_trainer(const oj_train_config *cfg, int warmup, int steps, bool kernel,
                           oj_bench_result *out, oj_error *err);
/* r's overhead as text into buf (n bytes), returned: "1.25 ms" when
 * measurable; a negative one is no overhead but noise: "none measurable
 * (-0.30 ms, within noise)" within max(2% of step_ms, max_ms - min_ms),
 * else "not measurable (-1955.74 ms: the two timings disagree beyond
 * noise; a loaded machine?)"; "not measured" for NaN. */
const char *oj_bench_overhead_text(const oj_bench_result *r, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_TRAIN_H */
