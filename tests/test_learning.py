"""tuna with measurements: its features inside MetaSchedule's XGBModel, the cost model learning
from measured run times, and hybrid tuning (a few candidates measured on this CPU)."""

import json

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

import tuna
from tuna import bench, cli
from tuna.bench.metrics import kendall_tau
from tuna.integration import apply_trace, estimate_module, pool_module
from tuna.integration.cost_model import TunaCostModel
from tuna.integration.cost_model.correction import MIN_MEASURED
from tuna.integration.feature_extractor import FeatureExtractor, feature_names, feature_row
from tuna.integration.work_dir import WorkDirError
from tuna.machine import preset


@pytest.fixture(scope="module")
def gmm():
    """GMM-1's workload and its measured pool (Zen 4 run times)."""
    pool = bench.load_pool(next(p for p in bench.shipped_pools() if p.name.startswith("GMM-1")))
    return pool, pool_module(pool)


def _candidates(mod, traces):
    out = []
    for trace in traces:
        sch = apply_trace(mod, trace)
        out.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, True)))
    return out


def _context(mod, machine):
    return tuna.integration.new_tune_context(mod=mod, target=tuna.integration.tvm_target(machine))


def test_a_row_holds_the_terms_the_prediction_and_whether_it_was_analysed(gmm):
    pool, mod = gmm
    zen4 = preset("zen4")
    names = feature_names(zen4)
    assert names[-2:] == ("log_predicted_seconds", "analysed") and len(names) == len(tuna.linear.TERMS) + 2
    sch = apply_trace(mod, pool.traces[0])
    est = estimate_module(sch.mod, zen4)
    row = feature_row(est.features, zen4, "ir")
    assert row[-1] == 1.0 and row[-2] == pytest.approx(np.log(est.seconds))
    i = names.index("log1p_compute_cycles")
    assert row[i] == pytest.approx(np.log1p(est.features["compute_cycles"]))
    assert not feature_row(None, zen4, "ir").any()  # a candidate that cannot be analysed
    gpu = feature_names(preset("a100"))
    assert "log1p_issue_cycles" in gpu and "log1p_compute_cycles" not in gpu


def test_the_extractor_gives_one_row_a_candidate_or_appends_to_another_extractors_rows(gmm):
    pool, mod = gmm
    zen4 = preset("zen4")
    cands = _candidates(mod, pool.traces[:3])
    ctx = _context(mod, zen4)
    tuna_rows = [x.numpy() for x in tuna.FeatureExtractor(zen4).extract_from(ctx, cands)]
    assert all(r.shape == (1, len(feature_names(zen4))) for r in tuna_rows)
    per_store = ms.feature_extractor.PerStoreFeature()
    theirs = [x.numpy() for x in per_store.extract_from(ctx, cands)]
    both = [x.numpy() for x in FeatureExtractor(zen4, beside=per_store).extract_from(ctx, cands)]
    for mine, other, joined in zip(tuna_rows, theirs, both):
        assert joined.shape == (other.shape[0], other.shape[1] + mine.shape[1])
        np.testing.assert_allclose(joined[:, other.shape[1]:], np.repeat(mine, other.shape[0], axis=0))
    with pytest.raises(tuna.TunaError, match="unknown tier"):
        FeatureExtractor(zen4, tier="objcode")


def test_xgbmodel_learns_on_tunas_features_inside_a_tuning_run_that_measures_here(tmp_path, host):
    host = preset(host)  # the fixture names the preset; these tests use its Machine
    mod = tuna.load_workload("GMM:1")
    extractor = FeatureExtractor(host)
    model = ms.cost_model.XGBModel(extractor=extractor, num_warmup_samples=0, adaptive_training=False)
    tuna.integration.load_tensor_intrinsics()
    db = ms.tune_tir(mod, tuna.integration.tvm_target(host), str(tmp_path), max_trials_global=8,
                     num_trials_per_iter=8, cost_model=model,
                     builder=ms.builder.LocalBuilder(timeout_sec=120,
                                                     initializer=tuna.integration.load_tensor_intrinsics),
                     runner=ms.runner.LocalRunner())
    records = db.get_all_tuning_records()
    secs = [float(s) for r in records for s in r.run_secs]
    assert len(records) == 8 and all(0 < s < 1 for s in secs)  # measured here, not predicted
    (group,) = model.data.values()
    assert len(group.features) == 8 and all(f.shape == (1, len(extractor.names)) for f in group.features)
    assert model.booster is not None  # trained on tuna's rows
    # the extractor analysed each candidate once, though XGBModel extracted them for predict and update
    assert len(extractor._cache) >= 8


