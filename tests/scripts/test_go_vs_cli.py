"""scripts/go_vs_cli.sh's arguments and failures: REPS / SKIP that are not
counts are refused by name, and a run whose metrics give no rate stops the
script with that message (no half-written JSON line, no summary figure, no
traceback). Stand-in binaries write the metrics; nothing trains here."""

import json
import os
import stat
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "go_vs_cli.sh")

FAKE = """#!/bin/sh
# a stand-in for ojas train / ojas-train-bench: STEPS train records in OUT/metrics.jsonl
while [ $# -gt 0 ]; do
  case "$1" in --out|-out) out=$2; shift;; esac
  shift
done
mkdir -p "$out"
: > "$out/metrics.jsonl"
i=0
while [ $i -lt {steps} ]; do
  echo "{{\\"type\\": \\"train\\", \\"step\\": $i, \\"tokens\\": $((i * 100)), \\"elapsed_s\\": $i.5}}" \\
    >> "$out/metrics.jsonl"
  i=$((i + 1))
done
"""


def fakes(tmp_path, steps):
    paths = []
    for name in ("ojas", "gobench"):
        p = tmp_path / name
        p.write_text(FAKE.format(steps=steps))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
        paths.append(str(p))
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{}\n")
    return paths, str(cfg)


def run(tmp_path, steps, **env):
    (ojas, gob), cfg = fakes(tmp_path, steps)
    e = dict(os.environ, OJAS=ojas, GOBENCH=gob, **env)
    return subprocess.run(["bash", SCRIPT, cfg, str(tmp_path / "out")], env=e,
                          capture_output=True, text=True, timeout=120)


def test_runs_give_a_summary(tmp_path):
    p = run(tmp_path, 8, REPS="2")
    assert p.returncode == 0, p.stderr
    last = json.loads(p.stdout.splitlines()[-1])
    assert last["summary"] and last["go_over_cli"] == 1.0, p.stdout


@pytest.mark.parametrize("env,name", [({"REPS": "0"}, "REPS"), ({"REPS": "x"}, "REPS"),
                                      ({"SKIP": "-1"}, "SKIP"), ({"SKIP": "two"}, "SKIP")])
def test_bad_counts_are_refused(tmp_path, env, name):
    p = run(tmp_path, 8, **env)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert name in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "summary" not in p.stdout


def test_too_few_steps_stops_the_script(tmp_path):
    p = run(tmp_path, 3, REPS="1", SKIP="2")
    assert p.returncode != 0
    assert "too few steps after SKIP" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "summary" not in p.stdout
    for line in open(tmp_path / "out" / "runs.jsonl"):
        json.loads(line)  # every line written is whole
