#!/usr/bin/env python3
"""Throughput of `ojas serve` under concurrent streaming clients (standard
library only). For each model: start `ojas serve` on a loopback port, run
one client alone (the single-stream figure), then --clients concurrent
clients (each --requests requests, one after another), every request a
streamed /v1/completions of a fixed prompt length and max_tokens at
temperature 0. Reports, as JSON on stdout:

  aggregate_tok_s   completion tokens of the concurrent phase / its wall time
  single_tok_s      the same for the single client
  ratio             aggregate_tok_s / single_tok_s (the bar: >= 8 at 32 clients)
  ttft_p50_ms, ttft_p99_ms   request sent -> first token (concurrent phase)
  itl_p50_ms, itl_p99_ms     gap between consecutive tokens (concurrent phase)
  single_steps, aggregate_steps   the server's steps in each phase (from /metrics'
                             ojas_step_seconds_total): their count, the decode steps'
                             mean rows, and host ms per step by phase (schedule,
                             decode_prepare/upload/launch/wait/readback, prefill,
                             sample, events) beside the wall ms per step

Models: a GPT-2 124M-shaped model (random weights written here, f32 or
with --gpt2-bf16 bf16, or OJAS_BENCH_GPT2=DIR|CHECKPOINT) and a Qwen2.5-0.5B-shaped one (random
weights written here, bf16, or OJAS_BENCH_QWEN=DIR; --models picks). The
random models use a small tokenizer trained here (OJAS_BENCH_VOCAB=DIR
gives another); its vocabulary is smaller than the model's, so many
generated tokens have no text: tokens are counted from the streamed
logprobs, not the text.

Any failure (the server exiting, an HTTP error, a request with no tokens, a
count other than max_tokens without a stop) ends the run with exit 1 and
no figures.

--profile runs the server with OJAS_SERVE_PROFILE=1 and prints, on stderr,
where its steps' time went (the whole run, warm-up included).

Usage: scripts/serve_bench.py --ojas build/ojas [--device cuda] [--clients 32]
       [--requests 4] [--max-tokens 128] [--prompt-tokens 64] [--models gpt2,qwen]
       [--profile] [--gpt2-bf16]
"""
import argparse
import http.client
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time


class BenchError(Exception):
    pass


