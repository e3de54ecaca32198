#!/usr/bin/env python3
"""ojas beside a reference on Hugging Face model directories, per
architecture and device, in float32.

For each case (GPT2LMHeadModel; LlamaForCausalLM untied, tied with
rope_scaling "llama3"; MistralForCausalLM with a sliding_window below
max_position_embeddings; Qwen2ForCausalLM tied; Qwen3ForCausalLM untied and
tied) a small random model is made and written as a model directory; ojas
loads it through the Python package (ojas.models.GPT.from_pretrained on an
ojas.Engine of the device, numerics "exact" by default: true f32 GEMMs on
CUDA, where "fast" takes TF32 tensor cores) and is compared with the
reference:
- logits of a 2 x 24-token prompt: max |ojas - ref| / max |ref| <= 1e-4;
- 64 greedy tokens after an 8-token prompt, by full recompute on the
  reference and, on ojas, both by the static decoder (`GPT.decoder`: a CUDA
  graph on CUDA) and by `GPT.generate(temperature=0)` (KV cache): all equal.

References (--reference):
- transformers (where it is installed, e.g. the lent H200 machine): the
  model is built by transformers' own config and model classes (seeded,
  initializer_range 0.2 so that greedy choices are decisive) and saved with
  save_pretrained (sharded for one case); its logits are taken on the same
  device as ojas's (cpu: CPU, cuda: CUDA; TF32 off, eager attention).
- plain: tests/reference/hf_reference.py and gpt_reference.py (plain
  PyTorch, float64 on the CPU from the same float32 weights), the directory
  written as test_hf_dir.py writes it. This is what CI can run
  (tests/reference/test_hf_compare.py).
- auto (default): transformers when importable, else plain.

Prints one line per (case, device), then a JSON summary (also written to
--json FILE); exits 1 when any comparison fails, 2 when ojas cannot be
imported.

usage: hf_compare.py [--build BUILD] [--devices cpu,cuda] [-n 64]
                     [--reference auto|transformers|plain] [--cases a,b]
                     [--numerics exact|fast] [--json FILE]
BUILD is the ojas build tree holding python/ (the package, `make python`)
and libojas.so; default $OJAS_BUILD_DIR, else ./build.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF_DIR = os.path.join(ROOT, "tests", "reference")
RTOL = 1e-4
VOCAB = 512
LOGIT_T = 24
PROMPT_T = 8


def _llama(arch, model_type, **kw):
    c = {"architectures": [arch], "model_type": model_type, "vocab_size": VOCAB,
         "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": False, "initializer_range": 0.2}
    c.update(kw)
    return c


# name -> config.json fields (what both references build the model from).
CASES = {
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
             "n_positions": 256, "n_embd": 64, "n_layer": 3, "n_head": 4, "n_inner": 192,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "initializer_range": 0.2},
    "llama": _llama("LlamaForCausalLM", "llama"),
    # Llama 3.1/3.2-style rope scaling; head dim 16 and an original context
    # of 64 put the frequencies in all three of its bands.
    "llama3-rope-tied": _llama("LlamaForCausalLM", "llama", tie_word_embeddings=True,
                               rope_theta=500000.0,
                               rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 64}),
    # The window (128) holds prompt + 64 tokens; ojas's context is the window.
    "mistral-window": _llama("MistralForCausalLM", "mistral", num_key_value_heads=1,
                             sliding_window=128),
    "qwen2-tied": _llama("Qwen2ForCausalLM", "qwen2", tie_word_embeddings=True,
                         rope_theta=1000000.0, use_sliding_window=False),
    # head_dim 32 != hidden_size / heads (16).
    "qwen3": _llama("Qwen3ForCausalLM", "qwen3", head_dim=32, rope_theta=1000000.0),
    "qwen3-tied": _llama("Qwen3ForCausalLM", "qwen3", head_dim=32, tie_word_embeddings=True,
                         rope_theta=1000000.0),
}
SHARDED = {"llama"}  # written as several safetensors files + the index


def seed_of(name):
    return sum(map(ord, name)) * 7919 + 11


def rel_err(got, want):
    """max |got - want| / max |want| (the bar) and the elementwise check of
    tests/reference/test_gpt_parity.py (|d| <= rtol |want| + rtol rms(want))."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    d = np.abs(got - want)
    scale = np.sqrt(np.mean(want ** 2))
    elementwise = bool(np.all(d <= RTOL * np.abs(want) + RTOL * scale))
    return float(d.max() / np.abs(want).max()), elementwise


def greedy(fwd, prompt, n):
    """n greedy tokens after prompt (list of ids) by full recompute:
    fwd(idx [1, T] int64) -> logits [1, T, V] (numpy or torch). Also the
    top-1 minus top-2 logit at each step (how decisive each choice was)."""
    seq, out, margins = list(prompt), [], []
    for _ in range(n):
        last = np.asarray(fwd(torch.tensor([seq]))[0, -1], np.float64)
        top = np.argsort(last)[-2:]
        out.append(int(top[1]))
        margins.append(float(last[top[1]] - last[top[0]]))
        seq.append(int(top[1]))
    return out, margins


