"""Tuning a whole network offline: every tuning task of a Relax module, one MetaSchedule run.

The network's tasks are extracted as ``compile_relax`` will look them up
(:func:`~.networks.extract_tasks`), each gets tuna's ES (its own state file in the work
directory, the worker processes shared by all), and MetaSchedule's gradient task scheduler
shares the trials out, giving more to the tasks that weigh most in the predicted network
time. The tuned network is then compiled with the database: a Relax VM executable.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm
from tvm import relax
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir
from tvm.s_tir.meta_schedule.utils import fork_seed

from ..errors import TunaError, WorkloadError
from ..machine import Machine
from ..search.workers import check_cluster
from . import networks
from . import work_dir as work_dirs
from .builder import StaticBuilder
from .cost_model import TunaCostModel
from .intrinsics import new_tune_context
from .runner import Predictions, StaticRunner
from .search_strategy import es_strategy
from .tuning import held_work_dir
from .workloads import as_machine, tvm_target


@dataclass(frozen=True)
class TaskResult:
    """One tuning task of a tuned network.

    Attributes
    ----------
    name : str
        MetaSchedule's task name (the fused operators).
    weight : int
        How many times the network calls it.
    trials : int
        Candidates predicted for it (the database's records of it, earlier runs included).
    seconds : float or None
        Predicted time of its best schedule, one call (None: no candidate of it built).
    """

    name: str
    weight: int
    trials: int
    seconds: float | None

    @property
    def total(self) -> float:
        """Predicted seconds of all its calls in one network run (0 without a prediction)."""
        return 0.0 if self.seconds is None else self.seconds * self.weight


@dataclass
class NetworkTuneResult:
    """What :func:`tune_network` returns.

    Attributes
    ----------
    name : str
        The network's name.
    machine : Machine
        What it was tuned for.
    executable : tvm.relax.VMExecutable
        The network compiled with the tuned schedules (``executable.export_library(path)``,
        or :func:`~tuna.integration.export.export_network`).
    database : ms.database.Database
        MetaSchedule's database of the run (every task's candidates and predictions).
    tasks : list of TaskResult
        Per task, in the order the tasks were extracted.
    tune_seconds : float
        Wall time of MetaSchedule's run (task extraction and the final compilation excluded).
    trials : int
        Candidates predicted in this run.
    setup_seconds : float
        Wall time before MetaSchedule's run began: the network built, its tasks extracted,
        the cost model and each task's search made.
    """

    name: str
    machine: Machine
    executable: Any
    database: Any
    tasks: list[TaskResult]
    tune_seconds: float
    trials: int
    setup_seconds: float = 0.0

    @property
    def predicted_seconds(self) -> float:
        """The tuned tasks' predicted time in one network run (the VM's own work and untuned operators excluded)."""
        return sum(t.total for t in self.tasks)


def is_network(spec: Any) -> bool:
    """Whether ``spec`` names one of tuna's networks or is a Relax module (or a file holding one)."""
    if isinstance(spec, tvm.IRModule):
        return any(isinstance(f, relax.Function) for f in spec.functions.values())
    text = str(spec)
    if text in networks.NETWORKS:
        return True
    path = Path(text)
    if path.suffix == ".py" and path.is_file():
        try:
            return "@R.function" in path.read_text()
        except (OSError, UnicodeDecodeError):
            return False
    return False


def load_network(spec: str | os.PathLike | tvm.IRModule, seed: int = 0) -> tuple[str, tvm.IRModule]:
    """``(name, Relax module)`` of a built-in network, a TVMScript file holding a Relax module, or the module itself.

    Raises
    ------
    WorkloadError
        For a file that does not parse or holds no Relax function.
    """
    if isinstance(spec, tvm.IRModule):
        mod, name = spec, "relax-module"
    elif str(spec) in networks.NETWORKS:
        return str(spec), networks.relax_module(str(spec), seed)
    else:
        path = Path(spec)
        name = path.stem
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise WorkloadError(f"network file {path} cannot be read: {err}") from None
        try:
            mod = tvm.script.from_source(text)
        except Exception as err:  # TVMScript's parser raises its own diagnostics
            hint = ("; its constants are not in it: write it with mod.script(show_meta=True)"
                    if "Metadata omitted" in text else "")
            raise WorkloadError(f"network file {path} does not parse as TVMScript{hint}: "
                                f"{str(err).strip()[:500]}") from None
    if not isinstance(mod, tvm.IRModule) or not any(isinstance(f, relax.Function) for f in mod.functions.values()):
        raise WorkloadError(f"{name} holds no Relax function: give a Relax IRModule (or tune a TIR workload)")
    return name, mod


