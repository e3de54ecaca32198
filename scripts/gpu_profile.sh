#!/usr/bin/env bash
# GPU profile run (issue 8): build with CUDA in build-gpu/, run the GPU
# tests, then bench_gpu_ops (every op of a nanolab-124m and a gpt2-124m
# training step at B=16, T=1024, forward and backward timed separately)
# and bench_gpu_train for both presets (3 warm-up + 5 timed steps), all
# with OJAS_CUDA_PROFILE=1 so each engine prints its per-kernel cumulative
# device times (cudaEvent pairs, per kernel name) to stderr when it is
# freed. The train profile covers model creation and all 8 steps: divide
# by the step count ("calls" says how often each kernel ran).
#
# Files in $OUT (else build-gpu/profile), flat, 7 at most:
#   profile.log   everything this script printed (summary at the end)
#   build.log     configure + build output
#   ctest.log     the GPU tests
#   ops.log       bench_gpu_ops: the per-op tables (stdout) + kernel profile
#   train_<preset>_<dtype>.log   per-step times + kernel profile
#   train.jsonl   bench_gpu_train's JSON lines
#
# Libraries: as scripts/gpu_check.sh (carry third_party/gpudeps where the
# image lacks pkg-config/jansson/pcre2/xxhash/cmocka).
# PROFILE_TRAIN_STEPS / PROFILE_TRAIN_WARMUP change the 5 + 3 steps;
# PROFILE_DTYPES="f32 bf16" picks the compute dtypes (default f32);
# OJAS_TRAIN_PROFILE=1 adds per-phase host times of each trainer step
# (src/train/loop.c; =2 waits for the device at the end of each phase).
# PROFILE_TESTS=0 skips building and running the GPU tests.
# PROFILE_DECODE=0 skips the batch-1 decode benchmark (bench_gpu_decode).
# Budget: stops starting new stages after PROFILE_BUDGET seconds (default 450), each
# stage under a timeout, so the whole run stays within 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
O=${OUT:-$ROOT/build-gpu/profile}
mkdir -p "$O"
exec > >(tee "$O/profile.log") 2>&1
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
BUDGET=${PROFILE_BUDGET:-450}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# timeout for a stage: min(want, time left), at least 10 s
tmo() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $(( l > 10 ? l : 10 )) || echo "$1"; }
summary=()
note() { summary+=("$1"); echo "== $1"; }
finish() {
  echo; echo "==================== gpu_profile summary ($(( $(date +%s) - T0 )) s)"
  printf '%s\n' "${summary[@]}"; exit "${1:-0}"
}

echo "== gpu_profile $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
echo "== git: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --short 2>/dev/null | wc -l) changed files"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || echo "(no nvidia-smi)"
NVCC=""
for c in /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then NVCC=$c; break; fi
done
[ -z "$NVCC" ] && { note "FAIL: no nvcc"; finish 1; }

# ---------------------------------------------------------------- libraries
. scripts/gpu_env.sh
if gpu_env_setup; then note "$gpu_env_note"; else note "FAIL: $gpu_env_note"; finish 1; fi

# ---------------------------------------------------------------- build
gen=()
command -v ninja >/dev/null && [ ! -f build-gpu/Makefile ] && gen=(-G Ninja)
t=$(date +%s)
targets="bench_gpu_ops bench_gpu_train bench_gpu_decode bench_gpu_gemm ojas_cli"
[ "${PROFILE_TESTS:-1}" = 1 ] && targets="test_core_cuda test_gpu_ops test_gpu_gpt $targets"
if ! { cmake -S . -B build-gpu "${gen[@]}" -DOJAS_CUDA=ON -DOJAS_BENCH=ON -DOJAS_TESTS=ON \
         -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_COMPILER="$NVCC" "${cmake_extra[@]}" &&
       cmake --build build-gpu -j "$JOBS" --target $targets; } > "$O/build.log" 2>&1; then
  grep -E "error|Error" "$O/build.log" | head -30
  note "FAIL: build (build.log)"; finish 1
fi
note "build: ok in $(( $(date +%s) - t )) s"

# ---------------------------------------------------------------- tests
if [ "${PROFILE_TESTS:-1}" = 1 ]; then
t=$(date +%s)
(cd build-gpu && ctest -R '^test_(core_cuda|gpu_ops|gpu_gpt)$' --output-on-failure \
   --timeout "$(tmo 120)") > "$O/ctest.log" 2>&1
