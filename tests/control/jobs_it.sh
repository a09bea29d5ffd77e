#!/usr/bin/env bash
# Integration tests of jobs end to end: a real coordinatord and two workerd
# simulating CPU nodes (cpu:4) on loopback; jobs submitted with the atoll CLI run
# real atoll-train ranks. Driven only through the CLI and HTTP (plus /proc to see
# which processes are alive, and raw protocol for the intruder case).
# Usage: jobs_it.sh CASE BINDIR
#   run      a tp2 pp2 dp2 job goes pending -> placing -> starting -> running -> completed; its
#            stored loss series equals, step for step, the same layout run standalone with
#            atoll-train --nproc-per-node; status/metrics/logs show it
#   cancel   atoll cancel leaves no rank process alive
#   kill9    kill -9 of a rank fails the job, naming that rank
#   workerd  kill -9 of a workerd leaves none of its ranks alive
#   restart  kill -9 of the coordinator mid-job: after a restart no reported step is lost
#            and the job is still running (workerd kept the reports until they were stored)
#   secret   without the job secret nothing can claim a rank or touch the job's keys
#   top      `atoll top` in a real terminal (tmux, 80x24) shows the job's row; q quits
#   http     /metrics parsed by python3-prometheus-client with the per-job series typed; /api
#            pagination and errors; --http-token bearer
#   dashboard  the page in a real headless Chromium (DevTools protocol): no request leaves
#            loopback, nodes and a running job's plots with points, live updates; screenshot kept
# Every process started here is killed on exit, pass or fail.
set -uo pipefail
CASE=$1
BIN=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$(command -v python3)
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

# A small GPT: 8 ranks on 2 cores finish a step in tens of milliseconds.
model=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1
       --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2 --seed 1234 --log-interval 1)
layout=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)

