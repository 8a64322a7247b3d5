"""Measured GPU pools without TVM on the GPU machine: a bundle of CUDA kernels, timed with CuPy.

A pool needs candidates timed on the GPU, but the TVM that tuna installs has no CUDA
runtime, and the GPU machine need not have TVM at all. So the work is split in three:

1. ``tuna bench gpu-bundle`` (any machine with TVM): candidate schedules of each workload,
   each lowered by TVM to CUDA C with the launches its host function makes
   (:func:`tuna.integration.cuda.launch_plan`), written as one bundle file.
2. ``tuna bench gpu-time`` (the GPU machine: nvcc and CuPy, no TVM):
   :func:`time_bundle` compiles every candidate with nvcc and times its launches with
   CUDA events, in two separate passes over all candidates (``secs_a`` and ``secs_b``, as
   the CPU pools are timed).
3. ``tuna bench gpu-pools`` (anywhere): :func:`pools_from_bundle` joins the two files into
   pools in tuna's format (:mod:`tuna.bench.pools`), naming the GPU they were timed on.

Bundle (JSON, gzipped for a ``.gz`` name): ``format`` (:data:`BUNDLE_FORMAT`), ``preset``,
``target`` (TVM target dict), ``arch`` (``sm_90``), ``tvm`` (version), and ``workloads``:
each ``name`` (file stem), ``workload`` (the pool's label), ``family``, ``mod``
(TVMScript), ``params`` (the function's buffers in order: ``name``, ``shape``, ``dtype``)
and ``candidates``: each ``trace``, ``origin`` (``random``: drawn from the design space;
``tuna``: handed over by a tuna search), optionally ``predicted_secs``, and the launch
plan's ``source``, ``kernels`` and ``workspace``.

Times (JSON): ``format`` (:data:`TIMES_FORMAT`), ``device`` (what the GPU and its driver
report), ``protocol``, and ``workloads``: name -> one ``[secs_a, secs_b, error]`` per
candidate (seconds or null; error null or a message).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import TunaError
from . import pools

BUNDLE_FORMAT = "tuna-gpu-bundle-1"
TIMES_FORMAT = "tuna-gpu-times-1"

#: Each timing is the median of this many repeats ...
REPEATS = 5
#: ... each of enough back-to-back launches to last this long.
MIN_REPEAT_MS = 1.0
#: A candidate whose one launch takes longer than this is timed by single launches.
SLOW_SECONDS = 0.05

Progress = Callable[[str], None] | None


class BundleError(TunaError, ValueError):
    """A file that is not a GPU bundle or times file in tuna's format."""


def write_json(path: str | os.PathLike, data: Mapping[str, Any]) -> None:
    """Write a bundle or times file (JSON, gzipped for a ``.gz`` name)."""
    pools.write_json(path, data, "file", BundleError)


def _read_json(path: str | os.PathLike, what: str) -> Any:
    return pools.read_json(path, what, BundleError)


