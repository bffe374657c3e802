"""Index propagation (codegen, layer 11): movement ops become index arithmetic on buffer offsets.

`lower_indexing` turns a kernel body SINK(STORE(view, value), ...) into loops over each stored shape: one
RANGE per dimension, INDEX(PARAM, offset) for every buffer access, PAD as a validity gate (a gated load reads
0, a gated store is skipped), and each REDUCE as a kernel-level REDUCE(value, *ranges) that reduce.py turns
into an accumulator. The index of a movement op's source is computed from the index of its output
(spec/kernels.md; docs/pipeline.md §1.2) and simplified with `symbolic.pm_sym_ungated` as it is made,
and so is a value op with a constant operand (its constants were under broadcast views until now). Every
(node, index, gate) is lowered once, with an explicit stack: no recursion over the graph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from uopgrad._util import prod
from uopgrad.codegen.reduce import identity_element
from uopgrad.dtype import ConstType, DType, PtrDType, dtypes
from uopgrad.errors import LoweringError
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.symbolic import pm_sym_ungated, sym
from uopgrad.uop import UOp, sint

__all__ = ["index_dtype", "lower_indexing", "pm_index_dtype"]

Index = tuple[UOp, ...]
Key = tuple[UOp, Index, "UOp | None"]
Plan = tuple[list[Key], Callable[[list[UOp]], UOp]]
_ZERO = UOp(Ops.CONST, dtypes.index, (), 0)


def _const(dtype: DType, v: ConstType) -> UOp:
    return UOp(Ops.CONST, dtype, (), dtypes.as_const(v, dtype))


def _idx(v: sint) -> UOp:
    """A size or index as an index-typed node."""
    if isinstance(v, int):
        return UOp(Ops.CONST, dtypes.index, (), v)
    return v if v.dtype == dtypes.index else v.cast(dtypes.index)


def _nonunit(shape: Sequence[sint]) -> list[sint]:
    return [d for d in shape if not (isinstance(d, int) and d == 1)]


def _groups(shape_in: Sequence[sint], shape_out: Sequence[sint]) -> list[tuple[range, range]]:
    """Split a reshape into independent groups of (input dims, output dims) with equal products."""
    ins = [d for d in shape_in if isinstance(d, int)]
    outs = [d for d in shape_out if isinstance(d, int)]
    if len(ins) != len(shape_in) or len(outs) != len(shape_out) or 0 in ins:
        return [(range(len(shape_in)), range(len(shape_out)))]
    groups, i, j = [], 0, 0
    while i < len(ins) or j < len(outs):
        i0, j0, pi, pj = i, j, 1, 1
        while True:
            if pi <= pj and i < len(ins):
                pi, i = pi * ins[i], i + 1
            elif j < len(outs):
                pj, j = pj * outs[j], j + 1
            else:
                pi, i = pi * ins[i], i + 1
            if pi == pj and (i == len(ins) or ins[i] != 1 or j == len(outs)):
                break
        groups.append((range(i0, i), range(j0, j)))
    return groups


def _reshape_index(ins: Sequence[sint], outs: Sequence[sint], o: Index) -> list[UOp]:
    """The input index of a RESHAPE: flatten the output index row-major, then peel the input dims off."""
    if _nonunit(ins) == _nonunit(outs):  # only size-1 dims come or go
        kept = iter([x for x, d in zip(o, outs) if not (isinstance(d, int) and d == 1)])
        return [_ZERO if isinstance(d, int) and d == 1 else next(kept) for d in ins]
    out: list[UOp] = [_ZERO] * len(ins)
    for gi, go in _groups(ins, outs):
        flat, stride = _ZERO, _idx(1)
        for j in reversed(go):
            flat, stride = flat + o[j] * stride, stride * _idx(outs[j])
        stride = _idx(1)
        for k in reversed(gi):
            q = flat if k == gi.stop - 1 else flat // stride
            out[k] = q if k == gi.start else q % _idx(ins[k])
            stride = stride * _idx(ins[k])
    return out


def _fold(u: UOp) -> UOp:
    """A value op with a constant operand, simplified by `sym` (a fold, or a law such as x & False ->
    False) as it is lowered. In the tensor graph its constants sit under broadcast views, which no law
    looks through, so a gradient's `e != 0` on a constant exponent, or `2.0 + 1.0 * -1.0`, would reach the
    kernel unfolded; here the views are gone. Sources are folded before their users, so this looks at one
    node, and at the sources of what a law made of it (x+(c1+c2)), never at the graph under it."""
    while any(s.op is Ops.CONST for s in u.src) and (new := sym.rewrite(u)) is not None:
        u = new.replace(src=tuple(_fold(s) for s in new.src)) if new.src else new
    return u


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None or b is None:
        return b if a is None else a
    return UOp(Ops.AND, dtypes.bool, (a, b))


# process-wide: kernels of one step index their buffers with the same expressions over the same (interned)
# RANGEs, and the opt pass lowers a nest again for each tile it tries (the digits example's first step: 519
# simplifications of 82 kernels). `pm_sym_ungated` is a fixed table and a UOp is its structure, so a hit is
# the same result.
@functools.lru_cache(maxsize=1 << 14)
def simplify_index(e: UOp) -> UOp:
    """`e` simplified by `symbolic.pm_sym_ungated` (memoised)."""
    return graph_rewrite(e, pm_sym_ungated, name="codegen: simplify index")


class _Indexer:
    """Lowers the values of one loop nest. `counter` numbers the RANGEs across the whole kernel (outer loops
    get smaller numbers: the linearizer nests by them); `params` maps a slot to the node reads go through."""

    def __init__(self, counter: list[int], params: dict[int, UOp]) -> None:
        self.counter, self.params = counter, params
        self.memo: dict[Key, UOp] = {}
        self.plans: dict[Key, Plan] = {}
        self.simplified: dict[UOp, UOp] = {}

    def simplify(self, e: UOp) -> UOp:
        if e.op in (Ops.CONST, Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR):
            return e
        if e not in self.simplified:
            self.simplified[e] = simplify_index(e)
        return self.simplified[e]

    def new_range(self, size: sint, kind: str) -> UOp:
        """A loop over `size`; a dimension of size 1 is the constant 0."""
        if isinstance(size, int) and size == 1:
            return _ZERO
        self.counter[0] += 1
        # a symbolic size simplified now: simplifying an index that holds the RANGE would otherwise rebuild
        # it around the simplified size, a second loop where the store's index has the first
        return UOp(Ops.RANGE, dtypes.index, (self.simplify(_idx(size)),), (self.counter[0] - 1, kind))

    def param(self, p: UOp) -> UOp:
        if p.arg not in self.params:
            self.params[p.arg] = UOp(Ops.PARAM, p.dtype, (), p.arg)
        return self.params[p.arg]

    # -------------------------------------------------------------- movement ops on an index
    def move(self, u: UOp, o: Index) -> tuple[Index, UOp | None]:
        """The index into `u`'s source for index `o` into `u`, and the PAD condition for `o` (or None)."""
        src_shape, op = u.src[0].shape, u.op
        cond: UOp | None = None
        if op is Ops.RESHAPE:
            i = _reshape_index(src_shape, u.shape, o)
        elif op is Ops.EXPAND:
            i = [_ZERO if isinstance(s, int) and s == 1 else x for s, x in zip(src_shape, o)]
        elif op is Ops.PERMUTE:
            i = [_ZERO] * len(o)
            for k, axis in enumerate(u.arg):
                i[axis] = o[k]
        elif op is Ops.SHRINK:
            i = [x + _idx(b) if not (isinstance(b, int) and b == 0) else x for x, (b, _) in zip(o, u.marg)]
        elif op is Ops.FLIP:
            i = [(_idx(s) - 1) - x if f else x for x, s, f in zip(o, src_shape, u.arg)]
        elif op is Ops.PAD:
            i = []
            for x, s, (b, e) in zip(o, src_shape, u.marg):
                if isinstance(b, int) and isinstance(e, int) and b == 0 and e == 0:
                    i.append(x)
                    continue
                cond = _and(
                    cond,
                    _and(
                        UOp(Ops.CMPLT, dtypes.bool, (_idx(b) - 1, x)),
                        UOp(Ops.CMPLT, dtypes.bool, (x, _idx(b) + _idx(s))),
                    ),
                )
                i.append(x - _idx(b))
        else:
            raise LoweringError(f"{op} is not a movement op")
        return tuple(self.simplify(x) for x in i), None if cond is None else self.simplify(cond)

    def address(self, view: UOp, o: Index) -> tuple[UOp, UOp | None]:
        """INDEX(PARAM, offset) of a store target (movement ops over a PARAM), and its gate."""
        valid: UOp | None = None
        while view.op in GroupOp.Movement or view.op is Ops.AFTER:
            if view.op is not Ops.AFTER:
                o, cond = self.move(view, o)
                valid = _and(valid, cond)
            view = view.src[0]
        if view.op is not Ops.PARAM or not isinstance(view.dtype, PtrDType):
            raise LoweringError(f"a kernel stores into movement ops over a pointer PARAM, not {view.short()}")
        index = UOp(Ops.INDEX, view.dtype, (self.param(view), o[0]))
        return index, None if valid is None else self.simplify(valid)

    # -------------------------------------------------------------- values
    def plan(self, key: Key) -> Plan:
        """The (node, index, gate) keys a value needs, and how to build it from their lowered values."""
        u, o, valid = key
        op = u.op
        if op is Ops.PARAM and isinstance(u.dtype, PtrDType):
            return [], lambda _: self.load(u, o[0], valid)
        if op is Ops.CONST:
            return [], lambda _: UOp(Ops.CONST, u.dtype, (), u.arg)
        if op in (Ops.DEFINE_VAR, Ops.BIND):
            var = u if op is Ops.DEFINE_VAR else u.src[0]
            return [], lambda _: var
        if op in GroupOp.Movement:
            i, cond = self.move(u, o)
            if cond is not None and cond.op is Ops.CONST:
                if not cond.arg:
                    return [], lambda _: _const(u.dtype, 0)  # entirely padding
                cond = None
            if cond is None:
                return [(u.src[0], i, valid)], lambda v: v[0]
            inner = cond if valid is None else self.simplify(UOp(Ops.AND, dtypes.bool, (valid, cond)))
            zero = _const(u.dtype, 0)
            return [(u.src[0], i, inner)], lambda v: UOp(Ops.WHERE, u.dtype, (cond, v[0], zero))
        if op is Ops.REDUCE:
            return self.plan_reduce(u, o, valid)
        if op is Ops.AFTER:  # a read after an earlier STORE of this kernel: nests run in order anyway
            return [(u.src[0], o, valid)], lambda v: v[0]
        if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
            return [(s, o, valid) for s in u.src], lambda v: _fold(UOp(op, u.dtype.base, tuple(v), u.arg))
        raise LoweringError(f"{op} can't appear in a kernel body (spec/kernels.md §1): {u.short()}")

    def plan_reduce(self, u: UOp, o: Index, valid: UOp | None) -> Plan:
        rop, axes = u.arg
        shape = u.src[0].shape
        if any(isinstance(shape[a], int) and shape[a] == 0 for a in axes):
            return [], lambda _: _const(u.dtype, identity_element(rop, u.dtype))  # an empty reduce
        i = list(o)
        for a in axes:
            i[a] = self.new_range(shape[a], "reduce")
        ranges = tuple(r for r in (i[a] for a in axes) if r.op is Ops.RANGE)
        if not ranges:
            return [(u.src[0], tuple(i), valid)], lambda v: v[0]
        return [(u.src[0], tuple(i), valid)], lambda v: UOp(Ops.REDUCE, u.dtype, (v[0], *ranges), rop)

    def load(self, p: UOp, offset: UOp, gate: UOp | None) -> UOp:
        index = UOp(Ops.INDEX, p.dtype, (self.param(p), offset))
        return UOp(Ops.LOAD, p.dtype.base, (index,) if gate is None else (index, gate))

    def value(self, root: UOp, o: Index) -> UOp:
        """The lowered value of `root` at index `o` (iterative: a stack of keys waiting for their sources)."""
        stack: list[Key] = [(root, o, None)]
        while stack:
            key = stack[-1]
            if key in self.memo:
                stack.pop()
                continue
            if key not in self.plans:
                self.plans[key] = self.plan(key)
            needs, build = self.plans[key]
            missing = [k for k in needs if k not in self.memo]
            if missing:
                stack.extend(missing)
                continue
            self.memo[key] = build([self.memo[k] for k in needs])
            del self.plans[key]
            stack.pop()
        return self.memo[(root, o, None)]


