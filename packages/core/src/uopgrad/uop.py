"""The IR node: `UOp`, an immutable hash-consed `(op, dtype, src, arg, tag)`; the records its arg may be
(`CallInfo`, `KernelInfo`, `Metadata`) are uopgrad.uop_args, re-exported here.

Facts derived from a node (shape, device, sharding axis, vmin/vmax, key) are `uopgrad.facts.Fact`s: kept on
the node and filled in for a whole graph by one iterative post-order pass, so a 100 000-node chain needs no
deep recursion. Printing is uopgrad.uop_print, the index algebra uopgrad.uop_index, simplification the
`sym` table of uopgrad.symbolic (below this module: its rules build nodes through the nodes they match).
"""

from __future__ import annotations

import _weakref
import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from uopgrad import uop_print
from uopgrad._util import all_int, prod
from uopgrad.dtype import ConstType, DType, Invalid, PtrDType, dtypes, least_upper_dtype
from uopgrad.errors import DeviceError, MovementError, ShapeError
from uopgrad.facts import AXIS, KEY, MINMAX, NOT_COMPUTED, Err, Fact, infer_device, infer_shape, vec_values
from uopgrad.mixin import MathMixin, MovementMixin, broadcast_shape
from uopgrad.ops import DEVICE_NUM, GroupOp, Ops, sint
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.symbolic import pm_symbolic
from uopgrad.uop_args import CallInfo, KernelInfo, Metadata
from uopgrad.uop_index import IndexMixin, sym_infer

__all__ = [
    "DEVICE",
    "DEVICE_NUM",
    "SHAPE",
    "CallInfo",
    "Invalid",
    "KernelInfo",
    "Metadata",
    "UOp",
    "all_metadata",
    "sint",
    "ssimplify",
    "sym_infer",
]


all_metadata: weakref.WeakKeyDictionary[UOp, tuple[Metadata, ...]] = weakref.WeakKeyDictionary()


