"""The case table of the gradient checks (docs/conformance.md "What it checks" 2): one program per rule of
`uopgrad.gradient.pm_gradient` (and per reduce and movement op), and one per FUNCTION/CALL shape, each
compared with its inlined body. Input domains keep every program away from its kinks; the kinks
themselves (ties of MAX, relu at 0) are checked against REFERENCE's conventions.

Rules with no finite-difference meaning are checked for what they promise instead: BITCAST and DETACH
pass no gradient ("zero"). `NOT_DIFFERENTIABLE` ops of core (integer and bitwise arithmetic, THREEFRY,
MULACC, ...) have no gradient by design and are not listed.
"""

from __future__ import annotations

from uopgrad import GroupOp, Ops
from uopgrad.alu import ALU
from uopgrad.gradient import pm_gradient
from uopgrad_conformance.gradcheck import GradInput, GradProgram

__all__ = ["FUNCTION_CASES", "GRAD_CASES", "RULE_ROWS"]

I = GradInput  # noqa: E741  (short names keep the table readable)
P = GradProgram
X23 = (I("x", (2, 3)),)
XY23 = (I("x", (2, 3)), I("y", (2, 3)))

# row -> program. Rows named after a pm_gradient rule's op; the few others say what they cover.
GRAD_CASES: dict[str, GradProgram] = {
    "CAST": P(X23, "out = (x.cast(dtypes.float64) * 3).cast(dt) * x"),
    "RECIPROCAL": P((I("x", (2, 3), "nonzero"),), "out = x.reciprocal()", second_order=True),
    "SIN": P(X23, "out = x.sin()", second_order=True),
    "LOG2": P((I("x", (2, 3), "positive"),), "out = x.log2()", second_order=True),
    "EXP2": P((I("x", (2, 3), "small"),), "out = x.exp2()", second_order=True),
    "SQRT": P((I("x", (2, 3), "positive"),), "out = x.sqrt()", second_order=True),
    "TRUNC": P((I("x", (2, 3), "frac"),), "out = x.trunc() * x"),
    "CMPLT": P((I("x", (2, 3), "distinct"), I("y", (2, 3), "distinct")), "out = (x < y).cast(dt) * x + y"),
    "CMPNE": P(
        (I("x", (2, 3), "distinct"), I("y", (2, 3), "distinct")),
        "out = x.ne(y).cast(dt) * x + x.eq(y).cast(dt) * y",
    ),
    "ADD": P(XY23, "out = x + y", second_order=True),
    "MUL": P(XY23, "out = x * y", second_order=True),
    "POW": P(
        (I("x", (2, 3), "positive"), I("y", (2, 3)), I("z", (2, 3))),
        "out = (x.pow(y), z ** 3)",
        second_order=True,
    ),
    "MAX": P(
        (I("x", (2, 3), "distinct"), I("y", (2, 3), "distinct")), "out = x.maximum(y)", second_order=True
    ),
    "MAX tie": P(
        (I("x", (2, 4), "tie"), I("y", (2, 4), "tie")), "out = x.maximum(y) + x.relu()", expect="reference"
    ),
    "WHERE": P(
        (I("c", (2, 3), "bool", target=False), I("x", (2, 3)), I("y", (2, 3))),
        "out = c.where(x, y) * x",
        second_order=True,
    ),
    "REDUCE ADD": P(
        (I("w", (2, 3, 4)), I("e", (0, 3))), "out = (w.sum(1), w.sum((0, 2)), w.sum(), e.sum(0))"
    ),
    "REDUCE MAX": P((I("x", (3, 4), "distinct"),), "out = (x.max(1), x.max(0), x.max())", second_order=True),
    "REDUCE MAX tie": P((I("x", (3, 4), "tie"),), "out = (x.max(1), x.max())", expect="reference"),
    "REDUCE MUL": P((I("x", (3, 4), "unit"),), "out = (x.prod(1), x.prod())", second_order=True),
    "CONTIGUOUS": P(XY23, "out = (x * 2).contiguous() * y"),
    "CONTIGUOUS_BACKWARD": P(XY23, "out = x.permute(1, 0).contiguous_backward().sin() * y.permute(1, 0)"),
    "RESHAPE": P(X23, "out = x.reshape(3, 2)"),
    "EXPAND": P((I("x", (2, 3)), I("b", (3,))), "out = (x.reshape(2, 1, 3).expand(2, 4, 3), x + b)"),
    "PAD": P(X23, "out = x.pad(((1, 2), (0, 1)))"),
    "SHRINK": P((I("x", (4, 3)),), "out = (x.shrink(((1, 3), (0, 2))), x[::2, ::-1])"),
    "PERMUTE": P((I("w", (2, 3, 4)),), "out = w.permute(2, 0, 1)"),
    "FLIP": P(XY23, "out = (x.flip(0), (x * y).flip((0, 1)).sin())"),
    "COPY": P(XY23, "out = (x.to(dev2) * 2, (x.to(dev2).sin() * y.to(dev2)).to(dev))"),
    # sharded over (dev, dev2) on axis 0 and replicated: the MULTI rule, a reduce over the sharded axis
    # (an all-reduce) and one beside it; gathered back onto dev
    "MULTI": P(
        XY23,
        "xs, ys = x.shard((dev, dev2), 0), y.shard((dev, dev2))\n"
        "out = ((xs * ys).sin().sum(0).to(dev), (xs.exp() * ys).sum(1).to(dev))",
    ),
    "STORE (clone, assign)": P(
        XY23, "z = Tensor.empty(2, 3, device=dev, dtype=dt)\nz.assign(x * 2)\nout = (x.clone() * y, z * y)"
    ),
    "STORE (assign into a value)": P(
        XY23, "z = Tensor.zeros(2, 3, device=dev, dtype=dt).contiguous()\nz.assign(x * 2)\nout = z * y"
    ),
    "BITCAST": P(
        X23,
        "ix = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[dt.itemsize]\n"
        "out = x.bitcast(ix).bitcast(dt) * 2",
        expect="zero",
    ),
    "DETACH": P(X23, "out = x.detach() * 3", expect="zero"),
    "movement chain": P(
        (I("w", (2, 3, 4)),),
        "out = w.permute(1, 0, 2).pad(((1, 0), (0, 0), (0, 1)))"
        ".shrink(((0, 3), (0, 2), (1, 5))).flip(0).reshape(1, 3, 8).expand(2, 3, 8)",
    ),
}

