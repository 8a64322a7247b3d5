"""Micro-architecture data: how one CPU preset executes each timing class.

Reads ``tuna/data/uarch/<preset>.toml`` (pipes, front-end and window sizes, and per timing
class and operand width the latency, the pipes a micro-op may issue to and the reciprocal
throughput, each with its source named in the file) into an immutable :class:`Uarch`. A file
may say ``based_on = "<preset>"`` and give only what differs from that preset's file (a core
shared by several presets is described once; see :func:`_inherit`). The timing classes
themselves, and which instructions belong to them, are ISA facts (:mod:`tuna.cpu.isa`); this
module holds no mnemonic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from ...data import read_toml
from ...errors import TargetError
from ...machine import Machine
from ..isa import check_isa

#: A timing class missing from a data file is looked up as the next one here, then "alu".
FALLBACK = MappingProxyType(
    {
        "fma": "fmul",
        "fmul": "fadd",
        "fadd": "vlogic",
        "fcmp": "fadd",
        "fcvt": "fadd",
        "freduce": "fadd",
        "fdiv": "fmul",
        "fsqrt": "fdiv",
        "frcp": "fmul",
        "vialu": "vlogic",
        "vimul": "fmul",
        "vshift": "vialu",
        "vshuffle": "vlogic",
        "vperm": "vshuffle",
        "vbroadcast": "vshuffle",
        "vbroadcast_gpr": "vbroadcast",
        "vblend": "vlogic",
        "vmov": "vlogic",
        "vmov_gpr": "vshuffle",
        "vlogic": "alu",
        "kmask": "alu",
        "shift": "alu",
        "alu_shift": "alu",
        "lea": "alu",
        "mov": "alu",
        "movimm": "alu",
        "cmov": "alu",
        "wb": "alu",
        "imul": "alu",
        "idiv": "imul",
        "branch": "alu",
        "call": "branch",
        "load": "alu",
        "load_pair": "load",
        "vload": "load",
        "vload_frame": "vload",  # a stack reload: a plain vector load where the file says no more
        "vload_pair": "vload",
        "vload_dup": "vload",
        "vload_lane": "vload_dup",
        "vload_struct": "vload_dup",
        "prefetch": "load",
        "store_addr": "alu",
        "store_data": "alu",
        "vstore_data": "store_data",
        "vgather": "vload",  # a file without gather timing: one vector load (the old behaviour)
        "vscatter": "vstore_data",
        "vmaskstore": "vstore_data",  # a file without masked-store timing: a plain vector store
    }
)

#: Operand widths (bits) a data file may give timings for (``[class.X.w256]``).
WIDTH_KEYS = (64, 128, 256, 512)


@dataclass(frozen=True)
class ClassTiming:
    """How one machine executes one timing class at one operand width.

    Attributes
    ----------
    latency : float
        Cycles from the micro-op's issue to a dependent micro-op's earliest issue.
    uops : tuple of tuple of int
        For each pipe micro-op the class needs, the indices (into :attr:`Uarch.ports`) of the
        pipes it may issue to; empty for work done at rename (eliminated moves, zero idioms).
    occupancy : tuple of float
        Cycles each of those micro-ops holds its pipe (reciprocal throughput times pipe count).
    rthroughput : float
        Reciprocal throughput of the class alone on the machine, in cycles per instruction.
    slots : int
        Front-end (dispatch) slots the class takes beyond its instruction's own: the micro-ops
        of a microcoded instruction, which hold dispatch while the sequencer emits them.
    """

    latency: float
    uops: tuple[tuple[int, ...], ...]
    occupancy: tuple[float, ...]
    rthroughput: float
    slots: int = 0


@dataclass(frozen=True)
class Uarch:
    """Execution resources and instruction timing of one CPU preset.

    Attributes
    ----------
    name : str
        Preset name (``tuna/data/targets/<name>.toml``).
    ports : tuple of str
        Names of the execution pipes.
    dispatch_width : int
        Front-end slots (x86 macro-ops, AArch64 instructions) renamed and dispatched a cycle;
        instructions issued a cycle on an in-order core.
    retire_width : int
        Instructions retired a cycle.
    rob_size : int
        Reorder-buffer entries (0 for no limit or an in-order core).
    move_elimination, zero_idioms, macro_fusion, unlaminate_indexed : bool
        Whether register moves and zeroing idioms are handled at rename, compare-and-branch
        pairs take one slot, and x86 load-op instructions with an indexed address take two.
    store_forward_latency : float
        Cycles from a store's data to a load of the same address.
    store_forward_fail_latency : float or None
        Cycles from a store's retirement to a load the store queue cannot forward to (a load
        that straddles two stores, a chunk boundary of one, or sits inside one off its own
        alignment where ``store_forward_aligned``); None: every load that overlaps a store is
        forwarded (no data on the machine's failures).
    store_forward_chunk : int or None
        Bytes of the pieces a store forwards in (see
        :func:`tuna.cpu.simulator.dependencies.prepare_block`); None: the whole store.
    store_forward_aligned : bool
        Whether a load inside a store forwards only at an offset into it that is a multiple
        of the load's own size (Golden Cove: a 16-byte load at +16 forwards, at +8 it fails).
    store_forward_one_store : bool
        Whether a load wider than a chunk forwards only from inside one store (Zen 5: a
        64-byte load over two 32-byte stores, or at +32 over two 64-byte ones, fails; Zen 4
        forwards both).
    store_queue : int or None
        Stores in flight (store-queue entries); None: not known.
    store_alias_tolerated, store_alias_penalty : int, float or None
        Stores in flight that a load may agree with in its low 12 address bits (aliasing
        modulo 4 KiB) without waiting, and the cycles each one more costs (see
        :func:`tuna.cpu.ir_tier._aliased_updates`); None: no data on the machine.
    schedulers : tuple of int
        Entries of each scheduler (issue queue); dispatch stalls while the one a micro-op
        needs is full of micro-ops waiting to issue.
    queues : tuple of int
        Entries of the in-order queue in front of each scheduler (Zen's non-scheduling
        queue; 0: none): a micro-op dispatches while the queue has room, but issues only
        after it has entered the scheduler, in program order, as entries free up.
    port_scheduler : tuple of int
        For each pipe, the index of the scheduler feeding it (-1 for none).
    table : Mapping
        ``(class, width) -> ClassTiming`` for every known class and width (64, 128, 256, 512).
    """

    name: str
    ports: tuple[str, ...]
    dispatch_width: int
    retire_width: int
    rob_size: int
    move_elimination: bool
    zero_idioms: bool
    macro_fusion: bool
    unlaminate_indexed: bool
    store_forward_latency: float
    store_forward_fail_latency: float | None
    store_forward_chunk: int | None
    schedulers: tuple[int, ...]
    port_scheduler: tuple[int, ...]
    table: Mapping[tuple[str, int], ClassTiming]
    queues: tuple[int, ...] = ()
    store_queue: int | None = None
    store_alias_tolerated: int | None = None
    store_alias_penalty: float | None = None
    store_forward_aligned: bool = False
    store_forward_one_store: bool = False

    def timing(self, klass: str, width: int = 64) -> ClassTiming:
        """Timing of ``klass`` at operand ``width`` bits (a class not known is an ALU op)."""
        key = (klass, _width_key(width))
        found = self.table.get(key)
        return found if found is not None else self.table[("alu", key[1])]


def _width_key(width: int) -> int:
    """The smallest of :data:`WIDTH_KEYS` that holds ``width`` bits (512 beyond)."""
    for w in WIDTH_KEYS:
        if width <= w:
            return w
    return 512


def _optional(data: Mapping, key: str, kind: type) -> float | int | None:
    """``data[key]`` as ``kind``, or None when the file does not give it."""
    return kind(data[key]) if key in data else None


def _class_timing(spec: Mapping, ports: tuple[str, ...], where: str) -> ClassTiming:
    index = {p: i for i, p in enumerate(ports)}

    def pipes(names) -> tuple[int, ...]:
        try:
            return tuple(index[n] for n in names)
        except KeyError as err:
            raise TargetError(f"{where} names the pipe {err} the file does not declare in `ports`") from None

    latency = float(spec.get("latency", 1))
    slots = int(spec.get("slots", 0))
    if "uops" in spec:
        groups = tuple(pipes(g) for g in spec["uops"])
        occ = tuple(float(spec.get("occupancy", 1)) for _ in groups)
        rtp = max(o / len(g) for o, g in zip(occ, groups)) if groups else 0.0
        return ClassTiming(latency, groups, occ, float(spec.get("rthroughput", rtp)), slots)
    group = pipes(spec.get("ports", ()))
    if not group:
        return ClassTiming(latency, (), (), 0.0, slots)
    rtp = float(spec.get("rthroughput", 1.0 / len(group)))
    return ClassTiming(latency, (group,), (rtp * len(group),), rtp, slots)


def _merge_class(parent: Mapping, child: Mapping) -> dict:
    """One class's (or width's) timing over the parent's: the child's keys win, and a child
    naming its pipes (``ports`` or ``uops``) drops both of the parent's."""
    out = dict(parent)
    if "ports" in child or "uops" in child:
        out.pop("ports", None)
        out.pop("uops", None)
    for key, value in child.items():
        if key.startswith("w") and isinstance(value, Mapping):
            out[key] = _merge_class(out.get(key, {}), value)
        else:
            out[key] = value
    return out