rc=$?
tail -8 "$O/ctest.log"
if [ $rc -ne 0 ]; then note "FAIL: GPU tests (ctest.log) in $(( $(date +%s) - t )) s"
elif grep -qiE "\*\*\*Skipped|Not Run" "$O/ctest.log"; then note "FAIL: a GPU test skipped (ctest.log)"
else note "GPU tests: passed in $(( $(date +%s) - t )) s"; fi
fi

# ---------------------------------------------------------------- ojas train --device cuda
# A tiny corpus, tokenizer and shards; train on the GPU, resume the GPU's
# checkpoint on the CPU, then generate on the GPU (set PROFILE_TRAIN_SMOKE=0
# to skip).
if [ "${PROFILE_TRAIN_SMOKE:-1}" = 1 ]; then
  t=$(date +%s)
  S=$(mktemp -d)
  J='{"model": "nanolab-tiny", "batch_size": 4, "seq_len": 64, "max_steps": 20, "eval_every": 10,
      "eval_batches": 2, "ckpt_every": 10, "warmup_steps": 2}'
  {
    cat README.md docs/*.md > "$S/c.txt" && echo "$J" > "$S/c.json" &&
    build-gpu/bin/ojas tokenizer train --vocab-size 300 --out "$S/tok" "$S/c.txt" &&
    build-gpu/bin/ojas data prepare --vocab "$S/tok" --out "$S/sh" --val-fraction 0.1 "$S/c.txt" &&
    build-gpu/bin/ojas train --config "$S/c.json" --out "$S/run" --device cuda --no-progress \
      --set data_dir="$S/sh" --set tokenizer_dir="$S/tok" --set max_steps=10 --set dtype=bf16 &&
    build-gpu/bin/ojas train --resume "$S/run" --out "$S/run" --device cpu --no-progress &&
    build-gpu/bin/ojas generate --checkpoint "$S/run" --vocab "$S/tok" --prompt "ojas" \
      --max-new-tokens 20 --seed 1 --device cuda
  } > "$O/train_smoke.log" 2>&1
  rc=$?
  note "ojas train --device cuda, resume on cpu, generate on cuda: exit $rc in $(( $(date +%s) - t )) s"
  grep -E "^(done|time limit|checkpoint|eval)|ojas" "$O/train_smoke.log" | tail -8
fi

# ---------------------------------------------------------------- per-op bench
export OJAS_CUDA_PROFILE=1
if [ "${PROFILE_OPS:-1}" = 1 ]; then
  t=$(date +%s)
  timeout "$(tmo 150)" build-gpu/bin/bench_gpu_ops all 16 1024 5 > "$O/ops.log" 2>&1
  rc=$?
  note "bench_gpu_ops: exit $rc in $(( $(date +%s) - t )) s (ops.log)"
  grep -E "^(== |total)" "$O/ops.log"
fi

# ---------------------------------------------------------------- training steps
: > "$O/train.jsonl"
for dt in ${PROFILE_DTYPES:-f32}; do
for p in gpt2-124m nanolab-124m; do
  l=$(left)
  if [ "$l" -lt 30 ]; then note "bench_gpu_train $p $dt: not run (budget spent)"; continue; fi
  t=$(date +%s)
  timeout "$(tmo 120)" build-gpu/bin/bench_gpu_train "$p" 16 1024 "${PROFILE_TRAIN_STEPS:-5}" \
    "${PROFILE_TRAIN_WARMUP:-3}" cuda "$dt" >> "$O/train.jsonl" 2> "$O/train_${p}_$dt.log"
  rc=$?
  note "bench_gpu_train $p $dt: exit $rc in $(( $(date +%s) - t )) s (train_${p}_$dt.log)"
  grep -E "^step" "$O/train_${p}_$dt.log" | tail -2
  grep -A14 "== cuda profile" "$O/train_${p}_$dt.log"
  grep -E "^phase|== host time" "$O/train_${p}_$dt.log" | tail -7
done
done
# ---------------------------------------------------------------- decode
if [ "${PROFILE_DECODE:-1}" = 1 ]; then
  for dt in ${PROFILE_DTYPES:-f32}; do
    t=$(date +%s)
    OJAS_CUDA_PROFILE=0 timeout "$(tmo 90)" build-gpu/bin/bench_gpu_decode 3 cuda "$dt" >> "$O/train.jsonl" \
      2> "$O/decode_$dt.log"
    note "bench_gpu_decode $dt: exit $? in $(( $(date +%s) - t )) s"
  done
fi
cat "$O/train.jsonl"
finish 0
