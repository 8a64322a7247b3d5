"""A small PTX parser: kernels, parameters, labels, instructions and their classes.

PTX is line-oriented enough for regular expressions: each statement ends with ``;``,
labels end with ``:``, predicates guard instructions as ``@%p`` or ``@!%p``. The parser
keeps what tuna's GPU analyses need: for each ``.entry`` its parameters, the
``.maxntid`` launch bound, static shared memory, the instructions in program order
(guard, opcode, destination and source registers, vector width) and the label positions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..errors import AnalysisError

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(")
_PARAM = re.compile(r"\.param\s+\.\w+\s+(?:\.ptr[\s.\w]*?)?([\w$]+)")
_MAXNTID = re.compile(r"\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_SHARED = re.compile(r"\.shared\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+([\w$]+)\[(\d+)\]")
_LABEL = re.compile(r"^([\w$]+):")
_INSTR = re.compile(r"^(?:@(!?)(%[\w.]+)\s+)?([a-z][\w.:]*)\s*(.*)$", re.S)
_REG = re.compile(r"%[A-Za-z_][\w]*(?:\.[xyz])?")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)

#: Special registers: thread, block and grid indices and sizes.
SPECIAL_REGISTERS = ("%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%warpid", "%smid", "%clock")

_FLOAT_TYPES = ("f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "tf32")
_SPECIAL_FUNCS = ("ex2", "lg2", "rsqrt", "sqrt", "rcp", "sin", "cos", "tanh")
_LOGIC = ("and", "or", "xor", "not", "shl", "shr", "bfi", "bfe", "prmt", "lop3", "cnot", "popc", "clz", "brev", "shf")
_INT_ARITH = ("add", "sub", "addc", "subc", "neg", "abs", "min", "max")
_NO_DEST = ("st", "bar", "barrier", "bra", "ret", "exit", "red", "membar", "fence", "cp", "prefetch", "trap")


@dataclass(frozen=True)
class PtxInstruction:
    """One PTX instruction.

    Attributes
    ----------
    index : int
        Position in the kernel, from 0.
    opcode : str
        The full opcode with its modifiers ("fma.rn.f32", "ld.shared.v4.f32").
    guard : str or None
        The guarding predicate register, if any.
    negated : bool
        True for ``@!%p``.
    dests : tuple of str
        Registers written.
    srcs : tuple of str
        Registers read (address registers included).
    operands : tuple of str
        The operand texts, for evaluation (immediates, labels, memory references).
    klass : str
        Instruction class (see :func:`classify`).
    width : int
        Elements per instruction: the vector width of ``.v2``/``.v4`` memory operations,
        2 for ``f16x2`` arithmetic, else 1.
    """

    index: int
    opcode: str
    guard: str | None
    negated: bool
    dests: tuple[str, ...]
    srcs: tuple[str, ...]
    operands: tuple[str, ...]
    klass: str
    width: int = 1

    @property
    def root(self) -> str:
        """The opcode without modifiers ("fma", "ld", "bra")."""
        return self.opcode.split(".", 1)[0]

    def has(self, modifier: str) -> bool:
        """Whether the opcode carries ``.modifier``."""
        return modifier in self.opcode.split(".")[1:]


@dataclass(frozen=True)
class PtxKernel:
    """One ``.entry`` function.

    Attributes
    ----------
    name : str
        Kernel name.
    params : tuple of str
        Parameter names.
    instructions : tuple of PtxInstruction
        Instructions in program order.
    labels : Mapping[str, int]
        Label name -> index of the instruction it precedes.
    maxntid : tuple of int
        The ``.maxntid`` launch bound (threads per block), or () when absent.
    shared_bytes : int
        Static shared memory declared in the kernel.
    """

    name: str
    params: tuple[str, ...]
    instructions: tuple[PtxInstruction, ...]
    labels: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    maxntid: tuple[int, ...] = ()
    shared_bytes: int = 0

    def counts(self) -> dict[str, int]:
        """Static instruction count per class."""
        out: dict[str, int] = {}
        for ins in self.instructions:
            out[ins.klass] = out.get(ins.klass, 0) + 1
        return out


def _type_of(opcode: str) -> str:
    """The last type modifier of an opcode (".f32", ".u64", ...), without the dot."""
    for mod in reversed(opcode.split(".")[1:]):
        if re.fullmatch(r"(?:[suf]\d+|b\d+|f16x2|bf16x2|bf16|tf32|pred)", mod):
            return mod
    return ""


def classify(opcode: str) -> str:
    """The class of an opcode, as tuna's timing tables name them.

    Classes: ``fma``, ``fadd``, ``fmul`` (FP32/FP16 arithmetic), ``fp64``, ``imad``
    (integer multiply and multiply-add), ``int`` (integer add, logic, compare, select),
    ``mov``, ``cvt``, ``special`` (MUFU: ex2, rsqrt, ...), ``div``, ``ld_global``,
    ``st_global``, ``ld_shared``, ``st_shared``, ``ld_local``, ``st_local``, ``ld_param``,
    ``ld_const``, ``cp_async``, ``bar``, ``mma``, ``shfl``, ``atom``, ``branch``, ``ret``
    and ``other``.
    """
    parts = opcode.split(".")
    root, mods = parts[0], parts[1:]
    ty = _type_of(opcode)
    is_float = ty in _FLOAT_TYPES
    if root in ("fma", "mad"):
        if ty == "f64":
            return "fp64"
        return "fma" if is_float else "imad"
    if root in ("mul", "mul24", "mad24", "dp4a", "dp2a"):
        if ty == "f64":
            return "fp64"
        return "fmul" if is_float else "imad"
    if root in _INT_ARITH:
        if ty == "f64":
            return "fp64"
        return "fadd" if is_float else "int"
    if root in _LOGIC or root in ("setp", "selp", "slct", "set"):
        return "fp64" if ty == "f64" and root == "setp" else "int"
    if root == "div":
        return "div" if is_float else "imad"
    if root in _SPECIAL_FUNCS:
        return "special"
    if root in ("cvt", "cvta", "cvt.rn"):
        return "cvt"
    if root == "mov":
        return "mov"
    if root in ("ld", "ldu", "st"):
        space = next((m for m in mods if m in ("global", "shared", "local", "param", "const")), "global")
        if space in ("param", "const"):
            return f"ld_{space}"
        return f"{root[:2]}_{space}"
    if root == "cp" and "async" in mods:
        return "cp_async"
    if root in ("bar", "barrier"):
        return "bar"
    if root in ("mma", "wmma", "wgmma"):
        return "mma" if root == "mma" or "mma" in mods else ("ld_shared" if "load" in mods else "st_shared")
    if root == "ldmatrix":
        return "ld_shared"
    if root == "shfl":
        return "shfl"
    if root in ("atom", "red"):
        return "atom"
    if root == "bra":
        return "branch"
    if root in ("ret", "exit"):
        return "ret"
    return "other"


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _registers(text: str) -> list[str]:
    return [r for r in _REG.findall(text) if not r.startswith(SPECIAL_REGISTERS)]


def _instruction(index: int, text: str) -> PtxInstruction | None:
    m = _INSTR.match(text)
    if m is None:
        return None
    neg, guard, opcode, rest = m.groups()
    ops = _split_operands(rest.strip())
    klass = classify(opcode)
    root = opcode.split(".", 1)[0]
    writes_first = bool(ops) and root not in _NO_DEST and not (root in ("wmma",) and "store" in opcode)
    dests: list[str] = []
    srcs: list[str] = []
    for i, op in enumerate(ops):
        regs = _registers(op)
        if i == 0 and writes_first and not op.startswith("["):
            dests.extend(r for part in op.split("|") for r in _registers(part))
        else:
            srcs.extend(regs)
    if guard:
        srcs.append(guard)
    width = 1
    for mod in opcode.split(".")[1:]:
        if mod in ("v2", "v4", "v8"):
            width = int(mod[1:])
        elif mod in ("f16x2", "bf16x2"):
            width = 2
    return PtxInstruction(index, opcode, guard, neg == "!", tuple(dests), tuple(srcs), tuple(ops), klass, width)


def _statements(body: str):
    """Yield ("label", name) and ("instr", text) items from a kernel body."""
    for raw in body.split(";"):
        text = raw.strip()
        while True:
            text = text.lstrip("{} \t\n")
            m = _LABEL.match(text)
            if m is None:
                break
            yield "label", m.group(1)
            text = text[m.end():]
        text = text.strip("{} \t\n")
        if text and not text.startswith("."):
            yield "instr", " ".join(text.split())


def parse(text: str, what: str = "the PTX") -> tuple[PtxKernel, ...]:
    """Parse every ``.entry`` kernel of a PTX module.

    Parameters
    ----------
    text : str
        The PTX module.
    what : str
        The module's name in errors (a file, a candidate).

    Raises
    ------
    AnalysisError
        Naming ``what`` when the text holds no ``.entry`` function, or an ``.entry`` without
        its parameter list or body.
    """
    text = _COMMENT.sub("", text)
    starts = list(_ENTRY.finditer(text))
    if not starts:
        raise AnalysisError(f"{what} holds no .entry kernel")
    kernels = []
    for n, m in enumerate(starts):
        end = starts[n + 1].start() if n + 1 < len(starts) else len(text)
        chunk = text[m.start():end]
        close = chunk.find(")")
        open_brace = chunk.find("{", close)
        if close < 0 or open_brace < 0:
            # Truncated or mangled PTX: the entry has no closing ")" or no body.
            raise AnalysisError(f"{what}: .entry {m.group(1)} has no {'parameter list' if close < 0 else 'body'}")
        params = tuple(p.group(1) for p in _PARAM.finditer(chunk[:close]))
        head, body = chunk[close:open_brace], chunk[open_brace + 1:]
        ntid = _MAXNTID.search(head)
        maxntid = tuple(int(g) for g in ntid.groups() if g) if ntid else ()
        sizes = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "f16": 2, "u16": 2, "b32": 4, "f32": 4, "u32": 4, "s32": 4}
        shared = sum(int(s.group(3)) * sizes.get(s.group(1), 8) for s in _SHARED.finditer(body))
        instrs: list[PtxInstruction] = []
        labels: dict[str, int] = {}
        for kind, item in _statements(body):
            if kind == "label":
                labels[item] = len(instrs)
            else:
                ins = _instruction(len(instrs), item)
                if ins is not None:
                    instrs.append(ins)
        kernels.append(PtxKernel(m.group(1), params, tuple(instrs), MappingProxyType(labels), maxntid, shared))
    return tuple(kernels)


def branch_target(ins: PtxInstruction) -> str | None:
    """The label a ``bra`` jumps to (None for other instructions)."""
    if ins.klass != "branch" or not ins.operands:
        return None
    return ins.operands[-1].strip()
