#!/usr/bin/env bash
# Integration tests of jobs end to end: a real coordinatord and two workerd
# simulating CPU nodes (cpu:4) on loopback; jobs submitted with the atoll CLI run
# real atoll-train ranks. Driven only through the CLI and HTTP (plus /proc to see
# which processes are alive, and raw protocol for the intruder case).
# Usage: jobs_it.sh CASE BINDIR
#   run      a tp2 pp2 dp2 job (atoll submit --wait) goes pending -> placing -> starting -> running -> completed; its
#            stored loss series equals, step for step, the same layout run standalone with
#            atoll-train --nproc-per-node; status/metrics/logs show it
#   cancel   atoll cancel leaves no rank process alive; submit --env reaches every rank's environment;
#            submit --dependency afterok waits for the running job and is cancelled with it; --time
#            cancels a job at its limit
#   kill9    kill -9 of a rank fails a job with --max-restarts 0, naming that rank; a job whose
#            ranks refuse its configuration (a missing --data-path) fails at once, not restarted
#   workerd  kill -9 of a workerd leaves none of its ranks alive; the job runs again on the other node
#   grow     kill -9 of a workerd: the job runs at dp 1; restarting it grows the job back to dp 2 at a checkpoint;
#            `atoll logs --follow` goes on through both restarts and ends with the job; --epoch reads each one
#   restart  kill -9 of the coordinator mid-job: after a restart no reported step is lost
#            and the job is still running (workerd kept the reports until they were stored)
#   checkpoint  `atoll cancel --checkpoint`: the ranks commit a checkpoint and stop, the job
#            is cancelled naming it; a job submitted with --load resumes from it with the
#            losses of an uninterrupted run; without --save the request is refused; a --finetune
#            job from that checkpoint starts at iteration 0, stops at --exit-duration-in-mins with
#            a checkpoint, and submitted again resumes its own step; `atoll resubmit` goes on from it
#   secret   without the job secret nothing can claim a rank or touch the job's keys
#   top      `atoll top` in a real terminal (tmux, 80x24) shows the job's row; q quits
#   http     /metrics parsed by python3-prometheus-client with the per-job series typed; /api
#            pagination and errors; --http-token bearer
#   dashboard  the page in a real headless Chromium (DevTools protocol): no request leaves
#            loopback, nodes and a running job's plots with points, live updates; screenshot kept
#   partition  SIGSTOP of the workerd that holds a whole job (its node cut off, its ranks training on): the
#            job is placed again on the other node, whose rank 0 claims the --save directory first; the old
#            ranks stop by themselves at their next save, writing nothing: every step committed by epoch 0
#            is at most the one epoch 1 resumed from, the later ones are epoch 1's (their manifests say so);
#            a job without --save trains on there until the node is back, then is stopped (job.stale_ranks)
#   hang     SIGSTOP of a rank: a hang is declared within the bound, naming that rank, its node and
#            that it is stopped; the stopped rank is gone and the job runs again in the next epoch
#   straggler  a throttled rank (SIGSTOP/SIGCONT, stopped 3/4 of the time) is named a straggler in events,
#            atoll status and /metrics
# Every process started here is killed on exit, pass or fail.
set -uo pipefail
CASE=$1
BIN=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$(python3 -c "import sys; print(sys.executable)") # the interpreter, not a version manager's shim (~0.5 s a call on a busy machine; the polls call it often)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobs_it_${CASE}.XXXXXX")
PIDS=()
export OPENBLAS_NUM_THREADS=1

. "$HERE/it_lib.sh"
it_extra_cleanup() { [ -n "${TMUX_SOCK:-}" ] && tmux -S "$TMUX_SOCK" kill-server 2>/dev/null; }

start_coord() { # [PORT] [more flags]
  rm -f "$TMP/state/coordinatord.addr"
  local port=${1:-0}; shift
  "$BIN/coordinatord" --listen "127.0.0.1:$port" --http 127.0.0.1:0 --state-dir "$TMP/state" "$@" \
      --heartbeat-interval 0.2 --node-timeout 3 >>"$TMP/coordinatord.log" 2>&1 &
  COORD_PID=$!
  PIDS+=("$COORD_PID")
  wait_until 10 test -s "$TMP/state/coordinatord.addr" || fail "coordinatord did not start"
  export ATOLL_COORDINATOR; ATOLL_COORDINATOR=$(cat "$TMP/state/coordinatord.addr")
  export ATOLL_TOKEN_FILE=$TMP/state/token
  PORT=${ATOLL_COORDINATOR##*:}
}

declare -A WPID
start_worker() { # NAME
  "$BIN/workerd" --name "$1" --simulate cpu:4 --work-dir "$TMP/work" >>"$TMP/workerd-$1.log" 2>&1 &
  WPID[$1]=$!
  PIDS+=("$!")
}
nodes_alive() { [ "$(atoll nodes --json | json "sum(n['state']=='alive' for n in d['nodes'])")" = "$1" ]; }
start_cluster() {
  start_coord 0 "$@"
  start_worker node-a
  start_worker node-b
  wait_until 10 nodes_alive 2 || fail "2 nodes not alive: $(atoll nodes)"
}
# The events of kind $1, as a JSON list
events_of() { atoll events --json | json "json.dumps([e for e in d['events'] if e['kind']=='$1'])"; }
state_is() { [ "$(atoll status "$1" --json | json "d['state']")" = "$2" ]; }
step_at_least() { [ "$(atoll status "$1" --json | json "d['step']")" -ge "$2" ]; }

# Processes whose environment names job $1 (and rank $2 when given) and one of this
# test's workerds as their supervisor, and whose output goes to a log under this
# test's work directory: the job's ranks (other tests and clusters run jobs too, and
# a supervisor pid may have been reused by another test's workerd).
rank_pids() {
  "$PY" - "$1" "${2:-}" "$TMP/work" "${WPID[@]}" <<'PYEOF'
import os, sys
job, rank, work, sups = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
for p in os.listdir("/proc"):
    if not p.isdigit(): continue
    try:
        env = open("/proc/%s/environ" % p, "rb").read().split(b"\0")
        stat = open("/proc/%s/stat" % p).read()
    except OSError:
        continue
    if stat.rsplit(")", 1)[1].split()[0] == "Z": continue
    if ("ATOLL_JOB_ID=%s" % job).encode() not in env: continue
    if rank and ("RANK=%s" % rank).encode() not in env: continue
    if not any(("ATOLL_SUPERVISOR_PID=%s" % s).encode() in env for s in sups): continue
    try:
        if not os.readlink("/proc/%s/fd/1" % p).startswith(work + "/"): continue
    except OSError:
        continue
    print(p)
PYEOF
}
no_ranks_of() { [ -z "$(rank_pids "$1")" ]; }
# The node whose workerd supervises job $1's ranks (the last found, for a job on several)
job_node() {
  local n p node=""
  for n in "${!WPID[@]}"; do
    for p in $(rank_pids "$1"); do
      tr '\0' '\n' </proc/"$p"/environ | grep -qx "ATOLL_SUPERVISOR_PID=${WPID[$n]}" && node=$n
    done
  done
  echo "$node"
}

# A small GPT: 8 ranks on 2 cores finish a step in tens of milliseconds.
model=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1
       --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2 --seed 1234 --log-interval 1)
layout=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)

