"""ojas.models: the GPT models of include/ojas/gpt.h (GPT-2, nanolab, the
Llama family) and their decoding (include/ojas/infer.h).

    model = ojas.models.GPT.create("nanolab-tiny", vocab_size=300, seed=1)
    model = ojas.models.GPT.from_pretrained("path/to/hf-dir-or-ojas-run")
    logits = model(idx)                       # idx [B, T] int64 -> [B, T, V]
    out = model.generate([[1, 2, 3]], max_new_tokens=20, temperature=0)
"""
import math
import os

from ojas import _C


def _check_sampling(fn, temperature, top_k, top_p, repetition_penalty):
    """The sampler's arguments as `ojas generate` takes them, else
    InvalidArgumentError naming the one that is not."""
    t, k, p, r = float(temperature), int(top_k), float(top_p), float(repetition_penalty)
    if not (t >= 0 and math.isfinite(t)):
        raise _C.InvalidArgumentError("%s: temperature must be finite and >= 0, got %r" % (fn, t))
    if k < 0:
        raise _C.InvalidArgumentError("%s: top_k must be >= 0 (0: off), got %d" % (fn, k))
    if not (0 < p <= 1):
        raise _C.InvalidArgumentError("%s: top_p must be in (0, 1] (1: off), got %r" % (fn, p))
    if not (r > 0 and math.isfinite(r)):
        raise _C.InvalidArgumentError("%s: repetition_penalty must be finite and > 0, got %r"
                                      % (fn, r))
    return t, k, p, r


