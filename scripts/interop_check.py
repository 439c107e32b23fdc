"""Interop of mixtune's adapters and merged checkpoints with Hugging Face
transformers and PEFT (issue 29, item 3): writes the goldens that
cmd/mixtune/interop_golden_test.go checks in CPU CI.

Usage, from the repository root, on a host with torch, transformers and PEFT
(scripts/gpu_check.sh runs it as its "interop" part):

    python3 scripts/interop_check.py --mixtune PATH/TO/mixtune \
        --out cmd/mixtune/testdata/interop/golden

It proves, on models/tiny-byte and the fixed token ids below:
  (a) PEFT loads mixtune's adapters (gguf/testdata/quickstart_adapter, a LoRA
      trained by configs/quickstart.yaml, and cmd/mixtune/testdata/interop/
      mixtune_dora, a DoRA trained by mixtune) onto the transformers model:
      their logits go into logits.safetensors as peft.mixtune_lora and
      peft.mixtune_dora;
  (b) transformers loads what `mixtune merge --dtype fp32` writes for each:
      merged.mixtune_lora and merged.mixtune_dora, which must match (a)'s
      within the bound below; PEFT's own merge_and_unload weights must match
      mixtune's merged weights to fp32 rounding;
  (c) PEFT saves new adapters (peft_lora/, peft_dora/: LoraConfig r=8,
      lora_alpha=16 on all seven projections, init_lora_weights=False so B is
      not zero, seed fixed; the DoRA magnitudes moved off their initial
      norms) with their PEFT logits (peft.peft_lora, peft.peft_dora); with
      --mixtune, mixtune evaluates each adapter to the loss of its golden
      logits and trains 3 steps from the PEFT-saved ones.
The base model's own logits are "base". manifest.json holds the versions,
the token ids, the merged checkpoints' sha256 and every measured figure.

The reference runs on the CPU in float64 (the bf16 and fp32 stored values
convert exactly). transformers still rounds to fp32 inside: RMSNorm, the
softmax of eager attention and RoPE's angles and cos/sin run in fp32 whatever
the model's dtype, so its logits carry fp32 rounding. The bound used here
and in the Go test is the worst-case rounding of the inner products on the
longest path from the input to a logit, relative to the largest |logit|:

    |Δlogit| <= k·u·max|logit|,  u = 2^-24,
    k = layers·(3·hidden + head_dim + seq + intermediate + 4·r) + hidden

--standin replaces transformers and PEFT with a hand-written float64 Llama
and PEFT forward (for testing this script and the Go test where those
packages are missing, e.g. with Debian's python3-torch). Its manifest says
"reference": "standin", and the Go test refuses such goldens in the
repository: they must come from transformers and PEFT.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402

BASE = "models/tiny-byte"
MIXTUNE_ADAPTERS = {  # name -> committed adapter trained by mixtune
    "mixtune_lora": "gguf/testdata/quickstart_adapter",
    "mixtune_dora": "cmd/mixtune/testdata/interop/mixtune_dora",
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PEFT_R, PEFT_ALPHA, SEED = 8, 16, 29
BOS = 256
# three rows of BOS + 19 bytes: every row is a full sequence, so no padding
TEXTS = ["Date: 2021-03-07 is ", "The quick brown fox ", "mixtune <-> PEFT ok "]
SEQ = 20
U32 = 2.0 ** -24


def token_ids():
    rows = [[BOS] + list(t.encode()[:SEQ - 1]) for t in TEXTS]
    assert all(len(r) == SEQ for r in rows), rows
    return rows


# --- safetensors without the safetensors package -----------------------------

def read_safetensors(path):
    with open(path, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None) or {}
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        b = bytearray(data[lo:hi])
        dt = info["dtype"]
        if dt == "F32":
            t = torch.frombuffer(b, dtype=torch.float32)
        elif dt == "F64":
            t = torch.frombuffer(b, dtype=torch.float64)
        elif dt == "F16":
            t = torch.frombuffer(b, dtype=torch.float16)
        elif dt == "BF16":
            t = torch.frombuffer(b, dtype=torch.int16).view(torch.bfloat16)
        else:
            raise ValueError(f"{path}: {name}: dtype {dt}")
        out[name] = t.reshape(info["shape"]).double()
    return out, meta


def write_f32_safetensors(path, tensors, metadata):
    """tensors: name -> tensor, stored as little-endian F32 (rounded once)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().double().contiguous()
        vals = t.reshape(-1).tolist()
        b = struct.pack(f"<{len(vals)}f", *vals)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- the bound ---------------------------------------------------------------

