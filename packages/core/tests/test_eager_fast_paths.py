"""The eager step's fast paths (issue 35) build what the general paths build: a matmul's nodes, the facts
given to a node where it is made, the optimiser's update without a trust ratio of 1.0, and a CallInfo's
remembered hash."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from uopgrad import Tensor, UOp, dtypes
from uopgrad.errors import DeviceError, ShapeError
from uopgrad.facts import NOT_COMPUTED, Err, infer_device, infer_shape
from uopgrad.nn.optim import SGD, Adam
from uopgrad.ops import Ops
from uopgrad.tensor_reduce import ReduceMixin
from uopgrad.uop import DEVICE, SHAPE, CallInfo, Metadata

SIZES = [
    (64, 16, 16),
    (1, 16, 16),
    (16, 1, 16),
    (16, 16, 1),
    (1, 1, 1),
    (1, 5, 1),
    (0, 3, 4),
    (3, 0, 4),
    (2, 3, 0),
]


def _general(monkeypatch: pytest.MonkeyPatch, a: Tensor, b: Tensor) -> Tensor:
    """a @ b by the general path (the fast one declined)."""
    with monkeypatch.context() as m:
        m.setattr(ReduceMixin, "_dot2d", lambda self, w: None)
        return a @ b


def _check_facts(nodes: Iterator[UOp] | list[UOp]) -> int:
    """Every shape and device a node holds is the one its rule gives from its sources' facts; the count."""
    n = 0
    for u in nodes:
        for x in u.src:  # (a fact given where a node is built needs none of its sources')
            if x._shape_fact is NOT_COMPUTED:
                SHAPE.fill(x)
            if x._device_fact is NOT_COMPUTED:
                DEVICE.fill(x)
        if (s := u._shape_fact) is not NOT_COMPUTED and type(s) is not Err:
            assert infer_shape(u) == s, u.short()
            n += 1
        if (d := u._device_fact) is not NOT_COMPUTED and (want := infer_device(u)) is not NOT_COMPUTED:
            assert want == d, u.short()
            n += 1
    return n


@pytest.mark.parametrize("m,k,n", SIZES)
def test_a_matmul_builds_the_general_paths_nodes_with_their_facts(
    monkeypatch: pytest.MonkeyPatch, m: int, k: int, n: int
) -> None:
    a = Tensor(np.arange(m * k, dtype=np.float32).reshape(m, k))
    b = Tensor(np.arange(k * n, dtype=np.float32).reshape(k, n))
    fast = a @ b
    assert fast.uop is _general(monkeypatch, a, b).uop
    assert _check_facts(list(fast.uop.toposort())) > 0
    np.testing.assert_allclose(fast.numpy(), a.numpy() @ b.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "da,db", [(dtypes.float16, dtypes.float16), (dtypes.int32, dtypes.float32), (dtypes.float32, dtypes.int8)]
)
def test_a_matmul_the_fast_path_declines_promotes_and_accumulates_as_before(
    monkeypatch: pytest.MonkeyPatch, da: dtypes, db: dtypes
) -> None:
    a, b = Tensor.ones(3, 4, dtype=da), Tensor.ones(4, 2, dtype=db)
    fast = a @ b
    assert fast.uop is _general(monkeypatch, a, b).uop and fast.dtype == _general(monkeypatch, a, b).dtype


def test_a_matmul_across_devices_still_raises() -> None:
    with pytest.raises(DeviceError, match="different devices"):
        Tensor.ones(2, 3, device="REFERENCE") @ Tensor.ones(3, 2, device="REFERENCE:1")


def test_a_symbolic_matmul_takes_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    n = UOp.variable("n", 1, 8).bind(3)
    a = Tensor.ones(8, 4)[:n]
    b = Tensor.ones(4, 2)
    assert (a @ b).uop is _general(monkeypatch, a, b).uop


def test_elementwise_nodes_get_the_inferred_facts_and_a_mismatch_still_raises() -> None:
    x = UOp.const(dtypes.float32, 1.0, "CPU", (2, 3))
    y = (x + x) * 2.0
    z = y.detach().cast(dtypes.float16).sqrt()
    assert _check_facts([y, z, *z.toposort()]) > 0 and z.shape == (2, 3) and z.device == "CPU"
    bad = x + UOp.const(dtypes.float32, 1.0, "CPU", (4, 5))  # no fact given: inference reports it
    with pytest.raises(ShapeError):
        _ = bad.shape


