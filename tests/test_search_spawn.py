"""Worker processes from a script without a ``__main__`` guard, from stdin and from ``tuna.tune``.

Every script here prints a marker at its top level: a worker that imported the caller's
``__main__`` would run the script again and print it twice or more.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from test_search_workers import score_plain

TESTS = str(Path(__file__).resolve().parent)
MARKER = "TOP-LEVEL-MARKER"
PAYLOADS = [1, 2, 3, 4, 5]

# No guard: what a user writes, and what the README's example looks like.
POOL_SCRIPT = f"""
import sys
sys.path.insert(0, {TESTS!r})  # the setup and score functions live in a test module
from test_search_workers import score_plain, setup_offset
from tuna.search.workers import ProcessPool

print({MARKER!r})
pool = ProcessPool(setup_offset, score_plain, 0.5, workers=2)
print("SCORES", pool({PAYLOADS!r}))
pool.close()
"""


def expected_scores():
    return [score_plain({"offset": 0.5}, p) for p in PAYLOADS]


def check_ran_once(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(MARKER) == 1, done.stdout


def test_a_script_without_a_main_guard_runs_once_with_worker_processes(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(POOL_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    check_ran_once(done)
    assert f"SCORES {expected_scores()}" in done.stdout


def test_code_read_from_stdin_runs_once_with_worker_processes(tmp_path):
    # A notebook's or an interactive session's __main__ has no file, like this one.
    done = subprocess.run([sys.executable, "-"], input=POOL_SCRIPT, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    check_ran_once(done)
    assert f"SCORES {expected_scores()}" in done.stdout


DASK_SCRIPT = f"""
import sys
sys.path.insert(0, {TESTS!r})
from test_search_workers import score_plain, setup_offset
from tuna.search.workers import DaskEvaluator

def main():
    with DaskEvaluator("local:1", setup_offset, score_plain, 0.5) as evaluate:
        print("SCORES", evaluate({PAYLOADS!r}))

print({MARKER!r})
"""


def test_a_local_dask_cluster_from_a_script_without_a_guard_is_refused(tmp_path):
    # Dask's LocalCluster spawns its workers with multiprocessing, which would run the script again.
    script = tmp_path / "dask_no_guard.py"
    script.write_text(DASK_SCRIPT + "main()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.count(MARKER) == 1
    assert "TunaError" in done.stderr and "__main__" in done.stderr and "workers=N" in done.stderr
    call_line = len(script.read_text().splitlines())  # the script's last line: main()
    assert f"dask_no_guard.py, line {call_line}" in done.stderr


def test_a_local_dask_cluster_from_stdin_is_refused(tmp_path):
    # multiprocessing's spawn, and so Dask, cannot import a __main__ read from stdin.
    done = subprocess.run([sys.executable, "-"], input=DASK_SCRIPT + "main()\n", capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout.count(MARKER) == 1
    assert "TunaError" in done.stderr and "<stdin>" in done.stderr and "workers=N" in done.stderr


def test_a_local_dask_cluster_from_a_guarded_script_runs(tmp_path):
    script = tmp_path / "dask_guard.py"
    script.write_text(DASK_SCRIPT + 'if __name__ == "__main__":\n    main()\n')
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"SCORES {expected_scores()}" in done.stdout


@pytest.mark.slow
def test_tune_from_a_script_without_a_main_guard(tmp_path):
    script = tmp_path / "tune_no_guard.py"
    script.write_text(f"""
import tuna

print({MARKER!r})
result = tuna.tune("GMM:1", "zen4", {str(tmp_path / "work")!r}, max_trials=8, workers=2)
print("TRIALS", result.trials, result.predicted_seconds > 0)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    check_ran_once(done)
    assert "TRIALS 8 True" in done.stdout


def test_tune_on_a_local_dask_cluster_from_a_script_without_a_guard_is_refused(tmp_path):
    script = tmp_path / "tune_dask_no_guard.py"
    script.write_text(f"""
import tuna

print({MARKER!r})
tuna.tune("GMM:1", "zen4", {str(tmp_path / "work")!r}, max_trials=8, cluster="local:2")
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 1 and done.stdout.count(MARKER) == 1
    assert "TunaError" in done.stderr and "guard" in done.stderr
