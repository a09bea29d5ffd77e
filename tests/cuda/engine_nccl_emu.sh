#!/usr/bin/env bash
# atoll-train --device cuda on NCCL, several ranks each with a device of its
# own, on the emulated backend: ATOLL_EMU_GPUS makes that many emulated devices
# visible, so the engine picks NCCL (the emulated one, emu/nccl_emu.c: shared
# memory between the rank processes, each collective run on the NCCL stream
# behind the host, as on a GPU, so a kernel that does not wait for the
# collective it depends on reads what the collective has not yet written).
# A lent GPU machine has one GPU, and NCCL puts no two ranks on one GPU: this is
# where the NCCL paths run with more than one rank.
# - each layout's losses and gradient norms within 1e-4 of the CPU's single
#   rank: data parallel (its all-reduce queued layer by layer during the last
#   micro-batch's backward), with ZeRO-1 (reduces to the shards' owners, the
#   parameters' all-gather), tensor parallel with sequence parallelism,
#   interleaved pipeline stages (send/receive groups), dp2 x pp2 with ZeRO-1
#   (the tied embedding's group), tp2 x pp2;
# - a dp2 x pp2 checkpoint saved at step 2 on NCCL resumes there (the check of
#   the step's files shared over the world), the uninterrupted run's losses;
# - evaluation through interleaved stages (sends one at a time, each taken by
#   its receiver before it completes) on a dataset's validation split: the
#   CPU's validation losses within 1e-4;
# - each run says its collectives went on NCCL;
# - the pipeline's sends and receives wait on the device, not the host: pp2 x
#   vpp2 with twice the micro-batches a step (8, not 4: twice the send/receive
#   batches) has the host wait for the GPU no more often, and its measured
#   bubble (the device's stalls in the batches and the closing barrier, by
#   events) is above 0 and below 1 at each stage and step;
# - --overlap-wgrad (dp2, tp2 with sequence parallelism, dp2 x pp2 with ZeRO-1):
#   the weight gradients computed beside the backward (the emulation runs them
#   as late as a GPU may) give the losses and norms of the runs without, bit for bit.
#   engine_nccl_emu.sh ATOLL_TRAIN ATOLL_TRAIN_EMU WORKDIR
set -euo pipefail
train=$1
emu=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
flags=(--num-layers 4 --hidden-size 128 --num-attention-heads 2 --seq-length 64 --vocab-size 256
       --micro-batch-size 2 --global-batch-size 8 --train-iters 4 --lr 1e-3 --log-interval 1 --seed 9)
run() { # name, ranks (0: the CPU), then flags
  local name=$1 n=$2; shift 2
  if [ "$n" = 0 ]; then
    "$train" "${flags[@]}" --device cpu "$@" --metrics-file "$work/$name.jsonl" > "$work/$name.log" 2>&1
  else
    ATOLL_EMU_GPUS=$n "$emu" "${flags[@]}" --device cuda --nproc-per-node "$n" "$@" \
      --metrics-file "$work/$name.jsonl" > "$work/$name.log" 2>&1
  fi || { tail -20 "$work/$name.log"; echo "FAIL: $name did not run"; exit 1; }
}
run cpu 0
run dp2 2
run dp2_zero1 2 --use-distributed-optimizer
run tp2_sp 2 --tensor-model-parallel-size 2 --sequence-parallel
run pp2_vpp2 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
run pp2_vpp2_mb8 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 16
run dp2pp2_zero1 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer
run tp2pp2 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
# --overlap-wgrad: the weight gradients beside the backward, joined before each collective takes them
run dp2_ow 2 --overlap-wgrad
run tp2_sp_ow 2 --tensor-model-parallel-size 2 --sequence-parallel --overlap-wgrad
run dp2pp2_zero1_ow 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-wgrad
run dp2pp2_save 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --exit-interval 2 \
  --save "$work/ckpt" --save-interval 2
run dp2pp2_resume 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --load "$work/ckpt"
# a dataset with a validation split (ByteLevel: a token per byte)
mkdir -p "$work/docs"
words=(the harbour master kept a ledger of every boat that came into the lagoon each morning he wrote the name of
       the boat the weight of its catch and the direction of the wind)
for i in 0 1 2 3 4 5 6 7 8 9; do
  for ((j = 0; j < 60 + 9 * i; j++)); do printf '%s ' "${words[$(((7 * i + j) % ${#words[@]}))]}"; done > "$work/docs/$i.txt"
