"""The Tensor front end (uopgrad.tensor): forward values against numpy, broadcasting, dtype promotion,
indexing, assignment, realization, errors, and gradients of every op against central finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.backend import Device
from uopgrad.config import Context
from uopgrad.dtype import least_upper_dtype
from uopgrad.errors import DeviceError
from uopgrad.nn import no_grad
from uopgrad.realized import is_realized_after, realized_view, strip_realized
from uopgrad.tensor import Tensor

DEV = "REFERENCE"


@pytest.fixture(autouse=True)
def _reference_default():
    old = Device.DEFAULT
    Device.DEFAULT = DEV
    Tensor.manual_seed(0)
    yield
    Device.DEFAULT = old


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def close(t: Tensor, expected, rtol=1e-6, atol=1e-6) -> None:
    out = t.numpy()
    with np.errstate(all="ignore"):
        exp = np.asarray(expected)
    assert out.shape == exp.shape, f"shape {out.shape} != {exp.shape}"
    np.testing.assert_allclose(out, exp, rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------------- creation


def test_from_lists_scalars_and_numpy():
    assert Tensor([1, 2, 3]).dtype == dtypes.int32
    assert Tensor([1.0, 2]).dtype == dtypes.float32
    assert Tensor([True, False]).dtype == dtypes.bool
    assert Tensor([[1, 2], [3, 4.5]]).shape == (2, 2)
    np.testing.assert_array_equal(Tensor([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])
    assert Tensor(3.5).shape == () and Tensor(3.5).item() == 3.5 and Tensor(3.5).uop.op is Ops.CONST
    assert Tensor(7).dtype == dtypes.int32 and Tensor(True).dtype == dtypes.bool
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = Tensor(a)
    assert t.dtype == dtypes.float64 and t.shape == (2, 3)
    np.testing.assert_array_equal(t.numpy(), a)
    assert Tensor(np.array(2.5, dtype=np.float16)).dtype == dtypes.float16
    assert Tensor([1, 2], dtype="float32").dtype == dtypes.float32
    assert Tensor([1, 2], dtype=dtypes.half).dtype == dtypes.float16
    np.testing.assert_array_equal(Tensor([1.9, -1.9], dtype=dtypes.int32).numpy(), [1, -1])
    assert Tensor([]).shape == (0,) and Tensor([]).dtype == dtypes.float32
    assert Tensor(None).shape == (0,)
    assert Tensor(np.float32(2.0)).item() == 2.0


def test_bad_creation_input():
    with pytest.raises(ValueError, match="rectangular"):
        Tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="can't make a Tensor"):
        Tensor({"a": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown dtype"):
        Tensor([1], dtype="float33")


def test_wrapping_a_uop():
    u = UOp.const(dtypes.float32, 2.0, DEV, (2, 2))
    t = Tensor(u)
    assert t.uop is u and t.shape == (2, 2)
    np.testing.assert_array_equal(t.numpy(), [[2, 2], [2, 2]])


def test_full_zeros_ones_are_unique_constants():
    z1, z2 = Tensor.zeros(2, 3), Tensor.zeros((2, 3))
    assert z1.uop is not z2.uop and z1.shape == (2, 3)
    assert any(u.op is Ops.UNIQUE for u in z1.uop.toposort())
    np.testing.assert_array_equal(Tensor.ones(2).numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(Tensor.full((2,), 7).numpy(), [7, 7])
    assert Tensor.full((2,), 7).dtype == dtypes.int32
    assert Tensor.zeros(3, dtype=dtypes.int8).dtype == dtypes.int8
    x = Tensor([[1, 2]])
    np.testing.assert_array_equal(x.zeros_like().numpy(), [[0, 0]])
    np.testing.assert_array_equal(x.ones_like(dtype=dtypes.float32).numpy(), [[1.0, 1.0]])
    np.testing.assert_array_equal(x.full_like(5).numpy(), [[5, 5]])


ARANGE = [
    (5,),
    (0,),
    (2, 9),
    (2, 9, 3),
    (10, 0, -3),
    (0, 1, 0.25),
    (-1.5, 2.5, 0.5),
    (1,),
    (3, 3),
    (17,),
    (1, 0),
]


@pytest.mark.parametrize("args", ARANGE)
def test_arange(args):
    t = Tensor.arange(*args)
    expected = np.arange(*args)
    assert t.shape == expected.shape
    np.testing.assert_allclose(t.numpy(), expected)
    assert t.dtype == (dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)
    assert not any(u.op is Ops.BUFFER for u in Tensor.arange(*args).uop.toposort()) or len(expected) == 0


def test_arange_needs_a_step():
    with pytest.raises(ValueError, match="step"):
        Tensor.arange(0, 5, 0)


@pytest.mark.parametrize("n,m", [(1, None), (3, None), (2, 4), (4, 2)])
def test_eye(n, m):
    np.testing.assert_array_equal(Tensor.eye(n, m).numpy(), np.eye(n, m))


def test_random_creation_is_seeded():
    Tensor.manual_seed(42)
    a = Tensor.rand(3, 4).numpy()
    Tensor.manual_seed(42)
    b = Tensor.rand(3, 4).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and (a >= 0).all() and (a < 1).all()
    assert Tensor.randn(2, 3).shape == (2, 3)
    u = Tensor.uniform(1000, low=-2.0, high=3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert Tensor.randn(2, dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor.normal(5, mean=10.0, std=0.001).numpy().mean() == pytest.approx(10.0, abs=0.01)
    r = Tensor.randint(100, low=3, high=5).numpy()
    assert set(r.tolist()) <= {3, 4} and Tensor.randint(2).dtype == dtypes.int32
    assert abs(Tensor.scaled_uniform(4, 4).numpy()).max() <= 0.25
    assert Tensor.glorot_uniform(3, 5).shape == (3, 5)


def test_empty_and_properties():
    t = Tensor.empty(2, 3, dtype=dtypes.int16)
    assert t.shape == (2, 3) and t.dtype == dtypes.int16 and t.device == DEV
    assert t.ndim == 2 and t.numel() == 6 and len(t) == 2 and t.element_size() == 2
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0))
    with pytest.raises(TypeError, match="ambiguous"):
        bool(Tensor([1.0]))
    assert repr(t).startswith("Tensor([[") and "dtype=dtypes.short" in repr(t)  # realized: its values


# ---------------------------------------------------------------------- elementwise math

X = np.array([[-2.5, -1.0, -0.3, 0.0], [0.2, 0.7, 1.5, 3.0]], dtype=np.float32)
POS = np.array([[0.1, 0.5, 1.0, 2.0], [3.0, 4.5, 7.0, 10.0]], dtype=np.float32)


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


UNARY = [
    ("neg", lambda t: -t, lambda x: -x, X),
    ("exp", Tensor.exp, np.exp, X),
    ("log", Tensor.log, np.log, POS),
    ("exp2", Tensor.exp2, np.exp2, X),
    ("log2", Tensor.log2, np.log2, POS),
    ("sin", Tensor.sin, np.sin, X),
    ("cos", Tensor.cos, np.cos, X),
    ("tan", Tensor.tan, np.tan, X),
    ("sqrt", Tensor.sqrt, np.sqrt, POS),
    ("rsqrt", Tensor.rsqrt, lambda x: 1 / np.sqrt(x), POS),
    ("reciprocal", Tensor.reciprocal, lambda x: 1 / x, POS),
    ("abs", Tensor.abs, np.abs, X),
    ("sign", Tensor.sign, np.sign, X),
    ("relu", Tensor.relu, lambda x: np.maximum(x, 0), X),
    ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), X),
    ("tanh", Tensor.tanh, np.tanh, X),
    ("gelu", Tensor.gelu, _gelu, X),
    ("softplus", Tensor.softplus, lambda x: np.log1p(np.exp(x)), X),
    ("square", Tensor.square, np.square, X),
    ("clip", lambda t: t.clip(-1.0, 1.0), lambda x: np.clip(x, -1, 1), X),
    ("clip_low", lambda t: t.clip(0.0), lambda x: np.maximum(x, 0), X),
    ("trunc", Tensor.trunc, np.trunc, X),
]


@pytest.mark.parametrize("name,fn,ref,data", UNARY, ids=[u[0] for u in UNARY])
def test_unary_forward(name, fn, ref, data):
    close(fn(Tensor(data)), ref(data.astype(np.float64)), rtol=2e-6, atol=2e-6)


def test_unary_on_ints_computes_in_float():
    t = Tensor([1, 4, 9])
    assert t.sqrt().dtype == dtypes.float32
    close(t.sqrt(), [1.0, 2.0, 3.0])
    close(t.exp(), np.exp([1.0, 4.0, 9.0]), rtol=1e-6)
    close(t.log(), np.log([1.0, 4.0, 9.0]))
    close(t.cos(), np.cos([1.0, 4.0, 9.0]))
    close(t.sigmoid(), 1 / (1 + np.exp(-np.array([1.0, 4.0, 9.0]))))


def test_special_values_through_composite_ops():
    close(Tensor([np.nan, np.inf, -np.inf]).sign(), [np.nan, 1.0, -1.0])
    close(Tensor([-100.0, 100.0]).sigmoid(), [0.0, 1.0])
    close(Tensor([-100.0, 100.0]).tanh(), [-1.0, 1.0])
    close(Tensor([100.0, -100.0]).softplus(), [100.0, 0.0])
    close(Tensor([0.5]).softplus(beta=2.0), np.log1p(np.exp([1.0])) / 2)


BINARY = [
    ("add", lambda a, b: a + b, np.add),
    ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply),
    ("div", lambda a, b: a / b, np.divide),
    ("pow", lambda a, b: a**b, np.power),
    ("maximum", Tensor.maximum, np.maximum),
    ("minimum", Tensor.minimum, np.minimum),
    ("lt", lambda a, b: a < b, np.less),
    ("le", lambda a, b: a <= b, np.less_equal),
    ("gt", lambda a, b: a > b, np.greater),
    ("ge", lambda a, b: a >= b, np.greater_equal),
    ("eq", lambda a, b: a == b, np.equal),
    ("ne", lambda a, b: a != b, np.not_equal),
]


@pytest.mark.parametrize("name,fn,ref", BINARY, ids=[b[0] for b in BINARY])
def test_binary_forward(name, fn, ref):
    a = np.array([[0.5, 1.0, 2.0], [3.0, 1.0, 0.25]], dtype=np.float32)
    b = np.array([[2.0, 1.0, 0.5], [-1.0, 1.0, 4.0]], dtype=np.float32)
    close(fn(Tensor(a), Tensor(b)), ref(a, b))
    close(fn(Tensor(a), 2.0), ref(a, np.float32(2.0)))
    close(
        fn(2.0, Tensor(b)) if name not in ("maximum", "minimum") else fn(Tensor(b), 2.0),
        ref(np.float32(2.0), b) if name not in ("maximum", "minimum") else ref(b, np.float32(2.0)),
    )


def test_where():
    c = Tensor([True, False, True])
    close(c.where(Tensor([1.0, 2.0, 3.0]), Tensor([10.0, 20.0, 30.0])), [1.0, 20.0, 3.0])
    close(c.where(1.0, Tensor([10.0, 20.0, 30.0])), [1.0, 20.0, 1.0])
    close(c.where(Tensor([1.0, 2.0, 3.0]), 0), [1.0, 0.0, 3.0])
    close(c.where(5, 7), [5, 7, 5])
    r = Tensor([[True], [False]]).where(Tensor([1, 2]), Tensor([0.5]))  # broadcast and promote
    assert r.dtype == dtypes.float32 and r.shape == (2, 2)
    close(r, [[1.0, 2.0], [0.5, 0.5]])
    close(Tensor([1, 0, 2]).where(1.0, 0.0), [1.0, 0.0, 1.0])  # a non-bool condition is cast


def test_integer_ops():
    a, b = Tensor([7, -7, 6]), Tensor([2, 2, -4])
    close(a // b, [3, -4, -2])
    close(a % b, [1, 1, -2])
    close(a & b, np.array([7, -7, 6]) & np.array([2, 2, -4]))
    close(a | b, np.array([7, -7, 6]) | np.array([2, 2, -4]))
    close(a ^ b, np.array([7, -7, 6]) ^ np.array([2, 2, -4]))
    close(~a, [-8, 6, -7])
    close(~Tensor([0, 255], dtype=dtypes.uint8), [255, 0])
    close(~Tensor([True, False]), [False, True])
    close(Tensor([1, 2]) << 3, [8, 16])
    close(Tensor([-16, 16]) >> 2, [-4, 4])
    assert (a / b).dtype == dtypes.float32  # true division
    close(a / b, [3.5, -3.5, -1.5])


def test_in_place_operators_keep_the_object():
    t = Tensor([1.0, 2.0])
    same = t
    t += 1
    t *= 2
    t -= 1
    t /= 5
    assert t is same
    close(t, [0.6, 1.0])


# ---------------------------------------------------------------------- broadcasting and promotion


def test_broadcasting():
    a, b = np.arange(3.0).reshape(3, 1), np.arange(4.0).reshape(1, 4)
    close(Tensor(a) + Tensor(b), a + b)
    m = np.arange(6.0).reshape(2, 3)
    close(Tensor(m) * Tensor([1.0, 2.0, 3.0]), m * [1, 2, 3])
    close(Tensor(5.0) + Tensor([1.0, 2.0]), [6.0, 7.0])
    c = Tensor(np.ones((2, 1, 3))) + Tensor(np.ones((4, 1)))
    assert c.shape == (2, 4, 3)


def test_mismatched_shapes_name_both():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        Tensor.ones(2, 3) + Tensor.ones(4)
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        Tensor([True, False, True]).where(Tensor([1.0, 2.0]), 0.0)


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (dtypes.int32, dtypes.float32, dtypes.float32),
        (dtypes.int8, dtypes.int16, dtypes.int16),
        (dtypes.uint8, dtypes.int8, dtypes.int16),
        (dtypes.bool, dtypes.int32, dtypes.int32),
        (dtypes.float16, dtypes.float32, dtypes.float32),
        (dtypes.int64, dtypes.float16, dtypes.float16),
        (dtypes.float32, dtypes.float64, dtypes.float64),
        (dtypes.uint32, dtypes.int32, dtypes.int64),
    ],
)
def test_dtype_promotion(a, b, expected):
    x, y = Tensor([1, 2], dtype=a), Tensor([1, 0], dtype=b)
    assert (x + y).dtype == expected and (y * x).dtype == expected


def test_python_scalars_keep_the_tensor_dtype_when_they_fit():
    assert (Tensor([1, 2], dtype=dtypes.int8) + 1).dtype == dtypes.int8
    assert (Tensor([1, 2], dtype=dtypes.float16) * 2.5).dtype == dtypes.float16
    assert (Tensor([1, 2]) + 2.5).dtype == dtypes.float32
    close(Tensor([1, 2]) - 2.5, [-1.5, -0.5])
    close(2.5 - Tensor([1, 2]), [1.5, 0.5])
    assert (Tensor([True]) + 1).dtype == dtypes.int32


def test_different_devices_are_an_error():
    with pytest.raises(RuntimeError, match="different devices"):
        Tensor([1.0]) + Tensor([1.0]).to("REFERENCE:1")


# ---------------------------------------------------------------------- reductions

R = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, -1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(axis, keepdim):
    t = Tensor(R)
    kw = {"axis": axis, "keepdims": keepdim}
    close(t.sum(axis, keepdim), R.sum(**kw), rtol=1e-5)
    close(t.max(axis, keepdim), R.max(**kw))
    close(t.min(axis, keepdim), R.min(**kw))
    close(t.mean(axis, keepdim), R.mean(**kw), rtol=1e-5)
    close(t.prod(axis, keepdim), R.prod(**kw), rtol=1e-5)
    close(t.var(axis, keepdim), R.var(ddof=1, **kw), rtol=1e-5)
    close(t.std(axis, keepdim), R.std(ddof=1, **kw), rtol=1e-5)
    close(t.var(axis, keepdim, correction=0), R.var(**kw), rtol=1e-5)


def test_reduction_dtypes():
    assert Tensor([100, 100], dtype=dtypes.int8).sum().dtype == dtypes.int32
    assert Tensor([100, 100], dtype=dtypes.int8).sum().item() == 200
    assert Tensor([True, True, False]).sum().item() == 2
    assert Tensor([1, 2], dtype=dtypes.uint8).sum().dtype == dtypes.uint32
    h = Tensor([1.0, 2.0], dtype=dtypes.float16)
    assert h.sum().dtype == dtypes.float16 and h.mean().dtype == dtypes.float16
    assert Tensor([1, 2]).mean().dtype == dtypes.float32 and Tensor([1, 2]).mean().item() == 1.5
    assert Tensor([1, 2]).sum(dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor([3, 1, 2]).max().item() == 3 and Tensor([3, 1, 2]).min().item() == 1
    assert Tensor([3, 1, 2], dtype=dtypes.uint8).min().item() == 1
    assert Tensor([True, False]).max().item() is True and Tensor([True, False]).min().item() is False
    assert Tensor([2, 3, 4]).prod().item() == 24


def test_reductions_of_a_scalar():
    s = Tensor(3.0)
    assert s.sum().item() == 3.0 and s.sum(0).item() == 3.0 and s.max(-1).item() == 3.0
    with pytest.raises(IndexError):
        s.sum(1)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family(axis):
    x = R[0].astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    sm = e / e.sum(axis, keepdims=True)
    t = Tensor(R[0])
    close(t.softmax(axis), sm, rtol=1e-5)
    close(t.log_softmax(axis), np.log(sm), rtol=1e-5, atol=1e-5)
    close(t.logsumexp(axis), np.log(np.exp(x).sum(axis)), rtol=1e-5)
    close(t.logsumexp(axis, keepdim=True), np.log(np.exp(x).sum(axis, keepdims=True)), rtol=1e-5)


def test_softmax_is_stable_for_large_inputs():
    close(Tensor([1000.0, 1000.0]).softmax(), [0.5, 0.5])
    close(Tensor([1000.0, 1000.0]).logsumexp(), 1000.0 + math.log(2))


def test_argmax_argmin_take_the_first_occurrence():
    x = np.array([[1, 5, 5, 0], [7, 7, 2, 7], [0, 0, 0, 0]], dtype=np.float32)
    t = Tensor(x)
    close(t.argmax(1), [1, 0, 0])
    close(t.argmin(1), [3, 2, 0])
    close(t.argmax(0), [1, 1, 0, 1])
    assert t.argmax().item() == 4 and t.argmax().dtype == dtypes.int32
    close(t.argmax(1, keepdim=True), [[1], [0], [0]])
    close(Tensor([3, 9, 2]).argmax(), 1)
    close(Tensor([[1.0, 2.0]]).argmax(axis=-1), [1])


def test_one_hot_and_crossentropy():
    y = Tensor([2, 0, 1])
    np.testing.assert_array_equal(y.one_hot(4).numpy(), np.eye(4, dtype=np.int32)[[2, 0, 1]])
    assert y.one_hot(4).dtype == dtypes.int32
    logits = rng(3).standard_normal((3, 4))
    e = np.exp(logits - logits.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    expected = -np.log(p[[0, 1, 2], [2, 0, 1]]).mean()
    close(Tensor(logits).sparse_categorical_crossentropy(y), expected, rtol=1e-6)
    with pytest.raises(TypeError, match="integer"):
        Tensor([1.0]).one_hot(2)


# ---------------------------------------------------------------------- movement

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_movement_ops():
    t = Tensor(A)
    close(t.reshape(4, -1), A.reshape(4, -1))
    close(t.reshape((6, 4)), A.reshape(6, 4))
    close(t.reshape(-1), A.reshape(-1))
    close(t[:, :1].expand(2, 5, 4), np.broadcast_to(A[:, :1], (2, 5, 4)))
    close(Tensor([1.0, 2.0]).expand(3, 2), np.broadcast_to([1.0, 2.0], (3, 2)))
    close(t.permute(2, 0, 1), A.transpose(2, 0, 1))
    close(t.permute((1, 2, 0)), A.transpose(1, 2, 0))
    close(t.transpose(0, 2), A.swapaxes(0, 2))
    close(t.transpose(), A.swapaxes(1, 0))
    close(t.T, A.T)
    close(t.pad(((1, 0), (0, 2), (1, 1))), np.pad(A, ((1, 0), (0, 2), (1, 1))))
    close(t.pad(((0, 0), None, (1, 0)), value=-1.0), np.pad(A, ((0, 0), (0, 0), (1, 0)), constant_values=-1))
    close(t.shrink(((0, 1), (1, 3), None)), A[0:1, 1:3, :])
    close(t.flip(0), A[::-1])
    close(t.flip((0, 2)), A[::-1, :, ::-1])
    close(t.flip(-1), A[..., ::-1])
    close(t.flatten(), A.reshape(-1))
    close(t.flatten(1), A.reshape(2, 12))
    close(t.flatten(0, 1), A.reshape(6, 4))
    close(t.unflatten(2, (2, 2)), A.reshape(2, 3, 2, 2))
    close(Tensor(3.0).flatten(), [3.0])
    assert t.reshape(2, 3, 4) is t and t.permute(0, 1, 2) is t and t.flip(()) is t  # no-ops return self


def test_squeeze_unsqueeze():
    t = Tensor(np.zeros((1, 3, 1)))
    assert t.squeeze().shape == (3,)
    assert t.squeeze(0).shape == (3, 1) and t.squeeze(-1).shape == (1, 3) and t.squeeze(1).shape == (1, 3, 1)
    assert t.unsqueeze(0).shape == (1, 1, 3, 1) and t.unsqueeze(-1).shape == (1, 3, 1, 1)
    assert t.unsqueeze(2).shape == (1, 3, 1, 1)
    with pytest.raises(IndexError):
        t.unsqueeze(5)


def test_cat_and_stack():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(9.0).reshape(3, 3)
    close(Tensor(a).cat(Tensor(b)), np.concatenate([a, b]))
    close(Tensor.cat(Tensor(a), Tensor(a * 2), dim=1), np.concatenate([a, a * 2], 1))
    close(Tensor.cat(Tensor(a), dim=-1), a)
    close(Tensor.stack(Tensor(a), Tensor(a + 1), Tensor(a + 2)), np.stack([a, a + 1, a + 2]))
    close(Tensor(a).stack(Tensor(a + 1), dim=-1), np.stack([a, a + 1], -1))
    assert Tensor.cat(Tensor([1, 2]), Tensor([0.5])).dtype == dtypes.float32
    with pytest.raises(ValueError, match="cat"):
        Tensor(a).cat(Tensor(b), dim=1)


def test_bad_movement_arguments():
    t = Tensor(A)
    with pytest.raises(ValueError):
        t.reshape(5, -1)
    with pytest.raises(ValueError):
        t.reshape(-1, -1)
    with pytest.raises(ValueError):
        t.permute(0, 1)
    with pytest.raises(IndexError):
        t.permute(0, 1, 3)
    with pytest.raises(ValueError):
        t.pad(((0, 1),))
    # a negative amount cuts, as in the reference and torch's F.pad
    cut = t.pad(((-1, 0), None, None))
    assert cut.shape == (t.shape[0] - 1, *t.shape[1:])
    np.testing.assert_array_equal(cut.numpy(), t.numpy()[1:])


# ---------------------------------------------------------------------- indexing

IDX = [
    0,
    -1,
    1,
    (0, 1),
    (1, -2, 3),
    slice(None),
    slice(1, None),
    slice(None, -1),
    slice(None, None, -1),
    (slice(None), slice(None, None, 2)),
    (slice(None), slice(2, 0, -1)),
    (Ellipsis, 1),
    (1, Ellipsis),
    (None, 0),
    (slice(None), None, slice(None), None),
    (Ellipsis, None),
    (0, slice(None), slice(1, 4, 2)),
    (slice(None), slice(None), slice(None, None, -3)),
    (slice(None), slice(None), slice(-1, 0, -2)),
    (slice(None), slice(5, 9)),
    (slice(None), slice(2, 1)),
    (slice(-100, 100),),
    (1, 2, 3),
    (Ellipsis,),
    (slice(None), 0, None, slice(None, None, 3)),
]


@pytest.mark.parametrize("idx", IDX, ids=[repr(i) for i in IDX])
def test_getitem_matches_numpy(idx):
    close(Tensor(A)[idx], A[idx])


def test_getitem_errors():
    t = Tensor(A)
    with pytest.raises(IndexError, match="out of bounds"):
        t[2]
    with pytest.raises(IndexError, match="out of bounds"):
        t[0, -4]
    with pytest.raises(IndexError, match="too many"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        t[..., 0, ...]
    # int tensors index (test_tensor_ops_torch.py); bool masks have a data-dependent shape, floats no meaning
    with pytest.raises(IndexError, match="masked_select"):
        t[Tensor([True, False])]
    with pytest.raises(IndexError, match="integer tensors"):
        t[Tensor([0.0, 1.0])]


SET = [
    (1, 5.0),
    ((0, 1), [7.0, 8.0, 9.0, 10.0]),
    ((slice(None), slice(None), slice(1, 3)), -1.0),
    ((slice(None), slice(None, None, 2)), 3.0),
    ((Ellipsis, slice(None, None, -2)), [1.0, 2.0]),
    ((0, slice(None), 1), [[4.0], [5.0], [6.0]][0]),
    (slice(None), 0.5),
]


@pytest.mark.parametrize("idx,value", SET, ids=[repr(s[0]) for s in SET])
def test_setitem_matches_numpy(idx, value):
    ref = A.copy()
    ref[idx] = value
    t = Tensor(A.copy())
    t[idx] = value if not isinstance(value, list) else Tensor(value)
    close(t, ref)
    u = Tensor(A).contiguous()  # the same on an unrealized value
    u[idx] = value if not isinstance(value, list) else Tensor(value)
    close(u, ref)


def test_setitem_writes_into_the_buffer_and_its_views():
    buf = Tensor.zeros(2, 4).contiguous().realize()
    row = buf[1]
    buf[1, 1:3] = Tensor([5.0, 6.0])
    close(buf, [[0, 0, 0, 0], [0, 5, 6, 0]])
    close(row, [0, 5, 6, 0])  # a view of the same buffer sees the write once it is realized
    with pytest.raises(RuntimeError, match="int"):  # a tensor of another dtype is refused, as the reference
        buf[0] = Tensor([1, 2, 3, 4])
    buf[0] = Tensor([1, 2, 3, 4]).cast(buf.dtype)
    buf[1, 0] = 9  # a Python value takes the tensor's dtype
    close(buf, [[1, 2, 3, 4], [9, 5, 6, 0]])
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        buf[0] = Tensor([1.0, 2.0, 3.0])


def test_chained_unrealized_setitem():
    g1 = Tensor.zeros(4).contiguous()
    g1[2] = 1
    g2 = Tensor.zeros(5, 4).contiguous()
    g2[0] = g1
    expected = np.zeros((5, 4))
    expected[0, 2] = 1
    close(g2, expected)
    close(g1, [0, 0, 1, 0])


# ---------------------------------------------------------------------- assign and clone


def test_assign_keeps_the_object_and_replaces_the_value():
    t = Tensor([1.0, 2.0]).realize()
    buf = t.uop.base
    same = t.assign(Tensor([3.0, 4.0]))
    assert same is t and t.uop.op is Ops.AFTER
    close(t, [3.0, 4.0])
    assert t.uop is buf  # realizing an assign to a buffer leaves the tensor on that buffer
    t.assign(7.0)
    close(t, [7.0, 7.0])
    t.assign(t + 1)
    close(t, [8.0, 8.0])


def test_assign_into_a_view_updates_the_base_tensor():
    base = Tensor.zeros(2, 4).contiguous().realize()
    base[:, 0:2].assign(Tensor([[5.0, 6.0], [7.0, 8.0]]))
    close(base, [[5, 6, 0, 0], [7, 8, 0, 0]])


def test_assign_errors():
    t = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"shape \(3,\).*\(2,\)"):
        t.assign(Tensor([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="int"):
        t.assign(Tensor([1, 2]))
    close(t.assign(Tensor(5.0)), [5.0, 5.0])  # a scalar broadcasts


def test_clone_is_a_copy_in_a_fresh_buffer():
    src = Tensor([1.0, 2.0, 3.0]).realize()
    c = src.clone()
    assert c.uop.op is Ops.AFTER and c.uop.src[1].op is Ops.STORE
    close(c, [1.0, 2.0, 3.0])
    assert c.uop.base is not src.uop.base
    c[0] = 10.0
    close(c, [10.0, 2.0, 3.0])
    close(src, [1.0, 2.0, 3.0])


# ---------------------------------------------------------------------- matmul


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 4), (4, 5)),
        ((4,), (4, 2)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 5)),
        ((2, 3, 4), (2, 4, 5)),
        ((5, 1, 3, 4), (2, 4, 6)),
    ],
)
def test_matmul(sa, sb):
    a, b = rng(0).standard_normal(sa).astype(np.float32), rng(1).standard_normal(sb).astype(np.float32)
    close(Tensor(a) @ Tensor(b), a @ b, rtol=1e-5, atol=1e-5)
    close(Tensor(a).dot(Tensor(b)), a @ b, rtol=1e-5, atol=1e-5)
    close(Tensor(b).matmul(Tensor(a), reverse=True), a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_dtypes_and_errors():
    assert (Tensor([[1, 2]]) @ Tensor([[3], [4]])).dtype == dtypes.int32
    close(Tensor([[1, 2]]) @ Tensor([[3], [4]]), [[11]])
    assert (Tensor([[1.0]], dtype=dtypes.half) @ Tensor([[2.0]], dtype=dtypes.half)).dtype == dtypes.half
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        Tensor.ones(2, 3) @ Tensor.ones(4, 2)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        Tensor(1.0) @ Tensor.ones(2)


def _composed_dot(a: Tensor, b: Tensor, dtype=None) -> Tensor:
    """dot spelled out in Tensor ops, as users could write it."""
    n2 = b.ndim
    ones = (1,) * min(a.ndim - 1, n2 - 1, 1)
    x = a.reshape(a.shape[:-1] + ones + a.shape[-1:])
    wt = b.reshape(b.shape[:-2] + ones + b.shape[-min(n2, 2) :]).transpose(-1, -min(n2, 2))
    out = least_upper_dtype(x.dtype, wt.dtype) if dtype is None else dtype
    return (x * wt).sum(-1, dtype=dtype).cast(out)


@pytest.mark.parametrize(
    "sa,sb", [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)), ((5, 1, 3, 4), (2, 4, 6))]
)
@pytest.mark.parametrize(
    "da,db",
    # operands of one dtype, and an int32 one promoted to float32
    [*((dt, dt) for dt in (dtypes.float32, dtypes.half, dtypes.int8)), (dtypes.int32, dtypes.float32)],
)
def test_matmul_builds_the_graph_of_its_tensor_ops(sa, sb, da, db):
    # dot builds its nodes directly; they must be the very nodes of the Tensor ops it stands for, so
    # kernels and gradients are the same as for a hand-written multiply-and-sum
    a = Tensor(rng(0).standard_normal(sa) * 3, dtype=da, requires_grad=dtypes.is_float(da))
    b = Tensor(rng(1).standard_normal(sb) * 3, dtype=db)
    got = a @ b
    assert got.uop is _composed_dot(a, b).uop and got.requires_grad == (a.requires_grad or None)
    assert a.dot(b, dtype=dtypes.float64).uop is _composed_dot(a, b, dtypes.float64).uop
    with no_grad():
        cut = a @ b
    assert cut.requires_grad is False
    assert (cut.uop.src[0] if cut.uop.op is Ops.DETACH else cut.uop) is got.uop  # the same graph, cut


def test_matmul_batch_mismatch_and_devices_are_named():
    with pytest.raises(ValueError, match=r"\(3, 2, 1, 4\) and \(2, 1, 5, 4\) can't be broadcast"):
        Tensor.ones(3, 2, 4) @ Tensor.ones(2, 4, 5)
    with pytest.raises(DeviceError, match="different devices"):
        Tensor.ones(2, 3, device="REFERENCE") @ Tensor.ones(3, 2, device="REFERENCE:1")


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.half, dtypes.int32, dtypes.bool])
def test_relu_builds_the_graph_of_its_tensor_ops(dt):
    t = Tensor([[-1.5, 0.0, 2.0]], dtype=dt, requires_grad=dtypes.is_float(dt))
    assert t.relu().uop is (t > 0).where(t, 0).uop
    assert t.relu().tolist() == (t > 0).where(t, 0).tolist()


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.half, dtypes.int32, dtypes.bool])
def test_sub_builds_the_graph_of_its_tensor_ops(dt):
    a = Tensor([[1, 2, 3]], dtype=dt, requires_grad=dtypes.is_float(dt) or None)
    b = Tensor([[3], [1]], dtype=dt)
    want = a + (-b)
    graph = want.uop  # (before tolist() realizes it)
    assert (a - b).uop is graph and (a - b).requires_grad == want.requires_grad
    assert b.sub(a, reverse=True).uop is graph and (a - 2).uop is (a + (-a.ufix(2))).uop
    with no_grad():
        cut = a - b
    assert cut.requires_grad is False and (cut.uop.src[0] if cut.uop.op is Ops.DETACH else cut.uop) is graph
    assert (a - b).tolist() == want.tolist()
    with pytest.raises(ValueError, match=r"\(1, 3\) and \(4,\) can't be broadcast"):
        a - Tensor([1, 2, 3, 4], dtype=dt)


def test_linear():
    x, w, b = rng(0).standard_normal((3, 4)), rng(1).standard_normal((4, 2)), rng(2).standard_normal(2)
    close(Tensor(x).linear(Tensor(w), Tensor(b)), x @ w + b, rtol=1e-5, atol=1e-6)
    close(Tensor(x).linear(Tensor(w)), x @ w, rtol=1e-5, atol=1e-6)
    close(Tensor(x).linear(Tensor(w[:, 0])), x * w[:, 0], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- casts and markers


def test_casts():
    t = Tensor([-1.7, 0.0, 2.5])
    assert t.int().dtype == dtypes.int32 and t.int().tolist() == [-1, 0, 2]
    assert t.bool().tolist() == [True, False, True]
    assert t.half().dtype == dtypes.float16 and t.double().dtype == dtypes.float64
    assert t.long().dtype == dtypes.int64 and Tensor([1]).float().dtype == dtypes.float32
    assert t.cast("int8").dtype == dtypes.int8 and t.cast(dtypes.float32) is t
    assert Tensor([1.0]).bitcast(dtypes.uint32).item() == 0x3F800000
    with pytest.raises(ValueError, match="item sizes"):
        Tensor([1.0]).bitcast(dtypes.int64)


def test_detach_contiguous_and_requires_grad_propagation():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = Tensor([3.0, 4.0])
    assert (a + b).requires_grad is True and (b * 2).requires_grad is None
    assert Tensor([1.0], requires_grad=False).exp().requires_grad is False
    assert a.detach().requires_grad is False and a.detach().uop.op is Ops.DETACH
    assert a.contiguous().uop is a.uop  # a buffer is contiguous already
    c = (a + 1).contiguous()
    assert c.uop.op is Ops.CONTIGUOUS and c.requires_grad is True
    assert (a + 1).contiguous_backward().uop.op is Ops.CONTIGUOUS_BACKWARD
    close(c, [2.0, 3.0])
    assert b.requires_grad_().requires_grad is True and b.requires_grad_(False).requires_grad is False


def test_to_device():
    t = Tensor([1.0, 2.0])
    assert t.to("reference") is t
    u = t.to("REFERENCE:1")
    assert u.device == "REFERENCE:1"
    close(u + 1, [2.0, 3.0])
    with pytest.raises(RuntimeError, match="installed backends are.*REFERENCE"):
        t.to("GPU")


# ---------------------------------------------------------------------- realization


def test_realize_leaves_the_realized_form():
    src = Tensor([1.0, 2.0, 3.0, 4.0]).reshape(2, 2)
    t = src * 2
    graph = t.uop
    same = t.realize()
    assert same is t and is_realized_after(t.uop)
    view = realized_view(t.uop)
    assert view.op is Ops.RESHAPE and view.src[0].op is Ops.BUFFER and view.shape == (2, 2)
    assert t.uop.src[1].src[1] is graph  # the graph that computed it stays, for gradients
    assert strip_realized((t + 1).uop).src[0] is view  # later work reads the buffer
    first = t.uop
    t.realize()
    assert t.uop is first  # realizing twice is a no-op
    np.testing.assert_array_equal(t.numpy(), [[2, 4], [6, 8]])
    assert t.tolist() == [[2.0, 4.0], [6.0, 8.0]] and Tensor(5).item() == 5


def test_realize_several_tensors_together_and_aliases():
    a = Tensor([1.0]) + 1
    b = a * 3
    alias = Tensor(a.uop)
    Tensor.realize(a, b)
    assert is_realized_after(a.uop) and is_realized_after(b.uop)
    assert realized_view(a.uop).base.op is Ops.BUFFER and realized_view(b.uop).base.op is Ops.BUFFER
    assert alias.uop is a.uop  # every tensor holding the realized graph now holds the realized value
    assert b.item() == 6.0


def test_realize_is_refused_without_device_usage():
    t = Tensor([1.0]) + 1
    with Context(ALLOW_DEVICE_USAGE=0):
        with pytest.raises(RuntimeError, match="ALLOW_DEVICE_USAGE"):
            t.realize()
        with pytest.raises(RuntimeError):
            t.numpy()
    assert t.item() == 2.0


def test_item_needs_one_element():
    with pytest.raises(ValueError, match="one element"):
        Tensor([1.0, 2.0]).item()
    assert Tensor([[3.0]]).item() == 3.0


def test_symbolic_shapes_realize_but_have_no_numpy():
    v = UOp.variable("n", 1, 4)
    x = Tensor([1.0, 2.0, 3.0, 4.0])[: v.bind(3)] * 2
    assert isinstance(x.shape[0], UOp)
    with pytest.raises(RuntimeError, match="symbolic"):
        x.numpy()
    x.realize()
    close(x[:2], [2.0, 4.0])


# ---------------------------------------------------------------------- gradient entry points


def test_gradient_basics():
    x = Tensor([1.0, 2.0, 3.0])
    (dx,) = (x * x).sum().gradient(x)
    close(dx, [2.0, 4.0, 6.0])
    close((x * x).gradient(x, gradient=Tensor([1.0, 0.0, 2.0]))[0], [2.0, 0.0, 12.0])
    w = Tensor.randn(3)
    close(x.sum().gradient(w)[0], [0.0, 0.0, 0.0])  # a target not reached gets zeros


def test_gradient_errors():
    x = Tensor([1.0, 2.0])
    with pytest.raises(AssertionError):
        (x * x).gradient(x)
    xi = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="only float Tensors have gradient"):
        xi.sum().gradient(xi)
    with pytest.raises(RuntimeError, match="only float Tensors have gradient"):
        xi.float().sum().gradient(xi)


def test_backward_accumulates_into_the_same_grad_object():
    x = Tensor([3.0], requires_grad=True)
    (x * 2)[0].backward()
    g = x.grad
    close(g, [2.0])
    (x * 3)[0].backward()
    assert x.grad is g
    close(x.grad, [5.0])
    (x * x)[0].backward()
    assert x.grad is g
    close(x.grad, [11.0])


def test_backward_candidates_are_live_tensors_that_require_grad():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = Tensor([3.0, 4.0])
    mid = a * 2  # an intermediate that requires grad gets its own gradient
    (mid * b).sum().backward()
    close(a.grad, [6.0, 8.0])
    close(mid.grad, [3.0, 4.0])
    assert b.grad is None


def test_gradient_through_clone():
    src = Tensor([1.0, 2.0, 3.0, 4.0])
    x = src.clone().requires_grad_(True)
    (x * 2).sum().backward()
    close(x.grad, [2.0, 2.0, 2.0, 2.0])
    assert src.grad is None
    src2 = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (src2.clone() * 2).sum().backward()
    close(src2.grad, [2.0, 2.0, 2.0, 2.0])


# ---------------------------------------------------------------------- calls


def test_call_and_as_param():
    a, b = Tensor.randn(4, 8), Tensor.randn(8, 4)
    c = Tensor.call(a, b, fxn=a.as_param(0) @ b.as_param(1))
    assert c.uop.op is Ops.GETTUPLE and c.uop.src[0].op is Ops.FUNCTION
    close(c, a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-6)
    p = a.as_param(3).uop
    assert p.op is Ops.PARAM and p.arg == 3 and p.shape == (4, 8) and p.device == DEV
    body = UOp.param(0, dtypes.float32, (4, 8)) + UOp.param(1, dtypes.float32, (4, 8))
    close(Tensor.call(a, a, fxn=body), a.numpy() * 2)


def test_call_gradients():
    a, b = Tensor.ones(10, 10, requires_grad=True), Tensor.ones(10, 10, requires_grad=True)
    body = a.as_param(0) + b.as_param(1)
    Tensor.call(a, b, fxn=body).mean().backward()
    close(a.grad, np.full((10, 10), 0.01))
    close(b.grad, np.full((10, 10), 0.01))
    a.grad = b.grad = None
    Tensor.call(a, b, fxn=body, grad_fxn=lambda g, call: (g, g)).mean().backward()
    close(a.grad, np.full((10, 10), 0.01))


def add_mul(c: UOp, d: UOp, a: UOp, b: UOp) -> UOp:
    return UOp.sink(c.store(a + b), d.store(a * b))


def add_mul_grad(gc: UOp, gd: UOp, call: UOp) -> tuple[UOp | None, ...]:
    a, b = Tensor(call.src[3]), Tensor(call.src[4])
    return (None, None, (Tensor(gc) + Tensor(gd) * b).uop, (Tensor(gc) + Tensor(gd) * a).uop)


def test_custom_kernel_outputs_and_gradients():
    an = rng(0).standard_normal((4, 4)).astype(np.float32)
    bn = rng(1).standard_normal((4, 4)).astype(np.float32)
    a, b = Tensor(an, requires_grad=True), Tensor(bn, requires_grad=True)
    c, d, _, _ = Tensor.custom_kernel(
        Tensor.empty(4, 4), Tensor.empty(4, 4), a, b, fxn=add_mul, grad_fxn=add_mul_grad
    )
    assert c.requires_grad is True and c.uop.op is Ops.AFTER and c.uop.src[1].op is Ops.CALL
    (c * d).sum().backward()  # before realizing c and d: realizing replaces their graphs by buffers
    close(c, an + bn, rtol=1e-6)
    close(d, an * bn, rtol=1e-6)
    close(a.grad, an * bn + (an + bn) * bn, rtol=1e-5, atol=1e-6)
    close(b.grad, an * bn + (an + bn) * an, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- gradients by finite differences


def fd_check(fn, *inputs: np.ndarray, h: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    """The gradient of `fn` (a vector-Jacobian product with a random cotangent, never all ones) against
    central differences in float64, for every element of every input."""
    xs = [np.asarray(x, dtype=np.float64) for x in inputs]
    ts = [Tensor(x, requires_grad=True) for x in xs]
    out = fn(*ts)
    assert out.dtype == dtypes.float64, out.dtype
    v = rng(7).standard_normal(out.shape)
    grads = out.gradient(*ts, gradient=Tensor(v))

    def f(*arrays: np.ndarray) -> float:
        return float((fn(*(Tensor(a) for a in arrays)).numpy() * v).sum())

    for i, (x, g) in enumerate(zip(xs, grads)):
        got = g.numpy()
        assert got.shape == x.shape, f"gradient shape {got.shape} != input shape {x.shape}"
        num = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            step = h * max(1.0, abs(x[j]))
            hi, lo = [a.copy() for a in xs], [a.copy() for a in xs]
            hi[i][j] += step
            lo[i][j] -= step
            num[j] = (f(*hi) - f(*lo)) / (2 * step)
        np.testing.assert_allclose(got, num, rtol=rtol, atol=atol, err_msg=f"input {i}")


def _r(*shape: int, low: float = -2.0, high: float = 2.0, seed: int = 0) -> np.ndarray:
    return rng(seed).uniform(low, high, shape)


def _pos(*shape: int, seed: int = 0) -> np.ndarray:
    return rng(seed).uniform(0.5, 2.0, shape)


# (name, fn, inputs): every op of the Tensor front end that has a gradient
GRAD_CASES = [
    ("add", lambda a, b: a + b, [_r(2, 3), _r(2, 3, seed=1)]),
    ("add_broadcast", lambda a, b: a + b, [_r(2, 1), _r(1, 3, seed=1)]),
    ("sub", lambda a, b: a - b, [_r(2, 3), _r(3, seed=1)]),
    ("rsub_scalar", lambda a: 2.0 - a, [_r(4)]),
    ("mul", lambda a, b: a * b, [_r(2, 3), _r(2, 3, seed=1)]),
    ("div", lambda a, b: a / b, [_r(2, 3), _pos(2, 3, seed=1)]),
    ("rdiv_scalar", lambda a: 3.0 / a, [_pos(4)]),
    ("neg", lambda a: -a, [_r(5)]),
    ("exp", Tensor.exp, [_r(5)]),
    ("log", Tensor.log, [_pos(5)]),
    ("exp2", Tensor.exp2, [_r(5)]),
    ("log2", Tensor.log2, [_pos(5)]),
    ("sin", Tensor.sin, [_r(5)]),
    ("cos", Tensor.cos, [_r(5)]),
    ("tan", Tensor.tan, [_r(5, low=-1.0, high=1.0)]),
    ("sqrt", Tensor.sqrt, [_pos(5)]),
    ("rsqrt", Tensor.rsqrt, [_pos(5)]),
    ("reciprocal", Tensor.reciprocal, [_pos(5)]),
    ("pow", lambda a, b: a**b, [_pos(4), _r(4, seed=1)]),
    ("pow_scalar_exponent", lambda a: a**3.0, [_r(4)]),
    ("pow_scalar_base", lambda b: 2.0**b, [_r(4)]),
    ("square", Tensor.square, [_r(5)]),
    ("maximum", Tensor.maximum, [_r(6), _r(6, seed=1)]),
    ("minimum", Tensor.minimum, [_r(6), _r(6, seed=1)]),
    ("maximum_scalar", lambda a: a.maximum(0.1), [_r(6)]),
    ("abs", Tensor.abs, [_r(6)]),
    ("sign", lambda a: a.sign() * a, [_r(6)]),
    ("relu", Tensor.relu, [_r(6)]),
    ("sigmoid", Tensor.sigmoid, [_r(6)]),
    ("tanh", Tensor.tanh, [_r(6)]),
    ("gelu", Tensor.gelu, [_r(6)]),
    ("softplus", Tensor.softplus, [_r(6)]),
    ("softplus_beta", lambda a: a.softplus(beta=3.0), [_r(6)]),
    ("clip", lambda a: a.clip(-1.0, 1.0), [_r(8)]),
    ("where", lambda a, b: (a < b).where(a, b * 2), [_r(6), _r(6, seed=1)]),
    ("where_scalar", lambda a: (a > 0).where(a * a, 1.0), [_r(6)]),
    ("comparisons", lambda a, b: (a >= b).where(a, 0.0) + (a != b).where(b, 0.0), [_r(6), _r(6, seed=1)]),
    ("sum", lambda a: a.sum(), [_r(2, 3)]),
    ("sum_axis", lambda a: a.sum(1), [_r(2, 3, 2)]),
    ("sum_axes_keepdim", lambda a: a.sum((0, 2), keepdim=True), [_r(2, 3, 2)]),
    ("max", lambda a: a.max(), [_r(2, 3)]),
    ("max_axis", lambda a: a.max(0), [_r(3, 4)]),
    ("min_axis", lambda a: a.min(-1, keepdim=True), [_r(3, 4)]),
    ("mean", lambda a: a.mean(), [_r(2, 3)]),
    ("mean_axis", lambda a: a.mean(1), [_r(2, 3)]),
    ("prod", lambda a: a.prod(1), [_r(2, 3)]),
    ("var", lambda a: a.var(1), [_r(2, 4)]),
    ("std", lambda a: a.std(), [_r(2, 4)]),
    ("softmax", lambda a: a.softmax(), [_r(2, 4)]),
    ("softmax_axis0", lambda a: a.softmax(0), [_r(3, 2)]),
    ("log_softmax", lambda a: a.log_softmax(), [_r(2, 4)]),
    ("logsumexp", lambda a: a.logsumexp(1), [_r(2, 4)]),
    ("logsumexp_all", lambda a: a.logsumexp(), [_r(2, 3)]),
    ("reshape", lambda a: a.reshape(3, -1) * a.reshape(3, 2).flip(0), [_r(2, 3)]),
    ("expand", lambda a: a.expand(3, 4) * Tensor(_r(3, 4, seed=5)), [_r(1, 4)]),
    ("permute", lambda a: a.permute(2, 0, 1) * Tensor(_r(4, 2, 3, seed=5)), [_r(2, 3, 4)]),
    ("transpose", lambda a: a.transpose(0, 1) * Tensor(_r(3, 2, seed=5)), [_r(2, 3)]),
    ("T", lambda a: a.T.exp(), [_r(2, 3)]),
    ("pad", lambda a: a.pad(((1, 0), (0, 2))).exp(), [_r(2, 3)]),
    ("pad_value", lambda a: a.pad(((1, 1), None), value=2.0) * 1.5, [_r(2, 3)]),
    ("shrink", lambda a: a.shrink(((1, 3), (0, 2))), [_r(3, 4)]),
    ("flip", lambda a: a.flip(1) * Tensor(_r(2, 3, seed=5)), [_r(2, 3)]),
    ("getitem_int", lambda a: a[1], [_r(3, 4)]),
    ("getitem_neg_step", lambda a: a[::-2, 1:], [_r(5, 3)]),
    ("getitem_step", lambda a: a[:, ::3], [_r(2, 7)]),
    ("getitem_none_ellipsis", lambda a: a[None, ..., -1], [_r(3, 4)]),
    ("cat", lambda a, b: Tensor.cat(a, b, dim=1).exp(), [_r(2, 3), _r(2, 2, seed=1)]),
    ("stack", lambda a, b: Tensor.stack(a, b * b, dim=1), [_r(2, 3), _r(2, 3, seed=1)]),
    ("squeeze", lambda a: a.squeeze().exp(), [_r(1, 3, 1)]),
    ("unsqueeze", lambda a: a.unsqueeze(1).expand(2, 3, 3).sin(), [_r(2, 3)]),
    ("flatten", lambda a: a.flatten(1).cos(), [_r(2, 2, 2)]),
    ("matmul", lambda a, b: a @ b, [_r(2, 3), _r(3, 4, seed=1)]),
    ("matmul_batched", lambda a, b: a @ b, [_r(2, 2, 3), _r(3, 2, seed=1)]),
    ("dot_vectors", lambda a, b: a.dot(b), [_r(3), _r(3, seed=1)]),
    ("linear", lambda x, w, b: x.linear(w, b).relu(), [_r(2, 3), _r(3, 2, seed=1), _r(2, seed=2)]),
    ("cast_roundtrip", lambda a: a.cast(dtypes.float64).exp(), [_r(3)]),
    ("contiguous", lambda a: (a * 2).contiguous().sin(), [_r(3)]),
    ("contiguous_backward", lambda a: (a * 2).contiguous_backward().sin(), [_r(3)]),
    ("clone", lambda a: a.clone() * a, [_r(3)]),
    ("to_device", lambda a: (a.to("REFERENCE:1") * 2).to("REFERENCE").exp(), [_r(3)]),
    ("crossentropy", lambda a: a.sparse_categorical_crossentropy(Tensor([1, 0, 2])), [_r(3, 4)]),
    (
        "mlp",
        lambda x, w1, w2: (x @ w1).tanh().matmul(w2).log_softmax().mean(),
        [_r(4, 3), _r(3, 5, seed=1), _r(5, 2, seed=2)],
    ),
]


@pytest.mark.parametrize("name,fn,inputs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradient_matches_finite_differences(name, fn, inputs):
    fd_check(fn, *inputs)


def test_no_gradient_flows_through_detach():
    x = Tensor([1.0, 2.0])
    close(x.detach().sum().gradient(x)[0], [0.0, 0.0])
    close((x * x.detach()).sum().gradient(x)[0], [1.0, 2.0])  # only the undetached factor contributes


def test_a_view_stays_a_view_of_its_buffer_after_an_assign_is_realized():
    base = Tensor.zeros(2, 4).contiguous().realize()
    v = base[:, 1:3]
    v.assign(Tensor([[1.0, 2.0], [3.0, 4.0]]))
    close(v, [[1.0, 2.0], [3.0, 4.0]])
    assert v.uop.op is Ops.SHRINK and v.uop.base.op is Ops.BUFFER  # realized back onto the buffer
    v.assign(v * 10)
    close(base, [[0, 10, 20, 0], [0, 30, 40, 0]])
