"""Train a small MLP classifier with ojas from Python, as one would with torch.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/mlp.py [--steps N]

The data: points in the plane labelled by which of 4 interleaved spirals
they lie on. Prints the loss every 50 steps and the final accuracy.
"""
import argparse
import math

import numpy as np

import ojas
import ojas.nn as nn
import ojas.nn.functional as F


def spirals(n, classes, rng):
    """n points per class on `classes` interleaved noisy spirals."""
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.1, 1.0, n)
        a = np.linspace(0, 3 * math.pi, n) + 2 * math.pi * c / classes + rng.normal(0, 0.15, n)
        xs.append(np.stack([r * np.cos(a), r * np.sin(a)], 1))
        ys.append(np.full(n, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x_all, y_all = spirals(500, 4, rng)
    with ojas.Engine(numerics="exact", seed=0):  # bit-identical run to run, any thread count
        model = nn.Sequential(nn.Linear(2, args.width), nn.ReLU(),
                              nn.Linear(args.width, args.width), nn.ReLU(),
                              nn.Linear(args.width, 4))
        opt = ojas.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
        for step in range(args.steps):
            idx = rng.integers(0, len(x_all), args.batch)
            loss = F.cross_entropy(model(ojas.from_numpy(x_all[idx])), ojas.from_numpy(y_all[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 50 == 0 or step == args.steps - 1:
                print("step %4d  loss %.4f" % (step, loss.item()))
        with ojas.no_grad():
            pred = model(ojas.from_numpy(x_all)).argmax(1).numpy()
        print("accuracy %.3f" % (pred == y_all).mean())


if __name__ == "__main__":
    main()