done
"$train" data prepare --input "$work"/docs/*.txt --output-prefix "$work/words" > "$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log"; echo "FAIL: data prepare"; exit 1; }
evals=(--data-path "$work/words" --split 7,3,0 --eval-interval 2 --eval-iters 2)
run cpu_eval 0 "${evals[@]}"
run pp2_vpp2_eval 2 "${evals[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
failures=0
for name in dp2 dp2_zero1 tp2_sp pp2_vpp2 dp2pp2_zero1 tp2pp2 dp2pp2_save dp2pp2_resume pp2_vpp2_eval dp2_ow tp2_sp_ow \
            dp2pp2_zero1_ow; do
  grep -q "; collectives on NCCL$" "$work/$name.log" ||
    { grep "ranks:" "$work/$name.log"; echo "FAIL: $name: its collectives were not on NCCL"; failures=$((failures + 1)); }
done
python3 - "$work" "$(dirname "$0")/../engine" <<'PY' || failures=$((failures + 1))
import json, sys
sys.path.insert(0, sys.argv[2])
from loss_series import Checks, losses, rel
w = sys.argv[1]
norms = lambda n: [json.loads(l)["grad_norm"] for l in open(f"{w}/{n}.jsonl") if '"grad_norm"' in l]
check = Checks()
cpu, cpu_norms = losses(w, "cpu"), norms("cpu")
for name in ("dp2", "dp2_zero1", "tp2_sp", "pp2_vpp2", "dp2pp2_zero1", "tp2pp2"):
    got, gn = losses(w, name), norms(name)
    ok = len(got) == len(gn) == len(cpu) == 4
    check(ok and rel(got, cpu) <= 1e-4 and rel(gn, cpu_norms) <= 1e-4,
          f"{name} on NCCL: the CPU's losses and gradient norms within 1e-4 "
          f"({rel(got, cpu) if ok else float('nan'):.1e}, {rel(gn, cpu_norms) if ok else float('nan'):.1e})")
for name in ("dp2", "tp2_sp", "dp2pp2_zero1"):
    got, gn, want, wn = losses(w, name + "_ow"), norms(name + "_ow"), losses(w, name), norms(name)
    check(len(got) == 4 and got == want and gn == wn,
          f"{name} on NCCL with --overlap-wgrad: the losses and gradient norms without it, bit for bit ({got} vs {want})")
s, r, whole = losses(w, "dp2pp2_save"), losses(w, "dp2pp2_resume"), losses(w, "dp2pp2_zero1")
check(len(s) == 2 and len(r) == 2 and s + r == whole,
      f"dp2 x pp2 with ZeRO-1 on NCCL, saved at step 2 and resumed: the uninterrupted run's losses bit for bit "
      f"({s + r} vs {whole})")
valid = lambda n: [json.loads(l)["valid_loss"] for l in open(f"{w}/{n}.jsonl") if '"valid_loss"' in l]
ve, vc, te, tc = valid("pp2_vpp2_eval"), valid("cpu_eval"), losses(w, "pp2_vpp2_eval"), losses(w, "cpu_eval")
ok = len(ve) == len(vc) == 2 and len(te) == len(tc) == 4
check(ok and rel(ve, vc) <= 1e-4 and rel(te, tc) <= 1e-4,
      f"pp2 x vpp2 on NCCL with evaluation: the CPU's training and validation losses within 1e-4 "
      f"({rel(te, tc) if ok else float('nan'):.1e}, {rel(ve, vc) if ok else float('nan'):.1e}; validation {ve})")
waits = lambda n: [int(l.split("waited for the GPU ")[1].split()[0]) for l in open(f"{w}/{n}.log")
                   if "the host waited for the GPU" in l]
w4, w8 = waits("pp2_vpp2"), waits("pp2_vpp2_mb8")
check(len(w4) == len(w8) == 1 and w8[0] <= w4[0],
      f"pp2 x vpp2 on NCCL: 8 micro-batches a step have the host wait for the GPU no more often than 4 "
      f"({w8} against {w4} times in 4 steps): sends and receives wait on the device")
for n in ("pp2_vpp2", "pp2_vpp2_mb8", "tp2pp2"):
    rows = [json.loads(l) for l in open(f"{w}/{n}.jsonl") if '"bubble_stages"' in l]
    st = [b for r in rows for b in r["bubble_stages"]]
    check(len(rows) == 4 and len(st) == 8 and all(0 < b < 1 for b in st),
          f"{n} on NCCL: the bubble measured on the device, above 0 and below 1 at each stage and step ({st})")
sys.exit(0 if check.ok else 1)
PY
[ "$failures" = 0 ] && echo "engine_nccl_emu: all checks passed" || { echo "engine_nccl_emu: $failures failed"; exit 1; }
