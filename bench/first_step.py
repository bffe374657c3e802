"""The first step a user waits for (issue 35), in a fresh process with empty compile caches, ours beside
tinygrad and torch eager, as ratios. Two workloads:

- `block`: forward and backward of a small transformer block, pre-norm attention (4 heads) and a GELU MLP on
  a (4, 32, 64) input, a mean loss read with `.item()`, then `backward()` and every gradient read back;
- `digits`: step 1 of `nox -s digits` (examples/digits.py): its CNN (two conv -> batchnorm -> relu -> maxpool
  blocks and a linear layer) on one batch of 128 8x8 images, cross entropy, backward and an Adam step
  realized together in training mode, then the loss read, as that example's loop does (random images of
  the digits' shape: the data set is not needed to time a step).

Each library runs in a process of its own with its caches pointed at new empty directories, so every kernel
is compiled; the time is the step alone (imports and the random weights are outside it). tinygrad needs a C
compiler for its CPU device (clang): where it has none its row says why. Best of `N` fresh processes
(default 3). Then ours once more in new processes over a cache directory one process filled: the first
step of every later run of a script, which neither lowers nor compiles (uopgrad.program_store).

`python bench/first_step.py [DEVICE] [N]`; nothing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from machine import machine_line

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

# the digits example's first step (examples/digits.py: Net and one iteration of train()), in either library
_DIGITS_STEP = """
import json, sys, time
import numpy as np
if sys.argv[1] == "ours":
    from uopgrad import Tensor, GlobalCounters
    from uopgrad.nn import BatchNorm, Conv2d, Linear
    from uopgrad.nn.optim import Adam
    from uopgrad.nn.state import get_parameters
    dev, train = sys.argv[2], Tensor.train
else:
    from tinygrad import Tensor, GlobalCounters
    from tinygrad.nn import BatchNorm, Conv2d, Linear
    from tinygrad.nn.optim import Adam
    from tinygrad.nn.state import get_parameters
    from tinygrad import Context
    dev, train = None, lambda: Context(TRAINING=1)  # tinygrad 0.14's training mode
class Net:
    def __init__(self):
        self.c1, self.bn1 = Conv2d(1, 16, 3, padding=1), BatchNorm(16)
        self.c2, self.bn2 = Conv2d(16, 32, 3, padding=1), BatchNorm(32)
        self.fc = Linear(128, 10)
    def __call__(self, x):
        x = self.bn1(self.c1(x)).relu().max_pool2d(2)
        x = self.bn2(self.c2(x)).relu().max_pool2d(2)
        return self.fc(x.flatten(1))
Tensor.manual_seed(0)
net = Net()
opt = Adam(get_parameters(net), lr=0.02)
rng = np.random.default_rng(0)
xb = Tensor(rng.random((128, 1, 8, 8), dtype=np.float32), device=dev)
yb = Tensor(rng.integers(0, 10, 128).astype(np.int32), device=dev)
Tensor.realize(*get_parameters(net), xb, yb)
start = time.perf_counter()
opt.zero_grad()
with train():
    loss = net(xb).cross_entropy(yb)
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
value = float(loss.item())
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "kernels": GlobalCounters.kernel_count, "loss": value}))
"""

_TORCH_DIGITS_STEP = """
import json, time, numpy as np, torch
torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(net.parameters(), lr=0.02)
rng = np.random.default_rng(0)
xb = torch.tensor(rng.random((128, 1, 8, 8), dtype=np.float32))
yb = torch.tensor(rng.integers(0, 10, 128).astype(np.int64))
start = time.perf_counter()
opt.zero_grad()
loss = torch.nn.functional.cross_entropy(net(xb), yb)
loss.backward()
opt.step()
value = float(loss.item())
print(json.dumps({"seconds": time.perf_counter() - start, "kernels": 0, "loss": value}))
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


# workload -> (the script ours and tinygrad run, torch's script, its title)
WORKLOADS = {
    "block": (_TENSOR_STEP, _TORCH_STEP, f"first step of a transformer block ({B}x{T}x{C}, {HEADS} heads)"),
    "digits": (_DIGITS_STEP, _TORCH_DIGITS_STEP, "step 1 of the digits CNN (nox -s digits, batch 128)"),
}


def fresh(lib: str, workload: str, caches: str = "") -> dict[str, float] | str:
    """One cold step of `lib` in a new process with empty caches (or those of `caches`, which an earlier
    process filled): its figures, or why it did not run."""
    caches = caches or tempfile.mkdtemp(prefix="uopgrad-first-step-")
    env = dict(
        os.environ,
        UOPGRAD_CACHE_DIR=f"{caches}/ours",
        POCL_CACHE_DIR=f"{caches}/pocl",
        CACHEDB=f"{caches}/tinygrad.db",
        CACHELEVEL="0",
        DEV=os.environ.get("DEV", "CPU"),
    )
    tensor_src, torch_src, _ = WORKLOADS[workload]
    src, args = (torch_src, []) if lib == "torch" else (tensor_src, [lib, DEVICE])
    res = subprocess.run([sys.executable, "-c", src, *args], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return f"did not run: {last[:100]}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def best(lib: str, workload: str, caches: str = "") -> dict[str, float] | str:
    runs = [fresh(lib, workload, caches) for _ in range(N)]
    ok = [r for r in runs if isinstance(r, dict)]
    return min(ok, key=lambda r: r["seconds"]) if ok else runs[0]


def main() -> None:
    print(f"{machine_line()}; ours on {DEVICE}")
    for workload in WORKLOADS:
        report(workload)


def report(workload: str) -> None:
    print(f"{WORKLOADS[workload][2]}, cold, best of {N} fresh processes")
    rows = {lib: best(lib, workload) for lib in ("ours", "tinygrad", "torch")}
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
    # a new process of ours after one that filled its cache directory: nothing to lower or compile
    caches = tempfile.mkdtemp(prefix="uopgrad-first-step-")
    fresh("ours", workload, caches)
    warm = best("ours", workload, caches)
    if isinstance(warm, dict):
        print(f"  ours, a new process over a filled cache: {warm['seconds']:8.3f} s (best of {N})")


if __name__ == "__main__":
    main()
