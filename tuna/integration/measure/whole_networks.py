"""``tuna bench network``: whole networks (:mod:`tuna.integration.networks`) tuned per task and timed.

Tuned with tuna and with MetaSchedule (real measurement), untuned, and PyTorch eager.
Nothing here prints: progress goes to a callback, bad input raises :class:`tuna.errors.TunaError`.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from ...errors import TunaError
from .. import networks
from ..network_tuning import tune_network
from ..workloads import tvm_target
from .measured_tuning import BUILD_TIMEOUT, Measured, Recorder, measuring_builder_runner, quiet_metaschedule
from .timing import MIN_REPEAT_MS, REPEAT, ROUNDS, Progress, check_runnable, device_of, report

logger = logging.getLogger("tuna")

def _vm_timer(executable: Any, name: str, dev: tvm.runtime.Device) -> Callable[[int], float]:
    """A function timing the executable: median seconds of ``repeat`` runs of ``main`` (time_evaluator)."""
    vm = relax.VirtualMachine(executable, dev)
    inp = tvm.runtime.tensor(networks.example_input(name), dev)

    def timer(repeat: int) -> float:
        evaluator = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=MIN_REPEAT_MS)
        return float(statistics.median(evaluator(inp).results))

    return timer


@dataclass
class NetworkRow:
    """One way of running one network: tuning time and measured latency."""

    network: str
    method: str
    tune_seconds: float | None
    latency: float | None
    trials: int | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {"network": self.network, "method": self.method, "tune_seconds": self.tune_seconds,
                "latency": self.latency, "trials": self.trials, "note": self.note, **self.extra}


#: The ways ``tuna bench network`` runs a network.
NETWORK_METHODS = ("untuned", "tuna", "metaschedule", "pytorch")


def check_methods(methods: tuple[str, ...]) -> None:
    """TunaError unless every name is one of :data:`NETWORK_METHODS` (and there is one)."""
    bad = [m for m in methods if m not in NETWORK_METHODS]
    if bad or not methods:
        raise TunaError(f"unknown method(s) {', '.join(bad) or '(none)'}; choose from {', '.join(NETWORK_METHODS)}")


def network_bench(
    name: str,
    target: Any,
    work_dir: str | os.PathLike,
    trials_per_task: int = 64,
    *,
    machine: str | None = None,
    methods: tuple[str, ...] = ("untuned", "tuna", "metaschedule", "pytorch"),
    repeat: int = REPEAT,
    population_size: int = 256,
    seed: int = 0,
    progress: Progress = None,
) -> list[NetworkRow]:
    """Build, tune and time one network here, each way in ``methods``.

    ``untuned``: ``tvm.compile`` with the default Relax pipeline for the target; ``tuna``:
    the network tuned offline as ``tuna tune NETWORK`` does
    (:func:`~tuna.integration.network_tuning.tune_network`: tuna's ES on every task,
    the gradient task scheduler, at most ``trials_per_task`` candidates each);
    ``metaschedule``: the same tasks tuned with XGBModel and real measurement, the same
    trials; ``pytorch``: the same graph and weights in PyTorch eager
    mode on as many threads as TVM's runtime runs here (``runtime.NumThreads``: one on a 2-vCPU
    x86 guest unless ``TVM_NUM_THREADS`` says more; a row with a note when PyTorch is not
    installed). Latency: ``VirtualMachine.time_evaluator``, median of ``repeat``; all ways
    are timed at the end, in turn, :data:`ROUNDS` rounds (the median of the rounds). tuna's ES
    scores ``2.5 * population_size`` candidates per round (as :func:`tuna.tune`); MetaSchedule
    keeps its default population.

    Raises
    ------
    MeasureError
        When the target cannot run here.
    """
    mach = check_runnable(target, machine)
    networks.network(name)  # unknown names fail before any work
    check_methods(methods)
    quiet_metaschedule()
    tgt = tvm_target(mach)
    dev = device_of(mach)
    mod = networks.relax_module(name, seed)
    rows: list[NetworkRow] = []
    timers: list[Callable[[int], float] | None] = []  # per row: median seconds of ``repeat`` runs
    tasks = None
    for method in methods:
        if method == "untuned":
            report(progress, f"{name}: building untuned (TVM's default pipeline)")
            with tgt:
                ex = tvm.compile(mod, tgt)
            rows.append(NetworkRow(name, method, 0.0, None))
            timers.append(_vm_timer(ex, name, dev))
        elif method == "tuna":
            report(progress, f"{name}: tuning every task with tuna, {trials_per_task} candidates each")
            result = tune_network(mod, mach, Path(work_dir) / name / method, trials_per_task,
                                  population_size=population_size, seed=seed,
                                  progress=None if progress is None else lambda line: report(progress, line))
            report(progress, f"{name}: tuna tuned in {result.tune_seconds:.1f} s")
            rows.append(NetworkRow(name, method, result.tune_seconds, None, result.trials,
                                   extra={"tasks": len(result.tasks)}))
            timers.append(_vm_timer(result.executable, name, dev))
        elif method == "metaschedule":
            if tasks is None:
                tasks = networks.extract_tasks(mod, tgt)
            n = len(tasks)
            report(progress, f"{name}: tuning {n} tasks with {method}, {trials_per_task} trials each")
            kwargs, strategy = measuring_builder_runner(BUILD_TIMEOUT), "evolutionary"
            contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                tasks, str(Path(work_dir) / name / method), strategy=strategy, seed=seed)
            done: list[Measured] = []
            start = time.perf_counter()
            callbacks = [*ms.measure_callback.MeasureCallback.create("default"),
                         Recorder(done, start, n * trials_per_task, progress)]
            database = ms.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=str(Path(work_dir) / name / method),
                max_trials_global=n * trials_per_task,
                max_trials_per_task=trials_per_task,
                num_trials_per_iter=min(trials_per_task, 64),
                measure_callbacks=callbacks,
                **kwargs,
            )
            tune_seconds = time.perf_counter() - start
            report(progress, f"{name}: {method} tuned in {tune_seconds:.1f} s; compiling")
            ex = ms.relax_integration.compile_relax(database, mod, tgt, params=None)
            rows.append(NetworkRow(name, method, tune_seconds, None, len(done), extra={"tasks": n}))
            timers.append(_vm_timer(ex, name, dev))
        else:
            row, timer = _torch_row(name, seed)
            rows.append(row)
            timers.append(timer)
    # Timed together at the end, in turn, so that a change in the machine's load (it is shared)
    # falls on every way alike rather than on the one that happened to be timed then.
    report(progress, f"{name}: timing {', '.join(r.method for r, t in zip(rows, timers) if t)} in turn, "
                     f"{ROUNDS} rounds")
    samples: list[list[float]] = [[] for _ in rows]
    for _ in range(ROUNDS):
        for i, timer in enumerate(timers):
            if timer is not None:
                samples[i].append(timer(repeat))
    for row, got in zip(rows, samples):
        if got:
            row.latency = float(statistics.median(got))
    return rows


def _torch_row(name: str, seed: int) -> tuple[NetworkRow, Callable[[int], float] | None]:
    """The PyTorch eager row and its timer (None when PyTorch is not installed)."""
    if not networks.torch_available():
        return NetworkRow(name, "pytorch", None, None, note="skipped: PyTorch is not installed"), None
    import torch

    # The threads TVM's runtime gives the tuned networks here: the same for PyTorch, or the
    # comparison measures thread counts, not kernels.
    threads = int(tvm.get_global_func("runtime.NumThreads")())
    run = networks.torch_callable(name, seed)
    inp = networks.example_input(name)

    def timer(repeat: int) -> float:
        torch.set_num_threads(threads)
        run(inp)  # warm-up
        samples = []
        for _ in range(repeat):
            count, start = 0, time.perf_counter()
            while True:  # at least MIN_REPEAT_MS per repeat, as time_evaluator does
                run(inp)
                count += 1
                if time.perf_counter() - start >= MIN_REPEAT_MS / 1000:
                    break
            samples.append((time.perf_counter() - start) / count)
        return float(statistics.median(samples))

    return NetworkRow(name, "pytorch", 0.0, None, note=f"torch {torch.__version__}, {threads} threads"), timer
