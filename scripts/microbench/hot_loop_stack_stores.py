"""How many candidates of a measured pool store to the stack in their hot loop.

For each candidate of a Zen 4 pool (its trace replayed on the pool's module, compiled for
tuna's ``zen4`` preset), the block with the most FMAs stands for the hot loop; the script
prints that block's FMAs and its stores addressed off ``rsp`` (spill slots), with the
candidate's measured time, then how many candidates have such stores, in all and among the
ten fastest. Such loops are the ones whose time depends on where the stack falls
(``stack_placement.py``).

Usage: ``.venv/bin/python scripts/microbench/hot_loop_stack_stores.py POOL.json.gz [N]`` (the
first N candidates; default all).
"""

from __future__ import annotations

import sys

from tuna.bench.pools import load_pool
from tuna.cpu.disassembly import kernel_code
from tuna.integration.analysis import apply_trace, compile_objects
from tuna.integration.measure.scorers import pool_module
from tuna.machine import preset


def main(pool_path: str, n: int | None) -> None:
    pool = load_pool(pool_path)
    mod = pool_module(pool)
    machine = preset("zen4")
    measured = (pool.secs_a + pool.secs_b) / 2 if pool.second_timing else pool.secs_a
    rows = []
    for i, trace in enumerate(pool.traces[:n]):
        try:
            code = kernel_code(compile_objects(apply_trace(mod, trace).mod, machine))
        except Exception as err:  # a candidate that no longer compiles is reported and skipped
            print(i, "fails:", type(err).__name__)
            continue
        blocks = [b for fn in code for b in fn.blocks]
        hot = max(blocks, key=lambda b: sum(x.klass == "fma" for x in b.instructions))
        fmas = sum(x.klass == "fma" for x in hot.instructions)
        spills = sum(x.klass == "store" and "rsp" in x.reads for x in hot.instructions)
        rows.append((float(measured[i]), spills))
        print(f"{i} fma {fmas} stack stores {spills} measured {measured[i] * 1e3:.3f} ms", flush=True)
    fastest = sorted(rows)[:10]
    print(f"{sum(s > 0 for _, s in rows)} of {len(rows)} candidates store to the stack in their hot loop; "
          f"{sum(s > 0 for _, s in fastest)} of the {len(fastest)} fastest")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
