"""Gradient checks by finite differences of the composed Tensor ops (tensor_elementwise, tensor_index,
tensor_shape, tensor_nn): convolution, pooling, normalisation, losses, attention, indexing, scans,
sorting, shape ops, activations, inverse trigonometric and hyperbolic functions. They are compositions
of primitives, so every backend must get them right; a failure here with the primitive rows passing is a
bug of a composition on that backend.

Each row packs several ops into one program (one output: theirs, concatenated) and runs in float32, with
the dot-product test and REFERENCE's gradients but not the full Jacobian, to keep the cost small: about
110 kernels for a compiled backend (some 15 s of CPU time on CPU, C compiles included; 6 s on REFERENCE).
Input domains keep the programs away from their kinks (ties of max, sort and pooling)."""

from __future__ import annotations

import pytest

from uopgrad import dtypes
from uopgrad_conformance.gradcheck import GradInput, GradProgram, check_gradients
from uopgrad_conformance.plugin import case_rng, claimed_cases, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target

I = GradInput  # noqa: E741  (short names keep the table readable)


def P(inputs: tuple[GradInput, ...], body: str) -> GradProgram:
    """A program checked by the dot-product test only (no full Jacobian), its outputs `outs` flattened into
    one: the backend then fuses them into a few kernels (a third of the compiles of separate outputs)."""
    return GradProgram(inputs, body + "\nout = Tensor.cat(*(o.flatten() for o in outs))", jacobian=False)


NN_CASES: dict[str, GradProgram] = {
    "conv2d, conv_transpose2d": P(
        (I("x", (1, 2, 5, 4)), I("w", (4, 1, 3, 2)), I("b", (4,)), I("wt", (2, 3, 2, 2))),
        "outs = (x.conv2d(w, b, groups=2, stride=(2, 1), dilation=(1, 2), padding=1),\n"
        "       x.conv_transpose2d(wt, stride=2, padding=1, output_padding=1))",
    ),
    "max_pool2d, avg_pool2d": P(
        (I("x", (1, 2, 5, 5), "distinct"),),
        "outs = (x.max_pool2d(3, 2, padding=1), x.max_pool2d(2, 1, dilation=2),\n"
        "       x.avg_pool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False))",
    ),
    "batchnorm, layernorm": P(
        (I("x", (2, 3, 2, 2)), I("w", (3,)), I("b", (3,)), I("m", (3,)), I("v", (3,), "positive")),
        "outs = (x.batchnorm(w, b, m, v.rsqrt()), x.layernorm((-2, -1)))",
    ),
    "cross_entropy, nll_loss, binary_crossentropy": P(
        (I("z", (4, 3)), I("w", (3,), "positive"), I("t", (4, 3), "bool", target=False)),
        "y = Tensor([0, 2, 1, 2], device=dev)\n"
        "tf = t.cast(dt)\n"
        "outs = (z.cross_entropy(y, label_smoothing=0.1, ignore_index=1), z.cross_entropy(y, 'sum'),\n"
        "       z.log_softmax(1).nll_loss(y, w), z.sigmoid().binary_crossentropy(tf),\n"
        "       z.binary_crossentropy_logits(tf, pos_weight=w))",
    ),
    "scaled_dot_product_attention": P(
        (I("q", (1, 3, 2)), I("k", (1, 3, 2)), I("v", (1, 3, 2))),
        "outs = (q.scaled_dot_product_attention(k, v, is_causal=True),\n"
        "        q.scaled_dot_product_attention(k, v))",
    ),
    "gather, scatter_reduce, tensor index, masked ops": P(
        (I("x", (3, 4), "distinct"), I("s", (2, 4), "distinct"), I("m", (3, 4), "bool", target=False)),
        "i = Tensor([[0, 2, 1, 0], [2, 1, 0, 0]], device=dev)\n"
        "outs = (x.gather(0, i), x.scatter_reduce(0, i, s, 'sum'), x.scatter_reduce(0, i, s, 'amax'),\n"
        "       x.scatter(0, Tensor([[0, 1, 2, 0], [1, 2, 0, 2]], device=dev), s),\n"
        "       x[Tensor([2, 0, 2], device=dev)], x[:, Tensor([[3], [1]], device=dev)],\n"
        "       x.masked_fill(m, 0.5), x.masked_select(m, size=5))",
    ),
    "cumsum, cumprod, cummax, sort, topk": P(
        (I("x", (2, 5), "distinct"),),
        "outs = (x.cumsum(1), x.cumprod(0), x.cummax(1)[0], x.sort(1)[0], x.sort(0, descending=True)[0],\n"
        "       x.topk(2)[0])",
    ),
    "split, repeat, roll, einsum, tril, pad modes, interpolate": P(
        (I("x", (2, 3, 4)), I("y", (4, 2))),
        "outs = (x.split([1, 2], 1)[1], x.repeat(1, 2, 1), x.repeat_interleave(2, 2), x.roll(1, 2),\n"
        "       Tensor.einsum('bij,jk->bik', x, y), x.tril(-1), x.pad((1, 2), mode='reflect'),\n"
        "       x.pad((1, 1, 2, 0), mode='replicate'), x.pad((2, 1), mode='circular'),\n"
        "       x.interpolate((5, 7)), x.interpolate((2, 6), mode='nearest'))",
    ),
    "activations": P(
        (I("x", (2, 7), "distinct"),),
        "outs = (x.silu(), x.elu(), x.celu(0.5), x.mish(), x.hardswish(), x.leaky_relu(0.2), x.relu6(),\n"
        "       x.hardtanh(-0.9, 0.9), x.erf(), x.gelu(approximate='none'), x.softsign(), x.logsigmoid())",
    ),
    "inverse trigonometric, hyperbolic, binary": P(
        (I("x", (2, 5), "unit"), I("y", (2, 5), "positive")),
        "u = x * 0.7  # |u| < 0.92: inside the domain of asin, acos, atanh\n"
        "outs = (u.asin(), u.acos(), x.atan(), x.sinh(), x.cosh(), x.asinh(), (y + 1).acosh(), u.atanh(),\n"
        "       y.log10(), x.lerp(y, 0.3), x.logaddexp(y), x.logcumsumexp(1), x.normalize(dim=1),\n"
        "       x.std_mean(1)[0], x.diagonal(1), x.unfold(1, 2, 2))",
    ),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row, in float32."""
    parametrize_suite(
        metafunc, lambda target, _: claimed_cases(target, NN_CASES, [dtypes.float32], "grad", "nn ops")
    )


def test_nn_op(case: Case, target: Target, record: Recorder) -> None:
    """A composed op's gradient: dot-product test against float64 finite differences, and REFERENCE."""
    assert case.dtype is not None
    check_gradients(target, case.payload, case.dtype, case_rng(case), record)
