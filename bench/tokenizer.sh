#!/usr/bin/env bash
# bench/tokenizer: GPT-2 BPE encoding speed on one core, atoll's C tokenizer
# against the reference JavaScript encoder (the npm package gpt-3-encoder, run
# with node), on the same text; plus `atoll data prepare` end to end (vocab
# load, JSON lines, encode, write the dataset).
#
# Corpora: English prose (the demo's Moby-Dick chapters, repeated to 2.4 MB) and
# a multilingual mix (words of Latin, Cyrillic, Arabic, Devanagari, CJK, Hangul
# letters and emoji between ASCII, about 1 MB). Both encoders keep a cache of
# encoded pieces, so a repeated word costs a lookup in either. MB/s counts input
# bytes; the time is the encoding alone (the vocab is loaded before), the best
# of 3 runs, pinned to one core. Both encode paragraph by paragraph (split after
# each blank line), as a per-document tool calls them, and give the same ids:
# the reference's encode() appends with Array.concat, quadratic in the tokens
# of one call, so a whole file in one call would only measure that.
#
# usage: bench/tokenizer.sh [BUILD_DIR] [OUT.md]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/results/tokenizer.md}
PKG=.deps/gpt-3-encoder
TOOL=$BUILD/bin/engine_tok_tool
PREP=$BUILD/bin/engine_prepare_tool
[ -f "$PKG/Encoder.js" ] || { echo "run scripts/install-deps.sh first (gpt-3-encoder)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CORE=${CORE:-0}
PIN=(taskset -c "$CORE")

for _ in $(seq 20); do cat scripts/demo-data/moby-dick-ch1-12.txt; done > "$WORK/english.txt"
/usr/bin/python3 - "$WORK/multi.txt" <<'PY'
import random, sys
ascii_ = [chr(c) for c in range(0x21, 0x7F)]
scripts = [[chr(c) for c in range(0x00C0, 0x0250)], [chr(c) for c in range(0x0410, 0x0450)],
           [chr(c) for c in range(0x0621, 0x064B)], [chr(c) for c in range(0x0905, 0x0940)],
           [chr(c) for c in range(0x4E00, 0x4F00)], [chr(c) for c in range(0xAC00, 0xAD00)],
           [chr(c) for c in range(0x1F600, 0x1F650)]]
rng = random.Random(7)
words = ["".join(rng.choice(rng.choice(scripts)) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
out, size = [], 0
while size < 1_000_000:
    w = rng.choice(words) if rng.random() < 0.7 else "".join(rng.choice(ascii_) for _ in range(rng.randint(1, 8)))
    w += rng.choice([" ", " ", " ", ", ", ".\n", "\n\n"])
    out.append(w)
    size += len(w.encode())
open(sys.argv[1], "w", encoding="utf-8").write("".join(out))
PY
cat > "$WORK/ref_time.js" <<'JS'
const fs = require('fs'), path = require('path');
const [pkg, file] = process.argv.slice(2);
const enc = require(path.resolve(pkg, 'Encoder.js'));
// one encode() per paragraph, as a per-document tool calls it: encode() appends
// with Array.concat, so one call on a whole file is quadratic in its tokens
const paras = fs.readFileSync(file, 'utf8').split(/(?<=\n\n)/), bytes = fs.statSync(file).size;
let best = Infinity, n = 0;
for (let r = 0; r < 3; r++) {
  const t0 = process.hrtime.bigint();
  n = 0;
  for (const p of paras) n += enc.encode(p).length;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(bytes + ' ' + n + ' ' + best);
JS

atoll_time() { # best of 3: "bytes tokens seconds"
  local best=""
  for _ in 1 2 3; do
    line=$("${PIN[@]}" "$TOOL" "$PKG/encoder.json" "$PKG/vocab.bpe" time "$1" 2>&1 >/dev/null)
    # "N bytes, M tokens in S s: X MB/s"
    set -- "$1" "$(echo "$line" | awk '{print $1, $3, $6}')"
    s=$(echo "$2" | awk '{print $3}')
    if [ -z "$best" ] || awk "BEGIN{exit !($s < $(echo "$best" | awk '{print $3}'))}"; then best=$2; fi
  done
  echo "$best"
}
row() { # name file
  local a r
  a=$(atoll_time "$2")
  r=$("${PIN[@]}" node "$WORK/ref_time.js" "$PKG" "$2")
  echo "$a $r" | awk -v name="$1" '{ printf "| %s | %.2f | %d | %.1f | %d | %.2f | %.1fx |\n", name, $1/1e6, $2, $1/1e6/$3, $5, $1/1e6/$6, $6/$3 }'
}
ROWS=$(row "English (Moby-Dick x20)" "$WORK/english.txt"; row "multilingual mix" "$WORK/multi.txt")

/usr/bin/python3 -c "
import json, sys
text = open('$WORK/english.txt', encoding='utf-8').read().split('\n\n')
with open('$WORK/docs.jsonl', 'w') as f:
    for t in text: f.write(json.dumps({'text': t}) + '\n')"
PREP_LINE=$("${PIN[@]}" "$PREP" --input "$WORK/docs.jsonl" --output-prefix "$WORK/ds" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$PKG/encoder.json" --merge-file "$PKG/vocab.bpe" --append-eod --json)
PREP_T=$( { /usr/bin/time -f %e "${PIN[@]}" "$PREP" --input "$WORK/docs.jsonl" --output-prefix "$WORK/ds2" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$PKG/encoder.json" --merge-file "$PKG/vocab.bpe" --append-eod >/dev/null; } 2>&1 )

{
  echo "# GPT-2 BPE tokenizer: MB/s on one core"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: \`$(uname -srvmo)\`, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), pinned to core $CORE (taskset)"
  echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared)"
  echo "- command: \`bench/tokenizer.sh $BUILD\`; atoll: \`engine_tok_tool ... time FILE\` (tokenizer.c), reference:"
  echo "  gpt-3-encoder $(node -p "require('./$PKG/package.json').version") \`encode()\` under node $(node --version)"
  echo "- both produce the same ids (the token counts below; tests/engine/engine_tokenizer.py checks them id by id)"
  echo
  echo "| corpus | MB | atoll tokens | atoll MB/s | reference tokens | reference MB/s | atoll / reference |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  echo "$ROWS"
  echo
  echo "\`atoll data prepare\` end to end on the English corpus as JSON lines (one paragraph a line, --append-eod),"
  echo "vocab loading and the dataset written included: $PREP_T s wall for $(du -m "$WORK/english.txt" | cut -f1) MB"
  echo "(\`$PREP_LINE\`)."
} > "$OUT"
cat "$OUT"