def tune_network(
    network: str | os.PathLike | tvm.IRModule,
    target: Any,
    work_dir: str | os.PathLike,
    trials_per_task: int = 64,
    *,
    machine: str | None = None,
    num_trials_per_iter: int = 32,
    population_size: int = 256,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    cluster: str | None = None,
) -> NetworkTuneResult:
    """Tune every task of a network offline with tuna, then compile it with the tuned schedules.

    Parameters
    ----------
    network : str, path or IRModule
        A built-in network (``resnet18``, ``resnet50``, ``mobilenetv2``, ``bert``, ``bert-large``,
        ``vit``, ``llama``), a TVMScript file holding a Relax module (``mod.script(show_meta=True)``, so
        that it holds the weights), or the Relax module itself (weights bound as constants).
    target : str, dict, tvm.target.Target
        Preset name or TVM target.
    work_dir : path
        MetaSchedule's work directory (one database for all tasks, logs, tuna's ES states).
    trials_per_task : int
        At most this many candidates per task; ``trials_per_task`` times the number of
        tasks in all, which the gradient task scheduler shares out.
    progress : callable, optional
        Called with a line of text after each batch of candidates.
    workers, cluster
        As for :func:`tuna.tune` (the workers serve every task).

    Raises
    ------
    WorkloadError
        For an unknown network or a module with no Relax function.
    WorkDirError
        As :func:`tuna.tune`.
    """
    entered = time.perf_counter()
    if trials_per_task < 1:
        raise TunaError(f"trials per task must be at least 1, not {trials_per_task}")
    name, mod = load_network(network, seed)
    mach = as_machine(target, machine)
    tgt = tvm_target(mach)
    extracted = [t for t in networks.extract_tasks(mod, tgt) if not t.mod.attrs.get("tirx.is_scheduled", False)]
    if not extracted:
        raise WorkloadError(f"{name} has no operator for MetaSchedule to tune")
    if cluster:
        check_cluster(cluster)
    known = Predictions()
    cost_model = TunaCostModel(mach)
    builder = StaticBuilder(known=known)
    with held_work_dir(work_dir) as run:
        run.watched.append(builder)
        contexts = []
        loggers = get_loggers_from_work_dir(str(work_dir), [t.task_name for t in extracted])
        for i, (task, logger, rand_state) in enumerate(zip(extracted, loggers, fork_seed(seed, n=len(extracted)))):
            # MetaSchedule commits a task's candidates when it comes back to the task, after a
            # pass over all of them: the ES's own line per round shows the work before that.
            strategy = es_strategy(mach, work_dir, population_size, seed, workers, cluster,
                                   _task_lines(progress, i, len(extracted), task.task_name), known,
                                   state_file=work_dirs.state_file(i, task.task_name))
            run.watched.append(strategy)
            contexts.append(new_tune_context(mod=task.dispatched[0], target=tgt, space_generator="post-order-apply",
                                             search_strategy=strategy, task_name=task.task_name, logger=logger,
                                             rand_state=rand_state, num_threads="physical").clone())
        weights = [float(t.weight) for t in extracted]
        tracker = _NetworkProgress(progress, [t.task_name for t in extracted], weights, trials_per_task)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), run.written, tracker]
        if progress is not None:
            progress(f"  {name}: {len(extracted)} tasks, up to {trials_per_task} candidates each")
        start = time.perf_counter()
        database = ms.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=str(work_dir),
            max_trials_global=trials_per_task * len(extracted),
            max_trials_per_task=trials_per_task,
            num_trials_per_iter=min(num_trials_per_iter, trials_per_task),
            builder=builder,
            runner=StaticRunner(mach),
            cost_model=cost_model,
            measure_callbacks=callbacks,
            task_scheduler="gradient",
        )
        elapsed = time.perf_counter() - start
        tasks = [_task_result(database, ctx, task) for ctx, task in zip(contexts, extracted)]
        with tgt:
            executable = ms.relax_integration.compile_relax(database, mod, tgt, params=None)
    return NetworkTuneResult(name, mach, executable, database, tasks, elapsed, tracker.done, start - entered)


def _task_lines(progress: Callable[[str], None] | None, i: int, n: int, name: str) -> Callable[[str], None] | None:
    """The ES's progress lines of task ``i``, named."""
    if progress is None:
        return None
    return lambda line: progress(f"  task {i + 1:>3}/{n} {name[:40]:<40} |{line.removeprefix('  es')}")


def _task_result(database: Any, ctx: Any, task: Any) -> TaskResult:
    workload = database.commit_workload(ctx.mod)
    records = database.get_top_k(workload, 1 << 30)
    best = [float(r.run_secs[0]) for r in records[:1] if r.run_secs]
    return TaskResult(task.task_name, int(task.weight), len(records), best[0] if best else None)


@derived_object
class _NetworkProgress(ms.measure_callback.PyMeasureCallback):
    """Counts the candidates of each task and reports the network's progress after each batch."""

    def __init__(self, report: Callable[[str], None] | None, names: list[str], weights: list[float],
                 per_task: int) -> None:
        super().__init__()
        self.report, self.names, self.weights = report, names, weights
        self.total = per_task * len(names)
        self.done = 0
        self.best = [math.inf] * len(names)
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.done += len(runner_results)
        for res in runner_results:
            if res.run_secs:
                self.best[task_id] = min(self.best[task_id], float(res.run_secs[0]))
        if self.report is None:
            return
        tuned = [b * w for b, w in zip(self.best, self.weights) if math.isfinite(b)]
        self.report(
            f"  {self.done:>6}/{self.total} candidates | task {task_id + 1:>3}/{len(self.names)} "
            f"{self.names[task_id][:40]:<40} | {len(tuned)}/{len(self.names)} tasks predicted, "
            f"{sum(tuned) * 1e6:12,.1f} us | {time.perf_counter() - self.start:7.1f} s"
        )
