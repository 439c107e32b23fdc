#!/usr/bin/env python3
"""Generate nn/testdata/torch_amp_grads.json: where PyTorch rounds bf16 gradients.

What it establishes (asserted every run, recorded under "facts")
  With torch.autocast("cpu", dtype=torch.bfloat16) and autograd:
  1. a bf16 tensor read by two ops gets its gradients summed in bf16:
     bf16(g0 + g1), not the fp32 sum;
  2. read by three ops created in the order 0, 1, 2, it gets
     bf16(bf16(g2 + g1) + g0): autograd accumulates in the tensor's dtype,
     one addition at a time, latest consumer first (the engine runs the
     ready backward function created last first);
  3. an fp32 activation read by several autocast matmuls is cast once per
     matmul, so its gradient is the fp32 sum of the casts' gradients;
  4. a leaf fp32 weight's cast is cached for the autocast region, so a
     weight read by several matmuls gets bf16(sum) of their gradients;
  5. the backward of expand (repeat_kv) sums a bf16 gradient over the
     repeated dimension in fp32 and rounds once;
  6. Debian's torch 1.13 CPU bf16 matmul accumulates in fp32 only for the
     linear forward (x·Wᵀ, through oneDNN); mm in other layouts and bmm
     round every product and every partial sum to bf16 (a naive kernel),
     which no GPU does. The cases below therefore run their matmuls through
     MM, which accumulates in fp32 and rounds once, as cuBLAS (fp32 compute
     type) and oneDNN do; MM is checked against torch's own linear forward.
  Casts, gradient dtypes and accumulation, repeat_kv's reduction, rotary
  and softmax in fp32, the residual's type promotion and LoRA's bf16
  scaling are PyTorch's own.

The cases
  Every input is a small dyadic rational with few significant bits, so
  that every fp32 accumulation, inside a matmul, a group sum or a gradient
  sum, is exact in any order (checked: all products are multiples of 2^L
  and the sum of their magnitudes stays below 2^(L+24)); the only roundings
  are the rounding points themselves, where values do carry more than 8
  significant bits. A mixtune run that rounds where PyTorch rounds then
  gives the same bits.

  layer: x (fp32, trainable) -> q, k, v projections (bf16) -> rotary on q
    and k in fp32 -> causal grouped-query attention (6 query heads sharing
    2 key/value heads, head dim 4, so the 1/sqrt(d) scale is exact; q and
    cast to bf16 before repeat_kv, as mixtune casts them for the attention
    op) -> o_proj with a LoRA branch (r 4, scaling 0.75: the attention
    output, bf16, has two readers) -> residual y = x + o (fp32) ->
    loss = sum(y * R). Sequence length 2 and queries and keys on
    disjoint rotary pairs make every score 0, so the softmax is exactly
    1 or 1/2 in any implementation, while its gradient is not zero.
  fanout: y = x·Wᵀ (bf16) read by three matmuls (fact 2).
  shared_weight: one trainable weight read by three matmuls (fact 4).

  Stored: every input's float32 bits, the forward output y and every
  gradient as float32 bits, and the rotary table (cos, sin) used, computed
  as mixtune's NewRopeTable does.

How to run
  /usr/bin/python3 scripts/gen_amp_grad_fixture.py   (Debian's python3-torch 1.13)
"""
import itertools
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

BF = torch.bfloat16


def b16(x):
    return x.to(BF).float()


def dyadic(g, shape, bits, exp):
    """Integers in [-(2^bits - 1), 2^bits - 1] times 2^exp."""
    hi = 2 ** bits
    return (torch.randint(-(hi - 1), hi, shape, generator=g).float() * 2.0 ** exp)


# ---------------------------------------------------------------- facts