class _Fields(MathMixin, MovementMixin, IndexMixin):
    """A UOp's layout, mutable: a node is built as one and becomes a UOp (`UOpMetaClass.__call__`)."""

    __slots__ = ("op", "dtype", "src", "arg", "tag", "_shape_fact", "_device_fact", "_facts", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    # Derived facts (uopgrad.facts.Fact), NOT_COMPUTED until asked. The shape and the device are asked of
    # nearly every node (building a node compares its operands' shapes; a tensor op checks devices), so each
    # has a slot of its own (SHAPE, DEVICE below); the others share the `_facts` dict. The shape in that dict
    # gave every node a keys table too: ~120 of a node's ~550 bytes.
    _shape_fact: Any  # tuple | None | Err
    _device_fact: Any  # str | tuple[str, ...] | None
    _facts: dict[Fact[Any], Any]


class UOpMetaClass(type):
    """Interns UOps: constructing a node with the fields of a live node returns that node."""

    ucache: ClassVar[dict[tuple[Any, ...], weakref.ReferenceType[UOp]]] = {}

    def __call__(
        cls,
        op: Ops,
        dtype: DType = dtypes.void,
        src: tuple[UOp, ...] = (),
        arg: Any = None,
        tag: Any = None,
        metadata: tuple[Metadata, ...] | None = None,
    ) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        key = (op, dtype, src, arg, tag)
        cache = _ucache
        if (ref := cache.get(key)) is not None and (live := ref()) is not None:
            return live  # the hit needs no lock: one dict read is atomic
        # HOT PATH (bench/rewrite.py, every rewrite task: a rebuilt node is a new one; 8% of the chain's
        # top-down rewrite): the fields are stored while the node is still a mutable `_Fields` (plain slot
        # stores, no __init__ frame, no setter calls), then it becomes a `cls` (the same layout: UOp adds
        # no slots). Guarded by test_uop.py's immutability and interning tests.
        created: UOp = _new_node(_Fields)  # type: ignore[assignment]  # a UOp from its last line on
        created.op, created.dtype, created.src, created.arg, created.tag = op, dtype, src, arg, tag
        created._shape_fact = created._device_fact = NOT_COMPUTED
        created._facts = {}
        created.__class__ = cls  # type: ignore[assignment]  # (no typing.cast: a call)
        # end HOT PATH
        new_ref = _KeyRef(created, _drop_keyed)  # the key rides on the ref: one shared callback
        new_ref.key = key
        # Lock-free, safe under threads and GC (see _drop_keyed): an entry is only added where its key is
        # absent (setdefault) and only removed while its node is dead, never overwritten; so while a node
        # lives its entry is its own, and a thread that lost the race gets the winner's node. The loop goes
        # round again only past a dead node's entry whose callback has not run yet.
        while (old := cache.setdefault(key, new_ref)) is not new_ref:
            if (live := old()) is not None:
                return live
            _remove_dead(cache, key)
        if metadata is not None:
            all_metadata[created] = metadata
        return created


# Removes `cache[key]` only if it is a dead weak reference: the lookup, the test and the removal in one C call
# that runs no Python code, so atomic under the GIL (the stdlib's WeakValueDictionary relies on it too).
_remove_dead: Callable[[dict[Any, Any], Any], None] = _weakref._remove_dead_weakref  # type: ignore[attr-defined]
_ucache = UOpMetaClass.ucache


class _KeyRef(weakref.ref["UOp"]):
    """The cache's weak reference to a node, carrying the node's key for its callback."""

    __slots__ = ("key",)
    key: tuple[Any, ...]


def _drop_keyed(
    ref: _KeyRef,
    cache: dict[tuple[Any, ...], weakref.ReferenceType[UOp]] = _ucache,
    remove_dead: Callable[[dict[Any, Any], Any], None] = _remove_dead,
) -> None:
    """Weakref callback of a cached node: forget its key's entry if that entry is dead, atomically, so it
    cannot drop the entry of a newer live node that took the key; no lock, so it may run in any thread at any
    allocation (the collector) without deadlocking. The defaults bind what it needs, so it names no module
    globals (it may run at interpreter exit)."""
    remove_dead(cache, ref.key)


_CALLS = GroupOp.Call
_ALU = GroupOp.ALU
_DONE: Any = object()  # toposort's stack marker: the node below it has all its sources visited
_unique_counter = iter(range(1 << 62))
# UOp.const by its arguments (a graph's constants are few and rebuilt on every step, and a broadcast constant
# is four nodes); exact builtin values only, so a subclass's own __eq__ never picks an entry
_consts: dict[tuple[Any, ...], UOp] = {}
_CONSTS_MAX = 4096
_CONST_KINDS = (int, float, bool)


class UOp(_Fields, metaclass=UOpMetaClass):
    """An immutable IR node (the five fields of `_Fields`, and facts derived from them). `==` is identity;
    equal fields give the same object (see `UOpMetaClass`). `arg` is the one field typed `Any`: a CONST
    value, a REDUCE `(op, axes)`, a PARAM slot, a CallInfo, ..."""

    __slots__ = ()

    # the constructor's signature, for the type checker; UOpMetaClass.__call__ builds (and interns) nodes
    if TYPE_CHECKING:

        def __init__(
            self, op: Ops, dtype: DType = ..., src: tuple[UOp, ...] = ..., arg: Any = ..., tag: Any = ...
        ) -> None: ...

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: can't set {name!r}; use replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"UOp is immutable: can't delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))

    def __bool__(self) -> bool:
        """A bool UOp's truth where its variables' ranges decide it (`start_pos > 0` for a variable from 1,
        `n + 1 != n + 1`), as in the reference; anything else raises."""
        if self.dtype == dtypes.bool and (s := self.simplify()).vmin == s.vmax and isinstance(s.vmin, bool):
            return s.vmin
        raise TypeError(f"the truth value of a {self.op} UOp is symbolic; use .eq/.ne or vmin/vmax")

    # ------------------------------------------------------------------ identity and printing
    def replace(self, **fields: Any) -> UOp:
        """This node with some of op/dtype/src/arg/tag changed; the same object if nothing changes."""
        if bad := set(fields) - {"op", "dtype", "src", "arg", "tag"}:
            raise TypeError(f"replace() got unknown field(s) {sorted(bad)}")
        new = (
            fields.get("op", self.op),
            fields.get("dtype", self.dtype),
            tuple(fields.get("src", self.src)),
            fields.get("arg", self.arg),
            fields.get("tag", self.tag),
        )
        # tuple == on UOps is element-wise identity (UOp has no __eq__)
        if (
            new[0] is self.op
            and new[1] == self.dtype
            and new[2] == self.src
            and new[3] is self.arg
            and new[4] is self.tag
        ):
            return self
        return UOp(*new)

    def rtag(self, tag: Any = True) -> UOp:
        """This node with `tag` set."""
        return self.replace(tag=tag)

    def __repr__(self) -> str:
        return uop_print.pretty(self)

    def short(self) -> str:
        """One line: op, dtype, arg and the ops of the sources."""
        return uop_print.short(self)

    def pretty(self, limit: int = 60) -> str:
        """An SSA-style listing of the graph (iterative; shared nodes printed once); at most `limit` lines."""
        return uop_print.pretty(self, limit)

    def to_dot(self) -> str:
        """The graph as Graphviz DOT text (uopgrad.uop_print.to_dot)."""
        return uop_print.to_dot(self)

    # ------------------------------------------------------------------ traversal
    def toposort(
        self, gate: Callable[[UOp], bool] | None = None, enter_calls: bool = True
    ) -> dict[UOp, None]:
        """Sources before consumers, left to right (iterative DFS post-order), as an ordered set.
        `gate(node)` False drops the node and stops the walk there; `enter_calls=False` skips call bodies."""
        visited: dict[UOp, None] = {}
        # A node being expanded sits on the stack under the _DONE marker and its sources: popping the
        # marker finishes the node below it (a DAG: nothing under a node leads back to it). The first source
        # is walked at once, the others pushed without a test (a visited one is skipped when popped): no
        # tuples, no second set, one C-level extend per node
        stack: list[Any] = [self]
        pop, push, extend, done = stack.pop, stack.append, stack.extend, _DONE
        plain = gate is None and enter_calls
        while stack:
            node = pop()
            if node is done:
                visited[pop()] = None
                continue
            while node not in visited:
                if plain:
                    src = node.src
                elif gate is not None and not gate(node):
                    break
                else:
                    src = node.src[1:] if not enter_calls and node.op in _CALLS else node.src
                if not src:
                    visited[node] = None
                    break
                push(node)
                push(done)
                if len(src) == 2:  # most nodes: one push beats slicing a tuple
                    push(src[1])
                else:
                    extend(src[:0:-1])  # the sources after the first, the last one lowest
                node = src[0]
        return visited

    def topovisit(self, visitor: Callable[[UOp], Any], cache: dict[UOp, Any]) -> Any:
        """Post-order `cache[node] = visitor(node)` over everything (bodies too), skipping cached nodes."""
        # as in toposort, a node sits under the _DONE marker while its sources are visited (a node reached
        # twice before it is done is expanded twice, and visited once)
        stack: list[Any] = [self]
        while stack:
            if (node := stack.pop()) is _DONE:
                if (node := stack.pop()) not in cache:
                    cache[node] = visitor(node)
            elif node not in cache:
                stack += (node, _DONE)
                stack.extend([s for s in reversed(node.src) if s not in cache])
        return cache[self]

    @property
    def backward_slice(self) -> dict[UOp, None]:
        """Everything this node depends on (bodies included), without the node itself."""
        out = self.toposort()
        del out[self]
        return out

    @property
    def backward_slice_with_self(self) -> dict[UOp, None]:
        """`toposort()`: everything this node depends on, and the node (the reference's spelling)."""
        return self.toposort()

    def op_in_backward_slice_with_self(self, *ops: Ops) -> bool:
        """True if this node or anything it depends on (bodies included) has one of `ops`."""
        return any(x.op in ops for x in self.toposort())

    def substitute(
        self,
        mapping: Mapping[UOp, UOp],
        name: str | None = None,
        extra_pm: PatternMatcher | None = None,
        walk: bool = False,
    ) -> UOp:
        """Replace nodes by `mapping`, bottom-up: to a fixpoint, or in one outermost-first pass (`walk=True`)
        (simultaneous renaming). CALL/FUNCTION bodies are never entered."""
        live = {k: v for k, v in mapping.items() if k is not v}
        if not live:
            return self
        pm = pm_substitute if extra_pm is None else extra_pm + pm_substitute
        return graph_rewrite(self, pm, ctx=live, bottom_up=True, name=name, walk=walk)

    def simplify(self) -> UOp:
        """Symbolic simplification (the `sym` table of uopgrad.symbolic)."""
        return graph_rewrite(self, pm_symbolic, name="simplify")

    # ------------------------------------------------------------------ derived facts (uopgrad.facts.Fact)
    @property
    def _shape(self) -> tuple[sint, ...] | None:
        """The shape, or None for shapeless nodes (raises if the graph's shapes are inconsistent)."""
        ret: tuple[sint, ...] | None | Err = self._shape_fact  # the cached fact, one slot read
        if ret is NOT_COMPUTED:
            ret = SHAPE.fill(self)
        if type(ret) is Err:
            raise ret.exc
        return ret  # type: ignore[return-value]  # not an Err (mypy does not narrow on type() is)

    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape; ShapeError (a RuntimeError) if this node has none."""
        if type(s := self._shape_fact) is tuple:  # known (the common case): one slot read
            return s
        if (s := self._shape) is None:
            raise ShapeError(f"{self.op} has no shape: {self.short()}")
        return s

    @property
    def size(self) -> sint:
        """Number of elements."""
        return prod(self.shape)

    def numel(self) -> sint:
        """`size` (the reference's spelling)."""
        return self.size

    @property
    def device(self) -> str | tuple[str, ...] | None:
        """The device (a name, or a tuple for multi-device values), or None."""
        if (d := self._device_fact) is NOT_COMPUTED:  # known (the common case): one slot read
            d = DEVICE.fill(self)
        if type(d) is Err:
            raise d.exc
        return d  # type: ignore[no-any-return]  # the slot's value; no typing.cast: a call, on every node

    @property
    def axis(self) -> int | None:
        """The sharding axis of a multi-device value, or None."""
        if (ret := AXIS.get(self)) is NOT_COMPUTED:
            ret = AXIS.fill(self)
        return None if type(ret) is Err else cast("int | None", ret)

    @property
    def bounds(self) -> tuple[tuple[sint, sint], ...]:
        """The (start, end) of each device's slice along the sharding axis, in device order."""
        if (axis := self.axis) is None or not isinstance(self.device, tuple):
            raise DeviceError(f"bounds needs a sharded value, not one with axis None ({self.short()})")
        n = len(self.device)
        size = self.shape[axis] // n
        return tuple((size * i, size * (i + 1)) for i in range(n))

    @property
    def key(self) -> bytes:
        """A content hash of the whole graph under this node: equal for equal structure, across processes."""
        return KEY(self)

    @property
    def vmin(self) -> ConstType:
        """A lower bound of every value this node can take."""
        return MINMAX(self)[0]

    @property
    def vmax(self) -> ConstType:
        """An upper bound of every value this node can take."""
        return MINMAX(self)[1]

    @property
    def marg(self) -> Any:
        """A movement op's decoded argument: a shape, ((begin, end), ...) pairs, an order or flip flags."""
        if self.op in (Ops.RESHAPE, Ops.EXPAND):
            return vec_values(self.src[1])
        if self.op in (Ops.PAD, Ops.SHRINK):
            return tuple(zip(vec_values(self.src[1]), vec_values(self.src[2])))
        if self.op in (Ops.PERMUTE, Ops.FLIP):
            return self.arg
        raise MovementError(f"marg is only defined for movement ops, not {self.op}")

    @property
    def base(self) -> UOp:
        """The node under any chain of movement ops."""
        u = self
        while u.op in GroupOp.Movement:
            u = u.src[0]
        return u

    @property
    def buffer(self) -> UOp:
        """The BUFFER (or BUFFER_VIEW) node whose storage holds this value, through movement ops, AFTERs (an
        assign's target, a realized value's view), DETACH and MULTI: in uopgrad a buffer is that node, as
        backends key their storage by it (tinygrad's `uop.buffer`). A ValueError for a value not stored."""
        u = self
        while u.op not in (Ops.BUFFER, Ops.BUFFER_VIEW):
            if not (u.op in GroupOp.Movement or u.op in (Ops.AFTER, Ops.DETACH, Ops.MULTI)):
                raise ValueError(f"{self.short()} is not stored in a buffer ({u.op} computes it); realize it")
            u = u.src[0]
        return u

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def const(
        dtype: DType,
        b: ConstType | tuple[ConstType, ...],
        device: str | tuple[str, ...] | None = None,
        shape: tuple[sint, ...] | None = None,
        unique: bool = False,
    ) -> UOp:
        """A (canonicalised) constant, on `device`, broadcast to `shape` by reshape + expand."""
        key = None
        if not unique and (kind := type(b)) in _CONST_KINDS and (shape is None or type(shape) is tuple):
            # the sign tells 0.0 from -0.0, which compare equal
            key = (dtype, kind, b, math.copysign(1.0, b) if kind is float else 0, device, shape)  # type: ignore[arg-type]
            if (hit := _consts.get(key)) is not None:
                return hit
        ret = UOp._const(dtype, b, device, shape, unique)
        if key is not None:
            if len(_consts) >= _CONSTS_MAX:
                _consts.clear()
            _consts[key] = ret
        return ret

    @staticmethod
    def _const(
        dtype: DType,
        b: ConstType | tuple[ConstType, ...],
        device: str | tuple[str, ...] | None,
        shape: tuple[sint, ...] | None,
        unique: bool,
    ) -> UOp:
        src: tuple[UOp, ...] = ()
        if device is not None:
            dev = UOp(Ops.DEVICE, arg=device)
            src = (UOp(Ops.UNIQUE, arg=next(_unique_counter)), dev) if unique else (dev,)
        elif unique:
            raise ValueError("a unique constant needs a device")
        if isinstance(b, tuple):  # one value per lane of a vector dtype: VCONST (an element may be Invalid)
            if len(b) != dtype.count:
                raise ValueError(f"a {dtype} constant takes {dtype.count} values, not {len(b)}")
            return UOp(Ops.VCONST, dtype, src, tuple(dtypes.as_const(x, dtype.scalar()) for x in b))
        ret = UOp(Ops.CONST, dtype, src, dtypes.as_const(b, dtype))
        if shape is not None and len(shape):
            if all(isinstance(d, UOp) or (type(d) is int and d >= 0) for d in shape):
                return _broadcast_to(ret, (), tuple(shape))
            ret = ret.reshape((1,) * len(shape)).expand(shape)  # the mixin resolves (and checks) the sizes
        return ret

    def const_like(self, b: ConstType) -> UOp:
        """A constant of this node's dtype, device and shape."""
        # the device first: the cheaper fact
        if isinstance(self.device, tuple) and (axis := self.axis) is not None:
            shard = tuple(s // len(self.device) if i == axis else s for i, s in enumerate(self.shape))
            return UOp(Ops.MULTI, self.dtype.base, (UOp.const(self.dtype.base, b, self.device, shard),), axis)
        return UOp.const(self.dtype.base, b, self.device, self._shape)

    @staticmethod
    def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.index) -> UOp:
        """A symbolic variable with an inclusive range."""
        return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))

    def bind(self, val: int) -> UOp:
        """This variable bound to a value."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only a DEFINE_VAR can be bound, not {self.op}")
        if not self.arg[1] <= val <= self.arg[2]:
            name, lo, hi = self.arg
            raise ValueError(f"{val} is out of the range [{lo}, {hi}] of variable {name!r}")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))

    def unbind(self) -> tuple[UOp, int]:
        """(variable, value) of a BIND."""
        if self.op is not Ops.BIND:
            raise TypeError(f"unbind needs a BIND, not {self.op}")
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """The name of a variable."""
        return str(self.arg[0])

    @staticmethod
    def invalids(dtype: DType, device: str, shape: tuple[sint, ...]) -> UOp:
        """Elements that are not initialised: a unique CONST of `Invalid`, broadcast to `shape`. Realized, it
        is a buffer no kernel fills; read, any value of the dtype may come back (REFERENCE gives zeros)."""
        src = (UOp(Ops.UNIQUE, arg=next(_unique_counter)), UOp(Ops.DEVICE, arg=device))
        ret = UOp(Ops.CONST, dtype, src, Invalid)
        return ret.reshape((1,) * len(shape)).expand(shape) if len(shape) else ret

    @staticmethod
    def new_buffer(device: str, size: int, dtype: DType) -> UOp:
        """A fresh BUFFER of `size` elements on `device`."""
        unique = UOp(Ops.UNIQUE, arg=next(_unique_counter))
        return UOp(Ops.BUFFER, dtype, (unique, UOp(Ops.DEVICE, arg=device)), size)

    @staticmethod
    def param(
        slot: int,
        dtype: DType,
        shape: tuple[sint, ...] | None = None,
        device: str | tuple[str, ...] | None = None,
        vmin_vmax: tuple[ConstType, ConstType] | None = None,
        name: str | None = None,
    ) -> UOp:
        """A formal input of a call body: PARAM(shape|NOOP, DEVICE|NOOP[, vmin, vmax][, NOOP(name)])."""
        src = [
            shape_vec(shape) if shape is not None else UOp(Ops.NOOP),
            UOp(Ops.DEVICE, arg=device) if device is not None else UOp(Ops.NOOP),
        ]
        if vmin_vmax is not None:
            src += [UOp.const(dtype, vmin_vmax[0]), UOp.const(dtype.scalar(), vmin_vmax[1])]
        if name is not None:
            src.append(UOp(Ops.NOOP, arg=name))
        return UOp(Ops.PARAM, dtype, tuple(src), slot)

    def param_like(self, slot: int) -> UOp:
        """The PARAM that stands for this value inside a call body."""
        if self.op is Ops.BIND:
            var = self.src[0]
            return UOp.param(slot, var.dtype, (), None, (var.arg[1], var.arg[2]), var.arg[0])
        ret = UOp.param(slot, self.dtype, self._shape, self.device)
        if (axis := self.axis) is not None:
            ret = ret.replace(src=(*ret.src, UOp(Ops.MULTI, arg=axis)))
        return ret

    def call(
        self,
        *srcs: UOp,
        grad_fxn: Callable[..., tuple[UOp | None, ...]] | None = None,
        metadata: tuple[Metadata, ...] = (),
        name: str | None = None,
        precompile: bool = False,
        precompile_backward: bool = False,
    ) -> UOp:
        """Call this body on `srcs`: a CALL for opaque bodies (kernels, effects), else a FUNCTION whose body
        is a TUPLE. PARAM slot i in the body refers to srcs[i]."""
        info = CallInfo(grad_fxn, tuple(metadata), name, precompile, precompile_backward)
        if self.op in GroupOp.OpaqueBody:
            return UOp(Ops.CALL, dtypes.void, (self, *srcs), info)
        body = self if self.op is Ops.TUPLE else UOp.maketuple(self)
        return UOp(Ops.FUNCTION, dtypes.void, (body, *srcs), info)

    @staticmethod
    def custom_kernel(
        *srcs: UOp, fxn: Callable[..., UOp], grad_fxn: Callable[..., tuple[UOp | None, ...]] | None = None
    ) -> list[UOp]:
        """Run `fxn(*pointer PARAMs)`, a SINK of STOREs, as a CALL on `srcs` (made contiguous unless AFTERs);
        returns one AFTER(src, CALL) per source: the outputs are the arguments the kernel wrote."""
        contig = [s if s.op is Ops.AFTER else s.contiguous() for s in srcs]
        sizes = [s.size for s in contig]
        if not all_int(sizes):
            raise ValueError(f"custom_kernel needs concrete sizes, got {sizes}")
        ph = [
            UOp.param(i, s.dtype.base.ptr(cast(int, n)), device=s.device)
            for i, (s, n) in enumerate(zip(contig, sizes))
        ]
        kernel = fxn(*ph).call(*contig, grad_fxn=grad_fxn)
        return [s.after(kernel) for s in contig]

    @staticmethod
    def maketuple(*srcs: UOp) -> UOp:
        """TUPLE(srcs): an ordered group of values with no shape."""
        return UOp(Ops.TUPLE, dtypes.void, tuple(srcs))

    def gettuple(self, i: int) -> UOp:
        """Element `i` of a TUPLE, or output `i` of a FUNCTION."""
        holder = self.src[0] if self.op is Ops.FUNCTION else self
        if holder.op is not Ops.TUPLE:
            raise AssertionError(f"gettuple needs a FUNCTION or a TUPLE, got {self.op} holding {holder.op}")
        if not 0 <= i < len(holder.src):
            raise IndexError(f"gettuple({i}) on a TUPLE of {len(holder.src)} elements")
        return UOp(Ops.GETTUPLE, holder.src[i].dtype, (self,), i)

    def sink(self, *srcs: UOp, arg: KernelInfo | None = None) -> UOp:
        """SINK of this node and `srcs`: the root of a kernel (named by `arg`) or of several outputs."""
        return UOp(Ops.SINK, dtypes.void, (self, *srcs), arg)

    # ------------------------------------------------------------------ kernels written with explicit loops
    @staticmethod
    def range(end: sint, axis_id: int) -> UOp:
        """A loop index 0..end-1 of a custom kernel; `axis_id` orders the loops (smaller is outer)."""
        e = end if isinstance(end, UOp) else UOp(Ops.CONST, dtypes.index, (), end)
        return UOp(Ops.RANGE, dtypes.index, (e.cast(dtypes.index),), (axis_id, "loop"))

    def __getitem__(self, idx: sint | tuple[sint, ...]) -> UOp:
        """Element `idx` (one index per dimension) of a pointer PARAM or a view of one: INDEX(view, *idx), a
        value to compute with or a target to `store` into."""
        if not isinstance(self.base.dtype, PtrDType):
            raise TypeError(f"only a pointer PARAM (a custom kernel argument) can be indexed: {self.short()}")
        ix = idx if isinstance(idx, tuple) else (idx,)
        if len(ix) != len(self.shape):
            raise IndexError(f"{len(ix)} indices for a buffer view of shape {self.shape}")
        srcs = tuple(i if isinstance(i, UOp) else UOp(Ops.CONST, dtypes.index, (), i) for i in ix)
        return UOp(Ops.INDEX, self.dtype.base, (self, *srcs))

    def end(self, *ranges: UOp) -> UOp:
        """Close the loops `ranges` around this effect (END(effect, *ranges)); itself if none are given."""
        if bad := [r.short() for r in ranges if r.op is not Ops.RANGE]:
            raise TypeError(f"end() takes RANGEs, not {bad}")
        return UOp(Ops.END, dtypes.void, (self, *ranges)) if ranges else self

    @staticmethod
    def group(*effects: UOp | None) -> UOp:
        """Effects that happen together (GROUP); a single effect is itself."""
        live = tuple(e for e in effects if e is not None)
        return live[0] if len(live) == 1 else UOp(Ops.GROUP, dtypes.void, live)

    def flatten(self) -> UOp:
        """This value (or buffer view) as one dimension."""
        return self.reshape((self.size,))

    def after(self, *deps: UOp) -> UOp:
        """This value, but only after `deps` have happened."""
        return _like_first(UOp(Ops.AFTER, self.dtype, (self, *deps)))

    def store(self, value: UOp) -> UOp:
        """STORE `value` into this buffer/view."""
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def detach(self) -> UOp:
        """The same value with no gradient flowing through."""
        return _like_first(UOp(Ops.DETACH, self.dtype, (self,)))

    def contiguous_backward(self) -> UOp:
        """Identity forward; makes the gradient contiguous."""
        return UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self,))

    def has_buffer_identity(self) -> bool:
        """True for BUFFER/BUFFER_VIEW/PARAM, a RESHAPE or MULTI of one, or a GETTUPLE of a TUPLE of one."""
        u = self
        while True:
            if u.op in (Ops.BUFFER, Ops.BUFFER_VIEW, Ops.PARAM):
                return True
            if u.op in (Ops.RESHAPE, Ops.MULTI):
                u = u.src[0]
            elif u.op is Ops.GETTUPLE and u.src[0].op is Ops.TUPLE:
                u = u.src[0].src[u.arg]
            else:
                return False

    def contiguous(self) -> UOp:
        """Force this value into its own buffer (a no-op for a buffer or an existing CONTIGUOUS)."""
        if self.op is Ops.CONTIGUOUS or self.has_buffer_identity():
            return self
        return UOp(Ops.CONTIGUOUS, self.dtype, (self,))

    def copy_to_device(self, device: str | tuple[str, ...]) -> UOp:
        """COPY this value to `device`."""
        return UOp(Ops.COPY, self.dtype, (self, UOp(Ops.DEVICE, arg=device)))

    def allreduce(self, op: Ops, device: str | tuple[str, ...]) -> UOp:
        """ALLREDUCE: every device of `device` gets the per-device values of this one combined with `op`
        (ADD, MUL, MAX), in device order; a sharded value keeps its axis (each device holds the combination
        of the slices)."""
        return UOp(Ops.ALLREDUCE, self.dtype, (self, UOp(Ops.DEVICE, arg=device)), op)

    # multi-device constructors (the rules that run them are uopgrad.multi)
    def multi(self, axis: int) -> UOp:
        """MULTI(self, axis): this per-device value on a device tuple is one value's shards along `axis`."""
        if not isinstance(self.device, tuple):
            raise DeviceError(f"MULTI needs a value on a device tuple, not on {self.device!r}")
        return UOp(Ops.MULTI, self.dtype, (self,), axis)

    def _shard(self, axis: int) -> UOp:
        """This (replicated) value's slice on each device: a SHRINK by the symbolic device index."""
        if not self.shape:
            return self  # scalars broadcast, they are never cut
        n, size = len(cast("tuple[str, ...]", self.device)), self.shape[axis]
        if not isinstance(size, int) or size % n:
            raise ShapeError(
                f"can't shard axis {axis} of shape {self.shape} over {n} devices: its size "
                f"must be a multiple of {n}"
            )
        dnum, sz = UOp.variable(DEVICE_NUM, 0, n - 1), size // n
        return self.shrink(
            tuple((dnum * sz, dnum * sz + sz) if i == axis else (0, s) for i, s in enumerate(self.shape))
        )

    def shard(self, devices: tuple[str, ...], axis: int) -> UOp:
        """Copy to the device tuple, keep each device's slice along `axis`, and wrap it in MULTI(axis)."""
        return self.copy_to_device(devices)._shard(axis).multi(axis)

    def cast(self, dtype: DType) -> UOp:
        """CAST to `dtype` (the node itself if it already has that dtype)."""
        return self if self.dtype == dtype else _like_first(UOp(Ops.CAST, dtype, (self,)))

    def bitcast(self, dtype: DType) -> UOp:
        """Reinterpret the bits as `dtype`."""
        return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))

    def _rop(self, op: Ops, axes: Iterable[int]) -> UOp:
        """REDUCE with `op` over the given axes whose size is not 1 (rank kept); the node itself if none."""
        shape = self.shape
        kept = tuple(sorted({a for a in axes if not (isinstance(shape[a], int) and shape[a] == 1)}))
        if not kept:
            return self
        return UOp(Ops.REDUCE, self.dtype, (self,), (op, kept))

    def dot(self, w: UOp) -> UOp:
        """Matrix product of two shaped nodes (numpy's matmul broadcasting), as a sum over a broadcast MUL:
        the same graph Tensor.dot builds, without its dtype promotion."""
        n1, n2 = len(self.shape), len(w.shape)
        if n1 == 0 or n2 == 0 or self.shape[-1] != w.shape[-min(n2, 2)]:
            raise ValueError(f"shapes {self.shape} and {w.shape} can't be multiplied")
        x, wt = self.dot_operands(w)
        prod_ = x * wt
        return prod_._rop(Ops.ADD, (len(prod_.shape) - 1,)).reshape(prod_.shape[:-1])

    def dot_operands(self, w: UOp) -> tuple[UOp, UOp]:
        """The views a matrix product multiplies (then sums over the last axis): this node with a unit axis
        for w's columns, and w with its contracted axis last (shapes checked by the caller)."""
        n1, n2 = len(self.shape), len(w.shape)
        ones = (1,) * min(n1 - 1, n2 - 1, 1)
        x = self.reshape(self.shape[:-1] + ones + self.shape[-1:])
        wt = w.reshape(w.shape[:-2] + ones + w.shape[-min(n2, 2) :])
        order = list(range(len(wt.shape)))
        order[-1], order[-min(n2, 2)] = order[-min(n2, 2)], order[-1]
        return x, wt.permute(order)

    def __matmul__(self, w: UOp) -> UOp:
        return self.dot(w)

    def ssimplify(self) -> UOp | ConstType:
        """Simplify; a node that folds to a constant comes back as a Python value (tinygrad's name)."""
        return ssimplify(self)

    # ------------------------------------------------------------------ MathMixin / MovementMixin hooks
    def alu(self, op: Ops, *src: UOp) -> UOp:
        """Raw ALU node: broadcasts shaped operands, no promotion; dtype of the last operand."""
        srcs = (self, *src)
        if (shape := self._shape) is not None and any(s._shape != shape for s in src):
            srcs = _broadcast(srcs)  # (equal shapes, the common case, need none; a shapeless one gets none)
            shape = srcs[0]._shape if all(s._shape == srcs[0]._shape for s in srcs) else None
        out_dtype = dtypes.bool.vec(srcs[-1].dtype.count) if op in GroupOp.Comparison else srcs[-1].dtype.base
        return _same_shape(UOp(op, out_dtype, srcs), shape if op in _ALU else None)

    def _binop(self, op: Ops, x: UOp | ConstType, reverse: bool) -> UOp:
        y = x if isinstance(x, UOp) else self._scalar_like(x)
        a, b = (y, self) if reverse else (self, y)
        if a._shape != b._shape:  # equal shapes (the common case, a scalar's too) need no broadcast
            a, b = _broadcast((a, b))
        if a.dtype.base != b.dtype.base:  # pointer operands (custom-kernel params) compute on their elements
            dt = least_upper_dtype(a.dtype.base, b.dtype.base)
            a, b = _broadcast((a.cast(dt), b.cast(dt)))
        # `alu` without its second broadcast: the operands have one shape now (unless they don't broadcast:
        # then shape inference reports it, with the node)
        out_dtype = dtypes.bool.vec(b.dtype.count) if op in GroupOp.Comparison else b.dtype.base
        shape = a._shape
        return _same_shape(UOp(op, out_dtype, (a, b)), shape if b._shape == shape else None)

    def _scalar_like(self, x: ConstType) -> UOp:
        dt = self.dtype.base
        keep = dtypes.is_float(dt) or (dtypes.is_int(dt) and isinstance(x, int) and not isinstance(x, bool))
        return UOp.const(dt if keep else dtypes.from_py(x), x, self.device, self._shape)

    def _unop(self, op: Ops) -> UOp:
        as_int = dtypes.is_int(self.dtype) or self.dtype == dtypes.bool
        src = self.cast(dtypes.default_float) if as_int else self
        shape = s if type(s := self._shape_fact) is tuple else None  # (known: no inference asked here)
        return _same_shape(UOp(op, src.dtype, (src,)), shape)

    def _mop(self, op: Ops, arg: object) -> UOp:
        if op in (Ops.RESHAPE, Ops.EXPAND):
            return UOp(op, self.dtype, (self, shape_vec(arg)))  # type: ignore[arg-type]  # a shape from mixin
        if op in (Ops.PAD, Ops.SHRINK):
            pairs: Sequence[tuple[sint, sint]] = arg  # type: ignore[assignment]  # ((begin, end), ...) from mixin
            begins, ends = shape_vec(tuple(p[0] for p in pairs)), shape_vec(tuple(p[1] for p in pairs))
            return UOp(op, self.dtype, (self, begins, ends))
        return UOp(op, self.dtype, (self,), arg)


