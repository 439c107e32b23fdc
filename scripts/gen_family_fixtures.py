"""Generate model/testdata/families: one scaled-down checkpoint per model family
mixtune trains, and PyTorch's float64 outputs for it.

Usage (needs Debian's python3-torch; the Go tests only read the files):

    /usr/bin/python3 scripts/gen_family_fixtures.py model/testdata/families

For each family, a config.json with the published model's fields (the
family's features kept: grouped-query ratio, head_dim, biases, q/k norms,
rope scaling, sliding window, tying), scaled down in width and depth, and
random weights stored twice: in F32 (directory NAME) and in BF16
(NAME-bf16). expected.safetensors holds, for one fixed batch, the float64
logits, loss and gradient of every weight, and the same with a LoRA and a
DoRA adapter (PEFT's semantics: the bias frozen and outside DoRA's rescaling
and norm) on every linear module: the adapter's A, B and magnitude, and
their gradients.

The model code below is a re-implementation of transformers' modeling_llama,
modeling_mistral, modeling_qwen2 and modeling_qwen3 (eager attention,
repeat_kv, rotate_half rotary embeddings with fp32 inverse frequencies as
modeling_rope_utils computes them, RMSNorm) and PEFT's LoRA and DoRA layers,
written from their source; it shares nothing with mixtune.
"""
import copy
import json
import math
import os
import struct
import sys

import torch

BATCH, SEQ = 2, 7
IDS = [[1, 5, 9, 31, 4, 4, 17], [1, 22, 3, 8, 8, 0, 0]]
TARGETS = [[5, 9, 31, 4, 4, 17, 2], [22, 3, 8, 8, 2, -100, -100]]

# Published configs (Llama-3.2-1B, Mistral-7B-v0.1, Qwen2.5-0.5B, Qwen3-0.6B, a
# Llama with linear rope scaling and both biases), scaled down: widths and
# depths shrink, every feature and ratio stays.
FAMILIES = {
    "llama3.2": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, attention_dropout=0.0,
        bos_token_id=1, eos_token_id=[2, 3], head_dim=8, hidden_act="silu", hidden_size=32,
        initializer_range=0.02, intermediate_size=48, max_position_embeddings=131072, mlp_bias=False,
        num_attention_heads=4, num_hidden_layers=2, num_key_value_heads=1, pretraining_tp=1, rms_norm_eps=1e-05,
        rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0, original_max_position_embeddings=8192, rope_type="llama3"),
        rope_theta=500000.0, tie_word_embeddings=True, torch_dtype="bfloat16", transformers_version="4.45.0.dev0",
        use_cache=True, vocab_size=40),
    "llama-linear-bias": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=True, attention_dropout=0.0,
        bos_token_id=1, eos_token_id=2, hidden_act="silu", hidden_size=32, initializer_range=0.02,
        intermediate_size=40, max_position_embeddings=64, mlp_bias=True, num_attention_heads=4,
        num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-06,
        rope_scaling=dict(type="linear", factor=2.0), rope_theta=10000.0, tie_word_embeddings=False,
        torch_dtype="float32", vocab_size=40),
    "mistral": dict(
        architectures=["MistralForCausalLM"], model_type="mistral", attention_dropout=0.0, bos_token_id=1,
        eos_token_id=2, hidden_act="silu", hidden_size=32, initializer_range=0.02, intermediate_size=56,
        max_position_embeddings=32768, num_attention_heads=8, num_hidden_layers=2, num_key_value_heads=2,
        rms_norm_eps=1e-05, rope_theta=10000.0, sliding_window=4, tie_word_embeddings=False,
        torch_dtype="bfloat16", transformers_version="4.34.0.dev0", use_cache=True, vocab_size=40),
    "qwen2.5": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", attention_dropout=0.0, bos_token_id=1,
        eos_token_id=2, hidden_act="silu", hidden_size=56, initializer_range=0.02, intermediate_size=72,
        max_position_embeddings=32768, max_window_layers=21, num_attention_heads=7, num_hidden_layers=2,
        num_key_value_heads=1, rms_norm_eps=1e-06, rope_theta=1000000.0, sliding_window=32768,
        tie_word_embeddings=True, torch_dtype="bfloat16", transformers_version="4.40.1", use_cache=True,
        use_sliding_window=False, vocab_size=40),
    "qwen3": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", attention_bias=False, attention_dropout=0.0,
        bos_token_id=1, eos_token_id=2, head_dim=16, hidden_act="silu", hidden_size=32, initializer_range=0.02,
        intermediate_size=48, max_position_embeddings=40960, max_window_layers=28, num_attention_heads=4,
        num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-06, rope_scaling=None, rope_theta=1000000.0,
        sliding_window=None, tie_word_embeddings=True, torch_dtype="bfloat16", transformers_version="4.51.0",
        use_cache=True, use_sliding_window=False, vocab_size=40),
}

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def has_bias(c, short):
    fam = c["model_type"]
    if short in ("q_proj", "k_proj", "v_proj"):
        return fam == "qwen2" or bool(c.get("attention_bias"))
    if short == "o_proj":
        return bool(c.get("attention_bias")) and fam != "qwen2"
    return bool(c.get("mlp_bias"))


