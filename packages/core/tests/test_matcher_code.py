"""The compiled matchers' code objects (rewrite.py `_code`): ops whose rules give the same source share one
code object, and each still runs with the values of its own rules."""

from __future__ import annotations

from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

x = UOp.variable("x", 0, 100, dtypes.int)


def _times_zero(arg: int) -> PatternMatcher:
    """x op CONST(arg) -> 0, for ADD and MUL alike (one rule over both ops: the same source for each)."""
    return PatternMatcher(
        [
            (
                UPat((Ops.ADD, Ops.MUL), src=(UPat.var("x"), UPat(Ops.CONST, arg=arg))),
                lambda x: x.const_like(0),
            )
        ]
    )


def test_ops_with_the_same_rules_share_one_code_object() -> None:
    pm = _times_zero(3)
    three = UOp.const(dtypes.int, 3)
    assert graph_rewrite(x + three, pm).arg == 0
    assert graph_rewrite(x * three, pm).arg == 0
    add, mul = (pm._by_value[op.value] for op in (Ops.ADD, Ops.MUL))
    assert add is not mul  # one function per op ...
    assert add.__code__ is mul.__code__  # ... compiled once


def test_matchers_that_differ_in_a_constant_each_test_their_own() -> None:
    three, five = _times_zero(3), _times_zero(5)
    c3, c5 = UOp.const(dtypes.int, 3), UOp.const(dtypes.int, 5)
    for pm in (three, five):  # ADD first, then MUL reuses the code
        for op in (Ops.ADD, Ops.MUL):
            graph_rewrite(x.alu(op, c3), pm)
    assert graph_rewrite(x * c3, three).arg == 0
    assert graph_rewrite(x * c5, five).arg == 0
    assert graph_rewrite(x * c5, three) is x * c5  # 5 is not three's constant
    assert graph_rewrite(x * c3, five) is x * c3
