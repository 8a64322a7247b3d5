"""Measured pools: tuna's file format for the yardstick, read and checked.

A pool (``tuna/data/pools/*.json``) holds, for one workload, the schedules MetaSchedule's
tuner proposed on the pools' machine and two later timings of each (``secs_a``,
``secs_b``). Its JSON fields: ``workload`` ([name, index into te_workload.CONFIGS], or a
plain name for a workload that is not an Ansor one), ``target`` (TVM target dict), ``mod``
(TVMScript), ``candidates`` ([{``trace``, ``tuner_secs``, ``secs_a``, ``secs_b``}]), and
optionally ``family`` (the operator family, :mod:`tuna.bench.families`; derived from the
workload where absent), ``machine`` (the measuring CPU as lscpu named it: ``model_name``,
``cpu_family``, ``cpu_model``, ``microcode``, with ``amx`` and ``l1i_kib`` where a masked
model number needs them), ``tune_seconds``, ``trials`` and
``second_timing`` (false for pools imported from
a MetaSchedule database, whose candidates carry one measurement, ``secs_a``, the median of
its repeats ``run_secs``, and no ``secs_b``). Other fields (``device``, ``source``) are
kept in the file and ignored here. Everything downstream (features, calibration,
evaluation) takes a :class:`Pool`; :func:`write_pool` writes one.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import TunaError
from .families import family_of


class PoolError(TunaError, ValueError):
    """A file or mapping that is not a measured pool in tuna's format."""


@dataclass(frozen=True, eq=False)
class Pool:
    """One measured pool; failed candidates (no finite ``secs_a``) are already left out.

    Attributes
    ----------
    name : str
        Workload name and index, e.g. ``"GMM-1"``.
    source : str
        The file it came from (``"<dict>"`` for a mapping).
    workload : tuple of (str, int or None)
        Ansor workload name and index into ``te_workload.CONFIGS``; the index is None for
        a workload named by its pool alone (an imported database's task).
    target : Mapping
        The TVM target dict the pool was measured for.
    mod : str
        TVMScript of the unscheduled workload.
    traces : tuple
        One MetaSchedule trace (JSON) per candidate.
    secs_a, secs_b : ndarray
        The two timings per candidate, seconds; ``secs_b`` is ``inf`` where missing.
    tuner_secs : ndarray
        The tuner's own timing per candidate (``nan`` where missing).
    tune_seconds : float or None
        Wall time of the MetaSchedule run that produced the pool.
    trials : int or None
        Trials of that run.
    failed : int
        Candidates left out because their ``secs_a`` is missing or not finite.
    second_timing : bool
        Whether ``secs_b`` is an independent second timing; False for imported databases
        (``secs_b`` is then all ``inf`` and the noise ceiling has nothing to say).
    family : str
        The workload's operator family (:func:`tuna.bench.families.family_of`).
    machine : Mapping
        The CPU or device the pool was measured on, as recorded (empty if not recorded).
    """

    name: str
    source: str
    workload: tuple[str, int | None]
    target: Mapping[str, Any]
    mod: str
    traces: tuple[Any, ...]
    secs_a: np.ndarray
    secs_b: np.ndarray
    tuner_secs: np.ndarray
    tune_seconds: float | None = None
    trials: int | None = None
    failed: int = 0
    second_timing: bool = True
    family: str = "other"
    machine: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __len__(self) -> int:
        return len(self.traces)


def _seconds(value: Any, what: str, where: str, missing: float) -> float:
    """A timing from a pool: ``missing`` for None/inf/nan, an error for a non-positive number."""
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PoolError(f"{where}: {what} is {value!r}, not a number of seconds")
    if not math.isfinite(value):
        return missing
    if value <= 0:
        raise PoolError(f"{where}: {what} is {value!r}; timings must be positive seconds")
    return float(value)


def _frozen(values: list[float]) -> np.ndarray:
    arr = np.asarray(values, dtype="float64")
    arr.setflags(write=False)
    return arr


