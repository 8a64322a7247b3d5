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

import gzip
import json
import statistics
import sys
import tempfile

import tvm

from tuna.cpu.disassembly import kernel_code
from tuna.integration import workloads
from tuna.integration.analysis import apply_trace
from tuna.machine import preset


def main(pool_path: str, n: int | None) -> None:
    pool = json.load(gzip.open(pool_path) if pool_path.endswith(".gz") else open(pool_path))
    mod = workloads.parse_tvmscript(pool["mod"], pool_path)
    target = workloads.tvm_target(preset("zen4"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, cand in enumerate(pool["candidates"][:n]):
            trace = json.loads(cand["trace"]) if isinstance(cand["trace"], str) else cand["trace"]
            try:
                obj = f"{tmp}/k.o"
                tvm.compile(apply_trace(mod, trace).mod, target).mod.write_to_file(obj)
                with open(obj, "rb") as f:
                    code = kernel_code([f.read()])
            except Exception as err:  # a candidate that no longer compiles is reported and skipped
                print(i, "fails:", type(err).__name__)
                continue
            blocks = [b for fn in code for b in fn.blocks]
            hot = max(blocks, key=lambda b: sum(x.klass == "fma" for x in b.instructions))
            fmas = sum(x.klass == "fma" for x in hot.instructions)
            spills = sum(x.klass == "store" and "rsp" in x.reads for x in hot.instructions)
            secs = statistics.mean([float(cand["secs_a"]), float(cand["secs_b"])])
            rows.append((secs, spills))
            print(f"{i} fma {fmas} stack stores {spills} measured {secs * 1e3:.3f} ms", flush=True)
    fastest = sorted(rows)[:10]
    print(f"{sum(s > 0 for _, s in rows)} of {len(rows)} candidates store to the stack in their hot loop; "
          f"{sum(s > 0 for _, s in fastest)} of the {len(fastest)} fastest")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
