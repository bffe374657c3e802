"""The pass driver (uopgrad.pipeline): codegen is one list of named passes run by one loop, which verifies,
times and traces every pass by its name; graph_rewrite's `name` reaches the engine's errors; `lower` takes
one `Target` record (built by a renderer), caches by it, and still takes the former arguments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from uopgrad import Ops, PatternMatcher, Tensor, UOp, UPat, dtypes, graph_rewrite
from uopgrad.backend import Capabilities, Device
from uopgrad.codegen import GridLimits, Target
from uopgrad.config import Context
from uopgrad.errors import RewriteError, VerifyError
from uopgrad.pipeline import (
    CODEGEN_PASSES,
    LowerContext,
    Pass,
    clear_program_cache,
    lower,
    pass_stats,
    program_cache_info,
    run_passes,
    tracers,
)
from uopgrad.renderer import CStyleRenderer
from uopgrad.schedule import schedule

NAMES = ["index", "opt", "tc", "group", "gpudims", "reduce", "index dtype", "decompositions", "linearize"]
ALL = Target(frozenset(), frozenset(Ops))  # every op rendered natively, loop-style, no vector width


def kernel() -> UOp:
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device="REFERENCE")
    sched = schedule(x.sum(axis=1).uop.sink())
    return next(it for it in sched.items if it.src[0].op is Ops.SINK)


def test_the_codegen_passes_are_one_list_of_unique_names():
    assert [p.name for p in CODEGEN_PASSES] == NAMES


def test_every_pass_is_traced_and_timed_by_name_in_order():
    seen: list[str] = []
    before = pass_stats()
    tracers.append(lambda name, _value: seen.append(name))
    try:
        run_passes(kernel().src[0], CODEGEN_PASSES, LowerContext(ALL))
    finally:
        tracers.pop()
    assert seen == [n for n in NAMES if n not in ("group", "gpudims", "opt", "tc")]  # loop-style, no vector
    # width, no tensor cores: no launch dimensions, no opt pass, no tc pass
    after = pass_stats()
    assert all(after[n][0] == before.get(n, (0, 0.0))[0] + 1 for n in seen)


def test_verify_names_the_pass_that_broke_the_graph():
    # a pass that leaves a movement op in a lowered kernel, where no rule of the lowered form accepts it
    def broken(sink: UOp, _ctx: LowerContext) -> UOp:
        return sink.replace(src=(*sink.src, UOp(Ops.PERMUTE, dtypes.float32, (), (0,))))

    passes = (CODEGEN_PASSES[0], dataclasses.replace(CODEGEN_PASSES[0], name="broken", run=broken))
    with Context(VERIFY=1), pytest.raises(VerifyError, match="after the 'broken' pass"):
        run_passes(kernel().src[0], passes, LowerContext(ALL))


def test_a_pass_that_does_not_apply_is_skipped():
    never = Pass("never", lambda _s, _c: pytest.fail("ran"), applies=lambda _ctx: False)
    k = kernel().src[0]
    assert run_passes(k, (never,), LowerContext(ALL)) is k


def test_lower_still_builds_a_program():
    prg = lower(kernel(), ALL)
    assert prg.uops and prg.name.startswith("r_")


def test_the_target_is_one_hashable_record_and_the_program_cache_is_keyed_by_it():
    clear_program_cache()
    k = kernel()
    first = lower(k, ALL)
    assert lower(k, Target(frozenset(), frozenset(Ops))) is first  # an equal record: a cache hit
    assert program_cache_info()["hits"] == 1
    wide = dataclasses.replace(ALL, grid=GridLimits(local_size=2))
    assert hash(wide) != hash(ALL) and lower(k, wide) is not first and lower(k, wide).global_size is not None
    assert ALL.tensor_cores == () and ALL.warp_size == 1 and ALL.loop_style and not wide.loop_style


def test_the_former_arguments_of_lower_still_work():
    # deprecated, kept one release: lower(kernel, ops, grid, vector_width, choice, scratch)
    k, ops = kernel(), frozenset(Ops)
    assert lower(k, ops) is lower(k, ALL)
    grid = GridLimits(local_size=2, local_memory=1024)
    assert lower(k, ops, grid) is lower(k, Target(frozenset(), ops, grid, local_memory=1024))
    assert Target.for_ops(ops, grid, 16, 64) == Target(
        frozenset(), ops, grid, vector_width=16, scratch=64, local_memory=1024
    )


def test_a_renderer_builds_the_target_and_capabilities_is_its_former_name():
    class Grid(CStyleRenderer):
        grid = GridLimits(local_memory=4096)
        vector_width, scratch, warp_size = 16, 128, 32

    f32 = frozenset({dtypes.float32})
    t = Grid().target(f32)
    assert t == Target(f32, Grid().supports, Grid.grid, True, 16, 128, 4096, 32, ())
    assert Capabilities is Target
    assert Capabilities(f32, frozenset({Ops.ADD}), None, compiled=False).dtypes == f32
    ref = Device["REFERENCE"].capabilities
    assert isinstance(ref, Target) and not ref.compiled


def test_graph_rewrite_names_its_pass_in_the_engines_errors():
    loop = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=c.arg + 1))])  # c -> c+1
    with pytest.raises(RewriteError, match="in the rewrite 'count up'"):
        graph_rewrite(UOp.const(dtypes.int32, 0), loop, name="count up")


def test_a_target_has_one_canonical_form_that_every_field_changes() -> None:
    # BEAM keys its on-disk picks by it: the same text whatever order a set was built in, another with any
    # field changed (a new knob is in the key without an edit of search.py)
    ops = [Ops.ADD, Ops.MUL, Ops.SQRT, Ops.MAX]
    a = Target(frozenset([dtypes.float32, dtypes.int32]), frozenset(ops), vector_width=32, scratch=64)
    b = Target(frozenset([dtypes.int32, dtypes.float32]), frozenset(ops[::-1]), vector_width=32, scratch=64)
    assert repr(a.canonical()) == repr(b.canonical())
    changed = {
        "dtypes": a.dtypes | {dtypes.int8},
        "ops": a.ops | {Ops.SUB},
        "grid": GridLimits(),
        "compiled": False,
        "vector_width": 64,
        "scratch": 128,
        "local_memory": 1024,
        "warp_size": 32,
        "tensor_cores": ((16, 8, 16),),
        "unsupported": frozenset({(Ops.MAX, dtypes.float32)}),
        "cache_sizes": (32 * 1024, 512 * 1024, 0),
    }
    assert set(changed) == {f.name for f in dataclasses.fields(Target)}
    for name, value in changed.items():
        assert repr(dataclasses.replace(a, **{name: value}).canonical()) != repr(a.canonical()), name
