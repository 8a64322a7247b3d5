"""tuna's static cost model for MetaSchedule (a ``PyCostModel``): the IR tier's scores."""

from __future__ import annotations

import json
import logging
import threading
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
from ...estimate import WORST_SCORE
from ...machine import resolve
from ..analysis import estimate_module
from ..intrinsics import load_tensor_intrinsics
from ..workloads import as_machine, plain_json

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

    Notes
    -----
    ``predict`` returns minus the log of the predicted seconds (higher is better), one
    float64 per candidate. Results are cached by the structural hash of the scheduled
    module. A candidate that fails to lower or analyse gets the worst score and a logged
    warning; nothing is raised into MetaSchedule. ``update`` keeps measured results for
    later calibration; they are never required.
    """

    def __init__(self, target: Any, machine: str | None = None) -> None:
        super().__init__()
        self.machine = as_machine(target, machine)
        load_tensor_intrinsics()  # before tune_tir's TuneContext needs them
        self.records: list[dict[str, Any]] = []
        self._cache: dict[int, float] = {}
        self._lock = threading.Lock()
        self.predicted = 0
        self.failed = 0
        self.seconds = 0.0

    def score_module(self, mod: tvm.IRModule) -> float:
        """Score one scheduled module (cached; worst score on failure)."""
        key = tvm_ffi.structural_hash(mod)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            score = estimate_module(mod, self.machine).score
        except TunaError as err:
            self.failed += 1
            logger.warning("tuna: candidate could not be analysed, scoring it worst: %s", err)
            score = WORST_SCORE
        with self._lock:
            self._cache[key] = score
        return score

    def predict(self, context, candidates) -> np.ndarray:
        start = time.perf_counter()
        scores = np.array([self.score_module(c.sch.mod) for c in candidates], dtype="float64")
        spent = time.perf_counter() - start
        self.predicted += len(candidates)
        self.seconds += spent
        profile.add(profile.COST_MODEL, spent, len(candidates), spent)
        return scores

    def update(self, context, candidates, results) -> None:
        for cand, res in zip(candidates, results):
            secs = [float(s) for s in res.run_secs] if res.run_secs is not None else None
            try:
                trace = plain_json(cand.sch.trace.as_json())
            except Exception as err:  # never raise into MetaSchedule
                logger.warning("tuna: could not record a trace: %s", err)
                continue
            self.records.append({"trace": trace, "run_secs": secs, "error": res.error_msg})

    def save(self, path: str) -> None:
        state = {
            "format": "tuna-cost-model/1",
            "machine": self.machine.name,
            "target": dict(self.machine.target),
            "cores": self.machine.cores,
            "records": self.records,
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
        self._cache.clear()
