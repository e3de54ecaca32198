"""Training steps per second of a Python MLP loop, ojas beside PyTorch eager
in one run (the issue's bar: ojas >= 2x torch on the CPU): 2 -> width ->
width -> 4 with ReLU, cross-entropy, AdamW, batch 64 (defaults).

    PYTHONPATH=build/python /usr/bin/python3 bench/python/mlp_steps.py [--steps N]
"""
import argparse
import time

import numpy as np
import torch

import ojas


def run_ojas(args, xs, ys):
    nn, F = ojas.nn, ojas.nn.functional
    m = nn.Sequential(nn.Linear(2, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                      nn.ReLU(), nn.Linear(args.width, 4))
    opt = ojas.optim.AdamW(m.parameters(), lr=1e-3)

    def step(i):
        loss = F.cross_entropy(m(ojas.from_numpy(xs[i])), ojas.from_numpy(ys[i]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def run_torch(args, xs, ys):
    nn, F = torch.nn, torch.nn.functional
    m = nn.Sequential(nn.Linear(2, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                      nn.ReLU(), nn.Linear(args.width, 4))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def step(i):
        loss = F.cross_entropy(m(torch.from_numpy(xs[i])), torch.from_numpy(ys[i]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((64, args.batch, 2)).astype(np.float32)
    ys = rng.integers(0, 4, (64, args.batch)).astype(np.int64)
    rates = {}
    with ojas.Engine(threads=args.threads):
        for name, mk in (("ojas", run_ojas), ("torch", run_torch)):
            step = mk(args, xs, ys)
            for i in range(20):
                step(i % 64)
            t0 = time.perf_counter()
            for i in range(args.steps):
                step(i % 64)
            rates[name] = args.steps / (time.perf_counter() - t0)
    print("MLP 2-%d-%d-4, batch %d, AdamW, %d thread(s): ojas %.0f steps/s, torch %.0f steps/s, "
          "ratio %.2fx" % (args.width, args.width, args.batch, args.threads, rates["ojas"],
                           rates["torch"], rates["ojas"] / rates["torch"]))


if __name__ == "__main__":
    main()
