"""The IR node (layer 6): `UOp`, an immutable hash-consed `(op, dtype, src, arg, tag)`, plus `CallInfo`.

Facts derived from a node (shape, device, sharding axis, vmin/vmax, key) are cached on it and filled in for
a whole graph by one iterative post-order pass, so a 100 000-node chain needs no deep recursion.
"""
from __future__ import annotations

import functools
import hashlib
import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, cast

from uopgrad._util import all_int, prod
from uopgrad.dtype import ConstType, DType, PtrDType, dtypes, least_upper_dtype
from uopgrad.mixin import MathMixin, MovementMixin, broadcast_shape
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite

__all__ = ["CallInfo", "Metadata", "UOp", "all_metadata", "sint", "ssimplify"]

sint: TypeAlias = "int | UOp"


@dataclass(frozen=True)
class Metadata:
    """Where a node came from (a front-end call name), and whether it belongs to a backward pass."""

    name: str
    caller: str = ""
    backward: bool = False


@dataclass(frozen=True)
class CallInfo:
    """The arg of CALL/FUNCTION. Compares and hashes by value, so equal calls intern to one node."""

    grad_fxn: Callable[..., tuple[UOp | None, ...]] | None = None
    metadata: tuple[Metadata, ...] = ()
    name: str | None = None
    precompile: bool = False
    precompile_backward: bool = False

    def __repr__(self) -> str:
        gf = None if self.grad_fxn is None else f"<grad_fxn {id(self.grad_fxn):#x}>"
        flags = f"{self.precompile}, {self.precompile_backward}"
        return f"CallInfo({gf}, {self.metadata}, {self.name!r}, {flags})"

    def __reduce__(self) -> tuple[Any, ...]:
        # grad_fxn is code, not data: it is dropped when pickled
        return (CallInfo, (None, self.metadata, self.name, self.precompile, self.precompile_backward))


all_metadata: weakref.WeakKeyDictionary[UOp, tuple[Metadata, ...]] = weakref.WeakKeyDictionary()


