"""Object code to functions, instructions and basic blocks (the only module that imports Capstone).

Reads the relocatable ELF objects TVM's LLVM backend writes (pyelftools), finds the kernel
functions in them (those with a symbol, and the outlined parallel-loop bodies that have
none), disassembles each with Capstone (x86-64 with AVX2/AVX-512, AArch64 with NEON) into
:class:`~tuna.ir.Instruction` records (registers read and written, counting class, and for a
direct call the callee its relocation names) and
splits it into basic blocks with their successors. The control-flow graph and its loops
are :mod:`tuna.cpu.cfg`'s.
"""

from __future__ import annotations

import io
import itertools
import re
from functools import cache

import capstone
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from ..errors import AnalysisError, TunaError, UnsupportedISAError
from ..ir import BasicBlock, Instruction, MachineCode
from .isa import arithmetic_class

_ELF_ISA = {"EM_X86_64": "x86-64", "EM_AARCH64": "aarch64"}
_CAPSTONE = {
    "x86-64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64),
    "aarch64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
}

#: Prefix of the names given to code that no symbol covers. LLVM emits TVM's outlined
#: parallel-loop bodies as internal functions without a symbol table entry.
ANONYMOUS = "anon@"
#: Runtime helpers TVM links into every object: not part of the kernel.
RUNTIME_HELPERS = ("__tvm_ffi_", "__tvm_set_raised", "__truncsfhf2", "__extendhfsf2", "__gnu_")
#: Library functions LLVM calls for plain memory work (zeroing or copying a tile).
MEMORY_CALLS = frozenset({"memset", "memcpy", "memmove", "bzero"})
#: Gaps shorter than this are alignment padding, not code.
_MIN_ANONYMOUS_BYTES = 16
_SHF_EXECINSTR = 0x4


def library_call(ins: Instruction) -> bool:
    """Whether an instruction calls out-of-line library code (``expf``, ``tanhf``): the math
    functions the TIR's "math" operations become. TVM's runtime (workspaces, the thread pool)
    is called through function pointers, which no relocation on the call names; its calls and
    ``memset`` can end or open a block of a thousand unrolled multiply-adds (a workspace tile
    zeroed, then freed), which is not code around math calls."""
    return (
        ins.klass == "call"
        and bool(ins.callee)
        and ins.callee not in MEMORY_CALLS
        and not ins.callee.startswith(RUNTIME_HELPERS)
    )


def read_functions(obj: bytes, what: str = "the object code") -> list[tuple[str, str, int, bytes, dict[int, str]]]:
    """``(isa, name, address, code, symbols)`` of every function in an ELF object.

    Functions with a symbol come first; then each stretch of an executable section
    that no symbol covers, named ``anon@<section>+<offset>`` (the outlined bodies of
    parallel loops). Addresses are section offsets; ``symbols`` names, per section offset,
    the symbol a relocation there refers to (a call's target: ``expf``, ``memset``).

    Raises
    ------
    UnsupportedISAError
        For an object of another instruction set.
    AnalysisError
        Naming ``what`` for bytes that are not a readable ELF object.
    """
    try:
        return _read_functions(obj)
    except TunaError:
        raise
    except Exception as err:  # pyelftools raises many kinds (ELFError, struct and construct errors, ...)
        raise AnalysisError(
            f"{what} ({len(obj)} bytes) is not a readable ELF object: {type(err).__name__}: {err}"
        ) from None


def _read_functions(obj: bytes) -> list[tuple[str, str, int, bytes, dict[int, str]]]:
    elf = _Object(obj)
    isa = _ELF_ISA.get(elf.machine)
    if isa is None:
        raise UnsupportedISAError(f"object code for {elf.machine} cannot be analysed; supported: x86-64, aarch64")
    symbols = _relocated_symbols(elf)
    funcs = []
    covered: dict[int, list[tuple[int, int]]] = {}
    for sym in elf.symbols(elf.symtab) if elf.symtab is not None else ():
        if sym["st_info"]["type"] != "STT_FUNC" or not sym["st_size"] or not isinstance(sym["st_shndx"], int):
            continue
        data = elf.data(sym["st_shndx"])
        start = sym["st_value"]
        funcs.append((isa, sym.name, start, data[start : start + sym["st_size"]], symbols.get(sym["st_shndx"], {})))
        covered.setdefault(sym["st_shndx"], []).append((start, start + sym["st_size"]))
    unwind = _unwind_starts(elf)
    for index, section in enumerate(elf.sections):
        if not section["sh_flags"] & _SHF_EXECINSTR or section["sh_type"] != "SHT_PROGBITS":
            continue
        data = elf.data(index)
        pos = 0
        for start, end in [*sorted(covered.get(index, [])), (len(data), len(data))]:
            # Split a stretch where the unwind table says a function begins.
            cuts = sorted({pos, start} | {s for s in unwind.get(index, ()) if pos < s < start})
            for lo, hi in itertools.pairwise(cuts):
                if hi - lo >= _MIN_ANONYMOUS_BYTES:
                    funcs.append((isa, f"{ANONYMOUS}{section.name}+{lo:#x}", lo, data[lo:hi], symbols.get(index, {})))
            pos = max(pos, end)
    return funcs