case_run() {
  start_cluster
  # submit --wait: the id, then the job's end as `atoll status` prints it, exit 0 when it completed
  atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters 12 --name e2e --tensorboard-dir "$TMP/tb" \
    --wait >"$TMP/wait.out" 2>"$TMP/wait.err" || fail "submit --wait: exit $?: $(cat "$TMP/wait.out" "$TMP/wait.err")"
  local id; id=$(head -1 "$TMP/wait.out")
  state_is "$id" completed || fail "job not completed after submit --wait: $(atoll status "$id")"
  sed -n 2p "$TMP/wait.out" | grep -q "^job $id (e2e): completed - all 8 ranks finished" \
    || fail "submit --wait's end: $(cat "$TMP/wait.out")"
  # one line per state seen (polled once a second: a short state can pass unseen), the end last
  tail -1 "$TMP/wait.err" | grep -q "^atoll: job $id completed: all 8 ranks finished" &&
    grep -v "note:" "$TMP/wait.err" | head -1 | grep -qE "^atoll: job $id (pending|placing|starting|running)" \
    || fail "submit --wait's states: $(cat "$TMP/wait.err")"
  # a job a failure would send back to step 0 is said to be one at submission
  grep -qx "atoll: note: no --save DIR: after a node or rank failure the job trains again from step 0 (with --save DIR and --save-interval N or --save-mtbf SEC it resumes from its newest checkpoint)" \
    "$TMP/wait.err" || fail "no note for a job without --save: $(cat "$TMP/wait.err")"
  ok "atoll submit --wait returned 0 when job $id completed, its states on stderr"
  local path; path=$(atoll events --json | json "'>'.join(e['message'].split(':')[0].split(' -> ')[1] for e in d['events'] if e['kind']=='job.state' and e['subject']=='job $id')")
  [ "$path" = "placing>starting>running>completed" ] || fail "state path: pending>$path"
  ok "job $id went pending > $path on two simulated CPU nodes"
  atoll status "$id" | grep -q "completed - all 8 ranks finished" || fail "status: $(atoll status "$id")"
  atoll status "$id" --json | json "(d['layout']['tp'], d['layout']['pp'], d['layout']['dp'], d['step'], d['mfu'], len(d['metrics']['stages']))" \
    | grep -qx "(2, 2, 2, 12, None, 2)" || fail "status --json: $(atoll status "$id" --json)"
  atoll status "$id" --json | json "all(0 <= s['measured'] <= 1 and 0 <= s['transfer'] <= 1 for s in d['metrics']['stages'])" \
    | grep -qx True || fail "bubble shares outside [0,1]: $(atoll status "$id" --json)"
  ok "status: layout, step 12, MFU null on CPU, two stages with bubble and transfer shares in [0,1]"
  # The same job standalone, same seed and data: the stored losses match step for step.
  (cd "$TMP" && "$BIN/atoll-train" --nproc-per-node 8 "${model[@]}" "${layout[@]}" --train-iters 12 \
      --metrics-file "$TMP/standalone.jsonl" >"$TMP/standalone.log" 2>&1) || fail "standalone run (exit $?)"
  atoll metrics "$id" --json >"$TMP/cluster.json" || fail "atoll metrics"
  "$PY" "$HERE/loss_match.py" "$TMP/cluster.json" "$TMP/standalone.jsonl" 1 12 || fail "loss series differ"
  ok "the coordinator's loss series equals the standalone run's, step for step"
  atoll metrics "$id" | grep -qE "^12 " || fail "metrics text"
  atoll logs "$id" --rank 0 | grep -q "iteration       12/      12" || fail "rank 0 log: $(atoll logs "$id")"
  atoll logs "$id" --rank 9 2>"$TMP/err"; [ $? -eq 1 ] && grep -q "no rank 9" "$TMP/err" || fail "bad rank: $(cat "$TMP/err")"
  ok "atoll metrics and atoll logs"
  # --tensorboard-dir travels in the job spec: rank 0 wrote 'lm loss' (tag field, 7 bytes, then the value) per step
  local tbn; tbn=$("$PY" -c "import glob, sys; f = glob.glob(sys.argv[1] + '/events.out.tfevents.*')
print(len(f), open(f[0], 'rb').read().count(b'\n\x07lm loss\x15') if f else 0)" "$TMP/tb")
  [ "$tbn" = "1 12" ] || fail "TensorBoard event files, 'lm loss' records: $tbn"
  ok "the job's --tensorboard-dir holds one event file with 12 'lm loss' scalars"
  # --rampup-batch-size travels in the job spec: 2 2 12 to 8 takes 2, 2, 4, 6 samples, then 8 (--train-samples
  # 40 is 7 steps as Megatron counts them), each step's batch in rank 0's log; pp 2 dp 2 runs 1, 1, 2, 3, then 4
  # micro-batches, so each step's ideal bubble in atoll metrics is 1/(m+1): the step's own, not the job's 0.2
  atoll submit "${model[@]}" --rampup-batch-size 2 2 12 --train-samples 40 --pipeline-model-parallel-size 2 \
      --num-gpus 4 --name ramp --wait >"$TMP/ramp.out" 2>"$TMP/ramp.err" || fail "ramp job: $(cat "$TMP/ramp.out" "$TMP/ramp.err")"
  local rid rb rt; rid=$(head -1 "$TMP/ramp.out")
  rb=$(atoll logs "$rid" --rank 0 | grep -o "global batch size: *[0-9]*" | awk '{printf "%s ", $4}')
  [ "$rb" = "2 2 4 6 8 8 8 " ] || fail "the ramp's batches: '$rb'"
  atoll status "$rid" | grep -q "global batch 8 from 2, +2 over 12 samples)" || fail "status of the ramp: $(atoll status "$rid")"
  rt=$(atoll metrics "$rid" --json | json "' '.join('%.3f' % s['bubble_theory'] for s in d['steps'])")
  [ "$rt" = "0.500 0.500 0.333 0.250 0.200 0.200 0.200" ] || fail "the ramp's bubble theory by step: '$rt'"
  ok "--rampup-batch-size through the coordinator: batches $rb, ideal bubble by step $rt"
  # --step-batch-size-schedule travels in the job spec too: "0:2 64:4 0.5K:8" at --seq-length 16 starts batches
  # of 4 at sample 4 and of 8 at sample 31 (500 / 16, rounded down): 2, 2, 4 up to 32 samples, then 8
  # (--train-samples 56: 12 steps while fewer are consumed, as Megatron counts them); atoll status shows it
  atoll submit "${model[@]}" --step-batch-size-schedule "0:2 64:4 0.5K:8" --train-samples 56 \
      --pipeline-model-parallel-size 2 --num-gpus 4 --name sched --wait >"$TMP/sched.out" 2>"$TMP/sched.err" \
      || fail "schedule job: $(cat "$TMP/sched.out" "$TMP/sched.err")"
  local sid sb; sid=$(head -1 "$TMP/sched.out")
  sb=$(atoll logs "$sid" --rank 0 | grep -o "global batch size: *[0-9]*" | awk '{printf "%s ", $4}')
  [ "$sb" = "2 2 4 4 4 4 4 4 4 8 8 8 " ] || fail "the schedule's batches: '$sb'"
  atoll status "$sid" | grep -q "global batch 8 by schedule: 2 from 0 tokens, 4 from 64, 8 from 500)" \
    || fail "status of the schedule: $(atoll status "$sid")"
  ok "--step-batch-size-schedule through the coordinator: batches $sb, shown by atoll status"
  # A 4096-token vocabulary makes the LM head about 9.5 of these layers: submit says the even split
  # leaves stage 0 waiting and names the split that helps; a 256-token one (above) gets no such note.
  atoll submit "${model[@]}" --vocab-size 4096 --pipeline-model-parallel-size 2 --num-gpus 2 --train-iters 2 \
      --name headheavy --wait >/dev/null 2>"$TMP/heavy.err" || fail "head-heavy job: $(cat "$TMP/heavy.err")"
  grep -q "note: the last pipeline stage also runs the LM head, about 9.5 layers of work here.*; --decoder-last-pipeline-num-layers 1 would take 9% off the slowest stage" "$TMP/heavy.err" \
    && ! grep -q "note: the last pipeline stage" "$TMP/wait.err" || fail "the split note: $(cat "$TMP/heavy.err" "$TMP/wait.err")"
  ok "submit notes the LM head's stage when it holds clearly more work: $(grep -o 'about 9.5 layers.*slowest stage' "$TMP/heavy.err")"
  # An uneven pipeline split travels in the job spec to the ranks: 3 layers, then 1 beside the LM head
  atoll submit "${model[@]}" --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1 --num-gpus 2 \
      --train-iters 4 --name uneven --wait >"$TMP/uneven.out" 2>"$TMP/uneven.err" \
    || fail "uneven job: exit $?: $(cat "$TMP/uneven.out" "$TMP/uneven.err")"
  local uid; uid=$(head -1 "$TMP/uneven.out")
  atoll logs "$uid" --rank 0 | grep -q "pp 2 (1 model chunks per rank; layers per stage 3, 1)" \
    || fail "uneven job's layers: $(atoll logs "$uid" --rank 0 | head -3)"
  atoll status "$uid" | grep -q "stage 0 (3 layers): measured" && atoll status "$uid" | grep -q "stage 1 (1 layer): measured" \
    || fail "status does not show the layers per stage: $(atoll status "$uid")"
  ok "job $uid with --decoder-last-pipeline-num-layers 1 completed with layers 3, 1 on its two stages (atoll status shows them)"
  stop_all
}

stop_all() {
  for name in "${!WPID[@]}"; do
    local p=${WPID[$name]}
    kill -0 "$p" 2>/dev/null || continue
    kill -TERM "$p"; wait "$p"; local rc=$?
    [ $rc -eq 0 ] || fail "workerd $name exited $rc on SIGTERM"
  done
  kill -TERM "$COORD_PID"; wait "$COORD_PID"; local rc=$?
  [ $rc -eq 0 ] || fail "coordinatord exited $rc on SIGTERM"
}

long_job() { # NAME [ITERS] [more submit flags]: a job that runs until stopped
  local name=$1 iters=${2:-100000}; shift; shift
  atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters "$iters" --name "$name" "$@" --json | json "d['job']"
}
running_job() { # NAME STEPS [more submit flags]: submits a long job, waits until it has reported STEPS steps; sets ID
  local name=$1 steps=$2; shift 2
  ID=$(long_job "$name" 100000 "$@") || fail "submit"
  wait_until 60 step_at_least "$ID" "$steps" || fail "job not running: $(atoll status "$ID")"
}
cancel_job() { # ID: cancels it and checks no rank is left
  atoll cancel "$1" >/dev/null
  wait_until 10 no_ranks_of "$1" || fail "ranks alive after cancel: $(rank_pids "$1")"
}

case_cancel() {
  NCCL_DEBUG=WARN start_cluster # the workers' own value, which the job's --env replaces
  atoll submit "${model[@]}" --num-gpus 8 --env RANK=3 2>"$TMP/err"; [ $? = 2 ] \
    && grep -q "^atoll: --env: environment variable RANK is set by atoll for each rank" "$TMP/err" \
    || fail "--env RANK=3: $(cat "$TMP/err")"
  unset ATOLL_IT_UNSET
  atoll submit "${model[@]}" --num-gpus 8 --env ATOLL_IT_UNSET 2>"$TMP/err"; [ $? = 2 ] \
    && grep -q "'ATOLL_IT_UNSET' is not set here" "$TMP/err" || fail "--env of an unset name: $(cat "$TMP/err")"
  ATOLL_IT_HERE="from the shell" running_job victim 2 --env NCCL_DEBUG=INFO --env ATOLL_IT_HERE
  local id=$ID
  local pids; pids=$(rank_pids "$id")
  [ "$(echo "$pids" | wc -w)" = 8 ] || fail "expected 8 rank processes, found: $pids"
  for p in $pids; do
    local env; env=$(tr '\0' '\n' </proc/"$p"/environ | grep -E "^(NCCL_DEBUG|ATOLL_IT_HERE)=")
    [ "$env" = "NCCL_DEBUG=INFO"$'\n'"ATOLL_IT_HERE=from the shell" ] || fail "rank pid $p's environment: $env"
  done
  atoll status "$id" | grep -qx "  environment (--env): NCCL_DEBUG=INFO 'ATOLL_IT_HERE=from the shell'" \
    || fail "status: $(atoll status "$id")"
  ok "--env: every rank has NCCL_DEBUG=INFO (over the workers' WARN) and ATOLL_IT_HERE; bad names refused"
  # --dependency (Slurm's): waits for the running job, and is cancelled with it
  atoll submit "${model[@]}" --num-gpus 8 --dependency afterok: 2>"$TMP/err"; [ $? = 2 ] \
    && grep -q "'' after afterok: is not a job id (accepted: afterok:JOB" "$TMP/err" || fail "--dependency afterok: $(cat "$TMP/err")"
  local dep; dep=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters 5 --dependency=afterok:"$id" \
                   --json | json "d['job']") || fail "submit --dependency"
  message_is() { [ "$(atoll status "$1" --json | json "d['message']")" = "$2" ]; }
  wait_until 10 message_is "$dep" "waiting for job $id to complete (--dependency afterok:$id; it is running)" \
    || fail "dependent job: $(atoll status "$dep")"
  atoll status "$dep" | grep -qx "  dependency: afterok:$id" || fail "status of the dependent job: $(atoll status "$dep")"
  atoll cancel "$id" | grep -q cancelled || fail "cancel"
  wait_until 10 message_is "$dep" "not started: --dependency afterok:$id can never hold: job $id cancelled" \
    || fail "dependent job after the cancel: $(atoll status "$dep")"
  state_is "$dep" cancelled || fail "dependent job's state: $(atoll status "$dep")"
  ok "--dependency afterok:$id: job $dep waited, then was cancelled with job $id"
  # --time (sbatch's): counted from the first start; without --save the job is cancelled at the limit
  atoll submit "${model[@]}" --num-gpus 8 --time 0 2>"$TMP/err"; [ $? = 2 ] \
    && grep -q "time '0': expected MINUTES, MINUTES:SECONDS" "$TMP/err" || fail "--time 0: $(cat "$TMP/err")"
  local timed; timed=$(long_job timed 100000 --time=0:03) || fail "submit --time"
  atoll status "$timed" | grep -qx "  time limit (--time): 0:00:03 from its first start" \
    || fail "status of a job with --time: $(atoll status "$timed")"
  wait_until 20 state_is "$timed" cancelled || fail "not cancelled at its time limit: $(atoll status "$timed")"
  atoll status "$timed" --json | json "d['message']" | grep -q "^time limit (--time 0:00:03) reached at step [0-9]" \
    || fail "time limit message: $(atoll status "$timed" --json | json "d['message']")"
  wait_until 10 no_ranks_of "$timed" || fail "ranks alive after the time limit: $(rank_pids "$timed")"
  ok "--time=0:03: job $timed cancelled at its limit, no rank left"
  wait_until 10 no_ranks_of "$id" || fail "ranks alive after cancel: $(rank_pids "$id")"
  for p in $pids; do [ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ] && fail "rank pid $p alive"; done
  state_is "$id" cancelled || fail "state: $(atoll status "$id")"
  ok "cancel: the 8 rank processes ($(echo $pids)) are gone"
  stop_all
}

