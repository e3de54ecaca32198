#!/usr/bin/env bash
# Run the example end to end on a small corpus (this repository's README):
# a tokenizer and shards made with the ojas binary, 6 steps of nanolab-tiny
# with a resume halfway, and a sample. The ctest entry go_example runs it
# (cmake/go.cmake sets the Go environment). Usage: run.sh OJAS_BINARY
# (a path, relative or absolute, or a name on PATH).
set -euo pipefail
ojas=${1:?usage: run.sh OJAS_BINARY}
case $ojas in
  */*) ojas=$(cd "$(dirname "$ojas")" 2>/dev/null && pwd)/$(basename "$ojas") || ojas=$1 ;;
  *) ojas=$(command -v "$ojas") || ojas=$1 ;;
esac
[ -x "$ojas" ] || { echo "run.sh: $1 is not an executable ojas binary" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ojas-go-example-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$here/../../README.md" "$tmp/corpus.txt"
(cd "$tmp" && "$ojas" tokenizer train --vocab-size 400 --threads 1 --out tok corpus.txt &&
  "$ojas" data prepare --vocab tok --out data --threads 1 corpus.txt) >"$tmp/prep.txt" 2>&1 ||
  { cat "$tmp/prep.txt"; exit 1; }
cat >"$tmp/c.json" <<'JSON'
{"model": "nanolab-tiny", "batch_size": 4, "seq_len": 32, "warmup_steps": 1,
 "eval_every": 0, "eval_batches": 1, "ckpt_every": 0, "peak_flops": 1e10, "threads": 1}
JSON
cd "$here"
go run . -config "$tmp/c.json" -data "$tmp/data" -tokenizer "$tmp/tok" -out "$tmp/run" \
  -steps 6 -prompt "The model" >"$tmp/out.txt" 2>"$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
cat "$tmp/err.txt" "$tmp/out.txt"
grep -q "resumed at step 3" "$tmp/err.txt"
grep -q "step 6: loss" "$tmp/err.txt"
grep -q "^The model" "$tmp/out.txt"
