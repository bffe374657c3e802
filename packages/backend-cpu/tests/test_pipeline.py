"""The CPU's own pipeline checks (the shared ones are the kit's, test_kit.py): the CPU as the default
device, narrowing casts that a C vectoriser once folded away, a 2001-op gradient, and what the backend
claims, and a training loop against torch."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from uopgrad import Ops, Tensor, dtypes
from uopgrad_conformance.kit.pipeline import assert_close, both
from uopgrad_cpu import CPU_DTYPES

CPU = "CPU"


def test_the_cpu_is_the_default_device_when_installed():
    code = "from uopgrad import Device; print(Device.DEFAULT)"
    env = {k: v for k, v in os.environ.items() if k != "UOPGRAD_DEVICE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "CPU"


ROUND_TRIPS = [
    (dtypes.float64, dtypes.float32),
    (dtypes.float32, dtypes.float16),
    (dtypes.float64, dtypes.float16),
    (dtypes.int64, dtypes.int32),
]


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 64])
@pytest.mark.parametrize(("wide", "narrow"), ROUND_TRIPS, ids=str)
def test_narrowing_round_trips_round(n, wide, narrow):
    # GCC 12.2's straight-line vectoriser turned (double)(float)x into x for 2, 3, 6, 7 elements
    values = np.array([1 / 3, 2**40 + 5.5, -7.1, 1e10] * 16)[:n]
    with np.errstate(all="ignore"):
        a = values.astype(dtypes.to_numpy(wide))
    assert_close(*both(CPU, lambda t: t.cast(narrow).cast(wide) * 1, a, dtype=wide))


def test_gradient_of_a_2001_op_chain_compiles_in_seconds():
    x = Tensor(np.linspace(0, 1, 64).astype(np.float32), device=CPU, requires_grad=True)
    y = x
    for _ in range(667):
        y = y * y * 0.5 + 0.25
    t = time.perf_counter()
    (g,) = y.sum().gradient(x)
    got = g.numpy()
    assert time.perf_counter() - t < 60
    xs = np.linspace(0, 1, 64).astype(np.float64)  # the chain rule in float64, as a check
    d = np.ones_like(xs)
    v = xs
    for _ in range(667):
        d, v = d * v, v * v * 0.5 + 0.25
    np.testing.assert_allclose(got, d, rtol=1e-3, atol=1e-30)


def test_the_backend_claims_what_it_runs(cpu):
    caps = cpu.capabilities
    assert caps.dtypes == CPU_DTYPES and caps.loop_style and caps.compiled
    assert caps.ops == cpu.renderer.supports
    assert {Ops.MAX, Ops.CDIV, Ops.CMOD, Ops.WHERE} <= caps.ops
    assert not {Ops.FLOORDIV, Ops.FLOORMOD} & caps.ops  # floor semantics come from codegen's decomposition


@Tensor.train()
def test_a_training_loop_keeps_gradients_and_weights_equal_to_torch():
    # the loop as users write it: print the loss, backward, step; the gradients the step reads are kept
    # (each is realized straight into its own buffer, in the run that overwrites the weights it read)
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    from uopgrad.nn.optim import SGD

    rng = np.random.default_rng(3)
    init = [(rng.standard_normal((8, 8)) / 3).astype(np.float32) for _ in range(3)]
    ours = [Tensor(w, device=CPU, requires_grad=True) for w in init]
    theirs = [torch.tensor(w, requires_grad=True) for w in init]
    opt, topt = SGD(ours, lr=0.1, momentum=0.9), torch.optim.SGD(theirs, lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
        h, th = Tensor(x, device=CPU), torch.tensor(x)
        for k, (w, tw) in enumerate(zip(ours, theirs)):
            h, th = h @ w, th @ tw
            h, th = (h.relu(), th.relu()) if k < 2 else (h, th)
        loss, tloss = ((h - Tensor(y, device=CPU)) ** 2).mean(), ((th - torch.tensor(y)) ** 2).mean()
        print(f"step {step}: loss {loss.item():.6f}")
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-5)
        opt.zero_grad()
        topt.zero_grad()
        loss.backward()
        tloss.backward()
        opt.step()
        topt.step()
        for w, tw in zip(ours, theirs):
            assert w.grad is not None and tw.grad is not None
            np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)
