"""Float FLOORDIV/FLOORMOD decomposed (codegen/decomp.py): lowered without the floor ops, run as linear
programs on REFERENCE, and equal to numpy's floor_divide/remainder bit for bit (NaN as NaN, the sign of zero
kept)."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.backend import Device
from uopgrad.backends.reference import REFERENCE_OPS, evaluate, run_schedule
from uopgrad.codegen import GridLimits
from uopgrad.dtype import DType
from uopgrad.schedule import schedule

DEV = "REFERENCE"
NO_FLOOR = REFERENCE_OPS - {Ops.FLOORDIV, Ops.FLOORMOD}
# a C-like op set: FDIV, SUB, NEG, CMPEQ, ... decomposed too
C_LIKE = NO_FLOOR - {Ops.MAX, Ops.POW, Ops.SUB, Ops.NEG, Ops.CMPEQ, Ops.FDIV, Ops.MULACC}
MODES: dict[str, dict[str, object]] = {
    "no_floor": {"ops": NO_FLOOR},
    "c_like": {"ops": C_LIKE},
    "grid": {"ops": NO_FLOOR, "grid": GridLimits(global_max=(3, 2, 65535), local_size=8)},
}
SPECIAL = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0,
    -2.0,
    0.5,
    -0.5,
    3.0,
    -3.0,
    7.5,
    -7.5,
    0.1,
    -0.1,
    1e-3,
    5.0,
    -5.0,
    np.inf,
    -np.inf,
    np.nan,
]


def _operands(np_dt: type[np.floating]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(np.array(SPECIAL, np_dt), np.array(SPECIAL, np_dt), indexing="ij")
    rng = np.random.default_rng(0)
    ra = (rng.standard_normal(400) * 10.0 ** rng.integers(-2, 4, 400)).astype(np_dt)
    rb = (rng.standard_normal(400) * 10.0 ** rng.integers(-2, 3, 400)).astype(np_dt)
    return np.concatenate([a.ravel(), ra]), np.concatenate([b.ravel(), rb])


def _buffer(values: np.ndarray, dt: DType) -> UOp:
    buf = UOp.new_buffer(DEV, values.size, dt)
    Device[DEV].copyin(buf, values.reshape(-1))
    return buf.reshape(values.shape)


def _same_bits(got: np.ndarray, want: np.ndarray, msg: str) -> None:
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), msg
    ok = (got == want) & (np.signbit(got) == np.signbit(want))
    bad = ~nan & ~ok
    assert not bad.any(), f"{msg}: {np.flatnonzero(bad)[:8]} got {got[bad][:8]} want {want[bad][:8]}"


FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
CASES = [(op, dt) for op in (Ops.FLOORDIV, Ops.FLOORMOD) for dt in FLOATS]


@pytest.mark.parametrize("op,dt", CASES, ids=[f"{op.name}-{dt.name}" for op, dt in CASES])
def test_float_floor_ops_match_numpy_bitwise(op: Ops, dt: DType) -> None:
    old = Device.DEFAULT
    Device.DEFAULT = DEV
    try:
        np_dt = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}[dt]
        va, vb = _operands(np_dt)
        with np.errstate(all="ignore"):
            want = (np.floor_divide if op is Ops.FLOORDIV else np.remainder)(va, vb)
        assert want.dtype == np_dt
        for mode, kw in MODES.items():
            u = UOp(op, dt, (_buffer(va, dt), _buffer(vb, dt)))
            s = schedule(u.sink())
            run_schedule(s, **kw)  # type: ignore[arg-type]
            got = evaluate(s.outputs[u])[0]
            assert got.dtype == np_dt, mode
            _same_bits(np.asarray(got), want, f"{op.name} {dt.name} {mode}")
    finally:
        Device.DEFAULT = old
