"""The TVM side of the GPU full tier: CUDA C, launch shapes and shared-memory addresses.

A scheduled module is lowered with TVM's own TIR pipeline for the CUDA target, split into
host and device functions as ``tvm.compile`` does, and the device functions go through
TVM's CUDA code generator; no GPU and no CUDA-enabled TVM are needed. From each lowered
device function come its launch shape (the ``thread_extent`` attributes) and the byte
addresses the first warp touches in every shared-memory access (its indices evaluated
for threads 0-31, loops at their first iteration), for the bank-conflict model. The CUDA
C goes to nvcc (:mod:`tuna.gpu.nvcc`) for PTX and ptxas' register counts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tvm
from tvm.target import Target

from ..errors import AnalysisError, TunaError
from ..gpu import nvcc
from ..gpu import ptx as ptx_parser
from ..gpu.banks import WarpAccess
from ..gpu.full_tier import CompiledKernel, GpuCode
from ..gpu.timing import timing
from ..machine import Machine
from .intrinsics import new_tune_context
from .lower import dtype_bytes
from .warp import UnknownValueError, warp_value


def _lower(mod: tvm.IRModule, target: Target) -> tuple[tvm.IRModule, tvm.IRModule, str]:
    """The lowered host module, the lowered device functions and their CUDA C."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.tirx.build import codegen_build, split_host_device_mods

    try:
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        host = Target("llvm") if tvm.runtime.enabled("llvm") else Target("c")
        mod = tvm.tirx.transform.BindTarget(target.with_host(host))(mod)
        pipeline, _, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
        mod = pipeline(mod)
        host_mod, devices = split_host_device_mods(mod)
        if not devices:
            raise AnalysisError("the candidate lowered to no device function: it binds no loop to a GPU "
                                "thread, so it would run on the host; the GPU full tier needs a scheduled "
                                "candidate (e.g. `tuna explain --trace` with a trace from `tuna tune`), the "
                                "IR tier (--tier ir) times it as one GPU thread")
        (dev_target, device), *_ = devices.items()
        device = finalize_device()(device)
        source = codegen_build(device, dev_target).inspect_source("cuda")
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"TVM could not generate CUDA for the candidate: {type(err).__name__}: {err}") from err
    return host_mod, device, source


def lower_to_cuda(mod: tvm.IRModule, target: Target) -> tuple[tvm.IRModule, str]:
    """The lowered device functions of a scheduled module and their CUDA C.

    Raises
    ------
    AnalysisError
        When TVM cannot lower the module or generate CUDA for it.
    """
    _, device, source = _lower(mod, target)
    return device, source


def _host_nodes(stmt, out: list) -> None:
    """Every statement and call of a lowered host function, depth first, in program order."""
    kind = type(stmt).__name__
    out.append(stmt)
    if kind == "Evaluate":
        _host_nodes(stmt.value, out)
        return
    if kind == "Call":
        return
    for child in _Walker._children(stmt):
        _host_nodes(child, out)


