"""The TVM side of tuna: the only module that imports ``tvm``.

It turns TIR into :class:`tuna.ir.KernelIR`, and adapts tuna's analyses to MetaSchedule:
:class:`TunaCostModel` (a ``PyCostModel``), :class:`StaticRunner` (a ``PyRunner`` that
predicts instead of measuring), :class:`StaticBuilder` (a ``LocalBuilder`` that leaves the
scheduled TIR beside each artifact for the runner), and :func:`tune`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import linecache
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderResult, LocalBuilder, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerFuture, RunnerResult
from tvm.s_tir.meta_schedule.testing import te_workload

from .. import ir
from ..errors import AnalysisError, TunaError, WorkloadError
from ..estimate import WORST_SCORE, Estimate, analyze
from ..machine import Machine, resolve

logger = logging.getLogger("tuna")

#: Name of the file :class:`StaticBuilder` writes beside each artifact.
SIDECAR = "tuna-kernel.py"

#: Name of the file :class:`StaticBuilder` writes, instead of an artifact, for a candidate
#: whose prediction it was given.
PREDICTION = "tuna-prediction.json"

_INTRIN_LOCK = threading.Lock()


def _frames(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack()`` without its module lookups: each frame and its current line."""
    frame = sys._getframe(1)
    out = []
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(filename, lineno) if context > 0 else ""
        out.append(inspect.FrameInfo(frame, filename, lineno, frame.f_code.co_name,
                                     [line] if line else None, 0 if line else None))
        frame = frame.f_back
    return out


def new_tune_context(**kwargs: Any) -> ms.TuneContext:
    """``ms.TuneContext(**kwargs)``, with TVM's tensor intrinsics loaded the fast way first."""
    load_tensor_intrinsics()
    return ms.TuneContext(**kwargs)


def load_tensor_intrinsics() -> None:
    """Import TVM's tensor intrinsics (``tvm.s_tir.tensor_intrin``) in about 2 s rather than 14.

    MetaSchedule imports them in every ``TuneContext`` and in every build worker process.
    TVMScript's ``prim_func`` calls ``inspect.stack()`` for each function they define, and
    inside an import that call looks up the module of every ``<frozen importlib>`` frame
    by scanning ``sys.modules``: the import took 13-14 s per process on a 2-core machine.
    The parser reads only the frames and their current lines, so the import is done here
    with :func:`_frames` standing in for ``inspect.stack``: 1.8 s, and the same 112
    intrinsics register (the structural hashes of their descriptions and implementations
    compared equal). Called by :func:`new_tune_context`, by :class:`TunaCostModel` (before
    ``tune_tir`` makes its own TuneContext) and at the start of each builder worker; a no-op
    once the module is loaded.
    """
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    with _INTRIN_LOCK:
        saved, inspect.stack = inspect.stack, _frames
        try:
            importlib.import_module("tvm.s_tir.tensor_intrin")
        finally:
            inspect.stack = saved

# ---------------------------------------------------------------------------------------
# TIR -> KernelIR
# ---------------------------------------------------------------------------------------

_ARITH = {
    tirx.Add: "add",
    tirx.Sub: "add",
    tirx.Mul: "mul",
    tirx.Div: "div",
    tirx.FloorDiv: "div",
    tirx.Max: "add",
    tirx.Min: "add",
}
#: Elementary functions TVM's LLVM backend leaves to the C math library, with the library calls
#: each lane makes ("math" ops): checked on x86-64 and AArch64 with TVM 0.27 (a vectorized exp
#: becomes one expf call per lane; tanh is lowered to two exps; sigmoid to one).
_MATH_CALLS = {"exp": 1, "exp2": 1, "exp10": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1, "pow": 1,
               "sin": 1, "cos": 1, "tan": 1, "erf": 1, "sigmoid": 1, "tanh": 2}
#: Functions with a machine instruction ("special" ops).
_SPECIAL = ("sqrt", "rsqrt")


class _Affine:
    """A linear form over loop variables, plus the variables it depends on non-linearly.

    ``span`` bounds the non-linear part's values (``(0, 0)`` when there is none, None when
    unknown), so that floor division and modulo of sums that contain it can still resolve.
    """

    __slots__ = ("coeffs", "const", "opaque", "span")

    def __init__(self, coeffs=None, const=0, opaque=frozenset(), span=(0, 0)):
        self.coeffs: dict[str, int] = coeffs or {}
        self.const = const
        self.opaque: frozenset[str] = opaque
        self.span: tuple[int, int] | None = span if opaque else (0, 0)

    def vars(self) -> frozenset[str]:
        return frozenset(self.coeffs) | self.opaque

    def is_const(self) -> bool:
        return not self.coeffs and not self.opaque

    def plus(self, other: _Affine, sign: int = 1) -> _Affine:
        coeffs = dict(self.coeffs)
        for var, c in other.coeffs.items():
            coeffs[var] = coeffs.get(var, 0) + sign * c
        coeffs = {v: c for v, c in coeffs.items() if c}
        span = None
        if self.span is not None and other.span is not None:
            lo, hi = other.span if sign > 0 else (-other.span[1], -other.span[0])
            span = (self.span[0] + lo, self.span[1] + hi)
        return _Affine(coeffs, self.const + sign * other.const, self.opaque | other.opaque, span)

    def scaled(self, k: int) -> _Affine:
        span = None if self.span is None else tuple(sorted((self.span[0] * k, self.span[1] * k)))
        return _Affine({v: c * k for v, c in self.coeffs.items() if c * k}, self.const * k, self.opaque, span)

    def bounds(self, extents: dict[str, int]) -> tuple[int, int] | None:
        """Smallest and largest value over the loops' ranges (None if unknown)."""
        if self.span is None or any(v not in extents for v in self.coeffs):
            return None
        lo = self.const + self.span[0] + sum(min(0, k * (extents[v] - 1)) for v, k in self.coeffs.items())
        hi = self.const + self.span[1] + sum(max(0, k * (extents[v] - 1)) for v, k in self.coeffs.items())
        return lo, hi

    def index(self) -> ir.Index:
        opaque = tuple(sorted(self.opaque - set(self.coeffs))) + tuple(
            sorted(v for v in self.opaque if v in self.coeffs)
        )
        return ir.Index(tuple(sorted(self.coeffs.items())), int(self.const), opaque)


