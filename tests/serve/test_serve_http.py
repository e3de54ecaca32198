#!/usr/bin/python3
"""`ojas serve` end to end: a tiny GPT-2 model directory (random weights,
a tokenizer trained on a small corpus), the server on a free loopback port,
driven by curl and by a standard-library client in OpenAI's request format.

Checks: greedy completions streamed == not streamed == `ojas generate
--numerics exact` for the prompt alone, also with other requests in the
batch; chat completions through the ChatML template; n, logprobs, stop;
/v1/models, /health, /metrics (with the steps' time by phase); 400 for
malformed JSON, wrong types, oversized bodies and prompts longer than the
context, 404/405, 503 for a
request larger than the KV pool, 429 for a full queue; a soak of a few
hundred requests with disconnects and bad bodies after which /metrics
shows no KV block in use; SIGTERM lets an in-flight stream finish and the
process exit 0, and with --shutdown-grace 0 answers every queued request (200 or
503, none cut off); a streaming client that stops reading does not slow the
server's steps.

Usage: test_serve_http.py --ojas PATH/TO/ojas  (ctest serve_http)."""
import argparse
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

C, L, H, V, P = 32, 2, 4, 320, 256  # width, layers, heads, vocabulary, context


def write_corpus(path):
    words = ("the king said unto him and of land people house lord went came day city water "
             "over river bread stone light night in they shall be upon").split()
    s = 2024
    out = []
    for sent in range(420):
        s = (s * 1664525 + 1013904223) % 2**32
        n = 4 + (s >> 24) % 7
        ws = []
        for w in range(n):
            s = (s * 1664525 + 1013904223) % 2**32
            ws.append(words[(s >> 16) % len(words)])
        ws[0] = ws[0].capitalize()
        out.append(" ".join(ws) + (".\n" if sent % 8 == 7 else ". "))
    with open(path, "w") as f:
        f.write("".join(out))


