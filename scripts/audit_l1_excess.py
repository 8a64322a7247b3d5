"""The full tier's error against L1 fills per compute cycle, and a grid of ``l1_excess_cycles``.

For the CPU pools given (files or folders; ``--sample N`` draws N candidates of each, as
``tuna bench rank --sample`` does), the script reads the full tier's features (analysing the
pools where ``--features-cache`` has none), then prints:

- the within-pool error of the shipped coefficients without the term (log of measured, the
  mean of a candidate's two timings, over predicted time, each pool's median removed),
  binned by ``l1_fill_cycles / compute_cycles``;
- the mean ranking metrics over the pools (``bench rank``'s test split, seed 0) with the term
  at 0, as shipped, and for each knee and price (``tuna.linear.L1_EXCESS``) of the grid, the
  other coefficients as shipped. A knee is a share of the compute cycles
  (``tuna.cpu.full_tier.L1_HIDDEN_SHARE``), or with ``--bytes`` L1 fill bytes a compute cycle,
  turned into a share at the target's L1 fill rate (how a knee in bytes, one for every
  machine, was tried on Zen 3 on 2026-12-04: BENCHMARKS.md, "Zen 3's third held-out set").

This is how the term's knee and price were chosen on development pools (BENCHMARKS.md, "L1
fills the computation does not hide"). Usage::

    .venv/bin/python scripts/audit_l1_excess.py docs/bench/heldout-pools-{17,18,19,20,21} \\
        --features-cache DIR
"""

from __future__ import annotations

import argparse
import itertools
import math

import numpy as np

from tuna import linear
from tuna.bench import evaluation, metrics
from tuna.cli import _cached_features, _load_pools
from tuna.cpu.full_tier import L1_HIDDEN_SHARE, l1_excess_cycles
from tuna.machine import preset

EDGES = (0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1, 1.2, 1.5, 2, 3, 5, math.inf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pools", nargs="+")
    ap.add_argument("--features-cache")
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--target", default="zen4")
    ap.add_argument("--knees", default="0.2,0.25,0.3,0.35,0.4")
    ap.add_argument("--bytes", action="store_true", help="knees in L1 fill bytes a compute cycle")
    ap.add_argument("--prices", default="1,1.5,2,2.5,3,3.5,4")
    args = ap.parse_args()
    mach = preset(args.target)
    coeffs = linear.coefficients(mach, "full")
    shipped = coeffs.values.get("l1_excess_cycles", 0.0)
    chosen = _load_pools(args.pools, args.sample or None)
    feats = _cached_features(chosen, mach, ["full"], args.features_cache)[0]["full"]

    def cycles(r: dict, knee: float, price: float) -> float:
        extra = l1_excess_cycles(r, knee)
        return max(coeffs.cycles(r) - shipped * r.get("l1_excess_cycles", 0.0) + price * extra, 1.0)

    errors, ratios = [], []
    for pool in chosen:
        rows = feats[pool.name]
        measured = (pool.secs_a + pool.secs_b) / 2 if pool.second_timing else pool.secs_a
        ok = [i for i, r in enumerate(rows) if r is not None and math.isfinite(measured[i]) and measured[i] < 1e9]
        err = np.log(measured[ok]) - np.log([cycles(rows[i], 0.0, 0.0) for i in ok])
        errors += list(err - np.median(err))
        ratios += [rows[i]["l1_fill_cycles"] / max(rows[i]["compute_cycles"], 1.0) for i in ok]
    errors, ratios = np.array(errors), np.array(ratios)
    print("fills per compute cycle | candidates | mean error | as a ratio")
    for lo, hi in itertools.pairwise(EDGES):
        sel = (ratios >= lo) & (ratios < hi)
        if sel.any():
            print(f"{lo}-{hi} | {sel.sum()} | {errors[sel].mean():+.3f} | {math.exp(errors[sel].mean()):.2f}x")

    def mean_metrics(knee: float, price: float) -> np.ndarray:
        out = []
        for pool in chosen:
            rows = feats[pool.name]
            _, test = evaluation.split(pool, 0)
            score = [-math.log(cycles(rows[i], knee, price)) if rows[i] is not None else -math.inf for i in test]
            m = metrics.all_metrics(pool.secs_a[test], np.array(score))
            out.append([m[k] for k in metrics.METRICS])
        return np.mean(out, axis=0)

    base = mean_metrics(0.0, 0.0)
    print(f"{len(chosen)} pools; without the term:", "/".join(f"{x:.3f}" for x in base),
          f"({'/'.join(metrics.METRICS)})")
    m = mean_metrics(L1_HIDDEN_SHARE, shipped)
    print(f"as shipped (knee {L1_HIDDEN_SHARE}, price {shipped}):", "/".join(f"{x:.3f}" for x in m))
    per_byte = 1 / next(c.bytes_per_cycle for c in mach.caches if c.level == 1)
    for knee in map(float, args.knees.split(",")):
        share = knee * per_byte if args.bytes else knee
        for price in map(float, args.prices.split(",")):
            m = mean_metrics(share, price)
            print(f"knee {knee}{' bytes' if args.bytes else ''} (share {share:.3f}) price {price}:",
                  "/".join(f"{x:.3f}" for x in m), f"(top-10 {m[2] - base[2]:+.3f}, tau {m[4] - base[4]:+.3f})")


if __name__ == "__main__":
    main()
