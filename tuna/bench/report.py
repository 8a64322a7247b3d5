"""Reports of the benchmarks: tables for the terminal, markdown, and BENCHMARKS.md.

Pure: data in, text out. :func:`rank_table` and :func:`rank_json` present what
:func:`~.evaluation.evaluate` computed; the ``tuna bench tune`` and ``tuna bench network``
rows (plain dicts, as :mod:`tuna.integration.measure` makes them) get their ratios from
:func:`with_ratios` and their tables here; :func:`benchmarks_markdown` writes the page
from the JSON the bench commands saved.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .evaluation import Result, family_means, means
from .metrics import METRICS, kendall_tau, top_k_ratio


def _fmt_secs(secs: float) -> str:
    if not math.isfinite(secs):
        return "-"
    if secs <= 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if secs >= scale:
            return f"{secs / scale:.3g} {unit}"
    return f"{secs / 1e-9:.3g} ns"


def _grouped_table(header: Sequence, rows: Sequence[Sequence], footer: Sequence[Sequence]) -> list[str]:
    """Fixed-width lines: the two first columns left-aligned, the rest right-aligned, a blank
    line between runs of rows with another first cell, and ``footer`` under a rule."""
    widths = [max(len(str(x[i])) for x in (header, *rows, *footer)) for i in range(len(header))]

    def line(cells) -> str:
        left = [str(c).ljust(w) for c, w in zip(cells[:2], widths[:2])]
        right = [str(c).rjust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join(left + right).rstrip()

    rule = "-" * len(line(header))
    out = [line(header), rule]
    for pos, row in enumerate(rows):
        if pos and row[0] != rows[pos - 1][0]:
            out.append("")
        out.append(line(row))
    return [*out, rule, *(line(row) for row in footer)]


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
    out = _grouped_table(header, rows, mean_rows)
    failed = {r.pool: r.failed for r in results if r.failed}
    for name, count in failed.items():
        out.append(f"{name}: {count} failed candidate(s) left out")
    return "\n".join(out)


def family_table(results: list[Result]) -> str:
    """Per operator family, every model's mean over the family's pools; then per model the
    mean over families and its worst family (by top-10): what leaving a family out costs."""
    per = family_means(results)
    header = ("family", "model", "pools", *METRICS)
    rows: list[tuple[str, ...]] = []
    families = sorted({f for fams in per.values() for f in fams})
    for family in families:
        for model, fams in per.items():
            if family in fams:
                row = fams[family]
                rows.append((family, model, str(row["pools"]), *(f"{row[m]:.3f}" for m in METRICS)))
    summary: list[tuple[str, ...]] = []
    for model, fams in per.items():
        mean = {m: sum(r[m] for r in fams.values()) / len(fams) for m in METRICS}
        summary.append(("mean of families", model, str(len(fams)), *(f"{mean[m]:.3f}" for m in METRICS)))
        worst_name, worst = min(fams.items(), key=lambda kv: kv[1]["top-10"])
        summary.append((f"worst: {worst_name}", model, str(worst["pools"]), *(f"{worst[m]:.3f}" for m in METRICS)))
    return "\n".join(_grouped_table(header, rows, summary))


def rank_json(results: list[Result]) -> dict[str, Any]:
    """The results as plain data, ready for ``json.dump`` (NaN becomes None)."""

    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return {
        "metrics": list(METRICS),
        "results": [
            {
                "pool": r.pool,
                "family": r.family,
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
        "family_mean": {
            model: {
                family: {k: (num(v) if isinstance(v, float) else v) for k, v in row.items()}
                for family, row in fams.items()
            }
            for model, fams in family_means(results).items()
        },
    }


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
    "fastest candidate of the workload's measured pool (the one tuna ships, or the one in --pools; "
    "MetaSchedule with real measurement on the pools' machine, "
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


#: What the columns of :func:`hybrid_table` mean.
HYBRID_CAPTION = (
    "Measured on this machine by MetaSchedule's LocalRunner. best: the tuner's fastest candidate by the runner; "
    "to 5%: measured trials (and seconds from the start) before a candidate ran within 5% of metaschedule's best "
    "('-': never); pick latency: the tuner's pick (its fastest candidate; tuna-hybrid: the fastest of those it "
    "measured twice, by both) re-timed here with the others, in turn; ratio: metaschedule's pick latency / this one."
)

_HYBRID_COLUMNS: tuple = (
    ("workload", "workload", str),
    ("method", "method", str),
    ("trials", "trials", str),
    ("tuning time", "tune_seconds", _fmt_opt_secs),
    ("best", "best", _fmt_opt_secs),
    ("to 5%: trials", "trials_to_5pct", lambda x: "-" if x is None else str(x)),
    ("to 5%: time", "seconds_to_5pct", _fmt_opt_secs),
    ("pick latency", "latency", _fmt_opt_secs),
    ("ratio", "ratio", _fmt_ratio),
)


def hybrid_table(rows: list[Mapping[str, Any]], markdown: bool = False) -> str:
    """The ``tuna bench hybrid`` rows as a table (``ratio``: to each workload's metaschedule pick)."""
    ms_pick = {r["workload"]: r.get("latency") for r in rows if r["method"] == "metaschedule"}
    rows = [{**r, "ratio": (ms_pick[r["workload"]] / r["latency"]
                            if ms_pick.get(r["workload"]) and r.get("latency") else None)} for r in rows]
    body = _cells(rows, _HYBRID_COLUMNS)
    header = [c[0] for c in _HYBRID_COLUMNS]
    return _markdown(header, body) if markdown else _fixed(header, body)


def tune_table(rows: list[Mapping[str, Any]], markdown: bool = False) -> str:
    """The ``tuna bench tune`` rows (after :func:`with_ratios`) as a table."""
    body = _cells(rows, _TUNE_COLUMNS)
    header = [c[0] for c in _TUNE_COLUMNS]
    return _markdown(header, body) if markdown else _fixed(header, body)


def shortlist_summary(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the timed shortlist of one tuna run says of its pick (``tuna bench tune --shortlists``).

    ``candidates``: the run's predicted candidates, each with ``predicted_secs`` and its
    timing ``secs_a`` (None where it failed to run). The pick is the candidate predicted
    fastest. Returns ``shortlist_size`` (candidates timed), ``shortlist_fastest`` (seconds),
    ``pick_to_fastest`` (the shortlist's fastest over the pick's timing: 1 when the model
    picked the fastest schedule the search offered), ``fastest_rank`` (the fastest one's place
    in the model's order, 1 first), and ``shortlist_tau`` and ``shortlist_top10`` (the
    model's ranking of the shortlist, as ``tuna bench rank`` scores pools).
    """
    timed = [c for c in candidates if c.get("secs_a") and c.get("predicted_secs")]
    if not timed:
        return {"shortlist_size": 0}
    lat = np.array([c["secs_a"] for c in timed], dtype=float)
    score = -np.log([c["predicted_secs"] for c in timed])
    order = np.argsort(-score, kind="stable")
    fastest = int(lat.argmin())
    return {
        "shortlist_size": len(timed),
        "shortlist_fastest": float(lat[fastest]),
        "pick_to_fastest": float(lat[fastest] / lat[order[0]]),
        "fastest_rank": int(np.flatnonzero(order == fastest)[0]) + 1,
        "shortlist_tau": kendall_tau(lat, score) if len(timed) > 1 else None,
        "shortlist_top10": top_k_ratio(lat, score, min(10, len(timed))),
    }


#: What the columns of :func:`shortlist_table` mean.
SHORTLIST_CAPTION = (
    "Shortlist: every candidate a tuna run predicted (what its search handed over), timed here after the run. "
    "fastest: the shortlist's fastest schedule; pick/fastest: its latency over the pick's (1: the model picked the "
    "fastest schedule the search found); its rank: the fastest one's place in the model's order; fastest/pool best: "
    "the pool's best (re-timed with the picks) over the shortlist's fastest (below 1: the search never offered a "
    "schedule as fast); tau, top-10: the model's ranking of the shortlist."
)

_SHORTLIST_COLUMNS: tuple = (
    ("workload", "workload", str),
    ("method", "method", str),
    ("shortlist", "shortlist_size", str),
    ("fastest", "shortlist_fastest", _fmt_opt_secs),
    ("pick/fastest", "pick_to_fastest", _fmt_ratio),
    ("its rank", "fastest_rank", str),
    ("fastest/pool best", "search_to_reference", _fmt_ratio),
    ("tau", "shortlist_tau", _fmt_ratio),
    ("top-10", "shortlist_top10", _fmt_ratio),
)


def shortlist_table(rows: list[Mapping[str, Any]], markdown: bool = False) -> str:
    """The tuna rows of ``tuna bench tune --shortlists`` (after :func:`with_ratios`) as a table,
    with a last line of geometric means over the runs."""
    rows = [{**r, "search_to_reference": (r["reference"] / r["shortlist_fastest"]
                                          if r.get("reference") and r.get("shortlist_fastest") else None)}
            for r in rows if r.get("shortlist_size")]
    body = _cells(rows, _SHORTLIST_COLUMNS)
    header = [c[0] for c in _SHORTLIST_COLUMNS]
    table = _markdown(header, body) if markdown else _fixed(header, body)
    picked = [r["pick_to_fastest"] for r in rows]
    found = [r["search_to_reference"] for r in rows if r["search_to_reference"]]
    if picked:
        table += (f"\n{len(picked)} runs: pick/fastest geometric mean {statistics.geometric_mean(picked):.3f} "
                  f"({sum(p >= 0.952 for p in picked)} within 5%)")
    if found:
        table += (f"; fastest/pool best geometric mean {statistics.geometric_mean(found):.3f} "
                  f"({sum(f >= 0.952 for f in found)} within 5%)")
    return table


def _seeds(rows: Iterable[Mapping[str, Any]]) -> int:
    return len({r["seed"] for r in rows if r.get("seed") is not None})


def seed_summary(rows: list[Mapping[str, Any]], within: float = 0.952) -> str:
    """How tuna's picks vary with the seed, from ``tuna bench tune`` rows with several seeds.

    One line per search and workload with each seed's ratio to the pool's best, then per
    search how many picks came ``within`` of it (0.952: within 5%) and the worst, the
    geometric mean of the ratios, and, where MetaSchedule's row has a tuning time, the
    geometric mean over workloads of tuna's mean tuning time over MetaSchedule's.
    """
    table: dict[str, dict[str, dict[int, float | None]]] = {}
    times: dict[str, dict[str, list[float]]] = {}
    measured = {r["workload"]: r.get("tune_seconds") for r in rows if r["method"] == "metaschedule"}
    for r in rows:
        if r.get("seed") is None or not str(r["method"]).startswith("tuna-"):
            continue
        search = str(r["method"]).split("@", 1)[0]
        table.setdefault(search, {}).setdefault(r["workload"], {})[r["seed"]] = r.get("ratio_to_reference")
        if r.get("tune_seconds") and measured.get(r["workload"]):
            times.setdefault(search, {}).setdefault(r["workload"], []).append(r["tune_seconds"])
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
            mean = statistics.geometric_mean(v for v, _, _ in found)
            totals.append(f"{search}: {sum(v >= within for v, _, _ in found)} of {len(found)} picks within "
                          f"{(1 - within) * 100:.0f}% of the pool's best; worst {worst[0]:.3f} "
                          f"({worst[1]}, seed {worst[2]}); geometric mean {mean:.3f}")
        spent = times.get(search, {})
        if spent:
            ratios = [sum(t) / len(t) / measured[w] for w, t in spent.items()]
            totals.append(f"{search}: tuning time {statistics.geometric_mean(ratios):.3f}x "
                          f"MetaSchedule's with measurement (geometric mean over {len(ratios)} workloads "
                          "of the mean over seeds)")
    if not body:
        return "no picks with a ratio to a pool's best"
    return "\n".join(["Ratio to pool best by seed:", _fixed(header, body), *totals])


def network_table(rows: list[Mapping[str, Any]], markdown: bool = False) -> str:
    """The ``tuna bench network`` rows (after :func:`with_ratios`) as a table."""
    body = _cells(rows, _NETWORK_COLUMNS)
    header = [c[0] for c in _NETWORK_COLUMNS]
    return _markdown(header, body) if markdown else _fixed(header, body)


#: Models of the per-family table in BENCHMARKS.md: the held-out fits, and the baselines.
FAMILY_MODELS = ("tuna-full-lofo", "tuna-ir-lofo", "tuna-shortlist-lofo", "tuna-full-lofo+64", "xgb-64",
                 "xgb-64-tuna-full", "xgb-64-tuna-ir", "random")


def rank_markdown(rank: Mapping[str, Any]) -> str:
    """The mean rows of a ``tuna bench rank --json`` result as a markdown table, then (where
    the record has them) each operator family's means for the held-out fits and baselines."""
    header = ["model", "pools", *METRICS, "s/cand"]
    body = []
    for model, row in rank["mean"].items():
        secs = row.get("seconds_per_candidate")
        body.append([model, str(row.get("pools", "")), *(_fmt_ratio(row.get(m)) for m in METRICS),
                     _fmt_opt_secs(secs)])
    out = _markdown(header, body)
    families = rank.get("family_mean") or {}
    if families:
        header = ["family", "model", "pools", *METRICS]
        body = []
        for family in sorted({f for fams in families.values() for f in fams}):
            for model in FAMILY_MODELS:
                row = families.get(model, {}).get(family)
                if row:
                    body.append([family, model, str(row.get("pools", "")), *(_fmt_ratio(row.get(m)) for m in METRICS)])
        out += "\n\nPer operator family (`-lofo`: coefficients fitted without any pool of the family):\n\n"
        out += _markdown(header, body)
    return out


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
    hybrid: Mapping[str, Any] | None = None,
    figures: Mapping[str, str] | None = None,
    command: str = "scripts/benchmarks.sh",
    generated: str = "",
    note: str = "",
    more_ranks: Sequence[Mapping[str, Any]] = (),
) -> str:
    """BENCHMARKS.md from the JSON results of ``tuna bench rank / tune / network``.

    Parameters
    ----------
    rank, tune, network, hybrid : Mapping or None
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
    more_ranks : sequence of Mapping
        Further ``tuna bench rank`` results (e.g. of pools set aside), each in a section of
        its own after ``rank``'s, titled by the folder of its pools.

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
        "same pool, on its own features; `xgb-64-tuna-<tier>`: the same model on tuna's features of that tier "
        "(`tuna.FeatureExtractor`); `noise-ceiling`: the second timing as a model; `tuna-<tier>-unseen`: "
        "coefficients fitted without the pool ranked; `tuna-<tier>-lofo`: fitted without any pool of the pool's "
        "operator family; "
        "`tuna-shortlist[-lofo]`: the full tier ranks the IR tier's best quarter of each test set (its top-1 is a "
        "two-tier search's pick); `tuna-<tier>[-lofo]+64`: that prediction corrected by gradient-boosted trees on "
        "tuna's features fitted to its log error on the same 64 measured candidates as `xgb-64` (hybrid tuning's "
        "model).",
        "",
        rank_markdown(d),
    ])
    for more in more_ranks:
        sources = more.get("meta", {}).get("pools") or []
        try:
            folder = os.path.commonpath([os.path.dirname(s) for s in sources]) if sources else ""
        except ValueError:  # absolute and relative paths mixed: no one folder to name
            folder = ""
        where = f"the pools of `{folder}`" if folder else "more pools"
        section(f"Ranking {where} (`tuna bench rank`)", more, "", lambda d: [
            "The same models and metrics as above, on these pools only.", "", rank_markdown(d)])
    section("Offline tuning against measured tuning (`tuna bench tune`)", tune, "tune", lambda d: [
        "Each pick re-timed on this machine (median of 5 `time_evaluator` repeats). `metaschedule@tuna-time`: "
        "the best candidate MetaSchedule (XGBModel, real measurement) had measured when tuna's tuning time had "
        "passed; `metaschedule`: its full budget. " + TUNE_CAPTION,
        "",
        tune_table(d["rows"], markdown=True),
        *(["", "```text", seed_summary(d["rows"]), "```"] if _seeds(d["rows"]) > 1 else []),
        *(["", "With `--shortlists`. " + SHORTLIST_CAPTION, "", shortlist_table(d["rows"], markdown=True)]
          if any(r.get("shortlist_size") for r in d["rows"]) else []),
    ])
    section("Whole networks (`tuna bench network`)", network, "network", lambda d: [
        "Batch 1, random weights, built with TVM Relax from `tuna/integration/networks.py`. `untuned`: "
        "`tvm.compile` with TVM's default CPU pipeline; `tuna`: `tuna tune NETWORK` (tuna's ES on every task, "
        "its cost model and static runner, MetaSchedule's gradient task scheduler); `metaschedule`: the same "
        "tasks and trials per task with XGBModel and real measurement; `pytorch`: the same graph and weights "
        "in PyTorch eager mode. Trials: candidates tuned (a task whose design space holds fewer schedules "
        "stops early, with both tuners). Latency: `VirtualMachine.time_evaluator`, median of 5, every way "
        "timed at the end of the network, in turn, three rounds (median). Tuning time and latency side by "
        "side, as in Tables I and II of the Tuna paper.",
        "",
        network_table(d["rows"], markdown=True),
    ])
    section("Tuning with few measurements (`tuna bench hybrid`)", hybrid, "hybrid", lambda d: [
        "Three tuners measure on this machine: `metaschedule` (its defaults: XGBModel on its own features, 64 "
        "candidates a round), `xgb-tuna` (the same XGBModel on `tuna.FeatureExtractor`'s IR-tier rows, 8 a "
        "round) and `tuna-hybrid` (`tuna tune --measure N`: tuna's ES on `TunaCostModel(calibrate=True)`, 8 a "
        "round, the model's best of those whose tuna features differ from each other and from every candidate "
        "measured before). " + HYBRID_CAPTION,
        "",
        hybrid_table(d["rows"], markdown=True),
    ])
    return "\n".join(out).rstrip() + "\n"
