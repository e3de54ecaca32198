#!/usr/bin/env bash
# Batch-1 CPU decode, f32 vs q8_0 vs q4_0 vs q4_1 vs q4_k, ojas beside llama.cpp on
# the same GGUF files: bench_quant_decode writes the files (GPT-2 124M,
# random init, GPT-2's tokenizer) and times ojas; bench/quant/llama_peer.mjs
# times llama.cpp (npm node-llama-cpp@3.21.1, prebuilt CPU binaries) on each
# file with the same prompt ids and threads, and says whether the greedy
# tokens agree. Needs a build (BUILD, default build-cpu), node, and
# node-llama-cpp in third_party/npm (installed here on first use; about
# 0.7 GB with every platform's binaries, so not part of scripts/deps.sh;
# OJAS_NPM_DIR names another npm directory).
#   bench/quant/run.sh [THREADS (2)] [NEW (64)] [REPEATS (3)] [PRESET (gpt2-124m)]
# (PRESET llama-small: a small Llama-family model, to check llama.cpp's
# reading of ojas's llama files)
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS=${1:-2}; NEW=${2:-64}; REPEATS=${3:-3}; PRESET=${4:-gpt2-124m}
BUILD=${BUILD:-build-cpu}
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
VOCAB=${OJAS_GPT2_DIR:-third_party/gpt2}
[ -f "$VOCAB/encoder.json" ] || { echo "bench/quant/run.sh: no $VOCAB/encoder.json (run scripts/deps.sh, or set OJAS_GPT2_DIR)"; exit 1; }
NPM=${OJAS_NPM_DIR:-third_party/npm}
if [ ! -f "$NPM/node_modules/node-llama-cpp/package.json" ]; then
  (cd "$NPM" && npm install --no-audit --no-fund --silent node-llama-cpp@3.21.1)
fi
"$BUILD/bin/bench_quant_decode" --preset "$PRESET" --threads "$THREADS" --new "$NEW" --repeats "$REPEATS" \
  --vocab "$VOCAB" --out "$OUT" | tee "$OUT/ojas.jsonl"
while read -r line; do
  v=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["variant"])' "$line")
  p=$(python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.argv[1])["prompt"])))' "$line")
  node bench/quant/llama_peer.mjs "$OUT/$v.gguf" "$p" "$NEW" "$THREADS" > "$OUT/peer-$v.json"
  python3 - "$line" "$(cat "$OUT/peer-$v.json")" <<'PY'
import json, sys
o, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
same = sum(1 for a, b in zip(o["tokens"], p["tokens"]) if a == b)
first = next((i for i, (a, b) in enumerate(zip(o["tokens"], p["tokens"])) if a != b), -1)
print(json.dumps({"variant": o["variant"], "ojas_tok_s": o["tok_s"], "llama_cpp_tok_s": round(p["tok_s"], 2),
                  "ojas_vs_llama_cpp": round(o["tok_s"] / p["tok_s"], 3), "bytes_per_token": o["bytes_per_token"],
                  "tokens_equal": same, "of": min(len(o["tokens"]), len(p["tokens"])), "first_diff": first}))
PY
done < "$OUT/ojas.jsonl"
