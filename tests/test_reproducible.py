"""The same seed gives the same tuned schedule whatever the machine's load.

SFM:1 is the workload where time limits matter: in an ES run some of its candidates keep
LLVM busy for minutes and are dropped by the re-ranking limit. With limits counted in
wall-clock seconds, a loaded machine dropped others too, and two runs picked different
schedules; counted in CPU seconds, load changes the wall time only.
"""

import multiprocessing
import os
import time

import pytest

import tuna
from tuna.integration import structural_key


def _burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _tune(work_dir):
    result = tuna.tune("SFM:1", "zen4", work_dir, max_trials=64)
    return structural_key(result.schedule.mod), result.predicted_seconds, result.tune_seconds


@pytest.mark.slow
def test_two_runs_under_different_loads_pick_the_same_schedule(tmp_path):
    quiet = _tune(tmp_path / "quiet")
    burners = [multiprocessing.get_context("spawn").Process(target=_burn, args=(1800,), daemon=True)
               for _ in range(2 * (os.cpu_count() or 1))]
    for b in burners:
        b.start()
    try:
        loaded = _tune(tmp_path / "loaded")
    finally:
        for b in burners:
            b.kill()
    assert loaded[2] > 1.3 * quiet[2], "the load did not slow the run; the test proves nothing"
    assert loaded[:2] == quiet[:2]
