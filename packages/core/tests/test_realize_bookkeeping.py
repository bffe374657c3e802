"""The bookkeeping behind realize, checked against its definitions: the remembered buffer reads and effects
of a graph (uopgrad.realized) equal a fresh walk of it, they keep no buffer alive, and the schedule cache's
structural key tells apart what must not share a schedule."""

import gc
import weakref

import numpy as np
from conftest import rnd

from uopgrad import Tensor, UOp
from uopgrad.ops import Ops
from uopgrad.realized import buffers_read, effects, is_realized_after, reads, realized_view, strip_realized
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.schedule import clear_schedule_cache, schedule, schedule_cache_info


def walked_effects(u: UOp) -> set[UOp]:
    """effects() by definition: the effects of every AFTER under u, not entering realized values or bodies."""
    out: set[UOp] = set()
    for a in u.toposort(gate=lambda n: not is_realized_after(n), enter_calls=False):
        if a.op is Ops.AFTER:
            out.update(a.src[1:])
    return out


def graphs() -> list[UOp]:
    """Graphs with buffers read directly, through views, assigns and realized values, in growing order
    (each later one built on earlier ones, so the memo is reused)."""
    w, x = rnd(3, 4, seed=1), rnd(3, 4, seed=2)
    a = (w * x).relu()
    out = [a.uop]
    w.assign(w + 1)  # an assign not run yet: an AFTER with its STORE
    b = a + w.sum(0)
    out.append(b.uop)
    b.realize()  # realized: its reads no longer count for what is built on it
    c = b * 2 + x.T.T
    out.append(c.uop)
    d = c.sum() + Tensor(np.ones(1, np.float32)).sum()
    out.append(d.uop)
    x.assign(x * 3)
    out.append((d + x.sum()).uop)
    return out


def test_remembered_reads_and_effects_equal_a_fresh_walk() -> None:
    for u in graphs():
        assert reads(u) == set(buffers_read(u))
        assert effects(u) == walked_effects(u)
        assert reads(u) is reads(u)  # remembered


def test_the_memo_keeps_no_buffer_alive() -> None:
    t = rnd(5, seed=3)
    u = (t * 2 + 1).uop
    (buf,) = reads(u)
    assert buf.op is Ops.BUFFER
    ref = weakref.ref(buf)
    del t, u, buf
    gc.collect()
    assert ref() is None


# strip_realized by definition: one bottom-up walk, a realized value becomes its view (not entered), call
# bodies are kept
_strip_by_rule = PatternMatcher(
    [(UPat(Ops.AFTER, name="x"), lambda x: realized_view(x) if is_realized_after(x) else None)]
)


def test_the_remembered_strip_equals_a_fresh_walk() -> None:
    for u in graphs():
        want = graph_rewrite(u, _strip_by_rule, bottom_up=True, walk=True)
        assert strip_realized(u) is want
        assert strip_realized(u) is want  # remembered, the same node
        assert not any(is_realized_after(n) for n in want.toposort(enter_calls=False))


def test_the_strip_memo_frees_a_buffer_by_reference_counting_alone() -> None:
    # no cycle through the memo: a dropped graph's buffer goes at once, not at the next collection
    t = (rnd(5, seed=6) + 1).realize()
    u = (t * 2).uop
    stripped = strip_realized(u)
    assert stripped is not u and strip_realized(stripped) is stripped
    (buf,) = reads(stripped)
    ref = weakref.ref(buf)
    gc.disable()
    try:
        del t, u, stripped, buf
        assert ref() is None
    finally:
        gc.enable()


def test_the_schedule_key_tells_constants_and_sharing_apart() -> None:
    clear_schedule_cache()
    a, b = rnd(4, seed=4).realize(), rnd(4, seed=5).realize()
    schedule((a * 0.0).uop.sink())
    schedule((a * -0.0).uop.sink())  # equal under ==, another constant for the kernel
    assert schedule_cache_info()["misses"] == 2
    schedule((a + b).uop.sink())
    schedule((a + a).uop.sink())  # one buffer read twice is another graph than two buffers
    assert schedule_cache_info()["misses"] == 4
    c = rnd(4, seed=6).realize()
    s = schedule((c + b).uop.sink())  # the structure of a + b with other buffers: a hit
    assert schedule_cache_info() == {"hits": 1, "misses": 4, "size": 4}
    (cbuf,) = reads(c.uop)
    assert any(cbuf in it.src[1:] for it in s.items)  # the cached schedule, on this graph's buffers
