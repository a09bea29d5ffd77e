#!/usr/bin/env bash
# End-to-end checks of atoll-train on the CPU backend:
#   overfit  - a short repeated text is learned to a loss below 0.1
#   resume   - 20 steps straight == 10 steps, stop, resume, 10 more (bit-identical losses),
#              also when the newest checkpoint is corrupt and an older one must be used, and
#              with --async-save (the same files, byte for byte)
#   bad input - truncated .idx, short .bin, checkpoint of another shape, hidden % heads:
#              one-line error naming the file/flag, non-zero exit, nothing written
# usage: engine_cli.sh ATOLL_TRAIN PREPARE_TOOL WORKDIR
set -uo pipefail
TRAIN=$(realpath "$1") PREP=$(realpath "$2") W=$3
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" # tests/st_read.py, tests/ckpt_sum.py
. "$(cd "$(dirname "$0")" && pwd)/check_lib.sh"
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1

TINY=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 4 --global-batch-size 8)

# ---- overfit ----
for i in $(seq 40); do printf 'hello atoll, tiny model! '; done > rep.txt
"$PREP" --input rep.txt --output-prefix rep >/dev/null || bad "data prepare failed"
"$TRAIN" "${TINY[@]}" --train-iters 150 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 \
    --data-path rep --split 1,0,0 --log-interval 10 --metrics-file overfit.jsonl >overfit.log 2>&1 \
    || bad "overfit run failed: $(tail -1 overfit.log)"
final=$(losses overfit.jsonl | tail -1 | cut -d: -f2)
first=$(losses overfit.jsonl | head -1 | cut -d: -f2)
if [ -n "$final" ] && awk -v f="$final" 'BEGIN { exit !(f < 0.1) }'; then ok "overfit: loss $first -> $final"
else bad "overfit: final loss $final is not below 0.1"; fi

# ---- resume ----
RUN=("${TINY[@]}" --micro-batch-size 2 --train-iters 20 --lr 1e-3 --lr-warmup-iters 3 --seed 11)
"$TRAIN" "${RUN[@]}" --metrics-file straight.jsonl >/dev/null 2>&1 || bad "straight run failed"
"$TRAIN" "${RUN[@]}" --exit-interval 10 --save ck --save-interval 5 --metrics-file part.jsonl >/dev/null 2>&1 \
    || bad "first half failed"
[ -f ck/iter_0000010/manifest.json ] && [ "$(cat ck/latest_checkpointed_iteration.txt)" = 10 ] \
    || bad "checkpoint 10 not committed"
# the manifest's sums against tests/ckpt_sum.py, atoll64 written again from its definition
if sums=$(python3 -c 'import ckpt_sum, sys; bad = ckpt_sum.check_step(sys.argv[1]); print("; ".join(bad)); sys.exit(bool(bad))' \
        ck/iter_0000010 2>&1); then
    ok "checkpoint 10: every file's size and atoll64 sum equal its manifest's (Python twin)"
else
    bad "checkpoint 10's sums: $sums"
fi
cp -r ck ck_copy
"$TRAIN" "${RUN[@]}" --load ck --metrics-file part.jsonl >resume.log 2>&1 || bad "resume failed: $(tail -1 resume.log)"
if [ "$(losses straight.jsonl | wc -l)" = 20 ] && diff <(losses straight.jsonl) <(losses part.jsonl) >/dev/null; then
    ok "resume: 20 straight == 10 + 10, bit-identical losses"
else
    bad "resume: losses differ"; diff <(losses straight.jsonl) <(losses part.jsonl) | head -5
fi

# the same with --async-save: the same committed steps, byte for byte, and the same resume
"$TRAIN" "${RUN[@]}" --exit-interval 10 --save cka --save-interval 5 --async-save --metrics-file parta.jsonl \
    >/dev/null 2>&1 || bad "first half with --async-save failed"
same=1
for f in model.safetensors optim.safetensors train_state.json; do
    cmp -s "ck/iter_0000010/$f" "cka/iter_0000010/$f" || same=0
    cmp -s "ck/iter_0000005/$f" "cka/iter_0000005/$f" || same=0
done
"$TRAIN" "${RUN[@]}" --load cka --async-save --metrics-file parta.jsonl >resumea.log 2>&1 || bad "async resume failed"
if [ $same = 1 ] && [ -f cka/iter_0000010/manifest.json ] && diff <(losses straight.jsonl) <(losses parta.jsonl) >/dev/null; then
    ok "--async-save: checkpoints byte-identical to the synchronous ones, bit-identical resume"
else
    bad "--async-save: files same=$same, losses: $(diff <(losses straight.jsonl) <(losses parta.jsonl) | head -3)"
fi

# ---- another run's checkpoint: --finetune, --no-load-optim, --no-load-rng, --exit-on-missing-checkpoint ----
# adam_first_step A B LR: B is one AdamW step from A's weights with fresh moments (bias correction at t=1),
# so every weight that had a gradient moved by lr x g/(|g|+eps) ~ lr past its decay; prints the median of
# |step|/lr over the weights that moved (moments carried over, or t counted from the old iteration: ~0.5)
adam_first_step() {
    python3 - "$@" <<'EOF'
import sys, st_read
a, b, lr, wd = st_read.arrays(sys.argv[1]), st_read.arrays(sys.argv[2]), float(sys.argv[3]), 0.01
r = sorted(abs(y - x + lr * wd * x) / lr for k in a for x, y in zip(a[k], b[k]) if abs(y - x + lr * wd * x) > 0.05 * lr)
print(f"{r[len(r) // 2]:.4f}" if len(r) > 1000 else "none")
EOF
}
state() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1/train_state.json" "$2"; }
first_lr() { head -1 "$1" | grep -o '"lr":[^,]*' | cut -d: -f2; }
lr_logged() { sed -n "$2p" "$1" | grep -o '"lr":[^,]*' | cut -d: -f2; } # FILE N: the rate logged at its line N
# Step i updates with the rate logged at step i - 1 (as in Megatron): without warm-up the fine-tune's first
# step takes --lr (1e-3), where a warm-up's first step would take 0 and not move the weights.
FT=("${RUN[@]}" --lr-warmup-iters 0)
"$TRAIN" "${FT[@]}" --load ck --finetune --save ft --save-interval 1 --train-iters 6 --exit-interval 4 --metrics-file ft.jsonl \
    >ft.log 2>&1 || bad "--finetune failed: $(tail -1 ft.log)"
med=$(adam_first_step ck/iter_0000010/model.safetensors ft/iter_0000001/model.safetensors 1e-3)
if grep -q "loaded the weights of checkpoint ck/iter_0000010 to fine-tune from iteration 0" ft.log &&
   [ "$(head -1 ft.jsonl | grep -o '"iteration":[0-9]*')" = '"iteration":1' ] &&
   [ "$(state ft/iter_0000004 consumed_samples)" = 32 ] &&
   awk -v m="$med" 'BEGIN { exit !(m > 0.95 && m <= 1.0001) }' &&
   awk -v a="$(losses ft.jsonl | head -1 | cut -d: -f2)" -v b="$(losses straight.jsonl | head -1 | cut -d: -f2)" \
       'BEGIN { exit !(a < b - 0.5) }'; then
    ok "--finetune: step 10's weights from iteration 0 (consumed 32 after 4), fresh Adam (median |step|/lr $med), loss $(losses ft.jsonl | head -1 | cut -d: -f2) < $(losses straight.jsonl | head -1 | cut -d: -f2) from scratch"
else
    bad "--finetune: median |step|/lr $med, $(head -3 ft.log)"
fi
# the same command again, after ft committed steps: it resumes its own step 4 exactly, not the fine-tune's start
"$TRAIN" "${FT[@]}" --load ck --finetune --save ft --save-interval 1 --train-iters 6 --metrics-file ft6.jsonl \
    >ft6.log 2>&1 || bad "--finetune again failed: $(tail -1 ft6.log)"
"$TRAIN" "${FT[@]}" --load ck --finetune --save ftstraight --train-iters 6 --metrics-file ftstraight.jsonl \
    >/dev/null 2>&1 || bad "--finetune of 6 steps failed"
if grep -q "save ft holds this run's step 4: resuming it (--finetune took --load ck on the first start)" ft6.log &&
   [ "$(losses ft6.jsonl | wc -l)" = 2 ] && diff <(losses ftstraight.jsonl | tail -2) <(losses ft6.jsonl) >/dev/null; then
    ok "--finetune restarted after committing step 4: resumed it, losses of steps 5-6 bit-identical to a straight run"
else
    bad "--finetune restart: $(head -2 ft6.log)"
