"""Real measurement on this machine, for the benchmarks: the yardstick tuna is judged by.

- :func:`time_schedule`: compile a scheduled TIR module and time it the way the shipped pools
  were timed (``time_evaluator``, median of 5 repeats of at least 30 ms each);
- :func:`tune_measured`: MetaSchedule's default tuner (XGBModel + LocalBuilder/LocalRunner,
  real measurement), recording when each candidate was measured;
- :func:`collect_pool`: a measured pool in the format of ``tuna/data/pools``;
- :func:`compare_tuning`: tuna's offline tuning against measured tuning, at equal wall-clock
  budget and at full budget (``tuna bench tune``);
- :func:`network_bench`: whole networks (:mod:`.networks`) tuned per task with tuna and with
  MetaSchedule, untuned, and PyTorch eager (``tuna bench network``).

Nothing here prints: progress goes to a callback, bad input raises :class:`tuna.errors.TunaError`.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.target import codegen

from ..errors import TunaError, WorkloadError
from ..machine import Machine
from . import _machine, _plain, apply_trace, load_tensor_intrinsics, load_workload, parse_tvmscript, tvm_target

logger = logging.getLogger("tuna")

#: The pools' yardstick: median of this many ``time_evaluator`` repeats ...
REPEAT = 5
#: ... each running the kernel for at least this many milliseconds.
MIN_REPEAT_MS = 30
#: Rounds of :func:`time_interleaved`: schedules compared are timed in turn this many times.
ROUNDS = 3
#: Seconds MetaSchedule's LocalBuilder may take per candidate (its default, 30, is too
#: short on a loaded 2-core machine: every candidate fails).
BUILD_TIMEOUT = 120.0

Progress = Callable[[str], None] | None

# LLVM "features" that only steer tuning, not the instruction set a CPU must have.
_TUNING_PREFIXES = ("fast-", "slow-", "false-deps", "no-", "prefer-", "tuning", "idiom", "lea-", "macrofusion",
                    "branchfusion", "allow-light-256", "sbb-dep", "avoid-", "faster-", "ermsb")


class MeasureError(TunaError):
    """Nothing can be measured here for this target, or a measurement failed."""


def _say(progress: Progress, line: str) -> None:
    if progress is not None:
        progress(line)


# ---------------------------------------------------------------------------------------
# Can this machine run the target?
# ---------------------------------------------------------------------------------------


def unrunnable_reason(target: Any, machine: str | None = None) -> str | None:
    """Why kernels compiled for ``target`` cannot run on this machine, or None when they can.

    A CPU target runs here when its triple names this machine's architecture and its
    ``mcpu`` needs no instruction-set extension this CPU lacks (as LLVM sees both); a CUDA
    target needs a visible NVIDIA GPU.
    """
    mach = _machine(target, machine)
    spec = dict(mach.target)
    kind = spec.get("kind")
    if kind == "cuda":
        if not tvm.cuda(0).exist:
            return f"{mach.name} is an NVIDIA GPU target and this machine has no visible CUDA GPU"
        return None
    if kind != "llvm":
        return f"tuna measures only 'llvm' (CPU) and 'cuda' targets, not {kind!r}"
    host_triple = codegen.llvm_get_system_triple()
    triple = str(spec.get("mtriple", host_triple))
    if triple.split("-")[0] != host_triple.split("-")[0]:
        return f"{mach.name} is a cross target ({triple}); this machine is {host_triple}"
    mcpu = spec.get("mcpu")
    if mcpu:
        host_cpu = codegen.llvm_get_system_cpu()
        need = set(codegen.llvm_get_cpu_features(tvm_target(mach)))
        have = set(codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": host_cpu})))
        missing = sorted(f for f in need - have if not f.startswith(_TUNING_PREFIXES))
        if missing:
            return f"{mach.name} (mcpu {mcpu}) needs {', '.join(missing[:6])}, which this {host_cpu} CPU lacks"
    return None


def check_runnable(target: Any, machine: str | None = None) -> Machine:
    """The machine for ``target`` when its kernels run here.

    Raises
    ------
    MeasureError
        ``no measurements possible on this machine: <why>``.
    """
    mach = _machine(target, machine)
    reason = unrunnable_reason(mach)
    if reason:
        raise MeasureError(f"no measurements possible on this machine: {reason}")
    return mach


def _device(mach: Machine) -> tvm.runtime.Device:
    return tvm.cuda(0) if mach.kind == "gpu" else tvm.cpu(0)


# ---------------------------------------------------------------------------------------
# Timing one schedule
# ---------------------------------------------------------------------------------------


def _random_args(mod: tvm.IRModule, dev: tvm.runtime.Device, seed: int) -> list[tvm.runtime.Tensor]:
    rng = np.random.default_rng(seed)
    args = []
    for info in ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True):
        shape = [int(s) for s in info.shape]
        dtype = str(info.dtype)
        if "float" in dtype:
            data = rng.standard_normal(shape).astype(dtype)
        else:  # index tensors: small non-negative values stay in bounds for gathers
            data = rng.integers(0, 2, shape).astype(dtype)
        args.append(tvm.runtime.tensor(data, dev))
    return args


@dataclass
class Timer:
    """A compiled kernel with its arguments, ready to be timed again and again."""

    runtime: Any
    args: list
    device: Any

    def __call__(self, repeat: int = REPEAT, min_repeat_ms: int = MIN_REPEAT_MS) -> float:
        """Median seconds over ``repeat`` repeats of at least ``min_repeat_ms`` each."""
        rt = self.runtime
        evaluator = rt.time_evaluator(rt.entry_name, self.device, number=1, repeat=repeat,
                                      min_repeat_ms=min_repeat_ms)
        return float(statistics.median(evaluator(*self.args).results))


def compile_timer(mod: tvm.IRModule, target: Any, *, machine: str | None = None, seed: int = 0) -> Timer:
    """Compile a scheduled module for ``target`` and allocate random arguments on this machine.

    Raises
    ------
    MeasureError
        When the target cannot run here or the module does not compile.
    """
    mach = check_runnable(target, machine)
    try:
        executable = tvm.compile(mod, tvm_target(mach))
    except Exception as err:
        raise MeasureError(f"the schedule does not compile: {type(err).__name__}: {err}") from err
    dev = _device(mach)
    return Timer(executable.mod, _random_args(mod, dev, seed), dev)


def time_schedule(
    mod: tvm.IRModule,
    target: Any,
    *,
    machine: str | None = None,
    repeat: int = REPEAT,
    min_repeat_ms: int = MIN_REPEAT_MS,
    seed: int = 0,
) -> float:
    """Measured seconds per run of a scheduled TIR module on this machine.

    Parameters
    ----------
    mod : IRModule
        The scheduled module (e.g. ``sch.mod``).
    target : str, dict or Machine
        Preset name or TVM target; it must run here.
    machine : str, optional
        Preset to model when the target's mcpu has no data file.
    repeat, min_repeat_ms : int
        ``time_evaluator``'s repeats and the least milliseconds each; the median is returned.
        The defaults are those of the shipped pools.
    seed : int
        Seed of the random input data.

    Returns
    -------
    float
        Seconds per run (median of ``repeat``).

    Raises
    ------
    MeasureError
        When the target cannot run here, the module does not compile or the run fails.
    """
    (secs,) = time_interleaved([mod], target, machine=machine, rounds=1, repeat=repeat,
                               min_repeat_ms=min_repeat_ms, seed=seed)
    return secs


def time_interleaved(
    mods: Sequence[tvm.IRModule | None],
    target: Any,
    *,
    machine: str | None = None,
    rounds: int = ROUNDS,
    repeat: int = REPEAT,
    min_repeat_ms: int = MIN_REPEAT_MS,
    seed: int = 0,
) -> list[float | None]:
    """Seconds per run of several schedules that are to be compared, timed in turn.

    Each round times every schedule once (as :func:`time_schedule` does); each gets the
    median of its rounds. A change in the machine's load (these machines are shared)
    then falls on all schedules alike instead of on whichever was timed at the time.
    A None in ``mods`` gets None.

    Raises
    ------
    MeasureError
        As :func:`time_schedule`.
    """
    timers = [None if m is None else compile_timer(m, target, machine=machine, seed=seed) for m in mods]
    times: list[list[float]] = [[] for _ in timers]
    for _ in range(max(1, rounds)):
        for timer, out in zip(timers, times):
            if timer is None:
                continue
            try:
                out.append(timer(repeat, min_repeat_ms))
            except Exception as err:
                raise MeasureError(f"the schedule failed to run: {type(err).__name__}: {err}") from err
    return [float(statistics.median(t)) if t else None for t in times]


def _regions_module(regions: int, threads: int) -> tvm.IRModule:
    """A kernel of ``regions`` parallel loops over ``threads`` one-element iterations each."""
    loop = f"""
        for i{{k}} in T.parallel({threads}):
            with T.sblock("b{{k}}"):
                vi = T.axis.spatial({threads}, i{{k}})
                B[vi] = B[vi] + A[vi]"""
    text = f"""
