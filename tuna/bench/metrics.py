"""Ranking metrics: how well a score orders candidates whose latencies were measured.

``lat`` is measured seconds, ``score`` a model's output (higher is better):

- top-k ratio: sum of the k smallest latencies / sum of the latencies of the k best-scored
  (1 is perfect);
- a-peak@n: mean over the model's first n picks of (best latency / best latency picked so far);
- Kendall tau (tau-b) between the score and minus the latency.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

#: Metric names, in table order.
METRICS = ("top-1", "top-5", "top-10", "a-peak@32", "tau")


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


def all_metrics(lat: Any, score: Any) -> dict[str, float]:
    """All ranking metrics of :data:`METRICS` for one scored set."""
    return {
        "top-1": top_k_ratio(lat, score, 1),
        "top-5": top_k_ratio(lat, score, 5),
        "top-10": top_k_ratio(lat, score, 10),
        "a-peak@32": a_peak(lat, score, 32),
        "tau": kendall_tau(lat, score),
    }
