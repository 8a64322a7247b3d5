"""MetaSchedule's own tuner with real measurement, and what the benchmarks build from it.

- :func:`tune_measured`: MetaSchedule's default tuner (XGBModel + LocalBuilder/LocalRunner,
  real measurement), recording when each candidate was measured;
- :func:`collect_pool`: a measured pool in the format of ``tuna/data/pools``;
- :func:`shortlist_pool`: every candidate a tuna run predicted, timed after the run and
  written as such a pool (``tuna bench tune --shortlists``);
- :func:`retime`: the re-timing both share (builds, then times each candidate twice);
- :func:`retime_pool`: a measured pool's candidates timed again here (``tuna bench retime``);
- :func:`compare_tuning`: tuna's offline tuning against measured tuning, at equal wall-clock
  budget and at full budget (``tuna bench tune``).

Nothing here prints: progress goes to a callback, bad input raises :class:`tuna.errors.TunaError`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ...errors import TunaError
from ..analysis import apply_trace
from ..intrinsics import load_tensor_intrinsics
from ..tuning import tune
from ..workloads import load_workload, network_task, plain_json, pool_label, tvm_target
from .timing import ROUNDS, MeasureError, Progress, Timer, check_runnable, compile_timer, report, time_interleaved

logger = logging.getLogger("tuna")

#: Seconds MetaSchedule's LocalBuilder may take per candidate (its default, 30, is too
#: short on a loaded 2-core machine: every candidate fails).
BUILD_TIMEOUT = 120.0




@dataclass(frozen=True)
class Measured:
    """One candidate MetaSchedule measured: its trace (JSON), the tuner's seconds, when."""

    trace: Any
    tuner_secs: float | None
    elapsed: float
    task: int = 0
    error: str | None = None


@dataclass
class MeasuredRun:
    """What :func:`tune_measured` returns: the database and every measured candidate in order."""

    database: Any
    candidates: list[Measured]
    tune_seconds: float
    trials: int

    def best_within(self, seconds: float, task: int = 0) -> Measured | None:
        """The candidate the tuner rated fastest among those measured within ``seconds``."""
        done = [c for c in self.candidates if c.task == task and c.elapsed <= seconds and c.tuner_secs]
        return min(done, key=lambda c: c.tuner_secs) if done else None


@derived_object
class Recorder(ms.measure_callback.PyMeasureCallback):
    """Keeps each measured candidate with the wall time at which its batch finished."""

    def __init__(self, out: list[Measured], start: float, total: int, progress: Progress) -> None:
        super().__init__()
        self.out, self.start, self.total, self.progress = out, start, total, progress

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        now = time.perf_counter() - self.start
        for cand, built, res in zip(measure_candidates, builder_results, runner_results):
            secs = [float(s) for s in res.run_secs] if res.run_secs and not res.error_msg else []
            error = None if secs else str(built.error_msg or res.error_msg or "no run time")
            self.out.append(Measured(plain_json(cand.sch.trace.as_json()), float(np.mean(secs)) if secs else None, now,
                                     int(task_id), error))
        best = min((c.tuner_secs for c in self.out if c.tuner_secs), default=math.inf)
        failed = sum(1 for c in self.out if c.error)
        report(self.progress, f"  {len(self.out):>5}/{self.total} done ({failed} failed) | "
                            f"best {best * 1e6:10.1f} us | {now:6.1f} s")


