"""x86-64 instructions to micro-ops (Capstone's Intel syntax).

A load-op instruction becomes a load and an arithmetic micro-op, a store a store-address
and a store-data micro-op, a read-modify-write a load, an operation, and the two store
micro-ops, a gather or scatter one micro-op timed by the elements it moves, an AVX2 masked
store a store-address and a masked-store micro-op; zeroing idioms,
fusible compare/ALU instructions and load-ops with an indexed address (which Intel cores
split into two front-end slots) are marked for the front end; a vector load from the stack
frame (``[rsp + constant]``) is a ``vload_frame``, which machines without data for it time as
any vector load.
Timing classes come from :mod:`tuna.cpu.isa`; this module holds only how x86 instructions
split into micro-ops.
"""

from __future__ import annotations

import re

from ...ir import Instruction
from ..isa import X86_PTR_BYTES, scalar_class, vector_class, x86_gather_lanes, x86_register_bits
from .microops import Decoded, uop
from .registers import canonical, parse_int, registers_in, split_operands

_X86_PURE_LOAD = (
    "mov", "movzx", "movsx", "movsxd", "movd", "movq", "movss", "movsd", "movaps", "movups", "movapd",
    "movupd", "movdqa", "movdqu", "movdqa32", "movdqa64", "movdqu8", "movdqu16", "movdqu32", "movdqu64",
    "movntdqa", "lddqu", "movddup", "broadcastss", "broadcastsd", "broadcastf128", "broadcasti128",
    "broadcastf32x4", "broadcastf64x4", "broadcasti32x4", "broadcasti64x4", "broadcastf32x8",
    "broadcasti32x8", "broadcastf64x2", "broadcasti64x2", "pbroadcastb", "pbroadcastw", "pbroadcastd",
    "pbroadcastq",
)
_X86_PURE_STORE = (
    "mov", "movd", "movq", "movss", "movsd", "movaps", "movups", "movapd", "movupd", "movdqa", "movdqu",
    "movdqa32", "movdqa64", "movdqu8", "movdqu16", "movdqu32", "movdqu64", "movntps", "movntpd", "movntdq",
    "movnti", "movlps", "movhps", "movlpd", "movhpd",
)
#: AVX/AVX2 masked stores (VMASKMOVPS/PD, VPMASKMOVD/Q with a memory destination), without the ``v``.
_X86_MASKED_STORE = frozenset({"maskmovps", "maskmovpd", "pmaskmovd", "pmaskmovq"})
_X86_ZERO_IDIOMS = frozenset(
    {"xor", "sub", "pxor", "pxord", "pxorq", "xorps", "xorpd", "psubd", "psubq", "psubb", "psubw", "pandn", "andnps"}
)
_X86_FUSIBLE = frozenset({"cmp", "test", "add", "sub", "and", "inc", "dec"})


def _x86_class(mnem: str, vector: bool, ops: list[str]) -> str:
    """Timing class of the operation an x86 instruction performs."""
    if mnem.startswith("k") and len(mnem) > 2 and mnem[1:4] in ("mov", "and", "or", "xor", "not", "shi", "ort", "tes",
                                                               "add", "unp", "xno"):
        return "kmask"
    if vector or mnem.startswith("v"):
        return vector_class("x86-64", mnem[1:] if mnem.startswith("v") else mnem)
    if mnem == "lea":
        return "lea"
    if mnem == "mov":
        return "mov" if len(ops) == 2 and canonical("x86-64", ops[1], True) else "movimm"
    return scalar_class("x86-64", mnem)


def x86_address(inner: str) -> tuple[str, int, tuple[str, ...], tuple[int, ...]]:
    """``(key, displacement, registers, scales)`` of the text between brackets, e.g. ``rax + rcx*4 - 0x40``."""
    text = inner.replace(" ", "")
    terms = re.findall(r"[+-]?[^+-]+", text)
    regs, scales, disp, key = [], [], 0, []
    for term in terms:
        sign = -1 if term.startswith("-") else 1
        body = term.lstrip("+-")
        value = parse_int(body)
        if value is not None:
            disp += sign * value
            continue
        name, _, scale = body.partition("*")
        r = canonical("x86-64", name, True)
        if r is not None:
            regs.append(r)
            scales.append(parse_int(scale) or 1 if scale else 1)
        key.append(body)
    return "+".join(key), disp, tuple(regs), tuple(scales)


def _x86_step(mnem: str, ops: list[str]) -> tuple[str, int] | None:
    """``(register, constant)`` when the instruction only adds a constant to a register.

    ``add r, imm``, ``sub r, imm``, ``inc r``, ``dec r`` and ``lea r, [r + imm]``: the
    induction updates of a loop body, which move its addresses by a known stride.
    """
    if mnem in ("inc", "dec") and len(ops) == 1:
        value: int | None = 1 if mnem == "inc" else -1
    elif mnem in ("add", "sub") and len(ops) == 2:
        value = parse_int(ops[1])
        if value is not None and mnem == "sub":
            value = -value
    elif mnem == "lea" and len(ops) == 2 and ops[1].endswith("]"):
        _, value, regs, scales = x86_address(ops[1][ops[1].index("[") + 1 : -1])
        target = canonical("x86-64", ops[0], True)
        if regs != (target,) or scales != (1,):
            return None
    else:
        return None
    reg = canonical("x86-64", ops[0], True)
    return None if reg is None or value is None else (reg, value)


