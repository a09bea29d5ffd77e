#!/usr/bin/env bash
# Prepares .gpukit/ (ignored by git): everything a bare GPU machine with the CUDA
# 13 toolkit, PyTorch and Python but none of atoll's Debian libraries needs to
# run bench/gpu/run.sh there.
#
#   bench/gpu/kit.sh            build atoll for sm_90 (Release) and pack its libraries
#
# What goes in:
#   .gpukit/bin/      atoll-train, atoll (data prepare), cuda_kernels_fp32, cuda_kernels_bf16, gpu_bench, cudnn_plan_check
#                     and the CUDA backend they open, libatoll-cuda.so (sm_90),
#                     ktrace.so (bench/gpu/ktrace.c: per-kernel GPU time of any program)
#   .gpukit/libs.tar.xz   the system libraries those programs load (libuv, libyaml, libsodium,
#                     protobuf-c, OpenBLAS, gfortran, ...: found with ldd, their Debian packages
#                     with dpkg -S), extracted with apt-get download + dpkg -x, unpacked by run.sh
#   .gpukit/peers/    whatever PEERS_DIR holds (default /tmp/peers/out): peer
#                     programs built from their own sources outside this repository,
#                     e.g. llm.c's train_gpt2cu (bench/gpu/peers.sh builds it from fetched
#                     llm.c and cudnn-frontend sources); run.sh measures those it finds.
#                     Without PEERS_DIR the peers an earlier kit holds are kept.
# NCCL, cuBLAS and cuDNN come from the GPU machine (its CUDA toolkit and
# PyTorch's nvidia-* wheels); run.sh puts them on LD_LIBRARY_PATH.
#
# Environment: KIT (the folder to fill, default .gpukit), KIT_BUILD (a build folder with sm_90
# among its ATOLL_CUDA_ARCHS and the programs built, taken as they are instead of the kit's own
# sm_90-only build: the tests pack the main build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kit=${KIT:-$root/.gpukit}
PEERS_DIR=${PEERS_DIR:-/tmp/peers/out}
mkdir -p "$kit/bin" "$kit/peers"

build=${KIT_BUILD:-$kit/build}
if [ -z "${KIT_BUILD:-}" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATOLL_CUDA_ARCHS=90 >/dev/null
  cmake --build "$build" -j "$(nproc)" --target atoll-train atoll cuda_kernels_fp32 cuda_kernels_bf16 gpu_bench \
    cudnn_plan_check
elif ! grep -qE '^ATOLL_CUDA_ARCHS:[A-Z]+=(.*;)?90(;|$)' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "kit: KIT_BUILD=$build is not a build with sm_90 among ATOLL_CUDA_ARCHS (its CMakeCache.txt says:" \
       "$(grep '^ATOLL_CUDA_ARCHS' "$build/CMakeCache.txt" 2>/dev/null || echo 'no such build'))" >&2
  exit 1
fi
# libatoll-cuda.so: the CUDA backend, which the programs open from their own directory
for b in atoll-train atoll cuda_kernels_fp32 cuda_kernels_bf16 gpu_bench cudnn_plan_check libatoll-cuda.so; do
  cp "$build/bin/$b" "$kit/bin/"
  strip --strip-debug "$kit/bin/$b" # only these: a kit built before also holds COMMIT and ktrace.so
done
# the kernel-time profiler (CUPTI injection library) for atoll and the peers alike
cc -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -I/usr/local/cuda/include "$root/bench/gpu/ktrace.c" \
   -L/usr/local/cuda/lib64 -lcupti -lstdc++ -o "$kit/bin/ktrace.so"

# the Debian packages of every shared library the kit's programs load from the system, but
# the C and C++ runtimes' packages (libc6, libgcc-s1, libstdc++6: the GPU machine has its own), so a
# new dependency of atoll travels without this list being edited; rebuilt when the list changes
pkgs=$(for b in "$kit"/bin/*; do [ -x "$b" ] && ldd "$b" 2>/dev/null; done |
  awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib\// {print $3}' | sort -u |
  while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib"; done |
  cut -d: -f1 | sort -u | grep -vxE 'libc6|libgcc-s1|libstdc\+\+6' | tr '\n' ' ')
[ -n "$pkgs" ] || { echo "kit: found no Debian packages behind the programs' libraries" >&2; exit 1; }
if [ ! -f "$kit/libs.tar.xz" ] || [ "$(cat "$kit/libs.list" 2>/dev/null)" != "$pkgs" ]; then
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086 # one word per package
  (cd "$tmp" && apt-get download $pkgs >/dev/null)
  mkdir -p "$tmp/root"
  for d in "$tmp"/*.deb; do dpkg -x "$d" "$tmp/root"; done
  mkdir -p "$tmp/lib"
  find "$tmp/root" \( -name '*.so*' \) \( -type f -o -type l \) -exec cp -a {} "$tmp/lib/" \;
  # OpenBLAS's alternatives layout: libblas/liblapack are not needed, libopenblas is
  rm -f "$tmp/lib/"libblas* "$tmp/lib/"liblapack*
  tar -C "$tmp" -cJf "$kit/libs.tar.xz" lib
  echo "$pkgs" > "$kit/libs.list"
  rm -rf "$tmp"
fi

# the peers in PEERS_DIR replace those of an earlier kit; without PEERS_DIR (built in an
# earlier session, its /tmp gone) the earlier kit's peers stay
if [ -d "$PEERS_DIR" ]; then
  rm -rf "$kit/peers" && mkdir -p "$kit/peers"
  cp -a "$PEERS_DIR"/. "$kit/peers/"
elif [ -n "$(ls -A "$kit/peers")" ]; then
  echo "kit: no $PEERS_DIR; keeping the peers of the earlier kit: $(ls "$kit/peers" | tr '\n' ' ')"
fi

# the commit the kit was built from (the GPU machine's copy of the tree may carry another .git)
echo "$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')" \
  > "$kit/bin/COMMIT"
echo "kit ready: $(du -sh "$kit/bin" | cut -f1) binaries, $(du -sh "$kit/libs.tar.xz" | cut -f1) libraries,"\
     "peers: $(ls "$kit/peers" | tr '\n' ' ')"
ldd "$kit/bin/atoll-train" | grep -E 'not found|uv|yaml|openblas|nccl|cublas' || true
