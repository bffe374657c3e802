"""The `function` decorator (layer 16): trace a Python function of Tensors into one FUNCTION node.

Inputs found in the arguments become PARAM slots 0..n-1 (deduplicated by identity, args before kwargs);
buffers and bound variables the body reaches through closures are captured as further, implicit inputs.
Every returned Tensor is a GETTUPLE of the FUNCTION, so gradients flow through `call_gradient`.
"""

from __future__ import annotations

import functools
import itertools
import types
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from uopgrad import debug
from uopgrad._util import dedup
from uopgrad.config import DEBUG, Context
from uopgrad.errors import FunctionError
from uopgrad.gradient import pm_transform_unique_const
from uopgrad.ops import Ops
from uopgrad.realized import is_realized_after
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.tensor import Tensor
from uopgrad.uop import UOp

__all__ = ["function", "pm_ctx", "pm_transform_unique_const"]

P = ParamSpec("P")
R = TypeVar("R")
GradFxn = Callable[..., tuple[UOp | None, ...]]
_depth = 0  # nesting of traces, for debug printing


def _leaves(obj: object) -> list[Tensor | UOp]:
    """Every Tensor or UOp inside nested args, in a fixed order: lists/tuples by index, dicts by key,
    namedtuples through their dict form, other objects through their attributes. Other values are ignored."""
    out: list[Tensor | UOp] = []
    seen: set[int] = set()
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, (Tensor, UOp)):
            out.append(x)
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        if hasattr(x, "_asdict"):
            children = list(x._asdict().values())
        elif isinstance(x, (OrderedDict, dict)):
            children = list(x.values())
        elif isinstance(x, (list, tuple)):
            children = list(x)
        elif hasattr(x, "__dict__") and not isinstance(x, (type, types.ModuleType)):
            children = list(vars(x).values())
        else:
            continue
        stack.extend(reversed(children))
    return out


def _capture(ctx: tuple[list[UOp], Any], x: UOp) -> UOp:
    inputs = ctx[0]
    inputs.append(x)
    return x.param_like(len(inputs) - 1)


def _capturable(x: UOp) -> bool:
    """An AFTER/CONTIGUOUS is captured whole when it depends on buffers and on no PARAM. A realized value
    counts as a buffer, and what computed it is not looked into."""
    ops = {u.op for u in x.toposort(gate=lambda u: u is x or not is_realized_after(u))}
    return Ops.PARAM not in ops and (Ops.BUFFER in ops or any(is_realized_after(s) for s in x.src))


pm_ctx = (
    PatternMatcher(
        [
            (
                UPat((Ops.BUFFER, Ops.BIND), name="x"),
                _capture,
            ),  # a closed-over buffer or variable becomes an input
            (
                UPat(Ops.AFTER, name="x"),
                lambda ctx, x: _capture(ctx, x) if is_realized_after(x) else None,
            ),  # a realized value, whole
            (
                UPat((Ops.AFTER, Ops.CONTIGUOUS), name="x"),
                lambda ctx, x: _capture(ctx, x) if _capturable(x) else None,
            ),  # an unrealized buffer value, whole
        ]
    )
    + pm_transform_unique_const
)


def _name_of(fxn: Callable[..., Any]) -> str:
    target = fxn.func if isinstance(fxn, functools.partial) else fxn
    return getattr(target, "__qualname__", None) or type(target).__qualname__


class _Function(Generic[P, R]):
    def __init__(
        self,
        fxn: Callable[P, R],
        precompile: bool,
        precompile_backward: bool,
        allow_implicit: bool,
        grad_fxn: GradFxn | None,
    ) -> None:
        self.fxn = fxn
        self.precompile = precompile
        self.precompile_backward = precompile_backward
        self.allow_implicit = allow_implicit
        self.grad_fxn = grad_fxn
        functools.update_wrapper(self, fxn)

    def __get__(self, obj: object, objtype: type | None = None) -> Callable[..., R]:
        # as a method: the instance is the first positional argument, so its tensors are explicit inputs
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)  # type: ignore[arg-type]  # the instance is P's first arg

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        global _depth
        inputs: list[UOp] = dedup(x.uop if isinstance(x, Tensor) else x for x in _leaves((args, kwargs)))
        n_explicit = len(inputs)
        name = _name_of(self.fxn)
        if DEBUG >= 2:
            debug.log(2, f"{'  ' * _depth}tracing function {name} with {n_explicit} explicit input(s)")
        _depth += 1
        try:
            with Context(ALLOW_DEVICE_USAGE=0):
                ret = self.fxn(*args, **kwargs)
        finally:
            _depth -= 1
        if isinstance(ret, Tensor):
            body = ret.uop
        elif isinstance(ret, tuple) and all(isinstance(t, Tensor) for t in ret):
            body = UOp.maketuple(*(t.uop for t in ret))
        else:
            raise FunctionError(
                f"function return type {type(ret).__name__} is not supported: "
                f"{name} must return a Tensor or a tuple of Tensors"
            )
        body = body.substitute({u: u.param_like(i) for i, u in enumerate(inputs)})
        body = graph_rewrite(body, pm_ctx, ctx=(inputs, itertools.count(0)), bottom_up=True, name="capture")
        implicit_buffers = [u for u in inputs[n_explicit:] if u.op is Ops.BUFFER]
        if implicit_buffers and not self.allow_implicit:
            listed = ", ".join(f"{b.dtype!r}[{b.arg}] on {b.device}" for b in implicit_buffers)
            raise FunctionError(
                f"function {name} has {len(implicit_buffers)} implicit buffer(s) but "
                f"allow_implicit is False: {listed}. Pass them as arguments or use "
                "@function(allow_implicit=True)"
            )
        fxn = body.call(
            *inputs,
            grad_fxn=self.grad_fxn,
            name=name,
            precompile=self.precompile,
            precompile_backward=self.precompile_backward,
        )
        if isinstance(ret, tuple):
            return tuple(Tensor(fxn.gettuple(i)) for i in range(len(ret)))  # type: ignore[return-value]
        return Tensor(fxn.gettuple(0))  # type: ignore[return-value]


@overload
def function(
    fxn: Callable[P, R],
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: GradFxn | None = None,
) -> _Function[P, R]: ...
@overload
def function(
    fxn: None = None,
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: GradFxn | None = None,
) -> Callable[[Callable[P, R]], _Function[P, R]]: ...
def function(
    fxn: Callable[P, R] | None = None,
    *,
    precompile: bool = False,
    precompile_backward: bool = False,
    allow_implicit: bool = False,
    grad_fxn: GradFxn | None = None,
) -> Any:
    """Trace `fxn` into a FUNCTION on every call. Use as `@function` or `@function(precompile=True, ...)`,
    or wrap a callable object: `function(obj, allow_implicit=True)`."""

    def wrap(f: Callable[P, R]) -> _Function[P, R]:
        return _Function(f, precompile, precompile_backward, allow_implicit, grad_fxn)

    return wrap if fxn is None else wrap(fxn)
