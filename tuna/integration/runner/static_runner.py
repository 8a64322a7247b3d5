"""A MetaSchedule runner (a ``PyRunner``) that predicts each candidate's run time and executes nothing."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerFuture, RunnerResult

from ... import profile, tiers
from ...errors import AnalysisError
from ..analysis import estimate_module, kernel_with_code, runner_tier
from ..workloads import as_machine, parse_tvmscript
from .prediction import Prediction

logger = logging.getLogger("tuna")

#: Name of the file :class:`tuna.integration.StaticBuilder` writes beside each artifact: the
#: scheduled TIR, which the runner analyses.
SIDECAR = "tuna-kernel.py"


@derived_object
class _Ready(PyRunnerFuture):
    """A runner future that is done from the start."""

    def __init__(self, result: RunnerResult) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return self._result


@derived_object
class StaticRunner(PyRunner):
    """A MetaSchedule runner that predicts each candidate's run time and executes nothing.

    It reads the scheduled TIR that :class:`~tuna.integration.StaticBuilder` leaves beside
    each artifact (:data:`SIDECAR`).
    With MetaSchedule's plain ``LocalBuilder`` there is no such file; the runner then
    analyses the machine code in the artifact instead (CPU targets).

    Parameters
    ----------
    target : str, dict, tvm.target.Target or Machine
        What to model, as for :class:`~tuna.integration.TunaCostModel`.
    machine : str, optional
        The preset to model when ``target`` names a CPU or GPU tuna has no file for.
    """

    def __init__(self, target: Any, machine: str | None = None) -> None:
        super().__init__()
        self.machine = as_machine(target, machine)
        self.ran = 0

    def predict_artifact(self, artifact_path: str) -> float:
        """Predicted seconds of the candidate built into ``artifact_path``.

        A candidate :class:`~tuna.integration.StaticBuilder` was given the
        :class:`~.prediction.Prediction` of gets that. CPU candidates get the full tier:
        the TIR beside the artifact analysed jointly with the object code inside it (no
        second compilation). GPU candidates get the GPU full tier on that TIR (CUDA C to
        PTX with nvcc), or the IR tier, with a warning, where no nvcc is installed.
        """
        from ...cpu import objcode

        prediction = Prediction.read(artifact_path)
        if prediction is not None:
            return prediction.seconds
        sidecar = Path(artifact_path).parent / SIDECAR
        if not sidecar.exists() and self.machine.kind == "gpu":
            raise AnalysisError(
                "a CUDA artifact holds no launch shapes tuna can read: build with tuna.StaticBuilder(), "
                "which leaves the scheduled TIR beside each artifact"
            )
        if not sidecar.exists():
            return objcode.estimate_artifact(artifact_path, self.machine).seconds
        mod = parse_tvmscript(sidecar.read_text(), f"the scheduled TIR {sidecar}")
        tier = runner_tier(self.machine)
        if self.machine.kind == "cpu":  # the artifact holds the object code: attach it, do not compile again
            kernel = kernel_with_code(mod, self.machine, objcode.artifact_objects(artifact_path))
            return tiers.analyze(kernel, self.machine, tier).seconds
        if tier == "ir" and not getattr(self, "_warned_nvcc", False):
            logger.warning("tuna: no nvcc, so StaticRunner predicts GPU candidates with the IR tier")
            self._warned_nvcc = True
        return estimate_module(mod, self.machine, tier).seconds

    def run(self, runner_inputs) -> list[RunnerFuture]:
        began = time.perf_counter()
        futures = []
        for inp in runner_inputs:
            try:
                result = RunnerResult([self.predict_artifact(str(inp.artifact_path))], None)
            except Exception as err:
                logger.warning("tuna: could not predict %s: %s", inp.artifact_path, err)
                result = RunnerResult(None, f"tuna StaticRunner: {type(err).__name__}: {err}")
            futures.append(_Ready(result))
            self.ran += 1
        profile.add(profile.RUNNER, time.perf_counter() - began, len(futures))
        return futures

