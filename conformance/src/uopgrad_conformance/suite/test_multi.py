"""Sharded programs (the MULTI row): each program runs with its inputs sharded over two devices of the
backend (the device and its `second`), each input on an axis that divides (or replicated), and must give the
unsharded program's values and gradients on the same backend; the sharded gradient also passes the float64
finite-difference dot-product test. Fixed programs cover each rule of uopgrad.multi; random ones
(strategies.programs) the rest. Kept small (a few programs, two shardings each, four hypothesis examples):
every sharding is new kernels to compile. A backend with one device (`NAME:1` does not open) does not claim
the row."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import Tensor, dtypes
from uopgrad_conformance.gradcheck import GradInput, GradProgram, decisions_differ
from uopgrad_conformance.numerics import fd_step, host_dtype
from uopgrad_conformance.plugin import case_rng, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.repro import Input, execute, namespace
from uopgrad_conformance.strategies import programs
from uopgrad_conformance.target import REFERENCE, Target, no_second_device

ROW = "MULTI"
F32 = dtypes.float32
# (name, input shapes, body): every rule of the lowering at least once
FIXED = {
    "elementwise": (((4, 3), (4, 3)), "out = (t0 * t1 + t0.exp()).tanh() - t1"),
    "reduce": (((4, 6),), "out = (t0.sum(0), t0.max(1), t0.mean(), t0.square().sum(1, keepdim=True))"),
    "matmul": (((4, 6), (6, 2)), "out = (t0 @ t1).sigmoid() + t0.sum(1, keepdim=True)"),
    "movement": (
        ((4, 6),),
        "out = t0.reshape(4, 2, 3).permute(2, 0, 1).pad(((1, 0), (0, 0), (0, 0)))[1:] * 2"
        " + t0.flip(0)[0:2].sum() + t0.reshape(4, 6, 1).expand(4, 6, 2).sum(2)[:3, :4]"
        ".reshape(3, 4, 1)",
    ),
    "function": (
        ((4, 6), (6, 2)),
        "@function\ndef f(a, b):\n    return (a @ b).sigmoid(), a.sum(1)\ny, s = f(t0, t1)\nout = (y * 2, s)",
    ),
}
RTOL = 2e-5  # sharded vs unsharded float32: only the order of the all-reduce's sums differs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per fixed program, and one for the random ones."""

    def cases(target: Target, test: str) -> list[Case]:
        skip = target.not_claimed(F32) or no_second_device(target)
        if test == "test_multi_fixed":
            return [Case(ROW, F32, name, skip, FIXED[name], "multi") for name in FIXED]
        return [Case(ROW, F32, "random", skip, None, "multi")]

    parametrize_suite(metafunc, cases)


def _axes(shapes: Sequence[tuple[int, ...]], how: str) -> list[int | None]:
    """An axis per input: `mixed` shards the first input on its first axis of even size and replicates the
    rest (data parallelism), `last` shards every input on its last axis of even size."""
    out: list[int | None] = []
    for k, s in enumerate(shapes):
        even = [a for a, n in enumerate(s) if n % 2 == 0]
        out.append(None if not even or (how == "mixed" and k) else even[0] if how == "mixed" else even[-1])
    return out