def lower_indexing(sink: UOp) -> UOp:
    """SINK(STORE(view, value), ...) -> SINK(END(range, ... STORE(INDEX(PARAM, offset), value[, gate]))),
    one loop nest per STORE, in order. A nest reads what an earlier nest wrote through AFTER(PARAM, nest)."""
    counter = [0]
    written: dict[int, tuple[UOp, UOp]] = {}  # slot -> (its PARAM, the last nest that wrote it)
    nests: list[UOp] = []
    loops: dict[UOp, UOp] = {}  # a RANGE the kernel's author wrote -> the kernel's RANGE
    for st in sink.src:
        if is_explicit(st):
            nests.extend(_Loops(_Indexer(counter, {}), loops).lower(st))
            continue
        if st.op is not Ops.STORE:
            raise LoweringError(f"a kernel body is a SINK of STOREs, not of {st.op}")
        target, value = st.src
        shape = target.shape
        if isinstance(n := prod(shape), int) and n == 0:
            continue  # nothing to store
        ix = _Indexer(counter, {s: UOp(Ops.AFTER, p.dtype, (p, nest)) for s, (p, nest) in written.items()})
        ranges = tuple(ix.new_range(s, "loop") for s in shape)
        index, gate = ix.address(target, ranges)
        v = ix.value(value, ranges)
        node = UOp(Ops.STORE, dtypes.void, (index, v) if gate is None else (index, v, gate))
        for r in reversed(ranges):
            if r.op is Ops.RANGE:
                node = UOp(Ops.END, dtypes.void, (r, node))
        param = index.src[0] if index.src[0].op is Ops.PARAM else index.src[0].src[0]
        written[param.arg] = (param, node)
        nests.append(node)
    return UOp(Ops.SINK, dtypes.void, tuple(nests))


