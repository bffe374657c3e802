"""The pass driver (uopgrad.pipeline): codegen is one list of named passes run by one loop, which verifies,
times and traces every pass by its name; graph_rewrite's `name` reaches the engine's errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from uopgrad import Ops, PatternMatcher, Tensor, UOp, UPat, dtypes, graph_rewrite
from uopgrad.config import Context
from uopgrad.errors import RewriteError, VerifyError
from uopgrad.pipeline import CODEGEN_PASSES, LowerContext, Pass, lower, pass_stats, run_passes, tracers
from uopgrad.schedule import schedule

NAMES = ["index", "opt", "group", "gpudims", "reduce", "index dtype", "decompositions", "linearize"]


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
        run_passes(kernel().src[0], CODEGEN_PASSES, LowerContext(frozenset(Ops), None))
    finally:
        tracers.pop()
    assert seen == [n for n in NAMES if n not in ("group", "gpudims", "opt")]  # loop-style, no vector width:
    # no launch dimensions, no opt pass
    after = pass_stats()
    assert all(after[n][0] == before.get(n, (0, 0.0))[0] + 1 for n in seen)


def test_verify_names_the_pass_that_broke_the_graph():
    # a pass that leaves a movement op in a lowered kernel, where no rule of the lowered form accepts it
    def broken(sink: UOp, _ctx: LowerContext) -> UOp:
        return sink.replace(src=(*sink.src, UOp(Ops.PERMUTE, dtypes.float32, (), (0,))))
    passes = (CODEGEN_PASSES[0], dataclasses.replace(CODEGEN_PASSES[0], name="broken", run=broken))
    with Context(VERIFY=1), pytest.raises(VerifyError, match="after the 'broken' pass"):
        run_passes(kernel().src[0], passes, LowerContext(frozenset(Ops), None))


def test_a_pass_that_does_not_apply_is_skipped():
    never = Pass("never", lambda _s, _c: pytest.fail("ran"), applies=lambda _ctx: False)
    k = kernel().src[0]
    assert run_passes(k, (never,), LowerContext(frozenset(Ops), None)) is k


def test_lower_still_builds_a_program():
    prg = lower(kernel(), frozenset(Ops))
    assert prg.uops and prg.name.startswith("r_")


def test_graph_rewrite_names_its_pass_in_the_engines_errors():
    loop = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=c.arg + 1))])  # c -> c+1
    with pytest.raises(RewriteError, match="in the rewrite 'count up'"):
        graph_rewrite(UOp.const(dtypes.int32, 0), loop, name="count up")
