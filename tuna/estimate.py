"""What every analysis returns, and the one conversion between predicted seconds and scores.

It imports no analysis: which analysis runs for a machine and a tier is :mod:`tuna.tiers`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: Score given to a candidate that failed to lower, build or analyse: below any real one.
WORST_SCORE = -1e30


def score_from_seconds(seconds: float) -> float:
    """A candidate's score (higher is better): minus the log of its predicted seconds."""
    return -math.log(max(seconds, 1e-15))


def seconds_from_score(score: float) -> float:
    """The predicted seconds a score stands for (the inverse of :func:`score_from_seconds`)."""
    return math.exp(-score)


@dataclass(frozen=True)
class Estimate:
    """A predicted run time with the features it came from.

    Attributes
    ----------
    seconds : float
        Predicted wall-clock seconds of one run of the kernel.
    tier : str
        Which analysis produced it: "ir", "full", or "objcode" (the object code of an
        artifact alone, :mod:`tuna.cpu.objcode`).
    features : Mapping[str, float]
        Named feature values, for ``tuna explain`` and calibration.
    """

    seconds: float
    tier: str
    features: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def score(self) -> float:
        """Higher is better: minus the log of the predicted time (:func:`score_from_seconds`)."""
        return score_from_seconds(self.seconds)
