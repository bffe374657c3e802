"""Hostile use of TinyJit (issue 32, item 6; spec/realize.md, Captured steps): a jitted function that calls
itself, directly or through another TinyJit; arguments other than Tensors that change between calls; one
TinyJit called from several threads. Each case ends in the right value or a clear JitError, never a hang or a
replay that silently keeps a captured value. A case that could hang runs in a daemon thread joined with a
timeout. `HOSTILE_STATS` counts the cases by class ("jit") for the report, as spec/test_hostile.py does."""

from __future__ import annotations

import math
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopgrad import Device, Tensor, TinyJit, UOp
from uopgrad.errors import JitError

HOSTILE_STATS: Counter[str] = Counter()
DEV = "CPU"
pytestmark = pytest.mark.skipif("CPU" not in Device, reason="a capture needs uopgrad-cpu")
LIMIT = float(os.environ.get("HOSTILE_JIT_LIMIT", "60"))  # seconds a case may take before it counts as hung


def bounded(fn: Callable[[], Any], limit: float = LIMIT) -> Any:
    """fn() in a daemon thread: its result, or the exception it raised; fails (never hangs) if it does not
    finish in time."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # handed to the caller
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"hung: still running after {limit} s"
    HOSTILE_STATS["jit"] += 1
    return out[0]


def arr(k: int, n: int = 4) -> Tensor:
    return Tensor(np.arange(n, dtype=np.float32) + k, device=DEV)


# ---------------------------------------------------------------------- re-entry


def test_a_jit_that_calls_itself_raises_naming_it() -> None:
    @TinyJit
    def again(x: Tensor) -> Tensor:
        return again(x * 2)

    err = bounded(lambda: again(arr(0)))
    assert isinstance(err, JitError) and "'again'" in str(err) and "again -> again" in str(err)
    assert bounded(lambda: again.reset()) is None  # the lock was released: it can be used again


@pytest.mark.parametrize("call", [0, 1], ids=["first call", "capturing call"])
def test_a_jit_that_calls_itself_on_a_later_call_raises(call: int) -> None:
    calls = [0]

    @TinyJit
    def f(x: Tensor) -> Tensor:
        calls[0] += 1
        if calls[0] == call + 1:
            return f(x)
        return (x + 1).contiguous()

    for _ in range(call):
        f(arr(0))
    err = bounded(lambda: f(arr(1)))
    assert isinstance(err, JitError) and "'f'" in str(err), err


def test_recursion_through_two_jits_raises_naming_both() -> None:
    @TinyJit
    def ping(x: Tensor) -> Tensor:
        return pong(x + 1)

    @TinyJit
    def pong(x: Tensor) -> Tensor:
        return ping(x * 2)

    err = bounded(lambda: ping(arr(0)))
    assert isinstance(err, JitError) and "ping -> pong -> ping" in str(err), err
    out = bounded(lambda: pong.fxn.__name__)  # neither lock is left held
    assert out == "pong" and bounded(ping.reset) is None and bounded(pong.reset) is None


def test_reset_from_inside_the_function_raises() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        f.reset()
        return x

    err = bounded(lambda: f(arr(0)))
    assert isinstance(err, JitError) and "reset while it runs" in str(err)


def test_a_captured_jit_called_inside_another_s_capture_raises() -> None:
    """Its replay would launch kernels the outer capture does not record (so later outer replays would skip
    them): a clear error, as for a nested capture."""

    @TinyJit
    def inner(x: Tensor) -> Tensor:
        return (x + 1).contiguous()

    @TinyJit
    def outer(x: Tensor) -> Tensor:
        return (inner(x) * 2).contiguous()

    for k in range(3):
        inner(arr(k))  # captured and replaying
    np.testing.assert_allclose(bounded(lambda: outer(arr(0))).numpy(), (np.arange(4) + 1) * 2)
    err = bounded(lambda: outer(arr(1)))
    assert isinstance(err, JitError) and "captures" in str(err)


# ---------------------------------------------------------------------- arguments other than Tensors

CHANGES = [
    (1, 2),
    (0.1, 0.01),
    ("sum", "max"),
    (None, 0),
    ((1, 2), (1, 3)),
    (1, 1.0),
    (1, True),
    (0.0, -0.0),
    ([0.5, 1], [0.5, 2]),
]


@pytest.mark.parametrize("by", ["position", "keyword"])
@pytest.mark.parametrize(("old", "new"), CHANGES, ids=[f"{a!r}->{b!r}" for a, b in CHANGES])
def test_a_changed_argument_raises_never_replays_the_captured_one(by: str, old: object, new: object) -> None:
    ran: list[object] = []

    @TinyJit
    def step(x: Tensor, lr: object = None) -> Tensor:
        ran.append(lr)
        return (x * 3).contiguous()

    def call(v: object) -> Tensor:
        return step(arr(0), v) if by == "position" else step(arr(0), lr=v)

    for _ in range(4):
        call(old)
    assert len(ran) == 2, "the calls after the capture replay it"
    err = bounded(lambda: call(new))
    label = "argument 1 = " if by == "position" else "lr="
    assert isinstance(err, JitError), f"{old!r} -> {new!r} was replayed"
    assert f"captured with {label}{old!r} and is now called with {label}{new!r}" in str(err), str(err)
    assert "Tensor" in str(err) and "TinyJit" in str(err)
    assert bounded(lambda: call(old)).numpy().tolist() == [0, 3, 6, 9]  # the captured value still replays


@pytest.mark.parametrize(
    "value", [0.1, 7, "mean", None, (2, "x"), math.nan, np.float32(0.5), [1, (2, 3)]], ids=repr
)
def test_an_unchanged_argument_replays(value: object) -> None:
    ran = [0]

    @TinyJit
    def step(x: Tensor, opt: object, *, mode: object) -> Tensor:
        ran[0] += 1
        return (x + 1).contiguous()

    for k in range(5):  # an equal value built anew each call (a new list, a new NaN) is the same argument
        again = float("nan") if value != value else list(value) if isinstance(value, list) else value
        out = step(arr(k), again, mode=again)
        assert out.numpy().tolist() == (np.arange(4) + k + 1).tolist()
    assert ran[0] == 2 and step.captured is not None
    HOSTILE_STATS["jit"] += 1


def test_another_set_of_arguments_raises() -> None:
    @TinyJit
    def step(x: Tensor, lr: float = 0.1) -> Tensor:
        return (x * lr).contiguous()

    for _ in range(3):
        step(arr(0))
    for call in (lambda: step(arr(0), 0.1), lambda: step(arr(0), lr=0.1), lambda: step(x=arr(0))):
        err = bounded(call)
        assert isinstance(err, JitError) and "arguments" in str(err), err


def test_a_class_level_jit_called_on_another_instance_raises() -> None:
    """A TinyJit on a method captures one instance's weights: another instance must not replay them."""

    class Model:
        def __init__(self, k: int) -> None:
            self.w = arr(k)

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return (x * self.w).contiguous()

    a, b = Model(1), Model(5)
    for _ in range(3):
        assert a(arr(0)).numpy().tolist() == (np.arange(4) * (np.arange(4) + 1)).tolist()
    err = bounded(lambda: b(arr(0)))
    assert isinstance(err, JitError) and "argument 0" in str(err) and "Model" in str(err), err


