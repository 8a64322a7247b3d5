"""MetaSchedule's ``LocalBuilder``, leaving what :class:`~tuna.integration.StaticRunner` reads beside each
artifact, its time limit counted in CPU seconds."""

from __future__ import annotations

import functools
import math
import os
import resource
import tempfile
import time
from pathlib import Path

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, LocalBuilder, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

from ... import profile
from ...errors import AnalysisError
from ..analysis import refuse_slow_compile
from ..intrinsics import load_tensor_intrinsics
from ..lower import kernel_from_module
from ..runner import SIDECAR, Predictions, structural_key
from ..work_dir import WorkDirError, check_scratch

#: LocalBuilder counts its time limit in wall-clock seconds, so on a loaded machine the limit
#: would decide which candidates are predicted, and so which schedule wins. tuna's build
#: functions count CPU seconds instead (the build process's own RLIMIT_CPU), and
#: LocalBuilder's wall-clock limit, this many times longer, only stops a build that waits
#: rather than works.
WALL_BACKSTOP = 10

#: The scheduled TIR of the module each build process is building, for its export step, and
#: the process's CPU-time limit before the build.
_BUILT: dict[int, tuple[str, int]] = {}


def _tuna_build(cpu_seconds: float, mod: tvm.IRModule, target, params):
    """MetaSchedule build function (``functools.partial`` binds ``cpu_seconds``) that remembers
    the scheduled TIR for the export step.

    From here to the end of the export, this build process may use ``cpu_seconds`` more CPU
    time; past that the kernel ends it (SIGXCPU), and LocalBuilder reports the build failed.
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # no core file
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limit = math.ceil(used.ru_utime + used.ru_stime + cpu_seconds)
    resource.setrlimit(resource.RLIMIT_CPU, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    _BUILT[os.getpid()] = (mod.script(), soft)
    try:
        if target.kind.name == "llvm":
            _refuse_slow_compile(mod)
        return default_build(mod, target, params)
    except BaseException:
        _unlimit(_BUILT.pop(os.getpid()))
        raise


def _refuse_slow_compile(mod: tvm.IRModule) -> None:
    """Fail the build at once where LLVM would spend minutes on it
    (:func:`~tuna.integration.analysis.refuse_slow_compile`); a module tuna cannot read is built."""
    try:
        kernel = kernel_from_module(mod)
    except AnalysisError:
        return
    refuse_slow_compile(kernel)


def _unlimit(built: tuple[str, int]) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (built[1], resource.getrlimit(resource.RLIMIT_CPU)[1]))


def _tuna_export(rt_mod) -> str:
    """Export as MetaSchedule does (LLVM emits the object code here), write the scheduled TIR
    beside the artifact, then lift the CPU-time limit :func:`_tuna_build` set."""
    built = _BUILT.pop(os.getpid(), None)
    try:
        path = default_export(rt_mod)
        if built is not None:
            (Path(path).parent / SIDECAR).write_text(built[0])
        return path
    finally:
        if built is not None:
            _unlimit(built)


def _stopped(result: BuilderResult) -> bool:
    """A build LocalBuilder stopped (its wall-clock backstop) or whose process died (the CPU limit)."""
    msg = result.error_msg or ""
    return msg.startswith("LocalBuilder: Timeout") or "Subprocess terminated" in msg


@derived_object
class StaticBuilder(PyBuilder):
    """MetaSchedule's ``LocalBuilder`` that also leaves each candidate's scheduled TIR for the runner.

    The runner is :class:`~tuna.integration.StaticRunner`; the file is its ``SIDECAR``.

    Parameters
    ----------
    max_workers : int, optional
        Build processes (LocalBuilder's default: one per core).
    timeout_sec : float
        CPU seconds one build (compile and export) may take; LocalBuilder stops a build
        after :data:`WALL_BACKSTOP` times as many wall-clock seconds.
    known : Predictions, optional
        Predictions of candidates already analysed with the runner's tier (tuna's ES
        re-ranks its picks with the full tier, which compiles them): such a candidate is
        not compiled again; its artifact is a file holding the prediction, which
        :class:`~tuna.integration.StaticRunner` returns. Read at each build, so the
        caller may fill it as tuning goes.

    The ``LocalBuilder`` is made at the first candidate that must be compiled: making one
    starts a build process to check the build functions (4-5 s here, TVM's imports and
    tensor intrinsics), and with tuna's ES every candidate is known.

    ``dropped`` counts the builds stopped by a limit (their error message says which) or
    whose process died otherwise. Before each batch the temporary directory, where the artifacts go,
    is checked for space (:func:`~tuna.integration.work_dir.check_scratch`); a
    :class:`~tuna.integration.work_dir.WorkDirError` raised here is also kept in ``failures``
    (TVM hands it back to the caller as a RuntimeError).
    """

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 60.0,
                 known: Predictions | None = None) -> None:
        super().__init__()
        self.max_workers, self.timeout_sec = max_workers, timeout_sec
        self._local: LocalBuilder | None = None
        self.known = known if known is not None else Predictions()
        self.reused = 0
        self.dropped = 0
        self.failures: list[WorkDirError] = []

    @property
    def local(self) -> LocalBuilder:
        """The ``LocalBuilder`` that compiles candidates with no known prediction (made on first use)."""
        if self._local is None:
            self._local = LocalBuilder(max_workers=self.max_workers, timeout_sec=self.timeout_sec * WALL_BACKSTOP,
                                       f_build=functools.partial(_tuna_build, self.timeout_sec),
                                       f_export=_tuna_export, initializer=load_tensor_intrinsics)
        return self._local

    def build(self, build_inputs) -> list[BuilderResult]:
        began = time.perf_counter()
        try:
            check_scratch()
        except WorkDirError as err:
            self.failures.append(err)
            raise
        results: list[BuilderResult | None] = [None] * len(build_inputs)
        todo = []
        for i, inp in enumerate(build_inputs):
            prediction = self.known.get(structural_key(inp.mod)) if self.known else None
            if prediction is None:
                todo.append(i)
                continue
            # MetaSchedule removes the artifact's directory once the runner is done with it.
            try:
                path = prediction.write(tempfile.mkdtemp(prefix="tuna-known-"))
            except OSError as err:
                self.failures.append(WorkDirError(
                    f"cannot write a candidate's prediction under the temporary directory {tempfile.gettempdir()}: "
                    f"{err.strerror or err} (is the disk full?); the run stops here. Free some space or set "
                    "TMPDIR, then run the same command again: it resumes from the records the work directory holds"))
                raise self.failures[-1] from None
            results[i] = BuilderResult(str(path), None)
            self.reused += 1
        if todo:
            for i, res in zip(todo, self.local.build([build_inputs[i] for i in todo])):
                if _stopped(res):
                    self.dropped += 1
                    res = BuilderResult(None, f"the build was stopped: it ran past {self.timeout_sec:g} CPU seconds "
                                              f"(or {self.timeout_sec * WALL_BACKSTOP:g} wall-clock seconds), or "
                                              f"its process died ({res.error_msg.strip()})")
                results[i] = res
        profile.add(profile.BUILDER, time.perf_counter() - began, len(build_inputs))
        return results
