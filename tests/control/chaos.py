#!/usr/bin/env python3
"""Chaos run: real daemons on loopback, a real training job with checkpoints, and
faults injected in a seeded random order: kill -9 of a workerd, kill -9 of a rank,
SIGSTOP of a rank, kill -9 of the coordinator, a killed node coming back, and
SIGSTOP of a workerd (a frozen node: its heartbeats stop, its ranks are out of
reach) with its SIGCONT later (the node returns with the ranks of an epoch that
was replaced: they must be gone, and the job scales up onto the node again).

After each fault the job must run again (or, for the coordinator, keep running
with no restart). At the end the job must complete, and:
  - its losses match a no-failure run of the same job step for step: bit for bit
    while the data-parallel size never changed, within 1e-5 relative for
    --drift-horizon steps after (fp32 rounding of the resized sums then compounds:
    past 1e-5 15 to 40 steps after a resize, bench/results/dp_drift.md), or for
    every step with --deterministic-dp (gradients summed in fp64: no bit changes);
  - every checkpoint it committed is on disk, intact (manifest sizes and atoll64
    checksums, tests/ckpt_sum.py), and so is every other step that has a manifest;
  - no rank process of the job is left, nor one of an old epoch beside a new one;
  - the events name every fault's node, rank and cause.

    chaos.py BINDIR [--seed N] [--rounds R] [--heartbeat S] [--fault-every S] [--results FILE.json]

Each round injects every kind of fault once (in the seed's order; a node comes
back only after it was killed, a stopped workerd continues only after it was
stopped, and one node is out at a time). --results writes per-fault figures (detection
time, time to running again, steps recomputed) and the job's goodput for
bench/chaos.sh. Exit status 0 when every check passed."""
import argparse, json, os, random, shutil, signal, struct, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ckpt_sum  # noqa: E402  (tests/ckpt_sum.py: the manifest checksum, its own twin of the C code)

KINDS = ["kill-rank", "stop-rank", "kill-workerd", "kill-coordinator", "stop-workerd"]
# a node taken out, and the fault that brings it back
PAIRS = (("kill-workerd", "node-back"), ("stop-workerd", "cont-workerd"))


def log(*a):
    print(*a, flush=True)


class Fail(Exception):
    pass