def test_a_new_array_or_function_each_call_raises_the_same_one_replays() -> None:
    @TinyJit
    def f(x: Tensor, table: Any, fn: Callable[[Tensor], Tensor]) -> Tensor:
        return fn(x).contiguous()

    table = np.ones(3)
    for _ in range(3):
        assert f(arr(0), table, Tensor.relu).numpy().tolist() == [0, 1, 2, 3]
    err = bounded(lambda: f(arr(0), np.ones(3), Tensor.relu))
    assert isinstance(err, JitError) and "(another object)" in str(err), err
    assert isinstance(bounded(lambda: f(arr(0), table, lambda t: t * 2)), JitError)


def test_a_bound_variable_argument_replays_with_each_call_s_value() -> None:
    """tinygrad's rule: a bound variable is an input; each replay runs with its value."""
    n = UOp.variable("jit_n", 1, 100)

    @TinyJit
    def scale(x: Tensor, v: UOp) -> Tensor:
        return (x * Tensor(v).float()).contiguous()

    for k in range(1, 7):
        assert scale(arr(0), n.bind(k)).numpy().tolist() == (np.arange(4) * k).tolist()
    assert scale.captured is not None
    err = bounded(lambda: scale(arr(0), 3))  # an int where the variable was: fixed, and not the same
    assert isinstance(err, JitError) and "variable 'jit_n'" in str(err)
    HOSTILE_STATS["jit"] += 1


