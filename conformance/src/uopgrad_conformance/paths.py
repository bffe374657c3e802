"""The paths a user's training program takes (docs/conformance.md "What it checks" 7), each a fixed program
written as a PyTorch/tinygrad user writes it (the loss read each step, then backward, updates in place,
several steps), run on the backend and on REFERENCE, whose results it must give:

- `jit step`: a TinyJit training step (SGD with momentum, dropout, a new batch passed in each call and a
  bound variable picking the targets' rows): its first call, its capture and three replays. Replays
  launch bound kernels with the call's inputs and variable values, and draw new random values;
- `optimiser`: three steps of SGD (momentum, nesterov, weight decay) and of Adam on a 2-layer MLP;
- `matmul panels`: `x @ w` and `x @ v.T` (a layer's transposed weight) with gradients, sized so that the
  opt pass packs (and gathers) the right operand's panel on a loop-style target with scratch (k x n over
  512 KB, 260 columns: no 16-wide tile), and a 61 x 257 product of views that no tile divides;
- `grouped reduce`: sums, maxima and a logsumexp over rows of 1037 and 777 elements (no power of two) and
  a sum of 70001 (a split reduce on a grid target): on a target with local memory these are grouped over a
  workgroup, whose last thread's chunk runs past the end;
- `sharded shrink`: a value sharded over the device and its second one on axis 0, shrunk at both ends of
  that axis (`x[1:]`, `x[:-1]`, `x[2:-1]`, a slice inside one shard) and reduced over it (whole: an
  all-reduce), in a data-parallel loss with gradients, against the unsharded program (not claimed
  without a second device);
- `gradient template`: one structure differentiated for two target sets and in two dtypes in one process
  (a gradient template cached for one must not serve another);
- `memory`: ten training steps with a running mean of the loss realized under `no_grad`: from the third
  step on, the device memory in use (`GlobalCounters.mem_used_per_device`) must not grow (one step of
  buffers is held, never a chain of them).

A failure prints the program as a repro, REFERENCE's values as comments."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from uopgrad import Device, DType, Tensor, dtypes
from uopgrad.backend import CompiledBackend
from uopgrad_conformance.forward import Failure, format_exception
from uopgrad_conformance.numerics import name
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import execute, namespace, snippet
from uopgrad_conformance.target import REFERENCE, Target

__all__ = ["OPTIMISERS", "ROWS", "PathProgram", "check_memory", "check_path", "program"]

ROWS = (
    "jit step",
    "optimiser",
    "matmul panels",
    "grouped reduce",
    "sharded shrink",
    "gradient template",
    "memory",
)
_SGD = "SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)"
_BIAS = "Tensor(np.zeros(7), device=dev, dtype=dt, requires_grad=True)"
# payload -> (the optimiser, how the bias is made): from numpy (a buffer from the start), and by
# `Tensor.zeros(..., requires_grad=True)` as a user makes one (no buffer until the first step replaces it)
OPTIMISERS = {
    "SGD": (_SGD, _BIAS),
    "Adam": ("Adam(params, lr=0.01)", _BIAS),
    "SGD zeros bias": (_SGD, "Tensor.zeros(7, device=dev, dtype=dt, requires_grad=True)"),
}
MEMORY_STEPS, MEMORY_WARMUP = 10, 2

# Program texts: no blank and no indented lines (a repro is cut out of pytest's `E`-prefixed output, which
# takes a snippet's blank lines for its end and its leading spaces for the prefix): a step is a one-line def,
# training mode is set for the program (`check_path` resets it)
_JIT_STEP = """\
from uopgrad import TinyJit
from uopgrad.nn.optim import SGD
rng = np.random.default_rng(1)
batches = [Tensor(rng.standard_normal((2, 6)), device=dev, dtype=dt) for _ in range(5)]
targets = Tensor(rng.standard_normal((10, 3)), device=dev, dtype=dt)
w = Tensor(rng.standard_normal((6, 3)) * 0.5, device=dev, dtype=dt, requires_grad=True)
opt = SGD([w], lr=0.1, momentum=0.9)
i = UOp.variable("i", 0, 8)
Tensor.manual_seed(3)
Tensor.training = True
def forward(x, v): opt.zero_grad(); return (((x @ w).dropout(0.25) - targets[v:v + 2]) ** 2).mean()
def backward(loss): loss.backward(); Tensor.realize(loss, *opt.schedule_step()); return loss
@TinyJit
def train_step(x, v): return backward(forward(x, v))
losses = [train_step(x, i.bind(k)).item() for x, k in zip(batches, (0, 3, 5, 8, 1))]
print("losses", losses)
out = [np.array(losses), w.numpy()]"""

_OPTIMISER = """\
from uopgrad.nn.optim import SGD, Adam
rng = np.random.default_rng(2)
x = Tensor(rng.standard_normal((8, 5)), device=dev, dtype=dt)
y = Tensor(rng.standard_normal((8, 2)), device=dev, dtype=dt)
w1 = Tensor(rng.standard_normal((5, 7)) * 0.4, device=dev, dtype=dt, requires_grad=True)
b1 = {bias}
w2 = Tensor(rng.standard_normal((7, 2)) * 0.4, device=dev, dtype=dt, requires_grad=True)
params = [w1, b1, w2]
opt = {opt}
Tensor.training = True
def loss_of(): opt.zero_grad(); return (((x @ w1 + b1).relu() @ w2 - y) ** 2).mean()
def step(loss): losses.append(loss.item()); loss.backward(); opt.step()
losses = []
for _ in range(3): step(loss_of())
out = [np.array(losses), w1.numpy(), b1.numpy(), w2.numpy()]"""

_MATMUL = """\
rng = np.random.default_rng(3)
x = Tensor(rng.standard_normal(({m}, {k})), device=dev, dtype=dt, requires_grad=True)
w = Tensor(rng.standard_normal(({k}, {n})) * 0.05, device=dev, dtype=dt, requires_grad=True)
v = Tensor(rng.standard_normal(({n}, {k})) * 0.05, device=dev, dtype=dt, requires_grad=True)
c = Tensor(rng.standard_normal(({m}, {n})), device=dev, dtype=dt)
y = x @ w  # the panel of w: {k} x {n} floats{panel}
z = x @ v.T  # a layer's weight, transposed: its panel gathered
odd = x[3:] @ w[:, :{odd}]  # {m_odd} x {odd}: no tile divides it
loss = (y * c).sum() + (z * c).square().mean() + odd.relu().mean()
print("loss", loss.item())
loss.backward()  # c @ w.T, x.T @ c, ...: the transposed operands of the backward pass
out = [y.numpy(), z.numpy(), odd.numpy(), x.grad.numpy(), w.grad.numpy(), v.grad.numpy()]"""
# (m, k, n): on a target with scratch memory the right operand's panel is packed where k x n spans over half
# the L2 (opt.pack_min_span: 1 MB with a 2 MB L2; 512 KB where the caches are unknown) and a column tile's
# panel fits the scratch; 260 columns take no 16-wide tile. Elsewhere (grid targets, no scratch) a smaller
# product with the same tails: an emulated grid runs a big one slowly.
MATMUL_PACKED, MATMUL_SMALL = (64, 1024, 260), (32, 96, 65)

_GROUPED = """\
rng = np.random.default_rng(4)
a = Tensor(rng.standard_normal((3, 1037)), device=dev, dtype=dt, requires_grad=True)
n = Tensor(rng.integers(-1000, 1000, (5, 777)).astype(np.int32), device=dev)
big = Tensor(rng.standard_normal(70001), device=dev, dtype=dt)
lse = a.exp().sum(1).log()
loss = (lse * Tensor([1.0, -2.0, 0.5], device=dev, dtype=dt)).sum()
loss.backward()
out = [a.sum(1).numpy(), a.max(1).numpy(), lse.numpy(), a.grad.numpy()]
out += [n.sum(1).numpy(), n.max(1).numpy(), big.sum().numpy()]"""

_SHARDED = """\
rng = np.random.default_rng(5)
x0 = Tensor(rng.standard_normal((8, 5)), device=dev, dtype=dt, requires_grad=True)
w0 = Tensor(rng.standard_normal((5, 3)) * 0.5, device=dev, dtype=dt, requires_grad=True)
x, w = x0, w0{shard}
d = x[1:] * 0.5 - x[:-1]  # shrinks at both ends of the sharded axis
core = x[2:-1]
inside = x[5:7]  # within the second shard
data = (x @ w).square().mean()  # over the sharded axis: an all-reduce (and in w's gradient)
loss = data + (d @ w).tanh().square().mean() + (core.sum(0) @ w).sum() + (inside * x[:2]).sum()
print("loss", loss.item())
loss.backward()
out = [x.sum(0).numpy(), d.sum(0).numpy(), (x[3:] @ w).numpy(), x0.grad.numpy(), w0.grad.numpy()]"""
_SHARD_LINE = "\nx, w = x0.shard(devs, axis=0), w0.shard(devs)  # devs = (dev, dev + ':1')"

_TEMPLATE = """\
rng = np.random.default_rng(6)
data = [rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), rng.standard_normal((4, 4)) * 0.5]
def leaves(dt): return [Tensor(a, device=dev, dtype=dt, requires_grad=k > 0) for k, a in enumerate(data)]
def loss_of(x, w1, w2): loss = ((x @ w1).relu() @ w2).square().mean(); loss.item(); return loss
def grads(dt, wrt): x, w1, w2 = leaves(dt); return loss_of(x, w1, w2).gradient(*[(w1, w2)[k] for k in wrt])
out = []
# one structure, two target sets (w1, w2), then w1 again (from the cache), in each dtype, in one process
for d in ({dtypes}): out += [g.numpy() for wrt in ((0,), (1,), (0,)) for g in grads(d, wrt)]"""

_MEMORY = """\
from uopgrad import GlobalCounters
from uopgrad.nn.optim import SGD
rng = np.random.default_rng(7)
x = Tensor(rng.standard_normal((16, 8)), device=dev, dtype=dt)
y = Tensor(rng.standard_normal((16, 1)), device=dev, dtype=dt)
w1 = Tensor(rng.standard_normal((8, 32)) * 0.3, device=dev, dtype=dt, requires_grad=True)
w2 = Tensor(rng.standard_normal((32, 1)) * 0.3, device=dev, dtype=dt, requires_grad=True)
opt = SGD([w1, w2], lr=0.05, momentum=0.9)
running = Tensor.zeros(1, device=dev, dtype=dt).contiguous().realize()
Tensor.training = True
@Tensor.no_grad()
def mean_of(running, loss): return (running * 0.9 + loss * 0.1).realize()  # a running mean of the loss
def loss_of(): opt.zero_grad(); return (((x @ w1).relu() @ w2 - y) ** 2).mean()
def step(loss): losses.append(loss.item()); loss.backward(); opt.step(); return mean_of(running, loss)
losses, mem = [], []
for _ in range({steps}): running = step(loss_of()); mem.append(GlobalCounters.mem_used_per_device[dev])
out = [np.array(losses), running.numpy(), w1.numpy(), w2.numpy()]"""


@dataclass(frozen=True)
class PathProgram:
    """A row's program: its text on the backend (`body`) and on REFERENCE (`oracle_body`)."""

    row: str
    body: str
    oracle_body: str
    extra: tuple[tuple[str, str], ...] = ()  # names the body uses besides the snippet header's


