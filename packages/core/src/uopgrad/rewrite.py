"""The rewrite engine (layer 5): `UPat` patterns, `PatternMatcher` rule tables and `graph_rewrite`.

The engine is written against the five UOp fields and `replace` only, so it sits below `uop.py`; this lets
`UOp.substitute` use it without an upward import. Both engines are iterative: no recursion over the graph.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import operator
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

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
                 "_required_ops", "_alts", "_det", "_bare")

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
        # a plain variable: fits any node (it only binds its name)
        self._bare = self.op is None and self.dtype is None and arg is None and src is None and any_of is None
        self._alts = _compile(self)
        self._det = self._alts[0] if self._alts is not None and len(self._alts) == 1 else None

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
        if self._alts is not None:  # compiled: one matcher per way, each on its own copy of `store`
            return [st for d in self._alts if d(uop, st := dict(store))]
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


Det = Callable[["UOp", Bindings], bool]


def _compile(p: UPat) -> tuple[Det, ...] | None:
    """The pattern compiled to one matcher per way it can fit a node, in `match`'s order, else None.

    Each matcher checks the node in `match`'s order, binds names into the dict it is handed (which the
    caller drops on False) and says whether the node fits: no lists, no copies. A permutation gives one
    matcher per ordering and `UPat.any` the concatenation of its alternatives'; sources must be patterns
    with exactly one matcher (else None: `match` enumerates them)."""
    if p.any_of is not None:
        if any(a._alts is None for a in p.any_of):
            return None
        alts = tuple(d for a in p.any_of for d in (a._alts or ()))
        if (any_name := p.name) is None:
            return alts
        return tuple(_named(d, any_name) for d in alts)
    ops, dts, arg, name, any_len, o = p.op, p.dtype, p.arg, p.name, p.allow_any_len, p._orderings
    if o is None and ops is None and dts is None and arg is None:  # a bare or named `UPat.var`
        if name is None:
            return (lambda u, st: True,)
        return (lambda u, st: st.setdefault(name, u) is u,)
    if isinstance(o, UPat):
        if o._det is None:
            return None
        return (_node(ops, dts, arg, name, any_len, o._det, None),)
    if o is None:
        return (_node(ops, dts, arg, name, any_len, None, None),)
    if any(c._det is None for ordering in o for c in ordering):
        return None
    return tuple(_node(ops, dts, arg, name, any_len, None,
                       tuple(c._det for c in ordering if c._det is not None),
                       tuple(i for i, c in enumerate(ordering) if c._bare)) for ordering in o)


def _named(d: Det, name: str) -> Det:
    return lambda u, st: d(u, st) and st.setdefault(name, u) is u


def _node(ops: frozenset[Ops] | None, dts: frozenset[DType] | None, arg: Any, name: str | None,
          any_len: bool, rep: Det | None, kids: tuple[Det, ...] | None, bare: tuple[int, ...] = ()) -> Det:
    """The matcher of one node pattern: its own checks, then `rep` on every source or `kids` in order,
    except that the `bare` kids (plain variables: they only bind) go last, so a source that can't fit is
    rejected before anything is bound (all kids must fit, so the order changes no result)."""
    n = -1 if kids is None else len(kids)
    if kids is not None and bare:
        order = [i for i in range(n) if i not in bare] + list(bare)
        kids, pos = tuple(kids[i] for i in order), tuple(order)
    else:
        pos = tuple(range(max(n, 0)))
    p0, p1 = (pos[0], pos[1]) if n == 2 else (0, 1)

    def det(u: UOp, st: Bindings) -> bool:
        if (ops is not None and u.op not in ops) or \
                (name is not None and st.setdefault(name, u) is not u) or \
                (dts is not None and u.dtype not in dts and u.dtype.scalar() not in dts) or \
                (arg is not None and not arg == u.arg):
            return False
        src = u.src
        if rep is not None:
            for s in src:
                if not rep(s, st):
                    return False
            return True
        if kids is None:
            return True
        if len(src) != n and (not any_len or len(src) < n):
            return False
        if n == 2:
            return kids[0](src[p0], st) and kids[1](src[p1], st)
        for k, i in zip(kids, pos):
            if not k(src[i], st):
                return False
        return True
    return det


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
        # per op, the rules as flat tuples, one per compiled matcher (a compiled pattern with several ways
        # to fit gives one entry per way, in order; an uncompiled one a single entry with no matcher): what
        # `rewrite` loops over
        self._fast: dict[Ops, tuple[_Fast, ...]] = {
            op: tuple((d, r.pat, r.fxn, r.has_ctx, r.required, r.index)
                      for r in rules for d in (r.pat._alts if r.pat._alts is not None else (None,)))
            for op, rules in self.pdict.items()}
        self.stats = _Stats([0] * len(self.patterns))
        _all_stats[id(self)] = (self, self.stats)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, uop: UOp, ctx: Any = None) -> Any:
        """The first rule's result that is neither None nor `uop` itself, else None."""
        rules = self._fast.get(uop.op)
        if rules is None:
            return None
        src_ops: set[Ops] | None = None
        skip = -1  # a rule that returned `uop` itself: its remaining ways are not tried
        for det, pat, fxn, has_ctx, required, index in rules:
            if index == skip:
                continue
            if required:  # the early reject: a set test, computed once per node and only when asked
                if src_ops is None:
                    src_ops = set(map(_op_of, uop.src))
                if not required <= src_ops:
                    continue
            if det is not None:  # a compiled matcher: one binding, or no match
                st: Bindings = {}
                if not det(uop, st):
                    continue
                ret = fxn(ctx=ctx, **st) if has_ctx else fxn(**st)
            else:
                ret = _first_result(pat, fxn, has_ctx, uop, ctx)
            if ret is None:
                continue
            if ret is uop:
                skip = index  # this rule decided "no rewrite": try the next rule
                continue
            if _track_stats():
                self.stats.hits[index] += 1
            return ret
        return None


