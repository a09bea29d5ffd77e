#!/usr/bin/env python3
"""Writes seed inputs for fuzz_handlers, fuzz_frame, fuzz_jobspec, fuzz_tokenizer and fuzz_safetensors into fuzz/corpus/.

Each seed is one peer-selector byte followed by wire frames (8-byte header:
"AT", u16 type, u32 length, big-endian; then the protobuf payload), so the
fuzzer starts from requests that decode and reaches the handlers' logic.
The protobuf encoding is done by hand here to need no protobuf package.
Files are named by the SHA-1 of their bytes, as libFuzzer names what it adds."""
import hashlib
import json
import os
import struct


def varint(n):
    out = b""
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def f_int(num, v):
    return varint(num << 3) + varint(v)


def f_bytes(num, v):
    if isinstance(v, str):
        v = v.encode()
    return varint(num << 3 | 2) + varint(len(v)) + v


def frame(t, payload=b""):
    return b"AT" + struct.pack(">HI", t, len(payload)) + payload


gpu = lambda i: f_int(1, i) + f_bytes(3, "NVIDIA H100 80GB HBM3") + f_int(4, 80 << 30) + f_bytes(6, "isl") + f_int(7, i)
node = f_bytes(1, "fz1") + b"".join(f_bytes(3, gpu(i)) for i in range(8)) + f_bytes(4, f_bytes(1, "mlx5_0") + f_int(5, 0))
spec = (f_int(2, 8) + f_int(10, 4) + f_int(11, 64) + f_int(12, 8) + f_int(14, 32) + f_int(16, 256)
        + f_int(20, 2) + f_int(21, 2) + f_int(26, 1) + f_int(27, 8) + f_bytes(28, "tp-cp-ep-dp-pp"))
