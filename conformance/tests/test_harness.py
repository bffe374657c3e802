"""Unit tests of the conformance harness's parts, on REFERENCE (no --backend, no broken backend needed):
the case tables cover what they claim, comparisons and tolerances behave, kinks are detected, snippets run,
the xfails format parses, the report summarises."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import GroupOp, Ops, dtypes
from uopgrad.gradient import NOT_DIFFERENTIABLE, pm_gradient
from uopgrad_conformance.cases import ALU_SPECS, NOT_CLAIMED_OPS, alu_inputs, cast_inputs
from uopgrad_conformance.gradcases import FUNCTION_CASES, GRAD_CASES, RULE_ROWS
from uopgrad_conformance.gradcheck import GradInput, GradProgram, decisions_differ, sample
from uopgrad_conformance.numerics import ALL_DTYPES, FLOATS, compare, representable, special_values, ulp
from uopgrad_conformance.report import Record, Summary
from uopgrad_conformance.repro import Input, execute, namespace, snippet
from uopgrad_conformance.strategies import programs
from uopgrad_conformance.target import Target
from uopgrad_conformance.xfails import KNOWN_CORE_ISSUES, parse_xfails


# ---------------------------------------------------------------------- coverage of the tables
def test_every_alu_op_is_checked_or_listed_as_not_claimed():
    assert {s.op for s in ALU_SPECS} | set(NOT_CLAIMED_OPS) == set(GroupOp.ALU)


def test_every_gradient_rule_has_a_case():
    rules = set(pm_gradient.pdict)
    assert rules <= set(RULE_ROWS), sorted(o.name for o in rules - set(RULE_ROWS))
    rows = set(GRAD_CASES) | set(FUNCTION_CASES)
    assert {r for rs in RULE_ROWS.values() for r in rs} <= rows
    # what has no rule has none on purpose (core's list), or is a walk rule (GETTUPLE, DETACH, calls)
    assert not (rules & NOT_DIFFERENTIABLE)


@pytest.mark.parametrize("spec", ALU_SPECS, ids=[s.op.name for s in ALU_SPECS])
def test_case_table_agrees_with_reference(spec):
    # every op x dtype the table claims is defined runs on REFERENCE, on all of its generated inputs
    target = Target.load("REFERENCE")
    for dt in spec.dtypes:
        ins = alu_inputs(spec, dt, np.random.default_rng(0), n_random=4)
        ns = namespace("REFERENCE", dt)
        from uopgrad_conformance.target import tensor

        for n, a, d in zip(ins.names, ins.arrays, ins.dtypes):
            ns[n] = tensor(a, d, target.name)
        for expr in spec.expressions(dt):
            execute(f"out = {expr}", ns).numpy()


def test_special_values_are_there():
    f32 = special_values(dtypes.float32)
    assert np.isnan(f32).any() and np.isposinf(f32).any() and np.isneginf(f32).any()
    assert any(v == 0 and math.copysign(1, v) < 0 for v in f32)  # -0.0
    assert np.float32(1e-45) in f32 and np.finfo(np.float32).max in f32  # smallest denormal, max
    i8 = special_values(dtypes.int8)
    assert {-128, 127, -1, 0} <= set(i8.tolist())
    for dt in ALL_DTYPES:
        assert len(special_values(dt)) >= 2


def test_cast_inputs_reach_the_ends_of_the_range_and_beyond():
    # the spec defines float -> int beyond the range (truncate, wrap; NaN and inf give 0): the suite checks it
    x = cast_inputs(dtypes.float32, dtypes.uint8, np.random.default_rng(0))
    assert np.isnan(x).any() and np.isinf(x).any()
    assert {255.0, 256.0, -1.0, 0.0} <= set(x[np.isfinite(x)].tolist())
    assert (x[np.isfinite(x)] > 2.0**63).any()
    y = cast_inputs(dtypes.float64, dtypes.int64, np.random.default_rng(0))
    assert {2.0**63, -(2.0**63), 2.0**53} <= set(y[np.isfinite(y)].tolist())


# ---------------------------------------------------------------------- comparisons
def test_compare_semantics():
    f = dtypes.float32
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    assert compare(np.array([nan, inf, 1.0], np.float32), np.array([nan, inf, 1.0], np.float32), f).ok
    assert not compare(np.array([1.0], np.float32), np.array([nan], np.float32), f).ok
    assert not compare(np.array([-0.0], np.float32), np.array([0.0], np.float32), f).ok
    assert compare(np.array([-0.0], np.float32), np.array([0.0], np.float32), f, signed_zero=False).ok
    one_ulp = np.nextafter(np.float32(1), np.float32(2))
    assert not compare(np.array([one_ulp]), np.array([1.0], np.float32), f).ok
    assert compare(np.array([one_ulp]), np.array([1.0], np.float32), f, ulps=1).ok
    bad = compare(
        np.array([1, 2, 3], np.int32),
        np.array([1, 5, 3], np.int32),
        dtypes.int32,
        inputs=[np.array([7, 8, 9])],
    )
    assert not bad.ok and bad.bad == [(1,)] and "inputs 8" in bad.detail


def test_ulp_and_bfloat16_rounding():
    assert ulp(np.array([1.0]), dtypes.float32)[0] == 2.0**-23
    assert ulp(np.array([0.0]), dtypes.float16)[0] == 2.0**-24
    assert representable([1.0 + 2.0**-9], dtypes.bfloat16)[0] == 1.0  # ties to even
    assert representable([1.0 + 3 * 2.0**-9], dtypes.bfloat16)[0] == 1.0 + 2.0**-7


# ---------------------------------------------------------------------- gradients
def test_kinks_are_detected():
    prog = GradProgram((GradInput("x", (3,)),), "out = x.relu()")
    at_zero = [Input("x", np.array([0.0, 1.0, -1.0]), dtypes.float64, True)]
    h = 1e-6
    pts = [[np.array([0.0, 1.0, -1.0])], [np.array([h, 1.0, -1.0])], [np.array([-h, 1.0, -1.0])]]
    assert decisions_differ(prog, at_zero, pts) is not None
    away = [[np.array([0.5, 1.0, -1.0])], [np.array([0.5 + h, 1.0, -1.0])], [np.array([0.5 - h, 1.0, -1.0])]]
    assert decisions_differ(prog, at_zero, away) is None


def test_max_ties_are_detected():
    prog = GradProgram((GradInput("x", (2,)), GradInput("y", (2,))), "out = x.maximum(y)")
    ins = [
        Input("x", np.array([1.0, 2.0]), dtypes.float64, True),
        Input("y", np.array([1.0, 0.0]), dtypes.float64, True),
    ]
    pts = [[np.array([1.0, 2.0]), np.array([1.0, 0.0])], [np.array([1.0 + 1e-6, 2.0]), np.array([1.0, 0.0])]]
    assert decisions_differ(prog, ins, pts) is not None


def test_distinct_domain_has_no_ties():
    prog = GRAD_CASES["REDUCE MAX"]
    for seed in range(20):
        for dt in FLOATS:
            (x,) = sample(prog, dt, np.random.default_rng(seed))
            vals = np.sort(np.asarray(x.value, dtype=np.float64).reshape(-1))
            assert np.all(np.diff(vals) > 0.1)


def test_known_core_issues_name_core():
    assert all(e.reason.startswith("core:") for e in KNOWN_CORE_ISSUES)


# ---------------------------------------------------------------------- snippets, programs, xfails, report
def test_snippet_runs():
    src = snippet(
        "REFERENCE",
        dtypes.float32,
        [Input("a", np.array([1.5, -0.0, np.nan], np.float32), dtypes.float32)],
        "out = a * 2",
        ["print(out.numpy())"],
    )
    ns: dict[str, object] = {}
    exec(compile(src, "<snippet>", "exec"), ns)
    out = ns["out"].numpy()  # type: ignore[attr-defined]
    assert out[0] == 3.0 and math.copysign(1, out[1]) < 0 and np.isnan(out[2])


@settings(max_examples=15, derandomize=True, deadline=None, database=None)
@given(data=st.data())
def test_generated_programs_run_on_reference(data):
    dt = data.draw(st.sampled_from([dtypes.float32, dtypes.int32]))
    prog = data.draw(programs(dt, cast_to=[dtypes.float16] if dt == dtypes.float32 else [dtypes.int64]))
    ns = namespace("REFERENCE", dt)
    from uopgrad_conformance.target import tensor

    for i in prog.inputs():
        ns[i.name] = tensor(i.value, i.dtype, "REFERENCE")
    out = execute(prog.body(), ns)
    for o in out if isinstance(out, tuple) else (out,):
        assert o.dtype == dt
        o.numpy()


def test_xfails_parse_and_match():
    entries = parse_xfails("# comment\n\ntest_alu[SUB-*]  # swapped\ntest_x[a-b]\n")
    assert [(e.pattern, e.reason, e.line) for e in entries] == [
        ("test_alu[SUB-*]", "swapped", 3),
        ("test_x[a-b]", "listed in the xfails file", 4),
    ]
    rx = entries[0].regex()
    assert rx.match("pkg/suite/test_forward.py::test_alu[SUB-int32-forward]")
    assert not rx.match("pkg/suite/test_forward.py::test_alu[ADD-int32-forward]")


def test_summary_keeps_the_worst_outcome_and_error():
    s = Summary("X")
    s.add(Record("a", "ADD", "alu", "f32", "forward", "passed", 1e-7))
    s.add(Record("b", "ADD", "alu", "f32", "grad", "failed", 0.5))
    s.add(Record("c", "ADD", "alu", "bf16", "forward", "not claimed", None, "not claimed: X lacks it"))
    cells = s.cells()
    assert cells[("ADD", "f32")] == ("failed", 0.5) and cells[("ADD", "bf16")][0] == "not claimed"
    assert "FAIL" in s.table() and s.to_json()["counts"] == {"passed": 1, "failed": 1, "not claimed": 1}


def test_ops_table_is_every_alu_op():
    assert Ops.THREEFRY in {s.op for s in ALU_SPECS}  # the ops without a Tensor method are covered too


def test_plugin_is_inert_until_a_backend_is_named():
    # the pytest11 entry point loads in every pytest run where the suite is installed: it must not import
    # uopgrad then (core's own tests control when and how uopgrad is imported)
    import subprocess
    import sys

    code = "import sys, uopgrad_conformance.plugin; print(sorted(m for m in sys.modules if 'uopgrad' in m))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "['uopgrad_conformance', 'uopgrad_conformance.plugin']"
