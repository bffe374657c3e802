"""The Tensor ops of tensor_elementwise / tensor_index / tensor_shape / tensor_nn against PyTorch: each
op's forward value and its gradient (for a random cotangent) on odd shapes, in float32."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import CROSS_ENTROPY_OPTIONS

from uopgrad import Tensor, dtypes

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
F = torch.nn.functional


def _arr(shape: tuple[int, ...], seed: int, kind: str = "normal") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "distinct":  # no ties: max/sort gradients are defined
        return (rng.permutation(int(np.prod(shape))) * 0.37 - 2.0 + rng.uniform(0, 0.01)).reshape(shape)
    if kind == "positive":
        return rng.uniform(0.2, 0.9, shape)
    return rng.standard_normal(shape)


def check(
    ours: Callable[..., Any],
    theirs: Callable[..., Any],
    *inputs: np.ndarray,
    grad: bool = True,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    consts: tuple[int, ...] = (),
) -> None:
    """ours(*Tensors) against theirs(*torch tensors): values, then gradients of <out, v> for every input
    (but `consts`, the inputs torch can't differentiate)."""
    arrays = [np.asarray(a, np.float32) for a in inputs]
    ts = [Tensor(a, requires_grad=k not in consts) for k, a in enumerate(arrays)]
    tt = [torch.tensor(a, requires_grad=k not in consts) for k, a in enumerate(arrays)]
    out, tout = ours(*ts), theirs(*tt)
    outs = out if isinstance(out, tuple) else (out,)
    touts = tout if isinstance(tout, tuple) else (tout,)
    grads: list[Tensor] = []
    if grad:  # built before anything is read back, and realized in one run with the outputs
        v = np.random.default_rng(99).standard_normal(touts[0].shape).astype(np.float32)
        grads = (outs[0] * Tensor(v)).sum().gradient(*(t for k, t in enumerate(ts) if k not in consts))
        (touts[0] * torch.tensor(v)).sum().backward()
    Tensor.realize(*outs, *grads)
    for o, t in zip(outs, touts):
        want = t.detach().numpy()
        got = o.numpy()
        assert got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)
    for g, tin in zip(grads, [t for k, t in enumerate(tt) if k not in consts]):
        want = tin.grad.numpy() if tin.grad is not None else np.zeros(tin.shape, np.float32)
        np.testing.assert_allclose(g.numpy(), want, atol=atol * 10, rtol=rtol * 10)


X = _arr((3, 5), 0)
X4 = _arr((2, 3, 7, 6), 1)

