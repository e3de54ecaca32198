#!/usr/bin/env bash
# Fetch the Debian packages a GPU machine needs to build ojas when its image
# lacks them (the lent H200 machines reach no registry): pkg-config (pkgconf),
# jansson, pcre2, xxhash, cmocka and libmicrohttpd (`ojas serve`), headers
# and shared libraries, and dlpack's header (the Python package). Run this
# where apt works; it writes third_party/gpudeps/*.deb (git-ignored). Then
# carry that folder to the GPU machine (device tool: carry
# ["third_party/gpudeps"]); scripts/gpu_check.sh unpacks it under /tmp when
# the machine's own pkg-config cannot find a library. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=third_party/gpudeps
mkdir -p "$dir"
pkgs=(pkgconf pkgconf-bin libpkgconf3 libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0
      libxxhash-dev libxxhash0 libcmocka-dev libcmocka0 libmicrohttpd-dev libmicrohttpd12
      libdlpack-dev)
need=()
for p in "${pkgs[@]}"; do
  ls "$dir/${p}"_*.deb >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  # apt's sandbox user may not write here: download in a temporary folder.
  tmp=$(mktemp -d)
  chmod 777 "$tmp"
  (cd "$tmp" && apt-get download "${need[@]}")
  mv "$tmp"/*.deb "$dir"/
  rm -rf "$tmp"
fi
ls -1 "$dir"
echo "gpu_deps: ok ($(du -sh "$dir" | cut -f1) in $dir)"
