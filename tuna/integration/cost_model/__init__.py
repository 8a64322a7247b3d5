"""The MetaSchedule cost-model extension point: :class:`TunaCostModel`."""

from .tuna_cost_model import TunaCostModel

__all__ = ["TunaCostModel"]
