"""REFERENCE's graph evaluator (layer 14): tensor graphs evaluated directly with numpy.

Each node is evaluated once, in an iterative post-order walk, to a numpy array (a tuple for TUPLE/FUNCTION,
None for effects), with the numerics of numerics.py. Writes (STORE, custom-kernel CALLs) are copy-on-write
during one run: a plain BUFFER read sees the contents from before the run, a read through AFTER sees the
writes, and the written buffers are committed to the storage map when the run ends.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeAlias

import numpy as np

from uopgrad.backend import Device
from uopgrad.backends.numerics import Array, bitcast, cast, finish, movement, np_dtype, reduce, reference_alu
from uopgrad.codegen.index import is_explicit
from uopgrad.dtype import DType, PtrDType, dtypes
from uopgrad.errors import EvaluationError
from uopgrad.ops import GroupOp, Ops
from uopgrad.uop import Invalid, UOp

__all__ = ["Evaluator", "Value", "evaluate", "register_loop_runner", "rounding_noise", "run", "storage"]

# what a node evaluates to: an array, a tuple (TUPLE, FUNCTION) or None (effects, DEVICE, ...)
Value: TypeAlias = "np.ndarray | tuple[Value, ...] | None"
# BUFFER UOp -> flat contents (C order). Weak: the storage goes when the last reference to the BUFFER does.
storage: weakref.WeakKeyDictionary[UOp, Array] = weakref.WeakKeyDictionary()

# nodes whose sources are not values: they are evaluated without visiting their sources
_LEAVES = frozenset(
    {
        Ops.CONST,
        Ops.VCONST,
        Ops.BUFFER,
        Ops.BIND,
        Ops.DEFINE_VAR,
        Ops.PARAM,
        Ops.DEVICE,
        Ops.UNIQUE,
        Ops.LUNIQUE,
        Ops.NOOP,
    }
)
# ops that a STORE target or an AFTER may be a view through; AFTER itself is transparent for views
_VIEWS = GroupOp.Movement


# runs a custom kernel written with explicit loops (its linear program): (CALL, flat argument arrays, bound
# values) -> (the arrays after the kernel, the slots it wrote). The interpreter registers it: it sits above.
LoopRunner: TypeAlias = Callable[[UOp, list[Array], dict[str, int]], tuple[list[Array], tuple[int, ...]]]
_loop_runner: LoopRunner | None = None


# Monte Carlo arithmetic: while `rounding_noise` holds a generator, every float result of an ALU op or a
# cast, and every term of an ADD or MUL reduce, is scaled by 1 + δ with δ uniform within ±1 ulp of its
# dtype. Runs under it scatter the way the program's own rounding error does, so their spread estimates that
# error where a single exact-by-luck run would not (conformance's program bounds use it).
_noise: ContextVar[np.random.Generator | None] = ContextVar("rounding_noise", default=None)
_ULP: dict[DType, float] = {
    dtypes.float16: 2.0**-10,
    dtypes.bfloat16: 2.0**-7,
    dtypes.float32: 2.0**-23,
    dtypes.float64: 2.0**-52,
}


@contextmanager
def rounding_noise(rng: np.random.Generator) -> Iterator[None]:
    """REFERENCE evaluates with random relative perturbations of its float roundings (see `_noise`)."""
    token = _noise.set(rng)
    try:
        yield
    finally:
        _noise.reset(token)


def _perturb(a: Array, dt: DType) -> Array:
    if (rng := _noise.get()) is None or (ulp := _ULP.get(dt.base.scalar())) is None:
        return a
    with np.errstate(all="ignore"):
        return finish(a.astype(np.float64) * (1.0 + rng.uniform(-ulp, ulp, np.shape(a))), dt)


def register_loop_runner(fn: LoopRunner) -> None:
    """Called once by the interpreter module."""
    global _loop_runner
    _loop_runner = fn


def _arr(v: Value) -> Array:
    if not isinstance(v, np.ndarray):
        raise TypeError(f"expected an array value, got {type(v).__name__}")
    return v


def _is_reference(device: object) -> bool:
    return isinstance(device, str) and device.partition(":")[0] == "REFERENCE"


def _schedule(root: UOp) -> list[UOp]:
    """Sources before consumers (iterative post-order); leaves are not entered, calls only via their args."""
    done: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done:
            continue
        if expanded:
            done[node] = None
            continue
        stack.append((node, True))
        srcs = () if node.op in _LEAVES else node.src[1:] if node.op in GroupOp.Call else node.src
        stack.extend((s, False) for s in reversed(srcs) if s not in done)
    return list(done)


class _Frame:
    """The state of one body: node values, PARAM arguments (by slot), and copy-on-write targets."""

    __slots__ = ("args", "live", "memo", "written")

    def __init__(self, args: Iterable[Value]) -> None:
        self.memo: dict[UOp, Value] = {}
        self.args: list[Value] = list(args)
        self.written: set[int] = set()  # PARAM slots stored into (their args entry is a private copy)
        self.live: dict[UOp, Array] = {}  # other store targets: the written copy of their value


class Evaluator:
    """Evaluates graphs for one run; `commit()` writes the buffers it stored into back to their storage."""

    def __init__(self, roots: Sequence[UOp]) -> None:
        self.live_buffers: dict[UOp, Array] = {}
        self.var_vals: dict[UOp, int] = {}
        for root in roots:
            for u in root.toposort():
                if u.op is Ops.BIND:
                    self.var_vals[u.src[0]] = u.src[1].arg
        self.ops = self.mem = 0  # what this run computed: elements of ALU results and reduce inputs, bytes

    def evaluate(self, root: UOp, frame: _Frame) -> Value:
        """The value of `root` in `frame` (every node once, iteratively)."""
        for u in _schedule(root):
            if u not in frame.memo:
                frame.memo[u] = self._node(u, frame)
        return frame.memo[root]

    def commit(self) -> None:
        """Make this run's writes visible: REFERENCE buffers are replaced, foreign ones copied in."""
        for buf, arr in self.live_buffers.items():
            self.mem += int(buf.arg) * buf.dtype.base.itemsize
            if _is_reference(buf.device):
                storage[buf] = arr
            else:
                Device[str(buf.device)].copyin(buf, arr)
        self.live_buffers.clear()

    def _node(self, u: UOp, frame: _Frame) -> Value:
        if u.op in GroupOp.ALU:
            return self._alu(u, frame)
        handler = _HANDLERS.get(u.op)
        if handler is None:
            raise EvaluationError(f"REFERENCE can't evaluate {u.op}: {u.short()}")
        try:
            return handler(self, u, frame)
        except (TypeError, ValueError) as e:
            raise EvaluationError(f"REFERENCE can't evaluate {u.op} ({e}): {u.short()}") from e

    def _alu(self, u: UOp, frame: _Frame) -> Array:
        vals: list[Array] = []
        try:
            vals = [_arr(frame.memo[s]) for s in u.src]
            if u.dtype.count != 1:
                raise TypeError(f"vector dtype {u.dtype}")
            out = reference_alu[u.op](*vals)
            self.ops += int(np.size(out))
        except (TypeError, ValueError, KeyError) as e:
            raise EvaluationError(
                f"REFERENCE can't evaluate {u.op} on {[str(v.dtype) for v in vals]} ({e}): {u.short()}"
            ) from e
        return _perturb(finish(out, u.dtype), u.dtype)

    # -------------------------------------------------------------- leaves
    def _const(self, u: UOp, frame: _Frame) -> Array:
        value = np.array(0 if u.arg is Invalid else u.arg).astype(np_dtype(u.dtype))  # Invalid: any value
        return finish(np.full((u.dtype.count,), value) if u.dtype.count > 1 else value, u.dtype)

    def _vconst(self, u: UOp, frame: _Frame) -> Array:
        return np.array(u.arg, dtype=np_dtype(u.dtype))

    def _stack(self, u: UOp, frame: _Frame) -> Array:
        if not u.src:
            return np.zeros((0,), dtype=np_dtype(u.dtype))
        return np.stack([_arr(frame.memo[s]) for s in u.src]).astype(np_dtype(u.dtype))

    def _define_var(self, u: UOp, frame: _Frame) -> Array:
        if u not in self.var_vals:
            raise EvaluationError(f"variable {u.arg[0]!r} is not bound anywhere in the graph: {u.short()}")
        return np.array(self.var_vals[u], dtype=np_dtype(u.dtype))

    def _bind(self, u: UOp, frame: _Frame) -> Array:
        return np.array(u.src[1].arg, dtype=np_dtype(u.dtype))

    def _param(self, u: UOp, frame: _Frame) -> Value:
        if not 0 <= u.arg < len(frame.args):
            raise EvaluationError(
                f"PARAM slot {u.arg} has no argument ({len(frame.args)} given): {u.short()}"
            )
        return frame.args[int(u.arg)]

    def _read_buffer(self, buf: UOp) -> Array:
        """The contents from before this run (fresh buffers read as zeros)."""
        if not _is_reference(buf.device):
            return Device[str(buf.device)].copyout(buf)
        arr = storage.get(buf)
        return np.zeros((buf.arg,), dtype=np_dtype(buf.dtype)) if arr is None else arr

    def _buffer(self, u: UOp, frame: _Frame) -> Array:
        if not _is_reference(u.device) or u in storage:  # a fresh buffer (an output) holds nothing to read
            self.mem += int(u.arg) * u.dtype.base.itemsize
        return self._read_buffer(u)

    def _none(self, u: UOp, frame: _Frame) -> None:
        return None

    # -------------------------------------------------------------- values
    def _marg(self, u: UOp, frame: _Frame) -> tuple[Any, ...]:
        """A movement op's argument with every symbolic size evaluated."""
        if u.op in (Ops.PERMUTE, Ops.FLIP):
            return tuple(u.arg)
        vecs = [tuple(int(x) for x in np.atleast_1d(_arr(frame.memo[s]))) for s in u.src[1:]]
        return vecs[0] if u.op in (Ops.RESHAPE, Ops.EXPAND) else tuple(zip(vecs[0], vecs[1]))

    def _movement(self, u: UOp, frame: _Frame) -> Array:
        return movement(u.op, _arr(frame.memo[u.src[0]]), self._marg(u, frame))

    def _reduce(self, u: UOp, frame: _Frame) -> Array:
        a = _arr(frame.memo[u.src[0]])
        self.ops += a.size  # one accumulation per element reduced
        if u.arg[0] is not Ops.MAX:  # each term carries the error of the accumulation it takes part in
            a = _perturb(a, u.dtype)
        return reduce(a, u.arg[0], u.arg[1], u.dtype)

    def _cast(self, u: UOp, frame: _Frame) -> Array:
        return _perturb(cast(_arr(frame.memo[u.src[0]]), u.dtype), u.dtype)

    def _bitcast(self, u: UOp, frame: _Frame) -> Array:
        return bitcast(_arr(frame.memo[u.src[0]]), u.src[0].dtype, u.dtype)

    def _copy(self, u: UOp, frame: _Frame) -> Array:
        return np.array(frame.memo[u.src[0]], copy=True, order="C")

    def _same(self, u: UOp, frame: _Frame) -> Value:
        return frame.memo[u.src[0]]

    def _tuple(self, u: UOp, frame: _Frame) -> Value:
        return tuple(frame.memo[s] for s in u.src)

    def _gettuple(self, u: UOp, frame: _Frame) -> Value:
        holder = frame.memo[u.src[0]]
        if not isinstance(holder, tuple):
            raise EvaluationError(f"GETTUPLE of {u.src[0].op}, which has no tuple value: {u.short()}")
        return holder[int(u.arg)]

    # -------------------------------------------------------------- effects
    def _resolve(self, target: UOp) -> tuple[list[UOp], UOp]:
        """The movement ops from `target` down to the node that holds the storage (AFTERs are transparent, and
        so are DETACHes: `t.detach()` is t's storage, a write through it writes t)."""
        chain: list[UOp] = []
        node = target
        while node.op in _VIEWS or node.op is Ops.AFTER or node.op is Ops.DETACH:
            if node.op in _VIEWS:
                chain.append(node)
            node = node.src[0]
        return chain, node

    def _current(self, base: UOp, frame: _Frame) -> Array:
        """The storage of `base` as it is now, writes of this run included."""
        if base.op is Ops.BUFFER:
            return self.live_buffers[base] if base in self.live_buffers else self._read_buffer(base)
        value = (
            self._param(base, frame)
            if base.op is Ops.PARAM
            else frame.live[base]
            if base in frame.live
            else frame.memo[base]
        )
        if not isinstance(value, np.ndarray):
            raise EvaluationError(f"{base.op} holds no array to view or to store into: {base.short()}")
        return value

    def _set_storage(self, base: UOp, frame: _Frame, arr: Array) -> None:
        if base.op is Ops.BUFFER:
            self.live_buffers[base] = arr
        elif base.op is Ops.PARAM:
            frame.args[base.arg] = arr
            frame.written.add(base.arg)
        else:
            frame.live[base] = arr

    def _writable(self, base: UOp, frame: _Frame) -> Array:
        """A fresh C-contiguous copy of `base`'s storage that becomes its storage. Every write copies, so an
        array handed out earlier in the run (a value, or a view read through AFTER) never changes under it."""
        arr = np.array(self._current(base, frame), copy=True, order="C")
        self._set_storage(base, frame, arr)
        return arr

    def store(self, target: UOp, value: Value, frame: _Frame) -> None:
        """Write `value` into the elements of `target`, a view (movement ops, AFTERs) of some storage."""
        chain, base = self._resolve(target)
        current = self._current(base, frame)
        value = np.asarray(value)
        if all(m.op is Ops.RESHAPE for m in chain):  # the whole storage is replaced
            full = np.broadcast_to(value, _arr(frame.memo[target]).shape).astype(current.dtype)
            self._set_storage(base, frame, np.array(full, copy=True, order="C").reshape(current.shape))
            return
        arr = self._writable(base, frame)
        idx = np.arange(arr.size).reshape(arr.shape)
        for m in reversed(chain):
            idx = movement(m.op, idx, self._marg(m, frame), fill=-1)  # PAD cells map to -1: not written
        val = np.broadcast_to(value, idx.shape).astype(arr.dtype)
        flat = arr.reshape(-1)  # a view: arr is C-contiguous
        keep = idx >= 0
        flat[idx[keep]] = val[keep]

    def _store(self, u: UOp, frame: _Frame) -> None:
        if len(u.src) != 2:
            raise EvaluationError(
                f"REFERENCE runs STORE(target, value), not {len(u.src)} sources: {u.short()}"
            )
        self.store(u.src[0], frame.memo[u.src[1]], frame)

    def _after(self, u: UOp, frame: _Frame) -> Value:
        chain, base = self._resolve(u.src[0])
        arr = self._current(base, frame)
        for m in reversed(chain):
            arr = movement(m.op, arr, self._marg(m, frame))
        return arr

    def _function(self, u: UOp, frame: _Frame) -> Value:
        # a FUNCTION is a value: its body runs in its own frame, once per FUNCTION node and frame; an assign
        # to a PARAM inside it is written back into the argument, as the compiled backends (which inline the
        # body) and the reference do
        inner = _Frame(frame.memo[s] for s in u.src[1:])
        out = self.evaluate(u.src[0], inner)
        self._write_back(u.src[1:], inner, frame)
        return out

    def _write_back(self, args: Sequence[UOp], inner: _Frame, frame: _Frame) -> None:
        """The arguments a body stored into get the values it wrote."""
        for slot in sorted(inner.written):
            written = np.asarray(inner.args[slot]).reshape(_arr(frame.memo[args[slot]]).shape)
            self.store(args[slot], written, frame)

    def _call(self, u: UOp, frame: _Frame) -> None:
        body, args = u.src[0], u.src[1:]
        if body.op is not Ops.SINK:
            raise EvaluationError(
                f"REFERENCE runs CALLs of a SINK of STOREs (custom kernels), not of {body.op}: {u.short()}"
            )
        params = {p.arg: p for p in body.toposort(enter_calls=False) if p.op is Ops.PARAM}
        values: list[Value] = []
        for i, a in enumerate(args):
            v = _arr(frame.memo[a])
            p = params.get(i)
            if p is not None and isinstance(p.dtype, PtrDType):
                if p.dtype.size not in (-1, v.size):
                    raise EvaluationError(
                        f"custom kernel argument {i} has {v.size} elements but its PARAM "
                        f"points to {p.dtype.size}: {u.short()}"
                    )
                v = v.reshape(-1)
            values.append(v)
        inner = _Frame(values)
        if any(is_explicit(e) for e in body.src):  # written with its own loops: run its linear program
            if _loop_runner is None:
                raise EvaluationError(
                    "no interpreter registered for kernels with explicit loops: import "
                    "uopgrad.backends.reference"
                )
            names = {v.arg[0]: x for v, x in self.var_vals.items()}
            arrays, outs = _loop_runner(u, [np.array(_arr(v), copy=True) for v in values], names)
            inner.args = list(arrays)
            inner.written.update(outs)
        else:
            self.evaluate(body, inner)
        self._write_back(args, inner, frame)  # the kernel wrote into these arguments


