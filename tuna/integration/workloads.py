"""Workloads, targets and machines on the TVM side.

Built-in Ansor workloads and TVMScript parsing (:func:`load_workload`,
:func:`parse_tvmscript`), the TVM target of a machine (:func:`tvm_target`), the machine a
target stands for (:func:`as_machine`), and TVM values as plain JSON (:func:`plain_json`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tvm
from tvm import tirx
from tvm.s_tir.meta_schedule.testing import te_workload

from ..errors import TunaError, WorkloadError
from ..machine import Machine, resolve


def workload_names() -> dict[str, int]:
    """Built-in Ansor workloads and how many configurations each has."""
    return {name: len(params) for name, (_, params) in te_workload.CONFIGS.items()}


def parse_tvmscript(text: str, what: str) -> tvm.IRModule:
    """Parse TVMScript holding a TIR PrimFunc into an IRModule.

    Raises
    ------
    WorkloadError
        Naming ``what`` when the text does not parse or holds no PrimFunc.
    """
    try:
        parsed = tvm.script.from_source(text)
    except Exception as err:  # TVMScript's parser raises many kinds
        raise WorkloadError(f"{what} does not parse as TVMScript: {err}") from None
    if isinstance(parsed, tirx.PrimFunc):
        parsed = tvm.IRModule({"main": parsed})
    if not isinstance(parsed, tvm.IRModule) or not any(isinstance(f, tirx.PrimFunc) for f in parsed.functions.values()):
        raise WorkloadError(f"{what} holds no TIR PrimFunc")
    return parsed


def network_task(spec: str | os.PathLike) -> tuple[str, str] | None:
    """``(network, task)`` when ``spec`` names a tuning task of one of tuna's networks
    (``"resnet50/max_pool2d"``), None otherwise (a file that exists or looks like TVMScript,
    an Ansor name, an unknown network)."""
    from .networks import NETWORKS

    text = str(spec)
    path = Path(text)
    network, slash, task = text.partition("/")
    if not slash or path.exists() or path.suffix in (".py", ".tvmscript", ".tir") or network not in NETWORKS:
        return None
    return network, task


def pool_label(workload: str, script: str) -> tuple[str, str | list[Any], str]:
    """How a measured pool of ``workload`` names it: ``(file stem, workload label, operator family)``.

    A network's task keeps its name (``"resnet50/max_pool2d"``, stem
    ``"resnet50-max_pool2d"``); a built-in workload becomes ``[NAME, index]`` (stem
    ``"GMM-1"``). ``script`` is the workload's TVMScript, which the family is read from.

    Raises
    ------
    WorkloadError
        For anything else (a TVMScript file has no name to give a pool).
    """
    from ..bench.families import family_of

    if network_task(workload) is not None:
        return workload.replace("/", "-"), workload, family_of(workload, script)
    name, _, index = workload.replace("-", ":").partition(":")
    if name.upper() not in workload_names():
        raise WorkloadError(
            f"pools are collected for built-in workloads NAME:INDEX or network tasks NETWORK/TASK, not {workload!r}"
        )
    return f"{name.upper()}-{int(index or 0)}", [name.upper(), int(index or 0)], family_of(name.upper(), script)


def load_workload(spec: str | os.PathLike) -> tvm.IRModule:
    """An IRModule from a built-in workload (``"GMM:1"``), a network's tuning task
    (``"resnet50/fused_conv2d_add_relu"``, see :func:`tuna.integration.networks.network_tasks`)
    or a TVMScript file.

    Raises
    ------
    WorkloadError
        For an unknown workload, index, network or task, or a file that does not parse.
    """
    text = str(spec)
    path = Path(text)
    named = network_task(text)
    if named is not None:
        from .networks import task_module

        return task_module(*named)
    if path.suffix in (".py", ".tvmscript", ".tir") or path.exists():
        if not path.exists():
            raise WorkloadError(f"workload file {text} does not exist")
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as err:  # a directory, no permission, a binary file
            raise WorkloadError(f"workload file {text} cannot be read as text: {err}") from None
        return parse_tvmscript(source, f"workload file {text}")
    name, _, index = text.replace("-", ":").partition(":")
    configs = workload_names()
    if name.upper() not in configs:
        from .networks import NETWORKS

        raise WorkloadError(
            f"unknown workload {text!r}: give NAME:INDEX with NAME one of {', '.join(configs)}, a whole network or "
            f"one of its tasks NETWORK/TASK (networks: {', '.join(NETWORKS)}; `tuna bench tasks NETWORK`), or a "
            "TVMScript file"
        )
    name = name.upper()
    try:
        idx = int(index or 0)
    except ValueError:
        raise WorkloadError(f"workload {text!r}: the index {index!r} is not an integer") from None
    if not 0 <= idx < configs[name]:
        raise WorkloadError(f"workload {text!r}: {name} has configurations 0..{configs[name] - 1}, not {idx}")
    return tvm.IRModule({"main": te_workload.create_te_workload(name, idx)})


def tvm_target(machine: Machine) -> tvm.target.Target:
    """The ``tvm.target.Target`` to compile candidates for ``machine``."""
    spec = {k: list(v) if isinstance(v, tuple) else v for k, v in machine.target.items()}
    try:
        return tvm.target.Target(spec)
    except Exception as err:
        raise TunaError(f"TVM rejects the target {spec}: {err}") from None


def as_machine(target: Any, machine: str | Machine | None = None) -> Machine:
    """The :class:`~tuna.machine.Machine` that ``target`` stands for.

    ``target`` itself when it is a Machine; otherwise :func:`tuna.machine.resolve` of it
    (a preset name, a TVM target dict or object), with ``machine`` the preset to model
    when tuna has no file for that target.
    """
    if isinstance(target, Machine):
        return target
    return resolve(target, machine)


def plain_json(obj: Any) -> Any:
    """TVM containers and immediates as plain JSON values (traces, target dicts)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, tvm.tirx.IntImm):
        return int(obj.value)
    if isinstance(obj, tvm.tirx.FloatImm):
        return float(obj.value)
    if hasattr(obj, "items"):
        return {str(k): plain_json(v) for k, v in obj.items()}
    if hasattr(obj, "__len__") and hasattr(obj, "__getitem__"):
        return [plain_json(x) for x in obj]
    return str(obj)
