"""uopgrad.nn layers, uopgrad.nn.optim and uopgrad.nn.state, against PyTorch (and the safetensors package
when it is installed); no_grad and Tensor.training."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from uopgrad import Tensor, dtypes
from uopgrad.nn import (
    BatchNorm,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    LayerNorm,
    Linear,
    RMSNorm,
    no_grad,
)
from uopgrad.nn.optim import SGD, Adam, AdamW
from uopgrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")


def _copy_into(ours: object, theirs: Any) -> None:
    """Our layer's parameters into the torch module of the same layout."""
    with torch.no_grad():
        for name, t in get_state_dict(ours).items():
            if name == "num_batches_tracked":
                continue
            getattr(theirs, name).copy_(torch.tensor(t.numpy()))


def _compare_layer(
    ours: Callable[[Tensor], Tensor], theirs: Any, x: np.ndarray, *, training: bool = False, tol: float = 1e-5
) -> None:
    _copy_into(ours, theirs)
    xt = Tensor(x.astype(np.float32), requires_grad=True)
    xtt = torch.tensor(x.astype(np.float32), requires_grad=True)
    theirs.train(training)
    theirs.zero_grad()
    with Tensor.train(training):
        out = ours(xt)
    tout = theirs(xtt)
    v = np.random.default_rng(5).standard_normal(tout.shape).astype(np.float32)
    params = get_state_dict(ours)
    trainable = {k: p for k, p in params.items() if dtypes.is_float(p.dtype) and p.requires_grad is not False}
    grads = (out * Tensor(v)).sum().gradient(xt, *trainable.values())
    Tensor.realize(out, *grads, *params.values())
    (tout * torch.tensor(v)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), atol=tol, rtol=tol * 10)
    np.testing.assert_allclose(grads[0].numpy(), xtt.grad.numpy(), atol=tol * 10, rtol=tol * 100)
    for (name, _), g in zip(trainable.items(), grads[1:]):
        np.testing.assert_allclose(
            g.numpy(), getattr(theirs, name).grad.numpy(), atol=tol * 10, rtol=tol * 100, err_msg=name
        )


RNG = np.random.default_rng(0)
N = torch.nn


def test_linear() -> None:
    _compare_layer(Linear(5, 3), N.Linear(5, 3), RNG.standard_normal((4, 5)))
    layer = Linear(5, 3, bias=False)
    assert layer.bias is None and list(get_state_dict(layer)) == ["weight"]


def test_convs() -> None:
    _compare_layer(
        Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
        N.Conv2d(4, 6, 3, 2, 1, groups=2),
        RNG.standard_normal((2, 4, 7, 6)),
    )
    _compare_layer(
        Conv2d(3, 4, (3, 2), padding="same", dilation=2),
        N.Conv2d(3, 4, (3, 2), padding="same", dilation=2),
        RNG.standard_normal((2, 3, 6, 5)),
    )
    _compare_layer(Conv1d(3, 4, 3, padding=1), N.Conv1d(3, 4, 3, padding=1), RNG.standard_normal((2, 3, 8)))
    _compare_layer(
        ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        N.ConvTranspose2d(4, 6, 3, 2, 1, 1, groups=2),
        RNG.standard_normal((2, 4, 3, 5)),
    )


def test_norms_and_embedding() -> None:
    x = RNG.standard_normal((3, 6, 4, 5)) * 2 + 1
    _compare_layer(LayerNorm((4, 5)), N.LayerNorm((4, 5)), x)
    _compare_layer(GroupNorm(3, 6), N.GroupNorm(3, 6), x)
    _compare_layer(RMSNorm(5), N.RMSNorm(5, eps=1e-6), x)
    emb = Embedding(10, 4)
    idx = np.array([[1, 9, 9], [0, 3, 2]])
    temb = N.Embedding(10, 4)
    _copy_into(emb, temb)
    w = emb.weight.requires_grad_()
    out = emb(Tensor(idx))
    (g,) = (out * out).sum().gradient(w)
    tout = temb(torch.tensor(idx))
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), temb.weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_batchnorm_training_and_eval() -> None:
    bn, tbn = BatchNorm(3), N.BatchNorm2d(3)
    _copy_into(bn, tbn)
    for step in range(3):  # training mode: batch statistics, and the running statistics follow
        x = RNG.standard_normal((4, 3, 5, 2)) * (step + 1) + step
        _compare_layer(bn, tbn, x, training=True, tol=1e-5)
        np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked.numpy().item() == 3
    tbn.eval()
    x = RNG.standard_normal((2, 3, 4, 4))
    out = bn(Tensor(x.astype(np.float32)))  # eval mode (Tensor.training is False): running statistics
    np.testing.assert_allclose(
        out.numpy(), tbn(torch.tensor(x.astype(np.float32))).detach().numpy(), rtol=1e-5, atol=1e-5
    )


