"""A tuning run's work directory: one run at a time, a record cut short by a kill mended,
any other damage refused with the file and line named before TVM reads the database."""

import json
import os
import subprocess
import sys

import pytest

import tuna
from tuna.errors import TunaError
from tuna.integration import work_dir
from tuna.integration.work_dir import RECORDS, WORKLOADS, WorkDirError


def write_db(folder, workloads, records):
    (folder / WORKLOADS).write_text("".join(json.dumps(w) + "\n" for w in workloads))
    (folder / RECORDS).write_text(records)


def test_a_second_run_on_a_work_directory_in_use_is_refused(tmp_path):
    with work_dir.exclusive(tmp_path / "w"):
        with pytest.raises(WorkDirError, match=r"in use by another tuning run \(pid \d+"):
            with work_dir.exclusive(tmp_path / "w"):
                pass
    with work_dir.exclusive(tmp_path / "w"):  # released when the first run ends
        pass


def test_an_unwritable_work_directory_is_a_clear_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(WorkDirError, match="cannot use the work directory"):
            with work_dir.exclusive(folder):
                pass
    finally:
        folder.chmod(0o700)


def test_a_read_only_work_directory_is_a_clear_error_for_any_user(tmp_path, private_mounts):
    """A read-only file system stops root too (file permissions do not)."""
    folder = tmp_path / "ro"
    (folder / "w").mkdir(parents=True)
    done = private_mounts(f"mount --bind -o ro {folder} {folder}",
                          [sys.executable, "-m", "tuna.cli", "tune", "GMM:0", "--trials", "8", "--work-dir",
                           str(folder / "w")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tuna: error: cannot use the work directory" in done.stderr
    assert "Read-only file system" in done.stderr and "Traceback" not in done.stderr


def _nearly_full(folder) -> str:
    """A mount script: a tmpfs on ``folder`` with 8 KiB left free (LLVM's object for GMM:0 is 17 KiB)."""
    folder.mkdir()
    return f"mount -t tmpfs -o size=72k tmpfs {folder}; head -c 65536 /dev/zero > {folder}/fill"


def test_llvm_compiles_into_memory_so_a_full_temporary_directory_cannot_end_the_process(tmp_path, private_mounts):
    """LLVM ends the process (exit 1, "LLVM ERROR: IO failure on output stream") when it cannot
    write an object: the full tier's compiles must not write to a disk."""
    scratch = tmp_path / "scratch"
    script = ("from tuna.integration import compile_objects, load_workload\n"
              "from tuna.integration.workloads import as_machine\n"
              "(obj,) = compile_objects(load_workload('GMM:0'), as_machine('zen4'))\n"
              "print(len(obj), obj[:4])\n")
    done = private_mounts(_nearly_full(scratch), [sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert int(done.stdout.split()[0]) > 8192 and "ELF" in done.stdout  # larger than the space left


def test_a_full_temporary_directory_stops_tuning_with_the_directory_named(tmp_path, private_mounts):
    scratch = tmp_path / "scratch"
    done = private_mounts(_nearly_full(scratch),
                          [sys.executable, "-m", "tuna.cli", "tune", "GMM:0", "--trials", "8", "--workers", "1",
                           "--work-dir", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"tuna: error: the temporary directory {scratch} has 8 KiB free (is the disk full?)" in done.stderr
    assert "set TMPDIR" in done.stderr and "Traceback" not in done.stderr


def test_a_temporary_directory_that_fills_mid_run_stops_it_and_the_same_command_resumes(tmp_path, monkeypatch):
    """The builder checks the space before each batch; the records of earlier batches are kept."""
    calls = []
    monkeypatch.setattr(work_dir, "free_bytes", lambda folder: 1 << 30 if len(calls.append(0) or calls) < 3 else 0)
    kwargs = dict(max_trials=16, num_trials_per_iter=8, population_size=64, workers=1)
    with pytest.raises(WorkDirError, match=r"temporary directory .* has 0 KiB free \(is the disk full\?\)"):
        tuna.tune("GMM:0", "zen4", tmp_path, **kwargs)
    before = (tmp_path / RECORDS).read_text().splitlines()
    assert len(before) == 8  # the first batch's (the check before the run, then one per batch)
    monkeypatch.undo()
    tuna.tune("GMM:0", "zen4", tmp_path, **kwargs)
    after = (tmp_path / RECORDS).read_text().splitlines()
    assert after[:8] == before and len({json.dumps(json.loads(r)[1]) for r in after}) == len(after) == 16


def test_a_prediction_that_cannot_be_written_stops_tuning_naming_the_temporary_directory(tmp_path, monkeypatch):
    from tuna.integration.runner.prediction import Prediction

    def no_space(self, directory):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Prediction, "write", no_space)
    with pytest.raises(WorkDirError, match=r"under the temporary directory .*: No space left on device"):
        tuna.tune("GMM:0", "zen4", tmp_path, max_trials=8, num_trials_per_iter=8, population_size=64, workers=1)


def test_a_record_cut_short_at_the_end_is_cut_off_and_kept(tmp_path):
    whole = json.dumps([0, [["trace"], []], [1e-5], {}, {}])
    write_db(tmp_path, [["hash", {}]], whole + "\n" + whole[:17])
    assert work_dir.check_database(tmp_path) == 1
    assert (tmp_path / RECORDS).read_text() == whole + "\n"
    (torn,) = tmp_path.glob(RECORDS + ".torn-*")
    assert torn.read_text().endswith(whole[:17])
    assert work_dir.check_database(tmp_path) == 0  # mended: nothing more to do


@pytest.mark.parametrize("records, line", [
    ('[0, []]\n{not json\n[0, []]\n', 2),
    ('[0, []]\n[3, []]\n', 2),  # no workload 3
    ('[0, []]\n"text"\n', 2),
])
def test_damage_elsewhere_is_refused_naming_the_file_and_line(tmp_path, records, line):
    write_db(tmp_path, [["hash", {}]], records)
    before = (tmp_path / RECORDS).read_text()
    with pytest.raises(WorkDirError, match=rf"{RECORDS} line {line}"):
        work_dir.check_database(tmp_path)
    assert (tmp_path / RECORDS).read_text() == before  # nothing changed


def test_a_tuning_run_killed_mid_record_resumes_with_every_whole_record_once(tmp_path):
    tuna.tune("GMM:0", "zen4", tmp_path, max_trials=8, num_trials_per_iter=8, population_size=64, workers=1)
    path = tmp_path / RECORDS
    lines = path.read_text().splitlines()
    assert len(lines) == 8
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # as a kill leaves it
    result = tuna.tune("GMM:0", "zen4", tmp_path, max_trials=8, num_trials_per_iter=8, population_size=64,
                       workers=1)
    after = path.read_text().splitlines()
    assert after[:7] == lines[:7]  # every whole record kept
    traces = [json.dumps(json.loads(r)[1]) for r in after]
    assert len(traces) == len(set(traces)) and len(after) == 7 + result.trials


def test_tune_refuses_a_damaged_database_before_tvm_reads_it(tmp_path):
    write_db(tmp_path, [["hash", {}]], '[0, []]\nnot json\n[0, []]\n')
    with pytest.raises(TunaError, match="line 2"):
        tuna.tune("GMM:0", "zen4", tmp_path, max_trials=8, workers=1)


def test_a_damaged_search_state_is_refused_naming_the_file(tmp_path):
    from tuna.integration.search_strategy import STATE_FILE

    tuna.tune("GMM:0", "zen4", tmp_path, max_trials=8, num_trials_per_iter=8, population_size=64, workers=1)
    state = tmp_path / STATE_FILE
    records = (tmp_path / RECORDS).read_text()
    fingerprint = json.loads(state.read_text())["fingerprint"]
    for damage in (state.read_text()[:40], json.dumps({"fingerprint": fingerprint, "es": 5}), "[]"):
        state.write_text(damage)
        with pytest.raises(TunaError, match=f"{STATE_FILE} is damaged"):
            tuna.tune("GMM:0", "zen4", tmp_path, max_trials=16, num_trials_per_iter=8, population_size=64,
                      workers=1)
        assert (tmp_path / RECORDS).read_text() == records  # nothing lost, nothing added


def test_records_that_do_not_reach_the_file_stop_the_run_naming_it(tmp_path, monkeypatch):
    """TVM's JSON database does not say when a write fails (a full disk): tune checks the file."""
    real = work_dir.record_lines
    monkeypatch.setattr(work_dir, "record_lines", lambda folder: max(0, real(folder) - 1))
    with pytest.raises(WorkDirError, match=rf"1 tuning records could not be written to .*{RECORDS}"):
        tuna.tune("GMM:0", "zen4", tmp_path, max_trials=8, num_trials_per_iter=8, population_size=64, workers=1)


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def test_a_full_disk_stops_the_run_naming_the_file_and_the_same_command_resumes(tmp_path):
    """A file-size limit (as a full disk, which root cannot otherwise be given) stops tuning with a
    WorkDirError; run again without it, tuning resumes with every whole record kept."""
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (60000, 60000))\n"
        "import tuna\n"
        "from tuna.integration.work_dir import WorkDirError\n"
        "try:\n"
        f"    tuna.tune('GMM:0', 'zen4', {str(tmp_path)!r}, max_trials=48, num_trials_per_iter=8,"
        " population_size=64, workers=1)\n"
        "except WorkDirError as err:\n"
        "    print('WorkDirError:', err)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    assert "is the disk full?" in done.stdout
    before = (tmp_path / RECORDS).read_text().splitlines()
    # The limit may fall inside a record (the last line cut short): the resumed run cuts it off.
    if before and not _parses(before[-1]):
        before.pop()
    assert before and all(map(_parses, before)), "the limit stopped the run before any record: the test proves nothing"
    result = tuna.tune("GMM:0", "zen4", tmp_path, max_trials=48, num_trials_per_iter=8, population_size=64,
                       workers=1)
    after = (tmp_path / RECORDS).read_text().splitlines()
    assert after[:len(before)] == before
    traces = [json.dumps(json.loads(r)[1]) for r in after]
    assert len(set(traces)) == len(traces) == 48 and result.trials == 48 - len(before)
