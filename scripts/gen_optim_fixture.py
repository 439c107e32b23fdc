#!/usr/bin/env python3
"""Generate optim/testdata/torch_optim.json, the PyTorch reference for package optim.

What it generates
  A small, deterministic JSON fixture (well under 200 KB) that the Go tests in
  optim/ compare against, so that those tests never need Python:

  * params      -- a few small fp32 tensors (name, shape, initial values). Their
                   sizes are picked to hit both the AVX2 vector body (multiples of
                   16 elements) and the scalar tail of PyTorch's CPU kernels.
  * grads       -- fixed random gradients for every step and param.
  * cases       -- torch.optim.AdamW / torch.optim.SGD runs (single-tensor path:
                   foreach=False, amsgrad=False, maximize=False). For each case:
                   the optimizer config, the lr used at every step, and every
                   param and optimizer state tensor (keyed "<name>.<slot>" as
                   in package optim) after every step.
  * clip        -- torch.nn.utils.clip_grad_norm_ cases: input grads, max_norm,
                   the norm torch returns (fp32) and the clipped grads.
  * bias_correction -- 1 - beta**t as Python (C libm pow) computes it.

  Every float32 is written as the repr of its exact float64 value, so parsing
  the JSON number into a float64 and converting to float32 is exact. Non-finite
  values are never written (JSON cannot hold them).

How to run
  From the repository root, with PyTorch installed (the checked-in fixture was
  made with PyTorch 1.13 on an x86-64 CPU with AVX2):

      python3 scripts/gen_optim_fixture.py

  It overwrites optim/testdata/torch_optim.json. Output is deterministic for a
  given PyTorch build and CPU; fp32 results can differ in the last bit on a CPU
  with a different vector width, which is why the Go tests use a small ulp
  tolerance rather than bit equality.
"""

import json
import math
import os
import sys

import torch

SEED = 1234
STEPS = 5

# name, shape, gradient scale. 32 elements = two full AVX2 iterations of 16,
# 37 = 32 vector + 5 scalar-tail elements, 15 = all scalar tail, 1 = degenerate.
PARAM_SPECS = [
    ("layers.0.q.lora_A", [4, 8], 1.0),
    ("layers.0.q.lora_B", [37], 1e-3),
    ("head.bias", [3, 5], 30.0),
    ("scale", [1], 0.5),
]


def f32list(t):
    """Exact float64 reprs of a float32 tensor's values, flattened."""
    out = []
    for x in t.detach().reshape(-1).tolist():
        if not math.isfinite(x):
            raise ValueError("non-finite value cannot go into JSON")
        out.append(float(x))
    return out


def make_inputs():
    g = torch.Generator().manual_seed(SEED)
    params = []
    for name, shape, _ in PARAM_SPECS:
        params.append(torch.randn(shape, generator=g, dtype=torch.float32))
    grads = []
    for _ in range(STEPS):
        step = []
        for (_, shape, scale) in PARAM_SPECS:
            step.append(torch.randn(shape, generator=g, dtype=torch.float32) * scale)
        grads.append(step)
    return params, grads


def varying_lrs(peak, lo, warmup, total):
    """A warmup-then-cosine list of learning rates for one optimizer case,
    one per step. Only its values matter here (the Go test reads them from
    the fixture); schedules themselves are tested against LambdaLR by
    scripts/gen_schedule_fixture.py."""
    out = []
    for s in range(1, total + 1):
        if s <= warmup:
            out.append(peak * s / warmup)
            continue
        p = min(max((s - warmup) / (total - warmup), 0.0), 1.0)
        out.append(lo + (peak - lo) * 0.5 * (1.0 + math.cos(math.pi * p)))
    return out


