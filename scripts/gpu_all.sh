#!/usr/bin/env bash
# One device call: build with tests and benchmarks, run the GPU tests
# (scripts/gpu_check.sh, memcheck off unless GPU_CHECK_MEMCHECK=1), then the
# benchmarks beside PyTorch (scripts/bench_gpu.sh, torch.compile at B=16
# only) and, if time is left, an ncu profile of each model's step
# (scripts/gpu_ncu.sh; ALL_NCU lists them, default "nanolab-124m gpt2-124m
# decode"). Everything lands in one tarball, $OUT/gpu_all.tgz
# (the device tool brings back few files). Budget: ALL_BUDGET seconds in all
# (default 560, under the 600 s limit of one call); each stage starts only
# while time is left.
#
# usage (from the repository root, anchors copied into third_party/anchors):
#   OUT=/some/dir bash scripts/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
BUDGET=${ALL_BUDGET:-560}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
R=/tmp/gpu_all
rm -rf "$R" && mkdir -p "$R"
OUT=${OUT:-build-gpu}
mkdir -p "$OUT"
GPU_CHECK_MEMCHECK=${GPU_CHECK_MEMCHECK:-0} OUT=$R/check bash scripts/gpu_check.sh > "$R/check.txt" 2>&1
echo "gpu_check rc=$? ($(( $(date +%s) - T0 )) s)"
grep -E "Test +#|FAIL|ALL PASSED|SOME STAGES" "$R/check.txt" | head -20
. scripts/gpu_env.sh
gpu_env_setup >/dev/null
cmake -S . -B build-gpu -DOJAS_BENCH=ON > /dev/null 2>&1
cmake --build build-gpu -j"$(nproc)" --target bench_gpu_train bench_gpu_decode bench_gpu_gemm \
  > "$R/benchbuild.log" 2>&1 || tail -20 "$R/benchbuild.log"
l=$(left)
if [ "$l" -gt 120 ]; then
  BUILD=build-gpu BENCH_BUDGET=$(( l > 460 ? 400 : l - 60 )) BENCH_SKIP_CEILINGS=1 \
    BENCH_COMPILE_BATCHES=16 STEPS=10 WARMUP=3 bash scripts/bench_gpu.sh "$R/bench" > "$R/bench.txt" 2>&1
  grep "^==" "$R/bench.txt" | head -30
  cat "$R/bench/bench.jsonl" 2>/dev/null
fi
for p in ${ALL_NCU:-nanolab-124m gpt2-124m decode}; do
  [ "$(left)" -gt 90 ] || break
  mkdir -p "$R/ncu_$p"
  if [ "$p" = decode ]; then
    DECODE=1 DTYPE=bf16w SKIP=3000 COUNT=${DECODE_COUNT:-2000} OUT="$R/ncu_$p" timeout $(( $(left) - 30 )) bash scripts/gpu_ncu.sh > "$R/ncu_$p/top.txt" 2>&1; head -30 "$R/ncu_$p/top.txt"
  else
    # windows over the timed step of `bench_gpu_train P 16 1024 1 1` (counted on the H200,
    # 2026-11-30 after the sixth session's fusions: gpt2-124m's run launches ~1,600 kernels,
    # ~800 a step; nanolab-124m's ~2,960, ~1,480 a step)
    case $p in
      gpt2-124m) sk=800 ct=900 ;;
      nanolab-124m) sk=1480 ct=1600 ;;
      *) sk=1600 ct=1700 ;;
    esac
    PRESET=$p B=16 SKIP=${SKIP:-$sk} COUNT=${COUNT:-$ct} OUT="$R/ncu_$p" \
      timeout $(( $(left) - 30 )) bash scripts/gpu_ncu.sh > "$R/ncu_$p/top.txt" 2>&1; head -30 "$R/ncu_$p/top.txt"
  fi
done
tar -czf "$OUT/gpu_all.tgz" -C /tmp gpu_all
echo "gpu_all: $(( $(date +%s) - T0 )) s; results in $OUT/gpu_all.tgz"
