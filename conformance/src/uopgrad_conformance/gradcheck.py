"""Gradient checks by finite differences (docs/conformance.md "Gradient-check numerics").

The main check is the dot-product test: random Gaussian directions `u` (inputs) and cotangents `v`
(outputs), and `<v, (f(x+h·u) − f(x−h·u)) / 2h>` compared with `<vjp(v), u>`. For small programs (at most
`JACOBIAN_LIMIT` input and output elements) the full Jacobian is compared as well, entry by entry. Finite
differences run in float64 (on the backend when it claims float64, else on REFERENCE); the analytic
gradient comes from the backend in the case's dtype. Points where the program is not differentiable are
detected (its branch decisions at x−h, x and x+h differ) and redrawn; the case's report notes each redraw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopgrad import DType, GroupOp, Ops, Tensor, UOp, dtypes
from uopgrad_conformance.forward import Failure, format_exception
from uopgrad_conformance.numerics import GRAD_TOL, fd_step, host_dtype, representable
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import Input, array_literal, execute, namespace, snippet
from uopgrad_conformance.target import REFERENCE, Target, tensor

__all__ = [
    "JACOBIAN_LIMIT",
    "GradInput",
    "GradProgram",
    "check_gradients",
    "decisions_differ",
    "forward64",
    "run_env",
    "sample",
    "second_order",
    "vjp",
]

JACOBIAN_LIMIT = 64
_ATTEMPTS = 3  # draws of x before a case at a non-differentiable point fails


@dataclass(frozen=True)
class GradInput:
    """One input of a gradient program: its shape, how its values are drawn (`DOMAINS`), and whether it
    is differentiated (a bool condition is not). `dtype` None means the case's float dtype."""

    name: str
    shape: tuple[int, ...]
    domain: str = "normal"
    target: bool = True
    dtype: DType | None = None


@dataclass(frozen=True)
class GradProgram:
    """A program to differentiate: `body` binds `out` (a Tensor or a tuple of Tensors) from the inputs and
    the names `dev`, `dt` (the float dtype: float64 for finite differences), `dev2`. `expect` is "fd" (check
    against finite differences) or "zero" (the gradient is zero by definition: no finite differences).
    `inline` is the same program without its FUNCTIONs: the gradients must match it too."""

    inputs: tuple[GradInput, ...]
    body: str
    expect: str = "fd"
    inline: str | None = None
    second_order: bool = False
    jacobian: bool = True


# ---------------------------------------------------------------------- input domains
def _distinct(n: int, rng: np.random.Generator) -> np.ndarray:
    """Values at least 0.25 apart (no ties for MAX), in about [-3, 3]."""
    grid = rng.permutation(n) * (6.0 / max(n, 1)) - 3.0
    return grid + rng.uniform(-0.02, 0.02, n) + 0.13


DOMAINS: dict[str, Callable[[int, np.random.Generator], np.ndarray]] = {
    "normal": lambda n, rng: rng.standard_normal(n),
    "small": lambda n, rng: rng.standard_normal(n) * 0.5,
    "positive": lambda n, rng: rng.uniform(0.5, 2.0, n),
    "nonzero": lambda n, rng: rng.uniform(0.5, 2.0, n) * rng.choice([-1.0, 1.0], n),
    "unit": lambda n, rng: rng.uniform(0.7, 1.3, n) * rng.choice([-1.0, 1.0], n),
    "frac": lambda n, rng: rng.integers(-3, 3, n) + rng.uniform(0.2, 0.8, n),
    "distinct": _distinct,
    "bool": lambda n, rng: rng.random(n) < 0.5,
    "tie": lambda n, rng: rng.integers(-1, 2, n).astype(np.float64),  # many ties and zeros: the kinks
}


