"""Generated TinyJit replays (docs/conformance.md "What it checks" 7): a step function wrapped in `TinyJit`
is called 3 to 5 times (the first call runs it, the second captures its kernels, the rest replay them),
each call's result read before the next, as a training loop does.

- `random`: the step draws random values (`rand`, `randn`, `uniform`, `randint`, a dropout mask) and adds
  its input. The draws must be new on every replay, the ones a plain call makes from the same seed: the
  oracle is the same step called without TinyJit on REFERENCE after the same `Tensor.manual_seed`.
- `empty_like`: the step assigns into a fresh `Tensor.empty_like(x)` (or `Tensor.empty`) and returns it;
  every call must return its own input's values (numpy).
- `variable offset`: the step writes one row of a tensor at a bound variable's offset (`t[v:v+1] = a`,
  `t.shrink(((v, v+1), None)).assign(a)`, `t[v:v+1] += a`), each call at another row; after each call the
  tensor must hold what numpy's writes give.

A failure prints the whole program (the step on one line, the calls, the values expected as comments)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from uopgrad import dtypes
from uopgrad_conformance.forward import Failure, format_exception
from uopgrad_conformance.numerics import compare
from uopgrad_conformance.report import Recorder
from uopgrad_conformance.repro import array_literal, execute, namespace, snippet
from uopgrad_conformance.target import REFERENCE, Target

__all__ = ["ROWS", "JitProgram", "check_jit", "jit_programs"]

ROWS = ("random", "empty_like", "variable offset")
DT = dtypes.float32
DRAWS = {
    "rand": "Tensor.rand({shape}, device=dev, dtype=dt)",
    "randn": "Tensor.randn({shape}, device=dev, dtype=dt)",
    "uniform": "Tensor.uniform({shape}, low=-2.0, high=3.0, device=dev, dtype=dt)",
    "randint": "Tensor.randint({shape}, low=0, high=1000, device=dev).cast(dt)",
    "dropout": "Tensor.ones({shape}, device=dev, dtype=dt).contiguous().dropout(0.5)",
}
FILLS = {"x * 3 + 1": "x * 3 + 1", "x.flip(0)": "np.flip(x, 0)", "x - x.sum()": "x - x.sum()"}
WRITES = {
    "setitem": "t[v:v + 1] = a",
    "shrink assign": "t.shrink(((v, v + 1), None)).assign(a)",
    "iadd": "t[v:v + 1] += a",
}


@dataclass(frozen=True)
class JitProgram:
    """A step, how many calls, and what each call passes (`args`: one array per call; `rows` the variable
    offsets of `variable offset`)."""

    row: str
    shape: tuple[int, ...]
    kind: str  # a key of DRAWS, FILLS or WRITES
    args: tuple[np.ndarray, ...]
    rows: tuple[int, ...] = ()
    seed: int = 0
    empty: str = "empty_like"  # `empty_like`: Tensor.empty_like(x) or Tensor.empty(*shape)

    def step(self) -> str:
        """The step's definition, on one line."""
        shape = ", ".join(map(str, self.shape))
        if self.row == "random":
            draw = DRAWS[self.kind].format(shape=shape)
            if self.kind == "dropout":
                return f"def step(x):\n    with Tensor.train(): return ({draw} + x).realize()"
            return f"def step(x): return ({draw} + x).realize()"
        if self.row == "empty_like":
            make = (
                "Tensor.empty_like(x)"
                if self.empty == "empty_like"
                else f"Tensor.empty({shape}, device=dev, dtype=dt)"
            )
            return f"def step(x): out = {make}; out.assign({self.kind}); return out.realize()"
        return f"def step(t, a, v): {WRITES[self.kind]}; return t.realize()"

    def body(self, jit: bool = True) -> str:
        """The program: the step, wrapped in TinyJit (or not), called once per argument; binds `out` to the
        list of what each call returned (read right after it)."""
        lines = [
            "from uopgrad import TinyJit",
            self.step(),
            "f = TinyJit(step)" if jit else "f = step",
            "outs = []",
        ]
        if self.row == "random":
            lines.insert(1, f"Tensor.manual_seed({self.seed})")
        if self.row == "variable offset":
            shape = ", ".join(map(str, self.shape))
            lines += [
                f"vi = UOp.variable('i', 0, {self.shape[0] - 1})",
                f"t = Tensor.zeros({shape}, device=dev, dtype=dt).contiguous().realize()",
            ]
        for k, a in enumerate(self.args):
            arg = f"Tensor({array_literal(a)}, device=dev, dtype=dt)"
            call = f"f(t, {arg}, vi.bind({self.rows[k]}))" if self.row == "variable offset" else f"f({arg})"
            lines.append(f"outs.append({call}.numpy())")
        lines.append("out = outs")
        return "\n".join(lines)

    def oracle(self) -> list[np.ndarray] | None:
        """numpy's result of each call (None for `random`: its oracle is the plain calls on REFERENCE)."""
        if self.row == "random":
            return None
        if self.row == "empty_like":
            return [
                np.asarray(eval(FILLS[self.kind], {"np": np, "x": a}), dtype=np.float32) for a in self.args
            ]
        t, out = np.zeros(self.shape, np.float32), []
        for i, a in zip(self.rows, self.args):
            if self.kind == "iadd":
                t[i : i + 1] += a
            else:
                t[i : i + 1] = a
            out.append(t.copy())
        return out

    def __repr__(self) -> str:
        return f"<TinyJit program ({self.row})>\n{self.body()}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # noqa: ANN401  (how hypothesis prints a draw)
        p.text(repr(self))


