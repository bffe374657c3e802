"""The packed panel of a matmul on the CPU (spec/opt.md §1): the right operand's panel copied into a
thread-private stack array changes no bit of the result, whatever the thread count, and the C says so."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor
from uopgrad.backend import Device
from uopgrad.codegen.opt import pack_min_span
from uopgrad.config import Context

WIDTH = Device["CPU"].capabilities.vector_width
pytestmark = pytest.mark.skipif(WIDTH == 0, reason="this CPU has no vector width: the opt pass is off")


def _sources(out: Tensor) -> list[str]:
    items = out.linear_with_vars()[0].src
    return [Device["CPU"].kernel(it).src for it in items if it.src[0].op is Ops.SINK]


# the right operand's span from which this host's target packs a plain panel (half its L1d, spec/opt.md §3.1)
SPAN = pack_min_span(Device["CPU"].capabilities.cache_sizes)


def _cols(k: int, least: int) -> int:
    """Columns (a multiple of 16) that give a k-row right operand at least SPAN bytes, and `least`."""
    return max(least, 16 * -(-SPAN // (k * 4 * 16)))


CASES = {
    "square rows 2 KB apart": ((128, 512), (512, _cols(512, 512))),
    "batched": ((2, 64, 512), (2, 512, _cols(512, 256))),
    "odd rows": ((36, 1024), (1024, _cols(1024, 144))),
    "transposed (g @ W.T, gathered into the panel)": ((64, 256), (256, 256)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_packed_matmul_has_the_unoptimised_kernels_bits(case: str):
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in CASES[case])
    t = case.startswith("transposed")

    def mm() -> Tensor:
        rhs = Tensor(b, device="CPU")
        return Tensor(a, device="CPU") @ (rhs.T if t else rhs)

    src = _sources(mm())
    assert len(src) == 1 and "temp0[" in src[0]  # the panel is packed here
    got = mm().numpy()
    with Context(OPT=0):
        plain = mm().numpy()
    np.testing.assert_array_equal(got, plain)  # a copy changes no bit, and each output keeps its order
    np.testing.assert_allclose(got, a @ (b.T if t else b), rtol=1e-4, atol=1e-4)


def test_each_thread_packs_into_its_own_array():
    # the column tiles run on several threads: a shared array would be overwritten by another thread's
    # panel while this one's rows read it (a race the values show at once)
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((256, 512), (512, 512)))
    out = Tensor(a, device="CPU") @ Tensor(b, device="CPU")
    src = _sources(out)[0]
    # 512 reduce steps of the tile's row: 4 vectors of 8 floats with AVX2 (spec/opt.md §3.1)
    assert "float temp0[16384] __attribute__((aligned(64)));" in src or WIDTH != 32
    assert "#pragma omp parallel for private(temp0)" in src
    first = out.numpy()
    for _ in range(3):
        np.testing.assert_array_equal((Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy(), first)
    with Context(OPT=0):
        np.testing.assert_array_equal((Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy(), first)


@Tensor.train()
def test_a_training_step_through_packed_matmuls_matches_torch():
    # the user's order: forward, read the loss, backward, update, repeat; the 512-wide layer's matmuls
    # (forward, and the weight gradient x.T @ g) are packed
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    from uopgrad.nn.optim import SGD

    rng = np.random.default_rng(5)
    w0 = (rng.standard_normal((512, 512)) / 23).astype(np.float32)
    xs = [rng.standard_normal((64, 512)).astype(np.float32) for _ in range(3)]
    w = Tensor(w0, device="CPU", requires_grad=True)
    opt = SGD([w], lr=0.1)
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    for x in xs:
        opt.zero_grad()
        loss = ((Tensor(x, device="CPU") @ w).relu() ** 2).mean()
        value = loss.item()
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = ((torch.from_numpy(x) @ tw).relu() ** 2).mean()
        tloss.backward()
        topt.step()
        assert value == pytest.approx(tloss.item(), rel=1e-4)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-5)
