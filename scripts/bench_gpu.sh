#!/usr/bin/env bash
# GPU training benchmark, ojas beside PyTorch in one run on one GPU
# (docs/bench-gpu.md). Needs a CUDA machine; the PyTorch side is the
# project's anchor scripts, copied (git-ignored) into third_party/anchors
# from ../shared/anchors (copy them there before carrying this tree).
# usage: bash scripts/bench_gpu.sh [OUTDIR]   (default $OUT or build-gpu/bench)
set -uo pipefail
cd "$(dirname "$0")/.."
O=${1:-${OUT:-build-gpu/bench}}
mkdir -p "$O"
J=$O/bench.jsonl
: > "$J"
BUILD=${BUILD:-build-gpu}
if [ ! -x "$BUILD/bin/bench_gpu_train" ]; then
  cmake -S . -B "$BUILD" -DOJAS_CUDA=ON -DOJAS_TESTS=OFF -DOJAS_BENCH=ON ${CMAKE_EXTRA:-} >/dev/null &&
    cmake --build "$BUILD" -j"$(nproc)" --target bench_gpu_train >/dev/null || { echo "build failed"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/gpu.txt"
A=third_party/anchors
MMF=/tmp/anchors_mm_tflops.txt
if [ -f "$A/ceilings.py" ]; then
  timeout 120 python3 "$A/ceilings.py" --jsonl "$J" --mmfile "$MMF" || echo "ceilings failed"
fi
MM=$(cat "$MMF" 2>/dev/null || echo 798)
for cfg in "gpt2-124m 16 1024" "nanolab-124m 16 1024"; do
  echo "== ojas $cfg"
  MM_TFLOPS=$MM timeout 300 "$BUILD/bin/bench_gpu_train" $cfg ${STEPS:-10} ${WARMUP:-3} \
    >>"$J" 2>"$O/ojas_${cfg%% *}.log" || echo "ojas $cfg failed: $(tail -3 "$O/ojas_${cfg%% *}.log")"
  tail -2 "$O/ojas_${cfg%% *}.log"
done
if [ -f "$A/train_bench.py" ]; then
  for arch in gpt2 nanolab; do
    echo "== PyTorch eager $arch B=16"
    MM_TFLOPS=$MM timeout 150 python3 "$A/train_bench.py" --arch $arch --batches 16 --jsonl "$J" \
      >"$O/torch_$arch.log" 2>&1 || echo "torch $arch failed: $(tail -3 "$O/torch_$arch.log")"
  done
fi
echo "== results ($J)"
cat "$J"
