"""CUDA C to PTX with nvcc, and registers and shared memory per kernel from ptxas.

No GPU is needed: nvcc only compiles. The tools run through
:func:`tuna.search.processes.run_tool`, the one place tuna starts processes. ``nvcc`` is
looked up as ``$TUNA_NVCC`` when set, else on PATH, else in ``$CUDA_HOME/bin``;
``ptxas`` beside it.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import AnalysisError, TunaError
from ..search.processes import run_tool, which

_MISSING = (
    "the GPU full tier compiles TVM's CUDA C to PTX with nvcc and reads registers from ptxas, "
    "but no nvcc was found (looked at $TUNA_NVCC, PATH and $CUDA_HOME/bin). Install the CUDA toolkit "
    "(no GPU is needed) and put its bin/ on PATH, or set TUNA_NVCC=/path/to/nvcc; the IR tier "
    "(tier='ir') needs neither"
)


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    shared_bytes: int
    spill_bytes: int = 0
    stack_bytes: int = 0


@dataclass(frozen=True)
class Compiled:
    """PTX of a CUDA source with ptxas' resources per kernel.

    Attributes
    ----------
    ptx : str
        The PTX text.
    arch : str
        The architecture compiled for ("sm_80").
    resources : dict
        Kernel name -> :class:`Resources`.
    nvcc_seconds : float
        Wall-clock seconds spent in nvcc and ptxas.
    """

    ptx: str
    arch: str
    resources: dict[str, Resources]
    nvcc_seconds: float


def find_nvcc() -> str | None:
    """Path of the nvcc tuna uses, or None."""
    given = os.environ.get("TUNA_NVCC")
    if given:
        return given if which(given) else None
    found = which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and which(str(Path(home) / "bin" / "nvcc")):
        return str(Path(home) / "bin" / "nvcc")
    return None


def require_nvcc() -> str:
    """Path of nvcc; TunaError saying what is missing and how to get it otherwise."""
    path = find_nvcc()
    if path is None:
        raise TunaError(_MISSING)
    return path


def _ptxas(nvcc: str) -> str:
    beside = Path(nvcc).parent / "ptxas"
    return str(beside) if which(str(beside)) else "ptxas"


@cache
def supported_archs(nvcc: str) -> frozenset[str]:
    """The ``sm_XX`` architectures ``nvcc`` can compile for."""
    out = run_tool([nvcc, "--list-gpu-arch"], timeout=60)
    return frozenset(a.replace("compute_", "sm_") for a in out.stdout.split() if a.startswith("compute_"))


def choose_arch(native: str, fallback: str, nvcc: str) -> str:
    """``native`` when nvcc supports it, else ``fallback`` (e.g. sm_75 for sm_70 with CUDA 13)."""
    archs = supported_archs(nvcc)
    if native in archs or not archs:
        return native
    if fallback in archs:
        return fallback
    raise TunaError(f"{nvcc} compiles for none of {native}, {fallback}; it supports {', '.join(sorted(archs))}")


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(text: str) -> dict[str, Resources]:
    """Registers, static shared memory and spills per kernel from ``ptxas -v`` output."""
    out: dict[str, Resources] = {}
    name, stack, spill = None, 0, 0
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            name, stack, spill = m.group(1), 0, 0
        elif (m := _SPILL.search(line)) and name:
            stack, spill = int(m.group(1)), int(m.group(2)) + int(m.group(3))
        elif (m := _USED.search(line)) and name:
            out[name] = Resources(int(m.group(1)), int(m.group(2) or 0), spill, stack)
    return out


def compile_cuda(source: str, arch: str, nvcc: str | None = None, timeout: float = 120.0) -> Compiled:
    """Compile CUDA C to PTX for ``arch`` and assemble it with ``ptxas -v``.

    Raises
    ------
    TunaError
        When nvcc is missing.
    AnalysisError
        When nvcc or ptxas rejects the code.
    """
    nvcc = nvcc or require_nvcc()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tuna-cuda-") as tmp:
        Path(tmp, "kernel.cu").write_text(source)
        done = run_tool([nvcc, "-w", "--ptx", f"-arch={arch}", "-o", "kernel.ptx", "kernel.cu"], timeout=timeout,
                        cwd=tmp)
        if done.returncode != 0:
            raise AnalysisError(f"nvcc could not compile the CUDA source for {arch}: {done.stderr.strip()[:800]}")
        ptx = Path(tmp, "kernel.ptx").read_text()
        asm = run_tool([_ptxas(nvcc), "-v", f"-arch={arch}", "-o", "kernel.cubin", "kernel.ptx"], timeout=timeout,
                       cwd=tmp)
        if asm.returncode != 0:
            raise AnalysisError(f"ptxas could not assemble the PTX for {arch}: {asm.stderr.strip()[:800]}")
    resources = parse_ptxas(asm.stdout + "\n" + asm.stderr)
    return Compiled(ptx, arch, resources, time.perf_counter() - start)
