"""Tensor-level programs' gradients against PyTorch autograd (an oracle that shares nothing with uopgrad),
where torch is installed (an optional extra: `pip install torch`; the test skips, saying so, without it).

The random programs of `strategies.programs` are run twice from the same source text: by uopgrad on
REFERENCE, and by PyTorch through `TorchT`, a thin wrapper that spells tinygrad's method names in torch.
Both in float64; the gradients for one Gaussian cotangent must agree to 1e-9 of their size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, currently_in_test_context, given, settings

from uopgrad import dtypes
from uopgrad_conformance.gradcheck import GradInput, GradProgram, run_env, vjp
from uopgrad_conformance.repro import execute
from uopgrad_conformance.strategies import fixed_programs, programs

torch = pytest.importorskip("torch", reason="the PyTorch oracle needs torch (an optional extra)")


class TorchT:
    """A torch tensor under tinygrad's method names (the subset the program generator writes)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def _w(self, x: object) -> Any:
        return x.t if isinstance(x, TorchT) else x

    def __add__(self, o: object) -> TorchT:
        return TorchT(self.t + self._w(o))

    def __radd__(self, o: object) -> TorchT:
        return TorchT(self._w(o) + self.t)

    def __sub__(self, o: object) -> TorchT:
        return TorchT(self.t - self._w(o))

    def __mul__(self, o: object) -> TorchT:
        return TorchT(self.t * self._w(o))

    def __truediv__(self, o: object) -> TorchT:
        return TorchT(self.t / self._w(o))

    def __neg__(self) -> TorchT:
        return TorchT(-self.t)

    def __lt__(self, o: object) -> TorchT:
        return TorchT(self.t < self._w(o))

    def __matmul__(self, o: TorchT) -> TorchT:
        return TorchT(self.t @ o.t)

    def __getattr__(self, name: str) -> Callable[..., TorchT]:
        simple = {
            "sin": torch.sin,
            "tanh": torch.tanh,
            "sigmoid": torch.sigmoid,
            "sqrt": torch.sqrt,
            "log2": torch.log2,
            "exp2": torch.exp2,
            "relu": torch.relu,
            "abs": torch.abs,
            "reciprocal": torch.reciprocal,
            "contiguous": lambda t: t,
            "realize": lambda t: t,
        }
        if name in simple:
            return lambda: TorchT(simple[name](self.t))
        raise AttributeError(name)

    def numpy(self) -> np.ndarray:
        return self.t.detach().numpy()

    def item(self) -> float:
        return float(self.t.item())

    def maximum(self, o: TorchT) -> TorchT:
        return TorchT(torch.maximum(self.t, self._w(o)))

    def where(self, a: TorchT, b: TorchT) -> TorchT:
        return TorchT(torch.where(self.t, a.t, b.t))

    def reshape(self, *s: int) -> TorchT:
        return TorchT(self.t.reshape(*s))

    def permute(self, *o: int) -> TorchT:
        return TorchT(self.t.permute(*o))

    def expand(self, *s: int) -> TorchT:
        return TorchT(self.t.expand(*s))

    def flip(self, axes: int | Sequence[int]) -> TorchT:
        return TorchT(self.t.flip([axes] if isinstance(axes, int) else list(axes)))

    def pad(self, pads: Sequence[tuple[int, int]]) -> TorchT:
        flat = [p for pair in reversed(pads) for p in pair]  # torch pads the last dimension first
        return TorchT(torch.nn.functional.pad(self.t, flat))

    def shrink(self, box: Sequence[tuple[int, int]]) -> TorchT:
        return TorchT(self.t[tuple(slice(a, b) for a, b in box)])

    def _reduce(self, f: Callable[..., Any], axes: int | Sequence[int], keepdim: bool) -> TorchT:
        return TorchT(f(self.t, dim=_axes(axes), keepdim=keepdim))

    def sum(self, axes: int | Sequence[int], keepdim: bool = False) -> TorchT:
        return self._reduce(torch.sum, axes, keepdim)

    def mean(self, axes: int | Sequence[int], keepdim: bool = False) -> TorchT:
        return self._reduce(torch.mean, axes, keepdim)

    def max(self, axes: int | Sequence[int], keepdim: bool = False) -> TorchT:
        return self._reduce(torch.amax, axes, keepdim)

    def prod(self, axes: int | Sequence[int], keepdim: bool = False) -> TorchT:
        t = self.t
        for a in sorted(_axes(axes), reverse=True):
            t = t.prod(a, keepdim=keepdim)
        return TorchT(t)


def _axes(axes: int | Sequence[int]) -> tuple[int, ...]:
    return (axes,) if isinstance(axes, int) else tuple(axes)


def _function(*args: object, **kwargs: object) -> Any:
    if args and callable(args[0]):
        return args[0]
    return lambda f: f


def _torch_grads(body: str, inputs: dict[str, np.ndarray], v: Sequence[np.ndarray]) -> list[np.ndarray]:
    leaves = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in inputs.items()}
    ns: dict[str, Any] = {n: TorchT(t) for n, t in leaves.items()}
    ns["function"] = _function
    out = execute(body, ns)
    outs = list(out) if isinstance(out, tuple) else [out]
    loss = sum((o.t * torch.tensor(w)).sum() for o, w in zip(outs, v))
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return [np.zeros(a.shape) if g is None else g.numpy() for g, a in zip(grads, inputs.values())]


def _cotangents(prog: Any) -> list[np.ndarray]:
    """One Gaussian cotangent per output, seeded by the program text (uopgrad and torch see the same)."""
    rng = np.random.default_rng(len(prog.body()))
    return [rng.standard_normal(prog.steps[k].shape) for k in prog.outputs]


def _check(prog: Any) -> None:
    ins = prog.inputs()
    gprog = GradProgram(tuple(GradInput(i.name, tuple(np.shape(i.value))) for i in ins), prog.body())
    v = _cotangents(prog)
    outs, grads = vjp(gprog, gprog.body, ins, run_env("REFERENCE", dtypes.float64), v, prog.read_first)
    finite = all(np.all(np.isfinite(o)) for o in outs)
    if currently_in_test_context():
        assume(finite)
    assert finite, prog.body()
    want = _torch_grads(prog.body(), {i.name: np.asarray(i.value, dtype=np.float64) for i in ins}, v)
    for i, g, w in zip(ins, grads, want):
        scale = max(float(np.max(np.abs(w), initial=0.0)), 1.0)
        assert float(np.max(np.abs(g - w), initial=0.0)) <= 1e-9 * scale, (i.name, prog.body(), g, w)


_KINDS = ("unary", "binary", "movement", "reduce", "matmul", "function", "realize")


def _repeatable(examples: int) -> settings:
    """Hypothesis settings for an oracle run: derandomised and without a database, so every run checks the
    same programs; no deadline, as a program's time grows with its size."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@_repeatable(40)
@given(prog=programs(dtypes.float64, kinds=_KINDS[:-1]))
def test_program_gradients_match_torch(prog: Any) -> None:
    _check(prog)


@_repeatable(20)
@given(prog=programs(dtypes.float64, kinds=_KINDS, read_first=True))
def test_realized_program_gradients_match_torch(prog: Any) -> None:
    _check(prog)


@pytest.mark.parametrize("k", [0, 1])
def test_fixed_program_gradients_match_torch(k: int) -> None:
    _check(fixed_programs(dtypes.float64)[k])
