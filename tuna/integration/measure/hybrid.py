"""``tuna bench hybrid``: how many measurements each way of tuning with measurement needs.

For one workload, three tuners measure candidates on this machine with MetaSchedule's
LocalRunner, and every measured candidate is kept with the wall time it was measured at:

- ``metaschedule``: MetaSchedule's defaults (XGBModel on its own per-store features,
  64 candidates a round), ``ms_trials`` in all: its best is the yardstick;
- ``xgb-tuna``: the same XGBModel on tuna's IR-tier features (:class:`tuna.FeatureExtractor`),
  :data:`~tuna.integration.tuning.HYBRID_PER_ROUND` a round;
- ``tuna-hybrid``: ``tuna.tune(..., measure=N)``: tuna's ES on its learning cost model,
  the last few of its N measurements measuring its fastest candidates once more (one run
  per number of such confirmations asked for, ``tuna-hybrid-confirm-K``, and per tier that
  picks what is measured, ``tuna-hybrid-pick-T``).

Each row says how many measured trials and how many seconds the tuner needed before one of
its candidates ran within 5% of the yardstick (by the runner's own run times), and the
tuner's final pick (the fastest by the runner; tuna's hybrid: the fastest over both of its
measurements) re-timed here with the others, in turn (:func:`.timing.time_interleaved`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tvm.s_tir import meta_schedule as ms

from ..analysis import apply_trace
from ..feature_extractor import FeatureExtractor
from ..tuning import HYBRID_PER_ROUND, TuneResult, check_pick_tier, confirmations, pick_tier_for, tune
from ..workloads import load_workload
from .measured_tuning import Measured, Recorder, quiet_metaschedule, tune_measured
from .timing import Progress, check_runnable, report, time_interleaved

#: How close to the yardstick a candidate must run to count as reaching it.
WITHIN = 1.05


def reached(candidates: list[Measured], yardstick: float, within: float = WITHIN) -> tuple[int | None, float | None]:
    """The measured trials and wall seconds before a candidate ran within ``within`` of
    ``yardstick`` seconds (None, None when none did)."""
    for i, cand in enumerate(candidates):
        if cand.tuner_secs is not None and cand.tuner_secs <= within * yardstick:
            return i + 1, cand.elapsed
    return None, None


def compare_hybrid(
    workload: str,
    target: Any,
    work_dir: str | os.PathLike,
    *,
    measure: int = 32,
    xgb_trials: int = 64,
    ms_trials: int = 192,
    machine: str | None = None,
    seed: int = 0,
    confirms: Sequence[int | None] = (None,),
    pick_tiers: Sequence[str | None] = (None,),
    progress: Progress = None,
) -> list[dict[str, Any]]:
    """Tune ``workload`` with measurement three ways (see the module) and compare them.

    ``confirms``: one tuna-hybrid run per value, each with that many confirming measurements
    (None: :func:`~tuna.integration.tuning.confirmations`' default); with more than one
    value, the runs are named ``tuna-hybrid-confirm-K``, so that one run compares them on the
    same seed and the same machine state. ``pick_tiers`` likewise, one run per value of
    ``tune``'s ``pick_tier`` (rows ``tuna-hybrid-pick-T``), and one per pair with both.

    Returns
    -------
    list of dict
        One row per tuner: ``method``, ``trials`` (measured), ``tune_seconds``, ``best``
        (its fastest candidate by the runner, seconds), ``trials_to_5pct`` and
        ``seconds_to_5pct`` (None: never within 5% of ``metaschedule``'s best),
        ``latency`` (its pick re-timed here); tuna-hybrid rows also ``confirmed`` (its
        confirming measurements) and ``pick_tier``.

    Raises
    ------
    MeasureError
        When the target cannot run here.
    """
    confirms = list(confirms) or [None]
    pick_tiers = list(pick_tiers) or [None]
    for k in confirms:
        confirmations(measure, k)  # a bad value stops the run before anything is tuned
    for tier in pick_tiers:
        check_pick_tier(tier)  # likewise
    mach = check_runnable(target, machine)
    pick_tiers = [pick_tier_for(mach, tier) for tier in pick_tiers]
    mod = load_workload(workload)
    root = Path(work_dir)
    runs: list[tuple[str, list[Measured], float]] = []

    # Tuning time: each call whole, set-up included (the trials' times count from the start
    # of MetaSchedule's run for the first two, from the call for tuna's).
    report(progress, f"{workload}: MetaSchedule's defaults, {ms_trials} measured trials")
    start = time.perf_counter()
    run = tune_measured(mod, mach, root / "metaschedule", ms_trials, num_trials_per_iter=64, seed=seed,
                        progress=progress)
    runs.append(("metaschedule", run.candidates, time.perf_counter() - start))

    report(progress, f"{workload}: XGBModel on tuna's features, {xgb_trials} measured trials")
    start = time.perf_counter()
    # It learns from its first round on (its default waits for 100 candidates, scoring at random).
    model = ms.cost_model.XGBModel(extractor=FeatureExtractor(mach), num_warmup_samples=HYBRID_PER_ROUND)
    run = tune_measured(mod, mach, root / "xgb-tuna", xgb_trials, num_trials_per_iter=HYBRID_PER_ROUND, seed=seed,
                        progress=progress, cost_model=model)
    runs.append(("xgb-tuna", run.candidates, time.perf_counter() - start))

    hybrids: dict[str, TuneResult] = {}
    tiers: dict[str, str] = {}
    for k in confirms:
        for tier in pick_tiers:
            method = ("tuna-hybrid" + (f"-confirm-{confirmations(measure, k)}" if len(confirms) > 1 else "")
                      + (f"-pick-{tier}" if len(pick_tiers) > 1 else ""))
            report(progress, f"{workload}: {method}, {measure} measured trials")
            out: list[Measured] = []
            quiet_metaschedule()  # its logging set-up of the runs above turned its console to INFO
            start = time.perf_counter()
            hybrids[method] = tune(mod, mach, root / method, measure=measure, confirm=k, seed=seed, pick_tier=tier,
                                   measure_callbacks=[Recorder(out, start, measure, progress)])
            runs.append((method, out, time.perf_counter() - start))
            tiers[method] = tier

    measured = [[c for c in cands if c.tuner_secs] for _, cands, _ in runs]
    yardstick = min(c.tuner_secs for c in measured[0]) if measured[0] else math.inf
    rows, picks = [], []
    for (method, cands, seconds), ok in zip(runs, measured):
        trials, when = reached(cands, yardstick)
        best = min(ok, key=lambda c: c.tuner_secs) if ok else None
        row = {"method": method, "trials": len(cands), "tune_seconds": seconds,
               "best": best.tuner_secs if best else None, "trials_to_5pct": trials, "seconds_to_5pct": when}
        if method in hybrids:  # its own choice, after measuring its fastest once more
            hybrid = hybrids[method]
            pick = hybrid.schedule.mod
            row["confirmed"] = len(hybrid.confirmed)
            row["pick_tier"] = tiers[method]
            row["trials"] += len(hybrid.confirmed)
        else:
            pick = apply_trace(mod, best.trace).mod if best else None
        rows.append(row)
        picks.append(pick)
    report(progress, f"{workload}: timing the picks here, in turn")
    for row, latency in zip(rows, time_interleaved(picks, mach, seed=seed)):
        row["latency"] = latency
    return rows
