"""Hybrid tuning's rounds replayed on measured pools: what picks the candidates to measure.

    .venv/bin/python scripts/bench_hybrid_pick.py [POOLS ...] --features-cache DIR \
        [--shortlist 32] [--rounds 4] [--per-round 8] [--draws 5] [--json out.json]

Each pool (the shipped ones by default) stands for a search space whose candidates are all
known: in each round the learning model of hybrid tuning (the IR tier corrected by what was
measured so far: ``TunaCostModel(calibrate=True)``) ranks the candidates not yet measured,
keeps its best ``--shortlist`` whose feature rows differ from each other and from those
measured (as the hybrid ES hands over), and ``--per-round`` of them are "measured" (their
pool time ``secs_a``) by one of three rules:

- ``model``: the model's best (``tune(..., pick_tier="ir")``);
- ``full``: the full tier's best among the shortlist (``pick_tier="full"``, the default);
- ``random``: any candidates not measured yet.

Each pool is replayed ``--draws`` times, each on a random three quarters of its candidates.
Printed per pool and rule: the best measured after the last round over the best of the
draw's candidates (1: the pool's best found), then per round the mean, the geometric mean
and the share of (pool, draw) pairs within 5% of the best. Features come from
``--features-cache`` (as ``tuna bench rank`` keeps them) or are analysed and kept there.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

import tuna
from tuna.cli import _cached_features, _load_pools
from tuna.integration.cost_model.correction import MIN_MEASURED, Correction, scores
from tuna.integration.feature_extractor import feature_row

RULES = ("model", "full", "random")


def replay(secs, ir_rows, full_rows, rule, rng, keep, shortlist, rounds, per_round):
    """The best measured time after each round of one replay of ``rule`` on the candidates ``keep``."""
    measured: list[int] = []
    bests = []
    for _ in range(rounds):
        left = np.array([i for i in keep if i not in set(measured)])
        if rule == "random":
            picks = list(rng.choice(left, min(per_round, len(left)), replace=False))
        else:
            correction = None
            if len(measured) >= MIN_MEASURED:
                correction = Correction([ir_rows[i] for i in measured], [math.log(secs[i]) for i in measured])
            order = left[np.argsort(-scores(ir_rows[left], correction), kind="stable")]
            seen = {ir_rows[i].tobytes() for i in measured}
            short: list[int] = []
            for i in order:
                key = ir_rows[i].tobytes()
                if key not in seen:
                    seen.add(key)
                    short.append(int(i))
                if len(short) == shortlist:
                    break
            # too few distinct rows left: repeated ones fill the shortlist, as in the ES
            short += [int(i) for i in order if int(i) not in short][:max(0, min(per_round, len(order)) - len(short))]
            if rule == "model":
                picks = short[:per_round]
            else:
                full = scores(full_rows[short])
                picks = [short[j] for j in np.argsort(-full, kind="stable")[:per_round]]
        measured += [int(i) for i in picks]
        bests.append(float(secs[measured].min()))
    best = float(secs[keep].min())
    return [best / b for b in bests]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pools", nargs="*", help="pool files or folders of them (default: the shipped pools)")
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--features-cache", required=True)
    parser.add_argument("--shortlist", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=8)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    mach = tuna.resolve(args.target)
    pools = _load_pools(args.pools)
    feats, _ = _cached_features(pools, mach, ["ir", "full"], args.features_cache)
    results: dict[str, dict[str, list[list[float]]]] = {}
    for pool in pools:
        ir_rows = np.array([feature_row(f, mach, "ir") for f in feats["ir"][pool.name]])
        full_rows = np.array([feature_row(f, mach, "full") for f in feats["full"][pool.name]])
        results[pool.name] = {}
        for rule in RULES:
            runs = []
            for draw in range(args.draws):
                rng = np.random.default_rng(draw)
                n = len(pool.secs_a)
                keep = np.sort(rng.choice(n, int(0.75 * n), replace=False))
                runs.append(replay(pool.secs_a, ir_rows, full_rows, rule, rng, keep, args.shortlist, args.rounds,
                                   args.per_round))
            results[pool.name][rule] = runs
        print(f"{pool.name:<45} {pool.family:<12} "
              + "  ".join(f"{r} {np.mean([x[-1] for x in results[pool.name][r]]):.3f}" for r in RULES), flush=True)
    summary = {}
    for rule in RULES:
        for k in range(args.rounds):
            vals = np.array([run[k] for pool in results.values() for run in pool[rule]])
            summary[f"{rule}@{args.per_round * (k + 1)}"] = {
                "mean": float(vals.mean()), "geomean": float(np.exp(np.log(vals).mean())),
                "within_5pct": float((vals >= 1 / 1.05).mean())}
            s = summary[f"{rule}@{args.per_round * (k + 1)}"]
            print(f"{rule:<7} after {args.per_round * (k + 1):>3} measured: mean {s['mean']:.3f}, "
                  f"geometric mean {s['geomean']:.3f}, within 5% {s['within_5pct']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pools": [p.name for p in pools], "shortlist": args.shortlist, "draws": args.draws,
                       "summary": summary, "per_pool": results}, f, indent=1)


if __name__ == "__main__":
    main()
