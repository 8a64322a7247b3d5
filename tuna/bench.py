"""The yardstick: rank the schedules of measured pools and score how well a model ranks them.

A pool (``tuna/data/pools/*.json``) holds, for one workload, the schedules MetaSchedule's
tuner proposed and two later timings of each (``secs_a``, ``secs_b``). A *scorer* gives each
test candidate a score (higher is better); the metrics compare that order with ``secs_a``:

- top-k ratio: sum of the k smallest latencies / sum of the latencies of the k best-scored
  (1 is perfect);
- a-peak@n: mean over the model's first n picks of (best latency / best latency picked so far);
- Kendall tau (tau-b) between the score and minus the latency;
- seconds of analysis per candidate.

Every model is judged on the same test set of each pool; the train set is what a learned
baseline (MetaSchedule's XGBModel) may see measured. This module is pure Python and numpy;
TVM-backed pieces live in :mod:`tuna.integration` (``xgb_scores``, ``pool_features``).
"""

from __future__ import annotations

import json
import math
import os
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy import stats

from .errors import TunaError

#: A scorer: ``(pool, train_idx, test_idx) -> (scores of test_idx, seconds per candidate)``.
Scorer = Callable[["Pool", np.ndarray, np.ndarray], tuple[np.ndarray, float]]

#: Metric names, in table order.
METRICS = ("top-1", "top-5", "top-10", "a-peak@32", "tau")

#: Most candidates a learned baseline trains on (a third of the pool when it is smaller).
TRAIN_SIZE = 64


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
    workload : tuple of (str, int)
        Ansor workload name and index into ``te_workload.CONFIGS``.
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
    """

    name: str
    source: str
    workload: tuple[str, int]
    target: Mapping[str, Any]
    mod: str
    traces: tuple[Any, ...]
    secs_a: np.ndarray
    secs_b: np.ndarray
    tuner_secs: np.ndarray
    tune_seconds: float | None = None
    trials: int | None = None
    failed: int = 0

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
        try:
            data = json.loads(Path(src).read_text())
        except OSError as err:
            raise PoolError(f"cannot read pool {src}: {err.strerror or err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise PoolError(f"pool {src} is not JSON: {err}") from None
    if not isinstance(data, Mapping):
        raise PoolError(f"pool {src} is not a pool: expected a JSON object, found {type(data).__name__}")
    missing = [k for k in ("workload", "target", "mod", "candidates") if k not in data]
    if missing:
        raise PoolError(f"pool {src} is not a pool: it lacks {', '.join(missing)}")
    workload = data["workload"]
    if (
        not isinstance(workload, (list, tuple))
        or len(workload) != 2
        or not isinstance(workload[0], str)
        or isinstance(workload[1], bool)
        or not isinstance(workload[1], int)
    ):
        raise PoolError(f'pool {src}: workload must be [name, index], e.g. ["GMM", 1], not {workload!r}')
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
    return Pool(
        name=f"{workload[0]}-{workload[1]}",
        source=src,
        workload=(workload[0], int(workload[1])),
        target=MappingProxyType(dict(target)),
        mod=data["mod"],
        traces=tuple(traces),
        secs_a=_frozen(secs_a),
        secs_b=_frozen(secs_b),
        tuner_secs=_frozen(tuner),
        tune_seconds=float(tune_seconds) if isinstance(tune_seconds, (int, float)) else None,
        trials=int(trials) if isinstance(trials, int) else None,
        failed=failed,
    )


def shipped_pools() -> list[Path]:
    """The pool files shipped in ``tuna/data/pools``, sorted by name."""
    return sorted((Path(__file__).parent / "data" / "pools").glob("*.json"))


# ---------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------


def _check(lat: Any, score: Any) -> tuple[np.ndarray, np.ndarray]:
    lat = np.asarray(lat, dtype="float64")
    score = np.asarray(score, dtype="float64")
    if lat.ndim != 1 or lat.shape != score.shape or lat.size == 0:
        raise ValueError(f"need two equal, non-empty 1-D arrays; got shapes {lat.shape} and {score.shape}")
    return lat, np.where(np.isnan(score), -np.inf, score)


def picks(lat: Any, score: Any) -> np.ndarray:
    """Candidate indices in the model's order: highest score first.

    Ties in score are broken pessimistically (the slower candidate first), then by index,
    so a model cannot gain from ties. NaN scores count as the lowest.
    """
    lat, score = _check(lat, score)
    return np.lexsort((np.arange(lat.size), -lat, -score))


def top_k_ratio(lat: Any, score: Any, k: int) -> float:
    """Sum of the k smallest latencies / sum of the latencies of the k best-scored (k capped at the size)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    lat, score = _check(lat, score)
    k = min(k, lat.size)
    return float(np.sort(lat)[:k].sum() / lat[picks(lat, score)[:k]].sum())


