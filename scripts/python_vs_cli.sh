#!/usr/bin/env bash
# GPT training driven from Python (ojas.train) against `ojas train` on the
# same config and data: on the CPU, then on CUDA when a cuda:0 engine opens.
# For each, REPEATS pairs of runs (the CLI first, then Python first, ...)
# print their tokens/s, then the best of each and the ratio Python / CLI
# (the bar: within 2%). The checkpoints' sha256 (model and optimizer
# safetensors) of a Python run and a CLI run under numerics "exact" must be
# equal: the timed pairs' own when NUMERICS=exact, else one more exact pair
# of SHA_STEPS steps (same model, batch and device; f32, no CUDA graph).
# A failed run prints FAILED with its reason and no figure, and the script
# exits 1 (so does a sha256 mismatch). bench/python/train_tokens.py does the
# runs, on python/tests/runfixture.py's corpus repeated 40 times.
#
# The default workloads take >= ~50 ms a step on a 16-core host and an H200
# (the step, not Python's loop or the process, is what a ratio should
# compare): CPU nanolab-small B8 T128 with 8 threads; CUDA gpt2-124m B16
# T1024 bf16 with a CUDA graph (docs/go.md's workload); FAST numerics. In
# all about 2 minutes on the H200 machine; STEPS, REPEATS (and lighter
# CPU_ARGS / CUDA_ARGS) shorten it.
#
# usage (repository root, after `cmake --build $BUILD --target ojas_cli python`):
#   [BUILD=build-gpu] [PYTHON=python3] [STEPS=30] [WARMUP=5] [REPEATS=3]
#   [THREADS=8] [NUMERICS=fast] [SHA_STEPS=4]
#   [CPU_ARGS="--model nanolab-small --batch 8 --seq 128"]
#   [CUDA_ARGS="--model gpt2-124m --batch 16 --seq 1024 --set dtype=bf16 --set cuda_graph=true"]
#   bash scripts/python_vs_cli.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ -z "${BUILD:-}" ]; then
  BUILD=build
  [ -x build-gpu/bin/ojas ] && BUILD=build-gpu
fi
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-8}
NUMERICS=${NUMERICS:-fast}
SHA_STEPS=${SHA_STEPS:-4}
CPU_ARGS=${CPU_ARGS:---model nanolab-small --batch 8 --seq 128}
CUDA_ARGS=${CUDA_ARGS:---model gpt2-124m --batch 16 --seq 1024 --set dtype=bf16 --set cuda_graph=true}
for need in "$BUILD/bin/ojas" "$BUILD/python/ojas"; do
  [ -e "$need" ] || { echo "python_vs_cli: $need is missing (cmake --build $BUILD --target ojas_cli python)" >&2; exit 2; }
done
export PYTHONPATH="$PWD/$BUILD/python" OJAS_BIN="$PWD/$BUILD/bin/ojas"
data=$(mktemp -d /tmp/ojas-python-vs-cli.XXXXXX)
trap 'rm -rf "$data"' EXIT
echo "python_vs_cli: $("$PYTHON" -c 'import platform; print(platform.python_version())') $PYTHON, build $BUILD, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
rc=0
common=(--data "$data" --corpus-repeat 40 --steps "$STEPS" --warmup "$WARMUP" --repeats "$REPEATS"
        --threads "$THREADS" --numerics "$NUMERICS" --sha-steps "$SHA_STEPS")
echo "== CPU"
# shellcheck disable=SC2086 # CPU_ARGS / CUDA_ARGS are word lists
"$PYTHON" bench/python/train_tokens.py --device cpu "${common[@]}" $CPU_ARGS || rc=1
echo "== CUDA"
if why=$("$PYTHON" -c "import ojas; ojas.Engine(device='cuda:0').close()" 2>&1); then
  # shellcheck disable=SC2086
  "$PYTHON" bench/python/train_tokens.py --device cuda:0 "${common[@]}" $CUDA_ARGS || rc=1
else
  echo "  not run: no cuda:0 engine: $(printf '%s\n' "$why" | tail -1)"
fi
exit $rc
