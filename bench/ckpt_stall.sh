#!/usr/bin/env bash
# Training stall per checkpoint save, synchronous against --async-save, on this
# machine: atoll-train with 4 CPU ranks (tp1 x pp2 x dp2, and the same with ZeRO-1)
# saves every SAVE_EVERY steps; rank 0's metrics file says, for the step after each
# save, how long the loop was blocked by it (save_stall_ms: the whole write, fsync
# and commit when synchronous; the copy to host memory and any wait for the
# previous save when asynchronous). The wall time of the run against the same run
# without saves gives the cost per save that the blocked time does not show (the
# background writer competing for the cores). Writes bench/results/ckpt_stall.md.
#   bench/ckpt_stall.sh [BUILD_DIR]            (ITERS=60 SAVE_EVERY=5 HIDDEN=512 REPEAT=2)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "no $BUILD/bin: build first" >&2; exit 2; }
ITERS=${ITERS:-60}
SAVE_EVERY=${SAVE_EVERY:-5}
HIDDEN=${HIDDEN:-512}
REPEAT=${REPEAT:-2}
[ -x "$BIN/atoll-train" ] || { echo "build first: cmake --build $BUILD --target atoll-train" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-ckpt.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OPENBLAS_NUM_THREADS=1
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
model=(--num-layers 4 --hidden-size "$HIDDEN" --num-attention-heads 8 --seq-length 64 --micro-batch-size 1
       --global-batch-size 8 --lr 1e-4 --pipeline-model-parallel-size 2 --train-iters "$ITERS" --log-interval 1)

run() { # NAME [flags...]: one run; prints "wall_s"
  local name=$1; shift
  rm -rf "$TMP/$name.ckpt" "$TMP/$name.jsonl"
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$TMP" && "$BIN/atoll-train" --nproc-per-node 4 "${model[@]}" "$@" --metrics-file "$TMP/$name.jsonl" \
      >"$TMP/$name.log" 2>&1) || { echo "run $name failed:" >&2; tail -5 "$TMP/$name.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

rows=()
for zero in "" "--use-distributed-optimizer"; do
  for r in $(seq 1 "$REPEAT"); do
    base=$(run none $zero)
    for mode in sync async; do
      flags=(--save "$TMP/$mode.ckpt" --save-interval "$SAVE_EVERY")
      [ $mode = async ] && flags+=(--async-save)
      wall=$(run $mode $zero "${flags[@]}")
      bytes=$(du -sb "$TMP/$mode.ckpt/iter_$(printf %07d "$SAVE_EVERY")" | cut -f1)
      row=$(python3 - "$TMP/$mode.jsonl" "$wall" "$base" "$SAVE_EVERY" "$ITERS" "$bytes" "$mode" "${zero:+zero1}" <<'PYEOF'
import json, sys, statistics
path, wall, base, every, iters, nbytes, mode, zero = sys.argv[1:9]
d = [json.loads(l) for l in open(path) if '"loss"' in l]
# the stall of the save after step k is reported with step k+1 (the final save has no next step)
st = [x["save_stall_ms"] for x in d if x["iteration"] > 1 and (x["iteration"] - 1) % int(every) == 0]
steps = [x["step_ms"] for x in d if (x["iteration"] - 1) % int(every) != 0 and x["iteration"] > 2]
saves = int(iters) // int(every)
over = (float(wall) - float(base)) / saves * 1e3
print("| %s | %s | %.1f | %d | %.1f | %.1f | %.1f | %.1f |" % (
    mode, zero or "-", int(nbytes) / 1048576, len(st), statistics.median(st), max(st),
    statistics.median(steps), over))
PYEOF
)
      rows+=("$row")
      echo "$row"
    done
  done
done

mkdir -p bench/results
OUT=bench/results/ckpt_stall.md
{
  echo "# Training stall per checkpoint save: synchronous vs --async-save"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: \`$(uname -srvm)\`"
  echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo "- load average before the runs: $LOAD (the machine is shared)"
  echo "- command: \`bench/ckpt_stall.sh $BUILD\` (ITERS=$ITERS, SAVE_EVERY=$SAVE_EVERY, HIDDEN=$HIDDEN, REPEAT=$REPEAT)"
  echo "- job: atoll-train --nproc-per-node 4, tp1 x pp2 x dp2, 4 layers, hidden $HIDDEN, seq 64, global batch 8;"
  echo "  a save every $SAVE_EVERY steps into a directory under ${TMPDIR:-/tmp}; stall = rank 0's save_stall_ms"
  echo
  echo "| mode | optimizer | step MiB | saves | stall median ms | stall max ms | step ms (no save) | wall ms per save vs no saves |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} >"$OUT.new"
# keep the hand-written reading below the generated part
if [ -f "$OUT" ] && grep -q '^## Reading' "$OUT"; then
  { echo; sed -n '/^## Reading/,$p' "$OUT"; } >>"$OUT.new"
fi
mv "$OUT.new" "$OUT"
echo "wrote $OUT"
