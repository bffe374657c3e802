"""The rewrite engine (layer 5): `UPat` patterns, `PatternMatcher` rule tables and `graph_rewrite`.

The engine is written against the five UOp fields and `replace` only, so it sits below `uop.py`; this lets
`UOp.substitute` use it without an upward import. Both engines are iterative: no recursion over the graph.
"""
from __future__ import annotations

import functools
import inspect
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uopgrad.config import DEBUG, TRACK_MATCH_STATS
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import RewriteError
from uopgrad.mixin import MathMixin
from uopgrad.ops import GroupOp, Ops

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = ["BottomUpGate", "PatternMatcher", "RewriteRule", "UPat", "graph_rewrite", "match_stats"]

RewriteRule = tuple["UPat", Callable[..., Any]]
Bindings = dict[str, "UOp"]
STACK_LIMIT = 250_000


class BottomUpGate(Exception):
    """Raised by a bottom-up rule to keep the node as it is and not visit its sources."""


class UPat(MathMixin):
    """A pattern over UOps. `src` is a tuple (positional), a list (any permutation), one UPat (every source)
    or None (sources not inspected). A `name` binds the matched UOp; a repeated name demands the same node."""

    __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "any_of", "_orderings",
                 "_required_ops")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: UPat | Sequence[UPat] | None = None, arg: Any = None, name: str | None = None,
                 allow_any_len: bool = False, any_of: tuple[UPat, ...] | None = None) -> None:
        if name == "ctx":
            raise ValueError("'ctx' is reserved for the rewrite context and can't name a pattern")
        self.op: frozenset[Ops] | None = frozenset((op,)) if isinstance(op, Ops) else \
            (frozenset(op) if op is not None else None)
        self.dtype: frozenset[DType] | None = frozenset((dtype,)) if isinstance(dtype, DType) else \
            (frozenset(dtype) if dtype is not None else None)
        self.src = src
        self.arg = arg
        self.name = name
        self.allow_any_len = allow_any_len
        self.any_of = any_of
        # the source orderings to try: one tuple, every permutation of a list, or one repeated pattern
        self._orderings: list[Sequence[UPat]] | UPat | None
        if isinstance(src, UPat):
            self._orderings = src
        elif isinstance(src, list):
            same = all(s is src[0] for s in src)
            self._orderings = [src] if same else [list(p) for p in itertools.permutations(src)]
        elif src is not None:
            self._orderings = [tuple(src)]
        else:
            self._orderings = None
        first: Iterable[UPat] = (src,) if isinstance(src, UPat) else (src or ())
        self._required_ops = frozenset(next(iter(p.op)) for p in first if p.op is not None and len(p.op) == 1)

    @staticmethod
    @functools.cache
    def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        """Any node (memoised, so two `UPat.var("x")` are the same object)."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        """A CONST or VCONST."""
        return UPat((Ops.CONST, Ops.VCONST), dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, b: ConstType) -> UPat:
        """A CONST with value `b` (compared with ==, so 0 matches 0.0 and False)."""
        return UPat(Ops.CONST, dtype, arg=b)

    @staticmethod
    def any(*pats: UPat) -> UPat:
        """Matches if any alternative matches; the results of all alternatives are concatenated."""
        return UPat(any_of=pats)

    def named(self, name: str) -> UPat:
        """This pattern binding `name`."""
        return UPat(self.op, self.dtype, self.src, self.arg, name, self.allow_any_len, self.any_of)

    def or_casted(self, name: str | None = None) -> UPat:
        """This pattern, or a CAST of it."""
        return UPat.any(self if name is None else self.named(name), UPat(Ops.CAST, name=name, src=(self,)))

    def or_after(self, name: str | None = None) -> UPat:
        """This pattern, or an AFTER of it."""
        return UPat.any(self if name is None else self.named(name),
                        UPat(Ops.AFTER, name=name, src=(self,), allow_any_len=True))

    # MathMixin hooks: arithmetic on patterns builds ALU patterns; commutative ops try both orders
    def alu(self, op: Ops, *src: UPat) -> UPat:
        """An ALU pattern; commutative ops get list sources (both orders tried), compares are bool."""
        asrc = (self, *src)
        dt = (dtypes.bool,) if op in GroupOp.Comparison else asrc[-1].dtype
        return UPat(op, dt, list(asrc) if op in GroupOp.Commutative else asrc)

    def const_like(self, b: ConstType) -> UPat:
        """A CONST pattern with value `b` and this pattern's dtype."""
        return UPat.const(self.dtype, b)

    def __repr__(self) -> str:
        if self.any_of is not None:
            return f"UPat.any({', '.join(map(repr, self.any_of))})"
        ops = "None" if self.op is None else "(" + ", ".join(sorted(o.name for o in self.op)) + ")"
        return f"UPat({ops}, name={self.name!r}, arg={self.arg!r}, src={self.src!r})"

    def match(self, uop: UOp, store: Bindings) -> list[Bindings]:
        """Every way this pattern matches `uop`, each as a binding dict extending `store`."""
        if self.any_of is not None:
            out = []
            for p in self.any_of:
                out.extend(p.match(uop, dict(store)))
            if self.name is not None:
                out = [b for b in out if b.setdefault(self.name, uop) is uop]
            return out
        if (self.op is not None and uop.op not in self.op) or \
                (self.name is not None and store.setdefault(self.name, uop) is not uop) or \
                (self.dtype is not None and uop.dtype not in self.dtype and
                 uop.dtype.scalar() not in self.dtype) or \
                (self.arg is not None and not self.arg == uop.arg):
            return []
        if self._orderings is None:
            return [store]
        if isinstance(self._orderings, UPat):
            orderings: list[Sequence[UPat]] = [itertools.repeat(self._orderings, len(uop.src))]  # type: ignore[list-item]
        else:
            n = len(self._orderings[0])
            if len(uop.src) < n or (not self.allow_any_len and len(uop.src) != n):
                return []
            orderings = self._orderings
        res: list[Bindings] = []
        # with one ordering `store` is ours to extend: every caller hands each dict to a single match
        single = len(orderings) == 1
        for ordering in orderings:
            stores = [store if single else dict(store)]
            for u, p in zip(uop.src, ordering):
                stores = [b for s in stores for b in p.match(u, s)]
                if not stores:
                    break
            res.extend(stores)
        return res


