#!/usr/bin/env python3
"""Generate amp/testdata/torch_round.json: PyTorch's float32 -> bf16 and fp16 conversions.

What it generates
  About 5900 float32 inputs chosen at the edges of both formats, and the 16
  bits torch.Tensor.to(torch.bfloat16) and .to(torch.float16) give for each:
    * for every float32 exponent (both signs): mantissas on the round-to-
      nearest-even ties of bf16 (16 dropped bits) and fp16 (13 dropped bits,
      more in fp16's subnormal range), with an even and an odd kept part,
      one ulp past each towards the other neighbour, the smallest and the
      largest mantissa
    * the overflow region (fp16 65504..65520..65536, bf16's largest values)
    * subnormals of both formats and of float32, +-0, +-Inf, NaNs with
      various payloads (the Go test compares NaN results as NaN, not by bits)
    * random bit patterns
  Each entry is [float32 bits, bf16 bits, fp16 bits] as integers.

How to run
  /usr/bin/python3 scripts/gen_amp_fixture.py   (Debian's python3-torch; CPU)
"""
import json
import os
import random
import sys

import torch


def inputs():
    out = []
    for sign in (0, 1 << 31):
        for ef in range(256):
            base = sign | ef << 23
            drops = [13, 16]  # fp16's and bf16's dropped bits for a normal result
            e = ef - 127
            if -25 <= e < -14:  # fp16 subnormal range: the quantum stays 2^-24
                drops.append(min(13 + (-14 - e), 23))
            for drop in drops:
                half = 1 << (drop - 1)
                # a tie with an even kept part (rounds down) and one above it;
                # a tie with an odd kept part (rounds up) and one below it
                even, odd = half, (1 << drop) | half
                out += [base | even, base | (even + 1), base | odd, base | (odd - 1)]
            out += [base | 0x7FFFFF, base | 1]
    def f32(x):
        return int(torch.tensor([x], dtype=torch.float32).view(torch.int32).item()) & 0xFFFFFFFF
    for x in (65504.0, 65519.0, 65519.996, 65520.0, 65520.004, 65535.0, 65536.0, 3.3895314e38, 3.3961775e38,
              2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -126, 2.0 ** -133, 2.0 ** -134, 2.0 ** -149):
        b = f32(x)
        for d in range(-3, 4):
            out += [(b + d) & 0x7FFFFFFF, ((b + d) & 0x7FFFFFFF) | 1 << 31]
    out += [0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
            0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x7FC0FFFF, 0x7FFFFFFF, 0xFF800001, 0x7F80FFFF]
    rng = random.Random(20240613)
    out += [rng.getrandbits(32) for _ in range(500)]
    seen, uniq = set(), []
    for u in out:
        if u not in seen:
            seen.add(u)
            uniq.append(u)
    return uniq


def main():
    bits = inputs()
    x = torch.tensor([u - (1 << 32) if u >= 1 << 31 else u for u in bits], dtype=torch.int32).view(torch.float32)
    bf = x.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    hf = x.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
    rows = [[u, int(b), int(h)] for u, b, h in zip(bits, bf.tolist(), hf.tolist())]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "amp", "testdata", "torch_round.json")
    with open(path, "w") as f:
        json.dump({"generator": "scripts/gen_amp_fixture.py", "torch_version": torch.__version__,
                   "rows": rows}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(rows)} inputs ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