case_run() {
  start_cluster
  local id; id=$(atoll submit "${model[@]}" "${layout[@]}" --num-gpus 8 --train-iters 12 --name e2e --json | json "d['job']") \
    || fail "submit"
  wait_until 90 state_is "$id" completed || fail "job not completed: $(atoll status "$id")"
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
  "$PY" - "$TMP/cluster.json" "$TMP/standalone.jsonl" <<'PYEOF' || fail "loss series differ"
import json, sys
cl = {s["iteration"]: s["loss"] for s in json.load(open(sys.argv[1]))["steps"]}
sa = {}
for line in open(sys.argv[2]):
    d = json.loads(line)
    if "loss" in d: sa[d["iteration"]] = d["loss"]
assert sorted(cl) == list(range(1, 13)), "cluster steps %s" % sorted(cl)
assert sorted(sa) == sorted(cl), "standalone steps %s" % sorted(sa)
worst = max(abs(cl[i] - sa[i]) / abs(sa[i]) for i in sa)
assert worst <= 1e-6, "worst relative difference %.3g" % worst
print("12 steps, worst relative loss difference %.2g" % worst)
PYEOF
  ok "the coordinator's loss series equals the standalone run's, step for step"
  atoll metrics "$id" | grep -qE "^12 " || fail "metrics text"
  atoll logs "$id" --rank 0 | grep -q "iteration       12/      12" || fail "rank 0 log: $(atoll logs "$id")"
  atoll logs "$id" --rank 9 2>"$TMP/err"; [ $? -eq 1 ] && grep -q "no rank 9" "$TMP/err" || fail "bad rank: $(cat "$TMP/err")"
  ok "atoll metrics and atoll logs"
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

extra=() # more flags for the jobs a case submits
long_job() { # NAME [ITERS]: a job that runs until stopped
  atoll submit "${model[@]}" "${layout[@]}" "${extra[@]}" --num-gpus 8 --train-iters "${2:-100000}" --name "$1" --json |
    json "d['job']"
}
running_job() { # NAME STEPS: submits a long job, waits until it has reported STEPS steps; sets ID
  ID=$(long_job "$1") || fail "submit"
  wait_until 60 step_at_least "$ID" "$2" || fail "job not running: $(atoll status "$ID")"
}
cancel_job() { # ID: cancels it and checks no rank is left
  atoll cancel "$1" >/dev/null
  wait_until 10 no_ranks_of "$1" || fail "ranks alive after cancel: $(rank_pids "$1")"
}

case_cancel() {
  start_cluster
  running_job victim 2
  local id=$ID
  local pids; pids=$(rank_pids "$id")
  [ "$(echo "$pids" | wc -w)" = 8 ] || fail "expected 8 rank processes, found: $pids"
  atoll cancel "$id" | grep -q cancelled || fail "cancel"
  wait_until 10 no_ranks_of "$id" || fail "ranks alive after cancel: $(rank_pids "$id")"
  for p in $pids; do [ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ] && fail "rank pid $p alive"; done
  state_is "$id" cancelled || fail "state: $(atoll status "$id")"
  ok "cancel: the 8 rank processes ($(echo $pids)) are gone"
  stop_all
}

case_kill9() {
  start_cluster
  running_job victim 2
  local id=$ID
  local victim; victim=$(rank_pids "$id" 3)
  [ -n "$victim" ] || fail "no rank 3"
  kill -9 "$victim"
  wait_until 15 state_is "$id" failed || fail "job did not fail: $(atoll status "$id")"
  local msg; msg=$(atoll status "$id" --json | json "d['message']")
  echo "$msg" | grep -q "rank 3 (pid $victim) was killed by signal 9" || fail "failure names: $msg"
  wait_until 10 no_ranks_of "$id" || fail "ranks alive after the failure: $(rank_pids "$id")"
  ok "kill -9 of rank 3 failed the job: $msg"
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
  wait_until 10 no_ranks_of "$id" || fail "the other node's ranks did not stop"
  stop_all
}

case_restart() {
  start_cluster
  # one rank per node: a pipeline of two stages
  local id; id=$(atoll submit "${model[@]}" --pipeline-model-parallel-size 2 --num-gpus 2 --train-iters 1000000 \
                 --name survivor --json | json "d['job']") || fail "submit"
  wait_until 60 step_at_least "$id" 3 || fail "job not running: $(atoll status "$id")"
  local at; at=$(atoll status "$id" --json | json "d['step']")
  kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null
  ok "coordinator killed with -9 at step $at"
  sleep 1.5 # the ranks train on; their workerds keep the reports
  start_coord "$PORT"
  state_is "$id" running || fail "state after restart: $(atoll status "$id")"
  ok "job $id still running after the restart"
  wait_until 60 step_at_least "$id" $((at + 100)) || fail "no progress after the restart: $(atoll status "$id")"
  # Every step from the first to the newest is stored: none reported while the coordinator
  # was down (or in flight when it died) was lost.
  local gaps; gaps=$(atoll metrics "$id" --json | json "(lambda it: sorted(set(range(1, max(it) + 1)) - set(it)) or max(it))([s['iteration'] for s in d['steps']])")
  case $gaps in \[*) fail "steps lost: $gaps" ;; esac
  [ "$gaps" -gt $((at + 99)) ] || fail "only $gaps steps"
  ok "steps 1..$gaps all stored, none lost across the coordinator's kill -9 at step $at"
  cancel_job "$id"
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
  screen | grep -q "STAGE  MEASURED" || fail "no per-stage view"
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
  echo "s3cret-bearer-token-0123456789" >"$TMP/http-token"
  start_cluster --http-token "$TMP/http-token"
  # a dataset with a validation split: the job evaluates every 2 steps
  for i in $(seq 10); do for _ in $(seq 20); do printf 'document %d, line of text; ' "$i"; done >"$TMP/doc$i.txt"; done
  atoll data prepare --input "$TMP"/doc*.txt --output-prefix "$TMP/evaldata" >/dev/null || fail "data prepare"
  extra=(--data-path "$TMP/evaldata" --split 7,3,0 --eval-interval 2 --eval-iters 1)
  running_job scraped 3
  extra=()
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
  running_job watched 3
  local id=$ID
  local shot=${ATOLL_ARTIFACTS:-$TMP}/dashboard.png
  "$PY" "$HERE/dashboard_cdp.py" "http://$(cat "$TMP/state/http.addr")/" "$shot" 2 || fail "dashboard"
  ok "the dashboard in headless Chromium; screenshot $shot"
  cancel_job "$id"
  stop_all
}

"case_$CASE"
echo "PASS ($CASE)"
