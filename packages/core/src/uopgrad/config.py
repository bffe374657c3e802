"""Every environment flag uopgrad reads, in one place (layer 1), plus `Context` to override them in code."""
from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator

from uopgrad.errors import ConfigError

__all__ = ["ALLOW_DEVICE_USAGE", "KERNEL_OPS", "Context", "ContextVar", "DEBUG", "TRACK_MATCH_STATS",
           "VERIFY", "getenv", "getenv_str"]


def getenv(key: str, default: int = 0) -> int:
    """Read an integer environment flag (empty or missing -> default)."""
    value = os.environ.get(key, "")
    return int(value) if value else default


def getenv_str(key: str, default: str = "") -> str:
    """Read a string environment flag."""
    return os.environ.get(key, default)


class ContextVar:
    """An integer flag initialised from the environment variable `env` (default: its name) and overridable
    with `Context` under its name, e.g. `VERIFY`, or under the environment variable, `UOPGRAD_VERIFY`.

    An override holds in the thread (and asyncio task) that made it, like PyTorch's grad mode: tracing a
    `function` in one thread (ALLOW_DEVICE_USAGE=0) must not forbid realize() in the others."""

    _registry: dict[str, ContextVar] = {}

    def __init__(self, name: str, default: int, env: str | None = None) -> None:
        self.key = env or name
        initial: int = getenv(self.key, default)
        self._var = contextvars.ContextVar(f"uopgrad.{self.key}", default=initial)
        self.get: Callable[[], int] = self._var.get  # the value, as a builtin call (for hot loops)
        ContextVar._registry[name] = ContextVar._registry[self.key] = self

    @property
    def value(self) -> int:
        """The flag's value in the current thread."""
        return self._var.get()

    @value.setter
    def value(self, v: int) -> None:
        self._var.set(v)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return self.value

    def __ge__(self, other: int) -> bool:
        return self.value >= other

    def __gt__(self, other: int) -> bool:
        return self.value > other


@contextlib.contextmanager
def Context(**flags: int) -> Iterator[None]:
    """Temporarily set flags in this thread, e.g. `with Context(VERIFY=1): ...`; restores them even on
    error. Other threads keep their own values."""
    unknown = [k for k in flags if k not in ContextVar._registry]
    if unknown:
        raise ConfigError(f"unknown uopgrad flag(s) {unknown}; known: {sorted(ContextVar._registry)}")
    old = {k: ContextVar._registry[k].value for k in flags}  # an alias given twice is restored in order
    try:
        for k, v in flags.items():
            ContextVar._registry[k].value = v
        yield
    finally:
        for k, v in old.items():
            ContextVar._registry[k].value = v


DEBUG = ContextVar("DEBUG", 0)                            # >0 prints what the pipeline does
VERIFY = ContextVar("VERIFY", 0, env="UOPGRAD_VERIFY")    # run verify() after every named pass
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 0)    # count rule hits per PatternMatcher row
ALLOW_DEVICE_USAGE = ContextVar("ALLOW_DEVICE_USAGE", 1)  # 0 while tracing a function: realize is an error
# the most ops one scheduled kernel's expression may hold before the scheduler cuts it (0: never cut)
KERNEL_OPS = ContextVar("KERNEL_OPS", 4096, env="UOPGRAD_KERNEL_OPS")
