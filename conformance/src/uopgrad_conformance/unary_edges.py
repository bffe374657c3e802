"""Every unary Tensor op at extreme inputs (docs/conformance.md "What it checks" 7): value and gradient at
±300, ±89 (e^89 overflows float32), ±30, ±inf and ±0, against closed forms evaluated in float64 with numpy
and rounded to the dtype. Where an op's mathematical limit and IEEE arithmetic disagree the closed form
says which one uopgrad defines (docs/semantics.md §5.3, PyTorch's choice): `softsign(inf)` is NaN (inf/inf)
and so is `silu(-inf)` (-inf·0), while the gradients of sigmoid, tanh, gelu, quick_gelu, hardsigmoid and
erf are 0, never NaN, however large |x| is.

One program per family of ops and dtype: the ops applied to the rows of one input (`x[k].op()`), stacked,
and differentiated with one backward, so that a compiled backend builds a family's kernels together. An op
that differs is run again on its own, and the failure prints that program (or the family's, where the op
passes alone) as a runnable repro with the closed form's values as comments."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from uopgrad import DType, Tensor, dtypes
from uopgrad_conformance.forward import Failure, format_exception
from uopgrad_conformance.numerics import compare, host_dtype, representable
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import Input, execute, namespace, snippet
from uopgrad_conformance.target import Target

__all__ = ["EDGES", "FAMILIES", "UNARY_EDGE_OPS", "UnaryEdge", "check_family", "closed_form"]

EDGES = (-300.0, -89.0, -30.0, -0.0, 0.0, 30.0, 89.0, 300.0, math.inf, -math.inf)
Fn = Callable[[np.ndarray], np.ndarray]
SELU = (1.6732632423543772, 1.0507009873554805)
_GELU_K = math.sqrt(2 / math.pi)
_erf = np.vectorize(math.erf, otypes=[float])


def _where(c: np.ndarray, a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    return np.asarray(np.where(c, a, b), dtype=np.float64)


def _sig(x: np.ndarray) -> np.ndarray:
    """sigmoid from e^-|x| (never overflows)."""
    e = np.exp(-np.abs(x))
    return _where(x >= 0, 1 / (1 + e), e / (1 + e))


def _dsig(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.asarray(e / (1 + e) ** 2)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))))


def _dtanh(x: np.ndarray) -> np.ndarray:
    """1 - tanh(x)^2 from e^-2|x| (0, not NaN, at ±inf)."""
    u = np.exp(-2 * np.abs(x))
    return np.asarray(4 * u / (1 + u) ** 2)


def _gelu(x: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * x * (1 + np.tanh(_GELU_K * (x + 0.044715 * x**3))))


def _dgelu(x: np.ndarray) -> np.ndarray:
    inner = _GELU_K * (x + 0.044715 * x**3)
    return np.asarray(
        0.5 * (1 + np.tanh(inner)) + 0.5 * x * _dtanh(inner) * _GELU_K * (1 + 3 * 0.044715 * x**2)
    )


def _dgelu_exact(x: np.ndarray) -> np.ndarray:  # the limits at ±inf (docs/semantics.md §5.3), not inf·0
    tail = _where(np.isinf(x), 0.0, x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))
    return np.asarray(0.5 * (1 + _erf(x / math.sqrt(2))) + tail)


def _zero(x: np.ndarray) -> np.ndarray:
    return np.zeros_like(x)


@dataclass(frozen=True)
class UnaryEdge:
    """One unary op: its source over `x`, its value and derivative in float64, its family (a summary row)
    and its relative tolerance in float32 (float64: 1e-7)."""

    expr: str
    value: Fn
    grad: Fn
    family: str
    rtol32: float = 1e-4


def _ops(family: str, table: dict[str, tuple[str, Fn, Fn]], rtol32: float = 1e-4) -> dict[str, UnaryEdge]:
    return {k: UnaryEdge(e, v, g, family, rtol32) for k, (e, v, g) in table.items()}


UNARY_EDGE_OPS: dict[str, UnaryEdge] = {
    **_ops(
        "activations",
        {
            "relu": ("x.relu()", lambda x: _where(x > 0, x, 0.0), lambda x: _where(x > 0, 1.0, 0.0)),
            "relu6": ("x.relu6()", lambda x: np.clip(x, 0, 6), lambda x: _where((x > 0) & (x < 6), 1.0, 0.0)),
            "leaky_relu": (
                "x.leaky_relu(0.1)",
                lambda x: _where(x > 0, x, 0.1 * x),
                lambda x: _where(x > 0, 1.0, 0.1),
            ),
            "elu": (
                "x.elu(0.7)",
                lambda x: _where(x > 0, x, 0.7 * np.expm1(x)),
                lambda x: _where(x > 0, 1.0, 0.7 * np.exp(x)),
            ),
            "celu": (
                "x.celu(0.7)",
                lambda x: _where(x > 0, x, 0.7 * np.expm1(x / 0.7)),
                lambda x: _where(x > 0, 1.0, np.exp(x / 0.7)),
            ),
            "selu": (
                f"x.selu({SELU[0]!r}, {SELU[1]!r})",
                lambda x: SELU[1] * _where(x > 0, x, SELU[0] * np.expm1(x)),
                lambda x: SELU[1] * _where(x > 0, 1.0, SELU[0] * np.exp(x)),
            ),
            "hardsigmoid": (
                "x.hardsigmoid()",
                lambda x: np.clip(x / 6 + 0.5, 0, 1),
                lambda x: _where((x > -3) & (x < 3), 1 / 6, 0.0),
            ),
            "hardswish": (
                "x.hardswish()",
                lambda x: x * np.clip(x + 3, 0, 6) / 6,
                lambda x: _where(x < -3, 0.0, _where(x > 3, 1.0, (2 * x + 3) / 6)),
            ),
            "hardtanh": (
                "x.hardtanh()",
                lambda x: np.clip(x, -1, 1),
                lambda x: _where(np.abs(x) <= 1, 1.0, 0.0),
            ),
            "clip": (
                "x.clip(-2.0, 2.0)",
                lambda x: np.clip(x, -2, 2),
                lambda x: _where(np.abs(x) <= 2, 1.0, 0.0),
            ),
            # the quotient rule at ±inf: 1/inf - inf/inf, NaN (PyTorch's)
            "softsign": (
                "x.softsign()",
                lambda x: x / (1 + np.abs(x)),
                lambda x: 1 / (1 + np.abs(x)) - np.abs(x) / (1 + np.abs(x)) ** 2,
            ),
            "abs": ("x.abs()", np.abs, np.sign),
            "sign": ("x.sign()", np.sign, _zero),
            "neg": ("-x", np.negative, lambda x: -np.ones_like(x)),
            "floor": ("x.floor()", np.floor, _zero),
            "ceil": ("x.ceil()", np.ceil, _zero),
            "round": ("x.round()", np.round, _zero),
            "trunc": ("x.trunc()", np.trunc, _zero),
        },
    ),
    **_ops(
        "sigmoids",
        {
            "sigmoid": ("x.sigmoid()", _sig, _dsig),
            "logsigmoid": ("x.logsigmoid()", lambda x: -_softplus(-x), lambda x: _sig(-x)),
            "tanh": ("x.tanh()", np.tanh, _dtanh),
            "silu": ("x.silu()", lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
            "swish": ("x.swish()", lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
            "quick_gelu": (
                "x.quick_gelu()",
                lambda x: x * _sig(1.702 * x),
                lambda x: _sig(1.702 * x) + 1.702 * x * _dsig(1.702 * x),
            ),
            "gelu": ("x.gelu()", _gelu, _dgelu),
            "gelu_exact": ("x.gelu('none')", lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), _dgelu_exact),
            "mish": (
                "x.mish()",
                lambda x: x * np.tanh(_softplus(x)),
                lambda x: np.tanh(_softplus(x)) + x * _sig(x) * _dtanh(_softplus(x)),
            ),
            "softplus": ("x.softplus()", _softplus, _sig),
            "softplus_beta": ("x.softplus(2.0)", lambda x: _softplus(2 * x) / 2, lambda x: _sig(2 * x)),
            "erf": ("x.erf()", _erf, lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x)),
        },
    ),
    **_ops(
        "exp log",
        {
            "exp": ("x.exp()", np.exp, np.exp),
            "exp2": ("x.exp2()", np.exp2, lambda x: np.exp2(x) * math.log(2)),
            "log": ("x.log()", np.log, lambda x: 1 / x),
            "log2": ("x.log2()", np.log2, lambda x: 1 / (x * math.log(2))),
            "log10": ("x.log10()", np.log10, lambda x: 1 / (x * math.log(10))),
            "sqrt": ("x.sqrt()", np.sqrt, lambda x: 0.5 / np.sqrt(x)),
            "rsqrt": ("x.rsqrt()", lambda x: 1 / np.sqrt(x), lambda x: -0.5 / np.sqrt(x) ** 3),
            "reciprocal": ("x.reciprocal()", lambda x: 1 / x, lambda x: -1 / x**2),
            "square": ("x.square()", np.square, lambda x: 2 * x),
            "sinh": ("x.sinh()", np.sinh, np.cosh),
            "cosh": ("x.cosh()", np.cosh, np.sinh),
            "asinh": ("x.asinh()", np.arcsinh, lambda x: 1 / np.sqrt(x * x + 1)),
            "acosh": ("x.acosh()", np.arccosh, lambda x: 1 / np.sqrt(x * x - 1)),
            "atanh": ("x.atanh()", np.arctanh, lambda x: 1 / (1 - x * x)),
        },
    ),
    # float32 sin/cos/tan of 300 are reduced by 2π in float32: |x|·eps of error, 1e-3 relative here
    **_ops(
        "trigonometric",
        {
            "sin": ("x.sin()", np.sin, np.cos),
            "cos": ("x.cos()", np.cos, lambda x: -np.sin(x)),
            "tan": ("x.tan()", np.tan, lambda x: 1 / np.cos(x) ** 2),
            "asin": ("x.asin()", np.arcsin, lambda x: 1 / np.sqrt(1 - x * x)),
            "acos": ("x.acos()", np.arccos, lambda x: -1 / np.sqrt(1 - x * x)),
            "atan": ("x.atan()", np.arctan, lambda x: 1 / (1 + x * x)),
        },
        rtol32=1e-3,
    ),
}
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(op.family for op in UNARY_EDGE_OPS.values()))
DTYPES = (dtypes.float32, dtypes.float64)
# below these, a finite tail may be anything as small (sigmoid'(30) is 9e-14; uopgrad's softplus(-30) is
# log(1 + e^-30), 0 in float32, as the reference's formula)
_ATOL = {dtypes.float32: 1e-12, dtypes.float64: 1e-15}


def closed_form(op: UnaryEdge, x: np.ndarray, dt: DType) -> tuple[np.ndarray, np.ndarray]:
    """The op's value and derivative at `x`, in float64 and rounded to `dt` (so e^300 is inf in float32)."""
    x64 = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        return representable(op.value(x64), dt), representable(op.grad(x64), dt)


