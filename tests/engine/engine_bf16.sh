#!/usr/bin/env bash
# --bf16 through atoll-train on the CPU backend (its bf16 entries widen, run the
# fp32 op and round, as the CUDA ones do): the engine's mixed-precision path
# (bf16 weights copy, activations and gradients, fp32 masters) trains the same
# function as fp32 to bf16 precision, in one rank and in tp2 x pp2 with
# sequence parallel; a bf16 checkpoint resumes exactly; the LLaMA family with
# dropout follows fp32 in bf16 too, and so do documents (--reset-position-ids
# --reset-attention-mask: nearer fp32 with documents than fp32 without), and so does a Nemotron-style GPT
# (--squared-relu, --apply-layernorm-1p, --rotary-percent 0.5), in one rank, in tp2 x pp2 with sequence parallel, and resumed
# exactly from a bf16 checkpoint (the 1 + w weights rebuilt from the saved w); --bf16 on a head dim
# the CUDA flash attention lacks is refused on cuda with a message.
#   engine_bf16.sh ATOLL_TRAIN WORKDIR
set -euo pipefail
train=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
flags=(--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 64 --micro-batch-size 4
       --global-batch-size 8 --train-iters 12 --lr 1e-3 --log-interval 1 --seed 3)
run() { local name=$1; shift; "$train" "${flags[@]}" "$@" --metrics-file "$work/$name.jsonl" > "$work/$name.log" 2>&1 ||
        { cat "$work/$name.log"; echo "FAIL: $name did not run"; exit 1; }; }
run fp32
run bf16 --bf16
run bf16_tp2pp2 --bf16 --nproc-per-node 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel
run bf16_save --bf16 --exit-interval 6 --save "$work/ckpt" --save-interval 6
run bf16_resume --bf16 --load "$work/ckpt"
llama=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention --num-query-groups 1
       --disable-bias-linear --untie-embeddings-and-output-weights --hidden-dropout 0.1 --attention-dropout 0.1)
run llama_fp32 "${llama[@]}"
run llama_bf16 "${llama[@]}" --bf16
run llama_bf16_tp2pp2 "${llama[@]}" --bf16 --nproc-per-node 4 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --sequence-parallel --num-query-groups 2
nemotron=(--squared-relu --apply-layernorm-1p --position-embedding-type rope --rotary-percent 0.5 --disable-bias-linear
          --untie-embeddings-and-output-weights)
run nem_fp32 "${nemotron[@]}"
run nem_bf16 "${nemotron[@]}" --bf16
run nem_bf16_tp2pp2 "${nemotron[@]}" --bf16 --nproc-per-node 4 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --sequence-parallel
run nem_bf16_save "${nemotron[@]}" --bf16 --exit-interval 6 --save "$work/nem_ckpt" --save-interval 6
run nem_bf16_resume "${nemotron[@]}" --bf16 --load "$work/nem_ckpt"
python3 -c 'import json
for i in range(400): print(json.dumps({"text": "abcdefghijklmnopqrstuvwxyz"[: 4 + (i * 7) % 23]}))' >"$work/docs.jsonl"
"$(dirname "$train")/atoll" data prepare --input "$work/docs.jsonl" --output-prefix "$work/docs" >/dev/null
docs=(--data-path "$work/docs" --split 1,0,0)
run doc_fp32_one "${docs[@]}"
run doc_fp32 "${docs[@]}" --reset-position-ids --reset-attention-mask
run doc_bf16 "${docs[@]}" --reset-position-ids --reset-attention-mask --bf16
python3 - "$work" "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from loss_series import Checks, losses, rel
w = sys.argv[1]
L = lambda n: losses(w, n)
fp32, bf16, tp, resumed = L("fp32"), L("bf16"), L("bf16_tp2pp2"), L("bf16_resume")
check = Checks()
check(len(fp32) == len(bf16) == len(tp) == 12, f"12 steps each ({len(fp32)}, {len(bf16)}, {len(tp)})")
check(rel(bf16, fp32) <= 1e-2, f"bf16 follows fp32 within 1e-2 ({rel(bf16, fp32):.1e})")
check(rel(bf16, fp32) > 0, "bf16 is not fp32 in disguise (the losses differ)")
check(rel(tp, bf16) <= 1e-2, f"bf16 tp2 x pp2 x sp follows one bf16 rank within 1e-2 ({rel(tp, bf16):.1e})")
check(len(resumed) == 6 and resumed == bf16[6:], f"the bf16 checkpoint resumes bit-exactly at step 7 ({resumed[:2]} vs {bf16[6:8]})")
lf, lb, lt = L("llama_fp32"), L("llama_bf16"), L("llama_bf16_tp2pp2")
check(len(lf) == len(lb) == 12 and 0 < rel(lb, lf) <= 1e-2,
      f"LLaMA family with dropout: bf16 follows fp32 within 1e-2 ({rel(lb, lf):.1e})")
check(len(lt) == 12 and lt[0] > 0, f"LLaMA bf16 tp2 x pp2 x sp (2 key/value groups) trains ({lt[:2]})")
nf, nb, nt, nr = L("nem_fp32"), L("nem_bf16"), L("nem_bf16_tp2pp2"), L("nem_bf16_resume")
check(len(nf) == len(nb) == len(nt) == 12 and 0 < rel(nb, nf) <= 1e-2 and rel(nt, nb) <= 1e-2 and nf != fp32,
      f"Nemotron-style: bf16 follows fp32 within 1e-2 ({rel(nb, nf):.1e}), tp2 x pp2 x sp one bf16 rank "
      f"({rel(nt, nb):.1e}), and it is not the GPT-2 model")
check(len(nr) == 6 and nr == nb[6:], f"the Nemotron-style bf16 checkpoint resumes bit-exactly at step 7 ({nr[:2]} vs {nb[6:8]})")
d1, df, db = L("doc_fp32_one"), L("doc_fp32"), L("doc_bf16")
check(len(d1) == len(df) == len(db) == 12 and rel(db, df) <= 1e-2 and rel(db, df) < rel(db, d1) / 2,
      f"documents: bf16 follows fp32 within 1e-2 ({rel(db, df):.1e}), nearer than fp32 without documents "
      f"({rel(db, d1):.1e})")
sys.exit(0 if check.ok else 1)
PY
if "$train" "${flags[@]}" --hidden-size 96 --num-attention-heads 3 --bf16 --device cuda > "$work/refuse.log" 2>&1; then
  echo "FAIL: --bf16 with head dim 32 on cuda was accepted"; exit 1
fi
if grep -q "no usable CUDA device\|not built with the CUDA kernels" "$work/refuse.log"; then
  echo "ok: no GPU here; the head-dim refusal is checked on the GPU run (bench/gpu/run.sh)"
else
  grep -q "head dim 64 or 128" "$work/refuse.log" || { cat "$work/refuse.log"; echo "FAIL: unclear refusal"; exit 1; }
  echo "ok: --bf16 with head dim 32 on cuda is refused: $(cat "$work/refuse.log")"
fi
echo "engine_bf16: all checks passed"
