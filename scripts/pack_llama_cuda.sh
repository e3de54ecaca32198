#!/usr/bin/env bash
# Packs node-llama-cpp 3.21.1's prebuilt CUDA 13 llama.cpp libraries
# (@node-llama-cpp/linux-x64-cuda: libllama.cuda.v0.4.0.so, libggml.cuda.v0.4.0.so,
# libggml-base.so, libggml-cuda.so, the libggml-cpu-*.so variants; 181 MB,
# libggml-cuda.so alone 159 MB) for a machine that has no Node.js and no
# network, and takes at most 64 MiB of files a call: one tar stream, zstd -9,
# cut into N equal chunks of at most MAX_MB (55) MB, chunk k in .llcuda/partk/
# (git-ignored) beside chunks.sha256 (every chunk's hash) and libs.sha256
# (every library's). Carry one part a call; bench/quant/run_cuda_peer.sh
# --unpack DIR .llcuda/partk gathers the chunks in DIR and, once it has them
# all, joins, decompresses and checks them there. Earlier parts in .llcuda are
# replaced; the rest of .llcuda (bin/llama_peer of run_cuda_peer.sh) stays.
# part1 also holds llama-src.tar.zst (3.4 MB): the llama.cpp source of the
# same release (node-llama-cpp/llama/gitRelease.bundle, commit 80fb11ac: its
# CMake files, ggml/, src/, include/, vendor/), for run_cuda_peer.sh
# --build-cuda, which compiles libggml-cuda.so for a GPU that the package has
# no machine code for (its sm_90 code is CUDA 13.1 PTX only).
#   scripts/pack_llama_cuda.sh [BINS_DIR] [MAX_MB (55)]
#   scripts/pack_llama_cuda.sh --cuda-lib LIB [BINS_DIR] [MAX_MB (55)]
# BINS_DIR: default OJAS_NPM_DIR (third_party/npm)/node_modules/@node-llama-cpp/
# linux-x64-cuda/bins/linux-x64-cuda (bench/quant/run.sh installs the package);
# the bundle is looked up in the node-llama-cpp package beside it.
# --cuda-lib LIB: the bundle for a GPU the package has no machine code for:
# LIB (bench/quant/run_cuda_peer.sh --build-cuda's OUT_DIR/libggml-cuda.so,
# checked by scripts/fatbin_archs.py to hold sm_ARCH machine code, ARCH from
# its libggml-cuda.build.txt beside it, else 90) in place of the package's
# libggml-cuda.so, that .build.txt too, no llama-src.tar.zst; written to
# .llcuda/bundle/partK instead (the parts of .llcuda stay). Unpacked it is a
# LIB_DIR; run_cuda_peer.sh also takes the part folder itself as LIB_DIR.
# --cuda-lib none: the package's other libraries and llama-src.tar.zst, no
# libggml-cuda.so, in .llcuda/bundle-src/part1 (about 8 MB), for building it on
# the GPU's machine (run_cuda_peer.sh --unpack, --build-cuda, then copy it
# into the unpacked folder).
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."
die() { echo "pack_llama_cuda.sh: $*" >&2; exit 1; }
CUDA_LIB=""
if [ "${1:-}" = --cuda-lib ]; then
  [ $# -ge 2 ] || die "usage: --cuda-lib LIB [BINS_DIR] [MAX_MB]"
  case $2 in none | /*) CUDA_LIB=$2 ;; *) CUDA_LIB=$here/$2 ;; esac
  shift 2
  [ "$CUDA_LIB" = none ] || [ -f "$CUDA_LIB" ] || die "no $CUDA_LIB"
fi
NPM=${OJAS_NPM_DIR:-third_party/npm}
BINS=${1:-$NPM/node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda}
MAX_MB=${2:-55}
[[ $MAX_MB =~ ^[1-9][0-9]{0,5}$ ]] || die "MAX_MB must be a whole number of MB >= 1, not '$MAX_MB'"
command -v zstd >/dev/null || die "needs zstd (apt-get install zstd)"
[ -d "$BINS" ] || die "no $BINS: install node-llama-cpp@3.21.1 (cd $NPM && npm install node-llama-cpp@3.21.1), or name the folder"
meta=$(cat "$BINS/_nlcBuildMetadata.json" 2>/dev/null) || die "$BINS has no _nlcBuildMetadata.json"
case $meta in
  *'"gpu":"cuda"'*'"release":"v0.4.0"'*) ;;
  *) die "$BINS is not node-llama-cpp 3.21.1's CUDA build (llama.cpp release v0.4.0): $meta" ;;
esac
files=(libllama.cuda.v0.4.0.so libggml.cuda.v0.4.0.so libggml-base.so libggml-cuda.so _nlcBuildMetadata.json)
for f in "${files[@]}"; do [ -f "$BINS/$f" ] || die "$BINS has no $f"; done
mapfile -t cpus < <(cd "$BINS" && ls libggml-cpu-*.so 2>/dev/null)
[ ${#cpus[@]} -gt 0 ] || die "$BINS has no libggml-cpu-*.so"
files+=("${cpus[@]}")

# the files, as links in a staging folder (the package's, or with
# --cuda-lib its libggml-cuda.so replaced by LIB and its .build.txt added)
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
for f in "${files[@]}"; do ln -s "$(cd "$BINS" && pwd)/$f" "$stage/$f"; done
D=.llcuda
if [ "$CUDA_LIB" = none ]; then # the other libraries and the source, to build it there
  D=.llcuda/bundle-src
  rm "$stage/libggml-cuda.so"
  mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -vx libggml-cuda.so)
elif [ -n "$CUDA_LIB" ]; then
  D=.llcuda/bundle
  info=${CUDA_LIB%.so}.build.txt
  arch=90
  [ -f "$info" ] && arch=$(sed -n 's/^arch: sm_\([0-9a-z]*\)$/\1/p' "$info")
  python3 scripts/fatbin_archs.py "$CUDA_LIB" --need "sm_${arch:-90}" > /dev/null ||
    die "$CUDA_LIB holds no sm_${arch:-90} machine code (scripts/fatbin_archs.py $CUDA_LIB)"
  rm "$stage/libggml-cuda.so"
  ln -s "$CUDA_LIB" "$stage/libggml-cuda.so"
  if [ -f "$info" ]; then
    ln -s "$info" "$stage/libggml-cuda.build.txt"
    files+=(libggml-cuda.build.txt)
  fi
fi
# only what this script writes: .llcuda/bin (run_cuda_peer.sh's llama_peer)
# and anything unpacked there stay
rm -rf "$D"/part[0-9]* "$D"/libs.sha256 "$D"/chunks.sha256 "$D"/llcuda.tar.zst "$D"/chunk.[0-9]* \
  "$D"/llcuda.tar.zst.*of*
mkdir -p "$D"
(cd "$stage" && sha256sum "${files[@]}") > "$D"/libs.sha256
stream=$D/llcuda.tar.zst
tar -C "$stage" -h -cf - --sort=name --owner=0 --group=0 --mtime=@0 "${files[@]}" |
  zstd -9 -T2 -q -c > "$stream"
size=$(stat -c %s "$stream")
max=$((MAX_MB * 1000 * 1000))
n=$(((size + max - 1) / max))
(cd "$D" && split -n "$n" -d -a 2 llcuda.tar.zst chunk.)
rm "$stream"
for k in $(seq 1 "$n"); do
  mv "$D/chunk.$(printf %02d $((k - 1)))" "$D/llcuda.tar.zst.${k}of$n"
done
(cd "$D" && sha256sum llcuda.tar.zst.*of"$n") > "$D"/chunks.sha256
for k in $(seq 1 "$n"); do
  mkdir "$D/part$k"
  mv "$D/llcuda.tar.zst.${k}of$n" "$D/part$k/"
  cp "$D"/chunks.sha256 "$D"/libs.sha256 "$D/part$k/"
done
rm "$D"/chunks.sha256 "$D"/libs.sha256
report() {
  echo "pack_llama_cuda.sh: ${#files[@]} files ($(cd "$stage" && du -cbL "${files[@]}" | tail -1 | cut -f1) bytes) -> $size bytes of zstd in $n parts:"
  for k in $(seq 1 "$n"); do echo "  $D/part$k $(du -sb "$D/part$k" | cut -f1) bytes"; done
}
if [ -n "$CUDA_LIB" ] && [ "$CUDA_LIB" != none ]; then report; exit 0; fi
bundle=$(cd "$BINS/../../../.." && pwd)/node-llama-cpp/llama/gitRelease.bundle
[ -f "$bundle" ] || die "no $bundle (the llama.cpp source of node-llama-cpp 3.21.1)"
src=$(mktemp -d); trap 'rm -rf "$src" "$stage"' EXIT
git clone -q "$bundle" "$src/llama.cpp" 2>/dev/null || die "git cannot clone $bundle"
[ "$(git -C "$src/llama.cpp" rev-parse HEAD)" = 80fb11ac73e66d89eae2c6a91d8a77428fa733ed ] ||
  die "$bundle is not llama.cpp commit 80fb11ac (node-llama-cpp 3.21.1's)"
git -C "$src/llama.cpp" archive --prefix=llama.cpp/ HEAD CMakeLists.txt cmake ggml src include vendor LICENSE |
  zstd -19 -T2 -q -c > "$D"/part1/llama-src.tar.zst
(cd "$D"/part1 && sha256sum llama-src.tar.zst > src.sha256)
report
