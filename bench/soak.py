"""Soak (not a test): many training steps over ever new shapes, printing RSS, memory mappings and cache sizes
as it goes, so unbounded growth shows. `python bench/soak.py [steps] [shapes]` (default 10000 steps over 2000
shapes; CPU unless UOPGRAD_DEVICE says otherwise)."""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np

from uopgrad import Device, Tensor
from uopgrad.pipeline import program_cache_info
from uopgrad.schedule import schedule_cache_info
from uopgrad.uop import UOpMetaClass


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def mappings() -> int:
    return len(Path("/proc/self/maps").read_text().splitlines())


def step(batch: int, w1: Tensor, w2: Tensor) -> float:
    x = Tensor(np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32))
    loss = ((x @ w1).relu() @ w2).square().mean()
    loss.backward()
    for w in (w1, w2):
        assert w.grad is not None
        w.assign(w - w.grad * 0.01)
        w.grad = None
    value = float(loss.numpy())
    Tensor.realize(w1, w2)  # the update runs every step (else each step's graph would hold the last one)
    return value


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    shapes = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000
    print(f"device {Device.DEFAULT}: {steps} steps over {shapes} batch sizes")
    rng = np.random.default_rng(0)
    w1 = Tensor(rng.standard_normal((8, 16)).astype(np.float32) * 0.1, requires_grad=True)
    w2 = Tensor(rng.standard_normal((16, 1)).astype(np.float32) * 0.1, requires_grad=True)
    start = time.perf_counter()
    every = max(steps // 10, 1)
    for i in range(steps):
        loss = step(1 + i % shapes, w1, w2)
        if (i + 1) % every == 0 or i + 1 == steps:
            gc.collect()
            kernels = len(getattr(Device[Device.DEFAULT], "_kernels", ()))
            print(
                f"step {i + 1:6d}  loss {loss:9.4f}  rss {rss_mb():7.1f} MB  maps {mappings():6d}  "
                f"kernels {kernels:5d}  programs {program_cache_info()['size']:5d}  "
                f"schedules {schedule_cache_info()['size']:5d}  uops {len(UOpMetaClass.ucache):7d}  "
                f"{time.perf_counter() - start:7.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
