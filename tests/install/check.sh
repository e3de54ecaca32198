#!/usr/bin/env bash
# Install the build into a scratch prefix, then build a consumer with
# pkg-config and with find_package(ojas), and run both.
set -euo pipefail
BUILD=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$root/$BUILD/install-test
rm -rf "$prefix" "$root/$BUILD/consumer-cmake"
cmake --install "$root/$BUILD" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc "$root/tests/install/consumer.c" $(pkg-config --cflags --libs ojas) -o "$prefix/consumer-pc"
LD_LIBRARY_PATH=$prefix/lib "$prefix/consumer-pc"
cmake -S "$root/tests/install" -B "$root/$BUILD/consumer-cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$root/$BUILD/consumer-cmake" >/dev/null
LD_LIBRARY_PATH=$prefix/lib "$root/$BUILD/consumer-cmake/consumer"
echo "install check: pkg-config and find_package(ojas) both work"
