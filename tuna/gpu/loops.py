"""Loops of a PTX kernel and their trip counts (the Tuna paper's Algorithm 3).

A loop is a backward branch: the span from the label it jumps to up to the branch.
Its trip count comes from registers: the *initial value map* holds what each integer
register holds when the loop is entered (constant propagation over the code before the
loop header, special registers such as ``%tid.x`` bound to a chosen thread), the *update
map* is the loop body's integer instructions that the controlling ``setp`` depends on.
Running the update map from the initial values until the branch condition fails gives
the iterations; the compared register's initial value, step and bound are kept for
reports. A special register is unknown but bounded: the count is evaluated for the
first and the last thread of the block and the larger is kept (the warp runs until its
last thread leaves the loop).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .ptx import PtxInstruction, PtxKernel, branch_target

#: Iterations after which a loop's trip count is given up as unknown.
MAX_TRIPS = 1 << 16
#: Weight of a loop whose trip count cannot be read from the registers.
UNKNOWN_TRIPS = 1


@dataclass(frozen=True)
class PtxLoop:
    """A loop of a PTX kernel.

    Attributes
    ----------
    header : int
        Index of the loop's first instruction (the branch target).
    latch : int
        Index of the backward branch.
    trips : int or None
        Iterations per entry; None when the registers do not tell.
    counter : str or None
        The register the controlling ``setp`` compares.
    init, step, bound : int or None
        Its value on entry, its change per iteration (None when not constant) and the
        value it is compared against.
    thread_dependent : bool
        True when the trip count differs between the block's first and last thread.
    """

    header: int
    latch: int
    trips: int | None
    counter: str | None = None
    init: int | None = None
    step: int | None = None
    bound: int | None = None
    thread_dependent: bool = False

    def contains(self, index: int) -> bool:
        """Whether instruction ``index`` lies in the loop."""
        return self.header <= index <= self.latch


@dataclass(frozen=True)
class LoopAnalysis:
    """Loops of one kernel and how often each instruction runs per thread."""

    loops: tuple[PtxLoop, ...]
    weights: tuple[float, ...]

    def dynamic(self, kernel: PtxKernel, klass: str | None = None, lanes: bool = False) -> float:
        """Executions per thread of instructions of ``klass`` (all when None), times width if ``lanes``."""
        return sum(
            w * (ins.width if lanes else 1)
            for ins, w in zip(kernel.instructions, self.weights)
            if klass is None or ins.klass == klass
        )


_MASK = {8: 0xFF, 16: 0xFFFF, 32: 0xFFFFFFFF, 64: 0xFFFFFFFFFFFFFFFF}


def _bits(opcode: str) -> tuple[int, bool]:
    """Bit width and signedness of an integer opcode's type (32, signed by default)."""
    for mod in reversed(opcode.split(".")[1:]):
        if mod[:1] in "sub" and mod[1:].isdigit():
            return int(mod[1:]), mod[0] == "s"
    return 32, True


def _wrap(value: int, bits: int, signed: bool) -> int:
    value &= _MASK.get(bits, _MASK[64])
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def _immediate(text: str) -> int | None:
    text = text.strip()
    try:
        if text.lower().startswith(("0x", "-0x")):
            return int(text, 16)
        return int(text)
    except ValueError:
        return None


_CMP = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lo": lambda a, b: a < b,
    "ls": lambda a, b: a <= b,
    "hi": lambda a, b: a > b,
    "hs": lambda a, b: a >= b,
}


class _State:
    """Register values during evaluation: ints, bools for predicates, None when unknown."""

    def __init__(self, values: dict[str, int | bool | None], specials: Mapping[str, int]) -> None:
        self.values = values
        self.specials = specials

    def read(self, op: str) -> int | bool | None:
        op = op.strip()
        if op.startswith("%"):
            if op in self.specials:
                return self.specials[op]
            return self.values.get(op)
        return _immediate(op)

    def step(self, ins: PtxInstruction) -> None:
        """Execute one instruction's effect on the integer and predicate registers."""
        if not ins.dests:
            return
        if ins.guard is not None:  # a guarded definition: known only when the guard is
            g = self.values.get(ins.guard)
            if g is None:
                for d in ins.dests:
                    self.values[d] = None
                return
            if bool(g) == ins.negated:
                return
        value = self._evaluate(ins)
        if ins.root == "setp" and len(ins.dests) == 2:
            self.values[ins.dests[0]] = value
            self.values[ins.dests[1]] = None if value is None else not value
            return
        for d in ins.dests:
            self.values[d] = value if d == ins.dests[0] else None

    def _evaluate(self, ins: PtxInstruction) -> int | bool | None:
        root = ins.root
        src = [self.read(op) for op in ins.operands[1:]]
        if any(v is None for v in src) or ins.klass in ("fma", "fadd", "fmul", "fp64", "special", "div"):
            return None
        if root not in ("setp", "selp", "mov", "cvt") and any(isinstance(v, bool) for v in src):
            return None
        bits, signed = _bits(ins.opcode)
        mods = ins.opcode.split(".")[1:]
        try:
            if root == "mov" or root == "cvt":
                return src[0]
            if root == "setp":
                cmp = next(m for m in mods if m in _CMP)
                a, b = (_wrap(int(v), bits, signed and cmp not in ("lo", "ls", "hi", "hs")) for v in src[:2])
                return _CMP[cmp](a, b)
            if root == "selp":
                return src[0] if src[2] else src[1]
            if root in ("add", "sub"):
                r = src[0] + src[1] if root == "add" else src[0] - src[1]
            elif root == "mul":
                r = src[0] * src[1]
                bits = bits * 2 if "wide" in mods else bits
            elif root == "mad":
                r = src[0] * src[1] + src[2]
                bits = bits * 2 if "wide" in mods else bits
            elif root == "shl":
                r = src[0] << src[1]
            elif root == "shr":
                r = _wrap(src[0], bits, signed) >> src[1]
            elif root == "and":
                r = src[0] & src[1]
            elif root == "or":
                r = src[0] | src[1]
            elif root == "xor":
                r = src[0] ^ src[1]
            elif root == "neg":
                r = -src[0]
            elif root == "min":
                r = min(src[0], src[1])
            elif root == "max":
                r = max(src[0], src[1])
            else:
                return None
        except (TypeError, ValueError, StopIteration, IndexError):
            return None
        return _wrap(r, bits, signed)