def _inherit(parent: Mapping, child: Mapping) -> dict:
    """A uarch file's data over the file it is ``based_on``.

    Top-level values of the child (``name``, widths, ``ports``, ``[[scheduler]]``) replace
    the parent's; each ``[class.X]`` the child gives is merged over the parent's class X by
    :func:`_merge_class`; classes the child does not mention are the parent's.
    """
    out = {k: v for k, v in parent.items() if k not in ("class", "based_on")}
    out.update({k: v for k, v in child.items() if k not in ("class", "based_on")})
    classes = {k: dict(v) for k, v in parent.get("class", {}).items()}
    for klass, spec in child.get("class", {}).items():
        classes[klass] = _merge_class(classes.get(klass, {}), spec)
    out["class"] = classes
    return out


def _uarch_data(name: str, seen: tuple[str, ...] = ()) -> dict:
    """The data of ``tuna/data/uarch/<name>.toml`` with its ``based_on`` chain applied."""
    path = resources.files("tuna.data").joinpath("uarch", f"{name}.toml")
    if not path.is_file():
        known = sorted(p.name[:-5] for p in resources.files("tuna.data").joinpath("uarch").iterdir()
                       if p.name.endswith(".toml"))
        what = f"{seen[-1]}.toml is based_on {name!r}, which has" if seen else f"preset {name!r} has"
        raise TargetError(
            f"no micro-architecture data: {what} no file tuna/data/uarch/{name}.toml; known: {', '.join(known)}"
        )
    data = read_toml(path, "micro-architecture data", TargetError)
    parent = data.get("based_on")
    if parent is None:
        return data
    if parent in seen or parent == name:
        raise TargetError(f"{name}.toml: based_on forms a cycle ({' -> '.join((*seen, name, parent))})")
    return _inherit(_uarch_data(parent, (*seen, name)), data)


