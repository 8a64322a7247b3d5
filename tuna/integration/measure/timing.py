"""Timing on this machine, the yardstick tuna is judged by, and whether a target can run here.

- :func:`unrunnable_reason` / :func:`check_runnable`: can kernels for a target run here?
- :func:`time_schedule`: compile a scheduled TIR module and time it the way the shipped pools
  were timed (``time_evaluator``, median of 5 repeats of at least 30 ms each);
  :func:`time_interleaved`: several schedules timed in turn;
- :func:`parallel_region_seconds`: what one parallel region costs here.

Nothing here prints: progress goes to a callback, bad input raises :class:`tuna.errors.TunaError`.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.target import codegen

from ...errors import TunaError
from ...machine import Machine
from ..workloads import as_machine, parse_tvmscript, tvm_target

logger = logging.getLogger("tuna")

#: The pools' yardstick: median of this many ``time_evaluator`` repeats ...
REPEAT = 5
#: ... each running the kernel for at least this many milliseconds.
MIN_REPEAT_MS = 30
#: Rounds of :func:`time_interleaved`: schedules compared are timed in turn this many times.
ROUNDS = 3

Progress = Callable[[str], None] | None

# LLVM "features" that only steer tuning, not the instruction set a CPU must have.
_TUNING_PREFIXES = ("fast-", "slow-", "false-deps", "no-", "prefer-", "tuning", "idiom", "lea-", "macrofusion",
                    "branchfusion", "allow-light-256", "sbb-dep", "avoid-", "faster-", "ermsb")


# x86 extensions for the operating system, virtualisation and tracing (enqueue commands and
# direct stores to device memory, memory encryption and protection keys, processor trace, shadow
# stacks, user interrupts, wait, write-back and cache-line demotion instructions, code prefetch,
# AMD's CLZERO, MONITORX and RDPRU): hypervisors hide them from guests (the Granite Rapids guest
# of graniterapids.toml hides eight of Intel's, the Zen 5 guest of zen5.toml MOVDIRI, MOVDIR64B
# and PREFETCHI, as LLVM reads its CPUID), and LLVM emits them only for their intrinsics, never
# in a tensor program.
_SYSTEM_FEATURES = frozenset({"enqcmd", "pconfig", "pku", "ptwrite", "shstk", "uintr", "waitpkg", "wbnoinvd",
                              "clzero", "mwaitx", "rdpru", "sgx", "hreset", "invpcid", "cldemote",
                              "movdiri", "movdir64b", "prefetchi"})


class MeasureError(TunaError):
    """Nothing can be measured here for this target, or a measurement failed."""


def report(progress: Progress, line: str) -> None:
    """Hand ``line`` to the progress callback, if there is one."""
    if progress is not None:
        progress(line)


# ---------------------------------------------------------------------------------------
# Can this machine run the target?
# ---------------------------------------------------------------------------------------


def unrunnable_reason(target: Any, machine: str | None = None) -> str | None:
    """Why kernels compiled for ``target`` cannot run on this machine, or None when they can.

    A CPU target runs here when its triple names this machine's architecture and its
    ``mcpu`` needs no instruction-set extension that this CPU reports absent (as LLVM reads
    both; system extensions that hypervisors hide and tensor programs never use aside); a CUDA
    target needs a visible NVIDIA GPU.
    """
    mach = as_machine(target, machine)
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
        host = _host_features()
        if host:
            # What the CPU reports (CPUID on x86), not what LLVM's name for it implies: a guest
            # whose hypervisor shows another model number (Granite Rapids as a Rocket Lake) has
            # what it reports.
            missing = sorted(f for f in need if host.get(f) is False and f not in _SYSTEM_FEATURES)
        else:
            have = set(codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": host_cpu})))
            missing = sorted(f for f in need - have if not f.startswith(_TUNING_PREFIXES))
        if missing:
            return (f"{mach.name} (mcpu {mcpu}) needs {', '.join(missing[:6])}, which this CPU lacks "
                    f"(LLVM names it {host_cpu})")
    return None


def _host_features() -> dict[str, bool]:
    """The instruction-set features LLVM reads off this CPU, each on or off ({} where it reads none)."""
    get = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures", allow_missing=True)
    return {str(k): bool(v) for k, v in get().items()} if get is not None else {}


def check_runnable(target: Any, machine: str | None = None) -> Machine:
    """The machine for ``target`` when its kernels run here.

    Raises
    ------
    MeasureError
        ``no measurements possible on this machine: <why>``.
    """
    mach = as_machine(target, machine)
    reason = unrunnable_reason(mach)
    if reason:
        raise MeasureError(f"no measurements possible on this machine: {reason}")
    return mach


def device_of(mach: Machine) -> tvm.runtime.Device:
    """The TVM device kernels for ``mach`` run on here."""
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
    dev = device_of(mach)
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
    mach = as_machine(target, machine)
    counts = (1, 2, 4, 8)
    times = time_interleaved([_regions_module(n, mach.cores) for n in counts], target, machine=machine, rounds=rounds)
    slope = float(np.polyfit(counts, times, 1)[0])
    return slope, [float(t) for t in times]
