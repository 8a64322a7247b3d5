"""Instruction -> micro-ops, dispatched to the decoder of the instruction set.

The decoders (:mod:`~tuna.cpu.simulator.decode_x86`, :mod:`~tuna.cpu.simulator.decode_aarch64`)
are pure functions of the instruction text and Capstone's register lists, so their results
are memoised on those: candidates of one workload repeat most instruction texts.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from types import MappingProxyType

from ...ir import Instruction
from ..isa import check_isa
from .decode_aarch64 import decode_aarch64
from .decode_x86 import decode_x86
from .microops import Decoded

#: The decoder of each instruction set (one for each of :data:`tuna.cpu.isa.ISAS`).
DECODERS: MappingProxyType[str, Callable[[Instruction], Decoded]] = MappingProxyType(
    {"x86-64": decode_x86, "aarch64": decode_aarch64}
)


@lru_cache(maxsize=65536)
def decode_key(isa: str, mnemonic: str, operands: str, reads: tuple, writes: tuple) -> Decoded:
    """:func:`decode` of the instruction with these fields (memoised; ``isa`` already checked)."""
    return DECODERS[isa](Instruction(0, mnemonic, operands, reads, writes))


def decode(instruction: Instruction, isa: str) -> Decoded:
    """Micro-ops of one instruction.

    Parameters
    ----------
    instruction : Instruction
        As :func:`tuna.cpu.disassembly.disassemble` produced it (Capstone mnemonic, Intel/ARM
        operand text and the registers it reads and writes).
    isa : str
        ``"x86-64"`` or ``"aarch64"``.

    Returns
    -------
    Decoded
        The micro-ops in the order they execute, with the front-end slots the instruction takes.

    Raises
    ------
    UnsupportedISAError
        For another instruction set.
    """
    check_isa(isa)
    return decode_key(isa, instruction.mnemonic, instruction.operands, instruction.reads, instruction.writes)
