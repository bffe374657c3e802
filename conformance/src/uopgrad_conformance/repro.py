"""Repro snippets: every check runs uopgrad code written as source text, and a failure prints that same
text with its inputs inlined (cut down to the failing elements where it can), so the snippet is exactly
what ran, a few lines long, and runnable on its own."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import uopgrad
from uopgrad import DType, Ops, Tensor, UOp, dtypes, function
from uopgrad_conformance.numerics import host_dtype, name

__all__ = ["Input", "array_literal", "execute", "snippet"]

HEADER = ("import numpy as np", "from uopgrad import Tensor, UOp, Ops, dtypes, function")


@dataclass(frozen=True)
class Input:
    """One input of a snippet: a tensor `name` of `dtype` holding `value` (host dtype)."""

    name: str
    value: np.ndarray
    dtype: DType
    requires_grad: bool = False


def _scalar(v: Any, kind: str) -> str:  # noqa: ANN401  (a numpy scalar of any kind)
    if kind == "b":
        return "True" if bool(v) else "False"
    if kind in "iu":
        return str(int(v))
    f = float(v)
    if math.isnan(f):
        return "np.nan"
    if math.isinf(f):
        return "np.inf" if f > 0 else "-np.inf"
    return repr(f)


def array_literal(arr: np.ndarray) -> str:
    """`np.array([...], dtype=np.<t>)`, exact (floats by their shortest round-trip repr)."""
    a = np.asarray(arr)

    def nested(x: np.ndarray) -> str:
        if x.ndim == 0:
            return _scalar(x.item(), a.dtype.kind)
        return "[" + ", ".join(nested(x[i]) for i in range(x.shape[0])) + "]"

    if a.ndim > 0 and a.size == 0:
        return f"np.zeros({a.shape}, dtype=np.{a.dtype.name})"
    if (p := _period(a)) is not None:  # a large array that repeats: np.resize of one period, same shape
        return f"np.resize({array_literal(a.reshape(-1)[:p])}, {a.shape})"
    return f"np.array({nested(a)}, dtype=np.{a.dtype.name})"


def _period(a: np.ndarray, longest: int = 64) -> int | None:
    """The shortest period (at most `longest`) of a flattened array of more than `longest` elements."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.size <= longest:
        return None
    if flat.dtype.kind == "f":
        flat = flat.view(f"u{flat.dtype.itemsize}")  # bits: -0.0 and NaN payloads stay what they are
    for p in range(1, longest + 1):
        if np.array_equal(flat, np.resize(flat[:p], flat.size)):
            return p
    return None


def _dtype_expr(dt: DType) -> str:
    return f"dtypes.{name(dt)}"


def input_line(inp: Input, device_expr: str = "dev") -> str:
    """The line that creates one input tensor."""
    arr = np.asarray(inp.value, dtype=host_dtype(inp.dtype))
    grad = ", requires_grad=True" if inp.requires_grad else ""
    dt = _dtype_expr(inp.dtype)
    return f"{inp.name} = Tensor({array_literal(arr)}, device={device_expr}, dtype={dt}{grad})"


def snippet(
    device: str,
    dt: DType | None,
    inputs: Sequence[Input],
    body: str,
    tail: Sequence[str] = (),
    extra: Mapping[str, str] | None = None,
) -> str:
    """A runnable program: imports, `dev` (and `dt`, `dev2`, extra names), the inputs, `body`, `tail`."""
    lines = list(HEADER)
    lines.append(f"dev = {device!r}")
    if dt is not None:
        lines.append(f"dt = {_dtype_expr(dt)}")
    for k, v in (extra or {}).items():
        lines.append(f"{k} = {v}")
    lines += [input_line(i) for i in inputs]
    lines += body.rstrip("\n").splitlines()
    lines += list(tail)
    return "\n".join(lines)


def namespace(device: str, dt: DType | None, **names: object) -> dict[str, Any]:
    """The globals a case body runs with (the same names the snippet header defines)."""
    ns: dict[str, Any] = {
        "np": np,
        "Tensor": Tensor,
        "UOp": UOp,
        "Ops": Ops,
        "dtypes": dtypes,
        "function": function,
        "uopgrad": uopgrad,
        "dev": device,
    }
    if dt is not None:
        ns["dt"] = dt
    ns.update(names)
    return ns


def execute(body: str, ns: dict[str, Any], result: str = "out") -> Any:  # noqa: ANN401  (what the body binds)
    """Run `body` in `ns` and return what it binds to `result`."""
    exec(compile(body, "<conformance case>", "exec"), ns)
    return ns[result]
