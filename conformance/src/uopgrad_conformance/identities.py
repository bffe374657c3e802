"""Generated programs whose answer is an identity (docs/conformance.md "What it checks" 7).

- Zero-size reductions (`empty_reductions`): sum, prod, all, any, mean and logsumexp over axes that include
  an empty one give their identities, as numpy does: 0, 1, True, False, NaN (0/0), -inf; max and min over
  other axes of a tensor with an empty dimension give an empty result, and over an empty axis raise
  `EmptyReduceError` (docs/semantics.md §5.1). The inputs are an empty buffer (from numpy) and an empty
  slice of a full one (a loop of no trips over a buffer that has elements), and a result may be used again
  in the same program (`r + y`), so the identity also reaches a consumer.
- Equal-valued leaves (`equal_leaves`): two tensors made the same way with the same value (`Tensor(3.0)`, a
  list, `ones`, `full`, a numpy scalar), read or realized, then `requires_grad` set afterwards (as an
  optimiser does), are two gradient targets: each gets its own gradient, the closed form
  `c·p·x^(p-1)` of its own term `c·x^p`; and an assign into one leaves an equal one alone.

Each program is source text run on the backend; a failure prints it as a repro with numpy's (or the closed
form's) values as comments."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from uopgrad import DType, Tensor, dtypes
from uopgrad.errors import EmptyReduceError
from uopgrad_conformance.forward import Failure, format_exception
from uopgrad_conformance.numerics import compare, host_dtype, name
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import array_literal, execute, namespace, snippet
from uopgrad_conformance.target import Target

__all__ = [
    "EmptyReduction",
    "LeavesProgram",
    "check_empty",
    "check_leaves",
    "empty_reductions",
    "equal_leaves",
]

# op -> numpy's result over the same axes (the identity where an axis is empty)
NUMPY = {
    "sum": "np.sum",
    "prod": "np.prod",
    "all": "np.all",
    "any": "np.any",
    "mean": "np.mean",
    "logsumexp": "_logsumexp",
    "max": "np.max",
    "min": "np.min",
}
NO_IDENTITY = ("max", "min")


def _logsumexp(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:  # noqa: ANN401  (numpy's axis)
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.sum(np.exp(a.astype(np.float64)), axis=axis, keepdims=keepdims)))


@dataclass(frozen=True)
class EmptyReduction:
    """Two tensors of `shape` with an empty dimension, `x` an empty buffer and `xs` an empty slice of a full
    one, and a few reductions of them (the first of x, the second of xs), each maybe used by `+ y`."""

    dtype: DType
    shape: tuple[int, ...]
    # (op, axes, keepdim, used by `+ y`, the input: "x" or "xs")
    reductions: tuple[tuple[str, tuple[int, ...] | None, bool, bool, str], ...]

    def x_lines(self) -> list[str]:
        """The two inputs: an empty buffer and an empty slice of a full one."""
        np_dt = f"np.{host_dtype(self.dtype).name}"
        full = tuple(s if s else 3 for s in self.shape)
        cut = ", ".join("1:1" if s == 0 else ":" for s in self.shape)
        return [
            f"x = Tensor(np.zeros({self.shape}, dtype={np_dt}), device=dev, dtype=dt)",
            f"xs = Tensor(np.ones({full}, dtype={np_dt}), device=dev, dtype=dt)[{cut}]",
        ]

    def _y(self, k: int, shape: tuple[int, ...]) -> np.ndarray:
        return (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) + k).astype(
            np.float32 if dtypes.is_float(self.dtype) else np.int32
        )

    def body(self) -> str:
        """The program; binds `out` to the tuple of results."""
        lines, outs = self.x_lines(), []
        for k, (op, axes, keep, use, src) in enumerate(self.reductions):
            if op in NO_IDENTITY and _empty_axis(self.shape, axes):
                continue
            line = f"r{k} = {src}.{op}({_args(axes, keep)})"
            if use:
                y = self._y(k, self.result_shape(axes, keep))
                line += f" + Tensor({array_literal(y)}, device=dev)"
            lines.append(line)
            outs.append(f"r{k}")
        lines.append(f"out = ({', '.join(outs)},)")
        return "\n".join(lines)

    def result_shape(self, axes: tuple[int, ...] | None, keep: bool) -> tuple[int, ...]:
        """The shape of a reduction over `axes`."""
        red = range(len(self.shape)) if axes is None else axes
        return tuple(1 if i in red else s for i, s in enumerate(self.shape) if keep or i not in red)

    def oracle(self) -> list[np.ndarray]:
        """numpy's result of every reduction with a value (the identity where an axis is empty)."""
        a = np.zeros(self.shape, host_dtype(self.dtype))
        out = []
        for k, (op, axes, keep, use, _) in enumerate(self.reductions):
            if op in NO_IDENTITY and _empty_axis(self.shape, axes):
                continue
            fn = _logsumexp if op == "logsumexp" else getattr(np, op)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing
                r = np.asarray(fn(a, axis=axes, keepdims=keep))
            if use:
                r = r + self._y(k, self.result_shape(axes, keep))
            out.append(r)
        return out

    def raising(self) -> list[str]:
        """The max/min over an empty axis: each must raise EmptyReduceError."""
        return [
            f"{src}.{op}({_args(axes, keep)})"
            for op, axes, keep, _, src in self.reductions
            if op in NO_IDENTITY and _empty_axis(self.shape, axes)
        ]

    def __repr__(self) -> str:
        return f"<empty reductions ({name(self.dtype)})>\n{self.body()}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # noqa: ANN401  (how hypothesis prints a draw)
        p.text(repr(self))