fi
"$TRAIN" "${RUN[@]}" --load ck --no-load-optim --no-load-rng --seed 99 --save nlo --exit-interval 11 \
    --metrics-file nlo.jsonl >nlo.log 2>&1 || bad "--no-load-optim failed: $(tail -1 nlo.log)"
med=$(adam_first_step ck/iter_0000010/model.safetensors nlo/iter_0000011/model.safetensors "$(lr_logged straight.jsonl 10)")
if grep -q "consumed samples 80; Adam moments start at zero: --no-load-optim; data ordered by --seed: --no-load-rng" \
       nlo.log && [ "$(state nlo/iter_0000011 adam_from)" = 10 ] && [ "$(state nlo/iter_0000011 seed)" = 99 ] &&
   [ "$(state nlo/iter_0000011 iteration)" = 11 ] && awk -v m="$med" 'BEGIN { exit !(m > 0.95 && m <= 1.0001) }'; then
    ok "--no-load-optim --no-load-rng: iteration 11 from step 10, Adam restarted (median |step|/lr $med, adam_from 10), seed 99"
else
    bad "--no-load-optim: median $med, adam_from $(state nlo/iter_0000011 adam_from), $(head -2 nlo.log)"
fi
# on the run's own --save (what a restart loads) nothing is left out: the same losses as never stopping
cp -r ck ckown
"$TRAIN" "${RUN[@]}" --load ckown --save ckown --no-load-optim --metrics-file own.jsonl >own.log 2>&1 \
    || bad "--no-load-optim on its own --save failed"
grep -q "note: --load is this run's --save, so it resumes exactly (--no-load-optim: for another run's checkpoint only)" own.log &&
    diff <(losses straight.jsonl | tail -10) <(losses own.jsonl) >/dev/null &&
    ok "--no-load-optim on the run's own --save: resumed exactly (steps 11-20 bit-identical)" ||
    bad "--no-load-optim on its own --save: $(head -2 own.log)"
# --ckpt-step: that step of another run's --load, not its newest; the same command again resumes its own
"$TRAIN" "${RUN[@]}" --load ck --ckpt-step 5 --save cks --exit-interval 8 --metrics-file cks.jsonl >cks.log 2>&1 \
    || bad "--ckpt-step 5 failed: $(tail -1 cks.log)"
"$TRAIN" "${RUN[@]}" --load ck --ckpt-step 5 --save cks --metrics-file cks.jsonl >cks2.log 2>&1 \
    || bad "--ckpt-step 5 again failed: $(tail -1 cks2.log)"
if grep -q "loaded checkpoint ck/iter_0000005 (consumed samples 40)" cks.log &&
   grep -q "save cks holds this run's step 8: resuming it (--ckpt-step took --load ck on the first start)" cks2.log &&
   diff <(losses straight.jsonl | tail -15) <(losses cks.jsonl) >/dev/null; then
    ok "--ckpt-step 5: steps 6-8 from step 5 of ck, then 9-20 from the run's own step 8, bit-identical to a straight run"
else
    bad "--ckpt-step: $(head -2 cks.log) / $(head -2 cks2.log)"
fi
"$TRAIN" "${RUN[@]}" --load ck --ckpt-step 7 >cks3.log 2>&1
rc=$?
[ $rc = 78 ] && grep -q "ck/iter_0000007: No such file or directory" cks3.log && ok "--ckpt-step 7 (no such step) refused (exit 78)" \
    || bad "--ckpt-step of a missing step: rc=$rc $(cat cks3.log)"
"$TRAIN" "${RUN[@]}" --load ck --save ck --ckpt-step 5 >cks4.log 2>&1
rc=$?
[ $rc = 2 ] && grep -q "ckpt-step 5 with --load the same directory as --save (ck)" cks4.log \
    && ok "--ckpt-step with --load = --save refused: a restart would resume the newest step there" \
    || bad "--ckpt-step in place: rc=$rc $(cat cks4.log)"
# --use-checkpoint-args: the model from the checkpoint's manifest; a flag given wins over it
"$TRAIN" --load ck --use-checkpoint-args --finetune --micro-batch-size 2 --global-batch-size 8 --train-iters 1 \
    >uca.log 2>&1 || bad "--use-checkpoint-args failed: $(tail -2 uca.log)"
grep -qF -- "--use-checkpoint-args: from ck/iter_0000010: --num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 256 --seq-length 32" \
    uca.log && grep -q "loaded the weights of checkpoint ck/iter_0000010" uca.log \
    && ok "--use-checkpoint-args: the model from ck/iter_0000010's manifest, fine-tuned from it" \
    || bad "--use-checkpoint-args: $(head -3 uca.log)"
"$TRAIN" --load ck --use-checkpoint-args --hidden-size 128 --micro-batch-size 2 --global-batch-size 8 --train-iters 1 \
    >uca2.log 2>&1
rc=$?
[ $rc = 78 ] && grep -q "wte.weight' has shape \[256, 64\], the model needs \[256, 128\]" uca2.log \
    && ok "--use-checkpoint-args with --hidden-size 128: the flag wins, and the load refuses the other shape (exit 78)" \
    || bad "--use-checkpoint-args with a flag given: rc=$rc $(tail -2 uca2.log)"
"$TRAIN" --use-checkpoint-args --micro-batch-size 2 >uca3.log 2>&1
rc=$?
[ $rc = 78 ] && grep -q "use-checkpoint-args takes the model from the checkpoint in --load: give --load DIR" uca3.log \
    && ok "--use-checkpoint-args without --load refused" || bad "--use-checkpoint-args without --load: rc=$rc $(cat uca3.log)"
"$TRAIN" "${RUN[@]}" --load nothing_here --exit-on-missing-checkpoint >miss.log 2>&1
rc=$?
[ $rc = 78 ] && grep -q "load nothing_here holds no committed checkpoint, and --exit-on-missing-checkpoint was given" miss.log \
    && ok "--exit-on-missing-checkpoint: refused (exit 78)" || bad "--exit-on-missing-checkpoint: rc=$rc $(cat miss.log)"
# --exit-duration-in-mins: after the first step past it, a checkpoint and exit 75 (resume with --load)
"$TRAIN" "${RUN[@]}" --exit-duration-in-mins 0.00001 --save dur --save-interval 100 >dur.log 2>&1
rc=$?
if [ $rc = 75 ] && grep -q "stopped at --exit-duration-in-mins 1e-05 after iteration 1; checkpoint committed in dur" dur.log &&
   [ -f dur/iter_0000001/manifest.json ]; then
    ok "--exit-duration-in-mins: stopped after step 1 with the checkpoint committed (exit 75)"
else
    bad "--exit-duration-in-mins: rc=$rc $(tail -2 dur.log)"
fi
"$TRAIN" "${RUN[@]}" --lr-warmup-init 1e-4 --train-iters 1 --metrics-file init.jsonl >/dev/null 2>&1
awk -v l="$(first_lr init.jsonl)" 'BEGIN { exit !(l > 3.99e-4 && l < 4.01e-4) }' &&
    ok "--lr-warmup-init 1e-4: step 1 of 3 warm-up steps at 4e-4" || bad "--lr-warmup-init: lr $(first_lr init.jsonl)"
# --init-method-std: the initial weights' spread, the output layers' divided by sqrt(2 x layers) = 2
"$TRAIN" "${RUN[@]}" --init-method-std 0.006 --train-iters 1 --dump-dir initstd >/dev/null 2>&1 || bad "--init-method-std run failed"
spread=$(python3 - initstd/init.safetensors <<'EOF'
import statistics, sys, st_read
t = st_read.arrays(sys.argv[1])
def std(name): return statistics.pstdev(t[name])
print(f"{std('h.0.attn.c_attn.weight'):.5f} {std('h.1.mlp.c_proj.weight'):.5f} {std('wte.weight'):.5f}")
EOF
)
read -r s_in s_out s_emb <<<"$spread"
awk -v a="$s_in" -v b="$s_out" -v e="$s_emb" 'BEGIN { exit !(a > 0.0057 && a < 0.0063 && b > 0.0028 && b < 0.0032 && e > 0.0057 && e < 0.0063) }' &&
    ok "--init-method-std 0.006: c_attn $s_in, c_proj $s_out (/2), wte $s_emb" || bad "--init-method-std: spreads $spread"
# --embedding-init-method-std: the token and position embeddings' spread; an untied output layer keeps init's
"$TRAIN" "${RUN[@]}" --init-method-std 0.006 --embedding-init-method-std 0.05 --untie-embeddings-and-output-weights \
    --train-iters 1 --dump-dir embstd >/dev/null 2>&1 || bad "--embedding-init-method-std run failed"
