"""The peer beside bench/generate.sh: greedy decoding of the same exported
GPT-2 checkpoint in PyTorch eager mode, with a key/value cache, as Hugging
Face's GPT2LMHeadModel.generate runs it (one forward pass over the prompt,
then one position a token, past keys and values concatenated per layer). The
model is written out here on the export's tensor names (transformers is not
installed on this machine): LayerNorm, c_attn as x @ W + b (Conv1D's [in, out]
weights), causal softmax attention, tanh GELU, tied output layer.

usage: generate_torch.py HF_DIR IDS_BIN NEW_TOKENS
  IDS_BIN: the prompt's ids, uint16, as `atoll data prepare` writes them.
Prints JSON: ms per decode step (best of 3 runs; the token from the prompt's
pass excluded, as atoll generate --json's decode timing excludes it) and the tokens.
"""
import array
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import st_read  # noqa: E402


def main():
    hf, ids_path, new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = json.load(open(os.path.join(hf, "config.json")))
    p = {k: torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
         for k, (dtype, shape, raw) in st_read.tensors(os.path.join(hf, "model.safetensors")).items()}
    ids = array.array("H")
    ids.frombytes(open(ids_path, "rb").read())
    C, nh, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    hd = C // nh
    head = p.get("lm_head.weight", p["transformer.wte.weight"])
    ln = lambda x, pre: torch.nn.functional.layer_norm(x, (C,), p[pre + "weight"], p[pre + "bias"], eps)
    conv = lambda x, pre: x @ p[pre + "weight"] + p[pre + "bias"]

    def forward(tokens, start, cache):
        """logits of the last position; cache[l] = (k, v) [nh, positions, hd] grows by len(tokens)"""
        n = len(tokens)
        x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][start:start + n]
        for l in range(L):
            pre = f"transformer.h.{l}."
            q, k, v = (t.reshape(n, nh, hd).transpose(0, 1) for t in conv(ln(x, pre + "ln_1."), pre + "attn.c_attn.").split(C, -1))
            if cache[l] is not None:
                k, v = torch.cat([cache[l][0], k], 1), torch.cat([cache[l][1], v], 1)
            cache[l] = (k, v)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            if n > 1:  # the prompt's pass: causal
                s = s.masked_fill(~torch.ones(n, start + n, dtype=torch.bool).tril(start), float("-inf"))
            a = torch.softmax(s, dim=-1) @ v
            x = x + conv(a.transpose(0, 1).reshape(n, C), pre + "attn.c_proj.")
            f = torch.nn.functional.gelu(conv(ln(x, pre + "ln_2."), pre + "mlp.c_fc."), approximate="tanh")
            x = x + conv(f, pre + "mlp.c_proj.")
        return ln(x[-1:], "transformer.ln_f.") @ head.T

    torch.set_num_threads(os.cpu_count())  # as atoll's OpenBLAS takes every core (torch here starts with one)
    best, out = None, None
    with torch.no_grad():
        for _ in range(3):
            cache = [None] * L
            prompt = torch.tensor(list(ids), dtype=torch.long)
            tok = int(forward(prompt, 0, cache).argmax())
            toks, pos = [tok], len(ids)
            t0 = time.perf_counter()
            for _ in range(new - 1):
                tok = int(forward(torch.tensor([tok]), pos, cache).argmax())
                toks.append(tok)
                pos += 1
            ms = (time.perf_counter() - t0) * 1000 / (new - 1)
            best = ms if best is None else min(best, ms)
            out = toks
    print(json.dumps({"ms_per_token": round(best, 1), "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "tokens": out}))


if __name__ == "__main__":
    main()
