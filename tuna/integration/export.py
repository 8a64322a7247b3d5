"""The tuned schedule as a compiled module to deploy: :func:`export_module` and :class:`ExportInfo`.

The chosen schedule's TIR goes through ``tvm.compile`` for the target and is written in the
format the file's suffix names:

- ``.so``: a shared library (``Module.export_library``), linked with this machine's compiler
  for its own CPU, with ``<triple>-g++`` / ``<triple>-gcc`` from PATH for another one;
- ``.tar``: the object files unlinked (TVM writes it gzip-compressed); the device links them,
  ``tvm.runtime.load_module`` does so with its compiler;
- ``.o``: the host object alone (CPU targets);
- ``.cu`` and ``.ptx`` (CUDA targets): CUDA C++ to build on the device, or the kernels' PTX.

No linker for another CPU is assumed: ``.tar`` and ``.o`` need none.

CUDA without a GPU: TVM 0.27's pip wheel compiles CUDA targets with no CUDA runtime, but with
an LLVM host its device module keeps the kernels as CUDA C (format ``cuda``; its own
``tvm_callback_cuda_compile`` is not called at build time), which the device's TVM compiles
at first call (NVRTC from ``cuda-bindings``, or nvcc with ``TVM_CUDA_COMPILE_MODE=nvcc``).
So a ``.so`` takes TVM's ``cuda_host`` path when nvcc is here and compiles for the GPU's
architecture: host wrappers and kernels as one CUDA C++ unit
(``tvm.backend.cuda.host.export_cuda_host``), built by nvcc into a tvm-ffi library with the
GPU's machine code in it. Otherwise it falls back to the CUDA C one, the kernels checked by
nvcc and ptxas here when nvcc is present, and says so in :attr:`ExportInfo.description`.

Networks (Relax VM executables) are not exported: tuna tunes single TIR workloads.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import tirx
from tvm.backend.cuda.host import export_cuda_host
from tvm.target import Target

from ..errors import ExportError, TunaError
from ..gpu import nvcc
from ..gpu.timing import timing
from ..machine import Machine
from ..search.processes import run_tool, which
from .analysis import object_code
from .work_dir import SCRATCH_MIN_FREE, short_of_space
from .workloads import as_machine, tvm_target

#: Suffix -> what is written, for the messages.
FORMATS = {
    ".so": "shared library",
    ".tar": "tar of object files (gzip-compressed)",
    ".o": "object file",
    ".cu": "CUDA C of the kernels",
    ".ptx": "PTX of the kernels",
}
_CPU_SUFFIXES = (".so", ".tar", ".o")
_CUDA_SUFFIXES = (".so", ".tar", ".cu", ".ptx")


@dataclass(frozen=True)
class ExportInfo:
    """What :func:`export_module` wrote and how to use it on the device.

    Attributes
    ----------
    path : str
        The file written.
    format : str
        Its suffix without the dot: ``so``, ``tar``, ``o``, ``cu`` or ``ptx``.
    description : str
        What the file holds, for people (``"AArch64 tar of object files (gzip-compressed)"``).
    target : str
        The TVM target it was compiled for.
    entry : str
        The function to call in the loaded module (the PrimFunc's global symbol).
    args : tuple of str
        Its arguments, ``"X: float32[1, 128, 128]"``, in order.
    note : str
        One line on loading and running it on the device (or linking it first).
    members : tuple of str
        The files inside a ``.tar``.
    """

    path: str
    format: str
    description: str
    target: str
    entry: str
    args: tuple[str, ...]
    note: str
    members: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"wrote {self.path} ({self.description}, {self.target})\n  {self.note}"


def check_path(path: str | os.PathLike, target: Any) -> None:
    """Refuse, before any work, a file name whose suffix the target has no format for, or a
    shared library for another CPU with no linker for it on PATH.

    Parameters
    ----------
    path : path
        The file :func:`export_module` is to write.
    target : str, dict, Machine or tvm.target.Target
        What it is for.

    Raises
    ------
    ExportError
        Naming the file, the target and the suffixes it takes.
    """
    out = Path(path)
    suffix = out.suffix.lower()
    machine = as_machine(target)
    is_cuda = machine.kind == "gpu"
    allowed = _CUDA_SUFFIXES if is_cuda else _CPU_SUFFIXES
    where = f"{out} for {_describe(machine)}"
    if is_cuda and suffix == ".o":
        raise ExportError(f"cannot export {where}: an object file would hold the host code without the kernels; "
                          f"export {out.with_suffix('.so')} or {out.with_suffix('.tar')}")
    if suffix not in allowed:
        raise ExportError(
            f"cannot export {where}: unknown suffix {suffix or '(none)'!r}; give one of "
            f"{', '.join(allowed)} ({'; '.join(f'{s}: {FORMATS[s]}' for s in allowed)})"
        )
    if is_cuda:
        return
    triple = _triple(tvm_target(machine))
    if suffix == ".so" and _arch(triple) != _arch(platform.machine()) and _cross_linker(triple) is None:
        raise ExportError(
            f"cannot write {where}: linking a shared library for {triple} needs {triple}-g++ or {triple}-gcc "
            f"on PATH (Debian: apt install g++-{_arch(triple).replace('_', '-')}-linux-gnu). Export "
            f"{out.with_suffix('.tar')} or {out.with_suffix('.o')} instead and link on the device: "
            f"g++ -shared -fPIC -o {out.name} {out.with_suffix('.o').name} (tvm.runtime.load_module links it too)"
        )


def export_module(module: Any, target: Any, path: str | os.PathLike, *, host: Any = None) -> ExportInfo:
    """Compile a tuned schedule for its target and write it as ``path``'s suffix says.

    Parameters
    ----------
    module : TuneResult, s_tir.Schedule, IRModule or PrimFunc
        What to compile: a :class:`~tuna.integration.TuneResult` (its chosen schedule), a
        schedule, or scheduled TIR.
    target : str, dict, Machine, tvm.target.Target or None
        Preset name or TVM target; None takes a TuneResult's machine.
    path : path
        The file to write; its suffix picks the format: ``.so``, ``.tar``, ``.o`` (CPUs);
        ``.so``, ``.tar``, ``.cu``, ``.ptx`` (CUDA). Missing directories are created.
    host : str, dict or tvm.target.Target, optional
        CUDA targets: the CPU target of the host code that launches the kernels (default:
        this machine's, ``"llvm"``); ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}``
        for a Jetson.

    Returns
    -------
    ExportInfo

    Raises
    ------
    ExportError
        For a suffix the target has no format for, a schedule TVM cannot compile, a ``.so``
        for another CPU with no linker for it on PATH, or a path that cannot be written;
        each message names the file and the target.
    """
    mod, machine = _module_and_machine(module, target)
    out = Path(path)
    suffix = out.suffix.lower()
    tgt = tvm_target(machine)
    is_cuda = tgt.kind.name == "cuda"
    check_path(out, machine)
    where = f"{out} for {_describe(machine)}"
    entry, args = _signature(mod)
    if is_cuda:
        return _export_cuda(mod, machine, tgt, out, host, entry, args)
    triple = _triple(tgt)
    linker = _cross_linker(triple) if suffix == ".so" and _arch(triple) != _arch(platform.machine()) else None
    rt = _compile(mod, tgt, where)
    with _staged(out) as staged:
        if suffix == ".o":
            _tvm_write(lambda: Path(staged).write_bytes(object_code(rt)), where)
        else:
            fcompile = None if linker is None else _cross_compile(linker)
            _tvm_write(lambda: rt.export_library(staged, fcompile=fcompile), where)
    members = _tar_members(out) if suffix == ".tar" else ()
    return ExportInfo(str(out), suffix[1:], f"{_isa_name(triple)} {FORMATS[suffix]}", _describe(machine), entry,
                      args, _note(out, suffix, entry, args, False, members), members)


#: What a tuned network can be written as (a Relax VM executable; CPU targets).
_NETWORK_SUFFIXES = (".so", ".tar")


def check_network_path(path: str | os.PathLike, target: Any) -> None:
    """Refuse, before tuning, a file a tuned network cannot be written to (see :func:`export_network`).

    Raises
    ------
    ExportError
        Naming the file, the target and what it takes.
    """
    out = Path(path)
    machine = as_machine(target)
    where = f"{out} for {_describe(machine)}"
    if machine.kind == "gpu":
        raise ExportError(f"cannot export {where}: tuna writes tuned networks for CPU targets only; "
                          "tune the network's tasks and compile it with tvm.compile on the GPU's host")
    if out.suffix.lower() not in _NETWORK_SUFFIXES:
        raise ExportError(f"cannot export {where}: a network is written as a Relax VM executable, "
                          f"{' or '.join(_NETWORK_SUFFIXES)}, not {out.suffix or '(no suffix)'!r}")
    check_path(out, machine)


def export_network(executable: Any, target: Any, path: str | os.PathLike) -> ExportInfo:
    """Write a tuned network's Relax VM executable (:class:`~.network_tuning.NetworkTuneResult`) as ``.so`` or ``.tar``.

    Load it on the device with ``tvm.relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())``
    and call ``vm["main"](input)``.

    Raises
    ------
    ExportError
        As :func:`check_network_path`, or when linking fails.
    """
    out = Path(path)
    machine = as_machine(target)
    check_network_path(out, machine)
    suffix = out.suffix.lower()
    triple = _triple(tvm_target(machine))
    linker = _cross_linker(triple) if suffix == ".so" and _arch(triple) != _arch(platform.machine()) else None
    where = f"{out} for {_describe(machine)}"
    with _staged(out) as staged:
        fcompile = None if linker is None else _cross_compile(linker)
        _tvm_write(lambda: executable.export_library(staged, fcompile=fcompile), where)
    members = _tar_members(out) if suffix == ".tar" else ()
    note = (f"load it on the device: vm = tvm.relax.VirtualMachine(tvm.runtime.load_module({out.name!r}), "
            "tvm.cpu()); vm['main'](x)")
    return ExportInfo(str(out), suffix[1:], f"{_isa_name(triple)} Relax VM executable ({FORMATS[suffix]})",
                      _describe(machine), "main", (), note, members)


def _export_cuda(mod, machine: Machine, tgt: Target, out: Path, host: Any, entry: str,
                 args: tuple[str, ...]) -> ExportInfo:
    """CUDA targets. With nvcc and this machine's CPU as host, ``.so`` and ``.cu`` take TVM's
    ``cuda_host`` path: one CUDA C++ translation unit of host wrappers and kernels, which nvcc
    turns into a tvm-ffi library holding machine code for the GPU. Otherwise, and for ``.tar``,
    TVM's LLVM host code with the kernels embedded as CUDA C, compiled on the device."""
    suffix = out.suffix.lower()
    where = f"{out} for {_describe(machine)}"
    tool = nvcc.find_nvcc()
    if suffix == ".ptx" and tool is None:
        raise ExportError(f"cannot write {where}: PTX comes from nvcc, which was not found (looked at $TUNA_NVCC, "
                          f"PATH and $CUDA_HOME/bin); install the CUDA toolkit (no GPU is needed) or export "
                          f"{out.with_suffix('.cu')} or {out.with_suffix('.so')}")
    native = str(machine.target.get("arch", ""))
    arch = _cuda_arch(machine) if tool else None
    fallback = ""
    if suffix in (".so", ".cu") and host is None:
        reason = None
        if suffix == ".so" and tool is None:
            reason = "no nvcc was found"
        elif suffix == ".so" and arch != native:
            reason = f"{tool} cannot compile for {native}"
        else:
            try:
                unit = export_cuda_host(tvm.compile(mod, target=Target(tgt, host="cuda_host")).mod)
            except Exception as err:  # cuda_host codegen rejects what it cannot host (workspaces, ...)
                reason = f"TVM's cuda_host code generator refused it ({type(err).__name__}: {str(err)[:200]})"
        if reason is None:
            with _staged(out) as staged:
                if suffix == ".cu":
                    Path(staged).write_text(unit)
                else:
                    _nvcc_library(tool, arch, unit, staged, where)
            what = ("CUDA C++ of the host wrappers and kernels (tvm-ffi)" if suffix == ".cu" else
                    f"{_isa_name(_triple(Target('llvm')))} shared library with {arch} machine code (tvm-ffi)")
            return ExportInfo(str(out), suffix[1:], what, _describe(machine), entry, args,
                              _note(out, suffix, entry, args, True, (), arch if suffix == ".so" else native))
        fallback = f" ({reason})"
    host_target = Target(host) if host is not None else Target("llvm")
    rt = _compile(mod, Target(tgt, host=host_target), where)
    ptx = None
    if tool is not None:  # nvcc checks the kernels here, so that code it rejects fails now, not on the device
        try:
            ptx = nvcc.compile_cuda(_cuda_source(rt), arch, tool).ptx
        except TunaError as err:
            raise ExportError(f"the kernels do not compile for {arch} (exporting {where}): {err}") from None
    triple = _triple(host_target)
    linker = None
    if suffix == ".so" and _arch(triple) != _arch(platform.machine()):
        linker = _cross_linker(triple)
        if linker is None:
            raise ExportError(f"cannot write {where}: linking the host code for {triple} needs {triple}-g++ on "
                              f"PATH; export {out.with_suffix('.tar')} instead and link it on the device")
    with _staged(out) as staged:
        if suffix == ".ptx":
            Path(staged).write_text(ptx)
        elif suffix == ".cu":
            Path(staged).write_text(_cuda_source(rt))
        else:
            fcompile = None if linker is None else _cross_compile(linker)
            _tvm_write(lambda: rt.export_library(staged, fcompile=fcompile), where)
    members = _tar_members(out) if suffix == ".tar" else ()
    if suffix in (".so", ".tar"):
        what = f"{_isa_name(triple)} {FORMATS[suffix]}, kernels as CUDA C{fallback}"
    else:
        what = FORMATS[suffix] + (f" for {arch}" if suffix == ".ptx" else "")
        if suffix == ".ptx" and arch != native:
            what += f" ({tool} cannot compile for {native})"
    note = _note(out, suffix, entry, args, True, members)
    if tool is None:
        note += " (the kernels were not compiled here: no nvcc found)"
    return ExportInfo(str(out), suffix[1:], what, _describe(machine), entry, args, note, members)


def _compile(mod: tvm.IRModule, tgt: Target, where: str):
    try:
        return tvm.compile(mod, target=tgt).mod
    except Exception as err:  # TVM raises its own error types from lowering and codegen
        raise ExportError(f"TVM could not compile the schedule (exporting {where}): "
                          f"{type(err).__name__}: {str(err).strip()[:800]}") from None


def _nvcc_library(tool: str, arch: str, unit: str, output: str, where: str) -> None:
    """nvcc compiles the cuda_host translation unit into a shared library: host wrappers for this CPU
    calling tvm-ffi (resolved at load time from the process's libtvm_ffi), kernels as ``arch`` machine
    code and PTX, the CUDA runtime linked statically."""
    from tvm_ffi import libinfo

    src = Path(output).with_suffix(".cu")
    src.write_text(unit)
    includes = dict.fromkeys([libinfo.find_include_path(), libinfo.find_dlpack_include_path()])
    lib = Path(libinfo.find_libtvm_ffi()).parent
    argv = [tool, "-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-w", f"-arch={arch}",
            *(f"-I{d}" for d in includes), "-o", output, str(src), f"-L{lib}", "-ltvm_ffi"]
    done = run_tool(argv, timeout=600)
    if done.returncode != 0:
        raise ExportError(f"nvcc could not build {where}: {(done.stderr or done.stdout).strip()[:800]}")


# ---------------------------------------------------------------------------------------
# What to compile
# ---------------------------------------------------------------------------------------


def _module_and_machine(module: Any, target: Any) -> tuple[tvm.IRModule, Machine]:
    from .tuning import TuneResult

    if isinstance(module, TuneResult):
        mod = module.schedule.mod
        machine = module.machine if target is None else as_machine(target)
    else:
        if target is None:
            raise TunaError("export_module needs a target (a preset name or TVM target) unless given a TuneResult")
        machine = as_machine(target)
        if isinstance(module, tirx.PrimFunc):
            mod = tvm.IRModule({"main": module})
        elif isinstance(module, tvm.IRModule):
            mod = module
        elif hasattr(module, "mod") and isinstance(module.mod, tvm.IRModule):  # an s_tir.Schedule
            mod = module.mod
        else:
            raise TunaError(f"cannot export a {type(module).__name__}: give a TuneResult, a schedule, an IRModule "
                            "or a PrimFunc")
    return mod, machine


def _signature(mod: tvm.IRModule) -> tuple[str, tuple[str, ...]]:
    """The entry function's name in the compiled module and its arguments."""
    funcs = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    if not funcs:
        raise ExportError("the module holds no TIR PrimFunc to export")
    gv, func = next(((g, f) for g, f in funcs if g.name_hint == "main"), funcs[0])
    entry = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else gv.name_hint
    args = []
    for param in func.params:
        shape = getattr(param.ty, "shape", None)  # tensors are typed by their buffer in TVM 0.27's TIR
        dims = f"[{', '.join(str(s) for s in shape)}]" if shape is not None else ""
        args.append(f"{param.name}: {getattr(param.ty, 'dtype', param.dtype)}{dims}")
    return entry, tuple(args)


# ---------------------------------------------------------------------------------------
# Targets, linkers, nvcc
# ---------------------------------------------------------------------------------------


def _describe(machine: Machine) -> str:
    """``"graviton2 (llvm, mcpu=neoverse-n1, mtriple=aarch64-linux-gnu)"``: the preset and the target's gist."""
    keys = ("mcpu", "mtriple", "arch")
    gist = [str(machine.target.get("kind")), *(f"{k}={machine.target[k]}" for k in keys if k in machine.target)]
    return f"{machine.name} ({', '.join(gist)})"


def _triple(tgt: Target) -> str:
    """The LLVM triple of a CPU target (this machine's when it names none)."""
    triple = tgt.attrs.get("mtriple") if tgt.attrs else None
    return str(triple) if triple else str(tvm.target.codegen.llvm_get_system_triple())


def _arch(triple_or_machine: str) -> str:
    arch = triple_or_machine.split("-", 1)[0].lower()
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


def _isa_name(triple: str) -> str:
    arch = _arch(triple)
    return {"x86_64": "x86-64", "aarch64": "AArch64"}.get(arch, arch)


def _cross_linker(triple: str) -> str | None:
    """A compiler driver that links shared libraries for ``triple``: Debian's cross packages name
    them ``aarch64-linux-gnu-g++``; LLVM's ``-unknown-`` spelling is tried without it too."""
    names = [triple, triple.replace("-unknown-", "-"), f"{_arch(triple)}-linux-gnu"]
    for name in dict.fromkeys(names):
        for tool in (f"{name}-g++", f"{name}-gcc"):
            found = which(tool)
            if found:
                return found
    return None


def _cross_compile(linker: str):
    from tvm.support import cc

    return cc.cross_compiler(linker)


def _cuda_arch(machine: Machine) -> str:
    """The sm_XX nvcc compiles for: the machine's, or the timing table's fallback that nvcc has."""
    tool = nvcc.require_nvcc()
    return nvcc.choose_arch(str(machine.target["arch"]), timing(machine).fallback_arch, tool)


def _cuda_release() -> str:
    """The CUDA release of tuna's nvcc ("13.0"): its statically linked runtime needs a driver that new."""
    found = nvcc.find_nvcc()
    done = run_tool([found, "--version"], timeout=60) if found else None
    match = re.search(r"release (\d+\.\d+)", done.stdout) if done else None
    return match.group(1) if match else "(nvcc's release)"


def _cuda_source(rt) -> str:
    for dev in rt.imports:
        if dev.kind == "cuda":
            return str(dev.inspect_source("cuda"))
    raise ExportError("the compiled module holds no CUDA kernel")


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


@contextmanager
def _staged(out: Path) -> Iterator[str]:
    """A temporary file, moved to ``out`` when all went well: a failed export leaves no half-written
    file, and a path that cannot be written fails with its name before anything is compiled into it."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ExportError(f"cannot write {out}: cannot create directory {out.parent}: {err.strerror or err}") from None
    if out.is_dir():
        raise ExportError(f"cannot write {out}: it is a directory")
    if not os.access(out.parent, os.W_OK):
        raise ExportError(f"cannot write {out}: directory {out.parent} is not writable")
    # LLVM ends the process, rather than raising, when it cannot write an object file.
    for folder in (out.parent, Path(tempfile.gettempdir())):
        short = short_of_space(folder)
        if short:
            raise ExportError(f"cannot write {out}: {short}; exporting needs {SCRATCH_MIN_FREE >> 20} MiB there "
                              "(TMPDIR names the temporary directory)")
    tmp = tempfile.mkdtemp(prefix="tuna-export-")
    try:
        staged = Path(tmp) / out.name
        yield str(staged)
        try:
            shutil.move(str(staged), str(out))
        except OSError as err:
            raise ExportError(f"cannot write {out}: {err.strerror or err}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _tvm_write(write, where: str) -> None:
    try:
        write()
    except (RuntimeError, ValueError, OSError) as err:  # the compiler's or tar's output, verbatim
        raise ExportError(f"writing {where} failed: {str(err).strip()[:800]}") from None


def _tar_members(out: Path) -> tuple[str, ...]:
    with tarfile.open(out, "r:*") as tar:
        return tuple(sorted(m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()))


def _note(out: Path, suffix: str, entry: str, args: tuple[str, ...], cuda: bool, members, arch: str = "") -> str:
    names = ", ".join(a.split(":", 1)[0] for a in args)
    tensors = f"{names} tvm.runtime.tensor(numpy array, {'tvm.cuda(0)' if cuda else 'tvm.cpu(0)'})"
    call = f'tvm.runtime.load_module("{out.name}")["{entry}"]({names})'
    so = out.with_suffix(".so").name
    if arch and suffix == ".so":  # TVM's cuda_host path, compiled by nvcc
        return (f"on the device ({arch}, a driver for CUDA {_cuda_release()} or later): {call} with {tensors}; "
                f'tvm_ffi.load_module("{out.name}") loads it without TVM')
    if arch:
        return (f"build it as tuna does: nvcc -shared -Xcompiler -fPIC -std=c++17 -arch={arch} -I$TVM_FFI/include "
                f"-o {so} {out.name} -L$TVM_FFI/lib -ltvm_ffi (TVM_FFI: the tvm_ffi package's directory), then "
                f"{call.replace(out.name, so)}")
    if suffix == ".so" and cuda:
        return (f"on the device (TVM 0.27 with CUDA): {call} with {tensors}; the kernels are compiled there at "
                "first call by NVRTC (pip install cuda-bindings) or nvcc (TVM_CUDA_COMPILE_MODE=nvcc)")
    if suffix == ".so":
        return f"on the device (TVM 0.27): {call} with {tensors}"
    if suffix == ".tar":
        extra = ("; the kernels are compiled at first call by NVRTC (pip install cuda-bindings) or nvcc "
                 "(TVM_CUDA_COMPILE_MODE=nvcc)") if cuda else ""
        return (f"on the device: {call} links it with the device's g++ ({tensors}), or link it yourself: "
                f"tar xzf {out.name} && g++ -shared -fPIC -o {so} {' '.join(members) or '*.o'}{extra}")
    if suffix == ".o":
        return (f"on the device: g++ -shared -fPIC -o {so} {out.name}, then {call.replace(out.name, so)} with "
                f"{tensors} (tvm.runtime.load_module(\"{out.name}\") links it the same way)")
    return f"the kernels of {entry} without the host code that launches them: to inspect, or for your own launcher"