class Cluster:
    def __init__(self, bindir, tmp, hb, timeout, hang_floor, hang_factor):
        self.bin, self.tmp, self.hb = bindir, tmp, hb
        self.state = os.path.join(tmp, "state")
        self.work = os.path.join(tmp, "work")
        self.flags = ["--heartbeat-interval", str(hb), "--node-timeout", str(timeout),
                      "--hang-floor", str(hang_floor), "--hang-factor", str(hang_factor), "--max-restarts", "1000"]
        self.coord = None
        self.ref = None  # the no-failure reference run (atoll-train --nproc-per-node)
        self.port = 0
        self.workers = {}
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1")

    def start_coord(self):
        addr = os.path.join(self.state, "coordinatord.addr")
        if os.path.exists(addr):
            os.unlink(addr)
        logf = open(os.path.join(self.tmp, "coordinatord.log"), "a")
        self.coord = subprocess.Popen([os.path.join(self.bin, "coordinatord"), "--listen", "127.0.0.1:%d" % self.port,
                                       "--http", "127.0.0.1:0", "--state-dir", self.state] + self.flags,
                                      stdout=logf, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + 15
        while not (os.path.exists(addr) and open(addr).read().strip()):
            if time.time() > deadline or self.coord.poll() is not None:
                raise Fail("coordinatord did not start")
            time.sleep(0.05)
        a = open(addr).read().strip()
        self.port = int(a.rsplit(":", 1)[1])
        self.env["ATOLL_COORDINATOR"] = a
        self.env["ATOLL_TOKEN_FILE"] = os.path.join(self.state, "token")

    def start_worker(self, name, slots):
        logf = open(os.path.join(self.tmp, "workerd-%s.log" % name), "a")
        self.workers[name] = subprocess.Popen([os.path.join(self.bin, "workerd"), "--name", name, "--simulate",
                                               "cpu:%d" % slots, "--work-dir", self.work],
                                              stdout=logf, stderr=subprocess.STDOUT, env=self.env)

    def atoll(self, *args):
        r = subprocess.run([os.path.join(self.bin, "atoll")] + list(args) + ["--json"], capture_output=True,
                           text=True, env=self.env, timeout=30)
        if r.returncode:
            raise Fail("atoll %s: %s" % (" ".join(args), r.stderr.strip()))
        return json.loads(r.stdout)

    def status(self, job):
        return self.atoll("status", str(job))

    def events(self, after=0):
        return self.atoll("events", "--after", str(after), "--limit", "10000")["events"]

    def rank_pids(self, job, rank=None, epoch=None, skip_node=None):
        """pids of the job's ranks under this cluster's workerds (but skip_node's): {pid: (rank, epoch)}"""
        sups = {str(p.pid) for w, p in self.workers.items() if p.poll() is None and w != skip_node}
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                env = open("/proc/%s/environ" % d, "rb").read().split(b"\0")
                stat = open("/proc/%s/stat" % d).read()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            e = dict(x.split(b"=", 1) for x in env if b"=" in x)
            if e.get(b"ATOLL_JOB_ID") != str(job).encode():
                continue
            if e.get(b"ATOLL_SUPERVISOR_PID", b"").decode() not in sups:
                continue
            r, ep = int(e[b"RANK"]), int(e[b"ATOLL_JOB_EPOCH"])
            if (rank is None or r == rank) and (epoch is None or ep == epoch):
                out[int(d)] = (r, ep)
        return out

    def stop(self):
        if self.ref and self.ref.poll() is None:
            self.ref.kill()  # the reference run's ranks die with their launcher
            self.ref.wait()
        if self.coord and self.coord.poll() is not None:
            log("coordinatord had exited by itself: status %d" % self.coord.returncode)
        for p in list(self.workers.values()) + ([self.coord] if self.coord else []):
            if p.poll() is None:
                p.kill()
            p.wait()


def wait_for(what, fn, limit):
    deadline = time.time() + limit
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            raise Fail("timed out after %.0f s waiting for %s" % (limit, what))
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bindir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--heartbeat", type=float, default=0.2)
    ap.add_argument("--node-timeout", type=float, default=1.5)
    ap.add_argument("--hang-floor", type=float, default=1.5)
    ap.add_argument("--hang-factor", type=float, default=3)
    ap.add_argument("--steps-between", type=int, default=15, help="steps the job makes between faults")
    ap.add_argument("--fault-every", type=float, default=0,
                    help="seconds between faults instead (a goodput run: the job is cancelled one interval after "
                         "the last fault; no reference run, so no loss check)")
    ap.add_argument("--sync-save", action="store_true", help="synchronous checkpoints (default: --async-save)")
    ap.add_argument("--hidden", type=int, default=128, help="the model's hidden size (its step time)")
    ap.add_argument("--drift-horizon", type=int, default=10,
                    help="hold losses to 1e-5 of the reference only this many steps past the first DP change "
                         "(0: every step); later, fp32 rounding compounds (past 1e-5 15 to 40 steps after a "
                         "resize) and the drift is reported, not judged")
    ap.add_argument("--verify-sample", type=int, default=0,
                    help="checksum only the newest N committed steps and N others at random (0: every step; "
                         "a long run's checkpoints are many GB and this check is plain Python); every "
                         "committed step's manifest and file sizes are checked regardless")
    ap.add_argument("--save-keep", type=int, default=0,
                    help="the job keeps only its N newest committed checkpoints (--save-keep); the check then "
                         "wants exactly those on disk, intact")
    ap.add_argument("--deterministic-dp", action="store_true",
                    help="the job and the reference sum gradients in fp64 (--deterministic-dp), so a DP resize "
                         "changes no weight: every step is then held to 1e-5, whatever --drift-horizon says")
    ap.add_argument("--save-mtbf", type=float, default=0,
                    help="the job picks its save interval from this MTBF (--save-mtbf, Young's formula) "
                         "instead of saving every 5 steps")
    ap.add_argument("--results")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="chaos.")
    cl = Cluster(os.path.abspath(a.bindir), tmp, a.heartbeat, a.node_timeout, a.hang_floor, a.hang_factor)
    ok = False
    try:
        ok = run(a, rng, cl, tmp)
    except Exception as e:  # noqa: BLE001 (a crash of the driver is a failure too, with the logs)
        log("FAIL:", e if isinstance(e, Fail) else repr(e))
        for f in sorted(os.listdir(tmp)):
            if f.endswith(".log"):
                log("--- %s" % f)
                log("".join(open(os.path.join(tmp, f)).readlines()[-25:]))
    finally:
        cl.stop()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("kept", tmp)
    return 0 if ok else 1


