"""MetaSchedule's JSON database read without TVM: its two files, checked line by line.

A database is ``database_workload.json`` (one line per workload: ``[structural hash,
base64 workload]``) and ``database_tuning_record.json`` (one line per measured candidate:
``[workload index, [trace, run_secs, target, args_info]]``), each possibly gzipped.
:func:`read_database` reads both; :func:`upgrade_trace` brings a trace written by an older
TVM to 0.27's instruction set; :func:`screen_records` drops what cannot become a pool
candidate (failed measurements, duplicates) and counts why.
"""

from __future__ import annotations

import copy
import gc
import gzip
import json
import os
import statistics
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DatabaseError

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
#: MetaSchedule's run time of a candidate that failed to build or run.
FAILED_SECS = 1e9
#: Instructions 0.27 renamed (TIR's Block became SBlock).
RENAMED = {"GetBlock": "GetSBlock"}
#: Why a record did not become a candidate, in the order they are checked.
REASONS = ("failed", "duplicate", "other-target", "trace-does-not-apply", "decisions-changed")


@dataclass(frozen=True)
class Workload:
    """One line of ``database_workload.json``."""

    index: int
    line: int
    shash: str
    encoded: str


@dataclass(frozen=True)
class Record:
    """One line of ``database_tuning_record.json``; ``run_secs`` is None for an error."""

    line: int
    workload: int
    trace: list
    run_secs: tuple[float, ...] | None
    target: dict
    args_info: list


@dataclass(frozen=True)
class Database:
    """The two files of one database, read and checked."""

    workload_file: Path
    record_file: Path
    workloads: tuple[Workload, ...]
    records: tuple[Record, ...]


@dataclass
class Screened:
    """One workload's records that may become candidates, and counts of those that may not."""

    kept: list[Record] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)


