"""tuna's ES on MetaSchedule design spaces: decisions, building, workers, Dask, tune_tir, resuming."""

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

import tuna
from tuna import integration
from tuna.estimate import WORST_SCORE, seconds_from_score
from tuna.integration import search_strategy
from tuna.search import es
from tuna.search.workers import ProcessPool


@pytest.fixture(scope="module")
def gmm():
    mod = integration.load_workload("GMM:0")
    spaces, ctx = search_strategy.design_spaces(mod, "zen4")
    return mod, spaces, ctx


@pytest.mark.parametrize("extent,parts,inner", [(1, 3, -1), (12, 2, -1), (64, 4, 16), (360, 3, 64), (7, 4, 1)])
def test_factorizations_are_all_ordered_splits(extent, parts, inner):
    brute = {f for f in itertools.product(range(1, extent + 1), repeat=parts)
             if math.prod(f) == extent and (inner <= 0 or f[-1] <= inner)}
    got = search_strategy.factorizations(extent, parts, inner)
    assert len(got) == len(set(got)) and set(got) == brute


def test_design_space_decisions_hold_their_legal_values(gmm):
    _, spaces, _ = gmm
    assert len(spaces.spaces) >= 1
    kinds = {d.kind for s in spaces.spaces for d in s.decisions}
    assert {"SamplePerfectTile", "SampleCategorical"} <= kinds
    for space in spaces.spaces:
        for d in space.decisions:
            assert len(set(d.values)) == len(d.values) and 0 <= d.initial < len(d.values)
            if d.kind == "SamplePerfectTile":
                extent = math.prod(d.values[d.initial])
                assert all(math.prod(v) == extent for v in d.values)
                assert len(d.values) == len(search_strategy.factorizations(extent, len(d.values[0]), 64))


def test_a_candidate_builds_with_its_decisions_and_the_postprocessors(gmm):
    mod, spaces, ctx = gmm
    space = spaces.spaces[0]
    tiles = [i for i, d in enumerate(space.decisions) if d.kind == "SamplePerfectTile"]
    choices = [d.initial for d in space.decisions]
    choices[tiles[-1]] = (choices[tiles[-1]] + 1) % len(space.decisions[tiles[-1]].values)
    trace = spaces.trace((0, *choices))
    sch = search_strategy.build(mod, trace, ctx.space_generator.postprocs)
    assert sch is not None
    got = {int(i): v for i, v in integration.plain_json(sch.trace.as_json())[1]}
    for d, k in zip(space.decisions, choices):
        assert got[d.position] == search_strategy.design_space._json_value(d.values[k])
    # The postprocessors turned MetaSchedule's annotations into real loop kinds.
    raw = search_strategy.build(mod, trace, [])
    assert "meta_schedule.parallel" in raw.mod.script()
    assert "meta_schedule.parallel" not in sch.mod.script() and "T.parallel" in sch.mod.script()
    spec = search_strategy.worker_spec(mod, ctx.space_generator.postprocs, tuna.resolve("zen4"))
    assert search_strategy.worker_score(search_strategy.worker_setup(spec), trace) > WORST_SCORE


def test_candidates_built_from_the_kept_schedule_equal_fresh_ones_and_leave_the_workload_alone(gmm):
    import tvm
    from tvm import s_tir

    mod, spaces, ctx = gmm
    before = mod.script()
    postprocs = ctx.space_generator.postprocs
    for cand in [spaces.initial()[0], (0, *(len(d.values) - 1 for d in spaces.spaces[0].decisions))]:
        built = search_strategy.build(mod, spaces.trace(cand), postprocs)
        fresh = s_tir.Schedule(mod)
        s_tir.Trace.apply_json_to_schedule(spaces.trace(cand), fresh)
        fresh.enter_postproc()
        assert all(p.apply(fresh) for p in postprocs)
        assert built is not None
        tvm.ir.assert_structural_equal(built.mod, fresh.mod)
    # The schedule kept for copying still holds the unscheduled workload.
    assert mod.script() == before
    tvm.ir.assert_structural_equal(search_strategy.design_space._unscheduled(mod).mod, mod)


