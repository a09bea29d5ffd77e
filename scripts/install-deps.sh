#!/usr/bin/env bash
# Installs the Debian packages atoll builds and tests with. Safe to run again.
set -euo pipefail
pkgs=(cmake ninja-build pkg-config gcc clang libclang-rt-14-dev
      libuv1-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev libyaml-dev
      libopenblas-dev python3-torch python3-numpy
      protobuf-compiler python3-protobuf   # the Python wire-protocol test
      python3-prometheus-client chromium tmux   # /metrics parsed for real, the dashboard in a browser, atoll top in a terminal
      slurm-wlm munge)  # tests/slurm: real slurmctld + slurmd allocations running the sbatch template
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
