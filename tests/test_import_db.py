"""``tuna import-db``: MetaSchedule databases written by TVM 0.16 read into tuna's pools.

The fixture ``tests/fixtures/databases/resnet34-slice`` is three tasks of the shipped A100
ResNet-34 database (pooling, flatten, dense) with a few records each: old-format traces
(``GetBlock``, one-attribute ``Split``), failed measurements and exact duplicates.
"""

import base64
import gzip
import json
import shutil
from pathlib import Path

import pytest

from tuna import bench, cli
from tuna.databases import metaschedule as msdb
from tuna.databases.node_graph import TYPE_KEYS, block_names, decode_workload, module_script
from tuna.errors import DatabaseError, TunaError

SLICE = Path(__file__).parent / "fixtures" / "databases" / "resnet34-slice"
WORKLOADS = SLICE / "database_workload.json"
RECORDS = SLICE / "database_tuning_record.json.gz"
# Per workload of the slice: records, converted, and the drops by reason.
EXPECTED = {
    "task00-pool_max": (4, 3, {"failed": 1}),
    "task01-tensor": (4, 3, {"duplicate": 1}),
    "task02-T_matmul_NT": (6, 4, {"failed": 1, "duplicate": 1}),
}


def _record_lines():
    return gzip.open(RECORDS, "rt").read().splitlines()


def test_upgrade_trace_renames_and_widens_split():
    rec = json.loads(_record_lines()[1])
    old = rec[1][0]
    kinds = {inst[0] for inst in old[0]}
    assert "GetBlock" in kinds and "GetSBlock" not in kinds
    assert any(inst[0] == "Split" and len(inst[2]) == 1 for inst in old[0])
    new = msdb.upgrade_trace(old)
    assert {inst[0] for inst in new[0]} == {msdb.RENAMED.get(k, k) for k in kinds}
    assert all(len(inst[2]) == 2 and inst[2][1] is False for inst in new[0] if inst[0] == "Split")
    assert new[1] == old[1] and msdb.upgrade_trace(new) == new  # decisions kept; idempotent


@pytest.fixture(scope="module")
def graphs():
    db = msdb.read_database(WORKLOADS, RECORDS)
    return [decode_workload(w.encoded, f"workload {w.index}") for w in db.workloads]


def test_node_graph_reader_on_every_workload_of_the_slice(graphs):
    from tvm import s_tir

    from tuna.integration.workloads import parse_tvmscript

    for i, graph in enumerate(graphs):
        assert graph["attrs"]["tvm_version"] == "0.16.dev0"
        mod = parse_tvmscript(module_script(graph, f"workload {i}"), f"workload {i}")
        sch = s_tir.Schedule(mod)
        for name, _ in block_names(graph):  # every block of the old graph is in the new module
            sch.get_sblock(name)


def test_unknown_node_type_names_workload_and_key(graphs):
    graph = json.loads(json.dumps(graphs[0]))
    graph["nodes"][5]["type_key"] = "relax.Function"
    assert "relax.Function" not in TYPE_KEYS
    with pytest.raises(DatabaseError, match=r"workload 7: node 5 has type key 'relax.Function'"):
        module_script(graph, "workload 7")


@pytest.fixture(scope="module")
def imported():
    from tuna.integration.database_import import import_database

    return import_database([SLICE], "NVIDIA A100")


def test_slice_converts_with_exact_counts(imported):
    results, summary = imported
    got = {r.name: (r.records, r.converted, dict(r.dropped)) for r in results}
    assert got == EXPECTED
    assert summary["records"] == sum(e[0] for e in EXPECTED.values())
    assert summary["converted"] == sum(e[1] for e in EXPECTED.values())
    assert summary["dropped"]["failed"] == 2 and summary["dropped"]["duplicate"] == 2


def test_every_converted_trace_applies_with_its_decisions(imported):
    from tuna.integration.database_import import check_trace
    from tuna.integration.workloads import parse_tvmscript

    for r in imported[0]:
        pool = bench.load_pool(r.pool)
        assert pool.second_timing is False and pool.workload == (r.name, None)
        assert pool.target["kind"] == "cuda" and r.pool["device"] == "NVIDIA A100"
        mod = parse_tvmscript(pool.mod, r.name)
        for trace, cand in zip(pool.traces, r.pool["candidates"], strict=True):
            assert check_trace(mod, trace) is None
            assert {inst[0] for inst in trace[0]}.isdisjoint(msdb.RENAMED)
            assert min(cand["run_secs"]) <= cand["secs_a"] <= max(cand["run_secs"])


def test_trace_that_does_not_apply_is_counted(tmp_path):
    from tuna.integration.database_import import import_database

    shutil.copy(WORKLOADS, tmp_path)
    lines = _record_lines()
    bad = json.loads(lines[1])
    bad[1][0][0][0][2][0] = "no_such_block"  # the first GetBlock names a block the workload lacks
    (tmp_path / "database_tuning_record.json").write_text("\n".join([*lines, json.dumps(bad)]) + "\n")
    results, _ = import_database([tmp_path], "NVIDIA A100")
    assert results[0].dropped["trace-does-not-apply"] == 1 and results[0].converted == 3


def _damaged(tmp_path, workloads=None, records=None):
    (tmp_path / "database_workload.json").write_text(workloads if workloads is not None else WORKLOADS.read_text())
    (tmp_path / "database_tuning_record.json").write_text(
        records if records is not None else "\n".join(_record_lines()) + "\n")
    return tmp_path