def _args(axes: tuple[int, ...] | None, keep: bool) -> str:
    text = "" if axes is None else repr(axes[0] if len(axes) == 1 else axes)
    return text + (", keepdim=True" if keep else "") if text else ("keepdim=True" if keep else "")


def _empty_axis(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> bool:
    return any(shape[a] == 0 for a in (range(len(shape)) if axes is None else axes))


@st.composite
def empty_reductions(draw: st.DrawFn, dt: DType) -> EmptyReduction:
    """A tensor of rank 1 to 3 with one empty dimension (sizes up to 3) and 2 to 5 reductions of it, the
    first one with an identity over the empty axis; the first reduces `x`, the second `xs`."""
    shape = list(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    zero = draw(st.integers(0, len(shape) - 1))
    shape[zero] = 0
    ops = [o for o in NUMPY if dtypes.is_float(dt) or o not in ("logsumexp",)]
    reds = []
    for k in range(draw(st.integers(2, 5))):
        op = draw(st.sampled_from([o for o in ops if o not in NO_IDENTITY] if k == 0 else ops))
        if k == 0 or draw(st.booleans()):  # over the empty axis (and maybe others), or all of them
            axes = (
                None
                if draw(st.booleans())
                else tuple(sorted({zero, *draw(st.lists(st.integers(0, len(shape) - 1), max_size=2))}))
            )
        else:
            axes = tuple(sorted(set(draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=2)))))
        keep = draw(st.booleans())
        use = op not in ("all", "any") and draw(st.booleans())
        src = "x" if k == 0 else "xs" if k == 1 else draw(st.sampled_from(["x", "xs"]))
        reds.append((op, axes, keep, use, src))
    return EmptyReduction(dt, tuple(shape), tuple(reds))


def _differences(
    record: Recorder, oracle: str, results: list[tuple[str, np.ndarray, np.ndarray, float]]
) -> list[str]:
    """A message per (what, got, want, atol) that differs from the oracle (each error is recorded)."""
    problems = []
    for what, g, w, atol in results:
        cmp = compare(g, w, dtypes.float64, 0, atol, False, label=oracle)
        record.error(cmp.worst_rel)
        if not cmp.ok:
            problems.append(cmp.message(what))
    return problems


