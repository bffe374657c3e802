"""State dicts and safetensors files: get_state_dict / get_parameters walk an object's attributes for
Tensors; load_state_dict assigns into them in place; safe_save / safe_load write and read the
safetensors format (an 8-byte little-endian header length, a JSON header of dtype, shape and byte offsets
per tensor, then the raw little-endian data), written directly with numpy.
"""
from __future__ import annotations

import json
import os
import struct
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from uopgrad.dtype import DType, dtypes
from uopgrad.tensor import Tensor

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_save"]

# safetensors' dtype names
_SAFE_DTYPES: dict[str, DType] = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
    "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16, "I8": dtypes.int8,
    "U64": dtypes.uint64, "U32": dtypes.uint32, "U16": dtypes.uint16, "U8": dtypes.uint8, "BOOL": dtypes.bool,
}
_SAFE_NAMES = {v: k for k, v in _SAFE_DTYPES.items()}


def get_state_dict(obj: object, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted name
    ("layers.0.weight"), in attribute order."""
    out: OrderedDict[str, Tensor] = OrderedDict()
    stack: list[tuple[str, object]] = [(prefix, obj)]
    seen: set[int] = set()
    while stack:
        name, o = stack.pop()
        if isinstance(o, Tensor):
            out[name.rstrip(".")] = o
            continue
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, Mapping):
            children = [(f"{name}{k}.", v) for k, v in o.items()]
        elif isinstance(o, (list, tuple)):
            children = [(f"{name}{k}.", v) for k, v in enumerate(o)]
        elif hasattr(o, "__dict__"):
            children = [(f"{name}{k}.", v) for k, v in vars(o).items()]
        else:
            continue
        stack.extend(reversed(children))
    return dict(out)


def get_parameters(obj: object) -> list[Tensor]:
    """The Tensors of get_state_dict(obj), each once."""
    unique: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        unique.setdefault(id(t), t)
    return list(unique.values())


def load_state_dict(model: object, state_dict: Mapping[str, Tensor], strict: bool = True) -> None:
    """Assign each of the model's tensors the state dict's tensor of its name (cast to its dtype, moved
    to its device), then realize them. strict: every name of either side must be on the other."""
    own = get_state_dict(model)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    for k, t in own.items():
        if k not in state_dict:
            continue
        v = state_dict[k]
        if v.shape != t.shape:
            raise ValueError(f"load_state_dict: {k} has shape {t.shape} in the model, {v.shape} in the dict")
        t.assign(v.to(t.device).cast(t.dtype).detach())
    if own:
        Tensor.realize(*own.values())


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns, rounded to nearest even."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def safe_save(tensors: Mapping[str, Tensor], fn: str | os.PathLike[str],
              metadata: Mapping[str, str] | None = None) -> None:
    """Write `tensors` (realized first) to a .safetensors file."""
    header: dict[str, object] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in _SAFE_NAMES:
            raise TypeError(f"safe_save: {name} has dtype {t.dtype}, which safetensors can't store")
        arr = t.numpy()
        little = _bf16_bits(arr) if t.dtype == dtypes.bfloat16 else arr.astype(arr.dtype.newbyteorder("<"))
        raw = little.tobytes()
        header[name] = {"dtype": _SAFE_NAMES[t.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-aligned
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def safe_load(fn: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a .safetensors file, by name, on `device` (the default device if None)."""
    with open(fn, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{os.fspath(fn)!r} is not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{os.fspath(fn)!r} is not a safetensors file (header length {n} past the end)")
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = _SAFE_DTYPES.get(info["dtype"])
        if dt is None:
            raise TypeError(f"safe_load: {name} has the unsupported safetensors dtype {info['dtype']!r}")
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if dt == dtypes.bfloat16:
            bits = np.frombuffer(body[start:end], np.dtype("<u2")).astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(body[start:end], dtypes.to_numpy(dt).newbyteorder("<")).reshape(shape)
        out[name] = Tensor(arr.astype(arr.dtype.newbyteorder("=")), device=device, dtype=dt)
    return out
