"""Generate model/testdata/torch_llama: a tiny Llama checkpoint and PyTorch's outputs for it.

Usage (needs Debian's python3-torch; the Go tests only read the files it writes):

    /usr/bin/python3 scripts/gen_torch_llama_fixture.py model/testdata/torch_llama

It writes, in the Hugging Face layout, a 2-layer grouped-query-attention Llama
with random weights stored in mixed dtypes (BF16, F16 and F32) across two
shards, and expected.safetensors holding, for one fixed batch, the logits,
the mean cross-entropy loss and the gradient of that loss for every weight,
computed by PyTorch in float64 from the exact stored values; plus float32
logits. The model code below follows transformers' modeling_llama semantics
(RMSNorm, rotate_half rotary embeddings with fp32 inv_freq, repeat_kv
grouped-query attention, SwiGLU MLP) and shares nothing with mixtune.
"""
import json
import os
import struct
import sys

import torch

CONFIG = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
    vocab_size=32, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2, pad_token_id=0, attention_bias=False,
    mlp_bias=False, rope_scaling=None, torch_dtype="float32",
)
BATCH, SEQ = 2, 7


def specs(c):
    d, f = c["hidden_size"], c["intermediate_size"]
    hd = d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (c["vocab_size"], d))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (d,)),
            (p + "self_attn.q_proj.weight", (q, d)),
            (p + "self_attn.k_proj.weight", (kv, d)),
            (p + "self_attn.v_proj.weight", (kv, d)),
            (p + "self_attn.o_proj.weight", (d, q)),
            (p + "post_attention_layernorm.weight", (d,)),
            (p + "mlp.gate_proj.weight", (f, d)),
            (p + "mlp.up_proj.weight", (f, d)),
            (p + "mlp.down_proj.weight", (d, f)),
        ]
    out += [("model.norm.weight", (d,)), ("lm_head.weight", (c["vocab_size"], d))]
    return out


def storage_dtype(name, i):
    # Mixed on purpose: the loader must convert each to fp32 at load time.
    if "embed" in name or "q_proj" in name:
        return "BF16"
    if "mlp" in name and "layers.1" in name:
        return "F16"
    return "F32"


def encode(t, dtype):
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    if dtype == "F16":
        return t.to(torch.float16).numpy().tobytes()
    if dtype == "F64":
        return t.to(torch.float64).numpy().tobytes()
    return t.to(torch.float32).numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor, dtype). Little-endian, header padded to 8."""
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


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(W, ids, c, dtype):
    d, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // H
    B, T = ids.shape
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))  # fp32
    pos = torch.arange(T).float()
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    # cos/sin of the fp32 angles, correctly rounded to fp32. HF calls
    # emb.cos() in fp32, whose vectorized cosf can differ from this by one
    # ulp (cos(1.0) does); rounding exactly keeps the float64 comparison
    # free of libm noise.
    cos = emb.double().cos().float().to(dtype)
    sin = emb.double().sin().float().to(dtype)
    x = W["model.embed_tokens.weight"][ids]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], c["rms_norm_eps"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // KV  # repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
        k = k[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
        v = v[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
        s = (q @ k.transpose(-1, -2)) / (hd ** 0.5)
        s = s.masked_fill(mask, float("-inf")).softmax(-1)
        a = (s @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], c["rms_norm_eps"])
    return x @ W["lm_head.weight"].T


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    stored = {}
    for i, (name, shape) in enumerate(specs(CONFIG)):
        if name.endswith("norm.weight"):
            t = 1 + 0.1 * torch.randn(shape)
        else:
            t = 0.3 * torch.randn(shape)
        dt = storage_dtype(name, i)
        # the values as stored, read back exactly
        if dt == "BF16":
            t = t.to(torch.bfloat16).float()
        elif dt == "F16":
            t = t.to(torch.float16).float()
        stored[name] = (t, dt)

    names = [n for n, _ in specs(CONFIG)]
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    weight_map, total = {}, 0
    for fname, group in shards.items():
        write_safetensors(os.path.join(out, fname), [(n, stored[n][0], stored[n][1]) for n in group], {"format": "pt"})
        for n in group:
            weight_map[n] = fname
            total += stored[n][0].numel() * (2 if stored[n][1] != "F32" else 4)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=2, sort_keys=True)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)

    ids = torch.tensor([[1, 5, 9, 31, 4, 4, 17], [1, 22, 3, 8, 8, 0, 0]])
    targets = torch.tensor([[5, 9, 31, 4, 4, 17, 2], [22, 3, 8, 8, 2, -100, -100]])

    W64 = {n: t.double().requires_grad_(True) for n, (t, _) in stored.items()}
    logits = forward(W64, ids, CONFIG, torch.float64)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, CONFIG["vocab_size"]), targets.view(-1), ignore_index=-100)
    loss.backward()
    W32 = {n: t.float() for n, (t, _) in stored.items()}
    with torch.no_grad():
        logits32 = forward(W32, ids, CONFIG, torch.float32)

    expected = [("logits", logits.detach(), "F64"), ("loss", loss.detach().reshape(1), "F64"),
                ("logits_fp32", logits32, "F32")]
    expected += [("grad." + n, W64[n].grad, "F64") for n in names]
    meta = {"input_ids": json.dumps(ids.view(-1).tolist()), "targets": json.dumps(targets.view(-1).tolist()),
            "batch": str(BATCH), "seq_len": str(SEQ), "torch": torch.__version__}
    write_safetensors(os.path.join(out, "expected.safetensors"), expected, meta)
    print(f"wrote {out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "model/testdata/torch_llama")
