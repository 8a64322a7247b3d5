"""Judging models on measured pools: the split, the scorers, and the metrics per pool.

A *scorer* gives each test candidate of a pool a score (higher is better) and says how
many seconds of analysis a candidate took; :func:`evaluate` compares that order with the
measured ``secs_a`` (:mod:`.metrics`). Every model is judged on the same test set of each
pool; the train set is what a learned baseline (MetaSchedule's XGBModel) may see
measured. Pure Python and numpy: scorers that need TVM come from :mod:`.ranking`.
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from ..errors import TunaError
from ..estimate import WORST_SCORE
from .metrics import METRICS, all_metrics
from .pools import Pool, load_pool

#: A scorer: ``(pool, train_idx, test_idx) -> (scores of test_idx, seconds per candidate)``,
#: or None when it has nothing to say about the pool (the noise ceiling without a second timing).
Scorer = Callable[[Pool, np.ndarray, np.ndarray], "tuple[np.ndarray, float] | None"]

#: Most candidates a learned baseline trains on (a third of the pool when it is smaller).
TRAIN_SIZE = 64


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


def noise_ceiling(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float] | None:
    """The second timing as a model (score = -secs_b): as good as measuring again.

    Its seconds per candidate are NaN: it measures, it does not analyse. None for a pool
    with no second timing (an imported database's): it is left out of that pool's results.
    """
    if not pool.second_timing:
        return None
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
        out = np.full(len(test_idx), WORST_SCORE)
        for j, i in enumerate(test_idx):
            if rows[i] is not None:
                out[j] = -math.log(max(predict(pool.name, rows[i]), 1e-15))
        return out, seconds[pool.name]

    return scores


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
    family : str
        The pool's operator family.
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
    family: str = "other"


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
            out = scorer(pool, train_idx, test_idx)
            if out is None:  # the scorer has nothing to say about this pool
                continue
            scores, per_cand = out
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
                metrics=MappingProxyType(all_metrics(lat, scores)),
                seconds_per_candidate=float(per_cand),
                wall_seconds=wall,
                n_train=len(train_idx),
                n_test=len(test_idx),
                failed=pool.failed,
                seed=seed,
                family=pool.family,
            )
            results.append(res)
            if progress is not None:
                progress(
                    f"{pool.name} {model}: top-1 {res.metrics['top-1']:.3f}, tau {res.metrics['tau']:+.3f} "
                    f"({wall:.1f} s)"
                )
    return results


def family_means(results: Iterable[Result]) -> dict[str, dict[str, dict[str, float]]]:
    """Per model and operator family, :func:`means` of that family's pools (families sorted)."""
    by_family: dict[str, list[Result]] = {}
    for r in results:
        by_family.setdefault(r.family, []).append(r)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for family in sorted(by_family):
        for model, row in means(by_family[family]).items():
            out.setdefault(model, {})[family] = row
    return out


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
