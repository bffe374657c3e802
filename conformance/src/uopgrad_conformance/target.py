"""The backend under test, as the suite sees it: its name, what it claims, and where each part of a check
runs. Backends are reached only through `uopgrad.Device` (the `uopgrad.backends` entry points)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from uopgrad import Device, DType, Tensor, dtypes
from uopgrad.backend import Backend
from uopgrad_conformance.numerics import ALL_DTYPES, host_dtype, name

__all__ = ["REFERENCE", "Target", "no_second_device"]

REFERENCE = "REFERENCE"


@dataclass(frozen=True)
class Target:
    """The device a run checks. `second` is another device of the same backend (for COPY); finite
    differences run in float64 on `fd_device`: the backend itself when it claims float64, else REFERENCE."""

    name: str
    claimed: frozenset[DType]

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # noqa: ANN401  (hypothesis' pretty printer)
        p.text(repr(self))

    def __repr__(self) -> str:
        return f"Target({self.name})"

    @staticmethod
    def load(name: str) -> Target:
        """Resolve `name` through the registry (raises RuntimeError naming the installed backends)."""
        device = Device.canonicalize(name)
        backend: Backend = Device[device]
        claimed = frozenset(dt for dt in ALL_DTYPES if dt in backend.capabilities.dtypes)
        return Target(device, claimed)

    @property
    def backend(self) -> Backend:
        """The backend object of this device."""
        return Device[self.name]

    @property
    def second(self) -> str:
        """A second device of the same backend: `NAME:1` (or `NAME:2` when NAME is itself `X:1`)."""
        base, _, index = self.name.partition(":")
        return f"{base}:{int(index or 0) + 1}"

    @property
    def fd_device(self) -> str:
        """Where float64 finite differences run."""
        return self.name if dtypes.float64 in self.claimed else REFERENCE

    @property
    def is_reference(self) -> bool:
        """True when the backend under test is REFERENCE itself (comparisons with it are then trivial)."""
        return self.name.partition(":")[0] == REFERENCE

    def claims(self, dt: DType) -> bool:
        """Whether the backend declares `dt` in its capabilities."""
        return dt in self.claimed

    def not_claimed(self, *dts: DType) -> str | None:
        """The skip reason when the backend does not claim one of `dts`, else None."""
        missing = [dt for dt in dts if dt not in self.claimed]
        if not missing:
            return None
        names = ", ".join(name(d) for d in missing)
        return f"not claimed: {self.name} does not declare {names} in its capabilities"


_SECOND: dict[str, str | None] = {}  # device -> why its second device is unusable (None: it works)


def no_second_device(target: Target) -> str | None:
    """The skip reason when the backend exposes no second device (`NAME:1`) to shard over, else None: the
    device is opened and one value copied to it and back, once per run."""
    if target.name not in _SECOND:
        try:
            back = Tensor([1.0, 2.0], device=target.name).to(target.second).to(target.name).numpy()
            _SECOND[target.name] = None if back.tolist() == [1.0, 2.0] else f"a copy gave {back.tolist()}"
        except Exception as e:  # the backend has one device: it says so in its own words
            _SECOND[target.name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    why = _SECOND[target.name]
    if why is None:
        return None
    return f"not claimed: {target.name} exposes no second device {target.second} ({why})"


def tensor(arr: np.ndarray, dt: DType, device: str, requires_grad: bool | None = None) -> Tensor:
    """A tensor of `dt` on `device` holding `arr` (given in `dt`'s host dtype)."""
    return Tensor(np.asarray(arr, dtype=host_dtype(dt)), device=device, dtype=dt, requires_grad=requires_grad)
