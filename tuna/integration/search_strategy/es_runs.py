"""The two ways tuna runs its ES: inside MetaSchedule's tuning, and on the design spaces alone.

- :func:`es_strategy`: the :class:`~.es_search.ESSearch` that :func:`tuna.tune` uses;
- :func:`hybrid_strategy`: the one it uses when a real runner measures (``measure=N``);
- :func:`run_es`: the ES on a workload's design spaces, with no builder, runner or database.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import tvm

from ...machine import Machine
from ...search import es as es_mod
from ...search import workers as workers_mod
from ..analysis import runner_tier
from ..runner import Predictions
from ..work_dir import STATE_FILE
from ..workloads import as_machine
from .design_space import DesignSpaces, design_spaces
from .es_search import ESSearch, SearchProgress
from .worker import worker_score, worker_setup, worker_spec

logger = logging.getLogger("tuna")



def run_es(
    mod: tvm.IRModule,
    target: Any,
    *,
    max_evaluations: int,
    machine: str | None = None,
    tier: str = "ir",
    workers: int = 1,
    cluster: str | None = None,
    timeout: float = 60.0,
    seed: int = 0,
    config: es_mod.ESConfig | None = None,
    progress: Callable[[es_mod.Progress], None] | None = None,
) -> tuple[DesignSpaces, es_mod.EvolutionStrategies]:
    """Run tuna's ES on a workload's design spaces alone (no builder, runner or database).

    Returns
    -------
    spaces : DesignSpaces
        To turn the ES's candidates into traces (``spaces.trace(cand)``).
    es : EvolutionStrategies
        The finished search; ``es.best(k)`` are its best candidates.
    """
    mach = as_machine(target, machine)
    spaces, ctx = design_spaces(mod, mach)
    search_es = es_mod.EvolutionStrategies(spaces.search_space(), config, seed=seed)
    spec = worker_spec(mod, ctx.space_generator.postprocs, mach, tier, intrinsics=spaces.tensorizes())
    evaluator = workers_mod.make_evaluator(worker_setup, worker_score, spec,
                                           workers=workers, cluster=cluster, timeout=timeout, shared=True)
    start = time.perf_counter()
    try:
        es_mod.run(search_es, lambda cands: evaluator([spaces.trace(c) for c in cands]), max_evaluations,
                   progress=progress)
    finally:
        evaluator.close()
    logger.debug("tuna search: %d evaluations in %.1f s", len(search_es.scores), time.perf_counter() - start)
    return spaces, search_es


#: ES generation size used by :func:`es_strategy` (tune(search="es")).
ES_POPULATION = 64

#: Full-tier re-ranking factor used by :func:`es_strategy` (see :class:`ESSearch`): the full
#: tier analyses no more candidates than are handed over (the IR tier's best), and the
#: database's best of them is the pick. 1, not 2: it halves the full tier's work, and choosing the best
#: of the IR tier's best 64 by the full tier picked as well as of its best 128 on the measured
#: pools (mean top-1 0.813 against 0.799 on 21 development pools, 0.615 for both on six
#: held-out ones) and in offline tuning of the six held-out workloads (3 seeds, 64 trials:
#: geometric mean 0.722 of the pools' best against 0.721 with 2).
ES_RERANK = 1

#: Candidates the IR tier scores per round, per unit of ``population_size``: half of what
#: MetaSchedule's EvolutionarySearch asks its cost model for (``5 * population_size``).
#: Within a run's first twenty generations the ES's best IR score comes within 1% of what
#: forty find (GMM:1, SFM:1, a ResNet-18 conv and a MobileNetV2 depthwise conv); the next
#: twenty mostly shuffle near-ties that the IR tier cannot tell apart. Measured in offline
#: tuning (``scripts/bench_es_budget.py``, runs in ``docs/bench/es-budget``: twelve workloads,
#: the six Ansor ones and held-out set 3, 3 seeds, 64 trials, picks re-timed in one run): 2.5
#: picked at a geometric mean of 0.875 of the pools' best against 0.869 with 5, in 0.69x the
#: time. Fewer cost quality: on new seeds (3-5, runs 3 and 4 there) 1.5 picked at 0.881
#: against 0.901 with 2.5 (with half re-ranked by the full tier, as by default), in 0.74x the time.
ES_SCORED_PER_POPULATION = 2.5

#: Share of the candidates :func:`es_strategy` hands over that the full tier analyses
#: (``ESSearch(full_share=...)``: the IR tier's best half, and any other that could be the
#: pick; the rest keep the IR tier's prediction). In a second run as above: 0.872 of the
#: pools' best with 2.5 and a half, 0.877 with 2.5 and all, 0.883 with the earlier 5 and
#: all, 0.863 with 2.5 and a quarter; 0.49x, 0.69x, 1x and 0.38x the time. Seed to seed,
#: one workload's picks vary by more than these differences; but on seeds 3-5 (runs 3 and 4)
#: a quarter again picked worse than a half (0.880 against 0.900, in 0.82x the time; the
#: default, tuned and re-timed twice, 0.900 and 0.901).
ES_FULL_SHARE = 0.5


def es_strategy(
    machine: Machine,
    work_dir: str | os.PathLike,
    population_size: int,
    seed: int | None,
    workers: int | None,
    cluster: str | None,
    progress: Callable[[str], None] | None,
    known: Predictions | None = None,
    state_file: str = STATE_FILE,
) -> ESSearch:
    """The :class:`ESSearch` that :func:`tuna.tune` uses for ``search="es"``.

    Per round it scores ``ES_SCORED_PER_POPULATION * population_size`` candidates with
    tuna's IR tier (half of what MetaSchedule's EvolutionarySearch asks its cost model for
    with the same ``population_size``), in ``workers`` processes (None: one per physical
    core), then analyses the IR tier's best ``ES_FULL_SHARE`` of the candidates it hands over
    with the full tier, in the same workers, and records the predictions in ``known`` (see
    :class:`ESSearch`). On a GPU without nvcc, where the runner itself falls back to the IR
    tier, it hands over the IR tier's best. Its state is kept in ``work_dir / state_file``
    (one file per task of a network).
    """
    rerank = ES_RERANK if runner_tier(machine) == "full" else 0
    generations = max(1, math.ceil(ES_SCORED_PER_POPULATION * population_size / ES_POPULATION))
    return ESSearch(
        ES_POPULATION,
        generations,
        score="ir",
        machine=machine,
        workers=_workers(workers),
        cluster=cluster,
        rerank=rerank,
        full_share=ES_FULL_SHARE,
        known=known,
        seed=0 if seed is None else int(seed),
        state_path=Path(work_dir) / state_file,
        progress=_round_report(progress, generations, "IR tier's best",
                               "re-ranked by the full tier" if rerank else None),
    )


#: ES generations between two measured batches in hybrid tuning (:func:`hybrid_strategy`).
HYBRID_GENERATIONS = 4
#: In hybrid tuning, the cost model re-scores this many times as many of the ES's best as
#: are measured at each round, with what it has learned since the ES scored them.
HYBRID_SHORTLIST = 4


def hybrid_strategy(
    work_dir: str | os.PathLike,
    seed: int | None,
    progress: Callable[[str], None] | None,
    state_file: str = STATE_FILE,
    rows: Callable[[tvm.IRModule], Any] | None = None,
    pick_tier: str | None = None,
    machine: Machine | None = None,
    workers: int | None = None,
    cluster: str | None = None,
) -> ESSearch:
    """The :class:`ESSearch` of hybrid tuning (``tuna.tune(..., measure=N)``).

    It scores with the cost model ``tune_tir`` is given, in this process (a
    ``TunaCostModel(calibrate=True)``: the IR tier, corrected by what has been measured so
    far), :data:`HYBRID_GENERATIONS` generations of :data:`ES_POPULATION` per round, and
    re-scores :data:`HYBRID_SHORTLIST` times as many of its best as are measured with what
    the model has learned since. With ``rows`` (the cost model's ``row``), that shortlist
    holds candidates the model tells apart, from each other and from those measured
    (``ESSearch(rows=...)``). It hands over the shortlist's best by the model, or with
    ``pick_tier="full"`` by tuna's full tier for ``machine``, analysed in ``workers``
    processes (None: one per physical core) or on ``cluster``.
    """
    return ESSearch(
        ES_POPULATION,
        HYBRID_GENERATIONS,
        score="model",
        machine=machine,
        workers=_workers(workers),
        cluster=cluster,
        rerank=HYBRID_SHORTLIST,
        rows=rows,
        pick_tier=pick_tier,
        seed=0 if seed is None else int(seed),
        state_path=Path(work_dir) / state_file,
        progress=_round_report(progress, HYBRID_GENERATIONS, "model's best",
                               "analysed by the full tier" if pick_tier else None),
    )


def _workers(workers: int | None) -> int:
    """The worker processes asked for, or by default one per physical core."""
    return workers if workers is not None else psutil.cpu_count(logical=False) or os.cpu_count() or 1


def _round_report(progress: Callable[[str], None] | None, generations: int, best_name: str,
                  reranked_name: str | None) -> Callable[[SearchProgress], None]:
    """The ES's progress callback: one line per round of ``generations`` to ``progress``."""

    def report(p: SearchProgress) -> None:
        if progress is None or p.es.generation % generations:
            return
        best = p.best_seconds
        best_text = f"{best * 1e6:10.1f} us" if best is not None else "      none"
        reranked = f"{p.reranked} {reranked_name} ({p.rejected} failed) | " if reranked_name else ""
        progress(f"  es generation {p.es.generation:>4} | {best_name} {best_text} | "
                 f"{p.es.evaluations:>6} scored ({p.es.candidates_per_second:,.0f}/s) | {reranked}"
                 f"{p.measured}/{p.max_trials} handed to the runner")

    return report
