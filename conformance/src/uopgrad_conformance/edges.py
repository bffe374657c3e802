"""The case classes backend authors get wrong (docs/conformance.md "What it checks" 4), one row each: sizes
above 1024 and odd or prime sizes in every loop dimension (reduce axes included, and kernels large enough
to take a parallel path), WHERE with broadcast or constant conditions, programs with two or more bound
variables, outputs that the kernel also reads (an update in place of a fresh buffer, which reads zeros),
integer edge values (`INT_MIN // -1`, `% -1`, over-wide shifts; in a subprocess, as a plain C division
traps), kernels with many buffers and non-contiguous views with large strides.

Each row is uopgrad source run on the backend and on REFERENCE by `forward.run_forward`; a compiled
backend runs every expression twice (the second time with another thread count) and must give the same
bits. Large inputs repeat a short random period (a prime 61 long), so a repro writes them in one line and
keeps their shape; their float values are small integers, so every sum is exact in any order and
the checks are bit-exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from uopgrad import DType, UOp, dtypes
from uopgrad_conformance.cases import INTS
from uopgrad_conformance.numerics import host_dtype, representable
from uopgrad_conformance.repro import Input

__all__ = ["EDGE_ROWS", "EdgeCase", "EdgeRow"]


@dataclass
class EdgeCase:
    """What one row runs on one dtype: inputs, expressions, names bound in both runs (`extra`, written as
    `extra_src` in a repro), whether it runs in a subprocess, and the ulps allowed (0 for exact rows)."""

    inputs: list[Input]
    exprs: list[str]
    extra: dict[str, object] | None = None
    extra_src: dict[str, str] | None = None
    isolate: bool = False
    elementwise: bool = False


@dataclass(frozen=True)
class EdgeRow:
    """A row of the table: the dtypes it runs on and how to build its case."""

    dtypes: tuple[DType, ...]
    build: Callable[[DType, np.random.Generator], EdgeCase]


PERIOD = 61


def periodic(dt: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values of `dt` repeating every `PERIOD` elements: small integers (bools: coins), exact in every sum."""
    if dt == dtypes.bool:
        pool = rng.random(PERIOD) < 0.5
    else:
        lo = 0 if dtypes.is_unsigned(dt) else -8
        pool = (
            representable(rng.integers(lo, 9, PERIOD), dt)
            if not dtypes.is_float(dt)
            else representable(rng.integers(lo, 9, PERIOD).astype(np.float64), dt)
        )
    return np.resize(pool, shape).astype(host_dtype(dt))


def _inputs(dt: DType, rng: np.random.Generator, **shapes: tuple[int, ...]) -> list[Input]:
    return [Input(n, periodic(dt, s, rng), dt) for n, s in shapes.items()]


# ---------------------------------------------------------------------- the rows
def _sizes(dt: DType, rng: np.random.Generator) -> EdgeCase:
    # 1031 and 40009 are primes; 37 x 1031 = 38147 elements is past the CPU backend's parallel threshold
    ins = _inputs(dt, rng, a=(1031,), b=(37, 1031), c=(1031, 3), d=(40009,), e=(7, 1031))
    sums = ["(b * 3).sum(1)", "b.sum(0)", "c.sum(0)", "d.sum()", "e.sum(1, keepdim=True)", "b.sum()"]
    return EdgeCase(
        ins, ["a * 2 + a", "b * 2 - b", "b.max(1)", "d.max()", "c.max(0)", "e.permute(1, 0) + 1", *sums]
    )


def _where(dt: DType, rng: np.random.Generator) -> EdgeCase:
    ins = _inputs(dt, rng, x=(3, 4), y=(3, 4))
    conds = {
        "t": np.array([True]),
        "f": np.array([False]),
        "c31": rng.random((3, 1)) < 0.5,
        "c14": rng.random((1, 4)) < 0.5,
        "s": np.array(True),
    }
    ins += [Input(n, v, dtypes.bool) for n, v in conds.items()]
    one = "True" if dt == dtypes.bool else "1"
    return EdgeCase(
        ins,
        [
            "t.where(x, y)",
            "f.where(x, y)",
            "c31.where(x, y)",
            "c14.where(x, y)",
            "s.where(x, y)",
            "Tensor(True, device=dev).where(x, y)",
            "Tensor.full((3, 4), False, device=dev).where(x, y)",
            f"t.where(x, {one})",
            f"c31.where({one}, y)",
            "f.expand(3, 1).where(x[:, :1], y[:, 1:2])",
        ],
    )


_VARS = {"i": ("i", 1, 8, 2), "j": ("j", 1, 8, 5), "k": ("k", 0, 8, 7)}


def _variables(dt: DType, rng: np.random.Generator) -> EdgeCase:
    extra: dict[str, object] = {n: UOp.variable(nm, lo, hi).bind(v) for n, (nm, lo, hi, v) in _VARS.items()}
    src = {n: f"UOp.variable({nm!r}, {lo}, {hi}).bind({v})" for n, (nm, lo, hi, v) in _VARS.items()}
    exprs = [
        "x[:i, :j].sum()",
        "x[:j].sum(0) - x[:i].sum(0)",
        "x[:i, :j].sum() * 3 + x[:k].sum()",
        "x[:i].sum(0) * 2 + x[:, :j].sum(1) - x[:k].max(0)",
    ]
    return EdgeCase(_inputs(dt, rng, x=(8, 8)), exprs, extra, src)


