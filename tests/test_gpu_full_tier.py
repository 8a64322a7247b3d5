"""The GPU full tier through TVM and nvcc (no GPU): codegen, ptxas, runner, pools, linear terms.

Tests that compile skip when nvcc is missing. The pool test uses made-up times, labelled
synthetic, only to drive the ranking code path; no GPU timing is shipped or claimed.
"""

import math

import pytest

from tuna import linear, machine
from tuna.errors import AnalysisError, TunaError
from tuna.gpu import nvcc

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc (CUDA toolkit) is not installed")

integration = pytest.importorskip("tuna.integration")
cuda = pytest.importorskip("tuna.integration.cuda")


@pytest.fixture(scope="module")
def a100():
    return machine.preset("a100")


@pytest.fixture(scope="module")
def gmm_candidates(a100):
    mod = integration.load_workload("GMM:1")
    return mod, cuda.sample_candidates(mod, integration.tvm_target(a100), 2, seed=11)


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TUNA_NVCC", "/nonexistent/nvcc")
    assert nvcc.find_nvcc() is None
    with pytest.raises(TunaError, match="CUDA toolkit"):
        nvcc.require_nvcc()


def test_ptxas_report_is_read():
    text = (
        "ptxas info    : Compiling entry function 'main_kernel' for 'sm_80'\n"
        "ptxas info    : Function properties for main_kernel\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 110 registers, used 1 barriers, 33280 bytes smem, 376 bytes cmem[0]\n"
    )
    res = nvcc.parse_ptxas(text)["main_kernel"]
    assert (res.registers, res.shared_bytes, res.spill_bytes, res.stack_bytes) == (110, 33280, 8, 8)


@needs_nvcc
def test_volta_falls_back_to_the_lowest_arch_nvcc_has():
    tool = nvcc.find_nvcc()
    archs = nvcc.supported_archs(tool)
    chosen = nvcc.choose_arch("sm_70", "sm_75", tool)
    assert chosen == ("sm_70" if "sm_70" in archs else "sm_75")
    assert nvcc.choose_arch("sm_80", "sm_80", tool) == "sm_80"


@needs_nvcc
def test_full_tier_counts_the_tirs_multiply_adds(a100, gmm_candidates):
    _, cands = gmm_candidates
    assert cands, "MetaSchedule's design space gave no valid candidate"
    for sch in cands:
        est = integration.estimate_module(sch.mod, a100, "full")
        f = est.features
        assert est.tier == "full" and est.seconds > 0
        assert f["fma_ptx_vs_tir"] == pytest.approx(1.0)
        assert f["registers"] > 0 and f["blocks_per_sm"] >= 1 and f["unknown_trip_loops"] == 0
        for term in linear.GPU_TERMS:
            assert term in f
        assert est.seconds == pytest.approx(linear.seconds(f, linear.coefficients(a100, "full"), a100))
        # The second view of latency is the IR tier's, on the same loop tree.
        ir = integration.estimate_module(sch.mod, a100, "ir").features
        assert f["ir_latency_cycles"] == pytest.approx(ir["latency_cycles"])


@needs_nvcc
def test_tir_shared_addresses_give_bank_conflicts(a100, gmm_candidates):
    _, cands = gmm_candidates
    device, _ = cuda.lower_to_cuda(cands[0].mod, integration.tvm_target(a100))
    (walker,) = cuda.device_kernels(device).values()
    assert walker.accesses, "the shared-memory accesses of the first warp were not evaluated"
    assert all(len(a.byte_addresses) == min(32, walker.dims["threadIdx.x"]) for a in walker.accesses)
    assert any(a.write for a in walker.accesses) and any(not a.write for a in walker.accesses)


@needs_nvcc
def test_volta_target_compiles_via_the_fallback(gmm_candidates):
    v100 = machine.preset("v100")
    mod, _ = gmm_candidates
    (sch,) = cuda.sample_candidates(mod, integration.tvm_target(v100), 1, seed=5)
    est = integration.estimate_module(sch.mod, v100, "full")
    tool = nvcc.find_nvcc()
    assert est.features["ptx_arch_substituted"] == float("sm_70" not in nvcc.supported_archs(tool))


@needs_nvcc
def test_static_runner_predicts_from_the_tir_sidecar(tmp_path, a100, gmm_candidates):
    _, cands = gmm_candidates
    artifact = tmp_path / "tvm_tmp_mod.tar"
    artifact.write_bytes(b"")
    runner = integration.StaticRunner(a100)
    with pytest.raises(TunaError, match="StaticBuilder"):
        runner.predict_artifact(str(artifact))
    (tmp_path / integration.SIDECAR).write_text(cands[0].mod.script())
    seconds = runner.predict_artifact(str(artifact))
    assert seconds == pytest.approx(integration.estimate_module(cands[0].mod, a100, "full").seconds)


