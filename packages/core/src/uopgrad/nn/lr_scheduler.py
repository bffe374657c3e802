"""Learning-rate schedulers (layer 17, beside the optimisers) with PyTorch's names, arguments and values
(torch.optim.lr_scheduler; the reference keeps a few in extra/lr_scheduler.py).

A scheduler counts its steps on the host (`last_epoch`) and writes each new rate into the optimiser's `lr`
buffer (`opt.lr.assign(...)`): the rate is a device buffer the step kernels read, never a constant of their
graph, so a step compiled once (or captured by TinyJit) runs with every new rate without compiling again.
As in PyTorch, building a scheduler sets the rate of step 0, and `step()` (once per epoch or per batch, after
`opt.step()`) moves to the next. Rates are computed in float64 from the closed forms PyTorch documents, then
stored in the optimiser's lr dtype (float32).

| scheduler | lr at step e (base: the optimiser's lr when the scheduler was built) |
|---|---|
| `LambdaLR(opt, f)` | base * f(e) |
| `StepLR(opt, step_size, gamma=0.1)` | base * gamma ** (e // step_size) |
| `MultiStepLR(opt, milestones, gamma=0.1)` | base * gamma ** (the number of milestones <= e) |
| `ExponentialLR(opt, gamma)` | base * gamma ** e |
| `LinearLR(opt, start_factor=1/3, end_factor=1, total_iters=5)` | base * (start -> end factor, linear) |
| `CosineAnnealingLR(opt, T_max, eta_min=0)` | eta_min + (base - eta_min) * (1 + cos(pi * e / T_max)) / 2 |
| `OneCycleLR(opt, max_lr, total_steps, ...)` | max_lr / div_factor up to max_lr, then down (see the class) |
| `ReduceLROnPlateau(opt, mode="min", factor=0.1, ...)` | lr * factor once `step(metric)` stalls |
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from uopgrad.errors import ArgumentError
from uopgrad.nn.optim import Optimizer, OptimizerGroup
from uopgrad.tensor import Tensor

__all__ = [
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LR_Scheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
    "StepLR",
]


def _members(opt: Optimizer) -> list[Optimizer]:
    """The optimisers whose lr a scheduler sets: each member of a group, or the one."""
    return [m for o in opt.optimizers for m in _members(o)] if isinstance(opt, OptimizerGroup) else [opt]


def _current_lr(opt: Optimizer) -> float:
    """The optimiser's rate: the float it was built with, unless its lr buffer was set to another since
    (the buffer holds float32, so the float keeps a schedule's values those of PyTorch)."""
    now = float(opt.lr.numpy()[0])
    return opt.initial_lr if math.isclose(now, opt.initial_lr, rel_tol=1e-6) else now


class LRScheduler:
    """The base: subclasses give `_lr_at(base, e)`, the rate of step e for a base rate."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        self._opts = _members(optimizer)
        self.base_lrs = [_current_lr(o) for o in self._opts]
        self.last_epoch = last_epoch
        self._last_lr = list(self.base_lrs)
        self.step()  # PyTorch's constructor sets the rate of the first step

    def _lr_at(self, base: float, epoch: int) -> float:
        """The rate of step `epoch` for the base rate `base`."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The rates last set, one per optimiser (float64, before the cast to the lr buffer's dtype)."""
        return list(self._last_lr)

    def _set(self, lrs: Sequence[float]) -> None:
        for o, lr in zip(self._opts, lrs):
            o.lr.assign(Tensor([lr], device=o.lr.device, dtype=o.lr.dtype, requires_grad=False)).realize()
        self._last_lr = list(lrs)

    def step(self) -> None:
        """Move to the next step and set its rate."""
        self.last_epoch += 1
        self._set([self._lr_at(b, self.last_epoch) for b in self.base_lrs])


LR_Scheduler = LRScheduler  # the reference's name


class LambdaLR(LRScheduler):
    """base * lr_lambda(e)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float], last_epoch: int = -1) -> None:
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        return base * self.lr_lambda(epoch)


class StepLR(LRScheduler):
    """base * gamma ** (e // step_size)."""

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        if step_size < 1:
            raise ArgumentError(f"StepLR step_size must be at least 1, not {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        return base * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """base * gamma ** (the number of milestones reached)."""

    def __init__(
        self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        return base * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """base * gamma ** e."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        return base * self.gamma**epoch


class LinearLR(LRScheduler):
    """base times a factor going linearly from start_factor to end_factor over total_iters steps (a warmup
    with the defaults of PyTorch)."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ArgumentError(
                "LinearLR needs 0 < start_factor <= 1 and 0 <= end_factor <= 1, "
                f"not {start_factor}, {end_factor}"
            )
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        frac = min(self.total_iters, epoch) / self.total_iters
        return base * (self.start_factor + (self.end_factor - self.start_factor) * frac)


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base - eta_min) * (1 + cos(pi * e / T_max)) / 2 (past T_max the cosine goes on)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class OneCycleLR(LRScheduler):
    """The 1cycle policy (arXiv:1708.07120) as PyTorch's OneCycleLR: from max_lr / div_factor up to max_lr
    over the first pct_start of total_steps, then down to the start / final_div_factor (three_phase: back to
    the start first). The optimiser's own lr is ignored, as in PyTorch. Momentum is not cycled (the
    optimisers keep it as a constant of the step): cycle_momentum=True is an error."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = False,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ArgumentError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0 or not 0 <= pct_start <= 1 or anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(
                f"OneCycleLR needs total_steps > 0, pct_start in [0, 1] and anneal_strategy 'cos' or "
                f"'linear', not {total_steps}, {pct_start}, {anneal_strategy!r}"
            )
        if cycle_momentum:
            raise ArgumentError("OneCycleLR(cycle_momentum=True) is not supported: pass cycle_momentum=False")
        self.total_steps, self.cos = total_steps, anneal_strategy == "cos"
        start = max_lr / div_factor
        low = start / final_div_factor
        up = float(pct_start * total_steps) - 1
        # (the step each phase ends at, its first rate, its last rate)
        self.phases = (
            [(up, start, max_lr), (2 * up + 1 - 1, max_lr, start), (total_steps - 1.0, start, low)]
            if three_phase
            else [(up, start, max_lr), (total_steps - 1.0, max_lr, low)]
        )
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base: float, epoch: int) -> float:
        if epoch > self.total_steps:
            raise ArgumentError(f"OneCycleLR stepped {epoch} times, past total_steps={self.total_steps}")
        begin, k = 0.0, 0
        while k < len(self.phases) - 1 and epoch > self.phases[k][0]:  # the phase this step is in
            begin, k = self.phases[k][0], k + 1
        end, a, b = self.phases[k]
        pct = (epoch - begin) / (end - begin)
        return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1) if self.cos else a + (b - a) * pct


