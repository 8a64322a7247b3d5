"""Offline tuning with tuna's cost model, runner and search: :func:`tune` and what it returns."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import remove_build_dir

from ..databases.metaschedule import measured as measured_ok
from ..errors import TunaError
from ..estimate import Estimate
from ..machine import Machine
from ..search.workers import check_cluster
from . import work_dir as work_dirs
from .analysis import estimate_module, runner_tier
from .builder import StaticBuilder
from .cost_model import TunaCostModel
from .runner import Predictions, StaticRunner
from .search_strategy import ESSearch, es_strategy, hybrid_strategy
from .workloads import as_machine, load_workload, tvm_target


@dataclass
class TuneResult:
    """What :func:`tune` returns.

    Attributes
    ----------
    database : ms.Database
        All tuning records (run times are tuna's predictions).
    schedule : s_tir.Schedule
        The chosen schedule.
    machine : Machine
        What was modelled.
    predicted_seconds : float
        tuna's predicted run time of the chosen schedule (the tier the runner used: full on CPUs).
    estimate : Estimate
        The chosen schedule's feature breakdown.
    trials : int
        Candidates predicted (offline) or measured (hybrid).
    tune_seconds : float
        Wall-clock time of the tuning run.
    cost_model : TunaCostModel
        The cost model, with its counters.
    measured_seconds : float or None
        Hybrid tuning (``measure=N``): the chosen schedule's measured run time (the mean of
        the runner's repeats; of both measurements where the fastest were confirmed); None
        offline.
    setup_seconds : float
        Wall-clock time before the tuning run began: checks, the cost model (which loads
        TVM's tensor intrinsics), builder, runner and search.
    dropped : int
        Candidates never predicted (offline) or measured (hybrid) because their build ran
        past the builder's limit of CPU seconds (or its process died:
        :class:`~tuna.integration.StaticBuilder`).
    ir_predicted : int
        Of the ``trials``, those tuna's ES handed over with the IR tier's prediction put on the
        full tier's scale, not analysed by the full tier (``ESSearch(full_share=...)``):
        they could not have been the pick.
    confirmed : tuple of Confirmed
        Hybrid tuning: the fastest candidates measured a second time before one was chosen
        (``confirm``), fastest by both measurements first; empty offline.
    """

    database: Any
    schedule: Any
    machine: Machine
    predicted_seconds: float
    estimate: Estimate
    trials: int
    tune_seconds: float
    cost_model: Any
    measured_seconds: float | None = None
    setup_seconds: float = 0.0
    dropped: int = 0
    ir_predicted: int = 0
    confirmed: tuple = ()

    def export(self, path: str | os.PathLike, *, host: Any = None):
        """Compile the chosen schedule for the machine and write it to ``path`` (``.so``, ``.tar``, ``.o``;
        ``.cu``, ``.ptx`` for CUDA): :func:`tuna.integration.export.export_module`.

        Returns
        -------
        ExportInfo
            The file written and a line on loading it on the device (``info.note``).
        """
        from .export import export_module

        return export_module(self, None, path, host=host)


def tune(
    workload: str | tvm.IRModule | tirx.PrimFunc,
    target: Any,
    work_dir: str | os.PathLike,
    max_trials: int = 64,
    *,
    machine: str | None = None,
    num_trials_per_iter: int = 32,
    population_size: int = 256,
    seed: int | None = 0,
    num_tuning_cores: int | str | None = None,
    progress: Callable[[str], None] | None = None,
    search: str = "es",
    workers: int | None = None,
    cluster: str | None = None,
    measure: int | None = None,
    runner: Any = None,
    measure_callbacks: list | None = None,
    confirm: int | None = None,
    pick_tier: str | None = None,
) -> TuneResult:
    """Tune one TIR workload offline for ``target`` with tuna's cost model and runner, or,
    with ``measure``, measuring the few candidates the static model shortlists.

    Parameters
    ----------
    workload : str, IRModule or PrimFunc
        A built-in workload (``"GMM:1"``), a TVMScript file, or the TIR itself.
    target : str, dict, tvm.target.Target
        Preset name or TVM target.
    work_dir : path
        MetaSchedule's work directory (logs and database).
    max_trials : int
        Candidates to build and predict in all.
    progress : callable, optional
        Called with a line of text after each batch of candidates.
    search : str
        ``"es"`` (the default): tuna's evolution strategies
        (:class:`tuna.integration.ESSearch`), scoring with the IR tier in
        ``workers`` processes or on ``cluster``, half of EvolutionarySearch's cost-model
        budget per round (``2.5 * population_size`` candidates), the best half of those it
        hands over analysed by the full tier (:func:`~.search_strategy.es_strategy`); its
        state is kept in ``work_dir`` so that a run started again goes on where it stopped.
        ``"evolutionary"``: MetaSchedule's EvolutionarySearch driven by tuna's cost model.
    num_tuning_cores : int or str, optional
        MetaSchedule's threads (``"physical"``, ``"logical"`` or a number). By default one
        with ``search="evolutionary"``: its search splits the work among the threads as they
        come free, each drawing from its own random state, so with more than one the same
        seed gives other candidates from run to run (SFM:1, 32 trials, two runs each: on two
        threads their records differed, on one they were the same); ``"physical"``
        otherwise (tuna's ES draws its candidates itself).
    workers : int, optional
        Worker processes for ``search="es"``, and for the full tier of hybrid tuning's
        ``pick_tier="full"`` (1: in this process; default: one per physical core).
    cluster : str, optional
        Dask scheduler address or ``local:N`` for ``search="es"`` and that full tier.
    measure : int, optional
        Hybrid tuning: measure ``measure`` candidates in all (``max_trials``,
        ``num_trials_per_iter`` and ``search`` do not apply). Each round the ES
        (:func:`~.search_strategy.hybrid_strategy`) scores with
        ``TunaCostModel(calibrate=True)`` in this process; the model's best
        ``HYBRID_SHORTLIST * HYBRID_PER_ROUND`` among those whose feature rows differ from
        each other and from every candidate measured so far (a candidate the model cannot
        tell apart from one measured teaches it nothing) go to ``pick_tier``, whose best
        :data:`HYBRID_PER_ROUND` are built (:data:`HYBRID_BUILD_CPU_SECONDS` CPU seconds each
        at most) and measured by ``runner``, and the cost model
        learns from their run times (:class:`~.cost_model.TunaCostModel`); then the
        ``confirm`` fastest are measured once more and the schedule chosen is the fastest
        over both measurements.
    runner : ms.runner.Runner, optional
        With ``measure``: what measures (e.g. an ``ms.runner.RPCRunner`` for a remote
        board); by default MetaSchedule's ``LocalRunner``, on this machine, which must be
        able to run the target's code.
    measure_callbacks : list, optional
        More MetaSchedule measure callbacks, called after tuna's after each batch.
    confirm : int, optional
        With ``measure``: of the ``measure`` measurements, how many go to measuring the
        fastest candidates a second time, by default :data:`CONFIRM` where ``measure`` is at
        least 8 times that, fewer below (none under 16). A single run time is noisy (a lucky
        one makes a slower schedule look fastest), and picking the least of many noisy
        times favours luck: the pick is the fastest by the mean of both measurements.
    pick_tier : str, optional
        With ``measure``: what picks each round's measured candidates from the model's
        shortlist. ``"full"``: tuna's full tier, which compiles them (in ``workers``
        processes or on ``cluster``) and ranks far better than the IR tier the model
        corrects; ``"ir"``: the model alone. By default ``"full"`` wherever the full tier
        can run (a CPU; a GPU with nvcc), ``"ir"`` otherwise.

    Returns
    -------
    TuneResult

    Raises
    ------
    MeasureError
        With ``measure`` and no ``runner``, when the target's code cannot run here.
    WorkDirError
        When another run holds ``work_dir``, it cannot be written, its database is
        damaged other than by a last record cut short (which is cut off, a copy kept), the
        search state kept there is damaged, or it holds run times of the other kind
        (predicted offline, measured with ``measure``: :func:`~.work_dir.check_kind`); also
        when the temporary directory is too full to build in (``TMPDIR``:
        :func:`~.work_dir.check_scratch`).
    """
    entered = time.perf_counter()
    if search not in ("evolutionary", "es"):
        raise TunaError(f"unknown search {search!r}; choose es or evolutionary")
    if measure is not None and (isinstance(measure, bool) or not isinstance(measure, int) or measure < 1):
        raise TunaError(f"measure={measure!r}: give the number of candidates to measure, at least 1")
    if runner is not None and measure is None:
        raise TunaError("a runner measures only in hybrid tuning: give measure=N as well")
    if confirm is not None and measure is None:
        raise TunaError("confirm re-measures in hybrid tuning only: give measure=N as well")
    if pick_tier is not None and measure is None:
        raise TunaError("pick_tier chooses what hybrid tuning measures: give measure=N as well")
    check_pick_tier(pick_tier)
    mach = as_machine(target, machine)
    if isinstance(workload, tirx.PrimFunc):
        mod = tvm.IRModule({"main": workload})
    elif isinstance(workload, tvm.IRModule):
        mod = workload
    else:
        mod = load_workload(workload)
    tgt = tvm_target(mach)
    hybrid = measure is not None
    if hybrid:
        # Imported here: .measure imports this module (bench tune runs tune()).
        from .measure.timing import check_runnable

        if runner is None:
            check_runnable(mach)
        builder, runner = StaticBuilder(timeout_sec=HYBRID_BUILD_CPU_SECONDS), runner or ms.runner.LocalRunner()
        pick_tier = pick_tier_for(mach, pick_tier)
        if cluster and pick_tier == "full":
            check_cluster(cluster)
        cost_model = TunaCostModel(mach, calibrate=True)
        confirm = confirmations(measure, confirm)
        max_trials = measure - confirm
        num_trials_per_iter = min(HYBRID_PER_ROUND, max_trials)
    else:
        cost_model = TunaCostModel(mach)
        runner = StaticRunner(mach)
        # The ES's re-ranking compiles and predicts its picks with the runner's tier already.
        known = Predictions()
        builder = StaticBuilder(known=known)
    with held_work_dir(work_dir, "measured" if hybrid else "predicted") as run:
        run.watched.append(builder)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), run.written]
        if progress is not None:
            callbacks = [*callbacks, _Progress(progress, max_trials, cost_model, "measured" if hybrid else "predicted")]
        callbacks += list(measure_callbacks or [])
        if hybrid:
            strategy = hybrid_strategy(work_dir, seed, progress, rows=cost_model.row,
                                       pick_tier="full" if pick_tier == "full" else None, machine=mach,
                                       workers=workers, cluster=cluster)
            run.watched.append(strategy)
        elif search == "es":
            if cluster:
                check_cluster(cluster)
            strategy = es_strategy(mach, work_dir, population_size, seed, workers, cluster, progress, known)
            run.watched.append(strategy)
        else:
            strategy = ms.search_strategy.EvolutionarySearch(population_size=population_size)
        start = time.perf_counter()
        database = ms.tune_tir(
            mod,
            tgt,
            str(work_dir),
            max_trials_global=max_trials,
            num_trials_per_iter=num_trials_per_iter,
            builder=builder,
            runner=runner,
            cost_model=cost_model,
            strategy=strategy,
            measure_callbacks=callbacks,
            num_tuning_cores=num_tuning_cores or (1 if search == "evolutionary" else "physical"),
            seed=seed,
        )
        sch = ms.tir_integration.compile_tir(database, mod, tgt)
        confirmed: tuple[Confirmed, ...] = ()
        if hybrid and confirm and sch is not None:
            confirmed = confirm_fastest(database, mod, tgt, builder, runner, confirm, progress)
            if confirmed and confirmed[0].seconds is not None:
                sch = confirmed[0].schedule(mod)
        elapsed = time.perf_counter() - start
    if sch is None:
        stopped = (f" ({builder.dropped} of them stopped at the builder's limit of {builder.timeout_sec:g} CPU seconds)"
                   if builder.dropped else "")
        raise TunaError("tuning produced no valid schedule: every candidate failed to build or "
                        + ("run" if hybrid else "analyse") + stopped)
    # The tier the runner predicted the candidates with, so the report agrees with the database.
    est = estimate_module(sch.mod, mach, runner_tier(mach))
    if not hybrid:
        ir_predicted = strategy.ir_handed[0] if isinstance(strategy, ESSearch) else 0
        return TuneResult(database, sch, mach, est.seconds, est, runner.ran, elapsed, cost_model,
                          setup_seconds=start - entered, dropped=builder.dropped, ir_predicted=ir_predicted)
    if confirmed and confirmed[0].seconds is not None:
        measured = confirmed[0].seconds
    else:
        best = database.get_top_k(database.commit_workload(mod), 1)
        measured = float(sum(float(s) for s in best[0].run_secs) / len(best[0].run_secs)) if best else None
    return TuneResult(database, sch, mach, est.seconds, est, len(cost_model.records) + len(confirmed), elapsed,
                      cost_model, measured, setup_seconds=start - entered, dropped=builder.dropped, confirmed=confirmed)


#: Candidates measured per round in hybrid tuning (``tune(..., measure=N)``): few, each
#: round's run times teach the model before the next round is chosen.
HYBRID_PER_ROUND = 8

#: CPU seconds one candidate's build (compile and export) may take in hybrid tuning; one that
#: takes longer fails and costs only this. Counted in CPU seconds as offline, so that load
#: does not decide what is dropped; MetaSchedule's LocalBuilder allows 30 wall-clock seconds,
#: its worker's start-up included. An SFM:1 candidate (three parallel loops over 512 rows,
#: each unrolled up to 64 steps; the IR tier's pick on Zen 4, seed 0) compiled for more than
#: 160 CPU seconds without finishing: the 120 wall-clock seconds allowed before cost that
#: run two minutes.
HYBRID_BUILD_CPU_SECONDS = 30.0

#: Of a hybrid run's measurements, how many measure its fastest candidates a second time
#: (``tune(..., confirm=...)``'s default, for ``measure`` of at least 8 times this).
CONFIRM = 4


def check_pick_tier(pick_tier: str | None) -> None:
    """TunaError unless ``pick_tier`` is one :func:`tune` takes (None, ``"full"`` or ``"ir"``)."""
    if pick_tier not in (None, "full", "ir"):
        raise TunaError(f"pick_tier={pick_tier!r}: choose full or ir")


def pick_tier_for(mach: Machine, pick_tier: str | None) -> str:
    """The tier a hybrid run on ``mach`` picks its measurements with: ``pick_tier``, or by
    default the tier the static runner predicts with (:func:`runner_tier`).

    Raises
    ------
    TunaError
        For a tier :func:`tune` does not take, or ``"full"`` where the full tier cannot
        analyse code for ``mach`` here (a GPU without nvcc).
    """
    check_pick_tier(pick_tier)
    if pick_tier is None:
        return runner_tier(mach)
    if pick_tier == "full" and runner_tier(mach) != "full":
        raise TunaError(f"pick_tier='full': tuna's full tier cannot analyse code for {mach.name} here "
                        "(no nvcc on the PATH); give pick_tier='ir'")
    return pick_tier


def confirmations(measure: int, confirm: int | None = None) -> int:
    """How many of ``measure`` measurements re-measure the fastest candidates: ``confirm``
    if given (TunaError unless 0 or from 2 to ``measure - 1``: one candidate re-measured
    chooses nothing), else :data:`CONFIRM`, fewer where ``measure`` is under 8 times that,
    none under 16."""
    if confirm is None:
        confirm = min(CONFIRM, measure // HYBRID_PER_ROUND)
        return confirm if confirm >= 2 else 0
    if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0 or confirm == 1 \
            or (confirm and confirm >= measure):
        raise TunaError(f"confirm={confirm!r}: give 0, or from 2 to one less than measure={measure}")
    return confirm


@dataclass(frozen=True)
class Confirmed:
    """A candidate of a hybrid run measured a second time: its trace, the mean run time of
    each measurement (seconds, in order; None for a measurement that failed) and
    ``seconds``, their mean (None if the second failed: it is not chosen)."""

    trace: Any
    run_means: tuple[float | None, ...]

    @property
    def seconds(self) -> float | None:
        if any(t is None for t in self.run_means):
            return None
        return sum(self.run_means) / len(self.run_means)

    def schedule(self, mod: tvm.IRModule):
        """The candidate's schedule of ``mod``."""
        return _schedule(mod, self.trace)


def _schedule(mod: tvm.IRModule, trace) -> s_tir.Schedule:
    """The schedule a database record's ``trace`` makes of ``mod``, as MetaSchedule's
    ``query_schedule`` applies it (postprocessors' steps kept)."""
    sch = s_tir.Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def _mean(run_secs) -> float | None:
    """Mean of a record's run times; None unless they are a successful measurement."""
    secs = tuple(float(s) for s in run_secs or ())
    return sum(secs) / len(secs) if measured_ok(secs) else None


def confirm_fastest(database, mod: tvm.IRModule, target, builder, runner, count: int,
                    progress: Callable[[str], None] | None = None) -> tuple[Confirmed, ...]:
    """Measure the ``count`` fastest distinct candidates of ``database`` once more with
    ``builder`` and ``runner``, keep the new run times in the database, and return them
    fastest first by the mean of both measurements (those whose second measurement failed
    last). Empty when fewer than two candidates ran."""
    workload = database.commit_workload(mod)
    seen: dict[str, Any] = {}
    for rec in database.get_top_k(workload, 4 * count):
        if _mean(rec.run_secs) is not None:
            seen.setdefault(str(rec.trace), rec)
    top = list(seen.values())[:count]
    if len(top) < 2:
        return ()
    if progress:
        progress(f"   confirming: the {len(top)} fastest measured once more")
    built = builder.build([ms.builder.BuilderInput(_schedule(mod, rec.trace).mod, target) for rec in top])
    device = "cpu" if target.kind.name in ("llvm", "c") else target.kind.name  # as runtime.device names it
    inputs, ran = [], []
    for rec, b in zip(top, built):
        if b.error_msg is None:
            inputs.append(ms.runner.RunnerInput(b.artifact_path, device, rec.args_info))
            ran.append(rec)
    results = [f.result() for f in runner.run(inputs)] if inputs else []
    for b in built:
        if b.error_msg is None:
            remove_build_dir(b.artifact_path)
    again = {id(rec): res for rec, res in zip(ran, results)}
    out = []
    for rec in top:
        res = again.get(id(rec))
        second = _mean(res.run_secs) if res is not None and res.error_msg is None else None
        if second is not None:  # kept with the others: nothing measured is lost
            database.commit_tuning_record(ms.database.TuningRecord(rec.trace, workload, res.run_secs, target,
                                                                   rec.args_info))
        out.append(Confirmed(rec.trace, (_mean(rec.run_secs), second)))
    out.sort(key=lambda c: (c.seconds is None, c.seconds or 0.0))
    if progress:
        progress("   " + "; ".join(f"{c.run_means[0] * 1e6:,.1f} then "
                                   + (f"{c.run_means[1] * 1e6:,.1f} us" if c.run_means[1] is not None else "failed")
                                   for c in out))
    return tuple(out)


@dataclass
class _HeldRun:
    """What :func:`held_work_dir` gives a run: the records check to add to its callbacks, and
    the list to add its ESSearch strategies and StaticBuilder to (each keeps a ``failures``
    list of the work-directory errors it raised inside TVM, which are raised as such)."""

    written: _RecordsWritten
    watched: list = field(default_factory=list)


@contextmanager
def held_work_dir(work_dir: str | os.PathLike, kind: str = "predicted") -> Iterator[_HeldRun]:
    """Hold ``work_dir`` for one tuning run and check it before TVM reads it.

    ``kind`` says what the run's run times are ("predicted" or "measured"); a directory
    holding the other kind is refused (:func:`~.work_dir.check_kind`).

    A run killed while writing leaves a record cut short; any other damage to the database
    or the ES states is refused here, named, before TVM reads them (it raises an untyped
    error mid-file). The run adds ``written`` to its callbacks after MetaSchedule's own
    (which add the records to the database): a record that did not reach the file (a full
    disk: TVM's writer does not say) stops the run, named. A temporary directory too full to
    build in stops it before it starts (:func:`~.work_dir.check_scratch`; StaticBuilder checks
    again before each batch). TVM hands an error raised in tuna's callbacks back as a
    RuntimeError; the original is raised instead.

    Raises
    ------
    WorkDirError
        See :func:`tune`.
    """
    with work_dirs.exclusive(work_dir):
        work_dirs.check_database(work_dir)
        work_dirs.check_state(work_dir)
        work_dirs.check_kind(work_dir, kind)
        work_dirs.check_scratch()
        run = _HeldRun(_RecordsWritten(work_dir))
        try:
            yield run
        except Exception:
            failures = [f for part in run.watched for f in part.failures]
            failures += [run.written.error] if run.written.error else []
            if failures:
                raise failures[0] from None
            raise


@derived_object
class _RecordsWritten(ms.measure_callback.PyMeasureCallback):
    """Checks after each batch that the database file on disk holds every record the database was given."""

    def __init__(self, work_dir: str | os.PathLike) -> None:
        super().__init__()
        self.path = work_dirs.records_path(work_dir)
        self.error: work_dirs.WorkDirError | None = None

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        # The JSON database holds in memory every record it was given, and appends each to the file.
        held = len(task_scheduler.database_)
        lines = work_dirs.record_lines(self.path.parent)
        if lines < held:
            self.error = work_dirs.WorkDirError(
                f"{held - lines} tuning records could not be written to {self.path} (is the disk full?); "
                "the run stops here. Free some space and run the same command again: it resumes from the "
                "records the file holds")
            raise self.error


@derived_object
class _Progress(ms.measure_callback.PyMeasureCallback):
    """Reports tuning progress after each batch of candidates."""

    def __init__(self, report: Callable[[str], None], total: int, model: TunaCostModel,
                 what: str = "predicted") -> None:
        super().__init__()
        self.report, self.total, self.model, self.what = report, total, model, what
        self.done, self.best = 0, math.inf
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.done += len(runner_results)
        for res in runner_results:
            if res.run_secs:
                self.best = min(self.best, float(res.run_secs[0]))
        rate = self.model.predicted / max(self.model.seconds, 1e-9)
        # tuna's ES scores in its own workers and reports that itself; the cost model is idle.
        model = f"cost model {self.model.predicted} scored ({rate:,.0f}/s) | " if self.model.predicted else ""
        self.report(
            f"  {self.done:>5}/{self.total} candidates built and {self.what} | best {self.what} "
            f"{self.best * 1e6:10.1f} us | {model}{time.perf_counter() - self.start:6.1f} s"
        )
