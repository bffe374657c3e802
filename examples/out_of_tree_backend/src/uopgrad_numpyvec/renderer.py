"""The renderer of NUMPYVEC: a linear program (spec/kernels.md §2) printed as one Python function.

The backend is grid-style with one thread per workgroup, so codegen maps every output element to a lane
(`gidx0..2`); the function computes all lanes at once, each value a 1-d numpy array (one element per lane,
or one element for lane-invariant values). Reduce loops stay Python `for` loops. `code_for_op` is the
table of ALU ops rendered natively (its keys are the capability declaration): SUB and MULACC are left to
codegen's decompositions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from uopgrad import DType, Ops, UOp, dtypes
from uopgrad.codegen import GridLimits, LinearProgram
from uopgrad.renderer import Renderer

__all__ = ["NumpyRenderer"]

PyOp = Callable[..., str]


def _np(fn: str) -> PyOp:
    return lambda *xs: f"np.{fn}({', '.join(xs)})"


def _helper(fn: str) -> PyOp:
    return lambda *xs: f"{fn}({', '.join(xs)})"


def _np_name(dt: DType) -> str:
    return f"np.{np.dtype(dtypes.to_numpy(dt)).name}"


class NumpyRenderer(Renderer):
    """Python source over numpy arrays, one lane per output element."""

    device = "NUMPYVEC"
    # one thread per workgroup and (practically) unlimited workgroups: every output element is a lane
    grid = GridLimits(
        global_max=(2**31 - 1, 2**31 - 1, 2**31 - 1), local_max=(1, 1, 1), local_prod_max=1, local_size=1
    )
    code_for_op: ClassVar[dict[Ops, PyOp]] = {
        Ops.ADD: _np("add"),
        Ops.MUL: _np("multiply"),
        Ops.NEG: _helper("neg"),
        Ops.MAX: _np("maximum"),
        Ops.CMPLT: _np("less"),
        Ops.CMPNE: _np("not_equal"),
        Ops.CMPEQ: _np("equal"),
        Ops.AND: _np("bitwise_and"),
        Ops.OR: _np("bitwise_or"),
        Ops.XOR: _np("bitwise_xor"),
        Ops.SHL: _helper("shl"),
        Ops.SHR: _helper("shr"),
        Ops.CDIV: _helper("cdiv"),
        Ops.CMOD: _helper("cmod"),
        Ops.FLOORDIV: _helper("floordiv"),
        Ops.FLOORMOD: _helper("floormod"),
        Ops.POW: _helper("ipow"),
        Ops.FDIV: lambda a, b: f"(np.true_divide({a}, {b}) if {a}.dtype.kind == 'f' else cdiv({a}, {b}))",
        Ops.EXP2: _np("exp2"),
        Ops.LOG2: _np("log2"),
        Ops.SIN: _np("sin"),
        Ops.SQRT: _np("sqrt"),
        Ops.RECIPROCAL: _np("reciprocal"),
        Ops.TRUNC: _helper("trunc"),
        Ops.WHERE: _np("where"),
        Ops.THREEFRY: _helper("threefry"),
    }

    def function_name(self, name: str) -> str:
        """The kernel name as a Python identifier."""
        ident = re.sub(r"\W", "_", name)
        return ident if ident.isidentifier() and not ident[0].isdigit() else f"k_{ident}"

    def render(self, program: LinearProgram) -> str:
        """The source of `def <name>(bufs, vals, gsize)`: buffers are uint8 arrays viewed as their dtypes."""
        lines = [
            f"def {self.function_name(program.name)}(bufs, vals, gsize):",
            "    lanes = np.arange(gsize[0] * gsize[1] * gsize[2], dtype=np.int64)",
        ]
        names: dict[UOp, str] = {}
        depth = 1
        var_pos = {v: k for k, v in enumerate(program.vars)}
        slot_pos = {slot: k for k, slot in enumerate(program.globals)}
        for i, u in enumerate(program.uops):
            for c in u.src:
                if c.op is Ops.CONST and c not in names:
                    names[c] = self._const(c)
            pad = "    " * depth
            line, depth = self._line(u, i, names, depth, var_pos, slot_pos)
            if line is not None:
                lines.append(pad + line)
        return "\n".join(lines) + "\n"

    def _const(self, c: UOp) -> str:
        v = c.arg
        if dtypes.is_float(c.dtype):
            f = float(v)
            inf = "np.inf" if f > 0 else "-np.inf"
            lit = "np.nan" if math.isnan(f) else inf if math.isinf(f) else repr(f)
        else:
            lit = repr(bool(v)) if c.dtype == dtypes.bool else str(int(v))
        return f"np.array([{lit}], dtype={_np_name(c.dtype)})"

    def _line(
        self,
        u: UOp,
        i: int,
        names: dict[UOp, str],
        depth: int,
        var_pos: dict[UOp, int],
        slot_pos: dict[int, int],
    ) -> tuple[str | None, int]:
        """The source line of one uop (None for none) and the indentation depth after it."""
        name, src = f"v{i}", [names.get(s, "") for s in u.src]
        names[u] = name
        if u.op in self.code_for_op:
            return f"{name} = np.asarray({self.code_for_op[u.op](*src)}).astype({_np_name(u.dtype)})", depth
        if u.op is Ops.PARAM:
            names[u] = f"data{u.arg}"
            return f"data{u.arg} = bufs[{slot_pos[u.arg]}].view({_np_name(u.dtype.base)})", depth
        if u.op is Ops.CONST:
            names[u] = self._const(u)
            return None, depth
        if u.op is Ops.DEFINE_VAR:
            return f"{name} = np.array([vals[{var_pos[u]}]], dtype={_np_name(u.dtype)})", depth
        if u.op is Ops.SPECIAL:
            return self._special(u, name), depth
        if u.op is Ops.RANGE:  # the loop variable is a one-element array like every other value
            return (
                f"for {name} in np.arange(int({src[0]}[0]), dtype={_np_name(u.dtype)}).reshape(-1, 1):",
                depth + 1,
            )
        if u.op is Ops.END:
            return None, depth - 1
        if u.op is Ops.DEFINE_REG:
            return f"{name} = {src[0]}.copy()", depth
        if u.op is Ops.INDEX:
            names[u] = f"{src[0]}\0{src[1]}"  # (buffer, offset): LOAD and STORE take it apart
            return None, depth
        if u.op is Ops.AFTER:
            names[u] = src[0]
            return None, depth
        return self._memory(u, name, src), depth

    def _special(self, u: UOp, name: str) -> str:
        kind, dim = str(u.arg)[:-1], int(str(u.arg)[-1])
        if kind == "lidx":
            return f"{name} = np.zeros((1,), dtype={_np_name(u.dtype)})"
        below = " * ".join(f"gsize[{d}]" for d in range(dim)) or "1"
        return f"{name} = ((lanes // ({below})) % gsize[{dim}]).astype({_np_name(u.dtype)})"

    def _memory(self, u: UOp, name: str, src: list[str]) -> str:
        if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_REG:
            return f"{name} = {src[0]}"
        if u.op is Ops.LOAD:
            buf, off = src[0].split("\0")
            if len(u.src) > 1:
                return f"{name} = gload({buf}, {off}, {src[1]})"
            return f"{name} = {buf}[{off}]"
        if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_REG:
            return f"{src[0]} = np.asarray({src[1]}).astype({src[0]}.dtype)"
        if u.op is Ops.STORE:
            gate = f", {src[2]}" if len(src) > 2 else ""
            buf, off = src[0].split("\0")
            return f"store({buf}, {off}, {src[1]}{gate})"
        if u.op is Ops.CAST:
            return f"{name} = cast({src[0]}, np.dtype({_np_name(u.dtype)}))"
        if u.op is Ops.BITCAST:
            return f"{name} = np.ascontiguousarray({src[0]}).view({_np_name(u.dtype)})"
        if u.op in (Ops.SINK, Ops.NOOP, Ops.GROUP):
            return "pass"
        raise NotImplementedError(f"NUMPYVEC can't render {u.op}: {u.short()}")
