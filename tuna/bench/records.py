"""What the bench commands record beside their results (``meta`` in their JSON): the
machine they ran on, the target modelled, when, the command and how long it took; and
several runs of one command joined into one record.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..machine import Machine, presets


def machine_info() -> dict[str, Any]:
    """This machine as lscpu names it, and the TVM in use (for the benchmark records)."""
    from importlib import metadata

    from ..search.processes import run_tool, which

    info: dict[str, Any] = {"model_name": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    if which("lscpu"):
        fields = dict(
            line.split(":", 1) for line in run_tool(["lscpu"], timeout=30).stdout.splitlines() if ":" in line
        )
        info["model_name"] = fields.get("Model name", info["model_name"]).strip()
        info["cores"] = int(fields.get("CPU(s)", info["cores"]))
        # A bare "AMD EPYC" (as some VMs report) says nothing of the generation; family and model do.
        info["cpu_family"] = fields.get("CPU family", "").strip()
        info["cpu_model"] = fields.get("Model", "").strip()
        info["stepping"] = fields.get("Stepping", "").strip()
        l1i = _per_instance_kib(fields.get("L1i cache", ""))
        if l1i:
            info["l1i_kib"] = l1i
    info["microcode"] = _microcode()
    info["amx"] = "amx_tile" in _cpuinfo("flags").split()
    info["tvm_threads"] = tvm_threads()
    try:
        info["tvm"] = metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        info["tvm"] = "?"
    return info


def tvm_threads() -> int:
    """Threads TVM's runtime gives a parallel loop in this process's environment.

    TVM's rule (``MaxConcurrency`` in tvm/src/runtime/threading_backend.cc): ``TVM_NUM_THREADS``,
    else ``OMP_NUM_THREADS``, else the machine's logical CPUs, halved on x86 (TVM assumes two
    hardware threads a core), at least 1; its pool then uses no more threads than there are
    logical CPUs. tests/test_bench_measure.py checks it against the runtime's own count.
    """
    cpus = os.cpu_count() or 1
    for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name)
        if value is not None:  # read with atoi: its leading digits, 0 (so 1) if none
            digits = re.match(r"\s*[+-]?\d+", value)
            return min(max(int(digits.group()) if digits else 0, 1), cpus)
    return max(cpus // 2 if platform.machine().lower() in ("x86_64", "amd64") else cpus, 1)


def _microcode() -> str:
    """The CPU's microcode revision as Linux reports it ("" where it does not)."""
    return _cpuinfo("microcode")