def facts():
    g = torch.Generator().manual_seed(1)
    x = dyadic(g, (4, 8), 6, -3)
    W = dyadic(g, (8, 8), 6, -3)
    Ws = [dyadic(g, (8, 8), 7, -3) for _ in range(3)]
    R = dyadic(g, (4, 8), 7, -3)
    out = {}

    def run(which, act=False):
        xx = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=BF):
            y = xx * 1.0 if act else F.linear(xx, W)
            y.retain_grad()
            loss = 0
            for i in which:
                loss = loss + (F.linear(y, Ws[i]).float() * R).sum()
        loss.backward()
        return y.grad

    gs = [run([i]).float() for i in range(3)]
    two = run([0, 1]).float()
    out["bf16 tensor, two readers: bf16(g0+g1)"] = torch.equal(two, b16(gs[0] + gs[1])) and not torch.equal(two, gs[0] + gs[1])
    three = run([0, 1, 2]).float()
    orders = [p for p in itertools.permutations(range(3)) if torch.equal(three, b16(b16(gs[p[0]] + gs[p[1]]) + gs[p[2]]))]
    out["bf16 tensor, three readers 0,1,2: bf16(bf16(g2+g1)+g0)"] = (2, 1, 0) in orders and not torch.equal(three, b16(gs[0] + gs[1] + gs[2]))
    hs = [run([i], act=True) for i in range(2)]
    two = run([0, 1], act=True)
    out["fp32 activation, two autocast readers: fp32 sum"] = torch.equal(two, hs[0] + hs[1]) and not torch.equal(two, b16(hs[0] + hs[1]))

    R8 = dyadic(g, (8, 8), 7, -3)

    def runw(which):
        Wl = W.clone().requires_grad_()
        with torch.autocast("cpu", dtype=BF):
            loss = 0
            for i in which:
                loss = loss + (F.linear(Ws[i] * 1.0, Wl).float() * R8).sum()
        loss.backward()
        return Wl.grad

    ws = [runw([i]) for i in range(2)]
    two = runw([0, 1])
    out["leaf weight, two autocast readers: bf16(sum) (cached cast)"] = torch.equal(two, b16(ws[0] + ws[1])) and not torch.equal(two, ws[0] + ws[1])

    k = torch.tensor([1.0]).to(BF).requires_grad_()
    gk = torch.tensor([1.0, 2.0 ** -8, 2.0 ** -8]).to(BF)
    k.expand(3).backward(gk)
    out["expand backward: fp32 sum, one rounding"] = k.grad.item() == 1 + 2.0 ** -7  # bf16 steps would give 1

    A = dyadic(g, (4, 8), 7, -3)
    B = dyadic(g, (8, 8), 7, -3)
    with torch.autocast("cpu", dtype=BF):
        lin = F.linear(A, B.t().contiguous())
    out["linear forward (oneDNN): fp32 accumulation"] = torch.equal(lin.float(), b16(A @ B))
    nn = torch.mm(A.to(BF), B.to(BF)).float()
    seq = torch.zeros(4, 8)
    for i in range(8):
        seq = b16(seq + b16(A[:, i:i + 1] * B[i:i + 1, :]))
    out["mm NN: every product and partial sum rounded to bf16"] = torch.equal(nn, seq) and not torch.equal(nn, b16(A @ B))
    for name, ok in out.items():
        print(("ok   " if ok else "FAIL ") + name, file=sys.stderr)
        if not ok:
            raise SystemExit("a fact about PyTorch no longer holds; revise mixtune and this script")
    return out


# ---------------------------------------------------------------- exact fp32 matmul

def lsb_exps(t):
    """Per element, the exponent of the lowest set bit (a large number for 0)."""
    out = []
    for v in t.flatten().tolist():
        if v == 0:
            out.append(1 << 20)
        else:
            n, d = abs(v).as_integer_ratio()
            out.append((n & -n).bit_length() - d.bit_length())
    return torch.tensor(out, dtype=torch.float64).view(t.shape)


CHECKED = {"sums": 0}


def require_exact(lsb, bound, what):
    """Every partial sum of terms that are multiples of 2^lsb and whose
    magnitudes add up to less than 2^(lsb+24) is exact in fp32."""
    bad = (bound > 0) & (bound >= torch.exp2(lsb + 24))
    if bad.any():
        i = bad.flatten().nonzero()[0].item()
        raise SystemExit(f"{what}: an fp32 sum may be inexact (lsb 2^{lsb.flatten()[i].item():.0f}, magnitude {bound.flatten()[i].item()})")
    CHECKED["sums"] += bound.numel()


def check_exact_sum(terms, what):
    """terms summed over dim 0, in any order: exact in fp32."""
    terms = terms.double()
    require_exact(lsb_exps(terms).min(0).values, terms.abs().sum(0), what)


def exact_mm(a, b, what):
    """(a @ b) for bf16 a, b, accumulated exactly (checked per output element) and rounded once."""
    ad, bd = a.double(), b.double()
    la, lb = lsb_exps(ad), lsb_exps(bd)
    # lowest bit of any product a[i,k]·b[k,j]: min over k of la[i,k] + lb[k,j]
    lsb = (la.unsqueeze(-1) + lb.unsqueeze(-3)).min(-2).values
    require_exact(lsb, ad.abs() @ bd.abs(), what)
    return (ad @ bd).to(BF)