def _affine(expr, env: dict[Any, _Affine], extents: dict[str, int] | None = None) -> _Affine:
    """Decompose an index expression over the loop variables bound in ``env``.

    With the loops' ``extents``, a floor division or modulo by a constant stays affine
    where the ranges allow (``co // 64`` is 0 when ``co < 64``; ``(16 * a + b) // 16``
    is ``a`` when ``0 <= b < 16``), and bounds what stays non-linear (``f % 56 // 14``
    lies in 0..3) for the expressions around it.
    """
    if isinstance(expr, tvm.tirx.IntImm):
        return _Affine(const=int(expr.value))
    if isinstance(expr, tvm.tirx.Var):
        return env.get(expr, _Affine())
    if isinstance(expr, tvm.tirx.Cast):
        return _affine(expr.value, env, extents)
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        a, b = _affine(expr.a, env, extents), _affine(expr.b, env, extents)
        return a.plus(b, 1 if isinstance(expr, tirx.Add) else -1)
    if isinstance(expr, tirx.Mul):
        a, b = _affine(expr.a, env, extents), _affine(expr.b, env, extents)
        if b.is_const():
            return a.scaled(b.const)
        if a.is_const():
            return b.scaled(a.const)
        return _Affine(opaque=a.vars() | b.vars(), span=None)
    span = None
    if isinstance(expr, (tirx.FloorDiv, tirx.FloorMod)) and extents is not None:
        a, b = _affine(expr.a, env, extents), _affine(expr.b, env, extents)
        if b.is_const() and b.const > 0:
            c = b.const
            split = _divide(a, c, extents)
            if split is not None:
                return split[0] if isinstance(expr, tirx.FloorDiv) else split[1]
            whole = a.bounds(extents)
            if isinstance(expr, tirx.FloorMod):
                span = (0, c - 1)
            elif whole is not None:
                span = (whole[0] // c, whole[1] // c)
    names: set[str] = set()
    for node in _subexprs(expr):
        if isinstance(node, tvm.tirx.Var) and node in env:
            names.update(env[node].vars())
    return _Affine(opaque=frozenset(names), span=span)


def _divide(a: _Affine, c: int, extents: dict[str, int]) -> tuple[_Affine, _Affine] | None:
    """``(a // c, a % c)``, affine where possible, or None when nothing is known.

    The terms of ``a`` split into high ones, multiples of some ``g`` dividing ``c``, and
    low ones that stay within one block of ``g``. With ``g == c`` both results are affine;
    otherwise the modulo keeps the low terms exactly (``(32 a + b) % 256`` is ``b`` plus a
    multiple of 32 that depends on ``a`` alone), which is what vectorization cares about.
    """
    if any(v not in extents for v in a.coeffs) or a.span is None:
        return None
    small = [d for d in range(1, math.isqrt(c) + 1) if c % d == 0]
    for g in sorted({*small, *(c // d for d in small)}, reverse=True):
        high = {v: k for v, k in a.coeffs.items() if k % g == 0}
        low = _Affine({v: k for v, k in a.coeffs.items() if k % g}, a.const, a.opaque, a.span)
        lo, hi = low.bounds(extents)
        if lo // g != hi // g:
            continue
        q = lo // g
        rest = low.plus(_Affine(const=q * g), -1)  # within [0, g)
        top = _Affine(high, q * g)  # a multiple of g
        if g == c:
            return _Affine({v: k // c for v, k in high.items()}, q), rest
        if not high:
            return _Affine(const=q * g // c), rest.plus(_Affine(const=q * g % c))
        span = top.bounds(extents)
        names = frozenset(high)
        div = _Affine(opaque=names, span=None if span is None else (span[0] // c, span[1] // c))
        return div, rest.plus(_Affine(opaque=names, span=(0, c - g)))
    return None


_CHILD_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride")


def _subexprs(expr):
    """Yield ``expr`` and all its sub-expressions, buffer-load subscripts included."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        for name in _CHILD_FIELDS:
            child = getattr(e, name, None)
            if isinstance(child, tvm.ir.expr.Expr):
                stack.append(child)
        for name in ("args", "indices"):
            children = getattr(e, name, None)
            if children is not None and not isinstance(e, tvm.tirx.BufferStore):
                stack.extend(c for c in children if isinstance(c, tvm.ir.expr.Expr))


def _ty(expr) -> str:
    """The element type of an expression, as a string ("float32", "int32", ...)."""
    return str(getattr(expr, "ty", "") or getattr(expr, "dtype", ""))


def _dtype_bytes(dtype) -> int:
    return max(1, tvm.DataType(str(dtype)).bits * tvm.DataType(str(dtype)).lanes // 8)


def _count_ops(value) -> list[tuple[str, int]]:
    """Arithmetic operations of one stored value, with ``a + b * c`` on floats as an FMA."""
    counts: dict[str, int] = {}

    def add(kind: str, n: int = 1) -> None:
        counts[kind] = counts.get(kind, 0) + n

    def visit(e) -> None:
        if isinstance(e, tirx.Add) and "float" in _ty(e):
            if isinstance(e.b, tirx.Mul) or isinstance(e.a, tirx.Mul):
                mul, other = (e.b, e.a) if isinstance(e.b, tirx.Mul) else (e.a, e.b)
                add("fma")
                visit(mul.a), visit(mul.b), visit(other)
                return
        for cls, kind in _ARITH.items():
            if isinstance(e, cls):
                if "float" in _ty(e) or kind in ("div",):
                    add(kind)
                visit(e.a), visit(e.b)
                return
        if isinstance(e, tirx.Cast):
            add("cast")
            visit(e.value)
        elif isinstance(e, tirx.Select):
            add("cmp")
            for part in (e.condition, e.true_value, e.false_value):
                visit(part)
        elif isinstance(e, tvm.ir.Call):
            name = str(e.op.name) if hasattr(e.op, "name") else str(e.op)
            short = name.rsplit(".", 1)[-1]
            if short == "if_then_else":
                add("cmp")
            elif short in _MATH_CALLS:
                add("math", _MATH_CALLS[short])
            elif short in _SPECIAL:
                add("special")
            for arg in e.args:
                visit(arg)
        elif isinstance(e, (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
            add("cmp")
            visit(e.a), visit(e.b)
        elif isinstance(e, (tirx.And, tirx.Or)):
            visit(e.a), visit(e.b)
        elif isinstance(e, tirx.Not):
            visit(e.a)

    visit(value)
    return sorted(counts.items())


class _Extractor:
    """Walks a scheduled PrimFunc and builds the loop tree."""

    def __init__(self) -> None:
        self.allocations: list[ir.Allocation] = []
        self.names: dict[Any, str] = {}
        self.extents: dict[str, int] = {}
        self.loops: list[str] = []  # variables of the loops being visited, outermost first

    def _name(self, var) -> str:
        if var not in self.names:
            base = str(var.name)
            name, n = base, 1
            while name in self.names.values():
                n += 1
                name = f"{base}_{n}"
            self.names[var] = name
        return self.names[var]

    def _access(self, buf, indices, write: bool, env) -> ir.Access:
        shape = tuple(int(s) if isinstance(s, tvm.tirx.IntImm) else 1 for s in buf.shape)
        idx = []
        for i in indices:
            if isinstance(i, tirx.Ramp):  # already vectorized: base + lane * stride
                idx.append(_affine(i.base, env, self.extents).index())
            else:
                idx.append(_affine(i, env, self.extents).index())
        return ir.Access(
            buffer=str(buf.name),
            write=write,
            indices=tuple(idx),
            shape=shape,
            dtype_bytes=_dtype_bytes(buf.dtype),
            scope=str(buf.scope()),
        )

    def _statement(self, store, block_name: str, env) -> ir.Statement:
        accesses: list[ir.Access] = []

        for e in _subexprs(store.value):
            if isinstance(e, tvm.ir.TensorLoad):
                accesses.append(self._access(e.source, e.indices, False, env))
        accesses.append(self._access(store.buffer, store.indices, True, env))
        return ir.Statement(
            name=block_name,
            accesses=tuple(accesses),
            ops=tuple(_count_ops(store.value)),
            dtype_bytes=_dtype_bytes(_ty(store.value)),
        )

    def visit(self, stmt, env, block_name: str) -> list[ir.Node]:
        if isinstance(stmt, tirx.For):
            if not isinstance(stmt.extent, tvm.tirx.IntImm):
                raise AnalysisError(
                    f"loop {stmt.loop_var} has a symbolic extent {stmt.extent}; tuna needs static shapes"
                )
            name = self._name(stmt.loop_var)
            self.extents[name] = int(stmt.extent.value)
            inner = {**env, stmt.loop_var: _Affine({name: 1})}
            kind = {
                tirx.ForKind.SERIAL: ir.LoopKind.SERIAL,
                tirx.ForKind.PARALLEL: ir.LoopKind.PARALLEL,
                tirx.ForKind.VECTORIZED: ir.LoopKind.VECTORIZED,
                tirx.ForKind.UNROLLED: ir.LoopKind.UNROLLED,
            }.get(stmt.kind, ir.LoopKind.THREAD)
            thread = str(stmt.thread_binding.thread_tag) if stmt.thread_binding is not None else None
            if thread is None and kind == ir.LoopKind.THREAD:
                kind = ir.LoopKind.SERIAL
            step = stmt.annotations.get("pragma_auto_unroll_max_step", 0) if stmt.annotations else 0
            vanishes = int(stmt.extent.value) == 1 and kind != ir.LoopKind.THREAD  # as in codegen
            if not vanishes:
                self.loops.append(name)
            body = tuple(self.visit(stmt.body, inner, block_name))
            if vanishes:
                return list(body)
            self.loops.pop()
            return [ir.Loop(name, int(stmt.extent.value), kind, body, thread, int(step))]
        if isinstance(stmt, tirx.SeqStmt):
            return [n for s in stmt.seq for n in self.visit(s, env, block_name)]
        if isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            inner = dict(env)
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                inner[iv.var] = _affine(value, env, self.extents)
            for buf in block.alloc_buffers:
                elems = math.prod(int(s) for s in buf.shape if isinstance(s, tvm.tirx.IntImm))
                self.allocations.append(ir.Allocation(
                    str(buf.name), str(buf.scope()), elems, _dtype_bytes(buf.dtype),
                    self.loops[-1] if self.loops else None,
                ))
            out = []
            if block.init is not None:
                out.extend(self.visit(block.init, inner, str(block.name_hint) + "_init"))
            out.extend(self.visit(block.body, inner, str(block.name_hint)))
            return out
        if isinstance(stmt, tvm.tirx.BufferStore):
            return [self._statement(stmt, block_name, env)]
        if isinstance(stmt, tirx.IfThenElse):
            nodes = self.visit(stmt.then_case, env, block_name)
            if stmt.else_case is not None:
                nodes += self.visit(stmt.else_case, env, block_name)
            return nodes
        body = getattr(stmt, "body", None)
        if body is not None and isinstance(body, tirx.Stmt):
            return self.visit(body, env, block_name)
        return []


def kernel_from_func(func: tirx.PrimFunc, name: str = "main") -> ir.KernelIR:
    """Build the :class:`~tuna.ir.KernelIR` of a scheduled (not yet lowered) PrimFunc."""
    ext = _Extractor()
    body = tuple(ext.visit(func.body, {}, name))
    params = tuple(str(p.name) for p in func.params)
    return ir.KernelIR(name=name, body=body, allocations=tuple(ext.allocations), params=params)


def _plain(obj: Any) -> Any:
    """TVM containers and immediates as plain JSON values (traces, target dicts)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, tvm.tirx.IntImm):
        return int(obj.value)
    if isinstance(obj, tvm.tirx.FloatImm):
        return float(obj.value)
    if hasattr(obj, "items"):
        return {str(k): _plain(v) for k, v in obj.items()}
    if hasattr(obj, "__len__") and hasattr(obj, "__getitem__"):
        return [_plain(x) for x in obj]
    return str(obj)


def _main_func(mod: tvm.IRModule) -> tuple[str, tirx.PrimFunc]:
    funcs = [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    if not funcs:
        raise AnalysisError("the module holds no PrimFunc")
    for name, func in funcs:
        if name == "main":
            return name, func
    return funcs[0]


def _compact(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its buffers allocated and shrunk as TVM's lowering will do it.

    MetaSchedule's schedules allocate every intermediate buffer (a cache-write stage, a
    padded input) at its full shape at the root; lowering moves each allocation into the
    innermost loop that holds all its uses and shrinks it to the region one iteration of
    that loop touches. The cache model must see those regions: a write stage that holds one
    8 x 16 tile is 512 bytes reused by every iteration, not 1.6 MB of new lines. Functions
    the passes reject (blocks that still carry an init statement: not scheduled by
    MetaSchedule, which separates them) are analysed as they are.
    """
    passes = tvm.transform.Sequential([
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.StmtSimplify(),  # the region offsets subtracted from subscripts cancel
    ])
    try:
        return passes(tvm.IRModule({"main": func}))["main"]
    except tvm.error.InternalError:
        return func


def kernel_from_module(mod: tvm.IRModule) -> ir.KernelIR:
    """The :class:`~tuna.ir.KernelIR` of the main PrimFunc of a scheduled IRModule.

    Its buffers are placed and sized as TVM's lowering will leave them (see :func:`_compact`).
    """
    name, func = _main_func(mod)
    return kernel_from_func(_compact(func), name)


# ---------------------------------------------------------------------------------------
# Workloads and targets
# ---------------------------------------------------------------------------------------


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


def load_workload(spec: str | os.PathLike) -> tvm.IRModule:
    """An IRModule from a built-in workload (``"GMM:1"``) or a TVMScript file.

    Raises
    ------
    WorkloadError
        For an unknown workload or index, or a file that does not parse.
    """
    text = str(spec)
    path = Path(text)
    if path.suffix in (".py", ".tvmscript", ".tir") or path.exists():
        if not path.exists():
            raise WorkloadError(f"workload file {text} does not exist")
        return parse_tvmscript(path.read_text(), f"workload file {text}")
    name, _, index = text.replace("-", ":").partition(":")
    configs = workload_names()
    if name.upper() not in configs:
        raise WorkloadError(
            f"unknown workload {text!r}: give NAME:INDEX with NAME one of {', '.join(configs)}, or a TVMScript file"
        )
    name = name.upper()
    try:
        idx = int(index or 0)
    except ValueError:
        raise WorkloadError(f"workload index {index!r} is not an integer") from None
    if not 0 <= idx < configs[name]:
        raise WorkloadError(f"workload {name} has configurations 0..{configs[name] - 1}, not {idx}")
    return tvm.IRModule({"main": te_workload.create_te_workload(name, idx)})


def tvm_target(machine: Machine) -> tvm.target.Target:
    """The ``tvm.target.Target`` to compile candidates for ``machine``."""
    spec = {k: list(v) if isinstance(v, tuple) else v for k, v in machine.target.items()}
    try:
        return tvm.target.Target(spec)
    except Exception as err:
        raise TunaError(f"TVM rejects the target {spec}: {err}") from None


def _machine(target: Any, machine: str | Machine | None) -> Machine:
    if isinstance(target, Machine):
        return target
    return resolve(target, machine)


def estimate_module(mod: tvm.IRModule, machine: Machine, tier: str = "ir") -> Estimate:
    """Analyse one scheduled IRModule with the ``"ir"`` or ``"full"`` tier.

    Raises
    ------
    AnalysisError
        When the candidate cannot be lowered, compiled or analysed.
    """
    try:
        if tier == "full" and machine.kind == "gpu":
            from ..gpu import full_tier as gpu_full_tier
            from . import cuda

            code = cuda.gpu_code(mod, machine, tvm_target(machine))
            return gpu_full_tier.estimate(kernel_from_module(mod), code, machine)
        if tier == "full":
            from ..cpu import full_tier

            return full_tier.estimate(kernel_with_code(mod, machine), machine)
        if tier != "ir":
            raise TunaError(f"unknown tier {tier!r}; tiers: ir, full")
        return analyze(kernel_from_module(mod), machine)
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"{type(err).__name__}: {err}") from err


def compile_objects(mod: tvm.IRModule, machine: Machine) -> list[bytes]:
    """Compile a scheduled module for ``machine`` with TVM's LLVM backend; the ELF objects."""
    try:
        executable = tvm.compile(mod, tvm_target(machine))
        with tempfile.TemporaryDirectory(prefix="tuna-") as tmp:
            path = os.path.join(tmp, "kernel.o")
            executable.mod.write_to_file(path)
            return [Path(path).read_bytes()]
    except TunaError:
        raise
    except Exception as err:
        raise AnalysisError(f"the candidate does not compile: {type(err).__name__}: {err}") from err


def kernel_with_code(mod: tvm.IRModule, machine: Machine) -> ir.KernelIR:
    """The kernel IR of ``mod`` with its generated machine code attached (full tier input)."""
    from ..cpu import disassembly  # Capstone is only needed by the full tier

    kernel = kernel_from_module(mod)
    if machine.kind != "cpu":
        raise AnalysisError(f"the full tier analyses CPU code; {machine.name} is a {machine.kind}")
    return dataclasses.replace(kernel, code=disassembly.kernel_code(compile_objects(mod, machine)))


# ---------------------------------------------------------------------------------------
# MetaSchedule adapters
# ---------------------------------------------------------------------------------------


@derived_object
class TunaCostModel(PyCostModel):
    """tuna's static cost model for MetaSchedule.

    Parameters
    ----------
    target : str, dict, tvm.target.Target or Machine
        What to model: a preset name, a TVM target (dict or object) or a Machine.
    machine : str, optional
        The preset to model when ``target`` names a CPU or GPU tuna has no file for.

    Notes
    -----
    ``predict`` returns minus the log of the predicted seconds (higher is better), one
    float64 per candidate. Results are cached by the structural hash of the scheduled
    module. A candidate that fails to lower or analyse gets the worst score and a logged
    warning; nothing is raised into MetaSchedule. ``update`` keeps measured results for
    later calibration; they are never required.
    """

    def __init__(self, target: Any, machine: str | None = None) -> None:
        super().__init__()
        self.machine = _machine(target, machine)
        load_tensor_intrinsics()  # before tune_tir's TuneContext needs them
        self.records: list[dict[str, Any]] = []
        self._cache: dict[int, float] = {}
        self._lock = threading.Lock()
        self.predicted = 0
        self.failed = 0
        self.seconds = 0.0

    def score_module(self, mod: tvm.IRModule) -> float:
        """Score one scheduled module (cached; worst score on failure)."""
        key = tvm_ffi.structural_hash(mod)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            score = estimate_module(mod, self.machine).score
        except TunaError as err:
            self.failed += 1
            logger.warning("tuna: candidate could not be analysed, scoring it worst: %s", err)
            score = WORST_SCORE
        with self._lock:
            self._cache[key] = score
        return score

    def predict(self, context, candidates) -> np.ndarray:
        start = time.perf_counter()
        scores = np.array([self.score_module(c.sch.mod) for c in candidates], dtype="float64")
        self.predicted += len(candidates)
        self.seconds += time.perf_counter() - start
        return scores

    def update(self, context, candidates, results) -> None:
        for cand, res in zip(candidates, results):
            secs = [float(s) for s in res.run_secs] if res.run_secs is not None else None
            try:
                trace = _plain(cand.sch.trace.as_json())
            except Exception as err:  # never raise into MetaSchedule
                logger.warning("tuna: could not record a trace: %s", err)
                continue
            self.records.append({"trace": trace, "run_secs": secs, "error": res.error_msg})

    def save(self, path: str) -> None:
        state = {
            "format": "tuna-cost-model/1",
            "machine": self.machine.name,
            "target": dict(self.machine.target),
            "cores": self.machine.cores,
            "records": self.records,
        }
        Path(path).write_text(json.dumps(state, default=list))

    def load(self, path: str) -> None:
        try:
            state = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise TunaError(f"cannot load a tuna cost model from {path}: {err}") from None
        if state.get("format") != "tuna-cost-model/1":
            raise TunaError(f"{path} is not a saved tuna cost model")
        self.machine = resolve(state["target"], state["machine"])
        self.records = list(state.get("records", []))
        self._cache.clear()


@derived_object
class _Ready(PyRunnerFuture):
    """A runner future that is done from the start."""

    def __init__(self, result: RunnerResult) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return self._result


@derived_object
class StaticRunner(PyRunner):
    """A MetaSchedule runner that predicts each candidate's run time and executes nothing.

    It reads the scheduled TIR that :class:`StaticBuilder` leaves beside each artifact.
    With MetaSchedule's plain ``LocalBuilder`` there is no such file; the runner then
    analyses the machine code in the artifact instead (CPU targets).

    Parameters
    ----------
    target : str, dict, tvm.target.Target or Machine
        What to model, as for :class:`TunaCostModel`.
    machine : str, optional
        The preset to model when ``target`` names a CPU or GPU tuna has no file for.
    """

    def __init__(self, target: Any, machine: str | None = None) -> None:
        super().__init__()
        self.machine = _machine(target, machine)
        self.ran = 0

    def predict_artifact(self, artifact_path: str) -> float:
        """Predicted seconds of the candidate built into ``artifact_path``.

        A candidate :class:`StaticBuilder` was given the prediction of gets that. CPU
        candidates get the full tier: the TIR beside the artifact analysed jointly
        with the object code inside it (no second compilation). GPU candidates get the
        GPU full tier on that TIR (CUDA C to PTX with nvcc), or the IR tier, with a
        warning, where no nvcc is installed.
        """
        from ..cpu import objcode

        if Path(artifact_path).name == PREDICTION:
            return float(json.loads(Path(artifact_path).read_text())["seconds"])
        sidecar = Path(artifact_path).parent / SIDECAR
        if not sidecar.exists() and self.machine.kind == "gpu":
            raise AnalysisError(
                "a CUDA artifact holds no launch shapes tuna can read: build with tuna.StaticBuilder(), "
                "which leaves the scheduled TIR beside each artifact"
            )
        if not sidecar.exists():
            return objcode.estimate_artifact(artifact_path, self.machine).seconds
        mod = parse_tvmscript(sidecar.read_text(), f"the scheduled TIR {sidecar}")
        if self.machine.kind != "cpu":
            tier = runner_tier(self.machine)
            if tier == "ir" and not getattr(self, "_warned_nvcc", False):
                logger.warning("tuna: no nvcc, so StaticRunner predicts GPU candidates with the IR tier")
                self._warned_nvcc = True
            return estimate_module(mod, self.machine, tier).seconds
        from ..cpu import disassembly, full_tier

        code = disassembly.kernel_code(objcode.artifact_objects(artifact_path))
        return full_tier.estimate(dataclasses.replace(kernel_from_module(mod), code=code), self.machine).seconds

    def run(self, runner_inputs) -> list[RunnerFuture]:
        futures = []
        for inp in runner_inputs:
            try:
                result = RunnerResult([self.predict_artifact(str(inp.artifact_path))], None)
            except Exception as err:
                logger.warning("tuna: could not predict %s: %s", inp.artifact_path, err)
                result = RunnerResult(None, f"tuna StaticRunner: {type(err).__name__}: {err}")
            futures.append(_Ready(result))
            self.ran += 1
        return futures


_BUILT: dict[int, str] = {}


def _tuna_build(mod: tvm.IRModule, target, params):
    """MetaSchedule build function that remembers the scheduled TIR for the export step."""
    _BUILT[os.getpid()] = mod.script()
    return default_build(mod, target, params)


def _tuna_export(rt_mod) -> str:
    """Export as MetaSchedule does, then write the scheduled TIR beside the artifact."""
    path = default_export(rt_mod)
    script = _BUILT.pop(os.getpid(), None)
    if script is not None:
        (Path(path).parent / SIDECAR).write_text(script)
    return path


@derived_object
class StaticBuilder(PyBuilder):
    """MetaSchedule's ``LocalBuilder`` that also leaves each candidate's scheduled TIR for :class:`StaticRunner`.

    Parameters
    ----------
    max_workers : int, optional
        Build processes (LocalBuilder's default: one per core).
    timeout_sec : float
        Seconds one build may take.
    known : mapping of int to float, optional
        Predicted seconds by structural hash of the scheduled IRModule, for candidates
        already analysed with the runner's tier (tuna's ES re-ranks its picks with the
        full tier, which compiles them): such a candidate is not compiled again; its
        artifact is a file holding the prediction, which :class:`StaticRunner` returns.
        Read at each build, so the caller may fill it as tuning goes.
    """

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 60.0,
                 known: Mapping[int, float] | None = None) -> None:
        super().__init__()
        self.local = LocalBuilder(max_workers=max_workers, timeout_sec=timeout_sec, f_build=_tuna_build,
                                  f_export=_tuna_export, initializer=load_tensor_intrinsics)
        self.known = known if known is not None else {}
        self.reused = 0

    def build(self, build_inputs) -> list[BuilderResult]:
        results: list[BuilderResult | None] = [None] * len(build_inputs)
        todo = []
        for i, inp in enumerate(build_inputs):
            seconds = self.known.get(int(tvm_ffi.structural_hash(inp.mod))) if self.known else None
            if seconds is None:
                todo.append(i)
                continue
            # MetaSchedule removes the artifact's directory once the runner is done with it.
            path = Path(tempfile.mkdtemp(prefix="tuna-known-")) / PREDICTION
            path.write_text(json.dumps({"seconds": float(seconds)}))
            results[i] = BuilderResult(str(path), None)
            self.reused += 1
        if todo:
            for i, res in zip(todo, self.local.build([build_inputs[i] for i in todo])):
                results[i] = res
        return results


@dataclass
class TuneResult:
    """What :func:`tune` returns.

    Attributes
    ----------
    database : ms.Database
        All tuning records (run times are tuna's predictions).
    schedule : s_tir.Schedule
        The chosen schedule.
    machine : Machine
        What was modelled.
    predicted_seconds : float
        tuna's predicted run time of the chosen schedule (the tier the runner used: full on CPUs).
    estimate : Estimate
        The chosen schedule's feature breakdown.
    trials : int
        Candidates built and predicted.
    tune_seconds : float
        Wall-clock time of the tuning run.
    cost_model : TunaCostModel
        The cost model, with its counters.
    """

    database: Any
    schedule: Any
    machine: Machine
    predicted_seconds: float
    estimate: Estimate
    trials: int
    tune_seconds: float
    cost_model: Any


def tune(
    workload: str | tvm.IRModule | tirx.PrimFunc,
    target: Any,
    work_dir: str | os.PathLike,
    max_trials: int = 64,
    *,
    machine: str | None = None,
    num_trials_per_iter: int = 32,
    population_size: int = 256,
    seed: int | None = 0,
    num_tuning_cores: int | str = "physical",
    progress: Callable[[str], None] | None = None,
    search: str = "es",
    workers: int | None = None,
    cluster: str | None = None,
) -> TuneResult:
    """Tune one TIR workload offline for ``target`` with tuna's cost model and runner.

    Parameters
    ----------
    workload : str, IRModule or PrimFunc
        A built-in workload (``"GMM:1"``), a TVMScript file, or the TIR itself.
    target : str, dict, tvm.target.Target
        Preset name or TVM target.
    work_dir : path
        MetaSchedule's work directory (logs and database).
    max_trials : int
        Candidates to build and predict in all.
    progress : callable, optional
        Called with a line of text after each batch of candidates.
    search : str
        ``"es"`` (the default): tuna's evolution strategies
        (:class:`tuna.integration.search.ESSearch`), scoring with the IR tier in
        ``workers`` processes or on ``cluster``, with the same cost-model budget per round
        (``5 * population_size`` candidates), the best re-ranked by the full tier; its state
        is kept in ``work_dir`` so that a run started again goes on where it stopped.
        ``"evolutionary"``: MetaSchedule's EvolutionarySearch driven by tuna's cost model.
    workers : int, optional
        Worker processes for ``search="es"`` (1: in this process; default: one per physical core).
    cluster : str, optional
        Dask scheduler address or ``local:N`` for ``search="es"``.

    Returns
    -------
    TuneResult
    """
    if search not in ("evolutionary", "es"):
        raise TunaError(f"unknown search {search!r}; choose es or evolutionary")
    mach = _machine(target, machine)
    if isinstance(workload, tirx.PrimFunc):
        mod = tvm.IRModule({"main": workload})
    elif isinstance(workload, tvm.IRModule):
        mod = workload
    else:
        mod = load_workload(workload)
    tgt = tvm_target(mach)
    cost_model = TunaCostModel(mach)
    runner = StaticRunner(mach)
    # The ES's re-ranking compiles and predicts its picks with the runner's tier already.
    known: dict[int, float] = {}
    os.makedirs(work_dir, exist_ok=True)
    callbacks = ms.measure_callback.MeasureCallback.create("default")
    if progress is not None:
        callbacks = [*callbacks, _Progress(progress, max_trials, cost_model)]
    if search == "es":
        from ..search.workers import check_cluster
        from .search import es_strategy

        if cluster:
            check_cluster(cluster)
        strategy = es_strategy(mach, work_dir, population_size, seed, workers, cluster, progress, known)
    else:
        strategy = ms.search_strategy.EvolutionarySearch(population_size=population_size)
    start = time.perf_counter()
    database = ms.tune_tir(
        mod,
        tgt,
        str(work_dir),
        max_trials_global=max_trials,
        num_trials_per_iter=num_trials_per_iter,
        builder=StaticBuilder(known=known),
        runner=runner,
        cost_model=cost_model,
        strategy=strategy,
        measure_callbacks=callbacks,
        num_tuning_cores=num_tuning_cores,
        seed=seed,
    )
    elapsed = time.perf_counter() - start
    sch = ms.tir_integration.compile_tir(database, mod, tgt)
    if sch is None:
        raise TunaError("tuning produced no valid schedule: every candidate failed to build or analyse")
    # The tier the runner predicted the candidates with, so the report agrees with the database.
    est = estimate_module(sch.mod, mach, runner_tier(mach))
    return TuneResult(database, sch, mach, est.seconds, est, runner.ran, elapsed, cost_model)


def runner_tier(machine: Machine) -> str:
    """The tier :class:`StaticRunner` predicts with: ``"full"``, or ``"ir"`` on a GPU without nvcc."""
    from ..gpu import nvcc

    return "full" if machine.kind == "cpu" or nvcc.find_nvcc() is not None else "ir"


@derived_object
class _Progress(ms.measure_callback.PyMeasureCallback):
    """Reports tuning progress after each batch of candidates."""

    def __init__(self, report: Callable[[str], None], total: int, model: TunaCostModel) -> None:
        super().__init__()
        self.report, self.total, self.model = report, total, model
        self.done, self.best = 0, math.inf
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.done += len(runner_results)
        for res in runner_results:
            if res.run_secs:
                self.best = min(self.best, float(res.run_secs[0]))
        rate = self.model.predicted / max(self.model.seconds, 1e-9)
        # tuna's ES scores in its own workers and reports that itself; the cost model is idle.
        model = f"cost model {self.model.predicted} scored ({rate:,.0f}/s) | " if self.model.predicted else ""
        self.report(
            f"  {self.done:>5}/{self.total} candidates built and predicted | best predicted "
            f"{self.best * 1e6:10.1f} us | {model}{time.perf_counter() - self.start:6.1f} s"
        )


def apply_trace(mod: tvm.IRModule, trace_json: Any) -> s_tir.Schedule:
    """The schedule a MetaSchedule trace (JSON) makes of ``mod``; AnalysisError if it does not apply."""
    try:
        sch = s_tir.Schedule(mod)
        s_tir.Trace.apply_json_to_schedule(trace_json, sch)
    except Exception as err:
        raise AnalysisError(f"the trace does not apply to the workload: {err}") from err
    return sch


def estimate_trace(mod: tvm.IRModule, trace_json: Any, machine: Machine, tier: str = "ir") -> Estimate:
    """Apply a MetaSchedule trace (JSON) to ``mod`` and analyse the result with ``tier``."""
    return estimate_module(apply_trace(mod, trace_json).mod, machine, tier)


# ---------------------------------------------------------------------------------------
# --- benchmark scorers ---
# Scorers for tuna.bench.evaluate: (pool, train_idx, test_idx) -> (scores, seconds/candidate).
# ``pool`` is a tuna.bench.Pool (not imported here, to keep this module's imports light).
# ---------------------------------------------------------------------------------------

_POOL_MODULES: dict[str, tvm.IRModule] = {}


def pool_module(pool: Any) -> tvm.IRModule:
    """A pool's unscheduled workload as an IRModule, parsed once per distinct TVMScript text.

    Raises
    ------
    WorkloadError
        When the pool's ``mod`` does not parse or holds no PrimFunc.
    """
    mod = _POOL_MODULES.get(pool.mod)
    if mod is None:
        mod = parse_tvmscript(pool.mod, f"pool {pool.source}: mod")
        if len(_POOL_MODULES) >= 16:
            _POOL_MODULES.pop(next(iter(_POOL_MODULES)))
        _POOL_MODULES[pool.mod] = mod
    return mod


def _pool_candidate(mod: tvm.IRModule, trace_json: Any) -> ms.MeasureCandidate | None:
    """The MeasureCandidate of one pool trace, or None when the trace does not apply."""
    try:
        sch = apply_trace(mod, trace_json)
        return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
    except Exception as err:  # a trace that does not apply is the pool's problem: skip it
        logger.debug("tuna bench: a trace does not apply: %s", err)
        return None


def xgb_scores(
    pool: Any, train_idx: np.ndarray, test_idx: np.ndarray, seed: int = 0, num_threads: int | None = None
) -> tuple[np.ndarray, float]:
    """MetaSchedule's own XGBModel, trained on the measured train candidates, as a scorer.

    Parameters
    ----------
    pool : tuna.bench.Pool
        The measured pool.
    train_idx, test_idx : ndarray
        Candidates to train on (their ``secs_a``) and to score.
    seed : int
        XGBoost's seed.
    num_threads : int, optional
        XGBoost threads (MetaSchedule's default: the physical cores).

    Returns
    -------
    scores : ndarray
        XGBModel's predictions for ``test_idx`` (higher is better); the worst score for a
        candidate whose trace does not apply.
    seconds_per_candidate : float
        Applying the trace, extracting features and predicting, per test candidate;
        training is left out.

    Raises
    ------
    TunaError
        When no train candidate could be used.
    """
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    mod = pool_module(pool)
    context = new_tune_context(mod=mod, target=tvm.target.Target(dict(pool.target)))
    model = XGBModel(
        config=XGBConfig(seed=seed),
        num_warmup_samples=0,  # the default (100) predicts at random below 100 samples
        verbose_eval=0,
        adaptive_training=False,
        num_tuning_cores=num_threads,
    )
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level = ms_logger.level
    ms_logger.setLevel(logging.WARNING)
    try:
        with xgb.config_context(verbosity=0):
            train = [(_pool_candidate(mod, pool.traces[i]), float(pool.secs_a[i])) for i in train_idx]
            train = [(c, s) for c, s in train if c is not None]
            if not train:
                raise TunaError(f"pool {pool.name}: no train candidate's trace applies; XGBModel cannot train")
            model.update(
                context,
                [c for c, _ in train],
                [RunnerResult(run_secs=[s], error_msg=None) for _, s in train],
            )
            start = time.perf_counter()
            cands = [_pool_candidate(mod, pool.traces[i]) for i in test_idx]
            scores = np.full(len(test_idx), WORST_SCORE, dtype="float64")
            ok = [j for j, c in enumerate(cands) if c is not None]
            if ok:
                scores[ok] = model.predict(context, [cands[j] for j in ok])
            elapsed = time.perf_counter() - start
    finally:
        ms_logger.setLevel(level)
    return scores, elapsed / max(len(test_idx), 1)


def pool_features(
    pool: Any, machine: Machine, tier: str, progress: Callable[[int, int], None] | None = None
) -> tuple[list[dict[str, float] | None], float]:
    """tuna's features of every candidate of a pool, with one tier.

    Parameters
    ----------
    pool : tuna.bench.Pool
        The measured pool (its measurements are not looked at).
    machine : Machine
        What to model.
    tier : str
        ``"ir"`` or ``"full"``.
    progress : callable, optional
        Called as ``progress(done, total)`` after each candidate.

    Returns
    -------
    features : list
        Per candidate, the estimate's features, or None when it cannot be analysed.
    seconds_per_candidate : float
        Applying the trace and analysing (compiling too, for the full tier), per candidate.

    Raises
    ------
    AnalysisError
        When not one candidate can be analysed (e.g. a CPU pool with a GPU preset).
    """
    mod = pool_module(pool)
    out: list[dict[str, float] | None] = []
    failed = 0
    first_error = None
    start = time.perf_counter()
    for i, trace in enumerate(pool.traces):
        try:
            out.append(dict(estimate_trace(mod, trace, machine, tier).features))
        except TunaError as err:
            failed += 1
            first_error = first_error or err
            out.append(None)
            logger.debug("tuna bench: %s candidate %d: %s", pool.name, i, err)
        if progress is not None:
            progress(i + 1, len(pool.traces))
    if out and failed == len(out):
        raise AnalysisError(f"{pool.name}: no candidate could be analysed with the {tier} tier "
                            f"for {machine.name}; the first error: {first_error}")
    if failed:
        logger.warning("tuna: %s: %d of %d candidates not analysable (%s tier)", pool.name, failed, len(out), tier)
    return out, (time.perf_counter() - start) / max(len(out), 1)
