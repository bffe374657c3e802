"""Forward checks, op by op, against REFERENCE (docs/conformance.md "What it checks" 1): every ALU op on
every dtype, CAST and BITCAST, the movement ops, REDUCE (incl. empty axes), CONTIGUOUS and COPY."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pytest

from uopgrad import DType, dtypes
from uopgrad_conformance.cases import (
    ALU_SPECS,
    AluSpec,
    alu_inputs,
    bitcast_inputs,
    bitcast_pairs,
    cast_inputs,
)
from uopgrad_conformance.forward import ForwardCheck, check_equal, run_forward
from uopgrad_conformance.numerics import (
    ALL_DTYPES,
    FORWARD_ULPS,
    Comparison,
    bits,
    compare,
    name,
    random_values,
    representable,
    special_values,
)
from uopgrad_conformance.plugin import case_rng, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.repro import Input
from uopgrad_conformance.target import REFERENCE, Target, no_second_device

# ---------------------------------------------------------------------- the case tables
MOVEMENT: dict[str, tuple[str, ...]] = {
    "RESHAPE": (
        "{x}.reshape(4, 3)",
        "{x}.reshape(12)",
        "{x}.reshape(2, 1, 6)",
        "{w}.reshape(6, 4)",
        "{w}.reshape(4, 6).reshape(2, 12)",
    ),
    "EXPAND": ("{x}.reshape(3, 1, 4).expand(3, 2, 4)", "{x}[:, :1].expand(3, 5)", "{x}[:1].expand(4, 4)"),
    "PERMUTE": ("{x}.permute(1, 0)", "{w}.permute(2, 0, 1)", "{w}.permute(1, 0, 2)"),
    "PAD": (
        "{x}.pad(((1, 2), (0, 3)))",
        "{x}.pad(((0, 0), (2, 0)))",
        "{w}.pad(((0, 1), (1, 1), (0, 0)))",
        "{x}.permute(1, 0).pad(((1, 0), (0, 1))).flip(0)",
    ),
    "SHRINK": (
        "{x}.shrink(((1, 3), (0, 2)))",
        "{x}.shrink(((0, 3), (3, 4)))",
        "{x}[::2, 1::2]",
        "{w}[:, ::-1, 1:3]",
    ),
    "FLIP": ("{x}.flip(0)", "{x}.flip(1)", "{x}.flip((0, 1))", "{w}.flip((0, 2))"),
    "CONTIGUOUS": (
        "{x}.permute(1, 0).contiguous()",
        "{x}.flip(0).contiguous().reshape(12)",
        "{x}.pad(((1, 1), (0, 0))).contiguous()",
    ),
}
REDUCES = ("ADD", "MAX", "MUL")


def _dt_cases(
    row: str, group: str, target: Target, dts: Sequence[DType], payload: object = None, check: str = "forward"
) -> list[Case]:
    return [Case(row, dt, check, target.not_claimed(dt), payload, group) for dt in dts]


def alu_cases(target: Target) -> list[Case]:
    """ALU op x dtype (the dtypes spec/reference.md defines the op on)."""
    return [c for spec in ALU_SPECS for c in _dt_cases(spec.op.name, "alu", target, spec.dtypes, spec)]


def cast_cases(target: Target) -> list[Case]:
    """CAST from every dtype (a row each) to every dtype (the columns)."""
    out = []
    for src in ALL_DTYPES:
        for dst in ALL_DTYPES:
            if src != dst:
                out.append(
                    Case(f"CAST from {name(src)}", dst, "forward", target.not_claimed(src, dst), src, "cast")
                )
    return out


def bitcast_cases(target: Target) -> list[Case]:
    """BITCAST between dtypes of one size."""
    return [
        Case(f"BITCAST from {name(s)}", d, "forward", target.not_claimed(s, d), s, "bitcast")
        for s, d in bitcast_pairs()
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise each test over its cases for the backend under test."""
    builders: dict[str, Callable[[Target], list[Case]]] = {
        "test_alu": alu_cases,
        "test_cast": cast_cases,
        "test_bitcast": bitcast_cases,
        "test_movement": lambda t: [c for row in MOVEMENT for c in _dt_cases(row, "movement", t, ALL_DTYPES)],
        "test_reduce": lambda t: [
            c for op in REDUCES for c in _dt_cases(f"REDUCE {op}", "reduce", t, ALL_DTYPES, op)
        ],
        "test_copy": lambda t: [
            replace(c, skip=c.skip or no_second_device(t))  # copies to NAME:1 too
            for c in _dt_cases("COPY", "copy", t, ALL_DTYPES)
        ],
    }
    parametrize_suite(metafunc, lambda target, test: builders[test](target))


# ---------------------------------------------------------------------- ALU ops
def _ulps(spec_kind: str, dt: DType) -> float:
    return FORWARD_ULPS[dt][spec_kind] if dt in FORWARD_ULPS else 0