class MM(torch.autograd.Function):
    """a @ b for bf16 a, b: fp32 accumulation, one rounding, forward and backward."""

    @staticmethod
    def forward(ctx, a, b):
        assert a.dtype == BF and b.dtype == BF
        ctx.save_for_backward(a, b)
        return exact_mm(a, b, "forward matmul")

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return exact_mm(g, b.transpose(-1, -2), "backward matmul (dA)"), exact_mm(a.transpose(-1, -2), g, "backward matmul (dB)")


class Casts:
    """autocast's casting, made explicit: an activation is cast at every
    matmul that reads it (fact 3), a leaf weight once per forward (fact 4)."""

    def __init__(self):
        self.cache = {}
        self.act_grads = {}  # id(source) -> gradients of its casts, for the exactness check

    def weight(self, w):
        if id(w) not in self.cache:
            self.cache[id(w)] = w.to(BF)
        return self.cache[id(w)]

    def act(self, x):
        if x.dtype == BF:
            return x
        cast = x.to(BF)
        cast.register_hook(lambda gr: self.act_grads.setdefault(id(x), []).append(gr.float()))
        return cast

    def linear(self, x, w):
        return MM.apply(self.act(x), self.weight(w).t())


# ---------------------------------------------------------------- rotary, as mixtune's NewRopeTable

def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def rope_table(positions, head_dim, theta):
    half = head_dim // 2
    cos = [[0.0] * half for _ in range(positions)]
    sin = [[0.0] * half for _ in range(positions)]
    for i in range(half):
        e = f32(f32(2 * i) / f32(head_dim))
        inv = f32(1.0 / f32(math.pow(theta, e)))
        for p in range(positions):
            a = f32(f32(p) * inv)
            cos[p][i] = f32(math.cos(a))
            sin[p][i] = f32(math.sin(a))
    return cos, sin


