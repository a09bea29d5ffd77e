#!/usr/bin/env bash
# atoll generate end to end: a short text prepared with GPT-2 BPE (JSON lines),
# a small LLaMA-style model trained on it until it has memorised it, then:
#   greedy decoding of its first words reproduces the rest of the text;
#   sampling: the same --seed gives the same text, --top-k 1 is greedy, the
#   tokenizer comes from the checkpoint's manifest (and --vocab-file /
#   --merge-file when those files moved);
#   bad input: no checkpoint, a missing tokenizer file, bad flags: one line, non-zero.
# usage: engine_generate.sh ATOLL_TRAIN ATOLL PKG_DIR WORKDIR
set -uo pipefail
TRAIN=$(realpath "$1") ATOLL=$(realpath "$2") PKG=$3 W=$4
[ -f "$PKG/encoder.json" ] || { echo "FAIL: $PKG/encoder.json is missing: run scripts/install-deps.sh"; exit 1; }
PKG=$(realpath "$PKG")
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
failures=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
export OPENBLAS_NUM_THREADS=1

TEXT="Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about."
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
assert (j["prompt"] + j["text"]) == t[:len(j["prompt"] + j["text"])], j' "$j" "$TEXT" \
    && ok "--json: tokenizer, prompt tokens, 26 new tokens" || bad "--json output: $j"

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
[ $failures = 0 ] && echo "engine_generate: all checks passed" || echo "engine_generate: $failures failure(s)"
exit $((failures > 0))
