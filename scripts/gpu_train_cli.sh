#!/usr/bin/env bash
# `ojas train` on the GPU as a user runs it: real shards (the KJV Bible with
# GPT-2's BPE, vocab_size 50257 as every GPT-2 file has), B=16, T=1024,
# bf16 autocast, the step as a CUDA graph, no eval or checkpoint inside the
# window. For each model, the CLI's own tokens/s with the linear
# cross-entropy's padded logits rows (the default) and packed
# (OJAS_LCE_PAD=0), so the two layouts are compared in one lease.
#
# usage (repository root, on the GPU machine; shards made here with
#   ojas data prepare --vocab third_party/gpt2 --out DIR kjv.txt):
#   SHARDS=DIR TOK=third_party/gpt2 [BUILD=build-gpu] [STEPS=60] \
#     bash scripts/gpu_train_cli.sh [models...]
# Writes each run's log under ${OUT:-/tmp}/train_cli_*.log and prints one
# line per run: model, layout, the last logged step line.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
STEPS=${STEPS:-60}
LOGS=${OUT:-/tmp}
: "${SHARDS:?SHARDS=dir of train_*.bin / val_*.bin}" "${TOK:?TOK=tokenizer dir}"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(gpt2-124m nanolab-124m)
for m in "${models[@]}"; do
  opt=adamw
  case $m in nanolab*) opt=muon ;; esac
  for pad in 1 0; do
    run=/tmp/train_cli_run_${m}_$pad
    rm -rf "$run"
    log=$LOGS/train_cli_${m}_pad$pad.log
    OJAS_LCE_PAD=$pad "$BUILD/bin/ojas" train --device cuda --no-progress --out "$run" \
      --set model="$m" --set data_dir="$SHARDS" --set tokenizer_dir="$TOK" \
      --set vocab_size=50257 --set block_size=1024 --set batch_size=16 --set seq_len=1024 \
      --set dtype=bf16 --set cuda_graph=true --set optimizer=$opt --set max_steps="$STEPS" \
      --set time_limit_seconds=0 --set eval_every=0 --set ckpt_every=0 --set log_every=10 \
      --set warmup_steps=10 > "$log" 2>&1
    rc=$?
    echo "== $m pad=$pad rc=$rc: $(grep -E '^step ' "$log" | tail -1)"
    [ $rc -eq 0 ] || tail -5 "$log"
  done
done
