from importlib import resources

import pytest

from tuna import machine
from tuna.errors import TargetError, UnsupportedISAError

REQUIRED = {"zen4", "zen5", "skylake-avx512", "graviton2", "cortex-a53", "v100", "a100", "h100", "xavier",
            "generic-x86-64", "generic-aarch64", "graviton3", "cortex-a72", "cascadelake", "icelake-server",
            "sapphirerapids"}


def test_presets_cover_the_required_targets():
    assert REQUIRED <= set(machine.presets())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_preset_names_its_sources_and_is_complete(name):
    m = machine.preset(name)
    text = resources.files("tuna.data").joinpath("targets", m.source).read_text()
    assert "Sources:" in text and "[" in text.split("Sources:")[1]
    assert m.frequency_ghz > 0 and m.memory_gbps > 0
    if m.kind == "cpu":
        assert m.vector_bits in (128, 256, 512) and m.caches and m.throughput["fma"] > 0
        assert m.target["num-cores"] == m.cores
        # the C calling convention's preserved registers (tuna/data/abi.toml, with its sources)
        assert m.callee_saved_gprs == {"x86-64": 6, "aarch64": 10}[m.isa]
    else:
        assert m.gpu.sms > 0 and m.gpu.shared_banks == 32 and m.latency["ld_global"] > m.latency["ld_shared"]


def test_resolve_matches_targets_to_presets_and_keeps_overrides():
    m = machine.resolve({"kind": "llvm", "mcpu": "znver4", "num-cores": 8})
    assert m.name == "zen4" and m.cores == 8 and m.target["num-cores"] == 8
    arm = machine.resolve({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a53"})
    assert arm.name == "cortex-a53" and arm.isa == "aarch64"
    assert machine.resolve({"kind": "cuda", "arch": "sm_70"}).name == "v100"
    assert machine.resolve("Graviton2").name == "graviton2"
    assert machine.resolve("neoverse-n1").name == "graviton2"
    modelled = machine.resolve({"kind": "llvm", "mcpu": "znver5", "num-cores": 4}, machine="zen4")
    assert modelled.name == "zen4" and modelled.target["mcpu"] == "znver5" and modelled.cores == 4


@pytest.mark.parametrize(
    ("target", "error", "words"),
    [
        ("zen9", TargetError, "unknown target preset 'zen9'"),
        ({"kind": "vulkan"}, TargetError, "cannot model target kind 'vulkan'"),
        ({"kind": "llvm", "mtriple": "riscv64-linux-gnu"}, UnsupportedISAError, "instruction set"),
        ({"kind": "llvm", "mcpu": "znver2", "num-cores": 2}, TargetError, "nearest presets: zen3"),
        ({"mcpu": "znver4"}, TargetError, "no 'kind'"),
        ("{not json", TargetError, "does not parse"),
        (42, TargetError, "cannot read a target"),
    ],
)
def test_bad_targets_get_clear_errors(target, error, words):
    with pytest.raises(error, match=words):
        machine.resolve(target)
