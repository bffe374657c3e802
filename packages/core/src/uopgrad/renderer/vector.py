"""Vector types for the C-family renderers (layer 12): what the opt pass's vector forms print as.

`GCCVectors` is mixed into a C renderer whose compiler has GCC's vector extensions (gcc, clang): a vector
of n `float`s is `__uopgrad_float_n`, a `vector_size` typedef; lane-wise + - * & | ^ are C's operators on
it. Vector loads and stores go through a copy of the type aligned like its element (`..._u`), so any
element offset may start one. STACK prints a compound literal of its lanes, GEP an element read,
a vector constant its value in every lane.
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

from uopgrad.codegen import Program
from uopgrad.dtype import DType
from uopgrad.ops import Ops
from uopgrad.uop import UOp

__all__ = ["GCCVectors"]


class GCCVectors:
    """A mixin for a `CStyleRenderer` subclass (put it first in the bases)."""

    extra_handlers: ClassVar[dict[Ops, Any]] = {}

    def vector_name(self: Any, dt: DType, unaligned: bool = False) -> str:
        scalar = re.sub(r"\W", "_", self.type_map[dt.scalar()])
        return f"__uopgrad_{scalar}_{dt.count}" + ("u" if unaligned else "")

    def ctype(self: Any, dt: DType) -> str:
        base = dt.base
        if base.count > 1:
            return str(GCCVectors.vector_name(self, base))
        return str(super(GCCVectors, self).ctype(dt))  # type: ignore[misc]

    def render_const(self: Any, value: object, dt: DType) -> str:
        lane = super(GCCVectors, self).render_const(value, dt.scalar())  # type: ignore[misc]
        if dt.count == 1:
            return str(lane)
        return f"(({GCCVectors.vector_name(self, dt)}){{{', '.join([lane] * dt.count)}}})"

    def render_load(self: Any, buf: str, offset: str, dt: DType) -> str:
        if dt.count == 1:
            return str(super(GCCVectors, self).render_load(buf, offset, dt))  # type: ignore[misc]
        return f"(*(const {GCCVectors.vector_name(self, dt, True)}*)({buf}+{offset}))"

    def render_store(self: Any, buf: str, offset: str, value: str, dt: DType) -> str:
        if dt.count == 1:
            return str(super(GCCVectors, self).render_store(buf, offset, value, dt))  # type: ignore[misc]
        return f"*({GCCVectors.vector_name(self, dt, True)}*)({buf}+{offset}) = {value};"

    def render(self: Any, program: Program) -> str:
        src = str(super(GCCVectors, self).render(program))  # type: ignore[misc]
        vecs = sorted({u.dtype.base for u in program.uops if u.dtype.base.count > 1}, key=repr)
        if not vecs:
            return src
        lines = []
        for dt in vecs:
            size, scalar = dt.count * dt.scalar().itemsize, self.type_map[dt.scalar()]
            lines.append(f"typedef {scalar} {GCCVectors.vector_name(self, dt)} "
                         f"__attribute__((vector_size({size})));")
            lines.append(f"typedef {scalar} {GCCVectors.vector_name(self, dt, True)} "
                         f"__attribute__((vector_size({size}), aligned({dt.scalar().itemsize})));")
        return "\n".join(lines) + "\n" + src


def _vectorize(r: Any, st: Any, u: UOp) -> None:
    r._value(st, u, "vec", f"(({r.ctype(u.dtype)}){{{', '.join(st.names[s] for s in u.src)}}})")


def _gep(r: Any, st: Any, u: UOp) -> None:
    r._value(st, u, "alu", f"{st.names[u.src[0]]}[{u.arg[0]}]")


GCCVectors.extra_handlers = {Ops.STACK: _vectorize, Ops.GEP: _gep}