ELEMENTWISE: dict[str, tuple[Callable[..., Any], Callable[..., Any], np.ndarray]] = {
    "silu": (Tensor.silu, F.silu, X),
    "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: F.leaky_relu(x, 0.1), X),
    "elu": (lambda x: x.elu(0.7), lambda x: F.elu(x, 0.7), X),
    "celu": (lambda x: x.celu(0.7), lambda x: F.celu(x, 0.7), X),
    "hardtanh": (lambda x: x.hardtanh(-0.5, 0.8), lambda x: F.hardtanh(x, -0.5, 0.8), X),
    "mish": (Tensor.mish, F.mish, X),
    "hardswish": (Tensor.hardswish, F.hardswish, X * 3),
    "hardsigmoid": (Tensor.hardsigmoid, F.hardsigmoid, X * 3),
    "relu6": (Tensor.relu6, F.relu6, X * 4),
    "softsign": (Tensor.softsign, F.softsign, X),
    "logsigmoid": (Tensor.logsigmoid, F.logsigmoid, X * 5),
    "erf": (Tensor.erf, torch.erf, X * 1.5),
    "gelu exact": (lambda x: x.gelu(approximate="none"), F.gelu, X * 2),
    "gelu tanh": (Tensor.gelu, lambda x: F.gelu(x, approximate="tanh"), X * 2),
    "floor": (Tensor.floor, torch.floor, X * 3),
    "ceil": (Tensor.ceil, torch.ceil, X * 3),
    "round": (Tensor.round, torch.round, np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51, 3.7])),
    "trunc": (Tensor.trunc, torch.trunc, X * 3),
    "asin": (Tensor.asin, torch.asin, np.tanh(X) * 0.95),
    "acos": (Tensor.acos, torch.acos, np.tanh(X) * 0.95),
    "atan": (Tensor.atan, torch.atan, X * 3),
    "sinh": (Tensor.sinh, torch.sinh, X),
    "cosh": (Tensor.cosh, torch.cosh, X),
    "asinh": (Tensor.asinh, torch.asinh, X * 3),
    "acosh": (Tensor.acosh, torch.acosh, np.abs(X) + 1.1),
    "atanh": (Tensor.atanh, torch.atanh, np.tanh(X) * 0.9),
    "log10": (Tensor.log10, torch.log10, np.abs(X) + 0.1),
    "softmin": (lambda x: x.softmin(0), lambda x: F.softmin(x, 0), X),
    "logcumsumexp": (lambda x: x.logcumsumexp(1), lambda x: torch.logcumsumexp(x, 1), X * 3),
    "normalize": (lambda x: x.normalize(3.0, 1), lambda x: F.normalize(x, 3.0, 1), X),
    "std_mean": (lambda x: x.std_mean(1), lambda x: torch.std_mean(x, 1), X),
    "var_mean": (lambda x: x.var_mean(0, correction=0), lambda x: torch.var_mean(x, 0, correction=0), X),
    "diagonal": (lambda x: x.diagonal(1), lambda x: x.diagonal(1), X),
    "diagonal dims": (lambda x: x.diagonal(-1, 1, 3), lambda x: x.diagonal(-1, 1, 3), X4),
    "diag": (lambda x: x[0].diag(), lambda x: x[0].diag(), X),
    "unfold": (lambda x: x.unfold(2, 3, 2), lambda x: x.unfold(2, 3, 2), X4),
    "view pad_to shrink_to": (
        lambda x: x.view(5, 3).pad_to(6, 4).shrink_to(None, 2),
        lambda x: F.pad(x.view(5, 3), (0, 1, 0, 1))[:, :2],
        X,
    ),
    "softmax float64": (
        lambda x: x.softmax(1, dtype=dtypes.float64).float(),
        lambda x: F.softmax(x, 1, dtype=torch.float64).float(),
        X,
    ),
    "log_softmax": (lambda x: x.log_softmax(0), lambda x: F.log_softmax(x, 0), X),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name: str) -> None:
    ours, theirs, x = ELEMENTWISE[name]
    check(ours, theirs, x)


def test_tests_and_boolean_reductions() -> None:
    a = np.array([[1.0, np.nan, -np.inf], [np.inf, 0.0, -2.0]], np.float32)
    t, tt = Tensor(a), torch.tensor(a)
    for ours, theirs in [
        (t.isnan(), tt.isnan()),
        (t.isinf(), tt.isinf()),
        (t.isfinite(), tt.isfinite()),
        (t.isinf(detect_negative=False), tt.isposinf()),
        (t.any(1), tt.any(1)),
        (t.all(0), tt.all(0)),
        (t.any(), tt.any()),
        (t.all(), tt.all()),
    ]:
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_mode(mode: str | None) -> None:
    a = np.array([7, -7, 7, -7, 6, -1, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5, 3], np.int32)
    got = Tensor(a).div(Tensor(b), rounding_mode=mode)
    want = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode=mode)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert got.dtype == (dtypes.int32 if mode else dtypes.float32)
    check(
        lambda x, y: x.div(y, rounding_mode=mode) if mode else x.div(y),
        lambda x, y: torch.div(x, y, rounding_mode=mode),
        X * 4,
        _arr((3, 5), 3, "positive") + 0.5,
    )


# ---------------------------------------------------------------------- convolution and pooling
CONV = [
    dict(),
    dict(stride=2),
    dict(padding=1),
    dict(dilation=2, padding=(1, 2)),
    dict(groups=3),
    dict(stride=(2, 1), padding=2, dilation=(1, 2), groups=3),
]


