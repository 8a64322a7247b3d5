"""Time kernels with the main thread's stack moved, by the size of the process environment.

Linux puts the environment strings at the top of the main thread's stack, so a larger
environment moves every stack slot of a kernel run in that thread (TVM's thread pool of one
thread runs it there) down in 16-byte steps, while the heap, and TVM's workspaces on it, stay
put. A kernel whose time changes with that placement alone depends on how its stack slots
fall against its other memory streams in address bits 11:0 (4 KiB aliasing on AMD Zen 4).

Usage (from the repository root, on an idle machine)::

    .venv/bin/python scripts/microbench/stack_placement.py SCHEDULE.py [SCHEDULE.py ...]

compiles each TVMScript schedule for tuna's ``zen4`` preset, then for each environment
padding from 0 to 3968 bytes in steps of 128 runs a fresh process (``env -i``, one TVM
thread) that times each schedule as the pools were timed (``timing.Timer``: median of 5
``time_evaluator`` repeats of at least 30 ms) and prints the times in milliseconds (random
float32 arguments: for float32 kernels). Output kept: ``stack_placement.zen4.txt`` and
``stack_placement.set21.zen4.txt`` here, taken when the child timed with its own copy of that
yardstick and did not import tuna; a rerun lays out the heap differently, so which paddings
are slow moves, while the split into fast and slow placements stays.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def child(libraries: list[str]) -> None:
    import numpy as np
    import tvm

    from tuna.integration.measure.timing import Timer

    dev = tvm.cpu()
    times = []
    for path in libraries:
        with open(path + ".shapes") as f:
            shapes = [tuple(int(s) for s in word.split("x")) for word in f.read().split()]
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32"), dev) for s in shapes]
        times.append(Timer(tvm.runtime.load_module(path), args, dev)() * 1e3)  # the pools' yardstick
    print(len(os.environ.get("PAD", "")), " ".join(f"{t:.3f}" for t in times), flush=True)


def main(schedules: list[str]) -> None:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tuna.integration import workloads
    from tuna.machine import preset

    out = tempfile.mkdtemp(prefix="stack-placement-")
    libraries = []
    for n, path in enumerate(schedules):
        mod = workloads.load_workload(path)
        lib = os.path.join(out, f"k{n}.so")
        tvm.compile(mod, workloads.tvm_target(preset("zen4"))).mod.export_library(lib)
        infos = ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True)
        with open(lib + ".shapes", "w") as f:
            f.write(" ".join("x".join(str(int(s)) for s in i.shape) for i in infos))
        libraries.append(lib)
    print("# env padding (bytes), then ms for: " + " ".join(schedules), flush=True)
    for pad in range(0, 4096, 128):
        env = {"PATH": "/usr/bin:/bin", "TVM_NUM_THREADS": "1", "PAD": "x" * pad}
        subprocess.run([sys.executable, __file__, "--child", *libraries], env=env, check=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        main(sys.argv[1:])
