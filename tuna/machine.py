"""Machine descriptions: one TOML data file per target in ``tuna/data/targets``.

Each file names the sources of its figures in its comments; calling-convention facts per
instruction set come from ``tuna/data/abi.toml``. The registry is built from the folder,
so adding a target is adding a file. A file may say ``based_on = "<preset>"`` and give only
what differs from that preset (see :func:`_inherit`). :func:`resolve` turns what a user
passes as a target (a preset name or alias, a TVM target tag, a TVM target JSON dict or
string, or a ``tvm.target.Target``) into a :class:`Machine`, which carries the TVM target
dict to compile for. A CPU target that names no ``mcpu`` gets the ISA's generic preset
(``generic = true`` in its file), whose vector width follows the target's ``mattr``.
No TVM import.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from .data import read_toml
from .errors import TargetError, UnsupportedISAError

#: Instruction sets the analyses understand, by the prefix of an LLVM triple.
_TRIPLE_ISA = {"x86_64": "x86-64", "amd64": "x86-64", "aarch64": "aarch64", "arm64": "aarch64"}
SUPPORTED_ISAS = ("x86-64", "aarch64", "ptx")

logger = logging.getLogger(__name__)
#: Warnings already given in this process (each is said once).
_WARNED: set[tuple[str, ...]] = set()


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
class VectorWidth:
    """The vector width LLVM uses on a generic preset when the target enables some features.

    Attributes
    ----------
    enabled_by : tuple of str
        ``mattr`` features (``"+avx2"``; a trailing ``*`` matches any suffix) or ``mcpu``
        names any one of which selects this width.
    vector_bits : int
        Register width of TVM's (explicit) vectors.
    auto_vector_bits : int
        Width LLVM's own loop vectorizer uses on loops TVM leaves serial.
    vector_registers : int
        Vector registers the enabled extension has.
    """

    enabled_by: tuple[str, ...]
    vector_bits: int
    auto_vector_bits: int
    vector_registers: int

    def enabled(self, mcpu: str, features: frozenset[str]) -> bool:
        """Whether ``mcpu`` or one of the enabled ``features`` selects this width."""
        for name in self.enabled_by:
            if name == mcpu or name in features:
                return True
            if name.endswith("*") and any(f.startswith(name[:-1]) for f in features):
                return True
        return False


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
    threads : int
        Threads TVM's runtime runs a parallel loop on (CPU): the size of its thread pool.
        Unless ``TVM_NUM_THREADS`` says otherwise, TVM sizes the pool as the logical CPUs it
        sees, halved on x86 (it assumes two hardware threads a core): a server's physical
        cores, but one thread on a 2-vCPU guest that shows no SMT (the zen4 preset's
        machine). A target whose ``num-cores`` differs from the preset's describes another
        machine of the kind, run with a thread a core. Defaults to ``cores``.
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
    auto_vector_bits : int
        Width of the vectors LLVM's own loop vectorizer forms from loops TVM leaves serial
        (CPU), where it differs from the width of TVM's explicit vectors: LLVM tunes Intel
        server cores for 256-bit vectors (``prefer-vector-width``), and vectorizes with
        SVE on Neoverse V1 while TVM's vectors stay 128-bit NEON. Defaults to ``vector_bits``.
    generic : bool
        A generic core of the ISA: :func:`resolve` picks it for a CPU target naming no ``mcpu``.
    vector_widths : tuple of VectorWidth
        How the target's ``mattr``/``mcpu`` change the vector width (generic presets).
    tvm_tags : Mapping
        TVM target tags this preset stands for, each with the target TVM's tag registry
        gives it (``tvm/target/tag_registry``).
    coefficients_from : str
        The preset whose shipped coefficients (``tuna/data/coeffs``) this one uses while it
        has none of its own: a machine kind with no fitted pools, whose core another has.
    """

    name: str
    title: str
    kind: str
    isa: str
    target: Mapping[str, Any]
    frequency_ghz: float
    cores: int = 1
    threads: int = 0
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
    auto_vector_bits: int = 0
    generic: bool = False
    vector_widths: tuple[VectorWidth, ...] = ()
    tvm_tags: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    coefficients_from: str = ""

    def __post_init__(self) -> None:
        if self.threads <= 0:
            object.__setattr__(self, "threads", self.cores)

    def width_cost(self, lanes: int, dtype_bytes: int) -> float:
        """Pipe time of one instruction on ``lanes`` elements, in full-width instructions:
        its bits over the vector width, but at least one datapath pass (see ``datapath_bits``).
        An instruction wider than ``vector_bits`` (LLVM's own vectors, ``auto_vector_bits``)
        counts as several full-width ones."""
        if not self.vector_bits:
            return 1.0
        widest = max(self.vector_bits, self.auto_vector_bits)
        bits = max(min(lanes * dtype_bytes * 8, widest), self.datapath_bits or self.vector_bits)
        return bits / self.vector_bits

    def lanes(self, dtype_bytes: int, auto: bool = False) -> int:
        """SIMD lanes of a full vector register for elements of ``dtype_bytes``; with ``auto``,
        of the vectors LLVM's loop vectorizer forms (``auto_vector_bits``)."""
        bits = (self.auto_vector_bits or self.vector_bits) if auto else self.vector_bits
        return max(1, bits // (8 * dtype_bytes))

    def target_json(self) -> str:
        """The TVM target as a JSON string."""
        return json.dumps(dict(self.target), sort_keys=True)


def _freeze_target(target: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType({k: tuple(v) if isinstance(v, list) else v for k, v in target.items()})


@cache
def _abi() -> Mapping[str, Mapping[str, Any]]:
    """Calling-convention facts by instruction set (``tuna/data/abi.toml``)."""
    return MappingProxyType(read_toml(resources.files("tuna.data").joinpath("abi.toml"), "ABI data", TargetError))


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
            threads=int(data.get("threads", data.get("cores", 1))),
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
            aliases=tuple(a.lower() for a in data.get("aliases", ())),
            source=name,
            auto_vector_bits=int(data.get("auto_vector_bits", data.get("vector_bits", 0))),
            generic=bool(data.get("generic", False)),
            vector_widths=tuple(
                VectorWidth(
                    enabled_by=tuple(str(e).lower() for e in w["enabled_by"]),
                    vector_bits=int(w["vector_bits"]),
                    auto_vector_bits=int(w.get("auto_vector_bits", w["vector_bits"])),
                    vector_registers=int(w.get("vector_registers", data.get("vector_registers", 0))),
                )
                for w in data.get("vector_widths", ())
            ),
            tvm_tags=MappingProxyType(
                {tag.lower(): MappingProxyType(dict(cfg)) for tag, cfg in data.get("tvm_tags", {}).items()}
            ),
            coefficients_from=str(data.get("coefficients_from", "")),
        )
    except KeyError as err:
        raise TargetError(f"target data file {name} lacks the field {err}") from None


#: Keys of a target file that say which preset it is (and whose coefficients it borrows): never taken
#: from the preset it is based on.
_OWN_KEYS = frozenset({"name", "title", "aliases", "tvm_tags", "target", "generic", "based_on", "coefficients_from"})


def _inherit(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """A target file's data over that of the preset it is ``based_on``.

    The child's top-level values replace the parent's; its tables (``[throughput]``,
    ``[latency]``, ``[memory]``) override the parent's key by key; its ``[[caches]]``
    replace the parent's cache of the same ``level`` key by key. The keys naming the
    preset (:data:`_OWN_KEYS`) are never inherited.
    """
    out = {k: v for k, v in parent.items() if k not in _OWN_KEYS}
    for key, value in child.items():
        old = out.get(key)
        if key == "caches" and isinstance(old, list):
            levels = {c["level"]: dict(c) for c in old}
            for cache_ in value:
                levels[cache_["level"]] = {**levels.get(cache_["level"], {}), **cache_}
            out[key] = [levels[level] for level in sorted(levels)]
        elif isinstance(value, dict) and isinstance(old, dict) and key not in _OWN_KEYS:
            out[key] = {**old, **value}
        else:
            out[key] = value
    return out


def _resolved_data(stem: str, raw: Mapping[str, dict[str, Any]], seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The data of ``tuna/data/targets/<stem>.toml`` with its ``based_on`` chain applied."""
    data = raw[stem]
    parent = data.get("based_on")
    if parent is None:
        return dict(data)
    if parent in seen or parent == stem:
        chain = " -> ".join((*seen, stem, parent))
        raise TargetError(f"target data file {stem}.toml: based_on forms a cycle ({chain})")
    if parent not in raw:
        known = ", ".join(sorted(raw))
        raise TargetError(f"target data file {stem}.toml is based_on {parent!r}, which has no file; known: {known}")
    return _inherit(_resolved_data(parent, raw, (*seen, stem)), data)


@cache
def presets() -> Mapping[str, Machine]:
    """All presets shipped in ``tuna/data/targets``, by name."""
    raw = {}
    for entry in sorted(resources.files("tuna.data").joinpath("targets").iterdir(), key=str):
        if entry.name.endswith(".toml"):
            raw[entry.name[: -len(".toml")]] = read_toml(entry, "target data", TargetError)
    found = {}
    for stem in raw:
        machine = _parse(f"{stem}.toml", _resolved_data(stem, raw))
        found[machine.name] = machine
    for machine in found.values():
        lender = found.get(machine.coefficients_from)
        if machine.coefficients_from and (lender is None or lender.kind != machine.kind):
            raise TargetError(f"target data file {machine.source}: coefficients_from {machine.coefficients_from!r} "
                              f"is no {machine.kind} preset")
    return MappingProxyType(found)


def preset(name: str) -> Machine:
    """The preset called ``name`` (or one of its aliases or TVM target tags).

    Raises
    ------
    TargetError
        If no preset has that name; the message lists the known ones.
    """
    key = name.strip().lower()
    for machine in presets().values():
        if key == machine.name or key in machine.aliases or key in machine.tvm_tags:
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
        A preset name or alias (``"zen4"``, ``"graviton2"``, ``"v100"``), a TVM target tag
        (``"raspberry-pi/4b-aarch64"``), a TVM target JSON dict or string (one with a
        ``"tag"`` key is matched to the preset of that tag first), or a ``tvm.target.Target``.
    machine : str or Machine, optional
        The preset to model when the target's ``mcpu``/``arch`` names none, e.g. a CPU
        tuna has no data file for that behaves like one it has.

    Returns
    -------
    Machine
        The preset, its ``target`` merged with what the caller gave (the caller wins), and
        ``cores`` taken from the target's ``num-cores`` when given (``threads`` too, where
        that differs from the preset's). A CPU target naming no
        ``mcpu`` gets the ISA's generic preset (said once per process in a logged warning),
        its vector width the one LLVM uses with the target's ``mattr``.

    Raises
    ------
    TargetError, UnsupportedISAError
        For an unknown preset, a target kind or instruction set tuna cannot model, or a
        target whose micro-architecture is not known and no ``machine`` was named (the
        message names the nearest presets).
    """
    if isinstance(target, str) and not target.strip().startswith("{"):
        base = preset(target)
        tag = target.strip().lower()
        if tag in base.tvm_tags:
            target = {"tag": tag}  # as TVM expands the tag
        else:
            return base if machine is None else replace(_as_machine(machine), target=base.target)
    given = _as_dict(target)
    _check_fields(given)
    tagged = _tagged(given)
    if tagged is not None:
        config = tagged.tvm_tags.get(str(given["tag"]).lower()) or tagged.target
        given = {**config, **given}
    if "kind" not in given:
        if given.get("tag"):
            raise TargetError(
                f"tuna has no preset for the TVM target tag {given['tag']!r}: pass the tag's target as a dict "
                "(tvm.target.Target(tag).export()) or name a preset with machine=... (see `tuna targets`)"
            )
        raise TargetError(f"target {given} has no 'kind' (e.g. 'llvm' or 'cuda')")
    isa = _isa_of(given)
    if machine is not None:
        base, chosen = _as_machine(machine), False
    else:
        base, chosen = (tagged, True) if tagged is not None else (_match(given, isa), True)
    if base.isa != isa:
        raise TargetError(f"target is {isa} but machine {base.name!r} is {base.isa}")
    merged = dict(base.target)
    merged.update(given)
    if isa == "ptx":
        merged["arch"] = given.get("arch", base.target["arch"])
    cores = _num_cores(merged.get("num-cores", base.cores)) if base.kind == "cpu" else base.cores
    if base.kind == "cpu":
        merged["num-cores"] = cores
    threads = base.threads if cores == base.cores else cores
    resolved = _with_features(replace(base, target=_freeze_target(merged), cores=cores, threads=threads))
    if chosen and resolved.generic:
        _warn_once(
            ("generic", resolved.name, str(resolved.vector_bits)),
            "the target names no specific CPU (mcpu=%s), so LLVM compiles for a generic %s core; tuna "
            "models it as %s with %s-bit vectors, its timing an assumption (see tuna/data/targets/%s); set "
            "'mcpu' or machine=... for a specific CPU",
            resolved.target.get("mcpu", "(none)"), resolved.isa, resolved.name, resolved.vector_bits, resolved.source,
        )
    return resolved


#: Target fields that are strings, and those that are a string or a list of strings, in TVM's schema.
_TEXT_FIELDS = ("kind", "mcpu", "mtriple", "mabi", "arch", "model", "tag", "device")
_TEXT_LIST_FIELDS = ("mattr", "keys", "libs")


def _check_fields(given: Mapping[str, Any]) -> None:
    """TargetError for a target field whose value TVM would not take (a number for ``mcpu``, ...)."""
    for key in _TEXT_FIELDS:
        if key in given and not isinstance(given[key], str):
            raise TargetError(f"target field {key!r} must be a string, not {given[key]!r:.80}")
    for key in _TEXT_LIST_FIELDS:
        value = given.get(key)
        # A list, a tuple or TVM's own array type (an exported Target's mattr).
        if value is not None and not isinstance(value, str) and not (
                hasattr(value, "__iter__") and not isinstance(value, (bytes, Mapping))
                and all(isinstance(v, str) for v in value)):
            raise TargetError(f"target field {key!r} must be a string or a list of strings, not {value!r:.80}")


def _num_cores(value: Any) -> int:
    """A target's ``num-cores`` as a positive integer (TargetError for anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TargetError(f"target num-cores must be a positive integer, not {value!r}")
    try:
        cores = int(value)
    except ValueError:
        raise TargetError(f"target num-cores must be a positive integer, not {value!r}") from None
    if cores < 1:
        raise TargetError(f"target num-cores must be a positive integer, not {value!r}")
    return cores


def _warn_once(key: tuple[str, ...], message: str, *args: Any) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message, *args)


def _tagged(given: Mapping[str, Any]) -> Machine | None:
    """The preset whose alias or TVM tag is the target's ``tag`` (None without one)."""
    tag = str(given.get("tag") or "").strip().lower()
    if not tag:
        return None
    for candidate in presets().values():
        if tag in candidate.tvm_tags or tag in candidate.aliases:
            return candidate
    return None


def _with_features(machine: Machine) -> Machine:
    """A generic preset with the vector width LLVM uses for the target's ``mcpu`` and ``mattr``."""
    if not machine.vector_widths:
        return machine
    mcpu = str(machine.target.get("mcpu", "")).lower()
    mattr = machine.target.get("mattr", ())
    features: set[str] = set()
    for item in [mattr] if isinstance(mattr, str) else mattr:
        for feature in str(item).lower().split(","):
            feature = feature.strip()
            if feature.startswith("-"):  # a later "-x" undoes an earlier "+x"
                features.discard("+" + feature[1:])
            elif feature:
                features.add(feature if feature.startswith("+") else "+" + feature)
    width = max(
        (w for w in machine.vector_widths if w.enabled(mcpu, frozenset(features))),
        key=lambda w: w.vector_bits,
        default=None,
    )
    if width is None:
        return machine
    return replace(
        machine,
        title=f"{machine.title}; {width.vector_bits}-bit vectors",
        vector_bits=width.vector_bits,
        datapath_bits=width.vector_bits,
        auto_vector_bits=width.auto_vector_bits,
        vector_registers=width.vector_registers,
    )


def _as_machine(machine: str | Machine) -> Machine:
    return machine if isinstance(machine, Machine) else preset(machine)


def _match(target: Mapping[str, Any], isa: str) -> Machine:
    what = "arch" if isa == "ptx" else "mcpu"
    key = str(target.get(what, "")).strip().lower()
    same_isa = [m for m in presets().values() if m.isa == isa]
    if not key and isa != "ptx":
        generic = [m for m in same_isa if m.generic]
        if generic:
            return generic[0]
    found = [m for m in same_isa if key and (key == str(m.target.get(what, "")).lower() or key in m.aliases)]
    if len(found) == 1:
        return found[0]
    if found:
        return _pick(found, key, what)
    raise TargetError(_unknown(key, what, isa, same_isa))


def _pick(found: list[Machine], key: str, what: str) -> Machine:
    """One of several presets for the same ``arch``/``mcpu``: the one that lists it among its
    aliases (its file marks it the default), else the first by name; said once in a warning."""
    found = sorted(found, key=lambda m: (key not in m.aliases, m.name))
    chosen, others = found[0], [m.name for m in found[1:]]
    _warn_once(
        ("shared", what, key),
        "tuna: %s=%s is the %s of several presets; modelling %s (%s), not %s: name the device with its TVM "
        "tag (e.g. {'tag': ...}) or pass machine=... to choose",
        what, key, what, chosen.name, chosen.title, ", ".join(others),
    )
    return chosen


def _unknown(key: str, what: str, isa: str, same_isa: list[Machine]) -> str:
    """The error message for an ``mcpu``/``arch`` no preset has, naming the nearest presets."""
    names = {m.name: m.name for m in same_isa}
    for m in same_isa:
        names.update({alias: m.name for alias in m.aliases if "/" not in alias})
        own = str(m.target.get(what, "")).lower()
        if own:
            names[own] = m.name
    # most similar first, ties in name order (difflib.get_close_matches would put "znver5" before "znver4")
    scores = {n: difflib.SequenceMatcher(None, key, n).ratio() for n in names} if key else {}
    close = sorted((n for n, r in scores.items() if r >= 0.5), key=lambda n: (-scores[n], n))
    nearest = list(dict.fromkeys(names[c] for c in close))[:3]
    if not nearest:
        nearest = [m.name for m in same_isa]
    first = nearest[0] if nearest else "<preset>"
    return (
        f"no machine description for {what}={key or '(none)'} on {isa}; nearest presets: {', '.join(nearest)}. "
        f"To model it as one of them pass machine={first!r} (resolve(target, machine=...), tune(..., "
        f"machine=...), --machine), or set '{what}' to one tuna knows; `tuna targets` lists them all"
    )
