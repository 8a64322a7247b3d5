"""tuna's analysis terms as MetaSchedule features: :class:`FeatureExtractor`.

MetaSchedule's ``XGBModel`` learns from any ``FeatureExtractor``; its own (``PerStoreFeature``)
describes each buffer store of the scheduled TIR in 164 numbers. tuna's gives one row per
candidate: the terms of the linear model (cycles of compute, of each cache level's fills,
of memory; parallel regions, library calls, loads and stores; on GPUs issue, latency and
memory cycles, launches), each as ``log(1 + value)``, the tier's own prediction (log of
seconds) and whether the candidate could be analysed at all. The model then learns what the
static analysis gets wrong on the user's kernels rather than the whole cost from scratch.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.feature_extractor import PyFeatureExtractor

from ... import linear
from ...errors import TunaError
from ...machine import Machine
from ...tiers import check_tier
from ..analysis import estimate_module
from ..intrinsics import load_tensor_intrinsics
from ..workloads import as_machine

logger = logging.getLogger("tuna")


def feature_names(machine: Machine) -> tuple[str, ...]:
    """The columns of :func:`feature_row` for ``machine``'s kind, in order."""
    return (*(f"log1p_{t}" for t in linear.terms(machine)), "log_predicted_seconds", "analysed")


def feature_row(features: Mapping[str, float] | None, machine: Machine, tier: str,
                coefficients: linear.Coefficients | None = None) -> np.ndarray:
    """One candidate's row of :func:`feature_names` from its analysis ``features`` (None:
    the candidate could not be analysed; its row is zeros).

    The prediction uses ``coefficients``, by default ``tier``'s shipped ones for ``machine``.
    """
    names = linear.terms(machine)
    row = np.zeros(len(names) + 2, dtype="float64")
    if features is None:
        return row
    row[: len(names)] = [math.log1p(max(float(features.get(t, 0.0)), 0.0)) for t in names]
    row[-2] = math.log(linear.seconds(
        features, coefficients if coefficients is not None else linear.coefficients(machine, tier), machine))
    row[-1] = 1.0
    return row


@derived_object
class FeatureExtractor(PyFeatureExtractor):
    """tuna's analysis terms as features for MetaSchedule's learned cost models.

    ``ms.cost_model.XGBModel(extractor=tuna.FeatureExtractor(target))`` learns on them.

    Parameters
    ----------
    target : str, dict, tvm.target.Target or Machine
        What to model (as for :class:`tuna.TunaCostModel`).
    tier : str
        ``"ir"`` (the loop tree only, milliseconds a candidate) or ``"full"`` (compiles
        each candidate: the better ranking, about a second a candidate on CPUs).
    beside : ms.feature_extractor.FeatureExtractor, optional
        Another extractor (e.g. ``ms.feature_extractor.PerStoreFeature()``): each of its
        rows gets tuna's columns appended, so the model learns from both.
    machine : str, optional
        The preset to model when ``target`` names a CPU or GPU tuna has no file for.

    Notes
    -----
    One row per candidate (:func:`feature_names`); a candidate that cannot be lowered or
    analysed gets a row of zeros (its ``analysed`` column is 0) and a logged warning. Rows
    are cached by the scheduled module's structural hash: ``XGBModel`` extracts the same
    candidates for ``predict`` and again for ``update``.
    """

    def __init__(self, target: Any, tier: str = "ir", beside: Any = None, machine: str | None = None) -> None:
        super().__init__()
        self.machine = as_machine(target, machine)
        self.tier = check_tier(tier)
        self.beside = beside
        self.names = feature_names(self.machine)
        self._cache: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        self.failed = 0
        load_tensor_intrinsics()

    def row(self, mod: tvm.IRModule) -> np.ndarray:
        """tuna's row for one scheduled module (cached)."""
        key = int(tvm_ffi.structural_hash(mod))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            features = estimate_module(mod, self.machine, self.tier).features
        except TunaError as err:
            self.failed += 1
            logger.warning("tuna: candidate could not be analysed (its row is zeros, its score the worst): %s", err)
            features = None
        row = feature_row(features, self.machine, self.tier)
        with self._lock:
            self._cache[key] = row
        return row

    def remember(self, known: Iterable[tuple[tvm.IRModule, Mapping[str, float] | None]]) -> None:
        """Take the features of scheduled modules analysed already (``(module, features)``
        pairs; None: not analysable), so that they are not analysed again."""
        for mod, features in known:
            self._cache[int(tvm_ffi.structural_hash(mod))] = feature_row(features, self.machine, self.tier)

    def extract_from(self, context, candidates) -> list:
        rows = [self.row(c.sch.mod) for c in candidates]
        if self.beside is None:
            return [tvm.runtime.tensor(r[None, :].astype("float32")) for r in rows]
        others = self.beside.extract_from(context, candidates)
        out = []
        for row, other in zip(rows, others):
            theirs = other.numpy().astype("float32")
            theirs = theirs.reshape(-1, theirs.shape[-1])
            if not len(theirs):  # no rows of theirs: one of zeros, so that every row is as wide
                theirs = np.zeros((1, theirs.shape[1]), dtype="float32")
            mine = np.repeat(row[None, :].astype("float32"), len(theirs), axis=0)
            out.append(tvm.runtime.tensor(np.concatenate([theirs, mine], axis=1)))
        return out