@pytest.mark.parametrize("kw", CONV, ids=str)
def test_conv2d(kw: dict[str, Any]) -> None:
    g = kw.get("groups", 1)
    w, b = _arr((6, 3 // g, 3, 2), 4), _arr((6,), 5)
    check(lambda x, w, b: x.conv2d(w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw), X4, w, b)


def test_conv1d_shape() -> None:
    x, w = _arr((2, 4, 9), 6), _arr((5, 4, 3), 7)
    check(
        lambda x, w: x.conv2d(w, stride=2, padding=1), lambda x, w: F.conv1d(x, w, stride=2, padding=1), x, w
    )


CONVT = [
    dict(),
    dict(stride=2),
    dict(stride=2, padding=1, output_padding=1),
    dict(dilation=2, groups=3),
    dict(stride=(2, 3), padding=(1, 0), groups=3),
]


@pytest.mark.parametrize("kw", CONVT, ids=str)
def test_conv_transpose2d(kw: dict[str, Any]) -> None:
    g = kw.get("groups", 1)
    x, w, b = _arr((2, 3, 4, 5), 8), _arr((3, 6 // g, 3, 2), 9), _arr((6,), 10)
    check(
        lambda x, w, b: x.conv_transpose2d(w, b, **kw),
        lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
        x,
        w,
        b,
    )


POOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2),
    dict(kernel_size=(3, 2), stride=1, padding=1),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=1, dilation=2),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
]


@pytest.mark.parametrize("kw", POOL, ids=str)
def test_max_pool2d(kw: dict[str, Any]) -> None:
    x = _arr((2, 3, 7, 6), 11, "distinct")
    check(lambda x: x.max_pool2d(**kw), lambda x: F.max_pool2d(x, **kw), x)


@pytest.mark.parametrize(
    "kw",
    [
        *(k for k in POOL if "dilation" not in k),
        dict(kernel_size=3, padding=1, count_include_pad=False),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    ],
    ids=str,
)
def test_avg_pool2d(kw: dict[str, Any]) -> None:
    check(lambda x: x.avg_pool2d(**kw), lambda x: F.avg_pool2d(x, **kw), X4)


# ---------------------------------------------------------------------- normalisation and losses
def test_batchnorm_and_layernorm() -> None:
    w, b, m, v = _arr((3,), 12), _arr((3,), 13), _arr((3,), 14), _arr((3,), 15, "positive")
    check(
        lambda x, w, b, m, v: x.batchnorm(w, b, m, (v + 1e-5).rsqrt()),
        lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, eps=1e-5),
        X4,
        w,
        b,
        m,
        v,
        consts=(3, 4),
    )
    check(lambda x: x.layernorm((-2, -1)), lambda x: F.layer_norm(x, (7, 6)), X4)


LOGITS = _arr((6, 4), 16)
TARGETS = np.array([0, 3, 1, 1, 2, 3])


@pytest.mark.parametrize("kw", CROSS_ENTROPY_OPTIONS, ids=str)
def test_cross_entropy(kw: dict[str, Any]) -> None:
    check(
        lambda x: x.cross_entropy(Tensor(TARGETS), **kw),
        lambda x: F.cross_entropy(x, torch.tensor(TARGETS), **kw),
        LOGITS,
    )


def test_cross_entropy_probabilities_and_spatial() -> None:
    p = np.random.default_rng(0).dirichlet(np.ones(4), 6)
    check(
        lambda x, p: x.cross_entropy(p, label_smoothing=0.1),
        lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1),
        LOGITS,
        p,
    )
    y = np.random.default_rng(1).integers(0, 3, (2, 7, 6))
    check(lambda x: x.cross_entropy(Tensor(y)), lambda x: F.cross_entropy(x, torch.tensor(y)), X4)


@pytest.mark.parametrize("kw", [dict(), dict(ignore_index=1), dict(reduction="none")], ids=str)
def test_nll_loss(kw: dict[str, Any]) -> None:
    w = _arr((4,), 17, "positive")
    check(
        lambda x, w: x.log_softmax(1).nll_loss(Tensor(TARGETS), w, **kw),
        lambda x, w: F.nll_loss(F.log_softmax(x, 1), torch.tensor(TARGETS), w, **kw),
        LOGITS,
        w,
        consts=(1,),
    )


def test_binary_crossentropy() -> None:
    y = (np.random.default_rng(2).random((3, 5)) < 0.5).astype(np.float32)
    check(
        lambda x: x.sigmoid().binary_crossentropy(Tensor(y)),
        lambda x: F.binary_cross_entropy(torch.sigmoid(x), torch.tensor(y)),
        X,
    )
    pw = _arr((5,), 18, "positive")
    check(
        lambda x, pw: x.binary_crossentropy_logits(Tensor(y), "sum", pw),
        lambda x, pw: F.binary_cross_entropy_with_logits(x, torch.tensor(y), reduction="sum", pos_weight=pw),
        X * 4,
        pw,
        consts=(1,),
    )


