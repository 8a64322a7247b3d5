"""Where the CPU IR tier's model of LLVM's vectorization disagrees with the code LLVM emits.

    .venv/bin/python scripts/audit_ir_vectorization.py [POOLS ...] --features-cache DIR [--json out.json]

For every candidate of the pools (the shipped ones by default) whose loop tree has
multiply-adds, the IR tier's lanes per FMA instruction (its ``lanes_fma / fma``: what
:func:`tuna.cpu.codegen.codegen_loops` decides LLVM vectorizes) against the full tier's, read
from the machine code (``dyn_lanes_fma / dyn_fma``). A candidate counts as vector in a tier
when its FMAs average at least two lanes. Printed per operator family: the candidates in each
cell of (IR tier scalar | vector) x (code scalar | vector), and in each cell the median of the
IR tier's centred log error (log of predicted over measured seconds, less the pool's median),
positive where the IR tier takes a candidate for slower, relative to its pool, than it runs.

A large cell "IR scalar, code vector" with a positive error is LLVM vectorizing what the
model takes for scalar code: the lead for the next rule of ``tuna/cpu/codegen.py``. The
code's vectorization needs no timing (the full tier's disassembly); only the errors use the
pools' timings. Features come from ``--features-cache`` (as ``tuna bench rank`` keeps them)
or are analysed and kept there.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import numpy as np

import tuna
from tuna import linear
from tuna.cli import _cached_features, _load_pools
from tuna.errors import TunaError

#: Lanes per FMA instruction from which a candidate's multiply-adds count as vectorized.
VECTOR_LANES = 2.0
CELLS = ("ir scalar / code scalar", "ir scalar / code vector", "ir vector / code scalar", "ir vector / code vector")


def _cell(ir: dict, full: dict) -> str | None:
    """The cell of one candidate (None: no FMA in either tier's count)."""
    if not ir.get("fma") or not full.get("dyn_fma"):
        return None
    ir_vec = ir["lanes_fma"] / ir["fma"] >= VECTOR_LANES
    code_vec = full["dyn_lanes_fma"] / full["dyn_fma"] >= VECTOR_LANES
    return CELLS[2 * ir_vec + code_vec]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pools", nargs="*", help="pool files or folders of them (default: the shipped pools)")
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--features-cache", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    try:
        mach = tuna.resolve(args.target)
        pools = _load_pools(args.pools)
        feats, _ = _cached_features(pools, mach, ["ir", "full"], args.features_cache)
    except (TunaError, OSError) as err:
        raise SystemExit(f"audit_ir_vectorization: {err}") from None
    coeffs = linear.coefficients(mach, "ir")
    errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pool in pools:
        pairs = list(zip(feats["ir"][pool.name], feats["full"][pool.name], pool.secs_a))
        logs = [math.log(linear.seconds(ir, coeffs, mach) / t) if ir is not None else None for ir, _, t in pairs]
        centre = float(np.median([x for x in logs if x is not None]))
        for (ir, full, _), err in zip(pairs, logs):
            cell = None if ir is None or full is None else _cell(ir, full)
            if cell is not None:
                errors[pool.family][cell].append(err - centre)
    print(f"{'family':<14}" + "".join(f"{c:>26}" for c in CELLS))
    table = {}
    for family in sorted(errors):
        row = {c: {"candidates": len(errors[family][c]),
                   "median_error": float(np.median(errors[family][c])) if errors[family][c] else None}
               for c in CELLS}
        table[family] = row
        print(f"{family:<14}" + "".join(
            f"{row[c]['candidates']:>16} ({row[c]['median_error']:+.2f})" if row[c]["candidates"] else f"{0:>26}"
            for c in CELLS))
    print("(candidates, and in brackets the median centred log error of the IR tier)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"pools": [p.source for p in pools], "machine": mach.name, "families": table}, out, indent=1)


if __name__ == "__main__":
    main()