def test_compute_locations_are_the_ones_tvm_keeps():
    mod = integration.load_workload("SFM:0")
    spaces, ctx = search_strategy.design_spaces(mod, "zen4")
    locs = [(s, d) for s, space in enumerate(spaces.spaces) for d in space.decisions
            if d.kind == "SampleComputeLocation"]
    assert locs
    s, dec = max(locs, key=lambda sd: len(sd[1].values))
    assert len(dec.values) >= 2 and all(v >= -2 for v in dec.values)
    space = spaces.spaces[s]
    for k in range(len(dec.values)):
        choices = [d.initial if d is not dec else k for d in space.decisions]
        sch = search_strategy.build(mod, spaces.trace((s, *choices)), ctx.space_generator.postprocs)
        assert sch is not None
        assert {int(i): v for i, v in integration.plain_json(sch.trace.as_json())[1]}[dec.position] == dec.values[k]


@pytest.mark.parametrize("preset", ["zen4", "v100"])
def test_a_worker_builds_the_candidates_the_main_process_builds(preset):
    mod = integration.load_workload("GMM:0")
    machine = tuna.resolve(preset)
    spaces, ctx = search_strategy.design_spaces(mod, machine)
    state = search_strategy.worker_setup(search_strategy.worker_spec(mod, ctx.space_generator.postprocs, machine))
    cands = es.EvolutionStrategies(spaces.search_space(), seed=0).ask().novel[:40]
    here = [search_strategy.build(mod, spaces.trace(c), ctx.space_generator.postprocs) is not None for c in cands]
    there = [search_strategy.build(state.mod, spaces.trace(c), state.postprocs) is not None for c in cands]
    # On the GPU most random decisions break the thread limits VerifyGPUCode checks.
    assert here == there and any(here)


def builds_alone(state, payload):
    """1 if the trace builds, 0 if not; 2 where the worker holds torch or TVM's tensor intrinsics."""
    if sys.modules.get("torch") is not None or "tvm.s_tir.tensor_intrin" in sys.modules:
        return 2.0
    return float(search_strategy.build(state.mod, payload, state.postprocs) is not None)


@pytest.mark.parametrize("preset", ["zen4", "v100"])
def test_a_worker_skips_torch_and_intrinsics_when_no_space_tensorizes(preset):
    mod = integration.load_workload("GMM:0")
    machine = tuna.resolve(preset)
    spaces, ctx = search_strategy.design_spaces(mod, machine)
    assert not spaces.tensorizes()
    spec = search_strategy.worker_spec(mod, ctx.space_generator.postprocs, machine, intrinsics=spaces.tensorizes())
    cands = es.EvolutionStrategies(spaces.search_space(), seed=0).ask().novel[:40]
    here = [float(search_strategy.build(mod, spaces.trace(c), ctx.space_generator.postprocs) is not None)
            for c in cands]
    with ProcessPool(search_strategy.worker_setup, builds_alone, spec, workers=1) as pool:
        there = pool([spaces.trace(c) for c in cands])
    assert there == here and any(here)  # no 2: neither was imported, and the postprocessors work without
    with ProcessPool(search_strategy.worker_setup, builds_alone, {**spec, "intrinsics": True}) as pool:
        assert pool([spaces.trace(cands[0])]) == [2.0]


def test_a_space_that_tensorizes_is_told_apart(gmm):
    _, spaces, _ = gmm
    insts, decisions = spaces.spaces[0].trace
    marked = [*insts, ["Annotate", ["b0", "dot_16x4_avx512"], ["meta_schedule.auto_tensorize"], []]]
    tensorizing = search_strategy.DesignSpaces((search_strategy.DesignSpace([marked, decisions], ()),))
    assert not spaces.tensorizes() and tensorizing.tensorizes()


def test_workers_and_a_local_dask_cluster_find_what_one_process_finds():
    mod = integration.load_workload("GMM:0")
    runs = {}
    for workers, cluster in [(1, None), (2, None), (1, "local:2")]:
        _, found = search_strategy.run_es(mod, "zen4", max_evaluations=96, workers=workers, cluster=cluster, seed=5,
                                 config=es.ESConfig(population=16))
        runs[workers, cluster] = (found.best(10), found.state())
    assert runs[1, None][0] and runs[1, None][0][0][1] > WORST_SCORE
    assert runs[1, None] == runs[2, None] == runs[1, "local:2"]


