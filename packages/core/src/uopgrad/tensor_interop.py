"""numpy and DLPack interop (a mixin of Tensor, layer 15 with tensor.py): `np.asarray(t)`,
`torch.from_dlpack(t)`, `Tensor.from_dlpack(x)`, and `host_array`, the host copy of an array-like that
`Tensor(...)` takes.

Values always cross as host copies, so a consumer never aliases device memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import numpy as np

from uopgrad.tensor_hooks import TensorHooks

if TYPE_CHECKING:
    pass

__all__ = ["InteropMixin", "host_array"]


def host_array(x: Any) -> np.ndarray:  # noqa: ANN401  (any array-like: torch, jax, cupy, ...)
    """A host numpy array of an array-like: through DLPack when it offers host memory, else `__array__`. A
    torch tensor that requires grad is detached first (only its values are taken)."""
    if hasattr(x, "detach") and callable(x.detach):
        x = x.detach()
    try:
        return np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError, AttributeError):
        try:
            return np.asarray(x)
        except Exception as e:
            raise TypeError(
                f"can't make a Tensor from {type(x).__name__}: its memory is not host-visible "
                f"and it has no usable __array__ ({e}); copy it to the host first"
            ) from e


class InteropMixin(TensorHooks):
    """The array-API exchange: exported and imported values are host copies."""

    __slots__ = ()

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """`np.asarray(t)`: the values (realized and copied to the host, so `copy=False` is an error)."""
        if copy is False:
            raise ValueError(
                "a Tensor's values are always copied to the host; np.asarray(t) with copy=False "
                "is not possible"
            )
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(
        self,
        *,
        stream: Any = None,  # noqa: ANN401
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:  # noqa: ANN401
        """A DLPack capsule of the values (the array-API exchange, e.g. `torch.from_dlpack(t)`): a host copy,
        as for `numpy()`, whatever the device, so the consumer never aliases device memory."""
        if copy is False:
            raise BufferError("a Tensor exports a host copy of its values; copy=False is not possible")
        arr = self.numpy()
        if max_version is None:  # a consumer of the first protocol version: no keywords
            return arr.__dlpack__()
        return arr.__dlpack__(max_version=max_version, dl_device=dl_device)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0): exported values live in host memory."""
        return (1, 0)

    @classmethod
    def from_dlpack(cls, x: Any, device: str | None = None) -> Self:  # noqa: ANN401  (any DLPack producer)
        """A Tensor on `device` with the values of a DLPack producer (torch, jax, numpy, ...) whose memory is
        host-visible."""
        return cls._from_data(host_array(x), device=device)
