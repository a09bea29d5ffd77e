#!/usr/bin/env bash
# Runs the real GPU test programs (tests/cuda/cuda_kernels_fp32.c, _bf16.c)
# against the whole CUDA backend compiled for the CPU emulation (emu_cuda.h,
# cublas_mock.h). Slow (minutes: full-size shapes, one OS thread per CUDA
# thread), so not part of ctest; run it after changing kernels/cuda or the
# tests, before the next GPU run. Needs g++ (C++20), cc, cmake, OpenBLAS.
#   tests/cuda/emu/run_gpu_tests.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-/tmp/atoll-emu-build}
mkdir -p "$out"
rm -f "$out"/*.o
inc="-I$root/tests/cuda/emu/include -I$root/tests/cuda/emu -I$root/kernels/cuda -I$root/kernels"
blas=$(pkg-config --cflags openblas 2>/dev/null || true)
for f in "$root"/kernels/cuda/*.cu; do
  n=$(basename "$f" .cu)
  cmake -DIN="$f" -DOUT="$out/emu_$n.cpp" -P "$root/tests/cuda/emu/translate.cmake"
  g++ -std=c++20 -O2 -w $inc -c "$out/emu_$n.cpp" -o "$out/emu_$n.o" &
done
for f in "$root"/kernels/cpu/*.c; do
  cc -std=c11 -O2 -D_GNU_SOURCE -I"$root/kernels" $blas -c "$f" -o "$out/cpu_$(basename "$f" .c).o" &
done
for job in $(jobs -p); do wait "$job"; done
rc=0
for t in cuda_kernels_fp32 cuda_kernels_bf16; do
  cc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$root/tests" -I"$root/kernels/cuda" -I"$root/kernels" \
    "$root/tests/cuda/$t.c" "$out"/emu_*.o "$out"/cpu_*.o -lopenblas -lstdc++ -lpthread -lm -o "$out/$t"
  echo "== $t (emulated)"
  "$out/$t" || rc=1
done
exit $rc
