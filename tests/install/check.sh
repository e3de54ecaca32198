#!/usr/bin/env bash
# Install the build into a scratch prefix, then build a consumer with
# pkg-config and with find_package(ojas), and run both. Every consumer is a
# CPU program: none may have a CUDA library in ldd (the CUDA backend is the
# module libojas-cuda.so, loaded at run time). When the build has the
# module, also check that it is installed with its pkg-config file and
# CMake target, and that the installed libojas (shared, and static with
# OJAS_CUDA_MODULE) finds and accepts it: a CUDA engine then fails only at
# the device (no GPU) or opens, never for want of the module.
set -euo pipefail
BUILD=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$root/$BUILD/install-test
rm -rf "$prefix" "$root/$BUILD"/consumer-*
cmake --install "$root/$BUILD" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
no_cuda_in_ldd() { # program
  local bad
  bad=$(ldd "$1" | grep -Ei 'libcuda|libcublas|libnvidia' || true)
  if [ -n "$bad" ]; then
    echo "install check: $1 (a CPU program) needs CUDA libraries:"; echo "$bad"; exit 1
  fi
}
cc "$root/tests/install/consumer.c" $(pkg-config --cflags --libs ojas) -o "$prefix/consumer-pc"
LD_LIBRARY_PATH=$prefix/lib "$prefix/consumer-pc"
LD_LIBRARY_PATH=$prefix/lib no_cuda_in_ldd "$prefix/consumer-pc"
no_cuda_in_ldd "$prefix/lib/libojas.so"
# exactly as the README says: the ojas-static module
cc "$root/tests/install/consumer.c" $(pkg-config --cflags --libs ojas-static) -o "$prefix/consumer-static"
if ldd "$prefix/consumer-static" | grep -q libojas; then
  echo "install check: consumer-static links libojas dynamically"; exit 1
fi
"$prefix/consumer-static"
no_cuda_in_ldd "$prefix/consumer-static"
for target in ojas ojas_static; do
  cmake -S "$root/tests/install" -B "$root/$BUILD/consumer-$target" -DCMAKE_PREFIX_PATH="$prefix" \
    -DOJAS_TARGET=ojas::$target >/dev/null
  cmake --build "$root/$BUILD/consumer-$target" >/dev/null
  LD_LIBRARY_PATH=$prefix/lib "$root/$BUILD/consumer-$target/consumer"
  LD_LIBRARY_PATH=$prefix/lib no_cuda_in_ldd "$root/$BUILD/consumer-$target/consumer"
done
what="pkg-config (shared and static) and find_package(ojas) (ojas::ojas, ojas::ojas_static) work, with no CUDA library in ldd"
if [ -e "$root/$BUILD/libojas-cuda.so" ]; then
  module=$(pkg-config --variable=module ojas-cuda)
  [ "$module" -ef "$prefix/lib/libojas-cuda.so" ] ||
    { echo "install check: ojas-cuda.pc names $module, not the installed module"; exit 1; }
  grep -q 'ojas::ojas_cuda' "$prefix"/lib/cmake/ojas/ojasTargets*.cmake ||
    { echo "install check: no ojas::ojas_cuda in the CMake package"; exit 1; }
  device_only() { # label, output of "consumer cuda"
    case "$2" in
      "cuda: OJ_OK"|"cuda: OJ_ERR_DEVICE: engine_create: cannot open cuda:0"*) ;;
      *) echo "install check: $1 did not load the installed module: $2"; exit 1 ;;
    esac
  }
  # the shared library looks beside itself; the static one is told where
  device_only consumer-pc "$(LD_LIBRARY_PATH=$prefix/lib "$prefix/consumer-pc" cuda)"
  device_only consumer-static "$(OJAS_CUDA_MODULE=$module "$prefix/consumer-static" cuda)"
  what="$what; libojas-cuda.so installed (ojas-cuda.pc, ojas::ojas_cuda) and loaded by both"
fi
echo "install check: $what"