def check_empty(target: Target, prog: EmptyReduction, record: Recorder) -> None:
    """The reductions on the backend against numpy's identities (max/min over an empty axis must raise)."""
    ns = namespace(target.name, prog.dtype)
    want = prog.oracle()
    raised = []
    try:
        got = [np.asarray(r.numpy(), dtype=np.float64) for r in execute(prog.body(), ns)]
        for expr in prog.raising():
            try:
                execute(f"out = {expr}", ns)
                raised.append(f"{expr} gave a value: an empty reduced axis has no maximum (EmptyReduceError)")
            except EmptyReduceError:
                pass
    except Exception as e:
        raise Failure(
            f"the empty reductions raised on {target.name}:\n{format_exception(e)}\nrepro:\n"
            + _repro_empty(target, prog, want)
        ) from e
    problems = raised + _differences(
        record,
        "numpy",
        [
            (f"result {k} differs from numpy's identity", g, w.astype(np.float64), 0.0)
            for k, (g, w) in enumerate(zip(got, want))
        ],
    )
    if problems:
        raise Failure("\n".join(problems) + "\nrepro:\n" + _repro_empty(target, prog, want))


def _repro_empty(target: Target, prog: EmptyReduction, want: list[np.ndarray]) -> str:
    body, outs = prog.body().rsplit("\nout = ", 1)
    names = [n.strip() for n in outs.strip("(),").split(",") if n.strip()]
    tail = [f"print({n}.numpy().tolist())  # numpy: {w.tolist()}" for n, w in zip(names, want)]
    tail += [f"{expr}  # must raise EmptyReduceError" for expr in prog.raising()]
    return snippet(target.name, prog.dtype, [], body, tail)


# ---------------------------------------------------------------------- equal-valued leaves
MAKES = {
    "list": "Tensor([{v}, {w}], device=dev, dtype=dt)",
    "scalar": "Tensor({v}, device=dev, dtype=dt)",
    "numpy scalar": "Tensor(np.{np}({v}), device=dev, dtype=dt)",
    "ones": "Tensor.ones(2, device=dev, dtype=dt)",
    "full": "Tensor.full((2,), {v}, device=dev, dtype=dt)",
}
READS = ("none", "numpy", "realize")


@dataclass(frozen=True)
class LeavesProgram:
    """Pairs of equal leaves, one pair per way of making them: (make, value, read, coefficients and powers
    of the two terms, how requires_grad is set)."""

    dtype: DType
    pairs: tuple[tuple[str, float, str, tuple[int, int], tuple[int, int], str], ...]
    assign: bool  # also: an assign into a realized scalar leaves an equal one alone

    def _make(self, make: str, v: float) -> str:
        return MAKES[make].format(v=repr(v), w=repr(v + 1), np=host_dtype(self.dtype).name)

    def values(self, make: str, v: float) -> np.ndarray:
        """A leaf's value, as `make` builds it from `v`."""
        return np.asarray(
            {"list": [v, v + 1], "scalar": v, "numpy scalar": v, "ones": [1.0, 1.0], "full": [v, v]}[make],
            dtype=np.float64,
        )

    def body(self) -> str:
        """The program; binds `out` to every leaf's gradient, a then b of each pair (then the assign's)."""
        lines, outs, terms = [], [], []
        for k, (make, v, read, coef, power, how) in enumerate(self.pairs):
            for leaf in (f"a{k}", f"b{k}"):
                lines.append(f"{leaf} = {self._make(make, v)}")
            if read != "none":
                lines.append(
                    f"_ = a{k}.numpy(), b{k}.numpy()"
                    if read == "numpy"
                    else f"a{k}.realize(); b{k}.realize()"
                )
            for leaf in (f"a{k}", f"b{k}"):
                lines.append(
                    f"{leaf}.requires_grad = True" if how == "attribute" else f"{leaf}.requires_grad_()"
                )
            for leaf, c, p in ((f"a{k}", coef[0], power[0]), (f"b{k}", coef[1], power[1])):
                terms.append(f"({' * '.join([leaf] * p)} * {c}).sum()")
            outs += [f"a{k}.grad", f"b{k}.grad"]
        lines.append("loss = " + " + ".join(terms))
        lines.append("loss.backward()")
        if self.assign:
            lines += [
                "c, e = Tensor(3.0, device=dev, dtype=dt), Tensor(3.0, device=dev, dtype=dt)",
                "c.realize(); e.realize()",
                "c.assign(Tensor(5.0, device=dev, dtype=dt))",
                "c += 1",
            ]
            outs += ["c", "e"]
        lines.append(f"out = ({', '.join(outs)},)")
        return "\n".join(lines)

    def names(self) -> list[str]:
        """What `out` holds: each pair's two gradients, then the assign's two tensors."""
        grads = [f"{x}{k}.grad" for k in range(len(self.pairs)) for x in "ab"]
        return grads + (["c", "e"] if self.assign else [])

    def oracle(self) -> list[np.ndarray]:
        """Each leaf's gradient c·p·x^(p-1) (its own term only), then the assign's 6 and 3."""
        out = []
        for make, v, _, coef, power, _ in self.pairs:
            x = self.values(make, v)
            out += [np.asarray(c * p * x ** (p - 1), dtype=np.float64) for c, p in zip(coef, power)]
        return out + ([np.asarray(6.0), np.asarray(3.0)] if self.assign else [])

    def __repr__(self) -> str:
        return f"<equal leaves ({name(self.dtype)})>\n{self.body()}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # noqa: ANN401  (how hypothesis prints a draw)
        p.text(repr(self))


