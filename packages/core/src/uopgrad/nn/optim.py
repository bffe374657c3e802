"""Optimisers in tinygrad's layout: two update rules with switches, and the familiar names built from them.

- `LARS` (layer-wise trust ratio on SGD): `SGD` is LARS with a trust coefficient of 0 (weight decay added
  to the gradient first); `Muon` is LARS with Newton-Schulz orthogonalisation of the momentum and decay
  applied to the weights after it (the reference computes that decay and drops it; PyTorch applies it).
- `LAMB` (layer-wise trust ratio on Adam): `Adam` and `AdamW` are LAMB with the trust ratio fixed at 1
  (`adam=True`); LAMB's weight decay is decoupled, so AdamW is LAMB's decay and Adam has none, as the
  reference has it (`Adam(weight_decay=...)` here additionally gives PyTorch's L2 form).
- `OptimizerGroup` steps several optimisers (say one per parameter group) as one.

`step()` (only while `Tensor.training` is True, as in the reference: else a `TrainingError`, which is a
RuntimeError) assigns every update in place (the parameters keep their identity, so models and state dicts
keep seeing them) and realizes the parameters with the optimiser's own state in one run. To read the loss of
the same step, realize it in that run: `Tensor.realize(loss, *opt.schedule_step())`. The same run realizes the
buffers that layers updated since the last step (`buffer_updated`: BatchNorm's running statistics), whether or
not they were given to the optimiser: a loop in PyTorch's order (forward, loss, backward, step) keeps one
step of them pending, never a growing chain (the reference realizes only the buffers it was given).

Everything that changes from step to step (the learning rate `opt.lr`, LAMB's bias corrections `c1`, `c2`,
which the reference calls `b1_t`, `b2_t`) lives in a device buffer, never a constant of the graph: every
step runs the same kernels, compiled once. Change the learning rate with `opt.lr.assign(Tensor([new_lr]))`.
State is kept in float32 (`param_dtype`) whatever the parameters' dtype, so that half-precision
parameters get updates that don't overflow. With `fused=True` the parameters are concatenated into one
flat vector per step and the state is one flat buffer (the reference's FUSE_OPTIM environment default is
not read: pass fused).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence

from uopgrad.dtype import DType, dtypes, least_upper_dtype
from uopgrad.errors import GradientError, TrainingError
from uopgrad.tensor import Tensor
from uopgrad.tensor_args import concrete
from uopgrad.tensor_grad import no_grad

__all__ = ["LAMB", "LARS", "SGD", "Adam", "AdamW", "Muon", "Optimizer", "OptimizerGroup", "buffer_updated"]

Device = str | tuple[str, ...]

# buffers assigned by a layer since the last step, held weakly: a dropped model's buffers are not kept alive
_updated: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


def buffer_updated(*buffers: Tensor) -> None:
    """Mark buffers a layer assigned to (BatchNorm's running statistics): the next optimiser step realizes
    them in its run, as PyTorch users expect of a step, so their pending updates never pile up."""
    for b in buffers:
        _updated[id(b)] = b


def _take_updated() -> list[Tensor]:
    out = list(_updated.values())
    _updated.clear()
    return out


def _unique(ts: Sequence[Tensor]) -> list[Tensor]:
    return list({id(t): t for t in ts}.values())


def _scaled(x: Tensor, r: Tensor | float) -> Tensor:
    """x * r, where a trust ratio fixed at the float 1.0 (SGD, Adam) is no node: x * 1.0 is x, bit for bit
    (a NaN stays a NaN, -0.0 stays -0.0), and the update graph of every step is smaller by it."""
    return x if type(r) is float and r == 1.0 else x * r


class Optimizer:
    """The parameters (each once; those with requires_grad=None are switched on), the buffers (tensors given
    with requires_grad=False: not updated, but realized with every step) and the learning rate."""

    def __init__(
        self, params: Sequence[Tensor], lr: float, device: Device | None = None, fused: bool = False
    ) -> None:
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        self.params = _unique([p for p in params if p.requires_grad])
        if not self.params:
            raise ValueError("the optimiser got no parameters that require grad")
        self.buffers = _unique([p for p in params if not p.requires_grad])
        self.device: Device = device if device is not None else self.params[0].device
        self.param_dtype: DType = dtypes.float32
        self.fused = fused
        self.initial_lr = lr  # the rate as a float64, for the schedulers (nn.lr_scheduler)
        # the learning rate in at least float32, whatever the default float (half parameters included)
        self.lr = Tensor(
            [lr],
            device=self.device,
            requires_grad=False,
            dtype=least_upper_dtype(dtypes.default_float, dtypes.float32),
        )
        if self.fused:
            sizes = [concrete(p.numel(), "a fused optimiser") for p in self.params]
            self.pos_params = list(itertools.accumulate(sizes, initial=0))

    def _zeros(self, *shape: int, dtype: DType | None = None) -> Tensor:
        """A state buffer of zeros on the optimiser's device (in param_dtype unless given), realized now."""
        dt = dtype or self.param_dtype
        return Tensor.zeros(*shape, dtype=dt, device=self.device, requires_grad=False).contiguous().realize()

    def _new_optim_param(self) -> list[Tensor]:
        """Zero state per parameter (momentum, moments) in param_dtype; one flat buffer when fused."""
        if self.fused:
            return [self._zeros(self.pos_params[-1])]
        return [self._zeros(*(concrete(s, "an optimiser") for s in p.shape)) for p in self.params]

    def zero_grad(self) -> None:
        """Forget the gradients (the next backward sets fresh ones)."""
        for p in self.params:
            p.grad = None

    def _grads(self) -> list[Tensor]:
        missing = [k for k, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise GradientError(
                f"parameters {missing} have no gradient: call backward() before step(), and "
                "check that the loss depends on every parameter"
            )
        return [p.grad.detach() for p in self.params if p.grad is not None]

    def schedule_step(self) -> list[Tensor]:
        """Assign the updates (lazily); returns the tensors to realize: state, parameters and buffers.
        Only while `Tensor.training` is True, as in the reference: a step taken in eval mode is an error."""
        if not Tensor.training:
            raise TrainingError(
                "Tensor.training is False: an optimiser steps only in training mode; set "
                "Tensor.training = True, or step inside `with Tensor.train():`"
            )
        with no_grad():
            grads = self._grads()
            if self.fused:  # one flat vector of every parameter, and one of every gradient
                flat = Tensor.cat(*[p.detach().flatten() for p in self.params], dim=0)
                gflat = Tensor.cat(*[g.contiguous().flatten() for g in grads], dim=0)
                out, extra = self._step([flat], [gflat])
                pos = self.pos_params
                updates = [out[0][pos[i] : pos[i + 1]].reshape(p.shape) for i, p in enumerate(self.params)]
            else:
                updates, extra = self._step(self.params, grads)
            for p, up in zip(self.params, updates):
                up = up.to(p.device)  # a 0-d parameter's update is (1,), the learning rate's shape
                p.assign(p.detach() - (up.reshape(p.shape) if up.shape != p.shape else up))
        return _unique([*extra, *self.params, *self.buffers, *_take_updated()])

    def step(self) -> None:
        """Update every parameter in place, and realize."""
        Tensor.realize(*self.schedule_step())

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """(the update to subtract from each parameter, the state tensors to realize)."""
        raise NotImplementedError


class OptimizerGroup(Optimizer):
    """Several optimisers (e.g. one per parameter group) stepped as one."""

    def __init__(self, *optimizers: Optimizer) -> None:  # no super().__init__: the members hold the state
        self.optimizers = optimizers
        self.params = [p for o in optimizers for p in o.params]
        self.buffers = [b for o in optimizers for b in o.buffers]

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def zero_grad(self) -> None:
        """Every member's zero_grad."""
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        """Every member's schedule_step, in order."""
        return [t for o in self.optimizers for t in o.schedule_step()]


class LARS(Optimizer):
    """Layer-wise Adaptive Rate Scaling (arXiv:1708.03888): SGD whose step for each parameter is scaled by
    the trust ratio tcoef * |p| / (|g| + wd * |p|) (1 where either norm is 0; 1 everywhere when tcoef is 0).

    `classic` applies lr (and the ratio) before the momentum buffer, else after it; `pre_wd` adds wd * p to
    the gradient, else shrinks p by (1 - lr * wd) after the momentum (Muon's order); `ns_coefficients`
    orthogonalises the update by `ns_steps` Newton-Schulz iterations with those coefficients."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        ns_steps: int = 0,
        ns_coefficients: Sequence[float] | None = None,
        nesterov: bool = False,
        classic: bool = True,
        pre_wd: bool = True,
        tcoef: float = 0.001,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        if momentum < 0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum needs momentum > 0")
        super().__init__(params, lr, device, fused)
        self.momentum, self.wd, self.ns_steps = momentum, weight_decay, ns_steps
        self.ns_coefficients = tuple(ns_coefficients) if ns_coefficients else None
        self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
        self.b = self._new_optim_param() if momentum else []

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        out = []
        for i, (t, g) in enumerate(zip(params, grads)):
            w = t.detach() if self.tcoef != 0 or self.wd > 0 else t  # (only the ratio and the decay read it)
            r: Tensor | float = 1.0
            if self.tcoef != 0:
                r1, r2 = w.square().sum().sqrt(), g.square().sum().sqrt()
                r = (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)
            if self.pre_wd and self.wd > 0:
                g = g + w * self.wd
            if self.classic:
                g = _scaled(g, r) * self.lr
            if self.momentum:
                b = self.b[i].assign((self.b[i] * self.momentum + g).cast(self.b[i].dtype))  # zero at first
                g = g + b * self.momentum if self.nesterov else b
            if self.ns_coefficients:
                g2 = g.reshape(g.shape[0], -1)
                g = g2.newton_schulz(self.ns_steps, self.ns_coefficients).reshape(g.shape)
            if not self.classic:
                g = _scaled(g, r) * self.lr
            if not self.pre_wd and self.wd > 0:  # decay after the momentum: p - up == p * (1 - lr * wd) - ...
                g = g + w * self.lr * self.wd
            out.append(g.cast(t.dtype))
        return out, self.b


class SGD(LARS):
    """p -= lr * (momentum buffer, or with nesterov g + momentum * buffer), g = grad + weight_decay * p;
    `classic` applies lr before the buffer (b = m * b + lr * g), as the original momentum method."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        classic: bool = False,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(
            params,
            lr,
            momentum,
            weight_decay,
            0,
            None,
            nesterov,
            classic=classic,
            pre_wd=True,
            tcoef=0.0,
            device=device,
            fused=fused,
        )


class Muon(LARS):
    """SGD with Nesterov momentum whose update is orthogonalised by Newton-Schulz iterations, and weight decay
    applied to the weights after the momentum (https://kellerjordan.github.io/posts/muon/)."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.95,
        weight_decay: float = 0.1,
        ns_steps: int = 5,
        ns_coefficients: Sequence[float] = (3.4445, -4.775, 2.0315),
        nesterov: bool = True,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        if fused:
            raise ValueError("Muon orthogonalises each parameter's update: it can't be fused")
        super().__init__(
            params,
            lr,
            momentum,
            weight_decay,
            ns_steps,
            ns_coefficients,
            nesterov,
            classic=False,
            pre_wd=False,
            tcoef=0.0,
            device=device,
            fused=False,
        )


class LAMB(Optimizer):
    """LAMB (arXiv:1904.00962): the Adam step plus decoupled weight decay, up = m̂ / (sqrt(v̂) + eps) + wd * p,
    scaled by the trust ratio |p| / |up| (1 where either is 0), or by 1 when `adam`."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        if weight_decay < 0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, lr, device, fused)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        self.l2 = 0.0  # PyTorch Adam's weight decay: added to the gradient (see Adam)
        # the bias corrections 1 - b ** t, on the device so that a captured step updates them; kept as
        # c <- (1 - b) + b * c, whose float32 error stays near 1e-7 of c (b ** t itself, close to 1 in
        # float32, would lose 1e-5 of 1 - b ** t: the reference keeps b ** t and tolerates that)
        self.c1, self.c2 = self._zeros(1, dtype=dtypes.float32), self._zeros(1, dtype=dtypes.float32)
        self.m, self.v = self._new_optim_param(), self._new_optim_param()

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        out = []
        self.c1.assign(self.c1 * self.b1 + (1.0 - self.b1))
        self.c2.assign(self.c2 * self.b2 + (1.0 - self.b2))
        for i, (t, g) in enumerate(zip(params, grads)):
            m, v = self.m[i], self.v[i]
            if self.l2:
                g = g + t.detach() * self.l2
            g = g.contiguous().to(m.device) if g.device != m.device else g  # state moved (e.g. to the host)
            m.assign((m * self.b1 + g * (1.0 - self.b1)).cast(m.dtype))
            v.assign((v * self.b2 + g * g * (1.0 - self.b2)).cast(v.dtype))
            m_hat, v_hat = m / self.c1.to(m.device), v / self.c2.to(v.device)
            up = (m_hat / (v_hat.sqrt() + self.eps)).to(t.device) + t.detach() * self.wd
            r: Tensor | float = 1.0
            if not self.adam:
                r1, r2 = t.detach().square().sum().sqrt(), up.square().sum().sqrt()
                r = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
            out.append((_scaled(self.lr.to(t.device), r) * up).cast(t.dtype))
        return out, [self.c1, self.c2, *self.m, *self.v]

    @property
    def b1_t(self) -> Tensor:
        """The reference's name for the first bias-correction state (move it with `to_`); it holds
        1 - b1 ** t here, not b1 ** t."""
        return self.c1

    @property
    def b2_t(self) -> Tensor:
        """The second bias-correction state, 1 - b2 ** t (see b1_t)."""
        return self.c2


class AdamW(LAMB):
    """Adam with decoupled weight decay: p -= lr * (m̂ / (sqrt(v̂) + eps) + weight_decay * p), as PyTorch."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)


class Adam(LAMB):
    """Adam with bias correction. weight_decay (not in the reference, which has none) adds weight_decay * p to
    the gradient: PyTorch's L2 form, for the decoupled form use AdamW."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        device: Device | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True, device=device, fused=fused)
        self.l2 = weight_decay
