"""Unit tests of uopgrad.uop: the interned node, its derived facts, constructors and traversals."""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
import pickle
import sys
from pathlib import Path

import pytest

from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from uopgrad.alu import ALU
from uopgrad.dtype import AddrSpace, DType
from uopgrad.facts import NOT_COMPUTED, Fact
from uopgrad.uop import CallInfo, Metadata, UOpMetaClass, all_metadata, shape_vec, vec_values

# ---------------------------------------------------------------------- helpers


def buf(*shape: int, dtype=dtypes.float, device="CPU") -> UOp:
    """A fresh BUFFER viewed with `shape`."""
    size = math.prod(shape)
    b = UOp.new_buffer(device, size, dtype)
    return b.reshape(shape) if shape != (size,) else b


def var(name="x", lo=0, hi=10) -> UOp:
    return UOp.variable(name, lo, hi)


# ---------------------------------------------------------------------- interning and identity


def test_interning_returns_the_same_object():
    assert UOp(Ops.CONST, dtypes.int, (), 3) is UOp(Ops.CONST, dtypes.int, (), 3)
    a = var("a")
    assert UOp(Ops.NEG, dtypes.index, (a,)) is UOp(Ops.NEG, dtypes.index, (a,))


def test_every_field_is_part_of_identity():
    base = UOp(Ops.CONST, dtypes.int, (), 3)
    assert UOp(Ops.CONST, dtypes.int32, (), 3) is base  # an alias is the same dtype
    assert UOp(Ops.CONST, dtypes.int64, (), 3) is not base
    assert UOp(Ops.CONST, dtypes.int, (), 4) is not base
    assert UOp(Ops.CONST, dtypes.int, (), 3, tag="t") is not base
    assert UOp(Ops.VCONST, dtypes.int, (), 3) is not base
    dev = UOp(Ops.DEVICE, arg="CPU")
    assert UOp(Ops.CONST, dtypes.int, (dev,), 3) is not base


def test_structurally_equal_graphs_built_twice_are_one_object():
    x, y = var("x"), var("y")
    assert (x + y) * 2 is (x + y) * 2
    assert ((x + y) * 2).key == ((x + y) * 2).key
    assert ((x + y) * 2).key != ((y + x) * 2).key


def test_eq_is_identity_and_truthiness_is_an_error():
    x = var("x")
    assert x == x and x is not var("y")
    # != builds a comparison node, as in the reference (only == is identity)
    assert (x != var("y")).op is Ops.CMPNE and (x != 3).src == (x, x.const_like(3))
    assert {x: 1}[var("x")] == 1
    with pytest.raises(TypeError):
        bool(x)


def test_weak_cache_drops_dead_nodes():
    key = (Ops.CONST, dtypes.int, (), 987_654_321, "test_weak_cache")
    u = UOp(*key)
    assert UOpMetaClass.ucache[key]() is u
    del u
    gc.collect()
    assert key not in UOpMetaClass.ucache


def test_weak_cache_drops_a_dead_chain():
    before = len(UOpMetaClass.ucache)
    u = UOp(Ops.CONST, dtypes.index, (), 123_456_789)
    for _ in range(2000):
        u = UOp(Ops.NEG, dtypes.index, (u,))
    assert len(UOpMetaClass.ucache) >= before + 2001
    del u
    gc.collect()
    assert len(UOpMetaClass.ucache) <= before


