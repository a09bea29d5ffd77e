"""safetensors files read with the Python standard library alone, for the
tests' checks of what atoll writes (checkpoints, --dump-dir, HF export).

The format: a little-endian u64 header length, that many bytes of JSON
(name -> dtype, shape, data_offsets; plus an optional "__metadata__"), then the
tensors' bytes, offsets counted from the end of the header."""
import array
import json
import struct

_CODES = {"F32": "f", "I32": "i"}


def tensors(path):
    """name -> (dtype, shape, raw bytes) for every tensor of the file at path"""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], blob[8 + n + b:8 + n + e])
    return out


def arrays(path):
    """name -> array.array of every F32 or I32 tensor of the file at path"""
    out = {}
    for name, (dtype, _, raw) in tensors(path).items():
        if dtype not in _CODES:
            raise ValueError("%s: tensor %s is %s; this reader takes %s" % (path, name, dtype, ", ".join(_CODES)))
        a = array.array(_CODES[dtype])
        a.frombytes(raw)
        out[name] = a
    return out