def program(row: str, target: Target, payload: str | None = None) -> PathProgram:
    """The program of `row` (for `optimiser`, `payload` names the optimiser) for `target`."""
    if row == "jit step":
        return PathProgram(row, _JIT_STEP, _JIT_STEP)
    if row == "optimiser":
        opt, bias = OPTIMISERS[payload or "SGD"]
        body = _OPTIMISER.format(opt=opt, bias=bias)
        return PathProgram(row, body, body)
    if row == "matmul panels":
        packs = target.backend.capabilities.scratch > 0
        m, k, n = MATMUL_PACKED if packs else MATMUL_SMALL
        panel = ", over 1 MB, packed" if packs else ""
        body = _MATMUL.format(m=m, k=k, n=n, odd=n - 3, m_odd=m - 3, panel=panel)
        return PathProgram(row, body, body)
    if row == "grouped reduce":
        return PathProgram(row, _GROUPED, _GROUPED)
    if row == "sharded shrink":
        devs = repr((target.name, target.second))
        return PathProgram(
            row, _SHARDED.format(shard=_SHARD_LINE), _SHARDED.format(shard=""), (("devs", devs),)
        )
    if row == "gradient template":
        claimed = [d for d in (dtypes.float32, dtypes.float64) if target.claims(d)]
        body = _TEMPLATE.format(dtypes="".join(f"dtypes.{name(d)}, " for d in claimed))
        return PathProgram(row, body, body)
    if row == "memory":
        body = _MEMORY.format(steps=MEMORY_STEPS)
        return PathProgram(row, body, body)
    raise ValueError(f"no path program {row!r}")


