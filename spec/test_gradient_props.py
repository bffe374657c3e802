"""Property tests of gradients (spec/gradients.md), on generated programs evaluated by REFERENCE.

A program is a short list of steps over 1-3 float64 inputs of one shape: elementwise ops, movement ops
and reductions. Two properties:

(a) A FUNCTION is transparent to differentiation: the gradient through `function(program)` (plain, with
    precompile and/or precompile_backward, one or two outputs, one possibly unused, possibly called from
    inside another function) equals the gradient of the same program written inline.
(b) Gradients are derivatives: for a random cotangent `c` and random directions `v`, <grad, v> matches the
    central finite difference of <program(x), c> along `v`. Programs evaluated at (or near) a kink of
    relu / maximum / max-reduce are discarded, as are programs whose values grow too large.
(c) A gradient built from its structure's template (uopgrad.gradient_template, the second time a program
    runs on new inputs) is the very nodes `compute_gradient` derives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import assume, given, note
from hypothesis import strategies as st

from uopgrad import dtypes
from uopgrad.function import function
from uopgrad.gradient import compute_gradient
from uopgrad.gradient_template import gradients, template_cache_info
from uopgrad.tensor import Tensor

# ---------------------------------------------------------------------- the program language
Fn = Callable[..., tuple[Tensor, ...]]  # a program, or a function of one

# smooth everywhere (on the reals), so they suit finite differences
SMOOTH_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "sin": lambda x: x.sin(),
    "square": lambda x: x * x,
    "scale": lambda x: x * -1.5,
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
    "log2_1p": lambda x: (x * x + 1).log2(),
    "sqrt_1p": lambda x: (x * x + 1).sqrt(),
    "recip_1p": lambda x: (x * x + 1).reciprocal(),
    "exp2_half": lambda x: (x * 0.5).exp2(),
    "contiguous": lambda x: x.contiguous(),
    "contiguous_backward": lambda x: x.contiguous_backward(),
}
KINK_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": lambda x: x.relu(),
}
# only for (a): not differentiable, not finite everywhere, or below float64 precision
ROUGH_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "detach": lambda x: x.detach(),
    "sqrt": lambda x: x.sqrt(),
    "log2": lambda x: x.log2(),
    "reciprocal": lambda x: x.reciprocal(),
    "f32": lambda x: x.cast(dtypes.float32).cast(dtypes.float64),
    "abs": lambda x: x.abs(),
}
SMOOTH_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div_1p": lambda a, b: a / (b * b + 1),
    "pow_1p": lambda a, b: (a * a + 1).pow(b.sin()),
}
KINK_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "maximum": lambda a, b: a.maximum(b),
}
ROUGH_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "pow": lambda a, b: a.pow(b),
    "where": lambda a, b: (a < b).where(a * 2, b),
}
SMOOTH_REDUCE: dict[str, Callable[[Tensor, int, bool], Tensor]] = {
    "sum": lambda x, ax, k: x.sum(ax, keepdim=k),
    "mean": lambda x, ax, k: x.mean(ax, keepdim=k),
    "prod_1p": lambda x, ax, k: (x * x + 1).prod(ax, keepdim=k),
}
KINK_REDUCE: dict[str, Callable[[Tensor, int, bool], Tensor]] = {
    "max": lambda x, ax, k: x.max(ax, keepdim=k),
}
ROUGH_REDUCE: dict[str, Callable[[Tensor, int, bool], Tensor]] = {
    "prod": lambda x, ax, k: x.prod(ax, keepdim=k),  # divides by x: zeros give NaN, as at the reference
    "min": lambda x, ax, k: x.min(ax, keepdim=k),
}
UNARY = {**SMOOTH_UNARY, **KINK_UNARY, **ROUGH_UNARY}
BINARY = {**SMOOTH_BINARY, **KINK_BINARY, **ROUGH_BINARY}
REDUCE = {**SMOOTH_REDUCE, **KINK_REDUCE, **ROUGH_REDUCE}
MOVEMENT: dict[str, Callable[[Tensor, Any], Tensor]] = {
    "reshape": lambda x, a: x.reshape(a),
    "permute": lambda x, a: x.permute(a),
    "flip": lambda x, a: x.flip(a),
    "pad": lambda x, a: x.pad(a),
    "shrink": lambda x, a: x.shrink(a),
    "expand": lambda x, a: x.reshape(a[0]).expand(a[1]),
}
MAX_NUMEL = 48


@dataclass(frozen=True)
class Step:
    """One instruction: `op` applied to earlier values `srcs` (indices), with a static argument."""

    kind: str  # "unary", "binary", "movement" or "reduce"
    op: str
    srcs: tuple[int, ...]
    arg: Any = None

    def run(self, vals: Sequence[Tensor]) -> Tensor:
        xs = [vals[i] for i in self.srcs]
        if self.kind == "unary":
            return UNARY[self.op](xs[0])
        if self.kind == "binary":
            return BINARY[self.op](xs[0], xs[1])
        if self.kind == "movement":
            return MOVEMENT[self.op](xs[0], self.arg)
        return REDUCE[self.op](xs[0], self.arg[0], self.arg[1])


@dataclass(frozen=True)
class Program:
    """Inputs of `shape`, then `steps`; the outputs are the values at `outputs` (indices)."""

    n_inputs: int
    shape: tuple[int, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]

    def values(self, xs: Sequence[Tensor]) -> list[Tensor]:
        vals = list(xs)
        for s in self.steps:
            vals.append(s.run(vals))
        return vals

    def __call__(self, *xs: Tensor) -> tuple[Tensor, ...]:
        vals = self.values(xs)
        return tuple(vals[i] for i in self.outputs)


def _shapes_with_numel(n: int) -> list[tuple[int, ...]]:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    out = [(n,)]
    out += [(a, n // a) for a in divisors]
    out += [(a, b, n // (a * b)) for a in divisors for b in divisors if n % (a * b) == 0]
    return out


def _movement(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[str, Any, tuple[int, ...]] | None:
    """A movement op valid on `shape`: (name, argument, result shape), or None when none fits."""
    numel = int(np.prod(shape))
    ops = ["reshape"] + (["permute", "flip", "pad", "shrink", "expand"] if shape else [])
    op = draw(st.sampled_from(ops))
    if op == "reshape":
        new = draw(st.sampled_from(_shapes_with_numel(numel)))
        return op, new, new
    if op == "permute":
        order = tuple(draw(st.permutations(range(len(shape)))))
        return op, order, tuple(shape[i] for i in order)
    if op == "flip":
        dims = range(len(shape))
        axes = draw(st.lists(st.sampled_from(dims), min_size=1, max_size=len(shape), unique=True))
        return op, tuple(axes), shape
    if op == "pad":
        pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        new = tuple(d + b + e for d, (b, e) in zip(shape, pads))
        return (op, pads, new) if np.prod(new) <= MAX_NUMEL else None
    if op == "shrink":
        box = []
        for d in shape:
            start = draw(st.integers(0, d - 1))
            box.append((start, draw(st.integers(start + 1, d))))
        return op, tuple(box), tuple(e - s for s, e in box)
    axis, n = draw(st.integers(0, len(shape))), draw(st.integers(2, 3))  # expand a new axis of size 1
    ones = shape[:axis] + (1,) + shape[axis:]
    new = shape[:axis] + (n,) + shape[axis:]
    return (op, (ones, new), new) if numel * n <= MAX_NUMEL and len(new) <= 4 else None


@st.composite
def programs(draw: st.DrawFn, smooth: bool, max_outputs: int = 1) -> Program:
    """A random program. `smooth` keeps to ops with usable finite differences (kinks included: the test
    discards evaluations near them)."""
    unary = [*SMOOTH_UNARY, *KINK_UNARY] + ([] if smooth else list(ROUGH_UNARY))
    binary = [*SMOOTH_BINARY, *KINK_BINARY] + ([] if smooth else list(ROUGH_BINARY))
    reduce = [*SMOOTH_REDUCE, *KINK_REDUCE] + ([] if smooth else list(ROUGH_REDUCE))
    n_inputs = draw(st.integers(1, 3))
    shape = draw(st.sampled_from([(3,), (2, 3), (4, 1), (2, 1, 3), (2, 2, 2), (2, 3, 2), ()]))
    shapes: list[tuple[int, ...]] = [shape] * n_inputs
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(
            st.sampled_from(
                ["unary", "unary", "binary", "binary", "movement", "movement", "movement", "reduce"]
            )
        )
        i = draw(st.integers(0, len(shapes) - 1))
        if kind == "binary":
            partners = [j for j, s in enumerate(shapes) if s == shapes[i]]
            steps.append(Step(kind, draw(st.sampled_from(binary)), (i, draw(st.sampled_from(partners)))))
            shapes.append(shapes[i])
        elif kind == "movement" and (m := _movement(draw, shapes[i])) is not None:
            steps.append(Step(kind, m[0], (i,), m[1]))
            shapes.append(m[2])
        elif kind == "reduce" and shapes[i]:
            axis, keep = draw(st.integers(0, len(shapes[i]) - 1)), draw(st.booleans())
            steps.append(Step(kind, draw(st.sampled_from(reduce)), (i,), (axis, keep)))
            shapes.append(tuple(1 if k == axis else d for k, d in enumerate(shapes[i]) if keep or k != axis))
        else:
            steps.append(Step("unary", draw(st.sampled_from(unary)), (i,)))
            shapes.append(shapes[i])
    outputs = [len(shapes) - 1]
    if max_outputs > 1 and draw(st.booleans()):
        outputs.append(draw(st.integers(0, len(shapes) - 2)))
    return Program(n_inputs, shape, tuple(steps), tuple(outputs))


def _inputs(program: Program, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(program.shape) for _ in range(program.n_inputs)]


def _tensors(arrays: Sequence[np.ndarray]) -> list[Tensor]:
    return [Tensor(a, dtype=dtypes.float64) for a in arrays]


def _quirk_free(outs: Sequence[Tensor], xs: Sequence[Tensor], use_all: bool) -> bool:
    """Leave out two reference quirks (semantics §3.8), which are not properties: two outputs that are one
    node (item 4: `real + NOOP` fails), and an unused output that is an input itself (item 3: that input's
    PARAM gets a NOOP gradient, which becomes a NOOP element of the backward TUPLE)."""
    if len({o.uop for o in outs}) != len(outs):
        return False
    return use_all or all(o.uop not in {x.uop for x in xs} for o in outs[1:])


# ---------------------------------------------------------------------- (a) FUNCTION == inlined body
FLAGS = [(False, False), (True, False), (True, True), (False, True)]


class Nested:
    """A function whose body calls `inner`, another function: a FUNCTION inside a FUNCTION body."""

    def __init__(self, inner: Fn) -> None:
        self.inner = inner

    def __call__(self, *xs: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.inner(*xs))


@given(
    programs(smooth=False, max_outputs=2),
    st.integers(0, 2**32 - 1),
    st.sampled_from(FLAGS),
    st.booleans(),
    st.booleans(),
)
def test_function_gradient_equals_inlined_gradient(
    program: Program, seed: int, flags: tuple[bool, bool], use_all: bool, nested: bool
):
    precompile, precompile_backward = flags
    note(f"{program}")
    arrays = _inputs(program, seed)
    rng = np.random.default_rng(seed + 1)

    def grads(outs: Sequence[Tensor], xs: Sequence[Tensor]) -> list[np.ndarray]:
        used = outs if use_all else outs[:1]  # with two outputs, the second may be left unused
        loss = sum(((o * Tensor(c)).sum() for o, c in zip(used, cots)), Tensor(0.0, dtype=dtypes.float64))
        return [g.numpy() for g in loss.gradient(*xs)]

    xs = _tensors(arrays)
    inline_outs = program(*xs)
    assume(_quirk_free(inline_outs, xs, use_all))
    cots = [rng.standard_normal(o.shape) for o in inline_outs]
    expected = grads(inline_outs, xs)

    ys = _tensors(arrays)
    fn: Fn = function(program, precompile=precompile, precompile_backward=precompile_backward)
    if nested:
        # the outer function precompiles when the inner one does: a precompiled inner backward takes the
        # forward outputs as extra arguments, and an outer backward with fewer candidate arguments than
        # that would hit the IndexError of semantics §3.6 (compaction counts slots inside nested bodies)
        fn = function(Nested(fn), precompile=precompile, precompile_backward=precompile_backward)
    outs = fn(*ys)
    outs = outs if isinstance(outs, tuple) else (outs,)
    got = grads(outs, ys)
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=f"input {i}")


# ---------------------------------------------------------------------- (b) finite differences
H = 1e-5
MARGIN = 1e-3  # a kink closer than this to an evaluated value discards the example
BOUND = 1e3


def _kink_margin(program: Program, arrays: Sequence[np.ndarray]) -> float:
    """The smallest distance of any value to a kink of relu, maximum or a max reduce (inf if none)."""
    vals = program.values(_tensors(arrays))  # fresh inputs: realizing these leaves other graphs alone
    Tensor.realize(*vals)
    arrs = [v.numpy() for v in vals]
    assume(all(np.all(np.isfinite(a)) and np.all(np.abs(a) < BOUND) for a in arrs))
    margin = np.inf
    for s in program.steps:
        x = arrs[s.srcs[0]]
        if s.op == "relu":
            margin = min(margin, float(np.min(np.abs(x)))) if x.size else margin
        elif s.op == "maximum":
            margin = min(margin, float(np.min(np.abs(x - arrs[s.srcs[1]])))) if x.size else margin
        elif s.op == "max" and x.shape[s.arg[0]] > 1:
            top = np.sort(x, axis=s.arg[0])
            gap = np.take(top, -1, axis=s.arg[0]) - np.take(top, -2, axis=s.arg[0])
            margin = min(margin, float(np.min(gap)))
    return margin


def _objective(fn: Fn, arrays: Sequence[np.ndarray], cot: np.ndarray) -> float:
    (out,) = fn(*_tensors(arrays))
    return float(np.sum(out.numpy() * cot))


VIA = ["inline", "function", "precompile"]


@given(programs(smooth=True), st.integers(0, 2**32 - 1), st.sampled_from(VIA))
def test_gradient_matches_central_differences(program: Program, seed: int, via: str):
    note(f"{program} via {via}")
    arrays = _inputs(program, seed)
    assume(_kink_margin(program, arrays) > MARGIN)
    fn: Fn = program if via == "inline" else function(program, precompile=via == "precompile")
    xs = _tensors(arrays)
    (out,) = fn(*xs)
    rng = np.random.default_rng(seed + 1)
    cot = rng.standard_normal(out.shape)  # a random seed, never all ones
    grads = [g.numpy() for g in out.gradient(*xs, gradient=Tensor(cot))]
    for g, x in zip(grads, arrays):
        assert g.shape == x.shape and g.dtype == np.float64
    for _ in range(2):
        vs = [rng.standard_normal(program.shape) for _ in arrays]
        analytic = sum(float(np.sum(g * v)) for g, v in zip(grads, vs))
        plus = _objective(fn, [x + H * v for x, v in zip(arrays, vs)], cot)
        minus = _objective(fn, [x - H * v for x, v in zip(arrays, vs)], cot)
        numeric = (plus - minus) / (2 * H)
        scale = 1 + abs(plus) + sum(float(np.sum(np.abs(g * v))) for g, v in zip(grads, vs))
        assert abs(numeric - analytic) <= 1e-6 * scale, f"finite difference {numeric} vs gradient {analytic}"


def test_finite_differences_catch_a_wrong_rule():
    # the harness itself: a program whose gradient is deliberately wrong (a detach hides a dependence) fails
    program = Program(1, (3,), (Step("unary", "detach", (0,)), Step("binary", "mul", (0, 1))), (2,))
    arrays = [np.array([0.5, -1.0, 2.0])]
    xs = _tensors(arrays)
    (out,) = program(*xs)
    cot = np.array([0.3, -0.7, 1.1])
    (g,) = out.gradient(*xs, gradient=Tensor(cot))
    v = np.array([1.0, 2.0, -1.0])
    numeric = (
        _objective(program, [arrays[0] + H * v], cot) - _objective(program, [arrays[0] - H * v], cot)
    ) / (2 * H)
    assert abs(numeric - float(np.sum(g.numpy() * v))) > 1e-3


# ---------------------------------------------------------------------- (c) templates
@given(
    programs(smooth=False, max_outputs=2),
    st.integers(0, 2**32 - 1),
    st.sampled_from(FLAGS),
    st.sampled_from(["inline", "function", "nested"]),
    st.booleans(),
)
def test_a_gradient_from_its_template_is_the_derived_gradient(
    program: Program, seed: int, flags: tuple[bool, bool], via: str, seeded: bool
):
    note(f"{program} via {via}")
    fn: Fn = program
    if via != "inline":
        fn = function(program, precompile=flags[0], precompile_backward=flags[1])
        if via == "nested":
            fn = function(Nested(fn), precompile=flags[0], precompile_backward=flags[1])
    hits = template_cache_info()["hits"]
    for step in range(3):  # a training loop: the same structure over new data (the first derives it)
        xs = _tensors(_inputs(program, seed + step))
        outs = fn(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        assume(_quirk_free(outs, xs, True))
        rng = np.random.default_rng(seed + step)
        loss = sum(
            ((o * Tensor(rng.standard_normal(o.shape))).sum() for o in outs),
            Tensor(0.0, dtype=dtypes.float64),
        )
        cot = Tensor(rng.standard_normal(()) if seeded else 1.0, dtype=dtypes.float64)
        targets = [x.uop for x in xs]
        got = gradients(loss.uop, cot.uop, targets)
        derived = compute_gradient(loss.uop, cot.uop, set(targets))
        assert all(g is derived.get(t) for g, t in zip(got, targets)), f"step {step}"
    assert template_cache_info()["hits"] >= hits + 2