_new_node: Callable[[type[_Fields]], _Fields] = object.__new__  # the allocator UOpMetaClass builds nodes with
# the two facts with a slot of their own (the rules of uopgrad.facts read their sources' slots directly)
SHAPE: Fact[tuple[sint, ...] | None] = Fact("shape", infer_shape, _Fields.__dict__["_shape_fact"])
DEVICE: Fact[str | tuple[str, ...] | None] = Fact(
    "device", infer_device, _Fields.__dict__["_device_fact"], partial=True
)


def _same_shape(u: UOp, shape: tuple[sint, ...] | None) -> UOp:
    """Node `u` with the shape and device its rules would infer, set now (no fact walk for it later):
    `shape` where the caller knows the rule gives it (an ALU op on sources that all have it; a DETACH,
    CAST or AFTER: its first source's), None to leave it to inference, which reports a mismatch; the device
    where the sources' devices decide it."""
    if shape is not None and u._shape_fact is NOT_COMPUTED:
        SHAPE.put(u, shape)
    if u._device_fact is NOT_COMPUTED and (d := infer_device(u)) is not NOT_COMPUTED:
        DEVICE.put(u, d)  # (the rule a fill would run: its sources' devices decide it)
    return u


def _like_first(u: UOp) -> UOp:
    return _same_shape(u, s if type(s := u.src[0]._shape_fact) is tuple else None)


