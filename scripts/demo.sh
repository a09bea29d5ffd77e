#!/usr/bin/env bash
# The main job on the embedded default: build everything, start a local coordinator
# (state in a temporary directory) and two simulated 8-GPU workers
# (`workerd --simulate dgx-h100`), wait until both nodes are alive, show `atoll nodes`
# and the planner's best layouts of a GPT-2 124M job on that live cluster, stop the
# daemons cleanly, then train a small GPT on this machine's CPU with four ranks
# (tensor parallel 2 x pipeline parallel 2, host transport) and check its loss fell.
# Exit status 0 only if all of that held. Set DEMO_ITERS to train longer.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target coordinatord workerd atoll atoll-train
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

echo "== atoll plan --cluster: GPT-2 124M, global batch 64, on the live cluster"
"$BIN/atoll" plan --cluster --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
  --seq-length 1024 --vocab-size 50304 --global-batch-size 64 --top 3

echo "== stopping the daemons"
for p in "${WORKERS[@]}" "$COORD"; do
  kill -TERM "$p"
  wait "$p" || { echo "process $p did not stop cleanly" >&2; exit 1; }
done
PIDS=()
echo "   both nodes registered and heartbeated; everything stopped cleanly"

echo "== training on the CPU backend: 4 ranks, tp 2 x pp 2, 1F1B"
"$BIN/atoll-train" --nproc-per-node 4 --device cpu \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 2 --global-batch-size 16 --train-iters "${DEMO_ITERS:-60}" \
  --lr 1e-3 --lr-warmup-iters 5 --log-interval 10 --metrics-file "$DIR/metrics.jsonl"
first=$(head -1 "$DIR/metrics.jsonl" | grep -o '"loss":[0-9.eE+-]*' | cut -d: -f2)
last=$(tail -1 "$DIR/metrics.jsonl" | grep -o '"loss":[0-9.eE+-]*' | cut -d: -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
  { echo "the loss did not fall ($first -> $last)" >&2; exit 1; }
echo "done: loss $first -> $last"
