"""What every analysis returns, and the dispatch from a machine's kind to its models."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .ir import KernelIR
from .machine import Machine

#: Score given to a candidate that failed to lower or analyse: below any real one.
WORST_SCORE = -1e30


@dataclass(frozen=True)
class Estimate:
    """A predicted run time with the features it came from.

    Attributes
    ----------
    seconds : float
        Predicted wall-clock seconds of one run of the kernel.
    tier : str
        Which analysis produced it ("ir" or "full").
    features : Mapping[str, float]
        Named feature values, for ``tuna explain`` and calibration.
    """

    seconds: float
    tier: str
    features: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def score(self) -> float:
        """Higher is better: minus the log of the predicted time."""
        return -math.log(max(self.seconds, 1e-15))


Analysis = Callable[[KernelIR, Machine], Estimate]


def ir_tier(kind: str) -> Analysis:
    """The fast IR-only analysis for machines of ``kind`` ("cpu" or "gpu")."""
    from .cpu import ir_tier as cpu
    from .gpu import ir_tier as gpu

    registry: dict[str, Analysis] = {"cpu": cpu.estimate, "gpu": gpu.estimate}
    return registry[kind]


def analyze(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of ``kernel`` on ``machine`` with the IR tier."""
    return ir_tier(machine.kind)(kernel, machine)
