"""LoRA adapters in PEFT's format (oj_gpt_lora_load / oj_gpt_lora_save,
include/ojas/gpt.h) against the plain-PyTorch references (gpt_reference.py
for GPT-2's Conv1D layout, hf_reference.py for the Llama family).

An adapter is written here as PEFT's save_pretrained lays it out
(adapter_config.json; adapter_model.safetensors with
base_model.model.<module path>.lora_A.weight [r, in] / lora_B.weight
[out, r], random nonzero values) beside a random base model directory.
The reference applies it as PEFT defines the adapted layer, W x + (alpha /
r) B A x, by its weight form: W + (alpha / r) B A ([out, in]; transposed
onto GPT-2's Conv1D [in, out], PEFT's fan_in_fan_out). ojas loads the base
and the adapter (computing the adapter term unmerged) and
- its logits agree with the reference's to 1e-4 relative;
- the adapter it saves back (oj_gpt_lora_save) is read by this file's own
  reader, under PEFT's names and config keys, to the same logits;
- oj_gpt_lora_merge gives the same logits without adapters."""

import json
import os

import numpy as np
import pytest
import torch

from ojpkg import ojas
from test_gpt_parity import _rel_err
from test_hf_dir import OjModel, _seed, build, write_dir
from test_safetensors import hf_save, py_load, raw_bytes

PREFIX = "base_model.model."

# (base config name in test_hf_dir.CONFIGS, target_modules, module paths of
# block l as (path, in, out) given the config)
CASES = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "qwen3": ["q_proj", "v_proj", "down_proj"],
}


def linears(name, params):
    """{module path: (weight name, conv1d)} of every linear a target names."""
    out = {}
    for n in params:
        if not n.endswith(".weight"):
            continue
        path = n[:-len(".weight")]
        if path.split(".")[-1] in CASES[name]:
            out[path] = (n, name == "gpt2")
    return out


def make_adapter(name, params, r, gen):
    """{PEFT tensor name: f32 tensor}: A, B ~ N(0, 0.3) so the term matters."""
    ad = {}
    for path, (w, conv1d) in linears(name, params).items():
        shape = params[w].shape
        fin, fout = (shape[0], shape[1]) if conv1d else (shape[1], shape[0])
        ad[PREFIX + path + ".lora_A.weight"] = 0.3 * torch.randn(r, fin, generator=gen)
        ad[PREFIX + path + ".lora_B.weight"] = 0.3 * torch.randn(fout, r, generator=gen)
    return ad


def write_adapter(d, name, ad, r, alpha):
    os.makedirs(d, exist_ok=True)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
           "lora_dropout": 0.0, "target_modules": CASES[name], "bias": "none",
           "fan_in_fan_out": name == "gpt2", "base_model_name_or_path": "base",
           "modules_to_save": None, "inference_mode": True}
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    hf_save(os.path.join(d, "adapter_model.safetensors"),
            {n: ("F32", tuple(t.shape), raw_bytes(t.float().contiguous())) for n, t in ad.items()},
            metadata={"format": "pt"})


def read_adapter(d):
    """(adapter_config dict, {PEFT name: f64 tensor}) read with the formats'
    own rules."""
    with open(os.path.join(d, "adapter_config.json")) as f:
        cfg = json.load(f)
    _, header, blobs, _ = py_load(os.path.join(d, "adapter_model.safetensors"))
    ad = {}
    for n, b in blobs.items():
        assert header[n]["dtype"] == "F32", n
        a = np.frombuffer(b, dtype=np.float32).reshape(header[n]["shape"])
        ad[n] = torch.from_numpy(a.copy()).double()
    return cfg, ad


def adapted(name, P, ad, scale):
    """The base weights with each adapter's term folded in (float64)."""
    Q = dict(P)
    for path, (w, conv1d) in linears(name, P).items():
        a, b = ad[PREFIX + path + ".lora_A.weight"], ad[PREFIX + path + ".lora_B.weight"]
        d = scale * (b.double() @ a.double())  # [out, in]
        Q[w] = P[w] + (d.t() if conv1d else d)
    return Q


@pytest.mark.parametrize("name", list(CASES))
def test_adapter_logits(engine, name, tmp_path):
    gen = torch.Generator().manual_seed(_seed("lora-" + name))
    cfg, params, fwd = build(name, gen)
    base = str(tmp_path / "base")
    write_dir(base, cfg, params)
    r, alpha = 4, 8.0
    ad = make_adapter(name, params, r, gen)
    adir = str(tmp_path / "adapter")
    write_adapter(adir, name, ad, r, alpha)
    P = {n: t.double() for n, t in params.items()}
    idx = torch.randint(0, 97, (2, 24), generator=gen)
    want = fwd(adapted(name, P, ad, alpha / r), idx).numpy()
    plain = fwd(P, idx).numpy()
    assert not _rel_err(plain, want)[1]  # the adapter changes the logits
    m = OjModel(engine, base)
    try:
        m.m.load_adapter(adir)
        with ojas.no_grad():
            got = m.forward(idx)
        e, ok = _rel_err(got, want)
        print("%s adapter logits: max |d| / max |ref| = %.3g" % (name, e))
        assert ok, "%s adapter logits: max |d| / max |ref| = %.3g" % (name, e)
        # saved back: PEFT's keys and names, read here to the same logits
        out = str(tmp_path / "saved")
        m.m.save_adapter(out, "base")
        scfg, sad = read_adapter(out)
        assert scfg["peft_type"] == "LORA" and scfg["task_type"] == "CAUSAL_LM"
        assert scfg["r"] == r and scfg["lora_alpha"] == alpha
        assert scfg["fan_in_fan_out"] == (name == "gpt2")
        assert scfg["base_model_name_or_path"] == "base"
        assert sorted(scfg["target_modules"]) == sorted(CASES[name])
        assert sorted(sad) == sorted(ad)
        back = fwd(adapted(name, P, sad, scfg["lora_alpha"] / scfg["r"]), idx).numpy()
        assert _rel_err(back, want)[1]
        # merged into the weights: the same logits without adapters
        m.m.merge_adapter()
        with ojas.no_grad():
            merged = m.forward(idx)
        assert _rel_err(merged, want)[1]
    finally:
        m.free()
