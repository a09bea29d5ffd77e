#!/usr/bin/env bash
# A job's atoll-train (ATOLL_JOB_ID > 0, as workerd starts it) and the --save
# placement claim (engine/checkpoint.h), through the program itself:
#   - it claims --save at start (placement.txt), and an older epoch than the one
#     there is refused at once: exit 78, the reason, nothing written;
#   - mid-run, once a newer placement claimed the directory, its next save stops
#     it: exit 78 (not restarted), "step N not saved: ... superseded", no step
#     committed after the claim (taken under placement.txt's lock, as a commit
#     holds it) and none removed; with --async-save the same;
#   - atoll-train that is no job's (ATOLL_JOB_ID unset) ignores the claim.
# Usage: engine_placement.sh ATOLL_TRAIN WORKDIR
set -uo pipefail
TRAIN=$1 W=$2
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }
M=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 256 --micro-batch-size 2
   --global-batch-size 2 --lr 1e-3 --log-interval 1000)
export OPENBLAS_NUM_THREADS=1

mkdir -p "$W/old" && printf 'job 5 epoch 1\n' >"$W/old/placement.txt"
ATOLL_JOB_ID=5 ATOLL_JOB_EPOCH=0 "$TRAIN" "${M[@]}" --train-iters 4 --save "$W/old" --save-interval 2 \
  >"$W/old.out" 2>&1; rc=$?
[ $rc = 78 ] && grep -q "^atoll-train: --save $W/old: job 5 was placed again: its epoch 1 holds this directory (placement.txt), and this process, of epoch 0, is superseded: it writes nothing more here$" "$W/old.out" \
  && [ "$(ls "$W/old")" = placement.txt ] || fail "an older epoch at start: exit $rc: $(cat "$W/old.out")"
echo "ok: an older epoch is refused at start (exit 78), nothing written"

for mode in sync async; do
  ck=$W/ck_$mode
  extra=(); [ $mode = async ] && extra=(--async-save)
  ATOLL_JOB_ID=5 ATOLL_JOB_EPOCH=2 "$TRAIN" "${M[@]}" --train-iters 100000000 --save "$ck" --save-interval 20 \
    "${extra[@]}" >"$W/$mode.out" 2>&1 &
  pid=$!
  for _ in $(seq 200); do [ -s "$ck/latest_checkpointed_iteration.txt" ] && break; sleep 0.05; done
  [ "$(cat "$ck/placement.txt" 2>/dev/null)" = "job 5 epoch 2" ] || { kill $pid; fail "$mode: placement.txt: $(cat "$ck/placement.txt")"; }
  # a newer placement's claim, under placement.txt's lock as ckpt_claim takes it: it waits for a commit in
  # flight, and no commit lands after it
  claimed=$(flock "$ck/placement.txt" sh -c 'printf "job 5 epoch 3\n" >"$1/placement.txt" &&
                                             cat "$1/latest_checkpointed_iteration.txt"' _ "$ck")
  steps=$(ls -d "$ck"/iter_* | wc -l)
  for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  kill -0 $pid 2>/dev/null && { kill $pid; fail "$mode: still running after the claim"; }
  wait $pid; rc=$?
  [ $rc = 78 ] && grep -q "step [0-9]* not saved: job 5 was placed again: its epoch 3 holds this directory (placement.txt), and this process, of epoch 2, is superseded" "$W/$mode.out" \
    || fail "$mode: exit $rc: $(tail -3 "$W/$mode.out")"
  latest=$(cat "$ck/latest_checkpointed_iteration.txt")
  [ "$latest" = "$claimed" ] && [ "$(ls -d "$ck"/iter_* | wc -l)" -ge "$steps" ] \
    && [ -z "$(find "$ck" -newer "$ck/placement.txt" -name manifest.json -path "*iter_*")" ] \
    || fail "$mode: steps after the claim: latest $latest (claimed at $claimed): $(ls "$ck" | tr '\n' ' ')"
  echo "ok: $mode: a newer claim stops the run at its next save (exit 78): $(grep -o 'step [0-9]* not saved' "$W/$mode.out")"
done

mkdir -p "$W/mine" && printf 'job 5 epoch 9\n' >"$W/mine/placement.txt"
env -u ATOLL_JOB_ID -u ATOLL_JOB_EPOCH "$TRAIN" "${M[@]}" --train-iters 4 --save "$W/mine" --save-interval 2 \
  >"$W/mine.out" 2>&1 || fail "no job's run: $(tail -3 "$W/mine.out")"
[ -s "$W/mine/iter_0000004/manifest.json" ] && ! grep -q '"job"' "$W/mine/iter_0000004/manifest.json" \
  && [ "$(cat "$W/mine/placement.txt")" = "job 5 epoch 9" ] || fail "no job's run: $(ls "$W/mine")"
echo "ok: a run that is no job's saves whatever placement.txt says, and leaves it"
echo "all checks passed"