def _tolerance(op: UnaryEdge, dt: DType, want: np.ndarray) -> np.ndarray:
    rtol = op.rtol32 if dt == dtypes.float32 else 1e-7
    with np.errstate(all="ignore"):
        return np.asarray(rtol * np.abs(want.astype(np.float64)) + _ATOL[dt])


def _family_source(names: Sequence[str]) -> str:
    rows = ", ".join(UNARY_EDGE_OPS[n].expr.replace("x", f"x[{k}]", 1) for k, n in enumerate(names))
    return f"y = Tensor.stack({rows})\ng, = y.sum().gradient(x)\nout = (y, g)"


def _one_source(name: str) -> str:
    return f"y = {UNARY_EDGE_OPS[name].expr}\ng, = y.sum().gradient(x)\nout = (y, g)"


def _run(device: str, dt: DType, x: np.ndarray, body: str) -> tuple[np.ndarray, np.ndarray]:
    """The program's values and gradient (realized together, then read)."""
    t = Tensor(np.asarray(x, dtype=host_dtype(dt)), device=device, dtype=dt, requires_grad=True)
    y, g = execute(body, namespace(device, dt, x=t))
    Tensor.realize(y, g)
    return y.numpy(), g.numpy()


def _differs(
    op: UnaryEdge, dt: DType, got: tuple[np.ndarray, np.ndarray], x: np.ndarray, record: Recorder
) -> list[str]:
    """What differs from the closed form: one paragraph per value / gradient."""
    out = []
    for what, g, w in zip(("value", "gradient"), got, closed_form(op, x, dt)):
        cmp = compare(g, w, dt, 0, _tolerance(op, dt, w), False, [x], label="closed form")
        record.error(_relative(g, w, op, dt))
        if not cmp.ok:
            out.append(cmp.message(f"{what} of {op.expr} differs from the closed form (inputs x)"))
    return out


