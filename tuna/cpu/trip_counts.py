"""Trip counts of machine loops, from the code around their induction registers.

Recovers, for a natural loop of a function (:mod:`tuna.cpu.cfg`), how many times it runs
per entry where the code shows it: the forms LLVM emits for counted loops (a step and a
compare-and-branch on an immediate bound or a register holding a constant, counting to zero,
testing in the header), starts that are constants written on the dominator chain or the
exit value of the counted loop before, spilled counters reloaded in the latch, and
two-iteration loops turned into flag tests (the paper's register value map). Works on
:class:`~tuna.ir.Instruction` text and register lists only (no Capstone, no networkx import).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from ..ir import Instruction
from .isa import X86_GPR_ALIASES

#: The x86 32-bit registers, and all the low parts, by the register they belong to.
_X86_32 = {names[0]: full for full, names in X86_GPR_ALIASES.items()}
_X86_LOW = {name: full for full, names in X86_GPR_ALIASES.items() for name in names}


def _reg64(reg: str) -> str:
    """The full-width register a 32-bit alias writes (eax -> rax, r8d -> r8, w3 -> x3)."""
    if reg in _X86_32:
        return _X86_32[reg]
    if reg.startswith("w") and reg[1:].isdigit():
        return "x" + reg[1:]
    return reg


def immediate(text: str, bits: int = 64) -> int | None:
    """An immediate operand as a signed integer of ``bits`` bits (None if not an immediate)."""
    text = text.strip().lstrip("#$")
    try:
        value = int(text, 0)
    except ValueError:
        return None
    if value >= 1 << (bits - 1) and value < 1 << bits:
        value -= 1 << bits
    return value


def register_bits(reg: str) -> int:
    """Bits of a general-purpose register as named: 32 for a 32-bit alias (``eax``, ``r8d``,
    AArch64 ``w3``), else 64."""
    return 32 if _reg64(reg) != reg else 64


def operand_list(ins: Instruction) -> list[str]:
    """An instruction's operands, an AArch64 shifted immediate folded into one (:func:`_split`)."""
    return _split(ins.operands)


_SHIFT = re.compile(r"^lsl #(\d+)$")


@cache
def _split(operands: str) -> list[str]:
    """Operands, with an AArch64 shifted immediate (``#0x10, lsl #12``) folded into one value."""
    ops = [o.strip() for o in operands.split(",")] if operands else []
    if len(ops) >= 2 and (m := _SHIFT.match(ops[-1])) and (k := immediate(ops[-2])) is not None:
        ops[-2:] = [hex(k << int(m.group(1)))]
    return ops


def register_step(isa: str, ins: Instruction) -> tuple[str, int] | None:
    """``(register, constant increment)`` when ``ins`` adds a constant to a register."""
    ops, mnem = operand_list(ins), ins.mnemonic
    if isa == "x86-64":
        if mnem in ("add", "sub") and len(ops) == 2 and (k := immediate(ops[1], register_bits(ops[0]))) is not None:
            return _reg64(ops[0]), k if mnem == "add" else -k
        if mnem in ("inc", "dec") and len(ops) == 1:
            return _reg64(ops[0]), 1 if mnem == "inc" else -1
    elif mnem in ("add", "sub", "adds", "subs") and len(ops) == 3 and ops[0] == ops[1]:
        if (k := immediate(ops[2])) is not None:
            return _reg64(ops[0]), k if mnem.startswith("add") else -k
    return None


def _constant(isa: str, ins: Instruction) -> int | None:
    """The value ``ins`` puts in its destination register, when it is a constant."""
    ops, mnem = operand_list(ins), ins.mnemonic
    if mnem == "mov" and len(ops) == 2:
        if ops[1] in ("wzr", "xzr"):
            return 0
        return immediate(ops[1], register_bits(ops[0]))
    if mnem == "xor" and len(ops) == 2 and ops[0] == ops[1]:
        return 0
    return None