def write_gpt2_dir(d, positions=P):
    """config.json of a GPT2LMHeadModel (context `positions`) and random model.safetensors."""
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
                   "n_positions": positions, "n_embd": C, "n_layer": L, "n_head": H,
                   "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}, f)
    rng = random.Random(7)
    shapes = {"wte.weight": [V, C], "wpe.weight": [positions, C], "ln_f.weight": [C],
              "ln_f.bias": [C]}
    for l in range(L):
        h = "h.%d." % l
        shapes.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C], h + "ln_2.weight": [C],
                       h + "ln_2.bias": [C], h + "attn.c_attn.weight": [C, 3 * C],
                       h + "attn.c_attn.bias": [3 * C], h + "attn.c_proj.weight": [C, C],
                       h + "attn.c_proj.bias": [C], h + "mlp.c_fc.weight": [C, 4 * C],
                       h + "mlp.c_fc.bias": [4 * C], h + "mlp.c_proj.weight": [4 * C, C],
                       h + "mlp.c_proj.bias": [C]})
    header, blobs, off = {}, [], 0
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            vals = [1.0] * n
        elif len(shape) == 1:
            vals = [rng.gauss(0, 0.05) for _ in range(n)]
        else:
            vals = [rng.gauss(0, 0.3) for _ in range(n)]
        blob = struct.pack("<%df" % n, *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    hj = json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


class Server:
    def __init__(self, ojas, cwd, args):
        self.p = subprocess.Popen([ojas, "serve"] + args, cwd=cwd, stderr=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, text=True)
        line = self.p.stderr.readline()
        self.warnings = []  # printed before the start line
        while line.startswith("ojas: serve: warning:"):
            self.warnings.append(line)
            line = self.p.stderr.readline()
        if "http://" not in line:
            raise SystemExit("serve did not start: %r %s" % (line, self.p.stderr.read()))
        self.base = line.split("http://")[1].split()[0]
        self.host, self.port = self.base.split(":")
        self.log = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    def url(self, path):
        return "http://%s%s" % (self.base, path)


def request(srv, method, path, body=None, raw=None, timeout=60):
    """(status, parsed JSON or text) for one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(srv.url(path), data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            code = r.status
            ctype = r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        text, code, ctype = e.read().decode(), e.code, e.headers.get("Content-Type", "")
    return code, (json.loads(text) if "json" in ctype else text)


def stream(srv, path, body, timeout=60):
    """The SSE events' JSON objects of a stream: true request, and whether it ended in [DONE]."""
    body = dict(body, stream=True)
    req = urllib.request.Request(srv.url(path), data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    events, done = [], False
    with urllib.request.urlopen(req, timeout=timeout) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
        for line in r:
            line = line.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            events.append(json.loads(line[6:]))
    return events, done


def streamed_text(events, chat=False):
    out = {}
    for e in events:
        for c in e["choices"]:
            t = c["delta"].get("content", "") if chat else c["text"]
            out[c["index"]] = out.get(c["index"], "") + t
    return out


def metrics(srv):
    code, text = request(srv, "GET", "/metrics")
    assert code == 200, code
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            vals[k] = float(v)
    return vals


def sigterm_off_main(pid):
    """SIGTERM through a thread of the server other than main that does not block it (on
    Linux kill(tid) hands the signal to that thread; OpenBLAS makes such threads when it
    loads): the server stops gracefully whichever thread the kernel picks."""
    tids = []
    for tid in sorted(int(t) for t in os.listdir("/proc/%d/task" % pid)):
        with open("/proc/%d/task/%d/status" % (pid, tid)) as f:
            blk = [int(l.split()[1], 16) for l in f if l.startswith("SigBlk:")]
        if tid != pid and blk and not blk[0] & (1 << (signal.SIGTERM - 1)):
            tids.append(tid)
    if not tids:
        print("sigterm: no thread but main takes SIGTERM; sent to the process")
    os.kill(tids[0] if tids else pid, signal.SIGTERM)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ojas", required=True)
    ap.add_argument("--soak", type=int, default=1000)
    a = ap.parse_args()
    a.ojas = os.path.abspath(a.ojas)
    if shutil.which("curl") is None:
        print("skip: curl is not installed")
        return 77
    work = tempfile.mkdtemp(prefix="ojas-serve-")
    try:
        return run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(a, work):
    ojas = a.ojas
    write_corpus(os.path.join(work, "corpus.txt"))
    subprocess.run([ojas, "tokenizer", "train", "--vocab-size", "300", "--threads", "1", "--out",
                    "tokd", "corpus.txt"], cwd=work, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(work, "tokd", "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHATML}, f)
    write_gpt2_dir(os.path.join(work, "hf"))
    # refusals before serving: one line each, exit 2 for usage, 1 otherwise
    for args, rc_want, needle in [
            ([], 2, "--model"), (["--model", "hf", "--vocab", "tokd", "--port", "70000"], 2, "--port"),
            (["--model", "hf", "--vocab", "tokd", "--device", "cuda:99"], 1, "cuda"),
            (["--model", "hf", "--vocab", "tokd", "--kv-bytes", "1K"], 1, "holds no KV block"),
            (["--model", "hf", "--vocab", "tokd", "--max-batch", "8", "--max-step-tokens", "4"], 2,
             "--max-step-tokens"),
            (["--model", "hf", "--vocab", "tokd", "--max-queue", "0"], 2, "--max-queue"),
            (["--model", "hf", "--vocab", "tokd", "--timeout", "inf"], 2, "--timeout"),
            (["--model", "hf", "--vocab", "tokd", "--timeout", "1e12"], 2, "--timeout"),
            (["--model", "hf", "--vocab", "tokd", "--model-name", ""], 2, "--model-name"),
            (["--model", "nowhere"], 1, "does not exist")]:
        r = subprocess.run([ojas, "serve"] + args, cwd=work, capture_output=True, text=True)
        check(r.returncode == rc_want and needle in r.stderr and r.stderr.count("\n") == 1,
              "serve %s: %d %r" % (args, r.returncode, r.stderr))
    # 8 KiB per KV block (keys and values x 2 layers x 4 heads x 16 positions x 8 x 4
    # bytes): 8 blocks hold four short requests; one of a prompt + 200 tokens does not fit
    srv = Server(ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads", "2",
                              "--max-batch", "4", "--kv-bytes", "64K", "--max-queue", "12",
                              "--max-body", "64K", "--model-name", "tiny"])
    try:
        # V 320 against the tokenizer's 300 ids: ids past them have no text, said at start
        check(any("vocab_size is %d, the tokenizer's 300 ids" % V in w for w in srv.warnings),
              "the padded-vocabulary warning: %r" % srv.warnings)
        rc = drive(a, work, srv)
    except BaseException:
        srv.p.kill()
        srv.p.wait()
        sys.stderr.write("server log:\n" + "".join(srv.log))
        raise
    return rc


def generate(ojas, work, prompt, n):
    out = subprocess.run([ojas, "generate", "--model", "hf", "--vocab", "tokd", "--prompt", prompt,
                          "--max-new-tokens", str(n), "--temperature", "0", "--numerics", "exact",
                          "--threads", "1"], cwd=work, check=True,
                         capture_output=True).stdout.decode("utf-8", errors="replace")
    check(out.startswith(prompt) and out.endswith("\n"), "generate printed %r" % out)
    return out[len(prompt):-1]


def drive(a, work, srv):
    t0 = t_start = time.time()
    code, h = request(srv, "GET", "/health")
    check(code == 200 and h == {"status": "ok"}, "health %s %s" % (code, h))
    code, m = request(srv, "GET", "/v1/models")
    check(code == 200 and m["data"][0]["id"] == "tiny", "models %s" % m)

    # response ids: distinct within a run and across runs (were cmpl-2654435761,
    # cmpl-7963307283, ... on every start)
    one = {"prompt": "The", "max_tokens": 1}
    ids = [request(srv, "POST", "/v1/completions", one)[1]["id"] for _ in range(2)]
    chat = request(srv, "POST", "/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})[1]["id"]
    srv2 = Server(a.ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads",
                                 "1"])
    try:
        ids.append(request(srv2, "POST", "/v1/completions", one)[1]["id"])
    finally:
        srv2.p.terminate()
        srv2.p.wait()
    check(all(re.fullmatch(r"cmpl-[0-9a-f]{24}", i) for i in ids) and len(set(ids)) == 3
          and re.fullmatch(r"chatcmpl-[0-9a-f]{24}", chat), "ids %s %s" % (ids, chat))

    # a request naming another model is refused, as OpenAI and vLLM do
    code, r = request(srv, "POST", "/v1/completions", {"model": "gpt-4o", "prompt": "The",
                                                        "max_tokens": 2})
    check(code == 404 and "'gpt-4o' does not exist" in r["error"]["message"]
          and "'tiny'" in r["error"]["message"], "other model %s %s" % (code, r))
    code, r = request(srv, "POST", "/v1/chat/completions", {"model": "x" * 200, "messages": [
        {"role": "user", "content": "hi"}]})
    check(code == 400 and "'model' is longer" in r["error"]["message"], "long model %s %s" % (code, r))

    # greedy: ojas generate == non-streamed == streamed == curl
    prompts = ["The king said", "And the river", "Upon the stone of the city they", "Light"]
    want = {p: generate(a.ojas, work, p, 12) for p in prompts}
    for p in prompts:
        body = {"model": "tiny", "prompt": p, "max_tokens": 12, "temperature": 0}
        code, r = request(srv, "POST", "/v1/completions", body)
        check(code == 200, "completion %s %s" % (code, r))
        check(r["choices"][0]["text"] == want[p], "%r: server %r, generate %r" %
              (p, r["choices"][0]["text"], want[p]))
        check(r["object"] == "text_completion" and r["usage"]["completion_tokens"] > 0, r)
        ev, done = stream(srv, "/v1/completions", body)
        check(done and streamed_text(ev)[0] == want[p], "stream %r %r" % (streamed_text(ev), want[p]))
        check(ev[-1]["choices"][0]["finish_reason"] in ("length", "stop"), ev[-1])
    body = json.dumps({"prompt": prompts[0], "max_tokens": 12, "temperature": 0})
    out = subprocess.run(["curl", "-sS", "-X", "POST", srv.url("/v1/completions"), "-H",
                          "Content-Type: application/json", "-d", body], check=True,
                         capture_output=True, text=True).stdout
    check(json.loads(out)["choices"][0]["text"] == want[prompts[0]], "curl %s" % out)
    body = json.dumps({"prompt": prompts[1], "max_tokens": 12, "temperature": 0, "stream": True})
    out = subprocess.run(["curl", "-sS", "-N", "-X", "POST", srv.url("/v1/completions"), "-H",
                          "Content-Type: application/json", "-d", body], check=True,
                         capture_output=True, text=True).stdout
    ev = [json.loads(l[6:]) for l in out.splitlines() if l.startswith("data: {")]
    check(out.rstrip().endswith("data: [DONE]") and streamed_text(ev)[0] == want[prompts[1]],
          "curl stream %s" % out)

    # the same greedy texts with other requests in the batch at the same time
    results, errs = {}, []

    def one(i):
        p = prompts[i % len(prompts)]
        try:
            body = {"prompt": p, "max_tokens": 12, "temperature": 0}
            if i % 2:
                ev, done = stream(srv, "/v1/completions", body)
                results[i] = streamed_text(ev)[0]
            else:
                code, r = request(srv, "POST", "/v1/completions", body)
                results[i] = r["choices"][0]["text"] if code == 200 else "HTTP %d" % code
        except Exception as e:  # reported below
            errs.append(repr(e))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(not errs, errs)
    for i, text in results.items():
        check(text == want[prompts[i % len(prompts)]], "concurrent %d: %r" % (i, text))

    # sampling, n, logprobs, stop, seed
    body = {"prompt": "The king", "max_tokens": 8, "temperature": 0.9, "top_k": 20, "seed": 3,
            "n": 2, "logprobs": 1}
    code, r1 = request(srv, "POST", "/v1/completions", body)
    code2, r2 = request(srv, "POST", "/v1/completions", body)
    check(code == 200 and code2 == 200 and len(r1["choices"]) == 2, r1)
    check([c["text"] for c in r1["choices"]] == [c["text"] for c in r2["choices"]],
          "same seed, other texts")
    lp = r1["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == len(lp["token_logprobs"]) > 0 or r1["choices"][0]["finish_reason"] == "stop", r1)
    check(len(lp["tokens"]) == len(lp["token_logprobs"]) and
          all(x <= 0 for x in lp["token_logprobs"]), lp)
    full = want[prompts[0]]
    # an ASCII character of the text after its first: a stop string found in the bytes
    cuts = [ch for ch in full[1:] if ch.isascii() and ch.isalnum()]
    check(cuts, "no ASCII letter in the greedy text %r" % full)
    cut = cuts[0]
    code, r = request(srv, "POST", "/v1/completions", {"prompt": prompts[0], "max_tokens": 12,
                                                      "temperature": 0, "stop": [cut]})
    check(code == 200 and r["choices"][0]["text"] == full[:full.index(cut)] and
          r["choices"][0]["finish_reason"] == "stop", "stop %r in %r: %s" % (cut, full, r))
    ev, done = stream(srv, "/v1/completions", {"prompt": prompts[0], "max_tokens": 12,
                                              "temperature": 0, "stop": cut})
    check(done and streamed_text(ev)[0] == full[:full.index(cut)], "stream stop %s" % ev)

    # chat through the ChatML template
    chat = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "The king said"}], "max_tokens": 6,
            "temperature": 0, "logprobs": True}
    code, r = request(srv, "POST", "/v1/chat/completions", chat)
    check(code == 200 and r["object"] == "chat.completion" and
          r["choices"][0]["message"]["role"] == "assistant", r)
    check(len(r["choices"][0]["logprobs"]["content"]) == r["usage"]["completion_tokens"], r)
    ev, done = stream(srv, "/v1/chat/completions", chat)
    check(done and streamed_text(ev, chat=True)[0] == r["choices"][0]["message"]["content"],
          "chat stream %s vs %s" % (ev, r))
    # OpenAI's stream shape: a choice's first chunk carries the role; with
    # stream_options.include_usage the last event has no choices and the usage
    check(ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""},
          "chat stream's first chunk %s" % ev[0])
    ev, done = stream(srv, "/v1/chat/completions", dict(chat, stream_options={"include_usage": True}))
    check(done and ev[-1]["choices"] == [] and ev[-1]["usage"] == r["usage"] and
          all("usage" not in e for e in ev[:-1]), "include_usage %s" % ev[-1])
    code, e = request(srv, "POST", "/v1/chat/completions",
                      dict(chat, stream_options={"include_usage": True}))
    check(code == 400 and "stream_options" in json.dumps(e), "stream_options without stream %s" % e)

    # top alternatives: chat's top_logprobs, completions' logprobs N (OpenAI's
    # shapes), most likely first; greedy: the chosen token is the first
    code, r = request(srv, "POST", "/v1/chat/completions", dict(chat, top_logprobs=3))
    check(code == 200, r)
    for item in r["choices"][0]["logprobs"]["content"]:
        alts = item["top_logprobs"]
        check(len(alts) == 3 and all(set(a) == {"token", "logprob", "bytes"} for a in alts) and
              [a["logprob"] for a in alts] == sorted((a["logprob"] for a in alts), reverse=True) and
              alts[0]["logprob"] == item["logprob"] and alts[0]["token"] == item["token"] and
              sum(math.exp(a["logprob"]) for a in alts) <= 1 + 1e-9, item)
    code, r = request(srv, "POST", "/v1/completions", {"prompt": prompts[0], "max_tokens": 5,
                                                      "temperature": 0, "logprobs": 4})
    lp = r["choices"][0]["logprobs"]
    check(code == 200 and len(lp["top_logprobs"]) == len(lp["tokens"]) > 0, r)
    for tok, tlp, d in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        check(1 <= len(d) <= 4 and max(d.values()) == tlp and d.get(tok) == tlp, (tok, tlp, d))
    ev, done = stream(srv, "/v1/completions", {"prompt": prompts[0], "max_tokens": 5,
                                              "temperature": 0, "logprobs": 4, "stream": True})
    streamed = [d for e in ev for c in e["choices"] if c.get("logprobs")
                for d in c["logprobs"]["top_logprobs"]]
    check(done and streamed == lp["top_logprobs"], "streamed top_logprobs %s vs %s" % (streamed, lp))
    # a stop string: the logprobs of the tokens up to the one that holds it
    # are streamed as the full response gives them (the last one has no text)
    body = {"prompt": prompts[0], "max_tokens": 12, "temperature": 0, "stop": cut, "logprobs": 0}
    code, r = request(srv, "POST", "/v1/completions", body)
    ev, done = stream(srv, "/v1/completions", body)
    streamed = [t for e in ev for c in e["choices"] if c.get("logprobs")
                for t in c["logprobs"]["tokens"]]
    check(code == 200 and r["choices"][0]["finish_reason"] == "stop" and
          len(r["choices"][0]["logprobs"]["tokens"]) >= 1, r)
    check(done and streamed == r["choices"][0]["logprobs"]["tokens"],
          "stop: streamed logprob tokens %s vs %s" % (streamed, r))

    # refusals: one JSON error each
    def refused(code_want, path, body=None, raw=None, method="POST", needle=""):
        code, r = request(srv, method, path, body, raw)
        check(code == code_want and isinstance(r, dict) and needle in r["error"]["message"],
              "%s %s: %s %s" % (path, body or raw, code, r))

    refused(400, "/v1/completions", raw=b'{"prompt": "x", ', needle="not valid JSON")
    refused(400, "/v1/completions", raw=b'[1, 2]', needle="JSON object")
    refused(400, "/v1/completions", {"prompt": "x", "max_tokens": "7"}, needle="'max_tokens'")
    refused(400, "/v1/completions", {"prompt": "x", "temperature": 9}, needle="'temperature'")
    refused(400, "/v1/completions", {"prompt": 5}, needle="'prompt'")
    refused(400, "/v1/completions", {"max_tokens": 3}, needle="'prompt' is required")
    refused(400, "/v1/completions", {"prompt": [1, 999]}, needle="outside the vocabulary")
    refused(400, "/v1/chat/completions", {"messages": [{"role": "user"}]}, needle="content")
    refused(400, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                          "top_logprobs": 2}, needle="'logprobs': true")
    refused(400, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                          "logprobs": True, "top_logprobs": 21}, needle="'top_logprobs'")
    refused(400, "/v1/completions", {"prompt": "x", "logprobs": 6}, needle="'logprobs'")
    refused(400, "/v1/completions", {"prompt": "x" * 70000}, needle="bytes")
    refused(400, "/v1/completions", {"prompt": "The king " * 200}, needle="context holds 256")
    # the message counts the prompt's tokens (it once read the count after freeing them: 0)
    refused(400, "/v1/completions", {"prompt": [1] * 300}, needle="the prompt has 300 tokens")
    refused(503, "/v1/completions", {"prompt": "The king", "max_tokens": 200},
            needle="KV blocks")
    refused(404, "/v2/nothing", {"prompt": "x"}, needle="no endpoint")
    refused(405, "/v1/completions", method="GET", needle="takes POST")

    # more choices than the queue holds (12) could never be queued: 400, not a 429 to retry
    refused(400, "/v1/completions", {"prompt": "The", "max_tokens": 2, "n": 16},
            needle="'n' is 16; this server queues at most 12")
    # 40 requests at once (4 running and 12 waiting at most): each answered 200 or 429 (how
    # many wait, or are refused, depends on the machine's speed)
    codes = []

    def flood():
        c, _ = request(srv, "POST", "/v1/completions", {"prompt": "The", "max_tokens": 20,
                                                        "temperature": 0})
        codes.append(c)

    ts = [threading.Thread(target=flood) for _ in range(40)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(set(codes) <= {200, 429} and 200 in codes, "flood %s" % codes)

    # soak: requests, dropped connections and bad bodies from 8 threads
    rng = random.Random(1)
    plan = [rng.choice(["ok", "ok", "stream", "drop", "drop_stream", "bad", "long"])
            for _ in range(a.soak)]
    soak_err = []
    lock = threading.Lock()

    def worker(k):
        for i in range(k, len(plan), 8):
            kind = plan[i]
            p = prompts[i % len(prompts)]
            body = {"prompt": p, "max_tokens": 12, "temperature": 0}
            try:
                if kind == "ok":
                    code, r = request(srv, "POST", "/v1/completions", body)
                    if code == 200 and r["choices"][0]["text"] != want[p]:
                        raise AssertionError("soak %d: %r" % (i, r["choices"][0]["text"]))
                    if code not in (200, 429):
                        raise AssertionError("soak %d: HTTP %d" % (i, code))
                elif kind == "stream":
                    try:
                        ev, done = stream(srv, "/v1/completions", body)
                        if streamed_text(ev)[0] != want[p] or not done:
                            raise AssertionError("soak stream %d" % i)
                    except urllib.error.HTTPError as e:
                        if e.code != 429:
                            raise
                elif kind in ("drop", "drop_stream"):
                    c = http.client.HTTPConnection(srv.host, int(srv.port), timeout=30)
                    b = dict(body, max_tokens=40, stream=kind == "drop_stream")
                    c.request("POST", "/v1/completions", json.dumps(b),
                              {"Content-Type": "application/json"})
                    if kind == "drop_stream" and rng.random() < 0.5:
                        r = c.getresponse()
                        r.read1(16) if hasattr(r, "read1") else r.read(16)
                    else:
                        time.sleep(0.002 * rng.random())
                    c.sock.shutdown(2)
                    c.close()
                elif kind == "bad":
                    code, r = request(srv, "POST", "/v1/completions",
                                      raw=rng.choice([b"{", b"null", b'{"prompt": []}',
                                                      b'{"prompt": "x", "n": 0}', b"\xff\xfe"]))
                    if code != 400:
                        raise AssertionError("soak bad %d: %d" % (i, code))
                else:
                    code, r = request(srv, "POST", "/v1/completions",
                                      {"prompt": "The king " * 200})
                    if code != 400:
                        raise AssertionError("soak long %d: %d" % (i, code))
            except Exception as e:  # collected
                with lock:
                    soak_err.append(repr(e))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(not soak_err, soak_err[:5])
    deadline = time.time() + 30
    while True:
        mt = metrics(srv)
        idle = (mt["ojas_kv_blocks_used"] == 0 and mt["ojas_running_requests"] == 0 and
                mt["ojas_queue_depth"] == 0)
        if idle or time.time() > deadline:
            break
        time.sleep(0.1)
    check(idle, "blocks still in use after the soak: %s" % mt)
    check(mt["ojas_kv_blocks_total"] == 8, mt)
    check(mt["ojas_client_disconnects_total"] > 0, "no disconnect was seen: %s" % mt)
    print("soak: %d disconnects seen, %d requests refused with 429, %d tokens" %
          (mt["ojas_client_disconnects_total"],
           mt.get('ojas_requests_total{endpoint="/v1/completions",code="429"}', 0),
           mt["ojas_generated_tokens_total"]))
    check(mt.get('ojas_requests_total{endpoint="/v1/completions",code="400"}', 0) > 0, mt)
    check(mt["ojas_generated_tokens_total"] > 0 and mt["ojas_time_to_first_token_seconds_count"] > 0,
          mt)
    # the steps' host time by phase: every phase reported, the forward's > 0 (the CPU runs
    # every step as a packed forward), none beyond the server's life
    phases = {k.split('"')[1]: v for k, v in mt.items() if k.startswith("ojas_step_seconds_total{")}
    check(set(phases) == {"schedule", "decode_prepare", "decode_upload", "decode_launch",
                          "decode_wait", "decode_readback", "decode_other", "prefill", "sample",
                          "events"}, phases)
    check(phases["prefill"] > 0 and all(0 <= v < time.time() - t_start for v in phases.values()),
          phases)

    # SIGTERM: an in-flight stream still ends with [DONE], the process exits 0
    got = {}

    def late():
        got["r"] = stream(srv, "/v1/completions", {"prompt": "The", "max_tokens": 60,
                                                   "temperature": 0})

    t = threading.Thread(target=late)
    t.start()
    time.sleep(0.05)
    srv.p.send_signal(signal.SIGTERM)
    t.join(60)
    rc = srv.p.wait(60)
    check(rc == 0, "serve exited %d" % rc)
    check(got.get("r") and got["r"][1], "the in-flight stream did not finish: %s" % got)
    # a per-request timeout: 504 (a stream: an error event, then [DONE])
    fast = Server(a.ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads",
                                 "1", "--timeout", "0.000001", "--shutdown-grace", "0"])
    try:
        code, r = request(fast, "POST", "/v1/completions", {"prompt": "The", "max_tokens": 50})
        check(code == 504 and "longer than" in r["error"]["message"], "timeout: %s %s" % (code, r))
        ev, done = stream(fast, "/v1/completions", {"prompt": "The", "max_tokens": 50})
        check(done and ev and ev[-1].get("error", {}).get("type") == "timeout_error",
              "timeout stream: %s" % ev)
        check(metrics(fast)["ojas_request_timeouts_total"] == 2, "timeouts not counted")
    finally:
        sigterm_off_main(fast.p.pid)
        rc = fast.p.wait(60)
        check(rc == 0, "the second server exited %d: %s" % (rc, "".join(fast.log)))
    slow_client(a, work)
    stream_stop_logprobs(a, work)
    queue_limit(a, work)
    shutdown_answers(a, work)
    half_close(a, work)
    idle_timeout(a, work)
    print("serve_http: ok (%d soak requests, %.1f s)" % (a.soak, time.time() - t0))
    return 0


