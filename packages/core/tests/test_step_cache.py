"""The structure caches behind an eager training step (issue 35, spec/realize.md "Structure caches"): a step
whose graph has the structure of an earlier one reuses its schedule and its lowered kernels (counters),
a structurally different one does not, a hit gives exactly what a miss gives, and a training loop written
as a PyTorch user writes it matches torch step after step. The edge cases are those a cache keyed on less
than the structure would get wrong: dtypes, shapes, devices, constants, sharing and bound values."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, Tensor, UOp, dtypes
from uopgrad.backends.reference import evaluate, run_schedule
from uopgrad.nn.optim import SGD
from uopgrad.pipeline import clear_program_cache, program_cache_info
from uopgrad.schedule import Schedule, clear_schedule_cache, schedule, schedule_cache_info

pytestmark = pytest.mark.usefixtures("reference_default")
WIDTH, BATCH, LAYERS = 8, 4, 3


def _weights() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((WIDTH, WIDTH)) / WIDTH**0.5).astype(np.float32) for _ in range(LAYERS)]


def _data(k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + k)
    return rng.standard_normal((BATCH, WIDTH)).astype(np.float32), rng.standard_normal((BATCH, WIDTH)).astype(
        np.float32
    )


def _loss(x: Tensor, y: Tensor, ws: list[Tensor]) -> Tensor:
    h = x
    for i, w in enumerate(ws):
        h = h @ w
        h = h.relu() if i < len(ws) - 1 else h
    return ((h - y) ** 2).mean()


def _bodies(items: UOp) -> list[UOp]:
    return [it.src[0] for it in items.src]


def _buffers(items: UOp) -> set[UOp]:
    return {b for it in items.src for b in it.src[1:]}


def test_a_repeated_step_hits_the_schedule_and_lowering_caches_and_matches_torch(training: None) -> None:
    torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
    ws = [Tensor(w, requires_grad=True) for w in _weights()]
    tws = [torch.from_numpy(w.copy()).requires_grad_() for w in _weights()]
    opt, topt = SGD(ws, lr=0.1), torch.optim.SGD(tws, lr=0.1)
    clear_schedule_cache()
    clear_program_cache()
    seen: list[tuple[list[UOp], list[UOp], set[UOp]]] = []
    for k in range(4):
        x, y = (Tensor(a) for a in _data(k))
        opt.zero_grad()
        loss = _loss(x, y, ws)
        # the schedules and the programs realize would use for this step (REFERENCE evaluates graphs)
        fwd = loss.linear_with_vars()[0]
        programs = loss.linear_programs()
        value = loss.item()
        loss.backward()
        updates = opt.schedule_step()
        upd = updates[0].linear_with_vars(*updates[1:])[0]
        Tensor.realize(*updates)

        tx, ty = (torch.from_numpy(a) for a in _data(k))
        topt.zero_grad()
        tloss = _loss(tx, ty, tws)  # type: ignore[arg-type]
        assert value == pytest.approx(tloss.item(), rel=1e-5)
        tloss.backward()
        topt.step()
        for w, tw in zip(ws, tws):
            np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)

        info = schedule_cache_info()
        # three schedules a step (linear_programs schedules the forward again): two structures, both new
        # at the first step only
        assert (info["misses"], info["hits"]) == (2, 1 + 3 * k)
        # lowered at the first step only (kernels of one body are lowered once)
        assert program_cache_info()["misses"] == len({id(p) for p in programs}) <= len(programs)
        assert program_cache_info()["hits"] == len(programs) * (k + 1) - program_cache_info()["misses"]
        seen.append((_bodies(fwd), _bodies(upd), _buffers(upd)))
    # a hit gives the first step's kernels, in its order, over this step's buffers
    for bodies_f, bodies_u, bufs in seen[1:]:
        assert all(a is b for a, b in zip(bodies_f, seen[0][0], strict=True))
        assert all(a is b for a, b in zip(bodies_u, seen[0][1], strict=True))
        assert bufs != seen[0][2]


def test_a_structurally_different_step_misses(training: None) -> None:
    ws = [Tensor(w, requires_grad=True) for w in _weights()]
    clear_schedule_cache()
    x, y = (Tensor(a) for a in _data(0))
    _loss(x, y, ws).linear_with_vars()
    _loss(x, y, ws[:2]).linear_with_vars()  # one layer fewer
    x2, y2 = (Tensor(a[:2]) for a in _data(1))
    _loss(x2, y2, ws).linear_with_vars()  # another batch size
    assert schedule_cache_info()["misses"] == 3 and schedule_cache_info()["hits"] == 0
    x3, y3 = (Tensor(a) for a in _data(2))
    _loss(x3, y3, ws).linear_with_vars()  # the first structure, other data: a hit
    assert schedule_cache_info()["hits"] == 1


def _run(s: Schedule, out: UOp) -> np.ndarray:
    run_schedule(s, lower_kernels=False)
    return evaluate(s.outputs[out])[0]


def _two(f: object, a: Tensor, b: Tensor) -> tuple[Schedule, Schedule]:
    """The schedules of f(a) and f(b), cache cleared first; the second must miss (a naive key would hit)."""
    clear_schedule_cache()
    sa = schedule(f(a).uop.sink())  # type: ignore[operator]
    sb = schedule(f(b).uop.sink())  # type: ignore[operator]
    assert schedule_cache_info()["misses"] == 2, "a structurally different graph took a cached schedule"
    return sa, sb


def test_same_shape_of_graph_other_dtypes_shapes_devices_and_constants_miss() -> None:
    base = np.arange(6, dtype=np.float32)
    f = lambda t: (t * 2 + 1).sum()  # noqa: E731
    sa, sb = _two(f, Tensor(base), Tensor(base.astype(np.float16)))  # another dtype
    assert sb.kernels[0].src[0] is not sa.kernels[0].src[0]
    assert any(u.dtype == dtypes.half for u in sb.kernels[0].src[0].toposort())
    _two(f, Tensor(base), Tensor(base[:4]))  # another shape
    _two(f, Tensor(base), Tensor(base, device="REFERENCE:1"))  # another device
    for c1, c2 in ((2.5, 2.0), (0.0, -0.0)):  # another constant, also one equal under ==
        clear_schedule_cache()
        s1 = schedule((Tensor(base) * c1).uop.sink())
        out = (Tensor(base) * c2).uop
        s2 = schedule(out.sink())
        assert schedule_cache_info()["misses"] == 2
        assert s1.kernels[0].src[0] is not s2.kernels[0].src[0]
        assert _run(s2, out).tobytes() == (base * np.float32(c2)).tobytes()
    a, b = Tensor(base), Tensor(base + 1)
    clear_schedule_cache()
    schedule((a + b).uop.sink())
    schedule((a + a).uop.sink())  # one buffer read twice: another graph
    assert schedule_cache_info()["misses"] == 2


def test_a_hit_with_other_bound_values_runs_with_them() -> None:
    n = UOp.variable("n", 1, 8)
    a = Tensor(np.arange(8, dtype=np.float32))
    clear_schedule_cache()
    got = []
    for v in (5, 3, 8):
        out = a[: n.bind(v)] * 2
        s = schedule(out.uop.sink())
        assert s.var_vals == {"n": v}
        got.append(_run(s, out.uop).tolist())
    # (the bound value's CONST is part of today's key: each value misses once, v=5 again hits)
    s = schedule((a[: n.bind(5)] * 2).uop.sink())
    assert s.var_vals == {"n": 5} and schedule_cache_info()["hits"] == 1
    assert got == [[2.0 * i for i in range(v)] for v in (5, 3, 8)]


def test_a_hit_gives_the_kernels_and_launches_a_miss_gives() -> None:
    """The same graph scheduled from a cold cache and from a warm one: equal items, buffer for buffer."""
    rng = np.random.default_rng(3)
    w = Tensor(rng.standard_normal((4, 4)).astype(np.float32), requires_grad=True)

    def graph() -> UOp:
        x = Tensor(rng.standard_normal((2, 4)).astype(np.float32))
        loss = (x @ w).relu().sum()
        (g,) = loss.gradient(w)
        return loss.uop.sink((w.detach() - g * 0.5).uop)

    g1 = graph()
    clear_schedule_cache()
    cold = schedule(g1)
    g2 = graph()
    warm = schedule(g2)  # a hit, its buffers rebound to g2's
    clear_schedule_cache()
    fresh = schedule(g2)  # g2 from a cold cache
    assert schedule_cache_info()["misses"] == 1
    assert [it.src[0] for it in warm.items] == [it.src[0] for it in fresh.items]
    assert [it.src[0] for it in cold.items] == [it.src[0] for it in fresh.items]
    # the same launches: the graph's own buffers in the same slots; new buffers where fresh has new ones
    inputs = {b for b in g2.toposort() if b.op is Ops.BUFFER}
    for a, b in zip(warm.items, fresh.items, strict=True):
        assert len(a.src) == len(b.src)
        for x, y in zip(a.src[1:], b.src[1:]):
            assert (x is y) if y in inputs else (x not in inputs and x.dtype == y.dtype and x.arg == y.arg)
    for out in g2.src:
        np.testing.assert_array_equal(_run(warm, out), _run(fresh, out))