class GPT:
    """A GPT over oj_gpt. Parameters are f32 leaves requiring grad, owned by
    the model, on its engine (`model.engine`); the model lives as long as
    this object (or, for `Trainer.model`, as long as its trainer)."""

    def __init__(self, c):
        if not isinstance(c, _C.GPT):
            raise TypeError("use GPT.create, GPT.from_pretrained or Trainer.model")
        self._c = c

    # ---------------------------------------------------------------- making
    @staticmethod
    def config(preset=None, **overrides):
        """The model config as a dict: preset's (`presets()`), with overrides
        (keys of the dict: family, vocab_size, block_size, n_layer, n_head,
        n_kv_head, n_embd, mlp_hidden, ...), checked (InvalidArgumentError
        naming the field)."""
        return _C.gpt_config(preset, overrides)

    @staticmethod
    def config_from_hf(path=None, *, config_json=None):
        """The model config of the Hugging Face config.json FILE at `path`
        (a path, not JSON text; `config_json=` is the keyword's former
        name): the fields oj_gpt_config_from_hf reads; unsupported ones
        raise InvalidArgumentError naming the file and field. A value that
        is not a path to a file raises InvalidArgumentError (JSON text, a
        directory) or IOError (nothing there), naming it cut short."""
        if (path is None) == (config_json is None):
            raise TypeError("GPT.config_from_hf() takes one path (path= or config_json=)")
        p = os.fspath(path if path is not None else config_json)
        shown = repr(p if len(p) <= 80 else p[:77] + "...")
        if p.lstrip().startswith("{"):
            raise _C.InvalidArgumentError(
                "GPT.config_from_hf: takes the path of a config.json file, not JSON text "
                "(got %s; write it to a file, or use json.loads for a dict)" % shown)
        if os.path.isdir(p):
            raise _C.InvalidArgumentError(
                "GPT.config_from_hf: %s is a directory: give the path of its config.json" % shown)
        return _C.gpt_config_from_hf(p)

    @staticmethod
    def presets():
        """The preset names of oj_gpt_preset."""
        return _C.gpt_presets()

    @classmethod
    def create(cls, config="nanolab-tiny", seed=0, engine=None, **overrides):
        """A new model: config is a preset name or a config dict (overrides
        apply to either); parameters drawn from (seed, parameter name) as
        oj_gpt_create does, so the same seed gives the model `ojas train`
        starts from."""
        if isinstance(config, str):
            cfg = _C.gpt_config(config, overrides)
        else:
            cfg = dict(config)
            cfg.update(overrides)
        return cls(_C.gpt_create(cfg, int(seed), engine))

    @classmethod
    def from_pretrained(cls, path, engine=None):
        """Load a Hugging Face model directory (config.json + safetensors:
        GPT-2, Llama, Mistral, Qwen2, Qwen3; oj_gpt_load_dir) or an ojas
        training checkpoint (a ckpt-NNNNNN directory or the run directory
        holding them: the latest valid one). A directory without
        config.json that holds state.json, `latest` or ckpt-* entries is a
        checkpoint; anything else is read as a Hugging Face directory (a
        missing one raises IOError naming config.json)."""
        path = os.fspath(path)
        if _is_checkpoint(path):
            return cls(_C.gpt_load_checkpoint(path, engine))
        return cls(_C.gpt_load_dir(path, engine))

    # ---------------------------------------------------------------- state
    @property
    def engine(self):
        return self._c.engine

    def get_config(self):
        """The model config (dict)."""
        return self._c.config()

    def save_pretrained(self, path, vocab_size=0):
        """Write a Hugging Face model directory (config.json and
        model.safetensors with transformers' names; oj_gpt_save_hf_dir),
        the embedding and head cut to vocab_size when it is > 0. Atomic
        writes; raises ojas.Error naming what failed."""
        self._c.save_hf_dir(os.fspath(path), int(vocab_size))

    def load_adapter(self, path):
        """Attach a LoRA adapter in PEFT's format (adapter_config.json +
        adapter_model.safetensors; oj_gpt_lora_load)."""
        self._c.lora_load(os.fspath(path))

    def save_adapter(self, path, base_model_name_or_path=""):
        """Write the attached adapters in PEFT's format (oj_gpt_lora_save)."""
        self._c.lora_save(os.fspath(path), base_model_name_or_path)

    def merge_adapter(self):
        """Fold the adapters into the weights and drop them (oj_gpt_lora_merge)."""
        self._c.lora_merge()

    def state_dict(self):
        """name -> parameter Tensor (the model's own tensors, not copies;
        the tied lm_head is transformer.wte.weight)."""
        return self._c.state_dict()

    def parameters(self):
        return list(self._c.state_dict().values())

    def named_parameters(self):
        return list(self._c.state_dict().items())

    def load_state_dict(self, tensors):
        """Copy tensors (a dict name -> Tensor, all names of state_dict())
        into the parameters, under no_grad."""
        own = self._c.state_dict()
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise _C.InvalidArgumentError("load_state_dict: missing %s, unexpected %s"
                                          % (missing, extra))
        grad = self.engine.grad_enabled
        self.engine.grad_enabled = False
        try:
            for k, p in own.items():
                p.copy_(tensors[k])
        finally:
            self.engine.grad_enabled = grad

    def load_safetensors(self, path):
        """Load a safetensors file of this model's parameters (HF GPT-2 names
        accepted; everything checked before any parameter changes)."""
        self._c.load_safetensors(os.fspath(path))

    def num_params(self):
        return self._c.num_params()

    def flops_per_token(self, T):
        """Training FLOPs per token at context T (6N + 12 L T C)."""
        return self._c.flops_per_token(int(T))

    def to(self, dtype):
        """Convert the parameters to a float dtype in place; returns self."""
        self._c.to_dtype(dtype)
        return self

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    # ---------------------------------------------------------------- running
    def forward(self, idx):
        """Logits [B, T, V] for idx [B, T] (int64/int32), on the tape when
        grad mode is on."""
        return self._c.forward(idx)

    __call__ = forward

    def loss(self, idx, targets):
        """Mean next-token cross-entropy (targets < 0 ignored), rank 0."""
        return self._c.loss(idx, targets)

    def generate(self, prompts, max_new_tokens=64, temperature=1.0, top_k=0, top_p=1.0,
                 repetition_penalty=1.0, seed=0, stop_token=None, on_token=None):
        """Generate for a prompt (a list of ids) or a list of prompts with a
        KV cache (oj_generate): temperature 0 is greedy; top_k 0 and top_p 1
        are off; sampling is a function of (seed, sequence, step). Stops at
        stop_token (not emitted) or max_new_tokens. on_token(seq, token) is
        called for each token; returning False stops that sequence. Returns
        the generated ids (a list, or a list of lists for several prompts)."""
        t, k, p, r = _check_sampling("generate", temperature, top_k, top_p, repetition_penalty)
        if not 0 <= int(seed) < 2**64:
            raise _C.InvalidArgumentError("generate: seed must be in [0, 2**64), got %d" % seed)
        if int(max_new_tokens) < 0:
            raise _C.InvalidArgumentError("generate: max_new_tokens must be >= 0, got %d"
                                          % max_new_tokens)
        single = len(prompts) > 0 and not isinstance(prompts[0], (list, tuple))
        batch = [list(prompts)] if single else [list(p) for p in prompts]
        out = self._c.generate(batch, t, k, p, r, int(seed), int(max_new_tokens),
                               -1 if stop_token is None else int(stop_token), on_token)
        return out[0] if single else out

    def kv_cache(self, batch, capacity):
        """A KV cache of `capacity` positions for `batch` sequences: its
        forward(idx [B, T]) gives the logits of T new tokens appended."""
        return self._c.kv_cache(int(batch), int(capacity))

    def decoder(self, capacity, use_graph=True):
        """Greedy static decoding of one sequence: prefill(prompt) -> next
        token, step() -> next token, set_token(t), logits() (a copy). On a
        CUDA engine the step replays a CUDA graph."""
        return self._c.decoder(int(capacity), bool(use_graph))


def _is_checkpoint(path):
    if os.path.exists(os.path.join(path, "config.json")) or not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return "state.json" in names or "latest" in names or any(n.startswith("ckpt-") for n in names)


def sample_logits(logits, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0,
                  history=(), u=0.5):
    """The token oj_sample_logits draws from logits (a 1-D float32 Tensor or
    numpy array of V) with uniform number u in [0, 1); -1 for logits that
    hold NaN or +inf, or only -inf (a -inf logit is a masked token, never
    drawn). Arguments out of range raise InvalidArgumentError, logits of
    another rank ShapeError."""
    import numpy as np
    t, k, p, r = _check_sampling("sample_logits", temperature, top_k, top_p, repetition_penalty)
    if not 0 <= float(u) < 1:
        raise _C.InvalidArgumentError("sample_logits: u must be in [0, 1), got %r" % float(u))
    arr = logits.numpy() if hasattr(logits, "engine") else np.asarray(logits)
    if arr.ndim != 1:
        raise _C.ShapeError("sample_logits: logits must be 1-D [V], got shape %s"
                            % (tuple(arr.shape),))
    buf = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
    return _C.sample_logits(buf, t, k, p, r, list(history), float(u))
