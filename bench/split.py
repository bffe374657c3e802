"""Benchmark (not a test): compile time of a long backward graph with and without the kernel op budget.

The program is an n-op elementwise chain and its gradient (the case where unbounded fusion made one huge C
function). For each n it schedules and runs the program on DEVICE twice, with the default `KERNEL_OPS`
budget and with `KERNEL_OPS=0` (never cut), each time with an empty compile cache, and prints the kernels,
the largest kernel's op count and the wall time. Nothing is asserted about speed.

    PYTHONPATH=packages/core/src python bench/split.py [DEVICE] [n ...]   (default: CPU 1000 2000 4000)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from uopgrad import GroupOp, Tensor
from uopgrad.config import KERNEL_OPS, Context
from uopgrad.schedule import clear_schedule_cache, schedule


def program(n: int, device: str) -> tuple[Tensor, Tensor]:
    x = Tensor(np.linspace(-1, 1, 64, dtype=np.float32), device=device, requires_grad=True)
    y = x
    for i in range(n):
        y = (y * 1.01 + 0.1).sin() if i % 2 else y.exp2() * 0.5 - y
    (g,) = y.sum().gradient(x)
    return y, g


def run(n: int, device: str, budget: int) -> tuple[int, int, float]:
    with Context(KERNEL_OPS=budget), tempfile.TemporaryDirectory() as cache:
        os.environ["UOPGRAD_CACHE_DIR"] = cache
        clear_schedule_cache()
        y, g = program(n, device)
        kernels = schedule(y.uop.sink(g.uop)).kernels
        biggest = max(sum(u.op in GroupOp.ALU for u in k.src[0].toposort()) for k in kernels)
        start = time.perf_counter()
        Tensor.realize(y, g)
        g.numpy()
        return len(kernels), biggest, time.perf_counter() - start


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "CPU"
    sizes = [int(a) for a in sys.argv[2:]] or [1000, 2000, 4000]
    default = int(KERNEL_OPS)
    print(f"{'ops':>6} {'budget':>7} {'kernels':>8} {'largest':>8} {'realize (s)':>12}")
    for n in sizes:
        for budget in (default, 0):
            k, big, t = run(n, device, budget)
            print(f"{n:>6} {budget or 'none':>7} {k:>8} {big:>8} {t:12.2f}")


if __name__ == "__main__":
    main()