def _ints(draw: st.DrawFn, shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(
        draw(st.lists(st.integers(-50, 50), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
        dtype=np.float32,
    ).reshape(shape)


@st.composite
def jit_programs(draw: st.DrawFn, row: str) -> JitProgram:
    """A program of one row (`ROWS`): 3 to 5 calls of a step on shapes up to 6 x 4."""
    calls = draw(st.integers(3, 5))
    shape: tuple[int, ...]
    if row == "variable offset":
        shape = (draw(st.integers(2, 6)), draw(st.integers(1, 4)))
        rows = tuple(draw(st.lists(st.integers(0, shape[0] - 1), min_size=calls, max_size=calls)))
        args = tuple(_ints(draw, (1, shape[1])) for _ in range(calls))
        return JitProgram(row, shape, draw(st.sampled_from(list(WRITES))), args, rows)
    shape = (draw(st.integers(2, 6)),) + ((draw(st.integers(1, 4)),) if draw(st.booleans()) else ())
    if row == "random":
        x = _ints(draw, shape)
        kind = draw(st.sampled_from(list(DRAWS)))
        return JitProgram(row, shape, kind, (x,) * calls, seed=draw(st.integers(0, 2**16)))
    args = tuple(_ints(draw, shape) for _ in range(calls))
    return JitProgram(
        row,
        shape,
        draw(st.sampled_from(list(FILLS))),
        args,
        empty=draw(st.sampled_from(["empty_like", "empty"])),
    )


def _run(prog: JitProgram, device: str, jit: bool) -> list[np.ndarray]:
    return [np.asarray(o) for o in execute(prog.body(jit), namespace(device, DT))]


def check_jit(target: Target, prog: JitProgram, record: Recorder) -> None:
    """Run the jitted program on the backend; each call's result must be the oracle's (numpy, or the plain
    calls on REFERENCE for random draws), within half an ulp. Raises `Failure` with a repro."""
    oracle = "numpy"
    want = prog.oracle()
    if want is None:
        want, oracle = _run(prog, REFERENCE, jit=False), "REFERENCE without TinyJit"
    try:
        got = _run(prog, target.name, jit=True)
    except Exception as e:
        raise Failure(
            f"the TinyJit program ({prog.row}) raised on {target.name}:\n{format_exception(e)}\n"
            "repro:\n" + _repro(target, prog, want, oracle)
        ) from e
    problems = []
    for k, (g, w) in enumerate(zip(got, want)):
        cmp = compare(g, w, DT, 0.5, 0.0, False, label=oracle)
        record.error(cmp.worst_rel)
        if not cmp.ok:
            when = "the first call" if k == 0 else "the capture" if k == 1 else f"replay {k - 1}"
            same = k and np.array_equal(g, got[k - 1]) and not np.array_equal(w, want[k - 1])
            problems.append(
                cmp.message(f"call {k} ({when}) differs from {oracle}")
                + ("\n  (it returned the previous call's values again)" if same else "")
            )
    if problems:
        raise Failure("\n".join(problems) + "\nrepro:\n" + _repro(target, prog, want, oracle))


def _repro(target: Target, prog: JitProgram, want: list[np.ndarray], oracle: str) -> str:
    tail = [f"print(outs[{k}].tolist())  # {oracle}: {w.tolist()}" for k, w in enumerate(want)]
    return snippet(target.name, DT, [], prog.body().rsplit("\nout = ", 1)[0], tail)
