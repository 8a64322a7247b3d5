"""Figures from small SYNTHETIC bench results: every number here is made up for the test,
none was measured, and nothing below is a claim about tuna's accuracy."""

import io
import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from tuna import bench
from tuna.bench import plots


def _synthetic_rank(pools=("P-0", "P-1", "P-2", "P-3"), models=("random", "xgb-64", "tuna-ir", "tuna-full")):
    """A made-up result in the shape `tuna bench rank --json` writes."""
    rng = np.random.default_rng(0)
    results, predictions = [], {}
    for model in models:
        for pool in pools:
            row = {"pool": pool, "model": model, "top-1": rng.uniform(0.3, 1), "top-5": rng.uniform(0.3, 1),
                   "top-10": rng.uniform(0.3, 1), "a-peak@32": rng.uniform(0.3, 1), "tau": rng.uniform(-1, 1),
                   "seconds_per_candidate": None, "wall_seconds": 0.0, "n_train": 4, "n_test": 8, "failed": 0,
                   "seed": 0}
            results.append(row)
    for model in models:
        if model.startswith("tuna"):
            predictions[model] = {}
            for pool in pools:
                measured = rng.uniform(1e-6, 1e-3, 12)
                predicted = [float(m * rng.uniform(0.5, 2)) for m in measured]
                predicted[3] = None  # a candidate the tier could not analyse
                predictions[model][pool] = {"measured": measured.tolist(), "predicted": predicted}
    mean = {m: {k: float(np.mean([r[k] for r in results if r["model"] == m])) for k in bench.METRICS}
            for m in models}
    for row in mean.values():
        row.update(seconds_per_candidate=None, pools=len(pools))
    return {"metrics": list(bench.METRICS), "results": results, "mean": mean, "predictions": predictions}


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def test_rank_figure_has_a_log_panel_per_pool_and_the_top_k_bars():
    data = _synthetic_rank()
    fig = plots.rank_figure(data, "synthetic")
    axes = fig.get_axes()
    assert len(axes) == 4 + 1
    for ax, pool in zip(axes, ("P-0", "P-1", "P-2", "P-3")):
        assert ax.get_title() == pool
        assert ax.get_xscale() == ax.get_yscale() == "log"
        # one series per tuna model; the candidate without a prediction is left out
        offsets = [c.get_offsets() for c in ax.collections]
        assert [len(o) for o in offsets] == [11, 11]
    bars = axes[-1]
    assert len(bars.patches) == 4 * len(plots.TOP_K)
    heights = sorted(p.get_height() for p in bars.patches)
    expected = sorted(data["mean"][m][k] for m in data["mean"] for k in plots.TOP_K)
    assert heights == pytest.approx(expected)
    assert [t.get_text() for t in bars.get_xticklabels()] == list(data["mean"])
    assert _png(fig).startswith(b"\x89PNG")


def test_rank_figure_without_predictions_still_draws_the_bars():
    data = _synthetic_rank()
    data["predictions"] = {}
    fig = plots.rank_figure(data)
    assert len(fig.get_axes()) == 1
    assert _png(fig).startswith(b"\x89PNG")


def test_latency_figure_is_relative_to_the_fastest_of_each_group():
    rows = [  # synthetic
        {"network": "net-a", "method": "m1", "latency": 2.0, "tune_seconds": 10.0},
        {"network": "net-a", "method": "m2", "latency": 1.0, "tune_seconds": 100.0},
        {"network": "net-b", "method": "m1", "latency": 3.0, "tune_seconds": 5.0},
        {"network": "net-b", "method": "m2", "latency": None, "tune_seconds": None},
    ]
    fig = plots.latency_figure(rows, "network", "synthetic")
    rel_ax, time_ax = fig.get_axes()
    # bars are drawn method by method: m1 (net-a, net-b), then m2 (net-a, net-b)
    assert [p.get_height() for p in rel_ax.patches] == pytest.approx([2.0, 1.0, 1.0, math.nan], nan_ok=True)
    assert [p.get_height() for p in time_ax.patches] == pytest.approx([10.0, 5.0, 100.0, math.nan], nan_ok=True)
    assert rel_ax.get_yscale() == "log"
    assert _png(fig).startswith(b"\x89PNG")