def pattern(n, std, seed):
    """n gaussian floats (std) packed as f32: tiled over the weights."""
    rng = random.Random(seed)
    return struct.pack("<%df" % n, *[rng.gauss(0.0, std) for _ in range(n)])


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, shape, kind) with kind 'one', 'zero' or 'rand';
    values f32 or bf16 (dtype 'F32' / 'BF16'), random ones tiled from a
    fixed pattern (std 0.02)."""
    es = 4 if dtype == "F32" else 2
    pat = pattern(1 << 16, 0.02, 7)
    if dtype == "BF16":
        pat = b"".join(pat[i + 2:i + 4] for i in range(0, len(pat), 4))
    one = struct.pack("<f", 1.0)
    one = one if dtype == "F32" else one[2:4]
    header, off = {}, 0
    for name, shape, _ in tensors:
        n = 1
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n * es]}
        off += n * es
    hj = json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for name, shape, kind in tensors:
            n = 1
            for s in shape:
                n *= s
            nb = n * es
            if kind == "one":
                f.write(one * n)
            elif kind == "zero":
                f.write(b"\0" * nb)
            else:
                reps, rest = divmod(nb, len(pat))
                for _ in range(reps):
                    f.write(pat)
                f.write(pat[:rest])


def write_gpt2(d, dtype="F32"):
    C, L, H, V, P = 768, 12, 12, 50257, 1024
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
                   "n_positions": P, "n_embd": C, "n_layer": L, "n_head": H,
                   "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}, f)
    t = [("wte.weight", [V, C], "rand"), ("wpe.weight", [P, C], "rand"),
         ("ln_f.weight", [C], "one"), ("ln_f.bias", [C], "zero")]
    for l in range(L):
        h = "h.%d." % l
        t += [(h + "ln_1.weight", [C], "one"), (h + "ln_1.bias", [C], "zero"),
              (h + "ln_2.weight", [C], "one"), (h + "ln_2.bias", [C], "zero"),
              (h + "attn.c_attn.weight", [C, 3 * C], "rand"), (h + "attn.c_attn.bias", [3 * C], "zero"),
              (h + "attn.c_proj.weight", [C, C], "rand"), (h + "attn.c_proj.bias", [C], "zero"),
              (h + "mlp.c_fc.weight", [C, 4 * C], "rand"), (h + "mlp.c_fc.bias", [4 * C], "zero"),
              (h + "mlp.c_proj.weight", [4 * C, C], "rand"), (h + "mlp.c_proj.bias", [C], "zero")]
    write_safetensors(os.path.join(d, "model.safetensors"), t, dtype)


def write_qwen(d):
    """Qwen2.5-0.5B's shapes (tied embeddings, q/k/v biases), bf16."""
    C, L, H, KV, F, V, P = 896, 24, 14, 2, 4864, 151936, 32768
    D = C // H
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                   "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
                   "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": V,
                   "max_position_embeddings": P, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                   "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "bfloat16"}, f)
    t = [("model.embed_tokens.weight", [V, C], "rand"), ("model.norm.weight", [C], "one")]
    for l in range(L):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", [C], "one"),
              (p + "post_attention_layernorm.weight", [C], "one"),
              (p + "self_attn.q_proj.weight", [C, C], "rand"), (p + "self_attn.q_proj.bias", [C], "zero"),
              (p + "self_attn.k_proj.weight", [KV * D, C], "rand"),
              (p + "self_attn.k_proj.bias", [KV * D], "zero"),
              (p + "self_attn.v_proj.weight", [KV * D, C], "rand"),
              (p + "self_attn.v_proj.bias", [KV * D], "zero"),
              (p + "self_attn.o_proj.weight", [C, C], "rand"),
              (p + "mlp.gate_proj.weight", [F, C], "rand"), (p + "mlp.up_proj.weight", [F, C], "rand"),
              (p + "mlp.down_proj.weight", [C, F], "rand")]
    write_safetensors(os.path.join(d, "model.safetensors"), t, "BF16")


def write_corpus(path):
    words = ("the king said unto him and of land people house lord went came day city water "
             "over river bread stone light night in they shall be upon").split()
    rng = random.Random(2024)
    with open(path, "w") as f:
        for _ in range(2000):
            f.write(" ".join(rng.choice(words) for _ in range(8)) + ". ")


class Server:
    def __init__(self, ojas, args, log_path, env=None):
        self.log = open(log_path, "w+")
        self.p = subprocess.Popen([ojas, "serve"] + args, stderr=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, text=True, env=env)
        line = self.p.stderr.readline()
        while line.startswith("ojas: serve: warning:"):  # before the start line
            self.log.write(line)
            line = self.p.stderr.readline()
        self.log.write(line)
        if "http://" not in line:
            rest = self.p.stderr.read()
            self.p.wait()
            raise BenchError("ojas serve did not start: %s%s" % (line, rest))
        self.host, port = line.split("http://")[1].split()[0].split(":")
        self.port = int(port)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.write(line)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.flush()


def one_request(srv, prompt_ids, max_tokens):
    """Stream one completion: (t_sent, [token arrival times], finish_reason)."""
    body = json.dumps({"model": "bench", "prompt": prompt_ids, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "logprobs": 0}).encode()
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise BenchError("HTTP %d: %s" % (r.status, r.read()[:400]))
    times, finish, done = [], None, False
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            done = True
            break
        ev = json.loads(data)
        if "error" in ev:
            raise BenchError("stream error: %s" % ev["error"])
        now = time.perf_counter()
        for ch in ev.get("choices", []):
            lp = ch.get("logprobs")
            n = len(lp["tokens"]) if lp and lp.get("tokens") else 0
            times += [now] * n
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    conn.close()
    if not done:
        raise BenchError("the stream ended without [DONE]")
    if not times:
        raise BenchError("a request got no token (finish_reason %s)" % finish)
    if len(times) != max_tokens and finish != "stop":
        raise BenchError("a request got %d tokens of %d (finish_reason %s)" %
                         (len(times), max_tokens, finish))
    return t0, times, finish


