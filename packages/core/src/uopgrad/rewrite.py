"""The rewrite engine (layer 5): `UPat` patterns, `PatternMatcher` rule tables and `graph_rewrite`.

The engine is written against the five UOp fields and `replace` only, so it sits below `uop.py`; this lets
`UOp.substitute` use it without an upward import. Both engines are iterative: no recursion over the graph.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import keyword
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
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
                 "_required_ops", "_alts", "_det", "_bare", "_made")

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
        self._made: dict[bool, _Maker] = {}  # by has_ctx: what builds this pattern's rule function for a fxn

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

    def cast(self, dtype: DType | tuple[DType, ...] | None = None, name: str | None = None) -> UPat:
        """A CAST (to `dtype`, one of them, or any) of this pattern."""
        return UPat(Ops.CAST, dtype, (self,), name=name)

    def bitcast(self, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        """A BITCAST (to `dtype`, or any) of this pattern."""
        return UPat(Ops.BITCAST, dtype, (self,))

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
class _Stats:
    """Per-rule hit counts of one PatternMatcher (collected when TRACK_MATCH_STATS is set)."""

    hits: list[int] = field(default_factory=list)


_all_stats: dict[int, tuple[PatternMatcher, _Stats]] = {}
# a rule as one function (uop, ctx): None when no way fits (or every fitting way's result is None), else the
# first fitting way's result, `uop` itself included (the matcher then tries the next rule)
RuleFn = Callable[["UOp", Any], Any]
_Maker = Callable[[Callable[..., Any]], RuleFn]


class PatternMatcher:
    """An ordered table of (UPat, fn) rules, indexed by op. Earlier rules win; `pm1 + pm2` concatenates."""

    def __init__(self, patterns: Sequence[RewriteRule]) -> None:
        self.patterns = list(patterns)
        rules: dict[Ops, list[tuple[RuleFn, int]]] = defaultdict(list)
        # op -> its rules, (pattern, fxn) in order: what the table holds for each op (tinygrad's name)
        self.pdict: dict[Ops, list[RewriteRule]] = defaultdict(list)
        for i, (pat, fxn) in enumerate(self.patterns):
            rule = _rule_fn(pat, fxn, "ctx" in inspect.signature(fxn).parameters)
            for op in _ops_of(pat):
                rules[op].append((rule, i))
                self.pdict[op].append((pat, fxn))
        self.stats = _Stats([0] * len(self.patterns))
        # per op value (a list index: an Ops hash is a Python call), the op's rules folded into one function
        self._by_value: list[RuleFn | None] = list(_NO_RULES)
        for op, op_rules in rules.items():
            self._by_value[op.value] = _op_fn(tuple(op_rules), self.stats.hits)
        _all_stats[id(self)] = (self, self.stats)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, uop: UOp, ctx: Any = None) -> Any:
        """The first rule's result that is neither None nor `uop` itself, else None."""
        fn = self._by_value[uop.op._value_]
        return None if fn is None else fn(uop, ctx)


def _op_fn(rules: tuple[tuple[RuleFn, int], ...], hits: list[int]) -> RuleFn:
    """One op's rules in order: the first result that is neither None nor the node itself. Generated and
    unrolled (no loop, no tuple unpacking per rule); the code depends only on the number of rules."""
    if (make := _op_makers.get(len(rules))) is None:
        lines = [f"def make(hits, track, {', '.join(f'r{i}, i{i}' for i in range(len(rules)))}):",
                 "    def op_rules(uop, ctx):"]
        for i in range(len(rules)):
            lines += [f"        if (ret := r{i}(uop, ctx)) is not None and ret is not uop:",
                      "            if track():", f"                hits[i{i}] += 1", "            return ret"]
        lines += ["        return None", "    return op_rules"]
        namespace: dict[str, Any] = {}
        exec(compile("\n".join(lines), f"<{len(rules)} rules>", "exec"), namespace)
        make = _op_makers[len(rules)] = namespace["make"]
    return cast(RuleFn, make(hits, _track_stats, *itertools.chain.from_iterable(rules)))


_op_makers: dict[int, Callable[..., RuleFn]] = {}


def _rule_fn(pat: UPat, fxn: Callable[..., Any], has_ctx: bool) -> RuleFn:
    """The rule as a function; its code is made once per pattern (and has_ctx), then bound to `fxn`."""
    if (make := pat._made.get(has_ctx)) is None:
        make = pat._made[has_ctx] = _generated(pat, has_ctx) or _generic(pat, has_ctx)
    return make(fxn)


def _generic(pat: UPat, has_ctx: bool) -> _Maker:
    """The rule through the pattern's matcher closures (or `match`): a binding dict per way."""
    # the early reject: a source op the pattern demands (a repeated source pattern fits no sources, but its
    # op is demanded all the same)
    required = pat._required_ops if pat.any_of is None else frozenset()
    alts = pat._alts

    def make(fxn: Callable[..., Any]) -> RuleFn:
        def rule(uop: UOp, ctx: Any) -> Any:
            if required and not required <= set(map(_op_of, uop.src)):
                return None
            if alts is None:
                return _first_result(pat, fxn, has_ctx, uop, ctx)
            for det in alts:
                st: Bindings = {}
                if det(uop, st) and (ret := fxn(ctx=ctx, **st) if has_ctx else fxn(**st)) is not None:
                    return ret
            return None
        return rule
    return make


