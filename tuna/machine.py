"""Machine descriptions: one TOML data file per target in ``tuna/data/targets``.

Each file names the sources of its figures in its comments; calling-convention facts per
instruction set come from ``tuna/data/abi.toml``. The registry is built from the folder,
so adding a target is adding a file. :func:`resolve` turns what a user passes as a target
(a preset name or alias, a TVM target JSON dict or string, or a ``tvm.target.Target``)
into a :class:`Machine`, which carries the TVM target dict to compile for. No TVM import.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from .errors import TargetError, UnsupportedISAError

#: Instruction sets the analyses understand, by the prefix of an LLVM triple.
_TRIPLE_ISA = {"x86_64": "x86-64", "amd64": "x86-64", "aarch64": "aarch64", "arm64": "aarch64"}
SUPPORTED_ISAS = ("x86-64", "aarch64", "ptx")


@dataclass(frozen=True)
class CacheLevel:
    """One data-cache level."""

    level: int
    size_bytes: int
    line_bytes: int
    ways: int
    bytes_per_cycle: float
    shared: bool = False


@dataclass(frozen=True)
class GPUSpec:
    """Per-SM resources and limits of an NVIDIA GPU."""

    sms: int
    fp32_lanes_per_sm: int
    warp_size: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    register_alloc_unit: int
    warp_alloc_granularity: int
    shared_bytes_per_sm: int
    max_shared_bytes_per_block: int
    shared_reserved_per_block: int
    shared_alloc_unit: int
    shared_banks: int
    bank_bytes: int
    l2_bytes: int
    #: Bytes the L2 delivers to the SMs per clock; None where the data file gives no figure.
    l2_bytes_per_clock: float | None = None


@dataclass(frozen=True)
class Machine:
    """What the analyses need to know about one target.

    Attributes
    ----------
    name : str
        Preset name.
    kind : str
        "cpu" or "gpu".
    isa : str
        "x86-64", "aarch64" or "ptx".
    target : Mapping
        The TVM target JSON dict to compile candidates for.
    throughput : Mapping
        Full-width instructions per cycle per core, by class (CPU).
    latency : Mapping
        Cycles by instruction class.
    parallel_region_us : float or None
        Measured cost of one parallel region in TVM's thread pool (CPU), microseconds;
        ``tuna bench launch`` measures it. None where nobody measured it.
    callee_saved_gprs : int
        General-purpose registers the ISA's C calling convention preserves across calls
        (CPU; from ``tuna/data/abi.toml``): values live across a library call beyond these
        are reloaded from the stack after it.
    datapath_bits : int
        Width of one pass through an execution pipe (CPU): a full-width instruction takes
        ``vector_bits / datapath_bits`` passes, a narrower one at least one. Zen 4 runs
        512-bit instructions as two 256-bit passes, so its 256-bit instructions issue twice
        as fast as its 512-bit ones. Defaults to ``vector_bits``.
    """

    name: str
    title: str
    kind: str
    isa: str
    target: Mapping[str, Any]
    frequency_ghz: float
    cores: int = 1
    vector_bits: int = 0
    vector_registers: int = 0
    issue_width: int = 1
    in_order: bool = False
    throughput: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    latency: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    caches: tuple[CacheLevel, ...] = ()
    memory_gbps: float = 1.0
    parallel_region_us: float | None = None
    callee_saved_gprs: int = 0
    datapath_bits: int = 0
    gpu: GPUSpec | None = None
    aliases: tuple[str, ...] = ()
    source: str = ""

    def width_cost(self, lanes: int, dtype_bytes: int) -> float:
        """Pipe time of one instruction on ``lanes`` elements, in full-width instructions:
        its bits over the vector width, but at least one datapath pass (see ``datapath_bits``)."""
        if not self.vector_bits:
            return 1.0
        bits = max(min(lanes * dtype_bytes * 8, self.vector_bits), self.datapath_bits or self.vector_bits)
        return bits / self.vector_bits

    def lanes(self, dtype_bytes: int) -> int:
        """SIMD lanes of a full vector register for elements of ``dtype_bytes``."""
        return max(1, self.vector_bits // (8 * dtype_bytes))

    def target_json(self) -> str:
        """The TVM target as a JSON string."""
        return json.dumps(dict(self.target), sort_keys=True)


def _freeze_target(target: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType({k: tuple(v) if isinstance(v, list) else v for k, v in target.items()})


@cache
def _abi() -> Mapping[str, Mapping[str, Any]]:
    """Calling-convention facts by instruction set (``tuna/data/abi.toml``)."""
    return MappingProxyType(tomllib.loads(resources.files("tuna.data").joinpath("abi.toml").read_text()))


def _parse(name: str, data: dict[str, Any]) -> Machine:
    try:
        gpu = None
        if data["kind"] == "gpu":
            gpu = GPUSpec(
                sms=data["sms"],
                fp32_lanes_per_sm=data["fp32_lanes_per_sm"],
                warp_size=data["warp_size"],
                max_threads_per_sm=data["max_threads_per_sm"],
                max_threads_per_block=data["max_threads_per_block"],
                max_blocks_per_sm=data["max_blocks_per_sm"],
                max_warps_per_sm=data["max_warps_per_sm"],
                registers_per_sm=data["registers_per_sm"],
                max_registers_per_thread=data["max_registers_per_thread"],
                register_alloc_unit=data["register_alloc_unit"],
                warp_alloc_granularity=data["warp_alloc_granularity"],
                shared_bytes_per_sm=int(data["shared_kib_per_sm"] * 1024),
                max_shared_bytes_per_block=int(data["max_shared_kib_per_block"] * 1024),
                shared_reserved_per_block=data["shared_reserved_per_block"],
                shared_alloc_unit=data["shared_alloc_unit"],
                shared_banks=data["shared_banks"],
                bank_bytes=data["bank_bytes"],
                l2_bytes=int(data["l2_kib"] * 1024),
                l2_bytes_per_clock=float(data["l2_bytes_per_clock"]) if "l2_bytes_per_clock" in data else None,
            )
        caches = tuple(
            CacheLevel(
                level=c["level"],
                size_bytes=int(c["size_kib"] * 1024),
                line_bytes=c["line_bytes"],
                ways=c["ways"],
                bytes_per_cycle=float(c["bytes_per_cycle"]),
                shared=bool(c.get("shared", False)),
            )
            for c in data.get("caches", ())
        )
        return Machine(
            name=data["name"],
            title=data["title"],
            kind=data["kind"],
            isa=data["isa"],
            target=_freeze_target(data["target"]),
            frequency_ghz=float(data["frequency_ghz"]),
            cores=int(data.get("cores", 1)),
            vector_bits=int(data.get("vector_bits", 0)),
            vector_registers=int(data.get("vector_registers", 0)),
            issue_width=int(data.get("issue_width", 1)),
            in_order=bool(data.get("in_order", False)),
            throughput=MappingProxyType(dict(data.get("throughput", {}))),
            latency=MappingProxyType(dict(data.get("latency", {}))),
            caches=caches,
            memory_gbps=float(data["memory"]["bandwidth_gbps"]),
            parallel_region_us=float(data["parallel_region_us"]) if "parallel_region_us" in data else None,
            callee_saved_gprs=int(_abi().get(data["isa"], {}).get("callee_saved_gprs", 0)),
            datapath_bits=int(data.get("datapath_bits", data.get("vector_bits", 0))),
            gpu=gpu,
            aliases=tuple(data.get("aliases", ())),
            source=name,
        )
    except KeyError as err:
        raise TargetError(f"target data file {name} lacks the field {err}") from None


@cache
def presets() -> Mapping[str, Machine]:
    """All presets shipped in ``tuna/data/targets``, by name."""
    found = {}
    for entry in sorted(resources.files("tuna.data").joinpath("targets").iterdir(), key=str):
        if entry.name.endswith(".toml"):
            machine = _parse(entry.name, tomllib.loads(entry.read_text()))
            found[machine.name] = machine
    return MappingProxyType(found)


def preset(name: str) -> Machine:
    """The preset called ``name`` (or one of its aliases).

    Raises
    ------
    TargetError
        If no preset has that name; the message lists the known ones.
    """
    key = name.strip().lower()
    for machine in presets().values():
        if key == machine.name or key in machine.aliases:
            return machine
    known = ", ".join(presets())
    raise TargetError(f"unknown target preset {name!r}; known presets: {known} (see `tuna targets`)")


def _isa_of(target: Mapping[str, Any]) -> str:
    kind = target.get("kind")
    if kind == "cuda":
        return "ptx"
    if kind not in ("llvm", "c"):
        raise TargetError(
            f"tuna cannot model target kind {kind!r}: it analyses CPUs through 'llvm' and NVIDIA GPUs "
            "through 'cuda'"
        )
    triple = str(target.get("mtriple", "x86_64-linux-gnu"))
    arch = triple.split("-", 1)[0]
    if arch not in _TRIPLE_ISA:
        raise UnsupportedISAError(
            f"tuna cannot analyse the instruction set of mtriple {triple!r}; supported: "
            f"{', '.join(SUPPORTED_ISAS)}"
        )
    return _TRIPLE_ISA[arch]


def _as_dict(target: Any) -> dict[str, Any]:
    if isinstance(target, Mapping):
        return dict(target)
    if isinstance(target, str):
        text = target.strip()
        if text.startswith("{"):
            try:
                return dict(json.loads(text))
            except json.JSONDecodeError as err:
                raise TargetError(f"target JSON does not parse: {err}") from None
        return dict(preset(text).target)
    export = getattr(target, "export", None)
    if callable(export):  # a tvm.target.Target, without importing TVM here
        return {k: v for k, v in dict(export()).items() if not isinstance(v, Mapping)}
    raise TargetError(f"cannot read a target from {type(target).__name__}: pass a preset name, a dict or a Target")


def resolve(target: Any, machine: str | Machine | None = None) -> Machine:
    """The machine to model for ``target``, with the target dict to compile for.

    Parameters
    ----------
    target : str, dict or tvm.target.Target
        A preset name or alias (``"zen4"``, ``"graviton2"``, ``"v100"``), a TVM target JSON
        dict or string, or a ``tvm.target.Target``.
    machine : str or Machine, optional
        The preset to model when the target's ``mcpu``/``arch`` names none, e.g. a CPU
        tuna has no data file for that behaves like one it has.

    Returns
    -------
    Machine
        The preset, its ``target`` merged with what the caller gave (the caller wins), and
        ``cores`` taken from the target's ``num-cores`` when given.

    Raises
    ------
    TargetError, UnsupportedISAError
        For an unknown preset, a target kind or instruction set tuna cannot model, or a
        target whose micro-architecture is not known and no ``machine`` was named.
    """
    if isinstance(target, str) and not target.strip().startswith("{"):
        base = preset(target)
        return base if machine is None else replace(_as_machine(machine), target=base.target)
    given = _as_dict(target)
    if "kind" not in given:
        raise TargetError(f"target {given} has no 'kind' (e.g. 'llvm' or 'cuda')")
    isa = _isa_of(given)
    base = _as_machine(machine) if machine is not None else _match(given, isa)
    if base.isa != isa:
        raise TargetError(f"target is {isa} but machine {base.name!r} is {base.isa}")
    merged = dict(base.target)
    merged.update(given)
    if isa == "ptx":
        merged["arch"] = given.get("arch", base.target["arch"])
    cores = int(merged.get("num-cores", base.cores)) if base.kind == "cpu" else base.cores
    if base.kind == "cpu":
        merged["num-cores"] = cores
    return replace(base, target=_freeze_target(merged), cores=cores)


def _as_machine(machine: str | Machine) -> Machine:
    return machine if isinstance(machine, Machine) else preset(machine)


def _match(target: Mapping[str, Any], isa: str) -> Machine:
    key = str(target.get("arch" if isa == "ptx" else "mcpu", "")).lower()
    for candidate in presets().values():
        if candidate.isa != isa:
            continue
        own = str(candidate.target.get("arch" if isa == "ptx" else "mcpu", "")).lower()
        if key and (key == own or key in candidate.aliases):
            return candidate
    names = [m.name for m in presets().values() if m.isa == isa]
    what = "arch" if isa == "ptx" else "mcpu"
    raise TargetError(
        f"no machine description for {what}={key or '(none)'} on {isa}: set '{what}' to one tuna "
        f"knows ({', '.join(names)}) or name a preset to model with machine=..."
    )
