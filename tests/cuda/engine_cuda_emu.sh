#!/usr/bin/env bash
# atoll-train --device cuda end to end on the emulated backend (atoll-train-emu:
# the CUDA kernels and cuBLAS calls run on the CPU, tests/cuda/emu): the
# engine's cuda paths as a user starts them, against the CPU backend.
# - one rank, fp32: the CPU's losses within 1e-5 (summation order only);
# - tp2 x pp2 and dp2 with ZeRO-1 on 4 and 2 ranks: they share the one
#   emulated device, so they stage device buffers through the host transport
#   (page-locked staging, as ranks sharing a GPU; the run says so): the CPU's
#   within 1e-4 (engine_nccl_emu.sh runs layouts on NCCL);
# - one rank, bf16 (flash attention, fused classifier): the CPU's bf16
#   within 1e-2, and a bf16 checkpoint saved at step 2 resumes bit for bit;
# - the refusals a cuda run gives: bf16 at a head dim flash attention lacks,
#   --attention-backend fused without cuDNN (auto, the default, runs the
#   flash kernels there and says so);
# - --enable-cuda-graph: one graph recorded, the other micro-batches launched
#   from it, the losses bit for bit those without (fp32, bf16, --tune-gemms,
#   a batch-size ramp, which records it anew),
#   its attention calls counted, one host wait a step; a note on two ranks
#   and on the CPU;
# - --tune-gemms: its choices written beside the checkpoint and read back by a
#   restart (which chooses none anew and repeats the losses), a malformed
#   choices file refused with its line, a note on the CPU;
# - --overlap-wgrad: the weight-gradient GEMMs on a second stream, which the
#   emulation runs as late as a GPU may: the losses bit for bit those without
#   (fp32, bf16, with graphs, tp2 x pp2, full recompute, a LLaMA layer with head
#   norms, separate q/k/v and hidden dropout), each GEMM counted; a note on the CPU.
#   engine_cuda_emu.sh ATOLL_TRAIN ATOLL_TRAIN_EMU WORKDIR
set -euo pipefail
train=$1
emu=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
flags=(--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 64 --vocab-size 256
       --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 1 --seed 9)