def rotary(x, cos, sin, heads, head_dim, seq):
    """x [N, heads*head_dim] fp32; HF's q*cos + rotate_half(q)*sin."""
    n = x.shape[0]
    xv = x.view(n // seq, seq, heads, head_dim)
    c = torch.tensor(cos).repeat(1, 2).view(1, seq, 1, head_dim)
    s = torch.tensor(sin).repeat(1, 2).view(1, seq, 1, head_dim)
    x1, x2 = xv[..., :head_dim // 2], xv[..., head_dim // 2:]
    rot = torch.cat((-x2, x1), dim=-1)
    return (xv * c + rot * s).reshape(n, heads * head_dim)


def repeat_kv(t, n_rep):
    b, h, s, d = t.shape
    return t[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


# ---------------------------------------------------------------- cases

def bits(t):
    return [int(v) & 0xFFFFFFFF for v in t.detach().float().contiguous().view(torch.int32).flatten().tolist()]


def layer_case():
    B, T, D, H, KV, HD, R_, S = 2, 2, 8, 6, 2, 4, 4, 0.75
    N, G = B * T, H // KV
    theta = 10000.0
    g = torch.Generator().manual_seed(7)
    x = dyadic(g, (N, D), 5, -4)
    Wq = dyadic(g, (H * HD, D), 5, -5)
    Wk = dyadic(g, (KV * HD, D), 5, -5)
    for h in range(H):  # queries on rotary pair (0, 2) of every head
        Wq[h * HD + 1] = 0
        Wq[h * HD + 3] = 0
    for h in range(KV):  # keys on pair (1, 3): every score q·k is 0
        Wk[h * HD + 0] = 0
        Wk[h * HD + 2] = 0
    Wv = dyadic(g, (KV * HD, D), 5, -5)
    Wo = dyadic(g, (D, H * HD), 5, -5)
    A = dyadic(g, (R_, H * HD), 5, -5)
    Bm = dyadic(g, (D, R_), 5, -5)
    Rw = dyadic(g, (N, D), 4, -3)
    params = {"x": x, "wq": Wq, "wk": Wk, "wv": Wv, "wo": Wo, "lora_a": A, "lora_b": Bm}
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    cos, sin = rope_table(T, HD, theta)
    c = Casts()
    L = leaves
    q = rotary(c.linear(L["x"], L["wq"]).float(), cos, sin, H, HD, T)  # rope computes in fp32
    k = rotary(c.linear(L["x"], L["wk"]).float(), cos, sin, KV, HD, T)
    v = c.linear(L["x"], L["wv"])
    qh = q.to(BF).view(B, T, H, HD).transpose(1, 2)
    kh = repeat_kv(k.to(BF).view(B, T, KV, HD).transpose(1, 2), G)
    vh = repeat_kv(v.view(B, T, KV, HD).transpose(1, 2), G)
    kh.register_hook(lambda gr: check_exact_sum(gr.float().view(B, KV, G, T, HD).transpose(0, 2), "dK group sum"))
    vh.register_hook(lambda gr: check_exact_sum(gr.float().view(B, KV, G, T, HD).transpose(0, 2), "dV group sum"))
    scores = MM.apply(qh, kh.transpose(-1, -2)) * (1 / math.sqrt(HD))  # 1/2: exact
    assert torch.count_nonzero(scores) == 0
    mask = torch.full((T, T), float("-inf")).triu(1)
    p = torch.softmax(scores.float() + mask, dim=-1)
    o = MM.apply(p.to(BF), vh)
    att = o.transpose(1, 2).reshape(N, H * HD)
    out = c.linear(att, L["wo"]) + c.linear(c.linear(att, L["lora_a"]), L["lora_b"]) * S
    y = L["x"] + out
    assert y.dtype == torch.float32 and att.dtype == BF and out.dtype == BF
    (y * Rw).sum().backward()
    # x's gradient: the fp32 sum of its three casts' gradients and the residual's
    check_exact_sum(torch.stack(c.act_grads[id(L["x"])] + [Rw]), "dx sum")
    return {
        "batch": B, "seq_len": T, "hidden": D, "heads": H, "kv_heads": KV, "head_dim": HD,
        "rank": R_, "scaling": S, "rope_theta": theta,
        "rope_cos": bits(torch.tensor(cos)), "rope_sin": bits(torch.tensor(sin)),
        "inputs": {k: {"shape": list(v.shape), "bits": bits(v)} for k, v in params.items()},
        "r": bits(Rw), "y": bits(y),
        "grads": {k: bits(L[k].grad) for k in params},
    }


def fanout_case():
    g = torch.Generator().manual_seed(11)
    x = dyadic(g, (4, 8), 5, -4)
    W = dyadic(g, (8, 8), 5, -5)
    Ws = [dyadic(g, (6, 8), 6, -4) for _ in range(3)]
    Rs = [dyadic(g, (4, 6), 4, -3) for _ in range(3)]
    params = {"x": x, "w": W, "w0": Ws[0], "w1": Ws[1], "w2": Ws[2]}
    L = {k: v.clone().requires_grad_() for k, v in params.items()}
    c = Casts()
    y = c.linear(L["x"], L["w"])
    loss = 0
    for i in range(3):
        loss = loss + (c.linear(y, L[f"w{i}"]).float() * Rs[i]).sum()
    loss.backward()
    return {"inputs": {k: {"shape": list(v.shape), "bits": bits(v)} for k, v in params.items()},
            "r": [bits(r) for r in Rs], "grads": {k: bits(L[k].grad) for k in params}}


def shared_weight_case():
    g = torch.Generator().manual_seed(13)
    xs = [dyadic(g, (4, 8), 6, -4) for _ in range(3)]
    W = dyadic(g, (6, 8), 5, -5)
    Rs = [dyadic(g, (4, 6), 6, -3) for _ in range(3)]
    params = {"x0": xs[0], "x1": xs[1], "x2": xs[2], "w": W}
    L = {k: v.clone().requires_grad_() for k, v in params.items()}
    c = Casts()
    loss = 0
    for i in range(3):
        loss = loss + (c.linear(L[f"x{i}"], L["w"]).float() * Rs[i]).sum()
    loss.backward()
    return {"inputs": {k: {"shape": list(v.shape), "bits": bits(v)} for k, v in params.items()},
            "r": [bits(r) for r in Rs], "grads": {k: bits(L[k].grad) for k in params}}


def check_mm_against_onednn():
    """MM equals torch's own fp32-accumulating bf16 linear forward."""
    g = torch.Generator().manual_seed(3)
    a, w = dyadic(g, (5, 8), 6, -4), dyadic(g, (7, 8), 6, -4)
    with torch.autocast("cpu", dtype=BF):
        ref = F.linear(a, w)
    mine = MM.apply(a.to(BF), w.to(BF).t())
    assert torch.equal(ref, mine) and not torch.equal(ref.float(), a @ w.t()), "MM differs from oneDNN's linear"


def main():
    torch.manual_seed(0)
    fx = {"generator": "scripts/gen_amp_grad_fixture.py", "torch_version": torch.__version__, "facts": facts()}
    check_mm_against_onednn()
    fx["layer"] = layer_case()
    fx["fanout"] = fanout_case()
    fx["shared_weight"] = shared_weight_case()
    fx["exact_sums_checked"] = CHECKED["sums"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "nn", "testdata", "torch_amp_grads.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(fx, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes; {CHECKED['sums']} sums checked exact)", file=sys.stderr)


if __name__ == "__main__":
    main()
