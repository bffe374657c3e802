"""Optimisers (tinygrad's layout, PyTorch's update rules): SGD with momentum, Nesterov and weight decay;
Adam; AdamW.

`step()` assigns every update in place (the parameters keep their identity, so models and state dicts
keep seeing them) and realizes the parameters with the optimiser's own state in one run. To read the loss
of the same step, realize it in that run: `Tensor.realize(loss, *opt.schedule_step())`.

Everything that changes from step to step (the learning rate `opt.lr`, Adam's bias corrections) is a
0-d tensor on the device, never a constant of the graph: every step then runs the same kernels, compiled
once. Change the learning rate with `opt.lr.assign(Tensor(np.asarray(new_lr, np.float32)))`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uopgrad.errors import GradientError
from uopgrad.tensor import Tensor
from uopgrad.tensor_args import concrete
from uopgrad.tensor_nn import no_grad

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]


class Optimizer:
    """The parameters (those that don't say requires_grad=False; each once) and the learning rate."""

    def __init__(self, params: Sequence[Tensor], lr: float) -> None:
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        unique: dict[int, Tensor] = {}
        for p in params:
            if p.requires_grad:
                unique.setdefault(id(p), p)
        self.params = list(unique.values())
        if not self.params:
            raise ValueError("the optimiser got no parameters that require grad")
        self.buffers: list[Tensor] = []  # the optimiser's own state, realized with the parameters
        self.lr = self._scalar(lr)

    def _value(self, value: float) -> Tensor:
        """A 0-d buffer holding `value` on the parameters' device (a buffer, unlike a constant, leaves the
        kernels that read it unchanged when it changes)."""
        p = self.params[0]
        return Tensor(np.asarray(value, np.float32), device=p.device, dtype=p.dtype, requires_grad=False)

    def _scalar(self, value: float) -> Tensor:
        """A 0-d state buffer, realized with the parameters."""
        t = self._value(value)
        self.buffers.append(t)
        return t

    def _state(self) -> list[Tensor]:
        """One zero buffer per parameter (momentum, moments)."""
        bufs = [Tensor(np.zeros(tuple(concrete(s, "an optimiser") for s in p.shape), np.float32),
                       device=p.device, dtype=p.dtype, requires_grad=False) for p in self.params]
        self.buffers.extend(bufs)
        return bufs

    def zero_grad(self) -> None:
        """Forget the gradients (the next backward sets fresh ones)."""
        for p in self.params:
            p.grad = None

    def _grads(self) -> list[Tensor]:
        missing = [k for k, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise GradientError(f"parameters {missing} have no gradient: call backward() before step(), and "
                               "check that the loss depends on every parameter")
        return [p.grad.detach() for p in self.params if p.grad is not None]

    def schedule_step(self) -> list[Tensor]:
        """Assign the updates (lazily); returns the tensors to realize: parameters and state."""
        with no_grad():
            self._update(self._grads())
        return [*self.params, *self.buffers]

    def step(self) -> None:
        """Update every parameter in place, and realize."""
        Tensor.realize(*self.schedule_step())

    def _update(self, grads: list[Tensor]) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """p -= lr * (momentum buffer, or with nesterov g + momentum * buffer), g = grad + weight_decay * p."""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.b = self._state() if momentum else []

    def _update(self, grads: list[Tensor]) -> None:
        for k, (p, g) in enumerate(zip(self.params, grads)):
            p0 = p.detach()
            if self.weight_decay:
                g = g + p0 * self.weight_decay
            if self.momentum:
                b = self.b[k].assign(self.b[k] * self.momentum + g)  # a zero buffer: the first step is g
                g = g + b * self.momentum if self.nesterov else b
            p.assign(p0 - g * self.lr)


class Adam(Optimizer):
    """Adam with bias correction; weight_decay adds weight_decay * p to the gradient (L2, as PyTorch)."""

    decoupled = False

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
        self.m, self.v = self._state(), self._state()
        self.t = 0  # steps taken
        # the bias corrections 1 - b ** t, kept on the device so that a captured step (TinyJit) updates them
        self.c1, self.c2 = self._scalar(0.0), self._scalar(0.0)

    def _update(self, grads: list[Tensor]) -> None:
        self.t += 1
        # 1 - b ** t as d <- (1 - b) + b * d: float32 keeps its relative error near 1e-7 (b ** t itself, close
        # to 1 in float32, would lose 1e-5 of 1 - b ** t)
        c1 = self.c1.assign(self.c1 * self.b1 + (1 - self.b1))
        c2 = self.c2.assign(self.c2 * self.b2 + (1 - self.b2))
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            p0 = p.detach()
            if self.weight_decay and not self.decoupled:
                g = g + p0 * self.weight_decay
            if self.weight_decay and self.decoupled:
                p0 = p0 * (1 - self.lr * self.weight_decay)
            m.assign(m * self.b1 + g * (1 - self.b1))
            v.assign(v * self.b2 + g * g * (1 - self.b2))
            p.assign(p0 - (m / c1) * self.lr / ((v / c2).sqrt() + self.eps))


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step (as PyTorch)."""

    decoupled = True

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay)