# How each non-ALU op is evaluated (ALU ops go through `reference_alu`); ops missing here are an error
_HANDLERS: dict[Ops, Callable[[Evaluator, UOp, _Frame], Value]] = {
    **dict.fromkeys((Ops.DEVICE, Ops.UNIQUE, Ops.LUNIQUE, Ops.NOOP, Ops.SINK, Ops.GROUP), Evaluator._none),
    **dict.fromkeys(GroupOp.Movement, Evaluator._movement),
    Ops.CONST: Evaluator._const,
    Ops.VCONST: Evaluator._vconst,
    Ops.STACK: Evaluator._stack,
    Ops.DEFINE_VAR: Evaluator._define_var,
    Ops.BIND: Evaluator._bind,
    Ops.PARAM: Evaluator._param,
    Ops.BUFFER: Evaluator._buffer,
    Ops.REDUCE: Evaluator._reduce,
    Ops.CAST: Evaluator._cast,
    Ops.BITCAST: Evaluator._bitcast,
    Ops.CONTIGUOUS: Evaluator._copy,
    Ops.COPY: Evaluator._copy,
    Ops.CONTIGUOUS_BACKWARD: Evaluator._same,
    Ops.DETACH: Evaluator._same,
    Ops.TUPLE: Evaluator._tuple,
    Ops.GETTUPLE: Evaluator._gettuple,
    Ops.STORE: Evaluator._store,
    Ops.AFTER: Evaluator._after,
    Ops.FUNCTION: Evaluator._function,
    Ops.CALL: Evaluator._call,
}


def _export(v: Value) -> Value:
    if isinstance(v, tuple):
        return tuple(_export(x) for x in v)
    return None if v is None else np.array(v, copy=True)


def evaluate(*roots: UOp) -> list[Value]:
    """The values of `roots` (arrays; tuples for TUPLE/FUNCTION; None for effects), evaluated together as one
    run on REFERENCE; the run's writes are committed."""
    return run(roots)[0]


def run(roots: Sequence[UOp]) -> tuple[list[Value], Evaluator]:
    """`evaluate`, also returning the evaluator (what the run computed, for the launch counters)."""
    ev = Evaluator(roots)
    frame = _Frame(())
    with np.errstate(all="ignore"):
        out = [_export(ev.evaluate(r, frame)) for r in roots]
    ev.commit()
    return out, ev
