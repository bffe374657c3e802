"""The rewrite engine (layer 5): `UPat` patterns, `PatternMatcher` rule tables and `graph_rewrite`.

The engine is written against the five UOp fields and `replace` only, so it sits below `uop.py`; this lets
`UOp.substitute` use it without an upward import. It reads in three parts (spec/rewrite.md is their spec):

- `UPat.match` is the model of matching: a plain interpreter, used by no rule table. The spec tests hold
  the production matcher to it (spec/test_pattern_matcher.py, by hypothesis over random patterns).
- The production matcher writes each pattern once as Python source (`_source`): per way the pattern can fit
  a node a test of inline conditions, then the call of the rule's function. A table compiles the rules of
  one op into one function (`_op_fn`), on the first node of that op.
- `graph_rewrite` runs a table over a graph: the fixpoint engine or the one-pass walk, both iterative.

The tricks that only buy speed sit in sections marked HOT PATH, each naming the benchmark that guards it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import inspect
import itertools
import keyword
import marshal
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any, cast

from uopgrad import diskcache
from uopgrad.config import DEBUG, TRACK_MATCH_STATS
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import RewriteError, UopgradError
from uopgrad.mixin import MathMixin
from uopgrad.ops import GroupOp, Ops

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = [
    "CODE_CACHE",
    "BottomUpGate",
    "PatternMatcher",
    "RewriteRule",
    "UPat",
    "graph_rewrite",
    "match_stats",
    "store_codes",
]

RewriteRule = tuple["UPat", Callable[..., Any]]
Bindings = dict[str, "UOp"]
STACK_LIMIT = 250_000


class BottomUpGate(Exception):
    """Raised by a bottom-up rule to keep the node as it is and not visit its sources."""


class UPat(MathMixin):
    """A pattern over UOps. `src` is a tuple (positional), a list (any permutation), one UPat (every source)
    or None (sources not inspected). A `name` binds the matched UOp; a repeated name demands the same node."""

    __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "any_of", "_orderings", "_made")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | Sequence[UPat] | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
        any_of: tuple[UPat, ...] | None = None,
    ) -> None:
        if name == "ctx":
            raise ValueError("'ctx' is reserved for the rewrite context and can't name a pattern")
        self.op: frozenset[Ops] | None = (
            frozenset((op,)) if isinstance(op, Ops) else (frozenset(op) if op is not None else None)
        )
        self.dtype: frozenset[DType] | None = (
            frozenset((dtype,))
            if isinstance(dtype, DType)
            else (frozenset(dtype) if dtype is not None else None)
        )
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
        self._made: _Source | None = None  # the pattern's compiled tests (`_source`), made on first use

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
        return UPat.any(
            self if name is None else self.named(name),
            UPat(Ops.AFTER, name=name, src=(self,), allow_any_len=True),
        )

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

    # ------------------------------------------------------------------ the model of matching
    def match(self, uop: UOp, store: Bindings) -> list[Bindings]:
        """Every way this pattern matches `uop`, each as a binding dict extending `store` (a copy of it).

        The interpreter that defines matching; rule tables run the compiled form (`_source`, `_op_fn`),
        which the spec tests compare with this one."""
        if self.any_of is not None:
            out = [b for p in self.any_of for b in p.match(uop, dict(store))]
            return out if self.name is None else [b for b in out if b.setdefault(self.name, uop) is uop]
        store = dict(store)
        if (
            (self.op is not None and uop.op not in self.op)
            or (self.name is not None and store.setdefault(self.name, uop) is not uop)
            or (
                self.dtype is not None
                and uop.dtype not in self.dtype
                and uop.dtype.scalar() not in self.dtype
            )
            or (self.arg is not None and not self.arg == uop.arg)
        ):
            return []
        if self._orderings is None:
            return [store]
        if isinstance(self._orderings, UPat):
            orderings: list[Sequence[UPat]] = [[self._orderings] * len(uop.src)]
        else:
            n = len(self._orderings[0])
            if len(uop.src) < n or (not self.allow_any_len and len(uop.src) != n):
                return []
            orderings = self._orderings
        res: list[Bindings] = []
        for ordering in orderings:
            stores = [store]
            for u, p in zip(uop.src, ordering):
                stores = [b for s in stores for b in p.match(u, s)]
            res.extend(stores)
        return res


def _ops_of(p: UPat) -> Iterable[Ops]:
    if p.any_of is not None:
        return set().union(*(_ops_of(a) for a in p.any_of))
    return p.op if p.op is not None else list(Ops)


@dataclass
class _Stats:
    """Per-rule hit counts of one PatternMatcher (collected when TRACK_MATCH_STATS is set)."""

    hits: list[int] = field(default_factory=list)


_all_stats: dict[int, tuple[PatternMatcher, _Stats]] = {}
# one op's rules as one function (uop, ctx): the first result of a rule that is neither None nor `uop`
RuleFn = Callable[["UOp", Any], Any]


class PatternMatcher:
    """An ordered table of (UPat, fn) rules, indexed by op. Earlier rules win; `pm1 + pm2` concatenates."""

    def __init__(self, patterns: Sequence[RewriteRule]) -> None:
        self.patterns = list(patterns)
        rules: dict[Ops, list[_Rule]] = defaultdict(list)
        # op -> its rules, (pattern, fxn) in order: what the table holds for each op (tinygrad's name)
        self.pdict: dict[Ops, list[RewriteRule]] = defaultdict(list)
        for i, (pat, fxn) in enumerate(self.patterns):
            _source(pat)  # made now: a pattern the compiled matcher refuses fails here, not at its first use
            rule = (pat, fxn, "ctx" in inspect.signature(fxn).parameters, i)
            for op in _ops_of(pat):
                rules[op].append(rule)
                self.pdict[op].append((pat, fxn))
        self.stats = _Stats([0] * len(self.patterns))
        # HOT PATH (bench/rewrite.py, every task): per op value the op's rules compiled into one function
        # (on the first node of the op: most tables meet few of their ops), in a list (an Ops hash is a
        # Python call, so a dict by op would cost one per node)
        self._by_value: list[RuleFn | None] = list(_NO_RULES)
        for op, op_rules in rules.items():
            self._by_value[op.value] = _lazy_op_fn(self._by_value, op.value, op_rules, self.stats.hits)
        _all_stats[id(self)] = (self, self.stats)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def rewrite(self, uop: UOp, ctx: Any = None) -> Any:
        """The first rule's result that is neither None nor `uop` itself, else None."""
        fn = self._by_value[uop.op._value_]
        return None if fn is None else fn(uop, ctx)


