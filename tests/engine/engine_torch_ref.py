#!/usr/bin/python3
"""Checks atoll-train against a float64 PyTorch GPT built from the engine's own
initial weights: step-1 logits, loss and every parameter gradient to 1e-5
relative, then the losses of 5 AdamW steps (clipping, weight decay groups and
the LR schedule included) to 1e-5. Then `atoll export` of the saved checkpoint:
for the GPT family a GPT2LMHeadModel whose loss on the last batch, computed by
transformers' conventions (hf_gpt2_loss), is the checkpoint's; for the LLaMA
family its tensors and config.json as they are; Nemotron's form refused.

usage: engine_torch_ref.py ATOLL_TRAIN WORKDIR [--untie] [--llama [--qkv-bias] [--qk-norm]] [--nemotron] [--ln1p]
                          [--eod-mask] [--documents] [ATOLL-TRAIN FLAGS...]
(--untie: a separate lm_head.weight instead of the output layer tied to wte;
--llama: the LLaMA family (RMSNorm, SwiGLU, rotary positions, grouped-query
attention with 2 key/value groups for 4 heads, no linear biases, untied, FFN
96), written here from Hugging Face's LlamaForCausalLM conventions and fed the
tensors under their Hugging Face names; the checkpoint atoll saves after the 5
steps must hold exactly the Hugging Face tensor names and shapes and the values
the reference reached; --eod-mask: short documents prepared with `atoll data
prepare` (byte-level, token 0 ends each) trained with --eod-mask-loss, the
reference dropping every position whose input is token 0 and taking the mean
over micro-batches of each one's mean over the tokens it keeps, as Megatron's
loss mask does; --documents: the same short documents trained with
--reset-position-ids --reset-attention-mask, the reference building the mask
and positions the way Megatron's get_ltor_masks_and_position_ids does: after
each end-of-document token at i, rows i+1.. lose columns ..i and positions
restart at 0 (learned positions only: rotary ones count from the sample's
start, as in Megatron); --qkv-bias (with --llama): --add-qkv-bias, biases on
q, k and v alone as Hugging Face's Qwen2ForCausalLM has them, the checkpoint's
config.json naming that architecture; --qk-norm (with --llama): --qk-layernorm,
an RMSNorm over each query and key head before the rotary embedding, as
Qwen3ForCausalLM's q_norm and k_norm, config.json naming Qwen3 (both with Qwen's RMSNorm epsilon, --norm-epsilon
1e-6, which config.json's rms_norm_eps must carry); --nemotron: the GPT family as Nemotron-4 builds
it (--squared-relu: the MLP's activation relu(x)^2; --apply-layernorm-1p: LayerNorm weights stored as w and
applied as 1 + w, starting at 0; rotary positions on half of each head, --rotary-percent 0.5; no linear biases;
untied; LayerNorm epsilon 1e-6), the reference applying 1 + w to the stored weights it reads; --ln1p:
--apply-layernorm-1p alone, on the GPT family (exported as GPT2LMHeadModel with 1 + w) or with --llama on every
RMSNorm, the query and key heads' too (Megatron's LLaMA-3 example; Transformer Engine's zero-centred gamma): the
checkpoint keeps w and no config.json, atoll export writes 1 + w under Hugging Face's names and the config. Any
other argument goes to atoll-train,
e.g. --device cuda for the GPU run.)
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import st_read  # noqa: E402

L, H, NH, T, V = 2, 64, 4, 16, 256
KV, FFN, ROPE_BASE, RMS_EPS = 2, 96, 10000.0, 1e-5  # --llama (Qwen's --norm-epsilon 1e-6 with --qkv-bias, --qk-norm)
LN_EPS = 1e-5  # --norm-epsilon 1e-6 with --nemotron
ROPE_SCALE = None  # --rope-scaling (with --llama): LLaMA-3.x's, --use-rope-scaling --rope-scaling-factor 32
ROPE_INTERP = None  # --pos-interp (with --llama): --rotary-seq-len-interpolation-factor 4, positions divided by it
MBS, GBS, ITERS = 2, 4, 5
LR, MIN_LR, WARMUP, WD, B1, B2, EPS, CLIP = 3e-3, 3e-4, 2, 0.1, 0.9, 0.95, 1e-8, 1.0
WD_START, WD_END = 0.5, 2.0  # --wd-cosine: Megatron's --start-weight-decay, --end-weight-decay
WD_SCHED = False
DEC_LR, DEC_MIN_LR = 3e-2, 1e-3  # --decoupled: Megatron's --decoupled-lr, --decoupled-min-lr
DECOUPLED = False
TOL = 1e-5
EOD_MASK = False  # --eod-mask
DOCUMENTS = False  # --documents
QKV_BIAS = False  # --qkv-bias
QK_NORM = False  # --qk-norm
NEMOTRON = False  # --nemotron
LN1P = False  # --ln1p, or --nemotron: every norm's weight stored as w, applied as 1 + w
HEAD_DIM = None  # --head-dim: --kv-channels 32, heads 32 wide where hidden / heads is 16 (Qwen3-0.6B's kind)


def ltor_masks_and_position_ids(tokens):
    """[B, T, T] may-attend (lower triangle, cut at every end of document with
    --documents) and [B, T] positions (restarting after every end of document)."""
    B = tokens.shape[0]
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)).repeat(B, 1, 1)
    pos = torch.arange(T).repeat(B, 1)
    if DOCUMENTS:
        for b in range(B):
            prev = 0
            for i in (tokens[b] == 0).nonzero().flatten().tolist():
                allowed[b, i + 1:, :i + 1] = False
                pos[b, i + 1:] -= i + 1 - prev
                prev = i + 1
    return allowed, pos


def lm_loss(logits, tokens, targets):
    """Mean token cross-entropy; with EOD_MASK, Megatron's loss mask: positions whose input is the
    end-of-document token (0) are dropped and each micro-batch of MBS rows is averaged over what it keeps."""
    if not EOD_MASK:
        return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    kept = targets.masked_fill(tokens == 0, -100)
    means = []
    for r in range(0, tokens.shape[0], MBS):
        n = int((kept[r:r + MBS] != -100).sum())
        ce = torch.nn.functional.cross_entropy(logits[r:r + MBS].reshape(-1, V), kept[r:r + MBS].reshape(-1),
                                               ignore_index=-100, reduction="sum")
        means.append(ce / n if n else ce * 0)
    return sum(means) / len(means)


def read_safetensors(path):
    """name -> numpy array of every tensor of a safetensors file"""
    dtypes = {"F32": np.float32, "I32": np.int32}
    return {name: np.frombuffer(raw, dtype=dtypes[dtype]).reshape(shape)
            for name, (dtype, shape, raw) in st_read.tensors(path).items()}


def gpt_loss(p, tokens, targets, want_logits=False):
    """The engine's architecture: pre-LN GPT-2, c_attn rows grouped [head][q,k,v][hd]; with NEMOTRON
    Nemotron-4's: LayerNorm applying 1 + w, rotary positions on half of each head, relu(x)^2 in the MLP,
    no linear biases."""
    B = tokens.shape[0]
    hd = HEAD_DIM or H // NH
    allowed, pos = ltor_masks_and_position_ids(tokens)
    x = p["wte.weight"][tokens] + (0 if NEMOTRON else p["wpe.weight"][pos])
    mask = ~allowed[:, None]
    bias = lambda name: p.get(name, 0)
    norm = lambda x, pre: torch.nn.functional.layer_norm(x, (H,), p[pre + "weight"] + (1 if LN1P else 0),
                                                         p[pre + "bias"], LN_EPS)
    act = (lambda u: torch.relu(u) ** 2) if NEMOTRON else (lambda u: torch.nn.functional.gelu(u, approximate="tanh"))
    for l in range(L):
        w = lambda s: p[f"h.{l}.{s}"]
        h = norm(x, f"h.{l}.ln_1.")
        qkv = (h @ w("attn.c_attn.weight").T + bias(f"h.{l}.attn.c_attn.bias")).view(B, T, NH, 3, hd)
        q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
        if NEMOTRON:  # --rotary-percent 0.5
            q, k = rotate(q, hd // 2), rotate(k, hd // 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + y @ w("attn.c_proj.weight").T + bias(f"h.{l}.attn.c_proj.bias")
        h = norm(x, f"h.{l}.ln_2.")
        f = act(h @ w("mlp.c_fc.weight").T + bias(f"h.{l}.mlp.c_fc.bias"))
        x = x + f @ w("mlp.c_proj.weight").T + bias(f"h.{l}.mlp.c_proj.bias")
    x = norm(x, "ln_f.")
    logits = x @ p["lm_head.weight" if "lm_head.weight" in p else "wte.weight"].T
    loss = lm_loss(logits, tokens, targets)
    return (loss, logits) if want_logits else loss


def rms_norm(x, w, one=0):
    """RMSNorm applying w + one: 1 for a weight stored zero-centred (--apply-layernorm-1p)."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * (w + one)


