#!/usr/bin/env python3
"""Write the seed corpus of fuzz_serve_request (deterministic; stdlib only).

    python3 tests/fuzz/make_corpus_serve.py

tests/fuzz/corpus/fuzz_serve_request/   flags byte (bit 0: chat, bit 1: also
    a tokenizer_config.json), then a request body.
"""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] "
          "+ '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}")

SEEDS = {
    "completion": (0, {"model": "m", "prompt": "The king said", "max_tokens": 8,
                       "temperature": 0.7, "top_p": 0.9, "top_k": 40, "n": 2, "seed": 5,
                       "stream": True, "stop": ["\n", "."], "logprobs": 1}),
    "completion_ids": (0, {"prompt": [1, 2, 3], "max_tokens": 0}),
    "completion_list": (0, {"prompt": ["one prompt"], "stop": "x"}),
    "bad_types": (0, {"prompt": "x", "max_tokens": "7", "temperature": "hot"}),
    "bad_range": (0, {"prompt": "x", "n": 99, "top_p": 2}),
    "chat": (1, {"messages": [{"role": "system", "content": " Be brief. "},
                              {"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hello"},
                              {"role": "user", "content": "Tell me"}],
                 "max_completion_tokens": 4, "logprobs": True, "stream": False}),
    "chat_bad_role": (1, {"messages": [{"role": "tool", "content": "x"}]}),
    "config_chatml": (3, {"chat_template": CHATML, "messages": [{"role": "user", "content": "q"}]}),
    "config_llama3": (3, {"chat_template": [{"name": "default", "template": LLAMA3}],
                          "messages": [{"role": "user", "content": "q"}]}),
    "config_unknown": (2, {"chat_template": "{{ messages }}\n", "prompt": "p"}),
}
RAW = {
    "bad_json": (0, b'{"prompt": "x", '),
    "dup_keys": (0, b'{"prompt": "x", "prompt": "y"}'),
    "not_object": (1, b"[1, 2, 3]"),
    "invalid_utf8": (2, b'{"prompt": "\xff\xfe"}'),
    "role_control_chars": (1, b'{"messages": [{"role": "assist\\nt", "content": "x"}]}'),
}


def main():
    d = os.path.join(HERE, "corpus", "fuzz_serve_request")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, (flags, obj) in SEEDS.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes([flags]) + json.dumps(obj).encode())
    for name, (flags, raw) in RAW.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes([flags]) + raw)


if __name__ == "__main__":
    main()