def _ops_of(p: UPat) -> Iterable[Ops]:
    if p.any_of is not None:
        return set().union(*(_ops_of(a) for a in p.any_of))
    return p.op if p.op is not None else list(Ops)


@dataclass
class _Rule:
    pat: UPat
    fxn: Callable[..., Any]
    has_ctx: bool
    required: frozenset[Ops]
    index: int


@dataclass
class _Stats:
    """Per-rule hit counts of one PatternMatcher (collected when TRACK_MATCH_STATS is set)."""

    hits: list[int] = field(default_factory=list)


_all_stats: dict[int, tuple[PatternMatcher, _Stats]] = {}


class PatternMatcher:
    """An ordered table of (UPat, fn) rules, indexed by op. Earlier rules win; `pm1 + pm2` concatenates."""

    def __init__(self, patterns: Sequence[RewriteRule]) -> None:
        self.patterns = list(patterns)
        self.pdict: dict[Ops, list[_Rule]] = defaultdict(list)
        for i, (pat, fxn) in enumerate(self.patterns):
            params = inspect.signature(fxn).parameters
            required = pat._required_ops if pat.any_of is None else frozenset()
            rule = _Rule(pat, fxn, "ctx" in params, required, i)
            for op in _ops_of(pat):
                self.pdict[op].append(rule)
        self.stats = _Stats([0] * len(self.patterns))
        _all_stats[id(self)] = (self, self.stats)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, uop: UOp, ctx: Any = None) -> Any:
        """The first rule's result that is neither None nor `uop` itself, else None."""
        src_ops = {s.op for s in uop.src}
        for rule in self.pdict.get(uop.op, ()):
            if not rule.required <= src_ops:
                continue
            for bindings in rule.pat.match(uop, {}):
                ret = rule.fxn(ctx=ctx, **bindings) if rule.has_ctx else rule.fxn(**bindings)
                if ret is None:
                    continue
                if ret is uop:
                    break  # this rule decided "no rewrite": try the next rule
                if TRACK_MATCH_STATS:
                    self.stats.hits[rule.index] += 1
                return ret
        return None


def match_stats() -> list[tuple[PatternMatcher, list[int]]]:
    """Every live PatternMatcher with its per-rule hit counts (counted only under TRACK_MATCH_STATS)."""
    return [(pm, st.hits) for pm, st in _all_stats.values()]


_Entry = tuple["UOp", int, "UOp"]  # (node, stage, work node) on the fixpoint engine's stack


