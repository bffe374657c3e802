"""State dicts: get_state_dict / get_parameters walk an object's attributes for Tensors; load_state_dict
assigns into them in place. safe_save / safe_load / safe_metadata (the safetensors format, checked strictly
and written atomically) live in uopgrad.nn.safetensors and are re-exported here.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from uopgrad.nn.safetensors import safe_load, safe_metadata, safe_save
from uopgrad.tensor import Tensor

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_metadata", "safe_save"]


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
    """Assign each of the model's tensors the state dict's tensor of its name (cast to its dtype as PyTorch's
    copy_ casts, moved to its device), then realize them. strict: every name of either side must be on the
    other. Every entry is checked before any is assigned: a missing name, a wrong type or shape leaves the
    model as it was."""
    own = get_state_dict(model)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    pairs: list[tuple[Tensor, Tensor]] = []
    for k, t in own.items():
        if k not in state_dict:
            continue
        v = state_dict[k]
        if not isinstance(v, Tensor):
            raise TypeError(f"load_state_dict: {k} is {type(v).__name__} in the dict, not a Tensor")
        if v.shape != t.shape:
            raise ValueError(f"load_state_dict: {k} has shape {t.shape} in the model, {v.shape} in the dict")
        pairs.append((t, v))
    for t, v in pairs:
        t.assign(v.to(t.device).cast(t.dtype).detach())
    if own:
        Tensor.realize(*own.values())
