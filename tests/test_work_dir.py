"""A tuning run's work directory: one run at a time, a record cut short by a kill mended,
any other damage refused with the file and line named before TVM reads the database."""

import json
import os

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
