#!/usr/bin/env bash
# atoll inside real Slurm allocations: Debian's slurmctld and slurmd (munge
# authentication) on this machine, two compute nodes, each slurmd in its own UTS +
# network namespace (its hostname is its NodeName, its own address on a bridge), all
# inside a private PID, mount, UTS and network namespace that dies with the test.
# Jobs are real `sbatch` runs of scripts/atoll.sbatch; their workers are simulated
# CPU nodes (workerd --simulate cpu:2), everything else is the real thing.
# Usage: slurm_it.sh CASE BINDIR      (as root: namespaces, Slurm's daemons)
#   run      the template brings up the coordinator and a workerd on both nodes, the
#            fabric comes from `scontrol show topology`, a tp2 x pp2 job runs to
#            completed with ranks on both nodes, the batch job exits 0, and the stored
#            losses equal a standalone run's step for step
#   requeue  `scontrol requeue` mid-run: the ranks commit a checkpoint on Slurm's
#            SIGTERM, the job is recorded as stopped with it, and the requeued
#            allocation resumes from it to the end with the losses of an
#            uninterrupted run
#   drain    `scontrol update state=drain` of node2 while a tp2 x dp2 job trains on
#            both nodes: the coordinator records Slurm's state and reason, the job
#            restarts on node1 alone (DP 2 -> 1) and keeps training; after
#            `state=resume` node2 is placeable again, the job grows back to DP 2 at
#            its next checkpoint and completes
set -uo pipefail
CASE=$1
BIN=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

if [ "${SLURM_IT_INNER:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces, Slurm's daemons)"; exit 77; }
  for b in slurmctld slurmd munged sbatch unshare ip; do
    command -v "$b" >/dev/null || { echo "SKIP: needs $b (scripts/install-deps.sh installs slurm-wlm and munge)"; exit 77; }
  done
  # A PID namespace: when this script ends, every daemon and rank inside it ends too.
  exec env SLURM_IT_INNER=1 unshare --pid --fork --mount-proc --mount --uts --net --kill-child \
    bash "$0" "$CASE" "$BIN"
fi

PY=$(python3 -c "import sys; print(sys.executable)") # the interpreter, not a version manager's shim (~0.5 s a call on a busy machine; the polls call it often)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/slurm_it_${CASE}.XXXXXX")
PIDS=()
export OPENBLAS_NUM_THREADS=1
. "$ROOT/tests/control/it_lib.sh"

