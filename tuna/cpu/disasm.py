"""Object code to instructions, basic blocks and loops (the only module that imports Capstone).

Reads the relocatable ELF objects TVM's LLVM backend writes (pyelftools), disassembles each
kernel function with Capstone (x86-64 with AVX2/AVX-512, AArch64 with NEON), splits it into
basic blocks, builds the control-flow graph and its natural loops (networkx), and recovers
trip counts from each loop's induction compare and step where they are immediates.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import capstone
import networkx as nx
from elftools.elf.elffile import ELFFile

from ..errors import UnsupportedISAError
from ..ir import BasicBlock, Instruction, MachineCode

_ELF_ISA = {"EM_X86_64": "x86-64", "EM_AARCH64": "aarch64"}
_CAPSTONE = {
    "x86-64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64),
    "aarch64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM),
}

# Instruction classes by mnemonic prefix: ISA facts, apart from any machine's timing.
_CLASSES = {
    "x86-64": (
        (("vfmadd", "vfnmadd", "vfmsub", "vfnmsub"), "fma"),
        (("vaddp", "vsubp", "vadds", "vsubs", "vmaxp", "vminp"), "add"),
        (("vmulp", "vmuls"), "mul"),
        (("vdivp", "vdivs", "vsqrt"), "div"),
    ),
    "aarch64": (
        (("fmla", "fmls", "fmadd", "fmsub"), "fma"),
        (("fadd", "fsub", "fmax", "fmin"), "add"),
        (("fmul",), "mul"),
        (("fdiv", "fsqrt"), "div"),
    ),
}


@dataclass(frozen=True)
class LoopInfo:
    """A natural loop of a function's control-flow graph."""

    header: int
    blocks: frozenset[int]
    trip_count: int | None


def read_functions(obj: bytes) -> list[tuple[str, str, int, bytes]]:
    """``(isa, name, address, code)`` of every function symbol in an ELF object."""
    elf = ELFFile(io.BytesIO(obj))
    isa = _ELF_ISA.get(elf["e_machine"])
    if isa is None:
        raise UnsupportedISAError(
            f"object code for {elf['e_machine']} cannot be analysed; supported: x86-64, aarch64"
        )
    symtab = elf.get_section_by_name(".symtab")
    funcs = []
    for sym in symtab.iter_symbols() if symtab else ():
        if sym["st_info"]["type"] != "STT_FUNC" or not sym["st_size"]:
            continue
        section = elf.get_section(sym["st_shndx"])
        data = section.data()
        start = sym["st_value"]
        funcs.append((isa, sym.name, start, data[start : start + sym["st_size"]]))
    return funcs


def _classify(isa: str, ins) -> str:
    mnem = ins.mnemonic
    for prefixes, klass in _CLASSES[isa]:
        if mnem.startswith(prefixes):
            return klass
    if ins.group(capstone.CS_GRP_JUMP) or ins.group(capstone.CS_GRP_RET):
        return "branch"
    if ins.group(capstone.CS_GRP_CALL):
        return "call"
    mem_type = capstone.x86.X86_OP_MEM if isa == "x86-64" else capstone.arm64.ARM64_OP_MEM
    if any(op.type == mem_type for op in ins.operands):
        if isa == "x86-64":
            writes_memory = ins.operands[0].type == mem_type and not mnem.startswith(("cmp", "test"))
            return "store" if writes_memory else "load"
        return "store" if mnem.startswith("st") else "load"
    return "other"


def _branch_target(isa: str, ins) -> int | None:
    if not ins.group(capstone.CS_GRP_JUMP):
        return None
    imm = capstone.x86.X86_OP_IMM if isa == "x86-64" else capstone.arm64.ARM64_OP_IMM
    for op in reversed(ins.operands):
        if op.type == imm:
            return op.imm
    return None


def _is_unconditional(isa: str, mnem: str) -> bool:
    return mnem in ("jmp",) if isa == "x86-64" else mnem in ("b", "br")


