"""The fact tables of uopgrad.facts are complete: every op has a shape rule, every movement op (and REDUCE,
MULTI) a movement rule, every op a value-range rule or an explicit place among the dtype-bounded ops."""

from __future__ import annotations

from uopgrad import GroupOp, Ops, Tensor, UOp, dtypes
from uopgrad.facts import (
    DTYPE_RANGE_OPS,
    INT_RANGE_RULES,
    MOVEMENT_SHAPE_RULES,
    SHAPE_RULES,
    VALUE_RANGE_RULES,
)


def test_every_op_has_a_shape_rule():
    missing = sorted(op.name for op in Ops if op not in SHAPE_RULES)
    assert not missing, f"ops without a shape rule in facts.SHAPE_RULES: {missing}"


def test_every_movement_op_has_a_movement_rule():
    assert set(MOVEMENT_SHAPE_RULES) == GroupOp.Movement | {Ops.REDUCE, Ops.MULTI}


def test_every_op_has_exactly_one_value_range_rule():
    tables = [set(VALUE_RANGE_RULES), set(INT_RANGE_RULES), set(DTYPE_RANGE_OPS)]
    assert set.union(*tables) == set(Ops)
    assert sum(len(t) for t in tables) == len(Ops)  # no op in two tables
    # the integer ops the index simplifier reasons about all have rules
    index_ops = {Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.FLOORDIV, Ops.FLOORMOD, Ops.CDIV, Ops.CMOD}
    assert index_ops <= set(INT_RANGE_RULES)


def test_the_rules_give_what_the_ops_mean():
    t = Tensor.ones(2, 3, 4)
    assert t.permute(2, 0, 1).shape == (4, 2, 3)
    assert t.pad(((1, 0), (0, 2), (0, 0))).shape == (3, 5, 4)
    assert t.shrink(((0, 1), (1, 3), (0, 4))).shape == (1, 2, 4)
    assert t.sum(axis=1).shape == (2, 4)
    i = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("i", 0, 9))
    assert (i * 3 + 2).vmin == 2 and (i * 3 + 2).vmax == 29
    assert ((i + 1) // 2).vmin == 0 and ((i + 1) // 2).vmax == 5


def test_sizes_and_the_device_index_are_named_once():
    """`sint` and `DEVICE_NUM` are defined in uopgrad.ops only; the modules above import them."""
    import re
    from pathlib import Path

    import uopgrad
    from uopgrad import facts, mixin, ops, uop

    src = Path(uopgrad.__file__).parent
    defining = sorted(
        p.name
        for p in src.rglob("*.py")
        if re.search(r"^(sint|_?DEVICE_NUM)\b.*=", p.read_text(), re.MULTILINE)
    )
    assert defining == ["ops.py"], defining
    assert uop.sint is ops.sint and uop.DEVICE_NUM is ops.DEVICE_NUM
    assert facts.DEVICE_NUM is ops.DEVICE_NUM and mixin.sint is ops.sint
