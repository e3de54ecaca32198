"""PyTorch CPU peer for bench/cpu/bench_cpu_*.c (Debian python3-torch 1.13).

The models are the ones of ../shared/anchors/cpu/torch_bench.py (the CPU
anchors), so numbers compare with RESULTS-2026-11-29.md:
  block     one GPT-2 block (pre-LN, causal attention, GELU(tanh) 4x MLP,
            biases), d, heads, T, B as given: forward+backward of sum(out).
  gpt       4 such blocks, vocab 4096, learned positions, final LayerNorm,
            tied lm_head: one AdamW step (forward, cross-entropy, backward,
            step, zero_grad).
  attention F.scaled_dot_product_attention is not in torch 1.13, so the
            explicit (q k^T * scale, causal mask, softmax, @ v) forward and
            backward, as the block computes it.
  softmax / layer_norm / gelu_tanh / gelu_erf: the op forward (+backward)
            on [N, C]; gelu_tanh is F.gelu(approximate="tanh"), gelu_erf
            the exact F.gelu.
The caller sets the environment (threads, OpenBLAS core, malloc tunables);
this prints one JSON line: {"part": ..., "ms": median, "min": ..., ...}.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, t_max):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(t_max, t_max, dtype=torch.bool)).view(1, 1, t_max, t_max))

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        y = attention(q, k, v, self.mask[:, :, :T, :T])
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


def attention(q, k, v, mask):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, n_head, t_max):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head, t_max)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, t_max, n_layer, d, n_head):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(t_max, d)
        self.blocks = nn.ModuleList([Block(d, n_head, t_max) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, dtype=torch.long))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def timeit(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--part", required=True,
                    choices=["block", "gpt", "attention", "softmax", "layer_norm", "gelu_tanh",
                             "gelu_erf"])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--N", type=int, default=2048)
    ap.add_argument("--C", type=int, default=1024)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d, nh, T, B = a.d, a.heads, a.T, a.B
    out = {"part": a.part, "threads": torch.get_num_threads(), "torch": torch.__version__}
    if a.part == "block":
        blk = Block(d, nh, T)
        x = torch.randn(B, T, d, requires_grad=True)

        def fn():
            for p in blk.parameters():
                p.grad = None
            x.grad = None
            blk(x).sum().backward()
    elif a.part == "gpt":
        model = GPT(a.vocab, T, a.layers, d, nh)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
        g = torch.Generator().manual_seed(1)
        idx = torch.randint(0, a.vocab, (B, T), generator=g)
        tgt = torch.randint(0, a.vocab, (B, T), generator=g)

        def fn():
            loss = model(idx, tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    elif a.part == "attention":
        hd = d // nh
        q = torch.randn(B, nh, T, hd, requires_grad=True)
        k = torch.randn(B, nh, T, hd, requires_grad=True)
        v = torch.randn(B, nh, T, hd, requires_grad=True)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)

        def fn():
            q.grad = k.grad = v.grad = None
            attention(q, k, v, mask).sum().backward()
    else:
        x = torch.randn(a.N, a.C, requires_grad=True)
        w = torch.ones(a.C, requires_grad=True)
        bias = torch.zeros(a.C, requires_grad=True)
        gy = torch.randn(a.N, a.C)
        op = {"softmax": lambda t: F.softmax(t, dim=-1),
              "layer_norm": lambda t: F.layer_norm(t, (a.C,), w, bias, 1e-5),
              "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
              "gelu_erf": F.gelu}[a.part]

        def fn():
            x.grad = w.grad = bias.grad = None
            op(x).backward(gy)
    ts = timeit(fn, a.warmup, a.iters)
    out.update({"ms": round(statistics.median(ts), 4), "min": round(min(ts), 4), "max": round(max(ts), 4), "n": len(ts)})
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