def _slice(body: Sequence[PtxInstruction], wanted: set[str]) -> list[PtxInstruction]:
    """The body's instructions the registers in ``wanted`` depend on (loop-carried included)."""
    need = set(wanted)
    chosen: set[int] = set()
    changed = True
    while changed:
        changed = False
        for ins in reversed(body):
            if ins.index not in chosen and any(d in need for d in ins.dests):
                chosen.add(ins.index)
                new = set(ins.srcs) - need
                if new:
                    need |= new
                    changed = True
    return [ins for ins in body if ins.index in chosen]


def _control(kernel: PtxKernel, header: int, latch: int) -> tuple[PtxInstruction, bool] | None:
    """The branch deciding whether the loop goes on, and whether taking it continues the loop."""
    ins = kernel.instructions[latch]
    if ins.guard is not None:
        return ins, True
    for other in kernel.instructions[header:latch]:
        target = kernel.labels.get(branch_target(other) or "", -1)
        if other.klass == "branch" and other.guard is not None and not header <= target <= latch:
            return other, False
    return None


def _trips(kernel: PtxKernel, header: int, latch: int, specials: Mapping[str, int]) -> tuple[int | None, tuple]:
    found = _control(kernel, header, latch)
    if found is None:
        return None, (None, None, None, None)
    branch, continue_if_taken = found
    body = kernel.instructions[header:latch + 1]
    state = _State({}, specials)
    for ins in kernel.instructions[:header]:  # the initial value map
        state.step(ins)
    setp = next((i for i in reversed(body) if i.index < branch.index and branch.guard in i.dests), None)
    counter = bound = None
    if setp is not None and len(setp.operands) >= 3:
        counter, bound_op = setp.operands[-2].strip(), setp.operands[-1].strip()
        bound = _immediate(bound_op)
    # The update map: what the predicate depends on, before the branch and (for a loop tested at
    # its top) after it, up to the latch.
    update = _slice(list(body), {branch.guard})
    before = [i for i in update if i.index < branch.index]
    after = [i for i in update if i.index > branch.index]
    init = state.read(counter) if counter and counter.startswith("%") else None
    seen: list[int | None] = []
    for n in range(1, MAX_TRIPS + 1):
        if n > 1:
            for ins in after:
                state.step(ins)
        for ins in before:
            state.step(ins)
        if counter is not None and len(seen) < 2:
            seen.append(state.read(counter))
        taken = state.values.get(branch.guard)
        if taken is None:
            return None, (counter, init, None, bound)
        taken = bool(taken) != branch.negated
        if taken != continue_if_taken:
            step = None
            if len(seen) == 2 and None not in seen and isinstance(seen[0], int) and isinstance(seen[1], int):
                step = seen[1] - seen[0]
            return n, (counter, init if isinstance(init, int) else None, step, bound)
    return None, (counter, init, None, bound)


def find_loops(kernel: PtxKernel, threads: int | None = None) -> LoopAnalysis:
    """Loops of ``kernel`` with their trip counts, and each instruction's executions per thread.

    Parameters
    ----------
    kernel : PtxKernel
        The parsed kernel.
    threads : int, optional
        Threads per block (``.maxntid`` when not given), to bound ``%tid``.

    Returns
    -------
    LoopAnalysis
        Loops in program order of their headers, and per-instruction weights: the
        product of the trip counts of the loops around each instruction (a loop whose
        count is unknown weighs :data:`UNKNOWN_TRIPS`).
    """
    ntid = threads or (math.prod(kernel.maxntid) if kernel.maxntid else 1)
    first = {"%tid.x": 0, "%tid.y": 0, "%tid.z": 0, "%ctaid.x": 0, "%ctaid.y": 0, "%ctaid.z": 0}
    last = dict(first, **{"%tid.x": max(ntid - 1, 0)})
    loops = []
    for ins in kernel.instructions:
        target = kernel.labels.get(branch_target(ins) or "")
        if target is None or target > ins.index:
            continue
        lo, info = _trips(kernel, target, ins.index, first)
        hi, _ = _trips(kernel, target, ins.index, last)
        trips = None if lo is None or hi is None else max(lo, hi)
        loops.append(PtxLoop(target, ins.index, trips, *info, thread_dependent=lo != hi))
    loops.sort(key=lambda lp: (lp.header, -lp.latch))
    weights = []
    for ins in kernel.instructions:
        w = 1.0
        for lp in loops:
            if lp.contains(ins.index):
                w *= lp.trips if lp.trips is not None else UNKNOWN_TRIPS
        weights.append(w)
    return LoopAnalysis(tuple(loops), tuple(weights))