def test_the_cost_model_learns_from_measured_run_times_only_when_asked(gmm, tmp_path):
    pool, mod = gmm
    zen4 = preset("zen4")
    ctx = _context(mod, zen4)
    train, test = np.arange(0, 32), np.arange(32, 96)
    cands = _candidates(mod, pool.traces[:96])
    results = [ms.runner.RunnerResult(run_secs=[float(pool.secs_a[i])], error_msg=None) for i in range(96)]

    def scores(model, idx):
        return model.predict(ctx, [cands[i] for i in idx])

    static, learning = TunaCostModel(zen4), TunaCostModel(zen4, calibrate=True)
    before = scores(static, test)
    # fewer measurements than the correction needs, or no calibration: the static model exactly
    learning.update(ctx, [cands[i] for i in train[: MIN_MEASURED - 1]],
                    [results[i] for i in train[: MIN_MEASURED - 1]])
    np.testing.assert_array_equal(scores(learning, test), before)
    static.update(ctx, [cands[i] for i in train], [results[i] for i in train])
    np.testing.assert_array_equal(scores(static, test), before)
    assert len(static.records) == 32  # kept, not learned from
    learning.update(ctx, [cands[i] for i in train[MIN_MEASURED - 1:]], [results[i] for i in train[MIN_MEASURED - 1:]])
    after = scores(learning, test)
    assert not np.array_equal(after, before)
    # it learned what it was shown: its order of the measured candidates is closer to the truth
    lat = pool.secs_a[train]
    assert kendall_tau(lat, scores(learning, train)) > kendall_tau(lat, scores(static, train)) + 0.1
    # a failed measurement teaches nothing; saved and loaded, it predicts the same
    learning.update(ctx, [cands[40]], [ms.runner.RunnerResult(run_secs=None, error_msg="crashed")])
    assert sum(len(rows) for rows, _ in learning.measured.values()) == 32
    learning.save(str(tmp_path / "model.json"))
    again = TunaCostModel("zen4")
    again.load(str(tmp_path / "model.json"))
    assert again.calibrate
    np.testing.assert_allclose(scores(again, test), after)
    saved = json.loads((tmp_path / "model.json").read_text())
    for damaged in ([1, 2], {"w": 3}, {"w": [[["a"]], [1.0]]}):
        (tmp_path / "bad.json").write_text(json.dumps({**saved, "measured": damaged}))
        with pytest.raises(Exception, match="its measured candidates are damaged"):
            TunaCostModel("zen4").load(str(tmp_path / "bad.json"))


def test_hybrid_tuning_measures_what_the_model_picks_and_learns_from_it(tmp_path, host):
    host = preset(host)  # the fixture names the preset; these tests use its Machine
    result = tuna.tune("GMM:1", host, tmp_path / "run", measure=16, seed=0)
    assert result.trials == 16 and 0 < result.measured_seconds < 1
    ((rows, _),) = result.cost_model.measured.values()
    assert len(rows) == 14 and result.cost_model._corrections  # it learned from the search's run times
    # the last two measurements went to the two fastest, measured again and kept in the database
    records = result.database.get_all_tuning_records()
    assert len(records) == 16 and len(result.confirmed) == 2
    first = sorted({str(r.trace): np.mean([float(s) for s in r.run_secs]) for r in records[::-1]}.items(),
                   key=lambda kv: kv[1])
    assert {str(c.trace) for c in result.confirmed} <= {t for t, _ in first[:3]}
    chosen = result.confirmed[0]
    assert chosen.seconds == pytest.approx(np.mean(chosen.run_means)) == pytest.approx(result.measured_seconds)
    assert chosen.seconds <= result.confirmed[1].seconds
    assert tvm_ffi.structural_equal(result.schedule.mod, chosen.schedule(pool_module_of("GMM:1")).mod)
    # predicted and measured run times never share a database
    with pytest.raises(WorkDirError, match="measured run times"):
        tuna.tune("GMM:1", host, tmp_path / "run", max_trials=8)


