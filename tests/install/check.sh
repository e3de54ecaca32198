#!/usr/bin/env bash
# Install the build into a scratch prefix, then build a consumer with
# pkg-config and with find_package(ojas), and run both.
set -euo pipefail
BUILD=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$root/$BUILD/install-test
rm -rf "$prefix" "$root/$BUILD"/consumer-*
cmake --install "$root/$BUILD" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc "$root/tests/install/consumer.c" $(pkg-config --cflags --libs ojas) -o "$prefix/consumer-pc"
LD_LIBRARY_PATH=$prefix/lib "$prefix/consumer-pc"
# exactly as the README says: the ojas-static module
cc "$root/tests/install/consumer.c" $(pkg-config --cflags --libs ojas-static) -o "$prefix/consumer-static"
if ldd "$prefix/consumer-static" | grep -q libojas; then
  echo "install check: consumer-static links libojas dynamically"; exit 1
fi
"$prefix/consumer-static"
for target in ojas ojas_static; do
  cmake -S "$root/tests/install" -B "$root/$BUILD/consumer-$target" -DCMAKE_PREFIX_PATH="$prefix" \
    -DOJAS_TARGET=ojas::$target >/dev/null
  cmake --build "$root/$BUILD/consumer-$target" >/dev/null
  LD_LIBRARY_PATH=$prefix/lib "$root/$BUILD/consumer-$target/consumer"
done
echo "install check: pkg-config (shared and static) and find_package(ojas) (ojas::ojas, ojas::ojas_static) work"