class _Object:
    """An ELF object as pyelftools reads it, each section header, section and symbol table
    parsed once: pyelftools parses a section header on every ``get_section`` and a symbol on
    every ``get_symbol``, and a kernel's hundreds of relocations name a few dozen symbols."""

    def __init__(self, obj: bytes) -> None:
        elf = ELFFile(io.BytesIO(obj))
        self.machine: str = elf["e_machine"]
        self.sections: list = list(elf.iter_sections())
        self.symtab: int | None = elf.get_section_index(".symtab")
        self._symbols: dict[int, list] = {}
        self._data: dict[int, bytes] = {}

    def symbols(self, index: int) -> list:
        """The symbols of the symbol table in section ``index``, in table order."""
        if index not in self._symbols:
            self._symbols[index] = list(self.sections[index].iter_symbols())
        return self._symbols[index]

    def data(self, index: int) -> bytes:
        """The contents of section ``index``."""
        if index not in self._data:
            self._data[index] = self.sections[index].data()
        return self._data[index]


def _relocations(elf: _Object, keep):
    """``(relocation section, relocation, symbol it refers to)`` for every relocation of the
    relocation sections that ``keep`` accepts."""
    for section in elf.sections:
        if isinstance(section, RelocationSection) and keep(section):
            symbols = elf.symbols(section["sh_link"])
            for rel in section.iter_relocations():
                yield section, rel, symbols[rel["r_info_sym"]]


def _relocated_symbols(elf: _Object) -> dict[int, dict[int, str]]:
    """Per executable section index, the named symbol each of its relocations refers to, by offset."""

    def into_code(section) -> bool:
        return bool(section["sh_info"]) and bool(elf.sections[section["sh_info"]]["sh_flags"] & _SHF_EXECINSTR)

    found: dict[int, dict[int, str]] = {}
    for section, rel, sym in _relocations(elf, into_code):
        if sym.name:
            found.setdefault(section["sh_info"], {})[rel["r_offset"]] = sym.name
    return found


def _unwind_starts(elf: _Object) -> dict[int, set[int]]:
    """Function start offsets per section index, from the unwind table's relocations.

    Every function LLVM emits has a frame description entry whose start address is a
    relocation against its section; that includes the outlined bodies without symbols,
    which sit back to back in one stretch of ``.text``.
    """
    starts: dict[int, set[int]] = {}
    for _, rel, sym in _relocations(elf, lambda section: section.name.endswith("eh_frame")):
        if isinstance(sym["st_shndx"], int):
            starts.setdefault(sym["st_shndx"], set()).add(sym["st_value"] + rel["r_addend"])
    return starts


#: Mnemonics with a memory operand that touch no memory (address arithmetic, padding).
_NO_MEMORY = ("lea", "nop", "prefetch", "adr")


def kernel_code(objects: list[bytes]) -> tuple[MachineCode, ...]:
    """The disassembled kernel functions of ELF ``objects`` (runtime helpers left out)."""
    return tuple(
        disassemble(*fn)
        for n, obj in enumerate(objects)
        for fn in read_functions(obj, f"object file {n + 1} of {len(objects)}")
        if not fn[1].startswith(RUNTIME_HELPERS)
    )


def _classify(isa: str, ins) -> str:
    """Counting class of a Capstone instruction: its arithmetic class (:mod:`tuna.cpu.isa`), else
    call, branch, store or load from Capstone's groups and operands, else other."""
    mnem = ins.mnemonic
    klass = arithmetic_class(isa, mnem)
    if klass is not None:
        return klass
    if ins.group(capstone.CS_GRP_CALL):
        return "call"
    if ins.group(capstone.CS_GRP_JUMP) or ins.group(capstone.CS_GRP_RET):
        return "branch"
    if mnem.startswith(_NO_MEMORY):
        return "other"
    mem_type = capstone.x86.X86_OP_MEM if isa == "x86-64" else capstone.arm64.ARM64_OP_MEM
    if any(op.type == mem_type for op in ins.operands):
        if isa == "x86-64":
            writes_memory = ins.operands[0].type == mem_type and not mnem.startswith(("cmp", "test"))
            return "store" if writes_memory else "load"
        return "store" if mnem.startswith("st") else "load"
    return "other"


def _is_jump(ins) -> bool:
    # Capstone puts AArch64's BL in the jump group too; a call returns, it does not branch (and
    # in an object file its unrelocated target is the call itself).
    return bool(ins.group(capstone.CS_GRP_JUMP)) and not ins.group(capstone.CS_GRP_CALL)


def _branch_target(isa: str, ins) -> int | None:
    if not _is_jump(ins):
        return None
    imm = capstone.x86.X86_OP_IMM if isa == "x86-64" else capstone.arm64.ARM64_OP_IMM
    for op in reversed(ins.operands):
        if op.type == imm:
            return op.imm
    return None


def _is_unconditional(isa: str, mnem: str) -> bool:
    return mnem in ("jmp",) if isa == "x86-64" else mnem in ("b", "br")


