"""TinyJit (layer 16, beside function): a step function captured once and replayed.

`@TinyJit` wraps a function that takes and returns Tensors (tinygrad's habits):
- the first call runs it as it is (every kernel gets compiled);
- the second runs it again and records every kernel and copy its realizes launch, with their buffers;
- every later call only replays them: the new inputs' buffers are put where the captured inputs' were,
  every other buffer was bound at capture, and no graph is built or scheduled. It returns the Tensors the
  capture returned, whose buffers now hold this call's values (read them before the next call).

Arguments (tinygrad's rule, made strict where tinygrad ignores a change; spec/realize.md):
- a Tensor argument, or a Tensor inside a list, tuple or dict argument (one level deep), is an input: the
  replays give the same names (positions and keywords) and each input the captured shape, dtype and device
  (a device tuple: a sharded or replicated input, with its axis; each device's buffer is an input);
- a bound variable (`UOp.variable(...).bind(v)`) passed as an argument is one too: each replay runs the
  captured kernels with the value of this call (tinygrad's rule);
- every other argument is fixed at capture (Python numbers, strings, None...: by type and value; a list,
  tuple, dict or set: element by element; anything else, a model, a function, an array: by identity). A
  replay whose fixed arguments (or the set of arguments passed) differ from the capture's raises JitError,
  where tinygrad replays the captured ones silently: pass a value that changes as a Tensor or a bound
  variable, or use another TinyJit. The first call may differ (a prefill before the decode steps).

What the function does besides launching kernels is not replayed: Python side effects and host values it
read are those of the capture, and so is a tensor it leaves unrealized (a `.grad` the optimiser did not
realize). Two kinds of host data are: random values (rand, randn, randint, dropout...) are drawn anew on
each replay from the generator of that moment, so a replay gives the values a plain call would (the
generator is an input of the step, as tinygrad's RNG counter is); a tensor made from host data that a
captured kernel writes into is filled again before each replay. A returned Tensor that holds an input's
buffer (`b.assign(...)` returned) is this call's input, not the capture's; an input that is a buffer the
step writes (its returned output passed back in) is copied first. `TinyJit(f, prune=True)` replays only
the launches that depend on an input, a random draw or a variable passed in; `captured.linear` is a LINEAR
of the kernel and copy CALLs a replay launches; `captured.free_intermediates()` gives back the memory of
the buffers a replay makes anew (until the next call). `Context(JIT=0)` runs the function on every call;
`Context(CAPTURING=0)` keeps what runs inside it out of a capture. Replayed kernels add to GlobalCounters,
untimed. The buffers it writes in place (parameters, optimiser state, the gradients it keeps) are written
again by each replay, under the rules of spec/realize.md: live unrealized values that read them are
computed first, and a gradient that would need their old contents raises. A device that launches no
kernels (REFERENCE) captures nothing: the function runs on every call, with the same checks of its inputs;
REFERENCE work inside a step captured on a compiled device is a JitError.

Calls: one at a time per TinyJit. A call from another thread waits for the running one, unless the caller
is itself inside a TinyJit: then it raises JitError rather than wait (a thread waits only while it holds no
TinyJit, so no two threads can wait on each other). A TinyJit called (or reset) while it runs in the same
thread (recursion, directly or through another TinyJit) raises JitError; so does one called while another
captures. The Tensors a replay returns are shared by all calls, whichever thread made them.
"""

from __future__ import annotations

import functools
import numbers
import reprlib
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from uopgrad.backend import CompiledBackend, Device, GlobalCounters
from uopgrad.config import JIT
from uopgrad.dtype import DType, dtypes
from uopgrad.errors import JitError
from uopgrad.multi import shard_buffers, tuple_buffers_of
from uopgrad.ops import GroupOp, Ops
from uopgrad.pipeline import HostFill, Recorded, Runner, recording, set_recording
from uopgrad.realized import overwritten, realized_view
from uopgrad.tensor import Tensor
from uopgrad.uop import UOp, sint

