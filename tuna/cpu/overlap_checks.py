"""LLVM's run-time overlap checks, and the branches they decide, in TVM's machine code.

When LLVM's loop vectorizer cannot prove that a loop's stores and loads touch different
memory, it versions the loop: a check computes the distance between the store pointer and a
load pointer (``sub``), compares it, unsigned, with the bytes one vector iteration covers
(vector lanes x interleave x element size, a power of two), and branches to a scalar copy
of the loop when it is smaller. TVM's outlined parallel bodies get their buffers from a
closure, without the no-alias attribute, so their copy loops carry such checks; but TVM's
buffers are separate allocations, and the check never sends a TVM kernel to the scalar
copy. Weighting both versions as a branch of even odds (:mod:`tuna.cpu.loop_mapping`)
counted a MobileNetV2 depthwise convolution's scalar fallback, a loop of eight scalar
copies with a test per element, as run on every row.

Recognised: a 64-bit register written by a register-register subtraction and compared,
unsigned, with such a constant (``cmp`` then ``jb``/``jae`` on x86, ``b.lo``/``b.hs`` on
AArch64), and later compares of the same value in blocks the check dominates while no path
from the check rewrites the register (LLVM tests it again where the two versions' shared
remainder ends). LLVM's other form, a pair of range compares of start and end pointers
combined with ``and``, is not recognised. Its test that a run-time trip count reaches one
vector iteration has the same form when the count is a difference of two 64-bit registers
(TVM's trip counts are mostly constants); read as a check, it assumes the vector loop runs.
Works on :class:`~tuna.ir.Instruction` text and register lists, and the control-flow graph
(networkx).
"""

from __future__ import annotations

import networkx as nx

from ..ir import MachineCode
from .cfg import dominates, flow_graph
from .trip_counts import architectural_register, immediate, operand_list, register_bits

#: Fewest bytes one vector iteration covers (a 16-byte vector register, no interleave).
MIN_CHECK_BYTES = 16
#: Unsigned conditional branches by what they test of ``register - operand``, per ISA spelling.
_BELOW = frozenset({"jb", "jnae", "jc", "b.lo", "b.cc"})
_ABOVE_OR_EQUAL = frozenset({"jae", "jnb", "jnc", "b.hs", "b.cs"})
_ABOVE = frozenset({"ja", "jnbe", "b.hi"})
_BELOW_OR_EQUAL = frozenset({"jbe", "jna", "b.ls"})
_UNSIGNED = _BELOW | _ABOVE_OR_EQUAL | _ABOVE | _BELOW_OR_EQUAL


def _compare(code: MachineCode, pos: int) -> tuple[str, int, str] | None:
    """``(register, constant, branch)`` when block ``pos`` ends in ``cmp REG, IMM`` and an unsigned branch."""
    ins = code.blocks[pos].instructions
    if len(ins) < 2 or ins[-1].mnemonic not in _UNSIGNED or ins[-2].mnemonic != "cmp":
        return None
    ops = operand_list(ins[-2])
    if (len(ops) != 2 or (imm := immediate(ops[1])) is None or register_bits(ops[0]) != 64
            or not ops[0].startswith(("r", "x"))):
        return None
    return ops[0], imm, ins[-1].mnemonic


def _is_distance(code: MachineCode, pos: int, reg: str) -> bool:
    """Whether ``reg``, compared at the end of block ``pos``, was last written there by a register subtraction."""
    for ins in reversed(code.blocks[pos].instructions[:-2]):
        if reg in (architectural_register(w) for w in ins.writes):
            ops = operand_list(ins)
            if ins.mnemonic != "sub" or len(ops) not in (2, 3) or ops[0] != reg:
                return False
            subtrahend = ops[-1]  # a register, not a constant or memory
            return register_bits(subtrahend) == 64 and immediate(subtrahend) is None and "[" not in subtrahend
    return False


def never_taken(code: MachineCode) -> frozenset[tuple[int, int]]:
    """Control-flow edges ``(block, successor)`` that only a failed overlap check would take.

    Parameters
    ----------
    code : MachineCode
        One disassembled function.

    Returns
    -------
    frozenset of tuple of int
        For every conditional branch that an overlap check decides, the edge to the scalar
        version (empty when the function has no check).
    """
    compares = {pos: found for pos in range(len(code.blocks)) if (found := _compare(code, pos))}
    checks = {
        pos: (reg, imm)
        for pos, (reg, imm, branch) in compares.items()
        if branch in _BELOW | _ABOVE_OR_EQUAL
        and imm >= MIN_CHECK_BYTES
        and imm & (imm - 1) == 0
        and _is_distance(code, pos, reg)
    }
    if not checks:
        return frozenset()
    graph, idom = flow_graph(code)
    by_start = {blk.start: blk for blk in code.blocks}
    dead: set[tuple[int, int]] = set()
    for pos, (reg, bytes_) in checks.items():
        check = code.blocks[pos].start
        rest = graph.subgraph(n for n in graph if n != check)
        after = set().union(*(nx.descendants(rest, s) | {s} for s in graph.successors(check) if s != check))
        for other, (oreg, imm, branch) in compares.items():
            blk = code.blocks[other]
            if oreg != reg:
                continue
            if other != pos:  # a later test of the same value, unless a path from the check rewrites it
                if blk.start not in after or not dominates(idom, check, blk.start):
                    continue
                between = (after & nx.ancestors(rest, blk.start)) - {blk.start}
                writes = [ins for n in between for ins in by_start[n].instructions] + list(blk.instructions[:-2])
                if any(reg in (architectural_register(w) for w in ins.writes) for ins in writes):
                    continue
            # The value is at least ``bytes_``: a branch on it either always or never jumps.
            if (branch in _BELOW and imm <= bytes_) or (branch in _BELOW_OR_EQUAL and imm < bytes_):
                taken = False
            elif (branch in _ABOVE_OR_EQUAL and imm <= bytes_) or (branch in _ABOVE and imm < bytes_):
                taken = True
            else:
                continue
            if len(blk.successors) == 2 and blk.successors[0] != blk.successors[1]:
                target, fall = blk.successors
                dead.add((blk.start, fall if taken else target))
    return frozenset(dead)
