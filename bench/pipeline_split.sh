#!/usr/bin/env bash
# bench/pipeline_split: the step time of a 2-stage pipeline split evenly (Megatron's
# default) and split as `atoll plan` proposes (--decoder-last-pipeline-num-layers),
# measured on the CPU backend with one core per rank.
#
# The last stage also runs the LM head and the loss. Floors, from the FLOPs per token
# (forward and backward): a layer 6(12h^2 + 13h) + 12hs, the head 6Vh. For the model
# below (h 128, s 128, V 4096) that is 1.386 and 3.146 MFLOP, the head 2.27 layers.
# Even (4 | 4): stage times 4 and 6.27 layer units; 1F1B takes (m - 1) t_max + sum t
# (bench/results/plan.md; tests/plan/plan_bubble.c checks it against the schedule's
# simulation), 104.3 units at m = 16. The planner's split (5 | 3): 5 and 5.27, 89.3
# units: 14% less step time predicted, if the CPU spends its time as the FLOPs say.
#
# The runs alternate (even, split, even, split, ...) so load from other tenants of a
# shared machine falls on both alike.
#
# usage: bench/pipeline_split.sh [BUILD_DIR]    ITERS=20 ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "no $BUILD/bin: build first" >&2; exit 2; }
ITERS=${ITERS:-20}
ROUNDS=${ROUNDS:-3}
OUT=bench/results/pipeline_split.md
T0=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OPENBLAS_NUM_THREADS=1

MODEL=(--num-layers 8 --hidden-size 128 --num-attention-heads 4 --vocab-size 4096 --seq-length 128
       --micro-batch-size 1 --global-batch-size 16 --lr 1e-4 --log-interval 1)
# the planner's split for this model on two GPUs in two stages
SPLIT=$("$BIN/atoll" plan "${MODEL[@]}" --num-gpus 2 --gpu h100-sxm --tensor-model-parallel-size 1 \
        --pipeline-model-parallel-size 2 --json |
        python3 -c 'import json,sys; c=json.load(sys.stdin)["candidates"][0]; print(c["decoder_first_pipeline_num_layers"], c["decoder_last_pipeline_num_layers"])')
read -r FIRST LAST <<<"$SPLIT"
[ "$FIRST$LAST" != 00 ] || { echo "the planner proposed the even split for this model" >&2; exit 1; }

run() { # name, flags...
    local name=$1
    shift
    "$BIN/atoll-train" "${MODEL[@]}" --train-iters "$ITERS" --pipeline-model-parallel-size 2 --nproc-per-node 2 "$@" \
        --metrics-file "$WORK/$name.jsonl" >"$WORK/$name.log" 2>&1 || { tail -3 "$WORK/$name.log" >&2; exit 1; }
}
echo "$ROUNDS rounds of even, then --decoder-first/last-pipeline-num-layers $FIRST/$LAST ($ITERS steps each)"
for r in $(seq "$ROUNDS"); do
    run "even$r"
    run "split$r" --decoder-first-pipeline-num-layers "$FIRST" --decoder-last-pipeline-num-layers "$LAST"
done

{
    echo "# Pipeline split: even against the planner's, CPU backend"
    echo
    echo "- date: $T0"
    echo "- machine: \`$(uname -srm)\`, $(lscpu | sed -n 's/Model name:[ ]*//p'), $(nproc) cores;" \
         "load average before the runs: $LOAD"
    echo "- command: \`bench/pipeline_split.sh $BUILD\` (ITERS=$ITERS, ROUNDS=$ROUNDS, OPENBLAS_NUM_THREADS=1)"
    echo "- model: 8 layers, hidden 128, 4 heads, seq 128, vocab 4096; micro-batch 1, global batch 16 (m = 16);"
    echo "  pp 2 under \`--nproc-per-node 2\` (a core per rank), host transport on loopback"
    echo "- split: \`atoll plan ... --pipeline-model-parallel-size 2 --json\`'s first candidate:"
    echo "  --decoder-first-pipeline-num-layers $FIRST --decoder-last-pipeline-num-layers $LAST"
    echo "- predicted from the FLOPs (the script's header): 14% less step time than even"
    echo
    python3 - "$WORK" "$ROUNDS" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print("| run | layers per stage | step ms, median | bubble measured, per stage (median) | loss at the last step |")
print("|---|---|---:|---|---:|")
ms = {"even": [], "split": []}
b0 = {"even": [], "split": []}
for r in range(1, rounds + 1):
    for kind in ("even", "split"):
        name = "%s%d" % (kind, r)
        log = open("%s/%s.log" % (work, name)).read()
        split = log.split("layers per stage ")[1].split(")")[0] if "layers per stage " in log else "4, 4"
        steps = [json.loads(l) for l in open("%s/%s.jsonl" % (work, name)) if '"loss"' in l][1:]
        t = statistics.median(s["step_ms"] for s in steps)
        stages = [statistics.median(s["bubble_stages"][i] for s in steps) for i in range(2)]
        ms[kind].append(t)
        b0[kind].append(stages[0])
        print("| %s | %s | %.1f | %s | %.4f |" % (name, split, t, " / ".join("%.3f" % b for b in stages),
                                                   steps[-1]["loss"]))
e, s_ = statistics.median(ms["even"]), statistics.median(ms["split"])
print()
print("Median over the rounds: even %.1f ms, split %.1f ms per step: %.1f%% less (predicted 14%%). Stage 0, "
      "which waits on the head's stage, idles %.3f of the step even and %.3f split. The losses are the same "
      "function's (every layout computes the single-rank losses, tests/parallel/par_train.py)."
      % (e, s_, 100 * (1 - s_ / e), statistics.median(b0["even"]), statistics.median(b0["split"])))
EOF
} >"$OUT"
cat "$OUT"