def _run(
    body: str,
    inputs: Sequence[Input],
    values: Sequence[np.ndarray],
    device: str,
    devices: tuple[str, ...] | None,
    axes: Sequence[int | None],
    dt: object,
    cot: Sequence[np.ndarray] | None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Outputs (read first, as a user prints a loss) and, given cotangents, the input gradients."""
    ts = []
    for inp, v, ax in zip(inputs, values, axes):
        t = Tensor(
            np.asarray(v, dtype=host_dtype(dt)),  # type: ignore[arg-type]
            device=device,
            dtype=dt,  # type: ignore[arg-type]
            requires_grad=cot is not None and inp.requires_grad,
        )
        ts.append(t if devices is None else t.shard(devices, ax))
    ns = namespace(device, dt, **{i.name: t for i, t in zip(inputs, ts)})  # type: ignore[arg-type]
    out = execute(body, ns)
    outs: list[Tensor] = list(out) if isinstance(out, tuple) else [out]
    vals = [o.numpy().astype(np.float64) for o in outs]
    if cot is None:
        return vals, []
    loss = None
    for o, c in zip(outs, cot):
        term = (o * Tensor(c.astype(host_dtype(o.dtype)), device=o.device, dtype=o.dtype)).sum()
        loss = term if loss is None else loss + term
    assert loss is not None
    targets = [t for t, i in zip(ts, inputs) if i.requires_grad]
    grads = loss.gradient(*targets)
    return vals, [g.numpy().astype(np.float64) for g in grads]


def _check(
    target: Target,
    body: str,
    inputs: Sequence[Input],
    record: Recorder,
    rng: np.random.Generator,
    smooth: bool = True,
) -> None:
    devices = (target.name, target.second)
    x = [np.asarray(i.value) for i in inputs]
    want, _ = _run(body, inputs, x, target.name, None, [None] * len(inputs), F32, None)
    cot = [rng.standard_normal(w.shape) for w in want]
    want, want_g = _run(body, inputs, x, target.name, None, [None] * len(inputs), F32, cot)
    shapes = [tuple(np.shape(v)) for v in x]
    for how in ("mixed", "last"):
        axes = _axes(shapes, how)
        got, got_g = _run(body, inputs, x, target.name, devices, axes, F32, cot)
        for k, (g, w) in enumerate(zip([*got, *got_g], [*want, *want_g])):
            scale = max(float(np.max(np.abs(w), initial=0.0)), 1.0)
            err = float(np.max(np.abs(g - w), initial=0.0)) / scale
            record.error(err)
            if err > RTOL or g.shape != w.shape:
                what = f"output {k}" if k < len(got) else f"gradient {k - len(got)}"
                pytest.fail(
                    f"sharded ({how}: axes {axes} over {devices}) {what} differs from the unsharded "
                    f"program (relative {err:.3g}):\n  sharded:   {g}\n  unsharded: {w}\n{body}"
                )
        if smooth and how == "mixed":
            _dot_product(target, body, inputs, x, axes, cot, got_g, rng)


def _dot_product(
    target: Target,
    body: str,
    inputs: Sequence[Input],
    x: Sequence[np.ndarray],
    axes: Sequence[int | None],
    cot: Sequence[np.ndarray],
    grads: Sequence[np.ndarray],
    rng: np.random.Generator,
) -> None:
    """<v, J·u> by float64 central differences of the sharded program against <vjp(v), u>."""
    fd = target.name if dtypes.float64 in target.claimed else REFERENCE
    devices = (fd, f"{fd.partition(':')[0]}:1" if fd != target.name else target.second)
    u = [rng.standard_normal(v.shape) if i.requires_grad else np.zeros(v.shape) for v, i in zip(x, inputs)]
    h = float(fd_step(np.array(max(float(np.max(np.abs(v), initial=1.0)) for v in x))))
    plus = [v + h * d for v, d in zip(x, u)]
    minus = [v - h * d for v, d in zip(x, u)]
    gprog = GradProgram(tuple(GradInput(i.name, tuple(np.shape(i.value))) for i in inputs), body)
    if decisions_differ(gprog, inputs, [[np.asarray(v, np.float64) for v in x], plus, minus]) is not None:
        return
    fp, _ = _run(body, inputs, plus, fd, devices, axes, dtypes.float64, None)
    fm, _ = _run(body, inputs, minus, fd, devices, axes, dtypes.float64, None)
    lhs = sum(float(np.sum(c * (p - m) / (2 * h))) for c, p, m in zip(cot, fp, fm))
    tu = [d for d, i in zip(u, inputs) if i.requires_grad]
    rhs = sum(float(np.sum(g * d)) for g, d in zip(grads, tu))
    scale = max(sum(float(np.sum(np.abs(g * d))) for g, d in zip(grads, tu)), 1e-30)
    if abs(lhs - rhs) > 1e-3 * scale:
        pytest.fail(
            f"dot-product test of the sharded program: <v, J·u> is {lhs:.9g}, <vjp(v), u> is "
            f"{rhs:.9g} (relative {abs(lhs - rhs) / scale:.3g})\n{body}"
        )


def test_multi_fixed(case: Case, target: Target, record: Recorder) -> None:
    """One program per rule of the lowering, sharded two ways, against the unsharded program."""
    shapes, body = case.payload
    rng = case_rng(case)
    inputs = [
        Input(f"t{k}", rng.standard_normal(s).astype(np.float32), F32, True) for k, s in enumerate(shapes)
    ]
    _check(target, body, inputs, record, rng)


@settings(max_examples=4)
@given(data=st.data())
def test_multi_random(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Random float32 programs (strategies.programs), sharded two ways, against the unsharded program."""
    prog = data.draw(programs(F32, max_steps=4), label="program")
    inputs = prog.inputs()
    tame = all(
        np.all(np.isfinite(i.value)) and float(np.max(np.abs(i.value), initial=0.0)) < 1e3 for i in inputs
    )
    if not tame or not inputs:
        return
    _check(target, prog.body(), inputs, record, case_rng(case, salt=prog.body()), smooth=prog.smooth)