def slow_client(a, work):
    """A streaming client that stops reading (its 16 choices' events, megabytes of them, fill
    the socket buffers and block its connection's thread in a write) does not slow the
    server's steps: the same request (the same seed, so the same steps) takes no longer than
    1.5x as long as with a client that reads everything (best of two each). A scheduler that
    waits (up to 1 ms) after every step for the handlers with unsent events takes twice as
    long."""
    write_gpt2_dir(os.path.join(work, "hf2k"), positions=2048)
    srv = Server(a.ojas, work, ["--model", "hf2k", "--vocab", "tokd", "--port", "0", "--threads",
                                "1", "--max-batch", "16", "--kv-bytes", "64M",
                                "--shutdown-grace", "0"])
    body = json.dumps({"prompt": [5, 6, 7], "max_tokens": 1900, "n": 16, "temperature": 1.0,
                       "seed": 1, "logprobs": 5, "stream": True}).encode()

    def busy():
        m = metrics(srv)
        return m["ojas_running_requests"] + m["ojas_queue_depth"] > 0

    def run(read):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((srv.host, int(srv.port)))
        s.settimeout(0.01)
        t = time.time()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        # the reading client until its stream's [DONE] (or the server closes); the stalled
        # one until the server has taken the request (or 5 s) and no longer runs it
        got, tail, done, seen = 0, b"", False, False
        while True:
            if read:
                try:
                    chunk = s.recv(1 << 20)
                    got += len(chunk)
                    tail = (tail + chunk)[-64:]
                    done = not chunk or b"[DONE]" in tail
                except socket.timeout:
                    pass
                if done:
                    break
            else:
                time.sleep(0.01)
                b = busy()
                seen = seen or b
                if (seen or time.time() - t > 5) and not b:
                    break
            check(time.time() - t < 120, "the slow-client request did not finish")
        dt = time.time() - t
        s.close()
        check(not read or got > 1 << 20, "the reading client got %d bytes" % got)
        return dt

    try:
        times = {True: [], False: []}
        for read in (True, False, True, False):
            times[read].append(run(read))
            deadline = time.time() + 30
            while busy() and time.time() < deadline:  # the stalled stream's cancellation
                time.sleep(0.01)
        reading, stalled = min(times[True]), min(times[False])
        print("slow client: %.3f s beside a stalled client, %.3f s beside a reading one" %
              (stalled, reading))
        check(stalled < 1.5 * reading, "a stalled client slowed the steps: %.3f s, reading %.3f s"
              % (stalled, reading))
    finally:
        srv.p.send_signal(signal.SIGTERM)
        check(srv.p.wait(60) == 0, "the slow-client server did not exit 0")


