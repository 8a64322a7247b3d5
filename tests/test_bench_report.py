"""`tuna bench report`: BENCHMARKS.md and its figures from saved JSON, and the bench commands'
answers to bad input. The JSON results below are SYNTHETIC (made up for the test, not measured)."""

import json
from pathlib import Path

import pytest

from tuna import bench, cli

META = {"machine": {"model_name": "Synthetic CPU", "cores": 2, "tvm": "0.0"}, "target": "zen4",
        "date": "2000-01-01 00:00 UTC", "command": "tuna bench ... (synthetic)", "seconds": 1.0}


def _rank():
    mean = {m: {**{k: v for k in bench.METRICS}, "seconds_per_candidate": None, "pools": 1}
            for m, v in (("random", 0.5), ("tuna-ir", 0.75))}
    results = [{"pool": "P-0", "model": m, **{k: row[k] for k in bench.METRICS}} for m, row in mean.items()]
    predictions = {"tuna-ir": {"P-0": {"measured": [1e-5, 2e-5, 4e-5], "predicted": [2e-5, 3e-5, None]}}}
    return {"metrics": list(bench.METRICS), "results": results, "mean": mean, "predictions": predictions,
            "meta": META}


def _tune():
    rows = [{"workload": "GMM:1", "method": "tuna", "tune_seconds": 10.0, "trials": 8, "latency": 2e-4},
            {"workload": "GMM:1", "method": "metaschedule@tuna-time", "tune_seconds": 10.0, "trials": 0,
             "latency": None},
            {"workload": "GMM:1", "method": "metaschedule", "tune_seconds": 40.0, "trials": 8, "latency": 1e-4}]
    return {"rows": bench.with_ratios(rows, "workload", {"GMM:1": 5e-5}), "meta": META}


def _network():
    rows = [{"network": "bert", "method": "untuned", "tune_seconds": 0.0, "latency": 1.0, "note": ""},
            {"network": "bert", "method": "tuna", "tune_seconds": 60.0, "latency": 0.25, "tasks": 11, "trials": 22},
            {"network": "bert", "method": "pytorch", "tune_seconds": None, "latency": None,
             "note": "skipped: PyTorch is not installed"}]
    return {"rows": bench.with_ratios(rows, "network"), "meta": META}


def test_ratios_are_to_the_fastest_of_each_group_and_to_the_reference():
    rows = _tune()["rows"]
    assert [r["ratio"] for r in rows] == [0.5, None, 1.0]
    assert [r["ratio_to_reference"] for r in rows] == [0.25, None, 0.5]


def test_seed_summary_shows_each_seed_and_the_worst_pick():
    rows = [{"workload": w, "method": "tuna-es" + (f"@seed{seed}" if seed else ""), "seed": seed, "latency": lat,
             "tune_seconds": secs}
            for w, seed, lat, secs in (("GMM:1", 0, 1e-4, 10.0), ("GMM:1", 1, 1.25e-4, 30.0), ("SFM:1", 0, 2e-4, 5.0),
                                       ("SFM:1", 1, 2e-4, 5.0))]
    rows.append({"workload": "GMM:1", "method": "metaschedule", "latency": 1e-4, "tune_seconds": 80.0})
    text = bench.seed_summary(bench.with_ratios(rows, "workload", {"GMM:1": 1e-4, "SFM:1": 2e-4}))
    lines = text.splitlines()
    assert lines[1].split() == ["search", "workload", "seed", "0", "seed", "1", "worst"]
    assert lines[3].split() == ["tuna-es", "GMM:1", "1.000", "0.800", "0.800"]
    assert lines[4].split() == ["tuna-es", "SFM:1", "1.000", "1.000", "1.000"]
    assert lines[-2] == ("tuna-es: 3 of 4 picks within 5% of the pool's best; worst 0.800 (GMM:1, seed 1); "
                         "geometric mean 0.946")  # (0.8 ** (1 / 4))
    # Only GMM:1 has MetaSchedule's time: its mean over seeds, 20 s, over 80 s.
    assert lines[-1].startswith("tuna-es: tuning time 0.250x MetaSchedule's with measurement (geometric mean over 1 ")
    report = bench.benchmarks_markdown(None, {"rows": bench.with_ratios(rows, "workload"), "meta": META}, None)
    assert "| GMM:1 | tuna-es@seed1 |" in report and "Ratio to pool best by seed:" in report


