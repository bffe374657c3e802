"""The reference's public API of layers, optimisers and model-level ops, used the way a PyTorch/tinygrad user
writes them (build, read a value, backward, step), against PyTorch in float64 where the op allows it:
Muon, LAMB, LARS (and SGD/Adam/AdamW built from them), OptimizerGroup, fused steps; InstanceNorm, LSTMCell,
LayerNorm2d, ConvTranspose1d; max_pool2d(return_indices=) and max_unpool2d; einsum with '...';
scaled_dot_product_attention(enable_gqa=); sparse_categorical_crossentropy's options; Tensor.from_blob,
Tensor(bytes), Tensor.replace, Tensor.to_; load_state_dict's reference behaviour."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from conftest import CROSS_ENTROPY_OPTIONS

from uopgrad import Device, Tensor, dtypes
from uopgrad.errors import DeviceError, ShapeError
from uopgrad.nn import Conv2d, ConvTranspose1d, Embedding, InstanceNorm, LayerNorm2d, Linear, LSTMCell
from uopgrad.nn.optim import LAMB, LARS, SGD, Adam, AdamW, Muon, OptimizerGroup
from uopgrad.nn.state import get_state_dict, load_state_dict

torch = pytest.importorskip("torch", reason="torch (an optional test dependency) is not installed")
F = torch.nn.functional
RNG = np.random.default_rng(31)


def _t64(a: Tensor | np.ndarray, grad: bool = False) -> Any:
    arr = a.numpy() if isinstance(a, Tensor) else a
    return torch.tensor(np.asarray(arr, np.float64), requires_grad=grad)


def _close(ours: Tensor, theirs: Any, tol: float = 1e-9) -> None:
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=tol, atol=tol)


# ---------------------------------------------------------------------- optimisers
def _loss(x: Any, w: Any, m: Any) -> Any:
    return ((x @ w).relu().log_softmax(1) * m + m).sum()


@Tensor.train()  # uopgrad's optimisers step only in training mode (torch's ignore it)
def _train(make_opt: Any, steps: int, tensor: Any) -> list:
    rng = np.random.default_rng(5)
    x0, w0 = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4), (4, 4)))
    m0 = rng.standard_normal((1, 4)).astype(np.float32)
    x, w, m = tensor(x0.copy(), requires_grad=True), tensor(w0.copy(), requires_grad=True), tensor(m0)
    opt = make_opt([x, w])
    for _ in range(steps):
        opt.zero_grad()
        _loss(x, w, m).backward()
        opt.step()
    return [x.detach().numpy(), w.detach().numpy()]


@pytest.mark.parametrize(
    "kw,steps,tol",
    [
        (dict(lr=0.001), 1, 1e-5),
        (dict(lr=0.01, weight_decay=5.0), 5, 1e-3),  # a decay that the weights show: applied, as torch does
        (
            dict(lr=0.001, nesterov=False, momentum=0.8, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5)),
            10,
            1e-3,
        ),
    ],
)
def test_muon_matches_torch(kw: dict[str, Any], steps: int, tol: float) -> None:
    # (torch keeps an EMA of the gradients where Muon here sums them, as the reference does; Newton-Schulz
    # normalises the update, so the two agree to the tolerance)
    ours = _train(lambda p: Muon(p, **kw), steps, Tensor)
    theirs = _train(lambda p: torch.optim.Muon(p, **kw), steps, torch.tensor)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, atol=tol, rtol=tol)


def test_muon_defaults_and_newton_schulz() -> None:
    opt = Muon([Tensor(np.eye(3, dtype=np.float32), requires_grad=True)])
    assert (opt.momentum, opt.wd, opt.ns_steps, opt.nesterov) == (0.95, 0.1, 5, True)
    assert opt.ns_coefficients == (3.4445, -4.775, 2.0315) and not opt.classic and not opt.pre_wd
    with pytest.raises(ValueError, match="fused"):
        Muon([Tensor([[1.0]], requires_grad=True)], fused=True)
    # (2, -1.5, 0.5) is the cubic that converges to the orthogonal factor: U V^T of the SVD
    a = RNG.standard_normal((3, 5))
    o = Tensor(a.astype(np.float32)).newton_schulz(30, (2.0, -1.5, 0.5))
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(o.numpy(), u @ vt, atol=1e-4)
    tall = Tensor(a.T.astype(np.float32)).newton_schulz(30, (2.0, -1.5, 0.5))  # the transposed path
    np.testing.assert_allclose(tall.numpy(), (u @ vt).T, atol=1e-4)


def _lamb_numpy(
    p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float, eps: float, wd: float, adam: bool
) -> np.ndarray:
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        up = m / (1 - b1**t) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * p
        r = 1.0
        if not adam:
            r1, r2 = np.linalg.norm(p), np.linalg.norm(up)
            r = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
        p = p - lr * r * up
    return p


def _lars_numpy(
    p: np.ndarray, grads: list[np.ndarray], lr: float, momentum: float, wd: float, tcoef: float
) -> np.ndarray:
    b = np.zeros_like(p)
    for g in grads:
        r1, r2 = np.linalg.norm(p), np.linalg.norm(g)
        r = tcoef * r1 / (r2 + wd * r1) if r1 > 0 and r2 > 0 else 1.0
        b = momentum * b + (g + wd * p) * r * lr  # classic: lr and the ratio before the momentum
        p = p - b
    return p


@Tensor.train()
def _fixed_grad_steps(opt_fn: Any, p0: np.ndarray, grads: list[np.ndarray]) -> np.ndarray:
    """Each step's gradient is given: the loss is sum(p * g) for the step's g."""
    p = Tensor(p0.astype(np.float32), requires_grad=True)
    opt = opt_fn([p])
    for g in grads:
        opt.zero_grad()
        (p * Tensor(g.astype(np.float32))).sum().backward()
        opt.step()
    return p.numpy()


def test_lamb_and_lars_match_their_definitions() -> None:
    p0 = RNG.standard_normal((3, 4))
    grads = [RNG.standard_normal((3, 4)) for _ in range(4)]
    ours = _fixed_grad_steps(lambda ps: LAMB(ps, lr=0.05, weight_decay=0.1), p0, grads)
    np.testing.assert_allclose(ours, _lamb_numpy(p0, grads, 0.05, 0.9, 0.999, 1e-6, 0.1, False), rtol=2e-5)
    ours = _fixed_grad_steps(lambda ps: LARS(ps, lr=0.5), p0, grads)  # the defaults: momentum .9, wd 1e-4
    np.testing.assert_allclose(ours, _lars_numpy(p0, grads, 0.5, 0.9, 1e-4, 0.001), rtol=1e-5)
    opt = LAMB([Tensor([1.0], requires_grad=True)])
    assert (opt.b1, opt.b2, opt.eps, opt.wd, opt.adam) == (0.9, 0.999, 1e-6, 0.0, False)
    np.testing.assert_allclose(opt.b1_t.numpy(), [0.0])  # 1 - b1 ** t, t = 0


def test_sgd_adam_adamw_are_lars_and_lamb() -> None:
    p = Tensor([1.0, 2.0], requires_grad=True)
    sgd, adam, adamw = SGD([p]), Adam([p]), AdamW([p])
    assert isinstance(sgd, LARS) and sgd.tcoef == 0 and sgd.pre_wd and not sgd.classic
    assert isinstance(adam, LAMB) and adam.adam and adam.wd == 0 and adam.eps == 1e-8
    assert isinstance(adamw, LAMB) and adamw.adam and adamw.wd == 0.01
    with pytest.raises(ValueError, match="learning rate"):
        SGD([p], lr=-1)
    with pytest.raises(ValueError, match="momentum"):
        LARS([p], momentum=-0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        LAMB([p], weight_decay=-0.1)


def test_classic_sgd_momentum_puts_lr_inside_the_buffer() -> None:
    p0, grads = RNG.standard_normal(5), [RNG.standard_normal(5) for _ in range(3)]
    ours = _fixed_grad_steps(lambda ps: SGD(ps, lr=0.1, momentum=0.9, classic=True), p0, grads)
    b, p = np.zeros(5), p0
    for g in grads:
        b = 0.9 * b + 0.1 * g
        p = p - b
    np.testing.assert_allclose(ours, p, rtol=1e-6)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
        ("AdamW", dict(lr=0.01)),
        ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ],
)
def test_fused_and_grouped_steps_match_torch(name: str, kw: dict[str, Any]) -> None:
    """fused=True concatenates every parameter for the step; an OptimizerGroup steps two optimisers (each
    with its own parameters) as one: both give what torch gives."""
    ours_cls, theirs_cls = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}[name], getattr(torch.optim, name)
    tkw = {("betas" if k == "b1" else k): v for k, v in kw.items()}
    fused = _train(lambda p: ours_cls(p, fused=True, **kw), 4, Tensor)
    grouped = _train(lambda p: OptimizerGroup(ours_cls(p[:1], **kw), ours_cls(p[1:], **kw)), 4, Tensor)
    theirs = _train(lambda p: theirs_cls(p, **tkw), 4, torch.tensor)
    for a, b, c in zip(fused, grouped, theirs):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6)


@Tensor.train()
def test_optimizer_group_indexing_and_buffers() -> None:
    w, frozen = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=False)
    a, b = SGD([w, frozen], lr=0.5), Adam([Tensor([0.5], requires_grad=True)])
    g = OptimizerGroup(a, b)
    assert g[0] is a and g[1] is b and g.buffers == [frozen] and len(g.params) == 2
    (w.sum() + g[1].params[0].sum()).backward()
    g.step()
    np.testing.assert_allclose(w.numpy(), [0.5, 1.5])
    g.zero_grad()
    assert w.grad is None and b.params[0].grad is None


@Tensor.train()
def test_zero_dim_parameter_and_lr_schedule() -> None:
    """A 0-d parameter steps (the learning rate is (1,), as the reference's); assigning the lr changes the
    next step only."""
    p = Tensor(2.0, requires_grad=True)
    opt = SGD([p], lr=0.5)
    assert opt.lr.shape == (1,)
    (p * p).backward()
    opt.step()
    assert p.shape == () and p.item() == pytest.approx(2.0 - 0.5 * 4.0)
    opt.lr.assign(Tensor([0.25]))
    opt.zero_grad()
    (p * 3).backward()
    opt.step()
    assert p.item() == pytest.approx(0.0 - 0.25 * 3)


@Tensor.train()
def test_lamb_state_moved_with_to_() -> None:
    other = next((d for d in ("CPU", "REFERENCE:1") if d != Device.DEFAULT and _has(d)), None)
    if other is None:
        pytest.skip("no second device")
    t = Tensor(RNG.standard_normal((1, 4)).astype(np.float32), requires_grad=True)
    before = t.numpy().copy()
    opt = LAMB([t])
    for s in [*opt.m, *opt.v, opt.b1_t, opt.b2_t]:
        s.to_(other)
    t.sum().backward()
    opt.step()
    assert t.device == Device.DEFAULT and opt.m[0].device == other and opt.b1_t.device == other
    np.testing.assert_allclose(opt.m[0].numpy(), 0.1 * np.ones((1, 4)), rtol=1e-6)
    np.testing.assert_allclose(
        t.numpy(),
        _lamb_numpy(before.astype(np.float64), [np.ones((1, 4))], 0.001, 0.9, 0.999, 1e-6, 0.0, False),
        rtol=1e-5,
    )


def _has(device: str) -> bool:
    try:
        Device[device]
    except Exception:  # any failure to open it: not available here
        return False
    return True


# ---------------------------------------------------------------------- layers
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 4, 3, 2)])
def test_instancenorm_matches_torch(shape: tuple[int, ...]) -> None:
    layer = InstanceNorm(3)
    layer.weight, layer.bias = Tensor([0.5, 1.5, -1.0]), Tensor([0.1, 0.0, 2.0])
    x = Tensor(RNG.standard_normal(shape) * 3 + 1, requires_grad=True)  # float64 input: float64 result
    y = layer(x)
    print(y.mean().item())
    (y * y).sum().backward()
    tl = (torch.nn.InstanceNorm2d if len(shape) == 4 else torch.nn.InstanceNorm3d)(3, affine=True).double()
    with torch.no_grad():
        tl.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
        tl.bias.copy_(torch.tensor([0.1, 0.0, 2.0]))
    tx = _t64(x, grad=True)
    ty = tl(tx)
    (ty * ty).sum().backward()
    _close(y, ty, 1e-6)
    _close(x.grad, tx.grad, 1e-5)
    assert InstanceNorm(3, affine=False).weight is None
    with pytest.raises(ValueError, match="InstanceNorm"):
        layer(Tensor.ones(2, 4, 3))


def test_lstmcell_matches_torch_over_two_steps() -> None:
    cell, tcell = LSTMCell(6, 5), torch.nn.LSTMCell(6, 5).double()
    assert cell.weight_ih.shape == (20, 6) and cell.weight_hh.shape == (20, 5) and cell.bias_ih is not None
    np.testing.assert_array_equal(cell.bias_hh.numpy(), np.zeros(20))  # the biases start at zero
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            v = RNG.standard_normal(tuple(getattr(tcell, name).shape))
            getattr(cell, name).assign(Tensor(v.astype(np.float32)))
            getattr(tcell, name).copy_(torch.tensor(v.astype(np.float32).astype(np.float64)))
    x = Tensor(RNG.standard_normal((3, 6)))
    h, c = cell(x)
    h, c = cell(x * 2, (h, c))
    th, tc = tcell(_t64(x))
    th, tc = tcell(_t64(x) * 2, (th, tc))
    _close(h, th, 1e-6)
    _close(c, tc, 1e-6)
    cell.weight_ih.requires_grad = True  # (None until an optimiser takes it: no gradient is kept)
    h, c = cell(x)
    h, c = cell(x * 2, (h, c))
    (h.sum() + c.sum()).backward()
    (th.sum() + tc.sum()).backward()
    _close(cell.weight_ih.grad, tcell.weight_ih.grad, 1e-5)
    nb = LSTMCell(6, 5, bias=False)
    assert nb.bias_ih is None and nb.bias_hh is None
    assert nb(x.float())[0].shape == (3, 5)


def test_layernorm2d_normalises_channels() -> None:
    layer = LayerNorm2d(4)
    layer.weight = Tensor(RNG.standard_normal(4), requires_grad=True)
    x = Tensor(RNG.standard_normal((2, 4, 3, 5)), requires_grad=True)
    y = layer(x)
    assert y.shape == (2, 4, 3, 5)
    y.sin().sum().backward()
    tx, tw = _t64(x, grad=True), _t64(layer.weight, grad=True)
    ty = F.layer_norm(tx.permute(0, 2, 3, 1), (4,), tw, torch.zeros(4, dtype=torch.float64))
    ty = ty.permute(0, 3, 1, 2)
    ty.sin().sum().backward()
    _close(y, ty, 1e-6)
    _close(x.grad, tx.grad, 1e-5)
    _close(layer.weight.grad, tw.grad, 1e-5)


@pytest.mark.parametrize(
    "kw", [dict(), dict(stride=2, padding=1, output_padding=1), dict(stride=3, dilation=2, groups=2)]
)
def test_convtranspose1d_matches_torch(kw: dict[str, int]) -> None:
    layer = ConvTranspose1d(4, 6, 3, **kw)
    layer.weight.requires_grad = True
    assert layer.weight.shape == (4, 6 // kw.get("groups", 1), 3)
    x = Tensor(RNG.standard_normal((2, 4, 7)), requires_grad=True)
    y = layer(x)
    (y * y).mean().backward()
    tx, tw, tb = _t64(x, grad=True), _t64(layer.weight, grad=True), _t64(layer.bias)
    ty = F.conv_transpose1d(tx, tw, tb, **kw)
    (ty * ty).mean().backward()
    assert y.shape == tuple(ty.shape)
    _close(y, ty, 1e-6)
    _close(x.grad, tx.grad, 1e-6)
    _close(layer.weight.grad, tw.grad, 1e-6)


def test_conv_same_padding_and_embedding_errors() -> None:
    with pytest.raises(ValueError, match="stride 1"):
        Conv2d(2, 3, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="same"):
        Conv2d(2, 3, 3, padding="valid")
    assert Conv2d(2, 3, 3, padding="SAME")(Tensor.ones(1, 2, 5, 4)).shape == (1, 3, 5, 4)
    with pytest.raises(TypeError, match="integer"):
        Embedding(5, 2)(Tensor([1.0, 2.0]))


# ---------------------------------------------------------------------- pooling
@pytest.mark.parametrize(
    "shape,kw",
    [
        ((2, 3, 6, 6), dict(kernel_size=(2, 2))),
        ((1, 1, 10, 10), dict(kernel_size=(3, 2), dilation=(2, 3))),
        ((1, 2, 5, 5), dict(kernel_size=(3, 3), padding=1)),
        ((1, 1, 7, 7), dict(kernel_size=(2, 2), stride=(2, 2), ceil_mode=True)),
        ((1, 1, 5, 6), dict(kernel_size=(3, 3), stride=1)),
    ],
)
def test_max_pool2d_return_indices_and_unpool(shape: tuple[int, ...], kw: dict[str, Any]) -> None:
    vals = RNG.integers(0, 4, shape).astype(np.float64)  # few distinct values: ties in most windows
    x = Tensor(vals, requires_grad=True)
    out, idx = x.max_pool2d(return_indices=True, **kw)
    tout, tidx = F.max_pool2d(_t64(vals), return_indices=True, **kw)
    assert idx.dtype == dtypes.int32
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    _close(out, tout)
    out.sum().backward()  # the values still carry the gradient
    assert x.grad is not None and x.grad.shape == x.shape
    unkw = {k: v for k, v in kw.items() if k in ("kernel_size", "stride", "padding")}
    if set(kw) <= {"kernel_size", "stride"}:  # the default output size holds every index
        un = out.max_unpool2d(idx, **unkw)
        _close(un, F.max_unpool2d(tout, tidx, **unkw))
    if "dilation" not in kw:  # (torch's unpool has no dilation to size its output with)
        size = shape[-2:]
        _close(
            out.max_unpool2d(idx, output_size=(9, 9, *size), **unkw),
            F.max_unpool2d(tout, tidx, output_size=size, **unkw),
        )


def test_max_unpool2d_of_infinities() -> None:
    data = [[[[np.inf, -np.inf, 7.0], [1.0, 2.0, 3.0]]]]
    out, idx = Tensor(data).max_pool2d(kernel_size=(2, 2), return_indices=True)
    tout, tidx = F.max_pool2d(torch.tensor(data), kernel_size=(2, 2), return_indices=True)
    np.testing.assert_array_equal(
        Tensor.max_unpool2d(out, idx, kernel_size=(2, 2)).numpy(),
        F.max_unpool2d(tout, tidx, kernel_size=(2, 2)).numpy(),
    )


# ---------------------------------------------------------------------- einsum with an ellipsis
@pytest.mark.parametrize(
    "formula,shapes",
    [
        ("...id,...jd->...ij", [(3, 4, 5), (3, 6, 5)]),
        ("...id, ...jd", [(2, 3, 4, 5), (3, 6, 5)]),  # implicit output: the ellipsis first; broadcast batch
        ("i...j,ji...->...", [(2, 3, 4, 5), (5, 2, 4)]),
        ("ij...,ij...->ij", [(2, 3, 4, 5), (2, 3, 4, 5)]),
        ("...ii->...i", [(3, 4, 4)]),
        ("...ii->...", [(2, 3, 4, 4)]),
        ("b...,b->...", [(2, 1, 3), (2,)]),
    ],
)
def test_einsum_ellipsis_matches_torch(formula: str, shapes: list[tuple[int, ...]]) -> None:
    xs = [Tensor(RNG.standard_normal(s), requires_grad=True) for s in shapes]
    y = Tensor.einsum(formula, *xs)
    txs = [_t64(x, grad=True) for x in xs]
    ty = torch.einsum(formula, *txs)
    _close(y, ty)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for x, tx in zip(xs, txs):
        _close(x.grad, tx.grad)


def test_einsum_ellipsis_errors() -> None:
    a = Tensor.ones(2, 3, 4)
    with pytest.raises(IndexError, match="one ellipsis"):
        Tensor.einsum("...ik...,...jk->", a, a)
    with pytest.raises(RuntimeError, match="sizes"):  # the ellipses don't broadcast: j is 4 and 2
        Tensor.einsum("i...j,ji...->...", a, a)
    with pytest.raises(ShapeError, match="sizes"):
        Tensor.einsum("pq,qr->pr", Tensor.ones(2, 3), Tensor.ones(4, 5))


# ---------------------------------------------------------------------- attention and losses
def test_sdpa_grouped_query_attention_matches_torch() -> None:
    q = Tensor(RNG.standard_normal((2, 6, 5, 4)), requires_grad=True)
    k = Tensor(RNG.standard_normal((2, 2, 7, 4)), requires_grad=True)
    v = Tensor(RNG.standard_normal((2, 2, 7, 3)), requires_grad=True)
    y = q.scaled_dot_product_attention(k, v, enable_gqa=True)
    tq, tk, tv = (_t64(t, grad=True) for t in (q, k, v))
    ty = F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    _close(y, ty)
    y.square().sum().backward()
    ty.square().sum().backward()
    for a, b in ((q, tq), (k, tk), (v, tv)):
        _close(a.grad, b.grad)
    with pytest.raises(ValueError, match="multiple"):
        Tensor.ones(1, 5, 2, 4).scaled_dot_product_attention(
            Tensor.ones(1, 2, 2, 4), Tensor.ones(1, 2, 2, 4), enable_gqa=True
        )


@pytest.mark.parametrize("kw", CROSS_ENTROPY_OPTIONS, ids=str)
def test_sparse_categorical_crossentropy_options_match_torch(kw: dict[str, Any]) -> None:
    logits = Tensor(RNG.standard_normal((3, 8, 5)), requires_grad=True)  # classes on the last axis
    y = Tensor(RNG.integers(0, 5, (3, 8)).astype(np.int32))
    loss = logits.sparse_categorical_crossentropy(y, **kw)
    tl = _t64(logits, grad=True)
    tkw = {"ignore_index": -100, **kw}
    tloss = F.cross_entropy(tl.permute(0, 2, 1), torch.tensor(y.numpy(), dtype=torch.long), **tkw)
    _close(loss, tloss)
    loss.sum().backward()
    tloss.sum().backward()
    _close(logits.grad, tl.grad)


def test_sparse_categorical_crossentropy_errors() -> None:
    x, y = Tensor.ones(2, 3), Tensor([0, 1])
    with pytest.raises(ValueError, match="label_smoothing"):
        x.sparse_categorical_crossentropy(y, label_smoothing=1.5)
    with pytest.raises(ValueError, match="reduction"):
        x.sparse_categorical_crossentropy(y, reduction="avg")


# ---------------------------------------------------------------------- tensors in place and from memory
def test_tensor_from_bytes() -> None:
    t = Tensor(b"\xaa\xbb\xcc\xdd")
    assert t.dtype == dtypes.uint8 and t.tolist() == [0xAA, 0xBB, 0xCC, 0xDD]
    f = Tensor(struct.pack("<ff", 0.234, 0.8585), dtype=dtypes.float32)
    np.testing.assert_array_equal(f.numpy(), np.array([0.234, 0.8585], np.float32))
    assert Tensor(bytearray(b"\x01\x00\x02\x00"), dtype=dtypes.int16).tolist() == [1, 2]


def test_replace_and_to_() -> None:
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    keep = a
    a.replace(Tensor([4, 5, 6], dtype=dtypes.int32))  # another dtype: replace is not a cast
    assert a is keep and a.dtype == dtypes.int32 and a.tolist() == [4, 5, 6]
    with pytest.raises(ShapeError, match="same shape"):
        a.replace(Tensor([1, 2]))
    w = Tensor([1.0, -2.0], requires_grad=True)
    (w * w).sum().backward()
    other = next((d for d in ("CPU", "REFERENCE:1") if d != Device.DEFAULT and _has(d)), None)
    if other is None:
        pytest.skip("no second device")
    same = w.to_(other)
    assert same is w and w.device == other and w.grad is not None and w.grad.device == other
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -4.0])
    np.testing.assert_array_equal((w + 1).numpy(), [2.0, -1.0])


def test_from_blob_shares_host_memory() -> None:
    if not _has("CPU"):
        pytest.skip("no CPU backend")
    host = np.zeros(4, np.int32)
    t = Tensor.from_blob(host.ctypes.data, (4,), dtype=dtypes.int32, device="CPU")
    np.testing.assert_array_equal((t + 1).numpy(), [1, 1, 1, 1])
    host[:] = [0, 1, 2, 3]  # a write through the pointer shows in the tensor
    np.testing.assert_array_equal((t + 1).numpy(), [1, 2, 3, 4])
    t.assign(Tensor([7, 8, 9, 10], dtype=dtypes.int32, device="CPU")).realize()  # and the tensor's in memory
    np.testing.assert_array_equal(host, [7, 8, 9, 10])
    tt = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    m = Tensor.from_blob(tt.data_ptr(), (2, 3), dtype=dtypes.float32, device="CPU")
    np.testing.assert_array_equal((m * 2).numpy(), tt.numpy() * 2)
    if Device.DEFAULT == "REFERENCE":
        with pytest.raises(DeviceError, match="host memory"):
            Tensor.from_blob(host.ctypes.data, (4,), dtype=dtypes.int32)


# ---------------------------------------------------------------------- load_state_dict
def test_load_state_dict_reference_behaviour() -> None:
    layer = Linear(2, 2, bias=False)
    with pytest.raises(
        ValueError,
        match=r"Shape mismatch in layer `weight`: Expected shape \(2, 2\), but "
        r"found \(4, 4\) in state dict\.",
    ):
        load_state_dict(layer, {"weight": Tensor.ones(4, 4)})
    sd = {"weight": Tensor(np.arange(4, dtype=np.float32).reshape(2, 2))}
    loaded = load_state_dict(layer, sd, consume=True)
    assert loaded == [layer.weight] and sd == {}
    np.testing.assert_array_equal(layer.weight.numpy(), [[0, 1], [2, 3]])

    class Counter:
        def __init__(self) -> None:
            self.steps = Tensor(np.zeros((), np.int64))

    c = Counter()
    load_state_dict(c, {"steps": Tensor([5.0])})  # a (1,) entry fits a () tensor (and is cast)
    assert c.steps.shape == () and c.steps.dtype == dtypes.int64 and c.steps.item() == 5
    assert get_state_dict(c)["steps"] is c.steps


def test_load_state_dict_into_a_sharded_model() -> None:
    devs = (f"{Device.DEFAULT}:1", f"{Device.DEFAULT}:2")
    if not all(_has(d) for d in devs):
        pytest.skip("no second device")
    layer = Linear(2, 4)
    layer.weight.shard_(devs, 0)
    w = np.arange(8, dtype=np.float32).reshape(4, 2)
    load_state_dict(layer, {"weight": Tensor(w), "bias": Tensor(np.ones(4, np.float32))})
    assert layer.weight.device == devs and layer.weight.uop.axis == 0  # the model's sharding kept
    np.testing.assert_array_equal(layer.weight.numpy(), w)
    load_state_dict(layer, {"weight": Tensor(w * 2).shard(devs, 1), "bias": Tensor(np.zeros(4, np.float32))})
    assert layer.weight.uop.axis == 1  # a sharded entry brings its own sharding
    np.testing.assert_array_equal(layer.weight.numpy(), w * 2)
