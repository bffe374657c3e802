"""The records a node's arg or metadata may hold (layer 4, below the node so that printing and the node
share them): `Metadata` (where a node came from), `KernelInfo` (a custom kernel's SINK) and `CallInfo`
(CALL/FUNCTION). Plain frozen values: they compare and hash by value, so equal nodes intern to one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CallInfo", "KernelInfo", "Metadata"]


@dataclass(frozen=True)
class Metadata:
    """Where a node came from (a front-end call name), and whether it belongs to a backward pass."""

    name: str
    caller: str = ""
    backward: bool = False


@dataclass(frozen=True)
class KernelInfo:
    """The arg of a custom kernel's SINK: what names the kernel (its compiled function is called `name`)."""

    name: str = "test"


@dataclass(frozen=True)
class CallInfo:
    """The arg of CALL/FUNCTION. Compares and hashes by value, so equal calls intern to one node."""

    grad_fxn: Callable[..., tuple[Any, ...]] | None = None  # returns a UOp or None per source
    metadata: tuple[Metadata, ...] = ()
    name: str | None = None
    precompile: bool = False
    precompile_backward: bool = False

    def __hash__(self) -> int:
        # the fields' hash, computed once (a dataclass hashes the fields' tuple at every call): a CALL's key
        # is hashed at each interning of it, and a realize makes dozens; kept beside the fields, not in them
        try:
            h: int = self.__dict__["_hash"]
        except KeyError:
            fields = (self.grad_fxn, self.metadata, self.name, self.precompile, self.precompile_backward)
            h = self.__dict__["_hash"] = hash(fields)
        return h

    def __repr__(self) -> str:
        gf = None if self.grad_fxn is None else f"<grad_fxn {id(self.grad_fxn):#x}>"
        flags = f"{self.precompile}, {self.precompile_backward}"
        return f"CallInfo({gf}, {self.metadata}, {self.name!r}, {flags})"

    def __reduce__(self) -> tuple[Any, ...]:
        # grad_fxn is code, not data: it is dropped when pickled
        return (CallInfo, (None, self.metadata, self.name, self.precompile, self.precompile_backward))