spread=$(python3 - embstd/init.safetensors <<'EOF'
import statistics, sys, st_read
t = st_read.arrays(sys.argv[1])
def std(name): return statistics.pstdev(t[name])
print(" ".join(f"{std(k):.5f}" for k in ("wte.weight", "wpe.weight", "h.0.attn.c_attn.weight", "lm_head.weight")))
EOF
)
read -r s_wte s_wpe s_in s_head <<<"$spread"
awk -v w="$s_wte" -v p="$s_wpe" -v a="$s_in" -v o="$s_head" 'BEGIN { exit !(w > 0.0475 && w < 0.0525 &&
    p > 0.0475 && p < 0.0525 && a > 0.0057 && a < 0.0063 && o > 0.0057 && o < 0.0063) }' &&
    ok "--embedding-init-method-std 0.05: wte $s_wte, wpe $s_wpe; c_attn $s_in and the untied lm_head $s_head keep 0.006" ||
    bad "--embedding-init-method-std: spreads $spread"

# --eod-mask-loss (the loss itself is checked against PyTorch by engine_torch_ref_eod): every layout
# computes the same losses as one rank, and they differ from the unmasked run's
python3 -c 'import json
for i in range(300): print(json.dumps({"text": "the boat came in"[: 3 + (i * 5) % 13]}))' >docs.jsonl
"$PREP" --input docs.jsonl --output-prefix docs >/dev/null || bad "prepare docs failed"
# Megatron's preprocess_data.py line: the same files; what it cannot do refused (exit 2) saying so
"$PREP" --input docs.jsonl --output-prefix docsm --json-keys text --dataset-impl mmap --workers 8 --partitions 2 \
    --chunk-size 25 --log-interval 1000 --keep-newlines >/dev/null || bad "prepare with Megatron's flags failed"
"$PREP" --input docs.jsonl --output-prefix docss --split-sentences >/dev/null 2>prep.err
rc=$?
cmp -s docs.bin docsm.bin && cmp -s docs.idx docsm.idx && [ $rc = 2 ] && [ ! -e docss.bin ] \
    && grep -q "split-sentences: documents are written whole" prep.err \
    && ok "data prepare with preprocess_data.py's flags: the same files; --split-sentences refused" \
    || bad "data prepare with Megatron's flags: rc=$rc $(cat prep.err)"
EOD=("${TINY[@]}" --micro-batch-size 2 --train-iters 6 --lr 1e-3 --data-path docs --split 1,0,0)
"$TRAIN" "${EOD[@]}" --eod-mask-loss --metrics-file eod1.jsonl >/dev/null 2>&1 || bad "--eod-mask-loss run failed"
"$TRAIN" "${EOD[@]}" --eod-mask-loss --nproc-per-node 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --metrics-file eod4.jsonl >eod4.log 2>&1 || bad "--eod-mask-loss tp2 pp2 failed: $(tail -1 eod4.log)"
"$TRAIN" "${EOD[@]}" --metrics-file eod0.jsonl >/dev/null 2>&1 || bad "unmasked run failed"
if python3 - eod1.jsonl eod4.jsonl eod0.jsonl <<'EOF'
import json, sys
a, b, c = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) == len(c) == 6, (len(a), len(b), len(c))
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
assert all(abs(x - z) > 1e-4 for x, z in zip(a, c)), (a, c)
EOF
then ok "--eod-mask-loss: tp2 pp2 equals one rank to 1e-5 over 6 steps, and differs from the unmasked loss"
else bad "--eod-mask-loss layouts: $(cat eod1.jsonl eod4.jsonl | grep -o '"loss":[^,]*' | tr '\n' ' ')"; fi

# --reset-position-ids --reset-attention-mask (checked against PyTorch by engine_torch_ref_documents):
# tp2 pp2 with sequence parallel, selective recomputation (the fp32 probabilities rebuilt in backward)
# and full recomputation compute one rank's losses, which differ from the run without documents
DOC=("${EOD[@]}" --reset-position-ids --reset-attention-mask)
"$TRAIN" "${DOC[@]}" --metrics-file doc1.jsonl >/dev/null 2>&1 || bad "--reset-attention-mask run failed"
"$TRAIN" "${DOC[@]}" --nproc-per-node 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --sequence-parallel --recompute-granularity selective --metrics-file doc4.jsonl >doc4.log 2>&1 \
    || bad "documents tp2 pp2 failed: $(tail -1 doc4.log)"
"$TRAIN" "${DOC[@]}" --recompute-granularity full --metrics-file docf.jsonl >docf.log 2>&1 \
    || bad "documents with full recomputation failed: $(tail -1 docf.log)"
if python3 - doc1.jsonl doc4.jsonl docf.jsonl eod0.jsonl <<'EOF'
import json, sys
a, b, f, c = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == len(f) == len(c) == 6, (len(a), len(b), len(f), len(c))
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, f)), (a, f)
assert all(abs(x - z) > 1e-4 for x, z in zip(a, c)), (a, c)
EOF
then ok "documents: tp2 pp2 sequence-parallel and full recomputation equal one rank to 1e-5, unlike one document"
else bad "documents layouts: $(cat doc1.jsonl doc4.jsonl docf.jsonl | grep -o '"loss":[^,]*' | tr '\n' ' ')"; fi

# The runs of a job whose global batch changes (NAME, the step to stop at, its flags): one rank, pp2 dp2,
# 4 layers on one rank and interleaved on pp2, and one rank stopped at STOP and resumed: NAME1, NAME4,
# NAME1l4, NAMEv and NAMEr.jsonl.
batch_runs() {
  local n=$1 stop=$2; shift 2
  "$TRAIN" "$@" --metrics-file "${n}1.jsonl" >/dev/null 2>&1 || bad "$n run failed"
  "$TRAIN" "$@" --nproc-per-node 4 --pipeline-model-parallel-size 2 --metrics-file "${n}4.jsonl" >"${n}4.log" 2>&1 \
      || bad "$n pp2 dp2 failed: $(tail -1 "${n}4.log")"
  "$TRAIN" "$@" --num-layers 4 --metrics-file "${n}1l4.jsonl" >/dev/null 2>&1 || bad "$n 4 layers failed"
  "$TRAIN" "$@" --num-layers 4 --nproc-per-node 2 --pipeline-model-parallel-size 2 \
      --num-layers-per-virtual-pipeline-stage 1 --metrics-file "${n}v.jsonl" >"${n}v.log" 2>&1 \
      || bad "$n interleaved failed: $(tail -1 "${n}v.log")"
  "$TRAIN" "$@" --save "${n}ck" --save-interval "$stop" --exit-interval "$stop" --metrics-file "${n}r.jsonl" \
      >/dev/null 2>&1 || bad "$n first part failed"
  "$TRAIN" "$@" --load "${n}ck" --metrics-file "${n}r.jsonl" >"${n}r.log" 2>&1 || bad "$n resume failed: $(tail -1 "${n}r.log")"
}
# What those runs must show (NAME, FLAT, GBS, WARM, DECAY, BATCHES): each step's batch as BATCHES
# (comma-separated) and the consumed samples adding up; pp2 dp2 and the resumed run equal to one rank to
# 1e-5 (the resume bit for bit), interleaved equal to 4 layers; the constant-lr run NAMEc.jsonl's first
# steps bit for bit those of FLAT.jsonl (a run at their batch: samples are read in order); the learning
# rate by samples, in global batches of GBS: warm-up over WARM of them, cosine decay to DECAY.
batch_check() {
  python3 - "$@" <<'EOF'
import json, math, sys
name, flatname, gbs, warm, decay, want = sys.argv[1:]
gbs, warm, decay, want = int(gbs), int(warm), int(decay), [int(x) for x in want.split(",")]
def rd(p): return [json.loads(l) for l in open(p)]
one, c, four, l4, v, res = (rd(name + s + ".jsonl") for s in ("1", "c", "4", "1l4", "v", "r"))
flat = rd(flatname + ".jsonl")
batches = [s["global_batch_size"] for s in one]
assert batches == want, batches
done = 0
for s in one:
    done += s["global_batch_size"]
    assert s["consumed_samples"] == done, (s, done)
assert [s["loss"] for s in c[:len(flat)]] == [s["loss"] for s in flat], (c[:len(flat)], flat)
for other in (four, res):
    assert [s["global_batch_size"] for s in other] == batches
    assert all(abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]) for a, b in zip(one, other)), (one, other)
assert [s["loss"] for s in res] == [s["loss"] for s in one], "resume is not bit-identical"
assert len(v) == len(l4) == len(want) and \
    all(abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]) for a, b in zip(l4, v)), (l4, v)
