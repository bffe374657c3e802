"""Tensors on several devices (layer 15, below the Tensor mixins): device tuples, fresh storage on them, and
how a value on a device tuple is realized and read back (`shard` itself is tensor_cast's). The rules are
uopgrad.multi's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from uopgrad import tensor_registry as registry
from uopgrad.backend import Device
from uopgrad.dtype import DType
from uopgrad.errors import DeviceError
from uopgrad.multi import Lowering, in_use, mark_used, multi_buffer
from uopgrad.ops import Ops
from uopgrad.realized import effects_under, overwritten, realized, settle, storage_view, strip_realized
from uopgrad.tensor_registry import storage_chain, view_of_buffer
from uopgrad.uop import UOp

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor

__all__ = [
    "canonical_devices",
    "device_arg",
    "empty_multi",
    "merge_devices",
    "per_device_roots",
    "realize_multi",
    "replicate",
]


def canonical_devices(devices: Sequence[str]) -> tuple[str, ...]:
    """Each name canonicalised (and its backend loaded); a device named twice is an error."""
    if isinstance(devices, str) or not devices:
        raise DeviceError(f"shard needs a tuple of device names, not {devices!r}")
    out = tuple(Device.canonicalize(d) for d in devices)
    for d in out:
        Device[d]
    if len(set(out)) != len(out):
        raise DeviceError(f"a device tuple names each device once, not {out}")
    mark_used()
    return out


def device_arg(device: str | tuple[str, ...] | None) -> tuple[tuple[str, ...] | None, str | None]:
    """A `device=` argument as (the device tuple or None, the one device a value is built on first)."""
    if isinstance(device, tuple):
        devs = canonical_devices(device)
        return devs, devs[0]
    return None, Device.canonicalize(device) if device is not None else None


def replicate(u: UOp, devices: tuple[str, ...] | None) -> UOp:
    """`u` (built on devices[0]) on every device of `devices`: a constant is rebuilt there, anything else
    copied (None: `u` itself)."""
    if devices is None or u.device == devices:
        return u
    if u.base.op is Ops.CONST:
        return u.substitute({d: UOp(Ops.DEVICE, arg=devices) for d in u.toposort() if d.op is Ops.DEVICE})
    return u.copy_to_device(devices)


def empty_multi(shape: tuple[int, ...], dtype: DType, devices: tuple[str, ...], axis: int | None) -> UOp:
    """Fresh storage on every device of `devices` for a value of `shape`: the whole of it on each (axis None)
    or one slice along `axis` each (a BUFFER on the device tuple, one per device, realized when written)."""
    n = len(devices)
    if axis is not None and shape[axis] % n:
        raise DeviceError(f"can't split axis {axis} of {shape} into {n} equal shards")
    local = tuple(s // n if a == axis else s for a, s in enumerate(shape))
    size = 1
    for s in local:
        size *= s
    u = multi_buffer([UOp.new_buffer(d, size, dtype) for d in devices]).reshape(local)
    return u if axis is None else u.multi(axis)


def merge_devices(effects: dict[str, list[UOp]]) -> dict[str, list[UOp]]:
    """The effects of one realize, as one backend call per device; after sharding, one call for them all
    (driven by the first device: every kernel still runs on the device its buffers live on), so a value two
    devices read is computed once, before any of them writes, and never again from overwritten buffers."""
    if len(effects) < 2 or not in_use():
        return effects
    kinds = {Device[d].capabilities.compiled for d in effects}
    if kinds != {True} and any(not d.startswith("REFERENCE") for d in effects):
        return effects
    first = next(iter(effects))
    return {first: [e for es in effects.values() for e in es]}


def lower_gathers(roots: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """Single-device graphs with every gathered sharded value below them lowered to per-device graphs."""
    if not in_use():
        return roots
    low = Lowering()
    return tuple(low.single(u) for u in roots)


def per_device_roots(roots: Sequence[UOp]) -> list[UOp]:
    """Stripped graphs to schedule without running them: a value on a device tuple as its per-device graphs
    (uopgrad.multi's lowering), any other with the sharded values it gathers lowered."""
    if not in_use():
        return list(roots)
    low, out = Lowering(), cast("list[UOp]", [])
    for u in roots:
        out.extend(low.parts(u)[0] if isinstance(u.device, tuple) else (low.single(u),))
    return out


def _written(tensors: Sequence[Tensor]) -> set[UOp]:
    """The BUFFERs (on device tuples) that the assigns among `tensors` write."""
    stores = effects_under([t.uop for t in tensors if t.uop.op is Ops.AFTER])
    return {b for e in stores if e.op is Ops.STORE and (b := storage_chain(e.src[0])[1]).op is Ops.BUFFER}


def realize_multi(tensors: Sequence[Tensor], is_realized: Callable[[UOp], bool]) -> list[Tensor]:
    """Realize the tensors on device tuples: each device's graph runs on that device (uopgrad.multi lowers
    them), and each is left as the realized form of a BUFFER on its device tuple. Returns the others."""
    rest = [t for t in tensors if not isinstance(t.uop.device, tuple)]
    tensors = [t for t in tensors if isinstance(t.uop.device, tuple) and not is_realized(t.uop)]
    if not tensors:
        return rest
    low, cls = Lowering(), type(tensors[0])
    written = _written(tensors)
    # the live values built on the old contents of the buffers these assigns write (a loss read after the
    # optimiser step) are computed first, in a run of their own (PyTorch's order, as on one device)
    if readers := set(cls._readers_of_overwritten([t.uop for t in tensors], written)):
        cls._realize([t for t in registry.pending() if t.uop in readers])
    done: dict[UOp, tuple[list[Tensor], int | None]] = {}
    assigns: set[UOp] = set()  # the tensors that are an assign on every device
    kept: dict[UOp, UOp] = {}  # a view of a realized tensor stays that view (it sees later writes)
    for t in tensors:
        if t.uop in done or t.uop in kept:
            continue
        if (view := view_of_buffer(stripped := strip_realized(t.uop))) is not None:
            kept[t.uop] = view
            continue
        parts, axis = low.parts(stripped)
        if t.uop.op is Ops.AFTER and t.uop.src[1].op is Ops.STORE:
            assigns.add(t.uop)
        # an assign stays one (it writes the device's buffer); any other value gets a buffer of its own
        done[t.uop] = (
            [cls._from_data(p if p.op is Ops.AFTER else p.contiguous(), requires_grad=False) for p in parts],
            axis,
        )
    cls._realize([p for ps, _ in done.values() for p in ps])
    becomes = {u: realized(view, u) for u, view in kept.items()}
    for u, (ps, axis) in done.items():
        if u in assigns:
            # an assign wrote into the buffer on the device tuple (or a view of it): the tensor is that
            # storage view again, the very BUFFER, so every other view of it sees later writes too (as on one
            # device: what computed the value is not kept, and a gradient stops there)
            storage = storage_view(u)
            becomes[u] = realized(storage, storage.detach())
            continue
        views = [strip_realized(p.uop) for p in ps]
        bufs = [v.base for v in views]
        view = multi_buffer(bufs).reshape(views[0].shape)
        becomes[u] = realized(view if axis is None else view.multi(axis), u)
    for t in tensors:
        t.uop = becomes.get(t.uop, t.uop)
    overwritten(written)
    # the other tensors holding an assign that ran (`v = t[:, 1:2]; v += 1` pends the write on t too) read the
    # written storage from now on: the write never runs again
    if ran := effects_under(assigns):
        settled: dict[UOp, UOp] = {}
        for t in registry.pending():
            t.uop = settle(t.uop, ran, settled)
    return rest