case_kill9() {
  start_cluster
  running_job victim 2 --max-restarts 0
  local id=$ID
  atoll wait "$id" --max-wait 0.5 >/dev/null 2>"$TMP/wait.err"; local rc=$?
  [ $rc = 1 ] && grep -q "job $id is still running after --max-wait 0.5 s" "$TMP/wait.err" \
    || fail "atoll wait --max-wait on a running job: exit $rc, $(cat "$TMP/wait.err")"
  local victim; victim=$(rank_pids "$id" 3)
  [ -n "$victim" ] || fail "no rank 3"
  kill -9 "$victim"
  wait_until 15 state_is "$id" failed || fail "job did not fail: $(atoll status "$id")"
  local msg; msg=$(atoll status "$id" --json | json "d['message']")
  echo "$msg" | grep -q "rank 3 (pid $victim) was killed by signal 9" || fail "failure names: $msg"
  echo "$msg" | grep -q "no restarts left (max 0)" || fail "failure says why it did not restart: $msg"
  wait_until 10 no_ranks_of "$id" || fail "ranks alive after the failure: $(rank_pids "$id")"
  ok "kill -9 of rank 3 failed the job: $msg"
  # A rank that refuses the job's configuration (exit 78, EX_CONFIG) fails it at once, with the
  # default restarts left unused: every restart would meet the same missing --data-path (a blend,
  # Megatron's "W1 PREFIX1 W2 PREFIX2", which must reach the ranks whole).
  id=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters 5 \
       --data-path 0.5 "$TMP/no-such-corpus" 0.5 "$TMP/no-such-corpus-2" --json | json "d['job']") || fail "submit"
  wait_until 30 state_is "$id" failed || fail "job did not fail: $(atoll status "$id")"
  atoll status "$id" --json | json "(d['restarts'], d['epoch'])" | grep -qx "(0, 0)" \
    || fail "restarted a refused configuration: $(atoll status "$id")"
  msg=$(atoll status "$id" --json | json "d['message']")
  echo "$msg" | grep -q "^not restarted (it would fail the same way): rank [0-7] on node node-[ab] refused the job's configuration: --data-path $TMP/no-such-corpus: .*no-such-corpus.idx: No such file or directory (expected the prefix .* writes)$" \
    || fail "failure names the refusal: $msg"
  wait_until 10 no_ranks_of "$id" || fail "ranks alive after the refusal: $(rank_pids "$id")"
  atoll wait "$id" >"$TMP/wait.out" 2>/dev/null; [ $? = 1 ] && grep -q "^job $id (job): failed - not restarted" \
    "$TMP/wait.out" || fail "atoll wait on a failed job: $(cat "$TMP/wait.out")"
  atoll status "$id" --json | json "d['goodput']['ratio'] == 0 and d['goodput']['lost_s']['startup'] == d['goodput']['wall_s'] > 0" \
    | grep -qx True || fail "a job that never trained counted productive time: $(atoll status "$id" --json)"
  ok "a missing --data-path failed the job without restarts: $msg"
  stop_all
}

