#!/usr/bin/env bash
# Long fuzzing runs: each libFuzzer target given (default: every build-fuzz/bin/fuzz_*)
# runs until RUNS executions (default 10 million) or MAX_SECONDS (default one hour),
# one target at a time at the lowest CPU priority (the machine is shared). Each run
# starts from the project's corpus (fuzz/corpus/TARGET) plus what earlier runs grew
# (build-fuzz/corpus-TARGET); afterwards the grown corpus is minimised back into
# fuzz/corpus/TARGET, so tests/run.sh's short runs start where the long ones ended.
# Appends one row per target to bench/results/fuzz.md (machine, command, date).
#   bench/fuzz.sh [TARGET...]      build first: cmake --build build-fuzz --target fuzz_all
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10000000}
MAX_SECONDS=${MAX_SECONDS:-3600}
BIN=build-fuzz/bin
out=bench/results/fuzz.md
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for f in "$BIN"/fuzz_*; do targets+=("$(basename "$f")"); done
if [ ! -f "$out" ]; then
  cat >"$out" <<'EOF'
# Fuzzing runs

Each libFuzzer target (`fuzz/`, built with ASan + UBSan: `cmake -S . -B build-fuzz -G Ninja
-DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DATOLL_FUZZ=ON -DATOLL_CUDA=OFF`) run by
`bench/fuzz.sh` until 10 million executions or one hour, at `nice -n 19` on a 2-core machine
shared with other work, one target at a time. The corpus grown by each run is minimised into
`fuzz/corpus/TARGET`, which `tests/run.sh` starts from. "crashes" counts crash, leak, timeout
and out-of-memory artifacts (kept in build-fuzz/artifacts-TARGET); each is a bug to fix, after
which the target is run again. "slow" counts inputs libFuzzer reported as slow (over 10 s of
wall time on this shared machine at nice 19), which are kept too and timed again alone.

- command: `bench/fuzz.sh [TARGET...]` (RUNS=10000000, MAX_SECONDS=3600 unless the row says otherwise)
- machine: MACHINE

| target | executions | seconds | exec/s | coverage (edges) | features | corpus in / out (files) | crashes | slow | commit | date (UTC) |
|---|---|---|---|---|---|---|---|---|---|---|
EOF
  sed -i "s|MACHINE|\`$(uname -srm)\`, $(lscpu | grep 'Model name' | sed 's/Model name:[ ]*//'), $(nproc) cores|" "$out"
fi
for t in "${targets[@]}"; do
  [ -x "$BIN/$t" ] || { echo "no $BIN/$t: cmake --build build-fuzz --target fuzz_all" >&2; exit 2; }
  seeds=fuzz/corpus/$t grown=build-fuzz/corpus-$t art=build-fuzz/artifacts-$t log=build-fuzz/$t.long.log
  mkdir -p "$seeds" "$grown" "$art"
  in_files=$(find "$seeds" -type f | wc -l)
  commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- common coordinatord engine fuzz/*.c || echo "+changes")
  rm -f "$art"/*
  start=$(date +%s)
  set +e
  nice -n 19 "$BIN/$t" -runs="$RUNS" -max_total_time="$MAX_SECONDS" -print_final_stats=1 \
       -artifact_prefix="$art/" "$grown" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  crashes=$(find "$art" -type f ! -name 'slow-unit-*' | wc -l)
  slow=$(find "$art" -type f -name 'slow-unit-*' | wc -l)
  # Minimise what the run grew back into the project's corpus.
  tmp=$(mktemp -d build-fuzz/merge-XXXXXX)
  nice -n 19 "$BIN/$t" -merge=1 "$tmp" "$seeds" "$grown" >/dev/null 2>&1
  rm -rf "$seeds" && mv "$tmp" "$seeds"
  out_files=$(find "$seeds" -type f | wc -l)
  echo "| \`$t\` | ${execs:-?} | $secs | $(( ${execs:-0} / (secs > 0 ? secs : 1) )) | ${cov:-?} | ${ft:-?} | $in_files / $out_files | $crashes (exit $rc) | $slow | $commit | $(date -u '+%Y-%m-%d %H:%M') |" >>"$out"
  tail -1 "$out"
done