__all__ = ["JitError", "TinyJit", "graph_class"]

R = TypeVar("R")
Name = int | str  # an argument's position, or its keyword
InputInfo = tuple[tuple[sint, ...], DType, str | tuple[str, ...], UOp]  # shape, dtype, device(s), view
Fixed = dict[Name, Hashable]  # each argument's key (see _key)
_INPUT = object()  # a Tensor input's place in an argument's key (its shape, dtype, device are checked apart)
_VAR = object()  # a bound variable argument's key: (_VAR, its variable); the value is passed on each call
_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 60


def _input_tensors(pairs: list[tuple[Name, Any]]) -> tuple[list[Name], list[Tensor]]:
    """The Tensor arguments, by position or keyword (sorted), then those inside a list, tuple or dict argument
    (one level deep, so that a model object's weights are not taken for inputs)."""
    named = [(n, t) for n, t in pairs if isinstance(t, Tensor)]
    names, tensors = [n for n, _ in named], [t for _, t in named]
    for _, x in pairs:  # keywords sorted, as above: their order in the call does not move the inputs
        inner = x if isinstance(x, (list, tuple)) else x.values() if isinstance(x, dict) else ()
        tensors += [t for t in inner if isinstance(t, Tensor) and not any(t is y for y in tensors)]
    return names, tensors


class _Same:
    """An argument compared by identity (a model object, a function, an array, a UOp). Held weakly where it
    can be, so that a capture keeps nothing alive and a new object at a dead one's address is not taken for
    it."""

    __slots__ = ("get", "ident")

    def __init__(self, x: object) -> None:
        self.ident = id(x)
        try:
            self.get: Callable[[], object] = weakref.ref(x)
        except TypeError:
            self.get = lambda: x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and (x := self.get()) is not None and x is other.get()

    def __hash__(self) -> int:
        return self.ident


def _key(x: object, depth: int) -> Hashable:
    """What a call must repeat of a fixed argument: a value's type and value, a container's keys element by
    element (a Tensor one level deep is an input), anything else's identity."""
    if isinstance(x, Tensor):
        return _INPUT if depth <= 1 else _Same(x)
    if x is None or isinstance(x, (bool, str, bytes, range)):
        return (type(x), x)
    if isinstance(x, float):
        return (type(x), x.hex())  # exact: -0.0 is not 0.0, and NaN equals itself
    if isinstance(x, numbers.Number):
        return (type(x), repr(x) if x != x else x)
    if isinstance(x, slice):
        return (slice, _key(x.start, 2), _key(x.stop, 2), _key(x.step, 2))
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(_key(v, depth + 1) for v in x))
    if isinstance(x, dict):
        return (type(x), tuple((_key(k, 2), _key(v, depth + 1)) for k, v in x.items()))
    if isinstance(x, (set, frozenset)):
        return (type(x), frozenset(_key(v, 2) for v in x))
    return _Same(x)


def _fixed_arguments(fxn: str, pairs: list[tuple[Name, Any]]) -> tuple[Fixed, dict[str, int]]:
    """Every argument's key, and the values of the bound variables passed."""
    keys: Fixed = {}
    var_vals: dict[str, int] = {}
    for name, x in pairs:
        if isinstance(x, UOp) and x.op is Ops.BIND:
            var, val = x.unbind()
            if var_vals.setdefault(var.arg[0], val) != val:
                raise JitError(
                    f"TinyJit {fxn!r} is called with variable {var.arg[0]!r} bound to both "
                    f"{var_vals[var.arg[0]]} and {val}"
                )
            # by name, range and dtype: a variable made anew each call (`Variable("i", 0, 9).bind(n)` in the
            # step's caller, tinygrad's habit) is the same variable, even once the last one was collected
            keys[name] = (_VAR, var.arg, var.dtype)
        else:
            keys[name] = _key(x, 0)
    return keys, var_vals