metrics = f_int(1, 1) + f_int(2, 0) + f_int(4, 5)
seeds = {
    "register": b"\x02" + frame(10, f_bytes(1, node)) + frame(12, f_int(1, 1) + f_bytes(4, metrics)),
    "heartbeat": b"\x00" + frame(12, f_int(1, 7)),
    "nodes": b"\x01" + frame(20) + frame(20, f_bytes(1, "seed")),
    "drain": b"\x01" + frame(22, f_bytes(1, "seed") + f_int(2, 1)) + frame(22, f_bytes(1, "seed")),
    "submit": b"\x01" + frame(24, f_bytes(1, spec)) + frame(26) + frame(26, f_int(1, 1)),
    "cancel": b"\x01" + frame(28, f_int(1, 1)) + frame(30, f_int(1, 1)),
    "events": b"\x01" + frame(32, f_int(1, 0) + f_int(2, 10)),
    "kv": b"\x03" + frame(41, f_bytes(3, "k") + f_int(4, 100)) + frame(40, f_bytes(3, "k") + f_bytes(4, "v"))
          + frame(43, f_bytes(3, "c") + f_int(4, 2)) + frame(41, f_bytes(3, "c")),
    # a worker relaying step reports, a rank exit and its running jobs; then a log answer
    "reports": b"\x00" + frame(12, f_int(1, 8) + f_bytes(4, f_int(1, 1) + f_int(4, 3) + f_int(16, 0) + f_int(19, 5))
                               + f_bytes(6, f_int(1, 1) + f_int(3, 2) + f_int(6, 9) + f_bytes(7, "boom") + f_int(9, 6))
                               + f_bytes(7, f_int(1, 1)))
               + frame(18, f_int(1, 1) + f_bytes(2, "log line")),
    "metrics_logs": b"\x01" + frame(36, f_int(1, 1) + f_int(3, 10)) + frame(34, f_int(1, 1) + f_int(3, -100)),
    # watchdog reports (a rank waiting in a TP all-reduce, one stopped and silent) and rank 0's
    # checkpoint fields (a commit, a re-reported step), after a placement
    "watches": b"\x00" + frame(12, f_int(1, 9)
                               + f_bytes(8, f_int(1, 1) + f_int(3, 0) + f_int(4, 3) + f_bytes(5, "step") + f_int(9, 100)
                                         + f_bytes(6, f_bytes(1, "tp") + f_bytes(2, "all-reduce") + f_int(3, 41)
                                                   + f_bytes(4, varint(0) + varint(1)) + f_int(5, 900)))
                               + f_bytes(8, f_int(1, 1) + f_int(3, 1) + f_int(4, 3) + f_bytes(5, "step")
                                         + f_int(9, 5000) + f_int(10, 1) + f_int(11, 42))
                               + f_bytes(4, f_int(1, 1) + f_int(4, 6) + f_int(22, 5) + f_int(25, 4) + f_int(19, 7))
                               + f_bytes(4, f_int(1, 1) + f_int(4, 2) + f_int(27, 1) + f_int(19, 8))),
    "launch_ack": b"\x00" + frame(15, f_int(1, 1) + f_int(3, 1) + f_bytes(4, "ok")),
    # sequences with ticks (type 0xffff) between the frames
    "submit_tick": b"\x01" + frame(24, f_bytes(1, spec) + f_bytes(2, "req-1")) + frame(0xFFFF) + frame(26)
                   + frame(24, f_bytes(1, spec) + f_bytes(2, "req-1")),
    "silence": b"\x00" + frame(12, f_int(1, 1)) + frame(0xFFFF) * 4 + frame(12, f_int(1, 2)),
    # a job, then one after it (--dependency), the first cancelled, ticks between
    "dependency": b"\x01" + frame(24, f_bytes(1, spec)) + frame(0xFFFF)
                  + frame(24, f_bytes(1, spec + f_bytes(102, "afterok:1,afterany:1:1"))) + frame(0xFFFF)
                  + frame(28, f_int(1, 1)) + frame(0xFFFF) * 2,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_handlers")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)
frames_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_frame")
os.makedirs(frames_out, exist_ok=True)
for name, data in seeds.items():
    data = b"\x07" + data[1:]
    with open(os.path.join(frames_out, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)

# fuzz_jobspec: byte 0 the way (0 flags, 1 YAML, 2 protobuf), bytes 1-4 the world size, byte 5 the island.
def job(way, world, island, body):
    return bytes([way]) + struct.pack(">I", world) + bytes([island]) + body


flags = ["--num-layers", "8", "--hidden-size", "128", "--num-attention-heads", "8", "--seq-length", "64",
         "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
         "--num-layers-per-virtual-pipeline-stage", "2", "--micro-batch-size", "2", "--global-batch-size", "16",
         "--sequence-parallel", "--use-distributed-optimizer", "--recompute-granularity", "selective",
         "--lr", "3e-4", "--min-lr", "3e-5", "--rank-order", "tp-dp-pp"]
yaml = (b"model:\n  num_layers: 8\n  hidden_size: 128\n  num_attention_heads: 8\n  seq_length: 64\n"
        b"parallel:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n"
        b"  global_batch_size: 16\ntraining:\n  lr: 3.0e-4\n  lr_decay_style: linear\n")
jobs = {
    "flags": job(0, 8, 8, b"\0".join(f.encode() for f in flags)),
    "yaml": job(1, 8, 8, yaml),
    "protobuf": job(2, 8, 8, spec),
    "dependency": job(2, 8, 8, spec + f_bytes(102, "afternotok:3:4,afterok:5")),
    "schedule": job(0, 8, 8, b"\0".join(f.encode() for f in flags + ["--step-batch-size-schedule",
                                                                      "0:8,1.5K:24 0.5m:16"])),
    "overflow": job(0, 4, 0, b"\0".join(f.encode() for f in flags[:8] + ["--micro-batch-size", "1048576",
                                                                          "--tensor-model-parallel-size", "65536"])),
}
jobs_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_jobspec")
os.makedirs(jobs_out, exist_ok=True)
for name, data in jobs.items():
    with open(os.path.join(jobs_out, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


# fuzz_tokenizer: byte 0 the reader (mod 4: 0 GPTSentencePieceTokenizer, 1 Llama2Tokenizer, 2 and 3
# HuggingFaceTokenizer), byte 1 the text's length, then the file and the text: SentencePiece models (a few
# pieces, BPE, byte fallback, identity) and tokenizer.json files.
def sp_piece(text, score, type_):
    return f_bytes(1, f_bytes(1, text) + varint(2 << 3 | 5) + struct.pack("<f", score) + f_int(3, type_))


def sp_model(fallback=1, user=()):
    pieces = sp_piece("<unk>", 0, 2) + sp_piece("<s>", 0, 3) + sp_piece("</s>", 0, 3)
    pieces += b"".join(sp_piece(f"<0x{b:02X}>", 0, 6) for b in range(256)) if fallback else b""
    for i, p in enumerate(["\u2581", "a", "b", "\u2581a", "ab", "\u2581ab", "\u2581\u2581", "\u2603"]):
        pieces += sp_piece(p, -float(i), 1)
    pieces += b"".join(sp_piece(u, 0, 4) for u in user)
    trainer = f_bytes(2, f_int(3, 2) + f_int(35, fallback))
    normalizer = f_bytes(3, f_bytes(1, "identity") + f_int(3, 1) + f_int(4, 0) + f_int(5, 1))
    return pieces + trainer + normalizer


def tok_seed(type_, model, text):
    text = text.encode()
    return bytes([type_, len(text)]) + model + text


# tokenizer.json seeds (byte 0 = 2): LLaMA-2's kind (byte fallback over U+2581) and LLaMA-3's (byte-level, its
# Split pattern); "</s>" is the eos_token the fuzzer's tokenizer_config.json names.
M = "\u2581"
added = [{"id": i, "content": c, "special": True, "normalized": False} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
meta_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
for tok in [M, "a", "b", M + "a", "ab", M + "ab"]:
    meta_vocab[tok] = len(meta_vocab)
meta_json = {
    "added_tokens": added,
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": M},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": M}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": M}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": True, "vocab": meta_vocab, "merges": [M + " a", "a b", M + "a b"]},
}
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs + [256 + k for k in range(256 - len(bs))]
bs += [b for b in range(256) if b not in bs]
gpt2 = {b: chr(c) for b, c in zip(bs, cs)}
bl_vocab = {gpt2[b]: b for b in range(256)}
for tok in [gpt2[32] + "a", "ab", gpt2[32] + "ab"]:
    bl_vocab[tok] = len(bl_vocab)
pattern = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
bl_json = {
    "added_tokens": [{"id": len(bl_vocab), "content": "</s>", "special": True, "normalized": False}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": None, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": bl_vocab, "merges": [gpt2[32] + " a", "a b", gpt2[32] + "a b"]},
}
tok_seeds = [tok_seed(2, json.dumps(meta_json, ensure_ascii=False).encode(), "ab a</s>b  \u2603"),
             tok_seed(3, json.dumps(bl_json, ensure_ascii=False).encode(), "ab a</s>b 12345 \u2603's")]
tok_seeds += [tok_seed(0, sp_model(), "ab a  b\u2603 \u2581ab \u00e9"), tok_seed(1, sp_model(), "abab ba"),
             tok_seed(0, sp_model(0), "x ab \u2603\u2603 y"), tok_seed(1, sp_model(1, ["<t>", "ba"]), "<t>aba <t"),
             tok_seed(0, sp_model()[:-20], "ab")]
tok_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_tokenizer")
os.makedirs(tok_out, exist_ok=True)
for data in tok_seeds:
    with open(os.path.join(tok_out, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


# fuzz_safetensors: whole files as a Hugging Face directory holds them: an 8-byte little-endian header
# length, the JSON header (dtype, shape, data_offsets; __metadata__), the tensors' bytes.
def st_file(tensors, pad=True, meta=True):
    header, data = {}, b""
    if meta:
        header["__metadata__"] = {"format": "pt"}
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


st_seeds = [
    st_file([("model.embed_tokens.weight", "F32", [2, 3], struct.pack("<6f", 1, -2, 0.5, 3e38, -0.0, 1e-40)),
             ("model.norm.weight", "BF16", [3], struct.pack("<3H", 0x3F80, 0x7F80, 0x0001)),
             ("lm_head.weight", "F16", [1, 2, 2], struct.pack("<4H", 0x3C00, 0x7BFF, 0x0001, 0xFC00))]),
    st_file([("h.0.attn.bias", "F32", [1, 1, 2, 2], struct.pack("<4f", 1, 0, 1, 1)),
             ("step", "I32", [1], struct.pack("<i", 7))], pad=False, meta=False),
    st_file([("empty", "F16", [0], b"")]),
]
st_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_safetensors")
os.makedirs(st_out, exist_ok=True)
for data in st_seeds:
    with open(os.path.join(st_out, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)
