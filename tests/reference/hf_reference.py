"""A plain-PyTorch (1.13) reference of Hugging Face's Llama-family causal
language models, for tests/reference/test_hf_dir.py: LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM, written from
transformers' modeling files (transformers is not installed here), with
their parameter names, so a dict of random tensors can be written as a model
directory (config.json + safetensors) that transformers and ojas both read.

Per layer, h = RMSNorm(x) * input_layernorm.weight:
    q = h Wq^T (+ bq), k = h Wk^T (+ bk), v = h Wv^T (+ bv)   (Qwen2: biases)
    heads: q [B, H, T, D], k, v [B, Hkv, T, D], D = head_dim
    Qwen3: q, k = RMSNorm over D * q_norm.weight, k_norm.weight
    q, k = q cos + rotate_half(q) sin (and k), rotate_half(x) = cat(-x2, x1),
        cos/sin of t * inv_freq repeated twice, inv_freq = 1 / theta^(2i / D)
        (rope_scaling "llama3": rescaled by wavelength, inv_freq())
    y = softmax(q k^T / sqrt(D) + causal) v      (kv head j serves H / Hkv
        query heads: repeat_kv)
    x = x + merge(y) Wo^T
    x = x + down(silu(gate(h2)) * up(h2)),  h2 = RMSNorm(x) * post_attention_layernorm.weight
logits = (RMSNorm(x) * model.norm.weight) lm_head^T (lm_head = embed_tokens
when tie_word_embeddings). RMSNorm(x) = x / sqrt(mean(x^2) + eps).

Everything runs in the inputs' dtype (the test uses float64)."""

import math

import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def inv_freq(cfg, D):
    """The rotary frequencies: 1 / theta^(2i / D), rescaled as transformers'
    _compute_llama3_parameters for rope_scaling {"rope_type": "llama3"}."""
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    assert rs["rope_type"] == "llama3"
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, llama)


def rotary(x, cfg):
    """x [B, n, T, D] at positions 0..T-1 (LlamaRotaryEmbedding)."""
    T, D = x.shape[-2], x.shape[-1]
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq(cfg, D))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    return x * cos + rotate_half(x) * sin


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def param_shapes(cfg):
    """name -> shape, in transformers' state_dict order."""
    C, V, Fh = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    arch = cfg["architectures"][0]
    s = {"model.embed_tokens.weight": (V, C)}
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        s[p + "self_attn.q_proj.weight"] = (H * D, C)
        if arch == "Qwen2ForCausalLM":
            s[p + "self_attn.q_proj.bias"] = (H * D,)
        s[p + "self_attn.k_proj.weight"] = (Hkv * D, C)
        if arch == "Qwen2ForCausalLM":
            s[p + "self_attn.k_proj.bias"] = (Hkv * D,)
        s[p + "self_attn.v_proj.weight"] = (Hkv * D, C)
        if arch == "Qwen2ForCausalLM":
            s[p + "self_attn.v_proj.bias"] = (Hkv * D,)
        s[p + "self_attn.o_proj.weight"] = (C, H * D)
        if arch == "Qwen3ForCausalLM":
            s[p + "self_attn.q_norm.weight"] = (D,)
            s[p + "self_attn.k_norm.weight"] = (D,)
        s[p + "mlp.gate_proj.weight"] = (Fh, C)
        s[p + "mlp.up_proj.weight"] = (Fh, C)
        s[p + "mlp.down_proj.weight"] = (C, Fh)
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
    s["model.norm.weight"] = (C,)
    if not cfg.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (V, C)
    return s


def random_params(cfg, gen):
    """float32: matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 0.5), norm
    weights ~ 1 + N(0, 0.1), biases ~ N(0, 0.1)."""
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name == "model.embed_tokens.weight":
            t = torch.randn(shape, generator=gen) * 0.5
        elif "norm" in name:
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        out[name] = t.float().contiguous()
    return out


def _attention(cfg, P, p, h):
    B, T, _ = h.shape
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)

    def proj(n, heads):
        y = F.linear(h, P[p + "self_attn.%s_proj.weight" % n], P.get(p + "self_attn.%s_proj.bias" % n))
        return y.view(B, T, heads, D)

    q, k, v = proj("q", H), proj("k", Hkv), proj("v", Hkv)
    if p + "self_attn.q_norm.weight" in P:
        q = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, P[p + "self_attn.k_norm.weight"], eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q, k = rotary(q, cfg), rotary(k, cfg)
    k = k.repeat_interleave(H // Hkv, dim=1)  # repeat_kv
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = q @ k.transpose(2, 3) / math.sqrt(D)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.softmax(s, dim=-1) @ v
    return F.linear(y.transpose(1, 2).reshape(B, T, H * D), P[p + "self_attn.o_proj.weight"])


def forward(cfg, P, idx):
    """Logits [B, T, V] for idx [B, T] (int64)."""
    eps = cfg.get("rms_norm_eps", 1e-6)
    x = F.embedding(idx, P["model.embed_tokens.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        x = x + _attention(cfg, P, p, rms_norm(x, P[p + "input_layernorm.weight"], eps))
        h2 = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(F.linear(h2, P[p + "mlp.gate_proj.weight"])) * F.linear(h2, P[p + "mlp.up_proj.weight"])
        x = x + F.linear(m, P[p + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["model.embed_tokens.weight"]
    return x @ head.t()


def greedy(fwd, prompt, n):
    """n greedy tokens after prompt (1-D int64) by full recompute: fwd(idx
    [1, T]) -> logits [1, T, V]."""
    seq = prompt.clone()
    out = []
    for _ in range(n):
        t = int(torch.argmax(fwd(seq.view(1, -1))[0, -1]))
        out.append(t)
        seq = torch.cat([seq, torch.tensor([t])])
    return out
