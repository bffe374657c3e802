"""Benchmark (not a test): uopgrad's CUDA backend beside torch on the same GPU (issue 34).

Workloads, each built the same way in both libraries:

  matmul f32 / f16 / bf16   N x N @ N x N (default N = 4096)      FLOP/s = 2*N**3 / time
  sum                       full sum of N*N float32                bytes read / time
  row sum                   sum over the last axis of N x N float32  bytes read / time
  chain8                    8 fused elementwise ops on N*N float32   bytes read + written / time

Times are GPU times, the median of --repeat runs after a warm-up: torch's from CUDA events around the op,
uopgrad's from the events its CUDA runtime records around every launch (summed over the kernels of one
realize; the Python that schedules them is not counted). Each row shows both times, the ratio ours/torch
(below 1: uopgrad faster) and each side's share of the GPU's measured peak: FLOP/s of torch's matmul in
that dtype (TF32 off for float32), bandwidth of a device-to-device copy (bytes read + written).

    pip install ./packages/core './packages/backend-cuda[cuda13]' torch   # a torch built for CUDA
    python bench/gpu.py [--size 4096] [--repeat 10]

Without a GPU (or without cupy or a CUDA torch) the script says so and exits 0; it then runs each workload
once at size 64 on the CUDA emulator (`--smoke` does that also where there is a GPU), which checks that the
script works and that the results match numpy, and times nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

WORKLOADS = ("matmul f32", "matmul f16", "matmul bf16", "sum", "row sum", "chain8")


def chain8(x: Any, maximum: Callable[[Any, float], Any]) -> Any:
    """Eight elementwise ops (bench/kernels.py's recipe): mul, add, mul, sub, max, mul, add, mul."""
    return ((maximum((x * 1.5 + 0.25) * x - 0.5, 0.1) * 0.75) + x) * 2.0


def ours_max(y: Any, c: float) -> Any:
    return y.maximum(c)


def torch_max(y: Any, c: float) -> Any:
    return y.clamp_min(c)  # max(y, c) for a scalar c


# the bandwidth-bound workloads: (uopgrad's op, torch's op, bytes moved per element)
STREAMING: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], int]] = {
    "sum": (lambda t: t.sum(), lambda t: t.sum(), 4),
    "row sum": (lambda t: t.sum(-1), lambda t: t.sum(-1), 4),
    "chain8": (lambda t: chain8(t, ours_max), lambda t: chain8(t, torch_max), 8),
}


def gpu_problem() -> str | None:
    """Why there is no GPU to measure on, or None when uopgrad's CUDA and torch's CUDA both work."""
    if os.environ.get("UOPGRAD_CUDA_EMULATE", "0") not in ("", "0"):
        return "UOPGRAD_CUDA_EMULATE is set (the emulator runs on the host)"
    try:
        from uopgrad_cuda.runtime import open_gpu

        open_gpu("CUDA")
    except Exception as e:  # NoGPUError, a missing package
        return f"uopgrad's CUDA backend finds no GPU ({type(e).__name__}: {e})"
    try:
        import torch
    except ImportError as e:
        return f"torch is not installed ({e})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU (a CPU-only torch?)"
    return None


