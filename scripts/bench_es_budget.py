"""Offline tuning with other ES budgets: pick quality and tuning time per setting, in one run.

    .venv/bin/python scripts/bench_es_budget.py GMM:1 resnet18/fused_conv2d4_add3@docs/bench/heldout-pools-3 \
        [--configs 5:1,2.5:1,2.5:0.5,2.5:0.25] [--seeds 0,1,2] [--trials 64] [--json out.json]

Each config is ``SCORED:SHARE``: the IR tier scores ``SCORED * population_size`` candidates
per round (``es_runs.ES_SCORED_PER_POPULATION``) and the full tier analyses ``SHARE`` of
those handed over (``es_runs.ES_FULL_SHARE``). Every workload (``NAME@POOLS_DIR`` for a pool
outside the shipped ones) is tuned with each config and seed (``tuna.tune``, defaults
otherwise), then all picks and the best candidate of the workload's measured pool are timed
here, in turn (``time_interleaved``), so that the ratios (pool best / pick) compare under
one load. Prints a line per workload and config, then the geometric means.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import tuna
from tuna.bench.pools import shipped_pool
from tuna.integration.analysis import apply_trace
from tuna.integration.measure.measured_tuning import quiet_metaschedule
from tuna.integration.measure.timing import time_interleaved
from tuna.integration.search_strategy import es_runs
from tuna.integration.tuning import tune


def _geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--configs", default="5:1,2.5:1,2.5:0.5,2.5:0.25")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--json")
    args = parser.parse_args()
    configs = [tuple(float(x) for x in c.split(":")) for c in args.configs.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    mach = tuna.resolve(args.target)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="tuna-es-budget-"))
    try:
        for item in args.workloads:
            workload, _, folder = item.partition("@")
            pool = shipped_pool(workload, folder or None)
            if pool is None:
                raise SystemExit(f"no measured pool of {workload} in {folder or 'the shipped pools'}")
            mod = tuna.load_workload(workload)
            picks, mine = [], []
            for scored, share in configs:
                es_runs.ES_SCORED_PER_POPULATION, es_runs.ES_FULL_SHARE = scored, share
                for seed in seeds:
                    quiet_metaschedule()
                    result = tune(mod, mach, work / f"{len(rows)}", max_trials=args.trials, seed=seed)
                    mine.append({"workload": workload, "scored": scored, "share": share, "seed": seed,
                                 "seconds": result.setup_seconds + result.tune_seconds,
                                 "ir_predicted": result.ir_predicted})
                    picks.append(result.schedule.mod)
                    rows.append(mine[-1])
            picks.append(apply_trace(mod, pool.traces[int(pool.secs_a.argmin())]).mod)
            latencies = time_interleaved(picks, mach, seed=0)
            for row, latency in zip(mine, latencies):
                row["latency"], row["ratio"] = latency, latencies[-1] / latency
            for scored, share in configs:
                mine_c = [r for r in mine if (r["scored"], r["share"]) == (scored, share)]
                print(f"{workload:<46} {scored:>4}:{share:<5} ratio to pool best "
                      f"{_geomean([r['ratio'] for r in mine_c]):.3f} (worst {min(r['ratio'] for r in mine_c):.3f}), "
                      f"{sum(r['seconds'] for r in mine_c) / len(mine_c):.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    by = defaultdict(list)
    for row in rows:
        by[row["scored"], row["share"]].append(row)
    print(f"\n{'config':<12}{'geomean ratio':>15}{'within 10%':>12}{'geomean seconds':>17}")
    for (scored, share), rs in by.items():
        print(f"{scored:>4}:{share:<7}{_geomean([r['ratio'] for r in rs]):>15.3f}"
              f"{sum(r['ratio'] >= 0.9 for r in rs):>7}/{len(rs):<4}{_geomean([r['seconds'] for r in rs]):>17.1f}")
    if args.json:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        Path(args.json).write_text(json.dumps({"rows": rows, "when": when}, indent=1))


if __name__ == "__main__":
    main()
