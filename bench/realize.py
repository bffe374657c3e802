"""What a backward after realize costs against one before it (spec/realize.md), beside torch eager.

One MLP step (batch 64, 256 -> 256 -> 1, float32) written two ways:
- "backward first": loss.backward(), then the loss and the gradients are realized together;
- "read first": loss.item() first (PyTorch's habit), then loss.backward() and the gradients.
It prints the kernels run and the time of each way, warm (every kernel compiled), best of N, and the ratio
to torch doing the same step. Nothing is asserted: run `python bench/realize.py [DEVICE] [N]`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import uopgrad.backend as backend_mod
import uopgrad.schedule as sched_mod
from uopgrad import Device, Tensor, UOp
from uopgrad.backend import CompiledBackend

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "CPU"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 20
rng = np.random.default_rng(0)
DATA = {
    "x": rng.standard_normal((64, 256), dtype=np.float32),
    "y": rng.standard_normal((64, 1), dtype=np.float32),
    "w1": rng.standard_normal((256, 256), dtype=np.float32) * 0.05,
    "w2": rng.standard_normal((256, 1), dtype=np.float32) * 0.05,
}

kernels = 0
_schedule = sched_mod.schedule


def _counting(sink: UOp, check: bool = False, **kwargs: Any) -> sched_mod.Schedule:
    """schedule(), counting the kernels it hands the backend."""
    global kernels
    out = _schedule(sink, check=check, **kwargs)
    kernels += len(out.kernels)
    return out


backend_mod.schedule = _counting  # the compiled backends schedule through this name


def step(read_first: bool) -> None:
    x, y = Tensor(DATA["x"], device=DEVICE), Tensor(DATA["y"], device=DEVICE)
    w1 = Tensor(DATA["w1"], device=DEVICE, requires_grad=True)
    w2 = Tensor(DATA["w2"], device=DEVICE, requires_grad=True)
    loss = ((((x @ w1).relu()) @ w2 - y) ** 2).mean()
    if read_first:
        loss.item()
    loss.backward()
    assert w1.grad is not None and w2.grad is not None
    Tensor.realize(loss, w1.grad, w2.grad)


def torch_step() -> None:
    import torch

    x, y = torch.from_numpy(DATA["x"]), torch.from_numpy(DATA["y"])
    w1 = torch.from_numpy(DATA["w1"]).requires_grad_()
    w2 = torch.from_numpy(DATA["w2"]).requires_grad_()
    loss = ((((x @ w1).relu()) @ w2 - y) ** 2).mean()
    loss.item()
    loss.backward()


def best(fn: Callable[[], None]) -> tuple[float, int]:
    global kernels
    fn()  # warm: compile every kernel once
    times, counts = [], []
    for _ in range(N):
        kernels = 0
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        counts.append(kernels)
    return min(times), counts[-1]


if __name__ == "__main__":
    compiled = isinstance(Device[DEVICE], CompiledBackend)
    t_before, k_before = best(lambda: step(False))
    t_after, k_after = best(lambda: step(True))
    try:
        t_torch, _ = best(torch_step)
    except ImportError:
        t_torch = float("nan")
    print(f"device {DEVICE}, best of {N}, warm")
    print(f"{'way':<18} {'kernels':>8} {'ms':>9} {'/ backward first':>17} {'/ torch':>9}")
    for name, t, k in (("backward first", t_before, k_before), ("read first", t_after, k_after)):
        kk = str(k) if compiled else "-"
        print(f"{name:<18} {kk:>8} {t * 1e3:9.2f} {t / t_before:17.2f} {t / t_torch:9.1f}")
    print(f"{'torch eager':<18} {'':>8} {t_torch * 1e3:9.2f}")
