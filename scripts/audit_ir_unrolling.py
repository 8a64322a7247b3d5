"""Where the CPU IR tier's model of LLVM's loop unrolling disagrees with the code LLVM emits.

    .venv/bin/python scripts/audit_ir_unrolling.py [POOLS ...] --target PRESET [--sample N] [--code-cache F]
        [--json out.json]

For a seeded sample of each pool's candidates (``--sample``, 24 by default) whose statement
with the most multiply-adds ends in a loop TVM vectorized, the FMA instructions in one
iteration of the innermost loop that stays rolled around it: as the IR tier's code
generation model has it (:func:`tuna.cpu.codegen.rolled_around`: the copies the loops it
takes for unrolled make, one per vector of the vectorized loop) and as the machine code has
it (the innermost loop of the disassembly with the most FMAs executed, its FMA instructions).
Each candidate falls in one cell: the counts agree; LLVM partly unrolled the innermost loop
the model keeps (the code's count a multiple of the model's that divides that loop's trip
count: a loop's overhead, the same accesses); LLVM unrolled more than that (a loop the model
keeps rolled unrolled completely: accumulators it may keep in registers); or less (a loop
the model unrolls kept: its body's accesses once an iteration). Printed per operator family,
with the median time of each cell's candidates over their pool's best. Candidates are
compiled here for the preset (no timing: the measured times come from the pools); with
``--code-cache`` the code's counts are kept in that file and read back on the next run, which
then compiles nothing: a change to the model is audited in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from collections import defaultdict

import numpy as np

import tuna
from tuna.cli import _load_pools
from tuna.cpu import cfg, codegen, loop_mapping
from tuna.errors import TunaError
from tuna.integration import kernel_from_module, pool_module
from tuna.integration.analysis import apply_trace, kernel_with_code
from tuna.ir import LoopKind, walk

CELLS = ("agree", "LLVM partly unrolls", "LLVM unrolls more", "LLVM unrolls less")


def _model_fmas(kernel, machine) -> tuple[int, int] | None:
    """FMA instructions an iteration of the innermost rolled loop around the heaviest statement
    holds in the model, and that loop's trip count (None: no TVM-vectorized multiply-add)."""
    fmas = [(stmt.op_count("fma") * math.prod(lp.extent for lp in loops), n, stmt, loops)
            for n, (stmt, loops) in enumerate(walk(kernel.body)) if stmt.op_count("fma")]
    if not fmas:
        return None
    _, _, stmt, loops = max(fmas, key=lambda t: t[:2])
    if loops[-1].kind != LoopKind.VECTORIZED:
        return None  # LLVM's own vectorizer decides the lanes: another audit's question
    homes = {a.name: a.loop for a in kernel.allocations}
    return codegen.ops_per_rolled_iteration(stmt, loops, machine, frozenset(codegen.tvm_unrolled(kernel)), homes)


def _code_fmas(kernel, machine) -> int:
    """FMA instructions of the innermost machine loop that executes the most of them."""
    hot = (0.0, 0)
    for fm in loop_mapping.map_kernel(kernel, machine):
        blocks = {b.start: b for b in fm.code.blocks}
        found = cfg.loops(fm.code)
        parents = {li.parent for li in found}
        for li in found:
            if li.header in parents:
                continue
            static = sum(ins.klass == "fma" for s in li.blocks for ins in blocks[s].instructions)
            executed = sum(fm.weights[s] * sum(ins.klass == "fma" for ins in blocks[s].instructions)
                           for s in li.blocks)
            hot = max(hot, (executed, static))
    return hot[1]


def _cell(model: int, trips: int, code: int) -> str:
    if model == code:
        return CELLS[0]
    if code > model and code % model == 0 and trips % (code // model) == 0 and code // model < trips:
        return CELLS[1]
    return CELLS[2] if code > model else CELLS[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pools", nargs="*", help="pool files or folders of them (default: the shipped pools)")
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--sample", type=int, default=24, help="candidates of each pool (seeded)")
    parser.add_argument("--code-cache", help="JSON file keeping the code's counts between runs")
    parser.add_argument("--json")
    args = parser.parse_args()
    try:
        mach = tuna.resolve(args.target)
        pools = _load_pools(args.pools)
    except (TunaError, OSError) as err:
        raise SystemExit(f"audit_ir_unrolling: {err}") from None
    code_counts: dict[str, int] = {}
    if args.code_cache:
        try:
            with open(args.code_cache) as f:
                code_counts = json.load(f)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as err:
            raise SystemExit(f"audit_ir_unrolling: the code cache {args.code_cache} is unreadable: {err}") from None
    cells: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pool in pools:
        mod = pool_module(pool)
        best = float(min(pool.secs_a))
        for i in sorted(random.Random(0).sample(range(len(pool)), min(args.sample, len(pool)))):
            # the code is a function of the machine, the workload and the schedule
            key = hashlib.sha1(json.dumps([mach.name, pool.mod, pool.traces[i]]).encode()).hexdigest()
            try:
                scheduled = apply_trace(mod, pool.traces[i]).mod
                if key in code_counts:
                    kernel = kernel_from_module(scheduled)
                else:  # lowered once: the kernel with its code serves the model too
                    kernel = kernel_with_code(scheduled, mach)
                    code_counts[key] = _code_fmas(kernel, mach)
                model = _model_fmas(kernel, mach)
            except TunaError:
                continue  # a candidate that no longer lowers: nothing to compare
            if model is not None:
                cells[pool.family][_cell(*model, code_counts[key])].append(float(pool.secs_a[i]) / best)
        print(f"   {pool.name}: done", flush=True)
    if args.code_cache:
        with open(args.code_cache, "w") as f:
            json.dump(code_counts, f)
    print(f"{'family':<18}" + "".join(f"{c:>26}" for c in CELLS))
    table = {}
    for family in sorted(cells):
        row = {c: {"candidates": len(cells[family][c]),
                   "median_over_best": float(np.median(cells[family][c])) if cells[family][c] else None}
               for c in CELLS}
        table[family] = row
        print(f"{family:<18}" + "".join(
            f"{row[c]['candidates']:>17} ({row[c]['median_over_best']:5.2f}x)" if row[c]["candidates"] else f"{0:>26}"
            for c in CELLS))
    total = {c: sum(table[f][c]["candidates"] for f in table) for c in CELLS}
    print(f"{'all':<18}" + "".join(f"{total[c]:>26}" for c in CELLS))
    print("(candidates, and in brackets their median time over their pool's best)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"pools": [p.source for p in pools], "machine": mach.name, "sample": args.sample,
                       "families": table, "all": total}, out, indent=1)


if __name__ == "__main__":
    main()