def stream_stop_logprobs(a, work):
    """Streamed text with logprobs equals the non-streamed text for stop strings that span
    tokens, on a busy server. A stop string cuts the text back when its last token arrives,
    before the finish event; a handler that woke in between must not send bytes twice."""
    srv = Server(a.ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads",
                                "2", "--max-batch", "8", "--kv-bytes", "4M", "--max-queue", "256"])
    stop_load = threading.Event()
    errs = []

    def load():
        rnd = random.Random(2)
        while not stop_load.is_set():
            body = {"prompt": "the king " * rnd.randint(1, 4), "max_tokens": rnd.randint(1, 40),
                    "temperature": 0, "n": rnd.randint(1, 3), "stop": ["T", "ead", "zz"]}
            if rnd.random() < 0.5:
                body["logprobs"] = rnd.randint(0, 3)
            try:
                if rnd.random() < 0.5:
                    stream(srv, "/v1/completions", body)
                else:
                    request(srv, "POST", "/v1/completions", body)
            except Exception as e:  # reported below
                errs.append(repr(e))

    try:
        base = {"prompt": "the king", "max_tokens": 60, "temperature": 0}
        code, r = request(srv, "POST", "/v1/completions", base)
        check(code == 200, "stop probe %s %s" % (code, r))
        text = r["choices"][0]["text"]
        stops = sorted({text[k:k + w] for k in range(4, len(text) - 3, 5) for w in (2, 3)})
        ts = [threading.Thread(target=load) for _ in range(3)]
        [t.start() for t in ts]
        bad = []
        for rep in range(4):
            for st in stops:
                body = dict(base, stop=[st], logprobs=1)
                code, r = request(srv, "POST", "/v1/completions", body)
                check(code == 200, "stop %r: %s %s" % (st, code, r))
                want = r["choices"][0]["text"]
                ev, done = stream(srv, "/v1/completions", body)
                got = streamed_text(ev)[0]
                if not done or got != want:
                    bad.append((st, got[-12:], want[-12:]))
        stop_load.set()
        [t.join() for t in ts]
        check(not errs, errs)
        check(not bad, "streamed with logprobs != non-streamed for %d of %d: %r" %
              (len(bad), 4 * len(stops), bad[:3]))
    finally:
        stop_load.set()
        srv.p.send_signal(signal.SIGTERM)
        check(srv.p.wait(60) == 0, "the stop-string server did not exit 0")