# ---------------------------------------------------------------- references

class TransformersRef:
    """Models made and run by transformers (the lent H200 machine)."""
    name = "transformers"

    def __init__(self):
        import transformers as tf
        self.tf = tf
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.version = "transformers %s, torch %s" % (tf.__version__, torch.__version__)

    def config(self, fields):
        """transformers' config object for config.json fields. transformers 5
        takes rope_theta and rope_scaling as rope_parameters; 4.x as
        themselves."""
        kw = {k: v for k, v in fields.items() if k not in ("architectures", "model_type")}
        cls = type(self.tf.AutoConfig.for_model(fields["model_type"]))
        if "rope_theta" in kw and "rope_parameters" in cls().to_dict():
            rp = dict(kw.pop("rope_scaling", None) or {"rope_type": "default"})
            rp["rope_theta"] = kw.pop("rope_theta")
            kw["rope_parameters"] = rp
        cfg = cls(**kw)
        cfg.architectures = list(fields["architectures"])
        return cfg

    def make(self, name, fields, d):
        tf = self.tf
        cfg = self.config(fields)
        torch.manual_seed(seed_of(name))
        try:
            model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        except TypeError:
            model = tf.AutoModelForCausalLM.from_config(cfg)
        model = model.float().eval()
        model.save_pretrained(d, **({"max_shard_size": "100KB"} if name in SHARDED else {}))
        self.model = model

    def runner(self, device):
        model = self.model.to(device)

        def fwd(idx):
            with torch.no_grad():
                return model(idx.to(device)).logits.float().cpu().numpy()
        return fwd


class PlainRef:
    """Plain-PyTorch references of tests/reference (float64 on the CPU)."""
    name = "plain"

    def __init__(self):
        sys.path.insert(0, REF_DIR)
        import gpt_reference
        import hf_reference
        import test_hf_dir
        self.gref, self.href, self.hdir = gpt_reference, hf_reference, test_hf_dir
        self.version = "plain PyTorch reference (tests/reference), torch %s" % torch.__version__

    def make(self, name, fields, d):
        gen = torch.Generator().manual_seed(seed_of(name))
        cfg = dict(fields)
        if cfg["architectures"][0] == "GPT2LMHeadModel":
            rc = self.hdir._gpt2_ref_cfg(cfg)
            params = self.gref.random_params(rc, gen)
            params["transformer.wte.weight"] *= 0.1
            fwd = lambda P, idx: self.gref.forward(rc, P, idx)  # noqa: E731
        else:
            params = self.href.random_params(cfg, gen)
            if cfg.get("tie_word_embeddings"):
                params["model.embed_tokens.weight"] *= 0.1  # not just repeating the last token
            fwd = lambda P, idx: self.href.forward(cfg, P, idx)  # noqa: E731
        self.hdir.write_dir(d, cfg, params, shards=2 if name in SHARDED else 1)
        P = {n: t.double() for n, t in params.items()}
        self.fwd = lambda idx: fwd(P, idx).numpy()

    def runner(self, device):
        return self.fwd


# ---------------------------------------------------------------- ojas

def import_ojas(build):
    sys.path.insert(0, os.path.join(build, "python"))
    import ojas
    return ojas


class OjasRun:
    def __init__(self, ojas, d, device, numerics):
        self.ojas = ojas
        self.engine = ojas.Engine(device=device, numerics=numerics)
        self.host = self.engine if device == "cpu" else ojas.Engine(device="cpu")
        self.m = ojas.models.GPT.from_pretrained(d, engine=self.engine)

    def logits(self, idx):
        with self.ojas.no_grad():
            x = self.ojas.tensor(idx.numpy(), engine=self.engine)
            return self.m(x).detach().cpu(self.host).numpy()

    def greedy_decoder(self, prompt, n):
        d = self.m.decoder(len(prompt) + n, use_graph=True)
        out = [d.prefill(list(prompt))]
        while len(out) < n:
            out.append(d.step())
        return out

    def greedy_generate(self, prompt, n):
        return list(self.m.generate(list(prompt), max_new_tokens=n, temperature=0))


