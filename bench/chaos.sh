#!/usr/bin/env bash
# Faults against a real job on a local cluster of simulated CPU nodes, many of
# each kind, with the coordinator's default-like timing (1 s heartbeats, node
# timeout 3 s): tests/control/chaos.py in its long form, then two runs with one fault
# per minute for their effective training time (a save every 5 steps; saves at Young's
# interval for that MTBF), then the checkpoint stall bench.
# Writes bench/results/chaos.md (and leaves the raw figures beside it as JSON).
#   bench/chaos.sh [BUILD_DIR]     ROUNDS=20 (each: one fault of every kind)  GOODPUT_FAULTS=10
# SKIP_FAULTS=1, SKIP_GOODPUT=1 (the every-5-steps run), SKIP_YOUNG=1 (the Young's-interval run), SKIP_STALL=1
# keep those parts' earlier results.
# DRIFT_HORIZON=10: losses are held to 1e-5 of the no-failure run for this many steps past the first
# DP change; beyond, fp32 rounding compounds (bench/dp_drift.sh measures how fast) and is reported.
# Every check of the chaos test applies to the long run too (losses against a
# no-failure run, checkpoints intact, no orphan rank, events naming each fault).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "no $BUILD/bin: build first" >&2; exit 2; }
ROUNDS=${ROUNDS:-20}
GOODPUT_FAULTS=${GOODPUT_FAULTS:-10}
FAULT_EVERY=${FAULT_EVERY:-60}
SEED=${SEED:-11}
OUT=bench/results
mkdir -p "$OUT" bench/tmp # bench/tmp: the runs' whole output, for a failure's logs
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date -u '+%Y-%m-%d %H:%M UTC')
common=(--heartbeat 1 --node-timeout 3 --hang-floor 0.3 --hang-factor 2 --save-keep 10)
if [ "${SKIP_FAULTS:-0}" != 1 ]; then # 1: keep the faults run's results/chaos_faults.json
echo "== $ROUNDS rounds of faults"
python3 tests/control/chaos.py "$BIN" --seed "$SEED" --rounds "$ROUNDS" --steps-between 12 --hidden 192 "${common[@]}" \
    --drift-horizon "${DRIFT_HORIZON:-10}" \
    --verify-sample 40 --results "$OUT/chaos_faults.json" 2>&1 | tee bench/tmp/chaos_faults.log | grep -vE '^ iteration|^\[' | tail -n 40
fi
goodput() { # $1: results name, then extra flags
  local name=$1; shift
  python3 tests/control/chaos.py "$BIN" --seed "$((SEED + 1))" --rounds $(((GOODPUT_FAULTS + 4) / 5)) --fault-every "$FAULT_EVERY" \
      --hidden 384 "${common[@]}" --verify-sample 20 "$@" --results "$OUT/$name.json" 2>&1 | tee "bench/tmp/$name.log" | tail -n 20
}
if [ "${SKIP_GOODPUT:-0}" != 1 ]; then # 1: keep results/chaos_goodput.json
  echo "== one fault every $FAULT_EVERY s, a save every 5 steps"
  goodput chaos_goodput
fi
if [ "${SKIP_YOUNG:-0}" != 1 ]; then # 1: keep results/chaos_goodput_young.json
  echo "== one fault every $FAULT_EVERY s, saves at Young's interval (--save-mtbf $FAULT_EVERY)"
  goodput chaos_goodput_young --save-mtbf "$FAULT_EVERY"
fi
if [ "${SKIP_STALL:-0}" != 1 ]; then
  echo "== checkpoint stall"
  bench/ckpt_stall.sh "$BUILD"
fi
python3 - "$OUT/chaos_faults.json" "$OUT/chaos_goodput.json" "$OUT/ckpt_stall.md" "$T0" "$LOAD" "$ROUNDS" "$BUILD" \
    "$OUT/chaos_goodput_young.json" >"$OUT/chaos.md" <<'PYEOF'
import json, os, statistics, subprocess, sys
faults, good, stall_md, t0, load, rounds, build, young = sys.argv[1:9]
F, G, Y = json.load(open(faults)), json.load(open(good)), json.load(open(young))
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
def row(name, v, unit="s", d=2):
    if not v:
        return "| %s | 0 | | | | |" % name
    f = "%%.%df" % d
    return "| %s | %d | %s | %s | %s | %s |" % (name, len(v), f % statistics.median(v), f % q(v, 0.9), f % max(v),
                                               f % min(v))
kinds = [("kill-workerd", "node lost (kill -9 of a workerd)"), ("kill-rank", "rank exit (kill -9 of a rank)"),
         ("stop-rank", "hang (SIGSTOP of a rank)"), ("node-back", "a killed node comes back (scale-up)"),
         ("kill-coordinator", "kill -9 of the coordinator"), ("stop-workerd", "node lost (SIGSTOP of a workerd: a frozen node)"),
         ("cont-workerd", "the frozen node continues (its old ranks gone, scale-up)")]
