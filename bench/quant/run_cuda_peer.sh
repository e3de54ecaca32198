#!/usr/bin/env bash
# llama.cpp beside ojas on a machine without Node.js (the H200): builds
# bench/quant/llama_peer.c with gcc and runs it on node-llama-cpp 3.21.1's
# prebuilt libraries in LIB_DIR (the CUDA package's, unpacked below, or the
# CPU package's bins/linux-x64), all layers on the GPU when LIB_DIR has
# libggml-cuda.so.
#   bench/quant/run_cuda_peer.sh LIB_DIR FILE.gguf [NEW (64)] [THREADS (2)]
#     LIB_DIR may also be a part folder of scripts/pack_llama_cuda.sh (e.g.
#     .llcuda/bundle/part1 of --cuda-lib, the sm_90 bundle: one part): it
#     is unpacked (--unpack) into LLCUDA_LIB_DIR, default lib/ beside the
#     part, unless that already holds its libraries, each matching its
#     sha256; that folder is then the LIB_DIR.
#     one JSON line, llama_peer.mjs's (peer, file, threads, tok_s, tokens)
#     plus device, gpu_layers, repeats; the prompt is bench_quant_decode's
#     16 ids unless PROMPT="id,id,...".
#   bench/quant/run_cuda_peer.sh LIB_DIR OJAS.jsonl [NEW] [THREADS]
#     for each line of bench_quant_decode's output saved in OJAS.jsonl, the
#     file <variant>.gguf beside it (written by bench_quant_decode --out) with
#     that line's prompt and new_tokens (unless NEW is given), and one line
#     as bench/quant/run.sh prints:
#     ojas_tok_s, llama_cpp_tok_s, their ratio, tokens_equal, first_diff.
#     Lines without prompt and tokens (bf16's reference line) are left out
#     with a note; a variant on which llama_peer fails is reported and the
#     others still run (exit 1 at the end).
#   bench/quant/run_cuda_peer.sh --unpack DIR PART...
#     checks and keeps in DIR the chunks of the parts that
#     scripts/pack_llama_cuda.sh made (one part a call is enough; a part of
#     another packing is refused before anything is copied; each chunk is
#     copied under a temporary name, then renamed); once DIR has them all,
#     checks every chunk's sha256 again (a bad one is named and deleted, to
#     be brought again), joins and decompresses them into a temporary folder
#     in DIR and moves the libraries into DIR only once every one matches
#     libs.sha256: DIR is then the LIB_DIR.
#   bench/quant/run_cuda_peer.sh --build-cuda SRC OUT_DIR [ARCH (90)]
#     OUT_DIR/libggml-cuda.so compiled here for sm_ARCH from SRC
#     (llama-src.tar.zst of part1, which --unpack keeps in DIR/src: the
#     same release's source) with the package's options (dynamic backends,
#     CUDA graphs and flash attention on, NCCL off, Release) and this
#     machine's nvcc, for a GPU whose driver cannot compile the package's
#     CUDA 13.1 PTX (llama_peer warns), and OUT_DIR/libggml-cuda.build.txt
#     (arch, source hash, nvcc, the CMake options, the library's hash).
#     Copy it over the package's in a copy of LIB_DIR, or pack it with the
#     package's other libraries (scripts/pack_llama_cuda.sh --cuda-lib).
#     The build stays in OUT_DIR/build until it succeeds, so a call that
#     ran out of time resumes it.
# Environment: BUILD_JOBS (--build-cuda's parallel jobs; default nproc),
# GPU_LAYERS (-1: all, the default with libggml-cuda.so; else 0),
# REPEATS (5; tok_s is the median), WARMUP (1: one untimed run of 8 tokens
# first on the GPU, which also fills the CUDA JIT cache: the package's
# libggml-cuda.so holds sm_90 code only as compute_90 PTX),
# LLAMA_PEER_BIN (.llcuda/bin/llama_peer), CC (gcc).
# Relative paths (arguments and LLAMA_PEER_BIN) are taken against the
# caller's folder; the default LLAMA_PEER_BIN is in the repository root.
# The libraries' own folder is found through their RUNPATH ($ORIGIN), where
# --unpack and every run link a DT_NEEDED versioned name that the folder
# lacks to its unversioned file (libggml-base.so.0 -> libggml-base.so:
# --build-cuda's libggml-cuda.so needs the release's SONAME, the package
# ships the file without the version); the
# CUDA runtime (libcudart.so.13, libcublas.so.13, libcublasLt.so.13) and
# the driver (libcuda.so.1) are looked up through ldconfig, then in
# /usr/local/cuda*/lib64, /usr/local/nvidia/lib64 and Python's
# nvidia/*/lib wheels, and put on LD_LIBRARY_PATH.
set -euo pipefail
here=$PWD
abs() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; } # against the caller's folder
cd "$(dirname "$0")/../.."
die() { echo "run_cuda_peer.sh: $*" >&2; exit 1; }