def decode_x86(ins: Instruction) -> Decoded:
    """Micro-ops of one x86-64 instruction (see :func:`tuna.cpu.simulator.decode`)."""
    mnem = ins.mnemonic.lower()
    reads = [r for r in (canonical("x86-64", n) for n in ins.reads) if r]
    writes = [w for w in (canonical("x86-64", n) for n in ins.writes) if w]
    ops = split_operands(ins.operands.lower())
    if mnem.startswith("nop") or mnem in ("endbr64", "endbr32", "int3", "ud2"):
        return Decoded(())
    if mnem.startswith("j") or mnem.startswith("loop"):
        return Decoded((uop("branch", 64, reads, [w for w in writes if w != "rip"]),))
    if mnem.startswith(("call", "ret")):
        return Decoded((uop("call", 64, reads, writes),))
    mem_i = next((i for i, op in enumerate(ops) if "[" in op), None)
    width = x86_register_bits(ins.operands.lower())
    vector = width > 64 or any(op.startswith(("xmm", "ymm", "zmm")) for op in ops)
    broadcast = "{1to" in ins.operands or "broadcast" in mnem or mnem.endswith("movddup")
    if mnem == "lea" or mem_i is None:
        if mnem == "lea":
            return Decoded((uop("lea", 64, reads, writes),), step=_x86_step(mnem, ops))
        klass = _x86_class(mnem, vector, ops)
        regs = [canonical("x86-64", op.split()[0], True) for op in ops]
        base = mnem[1:] if mnem.startswith("v") and len(ops) == 3 else mnem
        if base in _X86_ZERO_IDIOMS and len(ops) >= 2 and None not in regs and len(set(regs[-2:])) == 1:
            return Decoded((uop("zero", width, (), writes),))
        fusible = mnem in _X86_FUSIBLE
        return Decoded((uop(klass, width, reads, writes),), broadcast=broadcast, fusible=fusible,
                       step=_x86_step(mnem, ops))
    # An instruction with a memory operand.
    mem_op = ops[mem_i]
    inner = mem_op[mem_op.index("[") + 1 : mem_op.index("]")]
    key, disp, addr, scales = x86_address(inner)
    ptr = next((b for p, b in X86_PTR_BYTES.items() if mem_op.startswith(p)), 8)
    mem_width = max(64, 8 * ptr)
    outside = set(registers_in("x86-64", " ".join(op for i, op in enumerate(ops) if i != mem_i)))
    outside |= set(registers_in("x86-64", mem_op[mem_op.index("]") + 1 :]))  # {k1} masks
    named = outside | set(addr)
    implicit = [r for r in reads if r not in named]
    data_reads = [r for r in reads if r in outside] + implicit
    base = mnem[1:] if mnem.startswith("v") else mnem
    mem = (key, disp, ptr, addr, scales)
    indexed = len(addr) > 1
    is_store = mem_i == 0 and not mnem.startswith(("cmp", "test", "bt", "vcmp", "vptest", "ucomi", "comi", "vucomi",
                                                   "vcomi", "prefetch"))
    if mnem.startswith("prefetch"):
        return Decoded((uop("prefetch", 64, addr, (), None),))
    klass = vector_class("x86-64", base, None) if vector else None
    if klass in ("vgather", "vscatter"):
        # One micro-op whose timing the data file gives by the elements moved (32 bits a
        # lane: 16 elements time as w512); the mask register is consumed, and a gather merges
        # into its destination. No store forwarding is modelled through a vector of addresses.
        lanes = 32 * x86_gather_lanes(mnem, ins.operands)
        masks = [r for r in reads if r.startswith("k")]
        if klass == "vgather":
            return Decoded((uop(klass, lanes, [*reads, *writes], [*writes, *masks]),))
        return Decoded((uop(klass, lanes, reads, masks),))
    if is_store:
        data = [r for r in data_reads if r not in ("flags",)]
        if base in _X86_PURE_STORE or mnem in _X86_PURE_STORE:
            uops = (
                uop("store_addr", 64, addr, ()),
                uop("vstore_data" if vector else "store_data", width if vector else 64, data, (), mem),
            )
            return Decoded(uops)
        if base in _X86_MASKED_STORE:
            # AVX2's masked store: the data and mask registers in, a store of the lanes the
            # mask selects (Zen 3 runs it from microcode: its data file prices the class).
            return Decoded((uop("store_addr", 64, addr, ()), uop("vmaskstore", width, data, (), mem)))
        klass = _x86_class(mnem, vector, ops)
        if mnem.startswith(("vextract", "extract", "vcvt", "vpmov", "vcompress", "vpcompress", "pextr", "vpextr")):
            uops = (
                uop(klass, width, data, ("~0",)),
                uop("store_addr", 64, addr, ()),
                uop("vstore_data", width, ("~0",), (), mem),
            )
            return Decoded(uops)
        # read-modify-write: load, operate, store
        uops = (
            uop("load", 64, addr, ("~0",), mem),
            uop(klass, 64, [*data_reads, "~0"], ["~1", *[w for w in writes if w not in addr]]),
            uop("store_addr", 64, addr, ()),
            uop("store_data", 64, ("~1",), (), mem),
        )
        return Decoded(uops, slots=2)
    dests = [w for w in writes]
    # A vector reload of the stack frame (address rsp + constant): LLVM's spill slots, in a
    # frame the ABI keeps 16-byte aligned unless the function realigns it, so a wide reload
    # may straddle cache lines (see prepare_block's ``frame_align``).
    load_class = ("vload_frame" if addr == ("rsp",) else "vload") if vector else "load"
    if base in _X86_PURE_LOAD or mnem in _X86_PURE_LOAD:
        return Decoded((uop(load_class, mem_width, addr, dests, mem),), broadcast=broadcast)
    klass = _x86_class(mnem, vector, ops)
    uops = (
        uop(load_class, mem_width, addr, ("~0",), mem),
        uop(klass, width, [*data_reads, "~0"], dests),
    )
    unlaminated = indexed and len(ops) >= 3 and mnem.startswith("v")
    return Decoded(uops, broadcast=broadcast, unlaminated=unlaminated)


