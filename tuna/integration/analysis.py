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
        with tempfile.TemporaryDirectory(prefix="tuna-") as tmp:
            path = os.path.join(tmp, "kernel.o")
            executable.mod.write_to_file(path)
            return [Path(path).read_bytes()]
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"the candidate does not compile: {type(err).__name__}: {err}") from err


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
        return tiers.analyze(kernel, machine, tier)
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"{type(err).__name__}: {err}") from err


def runner_tier(machine: Machine) -> str:
    """The tier :class:`~tuna.integration.StaticRunner` predicts with: ``"full"``, or ``"ir"`` on a GPU without nvcc."""
    from ..gpu import nvcc

    return "full" if machine.kind == "cpu" or nvcc.find_nvcc() is not None else "ir"


def _check_decision_indices(trace_json: Any) -> None:
    """AnalysisError for a decision that names no instruction of the trace.

    TVM 0.27 checks the rest of a trace's JSON itself, but reads a decision's instruction
    index without a bounds check: an index past the instructions crashes the process.
    """
    try:
        insts, decisions = trace_json
        count = len(insts)
        indices = [index for index, _ in decisions]
    except (TypeError, ValueError):
        return  # not [instructions, decisions]: TVM's own check says so
    for index in indices:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise AnalysisError(f"the trace does not apply to the workload: a decision names instruction "
                                f"{index!r}, but the trace has {count} instructions")


def apply_trace(mod: tvm.IRModule, trace_json: Any) -> s_tir.Schedule:
    """The schedule a MetaSchedule trace (JSON) makes of ``mod``; AnalysisError if it does not apply."""
    _check_decision_indices(trace_json)
    try:
        sch = s_tir.Schedule(mod)
        s_tir.Trace.apply_json_to_schedule(trace_json, sch)
    except Exception as err:
        raise AnalysisError(f"the trace does not apply to the workload: {err}") from err
    return sch


def estimate_trace(mod: tvm.IRModule, trace_json: Any, machine: Machine, tier: str = "ir") -> Estimate:
    """Apply a MetaSchedule trace (JSON) to ``mod`` and analyse the result with ``tier``."""
    return estimate_module(apply_trace(mod, trace_json).mod, machine, tier)