# ------------------------------------------------------------------------------------------- compiled rules


_Source = tuple[list[tuple[str, list[str]]], dict[str, Any]]  # per way (test, bound args); constants
_Rule = tuple[UPat, Callable[..., Any], bool, int]  # a table's row: pattern, fxn, has_ctx, row index
_const_names = itertools.count()  # constants are named uniquely across patterns: one op's code holds many


class _Code:
    """The constants and fresh local names of one compiled pattern."""

    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}
        self.n = 0

    def const(self, v: Any) -> str:
        name = f"_k{next(_const_names)}"
        self.consts[name] = v
        return name

    def local(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


_Way = tuple[list[str], dict[str, str]]  # a way's tests, and the names it binds (name -> expression)


def _source(pat: UPat) -> _Source:
    """The pattern as Python source, made once per pattern: per way it can fit (in `match`'s order) one
    test of inline conditions and the keyword arguments that pass the bound names to fxn. Each way's test
    binds the locals it reads, so the ways of several patterns can share one function (`_op_fn`)."""
    if pat._made is None:
        code, ways = _Code(), []
        for conds, bound in _ways(pat, "uop", code, {}, top=True):
            args = [
                f"{n}={e}" if n.isidentifier() and not keyword.iskeyword(n) else f"**{{{n!r}: {e}}}"
                for n, e in bound.items()
            ]
            ways.append((" and ".join(conds) or "True", args))
        pat._made = (ways, code.consts)
    return pat._made


def _bind(name: str, e: str, conds: list[str], bound: dict[str, str]) -> _Way:
    """Bind `name` to the node `e`: the first binding takes it, a later one must be the same node."""
    if name in bound:
        return conds + [f"{e} is {bound[name]}"], bound
    return conds, {**bound, name: e}


def _ways(p: UPat, e: str, code: _Code, bound: dict[str, str], top: bool = False) -> list[_Way]:
    """Per way `p` can fit the node `e`, in `match`'s order: its tests and the names bound. The `top` node's
    op is not tested: the matcher asks the rule only for the ops of its pattern."""
    if p.any_of is not None:
        out: list[_Way] = []
        for a in p.any_of:
            for c, b in _ways(a, e, code, bound):
                out.append((c, b) if p.name is None else _bind(p.name, e, c, b))
        return out
    conds: list[str] = []
    if p.op is not None and not top:
        conds.append(_op_test(p.op, e, code))
    if p.name is not None:
        conds, bound = _bind(p.name, e, conds, bound)
    if p.dtype is not None:
        d, k = code.local("d"), code.const(p.dtype)
        conds.append(f"(({d} := {e}.dtype) in {k} or {d}.scalar() in {k})")
    if p.arg is not None:
        conds.append(f"{code.const(p.arg)} == {e}.arg")
    if p._orderings is None:
        return [(conds, bound)]
    if isinstance(p._orderings, UPat):
        return [(conds + [_every_source(p._orderings, e, code, bound, top)], bound)]
    s, length = _sources(e, len(p._orderings[0]), p.allow_any_len, code)
    out = []
    for ordering in p._orderings:
        ways = [(conds + [length], bound)]
        for i, sp in enumerate(ordering):  # the product of the sources' ways, the first source's slowest
            ways = [(c + c2, b2) for c, b in ways for c2, b2 in _ways(sp, f"{s}[{i}]", code, b)]
        out += ways
    return out


def _every_source(rep: UPat, e: str, code: _Code, bound: dict[str, str], top: bool) -> str:
    """The test that every source of `e` fits `rep`. `rep` must fit in one way and bind no new name (the
    way count would depend on the number of sources). On the `top` node, a `rep` of exactly one op also
    demands one source at least (the reference's early reject: that op must occur among the sources)."""
    x = code.local("x")
    ways = _ways(rep, x, code, bound)
    if len(ways) != 1 or ways[0][1] != bound:
        raise ValueError(f"a repeated source pattern must fit in one way and bind no name: {rep!r}")
    test = f"all({' and '.join(ways[0][0]) or 'True'} for {x} in {e}.src)"
    return f"({e}.src and {test})" if top and rep.op is not None and len(rep.op) == 1 else test


# ---------------------------------------------------------------------------------------------- HOT PATH
# Tricks of the compiled matcher, for speed only. Guarded by bench/rewrite.py's sym workload ("match each
# node"): `_op_test` was worth 5-8% there, one function per op (`_op_fn`) with the sources read once
# (`_sources`) 15-20%. The model is `UPat.match` and `_ways`.


def _sources(e: str, n: int, any_len: bool, code: _Code) -> tuple[str, str]:
    """The local that holds the sources of the node `e`, and the test that there are `n` (at least `n`).
    The matched node's sources and their count are read once per call, into `src` and `nsrc` (see
    `_op_fn`), for every way of every rule of the op; an inner node's in the way's own test."""
    cmp = ">=" if any_len else "=="
    if e == "uop":
        return "src", f"nsrc {cmp} {n}"
    s = code.local("s")
    return s, f"len({s} := {e}.src) {cmp} {n}"


def _op_test(ops: frozenset[Ops], e: str, code: _Code) -> str:
    """`e.op in ops`, as identity tests for a few ops: an Ops hash is a Python call, so a set test of a
    few ops costs more than comparing them one by one."""
    if len(ops) > 3:
        return f"{e}.op in {code.const(ops)}"
    ks = [code.const(op) for op in sorted(ops, key=lambda op: -op.value)]
    if len(ks) == 1:
        return f"{e}.op is {ks[0]}"
    o = code.local("o")
    return "(" + " or ".join([f"({o} := {e}.op) is {ks[0]}"] + [f"{o} is {k}" for k in ks[1:]]) + ")"


def _op_fn(rules: Sequence[_Rule], hits: list[int]) -> RuleFn:
    """One op's rules in order, compiled into one function: the first result that is neither None nor the
    node itself. Per rule, its ways joined by `or` (the first way whose fxn answers ends the rule); a call
    per rule would cost a Python frame per rule tried, and a big table tries dozens on a node."""
    body, namespace, reads_src = [], {}, False
    for i, (pat, _, has_ctx, index) in enumerate(rules):
        ways, consts = _source(pat)
        namespace.update(consts)
        calls = [
            f"({test} and (ret := f{i}({', '.join((['ctx=ctx'] if has_ctx else []) + args)})) is not None)"
            for test, args in ways
        ]
        reads_src = reads_src or any("nsrc" in test for test, _ in ways)
        if calls:
            body += [
                f"        if {' or '.join(calls)}:",
                "            if ret is not uop:",
                "                if track():",
                f"                    hits[{index}] += 1",
                "                return ret",
            ]
    lines = [
        f"def make(hits, track, {', '.join(f'f{i}' for i in range(len(rules)))}):",
        "    def op_rules(uop, ctx):",
        *(["        src = uop.src; nsrc = len(src)"] if reads_src else []),  # read once for every way
        *body,
        "        return None",
        "    return op_rules",
    ]
    exec(_code("\n".join(lines), f"<rules of {rules[0][0]!r:.200}>"), namespace)
    return cast(RuleFn, namespace["make"](hits, _track_stats, *(fxn for _, fxn, _, _ in rules)))


# generated source -> its code object. Ops that share their rules (every binary ALU op of `sym` has the
# same generic ones) get the same source: compiled once, it is run in each op's own namespace, which holds
# the values its names stand for (a transformer block's cold step compiled 135 sources, 53 of them distinct:
# 69 -> 43 ms). Bounded: a process that keeps making new matchers drops the old code objects.
_CODES: dict[str, CodeType] = {}
# ... and across processes: the code object of a source is kept in the disk cache (uopgrad.diskcache, whose
# checks a kernel read from it passes too), keyed by the source, its name and the interpreter's bytecode
# tag, so a new process loads it instead of compiling it. What a process compiled is written once, when it
# exits (one transaction: a write per source cost more than the compiles). A new process's first realize of
# a new kernel compiled 15 sources in 21-26 ms of its 74-83 ms. False: compile every source.
CODE_CACHE = True
_NEW_CODES: list[tuple[str, bytes]] = []


def _code(source: str, name: str) -> CodeType:
    if (code := _CODES.get(source)) is None:
        if len(_CODES) >= 4096:
            _CODES.clear()
        code = _CODES[source] = _cached_code(source, name)
    return code


def _code_digest(source: str, name: str) -> str:
    """The disk cache's key of the code of `source` named `name`, for this interpreter's bytecode."""
    key = f"uopgrad matcher code 1\0{sys.implementation.cache_tag}\0{name}\0{source}"
    return hashlib.sha256(key.encode()).hexdigest()


def _cached_code(source: str, name: str) -> CodeType:
    """The code object of `source` from the disk cache, else compiled (and noted for `store_codes`)."""
    if not CODE_CACHE:
        return compile(source, name, "exec")
    digest = _code_digest(source, name)
    if (payload := _read(digest)) is not None:
        with contextlib.suppress(ValueError, EOFError, TypeError):
            code = marshal.loads(payload)
            if isinstance(code, CodeType) and code.co_filename == name:
                return code
    code = compile(source, name, "exec")
    if not _NEW_CODES:
        atexit.register(store_codes)  # (again after a flush: `atexit` runs a function once per registration)
    _NEW_CODES.append((digest, marshal.dumps(code)))
    return code


def _read(digest: str) -> bytes | None:
    """The disk cache's payload under `digest`; None where there is none or no cache directory to ask (no
    home directory, a bad UOPGRAD_CACHE_DIR): the code is then compiled, as it would be without a cache."""
    try:
        return diskcache.read(digest)
    except (OSError, RuntimeError, UopgradError):
        return None


def store_codes() -> None:
    """Write the matcher code objects this process compiled to the disk cache, in one transaction (run
    when the process exits; without a cache directory to write to, nothing is kept)."""
    if _NEW_CODES:
        entries = list(_NEW_CODES)
        _NEW_CODES.clear()
        atexit.unregister(store_codes)
        with contextlib.suppress(OSError, RuntimeError, UopgradError):
            diskcache.write_many(entries)


def _lazy_op_fn(by_value: list[RuleFn | None], v: int, rules: Sequence[_Rule], hits: list[int]) -> RuleFn:
    """A stand-in that compiles the op's function on its first call and puts it in its place."""

    def first_call(uop: UOp, ctx: Any) -> Any:
        fn = by_value[v] = _op_fn(rules, hits)
        return fn(uop, ctx)

    return first_call


_track_stats = TRACK_MATCH_STATS.get
# ---------------------------------------------------------------------------------------------- end HOT PATH


def match_stats() -> list[tuple[PatternMatcher, list[int]]]:
    """Every live PatternMatcher with its per-rule hit counts (counted only under TRACK_MATCH_STATS)."""
    return [(pm, st.hits) for pm, st in _all_stats.values()]


_Entry = tuple["UOp", int, "UOp"]  # (node, stage, work node) on the fixpoint engine's stack


class _RewriteContext:
    def __init__(
        self, pm: PatternMatcher | None, bpm: PatternMatcher | None, ctx: Any, enter_calls: bool
    ) -> None:
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

    # ------------------------------------------------------------------------------------------ HOT PATH
    # The fixpoint engine is one loop with its stages inlined, and a rebuilt node's stages run on the spot.
    # Guarded by bench/rewrite.py ("rewrite top-down", "rewrite bottom-up" of every workload); its model is
    # spec/rewrite.md §3.2, checked against a naive recursive rewriter by spec/test_traversal.py.
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
        # UOp(...) through its metaclass's __call__ called as a function: a class call costs a lookup more
        intern: Callable[..., UOp] = type(type(root)).__call__
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
                                # an answer is never its input, so the first answer can't close a loop: the
                                # set of the nodes answered is made at the second
                                if new_n is not n:
                                    if seen is None:
                                        seen = {n}
                                    if test_n in seen:
                                        raise RewriteError(
                                            f"infinite loop in a bottom-up fixpoint at {test_n.op}"
                                        )
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
                        if (waiters := waitlist.get(missing := src[new_src.index(None)])) is None:
                            waitlist[missing] = [(n, 1, new_n)]
                        else:
                            waiters.append((n, 1, new_n))
                        break
                    if new_src != src:  # element-wise identity: UOps compare by identity
                        cand = intern(new_n.__class__, new_n.op, new_n.dtype, new_src, new_n.arg, new_n.tag)
                        if closed and cand not in replace and not is_call[cv := cand.op._value_]:
                            # every result is a key that maps to itself (kept so where results are
                            # stored), so the candidate's sources need no visit: rewriting it from scratch
                            # comes down to bpm on it, then pm on it
                            gated, ret = False, None
                            if (
                                bpm_fns is not None
                                and (bfn := bpm_fns[cv]) is not None
                                and (ret := bcache.get(cand, _MISSING)) is _MISSING
                            ):
                                try:
                                    ret = bcache[cand] = bfn(cand, ctx)
                                except BottomUpGate:
                                    ret, gated = None, True
                            if ret is None:  # (a bpm rewrite is taken on by stage 0 below, its answer cached)
                                linked: UOp | None = cand  # pm's answer if it has a result, else cand
                                if (
                                    not gated
                                    and (fn := pm_fns[cv]) is not None
                                    and (ret := fn(cand, ctx)) is not None
                                    and (linked := rget(ret)) is None
                                ):
                                    push((n, 2, cand))  # pm's answer is new: on with it as the candidate
                                    n, new_n, cand = cand, cand, ret
                                if linked is not None:
                                    replace[cand] = replace[n] = linked
                                    if cand in waitlist:
                                        stack.extend(waitlist.pop(cand))
                                    if n not in waitlist:
                                        break
                                    # the last waiter would be pushed and popped at once: resumed here
                                    waiters = waitlist.pop(n)
                                    n, stage, new_n = waiters.pop()
                                    if waiters:
                                        stack.extend(waiters)
                                    continue
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

    # -------------------------------------------------------------------------------------- end HOT PATH

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


def graph_rewrite(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any = None,
    bottom_up: bool = False,
    name: str | None = None,
    bpm: PatternMatcher | None = None,
    walk: bool = False,
    enter_calls: bool = False,
) -> UOp:
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
