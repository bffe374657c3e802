"""Dropout, MaxPool2d, AvgPool2d and MultiheadAttention against torch.nn, torch's weights copied in, and
gelu's documented default (issue 36)."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Tensor, dtypes, nn
from uopgrad.errors import ArgumentError
from uopgrad.nn.state import get_state_dict, load_state_dict

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- Dropout
def test_dropout_is_the_identity_in_eval_mode() -> None:
    x = _x(4, 5)
    np.testing.assert_array_equal(nn.Dropout(0.5)(Tensor(x)).numpy(), x)


def test_dropout_in_training_zeroes_and_rescales_like_torch(training: None) -> None:
    x = np.abs(_x(200, 50)) + 1
    out = nn.Dropout(0.25)(Tensor(x)).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / 0.75, rtol=1e-6)  # torch's scaling of the kept ones
    assert abs(1 - kept.mean() - 0.25) < 0.02  # 10 000 draws: the dropped fraction within 8 sigma of p
    tout = torch.nn.Dropout(0.25).train()(torch.from_numpy(x)).numpy()
    assert abs(kept.mean() - (tout != 0).mean()) < 0.03


def test_dropout_p_out_of_range_is_an_argument_error() -> None:
    with pytest.raises(ArgumentError, match="Dropout probability"):
        nn.Dropout(1.5)


# ---------------------------------------------------------------- pooling
POOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0)),
    dict(kernel_size=3, stride=1, padding=1, ceil_mode=True),
]


@pytest.mark.parametrize("kw", POOLS, ids=str)
def test_maxpool2d_like_torch(kw: dict[str, object]) -> None:
    x = _x(2, 3, 7, 9)
    np.testing.assert_allclose(
        nn.MaxPool2d(**kw)(Tensor(x)).numpy(),  # type: ignore[arg-type,union-attr]
        torch.nn.MaxPool2d(**kw)(torch.from_numpy(x)).numpy(),
    )


def test_maxpool2d_dilation_and_indices_like_torch() -> None:
    x = _x(1, 2, 9, 9, seed=3)
    out, idx = nn.MaxPool2d(3, stride=2, dilation=2, return_indices=True)(Tensor(x))  # type: ignore[misc]
    tout, tidx = torch.nn.MaxPool2d(3, stride=2, dilation=2, return_indices=True)(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), tout.numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())


@pytest.mark.parametrize(
    "kw",
    [
        *POOLS,
        dict(kernel_size=3, padding=1, count_include_pad=False),
        dict(kernel_size=2, divisor_override=3),
    ],
    ids=str,
)
def test_avgpool2d_like_torch(kw: dict[str, object]) -> None:
    x = _x(2, 3, 7, 9, seed=1)
    np.testing.assert_allclose(
        nn.AvgPool2d(**kw)(Tensor(x)).numpy(),  # type: ignore[arg-type]
        torch.nn.AvgPool2d(**kw)(torch.from_numpy(x)).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


# ---------------------------------------------------------------- MultiheadAttention
def _mha_pair(e: int, h: int, bias: bool, batch_first: bool) -> tuple[nn.MultiheadAttention, object]:
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(e, h, bias=bias, batch_first=batch_first)
    if bias:  # torch starts the biases at zero: make them count
        with torch.no_grad():
            tm.in_proj_bias.uniform_(-0.5, 0.5)
            tm.out_proj.bias.uniform_(-0.5, 0.5)
    m = nn.MultiheadAttention(e, h, bias=bias, batch_first=batch_first)
    theirs = {k: Tensor(v.detach().numpy()) for k, v in tm.state_dict().items()}
    assert set(theirs) == set(get_state_dict(m)), "torch's parameter layout"
    load_state_dict(m, theirs)
    return m, tm


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_like_torch(bias: bool, batch_first: bool) -> None:
    m, tm = _mha_pair(8, 2, bias, batch_first)
    shape_q, shape_k = ((3, 5, 8), (3, 4, 8)) if batch_first else ((5, 3, 8), (4, 3, 8))
    q, k, v = _x(*shape_q, seed=1), _x(*shape_k, seed=2), _x(*shape_k, seed=3)
    out, w = m(Tensor(q), Tensor(k), Tensor(v))
    tout, tw = tm(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))  # type: ignore[operator]
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert w is not None
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_multihead_attention_masks_and_per_head_weights_like_torch() -> None:
    m, tm = _mha_pair(6, 3, True, True)
    q, k = _x(2, 4, 6, seed=4), _x(2, 5, 6, seed=5)
    attn_mask = np.triu(np.ones((4, 5), bool), 2)
    pad = np.zeros((2, 5), bool)
    pad[1, 4] = True
    float_mask = _x(4, 5, seed=6)
    float_pad = np.where(pad, -np.inf, 0).astype(np.float32)
    for mask, kpm in ((attn_mask, pad), (float_mask, float_pad)):
        out, w = m(Tensor(q), Tensor(k), Tensor(k), Tensor(kpm), True, Tensor(mask), False)
        tout, tw = tm(  # type: ignore[operator]
            *(torch.from_numpy(a) for a in (q, k, k)),
            key_padding_mask=torch.from_numpy(kpm),
            attn_mask=torch.from_numpy(mask),
            average_attn_weights=False,
        )
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
        assert w is not None and w.shape == (2, 3, 4, 5)
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_multihead_attention_causal_unbatched_and_no_weights_like_torch() -> None:
    m, tm = _mha_pair(4, 2, True, False)
    x = _x(5, 4, seed=7)
    out, w = m(Tensor(x), Tensor(x), Tensor(x), need_weights=False, is_causal=True)
    assert w is None
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    tx = torch.from_numpy(x)
    tout, _ = tm(tx, tx, tx, need_weights=False, attn_mask=causal)  # type: ignore[operator]
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_multihead_attention_gradients_reach_torchs_parameters() -> None:
    m, tm = _mha_pair(4, 2, True, True)
    x = _x(2, 3, 4, seed=8)
    m.in_proj_weight.requires_grad_(True)  # as an optimiser does to its parameters
    out, _ = m(Tensor(x), Tensor(x), Tensor(x))
    out.square().sum().backward()
    tx = torch.from_numpy(x)
    tm(tx, tx, tx)[0].square().sum().backward()  # type: ignore[operator]
    assert m.in_proj_weight.grad is not None
    np.testing.assert_allclose(
        m.in_proj_weight.grad.numpy(),
        tm.in_proj_weight.grad.numpy(),  # type: ignore[attr-defined]
        rtol=1e-3,
        atol=1e-5,
    )


def test_multihead_attention_checks_its_arguments() -> None:
    with pytest.raises(ArgumentError, match="heads"):
        nn.MultiheadAttention(6, 4)
    m = nn.MultiheadAttention(4, 2)
    x = Tensor(_x(3, 2, 4))
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        m(x, x, x, key_padding_mask=Tensor.zeros(2, 3, dtype=dtypes.int32))


# ---------------------------------------------------------------- gelu's default
def test_gelu_default_is_the_tanh_form_and_none_is_torchs_default() -> None:
    x = np.linspace(-6, 6, 241, dtype=np.float32)
    tx = torch.from_numpy(x)
    gelu = torch.nn.functional.gelu
    np.testing.assert_allclose(Tensor(x).gelu().numpy(), gelu(tx, approximate="tanh").numpy(), atol=1e-6)
    np.testing.assert_allclose(
        Tensor(x).gelu("tanh").numpy(), gelu(tx, approximate="tanh").numpy(), atol=1e-6
    )
    np.testing.assert_allclose(Tensor(x).gelu(approximate="none").numpy(), gelu(tx).numpy(), atol=1e-6)
    assert np.abs(Tensor(x).gelu().numpy() - gelu(tx).numpy()).max() > 1e-4  # the two forms differ
    with pytest.raises(ValueError, match="approximate"):
        Tensor(x).gelu("exact")
