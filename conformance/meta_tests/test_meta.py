"""Meta tests: the conformance harness itself, run as a backend author runs it (a pytest subprocess with
`--pyargs uopgrad_conformance --backend NAME`).

Needs the broken backends of `broken_backend/` (and the out-of-tree example and the CPU backend they build
on) installed: `nox -s conformance_meta` installs them. The run ends with the mutation score
(conftest.py): planted bugs caught of planted. Each planted bug must be caught, by the check meant to
catch it, with a runnable repro snippet in the output; REFERENCE and NUMPYVEC must pass; the report, the
xfails file and the skip reasons must behave as documented (docs/conformance.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from suite_run import run_repro, run_suite

from uopgrad import Device, GroupOp

C_MUTANTS = [
    "BROKEN_C_TAIL",
    "BROKEN_C_RACE",
    "BROKEN_C_WHERE",
    "BROKEN_C_INTDIV",
    "BROKEN_C_F2I",
    "BROKEN_C_NOZERO",
    "BROKEN_C_VARS",
    "BROKEN_C_F16",
    "BROKEN_C_LITERAL",
    "BROKEN_C_MANYBUF",
    "BROKEN_C_INDEX16",
    "BROKEN_C_MATH",
    "BROKEN_C_REALIZE",
    "BROKEN_C_SETITEM",
    "BROKEN_C_REUPLOAD",
    "BROKEN_C_SIGMOID",
    "BROKEN_C_EMPTY",
    "BROKEN_C_LEAVES",
    "BROKEN_C_JITSTALE",
    "BROKEN_C_ALLREDUCE",
    "BROKEN_C_GRADKEY",
    "BROKEN_C_DIVULP",
    "BROKEN_C_NOGRAD",
    "BROKEN_C_ADAMSTEP",
    "BROKEN_C_PANEL",
]
NEEDED = [
    "BROKEN_FLIP",
    "BROKEN_PAD",
    "BROKEN_FLOORDIV",
    "BROKEN_MAXID",
    "BROKEN_SUB",
    "NUMPYVEC",
    "ONE_DEVICE",
    *C_MUTANTS,
]
missing = [n for n in NEEDED if n not in Device]
pytestmark = pytest.mark.skipif(
    bool(missing),
    reason=f"meta tests need the backends {missing} installed (nox -s conformance_meta installs them)",
)


def snippets(out: str) -> list[str]:
    """The repro snippets in pytest's output: from `import numpy as np` to the end of the indented block."""
    found = []
    lines = [re.sub(r"^E\s{0,11}", "", ln) for ln in out.splitlines()]
    for i, line in enumerate(lines):
        if line.strip() == "import numpy as np":
            block = []
            for ln in lines[i:]:
                stop = ("Failing test case", "Explanation", "Draw ", "[", "repro")
                if ln.startswith(stop) or not ln.strip():
                    break
                block.append(ln)
            found.append("\n".join(block))
    return found


# (device, -k selection, cases that must fail, cases that must pass: they show which check catches it)
PLANTED = [
    (
        "BROKEN_FLIP",
        "FLIP",
        ["test_gradient[FLIP-float32-grad]", "test_gradient[FLIP-float64-grad]"],
        ["test_movement[FLIP-float32-forward]"],
    ),
    (
        "BROKEN_PAD",
        "PAD or programs-float32",
        [
            "test_movement[PAD-float32-forward]",
            "test_gradient[PAD-float32-grad]",
            "test_programs[programs-float32-random]",
        ],
        [],
    ),
    (
        "BROKEN_FLOORDIV",
        "FLOORDIV",
        ["test_alu[FLOORDIV-int32-forward]", "test_alu[FLOORDIV-float32-forward]"],
        ["test_alu[FLOORDIV-uint32-forward]"],
    ),
    (
        "BROKEN_MAXID",
        "REDUCE_MAX",
        ["test_reduce[REDUCE_MAX-float32-forward]", "test_reduce[REDUCE_MAX-int32-forward]"],
        ["test_reduce[REDUCE_MAX-uint32-forward]"],
    ),
    ("BROKEN_SUB", "test_alu and SUB", ["test_alu[SUB-int32-forward]", "test_alu[SUB-float32-forward]"], []),
]


