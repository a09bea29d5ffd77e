#!/usr/bin/env bash
# atoll plan, offline: --json shape, fixed flags, --explain, refusals and exit codes.
set -u
atoll=$1
fail=0
check() { if eval "$2"; then :; else echo "FAIL: $1"; fail=1; fi; }
model="--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --vocab-size 51200 --global-batch-size 1536"

out=$("$atoll" plan $model --num-gpus 1024 --gpu a100-80gb --top 3 --json); rc=$?
check "json rc 0" '[ $rc -eq 0 ]'
for k in tp pp dp micro_batch vpp sp recompute zero1 step_s tflops_per_gpu mfu bubble memory_bytes_per_gpu; do
  check "json key $k" '[[ "$out" == *"\"$k\":"* ]]'
done
check "three candidates" '[ "$(grep -o "\"step_s\"" <<<"$out" | wc -l)" -eq 3 ]'
check "starts with candidates" '[[ "$out" == "{\"candidates\":[{"* ]]'

out=$("$atoll" plan $model --num-gpus 1024 --gpu a100-80gb --tensor-model-parallel-size 4 --recompute-granularity full --json); rc=$?
check "fixed rc" '[ $rc -eq 0 ]'
check "fixed tp kept" '! grep -q "\"tp\":[^4]" <<<"$out"'
check "fixed recompute kept" '! grep -q "\"recompute\":\"\(none\|selective\)\"" <<<"$out"'

# 24k tokens on tp 2: only full recompute fits, and full recompute of the first N layers (block) is offered first
long="--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 24576 --global-batch-size 64"
long="$long --num-gpus 8 --gpu h100-sxm --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1"
long="$long --micro-batch-size 1 --sequence-parallel"
out=$("$atoll" plan $long --json); rc=$?
check "block rc" '[ $rc -eq 0 ]'
check "block first" '[[ "$out" == "{\"candidates\":[{"*"\"recompute\":\"full\",\"recompute_method\":\"block\",\"recompute_num_layers\":"[1-9]* ]]'
out=$("$atoll" plan $long --top 1); rc=$?
check "block in the table" '[ $rc -eq 0 ] && grep -q "^1 .* block [0-9]" <<<"$out"'

out=$("$atoll" plan $model --num-gpus 1024 --gpu a100-80gb --explain); rc=$?
check "explain rc" '[ $rc -eq 0 ]'
check "explain terms" '[[ "$out" == *"step time"*"compute"*"bubble"*"memory per GPU"* ]]'

out=$("$atoll" plan $model --num-gpus 8 --gpu a100-80gb --json); rc=$?
check "nothing fits: rc 1" '[ $rc -eq 1 ]'
check "nothing fits: reason" '[[ "$out" == *"\"candidates\":[]"*"\"reason\":"*"GiB per GPU"* ]]'

err=$("$atoll" plan $model --gpu a100-80gb 2>&1 >/dev/null); rc=$?
check "no --num-gpus: usage" '[ $rc -eq 2 ] && [[ "$err" == *"--num-gpus"* ]]'
err=$("$atoll" plan $model --num-gpus 64 --gpu v100 2>&1 >/dev/null); rc=$?
check "unknown gpu: usage" '[ $rc -eq 2 ] && [[ "$err" == *"v100"*"h100-sxm"* ]]'
err=$("$atoll" plan $model --num-gpus 64 --top 0 2>&1 >/dev/null); rc=$?
check "bad --top" '[ $rc -eq 2 ] && [[ "$err" == *"--top"* ]]'
err=$("$atoll" plan --num-layers 4 --hidden-size 64 --num-attention-heads 3 --seq-length 8 --global-batch-size 8 --num-gpus 8 2>&1 >/dev/null); rc=$?
check "bad model: usage naming the rule" '[ $rc -eq 2 ] && [[ "$err" == *"divisible"* ]]'
[ $fail -eq 0 ] && echo "plan_cli: all checks passed"
exit $fail
