"""The MetaSchedule builder extension point: :class:`StaticBuilder`."""

from .static_builder import StaticBuilder

__all__ = ["StaticBuilder"]