def path_length(cfg, r):
    """k: the inner-product lengths on the longest path to a logit."""
    d, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    return L * (3 * d + hd + SEQ + cfg["intermediate_size"] + 4 * r) + d


def max_abs(t):
    return float(t.abs().max())


def cross_entropy(logits, ids):
    """Mean loss over every token but each row's first (input_ids rows)."""
    lg = logits[:, :-1].double()
    tg = torch.tensor(ids)[:, 1:]
    return float(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tg.reshape(-1)))


# --- transformers and PEFT ---------------------------------------------------

class HF:
    reference = "transformers"

    def __init__(self):
        import peft
        import transformers
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
        self.problems = []  # what transformers reported while loading a checkpoint

    def load(self, path, dtype):
        from transformers import AutoModelForCausalLM
        kw = {"attn_implementation": "eager", "output_loading_info": True}
        try:  # transformers 5: dtype=; 4.x took torch_dtype= (and kept dtype= as a config attribute)
            m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw)
        except TypeError:
            m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, **kw)
        if isinstance(m, tuple):  # (model, loading info): every tensor of the checkpoint used, none missing
            m, info = m
            for what, v in (info or {}).items():
                if v and what in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
                    p = f"transformers loading {path}: {what} {sorted(map(str, v))[:4]}"
                    if p not in self.problems:
                        self.problems.append(p)
        m = m.to(dtype)  # in case the dtype argument was not taken
        m.eval()
        bad = {p.dtype for p in m.parameters()} - {dtype}
        if bad:
            raise RuntimeError(f"{path}: parameters in {bad}, want {dtype}")
        return m

    def logits(self, m, ids):
        x = torch.tensor(ids)
        with torch.no_grad():
            out = m(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
        lg = out.logits if hasattr(out, "logits") else out[0]
        return lg.detach().double()

    def base_logits(self, ids):
        return self.logits(self.load(BASE, torch.float64), ids)

    def merged_logits(self, merged_dir, ids):
        return self.logits(self.load(merged_dir, torch.float64), ids)

    def peft_model(self, adapter_dir):
        """PEFT's model with the adapter, and what differs between the
        adapter file and the weights PEFT holds (nothing, if it loaded)."""
        from peft import PeftModel
        from peft.utils import get_peft_model_state_dict
        base = self.load(BASE, torch.float64)
        pm = PeftModel.from_pretrained(base, adapter_dir, is_trainable=False)
        pm = pm.to(torch.float64)
        pm.eval()
        want, _ = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
        try:
            have = get_peft_model_state_dict(pm, save_embedding_layers=False)
        except TypeError:
            have = get_peft_model_state_dict(pm)

        def key(k):
            k = k[len("base_model.model."):] if k.startswith("base_model.model.") else k
            return k.replace("lora_magnitude_vector.weight", "lora_magnitude_vector")
        have = {key(k): v for k, v in have.items()}
        problems = []
        for k, v in want.items():
            h = have.get(key(k))
            if h is None:
                problems.append(f"PEFT did not load {k} (it holds e.g. {sorted(have)[:2]})")
            elif not torch.equal(h.detach().double().reshape(v.shape), v):
                problems.append(f"{k} differs from the file once loaded")
        if len(want) != len(have):
            problems.append(f"the file has {len(want)} tensors, PEFT's model {len(have)}")
        return pm, problems

    def peft_logits(self, adapter_dir, ids):
        pm, problems = self.peft_model(adapter_dir)
        return self.logits(pm, ids), pm, problems

    def peft_merged_weights(self, pm):
        m = pm.merge_and_unload()
        return {k: v.detach().double() for k, v in m.state_dict().items()}

    def save_new_adapter(self, out, dora):
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(SEED + int(dora))
        base = self.load(BASE, torch.float32)
        cfg = LoraConfig(r=PEFT_R, lora_alpha=PEFT_ALPHA, target_modules=list(TARGETS), lora_dropout=0.0,
                         bias="none", init_lora_weights=False, use_dora=dora, task_type="CAUSAL_LM")
        pm = get_peft_model(base, cfg)
        if dora:  # as after training: magnitudes off ‖W + s·B·A‖, so m/‖·‖ != 1
            with torch.no_grad():
                for n, p in pm.named_parameters():
                    if "lora_magnitude_vector" in n:
                        p.mul_(1 + 0.1 * torch.randn_like(p))
        try:
            pm.save_pretrained(out, safe_serialization=True, save_embedding_layers=False)
        except TypeError:
            pm.save_pretrained(out, safe_serialization=True)
        for f in os.listdir(out):  # the model card PEFT writes is no golden
            if f not in ("adapter_config.json", "adapter_model.safetensors"):
                p = os.path.join(out, f)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


# --- the stand-in: a hand-written float64 Llama with PEFT's layers ----------

class Standin:
    """transformers' modeling_llama and PEFT's LoRA/DoRA layers written out
    in float64, with transformers' fp32 steps (RMSNorm, softmax, RoPE)."""
    reference = "standin"

    def __init__(self):
        self.versions = {"torch": torch.__version__, "transformers": "standin", "peft": "standin"}
        self.problems = []

    def weights(self, path):
        W = {}
        for f in sorted(os.listdir(path)):
            if f.endswith(".safetensors"):
                W.update(read_safetensors(os.path.join(path, f))[0])
        with open(os.path.join(path, "config.json")) as fh:
            return W, json.load(fh)

    def forward(self, W, c, ids, adapter=None):
        d, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        hd = c.get("head_dim") or d // H
        x_ids = torch.tensor(ids)
        B, T = x_ids.shape
        eps = c["rms_norm_eps"]

        def rms(x, w):
            x32 = x.float()
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
            return w * x32.double()

        def rot(x):
            h = x.shape[-1] // 2
            return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

        def lin(mod, x):
            w = W[mod + ".weight"]
            res = x @ w.T
            if adapter is None or mod not in adapter["modules"]:
                return res
            A, Bm, mag = adapter["modules"][mod]
            s = adapter["scaling"]
            lora = (x @ A.T) @ Bm.T
            if mag is None:
                return res + lora * s
            norm = torch.linalg.norm(w + s * (Bm @ A), dim=1)
            g = (mag / norm).view(1, -1)
            return res + (g - 1) * res + g * lora * s

        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().double(), emb.sin().double()
        x = W["model.embed_tokens.weight"][x_ids]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms(x, W[p + "input_layernorm.weight"])
            q = lin(p + "self_attn.q_proj", h).view(B, T, H, hd).transpose(1, 2)
            k = lin(p + "self_attn.k_proj", h).view(B, T, KV, hd).transpose(1, 2)
            v = lin(p + "self_attn.v_proj", h).view(B, T, KV, hd).transpose(1, 2)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            rep = H // KV
            k = k[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
            v = v[:, :, None].expand(B, KV, rep, T, hd).reshape(B, H, T, hd)
            s = (q @ k.transpose(-1, -2)) * hd ** -0.5
            s = s.masked_fill(mask, float("-inf")).float().softmax(-1).double()
            x = x + lin(p + "self_attn.o_proj", (s @ v).transpose(1, 2).reshape(B, T, H * hd))
            h = rms(x, W[p + "post_attention_layernorm.weight"])
            x = x + lin(p + "mlp.down_proj", torch.nn.functional.silu(lin(p + "mlp.gate_proj", h)) * lin(p + "mlp.up_proj", h))
        return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T

    def read_adapter(self, adapter_dir):
        with open(os.path.join(adapter_dir, "adapter_config.json")) as fh:
            ac = json.load(fh)
        T, _ = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
        r, alpha = ac["r"], ac["lora_alpha"]
        scaling = alpha / math.sqrt(r) if ac.get("use_rslora") else alpha / r
        mods = {}
        for k in T:
            if k.endswith(".lora_A.weight"):
                mod = k[len("base_model.model."):-len(".lora_A.weight")]
                pre = k[:-len(".lora_A.weight")]
                mods[mod] = (T[k], T[pre + ".lora_B.weight"], T.get(pre + ".lora_magnitude_vector"))
        return {"modules": mods, "scaling": scaling}

    def base_logits(self, ids):
        W, c = self.weights(BASE)
        return self.forward(W, c, ids)

    def merged_logits(self, merged_dir, ids):
        W, c = self.weights(merged_dir)
        return self.forward(W, c, ids)

    def peft_logits(self, adapter_dir, ids):
        W, c = self.weights(BASE)
        ad = self.read_adapter(adapter_dir)
        return self.forward(W, c, ids, ad), (W, ad), []

    def peft_merged_weights(self, pm):
        W, ad = pm
        out = dict(W)
        s = ad["scaling"]
        for mod, (A, Bm, mag) in ad["modules"].items():
            w = W[mod + ".weight"] + s * (Bm @ A)
            if mag is not None:
                w = (mag / torch.linalg.norm(w, dim=1)).view(-1, 1) * w
            out[mod + ".weight"] = w
        return out

    def save_new_adapter(self, out, dora):
        g = torch.Generator().manual_seed(SEED + int(dora))
        W, c = self.weights(BASE)
        s = PEFT_ALPHA / PEFT_R
        tensors = {}
        for i in range(c["num_hidden_layers"]):
            for t in TARGETS:
                mod = f"model.layers.{i}.{'mlp' if t.endswith(('gate_proj', 'up_proj', 'down_proj')) else 'self_attn'}.{t}"
                w = W[mod + ".weight"]
                o, n = w.shape
                A = ((torch.rand(PEFT_R, n, generator=g) * 2 - 1) / math.sqrt(n)).float()
                Bm = ((torch.rand(o, PEFT_R, generator=g) * 2 - 1) / math.sqrt(PEFT_R)).float()
                key = "base_model.model." + mod
                tensors[key + ".lora_A.weight"], tensors[key + ".lora_B.weight"] = A, Bm
                if dora:
                    norm = torch.linalg.norm(w + s * (Bm.double() @ A.double()), dim=1)
                    tensors[key + ".lora_magnitude_vector"] = (norm * (1 + 0.1 * torch.randn(o, generator=g).double())).float()
        write_f32_safetensors(os.path.join(out, "adapter_model.safetensors"), tensors, {"format": "pt"})
        cfg = {"base_model_name_or_path": BASE, "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
               "init_lora_weights": False, "lora_alpha": PEFT_ALPHA, "lora_dropout": 0.0, "modules_to_save": None,
               "peft_type": "LORA", "r": PEFT_R, "target_modules": TARGETS, "task_type": "CAUSAL_LM",
               "use_dora": dora, "use_rslora": False}
        with open(os.path.join(out, "adapter_config.json"), "w") as fh:
            json.dump(cfg, fh, indent=2, sort_keys=True)


# --- mixtune, the carried binary ---------------------------------------------

def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def mixtune_eval(binary, adapter_dir, data):
    out = run([binary, "eval", "--model", BASE, "--adapter", adapter_dir, "--data", data, "--seq-len", str(SEQ),
               "--batch-size", "3", "--json"])
    return float(json.loads(out.strip().splitlines()[-1])["loss"])


def mixtune_train(binary, adapter_dir, data, work, name):
    recipe = os.path.join(work, name + ".yaml")
    with open(recipe, "w") as fh:
        fh.write(f"""name: {name}
seed: 1
output_dir: {work}/runs
model:
  path: {BASE}
data:
  train: {data}
  validation: {data}
  seq_len: {SEQ}
adapter:
  from: {adapter_dir}
train:
  steps: 3
  batch_size: 3
  eval_every: 0
  log_every: 1
optimizer:
  lr: 1.0e-3
schedule:
  warmup_steps: 1
compute:
  device: cpu
""")
    run([binary, "train", "-c", recipe])
    recs = []
    with open(os.path.join(work, "runs", name, "metrics.jsonl")) as fh:
        for line in fh:
            recs.append(json.loads(line))
    return [r["loss"] for r in recs if "loss" in r], [r["val_loss"] for r in recs if "val_loss" in r]


# --- the check ---------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the goldens (made anew)")
    ap.add_argument("--mixtune", help="the mixtune binary: merges, evaluates and trains (needed for (b) and (c))")
    ap.add_argument("--standin", action="store_true", help="hand-written float64 reference instead of transformers and PEFT")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(BASE, "config.json")):
        sys.exit(f"interop_check: run from the repository root ({BASE}/config.json not found)")
    if a.mixtune is None and not a.standin:
        sys.exit("interop_check: --mixtune is required (transformers must load `mixtune merge` output)")
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    t0 = time.time()
    ref = Standin() if a.standin else HF()
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    work = tempfile.mkdtemp(prefix="interop-")
    ids = token_ids()
    with open(os.path.join(BASE, "config.json")) as fh:
        cfg = json.load(fh)
    fails, lines, measured, merged_sha, logits = [], [], {}, {}, {}

    def check(label, got, bound):
        ok = got <= bound
        lines.append(f"{'ok  ' if ok else 'FAIL'} {label}: {got:.3g} (bound {bound:.3g})")
        if not ok:
            fails.append(label)
        return {"measured": got, "bound": bound}

    def stage(label, fn):
        """runs one part; a failure is reported and the others still run"""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 -- every failure is reported, none stops the rest
            traceback.print_exc()
            lines.append(f"FAIL {label}: {type(e).__name__}: {str(e)[-600:]}")
            fails.append(label)
            return None

    def rank(adir):
        with open(os.path.join(adir, "adapter_config.json")) as fh:
            return json.load(fh)["r"]

    def peft_logits(name, adir):
        lg, pm, problems = ref.peft_logits(adir, ids)
        logits["peft." + name] = lg
        for p in problems:
            lines.append(f"FAIL (a) {name}: {p}")
            fails.append(f"PEFT load of {name}")
        if not problems:
            lines.append(f"ok   (a) {name}: PEFT loaded every tensor of {adir} as stored")
        return pm

    def merged(name, adir, pm):
        mdir = os.path.join(work, "merged_" + name)
        run([a.mixtune, "merge", "--model", BASE, "--adapter", adir, "--out", mdir, "--dtype", "fp32"])
        st = os.path.join(mdir, "model.safetensors")
        merged_sha[name] = sha256(st)
        ml = ref.merged_logits(mdir, ids)
        logits["merged." + name] = ml
        lg = logits["peft." + name]
        k = path_length(cfg, rank(adir))
        # both sides carry transformers' fp32 steps, and the merged weights one
        # more fp32 rounding: 2k+1 roundings of the largest logit
        measured[f"merged_vs_peft.{name}"] = dict(check(f"(b) {name}: transformers on `mixtune merge` vs PEFT, max|Δlogit|/max|logit|",
                                                        max_abs(ml - lg) / max_abs(lg), (2 * k + 1) * U32),
                                                  max_abs_diff=max_abs(ml - lg), max_abs_logit=max_abs(lg))
        # PEFT's merge against mixtune's, weight by weight: one fp32 rounding
        mine, _ = read_safetensors(st)
        theirs = ref.peft_merged_weights(pm)
        worst, missing = 0.0, [wn for wn in mine if wn not in theirs]
        if missing:
            raise RuntimeError(f"PEFT's merged model lacks {missing[:3]}")
        for wn, w in mine.items():
            t = theirs[wn]
            worst = max(worst, max_abs(w - t) / max(max_abs(t), 1e-30))
        measured[f"merge_weights.{name}"] = check(f"(b) {name}: mixtune's merged weights vs PEFT's merge_and_unload, worst max|Δw|/max|w|",
                                                  worst, 2 * U32)

    def saved(name, dora):
        adir = os.path.join(a.out, name)
        os.makedirs(adir)
        ref.save_new_adapter(adir, dora)
        peft_logits(name, adir)
        return adir

    def evaluate(name, adir, data):
        lg = logits["peft." + name]
        k = path_length(cfg, rank(adir))
        want = cross_entropy(lg, ids)
        got = mixtune_eval(a.mixtune, adir, data)
        # CE moves by at most 2·max|Δlogit| (its gradient in the logits has
        # 1-norm <= 2), with mixtune's fp32 forward (k roundings) beside
        # transformers' (k) and the stored golden (1)
        measured[f"eval_loss.{name}"] = dict(check(f"(a/c) {name}: `mixtune eval` loss vs the loss of PEFT's logits, |Δ|",
                                                   abs(got - want), 2 * (2 * k + 1) * U32 * max_abs(lg)), mixtune=got, peft=want)

    def train(name, adir, data):
        losses, val = mixtune_train(a.mixtune, adir, data, work, "from_" + name)
        finite = all(math.isfinite(x) for x in losses + val)
        ok = finite and len(losses) == 3 and val
        lines.append(f"{'ok  ' if ok else 'FAIL'} (c) {name}: `mixtune train` 3 steps from it: losses {losses}, val {val}")
        if not ok:
            fails.append(f"train from {name}")
        measured[f"train.{name}"] = {"losses": losses, "val_losses": val}

    stage("base logits", lambda: logits.__setitem__("base", ref.base_logits(ids)))
    adapters = {}
    for name, adir in MIXTUNE_ADAPTERS.items():
        pm = stage(f"(a) PEFT runs {name}", lambda: peft_logits(name, adir))
        if pm is None:
            continue
        adapters[name] = adir
        if a.mixtune:
            stage(f"(b) {name} merged", lambda: merged(name, adir, pm))
        del pm
    for name, dora in (("peft_lora", False), ("peft_dora", True)):
        adir = stage(f"(c) PEFT saves {name}", lambda: saved(name, dora))
        if adir:
            adapters[name] = adir
    if a.mixtune:
        data = os.path.join(work, "ids.jsonl")
        with open(data, "w") as fh:
            for row in ids:
                fh.write(json.dumps({"input_ids": row}) + "\n")
        for name, adir in adapters.items():
            stage(f"(a/c) mixtune evaluates {name}", lambda: evaluate(name, adir, data))
            if name.startswith("peft_"):
                stage(f"(c) mixtune trains from {name}", lambda: train(name, adir, data))

    for p in ref.problems:
        lines.append(f"FAIL {p}")
        fails.append(p)
    if not ref.problems:
        lines.append("ok   every checkpoint loaded with no missing, unexpected or mismatched tensor")
    meta = {"input_ids": json.dumps(ids), "batch": str(len(ids)), "seq_len": str(SEQ), "reference": ref.reference}
    write_f32_safetensors(os.path.join(a.out, "logits.safetensors"), logits, meta)
    manifest = {
        "reference": ref.reference,
        "versions": ref.versions,
        "base": BASE,
        "mixtune_adapters": MIXTUNE_ADAPTERS,
        "peft_adapters": {"r": PEFT_R, "lora_alpha": PEFT_ALPHA, "target_modules": TARGETS, "seed": SEED,
                          "init_lora_weights": False},
        "merge": "mixtune merge --model models/tiny-byte --adapter ADAPTER --out DIR --dtype fp32",
        "merged_sha256": merged_sha,
        "input_ids": ids,
        "logits": {k: {"max_abs": max_abs(v)} for k, v in logits.items()},
        "measured": measured,
        "bound": "max|Δlogit| <= k·u·max|logit|, u = 2^-24, k = layers·(3·hidden + head_dim + seq + intermediate + 4·r) + hidden",
        "failed": fails,
    }
    with open(os.path.join(a.out, "manifest.json"), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
    shutil.rmtree(work, ignore_errors=True)

    print(f"interop: {ref.reference} ({', '.join(f'{k} {v}' for k, v in ref.versions.items())}), "
          f"{len(ids)} rows of {SEQ} tokens, logits in float64")
    for k, v in logits.items():
        print(f"  logits {k}: max|logit| {max_abs(v):.4g}")
    for ln in lines:
        print("  " + ln)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(a.out) for f in fs)
    print(f"interop: wrote {a.out} ({total / 1e6:.2f} MB) in {time.time() - t0:.0f} s: {'all checks passed' if not fails else 'FAILED: ' + '; '.join(fails)}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
