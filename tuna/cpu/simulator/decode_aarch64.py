"""AArch64 instructions to micro-ops (Capstone's ARM syntax).

A load or store with writeback becomes the memory micro-op and a base-register update, a
structure load one micro-op per register, a store a store-address micro-op and one
store-data micro-op per register; the compared register of ``cmp``/``tst`` aliases, which
Capstone lists as written, is read. Timing classes come from :mod:`tuna.cpu.isa`; this module
holds only how AArch64 instructions split into micro-ops.
"""

from __future__ import annotations

import re

from ...ir import Instruction
from ..isa import a64_register_bits, a64_register_bytes, scalar_class, vector_class
from .microops import Decoded, MicroOp, uop
from .registers import canonical, parse_int, registers_in, split_operands

_A64_COMPARES = frozenset({"cmp", "cmn", "tst", "ccmp", "ccmn", "fcmp", "fcmpe", "fccmp", "fccmpe"})
_A64_VREG = re.compile(r"^(?:v\d+(?:\.\d*[bhsd])?(?:\[\d+\])?|[bhsdq]\d+)$")

def _a64_is_vec(op: str) -> bool:
    """Whether an operand is a SIMD/FP register (``v0.4s``, ``v1.s[2]``, ``s3``, ``q0``)."""
    return bool(_A64_VREG.match(op.strip("{} ")))


def _a64_list(op: str) -> list[str]:
    """Registers of a ``{v0.4s, v1.4s}`` list (or the one register of a plain operand)."""
    if op.startswith("{"):
        body = op[1 : op.index("}")]
        return [r.strip() for r in body.split(",") if r.strip()]
    return [op]


def decode_aarch64(ins: Instruction) -> Decoded:
    """Micro-ops of one AArch64 instruction (see :func:`tuna.cpu.simulator.decode`)."""
    mnem = ins.mnemonic.lower()
    reads = [r for r in (canonical("aarch64", n) for n in ins.reads) if r]
    writes = [w for w in (canonical("aarch64", n) for n in ins.writes) if w]
    ops = split_operands(ins.operands.lower())
    if mnem in ("nop", "hint", "yield", "bti"):
        return Decoded(())
    if mnem in ("bl", "blr"):
        return Decoded((uop("call", 64, reads, writes),))
    if mnem in ("b", "br", "ret", "cbz", "cbnz", "tbz", "tbnz") or mnem.startswith("b."):
        return Decoded((uop("branch", 64, reads, writes),))
    mem_i = next((i for i, op in enumerate(ops) if op.startswith("[")), None)
    if mem_i is not None and (mnem.startswith(("ld", "st", "prfm", "prfum"))):
        return _decode_a64_memory(mnem, ops, mem_i, reads, writes)
    if mnem in _A64_COMPARES:  # Capstone lists the compared register as written, not read
        reads = list(dict.fromkeys([*registers_in("aarch64", " ".join(ops)), *(r for r in reads if r == "flags")]))
        writes = ["flags"]
    else:  # make sure the source operands are read (Capstone omits some)
        reads = list(dict.fromkeys([*reads, *registers_in("aarch64", " ".join(ops[1:]))]))
    width = a64_register_bits(ops)
    vector = bool(ops) and _a64_is_vec(ops[0])
    srcs_vec = any(_a64_is_vec(op) for op in ops[1:])
    broadcast = mnem == "dup"
    if vector or (srcs_vec and mnem in ("fmov", "umov", "smov", "mov", "fcvtzs", "fcvtzu", "fcmp", "fcmpe")):
        if mnem == "dup":
            klass = "vbroadcast" if len(ops) > 1 and _a64_is_vec(ops[1]) else "vbroadcast_gpr"
        elif mnem in ("mov", "fmov"):
            if len(ops) == 2 and _a64_is_vec(ops[0]) and _a64_is_vec(ops[1]):
                klass = "vshuffle" if "[" in ops[0] or "[" in ops[1] else "vmov"
            elif len(ops) == 2 and (_a64_is_vec(ops[0]) != _a64_is_vec(ops[1])) and not ops[1].startswith("#"):
                klass = "vshuffle" if "[" in ops[0] else "vmov_gpr"
            else:
                klass = "vlogic"  # immediate into a vector register
        else:
            klass = vector_class("aarch64", mnem)
        return Decoded((uop(klass, width, reads, writes),), broadcast=broadcast)
    # general-purpose registers
    if mnem == "mov":
        if len(ops) == 2 and canonical("aarch64", ops[1], True) not in (None,):
            return Decoded((uop("mov", 64, reads, writes),))
        return Decoded((uop("movimm", 64, reads, writes),))
    klass = scalar_class("aarch64", mnem)
    if klass == "alu" and len(ops) >= 4 and canonical("aarch64", ops[2], True):
        shift = ops[3].split()
        if len(shift) == 2 and shift[0] in ("lsl", "lsr", "asr", "ror") and (parse_int(shift[1]) or 0) > 4:
            klass = "alu_shift"
    return Decoded((uop(klass, 64, reads, writes),))