@cache
def load_uarch(name: str) -> Uarch:
    """Read ``tuna/data/uarch/<name>.toml`` (cached).

    Parameters
    ----------
    name : str
        Preset name, as in ``tuna/data/targets``.

    Returns
    -------
    Uarch
        The pipes, front-end and window sizes, and a timing for every known class and width,
        with what the file takes from the file it is ``based_on``.

    Raises
    ------
    TargetError
        If there is no data file for the preset (or the one it is based on), the
        ``based_on`` chain forms a cycle, or the data is malformed.
    """
    data = _uarch_data(name)
    try:
        ports = tuple(data["ports"])
        classes = data["class"]
        table: dict[tuple[str, int], ClassTiming] = {}
        specs: dict[tuple[str, int], dict] = {}
        for klass, spec in classes.items():
            base = {k: v for k, v in spec.items() if not k.startswith("w")}
            for w in WIDTH_KEYS:
                if not base and f"w{w}" not in spec:
                    continue  # a class the file times at some widths only: the others fall back
                merged = dict(base)
                over = spec.get(f"w{w}", {})
                if "ports" in over or "uops" in over:
                    merged.pop("ports", None)
                    merged.pop("uops", None)
                merged.update(over)
                specs[(klass, w)] = merged
        scheds = data.get("scheduler", [])
        port_sched = [-1] * len(ports)
        for q, sched in enumerate(scheds):
            for name_ in sched["ports"]:
                if name_ not in ports:
                    raise TargetError(f"{name}.toml: scheduler names the undeclared pipe {name_!r}")
                port_sched[ports.index(name_)] = q
        if ("alu", 64) not in specs:
            raise TargetError(f"{name}.toml has no [class.alu]")
        for (klass, w), spec in specs.items():
            table[(klass, w)] = _class_timing(spec, ports, f"{name}.toml [class.{klass}]")
        for klass in set(FALLBACK) | {"alu"}:
            for w in WIDTH_KEYS:
                k = klass
                while (k, w) not in table:
                    k = FALLBACK.get(k, "alu")
                table.setdefault((klass, w), table[(k, w)])
        return Uarch(
            name=data["name"],
            ports=ports,
            dispatch_width=int(data["dispatch_width"]),
            retire_width=int(data.get("retire_width", data["dispatch_width"])),
            rob_size=int(data.get("rob_size", 0)),
            move_elimination=bool(data.get("move_elimination", False)),
            zero_idioms=bool(data.get("zero_idioms", False)),
            macro_fusion=bool(data.get("macro_fusion", False)),
            unlaminate_indexed=bool(data.get("unlaminate_indexed", False)),
            store_forward_latency=float(data.get("store_forward_latency", 5)),
            store_forward_fail_latency=_optional(data, "store_forward_fail_latency", float),
            store_forward_chunk=_optional(data, "store_forward_chunk", int),
            store_forward_aligned=bool(data.get("store_forward_aligned", False)),
            store_forward_one_store=bool(data.get("store_forward_one_store", False)),
            schedulers=tuple(int(q["size"]) for q in scheds),
            port_scheduler=tuple(port_sched),
            table=MappingProxyType(table),
            queues=tuple(int(q.get("queue", 0)) for q in scheds),
            store_queue=_optional(data, "store_queue", int),
            store_alias_tolerated=_optional(data, "store_alias_tolerated", int),
            store_alias_penalty=_optional(data, "store_alias_penalty", float),
        )
    except KeyError as err:
        raise TargetError(f"micro-architecture file {name}.toml lacks the field {err}") from None


def uarch(machine: Machine | str) -> Uarch:
    """The micro-architecture data of a CPU preset.

    Parameters
    ----------
    machine : Machine or str
        A CPU preset or its name.

    Returns
    -------
    Uarch
        As :func:`load_uarch` reads it.

    Raises
    ------
    UnsupportedISAError
        For a machine whose instruction set is not x86-64 or AArch64.
    TargetError
        When there is no data file for the preset.
    """
    if isinstance(machine, str):
        return load_uarch(machine)
    check_isa(machine.isa)
    return load_uarch(machine.name)

