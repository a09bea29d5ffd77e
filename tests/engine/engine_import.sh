#!/usr/bin/env bash
# atoll import: a Hugging Face model directory as a checkpoint of its weights, to fine-tune from.
#   LLaMA family (LLaMA-3's tokenizer.json, grouped keys, untied): a trained step exported and imported
#   back is the same file byte for byte, with the same model settings; the same directory resharded
#   (index.json, three files) in BF16, F16 and F32 imports to the values Python decodes from them;
#   --finetune --use-checkpoint-args from the import trains with the original's losses bit for bit,
#   generate from it writes the original's text; a resume of it is refused by name.
#   GPT-2 (BPE, Conv1D weights, fused c_attn) as the hub keeps it: names without "transformer.", the
#   vocabulary's 50257 rows, the causal-mask buffers: every tensor back as trained, the embedding
#   padded to 50304 with zero rows.
#   Refused, with nothing written: a rope type atoll does not turn by, a tensor with no place in the
#   model, a directory with no tokenizer, a --save that holds steps already.
#   Qwen3 (head norms, heads 32 wide, tied) with the hub's 151936 rows where its tokenizer pads to 151680:
#   the rows kept as --padded-vocab-size, which --use-checkpoint-args takes back, and fine-tuning runs.
# usage: engine_import.sh ATOLL_TRAIN ATOLL PKG_DIR LLAMA3_DIR QWEN3_DIR WORKDIR
set -uo pipefail
TRAIN=$(realpath "$1") ATOLL=$(realpath "$2") PKG=$(realpath "$3") L3=$(realpath "$4") Q3=$(realpath "$5") W=$6
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd):$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
FIX="python3 $(cd "$(dirname "$0")" && pwd)/hf_fixture.py"
[ -f "$L3/tokenizer.json" ] && [ -f "$PKG/encoder.json" ] || { echo "FAIL: tokenizers missing: run scripts/install-deps.sh"; exit 1; }
. "$(cd "$(dirname "$0")" && pwd)/check_lib.sh"
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
export OPENBLAS_NUM_THREADS=1
printf '{"text": "%s"}\n' "$TEXT" > text.jsonl
L3T=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$L3")
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$PKG/encoder.json" --merge-file "$PKG/vocab.bpe")
"$ATOLL" data prepare --input text.jsonl --output-prefix l3text "${L3T[@]}" --append-eod >/dev/null || bad "prepare (LLaMA-3)"
"$ATOLL" data prepare --input text.jsonl --output-prefix bpetext "${BPE[@]}" --append-eod >/dev/null || bad "prepare (BPE)"
SMALL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 --global-batch-size 2
       --lr 6e-3 --split 1,0,0)
"$TRAIN" "${SMALL[@]}" --train-iters 20 "${L3T[@]}" --data-path l3text --save ck --normalization RMSNorm --swiglu \
    --position-embedding-type rope --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights \
    --disable-bias-linear --rotary-base 500000 --norm-epsilon 1e-6 >train.log 2>&1 || bad "LLaMA training: $(tail -1 train.log)"
"$ATOLL" export --load ck --output hf >export.log 2>&1 || bad "export: $(cat export.log)"

# the round trip: the same bytes, the same settings
"$ATOLL" import --hf hf --save imp >import.log 2>&1 && cmp -s ck/iter_0000020/model.safetensors imp/iter_0000000/model.safetensors \
    && ok "export then import: model.safetensors the same bytes: $(cat import.log)" || bad "round trip: $(cat import.log)"
python3 -c 'import json, sys
a, b = (json.load(open(p))["model"] for p in sys.argv[1:3])
t = json.load(open(sys.argv[2]))["tokenizer"]
assert a == b, set(a.items()) ^ set(b.items())
assert json.load(open(sys.argv[2]))["weights_only"] is True and t["type"] == "HuggingFaceTokenizer", t
assert sorted(json.load(open(sys.argv[2]))["files"]) == ["model.safetensors"]' ck/iter_0000020/manifest.json \
    imp/iter_0000000/manifest.json && ok "the manifest: the trained model's settings, the weights alone" \
    || bad "imported manifest differs"
# --json (the CLI's global flag, handed to the command): what was written, as one object each
"$ATOLL" --json export --load ck --output hfj >export.json 2>export.err && "$ATOLL" import --json --hf hfj --save impj \
    >import.json 2>import.err && python3 -c 'import json, sys
e, i = (json.load(open(p)) for p in sys.argv[1:3])
assert e == {"load": "ck", "step": 20, "output": "hfj", "model": "LLaMA family", "tensors": 21, "dtype": "F32",
             "tokenizer_files": ["tokenizer.json", "tokenizer_config.json"]}, e
assert i == {"hf": "hfj", "architecture": "llama", "tensors": 21, "files": 1, "from": "F32", "save": "impj", "step": 0,
             "step_dir": "impj/iter_0000000"}, i' export.json import.json >json.log 2>&1 \
    && cmp -s ck/iter_0000020/model.safetensors impj/iter_0000000/model.safetensors \
    && ok "export and import --json: $(cat export.json import.json | tr '\n' ' ')" \
    || bad "--json: $(cat export.json export.err import.json import.err json.log 2>/dev/null)"