def phase(srv, clients, requests, prompts, max_tokens):
    """clients threads x requests each: (tokens, wall s, ttfts, itls)."""
    res, errs = [], []
    lock = threading.Lock()

    def worker(k):
        try:
            for j in range(requests):
                out = one_request(srv, prompts[(k * requests + j) % len(prompts)], max_tokens)
                with lock:
                    res.append(out)
        except Exception as e:  # noqa: BLE001 - every failure ends the run
            with lock:
                errs.append("client %d: %s" % (k, e))

    t0 = time.perf_counter()
    ths = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.perf_counter() - t0
    if errs:
        raise BenchError("; ".join(errs[:4]))
    if srv.p.poll() is not None:
        raise BenchError("ojas serve exited (%d) during the run" % srv.p.returncode)
    tokens = sum(len(t) for _, t, _ in res)
    ttft = [t[0] - s for s, t, _ in res]
    itl = [b - a for _, t, _ in res for a, b in zip(t, t[1:])]
    return tokens, wall, ttft, itl


def step_counters(srv):
    """The server's step counters from /metrics: {phase: seconds}, steps,
    decode steps and rows."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    if r.status != 200:
        raise BenchError("GET /metrics: HTTP %d" % r.status)
    out = {"phases": {}}
    for line in text.splitlines():
        if line.startswith("ojas_step_seconds_total{phase=\""):
            name = line.split('"')[1]
            out["phases"][name] = float(line.split()[-1])
        for key in ("ojas_scheduler_steps_total", "ojas_decode_steps_total", "ojas_decode_rows_total"):
            if line.startswith(key + " "):
                out[key] = int(line.split()[-1])
    return out


def step_profile(before, after, wall):
    """Per step of one phase of the bench: host ms by scheduler phase, the
    wall ms per step, the decode steps' mean rows."""
    steps = after["ojas_scheduler_steps_total"] - before["ojas_scheduler_steps_total"]
    dsteps = after["ojas_decode_steps_total"] - before["ojas_decode_steps_total"]
    drows = after["ojas_decode_rows_total"] - before["ojas_decode_rows_total"]
    if steps <= 0:
        raise BenchError("the phase ran no scheduler step")
    prof = {k: round(1e3 * (after["phases"][k] - before["phases"].get(k, 0.0)) / steps, 4)
            for k in after["phases"]}
    prof["wall"] = round(1e3 * wall / steps, 4)
    return {"steps": steps, "decode_rows_mean": round(drows / dsteps, 2) if dsteps else 0.0,
            "ms_per_step": prof}


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        raise BenchError("no samples for a percentile")
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def bench_model(a, name, model, vocab, extra, work):
    log = os.path.join(work, "serve-%s.log" % name)
    args = ["--model", model, "--vocab", vocab, "--port", "0", "--device", a.device,
            "--max-batch", str(a.clients), "--max-queue", str(4 * a.clients),
            "--max-connections", str(4 * a.clients + 8), "--model-name", "bench"] + extra
    env = dict(os.environ, OJAS_SERVE_PROFILE="1") if a.profile else None
    srv = Server(a.ojas, args, log, env)
    try:
        rng = random.Random(5)
        prompts = [[rng.randrange(3, 250) for _ in range(a.prompt_tokens)]
                   for _ in range(a.clients * a.requests)]
        c = 1
        while True:  # warm-up: every batch-size bucket's graph captured before timing
            phase(srv, c, 1, prompts, 8)
            if c >= a.clients:
                break
            c = min(2 * c, a.clients)
        c0 = step_counters(srv)
        st, sw, _, _ = phase(srv, 1, a.requests, prompts, a.max_tokens)
        c1 = step_counters(srv)
        ct, cw, ttft, itl = phase(srv, a.clients, a.requests, prompts, a.max_tokens)
        c2 = step_counters(srv)
        single_prof, agg_prof = step_profile(c0, c1, sw), step_profile(c1, c2, cw)
    except BaseException:
        srv.stop()
        sys.stderr.write("server log (%s):\n" % log)
        srv.log.seek(0)
        sys.stderr.write(srv.log.read()[-4000:])
        raise
    srv.stop()
    if srv.p.returncode != 0:
        raise BenchError("ojas serve exited %d after SIGTERM" % srv.p.returncode)
    if a.profile:  # the server's profile (its last lines), for the whole run
        srv.log.seek(0)
        lines = srv.log.read().splitlines()
        at = max((i for i, l in enumerate(lines) if "serve profile" in l), default=len(lines))
        sys.stderr.write("%s:\n%s\n" % (name, "\n".join(lines[at:])))
    single, agg = st / sw, ct / cw
    label = name + ("-bf16" if name == "gpt2" and a.gpt2_bf16 and not os.environ.get("OJAS_BENCH_GPT2")
                    else "")
    return {"model": label, "device": a.device, "serve_args": extra, "clients": a.clients,
            "requests_per_client": a.requests, "prompt_tokens": a.prompt_tokens,
            "max_tokens": a.max_tokens, "single_tokens": st, "single_s": round(sw, 3),
            "single_tok_s": round(single, 1), "aggregate_tokens": ct,
            "aggregate_s": round(cw, 3), "aggregate_tok_s": round(agg, 1),
            "ratio": round(agg / single, 2),
            "ttft_p50_ms": round(1e3 * pct(ttft, 50), 2), "ttft_p99_ms": round(1e3 * pct(ttft, 99), 2),
            "itl_p50_ms": round(1e3 * pct(itl, 50), 3), "itl_p99_ms": round(1e3 * pct(itl, 99), 3),
            "single_steps": single_prof, "aggregate_steps": agg_prof}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ojas", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--models", default="gpt2,qwen")
    ap.add_argument("--kv-bytes", default="4G")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for ojas serve (repeat), e.g. --serve-arg=--prefill-chunk=32")
    ap.add_argument("--gpt2-bf16", action="store_true",
                    help="write the random GPT-2 model's weights in bf16 (default f32), as "
                         "`ojas generate`'s batch-1 figures in docs/bench-gpu.md use")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--profile", action="store_true",
                    help="run the server with OJAS_SERVE_PROFILE=1 and print its per-phase "
                         "profile (warm-up, single and concurrent phases together) on stderr")
    a = ap.parse_args()
    a.ojas = os.path.abspath(a.ojas)
    work = tempfile.mkdtemp(prefix="ojas-serve-bench-")
    try:
        vocab = os.environ.get("OJAS_BENCH_VOCAB")
        if vocab is None:
            write_corpus(os.path.join(work, "corpus.txt"))
            subprocess.run([a.ojas, "tokenizer", "train", "--vocab-size", "300", "--out",
                            os.path.join(work, "tokd"), os.path.join(work, "corpus.txt")],
                           check=True, stdout=subprocess.DEVNULL)
            vocab = os.path.join(work, "tokd")
        out = []
        extra = ["--kv-bytes", a.kv_bytes] + a.serve_arg
        for name in a.models.split(","):
            env = {"gpt2": "OJAS_BENCH_GPT2", "qwen": "OJAS_BENCH_QWEN"}.get(name)
            if env is None:
                raise BenchError("unknown model %r (gpt2, qwen)" % name)
            model = os.environ.get(env)
            if model is None:
                model = os.path.join(work, name)
                if name == "gpt2":
                    write_gpt2(model, "BF16" if a.gpt2_bf16 else "F32")
                else:
                    write_qwen(model)
            out.append(bench_model(a, name, model, vocab, extra, work))
    except (BenchError, subprocess.CalledProcessError, OSError) as e:
        sys.stderr.write("serve_bench: FAILED: %s\n" % e)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"bench": "ojas serve", "results": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