def test_hybrid_tuning_measures_the_full_tiers_best_of_the_models_shortlist(tmp_path, host):
    from tuna.integration.search_strategy.es_runs import HYBRID_SHORTLIST
    from tuna.integration.work_dir import STATE_FILE

    host = preset(host)  # the fixture names the preset; these tests use its Machine
    result = tuna.tune("SFM:1", host, tmp_path / "full", measure=8, seed=0)
    state = json.loads((tmp_path / "full" / STATE_FILE).read_text())
    full = {tuple(c): v for c, v in state["full"]}
    measured = {tuple(c) for c in state["measured"]}
    assert len(measured) == 8 == len(result.database.get_all_tuning_records())
    assert 8 < len(full) <= HYBRID_SHORTLIST * 8 and measured <= set(full)  # the shortlist, all analysed
    passed_over = [v for c, v in full.items() if c not in measured]
    assert min(full[c] for c in measured) >= max(passed_over)  # and its best by the full tier measured
    # picked by the model alone, nothing is analysed by the full tier
    tuna.tune("SFM:1", host, tmp_path / "ir", measure=8, seed=0, pick_tier="ir")
    assert json.loads((tmp_path / "ir" / STATE_FILE).read_text())["full"] == []


def pool_module_of(workload):
    return tuna.integration.load_workload(workload)


def test_how_many_measurements_confirm_the_fastest():
    from tuna.integration.tuning import CONFIRM, confirmations

    assert [confirmations(n) for n in (1, 8, 15, 16, 24, 32, 64, 192)] == [0, 0, 0, 2, 3, CONFIRM, CONFIRM, CONFIRM]
    assert confirmations(32, 0) == 0 and confirmations(32, 8) == 8
    for bad in (1, -1, 32, 40, True, 2.5):
        with pytest.raises(tuna.TunaError, match="confirm="):
            confirmations(32, bad)


def test_the_pick_tier_defaults_to_the_runners_and_refuses_what_cannot_run(monkeypatch):
    from tuna.gpu import nvcc
    from tuna.integration.tuning import pick_tier_for

    zen4, a100 = preset("zen4"), preset("a100")
    assert pick_tier_for(zen4, None) == "full" and pick_tier_for(zen4, "ir") == "ir"
    with pytest.raises(tuna.TunaError, match="pick_tier='fast'"):
        pick_tier_for(zen4, "fast")
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)  # a GPU target without nvcc: no full tier
    assert pick_tier_for(a100, None) == "ir"
    with pytest.raises(tuna.TunaError, match="no nvcc"):
        pick_tier_for(a100, "full")


def test_a_lucky_first_run_time_does_not_choose_the_schedule(tmp_path):
    """Three schedules measured once (one of them lucky), the fastest two measured again by
    a runner that gives each its true time: the pick is the fastest by both measurements."""
    from tvm import s_tir

    from tuna.integration.tuning import confirm_fastest

    mod = pool_module_of("GMM:1")
    target = tvm.target.Target("llvm")
    db = ms.database.MemoryDatabase()
    workload = db.commit_workload(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    scheduled, truth, first = [], [], {}
    for factor, told, true in ((8, 2.0e-3, 2.0e-3), (16, 1.0e-3, 4.0e-3), (32, 2.5e-3, 2.5e-3)):
        sch = s_tir.Schedule(mod)
        sch.split(sch.get_loops(sch.get_sblock("Z"))[1], [None, factor])
        scheduled.append(sch.mod)
        truth.append(true)
        first[str(sch.trace)] = told
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [told], target, args))

    class Built:
        def __init__(self, n):
            (tmp_path / f"b{n}").mkdir()
            self.artifact_path, self.error_msg = str(tmp_path / f"b{n}" / "lib.so"), None

    class Future:
        def __init__(self, secs):
            self.secs = secs

        def result(self):
            return ms.runner.RunnerResult([self.secs], None)

    class Builder:
        def build(self, inputs):
            self.mods = [x.mod for x in inputs]
            return [Built(n) for n in range(len(inputs))]

    class Runner:  # each built schedule runs in its true time
        def run(self, inputs):
            assert len(inputs) == len(builder.mods) and {x.device_type for x in inputs} == {"cpu"}
            return [Future(next(t for m, t in zip(scheduled, truth) if tvm_ffi.structural_equal(m, built)))
                    for built in builder.mods]

    builder = Builder()
    confirmed = confirm_fastest(db, mod, target, builder, Runner(), 2)
    assert [first[str(c.trace)] for c in confirmed] == [2.0e-3, 1.0e-3]  # the lucky one is measured again: last
    assert [c.run_means for c in confirmed] == [(2.0e-3, 2.0e-3), (1.0e-3, 4.0e-3)]
    assert [c.seconds for c in confirmed] == pytest.approx([2.0e-3, 2.5e-3])
    assert len(db.get_all_tuning_records()) == 5  # both second measurements kept
    assert not any((tmp_path / f"b{n}").exists() for n in range(2))  # and their builds removed