# fine-tuning from it: the original's losses; generate: the original's text
FT=(--finetune --use-checkpoint-args --micro-batch-size 1 --global-batch-size 2 --train-iters 3 --lr 1e-3 --split 1,0,0
    --data-path l3text)
"$TRAIN" --load ck "${FT[@]}" --save ft_ck --metrics-file ft_ck.jsonl >ft.log 2>&1 || bad "finetune from ck: $(tail -1 ft.log)"
"$TRAIN" --load imp "${FT[@]}" --save ft_imp --metrics-file ft_imp.jsonl >ft.log 2>&1 || bad "finetune from imp: $(tail -1 ft.log)"
[ -s ft_imp.jsonl ] && [ "$(losses ft_imp.jsonl)" = "$(losses ft_ck.jsonl)" ] && grep -q "to fine-tune from iteration 0" ft.log \
    && ok "--finetune from the import: the original's losses $(losses ft_imp.jsonl | cut -d: -f2 | tr '\n' ' ')" \
    || bad "finetune losses: $(losses ft_imp.jsonl | tr '\n' ' ') vs $(losses ft_ck.jsonl | tr '\n' ' ')"
g1=$("$ATOLL" generate --load ck --prompt "Call me" --temperature 0 --max-tokens 8 2>&1)
g2=$("$ATOLL" generate --load imp --prompt "Call me" --temperature 0 --max-tokens 8 2>&1)
[ -n "$g1" ] && [ "$g1" = "$g2" ] && ok "generate from the import: \"$g2\"" || bad "generate: '$g2' vs '$g1'"
"$TRAIN" --load imp --use-checkpoint-args --micro-batch-size 1 --global-batch-size 2 --train-iters 3 --data-path l3text \
    --split 1,0,0 --save imp >resume.log 2>&1
rc=$?
[ $rc -ne 0 ] && grep -qF "holds the weights alone" resume.log && grep -qF -- "--finetune" resume.log \
    && ok "a resume of the weights alone refused (exit $rc): $(grep -F 'weights alone' resume.log)" \
    || bad "resume of an import: exit $rc, $(tail -2 resume.log)"

# sharded, in BF16, F16 and F32
$FIX reshard hf hf16 && $FIX expect hf16 want16.safetensors || bad "resharding failed"
"$ATOLL" import --hf hf16 --save imp16 >import.log 2>&1 && grep -q "from 3 files, F32+BF16+F16 to F32" import.log \
    && $FIX same imp16/iter_0000000/model.safetensors want16.safetensors >same.log 2>&1 \
    && ok "three shards in F32, BF16 and F16: the values Python decodes ($(cat same.log)): $(cat import.log)" \
    || bad "sharded import: $(cat import.log) $(cat same.log 2>/dev/null)"

# export --dtype bf16: each tensor rounded to nearest even (Python's rounding of the same floats), config.json
# says bfloat16; imported back, the values those bits hold
"$ATOLL" export --load ck --output hfb --dtype bf16 >export.log 2>&1 && grep -q "21 tensors in BF16" export.log \
    || bad "export --dtype bf16: $(cat export.log)"
python3 - ck/iter_0000020/model.safetensors hfb <<'PY' >bf.log 2>&1 && ok "export --dtype bf16: $(cat bf.log)" || bad "bf16 export: $(cat bf.log)"
import json, sys, st_read, hf_fixture
a, b = st_read.tensors(sys.argv[1]), st_read.tensors(sys.argv[2] + "/model.safetensors")
assert sorted(a) == sorted(b)
for n in a:
    assert b[n][0] == "BF16" and b[n][1] == a[n][1] and b[n][2] == hf_fixture.to_bf16(a[n][2]), n
assert json.load(open(sys.argv[2] + "/config.json"))["torch_dtype"] == "bfloat16"
print("%d tensors, the bits Python rounds to, torch_dtype bfloat16" % len(b))
PY
"$ATOLL" import --hf hfb --save impb >import.log 2>&1 && $FIX expect_one hfb wantb.safetensors \
    && $FIX same impb/iter_0000000/model.safetensors wantb.safetensors >same.log 2>&1 \
    && ok "the bf16 export imported: $(cat same.log)" || bad "bf16 round trip: $(cat import.log) $(cat same.log 2>/dev/null)"
"$ATOLL" export --load ck --output hfx --dtype fp16 >export.log 2>&1
[ $? = 2 ] && grep -qF "expected fp32 or bf16" export.log && [ ! -e hfx ] && ok "--dtype fp16 refused: $(cat export.log)" \
    || bad "--dtype fp16: $(cat export.log)"

# GPT-2 as the hub keeps it
"$TRAIN" "${SMALL[@]}" --train-iters 10 "${BPE[@]}" --data-path bpetext --save ckg >train.log 2>&1 \
    || bad "GPT-2 training: $(tail -1 train.log)"
