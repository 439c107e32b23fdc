#!/usr/bin/env python3
"""Generate optim/testdata/torch_schedules.json: learning rates from torch's LambdaLR.

What it generates
  For each schedule case (kind, peak, min, warmup, total), the learning rate
  that every optimizer step of a `total`-step run uses, read from
  torch.optim.lr_scheduler.LambdaLR the way Hugging Face's Trainer drives it:
  the scheduler is stepped once after every optimizer.step(), so optimizer
  step k (1-based) runs at optimizer.param_groups[0]["lr"] as it stands
  before that step, which is base_lr * lr_lambda(k - 1).

  The lambdas are those of transformers' optimization.py (v4.4x):
    cosine   _get_cosine_schedule_with_warmup_lr_lambda with num_cycles 0.5
             and min_lr_rate = min_lr / base_lr (the lambda behind
             get_cosine_with_min_lr_schedule_with_warmup; with min_lr 0 it is
             get_cosine_schedule_with_warmup's lambda value for value)
    linear   _get_linear_schedule_with_warmup_lr_lambda; transformers has no
             floor for it, so mixtune's min_lr > 0 maps its factor f to
             f * (1 - min_lr_rate) + min_lr_rate, as the cosine-with-min
             lambda does (min_lr 0 leaves transformers' values unchanged)
    constant _get_constant_schedule_with_warmup_lr_lambda (min ignored)
  With transformers installed the script also checks its lambdas against
  transformers' own, value for value.

  The decay ends at lr_lambda(total): the lr after the last step. Steps
  1..total+1 are recorded.

  glibc's cos, which math.cos calls, is not correctly rounded for every
  argument. Each case therefore also runs LambdaLR with cos correctly
  rounded (a decimal Taylor series), which is what mixtune computes, and
  lists under exact_cos the steps [k, lr] where that run's lr differs
  from lr: the steps where glibc's cos is an ulp off.

  Values are Python floats (IEEE float64); JSON holds them as the shortest
  repr, which parses back to the same float64.

How to run
  /usr/bin/python3 scripts/gen_schedule_fixture.py   (Debian's python3-torch)
"""
import decimal
import json
import math
import os
import sys

import torch


def exact_cos(x):
    """cos(x) correctly rounded to float64: a 60-digit Taylor series in
    decimal arithmetic (x is at most pi here), rounded once."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        x2 = decimal.Decimal(x) ** 2  # Decimal(x) is the float's exact value
        total, term, k = decimal.Decimal(1), decimal.Decimal(1), 1
        while True:
            term = -term * x2 / ((2 * k - 1) * (2 * k))
            total += term
            if abs(term) < decimal.Decimal(10) ** -58:
                return float(total)  # correctly rounded conversion
            k += 1


COS = math.cos  # the libm cos Python calls; exact_cos for the second column


def lam_cosine(step, warmup, total, min_rate):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    factor = 0.5 * (1.0 + COS(math.pi * float(0.5) * 2.0 * progress))
    factor = factor * (1 - min_rate) + min_rate
    return max(0, factor)


def lam_linear(step, warmup, total, min_rate):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    factor = max(0.0, float(total - step) / float(max(1, total - warmup)))
    if min_rate == 0:
        return factor  # transformers' linear schedule, untouched
    return max(0, factor * (1 - min_rate) + min_rate)


def lam_constant(step, warmup, total, min_rate):
    if step < warmup:
        return float(step) / float(max(1.0, warmup))
    return 1.0


LAMBDAS = {"cosine": lam_cosine, "linear": lam_linear, "constant": lam_constant}

CASES = [
    # kind, peak, min, warmup, total
    ("cosine", 1e-3, 0.0, 10, 100),
    ("cosine", 1e-3, 1e-5, 10, 100),
    ("cosine", 3e-4, 0.0, 0, 50),
    ("cosine", 2e-4, 0.0, 0, 1),      # one step, no warmup: trains at the peak
    ("cosine", 2e-4, 1e-5, 1, 1),     # one step, all warmup: lr 0
    ("cosine", 1e-3, 1e-4, 7, 7),     # warmup == total
    ("cosine", 1e-3, 1e-3, 3, 12),    # min == peak
    ("cosine", 2e-3, 1e-4, 100, 3000),  # configs/pretrain_tiny.yaml
    ("cosine", 3e-3, 0.0, 20, 800),   # configs/quickstart.yaml
    ("cosine", 5e-5, 0.0, 37, 2003),
    ("linear", 2e-4, 0.0, 5, 40),
    ("linear", 2e-4, 2e-5, 5, 40),
    ("linear", 1e-3, 0.0, 0, 1),
    ("linear", 1e-3, 0.0, 0, 3),
    ("linear", 1e-3, 1e-4, 4, 4),
    ("linear", 7e-4, 0.0, 13, 997),
    ("constant", 5e-4, 0.0, 3, 20),
    ("constant", 5e-4, 1e-5, 0, 5),
    ("constant", 5e-4, 0.0, 2, 2),
]


def run(kind, peak, lo, warmup, total):
    min_rate = lo / peak
    lam = LAMBDAS[kind]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: lam(e, warmup, total, min_rate))
    lrs = []
    for step in range(1, total + 2):
        lr = opt.param_groups[0]["lr"]
        lrs.append(lr)
        if lr != peak * lam(step - 1, warmup, total, min_rate):
            raise AssertionError((kind, step, lr))
        opt.step()
        sched.step()
    return lrs


def check_transformers():
    try:
        from transformers import optimization as o
    except ImportError:
        print("transformers not installed: lambdas not cross-checked", file=sys.stderr)
        return
    for kind, peak, lo, warmup, total in CASES:
        for c in range(total + 2):
            mine = LAMBDAS[kind](c, warmup, total, lo / peak)
            if kind == "cosine":
                ref = o._get_cosine_schedule_with_warmup_lr_lambda(
                    c, num_warmup_steps=warmup, num_training_steps=total, num_cycles=0.5, min_lr_rate=lo / peak)
            elif kind == "linear" and lo == 0:
                ref = o._get_linear_schedule_with_warmup_lr_lambda(c, num_warmup_steps=warmup, num_training_steps=total)
            elif kind == "constant":
                ref = o._get_constant_schedule_with_warmup_lr_lambda(c, num_warmup_steps=warmup)
            else:
                continue
            assert mine == ref, (kind, c, mine, ref)
    print("lambdas agree with transformers", o.__name__, file=sys.stderr)


def main():
    check_transformers()
    global COS
    out = []
    for kind, peak, lo, warmup, total in CASES:
        COS = math.cos
        lr = run(kind, peak, lo, warmup, total)
        COS = exact_cos
        lr_exact = run(kind, peak, lo, warmup, total)
        out.append({"kind": kind, "peak": peak, "min": lo, "warmup": warmup, "total": total,
                    "lr": lr, "exact_cos": [[k + 1, b] for k, (a, b) in enumerate(zip(lr, lr_exact)) if a != b]})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "optim", "testdata", "torch_schedules.json")
    with open(path, "w") as f:
        json.dump({"generator": "scripts/gen_schedule_fixture.py", "torch_version": torch.__version__,
                   "cases": out}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