# zstd -d from stdin to stdout; Python over libzstd.so.1 where the zstd
# program is missing.
unzstd() {
  if command -v zstd >/dev/null; then zstd -d -q -c; return; fi
  python3 -c '
import ctypes, ctypes.util, sys
name = ctypes.util.find_library("zstd") or "libzstd.so.1"
z = ctypes.CDLL(name)
class Buf(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]
z.ZSTD_createDStream.restype = ctypes.c_void_p
z.ZSTD_decompressStream.restype = ctypes.c_size_t
z.ZSTD_decompressStream.argtypes = [ctypes.c_void_p, ctypes.POINTER(Buf), ctypes.POINTER(Buf)]
z.ZSTD_isError.argtypes = [ctypes.c_size_t]
z.ZSTD_getErrorName.restype = ctypes.c_char_p
z.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
z.ZSTD_freeDStream.argtypes = [ctypes.c_void_p]
ds = z.ZSTD_createDStream()
out = ctypes.create_string_buffer(1 << 20)
last = 0
while True:
    data = sys.stdin.buffer.read(1 << 20)
    if not data:
        break
    src = ctypes.create_string_buffer(data, len(data))
    ib = Buf(ctypes.cast(src, ctypes.c_void_p), len(data), 0)
    while ib.pos < ib.size:
        ob = Buf(ctypes.cast(out, ctypes.c_void_p), len(out), 0)
        last = z.ZSTD_decompressStream(ds, ctypes.byref(ob), ctypes.byref(ib))
        if z.ZSTD_isError(last):
            sys.exit("run_cuda_peer.sh: zstd: " + z.ZSTD_getErrorName(last).decode())
        sys.stdout.buffer.write(out.raw[:ob.pos])
z.ZSTD_freeDStream(ds)
if last != 0:
    sys.exit("run_cuda_peer.sh: zstd: the stream ends inside a frame")
'
}

