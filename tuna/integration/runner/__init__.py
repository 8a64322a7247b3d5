"""The MetaSchedule runner extension point: :class:`StaticRunner`, and the predictions the search hands it."""

from .prediction import PREDICTION, Prediction, Predictions, structural_key
from .static_runner import SIDECAR, StaticRunner

__all__ = ["PREDICTION", "SIDECAR", "Prediction", "Predictions", "StaticRunner", "structural_key"]