def queue_limit(a, work):
    """More choices (n) than --max-queue could never be queued: 400 naming both numbers at
    once on an idle server, not a 429 a client would retry forever."""
    srv = Server(a.ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads",
                                "1", "--max-batch", "2", "--max-queue", "4"])
    try:
        body = {"prompt": "a", "max_tokens": 2, "n": 5}
        code, r = request(srv, "POST", "/v1/completions", body)
        check(code == 400 and "'n' is 5" in r["error"]["message"] and
              "at most 4" in r["error"]["message"], "n > --max-queue: %s %s" % (code, r))
        code, r = request(srv, "POST", "/v1/completions", dict(body, n=4))
        check(code == 200 and len(r["choices"]) == 4, "n == --max-queue: %s %s" % (code, r))
    finally:
        srv.p.send_signal(signal.SIGTERM)
        check(srv.p.wait(60) == 0, "the queue-limit server did not exit 0")


def shutdown_answers(a, work):
    """SIGTERM with --shutdown-grace 0 while requests (not streamed) are queued or running:
    each still gets an answer, 200 if it finished or 503 'shutting down', not a connection
    closed without a response (stopping the daemon shuts every connection's socket down,
    so the server lets its handlers send their 503 first); exit 0 within seconds."""
    srv = Server(a.ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads",
                                "1", "--max-batch", "1", "--kv-bytes", "4M",
                                "--shutdown-grace", "0"])
    got = {}

    def one(i):
        try:
            got[i] = request(srv, "POST", "/v1/completions",
                             {"prompt": "The", "max_tokens": 230, "n": 4}, timeout=60)
        except (OSError, http.client.HTTPException) as e:
            got[i] = (None, repr(e))

    ths = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in ths:
        t.start()
    time.sleep(0.3)
    t0 = time.time()
    srv.p.send_signal(signal.SIGTERM)
    rc = srv.p.wait(60)
    for t in ths:
        t.join(60)
    check(rc == 0 and time.time() - t0 < 5, "serve exited %d after %.1f s" % (rc, time.time() - t0))
    codes = [c for c, _ in got.values()]
    check(len(got) == 12 and all(c == 200 or (c == 503 and "shutting down" in
                                              r["error"]["message"]) for c, r in got.values())
          and 503 in codes, "answers at shutdown: %s" % [c or r for c, r in got.values()])


