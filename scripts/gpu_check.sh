#!/usr/bin/env bash
# Build ojas with the CUDA backend in build-gpu/ and run the GPU tests
# (tests/gpu: test_core_cuda, test_gpu_ops, test_gpu_gpt, test_gpu_decode, test_gpu_train,
# test_gpu_dist (when MPI is built in), test_gpu_paged_attention, test_gpu_quant,
# test_gpu_attention, test_gpu_serve) on a machine with
# an NVIDIA GPU, then check test_gpu_ops under compute-sanitizer memcheck
# when the sanitizer is there. Logs go to $OUT when it is set (else
# build-gpu/logs): gpu_check.log (everything), ctest.log, sync.log (a
# failing test rerun with OJAS_CUDA_SYNC=1, so a fault names its kernel),
# memcheck.log. Exit status 0 only when every stage passed; a GPU test that
# skips (no usable device) counts as a failure here.
#
# On the lent H200 machines (no registry reachable), if the image lacks
# pkg-config or jansson/pcre2/xxhash/cmocka: run scripts/gpu_deps.sh where
# apt works and carry third_party/gpudeps; this script unpacks it under
# /tmp/ojas-gpudeps (never into /) and points pkg-config and the loader there.
#
# Environment: JOBS (build parallelism, default nproc), GPU_CHECK_MEMCHECK=0
# to skip the sanitizer, GPU_CHECK_MEMCHECK_TIMEOUT (default 300 s),
# GPU_CHECK_TIMEOUT (seconds per test, default 300). Budget (estimated, not
# yet measured on a GPU machine): build 1-2 min on 16 cores, tests under a
# minute, memcheck at most its timeout, so under 10 minutes in all.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=${OUT:-$ROOT/build-gpu/logs}
mkdir -p "$LOGS"
exec > >(tee "$LOGS/gpu_check.log") 2>&1
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
TEST_TIMEOUT=${GPU_CHECK_TIMEOUT:-300}
status=0
summary=()
note() { summary+=("$1"); echo "== $1"; }
fail() { note "FAIL: $1"; status=1; }

echo "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(uname -m))"
echo "== git: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --short 2>/dev/null | wc -l) changed files"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "(no nvidia-smi)"

# ---------------------------------------------------------------- compilers
NVCC=""
for c in /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then NVCC=$c; break; fi
done
if [ -z "$NVCC" ]; then
  fail "no nvcc found (looked in /usr/local/cuda/bin and PATH)"
  printf '%s\n' "${summary[@]}"; exit 1
fi
echo "== nvcc: $NVCC ($("$NVCC" --version | tail -1))"
echo "== cmake: $(cmake --version | head -1)"

# ---------------------------------------------------------------- libraries
. scripts/gpu_env.sh
if gpu_env_setup; then note "$gpu_env_note"; else
  fail "$gpu_env_note"; printf '%s\n' "${summary[@]}"; exit 1
fi

# ---------------------------------------------------------------- build
gen=()
command -v ninja >/dev/null && [ ! -f build-gpu/Makefile ] && gen=(-G Ninja)
if ! cmake -S . -B build-gpu "${gen[@]}" -DOJAS_CUDA=ON -DOJAS_BENCH=OFF -DOJAS_TESTS=ON \
     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_COMPILER="$NVCC" "${cmake_extra[@]}" \
     > "$LOGS/configure.log" 2>&1; then
  tail -40 "$LOGS/configure.log"
  fail "cmake configure (log: configure.log)"
  printf '%s\n' "${summary[@]}"; exit 1
fi
grep -q "CUDA backend ON" "$LOGS/configure.log" || { fail "configure did not enable the CUDA backend"; }
t0=$(date +%s)
if ! cmake --build build-gpu -j "$JOBS" --target test_core_cuda test_gpu_ops test_gpu_gpt test_gpu_decode test_gpu_train \
     test_gpu_paged_attention test_gpu_quant test_gpu_attention test_gpu_serve ojas_cli \
     $(grep -q 'MPI ON' "$LOGS/configure.log" && echo test_gpu_dist) \
     > "$LOGS/build.log" 2>&1; then
  grep -E "error|Error" "$LOGS/build.log" | head -40
  tail -20 "$LOGS/build.log"
  fail "build (log: build.log)"
  printf '%s\n' "${summary[@]}"; exit 1