def a_peak(lat: Any, score: Any, n: int = 32) -> float:
    """Mean over the model's first n picks of (best latency / best latency picked so far)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    lat, score = _check(lat, score)
    chosen = lat[picks(lat, score)[: min(n, lat.size)]]
    return float(np.mean(lat.min() / np.minimum.accumulate(chosen)))


def kendall_tau(lat: Any, score: Any) -> float:
    """Kendall's tau-b between the score and minus the latency; 0 when either is constant."""
    lat, score = _check(lat, score)
    # Ranks, so that infinite scores (failed candidates) tie at the bottom.
    tau = stats.kendalltau(stats.rankdata(score), stats.rankdata(-lat)).statistic
    return 0.0 if not np.isfinite(tau) else float(tau)


def metrics(lat: Any, score: Any) -> dict[str, float]:
    """All ranking metrics of :data:`METRICS` for one scored set."""
    return {
        "top-1": top_k_ratio(lat, score, 1),
        "top-5": top_k_ratio(lat, score, 5),
        "top-10": top_k_ratio(lat, score, 10),
        "a-peak@32": a_peak(lat, score, 32),
        "tau": kendall_tau(lat, score),
    }


# ---------------------------------------------------------------------------------------
# Split and baselines
# ---------------------------------------------------------------------------------------