def launch_plan(mod: tvm.IRModule, target: Target) -> dict[str, Any]:
    """What it takes to run a scheduled module's kernels outside TVM: CUDA C and its launches.

    The host function TVM generates calls each kernel with the data pointers of the
    module's buffers (or of workspaces it allocates) and the launch extents; this reads
    those calls, so that a plain CUDA driver (CuPy, :mod:`tuna.bench.gpu_collect`) can run
    the kernels as TVM's runtime would, on a GPU machine without TVM.

    Returns
    -------
    dict
        ``source`` (CUDA C); ``kernels``: in launch order, each ``name``, ``grid`` and
        ``block`` (three extents each), ``shared_dyn`` (bytes of dynamic shared memory) and
        ``args`` (buffer names); ``workspace``: the buffers the host allocates, by name,
        each ``elems`` and ``dtype``. Every other argument is a parameter of the module's
        function, by its name there.

    Raises
    ------
    AnalysisError
        When TVM cannot lower the module, or a kernel call has an argument this cannot name.
    """
    funcs = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(funcs) != 1:
        raise AnalysisError(f"a launch plan is made for a module of one function, not {len(funcs)}")
    params = {str(p.name) for p in funcs[0].params}
    host_mod, _, source = _lower(mod, target)
    entry = [f for f in host_mod.functions.values()
             if isinstance(f, tvm.tirx.PrimFunc) and f.attrs and f.attrs.get("tirx.is_entry_func")]
    if len(entry) != 1:
        raise AnalysisError(f"the lowered host module has {len(entry)} entry functions, expected 1")
    nodes: list = []
    _host_nodes(entry[0].body, nodes)
    allocated: dict[str, dict[str, Any]] = {}
    kernels = []
    for node in nodes:
        kind = type(node).__name__
        if kind == "AllocBuffer":
            buf = node.buffer
            if str(buf.name) not in params:
                elems = math.prod(int(s) for s in buf.shape)
                allocated[str(buf.name)] = {"elems": elems, "dtype": str(buf.dtype)}
        elif kind == "Call" and str(getattr(node.op, "name", "")).endswith("call_ffi_kernel"):
            launch = [str(p) for p in getattr(node.attrs, "launch_params", None) or []]
            args = list(node.args[1:])
            extents = args[len(args) - len(launch):] if launch else []
            if any(type(e).__name__ != "IntImm" for e in extents):
                raise AnalysisError(f"kernel {node.args[0].value}: a launch extent is not a constant")
            extents = [int(e.value) for e in extents]
            buffers = args[: len(args) - len(launch)]
            arg_names = []
            for a in buffers:
                # the host passes each buffer's data pointer: tirx.buffer_data(buffer)
                is_data = type(a).__name__ == "Call" and str(getattr(a.op, "name", "")).endswith("buffer_data")
                name = str(a.args[0].name) if is_data else ""
                if name not in params and name not in allocated:
                    raise AnalysisError(f"kernel {node.args[0].value}: argument {a} is neither a parameter of the "
                                        "module nor a buffer its host function allocates")
                arg_names.append(name)
            dims = dict(zip(launch, extents))
            kernels.append({
                "name": str(node.args[0].value),
                "grid": [dims.get(f"blockIdx.{c}", 1) for c in "xyz"],
                "block": [dims.get(f"threadIdx.{c}", 1) for c in "xyz"],
                "shared_dyn": dims.get("tirx.use_dyn_shared_memory", 0),
                "args": arg_names,
            })
    if not kernels:
        raise AnalysisError("the lowered host function launches no kernel")
    used = {n for k in kernels for n in k["args"]}
    return {"source": source, "kernels": kernels, "workspace": {n: w for n, w in allocated.items() if n in used}}


# ---------------------------------------------------------------------------------------
# The first warp's indices
# ---------------------------------------------------------------------------------------

def _addresses(index, env: dict, elem_bytes: int, warp: int) -> tuple[tuple[int, ...], ...]:
    """Byte addresses each thread of the warp touches through a flat index (a Ramp for vectors)."""
    if type(index).__name__ == "Ramp":
        base = np.broadcast_to(np.asarray(warp_value(index.base, env)), (warp,))
        stride = int(np.asarray(warp_value(index.stride, env)).flat[0])
        lanes = int(index.lanes)
        return tuple(tuple(int(b + stride * k) * elem_bytes for k in range(lanes)) for b in base)
    base = np.broadcast_to(np.asarray(warp_value(index, env)), (warp,))
    return tuple((int(b) * elem_bytes,) for b in base)


