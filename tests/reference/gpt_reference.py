"""A PyTorch (1.13) reference of the two GPT families of include/ojas/gpt.h,
written from their description, not from the C code, for
tests/reference/test_gpt_parity.py.

The model is functional: `forward(cfg, params, idx)` takes a dict of named
tensors (the state_dict, names as ojas and Hugging Face spell them), so the
same dict can be written to safetensors, loaded by ojas, and trained with
torch.optim.AdamW.

gpt2 (Radford et al. 2019, Hugging Face's GPT2LMHeadModel layout):
  x = wte[idx] + wpe[pos]; per block
    x = x + c_proj(attn(c_attn(ln_1(x))));  x = x + mlp(ln_2(x))
  with LayerNorm (eps 1e-5), Conv1D weights stored [in, out] (y = x W + b),
  mlp = c_proj(gelu_tanh(c_fc(.))), causal attention scaled by 1/sqrt(D);
  logits = ln_f(x) wte^T (tied head).

nanolab: x = wte[idx]; per block, with h = rms_1(x) (RMSNorm with weight,
eps 1e-6):
    q, k, v = h Wq^T, h Wk^T, h Wv^T split into H / Hkv / Hkv heads of D
    q, k = rope(rms(q)), rope(rms(k))      (parameter-free RMS over D)
    v = v0 + sigmoid(lambda_l) (v - v0)    (layers > 0; v0 = layer 0's v)
    y = causal_attention(q, k, v)          (kv heads repeated for GQA)
    y_h *= sigmoid(h W_g^T + b_g)[..., h]  (per-head output gate)
    x = x + o_proj(merge(y))
    x = x + w_down(silu(w_gate h2) * w_up h2),  h2 = rms_2(x)
  logits = rms_f(x) wte^T. Linear weights are [out, in] (y = x W^T).
  Rotary: half-split, angle(t, i) = t * theta^(-2i/D), i < D/2,
  out = cat(x1 cos - x2 sin, x2 cos + x1 sin), x1 = x[..., :D/2],
  x2 = x[..., D/2:].

Where the description leaves a choice open, this follows ojas's code
(src/models/gpt*.c): the nanolab parameter names (attn.{q,k,v,o}_proj,
attn.gate.{weight,bias} [H, C] / [H], attn.lambda [1] for layers > 0,
mlp.{gate,up,down}_proj); the gate and q/k/v all read h = rms_1(x), the
normalised block input; the QK-norm uses norm_eps; v0 is layer 0's value
projection as is (before attention, no norm); query head h uses kv head
h // (H / Hkv) (as torch's repeat_interleave; oj_scaled_dot_product_attention
documents the same); gpt2's wpe is [block_size, C].

Torch 1.13 has neither F.rms_norm nor F.scaled_dot_product_attention; both
are written here. Every function works in the dtype of its inputs (the test
runs it in float64 as the reference for ojas's float32)."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

GPT2, NANOLAB = 0, 1  # oj_gpt_family


@dataclass
class Config:
    family: int
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    mlp_hidden: int
    norm_eps: float
    rope_theta: float = 10000.0


# ---------------------------------------------------------------- building blocks

def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2 over the last dim) + eps) [* weight]."""
    y = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def rope(x, pos0, theta):
    """Half-split rotary embedding of x [..., T, D] for positions pos0..pos0+T-1
    (angles computed in float64)."""
    T, D = x.shape[-2], x.shape[-1]
    i = torch.arange(D // 2, dtype=torch.float64)
    inv = theta ** (-2.0 * i / D)
    t = torch.arange(pos0, pos0 + T, dtype=torch.float64)
    ang = torch.outer(t, inv)
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(D) + causal mask) v; q [B, H, T, D], k, v
    [B, Hkv, T, D] with Hkv dividing H: query head h uses kv head
    h // (H / Hkv) (kv heads repeated)."""
    H, Hkv, T, D = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def split_heads(x, n):
    B, T, C = x.shape
    return x.view(B, T, n, C // n).transpose(1, 2)


def merge_heads(y):
    B, H, T, D = y.shape
    return y.transpose(1, 2).reshape(B, T, H * D)


# ---------------------------------------------------------------- parameters

def param_shapes(cfg):
    """name -> shape of every parameter (the tied head is wte)."""
    C, V, F_, H, Hkv = cfg.n_embd, cfg.vocab_size, cfg.mlp_hidden, cfg.n_head, cfg.n_kv_head
    D = C // H
    s = {"transformer.wte.weight": (V, C)}
    if cfg.family == GPT2:
        s["transformer.wpe.weight"] = (cfg.block_size, C)
    for l in range(cfg.n_layer):
        p = "transformer.h.%d." % l
        s[p + "ln_1.weight"] = (C,)
        s[p + "ln_2.weight"] = (C,)
        if cfg.family == GPT2:
            s[p + "ln_1.bias"] = (C,)
            s[p + "ln_2.bias"] = (C,)
            s[p + "attn.c_attn.weight"] = (C, 3 * C)
            s[p + "attn.c_attn.bias"] = (3 * C,)
            s[p + "attn.c_proj.weight"] = (C, C)
            s[p + "attn.c_proj.bias"] = (C,)
            s[p + "mlp.c_fc.weight"] = (C, F_)
            s[p + "mlp.c_fc.bias"] = (F_,)
            s[p + "mlp.c_proj.weight"] = (F_, C)
            s[p + "mlp.c_proj.bias"] = (C,)
        else:
            s[p + "attn.q_proj.weight"] = (H * D, C)
            s[p + "attn.k_proj.weight"] = (Hkv * D, C)
            s[p + "attn.v_proj.weight"] = (Hkv * D, C)
            s[p + "attn.o_proj.weight"] = (C, H * D)
            s[p + "attn.gate.weight"] = (H, C)
            s[p + "attn.gate.bias"] = (H,)
            if l > 0:
                s[p + "attn.lambda"] = (1,)
            s[p + "mlp.gate_proj.weight"] = (F_, C)
            s[p + "mlp.up_proj.weight"] = (F_, C)
            s[p + "mlp.down_proj.weight"] = (C, F_)
    s["transformer.ln_f.weight"] = (C,)
    if cfg.family == GPT2:
        s["transformer.ln_f.bias"] = (C,)
    return s


def random_params(cfg, gen):
    """Random float32 weights of a scale that makes every part matter:
    matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 0.5), norm weights
    ~ 1 + N(0, 0.1), biases ~ N(0, 0.1), lambdas ~ N(0, 1)."""
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("wte.weight") or name.endswith("wpe.weight"):
            t = torch.randn(shape, generator=gen) * 0.5
        elif "ln_" in name and name.endswith(".weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("lambda"):
            t = torch.randn(shape, generator=gen)
        else:
            # Conv1D [in, out] (gpt2) or Linear [out, in] (nanolab).
            fan_in = shape[0] if cfg.family == GPT2 else shape[1]
            t = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
        out[name] = t.float().contiguous()
    return out


# ---------------------------------------------------------------- forward

def _block_gpt2(cfg, P, p, x):
    C, H = cfg.n_embd, cfg.n_head
    h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], cfg.norm_eps)
    qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
    q, k, v = qkv.split(C, dim=-1)
    y = causal_attention(split_heads(q, H), split_heads(k, H), split_heads(v, H))
    x = x + merge_heads(y) @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
    h2 = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], cfg.norm_eps)
    u = gelu_tanh(h2 @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
    return x + u @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]


