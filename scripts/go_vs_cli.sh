#!/usr/bin/env bash
# Tokens/s of a training run driven from Go (bench/go: OpenTrainer +
# TrainStep, as a Go service runs it) against `ojas train` on the same
# config, by wall clock: tokens of the steps after SKIP divided by the
# elapsed_s between them in each run's metrics.jsonl (the trainer's clock
# from its start, so the time between steps counts on both sides): the
# median over steps of each step's wall-clock rate, and the window's mean. REPS
# alternating pairs (CLI first, then Go first); prints one JSON line per run
# and a summary line with the medians and go/cli. Under numerics=exact the
# final checkpoints' model and optimizer files must be byte-identical; the
# script exits non-zero if they are not or if any run fails (no figure from
# a failed run).
#
# usage: OJAS=build/bin/ojas GOBENCH=build/bin/ojas-train-bench \
#        bash scripts/go_vs_cli.sh CONFIG.json OUTDIR [key=value ...]
#   REPS (3), SKIP (2: warm-up steps left out of the rate)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: go_vs_cli.sh CONFIG.json OUTDIR [key=value ...]" >&2; exit 2; }
cfg=$1 out=$2; shift 2
ojas=${OJAS:?OJAS names the ojas binary}
gob=${GOBENCH:?GOBENCH names the ojas-train-bench binary (bench/go)}
reps=${REPS:-3} skip=${SKIP:-2}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "go_vs_cli: REPS=$reps is not a count of pairs (1 or more)" >&2; exit 2; }
[[ $skip =~ ^[0-9]+$ ]] || { echo "go_vs_cli: SKIP=$skip is not a count of steps (0 or more)" >&2; exit 2; }
mkdir -p "$out"
sets=() gsets=()
for kv in "$@"; do sets+=(--set "$kv"); gsets+=(-set "$kv"); done

rate() { # metrics.jsonl -> tokens/s over the steps after SKIP
  python3 - "$1" "$skip" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in steps if r.get("type") == "train"]
skip = int(sys.argv[2])
w = [r for r in steps if r["step"] >= skip]
if len(w) < 3:
    sys.exit("go_vs_cli: too few steps after SKIP")
# per step: tokens over the wall time since the previous step's record (the
# time between steps counts); the median resists a neighbour's burst, the
# window's mean is printed beside it
d = sorted((b["tokens"] - a["tokens"]) / (b["elapsed_s"] - a["elapsed_s"]) for a, b in zip(w, w[1:]))
mean = (w[-1]["tokens"] - w[0]["tokens"]) / (w[-1]["elapsed_s"] - w[0]["elapsed_s"])
print('%.1f, "window_mean": %.1f' % (statistics.median(d), mean))
PY
}
run_cli() {
  rm -rf "$out/cli$1"
  "$ojas" train --no-progress --no-plot --config "$cfg" --out "$out/cli$1" "${sets[@]}" \
    > "$out/cli$1.log" 2>&1 || { echo "go_vs_cli: ojas train failed:"; tail -5 "$out/cli$1.log"; exit 1; } >&2
  local t
  t=$(rate "$out/cli$1/metrics.jsonl") || exit 1 # no line from a run without a rate
  echo "{\"run\": \"cli\", \"rep\": $1, \"tokens_per_s\": $t}"
}
run_go() {
  rm -rf "$out/go$1"
  "$gob" -config "$cfg" -out "$out/go$1" "${gsets[@]}" > "$out/go$1.log" 2>&1 ||
    { echo "go_vs_cli: the Go run failed:"; tail -5 "$out/go$1.log"; exit 1; } >&2
  local t
  t=$(rate "$out/go$1/metrics.jsonl") || exit 1
  echo "{\"run\": \"go\", \"rep\": $1, \"tokens_per_s\": $t}"
}
: > "$out/runs.jsonl"
for r in $(seq 1 "$reps"); do
  if [ $((r % 2)) = 1 ]; then run_cli "$r"; run_go "$r"; else run_go "$r"; run_cli "$r"; fi
done | tee "$out/runs.jsonl"
# the same bits: the last checkpoint of each pair (the CLI's final one is at max_steps too)
exact=$(grep -c '"numerics": *"exact"' "$cfg" || true)
for kv in "$@"; do [ "$kv" = numerics=exact ] && exact=1; done
same=null
if [ "$exact" -gt 0 ]; then
  same=true
  for r in $(seq 1 "$reps"); do
    c=$(ls -d "$out/cli$r"/ckpt-* | sort | tail -1) g=$(ls -d "$out/go$r"/ckpt-* | sort | tail -1)
    for f in model.safetensors optimizer.safetensors; do
      cmp -s "$c/$f" "$g/$f" || { same=false; echo "go_vs_cli: $c/$f and $g/$f differ" >&2; }
    done
  done
fi
python3 - "$out/runs.jsonl" "$same" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {k: statistics.median(r["tokens_per_s"] for r in runs if r["run"] == k) for k in ("cli", "go")}
print(json.dumps({"summary": True, "cli_tokens_per_s": med["cli"], "go_tokens_per_s": med["go"],
                  "go_over_cli": round(med["go"] / med["cli"], 4), "checkpoints_equal": json.loads(sys.argv[2])}))
PY
[ "$same" != false ]