ranks_gone() { for p in $MINE; do [ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ] && return 1; done; return 0; }

case_workerd() {
  start_cluster
  running_job orphans 2
  local id=$ID
  local mine; mine=$(for p in $(rank_pids "$id"); do
    tr '\0' '\n' </proc/"$p"/environ | grep -qx "ATOLL_SUPERVISOR_PID=${WPID[node-a]}" && echo "$p"; done)
  [ "$(echo "$mine" | wc -w)" = 4 ] || fail "node-a's 4 ranks: $mine"
  kill -9 "${WPID[node-a]}"
  MINE=$mine
  wait_until 5 ranks_gone || fail "ranks outlived their workerd: $mine"
  ok "kill -9 of workerd node-a: its 4 ranks died with it"
  unset 'WPID[node-a]'
  # The job goes on without node-a: tp2 x pp2 with data parallel 2 -> 1 on node-b's 4 slots.
  recovered() { [ "$(events_of job.recovered | json "len(d)")" -ge 1 ]; }
  wait_until 30 recovered || fail "not running again: $(atoll status "$id")"
  events_of job.node_lost | json "d[0]['message']" | grep -q "node node-a lost" || fail "cause: $(atoll events | tail)"
  atoll status "$id" --json | json "(d['state'], d['epoch'], d['world'], d['layout']['dp'])" | grep -qx "('running', 1, 4, 1)" \
    || fail "shrunk placement: $(atoll status "$id" --json)"
  local old; old=$(for p in $(rank_pids "$id"); do
    tr '\0' '\n' </proc/"$p"/environ | grep -qx "ATOLL_JOB_EPOCH=0" && echo "$p"; done)
  [ -z "$old" ] || fail "ranks of epoch 0 still alive: $old"
  ok "node-a lost: the job runs again on node-b alone (dp 1, epoch 1), no rank of epoch 0 left"
  cancel_job "$id"
  stop_all
}

case_decrease() {
  start_cluster
  # 6 ranks of tp 1 pp 1 with a global batch of 18. node-a lost leaves 4 slots: the batch is not whole on 4
  # data-parallel ranks, so without --decrease-batch-size-if-needed the job could only go on at dp 3; with it
  # (Megatron's flag for going on after failures) it trains at dp 4 on 16 samples a step.
  local id; id=$(atoll submit "${model[@]}" --global-batch-size 18 --decrease-batch-size-if-needed --num-gpus 6 \
                 --train-iters 100000 --name kso --json 2>"$TMP/kso.err" | json "d['job']") || fail "submit"
  ! grep -q "each step trains" "$TMP/kso.err" || fail "a note for a batch that splits: $(cat "$TMP/kso.err")"
  # submitted at a size the batch does not split over, the job says so (and is cancelled: it would take node-b)
  local id4; id4=$(atoll submit "${model[@]}" --global-batch-size 18 --decrease-batch-size-if-needed --num-gpus 4 \
                   --train-iters 1 --name kso4 --json 2>"$TMP/kso4.err" | json "d['job']") || fail "submit at 4"
  atoll cancel "$id4" >/dev/null || fail "cancel $id4"
  grep -q "note: --global-batch-size 18 is not whole micro-batches of 1 on 4 data-parallel ranks: with \
--decrease-batch-size-if-needed each step trains 16" "$TMP/kso4.err" || fail "no note at submission: $(cat "$TMP/kso4.err")"
  wait_until 60 step_at_least "$id" 2 || fail "job not running: $(atoll status "$id")"
  kill -9 "${WPID[node-a]}"
  unset 'WPID[node-a]'
  recovered() { [ "$(events_of job.recovered | json "len(d)")" -ge 1 ]; }
  wait_until 30 recovered || fail "not running again: $(atoll status "$id")"
  atoll status "$id" --json | json "(d['state'], d['world'], d['layout']['dp'])" | grep -qx "('running', 4, 4)" \
    || fail "placement after node-a: $(atoll status "$id" --json)"
  logged16() { atoll logs "$id" --rank 0 --tail 0 >"$TMP/kso.log" && grep -q "global batch size:    16 |" "$TMP/kso.log"; }
  wait_until 30 logged16 || fail "no step of 16 samples: $(tail -3 "$TMP/kso.log")"
  grep -q "note: --decrease-batch-size-if-needed: 16 samples a step, not the global batch 18" "$TMP/kso.log" \
    || fail "no note in the log: $(head -5 "$TMP/kso.log")"
  ok "node-a lost: the job with --decrease-batch-size-if-needed goes on at dp 4, 16 of its 18 samples a step"
  cancel_job "$id"
  stop_all
}

case_grow() {
  start_cluster
  running_job elastic 2 --save "$TMP/ckpt" --save-interval 5
  local id=$ID
  # `atoll logs --follow` follows the job through its restarts, not one process
  atoll logs "$id" --follow >"$TMP/follow.out" 2>"$TMP/follow.err" &
  local follower=$!
  PIDS+=("$follower")
  # the follower is on epoch 0 once it has shown some of its log; only then the fault
  wait_until 15 test -s "$TMP/follow.out" || fail "atoll logs --follow showed nothing of epoch 0"
  kill -9 "${WPID[node-b]}"
  unset 'WPID[node-b]'
  shrunk() { [ "$(atoll status "$id" --json | json "(d['state'], d['layout']['dp'])")" = "('running', 1)" ]; }
  wait_until 30 shrunk || fail "not running smaller without node-b: $(atoll status "$id")"
  start_worker node-b
  grown() { [ "$(atoll status "$id" --json | json "(d['state'], d['epoch'], d['layout']['dp'])")" = "('running', 2, 2)" ]; }
  wait_until 60 grown || fail "did not grow back once node-b returned: $(atoll status "$id")"
  atoll status "$id" >"$TMP/status.txt"
  grep -q "restarts: 2 (1 after failures, of at most 3), epoch 2" "$TMP/status.txt" \
    && grep -qE "epoch 2 .* scale-up .* dp 2 \(not counted\)" "$TMP/status.txt" \
    || fail "status after a fault and a scale-up: $(cat "$TMP/status.txt")"
  ok "node-b lost, then back: job $id ran at dp 1, grew back to dp 2 at a checkpoint; $(grep 'restarts:' "$TMP/status.txt" | cut -d';' -f1)"
  wait_until 30 step_at_least "$id" "$(($(atoll status "$id" --json | json "d['step']") + 2))" || fail "no steps in epoch 2"
  cancel_job "$id"
  follower_done() { ! kill -0 "$follower" 2>/dev/null; }
  wait_until 10 follower_done || fail "atoll logs --follow still running after the job ended"
  wait "$follower"; local rc=$?
  [ $rc = 0 ] || fail "atoll logs --follow exited $rc: $(cat "$TMP/follow.err")"
  grep -q "^atoll: job $id epoch 1 (node-lost: node node-b lost: .*): rank 0's log from here on$" "$TMP/follow.err" \
    && grep -q "^atoll: job $id epoch 2 (scale-up: .*): rank 0's log from here on$" "$TMP/follow.err" \
    && [ "$(wc -l <"$TMP/follow.err")" = 2 ] || fail "follow's epoch lines: $(cat "$TMP/follow.err")"
  [ "$(grep -c "^atoll-train: 8 ranks: .* dp 2," "$TMP/follow.out")" = 2 ] \
    && [ "$(grep -c "^atoll-train: 4 ranks: .* dp 1," "$TMP/follow.out")" = 1 ] \
    && [ "$(grep -c "^loaded checkpoint $TMP/ckpt/iter_" "$TMP/follow.out")" = 2 ] \
    || fail "followed log: $(grep -v iteration "$TMP/follow.out")"
  ok "atoll logs --follow went on through epochs 1 and 2 and ended with the job: $(grep -c iteration "$TMP/follow.out") iteration lines"
  # each placement's log stays readable (into a file: grep -q would close the pipe on a long log)
  atoll logs "$id" --epoch 1 >"$TMP/epoch1.log" && grep -q "^atoll-train: 4 ranks: .* dp 1," "$TMP/epoch1.log" \
    || fail "epoch 1's log: $(head -3 "$TMP/epoch1.log")"
  atoll logs "$id" --epoch 0 >"$TMP/epoch0.log" && grep -q "^atoll-train: 8 ranks: .* dp 2," "$TMP/epoch0.log" \
    || fail "epoch 0's log: $(head -3 "$TMP/epoch0.log")"
  atoll logs "$id" --epoch 3 2>"$TMP/err"; [ $? = 1 ] && grep -qx "atoll: job $id has no epoch 3: its placements are epochs 0..2" \
    "$TMP/err" || fail "a later epoch: $(cat "$TMP/err")"
  atoll logs "$id" --epoch 1 --rank 5 2>"$TMP/err"; [ $? = 1 ] && grep -qx "atoll: job $id has ranks 0..3 in epoch 1; there is no rank 5" \
    "$TMP/err" || fail "a rank epoch 1 did not have: $(cat "$TMP/err")"
  ok "atoll logs --epoch reads each placement's log"
  stop_all
}

