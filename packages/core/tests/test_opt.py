"""The opt pass (uopgrad.codegen.opt, spec/opt.md), structurally: which nests it rewrites and into what,
for a backend with 64-byte vectors; the C it renders to. Values are checked against OPT=0 on the CPU
backend in spec/test_opt_props.py."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor, UOp, dtypes
from uopgrad.backends.reference import REFERENCE_OPS
from uopgrad.codegen import Program, Target
from uopgrad.codegen.opt import (
    ACCS,
    ACCS_DEFAULT,
    DOT_TILE,
    LANEWISE_OPS,
    NARROW_ROWS,
    ROWS,
    STREAM_BYTES,
    STREAM_MIN_ITEMS,
    columns,
    split,
)
from uopgrad.config import Context
from uopgrad.pipeline import lower
from uopgrad.renderer.vector import GCCVectorRenderer
from uopgrad.schedule import schedule


def loops(width: int, scratch: int = 0, ops: frozenset[Ops] = REFERENCE_OPS) -> Target:
    """A loop-style target with vectors of `width` bytes (REFERENCE's ops unless told)."""
    return Target(frozenset(), ops, vector_width=width, scratch=scratch)


pytestmark = pytest.mark.usefixtures("reference_default")
COLS = columns(64)  # the vectors of a tile's row with AVX-512: one cache line


def program(out: Tensor, width: int = 64) -> Program:
    return lower(schedule(out.uop.sink()).kernels[-1], loops(width))


def ones(*shape: int, dt: type = np.float32) -> Tensor:
    return Tensor(np.ones(shape, dt)).realize()


def vectors(prg: Program) -> set[int]:
    return {u.dtype.count for u in prg.uops if u.dtype.count > 1}


def test_split_keeps_the_range_number_and_covers_every_index():
    r = UOp(Ops.RANGE, dtypes.index, (UOp(Ops.CONST, dtypes.index, (), 12),), (3, "loop"))
    outer, exprs = split(r, 4)
    assert outer.arg == (3, "loop") and outer.src[0].arg == 3 and len(exprs) == 4
    got = sorted(
        int(e.substitute({outer: UOp(Ops.CONST, dtypes.index, (), o)}).simplify().arg)
        for o in range(3)
        for e in exprs
    )
    assert got == list(range(12))


def test_a_row_sum_gets_a_vector_accumulator_and_a_pairwise_lane_tree():
    prg = program(ones(8, 64).sum(1))
    assert vectors(prg) == {16}  # 64 bytes of float32
    geps = [u for u in prg.uops if u.op is Ops.GEP]
    assert [g.arg[0] for g in geps] == list(range(16))
    first_add = next(u for u in prg.uops if u.op is Ops.ADD and u.src[0].op is Ops.GEP)
    assert (first_add.src[0].arg, first_add.src[1].arg) == ((0,), (1,))  # adjacent lanes first


@pytest.mark.parametrize("width", [64, 32])
def test_an_unrolled_reduce_has_independent_accumulators_in_one_loop(width: int):
    prg = program(ones(8, 1024).sum(1), width)
    lanes, accs = width // 4, ACCS.get(width, ACCS_DEFAULT)
    assert accs > 1  # a chain of dependent vector adds would be latency-bound
    regs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]
    assert len(regs) == accs and all(u.dtype == dtypes.float32.vec(lanes) for u in regs)
    loops = [u for u in prg.uops if u.op is Ops.RANGE and u.arg[1] == "reduce"]
    assert [u.src[0].arg for u in loops] == [1024 // (lanes * accs)]
    loads = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count > 1]
    assert len(loads) == accs  # accumulator k takes the vectors k, k+accs, ... of the row
    # combined lane-wise first ((a0+a1)+(a2+a3)), then the pairwise lane tree of one vector
    assert sum(u.op is Ops.ADD and u.dtype == dtypes.float32.vec(lanes) for u in prg.uops) == 2 * accs - 1
    assert sum(u.op is Ops.GEP for u in prg.uops) == lanes


def test_a_short_reduce_gets_as_many_accumulators_as_divide_its_steps():
    # 48 = 3 steps of 16 lanes: one accumulator; 32 = 2 steps: two
    for n, accs in ((48, 1), (32, 2)):
        regs = [u for u in program(ones(8, n).sum(1)).uops if u.op is Ops.DEFINE_REG]
        assert len(regs) == accs


