"""CPU presets beyond the paper's: generic cores for targets without mcpu, TVM target tags,
presets described by inheritance (based_on), and what an unknown CPU is told."""

import logging
import math
import tomllib
from dataclasses import replace
from importlib import resources

import pytest

from tuna import machine
from tuna.cpu import simulator
from tuna.cpu.simulator import uarch_data
from tuna.errors import TargetError

NEW = ("generic-x86-64", "generic-aarch64", "graviton3", "cortex-a72", "cascadelake", "icelake-server",
       "sapphirerapids")
ARM_BOARD = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"], "num-cores": 4}
PLAIN = {"kind": "llvm", "num-cores": 4}


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Each test sees the once-per-process warnings afresh."""
    monkeypatch.setattr(machine, "_WARNED", set())


@pytest.fixture
def reread_presets(monkeypatch):
    """``machine.presets()`` reads the data files afresh in the test (under its patches) and
    again, unpatched, after it."""
    machine.presets.cache_clear()
    yield
    monkeypatch.undo()
    machine.presets.cache_clear()


@pytest.mark.parametrize("name", NEW)
def test_new_presets_resolve_and_their_uarch_loads(name):
    m = machine.preset(name)
    assert m.kind == "cpu" and m.vector_bits in (128, 256, 512) and m.throughput["fma"] > 0 and m.caches
    assert m.target["num-cores"] == m.cores and m.memory_gbps > 0
    text = resources.files("tuna.data").joinpath("targets", m.source).read_text()
    assert "Sources:" in text and "[" in text.split("Sources:")[1]
    ua = simulator.uarch(m)
    assert ua.name == name and ua.dispatch_width >= 1
    assert all(0 <= p < len(ua.ports) for (_, _), t in ua.table.items() for g in t.uops for p in g)
    if "mcpu" in m.target:
        again = machine.resolve(dict(m.target))
        assert again.name == name and again.vector_bits == m.vector_bits


@pytest.mark.parametrize(
    ("mcpu", "name", "bits", "auto_bits"),
    [
        # What TVM 0.27's LLVM emits (see the presets' [llvm] sources): explicit TVM vectors in zmm,
        # LLVM's own loop vectorizer in ymm on Intel server cores; NEON for TVM's vectors on V1.
        ("skylake-avx512", "skylake-avx512", 512, 256),
        ("cascadelake", "cascadelake", 512, 256),
        ("icelake-server", "icelake-server", 512, 256),
        ("sapphirerapids", "sapphirerapids", 512, 256),
        ("neoverse-v1", "graviton3", 128, 256),
        ("cortex-a72", "cortex-a72", 128, 128),
    ],
)
def test_llvm_cpu_names_pick_the_presets_and_widths(mcpu, name, bits, auto_bits):
    triple = {"mtriple": "aarch64-linux-gnu"} if name in ("graviton3", "cortex-a72") else {}
    m = machine.resolve({"kind": "llvm", "mcpu": mcpu, "num-cores": 2, **triple})
    assert (m.name, m.vector_bits, m.auto_vector_bits, m.cores) == (name, bits, auto_bits, 2)
    assert m.lanes(4) == bits // 32 and m.lanes(4, auto=True) == auto_bits // 32


def test_targets_without_mcpu_get_the_generic_core_and_one_warning(caplog, fresh_warnings):
    with caplog.at_level(logging.WARNING, logger="tuna"):
        arm = machine.resolve(ARM_BOARD)
        again = machine.resolve(ARM_BOARD)
    assert arm == again and arm.name == "generic-aarch64" and arm.generic
    assert arm.vector_bits == 128 and arm.cores == 4 and "mcpu" not in arm.target
    said = [r.getMessage() for r in caplog.records if r.name == "tuna.machine"]
    assert len(said) == 1 and "generic aarch64 core" in said[0] and "128-bit" in said[0]
    assert "assumption" in said[0]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tuna"):
        x86 = machine.resolve(PLAIN)
        machine.resolve(PLAIN)
        named = machine.resolve(PLAIN, machine="generic-x86-64")  # asked for: nothing to say
    assert x86.name == named.name == "generic-x86-64" and x86.vector_bits == 128 and x86.vector_registers == 16
    said = [r.getMessage() for r in caplog.records if r.name == "tuna.machine"]
    assert len(said) == 1 and "generic x86-64 core" in said[0] and "128-bit" in said[0]


@pytest.mark.parametrize(
    ("extra", "bits", "auto_bits", "registers"),
    [
        ({}, 128, 128, 16),
        ({"mattr": ["+sse4.2"]}, 128, 128, 16),
        ({"mattr": ["+avx2"]}, 256, 256, 16),
        ({"mattr": ["+avx2", "+fma"]}, 256, 256, 16),
        ({"mattr": ["+avx512f"]}, 512, 512, 32),
        ({"mattr": ["+avx512bw", "+avx512vl"]}, 512, 512, 32),
        ({"mattr": "+avx,+fma"}, 256, 256, 16),
        ({"mcpu": "x86-64-v3"}, 256, 256, 16),
        ({"mcpu": "x86-64-v4"}, 512, 256, 32),
    ],
)
def test_the_generic_x86_width_follows_mattr(extra, bits, auto_bits, registers, fresh_warnings):
    m = machine.resolve({**PLAIN, **extra})
    assert m.name == "generic-x86-64"
    assert (m.vector_bits, m.auto_vector_bits, m.vector_registers) == (bits, auto_bits, registers)
    assert m.datapath_bits == bits
    # the workers of a search rebuild the machine from its target and name: the same width
    assert machine.resolve(dict(m.target), m.name).vector_bits == bits


def test_generic_aarch64_stays_neon_with_sve_in_mattr(fresh_warnings):
    m = machine.resolve({**ARM_BOARD, "mattr": ["+neon", "+sve"]})
    assert m.name == "generic-aarch64" and m.vector_bits == 128


@pytest.mark.parametrize(
    ("tag", "name", "cores", "mcpu"),
    [
        ("raspberry-pi/4b-aarch64", "cortex-a72", 4, "cortex-a72"),
        ("arm/rasp4b64", "cortex-a72", 4, "cortex-a72"),
        ("aws/cpu/c5.large", "skylake-avx512", 1, "skylake-avx512"),
        ("aws/cpu/c5.9xlarge", "skylake-avx512", 18, "skylake-avx512"),
        ("aws/cpu/c5.24xlarge", "cascadelake", 48, "cascadelake"),
        ("arm/rk3399", "generic-aarch64", 4, None),
    ],
)
def test_tvm_target_tags_resolve_as_strings_and_in_dicts(tag, name, cores, mcpu, fresh_warnings):
    for target in (tag, {"tag": tag}, {"kind": "llvm", "tag": tag, "num-cores": cores}):
        m = machine.resolve(target)
        assert (m.name, m.cores, m.target.get("mcpu")) == (name, cores, mcpu), target
        assert m.target["kind"] == "llvm"
    # the caller's keys win over the tag's
    assert machine.resolve({"tag": tag, "num-cores": 3}).cores == 3


def test_every_tvm_cpu_tag_tuna_lists_is_tvms():
    tvm = pytest.importorskip("tvm")
    tags = tvm.target.list_tags()
    for m in machine.presets().values():
        for tag, config in m.tvm_tags.items():
            assert tag in tags, tag
            exported = tvm.target.Target(tag).export()
            for key in ("mcpu", "mtriple", "num-cores"):
                assert config.get(key) == exported.get(key), (tag, key)


def test_an_exported_tvm_target_with_a_tag_resolves():
    tvm = pytest.importorskip("tvm")
    target = tvm.target.Target({"tag": "raspberry-pi/4b-aarch64"})
    m = machine.resolve(target)
    assert m.name == "cortex-a72" and m.cores == 4
    assert machine.resolve(target.export()).name == "cortex-a72"


def test_an_unknown_tag_without_kind_is_a_clear_error():
    with pytest.raises(TargetError, match="no preset for the TVM target tag 'arm/pynq'"):
        machine.resolve({"tag": "arm/pynq"})


@pytest.mark.parametrize(
    ("target", "nearest"),
    [
        ({"kind": "llvm", "mcpu": "znver2"}, "zen3"),
        ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76"}, "cortex-a72"),
        ({"kind": "llvm", "mcpu": "skylake"}, "skylake-avx512"),
    ],
)
def test_an_unknown_cpu_is_told_the_nearest_presets(target, nearest):
    with pytest.raises(TargetError) as err:
        machine.resolve(target)
    text = str(err.value)
    assert f"mcpu={target['mcpu']}" in text and "nearest presets: " in text
    listed = text.split("nearest presets: ")[1].split(".")[0].split(", ")
    assert listed[0] == nearest
    isa = "aarch64" if "mtriple" in target else "x86-64"
    assert all(machine.preset(n).isa == isa for n in listed)  # only presets of the target's ISA
    assert f"machine={nearest!r}" in text
    # and the way out works
    assert machine.resolve(target, machine=nearest).name == nearest


def test_gpu_presets_sharing_an_arch_are_picked_deterministically_with_a_warning(
    monkeypatch, caplog, fresh_warnings
):
    a100 = machine.preset("a100")
    twin = replace(a100, name="a100-pcie", title="A100 PCIe", aliases=("nvidia/a100-pcie-test",))
    shipped = dict(machine.presets())
    monkeypatch.setattr(machine, "presets", lambda: {**shipped, "a100-pcie": twin})
    with caplog.at_level(logging.WARNING, logger="tuna"):
        picked = machine.resolve({"kind": "cuda", "arch": "sm_80"})
        machine.resolve({"kind": "cuda", "arch": "sm_80"})
    assert picked.name == "a100"  # it lists sm_80 among its aliases
    said = [r.getMessage() for r in caplog.records if r.name == "tuna.machine"]
    assert len(said) == 1 and "a100-pcie" in said[0] and "sm_80" in said[0]
    # a tag picks one without a word
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tuna"):
        assert machine.resolve({"kind": "cuda", "arch": "sm_80", "tag": "nvidia/a100-pcie-test"}).name == "a100-pcie"
        assert machine.resolve({"tag": "nvidia/a100-pcie-test"}).target["arch"] == "sm_80"
    assert not [r for r in caplog.records if r.name == "tuna.machine"]


def test_presets_sharing_an_mcpu_without_the_alias_pick_the_first_by_name(monkeypatch, fresh_warnings):
    g2 = machine.preset("graviton2")
    twins = {f"n1-{x}": replace(g2, name=f"n1-{x}", aliases=()) for x in ("b", "a")}
    monkeypatch.setattr(machine, "presets", lambda: twins)
    assert machine.resolve({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1"}).name == "n1-a"


# ---------------------------------------------------------------------------------------------
# Inheritance (based_on) in the data files
# ---------------------------------------------------------------------------------------------


def test_target_inheritance_merges_tables_and_caches_by_level():
    skx, clx = machine.preset("skylake-avx512"), machine.preset("cascadelake")
    assert clx.throughput == skx.throughput and clx.latency == skx.latency
    assert clx.caches[:2] == skx.caches[:2]
    assert clx.caches[2].size_bytes != skx.caches[2].size_bytes and clx.caches[2].line_bytes == 64
    assert clx.aliases != skx.aliases and not set(clx.tvm_tags) & set(skx.tvm_tags)  # identity not inherited
    spr = machine.preset("sapphirerapids")  # a chain: sapphirerapids -> icelake-server -> skylake-avx512
    assert spr.latency["add"] == 3 and spr.latency["fma"] == 4 and spr.auto_vector_bits == 256


def test_target_inheritance_errors():
    raw = {"a": {"based_on": "b"}, "b": {"based_on": "a"}}
    with pytest.raises(TargetError, match="cycle"):
        machine._resolved_data("a", raw)
    with pytest.raises(TargetError, match="based_on 'zzz'"):
        machine._resolved_data("c", {"c": {"based_on": "zzz"}})


def test_uarch_inheritance_overrides_classes_and_keeps_the_rest():
    skx, clx, icx, spr = (simulator.load_uarch(n) for n in ("skylake-avx512", "cascadelake", "icelake-server",
                                                             "sapphirerapids"))
    assert clx.table == skx.table and clx.ports == skx.ports and clx.name == "cascadelake"
    assert icx.timing("fma", 512) == skx.timing("fma", 512)  # not overridden
    names = lambda ua, t: {ua.ports[p] for p in t.uops[0]}  # noqa: E731
    assert names(icx, icx.timing("store_data")) == {"P4", "P9"}
    assert icx.timing("vstore_data", 512).rthroughput == 1 and icx.timing("vstore_data", 256).rthroughput == 0.5
    assert spr.timing("fadd", 256).latency == 3 and names(spr, spr.timing("fadd", 512)) == {"P0", "P5"}
    assert spr.timing("idiv").latency == icx.timing("idiv").latency  # two levels down


def test_uarch_class_merge_drops_the_parents_pipes_when_the_child_names_its_own():
    parent = {"latency": 4, "ports": ["A"], "w512": {"ports": ["B"], "rthroughput": 2}}
    child = {"uops": [["C"], ["D"]], "w512": {"latency": 6}}
    merged = uarch_data._merge_class(parent, child)
    assert merged == {"latency": 4, "uops": [["C"], ["D"]], "w512": {"ports": ["B"], "rthroughput": 2, "latency": 6}}


def test_uarch_based_on_a_missing_file_is_a_target_error(monkeypatch):
    real = tomllib.loads
    monkeypatch.setattr(tomllib, "loads", lambda text: {**real(text), "based_on": "pentium-pro"})
    with pytest.raises(TargetError, match="based_on 'pentium-pro'"):
        uarch_data._uarch_data("cascadelake")


def test_invalid_toml_in_a_data_file_is_a_target_error_naming_the_file(monkeypatch, reread_presets):
    def broken(text):
        raise tomllib.TOMLDecodeError("Invalid value (at line 25, column 22)")

    monkeypatch.setattr(tomllib, "loads", broken)
    with pytest.raises(TargetError, match=r"micro-architecture data file cascadelake\.toml is not valid TOML"):
        uarch_data._uarch_data("cascadelake")
    with pytest.raises(TargetError, match=r"target data file \S+\.toml is not valid TOML"):
        machine.presets()


@pytest.mark.parametrize("lender", ["a100", "no-such-preset"])
def test_a_preset_borrows_coefficients_only_from_a_preset_of_its_kind(monkeypatch, reread_presets, lender):
    real = machine.read_toml

    def lending(entry, what, error):
        data = real(entry, what, error)
        return {**data, "coefficients_from": lender} if entry.name == "graniterapids.toml" else data

    monkeypatch.setattr(machine, "read_toml", lending)
    with pytest.raises(TargetError, match=rf"graniterapids\.toml: coefficients_from '{lender}' is no cpu preset"):
        machine.presets()


# ---------------------------------------------------------------------------------------------
# End to end: offline tuning for the targets a first-hour user writes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "generic"), [(ARM_BOARD, "generic-aarch64"), (PLAIN, "generic-x86-64")])
def test_tuning_for_a_target_without_mcpu_models_the_generic_core(target, generic, tmp_path):
    # About 15 s each here: 8 candidates, built (cross-compiled for AArch64) and predicted.
    import tuna

    result = tuna.tune("GMM:1", target, tmp_path, max_trials=8, num_trials_per_iter=8, population_size=32,
                       workers=1)
    assert result.machine.name == generic and result.trials == 8
    assert result.schedule is not None
    assert math.isfinite(result.predicted_seconds) and result.predicted_seconds > 0
