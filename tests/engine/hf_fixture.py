"""Hugging Face model directories made from atoll exports, for engine_import.sh:
written and checked with the Python standard library alone (st_read.py reads).

  reshard SRC DST          SRC's model.safetensors as three shards named by
                           model.safetensors.index.json: the embedding and the
                           output layer F32, the norms F16, every other tensor
                           BF16 (rounded to nearest, ties to even); config.json
                           and the tokenizer files copied
  expect DST OUT           the F32 file every shard of DST decodes to, with the
                           decoding here (bf16: the top half of an fp32; f16:
                           struct's IEEE half); expect_one: DST/model.safetensors
  gpt2hub SRC DST V        an exported GPT-2 the way the hub's gpt2 keeps it:
                           names without "transformer.", the vocabulary V rows
                           (config.json too), each layer's attn.bias mask buffer
  same A B                 every tensor of A equal to B's, bit for bit
  edit DIR KEY JSON        config.json's KEY set to the JSON value
  extra DIR NAME           a tensor NAME [4] added to model.safetensors
"""
import array
import json
import os
import shutil
import struct
import sys

import st_read

_SIZE = {"F32": 4, "I32": 4, "BF16": 2, "F16": 2}


def write(path, tensors):
    """tensors: list of (name, dtype, shape, raw bytes)"""
    header, off = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, _, raw in tensors:
            f.write(raw)


def to_bf16(raw):
    u = array.array("I")
    u.frombytes(raw)
    out = array.array("H", (((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u))
    return out.tobytes()


def to_f16(raw):
    f = array.array("f")
    f.frombytes(raw)
    return b"".join(struct.pack("<e", x) for x in f)


def decode(dtype, raw):
    if dtype == "F32":
        a = array.array("f")
        a.frombytes(raw)
        return a
    if dtype == "BF16":
        h = array.array("H")
        h.frombytes(raw)
        u = array.array("I", (x << 16 for x in h))
        return array.array("f", u.tobytes())
    return array.array("f", (struct.unpack_from("<e", raw, 2 * i)[0] for i in range(len(raw) // 2)))


def copy_dir_files(src, dst):
    os.makedirs(dst)
    for name in os.listdir(src):
        if name != "model.safetensors":
            shutil.copy(os.path.join(src, name), dst)


def reshard(src, dst):
    copy_dir_files(src, dst)
    shards = {"a": [], "b": [], "c": []}
    for name, (dtype, shape, raw) in st_read.tensors(os.path.join(src, "model.safetensors")).items():
        if "embed" in name or "lm_head" in name or "wte" in name:
            shards["a"].append((name, "F32", shape, raw))
        elif "norm" in name:
            shards["b"].append((name, "F16", shape, to_f16(raw)))
        else:
            shards["c"].append((name, "BF16", shape, to_bf16(raw)))
    wmap = {}
    for i, key in enumerate("abc"):
        fname = "model-%05d-of-00003.safetensors" % (i + 1)
        write(os.path.join(dst, fname), shards[key])
        wmap.update({t[0]: fname for t in shards[key]})
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)


def expect(dst, out, files=None):
    if files is None:
        with open(os.path.join(dst, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    tensors = []
    for fname in files:
        for name, (dtype, shape, raw) in st_read.tensors(os.path.join(dst, fname)).items():
            tensors.append((name, "F32", shape, decode(dtype, raw).tobytes()))
    write(out, tensors)


def gpt2hub(src, dst, vocab):
    copy_dir_files(src, dst)
    cfg = json.load(open(os.path.join(dst, "config.json")))
    cfg["vocab_size"] = vocab
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    out = []
    for name, (dtype, shape, raw) in st_read.tensors(os.path.join(src, "model.safetensors")).items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        if name == "wte.weight":
            shape = [vocab, shape[1]]
            raw = raw[:vocab * shape[1] * 4]
        out.append((name, dtype, shape, raw))
        if name.endswith(".ln_1.weight"):  # the causal mask GPT-2 keeps as a buffer
            n = cfg["n_positions"]
            mask = b"".join(struct.pack("<f", 1.0 if j <= i else 0.0) for i in range(n) for j in range(n))
            out.append((name.replace("ln_1.weight", "attn.bias"), "F32", [1, 1, n, n], mask))
    write(os.path.join(dst, "model.safetensors"), out)


def same(a, b):
    ta, tb = st_read.tensors(a), st_read.tensors(b)
    assert sorted(ta) == sorted(tb), sorted(set(ta) ^ set(tb))
    for name in ta:
        assert ta[name][1] == tb[name][1] and ta[name][2] == tb[name][2], "%s differs" % name
    print("%d tensors the same" % len(ta))


def edit(d, key, value):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    cfg[key] = json.loads(value)
    json.dump(cfg, open(p, "w"))


def extra(d, name):
    p = os.path.join(d, "model.safetensors")
    t = [(n, dt, s, r) for n, (dt, s, r) in st_read.tensors(p).items()]
    t.append((name, "F32", [4], bytes(16)))
    write(p, t)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "reshard":
        reshard(*args)
    elif cmd == "expect":
        expect(*args)
    elif cmd == "expect_one":
        expect(args[0], args[1], ["model.safetensors"])
    elif cmd == "gpt2hub":
        gpt2hub(args[0], args[1], int(args[2]))
    elif cmd == "same":
        same(*args)
    elif cmd == "edit":
        edit(*args)
    elif cmd == "extra":
        extra(*args)
    else:
        sys.exit("unknown command " + cmd)