def run_case(case, init, grads):
    params = [torch.nn.Parameter(p.clone()) for p in init]
    c = case["config"]
    lr0 = case["lr"][0]
    if case["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=lr0, betas=(c["beta1"], c["beta2"]),
                                eps=c["eps"], weight_decay=c["weight_decay"],
                                amsgrad=False, maximize=False, foreach=False)
    elif case["optimizer"] == "sgd":
        opt = torch.optim.SGD(params, lr=lr0, momentum=c["momentum"],
                              weight_decay=c["weight_decay"], nesterov=c["nesterov"],
                              dampening=0, maximize=False, foreach=False)
    else:
        raise ValueError(case["optimizer"])
    after, state = [], []
    slots = {"adamw": ["exp_avg", "exp_avg_sq"], "sgd": ["momentum_buffer"]}[case["optimizer"]]
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = case["lr"][step]
        for p, gr in zip(params, grads[step]):
            p.grad = gr.clone()
        opt.step()
        after.append([f32list(p) for p in params])
        st = {}
        for name_spec, p in zip(PARAM_SPECS, params):
            for slot in slots:
                if opt.state[p].get(slot) is not None:
                    st[name_spec[0] + "." + slot] = f32list(opt.state[p][slot])
        state.append(st)
    return after, state


def clip_cases(g):
    cases = []
    shapes = [[6, 7], [33], [1]]
    for max_norm, scale in [(1.0, 1.0), (100.0, 1.0), (0.5, 1e-3), (2.5, 40.0)]:
        grads = [torch.randn(s, generator=g, dtype=torch.float32) * scale for s in shapes]
        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        # The exact (float64) norm, for judging how close torch's fp32 norm is.
        exact = math.sqrt(math.fsum(float(x) ** 2 for gr in grads for x in gr.reshape(-1).tolist()))
        cases.append({
            "max_norm": max_norm,
            "grads": [f32list(x) for x in grads],
            "norm": float(norm.item()),
            "norm_float64": exact,
            "clipped": [f32list(p.grad) for p in params],
        })
    return cases


def main():
    torch.manual_seed(SEED)
    init, grads = make_inputs()
    warm_cos = varying_lrs(1e-3, 1e-4, 2, STEPS)
    cases = [
        {"name": "adamw_wd0.01", "optimizer": "adamw",
         "config": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
         "lr": [1e-3] * STEPS},
        {"name": "adamw_wd0.1_eps1e-6_sched", "optimizer": "adamw",
         "config": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.1},
         "lr": warm_cos},
        {"name": "sgd_plain", "optimizer": "sgd",
         "config": {"momentum": 0.0, "weight_decay": 0.0, "nesterov": False},
         "lr": [0.05] * STEPS},
        {"name": "sgd_momentum0.9", "optimizer": "sgd",
         "config": {"momentum": 0.9, "weight_decay": 0.0, "nesterov": False},
         "lr": [0.05] * STEPS},
        {"name": "sgd_momentum0.9_wd0.01", "optimizer": "sgd",
         "config": {"momentum": 0.9, "weight_decay": 0.01, "nesterov": False},
         "lr": [0.05] * STEPS},
        {"name": "sgd_nesterov_wd0.01", "optimizer": "sgd",
         "config": {"momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
         "lr": [0.05] * STEPS},
    ]
    for case in cases:
        case["after"], case["state"] = run_case(case, init, grads)

    g = torch.Generator().manual_seed(SEED + 1)
    fixture = {
        "generator": "scripts/gen_optim_fixture.py",
        "torch_version": torch.__version__,
        "seed": SEED,
        "params": [{"name": n, "shape": s, "init": f32list(p)}
                   for (n, s, _), p in zip(PARAM_SPECS, init)],
        "grads": [[f32list(x) for x in step] for step in grads],
        "cases": cases,
        "clip": clip_cases(g),
        "bias_correction": [
            {"beta": beta, "step": t, "value": 1 - beta ** float(t)}
            for beta in (0.9, 0.95, 0.999)
            for t in (1, 2, 3, 7, 10, 100, 1000, 12345, 100000)
        ],
    }
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "optim", "testdata", "torch_optim.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