def module_path(i, short):
    return f"model.layers.{i}.{'self_attn' if short in MODULES[:4] else 'mlp'}.{short}"


def specs(c):
    d, f, hd = c["hidden_size"], c["intermediate_size"], head_dim(c)
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {"q_proj": (q, d), "k_proj": (kv, d), "v_proj": (kv, d), "o_proj": (d, q),
              "gate_proj": (f, d), "up_proj": (f, d), "down_proj": (d, f)}
    out = [("model.embed_tokens.weight", (c["vocab_size"], d))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", (d,)))
        for short in MODULES:
            out.append((module_path(i, short) + ".weight", shapes[short]))
            if has_bias(c, short):
                out.append((module_path(i, short) + ".bias", (shapes[short][0],)))
        if c["model_type"] == "qwen3":
            out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        out.append((p + "post_attention_layernorm.weight", (d,)))
    out.append(("model.norm.weight", (d,)))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (c["vocab_size"], d)))
    return out


def inv_freq(c):
    """modeling_rope_utils on a torch fp32 tensor, step by step."""
    hd = head_dim(c)
    base = c["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    rs = c.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return inv / rs["factor"]
    assert kind == "llama3"
    factor, lff, hff, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lff, old / hff
    wavelen = 2 * math.pi / inv
    inv_llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lff) / (hff - lff)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def linear(W, A, name, x, adapter):
    """PEFT's Linear: the base layer with its bias, and LoRA or DoRA on top."""
    w = W[name + ".weight"]
    bias = W.get(name + ".bias")
    base = x @ w.T
    if adapter is None or name not in A:
        return base if bias is None else base + bias
    a, b, s = A[name]["A"], A[name]["B"], adapter["scaling"]
    lora = (x @ a.T) @ b.T
    if adapter["kind"] == "lora":
        out = base + lora * s
        return out if bias is None else out + bias
    # DoRA: the norm of W + s·B·A (no bias), detached; bias outside the rescaling
    norm = (w + s * (b @ a)).norm(p=2, dim=1).detach()
    g = A[name]["M"] / norm
    out = g * (base + s * lora)
    return out if bias is None else out + bias