class ReduceLROnPlateau:
    """Multiply the rate by factor when `step(metric)` has seen no improvement (by more than threshold,
    relative or absolute) for more than patience steps, then wait cooldown steps; never below min_lr, and
    only by more than eps (PyTorch's arguments and rules)."""

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0.0,
        eps: float = 1e-8,
    ) -> None:
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs") or factor >= 1.0:
            raise ArgumentError(
                f"ReduceLROnPlateau needs mode 'min'/'max', threshold_mode 'rel'/'abs' and factor < 1, not "
                f"{mode!r}, {threshold_mode!r}, {factor}"
            )
        self.optimizer, self._opts = optimizer, _members(optimizer)
        self.mode, self.factor, self.patience, self.threshold = mode, factor, patience, threshold
        self.threshold_mode, self.cooldown, self.min_lr, self.eps = threshold_mode, cooldown, min_lr, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0
        self._last_lr = [_current_lr(o) for o in self._opts]

    def _better(self, a: float) -> bool:
        t = self.threshold
        if self.mode == "min":
            return a < (self.best * (1 - t) if self.threshold_mode == "rel" else self.best - t)
        return a > (self.best * (1 + t) if self.threshold_mode == "rel" else self.best + t)

    def get_last_lr(self) -> list[float]:
        """The rates last set, one per optimiser."""
        return list(self._last_lr)

    def step(self, metric: float | Tensor) -> None:
        """Record this step's metric (a float, or a one-element Tensor) and lower the rate if it stalled."""
        current = float(metric.item()) if isinstance(metric, Tensor) else float(metric)
        self.last_epoch += 1
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for k, o in enumerate(self._opts):
                new = max(self._last_lr[k] * self.factor, self.min_lr)
                if self._last_lr[k] - new > self.eps:
                    o.lr.assign(
                        Tensor([new], device=o.lr.device, dtype=o.lr.dtype, requires_grad=False)
                    ).realize()
                    self._last_lr[k] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
