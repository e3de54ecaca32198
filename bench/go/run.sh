#!/usr/bin/env bash
# Build ojas-train-bench and run scripts/go_vs_cli.sh once on a small corpus
# (this repository's README, nanolab-tiny, EXACT): the Go-driven run and
# `ojas train` must end with byte-identical checkpoints. The ctest entry
# go_train_bench runs it (cmake/go.cmake sets the Go environment); the
# rate it prints on a loaded machine is not a measurement.
# Usage: run.sh OJAS_BINARY
set -euo pipefail
ojas=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ojas-go-bench-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && go build -o "$tmp/ojas-train-bench" .)
# a stray argument (after which the flag package reads no -set) is refused by name
if "$tmp/ojas-train-bench" -config c.json -out "$tmp/x" max_steps=3 -set seed=1 2>"$tmp/stray.txt" ||
  ! grep -q 'unexpected argument "max_steps=3"' "$tmp/stray.txt"; then
  echo "run.sh: ojas-train-bench took a stray argument:"; cat "$tmp/stray.txt"; exit 1
fi
cp "$here/../../README.md" "$tmp/corpus.txt"
(cd "$tmp" && "$ojas" tokenizer train --vocab-size 400 --threads 1 --out tok corpus.txt &&
  "$ojas" data prepare --vocab tok --out data --threads 1 corpus.txt) >"$tmp/prep.txt" 2>&1 ||
  { cat "$tmp/prep.txt"; exit 1; }
cat >"$tmp/c.json" <<JSON
{"model": "nanolab-tiny", "batch_size": 4, "seq_len": 32, "warmup_steps": 1, "max_steps": 6,
 "eval_every": 0, "eval_batches": 1, "ckpt_every": 0, "peak_flops": 1e10, "threads": 1,
 "data_dir": "$tmp/data", "tokenizer_dir": "$tmp/tok"}
JSON
OJAS=$ojas GOBENCH=$tmp/ojas-train-bench REPS=1 \
  bash "$here/../../scripts/go_vs_cli.sh" "$tmp/c.json" "$tmp/out" numerics=exact | tee "$tmp/res.txt"
grep -q '"checkpoints_equal": true' "$tmp/res.txt"
