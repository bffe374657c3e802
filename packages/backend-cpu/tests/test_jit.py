"""TinyJit on the CPU backend, used the way training loops use it: an optimiser step inside the jitted
function, the loss printed every step, compared with the same loop without the jit and with torch."""

import threading

import numpy as np
import pytest

from uopgrad import GlobalCounters, Tensor, TinyJit
from uopgrad.errors import JitError
from uopgrad.nn.optim import SGD, Adam

DEV = "CPU"


def data(k: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(k).standard_normal(shape).astype(np.float32)


W1, W2 = data(1, 6, 5) * 0.5, data(2, 5, 2) * 0.5


def batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(data(10 + k % 2, 4, 6), data(50 + k % 2, 4, 2)) for k in range(n)]  # two batches in turn


def train_ours(opt_name: str, jit: bool, steps: int = 6) -> tuple[list[float], list[np.ndarray]]:
    w1, w2 = Tensor(W1, device=DEV, requires_grad=True), Tensor(W2, device=DEV, requires_grad=True)
    opt = SGD([w1, w2], lr=0.05, momentum=0.5) if opt_name == "sgd" else Adam([w1, w2], lr=0.05)

    @Tensor.train()
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (((x @ w1).relu() @ w2 - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = TinyJit(step) if jit else step
    losses = []
    for xn, yn in batches(steps):
        loss = fn(Tensor(xn, device=DEV), Tensor(yn, device=DEV))
        print(f"loss {loss.item():.6f}")  # read every step, as users do
        losses.append(float(loss.item()))
    return losses, [w1.numpy(), w2.numpy()]


def train_torch(opt_name: str, steps: int = 6) -> tuple[list[float], list[np.ndarray]]:
    torch = pytest.importorskip("torch", reason="torch (the CPU wheel) is an optional test oracle")
    w1, w2 = torch.tensor(W1, requires_grad=True), torch.tensor(W2, requires_grad=True)
    opt = (
        torch.optim.SGD([w1, w2], lr=0.05, momentum=0.5)
        if opt_name == "sgd"
        else torch.optim.Adam([w1, w2], lr=0.05)
    )
    losses = []
    for xn, yn in batches(steps):
        opt.zero_grad()
        loss = (((torch.tensor(xn) @ w1).relu() @ w2 - torch.tensor(yn)) ** 2).mean()
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return losses, [w1.detach().numpy(), w2.detach().numpy()]


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_jitted_training_loop_matches_the_plain_loop_and_torch(opt_name: str) -> None:
    jit_losses, jit_ws = train_ours(opt_name, jit=True)
    plain_losses, plain_ws = train_ours(opt_name, jit=False)
    np.testing.assert_array_equal(jit_losses, plain_losses)  # the same kernels on the same data
    for a, b in zip(jit_ws, plain_ws):
        np.testing.assert_array_equal(a, b)
    assert jit_losses[-2] < jit_losses[0] and jit_losses[-1] < jit_losses[1]  # it trains
    torch_losses, torch_ws = train_torch(opt_name)
    np.testing.assert_allclose(jit_losses, torch_losses, rtol=1e-5)
    for a, b in zip(jit_ws, torch_ws):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_replays_launch_the_captured_kernels_without_scheduling(monkeypatch: pytest.MonkeyPatch) -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * 2 + 1).sum()

    for k in range(2):
        f(Tensor(data(k, 8), device=DEV))
    assert f.captured is not None

    def no_schedule(*_a: object) -> None:
        raise AssertionError("a replay scheduled a graph")

    import uopgrad.backend as backend_mod

    monkeypatch.setattr(backend_mod, "schedule", no_schedule)
    GlobalCounters.reset()
    for k in range(2, 5):
        xn = data(k, 8)
        np.testing.assert_allclose(f(Tensor(xn, device=DEV)).item(), (xn * 2 + 1).sum(), rtol=1e-6)
    assert GlobalCounters.kernel_count == 3


def test_inputs_of_another_shape_dtype_or_argument_raise() -> None:
    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return (x + y).contiguous()

    for k in range(3):
        f(Tensor(data(k, 3, 4), device=DEV), Tensor(data(k, 3, 4), device=DEV))
    with pytest.raises(JitError, match=r"input 0 is shape \(4, 4\)"):
        f(Tensor(data(0, 4, 4), device=DEV), Tensor(data(0, 3, 4), device=DEV))
    with pytest.raises(JitError, match="int"):
        f(Tensor(data(0, 3, 4), device=DEV), Tensor(np.ones((3, 4), np.int32), device=DEV))
    with pytest.raises(JitError, match="arguments"):
        f(Tensor(data(0, 3, 4), device=DEV), y=Tensor(data(0, 3, 4), device=DEV))
    with pytest.raises(JitError, match="twice"):
        x = Tensor(data(0, 3, 4), device=DEV)
        f(x, x)
    assert isinstance(JitError("x"), RuntimeError)
    f.reset()  # other shapes after a reset: captured anew
    for k in range(3):
        xn, yn = data(k, 2, 2), data(k + 1, 2, 2)
        np.testing.assert_allclose(f(Tensor(xn, device=DEV), Tensor(yn, device=DEV)).numpy(), xn + yn)


def test_captured_constant_tensors_and_state_changed_outside() -> None:
    scale = Tensor(np.full((1,), 3.0, np.float32), device=DEV)  # a buffer the step reads, not an argument
    bias = Tensor(data(7, 5), device=DEV)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * scale + bias + Tensor([1.0, 2.0, 3.0, 4.0, 5.0], device=DEV)  # a constant made inside

    const = np.array([1, 2, 3, 4, 5], np.float32)
    for k in range(4):
        xn = data(k, 5)
        np.testing.assert_allclose(f(Tensor(xn, device=DEV)).numpy(), xn * 3 + data(7, 5) + const, rtol=1e-6)
    scale.assign(Tensor(np.full((1,), -2.0, np.float32), device=DEV)).realize()  # in place: replays see it
    xn = data(9, 5)
    np.testing.assert_allclose(f(Tensor(xn, device=DEV)).numpy(), xn * -2 + data(7, 5) + const, rtol=1e-6)


def test_issue9_rules_hold_across_replays() -> None:
    w = Tensor(data(3, 4), device=DEV, requires_grad=True)
    opt = SGD([w], lr=0.5)

    @TinyJit
    @Tensor.train()
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (x * w * w).sum()
        loss.backward()
        opt.step()
        return loss

    wn = data(3, 4)
    for k in range(3):
        xn = data(20 + k, 4)
        step(Tensor(xn, device=DEV))
        wn = wn - 0.5 * 2 * xn * wn
    before = w * 10  # built lazily on w's contents now; the replay overwrites w
    kept = (w * w).sum()
    kept.item()
    xn = data(30, 4)
    step(Tensor(xn, device=DEV))
    np.testing.assert_allclose(before.numpy(), wn * 10, rtol=1e-6)  # PyTorch's order: the old contents
    np.testing.assert_allclose(w.numpy(), wn - 0.5 * 2 * xn * wn, rtol=1e-5)
    with pytest.raises(RuntimeError, match="overwritten in place"):
        kept.gradient(w)  # needs the old w, which the replay replaced


def test_errors_of_what_cannot_be_captured() -> None:
    @TinyJit
    def nothing(x: Tensor) -> Tensor:
        return x

    with pytest.raises(JitError, match="no kernels"):
        for k in range(2):
            nothing(Tensor(data(k, 3), device=DEV))

    @TinyJit
    def number(x: Tensor) -> float:
        (x * 2).sum().realize()
        return float(x.shape[0])

    with pytest.raises(JitError, match="returned a float"):
        for k in range(2):
            number(Tensor(data(k, 3), device=DEV))

    @TinyJit
    def reads(x: Tensor) -> Tensor:
        return x * (x * 2).sum().item()  # a host read during the capture would freeze the value

    with pytest.raises(JitError, match="baked into every replay"):
        for k in range(2):
            reads(Tensor(data(k, 3), device=DEV))

    @TinyJit
    def outer(x: Tensor) -> Tensor:
        return inner(x * 2)

    @TinyJit
    def inner(x: Tensor) -> Tensor:
        return (x + 1).contiguous()

    with pytest.raises(JitError, match="nested"):
        for k in range(3):
            outer(Tensor(data(k, 3), device=DEV))


def test_two_threads_capture_their_own_steps() -> None:
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def worker(c: int) -> None:
        try:

            @TinyJit
            def f(x: Tensor) -> Tensor:
                return (x * float(c) + 1).exp()

            results[c] = [f(Tensor(data(k, 64), device=DEV)).numpy().copy() for k in range(8)]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(c,)) for c in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for c, outs in results.items():
        for k, out in enumerate(outs):
            np.testing.assert_allclose(out, np.exp(data(k, 64) * c + 1), rtol=1e-5)