def test_alu(case: Case, target: Target, record: Recorder) -> None:
    """One ALU op on one dtype: special-value combinations and random values, on buffers and (in the
    variants) with a constant operand or operands known to be non-negative."""
    spec: AluSpec = case.payload
    dt = case.dtype
    assert dt is not None
    ins = alu_inputs(spec, dt, case_rng(case))
    inputs = [Input(n, a, d) for n, a, d in zip(ins.names, ins.arrays, ins.dtypes)]
    out_dt = dtypes.bool if spec.op.name in ("CMPLT", "CMPNE", "CMPEQ") else dt
    cmp = check_equal(out_dt, _ulps(spec.kind, out_dt), spec.signed_zero)
    run_forward(target, dt, inputs, [ForwardCheck(e, out_dt, cmp) for e in spec.expressions(dt)], record)


def test_cast(case: Case, target: Target, record: Recorder) -> None:
    """CAST of special and random values (float -> int only for values the target holds)."""
    src, dst = case.payload, case.dtype
    assert dst is not None
    x = cast_inputs(src, dst, case_rng(case))
    cmp = check_equal(dst, _ulps("basic", dst))
    run_forward(
        target, src, [Input("a", x, src)], [ForwardCheck(f"a.cast(dtypes.{name(dst)})", dst, cmp)], record
    )


def test_bitcast(case: Case, target: Target, record: Recorder) -> None:
    """BITCAST: the same bits read as another dtype of the same size."""
    src, dst = case.payload, case.dtype
    assert dst is not None
    x = bitcast_inputs(src, dst, case_rng(case))

    def same_bits(got: np.ndarray, expected: np.ndarray, ins: Sequence[np.ndarray]) -> Comparison:
        udt = dtypes.uint16 if dst == dtypes.bfloat16 else dtypes.from_numpy(bits(expected, dst).dtype)
        return compare(bits(got, dst), bits(expected, dst), udt, inputs=ins)

    run_forward(
        target,
        src,
        [Input("a", x, src)],
        [ForwardCheck(f"a.bitcast(dtypes.{name(dst)})", dst, same_bits)],
        record,
    )