def test_hybrid_tuning_refuses_what_it_cannot_measure(tmp_path, capsys, host):
    with pytest.raises(tuna.TunaError, match="cross target"):
        tuna.tune("GMM:1", "graviton2", tmp_path / "a", measure=8)
    with pytest.raises(tuna.TunaError, match="at least 1"):
        tuna.tune("GMM:1", host, tmp_path / "b", measure=0)
    with pytest.raises(tuna.TunaError, match="give measure=N"):
        tuna.tune("GMM:1", host, tmp_path / "c", runner=ms.runner.LocalRunner())
    with pytest.raises(tuna.TunaError, match="give measure=N"):
        tuna.tune("GMM:1", host, tmp_path / "c", confirm=2)
    with pytest.raises(tuna.TunaError, match="confirm=1"):
        tuna.tune("GMM:1", host, tmp_path / "c", measure=16, confirm=1)
    with pytest.raises(tuna.TunaError, match="give measure=N"):
        tuna.tune("GMM:1", host, tmp_path / "c", pick_tier="full")
    with pytest.raises(tuna.TunaError, match="choose full or ir"):
        tuna.tune("GMM:1", host, tmp_path / "c", measure=8, pick_tier="model")
    for argv, message in ((["GMM:1", "--measure", "0"], "at least 1"), (["bert", "--measure", "8"], "offline only"),
                          (["GMM:1", "--target", "graviton2", "--measure", "8"], "cross target"),
                          (["GMM:1", "--confirm", "2"], "give --measure N"),
                          (["GMM:1", "--measure", "8", "--confirm", "8"], "confirm=8"),
                          (["GMM:1", "--pick-tier", "full"], "give --measure N")):
        assert cli.main(["tune", *argv, "--work-dir", str(tmp_path)]) == 2
        assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing tuned


def test_the_command_tunes_with_measurements(tmp_path, capsys, host):
    argv = ["tune", "GMM:1", "--measure", "12", "--confirm", "2", "--work-dir", str(tmp_path), "--target",
            bench.preset_of(bench.machine_info())]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "hybrid: 12 candidates measured" in out and "12 candidates built and measured" in out
    assert "confirming: the 2 fastest measured once more" in out and "the 2 measured twice" in out
    assert "ran in" in out and any(p.name.endswith("-measured") for p in tmp_path.iterdir())




def test_trials_to_reach_the_yardstick_count_the_first_candidate_within_five_percent():
    from tuna.integration.measure.hybrid import reached
    from tuna.integration.measure.measured_tuning import Measured

    cands = [Measured(None, s, t) for s, t in ((2.0, 1.0), (None, 2.0), (1.06, 3.0), (1.04, 4.0), (0.9, 5.0))]
    assert reached(cands, 1.0) == (4, 4.0)
    assert reached(cands, 0.5) == (None, None)
    rows = [{"workload": "w", "method": "metaschedule", "trials": 4, "tune_seconds": 9.0, "best": 1e-3,
             "trials_to_5pct": 3, "seconds_to_5pct": 5.0, "latency": 2e-3},
            {"workload": "w", "method": "tuna-hybrid", "trials": 2, "tune_seconds": 3.0, "best": 1e-3,
             "trials_to_5pct": None, "seconds_to_5pct": None, "latency": 4e-3}]
    table = bench.hybrid_table(rows)
    assert "0.500" in table and "1.000" in table and " - " in table
    page = bench.benchmarks_markdown(None, None, None, hybrid={"rows": rows, "meta": {"command": "tuna bench hybrid"}})
    assert "## Tuning with few measurements" in page and "| w | tuna-hybrid | 2 |" in page