fi
note "build: ok in $(( $(date +%s) - t0 )) s"

# ---------------------------------------------------------------- tests
tests='^test_(core_cuda|gpu_ops|gpu_gpt|gpu_decode|gpu_train|gpu_dist|gpu_paged_attention|gpu_quant|gpu_attention|gpu_serve)$'
(cd build-gpu && ctest -R "$tests" --output-on-failure --timeout "$TEST_TIMEOUT") 2>&1 |
  tee "$LOGS/ctest.log"
ctest_rc=${PIPESTATUS[0]}
if [ "$ctest_rc" -ne 0 ]; then
  fail "ctest ($ctest_rc; log: ctest.log)"
elif grep -qiE "\*\*\*Skipped|Not Run" "$LOGS/ctest.log"; then
  fail "a GPU test skipped: no usable CUDA device (see ctest.log)"
else
  note "ctest: the GPU tests passed"
fi

# The CUDA backend is the module build-gpu/libojas-cuda.so, loaded at run
# time: the test programs themselves must carry no CUDA library.
if [ ! -f build-gpu/libojas-cuda.so ]; then
  fail "build-gpu/libojas-cuda.so (the CUDA backend module) was not built"
elif ldd build-gpu/bin/test_gpu_ops build-gpu/libojas.so | grep -qE 'libcudart|libcublas'; then
  fail "a test program or libojas.so links a CUDA library (ldd); only libojas-cuda.so may"
else
  note "module: the GPU tests ran through build-gpu/libojas-cuda.so; no CUDA library in their ldd"
fi

# A failure: rerun each GPU test with a synchronisation after every kernel,
# so an asynchronous fault is reported by the kernel that caused it.
if [ "$ctest_rc" -ne 0 ]; then
  : > "$LOGS/sync.log"
  for t in test_core_cuda test_gpu_ops test_gpu_gpt test_gpu_decode test_gpu_train; do
    echo "---- OJAS_CUDA_SYNC=1 $t" >> "$LOGS/sync.log"
    OJAS_CUDA_SYNC=1 timeout "$TEST_TIMEOUT" "build-gpu/bin/$t" >> "$LOGS/sync.log" 2>&1
    echo "---- exit $?" >> "$LOGS/sync.log"
  done
  grep -E "FAILED|fail|cuda kernel|exit" "$LOGS/sync.log" | head -40
  note "rerun with OJAS_CUDA_SYNC=1: sync.log"
fi

# ---------------------------------------------------------------- sanitizer
SAN=""
for c in /usr/local/cuda/bin/compute-sanitizer "$(command -v compute-sanitizer 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then SAN=$c; break; fi
done
if [ "${GPU_CHECK_MEMCHECK:-1}" = 0 ]; then
  note "memcheck: skipped (GPU_CHECK_MEMCHECK=0)"
elif [ -z "$SAN" ]; then
  note "memcheck: compute-sanitizer not found, not run"
else
  timeout "${GPU_CHECK_MEMCHECK_TIMEOUT:-300}" "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 \
    build-gpu/bin/test_gpu_ops > "$LOGS/memcheck.log" 2>&1
  rc=$?
  tail -25 "$LOGS/memcheck.log"
  if [ $rc -eq 0 ]; then
    note "memcheck: test_gpu_ops clean"
  elif [ $rc -eq 124 ]; then
    note "memcheck: timed out after ${GPU_CHECK_MEMCHECK_TIMEOUT:-300} s (not a verdict; log: memcheck.log)"
  elif grep -q "Device not supported\|error 999" "$LOGS/memcheck.log"; then
    note "memcheck: the sanitizer cannot run on this machine (log: memcheck.log)"
  else
    fail "memcheck ($rc; log: memcheck.log)"
  fi
fi

cp build-gpu/Testing/Temporary/LastTest.log "$LOGS/LastTest.log" 2>/dev/null
echo
echo "==================== gpu_check summary"
printf '%s\n' "${summary[@]}"
[ $status -eq 0 ] && echo "ALL PASSED" || echo "SOME STAGES FAILED"
exit $status
