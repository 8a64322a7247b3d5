"""``tuna bench network``: whole networks (:mod:`tuna.integration.networks`) tuned per task and timed.

Tuned with tuna and with MetaSchedule (real measurement), untuned, and PyTorch eager.
Nothing here prints: progress goes to a callback, bad input raises :class:`tuna.errors.TunaError`.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
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

#: The largest difference from the first way's output, relative to that output's largest
#: magnitude, at which ``network_bench`` takes another way as computing the same network: float32
#: sums taken in another order (a tuned schedule's split reductions, PyTorch's kernels) differ
#: far less; a wrong schedule, far more.
OUTPUT_TOLERANCE = 1e-3


def output_error(out: np.ndarray, ref: np.ndarray) -> float:
    """The largest difference between ``out`` and ``ref``, relative to ``ref``'s largest magnitude
    (inf when the shapes differ or ``out`` is not finite)."""
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return math.inf
    return float(np.max(np.abs(out - ref))) / (float(np.max(np.abs(ref))) or 1.0)


def _vm_way(executable: Any, name: str, dev: tvm.runtime.Device) -> tuple[Callable[[int], float], np.ndarray]:
    """A function timing the executable (median seconds of ``repeat`` runs of ``main``,
    time_evaluator) and its output on the network's example input."""
    vm = relax.VirtualMachine(executable, dev)
    inp = tvm.runtime.tensor(networks.example_input(name), dev)

    def timer(repeat: int) -> float:
        evaluator = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=MIN_REPEAT_MS)
        return float(statistics.median(evaluator(inp).results))

    return timer, vm["main"](inp).numpy()


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
    are timed at the end, in turn, :data:`ROUNDS` rounds (the median of the rounds); before
    that, each way's output on the example input is compared with the first way's
    (``extra["output_error"]``; a note where it is beyond :data:`OUTPUT_TOLERANCE`). tuna's ES
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
    outputs: list[np.ndarray | None] = []  # per row: its output on the example input

    def _add(timer: Callable[[int], float] | None, out: np.ndarray | None) -> None:
        timers.append(timer)
        outputs.append(out)

    tasks = None
    for method in methods:
        if method == "untuned":
            report(progress, f"{name}: building untuned (TVM's default pipeline)")
            with tgt:
                ex = tvm.compile(mod, tgt)
            rows.append(NetworkRow(name, method, 0.0, None))
            _add(*_vm_way(ex, name, dev))
        elif method == "tuna":
            report(progress, f"{name}: tuning every task with tuna, {trials_per_task} candidates each")
            result = tune_network(mod, mach, Path(work_dir) / name / method, trials_per_task,
                                  population_size=population_size, seed=seed,
                                  progress=None if progress is None else lambda line: report(progress, line))
            report(progress, f"{name}: tuna tuned in {result.tune_seconds:.1f} s")
            rows.append(NetworkRow(name, method, result.tune_seconds, None, result.trials,
                                   extra={"tasks": len(result.tasks)}))
            _add(*_vm_way(result.executable, name, dev))
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
            _add(*_vm_way(ex, name, dev))
        else:
            row, timer, out = _torch_row(name, seed)
            rows.append(row)
            _add(timer, out)
    _check_outputs(rows, outputs, progress)
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


def _check_outputs(rows: list[NetworkRow], outputs: list[np.ndarray | None], progress: Progress) -> None:
    """Compare every way's output with the first way's (``extra["output_error"]``, see
    :func:`output_error`); a way beyond :data:`OUTPUT_TOLERANCE` says so in its note and in the
    progress, since its latency is then not that of the same network."""
    ref = next(((r, o) for r, o in zip(rows, outputs) if o is not None), None)
    if ref is None:
        return
    for row, out in zip(rows, outputs):
        if out is None or row is ref[0]:
            continue
        err = output_error(out, ref[1])
        row.extra["output_error"] = err
        if err > OUTPUT_TOLERANCE:
            msg = f"output differs from {ref[0].method}'s by {err:.2g} of its largest value"
            row.note = f"{row.note}; {msg}" if row.note else msg
            report(progress, f"{row.network}: {row.method}: {msg}")
            logger.warning("%s: %s: %s", row.network, row.method, msg)


def _torch_row(name: str, seed: int) -> tuple[NetworkRow, Callable[[int], float] | None, np.ndarray | None]:
    """The PyTorch eager row, its timer and its output on the example input (None, None when
    PyTorch is not installed)."""
    if not networks.torch_available():
        return NetworkRow(name, "pytorch", None, None, note="skipped: PyTorch is not installed"), None, None
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

    torch.set_num_threads(threads)
    row = NetworkRow(name, "pytorch", 0.0, None, note=f"torch {torch.__version__}, {threads} threads")
    return row, timer, run(inp)