def test_threads_building_and_dropping_the_same_nodes_keep_one_node_per_key():
    """Threads that build the same nodes while others let them die: one live node per key, and no
    weakref callback fails (the warnings filter turns an ignored exception into a test error)."""
    import threading

    seen: list[list[UOp]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def work(i: int) -> None:
        start.wait()
        for rnd in range(2000):
            u = UOp(Ops.CONST, dtypes.int, (), rnd, "test_threads")  # new keys: every thread misses
            for k in range(4):
                u = UOp(Ops.NEG, dtypes.int, (u,), k)
            if rnd % 2 == 0:
                seen[i].append(u)  # kept alive: every thread must hold the very same object

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    for rnd in range(len(seen[0])):
        assert len({id(seen[i][rnd]) for i in range(4)}) == 1


def test_a_stale_callback_keeps_the_newer_nodes_entry():
    """A dead node's weakref callback that finds another node's entry under its key leaves it alone."""
    from uopgrad.uop import _drop_keyed, _KeyRef

    key = (Ops.CONST, dtypes.int, (), 24_680, "test_stale_callback")
    u = UOp(*key)
    stale = _KeyRef(u)  # not the cache's own ref, under the same key
    stale.key = key
    _drop_keyed(stale)
    assert UOpMetaClass.ucache[key]() is u
    assert UOp(*key) is u


def test_a_dead_entry_whose_callback_has_not_run_is_taken_over():
    """A miss that finds a dead node's entry (its callback still pending) writes its own over it, and the
    late callback then leaves the new entry alone."""
    from uopgrad.uop import _drop_keyed, _KeyRef

    key = (Ops.CONST, dtypes.int, (), 13_579, "test_dead_entry")
    victim = UOp(Ops.CONST, dtypes.int, (), 97_531, "test_dead_entry")
    dead = _KeyRef(victim)  # no callback: it stays in the cache, dead, as if its callback were pending
    dead.key = key
    UOpMetaClass.ucache[key] = dead
    del victim
    gc.collect()
    assert UOpMetaClass.ucache[key]() is None
    u = UOp(*key)
    assert UOpMetaClass.ucache[key]() is u and UOp(*key) is u
    _drop_keyed(dead)
    assert UOpMetaClass.ucache[key]() is u


def test_equal_dtypes_built_apart_intern_one_node():
    p1, p2 = dtypes.float.ptr(16), dtypes.float.ptr(16)
    assert p1 is p2  # dtypes are interned too
    assert p1 != dtypes.float.ptr(8) and p1 != dtypes.float and dtypes.float != p1
    assert UOp(Ops.PARAM, p1, (), 0) is UOp(Ops.PARAM, p2, (), 0)
    assert dtypes.is_int(dtypes.index) and dtypes.is_int(dtypes.uint8.vec(4))
    assert not dtypes.is_int(dtypes.bool)
    assert dtypes.is_float(dtypes.half.vec(2)) and dtypes.is_unsigned(dtypes.uint16)


def test_dtypes_intern_however_they_are_built():
    # equality and hashing are identity, so every way of building a dtype must give the one object
    f16 = dtypes.float.ptr(16)
    assert DType(13, 4, "float", "f") is dtypes.float
    assert DType(priority=13, itemsize=4, name="float", fmt="f", count=1) is dtypes.float
    assert dataclasses.replace(f16, size=16) is f16
    assert dataclasses.replace(f16, size=8) is dtypes.float.ptr(8)
    for dt in (dtypes.float, dtypes.half.vec(4), f16, dtypes.int.ptr(4, AddrSpace.LOCAL)):
        assert pickle.loads(pickle.dumps(dt)) is dt and copy.deepcopy(dt) is dt and copy.copy(dt) is dt
    assert len({dtypes.float.ptr(16) for _ in range(3)}) == 1
    with pytest.raises(TypeError, match="unknown field"):
        DType(13, 4, "float", "f", colour="red")
    with pytest.raises(TypeError, match="missing"):
        DType(13, 4)


def test_pickle_round_trip_interns():
    u = (var("x") + 1) * var("y")
    assert pickle.loads(pickle.dumps(u)) is u


def test_metadata_is_recorded_only_on_creation():
    m1, m2 = Metadata("first"), Metadata("second")
    u = UOp(Ops.CONST, dtypes.int, (), 5, "test_metadata", metadata=(m1,))
    assert all_metadata[u] == (m1,)
    assert UOp(Ops.CONST, dtypes.int, (), 5, "test_metadata", metadata=(m2,)) is u
    assert all_metadata[u] == (m1,)


# ---------------------------------------------------------------------- immutability, replace, rtag


def test_setattr_and_delattr_raise():
    u = UOp(Ops.CONST, dtypes.int, (), 3)
    for field in ("op", "dtype", "src", "arg", "tag", "anything"):
        with pytest.raises(AttributeError):
            setattr(u, field, None)
        with pytest.raises(AttributeError):
            delattr(u, field)
    assert u.arg == 3


def test_replace_returns_the_same_object_when_nothing_changes():
    x = var("x")
    u = x + 1
    assert u.replace() is u
    assert u.replace(op=u.op, dtype=u.dtype, src=u.src, arg=u.arg, tag=u.tag) is u
    assert u.replace(src=list(u.src)) is u


def test_replace_changes_fields():
    x, y = var("x"), var("y")
    u = x + y
    assert u.replace(op=Ops.MUL) is UOp(Ops.MUL, dtypes.index, (x, y))
    assert u.replace(src=(y, x)) is UOp(Ops.ADD, dtypes.index, (y, x))
    assert u.replace(dtype=dtypes.int).dtype == dtypes.int
    assert u.replace(arg=7).arg == 7


def test_replace_unknown_field_raises():
    with pytest.raises(TypeError):
        var("x").replace(shape=(1,))


def test_rtag():
    x = var("x")
    assert x.rtag().tag is True
    assert x.rtag("t") is x.replace(tag="t")
    assert x.rtag("t").rtag("t") is x.rtag("t")
    assert x.rtag(None) is x
    assert x.rtag("t").rtag(None) is x


# ---------------------------------------------------------------------- constants


def test_const_canonicalisation_signed_zero_and_nan():
    assert UOp.const(dtypes.float, 0.0) is not UOp.const(dtypes.float, -0.0)
    assert UOp.const(dtypes.float, math.nan) is UOp.const(dtypes.float, float("nan"))
    assert UOp.const(dtypes.float, 1.0) is UOp.const(dtypes.float, 1)
    nan = UOp.const(dtypes.float, math.nan).arg
    assert nan == nan


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_broadcast_constants_built_again_are_the_same_nodes_and_keep_the_sign_of_zero(first: float):
    other = -0.0 if first == 0.0 and math.copysign(1, first) > 0 else 0.0
    a = UOp.const(dtypes.float, first, "CPU", (2, 3))
    assert UOp.const(dtypes.float, first, "CPU", (2, 3)) is a
    b = UOp.const(dtypes.float, other, "CPU", (2, 3))
    assert math.copysign(1, a.base.arg) == math.copysign(1, first)
    assert math.copysign(1, b.base.arg) == math.copysign(1, other)
    assert (
        UOp.const(dtypes.int, True, "CPU", (2,)).base.arg == 1
        and type(UOp.const(dtypes.int, True, "CPU", (2,)).base.arg) is int
    )
    assert type(UOp.const(dtypes.bool, 1, "CPU", (2,)).base.arg) is bool


def test_const_canonicalisation_ints_and_bools():
    assert type(UOp.const(dtypes.int, 3.7).arg) is int and UOp.const(dtypes.int, 3.7).arg == 3
    assert UOp.const(dtypes.int8, 200).arg == -56  # wraps like the stored value
    assert type(UOp.const(dtypes.bool, 1).arg) is bool
    assert UOp.const(dtypes.bool, 1) is UOp.const(dtypes.bool, True)


def test_const_on_device_and_unique():
    c = UOp.const(dtypes.float, 2.0, "CPU")
    assert [s.op for s in c.src] == [Ops.DEVICE] and c.device == "CPU" and c.shape == ()
    u1 = UOp.const(dtypes.float, 2.0, "CPU", unique=True)
    u2 = UOp.const(dtypes.float, 2.0, "CPU", unique=True)
    assert u1 is not u2 and [s.op for s in u1.src] == [Ops.UNIQUE, Ops.DEVICE]
    with pytest.raises(ValueError):
        UOp.const(dtypes.float, 2.0, unique=True)


def test_const_with_shape_is_reshape_then_expand():
    c = UOp.const(dtypes.float, 1.0, "CPU", (2, 3))
    assert c.op is Ops.EXPAND and c.shape == (2, 3)
    assert c.src[0].op is Ops.RESHAPE and c.src[0].shape == (1, 1)
    assert c.src[0].src[0] is UOp.const(dtypes.float, 1.0, "CPU")


def test_const_like_shape_device_dtype():
    x = buf(2, 3)
    c = x.const_like(0)
    assert c.shape == (2, 3) and c.device == "CPU" and c.dtype == dtypes.float and c.base.arg == 0.0
    s = UOp.const(dtypes.int, 5, "CPU").const_like(2)
    assert s is UOp.const(dtypes.int, 2, "CPU")
    v = var("n")
    assert v.const_like(4) is UOp(Ops.CONST, dtypes.index, (), 4)


# ---------------------------------------------------------------------- the Ops enum


def _semantics_ops_order() -> list[str]:
    """docs/semantics.md §1.4's list of the ops, its `ALU` the rows of the ALU table in their order."""
    text = (Path(__file__).parents[3] / "docs" / "semantics.md").read_text()
    section = text[text.index("### 1.4 The Ops enum") : text.index("### 1.5")]
    listed = [name.strip() for name in section.split("```")[1].replace("\n", " ").split(",")]
    i = listed.index("ALU")
    return [*listed[:i], *(op.name for op in ALU), *listed[i + 1 :]]


def test_ops_order_matches_the_semantics_list_exactly():
    assert [op.name for op in Ops] == _semantics_ops_order()
    values = [op.value for op in Ops]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_reference_spec_lists_every_alu_op_once():
    # spec/reference.md §3 is the one list of the ALU ops (numerics and gradient): a row each, as ALU has
    text = (Path(__file__).parents[3] / "spec" / "reference.md").read_text()
    section = text[text.index("## 3. ALU ops") : text.index("## 4.")]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| ")]
    listed = [name.strip() for row in rows[1:] for name in row.split(",")]  # rows[0] is the header
    assert sorted(listed) == sorted(op.name for op in ALU)


# ---------------------------------------------------------------------- shapes


def test_shapeless_ops():
    x = buf(4)
    shapeless = [
        UOp(Ops.UNIQUE, arg=99),
        UOp(Ops.DEVICE, arg="CPU"),
        UOp(Ops.LUNIQUE, arg=0),
        x.sink(),
        UOp.maketuple(x),
        UOp(Ops.NOOP),
        UOp(Ops.MULTI, arg=0),
        (x + 1).call(),
        x.sink().call(),
    ]
    for u in shapeless:
        assert u._shape is None, u.op
        with pytest.raises(RuntimeError):
            u.shape


def test_scalar_and_leaf_shapes():
    v = var("n", 1, 8)
    assert UOp.const(dtypes.int, 1).shape == () and v.shape == () and v.bind(3).shape == ()
    assert UOp.new_buffer("CPU", 7, dtypes.int).shape == (7,)
    assert UOp(Ops.NOOP, dtypes.float, (buf(2, 3),)).shape == (2, 3)
    assert UOp.param(0, dtypes.float.ptr(12)).shape == (12,)
    assert UOp.param(0, dtypes.float, (2, v)).shape == (2, v)
    with pytest.raises(RuntimeError):
        UOp.param(0, dtypes.float).shape  # unknown shape


def test_pass_through_shapes():
    x = buf(2, 3)
    dep = UOp.new_buffer("CPU", 1, dtypes.int)
    for u in (
        x.detach(),
        x.contiguous_backward(),
        UOp(Ops.CONTIGUOUS, dtypes.float, (x,)),
        x.after(dep),
        x.copy_to_device("CPU:1"),
        UOp(Ops.REDUCE, dtypes.float, (x,), (Ops.ADD, ())),
    ):
        assert u.shape == (2, 3), u.op


def test_movement_shapes_and_marg():
    x = buf(2, 3)
    r = x.reshape(3, 2)
    assert r.op is Ops.RESHAPE and r.shape == (3, 2) and r.marg == (3, 2)
    assert x.reshape(-1).shape == (6,)
    e = x.reshape(2, 1, 3).expand(2, 4, 3)
    assert e.op is Ops.EXPAND and e.shape == (2, 4, 3) and e.marg == (2, 4, 3)
    p = x.permute(1, 0)
    assert p.op is Ops.PERMUTE and p.shape == (3, 2) and p.marg == (1, 0)
    pd = x.pad(((1, 0), (2, 3)))
    assert pd.op is Ops.PAD and pd.shape == (3, 8) and pd.marg == ((1, 0), (2, 3))
    s = x.shrink(((0, 1), (1, 3)))
    assert s.op is Ops.SHRINK and s.shape == (1, 2) and s.marg == ((0, 1), (1, 3))
    f = x.flip(1)
    assert f.op is Ops.FLIP and f.shape == (2, 3) and f.marg == (False, True)
    red = x._rop(Ops.MAX, (1,))
    assert red.shape == (2, 1)


def test_movement_arguments_are_encoded_as_shape_vectors():
    x = buf(2, 3)
    assert x.src[1] is UOp(Ops.VCONST, dtypes.index.vec(2), (), (2, 3))
    assert x.reshape(6).src[1] is UOp(Ops.CONST, dtypes.index, (), 6)
    assert x.pad(((1, 0), (2, 3))).src[1:] == (shape_vec((1, 2)), shape_vec((0, 3)))
    assert x.permute(1, 0).src == (x,) and x.flip(0).arg == (True, False)
    v = var("n")
    sv = shape_vec((v, 3))
    assert sv.op is Ops.STACK and sv.src == (v, UOp(Ops.CONST, dtypes.index, (), 3))
    assert vec_values(sv) == (v, 3)
    assert shape_vec(()) is UOp(Ops.STACK, dtypes.index.vec(0)) and vec_values(shape_vec(())) == ()


def test_movement_methods_return_self_when_nothing_changes():
    x = buf(2, 3)
    assert x.reshape(2, 3) is x and x.expand(2, 3) is x and x.permute(0, 1) is x
    assert x.pad(((0, 0), (0, 0))) is x and x.shrink(((0, 2), (0, 3))) is x and x.flip() is x


@pytest.mark.parametrize(
    "make",
    [
        lambda x: UOp(Ops.RESHAPE, x.dtype, (x, shape_vec((4,)))),  # element count differs
        lambda x: UOp(Ops.RESHAPE, x.dtype, (x, shape_vec((6, -1)))),  # negative dimension
        lambda x: UOp(Ops.EXPAND, x.dtype, (x, shape_vec((6, 2)))),  # rank differs
        lambda x: UOp(Ops.EXPAND, x.dtype, (x, shape_vec((7,)))),  # 6 can't grow
        lambda x: UOp(Ops.PERMUTE, x.dtype, (x,), (1, 0)),  # too many axes
        lambda x: UOp(Ops.PAD, x.dtype, (x, shape_vec((-1,)), shape_vec((0,)))),  # negative pad
        lambda x: UOp(Ops.PAD, x.dtype, (x, shape_vec((1, 1)), shape_vec((0, 0)))),  # pairs != rank
        lambda x: UOp(Ops.SHRINK, x.dtype, (x, shape_vec((2,)), shape_vec((1,)))),  # start > end
        lambda x: UOp(Ops.SHRINK, x.dtype, (x, shape_vec((0,)), shape_vec((7,)))),  # out of bounds
        lambda x: UOp(Ops.FLIP, x.dtype, (x,), (True, False)),  # flags != rank
        lambda x: UOp(Ops.REDUCE, x.dtype, (x,), (Ops.ADD, (1,))),  # axis out of range
        lambda x: UOp(Ops.EXPAND, x.dtype, (x.reshape(6, 1), shape_vec((6, -3)))),  # negative size
    ],
)
def test_bad_movement_arguments_raise_value_error(make):
    with pytest.raises(ValueError):
        make(UOp.new_buffer("CPU", 6, dtypes.float)).shape


def test_movement_on_a_shapeless_node_raises_runtime_error():
    d = UOp(Ops.DEVICE, arg="CPU")
    for u in (
        UOp(Ops.RESHAPE, dtypes.float, (d, shape_vec((1,)))),
        UOp(Ops.PERMUTE, dtypes.float, (d,), ()),
        UOp(Ops.REDUCE, dtypes.float, (d,), (Ops.ADD, (0,))),
    ):
        with pytest.raises(RuntimeError):
            u.shape


def test_elementwise_shape_mismatch_raises_runtime_error():
    a, b = buf(2, 3), buf(6)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        UOp(Ops.ADD, dtypes.float, (a, b)).shape
    with pytest.raises(RuntimeError):
        UOp(Ops.ADD, dtypes.float, (a, a.sink())).shape  # a shapeless source
    # the error surfaces on consumers too, and only when a shape is asked for
    bad = UOp(Ops.ADD, dtypes.float, (a, b))
    consumer = UOp(Ops.NEG, dtypes.float, (bad,))
    with pytest.raises(RuntimeError):
        consumer.shape


def test_threads_asking_facts_of_one_new_graph_all_get_them():
    """Facts of a fresh graph filled by several threads at once, each walking it in its own order: every
    thread gets every node's fact, and every node ends up holding it."""
    import threading

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for trial in range(20):
            x = UOp.variable(f"threads_{trial}", 0, 10)
            nodes = [x]
            for i in range(300):
                nodes.append(nodes[-1] * (i + 2) + i)
            errors: list[BaseException] = []
            start = threading.Barrier(8)
            op_fact: Fact[Ops] = Fact("test_threads", lambda n: n.op)

            def ask(
                order: list[UOp],
                start: threading.Barrier = start,
                errors: list[BaseException] = errors,
                op_fact: Fact[Ops] = op_fact,
            ) -> None:
                try:
                    start.wait()
                    for u in order:
                        assert op_fact(u) is u.op
                except BaseException as e:  # reported by the main thread
                    errors.append(e)

            orders = [nodes[k::3] + nodes[::-1] for k in range(8)]
            threads = [threading.Thread(target=ask, args=(o,)) for o in orders]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[0]
            assert all(op_fact.get(u) is u.op for u in nodes)
    finally:
        sys.setswitchinterval(old)


def test_a_fact_is_computed_once_per_node_sources_first():
    """A node asked for a fact computes it for every node under it that lacks it, in toposort order; a node
    built later on sources that have it computes only itself (a cached fact is never recomputed)."""
    calls: list[UOp] = []

    def count(u: UOp) -> int:
        assert all(counted.known(s) for s in u.src)  # sources first
        calls.append(u)
        return len(calls)

    counted: Fact[int] = Fact("test_count", count)

    x = UOp.variable("fact_x", 0, 10)
    y = (x + 1) * 2
    assert counted(y) == len(calls) == len(y.toposort())
    assert calls == list(y.toposort())
    calls.clear()
    z = y + 3
    assert counted(z) == 2 and calls == list(z.toposort())[-2:]  # the new const, then z
    calls.clear()
    assert counted(z * 4) == 2 and len(calls) == 2  # a fresh count: 4, then the MUL
    calls.clear()
    v = UOp(Ops.NEG, dtypes.index, (z,))
    assert counted(v) == 1 and calls == [v]  # built on a source that has it: v alone
    calls.clear()
    w = z - y
    counted(w)
    assert counted(y) == len(y.toposort())  # cached, not recomputed
    assert len(calls) == len([u for u in w.toposort() if u not in z.toposort()])


def test_facts_start_not_computed_and_are_kept_by_the_node():
    """Every fact slot of a new node holds NOT_COMPUTED (no slot is left unset), and a Fact without a rule
    is filled by its module's own walk through known/get/put."""
    u = UOp(Ops.CONST, dtypes.int, (), 987_654_323, "test_fresh_facts")
    assert u._shape_fact is NOT_COMPUTED and u._device_fact is NOT_COMPUTED and not u._facts
    assert u.device is None and u._device_fact is None and u.shape == () and u._shape_fact == ()
    mark: Fact[str] = Fact("test_mark")
    assert not mark.known(u) and mark.get(u) is NOT_COMPUTED
    mark.put(u, "seen")
    assert mark.known(u) and mark.get(u) == "seen" and mark(u) == "seen"
    with pytest.raises(TypeError, match="no rule"):
        mark(u + 1)


def test_a_failed_fact_is_kept_and_raised_where_asked():
    from uopgrad.errors import ShapeError

    asked: list[UOp] = []

    def fails(u: UOp) -> int:
        asked.append(u)
        raise ShapeError(f"no fact for {u.op}")

    failing: Fact[int] = Fact("test_failing", fails)
    x = var("failed_x")
    for _ in range(2):
        with pytest.raises(ShapeError, match="DEFINE_VAR"):
            failing(x)
    assert asked == [x]  # computed once, raised twice


def test_reference_spellings_are_aliases():
    x = buf(2, 3)
    assert x.numel() == x.size == 6
    assert x.backward_slice_with_self == x.toposort()
    assert repr(x) == x.pretty() and x.short().startswith("UOp(Ops.RESHAPE")
    assert x.to_dot().startswith("digraph uop {")


def test_binary_sugar_broadcasts_and_promotes():
    a, b = buf(2, 1), buf(3, dtype=dtypes.int)
    c = a + b
    assert c.shape == (2, 3) and c.dtype == dtypes.float
    assert c.src[1].op is Ops.CAST and c.src[1].src[0].op is Ops.EXPAND
    assert (a < 1).dtype == dtypes.bool and (a < 1).op is Ops.CMPLT


def test_device_inference():
    x = buf(4)
    assert x.device == "CPU" and UOp(Ops.DEVICE, arg=("A", "B")).device == ("A", "B")
    assert x.copy_to_device("CPU:1").device == "CPU:1"
    assert (x + 1).device == "CPU" and var("x").device is None
    assert UOp.new_buffer("GPU", 4, dtypes.float).after(x).device == "GPU"


# ---------------------------------------------------------------------- PARAM


def test_param_layout():
    p = UOp.param(3, dtypes.float, (2, 3), "CPU")
    assert p.op is Ops.PARAM and p.arg == 3 and p.dtype == dtypes.float
    assert p.src == (shape_vec((2, 3)), UOp(Ops.DEVICE, arg="CPU")) and p.shape == (2, 3)
    assert UOp.param(3, dtypes.float, (2, 3), "CPU") is p
    unknown = UOp.param(0, dtypes.int)
    assert unknown.src == (UOp(Ops.NOOP), UOp(Ops.NOOP))
    full = UOp.param(1, dtypes.int, (), None, (0, 7), "k")
    assert [s.op for s in full.src] == [Ops.STACK, Ops.NOOP, Ops.CONST, Ops.CONST, Ops.NOOP]
    assert full.src[2] is UOp.const(dtypes.int, 0) and full.src[3] is UOp.const(dtypes.int, 7)
    assert full.src[4].arg == "k" and full.shape == ()


def test_param_like_of_a_value():
    x = buf(2, 3)
    assert x.param_like(2) is UOp.param(2, dtypes.float, (2, 3), "CPU")
    assert var("n").param_like(0) is UOp.param(0, dtypes.index, ())


def test_param_like_of_a_bind_is_a_variable_param():
    # observed at the reference: PARAM(arg=5, src=(STACK<empty>, NOOP, CONST 0, CONST 7, NOOP('sp')))
    p = UOp.variable("sp", 0, 7).bind(3).param_like(5)
    assert p.arg == 5 and p.dtype == dtypes.index
    assert p.src == (
        UOp(Ops.STACK, dtypes.index.vec(0)),
        UOp(Ops.NOOP),
        UOp(Ops.CONST, dtypes.index, (), 0),
        UOp(Ops.CONST, dtypes.index, (), 7),
        UOp(Ops.NOOP, arg="sp"),
    )
    assert p.shape == ()


def test_param_range_comes_from_its_vmin_vmax_sources():
    p = UOp.variable("sp", 0, 7).bind(3).param_like(5)
    assert (p.vmin, p.vmax) == (0, 7)


def test_param_like_of_a_sharded_value_appends_a_multi_marker():
    shard = UOp.new_buffer(("CPU", "CPU:1"), 4, dtypes.float).reshape(2, 2)
    m = UOp(Ops.MULTI, dtypes.float, (shard,), 0)
    assert m.shape == (4, 2) and m.axis == 0
    p = m.param_like(0)
    assert p.src == (shape_vec((4, 2)), UOp(Ops.DEVICE, arg=("CPU", "CPU:1")), UOp(Ops.MULTI, arg=0))
    assert p.axis == 0 and p.shape == (4, 2)


def test_const_like_of_a_sharded_value_is_a_multi():
    shard = UOp.new_buffer(("CPU", "CPU:1"), 4, dtypes.float).reshape(2, 2)
    c = UOp(Ops.MULTI, dtypes.float, (shard,), 0).const_like(1.0)
    assert c.op is Ops.MULTI and c.axis == 0 and c.shape == (4, 2) and c.src[0].shape == (2, 2)


# ---------------------------------------------------------------------- calls, tuples


def test_call_makes_a_function_with_a_tuple_body():
    x = buf(2, 3)
    p = x.param_like(0)
    f = (p * 2).call(x, name="double")
    assert f.op is Ops.FUNCTION and f.dtype == dtypes.void and f.src[1:] == (x,)
    assert f.src[0] is UOp.maketuple(p * 2) and f.arg.name == "double"
    t = UOp.maketuple(p, p + 1)
    assert t.call(x).src[0] is t  # a TUPLE body is not wrapped again
    assert (p * 2).call(x, name="double") is f


def test_call_of_an_opaque_body_makes_a_call():
    x = buf(4)
    p = x.param_like(0)
    k = p.store(p + 1).sink().call(x)
    assert k.op is Ops.CALL and k.src[0].op is Ops.SINK and k.src[1:] == (x,)
    with pytest.raises(AssertionError):
        k.gettuple(0)


def test_gettuple():
    x = buf(4)
    t = UOp.maketuple(x, x.cast(dtypes.int))
    g = t.gettuple(1)
    assert g.op is Ops.GETTUPLE and g.arg == 1 and g.dtype == dtypes.int and g.src == (t,) and g.shape == (4,)
    f = t.call()
    assert f.gettuple(0).src == (f,) and f.gettuple(0).dtype == dtypes.float
    with pytest.raises(IndexError):
        t.gettuple(2)
    with pytest.raises(AssertionError):
        x.gettuple(0)
    assert UOp.maketuple()._shape is None


def test_gettuple_shape_substitutes_symbolic_params_by_arguments():
    bound = UOp.variable("n", 1, 10).bind(4)
    n = bound.param_like(1)
    p0 = UOp.param(0, dtypes.float, (n, 3), "CPU")
    assert p0.shape == (n, 3)
    arg0 = buf(4, 3).shrink(((0, bound), (0, 3)))
    assert arg0.shape == (bound, 3)
    f = (p0 * 2).call(arg0, bound)
    assert f.src[0].src[0].shape == (n, 3)  # inside the body: the body's terms
    assert f.gettuple(0).shape == (bound, 3)  # outside: the caller's terms
    t = UOp.maketuple(p0 * 2)
    assert t.gettuple(0).shape == (n, 3)  # a plain TUPLE substitutes nothing


def test_call_info_equality_hash_and_pickling():
    def grad(*args):
        return (None,)

    a, b = CallInfo(grad, (), "f", True, False), CallInfo(grad, (), "f", True, False)
    assert a == b and hash(a) == hash(b)
    assert a != CallInfo(grad, (), "g", True, False) and a != CallInfo(None, (), "f", True, False)
    assert [f.name for f in a.__dataclass_fields__.values()] == [
        "grad_fxn",
        "metadata",
        "name",
        "precompile",
        "precompile_backward",
    ]
    restored = pickle.loads(pickle.dumps(a))
    assert restored.grad_fxn is None and restored == CallInfo(None, (), "f", True, False)
    assert "grad_fxn 0x" in repr(a) and "grad at" not in repr(a)
    x = buf(3)
    body = x.param_like(0) + 1
    assert body.call(x, grad_fxn=grad, name="f") is body.call(x, grad_fxn=grad, name="f")


def test_sink_after_store_detach():
    x, y = buf(3), buf(3)
    assert x.sink(y) is UOp(Ops.SINK, dtypes.void, (x, y))
    st = x.store(y)
    assert st.op is Ops.STORE and st.dtype == dtypes.void and st.src == (x, y)
    assert x.after(st) is UOp(Ops.AFTER, dtypes.float, (x, st))
    assert x.detach().op is Ops.DETACH and x.detach().dtype == x.dtype
    assert x.contiguous_backward().op is Ops.CONTIGUOUS_BACKWARD


def test_contiguous_buffer_identity():
    x = UOp.new_buffer("CPU", 6, dtypes.float)
    p = UOp.param(0, dtypes.float, (6,), "CPU")
    view = UOp(Ops.BUFFER_VIEW, dtypes.float, (x,), (6, 0))
    multi = UOp(Ops.MULTI, dtypes.float, (x,), 0)
    kept = [
        x,
        p,
        view,
        x.reshape(2, 3),
        multi,
        multi.reshape(2, 3),
        UOp.maketuple(x).gettuple(0),
        UOp.maketuple(x.reshape(3, 2)).gettuple(0),
    ]
    for u in kept:
        assert u.contiguous() is u, u.op
    c = (x + 1).contiguous()
    assert c.op is Ops.CONTIGUOUS and c.contiguous() is c
    for u in (
        x.reshape(2, 3).permute(1, 0),
        x.reshape(1, 6).expand(2, 6),
        x.flip(0),
        x + 1,
        (x.param_like(0) + 1).call(x).gettuple(0),
    ):
        assert u.contiguous().op is Ops.CONTIGUOUS and u.contiguous().src == (u,)


def test_rop():
    x = buf(2, 1, 3)
    r = x._rop(Ops.ADD, (2, 0, 1, 2))
    assert r.op is Ops.REDUCE and r.arg == (Ops.ADD, (0, 2)) and r.shape == (1, 1, 1) and r.dtype == x.dtype
    assert x._rop(Ops.MAX, (1,)) is x
    assert x._rop(Ops.MUL, ()) is x


def test_bind_and_variable():
    v = UOp.variable("n", 1, 10)
    b = v.bind(4)
    assert b.op is Ops.BIND and b.src == (v, UOp(Ops.CONST, dtypes.index, (), 4)) and b.unbind() == (v, 4)
    assert v.expr == "n" and v.vmin == 1 and v.vmax == 10
    with pytest.raises(ValueError):
        v.bind(11)
    with pytest.raises(TypeError):
        b.bind(1)


# ---------------------------------------------------------------------- traversals


def test_toposort_order_for_a_shared_source():
    # semantics §1.8: for A = X*Y with X = Y+Z, toposort() gives Y, Z, X, A
    y, z = var("y"), var("z")
    x = y + z
    a = x * y
    assert list(a.toposort()) == [y, z, x, a]


def test_rewrite_orders_for_a_shared_source():
    # semantics §1.8 (observed): BPM visits A, X, Z, Y; PM finalises Z, Y, X, A
    y, z = var("y"), var("z")
    x = y + z
    a = x * y
    seen: list[UOp] = []
    record = PatternMatcher([(UPat(name="u"), lambda u: seen.append(u))])
    graph_rewrite(a, record, bottom_up=True)
    assert seen == [a, x, z, y]
    seen.clear()
    graph_rewrite(a, record)
    assert seen == [z, y, x, a]


def test_toposort_is_leftmost_deepest_first_and_unique():
    a, b, c = var("a"), var("b"), var("c")
    t = (a + b) * (b + c)
    assert list(t.toposort()) == [a, b, a + b, c, b + c, t]
    assert t.backward_slice == dict.fromkeys([a, b, a + b, c, b + c])
    assert list(t.backward_slice_with_self) == list(t.toposort())
    assert t.op_in_backward_slice_with_self(Ops.DEFINE_VAR) and not t.op_in_backward_slice_with_self(Ops.SIN)


def test_toposort_gate_excludes_and_stops_and_is_reevaluated():
    a, b = var("a"), var("b")
    shared = a + b
    root = UOp(Ops.SINK, dtypes.void, (shared * 2, shared))
    calls: list[UOp] = []

    def gate(u: UOp) -> bool:
        calls.append(u)
        return u is not shared

    order = root.toposort(gate=gate)
    assert shared not in order and a not in order and b not in order
    assert calls.count(shared) == 2  # reached twice, asked twice
    assert root in order and shared * 2 in order


def test_toposort_enter_calls():
    x = buf(4)
    p = x.param_like(0)
    body = p.sin()
    f = body.call(x)
    g = f.gettuple(0)
    inside = g.toposort()
    assert p in inside and body in inside and f.src[0] in inside
    outside = g.toposort(enter_calls=False)
    assert p not in outside and body not in outside and f.src[0] not in outside
    assert x in outside and f in outside and g in outside
    k = p.store(body).sink().call(x)
    assert p not in k.toposort(enter_calls=False) and p in k.toposort()


def test_topovisit_post_order_and_memo():
    a, b = var("a"), var("b")
    s = a + b
    root = s * a
    visited: list[UOp] = []

    def depth(u: UOp) -> int:
        visited.append(u)
        return 1 + max((cache[x] for x in u.src), default=0)

    cache: dict[UOp, int] = {}
    assert root.topovisit(depth, cache) == 3
    assert visited == [a, b, s, root] and cache[s] == 2
    visited.clear()
    cache = {s: 10}
    assert root.topovisit(depth, cache) == 11
    assert visited == [a, root]  # s and everything only below it is memoised
    visited.clear()
    assert root.topovisit(depth, cache) == 11 and visited == []


def test_topovisit_enters_call_bodies():
    x = buf(4)
    f = (x.param_like(0) + 1).call(x)
    ops = f.topovisit(lambda u: u.op, {})
    assert ops is Ops.FUNCTION
    cache: dict[UOp, Ops] = {}
    f.topovisit(lambda u: u.op, cache)
    assert Ops.PARAM in cache.values()


# ---------------------------------------------------------------------- substitute


def test_substitute_fixpoint_and_walk():
    a, b, c, d = var("a"), var("b"), var("c"), var("d")
    expr = a + 4
    assert expr.substitute({a: b + c, b: d}) is (d + c) + 4
    assert expr.substitute({a: b + c, b: d}, walk=True) is (b + c) + 4
    assert expr.substitute({a: a}) is expr
    # simultaneous renaming needs walk
    assert (a * b).substitute({a: b, b: c}, walk=True) is b * c


def test_substitute_never_enters_call_bodies():
    x, y = buf(4), buf(4)
    p = x.param_like(0)
    f = (p + 1).call(x)
    out = f.substitute({x: y, p: UOp.param(0, dtypes.float, (4,), "CPU:1")})
    assert out.src[0] is f.src[0] and out.src[1:] == (y,)


# ---------------------------------------------------------------------- deep graphs


N_DEEP = 100_000


@pytest.fixture(scope="module")
def deep_chain() -> tuple[UOp, UOp]:
    x = var("deep_x", 0, 1)
    one = UOp(Ops.CONST, dtypes.index, (), 1)
    u = x
    for _ in range(N_DEEP):
        u = UOp(Ops.ADD, dtypes.index, (u, one))
    return x, u


def test_deep_chain_toposorts(deep_chain):
    assert sys.getrecursionlimit() <= 10_000
    x, top = deep_chain
    order = list(top.toposort())
    assert len(order) == N_DEEP + 2 and order[0] is x and order[-1] is top
    assert top.shape == () and len(top.key) == 32


def test_deep_chain_rewrites(deep_chain):
    x, top = deep_chain
    y = var("deep_y", 0, 1)
    swap = PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=x.arg), lambda: y)])  # x -> y
    out = graph_rewrite(top, swap)
    assert out is not top and out.op is Ops.ADD
    assert out.toposort().keys() - top.toposort().keys() and y in out.toposort() and x not in out.toposort()


def test_deep_chain_substitutes(deep_chain):
    x, top = deep_chain
    z = var("deep_z", 0, 1)
    out = top.substitute({x: z})
    bottom = out
    for _ in range(N_DEEP):
        bottom = bottom.src[0]
    assert bottom is z
    assert top.substitute({x: z}, walk=True) is out


# ---------------------------------------------------------------------- raw construction


def test_list_sources_are_stored_as_a_tuple():
    x = var("x")
    u = UOp(Ops.NEG, dtypes.index, (x,))
    assert UOp(Ops.NEG, dtypes.index, [x]) is u
