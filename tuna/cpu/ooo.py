"""Basic-block timing by list scheduling of micro-ops on a model of the CPU's pipes.

Each instruction of a block is decoded into micro-ops (an x86 load-op instruction into a load
and an arithmetic micro-op, a store into store-address and store-data micro-ops, an AArch64
writeback load into a load and a base-register update, ...). The mnemonic -> class mapping is
an ISA fact kept in this module; how one machine executes each class (latency, the pipes a
micro-op may issue to, reciprocal throughput, width dependence) is data, in
``tuna/data/uarch/<preset>.toml``, with its sources named there.

:func:`simulate` schedules the micro-ops of a block under the machine's dispatch width, pipe
counts, latencies and, for an out-of-order core, its reorder buffer: register renaming removes
false (WAR/WAW) dependencies, so only true (RAW) ones and memory forwarding through the same
stack slot constrain it. An in-order core (``machine.in_order``) issues in program order and
honours false dependencies too. With ``loop=True`` the block is taken as the body of a loop
and several iterations are scheduled back to back, with loop-carried registers flowing from
one to the next; the steady-state cycles per iteration is the slope over the later ones.

The result carries the analytical bounds alongside (pipe pressure, recurrence or critical
path, front-end width) and is never below the largest of them. Results are memoised on the
block's instructions, so a block seen again costs a dictionary look-up.
"""

from __future__ import annotations

import heapq
import math
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from types import MappingProxyType

from ..errors import TargetError, UnsupportedISAError
from ..ir import Instruction
from ..machine import Machine

#: Instruction sets this module decodes.
ISAS = ("x86-64", "aarch64")

#: Counting categories of :attr:`BlockTiming.counts`.
KINDS = ("fma", "add", "mul", "div", "load", "store", "shuffle", "other")

#: A timing class missing from a data file is looked up as the next one here, then "alu".
FALLBACK = MappingProxyType(
    {
        "fma": "fmul",
        "fmul": "fadd",
        "fadd": "vlogic",
        "fcmp": "fadd",
        "fcvt": "fadd",
        "freduce": "fadd",
        "fdiv": "fmul",
        "fsqrt": "fdiv",
        "frcp": "fmul",
        "vialu": "vlogic",
        "vimul": "fmul",
        "vshift": "vialu",
        "vshuffle": "vlogic",
        "vperm": "vshuffle",
        "vbroadcast": "vshuffle",
        "vbroadcast_gpr": "vbroadcast",
        "vblend": "vlogic",
        "vmov": "vlogic",
        "vmov_gpr": "vshuffle",
        "vlogic": "alu",
        "kmask": "alu",
        "shift": "alu",
        "alu_shift": "alu",
        "lea": "alu",
        "mov": "alu",
        "movimm": "alu",
        "cmov": "alu",
        "wb": "alu",
        "imul": "alu",
        "idiv": "imul",
        "branch": "alu",
        "call": "branch",
        "load": "alu",
        "load_pair": "load",
        "vload": "load",
        "vload_pair": "vload",
        "vload_dup": "vload",
        "vload_lane": "vload_dup",
        "vload_struct": "vload_dup",
        "prefetch": "load",
        "store_addr": "alu",
        "store_data": "alu",
        "vstore_data": "store_data",
    }
)

_KIND_OF = {
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
    "vload_dup": "load",
    "vload_lane": "load",
    "vload_struct": "load",
    "store_data": "store",
    "vstore_data": "store",
    "vshuffle": "shuffle",
    "vperm": "shuffle",
    "vbroadcast": "shuffle",
    "vbroadcast_gpr": "shuffle",
}
# Micro-op classes that never reach a pipe: they only take a dispatch slot.
_NO_EXEC = frozenset({"nop", "zero"})
_WIDTH_KEYS = (64, 128, 256, 512)
_INF = float("inf")


# --------------------------------------------------------------------------------------------
# Micro-architecture data
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassTiming:
    """How one machine executes one timing class at one operand width.

    Attributes
    ----------
    latency : float
        Cycles from the micro-op's issue to a dependent micro-op's earliest issue.
    uops : tuple of tuple of int
        For each pipe micro-op the class needs, the indices (into :attr:`Uarch.ports`) of the
        pipes it may issue to; empty for work done at rename (eliminated moves, zero idioms).
    occupancy : tuple of float
        Cycles each of those micro-ops holds its pipe (reciprocal throughput times pipe count).
    rthroughput : float
        Reciprocal throughput of the class alone on the machine, in cycles per instruction.
    """

    latency: float
    uops: tuple[tuple[int, ...], ...]
    occupancy: tuple[float, ...]
    rthroughput: float


@dataclass(frozen=True)
class Uarch:
    """Execution resources and instruction timing of one CPU preset.

    Attributes
    ----------
    name : str
        Preset name (``tuna/data/targets/<name>.toml``).
    ports : tuple of str
        Names of the execution pipes.
    dispatch_width : int
        Front-end slots (x86 macro-ops, AArch64 instructions) renamed and dispatched a cycle;
        instructions issued a cycle on an in-order core.
    retire_width : int
        Instructions retired a cycle.
    rob_size : int
        Reorder-buffer entries (0 for no limit or an in-order core).
    move_elimination, zero_idioms, macro_fusion, unlaminate_indexed : bool
        Whether register moves and zeroing idioms are handled at rename, compare-and-branch
        pairs take one slot, and x86 load-op instructions with an indexed address take two.
    store_forward_latency : float
        Cycles from a store's data to a load of the same address.
    schedulers : tuple of int
        Entries of each scheduler (issue queue); dispatch stalls while the one a micro-op
        needs is full of micro-ops waiting to issue.
    port_scheduler : tuple of int
        For each pipe, the index of the scheduler feeding it (-1 for none).
    table : Mapping
        ``(class, width) -> ClassTiming`` for every known class and width (64, 128, 256, 512).
    """

    name: str
    ports: tuple[str, ...]
    dispatch_width: int
    retire_width: int
    rob_size: int
    move_elimination: bool
    zero_idioms: bool
    macro_fusion: bool
    unlaminate_indexed: bool
    store_forward_latency: float
    schedulers: tuple[int, ...]
    port_scheduler: tuple[int, ...]
    table: Mapping[tuple[str, int], ClassTiming]

    def timing(self, klass: str, width: int = 64) -> ClassTiming:
        """Timing of ``klass`` at operand ``width`` bits (a class not known is an ALU op)."""
        key = (klass, _width_key(width))
        found = self.table.get(key)
        return found if found is not None else self.table[("alu", key[1])]


def _width_key(width: int) -> int:
    for w in _WIDTH_KEYS:
        if width <= w:
            return w
    return 512


