"""MetaSchedule databases (any TVM release tuna reads) turned into tuna's measured pools.

The files, records, trace upgrades and old workloads are read without TVM
(:mod:`tuna.databases`); here each workload's TVMScript is parsed with TVM 0.27 and every
kept record's upgraded trace is applied to it: a trace that does not apply, or whose
sampling decisions come back changed, is dropped and counted. What survives becomes one
pool per workload in the format of :mod:`tuna.bench.pools`, with ``secs_a`` the median of
MetaSchedule's repeats and no second timing (``secs_b`` absent: the run times are one
measurement, repeated, not two independent ones).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..databases import metaschedule as msdb
from ..databases.node_graph import block_names, decode_workload, graph_version, module_script
from ..errors import AnalysisError, DatabaseError, WorkloadError
from .analysis import apply_trace
from .workloads import parse_tvmscript, plain_json


@dataclass
class WorkloadImport:
    """One workload's outcome: its pool (None if nothing converted) and the counts."""

    index: int
    name: str
    records: int
    converted: int = 0
    dropped: Counter = field(default_factory=Counter)
    pool: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        """The counts as a JSON-ready dict."""
        return {"index": self.index, "name": self.name, "records": self.records, "converted": self.converted,
                "dropped": {r: self.dropped[r] for r in msdb.REASONS if self.dropped[r]}}


def pool_name(graph: dict[str, Any], index: int) -> str:
    """A pool's name: the task's index and its main block.

    That is the last block not named ``T_*`` (TOPI's elementwise epilogues: ``conv2d_nchw``,
    ``conv2d_winograd``, ``pool_max``), else the last reduction (``T_matmul_NT``), else the
    last block.
    """
    named = block_names(graph)
    blocks = [name for name, _ in named if name != "root"]
    main = [name for name in blocks if not name.startswith("T_")]
    reductions = [name for name, reduces in named if reduces]
    return f"task{index:02d}-{(main or reductions or blocks or ['main'])[-1]}"


def check_trace(mod, trace: list) -> str | None:
    """None if ``trace`` applies to ``mod`` with its decisions unchanged, else the reason."""
    try:
        sch = apply_trace(mod, trace)
    except AnalysisError:
        return "trace-does-not-apply"
    applied = plain_json(sch.trace.as_json()[1])  # the decisions only: the whole trace is slow to convert
    return None if _decisions(applied) == _decisions(trace[1]) else "decisions-changed"


def _decisions(decisions: list) -> list:
    return sorted(([int(i), json.loads(json.dumps(d))] for i, d in decisions), key=lambda x: x[0])


def convert_records(script: str, where: str, records: Sequence[tuple[int, list, tuple[float, ...]]], mod=None):
    """Apply each (line, upgraded trace, run_secs) to the workload; the candidates and the drops.

    Runs in a worker process when :func:`import_database` is given ``jobs`` > 1, so it takes
    and returns plain values only (``mod``, the parsed ``script``, only in this process).
    """
    if mod is None:
        mod = parse_tvmscript(script, where)
    candidates, dropped = [], Counter()
    for line, trace, run_secs in records:
        reason = check_trace(mod, trace)
        if reason:
            dropped[reason] += 1
            continue
        candidates.append({"trace": trace, "secs_a": msdb.median_secs(run_secs), "run_secs": list(run_secs),
                           "line": line})
    return candidates, dropped


def import_database(
    paths: Sequence[str | os.PathLike],
    device: str,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> tuple[list[WorkloadImport], dict[str, Any]]:
    """Read a MetaSchedule database and convert each workload and its records to a pool.

    Parameters
    ----------
    paths : sequence of path
        A work directory holding the database, or its two files (gzipped or not).
    device : str
        The device the records were measured on (e.g. ``"NVIDIA A100"``), kept in each pool.
    progress : callable, optional
        Called with one line per workload.
    jobs : int
        Worker processes applying the traces (1: in this process).

    Returns
    -------
    list of WorkloadImport, dict
        Per workload its pool dict (or None) and counts; and a JSON-ready summary.

    Raises
    ------
    DatabaseError
        For a database that cannot be read, naming the file and line; a workload whose
        graph holds a node type tuna cannot read, naming the workload and the type key.
    """
    start = time.perf_counter()
    wfile, rfile = msdb.database_files(paths)
    db = msdb.read_database(wfile, rfile)
    gc.freeze()  # the records stay alive to the end: keep the collector from walking them
    try:
        out = _import(db, device, progress, jobs)
    finally:
        gc.unfreeze()
    summary = {
        "workload_file": str(wfile), "record_file": str(rfile), "device": device,
        "records": len(db.records), "converted": sum(r.converted for r in out),
        "dropped": {k: sum(r.dropped[k] for r in out) for k in msdb.REASONS},
        "seconds": time.perf_counter() - start,
        "workloads": [r.row() for r in out],
    }
    return out, summary


def _import(db: msdb.Database, device: str, progress: Callable[[str], None] | None, jobs: int) -> list[WorkloadImport]:
    by_workload: dict[int, list[msdb.Record]] = {w.index: [] for w in db.workloads}
    for rec in db.records:
        by_workload[rec.workload].append(rec)
    prepared = []
    for w in db.workloads:
        where = f"{db.workload_file}, line {w.line} (workload {w.index})"
        graph = decode_workload(w.encoded, where)
        script = module_script(graph, where)
        try:
            mod = parse_tvmscript(script, where)
        except WorkloadError as err:
            raise DatabaseError(f"{where}: tuna's TVMScript of the workload does not parse: {err}") from None
        result = WorkloadImport(w.index, pool_name(graph, w.index), len(by_workload[w.index]))
        screened = msdb.screen_records(by_workload[w.index])
        result.dropped.update(screened.dropped)
        work = [(r.line, r.trace, r.run_secs) for r in screened.kept]
        prepared.append((w, graph, script, where, screened, result, work, None if jobs > 1 else mod))
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) if jobs > 1 else None
    try:
        futures = [pool.submit(convert_records, script, where, work) if pool else None
                   for _, _, script, where, _, _, work, _ in prepared]
        out = []
        for (w, graph, script, where, screened, result, work, mod), fut in zip(prepared, futures):
            candidates, dropped = fut.result() if fut else convert_records(script, where, work, mod)
            result.dropped.update(dropped)
            result.converted = len(candidates)
            if candidates:
                result.pool = {
                    "workload": result.name,
                    "target": screened.kept[0].target,
                    "device": device,
                    "mod": script,
                    "second_timing": False,
                    "source": {"workload_file": str(db.workload_file), "record_file": str(db.record_file),
                               "line": w.line, "structural_hash": w.shash, "tvm_version": graph_version(graph)},
                    "candidates": candidates,
                }
            if progress:
                drops = ", ".join(f"{k} {v}" for k, v in sorted(result.dropped.items()))
                progress(f"{result.name}: {result.converted}/{result.records} converted"
                         + (f" ({drops})" if drops else ""))
            out.append(result)
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    return out