def train_size(n: int) -> int:
    """Train candidates for a pool of ``n``: 64, or a third of the pool when it is smaller than 192."""
    return min(TRAIN_SIZE, n // 3)


def split(pool: Pool | int, seed: int = 0, n_train: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Random train/test split of a pool's candidates.

    Parameters
    ----------
    pool : Pool or int
        The pool, or its number of candidates.
    seed : int
        Seed of the permutation.
    n_train : int, optional
        Train candidates; :func:`train_size` by default.

    Returns
    -------
    train_idx, test_idx : ndarray
        Sorted candidate indices; every model is judged on ``test_idx`` only.
    """
    n = pool if isinstance(pool, int) else len(pool)
    k = train_size(n) if n_train is None else n_train
    if not 0 <= k < n:
        raise ValueError(f"cannot train on {k} of {n} candidates and keep some to test")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:k]), np.sort(perm[k:])


def random_scorer(seed: int = 0) -> Scorer:
    """A baseline that scores candidates in a random order (seeded per pool)."""

    def scores(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float]:
        rng = np.random.default_rng([seed, zlib.crc32(pool.name.encode())])
        return rng.random(len(test_idx)), 0.0

    return scores


def noise_ceiling(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float]:
    """The second timing as a model (score = -secs_b): as good as measuring again.

    Its seconds per candidate are NaN: it measures, it does not analyse.
    """
    return -pool.secs_b[test_idx], math.nan


def baselines(seed: int = 0) -> dict[str, Scorer]:
    """The baselines that need no TVM: random order and the noise ceiling."""
    return {"random": random_scorer(seed), "noise-ceiling": noise_ceiling}


def feature_scorer(
    features: Mapping[str, list[Mapping[str, float] | None]],
    seconds: Mapping[str, float],
    predict: Callable[[str, Mapping[str, float]], float],
) -> Scorer:
    """A scorer from precomputed features: score = -log of the predicted seconds.

    Parameters
    ----------
    features : Mapping
        Pool name -> features of each of its candidates (None: not analysable).
    seconds : Mapping
        Pool name -> analysis seconds per candidate.
    predict : callable
        ``predict(pool_name, features) -> seconds``; the pool name lets a caller use
        coefficients fitted without that pool.
    """

    def scores(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float]:
        rows = features[pool.name]
        out = np.full(len(test_idx), -1e30)
        for j, i in enumerate(test_idx):
            if rows[i] is not None:
                out[j] = -math.log(max(predict(pool.name, rows[i]), 1e-15))
        return out, seconds[pool.name]

    return scores


# ---------------------------------------------------------------------------------------
# Driver and reports
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """How one model ranked one pool's test set.

    Attributes
    ----------
    pool, model : str
        Pool name and scorer name.
    metrics : Mapping[str, float]
        The values of :data:`METRICS`.
    seconds_per_candidate : float
        Analysis time per candidate the scorer reported (NaN when not applicable).
    wall_seconds : float
        Wall time of the whole scorer call (training included).
    n_train, n_test, failed : int
        Split sizes, and the pool's candidates left out as failed.
    seed : int
        Seed of the split.
    """

    pool: str
    model: str
    metrics: Mapping[str, float]
    seconds_per_candidate: float
    wall_seconds: float
    n_train: int
    n_test: int
    failed: int = 0
    seed: int = 0


def evaluate(
    pools: Iterable[Pool | str | os.PathLike],
    scorers: Mapping[str, Scorer],
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    n_train: int | None = None,
) -> list[Result]:
    """Score every pool's test set with every scorer and compute the metrics.

    Parameters
    ----------
    pools : iterable of Pool or path
        Pools, or pool files to load.
    scorers : Mapping[str, Scorer]
        Model name -> ``(pool, train_idx, test_idx) -> (scores, seconds_per_candidate)``.
    seed : int
        Seed of each pool's split.
    progress : callable, optional
        Receives one short line per pool and model.
    n_train : int, optional
        Train candidates per pool (default :func:`train_size`).

    Returns
    -------
    list of Result
        Pool-major, in the order given.
    """
    results = []
    for item in pools:
        pool = item if isinstance(item, Pool) else load_pool(item)
        train_idx, test_idx = split(pool, seed, n_train)
        lat = pool.secs_a[test_idx]
        for model, scorer in scorers.items():
            start = time.perf_counter()
            scores, per_cand = scorer(pool, train_idx, test_idx)
            wall = time.perf_counter() - start
            scores = np.asarray(scores, dtype="float64")
            if scores.shape != test_idx.shape:
                raise TunaError(
                    f"scorer {model!r} returned {scores.shape} scores "
                    f"for {len(test_idx)} test candidates of {pool.name}"
                )
            res = Result(
                pool=pool.name,
                model=model,
                metrics=MappingProxyType(metrics(lat, scores)),
                seconds_per_candidate=float(per_cand),
                wall_seconds=wall,
                n_train=len(train_idx),
                n_test=len(test_idx),
                failed=pool.failed,
                seed=seed,
            )
            results.append(res)
            if progress is not None:
                progress(
                    f"{pool.name} {model}: top-1 {res.metrics['top-1']:.3f}, tau {res.metrics['tau']:+.3f} "
                    f"({wall:.1f} s)"
                )
    return results


def means(results: Iterable[Result]) -> dict[str, dict[str, float]]:
    """Per model, the mean of each metric (and of seconds per candidate) across pools."""
    by_model: dict[str, list[Result]] = {}
    for r in results:
        by_model.setdefault(r.model, []).append(r)
    out = {}
    for model, rs in by_model.items():
        row = {m: float(np.mean([r.metrics[m] for r in rs])) for m in METRICS}
        secs = [r.seconds_per_candidate for r in rs if math.isfinite(r.seconds_per_candidate)]
        row["seconds_per_candidate"] = float(np.mean(secs)) if secs else math.nan
        row["pools"] = len(rs)
        out[model] = row
    return out


def _fmt_secs(secs: float) -> str:
    if not math.isfinite(secs):
        return "-"
    if secs <= 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if secs >= scale:
            return f"{secs / scale:.3g} {unit}"
    return f"{secs / 1e-9:.3g} ns"


def rank_table(results: list[Result]) -> str:
    """A fixed-width table: one row per pool and model, then a mean row per model."""
    header = ("pool", "model", "train/test", *METRICS, "s/cand")
    rows = []
    for r in results:
        rows.append(
            (
                r.pool,
                r.model,
                f"{r.n_train}/{r.n_test}",
                *(f"{r.metrics[m]:.3f}" for m in METRICS),
                _fmt_secs(r.seconds_per_candidate),
            )
        )
    mean_rows = [
        (
            "mean",
            model,
            f"{row['pools']} pools",
            *(f"{row[m]:.3f}" for m in METRICS),
            _fmt_secs(row["seconds_per_candidate"]),
        )
        for model, row in means(results).items()
    ]
    widths = [max(len(str(x[i])) for x in (header, *rows, *mean_rows)) for i in range(len(header))]

    def line(cells) -> str:
        left = [str(c).ljust(w) for c, w in zip(cells[:2], widths[:2])]
        right = [str(c).rjust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join(left + right).rstrip()

    rule = "-" * len(line(header))
    out = [line(header), rule]
    prev = None
    for row in rows:
        if prev is not None and row[0] != prev:
            out.append("")
        out.append(line(row))
        prev = row[0]
    out += [rule, *(line(row) for row in mean_rows)]
    failed = {r.pool: r.failed for r in results if r.failed}
    for name, count in failed.items():
        out.append(f"{name}: {count} failed candidate(s) left out")
    return "\n".join(out)


def rank_json(results: list[Result]) -> dict[str, Any]:
    """The results as plain data, ready for ``json.dump`` (NaN becomes None)."""

    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return {
        "metrics": list(METRICS),
        "results": [
            {
                "pool": r.pool,
                "model": r.model,
                **{m: num(r.metrics[m]) for m in METRICS},
                "seconds_per_candidate": num(r.seconds_per_candidate),
                "wall_seconds": num(r.wall_seconds),
                "n_train": r.n_train,
                "n_test": r.n_test,
                "failed": r.failed,
                "seed": r.seed,
            }
            for r in results
        ],
        "mean": {
            model: {k: (num(v) if isinstance(v, float) else v) for k, v in row.items()}
            for model, row in means(results).items()
        },
    }


# ---------------------------------------------------------------------------------------
# Tuning and network benchmarks, and BENCHMARKS.md (pure: data in, text out)
# ---------------------------------------------------------------------------------------


def with_ratios(rows: Iterable[Mapping[str, Any]], group: str,
                reference: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Rows with ``ratio`` = fastest latency of the group / this latency (1 is the fastest).

    Parameters
    ----------
    rows : iterable of Mapping
        Each with ``group`` (e.g. ``"workload"``), ``method`` and ``latency`` (seconds or None).
    group : str
        The key that groups rows compared with one another.
    reference : Mapping, optional
        Group -> a reference latency (e.g. the best of the workload's shipped pool); adds
        ``ratio_to_reference`` = reference / latency.
    """
    rows = [dict(r) for r in rows]
    best: dict[str, float] = {}
    for r in rows:
        if r.get("latency"):
            best[r[group]] = min(best.get(r[group], math.inf), r["latency"])
    for r in rows:
        lat = r.get("latency")
        r["ratio"] = best[r[group]] / lat if lat else None
        if reference is not None:
            ref = reference.get(r[group])
            r["reference"] = ref
            r["ratio_to_reference"] = ref / lat if lat and ref else None
    return rows


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _fmt_opt_secs(x: float | None) -> str:
    return "-" if x is None else _fmt_secs(x)


def _cells(rows: Iterable[Mapping[str, Any]], columns: Sequence[tuple[str, str, Callable[[Any], str]]]) -> list[list]:
    return [[fmt(r.get(key)) for _, key, fmt in columns] for r in rows]


def _fixed(header: Sequence[str], body: list[list[str]]) -> str:
    widths = [max(len(str(x[i])) for x in (header, *body)) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in (header, *body)]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def _markdown(header: Sequence[str], body: list[list[str]]) -> str:
    rule = "|" + "|".join("---" if i < 2 or h == "note" else "---:" for i, h in enumerate(header)) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


#: What the columns of :func:`tune_table` mean (printed under it, and in BENCHMARKS.md).
TUNE_CAPTION = (
    "Ratio to best: the fastest pick of the workload (pool-best included) / this pick. pool-best: the "
    "fastest candidate of the shipped pool (MetaSchedule with real measurement on the pools' machine, "
    "its trials and tuning time) re-timed here in the same run; ratio to pool best: its latency / this pick."
)

_TUNE_COLUMNS: tuple = (
    ("workload", "workload", str),
    ("method", "method", str),
    ("trials", "trials", lambda x: "-" if x is None else str(x)),
    ("tuning time", "tune_seconds", _fmt_opt_secs),
    ("pick latency", "latency", _fmt_opt_secs),
    ("ratio to best", "ratio", _fmt_ratio),
    ("pool best", "reference", _fmt_opt_secs),
    ("ratio to pool best", "ratio_to_reference", _fmt_ratio),
)

_NETWORK_COLUMNS: tuple = (
    ("network", "network", str),
    ("method", "method", str),
    ("tasks", "tasks", lambda x: "-" if x is None else str(x)),
    ("trials", "trials", lambda x: "-" if x is None else str(x)),
    ("tuning time", "tune_seconds", _fmt_opt_secs),
    ("latency", "latency", _fmt_opt_secs),
    ("ratio to best", "ratio", _fmt_ratio),
    ("note", "note", lambda x: x or ""),
)


def tune_table(rows: list[Mapping[str, Any]], markdown: bool = False) -> str:
    """The ``tuna bench tune`` rows (after :func:`with_ratios`) as a table."""
    body = _cells(rows, _TUNE_COLUMNS)
    header = [c[0] for c in _TUNE_COLUMNS]
    return _markdown(header, body) if markdown else _fixed(header, body)


def _seeds(rows: Iterable[Mapping[str, Any]]) -> int:
    return len({r["seed"] for r in rows if r.get("seed") is not None})


def seed_summary(rows: list[Mapping[str, Any]], within: float = 0.952) -> str:
    """How tuna's picks vary with the seed, from ``tuna bench tune`` rows with several seeds.

    One line per search and workload with each seed's ratio to the pool's best, then per
    search how many picks came ``within`` of it (0.952: within 5%) and the worst.
    """
    table: dict[str, dict[str, dict[int, float | None]]] = {}
    for r in rows:
        if r.get("seed") is None or not str(r["method"]).startswith("tuna-"):
            continue
        search = str(r["method"]).split("@", 1)[0]
        table.setdefault(search, {}).setdefault(r["workload"], {})[r["seed"]] = r.get("ratio_to_reference")
    seeds = sorted({seed for by_workload in table.values() for ratios in by_workload.values() for seed in ratios})
    header = ["search", "workload", *(f"seed {s}" for s in seeds), "worst"]
    body, totals = [], []
    for search, by_workload in table.items():
        found = []
        for workload, ratios in by_workload.items():
            values = [ratios[s] for s in seeds if ratios.get(s) is not None]
            found += [(v, workload, s) for s, v in ratios.items() if v is not None]
            body.append([search, workload, *(_fmt_ratio(ratios.get(s)) for s in seeds),
                         _fmt_ratio(min(values) if values else None)])
        if found:
            worst = min(found)
            totals.append(f"{search}: {sum(v >= within for v, _, _ in found)} of {len(found)} picks within "
                          f"{(1 - within) * 100:.0f}% of the pool's best; worst {worst[0]:.3f} "
                          f"({worst[1]}, seed {worst[2]})")
    if not body:
        return "no picks with a ratio to a pool's best"
    return "\n".join(["Ratio to pool best by seed:", _fixed(header, body), *totals])


def network_table(rows: list[Mapping[str, Any]], markdown: bool = False) -> str:
    """The ``tuna bench network`` rows (after :func:`with_ratios`) as a table."""
    body = _cells(rows, _NETWORK_COLUMNS)
    header = [c[0] for c in _NETWORK_COLUMNS]
    return _markdown(header, body) if markdown else _fixed(header, body)


def rank_markdown(rank: Mapping[str, Any]) -> str:
    """The mean rows of a ``tuna bench rank --json`` result as a markdown table."""
    header = ["model", "pools", *METRICS, "s/cand"]
    body = []
    for model, row in rank["mean"].items():
        secs = row.get("seconds_per_candidate")
        body.append([model, str(row.get("pools", "")), *(_fmt_ratio(row.get(m)) for m in METRICS),
                     _fmt_opt_secs(secs)])
    return _markdown(header, body)


def _machine_line(meta: Mapping[str, Any] | None) -> str:
    if not meta:
        return "unknown machine"
    m = meta.get("machine", {})
    family = f" (CPU family {m['cpu_family']}, model {m['cpu_model']})" if m.get("cpu_family") else ""
    return (f"{m.get('model_name', '?')}{family}, {m.get('cores', '?')} cores; "
            f"modelled as `{meta.get('target', '?')}`; {meta.get('date', '?')}; apache-tvm {m.get('tvm', '?')}")


def benchmarks_markdown(
    rank: Mapping[str, Any] | None,
    tune: Mapping[str, Any] | None,
    network: Mapping[str, Any] | None,
    *,
    figures: Mapping[str, str] | None = None,
    command: str = "scripts/benchmarks.sh",
    generated: str = "",
    note: str = "",
) -> str:
    """BENCHMARKS.md from the JSON results of ``tuna bench rank / tune / network``.

    Parameters
    ----------
    rank, tune, network : Mapping or None
        What each command wrote with ``--json`` (None: that section says it was not run).
        Each carries ``meta`` (machine, target, date, command, budget).
    figures : Mapping, optional
        Section (``"rank"``, ``"tune"``, ``"network"``) -> image path relative to the page.
    command : str
        The one command that regenerates the page.
    generated : str
        When the page was written.
    note : str
        A caveat printed in bold under the title (e.g. that budgets were tiny).

    Returns
    -------
    str
        Markdown.
    """
    figures = figures or {}
    out = [
        "# Benchmarks",
        "",
        f"Generated {generated} by `{command}`; every figure below is output of the `tuna bench` commands "
        "named in its section, run on the machine named there. Regenerate them with that command on your "
        "own machine: latencies are that machine's.",
        "",
    ]
    if note:
        out[2:2] = [f"**{note}**", ""]

    def section(title: str, data: Mapping[str, Any] | None, key: str, body: Callable[[Mapping], list[str]]) -> None:
        out.extend([f"## {title}", ""])
        if not data:
            out.extend(["Not run.", ""])
            return
        meta = data.get("meta", {})
        out.append(f"Machine: {_machine_line(meta)}.  ")
        out.append(f"Command: `{meta.get('command', '?')}`" + (f" ({meta['seconds']:.0f} s)" if meta.get("seconds")
                                                                 else "") + ".")
        out.append("")
        out.extend(body(data))
        if key in figures:
            out.extend(["", f"![{title}]({figures[key]})"])
        out.append("")

    section("Ranking measured pools (`tuna bench rank`)", rank, "rank", lambda d: [
        "Mean over the pools of each metric on each pool's test split (top-k ratio, a-peak@32: 1 is perfect; "
        "Kendall tau: 1 is perfect). `xgb-64`: MetaSchedule's XGBModel trained on 64 measured candidates of the "
        "same pool; `noise-ceiling`: the second timing as a model; `tuna-<tier>-unseen`: coefficients fitted "
        "without the pool ranked.",
        "",
        rank_markdown(d),
    ])
    section("Offline tuning against measured tuning (`tuna bench tune`)", tune, "tune", lambda d: [
        "Each pick re-timed on this machine (median of 5 `time_evaluator` repeats). `metaschedule@tuna-time`: "
        "the best candidate MetaSchedule (XGBModel, real measurement) had measured when tuna's tuning time had "
        "passed; `metaschedule`: its full budget. " + TUNE_CAPTION,
        "",
        tune_table(d["rows"], markdown=True),
        *(["", "```text", seed_summary(d["rows"]), "```"] if _seeds(d["rows"]) > 1 else []),
    ])
    section("Whole networks (`tuna bench network`)", network, "network", lambda d: [
        "Batch 1, random weights, built with TVM Relax from `tuna/integration/networks.py`. `untuned`: "
        "`tvm.compile` with TVM's default CPU pipeline; `tuna`: every task tuned offline with tuna's cost "
        "model and static runner; `metaschedule`: the same tasks and trials with XGBModel and real "
        "measurement; `pytorch`: the same graph and weights in PyTorch eager mode. Latency: "
        "`VirtualMachine.time_evaluator`, median of 5. Tuning time and latency side by side, as in Tables I "
        "and II of the Tuna paper.",
        "",
        network_table(d["rows"], markdown=True),
    ])
    return "\n".join(out).rstrip() + "\n"
