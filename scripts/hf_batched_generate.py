#!/usr/bin/env python3
"""The peer figure for scripts/serve_bench.py: Hugging Face transformers'
batched greedy `generate` on CUDA at the same models, batch and lengths.

For each model (a GPT-2 124M-shaped one in f32, a Qwen2.5-0.5B-shaped one
in bf16; random weights from the config, or OJAS_BENCH_GPT2 /
OJAS_BENCH_QWEN = a model directory to load), one warm-up, then --rounds
calls of model.generate on a batch of --batch prompts of --prompt-tokens
random ids, exactly --max-tokens new tokens each (min_new_tokens =
max_new_tokens, so no request stops early), and the same at batch 1.
Reports JSON on stdout: batch_tok_s (new tokens of all rounds / their
time), single_tok_s and their ratio. Any failure (no CUDA, an output of
the wrong shape) exits 1 with no figures.

--device cpu runs on the CPU (a check that the script works where no GPU
is; its figures are not the peer's); --tiny shrinks both models to 2
layers of width 64 (the same families and code paths), for such a check
in seconds.

Usage: scripts/hf_batched_generate.py [--batch 32] [--rounds 4] [--max-tokens 128]
       [--prompt-tokens 64] [--models gpt2,qwen] [--device cuda|cpu] [--tiny]
"""
import argparse
import json
import os
import sys
import time


def build(name, torch, transformers, device, tiny):
    env = {"gpt2": "OJAS_BENCH_GPT2", "qwen": "OJAS_BENCH_QWEN"}[name]
    dtype = torch.float32 if name == "gpt2" else torch.bfloat16
    path = None if tiny else os.environ.get(env)
    if path:
        m = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype)
    elif name == "gpt2":
        w = dict(n_embd=64, n_layer=2, n_head=4) if tiny else dict(n_embd=768, n_layer=12, n_head=12)
        cfg = transformers.GPT2Config(vocab_size=50257, n_positions=1024, **w)
        m = transformers.GPT2LMHeadModel(cfg).to(dtype)
    else:
        w = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
             if tiny else dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                               num_attention_heads=14))
        cfg = transformers.Qwen2Config(num_key_value_heads=2, vocab_size=151936,
                                       max_position_embeddings=32768, rms_norm_eps=1e-6,
                                       rope_theta=1000000.0, tie_word_embeddings=True, **w)
        m = transformers.Qwen2ForCausalLM(cfg).to(dtype)
    return m.to(device).eval()


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def run(m, torch, device, batch, rounds, prompt_tokens, max_tokens, vocab):
    g = torch.Generator(device="cpu").manual_seed(5)
    total, secs = 0, 0.0
    for r in range(rounds + 1):  # round 0: warm-up
        ids = torch.randint(3, vocab, (batch, prompt_tokens), generator=g).to(device)
        mask = torch.ones_like(ids)
        sync(torch, device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                             min_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
        sync(torch, device)
        dt = time.perf_counter() - t0
        if tuple(out.shape) != (batch, prompt_tokens + max_tokens):
            raise RuntimeError("generate gave shape %s, want (%d, %d)" %
                               (tuple(out.shape), batch, prompt_tokens + max_tokens))
        if r > 0:
            total += batch * max_tokens
            secs += dt
    return total, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--models", default="gpt2,qwen")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="2-layer models of width 64 (a quick check)")
    a = ap.parse_args()
    try:
        import torch
        import transformers
        if a.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device (--device cpu runs on the CPU)")
        res = []
        for name in a.models.split(","):
            if name not in ("gpt2", "qwen"):
                raise RuntimeError("unknown model %r (gpt2, qwen)" % name)
            m = build(name, torch, transformers, a.device, a.tiny)
            vocab = min(250, m.config.vocab_size)
            bt, bs = run(m, torch, a.device, a.batch, a.rounds, a.prompt_tokens, a.max_tokens, vocab)
            st, ss = run(m, torch, a.device, 1, a.rounds, a.prompt_tokens, a.max_tokens, vocab)
            res.append({"model": name + ("-tiny" if a.tiny else ""), "device": a.device,
                        "dtype": str(next(m.parameters()).dtype).replace("torch.", ""),
                        "batch": a.batch, "rounds": a.rounds, "prompt_tokens": a.prompt_tokens,
                        "max_tokens": a.max_tokens, "batch_tokens": bt, "batch_s": round(bs, 3),
                        "batch_tok_s": round(bt / bs, 1), "single_tokens": st,
                        "single_s": round(ss, 3), "single_tok_s": round(st / ss, 1),
                        "ratio": round((bt / bs) / (st / ss), 2)})
            del m
            if a.device == "cuda":
                torch.cuda.empty_cache()
        info = {"torch": torch.__version__, "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None}
    except Exception as e:  # noqa: BLE001 - every failure ends the run without figures
        sys.stderr.write("hf_batched_generate: FAILED: %s: %s\n" % (type(e).__name__, e))
        return 1
    print(json.dumps({"bench": "transformers batched generate", **info, "results": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