def sample(prog: GradProgram, dt: DType, rng: np.random.Generator) -> list[Input]:
    """Draw every input of `prog` in `dt` (rounded to it). All "distinct" inputs are drawn together, so
    no two of their values tie."""
    sizes = {i.name: int(np.prod(i.shape)) for i in prog.inputs}
    distinct = [i for i in prog.inputs if i.domain == "distinct"]
    pool = (
        iter(
            np.split(
                _distinct(sum(sizes[i.name] for i in distinct), rng),
                np.cumsum([sizes[i.name] for i in distinct])[:-1],
            )
        )
        if distinct
        else iter(())
    )
    out = []
    for inp in prog.inputs:
        idt = inp.dtype or (dtypes.bool if inp.domain == "bool" else dt)
        raw = next(pool) if inp.domain == "distinct" else DOMAINS[inp.domain](sizes[inp.name], rng)
        vals = raw if idt == dtypes.bool else representable(raw, idt)
        out.append(Input(inp.name, np.asarray(vals).reshape(inp.shape), idt, inp.target))
    return out


# ---------------------------------------------------------------------- running a program
@dataclass
class _Env:
    """Where and in which dtype a program runs, and the extra names it sees."""

    device: str
    dt: DType
    dev2: str
    extra: dict[str, Any] = field(default_factory=dict)


def run_env(device: str, dt: DType, second: str | None = None) -> _Env:
    """Where a program runs: on `device` in float dtype `dt`, with `dev2` REFERENCE:1 for REFERENCE, else
    `second`."""
    base = device.partition(":")[0]
    dev2 = "REFERENCE:1" if base == REFERENCE else (second or f"{base}:1")
    return _Env(device, dt, dev2)


def _outputs(out: object) -> list[Tensor]:
    outs = list(out) if isinstance(out, tuple) else [out]
    if not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"the case body must bind `out` to a Tensor or a tuple of Tensors, got {out!r}")
    return outs  # type: ignore[return-value]


def _build(
    prog: GradProgram,
    body: str,
    inputs: Sequence[Input],
    env: _Env,
    values: Sequence[np.ndarray] | None = None,
    requires_grad: bool = False,
) -> tuple[list[Tensor], list[Tensor]]:
    """Run the body: (outputs, input tensors). `values` replace the inputs' values (float64 ones for
    finite differences are cast to each input's dtype in `env`)."""
    ns = namespace(env.device, env.dt, dev2=env.dev2, **env.extra)
    ins = []
    for k, inp in enumerate(inputs):
        v = inp.value if values is None else values[k]
        idt = inp.dtype if inp.dtype == dtypes.bool or not dtypes.is_float(inp.dtype) else env.dt
        t = tensor(np.asarray(v, dtype=host_dtype(idt)), idt, env.device, requires_grad and inp.requires_grad)
        ns[inp.name] = t
        ins.append(t)
    return _outputs(execute(body, ns)), ins