def _cpuinfo(field: str) -> str:
    """The first ``field`` of /proc/cpuinfo ("" where Linux gives none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _per_instance_kib(text: str) -> int | None:
    """KiB of one instance of a cache as lscpu gives it ("128 KiB (2 instances)": 64)."""
    m = re.match(r"\s*([\d.]+)\s*([KMG])i?B?(?:\s*\((\d+) instances?\))?", text)
    if not m:
        return None
    kib = float(m.group(1)) * {"K": 1, "M": 1024, "G": 1024 * 1024}[m.group(2)]
    return round(kib / int(m.group(3) or 1))


# lscpu's "CPU family" of the generations that tuna has presets for, with the models of each
# family that are that generation (AMD's family 19h holds Zen 3 and Zen 4; 1Ah Zen 5). Only
# presets that describe this project's build machines (small KVM guests: cores, threads and
# memory as such a guest sees them) are named here; a 48-core Sapphire Rapids instance is not
# the 2-vCPU Emerald Rapids guest, so its preset is not detected.
# Sources: AMD's processor programming references name the families; the model ranges
# (Zen 3: 00h-0Fh Milan, 20h-5Fh Vermeer/Rembrandt/Cezanne; Zen 4: 10h-1Fh Genoa, 60h-7Fh
# Raphael/Phoenix, A0h-AFh Bergamo/Siena) follow Linux's arch/x86/kernel/cpu/amd.c; in
# Linux's arch/x86/include/asm/intel-family.h, Intel's family 6
# model CFh is INTEL_EMERALDRAPIDS_X, ADh and AEh INTEL_GRANITERAPIDS_X and _D.
_PRESETS: tuple[tuple[str, int, tuple[range, ...], str], ...] = (
    ("AMD", 25, (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0)), "zen4"),
    ("AMD", 25, (range(0x00, 0x10), range(0x20, 0x60)), "zen3"),
    ("AMD", 26, (range(0x00, 0x100),), "zen5"),
    ("Intel", 6, (range(0xCF, 0xD0),), "emeraldrapids"),
    ("Intel", 6, (range(0xAD, 0xAF),), "graniterapids"),
)

#: Intel server parts that a hypervisor shows under another model number (a KVM guest of this
#: project's reported family 6 model A7h, Rocket Lake, a client part without AMX): with AMX
#: they are of the Sapphire Rapids generations, and the instruction cache tells the core apart,
#: 32 KiB on Golden and Raptor Cove, 64 KiB on Granite Rapids' Redwood Cove (Intel's
#: optimization reference manual, 2024). Only the Granite Rapids guest has been seen masked.
_MASKED_AMX_L1I_KIB = {64: "graniterapids"}


def preset_of(info: Mapping[str, Any]) -> str | None:
    """The CPU preset (``"zen3"``, ``"zen4"``, ``"zen5"``, ``"emeraldrapids"``,
    ``"graniterapids"``) that a machine record stands for, None if none.

    ``info`` is :func:`machine_info`'s record (or a pool's ``machine``); an explicit
    ``preset`` in it wins (pools measured before records named the CPU model say it so). An
    Intel record with AMX whose model is no preset's is named by its instruction cache
    (:data:`_MASKED_AMX_L1I_KIB`).
    """
    if info.get("preset"):
        return str(info["preset"])
    name = str(info.get("model_name", ""))
    try:
        family = int(str(info.get("cpu_family", "")))
    except ValueError:
        return None
    try:
        model = int(str(info.get("cpu_model", "")))
    except ValueError:
        model = None
    for vendor, fam, models, preset in _PRESETS:
        if vendor not in name or family != fam:
            continue
        if model is None:
            # A model-less AMD record names its family's first preset (family 19h: Zen 4, as
            # every pool recorded so was); Intel's family 6 spans two decades.
            if vendor == "AMD":
                return preset
        elif any(model in r for r in models):
            return preset
    if "Intel" in name and family == 6 and info.get("amx"):
        return _MASKED_AMX_L1I_KIB.get(info.get("l1i_kib"))
    return None


def machine_key(info: Mapping[str, Any]) -> str:
    """A name for the machine a pool was measured on, to keep two machines' timings apart:
    its preset where one fits (with the threads TVM ran where they are not the preset's), else
    the device or CPU as recorded, ``"unrecorded"`` if none."""
    preset = preset_of(info)
    if preset:
        threads = info.get("tvm_threads")
        if threads is not None and int(threads) != presets()[preset].threads:
            return f"{preset} ({threads} TVM threads)"
        return preset
    if info.get("device"):
        return str(info["device"])
    if info.get("model_name"):
        return f"{info['model_name']} (family {info.get('cpu_family', '?')}, model {info.get('cpu_model', '?')})"
    return "unrecorded"


def now() -> str:
    """The time a record or page is written: UTC, to the minute."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def meta(argv: Sequence[str], machine: Machine, seconds: float, **extra: Any) -> dict[str, Any]:
    """The record of one bench run: ``argv`` are the ``tuna`` command's arguments; ``extra`` its budget."""
    return {
        "machine": machine_info(),
        "target": machine.name,
        "date": now(),
        "command": " ".join(["tuna", *argv]),
        "seconds": seconds,
        **extra,
    }


def join_runs(runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Several runs of one ``tuna bench`` command (their JSON) as one: their rows, and their
    commands joined (None for no run)."""
    if not runs:
        return None
    if len(runs) == 1:
        return runs[0]
    metas = [r.get("meta", {}) for r in runs]
    joined = {**metas[0], "command": "; ".join(m.get("command", "?") for m in metas),
              "date": max(m.get("date", "") for m in metas), "seconds": sum(m.get("seconds") or 0 for m in metas)}
    return {"rows": [row for r in runs for row in r["rows"]], "meta": joined}
