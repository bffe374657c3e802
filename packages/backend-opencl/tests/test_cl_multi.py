"""Sharding on OpenCL devices (CL, CL:1) and across backends (CPU with CL): values and gradients of the
unsharded program, computed with numpy."""

import numpy as np
import pytest

from uopgrad import Device, Tensor


def _devices(pair: tuple[str, str]) -> tuple[str, str]:
    for d in pair:
        try:
            Device[d]
        except Exception as e:
            pytest.skip(f"{d} is not available here: {e}")
    return pair


@pytest.mark.parametrize("pair", [("CL", "CL:1"), ("CPU", "CL"), ("CL", "CPU")])
def test_sharded_mlp_step_matches_numpy(pair: tuple[str, str]) -> None:
    devs = _devices(pair)
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    x = Tensor(a).shard(devs, 0)
    wt = Tensor(w, requires_grad=True).shard(devs)
    loss = (x @ wt).relu().sum()
    h = a @ w
    assert loss.item() == pytest.approx(float(np.maximum(h, 0).sum()), rel=1e-5)
    loss.backward()
    assert wt.grad is not None and wt.grad.device == devs
    np.testing.assert_allclose(wt.grad.numpy(), a.T @ (h > 0).astype(np.float32), rtol=1e-5, atol=1e-5)


def test_gather_to_another_backend_and_reduce_over_the_shards() -> None:
    devs = _devices(("CL", "CL:1"))
    _devices(("CPU", "CPU"))
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = Tensor(a).shard(devs, 1)
    np.testing.assert_array_equal(x.to("CPU").numpy(), a)
    np.testing.assert_array_equal(x.sum(1).to("CPU").numpy(), a.sum(1))
    np.testing.assert_array_equal((x * 2).max(0).numpy(), (a * 2).max(0))
