"""State dicts: get_state_dict / get_parameters walk an object's attributes for Tensors; load_state_dict
assigns into them in place. safe_save / safe_load / safe_metadata (the safetensors format, checked strictly
and written atomically) live in uopgrad.nn.safetensors and are re-exported here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import cast

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


def load_state_dict(
    model: object,
    state_dict: Mapping[str, Tensor],
    strict: bool = True,
    verbose: bool = True,
    consume: bool = False,
    realize: bool = True,
) -> list[Tensor]:
    """Assign each of the model's tensors the state dict's tensor of its name (cast to its dtype as PyTorch's
    copy_ casts, moved to its device; a () and a (1,) shape fit each other), then realize them; returns the
    loaded tensors. A sharded model tensor is replaced (Tensor.replace) by the entry, sharded like the model's
    tensor unless the entry is sharded already (then its own sharding wins, as the reference has it).
    strict: every name of either side must be on the other. Every entry is checked before any is assigned: a
    missing name, a wrong type or shape leaves the model as it was. consume: delete each loaded entry from
    `state_dict` (a dict then). `verbose` is accepted for the reference's signature."""
    del verbose
    own = get_state_dict(model)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    pairs: list[tuple[str, Tensor, Tensor]] = []
    for k, t in own.items():
        if k not in state_dict:
            continue
        v = state_dict[k]
        if not isinstance(v, Tensor):
            raise TypeError(f"load_state_dict: {k} is {type(v).__name__} in the dict, not a Tensor")
        if v.shape != t.shape:
            if {tuple(v.shape), tuple(t.shape)} != {(), (1,)}:
                raise ValueError(
                    f"Shape mismatch in layer `{k}`: Expected shape {t.shape}, but found "
                    f"{v.shape} in state dict."
                )
            v = v.reshape(t.shape)
        pairs.append((k, t, v))
    for _, t, v in pairs:
        v = v.cast(t.dtype).detach()
        if isinstance(t.device, tuple):  # a sharded model: its tensor takes the entry's sharding, or its own
            t.replace(v if isinstance(v.device, tuple) else v.shard(t.device, t.uop.axis))
        else:
            t.assign(v.to(t.device))
    loaded = [t for _, t, _ in pairs]
    if realize and loaded:
        Tensor.realize(*loaded)
    if consume:
        for k, _, _ in pairs:
            del cast("dict[str, Tensor]", state_dict)[k]
    return loaded