def _first_result(pat: UPat, fxn: Callable[..., Any], has_ctx: bool, uop: UOp, ctx: Any) -> Any:
    """An uncompiled rule on `uop`: the first binding's result that is not None (`uop` itself ends it)."""
    for bindings in pat.match(uop, {}):
        ret = fxn(ctx=ctx, **bindings) if has_ctx else fxn(**bindings)
        if ret is not None:
            return ret
    return None


_track_stats = TRACK_MATCH_STATS.get
_op_of = operator.attrgetter("op")
_Fast = tuple["Det | None", UPat, Callable[..., Any], bool, frozenset[Ops], int]


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

    def fixpoint(self, root: UOp) -> UOp:  # noqa: C901  (the engine's hot loop: its stages inlined)
        """Rewrite to a fixpoint: BPM pre-order, PM post-order, replacements rewritten again.

        Stack entries are (node, stage, work node). Stage 0 runs the bottom-up fixpoint on the node and
        pushes its sources (first source on top); stage 1, once every source has a result, rebuilds the
        node or applies the top-down matcher and rewrites the candidate from scratch; stage 2 links the
        node to its candidate's result. One loop with the stages inlined: this is the engine's hot path."""
        replace, bcache, ctx, enter_calls = self.replace, self.bpm_cache, self.ctx, self.enter_calls
        pm_rewrite = None if self.pm is None else self.pm.rewrite
        bpm_rewrite = None if self.bpm is None else self.bpm.rewrite
        # the ops each matcher has rules for: a node of another op is not rewritten, so it is not asked
        pm_ops: Container[Ops] = () if self.pm is None else self.pm._fast
        bpm_ops: Container[Ops] = () if self.bpm is None else self.bpm._fast
        stack: list[_Entry] = [(root, 0, root)]
        on_stack = {root}
        waitlist: dict[UOp, list[_Entry]] = {}
        push, pop, calls, rget = stack.append, stack.pop, GroupOp.Call, replace.get
        # the stack grows without bound only through candidates: its limit is checked where one is pushed
        while stack:
            n, stage, new_n = pop()
            # an entry that would be pushed and popped at once is handled here: the inner loop falls through
            while n not in replace:
                if stage == 0:
                    if bpm_rewrite is not None:
                        seen: set[UOp] | None = None
                        try:
                            while True:
                                if new_n.op not in bpm_ops:
                                    break
                                if (test_n := bcache.get(new_n, _MISSING)) is _MISSING:
                                    test_n = bcache[new_n] = bpm_rewrite(new_n, ctx)
                                if test_n is None:
                                    break
                                if seen is None:
                                    seen = set()
                                if test_n in seen:
                                    raise RewriteError("infinite loop in a bottom-up fixpoint at "
                                                       f"{test_n.op}")
                                seen.add(new_n)
                                new_n = test_n
                        except BottomUpGate:
                            replace[n] = new_n
                            if n in waitlist:
                                stack.extend(waitlist.pop(n))
                            break
                    if not enter_calls and new_n.op in calls:  # pin the body; resume what already waits on it
                        push((n, 1, new_n))
                        body = new_n.src[0]
                        replace[body] = body
                        if body in waitlist:
                            stack.extend(waitlist.pop(body))
                        for x in reversed(new_n.src):
                            if x not in on_stack:
                                push((x, 0, x))
                                on_stack.add(x)
                        break
                    pushed = False
                    for x in reversed(new_n.src):  # a source with a result needs no visit
                        if x not in replace and x not in on_stack:
                            if not pushed:
                                push((n, 1, new_n))
                                pushed = True
                            push((x, 0, x))
                            on_stack.add(x)
                    if pushed:
                        break
                    stage = 1
                if stage == 1:
                    src = new_n.src
                    new_src = tuple(map(rget, src))  # results are UOps: None marks a source without one
                    if None in new_src:  # wait for the first source without a result
                        missing = src[new_src.index(None)]
                        waitlist.setdefault(missing, []).append((n, 1, new_n))
                        break
                    if new_src != src:  # element-wise identity: UOps compare by identity
                        cand = new_n.__class__(new_n.op, new_n.dtype, cast("tuple[UOp, ...]", new_src),
                                               new_n.arg, new_n.tag)
                    elif new_n.op not in pm_ops or (cand := cast(Any, pm_rewrite)(new_n, ctx)) is None:
                        replace[n] = new_n
                        if n in waitlist:
                            stack.extend(waitlist.pop(n))
                        break
                    if (linked := replace.get(cand)) is not None:  # a known candidate: link it at once
                        replace[n] = linked
                        if n in waitlist:
                            stack.extend(waitlist.pop(n))
                        break
                    push((n, 2, cand))
                    if len(stack) > STACK_LIMIT:  # rules that bounce grow the stack here
                        raise RewriteError(f"graph_rewrite stack is over {STACK_LIMIT} entries: a rule loops")
                    n, stage, new_n = cand, 0, cand  # the candidate is rewritten from scratch
                    continue
                if (linked := replace.get(new_n)) is None:
                    waitlist.setdefault(new_n, []).append((n, 2, new_n))
                else:
                    replace[n] = linked
                    if n in waitlist:
                        stack.extend(waitlist.pop(n))
                break
        return replace[root]

    def walk(self, root: UOp) -> UOp:
        """One pass, no fixpoint: BPM results are final and not entered; PM applies once per rebuilt node."""
        stack: list[tuple[UOp, bool]] = [(root, False)]
        replace = self.replace
        pm_rewrite = None if self.pm is None else self.pm.rewrite
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
                stack.extend([(x, False) for x in reversed(n.src) if x not in replace])
            else:
                src = tuple([replace.get(x, x) for x in n.src])
                new_n = n if src == n.src else _rebuilt(n, src)  # tuple == on UOps: element-wise identity
                if pm_rewrite is not None and (r := pm_rewrite(new_n, self.ctx)) is not None:
                    new_n = r
                replace[n] = new_n
        return replace.get(root, root)


_MISSING: Any = object()


def _rebuilt(n: UOp, src: tuple[UOp, ...]) -> UOp:
    """`n.replace(src=src)` for a `src` known to differ from n's, without replace's checks."""
    return type(n)(n.op, n.dtype, src, n.arg, n.tag)


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
