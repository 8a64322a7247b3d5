"""What an ES worker process (or Dask worker) runs: rebuild the workload once, then score traces.

Each trace is applied with MetaSchedule's postprocessors (:func:`~.design_space.build`) and
scored with tuna's IR or full tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tvm

from ... import tiers
from ...estimate import WORST_SCORE
from ...machine import Machine, resolve
from ..analysis import estimate_module
from ..intrinsics import new_tune_context
from ..workloads import plain_json, tvm_target
from .design_space import build


@dataclass
class WorkerState:
    """What a worker keeps between candidates."""

    mod: tvm.IRModule
    postprocs: Any
    machine: Machine
    tier: str


def worker_spec(mod: tvm.IRModule, postprocs: Sequence[Any], machine: Machine, tier: str = "ir",
                intrinsics: bool = True) -> dict[str, Any]:
    """What each worker needs once: the workload and postprocessors (TVM's JSON), the machine, the tier.

    The postprocessors travel as objects (the caller's own, not necessarily MetaSchedule's
    defaults); each worker initialises them with a TuneContext of its own. ``intrinsics``:
    whether the traces it will be sent may tensorize, so that the worker must register
    TVM's tensor intrinsics (False saves 2-3 s of each worker's start-up).
    """
    tiers.check_tier(tier)
    return {"mod": tvm.ir.save_json(mod), "postprocs": tvm.ir.save_json(list(postprocs)),
            "target": plain_json(dict(machine.target)), "machine": machine.name, "tier": tier,
            "intrinsics": bool(intrinsics)}


def worker_setup(spec: dict[str, Any]) -> WorkerState:
    """Runs once in each worker: rebuild the workload, the postprocessors and the machine."""
    mod = tvm.ir.load_json(spec["mod"])
    postprocs = list(tvm.ir.load_json(spec["postprocs"]))
    machine = resolve(spec["target"], spec["machine"])
    # The JSON holds the postprocessors but not what a TuneContext gives them (e.g.
    # VerifyGPUCode's thread and shared-memory limits): without it no GPU candidate builds.
    context = new_tune_context(spec.get("intrinsics", True), mod=mod, target=tvm_target(machine))
    for proc in postprocs:
        proc._initialize_with_tune_context(context)
    return WorkerState(mod, postprocs, machine, spec["tier"])


def worker_score(state: WorkerState, payload: Any) -> float:
    """Score one candidate (higher is better): :data:`~tuna.estimate.WORST_SCORE` if it does not build.

    ``payload`` is a trace (JSON), scored with the worker's tier, or ``{"trace": ...,
    "tier": ...}`` to score it with another tier (the full tier re-ranking IR picks).
    """
    if isinstance(payload, dict):
        trace_json, tier = payload["trace"], payload["tier"]
    else:
        trace_json, tier = payload, state.tier
    sch = build(state.mod, trace_json, state.postprocs)
    if sch is None:
        return WORST_SCORE
    return estimate_module(sch.mod, state.machine, tier).score