def _on_chain(block: int, by_start, idom, found) -> Iterator[tuple[int, Instruction]]:
    """The instructions for which ``found`` holds on the dominator chain ending at ``block``, last first."""
    seen = set()
    while block not in seen:
        seen.add(block)
        for ins in reversed(by_start[block].instructions):
            if found(ins):
                yield block, ins
        if idom.get(block, block) == block:
            return
        block = idom[block]


def _last_on_chain(block: int, by_start, idom, found) -> tuple[int, Instruction] | None:
    """The last instruction for which ``found`` holds on the dominator chain ending at ``block``, with its block."""
    return next(_on_chain(block, by_start, idom, found), None)


def _movk(ins: Instruction) -> tuple[int, int] | None:
    """``(imm, shift)`` of an AArch64 ``movk`` (it replaces 16 bits of its register)."""
    ops = [o.strip() for o in ins.operands.split(",")]
    shift = _SHIFT.match(ops[2]) if len(ops) == 3 else None
    imm = immediate(ops[1]) if len(ops) >= 2 else None
    if imm is None or (len(ops) == 3 and shift is None):
        return None
    return imm, int(shift.group(1)) if shift else 0


@dataclass(frozen=True)
class Induction:
    """How a counted loop runs: ``trips`` iterations; ``reg`` goes from ``init`` by ``step``."""

    trips: int
    reg: str | None = None
    init: int = 0
    step: int = 0
    exits_at_header: bool = False  # ``trips`` counts the header's runs; the step runs one time fewer


class LoopFlow:
    """One function's control flow and loops, for the constant values registers hold.

    A loop's induction is worked out on demand and kept, because the start of one loop's
    counter can be the exit value of the loop before it (LLVM reuses the register of
    consecutive unrolled copies: ``[0x8000, 0x10000)`` then ``[0x10000, 0x18000)``).

    Parameters
    ----------
    isa : str
        The function's instruction set.
    by_start : dict
        Basic blocks by start address.
    graph : networkx.DiGraph
        The control-flow graph over block start addresses.
    idom : dict
        Immediate dominator of each block.
    bodies, latches : dict
        Blocks and latches (sources of back edges) of each loop, by header.
    """

    def __init__(self, isa, by_start, graph, idom, bodies, latches):
        self.isa, self.by_start, self.graph, self.idom = isa, by_start, graph, idom
        self.bodies, self.latches = bodies, latches
        self._inductions: dict[int, Induction | None] = {}

    def induction(self, header: int) -> Induction | None:
        """How the loop at ``header`` counts, or None where the code does not show it."""
        if header not in self._inductions:
            self._inductions[header] = None  # a loop whose start depends on itself has none
            self._inductions[header] = _induction(self, header)
        return self._inductions[header]

    def value_before(self, reg: str, block: int, alias=_reg64, into: int | None = None) -> int | None:
        """Constant value of ``reg`` at the end of ``block``, from the last write on its dominator chain.

        ``alias`` maps a written register to the one it belongs to (:func:`architectural_register` also
        counts 8- and 16-bit writes). A write that is a counted loop's step, in a loop that
        ``into`` (the block entered from ``block``; ``block`` itself by default) lies
        outside, leaves the counter's exit value.
        """
        pieces = []  # movk halfwords, last first, over the value written before them
        for at, ins in _on_chain(block, self.by_start, self.idom, lambda i: reg in (alias(w) for w in i.writes)):
            if ins.mnemonic == "movk":
                if (piece := _movk(ins)) is None:
                    return None
                pieces.append(piece)
                continue
            value = _constant(self.isa, ins)
            if value is None:
                value = self._exit_value(reg, at, ins, block if into is None else into)
            break
        else:
            return None
        for imm, shift in reversed(pieces):
            value = None if value is None else value & ~(0xFFFF << shift) | imm << shift
        return value

    def _exit_value(self, reg: str, at: int, ins: Instruction, into: int) -> int | None:
        """The value a counted loop's step ``ins`` in block ``at`` leaves in ``reg`` on the way to ``into``."""
        if (st := register_step(self.isa, ins)) is None or st[0] != reg:
            return None
        left = [h for h, body in self.bodies.items() if at in body and into not in body]
        if not left:
            return None
        ind = self.induction(min(left, key=lambda h: len(self.bodies[h])))
        return ind.init + (ind.trips - ind.exits_at_header) * ind.step if ind and ind.reg == reg else None


