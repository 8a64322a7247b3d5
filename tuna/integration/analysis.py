"""Analysing one scheduled module: compile what the tier needs, then run the tier's analysis.

Which analysis runs for a machine kind and a tier is :mod:`tuna.tiers`. Decided here is
only whether the tier analyses compiled code (the full tier does) and, per machine kind,
the function that compiles the module and attaches its code to the kernel IR
(:data:`_WITH_CODE`). Also here: MetaSchedule traces applied and analysed
(:func:`apply_trace`, :func:`estimate_trace`) and the tier :class:`~tuna.integration.StaticRunner` predicts
with (:func:`runner_tier`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import tvm
from tvm import s_tir

from .. import ir, tiers
from ..errors import AnalysisError, TunaError
from ..estimate import Estimate
from ..machine import Machine
from .lower import kernel_from_module
from .workloads import tvm_target


def compile_objects(mod: tvm.IRModule, machine: Machine) -> list[bytes]:
    """Compile a scheduled module for ``machine`` with TVM's LLVM backend; the ELF objects."""
    try:
        executable = tvm.compile(mod, tvm_target(machine))
        return [object_code(executable.mod)]
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"the candidate does not compile: {type(err).__name__}: {err}") from err


def object_code(rt_mod: Any) -> bytes:
    """The ELF object of a compiled (LLVM) runtime module.

    LLVM ends the process, rather than raising, when it cannot write its output (a full
    disk), so on Linux it writes into an anonymous in-memory file (``memfd_create``), which
    no disk backs; elsewhere into a temporary directory.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("tuna-kernel.o", os.MFD_CLOEXEC)
        try:
            rt_mod.write_to_file(f"/proc/self/fd/{fd}", "o")
            return os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
    with tempfile.TemporaryDirectory(prefix="tuna-") as tmp:
        path = os.path.join(tmp, "kernel.o")
        rt_mod.write_to_file(path)
        return Path(path).read_bytes()


def refuse_slow_compile(kernel: ir.KernelIR) -> None:
    """AnalysisError for a CPU candidate whose compile LLVM's optimiser would spend minutes on
    (:func:`tuna.cpu.codegen.minmax_chain`): no builder finishes it, so it is no candidate."""
    from ..cpu import codegen

    chain = codegen.minmax_chain(kernel)
    if chain >= codegen.SLOW_MINMAX_CHAIN:
        raise AnalysisError(
            f"refused: LLVM would take minutes to compile it (an unrolled chain of {chain} max/min updates "
            f"of one element that another max/min reads; its time doubles with each step)"
        )


def kernel_with_code(mod: tvm.IRModule, machine: Machine, objects: Sequence[bytes] | None = None) -> ir.KernelIR:
    """The kernel IR of ``mod`` with its generated machine code attached (the CPU full tier's input).

    ``objects`` are the module's ELF objects when it is compiled already (the artifact a
    builder made); otherwise it is compiled here (:func:`compile_objects`).
    """
    from ..cpu import disassembly  # Capstone is only needed by the full tier

    kernel = kernel_from_module(mod)
    if machine.kind != "cpu":
        raise AnalysisError(f"the full tier analyses CPU code; {machine.name} is a {machine.kind}")
    if objects is None:
        refuse_slow_compile(kernel)
        objects = compile_objects(mod, machine)
    return dataclasses.replace(kernel, code=disassembly.kernel_code(objects))


def kernel_with_gpu_code(mod: tvm.IRModule, machine: Machine) -> ir.KernelIR:
    """The kernel IR of ``mod`` with its compiled CUDA kernels attached (the GPU full tier's input)."""
    from . import cuda  # nvcc is only needed by the full tier

    code = cuda.gpu_code(mod, machine, tvm_target(machine))
    return dataclasses.replace(kernel_from_module(mod), gpu_code=code)


#: Machine kind -> the function that compiles a scheduled module and attaches the code to its kernel IR.
_WITH_CODE = MappingProxyType({"cpu": kernel_with_code, "gpu": kernel_with_gpu_code})

#: The tiers that analyse compiled code, not the loop tree alone.
_COMPILED_TIERS = frozenset({"full"})


def estimate_module(mod: tvm.IRModule, machine: Machine, tier: str = "ir") -> Estimate:
    """Analyse one scheduled IRModule with the ``"ir"`` or ``"full"`` tier.

    Raises
    ------
    TunaError
        For an unknown tier.
    AnalysisError
        When the candidate cannot be lowered, compiled or analysed.
    """
    tiers.check_tier(tier)
    try:
        if tier in _COMPILED_TIERS:
            kernel = _WITH_CODE[machine.kind](mod, machine)
        else:
            kernel = kernel_from_module(mod)
            if machine.kind == "cpu":  # what the full tier and the builders refuse is no candidate here either
                refuse_slow_compile(kernel)
        return tiers.analyze(kernel, machine, tier)
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"{type(err).__name__}: {err}") from err