print("# Chaos: detection, recovery and goodput under injected faults\n")
print("- date: %s" % t0)
print("- machine: `%s`" % " ".join(os.uname()[i] for i in (0, 2, 3, 4)))
print("- cpu: %d cores (shared with other work; load average before: %s)" % (os.cpu_count(), load))
print("- command: `bench/chaos.sh %s` (ROUNDS=%s)" % (build, rounds))
print("- cluster: coordinatord (heartbeat %g s, node timeout %g s, hang bound max(%g s, %g x step time)) and two"
      % (F["heartbeat_s"], F["node_timeout_s"], F["hang_floor_s"], F["hang_factor"]))
print("  `workerd --simulate cpu:2` on loopback; job: GPT, 4 layers, tp1 x pp2 x dp2 on 4 CPU ranks,")
print("  global batch 16, --async-save every 5 steps; faults in a seeded random order (tests/control/chaos.py)")
print()
print("## Faults (%d rounds, hidden %d, %d steps, step time median %.0f ms)\n" % (
    rounds and int(rounds), F["hidden"], F["iters"],
    statistics.median([x["step_ms"] for x in F["faults"] if x.get("step_ms")])))
print("Detection: from the fault (when the bench injected it) to the coordinator's declaration.")
print("Running again: from the fault to the first step of the new placement (for the coordinator:")
print("to the job's next reported steps, with no restart).\n")
print("| fault | n | median | p90 | max | min |")
print("|---|---:|---:|---:|---:|---:|")
for k, name in kinds:
    rs = [x for x in F["faults"] if x["kind"] == k]
    if k != "kill-coordinator":
        print(row(name + ": detection", [x["detected_s"] for x in rs]))
        print(row(name + ": running again", [x["running_s"] for x in rs]))
        print(row(name + ": steps recomputed", [x["steps_recomputed"] for x in rs], d=0))
    else:
        print(row(name + ": steps reported again (no restart)", [x["t_running"] for x in rs]))
hang = [x for x in F["faults"] + G["faults"] + Y["faults"] if x["kind"] == "stop-rank" and x.get("step_ms")]
if hang:
    print()
    print("Hang detection in step times (detection / the job's step time at the fault), both runs: median %.1f, "
          "p90 %.1f, max %.1f (n = %d)." % (statistics.median([x["detected_s"] * 1e3 / x["step_ms"] for x in hang]),
          q([x["detected_s"] * 1e3 / x["step_ms"] for x in hang], 0.9),
          max(x["detected_s"] * 1e3 / x["step_ms"] for x in hang), len(hang)))
g = F["goodput"]
print()
L = F["losses"]
print("Every check of the chaos test held over the %d faults: the job completed; losses matched the no-failure" %
      len(F["faults"]))
print("run (bit for bit up to step %d, where DP first shrank; within %.2g relative, limit 1e-5, up to step %d;" % (
    L["exact_until"], L["worst_held"], L["held_until"]))
print("over all %d steps, with DP shrunk and grown %d times, fp32 rounding compounds to %.2g, reported, not judged);" % (
    F["iters"], sum(1 for h in F["history"] if h["cause"] in ("node-lost", "scale-up")), L["worst_all"]))
print("every committed checkpoint intact; no orphan rank; every fault named in the events. Goodput of this run")
print("(a fault every %d steps): %.1f%%." % (12, 100 * g["ratio"]))
print()
print("## One fault every %.0f s (hidden %d, %d faults a run)\n" % (G["fault_every"], G["hidden"], len(G["faults"])))
print("| saves | wall s | effective training time | productive s | start-up s | checkpoint stalls s | detection s | restarts s | recomputed s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for R, what in ((G, "every 5 steps"), (Y, "Young's interval, --save-mtbf %g" % Y.get("save_mtbf", 0))):
    g, l = R["goodput"], R["goodput"]["lost_s"]
    print("| %s | %.0f | %.1f%% | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |" % (what, g["wall_s"], 100 * g["ratio"],
          g["productive_s"], l["startup"], l["checkpoint"], l["detection"], l["restart"], l["recompute"]))
print()
print("| fault (both runs) | n | detection median s | running again median s |")
print("|---|---:|---:|---:|")
for k, name in kinds:
    rs = [x for x in G["faults"] + Y["faults"] if x["kind"] == k]
    if rs and k != "kill-coordinator":
        print("| %s | %d | %.2f | %.2f |" % (name, len(rs), statistics.median(x["detected_s"] for x in rs),
                                            statistics.median(x["running_s"] for x in rs)))
print()
print("## Training stall per checkpoint: asynchronous vs synchronous\n")
if os.path.exists(stall_md):
    body = open(stall_md).read().split("\n", 2)[2]
    print(body.strip())
else:
    print("(bench/ckpt_stall.sh has not been run)")
PYEOF
echo "wrote $OUT/chaos.md"
