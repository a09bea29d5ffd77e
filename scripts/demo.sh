#!/usr/bin/env bash
# The main job on the embedded default, for now: build the control plane, start a
# local coordinator (state in a temporary directory) and two simulated 8-GPU
# workers (`workerd --simulate dgx-h100`), wait until both nodes are alive, show
# `atoll nodes`, then stop everything cleanly. Exit status 0 only if all of that held.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target coordinatord workerd atoll
BIN=$BUILD/bin

DIR=$(mktemp -d "${TMPDIR:-/tmp}/atoll-demo.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

echo "== coordinator (state in $DIR/state)"
"$BIN/coordinatord" --listen 127.0.0.1:0 --http 127.0.0.1:0 --state-dir "$DIR/state" 2>"$DIR/coordinatord.log" &
COORD=$!
PIDS+=("$COORD")
for _ in $(seq 100); do [ -s "$DIR/state/coordinatord.addr" ] && break; sleep 0.05; done
[ -s "$DIR/state/coordinatord.addr" ] || { cat "$DIR/coordinatord.log"; echo "coordinatord did not start" >&2; exit 1; }
export ATOLL_COORDINATOR; ATOLL_COORDINATOR=$(cat "$DIR/state/coordinatord.addr")
export ATOLL_TOKEN_FILE=$DIR/state/token
echo "   listening on $ATOLL_COORDINATOR, HTTP on $(cat "$DIR/state/http.addr")"

echo "== two simulated dgx-h100 workers"
WORKERS=()
for name in node-a node-b; do
  "$BIN/workerd" --name "$name" --simulate dgx-h100 --work-dir "$DIR/work" 2>"$DIR/workerd-$name.log" &
  WORKERS+=("$!")
  PIDS+=("$!")
done

alive() { [ "$("$BIN/atoll" nodes --json | grep -o '"state":"alive"' | wc -l)" -eq 2 ]; }
for _ in $(seq 100); do alive && break; sleep 0.1; done
alive || { cat "$DIR"/*.log; echo "the workers did not come up" >&2; exit 1; }

echo "== atoll nodes"
"$BIN/atoll" nodes

echo "== stopping"
for p in "${WORKERS[@]}" "$COORD"; do
  kill -TERM "$p"
  wait "$p" || { echo "process $p did not stop cleanly" >&2; exit 1; }
done
PIDS=()
echo "done: both nodes registered and heartbeated; everything stopped cleanly"
