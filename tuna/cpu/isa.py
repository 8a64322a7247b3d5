"""Instruction-set facts of x86-64 and AArch64, written once, apart from any machine's timing.

What an instruction *is* (its timing class, the counting category of that class, the width
of its operands and the data lanes it works on, the registers its operands alias) is a fact
of the instruction set; how fast one machine executes each timing class is data, in
``tuna/data/uarch/<preset>.toml``. Every consumer derives what it needs from here:

- the simulator's decoders (:mod:`tuna.cpu.simulator.decode_x86`,
  :mod:`tuna.cpu.simulator.decode_aarch64`) look up the timing class of each micro-op with
  :func:`vector_class` / :func:`scalar_class` and its counting category with :data:`KIND_OF`;
- disassembly (:mod:`tuna.cpu.disassembly`) gives each instruction the counting class of
  its timing class (:func:`arithmetic_class`), save the few named exceptions there;
- the loop mapping counts lanes with :func:`lanes`;
- the simulator's register names (:mod:`tuna.cpu.simulator.registers`) and the trip-count
  recovery (:mod:`tuna.cpu.trip_counts`) alias x86 registers with :data:`X86_GPR_ALIASES`.

This module imports nothing of tuna but :mod:`tuna.errors` and :mod:`tuna.ir` (no Capstone, no
timing data).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType

from ..errors import UnsupportedISAError
from ..ir import Instruction

#: Instruction sets tuna's CPU analyses decode.
ISAS = ("x86-64", "aarch64")

#: Counting categories of the simulator's micro-ops (:attr:`~tuna.cpu.simulator.BlockTiming.counts`).
KINDS = ("fma", "add", "mul", "div", "load", "store", "shuffle", "other")

#: Counting category of each timing class (a class not listed counts as "other").
KIND_OF = MappingProxyType(
    {
        "fma": "fma",
        "fadd": "add",
        "freduce": "add",
        "fmul": "mul",
        "fdiv": "div",
        "fsqrt": "div",
        "load": "load",
        "load_pair": "load",
        "vload": "load",
        "vload_pair": "load",
        "vload_frame": "load",
        "vload_dup": "load",
        "vload_lane": "load",
        "vload_struct": "load",
        "store_data": "store",
        "vstore_data": "store",
        "vgather": "load",
        "vscatter": "store",
        "vmaskstore": "store",
        "vshuffle": "shuffle",
        "vperm": "shuffle",
        "vbroadcast": "shuffle",
        "vbroadcast_gpr": "shuffle",
    }
)

#: The arithmetic counting classes: TIR op classes and machine instruction classes alike.
ARITHMETIC = ("fma", "add", "mul", "div")


def check_isa(isa: str) -> None:
    """Raise :class:`~tuna.errors.UnsupportedISAError` for an instruction set not in :data:`ISAS`."""
    if isa not in ISAS:
        raise UnsupportedISAError(f"cannot time {isa} machine code; supported: {', '.join(ISAS)}")


# --------------------------------------------------------------------------------------------
# Timing classes by mnemonic prefix (first match wins)
# --------------------------------------------------------------------------------------------

#: x86 SIMD and FP instructions, by mnemonic without its VEX/EVEX ``v``.
X86_VECTOR_RULES = (
    (("gather", "pgather"), "vgather"),
    (("scatter", "pscatter"), "vscatter"),
    (("fmadd", "fmsub", "fnmadd", "fnmsub"), "fma"),
    (("divp", "divs"), "fdiv"),
    (("sqrtp", "sqrts"), "fsqrt"),
    (("rcp", "rsqrt"), "frcp"),
    (("mulp", "muls"), "fmul"),
    (("addp", "adds", "subp", "subs", "maxp", "maxs", "minp", "mins", "hadd", "hsub"), "fadd"),
    (("cmpp", "cmps", "comis", "ucomis", "fpclass"), "fcmp"),
    (("cvt", "roundp", "rounds", "rndscale", "getexp", "getmant", "reduce"), "fcvt"),
    (("pmul", "pmadd", "pdpb", "pdpw"), "vimul"),
    (("psll", "psrl", "psra", "prol", "pror"), "vshift"),
    (("permil",), "vshuffle"),
    (("perm", "pperm"), "vperm"),
    (("broadcast", "pbroadcast", "movddup"), "vbroadcast"),
    (("blend", "pblend"), "vblend"),
    (("movaps", "movups", "movapd", "movupd", "movdqa", "movdqu"), "vmov"),
    (("movd", "movq", "pextr", "pinsr", "movmsk", "pmovmsk", "extractps"), "vmov_gpr"),
    (("shuf", "unpck", "punpck", "pshuf", "palign", "valign", "align", "insert", "extract", "pack", "pmov",
      "movhl", "movlh", "movsh", "movsl", "expand", "compress", "movss", "movsd", "pcompress", "pexpand"),
     "vshuffle"),
    (("andp", "andnp", "orp", "xorp", "pand", "por", "pxor", "pternlog", "ptest", "test"), "vlogic"),
    (("padd", "psub", "pmax", "pmin", "pabs", "pcmp", "pavg", "psign", "plzcnt", "popcnt", "psad"), "vialu"),
)
#: x86 general-purpose instructions.
X86_SCALAR_RULES = (
    (("add", "sub", "and", "or", "xor", "cmp", "test", "inc", "dec", "neg", "not", "adc", "sbb", "set", "bt",
      "movzx", "movsx", "cdq", "cqo", "cdqe", "cwde", "bswap", "andn", "bls", "xchg", "popcnt", "lzcnt",
      "tzcnt"), "alu"),
    (("shl", "shr", "sar", "rol", "ror", "rcl", "rcr"), "shift"),
    (("imul", "mul"), "imul"),
    (("div", "idiv"), "idiv"),
    (("cmov",), "cmov"),
)
#: AArch64 instructions writing a SIMD/FP register.
A64_VECTOR_RULES = (
    (("fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fnmsub"), "fma"),
    (("fmaxv", "fminv", "fmaxnmv", "fminnmv", "addv", "umaxv", "smaxv", "uminv", "sminv", "saddlv", "uaddlv",
      "faddp", "fmaxp", "fminp", "fmaxnmp", "fminnmp"), "freduce"),
    (("fadd", "fsub", "fabd", "fmax", "fmin", "fneg", "fabs"), "fadd"),
    (("fmul", "fnmul"), "fmul"),
    (("fdiv",), "fdiv"),
    (("fsqrt",), "fsqrt"),
    (("frecp", "frsqrt"), "frcp"),
    (("fcm", "fac", "fccmp", "fcsel"), "fcmp"),
    (("fcvt", "scvtf", "ucvtf", "frint"), "fcvt"),
    (("umov", "smov"), "vmov_gpr"),
    (("ins", "ext", "zip", "uzp", "trn", "tbl", "tbx", "rev", "xtn", "uxtl", "sxtl", "ushll", "sshll", "shrn",
      "rshrn", "sqxtn", "uqxtn", "sqxtun"), "vshuffle"),
    (("and", "orr", "eor", "bic", "orn", "bif", "bit", "bsl", "not", "mvn", "movi", "mvni"), "vlogic"),
    (("mul", "mla", "mls", "smull", "umull", "smlal", "umlal", "sqdmulh", "sqrdmulh", "sdot", "udot", "usdot",
      "pmul", "sqdmull"), "vimul"),
    (("shl", "sshr", "ushr", "ssra", "usra", "srshr", "urshr", "sshl", "ushl", "sli", "sri", "sqshl", "uqshl",
      "srshl", "urshl"), "vshift"),
    (("add", "sub", "neg", "abs", "smax", "smin", "umax", "umin", "cm", "uqadd", "sqadd", "uqsub", "sqsub",
      "saba", "uaba", "sabd", "uabd", "cnt", "addp", "uadd", "sadd", "usub", "ssub"), "vialu"),
)
#: AArch64 instructions writing a general-purpose register.
A64_SCALAR_RULES = (
    (("madd", "msub", "mneg", "smull", "umull", "smulh", "umulh", "smaddl", "umaddl", "smsubl", "umsubl", "mul"),
     "imul"),
    (("sdiv", "udiv"), "idiv"),
)

_VECTOR_RULES = {"x86-64": X86_VECTOR_RULES, "aarch64": A64_VECTOR_RULES}
_SCALAR_RULES = {"x86-64": X86_SCALAR_RULES, "aarch64": A64_SCALAR_RULES}


def vector_class(isa: str, mnemonic: str, default: str | None = "vlogic") -> str | None:
    """Timing class of a SIMD/FP instruction (x86: the mnemonic without its ``v``)."""
    return next((k for prefixes, k in _VECTOR_RULES[isa] if mnemonic.startswith(prefixes)), default)


def scalar_class(isa: str, mnemonic: str) -> str:
    """Timing class of a general-purpose instruction ("alu" when no rule names it)."""
    return next((k for prefixes, k in _SCALAR_RULES[isa] if mnemonic.startswith(prefixes)), "alu")


# The counting class of an instruction (:attr:`tuna.ir.Instruction.klass`) is the counting
# category of its timing class where that is arithmetic (fma, add, mul, div), save the forms
# below, counted "other". The instruction counts feed features whose coefficients were fitted
# with these forms left out, so they stay left out; the simulator's micro-op counts include them.
#: x86: only the VEX/EVEX forms (``v...``); LLVM emits the legacy SSE encodings only for
#: targets without AVX.
_X86_COUNTED_PREFIX = "v"
#: x86: scalar max/min (compare-and-select) and horizontal add/subtract (shuffles and adds).
_X86_UNCOUNTED = ("maxs", "mins", "hadd", "hsub")
#: AArch64: only FP mnemonics (``f...``): the integer reductions (``addv``, ``umaxv``, ...)
#: share the FP reductions' timing class.
_A64_COUNTED_PREFIX = "f"
#: AArch64: negated forms (``fnmadd``, ``fnmsub``, ``fnmul``, ``fneg``), absolute values and
#: differences (``fabs``, ``fabd``).
_A64_UNCOUNTED = ("fn", "fab")


def arithmetic_class(isa: str, mnemonic: str) -> str | None:
    """Counting class (fma, add, mul, div) of an FP arithmetic instruction, else None.

    The counting category (:data:`KIND_OF`) of the instruction's timing class, except for
    the forms named above; the call, branch, load and store classes come from Capstone's
    operand details in :mod:`tuna.cpu.disassembly`.
    """
    if isa == "x86-64":
        if not mnemonic.startswith(_X86_COUNTED_PREFIX) or mnemonic[1:].startswith(_X86_UNCOUNTED):
            return None
        klass = vector_class(isa, mnemonic[1:], None)
    else:
        if not mnemonic.startswith(_A64_COUNTED_PREFIX) or mnemonic.startswith(_A64_UNCOUNTED):
            return None
        klass = vector_class(isa, mnemonic, None)
    kind = KIND_OF.get(klass)
    return kind if kind in ARITHMETIC else None


# --------------------------------------------------------------------------------------------
# Register aliases
# --------------------------------------------------------------------------------------------

#: x86 general-purpose registers and the narrower registers that are their low parts
#: (32-bit, 16-bit, low byte); writing the 32-bit one clears the upper half.
X86_GPR_ALIASES = MappingProxyType(
    {
        "rax": ("eax", "ax", "al"),
        "rbx": ("ebx", "bx", "bl"),
        "rcx": ("ecx", "cx", "cl"),
        "rdx": ("edx", "dx", "dl"),
        "rsi": ("esi", "si", "sil"),
        "rdi": ("edi", "di", "dil"),
        "rbp": ("ebp", "bp", "bpl"),
        "rsp": ("esp", "sp", "spl"),
        **{f"r{i}": (f"r{i}d", f"r{i}w", f"r{i}b") for i in range(8, 16)},
    }
)
#: x86 high-byte registers (bits 8-15 of the first four).
X86_HIGH_BYTES = MappingProxyType({"ah": "rax", "bh": "rbx", "ch": "rcx", "dh": "rdx"})


# --------------------------------------------------------------------------------------------
# Operand widths and lanes
# --------------------------------------------------------------------------------------------

#: Bits of the x86 vector registers, by name prefix, widest first.
X86_VECTOR_BITS = MappingProxyType({"zmm": 512, "ymm": 256, "xmm": 128})
#: Bytes of an x86 memory operand, by its size keyword (``zmmword ptr [...]``).
X86_PTR_BYTES = MappingProxyType(
    {"zmmword": 64, "ymmword": 32, "xmmword": 16, "tbyte": 10, "qword": 8, "dword": 4, "word": 2, "byte": 1}
)
#: Bits of a packed element, by the mnemonic's suffix (``vaddps``: single precision).
_X86_ELEMENT_BITS = (("ps", 32), ("pd", 64), ("ph", 16))
#: Bits of the elements an x86 gather or scatter moves, by the mnemonic's last letters
#: (``vgatherdps``: single precision with dword indices; ``vpgatherqq``: quadwords).
_X86_GATHER_ELEMENT_BITS = (("ps", 32), ("pd", 64), ("d", 32), ("q", 64))
#: Bytes of an AArch64 vector element (``v0.4s``, ``v1.s[2]``) and of a register by its name's letter.
A64_ELEMENT_BYTES = MappingProxyType({"b": 1, "h": 2, "s": 4, "d": 8})
A64_REGISTER_BYTES = MappingProxyType({**A64_ELEMENT_BYTES, "q": 16, "w": 4, "x": 8})
_A64_ARRANGEMENT = re.compile(r"v\d+\.(\d+)([bhsd])$")
_A64_ELEMENT = re.compile(r"v\d+\.[bhsd]\[\d+\]$")
#: A word of operand text: register names, size keywords, shift names (not immediates).
WORD = re.compile(r"(?<![#\w])[a-z][a-z0-9]*")


def x86_gather_lanes(mnemonic: str, operands: str) -> int:
    """Elements an x86 gather or scatter moves: its data register's width over its element's.

    The data register is the destination of a gather and the source of a scatter; the index
    register can be wider (``vgatherqps ymm1 {k1}, [rax + zmm2*4]`` moves 8 elements).
    """
    ops = [op for op in operands.lower().split(",") if "[" not in op]
    bits = x86_register_bits(ops[0]) if ops else 128
    elem = next((b for suffix, b in _X86_GATHER_ELEMENT_BITS if mnemonic.lower().endswith(suffix)), 32)
    return max(1, bits // elem)


def x86_register_bits(text: str) -> int:
    """Widest vector register ``text`` names, in bits (64 when it names none)."""
    width = 64
    for tok in WORD.findall(text):
        w = X86_VECTOR_BITS.get(tok[:3]) if tok[3:].isdigit() else None
        if w and w > width:
            width = w
    return width


def a64_arrangement(operand: str) -> tuple[int, int] | None:
    """``(lanes, element bytes)`` of an arranged vector register (``v0.4s``: 4, 4), else None."""
    m = _A64_ARRANGEMENT.match(operand.strip("{} "))
    return (int(m.group(1)), A64_ELEMENT_BYTES[m.group(2)]) if m else None


def a64_register_bits(operands: Sequence[str]) -> int:
    """Widest vector the operands name, in bits (64 for scalar and general-purpose registers)."""
    width = 64
    for op in operands:
        op = op.strip("{} ")
        if op[:1] == "q" and op[1:].isdigit():
            width = max(width, 128)
        if (arr := a64_arrangement(op)) is not None:
            width = max(width, arr[0] * arr[1] * 8)
    return width


def a64_register_bytes(reg: str) -> int:
    """Bytes one AArch64 register operand holds (``v0.4s``: 16, ``v1.s[2]``: 4, ``w3``: 4)."""
    reg = reg.strip("{} ")
    if (arr := a64_arrangement(reg)) is not None:
        return arr[0] * arr[1]
    if _A64_ELEMENT.match(reg):
        return A64_ELEMENT_BYTES[reg.split(".")[1][0]]
    return A64_REGISTER_BYTES.get(reg[:1], 8)


def lanes(isa: str, ins: Instruction) -> int:
    """Data elements one arithmetic or store instruction works on (1 for scalar forms).

    x86: the destination's vector width (a register, or a memory operand's size keyword)
    over the element size of a packed mnemonic; AArch64: the destination's arrangement.
    """
    dest = ins.operands.split(",", 1)[0]
    if isa == "x86-64":
        elem = next((bits for suffix, bits in _X86_ELEMENT_BITS if ins.mnemonic.endswith(suffix)), 0)
        if not elem:
            return 1
        width = next((bits for prefix, bits in X86_VECTOR_BITS.items() if prefix in dest), 128)
        return width // elem
    arr = a64_arrangement(dest)
    return arr[0] if arr else 1