def _show(x: object) -> str:
    """An argument as an error shows it: short, and an object's class and address whole."""
    if isinstance(x, UOp) and x.op is Ops.BIND:
        return f"variable {x.src[0].arg[0]!r}"
    if type(x).__repr__ is object.__repr__:
        return f"<{type(x).__name__} object at {id(x):#x}>"
    return _shown.repr(x)


def _label(name: Name) -> str:
    return f"{name}=" if isinstance(name, str) else f"argument {name} = "


def _buffer(t: Tensor, k: int, var_vals: dict[str, int]) -> tuple[UOp, UOp]:
    """The BUFFER a realized input tensor is a view of, and that view with the buffer and the bound
    variables' values taken out (the part a later call must repeat; tinygrad's rule). The values go into
    `var_vals`: a view bound to this call's values (`a[:, :Variable("i", 1, 10).bind(n)]`) is read with
    them on replay."""
    u = realized_view(t.uop)
    base = u
    while base.op in GroupOp.Movement or base.op is Ops.MULTI:  # a sharded input: its BUFFER on the tuple
        base = base.src[0]
    if base.op is not Ops.BUFFER:
        raise JitError(
            f"TinyJit input {k} ({t.shape}, {t.dtype!r}) is not a buffer or a view of one; pass "
            "t.contiguous()"
        )
    binds = {b: b.src[0] for b in u.toposort() if b.op is Ops.BIND}
    for b in binds:
        var, val = b.unbind()
        if var_vals.setdefault(var.arg[0], val) != val:
            raise JitError(
                f"TinyJit input {k} binds variable {var.arg[0]!r} to {val}, another to {var_vals[var.arg[0]]}"
            )
    view = u.substitute({base: UOp(Ops.NOOP), **binds}, walk=True) if u is not base else UOp(Ops.NOOP)
    return base, view


def _unbound_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
    """A shape with its bound variables' values taken out (they may change from call to call)."""
    return tuple(
        s.substitute({b: b.src[0] for b in s.toposort() if b.op is Ops.BIND}, walk=True)
        if isinstance(s, UOp)
        else s
        for s in shape
    )


def _outputs(ret: object) -> list[Tensor]:
    """The Tensors a step returned: itself, or those in a returned list, tuple or dict."""
    if isinstance(ret, Tensor):
        return [ret]
    inner = ret if isinstance(ret, (list, tuple)) else ret.values() if isinstance(ret, dict) else ()
    return [t for t in inner if isinstance(t, Tensor)]


def _places(ret: object) -> list[tuple[object, Tensor]]:
    """The returned Tensors by place: None for a Tensor returned alone, else its index or key."""
    if isinstance(ret, Tensor):
        return [(None, ret)]
    inner = enumerate(ret) if isinstance(ret, (list, tuple)) else ret.items() if isinstance(ret, dict) else ()
    return [(k, t) for k, t in inner if isinstance(t, Tensor)]


def _returned_inputs(
    ret: object,
    tensors: Sequence[Tensor],
    bufs: Sequence[UOp],
) -> dict[object, tuple[int, bool]]:
    """The returned Tensors that hold an input's buffer (`b.assign(...)` returned): by place, the input's
    number and whether it is that very input Tensor. A replay returns this call's input there, not the
    capture's, whose buffer the replay does not write."""
    where = {b: k for k, b in enumerate(bufs)}
    out: dict[object, tuple[int, bool]] = {}
    for place, t in _places(ret):
        u = realized_view(t.uop)
        while u.op in (Ops.RESHAPE, Ops.MULTI):
            u = u.src[0]
        if (k := where.get(u)) is not None:
            out[place] = (k, t is tensors[k])
    return out


