"""Generate peft/testdata/peft_dora: a DoRA adapter in PEFT's file layout for
model/testdata/torch_llama, and PyTorch's outputs and gradients with it.

Usage (needs Debian's python3-torch; the Go tests only read the files it writes):

    /usr/bin/python3 scripts/gen_peft_dora_fixture.py peft/testdata/peft_dora

It writes adapter_config.json and adapter_model.safetensors as PEFT's
save_pretrained does for LoraConfig(r=2, lora_alpha=3, use_rslora=True,
use_dora=True, target_modules=["q_proj", "v_proj", "down_proj"]) (fp32
weights; DoRA's magnitude under "<module>.lora_magnitude_vector", without
".weight"; config fields of PEFT 0.13, including some mixtune does not use),
with B and the magnitudes away from their initial values as after training.

expected.safetensors holds, for one fixed batch, the logits, the mean
cross-entropy loss and the gradient of the loss for every adapter tensor,
computed in float64 from the stored values. Each adapted linear module is
computed as PEFT's DoraLinearLayer.forward does without dropout:

    lora_weight = B @ A
    weight_norm = ||W + scaling * lora_weight||_2 per row, detached
    g = m / weight_norm
    out = W x + (g - 1) * (W x) + g * (B (A x)) * scaling

The model itself follows transformers' modeling_llama, as in
gen_torch_llama_fixture.py, whose weight files and helpers it reuses.
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_torch_llama_fixture import rms_norm, rotate_half, write_safetensors  # noqa: E402

BASE = "model/testdata/torch_llama"
R, ALPHA = 2, 3.0
SCALING = ALPHA / math.sqrt(R)  # use_rslora
TARGETS = ["q_proj", "v_proj", "down_proj"]


def read_safetensors(path):
    with open(path, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        b = bytearray(data[lo:hi])
        if info["dtype"] == "F32":
            t = torch.frombuffer(b, dtype=torch.float32)
        elif info["dtype"] == "F16":
            t = torch.frombuffer(b, dtype=torch.float16).float()
        elif info["dtype"] == "BF16":
            t = torch.frombuffer(b, dtype=torch.int16).view(torch.bfloat16).float()
        else:
            raise ValueError(info["dtype"])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def load_base():
    with open(os.path.join(BASE, "config.json")) as fh:
        c = json.load(fh)
    W = {}
    for f in sorted(os.listdir(BASE)):
        if f.startswith("model-") and f.endswith(".safetensors"):
            W.update(read_safetensors(os.path.join(BASE, f)))
    return c, W


def forward(W, ad, ids, c):
    """The Llama forward of gen_torch_llama_fixture.py with each adapted
    linear module computed as PEFT's DoRA layer."""
    d, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // H
    B, T = ids.shape
    dtype = torch.float64

    def lin(module, x):
        w = W[module + ".weight"]
        result = x @ w.T
        if module not in ad:
            return result
        A, Bm, m = ad[module]
        lora_weight = Bm @ A
        weight_norm = torch.linalg.norm(w + SCALING * lora_weight, dim=1).detach()
        g = (m / weight_norm).view(1, -1)
        lora_result = (x @ A.T) @ Bm.T
        return result + (g - 1) * result + g * lora_result * SCALING

    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(T).float()
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.double().cos().float().to(dtype)
    sin = emb.double().sin().float().to(dtype)
    x = W["model.embed_tokens.weight"][ids]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], c["rms_norm_eps"])
        q = lin(p + "self_attn.q_proj", h).view(B, T, H, hd).transpose(1, 2)
        k = lin(p + "self_attn.k_proj", h).view(B, T, KV, hd).transpose(1, 2)
        v = lin(p + "self_attn.v_proj", h).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // KV
        k = k[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
        v = v[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
        s = (q @ k.transpose(-1, -2)) / (hd ** 0.5)
        s = s.masked_fill(mask, float("-inf")).softmax(-1)
        a = (s @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + lin(p + "self_attn.o_proj", a)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
        g = lin(p + "mlp.gate_proj", h)
        u = lin(p + "mlp.up_proj", h)
        x = x + lin(p + "mlp.down_proj", torch.nn.functional.silu(g) * u)
    x = rms_norm(x, W["model.norm.weight"], c["rms_norm_eps"])
    return x @ W["lm_head.weight"].T


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(4321)
    c, W32 = load_base()
    W = {n: t.double() for n, t in W32.items()}
    modules = [f"model.layers.{i}.{'mlp' if t == 'down_proj' else 'self_attn'}.{t}"
               for i in range(c["num_hidden_layers"]) for t in TARGETS]
    adapter32 = {}
    for mod in modules:
        w = W32[mod + ".weight"]
        out_f, in_f = w.shape
        A = torch.empty(R, in_f).uniform_(-1 / math.sqrt(in_f), 1 / math.sqrt(in_f))
        Bm = 0.2 * torch.randn(out_f, R)  # as after training: B != 0
        norm = torch.linalg.norm(w.double() + SCALING * (Bm.double() @ A.double()), dim=1)
        m = (norm * (1 + 0.1 * torch.randn(out_f).double())).float()  # g != 1
        adapter32[mod] = (A.float(), Bm.float(), m)

    key = lambda mod, s: f"base_model.model.{mod}.{s}"
    tensors = []
    for mod, (A, Bm, m) in adapter32.items():
        tensors += [(key(mod, "lora_A.weight"), A, "F32"), (key(mod, "lora_B.weight"), Bm, "F32"),
                    (key(mod, "lora_magnitude_vector"), m, "F32")]
    write_safetensors(os.path.join(out, "adapter_model.safetensors"), tensors, {"format": "pt"})
    config = {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "torch_llama", "bias": "none",
        "eva_config": None, "exclude_modules": None, "fan_in_fan_out": False, "inference_mode": True,
        "init_lora_weights": True, "layer_replication": None, "layers_pattern": None, "layers_to_transform": None,
        "loftq_config": {}, "lora_alpha": ALPHA, "lora_bias": False, "lora_dropout": 0.0, "megatron_config": None,
        "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA", "r": R, "rank_pattern": {},
        "revision": None, "target_modules": TARGETS, "task_type": "CAUSAL_LM", "use_dora": True, "use_rslora": True,
    }
    with open(os.path.join(out, "adapter_config.json"), "w") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)

    ids = torch.tensor([[1, 5, 9, 31, 4, 4, 17], [1, 22, 3, 8, 8, 0, 0]])
    targets = torch.tensor([[5, 9, 31, 4, 4, 17, 2], [22, 3, 8, 8, 2, -100, -100]])
    ad = {mod: tuple(t.double().requires_grad_(True) for t in ts) for mod, ts in adapter32.items()}
    logits = forward(W, ad, ids, c)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, c["vocab_size"]), targets.view(-1), ignore_index=-100)
    loss.backward()
    expected = [("logits", logits.detach(), "F64"), ("loss", loss.detach().reshape(1), "F64")]
    for mod, (A, Bm, m) in ad.items():
        expected += [("grad." + key(mod, "lora_A.weight"), A.grad, "F64"), ("grad." + key(mod, "lora_B.weight"), Bm.grad, "F64"),
                     ("grad." + key(mod, "lora_magnitude_vector"), m.grad, "F64")]
    meta = {"input_ids": json.dumps(ids.view(-1).tolist()), "targets": json.dumps(targets.view(-1).tolist()),
            "batch": "2", "seq_len": "7", "torch": torch.__version__}
    write_safetensors(os.path.join(out, "expected.safetensors"), expected, meta)
    print(f"wrote {out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "peft/testdata/peft_dora")
