"""Two-stage reduces (layer 9, under the scheduler that runs it): a big REDUCE of the tensor graph becomes
a first reduce into `S` partials per output, realized (CONTIGUOUS), and a second reduce of the partials.

The scheduler asks a `SplitPolicy` (given by the backend layer, which knows each device's target:
`codegen.group.split_partials`) how many partials each REDUCE gets; 1 leaves it as it is, so loop-style
targets and OPT=0 keep their kernels. The reduced axes are moved last and flattened into one axis of `n`
elements, padded with the op's identity to a multiple of `S`, and laid out by the op (spec/opt.md §4.1):

| layout | partial `s` folds | for |
|---|---|---|
| interleaved | `s, s+S, s+2S, ...` | ADD, integer MUL and MAX: neighbouring partials read neighbours |
| chunked | `s*C .. s*C+C-1` (`C = n/S`), in order | float MAX: bit-exact (sequential MAX is associative) |

The second reduce folds the partials in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from uopgrad._util import all_int, prod
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.ops import Ops
from uopgrad.uop import UOp

__all__ = ["SplitPolicy", "chunked", "never_splits", "plan_splits", "split_reduces"]

# (device, elements reduced per output, outputs, reduce op, dtype) -> partials per output (1: no split)
SplitPolicy = Callable[[str, int, int, Ops, DType], int]


def chunked(op: Ops, dt: DType) -> bool:
    """Whether the partials of an `op` reduce of `dt` fold contiguous chunks (float MAX, bit-exact as it is)
    rather than interleaved elements."""
    return op is Ops.MAX and dtypes.is_float(dt)


def _identity(op: Ops, dt: DType) -> ConstType:
    """What a padded element holds: 1 for MUL, the dtype's minimum (-inf for floats) for MAX."""
    return dtypes.as_const(1 if op is Ops.MUL else dtypes.min(dt), dt)


def _partials(u: UOp, policy: SplitPolicy) -> int:
    """The partials per output `policy` gives REDUCE `u` (1 where its sizes or device are not concrete)."""
    src = u.src[0]
    if not isinstance(u.device, str) or not all_int(src.shape):
        return 1
    n = prod(cast(int, src.shape[a]) for a in u.arg[1])
    outs = prod(cast("tuple[int, ...]", u.shape))
    return policy(u.device, n, outs, u.arg[0], u.dtype)


def never_splits(policy: SplitPolicy, device: str) -> bool:
    """Whether `policy` gives every reduce on `device` one partial. A policy says so with a method
    `never_splits(device)` (the backend layer's does: loop-style targets, OPT=0); a plain function is asked
    about each reduce."""
    ask = getattr(policy, "never_splits", None)
    return ask is not None and bool(ask(device))


def plan_splits(sink: UOp, policy: SplitPolicy, reduces: Sequence[UOp] | None = None) -> tuple[int, ...]:
    """The partials of every REDUCE under `sink`, in toposort order: what the split changes (a cache key).
    `reduces`: those REDUCEs, where the caller has walked the graph already (the scheduler's key). A device
    the policy never splits on is asked once, not sized reduce by reduce (a plain MLP step on the CPU
    sized 32 reduces in about 100 us for nothing)."""
    if reduces is None:
        reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
    skip: dict[str, bool] = {}
    out: list[int] = []
    for u in reduces:
        device = u.device
        if isinstance(device, str):
            if (never := skip.get(device)) is None:
                never = skip[device] = never_splits(policy, device)
            if never:
                out.append(1)
                continue
        out.append(_partials(u, policy))
    return tuple(out)


def _split(r: UOp, parts: int) -> UOp:
    """REDUCE `r` as a reduce into `parts` partials per output, realized, and a reduce of those."""
    x, (op, axes) = r.src[0], r.arg
    keep = [i for i in range(len(x.shape)) if i not in axes]
    shape = cast("tuple[int, ...]", x.shape)  # concrete: `_partials` splits nothing else
    outs = [shape[i] for i in keep]
    n = prod(shape[a] for a in axes)
    if keep != list(range(len(keep))):
        x = x.permute(*keep, *axes)
    x = x.reshape((*outs, n))
    if (m := -(-n // parts) * parts) != n:  # padded to a multiple of `parts` with the identity
        pad = [*((0, 0) for _ in outs), (0, m - n)]
        x = x.pad(pad)
        if op is not Ops.ADD:  # ADD's identity is the padding's zero already
            valid = UOp.const(dtypes.bool, True, r.device, (*outs, n)).pad(pad)
            x = valid.where(x, x.const_like(_identity(op, r.dtype)))
    d = len(outs)
    if chunked(op, r.dtype):
        part = x.reshape((*outs, parts, m // parts))._rop(op, (d + 1,))
    else:
        part = x.reshape((*outs, m // parts, parts))._rop(op, (d,))
    return part.contiguous().reshape((*outs, parts))._rop(op, (d,)).reshape(r.shape)


def split_reduces(sink: UOp, policy: SplitPolicy) -> UOp:
    """`sink` with every REDUCE that `policy` gives more than one partial split in two stages."""
    done: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u.op is Ops.REDUCE and (p := _partials(u, policy)) > 1:
            done[u] = _split(u.substitute(done) if done else u, p)  # a nested one: its inner ones split
    return sink.substitute(done) if done else sink
