"""A training loop in PyTorch's order (forward in training mode, loss, backward, `opt.step()`) with a
BatchNorm layer whose running statistics the optimiser was NOT given (as `model.parameters()` in PyTorch):
the step realizes them anyway (`nn.optim.buffer_updated`), so the graph behind them stays one step deep and
memory stays flat, and they match torch.nn.BatchNorm2d over the same steps and data (issue 36)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from uopgrad import Tensor, nn
from uopgrad.nn.optim import SGD
from uopgrad.uop import UOp

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")


def _graph_size(u: UOp) -> int:
    """The UOps reachable from u (the graph a read of the tensor would have to run)."""
    seen: set[int] = set()
    todo = [u]
    while todo:
        n = todo.pop()
        if id(n) not in seen:
            seen.add(id(n))
            todo.extend(n.src)
    return len(seen)


class Net:
    def __init__(self) -> None:
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.fc(self.bn(self.conv(x)).relu().flatten(1))

    def parameters(self) -> list[Tensor]:  # what torch's model.parameters() gives: no buffers
        return [self.conv.weight, self.conv.bias, self.bn.weight, self.bn.bias, self.fc.weight, self.fc.bias]  # type: ignore[list-item]


def _torch_net(net: Net) -> torch.nn.Sequential:
    tnet = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 3),
    )
    with torch.no_grad():
        for tp, p in zip(tnet.parameters(), net.parameters()):
            tp.copy_(torch.from_numpy(p.numpy()))
    return tnet


def test_pytorch_order_loop_stays_flat_and_matches_torch(training: None) -> None:
    rng = np.random.default_rng(0)
    net = Net()
    tnet = _torch_net(net)
    opt = SGD(net.parameters(), lr=0.05)
    topt = torch.optim.SGD(tnet.parameters(), lr=0.05)
    sizes: dict[int, int] = {}
    mem: dict[int, int] = {}
    tracemalloc.start()
    try:
        for step in range(201):
            xb = rng.standard_normal((6, 2, 6, 6)).astype(np.float32) + step % 3
            yb = rng.integers(0, 3, 6)
            opt.zero_grad()
            loss = net(Tensor(xb)).cross_entropy(Tensor(yb))
            loss.backward()
            opt.step()
            topt.zero_grad()
            torch.nn.functional.cross_entropy(tnet(torch.from_numpy(xb)), torch.from_numpy(yb)).backward()
            topt.step()
            if step in (20, 200):
                sizes[step] = _graph_size(net.bn.running_mean.uop)  # counted before anything reads it
                mem[step] = tracemalloc.get_traced_memory()[0]
                np.testing.assert_allclose(
                    net.bn.running_mean.numpy(), tnet[1].running_mean.numpy(), atol=1e-4
                )
    finally:
        tracemalloc.stop()
    # bounded: the step realized the statistics (a pending chain grows by dozens of nodes per step)
    assert sizes[200] <= sizes[20] <= 10, sizes
    # flat: a chain of 180 pending steps holds each step's activations (several MB here)
    assert mem[200] - mem[20] < 1_500_000, mem
    np.testing.assert_allclose(
        net.bn.running_mean.numpy(), tnet[1].running_mean.numpy(), rtol=1e-3, atol=1e-4
    )
    np.testing.assert_allclose(net.bn.running_var.numpy(), tnet[1].running_var.numpy(), rtol=1e-3, atol=1e-4)
    assert net.bn.num_batches_tracked.item() == tnet[1].num_batches_tracked.item() == 201


def test_forward_only_calls_keep_one_update_pending(training: None) -> None:
    """Calibrating the statistics (training-mode forwards, no optimiser): each call realizes the last one's
    update, so the chain stays one update deep, and the values are torch's."""
    rng = np.random.default_rng(1)
    bn, tbn = nn.BatchNorm2d(3, momentum=0.2), torch.nn.BatchNorm2d(3, momentum=0.2)
    sizes = []
    for _ in range(30):
        xb = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * 2 + 1
        bn(Tensor(xb))
        tbn(torch.from_numpy(xb))
        sizes.append(_graph_size(bn.running_var.uop))
    assert max(sizes[5:]) == sizes[5], sizes
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)


def test_buffers_given_to_the_optimiser_still_work(training: None) -> None:
    """The digits way (get_parameters, buffers included): one realize per step, the same statistics."""
    from uopgrad.nn.state import get_parameters

    rng = np.random.default_rng(2)
    net = Net()
    tnet = _torch_net(net)
    opt = SGD(get_parameters(net), lr=0.05)
    topt = torch.optim.SGD(tnet.parameters(), lr=0.05)
    for _ in range(5):
        xb = rng.standard_normal((6, 2, 6, 6)).astype(np.float32)
        yb = rng.integers(0, 3, 6)
        opt.zero_grad()
        loss = net(Tensor(xb)).cross_entropy(Tensor(yb))
        loss.backward()
        Tensor.realize(loss, *opt.schedule_step())
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tnet(torch.from_numpy(xb)), torch.from_numpy(yb)).backward()
        topt.step()
    np.testing.assert_allclose(net.bn.running_var.numpy(), tnet[1].running_var.numpy(), rtol=1e-4, atol=1e-5)
