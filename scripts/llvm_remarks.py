"""What LLVM's loop vectorizer says about a pool's candidates: its remarks, counted.

    .venv/bin/python scripts/llvm_remarks.py POOL INDEX [INDEX ...] --target PRESET
        [--option=-vectorize-scev-check-threshold=1000 ...] [--keep-ir DIR]

TVM's LLVM build does not take ``-pass-remarks`` (its ``cl-opt`` parser knows plain types
only), so each candidate is compiled by TVM at ``opt-level=0`` (its LLVM IR before any LLVM
pass) and that IR optimised again at -O3 by llvmlite's LLVM, whose ``set_option`` does take
them. With the same LLVM major version (llvmlite 0.50: LLVM 22.1; apache-tvm 0.27: LLVM 22)
this gave the same optimised IR as TVM's own -O3 build, instruction for instruction (block and
metadata names aside), on the two candidates compared (``heldout-pools-32`` ResNeXt conv2d8's
candidate 40, ``heldout-pools-27`` ConvNeXt conv2d1's candidate 87). Printed per candidate:
its time over its pool's best and each loop-vectorizer remark (vectorized loops with their
width; loops left scalar with LLVM's reason), counted.
``--option`` passes further LLVM options (a threshold raised, to see which limit a loop hit).

llvmlite is not a dependency of tuna: install it beside (``.venv/bin/pip install llvmlite``).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tuna.bench.pools import load_pool
from tuna.errors import TunaError
from tuna.integration import pool_module
from tuna.integration.analysis import apply_trace
from tuna.integration.workloads import as_machine, tvm_target

_REMARK = re.compile(r"^remark: \S+ (.*)$")
# Remarks of the outlined helper functions (TVM's error paths, fp16 conversions), not loops.
_NOISE = ("instruction return type cannot be vectorized", "Store instruction cannot be vectorized")


def unoptimised_ir(mod, preset: str) -> str:
    """TVM's LLVM IR for ``mod`` before LLVM's passes run."""
    import tvm

    attrs = dict(tvm_target(as_machine(preset, None)).export())
    attrs["opt-level"] = 0
    return tvm.compile(mod, target=tvm.target.Target(attrs)).mod.inspect_source("ll")


def remarks(ir: str, cpu: str, options: list[str]) -> collections.Counter:
    """The loop vectorizer's remarks when llvmlite optimises ``ir`` at -O3 for ``cpu``, counted.

    llvmlite runs in a process of its own (this script, ``--optimise``): its LLVM and TVM's
    would share one process's command-line option registry otherwise.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".ll", delete=False) as fh:
        fh.write(ir)
    try:
        run = subprocess.run([sys.executable, __file__, "--optimise", fh.name, "--cpu", cpu,
                              *(f"--option={o}" for o in options)], capture_output=True, text=True)
    finally:
        Path(fh.name).unlink()
    if run.returncode:
        raise TunaError(f"llvmlite failed on the candidate's IR: {run.stderr.strip()[-500:]}")
    counts: collections.Counter = collections.Counter()
    for line in run.stderr.splitlines():
        m = _REMARK.match(line)
        if m and not any(n in m.group(1) for n in _NOISE):
            counts[m.group(1)] += 1
    return counts


def _optimise(path: str, cpu: str, options: list[str]) -> None:
    """Optimise the IR in ``path`` at -O3 with llvmlite; LLVM prints the remarks to stderr."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for opt in ("-pass-remarks=loop-vectorize", "-pass-remarks-missed=loop-vectorize",
                "-pass-remarks-analysis=loop-vectorize", *options):
        llvm.set_option("", opt)
    module = llvm.parse_assembly(Path(path).read_text())
    machine = llvm.Target.from_triple(module.triple).create_target_machine(cpu=cpu, opt=3)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = tuning.slp_vectorization = tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--optimise"]:
        inner = argparse.ArgumentParser()
        inner.add_argument("--optimise")
        inner.add_argument("--cpu")
        inner.add_argument("--option", action="append", default=[])
        a = inner.parse_args(argv)
        _optimise(a.optimise, a.cpu, a.option)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pool", help="a measured pool (.json or .json.gz)")
    ap.add_argument("indices", nargs="+", type=int, help="candidates, by their index in the pool")
    ap.add_argument("--target", default="zen4", help="a CPU preset (default zen4)")
    ap.add_argument("--option", action="append", default=[], help="a further LLVM option (repeatable)")
    ap.add_argument("--keep-ir", type=Path, help="write each candidate's unoptimised IR here")
    args = ap.parse_args(argv)
    probe = subprocess.run([sys.executable, "-c", "import llvmlite.binding as b; print(b.llvm_version_info[0])"],
                           capture_output=True, text=True)
    if probe.returncode:
        print("error: llvmlite is not installed (.venv/bin/pip install llvmlite)", file=sys.stderr)
        return 2
    import tvm

    tvm_major = tvm.target.codegen.llvm_version_major()
    if int(probe.stdout) != tvm_major:
        print(f"warning: llvmlite's LLVM {probe.stdout.strip()} is not TVM's LLVM {tvm_major}: "
              "its decisions may differ", file=sys.stderr)
    try:
        machine = as_machine(args.target, None)
        if machine.kind != "cpu":
            raise TunaError(f"{args.target} is not a CPU preset: LLVM's loop vectorizer runs on CPU code only")
        pool = load_pool(args.pool)
        mod = pool_module(pool)
    except TunaError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    times = np.asarray(pool.secs_a, dtype=float)
    best = np.nanmin(times)
    cpu = dict(tvm_target(machine).export()).get("mcpu", "generic")
    for i in args.indices:
        if not 0 <= i < len(pool.traces):
            print(f"error: the pool has {len(pool.traces)} candidates, not {i + 1}", file=sys.stderr)
            return 2
        try:
            ir = unoptimised_ir(apply_trace(mod, pool.traces[i]).mod, args.target)
        except (TunaError, RuntimeError) as err:  # TVM's errors are RuntimeErrors
            print(f"candidate {i}: does not lower: {str(err).strip().splitlines()[-1]}")
            continue
        if args.keep_ir:
            args.keep_ir.mkdir(parents=True, exist_ok=True)
            (args.keep_ir / f"candidate-{i}.ll").write_text(ir)
        print(f"candidate {i}: {times[i] / best:.2f}x the pool's best")
        for text, n in sorted(remarks(ir, cpu, args.option).items()):
            print(f"  {n:3d} x {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
