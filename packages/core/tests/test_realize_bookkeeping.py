"""The bookkeeping behind realize, checked against its definitions: the remembered buffer reads and effects
of a graph (uopgrad.realized) equal a fresh walk of it, they keep no buffer alive, and the schedule cache's
structural key tells apart what must not share a schedule."""

import gc
import weakref

import numpy as np
from conftest import rnd

from uopgrad import Tensor, UOp
from uopgrad.ops import Ops
from uopgrad.realized import buffers_read, effects, is_realized_after, reads
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
    w.assign(w + 1)             # an assign not run yet: an AFTER with its STORE
    b = a + w.sum(0)
    out.append(b.uop)
    b.realize()                 # realized: its reads no longer count for what is built on it
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


def test_the_schedule_key_tells_constants_and_sharing_apart() -> None:
    clear_schedule_cache()
    a, b = rnd(4, seed=4).realize(), rnd(4, seed=5).realize()
    schedule((a * 0.0).uop.sink())
    schedule((a * -0.0).uop.sink())       # equal under ==, another constant for the kernel
    assert schedule_cache_info()["misses"] == 2
    schedule((a + b).uop.sink())
    schedule((a + a).uop.sink())          # one buffer read twice is another graph than two buffers
    assert schedule_cache_info()["misses"] == 4
    c = rnd(4, seed=6).realize()
    s = schedule((c + b).uop.sink())      # the structure of a + b with other buffers: a hit
    assert schedule_cache_info() == {"hits": 1, "misses": 4, "size": 4}
    (cbuf,) = reads(c.uop)
    assert any(cbuf in it.src[1:] for it in s.items)  # the cached schedule, on this graph's buffers
