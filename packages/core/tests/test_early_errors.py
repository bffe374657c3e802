"""Errors raised at the line that caused them, typed, naming the op (issue 36): a bad reshape, bitwise ops on
floats, and out-of-range class labels given as host data; what out-of-range labels in a Tensor do."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Tensor
from uopgrad.errors import ArgumentError, DTypeError, ShapeError

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")


def test_a_bad_reshape_raises_where_it_is_written() -> None:
    t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(ShapeError, match=r"\(2, 3\)"):
        t.reshape(4, 2)
    with pytest.raises(ShapeError, match=r"\(2, 3\)"):
        t.reshape(-1, 4)
    with pytest.raises(ValueError):  # also the builtin PyTorch users catch
        t.view(5)


F = Tensor([1.5, 2.0])
BITWISE = {
    "&": lambda: F & F,
    "& int": lambda: F & 1,
    "|": lambda: F | F,
    "^": lambda: 3 ^ F,
    "~": lambda: ~F,
    "<<": lambda: F << 1,
    ">>": lambda: F >> 1,
    "int << float": lambda: 1 << F,
    "int tensor >> float tensor": lambda: Tensor([4, 8]) >> F,
    "bitwise_and": lambda: F.bitwise_and(F),
    "lshift": lambda: F.lshift(2),
}


@pytest.mark.parametrize("name", BITWISE)
def test_bitwise_ops_on_floats_raise_when_built(name: str) -> None:
    with pytest.raises(DTypeError, match=r"(and|or|xor|~|<<|>>) needs .*dtypes\.float"):
        BITWISE[name]()
    with pytest.raises(TypeError):  # PyTorch raises TypeError/RuntimeError: both catch it
        BITWISE[name]()


def test_int_shifts_still_match_torch() -> None:
    a = np.array([1, 3, -8, 100], np.int32)
    s = np.array([0, 1, 2, 3], np.int32)
    ta, ts = torch.from_numpy(a), torch.from_numpy(s)
    np.testing.assert_array_equal((Tensor(a) << Tensor(s)).numpy(), (ta << ts).numpy())
    np.testing.assert_array_equal((Tensor(a) >> 1).numpy(), (ta >> 1).numpy())
    np.testing.assert_array_equal((1 << Tensor(s)).numpy(), (1 << ts).numpy())
    np.testing.assert_array_equal((64 >> Tensor(s)).numpy(), (64 >> ts).numpy())
    with pytest.raises(DTypeError, match="int shift"):
        Tensor(a) << 1.5


LOGITS = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


@pytest.mark.parametrize("labels", [[0, 2, 3, 1], np.array([0, -2, 1, 1])])
def test_out_of_range_labels_as_host_data_raise(labels: object) -> None:
    for loss in (Tensor(LOGITS).cross_entropy, Tensor(LOGITS).sparse_categorical_crossentropy):
        with pytest.raises(ArgumentError, match=r"class label -?\d is out of range for 3 classes"):
            loss(labels)  # type: ignore[arg-type]


def test_host_labels_in_range_or_ignored_give_torchs_loss() -> None:
    labels = [0, 2, -100, 1]
    ours = Tensor(LOGITS).cross_entropy(labels).numpy()
    theirs = torch.nn.functional.cross_entropy(torch.from_numpy(LOGITS), torch.tensor(labels))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5)
    ours2 = Tensor(LOGITS).sparse_categorical_crossentropy(np.array([0, 2, -1, 1])).numpy()
    np.testing.assert_allclose(ours2, theirs.numpy(), rtol=1e-5)


def test_out_of_range_labels_in_a_tensor_give_the_documented_zero() -> None:
    """Not read back from the device: the sample's loss and gradient are 0, and it counts in the mean."""
    x = Tensor(LOGITS, requires_grad=True)
    loss = x.cross_entropy(Tensor([0, 2, 7, 1]))
    loss.backward()
    logp = torch.log_softmax(torch.from_numpy(LOGITS), 1).numpy()
    want = -(logp[0, 0] + logp[1, 2] + logp[3, 1]) / 4  # three real samples, over four
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy()[2], np.zeros(3), atol=1e-7)
