"""Per-op overhead of the Python package beside PyTorch eager, in one run:
calls per second of small-tensor ops (`a + b` on [8] float32, 10^6
calls by default; `(a * b).sum()`, a tenth of that), and their ratio (the issue's bar: ojas >= 3x torch).

    PYTHONPATH=build/python /usr/bin/python3 bench/python/op_overhead.py [--calls N]
"""
import argparse
import platform
import time

import torch

import ojas


def rate(fn, calls):
    fn(1000)  # warm pools and caches
    t0 = time.perf_counter()
    fn(calls)
    return calls / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    oa, ob = ojas.ones(args.size), ojas.ones(args.size)
    ta, tb = torch.ones(args.size), torch.ones(args.size)

    def loop(a, b):
        def run(n):
            for _ in range(n):
                a + b
        return run

    def loop_mul_sum(a, b):
        def run(n):
            for _ in range(n):
                (a * b).sum()
        return run

    print("machine: %s, %s; torch %s, ojas %s" % (platform.node(), platform.processor() or
                                                  platform.machine(), torch.__version__,
                                                  ojas.__version__))
    for name, mk in (("a + b", loop), ("(a * b).sum()", loop_mul_sum)):
        calls = args.calls if name == "a + b" else args.calls // 10  # two ops a call
        r_o = rate(mk(oa, ob), calls)
        r_t = rate(mk(ta, tb), calls)
        print("%-14s [%d] f32: ojas %10.0f calls/s  torch %10.0f calls/s  ratio %.2fx"
              % (name, args.size, r_o, r_t, r_o / r_t))


if __name__ == "__main__":
    main()