def test_dropout_only_while_training() -> None:
    x = Tensor.ones(200, 50)
    assert (x.dropout(0.5).numpy() == 1).all()
    with Tensor.train():
        assert Tensor.training
        y = x.dropout(0.25).numpy()
    assert not Tensor.training
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    assert 0.7 < kept.mean() < 0.8


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal: bool) -> None:
    q, k, v = _arr((2, 3, 5, 4), 19), _arr((2, 3, 5, 4), 20), _arr((2, 3, 5, 6), 21)
    check(
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=causal),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        q,
        k,
        v,
    )
    mask = np.random.default_rng(3).random((5, 5)) < 0.7
    np.fill_diagonal(mask, True)
    check(
        lambda q, k, v: q.scaled_dot_product_attention(k, v, Tensor(mask)),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, torch.tensor(mask)),
        q,
        k,
        v,
    )


# ---------------------------------------------------------------------- indexing
IDX = np.array([[0, 2, 1, 0, 2], [1, 1, 0, 2, 0]])


def test_gather() -> None:
    check(lambda x: x.gather(0, Tensor(IDX)), lambda x: torch.gather(x, 0, torch.tensor(IDX)), X)
    i1 = np.array([[4, 0], [1, -1], [2, 2]])
    check(lambda x: x.gather(1, Tensor(i1)), lambda x: torch.gather(x, 1, torch.tensor(i1 % 5)), X)


def test_scatter() -> None:
    perm = np.array([[2, 0, 1], [0, 1, 2]])  # distinct per column: torch's result is defined
    src = _arr((2, 3), 22)
    check(
        lambda x, s: x.scatter(0, Tensor(perm), s), lambda x, s: x.scatter(0, torch.tensor(perm), s), X, src
    )
    check(lambda x: x.scatter(1, Tensor(perm), 2.5), lambda x: x.scatter(1, torch.tensor(perm), 2.5), X)
    # a tensor src with reduce= is scatter_reduce's job (scatter refuses it, as the reference)
    check(
        lambda x, s: x.scatter_reduce(0, Tensor(IDX), s, "sum"),
        lambda x, s: x.scatter_add(0, torch.tensor(IDX), s),
        X,
        _arr((2, 5), 23),
    )


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool) -> None:
    src = _arr((2, 5), 24, "distinct")
    check(
        lambda x, s: x.scatter_reduce(0, Tensor(IDX), s, reduce, include_self),
        lambda x, s: x.scatter_reduce(0, torch.tensor(IDX), s, reduce, include_self=include_self),
        _arr((3, 5), 25, "distinct") * 0.5,
        src,
    )


def test_tensor_index_getitem() -> None:
    emb = _arr((10, 4), 26)
    tokens = np.array([[1, 7, 7], [0, 9, -1]])
    check(lambda w: w[Tensor(tokens)], lambda w: w[torch.tensor(tokens)], emb)
    x = _arr((4, 5, 6), 27)
    i, j = np.array([3, 0, 1]), np.array([[2], [3]])
    for key in [
        lambda T: (slice(None), T(i)),
        lambda T: (T(i), slice(1, 4), T(i)),
        lambda T: (1, T(j), T(i)),
        lambda T: (T(j), T(i)),
        lambda T: (Ellipsis, T(i)),
        lambda T: (slice(None), T(j), T(i)),
        lambda T: (None, T(i), 2),
    ]:
        check(lambda x, key=key: x[key(Tensor)], lambda x, key=key: x[key(torch.tensor)], x)
    assert Tensor(x)[[0, 2]].shape == (2, 5, 6)


def test_tensor_index_setitem() -> None:
    x = _arr((4, 5, 6), 28)
    cases = [
        ((np.array([3, 0]),), _arr((2, 5, 6), 29)),
        ((slice(None), np.array([4, 1])), 7.0),
        ((1, np.array([0, 2]), np.array([5, 1])), _arr((2,), 30)),
        ((slice(1, 3), np.array([0, 2]), slice(None)), _arr((2, 2, 6), 31)),
    ]
    for key, v in cases:
        ours, theirs = Tensor(x.astype(np.float32)), torch.tensor(x.astype(np.float32))
        k_ours = tuple(Tensor(k) if isinstance(k, np.ndarray) else k for k in key)
        k_theirs = tuple(torch.tensor(k) if isinstance(k, np.ndarray) else k for k in key)
        val = v if isinstance(v, float) else np.asarray(v, np.float32)
        ours[k_ours] = val if isinstance(val, float) else Tensor(val)
        theirs[k_theirs] = val if isinstance(val, float) else torch.tensor(val)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy())


