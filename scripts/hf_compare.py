#!/usr/bin/env python3
"""ojas beside transformers on Hugging Face model directories (run where
transformers is installed, e.g. the lent H200 machine).

For each architecture, a small random model is built with transformers' own
config and model classes (seeded; initializer_range 0.2 so that greedy
choices are decisive), saved with save_pretrained, and continued greedily
from one prompt by transformers (f32, CPU) and by `ojas generate -m DIR -t 0`
on each device given. GPT-2's tokenizer files (encoder.json, vocab.bpe)
tokenize for both sides (through `ojas tokenizer encode/decode`, so the
comparison is of the models), so every model has vocab_size 50257. Prints one
line per (architecture, device): whether ojas's text equals transformers'.

usage: hf_compare.py OJAS_BIN GPT2_TOKENIZER_DIR [--devices cpu,cuda] [-n 32]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers as tf

PROMPT = "In the beginning God created the heaven and the earth."


def configs():
    common = dict(vocab_size=50257, initializer_range=0.2)
    llama = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                 **common)
    return [
        ("GPT2LMHeadModel", tf.GPT2Config(n_layer=3, n_head=4, n_embd=64, n_positions=256,
                                          **common)),
        ("LlamaForCausalLM", tf.LlamaConfig(tie_word_embeddings=False, **llama)),
        ("MistralForCausalLM", tf.MistralConfig(tie_word_embeddings=False, sliding_window=None,
                                                **llama)),
        ("Qwen2ForCausalLM", tf.Qwen2Config(tie_word_embeddings=True, **llama)),
        ("Qwen3ForCausalLM", tf.Qwen3Config(tie_word_embeddings=True, head_dim=32, **llama)),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ojas")
    ap.add_argument("tokenizer")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("-n", type=int, default=32)
    a = ap.parse_args()
    enc = subprocess.run([a.ojas, "tokenizer", "encode", "--vocab", a.tokenizer], input=PROMPT.encode(),
                         capture_output=True, check=True)
    ids = [int(t) for t in enc.stdout.split()]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in configs():
            torch.manual_seed(0)
            cfg.architectures = [name]
            model = tf.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).eval()
            d = os.path.join(tmp, name)
            model.save_pretrained(d)
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=a.n, min_new_tokens=a.n,
                                     do_sample=False, eos_token_id=None, pad_token_id=0)
            new = " ".join(str(t) for t in out[0, len(ids):].tolist())
            want = subprocess.run([a.ojas, "tokenizer", "decode", "--vocab", a.tokenizer],
                                  input=new.encode(), capture_output=True,
                                  check=True).stdout.decode("utf-8", "replace")
            for dev in a.devices.split(","):
                r = subprocess.run([a.ojas, "generate", "-m", d, "--vocab", a.tokenizer, "-p", PROMPT,
                                    "-n", str(a.n), "-t", "0", "-d", dev],
                                   capture_output=True)
                so = r.stdout.decode("utf-8", "replace")
                got = so[len(PROMPT):] if so.startswith(PROMPT) else so
                ok = r.returncode == 0 and got.rstrip("\n") == want
                bad += not ok
                print(f"{name} {dev}: {'same text' if ok else 'DIFFERENT'} ({a.n} greedy tokens)"
                      + ("" if ok else f"\n  transformers: {want!r}\n  ojas (rc {r.returncode}): "
                                       f"{got!r} {r.stderr.decode('utf-8', 'replace').strip()[-300:]}"), flush=True)
    print(f"hf_compare: transformers {tf.__version__}, torch {torch.__version__}: "
          f"{'all equal' if bad == 0 else f'{bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
