"""What the bench commands record beside their results (``meta`` in their JSON): the
machine they ran on, the target modelled, when, the command and how long it took; and
several runs of one command joined into one record.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

from ..machine import Machine


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
    try:
        info["tvm"] = metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        info["tvm"] = "?"
    return info


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
