"""Gradients survive realize: programs written in PyTorch's order (read the loss, then backward; realize an
intermediate; accumulate over micro-batches; update in place) give PyTorch's gradients, in float64.

Each test builds the same program in torch and in uopgrad and compares values and gradients. torch is a test
dependency of the `tests` session; without it these tests skip (they need an oracle that is not us)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopgrad import Ops, Tensor, function
from uopgrad.backend import Device
from uopgrad.realized import is_realized_after

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests (pip install torch)")

DEV = "REFERENCE"
F64 = "float64"
RNG = np.random.default_rng(1234)


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def ours(a: np.ndarray, grad: bool = False) -> Tensor:
    return Tensor(a, device=DEV, dtype=F64, requires_grad=grad or None)


def theirs(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def close(t: Tensor | None, ref: torch.Tensor | np.ndarray | float) -> None:
    assert t is not None, "no gradient"
    expect = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    np.testing.assert_allclose(t.numpy(), expect, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- the snippet, every way to read
READS: dict[str, Callable[[Tensor], object]] = {
    "item": lambda t: t.item(),
    "numpy": lambda t: t.numpy(),
    "realize": lambda t: t.realize(),
    "tolist": lambda t: t.tolist(),
    "realize-together": lambda t: Tensor.realize(t, Tensor([1.0], device=DEV) + 1),
    "twice": lambda t: (t.item(), t.realize(), t.numpy()),
}


@pytest.mark.parametrize("read", list(READS))
def test_read_the_loss_then_backward(read: str) -> None:
    xn, wn, yn = arr(4, 3), arr(3, 2), arr(4, 2)
    x, w, y = ours(xn), ours(wn, True), ours(yn)
    loss = ((x @ w - y) ** 2).mean()
    READS[read](loss)
    loss.backward()

    tx, tw, ty = theirs(xn), theirs(wn, True), theirs(yn)
    tloss = ((tx @ tw - ty) ** 2).mean()
    tloss.backward()
    close(loss, tloss)
    close(w.grad, tw.grad)


def test_gradient_after_realize_equals_gradient_before() -> None:
    xn, wn = arr(5, 3), arr(3, 4)
    x, w = ours(xn), ours(wn, True)
    loss = (x @ w).tanh().sum()
    before = loss.gradient(w)[0].numpy()
    print(loss.item())
    after = loss.gradient(w)[0].numpy()
    np.testing.assert_array_equal(before, after)


def test_a_realized_intermediate_keeps_its_graph() -> None:
    xn, w1n, w2n = arr(6, 4), arr(4, 5), arr(5, 1)
    x, w1, w2 = ours(xn), ours(w1n, True), ours(w2n, True)
    h = (x @ w1).relu()
    h.realize()
    assert is_realized_after(h.uop)
    loss = (h @ w2).square().mean()
    print(loss.numpy())
    loss.backward()

    tx, tw1, tw2 = theirs(xn), theirs(w1n, True), theirs(w2n, True)
    tloss = ((tx @ tw1).relu() @ tw2).square().mean()
    tloss.backward()
    close(w1.grad, tw1.grad)
    close(w2.grad, tw2.grad)


def test_backward_twice_accumulates_with_reads_between() -> None:
    wn = arr(3)
    w = ours(wn, True)
    loss = (w.exp() * w).sum()
    loss.backward()
    print(loss.item(), w.grad.numpy() if w.grad is not None else None)
    loss.backward()

    tw = theirs(wn, True)
    tloss = (tw.exp() * tw).sum()
    tloss.backward(retain_graph=True)
    tloss.backward()
    close(w.grad, tw.grad)


def test_realize_does_not_recompute_what_it_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[set[Ops]] = []
    backend = Device[DEV]
    real = backend.realize
    monkeypatch.setattr(
        backend, "realize", lambda sink: (ran.append({u.op for u in sink.toposort()}), real(sink))
    )
    w = ours(arr(4), True)
    h = w.exp2()
    h.realize()
    out = h + 1
    out.realize()
    assert Ops.EXP2 in ran[0] and Ops.EXP2 not in ran[1]  # the second run reads h's buffer
    out.sum().backward()  # while the gradient still reaches w through the kept graph
    close(w.grad, np.exp2(w.numpy()) * np.log(2))


def test_detach_and_requires_grad_after_realize() -> None:
    xn, wn = arr(3), arr(3)
    x, w = ours(xn), ours(wn)  # w does not require grad yet
    h = (x * w).realize()
    w.requires_grad_()
    (h * h.detach()).sum().backward()
    tx, tw = theirs(xn), theirs(wn, True)
    th = tx * tw
    (th * th.detach()).sum().backward()
    close(w.grad, tw.grad)


def test_assign_into_an_unrealized_value() -> None:
    tn = arr(3)
    t = ours(tn, True)
    a = t * 2
    a += 1
    a *= t
    print(a.numpy())
    a.sum().backward()
    tt = theirs(tn, True)
    ta = tt * 2
    ta += 1
    ta *= tt
    ta.sum().backward()
    close(a, ta)
    close(t.grad, tt.grad)


def test_precompiled_function_realized_then_differentiated() -> None:
    @function(precompile=True)
    def layer(x: Tensor, w: Tensor) -> Tensor:
        return (x @ w).relu()

    xn, wn = arr(4, 3), arr(3, 2)
    x, w = ours(xn), ours(wn, True)
    out = layer(x, w)
    out.realize()
    loss = out.sum()
    print(loss.item())
    loss.backward()
    tx, tw = theirs(xn), theirs(wn, True)
    (tx @ tw).relu().sum().backward()
    close(w.grad, tw.grad)


def test_a_realized_implicit_input_passes_its_gradient_on() -> None:
    wn, xn = arr(3), arr(3)
    w0 = ours(wn, True)
    scale = (w0 * 2).realize()

    @function(allow_implicit=True)
    def f(x: Tensor) -> Tensor:
        return x * scale

    f(ours(xn)).sum().backward()
    tw = theirs(wn, True)
    (theirs(xn) * (tw * 2)).sum().backward()
    close(w0.grad, tw.grad)


# ---------------------------------------------------------------------- a training loop in PyTorch's order
def _train_ours(data: dict[str, np.ndarray], steps: int) -> tuple[list[float], dict[str, np.ndarray]]:
    params = {k: ours(v, True) for k, v in data.items() if k.startswith(("w", "b"))}
    bufs = {
        k: Tensor.zeros(*p.shape, device=DEV, dtype=F64).contiguous().realize() for k, p in params.items()
    }
    x, y = ours(data["x"]), ours(data["y"])
    losses = []
    for _ in range(steps):
        for lo, hi in ((0, 4), (4, 8)):  # two micro-batches accumulate into .grad
            h = (x[lo:hi] @ params["w1"] + params["b1"]).relu()
            h.realize()  # an intermediate, realized on its own
            out = h @ params["w2"] + params["b2"]
            loss = ((out - y[lo:hi]) ** 2).mean()
            losses.append(float(loss.item()))  # read before backward
            loss.backward()
        for k, p in params.items():  # SGD with momentum, in place
            assert p.grad is not None
            bufs[k].assign(bufs[k] * 0.9 + p.grad)
            p.assign(p - 0.05 * bufs[k])
            Tensor.realize(p, bufs[k])
            p.grad = None
    return losses, {k: p.numpy() for k, p in params.items()}


def _train_torch(data: dict[str, np.ndarray], steps: int) -> tuple[list[float], dict[str, np.ndarray]]:
    params = {k: theirs(v, True) for k, v in data.items() if k.startswith(("w", "b"))}
    opt = torch.optim.SGD(list(params.values()), lr=0.05, momentum=0.9)
    x, y = theirs(data["x"]), theirs(data["y"])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        for lo, hi in ((0, 4), (4, 8)):
            h = (x[lo:hi] @ params["w1"] + params["b1"]).relu()
            loss = ((h @ params["w2"] + params["b2"] - y[lo:hi]) ** 2).mean()
            losses.append(loss.item())
            loss.backward()
        opt.step()
    return losses, {k: p.detach().numpy() for k, p in params.items()}


def test_training_loop_in_pytorch_order_matches_torch() -> None:
    rng = np.random.default_rng(3)  # its own data: the module's generator's state depends on test order
    data = {
        "x": rng.standard_normal((8, 4)),
        "y": rng.standard_normal((8, 1)),
        "w1": rng.standard_normal((4, 5)) * 0.5,
        "b1": rng.standard_normal(5) * 0.1,
        "w2": rng.standard_normal((5, 1)) * 0.5,
        "b2": rng.standard_normal(1) * 0.1,
    }
    got_losses, got = _train_ours(data, steps=4)
    want_losses, want = _train_torch(data, steps=4)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-12)
    assert sum(got_losses[-2:]) < sum(got_losses[:2])  # it trains: the same two micro-batches, later
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)


def test_values_built_before_an_in_place_update_keep_the_old_contents() -> None:
    wn = arr(3)
    w = ours(wn, True)
    doubled = w * 2  # built from w as it is now
    w.assign(w + 1).realize()  # then w changes in place
    tw = theirs(wn)
    tdoubled = tw * 2
    tw += 1
    close(doubled, tdoubled)  # PyTorch's order: the value was computed before the update
    close(w, tw)
    view = w[1:]  # a view of the buffer sees later writes, as in PyTorch
    w.assign(w * 3).realize()
    close(view, tw[1:] * 3)


def test_a_pending_assign_reads_the_old_contents_of_a_buffer_written_later() -> None:
    """s.copy_(s + w) then w.copy_(...) in PyTorch: s keeps the sum with the old w, even when the first
    assign is still pending when w's assign is realized."""
    wn, sn = arr(3), arr(3) + 1
    w, s = ours(wn, False), ours(sn, False)
    s.assign(s + w)  # pending
    w.assign(w * 0 + 100).realize()  # overwrites w before s's assign ran
    tw, ts = theirs(wn), theirs(sn)
    ts.copy_(ts + tw)
    tw.copy_(tw * 0 + 100)
    close(s, ts)
    close(w, tw)


