"""GPT training tokens/s driven from Python (ojas.train.Trainer.train_step
in a Python loop) beside `ojas train` on the same config and data (the
issue's bar: Python within 2% of the CLI), and, under numerics "exact", the
sha256 of both runs' final checkpoints (model and optimizer), which must be
equal.

Both runs use one clock the same way: elapsed_s of each step's metrics
(the run's wall time at the step's end), so the wall rate covers everything
between the first and the last timed step (loader, step, metrics.jsonl and
log records, and for Python the loop); the median-step rate is tokens over
the median step_s (the step alone), which a busy machine disturbs less. The
first `warmup` steps are not timed. Runs alternate (CLI, Python, CLI, ...)
`repeats` times; every run's rate is printed, then the best of each and
their ratio. A run that fails (the CLI's exit status, an exception in
Python, fewer steps than asked) prints FAILED with its reason and no
figure, and the script exits 1; so does a checkpoint sha256 mismatch.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/train_tokens.py \\
        [--device cpu|cuda:0] [--numerics exact|fast] [--steps N] [--repeats R]

The ojas binary is build/bin/ojas beside the package's libojas (or $OJAS_BIN);
the corpus, tokenizer and shards are those of python/tests/runfixture.py.
scripts/python_vs_cli.sh runs it on the CPU and then on CUDA.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

import ojas  # noqa: E402
import runfixture  # noqa: E402

CKPT_FILES = ("model.safetensors", "optimizer.safetensors")


def rate(records, warmup, B, T):
    """(tokens/s over the timed steps' wall time, tokens / the median step)."""
    steps = [r for r in records if r.get("type", "train") == "train" and not r.get("is_eval")]
    t0, t1 = steps[warmup - 1]["elapsed_s"], steps[-1]["elapsed_s"]
    med = sorted(r["step_s"] for r in steps[warmup:])[(len(steps) - warmup) // 2]
    return (len(steps) - warmup) * B * T / (t1 - t0), B * T / med


def sha256s(ckpt):
    out = []
    for name in CKPT_FILES:
        with open(os.path.join(ckpt, name), "rb") as f:
            out.append(hashlib.sha256(f.read()).hexdigest())
    return tuple(out)


def train_records(records):
    return [r for r in records if r.get("type", "train") == "train" and not r.get("is_eval")]


def run_cli(d, cfg_path, out, steps):
    """(records, checkpoint dir) of one `ojas train`, or raise RuntimeError
    with the reason."""
    r = subprocess.run([runfixture.ojas_bin(), "train", "--no-progress", "--no-plot", "-c",
                        cfg_path, "-o", out], cwd=d, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError("ojas train exited %d: %s" % (r.returncode, tail[0]))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(x) for x in f if x.strip()]
    if len(train_records(recs)) != steps:
        raise RuntimeError("ojas train logged %d train steps, %d asked"
                           % (len(train_records(recs)), steps))
    ckpt = os.path.join(out, "ckpt-%06d" % steps)
    if not os.path.isdir(ckpt):
        raise RuntimeError("ojas train wrote no checkpoint %s" % ckpt)
    return recs, ckpt


def run_python(cfg, out, steps):
    """(records, checkpoint dir) of one Trainer driven step by step from
    Python, or raise RuntimeError with the reason."""
    try:
        recs = []
        with ojas.train.Trainer(cfg, out_dir=out) as tr:
            for _ in range(steps):
                recs.append(tr.train_step())
            ckpt = tr.checkpoint()
    except Exception as e:  # noqa: BLE001 (reported, never a figure)
        raise RuntimeError("ojas.train: %s: %s" % (type(e).__name__, e)) from e
    if len(recs) != steps:
        raise RuntimeError("ojas.train ran %d steps, %d asked" % (len(recs), steps))
    return recs, ckpt


def bench(args, d):
    """Prints the table; returns 0 when every run succeeded (and, under
    exact numerics, every pair's checkpoints have equal sha256), else 1."""
    cfg = {"model": args.model, "data_dir": os.path.join(d, "data"),
           "batch_size": args.batch, "seq_len": args.seq, "max_steps": args.steps,
           "warmup_steps": 2, "eval_every": 0, "ckpt_every": args.steps, "peak_flops": 1e10,
           "threads": args.threads, "numerics": args.numerics, "device": args.device}
    cfg_path = os.path.join(d, "bench-%s.json" % args.device.replace(":", ""))
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    print("device %s, numerics %s: %s, batch %d x seq %d, %d threads, %d timed steps "
          "(%d warmup), %d alternating repetitions"
          % (args.device, args.numerics, args.model, args.batch, args.seq, args.threads,
             args.steps - args.warmup, args.warmup, args.repeats), flush=True)
    cli, py, failed, sha_ok = [], [], False, True
    for k in range(args.repeats):
        pair = {}
        for who in ("cli", "python"):
            out = os.path.join(d, "%s-%s-%d" % (who, args.device.replace(":", ""), k))
            try:
                recs, ckpt = run_cli(d, cfg_path, out, args.steps) if who == "cli" \
                    else run_python(cfg, out, args.steps)
                wall, med = rate(recs, args.warmup, args.batch, args.seq)
            except (RuntimeError, OSError, ValueError, KeyError, IndexError) as e:
                print("  run %d %-6s FAILED: %s" % (k + 1, who, e), flush=True)
                failed = True
                continue
            (cli if who == "cli" else py).append((wall, med))
            pair[who] = sha256s(ckpt)
            print("  run %d %-6s %10.0f tokens/s wall, %10.0f tokens/s median step"
                  % (k + 1, who, wall, med), flush=True)
        if args.numerics == "exact" and len(pair) == 2:
            same = pair["cli"] == pair["python"]
            sha_ok &= same
            print("  run %d checkpoint sha256 (model, optimizer): %s"
                  % (k + 1, "equal" if same else "DIFFER: cli %s, python %s"
                     % (pair["cli"], pair["python"])), flush=True)
    if failed or not cli or not py:
        print("  no ratio: a run failed", flush=True)
        return 1
    c, p = max(x[0] for x in cli), max(x[0] for x in py)
    cm, pm = max(x[1] for x in cli), max(x[1] for x in py)
    print("  best: CLI %.0f / Python %.0f tokens/s wall (ratio Python/CLI %.4f), "
          "median step %.0f / %.0f (ratio %.4f); bar: within 2%% (ratio >= 0.98)"
          % (c, p, p / c, cm, pm, pm / cm), flush=True)
    if args.numerics == "exact":
        print("  checkpoint sha256 under exact numerics: %s"
              % ("equal in every repetition" if sha_ok else "DIFFER"), flush=True)
    return 0 if sha_ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--numerics", default="exact", choices=["exact", "fast"])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", default="nanolab-tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", help="a directory made by runfixture.make (default: a new one)")
    args = ap.parse_args()
    if not 1 <= args.warmup < args.steps:
        ap.error("--warmup must be in [1, --steps)")
    if args.data:
        sys.exit(bench(args, args.data))
    with tempfile.TemporaryDirectory(prefix="ojas-train-bench-") as d:
        sys.exit(bench(args, runfixture.make(d)))


if __name__ == "__main__":
    main()
