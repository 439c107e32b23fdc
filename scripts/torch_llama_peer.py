#!/usr/bin/env python3
"""PyTorch peer for `mixtune bench` at real model shapes.

Like ../shared/bench/torch_peer.py (LoRA r on q, k, v, o; AdamW; random
tokens; bf16 through torch.autocast), and also what large shapes need:
grouped-query attention (--kv-heads), a frozen base held in bf16
(--base-dtype bf16, as mixtune's --base-dtype bf16) and activation
checkpointing per decoder layer (--checkpoint, torch.utils.checkpoint).
Prints one JSON line: tokens/s over the timed steps and the process's peak
RSS. Needs Debian's python3-torch (and libopenblas0-pthread).

    python3 scripts/torch_llama_peer.py --vocab 32000 --dim 2048 --layers 22 \
        --heads 32 --kv-heads 4 --ffn 5632 --seq 2048 --batch 1 \
        --mode bf16 --base-dtype bf16 --checkpoint --steps 1 --warmup 1
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


class LoRA(nn.Module):
    """base(x) + B(A(x))·alpha/r with the base frozen."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.scale = alpha / r
        self.A = nn.Parameter(torch.empty(r, base.in_features))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.A), self.B) * self.scale


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class Layer(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        hd = dim // heads
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hd
        self.q_proj = nn.Linear(dim, heads * hd, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(heads * hd, dim, bias=False)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Layer(a.dim, a.heads, a.kv_heads, a.ffn) for _ in range(a.layers))
        self.norm = RMSNorm(a.dim)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)
        self.ckpt = a.checkpoint
        hd = a.dim // a.heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        f = torch.outer(torch.arange(a.seq).float(), inv)
        self.register_buffer("cos", torch.cat((f, f), -1).cos())
        self.register_buffer("sin", torch.cat((f, f), -1).sin())
        self.register_buffer("mask", torch.triu(torch.ones(a.seq, a.seq, dtype=torch.bool), 1))

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            if self.ckpt:
                x = checkpoint(layer, x, self.cos, self.sin, self.mask, use_reentrant=False)
            else:
                x = layer(x, self.cos, self.sin, self.mask)
        return self.lm_head(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("vocab", 512), ("dim", 256), ("layers", 4), ("heads", 8), ("kv-heads", 0),
                          ("ffn", 688), ("seq", 128), ("batch", 8), ("rank", 8), ("steps", 3),
                          ("warmup", 2), ("threads", 2)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--mode", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--base-dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--checkpoint", action="store_true")
    a = ap.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Model(a)
    if a.base_dtype == "bf16":
        m.to(torch.bfloat16)  # the frozen base; the rotary tables stay fp32 below
        m.cos, m.sin = m.cos.float(), m.sin.float()
    for p in m.parameters():
        p.requires_grad_(False)
    for layer in m.layers:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(layer, name, LoRA(getattr(layer, name), a.rank, 2 * a.rank))
    trainable = [p for p in m.parameters() if p.requires_grad]  # fp32 LoRA weights
    opt = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    ids, targets = tokens[:, :-1], tokens[:, 1:]

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            logits = m(ids)
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    dt = (time.perf_counter() - t0) / a.steps
    print(json.dumps({"peer": "torch-" + torch.__version__, "mode": a.mode, "base_dtype": a.base_dtype,
                      "checkpoint": a.checkpoint, "tokens_per_s": round(a.batch * a.seq / dt, 2),
                      "step_s": round(dt, 2), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                      "params": sum(p.numel() for p in m.parameters()), "loss": round(loss, 4)}), flush=True)


if __name__ == "__main__":
    main()