def llama3_inv_freq(inv, factor, low=1.0, high=4.0, old=8192.0):
    """Hugging Face's rope_type "llama3" (LLaMA-3.1): wavelengths above old/low positions divided by factor,
    below old/high kept, blended between."""
    wavelen = 2 * math.pi / inv
    stretched = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, (1 - smooth) * stretched / factor + smooth * stretched, stretched)


def rotate(x, d=None):
    """Hugging Face's rotary embedding ("rotate half"): pairs (i, i + d/2),
    position t turned by t * base^(-2i/d); x is [B, heads, T, hd]. With d < hd
    (Megatron's --rotary-percent d/hd, Nemotron's partial_rotary_factor) the
    first d dims turn and the rest pass through."""
    d = d or x.shape[-1]
    x, rest = x[..., :d], x[..., d:]
    inv = ROPE_BASE ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if ROPE_SCALE:
        inv = llama3_inv_freq(inv, ROPE_SCALE)
    pos = torch.arange(T, dtype=torch.float64) / (ROPE_INTERP or 1)
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return torch.cat([x * cos + half * sin, rest], -1)


def hf_gpt2_loss(p, cfg, tokens, targets):
    """transformers' GPT2LMHeadModel computed from what `atoll export` wrote, by its own conventions: tensors
    under "transformer.", Conv1D layers (x @ W + b with W [in, out]), c_attn's output split [q | k | v] with the
    heads contiguous in each, GELU's tanh form ("gelu_new"), the head tied to wte unless lm_head is given."""
    C, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd, (B, T_) = C // nh, tokens.shape
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][torch.arange(T_)]
    ln = lambda x, pre: torch.nn.functional.layer_norm(x, (C,), p[pre + "weight"], p[pre + "bias"], eps)
    conv = lambda x, pre: x @ p[pre + "weight"] + p[pre + "bias"]
    later = ~torch.ones(T_, T_, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        pre = f"transformer.h.{l}."
        q, k, v = (t.reshape(B, T_, nh, hd).transpose(1, 2) for t in conv(ln(x, pre + "ln_1."), pre + "attn.c_attn.").split(C, -1))
        a = torch.softmax(((q @ k.transpose(-1, -2)) / math.sqrt(hd)).masked_fill(later, float("-inf")), dim=-1)
        x = x + conv((a @ v).transpose(1, 2).reshape(B, T_, C), pre + "attn.c_proj.")
        f = torch.nn.functional.gelu(conv(ln(x, pre + "ln_2."), pre + "mlp.c_fc."), approximate="tanh")
        x = x + conv(f, pre + "mlp.c_proj.")
    x = ln(x, "transformer.ln_f.")
    logits = x @ p.get("lm_head.weight", p["transformer.wte.weight"]).T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def llama_loss(p, tokens, targets, want_logits=False, stored_1p=None):
    """LlamaForCausalLM's computation on Hugging Face's tensor names: RMSNorm,
    q/k/v projections with KV key/value heads repeated to the query heads
    (head h reads kv head h // (NH/KV)), rotary positions, SwiGLU MLP. With
    stored_1p (LN1P unless said) the norms' weights are w and apply as 1 + w."""
    B = tokens.shape[0]
    one = 1 if (LN1P if stored_1p is None else stored_1p) else 0
    rms = lambda x, w: rms_norm(x, w, one)
    hd = HEAD_DIM or H // NH
    x = p["model.embed_tokens.weight"][tokens]
    mask = ~ltor_masks_and_position_ids(tokens)[0][:, None]
    for l in range(L):
        w = lambda s: p[f"model.layers.{l}.{s}"]
        h = rms(x, w("input_layernorm.weight"))
        proj = lambda n: h @ w(f"self_attn.{n}_proj.weight").T + (w(f"self_attn.{n}_proj.bias") if QKV_BIAS else 0)
        q, k = proj("q").view(B, T, NH, hd), proj("k").view(B, T, KV, hd)
        if QK_NORM:  # Qwen3: over each head's hd values, one weight for every head
            q, k = rms(q, w("self_attn.q_norm.weight")), rms(k, w("self_attn.k_norm.weight"))
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = proj("v").view(B, T, KV, hd).transpose(1, 2)
        q, k = rotate(q), rotate(k)
        k, v = k.repeat_interleave(NH // KV, dim=1), v.repeat_interleave(NH // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + y @ w("self_attn.o_proj.weight").T
        h = rms(x, w("post_attention_layernorm.weight"))
        f = torch.nn.functional.silu(h @ w("mlp.gate_proj.weight").T) * (h @ w("mlp.up_proj.weight").T)
        x = x + f @ w("mlp.down_proj.weight").T
    logits = rms(x, p["model.norm.weight"]) @ p["lm_head.weight"].T
    loss = lm_loss(logits, tokens, targets)
    return (loss, logits) if want_logits else loss


def llama_shapes():
    """Hugging Face LLaMA's tensors for this configuration, names and shapes."""
    hd = HEAD_DIM or H // NH
    out = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H], "lm_head.weight": [V, H]}
    for l in range(L):
        pre = f"model.layers.{l}."
        out.update({pre + "input_layernorm.weight": [H], pre + "post_attention_layernorm.weight": [H],
                    pre + "self_attn.q_proj.weight": [NH * hd, H], pre + "self_attn.k_proj.weight": [KV * hd, H],
                    pre + "self_attn.v_proj.weight": [KV * hd, H], pre + "self_attn.o_proj.weight": [H, NH * hd],
                    pre + "mlp.gate_proj.weight": [FFN, H], pre + "mlp.up_proj.weight": [FFN, H],
                    pre + "mlp.down_proj.weight": [H, FFN]})
        if QK_NORM:
            out.update({pre + "self_attn.q_norm.weight": [hd], pre + "self_attn.k_norm.weight": [hd]})
        if QKV_BIAS:
            out.update({pre + "self_attn.q_proj.bias": [NH * hd], pre + "self_attn.k_proj.bias": [KV * hd],
                        pre + "self_attn.v_proj.bias": [KV * hd]})
    return out


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def wd_at(it):
    """Megatron's get_wd (OptimizerParamScheduler): with --wd-cosine, from WD_START to WD_END over the run's
    ITERS global batches along a half cosine; else --weight-decay throughout."""
    if not WD_SCHED:
        return WD
    if it > ITERS:
        return WD_END
    return WD_START + 0.5 * (math.cos(math.pi * (1 - it / ITERS)) + 1) * (WD_END - WD_START)