def test_a_shortlist_says_whether_the_search_or_the_model_lost_the_fastest_schedule():
    # Predicted order: c, a, b, d; measured: b fastest (its rank 3), the pick c at 2x b; d failed to run.
    cands = [{"predicted_secs": p, "secs_a": a} for p, a in ((2e-5, 3e-5), (3e-5, 1e-5), (1e-5, 2e-5), (4e-5, None))]
    got = bench.shortlist_summary(cands)
    assert got == {"shortlist_size": 3, "shortlist_fastest": 1e-5, "pick_to_fastest": 0.5, "fastest_rank": 3,
                   "shortlist_tau": pytest.approx(-1 / 3), "shortlist_top10": pytest.approx(1.0)}
    assert bench.shortlist_summary([{"predicted_secs": 1e-5, "secs_a": None}]) == {"shortlist_size": 0}
    rows = [{"workload": "GMM:1", "method": "tuna-es", "reference": 0.8e-5, **got},
            {"workload": "GMM:1", "method": "pool-best", "reference": 0.8e-5}]
    lines = bench.shortlist_table(rows).splitlines()
    assert len(lines) == 4  # header, rule, one run (pool-best has no shortlist), the means
    assert lines[2].split() == ["GMM:1", "tuna-es", "3", "10", "us", "0.500", "3", "0.800", "-0.333", "1.000"]
    assert lines[3] == ("1 runs: pick/fastest geometric mean 0.500 (0 within 5%); "
                        "fastest/pool best geometric mean 0.800 (0 within 5%)")
    page = bench.benchmarks_markdown(None, {"rows": rows, "meta": META}, None)
    assert "| GMM:1 | tuna-es | 3 | 10 us | 0.500 | 3 | 0.800 | -0.333 | 1.000 |" in page
    assert "Shortlist" not in bench.benchmarks_markdown(None, _tune(), None)  # runs without --shortlists


def test_report_from_saved_json_writes_markdown_and_figures(tmp_path, capsys):
    paths = {}
    for key, data in (("rank", _rank()), ("tune", _tune()), ("network", _network())):
        paths[key] = tmp_path / f"{key}.json"
        paths[key].write_text(json.dumps(data))
    out = tmp_path / "BENCHMARKS.md"
    code = cli.main(["bench", "report", "--rank", str(paths["rank"]), "--tune", str(paths["tune"]),
                     "--network", str(paths["network"]), "--figures", str(tmp_path / "docs"), "-o", str(out)])
    assert code == 0
    text = out.read_text()
    for key in ("rank", "tune", "network"):
        png = tmp_path / "docs" / f"bench-{key}.png"
        assert png.read_bytes().startswith(b"\x89PNG")
        assert f"](docs/bench-{key}.png)" in text
    assert "Synthetic CPU, 2 cores" in text
    assert "| tuna-ir | 1 | 0.750 |" in text  # the rank means
    assert "| GMM:1 | metaschedule@tuna-time | 0 | 10 s | - | - |" in text  # nothing measured in tuna's time
    assert "skipped: PyTorch is not installed" in text
    assert "scripts/benchmarks.sh" in text
    # A second --rank (pools set aside) gets a section of its own, titled by its pools' folder.
    aside = {**_rank(), "meta": {**META, "pools": ["aside/P-1.json", "aside/P-2.json"]}}
    (tmp_path / "aside.json").write_text(json.dumps(aside))
    assert cli.main(["bench", "report", "--rank", str(paths["rank"]), "--rank", str(tmp_path / "aside.json"),
                     "-o", str(out)]) == 0
    text = out.read_text()
    assert "## Ranking the pools of `aside` (`tuna bench rank`)" in text
    assert text.count("| tuna-ir | 1 | 0.750 |") == 2


def test_report_joins_runs_of_one_command(tmp_path):
    resnet = {"rows": [{"network": "resnet18", "method": "tuna", "tune_seconds": 90.0, "latency": 0.05,
                        "tasks": 22, "trials": 44}],
              "meta": {**META, "command": "tuna bench network --models resnet18", "seconds": 100.0}}
    paths = [tmp_path / "bert.json", tmp_path / "resnet.json"]
    paths[0].write_text(json.dumps(_network()))
    paths[1].write_text(json.dumps(resnet))
    out = tmp_path / "BENCHMARKS.md"
    argv = ["bench", "report", "--network", str(paths[0]), "--network", str(paths[1]), "-o", str(out)]
    assert cli.main(argv) == 0
    text = out.read_text()
    assert "| bert | tuna |" in text and "| resnet18 | tuna |" in text
    assert "; tuna bench network --models resnet18`" in text  # both commands named


