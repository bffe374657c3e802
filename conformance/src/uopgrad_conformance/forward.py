"""Forward checks: run uopgrad source on the backend and on REFERENCE with the same inputs and compare.
A mismatch (or an exception on the backend) fails with the elements that differ and a repro snippet of the
same shape, its inputs filled with the failing elements over and over (so a bug that depends on the trip
count, a dropped tail, still shows in the repro).

A compiled backend runs each expression twice, the second time with another thread count where it has a
thread pool (threads.py): the two results must be the same bits (docs/conformance.md "Determinism"). A
case that can trap (SIGFPE on integer division) runs on the backend in a subprocess, so a trap fails that
case and not the whole run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from uopgrad import DType, Tensor
from uopgrad_conformance.numerics import Comparison, compare
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import Input, execute, namespace, snippet
from uopgrad_conformance.target import REFERENCE, Target, tensor
from uopgrad_conformance.threads import other_thread_count

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


def _evaluate(
    device: str, dt: DType | None, inputs: Sequence[Input], expr: str, extra: dict[str, object]
) -> np.ndarray:
    ns = namespace(device, dt, **extra)
    for inp in inputs:
        ns[inp.name] = tensor(inp.value, inp.dtype, device, inp.requires_grad or None)
    out = execute(f"out = {expr}", ns)
    if not isinstance(out, Tensor):
        raise TypeError(f"the case expression gave {type(out).__name__}, not a Tensor")
    return out.numpy()


def _cut(inputs: Sequence[Input], index: Sequence[tuple[int, ...]]) -> list[Input]:
    """Inputs of the original shape holding only the elements at `index` (1-d), repeated: a short repro
    (repro.py writes a repeating array as `np.resize`) that keeps the loop's trip count."""
    flat = [i[0] for i in index]
    return [
        Input(i.name, np.resize(np.asarray(i.value)[flat], np.shape(i.value)), i.dtype, i.requires_grad)
        for i in inputs
    ]


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element by element: the same bits (so NaN equals NaN with the same payload, and -0.0 is not 0.0)."""
    x, y = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if x.shape != y.shape or x.dtype != y.dtype:
        return np.zeros(np.broadcast_shapes(x.shape, y.shape) if x.shape == y.shape else (1,), dtype=bool)
    if x.dtype.kind not in "biu":  # floats, and ml_dtypes' bfloat16 (kind 'V'), compare as bits
        return np.asarray(x.view(f"u{x.dtype.itemsize}") == y.view(f"u{y.dtype.itemsize}"))
    return np.asarray(x == y)


def rerun_differs(got: np.ndarray, again: np.ndarray, how: str) -> str | None:
    """None when a second run gave the same bits, else what differs."""
    same = _same_bits(got, again)
    if bool(np.all(same)):
        return None
    bad: list[np.ndarray] = list(np.argwhere(~same)[:4]) if same.shape == np.shape(got) else []
    shown = ", ".join(
        f"at {tuple(int(i) for i in ix)}: {np.asarray(got)[tuple(ix)]!r} then "
        f"{np.asarray(again)[tuple(ix)]!r}"
        for ix in bad
    )
    n_bad = int(np.size(same) - np.sum(same))
    return f"is not deterministic: a second run ({how}) gave other bits in {n_bad} element(s) ({shown})"


def _isolated(
    target: Target,
    dt: DType | None,
    inputs: Sequence[Input],
    checks: Sequence[ForwardCheck],
    extra_src: dict[str, str],
) -> tuple[list[np.ndarray | None], str | None]:
    """Run the checks' expressions on the backend in a subprocess: (the results, None), or (the results
    of the checks that finished, what killed the process)."""
    with tempfile.TemporaryDirectory(prefix="uopgrad-conformance-") as tmp:
        lines = []
        for k, chk in enumerate(checks):
            path = os.path.join(tmp, f"out{k}.npy")
            lines += [f"out = {chk.expr}", f"np.save({path!r}, out.numpy())"]
        script = snippet(target.name, dt, inputs, "\n".join(lines), (), extra_src)
        try:
            res = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False
            )
            died = None if res.returncode == 0 else _death(res.returncode, res.stderr)
        except subprocess.TimeoutExpired:
            died = "the subprocess ran past 600 s"
        outs: list[np.ndarray | None] = []
        for k in range(len(checks)):
            path = os.path.join(tmp, f"out{k}.npy")
            outs.append(np.load(path) if os.path.exists(path) else None)
        return outs, died


def _death(rc: int, stderr: str) -> str:
    if rc < 0:
        try:
            return f"the subprocess was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"the subprocess was killed by signal {-rc}"
    tail = "\n".join("    " + s for s in stderr.strip().splitlines()[-6:])
    return f"the subprocess exited with status {rc}:\n{tail}"


def _prebuild(
    target: Target,
    dt: DType | None,
    inputs: Sequence[Input],
    checks: Sequence[ForwardCheck],
    extra: dict[str, object],
) -> None:
    """Realize every check's expression in one run first, so that a backend that builds the new kernels of
    a schedule together (OpenCL, the CUDA emulator) compiles them once for the lot; the checks then run one
    by one as always, finding their kernels built. Anything that goes wrong here happens again in its own
    check, which reports it."""
    if len(checks) < 2:
        return
    try:
        ns = namespace(target.name, dt, **extra)
        for inp in inputs:
            ns[inp.name] = tensor(inp.value, inp.dtype, target.name, inp.requires_grad or None)
        outs = [execute(f"out = {chk.expr}", ns) for chk in checks]
        Tensor.realize(*(o for o in outs if isinstance(o, Tensor)))
    except Exception:  # the check itself reports it
        return


def _repro(
    target: Target,
    dt: DType | None,
    inputs: Sequence[Input],
    expr: str,
    expected: str | None,
    extra: dict[str, str],
) -> str:
    tail = ["print(out.numpy())" + (f"  # REFERENCE gives {expected}" if expected else "")]
    return snippet(target.name, dt, inputs, f"out = {expr}", tail, extra)


def run_forward(
    target: Target,
    dt: DType | None,
    inputs: Sequence[Input],
    checks: Sequence[ForwardCheck],
    record: Recorder,
    extra: dict[str, object] | None = None,
    extra_ref: dict[str, object] | None = None,
    extra_src: dict[str, str] | None = None,
    isolate: bool = False,
) -> None:
    """Run every check on the backend and on REFERENCE; raise `Failure` listing each one that differs.
    `extra` binds further names for the backend's run, `extra_ref` for REFERENCE's, `extra_src` in the
    snippet. `isolate`: the backend runs the checks in a subprocess (cases that can trap; `extra` must be
    empty: the subprocess sees only the snippet's names)."""
    problems: list[str] = []
    extra = extra or {}
    extra_ref = extra_ref if extra_ref is not None else extra
    extra_src = extra_src or {}
    isolated: list[np.ndarray | None] = []
    died: str | None = None
    isolate = isolate and target.backend.capabilities.compiled  # only generated code can trap
    if isolate:
        isolated, died = _isolated(target, dt, inputs, checks, extra_src)
    repeat = target.backend.capabilities.compiled and not isolate
    _prebuild(target, dt, inputs, checks if repeat else (), extra)
    for k, chk in enumerate(checks):
        try:
            expected = _evaluate(REFERENCE, dt, inputs, chk.expr, extra_ref)
        except Exception as e:  # the case itself is wrong: say so, never blame the backend
            problems.append(
                f"[{chk.expr}] REFERENCE failed to run the case (a harness bug):\n{format_exception(e)}"
            )
            continue
        if isolate:
            result = isolated[k]
            if result is None:
                problems.append(
                    f"[{chk.expr}] did not finish on {target.name}: {died}\nrepro:\n"
                    + _repro(target, dt, inputs, chk.expr, None, extra_src)
                )
                break
            got = result
        else:
            try:
                got = _evaluate(target.name, dt, inputs, chk.expr, extra)
                if repeat:
                    with other_thread_count() as how:
                        again = _evaluate(target.name, dt, inputs, chk.expr, extra)
                    if (why := rerun_differs(got, again, how)) is not None:
                        problems.append(
                            f"[{chk.expr}] {why}\nrepro (run it twice):\n"
                            + _repro(target, dt, inputs, chk.expr, None, extra_src)
                        )
                        continue
            except Exception as e:
                n = int(np.shape(inputs[0].value)[0]) if inputs and np.ndim(inputs[0].value) else 0
                small = _cut(inputs, [(i,) for i in range(min(4, n))]) if chk.elementwise and n else inputs
                problems.append(
                    f"[{chk.expr}] raised on {target.name}:\n{format_exception(e)}\nrepro:\n"
                    + _repro(target, dt, small, chk.expr, None, extra_src)
                )
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
        exp_text = None if shown is None else np.array2string(shown, separator=", ") + " over and over"
        problems.append(
            cmp.message(f"[{chk.expr}] differs from REFERENCE")
            + "\nrepro:\n"
            + _repro(target, dt, small, chk.expr, exp_text, extra_src)
        )
    if problems:
        raise Failure("\n\n".join(problems))


def check_equal(
    dt: DType,
    ulps: float = 0,
    signed_zero: bool = True,
    atol: Callable[[Sequence[np.ndarray]], np.ndarray] | None = None,
) -> Comparer:
    """A comparer: `compare` with these tolerances (`atol` computed from the inputs)."""

    def run(got: np.ndarray, expected: np.ndarray, ins: Sequence[np.ndarray]) -> Comparison:
        bound = atol(ins) if atol is not None else 0.0
        return compare(got, expected, dt, ulps, bound, signed_zero, ins if _flat(ins, expected) else ())

    return run


def _flat(ins: Sequence[np.ndarray], expected: np.ndarray) -> bool:
    return all(np.shape(i) == np.shape(expected) for i in ins)