# ---------------------------------------------------------------------- optimisers
OPTS = [
    ("SGD", dict(lr=0.1), dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9)),
    (
        "SGD",
        dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
        dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
    ),
    ("Adam", dict(lr=0.01), dict(lr=0.01)),
    (
        "Adam",
        dict(lr=0.02, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1),
        dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    ),
    ("AdamW", dict(lr=0.01), dict(lr=0.01)),
    ("AdamW", dict(lr=0.03, weight_decay=0.2), dict(lr=0.03, weight_decay=0.2)),
]


@pytest.mark.parametrize("name,ours_kw,theirs_kw", OPTS, ids=[f"{o[0]}{o[1]}" for o in OPTS])
@Tensor.train()
def test_optimiser_matches_torch(name: str, ours_kw: dict[str, Any], theirs_kw: dict[str, Any]) -> None:
    """Six steps on a small two-layer model: after each, every parameter (and the loss) equals torch's."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    l1, l2 = Linear(4, 5), Linear(5, 2)
    t1, t2 = N.Linear(4, 5), N.Linear(5, 2)
    _copy_into(l1, t1)
    _copy_into(l2, t2)
    opt = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}[name](get_parameters([l1, l2]), **ours_kw)
    topt = getattr(torch.optim, name)([*t1.parameters(), *t2.parameters()], **theirs_kw)
    xt, yt = Tensor(x), Tensor(y)
    for step in range(6):
        opt.zero_grad()
        loss = (l2(l1(xt).tanh()) - yt).square().mean()
        if step % 2:  # the habit: read the loss, then backward and step
            loss.item()
            loss.backward()
            opt.step()
        else:  # one run for the loss and the update
            loss.backward()
            Tensor.realize(loss, *opt.schedule_step())
        topt.zero_grad()
        tloss = (t2(torch.tanh(t1(torch.tensor(x)))) - torch.tensor(y)).square().mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
        for p, tp in zip(get_parameters([l1, l2]), [*t1.parameters(), *t2.parameters()]):
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_optimiser_errors() -> None:
    p = Tensor(np.ones(3, np.float32), requires_grad=True)
    with Tensor.train(), pytest.raises(RuntimeError, match="no gradient"):
        SGD([p]).step()
    with pytest.raises(ValueError, match="no parameters"):
        SGD([Tensor([1.0], requires_grad=False)])
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([p], nesterov=True)


def test_optimiser_steps_only_in_training_mode() -> None:
    """As in tinygrad: step() in eval mode is a RuntimeError that says how to turn training on, and changes
    nothing; inside `with Tensor.train():` (or with Tensor.training = True) the same step runs."""
    w = Tensor([1.0, -2.0], requires_grad=True)
    opt = Adam([w], lr=0.1)
    (w * w).sum().backward()
    assert Tensor.training is False
    with pytest.raises(RuntimeError, match=r"Tensor\.training = True|Tensor\.train\(\)"):
        opt.step()
    with pytest.raises(RuntimeError, match="training"):
        opt.schedule_step()
    np.testing.assert_array_equal(w.numpy(), [1.0, -2.0])
    with Tensor.train():
        opt.step()
    tw = torch.tensor([1.0, -2.0], requires_grad=True)
    topt = torch.optim.Adam([tw], lr=0.1)
    (tw * tw).sum().backward()
    topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)
    Tensor.training = True
    try:
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()  # the flag set by hand works too
    finally:
        Tensor.training = False


@Tensor.train()
def test_step_keeps_identity_and_zero_grad() -> None:
    layer = Linear(3, 2)
    w = layer.weight
    opt = SGD(get_parameters(layer), lr=0.5)
    before = w.numpy().copy()
    layer(Tensor.ones(1, 3)).sum().backward()
    opt.step()
    assert layer.weight is w and not np.allclose(w.numpy(), before)
    np.testing.assert_allclose(w.numpy(), before - 0.5, rtol=1e-6)  # d sum / d w = 1 for an input of ones
    opt.zero_grad()
    assert w.grad is None


# ---------------------------------------------------------------------- no_grad and training
def test_no_grad() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    x = Tensor([3.0, 4.0], requires_grad=True)
    with no_grad():
        y = w * 2
        assert y.requires_grad is False
    assert (w * 2).requires_grad is True
    loss = (y * x + w).sum()
    gw, gx = loss.gradient(w, x)
    np.testing.assert_allclose(gw.numpy(), [1.0, 1.0])  # only the path outside no_grad
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0])

    @no_grad()
    def f(t: Tensor) -> Tensor:
        return t.exp()

    assert f(w).requires_grad is False
    assert Tensor.no_grad is no_grad


def test_training_flag() -> None:
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.train(False):
            assert Tensor.training is False
        assert Tensor.training is True
    assert Tensor.training is False


# ---------------------------------------------------------------------- state
class _Model:
    def __init__(self) -> None:
        self.conv = Conv2d(1, 2, 3)
        self.layers = [Linear(3, 4), Linear(4, 1, bias=False)]
        self.bn = BatchNorm(2)


def test_state_dict_names_and_load() -> None:
    m = _Model()
    names = list(get_state_dict(m))
    assert names == [
        "conv.weight",
        "conv.bias",
        "layers.0.weight",
        "layers.0.bias",
        "layers.1.weight",
        "bn.weight",
        "bn.bias",
        "bn.num_batches_tracked",
        "bn.running_mean",
        "bn.running_var",
    ]
    other = _Model()
    w = other.conv.weight
    load_state_dict(other, get_state_dict(m))
    assert other.conv.weight is w
    for k, v in get_state_dict(m).items():
        np.testing.assert_array_equal(get_state_dict(other)[k].numpy(), v.numpy())
    with pytest.raises(KeyError, match="missing"):
        load_state_dict(other, {"conv.weight": m.conv.weight})
    load_state_dict(other, {"conv.bias": Tensor(np.zeros(2, np.float32))}, strict=False)
    np.testing.assert_array_equal(other.conv.bias.numpy(), [0, 0])
    with pytest.raises(ValueError, match="shape"):
        load_state_dict(other, {"conv.bias": Tensor(np.zeros(3, np.float32))}, strict=False)


def test_safetensors_roundtrip(tmp_path: Any) -> None:
    rng = np.random.default_rng(2)
    tensors = {
        "f32": Tensor(rng.standard_normal((3, 4)).astype(np.float32)),
        "f16": Tensor(rng.standard_normal(5).astype(np.float16)),
        "i64": Tensor(np.arange(6, dtype=np.int64).reshape(2, 3)),
        "u8": Tensor(np.arange(7, dtype=np.uint8)),
        "bool": Tensor(np.array([True, False, True])),
        "scalar": Tensor(np.float64(2.5)),
        "bf16": Tensor([1.0, -2.5, 3.140625], dtype=dtypes.bfloat16),
    }
    fn = tmp_path / "m.safetensors"
    safe_save(tensors, fn, metadata={"format": "pt"})
    back = safe_load(fn)
    assert list(back) == list(tensors)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        np.testing.assert_array_equal(back[k].numpy(), t.numpy())
    st = pytest.importorskip("safetensors.numpy", reason="the safetensors package is not installed")
    plain = {k: t for k, t in tensors.items() if k != "bf16"}  # numpy (and so safetensors.numpy) has no bf16
    safe_save(plain, fn)
    theirs = st.load_file(str(fn))  # the reference reader agrees with our writer ...
    assert list(theirs) == list(plain)
    for k, t in plain.items():
        np.testing.assert_array_equal(theirs[k], t.numpy())
    fn2 = tmp_path / "theirs.safetensors"
    st.save_file({"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 2), np.int16)}, str(fn2))
    got = safe_load(fn2)  # ... and our reader with its writer
    np.testing.assert_array_equal(got["a"].numpy(), np.arange(4))
    assert got["b"].dtype == dtypes.int16


def test_safe_load_errors(tmp_path: Any) -> None:
    fn = tmp_path / "bad.safetensors"
    fn.write_bytes(b"\x00\x01")
    with pytest.raises(ValueError, match="not a valid safetensors file: the file is 2 bytes"):
        safe_load(fn)
    fn.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="runs past the end"):
        safe_load(fn)
