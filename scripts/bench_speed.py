"""Analysis time per candidate against TVM's own compile time, measured in one run.

    .venv/bin/python scripts/bench_speed.py [POOL ...]   (default: GMM-1 C2D-1 SFM-1)

For every 8th candidate of each shipped pool: TVM compiling it to an object (the floor
the full tier cannot go under), tuna's full tier (which compiles too) and the IR tier,
each timed on the same scheduled module.
"""

import sys
import time

from tuna import bench, integration, machine


def main(names: list[str]) -> None:
    zen4 = machine.preset("zen4")
    for name in names or ["GMM-1", "C2D-1", "SFM-1"]:
        pool = bench.shipped_pool(name)
        if pool is None:
            raise SystemExit(f"tuna ships no pool {name}")
        mod = integration.pool_module(pool)
        picks = range(0, len(pool.traces), 8)
        spent = {"compile": 0.0, "full": 0.0, "ir": 0.0}
        for i in picks:
            sch = integration.apply_trace(mod, pool.traces[i])
            for what in spent:
                start = time.perf_counter()
                if what == "compile":
                    integration.compile_objects(sch.mod, zen4)
                else:
                    integration.estimate_module(sch.mod, zen4, what)
                spent[what] += time.perf_counter() - start
        n = len(picks)
        print(
            f"{name}: {n} candidates; TVM compile {spent['compile'] / n * 1e3:.0f} ms, "
            f"full tier {spent['full'] / n * 1e3:.0f} ms ({spent['full'] / spent['compile']:.2f}x compile), "
            f"IR tier {spent['ir'] / n * 1e3:.1f} ms ({spent['ir'] / spent['compile']:.3f}x compile)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
