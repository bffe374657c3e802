"""Benchmark (not a test): graph_rewrite and toposort throughput of uopgrad beside tinygrad 0.14.

Both libraries build the identical workloads from the same recipe and rewrite them with the same small rule
table (x+0 -> x, x*1 -> x, folding of constant ADD/MUL). A third workload is uopgrad's alone: random index
expressions under its own `sym` table, whose nested commutative patterns ((x+c1)+c2, x*c1+x*c2, ...) fit a
node in up to 16 ways each; it guards the compiled matcher (rewrite.py's HOT PATH sections), top-down and
with each node offered once to the table ("match each node"; sym is no bottom-up table).

Timings are the best of N, in CPU time of this process (time.process_time: on a shared, loaded machine wall
time mostly measures the other jobs), with the garbage collector off during each timed call (as `timeit`
does). Both libraries run in the same process on graphs built side by side, their calls alternating round
by round, so the ratio compares like with like (neither gets the memory the other's first call faulted in).
Nothing is asserted about speed.

    PYTHONPATH=packages/core/src python bench/rewrite.py [--repeat 5] [--terms 16000] [--chain 100000]
        [--sym 2000]
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from machine import machine_line

import uopgrad
from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from uopgrad.symbolic import sym

N_VARS = 8
# ops that carry the workload's structure; leaves (variables) are spelled differently in the two libraries
COMPARED_OPS = ("ADD", "MUL", "FLOORDIV", "FLOORMOD", "CONST")


@dataclass
class Lib:
    """What a workload needs from one library."""

    name: str
    const: Callable[[int], Any]
    variable: Callable[[str], Any]
    graph_rewrite: Callable[..., Any]
    pm: Any
    bottom_up: bool = True  # time a bottom-up rewrite (else: the table offered each node once)


# ---------------------------------------------------------------------------------------------- rule tables

pm_ours = PatternMatcher(
    [
        (UPat.var("x") + 0, lambda x: x),  # x+0 -> x
        (UPat.var("x") * 1, lambda x: x),  # x*1 -> x
        (
            UPat(Ops.ADD, src=(UPat.cvar("a"), UPat.cvar("b"))),
            lambda a, b: a.const_like(a.arg + b.arg),
        ),  # fold +
        (
            UPat(Ops.MUL, src=(UPat.cvar("a"), UPat.cvar("b"))),
            lambda a, b: a.const_like(a.arg * b.arg),
        ),  # fold *
    ]
)

ours = Lib(
    "uopgrad",
    lambda v: UOp.const(dtypes.index, v),
    lambda n: UOp.variable(n, 0, 1000),
    graph_rewrite,
    pm_ours,
)


def load_tinygrad() -> Lib | str:
    """The same table in tinygrad's API, or the reason it can't be loaded."""
    try:
        from tinygrad.dtype import dtypes as tdtypes
        from tinygrad.uop.ops import Ops as TOps
        from tinygrad.uop.ops import PatternMatcher as TPatternMatcher
        from tinygrad.uop.ops import UOp as TUOp
        from tinygrad.uop.ops import UPat as TUPat
        from tinygrad.uop.ops import graph_rewrite as tgraph_rewrite
    except ImportError as e:
        return f"tinygrad is not importable ({e})"
    try:
        version = importlib.metadata.version("tinygrad")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    pm_tiny = TPatternMatcher(
        [
            (TUPat.var("x") + 0, lambda x: x),  # x+0 -> x
            (TUPat.var("x") * 1, lambda x: x),  # x*1 -> x
            (
                TUPat(TOps.ADD, src=(TUPat.cvar("a"), TUPat.cvar("b"))),
                lambda a, b: a.const_like(a.arg + b.arg),
            ),
            (
                TUPat(TOps.MUL, src=(TUPat.cvar("a"), TUPat.cvar("b"))),
                lambda a, b: a.const_like(a.arg * b.arg),
            ),
        ]
    )
    return Lib(
        f"tinygrad {version}",
        lambda v: TUOp.const(v, tdtypes.weakint),
        lambda n: TUOp.variable(n, 0, 1000),
        tgraph_rewrite,
        pm_tiny,
    )


# ---------------------------------------------------------------------------------------------- workloads


def index_sum(lib: Lib, terms: int) -> Any:
    """sum_i ((x_i*c1 + y_i*1) + (k1*k2 + 0)) // c2 % c3: index arithmetic with identities and foldable
    constants; most constants and products repeat across terms, so interning shares them."""
    vs = [lib.variable(f"v{i}") for i in range(N_VARS)]
    k = lib.const
    total = k(0)
    for i in range(terms):
        x, y = vs[i % N_VARS], vs[(3 * i + 1) % N_VARS]
        term = ((x * k(i + 2) + y * k(1)) + (k(i % 5) * k(i % 3 + 1) + k(0))) // k(i % 7 + 2) % k(i % 11 + 3)
        total = total + term
    return total


def chain(lib: Lib, length: int) -> Any:
    """A chain x+1, *1, +0, +1, *1, +0, ... of `length` ops: two thirds of it rewrites away."""
    x = lib.variable("v0")
    one, zero = lib.const(1), lib.const(0)
    for i in range(length):
        x = x + one if i % 3 == 0 else (x * one if i % 3 == 1 else x + zero)
    return x


def symbolic(lib: Lib, count: int) -> Any:
    """A SINK of `count` random index expressions (seeded) over a few bounded variables: sums, products and
    floor divisions and moduli by constants, and some WHEREs, 2 to 6 levels deep."""
    rng = random.Random(0)
    vs = [lib.variable(f"v{i}") for i in range(N_VARS)]

    def expr(depth: int) -> Any:
        if depth == 0:
            return rng.choice(vs) if rng.random() < 0.7 else lib.const(rng.randint(-3, 9))
        a, b, r = expr(depth - 1), expr(depth - 1), rng.random()
        if r < 0.35:
            return a + b
        if r < 0.6:
            return a * lib.const(rng.randint(-2, 6))
        if r < 0.75:
            return a // lib.const(rng.randint(1, 8))
        return a % lib.const(rng.randint(1, 8)) if r < 0.9 else (a < b).where(a, b)

    return UOp.sink(*(expr(rng.randint(2, 6)) for _ in range(count)))


def signature(u: Any) -> list[tuple[str, Any]]:
    """The compared ops of the toposort, with constant values: equal for equal graphs in both libraries."""
    return [
        (n.op.name, n.arg if n.op.name == "CONST" else None)
        for n in u.toposort()
        if n.op.name in COMPARED_OPS
    ]


# ---------------------------------------------------------------------------------------------- timing


def timed_once(fn: Callable[[], Any]) -> float:
    """CPU time of one call, in milliseconds, with the collector run before and off during it."""
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        fn()
        return (time.process_time() - start) * 1e3
    finally:
        gc.enable()


def tasks(lib: Lib, root: Any) -> dict[str, Callable[[], Any]]:
    """The timed calls on one library's graph."""
    pm, rw = lib.pm, lib.graph_rewrite
    nodes = list(root.toposort())
    return {
        "toposort": lambda: root.toposort(),
        "rewrite top-down": lambda: rw(root, pm),
        **(
            {"rewrite bottom-up": lambda: rw(root, pm, bottom_up=True)}
            if lib.bottom_up
            else {"match each node": lambda: [pm.rewrite(n) for n in nodes]}
        ),
    }


