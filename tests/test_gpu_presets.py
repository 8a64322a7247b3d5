"""The GPU presets beyond A100/H100/V100/Xavier: T4, RTX 3080/3090/4090, L4 and Jetson AGX Orin.

Each resolves by name, alias and TVM target tag; its instruction timing file loads; its per-SM
limits are the CUDA Programming Guide's for its compute capability; and both GPU tiers give a
finite positive estimate for a MetaSchedule candidate of a small matmul (no GPU: the IR tier
reads the TIR, the full tier compiles with nvcc and skips without it, as in
``test_gpu_full_tier.py``).
"""

import math
import tomllib
from importlib import resources

import pytest

from tuna import machine
from tuna.gpu import nvcc
from tuna.gpu.ir_tier import occupancy
from tuna.gpu.timing import timing

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc (CUDA toolkit) is not installed")

#: name -> (compute capability, TVM 0.27 target tag or None, natural aliases)
PRESETS = {
    "t4": ("sm_75", "nvidia/nvidia-t4", ("tesla-t4", "nvidia-t4", "turing")),
    "rtx3080": ("sm_86", "nvidia/geforce-rtx-3080", ("geforce-rtx-3080", "rtx-3080")),
    "rtx3090": ("sm_86", "nvidia/geforce-rtx-3090", ("geforce-rtx-3090", "rtx-3090")),
    "rtx4090": ("sm_89", "nvidia/geforce-rtx-4090", ("geforce-rtx-4090", "rtx-4090")),
    "l4": ("sm_89", None, ("nvidia-l4",)),
    "orin": ("sm_87", "nvidia/jetson-agx-orin-64gb", ("jetson-orin", "agx-orin", "jetson-agx-orin")),
}

#: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (and CCCL's
#: arch traits): threads, warps and blocks per SM, shared memory per SM and per block (KiB),
#: shared memory reserved per block (bytes).
GUIDE = {
    "sm_75": (1024, 32, 16, 64, 64, 0),
    "sm_86": (1536, 48, 16, 100, 99, 1024),
    "sm_87": (1536, 48, 16, 164, 163, 1024),
    "sm_89": (1536, 48, 24, 100, 99, 1024),
}


@pytest.mark.parametrize("name", PRESETS)
def test_preset_resolves_by_name_alias_and_tag(name):
    arch, tag, aliases = PRESETS[name]
    m = machine.preset(name)
    assert m.kind == "gpu" and m.isa == "ptx" and m.target["arch"] == arch
    for alias in aliases:
        assert machine.preset(alias) is m
        assert machine.resolve(alias).name == name
    if tag is not None:
        assert machine.preset(tag) is m
        assert machine.resolve(tag).name == name


@pytest.mark.parametrize("name", [n for n, (_, tag, _) in PRESETS.items() if tag])
def test_target_dict_is_tvms_own_for_the_tag(name):
    tvm = pytest.importorskip("tvm")
    _, tag, _ = PRESETS[name]
    exported = dict(tvm.target.Target(tag).export())
    # TVM adds its bookkeeping (keys, an empty tag) and, for Jetson, the host CPU; the device dict is the rest.
    expected = {k: v for k, v in exported.items() if k not in ("keys", "tag", "host")}
    assert dict(machine.preset(name).target) == expected


#: Presets alone on their arch: a ``tvm.target.Target`` of their tag names no more than the arch
#: (TVM's export drops the tag name), which is enough for these. Presets sharing an arch
#: (RTX 3080/3090, RTX 4090/L4) are told apart by tuna.machine and tested with it.
_ARCHS = [arch for arch, _, _ in PRESETS.values()]
UNIQUE_ARCH = [n for n, (arch, tag, _) in PRESETS.items() if tag and _ARCHS.count(arch) == 1]


@pytest.mark.parametrize("name", UNIQUE_ARCH)
def test_tvm_target_object_of_the_tag_resolves(name):
    tvm = pytest.importorskip("tvm")
    _, tag, _ = PRESETS[name]
    assert machine.resolve(tvm.target.Target(tag)).name == name


@pytest.mark.parametrize("name", PRESETS)
def test_gpu_timing_file_loads_with_every_class(name):
    m = machine.preset(name)
    tab = timing(m)
    assert tab.arch == m.target["arch"]
    reference = tomllib.loads(resources.files("tuna.data").joinpath("gpu/sm_80.toml").read_text())
    assert set(tab.throughput) == set(reference["throughput"])
    assert set(tab.latency) >= set(reference["latency"])
    assert tab.subpartitions == 4
    # FP32 results per clock per SM are the SM's FP32 lanes (64 on Turing, 128 on GA10x and Ada).
    assert tab.throughput["fp32"] == m.gpu.fp32_lanes_per_sm
    # GeForce, L4, Orin and T4 parts run FP64 at a small fraction of FP32 (CUDA guide: 2 per clock).
    assert tab.throughput["fp64"] == 2
    for key in ("fma", "ld_shared", "ld_global", "ld_local", "special", "bar"):
        assert m.latency[key] > 0