def test_cost_model_keeps_the_ir_tier_on_gpu_targets(a100, gmm_candidates):
    _, cands = gmm_candidates
    model = integration.TunaCostModel(a100)
    scores = [model.score_module(sch.mod) for sch in cands]
    assert all(math.isfinite(s) for s in scores) and model.failed == 0


@needs_nvcc
def test_a_cuda_pool_ranks_with_both_tiers(a100, gmm_candidates):
    from tuna import bench

    mod, cands = gmm_candidates
    synthetic = [1e-4 * (i + 1) for i in range(len(cands))]  # SYNTHETIC times: only to drive the code path
    pool = bench.load_pool({
        "workload": ["GMM", 1],
        "target": dict(a100.target),
        "mod": mod.script(),
        "candidates": [
            {"trace": integration.plain_json(s.trace.as_json()), "secs_a": t, "secs_b": t}
            for s, t in zip(cands, synthetic)
        ],
    })
    for tier in ("ir", "full"):
        feats, secs = integration.pool_features(pool, a100, tier)
        assert all(f is not None for f in feats) and secs > 0
        coeffs = linear.coefficients(a100, tier)
        predicted = [linear.seconds(f, coeffs, a100) for f in feats]
        assert all(p > 0 for p in predicted)
        scorer = bench.feature_scorer(
            {pool.name: feats}, {pool.name: secs}, lambda name, f, c=coeffs: linear.seconds(f, c, a100)
        )
        scores, _ = scorer(pool, [], list(range(len(cands))))
        assert len(scores) == len(cands) and all(s > -1e29 for s in scores)
    fitted = linear.fit(feats * 3, [t * a100.frequency_ghz * 1e9 for t in synthetic] * 3)
    assert set(fitted) == set(linear.GPU_TERMS)


def test_gpu_terms_do_not_touch_cpu_coefficients():
    zen4 = machine.preset("zen4")
    assert set(linear.coefficients(zen4, "full").values) == set(linear.TERMS)
    assert set(linear.default_coefficients(machine.preset("v100"), "full").values) == set(linear.GPU_TERMS)


def test_a_workload_with_no_thread_binding_is_refused_with_the_reason(a100):
    # The workload as written runs on the host: no CUDA kernel for the full tier to read.
    with pytest.raises(AnalysisError, match="binds no loop to a GPU thread"):
        cuda.lower_to_cuda(integration.load_workload("GMM:1"), integration.tvm_target(a100))


def test_the_ir_tiers_latency_in_the_full_tier_weighs_nothing_unless_fitted():
    # A GPU without a coefficient file, the IR tier everywhere, and a file fitted before the
    # term existed (a100.toml) keep today's predictions: the term counts 0.
    for name in ("v100", "a100", "h100"):
        gpu = machine.preset(name)
        assert linear.default_coefficients(gpu, "full").values["ir_latency_cycles"] == 0.0
        assert linear.coefficients(gpu, "ir").values["ir_latency_cycles"] == 0.0
    assert linear.coefficients(machine.preset("a100"), "full").values["ir_latency_cycles"] == 0.0


def test_ir_tier_bank_conflicts_agree_with_the_lowered_code(a100, gmm_candidates):
    # Differential: the first warp's shared addresses that the IR tier evaluates on the
    # scheduled TIR (Access.warp) give the same conflict degrees as those the full tier reads
    # from the lowered, unrolled device code (which holds one access per unrolled copy).
    from tuna.gpu import banks, ir_tier
    from tuna.integration.lower import kernel_from_module
    from tuna.ir import LoopKind, walk

    _, cands = gmm_candidates
    for cand in cands:
        device, _ = cuda.lower_to_cuda(cand.mod, integration.tvm_target(a100))
        (walker,) = cuda.device_kernels(device).values()
        lowered = {(a.write, banks.conflict_degree(a.byte_addresses, 32, 4, a.bytes_per_element))
                   for a in walker.accesses}
        scheduled = set()
        for stmt, loops in walk(kernel_from_module(cand.mod).body):
            vector = next((lp.extent for lp in reversed(loops) if lp.kind == LoopKind.VECTORIZED), 1)
            for acc in stmt.accesses:
                if acc.scope.startswith("shared"):
                    assert len(acc.warp) == min(32, walker.dims["threadIdx.x"])
                    scheduled.add((acc.write, ir_tier._passes(acc, "shared", vector, a100.gpu)))
        assert scheduled == lowered