def test_a_matmul_is_a_register_tile_with_one_reduce_loop():
    prg = program(ones(16, 32) @ ones(64, 64)[:32, :64])  # 2 row tiles, 4 column tiles: the order shows
    assert vectors(prg) == {16}
    accs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]
    assert len(accs) == ROWS * COLS and all(a.dtype == dtypes.float32.vec(16) for a in accs)
    assert sum(u.op is Ops.RANGE and u.arg[1] == "reduce" for u in prg.uops) == 1
    loads = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count > 1]
    assert len(loads) == COLS  # the right operand's row is loaded once for all the rows of the tile
    # the loop over column tiles is outside the loop over row tiles
    loops = [u for u in prg.uops if u.op is Ops.RANGE and u.arg[1] == "loop"]
    assert [u.src[0].arg for u in loops] == [64 // (16 * COLS), 16 // ROWS]


def test_narrower_vectors_get_a_tile_of_fewer_rows():
    # 16 vector registers (AVX2): 2 rows of 4 vectors, 8 accumulators as with AVX-512, leave room for loads
    prg = program(ones(32, 32) @ ones(64, 64)[:32, :64], width=32)
    accs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]
    assert NARROW_ROWS < ROWS and len(accs) == NARROW_ROWS * columns(32) == 8
    assert all(a.dtype == dtypes.float32.vec(8) for a in accs)


@pytest.mark.parametrize(("width", "line_bytes"), [(16, 64), (32, 128), (64, 64)])
def test_a_tile_row_reads_its_columns_of_the_right_operand_per_reduce_step(width, line_bytes):
    # AVX-512: one cache line per step (two measured slower on a Zen 4); 16 registers: 4 vectors, so that a
    # tile of 8 accumulators has 2 rows, each a broadcast and 4 multiplies (spec/opt.md §1)
    prg = program(ones(32, 32) @ ones(64, 64)[:32, :64], width=width)
    loads = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count > 1]
    assert len(loads) == columns(width) and sum(u.dtype.itemsize for u in loads) == line_bytes


@pytest.mark.parametrize("flat", [False, True])
def test_a_dot_product_matmul_is_a_tile_of_vector_accumulators(flat: bool):
    out = ones(32, 64) @ ones(32, 64).T  # both operands stride-1 along the reduce: unrolled
    if flat:  # stored into a flat buffer, as realize does: one output range, read as r // 32 and r % 32,
        # split back into rows and columns before the tile is made
        st = UOp.new_buffer("REFERENCE", 32 * 32, dtypes.float32).store(out.uop.reshape((32 * 32,)))
        prg = lower(schedule(st.sink()).kernels[-1], loops(64))
    else:
        prg = program(out)
    accs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]  # 64 = 4 steps of 16 lanes: 4 accumulators
    assert len(accs) == DOT_TILE * DOT_TILE * ACCS[64]
    assert all(a.dtype == dtypes.float32.vec(16) for a in accs)
    loads = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count > 1]
    assert len(loads) == 2 * DOT_TILE * ACCS[64]  # each row's and each column's load shared by the other's


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_a_float_max_stored_into_a_flat_buffer_lowers(dt: type):
    # realize stores a (2, 3) max into a flat buffer: its output range is read as r // 3 and r % 3, and the
    # exact fallback's loop must still nest (found by the conformance suite's programs of functions)
    x = Tensor(np.arange(12, dtype=dt).reshape(2, 3, 2)).realize()
    m = x.max(-1)
    st = UOp.new_buffer("REFERENCE", 6, m.dtype).store(m.uop.reshape((6,)))
    prg = lower(schedule(st.sink()).kernels[-1], loops(64))
    assert any(u.op is Ops.STORE for u in prg.uops)


