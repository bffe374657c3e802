"""Bits where spec/opt.md §2 promises bits: for every kernel class the optimisation pass leaves bit-identical
to the unoptimised kernel, `OPT=1` against `OPT=0` on the backend itself, byte for byte (signs of zero and
NaN payloads included), not within a tolerance: register tiles of matmuls with relu and WHERE epilogues,
packed panels (a large and a transposed right operand), float MAX reduces (upcast and unrolled with the
exact fallback), integer sums (wrapping) and vectorised elementwise ops. One small program per kernel,
just big enough to take the path; the check also asserts that the pass did take it (vector values, and a
scratch panel where the row packs one), so a pass that silently stopped running cannot pass for exact.

Only where the backend's target has a vector width (the pass is off elsewhere: OPT=1 is OPT=0); a packed
panel only where it has scratch memory. Compiled kernels are cached per (kernel, width), so both versions
are built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from uopgrad import DType, Ops, Tensor, dtypes
from uopgrad.codegen.opt import pack_min_span
from uopgrad.config import Context
from uopgrad.pipeline import lower
from uopgrad_conformance.forward import Failure
from uopgrad_conformance.numerics import host_dtype
from uopgrad_conformance.plugin import case_rng, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.repro import Input, namespace, snippet
from uopgrad_conformance.target import Target, tensor

Data = Callable[..., list[Input]]  # (rng, dtype), and a packing row's columns
PERIOD = 61  # large inputs repeat a prime period: the repro writes them as one np.resize line


@dataclass(frozen=True)
class BitsRow:
    """A kernel class of spec/opt.md §2 that must keep OPT=0's bits: its programs (source over the inputs,
    one kernel each), its inputs, its dtypes, and whether the pass packs a panel into scratch there."""

    exprs: tuple[str, ...]
    data: Data
    dtypes: tuple[DType, ...]
    packs: bool = False
    # ALU ops the class's vector path is made of: the pass vectorises only ops the target renders (core
    # decomposes the others after it), so a target without one of them has no such path to check
    native: frozenset[Ops] = frozenset()


def _with_specials(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Signed zeros everywhere, a whole row of zeros of both signs (exact ±0 results and ties), a NaN with
    a payload and an inf in rows of their own (one per output: which NaN an addition keeps is not the
    pass's to decide when two meet)."""
    x.flat[:: max(1, x.size // 9)] = -0.0
    x[1] = np.where(rng.random(x.shape[1]) < 0.5, 0.0, -0.0)
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint64)
    bits[2, 0] = np.array([np.nan], x.dtype).view(bits.dtype)[0] | 5
    x[3, 1] = np.inf
    return x


def _no_zeros(y: np.ndarray) -> np.ndarray:
    """Rows 0 and 1 of a right operand without zeros: the NaN and inf rows of the left one meet no 0·inf."""
    y[:2] = np.where(y[:2] == 0, 1.0, y[:2])
    return y


def _mm_data(m: int, k: int, n: int) -> Data:
    def make(rng: np.random.Generator, dt: DType) -> list[Input]:
        hd = host_dtype(dt)
        a = _with_specials(rng.standard_normal((m, k)).astype(hd), rng)
        b = _no_zeros(rng.standard_normal((k, n)).astype(hd))
        b.flat[2 * n :: 7] = -0.0
        return [Input("a", a, dt), Input("b", b, dt)]

    return make


def _wide_data(rng: np.random.Generator, dt: DType, cols: int = 512) -> list[Input]:
    """(64, 256) @ (256, cols): a panel over 256 rows of `cols` values (at least the span from which the
    target packs, `_panel_cols`), 8 row tiles of the widest tile per column tile (spec/opt.md §1, Pack),
    finite values and signed zeros repeating a prime period (a NaN or inf there would reach every output);
    and a 32 x 32 pair with the specials for the transposed right operand."""
    hd = host_dtype(dt)
    pa, pb = rng.standard_normal(PERIOD).astype(hd), rng.standard_normal(PERIOD).astype(hd)
    pa[[3, 40]], pb[[7, 22]] = -0.0, -0.0
    small = _mm_data(32, 32, 32)(rng, dt)
    wide = [Input("a", np.resize(pa, (64, 256)), dt), Input("b", np.resize(pb, (256, cols)), dt)]
    return [*wide, Input("c", small[0].value, dt), Input("d", small[1].value, dt)]


def _max_data(rng: np.random.Generator, dt: DType) -> list[Input]:
    """Rows and columns whose MAX only an exact reduce gets bit for bit: ties of 0.0 and -0.0 at the top,
    two NaNs with different payloads and signs, ±inf."""
    hd = host_dtype(dt)
    x = rng.standard_normal((16, 64)).astype(hd)
    x[0] = -np.abs(x[0])
    x[0, ::3], x[0, 1::3] = 0.0, -0.0
    x[:, 5] = -np.abs(x[:, 5])
    x[::2, 5], x[1::2, 5] = -0.0, 0.0
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint64)
    quiet = int(np.array([np.nan], hd).view(bits.dtype)[0])
    sign = 1 << (8 * bits.itemsize - 1)
    bits[1, 9], bits[1, 40] = quiet | 1, quiet | 2 | sign  # a row's two NaNs
    bits[4, 7], bits[11, 7] = quiet | 3 | sign, quiet | 4  # a column's two NaNs
    x[2, 30], x[3, 31], x[6, 33] = np.inf, -np.inf, np.inf
    return [Input("a", x, dt)]


