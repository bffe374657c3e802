"""Benchmark (not a test): uopgrad's generated CPU and OpenCL kernels beside numpy, PyTorch and tinygrad 0.14.

Workloads (issue #4, item 10), each built the same way in every library from one recipe:

  chain8    a fused chain of 8 elementwise ops on 2**22 float32          GB/s = bytes read + written / time
  sum       sum over the last axis of 4096x1024 float32                  GB/s = bytes read / time
  max       max over the last axis of 4096x1024 float32                  GB/s = bytes read / time
  colsum    sum over the first axis of 4096x1024 float32 (a bias gradient's shape)   GB/s = bytes read / time
  matmul    512x512 @ 512x512 float32                                    GFLOP/s = 2*512**3 / time
  mlp cold  forward+backward of an 8-layer MLP (width 256, batch 64), the first step (compiles included)
  mlp step  the same, steady state (the step repeated with new input values)
  grad2001  gradient of a 2001-op elementwise chain, cold (build, lower, compile, run)
  compile   cold latency of one new elementwise kernel (schedule, lower, render, compile, run)

Steady timings are the median of --repeat runs after one warm-up, and the best of --runs such
measurements (default 3: the machine is shared and noisy); "cold" ones run once, against an empty
compile cache (uopgrad: a fresh $UOPGRAD_CACHE_DIR, and a fresh $POCL_CACHE_DIR for PoCL's own kernel cache;
tinygrad: CACHELEVEL=0). A competitor that is missing or fails is reported in the table, never fatal.
Ratios are ours/theirs: below 1 means uopgrad is faster. The first column is uopgrad's CPU backend; the CL
column is uopgrad's OpenCL backend (PoCL on the same CPU unless $UOPGRAD_CL_DEVICE names another device), so
its ratio is CPU/CL. On a CPU device CL does not split reduces over a work-group unless
$UOPGRAD_CL_GROUP_REDUCE=1 (spec/opt.md §4): set it to measure the split.

    pip install ./packages/core ./packages/backend-cpu ./packages/backend-opencl torch==2.13.0 \
        tinygrad==0.14.0
    python bench/kernels.py [--repeat 7] [--runs 3] [--only chain8,sum]

Each throughput is also shown as a share of the machine's measured limits (`machine_limits`: numpy's
memory copy bandwidth, numpy's BLAS float32 GFLOP/s).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from machine import machine_line

# cold numbers need empty caches: set before any library is imported
os.environ["UOPGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="uopgrad-bench-cache-")
os.environ["POCL_CACHE_DIR"] = tempfile.mkdtemp(prefix="uopgrad-bench-pocl-")
os.environ.setdefault("CACHELEVEL", "0")
os.environ.setdefault("DEV", "CPU")  # tinygrad's device

N_CHAIN = 1 << 22
ROWS, COLS = 4096, 1024
MM = 512
MLP_LAYERS, MLP_WIDTH, MLP_BATCH = 8, 256, 64
GRAD_STEPS = 667  # three ops a step: 2001 ops
COLD_LIMIT_S = 180.0  # a competitor's cold 2001-op gradient past this is reported as "> 180 s"


@dataclass
class Workload:
    """One benchmark: what it is, and how to turn a time into a throughput."""

    name: str
    cold: bool = False
    unit: str = ""
    amount: float = 0.0  # bytes (GB/s) or flops (GFLOP/s) per run

    def rate(self, seconds: float, limits: dict[str, float]) -> str:
        """The throughput, and its share of the machine's measured limit for the unit."""
        if not self.amount or seconds <= 0:
            return ""
        r = self.amount / seconds / 1e9
        share = f" {100 * r / limits[self.unit]:3.0f}%" if limits.get(self.unit) else ""
        return f"{r:7.1f} {self.unit}{share}"


