"""The case table of the forward checks (docs/conformance.md "What it checks" 1): every ALU op on every
dtype the IR defines it for, CAST and BITCAST between dtypes, the six movement ops, REDUCE, CONTIGUOUS and
COPY. Each case is uopgrad source text run on the backend and on REFERENCE; which cases run is derived from
the backend's declared dtypes, and every case that does not run says why.

Where C leaves a case undefined, spec/reference.md still defines the answer, and the suite checks it:
shifts by a negative or too-large amount, float -> int casts out of the target's range (NaN and inf
included; `cast_inputs` adds the values at and beyond the range's ends). Two inputs stay out of these
in-process cases: integer division and remainder by zero (the spec leaves it to the backend) and of the
dtype's minimum by -1 (defined, but a plain C division traps, so `edges.py` checks it in a subprocess).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from uopgrad import DType, GroupOp, Ops, dtypes
from uopgrad.alu import ALU
from uopgrad_conformance.numerics import (
    ALL_DTYPES,
    name,
    random_values,
    representable,
    special_values,
)

__all__ = [
    "ALU_SPECS",
    "INTS",
    "NOT_CLAIMED_OPS",
    "AluSpec",
    "OpInputs",
    "alu_inputs",
    "bitcast_pairs",
    "cast_inputs",
    "range_edges",
]

INTS = tuple(dt for dt in ALL_DTYPES if dtypes.is_int(dt))
Mask = Callable[..., np.ndarray]  # the operand arrays -> the elements to keep


@dataclass(frozen=True)
class AluSpec:
    """How one ALU op is checked: on which dtypes the IR defines it (spec/reference.md §3), which error
    class of FORWARD_ULPS bounds it, which inputs are left out, and the expressions run. `a`, `b`, `c` are
    the operand tensors; WHERE's `a` is its bool condition. Variants with a constant operand take other
    code paths (decompositions read the operands' value ranges)."""

    op: Ops
    dtypes: tuple[DType, ...]
    kind: str = "basic"  # "basic" | "transcendental" | "exact"
    keep: Mask | None = None  # None: every input is defined
    signed_zero: bool = True  # a zero result must have REFERENCE's sign
    variants: tuple[str, ...] = ()  # extra expressions besides the plain op on buffers
    cond: bool = False  # WHERE: the first operand is a bool condition

    @property
    def arity(self) -> int:
        """Number of operands."""
        return 1 if self.op in GroupOp.Unary else 2 if self.op in GroupOp.Binary else 3

    def expressions(self, dt: DType) -> tuple[str, ...]:
        """The source of every output this op's case computes on `dt`, the plain one first."""
        names = ", ".join(f"{n}.uop" for n in "bc"[: self.arity - 1])
        plain = f"Tensor(a.uop.alu(Ops.{self.op.name}{', ' if names else ''}{names}))"
        signed, unsigned = dt in dtypes.sints, dt in dtypes.uints
        consts = {
            "neg": "-3" if signed else "3" if unsigned else "2.5" if dt != dtypes.bool else "True",
            "m1": "3" if unsigned else "True" if dt == dtypes.bool else "-1",
            "bits": "True" if dt == dtypes.bool else "6",
            "width": str(8 * dt.itemsize),
            "pi": "3.141592653589793" if dtypes.is_float(dt) else "True" if dt == dtypes.bool else "3",
        }
        return (plain, *(v.format(**consts) for v in self.variants))


def _int_divisor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Inputs checked in process: not b == 0 (left to the backend), not (minimum, -1) (it can trap: it is
    checked in a subprocess by edges.py)."""
    if a.dtype.kind not in "iu":
        return np.ones(a.shape, dtype=bool)
    ok = b != 0
    if a.dtype.kind == "i":
        ok &= ~((a == np.iinfo(a.dtype).min) & (b == -1))
    return np.asarray(ok)


def _const(op: str, value: str) -> str:
    return f"Tensor(a.uop.alu(Ops.{op}, a.uop.const_like({value})))"


def _div_variants(op: str) -> tuple[str, ...]:
    """A constant divisor, and operands proven non-negative (decompositions pick C division then). Both are
    clamped to at least 1: `maximum(0)` would make the case hinge on max(-0.0, 0), whose sign the spec leaves
    open (MAX's signed_zero=False), so a conforming backend would fail the division named."""
    return (_const(op, "3"), _const(op, "{neg}"), f"Tensor(a.maximum(1).uop.alu(Ops.{op}, b.maximum(1).uop))")


def _spec(
    op: Ops,
    keep: Mask | None = None,
    signed_zero: bool = True,
    variants: tuple[str, ...] = (),
    cond: bool = False,
) -> AluSpec:
    """The check of `op`: its dtypes and error class come from its row of core's ALU table."""
    row = ALU[op]
    dts = tuple(dt for dt in ALL_DTYPES if dt in row.defined_on)
    return AluSpec(op, dts, "transcendental" if row.libm else "basic", keep, signed_zero, variants, cond)


# what an op's check adds to its ALU row: left-out inputs, variants with a constant operand, ...; every
# other op of the table gets the plain check
_CHECKS: dict[Ops, AluSpec] = {
    s.op: s
    for s in (
        _spec(Ops.ADD, variants=(_const("ADD", "1"), _const("ADD", "{pi}"))),
        _spec(Ops.SUB, variants=(_const("SUB", "1"),)),
        _spec(Ops.MUL, variants=(_const("MUL", "{m1}"), _const("MUL", "{pi}"))),
        _spec(Ops.SHL, variants=(_const("SHL", "3"), _const("SHL", "{width}"))),
        _spec(Ops.SHR, variants=(_const("SHR", "3"), _const("SHR", "{width}"))),
        _spec(Ops.CDIV, keep=_int_divisor, variants=_div_variants("CDIV")),
        _spec(Ops.CMOD, keep=_int_divisor, variants=_div_variants("CMOD")),
        _spec(Ops.FDIV, keep=_int_divisor, variants=(_const("FDIV", "3"),)),
        _spec(Ops.FLOORDIV, keep=_int_divisor, variants=_div_variants("FLOORDIV")),
        _spec(Ops.FLOORMOD, keep=_int_divisor, variants=_div_variants("FLOORMOD")),
        _spec(Ops.MAX, signed_zero=False, variants=(_const("MAX", "0"),)),
        _spec(Ops.POW, variants=(_const("POW", "3"), _const("POW", "{m1}"))),
        _spec(Ops.CMPLT, variants=(_const("CMPLT", "1"),)),
        _spec(Ops.CMPNE, variants=(_const("CMPNE", "1"),)),
        _spec(Ops.CMPEQ, variants=(_const("CMPEQ", "1"),)),
        _spec(Ops.AND, variants=(_const("AND", "{bits}"),)),
        _spec(Ops.OR, variants=(_const("OR", "{bits}"),)),
        _spec(Ops.XOR, variants=(_const("XOR", "{bits}"),)),
        _spec(Ops.THREEFRY, variants=(_const("THREEFRY", "0x1234567890abcdef"),)),
        _spec(Ops.WHERE, cond=True),
    )
}

# ALU ops no backend is asked for, with the reason (an empty table: every op of GroupOp.ALU is expressible
# at the UOp level on tensors, so every one is checked)
NOT_CLAIMED_OPS: dict[Ops, str] = {}

# one check per row of the ALU table (`uopgrad.alu.ALU`, in the order of `Ops`), none for an unclaimed op
ALU_SPECS: tuple[AluSpec, ...] = tuple(
    _CHECKS.get(op) or _spec(op) for op in ALU if op not in NOT_CLAIMED_OPS
)


@dataclass
class OpInputs:
    """The operand arrays of one case (host dtypes), element i of each forming one input tuple."""

    arrays: list[np.ndarray]
    dtypes: list[DType]
    names: list[str] = field(default_factory=lambda: ["a", "b", "c"])


def _grid(values: Sequence[np.ndarray], limit: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Every combination of the special values (a random `limit` of them when there are more)."""
    combos = np.array(list(itertools.product(*(range(len(v)) for v in values))))
    if len(combos) > limit:
        combos = combos[rng.choice(len(combos), limit, replace=False)]
    return [v[combos[:, i]] for i, v in enumerate(values)]


def alu_inputs(spec: AluSpec, dt: DType, rng: np.random.Generator, n_random: int = 64) -> OpInputs:
    """Special-value combinations plus random values of `dt` for `spec`, minus the undefined ones."""
    arity = spec.arity
    dts = [dtypes.bool, dt, dt] if spec.cond else [dt] * arity
    specials = [special_values(d) for d in dts]
    arrays = _grid(specials, 700, rng)
    randoms = [random_values(d, n_random, rng) for d in dts]
    arrays = [np.concatenate([s, r]).astype(s.dtype) for s, r in zip(arrays, randoms)]
    if spec.keep is not None:
        mask = spec.keep(*arrays)
        arrays = [x[mask] for x in arrays]
    return OpInputs(arrays, dts)


# ---------------------------------------------------------------------- casts
def range_edges(dst: DType) -> list[float]:
    """Floats at and beyond the ends of int `dst`'s range (spec/reference.md §4: truncate, then wrap modulo
    2^bits; NaN and inf give 0), and at the edges 64-bit casts meet: ±2^31, ±2^53, ±2^63, ±2^64."""
    lo, hi = float(dtypes.min(dst)), float(dtypes.max(dst))
    vals = [
        lo,
        lo - 1,
        lo - 0.5,
        lo + 0.5,
        hi,
        hi + 1,
        hi + 0.5,
        hi - 0.5,
        2 * hi + 2,
        -0.9,
        -1.0,
        0.9999,
        1e30,
        -1e30,
    ]
    for e in (31, 32, 53, 63, 64):
        vals += [2.0**e, -(2.0**e), 2.0**e - 2.0 ** (e - 52), -(2.0**e) + 2.0 ** (e - 52)]
    return vals


def cast_inputs(src: DType, dst: DType, rng: np.random.Generator) -> np.ndarray:
    """Values of `src` to cast to `dst`: specials and random values; for a float -> int cast also values
    in the whole range of `dst`, at its ends and beyond them (`range_edges`)."""
    x = np.concatenate(
        [
            special_values(src),
            random_values(src, 48, rng),
            random_values(src, 16, rng, scale=1e4) if dtypes.is_float(src) else random_values(src, 0, rng),
        ]
    ).astype(special_values(src).dtype)
    if dtypes.is_float(src) and dtypes.is_int(dst):
        x = np.concatenate(
            [
                x,
                representable(
                    rng.uniform(float(dtypes.min(dst)), float(dtypes.max(dst)), 16)
                    if dst.itemsize < 8
                    else rng.standard_normal(16) * 1e9,
                    src,
                ),
                representable(range_edges(dst), src),
            ]
        ).astype(x.dtype)
    return x


def bitcast_pairs() -> list[tuple[DType, DType]]:
    """Every (src, dst) of equal item size and different dtypes."""
    return [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d and s.itemsize == d.itemsize]


def bitcast_inputs(src: DType, dst: DType, rng: np.random.Generator) -> np.ndarray:
    """Values of `src` whose bits are a valid `dst` (a bool byte must be 0 or 1)."""
    x = np.concatenate([special_values(src), random_values(src, 32, rng)]).astype(special_values(src).dtype)
    if dst == dtypes.bool:
        x = x[(x == 0) | (x == 1)]
    return x


def case_id(row: str, dt: DType | None, check: str) -> str:
    """The pytest id of a case: its row (op), dtype and check, e.g. `FLOORDIV-int32-forward`."""
    return "-".join(p for p in (row.replace(" ", "_"), name(dt) if dt is not None else None, check) if p)