def _int_data(rng: np.random.Generator, dt: DType) -> list[Input]:
    """Values near the ends of the range, so the sums wrap (exact in any order, spec/opt.md §2)."""
    info = np.iinfo(host_dtype(dt))
    x = rng.integers(info.max // 4, info.max, size=(16, 64), endpoint=True).astype(host_dtype(dt))
    x[::3] = x[::3] * -1 - 1
    x[5, :7] = info.min
    return [Input("a", x, dt)]


def _ew_data(rng: np.random.Generator, dt: DType) -> list[Input]:
    """Two operands with signed zeros, ±inf and NaN payloads (never two NaNs at one element), and columns
    whose MAX is an elementwise tie of 0.0 and -0.0 (the rest of the column negative ties), so the reduce
    over them shows which zero the elementwise MAX took, and a NaN a comparison must not take as true."""
    hd = host_dtype(dt)
    x, y = rng.standard_normal((24, 32)).astype(hd), rng.standard_normal((24, 32)).astype(hd)
    x.flat[::5], y.flat[2::5] = -0.0, 0.0
    for j, (zx, zy) in ((0, (0.0, -0.0)), (1, (-0.0, 0.0))):
        x[:, j] = y[:, j] = -np.abs(x[:, j]) - 1
        x[4, j], y[4, j] = zx, zy
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint64)
    bits[6, 3] = np.array([np.nan], hd).view(bits.dtype)[0] | 9
    y[7, 5], x[8, 11], y[9, 12] = np.nan, np.inf, -np.inf
    return [Input("a", x, dt), Input("b", y, dt)]


# `a @ b` keeps each output's reduce in order when its right operand is not stride-1 along the reduce (lanes
# along the output, rows of a register tile); the epilogues are the training kernels' (relu, a WHERE gate)
ROWS: dict[str, BitsRow] = {
    "OPT tile": BitsRow(
        ("(a @ b).relu()", "((a @ b) < b[:1]).where((a @ b) * 2, b[:1])"),
        _mm_data(24, 32, 32),
        (dtypes.float32,),
    ),
    "OPT packed panel": BitsRow(
        ("a @ b", "c @ d.T.contiguous().T"), _wide_data, (dtypes.float32,), packs=True
    ),
    "OPT max reduce": BitsRow(
        ("a._reduce(Ops.MAX, 0, False)", "a._reduce(Ops.MAX, 1, False)"),
        _max_data,
        (dtypes.float32, dtypes.float64),
        native=frozenset({Ops.MAX}),
    ),
    "OPT int sum": BitsRow(("a.sum(1)", "a.sum(0)"), _int_data, (dtypes.int32, dtypes.int64)),
    # vectorised elementwise ops (compare, WHERE, MAX, NEG, *, /, a float -> float cast) in a reduce's nest
    # (the pass leaves nests without a reduce to the compiler); a MAX reduce over them, since it only selects
    "OPT elementwise": BitsRow(
        ("((a < b).where(-a, a.maximum(b)) * 2 / 3.0).cast(dtypes.float64)._reduce(Ops.MAX, 0, False)",),
        _ew_data,
        (dtypes.float32,),
        native=frozenset({Ops.CMPLT, Ops.WHERE, Ops.MAX, Ops.NEG, Ops.MUL, Ops.FDIV}),
    ),
}


