"""GPT training tokens/s driven from Python (ojas.train.Trainer.train_step
in a Python loop) beside `ojas train` on the same
tiny config and data (the issue's bar: Python within 2% of the CLI).

Both runs use one clock the same way: elapsed_s of each step's metrics
(the run's wall time at the step's end), so the wall rate covers everything
between the first and the last timed step (loader, step, metrics.jsonl and
log records, and for Python the loop); the median-step rate is tokens over
the median step_s (the step alone), which a busy machine disturbs less. The first `warmup`
steps are not timed. Runs alternate (CLI, Python, CLI, ...) `repeats` times
and the best of each is reported, which damps other load on the machine.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/train_tokens.py [--steps N]

The ojas binary is build/bin/ojas beside the package's libojas (or $OJAS_BIN);
the corpus, tokenizer and shards are those of python/tests/runfixture.py.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))

import ojas  # noqa: E402
import runfixture  # noqa: E402


def rate(records, warmup, B, T):
    """(tokens/s over the timed steps' wall time, tokens / the median step)."""
    steps = [r for r in records if r.get("type", "train") == "train" and not r.get("is_eval")]
    t0, t1 = steps[warmup - 1]["elapsed_s"], steps[-1]["elapsed_s"]
    med = sorted(r["step_s"] for r in steps[warmup:])[(len(steps) - warmup) // 2]
    return (len(steps) - warmup) * B * T / (t1 - t0), B * T / med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", default="nanolab-tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ojas-train-bench-") as d:
        bench(args, runfixture.make(d))


def bench(args, d):
    cfg = {"model": args.model, "data_dir": os.path.join(d, "data"),
           "batch_size": args.batch, "seq_len": args.seq, "max_steps": args.steps,
           "warmup_steps": 2, "eval_every": 0, "ckpt_every": 0, "peak_flops": 1e10,
           "threads": args.threads}
    with open(os.path.join(d, "bench.json"), "w") as f:
        json.dump(cfg, f)
    cli, py = [], []
    for k in range(args.repeats):
        out = os.path.join(d, "cli%d" % k)
        subprocess.run([runfixture.ojas_bin(), "train", "--no-progress", "--no-plot", "-c",
                        "bench.json", "-o", out], cwd=d, check=True, capture_output=True)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            cli.append(rate([json.loads(x) for x in f], args.warmup, args.batch, args.seq))
        recs = []
        with ojas.train.Trainer(cfg, out_dir=os.path.join(d, "py%d" % k)) as tr:
            for _ in range(args.steps):
                recs.append(tr.train_step())
        py.append(rate(recs, args.warmup, args.batch, args.seq))
    c, p = max(x[0] for x in cli), max(x[0] for x in py)
    cm, pm = max(x[1] for x in cli), max(x[1] for x in py)
    print("config: %s, batch %d x seq %d, %d threads, %d timed steps (%d warmup), best of %d"
          % (args.model, args.batch, args.seq, args.threads, args.steps - args.warmup,
             args.warmup, args.repeats))
    print("                      wall tokens/s  median-step tokens/s   wall runs")
    print("ojas train (CLI)      %12.0f  %20.0f   %s"
          % (c, cm, ", ".join("%.0f" % x[0] for x in cli)))
    print("ojas.train (Python)   %12.0f  %20.0f   %s"
          % (p, pm, ", ".join("%.0f" % x[0] for x in py)))
    print("ratio Python / CLI    %12.4f  %20.4f" % (p / c, pm / cm))

if __name__ == "__main__":
    main()