def lr_at(it, lr=LR, min_lr=MIN_LR):
    if it <= WARMUP:
        return lr * it / WARMUP
    ratio = (it - WARMUP) / (ITERS - WARMUP)
    return min_lr + 0.5 * (math.cos(math.pi * ratio) + 1) * (lr - min_lr)


def param_lr(name, it):
    """Megatron's --decoupled-lr: the token embedding and the output layer (is_embedding_or_output_parameter) on
    the same schedule from their own peak to their own floor."""
    if DECOUPLED and name in ("wte.weight", "lm_head.weight", "model.embed_tokens.weight"):
        return lr_at(it, DEC_LR, DEC_MIN_LR)
    return lr_at(it)


def main():
    train, work = sys.argv[1], sys.argv[2]
    global EOD_MASK, DOCUMENTS, QKV_BIAS, QK_NORM, NEMOTRON, RMS_EPS, LN_EPS, WD_SCHED, DECOUPLED, ROPE_SCALE
    global ROPE_INTERP, LN1P, HEAD_DIM
    WD_SCHED = "--wd-cosine" in sys.argv[3:]
    DECOUPLED = "--decoupled" in sys.argv[3:]
    ROPE_SCALE = 32.0 if "--rope-scaling" in sys.argv[3:] and "--llama" in sys.argv[3:] else None
    ROPE_INTERP = 4 if "--pos-interp" in sys.argv[3:] and "--llama" in sys.argv[3:] else None
    llama = "--llama" in sys.argv[3:]
    NEMOTRON = "--nemotron" in sys.argv[3:] and not llama
    LN1P = NEMOTRON or "--ln1p" in sys.argv[3:]
    HEAD_DIM = 32 if "--head-dim" in sys.argv[3:] else None
    untie = "--untie" in sys.argv[3:] or llama or NEMOTRON
    EOD_MASK = "--eod-mask" in sys.argv[3:]
    DOCUMENTS = "--documents" in sys.argv[3:]
    QKV_BIAS = "--qkv-bias" in sys.argv[3:] and llama
    QK_NORM = "--qk-norm" in sys.argv[3:] and llama
    if QKV_BIAS or QK_NORM:  # Qwen2's and Qwen3's RMSNorm epsilon, as their Megatron scripts pass it
        RMS_EPS = 1e-6
    extra = [a for a in sys.argv[3:]
             if a not in ("--untie", "--llama", "--eod-mask", "--documents", "--qkv-bias", "--qk-norm", "--nemotron",
                          "--wd-cosine", "--decoupled", "--rope-scaling", "--pos-interp", "--ln1p",
                          "--head-dim")]
    model_loss = llama_loss if llama else gpt_loss
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
    if llama:
        cmd += ["--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope", "--rotary-base",
                str(int(ROPE_BASE)), "--disable-bias-linear", "--group-query-attention", "--num-query-groups",
                str(KV), "--ffn-hidden-size", str(FFN), "--save", os.path.join(work, "ckpt")]
        cmd += ["--add-qkv-bias"] if QKV_BIAS else []
        cmd += ["--norm-epsilon", str(RMS_EPS)] if RMS_EPS != 1e-5 else []
        cmd += ["--qk-layernorm"] if QK_NORM else []
        cmd += ["--use-rope-scaling", "--rope-scaling-factor", str(ROPE_SCALE)] if ROPE_SCALE else []
        cmd += ["--rotary-seq-len-interpolation-factor", str(ROPE_INTERP)] if ROPE_INTERP else []
    if NEMOTRON:
        # Nemotron's own epsilon is 1e-5; another value checks that --norm-epsilon reaches the LayerNorms
        LN_EPS = 1e-6
        cmd += ["--norm-epsilon", str(LN_EPS)]
        cmd += ["--squared-relu", "--apply-layernorm-1p", "--position-embedding-type", "rope", "--rotary-percent", "0.5",
                "--rotary-base", str(int(ROPE_BASE)), "--disable-bias-linear", "--save", os.path.join(work, "ckpt")]
    if LN1P and not NEMOTRON:
        cmd += ["--apply-layernorm-1p"]
    if HEAD_DIM:
        cmd += ["--kv-channels", str(HEAD_DIM)]
    if WD_SCHED:
        # large enough that a decay off schedule moves the weights by percents in 5 steps
        cmd += ["--weight-decay-incr-style", "cosine", "--start-weight-decay", str(WD_START), "--end-weight-decay",
                str(WD_END)]
    if DECOUPLED:
        cmd += ["--decoupled-lr", str(DEC_LR), "--decoupled-min-lr", str(DEC_MIN_LR)]
    if not llama and not NEMOTRON:  # what `atoll export` reads, and the decay schedule's and decoupled rates' checks
        cmd += ["--save", os.path.join(work, "ckpt")]
    if EOD_MASK or DOCUMENTS:
        # documents of 2 to 12 bytes: several end inside every 16-token sample
        docs = os.path.join(work, "docs.jsonl")
        with open(docs, "w") as f:
            for i in range(300):
                f.write(json.dumps({"text": "abcdefghijkl"[: 2 + (i * 7) % 11]}) + "\n")
        prep = os.path.join(os.path.dirname(os.path.abspath(train)), "atoll")
        subprocess.run([prep, "data", "prepare", "--input", docs, "--output-prefix", os.path.join(work, "docs")],
                       check=True, stdout=subprocess.DEVNULL)
        cmd += ["--data-path", os.path.join(work, "docs"), "--split", "1,0,0"]
        cmd += ["--eod-mask-loss"] if EOD_MASK else []
        cmd += ["--reset-position-ids", "--reset-attention-mask"] if DOCUMENTS else []
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
    if llama and {k: list(v.shape) for k, v in init.items()} != llama_shapes():
        print("FAIL: the tensors are not Hugging Face LLaMA's:", sorted(init))
        return 1
    if LN1P:
        lnw = [k for k in init if k.endswith(("ln_1.weight", "ln_2.weight", "layernorm.weight", "norm.weight"))
               or k == "ln_f.weight"]
        if len(lnw) != (2 * L + 1) + (2 * L if QK_NORM else 0) or any(np.any(init[k] != 0) for k in lnw):
            failures.append("--apply-layernorm-1p: the %d norm weights do not all start at 0" % len(lnw))
    if NEMOTRON:
        extra_t = [k for k in init if k == "wpe.weight" or (k.endswith(".bias") and ".ln_" not in k and k != "ln_f.bias")]
        if extra_t:
            failures.append(f"rotary positions and --disable-bias-linear, yet the model holds {extra_t}")
    worst = {"logits": 0.0, "grads": 0.0, "losses": 0.0}

    m = {k: torch.zeros_like(v) for k, v in params.items()}
    s = {k: torch.zeros_like(v) for k, v in params.items()}
    for it in range(1, ITERS + 1):
        d = read_safetensors(os.path.join(work, f"iter_{it:07d}.safetensors"))
        tokens = torch.tensor(d["tokens"].astype(np.int64))
        targets = torch.tensor(d["targets"].astype(np.int64))
        if (EOD_MASK or DOCUMENTS) and it == 1:
            dropped = int((tokens == 0).sum())
            if not 0 < dropped < tokens.numel() // 2:
                failures.append(f"{dropped} of {tokens.numel()} step-1 inputs end a document: the masking goes untested")
            print(f"step 1: {dropped} of {tokens.numel()} positions end a document")
        for v in params.values():
            v.grad = None
        loss = model_loss(params, tokens, targets)
        loss.backward()
        e = rel_err(engine_losses[it - 1], loss.item())
        worst["losses"] = max(worst["losses"], e)
        if e > TOL:
            failures.append(f"iteration {it}: loss {engine_losses[it - 1]!r} vs torch {loss.item()!r} (rel {e:.2e})")
        if it == 1:
            with torch.no_grad():
                _, logits = model_loss(params, tokens[:MBS], targets[:MBS], want_logits=True)
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
            for k, v in params.items():
                lr = param_lr(k, it - 1)  # Megatron's scheduler moves after optimizer.step()
                g = v.grad * scale
                m[k].mul_(B1).add_((1 - B1) * g)
                s[k].mul_(B2).add_((1 - B2) * g * g)
                mhat = m[k] / (1 - B1 ** it)
                shat = s[k] / (1 - B2 ** it)
                wd = wd_at(it - 1) if v.dim() == 2 else 0.0  # the schedule where it stood before the step
                v.sub_(lr * (mhat / (shat.sqrt() + EPS) + wd * v))
    if llama:
        # the checkpoint after the last step: Hugging Face's names and shapes,
        # each tensor where the reference's AdamW took it (float64 against the
        # engine's float32 over 5 steps: a misplaced slice would be off by O(1))
        step = os.path.join(work, "ckpt", f"iter_{ITERS:07d}")
        ck = read_safetensors(os.path.join(step, "model.safetensors"))
        # with 1p the norms hold w where Hugging Face reads 1 + w: no config.json invites a wrong load (export's is
        # checked below)
        hf = None
        if os.path.exists(os.path.join(step, "config.json")) == LN1P:
            failures.append("the 1p checkpoint holds a config.json" if LN1P else "the checkpoint lacks config.json")
        elif not LN1P:
            with open(os.path.join(step, "config.json")) as f:
                hf = json.load(f)
        arch = "qwen3" if QK_NORM else "qwen2" if QKV_BIAS else "llama"
        want = {"architectures": [{"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(arch, "LlamaForCausalLM")],
                "model_type": arch, "hidden_size": H, "intermediate_size": FFN,
                "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": KV, "vocab_size": V,
                "rope_theta": ROPE_BASE, "rms_norm_eps": RMS_EPS, "tie_word_embeddings": False,
                "attention_bias": False, "hidden_act": "silu"}
        if QK_NORM or HEAD_DIM:
            want["head_dim"] = HEAD_DIM or H // NH
        if ROPE_SCALE:
            want["rope_scaling"] = {"rope_type": "llama3", "factor": ROPE_SCALE, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        if ROPE_INTERP:
            want["rope_scaling"] = {"rope_type": "linear", "factor": float(ROPE_INTERP)}
        with open(os.path.join(step, "manifest.json")) as f:  # what --use-checkpoint-args and generate rebuild
            mm = json.load(f)["model"]
            if mm.get("qk_layernorm") != QK_NORM:
                failures.append("manifest.json's model does not record qk_layernorm")
            if (mm.get("use_rope_scaling"), mm.get("rope_scaling_factor")) != (bool(ROPE_SCALE), ROPE_SCALE or 8.0):
                failures.append(f"manifest.json's model does not record the rope scaling: {mm}")
            if mm.get("rotary_seq_len_interpolation_factor") != (ROPE_INTERP or 1):
                failures.append(f"manifest.json's model does not record the position interpolation: {mm}")
            if mm.get("apply_layernorm_1p") != LN1P:
                failures.append(f"manifest.json's model does not record apply_layernorm_1p: {mm}")
        if hf is not None and not ROPE_SCALE and not ROPE_INTERP and "rope_scaling" in hf:
            failures.append(f"config.json names a rope scaling this model does not have: {hf['rope_scaling']}")
        if hf is not None and any(hf.get(k) != v for k, v in want.items()):
            failures.append(f"config.json is not the LlamaConfig of this model: {hf}")
        if {k: list(v.shape) for k, v in ck.items()} != llama_shapes():
            failures.append("the checkpoint's tensors are not Hugging Face LLaMA's: %s" % sorted(ck))
        else:
            e = max(rel_err(ck[k], params[k].detach().numpy()) for k in ck)
            worst["checkpoint"] = e
            if e > 1e-3:
                failures.append(f"checkpoint after {ITERS} steps differs from the reference's weights (rel {e:.2e})")
    if NEMOTRON:
        # the checkpoint keeps the stored w (Megatron's), where the reference's AdamW took it, and the manifest
        # the two flags --use-checkpoint-args and generate rebuild the model from
        step = os.path.join(work, "ckpt", f"iter_{ITERS:07d}")
        ck = read_safetensors(os.path.join(step, "model.safetensors"))
        with open(os.path.join(step, "manifest.json")) as f:
            mm = json.load(f)["model"]
        if not (mm.get("squared_relu") is True and mm.get("apply_layernorm_1p") is True and mm.get("rotary_percent") == 0.5):
            failures.append(f"manifest.json's model does not record squared_relu, apply_layernorm_1p and rotary_percent: {mm}")
        # The LayerNorm weights (about 1e-2 after 5 steps; 1 + w saved would be off by 100x) to 1e-3, the rest
        # to 1e-2: relu(x)^2 leaves hidden units barely active for a few tokens, whose c_proj gradients are
        # tiny and of a sign float32 and float64 may disagree on, and AdamW turns each into a full step.
        if sorted(ck) != names:
            failures.append(f"the checkpoint's tensors {sorted(ck)} are not the model's {names}")
        else:
            for k in ck:
                e, lim = rel_err(ck[k], params[k].detach().numpy()), 1e-3 if ".ln_" in k or k.startswith("ln_f") else 1e-2
                worst["checkpoint"] = max(worst.get("checkpoint", 0.0), e)
                if e > lim:
                    failures.append(f"{k} in the checkpoint after {ITERS} steps differs from the reference's (rel {e:.2e}, "
                                    f"limit {lim:.0e})")
    if WD_SCHED or DECOUPLED:
        # every tensor where the reference's AdamW took it with Megatron's decay schedule or decoupled rates
        step = os.path.join(work, "ckpt", f"iter_{ITERS:07d}")
        ck = read_safetensors(os.path.join(step, "model.safetensors"))
        if sorted(ck) != names:
            failures.append(f"the checkpoint's tensors {sorted(ck)} are not the model's {names}")
        else:
            e = max(rel_err(ck[k], params[k].detach().numpy()) for k in ck)
            worst["checkpoint"] = e
            if e > 1e-3:
                failures.append(f"checkpoint after {ITERS} steps differs from the reference's weights (rel {e:.2e})")
    atoll = os.path.join(os.path.dirname(os.path.abspath(train)), "atoll")
    if not llama and not NEMOTRON and not HEAD_DIM and not (EOD_MASK or DOCUMENTS):
        # `atoll export`: GPT2LMHeadModel's tensors and config; its loss on the last step's batch, computed the way
        # transformers computes GPT-2, equals the engine architecture's on the checkpoint (float64 both: a
        # transposed or misordered tensor would be off by O(1))
        out = os.path.join(work, "hf")
        r = subprocess.run([atoll, "export", "--load", os.path.join(work, "ckpt"), "--output", out],
                           capture_output=True, text=True)
        if r.returncode:
            failures.append(f"atoll export failed: {r.stderr.strip()}")
        else:
            with open(os.path.join(out, "config.json")) as f:
                cfg = json.load(f)
            want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": H,
                    "n_layer": L, "n_head": NH, "n_positions": T, "activation_function": "gelu_new",
                    "layer_norm_epsilon": LN_EPS, "tie_word_embeddings": not untie}
            if any(cfg.get(k) != v for k, v in want.items()):
                failures.append(f"exported config.json is not this model's GPT2Config: {cfg}")
            hf = {k: torch.tensor(v.astype(np.float64)) for k, v in read_safetensors(os.path.join(out, "model.safetensors")).items()}
            ck = {k: torch.tensor(v.astype(np.float64))
                  for k, v in read_safetensors(os.path.join(work, "ckpt", f"iter_{ITERS:07d}", "model.safetensors")).items()}
            with torch.no_grad():
                a, b = hf_gpt2_loss(hf, cfg, tokens, targets).item(), gpt_loss(ck, tokens, targets).item()
            worst["export"] = rel_err(a, b)
            if worst["export"] > (1e-7 if LN1P else 1e-10):  # 1 + w is rounded to float32 (2^-24) in the file
                failures.append(f"the exported GPT-2's loss {a!r} is not the checkpoint's {b!r}")
            if ("lm_head.weight" in hf) != untie:
                failures.append(f"the exported GPT-2 {'has' if untie else 'lacks'} a tied head; the model's is "
                                f"{'untied' if untie else 'tied'}")
            r = subprocess.run([atoll, "export", "--load", os.path.join(work, "ckpt"), "--output", out],
                               capture_output=True, text=True)
            if r.returncode != 1 or "already holds config.json" not in r.stderr:
                failures.append(f"a second export into {out} was not refused: {r.returncode} {r.stderr.strip()}")
    if NEMOTRON or (HEAD_DIM and not llama):
        r = subprocess.run([atoll, "export", "--load", os.path.join(work, "ckpt"), "--output", os.path.join(work, "hf")],
                           capture_output=True, text=True)
        if r.returncode == 0 or "has no Hugging Face GPT-2 form" not in r.stderr or os.path.exists(os.path.join(work, "hf")):
            failures.append(f"atoll export of a Nemotron-style GPT was not refused: {r.returncode} {r.stderr.strip()}")
    if llama:
        # the LLaMA family's checkpoint holds Hugging Face's tensors already: export writes them as they are (a 1p
        # model's norms as 1 + w) with the LlamaConfig (the step's own config.json; with 1p, the model's)
        out = os.path.join(work, "hf")
        r = subprocess.run([atoll, "export", "--load", os.path.join(work, "ckpt"), "--output", out],
                           capture_output=True, text=True)
        step = os.path.join(work, "ckpt", f"iter_{ITERS:07d}")
        ok = r.returncode == 0
        if ok:
            a, b = read_safetensors(os.path.join(out, "model.safetensors")), read_safetensors(os.path.join(step, "model.safetensors"))
            with open(os.path.join(out, "config.json")) as f1:
                cfg = json.load(f1)
            stored_w = lambda k: LN1P and k.endswith("norm.weight")
            ok = sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k] + 1 if stored_w(k) else b[k]) for k in a) \
                and (cfg == hf if hf is not None else all(cfg.get(k) == v for k, v in want.items()))
            if ok and LN1P:
                # computed as transformers does, from the export's weights as they are: the checkpoint's model
                with torch.no_grad():
                    x = llama_loss({k: torch.tensor(v.astype(np.float64)) for k, v in a.items()}, tokens, targets,
                                   stored_1p=False).item()
                    y = llama_loss({k: torch.tensor(v.astype(np.float64)) for k, v in b.items()}, tokens, targets).item()
                worst["export"] = rel_err(x, y)
                ok = worst["export"] <= 1e-7  # 1 + w rounded to float32 (2^-24); a norm without its 1 is off by O(1)
        if not ok:
            failures.append(f"atoll export of the LLaMA checkpoint is not its tensors (1p norms as 1 + w) and its "
                            f"config.json: {r.stderr.strip()}")
    print("losses engine:", ["%.6f" % x for x in engine_losses])
    print("worst relative error: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + f" (limit {TOL:.0e}"
          + ("; checkpoint weights 1e-3" + (" (LayerNorm; others 1e-2)" if NEMOTRON else "") + ": AdamW divides by"
             " the root of tiny second moments, so float32 against float64 differs more in the weights than in the"
             " losses" if "checkpoint" in worst else "") + ")")
    for f in failures:
        print("FAIL:", f)
    print("engine_torch_ref: %s" % ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