def _first_result(pat: UPat, fxn: Callable[..., Any], has_ctx: bool, uop: UOp, ctx: Any) -> Any:
    """An uncompiled rule on `uop`: the first binding's result that is not None (`uop` itself ends it)."""
    for bindings in pat.match(uop, {}):
        ret = fxn(ctx=ctx, **bindings) if has_ctx else fxn(**bindings)
        if ret is not None:
            return ret
    return None


class _Code:
    """The constants and fresh local names of one generated rule."""

    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}
        self.n = 0

    def const(self, v: Any) -> str:
        name = f"_k{len(self.consts)}"
        self.consts[name] = v
        return name

    def local(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


_Way = tuple[list[str], dict[str, str]]  # a way's conditions, and the names it binds (name -> expression)


def _generated(pat: UPat, has_ctx: bool) -> _Maker | None:
    """The rule as generated Python (as tinygrad does): per way one `if` of inline tests, then the call of
    fxn with its names as keywords; no dicts, no closures per source. None where the pattern needs a loop
    (a repeated source pattern), a name is no identifier, or `_compile` would not compile it either."""
    code = _Code()
    ways = None if pat._alts is None else _ways(pat, "uop", code, {}, top=True)
    if ways is None or pat._alts is None or len(ways) != len(pat._alts):
        return None
    if any(not n.isidentifier() or keyword.iskeyword(n) for _, b in ways for n in b):
        return None
    lines = ["def make(f):", "    def rule(uop, ctx):"]
    for conds, bound in ways:
        args = ", ".join((["ctx=ctx"] if has_ctx else []) + [f"{n}={e}" for n, e in bound.items()])
        lines += [f"        if {' and '.join(conds) or 'True'}:", f"            ret = f({args})",
                  "            if ret is not None:", "                return ret"]
    lines += ["        return None", "    return rule"]
    namespace: dict[str, Any] = dict(code.consts)
    exec(compile("\n".join(lines), f"<rule {pat!r:.200}>", "exec"), namespace)
    return cast(_Maker, namespace["make"])


def _bind(name: str, e: str, bound: dict[str, str]) -> list[str]:
    """Bind `name` to the node `e`: the first binding takes it, a later one must be the same node."""
    if name in bound:
        return [f"{e} is {bound[name]}"]
    bound[name] = e
    return []


def _ways(p: UPat, e: str, code: _Code, bound: dict[str, str], top: bool = False) -> list[_Way] | None:
    """Per way `p` can fit the node `e`, in `match`'s order: its tests, in `_node`'s order, and the names
    bound. None for a repeated source pattern, or a source pattern with other than one way. The `top`
    node's op is not tested: the matcher asks the rule only for the ops of its pattern."""
    if p.any_of is not None:
        out: list[_Way] = []
        for a in p.any_of:
            if (sub := _ways(a, e, code, bound)) is None:
                return None
            out += [(c + _bind(p.name, e, b) if p.name is not None else c, b) for c, b in sub]
        return out
    conds: list[str] = []
    bound = dict(bound)
    if p.op is not None and not top:
        conds.append(_op_test(p.op, e, code))
    if p.name is not None:
        conds += _bind(p.name, e, bound)
    if p.dtype is not None:
        d, k = code.local("d"), code.const(p.dtype)
        conds.append(f"(({d} := {e}.dtype) in {k} or {d}.scalar() in {k})")
    if p.arg is not None:
        conds.append(f"{code.const(p.arg)} == {e}.arg")
    if p._orderings is None:
        return [(conds, bound)]
    if isinstance(p._orderings, UPat):
        return None
    out = []
    for ordering in p._orderings:
        if (way := _ordered_way(p, ordering, e, code, conds, bound)) is None:
            return None
        out.append(way)
    return out


def _ordered_way(p: UPat, ordering: Sequence[UPat], e: str, code: _Code, conds: list[str],
                 bound: dict[str, str]) -> _Way | None:
    """The way `p` fits `e` with its sources in `ordering`: after `conds`, the length, then each source."""
    s, n = code.local("s"), len(ordering)
    wc, wb = conds + [f"len({s} := {e}.src) {'>=' if p.allow_any_len else '=='} {n}"], bound
    # the plain variables (they only bind) go last, as in `_node`
    for i in sorted(range(n), key=lambda i: ordering[i]._bare):
        if (sub := _ways(ordering[i], f"{s}[{i}]", code, wb)) is None or len(sub) != 1:
            return None
        wc, wb = wc + sub[0][0], sub[0][1]
    return wc, wb


def _op_test(ops: frozenset[Ops], e: str, code: _Code) -> str:
    """`e.op in ops`, as identity tests for a few ops (an Ops hash is a Python call)."""
    if len(ops) > 3:
        return f"{e}.op in {code.const(ops)}"
    ks = [code.const(op) for op in sorted(ops, key=lambda op: -op.value)]
    if len(ks) == 1:
        return f"{e}.op is {ks[0]}"
    o = code.local("o")
    return "(" + " or ".join([f"({o} := {e}.op) is {ks[0]}"] + [f"{o} is {k}" for k in ks[1:]]) + ")"


_track_stats = TRACK_MATCH_STATS.get
_op_of = operator.attrgetter("op")


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
        node to its candidate's result. A rebuilt node's sources are results, which map to themselves, so
        its stages 0 and 1 are run on the spot without a walk of the sources (until a gate keeps a node
        whose sources were not rewritten). One loop with the stages inlined: this is the engine's hot path."""
        replace, bcache, ctx, enter_calls = self.replace, self.bpm_cache, self.ctx, self.enter_calls
        # per op value, each matcher's rules for the op (None: a node of the op is not rewritten, not asked)
        pm_fns = _NO_RULES if self.pm is None else self.pm._by_value
        bpm_fns = None if self.bpm is None else self.bpm._by_value
        stack: list[_Entry] = [(root, 0, root)]
        on_stack = {root}
        waitlist: dict[UOp, list[_Entry]] = {}
        push, pop, is_call, rget = stack.append, stack.pop, _IS_CALL, replace.get
        closed = True  # every result is also a key, mapped to itself (until a gate keeps a rewritten node)
        # the stack grows without bound only through candidates: its limit is checked where one is pushed
        while stack:
            n, stage, new_n = pop()
            # an entry that would be pushed and popped at once is handled here: the inner loop falls through
            while n not in replace:
                if stage == 0:
                    if bpm_fns is not None:
                        seen: set[UOp] | None = None
                        try:
                            while True:
                                if (bfn := bpm_fns[new_n.op._value_]) is None:
                                    break
                                if (test_n := bcache.get(new_n, _MISSING)) is _MISSING:
                                    test_n = bcache[new_n] = bfn(new_n, ctx)
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
                            closed = closed and new_n is n  # new_n's sources are not rewritten
                            if n in waitlist:
                                stack.extend(waitlist.pop(n))
                            break
                    # a call: pin its body, and resume what already waits on it
                    if not enter_calls and is_call[new_n.op._value_]:
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
                    # a source with a result needs no visit; the first one to visit is visited at once
                    # (it would be pushed last and popped next), the others pushed after the node
                    first: UOp | None = None
                    for x in reversed(new_n.src):
                        if x not in replace and x not in on_stack:
                            push((n, 1, new_n) if first is None else (first, 0, first))
                            first = x
                            on_stack.add(x)
                    if first is not None:
                        n, new_n = first, first
                        continue
                    stage = 1
                if stage == 1:
                    src = new_n.src
                    new_src = tuple(map(rget, src))  # results are UOps: None marks a source without one
                    if None in new_src:  # wait for the first source without a result
                        missing = src[new_src.index(None)]
                        waitlist.setdefault(missing, []).append((n, 1, new_n))
                        break
                    if new_src != src:  # element-wise identity: UOps compare by identity
                        cand = new_n.__class__(new_n.op, new_n.dtype, new_src,  # type: ignore[arg-type]
                                               new_n.arg, new_n.tag)
                        if closed and cand not in replace and not is_call[cv := cand.op._value_]:
                            # every result is a key that maps to itself (kept so where results are
                            # stored), so the candidate's sources need no visit: rewriting it from scratch
                            # comes down to bpm on it, then pm on it
                            gated, ret = False, None
                            if bpm_fns is not None and (bfn := bpm_fns[cv]) is not None and \
                                    (ret := bcache.get(cand, _MISSING)) is _MISSING:
                                try:
                                    ret = bcache[cand] = bfn(cand, ctx)
                                except BottomUpGate:
                                    ret, gated = None, True
                            if ret is None:  # (a bpm rewrite is taken on by stage 0 below, its answer cached)
                                linked: UOp | None = cand  # pm's answer if it has a result, else cand
                                if not gated and (fn := pm_fns[cv]) is not None and \
                                        (ret := fn(cand, ctx)) is not None and (linked := rget(ret)) is None:
                                    push((n, 2, cand))  # pm's answer is new: on with it as the candidate
                                    n, new_n, cand = cand, cand, ret
                                if linked is not None:
                                    replace[cand] = replace[n] = linked
                                    if cand in waitlist:
                                        stack.extend(waitlist.pop(cand))
                                    if n in waitlist:
                                        stack.extend(waitlist.pop(n))
                                    break
                    elif (fn := pm_fns[new_n.op._value_]) is None or (cand := fn(new_n, ctx)) is None:
                        replace[n] = new_n
                        if n in waitlist:
                            stack.extend(waitlist.pop(n))
                        if new_n is not n:  # bpm's answer, a fixed point: it is its own result
                            replace[new_n] = new_n
                            if new_n in waitlist:
                                stack.extend(waitlist.pop(new_n))
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
_NO_RULES: list[RuleFn | None] = [None] * (max(o.value for o in Ops) + 1)
_IS_CALL = tuple(any(o.value == i for o in GroupOp.Call) for i in range(len(_NO_RULES)))  # by op value


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
