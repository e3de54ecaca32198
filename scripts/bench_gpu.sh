#!/usr/bin/env bash
# GPU benchmarks, ojas beside PyTorch in one run on one GPU
# (docs/bench-gpu.md): training steps of gpt2-124m and nanolab-124m at
# B=16 and B=32, T=1024 (ojas bf16 autocast; PyTorch eager and
# torch.compile, bf16 autocast), batch-1 greedy decode of GPT-2 124M
# (ojas oj_generate; PyTorch eager KV cache and its static-cache CUDA graph),
# and the GEMMs of a step (oj_matmul beside torch.matmul). The PyTorch side
# is the project's anchor scripts, copied (git-ignored) into
# third_party/anchors from ../shared/anchors before carrying this tree.
#
# usage: bash scripts/bench_gpu.sh [OUTDIR]   (default $OUT or build-gpu/bench)
# Environment: BUILD (build dir, default build-gpu), STEPS/WARMUP (ojas
# timed/warm-up steps, 10/3), BENCH_BUDGET (seconds after which no new stage
# starts, default 540), BENCH_SKIP_COMPILE=1 (no torch.compile runs),
# BENCH_SKIP_CEILINGS=1 (MFU against 798 TFLOP/s, the anchors' measured
# ceiling), BENCH_BATCHES (default "16 32"), BENCH_COMPILE_BATCHES
# (torch.compile's, default the same, comma-separated), BENCH_GRAPH (ojas
# training modes, default "graph eager": forward + backward replayed as a
# CUDA graph, and the eager step), BENCH_DATA (a directory of train_*.bin
# shards the ojas training steps run on; default a generated shard of
# random tokens), BENCH_VOCAB (ojas's vocabulary; default 50304 for gpt2).
set -uo pipefail
cd "$(dirname "$0")/.."
O=${1:-${OUT:-build-gpu/bench}}
mkdir -p "$O"
J=$O/bench.jsonl
: > "$J"
T0=$(date +%s)
BUDGET=${BENCH_BUDGET:-540}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
stage() { # stage NAME SECONDS CMD...: run unless the budget is spent; never longer than what is left
  local name=$1 want=$2 l; shift 2
  l=$(left)
  if [ "$l" -lt 20 ]; then echo "== $name: not run (budget spent)"; return; fi
  [ "$l" -lt "$want" ] && want=$l
  echo "== $name ($(date -u +%H:%M:%S))"
  timeout "$want" "$@" || echo "== $name: exit $?"
}
BUILD=${BUILD:-build-gpu}
. scripts/gpu_env.sh
gpu_env_setup || { echo "$gpu_env_note"; exit 1; }
if [ ! -x "$BUILD/bin/bench_gpu_train" ] || [ ! -x "$BUILD/bin/bench_gpu_decode" ]; then
  cmake -S . -B "$BUILD" -DOJAS_CUDA=ON -DOJAS_TESTS=OFF -DOJAS_BENCH=ON "${cmake_extra[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_EXTRA:-} >/dev/null &&
    cmake --build "$BUILD" -j"$(nproc)" --target bench_gpu_train bench_gpu_decode bench_gpu_gemm \
      >/dev/null || { echo "build failed"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/gpu.txt"
A=third_party/anchors
[ -f "$A/train_bench.py" ] ||
  echo "== PyTorch stages: skipped (no $A: the PyTorch reference scripts are not in this repository)"
MMF=/tmp/anchors_mm_tflops.txt
[ -f "$A/ceilings.py" ] && [ "${BENCH_SKIP_CEILINGS:-0}" != 1 ] &&
  stage "ceilings" 120 python3 "$A/ceilings.py" --jsonl "$J" --mmfile "$MMF"
MM=$(cat "$MMF" 2>/dev/null || echo 798)
export MM_TFLOPS=$MM
BATCHES=${BENCH_BATCHES:-16 32}
blist=$(echo "$BATCHES" | tr ' ' ',')
first=${BATCHES%% *}
ojas_train() { # preset batch
  for mode in ${BENCH_GRAPH:-graph eager}; do
    stage "ojas $1 B=$2 bf16 $mode" 120 sh -c "'$BUILD/bin/bench_gpu_train' $1 $2 1024 ${STEPS:-10} \
      ${WARMUP:-3} cuda bf16 $mode ${BENCH_DATA:+--data '$BENCH_DATA'} \
      ${BENCH_VOCAB:+--vocab $BENCH_VOCAB} >> '$J' 2> '$O/ojas_$1_$2_$mode.log'"
  done
}
# most wanted first: each system at the first batch size, the decode side
# by side, then the rest
for p in gpt2-124m nanolab-124m; do ojas_train $p "$first"; done
stage "ojas decode bf16w" 90 sh -c "'$BUILD/bin/bench_gpu_decode' 3 cuda bf16w >> '$J' 2> '$O/ojas_decode_bf16w.log'"
if [ -f "$A/infer_bench.py" ]; then
  stage "PyTorch decode" 120 sh -c "python3 '$A/infer_bench.py' --no-hf --no-check --jsonl '$J' \
    > '$O/torch_decode.log' 2>&1"
fi
if [ -f "$A/train_bench.py" ]; then
  for arch in gpt2 nanolab; do
    stage "PyTorch eager $arch" 150 sh -c "python3 '$A/train_bench.py' --arch $arch --batches $blist \
      --jsonl '$J' > '$O/torch_eager_$arch.log' 2>&1"
  done
  if [ "${BENCH_SKIP_COMPILE:-0}" != 1 ]; then
    for arch in gpt2 nanolab; do
      stage "PyTorch compile $arch" 200 sh -c "python3 '$A/train_bench.py' --arch $arch --compile \
        --batches ${BENCH_COMPILE_BATCHES:-$blist} --jsonl '$J' > '$O/torch_compile_$arch.log' 2>&1"
    done
  fi
fi
# f32 weights (bf16w, as the anchors hold them, ran above)
stage "ojas decode f32" 90 sh -c "'$BUILD/bin/bench_gpu_decode' 3 cuda f32 >> '$J' 2> '$O/ojas_decode_f32.log'"
for b in $BATCHES; do
  [ "$b" = "$first" ] && continue
  for p in gpt2-124m nanolab-124m; do ojas_train $p "$b"; done
done
if [ -x "$BUILD/bin/bench_gpu_gemm" ]; then
  stage "GEMMs" 60 sh -c "'$BUILD/bin/bench_gpu_gemm' 20 >> '$J' 2> '$O/gemm.log' &&
    python3 bench/gpu/gemm_torch.py 20 >> '$J' 2>> '$O/gemm.log'"
fi
echo "== results ($J, $(( $(date +%s) - T0 )) s)"
cat "$J"