for s in one:
    pos = s["consumed_samples"] / gbs
    lr = 1e-3 * pos / warm if pos <= warm else 0.0 if pos > decay else \
        1e-3 * 0.5 * (1 + math.cos(math.pi * (pos - warm) / (decay - warm)))
    assert abs(s["lr"] - lr) <= 1e-12 + 1e-9 * lr, (s["iteration"], s["lr"], lr)
EOF
}

# --rampup-batch-size 4 4 24 (Megatron's) to a global batch of 12: the steps take 4, 4, 4, 8, 8, then 12
# samples, 11 steps for --train-samples 100 as Megatron counts them. Under a constant learning rate the
# ramp's first steps are bit for bit those of a run with a batch of 4; the micro-batches per step change
# under pp2 dp2 and the interleaved schedule; the run stops mid-ramp (step 4); the learning rate counts
# samples (warm-up over 24, cosine decay over 100: 2 and 8 global batches of 12).
RAMP=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 12 --rampup-batch-size 4 4 24 --train-samples 100 --lr 1e-3
      --seed 3)
"$TRAIN" "${RAMP[@]}" --lr-decay-style constant --metrics-file rampc.jsonl >/dev/null 2>&1 || bad "ramp, constant lr failed"
"$TRAIN" "${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr 1e-3 --seed 3 \
    --lr-decay-style constant --metrics-file flat4.jsonl >/dev/null 2>&1 || bad "batch-4 run failed"
batch_runs ramp 4 "${RAMP[@]}" --lr-warmup-samples 24
if batch_check ramp flat4 12 2 8 4,4,4,8,8,12,12,12,12,12,12
then ok "--rampup-batch-size: batches 4 4 4 8 8 12.., the batch-4 run's first steps, pp2 dp2 and interleaved equal one rank, bit-identical resume mid-ramp, lr by samples"
else bad "--rampup-batch-size: $(grep -o '"global_batch_size":[0-9]*' ramp1.jsonl | tr '\n' ' ')"; fi

# --step-batch-size-schedule "0:16 512:4 1K:8" (Megatron's, thresholds in tokens: samples 0, 16 and 32 at
# --seq-length 32): the steps take 16, 4 four times, then 8 samples, the first batch larger than the last
# (the global batch, 8), so buffers are sized by the largest; --train-samples 60 is 9 steps as Megatron
# counts them (while fewer are consumed). The first step is bit for bit a batch-16 run's; the run stops
# mid-schedule (step 2); the learning rate counts samples (warm-up over 16, decay over the 60 trained: 2
# and 8 global batches of 8).
SCHED=("${TINY[@]}" --micro-batch-size 2 --step-batch-size-schedule "0:16 512:4 1K:8" --train-samples 60 --lr 1e-3
       --seed 3)
"$TRAIN" "${SCHED[@]}" --lr-decay-style constant --metrics-file schedc.jsonl >/dev/null 2>&1 || bad "schedule, constant lr failed"
"$TRAIN" "${TINY[@]}" --micro-batch-size 2 --global-batch-size 16 --train-iters 1 --lr 1e-3 --seed 3 \
    --lr-decay-style constant --metrics-file flat16.jsonl >/dev/null 2>&1 || bad "batch-16 run failed"
batch_runs sched 2 "${SCHED[@]}" --lr-warmup-samples 16
if batch_check sched flat16 8 2 8 16,4,4,4,4,8,8,8,8
then ok "--step-batch-size-schedule: batches 16 4 4 4 4 8.., the batch-16 run's first step, pp2 dp2 and interleaved equal one rank, bit-identical resume mid-schedule, lr by samples"
else bad "--step-batch-size-schedule: $(grep -o '"global_batch_size":[0-9]*' sched1.jsonl | tr '\n' ' ')"; fi

# Megatron's LLaMA-3 8B example (examples/llama/train_llama3_8b_h100_fp8.sh) with its MOCK data arguments and
# DTYPE bf16, shrunk to run here (2 layers, hidden 64, 4 heads in 2 groups, FFN 128, seq 64, vocab 1024, 32
# samples on 2 ranks) and --attention-backend auto on the CPU (fused is cuDNN's): the rest of the line runs as
# written (NullTokenizer, --tiktoken-pattern, --apply-layernorm-1p on RMSNorm, decoupled rates, sample counts),
# trains its 4 steps, and keeps each norm weight zero-centred (w near 0, where 1 + w is applied) in a checkpoint
# with no config.json; atoll export writes 1 + w.
L3=(--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 128 --num-attention-heads 4
    --group-query-attention --num-query-groups 2 --kv-channels 16 --seq-length 64 --max-position-embeddings 64
    --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0
    --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend auto
    --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear
    --micro-batch-size 1 --global-batch-size 8 --train-samples 32 --lr-decay-samples 30 --lr-warmup-samples 4
    --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 --lr-decay-style cosine
    --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16
    --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc --empty-unused-memory-level 1
    --exit-duration-in-mins 235 --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
    --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --data-cache-path l3cache --tiktoken-pattern v2
    --split '99,1,0' --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1
    --save l3ck --load l3ck --save-interval 4 --metrics-file l3.jsonl)
"$TRAIN" "${L3[@]}" --nproc-per-node 2 >l3.log 2>&1 || bad "the LLaMA-3 example's line failed: $(grep -v note: l3.log | tail -1)"
"$(dirname "$TRAIN")/atoll" export --load l3ck --output l3hf >l3export.log 2>&1 || bad "export of the LLaMA-3 example's checkpoint: $(cat l3export.log)"
if python3 - <<'EOF'
import json, math, os, struct
from st_read import arrays as st
steps = [json.loads(l) for l in open("l3.jsonl")]
assert len(steps) == 4 and all(math.isfinite(s["loss"]) for s in steps), steps
ck, hf = st("l3ck/iter_0000004/model.safetensors"), st("l3hf/model.safetensors")
norms = [k for k in ck if k.endswith("norm.weight")]
assert len(norms) == 5, norms
for k in norms:
    assert max(abs(x) for x in ck[k]) < 0.05, (k, max(abs(x) for x in ck[k]))  # w, 5 steps from 0
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    assert all(b == f32(a + 1) for a, b in zip(ck[k], hf[k])), k  # 1 + w, rounded to float32
assert not os.path.exists("l3ck/iter_0000004/config.json")
assert json.load(open("l3hf/config.json"))["architectures"] == ["LlamaForCausalLM"]
EOF
then ok "Megatron's LLaMA-3 8B example line (shrunk, bf16, mock data, NullTokenizer, 1p RMSNorm): 4 steps, norms stored as w, exported as 1 + w"
else bad "the LLaMA-3 example's run: $(grep -v note: l3.log | tail -2)"; fi

# --kv-channels 32 over --hidden-size 64 and 4 heads (Qwen3-0.6B's kind: the heads 2x wider than hidden / heads),
# with its head norms and grouped keys: tp2 with sequence parallelism and pp2 (q_proj's rows and o_proj's columns
# split by heads) equal one rank to 1e-6.
HD=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --kv-channels 32 --seq-length 32 --micro-batch-size 2
    --global-batch-size 8 --train-iters 4 --lr 1e-3 --seed 3 --normalization RMSNorm --swiglu --position-embedding-type rope
    --untie-embeddings-and-output-weights --disable-bias-linear --qk-layernorm --group-query-attention
    --num-query-groups 2)
"$TRAIN" "${HD[@]}" --metrics-file hd1.jsonl >/dev/null 2>&1 || bad "--kv-channels one rank failed"
"$TRAIN" "${HD[@]}" --nproc-per-node 4 --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2 \
    --metrics-file hd4.jsonl >hd4.log 2>&1 || bad "--kv-channels tp2 pp2 failed: $(tail -1 hd4.log)"
if python3 - <<'EOF'
import json
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in ("hd1.jsonl", "hd4.jsonl"))
assert len(a) == len(b) == 4 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
EOF
then ok "--kv-channels 32 (heads wider than hidden / heads): tp2 sp pp2 equals one rank"
else bad "--kv-channels layouts: $(losses hd1.jsonl | tr '\n' ' ') / $(losses hd4.jsonl | tr '\n' ' ')"; fi

# --decrease-batch-size-if-needed (Megatron's, for restarts on fewer GPUs): a global batch of 16 on 3
# data-parallel ranks trains 15 samples a step, the steps and evaluations of a run with a global batch of
# 15 bit for bit (constant learning rate); without the flag the launcher refuses dp 3 (exit 2); a dp-4 run stopped at step 2
# goes on at dp 3 with 15 a step, then at dp 4 with 16 again, its samples counted as it goes.
DEC=("${TINY[@]}" --micro-batch-size 1 --train-iters 6 --lr 1e-3 --lr-decay-style constant --seed 5 --data-path docs
     --split 8,2,0 --eval-interval 3 --eval-iters 1)