def _class_timing(spec: Mapping, ports: tuple[str, ...], where: str) -> ClassTiming:
    index = {p: i for i, p in enumerate(ports)}

    def pipes(names) -> tuple[int, ...]:
        try:
            return tuple(index[n] for n in names)
        except KeyError as err:
            raise TargetError(f"{where} names the pipe {err} the file does not declare in `ports`") from None

    latency = float(spec.get("latency", 1))
    if "uops" in spec:
        groups = tuple(pipes(g) for g in spec["uops"])
        occ = tuple(float(spec.get("occupancy", 1)) for _ in groups)
        rtp = max(o / len(g) for o, g in zip(occ, groups)) if groups else 0.0
        return ClassTiming(latency, groups, occ, float(spec.get("rthroughput", rtp)))
    group = pipes(spec.get("ports", ()))
    if not group:
        return ClassTiming(latency, (), (), 0.0)
    rtp = float(spec.get("rthroughput", 1.0 / len(group)))
    return ClassTiming(latency, (group,), (rtp * len(group),), rtp)


@cache
def load_uarch(name: str) -> Uarch:
    """Read ``tuna/data/uarch/<name>.toml`` (cached).

    Parameters
    ----------
    name : str
        Preset name, as in ``tuna/data/targets``.

    Returns
    -------
    Uarch
        The pipes, front-end and window sizes, and a timing for every known class and width.

    Raises
    ------
    TargetError
        If there is no data file for the preset or it is malformed.
    """
    path = resources.files("tuna.data").joinpath("uarch", f"{name}.toml")
    if not path.is_file():
        known = sorted(p.name[:-5] for p in resources.files("tuna.data").joinpath("uarch").iterdir()
                       if p.name.endswith(".toml"))
        raise TargetError(
            f"no micro-architecture data for preset {name!r} (tuna/data/uarch/{name}.toml); "
            f"known: {', '.join(known)}"
        )
    data = tomllib.loads(path.read_text())
    try:
        ports = tuple(data["ports"])
        classes = data["class"]
        table: dict[tuple[str, int], ClassTiming] = {}
        specs: dict[tuple[str, int], dict] = {}
        for klass, spec in classes.items():
            base = {k: v for k, v in spec.items() if not k.startswith("w")}
            for w in _WIDTH_KEYS:
                merged = dict(base)
                over = spec.get(f"w{w}", {})
                if "ports" in over or "uops" in over:
                    merged.pop("ports", None)
                    merged.pop("uops", None)
                merged.update(over)
                specs[(klass, w)] = merged
        scheds = data.get("scheduler", [])
        port_sched = [-1] * len(ports)
        for q, sched in enumerate(scheds):
            for name_ in sched["ports"]:
                if name_ not in ports:
                    raise TargetError(f"{name}.toml: scheduler names the undeclared pipe {name_!r}")
                port_sched[ports.index(name_)] = q
        if ("alu", 64) not in specs:
            raise TargetError(f"{name}.toml has no [class.alu]")
        for (klass, w), spec in specs.items():
            table[(klass, w)] = _class_timing(spec, ports, f"{name}.toml [class.{klass}]")
        for klass in set(FALLBACK) | {"alu"}:
            for w in _WIDTH_KEYS:
                k = klass
                while (k, w) not in table:
                    k = FALLBACK.get(k, "alu")
                table.setdefault((klass, w), table[(k, w)])
        return Uarch(
            name=data["name"],
            ports=ports,
            dispatch_width=int(data["dispatch_width"]),
            retire_width=int(data.get("retire_width", data["dispatch_width"])),
            rob_size=int(data.get("rob_size", 0)),
            move_elimination=bool(data.get("move_elimination", False)),
            zero_idioms=bool(data.get("zero_idioms", False)),
            macro_fusion=bool(data.get("macro_fusion", False)),
            unlaminate_indexed=bool(data.get("unlaminate_indexed", False)),
            store_forward_latency=float(data.get("store_forward_latency", 5)),
            schedulers=tuple(int(q["size"]) for q in scheds),
            port_scheduler=tuple(port_sched),
            table=MappingProxyType(table),
        )
    except KeyError as err:
        raise TargetError(f"micro-architecture file {name}.toml lacks the field {err}") from None


def uarch(machine: Machine | str) -> Uarch:
    """The micro-architecture data of a CPU preset.

    Parameters
    ----------
    machine : Machine or str
        A CPU preset or its name.

    Returns
    -------
    Uarch
        As :func:`load_uarch` reads it.

    Raises
    ------
    UnsupportedISAError
        For a machine whose instruction set is not x86-64 or AArch64.
    TargetError
        When there is no data file for the preset.
    """
    if isinstance(machine, str):
        return load_uarch(machine)
    _check_isa(machine.isa)
    return load_uarch(machine.name)


def _check_isa(isa: str) -> None:
    if isa not in ISAS:
        raise UnsupportedISAError(f"cannot time {isa} machine code; supported: {', '.join(ISAS)}")


# --------------------------------------------------------------------------------------------
# Registers
# --------------------------------------------------------------------------------------------

_X86_GPR = {}
for _full, _names in {
    "rax": ("eax", "ax", "al", "ah"),
    "rbx": ("ebx", "bx", "bl", "bh"),
    "rcx": ("ecx", "cx", "cl", "ch"),
    "rdx": ("edx", "dx", "dl", "dh"),
    "rsi": ("esi", "si", "sil"),
    "rdi": ("edi", "di", "dil"),
    "rbp": ("ebp", "bp", "bpl"),
    "rsp": ("esp", "sp", "spl"),
}.items():
    _X86_GPR[_full] = _full
    for _n in _names:
        _X86_GPR[_n] = _full
for _i in range(8, 16):
    for _sfx in ("", "d", "w", "b"):
        _X86_GPR[f"r{_i}{_sfx}"] = f"r{_i}"
for _i in range(32):
    for _p in ("xmm", "ymm", "zmm"):
        _X86_GPR[f"{_p}{_i}"] = f"v{_i}"
for _i in range(8):
    _X86_GPR[f"k{_i}"] = f"k{_i}"
for _n in ("rflags", "eflags", "flags"):
    _X86_GPR[_n] = "flags"
_X86_IGNORED = frozenset({"rip", "eip", "mxcsr", "fpsw", "fpcw", "ssp"})
_X86_VEC_WIDTH = {"xmm": 128, "ymm": 256, "zmm": 512}
_X86_PTR = {"zmmword": 64, "ymmword": 32, "xmmword": 16, "tbyte": 10, "qword": 8, "dword": 4, "word": 2, "byte": 1}

_A64_REG = re.compile(r"^([wxbhsdqv])(\d+)$")
_A64_SPECIAL = {"sp": "sp", "wsp": "sp", "fp": "x29", "lr": "x30", "nzcv": "flags", "ip0": "x16", "ip1": "x17"}
_A64_IGNORED = frozenset({"xzr", "wzr", "fpsr", "fpcr", "pc"})
_A64_BYTES = {"b": 1, "h": 2, "s": 4, "d": 8, "q": 16, "w": 4, "x": 8}
_TOKEN = re.compile(r"(?<![#\w])[a-z][a-z0-9]*")


@lru_cache(maxsize=4096)
def _canon(isa: str, name: str, strict: bool = False) -> str | None:
    """Canonical register for aliasing (eax -> rax, ymm3 -> v3, s0/q0/v0 -> v0, w1 -> x1).

    ``None`` for a name that holds no value worth tracking (rip, xzr, fpcr); with ``strict``,
    also for tokens that are not register names at all (``ptr``, ``lsl``).
    """
    name = name.lower()
    if isa == "x86-64":
        if name in _X86_GPR:
            return _X86_GPR[name]
        if name in _X86_IGNORED or strict:
            return None
        return name
    m = _A64_REG.match(name)
    if m and int(m.group(2)) < 32:
        return ("x" if m.group(1) in "wx" else "v") + m.group(2)
    if name in _A64_SPECIAL:
        return _A64_SPECIAL[name]
    if name in _A64_IGNORED or strict:
        return None
    return name