def test_updating_parameters_one_at_a_time_keeps_the_other_gradients() -> None:
    xn, w1n, w2n = arr(4, 3), arr(3, 3), arr(3, 1)
    x, w1, w2 = ours(xn), ours(w1n, True), ours(w2n, True)
    ((x @ w1).sigmoid() @ w2).sum().backward()
    for p in (w1, w2):  # w2's gradient reads w1: it must not see w1's update
        assert p.grad is not None
        p.assign(p - 0.1 * p.grad).realize()
    tx, tw1, tw2 = theirs(xn), theirs(w1n, True), theirs(w2n, True)
    ((tx @ tw1).sigmoid() @ tw2).sum().backward()
    with torch.no_grad():
        for tp in (tw1, tw2):
            tp -= 0.1 * tp.grad
    close(w1, tw1)
    close(w2, tw2)


def test_a_gradient_that_needs_overwritten_contents_raises() -> None:
    w = ours(arr(3), True)
    loss = (w * w).sum()
    print(loss.item())
    w.assign(w + 1).realize()  # the forward read w's old contents; 2*w would now read the new ones
    with pytest.raises(RuntimeError, match="overwritten in place"):
        loss.backward()
    v = ours(arr(3), True)
    linear = (v * 3).sum()
    linear.item()
    v.assign(v + 1).realize()
    linear.backward()  # the gradient (3) reads no forward value: nothing to refuse
    close(v.grad, np.full(3, 3.0))