# ---------------------------------------------------------------------- movement, reduce, copy
def _values(dt: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    n = int(np.prod(shape))
    pool = np.concatenate([special_values(dt), random_values(dt, n, rng)]).astype(special_values(dt).dtype)
    return rng.choice(pool, n).reshape(shape)


def _movement_inputs(dt: DType, rng: np.random.Generator) -> list[Input]:
    out = []
    for nm, shape in (("x", (3, 4)), ("y", (3, 4)), ("w", (2, 3, 4)), ("v", (2, 3, 4))):
        out.append(Input(nm, _values(dt, shape, rng), dt))
    out.append(Input("c", rng.random((3, 4)) < 0.5, dtypes.bool))
    out.append(Input("cw", rng.random((2, 3, 4)) < 0.5, dtypes.bool))
    return out


def test_movement(case: Case, target: Target, record: Recorder) -> None:
    """A movement op (or CONTIGUOUS) on a buffer and on a value computed in the same kernel."""
    dt = case.dtype
    assert dt is not None
    inputs = _movement_inputs(dt, case_rng(case))
    checks = []
    for template in MOVEMENT[case.row]:
        for x, w in (("x", "w"), ("c.where(x, y)", "cw.where(w, v)")):
            checks.append(ForwardCheck(template.format(x=x, w=w), dt, check_equal(dt), elementwise=False))
    run_forward(target, dt, inputs, checks, record)


def _reduce_values(op: str, dt: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values for a reduce: no float overflow whatever the order (sums of moderate values, products near
    1), with the special values that matter (NaN, ±inf, zeros, all-negative rows for MAX)."""
    n = int(np.prod(shape))
    if not dtypes.is_float(dt):
        if op == "MUL" and dt != dtypes.bool:
            vals = representable(rng.integers(0 if dt in dtypes.uints else -3, 4, n), dt).reshape(shape)
        else:
            vals = _values(dt, shape, rng)
        if op == "MAX" and dt in dtypes.sints and len(shape) > 1:
            vals[..., 0, :] = -np.abs(vals[..., 0, :].astype(np.int64) // 2) - 1  # a negative row
        return vals
    if op == "MUL":
        base = rng.uniform(0.5, 2.0, n) * rng.choice([-1.0, 1.0], n)
    else:
        base = rng.standard_normal(n) * 10
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    pick = rng.random(n) < 0.15
    base = np.where(pick, specials[rng.integers(0, len(specials), n)], base)
    vals = representable(base, dt).reshape(shape)
    if op == "MAX" and len(shape) > 1 and shape[-2]:
        vals = vals.copy()
        vals[..., 0, :] = -np.abs(vals[..., 0, :]) - 1  # a row of negative values only
    return vals


def _sum_atol(dt: DType) -> object:
    eps = {
        dtypes.float16: 2.0**-11,
        dtypes.bfloat16: 2.0**-8,
        dtypes.float32: 2.0**-24,
        dtypes.float64: 2.0**-53,
    }.get(dt, 0.0)

    def atol(ins: Sequence[np.ndarray]) -> np.ndarray:
        mags = [np.abs(np.asarray(a, dtype=np.float64)) for a in ins if np.asarray(a).dtype.kind == "f"]
        total = sum((float(np.sum(m[np.isfinite(m)])) for m in mags), 0.0)
        n = max((a.size for a in ins), default=1)
        return np.asarray(4 * n * eps * total)

    return atol


def test_reduce(case: Case, target: Target, record: Recorder) -> None:
    """REDUCE ADD/MAX/MUL over one axis, several, all, and over empty axes (the identity), in the node's
    dtype (raw REDUCE) and through Tensor.sum/max/prod (which accumulate in wider dtypes; Tensor.max over
    an empty axis raises, so only the raw REDUCE MAX is checked there)."""
    op, dt = case.payload, case.dtype
    assert dt is not None
    rng = case_rng(case)
    inputs = [
        Input("x", _reduce_values(op, dt, (3, 4), rng), dt),
        Input("w", _reduce_values(op, dt, (2, 3, 4), rng), dt),
        Input("e", np.zeros((0, 3), dtype=special_values(dt).dtype), dt),
        Input("f", np.zeros((3, 0), dtype=special_values(dt).dtype), dt),
        Input("y", _reduce_values(op, dt, (3, 4), rng), dt),
        Input("c", rng.random((3, 4)) < 0.5, dtypes.bool),
    ]
    method = {"ADD": "sum", "MAX": "max", "MUL": "prod"}[op]
    exprs = [
        f"Tensor(x.uop._rop(Ops.{op}, (0,)))",
        f"Tensor(x.uop._rop(Ops.{op}, (1,)))",
        f"Tensor(x.uop._rop(Ops.{op}, (0, 1)))",
        f"Tensor(w.uop._rop(Ops.{op}, (0, 2)))",
        f"Tensor(e.uop._rop(Ops.{op}, (0,)))",
        f"Tensor(f.uop._rop(Ops.{op}, (1,)))",
        f"Tensor(c.where(x, y).uop._rop(Ops.{op}, (1,)))",
        f"x.{method}(1)",
        f"w.{method}((0, 1))",
    ]
    if op != "MAX":  # Tensor.max over an empty axis has no value and raises (docs/semantics.md §5)
        exprs.append(f"e.{method}(0)")
    checks = []
    for e in exprs:
        is_tensor_method = not e.startswith("Tensor(")
        out_dt = dt
        if is_tensor_method and op == "ADD":
            out_dt = _sum_dtype(dt)
        if dtypes.is_float(out_dt) and op == "ADD":
            cmp = check_equal(out_dt, 1, signed_zero=False, atol=_sum_atol(dt))  # type: ignore[arg-type]
        elif dtypes.is_float(out_dt) and op == "MUL":
            cmp = check_equal(out_dt, 8, signed_zero=False)
        else:
            cmp = check_equal(out_dt, 0, signed_zero=False)
        checks.append(ForwardCheck(e, out_dt, cmp, elementwise=False))
    run_forward(target, dt, inputs, checks, record)


def _sum_dtype(dt: DType) -> DType:
    if dt in (dtypes.float16, dtypes.bfloat16):
        return dt  # summed in float32, cast back
    if dt == dtypes.bool or dt in dtypes.sints:
        return dtypes.int64 if dt == dtypes.int64 else dtypes.int32
    if dt in dtypes.uints:
        return dtypes.uint64 if dt == dtypes.uint64 else dtypes.uint32
    return dt


def test_copy(case: Case, target: Target, record: Recorder) -> None:
    """COPY to a second device of the backend, to REFERENCE and back, of a buffer and of a view."""
    dt = case.dtype
    assert dt is not None
    rng = case_rng(case)
    inputs = [Input("x", _values(dt, (3, 4), rng), dt)]
    exprs = [
        "x.to(dev2)",
        "x.permute(1, 0).to(dev2)",
        "x.to(other)",
        "x.to(other).to(dev)",
        "x.to(dev2).to(dev)",
        "x.flip(1).to(dev2).to(other)",
    ]
    checks = [ForwardCheck(e, dt, check_equal(dt), elementwise=False) for e in exprs]
    other = REFERENCE if not target.is_reference else "REFERENCE:2"
    run_forward(
        target,
        dt,
        inputs,
        checks,
        record,
        extra={"dev2": target.second, "other": other},
        extra_ref={"dev2": "REFERENCE:1", "other": "REFERENCE:2"},
        extra_src={"dev2": repr(target.second), "other": repr(other)},
    )
