"""The ranking yardstick: pools, metrics, split, report, and one real run on GMM-1."""

import json
import math
import re
import shutil

import numpy as np
import pytest

from tuna import bench
from tuna.errors import TunaError

LAT = np.array([4.0, 1.0, 3.0, 2.0, 5.0])


def test_perfect_order_scores_one_everywhere():
    score = -LAT
    for k in (1, 2, 5, 10):
        assert bench.top_k_ratio(LAT, score, k) == 1.0
    assert bench.a_peak(LAT, score, 32) == 1.0
    assert bench.kendall_tau(LAT, score) == pytest.approx(1.0)


def test_reversed_order_by_hand():
    score = LAT  # slowest first
    assert bench.top_k_ratio(LAT, score, 1) == pytest.approx(1 / 5)
    assert bench.top_k_ratio(LAT, score, 2) == pytest.approx((1 + 2) / (5 + 4))
    # picks 5, 4, 3, 2, 1: running best 5, 4, 3, 2, 1 -> mean of 1/5, 1/4, 1/3, 1/2, 1
    assert bench.a_peak(LAT, score) == pytest.approx(np.mean([1 / 5, 1 / 4, 1 / 3, 1 / 2, 1]))
    assert bench.a_peak(LAT, score, n=2) == pytest.approx(np.mean([1 / 5, 1 / 4]))
    assert bench.kendall_tau(LAT, score) == pytest.approx(-1.0)


def test_ties_are_broken_pessimistically_and_deterministically():
    flat = np.zeros(5)
    assert list(bench.picks(LAT, flat)) == [4, 0, 2, 3, 1]  # slowest first among equals
    assert bench.top_k_ratio(LAT, flat, 1) == pytest.approx(1 / 5)
    assert bench.kendall_tau(LAT, flat) == 0.0  # a constant score says nothing
    # NaN scores rank last; equal latencies fall back to index order
    assert list(bench.picks([1.0, 1.0, 2.0], [np.nan, 0.0, 0.0])) == [2, 1, 0]
    assert list(bench.picks([1.0, 1.0], [0.0, 0.0])) == [0, 1]
    # one tie in the score: tau-b counts it as neither concordant nor discordant
    tau = bench.kendall_tau([1.0, 2.0, 3.0], [2.0, 1.0, 1.0])
    assert tau == pytest.approx(2 / math.sqrt(3 * 2))


def test_metrics_reject_bad_shapes():
    with pytest.raises(ValueError):
        bench.top_k_ratio([1.0, 2.0], [1.0], 1)
    with pytest.raises(ValueError):
        bench.a_peak([], [], 32)
    with pytest.raises(ValueError):
        bench.top_k_ratio([1.0], [1.0], 0)


def test_split_sizes_are_64_or_a_third_and_seeded():
    train, test = bench.split(192)
    assert (len(train), len(test)) == (64, 128)
    train, test = bench.split(60)
    assert (len(train), len(test)) == (20, 40)
    assert sorted({*train, *test}) == list(range(60))
    again, _ = bench.split(60, seed=0)
    other, _ = bench.split(60, seed=1)
    assert list(again) == list(train) and list(other) != list(train)
    assert len(bench.split(40, n_train=20)[0]) == 20
    with pytest.raises(ValueError):
        bench.split(10, n_train=10)


def _pool_dict(n=6, **changes):
    cands = [
        {"trace": [[], []], "tuner_secs": 1e-3 * (i + 1), "secs_a": 1e-3 * (i + 1), "secs_b": 1e-3 * (i + 1.1)}
        for i in range(n)
    ]
    data = {
        "workload": ["GMM", 1],
        "target": {"kind": "llvm"},
        "tune_seconds": 1.0,
        "trials": n,
        "mod": "# TVMScript",
        "candidates": cands,
    }
    data.update(changes)
    return data


def test_load_pool_reads_shipped_pools(gmm_pool):
    pools = [bench.load_pool(p) for p in bench.shipped_pools()]
    assert {p.name for p in pools} >= {"GMM-1", "NRM-0"}
    nrm = next(p for p in pools if p.name == "NRM-0")
    assert len(nrm) == 60 and len(bench.split(nrm)[0]) == 20
    pool = bench.load_pool(gmm_pool)
    assert pool.name == "GMM-1" and len(pool) == 192 and pool.failed == 0 and pool.source == "<dict>"


