"""The opt pass's tile choices derived from the target's facts (spec/opt.md §3.1): the rows and columns from
the register count the vector width implies, the packing threshold from the L1d of `Target.cache_sizes`.
Other machines' facts are simulated by cache sizes; no timing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from uopgrad import Ops, Tensor
from uopgrad.backends.reference import REFERENCE_OPS
from uopgrad.codegen import Program, Target
from uopgrad.codegen.opt import (
    NARROW_COLS,
    NARROW_ROWS,
    NEVER_PACK,
    PACK_MIN_SPAN,
    ROWS,
    Choice,
    choices,
    columns,
    heuristic,
    optimize,
    pack_min_span,
    registers,
    rows,
)
from uopgrad.pipeline import lower
from uopgrad.schedule import schedule

pytestmark = pytest.mark.usefixtures("reference_default")

ZEN3 = (32 * 1024, 512 * 1024, 32 << 20)  # AVX2: the machine the constants were measured on
XEON = (48 * 1024, 2 << 20, 480 << 20)  # AVX-512: a Sapphire-Rapids-class Xeon
BIG_L2 = (64 * 1024, 16 << 20, 0)  # a 64 KB L1d, a large shared L2, no L3


def test_rows_and_columns_follow_the_register_file_that_the_width_implies():
    assert (registers(64), registers(32), registers(16)) == (32, 16, 16)
    assert (rows(64), rows(32), rows(16)) == (ROWS, NARROW_ROWS, NARROW_ROWS) == (8, 2, 2)
    assert (columns(64), columns(32), columns(16)) == (1, NARROW_COLS, NARROW_COLS) == (1, 4, 4)
    for width in (16, 32, 64):
        c = heuristic(width)
        assert (c.rows, c.cols) == (rows(width), columns(width))
        # 8 accumulators, their rows' broadcasts and a row of the panel: the file holds them
        assert c.rows * c.cols == 8 and c.rows * c.cols + c.rows + c.cols <= registers(width)
        # the cache sizes never change the tile's shape, only its packing threshold
        assert dataclasses.replace(heuristic(width, XEON), pack_span=c.pack_span) == c


@pytest.mark.parametrize(
    ("caches", "span"),
    [
        ((), PACK_MIN_SPAN),
        ((0, 0, 0), PACK_MIN_SPAN),
        (ZEN3, 16 * 1024),
        (XEON, 24 * 1024),
        (BIG_L2, 32 * 1024),
    ],
)
def test_the_packing_threshold_is_half_the_l1d_or_the_default_without_one(caches: tuple[int, ...], span: int):
    assert pack_min_span(caches) == span == heuristic(64, caches).pack_span


def packs(m: int, k: int, n: int, choice: Choice | None, width: int = 32) -> bool:
    """Whether the matmul m x k @ k x n packs its right operand's panel into scratch."""
    a, b = Tensor(np.ones((m, k), np.float32)).realize(), Tensor(np.ones((k, n), np.float32)).realize()
    kernel = schedule((a @ b).uop.sink()).kernels[-1]
    target = Target(frozenset(), REFERENCE_OPS, vector_width=width, scratch=64 * 1024)
    prg: Program = lower(kernel, target, choice)
    assert any(u.op is Ops.DEFINE_REG and u.dtype.count > 1 for u in prg.uops)  # a register tile either way
    return any(u.op is Ops.DEFINE_LOCAL for u in prg.uops)


@pytest.mark.parametrize("width", [32, 64])
def test_another_machines_l1d_changes_which_matmuls_pack(width: int):
    # the right operand's rows are 2 KB apart: a panel over 8, 12 or 16 of them spans 16, 24 or 32 KB
    small, mid, big = (64, 8, 512), (64, 12, 512), (64, 16, 512)
    zen3, xeon, big_l1 = (heuristic(width, c) for c in (ZEN3, XEON, BIG_L2))
    assert packs(*small, zen3, width) and packs(*mid, zen3, width) and packs(*big, zen3, width)
    assert not packs(*small, xeon, width) and packs(*mid, xeon, width) and packs(*big, xeon, width)
    assert not packs(*small, big_l1, width) and not packs(*mid, big_l1, width) and packs(*big, big_l1, width)
    # without cache sizes the default: half a 32 KB L1d
    assert packs(*small, None, width) and PACK_MIN_SPAN == pack_min_span(ZEN3)


def test_beam_times_the_heuristics_tile_packed_and_unpacked_and_every_candidate_packs_alike():
    cs = choices(64, XEON)
    assert cs[0] == heuristic(64, XEON) and [c.pack_span for c in cs[1:3]] == [0, NEVER_PACK]
    assert all(c.pack_span == pack_min_span(XEON) for c in cs[3:])
    assert len(cs) == len(choices(64)) == len(set(cs))
    assert packs(64, 256, 256, cs[1]) and not packs(64, 512, 512, cs[2])


def test_optimize_takes_the_cache_sizes_for_its_default_choice():
    # a panel over 8 rows 2 KB apart: 16 KB, half the Zen 3's L1d, a third of the Xeon's
    a, b = Tensor(np.ones((64, 8), np.float32)).realize(), Tensor(np.ones((8, 512), np.float32)).realize()
    kernel = schedule((a @ b).uop.sink()).kernels[-1]
    # the index pass's graph, as the pipeline hands it to the opt pass
    from uopgrad.codegen.index import lower_indexing

    sink = lower_indexing(kernel.src[0] if kernel.op is Ops.CALL else kernel)

    def local(caches: tuple[int, ...]) -> bool:
        out = optimize(sink, 32, REFERENCE_OPS, None, 64 * 1024, 0, caches)
        return any(u.op is Ops.DEFINE_LOCAL for u in out.toposort())

    assert local(ZEN3) and not local(XEON) and local(())
