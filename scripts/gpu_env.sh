# Sourced by the GPU scripts (gpu_check.sh, gpu_profile.sh, bench_gpu.sh):
# make jansson, pcre2, xxhash, cmocka, libmicrohttpd and dlpack.h findable
# on a lent GPU machine.
# When the system pkg-config has them, nothing changes. Otherwise the .debs
# in third_party/gpudeps (fetched by scripts/gpu_deps.sh where apt works,
# then carried) are unpacked under /tmp/ojas-gpudeps (never into /), and
# pkg-config and the loader are pointed there.
# Sets: gpu_env_note (what was done, or why it failed), cmake_extra (an
# array of extra cmake arguments). Returns 1 when the libraries cannot be
# found. Call from the repository root.
gpu_env_setup() {
  local mods=(jansson libpcre2-8 libxxhash cmocka libmicrohttpd) R L f debs root=$PWD
  cmake_extra=()
  _have() {
    command -v "${PKG_CONFIG:-pkg-config}" >/dev/null 2>&1 &&
      "${PKG_CONFIG:-pkg-config}" --exists "${mods[@]}" 2>/dev/null
  }
  if _have; then
    gpu_env_note="libraries: found by the system pkg-config"
    return 0
  fi
  debs=(third_party/gpudeps/*.deb)
  if [ ! -e "${debs[0]}" ]; then
    gpu_env_note="pkg-config cannot find ${mods[*]} and third_party/gpudeps is absent: run scripts/gpu_deps.sh where apt works and carry third_party/gpudeps"
    return 1
  fi
  R=/tmp/ojas-gpudeps
  rm -rf "$R" && mkdir -p "$R"
  for f in "${debs[@]}"; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$f" "$R"
    else # a .deb is an ar archive holding data.tar.*
      (t=$(mktemp -d) && cd "$t" && ar x "$root/$f" && tar xf data.tar.* -C "$R" && rm -rf "$t")
    fi
  done
  L=$R/usr/lib/x86_64-linux-gnu
  # libmicrohttpd.pc names gnutls as Requires.private, needed only to link
  # statically; the unpacked copy drops it so no gnutls -dev is needed.
  [ -f "$L/pkgconfig/libmicrohttpd.pc" ] && sed -i '/^Requires.private:/d' "$L/pkgconfig/libmicrohttpd.pc"
  export CPATH="$R/usr/include${CPATH:+:$CPATH}" # header-only packages (dlpack)
  export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_LIBDIR="$L/pkgconfig:$R/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$R"
  command -v "${PKG_CONFIG:-pkg-config}" >/dev/null 2>&1 || export PKG_CONFIG="$R/usr/bin/pkgconf"
  cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=${PKG_CONFIG:-$(command -v pkg-config)}")
  if _have; then
    gpu_env_note="libraries: unpacked third_party/gpudeps under $R"
    return 0
  fi
  gpu_env_note="libraries still missing after unpacking third_party/gpudeps ($("${PKG_CONFIG:-pkg-config}" --print-errors --exists "${mods[@]}" 2>&1 | head -3))"
  return 1
}