"$TRAIN" "${DEC[@]}" --global-batch-size 16 --decrease-batch-size-if-needed --nproc-per-node 3 --metrics-file dec16.jsonl \
    >dec16.log 2>&1 || bad "decreased batch run failed: $(tail -1 dec16.log)"
"$TRAIN" "${DEC[@]}" --global-batch-size 15 --nproc-per-node 3 --metrics-file dec15.jsonl >/dev/null 2>&1 \
    || bad "batch-15 run failed"
"$TRAIN" "${DEC[@]}" --global-batch-size 16 --nproc-per-node 3 >decno.log 2>&1
decno=$?
"$TRAIN" "${DEC[@]}" --global-batch-size 16 --nproc-per-node 4 --save deck --save-interval 2 --exit-interval 2 \
    --metrics-file deck.jsonl >/dev/null 2>&1 || bad "dp 4 first part failed"
"$TRAIN" "${DEC[@]}" --global-batch-size 16 --nproc-per-node 3 --decrease-batch-size-if-needed --load deck --save deck \
    --save-interval 2 --exit-interval 4 --metrics-file deck.jsonl >deck3.log 2>&1 || bad "dp 3 part failed: $(tail -1 deck3.log)"
"$TRAIN" "${DEC[@]}" --global-batch-size 16 --nproc-per-node 4 --load deck --metrics-file deck.jsonl >/dev/null 2>&1 \
    || bad "dp 4 last part failed"
if [ $decno = 2 ] && grep -q "or --decrease-batch-size-if-needed to train on the largest batch that is" decno.log \
    && grep -q "note: --decrease-batch-size-if-needed: 15 samples a step, not the global batch 16" dec16.log \
    && python3 - <<'EOF'
import json
def rd(p): return [json.loads(l) for l in open(p)]
a, b, k = rd("dec16.jsonl"), rd("dec15.jsonl"), [r for r in rd("deck.jsonl") if "loss" in r]
assert len(a) == len(b) == 8 and a == [dict(r, step_ms=x["step_ms"], tokens_per_s=x["tokens_per_s"],
    flops_per_s=x["flops_per_s"], bubble_measured=x["bubble_measured"], save_stall_ms=x.get("save_stall_ms"))
    if "loss" in r else r for r, x in zip(b, a)], (a, b)
assert [r["global_batch_size"] for r in k] == [16, 16, 15, 15, 16, 16], k
assert [r["consumed_samples"] for r in k] == [16, 32, 47, 62, 78, 94], k
EOF
then ok "--decrease-batch-size-if-needed: dp 3 trains 15 of 16 as a batch-15 run does, bit for bit; dp 4 -> 3 -> 4 takes 16 16 15 15 16 16"
else bad "--decrease-batch-size-if-needed: exit $decno, $(grep -o '"global_batch_size":[0-9]*' deck.jsonl | tr '\n' ' ')"; fi

# --log-params-norm (Megatron's): the updated parameters' L2 norm on each logged step. The last equals
# the norm of the checkpoint saved after it (each tensor once: the tied head is wte); tp2 pp2 (a tied
# copy on the last stage, TP-split and replicated tensors) and dp2 with ZeRO-1 give one rank's to 1e-6;
# without the flag no norm is taken
PN=("${TINY[@]}" --micro-batch-size 2 --train-iters 4 --lr 1e-3 --seed 9 --log-params-norm)
"$TRAIN" "${PN[@]}" --save pnck --metrics-file pn1.jsonl >/dev/null 2>&1 || bad "--log-params-norm run failed"
"$TRAIN" "${PN[@]}" --nproc-per-node 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --metrics-file pn4.jsonl >pn4.log 2>&1 || bad "--log-params-norm tp2 pp2 failed: $(tail -1 pn4.log)"
"$TRAIN" "${PN[@]}" --nproc-per-node 2 --use-distributed-optimizer --metrics-file pnz.jsonl >pnz.log 2>&1 \
    || bad "--log-params-norm dp2 ZeRO-1 failed: $(tail -1 pnz.log)"
if python3 - <<'EOF'
import json, math, st_read
def rd(p): return [json.loads(l) for l in open(p)]
one, four, zero = rd("pn1.jsonl"), rd("pn4.jsonl"), rd("pnz.jsonl")
sq = 0.0
for k, (dtype, _, _) in st_read.tensors("pnck/iter_0000004/model.safetensors").items():
    assert dtype == "F32", (k, dtype)
for k, v in st_read.arrays("pnck/iter_0000004/model.safetensors").items():
    sq += sum(x * x for x in v)
want = math.sqrt(sq)
assert abs(one[-1]["params_norm"] - want) <= 1e-6 * want, (one[-1]["params_norm"], want)
for other in (four, zero):
    assert len(other) == 4 and all(abs(a["params_norm"] - b["params_norm"]) <= 1e-6 * a["params_norm"]
                                   for a, b in zip(one, other)), (one, other)
assert "params_norm" not in rd("ramp1.jsonl")[0]
print(want)
EOF
then ok "--log-params-norm: $(grep -o '"params_norm":[0-9.]*' pn1.jsonl | tail -1), the checkpoint's norm; tp2 pp2 and ZeRO-1 dp2 the same"
else bad "--log-params-norm: $(grep -o '"params_norm":[0-9.]*' pn1.jsonl pn4.jsonl pnz.jsonl | tr '\n' ' ')"; fi

# --log-num-zeros-in-grad (Megatron's): the reduced gradient's exact zeros on each logged step. With an
# untied output layer, the rows of the token embedding no input token of the step picks get no gradient,
# so each count is at least (padded vocab - distinct input tokens) x hidden, read from the step's dumped
# tokens; one rank's first count equals the zeros of its dumped gradient (each tensor once). tp2 pp2 (TP-split
# and replicated tensors on two stages) and dp2 with ZeRO-1 (each rank's shard) count each element once:
# at least the same floor, and within a few incidental zeros (rounding can make or unmake an exact 0) of one
# rank's; without the flag nothing is counted
NZ=("${TINY[@]}" --micro-batch-size 2 --train-iters 4 --lr 1e-3 --seed 9 --data-path rep --split 1,0,0
    --untie-embeddings-and-output-weights --log-num-zeros-in-grad --log-interval 1)
"$TRAIN" "${NZ[@]}" --dump-dir nzd --metrics-file nz1.jsonl >nz1.log 2>&1 || bad "--log-num-zeros-in-grad run failed: $(tail -1 nz1.log)"
"$TRAIN" "${NZ[@]}" --nproc-per-node 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --metrics-file nz4.jsonl >nz4.log 2>&1 || bad "--log-num-zeros-in-grad tp2 pp2 failed: $(tail -1 nz4.log)"
"$TRAIN" "${NZ[@]}" --nproc-per-node 2 --use-distributed-optimizer --metrics-file nzz.jsonl >nzz.log 2>&1 \
    || bad "--log-num-zeros-in-grad dp2 ZeRO-1 failed: $(tail -1 nzz.log)"
if grep -q "| num zeros: [0-9]*\.0 |" nz1.log && python3 - <<'EOF'
import json, st_read
def rd(p): return [json.loads(l) for l in open(p)]
one, four, zero = rd("nz1.jsonl"), rd("nz4.jsonl"), rd("nzz.jsonl")
t = st_read.arrays("nzd/iter_0000001.safetensors")
dumped = sum(sum(1 for x in t[k] if x == 0.0) for k in t if k.startswith("grad."))
assert one[0]["num_zeros"] == dumped, (one[0]["num_zeros"], dumped)
vocab, hidden = st_read.tensors("nzd/iter_0000001.safetensors")["grad.wte.weight"][1]
for it in range(4):
    ts = st_read.arrays(f"nzd/iter_{it + 1:07d}.safetensors")
    floor = (vocab - len(set(ts["tokens"]))) * hidden
    for run in (one, four, zero):
        assert len(run) == 4 and floor <= run[it]["num_zeros"] <= floor + 8, (it, floor, run[it])
    assert abs(four[it]["num_zeros"] - one[it]["num_zeros"]) <= 8 and abs(zero[it]["num_zeros"] - one[it]["num_zeros"]) <= 8
assert floor > 0 and "num_zeros" not in rd("pn1.jsonl")[0]
print(dumped, floor)
EOF
then ok "--log-num-zeros-in-grad: $(grep -o '"num_zeros":[0-9]*' nz1.jsonl | head -1), the dumped gradient's; tp2 pp2 and ZeRO-1 dp2 count each element once"
else bad "--log-num-zeros-in-grad: $(grep -ho '"num_zeros":[0-9]*' nz1.jsonl nz4.jsonl nzz.jsonl | tr '\n' ' ')"; fi

