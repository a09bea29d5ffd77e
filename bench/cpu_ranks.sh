#!/usr/bin/env bash
# CPU ranks sharing a node's cores: atoll-train --nproc-per-node N, each rank's
# BLAS threads at its share of the cores (the default: cores / LOCAL_WORLD_SIZE,
# at least 1), against OpenBLAS's own default of every core in every rank (set
# here as OPENBLAS_NUM_THREADS=cores, which is what a rank got before it took
# its share). The work is the same; the floor is the shared run, and the excess
# of the other is N x cores threads contending for the cores. Median of REPEAT
# runs each. Writes bench/results/cpu_ranks.md.
#   bench/cpu_ranks.sh [BUILD_DIR]      (NPROC=4 ITERS=15 REPEAT=3)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "no $BUILD/bin: build first" >&2; exit 2; }
[ -x "$BIN/atoll-train" ] || { echo "build first: cmake --build $BUILD --target atoll-train" >&2; exit 2; }
NPROC=${NPROC:-4} ITERS=${ITERS:-15} REPEAT=${REPEAT:-3}
CORES=$(nproc)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-cpu-ranks.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset OMP_NUM_THREADS
model=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --micro-batch-size 4
       --global-batch-size $((4 * NPROC)) --train-iters "$ITERS" --lr 1e-3 --log-interval 1)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

run() { # BLAS_THREADS ("" = the rank's share): the median ms per iteration past the first, over REPEAT runs
  local per=()
  for _ in $(seq "$REPEAT"); do
    (cd "$TMP" && if [ -n "$1" ]; then export OPENBLAS_NUM_THREADS=$1; else unset OPENBLAS_NUM_THREADS; fi
     "$BIN/atoll-train" --nproc-per-node "$NPROC" "${model[@]}" --metrics-file m.jsonl >run.log 2>&1) \
      || { tail -5 "$TMP/run.log" >&2; exit 1; }
    per+=("$(grep -o '"step_ms":[0-9.]*' "$TMP/m.jsonl" | tail -n +2 | cut -d: -f2 |
             awk '{ s += $1; n++ } END { printf "%.1f", s / n }')")
  done
  printf '%s\n' "${per[@]}" | sort -n | sed -n "$(( (REPEAT + 1) / 2 ))p"
}

shared=$(run "")
every=$(run "$CORES")
ratio=$(awk -v a="$every" -v b="$shared" 'BEGIN { printf "%.2f", a / b }')
{
  echo "# cpu_ranks: $NPROC CPU ranks on $CORES cores, BLAS threads by share against every core per rank"
  echo
  echo "- machine: \`$(uname -srm)\`, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $CORES cores online"
  echo "- command: \`bench/cpu_ranks.sh $BUILD\` (NPROC=$NPROC ITERS=$ITERS REPEAT=$REPEAT)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average before: $LOAD"
  echo "- model: 4 layers, hidden 256, 8 heads, seq 256, micro-batch 4, dp $NPROC, fp32 (OpenBLAS)"
  echo
  echo "| BLAS threads per rank | ms per iteration (mean of iterations 2-$ITERS, median of $REPEAT runs) |"
  echo "| --- | ---: |"
  echo "| the rank's share: $CORES cores / $NPROC ranks, at least 1 (the default) | $shared |"
  echo "| every core ($CORES), OpenBLAS's own default | $every |"
  echo
  echo "Every core in every rank is ${ratio}x the time of the shared threads."
} | tee bench/results/cpu_ranks.md
