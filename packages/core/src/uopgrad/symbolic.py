"""Symbolic simplification (layer 7): placeholder until the `sym` table lands."""
from __future__ import annotations

from uopgrad.rewrite import PatternMatcher, graph_rewrite
from uopgrad.uop import UOp, register_simplifier

__all__ = ["sym"]

sym = PatternMatcher([])

register_simplifier(lambda u: graph_rewrite(u, sym, name="simplify"))
_ = UOp