class _Err:
    """A derived fact that failed: raised again only when something actually needs it."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class UOpMetaClass(type):
    """Interns UOps: constructing a node with the fields of a live node returns that node."""

    ucache: ClassVar[dict[tuple[Any, ...], weakref.ReferenceType[UOp]]] = {}

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None, metadata: tuple[Metadata, ...] | None = None) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        key = (op, dtype, src, arg, tag)
        if (ref := UOpMetaClass.ucache.get(key)) is not None and (live := ref()) is not None:
            return live
        created: UOp = super().__call__(op, dtype, src, arg, tag)
        # the callback names no module globals: it may run while the interpreter tears modules down
        cache = UOpMetaClass.ucache
        cache[key] = weakref.ref(created, functools.partial(_drop_entry, cache, key))
        if metadata is not None:
            all_metadata[created] = metadata
        return created


def _drop_entry(cache: dict[tuple[Any, ...], weakref.ReferenceType[UOp]], key: tuple[Any, ...],
                ref: weakref.ReferenceType[UOp]) -> None:
    """Weakref callback: forget a dead node. Names no module globals (it may run at interpreter exit)."""
    if cache.get(key) is ref:
        del cache[key]


_CALLS = GroupOp.Call
_PASS_SHAPE = {Ops.DETACH, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.AFTER, Ops.COPY, Ops.ALLREDUCE,
               Ops.MSTACK, Ops.MSELECT, Ops.LOAD, Ops.PATCH}
_SCALAR_SHAPE = {Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.RANGE, Ops.SPECIAL}
_ELEMENTWISE_SHAPE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.STORE, Ops.GROUP}
_unique_counter = iter(range(1 << 62))


class UOp(MathMixin, MovementMixin, metaclass=UOpMetaClass):
    """An immutable IR node. `==` is identity; equal fields give the same object (see `UOpMetaClass`).
    `arg` is the one field typed `Any`: a CONST value, a REDUCE `(op, axes)`, a PARAM slot, a CallInfo, ..."""

    __slots__ = ("op", "dtype", "src", "arg", "tag", "_cache", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    _cache: dict[str, Any]  # derived facts (shape, device, key, ...), filled in by `_fact`

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "arg", arg)
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "_cache", {})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: can't set {name!r}; use replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"UOp is immutable: can't delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of a {self.op} UOp is symbolic; use .eq/.ne or vmin/vmax")

    # ------------------------------------------------------------------ identity and printing
    def replace(self, **fields: Any) -> UOp:
        """This node with some of op/dtype/src/arg/tag changed; the same object if nothing changes."""
        if bad := set(fields) - {"op", "dtype", "src", "arg", "tag"}:
            raise TypeError(f"replace() got unknown field(s) {sorted(bad)}")
        new = (fields.get("op", self.op), fields.get("dtype", self.dtype), tuple(fields.get("src", self.src)),
               fields.get("arg", self.arg), fields.get("tag", self.tag))
        if new[0] is self.op and new[1] == self.dtype and len(new[2]) == len(self.src) and \
                all(a is b for a, b in zip(new[2], self.src)) and new[3] is self.arg and new[4] is self.tag:
            return self
        return UOp(*new)

    def rtag(self, tag: Any = True) -> UOp:
        """This node with `tag` set."""
        return self.replace(tag=tag)

    def __repr__(self) -> str:
        return self.pretty()

    def short(self) -> str:
        """One line: op, dtype, arg and the ops of the sources."""
        srcs = ", ".join(s.op.name for s in self.src)
        tag = "" if self.tag is None else f", tag={self.tag!r}"
        return f"UOp({self.op}, {self.dtype!r}, arg={self.arg!r}, src=({srcs})){tag}"

    def pretty(self, limit: int = 60) -> str:
        """An SSA-style listing of the graph (iterative; shared nodes printed once); at most `limit` lines."""
        order = list(self.toposort())
        names = {u: f"%{i}" for i, u in enumerate(order)}
        lines = []
        for u in order[-limit:]:
            srcs = ", ".join(names[s] for s in u.src)
            tag = "" if u.tag is None else f" tag={u.tag!r}"
            arg = "" if u.arg is None else f" arg={u.arg!r}"
            lines.append(f"{names[u]} = {u.op.name} {u.dtype!r}{arg} ({srcs}){tag}")
        if len(order) > limit:
            lines.insert(0, f"... {len(order) - limit} earlier nodes")
        if len(lines) == 1:
            return f"UOp({self.op}, {self.dtype!r}, arg={self.arg!r}, src=())"
        return "\n".join(lines)

    # ------------------------------------------------------------------ traversal
    def toposort(self, gate: Callable[[UOp], bool] | None = None,
                 enter_calls: bool = True) -> dict[UOp, None]:
        """Sources before consumers, left to right (iterative DFS post-order), as an ordered set.
        `gate(node)` False drops the node and stops the walk there; `enter_calls=False` skips call bodies."""
        visited: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node in visited:
                continue
            if expanded:
                visited[node] = None
            elif gate is None or gate(node):
                stack.append((node, True))
                srcs = node.src[1:] if not enter_calls and node.op in _CALLS else node.src
                stack.extend((s, False) for s in reversed(srcs))
        return visited

    def topovisit(self, visitor: Callable[[UOp], Any], cache: dict[UOp, Any]) -> Any:
        """Post-order `cache[node] = visitor(node)` over everything (bodies too), skipping cached nodes."""
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node in cache:
                continue
            if expanded:
                cache[node] = visitor(node)
            else:
                stack.append((node, True))
                stack.extend((s, False) for s in reversed(node.src) if s not in cache)
        return cache[self]

    @property
    def backward_slice(self) -> dict[UOp, None]:
        """Everything this node depends on (bodies included), without the node itself."""
        out = self.toposort()
        del out[self]
        return out

    @property
    def backward_slice_with_self(self) -> dict[UOp, None]:
        """Everything this node depends on, and the node."""
        return self.toposort()

    def op_in_backward_slice_with_self(self, *ops: Ops) -> bool:
        """True if this node or anything it depends on (bodies included) has one of `ops`."""
        return any(x.op in ops for x in self.toposort())

    def substitute(self, mapping: Mapping[UOp, UOp], name: str | None = None,
                   extra_pm: PatternMatcher | None = None, walk: bool = False) -> UOp:
        """Replace nodes by `mapping`, bottom-up: to a fixpoint, or in one outermost-first pass (`walk=True`)
        (simultaneous renaming). CALL/FUNCTION bodies are never entered."""
        live = {k: v for k, v in mapping.items() if k is not v}
        if not live:
            return self
        pm = pm_substitute if extra_pm is None else extra_pm + pm_substitute
        return graph_rewrite(self, pm, ctx=live, bottom_up=True, name=name, walk=walk)

    def simplify(self) -> UOp:
        """Symbolic simplification (the `sym` table of uopgrad.symbolic)."""
        if _simplifier is None:
            raise RuntimeError("no simplifier registered: import uopgrad (or uopgrad.symbolic) first")
        return _simplifier(self)

    # ------------------------------------------------------------------ derived facts (cached, iterative)
    def _fact(self, name: str, compute: Callable[[UOp], Any]) -> Any:
        c = self._cache
        if name not in c:
            for u in self.toposort(gate=lambda x: name not in x._cache):
                try:
                    u._cache[name] = compute(u)
                except (RuntimeError, ValueError, AssertionError, IndexError, KeyError, TypeError) as e:
                    u._cache[name] = _Err(e)
        return c[name]

    @property
    def _shape(self) -> tuple[sint, ...] | None:
        """The shape, or None for shapeless nodes (raises if the graph's shapes are inconsistent)."""
        ret = self._fact("shape", _infer_shape)
        if isinstance(ret, _Err):
            raise ret.exc
        return ret  # type: ignore[no-any-return]

    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape; RuntimeError if this node has none."""
        if (s := self._shape) is None:
            raise RuntimeError(f"{self.op} has no shape: {self.short()}")
        return s

    @property
    def size(self) -> sint:
        """Number of elements."""
        return prod(self.shape)

    @property
    def device(self) -> str | tuple[str, ...] | None:
        """The device (a name, or a tuple for multi-device values), or None."""
        return self._fact("device", _infer_device)  # type: ignore[no-any-return]

    @property
    def _device(self) -> str | tuple[str, ...] | None:
        return self.device

    @property
    def axis(self) -> int | None:
        """The sharding axis of a multi-device value, or None."""
        ret = self._fact("axis", _infer_axis)
        return None if isinstance(ret, _Err) else ret

    @property
    def key(self) -> bytes:
        """A content hash of the whole graph under this node: equal for equal structure, across processes."""
        return self._fact("key", _infer_key)  # type: ignore[no-any-return]

    @property
    def vmin(self) -> ConstType:
        """A lower bound of every value this node can take."""
        return self._fact("minmax", _infer_min_max)[0]  # type: ignore[no-any-return]

    @property
    def vmax(self) -> ConstType:
        """An upper bound of every value this node can take."""
        return self._fact("minmax", _infer_min_max)[1]  # type: ignore[no-any-return]

    @property
    def marg(self) -> Any:
        """A movement op's decoded argument: a shape, ((begin, end), ...) pairs, an order or flip flags."""
        if self.op in (Ops.RESHAPE, Ops.EXPAND):
            return vec_values(self.src[1])
        if self.op in (Ops.PAD, Ops.SHRINK):
            return tuple(zip(vec_values(self.src[1]), vec_values(self.src[2])))
        if self.op in (Ops.PERMUTE, Ops.FLIP):
            return self.arg
        raise RuntimeError(f"marg is only defined for movement ops, not {self.op}")

    @property
    def base(self) -> UOp:
        """The node under any chain of movement ops."""
        u = self
        while u.op in GroupOp.Movement:
            u = u.src[0]
        return u

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def const(dtype: DType, b: ConstType, device: str | tuple[str, ...] | None = None,
              shape: tuple[sint, ...] | None = None, unique: bool = False) -> UOp:
        """A (canonicalised) constant, on `device`, broadcast to `shape` by reshape + expand."""
        src: tuple[UOp, ...] = ()
        if device is not None:
            dev = UOp(Ops.DEVICE, arg=device)
            src = (UOp(Ops.UNIQUE, arg=next(_unique_counter)), dev) if unique else (dev,)
        elif unique:
            raise ValueError("a unique constant needs a device")
        ret = UOp(Ops.CONST, dtype, src, dtypes.as_const(b, dtype))
        if shape is not None and len(shape):
            ret = ret.reshape((1,) * len(shape)).expand(shape)
        return ret

    def const_like(self, b: ConstType) -> UOp:
        """A constant of this node's dtype, device and shape."""
        if (axis := self.axis) is not None and isinstance(self.device, tuple):
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
    def new_buffer(device: str, size: int, dtype: DType) -> UOp:
        """A fresh BUFFER of `size` elements on `device`."""
        unique = UOp(Ops.UNIQUE, arg=next(_unique_counter))
        return UOp(Ops.BUFFER, dtype, (unique, UOp(Ops.DEVICE, arg=device)), size)

    @staticmethod
    def param(slot: int, dtype: DType, shape: tuple[sint, ...] | None = None,
              device: str | tuple[str, ...] | None = None,
              vmin_vmax: tuple[ConstType, ConstType] | None = None,
              name: str | None = None) -> UOp:
        """A formal input of a call body: PARAM(shape|NOOP, DEVICE|NOOP[, vmin, vmax][, NOOP(name)])."""
        src = [shape_vec(shape) if shape is not None else UOp(Ops.NOOP),
               UOp(Ops.DEVICE, arg=device) if device is not None else UOp(Ops.NOOP)]
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

    def call(self, *srcs: UOp, grad_fxn: Callable[..., tuple[UOp | None, ...]] | None = None,
             metadata: tuple[Metadata, ...] = (), name: str | None = None, precompile: bool = False,
             precompile_backward: bool = False) -> UOp:
        """Call this body on `srcs`: a CALL for opaque bodies (kernels, effects), else a FUNCTION whose body
        is a TUPLE. PARAM slot i in the body refers to srcs[i]."""
        info = CallInfo(grad_fxn, tuple(metadata), name, precompile, precompile_backward)
        if self.op in GroupOp.OpaqueBody:
            return UOp(Ops.CALL, dtypes.void, (self, *srcs), info)
        body = self if self.op is Ops.TUPLE else UOp.maketuple(self)
        return UOp(Ops.FUNCTION, dtypes.void, (body, *srcs), info)

    @staticmethod
    def custom_kernel(*srcs: UOp, fxn: Callable[..., UOp],
                      grad_fxn: Callable[..., tuple[UOp | None, ...]] | None = None) -> list[UOp]:
        """Run `fxn(*pointer PARAMs)`, a SINK of STOREs, as a CALL on `srcs` (made contiguous unless AFTERs);
        returns one AFTER(src, CALL) per source: the outputs are the arguments the kernel wrote."""
        contig = [s if s.op is Ops.AFTER else s.contiguous() for s in srcs]
        sizes = [s.size for s in contig]
        if not all_int(sizes):
            raise ValueError(f"custom_kernel needs concrete sizes, got {sizes}")
        ph = [UOp.param(i, s.dtype.base.ptr(cast(int, n)), device=s.device)
              for i, (s, n) in enumerate(zip(contig, sizes))]
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

    def sink(self, *srcs: UOp) -> UOp:
        """SINK of this node and `srcs`: the root of a kernel or of several outputs."""
        return UOp(Ops.SINK, dtypes.void, (self, *srcs))

    def after(self, *deps: UOp) -> UOp:
        """This value, but only after `deps` have happened."""
        return UOp(Ops.AFTER, self.dtype, (self, *deps))

    def store(self, value: UOp) -> UOp:
        """STORE `value` into this buffer/view."""
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def detach(self) -> UOp:
        """The same value with no gradient flowing through."""
        return UOp(Ops.DETACH, self.dtype, (self,))

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

    def cast(self, dtype: DType) -> UOp:
        """CAST to `dtype` (the node itself if it already has that dtype)."""
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

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

    def r(self, op: Ops, axes: Iterable[int]) -> UOp:
        """Public name of `_rop`."""
        return self._rop(op, axes)

    def dot(self, w: UOp) -> UOp:
        """Matrix product of two shaped nodes (numpy's matmul broadcasting), as a sum over a broadcast MUL:
        the same graph Tensor.dot builds, without its dtype promotion."""
        n1, n2 = len(self.shape), len(w.shape)
        if n1 == 0 or n2 == 0 or self.shape[-1] != w.shape[-min(n2, 2)]:
            raise ValueError(f"shapes {self.shape} and {w.shape} can't be multiplied")
        ones = (1,) * min(n1 - 1, n2 - 1, 1)
        x = self.reshape(self.shape[:-1] + ones + self.shape[-1:])
        wt = w.reshape(w.shape[:-2] + ones + w.shape[-min(n2, 2):])
        order = list(range(len(wt.shape)))
        order[-1], order[-min(n2, 2)] = order[-min(n2, 2)], order[-1]
        prod_ = x * wt.permute(order)
        return prod_._rop(Ops.ADD, (len(prod_.shape) - 1,)).reshape(prod_.shape[:-1])

    def __matmul__(self, w: UOp) -> UOp:
        return self.dot(w)

    @property
    def is_realized(self) -> bool:
        """The value lives in a buffer: a view of a BUFFER (through the realized form of uopgrad.realized)."""
        u = self
        if (u.op is Ops.AFTER and len(u.src) == 2 and u.src[0].op is Ops.DETACH and u.src[1].op is Ops.CALL
                and u.src[1].arg.name == "realize"):
            u = u.src[0].src[0]
        return u.base.op is Ops.BUFFER

    def ssimplify(self) -> UOp | ConstType:
        """Simplify; a node that folds to a constant comes back as a Python value (tinygrad's name)."""
        return ssimplify(self)

    # ------------------------------------------------------------------ MathMixin / MovementMixin hooks
    def alu(self, op: Ops, *src: UOp) -> UOp:
        """Raw ALU node: broadcasts shaped operands, no promotion; dtype of the last operand."""
        srcs = (self, *src)
        shapes = [s._shape for s in srcs]
        if all(sh is not None for sh in shapes) and len({tuple(map(id, sh)) for sh in shapes if sh}) > 0:
            srcs = _broadcast(srcs)
        out_dtype = dtypes.bool.vec(srcs[-1].dtype.count) if op in GroupOp.Comparison else srcs[-1].dtype.base
        return UOp(op, out_dtype, srcs)

    def _binop(self, op: Ops, x: UOp | ConstType, reverse: bool) -> UOp:
        y = x if isinstance(x, UOp) else self._scalar_like(x)
        a, b = (y, self) if reverse else (self, y)
        a, b = _broadcast((a, b))
        if a.dtype.base != b.dtype.base:  # pointer operands (custom-kernel params) compute on their elements
            dt = least_upper_dtype(a.dtype.base, b.dtype.base)
            a, b = a.cast(dt), b.cast(dt)
        return a.alu(op, b)

    def _scalar_like(self, x: ConstType) -> UOp:
        dt = self.dtype.base
        keep = dtypes.is_float(dt) or (dtypes.is_int(dt) and isinstance(x, int) and not isinstance(x, bool))
        return UOp.const(dt if keep else dtypes.from_py(x), x, self.device, self._shape)

    def _unop(self, op: Ops) -> UOp:
        as_int = dtypes.is_int(self.dtype) or self.dtype == dtypes.bool
        src = self.cast(dtypes.default_float) if as_int else self
        return UOp(op, src.dtype, (src,))

    def _mop(self, op: Ops, arg: object) -> UOp:
        if op in (Ops.RESHAPE, Ops.EXPAND):
            return UOp(op, self.dtype, (self, shape_vec(arg)))  # type: ignore[arg-type]  # a shape from mixin
        if op in (Ops.PAD, Ops.SHRINK):
            pairs: Sequence[tuple[sint, sint]] = arg  # type: ignore[assignment]  # ((begin, end), ...) from mixin
            begins, ends = shape_vec(tuple(p[0] for p in pairs)), shape_vec(tuple(p[1] for p in pairs))
            return UOp(op, self.dtype, (self, begins, ends))
        return UOp(op, self.dtype, (self,), arg)

    def to_dot(self) -> str:
        """The graph as Graphviz DOT text (`dot -Tsvg`): one node per UOp, edges from each source, labelled
        with the source's position. The VIZ page (uopgrad.viz) draws the same graph without graphviz."""
        order = list(self.toposort(enter_calls=False))
        ids = {u: i for i, u in enumerate(order)}
        lines = ["digraph uop {", '  node [shape=box, fontname="monospace", fontsize=10];']
        for u in order:
            text = f"{u.op.name}\n{u.dtype!r}" + ("" if u.arg is None else f"\n{u.arg!r}"[:60])
            lines.append(f'  n{ids[u]} [label="{_dot_escape(text)}"];')
            lines += [f'  n{ids[s]} -> n{ids[u]} [label="{k}"];' for k, s in enumerate(u.src) if s in ids]
        return "\n".join([*lines, "}"])


def _dot_escape(text: str) -> str:
    """A DOT string body: quotes and backslashes escaped, except the \\n line breaks made above."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_simplifier: Callable[[UOp], UOp] | None = None


def register_simplifier(fn: Callable[[UOp], UOp]) -> None:
    """Called once by uopgrad.symbolic: `UOp.simplify` lives above this layer."""
    global _simplifier
    _simplifier = fn


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
    except ValueError:
        return tuple(srcs)  # mismatches are reported by shape inference, with the node
    return tuple(s if s._shape == out else s.reshape((1,) * (len(out) - len(s.shape)) + s.shape).expand(out)
                 for s in srcs)


# ---------------------------------------------------------------------- shape vectors
def shape_vec(shape: Sequence[sint]) -> UOp:
    """Encode a shape: empty STACK for (), CONST/VCONST of index for ints, else a STACK of scalars."""
    if len(shape) == 0:
        return UOp(Ops.STACK, dtypes.index.vec(0))
    if all_int(shape):
        if len(shape) == 1:
            return UOp(Ops.CONST, dtypes.index, (), shape[0])
        return UOp(Ops.VCONST, dtypes.index.vec(len(shape)), (), tuple(shape))
    elems = tuple(s if isinstance(s, UOp) else UOp(Ops.CONST, dtypes.index, (), s) for s in shape)
    return UOp(Ops.STACK, dtypes.index.vec(len(shape)), elems)


def vec_values(v: UOp) -> tuple[sint, ...]:
    """Decode a shape vector made by `shape_vec`."""
    if v.op is Ops.CONST:
        return (v.arg,) * v.dtype.count
    if v.op is Ops.VCONST:
        return tuple(v.arg)
    if v.op is Ops.STACK:
        return tuple(s.arg if s.op is Ops.CONST else s for s in v.src)
    raise ValueError(f"not a shape vector: {v.short()}")


def _is(a: sint, b: sint) -> bool:
    return a is b if isinstance(a, UOp) or isinstance(b, UOp) else a == b


def _shape_of(u: UOp) -> tuple[sint, ...] | None:
    s = u._cache["shape"]
    if isinstance(s, _Err):
        raise s.exc
    return s  # type: ignore[no-any-return]


def _need_shape(u: UOp, consumer: UOp) -> tuple[sint, ...]:
    if (s := _shape_of(u)) is None:
        raise RuntimeError(f"{consumer.op} needs a shaped source; {u.op} has no shape: {consumer.short()}")
    return s


def _infer_shape(u: UOp) -> tuple[sint, ...] | None:  # noqa: C901  (one branch per op family)
    op = u.op
    if op in GroupOp.Shapeless or (op in (Ops.NOOP, Ops.MULTI) and not u.src):
        return None
    if op in _SCALAR_SHAPE:
        return ()
    if op is Ops.NOOP:
        return _shape_of(u.src[0])
    if op is Ops.BUFFER:
        return (u.arg,)
    if op is Ops.PARAM:
        if isinstance(u.dtype, PtrDType):
            return (u.dtype.size,)
        if u.src[0].op is Ops.NOOP:
            raise RuntimeError(f"PARAM slot {u.arg} has an unknown shape")
        return vec_values(u.src[0])
    if op in _PASS_SHAPE or (op is Ops.REDUCE and not u.arg[1]):
        return _need_shape(u.src[0], u) if op is not Ops.AFTER else _shape_of(u.src[0])
    if op is Ops.GETTUPLE:
        return _gettuple_shape(u)
    if op in GroupOp.Movement or op in (Ops.REDUCE, Ops.MULTI):
        return _movement_shape(u, _need_shape(u.src[0], u))
    if op in _ELEMENTWISE_SHAPE:
        shapes = [_shape_of(s) for s in u.src]
        first = shapes[0]
        if first is None or any(s is None or len(s) != len(first) or
                                not all(_is(a, b) for a, b in zip(s, first)) for s in shapes):
            raise RuntimeError(f"shape mismatch in {op}: source shapes {shapes}: {u.short()}")
        return first
    return _shape_of(u.src[0]) if u.src else None


def _gettuple_shape(u: UOp) -> tuple[sint, ...] | None:
    k = u.src[0]
    holder = k.src[0] if k.op is Ops.FUNCTION else k
    shape = _shape_of(holder.src[u.arg])
    if shape is None or k.op is not Ops.FUNCTION or all_int(shape):
        return shape
    args = k.src[1:]
    out: list[sint] = []
    for d in shape:
        if isinstance(d, UOp):
            params = {p: args[p.arg] for p in d.toposort() if p.op is Ops.PARAM and p.arg < len(args)}
            d = d.substitute(params, walk=True)
        out.append(d)
    return tuple(out)


def _movement_shape(u: UOp, src: tuple[sint, ...]) -> tuple[sint, ...]:  # noqa: C901  (one branch per op)
    op = u.op
    if op is Ops.RESHAPE:
        new = vec_values(u.src[1])
        if any(isinstance(s, int) and s < 0 for s in new):
            raise ValueError(f"RESHAPE to {new}: dimensions must be non-negative")
        if all_int(new) and all_int(src) and prod(new) != prod(src):
            raise ValueError(f"RESHAPE from {src} to {new}: the number of elements differs")
        return new
    if op is Ops.EXPAND:
        new = vec_values(u.src[1])
        if any(isinstance(n, int) and n < 0 for n in new):
            raise ValueError(f"EXPAND to {new}: dimensions must be non-negative")
        grows = [not _is(s, n) and not (isinstance(s, int) and s == 1) for s, n in zip(src, new)]
        if len(new) != len(src) or any(grows):
            raise ValueError(f"EXPAND from {src} to {new}: only size-1 dimensions can grow, rank must match")
        return new
    if op is Ops.PERMUTE:
        if sorted(u.arg) != list(range(len(src))):
            raise ValueError(f"PERMUTE {u.arg} is not a permutation of {len(src)} axes")
        return tuple(src[i] for i in u.arg)
    if op in (Ops.PAD, Ops.SHRINK):
        b, e = vec_values(u.src[1]), vec_values(u.src[2])
        if len(b) != len(src) or len(e) != len(src):
            raise ValueError(f"{op.name} {tuple(zip(b, e))} needs one pair per dimension of {src}")
        if op is Ops.PAD:
            if any(isinstance(x, int) and x < 0 for x in b + e):
                raise ValueError(f"PAD {tuple(zip(b, e))} must be non-negative")
            return tuple(_sadd(_sadd(s, bb), ee) for s, bb, ee in zip(src, b, e))
        for s, bb, ee in zip(src, b, e):
            if isinstance(s, int) and isinstance(bb, int) and isinstance(ee, int) and not 0 <= bb <= ee <= s:
                raise ValueError(f"SHRINK {tuple(zip(b, e))} is out of bounds for shape {src}")
        return tuple(ee if isinstance(bb, int) and bb == 0 else _ssub(ee, bb) for bb, ee in zip(b, e))
    if op is Ops.FLIP:
        if len(u.arg) != len(src):
            raise ValueError(f"FLIP {u.arg} needs one flag per dimension of {src}")
        return src
    if op is Ops.REDUCE:
        if any(not 0 <= a < len(src) for a in u.arg[1]):
            raise ValueError(f"REDUCE axes {u.arg[1]} out of range for shape {src}")
        return tuple(1 if i in u.arg[1] else s for i, s in enumerate(src))
    assert op is Ops.MULTI
    ndev = len(u.device) if isinstance(u.device, tuple) else 1
    return tuple(s * ndev if i == u.arg else s for i, s in enumerate(src))


def _sadd(a: sint, b: sint) -> sint:
    if isinstance(b, int) and b == 0:
        return a
    return a + b


def _ssub(a: sint, b: sint) -> sint:
    """a - b, simplified when symbolic (so `x[sp:sp+1]` has width 1, not `(sp+1)-sp`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    diff = a - b
    return ssimplify(diff) if _simplifier is not None else diff  # type: ignore[return-value]


def _infer_device(u: UOp) -> str | tuple[str, ...] | None:
    if u.op is Ops.DEVICE:
        return u.arg  # type: ignore[no-any-return]
    if u.op in (Ops.COPY, Ops.BUFFER, Ops.ALLREDUCE):
        return u.src[1]._cache["device"]  # type: ignore[no-any-return]
    if u.op is Ops.AFTER:
        return u.src[0]._cache["device"]  # type: ignore[no-any-return]
    for s in u.src:
        if (d := s._cache["device"]) is not None:
            return d  # type: ignore[no-any-return]
    return None


def _axis_of(u: UOp) -> int | None:
    a = u._cache.get("axis")
    return None if isinstance(a, _Err) else a


def _infer_axis(u: UOp) -> int | None:
    op = u.op
    if op is Ops.MULTI:
        return u.arg  # type: ignore[no-any-return]
    if op is Ops.COPY or not u.src:
        return None
    if op is Ops.GETTUPLE:
        k = u.src[0]
        return _axis_of((k.src[0] if k.op is Ops.FUNCTION else k).src[u.arg])
    if op is Ops.PARAM:
        return next((s.arg for s in u.src if s.op is Ops.MULTI and not s.src), None)
    if op in GroupOp.ALU:
        axes = [a for s in u.src if (a := _axis_of(s)) is not None]
        return axes[-1] if axes else None
    axis = _axis_of(u.src[0])
    if axis is None:
        return None
    if op is Ops.REDUCE and axis in u.arg[1]:
        return None
    if op is Ops.PERMUTE:
        return u.arg.index(axis)  # type: ignore[no-any-return]
    if op is Ops.SHRINK:
        s0 = _shape_of(u.src[0])
        return axis if s0 is not None and _is(u.marg[axis][1] - u.marg[axis][0], s0[axis]) else None
    return axis


def _infer_key(u: UOp) -> bytes:
    h = hashlib.sha256(f"{u.op}|{u.dtype!r}|{u.arg!r}|{u.tag!r}".encode())
    for s in u.src:
        h.update(s._cache["key"])
    return h.digest()


def _safe_mul(a: ConstType, b: ConstType) -> ConstType:
    return 0 if a == 0 or b == 0 else a * b


def _div_bound(a: ConstType, c: int) -> ConstType:
    """a // c (c > 0) for a bound that may be infinite (an unbounded index): inf // c would be NaN."""
    return a if isinstance(a, float) and math.isinf(a) else a // c


def _infer_min_max(u: UOp) -> tuple[ConstType, ConstType]:  # noqa: C901  (one branch per op)
    dt = u.dtype.scalar()
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    mm = [s._cache["minmax"] for s in u.src]
    op = u.op
    if op is Ops.CONST:
        return (u.arg, u.arg)
    if op is Ops.VCONST:
        return (min(u.arg), max(u.arg))
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op is Ops.PARAM and len(u.src) >= 4 and u.src[2].op is Ops.CONST and u.src[3].op is Ops.CONST:
        return (u.src[2].arg, u.src[3].arg)
    if op is Ops.BIND:
        return cast(tuple[ConstType, ConstType], mm[0])
    if op in (Ops.RANGE, Ops.SPECIAL):
        return (0, mm[0][1] - 1)
    if op is Ops.CAST and (dtypes.is_int(dt) or dt == dtypes.bool) and dtypes.is_int(u.src[0].dtype):
        return (max(lo, mm[0][0]), min(hi, mm[0][1])) if lo <= mm[0][0] and mm[0][1] <= hi else (lo, hi)
    if op is Ops.WHERE:
        return (min(mm[1][0], mm[2][0]), max(mm[1][1], mm[2][1]))
    # float bounds leave out NaN, which makes CMPLT False and CMPNE True: for floats decide only that way
    maybe_nan = u.src[0].dtype.scalar() in dtypes.floats if u.src else False
    if op is Ops.CMPLT:
        if mm[0][1] < mm[1][0] and not maybe_nan:
            return (True, True)
        return (False, False) if mm[0][0] >= mm[1][1] else (False, True)
    if op is Ops.CMPNE:
        if mm[0][1] < mm[1][0] or mm[0][0] > mm[1][1]:
            return (True, True)
        same = mm[0][0] == mm[0][1] == mm[1][0] == mm[1][1] and not maybe_nan
        return (False, False) if same else (False, True)
    if not (dtypes.is_int(dt)):
        return (lo, hi) if op is not Ops.MAX else (max(mm[0][0], mm[1][0]), max(mm[0][1], mm[1][1]))
    ret: tuple[ConstType, ConstType] | None = None
    if op is Ops.ADD:
        ret = (mm[0][0] + mm[1][0], mm[0][1] + mm[1][1])
    elif op is Ops.MUL:
        corners = [_safe_mul(a, b) for a in mm[0] for b in mm[1]]
        ret = (min(corners), max(corners))
    elif op is Ops.NEG:
        ret = (-mm[0][1], -mm[0][0])
    elif op is Ops.MAX:
        ret = (max(mm[0][0], mm[1][0]), max(mm[0][1], mm[1][1]))
    elif op is Ops.FLOORDIV and mm[1][0] == mm[1][1] and mm[1][0] > 0:
        ret = (_div_bound(mm[0][0], mm[1][0]), _div_bound(mm[0][1], mm[1][0]))
    elif op is Ops.FLOORMOD and mm[1][0] == mm[1][1] and mm[1][0] > 0:
        c = mm[1][0]
        same_block = mm[0][0] // c == mm[0][1] // c
        ret = (mm[0][0] % c, mm[0][1] % c) if same_block else (0, c - 1)
    elif op is Ops.CDIV and mm[1][0] == mm[1][1] and mm[1][0] > 0 and mm[0][0] >= 0:
        ret = (_div_bound(mm[0][0], mm[1][0]), _div_bound(mm[0][1], mm[1][0]))
    elif op is Ops.CMOD and mm[1][0] == mm[1][1] and mm[1][0] > 0 and mm[0][0] >= 0:
        ret = (0, min(mm[0][1], mm[1][0] - 1))
    if ret is None or (dt != dtypes.index and (ret[0] < lo or ret[1] > hi)):
        return (lo, hi) if dt != dtypes.index else (-math.inf, math.inf)
    return ret