case_restart() {
  start_cluster
  # one rank per node: a pipeline of two stages. Steps of some tens of ms (hidden 128, seq 32): the
  # series keeps the newest 1000 steps whole, and the check below needs the coordinator's downtime
  # (and the workers' reconnect) inside them (with hidden 32 a fast machine made 1,800 steps by then).
  local m=("${model[@]}"); m[3]=128; m[7]=32
  local id; id=$(atoll submit "${m[@]}" --pipeline-model-parallel-size 2 --num-gpus 2 --train-iters 1000000 \
                 --name survivor --json | json "d['job']") || fail "submit"
  wait_until 60 step_at_least "$id" 3 || fail "job not running: $(atoll status "$id")"
  local at; at=$(atoll status "$id" --json | json "d['step']")
  kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null
  ok "coordinator killed with -9 at step $at"
  sleep 1.5 # the ranks train on; their workerds keep the reports
  start_coord "$PORT"
  state_is "$id" running || fail "state after restart: $(atoll status "$id")"
  events_of job.reconciled | json "d[-1]['message']" | grep -q "running in epoch 0 on 2 ranks: left as it is" \
    || fail "no job.reconciled event: $(atoll events | tail -3)"
  ok "job $id still running after the restart (job.reconciled, no restart)"
  wait_until 60 step_at_least "$id" $((at + 100)) || fail "no progress after the restart: $(atoll status "$id")"
  # Every step from the first to the newest is stored: none reported while the coordinator
  # was down (or in flight when it died) was lost.
  local gaps; gaps=$(atoll metrics "$id" --json | json "(lambda it: sorted(set(range(1, max(it) + 1)) - set(it)) or max(it))([s['iteration'] for s in d['steps']])")
  case $gaps in \[*) fail "steps lost: $gaps" ;; esac
  [ "$gaps" -le 1000 ] || fail "the job made $gaps steps: older ones are thinned, so the check did not cover the downtime"
  [ "$gaps" -gt $((at + 99)) ] || fail "only $gaps steps"
  ok "steps 1..$gaps all stored, none lost across the coordinator's kill -9 at step $at"
  atoll status "$id" --json | json "(d['restarts'], d['epoch'], d['restart_history'])" | grep -qx "(0, 0, \[\])" \
    || fail "the coordinator's restart restarted the job: $(atoll status "$id" --json)"
  cancel_job "$id"
  stop_all
}

case_checkpoint() {
  start_cluster
  local ck=$TMP/ckpt iters=150
  running_job plain 1
  atoll cancel "$ID" --checkpoint 2>"$TMP/err"; [ $? -eq 1 ] && grep -q "without --save DIR" "$TMP/err" \
    || fail "cancel --checkpoint of a job without --save: $(cat "$TMP/err")"
  cancel_job "$ID"
  ok "cancel --checkpoint of a job without --save is refused: $(cat "$TMP/err")"
  # --exit-duration-in-mins too: the job's own stop would end it the same way, and the coordinator tells them
  # apart by the stop it recorded (in the store, so a coordinator restart would keep it)
  local id; id=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters $iters --save "$ck" --load "$ck" \
                 --exit-duration-in-mins 60 --name stopped --json | json "d['job']") || fail "submit"
  wait_until 60 step_at_least "$id" 10 || fail "job not running: $(atoll status "$id")"
  atoll cancel "$id" --checkpoint | grep -q "stopping: the ranks are committing a checkpoint" || fail "cancel --checkpoint"
  wait_until 30 state_is "$id" cancelled || fail "not stopped: $(atoll status "$id")"
  local saved; saved=$(cat "$ck/latest_checkpointed_iteration.txt")
  atoll status "$id" --json | json "d['message']" | grep -q "stopped on SIGTERM after step $saved with a checkpoint committed to $ck" \
    || fail "message: $(atoll status "$id" --json | json "d['message']") (checkpoint $saved)"
  [ "$saved" -ge 10 ] && [ "$saved" -lt $iters ] || fail "checkpoint at step $saved"
  wait_until 10 no_ranks_of "$id" || fail "ranks alive after the stop"
  atoll events --json | json "[e['message'] for e in d['events'] if e['kind']=='job.stopping']" | grep -q "atoll cancel --checkpoint" \
    || fail "no job.stopping event"
  ok "atoll cancel --checkpoint: job $id cancelled with its checkpoint at step $saved"
  local id2; id2=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters $iters --save "$ck" --load "$ck" \
                   --name resumed --json | json "d['job']") || fail "submit"
  wait_until 90 state_is "$id2" completed || fail "resumed job: $(atoll status "$id2")"
  (cd "$TMP" && "$BIN/atoll-train" --nproc-per-node 8 "${model[@]}" "${layout[@]}" --train-iters $iters \
      --metrics-file "$TMP/standalone.jsonl" >"$TMP/standalone.log" 2>&1) || fail "standalone run (exit $?)"
  atoll metrics "$id2" --json >"$TMP/resumed.json" || fail "atoll metrics"
  "$PY" "$HERE/loss_match.py" "$TMP/resumed.json" "$TMP/standalone.jsonl" $((saved + 1)) $iters || fail "resumed losses differ"
  ok "job $id2 resumed from step $saved with the uninterrupted run's losses"
  # a fine-tune of that checkpoint: its weights from iteration 0; --exit-duration-in-mins ends each placement
  # with a checkpoint (here after its first step), and submitting it again resumes its own step, not the start
  local ft=$TMP/ft id3 id4
  id3=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters 20 --load "$ck" --save "$ft" --finetune \
        --exit-duration-in-mins 0.0001 --name ft --json | json "d['job']") || fail "submit --finetune"
  wait_until 60 state_is "$id3" cancelled || fail "fine-tune not stopped: $(atoll status "$id3")"
  atoll status "$id3" --json | json "d['message']" | \
    grep -q "stopped at --exit-duration-in-mins 0.0001 after step 1 with a checkpoint committed to $ft" \
    || fail "message: $(atoll status "$id3" --json | json "d['message']")"
  atoll logs "$id3" --rank 0 >"$TMP/ft.log"
  grep -q "loaded the weights of checkpoint $ck/iter_0000150 to fine-tune from iteration 0" "$TMP/ft.log" \
    || fail "fine-tune log: $(head -3 "$TMP/ft.log")"
  # again, with the model taken from the checkpoint (--use-checkpoint-args: the CLI reads its manifest)
  id4=$(atoll submit --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2 "${layout[@]}" \
        --num-gpus 8 --train-iters 20 --load "$ck" --save "$ft" --finetune --use-checkpoint-args --name ft2 --json \
        2>"$TMP/uca.err" | json "d['job']") || fail "submit --finetune again: $(cat "$TMP/uca.err")"
  grep -qF -- "--use-checkpoint-args: from $ck/iter_0000150: --num-layers 4 --hidden-size 32 --num-attention-heads 4" \
    "$TMP/uca.err" || fail "--use-checkpoint-args note: $(cat "$TMP/uca.err")"
  wait_until 60 state_is "$id4" completed || fail "fine-tune resubmitted: $(atoll status "$id4")"
  atoll logs "$id4" --rank 0 >"$TMP/ft2.log"
  grep -q "save $ft holds this run's step 1: resuming it" "$TMP/ft2.log" || fail "fine-tune again: $(head -3 "$TMP/ft2.log")"
  ok "--finetune job $id3 took step 150's weights from iteration 0, stopped at --exit-duration-in-mins after step 1; job $id4 (its model from the checkpoint: --use-checkpoint-args) resumed it to 20"
  # atoll resubmit: the first one's spec again, going on from what its --save holds now (step 20)
  local id5; id5=$(atoll resubmit "$id3" --name again --json 2>"$TMP/resub.err" | json "d['job']") \
    || fail "resubmit: $(cat "$TMP/resub.err")"
  grep -q "job $id3 committed step 20 to $ft: the new job goes on from it" "$TMP/resub.err" \
    || fail "resubmit note: $(cat "$TMP/resub.err")"
  wait_until 60 state_is "$id5" completed || fail "resubmitted job: $(atoll status "$id5")"
  atoll logs "$id5" --rank 0 | grep -q "loaded checkpoint $ft/iter_0000020" || fail "resubmitted log: $(atoll logs "$id5" --rank 0 | head -3)"
  [ "$(atoll status "$id5" --json | json "d['name']")" = again ] || fail "resubmit --name"
  atoll resubmit 999 2>"$TMP/err"; [ $? = 1 ] || fail "resubmit of no job: $(cat "$TMP/err")"
  ok "atoll resubmit $id3: job $id5 went on from $ft's step 20 (its --load became its --save, as a restart's does)"
  stop_all
}