@dataclass(frozen=True)
class _Launch:
    """A captured kernel or copy that reads or writes an input, or reads a variable passed as an argument:
    bound again on each replay."""

    item: UOp
    var_vals: dict[str, int]
    device: Callable[[str], Runner]
    slots: tuple[tuple[int, int], ...]  # (buffer position in the item, input number)
    live: tuple[str, ...] = ()  # the variables whose values come from each call

    def run(self, inputs: Sequence[UOp], var_vals: dict[str, int]) -> None:
        bufs = list(self.item.src[1:])
        for pos, k in self.slots:
            bufs[pos] = inputs[k]
        if self.item.src[0].op is Ops.COPY:
            dst, src = bufs[0], bufs[1]
            self.device(str(dst.device)).copyin(dst, self.device(str(src.device)).copyout(src))
            return
        vals = {**self.var_vals, **{v: var_vals[v] for v in self.live}} if self.live else self.var_vals
        runner = self.device(str(bufs[0].device) if bufs else "")
        if isinstance(runner, CompiledBackend):
            runner.bind_kernel(self.item, vals, bufs)()
        else:
            runner.run_kernel(self.item.replace(src=(self.item.src[0], *bufs)), vals)


def _step_of(
    entry: tuple[UOp, dict[str, int], Callable[[str], Runner]],
    where: dict[UOp, int],
    variables: Sequence[str],
) -> tuple[Callable[[], None] | _Launch, tuple[str, ...]]:
    """A captured launch as a replay step (bound once where it reads no input and no live variable), and
    the variables whose values come from each call."""
    item, var_vals, device = entry
    body, bufs = item.src[0], item.src[1:]
    slots = tuple((pos, where[b]) for pos, b in enumerate(bufs) if b in where)
    runner = device(str(bufs[0].device) if bufs else "") if body.op is not Ops.COPY else None
    if isinstance(runner, CompiledBackend):
        live = tuple(n for v in runner.kernel(item).program.vars if (n := v.arg[0]) in variables)
    else:
        live = tuple(n for n in var_vals if n in variables) if body.op is not Ops.COPY else ()
    if slots or live or not isinstance(runner, CompiledBackend):
        return _Launch(item, var_vals, device, slots, live), live
    return runner.bind_kernel(item, var_vals), live


def _pruned(entries: list[Recorded], seeds: set[UOp], variables: Sequence[str]) -> list[Recorded]:
    """TinyJit(prune=True): the launches that read or write a buffer that depends on an input (or on the
    random values a replay draws, or on a variable passed in), by the order of capture; the others made
    the same values at capture and are not replayed (tinygrad's prune)."""
    needed, kept = set(seeds), cast("list[Recorded]", [])
    for e in entries:
        if isinstance(e, HostFill):
            kept.append(e)
            continue
        bufs = set(e[0].src[1:])
        if not needed.isdisjoint(bufs) or any(n in variables for n in e[1]):
            kept.append(e)
            needed |= bufs
    return kept