def _regs_in(isa: str, text: str) -> list[str]:
    out = []
    for tok in _TOKEN.findall(text.lower()):
        r = _canon(isa, tok, True)
        if r is not None and r not in out:
            out.append(r)
    return out


def _split_operands(ops: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in ops:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def _int(text: str) -> int | None:
    text = text.strip().lstrip("#$").replace(" ", "")
    try:
        return int(text, 0)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# Decoding: instruction -> micro-ops (ISA facts only)
# --------------------------------------------------------------------------------------------


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
        Counting category, one of :data:`KINDS`.
    mem : tuple or None
        For loads and store data, ``(address_key, offset, size_bytes, address_registers)``:
        accesses with the same key and overlapping ranges whose address registers the block
        does not change touch the same memory.
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
    """

    uops: tuple[MicroOp, ...]
    slots: int = 1
    broadcast: bool = False
    fusible: bool = False  # an x86 ALU op that a following Jcc may fuse with
    unlaminated: bool = False  # an x86 load-op with an indexed address and three operands


def _uop(klass: str, width: int, reads: Iterable[str], writes: Iterable[str], mem=None) -> MicroOp:
    reads = tuple(dict.fromkeys(r for r in reads if r))
    writes = tuple(dict.fromkeys(w for w in writes if w))
    return MicroOp(klass, width, reads, writes, _KIND_OF.get(klass, "other"), mem)


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
_X86_ZERO_IDIOMS = frozenset(
    {"xor", "sub", "pxor", "pxord", "pxorq", "xorps", "xorpd", "psubd", "psubq", "psubb", "psubw", "pandn", "andnps"}
)
_X86_VEC_RULES = (
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
_X86_GPR_RULES = (
    (("add", "sub", "and", "or", "xor", "cmp", "test", "inc", "dec", "neg", "not", "adc", "sbb", "set", "bt",
      "movzx", "movsx", "cdq", "cqo", "cdqe", "cwde", "bswap", "andn", "bls", "xchg", "popcnt", "lzcnt",
      "tzcnt"), "alu"),
    (("shl", "shr", "sar", "rol", "ror", "rcl", "rcr"), "shift"),
    (("imul", "mul"), "imul"),
    (("div", "idiv"), "idiv"),
    (("cmov",), "cmov"),
)
_X86_FUSIBLE = frozenset({"cmp", "test", "add", "sub", "and", "inc", "dec"})


def _x86_width(text: str) -> int:
    width = 64
    for tok in _TOKEN.findall(text):
        w = _X86_VEC_WIDTH.get(tok[:3]) if tok[:3] in _X86_VEC_WIDTH and tok[3:].isdigit() else None
        if w and w > width:
            width = w
    return width


def _x86_class(mnem: str, vector: bool, ops: list[str]) -> str:
    if mnem.startswith("k") and len(mnem) > 2 and mnem[1:4] in ("mov", "and", "or", "xor", "not", "shi", "ort", "tes",
                                                               "add", "unp", "xno"):
        return "kmask"
    if vector or mnem.startswith("v"):
        base = mnem[1:] if mnem.startswith("v") else mnem
        for prefixes, klass in _X86_VEC_RULES:
            if base.startswith(prefixes):
                return klass
        return "vlogic"
    if mnem == "lea":
        return "lea"
    if mnem == "mov":
        return "mov" if len(ops) == 2 and _canon("x86-64", ops[1], True) else "movimm"
    for prefixes, klass in _X86_GPR_RULES:
        if mnem.startswith(prefixes):
            return klass
    return "alu"


def _x86_address(inner: str) -> tuple[str, int, tuple[str, ...]]:
    """``(key, displacement, registers)`` of the text between brackets, e.g. ``rax + rcx*4 - 0x40``."""
    text = inner.replace(" ", "")
    terms = re.findall(r"[+-]?[^+-]+", text)
    regs, disp, key = [], 0, []
    for term in terms:
        sign = -1 if term.startswith("-") else 1
        body = term.lstrip("+-")
        value = _int(body)
        if value is not None:
            disp += sign * value
            continue
        name = body.split("*")[0]
        r = _canon("x86-64", name, True)
        if r is not None:
            regs.append(r)
        key.append(body)
    return "+".join(key), disp, tuple(regs)


def _decode_x86(ins: Instruction) -> Decoded:
    mnem = ins.mnemonic.lower()
    reads = [r for r in (_canon("x86-64", n) for n in ins.reads) if r]
    writes = [w for w in (_canon("x86-64", n) for n in ins.writes) if w]
    ops = _split_operands(ins.operands.lower())
    if mnem.startswith("nop") or mnem in ("endbr64", "endbr32", "int3", "ud2"):
        return Decoded(())
    if mnem.startswith("j") or mnem.startswith("loop"):
        return Decoded((_uop("branch", 64, reads, [w for w in writes if w != "rip"]),))
    if mnem.startswith(("call", "ret")):
        return Decoded((_uop("call", 64, reads, writes),))
    mem_i = next((i for i, op in enumerate(ops) if "[" in op), None)
    width = _x86_width(ins.operands.lower())
    vector = width > 64 or any(op.startswith(("xmm", "ymm", "zmm")) for op in ops)
    broadcast = "{1to" in ins.operands or "broadcast" in mnem or mnem.endswith("movddup")
    if mnem == "lea" or mem_i is None:
        if mnem == "lea":
            return Decoded((_uop("lea", 64, reads, writes),))
        klass = _x86_class(mnem, vector, ops)
        regs = [_canon("x86-64", op.split()[0], True) for op in ops]
        base = mnem[1:] if mnem.startswith("v") and len(ops) == 3 else mnem
        if base in _X86_ZERO_IDIOMS and len(ops) >= 2 and None not in regs and len(set(regs[-2:])) == 1:
            return Decoded((_uop("zero", width, (), writes),))
        fusible = mnem in _X86_FUSIBLE
        return Decoded((_uop(klass, width, reads, writes),), broadcast=broadcast, fusible=fusible)
    # An instruction with a memory operand.
    mem_op = ops[mem_i]
    inner = mem_op[mem_op.index("[") + 1 : mem_op.index("]")]
    key, disp, addr = _x86_address(inner)
    ptr = next((b for p, b in _X86_PTR.items() if mem_op.startswith(p)), 8)
    mem_width = max(64, 8 * ptr)
    outside = set(_regs_in("x86-64", " ".join(op for i, op in enumerate(ops) if i != mem_i)))
    outside |= set(_regs_in("x86-64", mem_op[mem_op.index("]") + 1 :]))  # {k1} masks
    named = outside | set(addr)
    implicit = [r for r in reads if r not in named]
    data_reads = [r for r in reads if r in outside] + implicit
    base = mnem[1:] if mnem.startswith("v") else mnem
    mem = (key, disp, ptr, addr)
    indexed = len(addr) > 1
    is_store = mem_i == 0 and not mnem.startswith(("cmp", "test", "bt", "vcmp", "vptest", "ucomi", "comi", "vucomi",
                                                   "vcomi", "prefetch"))
    if mnem.startswith("prefetch"):
        return Decoded((_uop("prefetch", 64, addr, (), None),))
    if is_store:
        data = [r for r in data_reads if r not in ("flags",)]
        if base in _X86_PURE_STORE or mnem in _X86_PURE_STORE:
            uops = (
                _uop("store_addr", 64, addr, ()),
                _uop("vstore_data" if vector else "store_data", width if vector else 64, data, (), mem),
            )
            return Decoded(uops)
        klass = _x86_class(mnem, vector, ops)
        if mnem.startswith(("vextract", "extract", "vcvt", "vpmov", "vcompress", "vpcompress", "pextr", "vpextr")):
            uops = (
                _uop(klass, width, data, ("~0",)),
                _uop("store_addr", 64, addr, ()),
                _uop("vstore_data", width, ("~0",), (), mem),
            )
            return Decoded(uops)
        # read-modify-write: load, operate, store
        uops = (
            _uop("load", 64, addr, ("~0",), mem),
            _uop(klass, 64, [*data_reads, "~0"], ["~1", *[w for w in writes if w not in addr]]),
            _uop("store_addr", 64, addr, ()),
            _uop("store_data", 64, ("~1",), (), mem),
        )
        return Decoded(uops, slots=2)
    dests = [w for w in writes]
    load_class = "vload" if vector else "load"
    if base in _X86_PURE_LOAD or mnem in _X86_PURE_LOAD:
        return Decoded((_uop(load_class, mem_width, addr, dests, mem),), broadcast=broadcast)
    klass = _x86_class(mnem, vector, ops)
    uops = (
        _uop(load_class, mem_width, addr, ("~0",), mem),
        _uop(klass, width, [*data_reads, "~0"], dests),
    )
    unlaminated = indexed and len(ops) >= 3 and mnem.startswith("v")
    return Decoded(uops, broadcast=broadcast, unlaminated=unlaminated)


_A64_VEC_RULES = (
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
_A64_GPR_RULES = (
    (("madd", "msub", "mneg", "smull", "umull", "smulh", "umulh", "smaddl", "umaddl", "smsubl", "umsubl", "mul"),
     "imul"),
    (("sdiv", "udiv"), "idiv"),
)
_A64_COMPARES = frozenset({"cmp", "cmn", "tst", "ccmp", "ccmn", "fcmp", "fcmpe", "fccmp", "fccmpe"})
_A64_VREG = re.compile(r"^(?:v\d+(?:\.\d*[bhsd])?(?:\[\d+\])?|[bhsdq]\d+)$")


def _a64_width(ops: Sequence[str]) -> int:
    width = 64
    for op in ops:
        op = op.strip("{} ")
        if op[:1] == "q" and op[1:].isdigit():
            width = max(width, 128)
        m = re.match(r"v\d+\.(\d+)([bhsd])$", op)
        if m:
            lanes = int(m.group(1))
            width = max(width, lanes * {"b": 8, "h": 16, "s": 32, "d": 64}[m.group(2)])
    return width


def _a64_bytes(reg: str) -> int:
    reg = reg.strip("{} ")
    m = re.match(r"v\d+\.(\d+)([bhsd])$", reg)
    if m:
        return int(m.group(1)) * {"b": 1, "h": 2, "s": 4, "d": 8}[m.group(2)]
    if re.match(r"v\d+\.[bhsd]\[\d+\]$", reg):
        return {"b": 1, "h": 2, "s": 4, "d": 8}[reg.split(".")[1][0]]
    return _A64_BYTES.get(reg[:1], 8)


def _a64_is_vec(op: str) -> bool:
    return bool(_A64_VREG.match(op.strip("{} ")))


def _a64_list(op: str) -> list[str]:
    """Registers of a ``{v0.4s, v1.4s}`` list (or the one register of a plain operand)."""
    if op.startswith("{"):
        body = op[1 : op.index("}")]
        return [r.strip() for r in body.split(",") if r.strip()]
    return [op]


def _decode_a64(ins: Instruction) -> Decoded:
    mnem = ins.mnemonic.lower()
    reads = [r for r in (_canon("aarch64", n) for n in ins.reads) if r]
    writes = [w for w in (_canon("aarch64", n) for n in ins.writes) if w]
    ops = _split_operands(ins.operands.lower())
    if mnem in ("nop", "hint", "yield", "bti"):
        return Decoded(())
    if mnem in ("bl", "blr"):
        return Decoded((_uop("call", 64, reads, writes),))
    if mnem in ("b", "br", "ret", "cbz", "cbnz", "tbz", "tbnz") or mnem.startswith("b."):
        return Decoded((_uop("branch", 64, reads, writes),))
    mem_i = next((i for i, op in enumerate(ops) if op.startswith("[")), None)
    if mem_i is not None and (mnem.startswith(("ld", "st", "prfm", "prfum"))):
        return _decode_a64_memory(mnem, ops, mem_i, reads, writes)
    if mnem in _A64_COMPARES:  # Capstone lists the compared register as written, not read
        reads = list(dict.fromkeys([*_regs_in("aarch64", " ".join(ops)), *(r for r in reads if r == "flags")]))
        writes = ["flags"]
    else:  # make sure the source operands are read (Capstone omits some)
        reads = list(dict.fromkeys([*reads, *_regs_in("aarch64", " ".join(ops[1:]))]))
    width = _a64_width(ops)
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
            klass = next((k for prefixes, k in _A64_VEC_RULES if mnem.startswith(prefixes)), "vlogic")
        return Decoded((_uop(klass, width, reads, writes),), broadcast=broadcast)
    # general-purpose registers
    if mnem == "mov":
        if len(ops) == 2 and _canon("aarch64", ops[1], True) not in (None,):
            return Decoded((_uop("mov", 64, reads, writes),))
        return Decoded((_uop("movimm", 64, reads, writes),))
    klass = next((k for prefixes, k in _A64_GPR_RULES if mnem.startswith(prefixes)), "alu")
    if klass == "alu" and len(ops) >= 4 and _canon("aarch64", ops[2], True):
        shift = ops[3].split()
        if len(shift) == 2 and shift[0] in ("lsl", "lsr", "asr", "ror") and (_int(shift[1]) or 0) > 4:
            klass = "alu_shift"
    return Decoded((_uop(klass, 64, reads, writes),))


def _decode_a64_memory(mnem: str, ops: list[str], mem_i: int, reads: list[str], writes: list[str]) -> Decoded:
    mem_op = ops[mem_i]
    inner = mem_op[1 : mem_op.index("]")]
    parts = [p.strip() for p in inner.split(",")]
    base = _canon("aarch64", parts[0], True) or parts[0]
    offset, index_regs = 0, []
    for p in parts[1:]:
        value = _int(p)
        if value is not None:
            offset += value
        else:
            r = _canon("aarch64", p.split()[0], True)
            if r:
                index_regs.append(r)
    addr = (base, *index_regs)
    key = ",".join(p for p in parts if _int(p) is None)
    post = [op for op in ops[mem_i + 1 :]]
    writeback = mem_op.endswith("!") or bool(post)
    post_regs = [r for r in (_canon("aarch64", op, True) for op in post) if r]
    data_ops = ops[:mem_i]
    data_regs = [r for op in data_ops for r in _a64_list(op)]
    wb = (_uop("wb", 64, [base, *post_regs], [base]),) if writeback else ()
    if mnem.startswith(("prfm", "prfum")):
        return Decoded((_uop("prefetch", 64, addr, ()),))
    if mnem.startswith("ld"):
        dest_names = [r for r in data_regs if _canon("aarch64", r.split(".")[0], True)]
        dests = [_canon("aarch64", r.split(".")[0], True) for r in dest_names]
        vec = bool(dest_names) and _a64_is_vec(dest_names[0])
        size = _a64_bytes(dest_names[0]) if dest_names else 8
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
            uops.append(_uop(klass, width, addr, dests, (key, offset, 2 * size, addr)))
        elif mnem[:3] in ("ld1", "ld2", "ld3", "ld4") and vec:
            klass = "vload_dup" if broadcast else ("vload_lane" if lane else ("vload" if mnem[:3] == "ld1"
                                                                               else "vload_struct"))
            reg_reads = dests if lane else []
            for k, d in enumerate(dests):
                uops.append(_uop(klass, width, [*addr, *([d] if reg_reads else [])], [d],
                                 (key, offset + k * size, size, addr)))
        else:
            klass = "vload" if vec else "load"
            uops.append(_uop(klass, width, addr, dests, (key, offset, size, addr)))
        if extra:
            last = uops[-1]
            uops[-1] = _uop(last.klass, last.width, last.reads, [*last.writes, *extra], last.mem)
        return Decoded((*uops, *wb), broadcast=broadcast)
    # stores
    srcs = [r for r in data_regs if _canon("aarch64", r.split(".")[0], True) is not None or r in ("xzr", "wzr")]
    status = [w for w in writes if w != base]
    uops = [_uop("store_addr", 64, addr, status)]
    size0 = _a64_bytes(srcs[0]) if srcs else 8
    if mnem in ("strb", "sturb", "stlrb"):
        size0 = 1
    elif mnem in ("strh", "sturh", "stlrh"):
        size0 = 2
    for k, r in enumerate(srcs):
        reg = _canon("aarch64", r.split(".")[0], True)
        vec = _a64_is_vec(r)
        uops.append(
            _uop("vstore_data" if vec else "store_data", max(64, 8 * size0), [reg] if reg else [], (),
                 (key, offset + k * size0, size0, addr))
        )
    return Decoded((*uops, *wb))


@lru_cache(maxsize=65536)
def _decode_key(isa: str, mnemonic: str, operands: str, reads: tuple, writes: tuple) -> Decoded:
    ins = Instruction(0, mnemonic, operands, reads, writes)
    return _decode_x86(ins) if isa == "x86-64" else _decode_a64(ins)


def decode(instruction: Instruction, isa: str) -> Decoded:
    """Micro-ops of one instruction.

    Parameters
    ----------
    instruction : Instruction
        As :func:`tuna.cpu.disasm.disassemble` produced it (Capstone mnemonic, Intel/ARM operand
        text and the registers it reads and writes).
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
    _check_isa(isa)
    return _decode_key(isa, instruction.mnemonic, instruction.operands, instruction.reads, instruction.writes)


# --------------------------------------------------------------------------------------------
# Block preparation: micro-ops bound to one machine's timing, with their dependencies
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DependencyGraph:
    """Register and memory dependencies between the micro-ops of a block.

    Each edge is ``(producer, consumer, resource, carried)``: micro-op indices in program order,
    the register (or ``mem``) it goes through, and whether it crosses into the next iteration
    of the loop the block is the body of.

    Attributes
    ----------
    raw : tuple
        True dependencies (read after write).
    war : tuple
        Anti dependencies (write after read): a write must not overtake an earlier read.
    waw : tuple
        Output dependencies (write after write).
    """

    raw: tuple[tuple[int, int, str, bool], ...]
    war: tuple[tuple[int, int, str, bool], ...]
    waw: tuple[tuple[int, int, str, bool], ...]


@dataclass
class _Block:
    """A block's micro-ops as parallel lists (fast to walk)."""

    instr_uops: list[range]
    slots: list[int]
    klass: list[str]
    srcs: list[tuple[str, ...]]
    dsts: list[tuple[str, ...]]
    lat: list[float]
    parts: list[tuple[tuple[tuple[int, ...], int], ...]]  # (pipes, integer occupancy)
    exact: list[tuple[tuple[int, float], ...]]  # (pipe mask, exact occupancy)
    mem_src: list[str | None]
    mem_dst: list[str | None]
    sched: list[int]
    n_uops: int
    counts: dict[str, int]
    broadcasts: int


def _prepare(decoded: Sequence[Decoded], ua: Uarch, loop: bool) -> _Block:
    instr_uops, slots = [], []
    klass, srcs, dsts, lat, parts, exact, mem_src, mem_dst, sched = [], [], [], [], [], [], [], [], []
    mems: list[tuple[int, bool, tuple]] = []
    counts = dict.fromkeys(KINDS, 0)
    broadcasts = 0
    prev_fusible = False
    for j, dec in enumerate(decoded):
        start = len(klass)
        nslots = dec.slots + (dec.unlaminated and ua.unlaminate_indexed)
        is_branch = len(dec.uops) == 1 and dec.uops[0].klass == "branch"
        if is_branch and prev_fusible and ua.macro_fusion:
            nslots = 0
        prev_fusible = dec.fusible
        broadcasts += dec.broadcast
        for u in dec.uops:
            k = u.klass
            if k in ("mov", "vmov") and ua.move_elimination:
                k = "zero"
            elif k == "zero" and not ua.zero_idioms:
                k = "vlogic" if u.width > 64 else "alu"
            t = ua.timing(k, u.width) if k not in _NO_EXEC else None
            klass.append(k)
            srcs.append(tuple(f"~{j}{r}" if r[0] == "~" else r for r in u.reads))
            dsts.append(tuple(f"~{j}{w}" if w[0] == "~" else w for w in u.writes))
            if t is None or not t.uops:
                lat.append(0.0 if t is None else t.latency)
                parts.append(())
                exact.append(())
                sched.append(-1)
            else:
                sched.append(ua.port_scheduler[t.uops[0][0]])
                lat.append(t.latency)
                parts.append(tuple((g, max(1, int(o + 0.5))) for g, o in zip(t.uops, t.occupancy)))
                exact.append(tuple((sum(1 << p for p in g), o) for g, o in zip(t.uops, t.occupancy)))
            mem_src.append(None)
            mem_dst.append(None)
            if u.mem is not None:
                mems.append((len(klass) - 1, u.kind == "store", u.mem))
            n = 2 if u.klass.endswith("_pair") else 1
            counts[u.kind] += n
        instr_uops.append(range(start, len(klass)))
        slots.append(nslots)
    # Memory dependencies through addresses the block does not change (spill slots, reductions
    # into one element): store data -> later load of an overlapping range.
    if mems and any(st for _, st, _ in mems):
        written = {w for ws in dsts for w in ws}
        stores: dict[str, list[tuple[int, tuple]]] = {}
        for i, st, m in mems:
            if st and not set(m[3]) & written:
                stores.setdefault(m[0], []).append((i, m))
        for i, st, m in mems:
            if st or m[0] not in stores or set(m[3]) & written:
                continue
            off, size = m[1], m[2]
            match = [s for s, sm in stores[m[0]] if sm[1] < off + size and off < sm[1] + sm[2]]
            before = [s for s in match if s < i]
            src = before[-1] if before else (match[-1] if loop and match else None)
            if src is not None:
                name = f"m{src}"
                mem_src[i] = name
                mem_dst[src] = name
    return _Block(instr_uops, slots, klass, srcs, dsts, lat, parts, exact, mem_src, mem_dst, sched, len(klass),
                  counts, broadcasts)


def dependency_graph(instructions: Sequence[Instruction], isa: str, *, loop: bool = True) -> DependencyGraph:
    """RAW, WAR and WAW dependencies between the micro-ops of a block.

    Parameters
    ----------
    instructions : sequence of Instruction
        The block in program order.
    isa : str
        ``"x86-64"`` or ``"aarch64"``.
    loop : bool, optional
        Also list the edges that wrap around into the next iteration (marked carried).

    Returns
    -------
    DependencyGraph
        Edges between micro-op indices in the order of ``decode``'s micro-ops, instruction by
        instruction. Memory dependencies (store data to a load of the same stack slot) appear
        among the RAW edges with resource ``"mem"``. An out-of-order core renames registers and
        so honours only the RAW edges; an in-order core honours all three kinds.
    """
    _check_isa(isa)
    decoded = [decode(ins, isa) for ins in instructions]
    ua = _NEUTRAL
    if not instructions:
        return DependencyGraph((), (), ())
    blk = _prepare(decoded, ua, loop)
    raw, war, waw = [], [], []
    last_w: dict[str, int] = {}
    readers: dict[str, list[int]] = {}  # reads since the last write
    first_w: dict[str, int] = {}
    exposed: dict[str, list[int]] = {}  # reads before the first write (fed by the previous iteration)
    for u in range(blk.n_uops):
        for r in blk.srcs[u]:
            if r in last_w:
                raw.append((last_w[r], u, r, False))
            else:
                exposed.setdefault(r, []).append(u)
            readers.setdefault(r, []).append(u)
        m = blk.mem_src[u]
        if m is not None:
            s = int(m[1:])
            raw.append((s, u, "mem", s >= u))
        for w in blk.dsts[u]:
            if w in last_w:
                waw.append((last_w[w], u, w, False))
            else:
                first_w[w] = u
            war.extend((r, u, w, False) for r in readers.get(w, ()) if r != u)
            readers[w] = []
            last_w[w] = u
    if loop:
        for r, users in exposed.items():
            if r in last_w:
                raw.extend((last_w[r], u, r, True) for u in users)
        for w, u in first_w.items():
            waw.append((last_w[w], u, w, True))
            war.extend((r, u, w, True) for r in readers.get(w, ()) if r != u)
    return DependencyGraph(tuple(raw), tuple(war), tuple(dict.fromkeys(waw)))


# --------------------------------------------------------------------------------------------
# Bounds
# --------------------------------------------------------------------------------------------


def _port_bound(blk: _Block, nports: int) -> float:
    """Most loaded pipe with every micro-op spread optimally over the pipes it may use.

    For fractional assignment this is the largest, over pipe sets U, of the work that can only
    go to pipes in U divided by |U|; it is enough to try unions of the micro-ops' own pipe sets.
    """
    load: dict[int, float] = {}
    for ex in blk.exact:
        for mask, occ in ex:
            load[mask] = load.get(mask, 0.0) + occ
    if not load:
        return 0.0
    masks = list(load)
    unions = {0}
    if len(masks) <= 12:
        for m in masks:
            unions |= {u | m for u in unions}
    else:  # any pipe set gives a valid lower bound; try the sets themselves and all pipes
        unions |= set(masks) | {(1 << nports) - 1}
    best = 0.0
    for u in unions:
        if not u:
            continue
        work = sum(w for m, w in load.items() if m & ~u == 0)
        bound = work / u.bit_count()
        if bound > best:
            best = bound
    return best


def _max_cycle_mean(nodes: list[str], edges: dict[str, dict[str, float]]) -> float:
    """Largest mean weight of a cycle (Karp), each edge being one loop iteration."""
    # Keep nodes on some cycle: drop those without in- or out-edges repeatedly.
    live = set(nodes)
    while True:
        has_in = {v for u in live for v in edges.get(u, {}) if v in live}
        keep = {u for u in live if u in has_in and any(v in live for v in edges.get(u, {}))}
        if keep == live:
            break
        live = keep
    if not live:
        return 0.0
    if all(set(edges.get(u, {})) & live <= {u} for u in live):
        return max(edges[u][u] for u in live if u in edges.get(u, {}))
    order = sorted(live)
    idx = {u: i for i, u in enumerate(order)}
    n = len(order)
    adj = [[(idx[v], w) for v, w in edges.get(u, {}).items() if v in live] for u in order]
    neg = -_INF
    d = [[0.0] * n]
    for _ in range(n):
        prev, cur = d[-1], [neg] * n
        for u in range(n):
            pu = prev[u]
            if pu == neg:
                continue
            for v, w in adj[u]:
                if pu + w > cur[v]:
                    cur[v] = pu + w
        d.append(cur)
    best = 0.0
    for v in range(n):
        dn = d[n][v]
        if dn == neg:
            continue
        worst = _INF
        for k in range(n):
            dk = d[k][v]
            if dk != neg:
                worst = min(worst, (dn - dk) / (n - k))
        if worst != _INF and worst > best:
            best = worst
    return best


def _chain_bound(blk: _Block, fwd: float, loop: bool) -> float:
    """Longest loop-carried recurrence per iteration (loop) or critical path (straight line)."""
    if not loop:
        ready: dict[str, float] = {}
        longest = 0.0
        for u in range(blk.n_uops):
            t = 0.0
            for s in blk.srcs[u]:
                r = ready.get(s)
                if r is not None and r > t:
                    t = r
            c = t + blk.lat[u]
            m = blk.mem_src[u]
            if m is not None and ready.get(m, 0.0) > c:
                c = ready[m]
            for dd in blk.dsts[u]:
                ready[dd] = c
            if blk.mem_dst[u] is not None:
                ready[blk.mem_dst[u]] = t + fwd
            longest = max(longest, c)
        return longest
    written = {w for ws in blk.dsts for w in ws} | {m for m in blk.mem_dst if m}
    dist: dict[str, dict[str, float]] = {}
    sources: set[str] = set()
    for u in range(blk.n_uops):
        inc: dict[str, float] = {}
        for s in blk.srcs[u]:
            ds = dist.get(s)
            if ds is None:
                if s not in written:
                    continue
                ds = {s: 0.0}
                sources.add(s)
            for k, v in ds.items():
                if v > inc.get(k, -1.0):
                    inc[k] = v
        lat = blk.lat[u]
        out = {k: v + lat for k, v in inc.items()}
        m = blk.mem_src[u]
        if m is not None:
            dm = dist.get(m)
            if dm is None:
                dm = {m: 0.0}
                sources.add(m)
            for k, v in dm.items():
                if v > out.get(k, -1.0):
                    out[k] = v
        for dd in blk.dsts[u]:
            dist[dd] = out
        if blk.mem_dst[u] is not None:
            dist[blk.mem_dst[u]] = {k: v + fwd for k, v in inc.items()}
    edges: dict[str, dict[str, float]] = {}
    for dst, ds in dist.items():
        for src, w in ds.items():
            if src in sources and dst in sources:
                e = edges.setdefault(src, {})
                if w > e.get(dst, -1.0):
                    e[dst] = w
    return _max_cycle_mean(sorted(sources), edges)


# --------------------------------------------------------------------------------------------
# Schedulers
# --------------------------------------------------------------------------------------------


def _find(free: dict[int, int], t: int) -> int:
    """First cycle >= t at which a pipe is free (union-find over booked cycles)."""
    root = t
    while root in free:
        root = free[root]
    while t != root:
        nxt = free[t]
        free[t] = root
        t = nxt
    return root


def _earliest(free: dict[int, int], t: int, occ: int) -> int:
    c = _find(free, t)
    if occ == 1:
        return c
    while True:
        for k in range(1, occ):
            if c + k in free:
                c = _find(free, c + k)
                break
        else:
            return c


def _book(free: dict[int, int], c: int, occ: int) -> None:
    for k in range(occ):
        free[c + k] = c + k + 1


def _window(blk: _Block, loop: bool) -> tuple[int, int]:
    """Iterations per measuring window and the most iterations to simulate."""
    if not loop:
        return 1, 1
    n = max(1, len(blk.instr_uops))
    w = math.ceil(120 / n)
    return w, max(4 * w + 1, math.ceil(3000 / n))


def _steady(ends: list[float], w: int) -> int:
    """A window (``w``, ``2w`` or ``4w`` iterations) whose last two instances took the same
    time within 2%, or 0 while there is none: the schedule has settled into its period."""
    for win in (w, 2 * w, 4 * w):
        if len(ends) < 2 * win + 1:
            return 0
        a = ends[-1] - ends[-1 - win]
        b = ends[-1 - win] - ends[-1 - 2 * win]
        if abs(a - b) <= 0.02 * max(a, b) + 1e-9:
            return win
    return 0


def _schedule_ooo(blk: _Block, ua: Uarch, fwd: float, loop: bool) -> tuple[float, list[float]]:
    """Out-of-order list scheduling: cycles per iteration (or of one pass) and pipe use per iteration.

    Instructions dispatch in order, ``dispatch_width`` slots a cycle, while the reorder buffer
    and the scheduler each micro-op needs have room; each micro-op then issues at the first
    cycle its operands are ready and one of its pipes is free (earlier free cycles are filled
    too, as an oldest-first scheduler would), and instructions retire in order. Iterations
    are added until two consecutive windows take the same time.
    """
    w, cap = _window(blk, loop)
    history: list[list[float]] = []
    width = ua.dispatch_width
    rob = ua.rob_size
    rwidth = ua.retire_width
    free: list[dict[int, int]] = [{} for _ in ua.ports]
    used = [0.0] * len(ua.ports)
    sizes = ua.schedulers
    queues: list[list[float]] = [[] for _ in sizes]
    ready: dict[str, float] = {}
    retired: list[int] = []
    ends: list[float] = []
    slot = 0
    dispatch = 0
    last_retire, retire_n = 0, 0
    body = [
        (
            blk.slots[j],
            tuple(
                (blk.srcs[u], blk.dsts[u], blk.lat[u], blk.parts[u], blk.mem_src[u], blk.mem_dst[u], blk.sched[u])
                for u in rng
            ),
        )
        for j, rng in enumerate(blk.instr_uops)
    ]
    find = _find
    ceil = math.ceil
    for _ in range(cap):
        history.append(list(used))
        for nslots, uops in body:
            d = slot // width
            g = len(retired)
            if rob and g >= rob and retired[g - rob] > d:
                d = retired[g - rob]
            for *_, q in uops:
                if q >= 0 and len(queues[q]) >= sizes[q] and queues[q][0] > d:
                    d = ceil(queues[q][0])
            if d < dispatch:
                d = dispatch
            dispatch = d
            slot = max(slot, d * width) + nslots
            done = d
            for srcs, dsts, lat, parts, msrc, mdst, q in uops:
                t = d + 1
                for s in srcs:
                    r = ready.get(s)
                    if r is not None and r > t:
                        t = r
                t = ceil(t)
                start = t
                for pipes, occ in parts:
                    best, bp = -1, 0
                    for p in pipes:
                        fp = free[p]
                        if occ == 1:
                            c = t if t not in fp else find(fp, t)
                        else:
                            c = _earliest(fp, t, occ)
                        if best < 0 or c < best:
                            best, bp = c, p
                            if c == t:
                                break
                    fp = free[bp]
                    for k in range(best, best + occ):
                        fp[k] = k + 1
                    used[bp] += occ
                    if best > start:
                        start = best
                c = start + lat
                if msrc is not None:
                    rm = ready.get(msrc)
                    if rm is not None and rm > c:
                        c = rm
                for dd in dsts:
                    ready[dd] = c
                if mdst is not None:
                    ready[mdst] = start + fwd
                if c > done:
                    done = c
                if q >= 0:
                    heap = queues[q]
                    if len(heap) < sizes[q]:
                        heapq.heappush(heap, start)
                    elif start > heap[0]:
                        heapq.heapreplace(heap, start)
            r = ceil(done)
            if r <= last_retire:
                r = last_retire
                retire_n += 1
                if retire_n > rwidth:
                    r += 1
                    retire_n = 1
            else:
                retire_n = 1
            last_retire = r
            retired.append(r)
        ends.append(float(last_retire))
        if _steady(ends, w):
            break
    return _measure(ends, history, used, _steady(ends, w) or len(ends) // 2)


def _measure(ends: list[float], history: list[list[float]], used: list[float], w: int) -> tuple[float, list[float]]:
    w = max(1, min(w, len(ends)))
    base = ends[-1 - w] if len(ends) > w else 0.0
    before = history[len(ends) - w]
    return (ends[-1] - base) / w, [(u - b) / w for u, b in zip(used, before)]


def _schedule_in_order(blk: _Block, ua: Uarch, fwd: float, loop: bool) -> tuple[float, list[float]]:
    """In-order issue (program order, at most dispatch_width a cycle) honouring RAW, WAR and WAW."""
    width = ua.dispatch_width
    win, cap = _window(blk, loop)
    history: list[list[float]] = []
    free: list[dict[int, int]] = [{} for _ in ua.ports]
    used = [0.0] * len(ua.ports)
    ready: dict[str, float] = {}
    read_at: dict[str, int] = {}
    ends: list[float] = []
    last = 0  # issue cycle of the previous micro-op
    cycle_of_group, in_group = -1, 0
    finish = 0.0
    srcs, dsts, lat, parts = blk.srcs, blk.dsts, blk.lat, blk.parts
    mem_src, mem_dst = blk.mem_src, blk.mem_dst
    for _ in range(cap):
        history.append(list(used))
        for j, rng in enumerate(blk.instr_uops):
            first = True
            for u in rng:
                t = float(last)
                for s in srcs[u]:  # RAW
                    r = ready.get(s)
                    if r is not None and r > t:
                        t = r
                for w in dsts[u]:
                    r = ready.get(w)  # WAW: complete no earlier than the previous writer
                    if r is not None and r - lat[u] > t:
                        t = r - lat[u]
                    a = read_at.get(w)  # WAR: issue no earlier than the last reader
                    if a is not None and a > t:
                        t = a
                t = math.ceil(t)
                while True:
                    if first and blk.slots[j] and t == cycle_of_group and in_group >= width:
                        t += 1
                    choice = []
                    ok = True
                    for pipes, occ in parts[u]:
                        best, bp = -1, 0
                        for p in pipes:
                            c = _earliest(free[p], t, occ)
                            if best < 0 or c < best:
                                best, bp = c, p
                        if best != t:
                            ok = False
                            t = best
                            break
                        choice.append((bp, occ))
                    if ok:
                        break
                for bp, occ in choice:
                    _book(free[bp], t, occ)
                    used[bp] += occ
                if first and blk.slots[j]:
                    if t == cycle_of_group:
                        in_group += 1
                    else:
                        cycle_of_group, in_group = t, 1
                first = False
                last = t
                c = t + lat[u]
                m = mem_src[u]
                if m is not None:
                    rm = ready.get(m)
                    if rm is not None and rm > c:
                        c = rm
                for s in srcs[u]:
                    read_at[s] = t
                for dd in dsts[u]:
                    ready[dd] = c
                if mem_dst[u] is not None:
                    ready[mem_dst[u]] = t + fwd
                if c > finish:
                    finish = c
        if not loop:
            return finish, used
        ends.append(float(last))
        if _steady(ends, win):
            break
    return _measure(ends, history, used, _steady(ends, win) or len(ends) // 2)


# --------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockTiming:
    """Timing of one basic block on one machine.

    Attributes
    ----------
    cycles : float
        Steady-state cycles per iteration (``loop=True``) or cycles of one execution from an
        idle machine (``loop=False``); never below ``max(port_bound, chain_bound, issue_bound)``.
    port_bound : float
        Cycles of the most loaded pipe, with each micro-op spread optimally over its pipes.
    chain_bound : float
        Longest loop-carried dependency recurrence per iteration (loops) or longest dependency
        path (straight-line code), in cycles.
    issue_bound : float
        Front-end slots divided by the dispatch (in-order: issue) width.
    simulated : float
        What list scheduling gave before the bounds were applied.
    instructions : int
        Instructions in the block.
    uops : int
        Micro-ops after decoding (eliminated moves and zero idioms included).
    counts : Mapping
        Micro-ops by category (:data:`KINDS`): fma, add, mul, div, load, store, shuffle (shuffles,
        permutes and register broadcasts), other. A load pair counts two loads.
    broadcasts : int
        Instructions that broadcast a scalar (from memory or a register).
    port_pressure : Mapping
        Cycles each pipe was busy per iteration in the simulated steady state.
    bottleneck : str
        ``"ports"``, ``"chain"``, ``"issue"`` or ``"schedule"`` (none of the bounds is reached).
    loop : bool
        Whether the block was timed as a loop body.
    """

    cycles: float
    port_bound: float
    chain_bound: float
    issue_bound: float
    simulated: float
    instructions: int
    uops: int
    counts: Mapping[str, int]
    broadcasts: int
    port_pressure: Mapping[str, float]
    bottleneck: str
    loop: bool


def simulate(instructions: Sequence[Instruction], machine: Machine, *, loop: bool = True) -> BlockTiming:
    """Cycles a basic block takes on ``machine``.

    Parameters
    ----------
    instructions : sequence of Instruction
        The block, in program order (e.g. ``BasicBlock.instructions``).
    machine : Machine
        A CPU preset with a data file in ``tuna/data/uarch``; ``machine.in_order`` selects
        in-order issue.
    loop : bool, optional
        Time the block as the body of a loop (steady-state cycles per iteration, loop-carried
        dependencies included) rather than as one straight-line execution.

    Returns
    -------
    BlockTiming
        Cycles with the analytical bounds and the micro-op counts; memoised on the
        instructions (addresses aside), the machine and ``loop``.

    Raises
    ------
    UnsupportedISAError
        If the machine's instruction set is not x86-64 or AArch64.
    TargetError
        If there is no micro-architecture data for the machine.
    """
    _check_isa(machine.isa)
    key = tuple((i.mnemonic, i.operands, i.reads, i.writes) for i in instructions)
    return _simulate_key(key, machine.isa, machine.name, bool(machine.in_order), bool(loop))


@lru_cache(maxsize=8192)
def _simulate_key(key: tuple, isa: str, name: str, in_order: bool, loop: bool) -> BlockTiming:
    ua = load_uarch(name)
    decoded = [_decode_key(isa, *k) for k in key]
    blk = _prepare(decoded, ua, loop)
    fwd = ua.store_forward_latency
    port_bound = _port_bound(blk, len(ua.ports))
    chain_bound = _chain_bound(blk, fwd, loop)
    issue_bound = (len(key) if in_order else sum(blk.slots)) / ua.dispatch_width
    if not key:
        return BlockTiming(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, MappingProxyType(dict.fromkeys(KINDS, 0)), 0,
                           MappingProxyType({}), "issue", loop)
    run = _schedule_in_order if in_order else _schedule_ooo
    simulated, used = run(blk, ua, fwd, loop)
    bounds = {"ports": port_bound, "chain": chain_bound, "issue": issue_bound}
    top = max(bounds, key=bounds.get)
    cycles = max(simulated, bounds[top])
    bottleneck = top if cycles <= bounds[top] * 1.05 + 1e-9 else "schedule"
    pressure = {p: used[i] for i, p in enumerate(ua.ports)}
    return BlockTiming(
        cycles=float(cycles),
        port_bound=float(port_bound),
        chain_bound=float(chain_bound),
        issue_bound=float(issue_bound),
        simulated=float(simulated),
        instructions=len(key),
        uops=blk.n_uops,
        counts=MappingProxyType(blk.counts),
        broadcasts=blk.broadcasts,
        port_pressure=MappingProxyType(pressure),
        bottleneck=bottleneck,
        loop=loop,
    )


# A machine-neutral timing table for dependency_graph (only the micro-op structure matters).
_NEUTRAL = Uarch(
    name="neutral",
    ports=("ALU",),
    dispatch_width=1,
    retire_width=1,
    rob_size=0,
    move_elimination=False,
    zero_idioms=False,
    macro_fusion=False,
    unlaminate_indexed=False,
    store_forward_latency=1.0,
    schedulers=(),
    port_scheduler=(-1,),
    table=MappingProxyType({(k, w): ClassTiming(1.0, ((0,),), (1.0,), 1.0)
                            for k in (*FALLBACK, "alu") for w in _WIDTH_KEYS}),
)
