"""The one dispatch table from a machine's kind and a tier to the analysis that runs.

Every analysis has one signature, ``(kernel, machine) -> Estimate``; what a tier needs
besides the loop tree rides on the :class:`~tuna.ir.KernelIR` (the CPU machine code in
``code``, the compiled GPU kernels in ``gpu_code``). Attaching it is the TVM side's job
(:mod:`tuna.integration.analysis`). The analyses are imported on first use, so that
``import tuna`` stays light. No TVM here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MappingProxyType

from .errors import TunaError
from .estimate import Estimate
from .ir import KernelIR
from .machine import Machine

#: The tiers: the fast IR-only estimate and the joint IR + machine-code analysis.
TIERS = ("ir", "full")

Analysis = Callable[[KernelIR, Machine], Estimate]

#: (machine kind, tier) -> the module whose ``estimate(kernel, machine)`` is that analysis.
_ANALYSES = MappingProxyType({
    ("cpu", "ir"): "tuna.cpu.ir_tier",
    ("cpu", "full"): "tuna.cpu.full_tier",
    ("gpu", "ir"): "tuna.gpu.ir_tier",
    ("gpu", "full"): "tuna.gpu.full_tier",
})


def check_tier(tier: str) -> str:
    """``tier`` when it names a tier.

    Raises
    ------
    TunaError
        For any other name.
    """
    if tier not in TIERS:
        raise TunaError(f"unknown tier {tier!r}; tiers: {', '.join(TIERS)}")
    return tier


def analysis(kind: str, tier: str) -> Analysis:
    """The analysis of ``tier`` for machines of ``kind`` ("cpu" or "gpu")."""
    return importlib.import_module(_ANALYSES[kind, check_tier(tier)]).estimate


def analyze(kernel: KernelIR, machine: Machine, tier: str = "ir") -> Estimate:
    """Predict the run time of ``kernel`` on ``machine`` with ``tier`` (the IR tier by default).

    The full tier needs the machine code attached to ``kernel`` (see :mod:`tuna.tiers`).
    """
    return analysis(machine.kind, tier)(kernel, machine)