# ---------------------------------------------------------------------- kernels written with explicit loops
def is_explicit(effect: UOp) -> bool:
    """An effect of a kernel written with its own loops: END, GROUP, or a STORE into an INDEX."""
    return effect.op in (Ops.END, Ops.GROUP) or (effect.op is Ops.STORE and effect.src[0].op is Ops.INDEX)


class _Loops:
    """Lowers effects written with explicit loops: each `UOp.range` becomes a kernel RANGE (numbered in
    `axis_id` order after the ones made so far), `view[i, ...]` the INDEX of its address (a LOAD where it is
    read), END(effect, *ranges) nested END(range, effect)s, and a GROUP its effects."""

    def __init__(self, ix: _Indexer, loops: dict[UOp, UOp]) -> None:
        self.ix, self.loops = ix, loops
        self.new: dict[UOp, UOp | tuple[UOp, ...]] = {}

    def lower(self, effect: UOp) -> list[UOp]:
        nodes = list(effect.toposort())
        fresh = [u for u in nodes if u.op is Ops.RANGE and u not in self.loops]
        for r in sorted(fresh, key=lambda u: u.arg[0]):
            self.ix.counter[0] += 1
            n = self.ix.counter[0] - 1
            self.loops[r] = UOp(Ops.RANGE, dtypes.index, (_bound(r.src[0]),), (n, "loop"))
        for u in nodes:
            rule: _Rule | None = _LOOP_RULES.get(u.op)
            if rule is None:
                rule = (
                    _Loops.value
                    if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST)
                    else _Loops.keep
                    if u.op in GroupOp.Movement
                    else None
                )
            if rule is None:
                raise LoweringError(f"{u.op} can't appear in a kernel with explicit loops: {u.short()}")
            self.new[u] = rule(self, u)
        return list(self.effects(effect))

    def one(self, u: UOp) -> UOp:
        """The lowered value of `u`: an element of a buffer is LOADed (gated like its address)."""
        v = self.new[u]
        if isinstance(v, tuple):
            raise LoweringError(f"a GROUP of effects is not a value: {u.short()}")
        if u.op is not Ops.INDEX:
            return v
        return UOp(Ops.LOAD, v.dtype.base, (UOp(Ops.INDEX, v.dtype, v.src[:2]), *v.src[2:]))

    def effects(self, u: UOp) -> tuple[UOp, ...]:
        v = self.new[u]
        return v if isinstance(v, tuple) else (v,)

    def keep(self, u: UOp) -> UOp:
        return u  # views, their shape vectors and variables: read only through INDEX

    def range(self, u: UOp) -> UOp:
        return self.loops[u]

    def group(self, u: UOp) -> tuple[UOp, ...]:
        return tuple(e for s in u.src for e in self.effects(s))

    def end(self, u: UOp) -> UOp | tuple[UOp, ...]:
        node = self.effects(u.src[0])
        for r in sorted((self.loops[r] for r in u.src[1:]), key=lambda r: r.arg[0], reverse=True):
            node = (UOp(Ops.END, dtypes.void, (r, *node)),)
        return node[0] if len(node) == 1 else node

    def index(self, u: UOp) -> UOp:
        """INDEX(PARAM, offset[, gate]) for now; `one` and `store` split off the gate."""
        if not isinstance(u.src[0].base.dtype, PtrDType):
            raise LoweringError(f"a kernel indexes pointer PARAMs or views of them, not {u.src[0].short()}")
        index, gate = self.ix.address(u.src[0], tuple(self.ix.simplify(self.one(s)) for s in u.src[1:]))
        return UOp(Ops.INDEX, index.dtype, (*index.src, *(() if gate is None else (gate,))))

    def store(self, u: UOp) -> UOp:
        if u.src[0].op is not Ops.INDEX:
            raise LoweringError(f"a kernel with explicit loops stores into view[i], not {u.src[0].short()}")
        target = self.new[u.src[0]]
        assert isinstance(target, UOp)
        srcs = (target.replace(src=target.src[:2]), self.one(u.src[1]), *target.src[2:])
        return UOp(Ops.STORE, dtypes.void, srcs)

    def const(self, u: UOp) -> UOp:
        return UOp(Ops.CONST, u.dtype, (), u.arg)

    def bind(self, u: UOp) -> UOp:
        return u.src[0]  # a bound variable is a kernel argument

    def value(self, u: UOp) -> UOp:
        return _fold(UOp(u.op, u.dtype.base, tuple(self.one(s) for s in u.src), u.arg))


