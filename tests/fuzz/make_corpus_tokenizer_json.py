#!/usr/bin/env python3
"""Write the seed corpus of fuzz_tokenizer_json (deterministic; stdlib only).

    python3 tests/fuzz/make_corpus_tokenizer_json.py

tests/fuzz/corpus/fuzz_tokenizer_json/  flags byte, then
    tokenizer.json|OJSEP|text: small byte-level BPE files (Split regex +
    ByteLevel, ByteLevel's own GPT-2 regex, NFC, both merge formats,
    ignore_merges, added tokens, a template), a SentencePiece-style file
    (Prepend/Replace normalizer or a Metaspace pre-tokenizer, byte_fallback),
    and one file per refusal.
"""
import copy
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"|OJSEP|"
MS = "\u2581"


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
          + list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


B2U = bytes_to_unicode()


def bl(s):
    return "".join(B2U[b] for b in s.encode())


def byte_level(pairs=False, ignore_merges=False, split=True, nfc=False):
    vocab = {B2U[b]: b for b in range(256)}
    merges = []
    for a, b in [(" ", "t"), ("h", "e"), (" t", "he"), ("i", "n"), ("'", "s"), (" ", "w")]:
        vocab.setdefault(bl(a + b), len(vocab))
        merges.append([bl(a), bl(b)] if pairs else bl(a) + " " + bl(b))
    n = len(vocab)
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
           "use_regex": not split}
    if split:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
                                          "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
                                          "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                          "\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            dict(pre, use_regex=False)]}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": n, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True},
            {"id": n + 1, "content": "<think>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": False}],
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<|endoftext|>": {
                               "id": "<|endoftext|>", "ids": [n], "tokens": ["<|endoftext|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": merges},
    }


def sentencepiece():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for t in [MS, "t", "h", "e", MS + "t", "he", MS + "the", MS + "th"]:
        vocab.setdefault(t, len(vocab))
    merges = [MS + " t", "h e", MS + "t he", MS + "t h"]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, c in enumerate(["<unk>", "<s>", "</s>"])],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": MS},
            {"type": "Replace", "pattern": {"String": " "}, "content": MS}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1],
                                                                  "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": MS}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "vocab": vocab, "merges": merges},
    }


TEXT = ("Hello the world! It's THE 1234567 'S \u017f caf\u00e9 cafe\u0301 \u6771\u4eac "
        "\U0001F916 <|endoftext|> <think> <s> a  b\r\n\n\t\u0085\ufeff end").encode()


def seed(flags, tj, text=TEXT):
    body = tj if isinstance(tj, bytes) else json.dumps(tj, ensure_ascii=False).encode()
    return bytes([flags]) + body + SEP + text


def edit(base, fn):
    t = copy.deepcopy(base)
    fn(t)
    return t


def seeds():
    b, sp = byte_level(), sentencepiece()
    s = {}
    for name, flags in [("valid_direct", 0), ("valid_dirload", 1), ("valid_allow_special", 2),
                        ("valid_special_as_text", 4), ("valid_bad_encode_flags", 6)]:
        s[name] = seed(flags, b)
    s["valid_pairs_format"] = seed(2, byte_level(pairs=True))
    s["valid_ignore_merges"] = seed(2, byte_level(ignore_merges=True))
    s["valid_gpt2_regex"] = seed(2, byte_level(split=False))
    s["valid_nfc"] = seed(2, byte_level(nfc=True))
    s["valid_sentencepiece"] = seed(2, sp)
    s["valid_sentencepiece_text_flags"] = seed(4, sp)
    meta = edit(sp, lambda t: (t.__setitem__("normalizer", None),
                               t.__setitem__("pre_tokenizer", {
                                   "type": "Metaspace", "replacement": MS,
                                   "prepend_scheme": "first", "split": False})))
    s["valid_metaspace"] = seed(2, meta)
    s["bad_metaspace_split"] = seed(0, edit(meta, lambda t: t["pre_tokenizer"]
                                            .__setitem__("split", True)))
    s["valid_invalid_utf8_text"] = seed(2, b, b"ab\xff\xc3 cd")
    s["valid_empty_text"] = seed(0, b, b"")
    full = json.dumps(b).encode()
    s["bad_truncated"] = seed(0, full[: len(full) // 2])
    s["bad_truncated_end"] = seed(0, full[:-1])
    s["bad_not_object"] = seed(0, b"[1, 2]")
    s["bad_empty"] = seed(0, b"")
    s["bad_model_type"] = seed(0, edit(b, lambda t: t["model"].__setitem__("type", "WordPiece")))
    s["bad_no_model"] = seed(0, edit(b, lambda t: t.pop("model")))
    s["bad_dropout"] = seed(0, edit(b, lambda t: t["model"].__setitem__("dropout", 0.1)))
    s["bad_normalizer"] = seed(0, edit(b, lambda t: t.__setitem__("normalizer",
                                                                  {"type": "Lowercase"})))
    s["bad_regex"] = seed(0, edit(b, lambda t: t["pre_tokenizer"]["pretokenizers"][0]["pattern"]
                                  .__setitem__("Regex", "\\w+|^x|a++")))
    s["bad_regex_pcre2"] = seed(0, edit(b, lambda t: t["pre_tokenizer"]["pretokenizers"][0]
                                        ["pattern"].__setitem__("Regex", "(?<=a+)b")))
    s["bad_behavior"] = seed(0, edit(b, lambda t: t["pre_tokenizer"]["pretokenizers"][0]
                                     .__setitem__("behavior", "Removed")))
    s["bad_missing_byte"] = seed(0, edit(b, lambda t: t["model"]["vocab"].pop("q")))
    s["bad_merge_result"] = seed(0, edit(b, lambda t: t["model"]["merges"].append("q z")))
    s["bad_merge_form"] = seed(0, edit(b, lambda t: t["model"]["merges"].append("a b c")))
    s["bad_id_huge"] = seed(0, edit(b, lambda t: t["model"]["vocab"].__setitem__("zz", 2**31 - 5)))
    s["bad_id_negative"] = seed(0, edit(b, lambda t: t["model"]["vocab"].__setitem__("zz", -1)))
    s["bad_duplicate_key"] = seed(0, full.replace(b'"vocab": {', b'"vocab": {"zz": 1, "zz": 2, ', 1))
    s["bad_added_lstrip"] = seed(0, edit(b, lambda t: t["added_tokens"][0]
                                         .__setitem__("lstrip", True)))
    s["bad_added_id_taken"] = seed(0, edit(b, lambda t: t["added_tokens"][0]
                                           .__setitem__("id", 5)))
    s["bad_template_unknown"] = seed(0, edit(b, lambda t: t["post_processor"]["special_tokens"]
                                             .clear()))
    s["bad_truncation"] = seed(0, edit(b, lambda t: t.__setitem__("truncation",
                                                                  {"max_length": 4})))
    s["bad_sp_missing_byte"] = seed(0, edit(sp, lambda t: t["model"]["vocab"].pop("<0x41>")))
    s["bad_sp_merge_part"] = seed(0, edit(sp, lambda t: t["model"]["merges"].append("x t")))
    s["bad_sp_decoder"] = seed(0, edit(sp, lambda t: t.__setitem__("decoder",
                                                                   {"type": "Metaspace"})))
    return s


if __name__ == "__main__":
    d = os.path.join(HERE, "corpus", "fuzz_tokenizer_json")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ss = seeds()
    for name, data in sorted(ss.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print("%s: %d seeds" % (d, len(ss)))
