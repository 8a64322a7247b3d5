"""Figures of the benchmarks and of the tuning report, made with matplotlib's Agg backend (no display needed).

Functions here take the plain data the ``tuna bench`` commands (and ``tuna tune``'s
``report.json``) write as JSON and return a
:class:`matplotlib.figure.Figure`; saving it is the caller's business (``tuna/cli.py``).
This is the only module of tuna that imports matplotlib, and :mod:`tuna.bench` does not
import it (it is slow to import): import ``tuna.bench.plots``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

#: The top-k ratios drawn as grouped bars, in order.
TOP_K = ("top-1", "top-5", "top-10")

_MARKERS = ("o", "s", "^", "D", "v", "P")


def _finite_pairs(measured: Sequence[Any], predicted: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [
        (m, p) for m, p in zip(measured, predicted)
        if m is not None and p is not None and math.isfinite(m) and math.isfinite(p) and m > 0 and p > 0
    ]
    if not pairs:
        return np.empty(0), np.empty(0)
    arr = np.asarray(pairs, dtype="float64")
    return arr[:, 0], arr[:, 1]


def _tau(results: Sequence[Mapping[str, Any]], pool: str, model: str) -> float | None:
    for r in results:
        if r.get("pool") == pool and r.get("model") == model:
            return r.get("tau")
    return None


def rank_figure(rank: Mapping[str, Any], title: str | None = None) -> Figure:
    """Predicted against measured seconds per pool, and top-k ratios per model.

    Parameters
    ----------
    rank : Mapping
        What ``tuna bench rank --json`` writes: ``results`` and ``mean`` (as
        :func:`tuna.bench.rank_json` makes them) and ``predictions``:
        ``{model: {pool: {"measured": [...], "predicted": [...]}}}`` in seconds
        (None for a candidate that could not be analysed).
    title : str, optional
        Figure title.

    Returns
    -------
    Figure
        One log-log scatter panel per pool (one series per tuna model, the diagonal
        is a perfect prediction), and below them grouped bars of the mean top-1/5/10
        ratio of every model (1 is perfect).
    """
    predictions: Mapping[str, Mapping[str, Mapping[str, Any]]] = rank.get("predictions") or {}
    means: Mapping[str, Mapping[str, Any]] = rank.get("mean") or {}
    results = rank.get("results") or []
    pools: list[str] = []
    for per_pool in predictions.values():
        pools += [p for p in per_pool if p not in pools]
    cols = max(1, min(3, len(pools)))
    rows = math.ceil(len(pools) / cols)
    fig = Figure(figsize=(4.2 * cols + 0.6, 3.4 * rows + 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(rows + 1, cols, height_ratios=[3.4] * rows + [4.0])
    for i, pool in enumerate(pools):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        lo, hi = math.inf, 0.0
        for j, (model, per_pool) in enumerate(predictions.items()):
            data = per_pool.get(pool)
            if not data:
                continue
            meas, pred = _finite_pairs(data.get("measured", []), data.get("predicted", []))
            if meas.size == 0:
                continue
            tau = _tau(results, pool, model)
            label = model if tau is None else f"{model} (tau {tau:+.2f})"
            ax.scatter(meas * 1e6, pred * 1e6, s=10, alpha=0.6, marker=_MARKERS[j % len(_MARKERS)], label=label)
            lo = min(lo, meas.min(), pred.min())
            hi = max(hi, meas.max(), pred.max())
        if hi > 0:
            # Same range on both axes, so that the diagonal (a perfect prediction) is at 45 degrees.
            span = (lo * 1e6 / 1.5, hi * 1e6 * 1.5)
            ax.plot(span, span, color="grey", linewidth=0.8, linestyle="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(span)
            ax.set_ylim(span)
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_minor_formatter(NullFormatter())  # minor labels collide on narrow ranges
            ax.legend(fontsize=7, loc="upper left")
        ax.set_title(pool, fontsize=10)
        ax.set_xlabel("measured us", fontsize=8)
        ax.set_ylabel("predicted us", fontsize=8)
        ax.tick_params(labelsize=7)
    bars = fig.add_subplot(grid[rows, :])
    models = list(means)
    width = 0.8 / len(TOP_K)
    x = np.arange(len(models))
    for k, metric in enumerate(TOP_K):
        values = [means[m].get(metric) for m in models]
        heights = [v if v is not None else 0.0 for v in values]
        bars.bar(x + (k - (len(TOP_K) - 1) / 2) * width, heights, width, label=metric)
    bars.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    bars.set_xticks(x, models, rotation=20, ha="right", fontsize=8)
    bars.set_ylim(0, 1.05)
    bars.set_ylabel("top-k ratio (mean over pools)", fontsize=8)
    bars.legend(fontsize=8, ncols=len(TOP_K), loc="lower right")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def latency_figure(rows: Sequence[Mapping[str, Any]], group: str, title: str | None = None) -> Figure:
    """Measured latency and tuning time per method, one group of bars per ``group`` value.

    Parameters
    ----------
    rows : sequence of Mapping
        Rows as ``tuna bench tune`` / ``tuna bench network`` write them: ``group``
        (``"workload"`` or ``"network"``), ``method``, ``latency`` and ``tune_seconds``
        (seconds; None where there is none).
    group : str
        The key that names each group of bars.
    title : str, optional
        Figure title.

    Returns
    -------
    Figure
        Two panels: latency relative to the fastest method of each group (1 is the
        fastest; log scale) and tuning time; a method without a value has no bar.
    """
    groups: list[str] = []
    methods: list[str] = []
    for r in rows:
        groups += [r[group]] if r[group] not in groups else []
        methods += [r["method"]] if r["method"] not in methods else []
    # Wide enough for the bars' labels, but no wider than a page shows (many seeds, many bars).
    width_in = min(20.0, max(6.0, 1.6 * len(groups) * max(len(methods), 1) / 2 + 3))
    fig = Figure(figsize=(width_in, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    rel_ax, time_ax = fig.subplots(2, 1)
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(groups))
    for j, method in enumerate(methods):
        rel, tune = [], []
        for g in groups:
            row = next((r for r in rows if r[group] == g and r["method"] == method), None)
            lats = [r["latency"] for r in rows if r[group] == g and r.get("latency")]
            best = min(lats) if lats else None
            lat = row.get("latency") if row else None
            # NaN leaves a gap: a method that was skipped or found nothing has no bar.
            rel.append(lat / best if lat and best else math.nan)
            secs = row.get("tune_seconds") if row else None
            tune.append(secs if secs is not None else math.nan)
        offset = (j - (len(methods) - 1) / 2) * width
        bars = rel_ax.bar(x + offset, rel, width, label=method)
        label_size = 6 if len(groups) * len(methods) <= 40 else 4
        rel_ax.bar_label(bars, fmt="%.3g", fontsize=label_size)
        bars = time_ax.bar(x + offset, tune, width, label=method)
        time_ax.bar_label(bars, fmt="%.0f", fontsize=label_size)
    rel_ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    rel_ax.set_ylabel("latency / fastest (log)", fontsize=8)
    rel_ax.set_yscale("log")  # untuned builds can be 100x off; log keeps the tuned ones readable
    time_ax.set_ylabel("tuning seconds", fontsize=8)
    # Network layer names (resnet18/fused_conv2d7_add5) overlap when set side by side: slant them.
    slant = {"rotation": 25, "ha": "right"} if sum(map(len, groups)) * 7 > width_in * 72 else {}
    for ax in (rel_ax, time_ax):
        ax.set_xticks(x, groups, fontsize=8, **slant)
        ax.tick_params(labelsize=7)
    rel_ax.legend(fontsize=7, ncols=min(len(methods), 4))
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def bounds_figure(report: Mapping[str, Any], title: str | None = None) -> Figure:
    """Predicted time by bound, the chosen schedule beside the untuned one.

    Parameters
    ----------
    report : Mapping
        A report as :meth:`tuna.explain.Report.to_json` gives it: ``chosen`` and ``untuned``
        (None where it was not predicted), each with ``seconds``, ``bound`` and ``by_bound``.
    title : str, optional
        Figure title (default: the workload and the machine).

    Returns
    -------
    Figure
        Grouped bars: for each bound (and the total), its predicted microseconds in the
        chosen and the untuned schedule, on a log scale (an untuned schedule is often 100x
        slower); a bound a schedule does not have has no bar.
    """
    rows = [(name, report[name]) for name in ("chosen", "untuned") if report.get(name)]
    bounds: list[str] = []
    for _, one in rows:
        bounds += [b["bound"] for b in one["by_bound"] if b["bound"] not in bounds]
    groups = ["total", *bounds]
    fig = Figure(figsize=(max(6.0, 1.1 * len(groups) + 2), 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x = np.arange(len(groups))
    width = 0.8 / len(rows)
    for j, (name, one) in enumerate(rows):
        per = {b["bound"]: b["seconds"] for b in one["by_bound"]}
        values = [one["seconds"] * 1e6] + [per[b] * 1e6 if per.get(b) else math.nan for b in bounds]
        bars = ax.bar(x + (j - (len(rows) - 1) / 2) * width, values, width,
                      label=f"{name} ({one['seconds'] * 1e6:,.1f} us, bound by {one['bound']})")
        ax.bar_label(bars, fmt="%.3g", fontsize=6)
    ax.set_yscale("log")
    ax.set_xticks(x, groups, fontsize=8)
    ax.set_ylabel("predicted microseconds per run (log)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    ax.set_title(title or f"{report.get('workload')} on {report.get('machine')}: predicted time by bound",
                 fontsize=10)
    return fig
