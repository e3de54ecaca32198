#!/usr/bin/env python3
"""ojas's LoRA adapters beside PEFT (run where transformers and peft are
installed, e.g. the lent H200 machine).

For GPT-2 and Llama shapes, a small random model is built with transformers'
own classes (as hf_compare.py builds them) and saved with save_pretrained;
`ojas train --init-from DIR --lora ...` fine-tunes LoRA adapters on a small
corpus (so A and B are both nonzero) and writes DIR/adapter in PEFT's format;
then PEFT loads that adapter onto the transformers model
(PeftModel.from_pretrained) and its greedy continuation of one prompt is
compared with `ojas generate -m DIR --adapter ADAPTER -t 0`, and its logits
with those of the model ojas exports with the adapter folded in
(`ojas export --hf --adapter`, read back by transformers). GPT-2's tokenizer
files tokenize for both sides. Prints one line per architecture.

usage: peft_compare.py OJAS_BIN GPT2_TOKENIZER_DIR [-n 32]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import peft
import torch
import transformers as tf

PROMPT = "In the beginning God created the heaven and the earth."
TEXT = ("And the earth was without form, and void; and darkness was upon the face of the deep. "
        "And the Spirit of God moved upon the face of the waters. And God said, Let there be "
        "light: and there was light. And God saw the light, that it was good. ")


def configs():
    common = dict(vocab_size=50257, initializer_range=0.2)
    return [
        ("GPT2LMHeadModel", tf.GPT2Config(n_layer=3, n_head=4, n_embd=64, n_positions=256,
                                          **common), "c_attn,c_proj,c_fc"),
        ("LlamaForCausalLM", tf.LlamaConfig(hidden_size=64, intermediate_size=160,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, max_position_embeddings=256,
                                            tie_word_embeddings=False, **common),
         "q,k,v,o,gate,up,down"),
    ]


def run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("%s: rc %d: %s" % (" ".join(cmd), r.returncode,
                                              r.stderr.decode("utf-8", "replace")[-500:]))
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ojas")
    ap.add_argument("tokenizer")
    ap.add_argument("-n", type=int, default=32)
    a = ap.parse_args()
    oj, tok = os.path.abspath(a.ojas), os.path.abspath(a.tokenizer)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "corpus.txt"), "w") as f:
            f.write(TEXT * 40)
        run([oj, "data", "prepare", "--vocab", tok, "--out", "data", "--threads", "1",
             "corpus.txt"], tmp)
        ids = [int(t) for t in subprocess.run([oj, "tokenizer", "encode", "--vocab", tok],
                                              input=PROMPT.encode(), capture_output=True,
                                              check=True).stdout.split()]
        for name, cfg, targets in configs():
            torch.manual_seed(0)
            cfg.architectures = [name]
            model = tf.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).eval()
            d = os.path.join(tmp, name)
            model.save_pretrained(d)
            ft = os.path.join(tmp, name + "-ft")
            run([oj, "train", "--init-from", d, "--lora", "r=4,alpha=8,targets=" + targets,
                 "--set", "data_dir=data", "--set", "tokenizer_dir=" + tok, "--set", "batch_size=4",
                 "--set", "seq_len=32", "--set", "max_steps=20", "--set", "lr=1e-2",
                 "--set", "warmup_steps=0", "--set", "eval_every=0", "--set", "eval_batches=1",
                 "--set", "peak_flops=1e10", "--out", ft, "--no-progress", "--no-plot"], tmp)
            adapter = os.path.join(ft, "adapter")
            pm = peft.PeftModel.from_pretrained(model, adapter).eval()
            x = torch.tensor([ids])
            with torch.no_grad():
                out = pm.generate(input_ids=x, max_new_tokens=a.n, min_new_tokens=a.n,
                                  do_sample=False, eos_token_id=None, pad_token_id=0)
                want_logits = pm(input_ids=x).logits
                with pm.disable_adapter():  # the adapter must matter
                    base_logits = pm(input_ids=x).logits
            moved = ((base_logits - want_logits).abs().max() / want_logits.abs().max()).item()
            new = " ".join(str(t) for t in out[0, len(ids):].tolist())
            want = subprocess.run([oj, "tokenizer", "decode", "--vocab", tok], input=new.encode(),
                                  capture_output=True, check=True).stdout.decode("utf-8", "replace")
            so = run([oj, "generate", "-m", d, "--adapter", adapter, "--vocab", tok, "-p", PROMPT,
                      "-n", str(a.n), "-t", "0"], tmp).decode("utf-8", "replace")
            got = so[len(PROMPT):] if so.startswith(PROMPT) else so
            same_text = got.rstrip("\n") == want
            merged = os.path.join(tmp, name + "-merged")
            run([oj, "export", "--hf", merged, "-m", d, "--adapter", adapter], tmp)
            mm = tf.AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32).eval()
            with torch.no_grad():
                got_logits = mm(input_ids=x).logits
            err = ((got_logits - want_logits).abs().max() / want_logits.abs().max()).item()
            ok = same_text and err < 1e-4 and moved > 1e-3
            bad += not ok
            print(f"{name}: greedy text {'same' if same_text else 'DIFFERENT'} ({a.n} tokens); "
                  f"merged export vs PEFT logits: max |d| / max |ref| = {err:.3g} (the adapter "
                  f"moves PEFT's logits by {moved:.3g})"
                  + ("" if same_text else f"\n  peft: {want!r}\n  ojas: {got!r}"), flush=True)
    print(f"peft_compare: peft {peft.__version__}, transformers {tf.__version__}, "
          f"torch {torch.__version__}: {'all equal' if bad == 0 else f'{bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