@pytest.mark.parametrize("model", [pytest.param("tuna", marks=pytest.mark.slow), "random"])
def test_tune_tir_takes_the_es_strategy_with_any_cost_model(tmp_path, model):
    mod = integration.load_workload("GMM:0")
    tgt = integration.tvm_target(tuna.resolve("zen4"))
    cost_model = tuna.TunaCostModel("zen4") if model == "tuna" else ms.cost_model.RandomModel(seed=0)
    lines = []
    strategy = tuna.ESSearch(16, 2, seed=1, progress=lines.append)
    database = ms.tune_tir(mod, tgt, str(tmp_path), max_trials_global=8, num_trials_per_iter=4,
                           cost_model=cost_model, runner=tuna.StaticRunner("zen4"), builder=tuna.StaticBuilder(),
                           strategy=strategy, num_tuning_cores=1, seed=1)
    records = database.get_all_tuning_records()
    assert len(records) == 8 and all(r.run_secs for r in records)
    assert len({json.dumps(integration.plain_json(r.trace.as_json())) for r in records}) == 8
    assert ms.tir_integration.compile_tir(database, mod, tgt) is not None
    assert lines and lines[-1].es.evaluations > 0 and {p.measured for p in lines} == {0, 4}
    if model == "tuna":
        assert lines[-1].best_seconds is not None and lines[-1].es.candidates_per_second > 0


@pytest.mark.parametrize("reuse", [False, True])
def test_re_ranking_hands_over_the_full_tiers_best_distinct_schedules(tmp_path, reuse):
    mod = integration.load_workload("GMM:0")
    machine = tuna.resolve("zen4")
    state = tmp_path / "es.json"
    known = integration.Predictions() if reuse else None
    strategy = tuna.ESSearch(16, 2, score="ir", machine=machine, rerank=2, seed=3, state_path=state, known=known)
    builder = tuna.StaticBuilder(known=known)
    database = ms.tune_tir(mod, integration.tvm_target(machine), str(tmp_path), max_trials_global=4,
                           num_trials_per_iter=4, cost_model=ms.cost_model.RandomModel(seed=0),
                           runner=tuna.StaticRunner(machine), builder=builder, strategy=strategy,
                           num_tuning_cores=1, seed=1)
    # With the predictions shared, the builder compiles none of the four again.
    assert builder.reused == (4 if reuse else 0)
    records = database.get_all_tuning_records()
    saved = json.loads(state.read_text())
    handed = {tuple(c) for c in saved["measured"]}
    full = {tuple(c): v for c, v in saved["full"]}
    assert len(records) == len(handed) == 4 and len(full) == 8
    # The four handed over are the full tier's best four of the eight it re-ranked ...
    assert sorted(full.values(), reverse=True)[:4] == sorted((full[c] for c in handed), reverse=True)
    # ... the runner, analysing what the builder made of them (or reusing), predicts what the workers did ...
    predicted = sorted(seconds_from_score(full[c]) for c in handed)
    assert predicted == pytest.approx(sorted(float(r.run_secs[0]) for r in records))
    # ... and no two are the same schedule.
    built = [integration.apply_trace(mod, integration.plain_json(r.trace.as_json())).mod for r in records]
    assert len({tvm_ffi.structural_hash(m) for m in built}) == 4


def test_a_full_share_analyses_the_ir_tiers_best_and_fills_with_predictions_that_cannot_win(tmp_path):
    mod = integration.load_workload("GMM:0")
    machine = tuna.resolve("zen4")
    state = tmp_path / "es.json"
    known = integration.Predictions()
    strategy = tuna.ESSearch(16, 2, score="ir", machine=machine, rerank=1, full_share=0.25, seed=3,
                             state_path=state, known=known)
    builder = tuna.StaticBuilder(known=known)
    database = ms.tune_tir(mod, integration.tvm_target(machine), str(tmp_path), max_trials_global=8,
                           num_trials_per_iter=8, cost_model=ms.cost_model.RandomModel(seed=0),
                           runner=tuna.StaticRunner(machine), builder=builder, strategy=strategy,
                           num_tuning_cores=1, seed=1)
    records = database.get_all_tuning_records()
    saved = json.loads(state.read_text())
    handed = {tuple(c) for c in saved["measured"]}
    full = {tuple(c): v for c, v in saved["full"]}
    # Eight handed over, none compiled again; the full tier analysed the IR tier's best two and
    # those of the rest that could have beaten them, not all eight.
    assert len(records) == len(handed) == 8 and builder.reused == 8
    assert 2 <= len(full) < 8 and set(full) <= handed
    best_full = min(seconds_from_score(v) for v in full.values())
    run_secs = sorted(float(r.run_secs[0]) for r in records)
    # The database's best is the full tier's best; the IR tier's rescaled predictions come after it.
    assert run_secs[0] == pytest.approx(best_full)
    assert sum(s == pytest.approx(seconds_from_score(v)) for s in run_secs for v in full.values()) == len(full)