@pytest.mark.parametrize("damage, message", [
    ("missing", r"database_tuning_record\.json\[\.gz\], found no"),
    ("bad-gzip", r"cannot read .*database_tuning_record\.json\.gz"),
    ("bad-json", r"database_tuning_record\.json, line 2: not JSON"),
    ("bad-shape", r"database_tuning_record\.json, line 3: expected \[workload index"),
    ("bad-index", r"database_tuning_record\.json, line 1: the record names workload 9, but"),
    ("bad-workload", r"database_workload\.json, line 2: expected \[structural hash"),
    ("bad-base64", r"database_workload\.json, line 1 \(workload 0\): the workload is not base64"),
])
def test_damaged_database_is_a_tuna_error_naming_file_and_line(tmp_path, damage, message):
    from tuna.integration.database_import import import_database

    lines = _record_lines()
    if damage == "missing":
        (tmp_path / "database_workload.json").write_text(WORKLOADS.read_text())
    elif damage == "bad-gzip":
        _damaged(tmp_path)
        (tmp_path / "database_tuning_record.json").unlink()
        (tmp_path / "database_tuning_record.json.gz").write_bytes(gzip.compress(b"[0, []]\n")[:-12])
    elif damage == "bad-json":
        _damaged(tmp_path, records="\n".join([lines[0], lines[1][:-5], *lines[2:]]) + "\n")
    elif damage == "bad-shape":
        _damaged(tmp_path, records="\n".join([*lines[:2], "[0, 1, 2]"]) + "\n")
    elif damage == "bad-index":
        _damaged(tmp_path, records=lines[0].replace("[0,", "[9,", 1) + "\n")
    elif damage == "bad-workload":
        w = WORKLOADS.read_text().splitlines()
        _damaged(tmp_path, workloads="\n".join([w[0], '["123"]']) + "\n", records=lines[0] + "\n")
    elif damage == "bad-base64":
        w = WORKLOADS.read_text().splitlines()
        _damaged(tmp_path, workloads=json.dumps(["1", "!!" + json.loads(w[0])[1]]) + "\n", records=lines[0] + "\n")
    with pytest.raises(DatabaseError, match=message) as info:
        import_database([tmp_path], "NVIDIA A100")
    assert isinstance(info.value, TunaError)


def test_decode_workload_takes_graphs_with_and_without_length_prefix(graphs):
    text = json.dumps(graphs[1]).encode()
    assert decode_workload(base64.b64encode(text).decode(), "w") == graphs[1]


def test_cli_import_db_writes_pools_load_pool_reads(tmp_path, capsys):
    out = tmp_path / "pools"
    assert cli.main(["import-db", str(WORKLOADS), str(RECORDS), "--device", "NVIDIA A100", "-o", str(out)]) == 0
    table = capsys.readouterr().out
    assert "task02-T_matmul_NT" in table and "duplicate" in table
    summary = json.loads((out / "import-summary.json").read_text())
    assert {w["name"]: w["converted"] for w in summary["workloads"]} == {k: v[1] for k, v in EXPECTED.items()}
    pools = [bench.load_pool(out / f"{name}.json") for name in EXPECTED]
    assert [len(p) for p in pools] == [v[1] for v in EXPECTED.values()]
    # rankable: the baselines run, and the noise ceiling is left out (no second timing)
    results = bench.evaluate(pools, bench.baselines(0), n_train=1)
    assert {r.model for r in results} == {"random"}


def test_cli_import_db_names_files_of_an_earlier_import(tmp_path, capsys):
    out = tmp_path / "pools"
    out.mkdir()
    (out / "task09-old-name.json").write_text("{}")
    assert cli.main(["import-db", str(WORKLOADS), str(RECORDS), "--device", "NVIDIA A100", "-o", str(out)]) == 0
    assert "note: 1 other .json files" in capsys.readouterr().out
    assert (out / "task09-old-name.json").read_text() == "{}"  # left as it was


def test_cli_import_db_error_is_a_message(tmp_path, capsys):
    assert cli.main(["import-db", str(tmp_path / "nowhere"), "--device", "X", "-o", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_shipped_cpu_pools_load_unchanged():
    for path in bench.shipped_pools():
        pool = bench.load_pool(path)
        assert pool.second_timing and pool.family != "other"
        if isinstance(pool.workload[1], int):  # an Ansor workload; a network task is named NETWORK/TASK
            assert pool.name == bench.pool_stem(path)
        else:
            assert pool.name.replace("/", "-") == bench.pool_stem(path)


SHIPPED = Path(bench.__file__).parent.parent / "data" / "databases" / "a100-resnet34"


def test_node_graph_reader_on_every_workload_of_the_shipped_database():
    from tvm import s_tir

    from tuna.integration.workloads import parse_tvmscript

    wfile, rfile = msdb.database_files([SHIPPED])
    with gzip.open(rfile, "rt") as f:
        assert sum(1 for _ in f) == 20089
    workloads = [row for _, row in msdb.json_lines(wfile)]
    assert len(workloads) == 20
    for index, (_, encoded) in enumerate(workloads):
        graph = decode_workload(encoded, f"workload {index}")
        mod = parse_tvmscript(module_script(graph, f"workload {index}"), f"workload {index}")
        sch = s_tir.Schedule(mod)
        for name, _ in block_names(graph):  # the traces name blocks: every one is there
            sch.get_sblock(name)


def test_databases_package_imports_no_tvm():
    import subprocess
    import sys

    code = ("import sys, tuna.databases.metaschedule, tuna.databases.node_graph; "
            "print(sorted(m for m in ('tvm', 'tuna.integration') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