# the op of each pm_gradient rule -> the rows that exercise it (checked complete by the harness tests): the
# row named after the op, or those listed here where a rule has other rows or more than one
RULE_ROWS: dict[Ops, tuple[str, ...]] = {
    Ops[row]: (row,) for row in GRAD_CASES if row in Ops.__members__ and Ops[row] in pm_gradient.pdict
}
RULE_ROWS.update(
    {
        Ops.MAX: ("MAX", "MAX tie"),
        Ops.REDUCE: ("REDUCE ADD", "REDUCE MAX", "REDUCE MUL"),
        Ops.TUPLE: ("FUNCTION multiple outputs",),
        Ops.AFTER: ("CALL custom kernel", "STORE (clone, assign)"),
        Ops.STORE: ("STORE (clone, assign)", "STORE (assign into a value)"),
    }
)

# A float-only unary op with a pm_gradient rule and no row above gets a generic one: first order on (0.5, 2),
# where such ops are smooth. A hand-written row (second order, another domain) replaces it; today none is
# generic, so adding an op like SQRT needs no row here.
_GENERIC: dict[Ops, GradProgram] = {
    op: P((I("x", (2, 3), "positive"),), f"out = Tensor(x.uop.alu(Ops.{op.name}))")
    for op, row in ALU.items()
    if op in GroupOp.Unary and row.float_only and op in pm_gradient.pdict and op not in RULE_ROWS
}
GRAD_CASES.update({op.name: prog for op, prog in _GENERIC.items()})
RULE_ROWS.update({op: (op.name,) for op in _GENERIC})

_F = "@function"
FUNCTION_CASES: dict[str, GradProgram] = {
    "FUNCTION plain": P(
        XY23,
        f"""{_F}
def f(a, b):
    return (a * b).sin() + a
out = f(x, y)""",
        second_order=True,
    ),
    "FUNCTION multiple outputs": P(
        XY23,
        f"""{_F}
def f(a, b):
    return a * b, a.sin() - b
p, q = f(x, y)
r, _ = f(y, x)
out = (p, q, r)""",
    ),
    "FUNCTION unused input": P(
        XY23,
        f"""{_F}
def f(a, b):
    return a.sin()
out = f(x, y)""",
    ),
    "FUNCTION same tensor twice": P(
        X23,
        f"""{_F}
def f(a, b):
    return a * b.sin()
out = f(x, x)""",
    ),
    # `y` is read from the enclosing scope, broadcast along the rows and at the argument's own shape
    **{
        f"FUNCTION implicit input{suffix}": P(
            (I("x", (2, 3)), I("y", y_shape)),
            f"""{_F}(allow_implicit=True)
def f(a):
    return (a * y).exp2()
out = f(x)""",
        )
        for suffix, y_shape in (("", (3,)), (" 2-d", (2, 3)))
    },
    "FUNCTION nested": P(
        XY23,
        f"""{_F}
def g(a):
    return a.sin() * a
{_F}
def f(a, b):
    return g(a) + g(b) * a
out = f(x, y)""",
    ),
    "FUNCTION precompile": P(
        XY23,
        f"""{_F}(precompile=True)
def f(a, b):
    return (a * b).sin() + (a * 0.5).exp2()
out = f(x, y)""",
        second_order=True,
    ),
    "FUNCTION precompile_backward": P(
        XY23,
        f"""{_F}(precompile_backward=True)
def f(a, b):
    return (a * b).sin() * b
{_F}(precompile=True, precompile_backward=True)
def g(a, b):
    return (a + b).reciprocal() * a
out = (f(x, y), g(x * x + 1, y * y + 1))""",
    ),
    "FUNCTION grad_fxn": P(
        XY23,
        f"""def df(g, k):
    return (g * k.src[2], g * k.src[1])
{_F}(grad_fxn=df)
def f(a, b):
    return a * b
out = f(x, y) + x""",
    ),
    "FUNCTION matmul chain": P(
        (I("x", (2, 3)), I("w", (3, 4)), I("u", (4, 2))),
        f"""{_F}(precompile=True)
def layer(a, m):
    return (a @ m).sin()
out = layer(layer(x, w), u)""",
    ),
    "CALL custom kernel": P(
        XY23,
        """def kernel(o, a):
    return o.store(a * 2.0).sink()
def dkernel(g, k):
    return (None, (Tensor(g) * 2.0).uop)
doubled = Tensor.custom_kernel(Tensor.empty(6, device=dev, dtype=dt), x.reshape(6), fxn=kernel,
                               grad_fxn=dkernel)[0]
out = doubled.reshape(2, 3) * y""",
        inline="out = (x * 2.0) * y",
    ),
}


def _inline(body: str) -> str:
    """The body without its `@function` decorators: the same computation, inlined."""
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith(_F))


for _name, _prog in list(FUNCTION_CASES.items()):
    if _prog.inline is None:
        FUNCTION_CASES[_name] = P(
            _prog.inputs, _prog.body, _prog.expect, _inline(_prog.body), _prog.second_order, _prog.jacobian
        )