def database_files(paths: Sequence[str | os.PathLike]) -> tuple[Path, Path]:
    """The workload and record files named by a work directory or by the two files.

    A directory is searched for ``database_workload.json[.gz]`` and
    ``database_tuning_record.json[.gz]``, directly or one level down (MetaSchedule writes
    ``<work dir>/database_*.json``; ``tune_relax`` keeps them in the work directory too).

    Raises
    ------
    DatabaseError
        When the paths do not name exactly one of each file, or a file does not exist.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("database_*.json*")) or sorted(p.glob("*/database_*.json*"))
            if not found:
                raise DatabaseError(f"{p} holds no MetaSchedule database (database_workload.json and "
                                    f"database_tuning_record.json, gzipped or not)")
            files += found
        elif not p.exists():
            raise DatabaseError(f"database file {p} does not exist")
        else:
            files.append(p)
    kinds = {WORKLOAD_FILE: [], RECORD_FILE: []}
    for f in files:
        base = f.name[:-3] if f.name.endswith(".gz") else f.name
        if base not in kinds:
            raise DatabaseError(f"{f} is neither {WORKLOAD_FILE} nor {RECORD_FILE} (gzipped or not)")
        kinds[base].append(f)
    for base, found in kinds.items():
        if len(found) != 1:
            what = "no" if not found else f"{len(found)} ({', '.join(map(str, found))})"
            raise DatabaseError(f"expected one {base}[.gz], found {what}")
    return kinds[WORKLOAD_FILE][0], kinds[RECORD_FILE][0]


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each non-blank line of a plain or gzipped file.

    Raises
    ------
    DatabaseError
        Naming the file (and the line) for a file that cannot be read, a bad gzip stream
        or a line that is not JSON.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError) as err:  # also integers past Python's digit limit, deep nesting
                    raise DatabaseError(f"{path}, line {lineno}: not JSON ({type(err).__name__}: {err})") from None
                yield lineno, row
    except OSError as err:  # gzip.BadGzipFile is an OSError too
        raise DatabaseError(f"cannot read {path} (after line {lineno}): {err.strerror or err}") from None
    except (EOFError, zlib.error, UnicodeDecodeError) as err:
        raise DatabaseError(f"cannot read {path} (after line {lineno}): {err}") from None


def _run_secs(value: Any, where: str) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        raise DatabaseError(f"{where}: run_secs must be a list of seconds or null, not {value!r}")
    return tuple(float(v) for v in value)


def read_database(workload_file: str | os.PathLike, record_file: str | os.PathLike) -> Database:
    """Read and check both files of a MetaSchedule JSON database.

    Raises
    ------
    DatabaseError
        Naming the file and line for anything that is not a database line: a line of the
        wrong shape, a record naming a workload index the workload file lacks.
    """
    wfile, rfile = Path(workload_file), Path(record_file)
    enabled = gc.isenabled()
    gc.disable()  # millions of small lists: the collector's passes would take 10x the parsing
    try:
        return _read(wfile, rfile)
    finally:
        if enabled:
            gc.enable()


def _read(wfile: Path, rfile: Path) -> Database:
    workloads = []
    for lineno, row in json_lines(wfile):
        where = f"{wfile}, line {lineno}"
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], str)):
            raise DatabaseError(f"{where}: expected [structural hash, base64 workload]")
        workloads.append(Workload(len(workloads), lineno, str(row[0]), row[1]))
    records = []
    for lineno, row in json_lines(rfile):
        where = f"{rfile}, line {lineno}"
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int) and not isinstance(row[0], bool)
                and isinstance(row[1], list) and len(row[1]) >= 3):
            raise DatabaseError(f"{where}: expected [workload index, [trace, run_secs, target, args_info]]")
        index, (trace, run_secs, target, *rest) = row
        if not 0 <= index < len(workloads):
            raise DatabaseError(f"{where}: the record names workload {index}, but {wfile} has "
                                f"{len(workloads)} workloads (0..{len(workloads) - 1})")
        if not (isinstance(trace, list) and len(trace) == 2 and isinstance(trace[0], list)
                and isinstance(trace[1], list)):
            raise DatabaseError(f"{where}: the trace must be [instructions, decisions]")
        for n, inst in enumerate(trace[0]):
            if not (isinstance(inst, list) and len(inst) == 4 and isinstance(inst[0], str)
                    and all(isinstance(part, list) for part in inst[1:])):
                raise DatabaseError(f"{where}: instruction {n} of the trace is not [kind, inputs, attributes, "
                                    f"outputs]: {inst!r:.120}")
        if not isinstance(target, dict) or "kind" not in target:
            raise DatabaseError(f"{where}: the target must be a TVM target dict with a 'kind'")
        records.append(Record(lineno, index, trace, _run_secs(run_secs, where), target,
                              rest[0] if rest else []))
    return Database(wfile, rfile, tuple(workloads), tuple(records))


def upgrade_trace(trace: list) -> list:
    """A trace (JSON) written by an older TVM, in TVM 0.27's instruction set.

    ``GetBlock`` is ``GetSBlock`` (:data:`RENAMED`); ``Split`` takes
    ``[preserve_unit_iters, disable_predication]`` where it took ``[preserve_unit_iters]``
    (predication stays on, as it was). A 0.27 trace comes back unchanged.
    """
    insts, decisions = copy.deepcopy(trace)
    for inst in insts:
        inst[0] = RENAMED.get(inst[0], inst[0])
        if inst[0] == "Split" and len(inst[2]) == 1:
            inst[2] = [bool(inst[2][0]), False]
    return [insts, decisions]


def measured(run_secs: tuple[float, ...] | None) -> bool:
    """Whether a record's run times are a successful measurement (no error, none at 1e10)."""
    return bool(run_secs) and all(0 < s < FAILED_SECS for s in run_secs)


def median_secs(run_secs: Sequence[float]) -> float:
    """The candidate's time: the median of MetaSchedule's repeats."""
    return float(statistics.median(run_secs))


def screen_records(records: Sequence[Record]) -> Screened:
    """One workload's records less failed measurements and exact duplicates, upgraded.

    Records keep their order; of identical (upgraded) traces with identical decisions the
    first measured one is kept. The target of the first kept record is the workload's;
    records measured for another target are dropped (``other-target``).
    """
    out = Screened()
    seen: set[str] = set()
    target = None
    for rec in records:
        if not measured(rec.run_secs):
            out.dropped["failed"] += 1
            continue
        trace = upgrade_trace(rec.trace)
        key = json.dumps(trace, sort_keys=True)
        if key in seen:
            out.dropped["duplicate"] += 1
            continue
        if target is None:
            target = rec.target
        elif rec.target != target:
            out.dropped["other-target"] += 1
            continue
        seen.add(key)
        out.kept.append(Record(rec.line, rec.workload, trace, rec.run_secs, rec.target, rec.args_info))
    return out
