#!/usr/bin/env bash
# 50 training steps of one small GPT five ways: fp32 on the CPU (the reference),
# fp32 on cuda, bf16 on cuda (atoll's flash attention), bf16 on cuda with cuDNN's
# fused attention (--attention-backend fused), and the same with its backward's dQ
# summed by atomic adds (--nondeterministic-attention); same seed, data and schedule. Prints each run's
# loss every 10 steps and the largest relative difference from the reference. A sixth run, cuDNN's
# attention with the weight gradients on a second stream (--overlap-wgrad), must give the fused run's
# losses bit for bit: the check, on a GPU, that the two streams never race.
#
#   traj.sh ATOLL_TRAIN WORKDIR [OUTDIR]
#
# The data is a synthetic bigram language (bench/gpu/make_data.py): the loss
# falls from ln(256) = 5.5 towards the chain's entropy without memorising a
# small corpus (a memorising run's loss heads for 0, where any relative
# difference blows up and says nothing about the arithmetic).
#
# Tolerance: fp32 cuda within 1e-4 relative at every step (only the summation
# order differs); bf16 within 1e-2 relative at every step. bf16 keeps 8
# significant bits (unit roundoff 2^-9 = 2e-3); each step's loss is a mean over
# 8 x 128 tokens of a sum of rounded terms whose errors mostly cancel, and the
# fp32 master weights keep the updates from drifting, so a bf16 run that
# follows the fp32 run to 1e-2 over 50 steps is training the same function;
# a broken kernel moves it by far more (a wrong mask or scale: > 1e-1).
set -euo pipefail
train=${1:?usage: traj.sh ATOLL_TRAIN WORKDIR [OUTDIR]}
work=${2:?usage: traj.sh ATOLL_TRAIN WORKDIR [OUTDIR]}
out=${3:-$work}
mkdir -p "$work" "$out"
python3 "$(dirname "$0")/make_data.py" "$work/bigram" bigram 256 256 2048
flags=(--data-path "$work/bigram" --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 256
       --micro-batch-size 4 --global-batch-size 8 --train-iters 50 --lr 1e-3 --lr-warmup-iters 5
       --min-lr 1e-4 --clip-grad 1.0 --seed 11 --log-interval 1)
for run in cpu_fp32 cuda_fp32 cuda_bf16 cuda_fused cuda_atomic cuda_ow; do
  dev=${run%_*}
  case ${run#*_} in
    fp32) prec=() ;; bf16) prec=(--bf16) ;; fused) prec=(--bf16 --attention-backend fused) ;;
    atomic) prec=(--bf16 --attention-backend fused --nondeterministic-attention) ;;
    ow) prec=(--bf16 --attention-backend fused --overlap-wgrad) ;;
  esac
  rm -f "$work/$run.jsonl"
  "$train" "${flags[@]}" --device "$dev" "${prec[@]}" \
    --metrics-file "$work/$run.jsonl" > "$work/$run.log" 2>&1 || { tail -5 "$work/$run.log"; exit 1; }
done
# the fused runs must have run on cuDNN: every attention call, none declined to the flash kernels
for run in cuda_fused cuda_atomic; do
  grep 'attention calls' "$work/$run.log" || true
  grep -q 'on the flash kernels: 0;' "$work/$run.log" ||
    { echo "FAIL: $run did not run its attention on cuDNN"; grep 'kernels/cuda' "$work/$run.log"; exit 1; }
done
grep -q 'dQ summed by atomic adds' "$work/cuda_atomic.log" ||
  { echo "FAIL: cuda_atomic's backward did not sum dQ by atomic adds"; grep 'kernels/cuda' "$work/cuda_atomic.log"; exit 1; }
python3 - "$work" "$out" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
names = ("cpu_fp32", "cuda_fp32", "cuda_bf16", "cuda_fused", "cuda_atomic")
runs = {r: [json.loads(l)["loss"] for l in open(f"{work}/{r}.jsonl")] for r in names}
ref = runs["cpu_fp32"]
assert len(ref) == 50 and all(len(v) == 50 for v in runs.values()), {k: len(v) for k, v in runs.items()}
lines = ["| step | cpu fp32 | cuda fp32 | cuda bf16 | cuda bf16, cuDNN attention | the same, dQ by atomic adds |",
         "|---:|---:|---:|---:|---:|---:|"]
for i in list(range(0, 50, 10)) + [49]:
    lines.append(f"| {i + 1} | " + " | ".join(f"{runs[r][i]:.5f}" for r in names) + " |")
err = {r: max(abs(a - b) / abs(b) for a, b in zip(runs[r], ref)) for r in names[1:]}
open(f"{out}/traj.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
ow = [json.loads(l)["loss"] for l in open(f"{work}/cuda_ow.jsonl")]
ok = err["cuda_fp32"] <= 1e-4 and err["cuda_bf16"] <= 1e-2 and err["cuda_fused"] <= 1e-2 and err["cuda_atomic"] <= 1e-2
print(f"{'pass' if ow == runs['cuda_fused'] else 'FAIL'}: --overlap-wgrad: the cuDNN run's 50 losses bit for bit "
      f"({sum(a != b for a, b in zip(ow, runs['cuda_fused'])) + abs(len(ow) - 50)} of 50 differ)")
ok = ok and ow == runs["cuda_fused"]
print(f"{'pass' if ok else 'FAIL'}: max relative loss difference from cpu fp32 over 50 steps: "
      f"cuda fp32 {err['cuda_fp32']:.1e} (limit 1e-4), cuda bf16 {err['cuda_bf16']:.1e} (limit 1e-2), "
      f"cuda bf16 with cuDNN attention {err['cuda_fused']:.1e}, with its dQ by atomic adds {err['cuda_atomic']:.1e} "
      f"(limit 1e-2)")
sys.exit(0 if ok else 1)
PY