#: What Capstone's detail mode says about an instruction text (registers read and written,
#: class, jump, return, branch target), kept because decoding details is the slow part and
#: candidates of one workload repeat most instruction texts.
_INFO: dict[tuple[str, str, str], tuple] = {}
_INFO_LIMIT = 200_000
#: A bracketed operand (an address; an AArch64 lane index) and the numbers in it that are not
#: scales (displacements, AArch64's offsets, shift amounts and lanes): no detail ``_info`` keeps
#: depends on them, while they make most of a kernel's instruction texts distinct (24
#: candidates of the DEP-0 pool on Granite Rapids: 17,879 texts, 6,457 without them).
_MEMORY_OPERAND = re.compile(r"\[[^\]]*\]")
_OFFSET = re.compile(r"(?<![*\w])#?-?(?:0x[0-9a-f]+|\d+)(?![\w*])")


def _info_key(operands: str) -> str:
    """``operands`` with the numbers in its brackets set to 0 (the ``_INFO`` key)."""
    if "[" not in operands:
        return operands
    return _MEMORY_OPERAND.sub(lambda m: _OFFSET.sub("0", m.group()), operands)


@cache
def _decoders(isa: str) -> tuple[capstone.Cs, capstone.Cs]:
    """A text-only and a detailed Capstone decoder for ``isa``."""
    lite = capstone.Cs(*_CAPSTONE[isa])
    md = capstone.Cs(*_CAPSTONE[isa])
    md.detail = True
    return lite, md


_A64_COMPARES = frozenset({"cmp", "cmn", "tst"})
#: Capstone's access lists name x16, x17, x29 and x30 by role; operand text uses the numbers.
_A64_NAMES = {"fp": "x29", "lr": "x30", "ip0": "x16", "ip1": "x17"}


def _info(isa: str, md: capstone.Cs, code: bytes, base: int, at: int, size: int, mnemonic: str, operands: str):
    key = (isa, mnemonic, _info_key(operands))
    found = _INFO.get(key)
    if found is None:
        ins = next(md.disasm(code[at - base : at - base + size], at))
        names = _A64_NAMES if isa == "aarch64" else {}
        reads, writes = (tuple(names.get(n, n) for n in map(ins.reg_name, regs)) for regs in ins.regs_access())
        if isa == "aarch64" and mnemonic in _A64_COMPARES:
            # Capstone 5 reports the compared register of these aliases (subs/adds/ands with
            # a zero destination) as written and not read, which would cut the dependency on
            # the instruction computing it and hide a loop counter's step from data flow.
            first = operands.split(",", 1)[0].strip()
            reads, writes = (*reads, first), tuple(w for w in writes if w != first)
        found = (
            reads,
            writes,
            _classify(isa, ins),
            _is_jump(ins),
            bool(ins.group(capstone.CS_GRP_RET)),
            _branch_target(isa, ins),
        )
        if len(_INFO) >= _INFO_LIMIT:
            _INFO.clear()
        _INFO[key] = found
    return found


def disassemble(isa: str, name: str, address: int, code: bytes, symbols: dict[int, str] | None = None) -> MachineCode:
    """Disassemble one function into basic blocks with successors.

    ``symbols`` (from :func:`read_functions`) names the callee of a direct call whose target
    a relocation fills in (:attr:`~tuna.ir.Instruction.callee`).
    """
    if isa not in _CAPSTONE:
        raise UnsupportedISAError(f"cannot disassemble {isa}; supported: {', '.join(_CAPSTONE)}")
    lite, md = _decoders(isa)
    # Text first (fast); Capstone's details only for instruction texts not seen before.
    raw = list(lite.disasm_lite(code, address))
    info = [_info(isa, md, code, address, *ins) for ins in raw]
    end = address + len(code)
    leaders = {address}
    targets: dict[int, int | None] = {}
    for (at, size, _, _), (_, _, _, jump, ret, tgt) in zip(raw, info):
        if jump or ret:
            leaders.add(at + size)
            targets[at] = tgt
            if tgt is not None and address <= tgt < end:
                leaders.add(tgt)
    blocks: list[BasicBlock] = []
    current: list[Instruction] = []
    for pos, (at, size, mnemonic, operands) in enumerate(raw):
        reads, writes, klass, _, ret, _ = info[pos]
        callee = ""
        if klass == "call" and symbols:
            callee = next((symbols[o] for o in range(at, at + size) if o in symbols), "")
        current.append(Instruction(at, mnemonic, operands, reads, writes, klass, callee))
        nxt = raw[pos + 1][0] if pos + 1 < len(raw) else end
        if nxt in leaders or pos + 1 == len(raw):
            succ = []
            tgt = targets.get(at)
            if tgt is not None and address <= tgt < end:
                succ.append(tgt)
            falls = not ret and not (at in targets and _is_unconditional(isa, mnemonic))
            if falls and nxt < end:
                succ.append(nxt)
            blocks.append(BasicBlock(current[0].address, tuple(current), tuple(succ)))
            current = []
    return MachineCode(isa=isa, function=name, blocks=tuple(blocks))