# ---------------------------------------------------------------------- no_grad keeps no history
def test_a_loss_read_under_no_grad_still_backpropagates() -> None:
    from uopgrad.nn import no_grad

    w_np = arr(3, 4)
    w, tw = ours(w_np, grad=True), theirs(w_np, grad=True)
    loss, tloss = ((w * w).sum() * 0.5), (tw * tw).sum() * 0.5
    with no_grad(), torch.no_grad():  # logging the loss under no_grad, as training loops do
        assert abs(float(loss.item()) - float(tloss.item())) < 1e-12
    loss.backward()
    tloss.backward()
    close(w.grad, tw.grad)


def test_an_inference_loop_under_no_grad_holds_one_step_of_buffers() -> None:
    # each step's value is realized from the last: under no_grad what computed it is not kept, so the
    # buffer of an old step goes as soon as no tensor holds it (outside no_grad the history is kept for
    # gradients, as realize promises)
    import gc
    import weakref

    from uopgrad.nn import no_grad
    from uopgrad.realized import reads, realized_view

    x_np = arr(4, 5)
    x, tx = ours(x_np), theirs(x_np)
    first = None
    with no_grad(), torch.no_grad():
        for step in range(6):
            x, tx = (x * 0.5 + 1.0).relu().realize(), (tx * 0.5 + 1.0).relu()
            if step == 0:
                (buf,) = reads(realized_view(x.uop))
                first = weakref.ref(buf)
                del buf
    close(x, tx)
    gc.collect()
    assert first is not None and first() is None, "an old step's buffer is still held"
    w = ours(arr(5), grad=True)
    y = (x * w).realize()  # a value realized under no_grad, used in a graph that needs gradients
    (g,) = y.sum().gradient(w)
    close(g, x.numpy().sum(0))


@pytest.mark.parametrize("make", ["zeros", "ones", "full"])
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_a_bias_made_by_a_creator_trains_as_in_torch(make: str, opt_name: str) -> None:
    """`b = Tensor.zeros(n, requires_grad=True)` (no buffer until the first step replaces it with a
    realized value): the second backward needs no value of the first step, as in torch."""
    import torch

    from uopgrad.nn import optim

    w0 = np.array([[0.5, -0.2], [0.1, 0.3]], np.float32)
    xs = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b0 = {
        "zeros": np.zeros(2, np.float32),
        "ones": np.ones(2, np.float32),
        "full": np.full(2, 0.25, np.float32),
    }
    w = Tensor(w0, requires_grad=True)
    b = {
        "zeros": lambda: Tensor.zeros(2),
        "ones": lambda: Tensor.ones(2),
        "full": lambda: Tensor.full((2,), 0.25),
    }[make]().requires_grad_()
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0[make], requires_grad=True)
    kw = {"lr": 0.1, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.05}
    opt, topt = getattr(optim, opt_name)([w, b], **kw), getattr(torch.optim, opt_name)([tw, tb], **kw)
    x, tx = Tensor(xs), torch.tensor(xs)
    with Tensor.train():
        for _ in range(4):
            opt.zero_grad()
            topt.zero_grad()
            loss, tloss = ((x @ w + b) ** 2).mean(), ((tx @ tw + tb) ** 2).mean()
            np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)  # read, then backward
            loss.backward()
            tloss.backward()
            opt.step()
            topt.step()
    np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
