"""What a backend author reads is what the code does (issue 36): spec/kernels.md §2 names every form codegen
emits for each target setting, README's backend section names the settings and the compile thread pool, one
name per concept (`LinearProgram` vs the runtime `Program`), `Tensor.linear_programs` lists a tensor's
kernels, and a target can decline an op on one dtype (`Target.unsupported`), which codegen then decomposes.

The forms are taken from real programs lowered for each setting, so a new form a pass starts to emit fails
here until the spec names it.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import numpy.typing as npt
import pytest
from test_style import ROOT

import uopgrad.backend
import uopgrad.codegen
from uopgrad import GroupOp, Ops, Tensor, dtypes
from uopgrad.backends.reference import REFERENCE_OPS, run_program
from uopgrad.codegen import GridLimits, LinearProgram, Target
from uopgrad.config import Context
from uopgrad.errors import LoweringError
from uopgrad.pipeline import lower
from uopgrad.renderer import Renderer
from uopgrad.uop import UOp

SPEC = (ROOT / "spec/kernels.md").read_text()
README = (ROOT / "README.md").read_text()
OP_NAME = re.compile(r"\b[A-Z][A-Z0-9_]{2,}\b")
F32 = frozenset({dtypes.float32, dtypes.float16, dtypes.float64, dtypes.bool, dtypes.int32})


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def _table(text: str) -> list[list[str]]:
    """The cells of every table row of `text` (headers and |---| lines dropped)."""
    lines = [line.strip()[1:-1] for line in text.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line)] for line in lines]
    return [r for r in rows if not set("".join(r)) <= set("-| ") and r[0] not in ("op", "setting", "field")]


SCALAR_FORMS = {
    name
    for row in _table(_section(SPEC, "`LinearProgram.uops` is a flat tuple", "### 2.1"))
    for name in OP_NAME.findall(row[0])
}
SETTING_ROWS = _table(_section(SPEC, "### 2.1", "`LinearProgram` carries"))
SETTING_FORMS = {name for row in SETTING_ROWS for name in OP_NAME.findall(row[2])}
VECTOR_FORMS = {name for row in SETTING_ROWS if "vec" in row[3] for name in OP_NAME.findall(row[2])}


def _undocumented(prg: LinearProgram) -> set[str]:
    """The forms of `prg` that spec/kernels.md §2 does not name: scalar ones in the main table (ALU ops by its
    ALU row), vector ones in the rows of §2.1 with a vector dtype."""
    bad = set()
    for u in prg.uops:
        vector = u.dtype.count > 1 and not hasattr(u.dtype, "addrspace")
        if vector and u.op.name not in VECTOR_FORMS:
            bad.add(f"vector {u.op.name}")
        elif not vector and u.op.name not in SCALAR_FORMS | SETTING_FORMS and u.op not in GroupOp.ALU:
            bad.add(u.op.name)
    return bad


def _kernel(t: Tensor) -> UOp:
    (call,) = [i for i in t.schedule_linear().src if i.op is Ops.CALL and i.src[0].op is Ops.SINK]
    return call


def _rand(*shape: int, dtype: npt.DTypeLike = np.float32) -> Tensor:
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(dtype), device="REFERENCE")


def test_the_spec_tables_parse() -> None:
    assert {"PARAM", "RANGE", "DEFINE_REG", "LOAD", "STORE"} <= SCALAR_FORMS
    assert {"STACK", "GEP", "WMMA", "DEFINE_LOCAL"} <= SETTING_FORMS


def test_plain_loop_target_emits_only_scalar_forms_the_spec_names() -> None:
    prg = lower(_kernel((_rand(8, 16) @ _rand(16, 4)).relu()), Target(F32, REFERENCE_OPS))
    assert _undocumented(prg) == set()
    assert all(u.dtype.count == 1 for u in prg.uops)


def test_vector_width_and_scratch_forms_are_in_the_spec() -> None:
    target = Target(F32, REFERENCE_OPS, vector_width=32, scratch=64 * 1024)
    with Context(OPT=1):
        prg = lower(_kernel(_rand(64, 512) @ _rand(512, 512)), target)
    ops = {u.op for u in prg.uops}
    assert any(u.dtype.count > 1 for u in prg.uops), "the opt pass made no vector code"
    assert Ops.DEFINE_LOCAL in ops, "the panel was not packed into scratch"
    assert _undocumented(prg) == set()


def test_vector_gathers_and_lanewise_ops_are_in_the_spec() -> None:
    # POW has no vector form: its lanes are taken apart (GEP) and stacked again (STACK)
    target = Target(F32, REFERENCE_OPS, vector_width=32)
    with Context(OPT=1):
        prg = lower(_kernel((_rand(16, 64) @ _rand(64, 64)) ** 1.5), target)
    assert {Ops.GEP, Ops.STACK} <= {u.op for u in prg.uops}
    assert _undocumented(prg) == set()


def test_local_memory_forms_are_in_the_spec() -> None:
    target = Target(F32, REFERENCE_OPS, GridLimits(local_memory=16384), local_memory=16384)
    prg = lower(_kernel(_rand(4, 4096).sum(1)), target)
    assert {Ops.DEFINE_LOCAL, Ops.BARRIER} <= {u.op for u in prg.uops}
    assert _undocumented(prg) == set()


def test_tensor_core_forms_are_in_the_spec() -> None:
    target = Target(F32, REFERENCE_OPS, GridLimits(), warp_size=32, tensor_cores=((16, 8, 16),))
    a, b = _rand(32, 32, dtype=np.float16), _rand(32, 16, dtype=np.float16)
    with Context(OPT=1):
        prg = lower(_kernel(a.float() @ b.float()), target)
    assert Ops.WMMA in {u.op for u in prg.uops}
    assert _undocumented(prg) == set()


def test_every_target_field_is_in_the_spec_table() -> None:
    fields = {row[0].strip("`") for row in _table(_section(SPEC, "Its fields, in order:", "`choice` is"))}
    assert fields == {f.name for f in dataclasses.fields(Target)}


def test_readme_names_the_settings_the_thread_pool_and_the_kit() -> None:
    section = _section(README, "## Add a backend", "## Run conformance")
    for word in ("vector_width", "scratch", "local_memory", "tensor_cores", "thread pool", "compile_many"):
        assert word in section, word
    assert "package_tests" in section and "LinearProgram" in section and "linear_programs" in section


def test_one_name_per_concept() -> None:
    assert uopgrad.codegen.LinearProgram.__name__ == "LinearProgram"
    assert uopgrad.codegen.Program is uopgrad.codegen.LinearProgram  # the former name, deprecated
    assert not issubclass(uopgrad.backend.Program, uopgrad.codegen.LinearProgram)
    assert uopgrad.backend.Program.__name__ == "Program"


def test_linear_programs_lists_each_kernel_of_the_schedule() -> None:
    x = _rand(4, 8)
    progs = (x.sum(1, keepdim=True) + x).linear_programs()  # two kernels (spec/kernels.md §1)
    assert [p.name[0] for p in progs] == ["r", "E"]
    assert all(isinstance(p, LinearProgram) for p in progs)
    listing = progs[0].listing().splitlines()
    assert len(listing) == len(progs[0].uops) and any(" RANGE " in line for line in listing)
    assert x.linear_programs() == []  # a realized tensor has no kernels


def test_linear_programs_run_as_the_tensor_computes() -> None:
    a, b = _rand(5, 7), _rand(7, 3)
    out = (a @ b).relu()
    (prg,) = out.linear_programs()
    call = _kernel(out)
    bufs = [np.zeros(5 * 3, np.float32), a.numpy().reshape(-1), b.numpy().reshape(-1)]
    slots = {buf: i for i, buf in enumerate(call.src[1:])}
    assert slots[call.src[1]] == 0
    run_program(prg, bufs)
    np.testing.assert_allclose(bufs[0].reshape(5, 3), np.maximum(a.numpy() @ b.numpy(), 0), rtol=1e-5)


def test_linear_programs_for_another_target() -> None:
    x = _rand(3, 4)
    (prg,) = (x * 2).linear_programs(device="REFERENCE")
    assert prg.global_size is None  # REFERENCE lowers loop-style


# --------------------------------------------------------------------- capabilities per op and dtype


def _max_kernel(dtype: npt.DTypeLike) -> UOp:
    return _kernel(_rand(6, dtype=dtype).maximum(_rand(6, dtype=dtype) * -1))


def test_an_op_declined_on_one_dtype_is_decomposed_on_that_dtype_only() -> None:
    target = Target(F32, REFERENCE_OPS, unsupported=frozenset({(Ops.MAX, dtypes.float32)}))
    assert not target.supports(Ops.MAX, dtypes.float32) and target.supports(Ops.MAX, dtypes.float64)
    assert not target.supports(Ops.MAX, dtypes.float32.vec(4))  # a vector: its lanes' dtype
    f32, f64 = lower(_max_kernel(np.float32), target), lower(_max_kernel(np.float64), target)
    assert Ops.MAX not in {u.op for u in f32.uops}
    assert Ops.MAX in {u.op for u in f64.uops}


def test_the_decomposed_op_computes_what_the_native_one_does() -> None:
    a = np.array([0.0, -0.0, np.nan, 1.0, -np.inf, 3.0], np.float32)
    b = np.array([-0.0, 0.0, 1.0, np.nan, 2.0, 3.0], np.float32)
    out = Tensor(a, device="REFERENCE").maximum(Tensor(b, device="REFERENCE"))
    target = Target(F32, REFERENCE_OPS, unsupported=frozenset({(Ops.MAX, dtypes.float32)}))
    got, want = np.zeros(6, np.float32), np.zeros(6, np.float32)
    run_program(lower(_kernel(out), target), [got, a, b])
    run_program(lower(_kernel(out), Target(F32, REFERENCE_OPS)), [want, a, b])
    assert got.tobytes() == want.tobytes()  # NaNs and signed zeros included


def test_the_opt_pass_leaves_a_declined_op_scalar() -> None:
    a, b = _rand(16, 64), _rand(64, 64)
    out = (a @ b).maximum(0.25)  # a MAX epilogue on the matmul's vector tile
    declined = Target(F32, REFERENCE_OPS, vector_width=32, unsupported=frozenset({(Ops.MAX, dtypes.float32)}))
    with Context(OPT=1):
        native = lower(_kernel(out), dataclasses.replace(declined, unsupported=frozenset()))
        prg = lower(_kernel(out), declined)
    assert any(u.op is Ops.MAX and u.dtype.count > 1 for u in native.uops)  # else this checks nothing
    # the matmul is still vector code; its epilogue is decomposed (REFERENCE's run_program can't run this
    # program: a register tile's LOAD(acc, END) names an END the program does not list, a codegen bug)
    assert Ops.MAX not in {u.op for u in prg.uops} and any(u.dtype.count > 1 for u in prg.uops)


def test_a_declined_op_without_decomposition_names_op_and_dtype() -> None:
    target = Target(F32, REFERENCE_OPS, unsupported=frozenset({(Ops.EXP2, dtypes.float32)}))
    with pytest.raises(LoweringError, match="EXP2 on float"):
        lower(_kernel(_rand(4).exp2()), target)


def test_a_renderer_declares_its_exceptions_in_its_target() -> None:
    class NoHalfMax(Renderer):
        code_for_op = dict.fromkeys(REFERENCE_OPS, lambda *a: "")
        unsupported = frozenset({(Ops.MAX, dtypes.float16)})

    target = NoHalfMax().target(F32)
    assert target.unsupported == NoHalfMax.unsupported and hash(target) == hash(NoHalfMax().target(F32))
    assert dict(target.canonical())["unsupported"] == [str((Ops.MAX, dtypes.float16))]  # a disk-cache key