def half_close(a, work):
    """A streaming client that half-closes its socket once its request is sent (nc -N, some
    HTTP/1.0 clients) still gets the whole stream, up to [DONE]."""
    srv = Server(a.ojas, work, ["--model", "hf", "--vocab", "tokd", "--port", "0", "--threads",
                                "1", "--max-batch", "2"])
    try:
        body = json.dumps({"prompt": "the king", "max_tokens": 200, "temperature": 0,
                           "n": 2, "stream": True}).encode()
        s = socket.create_connection((srv.host, int(srv.port)), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
        check(got.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in got,
              "half-closed stream: %r" % got[-200:])
    finally:
        srv.p.send_signal(signal.SIGTERM)
        check(srv.p.wait(60) == 0, "the half-close server did not exit 0")


def idle_timeout(a, work):
    """Connections that send half a request and then idle (slowloris) are closed after
    --idle-timeout, so they cannot hold every connection slot for --timeout: with all
    --max-connections slots taken by them, a new request is answered once they time out.
    A generation that takes longer than --idle-timeout still gets its answer, streamed or
    not (its connection waits under the --timeout)."""
    hf2k = os.path.join(work, "hf2k")
    if not os.path.isdir(hf2k):
        write_gpt2_dir(hf2k, positions=2048)
    srv = Server(a.ojas, work, ["--model", "hf2k", "--vocab", "tokd", "--port", "0", "--threads",
                                "1", "--max-batch", "4", "--kv-bytes", "64M", "--max-connections",
                                "4", "--idle-timeout", "1", "--shutdown-grace", "0"])
    try:
        idle = []
        for _ in range(4):
            s = socket.create_connection((srv.host, int(srv.port)), timeout=30)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            idle.append(s)
        time.sleep(0.2)
        t = time.time()
        code, h = request(srv, "GET", "/health", timeout=20)
        check(code == 200 and time.time() - t < 15, "health beside idle sockets: %s after %.1f s"
              % (code, time.time() - t))
        [s.close() for s in idle]
        body = {"prompt": [5, 6, 7], "max_tokens": 2000, "n": 16, "temperature": 0, "logprobs": 5}
        t = time.time()
        # no byte comes until the whole answer: the client's timeout holds all of it (minutes
        # under ASan on a loaded machine)
        code, r = request(srv, "POST", "/v1/completions", body, timeout=600)
        dt = time.time() - t
        check(code == 200 and len(r["choices"]) == 16, "long request: %s %s" % (code, r))
        check(dt > 1, "the long request took %.2f s, not longer than the idle timeout" % dt)
        ev, done = stream(srv, "/v1/completions", body)
        check(done and len(streamed_text(ev)) == 16, "long stream ended early")
        print("idle timeout: a %.1f s request (%d tokens) answered beside a 1 s idle timeout" %
              (dt, r["usage"]["completion_tokens"]))
    finally:
        srv.p.send_signal(signal.SIGTERM)
        check(srv.p.wait(60) == 0, "the idle-timeout server did not exit 0")


if __name__ == "__main__":
    sys.exit(main())