@pytest.mark.parametrize("opt", [SGD, Adam])
def test_every_fact_of_a_training_steps_graphs_is_the_inferred_one(training: None, opt: type) -> None:
    rng = np.random.default_rng(0)
    ws = [Tensor(rng.standard_normal((8, 8)).astype(np.float32), requires_grad=True) for _ in range(3)]
    o = opt(ws, lr=0.01)
    for _ in range(3):
        x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
        o.zero_grad()
        h = x
        for w in ws:
            h = (h @ w).relu()
        loss = (h**2).mean()
        loss.item()
        loss.backward()
        graphs = [loss.uop, *(w.grad.uop for w in ws if w.grad is not None)]
        o.schedule_step()
        graphs += [w.uop for w in ws]
        nodes = UOp.sink(*graphs).toposort()
        assert _check_facts(list(nodes)) > len(nodes)
        Tensor.realize(*ws)


def test_an_sgd_step_is_p_minus_lr_times_g_with_no_multiply_by_one(training: None) -> None:
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal((4, 4)).astype(np.float32)
    p = Tensor(p0, requires_grad=True)
    opt = SGD([p], lr=0.1)
    (p * p).sum().backward()
    assert p.grad is not None
    g = p.grad.numpy()
    opt.schedule_step()
    ones = [
        u
        for u in p.uop.toposort()
        if u.op is Ops.MUL and any(s.op is Ops.CONST and s.arg == 1.0 for s in u.src)
    ]
    assert not ones
    p.realize()
    np.testing.assert_array_equal(p.numpy(), p0 - g * np.float32(0.1))


def test_a_callinfos_hash_is_its_fields_hash_computed_when_asked() -> None:
    a, b = CallInfo(None, (Metadata("x"),), "f"), CallInfo(None, (Metadata("x"),), "f")
    assert a == b and hash(a) == hash(b) == hash((None, (Metadata("x"),), "f", False, False))
    assert hash(CallInfo(None, (), "f")) != hash(CallInfo(None, (), "g")) or CallInfo(
        None, (), "f"
    ) != CallInfo(None, (), "g")
    unhashable = CallInfo(None, ([1],), "f")  # type: ignore[arg-type]  # (made fine; hashing it fails)
    with pytest.raises(TypeError):
        hash(unhashable)
    with pytest.raises(TypeError):
        hash(unhashable)  # (not remembered as anything)


def test_two_shapes_broadcast_as_the_general_rule_has_it() -> None:
    """broadcast_shape's two-shape path against its general one (a third shape, (), changes nothing)."""
    from itertools import product

    from uopgrad.mixin import broadcast_shape

    n, m = UOp.variable("n", 1, 8), UOp.variable("m", 1, 8)
    dims = [0, 1, 3, n, m]

    def outcome(*shapes: tuple[object, ...]) -> object:
        try:
            return broadcast_shape(*shapes)  # type: ignore[arg-type]
        except (ValueError, TypeError) as e:  # (a symbolic size against another: its truth is symbolic)
            return type(e)

    for la, lb in product(range(3), repeat=2):
        for a in product(dims, repeat=la):
            for b in product(dims, repeat=lb):
                assert outcome(a, b) == outcome(a, b, ()), (a, b)


@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 3, 4), (1, 1), (4, 1, 3), (0, 3)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_max_builds_the_general_paths_nodes(
    shape: tuple[int, ...], dt: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uopgrad.tensor_reduce as tensor_reduce

    taken: list[UOp] = []
    fast = tensor_reduce.max_nodes
    monkeypatch.setattr(tensor_reduce, "max_nodes", lambda *a: taken.append(fast(*a)) or taken[-1])
    x = Tensor(np.random.default_rng(1).standard_normal(shape).astype(dt), requires_grad=True)
    axes: list[int | tuple[int, ...] | None] = [None, -1, 0] + ([(0, -1)] if len(shape) > 1 else [])
    for axis in axes:
        for keepdim in (False, True):
            nan = x.isnan()  # the general path, as Tensor.max writes it for any float
            nans = nan.where(x, 0).sum(axis, keepdim)
            want = nans.isnan().where(nans, nan.where(-np.inf, x)._reduce(Ops.MAX, axis, keepdim))
            got = x._max(axis, keepdim)
            assert got.uop is want.uop and got.requires_grad, (shape, axis, keepdim)
            assert taken and taken[-1] is got.uop  # (the fast path built it)


def test_max_of_rows_with_nans_and_ties_and_of_half_and_ints() -> None:
    # docs/semantics.md §5: a NaN wins and takes the gradient; tied maxima (+0 and -0 too) share it
    rows = np.array([[1.0, np.nan, 3.0], [-0.0, 0.0, -1.0], [2.0, 5.0, 5.0]], np.float32)
    x = Tensor(rows, requires_grad=True)
    out = x.max(-1)
    out.sum().backward()
    np.testing.assert_array_equal(out.numpy(), np.max(rows, -1))
    assert x.grad is not None
    assert x.grad.numpy().tolist() == [[0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]
    assert Tensor(rows.astype(np.float16)).max(-1).dtype == dtypes.float16  # the general path
    assert Tensor(np.array([[3, 1], [2, 7]], np.int32)).max(-1).tolist() == [3, 7]
