"""loss_series: what the engine's end-to-end scripts compare (engine_bf16.sh,
tests/cuda/engine_cuda_emu.sh): the losses a run wrote to WORK/NAME.jsonl
(--metrics-file), the largest relative difference of two series step by
step, and checks that print "ok: ..." or "FAIL: ..." and remember a failure."""
import json


def losses(work, name):
    return [json.loads(line)["loss"] for line in open(f"{work}/{name}.jsonl") if '"loss"' in line]


def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


class Checks:
    def __init__(self):
        self.ok = True

    def __call__(self, cond, msg):
        print(("ok: " if cond else "FAIL: ") + msg)
        self.ok &= bool(cond)
