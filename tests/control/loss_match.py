"""loss_match.py CLUSTER_JSON STANDALONE_JSONL FIRST LAST: the loss series a
coordinator stored for a job (`atoll metrics JOB --json`) has exactly the steps
FIRST..LAST, each equal (relative 1e-6) to the same step of a standalone run's
--metrics-file. Used by the integration tests of jobs, resumes and Slurm runs."""
import json
import sys

cl = {s["iteration"]: s["loss"] for s in json.load(open(sys.argv[1]))["steps"]}
sa = {d["iteration"]: d["loss"] for d in map(json.loads, open(sys.argv[2])) if "loss" in d}
lo, hi = int(sys.argv[3]), int(sys.argv[4])
assert sorted(cl) == list(range(lo, hi + 1)), "stored steps %s..%s, want %d..%d" % (min(cl), max(cl), lo, hi)
missing = [i for i in cl if i not in sa]
assert not missing, "the standalone run has no steps %s" % missing[:5]
worst = max(abs(cl[i] - sa[i]) / abs(sa[i]) for i in cl)
assert worst <= 1e-6, "worst relative difference %.3g" % worst
print("steps %d..%d, worst relative loss difference %.2g" % (lo, hi, worst))
