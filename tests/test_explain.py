"""The report on one schedule: bounds priced exactly as the linear model prices them, peaks
from the target files, the untuned schedule beside the chosen one."""

import math

import pytest

from tuna import explain, integration, linear, preset
from tuna.estimate import Estimate
from tuna.integration import reporting


def test_each_bound_is_its_terms_priced_by_the_coefficients():
    mach = preset("graviton2")  # no coefficient file: the physical defaults
    feats = {"compute_cycles": 1000.0, "l1_fill_cycles": 200.0, "dram_cycles": 30000.0, "launches": 2.0,
             "calls": 4.0, "const": 1.0}
    coeffs = linear.coefficients(mach, "full")
    est = Estimate(linear.seconds(feats, coeffs, mach), "full", feats)
    b = explain.breakdown(est, mach)
    clock = mach.frequency_ghz * 1e9
    assert b.bound == "memory"
    assert b.seconds_of("memory") == pytest.approx(30000 / clock)
    assert b.seconds_of("L1 cache") == pytest.approx(200 / clock)
    assert b.seconds_of("parallel launches") == pytest.approx(2 * linear.launch_cycles(mach) / clock)
    assert b.seconds_of("library calls") == pytest.approx(4 * mach.latency["call"] / clock)
    assert sum(s.seconds for s in b.shares) == pytest.approx(est.seconds)
    assert sum(s.share for s in b.shares) == pytest.approx(1.0)
    assert [s.seconds for s in b.shares] == sorted((s.seconds for s in b.shares), reverse=True)
    assert b.coefficients == "default"


@pytest.mark.parametrize("target", ["zen4", "v100"])
def test_a_real_estimate_splits_into_bounds_that_add_up_to_it(target):
    mach = preset(target)
    est = integration.estimate_module(integration.load_workload("GMM:1"), mach, "ir")
    b = explain.breakdown(est, mach)
    assert sum(s.seconds for s in b.shares) == pytest.approx(est.seconds, rel=1e-9)
    assert set(s.bound for s in b.shares) <= set(explain.BOUND_MEANING)


def test_peaks_come_from_the_target_file():
    g = preset("graviton2")  # 64 cores x 2.5 GHz x 2 NEON FMA pipes x 4 FP32 lanes x 2
    assert explain.peak_flops(g) == pytest.approx(64 * 2.5e9 * 2 * 4 * 2)
    # What TVM's pool can use: one thread on the zen4 preset's 2-vCPU guest (one 512-bit FMA a cycle).
    assert explain.peak_flops(preset("zen4")) == pytest.approx(1 * 3.7e9 * 1 * 16 * 2)
    v = preset("v100")
    assert explain.peak_flops(v) == pytest.approx(v.gpu.sms * v.gpu.fp32_lanes_per_sm * v.frequency_ghz * 1e9 * 2)
    assert explain.peak_bandwidth(g) == pytest.approx(g.memory_gbps * 1e9)


def test_the_report_sets_a_schedule_against_the_untuned_workload(gmm_pool):
    mach = preset("zen4")
    mod = integration.load_workload("GMM:1")
    best = min(gmm_pool["candidates"], key=lambda c: c["secs_a"])
    est = integration.estimate_trace(mod, best["trace"], mach, "full")
    rep = reporting.report("GMM:1", mod, est, mach)
    assert rep.flops == 2 * 512 * 512 * 32  # GMM:1 is 1 x 512 x 32 x 512 multiply-adds
    assert rep.tensor_bytes == 4 * (512 * 512 + 512 * 32 + 512 * 32)
    assert rep.untuned is not None and rep.speedup > 10  # the naive loop nest is far slower
    text = "\n".join(explain.format_report(rep))
    assert f"bound by {rep.chosen.bound}" in text and "faster than it" in text and "peak" in text
    data = rep.to_json()
    assert data["features"] == dict(est.features) and data["chosen"]["bound"] == rep.chosen.bound
    assert math.isclose(data["speedup_over_untuned"], rep.speedup)


def test_the_untuned_gpu_schedule_is_tvms_default_thread_binding():
    mach = preset("v100")
    mod = integration.load_workload("GMM:1")
    rep = reporting.report("GMM:1", mod, integration.estimate_module(mod, mach, "ir"), mach)
    assert rep.untuned is not None, rep.untuned_error
    assert rep.untuned.seconds < rep.chosen.seconds  # one thread on a GPU is slower than the default binding


def test_the_figure_draws_both_schedules(tmp_path, gmm_pool):
    from tuna.bench import plots

    mach = preset("zen4")
    mod = integration.load_workload("GMM:1")
    est = integration.estimate_trace(mod, gmm_pool["candidates"][0]["trace"], mach, "ir")
    fig = plots.bounds_figure(reporting.report("GMM:1", mod, est, mach).to_json())
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("chosen") and labels[1].startswith("untuned")
    fig.savefig(tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