def _tolerance(dt: DType) -> float:
    # against REFERENCE's result: only the order of sums differs (grouped, tiled, all-reduced)
    return 1e-4 if dt == dtypes.float32 else 1e-10


def _run(
    prog: PathProgram, device: str, dt: DType, oracle: bool
) -> tuple[list[np.ndarray], dict[str, object]]:
    ns = namespace(device, dt, **{k: ast.literal_eval(v) for k, v in prog.extra})
    try:
        out = execute(prog.oracle_body if oracle else prog.body, ns)
    finally:
        Tensor.training = False  # a program sets it for its steps; the next case starts without it
    return [np.asarray(o, dtype=np.float64) for o in out], ns


def check_path(target: Target, prog: PathProgram, dt: DType, record: Recorder) -> dict[str, object]:
    """Run the program on the backend and on REFERENCE; every output must agree within the dtype's relative
    tolerance (of REFERENCE's largest magnitude). Returns the backend run's namespace. Raises `Failure`
    with a repro."""
    want, _ = _run(prog, REFERENCE, dt, oracle=True)
    try:
        got, ns = _run(prog, target.name, dt, oracle=False)
    except Exception as e:
        raise Failure(
            f"the {prog.row} program raised on {target.name}:\n{format_exception(e)}\nrepro:\n"
            + _repro(target, prog, dt, want)
        ) from e
    problems = []
    if len(got) != len(want):
        problems.append(f"the program gave {len(got)} outputs on {target.name}, {len(want)} on REFERENCE")
    for k, (g, w) in enumerate(zip(got, want)):
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        same_shape = g.shape == w.shape
        err = float(np.max(np.abs(g - w))) / max(scale, 1e-30) if same_shape and w.size else 0.0
        if not same_shape or np.isnan(err):
            err = np.inf
        record.error(err)
        if err > _tolerance(dt):
            problems.append(
                f"out[{k}] differs from REFERENCE (relative error {err:.3g} > {_tolerance(dt):g}):\n"
                f"  {target.name}: {_short(g)}\n  REFERENCE: {_short(w)}"
            )
    if problems and prog.row == "jit step" and got and got[0].shape == want[0].shape:
        calls = [k for k in range(len(want[0])) if abs(got[0][k] - want[0][k]) > 1e-4 * abs(want[0][k])]
        names = ["the first call", "the capture"] + [f"replay {k}" for k in range(1, len(want[0]))]
        problems.append("the losses of " + ", ".join(names[k] for k in calls) + " differ")
    if problems:
        raise Failure("\n".join(problems) + "\nrepro:\n" + _repro(target, prog, dt, want))
    return ns