def _block_nanolab(cfg, P, p, x, l, v_first):
    H, Hkv, eps = cfg.n_head, cfg.n_kv_head, cfg.norm_eps
    h = rms_norm(x, P[p + "ln_1.weight"], eps)
    q = split_heads(F.linear(h, P[p + "attn.q_proj.weight"]), H)
    k = split_heads(F.linear(h, P[p + "attn.k_proj.weight"]), Hkv)
    v = split_heads(F.linear(h, P[p + "attn.v_proj.weight"]), Hkv)
    q = rope(rms_norm(q, None, eps), 0, cfg.rope_theta)
    k = rope(rms_norm(k, None, eps), 0, cfg.rope_theta)
    if l == 0:
        v_first = v
    else:
        v = v_first + torch.sigmoid(P[p + "attn.lambda"]) * (v - v_first)
    y = causal_attention(q, k, v)                                    # [B, H, T, D]
    g = torch.sigmoid(F.linear(h, P[p + "attn.gate.weight"], P[p + "attn.gate.bias"]))  # [B, T, H]
    y = y * g.transpose(1, 2).unsqueeze(-1)
    x = x + F.linear(merge_heads(y), P[p + "attn.o_proj.weight"])
    h2 = rms_norm(x, P[p + "ln_2.weight"], eps)
    m = F.silu(F.linear(h2, P[p + "mlp.gate_proj.weight"])) * \
        F.linear(h2, P[p + "mlp.up_proj.weight"])
    return x + F.linear(m, P[p + "mlp.down_proj.weight"]), v_first


def forward(cfg, P, idx):
    """Logits [B, T, V] for idx [B, T] (int64)."""
    T = idx.shape[1]
    x = F.embedding(idx, P["transformer.wte.weight"])
    if cfg.family == GPT2:
        x = x + P["transformer.wpe.weight"][:T]
    v_first = None
    for l in range(cfg.n_layer):
        p = "transformer.h.%d." % l
        if cfg.family == GPT2:
            x = _block_gpt2(cfg, P, p, x)
        else:
            x, v_first = _block_nanolab(cfg, P, p, x, l, v_first)
    if cfg.family == GPT2:
        x = F.layer_norm(x, (cfg.n_embd,), P["transformer.ln_f.weight"],
                         P["transformer.ln_f.bias"], cfg.norm_eps)
    else:
        x = rms_norm(x, P["transformer.ln_f.weight"], cfg.norm_eps)
    return x @ P["transformer.wte.weight"].t()


def loss(cfg, P, idx, targets):
    """Mean next-token cross-entropy over all B*T positions."""
    logits = forward(cfg, P, idx)
    return F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
