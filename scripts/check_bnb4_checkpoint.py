"""Read a 4-bit checkpoint mixtune wrote (`mixtune merge --requantize nf4`) as
transformers + bitsandbytes would, and compare it with a float reference.

Usage (needs Debian's python3-torch; transformers and bitsandbytes are not
needed, and not in Debian):

    /usr/bin/python3 scripts/check_bnb4_checkpoint.py NF4_DIR REF_DIR

For each quantized weight it does what transformers' Bnb4BitHfQuantizer
hands to bitsandbytes' Params4bit.from_prequantized: the tensors named
weight.* beside the codes, QuantState.from_dict's parsing (the packed
quant_state.bitsandbytes__<type> tensor is JSON; keys are cut to their last
dotted part; nested_absmax/nested_quant_map/nested_offset make the nested
state), then dequantize_4bit, reimplemented in torch from the published
algorithm (gen_bnb4_fixture.py's dequantize, generalised to any shape,
block size and both types). It checks config.json's quantization_config as
BitsAndBytesConfig reads it, the codes' storage (uint8 of shape
[(n+1)/2, 1]), and prints each weight's largest difference from REF_DIR's
tensor of the same name (fp32: `mixtune merge` without --requantize, or the
dequantized model), and the RMSE over the weights' RMS.
"""
import json
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "U8": torch.uint8, "F64": torch.float64}


def read_safetensors(dirname):
    files = []
    idx = os.path.join(dirname, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as fh:
            files = sorted(set(json.load(fh)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        with open(os.path.join(dirname, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
            data = fh.read()
        for name, e in header.items():
            if name == "__metadata__":
                continue
            lo, hi = e["data_offsets"]
            buf = bytearray(data[lo:hi])
            dt = DTYPES[e["dtype"]]
            t = torch.frombuffer(buf, dtype=dt) if hi > lo else torch.empty(0, dtype=dt)
            out[name] = t.reshape(e["shape"])
    return out


def from_dict(qs):
    """bitsandbytes QuantState.from_dict, the parts it reads."""
    keys = [k for k, v in qs.items() if "quant_state" in k and isinstance(v, torch.Tensor)]
    assert len(keys) == 1, keys
    qs = dict(qs)
    qs.update(json.loads(bytes(qs.pop(keys[0]).numpy().tolist()).decode("utf-8")))
    qs = {k.split(".")[-1]: v for k, v in qs.items()}
    st = dict(quant_type=qs["quant_type"], absmax=qs["absmax"], blocksize=qs["blocksize"], code=qs["quant_map"],
              dtype=getattr(torch, qs["dtype"]), shape=torch.Size(qs["shape"]))
    if "nested_absmax" in qs:
        st["offset"] = torch.tensor(float(qs["nested_offset"]))
        st["state2"] = dict(absmax=qs["nested_absmax"], blocksize=qs["nested_blocksize"], code=qs["nested_quant_map"],
                            dtype=getattr(torch, qs["nested_dtype"]))
    return st


def dequantize(packed, st):
    """bitsandbytes dequantize_4bit: codes × block absmax, in float32."""
    absmax = st["absmax"]
    if "state2" in st:
        s2 = st["state2"]
        nb = absmax.numel()
        scale = torch.repeat_interleave(s2["absmax"], s2["blocksize"])[:nb]
        absmax = s2["code"][absmax.long()] * scale  # float32 product (dequantize_blockwise)
        absmax = absmax + st["offset"]
    n = 1
    for d in st["shape"]:
        n *= d
    p = packed.reshape(-1).long()
    codes = torch.stack([p >> 4, p & 15], dim=1).reshape(-1)[:n]
    vals = st["code"][codes] * torch.repeat_interleave(absmax.float(), st["blocksize"])[:n]
    return vals.reshape(st["shape"])


def main(qdir, refdir):
    with open(os.path.join(qdir, "config.json")) as fh:
        qc = json.load(fh)["quantization_config"]
    assert qc["quant_method"] == "bitsandbytes" and qc["load_in_4bit"] and not qc["load_in_8bit"], qc
    print(f"quantization_config: {qc['bnb_4bit_quant_type']}, double quant {qc['bnb_4bit_use_double_quant']}, compute {qc['bnb_4bit_compute_dtype']}")
    q, ref = read_safetensors(qdir), read_safetensors(refdir)
    states = sorted(k[: k.index(".quant_state.")] for k in q if ".quant_state.bitsandbytes__" in k)
    se = ss = 0.0
    worst = 0.0
    for w in states:
        packed = q[w]
        assert packed.dtype == torch.uint8 and packed.dim() == 2 and packed.shape[1] == 1, (w, packed.shape)
        st = from_dict({k: v for k, v in q.items() if k.startswith(w + ".")})
        assert st["quant_type"] == qc["bnb_4bit_quant_type"], st["quant_type"]
        vals = dequantize(packed, st).double()
        r = ref[w].double()
        d = (vals - r).abs()
        se += d.pow(2).sum().item()
        ss += r.pow(2).sum().item()
        worst = max(worst, d.max().item())
        print(f"{w}: {tuple(st['shape'])} {st['quant_type']} blocks of {st['blocksize']}, nested {'state2' in st}: max |diff| {d.max().item():.4g}")
    others = [k for k in ref if k not in states]
    for k in others:
        assert k in q, k
        d = (q[k].double() - ref[k].double()).abs().max().item()
        worst_other = d
        print(f"{k}: stored {q[k].dtype}, max |diff| {worst_other:.4g}")
    print(f"{len(states)} 4-bit weights: max |diff| {worst:.4g}, RMSE over the RMS {((se / ss) ** 0.5) if ss else 0:.4g}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