@pytest.mark.parametrize("name", PRESETS)
def test_occupancy_limits_are_the_cuda_guides(name):
    g = machine.preset(name).gpu
    threads, warps, blocks, smem_sm, smem_block, reserved = GUIDE[PRESETS[name][0]]
    assert (g.max_threads_per_sm, g.max_warps_per_sm, g.max_blocks_per_sm) == (threads, warps, blocks)
    assert (g.shared_bytes_per_sm, g.max_shared_bytes_per_block) == (smem_sm * 1024, smem_block * 1024)
    assert g.shared_reserved_per_block == reserved
    assert (g.registers_per_sm, g.max_registers_per_thread, g.max_threads_per_block) == (65536, 255, 1024)
    assert g.warp_size * g.max_warps_per_sm == g.max_threads_per_sm


@pytest.mark.parametrize(
    ("gpu", "threads", "regs", "smem", "expected"),
    [
        # Checked by hand against the CUDA occupancy rules (as in test_gpu_model.py).
        ("t4", 256, 32, 0, 4),  # 1024 threads / 256
        ("t4", 1024, 64, 0, 1),  # 64 regs * 32 lanes * 32 warps = the whole register file
        ("t4", 128, 32, 48 * 1024, 1),  # 48 KiB (none reserved) into 64 KiB
        ("rtx3090", 256, 32, 0, 6),  # 1536 threads / 256 (A100: 8)
        ("rtx3080", 32, 16, 0, 16),  # the 16 blocks per SM limit of 8.6
        ("rtx4090", 32, 16, 0, 24),  # the 24 blocks per SM limit of 8.9
        ("l4", 128, 32, 48 * 1024, 2),  # (48 KiB + 1 KiB reserved) into 100 KiB
        ("orin", 128, 32, 48 * 1024, 3),  # (48 KiB + 1 KiB reserved) into 164 KiB
        ("orin", 128, 128, 0, 4),  # 128 regs -> 4096 per warp -> 16 warps -> 4 blocks of 4
        ("t4", 128, 32, 65 * 1024, 0),  # more shared memory than a block may have on 7.5
    ],
)
def test_occupancy_on_the_new_presets(gpu, threads, regs, smem, expected):
    assert occupancy(threads, regs, smem, machine.preset(gpu)) == expected


@pytest.fixture(scope="module")
def matmul():
    """A 128x128x128 matmul as MetaSchedule's workloads are: a PrimFunc from TE."""
    tvm = pytest.importorskip("tvm")
    pytest.importorskip("tuna.integration")
    from tvm import te

    a = te.placeholder((128, 128), name="A")
    b = te.placeholder((128, 128), name="B")
    k = te.reduce_axis((0, 128), name="k")
    c = te.compute((128, 128), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _candidate(mod, m):
    from tuna import integration
    from tuna.integration import cuda

    (sch,) = cuda.sample_candidates(mod, integration.tvm_target(m), 1, seed=3)
    return sch.mod


@pytest.mark.parametrize("name", PRESETS)
def test_ir_tier_estimates_a_scheduled_kernel(name, matmul):
    from tuna import integration

    m = machine.preset(name)
    est = integration.estimate_module(_candidate(matmul, m), m, "ir")
    assert est.tier == "ir" and math.isfinite(est.seconds) and est.seconds > 0
    assert not est.features.get("infeasible") and est.features["blocks_per_sm"] >= 1
    assert est.features["issue_cycles"] > 0


@needs_nvcc
@pytest.mark.parametrize("name", PRESETS)
def test_full_tier_estimates_a_scheduled_kernel(name, matmul):
    from tuna import integration

    m = machine.preset(name)
    est = integration.estimate_module(_candidate(matmul, m), m, "full")
    f = est.features
    assert est.tier == "full" and math.isfinite(est.seconds) and est.seconds > 0
    assert not f.get("infeasible") and f["registers"] > 0 and f["blocks_per_sm"] >= 1
    assert f["fma_ptx_vs_tir"] == pytest.approx(1.0)
    # CUDA 13's nvcc compiles natively for all of sm_75, sm_86, sm_87 and sm_89.
    native = m.target["arch"] in nvcc.supported_archs(nvcc.find_nvcc())
    assert f["ptx_arch_substituted"] == float(not native)


def test_tvm_tags_of_the_older_gpu_presets_resolve_to_them():
    import tvm

    for tag, name in [("nvidia/nvidia-a100", "a100"), ("nvidia/nvidia-h100", "h100"), ("nvidia/nvidia-v100", "v100"),
                      ("nvidia/jetson-agx-xavier", "xavier")]:
        assert machine.resolve(tag).name == name
        found = machine.resolve(tvm.target.Target(tag))
        assert found.name == name
        # sm_90a (TVM's H100 tag) is timed as sm_90
        assert timing(found).arch == machine.preset(name).target["arch"]