def run(a, rng, cl, tmp):
    ckpt = os.path.join(tmp, "ckpt")
    # steps of some tens of milliseconds on 2 cores: faults land mid-run
    model = ["--num-layers", "4", "--hidden-size", str(a.hidden), "--num-attention-heads", "4", "--seq-length", "32",
             "--micro-batch-size", "1", "--global-batch-size", "16", "--lr", "1e-3", "--lr-warmup-iters", "2",
             "--seed", "1234", "--log-interval", "1", "--pipeline-model-parallel-size", "2"]
    if not a.sync_save:
        model.append("--async-save")
    if a.deterministic_dp:
        model.append("--deterministic-dp")
    keep = ["--save-keep", str(a.save_keep)] if a.save_keep else []
    every = ["--save-mtbf", str(a.save_mtbf)] if a.save_mtbf else ["--save-interval", "5"]
    # faults: every kind once per round, shuffled; a node taken out comes back later in the round,
    # before the other node is taken out (one node always runs the job)
    plan = []
    for _ in range(a.rounds):
        kinds = KINDS[:]
        rng.shuffle(kinds)
        for out, back in PAIRS:
            at = kinds.index(out)
            nxt = [i for i, k in enumerate(kinds) if i > at and k in [o for o, _ in PAIRS]]
            kinds.insert(rng.randint(at + 1, nxt[0] if nxt else len(kinds)), back)
        plan += kinds
    # room for the steps made while each fault is handled and checked, beyond steps_between: on a
    # loaded machine the job runs ahead of this harness (40+ steps a fault were seen with 10 asked),
    # most while the workers reconnect to a restarted coordinator (the ranks train on meanwhile)
    room = sum(6 if k == "kill-coordinator" else 3 for k in plan) + 6
    iters = room * a.steps_between + 40 if not a.fault_every else 10 ** 7
    cl.start_coord()
    cl.start_worker("node-a", 2)
    cl.start_worker("node-b", 2)
    wait_for("2 nodes alive", lambda: sum(n["state"] == "alive" for n in cl.atoll("nodes")["nodes"]) == 2, 15)
    job = cl.atoll("submit", *model, "--num-gpus", "4", "--train-iters", str(iters), "--save", ckpt,
                   *every, *keep, "--name", "chaos")["job"]
    log("job %d: tp1 x pp2 x dp2 on node-a and node-b, %d iterations, %s checkpoints %s; faults: %s"
        % (job, iters, "synchronous" if a.sync_save else "asynchronous",
           "every 5 steps" if not a.save_mtbf else "at Young's interval for an MTBF of %g s" % a.save_mtbf,
           " ".join(plan)))
    # the reference: the same job without faults, standalone
    ref_metrics = os.path.join(tmp, "reference.jsonl")
    ref = None
    if not a.fault_every:
        ref = cl.ref = subprocess.Popen([os.path.join(cl.bin, "atoll-train"), "--nproc-per-node", "4"] + model +
                               ["--train-iters", str(iters), "--metrics-file", ref_metrics],
                               cwd=tmp, stdout=open(os.path.join(tmp, "reference.log"), "w"), stderr=subprocess.STDOUT,
                               env=cl.env)
    step = lambda: cl.status(job)["step"]
    wait_for("the job's first steps", lambda: step() >= 5, 60)
    results = []
    losses = None  # checked only when the job runs to its end (not with --fault-every)
    last_fault = time.time()
    killed = None  # the node whose workerd was killed, until it comes back
    stopped = None  # the node whose workerd is stopped, until it continues
    last_event = 0
    seen = {}  # iteration -> loss, gathered as the run goes (the series thins steps past its newest 1000)
    for n, kind in enumerate(plan):
        st = cl.status(job)
        base = st["step"]
        if st["state"] not in ("running", "starting"):
            raise Fail("the job is %s before fault %d of %d (%s)" % (st["state"], n + 1, len(plan), st["message"]))
        if a.fault_every:
            time.sleep(max(0, a.fault_every - (time.time() - last_fault)))
        else:
            wait_for("%d more steps" % a.steps_between, lambda: step() >= base + a.steps_between, 120)
        st = cl.status(job)
        if st["state"] not in ("running", "starting"):
            raise Fail("the job is %s at step %d of %d before fault %d of %d: it ran ahead of the faults" %
                       (st["state"], st["step"], iters, n + 1, len(plan)))
        last_event = max([e["id"] for e in cl.events(last_event)] + [last_event])
        restarts = st["restarts"]
        epoch = st["epoch"]
        pids = wait_for("the ranks of epoch %d" % epoch, lambda: cl.rank_pids(job, epoch=epoch), 30)
        ranks = sorted({r for r, _ in pids.values()})
        rec = {"kind": kind, "step": st["step"], "epoch": epoch, "step_ms": st["metrics"].get("step_ms")}
        t0 = last_fault = time.time()
        if kind in ("kill-rank", "stop-rank"):
            rank = rng.choice(ranks)
            pid = [p for p, (r, _) in pids.items() if r == rank][0]
            os.kill(pid, signal.SIGKILL if kind == "kill-rank" else signal.SIGSTOP)
            rec.update(rank=rank, pid=pid)
        elif kind == "kill-workerd":
            up = [w for w, p in cl.workers.items() if p.poll() is None]
            killed = rng.choice(up)
            cl.workers[killed].kill()
            cl.workers[killed].wait()
            rec["node"] = killed
        elif kind == "node-back":
            cl.start_worker(killed, 2)
            rec["node"] = killed
            killed = None
        elif kind == "stop-workerd":
            stopped = rng.choice([w for w, p in cl.workers.items() if p.poll() is None])
            os.kill(cl.workers[stopped].pid, signal.SIGSTOP)
            rec["node"] = stopped
        elif kind == "cont-workerd":
            os.kill(cl.workers[stopped].pid, signal.SIGCONT)
            rec["node"] = stopped
            stopped = None
        elif kind == "kill-coordinator":
            cl.coord.kill()
            cl.coord.wait()
            time.sleep(rng.uniform(0.2, 1.0))
            cl.start_coord()
        rec["t_fault"] = t0
        log("fault %d: %s %s at step %d" % (n + 1, kind, {k: v for k, v in rec.items() if k in ("rank", "node")},
                                            rec["step"]))
        check_fault(cl, job, rec, restarts, epoch, last_event)
        results.append(rec)
        collect_steps(cl, job, seen)
    if a.fault_every:
        time.sleep(max(0, a.fault_every - (time.time() - last_fault)))
        cl.atoll("cancel", str(job))
        wait_for("no rank left", lambda: not cl.rank_pids(job), 15)
        st = cl.status(job)
        log("ok: job ran through %d faults, one every %.0f s, and was cancelled; no rank process left" %
            (len(plan), a.fault_every))
    else:
        last_collect = [0.0]

        def ended():  # and the steps gathered on the way: the store thins all but the newest 1000
            if time.time() - last_collect[0] > 5:
                collect_steps(cl, job, seen)
                last_collect[0] = time.time()
            return cl.status(job)["state"] in ("completed", "failed")
        wait_for("the job to complete", ended, 600)
        st = cl.status(job)
        if st["state"] != "completed":
            raise Fail("job ended %s: %s" % (st["state"], st["message"]))
        if ref.wait(timeout=600):
            raise Fail("the reference run failed (exit %d)" % ref.returncode)
        wait_for("no rank left", lambda: not cl.rank_pids(job), 15)
        log("ok: job completed after %d faults; no rank process left" % len(plan))
        collect_steps(cl, job, seen)
        losses = check_losses(seen, st, ref_metrics, iters, 0 if a.deterministic_dp else a.drift_horizon)
    check_checkpoints(cl, job, ckpt, a.verify_sample, rng, a.save_keep)
    check_events_name_faults(cl, job, results)
    g = st.get("goodput", {})
    log("goodput %.1f%% of %.1f s (lost: %s)" % (100 * g.get("ratio", 0), g.get("wall_s", 0),
                                                 ", ".join("%s %.1f s" % kv for kv in g.get("lost_s", {}).items())))
    if a.results:
        json.dump({"faults": results, "goodput": g, "losses": losses, "history": st["restart_history"], "iters": iters,
                   "steps": st["step"], "heartbeat_s": a.heartbeat, "node_timeout_s": a.node_timeout,
                   "hang_floor_s": a.hang_floor, "hang_factor": a.hang_factor, "save_mtbf": a.save_mtbf, "deterministic_dp": a.deterministic_dp, "hidden": a.hidden, "seed": a.seed, "fault_every": a.fault_every,
                   "async_save": not a.sync_save}, open(a.results, "w"), indent=1)
    log("PASS")
    return True


