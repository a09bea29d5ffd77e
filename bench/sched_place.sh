#!/usr/bin/env bash
# How long one placement holds the coordinator's event loop at 10,000 nodes
# (bench/sched_place.c), for one or more builds side by side (e.g. this tree and
# an older commit's build, to show a change). Writes bench/results/sched_place.md.
#   bench/sched_place.sh [BUILD_DIR[=LABEL]...]     NODES=10000 JOBS=16 GPUS=64 BIG=8192
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${NODES:-10000}
JOBS=${JOBS:-16}
GPUS=${GPUS:-64}
BIG=${BIG:-8192}
[ $# -gt 0 ] || set -- build
OUT=bench/results/sched_place.md
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Scheduler: event-loop time of a submission and a placement at $NODES nodes"
  echo
  echo "A coordinator with its real handlers and SQLite store (in memory), no sockets, $NODES registered"
  echo "dgx-h100 nodes (8 GPUs each). Each job (tp 8 x pp 4, the rest DP) is submitted and placed alone;"
  echo "times are the process's CPU time, so they do not count other work on the machine. Heartbeats"
  echo "wait behind both. Last row: $JOBS jobs submitted together, placed by one scheduler pass."
  echo
  echo "- command: \`bench/sched_place.sh $*\` (NODES=$NODES JOBS=$JOBS GPUS=$GPUS BIG=$BIG)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: \`$(uname -srm)\`, $(lscpu | grep 'Model name' | sed 's/Model name:[ ]*//'), $(nproc) cores (load average before: $LOAD)"
  for spec in "$@"; do
    dir=${spec%%=*}
    label=${spec#*=}
    [ "$label" != "$spec" ] || label=$(git log -1 --format='%h %s' | cut -c1-60)
    echo
    echo "## $label (\`$dir\`, $(grep CMAKE_BUILD_TYPE:STRING "$dir/CMakeCache.txt" | cut -d= -f2))"
    echo
    "$dir/bin/sched_place" "$NODES" "$JOBS" "$GPUS" "$BIG"
  done
} | tee "$OUT.tmp"
# a hand-written "## Reading" section of the previous file is kept
# (read whole first: `grep -q` in a pipe may swallow what it was given)
READING=$([ -f "$OUT" ] && sed -n '/^## Reading/,$p' "$OUT" || true)
[ -z "$READING" ] || printf '\n%s\n' "$READING" >>"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
