"""Register names as the simulator tracks them, and the operand text it reads them from.

Sub-registers alias their full register (``eax`` -> ``rax``, ``w1`` -> ``x1``); SIMD/FP
registers of every width are one register (``xmm3``/``ymm3``/``zmm3`` -> ``v3``,
``s0``/``d0``/``q0`` -> ``v0``), so that dependencies through them are seen. Names that hold
no value worth tracking (``rip``, ``xzr``, ``fpcr``) are dropped.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..isa import WORD, X86_GPR_ALIASES, X86_HIGH_BYTES, X86_VECTOR_BITS

_X86_GPR = {**X86_HIGH_BYTES}
for _full, _names in X86_GPR_ALIASES.items():
    _X86_GPR[_full] = _full
    for _n in _names:
        _X86_GPR[_n] = _full
for _i in range(32):
    for _p in X86_VECTOR_BITS:
        _X86_GPR[f"{_p}{_i}"] = f"v{_i}"
for _i in range(8):
    _X86_GPR[f"k{_i}"] = f"k{_i}"
for _n in ("rflags", "eflags", "flags"):
    _X86_GPR[_n] = "flags"
_X86_IGNORED = frozenset({"rip", "eip", "mxcsr", "fpsw", "fpcw", "ssp"})

_A64_REG = re.compile(r"^([wxbhsdqv])(\d+)$")
_A64_SPECIAL = {"sp": "sp", "wsp": "sp", "fp": "x29", "lr": "x30", "nzcv": "flags", "ip0": "x16", "ip1": "x17"}
_A64_IGNORED = frozenset({"xzr", "wzr", "fpsr", "fpcr", "pc"})


@lru_cache(maxsize=4096)
def canonical(isa: str, name: str, strict: bool = False) -> str | None:
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


def registers_in(isa: str, text: str) -> list[str]:
    """The canonical registers named in operand text, in order, each once."""
    out = []
    for tok in WORD.findall(text.lower()):
        r = canonical(isa, tok, True)
        if r is not None and r not in out:
            out.append(r)
    return out


def split_operands(ops: str) -> list[str]:
    """Operands of an instruction text, split at the commas outside brackets and braces."""
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


def parse_int(text: str) -> int | None:
    """An immediate (``#0x10``, ``$8``, ``-4``) as an integer, None when ``text`` is not one."""
    text = text.strip().lstrip("#$").replace(" ", "")
    try:
        return int(text, 0)
    except ValueError:
        return None

