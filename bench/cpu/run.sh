#!/usr/bin/env bash
# The CPU benchmarks behind docs/bench-cpu.md: sgemm against OpenBLAS,
# elementwise/reductions against a STREAM-like triad, and softmax,
# layer_norm, gelu (tanh and erf forms), attention, a transformer block and a GPT training step
# against PyTorch (bench/cpu/torch_peer.py, started by bench_cpu_torch in
# the same run), each on 1 and 2 threads, REPEAT times.
#
# usage: bash bench/cpu/run.sh [build dir]      (default: build)
#   REPEAT=3 THREADS="1 2" PARTS="gemm mem torch" OUT=file
# This machine's login environment sets OPENBLAS_CORETYPE=Haswell (and
# OPENBLAS_L2_SIZE, which OpenBLAS 0.3.21 ignores): OpenBLAS would then run
# its AVX2 kernels at about half speed, for ojas and for PyTorch alike. Both
# variables are unset for the benchmark commands only (`env -u`), so the
# peers run at their best (OpenBLAS picks its AVX-512 Cooperlake kernels);
# tests and CI keep the environment as it is.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-"1 2"}
PARTS=${PARTS:-"gemm mem torch"}
OUT=${OUT:-/dev/stdout}
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
{
  echo "# bench/cpu/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  for r in $(seq "$REPEAT"); do
    for t in $THREADS; do
      for p in $PARTS; do
        echo "## repeat $r, threads $t, $p ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
        case $p in
          gemm) run "$BUILD/bin/bench_cpu_gemm" --threads "$t" --model ;;
          mem) run "$BUILD/bin/bench_cpu_mem" --threads "$t" ;;
          torch) run "$BUILD/bin/bench_cpu_torch" --threads "$t" ;;
          *) echo "unknown part $p" >&2; exit 2 ;;
        esac
      done
    done
  done
} > "$OUT"
