"""Data parallelism on CPU:0/CPU:1 (and CPU with OpenCL): the demo's MLP trained on a batch sharded over two
devices, weights replicated, gives the single-device losses; each device's kernels run on that device."""

import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad.config import Context

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo.py"


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("uopgrad_demo", DEMO)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["uopgrad_demo"] = mod
    spec.loader.exec_module(mod)
    return mod


def _train(
    demo: ModuleType, devices: str | tuple[str, ...], steps: int
) -> tuple[list[float], list[np.ndarray]]:
    """The demo's SGD with momentum; on a device tuple the batch is sharded on axis 0, the rest replicated."""
    rng = np.random.default_rng(0)
    x, y = demo.make_data(rng, 64)
    init = demo.init_params(rng, [2, 16, 16, 1])
    params = [Tensor(p.astype(np.float32), device=devices, requires_grad=True) for p in init]
    velocity = [Tensor(np.zeros(p.shape, np.float32), device=devices) for p in init]
    xt, yt = Tensor(x.astype(np.float32)), Tensor(y.astype(np.float32))
    if isinstance(devices, tuple):
        xt, yt = xt.shard(devices, 0), yt.shard(devices, 0)
    else:
        xt, yt = xt.to(devices), yt.to(devices)
    losses = []
    for _ in range(steps):
        loss = demo.mse(demo.model(xt, params), yt)
        losses.append(float(loss.item()))  # read the loss first, then step
        loss.backward()
        for p, v in zip(params, velocity):
            assert p.grad is not None
            v.assign(v * 0.9 + p.grad)
            p.assign(p.detach() - v * 0.05)
            p.grad = None
        Tensor.realize(*params, *velocity)
    return losses, [p.numpy() for p in params]


def test_data_parallel_demo_mlp_gives_the_single_device_losses() -> None:
    demo = _demo()
    single, w1 = _train(demo, "CPU", 6)
    dp, w2 = _train(demo, ("CPU", "CPU:1"), 6)
    assert single[-1] < single[0]
    np.testing.assert_allclose(dp, single, rtol=1e-5)
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_each_device_runs_its_own_kernels(caplog: pytest.LogCaptureFixture) -> None:
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = Tensor(a).shard(("CPU", "CPU:1"), 0)
    with Context(DEBUG=1), caplog.at_level(logging.INFO, logger="uopgrad.kernel"):
        out = ((x * 2).sum(1) + 1).numpy()
    np.testing.assert_array_equal(out, (a * 2).sum(1) + 1)
    ran_on = {r.getMessage().split()[0] for r in caplog.records if r.name == "uopgrad.kernel"}
    assert {"CPU", "CPU:1"} <= ran_on


@pytest.mark.parametrize("devices", [("CPU", "CPU:1", "CPU:2", "CPU:3"), ("CPU:2", "CPU")])
def test_sharded_matmul_and_its_gradient_on_cpu_devices(devices: tuple[str, ...]) -> None:
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    x = Tensor(a).shard(devices, 1)  # the contracted axis: the matmul all-reduces
    wt = Tensor(w, requires_grad=True).shard(devices, 0)
    loss = (x @ wt).square().sum()
    tw = torch.tensor(w, requires_grad=True)
    tl = (torch.tensor(a) @ tw).square().sum()
    tl.backward()
    assert loss.item() == pytest.approx(tl.item(), rel=1e-5)
    loss.backward()
    assert wt.grad is not None
    np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
