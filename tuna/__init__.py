"""tuna: rank and tune TVM tensor programs for CPUs and NVIDIA GPUs without running them.

The MetaSchedule adapters live in :mod:`tuna.integration`, the only package that imports
TVM; they are loaded on first use so that ``tuna targets`` and the pure analyses start fast.
"""

from .errors import AnalysisError, ExportError, TargetError, TunaError, UnsupportedISAError, WorkloadError
from .estimate import Estimate
from .machine import Machine, preset, presets, resolve
from .tiers import analyze

__version__ = "0.1.0"

_LAZY = {"ESSearch", "TunaCostModel", "StaticRunner", "StaticBuilder", "tune", "TuneResult", "load_workload",
         "kernel_from_module", "export", "ExportInfo", "tune_network", "NetworkTuneResult",
         "FeatureExtractor"}

__all__ = [
    "AnalysisError",
    "ESSearch",
    "Estimate",
    "ExportError",
    "ExportInfo",
    "FeatureExtractor",
    "Machine",
    "NetworkTuneResult",
    "StaticBuilder",
    "StaticRunner",
    "TargetError",
    "TunaCostModel",
    "TunaError",
    "TuneResult",
    "UnsupportedISAError",
    "WorkloadError",
    "analyze",
    "export",
    "kernel_from_module",
    "load_workload",
    "preset",
    "presets",
    "resolve",
    "tune",
    "tune_network",
]


def __getattr__(name: str):
    if name in _LAZY:
        from . import integration

        return getattr(integration, "export_module" if name == "export" else name)
    raise AttributeError(f"module 'tuna' has no attribute {name!r}")
