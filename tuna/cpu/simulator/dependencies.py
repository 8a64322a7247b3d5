"""Block preparation: a block's micro-ops bound to one machine's timing, with their dependencies.

:func:`prepare_block` turns decoded instructions into a :class:`Block` of parallel lists
(timing class, registers read and written, latency, pipes and occupancy, scheduler) that
the bounds and the schedulers walk, with the memory dependencies through addresses the
block does not change (spill slots, reductions into one element) or, in a loop, moves by a
constant stride (rows of accumulators reloaded an iteration later). Eliminated moves and
zeroing idioms become micro-ops that take a dispatch slot only.

:func:`dependency_graph` is the diagnostic view of the same data: the true (RAW) and false
(WAR, WAW) dependency edges between the micro-ops of a block, which the schedulers honour
implicitly (an out-of-order core the RAW edges, an in-order core all three).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ...ir import Instruction
from ..isa import KINDS, check_isa
from .decoding import decode
from .microops import Decoded
from .uarch_data import FALLBACK, WIDTH_KEYS, ClassTiming, Uarch

#: Micro-op classes that never reach a pipe: they only take a dispatch slot.
_NO_EXEC = frozenset({"nop", "zero"})


@dataclass(frozen=True)
class DependencyGraph:
    """Register and memory dependencies between the micro-ops of a block.

    Each edge is ``(producer, consumer, resource, carried)``: micro-op indices in program order,
    the register (or ``mem``) it goes through, and whether it crosses into the next iteration
    of the loop the block is the body of.

    Attributes
    ----------
    raw : tuple
        True dependencies (read after write).
    war : tuple
        Anti dependencies (write after read): a write must not overtake an earlier read.
    waw : tuple
        Output dependencies (write after write).
    """

    raw: tuple[tuple[int, int, str, bool], ...]
    war: tuple[tuple[int, int, str, bool], ...]
    waw: tuple[tuple[int, int, str, bool], ...]


@dataclass
class Block:
    """A block's micro-ops as parallel lists (fast to walk)."""

    instr_uops: list[range]
    slots: list[int]
    klass: list[str]
    srcs: list[tuple[str, ...]]
    dsts: list[tuple[str, ...]]
    lat: list[float]
    parts: list[tuple[tuple[tuple[int, ...], int], ...]]  # (pipes, integer occupancy)
    exact: list[tuple[tuple[int, float], ...]]  # (pipe mask, exact occupancy)
    mem_src: list[str | None]
    mem_dst: list[str | None]
    mem_fail: list[str | None]  # a store's name for the loads it cannot forward to
    sched: list[int]
    n_uops: int
    counts: dict[str, int]
    broadcasts: int


