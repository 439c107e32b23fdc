"""Generate pref/testdata/lora_pairs: a LoRA adapter for
model/testdata/torch_llama and, for a fixed batch of two preference
pairs, every preference objective's loss and its gradients with respect
to each LoRA A and B, computed in float64 with TRL's formulas.

Usage (needs Debian's python3-torch; the Go tests only read the files it writes):

    /usr/bin/python3 scripts/gen_pref_fixture.py pref/testdata/lora_pairs

The adapter is LoraConfig(r=2, lora_alpha=3, use_rslora=True,
target_modules=["q_proj", "v_proj", "down_proj"]) with B != 0, as after
training, so the policy differs from the reference (the base model, the
adapter switched off). The model's forward is gen_peft_dora_fixture.py's,
with each magnitude set to the norm of the adapted weight row it divides,
so that DoRA's factor g = m / ||W + s·BA|| is exactly 1 and the layer is
plain LoRA, W x + s·B(A x) (the norm is detached, so A and B get LoRA's
gradients).

The formulas are those of TRL's trainers (written here from the published
code, TRL is not installed):

  logps: Σ over completion tokens of log_softmax(logits)[label]
         (labels of prompt tokens are -100), averaged over the
         completion's tokens for ipo, orpo and simpo
  DPOTrainer.dpo_loss, h = (πc − πr) − (refc − refr):
    sigmoid: −logσ(βh)(1−ε) − logσ(−βh)ε
    robust:  (−logσ(βh)(1−ε) + logσ(−βh)ε) / (1−2ε)
    ipo:     (h − 1/(2β))²
  ORPOTrainer: nll(chosen, token mean) − mean(β·logσ(log_odds)),
    log_odds = (c − r) − (log1p(−exp c) − log1p(−exp r))
  CPOTrainer loss_type simpo, cpo_alpha 0: −logσ(β(c − r) − γ)
  each a mean over pairs.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_peft_dora_fixture as dora  # noqa: E402
from gen_torch_llama_fixture import write_safetensors  # noqa: E402

# (name, loss, beta, label_smoothing, gamma)
OBJECTIVES = [
    ("sigmoid", "sigmoid", 0.1, 0.0, 0.0),
    ("cdpo", "sigmoid", 0.1, 0.2, 0.0),
    ("robust", "robust", 0.1, 0.2, 0.0),
    ("ipo", "ipo", 0.1, 0.0, 0.0),
    ("orpo", "orpo", 0.1, 0.0, 0.0),
    ("simpo", "simpo", 2.0, 0.0, 0.5),
]

# prompt, chosen, rejected token ids (bos 1, eos 2)
PAIRS = [
    ([1, 5, 9, 3], [31, 4, 2], [7, 2]),
    ([1, 22], [3, 8, 8, 2], [3, 8, 17, 11, 2]),
]


def batch():
    """Rows chosen..., rejected... (TRL's concatenation); ids are each
    sequence but its last token, targets the next token, -100 on the
    prompt and the padding."""
    seqs = [(p, c) for p, c, _ in PAIRS] + [(p, r) for p, _, r in PAIRS]
    T = max(len(p) + len(c) for p, c in seqs) - 1
    ids, targets = [], []
    for p, c in seqs:
        full = p + c
        row_ids = full[:-1] + [0] * (T - len(full) + 1)
        row_t = [-100] * (len(p) - 1) + c + [-100] * (T - len(full) + 1)
        ids.append(row_ids)
        targets.append(row_t)
    return torch.tensor(ids), torch.tensor(targets), T


def logps(logits, targets):
    mask = targets != -100
    lp = logits.log_softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (lp * mask).sum(-1), mask.sum(-1)


def objective(loss_type, beta, eps, gamma, pol, ref, n, logits, targets):
    P = len(PAIRS)
    avg = loss_type in ("ipo", "orpo", "simpo")
    if avg:
        pol, ref = pol / n, ref / n
    c, r, rc, rr = pol[:P], pol[P:], ref[:P], ref[P:]
    if loss_type in ("sigmoid", "robust", "ipo"):
        h = (c - r) - (rc - rr)
        if loss_type == "sigmoid":
            losses = -F.logsigmoid(beta * h) * (1 - eps) - F.logsigmoid(-beta * h) * eps
        elif loss_type == "robust":
            losses = (-F.logsigmoid(beta * h) * (1 - eps) + F.logsigmoid(-beta * h) * eps) / (1 - 2 * eps)
        else:
            losses = (h - 1 / (2 * beta)) ** 2
        return losses.mean()
    if loss_type == "simpo":
        logit = (c - r) - gamma / beta
        return (-F.logsigmoid(beta * logit)).mean()
    log_odds = (c - r) - (torch.log1p(-torch.exp(c)) - torch.log1p(-torch.exp(r)))
    ratio = beta * F.logsigmoid(log_odds)
    V = logits.shape[-1]
    nll = F.cross_entropy(logits[:P].reshape(-1, V), targets[:P].reshape(-1), ignore_index=-100)
    return nll - ratio.mean()


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(2727)
    c, W32 = dora.load_base()
    W = {n: t.double() for n, t in W32.items()}
    modules = [f"model.layers.{i}.{'mlp' if t == 'down_proj' else 'self_attn'}.{t}"
               for i in range(c["num_hidden_layers"]) for t in dora.TARGETS]
    adapter32 = {}
    for mod in modules:
        out_f, in_f = W32[mod + ".weight"].shape
        A = torch.empty(dora.R, in_f).uniform_(-1 / in_f ** 0.5, 1 / in_f ** 0.5)
        Bm = 0.3 * torch.randn(out_f, dora.R)
        adapter32[mod] = (A.float(), Bm.float())
    key = lambda mod, s: f"base_model.model.{mod}.{s}"
    tensors = []
    for mod, (A, Bm) in adapter32.items():
        tensors += [(key(mod, "lora_A.weight"), A, "F32"), (key(mod, "lora_B.weight"), Bm, "F32")]
    write_safetensors(os.path.join(out, "adapter_model.safetensors"), tensors, {"format": "pt"})
    config = {"base_model_name_or_path": "torch_llama", "bias": "none", "init_lora_weights": True,
              "lora_alpha": dora.ALPHA, "lora_dropout": 0.0, "peft_type": "LORA", "r": dora.R,
              "target_modules": dora.TARGETS, "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": True}
    with open(os.path.join(out, "adapter_config.json"), "w") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)

    ids, targets, T = batch()
    with torch.no_grad():
        ref, _ = logps(dora.forward(W, {}, ids, c), targets)
    expected = [("reference_logps", ref, "F64")]
    summary = {}
    for name, loss_type, beta, eps, gamma in OBJECTIVES:
        ad = {}
        for mod, (A, Bm) in adapter32.items():
            A64, B64 = A.double().requires_grad_(True), Bm.double().requires_grad_(True)
            m = torch.linalg.norm(W[mod + ".weight"] + dora.SCALING * (B64 @ A64), dim=1).detach()
            ad[mod] = (A64, B64, m)
        logits = dora.forward(W, ad, ids, c)
        pol, n = logps(logits, targets)
        loss = objective(loss_type, beta, eps, gamma, pol, ref, n, logits, targets)
        loss.backward()
        expected += [(f"{name}.loss", loss.detach().reshape(1), "F64"), (f"{name}.logps", pol.detach(), "F64")]
        for mod, (A64, B64, _) in ad.items():
            expected += [(f"{name}.grad.{key(mod, 'lora_A.weight')}", A64.grad, "F64"),
                         (f"{name}.grad.{key(mod, 'lora_B.weight')}", B64.grad, "F64")]
        summary[name] = loss.item()
    meta = {"input_ids": json.dumps(ids.view(-1).tolist()), "targets": json.dumps(targets.view(-1).tolist()),
            "batch": str(ids.shape[0]), "seq_len": str(T), "torch": torch.__version__,
            "objectives": json.dumps([{"name": o[0], "loss": o[1], "beta": o[2], "label_smoothing": o[3], "gamma": o[4]}
                                      for o in OBJECTIVES])}
    write_safetensors(os.path.join(out, "expected.safetensors"), expected, meta)
    print(f"wrote {out}: " + ", ".join(f"{k} {v:.6f}" for k, v in summary.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "pref/testdata/lora_pairs")