@st.composite
def equal_leaves(draw: st.DrawFn, dt: DType) -> LeavesProgram:
    """One pair of equal leaves per way of making them (`MAKES`, in that order), with its own value, read,
    coefficients (different for the two leaves) and powers (1 or 2)."""
    pairs = []
    for make in MAKES:
        v = float(draw(st.integers(-4, 4))) + draw(st.sampled_from([0.0, 0.5]))
        c = draw(st.lists(st.integers(1, 9), min_size=2, max_size=2, unique=True))
        p = draw(st.lists(st.integers(1, 2), min_size=2, max_size=2))
        pairs.append(
            (
                make,
                v,
                draw(st.sampled_from(READS)),
                (c[0], c[1]),
                (p[0], p[1]),
                draw(st.sampled_from(["attribute", "requires_grad_()"])),
            )
        )
    return LeavesProgram(dt, tuple(pairs), draw(st.booleans()))


def check_leaves(target: Target, prog: LeavesProgram, record: Recorder) -> None:
    """Each leaf's gradient on the backend against its closed form (and the assign's values)."""
    want = prog.oracle()
    try:
        out = execute(prog.body(), namespace(target.name, prog.dtype))
        got = [None if t is None else np.asarray(Tensor.numpy(t), dtype=np.float64) for t in out]
    except Exception as e:
        raise Failure(
            f"the equal-leaves program raised on {target.name}:\n{format_exception(e)}\nrepro:\n"
            + _repro_leaves(target, prog, want)
        ) from e
    names = prog.names()
    problems = [f"{n} is None: the leaf got no gradient of its own" for n, g in zip(names, got) if g is None]
    problems += _differences(
        record,
        "closed form",
        [
            (
                f"{n} differs from the closed form of its own term",
                g,
                w,
                1e-6 * float(np.max(np.abs(w), initial=1.0)),
            )
            for n, g, w in zip(names, got, want)
            if g is not None
        ],
    )
    if problems:
        raise Failure("\n".join(problems) + "\nrepro:\n" + _repro_leaves(target, prog, want))


def _repro_leaves(target: Target, prog: LeavesProgram, want: list[np.ndarray]) -> str:
    body = prog.body().rsplit("\nout = ", 1)[0]
    names = prog.names()
    tail = [f"print({n}.numpy().tolist())  # the closed form: {w.tolist()}" for n, w in zip(names, want)]
    return snippet(target.name, prog.dtype, [], body, tail)
