#!/usr/bin/python3
"""--tensorboard-dir: the event file atoll-train writes, read the way TensorBoard
reads one: records framed by a length and masked CRC-32Cs (checked here with an
independent bitwise CRC), each a tensorflow.Event parsed by the protobuf library
from tests/engine/tfevent.proto. The scalars carry Megatron's tags and equal the
--metrics-file records of the same run; --tensorboard-log-interval thins them;
the validation loss (and with --log-validation-ppl-to-tensorboard its
perplexity) is written after each evaluation; an unwritable directory is refused
before training.

usage: engine_tensorboard.py ATOLL_TRAIN WORKDIR   (atoll, for data prepare, beside atoll-train)
"""
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path, pb):
    blob = open(path, "rb").read()
    at, events = 0, []
    while at < len(blob):
        head = blob[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", blob[at + 8:at + 12])
        assert hc == masked(crc32c(head)), f"record at {at}: length CRC"
        data = blob[at + 12:at + 12 + n]
        (dc,) = struct.unpack("<I", blob[at + 12 + n:at + 16 + n])
        assert len(data) == n and dc == masked(crc32c(data)), f"record at {at}: data CRC"
        ev = pb.Event()
        ev.ParseFromString(data)
        events.append(ev)
        at += 16 + n
    return events


def main():
    train, work = sys.argv[1:3]
    atoll = os.path.join(os.path.dirname(os.path.abspath(train)), "atoll")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["protoc", "--python_out=" + work, "-I", here, os.path.join(here, "tfevent.proto")], check=True)
    sys.path.insert(0, work)
    import tfevent_pb2 as pb

    with open(os.path.join(work, "docs.jsonl"), "w") as f:
        for i in range(400):
            f.write(json.dumps({"text": "the boat came in with the tide"[: 5 + (i * 7) % 26]}) + "\n")
    subprocess.run([atoll, "data", "prepare", "--input", os.path.join(work, "docs.jsonl"), "--output-prefix",
                    os.path.join(work, "docs")], check=True, stdout=subprocess.DEVNULL)
    base = [train, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "6", "--lr", "1e-3",
            "--data-path", os.path.join(work, "docs"), "--split", "8,2,0", "--eval-interval", "3", "--eval-iters", "1"]
    failures = []

    def check(cond, msg):
        print(("ok: " if cond else "FAIL: ") + msg)
        if not cond:
            failures.append(msg)

    # every iteration, with the validation perplexity and the iteration time
    tb = os.path.join(work, "runs", "tb")  # created with its parent
    subprocess.run(base + ["--tensorboard-dir", tb, "--log-validation-ppl-to-tensorboard", "--log-timers-to-tensorboard",
                           "--log-batch-size-to-tensorboard", "--log-world-size-to-tensorboard",
                           "--log-memory-to-tensorboard", "--log-params-norm", "--log-num-zeros-in-grad",
                           "--rampup-batch-size", "2", "2", "4", "--metrics-file", os.path.join(work, "m.jsonl")],
                   check=True, stdout=subprocess.DEVNULL)
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    check(len(files) == 1, f"one event file in --tensorboard-dir: {files}")
    events = read_events(files[0], pb)
    check(events[0].file_version == "brain.Event:2", f"the first record names the version: {events[0].file_version!r}")
    check(all(ev.HasField("summary") and len(ev.summary.value) == 1 and ev.wall_time > 1.6e9 for ev in events[1:]),
          f"the other {len(events) - 1} records are one-scalar summaries stamped with the wall clock")
    scalars = {}
    for ev in events[1:]:
        v = ev.summary.value[0]
        scalars.setdefault(v.tag, []).append((ev.step, v.simple_value))
    steps = [json.loads(l) for l in open(os.path.join(work, "m.jsonl"))]
    train_rec = [r for r in steps if "loss" in r]
    valid_rec = [r for r in steps if "valid_loss" in r]
    close = lambda a, b: abs(a - b) <= 1e-6 * max(1.0, abs(b))  # simple_value is a float32
    for tag, key in (("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm"),
                     ("batch-size", "global_batch_size"), ("params-norm", "params_norm"),
                     ("num-zeros", "num_zeros")):
        got = scalars.get(tag, [])
        want = [(r["iteration"], r[key]) for r in train_rec]
        check(len(got) == 6 and all(g[0] == w[0] and close(g[1], w[1]) for g, w in zip(got, want)),
              f"'{tag}' by iteration equals --metrics-file's {key}: {got[:2]}...")
        vs = scalars.get(tag + " vs samples", [])
        check([s for s, _ in vs] == [r["consumed_samples"] for r in train_rec],
              f"'{tag} vs samples' at the consumed samples: {[s for s, _ in vs]}")
    check([v for _, v in scalars.get("batch-size", [])] == [2, 2, 4, 4, 4, 4],
          f"'batch-size' follows --rampup-batch-size 2 2 4: {scalars.get('batch-size')}")
    check(scalars.get("world-size") == [(i, 1.0) for i in range(1, 7)] and len(scalars.get("world-size vs samples", [])) == 6,
          f"'world-size' 1 every iteration: {scalars.get('world-size')}")
    mem = [v for _, v in scalars.get("mem-max-allocated-bytes", [])]
    check(len(mem) == 6 and all(1e6 < v < 1e10 for v in mem) and mem == sorted(mem),
          f"'mem-max-allocated-bytes' (the CPU rank's peak resident memory) every iteration, never falling: {mem[:2]}...")
    check(len(scalars.get("iteration-time", [])) == 6 and all(0 < v < 60 for _, v in scalars["iteration-time"]),
          "'iteration-time' in seconds with --log-timers-to-tensorboard")
    check(len(scalars.get("throughput", [])) == 6 and len(scalars.get("tokens-per-sec", [])) == 6,
          "'throughput' and 'tokens-per-sec' every iteration")
    val = scalars.get("lm loss validation", [])
    check([s for s, _ in val] == [3, 6] and all(close(v, r["valid_loss"]) for (_, v), r in zip(val, valid_rec)),
          f"'lm loss validation' after iterations 3 and 6: {val}")
    ppl = scalars.get("lm loss validation ppl", [])
    check(len(ppl) == 2 and all(abs(p - math.exp(v)) <= 1e-4 * p for (_, p), (_, v) in zip(ppl, val)),
          f"'lm loss validation ppl' = exp(loss): {ppl}")

    # every second iteration; no perplexity or timers without their flags, no learning rate when asked not to
    tb2 = os.path.join(work, "tb2")
    subprocess.run(base + ["--tensorboard-dir", tb2, "--tensorboard-log-interval", "2",
                           "--no-log-learning-rate-to-tensorboard"], check=True, stdout=subprocess.DEVNULL)
    s2 = {}
    for ev in read_events(glob.glob(os.path.join(tb2, "events.out.tfevents.*"))[0], pb)[1:]:
        s2.setdefault(ev.summary.value[0].tag, []).append(ev.step)
    check(s2.get("lm loss") == [2, 4, 6] and "iteration-time" not in s2 and "lm loss validation ppl" not in s2
          and "batch-size" not in s2 and "world-size" not in s2 and "mem-max-allocated-bytes" not in s2
          and "params-norm" not in s2 and "num-zeros" not in s2 and "learning-rate" not in s2 and "learning-rate vs samples" not in s2
          and s2.get("lm loss validation") == [3, 6],
          f"--tensorboard-log-interval 2: 'lm loss' at {s2.get('lm loss')}, validation at {s2.get('lm loss validation')}")

    # a directory that cannot be made: refused before training (exit 78, the configuration's)
    blocker = os.path.join(work, "file")
    open(blocker, "w").close()
    p = subprocess.run(base + ["--tensorboard-dir", os.path.join(blocker, "tb")], capture_output=True, text=True)
    check(p.returncode == 78 and "--tensorboard-dir" in p.stderr and "cannot create the directory" in p.stderr
          and "iteration" not in p.stdout, f"unwritable --tensorboard-dir refused: rc {p.returncode}: {p.stderr.strip()}")
    print("engine_tensorboard: %s" % ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