def _in_place(dt: DType, rng: np.random.Generator) -> EdgeCase:
    # the first expressions leave freed buffers of the same sizes behind: a fresh buffer may reuse them,
    # and must read zeros all the same (spec/reference.md §1)
    ins = _inputs(dt, rng, x=(1031,), y=(37, 1031), w=(3, 5))
    new = "Tensor.empty({}, device=dev, dtype=dt)"
    return EdgeCase(
        ins,
        [
            "x * 3 + 1",
            "y * 3 + 1",
            "w * 3 + 1",
            f"(z := {new.format('1031')}).assign(z + x)",
            f"(z := {new.format('37, 1031')}).assign(z * 2 + y)",
            f"(z := {new.format('3, 5')}).assign(w - z)",
            f"(z := {new.format('3, 5')})[1:].assign(z[1:] + w[1:]).sum(0)",
        ],
    )


def _int_edges(dt: DType, _rng: np.random.Generator) -> EdgeCase:
    lo, hi, width = int(dtypes.min(dt)), int(dtypes.max(dt)), 8 * dt.itemsize
    a = [lo, lo, lo + 1, hi, -7, 7, 0, lo] if dt in dtypes.sints else [0, 1, hi, hi - 1, 7, 5, 0, 3]
    b = [-1] * 7 + [1] if dt in dtypes.sints else [hi] * 7 + [1]
    amounts = [width, width + 1, 2 * width - 1, min(hi, 127), 0, width - 1, 3, width]
    if dt in dtypes.sints:
        amounts[4] = -1
    x = [1, -1, lo, hi, 5, -5, 3, -3] if dt in dtypes.sints else [1, hi, hi - 1, 2, 5, 0, 3, 1]
    hd = host_dtype(dt)
    wide = np.int64 if dt in dtypes.sints else np.uint64
    ins = [
        Input(n, np.array(v, dtype=wide).astype(hd), dt)
        for n, v in (("a", a), ("b", b), ("x", x), ("s", amounts))
    ]
    exprs = [f"Tensor(a.uop.alu(Ops.{op}, b.uop))" for op in ("FLOORDIV", "FLOORMOD", "CDIV", "CMOD", "FDIV")]
    if dt in dtypes.sints:
        exprs += [f"Tensor(a.uop.alu(Ops.{op}, a.uop.const_like(-1)))" for op in ("CDIV", "CMOD", "FLOORDIV")]
    exprs += [
        "a // b",
        "a % b",
        "Tensor(x.uop.alu(Ops.SHL, s.uop))",
        "Tensor(x.uop.alu(Ops.SHR, s.uop))",
        f"Tensor(x.uop.alu(Ops.SHL, x.uop.const_like({width})))",
        f"Tensor(x.uop.alu(Ops.SHR, x.uop.const_like({width + 3})))",
    ]
    return EdgeCase(ins, exprs, isolate=True, elementwise=True)


def _many_buffers(dt: DType, rng: np.random.Generator) -> EdgeCase:
    names = [f"a{k}" for k in range(20)]
    ins = _inputs(dt, rng, **{n: (5, 7) for n in names})
    weighted = " + ".join(f"{n} * {k % 3 + 1}" for k, n in enumerate(names[:16]))
    return EdgeCase(
        ins,
        [weighted, " + ".join(names), f"({' - '.join(names[:10])}).sum(0)", f"{names[19]} * 2 + {names[0]}"],
    )


def _strided(dt: DType, rng: np.random.Generator) -> EdgeCase:
    ins = _inputs(dt, rng, x=(1031, 67), v=(3, 40009))
    return EdgeCase(
        ins,
        [
            "x[::97, 5]",
            "x[5::131, ::13]",
            "x.permute(1, 0)[::7, ::3].contiguous()",
            "x.flip(0)[::211]",
            "x.reshape(67, 1031)[:, 1000:]",
            "x[1030:, :]",
            "x[:1030:2] + x[1::2]",
            "v[:, ::4001]",
            "v.permute(1, 0)[40000:]",
            "v[::2, 39990:].flip(1)",
        ],
    )


_SOME = (dtypes.int32, dtypes.float32, dtypes.float16, dtypes.float64)
EDGE_ROWS: dict[str, EdgeRow] = {
    "sizes above 1024": EdgeRow(_SOME, _sizes),
    "WHERE broadcast": EdgeRow((dtypes.float32, dtypes.int32, dtypes.bool, dtypes.float16), _where),
    "bound variables": EdgeRow((dtypes.int32, dtypes.float32), _variables),
    "in place into a fresh buffer": EdgeRow(
        (dtypes.float32, dtypes.int32, dtypes.float16, dtypes.int8), _in_place
    ),
    "integer edges": EdgeRow(INTS, _int_edges),
    "many buffers": EdgeRow((dtypes.float32, dtypes.int32), _many_buffers),
    "strided views": EdgeRow((dtypes.float32, dtypes.int32, dtypes.int8), _strided),
}