# --train-data-path / --valid-data-path / --test-data-path (Megatron's data per split, each used whole):
# training equals --data-path with the whole of it as the train split; the validation data changes only
# the validation loss; the test data is evaluated once training ends, and its loss is the one the same
# data gives as validation data at that step
for n in val tst; do
  python3 -c "import json, sys
for i in range(200): print(json.dumps({'text': sys.argv[1][: 4 + (i * 3) % 19]}))" \
    "$([ $n = val ] && echo 'a tide came over the reef' || echo 'nets were mended at dawn')" >$n.jsonl
  "$PREP" --input $n.jsonl --output-prefix $n >/dev/null || bad "prepare $n failed"
done
SPL=("${TINY[@]}" --micro-batch-size 2 --train-iters 6 --lr 1e-3 --eval-interval 3 --eval-iters 1)
"$TRAIN" "${SPL[@]}" --train-data-path docs --valid-data-path val --test-data-path tst --metrics-file spl1.jsonl \
    >spl1.log 2>&1 || bad "per-split data run failed: $(tail -1 spl1.log)"
"$TRAIN" "${SPL[@]}" --eval-iters 0 --data-path docs --split 1,0,0 --metrics-file spl0.jsonl >/dev/null 2>&1 \
    || bad "--data-path docs --split 1,0,0 failed"
"$TRAIN" "${SPL[@]}" --train-data-path docs --valid-data-path tst --metrics-file spl2.jsonl >/dev/null 2>&1 \
    || bad "per-split data run with tst as validation failed"
if python3 - spl1.jsonl spl0.jsonl spl2.jsonl <<'EOF'
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
train = [[r["loss"] for r in run if "loss" in r] for run in runs]
valid = [[(r["iteration"], r["valid_loss"]) for r in run if "valid_loss" in r] for run in runs]
test = [r for r in runs[0] if "test_loss" in r]
assert len(train[0]) == 6 and train[0] == train[1] == train[2], train
assert [i for i, _ in valid[0]] == [3, 6] and valid[1] == [] and [i for i, _ in valid[2]] == [3, 6], valid
assert all(abs(a[1] - b[1]) > 1e-4 for a, b in zip(valid[0], valid[2])), valid
assert len(test) == 1 and test[0]["iteration"] == 6 and test[0]["test_loss"] == valid[2][1][1], (test, valid[2])
EOF
then ok "--train/valid/test-data-path: training as --data-path --split 1,0,0, validation on its own data, test at the end"
else bad "per-split data: $(cat spl1.jsonl spl2.jsonl | tr '\n' ' ')"; fi
grep -q "validation loss at the end of training for test data" spl1.log || bad "no test line: $(tail -3 spl1.log)"
"$TRAIN" "${SPL[@]}" --data-path docs --train-data-path docs >spl3.log 2>&1
rc=$?
[ $rc = 2 ] && grep -qF -- "--data-path (split by --split) and --train-data-path are both given" spl3.log \
  || bad "--data-path with --train-data-path: rc $rc $(cat spl3.log)"
"$TRAIN" "${SPL[@]}" --valid-data-path val >spl4.log 2>&1
rc=$?
[ $rc = 2 ] && grep -qF -- "--valid-data-path needs --train-data-path" spl4.log || bad "valid without train: rc $rc $(cat spl4.log)"
"$TRAIN" "${SPL[@]}" --train-data-path docs --valid-data-path nosuch >spl5.log 2>&1
rc=$?
[ $rc = 78 ] && grep -qF -- "--valid-data-path nosuch: " spl5.log || bad "missing --valid-data-path: rc $rc $(cat spl5.log)"
ok "per-split data refusals: with --data-path, valid without train, a missing prefix named by its flag"
# Megatron's files that hold the paths, for blends too long for a command line: --data-args-path (a
# --data-path's words, over lines here) trains as that --data-path does; --per-split-data-args-path (JSON,
# lists or strings, weights as strings or numbers) as the three per-split flags
printf '0.7 docs\n0.3\n  val\n' >dargs.txt
printf '{"train": ["0.7", "docs", 0.3, "val"], "valid": "tst", "test": null}\n' >psplit.json
"$TRAIN" "${SPL[@]}" --eval-iters 0 --split 1,0,0 --data-path "0.7 docs 0.3 val" --metrics-file dap0.jsonl \
    >/dev/null 2>&1 || bad "blend run failed"
"$TRAIN" "${SPL[@]}" --eval-iters 0 --split 1,0,0 --data-args-path dargs.txt --metrics-file dap1.jsonl >dap1.log 2>&1 \
    || bad "--data-args-path run failed: $(tail -1 dap1.log)"
"$TRAIN" "${SPL[@]}" --train-data-path "0.7 docs 0.3 val" --valid-data-path tst --metrics-file dap2.jsonl \
    >/dev/null 2>&1 || bad "per-split blend run failed"
"$TRAIN" "${SPL[@]}" --per-split-data-args-path psplit.json --metrics-file dap3.jsonl >dap3.log 2>&1 \
    || bad "--per-split-data-args-path run failed: $(tail -1 dap3.log)"
if python3 - dap0.jsonl dap1.jsonl dap2.jsonl dap3.jsonl spl0.jsonl <<'EOF'
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
loss = [[r["loss"] for r in run if "loss" in r] for run in runs]
valid = [[r["valid_loss"] for r in run if "valid_loss" in r] for run in runs]
assert len(loss[0]) == 6 and loss[0] == loss[1] and loss[0] != loss[4], loss
assert loss[2] == loss[3] and len(valid[3]) == 2 and valid[2] == valid[3], (loss, valid)
EOF
then ok "--data-args-path and --per-split-data-args-path: the same losses as the paths given as flags"
else bad "data args files: $(head -c 300 dap1.jsonl; head -c 300 dap3.jsonl)"; fi
"$TRAIN" "${SPL[@]}" --data-path docs --data-args-path dargs.txt >dap4.log 2>&1
rc=$?
[ $rc = 2 ] && grep -qF -- "--data-path and --data-args-path (a file holding a --data-path) are both given" dap4.log \
  || bad "--data-path with --data-args-path: rc $rc $(cat dap4.log)"
"$TRAIN" "${SPL[@]}" --data-args-path nosuch.txt >dap5.log 2>&1
rc=$?
[ $rc = 78 ] && grep -qF -- "--data-args-path nosuch.txt: cannot read it: No such file" dap5.log \
  || bad "missing --data-args-path: rc $rc $(cat dap5.log)"
printf '{"valid": "tst"}' >nosplit.json
"$TRAIN" "${SPL[@]}" --per-split-data-args-path nosplit.json >dap6.log 2>&1
rc=$?
[ $rc = 78 ] && grep -qF -- 'expected a JSON object with "train"' dap6.log || bad "JSON without train: rc $rc $(cat dap6.log)"
ok "data args files refused: with --data-path, a missing file, JSON without \"train\""
# --split's test part is evaluated once training ends, as Megatron does; one too small for a sample is
# said and skipped; a split without one has no test
"$TRAIN" "${SPL[@]}" --data-path docs --split 6,2,2 --metrics-file spt1.jsonl >spt1.log 2>&1 || bad "split test run failed"
"$TRAIN" "${SPL[@]}" --data-path docs --split 90,9.7,0.3 --metrics-file spt2.jsonl >spt2.log 2>&1 \
    || bad "tiny test part failed the run: $(tail -1 spt2.log)"
if [ "$(grep -c '"test_loss"' spt1.jsonl)" = 1 ] && grep -q "validation loss at the end of training for test data" spt1.log \
    && [ "$(grep -c '"test_loss"' spt2.jsonl)" = 0 ] && grep -q "note: no test evaluation at the end: .*the test split" spt2.log \
    && [ "$(grep -c '"test_loss"' spl0.jsonl)" = 0 ] && [ "$(grep -c '"valid_loss"' spt2.jsonl)" = 2 ]; then
  ok "--split's test part evaluated at the end; a part too small is noted and skipped: $(grep -o 'note: .*' spt2.log | cut -c1-120)"
else bad "split test: $(cat spt1.jsonl spt2.jsonl spt2.log | tail -5)"; fi

# --save-keep 2 with background saves: of the four steps saved (5, 10, 15, 20) the two newest stay
"$TRAIN" "${RUN[@]}" --save ckk --save-interval 5 --async-save --save-keep 2 >keep.log 2>&1 || bad "--save-keep run failed"
kept=$(cd ckk && ls -d iter_* | tr '\n' ' ')
if [ "$kept" = "iter_0000015 iter_0000020 " ] && [ -f ckk/iter_0000015/manifest.json ] && [ -f ckk/iter_0000020/manifest.json ]; then
    ok "--save-keep 2: steps 15 and 20 kept, 5 and 10 removed"
