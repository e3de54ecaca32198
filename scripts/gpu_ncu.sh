#!/usr/bin/env bash
# Device time per kernel of about one training step, from Nsight Compute
# (the OJAS_CUDA_PROFILE intervals include host time whenever the device
# waits, so they cannot tell device time; ncu can). Builds bench_gpu_train
# in build-gpu/ if needed, runs it under ncu with --clock-control none
# (the GPU's own clocks), skipping the first SKIP kernels (model creation
# and the warm-up step) and timing COUNT, then prints the kernels by total
# device time. Writes $OUT/ncu.csv (or build-gpu/ncu.csv).
#
# usage: [PRESET=gpt2-124m] [B=16] [SKIP=1600] [COUNT=1700] bash scripts/gpu_ncu.sh
#        [DECODE=1]: bench_gpu_decode's graph decoder instead (bf16 unless
#        DTYPE=f32); the window then covers a few hundred tokens' kernels.
# Measured on the H200: about 60 s for a gpt2-124m step (1,163 kernels).
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-build-gpu}
mkdir -p "$O"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu found"; exit 1; }
. scripts/gpu_env.sh
gpu_env_setup >/dev/null || { echo "$gpu_env_note"; exit 1; }
if [ ! -x build-gpu/bin/bench_gpu_train ] || [ ! -x build-gpu/bin/bench_gpu_decode ]; then
  cmake -S . -B build-gpu -DOJAS_CUDA=ON -DOJAS_BENCH=ON -DOJAS_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_extra[@]}" >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" --target bench_gpu_train bench_gpu_decode >/dev/null ||
    { echo "build failed"; exit 1; }
fi
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
  --launch-skip "${SKIP:-1600}" --launch-count "${COUNT:-1700}" \
  $(if [ "${DECODE:-0}" = 1 ]; then
      echo build-gpu/bin/bench_gpu_decode 1 cuda "${DTYPE:-bf16}" graph "${PRESET:-gpt2-124m}"
    else
      echo build-gpu/bin/bench_gpu_train "${PRESET:-gpt2-124m}" "${B:-16}" 1024 1 1 cuda bf16
    fi) > "$O/ncu.csv" 2> "$O/ncu.err" || { tail -5 "$O/ncu.err"; exit 1; }
python3 - "$O/ncu.csv" <<'PY'
import collections, csv, sys
hdr, agg = None, collections.defaultdict(lambda: [0, 0.0])
for r in csv.reader(open(sys.argv[1])):
    if "Kernel Name" in r:
        hdr = r
        continue
    if hdr is None or len(r) != len(hdr):
        continue
    d = dict(zip(hdr, r))
    if d.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v, unit = float(d["Metric Value"].replace(",", "")), d.get("Metric Unit", "")
    us = {"nsecond": v / 1e3, "ns": v / 1e3, "usecond": v, "us": v, "msecond": v * 1e3,
          "ms": v * 1e3}.get(unit, v / 1e3)
    k = d["Kernel Name"][:90]
    agg[k][0] += 1
    agg[k][1] += us
tot = sum(v[1] for v in agg.values())
print("total %.0f us of device time over %d kernels" % (tot, sum(v[0] for v in agg.values())))
print("%10s %6s %9s  %s" % ("total us", "calls", "mean us", "kernel"))
for k, v in sorted(agg.items(), key=lambda x: -x[1][1])[:40]:
    print("%10.0f %6d %9.1f  %s" % (v[1], v[0], v[1] / v[0], k))
PY
