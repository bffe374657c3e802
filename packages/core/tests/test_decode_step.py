"""A language model's decode step and a training step written the tinygrad way, on REFERENCE (issue 31): a
kv cache grown at a bound position (`if start_pos > 0`, a concatenation at a symbolic length), the first
call of a TinyJit (the prompt) differing from the next ones, `reshape(shape=...)`, and a loss read after the
update of weights it was built on. Values are checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Tensor, TinyJit, UOp


def data(k: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(k).standard_normal(shape).astype(np.float32)


def test_kv_cache_grows_at_a_bound_position_after_a_prefill() -> None:
    ctx = 8
    cache = Tensor(np.zeros((2, ctx, 3), np.float32)).contiguous().realize()

    @TinyJit
    def step(xk: Tensor, start_pos: int | UOp) -> Tensor:
        new = cache[:, :start_pos].cat(xk, dim=1) if start_pos > 0 else xk
        assert new.shape[1] == start_pos + xk.shape[1]
        cache.assign(new.pad((None, (0, ctx - start_pos - xk.shape[1]), None)).contiguous()).realize()
        return cache.sum(1).realize()

    want = np.zeros((2, ctx, 3), np.float32)
    step(Tensor(data(0, 2, 3, 3)), 0)  # the prompt: a plain int, three tokens
    want[:, :3] = data(0, 2, 3, 3)
    pos = UOp.variable("start_pos", 1, ctx - 1)
    for p in range(3, 7):  # then one token at a time, at a bound position
        got = step(Tensor(data(p, 2, 1, 3)), pos.bind(p))
        want[:, p] = data(p, 2, 1, 3)[:, 0]
        np.testing.assert_allclose(got.numpy(), want.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cache.numpy(), want)


def test_a_comparison_the_variables_ranges_decide_has_a_truth_value() -> None:
    v = UOp.variable("start_pos", 1, 8).bind(3)
    assert bool(v > 0) and not bool(v > 8) and not bool((v + 1) != (v + 1))
    with pytest.raises(TypeError, match="symbolic"):
        bool(v > 3)  # depends on the value: no truth value
    with pytest.raises(TypeError):
        bool(v)  # not a bool


def test_reshape_and_expand_take_the_shape_by_keyword() -> None:
    x = Tensor(data(0, 2, 6))
    np.testing.assert_array_equal(x.reshape(shape=[2, 1, -1, 1]).numpy(), data(0, 2, 6).reshape(2, 1, 6, 1))
    np.testing.assert_array_equal(x.reshape(3, 4).numpy(), data(0, 2, 6).reshape(3, 4))
    np.testing.assert_array_equal(
        x[:, :1].expand(shape=(2, 5)).numpy(), np.broadcast_to(data(0, 2, 6)[:, :1], (2, 5))
    )


def test_loss_read_after_the_update_of_weights_with_a_history_is_the_loss_before_it() -> None:
    w0 = Tensor(data(1, 4, 2), requires_grad=True)
    w = (w0 * 2).realize()  # a realized value that keeps what computed it (for gradients)
    x = Tensor(data(2, 3, 4))
    loss = (x @ w).sum()
    w.assign((w * 3).detach()).realize()  # the update writes w's buffer: loss is computed first
    np.testing.assert_allclose(loss.item(), (data(2, 3, 4) @ (data(1, 4, 2) * 2)).sum(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), data(1, 4, 2) * 6, rtol=1e-6)
