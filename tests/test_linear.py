from pathlib import Path

import numpy as np
import pytest

from tuna import cli, linear, machine, tiers
from tuna.errors import TunaError


def test_fit_recovers_known_non_negative_coefficients():
    rng = np.random.default_rng(0)
    truth = {"compute_cycles": 1.5, "l1_fill_cycles": 0.5, "launches": 2e4, "const": 300.0}
    rows = [
        {"compute_cycles": c, "l1_fill_cycles": f, "launches": n, "const": 1.0}
        for c, f, n in zip(rng.uniform(1e4, 1e6, 40), rng.uniform(0, 1e5, 40), rng.integers(0, 3, 40))
    ]
    lat = [sum(truth.get(t, 0) * r.get(t, 0) for t in linear.TERMS) for r in rows]
    fitted = linear.fit(rows, lat)
    for term in linear.TERMS:
        assert fitted[term] == pytest.approx(truth.get(term, 0.0), rel=1e-3, abs=1e-6)


def test_fit_holds_measured_coefficients_and_fits_the_rest():
    rng = np.random.default_rng(1)
    truth = {"compute_cycles": 1.5, "launches": 2e4}
    rows = [{"compute_cycles": c, "launches": n} for c, n in zip(rng.uniform(1e4, 1e6, 30), rng.integers(0, 4, 30))]
    lat = [sum(truth[t] * r[t] for t in truth) for r in rows]
    fitted = linear.fit(rows, lat, fixed={"launches": 3e4})
    assert fitted["launches"] == 3e4 and fitted["compute_cycles"] > 0
    zen4 = machine.preset("zen4")
    unpriced = {"tir_fp_cycles": 0.0, "tir_chain_cycles": 0.0, "const": 0.0, "call_block_ops": linear.CALL_BLOCK_OPS,
                "l1_excess_cycles": linear.L1_EXCESS}
    assert linear.held(zen4, "full") == {
        "launches": zen4.parallel_region_us * 1e-6 * zen4.frequency_ghz * 1e9, "l2_fill_cycles": 1.0, **unpriced}
    # L2 fills count at the target file's bandwidth on every CPU; a launch's cost is held only
    # where the target file has it measured (else the default, like the other unpriced terms).
    graviton = machine.preset("graviton2")
    assert linear.held(graviton, "full") == {"l2_fill_cycles": 1.0, "launches": linear.launch_cycles(graviton),
                                              **unpriced}
    assert linear.coefficients(zen4, "full").values["l2_fill_cycles"] == 1.0
    assert linear.coefficients(zen4, "full").values["l1_excess_cycles"] == linear.L1_EXCESS
    # The IR tier holds the full tier's price of the code around library calls, and the
    # physical defaults for the rest: it is not fitted (see linear.held).
    physical = dict(linear.default_coefficients(zen4, "ir").values)
    assert linear.held(zen4, "ir", {"call_block_ops": 1.5}) == {**physical, "call_block_ops": 1.5}
    shipped_full = linear.coefficients(zen4, "full").values["call_block_ops"]
    assert shipped_full > 0 and linear.held(zen4, "ir") == {**physical, "call_block_ops": shipped_full}
    assert linear.coefficients(zen4, "ir").values["call_block_ops"] == shipped_full
    # On GPUs too the IR tier keeps its physical defaults; the full tier is fitted freely.
    v100 = machine.preset("v100")
    assert linear.held(v100, "ir") == dict(linear.default_coefficients(v100, "ir").values)
    assert linear.held(v100, "full") == {}
    # Fitting both tiers at once: the full tier first, its call_block_ops held by the IR tier's fit.
    pairs = zip(rng.uniform(1e4, 1e6, 30), rng.uniform(0, 1e5, 30))
    rows = [{"compute_cycles": c, "call_block_ops": b} for c, b in pairs]
    lat = [1.5 * r["compute_cycles"] + 2.5 * r["call_block_ops"] for r in rows]
    tables = linear.fit_tiers(zen4, {"ir": (rows, [2 * x for x in lat], None), "full": (rows, lat, None)})
    assert list(tables) == ["ir", "full"]
    assert tables["full"]["call_block_ops"] > 0  # (recovery of the prices: the fit_ranking test)
    assert tables["ir"] == {**physical, "call_block_ops": tables["full"]["call_block_ops"]}
    shipped = linear.coefficients(zen4, "full").values["launches"]
    assert shipped == pytest.approx(linear.launch_cycles(zen4), rel=1e-5)


#: CPU presets with a coefficient file of their own or one they borrow (coefficients_from).
_CPU_WITH_COEFFICIENTS = sorted(
    name for name, mach in machine.presets().items()
    if mach.kind == "cpu" and (mach.coefficients_from or linear._shipped(name))
)


def test_the_cpu_presets_with_coefficients_include_those_fitted_on_their_own_pools():
    assert {"zen3", "zen4", "emeraldrapids", "graniterapids"} <= set(_CPU_WITH_COEFFICIENTS)


@pytest.mark.parametrize("name", _CPU_WITH_COEFFICIENTS)
def test_each_cpu_coefficient_file_names_its_pools_and_holds_its_machines_launch_cost(name):
    mach = machine.preset(name)
    for tier in ("ir", "full"):
        coeffs = linear.coefficients(mach, tier)
        assert coeffs.fitted_on, f"{name}.toml [{tier}] names no pools"
        # the launch term is the preset's measured parallel region, never another machine's
        assert coeffs.values["launches"] == pytest.approx(linear.launch_cycles(mach), rel=1e-3)


