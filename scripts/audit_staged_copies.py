"""How the CPU IR tier's errors depend on staging copies, and three ways of pricing them tried.

    .venv/bin/python scripts/audit_staged_copies.py [POOLS ...] --target PRESET [--threshold BYTES]
        [--json out.json]

A staging copy is a subtree of the loop tree whose statements only copy (no arithmetic) and
that runs beside other subtrees of the same loop, as MetaSchedule's cache reads (a padded
input tile) and write-backs are. Each candidate of each pool falls in one group: ``exposed``
(some staging copy moves more than ``--threshold`` bytes of the kernel's own inputs and
outputs each time it runs: a phase of memory traffic with nothing to compute beside it),
``small`` (staging copies, all under the threshold: interleaved with the computation) or
``none``. Printed per operator family: the IR tier's error of each group (the mean log of
measured over predicted time, each pool's median error taken out), and the pools where the
exposed group runs slower than predicted relative to the small one, and the pools whose five
fastest candidates are all exposed (where the groups cannot decide the lead). Then the ranking
(every candidate, top-1/top-5/top-10/a-peak@32/tau; per pool in ``--json``) by the IR tier as
shipped and by three ways of pricing the phases: a factor ``exp(b)`` on the exposed group's
predictions (``factor``), the exposed bytes at ``w`` times the time one core's L2 takes to fill
with them from L3 added (``added``; the pools are timed with TVM's pool of one thread), and the
overlap ``l * min(compute, memory)`` taken off the predictions of the other groups (``overlap``).
No candidate is compiled (the IR tier only); the times come from the pools.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

import tuna
from tuna.bench.metrics import all_metrics
from tuna.cli import _load_pools
from tuna.cpu import ir_tier
from tuna.cpu.cache import footprint_lines
from tuna.errors import TunaError
from tuna.integration import kernel_from_module, pool_module
from tuna.integration.analysis import apply_trace
from tuna.ir import KernelIR, Loop, Statement

GROUPS = ("exposed", "small", "none")
#: Floating-point work (tuna.ir.Statement.ops); a copy may still compare and divide indices.
ARITHMETIC = frozenset({"fma", "add", "mul", "div", "special", "math"})
MEMORY = ("l1_fill_cycles", "l2_fill_cycles", "l3_fill_cycles", "dram_cycles")
VARIANTS = (("shipped", 0.0), ("factor", 0.05), ("factor", 0.1), ("factor", 0.2), ("added", 0.25),
            ("added", 0.5), ("added", 1.0), ("overlap", 0.25), ("overlap", 0.5))


def _copies_only(node: Loop | Statement) -> bool:
    if isinstance(node, Statement):
        return len(node.accesses) == 2 and not any(n for kind, n in node.ops if kind in ARITHMETIC)
    return all(_copies_only(child) for child in node.body)


def staging_copies(kernel: KernelIR, line_bytes: int) -> list[tuple[int, int]]:
    """(times run, bytes of the kernel's parameters moved each time) of each staging copy."""
    params = set(kernel.params)
    found: list[tuple[int, int]] = []

    def visit(body: tuple, runs: int) -> None:
        for child in body:
            if len(body) > 1 and _copies_only(child):
                lines = footprint_lines(child, line_bytes)
                found.append((runs, sum(n for buf, n in lines.items() if buf in params) * line_bytes))
            elif isinstance(child, Loop):
                visit(child.body, runs * child.extent)

    visit(kernel.body, 1)
    return found


def _predictions(variant: str, p: float, base, exposed_cycles, compute, memory) -> np.ndarray:
    if variant == "factor":
        return base * np.exp(p * (exposed_cycles > 0))
    if variant == "added":
        return base + p * exposed_cycles
    if variant == "overlap":
        return base - p * np.minimum(compute, memory) * (exposed_cycles == 0)
    return base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pools", nargs="*", help="pool files or folders of them (default: the shipped pools)")
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--threshold", type=int, default=4096, help="bytes a staging copy moves per run")
    parser.add_argument("--json")
    args = parser.parse_args()
    try:
        mach = tuna.resolve(args.target)
        pools = _load_pools(args.pools)
    except (TunaError, OSError) as err:
        raise SystemExit(f"audit_staged_copies: {err}") from None
    l2 = next(level for level in mach.caches if level.level == 2)
    errors: dict[str, list[dict[str, float]]] = defaultdict(list)
    ranking: dict[str, list[dict[str, float]]] = defaultdict(list)
    by_pool: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    lead_exposed: list[bool] = []  # pools with both groups: are their five fastest all exposed?
    for pool in pools:
        mod = pool_module(pool)
        rows = []
        for i, trace in enumerate(pool.traces):
            try:
                kernel = kernel_from_module(apply_trace(mod, trace).mod)
                est = ir_tier.estimate(kernel, mach)
            except TunaError:
                continue  # a candidate that no longer lowers: no prediction to compare
            copies = staging_copies(kernel, l2.line_bytes)
            exposed = sum(runs * size for runs, size in copies if size > args.threshold)
            group = "exposed" if exposed else ("small" if copies else "none")
            f = est.features
            rows.append((float(pool.secs_a[i]), f["cycles"], exposed / l2.bytes_per_cycle,
                         f.get("compute_cycles", 0.0), sum(f.get(t, 0.0) for t in MEMORY), group))
        if not rows:
            print(f"   {pool.name}: no candidate lowers, left out", flush=True)
            continue
        lat, base, exposed_cycles, compute, memory = (np.array([r[k] for r in rows]) for k in range(5))
        groups = np.array([r[5] for r in rows])
        err = np.log(lat) - np.log(base)
        err -= np.median(err)
        errors[pool.family].append({g: float(err[groups == g].mean()) for g in GROUPS if (groups == g).any()})
        if {"exposed", "small"} <= set(groups):
            lead_exposed.append(bool((groups[np.argsort(lat)[:5]] == "exposed").all()))
        for variant, p in VARIANTS:
            pred = _predictions(variant, p, base, exposed_cycles, compute, memory)
            metrics = all_metrics(lat, -pred)
            ranking[f"{variant} {p:g}"].append(metrics)
            by_pool[f"{variant} {p:g}"][pool.name] = metrics
        print(f"   {pool.name}: {', '.join(f'{g} {(groups == g).sum()}' for g in GROUPS)}", flush=True)
    if not ranking:
        raise SystemExit("audit_staged_copies: no pool had a candidate to audit")
    print(f"\n{'family':<18}{'pools':>6}" + "".join(f"{g + ' error':>16}" for g in GROUPS)
          + f"{'exposed-small':>15}{'pools >0':>10}")
    table = {}
    for family in sorted(errors):
        pools_errors = errors[family]
        mean = {g: float(np.mean([e[g] for e in pools_errors if g in e])) if any(g in e for e in pools_errors)
                else None for g in GROUPS}
        both = [e["exposed"] - e["small"] for e in pools_errors if "exposed" in e and "small" in e]
        table[family] = {"pools": len(pools_errors), **mean,
                         "exposed_minus_small": float(np.mean(both)) if both else None,
                         "pools_compared": len(both), "pools_positive": sum(d > 0 for d in both)}
        print(f"{family:<18}{len(pools_errors):>6}"
              + "".join(f"{mean[g]:>+16.3f}" if mean[g] is not None else f"{'-':>16}" for g in GROUPS)
              + (f"{np.mean(both):>+15.3f}{sum(d > 0 for d in both):>6}/{len(both)}" if both else f"{'-':>15}"))
    print("(error: mean log of measured over predicted time, each pool's median taken out)")
    print(f"pools whose five fastest candidates are all exposed: {sum(lead_exposed)} of the {len(lead_exposed)}"
          " that hold exposed and small ones")
    metrics = list(next(iter(ranking.values()))[0])
    print(f"\n{'IR tier':<16}" + "".join(f"{m:>11}" for m in metrics))
    means = {}
    for name, per_pool in ranking.items():
        means[name] = {m: float(np.mean([r[m] for r in per_pool])) for m in metrics}
        print(f"{name:<16}" + "".join(f"{means[name][m]:>11.3f}" for m in metrics))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"pools": [p.source for p in pools], "machine": mach.name, "threshold": args.threshold,
                       "families": table, "five_fastest_exposed": [sum(lead_exposed), len(lead_exposed)],
                       "ranking": means, "ranking_by_pool": by_pool}, out, indent=1)


if __name__ == "__main__":
    main()