@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer(({threads},), "float32"), B: T.Buffer(({threads},), "float32")):
        T.func_attr({{"tirx.noalias": True}}){"".join(loop.format(k=k) for k in range(regions))}
"""
    return parse_tvmscript(text, f"{regions} parallel regions")


def parallel_region_seconds(target: Any, *, machine: str | None = None, rounds: int = 5) -> tuple[float, list[float]]:
    """Measured cost of one parallel region in TVM's thread pool on this machine.

    Times kernels with 1, 2, 4 and 8 parallel loops of one trivial iteration per thread,
    in turn (:func:`time_interleaved`), and fits the time per extra loop; the work in them
    is negligible, so what is left is TVM's fork and join. This is the machine fact the
    linear model's ``launches`` term stands for (``parallel_region_us`` of a target file).

    Returns
    -------
    tuple
        Seconds per parallel region, and the seconds per run of the 1-, 2-, 4- and 8-loop kernels.
    """
    mach = _machine(target, machine)
    counts = (1, 2, 4, 8)
    times = time_interleaved([_regions_module(n, mach.cores) for n in counts], target, machine=machine, rounds=rounds)
    slope = float(np.polyfit(counts, times, 1)[0])
    return slope, [float(t) for t in times]


# ---------------------------------------------------------------------------------------
# MetaSchedule with real measurement
# ---------------------------------------------------------------------------------------


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
class _Recorder(ms.measure_callback.PyMeasureCallback):
    """Keeps each measured candidate with the wall time at which its batch finished."""

    def __init__(self, out: list[Measured], start: float, total: int, progress: Progress) -> None:
        super().__init__()
        self.out, self.start, self.total, self.progress = out, start, total, progress

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        now = time.perf_counter() - self.start
        for cand, built, res in zip(measure_candidates, builder_results, runner_results):
            secs = [float(s) for s in res.run_secs] if res.run_secs and not res.error_msg else []
            error = None if secs else str(built.error_msg or res.error_msg or "no run time")
            self.out.append(Measured(_plain(cand.sch.trace.as_json()), float(np.mean(secs)) if secs else None, now,
                                     int(task_id), error))
        best = min((c.tuner_secs for c in self.out if c.tuner_secs), default=math.inf)
        failed = sum(1 for c in self.out if c.error)
        _say(self.progress, f"  {len(self.out):>5}/{self.total} done ({failed} failed) | "
                            f"best {best * 1e6:10.1f} us | {now:6.1f} s")


def _quiet_ms() -> None:
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def _builder_runner(build_timeout: float) -> dict[str, Any]:
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
) -> MeasuredRun:
    """Tune with MetaSchedule's defaults and real measurement here (XGBModel, LocalRunner).

    Raises
    ------
    MeasureError
        When the target cannot run on this machine.
    """
    mach = check_runnable(target, machine)
    _quiet_ms()
    os.makedirs(work_dir, exist_ok=True)
    out: list[Measured] = []
    start = time.perf_counter()
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _Recorder(out, start, trials, progress)]
    database = ms.tune_tir(
        mod,
        tvm_target(mach),
        str(work_dir),
        max_trials_global=trials,
        num_trials_per_iter=num_trials_per_iter,
        measure_callbacks=callbacks,
        seed=seed,
        **_builder_runner(build_timeout),
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

    The result has the fields of ``tuna/data/pools/*.json`` (``workload``, ``target``,
    ``tune_seconds``, ``trials``, ``mod``, ``candidates`` with ``trace``, ``tuner_secs``,
    ``secs_a``, ``secs_b``); the two timings are two separate passes over all candidates,
    each the median of :data:`REPEAT` repeats of at least :data:`MIN_REPEAT_MS` ms.

    Raises
    ------
    WorkloadError
        For a workload that is not a built-in ``NAME:INDEX``.
    MeasureError
        When the target cannot run here.
    """
    from . import workload_names

    mod = load_workload(workload)  # unknown names, bad indices, unparsable files fail here
    name, _, index = str(workload).replace("-", ":").partition(":")
    if name.upper() not in workload_names():
        # A pool names its workload by the Ansor suite; a TVMScript file has no such name.
        raise WorkloadError(f"pools are collected for built-in workloads NAME:INDEX only, not {workload!r}")
    mach = check_runnable(target, machine)
    _say(progress, f"tuning {workload} with MetaSchedule (XGBModel, real measurement), {trials} trials")
    run = tune_measured(mod, mach, work_dir, trials, num_trials_per_iter=num_trials_per_iter, seed=seed,
                        progress=progress)
    ok = [c for c in run.candidates if c.tuner_secs]
    if not ok:
        first = run.candidates[0].error if run.candidates else "no candidate was proposed"
        raise MeasureError(f"{workload}: MetaSchedule measured none of its {len(run.candidates)} candidates; "
                           f"the first error: {first}")
    _say(progress, f"tuned in {run.tune_seconds:.1f} s; re-timing {len(ok)} measured candidates twice")
    timers: list[Timer | None] = []
    for i, cand in enumerate(run.candidates):
        try:
            timers.append(compile_timer(apply_trace(mod, cand.trace).mod, mach, seed=seed or 0)
                          if cand.tuner_secs else None)
        except TunaError as err:
            logger.warning("tuna: candidate %d of %s does not rebuild: %s", i, workload, err)
            timers.append(None)
    secs: dict[str, list[float | None]] = {}
    for label in ("secs_a", "secs_b"):
        values: list[float | None] = []
        for i, timer in enumerate(timers):
            try:
                values.append(timer() if timer is not None else None)
            except Exception as err:  # a kernel that fails to run is a failed candidate
                logger.warning("tuna: candidate %d of %s failed to run: %s", i, workload, err)
                values.append(None)
            if (i + 1) % 16 == 0 or i + 1 == len(timers):
                _say(progress, f"  {label}: {i + 1}/{len(timers)} timed")
        secs[label] = values
    idx = int(index or 0)
    return {
        "workload": [name.upper(), idx],
        "target": _plain(dict(mach.target)),
        "tune_seconds": run.tune_seconds,
        "trials": trials,
        "mod": mod.script(),
        "candidates": [
            {"trace": c.trace, "tuner_secs": c.tuner_secs, "secs_a": a, "secs_b": b}
            for c, a, b in zip(run.candidates, secs["secs_a"], secs["secs_b"])
        ],
    }


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

    Raises
    ------
    MeasureError
        When the target cannot run here.
    """
    from . import tune

    mach = check_runnable(target, machine)
    mod = load_workload(workload)
    root = Path(work_dir)
    rows, budgets, picks = [], [], []
    for search in searches:
        for run_seed in (seed, *more_seeds):
            method = f"tuna-{search}" + (f"@seed{run_seed}" if run_seed != seed else "")
            _say(progress, f"{workload}: tuna offline, {trials} candidates ({search} search, seed {run_seed})")
            result = tune(mod, mach, root / method, max_trials=trials, num_trials_per_iter=num_trials_per_iter,
                          seed=run_seed, progress=progress, search=search)
            rows.append({
                "method": method,
                "seed": run_seed,
                "tune_seconds": result.tune_seconds,
                "trials": result.trials,
                "predicted": result.predicted_seconds,
            })
            picks.append(result.schedule.mod)
            if run_seed == seed:
                budgets.append((f"metaschedule@tuna-{search}-time", result.tune_seconds))
    _say(progress, f"{workload}: MetaSchedule with measurement, {trials} trials")
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
    _say(progress, f"{workload}: timing the picks{what} here, in turn, {ROUNDS} rounds")
    for row, latency, pick in zip(rows, time_interleaved(picks, mach, seed=seed), picks):
        row["latency"] = latency
        row["schedule"] = None if pick is None else pick.script()
    return rows


# ---------------------------------------------------------------------------------------
# tuna bench network: whole models
# ---------------------------------------------------------------------------------------


def _fused(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Legalise and fuse as ``compile_relax`` does, so that the extracted tasks match its keys."""
    from tvm.relax import pipeline

    passes = [
        *pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def network_tasks(name: str, target: Any, machine: str | None = None) -> list[Any]:
    """MetaSchedule's tuning tasks of a network (:mod:`.networks`) for ``target``."""
    from . import networks

    tgt = tvm_target(_machine(target, machine))
    return ms.relax_integration.extract_tasks(_fused(networks.relax_module(name), tgt), tgt)


def _time_vm(executable: Any, name: str, dev: tvm.runtime.Device, repeat: int) -> float:
    from . import networks

    vm = relax.VirtualMachine(executable, dev)
    inp = tvm.runtime.tensor(networks.example_input(name), dev)
    evaluator = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=MIN_REPEAT_MS)
    return float(statistics.median(evaluator(inp).results))


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
    trials_per_task: int = 8,
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
    every task tuned offline with tuna's cost model and static runner, ``trials_per_task``
    candidates each; ``metaschedule``: the same tasks tuned with XGBModel and real
    measurement, the same trials; ``pytorch``: the same graph and weights in PyTorch eager
    mode with as many threads as the target's cores (a row with a note when PyTorch is not
    installed). Latency: ``VirtualMachine.time_evaluator``, median of ``repeat``. tuna's
    evolutionary search keeps ``population_size`` candidates (as :func:`tuna.tune`);
    MetaSchedule keeps its default.

    Raises
    ------
    MeasureError
        When the target cannot run here.
    """
    from . import StaticBuilder, StaticRunner, TunaCostModel, networks

    mach = check_runnable(target, machine)
    networks.network(name)  # unknown names fail before any work
    check_methods(methods)
    _quiet_ms()
    tgt = tvm_target(mach)
    dev = _device(mach)
    mod = networks.relax_module(name, seed)
    rows: list[NetworkRow] = []
    tasks = None
    for method in methods:
        if method == "untuned":
            _say(progress, f"{name}: building untuned (TVM's default pipeline)")
            with tgt:
                ex = tvm.compile(mod, tgt)
            rows.append(NetworkRow(name, method, 0.0, _time_vm(ex, name, dev, repeat)))
        elif method in ("tuna", "metaschedule"):
            if tasks is None:
                tasks = ms.relax_integration.extract_tasks(_fused(mod, tgt), tgt)
            n = len(tasks)
            _say(progress, f"{name}: tuning {n} tasks with {method}, {trials_per_task} trials each")
            if method == "tuna":
                # tuna's cost model is slower per candidate than XGBoost: the smaller population
                # of tuna.tune (256, not MetaSchedule's 2048) keeps its search time in proportion.
                kwargs = {"builder": StaticBuilder(timeout_sec=BUILD_TIMEOUT), "runner": StaticRunner(mach),
                          "cost_model": TunaCostModel(mach)}
                strategy = ms.search_strategy.EvolutionarySearch(population_size=population_size)
            else:
                kwargs, strategy = _builder_runner(BUILD_TIMEOUT), "evolutionary"
            contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                tasks, str(Path(work_dir) / name / method), strategy=strategy, seed=seed)
            done: list[Measured] = []
            start = time.perf_counter()
            callbacks = [*ms.measure_callback.MeasureCallback.create("default"),
                         _Recorder(done, start, n * trials_per_task, progress)]
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
            _say(progress, f"{name}: {method} tuned in {tune_seconds:.1f} s; compiling and timing")
            ex = ms.relax_integration.compile_relax(database, mod, tgt, params=None)
            rows.append(NetworkRow(name, method, tune_seconds, _time_vm(ex, name, dev, repeat), len(done),
                                   extra={"tasks": n}))
        else:
            rows.append(_torch_row(name, mach, repeat, seed, progress))
    return rows


def _torch_row(name: str, mach: Machine, repeat: int, seed: int, progress: Progress) -> NetworkRow:
    from . import networks

    if not networks.torch_available():
        return NetworkRow(name, "pytorch", None, None, note="skipped: PyTorch is not installed")
    import torch

    torch.set_num_threads(max(int(mach.target.get("num-cores", mach.cores)), 1))
    _say(progress, f"{name}: PyTorch eager, {torch.get_num_threads()} threads")
    run = networks.torch_callable(name, seed)
    inp = networks.example_input(name)
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
    return NetworkRow(name, "pytorch", 0.0, float(statistics.median(samples)),
                      note=f"torch {torch.__version__}, {torch.get_num_threads()} threads")