# how each op of an effect with explicit loops is lowered (ALU ops, CAST and BITCAST: `value`)
_Rule = Callable[[_Loops, UOp], "UOp | tuple[UOp, ...]"]
_LOOP_RULES: dict[Ops, _Rule] = {
    Ops.RANGE: _Loops.range,
    Ops.GROUP: _Loops.group,
    Ops.END: _Loops.end,
    Ops.INDEX: _Loops.index,
    Ops.STORE: _Loops.store,
    Ops.CONST: _Loops.const,
    Ops.BIND: _Loops.bind,
    **{op: _Loops.keep for op in (Ops.PARAM, Ops.NOOP, Ops.DEVICE, Ops.VCONST, Ops.STACK, Ops.DEFINE_VAR)},
}


def _bound(end: UOp) -> UOp:
    """A loop bound: a constant, or an expression of kernel variables (a BIND is its variable)."""
    if end.op is Ops.CONST:
        return UOp(Ops.CONST, dtypes.index, (), end.arg)
    return end.substitute({b: b.src[0] for b in end.toposort() if b.op is Ops.BIND})


# ---------------------------------------------------------------------- the index dtype
def index_dtype(sink: UOp) -> DType:
    """int32, unless the value range (vmin/vmax) of some index node does not fit it: then int64. A kernel
    whose indices or iteration count pass int64 is a ValueError (it could never finish, or would wrap)."""
    lo, hi = dtypes.min(dtypes.int32), dtypes.max(dtypes.int32)
    big = dtypes.max(dtypes.int64)
    dt, steps = dtypes.int32, 1
    for u in sink.toposort():
        if u.dtype != dtypes.index:
            continue
        if not (-big <= u.vmin and u.vmax <= big):
            raise ValueError(
                f"an index of this kernel ranges over [{u.vmin}, {u.vmax}], beyond int64: "
                f"{u.short()}; split the tensor into smaller ones"
            )
        if u.op is Ops.RANGE:
            steps *= max(int(u.vmax) + 1, 1)
        if not (lo <= u.vmin and u.vmax <= hi):
            dt = dtypes.int64
    if steps > big:
        raise ValueError(
            f"this kernel would run {steps} loop iterations (more than int64 counts): shrink "
            f"the tensors it works on"
        )
    return dt


def _var_arg(x: UOp, dt: DType) -> UOp:
    """A variable's argument: int32 when its bounds fit, else int64 (a value above 2^31 is never cut)."""
    name, lo, hi = x.arg
    fits = [d for d in (dtypes.int32, dtypes.int64) if dtypes.min(d) <= lo and hi <= dtypes.max(d)]
    arg_dt = fits[0] if fits else None
    if arg_dt is None:
        raise ValueError(f"variable {name!r} has bounds [{lo}, {hi}] beyond int64: no kernel can take it")
    var = x.replace(dtype=arg_dt)
    return var if dt == arg_dt else UOp(Ops.CAST, dt, (var,))


pm_index_dtype = PatternMatcher(
    [
        (
            UPat(Ops.DEFINE_VAR, dtypes.index, name="x"),
            lambda ctx, x: _var_arg(x, ctx),
        ),  # var -> int32/64 arg
        (
            UPat(dtype=dtypes.index, name="x"),
            lambda ctx, x: x.replace(dtype=ctx),
        ),  # index -> int32 (or int64)
    ]
)