def test_an_elementwise_nest_becomes_vector_loads_ops_and_stores_on_a_loop_style_target():
    # GCC does not vectorise it at -O1 with -fwrapv (its int indices may wrap): the opt pass does
    prg = program(ones(64, 64) * 2 + 1)
    assert vectors(prg) == {16}
    assert [u.dtype.count for u in prg.uops if u.op in (Ops.LOAD, Ops.STORE)] == [16, 1]  # STORE is void
    assert [u.src[0].arg for u in prg.uops if u.op is Ops.RANGE] == [64, 64 // 16]
    # one loop: its index is the loop variable, which GCC vectorises itself
    assert vectors(program((ones(64, 64) * 2 + 1).reshape(64 * 64))) == set()
    # on a grid target (whose lanes are capped: OpenCL C's vectors) the work-items cover it: left alone
    from uopgrad.codegen.index import lower_indexing
    from uopgrad.codegen.opt import GRID_LANES, optimize

    sink = lower_indexing(schedule((ones(64, 64) * 2 + 1).uop.sink()).kernels[-1].src[0])
    assert not any(u.dtype.count > 1 for u in optimize(sink, 64, lanes=GRID_LANES).toposort())


def test_an_elementwise_nest_that_reads_its_output_elsewhere_is_left_alone():
    # x[:, 1:] = x[:, :-1] + 1 in one nest would read what the lane before wrote (the scheduler copies
    # x[:, :-1] first; the copy's kernel is made to read x itself here): not vectorised. The copy is
    from uopgrad.codegen.index import lower_indexing
    from uopgrad.codegen.opt import optimize

    buf = UOp.new_buffer("REFERENCE", 4 * 65, dtypes.float32)
    x = buf.reshape((4, 65))
    st = x.shrink(((0, 4), (1, 65))).store(x.shrink(((0, 4), (0, 64))) + 1.0)
    sink = lower_indexing(schedule(st.sink()).kernels[-1].src[0])
    (store,) = [u for u in sink.toposort() if u.op is Ops.STORE]
    (load,) = [u for u in sink.toposort() if u.op is Ops.LOAD]
    own = load.src[0].replace(src=(store.src[0].src[0], load.src[0].src[1]))  # x[r] into x[r + 1]
    shifted = sink.substitute({load.src[0]: own})
    assert any(u.dtype.count > 1 for u in optimize(sink, 64).toposort())
    assert not any(u.dtype.count > 1 for u in optimize(shifted, 64).toposort())


def fallback_loops(prg: Program) -> list[UOp]:
    return [u for u in prg.uops if u.op is Ops.RANGE and u.src[0].op is Ops.WHERE]


def test_a_float_max_along_its_reduce_axis_is_unrolled_with_an_exact_fallback():
    prg = program(ones(8, 64)._reduce(Ops.MAX, 1, False))  # the bare MAX reduce (Tensor.max adds a NaN sum)
    # the lane tree halves in vectors (even lanes against odd ones: the scalar tree's pairs) down to two
    # lanes, so only the last pair is a scalar select, which compilers turn into a branch
    assert vectors(prg) == {16, 8, 4, 2}
    assert sum(u.op is Ops.MAX and u.dtype.count == 1 for u in prg.uops) == 2  # the last pair, the redo
    loops = fallback_loops(prg)  # redone in order only where the lanes' result is a zero or a NaN
    assert len(loops) == 1 and loops[0].src[0].src[1].arg == 64 and loops[0].src[0].src[2].arg == 0
    # lanes in ACCS accumulators, and the scalar accumulator of the redo in order
    assert sorted(u.dtype.count for u in prg.uops if u.op is Ops.DEFINE_REG) == [1, *[16] * ACCS[64]]


def test_an_integer_max_is_unrolled_without_a_fallback():
    prg = program(ones(8, 64, dt=np.int32).max(1))
    assert vectors(prg) == {16} and not fallback_loops(prg)


def test_a_max_along_the_output_axis_gets_vector_lanes_each_in_the_scalar_order():
    prg = program(ones(8, 64).max(0))
    assert vectors(prg) == {16}
    assert any(u.op is Ops.MAX and u.dtype == dtypes.float32.vec(16) for u in prg.uops)


@pytest.mark.parametrize("width", [16, 32, 64])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_column_reduce_is_a_tile_of_vectors_that_share_no_load(width: int, op: str):
    prg = program(getattr(ones(64, 512), op)(0), width)
    lanes, cols = width // 4, STREAM_BYTES // width
    outputs = [u for u in prg.uops if u.op is Ops.RANGE and u.arg[-1] == "loop"]
    assert [int(r.src[0].arg) for r in outputs] == [512 // lanes // cols]
    regs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]
    # one accumulator per vector of the tile (a float max: its NaN sum's and its maximum's)
    assert len(regs) == cols * (2 if op == "max" else 1) and {r.dtype.count for r in regs} == {lanes}
    inputs = [u for u in prg.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count > 1]
    assert len(inputs) == cols  # each vector of a row read once, for every accumulator that needs it


def test_a_narrow_column_reduce_keeps_output_iterations_for_the_cores():
    prg = program(ones(64, 128).sum(0), 32)  # 16 vectors of 8: a tile of 4 would leave 4 iterations
    outputs = [u for u in prg.uops if u.op is Ops.RANGE and u.arg[-1] == "loop"]
    assert [int(r.src[0].arg) for r in outputs] == [STREAM_MIN_ITEMS]
    assert sum(u.op is Ops.DEFINE_REG for u in prg.uops) == 2


def vector_ops(prg: Program) -> set[Ops]:
    return {u.op for u in prg.uops if u.dtype.count > 1}


@pytest.mark.parametrize(
    "epilogue",
    [
        lambda mm: mm.relu(),
        lambda mm: (mm < 1).where(mm, -mm),
        lambda mm: mm.maximum(0.5),
        lambda mm: (mm > 0).cast(dtypes.float64),
    ],
)
def test_a_matmul_with_a_training_epilogue_stays_a_register_tile(epilogue):
    prg = program(epilogue(ones(32, 32) @ ones(32, 32)))
    assert sum(u.op is Ops.DEFINE_REG for u in prg.uops) == ROWS * COLS
    masks = [u for u in prg.uops if u.dtype.scalar() == dtypes.bool and u.dtype.count > 1]
    assert masks or Ops.MAX in vector_ops(prg)  # comparisons are lane masks, MAX a select


def test_a_reduce_of_masked_values_gets_a_vector_accumulator():
    prg = program(ones(8, 64).relu().sum(1))
    assert {Ops.CMPLT, Ops.WHERE, Ops.DEFINE_REG} <= vector_ops(prg)


def test_ops_the_backend_lacks_get_no_vector_form():
    # MAX is computed lane by lane and decomposed as a scalar op (selects); the matmul around it stays vector
    out = (ones(32, 32) @ ones(32, 32)).maximum(0.5)
    prg = lower(schedule(out.uop.sink()).kernels[-1], loops(64, ops=REFERENCE_OPS - {Ops.MAX}))
    assert not any(u.op is Ops.MAX for u in prg.uops)
    assert any(u.op is Ops.WHERE for u in prg.uops)
    assert all(u.dtype.count == 1 for u in prg.uops if u.op in (Ops.WHERE, Ops.CMPLT, Ops.CMPNE))
    assert vectors(prg) == {16}


def test_an_op_without_a_vector_form_is_computed_lane_by_lane():
    # the epilogue of d(x**2): one POW left the whole matmul scalar before
    mm = ones(32, 32) @ ones(32, 32)
    prg = program(mm.pow(1.0) * 2.0)
    assert vectors(prg) == {16}
    assert sum(u.op is Ops.POW for u in prg.uops) == 16 * 8  # 16 lanes of each row of the 8-row tile
    assert all(u.dtype.count == 1 for u in prg.uops if u.op is Ops.POW)
    assert any(u.op is Ops.GEP for u in prg.uops)


def test_ops_computed_lane_by_lane_are_kept_few():
    # each lane and tile copy of such an op is a scalar op the C compiler pays for (LANEWISE_OPS): over the
    # budget the tile is one row, and a nest that is still over it stays as it was
    mm = ones(32, 32) @ ones(32, 32)
    few, many = (mm.pow(1.0) * 2.0), mm.pow(1.0).pow(1.1)  # 1 and 2 POWs per output
    assert 16 * ROWS * 1 <= LANEWISE_OPS < 16 * ROWS * 2
    assert sum(u.op is Ops.POW for u in program(few).uops) == 16 * ROWS
    assert sum(u.op is Ops.POW for u in program(many).uops) == 16 * 2  # one row of 16 lanes
    assert vectors(program(many)) == {16}
    huge = mm
    for k in range(LANEWISE_OPS // 16 + 1):
        huge = huge.pow(1.0 + k / 64)
    assert vectors(program(huge)) == set()


def test_integer_sums_are_unrolled_too():
    assert vectors(program(ones(8, 64, dt=np.int32).sum(1))) == {16}


def test_odd_sizes_fall_back_to_fewer_lanes_or_none():
    assert vectors(program(ones(8, 24).sum(1))) == {8}
    assert vectors(program(ones(8, 17).sum(1))) == set()


@pytest.mark.parametrize("width", [0, 64])
def test_opt0_and_width_0_turn_the_pass_off(width: int):
    out = ones(8, 64).sum(1)
    with Context(OPT=0):
        assert vectors(program(out, width)) == set()
    assert (vectors(program(out, width)) != set()) == (width > 0)


def test_the_c_of_a_select_is_a_mask_of_the_selected_values_width():
    mm = ones(32, 32) @ ones(32, 32)
    src = GCCVectorRenderer().render(program((mm > 0).where(mm.cast(dtypes.float64), 2.0), 32))
    assert "__uopgrad_vsel(__uopgrad_double_4, __uopgrad_long_long_4, __builtin_convertvector(" in src
    assert "?" not in src.split("void ", 1)[1]  # C has no ?: on vectors


def test_the_c_of_a_vector_kernel_has_its_typedefs_and_element_aligned_accesses():
    src = GCCVectorRenderer().render(program(ones(32, 32) @ ones(32, 32)))
    assert "typedef float __uopgrad_float_16 __attribute__((vector_size(64)));" in src
    assert "aligned(4)" in src and "(const __uopgrad_float_16u*)" in src


def packed(out: Tensor, width: int = 32, scratch: int = 64 * 1024) -> Program:
    return lower(schedule(out.uop.sink()).kernels[-1], loops(width, scratch))


def test_a_matmul_packs_the_right_operands_panel_once_per_column_tile():
    # 512-float rows: the panel is a column of cache lines 2 KB apart, which a scratch array makes contiguous
    prg = packed(ones(64, 512) @ ones(512, 512))
    local = [u for u in prg.uops if u.op is Ops.DEFINE_LOCAL]
    line = 8 * columns(32)  # the floats of a tile's row: 4 vectors of 8 (AVX2)
    assert len(local) == 1 and local[0].dtype.size == 512 * line  # 512 reduce steps of one row
    loops = [u for u in prg.uops if u.op is Ops.RANGE]
    # columns, then (inside them, one after the other) the copy over the reduce steps and the row tiles
    assert [u.src[0].arg for u in loops] == [512 // line, 512, 64 // NARROW_ROWS, 512]
    copy, rows = loops[1], loops[2]
    between = prg.uops[prg.uops.index(copy) : prg.uops.index(rows)]
    stores = [u for u in between if u.op is Ops.STORE]
    assert len(stores) == columns(32) and all(s.src[0].src[0] is local[0] for s in stores)
    # the row tiles read the panel only from the scratch array; the left operand still from its buffer
    inner = prg.uops[prg.uops.index(loops[3]) :]
    vec_loads = [u for u in inner if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.dtype.count > 1]
    assert len(vec_loads) == columns(32)
    assert all(ld.src[0].src[0].op is Ops.AFTER and ld.src[0].src[0].src[0] is local[0] for ld in vec_loads)


@pytest.mark.parametrize(
    "case",
    ["no scratch", "too few row tiles", "too few rows", "panel too large", "rows outside", "within L1"],
)
def test_the_panel_is_packed_only_where_it_pays_and_fits(case: str):
    from uopgrad.codegen.opt import PACK_MIN_OUTPUT_ROWS, PACK_MIN_ROWS, PACK_MIN_SPAN, Choice

    m = {"too few row tiles": NARROW_ROWS * (PACK_MIN_ROWS - 1), "too few rows": PACK_MIN_OUTPUT_ROWS // 2}
    # 4096 steps: even the narrowest tile's panel, one 32-byte vector per step, is 128 KB
    k = {"panel too large": 4096, "within L1": 8}.get(case, 512)
    n = 256 if case == "within L1" else 512  # a panel over 8 rows of 1 KB
    assert (k * n * 4 >= PACK_MIN_SPAN) == (case != "within L1")
    assert NARROW_ROWS * PACK_MIN_ROWS <= PACK_MIN_OUTPUT_ROWS // 2  # enough row tiles, too few rows
    choice = Choice(rows=NARROW_ROWS, cols=columns(32), swap=False) if case == "rows outside" else None
    sink = schedule((ones(m.get(case, 64), k) @ ones(k, n)).uop.sink()).kernels[-1]
    prg = lower(sink, loops(32, 0 if case == "no scratch" else 64 * 1024), choice)
    assert not any(u.op is Ops.DEFINE_LOCAL for u in prg.uops)
    assert any(u.op is Ops.DEFINE_REG and u.dtype.count > 1 for u in prg.uops)  # still a register tile


def test_a_panel_too_large_for_the_scratch_takes_a_narrower_tile_of_as_many_accumulators():
    # 1024 steps of the heuristic's 4 vectors (AVX2) are 128 KB; of 2 vectors, 64 KB: the scratch's size
    prg = packed(ones(64, 1024) @ ones(1024, 512), 32, 64 * 1024)
    local = [u for u in prg.uops if u.op is Ops.DEFINE_LOCAL]
    assert len(local) == 1 and local[0].dtype.size == 1024 * 16
    accs = [u for u in prg.uops if u.op is Ops.DEFINE_REG]
    assert len(accs) == NARROW_ROWS * columns(32) and all(a.dtype == dtypes.float32.vec(8) for a in accs)
    rows = [u for u in prg.uops if u.op is Ops.RANGE and u.arg[1] == "loop"][-1]
    assert rows.src[0].arg == 64 // (2 * NARROW_ROWS)
    # with room for it, the heuristic's own tile
    wide = packed(ones(64, 1024) @ ones(1024, 512), 32, 128 * 1024)
    assert [u.dtype.size for u in wide.uops if u.op is Ops.DEFINE_LOCAL] == [1024 * 32]


def test_a_transposed_right_operand_is_gathered_into_the_panel_once_and_the_tile_reads_vectors():
    # g @ W.T: both operands stride-1 along the reduce. Without scratch, a dot tile (the reduce reordered);
    # with it, W's rows gathered column by column into the panel's copy, then the upcast tile of x @ W
    w = ones(256, 256)
    plain = program(ones(64, 256) @ w.T, 32)
    assert sum(u.op is Ops.GEP for u in plain.uops) > 0  # lane trees: the dot tile
    prg = packed(ones(64, 256) @ w.T)
    assert not any(u.op is Ops.GEP for u in prg.uops)  # each output's reduce in its own order
    loops = [u for u in prg.uops if u.op is Ops.RANGE]
    copy, rows = loops[1], loops[2]
    between = prg.uops[prg.uops.index(copy) : prg.uops.index(rows)]
    assert any(u.op is Ops.STACK and u.src[0].op is Ops.LOAD for u in between)  # the gather, in the copy
    after = prg.uops[prg.uops.index(rows) :]
    assert not any(u.op is Ops.STACK and len({id(s) for s in u.src}) > 1 for u in after)  # none in the tile


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("rows", [8, 64])
def test_every_tile_beam_tries_on_a_dot_product_matmul_keeps_the_heuristics_reduce_order(
    width: int, rows: int
):
    # x @ W.T goes through the gathered panel (each output's reduce in order) or the dot tile (reordered);
    # which one is the heuristic's decision: with 8 rows there are too few to pack, with 64 it packs.
    # A tile of fewer rows would pack the 8-row product: BEAM picked such a kernel and changed its bits
    from uopgrad.codegen.opt import choices

    sink = schedule((ones(rows, 256) @ ones(256, 256).T).uop.sink()).kernels[-1]

    def reordered(choice: object) -> bool:
        prg = lower(sink, loops(width, 64 * 1024), choice)  # type: ignore[arg-type]
        return any(u.op is Ops.GEP for u in prg.uops)  # the lane trees of unrolled reduces

    heuristic = reordered(None)
    assert heuristic == (rows == 8)
    assert all(reordered(c) == heuristic for c in choices(width))


def test_a_gathered_bool_mask_stays_out_of_the_panel_and_renders():
    # a running sum along rows reads the triangular mask column by column, a gather of bool lanes: a lane
    # mask, which no buffer (of 0/1 bytes) holds, so the panel's copy must leave it where it is
    x = Tensor(np.random.default_rng(0).standard_normal((20, 30)).astype(np.float32)).realize()
    prg = packed(x.cumsum(1), 64)
    assert not any(u.op is Ops.DEFINE_LOCAL and u.dtype.base.scalar() == dtypes.bool for u in prg.uops)
    GCCVectorRenderer().render(prg)
    np.testing.assert_allclose(x.cumsum(1).numpy(), np.cumsum(x.numpy(), 1), rtol=1e-5, atol=1e-5)
