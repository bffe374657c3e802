"""Checks of random programs (strategies.py): forward and backward on the backend against REFERENCE, and
the dot-product test against float64 finite differences where it applies. A failure raises `Failure` with
the program as a runnable snippet; hypothesis then shrinks it to a minimal failing program.

Bounds scale with the rounding error the computation itself is prone to, not only with the size of its
result: a value may differ from REFERENCE's by `rtol·max|REFERENCE|` plus 8 times REFERENCE's own error
(its result in the program's dtype against the same program in float64), so cancellation in a sum of
large terms widens the bound exactly where the terms are large (docs/conformance.md). One run's error can
be small by luck (tanh(1.8e-5) is 2·sigmoid(3.7e-5) − 1, whose terms round at the scale of 1, yet
REFERENCE may land within 0.02% of the exact value): before a program fails, REFERENCE runs it again under
Monte Carlo arithmetic (`ReferenceBackend.rounding_noise`), and the largest error of those runs counts as
its own error too. A compiled backend runs each program twice (the second time with another thread count)
and must give the same bits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
from hypothesis import assume, currently_in_test_context, note

from uopgrad import Device, DType, dtypes
from uopgrad_conformance.forward import Failure, format_exception, rerun_differs
from uopgrad_conformance.gradcheck import GradInput, GradProgram, decisions_differ, forward64, run_env, vjp
from uopgrad_conformance.numerics import GRAD_TOL, fd_step, representable
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import Input, array_literal, execute, namespace, snippet
from uopgrad_conformance.strategies import Program
from uopgrad_conformance.target import REFERENCE, Target, tensor
from uopgrad_conformance.threads import other_thread_count

__all__ = ["FD_DTYPES", "check_program"]

FD_DTYPES = (dtypes.float32, dtypes.float64)  # finite differences against lower precisions are too loose


def _as_grad_program(prog: Program, inputs: Sequence[Input]) -> GradProgram:
    gins = tuple(
        GradInput(i.name, tuple(np.shape(i.value)), target=i.requires_grad, dtype=i.dtype) for i in inputs
    )
    return GradProgram(gins, prog.body())


def _forward(device: str, prog: Program, inputs: Sequence[Input]) -> list[np.ndarray]:
    ns = namespace(device, prog.dtype)
    for i in inputs:
        ns[i.name] = tensor(i.value, i.dtype, device)
    out = execute(prog.body(), ns)
    outs = list(out) if isinstance(out, tuple) else [out]
    return [o.numpy() for o in outs]


def _rel(
    a: np.ndarray,
    b: np.ndarray,
    exact: np.ndarray | None = None,
    tol: float = 0.0,
    noisy: Sequence[np.ndarray] = (),
) -> float:
    """Largest difference relative to the largest magnitude of `b` (inf when shapes or NaNs differ). With
    `exact` (b's program in float64), the difference is first reduced by the rounding error `b` itself
    shows (or one of the `noisy` runs of b's program shows), 8 times over: what remains is relative to the
    scale, as before."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a.shape != b.shape:
        return float("inf")
    with np.errstate(all="ignore"):
        if not np.array_equal(np.isnan(a64), np.isnan(b64)):
            return float("inf")
        scale = max(float(np.max(np.abs(b64), initial=0.0)), 1e-30)
        diff = float(np.max(np.abs(np.nan_to_num(a64) - np.nan_to_num(b64)), initial=0.0))
        if exact is not None and exact.shape == b.shape:
            own = max(
                float(np.max(np.abs(np.nan_to_num(r.astype(np.float64)) - np.nan_to_num(exact)), initial=0.0))
                for r in (b, *noisy)
                if r.shape == b.shape
            )
            diff = max(diff - 8 * own, 0.0) if diff > tol * scale else diff
        return diff / scale


def _fail(
    target: Target,
    prog: Program,
    inputs: Sequence[Input],
    what: str,
    v: Sequence[np.ndarray] | None = None,
    ref: Sequence[np.ndarray] | None = None,
) -> Failure:
    """The failure of a program: what differs, then the program as a snippet (REFERENCE's outputs as
    comments), with the gradient computation when backward was checked."""
    outs = ["out"] if len(prog.outputs) == 1 else [f"out[{k}]" for k in range(len(prog.outputs))]
    reads = []
    for k, o in enumerate(outs):
        shown = (
            ""
            if ref is None
            else "  # REFERENCE: "
            + np.array2string(np.asarray(ref[k]), precision=6, separator=", ", threshold=12).replace("\n", "")
        )
        reads.append(f"print({o}.numpy()){shown}")
    if v is None:
        tail = reads
    else:
        # the gradient is taken before the values are read (a read realizes them), unless the program
        # is one that reads first: then the repro reads first too, as the check did
        names = ", ".join(i.name for i in inputs if i.requires_grad)
        grad = [
            f"v{k} = Tensor({array_literal(x.astype(np.float32))}, device=dev, dtype={o}.dtype)"
            for k, (x, o) in enumerate(zip(v, outs))
        ]
        loss = " + ".join(f"({o} * v{k}).sum()" for k, o in enumerate(outs))
        grad += [f"grads = ({loss}).gradient({names})"]
        tail = [*reads, *grad] if prog.read_first else [*grad, *reads]
        tail += ["for g in grads:", "    print(g.numpy())"]
    return Failure(
        f"{what}\nrepro (the program hypothesis shrank to; run it with dev = 'REFERENCE' for the "
        f"expected values):\n" + snippet(target.name, prog.dtype, inputs, prog.body(), tail)
    )


def check_program(target: Target, prog: Program, record: Recorder, rng: np.random.Generator) -> None:
    """Forward (and, for float programs, backward and finite differences) on the backend."""
    inputs = prog.inputs()
    try:
        ref = _forward(REFERENCE, prog, inputs)
    except Exception as e:
        raise Failure(
            f"REFERENCE failed to run a generated program (a harness bug):\n"
            f"{format_exception(e)}\n{prog.body()}"
        ) from e
    if dtypes.is_float(prog.dtype):
        _check_float(target, prog, inputs, ref, record, rng)
        return
    try:
        got = _forward(target.name, prog, inputs)
        if target.backend.capabilities.compiled:
            with other_thread_count() as how:
                again = _forward(target.name, prog, inputs)
            for k, (g, a) in enumerate(zip(got, again)):
                if (why := rerun_differs(g, a, how)) is not None:
                    raise _fail(target, prog, inputs, f"output {k} {why}", None, ref)
    except Failure:
        raise
    except Exception as e:
        what = f"raised on {target.name}:\n{format_exception(e)}"
        raise _fail(target, prog, inputs, what, None, ref) from e
    for k, (g, r) in enumerate(zip(got, ref)):
        if not np.array_equal(g, r):
            raise _fail(
                target,
                prog,
                inputs,
                f"output {k} differs from REFERENCE:\n  {target.name}: {g}\n  REFERENCE: {r}",
                None,
                ref,
            )


def _check_float(
    target: Target,
    prog: Program,
    inputs: Sequence[Input],
    ref: Sequence[np.ndarray],
    record: Recorder,
    rng: np.random.Generator,
) -> None:
    # programs that overflow or produce NaN say nothing about gradients: hypothesis draws others
    tame = all(np.all(np.isfinite(r.astype(np.float64))) for r in ref) and all(
        float(np.max(np.abs(r.astype(np.float64)), initial=0.0)) < 1e4 for r in ref
    )
    if currently_in_test_context():
        assume(tame)
    elif not tame:
        raise Failure(f"a fixed program overflows on REFERENCE (a harness bug):\n{prog.body()}")
    gprog = _as_grad_program(prog, inputs)
    v = [np.asarray(representable(rng.standard_normal(r.shape), prog.dtype), dtype=np.float64) for r in ref]
    rf = prog.read_first
    ref_outs, ref_grads = vjp(gprog, gprog.body, inputs, run_env(REFERENCE, prog.dtype), v, rf)
    exact_outs, exact_grads = vjp(gprog, gprog.body, inputs, run_env(REFERENCE, dtypes.float64), v, rf)
    env = run_env(target.name, prog.dtype, target.second)
    try:
        outs, grads = vjp(gprog, gprog.body, inputs, env, v, rf)
        if target.backend.capabilities.compiled:
            with other_thread_count() as how:
                again = vjp(gprog, gprog.body, inputs, env, v, rf)
            for nm, a, b in zip(_names(outs, inputs), [*outs, *grads], [*again[0], *again[1]]):
                if (why := rerun_differs(a, b, how)) is not None:
                    raise _fail(target, prog, inputs, f"{nm} {why}", v, ref)
    except Failure:
        raise
    except Exception as e:
        raise _fail(
            target,
            prog,
            inputs,
            f"forward or backward raised on {target.name}:\n{format_exception(e)}",
            v,
            ref,
        ) from e
    fd_seed = int(rng.integers(2**63))  # the same directions when the check is repeated
    runs = _Runs(outs, grads, ref_outs, ref_grads, exact_outs, exact_grads)
    errors, problems = _judge(target, prog, gprog, inputs, v, runs, fd_seed)
    if problems:  # one run's error may be small by luck: judge again with REFERENCE's Monte Carlo runs
        runs.noisy = _monte_carlo(gprog, inputs, prog.dtype, v, rf)
        errors, problems = _judge(target, prog, gprog, inputs, v, runs, fd_seed)
    for err in errors:
        record.error(err)
    if problems:
        raise _fail(target, prog, inputs, "\n".join(problems), v, ref)


@dataclass
class _Runs:
    """A program's outputs and gradients on the backend, REFERENCE in its dtype and in float64, and
    REFERENCE's Monte Carlo runs (per output and gradient; empty until a first judgement fails)."""

    outs: list[np.ndarray]
    grads: list[np.ndarray]
    ref_outs: list[np.ndarray]
    ref_grads: list[np.ndarray]
    exact_outs: list[np.ndarray]
    exact_grads: list[np.ndarray]
    noisy: list[list[np.ndarray]] = field(default_factory=list)

    def rows(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]]:
        """(backend, REFERENCE, float64, Monte Carlo runs) for every output, then every gradient."""
        n = len(self.outs) + len(self.grads)
        return list(
            zip(
                [*self.outs, *self.grads],
                [*self.ref_outs, *self.ref_grads],
                [*self.exact_outs, *self.exact_grads],
                self.noisy or [[]] * n,
            )
        )


def _judge(
    target: Target,
    prog: Program,
    gprog: GradProgram,
    inputs: Sequence[Input],
    v: Sequence[np.ndarray],
    runs: _Runs,
    fd_seed: int,
) -> tuple[list[float], list[str]]:
    """The errors beyond the bounds (for the summary) and the problems found: outputs and gradients against
    REFERENCE, then the dot-product test."""
    tol = GRAD_TOL[prog.dtype].rtol
    errors, problems = [], []
    for nm, (got, want, exact, noisy) in zip(_names(runs.outs, inputs), runs.rows()):
        errors.append(rel := _rel(got, want, exact, tol, noisy))
        if rel > tol:
            problems.append(
                f"{nm} differs from REFERENCE (relative {rel:.3g} beyond REFERENCE's own "
                f"rounding error):\n  {target.name}: {got}\n  REFERENCE: {want}"
            )
    if not problems and prog.smooth and prog.dtype in FD_DTYPES:
        own = [
            np.max([np.abs(r - e) for r in (want, *noisy)], axis=0)
            for _, want, e, noisy in runs.rows()[len(runs.outs) :]
        ]
        fd = _finite_differences(
            target,
            gprog,
            inputs,
            v,
            runs.grads,
            tol,
            np.random.default_rng(fd_seed),
            own,
            _fd_noise(gprog, inputs, prog.dtype, runs.ref_outs, runs.exact_outs),
        )
        if fd is not None:
            errors.append(fd[0])
            problems += fd[1]
    return errors, problems


_MC_RUNS = 4


def _monte_carlo(
    gprog: GradProgram, inputs: Sequence[Input], dt: DType, v: Sequence[np.ndarray], read_first: bool
) -> list[list[np.ndarray]]:
    """Per output and gradient, its values in `_MC_RUNS` REFERENCE runs under Monte Carlo arithmetic
    (`ReferenceBackend.rounding_noise`, seeded so that a failure reproduces)."""
    noise: Callable[[np.random.Generator], AbstractContextManager[None]] = Device[REFERENCE].rounding_noise  # type: ignore[attr-defined]
    runs: list[list[np.ndarray]] = []
    for k in range(_MC_RUNS):
        with noise(np.random.default_rng(k)):
            o, g = vjp(gprog, gprog.body, inputs, run_env(REFERENCE, dt), v, read_first)
        runs.append([*o, *g])
    return [list(vals) for vals in zip(*runs)]


def _names(outs: Sequence[np.ndarray], inputs: Sequence[Input]) -> list[str]:
    return [f"output {k}" for k in range(len(outs))] + [
        f"gradient of {i.name}" for i in inputs if i.requires_grad
    ]


_EPS32, _EPS64 = 2.0**-24, 2.0**-53


def _fd_noise(
    gprog: GradProgram,
    inputs: Sequence[Input],
    dt: DType,
    ref_outs: Sequence[np.ndarray],
    exact_outs: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """Per output element, the rounding error its float64 evaluation is prone to: eps64 times the larger
    of |f| and the float32 evaluation's error over eps32 (Σ|terms| where terms cancel: (√(x²+1))² − x² is 1,
    but its terms round at the scale of x² + 1). The float32 run is REFERENCE's own (the program's, for a
    float32 program)."""
    if dt == dtypes.float32:
        outs32 = [np.asarray(o, dtype=np.float64) for o in ref_outs]
    else:
        x64 = [np.asarray(i.value, dtype=np.float64) for i in inputs]
        outs32 = forward64(gprog, inputs, run_env(REFERENCE, dtypes.float32), x64)
    with np.errstate(all="ignore"):
        return [
            _EPS64 * np.maximum(np.abs(e), np.nan_to_num(np.abs(o - e)) / _EPS32)
            for o, e in zip(outs32, exact_outs)
        ]


def _finite_differences(
    target: Target,
    gprog: GradProgram,
    inputs: Sequence[Input],
    v: Sequence[np.ndarray],
    grads: Sequence[np.ndarray],
    tol: float,
    rng: np.random.Generator,
    own: Sequence[np.ndarray],
    noise: Sequence[np.ndarray],
) -> tuple[float, list[str]] | None:
    """The dot-product test in float64, unless the program's branch decisions change near its inputs.
    The bound widens by 8·<own, |u|>, `own` being REFERENCE's own rounding error of each gradient, and by
    8·<|v|, noise>/h, the rounding of the two float64 evaluations the difference quotient divides by 2h
    (`_fd_noise`): a gradient of 0 or 1e-4 is checked against what float64 can resolve, not a bound of 0.
    Returns (the error beyond the slack, relative to the scale; the problem, if any), None when skipped."""
    x64 = [np.asarray(i.value, dtype=np.float64) for i in inputs]
    u = [rng.standard_normal(x.shape) if i.requires_grad else np.zeros(x.shape) for x, i in zip(x64, inputs)]
    h = float(fd_step(np.array(max(float(np.max(np.abs(x), initial=1.0)) for x in x64))))
    plus = [x + h * d for x, d in zip(x64, u)]
    minus = [x - h * d for x, d in zip(x64, u)]
    if (why := decisions_differ(gprog, inputs, [x64, plus, minus])) is not None:
        if currently_in_test_context():
            note(f"finite differences skipped: {why}")
        return None
    env = run_env(target.fd_device, dtypes.float64, target.second)
    fp, fm = forward64(gprog, inputs, env, plus), forward64(gprog, inputs, env, minus)
    lhs = sum(float(np.sum(vi * (p - m) / (2 * h))) for vi, p, m in zip(v, fp, fm))
    tu = [d for d, i in zip(u, inputs) if i.requires_grad]
    rhs = sum(float(np.sum(g * d)) for g, d in zip(grads, tu))
    scale = max(sum(float(np.sum(np.abs(g * d))) for g, d in zip(grads, tu)), 1e-30)
    slack = 8 * sum(float(np.sum(o * np.abs(d))) for o, d in zip(own, tu))
    slack += 8 * sum(float(np.sum(np.abs(vi) * n)) for vi, n in zip(v, noise)) / h
    error = max(abs(lhs - rhs) - slack, 0.0) / scale
    if abs(lhs - rhs) > tol * scale + slack:
        return error, [
            f"dot-product test: <v, J·u> by float64 finite differences is {lhs:.9g}, <vjp(v), u> "
            f"is {rhs:.9g} (relative {abs(lhs - rhs) / scale:.3g} > {tol:g})"
        ]
    return error, []