def check_fault(cl, job, rec, restarts, epoch, after):
    """The job runs again (or, for the coordinator, runs on without a restart)."""
    kind = rec["kind"]
    if kind == "kill-coordinator":
        st = wait_for("the job to report steps again", lambda: (lambda s: s if s["step"] > rec["step"] + 2 else None)(
            cl.status(job)), 60)
        if st["restarts"] != restarts or st["epoch"] != epoch:
            raise Fail("the coordinator's restart restarted the job: restarts %d -> %d" % (restarts, st["restarts"]))
        rec["t_running"] = time.time() - rec["t_fault"]
        log("  ok: the job kept running through the coordinator's restart (no restart, step %d)" % st["step"])
        return
    def recovered():
        for e in cl.events(after):
            if e["kind"] == "job.recovered" and e["subject"] == "job %d" % job:
                return e
        return None
    ev = wait_for("the job to run again after %s" % kind, recovered, 90)
    st = cl.status(job)
    h = [x for x in st["restart_history"] if x["epoch"] > epoch][0]
    if kind == "cont-workerd":  # the ranks the frozen node kept, of the epoch before the one now replaced, too
        older = lambda: [v for v in cl.rank_pids(job).values() if v[1] < h["epoch"]]
        wait_for("the continued node's old ranks to be gone", lambda: not older(), 15)
        log("  ok: no rank of an older epoch left after %s continued" % rec["node"])
    rec.update(cause=h["cause"], detail=h["detail"], dp=h["dp"], steps_recomputed=h["steps_recomputed"],
               detected_s=h["detected_ms"] / 1000.0 - rec["t_fault"], running_s=h["running_ms"] / 1000.0 - rec["t_fault"],
               detect_reported_s=h["detection_s"], epoch_after=h["epoch"])
    # a stopped workerd's ranks are out of reach until it continues (checked then)
    old = cl.rank_pids(job, epoch=epoch, skip_node=rec["node"] if kind == "stop-workerd" else None)
    if old:
        raise Fail("ranks of epoch %d still alive after the restart: %s" % (epoch, old))
    want = {"kill-rank": "rank-exit", "stop-rank": "hang", "kill-workerd": "node-lost", "node-back": "scale-up",
            "stop-workerd": "node-lost", "cont-workerd": "scale-up"}[kind]
    if h["cause"] != want:
        raise Fail("%s was taken for %s: %s" % (kind, h["cause"], h["detail"]))
    log("  ok: %s detected %.2f s after the fault, running again after %.2f s, %d steps recomputed, dp %d" %
        (h["cause"], rec["detected_s"], rec["running_s"], h["steps_recomputed"], h["dp"]))




