"""Numbers the suite compares with: dtypes in table order, special and random values, the tolerance tables
and the comparison of a backend's result with REFERENCE's (docs/conformance.md).

Every float tolerance is written in units in the last place (ulp) of the dtype, in one table per use:
`FORWARD_ULPS` for single ops, `GRAD_TOL` (step and relative tolerance) for finite-difference checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from uopgrad import DType, dtypes

__all__ = [
    "ALL_DTYPES",
    "FLOATS",
    "FORWARD_ULPS",
    "GRAD_TOL",
    "SHORT",
    "Comparison",
    "GradTol",
    "bits",
    "compare",
    "dtype_by_name",
    "fd_step",
    "host_dtype",
    "name",
    "random_values",
    "representable",
    "special_values",
    "ulp",
]

# every value dtype, in the column order of the summary table
ALL_DTYPES: tuple[DType, ...] = (
    dtypes.bool,
    dtypes.int8,
    dtypes.uint8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.uint32,
    dtypes.int64,
    dtypes.uint64,
    dtypes.float16,
    dtypes.bfloat16,
    dtypes.float32,
    dtypes.float64,
)
FLOATS: tuple[DType, ...] = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
# column headers of the summary table
SHORT: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "i8",
    dtypes.uint8: "u8",
    dtypes.int16: "i16",
    dtypes.uint16: "u16",
    dtypes.int32: "i32",
    dtypes.uint32: "u32",
    dtypes.int64: "i64",
    dtypes.uint64: "u64",
    dtypes.float16: "f16",
    dtypes.bfloat16: "bf16",
    dtypes.float32: "f32",
    dtypes.float64: "f64",
}
# the name a case id uses for each dtype (numpy's spelling; bfloat16 has none there)
_NAMES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "int8",
    dtypes.uint8: "uint8",
    dtypes.int16: "int16",
    dtypes.uint16: "uint16",
    dtypes.int32: "int32",
    dtypes.uint32: "uint32",
    dtypes.int64: "int64",
    dtypes.uint64: "uint64",
    dtypes.float16: "float16",
    dtypes.bfloat16: "bfloat16",
    dtypes.float32: "float32",
    dtypes.float64: "float64",
}
# mantissa bits (without the implicit one) and the exponent of the smallest normal number
_FLOAT_BITS: dict[DType, tuple[int, int]] = {
    dtypes.float16: (10, -14),
    dtypes.bfloat16: (7, -126),
    dtypes.float32: (23, -126),
    dtypes.float64: (52, -1022),
}


def name(dt: DType) -> str:
    """The dtype's name in case ids and repro snippets (`float32`, `bfloat16`, ...)."""
    return _NAMES[dt]


def dtype_by_name(n: str) -> DType:
    """The dtype a case id names."""
    for dt, nm in _NAMES.items():
        if nm == n:
            return dt
    raise KeyError(f"no dtype named {n!r}")


def host_dtype(dt: DType) -> np.dtype:
    """The numpy dtype a value of `dt` is made from on the host (bfloat16 from float32 values; `.numpy()`
    gives ml_dtypes' bfloat16, which compares and converts like one)."""
    return np.dtype(np.float32) if dt == dtypes.bfloat16 else dtypes.to_numpy(dt)


def _round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even); inf and NaN unchanged."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(f), out, f)


def representable(values: Sequence[float] | np.ndarray, dt: DType) -> np.ndarray:
    """`values` converted to `dt` (rounded, wrapped) and held in its host dtype."""
    with np.errstate(all="ignore"):
        arr = np.asarray(values)
        if dt == dtypes.bfloat16:
            return _round_bf16(arr.astype(np.float32))
        if dtypes.is_int(dt) and arr.dtype.kind == "f":
            raise TypeError("representable() takes integer values for integer dtypes")
        return arr.astype(host_dtype(dt))


def _float_limits(dt: DType) -> dict[str, float]:
    mant, emin = _FLOAT_BITS[dt]
    emax = {dtypes.float16: 15, dtypes.bfloat16: 127, dtypes.float32: 127, dtypes.float64: 1023}[dt]
    return {
        "max": (2 - 2.0**-mant) * 2.0**emax,
        "tiny": 2.0**emin,
        "denorm": 2.0 ** (emin - mant),
        "denorm_max": (1 - 2.0**-mant) * 2.0**emin,
    }


