"""The TVM half of measuring GPU pools: candidates of a workload as CUDA kernels to time elsewhere.

:func:`bundle_workload` draws candidate schedules of one workload for a GPU preset and
lowers each to CUDA C with the launches TVM's host function would make
(:func:`tuna.integration.cuda.launch_plan`), in the bundle format of
:mod:`tuna.bench.gpu_collect`, which times them on the GPU machine with no TVM there.
Candidates come from MetaSchedule's design space with fresh random decisions (as its
evolutionary search draws its first population) and, optionally, from a tuna search:
every candidate that search handed to its runner, with tuna's prediction, so that the
timed pool also says how good tuna's own pick is.
"""

from __future__ import annotations

import json
import logging
import tempfile
from typing import Any

from ...errors import AnalysisError, TunaError
from ..analysis import apply_trace
from ..cuda import launch_plan, sample_candidates
from ..tuning import tune
from ..workloads import as_machine, load_workload, plain_json, pool_label, tvm_target
from .measured_tuning import quiet_metaschedule
from .timing import Progress, report

logger = logging.getLogger("tuna")


def _gpu(target: Any) -> Any:
    mach = as_machine(target)
    if mach.kind != "gpu":
        raise TunaError(f"GPU pools need a GPU preset, and {mach.name} is a {mach.kind}")
    return mach


def bundle_workload(
    workload: str,
    target: Any,
    count: int,
    *,
    seed: int = 1,
    tuna_trials: int = 0,
    progress: Progress = None,
) -> dict[str, Any]:
    """One workload of a GPU bundle: ``count`` random candidates, plus a tuna search's.

    Parameters
    ----------
    workload : str
        A built-in workload ``NAME:INDEX`` or a network's task ``NETWORK/TASK``.
    target : str or Machine
        A GPU preset (``"h100"``).
    count : int
        Random candidates wanted (fewer when the design space yields fewer valid ones).
    seed : int
        Seeds the random draws and the tuna search.
    tuna_trials : int
        When positive, also every candidate a tuna search of this many trials handed to its
        runner (``origin: tuna``, with ``predicted_secs``).

    Raises
    ------
    TunaError
        For a target that is not a GPU, or a workload that is not built in.
    """
    mach = _gpu(target)
    mod = load_workload(workload)
    stem, label, family = pool_label(workload, mod.script())
    tvm_tgt = tvm_target(mach)
    func = mod["main"]
    params = [{"name": str(p.name), "shape": [int(s) for s in p.shape], "dtype": str(p.dtype)} for p in func.params]
    traces: list[tuple[Any, str, float | None]] = []
    report(progress, f"{workload}: drawing {count} random candidates for {mach.name}")
    for sch in sample_candidates(mod, tvm_tgt, count, seed=seed):
        traces.append((plain_json(sch.trace.as_json()), "random", None))
    if tuna_trials > 0:
        report(progress, f"{workload}: a tuna search of {tuna_trials} trials")
        with tempfile.TemporaryDirectory(prefix="tuna-bundle-") as work:
            quiet_metaschedule()  # an earlier run's logging set-up turned MetaSchedule's console to INFO
            result = tune(mod, mach, work, tuna_trials, seed=seed)
            for rec in result.database.get_all_tuning_records():
                secs = [float(s) for s in (rec.run_secs or [])]
                if secs:
                    traces.append((plain_json(rec.trace.as_json()), "tuna", sum(secs) / len(secs)))
    seen: set[str] = set()
    cands, dropped = [], {}
    for trace, origin, predicted in traces:
        key = json.dumps(trace, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            # the module the pool's trace makes, exactly as ranking will rebuild it
            plan = launch_plan(apply_trace(mod, trace).mod, tvm_tgt)
        except AnalysisError as err:
            reason = str(err).split(":")[0][:80]
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        cand = {"trace": trace, "origin": origin, **plan}
        if predicted is not None:
            cand["predicted_secs"] = predicted
        cands.append(cand)
    report(progress, f"{workload}: {len(cands)} candidates"
           + (f" ({', '.join(f'{n} dropped: {r}' for r, n in dropped.items())})" if dropped else ""))
    return {"name": stem, "workload": label, "family": family, "mod": mod.script(), "params": params,
            "candidates": cands, "dropped": dropped}


def bundle_header(target: Any) -> dict[str, Any]:
    """The bundle's fields other than its workloads."""
    import tvm

    from ...bench.gpu_collect import BUNDLE_FORMAT

    mach = _gpu(target)
    return {"format": BUNDLE_FORMAT, "preset": mach.name, "target": plain_json(dict(mach.target)),
            "arch": str(mach.target["arch"]), "tvm": tvm.__version__}