# the C backend with one realistic bug per case class (broken_backend/src/uopgrad_broken/cbackend.py):
# (device, -k selection, cases that must fail, a phrase the failure must show)
E = "test_edge"
C_PLANTED = [
    ("BROKEN_C_TAIL", "sizes_above_1024-float32", [f"{E}[sizes_above_1024-float32-forward]"], "differs"),
    ("BROKEN_C_RACE", "sizes_above_1024-int32", [f"{E}[sizes_above_1024-int32-forward]"], ""),
    ("BROKEN_C_WHERE", "WHERE_broadcast-float32", [f"{E}[WHERE_broadcast-float32-forward]"], "differs"),
    ("BROKEN_C_INTDIV", "integer_edges-int32", [f"{E}[integer_edges-int32-forward]"], "SIGFPE"),
    (
        "BROKEN_C_F2I",
        "CAST_from_float32 and int32",
        ["test_cast[CAST_from_float32-int32-forward]"],
        "differs",
    ),
    (
        "BROKEN_C_NOZERO",
        "in_place_into_a_fresh_buffer-float32",
        [f"{E}[in_place_into_a_fresh_buffer-float32-forward]"],
        "differs",
    ),
    ("BROKEN_C_VARS", "bound_variables-int32", [f"{E}[bound_variables-int32-forward]"], "differs"),
    (
        "BROKEN_C_F16",
        "CAST_from_float32 and float16",
        ["test_cast[CAST_from_float32-float16-forward]"],
        "differs",
    ),
    ("BROKEN_C_LITERAL", "test_alu and MUL-float32", ["test_alu[MUL-float32-forward]"], "differs"),
    ("BROKEN_C_MANYBUF", "many_buffers-int32", [f"{E}[many_buffers-int32-forward]"], "differs"),
    ("BROKEN_C_INDEX16", "strided_views-int32", [f"{E}[strided_views-int32-forward]"], "differs"),
    (
        "BROKEN_C_MATH",
        "LOG2-float64",
        ["test_alu[LOG2-float64-forward]", "test_gradient[LOG2-float64-grad]"],
        "FORWARD: the program's float64 forward pass differs",
    ),
    # the classes of state and limits (broken_backend/src/uopgrad_broken/semantics.py)
    (
        "BROKEN_C_SETITEM",
        "setitem_duplicates",
        ["test_setitem[setitem_duplicates-float32-random]"],
        "after the writes differs from numpy",
    ),
    (
        "BROKEN_C_REUPLOAD",
        "jit_random",
        ["test_jit[jit_random-float32-random]"],
        "(it returned the previous call's values again)",
    ),
    (
        "BROKEN_C_SIGMOID",
        "unary_edges_sigmoids",
        ["test_unary_edges[unary_edges_sigmoids-float32-edges]"],
        "[sigmoid] gradient of x.sigmoid() differs from the closed form",
    ),
    (
        "BROKEN_C_EMPTY",
        "empty_reductions",
        [
            "test_empty_reductions[empty_reductions-int32-random]",
            "test_empty_reductions[empty_reductions-float32-random]",
        ],
        "differs from numpy's identity",
    ),
    (
        "BROKEN_C_LEAVES",
        "equal_leaves",
        ["test_equal_leaves[equal_leaves-float32-random]", "test_equal_leaves[equal_leaves-float64-random]"],
        "differs from the closed form of its own term",
    ),
    # the paths of a user's training program (broken_backend/src/uopgrad_broken/userpaths.py)
    (
        "BROKEN_C_JITSTALE",
        "path_jit_step",
        ["test_path[path_jit_step-float32-program]"],
        "out[0] differs from REFERENCE",
    ),
    (
        "BROKEN_C_ALLREDUCE",
        "path_sharded_shrink",
        ["test_path[path_sharded_shrink-float32-program]"],
        "differs from REFERENCE",
    ),
    (
        "BROKEN_C_GRADKEY",
        "path_gradient_template",
        ["test_path[path_gradient_template-float32-program]"],
        "differs from REFERENCE",
    ),
    (
        "BROKEN_C_DIVULP",
        "test_alu and FDIV-float32",
        ["test_alu[FDIV-float32-forward]"],
        "differs",
    ),
    (
        "BROKEN_C_NOGRAD",
        "path_memory",
        ["test_path[path_memory-float32-program]"],
        "the device memory in use grows during the training loop",
    ),
    (
        "BROKEN_C_ADAMSTEP",
        "path_optimiser",
        ["test_path[path_optimiser-float32-adam]"],
        "differs from REFERENCE",
    ),
    (
        "BROKEN_C_PANEL",
        "path_matmul_panels",
        ["test_path[path_matmul_panels-float32-program]"],
        "differs from REFERENCE",
    ),
]


@pytest.mark.parametrize(
    ("backend", "select", "must_fail", "phrase"), C_PLANTED, ids=[p[0] for p in C_PLANTED]
)
def test_planted_c_bug_is_caught(
    tmp_path: Path, backend: str, select: str, must_fail: list[str], phrase: str
) -> None:
    """Caught by the check of its class under the `ci` profile, with a repro that runs on its own."""
    run = run_suite(tmp_path, backend, "-k", select)
    assert run.rc == 1, run.out[-3000:]
    for t in must_fail:
        assert run.outcome(t) == "failed", t
    assert phrase in run.out, run.out[-3000:]
    found = snippets(run.out)
    assert found, run.out[-3000:]
    res = run_repro(tmp_path, found[0])
    # the repro runs (a trapping one dies of the same signal: that is the bug, shown)
    assert res.returncode == 0 or (backend == "BROKEN_C_INTDIV" and res.returncode < 0), res.stderr[-2000:]


