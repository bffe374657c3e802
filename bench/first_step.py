"""The first step a user waits for (issue 35): forward and backward of a small transformer block in a fresh
process with empty compile caches, ours beside tinygrad and torch eager, as ratios.

The block: pre-norm attention (4 heads) and a GELU MLP on a (4, 32, 64) input, a mean loss read with
`.item()`, then `backward()` and every gradient read back, as a user's first training step does. Each library
runs in a process of its own with its caches pointed at new empty directories, so every kernel is compiled;
the time is the step alone (imports and the random weights are outside it). tinygrad needs a C compiler for
its CPU device (clang): where it has none its row says why. Best of `N` fresh processes (default 3).

`python bench/first_step.py [DEVICE] [N]`; nothing is asserted.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "CPU"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3
B, T, C, HEADS = 4, 32, 64, 4

# one script for ours and tinygrad's (the same Tensor API); `LIB` picks the import
_TENSOR_STEP = f"""
import json, sys, time
import numpy as np
if sys.argv[1] == "ours":
    from uopgrad import Tensor, GlobalCounters
    dev = sys.argv[2]
else:
    from tinygrad import Tensor, GlobalCounters
    dev = None
B, T, C, H = {B}, {T}, {C}, {HEADS}
rng = np.random.default_rng(0)
def param(*shape):
    t = Tensor(rng.standard_normal(shape).astype(np.float32) * 0.1, device=dev)
    t.requires_grad = True
    return t
wq, wk, wv, wo, w1, w2 = param(C, C), param(C, C), param(C, C), param(C, C), param(C, 4 * C), param(4 * C, C)
x = Tensor(rng.standard_normal((B, T, C)).astype(np.float32), device=dev)
params = [wq, wk, wv, wo, w1, w2]
start = time.perf_counter()
h = x.layernorm()
q, k, v = [(h @ w).reshape(B, T, H, C // H).permute(0, 2, 1, 3) for w in (wq, wk, wv)]
att = (q @ k.transpose(-1, -2) / (C // H) ** 0.5).softmax(-1) @ v
x2 = x + att.permute(0, 2, 1, 3).reshape(B, T, C) @ wo
out = x2 + (x2.layernorm() @ w1).gelu() @ w2
loss = out.mean()
value = loss.item()
loss.backward()
grads = [p.grad.numpy() for p in params]
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "kernels": GlobalCounters.kernel_count, "loss": value}}))
"""

_TORCH_STEP = f"""
import json, time, numpy as np, torch
B, T, C, H = {B}, {T}, {C}, {HEADS}
rng = np.random.default_rng(0)
def param(*shape):
    return torch.tensor(rng.standard_normal(shape).astype(np.float32) * 0.1, requires_grad=True)
wq, wk, wv, wo, w1, w2 = param(C, C), param(C, C), param(C, C), param(C, C), param(C, 4 * C), param(4 * C, C)
x = torch.tensor(rng.standard_normal((B, T, C)).astype(np.float32))
params = [wq, wk, wv, wo, w1, w2]
ln = lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:])
start = time.perf_counter()
h = ln(x)
q, k, v = [(h @ w).reshape(B, T, H, C // H).permute(0, 2, 1, 3) for w in (wq, wk, wv)]
att = ((q @ k.transpose(-1, -2)) / (C // H) ** 0.5).softmax(-1) @ v
x2 = x + att.permute(0, 2, 1, 3).reshape(B, T, C) @ wo
out = x2 + torch.nn.functional.gelu(ln(x2) @ w1, approximate="tanh") @ w2
loss = out.mean()
value = loss.item()
loss.backward()
grads = [p.grad.numpy() for p in params]
print(json.dumps({{"seconds": time.perf_counter() - start, "kernels": 0, "loss": value}}))
"""


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one) and the core count."""
    try:
        name = next(
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        )
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def fresh(lib: str) -> dict[str, float] | str:
    """One cold step of `lib` in a new process with empty caches: its figures, or why it did not run."""
    caches = tempfile.mkdtemp(prefix="uopgrad-first-step-")
    env = dict(
        os.environ,
        UOPGRAD_CACHE_DIR=f"{caches}/ours",
        POCL_CACHE_DIR=f"{caches}/pocl",
        CACHEDB=f"{caches}/tinygrad.db",
        CACHELEVEL="0",
        DEV=os.environ.get("DEV", "CPU"),
    )
    src, args = (_TORCH_STEP, []) if lib == "torch" else (_TENSOR_STEP, [lib, DEVICE])
    res = subprocess.run([sys.executable, "-c", src, *args], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return f"did not run: {last[:100]}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def best(lib: str) -> dict[str, float] | str:
    runs = [fresh(lib) for _ in range(N)]
    ok = [r for r in runs if isinstance(r, dict)]
    return min(ok, key=lambda r: r["seconds"]) if ok else runs[0]


def main() -> None:
    print(
        f"first step of a transformer block ({B}x{T}x{C}, {HEADS} heads), cold, best of {N} fresh processes"
    )
    print(f"machine: {cpu_model()}; ours on {DEVICE}")
    rows = {lib: best(lib) for lib in ("ours", "tinygrad", "torch")}
    ours = rows["ours"]
    for lib, r in rows.items():
        if isinstance(r, str):
            print(f"  {lib:9s} {r}")
            continue
        ratio = (
            f"ours/{lib} {ours['seconds'] / r['seconds']:7.2f}x"
            if isinstance(ours, dict) and lib != "ours"
            else ""
        )
        kernels = f"{int(r['kernels']):4d} kernels" if r["kernels"] else " " * 12
        print(f"  {lib:9s} {r['seconds']:8.3f} s  {kernels}  loss {r['loss']:+.6f}  {ratio}")


if __name__ == "__main__":
    main()
