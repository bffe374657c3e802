"""Planted bugs in a grouped reduction (uopgrad.codegen.group's tree of partials in shared memory) must be
caught by the conformance kit that every backend runs (issue 34): a wrong local index and a missing
barrier, each planted into the tree while the kit's reduce-over-many-shapes check runs on CUDA (the
emulator where there is no GPU). The kit's shapes (3, 1000) and (70000,) sum over 1000 and 70000
elements: grouped over a block, and the second split over the grid too (spec/opt.md §4, §4.1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from uopgrad import Device, DType, Ops, UOp, dtypes, program_store
from uopgrad.codegen import group
from uopgrad.dtype import AddrSpace  # noqa: TID251  (the planted tree builds group's own local array)
from uopgrad.pipeline import clear_program_cache
from uopgrad_conformance.kit.pipeline import test_pipeline_output_shapes as kit_reduce_shapes


def _tree(wrong_index: bool, barrier: bool) -> Callable[[UOp, UOp, int, Ops, DType], UOp]:
    """group._tree with a planted bug: a partner read one entry off, or no barrier between the steps."""

    def tree(part: UOp, lid: UOp, size: int, op: Ops, dt: DType) -> UOp:
        tile = UOp(Ops.DEFINE_LOCAL, dt.ptr(2 * size, AddrSpace.LOCAL), (), 0)
        done = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tile.dtype, (tile, lid)), part))
        s, half = 1, 0
        while s < size:
            now = UOp(
                Ops.AFTER, tile.dtype, (tile, UOp(Ops.BARRIER, dtypes.void, (done,)) if barrier else done)
            )
            a = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, tile.dtype, (now, lid + half)),))
            partner = (lid + s + (1 if wrong_index else 0)) % size + half
            b = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, tile.dtype, (now, partner)),))
            half = size - half
            done = UOp(
                Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tile.dtype, (now, lid + half)), UOp(op, dt, (a, b)))
            )
            s *= 2
        now = UOp(Ops.AFTER, tile.dtype, (tile, UOp(Ops.BARRIER, dtypes.void, (done,))))
        return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, tile.dtype, (now, UOp.const(dtypes.index, half))),))

    return tree


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No program or kernel built before the bug is planted is reused, and none built with it is kept."""
    monkeypatch.setattr(program_store, "ENABLED", False)  # (nor one a process stored on disk)
    clear_program_cache()
    monkeypatch.setattr(Device["CUDA"], "_kernels", {})
    yield
    clear_program_cache()


def test_the_correct_tree_passes_the_kit(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        group, "_tree", _tree(wrong_index=False, barrier=True)
    )  # the planting itself is sound
    for shape in [(3, 1000), (70000,)]:
        kit_reduce_shapes("CUDA", shape)


@pytest.mark.parametrize("bug", ["wrong local index", "missing barrier"])
@pytest.mark.parametrize("shape", [(3, 1000), (70000,)], ids=str)
def test_a_planted_bug_is_caught_by_the_kit(
    fresh: None, monkeypatch: pytest.MonkeyPatch, bug: str, shape: tuple[int, ...]
) -> None:
    monkeypatch.setattr(group, "_tree", _tree(bug == "wrong local index", bug != "missing barrier"))
    with pytest.raises(AssertionError):
        kit_reduce_shapes("CUDA", shape)
