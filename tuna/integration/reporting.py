"""The TVM side of the report on one schedule (:mod:`tuna.explain`): the workload's counts
and the untuned schedule's prediction."""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.s_tir.analysis import estimate_tir_flops

from .. import explain
from ..errors import TunaError
from ..estimate import Estimate
from ..machine import Machine
from .analysis import estimate_module
from .lower import dtype_bytes


def tensor_bytes(mod: tvm.IRModule) -> int:
    """Bytes of the tensors the module's functions take: what one run reads and writes at the least."""
    total = 0
    for func in mod.functions.values():
        if not isinstance(func, tirx.PrimFunc):
            continue
        for buf in func.params:  # TVM 0.27's parameters are the buffers themselves
            if getattr(buf, "shape", None) is None:
                continue
            dims = [int(d) if isinstance(d, tirx.IntImm) else None for d in buf.shape]
            if None in dims:  # a symbolic shape moves an unknown amount
                continue
            total += math.prod(dims) * dtype_bytes(buf.dtype)
    return total


def flops(mod: tvm.IRModule) -> float:
    """Floating-point operations of one run, as TVM counts them from the TIR (0 if it cannot)."""
    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # TVM's counter refuses some loop forms; the report then leaves the rate out
        return 0.0


def untuned_module(mod: tvm.IRModule, machine: Machine) -> tvm.IRModule:
    """The workload as TVM runs it untuned: as written on a CPU; on a GPU, with TVM's
    default thread binding (``DefaultGPUSchedule``), since unbound loops do not run there."""
    if machine.kind != "gpu":
        return mod
    from tvm.s_tir.transform import DefaultGPUSchedule

    from .workloads import tvm_target

    with tvm_target(machine):
        return DefaultGPUSchedule()(mod)


def report(workload: str, mod: tvm.IRModule, estimate: Estimate, machine: Machine) -> explain.Report:
    """The report on ``estimate``, a schedule of workload ``mod`` predicted for ``machine``.

    Parameters
    ----------
    workload : str
        The workload's name as the user gave it.
    mod : tvm.IRModule
        The workload as written (not the scheduled module).
    estimate : Estimate
        The prediction reported on.
    machine : Machine
        The machine it was made for.

    Returns
    -------
    explain.Report
        With the untuned schedule predicted by the same tier (None, and the reason, where
        it cannot be).
    """
    untuned, why = None, ""
    try:
        base = estimate_module(untuned_module(mod, machine), machine, "full" if estimate.tier == "objcode"
                               else estimate.tier)
        untuned = explain.breakdown(base, machine)
    except TunaError as err:
        why = str(err)
    except Exception as err:  # TVM's default GPU schedule refuses some workloads
        why = f"{type(err).__name__}: {err}"
    return explain.Report(
        workload=workload,
        machine=machine,
        chosen=explain.breakdown(estimate, machine),
        untuned=untuned,
        flops=flops(mod),
        tensor_bytes=tensor_bytes(mod),
        features=estimate.features,
        untuned_error=why.splitlines()[0][:200] if why else "",
    )