run() { # name, program, then its flags
  local name=$1 prog=$2; shift 2
  "$prog" "${flags[@]}" "$@" --metrics-file "$work/$name.jsonl" > "$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; echo "FAIL: $name did not run"; exit 1; }
}
run cpu "$train" --device cpu
run cpu_bf16 "$train" --device cpu --bf16
run cuda "$emu" --device cuda
run cuda_tp2pp2 "$emu" --device cuda --nproc-per-node 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
run cuda_dp2_zero1 "$emu" --device cuda --nproc-per-node 2 --use-distributed-optimizer
run cuda_bf16 "$emu" --device cuda --bf16
run cuda_bf16_6 "$emu" --device cuda --bf16 --train-iters 6
# --enable-cuda-graph: each micro-batch's kernels recorded once and launched from the graph
run cuda_graph "$emu" --device cuda --enable-cuda-graph
run cuda_bf16_graph "$emu" --device cuda --bf16 --enable-cuda-graph
run cuda_bf16_graph_6 "$emu" --device cuda --bf16 --enable-cuda-graph --train-iters 6
run cuda_tune_graph "$emu" --device cuda --bf16 --tune-gemms --enable-cuda-graph
# a batch-size ramp changes the loss weights: the graph is recorded anew
ramp=(--global-batch-size 8 --train-iters 6 --rampup-batch-size 4 4 12)
run cuda_ramp "$emu" --device cuda --bf16 "${ramp[@]}"
run cuda_ramp_graph "$emu" --device cuda --bf16 "${ramp[@]}" --enable-cuda-graph
run cuda_graph_tp2 "$emu" --device cuda --nproc-per-node 2 --tensor-model-parallel-size 2 --enable-cuda-graph
run cpu_graph "$train" --device cpu --enable-cuda-graph
run cuda_bf16_save "$emu" --device cuda --bf16 --exit-interval 2 --save "$work/ckpt" --save-interval 2
run cuda_bf16_resume "$emu" --device cuda --bf16 --load "$work/ckpt"
# --tune-gemms: the choices are written beside the checkpoint and read back by the restart
run cuda_tune_save "$emu" --device cuda --bf16 --tune-gemms --exit-interval 2 --save "$work/ckpt_tune" --save-interval 2
run cuda_tune_resume "$emu" --device cuda --bf16 --tune-gemms --load "$work/ckpt_tune" --save "$work/ckpt_tune"
run cpu_tune "$train" --device cpu --tune-gemms
# --nondeterministic-attention changes cuDNN's attention backward only: elsewhere a note, the same losses
run cpu_nondet "$train" --device cpu --nondeterministic-attention
run cuda_bf16_nondet "$emu" --device cuda --bf16 --nondeterministic-attention
# --overlap-wgrad: the weight-gradient GEMMs on a second stream (the emulation runs its work as late as a GPU may:
# when something waits for it); the same bits as in order, in each path that reuses a buffer such a GEMM reads
run cuda_ow "$emu" --device cuda --overlap-wgrad
run cuda_bf16_ow "$emu" --device cuda --bf16 --overlap-wgrad
run cuda_bf16_graph_ow "$emu" --device cuda --bf16 --enable-cuda-graph --overlap-wgrad
run cuda_tp2pp2_ow "$emu" --device cuda --nproc-per-node 4 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --overlap-wgrad
full=(--bf16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
run cuda_full "$emu" --device cuda "${full[@]}"
run cuda_full_ow "$emu" --device cuda "${full[@]}" --overlap-wgrad
llama=(--bf16 --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --qk-layernorm
       --group-query-attention --num-query-groups 1 --untie-embeddings-and-output-weights --hidden-dropout 0.1)
run cuda_llama "$emu" --device cuda "${llama[@]}"
run cuda_llama_ow "$emu" --device cuda "${llama[@]}" --overlap-wgrad
run cpu_ow "$train" --device cpu --overlap-wgrad
failures=0
choices=$work/ckpt_tune/gemm_choices_rank0.txt
n=$(grep -c ' - ' "$choices" 2>/dev/null || true)
if [ "${n:-0}" -ge 4 ] && grep -q "chosen by time: $n, read from --save: 0" "$work/cuda_tune_save.log" &&
   grep -q "$n GEMM algorithm choices read from $choices" "$work/cuda_tune_resume.log" &&
   grep -q "chosen by time: 0, read from --save: $n" "$work/cuda_tune_resume.log"; then
  echo "ok: --tune-gemms: $n choices written beside the checkpoint, read back by the restart, none chosen anew"
else
  tail -3 "$work/cuda_tune_save.log" "$work/cuda_tune_resume.log"; echo "FAIL: --tune-gemms choices (${n:-0} in $choices)"
  failures=$((failures + 1))
fi
# one rank: a step waits for the GPU once (its gradient norm, which brings the losses of both micro-batches);
# the uploads and loss reads do not wait
waits() { sed -n 's/^atoll-train: the host waited for the GPU \([0-9]*\) times.*/\1/p' "$work/$1.log"; }
w4=$(waits cuda_bf16) w6=$(waits cuda_bf16_6)
if [ -n "$w4" ] && [ -n "$w6" ] && [ $((w6 - w4)) = 2 ]; then
  echo "ok: one rank, 2 micro-batches a step: the host waits for the GPU once a step ($w4 in 4 steps, $w6 in 6)"
else
  echo "FAIL: host waits a step: ${w4:-?} in 4 steps, ${w6:-?} in 6 (want one more a step)"; failures=$((failures + 1))
fi
# one recording, then every micro-batch but the first (which makes the first calls) launched from it
for name in cuda_graph cuda_bf16_graph cuda_tune_graph cuda_bf16_graph_ow; do
  if grep -q "^atoll-train: --enable-cuda-graph: 1 graph recorded, 7 micro-batches launched from them" "$work/$name.log"; then
    echo "ok: $name: 1 graph recorded, 7 of 8 micro-batches launched from it"
  else
    tail -3 "$work/$name.log"; echo "FAIL: $name: not 1 graph for 7 micro-batches"; failures=$((failures + 1))
  fi
done
grep -q "^atoll-train: --enable-cuda-graph: 2 graphs recorded" "$work/cuda_ramp_graph.log" &&
  echo "ok: a batch-size ramp records the graph anew: $(grep -o 'enable-cuda-graph: .*' "$work/cuda_ramp_graph.log")" ||
  { tail -3 "$work/cuda_ramp_graph.log"; echo "FAIL: the ramp did not record a second graph"; failures=$((failures + 1)); }
calls() { grep -o 'attention calls on.*flash kernels: [0-9]*' "$work/$1.log"; }
[ -n "$(calls cuda_bf16)" ] && [ "$(calls cuda_bf16)" = "$(calls cuda_bf16_graph)" ] &&
  echo "ok: the attention calls launched from graphs are counted ($(calls cuda_bf16_graph))" ||
  { echo "FAIL: attention calls with graphs: '$(calls cuda_bf16_graph)', without: '$(calls cuda_bf16)'"; failures=$((failures + 1)); }
w4=$(waits cuda_bf16_graph) w6=$(waits cuda_bf16_graph_6)
[ -n "$w4" ] && [ -n "$w6" ] && [ $((w6 - w4)) = 2 ] && echo "ok: with graphs too, one wait a step" ||
  { echo "FAIL: with graphs: ${w4:-?} waits in 4 steps, ${w6:-?} in 6"; failures=$((failures + 1)); }
grep -q "note: --enable-cuda-graph: one rank only" "$work/cuda_graph_tp2.log" ||
  { echo "FAIL: --enable-cuda-graph on two ranks gave no note"; failures=$((failures + 1)); }
grep -q "note: --enable-cuda-graph records CUDA kernels: nothing to record on --device cpu" "$work/cpu_graph.log" ||
  { echo "FAIL: --enable-cuda-graph on the CPU gave no note"; failures=$((failures + 1)); }
grep -q "note: --tune-gemms chooses cuBLASLt's algorithms: nothing to choose on --device cpu" "$work/cpu_tune.log" ||
  { echo "FAIL: --tune-gemms on the CPU gave no note"; failures=$((failures + 1)); }
grep -q "note: --nondeterministic-attention sums cuDNN's attention gradients by atomic adds (cuda --bf16, --attention-backend auto or fused): nothing changes on the CPU" "$work/cpu_nondet.log" ||
  { echo "FAIL: --nondeterministic-attention on the CPU gave no note"; failures=$((failures + 1)); }
grep -q "attention calls on cuDNN's fused attention: 0, on the flash kernels: [1-9][0-9]*; cuDNN workspace 0.0 MiB$" \
  "$work/cuda_bf16_nondet.log" ||
  { tail -3 "$work/cuda_bf16_nondet.log"; echo "FAIL: without cuDNN, --nondeterministic-attention claimed atomic adds"; failures=$((failures + 1)); }
# 2 micro-batches a step of 2 layers of 4 GEMMs and the classifier: 18 a step; with graphs, the first micro-batch's
# and the recording's (the 7 launched from the graph repeat the recorded ones)
for n in cuda_ow:72 cuda_bf16_ow:72 cuda_full_ow:72 cuda_bf16_graph_ow:18; do
  name=${n%:*} want=${n#*:}
  grep -q "^atoll-train: --overlap-wgrad: $want weight gradients queued beside the backward" "$work/$name.log" &&
    echo "ok: $name: $want weight gradients queued beside the backward" ||
    { tail -3 "$work/$name.log"; echo "FAIL: $name: not $want weight gradients beside"; failures=$((failures + 1)); }
done
grep -q "note: --overlap-wgrad runs the weight-gradient GEMMs on a second CUDA stream: nothing changes on --device cpu" \
  "$work/cpu_ow.log" || { echo "FAIL: --overlap-wgrad on the CPU gave no note"; failures=$((failures + 1)); }
grep -q "atoll-train: cuda," "$work/cuda.log" || { echo "FAIL: the emulated run did not say it ran on cuda"; failures=1; }
# four ranks on the one emulated device: the host transport, staging device buffers (engine_nccl_emu has NCCL)
grep -q "; collectives on the host transport (the ranks share a GPU" "$work/cuda_tp2pp2.log" ||
  { grep "ranks:" "$work/cuda_tp2pp2.log"; echo "FAIL: ranks sharing a GPU did not say they stage through the host"; failures=$((failures + 1)); }
# --attention-backend auto (the default) without cuDNN: the flash kernels, said at the end of the run
grep -q "attention calls on cuDNN's fused attention: 0, on the flash kernels: [1-9]" "$work/cuda_bf16.log" ||
  { tail -3 "$work/cuda_bf16.log"; echo "FAIL: auto without cuDNN did not run the flash kernels"; failures=$((failures + 1)); }
python3 - "$work" "$(dirname "$0")/../engine" <<'PY' || failures=$((failures + 1))
import sys
sys.path.insert(0, sys.argv[2])
from loss_series import Checks, losses, rel
w = sys.argv[1]
L = lambda n: losses(w, n)
check = Checks()
cpu, cpu16 = L("cpu"), L("cpu_bf16")
for name, ref, tol in (("cuda", cpu, 1e-5), ("cuda_tp2pp2", cpu, 1e-4), ("cuda_dp2_zero1", cpu, 1e-4),
                       ("cuda_bf16", cpu16, 1e-2)):
    got = L(name)
    check(len(got) == len(ref) == 4 and rel(got, ref) <= tol,
          f"{name}: {len(got)} steps, the CPU's losses within {tol:.0e} ({rel(got, ref) if got else float('nan'):.1e})")
b, r = L("cuda_bf16"), L("cuda_bf16_resume")
check(len(r) == 2 and r == b[2:], f"the bf16 checkpoint resumes bit for bit at step 3 ({r} vs {b[2:]})")
for name, ref in (("cuda_graph", "cuda"), ("cuda_bf16_graph", "cuda_bf16"), ("cuda_tune_graph", "cuda_bf16"),
                  ("cuda_graph_tp2", "cuda_tp2pp2")):
    got, want = L(name), L(ref)
    if name == "cuda_graph_tp2":  # no graphs there: the CPU's losses as the 4-rank layout's
        check(len(got) == 4 and rel(got, cpu) <= 1e-4, f"{name}: without graphs, the CPU's losses ({got})")
        continue
    check(len(got) == 4 and got == want, f"{name}: the losses of the run without graphs, bit for bit ({got} vs {want})")
g, ng = L("cuda_ramp_graph"), L("cuda_ramp")
check(len(g) == 6 and g == ng, f"cuda_ramp_graph: the losses of the ramp without graphs, bit for bit ({g} vs {ng})")
t, tr = L("cuda_tune_save"), L("cuda_tune_resume")
check(t + tr == b, f"--tune-gemms: saved and resumed, the bf16 run's losses bit for bit ({t + tr} vs {b})")
import re
mem = re.search(r"device memory: the run took ([0-9.]+) GiB at its peak; the check before the start estimated ([0-9.]+) "
                r"GiB \(([0-9.]+) of weights", open(f"{w}/cuda_bf16.log").read())
took, est, state = (float(x) for x in mem.groups()) if mem else (0.0, 0.0, 0.0)
check(mem and took >= state > 0 and est >= state,
      f"device memory: the run took {took} GiB at its peak (the backend's workspace and scratch included), at least "
      f"the {state} GiB of weights and optimizer state the check estimated (of {est} GiB)")
for name, ref in (("cpu_nondet", "cpu"), ("cuda_bf16_nondet", "cuda_bf16")):
    got, want = L(name), L(ref)
    check(len(got) == 4 and got == want, f"{name}: the flash kernels and the CPU are deterministic: {ref}'s losses "
          f"bit for bit ({got} vs {want})")
for name, ref in (("cuda_ow", "cuda"), ("cuda_bf16_ow", "cuda_bf16"), ("cuda_bf16_graph_ow", "cuda_bf16"),
                  ("cuda_tp2pp2_ow", "cuda_tp2pp2"), ("cuda_full_ow", "cuda_full"), ("cuda_llama_ow", "cuda_llama"),
                  ("cpu_ow", "cpu")):
    got, want = L(name), L(ref)
    check(len(got) == 4 and got == want, f"{name}: the weight gradients beside the backward give {ref}'s losses, "
          f"bit for bit ({got} vs {want})")
check(L("cuda") != cpu, "the emulated cuda run is not the CPU backend (the losses differ in the last bits)")
sys.exit(0 if check.ok else 1)
PY
refuse() { # name, expected message, then flags
  local name=$1 want=$2; shift 2
  if "$emu" "${flags[@]}" --device cuda "$@" > "$work/$name.log" 2>&1; then
    echo "FAIL: $name was accepted"; failures=$((failures + 1))
  elif grep -q -- "$want" "$work/$name.log"; then
    echo "ok: $name refused: $(grep -m1 -- "$want" "$work/$name.log")"
  else
    cat "$work/$name.log"; echo "FAIL: $name: no '$want' in the refusal"; failures=$((failures + 1))
  fi
}
refuse bf16_head_dim_32 "head dim 64 or 128" --hidden-size 96 --num-attention-heads 3 --bf16
refuse fused_without_cudnn "no cuDNN" --bf16 --attention-backend fused
printf 'atoll-gemm-choices 1\ndevice CPU emulation\ncublaslt 130000\n1 2 3\n' > "$choices"
refuse tune_bad_choices "line 4: expected 18 numbers" --bf16 --tune-gemms --load "$work/ckpt_tune" --save "$work/ckpt_tune"
[ "$failures" = 0 ] && echo "engine_cuda_emu: all checks passed" || echo "engine_cuda_emu: $failures failure(s)"
exit $((failures > 0))