def _induction(flow: LoopFlow, header: int) -> Induction | None:
    """Iterations from the latch's compare-and-branch and the induction register's step.

    Handles the forms LLVM emits for counted loops: ``add r, k; cmp r, B; jne`` (bound
    an immediate or a register holding a constant), ``add r, k; jne`` counting to zero
    from a negative start, ``subs x, x, #k; b.ne`` and ``sub; cbnz``, the step also a
    register holding a constant, and loops that test in their header (:func:`_header_exit`).
    The start value is the last constant written to the register on the dominator chain of
    the preheader (``mov``, ``mov``+``movk``), or what the counted loop before it left there;
    for a counter the latch copies out of another register, steps and copies back, that
    register's start.
    """
    isa, by_start, body, latches = flow.isa, flow.by_start, flow.bodies[header], flow.latches[header]
    outside = [p for p in flow.graph.predecessors(header) if p not in body]
    if len(outside) != 1:
        return None
    written = {_reg64(w) for b in body for ins in by_start[b].instructions for w in ins.writes}

    def step_of(ins: Instruction) -> tuple[str, int] | None:
        """A constant step, also by a register the loop does not write (``adds x2, x2, x26``)."""
        if (st := register_step(isa, ins)) is not None:
            return st
        ops, mnem = operand_list(ins), ins.mnemonic
        if isa == "x86-64":
            src = ops[1] if mnem in ("add", "sub") and len(ops) == 2 else None
        else:
            src = ops[2] if mnem in ("add", "sub", "adds", "subs") and len(ops) == 3 and ops[0] == ops[1] else None
        if src is None or "[" in src or _reg64(src) in written:
            return None
        k = flow.value_before(_reg64(src), outside[0], into=header)
        return None if k is None else (_reg64(ops[0]), k if mnem.startswith("add") else -k)

    steps: dict[str, int] = {}
    for start in body:
        for ins in by_start[start].instructions:
            st = step_of(ins)
            if st is not None:
                reg, k = st
                steps[reg] = steps.get(reg, 0) + k if reg in steps else k
            else:
                for w in ins.writes:
                    if _reg64(w) in steps and _reg64(w) not in ("rflags", "nzcv"):
                        steps[_reg64(w)] = 0  # also written some other way: not an induction

    def start_of(reg: str) -> int | None:
        return flow.value_before(reg, outside[0], into=header)

    def copied_back(src: str, reg: str) -> bool:
        """Whether the loop writes ``src`` only by copying ``reg`` into it (``mov r13, rax``)."""
        writes = [ins for b in body for ins in by_start[b].instructions if src in (_reg64(w) for w in ins.writes)]
        return bool(writes) and all(
            ins.mnemonic == "mov" and [_reg64(o) for o in operand_list(ins)] == [src, reg] for ins in writes
        )

    def trips(reg: str, bound: int, latch_instrs=(), pos: int = 0) -> Induction | None:
        step, init = steps.get(reg, 0), start_of(reg)
        # A register reloaded in the latch (spilled induction variable) steps by what the
        # latch adds after the reload, whatever else reuses the register in the body.
        local = 0
        for ins in reversed(latch_instrs[:pos]):
            if (st := step_of(ins)) is not None and st[0] == reg:
                local += st[1]
            elif reg in (_reg64(w) for w in ins.writes):
                step = local
                ops = operand_list(ins)
                if ins.mnemonic in ("mov", "ldr", "ldur") and len(ops) == 2 and "[" in ops[1]:
                    # The slot is set before the loop, or stored from the register at its top.
                    slot = _slot_value(ops[1][ops[1].index("[") :], outside[0], by_start, flow.idom)
                    init = init if slot is None else slot
                elif ins.mnemonic == "mov" and len(ops) == 2 and copied_back(src := _reg64(ops[1]), reg):
                    # The counter lives in another register that the latch copies out, steps
                    # and copies back (`mov rax, r13; inc rax; mov r13, rax; cmp rax, B`):
                    # it starts where that register does, where the code shows that.
                    home = start_of(src)
                    init = init if home is None else home
                break
        else:
            # LLVM steps a rotated loop's counter in its latch; other steps of the same
            # register elsewhere in the body belong to inner code that reuses it.
            step = local or step
        if not step or init is None:
            return None
        n = -(-(bound - init) // step)
        return Induction(n, reg, init, step) if n > 0 else None

    for latch in latches:
        instrs = by_start[latch].instructions
        for pos in range(len(instrs) - 1, -1, -1):
            ins, ops = instrs[pos], operand_list(instrs[pos])
            if ins.mnemonic in ("cmp", "cmn") and len(ops) == 2:
                reg = _reg64(ops[0])
                bound = immediate(ops[1], register_bits(ops[0]))
                if bound is None:
                    bound = start_of(_reg64(ops[1]))
                if bound is not None and (n := trips(reg, -bound if ins.mnemonic == "cmn" else bound, instrs, pos)):
                    return n
                break
            if ins.mnemonic in ("cbnz", "cbz") and ops:
                return trips(_reg64(ops[0]), 0)
            st = step_of(ins)
            if st is not None and (isa == "x86-64" or ins.mnemonic in ("adds", "subs")):
                return trips(st[0], 0)  # the increment sets the flags: runs until zero
            if "rflags" in ins.writes or "nzcv" in ins.writes:
                break
    if (ind := _header_exit(flow, header, trips)) is not None:
        return ind
    n = _flag_trips(flow, header, outside[0])
    return None if n is None else Induction(n)


def _header_exit(flow: LoopFlow, header: int, count: Callable[[str, int], Induction | None]) -> Induction | None:
    """A loop that tests its counter in the header and leaves from there (``cbz x17, exit``).

    The latch only steps the counter and jumps back, so the header runs once more than
    the rest of the body: ``trips(reg, bound)`` steps, then the header's final test.
    """
    blk = flow.by_start[header]
    latches, body = flow.latches[header], flow.bodies[header]
    if len(latches) != 1 or latches[0] == header or not blk.instructions:
        return None
    last, ops = blk.instructions[-1], operand_list(blk.instructions[-1])
    target = immediate(ops[-1]) if ops else None
    if target is None or target in body or not any(s in body for s in blk.successors):
        return None  # the branch taken must leave the loop, the fall-through stay in it
    if last.mnemonic == "cbz" and len(ops) == 2:
        reg, bound = _reg64(ops[0]), 0
    elif last.mnemonic in ("b.eq", "je", "jz"):
        test = next((i for i in reversed(blk.instructions[:-1]) if {"nzcv", "rflags"} & set(i.writes)), None)
        test_ops = operand_list(test) if test is not None else []
        if test is None or test.mnemonic != "cmp" or len(test_ops) != 2:
            return None
        reg, bound = _reg64(test_ops[0]), immediate(test_ops[1], register_bits(test_ops[0]))
        if bound is None:
            return None
    else:
        return None
    if any(reg in (_reg64(w) for w in i.writes) for i in blk.instructions):
        return None  # stepped before its test: the header runs as often as the rest
    ind = count(reg, bound)
    return None if ind is None else Induction(ind.trips + 1, reg, ind.init, ind.step, exits_at_header=True)


_CONTINUE_IF_SET = {"jne": True, "jnz": True, "je": False, "jz": False, "tbnz": True, "tbz": False,
                    "cbnz": True, "cbz": False}
#: Iterations the flag-loop interpreter follows before giving up.
_FLAG_LIMIT = 16


def architectural_register(reg: str) -> str:
    """The architectural register any low-part alias names (dl -> rdx, r8b -> r8, w3 -> x3).

    The x86 high bytes (``ah``) are not followed: LLVM keeps no counters or flags in them.
    """
    if reg in _X86_LOW:
        return _X86_LOW[reg]
    return _reg64(reg)


def _slot_value(slot: str, block: int, by_start, idom) -> int | None:
    """Constant last stored to the stack slot ``slot`` on the dominator chain ending at ``block``."""

    def stores_slot(ins: Instruction) -> bool:
        ops = operand_list(ins)
        if ins.klass != "store" or not ops:
            return False
        if ins.mnemonic in ("str", "stur"):
            return ops[-1] == slot
        return len(ops) == 2 and ops[0].endswith(slot)

    hit = _last_on_chain(block, by_start, idom, stores_slot)
    if hit is None:
        return None
    ops = operand_list(ins := hit[1])
    if ins.mnemonic in ("str", "stur"):
        return 0 if ops[0] in ("wzr", "xzr") else None
    return immediate(ops[1])


def _flag_trips(flow: LoopFlow, header: int, preheader: int) -> int | None:
    """Iterations of a loop whose latch tests a flag register rather than a counter.

    LLVM turns a 2-iteration TIR loop into ``mov f, 1`` before the loop and ``test f, 1;
    mov f, 0; jne header`` in the latch (sometimes through copies). This follows the
    loop's constant registers iteration by iteration (the paper's register value map)
    until the latch's condition ends it.
    """
    isa, by_start, body, latches = flow.isa, flow.by_start, flow.bodies[header], flow.latches[header]
    if len(latches) != 1:
        return None
    latch = by_start[latches[0]]
    last = latch.instructions[-1] if latch.instructions else None
    if last is None or last.mnemonic not in _CONTINUE_IF_SET:
        return None
    if isa == "x86-64":  # a flag loop tests its flag; a compare is a counter the caller could not read
        tester = next((i for i in reversed(latch.instructions[:-1]) if "rflags" in i.writes), None)
        if tester is None or tester.mnemonic != "test":
            return None
    ops = operand_list(last)
    target = immediate(ops[-1]) if ops else None
    if target is None or header not in by_start[latches[0]].successors:
        return None
    # Whether the loop goes on when the branch is taken, and when the tested value is set.
    goes_on_if_taken = target == header
    state: dict[str, int | None] = {}

    def value(reg: str) -> int | None:
        reg = architectural_register(reg)
        if reg in ("xzr", "wzr"):
            return 0
        if reg not in state:
            state[reg] = flow.value_before(reg, preheader, alias=architectural_register, into=header)
        return state[reg]

    def execute(ins) -> bool | None:
        """Run one instruction on ``state``; the tested truth value for test/branch forms."""
        ops, mnem = operand_list(ins), ins.mnemonic
        if mnem == "test" and len(ops) == 2:
            a, b = value(ops[0]), (value(ops[1]) if immediate(ops[1]) is None else immediate(ops[1]))
            return None if a is None or b is None else bool(a & b)
        if mnem in ("tbnz", "tbz") and len(ops) == 3 and (bit := immediate(ops[1])) is not None:
            a = value(ops[0])
            return None if a is None else bool(a >> bit & 1)
        if mnem in ("cbnz", "cbz") and len(ops) == 2:
            a = value(ops[0])
            return None if a is None else a != 0
        const = _constant(isa, ins)
        if const is None and mnem in ("mov", "movzx", "movsx") and len(ops) == 2 and "[" not in ops[1]:
            const = value(ops[1])
        if (st := register_step(isa, ins)) is not None:
            base = value(st[0])
            const = None if base is None else base + st[1]
        for w in ins.writes:
            if architectural_register(w) not in ("rflags", "nzcv", "rip", "rsp", "sp"):
                state[architectural_register(w)] = const
        return None

    # The latch runs last and its own test decides: blocks of inner loops, which may lie at
    # lower addresses than the latch, have flag tests of their own.
    inner = [b for b in sorted(body) if b not in (header, latches[0])]
    order = [header, *inner] if header == latches[0] else [header, *inner, latches[0]]
    for iteration in range(1, _FLAG_LIMIT + 1):
        truth = None
        for start in order:
            for ins in by_start[start].instructions:
                result = execute(ins)
                if start == latches[0] and (result is not None or ins.mnemonic in ("test", "cmp")):
                    truth = result
        if truth is None:
            return None
        if (truth == _CONTINUE_IF_SET[last.mnemonic]) != goes_on_if_taken:
            return iteration
    return None