def test_a_preset_without_pools_of_its_own_borrows_a_files_coefficients_but_not_its_cycle_costs():
    zen5, zen4 = machine.preset("zen5"), machine.preset("zen4")
    assert zen5.coefficients_from == "zen4"
    for tier in ("ir", "full"):
        borrowed, lender = linear.coefficients(zen5, tier), linear.coefficients(zen4, tier)
        assert borrowed.source == "tuna/data/coeffs/zen4.toml" and borrowed.fitted_on == lender.fitted_on
        assert borrowed.values["compute_cycles"] == lender.values["compute_cycles"]
        # the parallel region is a cost of the machine itself, in its own cycles; so is a library
        # call where the file holds it at its machine's value (the IR tier's), not where it fits it
        assert borrowed.values["launches"] == pytest.approx(linear.launch_cycles(zen5))
        assert borrowed.values["launches"] != pytest.approx(lender.values["launches"])
        calls = linear.default_coefficients(zen5, tier).values["calls"] if tier == "ir" else lender.values["calls"]
        assert borrowed.values["calls"] == calls


def test_coefficient_files_round_trip_and_reject_unknown_terms():
    zen4 = machine.preset("zen4")
    text = linear.to_toml({"ir": {"compute_cycles": 2.0, "calls": 9.0}}, zen4, ["GMM-1"], "test.")
    # the header names what the fit held, and why (the IR tier's call_block_ops: the shipped full tier's)
    assert "ir: call_block_ops (the full tier's, as shipped)" in text
    assert "# Held, not fitted: ir: compute_cycles, l1_fill_cycles," in text and "(physical default" in text
    coeffs = linear.parse(text, zen4, "ir", "test")
    assert coeffs.values["compute_cycles"] == 2.0 and coeffs.fitted_on == ("GMM-1",)
    assert coeffs.cycles({"compute_cycles": 10, "calls": 1}) == 29.0
    assert linear.parse(text, zen4, "full", "test") == linear.default_coefficients(zen4, "full")
    with pytest.raises(TunaError, match="unknown terms"):
        linear.parse("[ir]\nbogus = 1\n", zen4, "ir", "test")


def test_shipped_zen4_coefficients_name_the_pools_they_were_fitted_on():
    zen4 = machine.preset("zen4")
    for tier in tiers.TIERS:
        coeffs = linear.coefficients(zen4, tier)
        assert coeffs.source.endswith("zen4.toml") and len(coeffs.fitted_on) >= 6
    assert linear.coefficients(machine.preset("graviton2"), "full").source == "default"


def test_calibrate_command_writes_a_coefficient_file(tmp_path, capsys):
    out = tmp_path / "zen4.toml"
    pool = str(Path(linear.__file__).parent / "data" / "pools" / "NRM-0.json")
    assert cli.main(["calibrate", pool, "--tiers", "ir", "-o", str(out)]) == 0
    coeffs = linear.parse(out.read_text(), machine.preset("zen4"), "ir", str(out))
    assert coeffs.fitted_on == ("NRM-0",) and coeffs.values["compute_cycles"] >= 0
    assert cli.main(["calibrate", pool, "--tiers", "fast", "-o", str(out)]) == 2
    assert "unknown tier" in capsys.readouterr().err


def test_bench_rank_refuses_a_tier_that_analyses_no_candidate(capsys):
    pool = str(Path(linear.__file__).parent / "data" / "pools" / "NRM-0.json")
    assert cli.main(["bench", "rank", pool, "--target", "v100", "--tiers", "full", "--no-xgb"]) == 2
    assert "no candidate could be analysed with the full tier for v100" in capsys.readouterr().err


def test_fit_ranking_recovers_the_order_within_pools_whatever_their_speed():
    rng = np.random.default_rng(3)
    truth = {"compute_cycles": 2.0, "load_ops": 0.5}
    rows, lat, groups = [], [], []
    for pool, speed in (("a", 1.0), ("b", 7.0), ("c", 0.2)):  # each pool at its own absolute speed
        for _ in range(40):
            r = {"compute_cycles": rng.uniform(1e4, 1e6), "load_ops": rng.uniform(1e4, 1e6)}
            rows.append(r)
            lat.append(speed * sum(truth[t] * r[t] for t in truth))
            groups.append(pool)
    fitted = linear.fit_ranking(rows, lat, groups, names=("compute_cycles", "load_ops", "const"),
                                fixed={"const": 0.0}, prior={"compute_cycles": 1.0}, weight=0.0)
    # only the ratio of the coefficients decides an order: it is recovered, the scale is free
    assert fitted["load_ops"] / fitted["compute_cycles"] == pytest.approx(0.25, rel=0.02)
    assert fitted["const"] == 0.0
    with pytest.raises(TunaError, match="at least 2 measured candidates"):
        linear.fit_ranking(rows[:1], lat[:1], groups[:1], names=("compute_cycles", "load_ops"))
    # the CPU full tier is fitted this way, its unpriced terms held at their physical defaults
    zen4 = machine.preset("zen4")
    held = linear.held(zen4, "full")
    assert set(linear.TERMS) - set(held) == set(linear.FULL_FITTED)
    assert held["l2_fill_cycles"] == 1.0 and held["tir_fp_cycles"] == 0.0 and "dram_cycles" not in held
