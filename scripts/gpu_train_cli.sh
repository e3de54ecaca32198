#!/usr/bin/env bash
# `ojas train` on the GPU as a user runs it: real shards (the KJV Bible with
# GPT-2's BPE, vocab_size 50257 as every GPT-2 file has), B=16, T=1024,
# bf16 autocast, the step as a CUDA graph, no eval or checkpoint inside the
# window. For each model, the CLI's own tokens/s with the environment
# switch AB at each of AB_VALUES (default OJAS_TRAIN_PREFETCH at 1 and 0:
# the next batch taken during the step or at its start), the runs
# interleaved REPEAT times, so the settings are compared in one lease.
# 90 steps by default: the H200 holds its 1980 MHz clock until its power
# cap (clocks_event_reasons 0x4) slows windows of ~5 steps about every 30
# steps, so a shorter run's median depends on where the windows fall;
# compare with a PyTorch run of the same length.
#
# usage (repository root, on the GPU machine; shards made here with
#   ojas data prepare --vocab third_party/gpt2 --out DIR kjv.txt):
#   SHARDS=DIR TOK=third_party/gpt2 [BUILD=build-gpu] [STEPS=90] [AB=NAME]
#     [AB_VALUES="1 0"] [REPEAT=1] bash scripts/gpu_train_cli.sh [models...]
# Writes each run's log under ${OUT:-/tmp}/train_cli_*.log and prints one
# line per run: model, setting, the median tokens/s of the steps after 20
# (metrics.jsonl) and the last logged step line.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
STEPS=${STEPS:-90}
AB=${AB:-OJAS_TRAIN_PREFETCH}
AB_VALUES=${AB_VALUES:-1 0}
REPEAT=${REPEAT:-1}
LOGS=${OUT:-/tmp}
: "${SHARDS:?SHARDS=dir of train_*.bin / val_*.bin}" "${TOK:?TOK=tokenizer dir}"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(gpt2-124m nanolab-124m)
median() { # tokens_per_s of the step records after step 20 in metrics.jsonl $1
  python3 - "$1" <<'PY'
import json, statistics, sys
v = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("step", 0) > 20 and "tokens_per_s" in r and r["tokens_per_s"] is not None:
        v.append(r["tokens_per_s"])
print("%.0f" % statistics.median(v) if v else "none")
PY
}
for m in "${models[@]}"; do
  opt=adamw
  case $m in nanolab*) opt=muon ;; esac
  for rep in $(seq 1 "$REPEAT"); do
    for val in $AB_VALUES; do
      run=/tmp/train_cli_run_${m}_$val
      rm -rf "$run"
      log=$LOGS/train_cli_${m}_${AB}_${val}_$rep.log
      env "$AB=$val" "$BUILD/bin/ojas" train --device cuda --no-progress --out "$run" \
        --set model="$m" --set data_dir="$SHARDS" --set tokenizer_dir="$TOK" \
        --set vocab_size=50257 --set block_size=1024 --set batch_size=16 --set seq_len=1024 \
        --set dtype=bf16 --set cuda_graph=true --set optimizer=$opt --set max_steps="$STEPS" \
        --set time_limit_seconds=0 --set eval_every=0 --set ckpt_every=0 --set log_every=10 \
        --set warmup_steps=10 > "$log" 2>&1
      rc=$?
      echo "== $m $AB=$val run $rep rc=$rc: median $(median "$run/metrics.jsonl" 2>/dev/null) tok/s;" \
        "$(grep -E '^step ' "$log" | tail -1)"
      [ $rc -eq 0 ] || tail -5 "$log"
    done
  done
done
