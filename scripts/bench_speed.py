"""Analysis time per candidate against TVM's own compile time, measured in one run.

    .venv/bin/python scripts/bench_speed.py [POOL ...] [--target T] [--every N] [--json FILE]

POOL: a shipped pool's name (``GMM-1``), a pool file (``docs/bench/gnr-pools/DEP-0.json.gz``) or a
folder of pools; default GMM-1 C2D-1 SFM-1. For every Nth candidate of each pool (default 8), each on the same
scheduled module: TVM compiling it to an object (the floor the full tier cannot go under), tuna's
full tier (which compiles too) split into its stages (TVM's compile to a runtime module, LLVM's
object emission, tuna's kernel IR, disassembly and the full tier's analysis), and the IR tier
(tuna's kernel IR, which runs TVM's buffer compaction, and the analysis). Printed: the mean over
the candidates, which is what a search pays.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from tuna import bench, integration, tiers
from tuna.cli import _load_pools
from tuna.cpu import disassembly
from tuna.errors import TunaError
from tuna.integration import analysis, lower
from tuna.integration.workloads import as_machine, tvm_target

#: Stages of the full tier, timed one after the other on the same module.
FULL_STAGES = ("tvm compile", "object emission", "kernel IR", "disassembly", "full analysis")
#: Stages of the IR tier.
IR_STAGES = ("kernel IR (IR tier)", "IR analysis")


def _pools(specs: list[str]) -> list[tuple[str, bench.Pool]]:
    """``(label, pool)`` for each pool file, folder of pools (as ``tuna bench rank`` reads them) or
    shipped pool's name."""
    out = []
    for spec in specs:
        if Path(spec).exists():
            out += [(pool.source, pool) for pool in _load_pools([spec])]
        elif (pool := bench.shipped_pool(spec)) is not None:
            out.append((spec, pool))
        else:
            raise SystemExit(f"bench_speed: {spec}: neither a pool file or folder nor a pool tuna ships")
    return out


def _time_candidate(mod, machine, spent: dict[str, float]) -> None:
    import tvm

    # The IR tier first: the full tier's analysis runs the IR tier's too, and caches it.
    marks = [time.perf_counter()]
    kernel = lower.kernel_from_module(mod)
    marks.append(time.perf_counter())
    tiers.analyze(kernel, machine, "ir")
    marks.append(time.perf_counter())
    for stage, t0, t1 in zip(IR_STAGES, marks, marks[1:]):
        spent[stage] += t1 - t0

    start = time.perf_counter()
    integration.compile_objects(mod, machine)
    spent["compile (reference)"] += time.perf_counter() - start

    marks = [time.perf_counter()]
    executable = tvm.compile(mod, tvm_target(machine))
    marks.append(time.perf_counter())
    obj = analysis.object_code(executable.mod)
    marks.append(time.perf_counter())
    kernel = lower.kernel_from_module(mod)
    marks.append(time.perf_counter())
    code = disassembly.kernel_code([obj])
    marks.append(time.perf_counter())
    tiers.analyze(dataclasses.replace(kernel, code=code), machine, "full")
    marks.append(time.perf_counter())
    for stage, t0, t1 in zip(FULL_STAGES, marks, marks[1:]):
        spent[stage] += t1 - t0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pools", nargs="*", default=["GMM-1", "C2D-1", "SFM-1"])
    parser.add_argument("--target", default="zen4", help="preset to compile for and model (default zen4)")
    parser.add_argument("--every", type=int, default=8, help="time every Nth candidate of a pool (default 8)")
    parser.add_argument("--json", help="also write the per-pool means (seconds) here")
    args = parser.parse_args(argv)
    try:
        machine = as_machine(args.target)
        pools = _pools(args.pools)
    except TunaError as err:
        raise SystemExit(f"bench_speed: {err}") from None
    if machine.kind != "cpu":
        raise SystemExit(f"bench_speed: times the CPU tiers; {args.target} is a {machine.kind}")
    out = {}
    for spec, pool in pools:
        mod = integration.pool_module(pool)
        spent = dict.fromkeys(("compile (reference)", *FULL_STAGES, *IR_STAGES), 0.0)
        n = 0
        for trace in pool.traces[:: args.every]:
            try:
                sch = integration.apply_trace(mod, trace)
                _time_candidate(sch.mod, machine, spent)
            except Exception as err:  # a candidate that does not build is not timed
                print(f"  {spec}: a candidate skipped: {type(err).__name__}: {err}"[:200], file=sys.stderr)
                continue
            n += 1
        if not n:
            print(f"{spec}: no candidate built")
            continue
        mean = {k: v / n for k, v in spent.items()}
        full = sum(mean[s] for s in FULL_STAGES)
        ir = sum(mean[s] for s in IR_STAGES)
        ref = mean["compile (reference)"]
        stages = ", ".join(f"{s} {mean[s] * 1e3:.1f}" for s in FULL_STAGES)
        print(f"{spec}: {n} candidates; TVM compile {ref * 1e3:.0f} ms, full tier {full * 1e3:.0f} ms "
              f"({full / ref:.2f}x compile; {stages}), IR tier {ir * 1e3:.1f} ms ({ir / ref:.3f}x compile; "
              f"kernel IR {mean[IR_STAGES[0]] * 1e3:.1f}, analysis {mean[IR_STAGES[1]] * 1e3:.1f})")
        out[spec] = {"candidates": n, **mean, "full tier": full, "IR tier": ir}
    if args.json:
        Path(args.json).write_text(json.dumps({"target": args.target, "pools": out}, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