# ---- the cluster: munge, slurmctld on 10.77.0.1 (host "ctl"), node1/node2 at .11/.12
NODES=(node1 node2)
start_slurm() {
  ip link set lo up
  hostname ctl
  ip link add br0 type bridge && ip addr add 10.77.0.1/24 dev br0 && ip link set br0 up || fail "bridge"
  local S=$TMP/slurm
  mkdir -p "$S/ctld" "$S/spool/node1" "$S/spool/node2"
  head -c 1024 /dev/urandom >"$S/munge.key" && chmod 600 "$S/munge.key"
  munged -F -f --socket="$S/munge.sock" --key-file="$S/munge.key" --pid-file="$S/munged.pid" \
    --seed-file="$S/munge.seed" --origin=10.77.0.1 2>"$TMP/munged.log" &
  PIDS+=($!)
  cat >"$S/slurm.conf" <<EOF
ClusterName=atollit
SlurmctldHost=ctl(10.77.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=30
JobRequeue=1
TopologyPlugin=topology/tree
NodeName=node[1-2] NodeAddr=10.77.0.[11-12] CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$S/topology.conf" <<EOF
SwitchName=leaf1 Nodes=node1
SwitchName=leaf2 Nodes=node2
SwitchName=spine Switches=leaf[1-2]
EOF
  export SLURM_CONF=$S/slurm.conf
  for _ in $(seq 50); do [ -S "$S/munge.sock" ] && break; sleep 0.1; done
  slurmctld -D -f "$SLURM_CONF" >>"$TMP/slurmctld.log" 2>&1 &
  PIDS+=($!)
  local i=0
  for n in "${NODES[@]}"; do
    i=$((i + 1))
    unshare --net --uts sleep 100000 &
    local holder=$!
    PIDS+=("$holder")
    wait_until 5 test -e "/proc/$holder/ns/net" || fail "namespace of $n"
    sleep 0.05
    ip link add "veth$i" type veth peer name eth0 netns "$holder" && ip link set "veth$i" master br0 up || fail "veth $n"
    nsenter -t "$holder" -n -u sh -c "hostname $n && ip link set lo up && ip addr add 10.77.0.1$i/24 dev eth0 &&
                                       ip link set eth0 up" || fail "address of $n"
    nsenter -t "$holder" -n -u slurmd -D -f "$SLURM_CONF" >>"$TMP/slurmd-$n.log" 2>&1 &
    PIDS+=($!)
  done
  idle() { [ "$(sinfo -h -o '%T %D' | awk '$1 == "idle" { n += $2 } END { print n + 0 }')" = 2 ]; }
  wait_until 30 idle || fail "Slurm nodes not idle: $(sinfo 2>&1)"
  ok "Slurm up: slurmctld and slurmd on node1, node2 ($(sinfo -h -o '%P %D %T' | tr '\n' ' '))"
}

job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
state_in() { local s; s=$(job_state "$1"); shift; for w in "$@"; do [ "$s" = "$w" ] && return 0; done; return 1; }

# Runs the template; RUN is the allocation's atoll directory, OUT its Slurm output.
model=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1
       --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2 --seed 1234 --log-interval 1
       --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
submit_template() { # ITERS [MORE ATOLL SUBMIT FLAGS]: sets SJOB
  RUN=$TMP/runs/atoll
  OUT=$TMP/runs/slurm.out
  mkdir -p "$TMP/runs" "$TMP/ckpt"
  SJOB=$(cd "$TMP/runs" && ATOLL_BIN=$BIN ATOLL_RUN_DIR=$RUN ATOLL_WORKERD_ARGS="--simulate cpu:2" \
         ATOLL_COORDINATOR_ARGS=${COORD_ARGS:-} \
         sbatch --parsable -N 2 --gpus-per-node=0 --time=10 --output="$OUT" \
         "$ROOT/scripts/atoll.sbatch" "${model[@]}" --train-iters "$1" --save "$TMP/ckpt" --load "$TMP/ckpt" "${@:2}") \
    || fail "sbatch"
}
show_out() {
  echo "--- Slurm output"; cat "$OUT"
  for f in "$RUN"/*.log; do echo "--- $f"; tail -n 15 "$f"; done
}

# A coordinator on the allocation's state, after it: what it stored.
inspect_state() {
  rm -f "$RUN/state/coordinatord.addr"
  "$BIN/coordinatord" --listen 127.0.0.1:0 --http off --state-dir "$RUN/state" >>"$TMP/inspect.log" 2>&1 &
  PIDS+=($!)
  wait_until 10 test -s "$RUN/state/coordinatord.addr" || fail "inspecting coordinatord"
  export ATOLL_COORDINATOR; ATOLL_COORDINATOR=$(cat "$RUN/state/coordinatord.addr")
  export ATOLL_TOKEN_FILE=$RUN/state/token
}

# The same job standalone, uninterrupted: the reference losses.
standalone() { # ITERS
  (cd "$TMP" && "$BIN/atoll-train" --nproc-per-node 4 "${model[@]}" --train-iters "$1" \
      --metrics-file "$TMP/standalone.jsonl" >"$TMP/standalone.log" 2>&1) || fail "standalone run (exit $?)"
}

case_run() {
  start_slurm
  submit_template 12
  wait_until 90 state_in "$SJOB" COMPLETED FAILED CANCELLED TIMEOUT || fail "Slurm job $SJOB: $(job_state "$SJOB"); $(show_out)"
  [ "$(job_state "$SJOB")" = COMPLETED ] && [ "$(job_field "$SJOB" ExitCode)" = 0:0 ] \
    || fail "Slurm job $SJOB ended $(job_state "$SJOB") $(job_field "$SJOB" ExitCode); $(show_out)"
  grep -q "atoll job 1 submitted (.*--num-gpus 4)" "$OUT" || fail "no submit with the 4 offered slots: $(show_out)"
  grep -q "job 1: completed: all 4 ranks finished; step 12" "$OUT" || fail "no completion: $(show_out)"
  grep -qE "^node1 +alive .* leaf1" "$OUT" && grep -qE "^node2 +alive .* leaf2" "$OUT" \
    || fail "nodes with their leaf switches from Slurm: $(show_out)"
  grep -q "fabric from Slurm (scontrol show topology): 3 switches, 2 nodes" "$RUN/coordinatord.log" \
    || fail "fabric: $(grep -i fabric "$RUN/coordinatord.log")"
  ok "sbatch atoll.sbatch: job completed, batch exit 0:0; workers registered as node1/node2 under leaf1/leaf2 (scontrol show topology)"
  inspect_state
  atoll layout 1 --json | json "sorted({r['node'] for r in d['ranks']})" | grep -qx "\['node1', 'node2'\]" \
    || fail "ranks not on both nodes: $(atoll layout 1)"
  standalone 12
  atoll metrics 1 --json >"$TMP/cluster.json" || fail "atoll metrics"
  "$PY" "$ROOT/tests/control/loss_match.py" "$TMP/cluster.json" "$TMP/standalone.jsonl" 1 12 || fail "loss series differ"
  ok "ranks on node1 and node2; the stored losses equal the standalone run's"
  show_out
}

case_requeue() {
  start_slurm
  local iters=300
  submit_template $iters
  export ATOLL_COORDINATOR=10.77.0.11:7420 ATOLL_TOKEN_FILE=$TMP/runs/atoll/state/token
  step_at_least() { [ "$(atoll status 1 --json 2>/dev/null | json "d['step']")" -ge "$1" ]; }
  wait_until 60 step_at_least 20 || fail "job 1 not training: $(show_out)"
  scontrol requeue "$SJOB" || fail "scontrol requeue"
  local t0; t0=$(now)
  wait_until 40 state_in "$SJOB" PENDING || fail "not requeued: $(job_state "$SJOB"); $(show_out)"
  local saved; saved=$(cat "$TMP/ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)
  [ -n "$saved" ] && [ "$saved" -ge 20 ] && [ "$saved" -lt $iters ] && [ -s "$TMP/ckpt/$(printf 'iter_%07d' "$saved")/manifest.json" ] \
    || fail "no committed checkpoint after the requeue ($saved): $(ls -R "$TMP/ckpt"); $(show_out)"
  ok "scontrol requeue at step >= 20: checkpoint of step $saved committed, allocation ended in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
  grep -q "job 1: cancelled: stopped on SIGTERM after step $saved with a checkpoint committed" "$OUT" \
    || fail "the first run did not record the stop: $(show_out)"
  # Slurm holds a requeued job ~2 minutes (BeginTime); start it now.
  scontrol update JobId="$SJOB" StartTime=now || fail "scontrol update StartTime"
  wait_until 120 state_in "$SJOB" COMPLETED FAILED CANCELLED TIMEOUT || fail "requeued job: $(job_state "$SJOB"); $(show_out)"
  [ "$(job_state "$SJOB")" = COMPLETED ] && [ "$(job_field "$SJOB" Restarts)" = 1 ] \
    || fail "requeued run ended $(job_state "$SJOB"), restarts $(job_field "$SJOB" Restarts); $(show_out)"
  grep -q "loaded checkpoint $TMP/ckpt/$(printf 'iter_%07d' "$saved")" "$RUN/work/job-2/epoch-0/rank-0.log" \
    || fail "job 2 did not load the checkpoint: $(head -5 "$RUN/work/job-2/epoch-0/rank-0.log")"
  grep -q "job 2: completed: all 4 ranks finished; step $iters" "$OUT" || fail "job 2: $(show_out)"
  ok "the requeued allocation (Restarts=1) resumed from step $saved to $iters ($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after the requeue)"
  unset ATOLL_COORDINATOR
  inspect_state
  atoll status 1 --json | json "d['state'] + ' ' + str(d['step'])" | grep -qx "cancelled $saved" || fail "job 1: $(atoll status 1)"
  standalone $iters
  atoll metrics 2 --json >"$TMP/resumed.json" || fail "atoll metrics 2"
  "$PY" "$ROOT/tests/control/loss_match.py" "$TMP/resumed.json" "$TMP/standalone.jsonl" $((saved + 1)) $iters || fail "resumed losses differ"
  ok "after the requeue the losses continue as the uninterrupted run's"
}

case_drain() {
  start_slurm
  model[${#model[@]} - 1]=1 # tp2 x pp1: DP 2 over the two nodes, DP 1 fits on one
  local iters=1200 # ~100 steps/s on 2 idle cores: the job outlives the drain, the restart and the resume
  COORD_ARGS="--slurm-poll 1" submit_template $iters --save-interval 20
  export ATOLL_COORDINATOR=10.77.0.11:7420 ATOLL_TOKEN_FILE=$TMP/runs/atoll/state/token
  status() { atoll status 1 --json 2>/dev/null | json "$1"; }
  step_at_least() { [ "$(status "d['step']")" -ge "$1" ] 2>/dev/null; }
  world_is() { [ "$(status "str(d['world']) + ' ' + d['state']")" = "$1 running" ]; }
  nodes_of() { atoll layout 1 --json | json "','.join(sorted({r['node'] for r in d['ranks']}))"; }
  wait_until 60 step_at_least 5 || fail "job 1 not training: $(show_out)"
  [ "$(nodes_of)" = node1,node2 ] && world_is 4 || fail "not on both nodes at DP 2: $(atoll status 1)"
  local t0; t0=$(now)
  scontrol update nodename=node2 state=drain reason=atoll-test || fail "scontrol drain"
  # grep reads every event (-q would quit early, and atoll dying of SIGPIPE fail the pipeline)
  lost() { atoll events --limit 100000 | grep -E "node\.slurm_lost +node2 +Slurm state [A-Z]+\+DRAIN \(reason: atoll-test\): treated as lost"; }
  wait_until 10 lost || fail "no node.slurm_lost event: $(atoll events --limit 100000 | tail -5); $(grep -i slurm "$RUN/coordinatord.log")"
  atoll events --limit 100000 | grep -E "job\.node_lost +job 1 +node node2 lost: Slurm state [A-Z]+\+DRAIN \(reason: atoll-test\)" >/dev/null \
    || fail "the job's fault does not name Slurm: $(atoll events --limit 100000 | tail -5)"
  ok "scontrol drain node2: $(lost | sed 's/.*node2 *//') ($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s)"
  atoll nodes --json | json "[n['state'] + ' ' + n['slurm_state'] for n in d['nodes'] if n['name'] == 'node2'][0]" \
    | grep -qE "^drained [A-Z]+\+DRAIN \(reason: atoll-test\)$" || fail "atoll nodes: $(atoll node node2)"
  local at; at=$(status "d['step']")
  wait_until 40 world_is 2 || fail "not restarted at DP 1: $(atoll status 1); $(show_out)"
  [ "$(nodes_of)" = node1 ] || fail "restarted on $(nodes_of), expected node1 alone"
  wait_until 30 step_at_least $((at + 5)) || fail "not training after the restart: $(atoll status 1)"
  ok "job 1 restarted on node1 alone (DP 2 -> 1, epoch $(status "d['epoch']")) and trains on: step $(status "d['step']") \
($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after the drain)"
  scontrol update nodename=node2 state=resume || fail "scontrol resume"
  back() { atoll events --limit 100000 | grep -E "node\.slurm_returned +node2 +Slurm state (ALLOCATED|MIXED|IDLE)[A-Z_+]*: open for new work again" >/dev/null; }
  wait_until 10 back || fail "no node.slurm_returned event: $(atoll events --limit 100000 | tail -5); $(grep -i slurm "$RUN/coordinatord.log"); $(scontrol -o show node node2)"
  atoll nodes --json | json "[n['state'] + '/' + n['slurm_state'] for n in d['nodes'] if n['name'] == 'node2'][0]" \
    | grep -qx "alive/" || fail "node2 not alive again: $(atoll node node2)"
  t0=$(now)
  wait_until 60 world_is 4 || fail "no scale-up back onto node2: $(atoll status 1); $(atoll events --limit 100000 | tail -5)"
  [ "$(nodes_of)" = node1,node2 ] || fail "grown back on $(nodes_of)"
  atoll events --limit 100000 | grep -E "job\.restart +job 1 +scale-up" >/dev/null || fail "no scale-up restart: $(atoll events --limit 100000 | tail -8)"
  ok "scontrol resume node2: placeable again; the job grew back to DP 2 on both nodes at its next checkpoint \
($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s)"
  wait_until 120 state_in "$SJOB" COMPLETED FAILED CANCELLED TIMEOUT || fail "Slurm job $SJOB: $(job_state "$SJOB"); $(show_out)"
  [ "$(job_state "$SJOB")" = COMPLETED ] && grep -q "job 1: completed: all 4 ranks finished; step $iters" "$OUT" \
    || fail "Slurm job ended $(job_state "$SJOB"): $(show_out)"
  unset ATOLL_COORDINATOR
  inspect_state
  atoll status 1 --json | json "'%s epoch %d restarts %d' % (d['state'], d['epoch'], d['restarts'])" \
    | grep -qx "completed epoch 2 restarts 2" || fail "job 1 after the drain: $(atoll status 1)"
  ok "job 1 completed at step $iters in epoch 2 (a restart after the drain, a scale-up after the resume)"
}

"case_$CASE"
echo "PASS ($CASE)"
