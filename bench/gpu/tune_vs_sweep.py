#!/usr/bin/env python3
"""tune_vs_sweep: what --tune-gemms found in a training run, GEMM by GEMM, beside
what gpu_bench's sweep found for the same shapes on random data.

    tune_vs_sweep.py GPU_BENCH_MD TUNE_LINES MODEL   (writes markdown to stdout)

GPU_BENCH_MD is gpu_bench's report (its "cuBLASLt's candidates" tables, one per
model); TUNE_LINES the run's `--tune-gemms:   ...` lines (run.sh keeps them in
tune_gpt2.txt and tune_big.txt); MODEL picks the sweep's table whose title starts
with it ("GPT-2" or "~1.5B"). A GEMM matches by its pass (forward, input gradient,
weight gradient) and m x n x k; the tuner may have timed a shape more than once
(its pointers aligned otherwise), and each such line has its row.

The two readings it tells apart: the tuner not finding on the step's operands
what the sweep found (its kept time near its first), or finding it (its kept
time near the sweep's fastest), the step then not keeping the gain.
Exit status 1 when no GEMM matches (the wrong files, or formats that changed)."""
import re
import sys

PASS_OF_SWEEP = {"forward": "forward", "dinp": "input gradient", "dw": "weight gradient"}
TUNE_LINE = re.compile(r"--tune-gemms:\s+(forward|input gradient|weight gradient) m (\d+) n (\d+) k (\d+), "
                       r"[^:]*: cuBLASLt's first ([0-9.]+) ms, kept ([0-9.]+) ms \([^;]*; candidate (\d+) of (\d+), "
                       r"([^)]*)\)")


def sweep_rows(text, model):
    """{(pass, m, n, k): (name, per micro-batch, first ms, fastest ms)} from the sweep table of model"""
    rows, cols, on = {}, None, False
    for line in text.splitlines():
        if line.startswith("### "):
            on = line.startswith("### cuBLASLt's candidates") and f"({model}" in line
            cols = None
            continue
        if not on or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cols is None:
            cols = {name: i for i, name in enumerate(cells)}
            continue
        if set(cells[0]) <= set("-:") or "what-if" in cells[0]:
            continue
        try:
            name, shape = cells[cols["GEMM"]], cells[cols["m x n x k"]]
            m, n, k = (int(x) for x in shape.split(" x "))
            first = float(cells[cols["first ms"]])
            fastest = float(cells[cols["fastest ms (#)"]].split()[0])
            per = int(cells[cols["per micro-batch"]])
        except (KeyError, ValueError):
            continue
        word = re.sub(r"\s*\([^)]*\)", "", name).split()[-1]  # "mlp proj (DGELU) dinp" -> "dinp"
        if word not in PASS_OF_SWEEP:
            continue
        rows[(PASS_OF_SWEEP[word], m, n, k)] = (name, per, first, fastest)
    return rows


def less(a, b):
    return f"{100.0 * (1.0 - b / a):.1f}%" if a > 0 and b > 0 else "-"


def main(argv):
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        sweep = sweep_rows(f.read(), argv[3])
    with open(argv[2]) as f:
        tuned = [m.groups() for m in map(TUNE_LINE.search, f) if m]
    out = [f"| GEMM | m x n x k | sweep: first ms | sweep: fastest ms | sweep: less | tuner: first ms | "
           f"tuner: kept ms (candidate) | tuner: less |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    matched = 0
    sums = [0.0, 0.0, 0.0, 0.0]  # a micro-batch's sweep first, fastest; tuner first, kept (matched shapes)
    seen = set()
    for pas, m, n, k, first, kept, cand, of, where in tuned:
        key = (pas, int(m), int(n), int(k))
        name, per, s_first, s_fast = sweep.get(key, (f"{pas} (not in the sweep)", 0, -1.0, -1.0))
        first, kept = float(first), float(kept)
        out.append(f"| {name} | {m} x {n} x {k} | {s_first:.3f} | {s_fast:.3f} | {less(s_first, s_fast)} | "
                   f"{first:.3f} | {kept:.3f} ({cand} of {of}, {where}) | {less(first, kept)} |")
        if key in sweep and key not in seen:  # a shape timed twice counts once in the sums
            seen.add(key)
            matched += 1
            for i, v in enumerate((s_first, s_fast, first, kept)):
                sums[i] += per * v
    if not matched:
        print(f"tune_vs_sweep: no GEMM of {argv[2]} matches the sweep's '{argv[3]}' table in {argv[1]}",
              file=sys.stderr)
        return 1
    print("\n".join(out))
    print(f"\nA micro-batch's {matched} matched GEMMs (each shape once, times its calls a micro-batch): the sweep "
          f"{sums[0]:.2f} -> {sums[1]:.2f} ms ({less(sums[0], sums[1])} less), the tuner {sums[2]:.2f} -> "
          f"{sums[3]:.2f} ms ({less(sums[2], sums[3])} less).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