def ssimplify(u: UOp | ConstType) -> UOp | ConstType:
    """Simplify; a node that folds to a constant comes back as a Python value."""
    if not isinstance(u, UOp):
        return u
    s = u.simplify()
    return s.arg if s.op is Ops.CONST else s


pm_substitute = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x))])  # x -> mapping[x]


def _broadcast(srcs: Sequence[UOp]) -> tuple[UOp, ...]:
    shapes = [s._shape for s in srcs]
    if any(sh is None for sh in shapes):
        return tuple(srcs)
    try:
        out = broadcast_shape(*shapes)  # type: ignore[arg-type]
    except MovementError:
        return tuple(srcs)  # mismatches are reported by shape inference, with the node
    return tuple(
        s if sh == out else _broadcast_to(s, sh, out)  # type: ignore[arg-type]  # (shapes, checked above)
        for s, sh in zip(srcs, shapes)
    )


def _broadcast_to(u: UOp, shape: tuple[sint, ...], out: tuple[sint, ...]) -> UOp:
    """`u.reshape((1,)*k + shape).expand(out)` for a `shape` that broadcasts to `out`, built directly: the
    movement mixin's argument checks cost more than the two nodes, and every constant of a graph is one."""
    full = (1,) * (len(out) - len(shape)) + shape
    if full != shape:
        u = UOp(Ops.RESHAPE, u.dtype, (u, shape_vec(full)))
    return u if full == out else UOp(Ops.EXPAND, u.dtype, (u, shape_vec(out)))