def test_bench_hybrid_refuses_a_confirmation_count_before_tuning(tmp_path, capsys):
    argv = ["bench", "hybrid", "NRM:0", "--measure", "8", "--confirm", "4", "1", "--work-dir", str(tmp_path / "w")]
    assert cli.main(argv) == 2
    assert "--confirm 1" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_bench_hybrid_compares_confirmation_counts_on_one_seed(tmp_path):
    out = tmp_path / "hybrid.json"
    argv = ["bench", "hybrid", "NRM:0", "--measure", "8", "--xgb-trials", "8", "--ms-trials", "16", "--confirm", "2",
            "0", "--work-dir", str(tmp_path / "w"), "--json", str(out)]
    assert cli.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["metaschedule", "xgb-tuna", "tuna-hybrid-confirm-2", "tuna-hybrid-confirm-0"]
    assert [r["trials"] for r in rows] == [16, 8, 8, 8] and [r.get("confirmed") for r in rows] == [None, None, 2, 0]
    assert all(r["latency"] > 0 for r in rows)


@pytest.mark.slow
def test_bench_hybrid_compares_the_tiers_that_pick_on_one_seed(tmp_path):
    out = tmp_path / "hybrid.json"
    argv = ["bench", "hybrid", "NRM:0", "--measure", "8", "--xgb-trials", "8", "--ms-trials", "16", "--pick-tier",
            "full", "ir", "--work-dir", str(tmp_path / "w"), "--json", str(out)]
    assert cli.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["metaschedule", "xgb-tuna", "tuna-hybrid-pick-full", "tuna-hybrid-pick-ir"]
    assert [r.get("pick_tier") for r in rows] == [None, None, "full", "ir"] and all(r["latency"] > 0 for r in rows)


@pytest.mark.slow
def test_bench_hybrid_runs_the_three_tuners_and_times_their_picks(tmp_path, capsys):
    out = tmp_path / "hybrid.json"
    argv = ["bench", "hybrid", "NRM:0", "--measure", "8", "--xgb-trials", "8", "--ms-trials", "16",
            "--work-dir", str(tmp_path / "w"), "--json", str(out)]
    assert cli.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["metaschedule", "xgb-tuna", "tuna-hybrid"]
    assert [r["trials"] for r in rows] == [16, 8, 8]
    assert all(r["latency"] > 0 and r["best"] > 0 for r in rows)
    assert rows[0]["trials_to_5pct"] is not None  # the yardstick reaches itself
    assert "to 5%" in capsys.readouterr().out


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rpc_device():
    """A TVM RPC tracker and one server registered under a key, both on this machine: a
    remote board as MetaSchedule's RPCRunner reaches it."""
    import subprocess
    import sys
    import time

    from tvm import rpc

    port, key = _free_port(), "tuna-test-board"
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(port), "--port-end", str(port + 1)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while True:  # the tracker is up when it answers
            try:
                rpc.connect_tracker("127.0.0.1", port).summary()
                break
            except Exception:  # not listening yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        server_port = _free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                       "--port", str(server_port), "--port-end", str(server_port + 1),
                                       "--tracker", f"127.0.0.1:{port}", "--key", key],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while not rpc.connect_tracker("127.0.0.1", port).summary()["server_info"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the RPC server did not register with the tracker")
            time.sleep(0.5)
        yield ms.runner.RPCConfig(tracker_host="127.0.0.1", tracker_port=port, tracker_key=key,
                                  session_timeout_sec=120)
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.slow  # starts a tracker and a server: about 40 s
def test_hybrid_tuning_measures_on_a_remote_device_over_rpc(tmp_path, rpc_device, host):
    host = preset(host)  # the fixture names the preset; these tests use its Machine
    runner = ms.runner.RPCRunner(rpc_config=rpc_device, max_workers=1)
    result = tuna.tune("GMM:1", host, tmp_path / "run", measure=8, runner=runner, seed=0)
    records = result.database.get_all_tuning_records()
    assert result.trials == 8 and len(records) == 8
    assert all(0 < float(s) < 1 for r in records for s in r.run_secs)  # run times came back over RPC
    assert result.measured_seconds == pytest.approx(min(np.mean([float(s) for s in r.run_secs]) for r in records))
