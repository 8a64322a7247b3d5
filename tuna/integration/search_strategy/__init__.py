"""The MetaSchedule search-strategy extension point: tuna's evolution strategies.

- :mod:`.design_space`: a design space's sampling decisions and their legal values;
  candidates turned into traces and schedules;
- :mod:`.worker`: what a worker process (or Dask worker) runs to score a candidate;
- :mod:`.es_search`: :class:`ESSearch`, a MetaSchedule ``PySearchStrategy``;
- :mod:`.es_runs`: :func:`es_strategy` (the search of :func:`tuna.tune`),
  :func:`hybrid_strategy` (its search when a real runner measures) and :func:`run_es` (the ES alone).

The ES itself is pure and TVM-free: :mod:`tuna.search`.
"""

from .design_space import (
    Decision,
    DesignSpace,
    DesignSpaces,
    build,
    design_spaces,
    factorizations,
    spaces_from_schedules,
    tune_context,
)
from .es_runs import ES_POPULATION, ES_RERANK, STATE_FILE, es_strategy, hybrid_strategy, run_es
from .es_search import RERANK_TIMEOUT, ESSearch, SearchProgress
from .worker import WorkerState, worker_score, worker_setup, worker_spec

__all__ = [
    "ES_POPULATION",
    "ES_RERANK",
    "RERANK_TIMEOUT",
    "STATE_FILE",
    "Decision",
    "DesignSpace",
    "DesignSpaces",
    "ESSearch",
    "SearchProgress",
    "WorkerState",
    "build",
    "design_spaces",
    "es_strategy",
    "factorizations",
    "hybrid_strategy",
    "run_es",
    "spaces_from_schedules",
    "tune_context",
    "worker_score",
    "worker_setup",
    "worker_spec",
]
