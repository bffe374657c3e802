"""Backends and the device registry (layer 13): the `Backend` base class and `Device`.

Backends are plugins: each contributes one entry point in the `uopgrad.backends` group, read only when a
device is first named, so `import uopgrad` imports no backend. REFERENCE ships with core and is also found
without an installed entry point (a source checkout on PYTHONPATH).
"""
from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uopgrad.config import getenv_str

if TYPE_CHECKING:
    import numpy as np

    from uopgrad.uop import UOp

__all__ = ["Backend", "Device", "DeviceRegistry", "ENTRY_POINT_GROUP", "PREFERENCE"]

ENTRY_POINT_GROUP = "uopgrad.backends"
# Device.DEFAULT is the first installed of these, unless $UOPGRAD_DEVICE names one
PREFERENCE = ("CPU", "CL", "CUDA", "REFERENCE")
# backends that ship inside core: found even when core is used from a source tree without being installed
_BUILTIN = {"REFERENCE": "uopgrad.backends.reference:ReferenceBackend"}


class Backend:
    """One logical device of a backend (e.g. "REFERENCE" or "REFERENCE:1").

    The Tensor layer uses three methods: `copyin`/`copyout` move host data into and out of a BUFFER, and
    `realize` runs a SINK of STOREs into BUFFERs (and any other effects in it), after which those buffers
    hold the stored values. Buffers are BUFFER UOps; a backend keeps their storage in a weak map."""

    def __init__(self, device: str) -> None:
        self.name = device

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def copyin(self, buf: UOp, data: np.ndarray) -> None:
        """Fill `buf` with `data` (flattened, in C order, already of the buffer's dtype)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyin")

    def copyout(self, buf: UOp) -> np.ndarray:
        """The contents of `buf` as a flat host array (a copy)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyout")

    def realize(self, sink: UOp) -> None:
        """Run every effect in `sink` (STOREs into BUFFERs, custom-kernel CALLs, ...)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement realize")


@dataclass(frozen=True)
class _Plugin:
    name: str   # device base name, e.g. "CPU"
    value: str  # "module:attr" of the Backend subclass
    dist: str   # the distribution that provides it, for error messages


class DeviceRegistry:
    """The device registry: `Device["CPU:1"]` gives the backend object, `Device.DEFAULT` the default name."""

    def __init__(self) -> None:
        self._plugins: dict[str, _Plugin] | None = None
        self._classes: dict[str, type[Backend]] = {}
        self._instances: dict[str, Backend] = {}
        self._default: str | None = None

    def _discover(self) -> dict[str, _Plugin]:
        if self._plugins is None:
            plugins: dict[str, _Plugin] = {}
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
                new = _Plugin(ep.name.upper(), ep.value, dist)
                old = plugins.get(new.name)
                if old is not None and old.value != new.value:
                    raise RuntimeError(f"backend {new.name} is provided twice: by {old.dist} ({old.value}) "
                                       f"and by {new.dist} ({new.value}); uninstall one of them")
                plugins[new.name] = new
            for name, value in _BUILTIN.items():
                plugins.setdefault(name, _Plugin(name, value, "uopgrad"))
            self._plugins = plugins
        return self._plugins

    def installed(self) -> list[str]:
        """Names of the installed backends (preferred ones first)."""
        names = list(self._discover())
        return sorted(names, key=lambda n: (PREFERENCE.index(n) if n in PREFERENCE else len(PREFERENCE), n))

    @staticmethod
    def canonicalize(name: str) -> str:
        """Upper-case the backend part; ":0" is the backend itself, other suffixes are separate devices."""
        base, sep, index = name.partition(":")
        if not base:
            raise ValueError(f"{name!r} is not a device name")
        return base.upper() if not sep or index in ("", "0") else f"{base.upper()}:{index}"

    @property
    def DEFAULT(self) -> str:  # noqa: N802  (tinygrad's spelling)
        """$UOPGRAD_DEVICE if set, else the first installed of CPU, CL, CUDA, REFERENCE."""
        if self._default is None:
            env = getenv_str("UOPGRAD_DEVICE")
            if env:
                self._default = self.canonicalize(env)
            else:
                installed = self._discover()
                self._default = next((n for n in PREFERENCE if n in installed), None) or self.installed()[0]
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self._default = self.canonicalize(name)

    def _load(self, base: str) -> type[Backend]:
        if base in self._classes:
            return self._classes[base]
        plugins = self._discover()
        if base not in plugins:
            installed = ", ".join(self.installed())
            raise RuntimeError(f"unknown device {base!r}: the installed backends are {installed}")
        plugin = plugins[base]
        module_name, _, attr = plugin.value.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as e:  # a broken plugin must not look like a crash of uopgrad itself
            raise RuntimeError(f"backend {base} (entry point {plugin.value!r} from {plugin.dist}) failed to "
                               f"load: {type(e).__name__}: {e}") from e
        if not (isinstance(obj, type) and issubclass(obj, Backend)):
            raise RuntimeError(f"backend {base} (entry point {plugin.value!r} from {plugin.dist}) is "
                               f"{obj!r}, not a subclass of uopgrad.backend.Backend")
        self._classes[base] = obj
        return obj

    def __getitem__(self, name: str) -> Backend:
        device = self.canonicalize(name)
        if device not in self._instances:
            self._instances[device] = self._load(device.partition(":")[0])(device)
        return self._instances[device]

    def __contains__(self, name: str) -> bool:
        return self.canonicalize(name).partition(":")[0] in self._discover()

    def __repr__(self) -> str:
        return f"<Device registry: {', '.join(self.installed())}>"


Device = DeviceRegistry()