def _panel_cols(target: Target) -> int:
    """Columns of a 256-row float32 right operand whose span reaches the target's packing threshold (half
    its L2: spec/opt.md §3.1), a multiple of 16, at least 512."""
    span = pack_min_span(target.backend.capabilities.cache_sizes)
    return max(512, 16 * -(-span // (256 * 4 * 16)))


def _not_claimed(target: Target, row: BitsRow, dt: DType) -> str | None:
    caps = target.backend.capabilities
    if caps.vector_width <= 0:
        return (
            f"not claimed: {target.name} declares no vector width (capabilities.vector_width == 0): the opt "
            "pass does not run there, so OPT=1 is OPT=0"
        )
    if row.packs and caps.scratch <= 0:
        return f"not claimed: {target.name} declares no scratch memory: the opt pass packs no panel there"
    if missing := sorted(op.name for op in row.native - caps.ops):
        return (
            f"not claimed: {target.name} does not render {', '.join(missing)} (core decomposes them): "
            "the opt pass vectorises only ops the target renders"
        )
    return target.not_claimed(dt)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per kernel class and dtype."""

    def cases(target: Target, _: str) -> list[Case]:
        return [
            Case(row, dt, "opt bits", _not_claimed(target, spec, dt), spec, "opt")
            for row, spec in ROWS.items()
            for dt in spec.dtypes
        ]

    parametrize_suite(metafunc, cases)


def _build(target: Target, dt: DType, inputs: list[Input], exprs: tuple[str, ...]) -> list[Tensor]:
    tensors = {i.name: tensor(i.value, i.dtype, target.name) for i in inputs}
    ns = namespace(target.name, dt, **tensors)
    return [eval(compile(e, "<conformance case>", "eval"), ns) for e in exprs]


def _run(target: Target, dt: DType, inputs: list[Input], exprs: tuple[str, ...]) -> list[np.ndarray]:
    # one schedule per program: realized together, programs sharing `a @ b` would get it as a kernel of its
    # own and their epilogues as elementwise kernels, which the pass leaves alone
    return [_build(target, dt, inputs, (e,))[0].numpy() for e in exprs]


def _path(target: Target, out: Tensor, packs: bool) -> str | None:
    """Why the pass did not take the class's path for `out`'s kernel (None when it did)."""
    kernel = out.schedule_linear().src[-1]  # the kernel CALL that computes `out`
    uops = lower(kernel, target.backend.capabilities).uops
    if not any(u.dtype.count > 1 for u in uops):
        return "the opt pass made no vector value: the path under test did not run"
    if packs and not any(u.op is Ops.DEFINE_LOCAL for u in uops):
        return "the opt pass packed no panel into scratch (no DEFINE_LOCAL)"
    return None


def _diff(got: np.ndarray, want: np.ndarray, limit: int = 6) -> list[str]:
    """The elements whose bytes differ, with both bit patterns."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return [f"OPT=1 gave {got.dtype}{got.shape}, OPT=0 {want.dtype}{want.shape}"]
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    gb, wb = got.view(width), want.view(width)
    bad = np.argwhere(gb != wb)
    out = [f"{len(bad)} of {got.size} elements differ in their bits:"]
    for row in bad[:limit]:
        idx = tuple(int(i) for i in row)
        out.append(
            f"  {list(idx)}: OPT=1 {got[idx]} ({int(gb[idx]):#x}), OPT=0 {want[idx]} ({int(wb[idx]):#x})"
        )
    return out


def _repro(target: Target, dt: DType, inputs: list[Input], expr: str) -> str:
    body = "\n".join(
        [
            "from uopgrad.config import Context",
            "with Context(OPT=1):",
            f"    got = ({expr}).numpy()",
            "with Context(OPT=0):",
            f"    want = ({expr}).numpy()",
        ]
    )
    tail = ("assert got.tobytes() == want.tobytes(), (got, want)  # spec/opt.md §2: bit-identical",)
    return snippet(target.name, dt, inputs, body, tail)


def test_opt_bits(case: Case, target: Target, record: Recorder) -> None:
    """Each program of the class with OPT=1 and with OPT=0 on the backend: the same bytes."""
    dt, row = case.dtype, case.payload
    assert dt is not None and isinstance(row, BitsRow)
    inputs = row.data(case_rng(case), dt, _panel_cols(target)) if row.packs else row.data(case_rng(case), dt)
    with Context(OPT=0):
        want = _run(target, dt, inputs, row.exprs)
    with Context(OPT=1):  # whatever the environment says
        got = _run(target, dt, inputs, row.exprs)
    problems: list[str] = []
    for expr, g, w in zip(row.exprs, got, want):
        with Context(OPT=1):
            out = _build(target, dt, inputs, (expr,))[0]
            why = _path(target, out, row.packs and target.backend.capabilities.scratch > 0)
        if why is None and g.tobytes() == w.tobytes() and g.dtype == w.dtype:
            continue
        lines = (
            [f"[{expr}] on {target.name}: {why}"] if why else [f"[{expr}] OPT=1 != OPT=0 on {target.name}"]
        )
        lines += [] if why else _diff(g, w)
        problems.append("\n".join([*lines, "repro:", _repro(target, dt, inputs, expr)]))
    if problems:
        raise Failure("\n\n".join(problems))
    record.error(0.0)  # bit for bit
