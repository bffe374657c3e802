"""The split plan (uopgrad.split_reduce.plan_splits, spec/opt.md §4.1): a policy that never splits on a
device is asked once per device, not sized reduce by reduce; a plain function is asked about each."""

from __future__ import annotations

import numpy as np

from uopgrad import Ops
from uopgrad.backend import reduce_split
from uopgrad.config import Context
from uopgrad.dtype import DType
from uopgrad.split_reduce import never_splits, plan_splits
from uopgrad.tensor import Tensor


def graph() -> tuple[Tensor, int]:
    x = Tensor(np.ones((64, 512), np.float32), device="REFERENCE")
    out = x.sum(1) + x.max(1) + (x * 2).sum()  # sum, the max's NaN sum and maximum, a full sum
    reduces = [u for u in out.uop.sink().toposort() if u.op is Ops.REDUCE]
    return out, len(reduces)


class Asked:
    """A policy that records what it is asked: `never` per device, or the reduce's sizes."""

    def __init__(self, never: bool, partials: int = 4) -> None:
        self.never, self.partials = never, partials
        self.devices: list[str] = []
        self.sized: list[tuple[str, int, int]] = []

    def __call__(self, device: str, n: int, outs: int, op: Ops, dt: DType) -> int:
        self.sized.append((device, n, outs))
        return self.partials

    def never_splits(self, device: str) -> bool:
        self.devices.append(device)
        return self.never


def test_a_device_the_policy_never_splits_on_is_asked_once_and_no_reduce_is_sized():
    out, n = graph()
    policy = Asked(never=True)
    assert plan_splits(out.uop.sink(), policy) == (1,) * n
    assert policy.devices == ["REFERENCE"] and policy.sized == []


def test_a_device_the_policy_may_split_on_has_every_reduce_sized():
    out, n = graph()
    policy = Asked(never=False)
    assert plan_splits(out.uop.sink(), policy) == (4,) * n
    assert policy.devices == ["REFERENCE"] and len(policy.sized) == n
    assert (("REFERENCE", 64 * 512, 1)) in policy.sized  # the full sum: every element into one output


def test_a_plain_function_is_asked_about_each_reduce():
    out, n = graph()
    sized: list[int] = []

    def policy(device: str, n: int, outs: int, op: Ops, dt: DType) -> int:
        sized.append(n)
        return 1

    assert not never_splits(policy, "REFERENCE")
    assert plan_splits(out.uop.sink(), policy) == (1,) * n and len(sized) == n


def test_the_backend_policy_never_splits_on_loop_style_devices_or_under_opt0():
    assert reduce_split.never_splits("REFERENCE")
    with Context(OPT=0):
        assert reduce_split.never_splits("REFERENCE")
    assert reduce_split("REFERENCE", 1 << 22, 1, Ops.ADD, Tensor([1.0]).dtype) == 1