case_secret() {
  start_cluster
  running_job guarded 1
  local id=$ID
  local py=
  for cand in /usr/bin/python3 python3; do "$cand" -c "import google.protobuf" 2>/dev/null && { py=$cand; break; }; done
  [ -n "$py" ] && command -v protoc >/dev/null || { echo "SKIP: needs protoc and python3-protobuf"; exit 77; }
  protoc --python_out="$TMP" -I "$HERE/../../proto" "$HERE/../../proto/atoll.proto" || fail "protoc"
  "$py" "$HERE/jobs_intruder.py" "$PORT" "$ATOLL_TOKEN_FILE" "$TMP" "$id" || fail "an intruder got in"
  step_at_least "$id" 2 && state_is "$id" running || fail "the job suffered: $(atoll status "$id")"
  ok "no claim of a rank, no write of the job's keys without its secret; the job runs on"
  cancel_job "$id"
  stop_all
}

case_top() {
  command -v tmux >/dev/null || { echo "SKIP: needs tmux"; exit 77; }
  start_cluster
  running_job watched 2
  local id=$ID
  TMUX_SOCK=$TMP/tmux.sock
  tmux -S "$TMUX_SOCK" new-session -d -s top -x 80 -y 24 \
    "ATOLL_COORDINATOR=$ATOLL_COORDINATOR ATOLL_TOKEN_FILE=$ATOLL_TOKEN_FILE TERM=xterm $BIN/atoll top; echo TOP-EXITED \$?; sleep 30" \
    || fail "tmux"
  screen() { tmux -S "$TMUX_SOCK" capture-pane -p -t top; }
  shows_row() { screen | grep -qE "^$id +watched +running +[0-9]+/100000 +[0-9.]+ +[0-9]+ +[0-9.]+ +n/a +[0-9.]+/[0-9.]+$"; }
  wait_until 30 shows_row || fail "no job row on the screen:
$(screen)"
  top_step() { screen | awk -v id="$id" '$1 == id && $2 == "watched" { split($4, s, "/"); print s[1] }'; }
  local step1; step1=$(top_step)
  advanced() { [ "$(top_step)" -gt "$step1" ]; }
  wait_until 30 advanced || fail "the screen does not refresh (step $step1):
$(screen)"
  screen | grep -q "STAGE  MEASURED .* LAYERS" || fail "no per-stage view"
  [ "$(screen | awk '/^  [01] / && $5 == "2"' | wc -l)" = 2 ] \
    || fail "the stages' rows do not show 2 layers each:
$(screen)"
  [ "$(screen | awk '{ if (length($0) > 80) n++ } END { print n + 0 }')" = 0 ] || fail "lines wider than 80 columns"
  screen >"$TMP/top-screen.txt"
  tmux -S "$TMUX_SOCK" send-keys -t top q
  wait_until 5 sh -c "tmux -S '$TMUX_SOCK' capture-pane -p -t top | grep -q 'TOP-EXITED 0'" || fail "q did not quit:
$(screen)"
  ok "atoll top in an 80x24 tmux pane shows job $id's row, refreshes (step $step1 and later), and q quits"
  cat "$TMP/top-screen.txt"
  cancel_job "$id"
  stop_all
}

debian_python() { # the Python with Debian's packages (python3-prometheus-client)
  for cand in /usr/bin/python3 python3; do "$cand" -c "import $1" 2>/dev/null && { echo "$cand"; return 0; }; done
  return 1
}

case_http() {
  local dpy; dpy=$(debian_python prometheus_client) || { echo "SKIP: needs python3-prometheus-client"; exit 77; }
  echo "s3cret-bearer-token-0123456789-abcdef" >"$TMP/http-token"; chmod 600 "$TMP/http-token"
  start_cluster --http-token "$TMP/http-token"
  # a dataset with a validation split: the job evaluates every 2 steps
  for i in $(seq 10); do for _ in $(seq 20); do printf 'document %d, line of text; ' "$i"; done >"$TMP/doc$i.txt"; done
  atoll data prepare --input "$TMP"/doc*.txt --output-prefix "$TMP/evaldata" >/dev/null || fail "data prepare"
  running_job scraped 3 --data-path "$TMP/evaldata" --split 7,3,0 --eval-interval 2 --eval-iters 1
  local id=$ID
  wait_until 30 eval "atoll status $id | grep -q 'validation loss'" || fail "no validation loss: $(atoll status "$id")"
  local H; H=http://$(cat "$TMP/state/http.addr")
  "$dpy" - "$H" "$id" "$(cat "$TMP/http-token")" <<'PYEOF' || fail "/metrics"
import sys, urllib.request, urllib.error, json
from prometheus_client.parser import text_string_to_metric_families
base, job, token = sys.argv[1], sys.argv[2], sys.argv[3]
def get(path, tok=token):
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + tok} if tok else {})
    return urllib.request.urlopen(req, timeout=10)
for path in ("/metrics", "/api/jobs"):
    for tok in (None, "wrong"):
        try:
            get(path, tok)
            raise SystemExit("%s served without the right bearer token" % path)
        except urllib.error.HTTPError as e:
            assert e.code == 401, e.code
assert get("/", None).status == 200, "the page itself holds no data and is open"
fams = {f.name: f for f in text_string_to_metric_families(get("/metrics").read().decode())}
want = {"atoll_job_info": "gauge", "atoll_job_step": "gauge", "atoll_job_loss": "gauge", "atoll_job_valid_loss": "gauge",
        "atoll_job_tokens_per_second": "gauge", "atoll_job_achieved_flops_per_gpu": "gauge",
        "atoll_job_bubble_ratio": "gauge", "atoll_job_transfer_ratio": "gauge", "atoll_job_restarts": "counter",
        "atoll_job_ranks": "gauge", "atoll_job_nodes": "gauge", "atoll_job_memory_bytes": "gauge",
        "atoll_job_step_seconds": "gauge", "atoll_nodes": "gauge", "atoll_gpus": "gauge",
        "atoll_heartbeat_handle_seconds": "histogram", "atoll_rank_reports": "counter"}
for name, typ in want.items():
    assert name in fams, "missing %s" % name
    assert fams[name].type == typ, "%s is %s, want %s" % (name, fams[name].type, typ)
