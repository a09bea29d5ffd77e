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
if [ ${#missing[@]} -gt 0 ]; then
  run=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "install-deps.sh: not root and no sudo; as root run:" >&2
      echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
      exit 1
    fi
    run=(sudo)
  fi
  "${run[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
for tool in cmake ninja make gcc g++ clang clang++ protoc-c protoc python3; do
  command -v "$tool" >/dev/null || { echo "install-deps.sh: $tool is still missing" >&2; exit 1; }
done