def test_load_pool_leaves_failed_candidates_out():
    data = _pool_dict()
    data["candidates"][1]["secs_a"] = None
    data["candidates"][2]["secs_a"] = float("inf")
    del data["candidates"][3]["secs_a"]
    pool = bench.load_pool(data)
    assert len(pool) == 3 and pool.failed == 3
    assert list(pool.secs_a) == [1e-3, 5e-3, 6e-3]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"workload": ["GMM", 1]}), "lacks target, mod, candidates"),
        (json.dumps(_pool_dict(candidates=[])), "has no candidates"),
        (json.dumps(_pool_dict(workload=["GMM"])), "workload must be [name, index]"),  # a bare name is one
        (json.dumps(_pool_dict(target={"mcpu": "znver4"})), "target must be a TVM target dict"),
    ],
)
def test_load_pool_says_what_is_wrong_and_where(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(bench.PoolError) as err:
        bench.load_pool(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_load_pool_rejects_non_positive_and_all_failed_timings(tmp_path):
    data = _pool_dict()
    data["candidates"][4]["secs_b"] = 0
    with pytest.raises(bench.PoolError, match=r"candidate 4: secs_b is 0; timings must be positive"):
        bench.load_pool(data)
    data = _pool_dict(n=2)
    for cand in data["candidates"]:
        cand["secs_a"] = None
    with pytest.raises(bench.PoolError, match="none of its 2 candidates has a measured secs_a"):
        bench.load_pool(data)
    with pytest.raises(bench.PoolError, match="cannot read pool"):
        bench.load_pool(tmp_path / "missing.json")


def test_evaluate_reports_tables_and_json_with_synthetic_pool():
    pool = bench.load_pool(_pool_dict(n=30))
    lines = []
    results = bench.evaluate([pool, pool], bench.baselines(), progress=lines.append)
    assert len(results) == 4 and len(lines) == 4 and lines[0].startswith("GMM-1 random")
    ceiling = next(r for r in results if r.model == "noise-ceiling")
    assert ceiling.metrics["top-1"] == 1.0 and ceiling.n_train == 10 and ceiling.n_test == 20
    table = bench.rank_table(results)
    assert "a-peak@32" in table and "10/20" in table
    assert re.search(r"^mean +noise-ceiling +2 pools +1\.000", table, re.M)
    data = bench.rank_json(results)
    json.dumps(data, allow_nan=False)
    assert data["mean"]["noise-ceiling"]["seconds_per_candidate"] is None
    with pytest.raises(TunaError, match="returned"):
        bench.evaluate([pool], {"bad": lambda p, tr, te: (np.zeros(3), 0.0)})


def test_evaluate_on_real_pool_with_xgboost(gmm_pool):
    from tuna import integration

    # 40 candidates spread over the whole pool (it is sorted by the tuner's timing)
    pool = bench.load_pool({**gmm_pool, "candidates": gmm_pool["candidates"][::4][:40]})
    scorers = {**bench.baselines(), "xgb": integration.xgb_scores}
    results = bench.evaluate([pool], scorers, n_train=20)
    by_model = {r.model: r for r in results}
    assert by_model["xgb"].n_test == 20
    assert all(math.isfinite(v) for v in by_model["xgb"].metrics.values())
    assert by_model["xgb"].seconds_per_candidate > 0
    assert by_model["noise-ceiling"].metrics["top-1"] >= 0.9
    again = bench.evaluate([pool], {"xgb": integration.xgb_scores}, n_train=20)[0]
    assert dict(again.metrics) == dict(by_model["xgb"].metrics)  # seeded


def test_import_of_the_yardstick_loads_neither_tvm_nor_matplotlib():
    import subprocess
    import sys

    code = ("import sys, tuna.bench; "
            "print(sorted(m for m in ('tvm', 'matplotlib', 'tuna.integration') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_shipped_pool_is_found_by_workload_name():
    assert bench.shipped_pool("gmm:1").name == "GMM-1"
    assert bench.shipped_pool("NRM-0").name == "NRM-0"
    assert bench.shipped_pool("GMM:99") is None


def test_a_workloads_pool_is_found_in_a_folder(tmp_path):
    shutil.copy(bench.shipped_pool("GMM:1").source, tmp_path)
    assert bench.shipped_pool("GMM:1", tmp_path).name == "GMM-1"
    assert bench.shipped_pool("NRM:0", tmp_path) is None  # shipped, but not in that folder


def test_fit_rows_are_cycles_of_analysable_candidates_without_the_pool_left_out():
    from tuna.machine import preset

    zen4 = preset("zen4")
    a = bench.load_pool(_pool_dict(n=3))
    b = bench.load_pool({**_pool_dict(n=2), "workload": ["SFM", 1]})
    features = {"GMM-1": [{"compute_cycles": 1.0}, None, {"compute_cycles": 3.0}],
                "SFM-1": [{"compute_cycles": 5.0}, {"compute_cycles": 6.0}]}
    rows, lat, groups = bench.fit_rows(features, [a, b], zen4)
    assert [r["compute_cycles"] for r in rows] == [1.0, 3.0, 5.0, 6.0]
    assert groups == ["GMM-1", "GMM-1", "SFM-1", "SFM-1"]
    assert lat[0] == pytest.approx(1e-3 * zen4.frequency_ghz * 1e9)
    rows, _, groups = bench.fit_rows(features, [a, b], zen4, leave_out="GMM-1")
    assert groups == ["SFM-1", "SFM-1"]


def test_subsample_is_seeded_ordered_and_keeps_timings_with_traces():
    cands = [{"trace": [[i], []], "secs_a": 1e-3 * (i + 1), "secs_b": 2e-3 * (i + 1)} for i in range(50)]
    pool = bench.load_pool({"workload": "w", "target": {"kind": "llvm"}, "mod": "#", "candidates": cands})
    one, again = bench.subsample(pool, 10, seed=3), bench.subsample(pool, 10, seed=3)
    assert len(one) == 10 and one.traces == again.traces
    assert one.traces != bench.subsample(pool, 10, seed=4).traces
    kept = [t[0][0] for t in one.traces]
    assert kept == sorted(kept)
    assert np.allclose(one.secs_a, [1e-3 * (i + 1) for i in kept])
    assert np.allclose(one.secs_b, [2e-3 * (i + 1) for i in kept])
    assert bench.subsample(pool, 50) is pool
    with pytest.raises(bench.PoolError, match="at least one"):
        bench.subsample(pool, 0)


def test_the_corrected_prediction_learns_what_the_static_model_gets_wrong_from_the_train_candidates():
    from tuna import linear
    from tuna.bench.ranking import corrected_scorer
    from tuna.machine import preset

    zen4 = preset("zen4")
    rng = np.random.default_rng(0)
    feats = [{"compute_cycles": float(c), "launches": float(k)}
             for c, k in zip(rng.uniform(1e5, 1e6, 150), rng.integers(1, 3, 150))]
    static = np.array([linear.seconds(f, linear.coefficients(zen4, "ir"), zen4) for f in feats])
    # What the static model misses: a schedule of two parallel regions runs three times slower.
    secs = static * np.where([f["launches"] == 2 for f in feats], 3.0, 1.0)
    pool = bench.load_pool(_pool_dict(n=150, candidates=[
        {"trace": [[], []], "tuner_secs": s, "secs_a": s, "secs_b": s} for s in secs]))
    feats[7] = None  # not analysable: the worst score, and nothing learned from it
    scorers = {"static": bench.feature_scorer({pool.name: feats}, {pool.name: 1e-3},
                                              lambda name, f: linear.seconds(f, linear.coefficients(zen4, "ir"), zen4)),
               "corrected": corrected_scorer({pool.name: feats}, {pool.name: 1e-3}, zen4, "ir")}
    by_model = {r.model: r.metrics for r in bench.evaluate([pool], scorers, n_train=64)}
    assert by_model["corrected"]["tau"] > 0.8 > by_model["static"]["tau"]
    assert by_model["corrected"]["top-10"] > by_model["static"]["top-10"]


def test_the_features_fingerprint_reads_what_files_mean_not_their_comments(tmp_path):
    from tuna.bench.features import _meaning

    def meaning(name: str, text: str) -> bytes:
        path = tmp_path / name
        path.write_text(text)
        return _meaning(path)

    code = meaning("a.py", '"""A module."""\n\n\ndef f(x):\n    """Twice x."""\n    return 2 * x  # why\n')
    assert code == meaning("a.py", '"""Another docstring."""\n# a comment\n\ndef f(x):\n    return 2 * x\n')
    assert code != meaning("a.py", '"""A module."""\n\n\ndef f(x):\n    return 3 * x\n')
    data = meaning("a.toml", "# sources\nrob = 256  # [amd]\n[class.x]\nslots = 1\n")
    assert data == meaning("a.toml", "rob = 256\n\n[class.x]  # measured\nslots = 1\n")
    assert data != meaning("a.toml", "rob = 256\n[class.x]\nslots = 2\n")
    assert meaning("b.py", "def (:\n") == b"def (:\n"  # what does not parse counts byte for byte
