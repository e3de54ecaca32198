package ojas

// #include <stdlib.h>
// #include "glue.h"
import "C"

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"
)

// RunConfig is a training config: every key of `ojas train`'s JSON config
// (docs: oj_train_config in include/ojas/train.h), starting from the
// defaults.
type RunConfig struct {
	c C.oj_train_config
}

// DefaultRunConfig returns the default training config.
func DefaultRunConfig() *RunConfig {
	return &RunConfig{c: C.oj_train_config_default()}
}

// LoadRunConfig reads a JSON config file over the defaults, as
// `ojas train --config`. Errors: ErrIO (unreadable), ErrInvalid (bad JSON,
// an unknown key or a bad value, named).
func LoadRunConfig(path string) (*RunConfig, error) {
	r := DefaultRunConfig()
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var e C.oj_error
	if st := C.oj_train_config_load(&r.c, cp, &e); st != C.OJ_OK {
		return nil, fromC(st, &e)
	}
	return r, nil
}

// CheckpointRunConfig returns the training config stored in a checkpoint
// (a checkpoint directory or a run directory: the one a resume would load).
func CheckpointRunConfig(path string) (*RunConfig, error) {
	r := DefaultRunConfig()
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var e C.oj_error
	if st := C.oj_train_config_from_checkpoint(cp, &r.c, &e); st != C.OJ_OK {
		return nil, fromC(st, &e)
	}
	return r, nil
}

// ApplyJSON applies every key of a JSON object (text) to r; on error r is
// unchanged.
func (r *RunConfig) ApplyJSON(js string) error {
	cs := C.CString(js)
	defer C.free(unsafe.Pointer(cs))
	var e C.oj_error
	return fromC(C.oj_train_config_apply_json(&r.c, cs, &e), &e)
}

// Set applies "key=value" assignments as `ojas train --set` does (e.g.
// "max_steps=100", "numerics=exact", "device=cuda"); the first bad one is
// ErrInvalid naming the key.
func (r *RunConfig) Set(assignments ...string) error {
	for _, a := range assignments {
		cs := C.CString(a)
		var e C.oj_error
		st := C.oj_train_config_set(&r.c, cs, &e)
		C.free(unsafe.Pointer(cs))
		if st != C.OJ_OK {
			return fromC(st, &e)
		}
	}
	return nil
}

// JSON returns the whole config as a JSON object.
func (r *RunConfig) JSON() string {
	s := C.oj_train_config_to_json(&r.c)
	if s == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(s))
	return C.GoString(s)
}

// MaxSteps is the config's max_steps.
func (r *RunConfig) MaxSteps() int64 { return int64(r.c.max_steps) }

// TrainOptions say where a run writes and what it continues.
type TrainOptions struct {
	OutDir    string // required: checkpoints and metrics.jsonl
	Resume    string // "": a new run; else a checkpoint or run directory to continue from
	Overwrite bool   // a new run replaces a previous run's files in OutDir
	Log       bool   // progress lines on stderr (as `ojas train --no-progress`)
}

// StepResult is what a training step reports.
type StepResult struct {
	Step       int64   // steps done, 1-based after the first
	Tokens     int64   // train tokens seen so far
	Loss       float64 // mean micro-batch loss of the step
	GradNorm   float64 // global L2 norm before clipping
	LR         float64 // the AdamW learning rate of the step
	MuonLR     float64 // the Muon learning rate (NaN without Muon)
	StepSecs   float64 // wall time of the step
	TokensPerS float64
}

// Trainer is a training run (oj_trainer): its engine, model, optimizer
// and data loaders, and its run directory, locked while open. Safe for
// concurrent use: calls are serialised.
type Trainer struct {
	h     *handle
	t     *C.oj_trainer
	model *Model
}

// OpenTrainer builds a run from cfg: the engine (ErrDevice if the device
// cannot open, never a fallback), model, optimizer and loaders; with
// opts.Resume, the checkpoint's state (model, optimizer, step, data
// position, RNG). ctx is checked before anything is built. Errors:
// ErrInvalid (the config), ErrState (OutDir in use or not empty),
// ErrCapacity (the run does not fit the budget), ErrCorrupt/ErrIO (a bad
// checkpoint or data), ErrDevice.
func OpenTrainer(ctx context.Context, cfg *RunConfig, opts TrainOptions) (*Trainer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var e C.oj_error
	if st := C.oj_train_config_check(&cfg.c, &e); st != C.OJ_OK {
		return nil, fromC(st, &e)
	}
	out := C.CString(opts.OutDir)
	defer C.free(unsafe.Pointer(out))
	var resume *C.char
	if opts.Resume != "" {
		resume = C.CString(opts.Resume)
		defer C.free(unsafe.Pointer(resume))
	}
	b2i := func(b bool) C.int {
		if b {
			return 1
		}
		return 0
	}
	tr := &Trainer{h: &handle{}}
	if st := C.ojas_go_trainer_create(&cfg.c, out, resume, b2i(opts.Overwrite), b2i(opts.Log),
		&tr.t, &e); st != C.OJ_OK {
		return nil, fromC(st, &e)
	}
	tr.model = newModel(tr.h, C.oj_trainer_engine(tr.t), C.oj_trainer_model(tr.t), false)
	runtime.SetFinalizer(tr, func(tr *Trainer) { tr.Close() })
	return tr, nil
}

