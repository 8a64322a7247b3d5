"""Instruction timing of NVIDIA GPU architectures (``tuna/data/gpu/<arch>.toml``): issue
throughput per instruction class and the latencies the target files leave out. Both GPU
tiers read it: the IR tier for the statements of the loop tree, the full tier for PTX.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from ..errors import TargetError
from ..machine import Machine


@dataclass(frozen=True)
class GpuTiming:
    """Instruction timing of one GPU architecture (``tuna/data/gpu/<arch>.toml``)."""

    arch: str
    fallback_arch: str
    subpartitions: int
    throughput: Mapping[str, float]
    latency: Mapping[str, float]


@cache
def _timings() -> Mapping[str, GpuTiming]:
    found = {}
    for entry in sorted(resources.files("tuna.data").joinpath("gpu").iterdir(), key=str):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text())
            found[data["arch"]] = GpuTiming(
                data["arch"], data.get("fallback_arch", data["arch"]), int(data["subpartitions"]),
                MappingProxyType(dict(data["throughput"])), MappingProxyType(dict(data.get("latency", {}))),
            )
    return MappingProxyType(found)


def timing(machine: Machine) -> GpuTiming:
    """The instruction timing of ``machine``'s architecture.

    Raises
    ------
    TargetError
        When ``tuna/data/gpu`` has no file for its ``arch`` (nor for the base of an
        architecture-specific ``sm_XXa``/``sm_XXf``).
    """
    arch = str(machine.target.get("arch", ""))
    # sm_90a and the like add architecture-specific instructions to sm_90: the same timing.
    found = _timings().get(arch) or _timings().get(re.sub(r"(?<=\d)[af]$", "", arch))
    if found is None:
        have = ", ".join(_timings())
        raise TargetError(f"no GPU instruction timing for arch {arch!r} in tuna/data/gpu (have {have})")
    return found
