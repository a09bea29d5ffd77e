"""atoll64, the checksum in a checkpoint step's manifest.json, written from its
definition in engine/checkpoint.c as an independent check of the C code:
little-endian 64-bit words, word i into lane i % 4 by lane = rotl(lane ^ w, 31) * P,
the last partial block zero-padded, then h = byte count, h = (h ^ lane) * P for
each lane, and fmix64. fnv1a64 is the sum manifests held before it."""
import struct

M = (1 << 64) - 1
P = 0x9E3779B97F4A7C15


def atoll64_bytes(data):
    lanes = [(0x243F6A8885A308D3 + j) & M for j in range(4)]
    pad = (-len(data)) % 32
    for words in struct.iter_unpack("<4Q", data + b"\0" * pad):
        for j in range(4):
            x = lanes[j] ^ words[j]
            lanes[j] = (((x << 31) | (x >> 33)) & M) * P & M
    h = len(data)
    for lane in lanes:
        h = (h ^ lane) * P & M
    h ^= h >> 33
    h = h * 0xFF51AFD7ED558CCD & M
    h ^= h >> 33
    h = h * 0xC4CEB9FE1A85EC53 & M
    return h ^ (h >> 33)


def fnv1a64_bytes(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = (h ^ b) * 0x100000001B3 & M
    return h


def file_sum(path, kind="atoll64"):
    """(sum, bytes) of a whole file, as the manifest records them."""
    with open(path, "rb") as f:
        data = f.read()
    return (atoll64_bytes(data) if kind == "atoll64" else fnv1a64_bytes(data)), len(data)


def check_step(step):
    """Problems with a committed step's files against its manifest ([] when none)."""
    import json
    import os
    with open(os.path.join(step, "manifest.json")) as f:
        files = json.load(f)["files"]
    bad = []
    for name, want in files.items():
        kind = "atoll64" if "atoll64" in want else "fnv1a64"
        h, n = file_sum(os.path.join(step, name), kind)
        if n != want["bytes"] or "%016x" % h != want[kind]:
            bad.append("%s: %d bytes, %s %016x; the manifest says %d, %s" % (name, n, kind, h, want["bytes"], want[kind]))
    return bad