def test_keyword_order_does_not_swap_inputs() -> None:
    @TinyJit
    def f(*, a: list[Tensor], b: list[Tensor]) -> Tensor:
        return (a[0] - b[0]).contiguous()

    for k in range(3):
        assert f(a=[arr(k)], b=[arr(0)]).numpy().tolist() == [k] * 4
    assert bounded(lambda: f(b=[arr(0)], a=[arr(9)])).numpy().tolist() == [9] * 4


# ---------------------------------------------------------------------- threads


def test_one_jit_called_from_several_threads_serialises_its_calls() -> None:
    """Calls from other threads wait for the running one: every update of the state lands once."""
    acc = Tensor(np.zeros(4, np.float32), device=DEV).contiguous().realize()

    @TinyJit
    def add(x: Tensor) -> Tensor:
        acc.assign(acc + x).realize()
        return acc

    def work(t: int) -> None:
        for k in range(10):
            add(arr(t * 10 + k))

    def run_all() -> None:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    assert bounded(run_all) is None
    assert acc.numpy().tolist() == (np.arange(4) * 40 + sum(range(40))).tolist()
    assert add.cnt == 40 and add.captured is not None


def test_a_top_level_call_waits_for_another_thread_s_call() -> None:
    started, release = threading.Event(), threading.Event()

    @TinyJit
    def slow(x: Tensor) -> Tensor:
        started.set()
        assert release.wait(LIMIT)
        return (x + 1).contiguous()

    first = threading.Thread(target=lambda: slow(arr(0)), daemon=True)
    first.start()
    assert started.wait(LIMIT)
    second: list[Any] = []
    waiter = threading.Thread(target=lambda: second.append(slow(arr(1))), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not second, "the second call waits while the first runs"
    release.set()
    first.join(LIMIT)
    waiter.join(LIMIT)
    assert not first.is_alive() and not waiter.is_alive()
    assert second[0].numpy().tolist() == [2, 3, 4, 5]
    HOSTILE_STATS["jit"] += 1


def test_two_threads_entering_two_jits_in_opposite_orders_do_not_deadlock() -> None:
    """Thread A inside `f` calls `g` while thread B inside `g` calls `f`: waiting would deadlock, so a call
    made from inside a TinyJit to one that is busy raises at once."""
    both_in = threading.Barrier(2)
    b_called_f = threading.Event()  # A stays inside f until B's call of f has returned or raised: otherwise,
    # on a loaded machine, A could leave f first and B would enter an idle f (no conflict to test)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        both_in.wait(LIMIT)
        try:
            return g(x + 1)
        finally:
            b_called_f.wait(LIMIT)

    @TinyJit
    def g(x: Tensor) -> Tensor:
        if not both_in.broken and threading.current_thread().name == "B":
            both_in.wait(LIMIT)
            try:
                return f(x * 2)
            finally:
                b_called_f.set()
        return (x * 2).contiguous()

    results: dict[str, Any] = {}

    def run(name: str, fn: Callable[[], Any]) -> None:
        try:
            results[name] = fn()
        except BaseException as e:  # checked below
            results[name] = e

    a = threading.Thread(target=run, args=("A", lambda: f(arr(0))), name="A", daemon=True)
    b = threading.Thread(target=run, args=("B", lambda: g(arr(0))), name="B", daemon=True)
    a.start()
    b.start()
    a.join(LIMIT)
    b.join(LIMIT)
    assert not a.is_alive() and not b.is_alive(), "deadlocked"
    errors = [r for r in results.values() if isinstance(r, BaseException)]
    assert errors and all(isinstance(e, JitError) and "another thread" in str(e) for e in errors), results
    HOSTILE_STATS["jit"] += 1


def test_zz_report_counts() -> None:
    print(f"\nhostile jit cases: {dict(HOSTILE_STATS)}")
    assert HOSTILE_STATS["jit"] > 0
