"""Invalid inputs are rejected at the call that makes them (never later at realize), with the exception type
the reference (tinygrad ffa1aac7b1) and PyTorch raise, and a message that names the op, shape or value.

Each case is built the way a user writes it and never realized: an error only `.realize()` would show fails
here. Where uopgrad raised another builtin before, its typed error is both (e.g. ValueError and
RuntimeError), so both catches are checked.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from uopgrad import Tensor, dtypes, errors

T = Tensor.ones


def _i32(*shape: int) -> Tensor:
    return Tensor.zeros(*shape, dtype=dtypes.int32)


# (id, the call, the builtins it must be, a word or shape its message names)
CASES: list[tuple[str, Callable[[], object], tuple[type[BaseException], ...], str]] = [
    # creation
    ("empty negative", lambda: Tensor.empty((2, -3, 0)), (ValueError,), r"-3"),
    ("zeros negative", lambda: Tensor.zeros((2, -3)), (ValueError,), r"\(2, -3\)"),
    ("full negative", lambda: Tensor.full((-3,), 2), (ValueError,), r"-3"),
    ("eye negative", lambda: Tensor.eye(3, -3), (ValueError,), r"eye"),
    (
        "shape as sequence and sizes",
        lambda: Tensor.zeros((2, 2), 2, 2),
        (ValueError, RuntimeError),
        r"\(2, 2\)",
    ),
    ("kaiming mixed shape", lambda: Tensor.kaiming_normal((-3, 3), 3), (ValueError,), r"\(-3, 3\)"),
    ("arange past int8", lambda: Tensor.arange(129, dtype=dtypes.int8), (OverflowError,), r"int8|char"),
    ("arange below int8", lambda: Tensor.arange(127, -130, -1, dtype=dtypes.int8), (OverflowError,), r"-130"),
    ("arange past int32", lambda: Tensor.arange(2**33, dtype=dtypes.int32), (OverflowError,), r"8589934592"),
    ("linspace bool", lambda: Tensor.linspace(5, 10, 3, dtype="bool"), (ValueError, RuntimeError), r"bool"),
    ("unknown dtype name", lambda: Tensor([3], dtype="typo"), (AttributeError, TypeError), r"'typo'"),
    (
        "dtype not a name",
        lambda: Tensor([3], dtype=(dtypes.int,)),
        (AttributeError, TypeError),
        r"unknown dtype",
    ),
    ("sum dtype ''", lambda: Tensor([1.0, 2.0]).sum(dtype=""), (AttributeError,), r"unknown dtype ''"),
    # elementwise
    ("xor of floats", lambda: T(4).bitwise_xor(T(4)), (RuntimeError, TypeError), r"xor.*float"),
    ("and of floats", lambda: T(4) & T(4), (RuntimeError,), r"and.*float"),
    ("or of float and int", lambda: T(4) | 1, (RuntimeError,), r"or.*float"),
    ("not of floats", lambda: T(4).bitwise_not(), (RuntimeError, TypeError), r"float"),
    ("int to a negative power", lambda: Tensor([-2, 0, 2]) ** -2, (RuntimeError,), r"-2"),
    (
        "div rounding typo",
        lambda: Tensor([5.0]).div(2, rounding_mode="typo"),
        (RuntimeError, ValueError),
        r"'typo'",
    ),
    # movement
    (
        "expand 3 to 1",
        lambda: T(4, 3, 1, 6).expand(4, 1, 1, 6),
        (ValueError, RuntimeError),
        r"\(4, 3, 1, 6\)",
    ),
    (
        "expand 2 to 0",
        lambda: T(4, 3, 2, 6).expand(4, 3, 0, 6),
        (ValueError, RuntimeError),
        r"\(4, 3, 0, 6\)",
    ),
    ("reshape size", lambda: T(4, 3, 6, 6).reshape([]), (ValueError,), r"\(4, 3, 6, 6\)"),
    ("reshape empty to scalar", lambda: T(3, 2, 0).reshape(()), (ValueError,), r"\(3, 2, 0\)"),
    ("reshape two -1", lambda: T(3, 4).reshape(-1, -1, 2), (RuntimeError,), r"-1"),
    ("reshape negative", lambda: T(3, 4).reshape(-3, -4), (ValueError,), r"-3"),
    ("flip twice", lambda: T(3, 4).flip((1, -1)), (RuntimeError,), r"\(1, -1\)"),
    ("squeeze 0-d", lambda: Tensor(1.0).squeeze(1), (IndexError,), r"1"),
    ("roll pairs", lambda: T(3, 3).roll(shifts=1, dims=(0, 1)), (RuntimeError, ValueError), r"\(0, 1\)"),
    ("roll no dims", lambda: T(2, 4).roll((1, 2)), (RuntimeError,), r"\(1, 2\)"),
    ("unfold too big", lambda: T(8).unfold(0, 9, 3), (RuntimeError, ValueError), r"size=9.*\(8,\)"),
    ("unfold step", lambda: T(8).unfold(0, 1, -1), (RuntimeError,), r"step=-1"),
    ("diagonal same dims", lambda: T(3, 3).diagonal(dim1=0, dim2=0), (RuntimeError,), r"same dimension"),
    ("meshgrid indexing", lambda: T(3).meshgrid(indexing="bad"), (RuntimeError, ValueError), r"'bad'"),
    ("pad mode", lambda: T(3, 3, 3).pad((3, 0), mode="typo"), (NotImplementedError, ValueError), r"'typo'"),
    (
        "circular negative",
        lambda: T(1, 1, 5, 5).pad((3, -5, 1, -5), mode="circular"),
        (NotImplementedError,),
        r"negative",
    ),
    ("shrink_to rank", lambda: T(4, 8).shrink_to(2), (ValueError,), r"\(4, 8\)"),
    ("pad_to rank", lambda: Tensor([[1, 2]]).pad_to(3), (ValueError,), r"\(1, 2\)"),
    ("cat 0-d", lambda: Tensor(3.14).cat(Tensor(3.14)), (IndexError,), r"0-d"),
    (
        "stack sequence and args",
        lambda: Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6])),
        (ValueError,),
        r"stack",
    ),
    ("cumsum 0-d axis", lambda: Tensor(1.0).cumsum(axis=1), (IndexError,), r"axis 1"),
    ("cummax 0-d axis", lambda: Tensor(1.0).cummax(axis=1), (IndexError,), r"axis 1"),
    ("float index", lambda: T(3, 4)[[1.1]], (IndexError,), r"float"),
    # operands that don't fit
    ("dot 1-d", lambda: T(1).dot(T(4)), (RuntimeError, ValueError), r"\(1,\) and \(4,\)"),
    ("dot 2-d", lambda: T(2, 4).dot(T(1, 3)), (RuntimeError,), r"\(2, 4\) and \(1, 3\)"),
    ("matmul 0-d", lambda: Tensor(3.14) @ T(3, 3), (RuntimeError,), r"\(3, 3\)"),
    (
        "conv2d window",
        lambda: T(2, 16, 2, 2).conv2d(T(32, 16, 3, 3)),
        (RuntimeError, ValueError),
        r"\(2, 2\)",
    ),
    ("gather rank", lambda: T(4, 5, 6).gather(0, Tensor([1])), (RuntimeError, ValueError), r"\(4, 5, 6\)"),
    (
        "scatter index",
        lambda: T(2, 3, 10).scatter(1, _i32(10, 10, 10), T(10, 10, 10)),
        (RuntimeError,),
        r"\(2, 3, 10\)",
    ),
    (
        "scatter dtype",
        lambda: T(3, 4, 5).half().scatter(1, _i32(3, 4, 5), T(3, 4, 5)),
        (RuntimeError,),
        r"float",
    ),
    (
        "scatter reduce tensor src",
        lambda: T(4).scatter(1, Tensor([0]), T(4), reduce="add"),
        (TypeError,),
        r"scatter_reduce",
    ),
    (
        "scatter_reduce name",
        lambda: T(4, 5).scatter_reduce(0, _i32(4, 5), T(4, 5), reduce="INVALID"),
        (RuntimeError, ValueError),
        r"'INVALID'",
    ),
    (
        "scatter_reduce dtype",
        lambda: T(4, 5).half().scatter_reduce(0, _i32(4, 5), T(4, 5), reduce="sum"),
        (RuntimeError,),
        r"half|float16",
    ),
    (
        "sdpa mask and causal",
        lambda: T(2, 4, 8).scaled_dot_product_attention(T(2, 4, 8), T(2, 4, 8), T(2, 4, 4), is_causal=True),
        (RuntimeError,),
        r"is_causal",
    ),
    ("cross_entropy targets", lambda: T(32, 10).cross_entropy(T(32, 1)), (RuntimeError,), r"\(32, 1\)"),
    ("one_hot negative", lambda: Tensor([1, 2]).one_hot(-1), (ValueError,), r"-1"),
]


@pytest.mark.parametrize("call,builtins,names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_input_raises_the_reference_type_at_the_call(
    call: Callable[[], object], builtins: tuple[type[BaseException], ...], names: str
) -> None:
    with pytest.raises(builtins[0], match=names) as info:
        call()  # never realized: the check belongs to the call
    for b in builtins:
        assert isinstance(info.value, b), f"{type(info.value).__name__} is not a {b.__name__}"
    plain = (ValueError, IndexError, TypeError)  # builtins uopgrad raises as they are (spec/errors.md)
    assert isinstance(info.value, errors.UopgradError) or type(info.value) in plain


def test_typed_errors_keep_both_catches() -> None:
    assert issubclass(errors.ArgumentError, ValueError) and issubclass(errors.ArgumentError, RuntimeError)
    assert issubclass(errors.OperandShapeError, ValueError)
    assert issubclass(errors.OperandShapeError, RuntimeError)
    assert issubclass(errors.DTypeError, TypeError) and issubclass(errors.DTypeError, RuntimeError)
    assert issubclass(errors.UnknownDTypeError, TypeError)
    assert issubclass(errors.UnknownDTypeError, AttributeError)
    assert issubclass(errors.NotSupportedError, NotImplementedError)
    assert issubclass(errors.NotSupportedError, ValueError)
    assert issubclass(errors.DTypeRangeError, OverflowError)


# ---------------------------------------------------------------------- the valid neighbours still work
def test_edges_the_checks_must_let_through() -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    x, tx = Tensor(a), torch.tensor(a)
    np.testing.assert_array_equal(x.flip((0, 1)).numpy(), tx.flip((0, 1)).numpy())
    np.testing.assert_array_equal(x.roll((1, 2), (0, 1)).numpy(), tx.roll((1, 2), (0, 1)).numpy())
    np.testing.assert_array_equal(x.unfold(1, 4, 1).numpy(), tx.unfold(1, 4, 1).numpy())  # size == the dim
    assert Tensor(2.0).squeeze(0).item() == 2.0 and Tensor(2.0).squeeze(-1).shape == ()
    assert Tensor(3.0).cumsum(0).item() == 3.0 and Tensor(3.0).cumsum(-1).shape == ()
    np.testing.assert_array_equal(
        Tensor.stack([Tensor([1, 2]), Tensor([3, 4])], dim=1).numpy(),
        torch.stack([torch.tensor([1, 2]), torch.tensor([3, 4])], dim=1).numpy(),
    )
    np.testing.assert_array_equal(
        Tensor.arange(127, dtype=dtypes.int8).numpy(), np.arange(127, dtype=np.int8)
    )
    np.testing.assert_array_equal(
        Tensor.arange(127, -128, -1, dtype=dtypes.int8).numpy(), np.arange(127, -128, -1, dtype=np.int8)
    )
    np.testing.assert_array_equal((Tensor([1, 2, 3]) ** 2).numpy(), [1, 4, 9])
    np.testing.assert_array_equal((Tensor([6, 5]) & 3).numpy(), [2, 1])
    np.testing.assert_array_equal((Tensor([True, False]) ^ True).numpy(), [False, True])
    np.testing.assert_array_equal(Tensor.zeros((2, 0)).numpy(), np.zeros((2, 0)))
    np.testing.assert_array_equal(Tensor.linspace(0, 4, 5, dtype="int32").numpy(), [0, 1, 2, 3, 4])
    pads = (2, 1, 1, 3)
    np.testing.assert_allclose(
        Tensor(a).pad(pads, mode="circular").numpy(),
        torch.nn.functional.pad(tx[None], pads, mode="circular")[0].numpy(),
    )
    assert Tensor([1.0]).sum(dtype="float64").dtype == dtypes.float64


def test_scatter_reduce_is_the_tensor_src_form_and_has_gradients() -> None:
    # scatter(reduce="add") with a tensor src is refused (as the reference); scatter_reduce is the way, also
    # for gradients
    idx = np.array([[0, 1, 2, 0, 1], [2, 0, 1, 1, 0]])
    base, src = np.linspace(-1, 1, 15).reshape(3, 5), np.linspace(2, 3, 10).reshape(2, 5)
    x, s = Tensor(base, requires_grad=True), Tensor(src, requires_grad=True)
    out = x.scatter_reduce(0, Tensor(idx), s, "sum")
    tx, ts = torch.tensor(base, requires_grad=True), torch.tensor(src, requires_grad=True)
    tout = tx.scatter_reduce(0, torch.tensor(idx), ts, "sum")
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    assert x.grad is not None and s.grad is not None and tx.grad is not None and ts.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy())


def test_an_error_at_the_call_leaves_the_tensor_usable() -> None:
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    with pytest.raises(RuntimeError):
        x.expand(3, 2)
    with pytest.raises(RuntimeError):
        x.flip(0, 0)
    y = x.flip(0).expand(1, 2, 2).sum()
    y.backward()
    assert y.item() == 10.0
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 2)))


def test_scatter_reduce_keyword_with_a_scalar_src_still_works() -> None:
    idx = np.array([[0, 1, 2, 0, 1], [2, 0, 1, 1, 0]])
    base = np.linspace(-1, 1, 15).reshape(3, 5)
    for reduce, torch_reduce in (("add", "add"), ("multiply", "multiply")):
        got = Tensor(base).scatter(0, Tensor(idx), 2.5, reduce=reduce).numpy()
        want = torch.tensor(base).scatter(0, torch.tensor(idx), 2.5, reduce=torch_reduce).numpy()
        np.testing.assert_allclose(got, want)