def _loads(expr):
    """Every buffer load inside an expression."""
    stack = [expr]
    while stack:
        e = stack.pop()
        kind = type(e).__name__
        if kind in ("TensorLoad", "BufferLoad"):
            yield e
        for name in ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body"):
            child = getattr(e, name, None)
            if child is not None and not isinstance(child, (int, float, str)) and hasattr(child, "same_as"):
                stack.append(child)
        for name in ("args", "indices"):
            children = getattr(e, name, None)
            if children is not None:
                stack.extend(c for c in children if hasattr(c, "same_as"))


class _Walker:
    """Walks one lowered device function: launch shape and shared accesses of the first warp."""

    def __init__(self, warp_size: int) -> None:
        self.warp_size = warp_size
        self.dims: dict[str, int] = {}
        self.accesses: list[WarpAccess] = []
        self.dynamic_shared = 0
        self.skipped = 0

    def extents(self, stmt) -> None:
        kind = type(stmt).__name__
        if kind == "AttrStmt" and str(stmt.attr_key) == "thread_extent":
            tag = str(stmt.node.thread_tag)
            self.dims[tag] = max(self.dims.get(tag, 1), int(stmt.value.value))
        if kind == "AllocBuffer" and str(stmt.buffer.scope()) == "shared.dyn":
            self.dynamic_shared += math.prod(int(s) for s in stmt.buffer.shape) * dtype_bytes(stmt.buffer.dtype)
        for child in self._children(stmt):
            self.extents(child)

    @staticmethod
    def _children(stmt):
        if type(stmt).__name__ == "SeqStmt":
            return list(stmt.seq)
        out = []
        for name in ("body", "then_case", "else_case"):
            child = getattr(stmt, name, None)
            if child is not None and type(child).__name__ not in ("NoneType",) and hasattr(child, "same_as"):
                out.append(child)
        return out

    def thread_values(self) -> dict[str, np.ndarray]:
        """threadIdx.x/y/z of the first warp's threads (x varies fastest)."""
        x, y = self.dims.get("threadIdx.x", 1), self.dims.get("threadIdx.y", 1)
        z = self.dims.get("threadIdx.z", 1)
        n = min(self.warp_size, x * y * z)
        ids = np.arange(n, dtype=np.int64)
        return {"threadIdx.x": ids % x, "threadIdx.y": (ids // x) % y, "threadIdx.z": ids // (x * y)}

    def _record(self, buf, indices, write: bool, env: dict, executions: float) -> None:
        scope = str(buf.scope())
        if not scope.startswith("shared") or len(indices) != 1:
            return
        n = len(next(iter(self.threads.values())))
        try:
            addrs = _addresses(indices[0], env, dtype_bytes(buf.dtype), n)
        except (UnknownValueError, TypeError, ValueError):
            self.skipped += 1
            return
        self.accesses.append(WarpAccess(str(buf.name), write, addrs, dtype_bytes(buf.dtype), executions))

    def walk(self, stmt, env: dict, executions: float) -> None:
        kind = type(stmt).__name__
        if kind == "SeqStmt":
            for child in stmt.seq:
                self.walk(child, env, executions)  # a Bind holds for the rest of its sequence
            return
        if kind == "AttrStmt" and str(stmt.attr_key) == "thread_extent":
            inner = dict(env)
            tag = str(stmt.node.thread_tag)
            inner[stmt.node.var] = self.threads.get(tag, 0)
            self.walk(stmt.body, inner, executions)
            return
        if kind in ("Bind", "LetStmt"):
            try:
                env[stmt.var] = warp_value(stmt.value, env)
            except (UnknownValueError, TypeError, ValueError):
                env.pop(stmt.var, None)
            if kind == "LetStmt":
                self.walk(stmt.body, env, executions)
            return
        if kind == "For":
            inner = dict(env)
            inner[stmt.loop_var] = int(stmt.min.value) if type(stmt.min).__name__ == "IntImm" else 0
            extent = int(stmt.extent.value) if type(stmt.extent).__name__ == "IntImm" else 1
            self.walk(stmt.body, inner, executions * extent)
            return
        if kind == "BufferStore":
            for load in _loads(stmt.value):
                buf = load.source if hasattr(load, "source") else load.buffer
                self._record(buf, load.indices, False, env, executions)
            self._record(stmt.buffer, stmt.indices, True, env, executions)
            return
        for child in self._children(stmt):
            self.walk(child, dict(env) if kind != "AttrStmt" else env, executions)

    def run(self, func) -> None:
        self.extents(func.body)
        self.threads = self.thread_values()
        self.walk(func.body, {}, 1.0)


def device_kernels(device: tvm.IRModule, warp_size: int = 32) -> dict[str, _Walker]:
    """Launch shape and first-warp shared accesses of each lowered device function, by kernel name."""
    out = {}
    for gv, func in device.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        name = str(func.attrs.get("global_symbol", gv.name_hint)) if func.attrs else gv.name_hint
        walker = _Walker(warp_size)
        walker.run(func)
        out[name] = walker
    return out


def gpu_code(mod: tvm.IRModule, machine: Machine, target: Target) -> GpuCode:
    """Compile a scheduled module for the GPU ``machine``: PTX, ptxas' resources and the TIR facts.

    Raises
    ------
    TunaError
        When nvcc is missing (the message says how to get it).
    AnalysisError
        When TVM, nvcc or ptxas fail on the candidate.
    """
    tool = nvcc.require_nvcc()
    tab = timing(machine)
    arch = nvcc.choose_arch(str(machine.target["arch"]), tab.fallback_arch, tool)
    device, source = lower_to_cuda(mod, target)
    compiled = nvcc.compile_cuda(source, arch, tool)
    walkers = device_kernels(device, machine.gpu.warp_size)
    kernels = []
    for kernel in ptx_parser.parse(compiled.ptx):
        walker = walkers.get(kernel.name)
        res = compiled.resources.get(kernel.name)
        if walker is None or res is None:
            raise AnalysisError(f"PTX kernel {kernel.name} has no lowered TIR function or no ptxas report")
        blocks = math.prod(v for k, v in walker.dims.items() if k.startswith("blockIdx"))
        threads = math.prod(v for k, v in walker.dims.items() if k.startswith("threadIdx"))
        kernels.append(
            CompiledKernel(kernel, res.registers, res.shared_bytes + walker.dynamic_shared, blocks, threads,
                           tuple(walker.accesses), res.spill_bytes)
        )
    return GpuCode(tuple(kernels), arch, compiled.nvcc_seconds)


def sample_candidates(mod: tvm.IRModule, target: Target, count: int, seed: int = 1,
                      max_tries: int | None = None) -> list:
    """Random valid schedules from MetaSchedule's design space for ``target``.

    As the evolutionary search draws its initial population: a design-space sketch with
    its sampling decisions drawn anew, then MetaSchedule's postprocessors (cooperative
    fetch, unrolling, GPU code verification); schedules a postprocessor rejects are
    dropped.

    Parameters
    ----------
    mod : IRModule
        The workload.
    target : Target
        A CUDA target.
    count : int
        Schedules wanted.
    seed : int
        First random seed; tries use ``seed``, ``seed + 1``, ...
    max_tries : int, optional
        Give up after this many draws (default ``200 * count``).

    Returns
    -------
    list of s_tir.Schedule
        At most ``count`` schedules.
    """
    from tvm import s_tir

    context = new_tune_context(mod=mod, target=target, space_generator="post-order-apply",
                               search_strategy="evolutionary", num_threads=1, rand_state=seed)
    generator = context.space_generator
    sketches = generator.generate_design_space(mod)
    out: list = []
    for n in range(max_tries or 200 * count):
        if len(out) >= count:
            break
        sketch = sketches[n % len(sketches)]
        sch = s_tir.Schedule(mod, seed=seed + n)
        s_tir.Trace(sketch.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if all(p.apply(sch) for p in generator.postprocs):
            out.append(sch)
    return out