class _Captured:
    """The launches of one captured call, in order, and what the capture returned. `linear` is a LINEAR of
    the kernel and copy CALLs each replay launches (tinygrad's `captured.linear`); host fills (random
    draws, and host data a captured kernel writes into) are replayed besides."""

    def __init__(
        self,
        rec: list[Recorded],
        inputs: Sequence[UOp],
        ret: object,
        variables: Sequence[str],
        prune: bool = False,
    ) -> None:
        where = {b: k for k, b in enumerate(inputs)}
        self.ret, self.inputs = ret, list(inputs)
        self.bases = self.inputs  # set by TinyJit: each input Tensor's BUFFER (one on a device tuple)
        self.returned_inputs: dict[object, tuple[int, bool]] = {}  # set by TinyJit: see _returned_inputs
        fills: dict[UOp, HostFill] = {}  # a buffer's last note says how to make its values again
        entries: list[Recorded] = []
        for e in rec:
            if isinstance(e, HostFill):
                if e.buf not in fills:
                    entries.append(e)
                fills[e.buf] = HostFill(e.buf, e.values, e.fresh or (e.buf in fills and fills[e.buf].fresh))
            else:
                entries.append(e)
        if prune:
            entries = _pruned(entries, set(where) | {b for b, f in fills.items() if f.fresh}, variables)
        launches = [e for e in entries if not isinstance(e, HostFill)]
        self.items = [it for it, _, _ in launches]  # keep every buffer (and so its memory) alive
        self.linear = UOp(Ops.LINEAR, dtypes.void, src=tuple(self.items))
        written: dict[UOp, None] = {}
        self.estimates: list[tuple[Any, dict[str, int], tuple[str, ...]]] = []  # kernels with live variables
        kernels = ops = mem = 0
        for item, var_vals, device in launches:
            body, bufs = item.src[0], item.src[1:]
            runner = device(str(bufs[0].device) if bufs else "") if body.op is not Ops.COPY else None
            if body.op is Ops.COPY:
                written[bufs[0]] = None
                mem += int(bufs[0].arg) * bufs[0].dtype.base.itemsize
            elif isinstance(runner, CompiledBackend):
                k = runner.kernel(item)
                written.update((bufs[s], None) for s in k.program.outs)
                if live := tuple(n for v in k.program.vars if (n := v.arg[0]) in variables):
                    self.estimates.append((k.program.estimates, var_vals, live))
                    o, m = 0, 0
                else:
                    o, m = k.program.estimates.at(var_vals) if k.program.vars else k.program.estimates.fixed
                kernels, ops, mem = kernels + 1, ops + o, mem + m
        # a fill is replayed where its values change (random) or a captured launch writes into its buffer
        keep = {b for b, f in fills.items() if (f.fresh or b in written) and int(b.arg) > 0}
        self._entries = [
            fills[e.buf] if isinstance(e, HostFill) else e
            for e in entries
            if not isinstance(e, HostFill) or e.buf in keep
        ]
        self._where, self._variables = where, variables
        written.update((e.buf, None) for e in self._entries if isinstance(e, HostFill))
        self.steps = self._bound()
        self.written = [b for b in written if b not in where]
        self._written = set(self.written)
        # what live tensors read of them: a sharded value reads the BUFFER on its device tuple
        self._read_as = self.written + tuple_buffers_of(self._written)
        self.counts = (kernels, ops, mem)

    def _bound(self) -> list[Callable[[], None] | _Launch | HostFill]:
        """The replay's steps, each kernel that reads no input bound once to its buffers' memory."""
        return [
            e if isinstance(e, HostFill) else _step_of(e, self._where, self._variables)[0]
            for e in self._entries
        ]

    def _intermediates(self) -> list[UOp]:
        """The buffers the replayed launches make anew: their first use in a replay is a kernel that writes
        all of them without reading them, or a copy into them. Not the inputs, nor the state a step updates
        (read first, written in part, or filled from the host)."""
        seen: set[UOp] = set(self._where)
        out: list[UOp] = []
        for e in self._entries:
            if isinstance(e, HostFill):
                seen.add(e.buf)
                continue
            item, _, device = e
            body, bufs = item.src[0], item.src[1:]
            if body.op is Ops.COPY:
                made, used = [bufs[0]], list(bufs)
            elif isinstance(runner := device(str(bufs[0].device) if bufs else ""), CompiledBackend):
                k = runner.kernel(item)
                made, used = [bufs[i] for i in k.overwrites], [bufs[i] for i in k.program.globals]
            else:
                made, used = [], list(bufs)
            out += [b for b in dict.fromkeys(made) if b not in seen]
            seen.update(used)
        return out

    def free_intermediates(self) -> int:
        """Give back the device memory of the buffers each replay makes anew (tinygrad's name): the
        intermediate values, and the outputs, whose values are gone until the next call (reading them
        before raises BackendError). The next replay allocates them again. Returns the bytes given back."""
        self.steps = []  # the bound launches hold the memory: bound again at the next replay
        freed = 0
        for b in self._intermediates():
            if isinstance(dev := Device[str(b.device)], CompiledBackend):
                freed += dev.free(b)
        return freed

    def _own_copy(self, buf: UOp) -> UOp:
        """A copy of an input that is also a buffer the step writes (a returned output passed back in): the
        step reads it whole before it writes it (tinygrad copies such an input too)."""
        dev = Device[str(buf.device)]
        new = UOp.new_buffer(str(buf.device), int(buf.arg), buf.dtype)
        dev.copyin(new, dev.copyout(buf))
        return new

    def replay(
        self, tensors: Sequence[Tensor], bases: Sequence[UOp], inputs: Sequence[UOp], var_vals: dict[str, int]
    ) -> object:
        """Run the step on these inputs (`bases`: each input Tensor's BUFFER, `inputs`: the BUFFERs the
        kernels read, one per device of a sharded input); what the capture returned, with this call's inputs
        in the places where it returned an input (a view of one: the same view of this call's)."""
        ret = self(inputs, var_vals)
        if not self.returned_inputs:
            return ret

        def now(place: object, t: Tensor) -> Tensor:
            if (hit := self.returned_inputs.get(place)) is None:
                return t
            k, same = hit
            return (
                tensors[k]
                if same
                else Tensor(t.uop.substitute({self.bases[k]: bases[k]}), requires_grad=t.requires_grad)
            )

        if isinstance(ret, Tensor):
            return now(None, ret)
        if isinstance(ret, dict):
            return {key: now(key, v) if isinstance(v, Tensor) else v for key, v in ret.items()}
        seq = cast("list[object] | tuple[object, ...]", ret)
        items = [now(i, v) if isinstance(v, Tensor) else v for i, v in enumerate(seq)]
        if isinstance(seq, list):
            return items
        return tuple(items) if type(seq) is tuple else cast(Any, type(seq))(*items)  # a namedtuple

    def __call__(self, inputs: Sequence[UOp], var_vals: dict[str, int]) -> object:
        if not self._written.isdisjoint(inputs):
            inputs = [self._own_copy(b) if b in self._written else b for b in inputs]
        Tensor._realize_readers(self._read_as)  # values built on the old contents keep them (issue 9)
        if not self.steps:  # after free_intermediates: the memory again (written before it is read), bound
            for b in self._intermediates():
                if isinstance(dev := Device[str(b.device)], CompiledBackend):
                    dev.handle(b, zero=False)
            self.steps = self._bound()
        for step in self.steps:
            if isinstance(step, _Launch):
                step.run(inputs, var_vals)
            elif isinstance(step, HostFill):
                Device[str(step.buf.device)].copyin(step.buf, step.values())
            else:
                step()
        overwritten(self._read_as)
        kernels, ops, mem = self.counts
        for est, base, live in self.estimates:
            o, m = est.at({**base, **{v: var_vals[v] for v in live}})
            ops, mem = ops + o, mem + m
        GlobalCounters.kernel_count += kernels
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem
        return self.ret