def compare(ojas, ref, name, device, d, n, numerics="exact"):
    """One (case, device) comparison: a dict for the summary."""
    gen = torch.Generator().manual_seed(seed_of(name) + 1)
    idx = torch.randint(0, VOCAB, (2, LOGIT_T), generator=gen)
    prompt = idx[0, :PROMPT_T].tolist()
    r = {"case": name, "architecture": CASES[name]["architectures"][0], "device": device,
         "tied": bool(CASES[name].get("tie_word_embeddings", name == "gpt2")), "tokens": n,
         "numerics": numerics}
    try:
        fwd = ref.runner(device)
        want = fwd(idx)
        run = OjasRun(ojas, d, device, numerics)
        got = run.logits(idx)
        if got.shape != want.shape:
            raise ValueError("logits shape %s, reference %s" % (got.shape, want.shape))
        r["logits_rel_err"], r["logits_elementwise_ok"] = rel_err(got, want)
        want_tok, margins = greedy(fwd, prompt, n)
        got_dec = run.greedy_decoder(prompt, n)
        got_gen = run.greedy_generate(prompt, n)
        r["greedy_equal_decoder"] = got_dec == want_tok
        r["greedy_equal_generate"] = got_gen == want_tok
        r["distinct_tokens"] = len(set(want_tok))
        r["min_margin"] = min(margins)
        for k, got_tok in (("decoder", got_dec), ("generate", got_gen)):
            diff = next((i for i, (a, b) in enumerate(zip(got_tok, want_tok)) if a != b), None)
            if diff is None and len(got_tok) != len(want_tok):
                diff = min(len(got_tok), len(want_tok))
            if diff is not None:
                r["first_diff_" + k] = {"index": diff, "ojas": got_tok[diff:diff + 4],
                                        "reference": want_tok[diff:diff + 4],
                                        "reference_margin": margins[min(diff, n - 1)]}
        r["ok"] = bool(r["logits_rel_err"] <= RTOL and r["greedy_equal_decoder"]
                       and r["greedy_equal_generate"])
    except Exception as e:  # an ojas refusal or a reference failure is a failed case
        r["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        r["ok"] = False
    return r


def line(r):
    if "error" in r:
        return "%-17s %-5s FAIL %s" % (r["case"], r["device"], r["error"])
    s = "%-17s %-5s %s logits max|d|/max|ref| %.2e, %d greedy tokens %s (min margin %.3g)" % (
        r["case"], r["device"], "ok  " if r["ok"] else "FAIL", r["logits_rel_err"], r["tokens"],
        "equal" if r["greedy_equal_decoder"] and r["greedy_equal_generate"] else "DIFFER",
        r["min_margin"])
    for k in ("first_diff_decoder", "first_diff_generate"):
        if k in r:
            s += "\n    %s: %s" % (k, json.dumps(r[k]))
    return s


def git_head():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def make_ref(kind):
    if kind in ("auto", "transformers"):
        try:
            return TransformersRef()
        except ImportError:
            if kind == "transformers":
                raise
    return PlainRef()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("OJAS_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("-n", type=int, default=64, help="greedy tokens (default 64)")
    ap.add_argument("--reference", choices=["auto", "transformers", "plain"], default="auto")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated of: " + ",".join(CASES))
    ap.add_argument("--numerics", choices=["exact", "fast"], default="exact",
                    help="the ojas engine's numerics (default exact: no TF32 on CUDA)")
    ap.add_argument("--json", help="write the summary here too")
    a = ap.parse_args(argv)
    names = [c for c in a.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        ap.error("unknown case(s) %s (known: %s)" % (", ".join(unknown), ", ".join(CASES)))
    # nothing compared must not read as "all equal"
    if not names:
        ap.error("--cases %r names no case (known: %s)" % (a.cases, ", ".join(CASES)))
    devices = [d for d in a.devices.split(",") if d]
    if not devices:
        ap.error("--devices %r names no device (cpu, cuda)" % a.devices)
    if a.n < 1:
        ap.error("-n %d: the greedy comparison needs at least 1 token" % a.n)
    try:
        ojas = import_ojas(a.build)
    except ImportError as e:
        print("hf_compare: cannot import ojas from %s/python (build it: make python): %s"
              % (a.build, e), file=sys.stderr)
        return 2
    ref = make_ref(a.reference)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            d = os.path.join(tmp, name)
            try:
                ref.make(name, CASES[name], d)
            except Exception as e:  # the reference could not build it: every device fails
                err = "making the model: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])
                for dev in devices:
                    r = {"case": name, "architecture": CASES[name]["architectures"][0],
                         "device": dev, "error": err, "ok": False}
                    results.append(r)
                    print(line(r), flush=True)
                continue
            for dev in devices:
                r = compare(ojas, ref, name, dev, d, a.n, a.numerics)
                results.append(r)
                print(line(r), flush=True)
    bad = sum(not r["ok"] for r in results)
    summary = {"reference": ref.name, "versions": ref.version, "ojas_commit": git_head(),
               "rtol": RTOL, "cases": results, "failed": bad, "ok": bad == 0}
    text = json.dumps(summary, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)
    print("hf_compare: %s: %s" % (ref.version, "all %d equal" % len(results) if bad == 0
                                  else "%d of %d FAILED" % (bad, len(results))))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