def special_values(dt: DType) -> np.ndarray:
    """The special values of `dt` (docs/conformance.md): zeros of both signs, ±1, small integers, halves,
    ±inf, NaN, the smallest and largest denormals, the smallest normal, the extremes; for integers
    0, ±1, small values and the dtype's min/max and their neighbours."""
    if dt == dtypes.bool:
        return np.array([False, True])
    if dtypes.is_float(dt):
        lim = _float_limits(dt)
        vals = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            3.0,
            -3.0,
            7.0,
            0.1,
            math.pi,
            100.25,
            math.inf,
            -math.inf,
            math.nan,
            lim["denorm"],
            -lim["denorm"],
            lim["denorm_max"],
            lim["tiny"],
            -lim["tiny"],
            lim["max"],
            -lim["max"],
        ]
        return representable(vals, dt)
    lo, hi = int(dtypes.min(dt)), int(dtypes.max(dt))
    cands = [0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, lo, lo + 1, hi, hi - 1, hi // 2, hi // 2 + 1]
    return np.array(sorted({v for v in cands if lo <= v <= hi}), dtype=host_dtype(dt))


def random_values(dt: DType, n: int, rng: np.random.Generator, scale: float = 4.0) -> np.ndarray:
    """`n` ordinary values of `dt`: Gaussian (times `scale`) for floats, a mix of small and full-range
    integers, fair coins for bool."""
    if dt == dtypes.bool:
        return rng.random(n) < 0.5
    if dtypes.is_float(dt):
        return representable(rng.standard_normal(n) * scale, dt)
    lo, hi = int(dtypes.min(dt)), int(dtypes.max(dt))
    small = rng.integers(max(lo, -20), min(hi, 20) + 1, n)
    full = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64 if dt != dtypes.uint64 else np.uint64)
    pick = rng.random(n) < 0.5
    return np.where(pick, small.astype(host_dtype(dt)), full.astype(host_dtype(dt))).astype(host_dtype(dt))


def ulp(x: np.ndarray, dt: DType) -> np.ndarray:
    """The spacing of `dt`'s values at |x| (the smallest denormal at zero), as float64."""
    mant, emin = _FLOAT_BITS[dt]
    with np.errstate(all="ignore"):
        ax = np.abs(np.asarray(x, dtype=np.float64))
        exp = np.where(ax > 0, np.floor(np.log2(np.where(ax > 0, ax, 1.0))), emin)
        exp = np.maximum(np.where(np.isfinite(exp), exp, emin), emin)
        return np.asarray(np.ldexp(1.0, (exp - mant).astype(np.int64)))


# ---------------------------------------------------------------------- the tolerance tables
# Forward checks of single ops: the largest error allowed, in ulp of the result's dtype, for ops IEEE rounds
# correctly ("basic": + - * / sqrt, casts, ...) and for the transcendental ones (EXP2, LOG2, SIN, POW).
# Half an ulp for the basic ops: REFERENCE rounds them correctly, so a correctly rounded result is the same
# bits (a truncating conversion, 1 ulp off, fails). A backend that computes float16/bfloat16 in float32
# and rounds once is exact on them.
FORWARD_ULPS: dict[DType, dict[str, float]] = {
    dtypes.float16: {"basic": 0.5, "transcendental": 2},
    dtypes.bfloat16: {"basic": 0.5, "transcendental": 2},
    dtypes.float32: {"basic": 0.5, "transcendental": 4},
    dtypes.float64: {"basic": 0.5, "transcendental": 4},
}


@dataclass(frozen=True)
class GradTol:
    """Finite-difference check of gradients computed in one dtype: the analytic gradient (in the dtype)
    must match float64 central differences within `rtol` of the size of the terms compared."""

    rtol: float
    eps: float  # the dtype's machine epsilon, for the step of its own finite differences

    def step(self, x: np.ndarray) -> np.ndarray:
        """h = eps^(1/3) * max(1, |x|) (for float64 differences eps is float64's)."""
        return fd_step(x)


GRAD_TOL: dict[DType, GradTol] = {
    dtypes.float16: GradTol(rtol=2e-2, eps=2.0**-10),
    dtypes.bfloat16: GradTol(rtol=6e-2, eps=2.0**-7),
    dtypes.float32: GradTol(rtol=2e-4, eps=2.0**-23),
    dtypes.float64: GradTol(rtol=1e-6, eps=2.0**-52),
}