def _cuda_emulated() -> str | None:
    """Why BROKEN_CUDA_GROUPTAIL (CUDA emulated on the host) cannot run here, or None."""
    if "BROKEN_CUDA_GROUPTAIL" not in Device:
        return "BROKEN_CUDA_GROUPTAIL is not installed"
    env = {**os.environ, "UOPGRAD_CUDA_EMULATE": "1"}
    probe = "from uopgrad import Device; Device['BROKEN_CUDA_GROUPTAIL']"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    return None if res.returncode == 0 else "CUDA emulation unavailable: " + res.stderr.strip()[-300:]


def test_planted_c_bug_is_caught_grouped_reduce_drops_its_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grouped reduce (a target with local memory: CUDA, emulated) that drops the last n % L elements:
    the grouped-reduce path catches it, with a repro."""
    if (why := _cuda_emulated()) is not None:
        pytest.skip(why)
    monkeypatch.setenv("UOPGRAD_CUDA_EMULATE", "1")
    run = run_suite(tmp_path, "BROKEN_CUDA_GROUPTAIL", "-k", "path_grouped_reduce")
    assert run.rc == 1, run.out[-3000:]
    assert run.outcome("test_path[path_grouped_reduce-float32-program]") == "failed"
    found = snippets(run.out)
    assert found and "differs from REFERENCE" in run.out, run.out[-3000:]
    res = run_repro(tmp_path, found[0])
    assert res.returncode == 0, res.stderr[-2000:]


def test_planted_c_bug_is_caught_realize_drops_the_graph(tmp_path: Path) -> None:
    """Issue 9's bug planted in one device: the realized programs (outputs read before the gradient) catch
    it by finite differences, with a repro that reads before it differentiates, as the check did."""
    run = run_suite(tmp_path, "BROKEN_C_REALIZE", "-k", "programs_realized-float64 or realized-float64-fixed")
    assert run.rc == 1, run.out[-3000:]
    assert run.outcome("test_programs[programs_realized-float64-random]") == "failed"
    found = [s for s in snippets(run.out) if ".gradient(" in s]
    assert found, run.out[-3000:]
    res = run_repro(tmp_path, found[0])
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize(
    ("backend", "select", "must_fail", "must_pass"), PLANTED, ids=[p[0] for p in PLANTED]
)
def test_planted_bug_is_caught(
    tmp_path: Path, backend: str, select: str, must_fail: list[str], must_pass: list[str]
) -> None:
    run = run_suite(tmp_path, backend, "-k", select)
    assert run.rc == 1, run.out[-3000:]
    for t in must_fail:
        assert run.outcome(t) == "failed", t
    for t in must_pass:
        assert run.outcome(t) == "passed", t
    assert "repro" in run.out
    found = snippets(run.out)
    assert found, run.out[-3000:]
    # the snippet runs on its own (on the broken backend it shows the wrong values)
    res = run_repro(tmp_path, found[0])
    assert res.returncode == 0 or backend in res.stderr, res.stderr[-2000:]


def test_random_program_is_shrunk_to_a_minimal_repro(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "BROKEN_PAD", "-k", "programs-float32")
    assert run.outcome("test_programs[programs-float32-random]") == "failed"
    program = next(s for s in snippets(run.out) if ".pad(" in s)
    body = [ln for ln in program.splitlines() if re.match(r"t\d+ = t\d+\.", ln)]
    # the pad and at most one other movement step: hypothesis stops shrinking after 5 minutes, which a
    # loaded 2-core machine can reach before the last step (a no-op reshape) is gone
    assert any(".pad(" in ln for ln in body) and len(body) <= 2, program


def test_vjp_bug_is_invisible_to_an_all_ones_cotangent() -> None:
    # why the suite draws Gaussian cotangents: sum().backward() through a bare flip looks right on BROKEN_FLIP
    import numpy as np

    from uopgrad import Tensor

    got = {}
    for dev in ("REFERENCE", "BROKEN_FLIP"):
        x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=dev, requires_grad=True)
        ones = (x.flip(0) * 2.0).sum().gradient(x)[0].numpy()
        v = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=dev)
        rand = (x.flip(0) * 2.0).gradient(x, gradient=v)[0].numpy()
        got[dev] = (ones, rand)
    np.testing.assert_allclose(got["BROKEN_FLIP"][0], got["REFERENCE"][0], rtol=1e-6)
    assert not np.allclose(got["BROKEN_FLIP"][1], got["REFERENCE"][1])


def test_reference_passes_and_the_report_lists_every_row(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "REFERENCE")
    assert run.rc == 0, run.out[-3000:]
    rows = {c["row"] for c in run.report["cells"]}
    assert {op.name for op in GroupOp.ALU} <= rows
    assert {"RESHAPE", "EXPAND", "PERMUTE", "PAD", "SHRINK", "FLIP"} <= rows
    assert {"REDUCE ADD", "REDUCE MAX", "REDUCE MUL", "COPY", "CONTIGUOUS"} <= rows
    assert {r for r in rows if r.startswith("FUNCTION")} >= {
        "FUNCTION plain",
        "FUNCTION precompile",
        "FUNCTION grad_fxn",
        "FUNCTION nested",
    }
    assert "MULTI" in rows  # sharded programs against the unsharded ones
    assert {
        "setitem duplicates",
        "setitem views",
        "setitem detach",
        "setitem sharded",
        "jit random",
        "jit empty_like",
        "jit variable offset",
        "empty reductions",
        "equal leaves",
        "path jit step",
        "path optimiser",
        "path matmul panels",
        "path grouped reduce",
        "path sharded shrink",
        "path gradient template",
        "path memory",
    } <= rows
    assert {r for r in rows if r.startswith("unary edges")} >= {"unary edges sigmoids", "unary edges exp log"}
    assert "uopgrad conformance summary for REFERENCE" in run.out
    # every case passes, but the OPT=1-against-OPT=0 rows: REFERENCE has no opt pass to compare
    opt_rows = [c for c in run.report["cases"] if c["row"].startswith("OPT ")]
    assert opt_rows and all(c["outcome"] == "not claimed" for c in opt_rows)
    assert all(c["outcome"] in ("passed", "xfailed") for c in run.report["cases"] if c not in opt_rows)


def test_out_of_tree_backend_passes(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path,
        "NUMPYVEC",
        "-k",
        "test_alu or test_movement or test_reduce or FUNCTION or "
        "test_setitem or test_jit or test_identities or test_unary_edges",
    )
    assert run.rc == 0, run.out[-3000:]
    claimed = [c for c in run.report["cases"] if c["outcome"] == "not claimed"]
    assert claimed and all("NUMPYVEC does not declare bfloat16" in c["reason"] for c in claimed)
    assert run.outcome("test_setitem[setitem_sharded-float32-random]") == "passed"


def test_a_backend_with_one_device_does_not_claim_a_second_one(tmp_path: Path) -> None:
    # the cases that shard over (or copy to) a second device are not claimed, saying why; the others run
    run = run_suite(tmp_path, "ONE_DEVICE", "-k", "setitem or MULTI or COPY")
    assert run.rc == 0, run.out[-3000:]
    assert run.outcome("test_setitem[setitem_duplicates-float32-random]") == "passed"
    for t in (
        "test_setitem[setitem_sharded-float32-random]",
        "test_multi_fixed[MULTI-float32-matmul]",
        "test_multi_random[MULTI-float32-random]",
        "test_gradient[MULTI-float32-grad]",
        "test_copy[COPY-int32-forward]",
    ):
        assert run.outcome(t) == "not claimed", t
    second = "not claimed: ONE_DEVICE exposes no second device ONE_DEVICE:1 (RuntimeError: ONE_DEVICE:1: "
    reasons = {c["reason"] for c in run.report["cases"] if c["outcome"] == "not claimed"}
    assert all(r.startswith(second) or "does not declare bfloat16" in r for r in reasons), reasons


def test_xfails_file_and_strict_mode(tmp_path: Path) -> None:
    xf = tmp_path / "xfails.txt"
    xf.write_text(
        "# known bugs of BROKEN_SUB\ntest_alu[SUB-int32-forward]  # operands swapped\n"
        "test_alu[NO_SUCH_OP-*]\n"
    )
    run = run_suite(tmp_path, "BROKEN_SUB", "-k", "SUB-int32", "--xfails", str(xf))
    assert run.rc == 0, run.out[-3000:]
    assert run.outcome("test_alu[SUB-int32-forward]") == "xfailed"
    assert "'test_alu[NO_SUCH_OP-*]' matches no collected test" in run.out
    # an expected failure that passes fails the run under --strict-xfail
    xf.write_text("test_alu[ADD-int32-forward]\n")
    strict = run_suite(tmp_path, "REFERENCE", "-k", "ADD-int32", "--xfails", str(xf), "--strict-xfail")
    assert strict.rc == 1 and "XPASS(strict)" in strict.out


def test_backend_option_is_required_and_checked(tmp_path: Path) -> None:
    res = run_suite(tmp_path, None)
    assert res.rc != 0 and "needs --backend NAME" in res.out
    unknown = run_suite(tmp_path, "NO_SUCH_DEVICE")
    assert unknown.rc != 0 and "installed backends are" in unknown.out
