"""Lazy assigns give PyTorch's values (spec/realize.md, Assigns): generated programs of three realized
tensors, values computed from them, in-place writes (`assign`, `+=`, a slice's `assign`) and reads in
any order, run on uopgrad and, eagerly, on torch; every read and every tensor at the end must agree exactly.

Covers the order rules that a lazy runtime has to get right: a value keeps the contents it was built on
when its sources are overwritten later (also when the write runs inside the realize of another tensor, and
transitively through the assigns that realize pulls in), assigns that read each other's old contents
(`a.assign(a + b); b.assign(a * 2)`: a cycle the scheduler breaks with a copy), and views that see writes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import Tensor
from uopgrad.backend import Device

torch = pytest.importorskip("torch")

DEVICES = list(dict.fromkeys(["REFERENCE", *(["CPU"] if "CPU" in Device else [])]))
N = 3  # tensors
K = 4  # elements each

# one step of a program: (kind, a, b, c) with a, b tensor or value indices and c a small constant
KINDS = ["value", "assign", "assign_value", "iadd", "slice_assign", "read", "read_value", "view"]
step = st.tuples(st.sampled_from(KINDS), st.integers(0, N - 1), st.integers(0, N - 1), st.integers(-3, 3))


class Lib:
    """The three things a program does that the two libraries spell differently."""

    def __init__(self, device: str | None) -> None:
        self.device = device  # None: torch

    def new(self, k: int) -> Any:
        data = np.arange(K, dtype=np.float32) * (k + 1) + 10 * k
        return torch.from_numpy(data) if self.device is None else Tensor(data, device=self.device).realize()

    def read(self, t: Any) -> list[float]:
        return [float(v) for v in (t.reshape(-1) if self.device is None else t.numpy().reshape(-1))]

    def assign(self, dst: Any, src: Any) -> None:
        _ = dst.copy_(src) if self.device is None else dst.assign(src)


def run(lib: Lib, program: list[tuple[str, int, int, int]]) -> list[list[float]]:
    """The program (torch runs it eagerly): every value read, in order, then every tensor and value."""
    ts = [lib.new(k) for k in range(N)]
    values: list[Any] = []
    out: list[list[float]] = []
    for kind, a, b, c in program:
        if kind == "value":  # a value computed from two tensors' current contents
            values.append(ts[a] * float(c) + ts[b])
        elif kind == "view":  # a view (a reshape): it sees later writes into its tensor, in both libraries
            values.append(ts[a].reshape(2, 2))
        elif kind == "assign":  # from another tensor's current contents
            lib.assign(ts[a], ts[b] * 2.0 + float(c))
        elif kind == "assign_value" and values:  # from a value built earlier (old contents, or a view)
            lib.assign(ts[a], values[b % len(values)].reshape(K))
        elif kind == "iadd":
            ts[a] += ts[b] * float(c)
        elif kind == "slice_assign":  # half of a tensor from the other half of another
            lib.assign(ts[a][: K // 2], ts[b][K // 2 :] + float(c))
        elif kind == "read":
            out.append(lib.read(ts[a]))
        elif kind == "read_value" and values:
            out.append(lib.read(values[a % len(values)]))
    return out + [lib.read(t) for t in ts] + [lib.read(v) for v in values]


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(program=st.lists(step, min_size=1, max_size=10))
def test_lazy_assigns_read_what_torch_reads(device: str, program: list[tuple[str, int, int, int]]) -> None:
    assert run(Lib(device), program) == run(Lib(None), program), program


@pytest.mark.parametrize("device", DEVICES)
def test_the_cases_that_once_failed(device: str) -> None:
    for program in (
        # a cycle: each assign reads the other's old contents (tinygrad's test_cross_assign_independence)
        [("value", 0, 1, 1), ("value", 0, 0, 1), ("assign_value", 0, 0, 0), ("assign_value", 1, 1, 0)],
        # a pulled-in assign overwrites a buffer that a third pending assign read
        [
            ("value", 0, 0, 1),
            ("value", 1, 1, 1),
            ("assign", 0, 2, 1),
            ("assign_value", 1, 0, 0),
            ("assign_value", 2, 1, 0),
            ("read", 0, 0, 0),
        ],
        # a view taken while an assign was pending, then another write: reading the tensor first ran the
        # second write again when the view was read (each graph had its own realized form of the first)
        [("assign", 1, 0, 0), ("view", 1, 0, 0), ("iadd", 1, 0, 1)],
        [("assign", 2, 0, 0), ("view", 2, 0, 0), ("assign_value", 0, 0, 0), ("iadd", 2, 0, 1)],
    ):
        assert run(Lib(device), program) == run(Lib(None), program), program
