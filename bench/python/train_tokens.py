"""GPT training tokens/s driven from Python (ojas.train.Trainer.train_step
in a Python loop) beside `ojas train` on the same config and data (the
issue's bar: Python within 2% of the CLI), and the sha256 of both runs'
final checkpoints (model and optimizer) under numerics "exact", which must
be equal: the timed pairs' own when they run exact, else one more pair of
--sha-steps steps of the same model, batch and device under exact numerics
(without the --set extras, so f32 and no CUDA graph).

Both runs use one clock the same way: elapsed_s of each step's metrics
(the run's wall time at the step's end), so the wall rate covers everything
between the first and the last timed step (loader, step, metrics.jsonl and
log records, and for Python the loop); the median-step rate is tokens over
the median step_s (the step alone), which a busy machine disturbs less. The
first `warmup` steps are not timed. `repeats` pairs run, the CLI first in
odd pairs and Python first in even ones; every run's rate is printed, then
the best of each and their ratio. A run that fails (the CLI's exit status, an exception in
Python, fewer steps than asked) prints FAILED with its reason and no
figure, and the script exits 1; so does a checkpoint sha256 mismatch.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/train_tokens.py \\
        [--device cpu|cuda:0] [--numerics exact|fast] [--steps N] [--repeats R] \\
        [--model M --batch B --seq T --threads N] [--set key=value ...] [--data DIR]

The ojas binary is build/bin/ojas beside the package's libojas (or $OJAS_BIN);
the corpus is python/tests/runfixture.py's, repeated --corpus-repeat times
(so that a batch of B x T tokens fits), with its tokenizer and shards made
in --data (kept there for the next invocation) or a temporary directory.
scripts/python_vs_cli.sh runs it on the CPU and then on CUDA.
"""
import argparse
import hashlib
import json
import os
import shutil
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
    """(records, checkpoint dir) of one `ojas train` (which always ends with
    a checkpoint), or raise RuntimeError with the reason."""
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


def run_python(cfg, out, steps, ckpt=True):
    """(records, checkpoint dir or None) of one Trainer driven step by step
    from Python, or raise RuntimeError with the reason."""
    try:
        recs = []
        with ojas.train.Trainer(cfg, out_dir=out) as tr:
            for _ in range(steps):
                recs.append(tr.train_step())
            ckpt = tr.checkpoint() if ckpt else None
    except Exception as e:  # noqa: BLE001 (reported, never a figure)
        raise RuntimeError("ojas.train: %s: %s" % (type(e).__name__, e)) from e
    if len(recs) != steps:
        raise RuntimeError("ojas.train ran %d steps, %d asked" % (len(recs), steps))
    return recs, ckpt


def make_data(d, repeat):
    """runfixture.make with the corpus repeated `repeat` times."""
    with open(os.path.join(d, "corpus.txt"), "w") as f:
        f.write(runfixture.corpus() * repeat)
    runfixture.run_ojas(d, "tokenizer", "train", "--vocab-size", "300", "--threads", "1",
                        "--out", "tok", "corpus.txt")
    runfixture.run_ojas(d, "data", "prepare", "--vocab", "tok", "--out", "data", "--threads",
                        "1", "corpus.txt")
    return d


def pairs(args, d, cfg, steps, warmup, repeats, tag, check_sha):
    """repeats pairs of runs of cfg, the CLI first in odd pairs and Python
    first in even ones (a run right after another's exit may meet colder
    clocks): prints each run's rates and, if check_sha, each pair's
    checkpoint comparison. Returns (cli rates, python rates, failed, sha
    equal everywhere)."""
    cfg = dict(cfg, max_steps=steps, ckpt_every=steps)
    cfg_path = os.path.join(d, "bench-%s.json" % tag)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    cli, py, failed, sha_ok = [], [], False, True
    for k in range(repeats):
        pair = {}
        for who in ("cli", "python") if k % 2 == 0 else ("python", "cli"):
            out = os.path.join(d, "%s-%s-%d" % (who, tag, k))
            try:
                recs, ckpt = run_cli(d, cfg_path, out, steps) if who == "cli" \
                    else run_python(cfg, out, steps, check_sha)
                wall, med = rate(recs, warmup, args.batch, args.seq)
                if check_sha:
                    pair[who] = sha256s(ckpt)
            except (RuntimeError, OSError, ValueError, KeyError, IndexError,
                    ZeroDivisionError) as e:
                print("  run %d %-6s FAILED: %s" % (k + 1, who, e), flush=True)
                failed = True
                continue
            finally:
                shutil.rmtree(out, ignore_errors=True)  # checkpoints of a big model add up
            (cli if who == "cli" else py).append((wall, med))
            print("  run %d %-6s %10.0f tokens/s wall, %10.0f tokens/s median step"
                  % (k + 1, who, wall, med), flush=True)
        if check_sha and len(pair) == 2:
            same = pair["cli"] == pair["python"]
            sha_ok &= same
            print("  run %d checkpoint sha256 (model, optimizer): %s"
                  % (k + 1, "equal" if same else "DIFFER: cli %s, python %s"
                     % (pair["cli"], pair["python"])), flush=True)
    return cli, py, failed, sha_ok


