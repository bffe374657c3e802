"""Forward checks: run uopgrad source on the backend and on REFERENCE with the same inputs and compare.
A mismatch (or an exception on the backend) fails with the elements that differ and a repro snippet cut
down to those elements."""
from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from uopgrad import DType, Tensor
from uopgrad_conformance.numerics import Comparison, compare
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import Input, execute, namespace, snippet
from uopgrad_conformance.target import REFERENCE, Target, tensor

__all__ = ["Failure", "ForwardCheck", "check_equal", "format_exception", "run_forward"]

# a comparison of one expression's result: (backend array, REFERENCE array, inputs) -> Comparison
Comparer = Callable[[np.ndarray, np.ndarray, Sequence[np.ndarray]], Comparison]


class Failure(AssertionError):
    """A conformance failure: its message says what differs and holds a repro snippet."""


@dataclass(frozen=True)
class ForwardCheck:
    """One expression to check: its source (binding nothing: an expression), the dtype of its result and
    how to compare it. `elementwise` cases can cut their repro down to the failing elements."""

    expr: str
    dtype: DType
    comparer: Comparer
    elementwise: bool = True


def format_exception(e: BaseException, limit: int = 3) -> str:
    """The exception's type and message after the last frames of its traceback, indented."""
    frames = traceback.extract_tb(e.__traceback__)[-limit:]
    lines = [f'File "{f.filename}", line {f.lineno}, in {f.name}' for f in frames]
    lines += f"{type(e).__name__}: {e}".splitlines()[:12]
    return "\n".join("    " + s for s in lines)


def _evaluate(device: str, dt: DType | None, inputs: Sequence[Input], expr: str,
              extra: dict[str, object]) -> np.ndarray:
    ns = namespace(device, dt, **extra)
    for inp in inputs:
        ns[inp.name] = tensor(inp.value, inp.dtype, device, inp.requires_grad or None)
    out = execute(f"out = {expr}", ns)
    if not isinstance(out, Tensor):
        raise TypeError(f"the case expression gave {type(out).__name__}, not a Tensor")
    return out.numpy()


def _cut(inputs: Sequence[Input], index: Sequence[tuple[int, ...]]) -> list[Input]:
    """The inputs at the given element indices only (1-d), for a short repro of an elementwise case."""
    flat = [i[0] for i in index]
    return [Input(i.name, np.asarray(i.value)[flat], i.dtype, i.requires_grad) for i in inputs]


def _repro(target: Target, dt: DType | None, inputs: Sequence[Input], expr: str, expected: str | None,
           extra: dict[str, str]) -> str:
    tail = ["print(out.numpy())" + (f"  # REFERENCE gives {expected}" if expected else "")]
    return snippet(target.name, dt, inputs, f"out = {expr}", tail, extra)


def run_forward(target: Target, dt: DType | None, inputs: Sequence[Input], checks: Sequence[ForwardCheck],
                record: Recorder, extra: dict[str, object] | None = None,
                extra_ref: dict[str, object] | None = None, extra_src: dict[str, str] | None = None) -> None:
    """Run every check on the backend and on REFERENCE; raise `Failure` listing each one that differs.
    `extra` binds further names for the backend's run, `extra_ref` for REFERENCE's, `extra_src` in the
    snippet."""
    problems: list[str] = []
    extra = extra or {}
    extra_ref = extra_ref if extra_ref is not None else extra
    extra_src = extra_src or {}
    for chk in checks:
        try:
            expected = _evaluate(REFERENCE, dt, inputs, chk.expr, extra_ref)
        except Exception as e:  # the case itself is wrong: say so, never blame the backend
            problems.append(f"[{chk.expr}] REFERENCE failed to run the case (a harness bug):\n"
                            f"{format_exception(e)}")
            continue
        try:
            got = _evaluate(target.name, dt, inputs, chk.expr, extra)
        except Exception as e:
            small = _cut(inputs, [(i,) for i in range(min(4, _size(inputs)))]) if chk.elementwise else inputs
            problems.append(f"[{chk.expr}] raised on {target.name}:\n{format_exception(e)}\nrepro:\n"
                            + _repro(target, dt, small, chk.expr, None, extra_src))
            continue
        cmp = chk.comparer(got, expected, [i.value for i in inputs])
        record.error(cmp.worst_rel)
        if cmp.ok:
            continue
        if chk.elementwise and cmp.bad and all(len(ix) == 1 for ix in cmp.bad):
            small = _cut(inputs, cmp.bad[:4])
            shown = np.asarray(expected)[[ix[0] for ix in cmp.bad[:4]]]
        else:
            small, shown = list(inputs), None
        exp_text = None if shown is None else np.array2string(shown, separator=", ")
        problems.append(cmp.message(f"[{chk.expr}] differs from REFERENCE") + "\nrepro:\n"
                        + _repro(target, dt, small, chk.expr, exp_text, extra_src))
    if problems:
        raise Failure("\n\n".join(problems))


def _size(inputs: Sequence[Input]) -> int:
    return int(np.asarray(inputs[0].value).shape[0]) if inputs and np.ndim(inputs[0].value) else 0


def check_equal(dt: DType, ulps: float = 0, signed_zero: bool = True,
                atol: Callable[[Sequence[np.ndarray]], np.ndarray] | None = None) -> Comparer:
    """A comparer: `compare` with these tolerances (`atol` computed from the inputs)."""
    def run(got: np.ndarray, expected: np.ndarray, ins: Sequence[np.ndarray]) -> Comparison:
        bound = atol(ins) if atol is not None else 0.0
        return compare(got, expected, dt, ulps, bound, signed_zero, ins if _flat(ins, expected) else ())
    return run


def _flat(ins: Sequence[np.ndarray], expected: np.ndarray) -> bool:
    return all(np.shape(i) == np.shape(expected) for i in ins)