def check_memory(target: Target, prog: PathProgram, dt: DType, ns: dict[str, object]) -> None:
    """After the warm-up steps, the memory in use on the device must not grow from step to step."""
    mem = [int(m) for m in ns["mem"]]  # type: ignore[attr-defined]
    if not isinstance(Device[target.name], CompiledBackend):
        return  # no device memory is counted
    base = mem[MEMORY_WARMUP]
    grew = [(k, m) for k, m in enumerate(mem) if k > MEMORY_WARMUP and m > base]
    if grew:
        raise Failure(
            f"the device memory in use grows during the training loop (bytes after each step: {mem}); after "
            f"step {MEMORY_WARMUP + 1} one step of buffers is held, so it must stay at most {base} (a value "
            "realized under no_grad keeps its graph, say)\nrepro:\n"
            + snippet(target.name, dt, [], prog.body, ["print(mem)  # must not grow after the third entry"])
        )


def _short(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    return f"shape {a.shape} {flat[:8].tolist()}{' ...' if flat.size > 8 else ''}"


def _repro(target: Target, prog: PathProgram, dt: DType, want: list[np.ndarray]) -> str:
    tail = ["for k, o in enumerate(out): print(k, np.asarray(o).reshape(-1)[:8].tolist())"]
    tail += [f"# REFERENCE out[{k}]: {_short(w)}" for k, w in enumerate(want)]
    return snippet(target.name, dt, [], prog.body, tail, dict(prog.extra))