def prepare_block(decoded: Sequence[Decoded], ua: Uarch, loop: bool, frame_align: int = 16) -> Block:
    """The micro-ops of ``decoded`` with ``ua``'s timing, front-end slots and memory dependencies.

    ``frame_align`` is what the function's stack frame is known to be aligned to, in bytes: a
    reload of the frame (``vload_frame``) no wider keeps a plain vector load's timing, a wider
    one the machine's ``vload_frame`` timing (a cost expected from straddled cache lines).

    With ``loop``, a load before the store to its slot reads what the previous iteration stored
    (its slot found, where the block steps the address registers, one stride further on).
    A load the store queue cannot forward to (:func:`_forwards`; only on machines whose data
    file gives ``store_forward_fail_latency``) depends on the store's ``mem_fail`` name, which
    the schedulers make ready that many cycles after the store retires.
    """
    instr_uops, slots = [], []
    klass, srcs, dsts, lat, parts, exact, mem_src, mem_dst, mem_fail, sched = [], [], [], [], [], [], [], [], [], []
    mems: list[tuple[int, bool, tuple, int]] = []
    counts = dict.fromkeys(KINDS, 0)
    broadcasts = 0
    prev_fusible = False
    # (latency, pipes and occupancy, exact occupancy, scheduler, extra front-end slots) per timing
    # class and width: a block repeats a few classes many times.
    timed: dict[tuple[str, int], tuple] = {}
    for j, dec in enumerate(decoded):
        start = len(klass)
        nslots = dec.slots + (dec.unlaminated and ua.unlaminate_indexed)
        is_branch = len(dec.uops) == 1 and dec.uops[0].klass == "branch"
        if is_branch and prev_fusible and ua.macro_fusion:
            nslots = 0
        prev_fusible = dec.fusible
        broadcasts += dec.broadcast
        # Values passed between the micro-ops of one instruction (~0, ~1) get the instruction's
        # index; an instruction of one micro-op has none.
        several = len(dec.uops) > 1
        for u in dec.uops:
            k = u.klass
            if k in ("mov", "vmov") and ua.move_elimination:
                k = "zero"
            elif k == "zero" and not ua.zero_idioms:
                k = "vlogic" if u.width > 64 else "alu"
            elif k == "vload_frame" and u.width <= 8 * frame_align:
                k = "vload"
            timing = timed.get((k, u.width))
            if timing is None:
                t = ua.timing(k, u.width) if k not in _NO_EXEC else None
                if t is None or not t.uops:
                    timing = (0.0 if t is None else t.latency, (), (), -1, 0 if t is None else t.slots)
                else:
                    timing = (
                        t.latency,
                        tuple((g, max(1, int(o + 0.5))) for g, o in zip(t.uops, t.occupancy)),
                        tuple((sum(1 << p for p in g), o) for g, o in zip(t.uops, t.occupancy)),
                        ua.port_scheduler[t.uops[0][0]],
                        t.slots,
                    )
                timed[k, u.width] = timing
            nslots += timing[4]  # a microcoded class holds dispatch for its micro-ops
            klass.append(k)
            if several:
                srcs.append(tuple(f"~{j}{r}" if r[0] == "~" else r for r in u.reads))
                dsts.append(tuple(f"~{j}{w}" if w[0] == "~" else w for w in u.writes))
            else:
                srcs.append(u.reads)
                dsts.append(u.writes)
            lat.append(timing[0])
            parts.append(timing[1])
            exact.append(timing[2])
            sched.append(timing[3])
            mem_src.append(None)
            mem_dst.append(None)
            mem_fail.append(None)
            if u.mem is not None:
                mems.append((len(klass) - 1, u.kind == "store", u.mem, j))
            n = 2 if u.klass.endswith("_pair") else 1
            counts[u.kind] += n
        instr_uops.append(range(start, len(klass)))
        slots.append(nslots)
    if mems and any(st for _, st, _, _ in mems):
        _memory_dependencies(mems, decoded, loop, ua, mem_src, mem_dst, mem_fail)
    return Block(instr_uops, slots, klass, srcs, dsts, lat, parts, exact, mem_src, mem_dst, mem_fail, sched,
                 len(klass), counts, broadcasts)