def _relative(got: np.ndarray, want: np.ndarray, op: UnaryEdge, dt: DType) -> float:
    """The worst relative error among finite values, a tail below the absolute floor counting as small."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    both = np.isfinite(g) & np.isfinite(w)
    if not both.any():
        return 0.0
    floor = _ATOL[dt] / (op.rtol32 if dt == dtypes.float32 else 1e-7)
    return float(np.max(np.abs(g[both] - w[both]) / (np.abs(w[both]) + floor)))


def _repro(target: Target, dt: DType, x: np.ndarray, body: str, want: tuple[str, str] | None) -> str:
    """The program as a snippet that prints its value and gradient (with the closed forms as comments)."""
    notes = [f"  # the closed form: {w}" for w in want] if want is not None else ["", ""]
    tail = [f"print(y.numpy()){notes[0]}", f"print(g.numpy()){notes[1]}"]
    inp = Input("x", np.asarray(x, dtype=host_dtype(dt)), dt, True)
    return snippet(target.name, dt, [inp], body.replace("\nout = (y, g)", ""), tail)


def _text(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a), separator=", ").replace("\n", "")


def check_family(target: Target, family: str, dt: DType, record: Recorder) -> None:
    """Every op of `family` at EDGES on the backend against the closed forms; raise `Failure` naming each op
    that differs (the first three), each with a repro."""
    names = [n for n, op in UNARY_EDGE_OPS.items() if op.family == family]
    edges = np.asarray(EDGES, dtype=host_dtype(dt))
    x = np.tile(edges, (len(names), 1))
    body = _family_source(names)
    try:
        ys, gs = _run(target.name, dt, x, body)
    except Exception as e:
        raise Failure(
            f"the {family} ops at extreme inputs raised on {target.name}:\n{format_exception(e)}\n"
            "repro:\n" + _repro(target, dt, x, body, None)
        ) from e
    problems = []
    for k, name in enumerate(names):
        op = UNARY_EDGE_OPS[name]
        found = _differs(op, dt, (ys[k], gs[k]), edges, record)
        if not found:
            continue
        alone = _one_source(name)
        try:
            passes_alone = not _differs(op, dt, _run(target.name, dt, edges, alone), edges, Recorder())
        except Exception:
            passes_alone = False
        if passes_alone:  # the family's program is the repro: row k is this op
            repro = f"(it passes on its own: the repro is its family's program, row {k})\nrepro:\n" + _repro(
                target, dt, x, body, None
            )
        else:
            value, grad = closed_form(op, edges, dt)
            repro = "repro:\n" + _repro(target, dt, edges, alone, (_text(value), _text(grad)))
        problems.append(f"[{name}] " + "\n".join(found) + "\n" + repro)
        if len(problems) == 3 and k + 1 < len(names):
            problems.append(f"(the family's other {len(names) - k - 1} op(s) were not examined)")
            break
    if problems:
        raise Failure("\n\n".join(problems))
