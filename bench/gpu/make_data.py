#!/usr/bin/env python3
"""Writes a Megatron indexed dataset (PREFIX.bin / PREFIX.idx, uint16 tokens,
one sequence per document) of synthetic tokens for the GPU runs:

  make_data.py PREFIX random VOCAB DOCS LEN   uniform ids
  make_data.py PREFIX text VOCAB DOCS LEN     ids as skewed as English text's, for throughput: 23% of
      positions are GPT-2's 8 most frequent ids in the bundled corpus (scripts/demo-data, 16384
      tokens: "," 6.0%, " the" 3.8%, "." 2.6%, " a", " and", " of", " I", " to"), the rest uniform. The
      embedding's backward sums every position of an id into one row, so uniform ids hide its cost.
  make_data.py PREFIX bigram VOCAB DOCS LEN   a fixed random bigram language
      (each token has a few likely successors): a model's loss falls from
      ln(VOCAB) towards the chain's entropy and levels off there, without the
      memorisation of a small corpus, so precisions can be compared step by step.
"""
import struct
import sys

import numpy as np


# GPT-2 ids and their counts among the first 16384 tokens of scripts/demo-data/moby-dick-ch1-12.txt
HOT = {11: 991, 262: 621, 13: 428, 257: 423, 290: 393, 286: 345, 314: 268, 284: 267}


def text_like(rng, vocab, n):
    ids = np.array(list(HOT), dtype=np.uint16)
    p = np.array(list(HOT.values()), dtype=np.float64) / 16384
    tok = rng.integers(0, vocab, n, dtype=np.uint16)
    u = rng.random(n)
    edges = p.cumsum()
    hot = u < edges[-1]
    tok[hot] = ids[np.searchsorted(edges, u[hot], side="right")]
    return tok


def main():
    prefix, kind, vocab, docs, length = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    rng = np.random.default_rng(1)
    n = docs * length
    if kind == "random":
        tok = rng.integers(0, vocab, n, dtype=np.uint16)
    elif kind == "text":
        tok = text_like(rng, vocab, n)
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
        sys.exit(f"make_data.py: kind '{kind}': expected random, text or bigram")
    tok.tofile(prefix + ".bin")
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, docs, docs + 1))
        f.write(np.full(docs, length, dtype=np.int32).tobytes())
        f.write((np.arange(docs, dtype=np.int64) * length * 2).tobytes())
        f.write(np.arange(docs + 1, dtype=np.int64).tobytes())


if __name__ == "__main__":
    main()