def measure(
    libs: list[Lib], build: Callable[[Lib], Any], repeat: int
) -> tuple[list[dict[str, float]], int, bool]:
    """Best time per task and library, uopgrad's node count, and whether the graphs and rewrites agree.

    Both graphs are built first and the libraries' calls alternate, round by round: the first call in a
    process pays for fresh memory (page faults), so timing one library's rounds before the other's would
    hand the second one warm memory."""
    roots = [build(lib) for lib in libs]
    calls = [tasks(lib, root) for lib, root in zip(libs, roots)]
    best = [dict.fromkeys(calls[0], float("inf")) for _ in libs]
    for task in calls[0]:
        for _ in range(repeat):
            for times, fns in zip(best, calls):
                times[task] = min(times[task], timed_once(fns[task]))
    sigs = [
        [
            signature(root),
            signature(lib.graph_rewrite(root, lib.pm)),
            signature(lib.graph_rewrite(root, lib.pm, bottom_up=True)) if lib.bottom_up else [],
        ]
        for lib, root in zip(libs, roots)
    ]
    return best, len(roots[0].toposort()), all(s == sigs[0] for s in sigs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="best of this many runs (default 5)")
    ap.add_argument("--terms", type=int, default=16_000, help="terms of the index sum (default 16000)")
    ap.add_argument("--chain", type=int, default=100_000, help="length of the chain (default 100000)")
    ap.add_argument("--sym", type=int, default=2000, help="expressions of the sym workload (default 2000)")
    # a child process times one workload
    ap.add_argument("--workload", choices=["index", "chain", "sym"], help=argparse.SUPPRESS)
    args = ap.parse_args()

    tiny = load_tinygrad()
    if args.workload is not None:
        builds: dict[str, tuple[str, Callable[[Lib], Any]]] = {
            "index": (f"index sum ({args.terms} terms)", lambda lib: index_sum(lib, args.terms)),
            "chain": (f"chain ({args.chain} ops)", lambda lib: chain(lib, args.chain)),
            "sym": (f"symbolic, sym ({args.sym} exprs)", lambda lib: symbolic(lib, args.sym)),
        }
        wname, build = builds[args.workload]
        libs = [ours] if isinstance(tiny, str) else [ours, tiny]
        if args.workload == "sym":  # the project's own table: nothing to compare with
            libs = [Lib(ours.name, ours.const, ours.variable, graph_rewrite, sym, bottom_up=False)]
        times, ours_n, same = measure(libs, build, args.repeat)
        for task, t in times[0].items():
            other = "-" if len(times) == 1 else f"{times[1][task]:14.1f}"
            ratio = "-" if len(times) == 1 else f"{t / times[1][task]:6.2f}"
            print(f"{wname:<28} {task:<18} {ours_n:>8} {t:10.1f} {other:>14} {ratio:>6}")
        if len(libs) > 1:
            print(f"{'':<28} identical graphs and rewrites in both libraries: {'yes' if same else 'NO'}")
        return

    print(machine_line())
    print(f"python {platform.python_version()} on {platform.machine()}, uopgrad from {uopgrad.__file__}")
    if isinstance(tiny, str):
        print(f"NOTE: {tiny}; timing uopgrad only")
    else:
        print(f"side by side with {tiny.name}")
    print(f"best of {args.repeat}, times in ms; each workload in a fresh process\n")
    header = (
        f"{'workload':<28} {'task':<18} {'nodes':>8} {'ours (ms)':>10} {'tinygrad (ms)':>14} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header), flush=True)
    # a fresh process per workload: the garbage one workload leaves would set the memory layout of the next
    # one's graphs, and a walk over 100k nodes is bound by where they lie
    for workload in ("index", "chain", "sym"):
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--workload",
                workload,
                "--repeat",
                str(args.repeat),
                "--terms",
                str(args.terms),
                "--chain",
                str(args.chain),
                "--sym",
                str(args.sym),
            ],
            check=True,
        )
    print("\nratio = ours / tinygrad (below 1: uopgrad is faster). nodes = uopgrad's toposort of the input.")


if __name__ == "__main__":
    sys.exit(main())
