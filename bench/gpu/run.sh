#!/usr/bin/env bash
# GPU checks and benchmark for kernels/cuda, self-contained: builds with nvcc
# and cc only (no CMake, no project dependencies besides a BLAS for the CPU
# reference, replaced by tests/cuda/cblas_shim when none is installed), so it
# runs on a bare GPU machine with the CUDA toolkit.
#
#   bench/gpu/run.sh check            kernel tests vs the CPU reference (cuda_kernels_*)
#   bench/gpu/run.sh memcheck         the same tests under compute-sanitizer memcheck
#   bench/gpu/run.sh bench OUTDIR [B] ceilings + per-kernel times -> OUTDIR/gpu_bench.md
#   bench/gpu/run.sh all OUTDIR       check, then bench
#
# Environment: NVCC (default nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# ARCH (default "-gencode=arch=compute_90,code=sm_90"), BUILD (default
# /tmp/atoll-gpu-build). Results go to OUTDIR only: copy them into
# bench/results/ by hand, with the machine, once they come from a real GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-check}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${ARCH:--gencode=arch=compute_90,code=sm_90}
BUILD=${BUILD:-/tmp/atoll-gpu-build}
cuda_home=$(dirname "$(dirname "$NVCC")")
mkdir -p "$BUILD"
rm -f "$BUILD"/*.o

build() {
  local inc="-I$root/kernels -I$root/kernels/cuda -I$root/tests"
  echo "building kernels/cuda with $NVCC $ARCH"
  for f in "$root"/kernels/cuda/*.cu; do
    "$NVCC" -std=c++17 -O3 $ARCH -Werror=all-warnings -Xcompiler=-Wall,-Wextra \
      $inc -c "$f" -o "$BUILD/cu_$(basename "$f" .cu).o" &
  done
  for job in $(jobs -p); do wait "$job"; done # one failed compile fails the build (set -e)
  local blas_inc="" blas_lib="-lopenblas" shim=""
  if ! echo '#include <cblas.h>' | cc $(pkg-config --cflags openblas 2>/dev/null) -E - >/dev/null 2>&1; then
    echo "no <cblas.h>: the CPU reference uses tests/cuda/cblas_shim (plain loops, OpenMP)"
    blas_inc="-I$root/tests/cuda/cblas_shim"
    blas_lib=""
    shim="$root/tests/cuda/cblas_shim/cblas_shim.c"
  else
    blas_inc=$(pkg-config --cflags openblas 2>/dev/null || true)
  fi
  local cflags="-std=c11 -O2 -fopenmp -D_GNU_SOURCE -Wall -Wextra -Werror $inc $blas_inc -I$cuda_home/include"
  local libs="-L$cuda_home/lib64 -lcublasLt -lcublas -lcudart $blas_lib -lgomp -lstdc++ -lm -ldl -lpthread"
  for f in "$root"/kernels/cpu/*.c $shim; do
    # shellcheck disable=SC2086
    cc $cflags -c "$f" -o "$BUILD/cpu_$(basename "$f" .c).o"
  done
  local objs=("$BUILD"/cu_*.o "$BUILD"/cpu_*.o)
  for t in cuda_kernels_fp32 cuda_kernels_bf16; do
    # shellcheck disable=SC2086
    cc $cflags "$root/tests/cuda/$t.c" "${objs[@]}" $libs -o "$BUILD/$t"
  done
  # shellcheck disable=SC2086
  cc $cflags "$root/bench/gpu/gpu_bench.c" "${objs[@]}" $libs -o "$BUILD/gpu_bench"
}

machine() {
  echo "- machine: $(uname -a)"
  echo "- cpu: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/.*: *//')"
  echo "- gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo unknown)"
  echo "- nvcc: $("$NVCC" --version | tail -1)"
  echo "- command: bench/gpu/run.sh $*"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

check() {
  local rc=0
  for t in cuda_kernels_fp32 cuda_kernels_bf16; do
    echo "== $t"
    "$BUILD/$t" || rc=1
  done
  return $rc
}

case "$mode" in
  check) build; check ;;
  memcheck)
    build
    cs=$(command -v compute-sanitizer || echo "$cuda_home/bin/compute-sanitizer")
    for t in cuda_kernels_fp32 cuda_kernels_bf16; do
      "$cs" --tool memcheck --leak-check full --error-exitcode 1 "$BUILD/$t"
    done ;;
  bench|all)
    out=${2:?usage: run.sh $mode OUTDIR [B]}
    mkdir -p "$out"
    build
    if [ "$mode" = all ]; then check; fi
    rm -f "$out/gpu_bench.md"
    "$BUILD/gpu_bench" "$out" "${3:-8}"
    if [ -f "$out/gpu_bench.md" ]; then machine "$@" >> "$out/gpu_bench.md"; fi ;;
  *) echo "run.sh: unknown mode '$mode' (check, memcheck, bench OUTDIR, all OUTDIR)" >&2; exit 2 ;;
esac