def test_masked_fill_and_select() -> None:
    mask = np.random.default_rng(4).random((3, 5)) < 0.4
    check(lambda x: x.masked_fill(Tensor(mask), -1.5), lambda x: x.masked_fill(torch.tensor(mask), -1.5), X)
    check(lambda x: x.masked_select(Tensor(mask)), lambda x: x.masked_select(torch.tensor(mask)), X)
    row = np.array([True, False, True, True, False])
    check(lambda x: x.masked_select(Tensor(row)), lambda x: x.masked_select(torch.tensor(row)), X)


# ---------------------------------------------------------------------- scans and sorting
def test_scans() -> None:
    check(lambda x: x.cumsum(1), lambda x: x.cumsum(1), X)
    check(lambda x: x.cumsum(0), lambda x: x.cumsum(0), X)
    check(lambda x: x.cumprod(1), lambda x: x.cumprod(1), X)
    xd = _arr((3, 6), 32, "distinct")
    check(lambda x: x.cummax(1), lambda x: tuple(torch.cummax(x, 1)), xd)
    check(lambda x: x.cummin(0), lambda x: tuple(torch.cummin(x, 0)), xd)
    ties = np.array([[1.0, 3.0, 3.0, 2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(Tensor(ties).cummax(1)[1].numpy(), torch.cummax(torch.tensor(ties), 1)[1])
    np.testing.assert_array_equal(Tensor([1, 2, 3]).cumsum().numpy(), [1, 3, 6])


@pytest.mark.parametrize("descending", [False, True])
def test_sort(descending: bool) -> None:
    xd = _arr((4, 6), 33, "distinct")
    check(lambda x: x.sort(1, descending), lambda x: tuple(torch.sort(x, 1, descending)), xd)
    check(lambda x: x.sort(0, descending), lambda x: tuple(torch.sort(x, 0, descending)), xd)
    ties = np.array([2.0, 1.0, 2.0, 0.0, 1.0], np.float32)
    np.testing.assert_array_equal(
        Tensor(ties).argsort(descending=descending).numpy(),
        torch.sort(torch.tensor(ties), descending=descending, stable=True)[1],
    )


def test_topk() -> None:
    xd = _arr((4, 6), 34, "distinct")
    check(lambda x: x.topk(3), lambda x: tuple(torch.topk(x, 3)), xd)
    check(lambda x: x.topk(2, 0, largest=False), lambda x: tuple(torch.topk(x, 2, 0, largest=False)), xd)


# ---------------------------------------------------------------------- shape
def test_split_chunk() -> None:
    x = _arr((7, 4), 35)
    check(lambda x: x.split(3), lambda x: x.split(3), x)
    check(lambda x: x.split([1, 4, 2])[1], lambda x: x.split([1, 4, 2])[1], x)
    check(lambda x: x.chunk(3, 0)[2], lambda x: x.chunk(3, 0)[2], x)
    assert len(Tensor(x).chunk(3)) == len(torch.tensor(x).chunk(3))


def test_repeat_roll() -> None:
    check(lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), X)
    check(lambda x: x.repeat_interleave(3, 1), lambda x: x.repeat_interleave(3, 1), X)
    check(lambda x: x.repeat_interleave(2), lambda x: x.repeat_interleave(2), X)
    check(lambda x: x.roll(2, 1), lambda x: x.roll(2, 1), X)
    check(lambda x: x.roll((-1, 7), (0, 1)), lambda x: x.roll((-1, 7), (0, 1)), X)
    check(lambda x: x.roll(4), lambda x: x.roll(4), X)


def test_tril_triu() -> None:
    for d in (-1, 0, 2):
        check(lambda x, d=d: x.tril(d), lambda x, d=d: x.tril(d), X4)
        check(lambda x, d=d: x.triu(d), lambda x, d=d: x.triu(d), X)


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("ii->i", [(4, 4)]),
    ("i,j", [(3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
]


@pytest.mark.parametrize("formula,shapes", EINSUM)
def test_einsum(formula: str, shapes: list[tuple[int, ...]]) -> None:
    arrays = [_arr(s, 40 + k) for k, s in enumerate(shapes)]
    check(lambda *ts: Tensor.einsum(formula, *ts), lambda *ts: torch.einsum(formula, *ts), *arrays)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes(mode: str) -> None:
    pads = (2, 1, 1, 3)
    check(lambda x: x.pad(pads, mode=mode), lambda x: F.pad(x, pads, mode=mode), X4)
    check(lambda x: x.pad((1, -2, -1, 2), value=0.5), lambda x: F.pad(x, (1, -2, -1, 2), value=0.5), X4)


INTERP = [
    ("linear", (9,), False),
    ("linear", (4,), True),
    ("bilinear", (11, 4), False),
    ("bilinear", (5, 9), True),
    ("nearest", (10, 4), False),
    ("nearest-exact", (3, 13), False),
]


@pytest.mark.parametrize("mode,size,align", INTERP)
def test_interpolate(mode: str, size: tuple[int, ...], align: bool) -> None:
    x = X4 if len(size) == 2 else X4[:, :, 0]
    kw = dict(align_corners=align) if mode.endswith("linear") else {}
    check(lambda x: x.interpolate(size, mode, **kw), lambda x: F.interpolate(x, size, mode=mode, **kw), x)


# ---------------------------------------------------------------------- creation
def test_creation() -> None:
    for start, stop, n in [(0.0, 1.0, 5), (-3.0, 7.5, 11), (2.0, 2.0, 1), (1.0, 0.0, 0), (0.0, 1.0, 100)]:
        np.testing.assert_allclose(
            Tensor.linspace(start, stop, n).numpy(), torch.linspace(start, stop, n).numpy(), atol=1e-6
        )
    x = Tensor.ones(3, 4, dtype=dtypes.float16)
    for t in (x.empty_like(), x.rand_like(), x.randn_like()):
        assert t.shape == (3, 4) and t.dtype == dtypes.float16
    r = Tensor.ones(2, 3).rand_like().numpy()
    assert ((0 <= r) & (r < 1)).all()
    w = Tensor.kaiming_uniform(400, 300, a=0.0).numpy()
    bound = np.sqrt(6 / 300)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    w = Tensor.kaiming_normal(500, 200, a=0.0).numpy()
    assert abs(w.std() - np.sqrt(2 / 200)) < 0.01 * np.sqrt(2 / 200) * 10


def test_binary_extras() -> None:
    y = _arr((3, 5), 50) * 2
    check(lambda a, b: a.lerp(b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), X, y)
    check(lambda a, b: a.logaddexp(b), lambda a, b: torch.logaddexp(a, b), X * 10, y)
    check(lambda a, b: a.copysign(b), lambda a, b: torch.copysign(a, b), X, y)
    check(lambda a, b: a.fmod(b), lambda a, b: torch.fmod(a, b), X * 5, _arr((3, 5), 51, "positive") + 0.5)
    check(lambda a: a.mod(1.5), lambda a: torch.remainder(a, 1.5), X * 5)
    zs = np.array([0.0, -0.0, 3.0], np.float32)
    np.testing.assert_array_equal(
        Tensor([1.0, 1.0, -1.0]).copysign(Tensor(zs)).numpy(),
        torch.copysign(torch.tensor([1.0, 1.0, -1.0]), torch.tensor(zs)),
    )
    a, b = np.array([12, -7, 5, 0], np.int32), np.array([3, 2, 1, 7], np.int32)
    ta, tb, pa, pb = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
    for ours, theirs in [
        (ta.bitwise_and(tb), pa & pb),
        (ta.bitwise_or(tb), pa | pb),
        (ta.bitwise_xor(tb), pa ^ pb),
        (ta.bitwise_not(), ~pa),
        (ta.lshift(tb), pa << pb),
        (ta.rshift(1), pa >> 1),
        (ta.fmod(tb), torch.fmod(pa, pb)),
        (ta.mod(tb), torch.remainder(pa, pb)),
    ]:
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # the reference's form: a 0-d bool tensor (torch's is a Python bool), so `if t.allclose(u)` raises
    close, far = Tensor(X).allclose(Tensor(X) + 1e-9), Tensor(X).allclose(Tensor(X) + 1e-3)
    assert close.shape == () and close.dtype == dtypes.bool
    assert close.item() is torch.allclose(torch.tensor(X), torch.tensor(X) + 1e-9) is True
    assert far.item() is torch.allclose(torch.tensor(X), torch.tensor(X) + 1e-3) is False
    with pytest.raises(TypeError):
        bool(close)


def test_sizes_and_casts() -> None:
    t = Tensor(X.astype(np.float32))
    assert t.size() == (3, 5) and t.size(-1) == 5 and t.nbytes() == 60 and t.is_floating_point()
    assert not Tensor([1]).is_floating_point()
    assert t.short().dtype == dtypes.int16 and t.bfloat16().dtype == dtypes.bfloat16


def test_meshgrid() -> None:
    a, b, c = np.arange(3.0), np.arange(4.0) * 2, np.arange(2.0) - 5
    for indexing in ("ij", "xy"):
        ours = Tensor(a).meshgrid(Tensor(b), Tensor(c), indexing=indexing)
        theirs = torch.meshgrid(torch.tensor(a), torch.tensor(b), torch.tensor(c), indexing=indexing)
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o.numpy(), t.numpy())


def test_nonzero_randperm_multinomial() -> None:
    m = np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)
    np.testing.assert_array_equal(Tensor(m).nonzero().numpy(), torch.tensor(m).nonzero().numpy())
    np.testing.assert_array_equal(
        Tensor(m).nonzero(size=4, fill_value=-1).numpy(), [[0, 1], [1, 0], [1, 2], [-1, -1]]
    )
    p = Tensor.randperm(20).numpy()
    assert sorted(p.tolist()) == list(range(20))
    w = np.array([0.1, 0.0, 0.6, 0.3], np.float32)
    draws = Tensor(w).multinomial(4000, replacement=True).numpy()
    freq = np.bincount(draws, minlength=4) / 4000
    np.testing.assert_allclose(freq, w, atol=0.03)
    rows = Tensor(np.stack([w] * 50 + [w[::-1]] * 50)).multinomial().numpy()[:, 0]
    assert (rows[:50] != 1).all() and (rows[50:] != 2).all()  # a zero weight is never drawn


def test_errors_name_the_problem() -> None:
    x = Tensor(X4.astype(np.float32))
    cases: list[tuple[Callable[[], Any], type[Exception], str]] = [
        (lambda: x.conv2d(Tensor.ones(4, 2, 3, 3)), ValueError, "channels"),
        (lambda: x.conv2d(Tensor.ones(4, 3, 3)), ValueError, "needs 3 dims for the weight"),
        (lambda: x.max_pool2d(9), ValueError, "does not fit"),
        (lambda: x.pad((1, 1), mode="wrap"), ValueError, "pad mode"),
        (lambda: x.pad((7, 0), mode="reflect"), ValueError, "smaller than the size"),
        (lambda: x.interpolate((3, 3), mode="cubic"), ValueError, "interpolate mode"),
        (lambda: x.cross_entropy(Tensor([0, 1])), ValueError, r"need shape \(2, 7, 6\)"),
        (lambda: Tensor(LOGITS).cross_entropy(Tensor(TARGETS), reduction="avg"), ValueError, "reduction"),
        (lambda: x.cross_entropy(Tensor([0, 1]), label_smoothing=2.0), ValueError, "label_smoothing"),
        (lambda: x.gather(1, Tensor([[0, 1]])), ValueError, "gather index"),
        (lambda: x.gather(1, Tensor.ones(2, 3, 1, 1)), TypeError, "integer index"),
        (
            lambda: x.scatter_reduce(1, Tensor.zeros(2, 3, 1, 1, dtype=dtypes.int32), x, "median"),
            ValueError,
            "scatter_reduce reduce",
        ),
        (lambda: x.topk(10, 1), ValueError, "topk k=10"),
        (lambda: x.split([1, 1], 1), ValueError, "don't add up"),
        (lambda: Tensor.einsum("ij,jk->ik", x), ValueError, "names 2 operands"),
        (lambda: Tensor.einsum("ij->i", x), ValueError, "letters for shape"),
        (lambda: x.dropout(1.5), ValueError, "dropout probability"),
        (lambda: x.div(2, rounding_mode="round"), ValueError, "rounding_mode"),
        (lambda: x.gelu(approximate="erf"), ValueError, "approximate"),
        (lambda: x[Tensor([[True]])], IndexError, "masked_select"),
        (
            lambda: x.scaled_dot_product_attention(x, x, Tensor.ones(7, 6), is_causal=True),
            ValueError,
            "not both",
        ),
    ]
    for fn, err, match in cases:
        with pytest.raises(err, match=match):
            fn()