def load_pool(source: str | os.PathLike | Mapping[str, Any]) -> Pool:
    """Read and check a measured pool.

    Parameters
    ----------
    source : path or Mapping
        A pool JSON file, or its already-parsed content.

    Returns
    -------
    Pool

    Raises
    ------
    PoolError
        For a file that cannot be read or is not a pool: a missing or malformed field, no
        candidates, a non-positive timing, or no candidate with a measured ``secs_a``. The
        message names the file and, where it applies, the candidate.
    """
    if isinstance(source, Mapping):
        data, src = source, "<dict>"
    else:
        src = str(source)
        data = read_json(src, "pool", PoolError)
    if not isinstance(data, Mapping):
        raise PoolError(f"pool {src} is not a pool: expected a JSON object, found {type(data).__name__}")
    missing = [k for k in ("workload", "target", "mod", "candidates") if k not in data]
    if missing:
        raise PoolError(f"pool {src} is not a pool: it lacks {', '.join(missing)}")
    workload = data["workload"]
    if isinstance(workload, str) and workload.strip():
        workload = (workload, None)
    elif (
        not isinstance(workload, (list, tuple))
        or len(workload) != 2
        or not isinstance(workload[0], str)
        or isinstance(workload[1], bool)
        or not isinstance(workload[1], int)
    ):
        raise PoolError(f'pool {src}: workload must be [name, index], e.g. ["GMM", 1], or a name, not {workload!r}')
    second_timing = data.get("second_timing", True)
    if not isinstance(second_timing, bool):
        raise PoolError(f"pool {src}: second_timing must be true or false, not {second_timing!r}")
    target = data["target"]
    if not isinstance(target, Mapping) or "kind" not in target:
        raise PoolError(f"pool {src}: target must be a TVM target dict with a 'kind', not {target!r}")
    if not isinstance(data["mod"], str) or not data["mod"].strip():
        raise PoolError(f"pool {src}: mod must be the workload's TVMScript text")
    cands = data["candidates"]
    if not isinstance(cands, list) or not cands:
        raise PoolError(f"pool {src} has no candidates")
    traces, secs_a, secs_b, tuner = [], [], [], []
    failed = 0
    for i, cand in enumerate(cands):
        where = f"pool {src}, candidate {i}"
        if not isinstance(cand, Mapping) or not isinstance(cand.get("trace"), list):
            raise PoolError(f"{where}: expected an object with a trace (JSON list)")
        a = _seconds(cand.get("secs_a"), "secs_a", where, math.inf)
        b = _seconds(cand.get("secs_b"), "secs_b", where, math.inf)
        if not second_timing and not math.isinf(b):
            raise PoolError(f"{where}: the pool says it has no second timing, but the candidate has secs_b")
        t = _seconds(cand.get("tuner_secs"), "tuner_secs", where, math.nan)
        if math.isinf(a):
            failed += 1
            continue
        traces.append(cand["trace"])
        secs_a.append(a)
        secs_b.append(b)
        tuner.append(t)
    if not traces:
        raise PoolError(f"pool {src}: none of its {len(cands)} candidates has a measured secs_a")
    tune_seconds = data.get("tune_seconds")
    trials = data.get("trials")
    family = data.get("family") or family_of(workload[0], data["mod"])
    if not isinstance(family, str):
        raise PoolError(f"pool {src}: family must be a name, not {family!r}")
    # An imported database names its device beside the pool, not in a machine record.
    machine = data.get("machine") or ({"device": data["device"]} if isinstance(data.get("device"), str) else {})
    if not isinstance(machine, Mapping):
        raise PoolError(f"pool {src}: machine must be an object (lscpu's fields), not {machine!r}")
    return Pool(
        name=workload[0] if workload[1] is None else f"{workload[0]}-{workload[1]}",
        source=src,
        workload=(workload[0], None if workload[1] is None else int(workload[1])),
        target=MappingProxyType(dict(target)),
        mod=data["mod"],
        traces=tuple(traces),
        secs_a=_frozen(secs_a),
        secs_b=_frozen(secs_b),
        tuner_secs=_frozen(tuner),
        tune_seconds=float(tune_seconds) if isinstance(tune_seconds, (int, float)) else None,
        trials=int(trials) if isinstance(trials, int) else None,
        failed=failed,
        second_timing=second_timing,
        family=family,
        machine=MappingProxyType(dict(machine)),
    )


