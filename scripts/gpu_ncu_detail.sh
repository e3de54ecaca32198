#!/usr/bin/env bash
# Why one kernel is slow: Nsight Compute's speed-of-light, memory, occupancy
# and warp-stall sections for a few launches of the kernels matching a
# regular expression, in a command (default: a gpt2-124m training step).
#
# usage: bash scripts/gpu_ncu_detail.sh REGEX [SKIP] [COUNT] [-- command ...]
#   e.g. bash scripts/gpu_ncu_detail.sh 'k_ew.*bin_fn<2>' 20 2 -- \
#          build-gpu/bin/bench_gpu_train nanolab-124m 16 1024 1 1 cuda bf16
# Prints the report as text (ncu --print-details body); run after
# scripts/gpu_check.sh or gpu_all.sh has built build-gpu/.
set -uo pipefail
cd "$(dirname "$0")/.."
re=$1; skip=${2:-0}; count=${3:-1}
shift $(( $# >= 3 ? 3 : $# ))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || set -- build-gpu/bin/bench_gpu_train gpt2-124m 16 1024 1 1 cuda bf16
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu found"; exit 1; }
. scripts/gpu_env.sh
gpu_env_setup >/dev/null || { echo "$gpu_env_note"; exit 1; }
"$NCU" --clock-control none --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip "$skip" --launch-count "$count" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
  --section Occupancy --section WarpStateStats "$@" 2>&1 |
  grep -vE "^==PROF==|^\s*$" | grep -E "k_|Duration|Throughput|DRAM|Registers|Block Size|Grid Size|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles|Local|Spill|Waves|Memory \[%\]|Compute \(SM\)|Shared Memory Configuration Size|Dynamic Shared" | head -${DETAIL_LINES:-80}
