"""Address registers that a loop's preheader sets a constant apart, put on one base.

LLVM may reach one buffer through several registers that it sets before a loop and the loop
leaves alone: in a MobileNetV2 1 x 1 conv2d on Zen 3 (``docs/bench/zen3-heldout7-pools``,
``mobilenetv2-fused_conv2d18_add12_add14`` #177), ``lea r15, [r14 + r13]`` and ``lea rax,
[r14 + r13 + 0x20]`` precede a reduction loop that keeps 16 rows of 14 floats in memory, each
moved as 8 lanes through ``r15`` and 6 masked lanes through ``rax``. The simulator compares
addresses through the same register only (:mod:`tuna.cpu.simulator.dependencies`), so it did not
see that each row's load overlaps the previous row's masked store without lying inside it,
and that the rows' updates wait for one another through memory: it predicted 231 cycles an
iteration where the candidate runs about 420. :func:`rebase` rewrites the loop's memory
operands onto one register of each such group, with the difference added to the
displacement, so that the simulator places the accesses against each other.

x86-64 only; works on :class:`~tuna.ir.Instruction` text and register lists.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from ..ir import Instruction
from .simulator.decode_x86 import x86_address
from .simulator.registers import canonical, parse_int, split_operands

#: Registers a call may change (the System V AMD64 ABI's caller-saved ones).
CALLER_SAVED = frozenset({"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"})

_MEMORY = re.compile(r"\[([^\]]*)\]")

#: A register's value at the loop's entry: a sum of (register, scale) terms and a displacement.
Value = tuple[tuple[tuple[str, int], ...], int]


def _written(ins: Instruction) -> set[str]:
    out = {canonical("x86-64", w) for w in ins.writes}
    if ins.klass == "call":
        out |= CALLER_SAVED
    out.discard(None)
    out.discard("flags")
    return out


def entry_values(preheader: Sequence[Instruction]) -> dict[str, Value]:
    """The 64-bit registers whose value ``preheader`` leaves as a sum of other registers and a
    constant (``lea``, a register move, ``add``/``sub`` of a constant), where no later
    instruction of it changes the registers summed."""
    values: dict[str, Value] = {}
    for ins in preheader:
        ops = split_operands(ins.operands)
        dest = ops[0] if len(ops) == 2 and canonical("x86-64", ops[0], True) == ops[0] else None
        new: Value | None = None
        if dest is None:
            pass
        elif ins.mnemonic == "lea" and ops[1].startswith("[") and "rip" not in ops[1]:
            _, disp, regs, scales = x86_address(ops[1][1:-1])
            if len(regs) == 1 and scales == (1,) and regs[0] in values:  # a step, or a copy moved on
                new = (values[regs[0]][0], values[regs[0]][1] + disp)
            elif regs and dest not in regs:
                new = (tuple(sorted(zip(regs, scales))), disp)
        elif ins.mnemonic == "mov" and canonical("x86-64", ops[1], True) == ops[1] != dest:
            new = values.get(ops[1], (((ops[1], 1),), 0))
        elif ins.mnemonic in ("add", "sub") and dest in values and parse_int(ops[1]) is not None:
            step = parse_int(ops[1])
            new = (values[dest][0], values[dest][1] + (step if ins.mnemonic == "add" else -step))
        if new is not None and any(r == dest for r, _ in new[0]):
            new = None  # the register summed is the one overwritten
        written = _written(ins)
        for reg in list(values):
            if reg in written or any(r in written for r, _ in values[reg][0]):
                del values[reg]
        if new is not None:
            values[dest] = new
    return values


def rebase(loop: Sequence[Instruction], preheader: Sequence[Instruction], isa: str) -> tuple[Instruction, ...]:
    """``loop``'s instructions with the memory operands of registers that ``preheader`` sets a
    constant apart (and the loop does not write) rewritten onto the one of them with the lowest
    value; the loop unchanged where there are none (or off x86-64)."""
    if isa != "x86-64" or not preheader:
        return tuple(loop)
    written = set().union(*(_written(ins) for ins in loop)) if loop else set()
    values = {r: v for r, v in entry_values(preheader).items() if r not in written}
    # A base register the preheader does not set is its own value (another may be set from it).
    for ins in loop:
        for inner in _MEMORY.findall(ins.operands):
            _, _, regs, scales = x86_address(inner)
            for r, s in zip(regs, scales):
                if s == 1 and r not in written and r not in values and r != "rip":
                    values[r] = (((r, 1),), 0)
    groups: dict[tuple, list[tuple[int, str]]] = {}
    for reg, (terms, disp) in values.items():
        groups.setdefault(terms, []).append((disp, reg))
    moved: dict[str, tuple[str, int]] = {}
    for members in groups.values():
        if len(members) > 1:
            base_disp, base = min(members)
            moved.update({reg: (base, disp - base_disp) for disp, reg in members if reg != base})
    if not moved:
        return tuple(loop)
    return tuple(_rewritten(ins, moved) for ins in loop)


def _rewritten(ins: Instruction, moved: dict[str, tuple[str, int]]) -> Instruction:
    """``ins`` with each memory operand based on a register of ``moved`` put on its new base."""
    changed = False

    def swap(match: re.Match) -> str:
        nonlocal changed
        _, disp, regs, scales = x86_address(match.group(1))
        if not any(r in moved and s == 1 for r, s in zip(regs, scales)):
            return match.group(0)
        terms = []
        for r, s in zip(regs, scales):
            if s == 1 and r in moved and not changed:
                r, shift = moved[r]
                disp += shift
                changed = True
            terms.append(r if s == 1 else f"{r}*{s}")
        text = " + ".join(terms)
        return f"[{text} + {disp:#x}]" if disp > 0 else f"[{text} - {-disp:#x}]" if disp < 0 else f"[{text}]"

    operands = _MEMORY.sub(swap, ins.operands)
    if not changed:
        return ins
    outside = _MEMORY.sub("", operands)
    reads = []
    for r in ins.reads:
        c = canonical("x86-64", r)
        new = moved[c][0] if c in moved and c not in outside else r
        if new not in reads:
            reads.append(new)
    for r in (base for base, _ in moved.values()):
        if r in operands and r not in reads:
            reads.append(r)
    return replace(ins, operands=operands, reads=tuple(reads))
