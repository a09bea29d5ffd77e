#!/usr/bin/env bash
# atoll generate end to end: a short text prepared with GPT-2 BPE (JSON lines),
# a small LLaMA-style model trained on it until it has memorised it, then:
#   greedy decoding of its first words reproduces the rest of the text;
#   sampling: the same --seed gives the same text, --top-k 1 is greedy, the
#   tokenizer comes from the checkpoint's manifest (and --vocab-file /
#   --merge-file when those files moved);
#   bad input: no checkpoint, a missing tokenizer file, bad flags: one line, non-zero.
# Then the same with LLaMA-3's tokenizer.json (HuggingFaceTokenizer), in the
# form whose template starts each document with <|begin_of_text|>: the dataset
# holds it and <|end_of_text|>, the model's vocab is its 128256 ids, the
# manifest records --tokenizer-model, greedy decoding reproduces the text, and
# tokenizer flags that do not go together are refused before training.
# Then LLaMA-2's SentencePiece tokenizer.model (Llama2Tokenizer): the dataset
# holds <s> first and </s> last in uint16, the manifest records it, greedy
# decoding reproduces the text, and --json's text continues the prompt with
# the space its first word has.
# usage: engine_generate.sh ATOLL_TRAIN ATOLL PKG_DIR WORKDIR LLAMA3_DIR LLAMA2_MODEL
set -uo pipefail
TRAIN=$(realpath "$1") ATOLL=$(realpath "$2") PKG=$3 W=$4 L3=$5 L2=$6
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" # tests/st_read.py
[ -f "$PKG/encoder.json" ] || { echo "FAIL: $PKG/encoder.json is missing: run scripts/install-deps.sh"; exit 1; }
[ -f "$L3/tokenizer.json" ] || { echo "FAIL: $L3/tokenizer.json is missing: run scripts/install-deps.sh"; exit 1; }
[ -f "$L2" ] || { echo "FAIL: $L2 is missing: run scripts/install-deps.sh"; exit 1; }
PKG=$(realpath "$PKG") L3=$(realpath "$L3") L2=$(realpath "$L2")
. "$(cd "$(dirname "$0")" && pwd)/check_lib.sh"
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
export OPENBLAS_NUM_THREADS=1
printf '{"text": "%s"}\n' "$TEXT" > text.jsonl
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$PKG/encoder.json" --merge-file "$PKG/vocab.bpe")
"$ATOLL" data prepare --input text.jsonl --output-prefix text "${BPE[@]}" --append-eod >/dev/null \
    || bad "data prepare failed"
"$TRAIN" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 \
    --global-batch-size 2 --train-iters 70 --lr 6e-3 --lr-warmup-iters 5 --log-interval 10 "${BPE[@]}" \
    --data-path text --split 1,0,0 --save ck --normalization RMSNorm --swiglu --position-embedding-type rope \
    --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights \
    --metrics-file train.jsonl >train.log 2>&1 || bad "training failed: $(tail -1 train.log)"
loss=$(grep -o '"loss":[^,]*' train.jsonl | tail -1 | cut -d: -f2)
awk -v l="$loss" 'BEGIN { exit !(l < 0.1) }' && ok "memorised: final loss $loss" || bad "final loss $loss is not below 0.1"