def test_report_with_only_some_sections_says_which_were_not_run(tmp_path):
    paths = tmp_path / "rank.json"
    paths.write_text(json.dumps(_rank()))
    text = bench.benchmarks_markdown(_rank(), None, None, generated="(synthetic)", note="a synthetic page")
    assert "**a synthetic page**" in text
    assert text.count("Not run.") == 3  # tune, network, hybrid
    assert "## Ranking measured pools" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "report", "--rank", "{missing}"], "do not exist"),
        (["bench", "report", "--tune", "{not_tune}"], "is not the JSON of `tuna bench tune`"),
        (["bench", "report", "--network", "{garbage}"], "are not JSON"),
        (["bench", "rank", "{not_pool}"], "{not_pool}"),
        (["bench", "rank", "{nrm}", "--fit-on", "shipped"], "share names (NRM-0)"),  # refused before analysis
        (["bench", "collect", "NOPE:1", "-o", "{out}"], "unknown workload 'NOPE:1'"),
        (["bench", "collect", "GMM:1", "--target", "graviton2", "-o", "{out}"],
         "no measurements possible on this machine: graviton2 is a cross target"),
        (["bench", "collect", "GMM:1", "--target", "v100", "-o", "{out}"], "no measurements possible on this machine"),
        (["bench", "collect", "GMM:1", "-o", "{nodir}"], "does not exist"),
        (["bench", "collect", "GMM:1", "-o", "{tmp}"], "is a directory"),
        (["bench", "tune", "GMM:99"], "configurations"),
        (["bench", "tune", "GMM:1", "--target", "cortex-a53"], "no measurements possible on this machine"),
        (["bench", "tune", "NRM:0", "--more-seeds", "1,two"], "--more-seeds takes comma-separated integers"),
        (["bench", "tune", "NRM:0", "--pools", "{missing}"], "--pools {missing}: no such folder"),
        (["bench", "network", "--models", "alexnet"], "unknown network 'alexnet'"),
        (["bench", "network", "--models", "bert", "--methods", "onnx"], "unknown method(s) onnx"),
        (["bench", "network", "--models", "bert", "--target", "graviton2"], "no measurements possible"),
    ],
)
def test_bad_input_fails_with_a_clear_message(tmp_path, capsys, argv, message):
    (tmp_path / "not_tune.json").write_text(json.dumps({"mean": {}}))
    (tmp_path / "garbage.json").write_text("{")
    (tmp_path / "not_pool.json").write_text(json.dumps({"format": "someone else's", "records": []}))
    names = {"missing": tmp_path / "missing.json", "not_tune": tmp_path / "not_tune.json",
             "garbage": tmp_path / "garbage.json", "not_pool": tmp_path / "not_pool.json",
             "out": tmp_path / "pool.json", "nodir": tmp_path / "no" / "pool.json", "tmp": tmp_path,
             "nrm": next(p for p in bench.shipped_pools() if p.stem == "NRM-0")}
    argv = [a.format(**names) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tuna: error: ")
    assert message.format(**names) in err
    assert not (tmp_path / "pool.json").exists()


def test_rank_writes_predictions_and_a_figure_beside_the_json(tmp_path, capsys):
    pool = next(p for p in bench.shipped_pools() if p.stem == "NRM-0")  # the smallest shipped pool
    out = tmp_path / "rank.json"
    assert cli.main(["bench", "rank", str(pool), "--tiers", "ir", "--no-xgb", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    loaded = bench.load_pool(pool)
    pred = data["predictions"]["tuna-ir"]["NRM-0"]
    assert pred["measured"] == list(loaded.secs_a)
    assert len(pred["predicted"]) == len(loaded)
    assert any(p is not None and p > 0 for p in pred["predicted"])
    assert data["meta"]["target"] == "zen4" and data["meta"]["machine"]["cores"] >= 1
    assert (tmp_path / "rank.png").read_bytes().startswith(b"\x89PNG")


def test_rank_models_pools_as_the_machine_they_were_measured_on_unless_told(tmp_path, capsys):
    root = Path(__file__).resolve().parent.parent
    pool = root / "docs" / "bench" / "emr-pools" / "NRM-0.json.gz"  # measured on an Emerald Rapids guest
    out = tmp_path / "rank.json"
    assert cli.main(["bench", "rank", str(pool), "--tiers", "ir", "--no-xgb", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["meta"]["target"] == "emeraldrapids"
    assert "measured on emeraldrapids, modelled as emeraldrapids" in capsys.readouterr().err
    argv = ["bench", "rank", str(pool), "--tiers", "ir", "--no-xgb", "--target", "zen4", "--json", str(out)]
    assert cli.main(argv) == 0
    assert json.loads(out.read_text())["meta"]["target"] == "zen4"


def _first_candidates(pool: Path, n: int, out: Path) -> None:
    """Write the shipped (plain JSON) ``pool`` cut to its first ``n`` candidates to ``out``."""
    data = json.loads(pool.read_text())
    data["candidates"] = data["candidates"][:n]
    out.write_text(json.dumps(data))


def test_rank_of_several_pools_fits_each_tier_without_the_pool_ranked(tmp_path, capsys):
    # The IR tier's unseen fits hold a coefficient of the full tier's fit on the same pools.
    shipped = {p.stem: p for p in bench.shipped_pools()}
    _first_candidates(shipped["SFM-1"], 30, tmp_path / "SFM-1.json")
    out = tmp_path / "rank.json"
    argv = ["bench", "rank", str(shipped["NRM-0"]), str(tmp_path / "SFM-1.json"), "--no-xgb", "--json", str(out)]
    assert cli.main(argv) == 0
    rows = json.loads(out.read_text())["results"]
    for model in ("tuna-ir", "tuna-ir-unseen", "tuna-full", "tuna-full-unseen"):
        assert {r["pool"] for r in rows if r["model"] == model} == {"NRM-0", "SFM-1"}


def test_rank_fits_on_more_pools_than_it_ranks(tmp_path, capsys):
    # --fit-on: NRM-0 alone has no other pool or family to be fitted on; with a softmax pool to
    # fit on, it gets -unseen and -lofo rows, and only NRM-0 is ranked.
    shipped = {p.stem: p for p in bench.shipped_pools()}
    (tmp_path / "fit").mkdir()
    _first_candidates(shipped["SFM-1"], 30, tmp_path / "fit" / "SFM-1.json")
    out = tmp_path / "rank.json"
    argv = ["bench", "rank", str(shipped["NRM-0"]), "--tiers", "ir", "--no-xgb", "--json", str(out)]
    assert cli.main(argv) == 0
    assert {r["model"] for r in json.loads(out.read_text())["results"]} == {"random", "noise-ceiling", "tuna-ir"}
    assert cli.main([*argv, "--fit-on", str(tmp_path / "fit")]) == 0
    data = json.loads(out.read_text())
    assert {r["model"] for r in data["results"]} == {"random", "noise-ceiling", "tuna-ir", "tuna-ir-unseen",
                                                     "tuna-ir-lofo"}
    assert {r["pool"] for r in data["results"]} == {"NRM-0"} and data["meta"]["fit_on"] == [str(tmp_path / "fit" /
                                                                                              "SFM-1.json")]
    assert "and of the 1 pools of --fit-on" in capsys.readouterr().out


def test_rank_leaves_out_pools_too_small_to_split_and_says_so(tmp_path, capsys):
    # A concatenation has one schedule: its pool holds one candidate, nothing to train on or rank.
    shipped = {p.stem: p for p in bench.shipped_pools()}
    _first_candidates(shipped["SFM-1"], 1, tmp_path / "one.json")
    out = tmp_path / "rank.json"
    argv = ["bench", "rank", str(shipped["NRM-0"]), str(tmp_path / "one.json"), "--tiers", "ir", "--json", str(out)]
    assert cli.main(argv) == 0
    assert "left out, too few candidates to train on and rank: SFM-1 (1)" in capsys.readouterr().err
    assert {r["pool"] for r in json.loads(out.read_text())["results"]} == {"NRM-0"}
    assert cli.main(["bench", "rank", str(tmp_path / "one.json"), "--tiers", "ir", "--no-xgb"]) == 2
    assert "no pool has enough candidates to rank" in capsys.readouterr().err
