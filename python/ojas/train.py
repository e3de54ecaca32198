"""ojas.train: the GPT trainer of `ojas train` (include/ojas/train.h),
driven from Python one step at a time.

    trainer = ojas.train.Trainer({"model": "nanolab-tiny", "data_dir": "data",
                                  "max_steps": 100}, out_dir="run")
    trainer.fit(callback=lambda m: print(m["step"], m["loss"]))
    trainer = ojas.train.Trainer.resume("run")        # the latest valid checkpoint

Keys of the config dict are those of `ojas train`'s JSON config
(docs/train.md): unknown keys or bad values raise InvalidArgumentError
naming the key. A step is exactly the CLI's (oj_trainer_train_step): the
same model, optimizer and checkpoint bytes under numerics "exact".
"""
import json
import os

from ojas import _C
from ojas.models import GPT


def config(overrides=None):
    """The full training config (every key, defaults filled in) as a dict,
    with overrides (a dict) applied and checked."""
    return json.loads(_C.train_config(json.dumps(overrides) if overrides else None))


def config_from_checkpoint(path):
    """The training config stored in a checkpoint (or the one a resume from
    the run directory `path` would load)."""
    return json.loads(_C.train_config_from_checkpoint(os.fspath(path)))


class Trainer:
    """A training run: engine, model, optimizer (Muon + AdamW or AdamW),
    loaders, schedule and checkpoints, as `ojas train` builds them from the
    config. out_dir receives checkpoints (ckpt-NNNNNN/), metrics.jsonl and
    is locked while the trainer is open; a new run needs it empty unless
    overwrite. log: print the CLI's progress lines on stderr. Use as a
    context manager or call close()."""

    def __init__(self, config=None, out_dir=None, resume=None, overwrite=False, log=False):
        if out_dir is None:
            if resume is None:
                raise _C.InvalidArgumentError("Trainer: out_dir is required for a new run")
            out_dir = _run_dir(os.fspath(resume))
        text = None if config is None else json.dumps(dict(config))
        self._c = _C.Trainer(text, os.fspath(out_dir),
                             None if resume is None else os.fspath(resume), bool(overwrite),
                             bool(log))
        self.out_dir = os.fspath(out_dir)
        self.config = (json.loads(_C.train_config(text)) if text is not None
                       else config_from_checkpoint(resume))

    @classmethod
    def resume(cls, path, out_dir=None, log=False):
        """Continue the run of checkpoint `path` (a ckpt-NNNNNN directory or
        the run directory: its latest valid checkpoint) with its stored
        config; bit-identical to a run that never stopped under "exact"."""
        return cls(None, out_dir=out_dir, resume=path, log=log)

    @property
    def step(self):
        """Steps done."""
        return self._c.step()

    @property
    def model(self):
        """The GPT being trained (its parameters are the trainer's)."""
        return GPT(self._c.model())

    @property
    def engine(self):
        """The trainer's engine (closed with the trainer)."""
        return self._c.engine()

    def train_step(self):
        """One step (grad_accum micro-batches, clipping, the schedule, the
        optimizer with its non-finite check, the metrics.jsonl record) ->
        its metrics: is_eval (False), step, max_steps, tokens, loss, lr,
        muon_lr, grad_norm, step_s, tokens_per_s, mfu, peak_bytes,
        elapsed_s. StateError once max_steps steps are done."""
        return self._c.train_step()

    def eval(self):
        """(val_loss, val_bpb) over eval_batches batches of the val split."""
        return self._c.eval()

    def checkpoint(self):
        """Write a checkpoint of the current step; returns its directory."""
        return self._c.checkpoint()

    def fit(self, callback=None, on_eval=None):
        """Train to max_steps from Python: train_step, then an eval every
        eval_every steps and a checkpoint every ckpt_every steps and at the
        end, as `ojas train` does. callback(metrics) is called after every
        step with that step's metrics (train_step's dict; once per step);
        on_eval(metrics) after every eval with {"is_eval": True, "step",
        "tokens", "elapsed_s", "val_loss", "val_bpb"} (no eval without a val
        split). Either returning False stops after a checkpoint. Returns the
        last step's metrics."""
        cfg = self.config
        max_steps, eval_every = cfg["max_steps"], cfg["eval_every"]
        ckpt_every = cfg["ckpt_every"]
        last = None
        while self.step < max_steps:
            last = self.train_step()
            s = last["step"]
            stop = callback is not None and callback(last) is False
            if not stop and ((eval_every > 0 and s % eval_every == 0) or s == max_steps):
                try:
                    loss, bpb = self.eval()
                except _C.StateError:  # no val split
                    loss = None
                if loss is not None:
                    m = {"is_eval": True, "step": s, "tokens": last["tokens"],
                         "elapsed_s": last["elapsed_s"], "val_loss": loss, "val_bpb": bpb}
                    stop = on_eval is not None and on_eval(m) is False
            if stop or s == max_steps or (ckpt_every > 0 and s % ckpt_every == 0):
                self.checkpoint()
            if stop:
                break
        return last

    def run(self, callback=None, on_eval=None):
        """The CLI's loop in C (oj_trainer_run: evals, checkpoints, time
        limit) with fit's callbacks: callback(metrics) once after every
        step (train_step's dict), on_eval(metrics) after every eval (fit's
        eval dict: is_eval, step, tokens, elapsed_s, val_loss, val_bpb).
        Either returning False stops cleanly after that step's eval (when
        there is a val split) and a checkpoint; an exception from either stops the same way and
        propagates. Returns the result dict (stop: "done", "time_limit" or
        "signal", step, tokens, train_loss, val_loss, val_bpb,
        tokens_per_s, elapsed_s, peak_bytes, checkpoint)."""
        return self._c.run(callback, on_eval)

    def close(self):
        """Free the trainer (and unlock out_dir); its tensors raise
        StateError afterwards."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _run_dir(path):
    base = os.path.basename(os.path.normpath(path))
    return os.path.dirname(os.path.normpath(path)) if base.startswith("ckpt-") else path


__all__ = ["Trainer", "config", "config_from_checkpoint"]
