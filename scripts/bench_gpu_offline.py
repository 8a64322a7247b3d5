"""The GPU full tier end to end on a machine without a GPU.

Draws random candidates of a CUDA matmul (GMM:1) and conv2d (C2D:1) from MetaSchedule's
design space for a GPU preset (decisions re-sampled, postprocessors applied), analyses
each with the full tier (TVM lowering and CUDA codegen, nvcc and ptxas, PTX analysis) and
prints how many were analysed or failed, seconds per candidate split into nvcc+ptxas,
TVM lowering and tuna's analysis, and the check that PTX multiply-adds per thread times
the threads launched equal the TIR's multiply-adds. No run time is measured or invented:
predicted times are only summarised.

    .venv/bin/python scripts/bench_gpu_offline.py [--per-workload 100] [--target a100]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import time

from tuna import integration, machine
from tuna.errors import TunaError
from tuna.gpu import full_tier
from tuna.integration import cuda


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-workload", type=int, default=100, help="candidates per workload (default 100)")
    parser.add_argument("--target", default="a100", help="GPU preset (default a100)")
    parser.add_argument("--workloads", default="GMM:1,C2D:1")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    mach = machine.preset(args.target)
    target = integration.tvm_target(mach)
    totals = {"analysed": 0, "failed": 0, "nvcc": 0.0, "lower": 0.0, "analysis": 0.0, "sample": 0.0}
    print(f"== GPU full tier offline on {mach.name} ({mach.target['arch']}), {args.per_workload} candidates per "
          f"workload; timings taken on a shared machine (other work running)")
    for spec in args.workloads.split(","):
        mod = integration.load_workload(spec)
        start = time.perf_counter()
        cands = cuda.sample_candidates(mod, target, args.per_workload, seed=args.seed)
        sample = time.perf_counter() - start
        stats = {"analysed": 0, "failed": 0, "nvcc": 0.0, "lower": 0.0, "analysis": 0.0}
        ratios, errors, predicted, arch = [], {}, [], ""
        for sch in cands:
            try:
                t0 = time.perf_counter()
                code = cuda.gpu_code(sch.mod, mach, target)
                t1 = time.perf_counter()
                kernel = dataclasses.replace(integration.kernel_from_module(sch.mod), gpu_code=code)
                est = full_tier.estimate(kernel, mach)
                t2 = time.perf_counter()
            except TunaError as err:
                stats["failed"] += 1
                key = str(err).split(":")[0][:80]
                errors[key] = errors.get(key, 0) + 1
                continue
            arch = code.arch
            stats["analysed"] += 1
            stats["nvcc"] += code.nvcc_seconds
            stats["lower"] += (t1 - t0) - code.nvcc_seconds
            stats["analysis"] += t2 - t1
            ratios.append(est.features.get("fma_ptx_vs_tir", float("nan")))
            predicted.append(est.seconds)
        n = max(stats["analysed"], 1)
        exact = sum(abs(r - 1.0) < 1e-9 for r in ratios)
        print(f"\n{spec}: {len(cands)} candidates drawn in {sample:.1f} s; analysed {stats['analysed']}, failed "
              f"{stats['failed']} (PTX for {arch})")
        print(f"   seconds per analysed candidate: nvcc+ptxas {stats['nvcc'] / n:.3f}, TVM lowering+codegen "
              f"{stats['lower'] / n:.3f}, tuna analysis {stats['analysis'] / n:.3f}")
        print(f"   PTX vs TIR multiply-adds: {exact}/{len(ratios)} exactly equal"
              + (f"; ratio min {min(ratios):.4g}, max {max(ratios):.4g}" if ratios else ""))
        if predicted:
            print(f"   predicted us (not measured): min {min(predicted) * 1e6:.1f}, median "
                  f"{statistics.median(predicted) * 1e6:.1f}, max {max(predicted) * 1e6:.1f}")
        for key, count in errors.items():
            print(f"   failure x{count}: {key}")
        for key in stats:
            totals[key] += stats[key]
        totals["sample"] += sample
    n = max(totals["analysed"], 1)
    print(f"\n== all: analysed {totals['analysed']}, failed {totals['failed']}; per candidate nvcc+ptxas "
          f"{totals['nvcc'] / n:.3f} s vs the rest {(totals['lower'] + totals['analysis']) / n:.3f} s "
          f"(lowering {totals['lower'] / n:.3f}, analysis {totals['analysis'] / n:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
