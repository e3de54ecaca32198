#!/usr/bin/env bash
# Build every tests/fuzz/fuzz_*.c as a libFuzzer binary (clang,
# -fsanitize=fuzzer,address,undefined) in build-fuzz/ and run each for
# FUZZ_SECONDS (default 60) seconds, one after the other, or all at once
# with FUZZ_PARALLEL=1. Seeds come from tests/fuzz/corpus/<target>/ (read
# only); what the fuzzer finds goes to build-fuzz/corpus/<target>/, crash
# inputs to build-fuzz/artifacts/, logs to build-fuzz/<target>.log.
# FUZZ_TARGETS="fuzz_safetensors" limits the targets; extra arguments are
# passed to every fuzzer run (e.g. -jobs=2, -rss_limit_mb=4096).
# Replay a crash: build-fuzz/<target> build-fuzz/artifacts/<file>.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${FUZZ_SECONDS:-60}
OUT=build-fuzz
CC=${FUZZ_CC:-clang}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }

pcs="jansson libxxhash libpcre2-8"
defs="-D_GNU_SOURCE"
if pkg-config --exists openblas; then pcs="$pcs openblas"; defs="$defs -DOJAS_HAVE_OPENBLAS=1"; fi
if pkg-config --exists icu-uc; then pcs="$pcs icu-uc"; defs="$defs -DOJAS_HAVE_ICU=1"; fi
# shellcheck disable=SC2086
CFLAGS_DEPS="$(pkg-config --cflags $pcs)"
# shellcheck disable=SC2086
LIBS="$(pkg-config --libs $pcs) -lpthread -lm"

# The library (CPU only), instrumented for coverage and the sanitizers. Built
# here rather than through CMake so warnings in code under way elsewhere do
# not stop fuzzing (no -Werror); objects are rebuilt when their source or any
# header is newer.
mkdir -p "$OUT/obj"
export CC SAN defs CFLAGS_DEPS OUT
# clang ignores `#pragma GCC target`, so cpu_simd.c's AVX-512 / AVX2 bodies
# do not compile with it; on a host that has those features the whole file
# gets them instead (the fuzz binaries only run here).
SIMD_FLAGS=""
if grep -qw avx512bw /proc/cpuinfo 2>/dev/null && grep -qw avx512vl /proc/cpuinfo; then
  SIMD_FLAGS="-mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mavx2"
fi
export SIMD_FLAGS
find src -name '*.c' -not -path 'src/backend/cuda/*' | sort | xargs -P "$(nproc)" -I{} bash -c '
  src={}; obj="$OUT/obj/$(echo "${src%.c}" | tr / _).o"
  extra=""; [ "$src" = src/backend/cpu/cpu_simd.c ] && extra=$SIMD_FLAGS
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src include -name "*.h" -newer "$obj" | head -1)" ]; then
    # shellcheck disable=SC2086
    "$CC" -std=c11 $defs $extra -g -O1 -fsanitize=fuzzer-no-link $SAN -w \
      -Iinclude -Isrc $CFLAGS_DEPS -c "$src" -o "$obj" || exit 255
  fi'
rm -f "$OUT/libojas-fuzz.a"
ar rcs "$OUT/libojas-fuzz.a" "$OUT"/obj/*.o

targets=${FUZZ_TARGETS:-$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')}
for t in $targets; do
  echo "fuzz: building $t"
  # shellcheck disable=SC2086
  "$CC" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer $SAN -Iinclude -Isrc \
    $CFLAGS_DEPS "tests/fuzz/$t.c" "$OUT/libojas-fuzz.a" $LIBS -o "$OUT/$t"
done

run() {
  local t=$1; shift
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts"
  local dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "fuzz: running $t for ${SECS}s (log $OUT/$t.log)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  "$OUT/$t" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 \
    -artifact_prefix="$OUT/artifacts/$t-" "${dict[@]}" "$@" \
    "$OUT/corpus/$t" "tests/fuzz/corpus/$t" >"$OUT/$t.log" 2>&1
  local rc=$?
  grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb" "$OUT/$t.log" \
    | sed "s/^/fuzz: $t: /" || true
  echo "fuzz: $t: corpus $(ls "$OUT/corpus/$t" | wc -l) files, exit $rc"
  return $rc
}

status=0
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
  pids=()
  for t in $targets; do run "$t" "$@" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
else
  for t in $targets; do run "$t" "$@" || status=1; done
fi
if [ $status != 0 ]; then echo "fuzz: FINDINGS: see $OUT/*.log and $OUT/artifacts/"; fi
exit $status