"$ATOLL" export --load ckg --output hfg >export.log 2>&1 && $FIX gpt2hub hfg hub 50257 || bad "GPT-2 export: $(cat export.log)"
"$ATOLL" import --hf hub --save impg >import.log 2>&1
python3 - ckg/iter_0000010/model.safetensors impg/iter_0000000/model.safetensors <<'PY' >same.log 2>&1; r3=$?
import sys, st_read
a, b = st_read.tensors(sys.argv[1]), st_read.tensors(sys.argv[2])
assert sorted(a) == sorted(b)
for n in a:
    if n != "wte.weight":
        assert a[n] == b[n], n
ra, rb = a["wte.weight"][2], b["wte.weight"][2]
cut = 50257 * 64 * 4
assert a["wte.weight"][1] == b["wte.weight"][1] == [50304, 64]
assert ra[:cut] == rb[:cut] and rb[cut:] == bytes(len(rb) - cut)
print("GPT-2: %d tensors as trained, wte's 47 padded rows zero" % len(a))
PY
[ $r3 = 0 ] && grep -q "gpt2, 28 tensors" import.log \
    && ok "$(cat same.log): $(cat import.log)" || bad "GPT-2 import: $(cat import.log) $(cat same.log)"

# Qwen3 as the hub keeps it: 151936 rows
Q3T=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$Q3")
"$ATOLL" data prepare --input text.jsonl --output-prefix qtext "${Q3T[@]}" --append-eod >/dev/null || bad "prepare (Qwen3)"
"$TRAIN" "${SMALL[@]}" --train-iters 5 "${Q3T[@]}" --data-path qtext --save ckq --normalization RMSNorm --swiglu \
    --position-embedding-type rope --group-query-attention --num-query-groups 2 --disable-bias-linear --qk-layernorm \
    --kv-channels 32 --norm-epsilon 1e-6 --rotary-base 1000000 >train.log 2>&1 || bad "Qwen3 training: $(tail -1 train.log)"
"$ATOLL" export --load ckq --output hfq >export.log 2>&1 && cp -r hfq hubq && python3 - hubq <<'PY' || bad "Qwen3 export: $(cat export.log)"
import json, sys, st_read, hf_fixture
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
assert c["architectures"] == ["Qwen3ForCausalLM"] and c["vocab_size"] == 151680 and c["tie_word_embeddings"], c
c["vocab_size"] = 151936
json.dump(c, open(d + "/config.json", "w"))
out = []
for n, (dt, s, r) in st_read.tensors(d + "/model.safetensors").items():
    if n == "model.embed_tokens.weight":
        r, s = r + bytes((151936 - s[0]) * s[1] * 4), [151936, s[1]]
    out.append((n, dt, s, r))
hf_fixture.write(d + "/model.safetensors", out)
PY
"$ATOLL" import --hf hubq --save impq >import.log 2>&1 && grep -q "qwen3, 24 tensors" import.log \
    && grep -qF '"vocab_size":151936,"padded_vocab_size":151936' impq/iter_0000000/manifest.json \
    && "$TRAIN" --load impq "${FT[@]/l3text/qtext}" --save ft_q >ft.log 2>&1 && grep -qF -- "--padded-vocab-size 151936" ft.log \
    && ok "Qwen3 with the hub's 151936 rows: kept as --padded-vocab-size, fine-tuned from: $(cat import.log)" \
    || bad "Qwen3 import: $(cat import.log) $(tail -2 ft.log)"

# refused, nothing written
refused() { # WHAT GREP DIR: import of DIR to a new --save exits 1 naming GREP and leaves no --save
    "$ATOLL" import --hf "$3" --save "out_$3" >ref.log 2>&1
    local rc=$?
    [ $rc = 1 ] && grep -qF -- "$2" ref.log && [ ! -e "out_$3" ] && ok "$1 refused: $(cat ref.log)" \
        || bad "$1: exit $rc, $(cat ref.log), out_$3 $([ -e "out_$3" ] && echo exists)"
}
cp -r hf yarn && $FIX edit yarn rope_scaling '{"rope_type": "yarn", "factor": 4.0}'
refused "rope_scaling yarn" "rope_scaling of type 'yarn'" yarn
cp -r hf extra && $FIX extra extra model.layers.0.mlp.extra.weight
refused "a tensor with no place" "holds 'model.layers.0.mlp.extra.weight'" extra
mkdir notok && cp hf/config.json hf/model.safetensors notok/
refused "no tokenizer" "holds no tokenizer" notok
cp -r hf mixedbias && $FIX edit mixedbias attention_bias true
refused "attention_bias without mlp_bias" "biases all or none" mixedbias
"$ATOLL" import --hf hf --save ck >ref.log 2>&1
[ $? = 1 ] && grep -qF "already holds checkpoint steps" ref.log && [ ! -e ck/iter_0000000 ] \
    && ok "a --save with steps refused: $(cat ref.log)" || bad "import into ck: $(cat ref.log)"

finish engine_import
