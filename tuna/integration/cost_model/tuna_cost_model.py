"""tuna's static cost model for MetaSchedule (a ``PyCostModel``): the IR tier's scores,
corrected by measured candidates when asked (:mod:`.correction`)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ... import profile
from ...errors import TunaError
from ...machine import resolve
from ..feature_extractor import FeatureExtractor
from ..intrinsics import load_tensor_intrinsics
from ..workloads import as_machine, plain_json
from .correction import MIN_MEASURED, Correction, scores

logger = logging.getLogger("tuna")


@derived_object
class TunaCostModel(PyCostModel):
    """tuna's static cost model for MetaSchedule.

    Parameters
    ----------
    target : str, dict, tvm.target.Target or Machine
        What to model: a preset name, a TVM target (dict or object) or a Machine.
    machine : str, optional
        The preset to model when ``target`` names a CPU or GPU tuna has no file for.
    calibrate : bool
        Learn from the run times ``update`` receives: once a workload has
        :data:`~.correction.MIN_MEASURED` measured candidates, its predictions are the
        static ones corrected by a small model of the static model's error on them
        (:class:`~.correction.Correction`, refitted at every update). Off by default:
        tuna's own :class:`~tuna.StaticRunner` reports predictions through ``update`` too,
        and a model must not learn from itself. Turn it on when a real runner measures.

    Notes
    -----
    ``predict`` returns minus the log of the predicted seconds (higher is better), one
    float64 per candidate. Analyses are cached by the structural hash of the scheduled
    module. A candidate that fails to lower or analyse gets the worst score and a logged
    warning; nothing is raised into MetaSchedule. ``update`` keeps every result (trace, run
    times, error) in ``records``; without ``calibrate``, or before a workload has enough
    measurements, the predictions are exactly the static model's.
    """

    def __init__(self, target: Any, machine: str | None = None, calibrate: bool = False) -> None:
        super().__init__()
        self.machine = as_machine(target, machine)
        self.calibrate = bool(calibrate)
        load_tensor_intrinsics()  # before tune_tir's TuneContext needs them
        self.records: list[dict[str, Any]] = []
        self.features = FeatureExtractor(self.machine, "ir")  # the IR tier's rows, cached
        # Per workload (structural hash of the task's module): measured rows, their log seconds
        # and the correction fitted on them.
        self.measured: dict[str, tuple[list[np.ndarray], list[float]]] = {}
        self._corrections: dict[str, Correction] = {}
        self.predicted = 0
        self.seconds = 0.0

    @property
    def failed(self) -> int:
        """Candidates that could not be analysed (they score worst)."""
        return self.features.failed

    def row(self, mod: tvm.IRModule) -> np.ndarray:
        """One scheduled module's feature row (cached; zeros when it cannot be analysed)."""
        return self.features.row(mod)

    def score_module(self, mod: tvm.IRModule, workload: str | None = None) -> float:
        """Score one scheduled module (worst score on failure), corrected by what the
        candidates of ``workload`` (:func:`workload_key`) measured, if calibrating."""
        return float(self._scores([self.row(mod)], workload)[0])

    def _scores(self, rows: list[np.ndarray], workload: str | None) -> np.ndarray:
        return scores(rows, self._corrections.get(workload) if workload is not None else None)

    def predict(self, context, candidates) -> np.ndarray:
        start = time.perf_counter()
        workload = workload_key(context.mod) if self._corrections else None
        scores = self._scores([self.row(c.sch.mod) for c in candidates], workload)
        spent = time.perf_counter() - start
        self.predicted += len(candidates)
        self.seconds += spent
        profile.add(profile.COST_MODEL, spent, len(candidates), spent)
        return scores

    def update(self, context, candidates, results) -> None:
        learned = []
        for cand, res in zip(candidates, results):
            secs = [float(s) for s in res.run_secs] if res.run_secs is not None else None
            try:
                trace = plain_json(cand.sch.trace.as_json())
            except Exception as err:  # never raise into MetaSchedule
                logger.warning("tuna: could not record a trace: %s", err)
                continue
            self.records.append({"trace": trace, "run_secs": secs, "error": res.error_msg})
            if self.calibrate and secs and res.error_msg is None and 0 < float(np.median(secs)) < 1e9:
                learned.append((cand.sch.mod, float(np.log(np.median(secs)))))
        if learned:
            try:
                self._learn(workload_key(context.mod), learned)
            except Exception as err:  # never raise into MetaSchedule: the static model stands
                logger.warning("tuna: could not learn from the measured candidates: %s", err)

    def _learn(self, workload: str, learned: list[tuple[tvm.IRModule, float]]) -> None:
        rows, log_secs = self.measured.setdefault(workload, ([], []))
        for mod, log_s in learned:
            row = self.row(mod)
            if row[-1] > 0:  # a candidate tuna cannot analyse teaches the correction nothing
                rows.append(row)
                log_secs.append(log_s)
        self._refit(workload)

    def _refit(self, workload: str) -> None:
        """Fit ``workload``'s correction to its measured candidates, once there are enough."""
        rows, log_secs = self.measured[workload]
        if len(rows) >= MIN_MEASURED:
            self._corrections[workload] = Correction(rows, log_secs)

    def save(self, path: str) -> None:
        state = {
            "format": "tuna-cost-model/1",
            "machine": self.machine.name,
            "target": dict(self.machine.target),
            "cores": self.machine.cores,
            "records": self.records,
            "calibrate": self.calibrate,
            "measured": {w: [[r.tolist() for r in rows], secs] for w, (rows, secs) in self.measured.items()},
        }
        Path(path).write_text(json.dumps(state, default=list))

    def load(self, path: str) -> None:
        try:
            state = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise TunaError(f"cannot load a tuna cost model from {path}: {err}") from None
        if state.get("format") != "tuna-cost-model/1":
            raise TunaError(f"{path} is not a saved tuna cost model")
        self.machine = resolve(state["target"], state["machine"])
        self.records = list(state.get("records", []))
        self.calibrate = bool(state.get("calibrate", False))
        self.features = FeatureExtractor(self.machine, "ir")
        self._corrections.clear()
        try:
            self.measured = {w: ([np.asarray(r, dtype="float64") for r in rows], [float(x) for x in secs])
                             for w, (rows, secs) in state.get("measured", {}).items()}
            for workload in self.measured:
                self._refit(workload)
        except (AttributeError, TypeError, ValueError) as err:
            raise TunaError(f"{path}: its measured candidates are damaged: {err}") from None


def workload_key(mod: tvm.IRModule) -> str:
    """The key of a tuning task's workload among calibrations: its structural hash, as text."""
    return f"{int(tvm_ffi.structural_hash(mod)) & (2**64 - 1):016x}"