def a64_address(inner: str) -> tuple[str, int, tuple[str, ...], tuple[int, ...]]:
    """``(key, offset, registers, scales)`` of the text between brackets, e.g. ``x1, x2, lsl #2``
    (the index register scaled by 4) or ``x5, #0x20``."""
    parts = [p.strip() for p in inner.split(",")]
    base = canonical("aarch64", parts[0], True) or parts[0]
    offset, regs, scales = 0, [base], [1]
    for i, p in enumerate(parts[1:], 1):
        value = parse_int(p)
        if value is not None:
            offset += value
            continue
        r = canonical("aarch64", p.split()[0], True)
        if r:  # an index register; a shift or extension after it scales it (``lsl #2``, ``sxtw #3``)
            amount = re.search(r"#(\d+)", parts[i + 1]) if i + 1 < len(parts) else None
            regs.append(r)
            scales.append(1 << int(amount.group(1)) if amount else 1)
    key = ",".join(p for p in parts if parse_int(p) is None)
    return key, offset, tuple(regs), tuple(scales)


def _decode_a64_memory(mnem: str, ops: list[str], mem_i: int, reads: list[str], writes: list[str]) -> Decoded:
    mem_op = ops[mem_i]
    key, offset, addr, scales = a64_address(mem_op[1 : mem_op.index("]")])
    base = addr[0]
    post = [op for op in ops[mem_i + 1 :]]
    writeback = mem_op.endswith("!") or bool(post)
    post_regs = [r for r in (canonical("aarch64", op, True) for op in post) if r]
    data_ops = ops[:mem_i]
    data_regs = [r for op in data_ops for r in _a64_list(op)]
    wb = (uop("wb", 64, [base, *post_regs], [base]),) if writeback else ()
    moved = offset if mem_op.endswith("!") else (parse_int(post[0]) if len(post) == 1 else None)
    stepped = (base, moved) if writeback and moved is not None else None
    if mnem.startswith(("prfm", "prfum")):
        return Decoded((uop("prefetch", 64, addr, ()),))
    if mnem.startswith("ld"):
        dest_names = [r for r in data_regs if canonical("aarch64", r.split(".")[0], True)]
        dests = [canonical("aarch64", r.split(".")[0], True) for r in dest_names]
        vec = bool(dest_names) and _a64_is_vec(dest_names[0])
        size = a64_register_bytes(dest_names[0]) if dest_names else 8
        if mnem in ("ldrb", "ldrsb", "ldurb", "ldursb"):
            size = 1
        elif mnem in ("ldrh", "ldrsh", "ldurh", "ldursh"):
            size = 2
        elif mnem in ("ldrsw", "ldursw", "ldpsw"):
            size = 4
        width = max(64, 8 * size)
        extra = [w for w in writes if w not in dests and w != base and w not in ("~0",)]
        uops: list[MicroOp] = []
        lane = any("[" in op for op in data_ops) or "}[" in " ".join(data_ops)
        broadcast = re.match(r"ld\dr$", mnem) is not None
        if mnem.startswith(("ldp", "ldnp", "ldpsw")):
            klass = "vload_pair" if vec else "load_pair"
            uops.append(uop(klass, width, addr, dests, (key, offset, 2 * size, addr, scales)))
        elif mnem[:3] in ("ld1", "ld2", "ld3", "ld4") and vec:
            klass = "vload_dup" if broadcast else ("vload_lane" if lane else ("vload" if mnem[:3] == "ld1"
                                                                               else "vload_struct"))
            reg_reads = dests if lane else []
            for k, d in enumerate(dests):
                uops.append(uop(klass, width, [*addr, *([d] if reg_reads else [])], [d],
                                 (key, offset + k * size, size, addr, scales)))
        else:
            klass = "vload" if vec else "load"
            uops.append(uop(klass, width, addr, dests, (key, offset, size, addr, scales)))
        if extra:
            last = uops[-1]
            uops[-1] = uop(last.klass, last.width, last.reads, [*last.writes, *extra], last.mem)
        return Decoded((*uops, *wb), broadcast=broadcast, writeback=stepped)
    # stores
    srcs = [r for r in data_regs if canonical("aarch64", r.split(".")[0], True) is not None or r in ("xzr", "wzr")]
    status = [w for w in writes if w != base]
    uops = [uop("store_addr", 64, addr, status)]
    size0 = a64_register_bytes(srcs[0]) if srcs else 8
    if mnem in ("strb", "sturb", "stlrb"):
        size0 = 1
    elif mnem in ("strh", "sturh", "stlrh"):
        size0 = 2
    for k, r in enumerate(srcs):
        reg = canonical("aarch64", r.split(".")[0], True)
        vec = _a64_is_vec(r)
        uops.append(
            uop("vstore_data" if vec else "store_data", max(64, 8 * size0), [reg] if reg else [], (),
                 (key, offset + k * size0, size0, addr, scales))
        )
    return Decoded((*uops, *wb), writeback=stepped)


