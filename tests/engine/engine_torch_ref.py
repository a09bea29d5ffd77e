#!/usr/bin/python3
"""Checks atoll-train against a float64 PyTorch GPT built from the engine's own
initial weights: step-1 logits, loss and every parameter gradient to 1e-5
relative, then the losses of 5 AdamW steps (clipping, weight decay groups and
the LR schedule included) to 1e-5.

usage: engine_torch_ref.py ATOLL_TRAIN WORKDIR [--untie] [ATOLL-TRAIN FLAGS...]
(--untie: a separate lm_head.weight instead of the output layer tied to wte;
any other argument goes to atoll-train, e.g. --device cuda for the GPU run)
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

L, H, NH, T, V = 2, 64, 4, 16, 256
MBS, GBS, ITERS = 2, 4, 5
LR, MIN_LR, WARMUP, WD, B1, B2, EPS, CLIP = 3e-3, 3e-4, 2, 0.1, 0.9, 0.95, 1e-8, 1.0
TOL = 1e-5


def read_safetensors(path):
    """name -> numpy array, parsed by hand: u64 header length, JSON, raw bytes."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    dtypes = {"F32": np.float32, "I32": np.int32}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(blob[base + b:base + e], dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def gpt_loss(p, tokens, targets, want_logits=False):
    """The engine's architecture: pre-LN GPT-2, c_attn rows grouped [head][q,k,v][hd]."""
    B = tokens.shape[0]
    hd = H // NH
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for l in range(L):
        w = lambda s: p[f"h.{l}.{s}"]
        h = torch.nn.functional.layer_norm(x, (H,), w("ln_1.weight"), w("ln_1.bias"), 1e-5)
        qkv = (h @ w("attn.c_attn.weight").T + w("attn.c_attn.bias")).view(B, T, NH, 3, hd)
        q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, H)
        x = x + y @ w("attn.c_proj.weight").T + w("attn.c_proj.bias")
        h = torch.nn.functional.layer_norm(x, (H,), w("ln_2.weight"), w("ln_2.bias"), 1e-5)
        f = torch.nn.functional.gelu(h @ w("mlp.c_fc.weight").T + w("mlp.c_fc.bias"), approximate="tanh")
        x = x + f @ w("mlp.c_proj.weight").T + w("mlp.c_proj.bias")
    x = torch.nn.functional.layer_norm(x, (H,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["lm_head.weight" if "lm_head.weight" in p else "wte.weight"].T
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    return (loss, logits) if want_logits else loss


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def lr_at(it):
    if it <= WARMUP:
        return LR * it / WARMUP
    ratio = (it - WARMUP) / (ITERS - WARMUP)
    return MIN_LR + 0.5 * (math.cos(math.pi * ratio) + 1) * (LR - MIN_LR)


def main():
    train, work = sys.argv[1], sys.argv[2]
    untie = "--untie" in sys.argv[3:]
    extra = [a for a in sys.argv[3:] if a != "--untie"]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    metrics = os.path.join(work, "metrics.jsonl")
    cmd = [train, "--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", str(NH),
           "--seq-length", str(T), "--vocab-size", str(V), "--micro-batch-size", str(MBS),
           "--global-batch-size", str(GBS), "--train-iters", str(ITERS), "--lr", str(LR),
           "--min-lr", str(MIN_LR), "--lr-warmup-iters", str(WARMUP), "--weight-decay", str(WD),
           "--adam-beta1", str(B1), "--adam-beta2", str(B2), "--adam-eps", str(EPS),
           "--clip-grad", str(CLIP), "--seed", "7", "--dump-dir", work, "--metrics-file", metrics]
    if untie:
        cmd.append("--untie-embeddings-and-output-weights")
    cmd += extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    engine_losses = [json.loads(line)["loss"] for line in open(metrics)]
    assert len(engine_losses) == ITERS, f"expected {ITERS} logged steps, got {len(engine_losses)}"

    init = read_safetensors(os.path.join(work, "init.safetensors"))
    params = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in init.items()}
    names = sorted(params)
    if ("lm_head.weight" in params) != untie:
        failures_msg = "lm_head.weight present" if not untie else "lm_head.weight missing"
        print("FAIL:", failures_msg)
        return 1
    failures = []
    worst = {"logits": 0.0, "grads": 0.0, "losses": 0.0}

    m = {k: torch.zeros_like(v) for k, v in params.items()}
    s = {k: torch.zeros_like(v) for k, v in params.items()}
    for it in range(1, ITERS + 1):
        d = read_safetensors(os.path.join(work, f"iter_{it:07d}.safetensors"))
        tokens = torch.tensor(d["tokens"].astype(np.int64))
        targets = torch.tensor(d["targets"].astype(np.int64))
        for v in params.values():
            v.grad = None
        loss = gpt_loss(params, tokens, targets)
        loss.backward()
        e = rel_err(engine_losses[it - 1], loss.item())
        worst["losses"] = max(worst["losses"], e)
        if e > TOL:
            failures.append(f"iteration {it}: loss {engine_losses[it - 1]!r} vs torch {loss.item()!r} (rel {e:.2e})")
        if it == 1:
            with torch.no_grad():
                _, logits = gpt_loss(params, tokens[:MBS], targets[:MBS], want_logits=True)
            e = rel_err(d["logits"], logits.reshape(-1, V).numpy())
            worst["logits"] = e
            if e > TOL:
                failures.append(f"logits of micro-batch 0 differ (rel {e:.2e})")
            e = rel_err(d["loss"][0], loss.item())
            if e > TOL:
                failures.append(f"dumped step-1 loss differs (rel {e:.2e})")
            for k in names:
                e = rel_err(d["grad." + k], params[k].grad.numpy())
                worst["grads"] = max(worst["grads"], e)
                if e > TOL:
                    failures.append(f"gradient of {k} differs (rel {e:.2e})")
            print(f"step 1: loss {loss.item():.6f}, {len(names)} gradients compared")
        with torch.no_grad():
            norm = math.sqrt(sum(float((v.grad ** 2).sum()) for v in params.values()))
            scale = min(1.0, CLIP / (norm + 1e-6))
            lr = lr_at(it)
            for k, v in params.items():
                g = v.grad * scale
                m[k].mul_(B1).add_((1 - B1) * g)
                s[k].mul_(B2).add_((1 - B2) * g * g)
                mhat = m[k] / (1 - B1 ** it)
                shat = s[k] / (1 - B2 ** it)
                wd = WD if v.dim() == 2 else 0.0
                v.sub_(lr * (mhat / (shat.sqrt() + EPS) + wd * v))
    print("losses engine:", ["%.6f" % x for x in engine_losses])
    print("worst relative error: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + f" (limit {TOL:.0e})")
    for f in failures:
        print("FAIL:", f)
    print("engine_torch_ref: %s" % ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
