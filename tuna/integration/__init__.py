"""The TVM side of tuna: the only package that imports ``tvm``. This module only re-exports.

Laid out as the data flows, one folder per MetaSchedule extension point:

- :mod:`.intrinsics`: TVM's tensor intrinsics imported fast, :func:`new_tune_context`;
- :mod:`.workloads`: built-in workloads, TVMScript, targets and machines;
- :mod:`.lower`: TIR -> :class:`tuna.ir.KernelIR` (:func:`kernel_from_module`);
- :mod:`.analysis`: one scheduled module analysed with a tier (:func:`estimate_module`),
  compiling what the tier needs (:mod:`.cuda` for the GPU full tier);
- :mod:`.cost_model`: :class:`TunaCostModel` (a ``PyCostModel``; it can learn from measured
  candidates);
- :mod:`.feature_extractor`: :class:`FeatureExtractor` (a ``PyFeatureExtractor``: tuna's
  analysis terms for MetaSchedule's learned cost models);
- :mod:`.builder`: :class:`StaticBuilder` (a ``LocalBuilder`` that leaves the scheduled TIR
  beside each artifact);
- :mod:`.runner`: :class:`StaticRunner` (a ``PyRunner`` that predicts instead of
  measuring), and the :class:`Prediction` the search hands it;
- :mod:`.search_strategy`: :class:`ESSearch`, tuna's evolution strategies for MetaSchedule;
- :mod:`.tuning`: :func:`tune`; :mod:`.network_tuning`: :func:`tune_network` (every task of a
  Relax module);
- :mod:`.export`: the tuned schedule compiled and written to deploy (:func:`export_module`);
- :mod:`.measure` and :mod:`.networks`: real measurement for the benchmarks, and their scorers;
- :mod:`.database_import`: MetaSchedule databases (older TVM releases too) as measured pools.
"""

from .analysis import (
    apply_trace,
    compile_objects,
    estimate_module,
    estimate_trace,
    kernel_with_code,
    kernel_with_gpu_code,
    runner_tier,
)
from .builder import StaticBuilder
from .cost_model import TunaCostModel
from .export import ExportInfo, export_module
from .feature_extractor import FeatureExtractor
from .intrinsics import load_tensor_intrinsics, new_tune_context
from .lower import kernel_from_func, kernel_from_module
from .measure import pool_features, pool_module, xgb_scores
from .network_tuning import NetworkTuneResult, TaskResult, tune_network
from .runner import PREDICTION, SIDECAR, Prediction, Predictions, StaticRunner, structural_key
from .search_strategy import ESSearch
from .tuning import TuneResult, tune
from .workloads import as_machine, load_workload, parse_tvmscript, plain_json, tvm_target, workload_names

__all__ = [
    "PREDICTION",
    "SIDECAR",
    "ESSearch",
    "ExportInfo",
    "FeatureExtractor",
    "NetworkTuneResult",
    "Prediction",
    "Predictions",
    "StaticBuilder",
    "StaticRunner",
    "TaskResult",
    "TunaCostModel",
    "TuneResult",
    "apply_trace",
    "as_machine",
    "compile_objects",
    "estimate_module",
    "estimate_trace",
    "export_module",
    "kernel_from_func",
    "kernel_from_module",
    "kernel_with_code",
    "kernel_with_gpu_code",
    "load_tensor_intrinsics",
    "load_workload",
    "new_tune_context",
    "parse_tvmscript",
    "plain_json",
    "pool_features",
    "pool_module",
    "runner_tier",
    "structural_key",
    "tune",
    "tune_network",
    "tvm_target",
    "workload_names",
    "xgb_scores",
]
