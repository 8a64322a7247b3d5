"""How much faster worker processes score an ES population: 1 worker against N, in one run.

    .venv/bin/python scripts/bench_search_parallel.py [--workload C2D:1] [--population 128]
        [--workers 2] [--repeats 3] [--tier ir] [--cluster local:2]

It samples one ES population from the workload's design spaces (seeded), then scores the
same candidates with a pool of 1 worker and a pool of N, alternating 1, N, 1, N, ...
``--repeats`` times, workers started and warmed up beforehand (their start-up is not
timed). It prints the median seconds of each, the speed-up, and how many cores the
workers kept busy (their CPU seconds over the wall-clock seconds: below N means other
processes had the cores); the scores must agree.
With ``--cluster`` it also times a Dask cluster (``local:N`` starts one on this machine).
Timings taken while other work runs on the machine are noisy: compare only the ratio.
"""

import argparse
import os
import statistics
import time

import psutil

from tuna import integration
from tuna.integration import search_strategy
from tuna.search import es, workers


def _cpu(pids: list[int]) -> float:
    """CPU seconds used so far by these processes (the workers)."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _timed(evaluate, traces, pids: list[int]) -> tuple[float, float, list[float]]:
    """Wall seconds, workers' CPU seconds, and the scores of one batch."""
    cpu = _cpu(pids)
    start = time.perf_counter()
    scores = evaluate(traces)
    return time.perf_counter() - start, _cpu(pids) - cpu, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="C2D:1")
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--population", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tier", default="ir", choices=["ir", "full"])
    parser.add_argument("--cluster", help="also time a Dask cluster (tcp://host:port or local:N)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    mach = integration.as_machine(args.target)
    mod = integration.load_workload(args.workload)
    spaces, ctx = search_strategy.design_spaces(mod, mach)
    sampler = es.EvolutionStrategies(spaces.search_space(), es.ESConfig(population=args.population), seed=args.seed)
    population = sampler.ask().novel
    traces = [spaces.trace(c) for c in population]
    spec = search_strategy.worker_spec(mod, ctx.space_generator.postprocs, mach, args.tier)
    print(f"{args.workload}: {len(traces)} distinct candidates, {args.tier} tier, {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}")

    pools = {n: workers.ProcessPool(search_strategy.worker_setup, search_strategy.worker_score, spec, workers=n)
             for n in (1, args.workers)}
    times: dict[str, list[float]] = {name: [] for name in (f"{n} worker(s)" for n in pools)}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    reference = None
    try:
        for pool in pools.values():
            pool.start()
            pool(traces[: 2 * pool.workers])  # first calls load the analyses' own imports
        for _ in range(args.repeats):
            for n, pool in pools.items():
                secs, used, scores = _timed(pool, traces, [w.process.pid for w in pool._pool])
                times[f"{n} worker(s)"].append(secs)
                cpu[f"{n} worker(s)"].append(used)
                reference = reference or scores
                if scores != reference:
                    raise SystemExit(f"{n} workers scored differently from 1 worker")
        if args.cluster:
            with workers.DaskEvaluator(args.cluster, search_strategy.worker_setup, search_strategy.worker_score,
                                       spec) as dask_eval:
                dask_eval(traces[: 2 * dask_eval.workers])
                name = f"dask {args.cluster} ({dask_eval.workers} threads)"
                times[name], cpu[name] = [], []
                for _ in range(args.repeats):
                    secs, used, scores = _timed(dask_eval, traces, [])
                    times[name].append(secs)
                    cpu[name].append(float("nan"))
                    if scores != reference:
                        raise SystemExit("the Dask cluster scored differently from 1 worker")
    finally:
        for pool in pools.values():
            pool.close()

    base = statistics.median(times["1 worker(s)"])
    for name, secs in times.items():
        med = statistics.median(secs)
        busy = statistics.median(c / s for c, s in zip(cpu[name], secs))
        runs = ", ".join(f"{s:.2f}" for s in secs)
        print(f"  {name:<32} median {med:7.2f} s ({len(traces) / med:6.1f} candidates/s) "
              f"speed-up {base / med:4.2f}x  workers busy {busy:4.2f} cores   runs: {runs}")
    print(f"load average after: {os.getloadavg()[0]:.2f} (other work on the machine makes these noisy)")


if __name__ == "__main__":
    main()