def fd_step(x: np.ndarray) -> np.ndarray:
    """The central-difference step in float64 at `x`: eps64^(1/3) * max(1, |x|) (about 6e-6)."""
    return np.asarray(np.finfo(np.float64).eps ** (1 / 3) * np.maximum(1.0, np.abs(x)))


# ---------------------------------------------------------------------- comparing results
@dataclass
class Comparison:
    """The outcome of comparing a backend's array with REFERENCE's."""

    ok: bool
    worst_rel: float = 0.0
    bad: list[tuple[int, ...]] = field(default_factory=list)  # the first few mismatching indices
    n_bad: int = 0
    detail: str = ""

    def message(self, what: str) -> str:
        """A one-paragraph description of the mismatch."""
        return (
            f"{what}: {self.n_bad} element(s) differ (worst relative error {self.worst_rel:.3g})\n"
            f"{self.detail}"
        )


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return repr(f)
        return "-0.0" if f == 0 and math.copysign(1, f) < 0 else f"{f:.9g}"
    return repr(v.item() if isinstance(v, np.generic) else v)


def bits(x: np.ndarray, dt: DType) -> np.ndarray:
    """The bit patterns of `x` (values of `dt` in its host dtype) as unsigned integers."""
    a = np.ascontiguousarray(x)
    if dt == dtypes.bfloat16:
        return (a.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "f" else a


def _rel(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        d = np.abs(a - e)
        r = d / np.maximum(np.abs(e), np.finfo(np.float64).tiny)
        both = np.isfinite(a) & np.isfinite(e)
        return np.asarray(np.where(both, r, np.where(_same_special(a, e), 0.0, np.inf)))


def _same_special(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    return np.asarray((np.isnan(a) & np.isnan(e)) | (np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))))


def compare(
    actual: np.ndarray,
    expected: np.ndarray,
    dt: DType,
    ulps: float = 0,
    atol: np.ndarray | float = 0.0,
    signed_zero: bool = True,
    inputs: Sequence[np.ndarray] = (),
    limit: int = 6,
    label: str = "REFERENCE",
) -> Comparison:
    """Compare element by element. Integers and bools must be equal. Floats: NaN where REFERENCE has NaN,
    the same infinities, zeros of the same sign (unless `signed_zero` is False), and finite values within
    `ulps` ulp of `dt` or within `atol` (a scalar or one bound per element). `inputs` are listed beside
    the first `limit` mismatches; `label` names what the expected values are (REFERENCE, a closed form)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return Comparison(False, math.inf, [], int(e.size), f"shape {a.shape}, expected {e.shape}")
    if not dtypes.is_float(dt):
        bad_mask = a != e
        rel = np.zeros(e.shape)
        if dt != dtypes.bool and e.size:
            rel = np.where(bad_mask, 1.0, 0.0)
    else:
        with np.errstate(all="ignore"):
            a64, e64 = a.astype(np.float64), e.astype(np.float64)
            finite = np.isfinite(a64) & np.isfinite(e64)
            err = np.abs(a64 - e64)
            allowed = np.maximum(ulps * ulp(e64, dt), np.broadcast_to(atol, e.shape))
            bad_mask = ~(_same_special(a64, e64) | (finite & (err <= allowed)))
            if signed_zero:
                zeros = (a64 == 0) & (e64 == 0)
                bad_mask |= zeros & (np.signbit(a64) != np.signbit(e64))
        rel = _rel(a64, e64)
    n_bad = int(np.count_nonzero(bad_mask))
    worst = float(np.max(rel)) if rel.size else 0.0
    if n_bad == 0:
        return Comparison(True, worst)
    idx = [tuple(int(i) for i in ix) for ix in np.argwhere(bad_mask)[:limit]]
    lines = []
    for ix in idx:
        ins = ", ".join(_fmt(np.asarray(x)[ix] if np.ndim(x) else x) for x in inputs)
        shown = f"  at {ix}: got {_fmt(a[ix])}, {label} {_fmt(e[ix])}"
        lines.append(shown + (f"  (inputs {ins})" if ins else ""))
    if n_bad > limit:
        lines.append(f"  ... and {n_bad - limit} more")
    return Comparison(False, worst, idx, n_bad, "\n".join(lines))
