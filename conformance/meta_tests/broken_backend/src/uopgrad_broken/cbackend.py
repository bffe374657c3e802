"""Broken C backends: the CPU backend (C99, built by the system compiler, OpenMP on large loops) with one
realistic mistake each, in its renderer, runtime or allocator, one per case class of the conformance
suite. Each is the kind of bug a backend author writes: a plain C construct where C is undefined, a loop
split without its remainder, a pragma on the wrong loop, a fast path that swaps two arguments.

| device           | planted bug                                                                    |
| ---------------- | ------------------------------------------------------------------------------ |
| BROKEN_C_TAIL    | loops over more than 1024 elements run in blocks of 1024; the remainder is lost |
| BROKEN_C_RACE    | `#pragma omp parallel for` on any large outer loop, reductions included: each  |
|                  | thread sums into its own copy and the last one wins (depends on the threads)   |
| BROKEN_C_WHERE   | WHERE of a broadcast (single-element) condition has its branches swapped       |
| BROKEN_C_INTDIV  | integer division and remainder as plain C `/` and `%` (INT_MIN / -1 traps)      |
| BROKEN_C_F2I     | float -> int casts as a plain C cast (NaN and out-of-range values undefined)   |
| BROKEN_C_NOZERO  | the allocator does not zero reused memory, so a fresh buffer reads old values  |
| BROKEN_C_VARS    | bound variables passed to the kernel in reverse order                          |
| BROKEN_C_F16     | float -> half conversion truncates (rounds toward zero)                        |
| BROKEN_C_LITERAL | float literals printed with 6 significant digits                               |
| BROKEN_C_MANYBUF | the launcher passes buffers after the 8th in reverse order                     |
| BROKEN_C_INDEX16 | buffer indices wrap at 16 bits (an index type too narrow for large buffers)    |
| BROKEN_C_MATH    | float64 math calls the float versions (`log2f`, `sinf`, ...)                   |
| BROKEN_C_REALIZE | a realized tensor becomes its bare buffer: gradients after a read are zero     |
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from uopgrad import DType, Ops, dtypes
from uopgrad.backend import CompiledBackend
from uopgrad.codegen import Program as LinearProgram
from uopgrad.renderer import Renderer
from uopgrad_cpu import CPU_DTYPES, CCompiler, CPUAllocator, CPUProgram, CRenderer

__all__ = [
    "BrokenF2I",
    "BrokenF16",
    "BrokenIndex16",
    "BrokenIntDiv",
    "BrokenLiteral",
    "BrokenManyBuf",
    "BrokenMath",
    "BrokenNoZero",
    "BrokenRace",
    "BrokenRealize",
    "BrokenTail",
    "BrokenVars",
    "BrokenWhere",
]


def _backend(
    renderer: type[Renderer] = CRenderer,
    program: type[CPUProgram] = CPUProgram,
    allocator: type[CPUAllocator] = CPUAllocator,
) -> type[CompiledBackend]:
    class Mutant(CompiledBackend):
        def __init__(self, device: str) -> None:
            super().__init__(device, renderer(), CCompiler(), allocator(), program, CPU_DTYPES)

    return Mutant


def _patched(patch: Callable[[], None], renderer: type[Renderer] = CRenderer) -> type[CompiledBackend]:
    """The CPU backend of a device whose bug is in core: `patch` (applied now) replaces a core function
    with one that goes wrong for that device's tensors or target only. (The devices are the entry points of
    pyproject.toml.)"""
    patch()
    return _backend(renderer)


class _SourceMutation(CRenderer):
    """A renderer whose output goes through `mutate` (the bug is a rewrite of the C text)."""

    def render(self, program: LinearProgram) -> str:
        return self.mutate(super().render(program))

    def mutate(self, src: str) -> str:
        return src


class _Tail(_SourceMutation):
    def mutate(self, src: str) -> str:
        # blocks of 1024 (meant for a vector loop); the scalar remainder loop was never written
        def bound(m: re.Match[str]) -> str:
            return f"{m[1]} < {m[2]} / 1024 * 1024;" if int(m[2]) > 1024 else m[0]

        return re.sub(r"(ridx\d+) < (\d+);", bound, src)


class _Race(_SourceMutation):
    def mutate(self, src: str) -> str:
        # every large loop nest runs its outer loop in parallel, a reduction too: its accumulator is
        # copied into each thread and the last thread's copy is kept (no `reduction` clause), so the result
        # depends on the number of threads
        if "#pragma omp" in src:
            return src
        work = 1
        for bound in re.findall(r"ridx\d+ < (\d+);", src):
            work *= int(bound)
        if work < 1 << 15:
            return src
        accs = re.findall(r"^  \w[\w ]* (acc\d+) = ", src, flags=re.M)
        clause = f" firstprivate({', '.join(accs)}) lastprivate({', '.join(accs)})" if accs else ""
        return re.sub(r"^  for \(", f"  #pragma omp parallel for{clause}\n  for (", src, count=1, flags=re.M)


class _Where(_SourceMutation):
    def mutate(self, src: str) -> str:
        # a condition loaded from one element (a broadcast) takes a "fast path" with the branches swapped
        for cond in re.findall(r"const _Bool (val\d+) = data\d+\[0\];", src):
            src = re.sub(rf"\({cond}\?([^:()]+):([^)]+)\)", rf"({cond}?\2:\1)", src)
        return src


def _plain_div(r: CRenderer, dt: DType, a: str, b: str) -> str:
    return f"({a}/{b})" if not dtypes.is_float(dt) else f"{r.math_fn('trunc', dt)}({a}/{b})"


def _plain_mod(r: CRenderer, dt: DType, a: str, b: str) -> str:
    return f"({a}%{b})" if not dtypes.is_float(dt) else f"{r.math_fn('fmod', dt)}({a}, {b})"


class _IntDiv(CRenderer):
    code_for_op: ClassVar = {
        **CRenderer.code_for_op,
        Ops.CDIV: _plain_div,
        Ops.FDIV: _plain_div,
        Ops.CMOD: _plain_mod,
    }


class _F2I(CRenderer):
    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if dtypes.is_float(src) and dtypes.is_int(dst):
            return f"(({self.ctype(dst)}){x})"
        return super().render_cast(x, src, dst)


class _NoZero(CPUAllocator):
    def _zero(self, handle: np.ndarray) -> None:
        pass  # "fresh memory is zeroed by calloc anyway" -- but reused memory is not fresh


class _Vars(CPUProgram):
    def _args(self, bufs: Sequence[object], vals: Sequence[int]) -> list[object]:
        return super()._args(bufs, tuple(reversed(vals)))


_TOHALF = """\
static inline _Float16 __uopgrad_tohalf(float x) {
  /* round toward zero: clear the float mantissa bits that half precision drops */
  union { float f; unsigned int u; } v = { x };
  if (x - x == 0.0f && __builtin_fabsf(x) >= 6.103515625e-05f) v.u &= ~0x1FFFu;
  return (_Float16)v.f;
}"""


class _F16(CRenderer):
    helpers: ClassVar = {**CRenderer.helpers, "__uopgrad_tohalf": _TOHALF}

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if dst.scalar() == dtypes.float16 and src.scalar() in (dtypes.float32, dtypes.float64):
            return f"__uopgrad_tohalf((float){x})"
        return super().render_cast(x, src, dst)


class _Literal(CRenderer):
    def render_const(self, value: object, dt: DType) -> str:
        if (
            dt.scalar() in (dtypes.float32, dtypes.float64)
            and isinstance(value, float | int)
            and np.isfinite(float(value))
        ):
            text = f"{float(value):.6g}"  # "%g is enough digits"
            text += "" if any(c in text for c in ".e") else ".0"
            text += "" if dt.scalar() == dtypes.float64 else "f"
            return f"({text})" if text.startswith("-") else text
        return super().render_const(value, dt)


class _ManyBuf(CPUProgram):
    def _args(self, bufs: Sequence[object], vals: Sequence[int]) -> list[object]:
        # eight buffers "in registers", the rest "on the stack" -- pushed in the wrong order
        return super()._args([*bufs[:8], *reversed(bufs[8:])], vals)


class _Index16(_SourceMutation):
    def mutate(self, src: str) -> str:
        return re.sub(r"(data\d+)\[([^\]]+)\]", r"\1[(unsigned short)(\2)]", src)


class _Math(CRenderer):
    def math_fn(self, name: str, dt: DType) -> str:
        return f"{name}f"


BrokenTail = _backend(_Tail)
BrokenRace = _backend(_Race)
BrokenWhere = _backend(_Where)
BrokenIntDiv = _backend(_IntDiv)
BrokenF2I = _backend(_F2I)
BrokenNoZero = _backend(allocator=_NoZero)
BrokenVars = _backend(program=_Vars)
BrokenF16 = _backend(_F16)
BrokenLiteral = _backend(_Literal)
BrokenManyBuf = _backend(program=_ManyBuf)
BrokenIndex16 = _backend(_Index16)
BrokenMath = _backend(_Math)


# ---------------------------------------------------------------------- a realize that drops the graph
def _drops_graph_at_realize() -> None:
    """BROKEN_C_REALIZE: the CPU backend whose realize hands back bare buffers: a tensor on it, once
    realized (`.realize()`, `.numpy()`, `.item()`), is its buffer with the computation that filled it
    forgotten, so a gradient taken afterwards is zero (issue 9's bug, planted in one device)."""
    from uopgrad import Tensor

    original = Tensor._realize

    def realize(tensors: Sequence[Tensor]) -> None:
        original(tensors)
        for t in tensors:
            if str(t.device).startswith("BROKEN_C_REALIZE"):
                u = t.uop
                while u.op is Ops.AFTER:  # the buffer, without the CALL that wrote it
                    u = u.src[0]
                t.uop = u

    Tensor._realize = staticmethod(realize)  # type: ignore[method-assign]


BrokenRealize = _patched(_drops_graph_at_realize)