// Resume continues the run of a checkpoint (a checkpoint directory or a
// run directory) with its stored config; opts.OutDir "" writes into the
// run directory resumed from. overrides are "key=value" assignments
// applied to the stored config (e.g. "max_steps=200").
func Resume(ctx context.Context, checkpoint string, opts TrainOptions, overrides ...string) (*Trainer, error) {
	cfg, err := CheckpointRunConfig(checkpoint)
	if err != nil {
		return nil, err
	}
	if err := cfg.Set(overrides...); err != nil {
		return nil, err
	}
	opts.Resume = checkpoint
	if opts.OutDir == "" {
		opts.OutDir = checkpoint // a run directory: continue there
		if _, err := os.Stat(filepath.Join(checkpoint, "manifest.json")); err == nil {
			opts.OutDir = filepath.Dir(filepath.Clean(checkpoint)) // a checkpoint's run directory
		}
	}
	return OpenTrainer(ctx, cfg, opts)
}

// TrainStep takes one optimizer step exactly as `ojas train` does (its
// grad_accum micro-batches, clipping, the schedule, the optimizer, the
// metrics.jsonl record). ctx is checked before the step. Errors: ErrState
// once max_steps are done, ErrNumeric after max_skipped_steps non-finite
// steps in a row, ErrCapacity, ErrDevice.
func (t *Trainer) TrainStep(ctx context.Context) (StepResult, error) {
	if err := ctx.Err(); err != nil {
		return StepResult{}, err
	}
	if err := t.h.lock(); err != nil {
		return StepResult{}, err
	}
	defer t.h.unlock()
	var m C.oj_train_metrics
	var e C.oj_error
	if st := C.oj_trainer_train_step(t.t, &m, &e); st != C.OJ_OK {
		return StepResult{}, fromC(st, &e)
	}
	return StepResult{Step: int64(m.step), Tokens: int64(m.tokens), Loss: float64(m.loss),
		GradNorm: float64(m.grad_norm), LR: float64(m.lr), MuonLR: float64(m.muon_lr),
		StepSecs: float64(m.step_s), TokensPerS: float64(m.tokens_per_s)}, nil
}

// Step is the number of steps done.
func (t *Trainer) Step() (int64, error) {
	if err := t.h.lock(); err != nil {
		return 0, err
	}
	defer t.h.unlock()
	return int64(C.oj_trainer_step(t.t)), nil
}

// Eval returns the mean val loss over eval_batches batches and bits per
// byte (NaN without a tokenizer). ErrState without val data.
func (t *Trainer) Eval(ctx context.Context) (loss, bpb float64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if err := t.h.lock(); err != nil {
		return 0, 0, err
	}
	defer t.h.unlock()
	var l, b C.double
	var e C.oj_error
	if st := C.oj_trainer_eval(t.t, &l, &b, &e); st != C.OJ_OK {
		return 0, 0, fromC(st, &e)
	}
	return float64(l), float64(b), nil
}

// SaveCheckpoint writes a checkpoint of the current step under OutDir
// (crash-safe: the previous one stays whole until the new one is in place)
// and returns its directory.
func (t *Trainer) SaveCheckpoint() (string, error) {
	if err := t.h.lock(); err != nil {
		return "", err
	}
	defer t.h.unlock()
	var path [4096]C.char
	var e C.oj_error
	if st := C.oj_trainer_checkpoint(t.t, &path[0], C.size_t(len(path)), &e); st != C.OJ_OK {
		return "", fromC(st, &e)
	}
	return C.GoString(&path[0]), nil
}

// Model is the model being trained, sharing the trainer's lock (for
// Generate between steps); it is freed by the trainer's Close.
func (t *Trainer) Model() *Model { return t.model }

// Close frees the run (engine, model, optimizer, loaders) and unlocks its
// directory. It writes no checkpoint: call SaveCheckpoint first. Closing
// twice is a no-op.
func (t *Trainer) Close() error {
	t.h.mu.Lock()
	defer t.h.mu.Unlock()
	if t.h.closed {
		return nil
	}
	t.h.closed = true
	for d := range t.model.decs {
		d.free()
	}
	t.model.decs = nil
	C.oj_trainer_free(t.t)
	t.t = nil
	runtime.SetFinalizer(t, nil)
	return nil
}
