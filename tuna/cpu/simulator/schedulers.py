"""List schedulers of a block's micro-ops on a machine's pipes: out-of-order and in-order.

Both book each micro-op on the first free cycle of one of its pipes (union-find over the
booked cycles of each pipe) once its operands are ready. With ``loop``, iterations are
scheduled back to back until two consecutive measuring windows take the same time; the
steady-state cycles per iteration are the slope over the last window. They return that (or
the cycles of one pass) and the cycles each pipe was busy per iteration.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from .dependencies import Block
from .uarch_data import Uarch


def _find(free: dict[int, int], t: int) -> int:
    """First cycle >= t at which a pipe is free (union-find over booked cycles)."""
    root = t
    while root in free:
        root = free[root]
    while t != root:
        nxt = free[t]
        free[t] = root
        t = nxt
    return root


def _earliest(free: dict[int, int], t: int, occ: int) -> int:
    c = _find(free, t)
    if occ == 1:
        return c
    while True:
        for k in range(1, occ):
            if c + k in free:
                c = _find(free, c + k)
                break
        else:
            return c


def _book(free: dict[int, int], c: int, occ: int) -> None:
    for k in range(occ):
        free[c + k] = c + k + 1


def _window(blk: Block, loop: bool) -> tuple[int, int]:
    """Iterations per measuring window and the most iterations to simulate."""
    if not loop:
        return 1, 1
    n = max(1, len(blk.instr_uops))
    w = math.ceil(120 / n)
    return w, max(4 * w + 1, math.ceil(3000 / n))


def _steady(ends: list[float], w: int) -> int:
    """A window (``w``, ``2w`` or ``4w`` iterations) whose last two instances took the same
    time within 2%, or 0 while there is none: the schedule has settled into its period."""
    for win in (w, 2 * w, 4 * w):
        if len(ends) < 2 * win + 1:
            return 0
        a = ends[-1] - ends[-1 - win]
        b = ends[-1 - win] - ends[-1 - 2 * win]
        if abs(a - b) <= 0.02 * max(a, b) + 1e-9:
            return win
    return 0


def schedule_out_of_order(blk: Block, ua: Uarch, fwd: float, loop: bool) -> tuple[float, list[float]]:
    """Out-of-order list scheduling: cycles per iteration (or of one pass) and pipe use per iteration.

    Instructions dispatch in order, ``dispatch_width`` slots a cycle, while the reorder buffer
    and the scheduler each micro-op needs have room; each micro-op then issues at the first
    cycle its operands are ready and one of its pipes is free (earlier free cycles are filled
    too, as an oldest-first scheduler would), and instructions retire in order; a load the
    store queue cannot forward to has its data ``store_forward_fail_latency`` cycles after
    the store retires. Behind a non-scheduling queue (``Uarch.queues``) a micro-op
    dispatches while the queue has room and issues only once it has entered the scheduler,
    in order, as issued micro-ops free entries: a long dependency chain then holds back
    independent micro-ops queued behind it. Iterations are added until two consecutive
    windows take the same time.
    """
    w, cap = _window(blk, loop)
    history: list[list[float]] = []
    width = ua.dispatch_width
    fail = ua.store_forward_fail_latency or 0.0
    rob = ua.rob_size
    rwidth = ua.retire_width
    free: list[dict[int, int]] = [{} for _ in ua.ports]
    used = [0.0] * len(ua.ports)
    sizes = ua.schedulers
    queues: list[list[float]] = [[] for _ in sizes]
    nsq = ua.queues or (0,) * len(sizes)
    # When the last micro-ops behind each queue entered their scheduler (as many as the queue holds).
    entered = [deque(maxlen=n or 1) for n in nsq]
    ready: dict[str, float] = {}
    retired: list[int] = []
    ends: list[float] = []
    slot = 0
    dispatch = 0
    last_retire, retire_n = 0, 0
    body = [
        (
            blk.slots[j],
            tuple(
                (blk.srcs[u], blk.dsts[u], blk.lat[u], blk.parts[u], blk.mem_src[u], blk.mem_dst[u], blk.sched[u])
                for u in rng
            ),
            tuple(blk.mem_fail[u] for u in rng if blk.mem_fail[u] is not None),
            tuple(blk.sched[u] for u in rng if blk.sched[u] >= 0),  # the schedulers it needs room in
        )
        for j, rng in enumerate(blk.instr_uops)
    ]
    find = _find
    ceil = math.ceil
    for _ in range(cap):
        history.append(list(used))
        for nslots, uops, fails, needs in body:
            d = slot // width
            g = len(retired)
            if rob and g >= rob and retired[g - rob] > d:
                d = retired[g - rob]
            for q in needs:
                if nsq[q]:
                    if len(entered[q]) >= nsq[q] and entered[q][-nsq[q]] > d:
                        d = ceil(entered[q][-nsq[q]])
                elif len(queues[q]) >= sizes[q] and queues[q][0] > d:
                    d = ceil(queues[q][0])
            if d < dispatch:
                d = dispatch
            dispatch = d
            slot = max(slot, d * width) + nslots
            done = d
            for srcs, dsts, lat, parts, msrc, mdst, q in uops:
                t = d + 1
                if q >= 0 and nsq[q]:
                    e = d
                    if entered[q] and entered[q][-1] > e:
                        e = entered[q][-1]
                    if len(queues[q]) >= sizes[q] and queues[q][0] > e:
                        e = queues[q][0]
                    entered[q].append(e)
                    if e + 1 > t:
                        t = e + 1
                for s in srcs:
                    r = ready.get(s)
                    if r is not None and r > t:
                        t = r
                t = ceil(t)
                start = t
                for pipes, occ in parts:
                    best, bp = -1, 0
                    for p in pipes:
                        fp = free[p]
                        if occ == 1:
                            c = t if t not in fp else find(fp, t)
                        else:
                            c = _earliest(fp, t, occ)
                        if best < 0 or c < best:
                            best, bp = c, p
                            if c == t:
                                break
                    fp = free[bp]
                    for k in range(best, best + occ):
                        fp[k] = k + 1
                    used[bp] += occ
                    if best > start:
                        start = best
                c = start + lat
                if msrc is not None:
                    rm = ready.get(msrc)
                    if rm is not None and rm > c:
                        c = rm
                for dd in dsts:
                    ready[dd] = c
                if mdst is not None:
                    ready[mdst] = start + fwd
                if c > done:
                    done = c
                if q >= 0:
                    heap = queues[q]
                    if len(heap) < sizes[q]:
                        heapq.heappush(heap, start)
                    elif start > heap[0]:
                        heapq.heapreplace(heap, start)
            r = ceil(done)
            if r <= last_retire:
                r = last_retire
                retire_n += 1
                if retire_n > rwidth:
                    r += 1
                    retire_n = 1
            else:
                retire_n = 1
            last_retire = r
            retired.append(r)
            for name in fails:  # a load the store queue cannot serve reads the store from L1
                ready[name] = r + fail
        ends.append(float(last_retire))
        if _steady(ends, w):
            break
    return _measure(ends, history, used, _steady(ends, w) or len(ends) // 2)


def _measure(ends: list[float], history: list[list[float]], used: list[float], w: int) -> tuple[float, list[float]]:
    w = max(1, min(w, len(ends)))
    base = ends[-1 - w] if len(ends) > w else 0.0
    before = history[len(ends) - w]
    return (ends[-1] - base) / w, [(u - b) / w for u, b in zip(used, before)]


def schedule_in_order(blk: Block, ua: Uarch, fwd: float, loop: bool) -> tuple[float, list[float]]:
    """In-order issue (program order, at most dispatch_width a cycle) honouring RAW, WAR and WAW."""
    width = ua.dispatch_width
    win, cap = _window(blk, loop)
    history: list[list[float]] = []
    free: list[dict[int, int]] = [{} for _ in ua.ports]
    used = [0.0] * len(ua.ports)
    ready: dict[str, float] = {}
    read_at: dict[str, int] = {}
    ends: list[float] = []
    last = 0  # issue cycle of the previous micro-op
    cycle_of_group, in_group = -1, 0
    finish = 0.0
    srcs, dsts, lat, parts = blk.srcs, blk.dsts, blk.lat, blk.parts
    mem_src, mem_dst, mem_fail = blk.mem_src, blk.mem_dst, blk.mem_fail
    fail = ua.store_forward_fail_latency or 0.0
    for _ in range(cap):
        history.append(list(used))
        for j, rng in enumerate(blk.instr_uops):
            first = True
            for u in rng:
                t = float(last)
                for s in srcs[u]:  # RAW
                    r = ready.get(s)
                    if r is not None and r > t:
                        t = r
                for w in dsts[u]:
                    r = ready.get(w)  # WAW: complete no earlier than the previous writer
                    if r is not None and r - lat[u] > t:
                        t = r - lat[u]
                    a = read_at.get(w)  # WAR: issue no earlier than the last reader
                    if a is not None and a > t:
                        t = a
                t = math.ceil(t)
                while True:
                    if first and blk.slots[j] and t == cycle_of_group and in_group >= width:
                        t += 1
                    choice = []
                    ok = True
                    for pipes, occ in parts[u]:
                        best, bp = -1, 0
                        for p in pipes:
                            c = _earliest(free[p], t, occ)
                            if best < 0 or c < best:
                                best, bp = c, p
                        if best != t:
                            ok = False
                            t = best
                            break
                        choice.append((bp, occ))
                    if ok:
                        break
                for bp, occ in choice:
                    _book(free[bp], t, occ)
                    used[bp] += occ
                if first and blk.slots[j]:
                    if t == cycle_of_group:
                        in_group += 1
                    else:
                        cycle_of_group, in_group = t, 1
                first = False
                last = t
                c = t + lat[u]
                m = mem_src[u]
                if m is not None:
                    rm = ready.get(m)
                    if rm is not None and rm > c:
                        c = rm
                for s in srcs[u]:
                    read_at[s] = t
                for dd in dsts[u]:
                    ready[dd] = c
                if mem_dst[u] is not None:
                    ready[mem_dst[u]] = t + fwd
                if mem_fail[u] is not None:
                    ready[mem_fail[u]] = t + fail
                if c > finish:
                    finish = c
        if not loop:
            return finish, used
        ends.append(float(last))
        if _steady(ends, win):
            break
    return _measure(ends, history, used, _steady(ends, win) or len(ends) // 2)
