#!/usr/bin/env bash
# GPT training driven from Python (ojas.train) against `ojas train` on the
# same config and data: on the CPU, then on CUDA when a cuda:0 engine opens.
# For each, REPEATS alternating runs (CLI, Python, CLI, ...) print their
# tokens/s, then the best of each and the ratio Python / CLI (the bar:
# within 2%); under NUMERICS=exact (the default) each pair's final
# checkpoints (model and optimizer safetensors) must have equal sha256.
# A failed run prints FAILED with its reason and no figure, and the script
# exits 1 (so does a sha256 mismatch). bench/python/train_tokens.py does the
# runs; python/tests/runfixture.py makes the corpus, tokenizer and shards.
#
# usage (repository root, after `cmake --build $BUILD --target ojas_cli python`):
#   [BUILD=build-gpu] [PYTHON=python3] [STEPS=100] [WARMUP=5] [REPEATS=3]
#   [THREADS=1] [NUMERICS=exact] [CPU_ARGS="--batch 8 --seq 64"]
#   [CUDA_ARGS="--batch 16 --seq 256"] bash scripts/python_vs_cli.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ -z "${BUILD:-}" ]; then
  BUILD=build
  [ -x build-gpu/bin/ojas ] && BUILD=build-gpu
fi
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-5}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-1}
NUMERICS=${NUMERICS:-exact}
for need in "$BUILD/bin/ojas" "$BUILD/python/ojas"; do
  [ -e "$need" ] || { echo "python_vs_cli: $need is missing (cmake --build $BUILD --target ojas_cli python)" >&2; exit 2; }
done
export PYTHONPATH="$PWD/$BUILD/python" OJAS_BIN="$PWD/$BUILD/bin/ojas"
data=$(mktemp -d /tmp/ojas-python-vs-cli.XXXXXX)
trap 'rm -rf "$data"' EXIT
if ! "$PYTHON" -c "import sys; sys.path.insert(0, 'python/tests'); import runfixture; runfixture.make('$data')"; then
  echo "python_vs_cli: could not make the training data in $data" >&2
  exit 2
fi
echo "python_vs_cli: $("$PYTHON" -c 'import platform; print(platform.python_version())') $PYTHON, build $BUILD, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
rc=0
common=(--data "$data" --steps "$STEPS" --warmup "$WARMUP" --repeats "$REPEATS" --threads "$THREADS" --numerics "$NUMERICS")
echo "== CPU"
# shellcheck disable=SC2086 # CPU_ARGS / CUDA_ARGS are word lists
"$PYTHON" bench/python/train_tokens.py --device cpu "${common[@]}" ${CPU_ARGS:-} || rc=1
echo "== CUDA"
if why=$("$PYTHON" -c "import ojas; ojas.Engine(device='cuda:0').close()" 2>&1); then
  # shellcheck disable=SC2086
  "$PYTHON" bench/python/train_tokens.py --device cuda:0 "${common[@]}" ${CUDA_ARGS:-} || rc=1
else
  echo "  not run: no cuda:0 engine: $(printf '%s\n' "$why" | tail -1)"
fi
exit $rc