def machine_limits() -> dict[str, float]:
    """What this machine measurably sustains, best of a few tries: memory bandwidth (numpy copying 64 MB:
    bytes read + written) and float32 compute (numpy's BLAS on a 1024^3 matmul, on every core)."""
    src = np.ones(1 << 24, np.float32)
    dst = np.empty_like(src)
    a = np.ones((1024, 1024), np.float32)
    copy = mm = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        copy = min(copy, time.perf_counter() - t)
        t = time.perf_counter()
        a @ a
        mm = min(mm, time.perf_counter() - t)
    return {"GB/s": 2 * src.nbytes / copy / 1e9, "GFLOP/s": 2 * 1024**3 / mm / 1e9}


WORKLOADS = [
    Workload("chain8", unit="GB/s", amount=N_CHAIN * 4 * 2),
    Workload("sum", unit="GB/s", amount=ROWS * COLS * 4),
    Workload("max", unit="GB/s", amount=ROWS * COLS * 4),
    Workload("colsum", unit="GB/s", amount=ROWS * COLS * 4),
    Workload("matmul", unit="GFLOP/s", amount=2 * MM**3),
    Workload("mlp cold", cold=True),
    Workload("mlp step"),
    Workload("grad2001", cold=True),
    Workload("compile", cold=True),
]


# ---------------------------------------------------------------------- the shared recipes
def chain8(x: Any, maximum: Callable[[Any, float], Any]) -> Any:
    """Eight elementwise ops: mul, add, mul, sub, max, mul, add, mul."""
    y = x * 1.5
    y = y + 0.25
    y = y * x
    y = y - 0.5
    y = maximum(y, 0.1)
    y = y * 0.75
    y = y + x
    return y * 2.0


def grad_chain(x: Any) -> Any:
    """2001 elementwise ops (y*y*0.5 + 0.25, 667 times) and a sum."""
    y = x
    for _ in range(GRAD_STEPS):
        y = y * y * 0.5 + 0.25
    return y.sum()