def subsample(pool: Pool, n: int, seed: int = 0) -> Pool:
    """At most ``n`` of the pool's candidates, drawn at random (seeded per pool name), in
    their order in the pool; the pool itself when it has no more than ``n``.

    For analyses too slow to run on a whole pool (the GPU full tier compiles each candidate
    with nvcc): the same ``n`` and ``seed`` draw the same candidates in every run, so a
    features cache keyed on the traces (:func:`tuna.bench.features_key`) serves them again.
    """
    if n < 1:
        raise PoolError(f"a sample needs at least one candidate, not {n}")
    if len(pool) <= n:
        return pool
    keep = np.sort(np.random.default_rng([seed, zlib.crc32(pool.name.encode())]).permutation(len(pool))[:n])

    def pick(values: np.ndarray) -> np.ndarray:
        return _frozen(values[keep].tolist())

    return dataclasses.replace(pool, traces=tuple(pool.traces[i] for i in keep), secs_a=pick(pool.secs_a),
                               secs_b=pick(pool.secs_b), tuner_secs=pick(pool.tuner_secs))


def write_pool(path: str | os.PathLike, data: Mapping[str, Any]) -> Pool:
    """Check a pool (as :func:`load_pool` reads it) and write it as JSON.

    Returns
    -------
    Pool
        What the file now holds.

    Raises
    ------
    PoolError
        When ``data`` is not a pool (nothing is written), or the file cannot be written.
    """
    load_pool(data)  # checked before anything is written
    write_json(path, data, "pool", PoolError)
    return load_pool(path)


def read_json(path: str | os.PathLike, what: str, error: type[Exception]) -> Any:
    """The JSON of a file, gunzipped for a ``.gz`` name (pools, GPU bundles and times files).

    Raises
    ------
    error
        Naming ``what`` and the file, when it cannot be read or is not JSON.
    """
    src = str(path)
    try:
        raw = Path(src).read_bytes()
        return json.loads(gzip.decompress(raw) if src.endswith(".gz") else raw)
    except OSError as err:  # gzip's BadGzipFile is one
        raise error(f"cannot read {what} {src}: {getattr(err, 'strerror', None) or err}") from None
    except (ValueError, EOFError, zlib.error) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise error(f"{what} {src} is not JSON: {err}") from None
    except RecursionError:
        raise error(f"{what} {src} is not a {what}: its JSON nests too deeply") from None


def write_json(path: str | os.PathLike, data: Any, what: str, error: type[Exception]) -> None:
    """Write JSON, gzipped for a ``.gz`` name, with mtime 0: the same data gives the same
    bytes (a file in git does not change for nothing).

    Raises
    ------
    error
        Naming ``what`` and the file, when it cannot be written.
    """
    text = json.dumps(data).encode()
    try:
        Path(path).write_bytes(gzip.compress(text, mtime=0) if str(path).endswith(".gz") else text)
    except OSError as err:
        raise error(f"cannot write {what} {path}: {err.strerror or err}") from None


POOL_SUFFIXES = (".json", ".json.gz")


def pool_files(folder: str | os.PathLike) -> list[Path]:
    """The pool files (``*.json``, ``*.json.gz``) in a folder, sorted by name; an import's
    ``import-summary.json`` is not one."""
    return sorted(f for f in Path(folder).iterdir()
                  if f.name.endswith(POOL_SUFFIXES) and f.name != "import-summary.json")


def pool_stem(path: str | os.PathLike) -> str:
    """A pool file's name without ``.json`` or ``.json.gz``."""
    name = Path(path).name
    for suffix in sorted(POOL_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def shipped_pools() -> list[Path]:
    """The pool files shipped in ``tuna/data/pools``, sorted by name."""
    return pool_files(Path(__file__).parent.parent / "data" / "pools")


def shipped_pool(workload: str, folder: str | os.PathLike | None = None) -> Pool | None:
    """The shipped pool of ``workload`` (``"GMM:1"``, ``"GMM-1"``, a network task
    ``"resnet50/max_pool2d"``), or the pool of it in ``folder``; None if there is none."""
    name = workload.replace(":", "-").replace("/", "-").lower()
    for path in shipped_pools() if folder is None else pool_files(folder):
        if pool_stem(path).lower() == name:
            return load_pool(path)
    return None
