"""Reading the gradients of a first backward one by one, as a PyTorch user does (`[p.grad.numpy() for p in
params]`): the first read builds the kernels of the other parameters' gradients with its own, in one
compiler batch, so the later reads build nothing; a known structure builds nothing ahead; a gradient whose
kernels fail to build fails its own read, not the first one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from uopgrad import Device, Tensor, UOp
from uopgrad.backend import CompiledBackend
from uopgrad.errors import CompileError

DEV = "CPU"
# shapes no other test uses: the gradient structure is new to this process (its gradient template a miss)
X, W1, B1, W2 = (
    np.random.default_rng(k).standard_normal(s).astype(np.float32)
    for k, s in enumerate([(3, 11), (11, 17), (17,), (17, 9)])
)


def builds() -> int:
    """Kernels this process has built so far on CPU (compiled, or read from the disk cache)."""
    stats = Device[DEV].compiler.stats  # type: ignore[attr-defined]
    return int(stats["compiled"] + stats["disk_hit"])


def model(lib: Callable[..., object], x: object, w1: object, b1: object, w2: object) -> object:
    h = (x @ w1 + b1).relu()  # type: ignore[operator]
    return (h @ w2).log_softmax(-1).mean()  # type: ignore[operator]


def torch_grads() -> list[np.ndarray]:
    ps = [torch.tensor(a, requires_grad=True) for a in (W1, B1, W2)]
    model(torch, torch.tensor(X), *ps).backward()  # type: ignore[union-attr]
    return [p.grad.numpy() for p in ps]  # type: ignore[union-attr]


def ours(scale: float = 1.0) -> tuple[Tensor, list[Tensor]]:
    ps = [Tensor(a * scale, device=DEV, requires_grad=True) for a in (W1, B1, W2)]
    loss = model(Tensor, Tensor(X, device=DEV), *ps)
    assert isinstance(loss, Tensor)
    return loss, ps


def test_the_first_read_builds_the_other_gradients_kernels() -> None:
    loss, ps = ours()
    print(loss.item())  # the user's order: the loss read first, then backward
    loss.backward()
    before = builds()
    first = ps[0].grad.numpy()  # type: ignore[union-attr]
    assert builds() > before
    got = [first]
    for p in ps[1:]:
        at = builds()
        got.append(p.grad.numpy())  # type: ignore[union-attr]
        assert builds() == at, "a later read built kernels: they were not built with the first"
    for a, b in zip(got, torch_grads()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    # the same structure again (a second step): derived from the template, nothing is built ahead
    loss2, ps2 = ours(0.5)
    print(loss2.item())
    loss2.backward()
    assert all(p.grad._siblings is None for p in ps2)  # type: ignore[union-attr]


def test_a_gradient_whose_kernels_fail_fails_its_own_read(monkeypatch: pytest.MonkeyPatch) -> None:
    poison: set[object] = set()  # the bodies only the other gradients have: their build fails
    with_ahead = CompiledBackend._prepare

    def spied(self: CompiledBackend, calls: list[UOp], ahead: list[UOp]) -> object:
        poison.update({c.src[0] for c in ahead} - {c.src[0] for c in calls})
        return with_ahead(self, calls, ahead)

    prepare = CompiledBackend.prepare

    def failing(self: CompiledBackend, calls: list[UOp]) -> object:
        if any(c.src[0] in poison for c in calls):
            raise CompileError("cc", "injected: this kernel does not build", "")
        return prepare(self, calls)

    monkeypatch.setattr(CompiledBackend, "_prepare", spied)
    monkeypatch.setattr(CompiledBackend, "prepare", failing)
    loss, ps = ours(0.25)
    (loss * 3.0).backward()  # a structure of its own (not the other test's)
    first = ps[0].grad.numpy()  # type: ignore[union-attr]
    assert poison, "the other gradients' kernels were asked for"
    np.testing.assert_allclose(first, torch_grads_scaled(0.25)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(CompileError, match="injected"):
        for p in ps[1:]:
            p.grad.numpy()  # type: ignore[union-attr]


def torch_grads_scaled(scale: float) -> list[np.ndarray]:
    ps = [torch.tensor(a * scale, requires_grad=True) for a in (W1, B1, W2)]
    (model(torch, torch.tensor(X), *ps) * 3.0).backward()  # type: ignore[operator]
    return [p.grad.numpy() for p in ps]  # type: ignore[union-attr]
