"""A prediction handed from the search to the runner, so that a candidate is not compiled twice.

tuna's ES re-ranks its picks with the full tier, which compiles them; it records each
pick's :class:`Prediction` in a :class:`Predictions` store keyed by the structural hash of
the scheduled module (:func:`structural_key`). :class:`tuna.integration.StaticBuilder`,
given the same store, writes such a candidate's prediction to a file instead of building
it, and :class:`tuna.integration.StaticRunner` returns what the file holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi

from ...estimate import seconds_from_score

#: Name of the file :class:`tuna.integration.StaticBuilder` writes, instead of an artifact,
#: for a candidate whose prediction it was given.
PREDICTION = "tuna-prediction.json"


def structural_key(mod: tvm.IRModule) -> int:
    """The key of a scheduled module among predictions and handed-over schedules: its structural hash."""
    return int(tvm_ffi.structural_hash(mod))


@dataclass(frozen=True)
class Prediction:
    """A candidate's predicted run time.

    Attributes
    ----------
    seconds : float
        Predicted seconds of one run (the tier the runner uses).
    """

    seconds: float

    @classmethod
    def from_score(cls, score: float) -> Prediction:
        """The prediction a score (minus the log of seconds) stands for."""
        return cls(seconds_from_score(score))

    def write(self, directory: str | Path) -> Path:
        """Write the prediction into ``directory`` as the artifact the runner reads; its path."""
        path = Path(directory) / PREDICTION
        path.write_text(json.dumps({"seconds": float(self.seconds)}))
        return path

    @classmethod
    def read(cls, artifact_path: str | Path) -> Prediction | None:
        """The prediction an artifact holds, or None when it is a built artifact."""
        path = Path(artifact_path)
        if path.name != PREDICTION:
            return None
        return cls(float(json.loads(path.read_text())["seconds"]))


class Predictions:
    """Predictions by the structural key of the scheduled module; filled as tuning goes."""

    def __init__(self) -> None:
        self._by_key: dict[int, Prediction] = {}

    def add(self, key: int, prediction: Prediction) -> None:
        """Record the prediction of the module whose :func:`structural_key` is ``key``."""
        self._by_key[key] = prediction

    def get(self, key: int) -> Prediction | None:
        """The prediction recorded for ``key``, if any."""
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)
