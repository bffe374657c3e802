"""Gradient mode (layer 15, below tensor.py and its mixins): `no_grad` and `grad_enabled`, which every op's
result and every `[]=` consult to decide whether a gradient flows back through it.
"""

from __future__ import annotations

from contextlib import ContextDecorator
from typing import ClassVar

__all__ = ["grad_enabled", "no_grad"]


class _GradMode:
    enabled: ClassVar[bool] = True


def grad_enabled() -> bool:
    """False inside `no_grad`: results of operations then carry no gradient."""
    return _GradMode.enabled


class no_grad(ContextDecorator):
    """Context manager (and decorator): the results of operations inside carry no gradient (they are
    detached and do not require grad), e.g. for evaluation and for optimiser updates."""

    def __enter__(self) -> None:
        self.prev, _GradMode.enabled = _GradMode.enabled, False

    def __exit__(self, *exc: object) -> None:
        _GradMode.enabled = self.prev
