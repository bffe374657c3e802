"""The live-tensor registry: a realize looks only at unrealized tensors, an assign only at the tensors stored
in the buffer it writes, and neither index keeps a dead tensor or grows with a long loop."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad import tensor_registry as registry

pytestmark = pytest.mark.usefixtures("reference_default")


def test_a_realize_looks_only_at_the_unrealized_tensors_among_many_live_ones():
    gc.collect()
    before = {id(t) for t in registry.pending()}
    data = [Tensor(np.full(4, i, np.float32)) for i in range(5000)]  # a dataset kept in memory
    w = Tensor(np.ones(4, np.float32)).realize()
    pend = w * 2 + 1  # the one value not computed yet
    assert {id(t) for t in registry.pending()} - before == {id(pend)}
    assert (pend + data[7]).numpy().tolist() == [10.0] * 4
    assert pend.numpy().tolist() == [3.0] * 4 and len(data) == 5000
    assert all(t is not pend for t in registry.pending())  # realized now: it leaves the index


def test_an_assign_still_reaches_every_alias_of_its_buffer_among_many_live_tensors():
    others = [Tensor(np.zeros(6, np.float32)).realize() for _ in range(2000)]
    base = Tensor(np.arange(6, dtype=np.float32)).realize()
    view = base.reshape(2, 3)
    row = view[1]
    before = (base * 10).contiguous()  # reads the old contents: computed before the write (PyTorch's order)
    base.assign(Tensor(np.full(6, 7.0, np.float32))).realize()
    assert view.numpy().tolist() == [[7.0] * 3] * 2
    assert row.numpy().tolist() == [7.0] * 3
    assert before.numpy().tolist() == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert all(o.numpy().sum() == 0 for o in others[:3])


def test_an_sgd_loop_with_a_large_dataset_alive_trains_as_without_it():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 8)).astype(np.float32), rng.standard_normal((32, 1)).astype(np.float32)
    w0 = rng.standard_normal((8, 1)).astype(np.float32)

    def train(keep: list[Tensor]) -> list[float]:
        w = Tensor(w0.copy(), requires_grad=True)
        losses = []
        for _ in range(5):
            loss = ((Tensor(x) @ w - Tensor(y)) ** 2).mean()
            losses.append(loss.item())  # read the loss first, then backward (as users do)
            loss.backward()
            assert w.grad is not None
            w.assign(w.detach() - w.grad.detach() * 0.1).realize()
            w.grad = None
        return losses

    alone = train([])
    crowd = [Tensor(rng.standard_normal(16).astype(np.float32)).realize() for _ in range(3000)]
    assert train(crowd) == alone
    assert alone[-1] < alone[0]


def test_views_made_every_step_leave_the_index_with_their_tensors():
    w = Tensor(np.ones((4, 4), np.float32)).realize()
    buf = registry.storage_chain(w.uop)[1]
    for _ in range(3000):  # an inference loop reading w.T forever, never assigning w
        (w.T @ w).realize()
    gc.collect()
    assert len(registry.views_of(buf)) <= 4


def test_tensors_built_and_dropped_without_a_realize_do_not_pile_up():
    x = Tensor(np.ones(4, np.float32))
    for _ in range(20000):
        _ = x * 2 + 1  # built, never realized, dropped
    gc.collect()
    assert len(registry._pending) < 5000
