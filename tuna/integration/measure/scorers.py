"""Scorers for :func:`tuna.bench.evaluate`: ``(pool, train_idx, test_idx) -> (scores, seconds/candidate)``.

MetaSchedule's XGBModel trained on measured candidates (:func:`xgb_scores`), and tuna's
features of a pool's candidates (:func:`pool_features`); :func:`pool_module` parses a
pool's workload once. ``pool`` is a :class:`tuna.bench.Pool` (not imported here, to keep
the imports light).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult

from ...errors import AnalysisError, TunaError
from ...estimate import WORST_SCORE
from ...machine import Machine
from ...search.workers import collector_paused
from ..analysis import apply_trace, estimate_trace
from ..intrinsics import new_tune_context
from ..workloads import parse_tvmscript

logger = logging.getLogger("tuna")


_POOL_MODULES: dict[str, tvm.IRModule] = {}


def pool_module(pool: Any) -> tvm.IRModule:
    """A pool's unscheduled workload as an IRModule, parsed once per distinct TVMScript text.

    Raises
    ------
    WorkloadError
        When the pool's ``mod`` does not parse or holds no PrimFunc.
    """
    mod = _POOL_MODULES.get(pool.mod)
    if mod is None:
        mod = parse_tvmscript(pool.mod, f"pool {pool.source}: mod")
        if len(_POOL_MODULES) >= 16:
            _POOL_MODULES.pop(next(iter(_POOL_MODULES)))
        _POOL_MODULES[pool.mod] = mod
    return mod


def _pool_candidate(mod: tvm.IRModule, trace_json: Any) -> ms.MeasureCandidate | None:
    """The MeasureCandidate of one pool trace, or None when the trace does not apply."""
    try:
        sch = apply_trace(mod, trace_json)
        return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
    except Exception as err:  # a trace that does not apply is the pool's problem: skip it
        logger.debug("tuna bench: a trace does not apply: %s", err)
        return None


def xgb_scores(
    pool: Any,
    train_idx: np.ndarray,
    test_idx: np.ndarray,
    seed: int = 0,
    num_threads: int | None = None,
    features: list | None = None,
    machine: Machine | None = None,
    tier: str = "ir",
) -> tuple[np.ndarray, float]:
    """MetaSchedule's own XGBModel, trained on the measured train candidates, as a scorer:
    on MetaSchedule's features, or with ``features`` on tuna's (:class:`tuna.FeatureExtractor`).

    Parameters
    ----------
    pool : tuna.bench.Pool
        The measured pool.
    train_idx, test_idx : ndarray
        Candidates to train on (their ``secs_a``) and to score.
    seed : int
        XGBoost's seed.
    num_threads : int, optional
        XGBoost threads (MetaSchedule's default: the physical cores).
    features : list, optional
        tuna's analysis features of every candidate of the pool with ``tier`` for
        ``machine`` (None for one not analysable), as :func:`pool_features` gives them:
        the model learns on tuna's rows of them instead of MetaSchedule's per-store features.
    machine : Machine, optional
        What ``features`` model (needed with them).
    tier : str
        The tier of ``features``.

    Returns
    -------
    scores : ndarray
        XGBModel's predictions for ``test_idx`` (higher is better); the worst score for a
        candidate whose trace does not apply.
    seconds_per_candidate : float
        Applying the trace, extracting features and predicting, per test candidate;
        training is left out.

    Raises
    ------
    TunaError
        When no train candidate could be used.
    """
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    mod = pool_module(pool)
    context = new_tune_context(mod=mod, target=tvm.target.Target(dict(pool.target)))
    extractor = None
    if features is not None:
        from ..feature_extractor import FeatureExtractor

        extractor = FeatureExtractor(machine, tier)

    def built(idx: np.ndarray) -> list:
        """The candidates of ``idx`` (None: the trace does not apply), their tuna rows given to
        the extractor, so that it does not analyse them again."""
        cands = [_pool_candidate(mod, pool.traces[i]) for i in idx]
        if extractor is not None:
            extractor.remember((c.sch.mod, features[i]) for i, c in zip(idx, cands) if c is not None)
        return cands

    model = XGBModel(
        config=XGBConfig(seed=seed),
        extractor=extractor or "per-store-feature",
        num_warmup_samples=0,  # the default (100) predicts at random below 100 samples
        verbose_eval=0,
        adaptive_training=False,
        num_tuning_cores=num_threads,
    )
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level = ms_logger.level
    ms_logger.setLevel(logging.WARNING)
    try:
        with xgb.config_context(verbosity=0):
            train = [(c, float(pool.secs_a[i])) for i, c in zip(train_idx, built(train_idx)) if c is not None]
            if not train:
                raise TunaError(f"pool {pool.name}: no train candidate's trace applies; XGBModel cannot train")
            model.update(
                context,
                [c for c, _ in train],
                [RunnerResult(run_secs=[s], error_msg=None) for _, s in train],
            )
            start = time.perf_counter()
            cands = built(test_idx)
            scores = np.full(len(test_idx), WORST_SCORE, dtype="float64")
            ok = [j for j, c in enumerate(cands) if c is not None]
            if ok:
                scores[ok] = model.predict(context, [cands[j] for j in ok])
            elapsed = time.perf_counter() - start
    finally:
        ms_logger.setLevel(level)
    return scores, elapsed / max(len(test_idx), 1)


def pool_features(
    pool: Any, machine: Machine, tier: str, progress: Callable[[int, int], None] | None = None
) -> tuple[list[dict[str, float] | None], float]:
    """tuna's features of every candidate of a pool, with one tier.

    Parameters
    ----------
    pool : tuna.bench.Pool
        The measured pool (its measurements are not looked at).
    machine : Machine
        What to model.
    tier : str
        ``"ir"`` or ``"full"``.
    progress : callable, optional
        Called as ``progress(done, total)`` after each candidate.

    Returns
    -------
    features : list
        Per candidate, the estimate's features, or None when it cannot be analysed.
    seconds_per_candidate : float
        Applying the trace and analysing (compiling too, for the full tier), per candidate.

    Raises
    ------
    AnalysisError
        When not one candidate can be analysed (e.g. a CPU pool with a GPU preset).
    """
    mod = pool_module(pool)
    out: list[dict[str, float] | None] = []
    failed = 0
    first_error = None
    start = time.perf_counter()
    for i, trace in enumerate(pool.traces):
        try:
            with collector_paused():  # as the search's evaluators analyse a candidate
                out.append(dict(estimate_trace(mod, trace, machine, tier).features))
        except TunaError as err:
            failed += 1
            first_error = first_error or err
            out.append(None)
            logger.debug("tuna bench: %s candidate %d: %s", pool.name, i, err)
        if progress is not None:
            progress(i + 1, len(pool.traces))
    if out and failed == len(out):
        raise AnalysisError(f"{pool.name}: no candidate could be analysed with the {tier} tier "
                            f"for {machine.name}; the first error: {first_error}")
    if failed:
        logger.warning("tuna: %s: %d of %d candidates not analysable (%s tier)", pool.name, failed, len(out), tier)
    return out, (time.perf_counter() - start) / max(len(out), 1)
