"""ojas.data: the byte-level BPE tokenizer, token shards and the batch
loader of include/ojas/data.h.

    tok = ojas.data.Tokenizer.from_dir("tok")       # encoder.json + vocab.bpe, tokenizer.json
    ids = tok.encode("Hello world")
    text = tok.decode(ids)
    ojas.data.write_shard("train_000000.bin", ids)
    loader = ojas.data.Loader(ojas.data.list_shards("data", "train"), B=4, T=32)
    x, y = loader.next()
"""
import os

import numpy as np

from ojas import _C
from ojas._dtype import int64 as _int64

_SPECIAL = {"refuse": 0, "allow": 1, "text": 2}
_ERRORS = {"replace": 0, "strict": 1}


class Tokenizer:
    """A GPT-2-style byte-level BPE tokenizer (immutable once loaded)."""

    def __init__(self, c):
        if not isinstance(c, _C.Tokenizer):
            raise TypeError("use Tokenizer.from_dir, from_file, from_gpt2_files or train")
        self._c = c

    @classmethod
    def from_dir(cls, path):
        """encoder.json + vocab.bpe, else tokenizer.json, else one *.tiktoken
        file (oj_tokenizer_load)."""
        return cls(_C.tokenizer_load(os.fspath(path)))

    @classmethod
    def from_file(cls, tokenizer_json):
        """A Hugging Face tokenizer.json (BPE models; oj_tokenizer_load_hf)."""
        return cls(_C.tokenizer_load_hf(os.fspath(tokenizer_json)))

    @classmethod
    def from_gpt2_files(cls, encoder_json, vocab_bpe):
        return cls(_C.tokenizer_load_gpt2(os.fspath(encoder_json), os.fspath(vocab_bpe)))

    @classmethod
    def train(cls, texts, vocab_size, min_frequency=2, threads=0):
        """Learn byte-level BPE merges from texts (str or bytes each;
        oj_bpe_train, deterministic)."""
        return cls(_C.bpe_train(list(texts), int(vocab_size), int(min_frequency), int(threads)))

    def save(self, path):
        """Write encoder.json, vocab.bpe and ranks.tiktoken into path."""
        self._c.save(os.fspath(path))

    @property
    def vocab_size(self):
        return self._c.vocab_size()

    @property
    def eot(self):
        """Id of <|endoftext|> (or the file's eos token), None if none."""
        e = self._c.eot()
        return None if e < 0 else e

    def special_id(self, text):
        e = self._c.special_id(text)
        return None if e < 0 else e

    def token_bytes(self, id):
        return self._c.token_bytes(int(id))

    def encode(self, text, special="refuse"):
        """Ids of text (str or bytes). special: what the text of a special
        token in the input does: "refuse" (InvalidArgumentError), "allow"
        (its id) or "text" (encoded as ordinary text)."""
        if special not in _SPECIAL:
            raise ValueError("special must be 'refuse', 'allow' or 'text'")
        return self._c.encode(text, _SPECIAL[special])

    def decode(self, ids, errors="replace"):
        """Text of ids; invalid UTF-8 becomes U+FFFD ("replace") or raises
        CorruptError ("strict")."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self._c.decode(ids, _ERRORS[errors]).decode("utf-8", "surrogateescape")

    def decode_bytes(self, ids):
        """The raw bytes of ids."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self._c.decode(ids, 2)


def write_shard(path, tokens, version=None):
    """Write tokens (a sequence or array of ids) as an llm.c shard: version
    1 (uint16) when every id fits, else 2 (uint32); atomic."""
    a = np.ascontiguousarray(np.asarray(tokens, dtype=np.int64))
    if version is None:
        version = 1 if a.size == 0 or (a.min() >= 0 and a.max() < 65536) else 2
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise _C.OutOfRangeError("write_shard: a token does not fit int32")
    _C.shard_write(os.fspath(path), a.astype(np.int32).tobytes(), int(version))


def read_shard(path, vocab_size=0):
    """The tokens of a shard as an int32 numpy array (checked against
    vocab_size when > 0)."""
    _, data = _C.shard_read(os.fspath(path), int(vocab_size))
    return np.frombuffer(data, dtype=np.int32)


def list_shards(path, split="train"):
    """Sorted paths of path/<split>_*.bin."""
    return _C.shard_list(os.fspath(path), split)


class Loader:
    """Batches (inputs [B, T], targets [B, T]) of windows of T + 1 tokens
    from shards, sequential or shuffled by a keyed permutation, resumable
    from state() (oj_loader). Iterating gives batches forever (epochs
    follow each other)."""

    def __init__(self, paths, B, T, rank=0, world_size=1, shuffle=False, seed=0, dtype=_int64,
                 prefetch=True, vocab_size=0, engine=None):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self._c = _C.Loader([os.fspath(p) for p in paths], int(B), int(T), int(rank),
                            int(world_size), bool(shuffle), int(seed), dtype, bool(prefetch),
                            int(vocab_size))
        self.engine = engine

    def next(self):
        return self._c.next(self.engine)

    def __iter__(self):
        return self

    def __next__(self):
        return self._c.next(self.engine)

    def state(self):
        return self._c.state()

    def set_state(self, state):
        self._c.set_state(state)

    @property
    def num_windows(self):
        return self._c.num_windows()

    @property
    def steps_per_epoch(self):
        return self._c.steps_per_epoch()
