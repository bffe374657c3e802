"""TinyJit (layer 16, beside function): a step function captured once and replayed.

`@TinyJit` wraps a function that takes and returns Tensors (tinygrad's habits):
- the first call runs it as it is (every kernel gets compiled);
- the second runs it again and records every kernel and copy its realizes launch, with their buffers;
- every later call only replays them: the new inputs' buffers are put where the captured inputs' were,
  every other argument was bound at capture, and no graph is built or scheduled. It returns the Tensors the
  capture returned, whose buffers now hold this call's values (read them before the next call).

What the function does besides launching kernels is not replayed: Python side effects, host values it
read, random numbers or constants made on the host are those of the capture, and so is a tensor it leaves
unrealized (a `.grad` the optimiser did not realize). Replayed kernels add to GlobalCounters, untimed. The
buffers it writes in place (parameters, optimiser state, the gradients it keeps) are written again by each
replay, under the rules of spec/realize.md: live unrealized values that read them are computed first, and a
gradient that would need their old contents raises. A device that launches no kernels (REFERENCE) captures
nothing: the function runs on every call, with the same checks of its inputs; REFERENCE work inside a step
captured on a compiled device is a JitError.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from uopgrad.backend import CompiledBackend, Device, GlobalCounters
from uopgrad.dtype import DType
from uopgrad.errors import JitError
from uopgrad.ops import Ops
from uopgrad.pipeline import Runner, recording, set_recording
from uopgrad.realized import overwritten, realized_view
from uopgrad.tensor import Tensor
from uopgrad.uop import UOp, sint

__all__ = ["TinyJit"]

R = TypeVar("R")
Name = int | str  # an argument's position, or its keyword
InputInfo = tuple[tuple[sint, ...], DType, str]  # shape, dtype, device


def _input_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Name], list[Tensor]]:
    """The Tensor arguments, by position or keyword, then those inside a list, tuple or dict argument (one
    level deep, so that a model object's weights are not taken for inputs)."""
    pairs: list[tuple[Name, Any]] = [*enumerate(args), *sorted(kwargs.items())]
    named = [(n, t) for n, t in pairs if isinstance(t, Tensor)]
    names, tensors = [n for n, _ in named], [t for _, t in named]
    for x in (*args, *kwargs.values()):
        inner = x if isinstance(x, (list, tuple)) else x.values() if isinstance(x, dict) else ()
        tensors += [t for t in inner if isinstance(t, Tensor) and not any(t is y for y in tensors)]
    return names, tensors


def _buffer(t: Tensor, k: int) -> UOp:
    """The BUFFER a realized input tensor is a (reshaped) view of."""
    u = realized_view(t.uop)
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    if u.op is not Ops.BUFFER:
        raise JitError(f"TinyJit input {k} ({t.shape}, {t.dtype!r}) is a view into part of a buffer; pass "
                       "t.contiguous() so that it has a buffer of its own")
    return u


def _outputs(ret: object) -> list[Tensor]:
    """The Tensors a step returned: itself, or those in a returned list, tuple or dict."""
    if isinstance(ret, Tensor):
        return [ret]
    inner = ret if isinstance(ret, (list, tuple)) else ret.values() if isinstance(ret, dict) else ()
    return [t for t in inner if isinstance(t, Tensor)]


@dataclass(frozen=True)
class _Launch:
    """A captured kernel or copy that reads or writes an input: bound again on each replay."""

    item: UOp
    var_vals: dict[str, int]
    device: Callable[[str], Runner]
    slots: tuple[tuple[int, int], ...]  # (buffer position in the item, input number)

    def run(self, inputs: Sequence[UOp]) -> None:
        bufs = list(self.item.src[1:])
        for pos, k in self.slots:
            bufs[pos] = inputs[k]
        if self.item.src[0].op is Ops.COPY:
            dst, src = bufs[0], bufs[1]
            self.device(str(dst.device)).copyin(dst, self.device(str(src.device)).copyout(src))
            return
        runner = self.device(str(bufs[0].device) if bufs else "")
        if isinstance(runner, CompiledBackend):
            runner.bind_kernel(self.item, self.var_vals, bufs)()
        else:
            runner.run_kernel(self.item.replace(src=(self.item.src[0], *bufs)), self.var_vals)


class _Captured:
    """The launches of one captured call, in order, and what the capture returned."""

    def __init__(self, rec: list[tuple[UOp, dict[str, int], Callable[[str], Runner]]],
                 inputs: Sequence[UOp], ret: object) -> None:
        where = {b: k for k, b in enumerate(inputs)}
        self.ret = ret
        self.items = [it for it, _, _ in rec]  # keep every buffer (and so its memory) of the capture alive
        self.steps: list[Callable[[], None] | _Launch] = []
        written: dict[UOp, None] = {}
        kernels = ops = mem = 0
        for item, var_vals, device in rec:
            body, bufs = item.src[0], item.src[1:]
            slots = tuple((pos, where[b]) for pos, b in enumerate(bufs) if b in where)
            runner = device(str(bufs[0].device) if bufs else "") if body.op is not Ops.COPY else None
            if body.op is Ops.COPY:
                written[bufs[0]] = None
                mem += int(bufs[0].arg) * bufs[0].dtype.base.itemsize
            elif isinstance(runner, CompiledBackend):
                k = runner.kernel(item)
                written.update((bufs[s], None) for s in k.program.outs)
                o, m = k.program.estimates.at(var_vals) if k.program.vars else k.program.estimates.fixed
                kernels, ops, mem = kernels + 1, ops + o, mem + m
            if slots or not isinstance(runner, CompiledBackend):
                self.steps.append(_Launch(item, var_vals, device, slots))
            else:
                self.steps.append(runner.bind_kernel(item, var_vals))
        self.written = [b for b in written if b not in where]
        self.counts = (kernels, ops, mem)

    def __call__(self, inputs: Sequence[UOp]) -> object:
        Tensor._realize_readers(self.written)  # values built on the old contents keep them (issue 9)
        for step in self.steps:
            if isinstance(step, _Launch):
                step.run(inputs)
            else:
                step()
        overwritten(self.written)
        kernels, ops, mem = self.counts
        GlobalCounters.kernel_count += kernels
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem
        return self.ret



def _one_device(t: Tensor) -> str:
    """The input's device; a sharded or replicated input (a device tuple) is not captured yet."""
    if isinstance(d := t.device, tuple):
        raise JitError(f"TinyJit does not take tensors on a device tuple ({d}) yet; call the function "
                       "without TinyJit")
    return d

class TinyJit(Generic[R]):
    """Capture a step function on its second call and replay it on later ones (see the module docstring).
    `reset()` forgets the capture; `captured` is None until there is one."""

    def __init__(self, fxn: Callable[..., R]) -> None:
        self.fxn = fxn
        self.cnt = 0
        self.captured: _Captured | None = None
        self._expected: tuple[list[Name], list[InputInfo]] | None = None
        self._lock = threading.Lock()  # one call at a time: a capture must see only its own launches
        functools.update_wrapper(self, fxn)

    def reset(self) -> None:
        """Forget the capture: the next call runs plainly again, the one after captures."""
        with self._lock:
            self.cnt, self.captured, self._expected = 0, None, None

    def __get__(self, obj: object, objtype: type | None = None) -> Callable[..., R]:
        return functools.partial(self.__call__, obj)  # a decorated method gets its instance

    def __call__(self, *args: Any, **kwargs: Any) -> R:  # noqa: ANN401  (the wrapped function's arguments)
        """Run, capture or replay (by the number of calls so far); returns what the function returns."""
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        names, tensors = _input_tensors(args, kwargs)
        if tensors:
            Tensor.realize(*tensors)  # (realizes only the unrealized ones)
        info = [(t.shape, t.dtype, _one_device(t)) for t in tensors]
        bufs = [_buffer(t, k) for k, t in enumerate(tensors)]
        if len(set(bufs)) != len(bufs):
            raise JitError("the same buffer is passed to a TinyJit twice (as two inputs); pass a copy "
                           "(t.contiguous()) for one of them")
        if self._expected is not None:
            self._check(names, info)
        if self.cnt >= 2 and self.captured is not None:
            self.cnt += 1
            return cast(R, self.captured(bufs))
        if recording() is not None:
            raise JitError(f"TinyJit {self.fxn.__name__!r} is called while another TinyJit captures; nested "
                           "TinyJits are not supported")
        compiled = all(isinstance(Device[d], CompiledBackend) for _, _, d in info)
        rec: list[tuple[UOp, dict[str, int], Callable[[str], Runner]]] = []
        if self.cnt == 1 and compiled:
            set_recording(rec)
        try:
            ret = self.fxn(*args, **kwargs)
            if outs := _outputs(ret):
                Tensor.realize(*outs)
        finally:
            set_recording(None)
        self._expected = (names, info)
        if self.cnt == 1 and compiled:
            if not rec:
                raise JitError(f"TinyJit {self.fxn.__name__!r} ran no kernels on its second call: there is "
                               "nothing to capture (does it return the Tensors it computes?)")
            if not isinstance(ret, (Tensor, list, tuple, dict)) and ret is not None:
                raise JitError(f"TinyJit {self.fxn.__name__!r} returned a {type(ret).__name__}; a captured "
                               "step returns Tensors (or a list, tuple or dict of them), or None")
            self.captured = _Captured(rec, bufs, ret)
        self.cnt += 1
        return ret

    def _check(self, names: list[Name], info: list[InputInfo]) -> None:
        assert self._expected is not None
        want_names, want = self._expected
        if names != want_names or len(info) != len(want):
            raise JitError(f"TinyJit {self.fxn.__name__!r} was captured with Tensor arguments {want_names} "
                           f"({len(want)} tensors), not {names} ({len(info)} tensors)")
        for k, (got, exp) in enumerate(zip(info, want)):
            if got != exp:
                raise JitError(f"TinyJit {self.fxn.__name__!r}: input {k} is shape {got[0]}, {got[1]!r} on "
                               f"{got[2]}; it was captured with shape {exp[0]}, {exp[1]!r} on {exp[2]}. Use "
                               "another TinyJit (or reset()) for other inputs")
