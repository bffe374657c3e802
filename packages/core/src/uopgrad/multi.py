"""Multi-device values (layer 9, beside gradient and realized): lowering a graph over device tuples into one
ordinary graph per device.

A value on a device tuple is either replicated (a graph whose DEVICE is the tuple, every device holds all of
it) or sharded: `MULTI(x, axis)`, where `x` is the per-device slice (shape divided along `axis`) and
`_device_num` (uopgrad.uop.DEVICE_NUM) stands for the index of the device computing it. The tensor graph
keeps that form, so shapes, axes and gradients are the global program's; `lower` turns it into plain
single-device graphs at realize time, as tables of rules per op:

- elementwise ops combine shard by shard; an operand with another axis is resharded first (a replicated
  one is cut, a sharded one is gathered and cut);
- movement ops run per shard with the sharded axis remapped (RESHAPE, PERMUTE), kept (EXPAND) or, when they
  touch the sharded axis (PAD, SHRINK, FLIP of it), on the gathered value;
- REDUCE over the sharded axis reduces each shard and then all-reduces; over any other axis it runs per shard;
- COPY of a sharded value to one device gathers it (concatenates the shards in device order).

The all-reduce is the driver's: each device receives every other device's partial result and combines them
in device order (direct all-to-all, n*(n-1) copies), so every device holds the same bits. A backend with a
collective library (NCCL on a multi-GPU box) would take over through `set_allreduce`, which is only a hook.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, cast

from uopgrad.dtype import DType, dtypes
from uopgrad.errors import DeviceError
from uopgrad.facts import AXIS
from uopgrad.ops import GroupOp, Ops
from uopgrad.realized import is_realized_after, realized_view
from uopgrad.uop import DEVICE_NUM, UOp

__all__ = [
    "AllReduce",
    "Lowering",
    "has_multi",
    "in_use",
    "inline",
    "mark_used",
    "multi_buffer",
    "set_allreduce",
    "shard_buffers",
    "tuple_buffers_of",
]

# a collective all-reduce: (per-device partials, reduce op, devices) -> per-device results
AllReduce = Callable[[Sequence[UOp], Ops, tuple[str, ...]], list[UOp]]
_counter = itertools.count()
_used = [False]
_allreduce_hook: list[AllReduce | None] = [None]
# BUFFERs on a device tuple (a realized sharded or replicated value) -> one BUFFER per device; weak, so that
# the devices' memory goes with the last value that holds the BUFFER on the tuple
_shards: weakref.WeakKeyDictionary[UOp, tuple[UOp, ...]] = weakref.WeakKeyDictionary()
_PER_SHARD = frozenset({Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD})
_WARM = GroupOp.ALU | GroupOp.Movement | _PER_SHARD | {Ops.REDUCE, Ops.MULTI}
Parts = tuple[tuple[UOp, ...], int | None]  # per-device graphs, and the axis they split (None: replicated)


def mark_used() -> None:
    """Note that a value on a device tuple exists."""
    _used[0] = True


def in_use() -> bool:
    """Whether any value was ever put on a device tuple (until then realize skips the lowering)."""
    return _used[0]


def set_allreduce(fn: AllReduce | None) -> None:
    """Install a collective all-reduce (e.g. NCCL's) in place of the driver's; None restores the driver's."""
    _allreduce_hook[0] = fn


def multi_buffer(shards: Sequence[UOp]) -> UOp:
    """A BUFFER on the device tuple of `shards` (one BUFFER per device, all of one size and dtype)."""
    b0 = shards[0]
    devices = tuple(str(b.device) for b in shards)
    unique = UOp(Ops.UNIQUE, arg=("multi", next(_counter)))
    mb = UOp(Ops.BUFFER, b0.dtype, (unique, UOp(Ops.DEVICE, arg=devices)), b0.arg)
    _shards[mb] = tuple(shards)
    return mb


def shard_buffers(mb: UOp) -> tuple[UOp, ...]:
    """The per-device BUFFERs of a BUFFER on a device tuple."""
    if mb not in _shards:
        raise DeviceError(f"BUFFER on {mb.device} has no per-device buffers (it was never realized)")
    return _shards[mb]


def tuple_buffers_of(buffers: Iterable[UOp]) -> list[UOp]:
    """The BUFFERs on device tuples that have one of `buffers` as a per-device BUFFER."""
    bs = set(buffers)
    return [mb for mb, shards in list(_shards.items()) if not bs.isdisjoint(shards)] if bs else []


def has_multi(u: UOp, memo: dict[UOp, bool] | None = None) -> bool:
    """Whether `u` computes on a sharded value (a MULTI below it that no COPY has gathered yet)."""
    memo = {} if memo is None else memo
    for n in u.toposort():
        if n not in memo:
            memo[n] = (n.op is Ops.MULTI and bool(n.src)) or (
                n.op is not Ops.COPY and any(memo.get(s, False) for s in n.src)
            )
    return memo[u]


def _device_index(x: UOp, i: int) -> int | UOp:
    """A bound of a per-device movement op evaluated for device `i`: a number where it is built from
    `_device_num` (a shard's bounds); a bound that holds another variable (a setitem at a bound variable's
    offset, `t[:, v:v+1]`) stays symbolic, the same on every device."""
    dvars = [v for v in x.toposort() if v.op is Ops.DEFINE_VAR and v.arg[0] == DEVICE_NUM]
    if not dvars:
        return x
    val = x.substitute({v: UOp.const(v.dtype, i) for v in dvars}).simplify()
    return int(val.arg) if val.op is Ops.CONST else val


def _resolve(v: object, i: int) -> object:
    if isinstance(v, UOp):
        return _device_index(v, i)
    if isinstance(v, tuple):
        return tuple(_resolve(x, i) for x in v)
    return v


class Lowering:
    """One realize's lowering: `single(u)` is a graph on one device, `parts(u)` the per-device graphs of a
    value on a device tuple. Both are memoised, so a shared subgraph is lowered once.

    The rules are two tables per op: `LOCAL_RULES` (device i's graph of a value that is the same on every
    device) and `SHARDED_RULES` (the shards of a sharded value). What is imperative is the walking around
    them: the memos, `single`'s pass over a one-device graph, `to_one`'s choice between gathering and
    summing, `_warm`'s sources-first order, and the collective helpers the rules share (`gather`,
    `allreduce`, `reshard`). They are not PatternMatcher rows: a rule returns per-device graphs and recurses
    through the memo, not a rewritten node."""

    def __init__(self) -> None:
        self._multi: dict[UOp, bool] = {}
        self._parts: dict[UOp, Parts] = {}
        self._local: dict[tuple[UOp, int], UOp] = {}
        self._single: dict[UOp, UOp] = {}

    # ------------------------------------------------------------------ entry points
    def single(self, u: UOp) -> UOp:
        """`u` (on one device) with every gathered sharded value below it lowered (one iterative pass)."""
        memo = self._single
        for n in u.toposort(gate=lambda x: x not in memo, enter_calls=False):
            if n.op is Ops.COPY and isinstance(n.src[0].device, tuple) and isinstance(n.device, str):
                memo[n] = self.to_one(n.src[0], n.device)
                continue
            srcs = tuple(memo.get(x, x) for x in n.src)
            if n.op in GroupOp.Call:  # its arguments (a body is lowered where it is inlined)
                srcs = (n.src[0], *srcs[1:])
            memo[n] = n if all(a is b for a, b in zip(srcs, n.src)) else n.replace(src=srcs)
        return memo[u]

    def to_one(self, u: UOp, device: str) -> UOp:
        """`u` (on a device tuple) copied to one device: a sharded value gathered, a replicated one taken from
        one device; a value that differs per device without being sharded (a shard's gradient: each device's
        slice padded to the whole) is the sum of the devices' values, in device order (the adjoint of
        copying to every device and keeping a slice)."""
        p = self.parts(u)
        if has_multi(u, self._multi) or not any(
            v.op is Ops.DEFINE_VAR and v.arg[0] == DEVICE_NUM for v in u.toposort()
        ):
            return self.gather(p, device)
        total: UOp | None = None
        for x in p[0]:
            y = x if x.device == device else x.copy_to_device(device)
            total = y if total is None else total + y
        assert total is not None
        return total

    def parts(self, u: UOp) -> Parts:
        """The per-device graphs of `u` (a value on a device tuple) and the axis they split."""
        if is_realized_after(u):  # a value computed already: read from its storage
            return self.parts(realized_view(u))
        if u not in self._parts:
            self._warm(u)
            devices = cast("tuple[str, ...]", u.device)
            if not has_multi(u, self._multi):
                self._parts[u] = (tuple(self.local(u, i) for i in range(len(devices))), None)
            else:
                self._parts[u] = self._sharded(u, devices)
        return self._parts[u]

    def _warm(self, u: UOp) -> None:
        """Lower the value ops below `u` sources first (an iterative walk), so that the rules' recursion
        meets lowered nodes at once and a long chain needs no deep stack."""
        for n in u.toposort(gate=lambda x: x not in self._parts, enter_calls=False):
            if n is not u and n.op in _WARM and isinstance(n.device, tuple) and n._shape is not None:
                self.parts(n)

    # ------------------------------------------------------------------ per-device graphs
    def local(self, u: UOp, i: int) -> UOp:
        """Device `i`'s graph of a value on a device tuple that is replicated, or a shard's inner graph."""
        key = (u, i)
        if key in self._local:
            return self._local[key]
        if is_realized_after(u):  # a value computed already: read from its storage
            ret = self.local(realized_view(u), i)
        elif not isinstance(u.device, tuple):  # a value on one device (a shard's source before the COPY)
            ret = self.single(u)
        else:
            ret = self.LOCAL_RULES.get(u.op, Lowering._per_device)(self, u, i)
        self._local[key] = ret
        return ret

    def _per_device(self, u: UOp, i: int) -> UOp:
        """Any other op: itself over device `i`'s sources."""
        return u.replace(src=tuple(self.local(s, i) for s in u.src))

    def _local_device(self, u: UOp, i: int) -> UOp:
        return UOp(Ops.DEVICE, arg=cast("tuple[str, ...]", u.device)[i])

    def _local_buffer(self, u: UOp, i: int) -> UOp:
        return shard_buffers(u)[i]

    def _local_copy(self, u: UOp, i: int) -> UOp:
        """A copy onto the tuple: of a one-device value, of a sharded one (gathered), of a replicated one."""
        src, device = u.src[0], cast("tuple[str, ...]", u.device)[i]
        if not isinstance(src.device, tuple):
            return self.single(src).copy_to_device(device)
        if has_multi(src, self._multi):
            return self.gather(self.parts(src), device)
        return self.local(src, i)

    def _local_movement(self, u: UOp, i: int) -> UOp:
        return self.local(u.src[0], i)._mop(u.op, _resolve(u.marg, i))

    def _local_multi(self, u: UOp, i: int) -> UOp:
        if u.src:
            raise DeviceError(f"a sharded value is used where a per-device value is expected: {u.short()}")
        return self._per_device(u, i)

    def _local_define_var(self, u: UOp, i: int) -> UOp:
        return UOp.const(u.dtype, i) if u.arg[0] == DEVICE_NUM else self._per_device(u, i)

    # op -> device i's graph of a value of that op (any other op: `_per_device`)
    LOCAL_RULES: ClassVar[dict[Ops, Callable[[Lowering, UOp, int], UOp]]] = {
        Ops.DEVICE: _local_device,
        Ops.BUFFER: _local_buffer,
        Ops.COPY: _local_copy,
        Ops.MULTI: _local_multi,
        Ops.DEFINE_VAR: _local_define_var,
        **dict.fromkeys(GroupOp.Movement, _local_movement),
    }

    def gather(self, p: Parts, device: str) -> UOp:
        """The whole value of `p` on `device`: the shards copied there and concatenated in device order."""
        parts, axis = p
        pieces = [x if x.device == device else x.copy_to_device(device) for x in parts]
        if axis is None:
            return next((x for x in parts if x.device == device), pieces[0])
        n, size = len(pieces), pieces[0].shape[axis]
        rank = len(pieces[0].shape)
        out: UOp | None = None
        for j, x in enumerate(pieces):
            pad = tuple((size * j, size * (n - 1 - j)) if a == axis else (0, 0) for a in range(rank))
            y = x.cast(_acc(x)).pad(pad)
            out = y if out is None else out + y
        assert out is not None
        return out.cast(pieces[0].dtype)

    def allreduce(self, partials: Sequence[UOp], op: Ops, devices: tuple[str, ...]) -> tuple[UOp, ...]:
        """Every device gets all partials combined with `op` in device order (the same bits everywhere)."""
        if (hook := _allreduce_hook[0]) is not None:
            return tuple(hook(partials, op, devices))
        out = []
        for d in devices:
            acc: UOp | None = None
            for x in partials:
                y = x if x.device == d else x.copy_to_device(d)
                acc = y if acc is None else acc.alu(op, y)
            assert acc is not None
            out.append(acc)
        return tuple(out)

    # ------------------------------------------------------------------ ops over sharded values
    def reshard(self, p: Parts, axis: int | None, devices: tuple[str, ...]) -> tuple[UOp, ...]:
        """`p` split along `axis` instead (None: whole on every device)."""
        parts, have = p
        if have == axis:
            return parts
        whole = parts if have is None else tuple(self.gather(p, d) for d in devices)
        if axis is None:
            return whole
        n = len(devices)
        out = []
        for i, x in enumerate(whole):
            if not x.shape:
                out.append(x)
                continue
            sz = cast("int", x.shape[axis]) // n
            out.append(
                x.shrink(
                    tuple((sz * i, sz * (i + 1)) if a == axis else (0, s) for a, s in enumerate(x.shape))
                )
            )
        return tuple(out)

    def _sharded(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        if (rule := self.SHARDED_RULES.get(u.op)) is None:
            raise self._not_shardable(u)
        return rule(self, u, devices)

    def _multi_shards(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        return tuple(self.local(u.src[0], i) for i in range(len(devices))), cast("int", u.arg)

    def _elementwise(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        """Shard by shard, every operand resharded to the result's axis first."""
        axis = u.axis
        srcs = [self.reshard(self._operand(s, devices), axis, devices) for s in u.src]
        return tuple(u.replace(src=tuple(s[i] for s in srcs)) for i in range(len(devices))), axis

    def _per_shard(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        parts, axis = self.parts(u.src[0])
        return tuple(u.replace(src=(x,)) for x in parts), axis

    def _reduce(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        """Each shard reduced; over the sharded axis, the partials then all-reduced."""
        parts, axis = self.parts(u.src[0])
        local = [UOp(Ops.REDUCE, u.dtype, (x,), u.arg) for x in parts]
        if axis is not None and axis in u.arg[1]:
            return self.allreduce(local, u.arg[0], devices), None
        return tuple(local), axis

    def _allreduce_op(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        parts, axis = self.parts(u.src[0])
        return self.allreduce(parts, u.arg, devices), axis

    def _assign(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        """AFTER(dest, STORE(view, value)): each device stores its shard of the value into its shard."""
        if len(u.src) != 2 or u.src[1].op is not Ops.STORE:
            raise self._not_shardable(u)
        (dest, axis), store = self.parts(u.src[0]), u.src[1]
        target = self.reshard(self.parts(store.src[0]), axis, devices)
        if not all(_writable(t) for t in target):  # a view that cuts across shards: write whole shards
            return self.parts(_through_whole(u))
        value = self.reshard(self._operand(store.src[1], devices), axis, devices)
        return tuple(d.after(t.store(v)) for d, t, v in zip(dest, target, value)), axis

    def _gettuple(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        """An output of a TUPLE, or of a FUNCTION (inlined: each device computes its shards of the call)."""
        if u.src[0].op is Ops.TUPLE:
            return self.parts(u.src[0].src[u.arg])
        if u.src[0].op is Ops.FUNCTION:
            return self.parts(inline(u.src[0], u.arg))
        raise self._not_shardable(u)

    def _operand(self, s: UOp, devices: tuple[str, ...]) -> Parts:
        if s.device is None:  # a constant without a device: the same node everywhere
            return tuple(s for _ in devices), None
        if s.device != devices:
            raise DeviceError(f"operands on {s.device} and {devices}: move them onto one device tuple first")
        return self.parts(s)

    def _movement(self, u: UOp, devices: tuple[str, ...]) -> Parts:
        op, arg = u.op, u.marg
        parts, axis = self.parts(u.src[0])
        n = len(devices)
        if axis is not None and op is Ops.RESHAPE:
            new_axis = AXIS(u)  # raises for a reshape that moves elements between shards
            assert new_axis is not None
            shape = tuple(s // n if a == new_axis else s for a, s in enumerate(arg))
            return tuple(x.reshape(shape) for x in parts), new_axis
        if axis is not None and op is Ops.EXPAND:
            shape = tuple(parts[0].shape[a] if a == axis else s for a, s in enumerate(arg))
            return tuple(x.expand(shape) for x in parts), axis
        if axis is not None and op is Ops.PERMUTE:
            return tuple(x.permute(arg) for x in parts), u.axis
        full = u.src[0].shape[axis] if axis is not None else None
        touches = axis is not None and (
            (op is Ops.PAD and arg[axis] != (0, 0))
            or (op is Ops.SHRINK and arg[axis] != (0, full))
            or (op is Ops.FLIP and arg[axis])
        )
        if touches:  # the op works across shards: on the whole value, on every device
            parts, axis = self.reshard((parts, axis), None, devices), None
        if axis is not None and op is Ops.SHRINK:
            arg = tuple((0, parts[0].shape[a]) if a == axis else s for a, s in enumerate(arg))
        return tuple(x._mop(op, arg) for x in parts), axis

    @staticmethod
    def _not_shardable(u: UOp) -> DeviceError:
        return DeviceError(
            f"{u.op} is not supported on sharded values ({u.short()}); gather it first with .to(device)"
        )

    # op -> the shards of a sharded value of that op (any other op is an error)
    SHARDED_RULES: ClassVar[dict[Ops, Callable[[Lowering, UOp, tuple[str, ...]], Parts]]] = {
        Ops.MULTI: _multi_shards,
        Ops.REDUCE: _reduce,
        Ops.ALLREDUCE: _allreduce_op,
        Ops.AFTER: _assign,
        Ops.GETTUPLE: _gettuple,
        **dict.fromkeys(GroupOp.ALU, _elementwise),
        **dict.fromkeys(_PER_SHARD, _per_shard),
        **dict.fromkeys(GroupOp.Movement, _movement),
    }


def inline(k: UOp, i: int) -> UOp:
    """Output `i` of FUNCTION `k` with its PARAMs replaced by the arguments: a call over sharded values runs
    as the caller's graph, so each device computes its shards of it (a sharded PARAM of `as_param`, a MULTI
    over a per-shard PARAM, stands for the whole argument)."""
    elem, args = k.src[0].src[i], k.src[1:]
    mapping: dict[UOp, UOp] = {}
    for n in elem.toposort(enter_calls=False):
        if n.op is Ops.PARAM:
            mapping[n] = args[n.arg]
        elif n.op is Ops.MULTI and n.src and n.src[0].op is Ops.PARAM:
            mapping[n] = args[n.src[0].arg]
    return elem.substitute(mapping, walk=True)


def _writable(u: UOp) -> bool:
    """A chain of movement ops, DETACHes and assigns not run yet (`t[:, 1] = a; t[:, 2] = b`) over a BUFFER
    (a per-device view a STORE can write through)."""
    while u.op in GroupOp.Movement or u.op in (Ops.DETACH, Ops.AFTER):
        u = u.src[0]
    return u.op is Ops.BUFFER


def _through_whole(u: UOp) -> UOp:
    """An assign AFTER(view, STORE(view, value)) into a view of a sharded value that no shard holds alone
    (a SHRINK or FLIP of the sharded axis), as the assign of the whole value (`value` where the view reads,
    the old value elsewhere) with the same view on top, so that each device writes its whole shard."""
    view, value = u.src[1].src
    chain: list[UOp] = []
    base = view
    while base.op in GroupOp.Movement or base.op is Ops.DETACH:
        chain.append(base)
        base = base.src[0]
    if base.op is not Ops.MULTI:
        raise DeviceError(f"an assign into {view.short()} on {u.device} writes no buffer")
    mask = UOp.const(dtypes.bool, True).reshape((1,) * len(view.shape)).expand(view.shape)
    for node in chain:  # undo each view op, outermost first: `value` and `mask` in the base's positions
        shape, arg = cast("tuple[int, ...]", node.src[0].shape), node.marg
        undo: tuple[Ops, Any]
        if node.op is Ops.SHRINK:
            undo = (Ops.PAD, tuple((b, s - e) for (b, e), s in zip(arg, shape)))
        elif node.op is Ops.PAD:
            undo = (Ops.SHRINK, tuple((b, b + s) for (b, _), s in zip(arg, shape)))
        elif node.op is Ops.PERMUTE:
            perm = cast("tuple[int, ...]", node.arg)
            undo = (Ops.PERMUTE, tuple(sorted(range(len(perm)), key=lambda a: perm[a])))
        elif node.op in (Ops.FLIP, Ops.RESHAPE):
            undo = (node.op, arg if node.op is Ops.FLIP else shape)
        elif node.op is Ops.DETACH:
            continue
        else:
            raise DeviceError(f"can't assign into a {node.op} view of a sharded tensor")
        value, mask = value._mop(*undo), mask._mop(*undo)
    whole = base.after(base.store(mask.where(value, base)))
    for node in reversed(chain):
        whole = node.replace(src=(whole, *node.src[1:]))
    return whole


def _acc(x: UOp) -> DType:
    """The dtype the concatenation adds in (bool has no ADD: go through uint8)."""
    return dtypes.uint8 if x.dtype.base == dtypes.bool else x.dtype.base
