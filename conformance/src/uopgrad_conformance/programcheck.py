"""Checks of random programs (strategies.py): forward and backward on the backend against REFERENCE, and
the dot-product test against float64 finite differences where it applies. A failure raises `Failure` with
the program as a runnable snippet; hypothesis then shrinks it to a minimal failing program."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import assume, note

from uopgrad import dtypes
from uopgrad_conformance.forward import Failure, format_exception
from uopgrad_conformance.gradcheck import GradInput, GradProgram, decisions_differ, forward64, run_env, vjp
from uopgrad_conformance.numerics import GRAD_TOL, fd_step, representable
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import Input, array_literal, execute, namespace, snippet
from uopgrad_conformance.strategies import Program
from uopgrad_conformance.target import REFERENCE, Target, tensor

__all__ = ["FD_DTYPES", "check_program"]

FD_DTYPES = (dtypes.float32, dtypes.float64)  # finite differences against lower precisions are too loose


def _as_grad_program(prog: Program, inputs: Sequence[Input]) -> GradProgram:
    gins = tuple(GradInput(i.name, tuple(np.shape(i.value)), target=i.requires_grad, dtype=i.dtype)
                 for i in inputs)
    return GradProgram(gins, prog.body())


def _forward(device: str, prog: Program, inputs: Sequence[Input]) -> list[np.ndarray]:
    ns = namespace(device, prog.dtype)
    for i in inputs:
        ns[i.name] = tensor(i.value, i.dtype, device)
    out = execute(prog.body(), ns)
    outs = list(out) if isinstance(out, tuple) else [out]
    return [o.numpy() for o in outs]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference relative to the largest magnitude of `b` (inf when shapes or NaNs differ)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a.shape != b.shape:
        return float("inf")
    with np.errstate(all="ignore"):
        if not np.array_equal(np.isnan(a64), np.isnan(b64)):
            return float("inf")
        scale = max(float(np.max(np.abs(b64), initial=0.0)), 1e-30)
        return float(np.max(np.abs(np.nan_to_num(a64) - np.nan_to_num(b64)), initial=0.0)) / scale


def _fail(target: Target, prog: Program, inputs: Sequence[Input], what: str,
          v: Sequence[np.ndarray] | None = None, ref: Sequence[np.ndarray] | None = None) -> Failure:
    """The failure of a program: what differs, then the program as a snippet (REFERENCE's outputs as
    comments), with the gradient computation when backward was checked."""
    outs = ["out"] if len(prog.outputs) == 1 else [f"out[{k}]" for k in range(len(prog.outputs))]
    tail = []
    for k, o in enumerate(outs):
        shown = "" if ref is None else "  # REFERENCE: " + np.array2string(
            np.asarray(ref[k]), precision=6, separator=", ", threshold=12).replace("\n", "")
        tail.append(f"print({o}.numpy()){shown}")
    if v is not None:
        names = ", ".join(i.name for i in inputs if i.requires_grad)
        tail += [f"v{k} = Tensor({array_literal(x.astype(np.float32))}, device=dev, dtype={o}.dtype)"
                 for k, (x, o) in enumerate(zip(v, outs))]
        loss = " + ".join(f"({o} * v{k}).sum()" for k, o in enumerate(outs))
        tail += [f"for g in ({loss}).gradient({names}):", "    print(g.numpy())"]
    return Failure(f"{what}\nrepro (the program hypothesis shrank to; run it with dev = 'REFERENCE' for the "
                   f"expected values):\n" + snippet(target.name, prog.dtype, inputs, prog.body(), tail))


def check_program(target: Target, prog: Program, record: Recorder, rng: np.random.Generator) -> None:
    """Forward (and, for float programs, backward and finite differences) on the backend."""
    inputs = prog.inputs()
    try:
        ref = _forward(REFERENCE, prog, inputs)
    except Exception as e:
        raise Failure(f"REFERENCE failed to run a generated program (a harness bug):\n"
                      f"{format_exception(e)}\n{prog.body()}") from e
    if dtypes.is_float(prog.dtype):
        _check_float(target, prog, inputs, ref, record, rng)
        return
    try:
        got = _forward(target.name, prog, inputs)
    except Exception as e:
        what = f"raised on {target.name}:\n{format_exception(e)}"
        raise _fail(target, prog, inputs, what, None, ref) from e
    for k, (g, r) in enumerate(zip(got, ref)):
        if not np.array_equal(g, r):
            raise _fail(target, prog, inputs, f"output {k} differs from REFERENCE:\n  {target.name}: {g}\n"
                        f"  REFERENCE: {r}", None, ref)


def _check_float(target: Target, prog: Program, inputs: Sequence[Input], ref: Sequence[np.ndarray],
                 record: Recorder, rng: np.random.Generator) -> None:
    # programs that overflow or produce NaN say nothing about gradients: hypothesis draws others
    assume(all(np.all(np.isfinite(r.astype(np.float64))) for r in ref))
    assume(all(float(np.max(np.abs(r.astype(np.float64)), initial=0.0)) < 1e4 for r in ref))
    gprog = _as_grad_program(prog, inputs)
    v = [np.asarray(representable(rng.standard_normal(r.shape), prog.dtype), dtype=np.float64) for r in ref]
    tol = GRAD_TOL[prog.dtype].rtol
    ref_outs, ref_grads = vjp(gprog, gprog.body, inputs, run_env(REFERENCE, prog.dtype), v)
    try:
        outs, grads = vjp(gprog, gprog.body, inputs, run_env(target.name, prog.dtype, target.second), v)
    except Exception as e:
        raise _fail(target, prog, inputs, f"forward or backward raised on {target.name}:\n"
                    f"{format_exception(e)}", v, ref) from e
    names = [f"output {k}" for k in range(len(outs))] + [f"gradient of {i.name}" for i in inputs
                                                        if i.requires_grad]
    problems = []
    for nm, got, want in zip(names, [*outs, *grads], [*ref_outs, *ref_grads]):
        rel = _rel(got, want)
        record.error(rel)
        if rel > tol:
            problems.append(f"{nm} differs from REFERENCE (relative {rel:.3g}):\n  {target.name}: {got}\n"
                            f"  REFERENCE: {want}")
    if not problems and prog.smooth and prog.dtype in FD_DTYPES:
        problems += _finite_differences(target, gprog, inputs, v, grads, tol, rng, record)
    if problems:
        raise _fail(target, prog, inputs, "\n".join(problems), v, ref)


def _finite_differences(target: Target, gprog: GradProgram, inputs: Sequence[Input], v: Sequence[np.ndarray],
                        grads: Sequence[np.ndarray], tol: float, rng: np.random.Generator,
                        record: Recorder) -> list[str]:
    """The dot-product test in float64, unless the program's branch decisions change near its inputs."""
    x64 = [np.asarray(i.value, dtype=np.float64) for i in inputs]
    u = [rng.standard_normal(x.shape) if i.requires_grad else np.zeros(x.shape) for x, i in zip(x64, inputs)]
    h = float(fd_step(np.array(max(float(np.max(np.abs(x), initial=1.0)) for x in x64))))
    plus = [x + h * d for x, d in zip(x64, u)]
    minus = [x - h * d for x, d in zip(x64, u)]
    if (why := decisions_differ(gprog, inputs, [x64, plus, minus])) is not None:
        note(f"finite differences skipped: {why}")
        return []
    env = run_env(target.fd_device, dtypes.float64, target.second)
    fp, fm = forward64(gprog, inputs, env, plus), forward64(gprog, inputs, env, minus)
    lhs = sum(float(np.sum(vi * (p - m) / (2 * h))) for vi, p, m in zip(v, fp, fm))
    tu = [d for d, i in zip(u, inputs) if i.requires_grad]
    rhs = sum(float(np.sum(g * d)) for g, d in zip(grads, tu))
    scale = max(sum(float(np.sum(np.abs(g * d))) for g, d in zip(grads, tu)), 1e-30)
    record.error(abs(lhs - rhs) / scale)
    if abs(lhs - rhs) > tol * scale:
        return [f"dot-product test: <v, J·u> by float64 finite differences is {lhs:.9g}, <vjp(v), u> is "
                f"{rhs:.9g} (relative {abs(lhs - rhs) / scale:.3g} > {tol:g})"]
    return []