PROMPT="Call me Ishmael. Some years"
out=$("$ATOLL" generate --load ck --prompt "$PROMPT" --temperature 0 --max-tokens 26 2>err.log)
[ "$out" = "${TEXT:0:${#out}}" ] && [ ${#out} -ge 110 ] && ok "greedy: \"$out\"" \
    || bad "greedy decoding did not reproduce the text: \"$out\" $(cat err.log)"
j=$("$ATOLL" generate --load ck --prompt "$PROMPT" --temperature 0 --max-tokens 26 --json 2>&1)
python3 -c 'import json,sys; j=json.loads(sys.argv[1]); t=sys.argv[2]
assert j["tokenizer"] == "GPT2BPETokenizer" and j["prompt_tokens"] == 8 and len(j["tokens"]) == 26, j
assert (j["prompt"] + j["text"]) == t[:len(j["prompt"] + j["text"])], j
# seq 32: after the prompt (8) the steps to length 32 decode against the cache, the last one is a whole pass
assert j["timing"]["decode_steps"] == 24 and j["timing"]["pass_steps"] == 1 and j["timing"]["prompt_ms"] > 0, j' "$j" "$TEXT" \
    && ok "--json: tokenizer, prompt tokens, 26 new tokens (24 decode steps, then one pass past --seq-length)" \
    || bad "--json output: $j"

s1=$("$ATOLL" generate --load ck --prompt "The" --temperature 1.5 --seed 7 --max-tokens 20 2>&1)
s2=$("$ATOLL" generate --load ck --prompt "The" --temperature 1.5 --seed 7 --max-tokens 20 2>&1)
s3=$("$ATOLL" generate --load ck --prompt "The" --temperature 1.5 --seed 8 --max-tokens 20 2>&1)
[ "$s1" = "$s2" ] && [ "$s1" != "$s3" ] && ok "sampling: the seed fixes the text, another seed changes it" \
    || bad "sampling with seeds 7, 7, 8: '$s1' / '$s2' / '$s3'"
g=$("$ATOLL" generate --load ck --prompt "$PROMPT" --temperature 0 --max-tokens 10 2>&1)
k1=$("$ATOLL" generate --load ck --prompt "$PROMPT" --temperature 2 --top-k 1 --seed 3 --max-tokens 10 2>&1)
[ "$g" = "$k1" ] && [ "${g:0:${#PROMPT}}" = "$PROMPT" ] && [ ${#g} -gt ${#PROMPT} ] \
    && ok "--top-k 1 is greedy at any temperature" || bad "--top-k 1: '$k1' vs greedy '$g'"

cp -r "$PKG" moved && mv ck ck_saved && cp -r ck_saved ck
sed -i "s#$PKG/encoder.json#$W/gone/encoder.json#" ck/iter_0000070/manifest.json
"$ATOLL" generate --load ck --prompt "Call" --max-tokens 3 >/dev/null 2>err.log
[ $? = 1 ] && grep -q "gone/encoder.json" err.log && grep -q -- "--vocab-file" err.log \
    && ok "a moved vocab file is named: $(cat err.log)" || bad "moved vocab: $(cat err.log)"
m=$("$ATOLL" generate --load ck --prompt "$PROMPT" --temperature 0 --max-tokens 10 --vocab-file moved/encoder.json \
    --merge-file moved/vocab.bpe 2>&1)
[ "$m" = "$g" ] && ok "--vocab-file/--merge-file find the moved tokenizer" || bad "with moved files: '$m'"
for args in "--load nowhere --prompt x" "--load ck" "--load ck --prompt x --temperature -1" "--load ck --prompt x --top-k"; do
    # shellcheck disable=SC2086
    "$ATOLL" generate $args >/dev/null 2>err.log
    rc=$?
    [ $rc -ne 0 ] && [ "$(wc -l <err.log)" -le 8 ] && [ -s err.log ] && ok "generate $args: exit $rc, $(head -1 err.log)" \
        || bad "generate $args: exit $rc, $(cat err.log)"
done

# memorise NAME TAG VOCAB FIRST LAST FMT MAXTOK MINLEN --tokenizer-type T --tokenizer-model M: the text
# prepared with that tokenizer (TAGtext; FMT its token's struct format, i int32 or H uint16; FIRST and
# LAST its first and last ids), a small LLaMA-style model trained until it has memorised it (ck_TAG),
# its manifest naming the tokenizer and VOCAB, and greedy decoding of MAXTOK tokens after the prompt
# reproducing at least MINLEN bytes of the text.
memorise() {
    local name=$1 tag=$2 vocab=$3 bos=$4 eos=$5 fmt=$6 maxtok=$7 minlen=$8 ids n first last top loss out
    shift 8
    "$ATOLL" data prepare --input text.jsonl --output-prefix "${tag}text" "$@" --append-eod >/dev/null 2>prep.err \
        || bad "data prepare with $name's tokenizer failed: $(cat prep.err)"
    ids=$(python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(); n=len(b)//struct.calcsize(sys.argv[2])
v=struct.unpack("<%d%s" % (n, sys.argv[2]), b); print(n, v[0], v[-1], max(v))' "${tag}text.bin" "$fmt" 2>&1)
    read -r n first last top <<<"$ids"
    [ "$first" = "$bos" ] && [ "$last" = "$eos" ] && [ "$top" -lt "$vocab" ] && [ "$n" -gt 30 ] && [ "$n" -lt 70 ] \
        && ok "$name data: $n tokens ($fmt), $bos first, $eos last" || bad "$name data: $ids"
    "$TRAIN" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 \
        --global-batch-size 2 --train-iters 70 --lr 6e-3 --lr-warmup-iters 5 --log-interval 10 "$@" \
        --data-path "${tag}text" --split 1,0,0 --save "ck_$tag" --normalization RMSNorm --swiglu \
        --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \
        --metrics-file "train_$tag.jsonl" >"train_$tag.log" 2>&1 \
        || bad "training with $name's tokenizer failed: $(tail -1 "train_$tag.log")"
    loss=$(grep -o '"loss":[^,]*' "train_$tag.jsonl" | tail -1 | cut -d: -f2)
    awk -v l="$loss" 'BEGIN { exit !(l < 0.1) }' && ok "$name tokenizer: memorised, final loss $loss" \
        || bad "$name tokenizer: final loss $loss is not below 0.1"
    python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); t=m["tokenizer"]
assert t["type"] == sys.argv[2] and t["tokenizer_model"] == sys.argv[3], t
assert m["model"]["vocab_size"] == int(sys.argv[4]), m["model"]["vocab_size"]' "ck_$tag/iter_0000070/manifest.json" \
        "$2" "$4" "$vocab" 2>&1 && ok "manifest: $2, --tokenizer-model, vocab $vocab" || bad "manifest of ck_$tag"
    out=$("$ATOLL" generate --load "ck_$tag" --prompt "$PROMPT" --temperature 0 --max-tokens "$maxtok" 2>err.log)
    [ "$out" = "${TEXT:0:${#out}}" ] && [ ${#out} -ge "$minlen" ] && ok "$name tokenizer, greedy: \"$out\"" \
        || bad "$name tokenizer: greedy decoding did not reproduce the text: \"$out\" $(cat err.log)"
}

# LLaMA-3's tokenizer, its template adding <|begin_of_text|> (Meta's current tokenizer.json)
mkdir -p l3 && cp "$L3/tokenizer_config.json" l3/
python3 - "$L3/tokenizer.json" l3/tokenizer.json <<'PYEOF2'
import json, sys
t = json.load(open(sys.argv[1]))
bos = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}
t["post_processor"] = {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                                "tokens": ["<|begin_of_text|>"]}}}
json.dump(t, open(sys.argv[2], "w"))
PYEOF2
HF=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/l3")
memorise LLaMA-3 l3 128256 128000 128001 i 24 110 "${HF[@]}"
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1
        --global-batch-size 2 --train-iters 1 --data-path l3text --split 1,0,0)
for args in "--tokenizer-type GPT2BPETokenizer --vocab-file $PKG/encoder.json --merge-file $PKG/vocab.bpe --tokenizer-model $W/l3|--tokenizer-model is read by --tokenizer-type HuggingFaceTokenizer" \
            "--tokenizer-type HuggingFaceTokenizer|needs --tokenizer-model" \
            "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $W/l3 --vocab-file $PKG/encoder.json|are read by --tokenizer-type GPT2BPETokenizer, not HuggingFaceTokenizer" \
            "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $W/nowhere|nowhere: No such file or directory" \
            "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $W/l3 --vocab-size 1000|--vocab-size 1000 disagrees with --tokenizer-type HuggingFaceTokenizer: its 128256 entries" \
            "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $W/l3 --padded-vocab-size 1000|--padded-vocab-size 1000 is smaller than the 128256 ids of --tokenizer-type HuggingFaceTokenizer"; do
    # shellcheck disable=SC2086
    "$TRAIN" "${common[@]}" ${args%%|*} >bad.log 2>&1
    rc=$?
    [ $rc -ne 0 ] && grep -qF -- "${args#*|}" bad.log && ok "refused (exit $rc): $(grep -F -- "${args#*|}" bad.log | head -1)" \
        || bad "atoll-train ${args%%|*}: exit $rc, $(tail -2 bad.log)"
done

# NullTokenizer (Megatron's, for ids another tool made): the LLaMA-3 dataset trained with --tokenizer-type
# NullTokenizer --vocab-size 128256 takes the steps it takes with its tokenizer.json, bit for bit (the same ids,
# the same vocab); its documents end at 128255 (--vocab-size - 1), so --eod-mask-loss drops none of this
# dataset's <|end_of_text|> (128001) where the tokenizer.json run drops them; a --vocab-size that padding would
# move is refused with it; atoll generate says it needs the tokenizer that made the ids, and reads text with it.
for i in 1 2 3; do cat text.jsonl; done >text3.jsonl # three documents: samples hold an end of document
"$ATOLL" data prepare --input text3.jsonl --output-prefix l3multi "${HF[@]}" --append-eod >/dev/null 2>prep.err \
    || bad "data prepare of three documents failed: $(cat prep.err)"
NT=("${common[@]}" --data-path l3multi --train-iters 3 --normalization RMSNorm --swiglu --position-embedding-type rope
    --untie-embeddings-and-output-weights --disable-bias-linear --seed 5)
NULLT=(--tokenizer-type NullTokenizer --vocab-size 128256)
# --padded-vocab-size (Megatron's; Qwen2.5's scripts give 152064): the model's vocab as given, unpadded
"$TRAIN" "${NT[@]}" "${HF[@]}" --padded-vocab-size 128300 --make-vocab-size-divisible-by 1 --save ck_pad >nt.log 2>&1 \
    || bad "--padded-vocab-size run failed: $(tail -1 nt.log)"
python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["model"]; assert m["vocab_size"] == 128300, m' \
    ck_pad/iter_0000003/manifest.json 2>&1 && ok "--padded-vocab-size 128300: the model's vocab" || bad "ck_pad's vocab"
"$TRAIN" "${NT[@]}" "${HF[@]}" --metrics-file nt_hf.jsonl >nt.log 2>&1 || bad "the tokenizer.json run failed: $(tail -1 nt.log)"
"$TRAIN" "${NT[@]}" "${HF[@]}" --eod-mask-loss --metrics-file nt_hfm.jsonl >nt.log 2>&1 || bad "masked: $(tail -1 nt.log)"
"$TRAIN" "${NT[@]}" "${NULLT[@]}" --save ck_null --metrics-file nt_null.jsonl >nt.log 2>&1 \
    || bad "the NullTokenizer run failed: $(tail -1 nt.log)"
"$TRAIN" "${NT[@]}" "${NULLT[@]}" --eod-mask-loss --metrics-file nt_nullm.jsonl >nt.log 2>&1 \
    || bad "the masked NullTokenizer run failed: $(tail -1 nt.log)"
if [ -s nt_null.jsonl ] && [ "$(losses nt_null.jsonl)" = "$(losses nt_hf.jsonl)" ] \
    && [ "$(losses nt_nullm.jsonl)" = "$(losses nt_null.jsonl)" ] && [ "$(losses nt_hfm.jsonl)" != "$(losses nt_hf.jsonl)" ]
then ok "NullTokenizer --vocab-size 128256: the tokenizer.json run's losses bit for bit; its --eod-mask-loss drops 128255, not 128001"
else bad "NullTokenizer losses: $(losses nt_null.jsonl | tr '\n' ' ') / $(losses nt_hf.jsonl | tr '\n' ' ') / $(losses nt_nullm.jsonl | tr '\n' ' ')"; fi
"$TRAIN" "${NT[@]}" --tokenizer-type NullTokenizer --vocab-size 128200 --eod-mask-loss >bad.log 2>&1
rc=$?
[ $rc -ne 0 ] && grep -qF -- "NullTokenizer ends a document at --vocab-size - 1 = 128199, and --vocab-size 128200 pads to 128256" bad.log \
    && ok "refused (exit $rc): $(grep -F NullTokenizer bad.log | head -1)" || bad "NullTokenizer padding: exit $rc, $(tail -2 bad.log)"
"$ATOLL" generate --load ck_null --prompt "$PROMPT" --max-tokens 4 >gen.out 2>bad.log
rc=$?
[ $rc -ne 0 ] && grep -qF "NullTokenizer has no text form" bad.log && grep -qF "takes --tokenizer-type with its files" bad.log \
    && ok "generate of a NullTokenizer checkpoint refused (exit $rc): $(head -1 bad.log)" || bad "generate, NullTokenizer: exit $rc, $(cat bad.log)"
"$ATOLL" generate --load ck_null --prompt "$PROMPT" --max-tokens 4 "${HF[@]}" >gen.out 2>bad.log \
    && [ "$(head -c ${#PROMPT} gen.out)" = "$PROMPT" ] && ok "generate with --tokenizer-type HuggingFaceTokenizer: \"$(cat gen.out)\"" \
    || bad "generate with the tokenizer named: $(cat bad.log)"

# LLaMA-2's tokenizer.model: <s> starts each document, </s> (--append-eod) ends it
L2T=(--tokenizer-type Llama2Tokenizer --tokenizer-model "$L2")
memorise LLaMA-2 l2 32000 1 2 H 20 100 "${L2T[@]}"
j=$("$ATOLL" generate --load ck_l2 --prompt "$PROMPT" --temperature 0 --max-tokens 20 --json 2>&1)
python3 -c 'import json,sys; j=json.loads(sys.argv[1]); t=sys.argv[2]
assert j["tokenizer"] == "Llama2Tokenizer" and j["tokens"] and j["text"].startswith(" ago,"), j
assert (j["prompt"] + j["text"]) == t[:len(j["prompt"] + j["text"])], j' "$j" "$TEXT" \
    && ok "LLaMA-2 --json: the text continues the prompt (\" ago, ...\")" || bad "LLaMA-2 --json output: $j"
# atoll export: each tokenizer's files beside the LLaMA model, byte for byte (GPT-2 BPE's under Hugging Face's
# names vocab.json and merges.txt; tokenizer.json with its tokenizer_config.json; tokenizer.model), the tensors
# and config.json of the step; a tokenizer that moved is refused before anything is written
export_ok() { # CK OUT FROM:NAME...
    local ck=$1 out=$2 pair good=1
    shift 2
    "$ATOLL" export --load "$ck" --output "$out" >export.log 2>&1 || good=0
    for pair in "$@"; do cmp -s "${pair%%:*}" "$out/${pair#*:}" || good=0; done
    cmp -s "$ck/iter_0000070/config.json" "$out/config.json" || good=0
    python3 -c 'import sys, st_read
assert st_read.tensors(sys.argv[1]) == st_read.tensors(sys.argv[2])' "$ck/iter_0000070/model.safetensors" "$out/model.safetensors" || good=0
    [ $good = 1 ] && ok "export $ck: $(cat export.log)" || bad "export $ck: $(cat export.log)"
}
export_ok ck_saved hf_bpe "$PKG/encoder.json:vocab.json" "$PKG/vocab.bpe:merges.txt"
export_ok ck_l3 hf_l3 "$W/l3/tokenizer.json:tokenizer.json" "$W/l3/tokenizer_config.json:tokenizer_config.json"
export_ok ck_l2 hf_l2 "$L2:tokenizer.model"
# and back (atoll import): the same weights, the tokenizer the export wrote beside them
for pair in ck_saved:hf_bpe:GPT2BPETokenizer ck_l3:hf_l3:HuggingFaceTokenizer ck_l2:hf_l2:Llama2Tokenizer; do
    IFS=: read -r ck hf tok <<<"$pair"
    "$ATOLL" import --hf "$hf" --save "imp_$hf" >import.log 2>&1 \
        && cmp -s "$ck/iter_0000070/model.safetensors" "imp_$hf/iter_0000000/model.safetensors" \
        && grep -qF "\"type\":\"$tok\"" "imp_$hf/iter_0000000/manifest.json" \
        && ok "import $hf: the same bytes as $ck, $tok" || bad "import $hf: $(cat import.log)"
done
"$ATOLL" export --load ck --output hf_gone >export.log 2>&1
[ $? = 1 ] && grep -q "gone/encoder.json" export.log && [ ! -e hf_gone ] \
    && ok "export with a moved tokenizer: refused, nothing written: $(cat export.log)" || bad "export, moved tokenizer: $(cat export.log)"
finish engine_generate
