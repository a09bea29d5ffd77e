#!/usr/bin/env bash
# coordinatord --fabric and the topology-aware placement, end to end on loopback:
# a bad topology.conf stops the daemon with FILE:LINE; with two leaves, a 3-node
# job goes under the leaf that has 3 free nodes (name order would span both), and
# `atoll layout` shows it. Usage: plan_coord_it.sh BINDIR
set -uo pipefail
BIN=$1
PY=$(python3 -c "import sys; print(sys.executable)") # the interpreter, not a version manager's shim (~0.5 s a call on a busy machine; the polls call it often)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/plan_coord_it.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}
wait_until() { # SECONDS COMMAND...
  local i=0 limit=$(($1 * 10)); shift
  while ! "$@" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt $limit ] && return 1
    sleep 0.1
  done
}
json() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
atoll() { "$BIN/atoll" "$@"; }

printf 'SwitchName=leafA Nodes=w[0-3]\nSwitchName=leafB Nodes=w[4-7] Bogus=1\n' >"$TMP/bad.conf"
"$BIN/coordinatord" --listen 127.0.0.1:0 --http off --state-dir "$TMP/bad" --fabric "$TMP/bad.conf" \
    >"$TMP/bad.log" 2>&1 && fail "coordinatord started with a bad fabric"
grep -q "bad.conf:2: unknown key Bogus" "$TMP/bad.log" || fail "bad fabric message: $(cat "$TMP/bad.log")"
echo "ok: bad --fabric refused with file and line"

printf 'SwitchName=leafA Nodes=w[0-3]\nSwitchName=leafB Nodes=w[4-7]\nSwitchName=spine Switches=leaf[A-B]\n' \
    >"$TMP/fabric.conf"
# leaf[A-B] is not a numeric range: Slurm would refuse it too
"$BIN/coordinatord" --listen 127.0.0.1:0 --http off --state-dir "$TMP/bad2" --fabric "$TMP/fabric.conf" \
    >"$TMP/bad2.log" 2>&1 && fail "non-numeric range accepted"
printf 'SwitchName=leafA Nodes=w[0-3]\nSwitchName=leafB Nodes=w[4-7]\nSwitchName=spine Switches=leafA,leafB\n' \
    >"$TMP/fabric.conf"
# nothing here waits for a node to die: a long --node-timeout keeps 40 CPU ranks on a small
# machine from starving a workerd's heartbeats into a node loss that moves the job
"$BIN/coordinatord" --listen 127.0.0.1:0 --http 127.0.0.1:0 --state-dir "$TMP/state" --fabric "$TMP/fabric.conf" \
    --heartbeat-interval 0.2 --node-timeout 30 >"$TMP/coordinatord.log" 2>&1 &
PIDS+=("$!")
wait_until 10 test -s "$TMP/state/coordinatord.addr" || fail "coordinatord did not start"
export ATOLL_COORDINATOR; ATOLL_COORDINATOR=$(cat "$TMP/state/coordinatord.addr")
export ATOLL_TOKEN_FILE=$TMP/state/token
# leafA: w0, w1 free; leafB: w4, w5, w6 free
for w in w0 w1 w4 w5 w6; do
  "$BIN/workerd" --name $w --work-dir "$TMP/work" --simulate dgx-h100 >>"$TMP/workerd-$w.log" 2>&1 &
  PIDS+=("$!")
done
alive() { [ "$(atoll nodes --json | json "sum(n['state']=='alive' for n in d['nodes'])")" = 5 ]; }
wait_until 10 alive || fail "5 nodes not alive"
[ "$(atoll nodes --json | json "[n['leaf'] for n in d['nodes'] if n['name']=='w4'][0]")" = leafB ] \
  || fail "atoll nodes does not show the --fabric leaf"

job=$(atoll submit --num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --global-batch-size 24 \
      --num-gpus 24 --tensor-model-parallel-size 8 --json | json "d['job']") || fail "submit"
wait_until 10 sh -c "'$BIN/atoll' layout $job --json" || fail "job $job not placed"
nodes=$(atoll layout "$job" --json | json "' '.join(sorted(set(r['node'] for r in d['ranks'])))")
[ "$nodes" = "w4 w5 w6" ] || fail "job placed on '$nodes', expected the one leaf with room: w4 w5 w6"
echo "ok: 3-node job under one leaf ($nodes), where name order would span two"
atoll layout "$job" --json | json "all(r['gpu']==r['rank']%8 for r in d['ranks'])" | grep -q True \
  || fail "TP groups are not one node's GPUs in order"
out=$(atoll layout "$job") || fail "atoll layout text"
[[ "$out" == *"tp 8 x pp 1 x dp 3"* && "$out" == *"tp"*"3 groups"* && "$out" == *"dp"*"8 groups"* ]] \
  || fail "layout text: $out"
atoll layout 999 >/dev/null 2>"$TMP/err"; [ $? -eq 1 ] || fail "unknown job should be refused"
atoll layout nope >/dev/null 2>"$TMP/err"; [ $? -eq 2 ] || fail "bad job id is a usage error"
echo "ok: atoll layout (text, --json, refusals)"

# The 24 ranks above load the machine enough that a workerd's heartbeat can be late for half a second:
# the node is suspect meanwhile and the planner leaves it out. Plan when all five are alive, again if
# one turned suspect in between.
for attempt in 1 2 3 4 5; do
  wait_until 10 alive || fail "5 nodes not alive before planning"
  out=$(atoll plan --cluster --num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 32 \
        --global-batch-size 40 --json) || fail "plan --cluster"
  planned=$(json "len(d['candidates']) > 0 and all(c['tp']*c['pp']*c['dp']==40 for c in d['candidates'])" <<<"$out")
  [ "$planned" = True ] && break
done
[ "$planned" = True ] || fail "plan --cluster plans for every alive GPU: $out"
echo "ok: atoll plan --cluster"
auto=$(atoll submit --num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --global-batch-size 16 \
       --num-gpus 16 --tensor-model-parallel-size 2 --auto-layout --json 2>"$TMP/auto.err" | json "d['job']") \
  || fail "submit --auto-layout: $(cat "$TMP/auto.err")"
grep -q "auto-layout: tp 2, " "$TMP/auto.err" || fail "auto-layout choice not shown or tp not kept: $(cat "$TMP/auto.err")"
[ "$(atoll status "$auto" --json | json "(d['layout']['tp'], d['layout']['tp']*d['layout']['pp']*d['layout']['dp'])")" = "(2, 16)" ] \
  || fail "auto-layout job layout: $(atoll status "$auto" --json)"
echo "ok: submit --auto-layout keeps the fixed tp and fills the rest"
echo "plan_coord_it: all checks passed"
