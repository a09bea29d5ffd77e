#!/usr/bin/env bash
# Builds atoll and runs every test: a normal build, then an ASan+UBSan build,
# then each libFuzzer target for a bounded time. In between, the other compiler and
# build-type combinations are compiled (not tested again), since -Werror findings
# differ between gcc and clang and between -O0 and -O3. Exit status is non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
FUZZ_SECONDS=${FUZZ_SECONDS:-20}

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

# Compile-only variants: gcc Release, clang Release and Debug (gcc Debug is the
# sanitizer build below). The CUDA parts are compiled by nvcc in the main build
# whatever the C compiler, so these leave them out.
for variant in gcc:g++:Release clang:clang++:Release clang:clang++:Debug; do
  IFS=: read -r cc cxx type <<<"$variant"
  dir=build-$cc-$type
  echo "compiling with $cc/$cxx, $type"
  CC=$cc CXX=$cxx cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" -DATOLL_CUDA=OFF >/dev/null
  if ! cmake --build "$dir" -j "$jobs" >"$dir/compile.log" 2>&1; then
    grep -E -A3 "error|warning" "$dir/compile.log" | head -40
    echo "compile check failed: $cc $type (full log: $dir/compile.log)" >&2
    exit 1
  fi
done

cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug -DATOLL_SANITIZE=ON -DATOLL_CUDA=OFF
cmake --build build-san -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-san --output-on-failure -j "$jobs" -LE "nosan|long" # tests/CMakeLists.txt says why

if [ -d fuzz ] && command -v clang >/dev/null; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
        -DATOLL_FUZZ=ON -DATOLL_CUDA=OFF
  cmake --build build-fuzz -j "$jobs" --target fuzz_all
  for f in build-fuzz/bin/fuzz_*; do
    corpus=fuzz/corpus/$(basename "$f")
    mkdir -p "build-fuzz/corpus-$(basename "$f")"
    echo "fuzzing $(basename "$f") for ${FUZZ_SECONDS}s"
    "$f" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 \
         "build-fuzz/corpus-$(basename "$f")" $( [ -d "$corpus" ] && echo "$corpus" )
  done
fi
echo "all tests passed"