# ---------------------------------------------------------------------- timing
def torch_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median GPU milliseconds of `fn` (torch), from CUDA events, after a warm-up."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def ours_ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median GPU milliseconds of the kernels one realize of `fn()` launches (each launch is timed by the
    CUDA runtime's events; GlobalCounters sums the host time around them, so read the events instead)."""
    from uopgrad_cuda.runtime import CUDAProgram

    launched: list[float] = []
    real = CUDAProgram.__call__

    def timed(self: CUDAProgram, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        launched.append(self.last_ms)

    CUDAProgram.__call__ = timed  # type: ignore[method-assign]
    try:
        fn().realize()  # warm-up: compiles
        times = []
        for _ in range(repeat):
            launched.clear()
            fn().realize()
            times.append(sum(launched))
    finally:
        CUDAProgram.__call__ = real  # type: ignore[method-assign]
    return statistics.median(times)


# ---------------------------------------------------------------------- the measurement
def peaks(n: int, repeat: int) -> dict[str, float]:
    """The GPU's measured limits: FLOP/s of torch's N^3 matmul per dtype, bytes/s of a device copy."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, float] = {}
    for name, dt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        a = torch.randn(n, n, device="cuda", dtype=dt)
        out[name] = 2 * n**3 / (torch_ms(lambda a=a: a @ a, repeat) / 1e3)
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")  # 256 MiB
    dst = torch.empty_like(src)
    out["bytes"] = 2 * src.numel() / (torch_ms(lambda: dst.copy_(src), repeat) / 1e3)
    return out


def measure(n: int, repeat: int) -> None:
    import torch

    from uopgrad import Tensor, dtypes

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 is float32 on both sides
    dev = "CUDA"
    rng = np.random.default_rng(0)
    limit = peaks(n, repeat)
    print(
        f"GPU: {torch.cuda.get_device_name()}  peaks: "
        f"f32 {limit['f32'] / 1e12:.1f} / f16 {limit['f16'] / 1e12:.1f} / bf16 {limit['bf16'] / 1e12:.1f} "
        f"TFLOP/s (torch matmul {n}^3), copy {limit['bytes'] / 1e9:.0f} GB/s"
    )
    print(
        f"{'workload':12} {'uopgrad ms':>11} {'torch ms':>10} {'ours/torch':>11} {'ours % peak':>12} "
        f"{'torch % peak':>13}"
    )
    x32 = rng.standard_normal((n, n), dtype=np.float32)
    for name in WORKLOADS:
        if name.startswith("matmul"):
            kind = name.split()[1]
            work, peak = 2 * n**3, limit[kind]
            tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[kind]
            ta = torch.from_numpy(x32).to("cuda", tdt)
            theirs = torch_ms(lambda ta=ta: ta @ ta, repeat)
            udt = {"f32": dtypes.float32, "f16": dtypes.float16, "bf16": dtypes.bfloat16}[kind]
            try:
                ua = Tensor(x32, device=dev).cast(udt).realize()
                ours = ours_ms(lambda ua=ua: ua @ ua, repeat)
            except Exception as e:  # bfloat16: the CUDA backend has no bfloat16 buffers yet
                row(name, None, theirs, work, peak, note=f"uopgrad: {type(e).__name__}: {str(e)[:60]}")
                continue
            # the results agree (a wrong tensor-core fragment layout would show here, not in the times)
            want = (ta @ ta).float().cpu().numpy()
            diff = float(np.abs((ua @ ua).numpy().astype(np.float32) - want).max() / np.abs(want).max())
            row(name, ours, theirs, work, peak, note=f"max |ours - torch| / max |torch| = {diff:.1e}")
            continue
        else:
            ta = torch.from_numpy(x32).to("cuda")
            ua = Tensor(x32, device=dev).realize()
            peak = limit["bytes"]
            ours_op, torch_op, bytes_per = STREAMING[name]
            work = bytes_per * n * n
            theirs = torch_ms(functools.partial(torch_op, ta), repeat)
            ours = ours_ms(functools.partial(ours_op, ua), repeat)
        row(name, ours, theirs, work, peak)


def row(name: str, ours: float | None, theirs: float, work: float, peak: float, note: str = "") -> None:
    """One line: times, the ratio and each side's share of the peak (`work` per run, `peak` per second)."""

    def share(ms: float) -> str:
        return f"{100 * work / (ms / 1e3) / peak:11.1f}%"

    if ours is None:
        print(f"{name:12} {'-':>11} {theirs:10.3f} {'-':>11} {'-':>12} {share(theirs):>13}  {note}")
        return
    line = (
        f"{name:12} {ours:11.3f} {theirs:10.3f} {ours / theirs:11.2f} {share(ours):>12} {share(theirs):>13}"
    )
    print(f"{line}  {note}" if note else line)


def smoke() -> None:
    """Each workload once at size 64 on the CUDA emulator, checked against numpy; nothing is timed."""
    os.environ["UOPGRAD_CUDA_EMULATE"] = "1"
    from uopgrad import Tensor

    n, rng = 64, np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    h = x.astype(np.float16)
    checks: dict[str, tuple[Callable[[], Any], np.ndarray, float]] = {
        "matmul f32": (lambda: Tensor(x, device="CUDA") @ Tensor(x, device="CUDA"), x @ x, 1e-4),
        "matmul f16": (
            lambda: Tensor(h, device="CUDA") @ Tensor(h, device="CUDA"),
            h.astype(np.float32) @ h.astype(np.float32),
            2e-2,
        ),
        "sum": (lambda: Tensor(x, device="CUDA").sum(), x.sum(dtype=np.float64), 1e-4),
        "row sum": (lambda: Tensor(x, device="CUDA").sum(-1), x.sum(-1, dtype=np.float64), 1e-4),
        "chain8": (
            lambda: chain8(Tensor(x, device="CUDA"), ours_max),
            ((np.maximum((x * 1.5 + 0.25) * x - 0.5, 0.1) * 0.75) + x) * 2.0,
            1e-5,
        ),
    }
    print(f"smoke run on the CUDA emulator, size {n} (results checked against numpy, nothing timed):")
    for name in WORKLOADS:
        if name not in checks:
            print(f"  {name:12} skipped: the CUDA backend has no bfloat16 buffers yet")
            continue
        fn, want, rtol = checks[name]
        got = fn().numpy().astype(np.float64)
        scale = max(1.0, float(np.abs(want).max()))
        ok = np.allclose(got, want, rtol=rtol, atol=rtol * scale)
        print(f"  {name:12} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            sys.exit(f"{name}: the emulator's result differs from numpy's")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    ap.add_argument("--size", type=int, default=4096, help="N of the N x N workloads (default 4096)")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per workload (the median is shown)")
    ap.add_argument("--smoke", action="store_true", help="only the emulator's size-64 check, no timings")
    args = ap.parse_args()
    problem = None if args.smoke else gpu_problem()
    if args.smoke or problem is not None:
        if problem is not None:
            print(f"no CUDA GPU to measure on: {problem}. Nothing is timed.")
        smoke()
        return
    measure(args.size, args.repeat)


if __name__ == "__main__":
    main()