def collect_steps(cl, job, seen):
    """The job's stored steps since a little before the newest seen, into `seen`: a restart
    recomputes the steps after its checkpoint, and the store keeps the newest value."""
    after = max(0, max(seen, default=0) - 200)
    for s in cl.atoll("metrics", str(job), "--after", str(after), "--limit", "10000")["steps"]:
        seen[s["iteration"]] = s["loss"]


def check_losses(steps, st, ref_metrics, iters, horizon):
    ref = {}
    for line in open(ref_metrics):
        d = json.loads(line)
        if "loss" in d:
            ref[d["iteration"]] = d["loss"]
    # Gathered after every fault, before the series thins them (it keeps the newest 1000 whole):
    # every step of the run is here.
    if sorted(ref) != list(range(1, iters + 1)) or sorted(steps) != list(range(1, iters + 1)):
        raise Fail("steps gathered %d (missing e.g. %s), reference %d, want %d" %
                   (len(steps), sorted(set(range(1, iters + 1)) - set(steps))[:10], len(ref), iters))
    # Until the data-parallel size first changed, every step must be the reference's bit for bit.
    changed = min([h["from_iteration"] for h in st["restart_history"] if h["dp"] != 2] + [iters])
    exact = [i for i in sorted(steps) if i <= changed and steps[i] != ref[i]]
    if exact:
        raise Fail("steps before any DP change differ from the reference: %s" % exact[:10])
    rel = {i: abs(steps[i] - ref[i]) / abs(ref[i]) for i in steps}
    until = changed + horizon if horizon else iters
    held = [i for i in steps if i <= until]
    worst = max(rel[i] for i in held)
    if worst > 1e-5:
        raise Fail("worst relative loss difference up to step %d: %.3g > 1e-5 (step %d); from step %d: %s" %
                   (until, worst, max(held, key=lambda i: rel[i]), changed,
                    " ".join("%d:%.1e" % (i, rel[i]) for i in sorted(held) if i >= changed)))
    drift = max(rel.values())
    log("ok: losses match the no-failure run: steps 1..%d bit for bit, %d steps up to %d within %.2g relative%s" %
        (changed, len(held), min(until, iters), worst,
         "; %.2g at worst over all %d steps (rounding compounding after DP changes)" % (drift, iters)
         if until < iters else ""))
    return {"exact_until": changed, "held_until": min(until, iters), "worst_held": worst, "worst_all": drift,
            "stored": len(steps)}


