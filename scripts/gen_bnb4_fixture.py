"""Generate model/testdata/bnb4: a tiny Llama checkpoint in bitsandbytes' 4-bit layout.

Usage (needs Debian's python3-torch; bitsandbytes is not needed, and the Go
tests only read the files it writes):

    /usr/bin/python3 scripts/gen_bnb4_fixture.py model/testdata/bnb4

bitsandbytes' quantize_4bit is reimplemented here in torch from the published
algorithm (bitsandbytes functional.py and its CPU/CUDA kernels; the QLoRA
paper), sharing nothing with mixtune's Go code:

- NF4 table: create_normal_map(offset=0.9677083): normal quantiles of
  linspace(offset, 0.5, 9)[:-1] and, negated, of linspace(offset, 0.5, 8)[:-1],
  plus 0, as float32, normalized by the largest.
- Blocks of 64 consecutive values (row-major); absmax per block; each value
  times the float32 reciprocal of its absmax, snapped to the nearest table
  value (ties to the lower code); two codes per byte, the first in the high
  nibble. Stored as uint8 of shape [(n+1)/2, 1].
- Double quantization: the absmax values minus their mean (nested_offset),
  in blocks of 256, each block scaled by its own absmax (nested_absmax) and
  snapped to the nearest value of create_dynamic_map(signed=True), stored as
  uint8 codes in weight.absmax, the map in weight.nested_quant_map.
- weight.quant_state.bitsandbytes__nf4: QuantState.as_dict(packed=True)'s
  JSON (quant_type, blocksize, dtype, shape, nested_blocksize, nested_dtype,
  nested_offset) as a uint8 tensor.

It also writes data.jsonl (input_ids rows) and expected.json: the mean
cross-entropy over every target token of those rows, computed in float64 from
the dequantized weights, each code × its block's absmax in float32 as
bitsandbytes' dequantize_4bit computes it (the absmax itself nested code ×
nested absmax + offset, in float32).
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_torch_llama_fixture import forward, specs  # noqa: E402  (the float64 Llama forward, weight names)

CONFIG = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
    vocab_size=259, hidden_size=64, intermediate_size=320, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    bos_token_id=256, eos_token_id=257, pad_token_id=258, attention_bias=False,
    mlp_bias=False, rope_scaling=None, torch_dtype="bfloat16",
    quantization_config=dict(
        quant_method="bitsandbytes", load_in_4bit=True, load_in_8bit=False,
        bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype="bfloat16", bnb_4bit_quant_storage="uint8",
        llm_int8_skip_modules=None, llm_int8_threshold=6.0,
    ),
)
BLOCK, NESTED = 64, 256
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def normal_map(offset=0.9677083):
    v1 = torch.special.ndtri(torch.linspace(offset, 0.5, 9)[:-1].double()).tolist()
    v3 = (-torch.special.ndtri(torch.linspace(offset, 0.5, 8)[:-1].double())).tolist()
    v = torch.tensor(v1 + [0.0] + v3, dtype=torch.float32).sort().values
    return v / v.max()


def dynamic_map():
    data = []
    for i in range(7):
        b = torch.linspace(0.1, 1, 2 ** i + 1)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0.0, 1.0]
    return torch.tensor(sorted(data), dtype=torch.float32)


def nearest(x, code):
    """index of the nearest code value to each x (float64 distances; argmin
    takes the first, the lower code, on a tie)."""
    return (x.double()[:, None] - code.double()[None, :]).abs().argmin(dim=1)


def quantize(w, code, dyn):
    flat = w.reshape(-1).float()
    n = flat.numel()
    nb = (n + BLOCK - 1) // BLOCK
    padded = torch.zeros(nb * BLOCK)
    padded[:n] = flat
    blocks = padded.view(nb, BLOCK)
    absmax = blocks.abs().max(dim=1).values
    inv = torch.where(absmax > 0, 1.0 / absmax, torch.zeros_like(absmax))  # float32 reciprocal
    codes = nearest((blocks * inv[:, None]).reshape(-1), code)[:n]
    if n % 2:
        codes = torch.cat([codes, torch.zeros(1, dtype=codes.dtype)])
    packed = (codes[0::2] << 4 | codes[1::2]).to(torch.uint8)
    offset = absmax.mean()
    centred = absmax - offset
    nnb = (nb + NESTED - 1) // NESTED
    nested_absmax = torch.stack([centred[j * NESTED:(j + 1) * NESTED].abs().max() for j in range(nnb)])
    scale = torch.repeat_interleave(1.0 / nested_absmax, NESTED)[:nb]
    qabs = nearest(centred * scale, dyn).to(torch.uint8)
    return packed.view(-1, 1), qabs, nested_absmax, offset


def dequantize(packed, qabs, nested_absmax, offset, code, dyn, shape):
    n = 1
    for s in shape:
        n *= s
    absmax = dyn[qabs.long()] * torch.repeat_interleave(nested_absmax, NESTED)[:qabs.numel()]
    absmax = absmax + offset  # float32, as bitsandbytes adds the offset after dequantize_blockwise
    p = packed.view(-1).long()
    codes = torch.stack([p >> 4, p & 15], dim=1).reshape(-1)[:n]
    vals = code[codes] * torch.repeat_interleave(absmax, BLOCK)[:n]
    return vals.view(shape)


def raw_bytes(t, dtype):
    t = t.contiguous()
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    if dtype == "U8":
        return t.to(torch.uint8).numpy().tobytes()
    return t.to(torch.float32).numpy().tobytes()


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t, dtype in sorted(tensors, key=lambda x: x[0]):
        b = raw_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(2605)
    code, dyn = normal_map(), dynamic_map()
    tensors, W = [], {}
    for name, shape in specs(CONFIG):
        if name.endswith("norm.weight"):
            t = (1 + 0.1 * torch.randn(shape)).to(torch.bfloat16).float()
            tensors.append((name, t, "BF16"))
            W[name] = t
            continue
        t = (0.05 * torch.randn(shape)).to(torch.bfloat16).float()  # a bf16 model's weights
        if not any(("." + m + ".") in name for m in PROJ):
            tensors.append((name, t, "BF16"))
            W[name] = t
            continue
        packed, qabs, nested_absmax, offset = quantize(t, code, dyn)
        state = {"quant_type": "nf4", "blocksize": BLOCK, "dtype": "bfloat16", "shape": list(shape),
                 "nested_blocksize": NESTED, "nested_dtype": "float32", "nested_offset": offset.item()}
        blob = torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)
        tensors += [(name, packed, "U8"), (name + ".absmax", qabs, "U8"), (name + ".quant_map", code, "F32"),
                    (name + ".nested_absmax", nested_absmax, "F32"), (name + ".nested_quant_map", dyn, "F32"),
                    (name + ".quant_state.bitsandbytes__nf4", blob, "U8")]
        W[name] = dequantize(packed, qabs, nested_absmax, offset, code, dyn, shape)
        err = (W[name] - t).abs()
        print(f"{name}: {t.numel()} values, {qabs.numel()} blocks, max |error| {err.max():.4g}, rms {err.pow(2).mean().sqrt():.4g}")
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)

    g = torch.Generator().manual_seed(7)
    rows = [[256] + torch.randint(0, 256, (n - 1,), generator=g).tolist() for n in (16, 11, 16, 5)]
    with open(os.path.join(out, "data.jsonl"), "w") as fh:
        for r in rows:
            fh.write(json.dumps({"input_ids": r}) + "\n")
    W64 = {n: t.double() for n, t in W.items()}
    total, count = 0.0, 0
    for r in rows:
        ids = torch.tensor([r])
        logits = forward(W64, ids, CONFIG, torch.float64)[0]
        total += torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="sum").item()
        count += len(r) - 1
    with open(os.path.join(out, "expected.json"), "w") as fh:
        json.dump({"loss": total / count, "tokens": count, "seq_len": 16, "torch": torch.__version__}, fh, indent=2)
    print(f"wrote {out}: loss {total / count:.9f} over {count} tokens")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "model/testdata/bnb4")