def bench(args, d):
    """Prints the table; returns 0 when every run succeeded and every
    checked pair's checkpoints have equal sha256 under exact numerics, else 1."""
    base = {"model": args.model, "data_dir": os.path.join(d, "data"),
            "batch_size": args.batch, "seq_len": args.seq, "warmup_steps": 2, "eval_every": 0,
            "eval_batches": 1,
            "peak_flops": 1e10, "threads": args.threads, "device": args.device}
    cfg = dict(base, numerics=args.numerics, **args.set)
    tag = args.device.replace(":", "")
    print("device %s, numerics %s: %s, batch %d x seq %d, %d threads%s, %d timed steps "
          "(%d warmup), %d pairs (CLI first, then Python first, ...)"
          % (args.device, args.numerics, args.model, args.batch, args.seq, args.threads,
             "".join(", %s=%s" % kv for kv in args.set.items()), args.steps - args.warmup,
             args.warmup, args.repeats), flush=True)
    exact = args.numerics == "exact"
    cli, py, failed, sha_ok = pairs(args, d, cfg, args.steps, args.warmup, args.repeats, tag,
                                    exact)
    if failed or not cli or not py:
        print("  no ratio: a run failed", flush=True)
    else:
        c, p = max(x[0] for x in cli), max(x[0] for x in py)
        cm, pm = max(x[1] for x in cli), max(x[1] for x in py)
        print("  best: CLI %.0f / Python %.0f tokens/s wall (ratio Python/CLI %.4f), "
              "median step %.0f / %.0f (ratio %.4f); bar: within 2%% (ratio >= 0.98)"
              % (c, p, p / c, cm, pm, pm / cm), flush=True)
    if not exact:
        print("  sha256 pair: numerics exact, %d steps, the same model, batch and device, "
              "no --set extras" % args.sha_steps, flush=True)
        _, _, f2, sha_ok = pairs(args, d, dict(base, numerics="exact"), args.sha_steps, 1, 1,
                                 tag + "-exact", True)
        failed |= f2
    print("  checkpoint sha256 under exact numerics: %s"
          % ("not compared (a run failed)" if failed and sha_ok else
             "equal" if sha_ok else "DIFFER"), flush=True)
    return 0 if sha_ok and not failed else 1


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
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="another training config entry (JSON value, else a string)")
    ap.add_argument("--sha-steps", type=int, default=4,
                    help="steps of the exact pair when --numerics is fast")
    ap.add_argument("--corpus-repeat", type=int, default=1)
    ap.add_argument("--data", help="the data directory: made there unless it has data/")
    args = ap.parse_args()
    if not 1 <= args.warmup < args.steps - 1:
        ap.error("--warmup must be in [1, --steps - 1)")
    if args.sha_steps < 2:
        ap.error("--sha-steps must be >= 2 (a rate needs two steps)")
    extra = {}
    for kv in args.set:
        k, eq, v = kv.partition("=")
        if not eq:
            ap.error("--set %r: expected KEY=VALUE" % kv)
        try:
            extra[k] = json.loads(v)
        except ValueError:
            extra[k] = v
    args.set = extra
    if args.data:
        os.makedirs(args.data, exist_ok=True)
        if not os.path.isdir(os.path.join(args.data, "data")):
            make_data(args.data, args.corpus_repeat)
        sys.exit(bench(args, args.data))
    with tempfile.TemporaryDirectory(prefix="ojas-train-bench-") as d:
        sys.exit(bench(args, make_data(d, args.corpus_repeat)))


if __name__ == "__main__":
    main()