def runner_tier(machine: Machine) -> str:
    """The tier :class:`~tuna.integration.StaticRunner` predicts with: ``"full"``, or ``"ir"`` on a GPU without nvcc."""
    from ..gpu import nvcc

    return "full" if machine.kind == "cpu" or nvcc.find_nvcc() is not None else "ir"


def _check_trace_json(trace_json: Any) -> None:
    """AnalysisError for a trace whose JSON TVM would crash on rather than reject.

    TVM 0.27 turns some malformed traces into errors, but crashes the process (a segfault or
    an abort) on others: a trace that is not ``[instructions, decisions]``, an instruction that
    is not ``[kind, inputs, attributes, outputs]`` or holds a null, a decision that is not ``[index, value]``,
    names no instruction of the trace (an index it reads without a bounds check), holds a null or
    a tile of 0.
    """
    def fail(what: str) -> AnalysisError:
        return AnalysisError(f"the trace does not apply to the workload: {what}")

    if not (isinstance(trace_json, (list, tuple)) and len(trace_json) == 2
            and all(isinstance(part, (list, tuple)) for part in trace_json)):
        raise fail("it is not [instructions, decisions]")
    insts, decisions = trace_json
    count = len(insts)
    for n, inst in enumerate(insts):
        if not (isinstance(inst, (list, tuple)) and len(inst) == 4 and isinstance(inst[0], str)
                and all(isinstance(part, (list, tuple)) for part in inst[1:])):
            raise fail(f"instruction {n} is not [kind, inputs, attributes, outputs]: {inst!r:.200}")
        if not all(map(_plain, inst[1:])):
            # Traces hold strings, numbers and lists of them; a null (in Split's attributes, say) crashes TVM.
            raise fail(f"instruction {n} holds a null or an object: {inst!r:.200}")
    for decision in decisions:
        if not (isinstance(decision, (list, tuple)) and len(decision) == 2):
            raise fail(f"a decision is not [instruction index, value]: {decision!r:.200}")
        index, value = decision
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise fail(f"a decision names instruction {index!r}, but the trace has {count} instructions")
        if not (_is_int(value) or (isinstance(value, (list, tuple)) and all(_is_int(v) and v >= 1 for v in value))):
            # A decision is an integer (a category, a compute location) or a list of tile sizes; a null one
            # crashes TVM, and so does a tile of 0 (a division by zero).
            raise fail(f"the decision of instruction {index} is {value!r:.100}, not an integer or a list of "
                       "positive integers")


def _plain(value: Any) -> bool:
    """Whether ``value`` is a string, a number or a list of such (as deep as it goes)."""
    if isinstance(value, (list, tuple)):
        return all(map(_plain, value))
    return isinstance(value, (str, int, float))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def apply_trace(mod: tvm.IRModule, trace_json: Any) -> s_tir.Schedule:
    """The schedule a MetaSchedule trace (JSON) makes of ``mod``; AnalysisError if it does not apply."""
    _check_trace_json(trace_json)
    try:
        sch = s_tir.Schedule(mod)
        s_tir.Trace.apply_json_to_schedule(trace_json, sch)
    except Exception as err:
        raise AnalysisError(f"the trace does not apply to the workload: {err}") from err
    return sch


def estimate_trace(mod: tvm.IRModule, trace_json: Any, machine: Machine, tier: str = "ir") -> Estimate:
    """Apply a MetaSchedule trace (JSON) to ``mod`` and analyse the result with ``tier``."""
    return estimate_module(apply_trace(mod, trace_json).mod, machine, tier)
