"""Real measurement on this machine, and the benchmark scorers: what tuna is judged by.

- :mod:`.timing`: can a target run here; timing schedules as the shipped pools were timed;
- :mod:`.measured_tuning`: MetaSchedule's tuner with real measurement, pool collection and
  re-timing, tuna's offline tuning against it (``tuna bench collect``, ``tuna bench retime``,
  ``tuna bench tune``);
- :mod:`.whole_networks`: whole networks tuned and timed (``tuna bench network``);
- :mod:`.hybrid`: tuning with few measurements compared (``tuna bench hybrid``);
- :mod:`.gpu_bundle`: candidates lowered to CUDA kernels for timing on a GPU machine
  (``tuna bench gpu-bundle``; the timing is :mod:`tuna.bench.gpu_collect`'s);
- :mod:`.scorers`: the scorers of :func:`tuna.bench.evaluate` (XGBModel, tuna's features).
"""

from ..networks import network_tasks
from .hybrid import compare_hybrid
from .measured_tuning import (
    BUILD_TIMEOUT,
    Measured,
    MeasuredRun,
    Recorder,
    collect_pool,
    compare_tuning,
    measuring_builder_runner,
    quiet_metaschedule,
    retime_pool,
    tune_measured,
)
from .scorers import pool_features, pool_module, xgb_scores
from .timing import (
    MIN_REPEAT_MS,
    REPEAT,
    ROUNDS,
    MeasureError,
    Progress,
    Timer,
    check_runnable,
    compile_timer,
    device_of,
    parallel_region_seconds,
    report,
    time_interleaved,
    time_schedule,
    unrunnable_reason,
)
from .whole_networks import NETWORK_METHODS, NetworkRow, check_methods, network_bench

__all__ = [
    "BUILD_TIMEOUT",
    "MIN_REPEAT_MS",
    "NETWORK_METHODS",
    "REPEAT",
    "ROUNDS",
    "MeasureError",
    "Measured",
    "MeasuredRun",
    "NetworkRow",
    "Progress",
    "Recorder",
    "Timer",
    "check_methods",
    "check_runnable",
    "collect_pool",
    "compare_hybrid",
    "compare_tuning",
    "compile_timer",
    "device_of",
    "measuring_builder_runner",
    "network_bench",
    "network_tasks",
    "parallel_region_seconds",
    "pool_features",
    "pool_module",
    "quiet_metaschedule",
    "report",
    "retime_pool",
    "time_interleaved",
    "time_schedule",
    "tune_measured",
    "unrunnable_reason",
    "xgb_scores",
]