def host_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "chain": rng.random(N_CHAIN, dtype=np.float32),
        "rows": rng.standard_normal((ROWS, COLS), dtype=np.float32),
        "a": rng.standard_normal((MM, MM), dtype=np.float32),
        "b": rng.standard_normal((MM, MM), dtype=np.float32),
        "x": rng.standard_normal((MLP_BATCH, MLP_WIDTH), dtype=np.float32),
        "ws": (rng.standard_normal((MLP_LAYERS, MLP_WIDTH, MLP_WIDTH), dtype=np.float32) / 16),
        "g": rng.random(1024, dtype=np.float32),
    }


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def steady(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: compiles, allocations, caches
    return statistics.median(timed(fn) for _ in range(repeat))


# ---------------------------------------------------------------------- one runner per library
class Runner:
    """Runs the workloads in one library; each method returns seconds."""

    name = ""

    def __init__(self, data: dict[str, np.ndarray], repeat: int) -> None:
        self.data, self.repeat = data, repeat

    def run(self, w: Workload) -> float:
        return float(getattr(self, w.name.replace(" ", "_"))())


class Ours(Runner):
    name = "uopgrad"
    device = "CPU"

    def __init__(self, data: dict[str, np.ndarray], repeat: int) -> None:
        super().__init__(data, repeat)
        from uopgrad.backend import Device
        from uopgrad.tensor import Tensor

        self.T = Tensor
        Device[self.device]
        self.dev = self.device

    def tensor(self, a: np.ndarray, grad: bool = False) -> Any:
        return self.T(a, device=self.dev, requires_grad=grad).realize()

    def chain8(self) -> float:
        x = self.tensor(self.data["chain"])
        return steady(lambda: chain8(x, lambda y, c: y.maximum(c)).realize(), self.repeat)

    def sum(self) -> float:
        x = self.tensor(self.data["rows"])
        return steady(lambda: x.sum(axis=-1).realize(), self.repeat)

    def max(self) -> float:
        x = self.tensor(self.data["rows"])
        return steady(lambda: x.max(axis=-1).realize(), self.repeat)

    def colsum(self) -> float:
        x = self.tensor(self.data["rows"])
        return steady(lambda: x.sum(axis=0).realize(), self.repeat)

    def matmul(self) -> float:
        a, b = self.tensor(self.data["a"]), self.tensor(self.data["b"])
        return steady(lambda: (a @ b).realize(), self.repeat)

    def _mlp_step(self, ws: list[Any], x: np.ndarray) -> None:
        h = self.T(x, device=self.dev)
        for w in ws:
            h = (h @ w).relu()
        loss = h.sum()
        grads = loss.gradient(*ws)
        self.T.realize(loss, *grads)

    def mlp_cold(self) -> float:
        ws = [self.tensor(w, grad=True) for w in self.data["ws"]]
        return timed(lambda: self._mlp_step(ws, self.data["x"]))

    def mlp_step(self) -> float:
        ws = [self.tensor(w, grad=True) for w in self.data["ws"]]
        xs = [self.data["x"] * (1 + i / 100) for i in range(self.repeat + 1)]
        it = iter(xs)
        return steady(lambda: self._mlp_step(ws, next(it)), self.repeat)

    def grad2001(self) -> float:
        def go() -> None:
            x = self.tensor(self.data["g"], grad=True)
            (g,) = grad_chain(x).gradient(x)
            g.realize()

        return timed(go)

    def compile(self) -> float:
        x = self.tensor(self.data["g"])
        c = float(np.random.default_rng().random()) + 2.0  # a constant no kernel has had: a new source
        return timed(lambda: (x * c + 1.0).realize())


class OursCL(Ours):
    """The same workloads on uopgrad's OpenCL backend."""

    name = "CL"
    device = "CL"


class Numpy(Runner):
    name = "numpy"

    def chain8(self) -> float:
        x = self.data["chain"]
        return steady(lambda: chain8(x, np.maximum), self.repeat)

    def sum(self) -> float:
        return steady(lambda: self.data["rows"].sum(axis=-1), self.repeat)

    def max(self) -> float:
        return steady(lambda: self.data["rows"].max(axis=-1), self.repeat)

    def colsum(self) -> float:
        return steady(lambda: self.data["rows"].sum(axis=0), self.repeat)

    def matmul(self) -> float:
        return steady(lambda: self.data["a"] @ self.data["b"], self.repeat)


class Torch(Runner):
    name = "torch"

    def __init__(self, data: dict[str, np.ndarray], repeat: int) -> None:
        super().__init__(data, repeat)
        import torch

        self.torch = torch

    def t(self, a: np.ndarray, grad: bool = False) -> Any:
        return self.torch.tensor(a, requires_grad=grad)

    def chain8(self) -> float:
        x = self.t(self.data["chain"])
        return steady(lambda: chain8(x, lambda y, c: self.torch.clamp_min(y, c)), self.repeat)

    def sum(self) -> float:
        x = self.t(self.data["rows"])
        return steady(lambda: x.sum(dim=-1), self.repeat)

    def max(self) -> float:
        x = self.t(self.data["rows"])
        return steady(lambda: x.amax(dim=-1), self.repeat)

    def colsum(self) -> float:
        x = self.t(self.data["rows"])
        return steady(lambda: x.sum(dim=0), self.repeat)

    def matmul(self) -> float:
        a, b = self.t(self.data["a"]), self.t(self.data["b"])
        return steady(lambda: a @ b, self.repeat)

    def _mlp_step(self, ws: list[Any]) -> None:
        h = self.t(self.data["x"])
        for w in ws:
            h = (h @ w).relu()
        self.torch.autograd.grad(h.sum(), ws)

    def mlp_cold(self) -> float:
        ws = [self.t(w, grad=True) for w in self.data["ws"]]
        return timed(lambda: self._mlp_step(ws))

    def mlp_step(self) -> float:
        ws = [self.t(w, grad=True) for w in self.data["ws"]]
        return steady(lambda: self._mlp_step(ws), self.repeat)

    def grad2001(self) -> float:
        def go() -> None:
            x = self.t(self.data["g"], grad=True)
            self.torch.autograd.grad(grad_chain(x), [x])

        return timed(go)


class Tinygrad(Runner):
    name = "tinygrad"

    def __init__(self, data: dict[str, np.ndarray], repeat: int) -> None:
        super().__init__(data, repeat)
        from tinygrad import Device, Tensor

        self.T, self.device = Tensor, Device
        if Device.DEFAULT == "CPU" and shutil.which("clang") is None:
            raise FileNotFoundError(
                "tinygrad's CPU device compiles with clang: put one on PATH (Debian: apt-get install clang)"
            )
        (Tensor([1.0]) * 2).realize()  # fails here, with the reason, when tinygrad can't compile

    def tensor(self, a: np.ndarray, grad: bool = False) -> Any:
        return self.T(a).realize()  # 0.14 has no requires_grad: Tensor.gradient(*targets) needs none

    def sync(self, t: Any) -> None:
        t.realize()
        self.device[self.device.DEFAULT].synchronize()

    def chain8(self) -> float:
        x = self.tensor(self.data["chain"])
        return steady(lambda: self.sync(chain8(x, lambda y, c: y.maximum(c))), self.repeat)

    def sum(self) -> float:
        x = self.tensor(self.data["rows"])
        return steady(lambda: self.sync(x.sum(axis=-1)), self.repeat)

    def max(self) -> float:
        x = self.tensor(self.data["rows"])
        return steady(lambda: self.sync(x.max(axis=-1)), self.repeat)

    def colsum(self) -> float:
        x = self.tensor(self.data["rows"])
        return steady(lambda: self.sync(x.sum(axis=0)), self.repeat)

    def matmul(self) -> float:
        a, b = self.tensor(self.data["a"]), self.tensor(self.data["b"])
        return steady(lambda: self.sync(a @ b), self.repeat)

    def _mlp_step(self, ws: list[Any], x: np.ndarray) -> None:
        h = self.T(x)
        for w in ws:
            h = (h @ w).relu()
        grads = h.sum().gradient(*ws)
        self.T.realize(*grads)
        self.device[self.device.DEFAULT].synchronize()

    def mlp_cold(self) -> float:
        ws = [self.tensor(w, grad=True) for w in self.data["ws"]]
        return timed(lambda: self._mlp_step(ws, self.data["x"]))

    def mlp_step(self) -> float:
        ws = [self.tensor(w, grad=True) for w in self.data["ws"]]
        xs = iter([self.data["x"] * (1 + i / 100) for i in range(self.repeat + 1)])
        return steady(lambda: self._mlp_step(ws, next(xs)), self.repeat)

    def grad2001(self) -> float:
        # tinygrad's codegen of this graph may run for many minutes: measured in a child process, bounded
        return in_child("tinygrad", "grad2001_here", COLD_LIMIT_S)

    def grad2001_here(self) -> float:
        def go() -> None:
            x = self.tensor(self.data["g"], grad=True)
            (g,) = grad_chain(x).gradient(x)
            self.sync(g)

        return timed(go)

    def compile(self) -> float:
        x = self.tensor(self.data["g"])
        c = float(np.random.default_rng().random()) + 2.0
        return timed(lambda: self.sync(x * c + 1.0))


def in_child(runner: str, method: str, limit: float) -> float:
    """Seconds that `runner.method` takes in a fresh process; TimeoutError past `limit` seconds."""
    cmd = [sys.executable, __file__, "--child", f"{runner}:{method}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, check=True).stdout
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"> {limit:.0f} s") from None
    except subprocess.CalledProcessError as e:
        lines = (e.stderr or "").strip().splitlines()
        raise RuntimeError(lines[-1] if lines else "the child process failed") from None
    return float(out.strip().splitlines()[-1])


RUNNERS: list[type[Runner]] = [Ours, OursCL, Numpy, Torch, Tinygrad]


# ---------------------------------------------------------------------- the table
@dataclass
class Column:
    name: str
    times: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def measure(runner_cls: type[Runner], data: dict[str, np.ndarray], repeat: int, only: list[str]) -> Column:
    col = Column(runner_cls.name)
    try:
        runner = runner_cls(data, repeat)
    except Exception as e:  # a missing or broken competitor is reported, not fatal
        col.notes["*"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
        return col
    for w in WORKLOADS:
        if only and w.name not in only:
            continue
        if not hasattr(runner, w.name.replace(" ", "_")):
            col.notes[w.name] = "n/a"
            continue
        try:
            col.times[w.name] = runner.run(w)
        except TimeoutError as e:
            col.notes[w.name] = str(e)
        except Exception as e:
            msg = str(e).strip().splitlines()
            col.notes[w.name] = f"failed: {type(e).__name__}"
            print(
                f"  {runner_cls.name} {w.name}: {type(e).__name__}: {msg[-1][:200] if msg else ''}",
                file=sys.stderr,
            )
            if os.environ.get("BENCH_TRACEBACK"):
                traceback.print_exc()
    return col


def fmt_time(s: float) -> str:
    return f"{s * 1e3:9.2f} ms" if s < 10 else f"{s:9.2f} s "


def report(cols: list[Column], only: list[str], limits: dict[str, float]) -> None:
    ours, others = cols[0], cols[1:]
    print(
        f"machine limits (measured): {limits['GB/s']:.1f} GB/s memory copy, "
        f"{limits['GFLOP/s']:.1f} GFLOP/s float32 BLAS matmul; % is uopgrad's share of them"
    )
    head = f"{'workload':<10} | {'uopgrad':>12} {'':>18}"
    for c in others:
        head += f" | {c.name:>12} {'ours/' + c.name[:5]:>11}"
    print(head)
    print("-" * len(head))
    for w in WORKLOADS:
        if only and w.name not in only:
            continue
        t = ours.times.get(w.name)
        line = f"{w.name:<10} | " + (
            f"{fmt_time(t)} {w.rate(t, limits):>18}"
            if t is not None
            else f"{ours.notes.get(w.name, ours.notes.get('*', '-')):>31}"
        )
        for c in others:
            u = c.times.get(w.name)
            cell = fmt_time(u) if u is not None else c.notes.get(w.name, c.notes.get("*", "-"))[:12]
            ratio = f"{t / u:9.2f}x" if t is not None and u is not None else ""
            line += f" | {cell:>12} {ratio:>11}"
        print(line)
    for c in cols:
        if "*" in c.notes:
            print(f"{c.name}: not run ({c.notes['*']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="measure the table this many times, keep each cell's best (noisy machine)",
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)  # runner:method, run by in_child
    args = parser.parse_args()
    if args.child:
        name, _, method = args.child.partition(":")
        runner = {cls.name: cls for cls in RUNNERS}[name](host_data(), args.repeat)
        print(getattr(runner, method)())
        return
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    print(f"{machine_line()}, python {platform.python_version()}, numpy {np.__version__}")
    data = host_data()
    cols = [measure(cls, data, args.repeat, only) for cls in RUNNERS]
    for _ in range(args.runs - 1):  # steady timings: the best of the runs; cold ones were measured once
        for col, cls in zip(cols, RUNNERS):
            steady = [w.name for w in WORKLOADS if not w.cold and w.name in col.times]
            again = measure(cls, data, args.repeat, steady) if steady else col
            for name in steady:
                if name in again.times:
                    col.times[name] = min(col.times[name], again.times[name])
    print(f"steady timings: the best of {args.runs} runs, each the median of {args.repeat}")
    report(cols, only, machine_limits())


if __name__ == "__main__":
    main()
