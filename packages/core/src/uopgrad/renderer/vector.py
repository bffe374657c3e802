"""Vector types for the C-family renderers (layer 12): what the opt pass's vector forms print as.

`GCCVectorRenderer` is a `CStyleRenderer` for compilers with GCC's vector extensions (gcc, clang): a
vector of n `float`s is `__uopgrad_float_n`, a `vector_size` typedef, and lane-wise + - * & | ^ are C's
operators on it. Vector loads and stores go through a copy of the type aligned like its element (`..._nu`),
so any element offset may start one. STACK prints a compound literal of its lanes, GEP an element read, a
vector constant its value in every lane.
"""
from __future__ import annotations

import re
from typing import ClassVar

from uopgrad.codegen import Program
from uopgrad.dtype import DType
from uopgrad.ops import Ops
from uopgrad.renderer.cstyle import CStyleRenderer, _Handler, _State
from uopgrad.uop import UOp

__all__ = ["GCCVectorRenderer"]


class GCCVectorRenderer(CStyleRenderer):
    """C with GCC vector extensions for the vector forms of uopgrad.codegen.opt."""

    def vector_name(self, dt: DType, unaligned: bool = False) -> str:
        """The typedef of vector dtype `dt` (`unaligned`: the copy aligned like one element)."""
        scalar = re.sub(r"\W", "_", self.type_map[dt.scalar()])
        return f"__uopgrad_{scalar}_{dt.count}" + ("u" if unaligned else "")

    def ctype(self, dt: DType) -> str:
        """A vector dtype is its typedef; a scalar one as in CStyleRenderer."""
        return self.vector_name(dt.base) if dt.base.count > 1 else super().ctype(dt)

    def render_const(self, value: object, dt: DType) -> str:
        """A vector constant: the literal in every lane."""
        lane = super().render_const(value, dt.scalar())
        return lane if dt.count == 1 else f"(({self.vector_name(dt)}){{{', '.join([lane] * dt.count)}}})"

    def render_load(self, buf: str, offset: str, dt: DType) -> str:
        """A vector load reads `dt.count` elements from `offset` on, at any alignment."""
        if dt.count == 1:
            return super().render_load(buf, offset, dt)
        return f"(*(const {self.vector_name(dt, True)}*)({buf}+{offset}))"

    def render_store(self, buf: str, offset: str, value: str, dt: DType) -> str:
        """A vector store writes `dt.count` elements from `offset` on, at any alignment."""
        if dt.count == 1:
            return super().render_store(buf, offset, value, dt)
        return f"*({self.vector_name(dt, True)}*)({buf}+{offset}) = {value};"

    def render(self, program: Program) -> str:
        """The source, after the typedefs of the vector types the program uses."""
        src = super().render(program)
        vecs = sorted({u.dtype.base for u in program.uops if u.dtype.base.count > 1}, key=repr)
        lines = []
        for dt in vecs:
            size, scalar = dt.count * dt.scalar().itemsize, self.type_map[dt.scalar()]
            lines.append(f"typedef {scalar} {self.vector_name(dt)} __attribute__((vector_size({size})));")
            lines.append(f"typedef {scalar} {self.vector_name(dt, True)} "
                         f"__attribute__((vector_size({size}), aligned({dt.scalar().itemsize})));")
        return "\n".join([*lines, src]) if lines else src

    extra_handlers: ClassVar[dict[Ops, _Handler]] = {}


def _stack(r: CStyleRenderer, st: _State, u: UOp) -> None:
    r._value(st, u, "vec", f"(({r.ctype(u.dtype)}){{{', '.join(st.names[s] for s in u.src)}}})")


def _gep(r: CStyleRenderer, st: _State, u: UOp) -> None:
    r._value(st, u, "alu", f"{st.names[u.src[0]]}[{int(u.arg[0])}]")


GCCVectorRenderer.extra_handlers = {Ops.STACK: _stack, Ops.GEP: _gep}
