#!/usr/bin/env python3
"""Write the seed corpora of the data and training-config fuzz targets
(deterministic; stdlib only).

    python3 tests/fuzz/make_corpus_data.py

tests/fuzz/corpus/fuzz_tokenizer/     flags byte, then
    encoder.json|OJSEP|vocab.bpe|OJSEP|ranks.tiktoken|OJSEP|text, over a
    tiny vocabulary (256 byte tokens, a few merges, <|endoftext|>).
tests/fuzz/corpus/fuzz_shard/         12 parameter bytes, then a .bin shard.
tests/fuzz/corpus/fuzz_train_config/  flags byte, then JSON|OJSEP|key=value
    lines.
tests/fuzz/corpus/fuzz_hf_config/     flags byte, then a Hugging Face
    config.json (flags bit 1: a generation_config.json).
"""
import base64
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"|OJSEP|"


def bytes_to_unicode():
    """GPT-2's byte -> printable character map, in GPT-2's byte order."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
          + list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


BYTE_ORDER = bytes_to_unicode()
B2U = dict(BYTE_ORDER)
MERGES = [(b" ", b"t"), (b"h", b"e"), (b" t", b"he"), (b"i", b"n"), (b" ", b"w"),
          (b"o", b"r"), (b" w", b"or"), (b"l", b"d"), (b"\n", b"\n"), (b"1", b"2")]


def gpt2_str(b):
    return "".join(B2U[x] for x in b)


def gpt2_files(merges=MERGES, eot=True, drop_byte=None, edit=None):
    enc = {}
    for i, (b, _) in enumerate(BYTE_ORDER):
        if b != drop_byte:
            enc[gpt2_str(bytes([b]))] = i
    for k, (a, b) in enumerate(merges):
        enc[gpt2_str(a + b)] = 256 + k
    if eot:
        enc["<|endoftext|>"] = 256 + len(merges)
    if edit:
        edit(enc)
    ej = json.dumps(enc, ensure_ascii=False).encode()
    bpe = "#version: 0.2\n" + "".join("%s %s\n" % (gpt2_str(a), gpt2_str(b)) for a, b in merges)
    return ej, bpe.encode()


def tiktoken_file(merges=MERGES, extra=b""):
    lines = [base64.b64encode(bytes([b])) + b" %d" % i for i, (b, _) in enumerate(BYTE_ORDER)]
    lines += [base64.b64encode(a + b) + b" %d" % (256 + k) for k, (a, b) in enumerate(merges)]
    return b"\n".join(lines) + b"\n" + extra


TEXT = "the world in 12 words:\n\n  Hello <|endoftext|> wor\u00efld 東京 \U0001F916 'll\t\r\n".encode() + b"\xff\xc3("


def tok_seed(flags, enc, bpe, tt, text=TEXT):
    return bytes([flags]) + enc + SEP + bpe + SEP + tt + SEP + text


def tokenizer_seeds():
    ej, bpe = gpt2_files()
    tt = tiktoken_file()
    s = {}
    for name, flags in [("valid_direct", 0), ("valid_dirload", 1), ("valid_allow_special", 2),
                        ("valid_special_as_text", 4), ("valid_bad_encode_flags", 6),
                        ("valid_save_reload", 8 | 2), ("valid_parallel", 16 | 4),
                        ("valid_everything", 1 | 2 | 8 | 16)]:
        s[name] = tok_seed(flags, ej, bpe, tt)
    s["valid_empty_text"] = tok_seed(0, ej, bpe, tt, b"")
    s["valid_crlf"] = tok_seed(8, ej, bpe.replace(b"\n", b"\r\n"), tt.replace(b"\n", b"\r\n"))
    s["valid_no_merges"] = tok_seed(8, *gpt2_files(merges=[]), tiktoken_file(merges=[]))
    s["valid_no_eot"] = tok_seed(2, *gpt2_files(eot=False), tt)
    s["bad_json"] = tok_seed(0, ej[:-5], bpe, tt[:-9])
    s["bad_not_object"] = tok_seed(0, b"[1, 2, 3]", bpe, b"")
    s["bad_missing_byte"] = tok_seed(0, *gpt2_files(drop_byte=ord("q")),
                                     tiktoken_file().replace(base64.b64encode(b"q") + b" ", b"YQ== "))
    s["bad_duplicate_id"] = tok_seed(0, *gpt2_files(edit=lambda e: e.__setitem__("<|x|>", 3)),
                                     tt + base64.b64encode(b"zz") + b" 3\n")
    s["bad_id_negative"] = tok_seed(0, *gpt2_files(edit=lambda e: e.__setitem__("!", -1)),
                                    tt + b"enp6 -4\n")
    s["bad_id_not_int"] = tok_seed(0, *gpt2_files(edit=lambda e: e.__setitem__("!", "1")),
                                   tt + b"enp6 1x\n")
    # found by fuzzing: a huge id sized the id table by it (gigabytes)
    s["bad_id_huge"] = tok_seed(0, *gpt2_files(edit=lambda e: e.__setitem__("<|big|>", 2000000000)),
                                tt + b"enp6 2000000000\n")
    s["bad_merge_unknown"] = tok_seed(0, ej, bpe + "q \u0120\n".encode(), tt)
    s["bad_merge_order"] = tok_seed(0, ej, bpe.replace(b"\xc4\xa0 t\n", b"") + "\u0120 t\n".encode(), tt)
    s["bad_merge_line"] = tok_seed(0, ej, bpe + b"a  b\n", tt + b"YQ==  300\n")
    s["bad_key_not_gpt2"] = tok_seed(0, *gpt2_files(edit=lambda e: e.__setitem__(" x", 400)),
                                     tt + b"YQ 300\n")
    s["bad_base64"] = tok_seed(0, ej, bpe, tt + b"Y=Q= 300\n")
    s["bad_duplicate_bytes"] = tok_seed(0, ej, bpe, tt + base64.b64encode(b"a") + b" 300\n")
    s["bad_empty"] = tok_seed(0, b"", b"", b"")
    # a vocab.bpe cut short: the last merges' results would become "specials"
    s["bad_vocab_bpe_truncated"] = tok_seed(0, ej, b"\n".join(bpe.split(b"\n")[:-3]) + b"\n", tt)
    s["bad_vocab_bpe_empty"] = tok_seed(1, ej, b"", tt)
    s["valid_eot_also_a_rank"] = tok_seed(2, ej, bpe, tt + base64.b64encode(b"<|endoftext|>") + b" 300\n")
    return s


def shard(tokens, version=1, count=None, magic=20240520, trailing=b"", cut=0, reserved=None):
    header = struct.pack("<3i", magic, version, len(tokens) if count is None else count)
    header += b"\0" * (1024 - len(header))
    if reserved is not None:  # (header int index, value): must be 0 in a valid shard
        k, v = reserved
        header = header[:4 * k] + struct.pack("<i", v) + header[4 * k + 4:]
    body = b"".join(struct.pack("<H" if version == 1 else "<I", t) for t in tokens)
    data = header + body + trailing
    return data[:len(data) - cut] if cut else data


def params(start=0, n=4, T=3, B=1, flags=0, vocab=0):
    return struct.pack("<2i4B", start, n, T, B, flags, vocab)


def shard_seeds():
    toks = [50256, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 65535, 0, 17, 300, 2, 50256]
    s = {
        "valid_v1": params() + shard(toks),
        "valid_v1_shuffle_i32": params(2, 7, 4, 2, 3) + shard(toks),
        "valid_v2": params(1, 3, 2, 3, 1) + shard(toks + [70000, 100000], 2),
        "valid_v2_negative_token": params(0, 5) + shard([1, 2, 0xFFFFFFFF, 3, 4], 2),
        "valid_vocab_limit": params(0, 2, 2, 1, 0, 1) + shard(toks),
        "valid_empty": params(0, 0) + shard([]),
        "valid_one_token": params(0, 1) + shard([7]),
        "valid_range_outside": params(-3, 2147483647) + shard(toks),
        "bad_magic": params() + shard(toks, magic=20240521),
        "bad_version0": params() + shard(toks, 0),
        "bad_version3": params() + shard(toks, 3),
        "bad_negative_count": params() + shard(toks, count=-1),
        "bad_huge_count": params() + shard(toks, count=0x7FFFFFFF),
        "bad_count_short": params() + shard(toks, count=len(toks) - 1),
        "bad_truncated": params() + shard(toks, cut=1),
        "bad_trailing": params() + shard(toks, trailing=b"\0\0"),
        "bad_short_header": params() + shard([])[:1000],
        "bad_no_file_bytes": params(),
        "bad_reserved_nonzero": params() + shard(toks, reserved=(3, 1)),
        "bad_reserved_last": params() + shard(toks, reserved=(255, -1)),
        "valid_token_over_vocab_limit": params(0, 2, 2, 1, 0, 2) + shard(toks + [200]),
    }
    return s


CONFIG = {
    "model": "nanolab-tiny", "vocab_size": 512, "block_size": 64, "n_layer": 2, "n_head": 4,
    "n_kv_head": 2, "n_embd": 64, "mlp_hidden": 128, "data_dir": "data/tiny",
    "tokenizer_dir": "tok", "batch_size": 4, "seq_len": 32, "grad_accum": 2, "max_steps": 100,
    "time_limit_seconds": 60.5, "optimizer": "adamw", "lr": 0.003, "muon_lr": 0.02,
    "min_lr": 0.0003, "muon_momentum": 0.95, "warmup_steps": 10, "schedule": "wsd",
    "cooldown_frac": 0.3, "weight_decay": 0.1, "betas": [0.9, 0.99], "adam_eps": 1e-8,
    "grad_clip": 1.0, "eval_every": 50, "eval_batches": 2, "ckpt_every": 50, "keep_last": 2,
    "log_every": 5, "seed": 42, "shuffle": False, "threads": 2, "numerics": "exact",
    "device": "cuda:1", "dtype": "bf16", "peak_flops": 1e12, "budget_bytes": 1000000000,
}


def cfg_seed(flags, text, sets=b""):
    if isinstance(text, (dict, list)):
        text = json.dumps(text)
    if isinstance(text, str):
        text = text.encode()
    return bytes([flags]) + text + SEP + sets


SETS = (b"model=gpt2-tiny\nlr=1e-3\nmin_lr=0.5\nbetas=0.8,0.9\nbetas=[0.1,0.2]\nseed=1e6\n"
        b"shuffle=1\ndevice=cuda\nmax_steps=12x\nnope=1\n=3\nlr\nschedule=constant\n"
        b"n_head=8\nn_kv_head=0\nvocab_size=-1")


def config_seeds():
    s = {
        "valid_full": cfg_seed(0, CONFIG),
        "valid_full_file": cfg_seed(1, CONFIG),
        "valid_state_json": cfg_seed(2, {"step": 7, "tokens_seen": 100, "config": CONFIG,
                                         "model": {"preset": "nanolab-tiny"}}),
        "valid_sets_then_json": cfg_seed(3, {"lr": 0.01}, SETS),
        "valid_sets": cfg_seed(0, "{}", SETS),
        "valid_check_refuses": cfg_seed(0, {"model": "gpt2-tiny", "n_head": 3, "seq_len": 1 << 20}),
        "valid_check_minlr": cfg_seed(0, {"lr": 0.001, "min_lr": 0.1, "data_dir": ""}),
        "valid_real_ints": cfg_seed(0, {"max_steps": 1e6, "seed": 9.2e18, "budget_bytes": 0.0}),
        "bad_json": cfg_seed(0, '{"lr": 0.1,'),
        "bad_json_file": cfg_seed(1, '{"lr": 0.1,}'),
        "bad_not_object": cfg_seed(0, "[1, 2]"),
        "bad_unknown_key": cfg_seed(0, {"lr": 0.1, "learning_rate": 0.1}),
        "bad_duplicate_key": cfg_seed(0, '{"lr": 0.1, "lr": 0.2}'),
        "bad_types": cfg_seed(0, {"batch_size": "8"}, b"batch_size=eight\nshuffle=yes"),
        "bad_range": cfg_seed(0, {"threads": 5000}, b"threads=-1\nbeta=0.5\nbetas=1,0.5\nbetas=0.5"),
        "bad_fraction": cfg_seed(0, {"seq_len": 2.5}, b"cooldown_frac=1.5\nmuon_momentum=nan\nlr=inf"),
        "bad_long_string": cfg_seed(0, {"model": "m" * 100}, b"model=" + b"m" * 70),
        "bad_device": cfg_seed(0, {"device": "cuda:x"}, b"device=cuda:99999\ndevice=tpu\ndevice=cuda:-1"),
        "bad_enum": cfg_seed(0, {"optimizer": "sgd"}, b"schedule=linear\nnumerics=FAST"),
        "bad_dtype": cfg_seed(0, {"dtype": "bfloat16"}, b"dtype=f64\ndtype=\ndtype=1"),
        "bad_state_no_config": cfg_seed(2, {"step": 1}),
        "bad_state_config_bad": cfg_seed(2, {"config": {"lr": -1}}),
        "bad_state_config_not_object": cfg_seed(2, {"config": [1]}),
        "bad_huge_int": cfg_seed(0, '{"max_steps": 99999999999999999999, "seed": -1}',
                                 b"max_steps=99999999999999999999\nseed=-5\nwarmup_steps=1e300"),
        "bad_nul": cfg_seed(0, b'{"model": "a\\u0000b"}', b"model=a\0b"),
        # found by fuzzing: a --set string value that is not UTF-8 was refused
        # without a message
        "bad_set_non_utf8_value": cfg_seed(0, {"device": "cuda:x"},
                                           b"device=cuda:99999\ndevice=tpu\ndevice=\xedcuda:-1"),
    }
    return s


def hf_config_seeds():
    """Tiny configs of every architecture, transformers' shapes of real ones,
    and one per refused field."""
    llama = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16,
             "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1, "max_position_embeddings": 8, "rms_norm_eps": 1e-5,
             "rope_theta": 10000.0, "tie_word_embeddings": False, "rope_scaling": None,
             "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}

    def seed(flags, cfg):
        text = cfg if isinstance(cfg, bytes) else json.dumps(cfg).encode()
        return bytes([flags]) + text

    def v(**kw):
        c = dict(llama)
        c.update(kw)
        return c

    return {
        "gpt2_tiny": seed(0, {"architectures": ["GPT2LMHeadModel"], "vocab_size": 16,
                               "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2,
                               "activation_function": "gelu_new", "n_inner": None}),
        "gpt2_defaults_file": seed(1, {"model_type": "gpt2"}),
        "llama_tiny": seed(0, llama),
        "llama_tiny_file": seed(1, llama),
        "mistral_window": seed(0, v(architectures=["MistralForCausalLM"], sliding_window=4)),
        "qwen2_tied": seed(0, v(architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
                                use_sliding_window=False)),
        "qwen3_head_dim": seed(0, v(architectures=["Qwen3ForCausalLM"], head_dim=4,
                                    layer_types=["full_attention"])),
        "llama32_1b": seed(0, v(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                num_hidden_layers=16, num_attention_heads=32,
                                num_key_value_heads=8, max_position_embeddings=131072,
                                rope_theta=500000.0, tie_word_embeddings=True,
                                rope_scaling={"factor": 32.0, "high_freq_factor": 4.0,
                                              "low_freq_factor": 1.0, "rope_type": "llama3",
                                              "original_max_position_embeddings": 8192})),
        "llama3_rope_tiny": seed(0, v(rope_scaling={"factor": 8.0, "high_freq_factor": 4.0,
                                                    "low_freq_factor": 1.0, "rope_type": "llama3",
                                                    "original_max_position_embeddings": 4})),
        # found by fuzzing: a context of one position (the target forwarded two)
        "llama_context_1": seed(1, v(max_position_embeddings=1)),
        # found by fuzzing: a control character of an architecture's name was
        # echoed into the message, which then took two lines
        "bad_arch_newline": seed(0, v(architectures=["Qw\n2ForCausalLM"])),
        "bad_values_control_chars": seed(0, v(hidden_act="si\tlu",
                                              rope_scaling={"rope_type": "ya\rrn"})),
        "bad_rope_yarn": seed(0, v(rope_scaling={"factor": 4.0, "rope_type": "yarn"})),
        "tf5_rope_parameters": seed(0, v(rope_parameters={"rope_type": "default",
                                                          "rope_theta": 1e6})),
        "bad_arch": seed(0, v(architectures=["FalconForCausalLM"])),
        "bad_act": seed(0, v(hidden_act="gelu")),
        "bad_gqa": seed(0, v(num_key_value_heads=3)),
        "bad_types": seed(0, v(hidden_size="16", rms_norm_eps=-1, tie_word_embeddings=1)),
        "bad_json": seed(0, b'{"architectures": ["LlamaForCausalLM"], "vocab_size": 3\n2'),
        "bad_not_object": seed(0, b"[1, 2]"),
        # generation_config.json (flags bit 1): GPT-2's, Llama 3's, refusals
        "gen_gpt2": seed(2, {"bos_token_id": 50, "eos_token_id": 50,
                             "transformers_version": "4.40.0", "_from_model_config": True}),
        "gen_llama3_file": seed(3, {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 8, 9],
                                    "max_length": 4096, "temperature": 0.6, "top_p": 0.9}),
        "gen_greedy_limits": seed(2, {"do_sample": False, "max_new_tokens": 12, "top_k": 0,
                                      "repetition_penalty": 1.1, "pad_token_id": 3,
                                      "num_beams": 1, "min_p": None}),
        "gen_bad_beams": seed(2, {"num_beams": 4, "eos_token_id": 2}),
        "gen_bad_values": seed(2, {"eos_token_id": [1, 1000], "top_p": 0, "do_sample": "yes"}),
        "gen_bad_sample_t0": seed(2, {"do_sample": True, "temperature": 0}),
        "gen_bad_json": seed(3, b'{"eos_token_id": [1, 2'),
    }


def write(dirname, seeds):
    d = os.path.join(HERE, "corpus", dirname)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print("%s: %d seeds" % (d, len(seeds)))


if __name__ == "__main__":
    write("fuzz_tokenizer", tokenizer_seeds())
    write("fuzz_shard", shard_seeds())
    write("fuzz_train_config", config_seeds())
    write("fuzz_hf_config", hf_config_seeds())
