#!/usr/bin/env bash
# bench/bubble_cpu: the pipeline bubble atoll-train measures on the CPU backend
# (host transport over loopback) at pp = 4, m = 8 micro-batches, v = 1 (1F1B)
# and v = 2 (interleaved), against the theory (p-1)/(v*m + p-1); and at pp = 2, where
# each rank has a core of its own on a 2-core machine.
#
# A stage's bubble is its idle time (waiting for a peer in p2p batches and in the
# closing PP barrier) over the step time, a share in [0, 1]; transfer time is
# apart (engine/README.md). The recorded results before this definition changed
# used idle over compute time, compared with (p-1)/(v*m). Each setting
# runs ITERS steps; the table gives the median over the steps after the first.
#
# usage: bench/bubble_cpu.sh [ATOLL_TRAIN] [OUT.md]
set -euo pipefail
TRAIN=${1:-build-par2/bin/atoll-train}
OUT=${2:-bench/results/bubble_cpu.md}
ITERS=${ITERS:-8}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OPENBLAS_NUM_THREADS=1

MODEL=(--num-layers 8 --hidden-size 256 --num-attention-heads 4 --vocab-size 256 --seq-length 128
       --micro-batch-size 1 --global-batch-size 8 --train-iters "$ITERS" --lr 1e-4 --log-interval 1)

run() { # name, pp, extra flags...
    local name=$1 pp=$2
    shift 2
    "$TRAIN" "${MODEL[@]}" --pipeline-model-parallel-size "$pp" --nproc-per-node "$pp" "$@" \
        --metrics-file "$WORK/$name.jsonl" > "$WORK/$name.log" 2>&1
}

run p4v1 4
run p4v2 4 --num-layers-per-virtual-pipeline-stage 1
run p2v1 2
run p2v2 2 --num-layers-per-virtual-pipeline-stage 2

{
    echo "# Pipeline bubble measured on the CPU backend"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: \`$(uname -a)\`"
    echo "- load average before the runs: $(cut -d" " -f1-3 /proc/loadavg) (the machine is shared)"
    echo "- cpu: $(lscpu | grep 'Model name' | sed 's/Model name:[ ]*//'), $(nproc) cores"
    echo "- command: \`bench/bubble_cpu.sh $TRAIN\` (ITERS=$ITERS, OPENBLAS_NUM_THREADS=1)"
    echo "- model: 8 layers, hidden 256, 4 heads, seq 128, vocab 256; micro-batch 1, global batch 8"
    echo "  (m = 8), pp ranks under \`--nproc-per-node pp\`, host transport on loopback"
    echo
    /usr/bin/env python3 - "$WORK" <<'EOF'
import json, statistics, sys
work = sys.argv[1]
print("| pp | schedule | v | bubble theory (p-1)/(vm+p-1) | measured, mean of stages | per stage | step ms |")
print("|---:|---|---:|---:|---:|---|---:|")
for name, p, v, label in (("p4v1", 4, 1, "1F1B"), ("p4v2", 4, 2, "interleaved"), ("p2v1", 2, 1, "1F1B"),
                          ("p2v2", 2, 2, "interleaved")):
    steps = [json.loads(l) for l in open("%s/%s.jsonl" % (work, name)) if '"loss"' in l][1:]
    med = lambda key: statistics.median(s[key] for s in steps)
    stages = [statistics.median(s["bubble_stages"][i] for s in steps) for i in range(p)]
    print("| %d | %s | %d | %.4f | %.4f | %s | %.1f |" % (p, label, v, steps[0]["bubble_theory"], med("bubble_measured"),
                                                     " / ".join("%.3f" % b for b in stages), med("step_ms")))
EOF
} > "$OUT"
cat "$OUT"