# DIR: for each library's DT_NEEDED name NAME.so.N that DIR lacks while it
# has NAME.so, the link NAME.so.N -> NAME.so. --build-cuda's libggml-cuda.so
# needs libggml-base.so.0 (the release's own SONAME); the package, built
# from the same source, ships it as libggml-base.so.
soname_links() {
  python3 - "$1" <<'PY'
import os, re, struct, sys
d = sys.argv[1]
def needed(path):
    """DT_NEEDED names of an ELF64 little-endian file ([] for anything else)."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:6] != b"\x7fELF\x02\x01":
        return []
    phoff, = struct.unpack_from("<Q", b, 32)
    phentsize, phnum = struct.unpack_from("<HH", b, 54)
    ph = [struct.unpack_from("<IIQQQQQQ", b, phoff + i * phentsize) for i in range(phnum)]
    def off(va):  # a virtual address's file offset, through the PT_LOAD segments
        for t, _, o, v, _, fsz, _, _ in ph:
            if t == 1 and v <= va < v + fsz:
                return va - v + o
        raise ValueError("address %#x outside the loaded segments" % va)
    dyn = [p for p in ph if p[0] == 2]
    if not dyn:
        return []
    ents, o = [], dyn[0][2]
    while True:
        tag, val = struct.unpack_from("<qQ", b, o)
        o += 16
        if tag == 0:
            break
        ents.append((tag, val))
    strtab = off(next(v for t, v in ents if t == 5))
    return [b[strtab + v:b.index(b"\0", strtab + v)].decode() for t, v in ents if t == 1]
for f in sorted(os.listdir(d)):
    p = os.path.join(d, f)
    if not f.endswith(".so") or os.path.islink(p) or not os.path.isfile(p):
        continue
    for n in needed(p):
        base = re.sub(r"(\.so)(\.[0-9]+)+$", r"\1", n)
        if base != n and not os.path.lexists(os.path.join(d, n)) and os.path.isfile(os.path.join(d, base)):
            os.symlink(base, os.path.join(d, n))
            print("run_cuda_peer.sh: %s needs %s: linked to %s in %s" % (f, n, base, d), file=sys.stderr)
PY
}

if [ "${1:-}" = --unpack ]; then
  [ $# -ge 3 ] || die "usage: --unpack DIR PART..."
  dir=$(abs "$2"); shift 2
  ck=$dir/.chunks
  mkdir -p "$ck"
  keep() { # SRC NAME: copies SRC to $ck/NAME through a temporary name
    cp "$1" "$ck/.$2.tmp" && mv "$ck/.$2.tmp" "$ck/$2"
  }
  for part in "$@"; do
    part=$(abs "$part")
    [ -f "$part/chunks.sha256" ] || die "$part has no chunks.sha256 (not a part of scripts/pack_llama_cuda.sh)"
    [ -f "$part/libs.sha256" ] || die "$part has no libs.sha256 (not a part of scripts/pack_llama_cuda.sh)"
    if [ -f "$ck/chunks.sha256" ]; then
      cmp -s "$part/chunks.sha256" "$ck/chunks.sha256" ||
        die "$part is from another packing than the chunks already in $ck (remove $ck to start over)"
    else
      keep "$part/libs.sha256" libs.sha256
      keep "$part/chunks.sha256" chunks.sha256
    fi
    for c in "$part"/llcuda.tar.zst.*of*; do
      [ -f "$c" ] || die "$part has no chunk"
      name=$(basename "$c")
      want=$(grep " $name\$" "$part/chunks.sha256" | cut -d' ' -f1)
      [ -n "$want" ] || die "$c is not listed in $part/chunks.sha256"
      [ "$(sha256sum "$c" | cut -d' ' -f1)" = "$want" ] || die "$c does not match its sha256 in chunks.sha256"
      keep "$c" "$name"
      echo "run_cuda_peer.sh: kept $name in $ck"
    done
    if [ -f "$part/llama-src.tar.zst" ]; then
      [ -f "$part/src.sha256" ] || die "$part has llama-src.tar.zst but no src.sha256"
      mkdir -p "$dir/src"
      for f in llama-src.tar.zst src.sha256; do cp "$part/$f" "$dir/src/.$f.tmp" && mv "$dir/src/.$f.tmp" "$dir/src/$f"; done
      echo "run_cuda_peer.sh: kept the llama.cpp source in $dir/src (for --build-cuda)"
    fi
  done
  n=$(wc -l < "$ck/chunks.sha256")
  missing=""
  have=0
  for k in $(seq 1 "$n"); do
    if [ -f "$ck/llcuda.tar.zst.${k}of$n" ]; then have=$((have + 1)); else missing="$missing part$k"; fi
  done
  if [ -n "$missing" ]; then
    echo "run_cuda_peer.sh: $ck has $have of $n chunks; still to come:$missing"
    exit 0
  fi
  # every chunk again (one kept by an earlier call may have been cut short)
  bad=""
  for k in $(seq 1 "$n"); do
    name=llcuda.tar.zst.${k}of$n
    want=$(grep " $name\$" "$ck/chunks.sha256" | cut -d' ' -f1)
    if [ "$(sha256sum "$ck/$name" | cut -d' ' -f1)" != "$want" ]; then rm -f "$ck/$name"; bad="$bad $name (part$k)"; fi
  done
  [ -z "$bad" ] || die "$ck:$bad did not match chunks.sha256 and was deleted: --unpack its part again"
  tmp=$(mktemp -d "$dir/.unpack.XXXXXX")
  if ! for k in $(seq 1 "$n"); do cat "$ck/llcuda.tar.zst.${k}of$n"; done | unzstd | tar -C "$tmp" -xf -; then
    rm -rf "$tmp"; die "the chunks in $ck match chunks.sha256 but do not decompress and unpack (messages above)"
  fi
  if ! (cd "$tmp" && sha256sum --quiet -c "$ck/libs.sha256"); then
    rm -rf "$tmp"; die "the libraries unpacked from $ck do not match libs.sha256; nothing was put in $dir"
  fi
  while read -r _ f; do mv -f "$tmp/$f" "$dir/$f"; done < "$ck/libs.sha256"
  rm -rf "$tmp"
  soname_links "$dir" || die "could not read the libraries' DT_NEEDED in $dir"
  echo "run_cuda_peer.sh: unpacked $(wc -l < "$ck/libs.sha256") files into $dir, each matching its sha256"
  rm -rf "$ck"
  exit 0
fi

if [ "${1:-}" = --build-cuda ]; then
  [ $# -ge 3 ] || die "usage: --build-cuda SRC OUT_DIR [ARCH]"
  src=$(abs "$2"); out=$(abs "$3"); arch=${4:-90}
  if [ -f "$(dirname "$src")/src.sha256" ]; then
    (cd "$(dirname "$src")" && sha256sum --quiet -c src.sha256) || die "$src does not match src.sha256"
  fi
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || die "no nvcc"
  work=$out/build
  mkdir -p "$work"
  [ -d "$work/llama.cpp" ] || unzstd < "$src" | tar -C "$work" -xf -
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  # configured unless a call stopped inside cmake's configure (no build files yet)
  [ -f "$work/build/CMakeCache.txt" ] && { [ -f "$work/build/build.ninja" ] || [ -f "$work/build/Makefile" ]; } ||
    cmake -S "$work/llama.cpp" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch-real" -DGGML_CUDA=ON \
      -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF \
      -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH='$ORIGIN' -DLLAMA_BUILD_COMMON=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_MTMD=OFF > "$work/configure.log" 2>&1 ||
    { tail -20 "$work/configure.log" >&2; rm -rf "$work/build"; die "cmake could not configure $src (log above)"; }
  t0=$SECONDS
  jobs=${BUILD_JOBS:-$(nproc)}
  [[ $jobs =~ ^[1-9][0-9]{0,3}$ ]] || die "BUILD_JOBS must be a whole number >= 1, not '$jobs'"
  cmake --build "$work/build" --target ggml-cuda -j "$jobs" > "$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; die "libggml-cuda.so did not build (log above; run again to resume)"; }
  built=$(find "$work/build" -name libggml-cuda.so -type f | head -1)
  [ -n "$built" ] || die "the build made no libggml-cuda.so"
  cp "$built" "$out/libggml-cuda.so"
  # what was built, from what, how (scripts/pack_llama_cuda.sh --cuda-lib packs it)
  { echo "arch: sm_$arch"
    echo "source: llama.cpp 80fb11ac (node-llama-cpp 3.21.1), $(basename "$src") sha256 $(sha256sum "$src" | cut -d' ' -f1)"
    echo "nvcc: $("$nvcc" --version | tail -1)"
    echo "options: $(sed -n 's/^\(GGML_[A-Z_]*\|CMAKE_BUILD_TYPE\|CMAKE_CUDA_ARCHITECTURES\|BUILD_SHARED_LIBS\):[A-Z]*=\(.*\)$/\1=\2/p' "$work/build/CMakeCache.txt" | sort | tr '\n' ' ')"
    echo "sha256: $(sha256sum "$out/libggml-cuda.so" | cut -d' ' -f1)"; } > "$out/libggml-cuda.build.txt"
  rm -rf "$work"
  echo "run_cuda_peer.sh: $out/libggml-cuda.so: sm_$arch, $("$nvcc" --version | tail -1), built in $((SECONDS - t0)) s"
  exit 0
fi

[ $# -ge 2 ] || die "usage: LIB_DIR FILE.gguf|OJAS.jsonl [NEW] [THREADS], --unpack DIR PART..., or --build-cuda SRC OUT_DIR [ARCH]"
LIB_DIR=$(cd "$(abs "$1")" && pwd); TARGET=$(abs "$2"); NEW_ARG=${3:-}; NEW=${3:-64}; THREADS=${4:-2}
if [ -f "$LIB_DIR/chunks.sha256" ]; then
  # a part of scripts/pack_llama_cuda.sh (one part: the whole bundle):
  # unpacked into LLCUDA_LIB_DIR (default: lib beside the part) unless
  # that already holds its libraries, each matching libs.sha256
  part=$LIB_DIR
  dest=${LLCUDA_LIB_DIR:+$(abs "$LLCUDA_LIB_DIR")}; dest=${dest:-$(dirname "$part")/lib}
  if ! (cd "$dest" 2>/dev/null && sha256sum --quiet -c "$part/libs.sha256" > /dev/null 2>&1); then
    bash bench/quant/run_cuda_peer.sh --unpack "$dest" "$part" >&2
    (cd "$dest" && sha256sum --quiet -c "$part/libs.sha256" > /dev/null 2>&1) ||
      die "$dest does not hold the bundle yet: --unpack $dest with the other parts of $(dirname "$part") first"
  fi
  LIB_DIR=$(cd "$dest" && pwd)
  echo "run_cuda_peer.sh: the libraries of $part, in $LIB_DIR" >&2
fi
soname_links "$LIB_DIR" || die "could not read the libraries' DT_NEEDED in $LIB_DIR"
libs=("$LIB_DIR"/libllama.v*.so "$LIB_DIR"/libllama.cuda.v*.so)
lib=""; for l in "${libs[@]}"; do [ -f "$l" ] && lib=$l; done
[ -n "$lib" ] || die "$LIB_DIR has no libllama.v*.so or libllama.cuda.v*.so"
if [ -f "$LIB_DIR/libggml-cuda.so" ]; then GPU_LAYERS=${GPU_LAYERS:--1}; else GPU_LAYERS=${GPU_LAYERS:-0}; fi
REPEATS=${REPEATS:-5}; WARMUP=${WARMUP:-1}
BIN=${LLAMA_PEER_BIN:+$(abs "$LLAMA_PEER_BIN")}; BIN=${BIN:-.llcuda/bin/llama_peer}
if [ ! -x "$BIN" ] || [ bench/quant/llama_peer.c -nt "$BIN" ]; then
  mkdir -p "$(dirname "$BIN")"
  ${CC:-gcc} -std=c11 -O2 -Wall -Wextra -o "$BIN" bench/quant/llama_peer.c -ldl
fi

if [ "$GPU_LAYERS" != 0 ]; then
  lookup() { # NAME: a folder holding it, unless ldconfig knows it
    ldconfig -p 2>/dev/null | grep -q "^\s*$1 " && return 0
    local py d
    py=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
             /usr/local/cuda-13*/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
             ${py:+$py/nvidia/*/lib} ${py:+$py/nvidia/*/*/lib}; do
      [ -e "$d/$1" ] && { echo "$d"; return 0; }
    done
    echo "run_cuda_peer.sh: $1 not found (ldconfig, /usr/local/cuda*, /usr/local/nvidia, Python's nvidia wheels)" >&2
  }
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcuda.so.1; do
    d=$(lookup "$so")
    case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) [ -n "$d" ] && LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
  done
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
  echo "run_cuda_peer.sh: LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
  if [ -f "$LIB_DIR/libggml-cuda.so" ]; then # named here rather than as llama_peer's first dlerror
    miss=$(ldd "$LIB_DIR/libggml-cuda.so" 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) => not found$/\1/p' | tr '\n' ' ')
    [ -z "$miss" ] || echo "run_cuda_peer.sh: warning: $LIB_DIR/libggml-cuda.so: not found: $miss" >&2
  fi
  command -v nvidia-smi >/dev/null &&
    echo "run_cuda_peer.sh: GPU, driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" >&2
fi

DEFAULT_PROMPT=$(python3 -c 'print(",".join(str((i * 7919 + 13) % 50257) for i in range(16)))')
peer() { # FILE PROMPT: llama_peer's JSON line, after a warm-up on the GPU
  if [ "$GPU_LAYERS" != 0 ] && [ "$WARMUP" = 1 ]; then
    local t0=$SECONDS
    "$BIN" --lib "$lib" --gpu-layers "$GPU_LAYERS" "$1" "$2" 8 "$THREADS" < /dev/null > /dev/null
    echo "run_cuda_peer.sh: warm-up on $(basename "$1"): $((SECONDS - t0)) s" >&2
  fi
  "$BIN" --lib "$lib" --gpu-layers "$GPU_LAYERS" --repeats "$REPEATS" "$1" "$2" "$NEW" "$THREADS" < /dev/null
}

case $TARGET in
  *.gguf) peer "$TARGET" "${PROMPT:-$DEFAULT_PROMPT}" ;;
  *.jsonl)
    [ -f "$TARGET" ] || die "no $TARGET"
    dir=$(dirname "$TARGET")
    failed=0
    while read -r line; do
      [ -n "$line" ] || continue
      # variant, prompt ids and new_tokens, or a note why the line is left
      # out (bf16's reference line of bench_quant_decode --cuda has no
      # prompt and no tokens).
      fields=$(python3 -c '
import json, sys
try:
    o = json.loads(sys.argv[1])
except ValueError:
    sys.exit("not JSON")
miss = [k for k in ("variant", "prompt", "tokens", "new_tokens", "tok_s") if k not in o]
if miss:
    sys.exit("%s has no %s" % (o.get("variant", "the line"), ", ".join(miss)))
print(o["variant"], ",".join(map(str, o["prompt"])), o["new_tokens"])
' "$line" 2>&1) || { echo "run_cuda_peer.sh: line left out: $fields" >&2; continue; }
      read -r v p n <<< "$fields"
      NEW=${NEW_ARG:-$n}
      if [ ! -f "$dir/$v.gguf" ]; then echo "run_cuda_peer.sh: no $dir/$v.gguf, $v left out" >&2; continue; fi
      if ! out=$(peer "$dir/$v.gguf" "$p"); then
        echo "run_cuda_peer.sh: llama_peer failed on $dir/$v.gguf (above), $v left out" >&2
        failed=$((failed + 1)); continue
      fi
      python3 - "$line" "$out" <<'PY'
import json, sys
o, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
same = sum(1 for a, b in zip(o["tokens"], p["tokens"]) if a == b)
first = next((i for i, (a, b) in enumerate(zip(o["tokens"], p["tokens"])) if a != b), -1)
print(json.dumps({"variant": o["variant"], "ojas_device": o.get("device"), "llama_cpp_device": p["device"],
                  "ojas_tok_s": o["tok_s"], "llama_cpp_tok_s": round(p["tok_s"], 2),
                  "ojas_vs_llama_cpp": round(o["tok_s"] / p["tok_s"], 3),
                  "tokens_equal": same, "of": min(len(o["tokens"]), len(p["tokens"])), "first_diff": first}))
PY
    done < "$TARGET"
    [ "$failed" = 0 ] || die "llama_peer failed on $failed variant(s)"
    ;;
  *) die "$TARGET is neither a .gguf file nor a .jsonl of bench_quant_decode's lines" ;;
esac
