"""MetaSchedule's ``LocalBuilder``, leaving what :class:`~tuna.integration.StaticRunner` reads beside each artifact."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, LocalBuilder, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

from ... import profile
from ..intrinsics import load_tensor_intrinsics
from ..runner import SIDECAR, Predictions, structural_key

#: The scheduled TIR of the module each build process is building, for its export step.
_BUILT: dict[int, str] = {}


def _tuna_build(mod: tvm.IRModule, target, params):
    """MetaSchedule build function that remembers the scheduled TIR for the export step."""
    _BUILT[os.getpid()] = mod.script()
    return default_build(mod, target, params)


def _tuna_export(rt_mod) -> str:
    """Export as MetaSchedule does, then write the scheduled TIR beside the artifact."""
    path = default_export(rt_mod)
    script = _BUILT.pop(os.getpid(), None)
    if script is not None:
        (Path(path).parent / SIDECAR).write_text(script)
    return path


@derived_object
class StaticBuilder(PyBuilder):
    """MetaSchedule's ``LocalBuilder`` that also leaves each candidate's scheduled TIR for the runner.

    The runner is :class:`~tuna.integration.StaticRunner`; the file is its ``SIDECAR``.

    Parameters
    ----------
    max_workers : int, optional
        Build processes (LocalBuilder's default: one per core).
    timeout_sec : float
        Seconds one build may take.
    known : Predictions, optional
        Predictions of candidates already analysed with the runner's tier (tuna's ES
        re-ranks its picks with the full tier, which compiles them): such a candidate is
        not compiled again; its artifact is a file holding the prediction, which
        :class:`~tuna.integration.StaticRunner` returns. Read at each build, so the
        caller may fill it as tuning goes.

    The ``LocalBuilder`` is made at the first candidate that must be compiled: making one
    starts a build process to check the build functions (4-5 s here, TVM's imports and
    tensor intrinsics), and with tuna's ES every candidate is known.
    """

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 60.0,
                 known: Predictions | None = None) -> None:
        super().__init__()
        self.max_workers, self.timeout_sec = max_workers, timeout_sec
        self._local: LocalBuilder | None = None
        self.known = known if known is not None else Predictions()
        self.reused = 0

    @property
    def local(self) -> LocalBuilder:
        """The ``LocalBuilder`` that compiles candidates with no known prediction (made on first use)."""
        if self._local is None:
            self._local = LocalBuilder(max_workers=self.max_workers, timeout_sec=self.timeout_sec,
                                       f_build=_tuna_build, f_export=_tuna_export,
                                       initializer=load_tensor_intrinsics)
        return self._local

    def build(self, build_inputs) -> list[BuilderResult]:
        began = time.perf_counter()
        results: list[BuilderResult | None] = [None] * len(build_inputs)
        todo = []
        for i, inp in enumerate(build_inputs):
            prediction = self.known.get(structural_key(inp.mod)) if self.known else None
            if prediction is None:
                todo.append(i)
                continue
            # MetaSchedule removes the artifact's directory once the runner is done with it.
            path = prediction.write(tempfile.mkdtemp(prefix="tuna-known-"))
            results[i] = BuilderResult(str(path), None)
            self.reused += 1
        if todo:
            for i, res in zip(todo, self.local.build([build_inputs[i] for i in todo])):
                results[i] = res
        profile.add(profile.BUILDER, time.perf_counter() - began, len(build_inputs))
        return results
