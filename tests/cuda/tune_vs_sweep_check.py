#!/usr/bin/env python3
"""bench/gpu/tune_vs_sweep.py on a sweep report and --tune-gemms lines kept here
(data/tune_vs_sweep: the 1.5B model's sweep rows of the H200 run, tuner lines made
up to cover each case): the rows it matches, the two savings, and its refusals.

    tune_vs_sweep_check.py SOURCE_DIR"""
import subprocess
import sys

src = sys.argv[1]
tool = f"{src}/bench/gpu/tune_vs_sweep.py"
data = f"{src}/tests/cuda/data/tune_vs_sweep"
failures = 0


def check(ok, what):
    global failures
    print(("ok: " if ok else "FAIL: ") + what)
    failures += not ok


def run(*args):
    r = subprocess.run([sys.executable, tool, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


rc, out, err = run(f"{data}/gpu_bench.md", f"{data}/tune_big.txt", "~1.5B")
rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| GEMM")]
check(rc == 0 and len(rows) == 6, f"six tuner lines, six rows (exit {rc}, {len(rows)} rows; {err.strip()})")
check(any(r.startswith("| qkv dinp | 1600 x 8192 x 4800 | 0.209 | 0.177 | 15.3% | 0.205 | 0.203 (9 of 20, for no "
                       "workspace) | 1.0% |") for r in rows),
      "the qkv input gradient the tuner timed once without finding the sweep's gain")
check(any("| 0.206 | 0.180 (3 of 20, with the workspace) | 12.6% |" in r for r in rows),
      "the same shape timed again (other alignments), with the gain found")
check(any(r.startswith("| fc (GELU_AUX_BIAS) forward | 6400 x 8192 x 1600 |") for r in rows),
      "a sweep name with an epilogue in it matched by its pass")
check(not any("what-if" in r for r in rows), "the sweep's what-if rows are not steps' GEMMs")
check(any(r.startswith("| input gradient (not in the sweep) | 1600 x 1600 x 1600 | -1.000") for r in rows),
      "a tuned shape the sweep lacks has its row, said so")
check("4 matched GEMMs" in out and "the sweep 40.75 -> 38.16 ms (6.4% less)" in out and
      "the tuner 40.80 -> 40.13 ms (1.6% less)" in out,
      "the micro-batch sums: each matched shape once, times its calls (48 a micro-batch)")
rc, out, err = run(f"{data}/gpu_bench.md", f"{data}/tune_big.txt", "GPT-2")
check(rc == 1 and "no GEMM" in err and "GPT-2" in err, f"the other model's table matches none: exit {rc}, '{err.strip()}'")
rc, out, err = run(f"{data}/gpu_bench.md")
check(rc == 2 and "tune_vs_sweep.py GPU_BENCH_MD TUNE_LINES MODEL" in err, f"a wrong call says how to call it: exit {rc}")
print("tune_vs_sweep: all checks passed" if not failures else f"tune_vs_sweep: {failures} failed")
sys.exit(1 if failures else 0)