def disassemble(isa: str, name: str, address: int, code: bytes) -> MachineCode:
    """Disassemble one function into basic blocks with successors."""
    if isa not in _CAPSTONE:
        raise UnsupportedISAError(f"cannot disassemble {isa}; supported: {', '.join(_CAPSTONE)}")
    md = capstone.Cs(*_CAPSTONE[isa])
    md.detail = True
    raw = list(md.disasm(code, address))
    end = address + len(code)
    leaders = {address}
    targets: dict[int, int | None] = {}
    for ins in raw:
        tgt = _branch_target(isa, ins)
        if ins.group(capstone.CS_GRP_JUMP) or ins.group(capstone.CS_GRP_RET):
            leaders.add(ins.address + ins.size)
            targets[ins.address] = tgt
            if tgt is not None and address <= tgt < end:
                leaders.add(tgt)
    blocks: list[BasicBlock] = []
    current: list[Instruction] = []
    for pos, ins in enumerate(raw):
        reads, writes = ins.regs_access()
        current.append(
            Instruction(
                address=ins.address,
                mnemonic=ins.mnemonic,
                operands=ins.op_str,
                reads=tuple(ins.reg_name(r) for r in reads),
                writes=tuple(ins.reg_name(r) for r in writes),
                klass=_classify(isa, ins),
            )
        )
        nxt = raw[pos + 1].address if pos + 1 < len(raw) else end
        if nxt in leaders or pos + 1 == len(raw):
            succ = []
            tgt = targets.get(ins.address)
            if tgt is not None and address <= tgt < end:
                succ.append(tgt)
            falls = not ins.group(capstone.CS_GRP_RET) and not (
                ins.address in targets and _is_unconditional(isa, ins.mnemonic)
            )
            if falls and nxt < end:
                succ.append(nxt)
            blocks.append(BasicBlock(current[0].address, tuple(current), tuple(succ)))
            current = []
    return MachineCode(isa=isa, function=name, blocks=tuple(blocks))


def loops(code: MachineCode) -> list[LoopInfo]:
    """Natural loops, innermost first, with trip counts where the code shows them."""
    if not code.blocks:
        return []
    graph = nx.DiGraph()
    for blk in code.blocks:
        graph.add_node(blk.start)
        for s in blk.successors:
            graph.add_edge(blk.start, s)
    entry = code.blocks[0].start
    idom = nx.immediate_dominators(graph, entry)

    def dominates(a: int, b: int) -> bool:
        while b != a and b in idom and idom[b] != b:
            b = idom[b]
        return b == a

    by_start = {b.start: b for b in code.blocks}
    found: dict[int, set[int]] = {}
    for src, dst in graph.edges:
        if src in idom and dst in idom and dominates(dst, src):
            body = {dst} | nx.ancestors(graph.subgraph(n for n in graph if dominates(dst, n)), src) | {src}
            found.setdefault(dst, set()).update(body)
    result = [
        LoopInfo(h, frozenset(b), _trip_count(code.isa, [by_start[s] for s in sorted(b)], by_start, graph, h))
        for h, b in found.items()
    ]
    return sorted(result, key=lambda lp: len(lp.blocks))


def _imm(text: str) -> int | None:
    text = text.strip().lstrip("#$")
    try:
        return int(text, 0)
    except ValueError:
        return None


def _trip_count(isa, body, by_start, graph, header) -> int | None:
    """Iterations from ``cmp reg, imm`` and the register's constant step inside the loop."""
    instrs = [ins for blk in body for ins in blk.instructions]
    steps: dict[str, int] = {}
    for ins in instrs:
        ops = [o.strip() for o in ins.operands.split(",")]
        if isa == "x86-64":
            if ins.mnemonic in ("add", "sub") and len(ops) == 2 and _imm(ops[1]) is not None:
                steps[ops[0]] = _imm(ops[1]) * (1 if ins.mnemonic == "add" else -1)
            elif ins.mnemonic in ("inc", "dec") and len(ops) == 1:
                steps[ops[0]] = 1 if ins.mnemonic == "inc" else -1
        elif ins.mnemonic in ("add", "sub", "subs", "adds") and len(ops) == 3 and ops[0] == ops[1]:
            if _imm(ops[2]) is not None:
                steps[ops[0]] = _imm(ops[2]) * (1 if ins.mnemonic.startswith("add") else -1)
    inits: dict[str, int] = {}
    for pred in graph.predecessors(header):
        if pred in {b.start for b in body}:
            continue
        for ins in by_start[pred].instructions:
            ops = [o.strip() for o in ins.operands.split(",")]
            if ins.mnemonic == "mov" and len(ops) == 2 and _imm(ops[1]) is not None:
                inits[ops[0]] = _imm(ops[1])
            elif ins.mnemonic == "xor" and len(ops) == 2 and ops[0] == ops[1]:
                inits[ops[0]] = 0
    for ins in reversed(instrs):
        ops = [o.strip() for o in ins.operands.split(",")]
        if ins.mnemonic in ("cmp", "subs") and ops and ops[0] in steps:
            bound = _imm(ops[-1])
            step = steps[ops[0]]
            if bound is None or step == 0:
                continue
            start = inits.get(ops[0], 0)
            trips = (bound - start) // step + ((bound - start) % step != 0)
            if trips > 0:
                return trips
        if isa == "aarch64" and ins.mnemonic == "subs" and ops and ops[0] in inits and ops[0] in steps:
            return max(1, inits[ops[0]] // -steps[ops[0]])
    for reg, step in steps.items():  # count-down loops ending at zero (dec/sub ... jne)
        if step < 0 and reg in inits and inits[reg] > 0:
            return max(1, inits[reg] // -step)
    return None