def test_a_jitted_method_and_list_inputs() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = Tensor(data(4, 3, 3), device=DEV)

        @TinyJit
        def __call__(self, xs: list[Tensor]) -> list[Tensor]:
            return [(x @ self.w).contiguous() for x in xs]

    m = Model()
    for k in range(4):
        a, b = data(k, 2, 3), data(k + 5, 2, 3)
        outs = m([Tensor(a, device=DEV), Tensor(b, device=DEV)])
        np.testing.assert_allclose(outs[0].numpy(), a @ data(4, 3, 3), rtol=1e-5)
        np.testing.assert_allclose(outs[1].numpy(), b @ data(4, 3, 3), rtol=1e-5)


def test_copies_between_devices_are_replayed() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return ((x * 2).to("CPU:1") + x.to("CPU:1")).contiguous()  # a computed value and the input copied

    for k in range(4):
        xn = data(k, 6)
        out = f(Tensor(xn, device=DEV))
        assert out.device == "CPU:1"
        np.testing.assert_allclose(out.numpy(), xn * 3, rtol=1e-6)
    assert f.captured is not None


def test_work_on_reference_inside_a_captured_step_raises() -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * 2).to("REFERENCE") + 1  # REFERENCE launches no kernels: nothing to replay

    f(Tensor(data(0, 3), device=DEV))  # the first call runs plainly
    with pytest.raises(JitError, match="REFERENCE"):
        f(Tensor(data(1, 3), device=DEV))


def test_a_captured_step_of_assigns_that_read_each_others_old_values() -> None:
    # a.assign(a + b); b.assign(a * 2) in one step: the schedule reads b from a copy taken before a's
    # write (schedule.py `_snapshot`); the captured step replays the copy, and every step sees old values
    a = Tensor(np.arange(4, dtype=np.float32), device="CPU").realize()
    b = Tensor(np.arange(10, 14, dtype=np.float32), device="CPU").realize()

    @TinyJit
    def step() -> Tensor:
        new_a, new_b = a + b, a * 2
        a.assign(new_a)
        b.assign(new_b)
        Tensor.realize(a, b)
        return a.sum() + 0

    want_a, want_b = np.arange(4, dtype=np.float32), np.arange(10, 14, dtype=np.float32)
    for _ in range(5):
        total = step().item()
        want_a, want_b = want_a + want_b, want_a * 2
        assert a.numpy().tolist() == want_a.tolist() and b.numpy().tolist() == want_b.tolist()
        assert total == float(want_a.sum())