def _memory_dependencies(mems: list[tuple[int, bool, tuple, int]], decoded: Sequence[Decoded], loop: bool,
                         ua: Uarch, mem_src: list, mem_dst: list, mem_fail: list) -> None:
    """Store data -> later load of an overlapping range, through the names in ``mem_*``.

    Addresses compare when the block does not change their registers (spill slots,
    reductions into one element) or, in a loop, only steps them by constants
    (:attr:`Decoded.step`): each access is placed at its offset from the iteration's start,
    and a load that comes before a store reads what the previous iteration stored where the
    stride takes it there. A masked tail store whose next row a later iteration loads is
    such a case: the load overlaps the store's 64 bytes without lying inside them, and waits
    for it to leave the store queue.
    """
    # Registers every write of which adds a constant: their step per iteration, and how far
    # each instruction finds them from the iteration's start.
    writers: dict[str, set[int]] = {}
    for j, dec in enumerate(decoded):
        for u in dec.uops:
            for w in u.writes:
                if w[0] != "~" and w != "flags":
                    writers.setdefault(w, set()).add(j)
    stride: dict[str, int] = {}
    if loop:
        for reg, js in writers.items():
            if all(decoded[j].step is not None and decoded[j].step[0] == reg for j in js):
                stride[reg] = sum(decoded[j].step[1] for j in js)
    before: list[dict[str, int]] = []
    moved: dict[str, int] = {}
    for dec in decoded:
        before.append(dict(moved))
        if dec.step is not None and dec.step[0] in stride:
            moved[dec.step[0]] = moved.get(dec.step[0], 0) + dec.step[1]
    # (uop, is store, key, offset in the iteration, size, bytes the address moves an iteration)
    accesses = []
    for i, st, m, j in mems:
        changed = set(m[3]) & writers.keys()
        if changed and not changed <= stride.keys():
            continue
        shift = sum(sc * before[j].get(r, 0) for r, sc in zip(m[3], m[4]))
        step = sum(sc * stride.get(r, 0) for r, sc in zip(m[3], m[4]))
        accesses.append((i, st, m[0], m[1] + shift, m[2], step))
    grouped: dict[str, list[tuple[int, str, int, int, int]]] = {}
    for i, st, key, off, size, step in accesses:
        if st:
            grouped.setdefault(key, []).append((i, key, off, size, step))
    stores = {key: _Stores(entries) for key, entries in grouped.items()}
    for i, st, key, off, size, step in accesses:
        if st or key not in stores:
            continue
        overlapping = stores[key].overlapping(off, size)
        same = [s for s in overlapping if s[0] < i]
        if same:
            src, match, at = same[-1], overlapping, off
        elif loop:
            # The previous iteration's stores, seen from this one: the load sits ``step`` further on.
            # Only stores after the load when the address moves: the schedulers pass a value to
            # the next iteration through a name that no earlier micro-op of the body reads.
            at = off + step
            match = [s for s in stores[key].overlapping(at, size) if step == 0 or s[0] > i]
            if not match:
                continue
            src = match[-1]
        else:
            continue
        name = f"m{src[0]}"
        mem_dst[src[0]] = name
        seen = [(s[0], s[1:4]) for s in match]
        if ua.store_forward_fail_latency is not None and not _forwards(at, size, src[1:4], seen, ua):
            name = f"{name}!"
            mem_fail[src[0]] = name
        mem_src[i] = name


class _Stores:
    """The stores through one address key, ``(uop, key, offset, size, step)`` in program order,
    found by the range they overlap: sorted by offset, so that a load looks only at the stores
    that start less than the widest store's size before it (an unrolled block of thousands of
    instructions holds thousands of stores to its stack frame)."""

    def __init__(self, entries: list[tuple[int, str, int, int, int]]) -> None:
        self._by_offset = sorted(entries, key=lambda s: (s[2], s[0]))
        self._offsets = [s[2] for s in self._by_offset]
        self._widest = max(s[3] for s in entries)

    def overlapping(self, at: int, size: int) -> list[tuple[int, str, int, int, int]]:
        """The stores that overlap ``size`` bytes at ``at``, in program order."""
        lo = bisect_right(self._offsets, at - self._widest)
        hi = bisect_left(self._offsets, at + size)
        return sorted((s for s in self._by_offset[lo:hi] if at < s[2] + s[3]), key=lambda s: s[0])


