"""Micro-operations: what an instruction decodes into, for the simulator.

The types every decoder produces (:class:`MicroOp`, :class:`Decoded`) and :func:`uop`, which
builds a micro-op with its counting category (:data:`tuna.cpu.isa.KIND_OF`). They sit apart
from :mod:`~tuna.cpu.simulator.decoding` so that the per-ISA decoders and the dispatch over
them import them without a circle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..isa import KIND_OF


@dataclass(frozen=True)
class MicroOp:
    """One micro-operation of a decoded instruction.

    Attributes
    ----------
    klass : str
        Timing class (looked up in the machine's data file).
    width : int
        Operand width in bits that selects width-dependent timing (64 for scalar).
    reads, writes : tuple of str
        Canonical registers (``rax``, ``v3``, ``x1``, ``flags``); ``~0``, ``~1`` name values
        passed between the micro-ops of one instruction.
    kind : str
        Counting category, one of :data:`tuna.cpu.isa.KINDS`.
    mem : tuple or None
        For loads and store data, ``(address_key, offset, size_bytes, address_registers,
        scales)``, a scale for each address register: accesses with the same key and
        overlapping ranges touch the same memory when the block does not change their
        address registers, or only steps them (:attr:`Decoded.step`).
    """

    klass: str
    width: int
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    kind: str = "other"
    mem: tuple | None = None


@dataclass(frozen=True)
class Decoded:
    """An instruction's micro-ops and what the front end sees of it.

    Attributes
    ----------
    uops : tuple of MicroOp
        In execution order; empty for a NOP.
    slots : int
        Front-end (dispatch) slots the instruction takes.
    broadcast : bool
        Whether it broadcasts a scalar to all lanes (from memory or a register).
    fusible : bool
        An x86 ALU instruction a following conditional branch may fuse with (one slot).
    unlaminated : bool
        An x86 load-op with an indexed address and three operands, which Intel cores split
        into two slots (``Uarch.unlaminate_indexed``).
    step : tuple of (str, int) or None
        ``(register, constant)`` for an instruction that only adds a constant to a register
        (a loop's induction update), where the decoder recognises one.
    writeback : tuple of (str, int) or None
        ``(base register, constant)`` for an AArch64 load or store that also steps its base
        by a constant (post-index ``[x1], #16``, pre-index ``[x1, #16]!``). Not a
        :attr:`step`: the instruction does more than add.
    """

    uops: tuple[MicroOp, ...]
    slots: int = 1
    broadcast: bool = False
    fusible: bool = False  # an x86 ALU op that a following Jcc may fuse with
    unlaminated: bool = False  # an x86 load-op with an indexed address and three operands
    step: tuple[str, int] | None = None
    writeback: tuple[str, int] | None = None


def uop(klass: str, width: int, reads: Iterable[str], writes: Iterable[str], mem=None) -> MicroOp:
    """A micro-op of timing class ``klass``, its registers deduplicated in order, empty names dropped."""
    reads = tuple(dict.fromkeys(r for r in reads if r))
    writes = tuple(dict.fromkeys(w for w in writes if w))
    return MicroOp(klass, width, reads, writes, KIND_OF.get(klass, "other"), mem)