def samples(name): return [s for s in fams[name].samples if s.labels.get("job") == job]
assert samples("atoll_job_step")[0].value >= 3
assert samples("atoll_job_ranks")[0].value == 8 and samples("atoll_job_nodes")[0].value == 2
assert samples("atoll_job_tokens_per_second")[0].value > 0
assert 0 < samples("atoll_job_valid_loss")[0].value < 10, "the validation loss is reported like the training loss"
bub = samples("atoll_job_bubble_ratio")
kinds = sorted((s.labels["stage"], s.labels["kind"]) for s in bub)
assert kinds == [("0", "measured"), ("0", "theory"), ("1", "measured"), ("1", "theory")], kinds
assert all(0 <= s.value <= 1 for s in bub + samples("atoll_job_transfer_ratio")), "ratios outside 0..1"
assert not samples("atoll_job_mfu_ratio"), "no MFU series for CPU ranks (no peak)"
gr = samples("atoll_job_goodput_ratio")
assert fams["atoll_job_goodput_ratio"].type == "gauge" and len(gr) == 1 and 0 < gr[0].value <= 1, gr
lost = {s.labels["cause"]: s.value for s in samples("atoll_job_lost_seconds")}
assert fams["atoll_job_lost_seconds"].type == "counter", fams["atoll_job_lost_seconds"].type
assert sorted(lost) == ["checkpoint", "detection", "recompute", "restart", "startup"] and lost["startup"] > 0, lost
wall = samples("atoll_job_wall_seconds")[0].value
assert wall >= sum(lost.values()), (wall, lost)
assert not any("iteration" in s.labels or "step" in s.labels for f in fams.values() for s in f.samples), "per-step label"
print("ok: %d families; per-job series present and typed; bubble per stage measured/theory in 0..1" % len(fams))
# /api: one job with its series; pagination; clear errors
d = json.load(get("/api/jobs/" + job))
assert d["job"]["state"] == "running" and len(d["series"]) >= 3 and d["layout"]["pp"] == 2, d["job"]
ev = [s for s in d["series"] if s.get("valid_loss") is not None]
assert ev and all(s["iteration"] % 2 == 0 and s["valid_iteration"] == s["iteration"] for s in ev), d["series"]
after = d["series"][-1]["iteration"]
assert all(s["iteration"] > after for s in json.load(get("/api/jobs/%s?after=%d" % (job, after)))["series"])
p = json.load(get("/api/jobs?limit=1"))
assert len(p["jobs"]) == 1 and p["next"] == int(job), p["next"]
assert json.load(get("/api/jobs?after=%s" % job))["jobs"] == []
for bad in ("/api/jobs/999", "/nope"):
    try:
        get(bad)
        raise SystemExit(bad + " answered 200")
    except urllib.error.HTTPError as e:
        assert e.code == 404 and b"/api/jobs" in e.read(), e.code
n = json.load(get("/api/nodes"))["nodes"]
assert sum(len(x["held"]) for x in n) == 8 and {h["job"] for x in n for h in x["held"]} == {int(job)}
print("ok: /api/jobs/ID with series (and ?after), paginated /api/jobs, 404s that say what exists, GPU holders")
PYEOF
  ok "/metrics and /api behind --http-token; the validation loss: $(atoll status "$id" | grep 'validation loss')"
  cancel_job "$id"
  stop_all
}

case_dashboard() {
  command -v chromium >/dev/null || { echo "SKIP: needs chromium"; exit 77; }
  start_cluster
  running_job watched 3 --time 1-02:03:04 # the job's head shows the limit as Slurm prints it
  local id=$ID
  local shot=${ATOLL_ARTIFACTS:-$TMP}/dashboard.png
  "$PY" "$HERE/dashboard_cdp.py" "http://$(cat "$TMP/state/http.addr")/" "$shot" 2 || fail "dashboard"
  ok "the dashboard in headless Chromium; screenshot $shot"
  cancel_job "$id"
  stop_all
}


# A 4-rank job (one node holds it), running; then that node's workerd stopped and the job placed
# again on the other node (epoch 1). Sets CUT_ID, CUT_NODE and MINE (epoch 0's rank pids).
cut_off() { # NAME [submit flags]
  local name=$1; shift
  CUT_ID=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 4 --train-iters 100000 --name "$name" "$@" \
           --json | json "d['job']") || fail "submit $name"
  wait_until 60 step_at_least "$CUT_ID" 2 || fail "job $CUT_ID not running: $(atoll status "$CUT_ID")"
  CUT_NODE=$(job_node "$CUT_ID")
  [ -n "$CUT_NODE" ] || fail "no node holds job $CUT_ID's ranks"
  MINE=$(rank_pids "$CUT_ID")
  kill -STOP "${WPID[$CUT_NODE]}"
  placed1() { atoll status "$CUT_ID" --json | json "(d['state'], d['epoch'])" | grep -qx "('running', 1)"; }
  wait_until 30 placed1 || fail "job $CUT_ID not placed again: $(atoll status "$CUT_ID")"
}