else
    bad "--save-keep 2 left: $kept"
fi

# --deterministic-dp: a run resized from DP 2 to DP 1 at a checkpoint (what an elastic restart does)
# ends with the same bytes as the run that kept DP 2; without the flag the fp32 sums differ
DET=("${TINY[@]}" --micro-batch-size 1 --global-batch-size 8 --train-iters 16 --lr 1e-3 --lr-warmup-iters 2 --seed 5
     --pipeline-model-parallel-size 2)
"$TRAIN" "${DET[@]}" --nproc-per-node 4 --deterministic-dp --save dstraight --save-interval 16 >/dev/null 2>&1 \
    || bad "--deterministic-dp dp 2 run failed"
"$TRAIN" "${DET[@]}" --nproc-per-node 4 --deterministic-dp --save dresized --save-interval 8 --exit-interval 8 \
    >/dev/null 2>&1 || bad "--deterministic-dp first half failed"
"$TRAIN" "${DET[@]}" --nproc-per-node 2 --deterministic-dp --load dresized --save dresized --save-interval 16 \
    >dresized.log 2>&1 || bad "--deterministic-dp resume with dp 1 failed: $(tail -1 dresized.log)"
"$TRAIN" "${DET[@]}" --nproc-per-node 4 --save pstraight --save-interval 16 >/dev/null 2>&1 || bad "dp 2 run failed"
"$TRAIN" "${DET[@]}" --nproc-per-node 2 --save pdp1 --save-interval 16 >/dev/null 2>&1 || bad "dp 1 run failed"
if cmp -s dstraight/iter_0000016/model.safetensors dresized/iter_0000016/model.safetensors &&
   cmp -s dstraight/iter_0000016/optim.safetensors dresized/iter_0000016/optim.safetensors &&
   ! cmp -s pstraight/iter_0000016/model.safetensors pdp1/iter_0000016/model.safetensors; then
    ok "--deterministic-dp: resized from dp 2 to dp 1 at step 8, the same bytes at step 16 (without it dp 1 and 2 differ)"
else
    bad "--deterministic-dp: a DP resize changed the weights (or plain dp 1 and 2 agree, so this proves nothing)"
fi
"$TRAIN" "${DET[@]}" --nproc-per-node 4 --deterministic-dp --use-distributed-optimizer >zdet.log 2>&1
[ $? = 2 ] && grep -q "does not work with --use-distributed-optimizer" zdet.log && ok "--deterministic-dp with ZeRO-1 refused" \
    || bad "--deterministic-dp with ZeRO-1: $(cat zdet.log)"

# newest step corrupt: the run reports it, resumes from iteration 5, and still matches
printf 'X' | dd of=ck_copy/iter_0000010/model.safetensors bs=1 seek=200 conv=notrunc status=none
"$TRAIN" "${RUN[@]}" --load ck_copy --save ck_copy --metrics-file corrupt.jsonl >corrupt.log 2>corrupt.err \
    || bad "resume past a corrupt step failed: $(tail -1 corrupt.err)"
if grep -q "iter_0000010 is corrupt" corrupt.err && grep -q "iter_0000005" corrupt.log &&
   diff <(losses straight.jsonl | tail -15) <(losses corrupt.jsonl) >/dev/null; then
    ok "corrupt newest step reported, resumed from iteration 5 with identical losses"
else
    bad "corrupt-checkpoint fallback: $(cat corrupt.err)"
fi
# Two ranks: rank 0 alone reads the step's files for their checksums (one report of the
# corrupt step, not one per rank) and both resume from the step it chose.
mkdir -p ck_two && cp -r ck/iter_0000005 ck/iter_0000010 ck_two/
printf 'X' | dd of=ck_two/iter_0000010/optim.safetensors bs=1 seek=300 conv=notrunc status=none
"$TRAIN" "${RUN[@]}" --nproc-per-node 2 --load ck_two --train-iters 7 --metrics-file two.jsonl >two.log 2>two.err
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'iter_0000010 is corrupt' two.err)" = 1 ] && grep -q "iter_0000005" two.log &&
   [ "$(losses two.jsonl | wc -l)" = 2 ]; then
    ok "two ranks past a corrupt step: reported once (rank 0 verifies), both resumed from iteration 5"
else
    bad "two ranks past a corrupt step: rc=$rc, $(grep -c 'is corrupt' two.err) reports, $(cat two.err)"
fi
"$TRAIN" "${RUN[@]}" --nproc-per-node 2 --load ck_two --ckpt-step 10 --save ck_two_out >two_step.log 2>two_step.err
rc=$?
if [ $rc -eq 78 ] && grep -q "ck_two/iter_0000010 is corrupt (optim.safetensors fails its checksum)" two_step.err &&
   grep -q "rank 0 found no checkpoint step to resume from" two_step.err; then
    ok "two ranks, --ckpt-step naming a corrupt step: both refuse (exit 78), rank 0 says why"
else
    bad "two ranks, --ckpt-step 10 corrupt: rc=$rc, $(cat two_step.err)"
fi
rm ck_copy/iter_0000020/manifest.json
"$TRAIN" "${RUN[@]}" --load ck_copy --train-iters 20 >torn.log 2>torn.err
grep -q "iter_0000020 is not committed" torn.err && ok "uncommitted step reported" \
    || bad "torn step not reported: $(cat torn.err)"
# The only checkpoint committed but torn since: refused with a reason, not a silent
# start from iteration 0.
mkdir -p ck_torn && cp -r ck/iter_0000010 ck_torn/ && truncate -s 100 ck_torn/iter_0000010/optim.safetensors
"$TRAIN" "${RUN[@]}" --load ck_torn --save ck_torn --metrics-file torn_only.jsonl >torn_only.log 2>torn_only.err
rc=$?
if [ $rc -eq 78 ] && grep -q "none of its 1 checkpoint step is intact (the newest committed one, iter_0000010 is torn" \
       torn_only.err && [ ! -s torn_only.jsonl ] && [ "$(ls ck_torn)" = iter_0000010 ]; then
    ok "only checkpoint torn: refused (exit $rc: a restart would fail the same way), nothing trained or written: $(tail -1 torn_only.err)"
else
    bad "only checkpoint torn: rc=$rc (expected 78), $(cat torn_only.err)"
fi
# The only step never committed (a first save cut short by a kill): nothing durable
# was lost, so the run says so and starts from iteration 0 with the same losses.
mkdir -p ck_cut && cp -r ck/iter_0000010 ck_cut/ && rm ck_cut/iter_0000010/manifest.json
"$TRAIN" "${RUN[@]}" --load ck_cut --metrics-file cut.jsonl >cut.log 2>cut.err
rc=$?
if [ $rc -eq 0 ] && grep -q "iter_0000010 is not committed" cut.err &&
   grep -q "no committed checkpoint in --load ck_cut; starting from iteration 0" cut.err &&
   diff <(losses straight.jsonl) <(losses cut.jsonl) >/dev/null; then
    ok "only step uncommitted: reported, fresh start with identical losses"
else
    bad "only step uncommitted: rc=$rc, $(cat cut.err)"
fi

# ---- validation split: --split 8,2,0 over ten documents, evaluated every 5 iterations ----
for i in $(seq 10); do head -c $((200 + i * 10)) rep.txt > "doc$i.txt"; done
"$PREP" --input doc1.txt doc2.txt doc3.txt doc4.txt doc5.txt doc6.txt doc7.txt doc8.txt doc9.txt doc10.txt \
    --output-prefix ten >/dev/null || bad "prepare ten documents"
"$TRAIN" "${TINY[@]}" --train-iters 10 --data-path ten --split 8,2,0 --eval-interval 5 --eval-iters 2 \
    --metrics-file eval.jsonl >eval.log 2>&1 || bad "eval run failed: $(tail -1 eval.log)"
[ "$(grep -c 'validation loss at iteration' eval.log)" = 2 ] && [ "$(grep -c valid_loss eval.jsonl)" = 2 ] \
    && ok "validation loss logged at iterations 5 and 10" || bad "validation loss not logged: $(cat eval.log)"

# ---- --yaml-cfg: the same keys, later flags override ----
printf 'model:\n  num_layers: 2\n  hidden_size: 64\n  num_attention_heads: 4\nseq_length: 32\nmicro_batch_size: 2\nglobal_batch_size: 8\ntrain_iters: 3\nlr: 1.0e-3\nlr_warmup_iters: 3\nseed: 11\n' > run.yaml
"$TRAIN" --yaml-cfg run.yaml --train-iters 20 --metrics-file yaml.jsonl >/dev/null 2>&1 || bad "yaml run failed"
diff <(losses straight.jsonl) <(losses yaml.jsonl) >/dev/null && ok "--yaml-cfg run equals the flag run" \
    || bad "--yaml-cfg run differs from the same flags"