class _RewriteContext:
    def __init__(self, pm: PatternMatcher | None, bpm: PatternMatcher | None, ctx: Any,
                 enter_calls: bool) -> None:
        self.pm, self.bpm, self.ctx, self.enter_calls = pm, bpm, ctx, enter_calls
        self.replace: dict[UOp, UOp] = {}
        self.bpm_cache: dict[UOp, UOp | None] = {}

    def cached_bpm(self, x: UOp) -> UOp | None:
        if x in self.bpm_cache:
            return self.bpm_cache[x]
        assert self.bpm is not None
        ret: UOp | None = self.bpm.rewrite(x, self.ctx)
        self.bpm_cache[x] = ret
        return ret

    def pin_body(self, x: UOp) -> UOp | None:
        """Keep the body of a CALL/FUNCTION as it is (unless enter_calls); returns the pinned body, if any."""
        if not self.enter_calls and x.op in GroupOp.Call:
            self.replace[x.src[0]] = x.src[0]
            return x.src[0]
        return None

    def fixpoint(self, root: UOp) -> UOp:
        """Rewrite to a fixpoint: BPM pre-order, PM post-order, replacements rewritten again."""
        self.stack: list[_Entry] = [(root, 0, root)]
        self.on_stack = {root}
        self.waitlist: dict[UOp, list[_Entry]] = defaultdict(list)
        stages = (self._descend, self._rebuild, self._link)
        while self.stack:
            if len(self.stack) > STACK_LIMIT:
                raise RewriteError(f"graph_rewrite stack is over {STACK_LIMIT} entries: a rule loops")
            n, stage, new_n = self.stack.pop()
            if n not in self.replace:
                stages[stage](n, new_n)
        return self.replace[root]

    def _finish(self, n: UOp, result: UOp) -> None:
        self.replace[n] = result
        self.stack.extend(self.waitlist.pop(n, ()))

    def _descend(self, n: UOp, new_n: UOp) -> None:
        """Stage 0: the bottom-up fixpoint on the node, then its sources are pushed (first source on top)."""
        if self.bpm is not None:
            seen: set[UOp] = set()
            try:
                while (test_n := self.cached_bpm(new_n)) is not None:
                    if test_n in seen:
                        raise RewriteError(f"infinite loop in a bottom-up fixpoint at {test_n.op}")
                    seen.add(new_n)
                    new_n = test_n
            except BottomUpGate:
                self._finish(n, new_n)
                return
        self.stack.append((n, 1, new_n))
        if (body := self.pin_body(new_n)) is not None:
            self._finish(body, body)  # resume entries already waiting on the body; they'd be lost (KeyError)
        for x in reversed(new_n.src):
            if x not in self.on_stack:
                self.stack.append((x, 0, x))
                self.on_stack.add(x)

    def _rebuild(self, n: UOp, new_n: UOp) -> None:
        """Stage 1: once every source has a result, rebuild the node or apply the top-down matcher."""
        new_src = []
        for x in new_n.src:
            if (rx := self.replace.get(x)) is None:
                self.waitlist[x].append((n, 1, new_n))
                return
            new_src.append(rx)
        src = tuple(new_src)
        if src == new_n.src:  # element-wise identity: UOps compare by identity
            if self.pm is None or (cand := self.pm.rewrite(new_n, self.ctx)) is None:
                self._finish(n, new_n)
                return
        else:
            cand = new_n.replace(src=src)
        self.stack.append((n, 2, cand))
        self.stack.append((cand, 0, cand))  # the candidate is rewritten from scratch

    def _link(self, n: UOp, cand: UOp) -> None:
        """Stage 2: the node's result is its candidate's result."""
        if (linked := self.replace.get(cand)) is None:
            self.waitlist[cand].append((n, 2, cand))
        else:
            self._finish(n, linked)

    def walk(self, root: UOp) -> UOp:
        """One pass, no fixpoint: BPM results are final and not entered; PM applies once per rebuilt node."""
        stack: list[tuple[UOp, bool]] = [(root, False)]
        replace = self.replace
        while stack:
            n, processed = stack.pop()
            if n in replace:
                continue
            if not processed:
                if self.bpm is not None and (r := self.cached_bpm(n)) is not None:
                    replace[n] = r
                    continue
                stack.append((n, True))
                self.pin_body(n)
                stack.extend((x, False) for x in reversed(n.src) if x not in replace)
            else:
                src = tuple(replace.get(x, x) for x in n.src)
                new_n = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
                if self.pm is not None and (r := self.pm.rewrite(new_n, self.ctx)) is not None:
                    new_n = r
                replace[n] = new_n
        return replace.get(root, root)


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False,
                  name: str | None = None,
                  bpm: PatternMatcher | None = None, walk: bool = False, enter_calls: bool = False) -> UOp:
    """Rewrite the graph under `sink` with `pm`: top-down (post-order) by default, bottom-up (pre-order) with
    `bottom_up=True`, both directions when `bpm` is given; to a fixpoint, or in one pass with `walk=True`.
    Bodies of CALL/FUNCTION nodes are left alone unless `enter_calls`. `name` labels the pass: the engine's
    errors name it, and DEBUG>=5 prints it with the graph's size before and after."""
    rc = _RewriteContext(None if bottom_up else pm, pm if bottom_up else bpm, ctx, enter_calls)
    try:
        ret = rc.walk(sink) if walk else rc.fixpoint(sink)
    except RewriteError as e:
        if name is None:
            raise
        raise RewriteError(f"in the rewrite '{name}': {e}") from e
    if DEBUG >= 5:
        print(f"graph_rewrite {name or '<unnamed>'}: {len(sink.toposort())} -> {len(ret.toposort())} nodes")
    return ret