def graph_class(dev: object) -> type | None:
    """The class that runs a device's captured launches as one graph (tinygrad's name): uopgrad replays
    them one by one, so it is the device's `graph` attribute, None on every backend so far."""
    return cast("type | None", getattr(dev, "graph", None))


def _per_device(base: UOp) -> tuple[UOp, ...]:
    """The BUFFERs the kernels of an input read: its BUFFER, or one per device for a BUFFER on a device tuple
    (a sharded or replicated input; the captured kernels read each device's, so each is an input)."""
    return shard_buffers(base) if isinstance(base.device, tuple) else (base,)


_running = threading.local()  # .stack: the TinyJits running in this thread, outermost first


def _stack() -> list[TinyJit[Any]]:
    if (stack := getattr(_running, "stack", None)) is None:
        stack = _running.stack = []
    return cast("list[TinyJit[Any]]", stack)


class TinyJit(Generic[R]):
    """Capture a step function on its second call and replay it on later ones (see the module docstring).
    `reset()` forgets the capture; `captured` is None until there is one. `prune=True` replays only the
    launches that depend on an input, a random draw or a variable passed in: the others (weights
    computed from weights) keep the values the capture made."""

    def __init__(self, fxn: Callable[..., R], prune: bool = False) -> None:
        self.fxn = fxn
        self.prune = prune
        self.cnt = 0
        self.captured: _Captured | None = None
        self._expected: tuple[list[Name], list[InputInfo], Fixed, dict[Name, str]] | None = None
        self._lock = threading.Lock()  # one call at a time: a capture must see only its own launches
        functools.update_wrapper(self, fxn)

    @property
    def name(self) -> str:
        """The function's name, for errors."""
        return str(getattr(self.fxn, "__name__", None) or self.fxn)

    def reset(self) -> None:
        """Forget the capture: the next call runs plainly again, the one after captures."""
        self._enter("reset")
        try:
            self.cnt, self.captured, self._expected = 0, None, None
        finally:
            self._exit()

    def __get__(self, obj: object, objtype: type | None = None) -> Callable[..., R]:
        return functools.partial(self.__call__, obj)  # a decorated method gets its instance

    def __call__(self, *args: Any, **kwargs: Any) -> R:  # noqa: ANN401  (the wrapped function's arguments)
        """Run, capture or replay (by the number of calls so far); returns what the function returns."""
        self._enter("called")
        try:
            return self._call(args, kwargs)
        finally:
            self._exit()

    def _enter(self, what: str) -> None:
        """Take this TinyJit's lock, marked as running in this thread (see the module docstring's Calls)."""
        stack = _stack()
        if any(j is self for j in stack):
            chain = " -> ".join(j.name for j in stack[next(k for k, j in enumerate(stack) if j is self) :])
            raise JitError(
                f"TinyJit {self.name!r} is {what} while it runs in this thread ({chain} -> "
                f"{self.name}): a jitted function cannot call itself, directly or through another "
                "TinyJit; call the plain function (its .fxn) inside it"
            )
        if not stack:
            self._lock.acquire()
        elif not self._lock.acquire(blocking=False):
            raise JitError(
                f"TinyJit {self.name!r} is {what} from inside TinyJit {stack[-1].name!r} while it "
                "runs in another thread: waiting there could deadlock; call it outside the other "
                "TinyJit, or give each thread its own"
            )
        stack.append(self)

    def _exit(self) -> None:
        _running.stack.pop()
        self._lock.release()

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        if recording() is not None:  # a replay here would launch kernels the capture does not record
            raise JitError(
                f"TinyJit {self.name!r} is called while another TinyJit captures: having "
                "TinyJit inside another TinyJit is not supported (nested TinyJits)"
            )
        pairs: list[tuple[Name, Any]] = [*enumerate(args), *sorted(kwargs.items())]
        names, tensors = _input_tensors(pairs)
        fixed, var_vals = _fixed_arguments(self.name, pairs)
        if tensors:
            Tensor.realize(*tensors)  # (realizes only the unrealized ones)
        views = [_buffer(t, k, var_vals) for k, t in enumerate(tensors)]
        bases = [b for b, _ in views]
        bufs = [s for b in bases for s in _per_device(b)]  # what the captured kernels read
        info = [(_unbound_shape(t.shape), t.dtype, t.device, v) for t, (_, v) in zip(tensors, views)]
        if len(set(bufs)) != len(bufs):
            raise JitError(
                "the same buffer is passed to a TinyJit twice (as two inputs); pass a copy "
                "(t.contiguous()) for one of them"
            )
        if self._expected is not None:
            self._check(names, info, fixed, pairs)
        if not JIT:  # Context(JIT=0): every call runs the function (and counts for nothing)
            return self._run(args, kwargs)
        if self.cnt >= 2 and self.captured is not None:
            self.cnt += 1
            return cast(R, self.captured.replay(tensors, bases, bufs, var_vals))
        compiled = all(isinstance(Device[str(b.device)], CompiledBackend) for b in bufs)
        rec: list[Recorded] = []
        if self.cnt == 1 and compiled:
            set_recording(rec)
        try:
            ret = self._run(args, kwargs)
        finally:
            set_recording(None)
        if self.cnt == 1:  # the replays repeat the capture's arguments (the first call's may differ)
            shown = {n: _show(x) for n, x in pairs if not isinstance(x, Tensor)}
            self._expected = (names, info, fixed, shown)
        if self.cnt == 1 and compiled:
            self._capture(rec, ret, tensors, bases, bufs, list(var_vals))
        self.cnt += 1
        return ret

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        ret = self.fxn(*args, **kwargs)
        if outs := _outputs(ret):
            Tensor.realize(*outs)
        return ret

    def _capture(
        self,
        rec: list[Recorded],
        ret: object,
        tensors: list[Tensor],
        bases: list[UOp],
        bufs: list[UOp],
        variables: list[str],
    ) -> None:
        """Keep what the second call recorded as the capture (see the module docstring)."""
        if not rec:
            raise JitError(
                f"TinyJit {self.name!r} ran no kernels on its second call: there is "
                "nothing to capture (does it return the Tensors it computes?)"
            )
        if not isinstance(ret, (Tensor, list, tuple, dict)) and ret is not None:
            raise JitError(
                f"TinyJit {self.name!r} returned a {type(ret).__name__}; a captured "
                "step returns Tensors (or a list, tuple or dict of them), or None"
            )
        if all(
            isinstance(Device[str(e.buf.device)], CompiledBackend) for e in rec if isinstance(e, HostFill)
        ):  # host values on REFERENCE: run plainly, as there
            self.captured = _Captured(rec, bufs, ret, variables, self.prune)
            self.captured.bases = list(bases)
            self.captured.returned_inputs = _returned_inputs(ret, tensors, bases)

    def _check(
        self,
        names: list[Name],
        info: list[InputInfo],
        fixed: Fixed,
        pairs: list[tuple[Name, Any]],
    ) -> None:
        assert self._expected is not None
        want_names, want, want_fixed, shown = self._expected
        if list(fixed) != list(want_fixed):
            raise JitError(
                f"TinyJit {self.name!r} was captured with the arguments {list(want_fixed)}, not "
                f"{list(fixed)}: pass the same ones, by position or keyword as at capture"
            )
        if names != want_names or len(info) != len(want):
            raise JitError(
                f"TinyJit {self.name!r} was captured with Tensor arguments {want_names} "
                f"({len(want)} tensors), not {names} ({len(info)} tensors)"
            )
        for k, (got, exp) in enumerate(zip(info, want)):
            if got[:3] == exp[:3] and got[3] is not exp[3]:
                raise JitError(
                    f"TinyJit {self.name!r}: input {k} is another view of its buffer than at "
                    "capture (another offset or stride): the captured kernels read the captured "
                    "view. Pass t.contiguous(), or the same view (a variable offset: a bound "
                    "variable)"
                )
            if got != exp:
                raise JitError(
                    f"TinyJit {self.name!r}: input {k} is shape {got[0]}, {got[1]!r} on "
                    f"{got[2]}; it was captured with shape {exp[0]}, {exp[1]!r} on {exp[2]}. Use "
                    "another TinyJit (or reset()) for other inputs"
                )
        for name, x in pairs:
            if (key := fixed[name]) != (want_key := want_fixed[name]):
                same = isinstance(key, _Same) and isinstance(want_key, _Same)
                was, now = _label(name) + shown.get(name, "a Tensor"), _label(name) + _show(x)
                raise JitError(
                    f"TinyJit {self.name!r} was captured with {was} and is now called with {now}"
                    f"{' (another object)' * same}: an "
                    "argument other than a Tensor is fixed at capture. Pass a value that changes "
                    "as a Tensor (or an int as a bound variable, UOp.variable(...).bind(v)), or "
                    "use another TinyJit (one per object, for a method), or reset()"
                )