# ---- bad input: one line on stderr naming the file/flag, non-zero exit, nothing written ----
expect_error() { # name pattern args...
    local name=$1 pattern=$2; shift 2
    "$TRAIN" "$@" >/dev/null 2>err.txt
    local rc=$?
    if [ $rc -ne 0 ] && [ "$(wc -l <err.txt)" = 1 ] && grep -q -- "$pattern" err.txt; then
        ok "$name: $(cat err.txt)"
    else
        bad "$name: rc=$rc, stderr: $(cat err.txt)"
    fi
}
# Refused before training: exit 78 (EX_CONFIG), which the coordinator and the launcher do not restart.
expect_refused() { # name pattern args...
    local name=$1 pattern=$2; shift 2
    "$TRAIN" "$@" >/dev/null 2>err.txt
    local rc=$?
    if [ $rc -eq 78 ] && grep -q -- "$pattern" err.txt; then
        ok "$name: exit 78, $(tail -1 err.txt)"
    else
        bad "$name: rc=$rc (expected 78), stderr: $(cat err.txt)"
    fi
}
expect_refused "missing --data-path" \
    "--data-path nowhere: nowhere.idx: No such file or directory (expected the prefix of the .bin/.idx pair" \
    "${TINY[@]}" --data-path nowhere
expect_refused "missing --data-path, 2 ranks" "rank [01] (pid [0-9]*) exited with status 78 (its configuration was refused)" \
    "${TINY[@]}" --data-path nowhere --nproc-per-node 2
expect_refused "unwritable --save, 2 ranks" "--save /proc/atoll-ck: cannot create" "${TINY[@]}" --save /proc/atoll-ck \
    --nproc-per-node 2
# ---- a save that fails: named, not committed, the committed steps untouched ----
# A file-size limit (no privileges needed): the optimizer file of the first save cannot be sized.
SAVEM=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1
       --global-batch-size 2 --train-iters 6)
(ulimit -f 4096; trap '' XFSZ; exec "$TRAIN" "${SAVEM[@]}" --save fsize --save-interval 2 >/dev/null 2>err.txt); rc=$?
if [ $rc = 1 ] && grep -q "^atoll-train: --save fsize: step 2 not saved: .*File too large; it is not committed, .*; its partial files were removed$" err.txt \
   && [ ! -e fsize/iter_0000002 ]; then
    ok "save over the file-size limit: $(cat err.txt)"
else
    bad "save over the file-size limit: rc=$rc, $(cat err.txt), $(ls fsize 2>&1)"
fi
# A full disk (a 10 MiB tmpfs in a private mount namespace): step 2 fits (6.9 MB), step 4 does not;
# it says so, step 4's partial files go, and step 2 still resumes.
if unshare -rm true 2>/dev/null; then
    unshare -rm bash -c 'mount -t tmpfs -o size=10m tmpfs "$1" && cd "$1" && shift && "$@" --save ck --save-interval 2 >/dev/null 2>err.txt;
        echo $? >rc.txt; cp err.txt rc.txt "$OLDPWD/"; ls ck >"$OLDPWD/ls.txt";
        "$@" --load ck --train-iters 4 --metrics-file m.jsonl >/dev/null 2>&1 && cp m.jsonl "$OLDPWD/full_resume.jsonl"' \
        _ "$(mktemp -d "$PWD/full.XXXX")" "$TRAIN" "${SAVEM[@]}"
    if [ "$(cat rc.txt)" = 1 ] && grep -q "step 4 not saved: .*No space left on device; it is not committed, and the steps committed before it are untouched (the disk is full: free space there, or keep fewer steps with --save-keep N); its partial files were removed" err.txt \
       && [ "$(tr '\n' ' ' <ls.txt)" = "iter_0000002 latest_checkpointed_iteration.txt " ] \
       && grep -q '"iteration":3' full_resume.jsonl; then
        ok "save on a full disk: $(cat err.txt); step 2 resumed"
    else
        bad "save on a full disk: rc=$(cat rc.txt), $(cat err.txt), left: $(cat ls.txt)"
    fi
else
    echo "SKIP: save on a full disk: no private mount namespace here (unshare -rm); the file-size case above ran"
fi
head -c 40 rep.idx > trunc.idx && cp rep.bin trunc.bin
expect_error "truncated .idx" "trunc.idx: truncated" "${TINY[@]}" --data-path trunc
cp rep.idx short.idx && head -c 100 rep.bin > short.bin
expect_error "short .bin" "short.bin: .*truncated" "${TINY[@]}" --data-path short
sums_before=$(find ck -type f | sort | xargs md5sum)
expect_refused "missing tensor" "tensor 'h.2.ln_1.weight' is missing" \
    "${RUN[@]}" --num-layers 3 --load ck --save ck --save-interval 1
expect_refused "wrong shape" "tensor 'wpe.weight' has shape \[32, 64\], the model needs \[64, 64\]" \
    "${RUN[@]}" --max-position-embeddings 64 --load ck --save ck --save-interval 1
[ "$sums_before" = "$(find ck -type f | sort | xargs md5sum)" ] && ok "failed loads wrote nothing" \
    || bad "a failed load changed the checkpoint directory"
expect_error "hidden % heads" "--hidden-size 66 is not divisible by --num-attention-heads 4" \
    --num-layers 2 --hidden-size 66 --num-attention-heads 4 --seq-length 32 --save never
[ ! -e never ] && ok "nothing created for a bad config" || bad "a bad config created --save DIR"
expect_error "no valid split" "no validation split" "${TINY[@]}" --eval-interval 5 --eval-iters 1
expect_error "unwritable --save" "--save /proc/atoll-ck: cannot create" "${TINY[@]}" --save /proc/atoll-ck
expect_error "unknown flag" "no-such-flag" "${TINY[@]}" --no-such-flag 1
# Issue 12's inputs: refused up front with a reason, nothing allocated or trained.
expect_error "tp*pp overflow" "65536\*65536 = 4294967296 is more than" "${TINY[@]}" \
    --tensor-model-parallel-size 65536 --pipeline-model-parallel-size 65536
expect_error "launcher tp*pp overflow" "65536\*65536 = 4294967296 is more than" "${TINY[@]}" --nproc-per-node 4 \
    --tensor-model-parallel-size 65536 --pipeline-model-parallel-size 65536
expect_error "huge micro-batch" "micro-batch-size: 1073741824 is above" "${TINY[@]}" --micro-batch-size 1073741824
expect_error "lr inf" "--lr: 'inf' is not a finite number" "${TINY[@]}" --lr inf
expect_error "lr -1" "--lr: -1 is below the smallest accepted value, 0" "${TINY[@]}" --lr -1
/usr/bin/time -f "%M" -o mem.txt "$TRAIN" --num-layers 100000 --hidden-size 128 --num-attention-heads 4 \
    --seq-length 128 --train-iters 1 >/dev/null 2>err.txt
rc=$?
if [ $rc -eq 78 ] && grep -q "GiB per rank .* more than the .* GiB of host memory available" err.txt &&
   [ "$(tail -1 mem.txt)" -lt 1048576 ]; then
    ok "100000 layers refused before allocating (peak RSS $(tail -1 mem.txt) KiB): $(cut -c1-120 err.txt)..."
else
    bad "100000 layers: rc=$rc, peak RSS $(tail -1 mem.txt) KiB, $(cat err.txt)"
fi
# with --bf16 the estimate is the bf16 one (2-byte weights and activations beside the fp32 master)
expect_error "100000 layers, bf16" "activations, bf16 with fp32 master weights) x 1 rank" --num-layers 100000 \
    --hidden-size 128 --num-attention-heads 4 --seq-length 128 --train-iters 1 --bf16
python3 -c "import sys; sys.stdout.write('{a: ' * 60000 + '1' + '}' * 60000)" > deep.yaml
expect_error "60000-deep YAML" "at most 16 levels" --yaml-cfg deep.yaml
: > empty.yaml
expect_error "empty YAML" "empty.yaml: the file is empty" --yaml-cfg empty.yaml
printf 'num_layers: 2\nnum-layers: 3\n' > dup.yaml
expect_error "duplicate YAML key" "line 2: key 'num-layers' is given a second time (first on line 1)" --yaml-cfg dup.yaml
echo 42 > scalar.yaml
expect_error "scalar YAML" "bare value ('42')" --yaml-cfg scalar.yaml
expect_error "no cuda" "--device cuda" "${TINY[@]}" --device cuda

finish engine_cli