def _rows_handed_over(tmp_path, rows: bool) -> list[bytes]:
    """Feature rows of what ESSearch(score="model") hands over in two rounds of 4 on an
    average pool, whose schedules often differ only where tuna's features do not look."""
    mod = integration.load_workload("resnet50/adaptive_avg_pool2d")
    machine = tuna.resolve("zen4")
    cost_model = tuna.TunaCostModel(machine)
    state = tmp_path / "es.json"
    strategy = tuna.ESSearch(16, 2, score="model", rerank=4, rows=cost_model.row if rows else None, seed=3,
                             state_path=state)
    database = ms.tune_tir(mod, integration.tvm_target(machine), str(tmp_path), max_trials_global=8,
                           num_trials_per_iter=4, cost_model=cost_model, runner=tuna.StaticRunner(machine),
                           builder=tuna.StaticBuilder(), strategy=strategy, num_tuning_cores=1, seed=1)
    records = database.get_all_tuning_records()
    assert len(records) == 8
    return [cost_model.row(integration.apply_trace(mod, integration.plain_json(r.trace.as_json())).mod).tobytes()
            for r in records]


def test_the_model_hands_over_candidates_it_tells_apart_when_it_gives_rows(tmp_path):
    plain = _rows_handed_over(tmp_path / "plain", rows=False)
    apart = _rows_handed_over(tmp_path / "apart", rows=True)
    assert len(set(plain)) < len(plain)  # without rows: schedules the model cannot tell apart
    assert len(set(apart)) == len(apart)  # with them: none measured twice while others are there

def test_full_share_is_a_share():
    with pytest.raises(tuna.TunaError, match="full_share"):
        tuna.ESSearch(16, score="ir", rerank=1, full_share=0)
    with pytest.raises(tuna.TunaError, match="full_share"):
        tuna.ESSearch(16, score="ir", rerank=1, full_share=1.5)


def test_only_the_full_tier_picks_from_the_models_shortlist():
    for kwargs in ({"score": "model", "rerank": 4, "pick_tier": "ir"},
                   {"score": "ir", "rerank": 4, "pick_tier": "full"}, {"score": "model", "pick_tier": "full"}):
        with pytest.raises(tuna.TunaError, match="pick_tier"):
            tuna.ESSearch(16, **kwargs)


def test_re_ranking_needs_the_ir_tier_or_the_model():
    with pytest.raises(tuna.TunaError, match="rerank"):
        tuna.ESSearch(16, score="full", rerank=2)
    with pytest.raises(tuna.TunaError, match="rerank"):
        tuna.ESSearch(16, score="ir", rerank=-1)
    assert tuna.ESSearch(16, score="model", rerank=2).rerank == 2  # re-scored by the model as it is now


def _records(work_dir):
    path = work_dir / "database_tuning_record.json"
    if not path.exists():
        return []
    return [json.dumps(json.loads(line)[1][0]) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_an_interrupted_run_resumes_from_its_work_dir_and_loses_nothing(tmp_path):
    code = ("import tuna, sys; tuna.tune('GMM:0', 'zen4', sys.argv[1], max_trials=16, num_trials_per_iter=4, "
            "population_size=32, search='es', workers=2)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 400
        while len(_records(tmp_path)) < 5 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, as a power cut would
        proc.wait()
    before = _records(tmp_path)
    assert 5 <= len(before) < 16, "the first run should be stopped part-way"
    assert (tmp_path / search_strategy.STATE_FILE).exists()

    result = tuna.tune("GMM:0", "zen4", tmp_path, max_trials=16, num_trials_per_iter=4, population_size=32,
                       search="es", workers=2)
    after = _records(tmp_path)
    assert set(before) <= set(after)
    assert len(after) == len(set(after)) == 16  # nothing measured twice, nothing lost
    assert result.trials == 16 - len(before)  # only the rest ran
    assert result.schedule is not None
