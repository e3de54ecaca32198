#!/usr/bin/env python3
"""The peer of bench_gpu_gemm.c: torch.matmul on the same shapes and layouts
(bf16 with f32 accumulation; f32 with TF32 allowed, as ojas FAST): the mean
of `reps` products issued back to back after 2 warm-ups (CUDA events). One JSON line per case."""
import json
import sys

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
torch.backends.cuda.matmul.allow_tf32 = True
M = 16384
cases = [
    ("qkv fwd x W^T", M, 2304, 768, False, True), ("qkv dX g W", M, 768, 2304, False, False),
    ("qkv dW g^T x", 2304, 768, M, True, False), ("fc fwd x W^T", M, 3072, 768, False, True),
    ("fc dW g^T x", 3072, 768, M, True, False), ("proj fwd x W^T", M, 768, 3072, False, True),
    ("proj dX g W", M, 3072, 768, False, False), ("head chunk x W^T", 1334, 50304, 768, False, True),
    ("head dX dl W", 1334, 768, 50304, False, False), ("head dW dl^T x", 50304, 768, 1334, True, False),
]
for dt, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
    for (cname, m, n, k, ta, tb) in cases:
        a = torch.randn((k, m) if ta else (m, k), device="cuda", dtype=dt)
        b = torch.randn((n, k) if tb else (k, n), device="cuda", dtype=dt)
        a = a.t() if ta else a
        b = b.t() if tb else b
        for _ in range(2):
            c = a @ b
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):  # back to back, as bench_gpu_gemm
            c = a @ b
        e.record()
        torch.cuda.synchronize()
        best = s.elapsed_time(e) / 1e3 / reps
        print(json.dumps({"system": "pytorch", "case": cname, "dtype": name, "M": m, "N": n, "K": k,
                          "ms": round(best * 1e3, 4), "tflops": round(2 * m * n * k / best * 1e-12, 1)}))
