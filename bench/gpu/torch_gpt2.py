#!/usr/bin/env python3
"""The PyTorch GPT-2 users would train instead of atoll, measured at the same
shapes: pre-LN GPT-2 (tied embeddings, tanh GELU), bf16 autocast, fused
scaled-dot-product attention (causal), fused AdamW, torch.compile.

Prints one JSON line: tokens/s (median step over the timed steps), step ms,
MFU by the PaLM formula (6N + 12*L*H*T FLOPs per token) against --peak.

usage: torch_gpt2.py [--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50304
                      --batch 8 --steps 30 --warmup 10 --peak 989e12 --no-compile]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from make_data import HOT  # the text-like ids' frequencies


class Block(nn.Module):
    def __init__(self, h, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.fcproj = nn.Linear(4 * h, h)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, nh, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, nh) for _ in range(layers))
        self.lnf = nn.LayerNorm(h)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=12, hidden=768, heads=12, seq=1024, vocab=50304, batch=8, steps=30,
                     warmup=10).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--peak", type=float, default=989e12)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    model = GPT(a.layers, a.hidden, a.heads, a.seq, a.vocab).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_fn = model if a.no_compile else torch.compile(model)
    g = torch.Generator(device=dev).manual_seed(1)
    # ids as skewed as text's, as atoll and llm.c get them (make_data.py's "text" kind)
    hot_ids = torch.tensor(list(HOT), device=dev)
    edges = (torch.tensor(list(HOT.values()), dtype=torch.float64) / 16384).cumsum(0).to(dev)

    def text_like():
        tok = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev, generator=g)
        u = torch.rand((a.batch, a.seq), device=dev, generator=g, dtype=torch.float64)
        pick = hot_ids[torch.searchsorted(edges, u, right=True).clamp(max=len(HOT) - 1)]
        return torch.where(u < edges[-1], pick, tok)
    times = []
    loss = None
    for it in range(a.warmup + a.steps):
        x, y = text_like(), text_like()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    tokens = a.batch * a.seq
    flops_tok = 6 * (nparams - a.seq * a.hidden) + 12 * a.layers * a.hidden * a.seq
    tps = tokens / step
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "compile": not a.no_compile,
                      "device": torch.cuda.get_device_name(), "params": nparams, "batch": a.batch,
                      "seq": a.seq, "layers": a.layers, "hidden": a.hidden, "step_ms": step * 1e3,
                      "tokens_per_s": tps, "mfu": tps * flops_tok / a.peak, "last_loss": float(loss)}))


if __name__ == "__main__":
    main()