def check_checkpoints(cl, job, ckpt, sample=0, rng=None, keep=0):
    committed = set()
    for e in cl.events():
        if e["kind"] == "job.checkpoint" and e["subject"] == "job %d" % job:
            committed.add(int(e["message"].split()[1]))
    if not committed:
        raise Fail("no checkpoint was reported committed")
    pruned = set()
    if keep:  # exactly the newest `keep` committed steps stay (the last one may commit after the job's last report)
        disk = sorted(int(d[5:]) for d in os.listdir(ckpt)
                      if d.startswith("iter_") and os.path.exists(os.path.join(ckpt, d, "manifest.json")))
        if len(disk) != min(keep, len(committed | set(disk))):
            raise Fail("--save-keep %d: %d committed steps on disk (%s), %d reported" % (keep, len(disk), disk,
                                                                                     len(committed)))
        pruned = {it for it in committed if it < disk[0]}
        committed -= pruned
    on_disk = summed = 0
    steps = sorted(d for d in os.listdir(ckpt) if d.startswith("iter_"))
    summing = set(steps)
    if sample:
        summing = set(steps[-sample:]) | set(rng.sample(steps, min(sample, len(steps))))
    for d in steps:
        if not d.startswith("iter_"):
            continue
        it = int(d[5:])
        man = os.path.join(ckpt, d, "manifest.json")
        if not os.path.exists(man):
            if it in committed:
                raise Fail("checkpoint step %d was reported committed but has no manifest" % it)
            continue
        files = json.load(open(man))["files"]
        for name, want in files.items():
            n = os.path.getsize(os.path.join(ckpt, d, name))
            if n != want["bytes"]:
                raise Fail("checkpoint %s/%s is torn (%d bytes; manifest %s)" % (d, name, n, want))
        bad = ckpt_sum.check_step(os.path.join(ckpt, d)) if d in summing else []
        if bad:
            raise Fail("checkpoint %s is corrupt: %s" % (d, "; ".join(bad)))
        on_disk += 1
        summed += d in summing
        committed.discard(it)
    if committed:
        raise Fail("committed checkpoints lost: %s" % sorted(committed))
    log("ok: every committed checkpoint %sis on disk and intact (%d steps with manifests, sizes checked; %d of "
        "them checksummed)%s" % ("kept " if keep else "", on_disk, summed,
                                 "; %d older ones removed by --save-keep %d" % (len(pruned), keep) if keep else ""))


def check_events_name_faults(cl, job, results):
    evs = cl.events()
    for r in results:
        after = [e for e in evs if e["time_ms"] >= r["t_fault"] * 1000 - 50]
        if r["kind"] == "kill-rank":
            want = "rank %d (pid %d) was killed by signal 9" % (r["rank"], r["pid"])
            hit = [e for e in after if e["kind"] == "job.rank_exit" and want in e["message"]]
        elif r["kind"] == "stop-rank":
            want = "culprit rank %d" % r["rank"]
            hit = [e for e in after if e["kind"] == "job.hang" and want in e["message"] and "stopped" in e["message"]]
        elif r["kind"] in ("kill-workerd", "stop-workerd"):
            want = "node %s lost" % r["node"]
            hit = [e for e in after if e["kind"] == "job.node_lost" and want in e["message"]]
        elif r["kind"] in ("node-back", "cont-workerd"):
            want = r["node"]
            hit = [e for e in after if e["kind"] in ("node.reregistered", "node.alive") and e["subject"] == want]
            hit = hit and [e for e in after if e["kind"] == "job.restart" and e["message"].startswith("scale-up")]
        else:
            want = "coordinator.started + job.reconciled"
            hit = [e for e in after if e["kind"] == "job.reconciled" and e["subject"] == "job %d" % job]
        if not hit:
            near = [e["kind"] + ": " + e["message"] for e in after if e["kind"].startswith("job.")][:6]
            raise Fail("no event names %s (%s); events after it:\n  %s" % (r["kind"], want, "\n  ".join(near)))
    log("ok: the events name every fault's node, rank and cause (%d faults)" % len(results))


if __name__ == "__main__":
    sys.exit(main())
