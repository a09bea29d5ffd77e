#!/usr/bin/env python3
"""Writes a Megatron indexed dataset (PREFIX.bin / PREFIX.idx, uint16 tokens,
one sequence per document) of synthetic tokens for the GPU runs:

  make_data.py PREFIX random VOCAB DOCS LEN   uniform ids: throughput only
  make_data.py PREFIX bigram VOCAB DOCS LEN   a fixed random bigram language
      (each token has a few likely successors): a model's loss falls from
      ln(VOCAB) towards the chain's entropy and levels off there, without the
      memorisation of a small corpus, so precisions can be compared step by step.
"""
import struct
import sys

import numpy as np


def main():
    prefix, kind, vocab, docs, length = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    rng = np.random.default_rng(1)
    n = docs * length
    if kind == "random":
        tok = rng.integers(0, vocab, n, dtype=np.uint16)
    elif kind == "bigram":
        succ = rng.integers(0, vocab, (vocab, 8))
        prob = rng.dirichlet(np.full(8, 0.5), vocab).cumsum(axis=1)
        u = rng.random(n)
        tok = np.empty(n, dtype=np.uint16)
        t = 0
        for i in range(n):
            t = succ[t, min(np.searchsorted(prob[t], u[i]), 7)]
            tok[i] = t
    else:
        sys.exit(f"make_data.py: kind '{kind}': expected random or bigram")
    tok.tofile(prefix + ".bin")
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, docs, docs + 1))
        f.write(np.full(docs, length, dtype=np.int32).tobytes())
        f.write((np.arange(docs, dtype=np.int64) * length * 2).tobytes())
        f.write(np.arange(docs + 1, dtype=np.int64).tobytes())


if __name__ == "__main__":
    main()