def quiet_metaschedule() -> None:
    """Keep MetaSchedule's logger to warnings while it tunes."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def measuring_builder_runner(build_timeout: float) -> dict[str, Any]:
    """MetaSchedule's LocalBuilder and LocalRunner, with more time to build.

    Each build batch starts fresh worker processes that import TVM; on a loaded 2-core
    machine that alone can pass MetaSchedule's default 30 s and fail every candidate.
    The runner keeps its defaults (they decide what is measured).
    """
    load_tensor_intrinsics()  # for the TuneContext; the builder's workers load them as they start
    return {"builder": ms.builder.LocalBuilder(timeout_sec=build_timeout, initializer=load_tensor_intrinsics),
            "runner": ms.runner.LocalRunner()}


def tune_measured(
    mod: tvm.IRModule,
    target: Any,
    work_dir: str | os.PathLike,
    trials: int,
    *,
    machine: str | None = None,
    num_trials_per_iter: int = 64,
    seed: int | None = 0,
    build_timeout: float = BUILD_TIMEOUT,
    progress: Progress = None,
    cost_model: Any = None,
) -> MeasuredRun:
    """Tune with MetaSchedule's defaults and real measurement here (XGBModel, LocalRunner;
    ``cost_model``: another cost model instead of XGBModel on MetaSchedule's features).

    Raises
    ------
    MeasureError
        When the target cannot run on this machine.
    """
    mach = check_runnable(target, machine)
    quiet_metaschedule()
    os.makedirs(work_dir, exist_ok=True)
    out: list[Measured] = []
    start = time.perf_counter()
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), Recorder(out, start, trials, progress)]
    database = ms.tune_tir(
        mod,
        tvm_target(mach),
        str(work_dir),
        max_trials_global=trials,
        num_trials_per_iter=num_trials_per_iter,
        measure_callbacks=callbacks,
        seed=seed,
        **({} if cost_model is None else {"cost_model": cost_model}),
        **measuring_builder_runner(build_timeout),
    )
    return MeasuredRun(database, out, time.perf_counter() - start, len(out))


def collect_pool(
    workload: str,
    target: Any,
    work_dir: str | os.PathLike,
    trials: int = 192,
    *,
    machine: str | None = None,
    num_trials_per_iter: int = 64,
    seed: int | None = 0,
    progress: Progress = None,
) -> dict[str, Any]:
    """Tune ``workload`` with real measurement and re-time every candidate twice: a pool.

    The result has the fields of ``tuna/data/pools/*.json`` (``workload``, ``family``,
    ``target``, ``tune_seconds``, ``trials``, ``mod``, ``candidates`` with ``trace``,
    ``tuner_secs``, ``secs_a``, ``secs_b``); the two timings are two separate passes over
    all candidates, each the median of :data:`REPEAT` repeats of at least
    :data:`MIN_REPEAT_MS` ms. The caller adds the record of the machine it ran on.

    Parameters
    ----------
    workload : str
        A built-in Ansor workload ``NAME:INDEX`` or a network's task ``NETWORK/TASK``.

    Raises
    ------
    WorkloadError
        For a workload that is neither (a TVMScript file has no name to give the pool).
    MeasureError
        When the target cannot run here.
    """
    mod = load_workload(workload)  # unknown names, bad indices, unparsable files fail here
    _, label, family = pool_label(str(workload), mod.script())
    mach = check_runnable(target, machine)
    report(progress, f"tuning {workload} with MetaSchedule (XGBModel, real measurement), {trials} trials")
    run = tune_measured(mod, mach, work_dir, trials, num_trials_per_iter=num_trials_per_iter, seed=seed,
                        progress=progress)
    ok = [c for c in run.candidates if c.tuner_secs]
    if not ok:
        first = run.candidates[0].error if run.candidates else "no candidate was proposed"
        raise MeasureError(f"{workload}: MetaSchedule measured none of its {len(run.candidates)} candidates; "
                           f"the first error: {first}")
    report(progress, f"tuned in {run.tune_seconds:.1f} s; re-timing {len(ok)} measured candidates twice")
    secs = retime(mod, [c.trace if c.tuner_secs else None for c in run.candidates], mach, seed=seed or 0,
                  progress=progress, what=str(workload))
    return {
        "workload": label,
        "family": family,
        "target": plain_json(dict(mach.target)),
        "tune_seconds": run.tune_seconds,
        "trials": trials,
        "mod": mod.script(),
        "candidates": [
            {"trace": c.trace, "tuner_secs": c.tuner_secs, "secs_a": a, "secs_b": b}
            for c, a, b in zip(run.candidates, secs["secs_a"], secs["secs_b"])
        ],
    }


def shortlist_pool(
    workload: str, mod: tvm.IRModule, database: Any, mach: Any, *, method: str = "tuna", seed: int = 0,
    progress: Progress = None,
) -> dict[str, Any]:
    """The candidates a tuna run predicted (its database: what the search handed to the
    runner) as a pool, each timed here twice as the pools are (:func:`retime`).

    The pool's workload is named ``<workload>@<method>`` and each candidate keeps tuna's
    ``predicted_secs`` beside the timings (no ``tuner_secs``: nothing was measured while
    tuning). Candidates the runner could not predict are left out. The caller adds the
    record of the machine it ran on.
    """
    from ...bench.families import family_of

    traces, predicted = [], []
    for rec in database.get_all_tuning_records():
        secs = [float(s) for s in (rec.run_secs or [])]
        if secs and all(math.isfinite(s) for s in secs):
            traces.append(plain_json(rec.trace.as_json()))
            predicted.append(float(np.mean(secs)))
    what = f"{workload} {method}"
    report(progress, f"{what}: timing the {len(traces)} candidates it predicted, twice")
    timed = retime(mod, traces, mach, seed=seed, progress=progress, what=what)
    name = str(workload)
    is_task = network_task(name) is not None
    return {
        "workload": f"{name}@{method}",
        "family": family_of(name if is_task else name.partition(":")[0].upper(), mod.script()),
        "target": plain_json(dict(mach.target)),
        "trials": len(traces),
        "mod": mod.script(),
        "source": f"tuna bench tune --shortlists: the candidates tuna's {method} run predicted",
        "candidates": [{"trace": t, "predicted_secs": p, "tuner_secs": None, "secs_a": a, "secs_b": b}
                       for t, p, a, b in zip(traces, predicted, timed["secs_a"], timed["secs_b"])],
    }


def retime(
    mod: tvm.IRModule, traces: list[Any], mach: Any, *, seed: int = 0, progress: Progress = None, what: str = ""
) -> dict[str, list[float | None]]:
    """Time each trace's schedule of ``mod`` here twice, as the pools are timed.

    Two separate passes over all candidates (``secs_a``, then ``secs_b``), each timing the
    median of :data:`REPEAT` repeats of at least :data:`MIN_REPEAT_MS` ms. A None trace, a
    schedule that does not rebuild and a kernel that fails to run get None (logged).
    """
    timers: list[Timer | None] = []
    for i, trace in enumerate(traces):
        try:
            timers.append(None if trace is None else compile_timer(apply_trace(mod, trace).mod, mach, seed=seed))
        except TunaError as err:
            logger.warning("tuna: candidate %d of %s does not rebuild: %s", i, what, err)
            timers.append(None)
    secs: dict[str, list[float | None]] = {}
    for label in ("secs_a", "secs_b"):
        values: list[float | None] = []
        for i, timer in enumerate(timers):
            try:
                values.append(timer() if timer is not None else None)
            except Exception as err:  # a kernel that fails to run is a failed candidate
                logger.warning("tuna: candidate %d of %s failed to run: %s", i, what, err)
                values.append(None)
            if (i + 1) % 16 == 0 or i + 1 == len(timers):
                report(progress, f"  {label}: {i + 1}/{len(timers)} timed")
        secs[label] = values
    return secs


def retime_pool(data: dict[str, Any], target: Any, *, machine: str | None = None, seed: int = 0,
                progress: Progress = None) -> dict[str, Any]:
    """A measured pool with every candidate timed twice again here (:func:`retime`).

    For timings a busy machine disturbed: the new ``secs_a`` and ``secs_b`` replace the old,
    which each candidate keeps in ``earlier_secs`` (its earlier [a, b] pairs, oldest first), so
    nothing measured is lost. The MetaSchedule tuner's own timing (``tuner_secs``) stays as it
    was. The caller checks that this is the machine the pool was measured on and records the
    re-timing.

    Raises
    ------
    WorkloadError
        When the pool's module does not parse.
    MeasureError
        When the target cannot run here.
    """
    from ..workloads import parse_tvmscript

    mod = parse_tvmscript(data["mod"], f"the module of pool {data.get('workload')}")
    mach = check_runnable(target, machine)
    cands = data["candidates"]
    # A candidate that never ran (no first timing) stays failed; the others are built again.
    traces = [c["trace"] if c.get("secs_a") is not None else None for c in cands]
    report(progress, f"re-timing {sum(t is not None for t in traces)} of {len(cands)} candidates twice")
    secs = retime(mod, traces, mach, seed=seed, progress=progress, what=str(data.get("workload")))
    out = dict(data)
    out["candidates"] = [
        {**c, "secs_a": a, "secs_b": b,
         "earlier_secs": [*c.get("earlier_secs", []), [c.get("secs_a"), c.get("secs_b")]]}
        for c, a, b in zip(cands, secs["secs_a"], secs["secs_b"])
    ]
    return out


# ---------------------------------------------------------------------------------------
# tuna bench tune: offline tuning against measured tuning
# ---------------------------------------------------------------------------------------


def compare_tuning(
    workload: str,
    target: Any,
    work_dir: str | os.PathLike,
    trials: int = 64,
    *,
    machine: str | None = None,
    searches: tuple[str, ...] = ("evolutionary",),
    num_trials_per_iter: int = 32,
    seed: int = 0,
    more_seeds: tuple[int, ...] = (),
    progress: Progress = None,
    reference: Any = None,
    shortlists: bool = False,
) -> list[dict[str, Any]]:
    """Tune ``workload`` offline with tuna (once per search) and with measurement; time each pick here.

    Rows (one per method): ``tuna-<search>`` (tuna's cost model and static runner, ``trials``
    candidates, that search strategy), ``tuna-<search>@seed<N>`` (the same with each of
    ``more_seeds``, to see how much the pick depends on the seed),
    ``metaschedule@tuna-<search>-time`` (the best candidate
    MetaSchedule had measured when that tuna run's wall time had passed; None when it had
    measured none yet), and ``metaschedule`` (``trials`` measured candidates). Each row:
    ``method``, ``tune_seconds``, ``trials``, ``latency`` (the pick re-timed here, seconds),
    ``predicted`` (tuna's prediction of its own pick) and ``schedule`` (the pick's scheduled
    TIR as TVMScript; None without a pick). With ``reference`` (a measured pool
    of the workload, :class:`tuna.bench.Pool`), a last row ``pool-best``: the pool's fastest
    candidate re-timed here, with the pool's tuning time and trials. All picks are timed at
    the end, in turn (:func:`time_interleaved`), so that they are compared under one load.

    With ``shortlists``, each tuna row also gets ``shortlist``: a pool (:func:`shortlist_pool`)
    of every candidate that run predicted, timed here right after the run. It tells a poor
    pick's two causes apart: the search never offered a fast schedule, or the model ranked
    it below the pick.

    Raises
    ------
    MeasureError
        When the target cannot run here.
    """
    mach = check_runnable(target, machine)
    mod = load_workload(workload)
    root = Path(work_dir)
    rows, budgets, picks = [], [], []
    for search in searches:
        for run_seed in (seed, *more_seeds):
            method = f"tuna-{search}" + (f"@seed{run_seed}" if run_seed != seed else "")
            report(progress, f"{workload}: tuna offline, {trials} candidates ({search} search, seed {run_seed})")
            quiet_metaschedule()  # the previous run's logging set-up turned MetaSchedule's console to INFO
            result = tune(mod, mach, root / method, max_trials=trials, num_trials_per_iter=num_trials_per_iter,
                          seed=run_seed, progress=progress, search=search)
            # Its set-up (cost model, builder, runner) counts, as MetaSchedule's does below.
            seconds = result.setup_seconds + result.tune_seconds
            rows.append({
                "method": method,
                "seed": run_seed,
                "tune_seconds": seconds,
                "trials": result.trials,
                "predicted": result.predicted_seconds,
            })
            picks.append(result.schedule.mod)
            if shortlists:
                rows[-1]["shortlist"] = shortlist_pool(workload, mod, result.database, mach, method=method,
                                                       seed=run_seed, progress=progress)
            if run_seed == seed:
                budgets.append((f"metaschedule@tuna-{search}-time", seconds))
    report(progress, f"{workload}: MetaSchedule with measurement, {trials} trials")
    run = tune_measured(mod, mach, root / "metaschedule", trials, num_trials_per_iter=num_trials_per_iter, seed=seed,
                        progress=progress)
    for method, budget in (*budgets, ("metaschedule", math.inf)):
        pick = run.best_within(budget)
        rows.append({
            "method": method,
            "tune_seconds": min(budget, run.tune_seconds),
            "trials": sum(1 for c in run.candidates if c.elapsed <= budget),
            "predicted": None,
        })
        picks.append(apply_trace(mod, pick.trace).mod if pick else None)
    if reference is not None:
        best = reference.traces[int(reference.secs_a.argmin())]
        rows.append({
            "method": "pool-best",
            "tune_seconds": reference.tune_seconds,
            "trials": reference.trials,
            "predicted": None,
        })
        picks.append(apply_trace(mod, best).mod)
    what = f" and the best of the pool {reference.name}" if reference is not None else ""
    report(progress, f"{workload}: timing the picks{what} here, in turn, {ROUNDS} rounds")
    for row, latency, pick in zip(rows, time_interleaved(picks, mach, seed=seed), picks):
        row["latency"] = latency
        row["schedule"] = None if pick is None else pick.script()
    return rows