def _forwards(off: int, size: int, store: tuple, match: list[tuple[int, tuple]], ua: Uarch) -> bool:
    """Whether a load of ``size`` bytes at ``off`` takes its data from the store queue.

    It does when it lies inside the last store to overlap it, and on a machine that forwards
    in chunks (``ua.store_forward_chunk``) inside one chunk of that store, or, when wider than
    a chunk, starts on a chunk of it and every byte it reads was stored (Zen 4: a 64-byte load
    at +32 from two 64-byte stores forwards, a 32-byte load at +4 from one does not), by that
    one store where ``ua.store_forward_one_store`` (Zen 5: the 64-byte load at +32 does not).
    On a machine that forwards only aligned loads (``ua.store_forward_aligned``), a load
    inside the store forwards at an offset into it that is a multiple of its own size.
    Otherwise the load waits until the store has left the queue.
    """
    start, length = store[1], store[2]
    chunk = ua.store_forward_chunk
    inside = start <= off and off + size <= start + length
    if ua.store_forward_aligned:
        return inside and (off - start) % size == 0
    if not chunk:
        return inside
    if size <= chunk:
        return inside and (off - start) // chunk == (off + size - 1 - start) // chunk
    if ua.store_forward_one_store:
        return inside and (off - start) % chunk == 0
    covered = set()
    for _, sm in match:
        covered.update(range(max(off, sm[1]), min(off + size, sm[1] + sm[2])))
    return (off - start) % chunk == 0 and len(covered) == size


def dependency_graph(instructions: Sequence[Instruction], isa: str, *, loop: bool = True) -> DependencyGraph:
    """RAW, WAR and WAW dependencies between the micro-ops of a block.

    Parameters
    ----------
    instructions : sequence of Instruction
        The block in program order.
    isa : str
        ``"x86-64"`` or ``"aarch64"``.
    loop : bool, optional
        Also list the edges that wrap around into the next iteration (marked carried).

    Returns
    -------
    DependencyGraph
        Edges between micro-op indices in the order of ``decode``'s micro-ops, instruction by
        instruction. Memory dependencies (store data to a load of the same stack slot) appear
        among the RAW edges with resource ``"mem"``. An out-of-order core renames registers and
        so honours only the RAW edges; an in-order core honours all three kinds.
    """
    check_isa(isa)
    decoded = [decode(ins, isa) for ins in instructions]
    ua = _NEUTRAL
    if not instructions:
        return DependencyGraph((), (), ())
    blk = prepare_block(decoded, ua, loop)
    raw, war, waw = [], [], []
    last_w: dict[str, int] = {}
    readers: dict[str, list[int]] = {}  # reads since the last write
    first_w: dict[str, int] = {}
    exposed: dict[str, list[int]] = {}  # reads before the first write (fed by the previous iteration)
    for u in range(blk.n_uops):
        for r in blk.srcs[u]:
            if r in last_w:
                raw.append((last_w[r], u, r, False))
            else:
                exposed.setdefault(r, []).append(u)
            readers.setdefault(r, []).append(u)
        m = blk.mem_src[u]
        if m is not None:
            s = int(m[1:].rstrip("!"))
            raw.append((s, u, "mem", s >= u))
        for w in blk.dsts[u]:
            if w in last_w:
                waw.append((last_w[w], u, w, False))
            else:
                first_w[w] = u
            war.extend((r, u, w, False) for r in readers.get(w, ()) if r != u)
            readers[w] = []
            last_w[w] = u
    if loop:
        for r, users in exposed.items():
            if r in last_w:
                raw.extend((last_w[r], u, r, True) for u in users)
        for w, u in first_w.items():
            waw.append((last_w[w], u, w, True))
            war.extend((r, u, w, True) for r in readers.get(w, ()) if r != u)
    return DependencyGraph(tuple(raw), tuple(war), tuple(dict.fromkeys(waw)))


# A machine-neutral timing table for dependency_graph (only the micro-op structure matters).
_NEUTRAL = Uarch(
    name="neutral",
    ports=("ALU",),
    dispatch_width=1,
    retire_width=1,
    rob_size=0,
    move_elimination=False,
    zero_idioms=False,
    macro_fusion=False,
    unlaminate_indexed=False,
    store_forward_latency=1.0,
    store_forward_fail_latency=None,
    store_forward_chunk=None,
    schedulers=(),
    port_scheduler=(-1,),
    table=MappingProxyType({(k, w): ClassTiming(1.0, ((0,),), (1.0,), 1.0)
                            for k in (*FALLBACK, "alu") for w in WIDTH_KEYS}),
)