# ---------------------------------------------------------------------- shape vectors
# the shape vectors of int shapes, kept (a graph's shapes are few and rebuilt on every step, and a new node
# has its facts inferred again)
_shape_vecs: dict[tuple[int, ...], UOp] = {}


def shape_vec(shape: Sequence[sint]) -> UOp:
    """Encode a shape: empty STACK for (), CONST/VCONST of index for ints, else a STACK of scalars."""
    if type(shape) is tuple and (hit := _shape_vecs.get(shape)) is not None:
        return hit
    if len(shape) == 0:
        return UOp(Ops.STACK, dtypes.index.vec(0))
    if all_int(shape):
        key = cast("tuple[int, ...]", tuple(shape))
        ret = (
            UOp(Ops.CONST, dtypes.index, (), key[0])
            if len(key) == 1
            else UOp(Ops.VCONST, dtypes.index.vec(len(key)), (), key)
        )
        if all(type(s) is int for s in key):  # exact ints only (the key must not merge other kinds)
            if len(_shape_vecs) >= _CONSTS_MAX:
                _shape_vecs.clear()
            _shape_vecs[key] = ret
        return ret
    elems = tuple(s if isinstance(s, UOp) else UOp(Ops.CONST, dtypes.index, (), s) for s in shape)
    return UOp(Ops.STACK, dtypes.index.vec(len(shape)), elems)