def forward(W, A, ids, c, dtype, adapter=None):
    d, H, KV, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    B, T = ids.shape
    freqs = torch.outer(torch.arange(T).float(), inv_freq(c))
    emb = torch.cat((freqs, freqs), dim=-1)
    # the fp32 angles' cos and sin correctly rounded to fp32 (libm noise out)
    cos = emb.double().cos().float().to(dtype)
    sin = emb.double().sin().float().to(dtype)
    x = W["model.embed_tokens.weight"][ids]
    i_idx, j_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    masked = j_idx > i_idx
    if c["model_type"] == "mistral" and c.get("sliding_window"):
        masked = masked | (j_idx <= i_idx - c["sliding_window"])
    eps = c["rms_norm_eps"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        lin = lambda short, v: linear(W, A, module_path(i, short), v, adapter)
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = lin("q_proj", h).view(B, T, H, hd)
        k = lin("k_proj", h).view(B, T, KV, hd)
        v = lin("v_proj", h).view(B, T, KV, hd)
        if c["model_type"] == "qwen3":
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // KV
        k = k[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
        v = v[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(masked, float("-inf")).softmax(-1)
        a = (s @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + lin("o_proj", a)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + lin("down_proj", torch.nn.functional.silu(lin("gate_proj", h)) * lin("up_proj", h))
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ head.T


def encode(t, dtype):
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    if dtype == "F64":
        return t.to(torch.float64).numpy().tobytes()
    return t.to(torch.float32).numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t, dtype in sorted(tensors, key=lambda x: x[0]):
        b = encode(t.detach().contiguous(), dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def loss_of(logits, c):
    targets = torch.tensor(TARGETS)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, c["vocab_size"]), targets.view(-1), ignore_index=-100)


def main(out):
    for fam_i, (name, c) in enumerate(FAMILIES.items()):
        torch.manual_seed(100 + fam_i)
        values = {}
        for n, shape in specs(c):
            if n.endswith("norm.weight"):
                t = 1 + 0.1 * torch.randn(shape)
            elif n.endswith(".bias"):
                t = 0.2 * torch.randn(shape)
            else:
                t = 0.3 * torch.randn(shape)
            values[n] = t
        # rows of zeros in two o_proj weights: DoRA must cope (Llama-3.1's o_proj has them)
        values["model.layers.0.self_attn.o_proj.weight"][3].zero_()
        r, alpha = 2, 4.0
        adapters = {}
        for i in range(c["num_hidden_layers"]):
            for short in MODULES:
                path = module_path(i, short)
                o, inn = values[path + ".weight"].shape
                adapters[path] = {"A": 0.3 * torch.randn(r, inn), "B": 0.3 * torch.randn(o, r), "Mnoise": 1 + 0.1 * torch.randn(o)}
        for variant, dtype in (("", "F32"), ("-bf16", "BF16")):
            d = os.path.join(out, name + variant)
            os.makedirs(d, exist_ok=True)
            stored = {n: (t.to(torch.bfloat16).float() if dtype == "BF16" else t.clone()) for n, t in values.items()}
            write_safetensors(os.path.join(d, "model.safetensors"), [(n, t, dtype) for n, t in stored.items()], {"format": "pt"})
            cfg = copy.deepcopy(c)
            cfg["torch_dtype"] = "bfloat16" if dtype == "BF16" else "float32"
            with open(os.path.join(d, "config.json"), "w") as fh:
                json.dump(cfg, fh, indent=2, sort_keys=True)

            ids = torch.tensor(IDS)
            expected, meta = [], {"input_ids": json.dumps(sum(IDS, [])), "targets": json.dumps(sum(TARGETS, [])),
                                  "batch": str(BATCH), "seq_len": str(SEQ), "torch": torch.__version__,
                                  "lora_r": str(r), "lora_alpha": str(alpha)}
            W64 = {n: t.double().requires_grad_(True) for n, t in stored.items()}
            logits = forward(W64, {}, ids, c, torch.float64)
            loss = loss_of(logits, c)
            loss.backward()
            expected += [("logits", logits.detach(), "F64"), ("loss", loss.detach().reshape(1), "F64")]
            expected += [("grad." + n, W64[n].grad, "F64") for n in stored]
            with torch.no_grad():
                logits32 = forward({n: t.float() for n, t in stored.items()}, {}, ids, c, torch.float32)
            expected.append(("logits_fp32", logits32, "F32"))

            for kind in ("lora", "dora"):
                W = {n: t.double() for n, t in stored.items()}
                A = {}
                for path, ad in adapters.items():
                    a, b = ad["A"].double().requires_grad_(True), ad["B"].double().requires_grad_(True)
                    entry = {"A": a, "B": b}
                    if kind == "dora":
                        s = alpha / r
                        with torch.no_grad():
                            m0 = (W[path + ".weight"] + s * (b @ a)).norm(p=2, dim=1) * ad["Mnoise"].double()
                        entry["M"] = m0.float().double().requires_grad_(True)  # fp32 values, as mixtune holds them
                    A[path] = entry
                lg = forward(W, A, ids, c, torch.float64, {"kind": kind, "scaling": alpha / r})
                ls = loss_of(lg, c)
                ls.backward()
                expected += [(f"{kind}.logits", lg.detach(), "F64"), (f"{kind}.loss", ls.detach().reshape(1), "F64")]
                for path, e in A.items():
                    for key, t in e.items():
                        expected += [(f"{kind}.{path}.{key}", t.detach(), "F64"), (f"{kind}.grad.{path}.{key}", t.grad, "F64")]
            write_safetensors(os.path.join(d, "expected.safetensors"), expected, meta)
            print(f"wrote {d}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "model/testdata/families")