def _need(obj: Any, keys: Sequence[str], where: str) -> None:
    if not isinstance(obj, Mapping):
        raise BundleError(f"{where}: expected an object, found {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise BundleError(f"{where}: it lacks {', '.join(missing)}")


def check_bundle(data: Any, src: str = "<dict>") -> dict[str, Any]:
    """``data`` if it is a bundle; BundleError naming the file and the candidate otherwise."""
    _need(data, ("format", "target", "arch", "workloads"), f"bundle {src}")
    if data["format"] != BUNDLE_FORMAT:
        raise BundleError(f"bundle {src}: format {data['format']!r}, expected {BUNDLE_FORMAT!r}")
    if not isinstance(data["workloads"], list) or not data["workloads"]:
        raise BundleError(f"bundle {src} holds no workload")
    for w in data["workloads"]:
        _need(w, ("name", "workload", "mod", "params", "candidates"), f"bundle {src}, a workload")
        for p in w["params"]:
            _need(p, ("name", "shape", "dtype"), f"bundle {src}, {w['name']}, a parameter")
        for i, c in enumerate(w["candidates"]):
            where = f"bundle {src}, {w['name']}, candidate {i}"
            _need(c, ("trace", "source", "kernels", "workspace"), where)
            if not c["kernels"]:
                raise BundleError(f"{where}: no kernel to launch")
            known = {p["name"] for p in w["params"]} | set(c["workspace"])
            for k in c["kernels"]:
                _need(k, ("name", "grid", "block", "shared_dyn", "args"), f"{where}, a kernel")
                unknown = [a for a in k["args"] if a not in known]
                if unknown:
                    raise BundleError(f"{where}: kernel {k['name']} takes {', '.join(unknown)}, neither a "
                                      "parameter nor a workspace")
    return data


def read_bundle(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a bundle (``tuna bench gpu-bundle``)."""
    return check_bundle(_read_json(path, "bundle"), str(path))


def read_times(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a times file (``tuna bench gpu-time``)."""
    data = _read_json(path, "times file")
    _need(data, ("format", "device", "workloads"), f"times file {path}")
    if data["format"] != TIMES_FORMAT:
        raise BundleError(f"times file {path}: format {data['format']!r}, expected {TIMES_FORMAT!r}")
    return data


# ---------------------------------------------------------------------------------------
# On the GPU machine
# ---------------------------------------------------------------------------------------


def _cupy():
    try:
        import cupy
    except ImportError:
        raise TunaError("timing a GPU bundle needs CuPy (pip install cupy-cuda12x or cupy-cuda13x, to match "
                        "the CUDA driver) and a CUDA GPU") from None
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as err:
        raise TunaError(f"CuPy finds no usable CUDA GPU here: {err}") from None
    return cupy


def device_record(cupy: Any, nvcc_path: str) -> dict[str, Any]:
    """What the GPU, its driver and nvcc say about themselves (recorded with every timing)."""
    from ..search.processes import run_tool

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    version = run_tool([nvcc_path, "--version"], timeout=60).stdout.strip().splitlines()
    return {
        "device": name,
        "compute_capability": f"sm_{dev.compute_capability}",
        "multiprocessors": int(props["multiProcessorCount"]),
        "memory_bytes": int(props["totalGlobalMem"]),
        "driver": int(cupy.cuda.runtime.driverGetVersion()),
        "runtime": int(cupy.cuda.runtime.runtimeGetVersion()),
        "nvcc": version[-1] if version else "",
    }


def _compile(nvcc_path: str, arch: str, source: str, folder: str, stem: str) -> str | None:
    """nvcc's cubin of one candidate (its path), or None with the error written beside it."""
    from ..search.processes import run_tool

    cu = Path(folder) / f"{stem}.cu"
    cu.write_text(source)
    out = Path(folder) / f"{stem}.cubin"
    res = run_tool([nvcc_path, "--cubin", "-O3", f"-arch={arch}", "-o", str(out), str(cu)], timeout=300)
    if res.returncode != 0 or not out.exists():
        (Path(folder) / f"{stem}.err").write_text(res.stderr[-2000:])
        return None
    return str(out)


def _timer(cupy: Any, launch: Callable[[], None], repeats: int, min_seconds: float) -> float:
    """Seconds one call of ``launch`` takes on the GPU: CUDA events around back-to-back calls."""
    start, end = cupy.cuda.Event(), cupy.cuda.Event()

    def timed(number: int) -> float:
        start.record()
        for _ in range(number):
            launch()
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3 / number

    launch()  # the first launch loads the module; not timed
    cupy.cuda.Device().synchronize()
    once = timed(1)
    if once > SLOW_SECONDS:
        return statistics.median([once] + [timed(1) for _ in range(2)])
    number = max(1, math.ceil(min_seconds / max(once, 1e-7)))
    return statistics.median(timed(number) for _ in range(repeats))


def _fill(cupy: Any, shape: Sequence[int], dtype: str, rng: Any) -> Any:
    """A device array of random values in [-1, 1) (zeros for integers: indices stay in range)."""
    if "float" in dtype:
        return rng.uniform(-1.0, 1.0, size=tuple(shape)).astype(dtype)
    return cupy.zeros(tuple(shape), dtype=dtype)


def time_bundle(
    bundle: Mapping[str, Any],
    *,
    jobs: int | None = None,
    repeats: int = REPEATS,
    min_repeat_ms: float = MIN_REPEAT_MS,
    progress: Progress = None,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Compile and time every candidate of a bundle on this machine's GPU.

    Parameters
    ----------
    bundle : Mapping
        A checked bundle (:func:`read_bundle`).
    jobs : int, optional
        nvcc processes at a time (default: the CPU count).
    repeats, min_repeat_ms
        Each timing is the median of ``repeats`` runs of back-to-back launches lasting at
        least ``min_repeat_ms``.
    progress : callable, optional
        Called with a line of text per step.
    partial : callable, optional
        Called with the times so far after each workload of each pass (to save them).

    Returns
    -------
    dict
        The times file's content (module docstring).

    Raises
    ------
    TunaError
        Without CuPy, a GPU or nvcc, or when the GPU is not of the bundle's architecture.
    """
    from ..gpu.nvcc import require_nvcc

    def say(line: str) -> None:
        if progress:
            progress(line)

    cupy = _cupy()
    nvcc_path = require_nvcc()
    device = device_record(cupy, nvcc_path)
    if device["compute_capability"] != bundle["arch"]:
        raise TunaError(f"the bundle is for {bundle['arch']}, but this GPU ({device['device']}) is "
                        f"{device['compute_capability']}: its timings would not be {bundle['arch']} timings")
    out: dict[str, Any] = {
        "format": TIMES_FORMAT,
        "device": device,
        "protocol": {"repeats": repeats, "min_repeat_ms": min_repeat_ms, "slow_seconds": SLOW_SECONDS,
                     "passes": 2, "nvcc_flags": ["--cubin", "-O3", f"-arch={bundle['arch']}"]},
        "workloads": {w["name"]: [[None, None, None] for _ in w["candidates"]] for w in bundle["workloads"]},
    }
    with tempfile.TemporaryDirectory(prefix="tuna-gpu-") as folder:
        work = [(wi, ci, c) for wi, w in enumerate(bundle["workloads"]) for ci, c in enumerate(w["candidates"])]
        say(f"compiling {len(work)} candidates with nvcc ({bundle['arch']}), {jobs or os.cpu_count()} at a time")
        begin = time.perf_counter()
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count()) as pool:
            cubins = list(pool.map(lambda t: _compile(nvcc_path, bundle["arch"], t[2]["source"], folder,
                                                      f"w{t[0]}c{t[1]}"), work))
        say(f"compiled in {time.perf_counter() - begin:.0f} s; {sum(c is None for c in cubins)} failed")
        modules: dict[tuple[int, int], Any] = {}
        for (wi, ci, _), cubin in zip(work, cubins):
            name = bundle["workloads"][wi]["name"]
            if cubin is None:
                err = (Path(folder) / f"w{wi}c{ci}.err").read_text().strip().splitlines()
                out["workloads"][name][ci][2] = "nvcc failed: " + (err[-1] if err else "no message")
                continue
            modules[(wi, ci)] = cupy.RawModule(path=cubin)
        rng = cupy.random.RandomState(0)
        for column in (0, 1):
            begin = time.perf_counter()
            for wi, w in enumerate(bundle["workloads"]):
                params = {p["name"]: _fill(cupy, p["shape"], p["dtype"], rng) for p in w["params"]}
                times = out["workloads"][w["name"]]
                for ci, cand in enumerate(w["candidates"]):
                    if (wi, ci) not in modules or times[ci][2] is not None:
                        continue
                    try:
                        arrays = dict(params)
                        arrays.update({n: cupy.zeros(s["elems"], dtype=s["dtype"])
                                       for n, s in cand["workspace"].items()})
                        calls = [(modules[(wi, ci)].get_function(k["name"]), tuple(k["grid"]), tuple(k["block"]),
                                  tuple(arrays[a] for a in k["args"]), int(k["shared_dyn"]))
                                 for k in cand["kernels"]]

                        def launch(calls=calls) -> None:
                            for fn, grid, block, args, shared in calls:
                                fn(grid, block, args, shared_mem=shared)

                        times[ci][column] = _timer(cupy, launch, repeats, min_repeat_ms / 1e3)
                    except Exception as err:  # one candidate's failure is recorded, not fatal
                        times[ci][2] = f"{type(err).__name__}: {err}"[:300]
                        if "illegal" in str(err).lower() or "launch failed" in str(err).lower():
                            raise TunaError(f"{w['name']} candidate {ci} broke the CUDA context ({err}); the "
                                            "times so far are kept") from None
                done = [t[column] for t in times if t[column] is not None]
                say(f"pass {'ab'[column]}: {w['name']}: {len(done)} of {len(times)} timed"
                    + (f", best {min(done) * 1e6:,.1f} us" if done else ""))
                if partial:
                    partial(out)
            say(f"pass {'ab'[column]} took {time.perf_counter() - begin:.0f} s")
    return out


# ---------------------------------------------------------------------------------------
# Back home: pools
# ---------------------------------------------------------------------------------------


def pools_from_bundle(bundle: Mapping[str, Any], times: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One pool (tuna's format) per workload of the bundle: its candidates with their times.

    Candidates that failed to compile or run keep ``secs_a`` null (a pool counts them as
    failed). The pool's ``machine`` is the times file's device record.

    Returns
    -------
    list of (str, dict)
        File stem and pool, per workload with times.

    Raises
    ------
    BundleError
        When the times do not belong to the bundle (a workload or a candidate count differs).
    """
    out = []
    for w in bundle["workloads"]:
        rows = times["workloads"].get(w["name"])
        if rows is None:
            continue
        if len(rows) != len(w["candidates"]):
            raise BundleError(f"{w['name']}: the times file has {len(rows)} candidates, the bundle "
                              f"{len(w['candidates'])}: not the times of this bundle")
        cands = []
        for cand, (a, b, err) in zip(w["candidates"], rows):
            row = {"trace": cand["trace"], "tuner_secs": None, "secs_a": a, "secs_b": b,
                   "origin": cand.get("origin", "random")}
            if cand.get("predicted_secs") is not None:
                row["predicted_secs"] = cand["predicted_secs"]
            if err:
                row["error"] = err
            cands.append(row)
        out.append((w["name"], {
            "workload": w["workload"],
            "family": w.get("family"),
            "target": bundle["target"],
            "mod": w["mod"],
            "machine": dict(times["device"]),
            "protocol": dict(times.get("protocol", {})),
            "candidates": cands,
        }))
    return out


def pick_summary(pool: Mapping[str, Any]) -> dict[str, Any]:
    """How good the tuna search's pick in a GPU pool is, timed with everything else in it.

    The pick is the ``origin: tuna`` candidate with the least ``predicted_secs``. Returns
    ``timed`` (candidates timed), ``best`` (the pool's fastest, seconds), ``random_best``
    (the fastest random candidate), ``pick`` (the pick's seconds, None if it did not run)
    and ``best_to_pick`` (1: tuna picked the pool's fastest), beside the shortlist figures
    of :func:`tuna.bench.report.shortlist_summary` over the search's candidates.
    """
    from .report import shortlist_summary

    timed = [c for c in pool["candidates"] if c.get("secs_a")]
    if not timed:
        return {"timed": 0}
    best = min(c["secs_a"] for c in timed)
    random_times = [c["secs_a"] for c in timed if c.get("origin") == "random"]
    searched = [c for c in pool["candidates"] if c.get("origin") == "tuna" and c.get("predicted_secs")]
    out: dict[str, Any] = {"timed": len(timed), "best": best, "random_best": min(random_times, default=None)}
    if searched:
        pick = min(searched, key=lambda c: c["predicted_secs"])
        out["pick"] = pick.get("secs_a")
        out["best_to_pick"] = best / pick["secs_a"] if pick.get("secs_a") else None
        out.update(shortlist_summary(searched))
    return out