def forward64(
    prog: GradProgram, inputs: Sequence[Input], env: _Env, values: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """The program's outputs at `values` (finite differences: `env` is float64), as float64 arrays."""
    outs, _ = _build(prog, prog.body, inputs, env, values)
    Tensor.realize(*outs) if len(outs) > 1 else None
    return [o.numpy().astype(np.float64) for o in outs]


def vjp(
    prog: GradProgram,
    body: str,
    inputs: Sequence[Input],
    env: _Env,
    cotangents: Sequence[np.ndarray],
    read_first: bool = False,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(outputs, gradients of every target input) for the given output cotangents, in float64.
    `read_first`: read every output (`.numpy()`) before differentiating, as a user prints a loss first."""
    outs, ins = _build(prog, body, inputs, env, requires_grad=True)
    if read_first:
        for o in outs:
            o.numpy()
    targets = [t for t, i in zip(ins, inputs) if i.requires_grad]
    vs = [
        tensor(np.asarray(c, dtype=host_dtype(o.dtype)), o.dtype, str(o.device))
        for c, o in zip(cotangents, outs)
    ]
    if len(outs) == 1:
        grads = outs[0].gradient(*targets, gradient=vs[0])
    else:
        loss = outs[0].mul(vs[0]).sum()
        for o, v in zip(outs[1:], vs[1:]):
            loss = loss + o.mul(v).sum().cast(loss.dtype).to(loss.device)
        grads = loss.gradient(*targets)
    Tensor.realize(*outs, *grads)
    return [o.numpy().astype(np.float64) for o in outs], [g.numpy().astype(np.float64) for g in grads]


# ---------------------------------------------------------------------- non-differentiable points
def _decision_nodes(outs: Sequence[Tensor]) -> list[UOp]:
    """The branch decisions of a program: comparisons of floats, which operand a MAX takes (and ties),
    which elements a MAX reduce picks, WHERE conditions, TRUNC and float -> int/bool casts, float
    division quotients. Nodes inside call bodies are skipped (checks use the inlined program)."""
    seen: list[UOp] = []
    in_body: dict[UOp, bool] = {}
    for o in outs:
        for u in o.uop.toposort():
            if u in in_body:
                continue
            args = u.src[1:] if u.op in GroupOp.Call else u.src  # a call's body is not a value of its own
            in_body[u] = u.op is Ops.PARAM or any(in_body.get(s, False) for s in args)
            if not in_body[u]:
                seen.extend(_decision(u))
    return seen


def _decision(u: UOp) -> list[UOp]:
    isf = bool(u.src) and dtypes.is_float(u.src[0].dtype)
    if u.op in GroupOp.Comparison and isf:
        return [u]
    if u.op is Ops.MAX and isf:
        return [u.src[0].alu(Ops.CMPLT, u.src[1]), u.src[0].alu(Ops.CMPEQ, u.src[1])]
    if u.op is Ops.REDUCE and u.arg[0] is Ops.MAX and isf:
        return [u.src[0].alu(Ops.CMPEQ, u.expand(u.src[0].shape))]
    if u.op is Ops.WHERE:
        return [u.src[0]]
    if (u.op is Ops.TRUNC and isf) or (u.op is Ops.CAST and isf and not dtypes.is_float(u.dtype)):
        return [u]
    if u.op in (Ops.FLOORDIV, Ops.CDIV, Ops.FLOORMOD, Ops.CMOD) and isf:
        return [u.src[0].alu(Ops.FLOORDIV, u.src[1])]
    return []


def decisions_at(
    prog: GradProgram, body: str, inputs: Sequence[Input], env: _Env, values: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """The values of every branch decision of the program at `values`."""
    outs, _ = _build(prog, body, inputs, env, values)
    nodes = _decision_nodes(outs)
    if not nodes:
        return []
    ts = [Tensor(u) for u in nodes]
    Tensor.realize(*ts)
    return [t.numpy() for t in ts]


def decisions_differ(
    prog: GradProgram,
    inputs: Sequence[Input],
    points: Sequence[Sequence[np.ndarray]],
    dev2: str = "REFERENCE:1",
) -> str | None:
    """None when the program's branch decisions are the same at every point (in float64 on REFERENCE),
    else a description of the first that differs."""
    body = prog.inline or prog.body
    env = _Env(REFERENCE, dtypes.float64, dev2)
    base = decisions_at(prog, body, inputs, env, points[0])
    for k, pt in enumerate(points[1:], 1):
        other = decisions_at(prog, body, inputs, env, pt)
        for j, (a, b) in enumerate(zip(base, other)):
            if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
                return f"branch decision {j} changes between x and perturbed point {k}"
    return None


# ---------------------------------------------------------------------- the check
@dataclass
class _Draw:
    inputs: list[Input]
    x64: list[np.ndarray]
    u: list[np.ndarray]
    h: float


def _draw(
    prog: GradProgram, dt: DType, rng: np.random.Generator, small: bool, record: Recorder, dev2: str
) -> _Draw:
    why = ""
    for attempt in range(_ATTEMPTS):
        inputs = sample(prog, dt, rng)
        x64 = [np.asarray(i.value, dtype=np.float64) for i in inputs]
        u = [
            rng.standard_normal(x.shape) if i.requires_grad else np.zeros(x.shape)
            for x, i in zip(x64, inputs)
        ]
        h = float(fd_step(np.array(max((float(np.max(np.abs(x))) for x in x64 if x.size), default=1.0))))
        points = [x64, [x + h * d for x, d in zip(x64, u)], [x - h * d for x, d in zip(x64, u)]]
        if small:
            for k, x in enumerate(x64):
                if not inputs[k].requires_grad:
                    continue
                for e in range(x.size):
                    for s in (h, -h):
                        pt = [y.copy() for y in x64]
                        pt[k].reshape(-1)[e] += s
                        points.append(pt)
        why_now = decisions_differ(prog, inputs, points, dev2)
        if why_now is None:
            if attempt:
                record.note(f"redrawn {attempt} time(s) away from a non-differentiable point ({why})")
            return _Draw(inputs, x64, u, h)
        why = why_now
    raise Failure(
        f"every one of {_ATTEMPTS} draws of the inputs lies at a non-differentiable point of the "
        f"program ({why}); its input domains must avoid its kinks (a harness problem)"
    )


def _fd_jvp(prog: GradProgram, draw: _Draw, env: _Env, direction: Sequence[np.ndarray]) -> list[np.ndarray]:
    plus = forward64(prog, draw.inputs, env, [x + draw.h * d for x, d in zip(draw.x64, direction)])
    minus = forward64(prog, draw.inputs, env, [x - draw.h * d for x, d in zip(draw.x64, direction)])
    return [(p - m) / (2 * draw.h) for p, m in zip(plus, minus)]


def _cotangents(
    shapes: Sequence[tuple[int, ...]], dts: Sequence[DType], rng: np.random.Generator
) -> list[np.ndarray]:
    return [
        np.asarray(representable(rng.standard_normal(s), d), dtype=np.float64).reshape(s)
        for s, d in zip(shapes, dts)
    ]


def _compare_all(
    what: str,
    names: Sequence[str],
    got: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    labels: tuple[str, str],
    rtol: float,
    record: Recorder | None = None,
) -> list[str]:
    """One message per array of `got` that differs from `want` by more than `rtol` (relative to its size)."""
    out = []
    for nm, g, w in zip(names, got, want):
        rel = _rel_diff(g, w)
        if record is not None:
            record.error(rel)
        if rel > rtol:
            out.append(
                f"{what} {nm} differs (relative {rel:.3g}):\n  {labels[0]}: {_short(g)}\n"
                f"  {labels[1]}: {_short(w)}"
            )
    return out


class _Check:
    """The state of one gradient check: the program, where it runs, its draw of inputs and cotangents."""

    def __init__(
        self,
        target: Target,
        prog: GradProgram,
        dt: DType,
        rng: np.random.Generator,
        record: Recorder,
        tol_scale: float,
    ) -> None:
        self.target, self.prog, self.dt, self.record = target, prog, dt, record
        self.rtol = GRAD_TOL[dt].rtol * tol_scale
        self.env = _Env(target.name, dt, target.second)
        fd = target.fd_device
        self.fd_env = _Env(fd, dtypes.float64, "REFERENCE:1" if fd == REFERENCE else target.second)
        probe = sample(prog, dt, np.random.default_rng(0))
        try:
            outs0, _ = _build(prog, prog.body, probe, _Env(REFERENCE, dt, "REFERENCE:1"))
        except Exception as e:
            raise Failure(
                f"REFERENCE failed to build the case (a harness bug):\n{format_exception(e)}"
            ) from e
        self.out_dts = [o.dtype for o in outs0]
        self.shapes = [_concrete(o.shape) for o in outs0]
        n_in = sum(int(np.prod(i.shape)) for i in prog.inputs if i.target)
        n_out = sum(int(np.prod(s)) for s in self.shapes)
        self.small = prog.jacobian and prog.expect == "fd" and max(n_in, n_out) <= JACOBIAN_LIMIT
        self.draw = (
            _draw(prog, dt, rng, self.small, record, "REFERENCE:1")
            if prog.expect == "fd"
            else _Draw(sample(prog, dt, rng), [], [], 0.0)
        )
        self.v = _cotangents(self.shapes, self.out_dts, rng)
        self.names = [i.name for i in _targets(self.draw.inputs)]

    def fail(self, problems: Sequence[str], expected: Sequence[np.ndarray] | None = None) -> Failure:
        return Failure(
            "\n".join(problems)
            + "\nrepro:\n"
            + _snippet(self.target, self.prog, self.dt, self.draw.inputs, self.v, expected)
        )

    def run(self) -> None:
        prog, draw = self.prog, self.draw
        try:
            outs, grads = vjp(prog, prog.body, draw.inputs, self.env, self.v)
        except Exception as e:
            raise self.fail([f"the gradient raised on {self.target.name}:\n{format_exception(e)}"]) from e
        if prog.expect == "zero":
            bad = [n for n, g in zip(self.names, grads) if np.any(g != 0)]
            if bad:
                raise self.fail(
                    [f"the gradient of {', '.join(bad)} must be zero (no gradient flows through this op)"]
                )
            return
        problems = self.against_reference(outs, grads)
        expected: list[np.ndarray] | None = None
        if prog.expect == "fd" and (forward := self.forward64_differs()):
            raise self.fail([*problems, forward])
        if prog.expect == "fd":
            problems += self.dot_product(grads)
            if self.small:
                msg, expected = _jacobian(
                    prog, draw, self.env, self.fd_env, self.v, self.shapes, self.rtol, self.record
                )
                problems += [msg] if msg else []
            problems += self.against_inline(outs, grads)
        if problems:
            raise self.fail(problems, expected)

    def forward64_differs(self) -> str | None:
        """When finite differences run on the backend: its float64 forward pass against REFERENCE's. A
        mismatch is a forward bug and is reported as one (finite differences of a wrong function say
        nothing about the gradient)."""
        if self.fd_env.device == REFERENCE or self.target.is_reference:
            return None
        got = forward64(self.prog, self.draw.inputs, self.fd_env, self.draw.x64)
        want = forward64(
            self.prog, self.draw.inputs, _Env(REFERENCE, dtypes.float64, "REFERENCE:1"), self.draw.x64
        )
        # far tighter than a gradient's tolerance: the case programs are a few ops, each within a few ulp
        tol = 1e-11
        bad = [k for k, (g, w) in enumerate(zip(got, want)) if _rel_diff(g, w) > tol]
        if not bad:
            return None
        k = bad[0]
        return (
            f"FORWARD: the program's float64 forward pass differs on {self.target.name} from REFERENCE "
            f"(output {k}, relative {_rel_diff(got[k], want[k]):.3g}): a forward bug, not a gradient one "
            f"(the forward rows of its ops show which), so finite differences on {self.target.name} "
            f"cannot check its gradient\n  {self.target.name}: {_short(got[k])}\n  REFERENCE: "
            f"{_short(want[k])}"
        )

    def dot_product(self, grads: Sequence[np.ndarray]) -> list[str]:
        """<v, J·u> by float64 central differences against <vjp(v), u>."""
        jvp = _fd_jvp(self.prog, self.draw, self.fd_env, self.draw.u)
        lhs = sum(float(np.sum(vi * ji)) for vi, ji in zip(self.v, jvp))
        tgt_u = [d for d, i in zip(self.draw.u, self.draw.inputs) if i.requires_grad]
        rhs = sum(float(np.sum(g * d)) for g, d in zip(grads, tgt_u))
        scale = max(
            sum(float(np.sum(np.abs(g * d))) for g, d in zip(grads, tgt_u)),
            sum(float(np.sum(np.abs(vi * ji))) for vi, ji in zip(self.v, jvp)),
            1e-30,
        )
        rel = abs(lhs - rhs) / scale
        self.record.error(rel)
        if np.isfinite(lhs) and np.isfinite(rhs) and rel <= self.rtol:
            return []
        return [
            f"dot-product test: <v, J·u> by float64 finite differences is {lhs:.9g}, <vjp(v), u> from "
            f"{self.target.name} in {self.dt.name} is {rhs:.9g} (relative difference {rel:.3g} > "
            f"{self.rtol:g})"
        ]

    def against_reference(self, outs: Sequence[np.ndarray], grads: Sequence[np.ndarray]) -> list[str]:
        """Outputs and analytic gradients against REFERENCE's (same program, dtype and cotangents)."""
        if self.target.is_reference:
            return []
        try:
            ref_outs, ref = vjp(
                self.prog, self.prog.body, self.draw.inputs, _Env(REFERENCE, self.dt, "REFERENCE:1"), self.v
            )
        except Exception as e:
            raise Failure(
                f"REFERENCE failed to differentiate the case (a harness bug):\n{format_exception(e)}"
            ) from e
        labels = (self.target.name, "REFERENCE")
        return _compare_all(
            "output", [str(k) for k in range(len(outs))], outs, ref_outs, labels, self.rtol
        ) + _compare_all("gradient of", self.names, grads, ref, labels, self.rtol, self.record)

    def against_inline(self, outs: Sequence[np.ndarray], grads: Sequence[np.ndarray]) -> list[str]:
        """A FUNCTION's outputs and gradients against those of its inlined body."""
        if self.prog.inline is None:
            return []
        try:
            inl_outs, inl = vjp(self.prog, self.prog.inline, self.draw.inputs, self.env, self.v)
        except Exception as e:
            raise self.fail(
                [f"the inlined body's gradient raised on {self.target.name}:\n{format_exception(e)}"]
            ) from e
        labels = ("call", "inline")
        return _compare_all(
            "FUNCTION output", [str(k) for k in range(len(outs))], outs, inl_outs, labels, self.rtol
        ) + _compare_all("gradient through the FUNCTION of", self.names, grads, inl, labels, self.rtol)


def check_gradients(
    target: Target,
    prog: GradProgram,
    dt: DType,
    rng: np.random.Generator,
    record: Recorder,
    tol_scale: float = 1.0,
) -> None:
    """Run every gradient check of `prog` in `dt` on the backend; raise `Failure` with a repro. `tol_scale`
    widens the dtype's tolerance (second-order programs are longer computations in the dtype).

    expect "fd": the dot-product test, the full Jacobian when small, REFERENCE's gradients and the inlined
    body's; "reference": REFERENCE's gradients only (a convention at a kink); "zero": no gradient flows."""
    _Check(target, prog, dt, rng, record, tol_scale).run()


def second_order(prog: GradProgram, dt: DType, rng: np.random.Generator) -> GradProgram:
    """The program x -> vjp(prog)(x, w) for a fixed random cotangent w: checking its gradient checks the
    gradient of the gradient."""
    probe = sample(prog, dt, np.random.default_rng(0))
    outs, _ = _build(prog, prog.body, probe, _Env(REFERENCE, dt, "REFERENCE:1"))
    names = ", ".join(i.name for i in prog.inputs if i.target)
    ws = [representable(rng.standard_normal(_concrete(o.shape)), o.dtype).astype(np.float32) for o in outs]

    def grad_of(body: str) -> str:
        lines = [body.rstrip("\n")]
        for k, w in enumerate(ws):
            src = "out" if len(ws) == 1 else f"out[{k}]"
            lines.append(f"w{k} = Tensor({array_literal(w)}, device={src}.device, dtype={src}.dtype)")
        pick = "[0]" if len(names.split(", ")) == 1 else ""
        if len(outs) == 1:
            lines.append(f"out = tuple(out.gradient({names}, gradient=w0)){pick}")
        else:
            loss = " + ".join(f"(out[{k}] * w{k}).sum().to(dev)" for k in range(len(outs)))
            lines.append(f"out = tuple(({loss}).gradient({names})){pick}")
        return "\n".join(lines)

    return GradProgram(
        prog.inputs,
        grad_of(prog.body),
        "fd",
        None if prog.inline is None else grad_of(prog.inline),
        False,
        prog.jacobian,
    )


def _concrete(shape: Sequence[object]) -> tuple[int, ...]:
    """A shape of ints (case programs have no symbolic sizes)."""
    if not all(isinstance(d, int) for d in shape):
        raise TypeError(f"a conformance program has the symbolic shape {shape}")
    return tuple(d for d in shape if isinstance(d, int))


def _targets(inputs: Sequence[Input]) -> list[Input]:
    return [i for i in inputs if i.requires_grad]


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        if a.shape != b.shape:
            return float("inf")
        if np.array_equal(a, b, equal_nan=True):
            return 0.0
        scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
        return float(np.max(np.abs(a - b))) / scale


def _short(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a), precision=6, separator=", ", threshold=24).replace("\n", " ")


def _jacobian(
    prog: GradProgram,
    draw: _Draw,
    env: _Env,
    fd_env: _Env,
    v: Sequence[np.ndarray],
    shapes: Sequence[tuple[int, ...]],
    rtol: float,
    record: Recorder,
) -> tuple[str | None, list[np.ndarray]]:
    """Compare the full Jacobian (one backward per output element, float64 differences per input
    element); returns (a message naming the entries that differ, or None; the gradients v·J_fd)."""
    targets = [k for k, i in enumerate(draw.inputs) if i.requires_grad]
    cols: list[np.ndarray] = []
    for k in targets:
        for e in range(draw.x64[k].size):
            d = [np.zeros_like(x) for x in draw.x64]
            d[k].reshape(-1)[e] = 1.0
            cols.append(np.concatenate([j.reshape(-1) for j in _fd_jvp(prog, draw, fd_env, d)]))
    jn = np.stack(cols, axis=1) if cols else np.zeros((sum(int(np.prod(s)) for s in shapes), 0))
    rows: list[np.ndarray] = []
    sizes = [int(np.prod(s)) for s in shapes]
    for m in range(int(sum(sizes))):
        onehot = np.zeros(int(sum(sizes)))
        onehot[m] = 1.0
        parts = np.split(onehot, np.cumsum(sizes)[:-1])
        _, g = vjp(prog, prog.body, draw.inputs, env, [p.reshape(s) for p, s in zip(parts, shapes)])
        rows.append(np.concatenate([x.reshape(-1) for x in g]) if g else np.zeros(0))
    ja = np.stack(rows) if rows else np.zeros_like(jn)
    vflat = np.concatenate([x.reshape(-1) for x in v])
    expected = vflat @ jn
    splits = np.cumsum([draw.x64[k].size for k in targets])[:-1]
    expected_grads = [e.reshape(draw.x64[k].shape) for e, k in zip(np.split(expected, splits), targets)]
    with np.errstate(all="ignore"):
        # an entry's error scales with its row (one backward pass) and, for the differences, with the whole
        scale = np.abs(jn) + np.max(np.abs(jn), axis=1, keepdims=True) + np.mean(np.abs(jn)) + 1e-12
        err = np.abs(ja - jn) / scale
    finite = np.isfinite(ja) & np.isfinite(jn)
    record.error(float(np.max(np.where(finite, err, 0.0))) if err.size else 0.0)
    bad = np.argwhere(~finite | (err > rtol))
    if not len(bad):
        return None, expected_grads
    names = [(draw.inputs[k].name, idx) for k in targets for idx in np.ndindex(draw.x64[k].shape)]
    outs = [(o, idx) for o, s in enumerate(shapes) for idx in np.ndindex(s)]
    lines = [
        f"Jacobian: {len(bad)} of {ja.size} entries differ (d out / d in: {env.device} in "
        f"{env.dt.name} vs float64 finite differences):"
    ]
    for m, c in bad[:8]:
        (o, oi), (nm, ii) = outs[m], names[c]
        lines.append(f"  d out{o}{list(oi)} / d {nm}{list(ii)}: {ja[m, c]:.9g} vs {jn[m, c]:.9g}")
    if len(bad) > 8:
        lines.append(f"  ... and {len(bad) - 8} more")
    return "\n".join(lines), expected_grads


def _snippet(
    target: Target,
    prog: GradProgram,
    dt: DType,
    inputs: Sequence[Input],
    v: Sequence[np.ndarray],
    expected: Sequence[np.ndarray] | None,
) -> str:
    names = [i.name for i in inputs if i.requires_grad]
    outs = ["out"] if len(v) == 1 else [f"out[{k}]" for k in range(len(v))]
    vs = [
        f"v{k} = Tensor({array_literal(x.astype(np.float32))}, device={o}.device, dtype={o}.dtype)"
        for k, (x, o) in enumerate(zip(v, outs))
    ]
    if len(v) == 1:
        grad = f"grads = out.gradient({', '.join(names)}, gradient=v0)"
    else:
        loss = " + ".join(f"(out[{k}] * v{k}).sum().to(dev)" for k in range(len(v)))
        grad = f"grads = ({loss}).gradient({', '.join(names)})"
    tail = [*vs, grad]
    for k, nm in enumerate(names):
        hint = ""
        if expected is not None:
            hint = "  # float64 finite differences: " + _short(expected[k])
        tail.append(f"print({nm!r}, grads[{k}].numpy()){hint}")
    return snippet(target.name, dt, inputs, prog.body, tail, {"dev2": repr(target.second)})
