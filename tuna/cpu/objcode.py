"""Machine-code-only estimate of a built artifact, for runs where the TIR is not at hand.

MetaSchedule's plain ``LocalBuilder`` hands the runner only a tar of object files. This
estimate disassembles the kernel functions in it, weights each basic block by the trip
counts of the loops around it, and bounds each block by the machine's throughput per
instruction class. Loops whose trip count the code does not show are weighted by
:data:`UNKNOWN_TRIPS` and counted in the ``unknown_trip_loops`` feature.
"""

from __future__ import annotations

import tarfile
from collections import Counter
from types import MappingProxyType

from ..errors import AnalysisError
from ..estimate import Estimate
from ..ir import MachineCode
from ..machine import Machine
from .cfg import loops
from .disassembly import ANONYMOUS, kernel_code

#: Weight of a loop whose trip count cannot be read from the code (an assumption).
UNKNOWN_TRIPS = 16


def code_cycles(code: MachineCode, machine: Machine, feats: Counter) -> float:
    """Throughput-bound cycles of one function, blocks weighted by loop trip counts."""
    weight = {b.start: 1.0 for b in code.blocks}
    for lp in loops(code):
        trips = lp.trip_count
        if trips is None:
            feats["unknown_trip_loops"] += 1
            trips = UNKNOWN_TRIPS
        feats["loops"] += 1
        for start in lp.blocks:
            weight[start] *= lp.runs(start, trips)
    tp = machine.throughput
    total = 0.0
    for blk in code.blocks:
        n = Counter(ins.klass for ins in blk.instructions)
        fp = (n["fma"] + n["mul"]) / tp["fma"] + n["add"] / tp["add"] + n["div"] / tp["div"]
        cycles = max(fp, n["load"] / tp["load"], n["store"] / tp["store"], len(blk.instructions) / machine.issue_width)
        w = weight[blk.start]
        total += cycles * w
        for klass in ("fma", "add", "mul", "load", "store"):
            feats[f"dyn_{klass}"] += n[klass] * w
    return total


def estimate_objects(objects: list[bytes], machine: Machine) -> Estimate:
    """Estimate the run time of the kernel functions in ELF ``objects``."""
    funcs = kernel_code(objects)
    if not funcs:
        raise AnalysisError("no kernel function found in the object code")
    feats: Counter = Counter()
    cycles = 0.0
    for code in funcs:
        c = code_cycles(code, machine, feats)
        # TVM outlines parallel loop bodies into functions (without symbols) run on every thread
        # of its pool at once.
        cycles += c / machine.threads if code.function.startswith(ANONYMOUS) else c
        feats["functions"] += 1
    feats["cycles"] = cycles
    return Estimate(cycles / (machine.frequency_ghz * 1e9), "objcode", MappingProxyType(dict(feats)))


def artifact_objects(path: str) -> list[bytes]:
    """The ELF objects in a MetaSchedule artifact (a tar of object files)."""
    try:
        with tarfile.open(path) as tar:
            objects = [
                tar.extractfile(m).read() for m in tar.getmembers() if m.isfile() and m.name.endswith(".o")
            ]
    except (OSError, tarfile.TarError) as err:
        raise AnalysisError(f"cannot read artifact {path}: {err}") from None
    if not objects:
        raise AnalysisError(f"artifact {path} holds no object file")
    return objects


def estimate_artifact(path: str, machine: Machine) -> Estimate:
    """Estimate from a MetaSchedule artifact (a tar of object files)."""
    if machine.kind != "cpu":
        raise AnalysisError(
            "artifact has no TIR beside it and is not CPU object code: build with tuna.StaticBuilder()"
        )
    return estimate_objects(artifact_objects(path), machine)