case_partition() {
  start_cluster
  # tp2 x pp2 on 4 ranks: one node holds the whole job
  local id; id=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 4 --train-iters 100000 --name cutoff \
                 --save "$TMP/ckpt" --save-interval 5 --json | json "d['job']") || fail "submit"
  wait_until 60 test -s "$TMP/ckpt/latest_checkpointed_iteration.txt" || fail "no checkpoint: $(atoll status "$id")"
  [ "$(cat "$TMP/ckpt/placement.txt")" = "job $id epoch 0" ] || fail "placement.txt: $(cat "$TMP/ckpt/placement.txt")"
  # a second job on the same --save (spelled otherwise, or through a symlink: the CLI sends the path
  # realpath gives) is refused, unless it waits for the first
  ln -s "$TMP/ckpt" "$TMP/ckpt-alias"
  local real rc spelled; real=$(realpath "$TMP/ckpt")
  for spelled in "$TMP//ckpt/." "$TMP/ckpt-alias" "$TMP/ckpt-alias/../ckpt-alias/"; do
    atoll submit "${model[@]}" --num-gpus 4 --save "$spelled" 2>"$TMP/err" >/dev/null; rc=$?
    [ $rc != 0 ] && grep -q "^atoll: --save $real is job $id's ([a-z]*): two jobs cannot write one --save" \
      "$TMP/err" || fail "a second job on job $id's --save, as $spelled: exit $rc: $(cat "$TMP/err")"
  done
  local chained; chained=$(atoll submit "${model[@]}" --num-gpus 4 --save "$TMP/ckpt" --load "$TMP/ckpt" \
                          --dependency "afterany:$id" --json | json "d['job']") || fail "a chained job refused"
  atoll cancel "$chained" >/dev/null || fail "cancel $chained"
  ok "a second job on job $id's --save: refused ($(cut -c1-90 "$TMP/err")...); one that waits for it (--dependency) is taken"
  local node; node=$(job_node "$id")
  [ -n "$node" ] || fail "no node holds job $id's ranks"
  MINE=$(rank_pids "$id")
  [ "$(echo "$MINE" | wc -w)" = 4 ] || fail "4 ranks of epoch 0: $MINE"
  kill -STOP "${WPID[$node]}"
  recovered() { [ "$(events_of job.recovered | json "len(d)")" -ge 1 ]; }
  wait_until 30 recovered || fail "not placed again: $(atoll status "$id")"
  atoll status "$id" --json | json "(d['state'], d['epoch'])" | grep -qx "('running', 1)" || fail "$(atoll status "$id")"
  # The coordinator could not stop them: epoch 0's ranks train on until they find the claim (a poll or a save).
  wait_until 30 ranks_gone || fail "epoch 0's ranks still running: $MINE"
  local log0=$TMP/work/job-$id/epoch-0/rank-0.log log1=$TMP/work/job-$id/epoch-1/rank-0.log
  grep -q "not saved: job $id was placed again: its epoch 1 holds this directory (placement.txt), and this process, of epoch 0, is superseded" \
    "$log0" || fail "epoch 0's rank 0 did not say why it stopped: $(tail -3 "$log0")"
  ok "workerd $node stopped: job $id placed again (epoch 1); epoch 0's 4 ranks found the claim and stopped: $(grep -o 'step [0-9]* not saved' "$log0")"
  local resumed; resumed=$(grep -o "^loaded checkpoint $TMP/ckpt/iter_[0-9]*" "$log1" | grep -o '[0-9]*$') \
    || fail "epoch 1 did not resume: $(head -5 "$log1")"
  resumed=$((10#$resumed))
  [ "$(cat "$TMP/ckpt/placement.txt")" = "job $id epoch 1" ] || fail "placement.txt: $(cat "$TMP/ckpt/placement.txt")"
  wait_until 60 step_at_least "$id" $((resumed + 12)) || fail "epoch 1 does not train on: $(atoll status "$id")"
  "$PY" - "$TMP/ckpt" "$resumed" <<'PYEOF' || fail "the steps committed after the claim"
import glob, json, sys
ck, resumed = sys.argv[1], int(sys.argv[2])
by = {0: [], 1: []}
for m in glob.glob(ck + "/iter_*/manifest.json"):
    j = json.load(open(m))
    by[j["epoch"]].append(j["iteration"])
print("epoch 0 committed", sorted(by[0]), "; epoch 1 committed", sorted(by[1]), "; epoch 1 resumed from", resumed)
sys.exit(0 if by[0] and max(by[0]) <= resumed and by[1] and min(by[1]) > resumed else 1)
PYEOF
  kill -CONT "${WPID[$node]}"
  wait_until 15 nodes_alive 2 || fail "$node did not come back: $(atoll nodes)"
  atoll status "$id" --json | json "(d['state'], d['epoch'])" | grep -qx "('running', 1)" \
    || fail "after $node came back: $(atoll status "$id")"
  ok "every step epoch 0 committed is at most step $resumed, where epoch 1 resumed; the later ones are epoch 1's"
  cancel_job "$id"
  # Without --save nothing stops the old ranks until their node is back: then the coordinator does, and says so.
  cut_off cutoff2
  local id2=$CUT_ID
  node=$CUT_NODE
  ! ranks_gone || fail "epoch 0's ranks of job $id2 stopped while their node was away: $MINE"
  kill -CONT "${WPID[$node]}"
  stale() { events_of job.stale_ranks | json "[e['message'] for e in d if e['subject']=='job $id2'][0]"; }
  wait_until 15 stale || fail "no job.stale_ranks event: $(atoll events | tail -5)"
  stale | grep -qx "node $node still runs ranks of epoch 0, which epoch 1 replaced: told to stop them (the job's --save, if any, is epoch 1's: they commit nothing there)" \
    || fail "job.stale_ranks: $(stale)"
  wait_until 15 ranks_gone || fail "epoch 0's ranks of job $id2 outlived their node's return: $MINE"
  [ "$(events_of job.stale_ranks | json "sum(e['subject']=='job $id2' for e in d)")" = 1 ] \
    || fail "one event per find: $(events_of job.stale_ranks)"
  ok "a job without --save: epoch 0 trained on while $node was away; once back, its ranks were stopped: $(stale)"
  cancel_job "$id2"
  # With --save but no save due for a long while, the old ranks stop within seconds of the new placement's
  # claim (their rank 0 reads placement.txt every 2 s), not at their next save
  cut_off cutoff3 --save "$TMP/ckpt3" --save-interval 100000
  local id3=$CUT_ID t3; t3=$(now)
  node=$CUT_NODE
  wait_until 15 ranks_gone || fail "epoch 0's ranks of job $id3 ran on past epoch 1's claim: $MINE"
  local took3; took3=$(awk -v a="$(now)" -v b="$t3" 'BEGIN { printf "%.1f", a - b }')
  local log3=$TMP/work/job-$id3/epoch-0/rank-0.log
  grep -q "job $id3 was placed again: its epoch 1 holds this directory (placement.txt).*; stopping" "$log3" \
    || fail "epoch 0's rank 0 of job $id3 did not say why it stopped: $(tail -3 "$log3")"
  kill -CONT "${WPID[$node]}"
  wait_until 15 nodes_alive 2 || fail "$node did not come back: $(atoll nodes)"
  ok "--save-interval 100000: epoch 0's ranks stopped ${took3} s after epoch 1 was running, on the claim: $(grep -o 'job [0-9]* was placed again' "$log3" | head -1)"
  cancel_job "$id3"
  stop_all
}

case_hang() {
  start_cluster --hang-floor 2 --hang-factor 3
  running_job frozen 5
  local id=$ID
  local victim; victim=$(rank_pids "$id" 5)
  [ -n "$victim" ] || fail "no rank 5"
  local t0; t0=$(now)
  kill -STOP "$victim"
  has_hang() { [ "$(events_of job.hang | json "len(d)")" -ge 1 ]; }
  wait_until 15 has_hang || fail "no hang declared: $(atoll events | tail -5)"
  local took; took=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
  local msg; msg=$(events_of job.hang | json "d[0]['message']")
  # Where rank 5 stops decides what the others wait in: a collective it never
  # entered, a pipeline send/recv whose peer it is (those carry no count), or a
  # collective it had entered too, where only its stopped state tells it apart.
  echo "$msg" | grep -Eq "culprit rank 5 on node node-b \(pid $victim\): (never entered|the others wait for it in pp send/recv|process stopped \(SIGSTOP\), watchdog silent [0-9.]+ s, last seen in)" \
    || fail "culprit not named: $msg"
  echo "$msg" | grep -q "process stopped (SIGSTOP)" || fail "stopped state not named: $msg"
  ok "SIGSTOP of rank 5: hang declared within ${took} s naming it: $msg"
  MINE=$victim
  wait_until 10 ranks_gone || fail "the stopped rank outlived the restart: $victim"
  recovered() { [ "$(events_of job.recovered | json "len(d)")" -ge 1 ]; }
  wait_until 60 recovered || fail "not running again: $(atoll status "$id")"
  atoll status "$id" --json | json "(d['state'], d['epoch'], d['restart_history'][0]['cause'], d['restart_history'][0]['rank'], d['restart_history'][0]['node'])" \
    | grep -qx "('running', 1, 'hang', 5, 'node-b')" || fail "history: $(atoll status "$id" --json)"
  [ "$(rank_pids "$id" | wc -w)" = 8 ] || fail "expected the 8 ranks of epoch 1 only: $(rank_pids "$id")"
  ok "the stopped rank is gone and the job runs again in epoch 1; atoll status: $(atoll status "$id" | grep -A1 'epoch 1 ' | tr -s ' ' | head -2 | tr '\n' ' ')"
  cancel_job "$id"
  stop_all
}

case_straggler() {
  local dpy; dpy=$(debian_python prometheus_client) || { echo "SKIP: needs python3-prometheus-client"; exit 77; }
  start_cluster
  # data parallel over 4 ranks with enough compute per step that a slow rank's compute shows
  ID=$(atoll submit --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 \
       --global-batch-size 8 --lr 1e-3 --num-gpus 4 --train-iters 100000 --name slowpoke --json | json "d['job']") \
    || fail "submit"
  local id=$ID
  wait_until 60 step_at_least "$id" 5 || fail "job not running: $(atoll status "$id")"
  local victim; victim=$(rank_pids "$id" 2)
  [ -n "$victim" ] || fail "no rank 2"
  # A throttled rank, as a slow GPU or a busy host would leave it: stopped 3/4 of the time.
  "$PY" - "$victim" <<'PYEOF' &
import os, signal, sys, time
pid = int(sys.argv[1])
try:
    while True:
        os.kill(pid, signal.SIGSTOP); time.sleep(0.03)
        os.kill(pid, signal.SIGCONT); time.sleep(0.01)
except ProcessLookupError:
    pass
PYEOF
  local throttle=$!
  PIDS+=("$throttle")
  has_straggler() { [ "$(events_of job.straggler | json "len([e for e in d if 'rank 2 on node node-a' in e['message']])")" -ge 1 ]; }
  wait_until 60 has_straggler || fail "rank 2 not named a straggler: $(atoll status "$id" | tail -3)"
  ok "straggler event: $(events_of job.straggler | json "[e['message'] for e in d if 'rank 2' in e['message']][0]")"
  atoll status "$id" | grep -E "stragglers .*: rank 2 \(node-a\) [0-9.]+x" >/dev/null || fail "status: $(atoll status "$id")"
  atoll status "$id" --json | json "[r['rank'] for r in d['ranks'] if r['straggler']]" | grep -q "2" || fail "status --json"
  "$dpy" - "http://$(cat "$TMP/state/http.addr")" "$id" <<'PYEOF' || fail "/metrics straggler scores"
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
# Scores move with every step, and on a loaded host a peer's can spike for a moment:
# rank 2 must lead within a few scrapes, not at one instant.
for attempt in range(20):
    fams = {f.name: f for f in text_string_to_metric_families(urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode())}
    sc = {s.labels["rank"]: s.value for s in fams["atoll_rank_straggler_score"].samples if s.labels["job"] == sys.argv[2]}
    if len(sc) == 4 and sc["2"] > 1.2 and sc["2"] == max(sc.values()):
        break
    time.sleep(0.5)
assert len(sc) == 4 and sc["2"] > 1.2 and sc["2"] == max(sc.values()), sc  # the event had >= 1.5
n = [s.value for s in fams["atoll_job_stragglers"].samples if s.labels["job"] == sys.argv[2]]
assert n and n[0] >= 1, n
print("atoll_rank_straggler_score: rank 2 %.2f, others up to %.2f" % (sc["2"], max(v for k, v in sc.items() if k != "2")))
PYEOF
  kill "$throttle"; wait "$throttle" 2>/dev/null; kill -CONT "$victim" 2>/dev/null
  ok "atoll status and /metrics show rank 2's score"
  cancel_job "$id"
  stop_all
}

"case_$CASE"
echo "PASS ($CASE)"
