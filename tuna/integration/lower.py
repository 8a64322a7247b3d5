"""TIR -> :class:`tuna.ir.KernelIR`: the loop tree every analysis consumes.

- the affine algebra of subscripts (:class:`_Affine`, :func:`_affine`, :func:`_divide`):
  each index split into a linear form over the loop variables and the variables it depends
  on non-linearly, with floor division and modulo resolved where the loops' ranges allow;
- the extractor (:class:`_Extractor`): loops, statements with their accesses and
  arithmetic, allocations; an access's dimensions merge where TVM's flattening makes their
  joint offset linear (:meth:`_Extractor._flattened`);
- compaction (:func:`_compact`): buffers placed and sized as TVM's lowering will leave them;
- :func:`kernel_from_module` / :func:`kernel_from_func`, the entry points.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import tvm
import tvm.sym
from tvm import s_tir, tirx

from .. import ir
from ..errors import AnalysisError
from .warp import UnknownValueError, warp_value

#: Threads of an NVIDIA warp: the threads whose addresses :attr:`tuna.ir.Access.warp` holds.
WARP_SIZE = 32

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
    ``runs`` says, per variable of the non-linear part, how it moves with that variable
    alone, counted from 0 with the other variables at 0: ``(run, step)``, the part holding
    its value over runs of at least ``run`` consecutive values and changing by ``step``
    between runs (0: unknown). Absent: ``(1, 0)``, which assumes nothing. A fused loop's
    ``f // 49`` is ``(49, 1)``, ``f % 8 * 32`` is ``(1, 32)``, ``f % 112 // 8`` is ``(8, 1)``.
    (A modulo whose period the later divisor does not divide, ``f % 100 // 8``, shortens the
    run after it wraps; that is not tracked.)
    """

    __slots__ = ("coeffs", "const", "opaque", "runs", "span")

    def __init__(self, coeffs=None, const=0, opaque=frozenset(), span=(0, 0), runs=None):
        self.coeffs: dict[str, int] = coeffs or {}
        self.const = const
        self.opaque: frozenset[str] = opaque
        self.span: tuple[int, int] | None = span if opaque else (0, 0)
        self.runs: dict[str, tuple[int, int]] = {v: r for v, r in (runs or {}).items() if v in opaque}

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
        # A variable in both non-linear parts keeps the shorter run; how the sum steps is unknown.
        runs = {v: (min(self.runs.get(v, (1, 0))[0], other.runs.get(v, (1, 0))[0]), 0)
                for v in self.opaque & other.opaque}
        runs |= {v: self.runs[v] for v in self.runs.keys() - other.opaque}
        runs |= {v: (r, sign * s) for v, (r, s) in other.runs.items() if v not in self.opaque}
        return _Affine(coeffs, self.const + sign * other.const, self.opaque | other.opaque, span, runs)

    def scaled(self, k: int) -> _Affine:
        span = None if self.span is None else tuple(sorted((self.span[0] * k, self.span[1] * k)))
        runs = {v: (r, s * k) for v, (r, s) in self.runs.items()}
        return _Affine({v: c * k for v, c in self.coeffs.items() if c * k}, self.const * k, self.opaque, span, runs)

    def bounds(self, extents: dict[str, int]) -> tuple[int, int] | None:
        """Smallest and largest value over the loops' ranges (None if unknown)."""
        if self.span is None or any(v not in extents for v in self.coeffs):
            return None
        lo = self.const + self.span[0] + sum(min(0, k * (extents[v] - 1)) for v, k in self.coeffs.items())
        hi = self.const + self.span[1] + sum(max(0, k * (extents[v] - 1)) for v, k in self.coeffs.items())
        return lo, hi

    def moves(self) -> dict[str, tuple[int, int]]:
        """``(run, step)`` of every variable: a coefficient ``k`` moves the value by ``k`` each
        value (``(1, k)``); the non-linear part moves as its ``runs`` say."""
        return {v: (1, k) for v, k in self.coeffs.items()} | self.runs

    def divided_runs(self, c: int, offset: int) -> dict[str, tuple[int, int]]:
        """``runs`` of ``self // c``, where ``self`` is ``offset`` with every variable at 0.

        A variable that moves the dividend by ``step`` per run (a coefficient is a step
        every value) leaves the quotient unchanged for ``c // step`` of its runs, fewer in
        the first when ``offset`` is not a multiple of ``c``; the quotient then steps by 1.
        """
        out = {}
        moves = self.moves()
        for v in self.vars():
            run, step = moves.get(v, (1, 0))
            if step <= 0 or step > c or (v in self.coeffs and v in self.opaque):
                out[v] = (1, 0)
                continue
            first = -(-(c - offset % c) // step)
            out[v] = (max(1, run * min(first, c // step)), 1 if c % step == 0 else 0)
        return out

    def index(self) -> ir.Index:
        opaque = tuple(sorted(self.opaque - set(self.coeffs))) + tuple(
            sorted(v for v in self.opaque if v in self.coeffs)
        )
        runs = tuple(self.runs.get(v, (1, 0))[0] for v in opaque)
        return ir.Index(tuple(sorted(self.coeffs.items())), int(self.const), opaque,
                        runs if any(r > 1 for r in runs) else ())


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
    span, runs = None, None
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
                runs = a.moves()
            else:
                if whole is not None:
                    span = (whole[0] // c, whole[1] // c)
                runs = a.divided_runs(c, a.const + (a.span[0] if a.span else 0))
    names: set[str] = set()
    for node in _subexprs(expr):
        if isinstance(node, tvm.tirx.Var) and node in env:
            names.update(env[node].vars())
    return _Affine(opaque=frozenset(names), span=span, runs=runs)


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
        div = _Affine(opaque=names, span=None if span is None else (span[0] // c, span[1] // c),
                      runs=top.divided_runs(c, q * g))
        return div, rest.plus(_Affine(opaque=names, span=(0, c - g), runs=top.moves()))
    return None


_CHILD_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride")


@functools.cache
def _fields_of(kind: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The fields of :data:`_CHILD_FIELDS` and the list fields that nodes of type ``kind`` have
    (once per type: asking a node for a field it lacks raises inside TVM's FFI, which made
    most of the walk's time)."""
    lists = () if issubclass(kind, tvm.tirx.BufferStore) else ("args", "indices")
    return tuple(n for n in _CHILD_FIELDS if hasattr(kind, n)), tuple(n for n in lists if hasattr(kind, n))


def _subexprs(expr):
    """Yield ``expr`` and all its sub-expressions, buffer-load subscripts included."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        single, lists = _fields_of(type(e))
        for name in single:
            child = getattr(e, name)
            if isinstance(child, tvm.ir.expr.Expr):
                stack.append(child)
        for name in lists:
            children = getattr(e, name)
            if children is not None:  # (a slice reads an FFI array in one pass, not item by item)
                stack.extend(c for c in children[:] if isinstance(c, tvm.ir.expr.Expr))


def _ty(expr) -> str:
    """The element type of an expression, as a string ("float32", "int32", ...)."""
    return str(getattr(expr, "ty", "") or getattr(expr, "dtype", ""))


def dtype_bytes(dtype) -> int:
    """Bytes of one value of a TVM data type (vector lanes included)."""
    return _dtype_bytes(str(dtype))


@functools.cache
def _dtype_bytes(name: str) -> int:
    t = tvm.DataType(name)
    return max(1, t.bits * t.lanes // 8)


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
                if "float" in _ty(e):
                    add(kind)
                elif kind == "div":  # index arithmetic: an integer division, not an FP one
                    add("idiv")
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


def _is_if_then_else(e) -> bool:
    return isinstance(e, tvm.ir.Call) and str(getattr(e.op, "name", "")).endswith("if_then_else")


class _Extractor:
    """Walks a scheduled PrimFunc and builds the loop tree."""

    def __init__(self) -> None:
        self.allocations: list[ir.Allocation] = []
        self.buffers: dict[Any, tuple[str, tuple[int, ...], int, str]] = {}  # see _buffer
        self.names: dict[Any, str] = {}
        self.extents: dict[str, int] = {}
        self.loops: list[str] = []  # variables of the loops being visited, outermost first
        self.kinds: dict[str, ir.LoopKind] = {}
        self.ranges: dict[Any, tvm.ir.Range] = {}  # of every loop variable seen (see _offset)
        self.scalarized: set[str] = set()  # vectorized loops TVM's VectorizeLoop turns serial
        # The first warp: threadIdx.x of its threads inside a threadIdx.x loop (else None), and
        # the values of the variables for it (every other loop at its first iteration).
        self.lanes: np.ndarray | None = None
        self.warp_env: dict[Any, Any] = {}

    def _name(self, var) -> str:
        if var not in self.names:
            base = str(var.name)
            name, n = base, 1
            while name in self.names.values():
                n += 1
                name = f"{base}_{n}"
            self.names[var] = name
        return self.names[var]

    def _buffer(self, buf) -> tuple[str, tuple[int, ...], int, str]:
        """Name, shape, bytes per element and scope of a buffer, read from TVM once per buffer."""
        found = self.buffers.get(buf)
        if found is None:
            shape = tuple(int(s) if isinstance(s, tvm.tirx.IntImm) else 1 for s in buf.shape[:])
            found = self.buffers[buf] = (str(buf.name), shape, dtype_bytes(buf.dtype), str(buf.scope()))
        return found

    def _access(self, buf, indices, write: bool, env) -> ir.Access:
        name, shape, elem_bytes, scope = self._buffer(buf)
        indices = indices[:]
        bases = [i.base if isinstance(i, tirx.Ramp) else i for i in indices]  # Ramp: vectorized already
        forms = [_affine(i, env, self.extents) for i in bases]
        forms, merged_shape = self._flattened(bases, forms, shape, env)
        return ir.Access(
            buffer=name,
            write=write,
            indices=tuple(f.index() for f in forms),
            shape=merged_shape,
            dtype_bytes=elem_bytes,
            scope=scope,
            warp=self._warp_offsets(indices, shape),
        )

    def _flattened(self, exprs, forms: list[_Affine], shape: tuple[int, ...], env
                   ) -> tuple[list[_Affine], tuple[int, ...]]:
        """Subscripts and shape with runs of dimensions merged where their row-major offset
        depends on fewer loops non-linearly than the subscripts alone.

        A fused loop over whole rows splits into ``f // 7`` and ``f % 7``; TVM flattens the
        buffer before it vectorizes, and its simplifier turns ``f // 7 * 7 + f % 7`` back
        into ``f``: one contiguous vector, not 49 lanes gathered. Merged dimensions keep
        their offsets (the outer ones become size 1 at subscript 0, the innermost holds
        their product), so addresses are unchanged.
        """
        last = len(forms) - 1
        while last > 0:
            first = last
            while first > 0 and forms[first - 1].opaque and forms[first].opaque:
                first -= 1
            for start in range(first, last):  # the widest run first
                form = self._offset(exprs[start:last + 1], shape[start:last + 1], env)
                if form.opaque < frozenset().union(*(f.opaque for f in forms[start:last + 1])):
                    size = math.prod(shape[start:last + 1])
                    forms = forms[:start] + [_Affine()] * (last - start) + [form] + forms[last + 1:]
                    shape = shape[:start] + (1,) * (last - start) + (size,) + shape[last + 1:]
                    last = start
                    break
            last -= 1
        return forms, shape

    def _offset(self, exprs, shape: tuple[int, ...], env) -> _Affine:
        """The row-major offset of subscripts ``exprs`` into dimensions ``shape``, simplified
        by TVM's analyzer over the loops' ranges."""
        flat = exprs[0]
        for e, n in zip(exprs[1:], shape[1:]):
            flat = flat * n + e
        bound = {v for e in exprs for v in _subexprs(e) if isinstance(v, tvm.tirx.Var) and v in self.ranges}
        analyzer = tvm.sym.Analyzer()
        for v in bound:
            analyzer.bind(v, self.ranges[v])
        return _affine(analyzer.simplify(flat), env, self.extents)

    def _warp_offsets(self, indices, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The element offsets of the first warp's threads (see :attr:`tuna.ir.Access.warp`)."""
        if self.lanes is None:
            return ()
        try:
            flat = np.zeros(len(self.lanes), dtype=np.int64)
            for i, extent_after in zip(indices, ir.row_major_strides(shape)):
                value = warp_value(i.base if isinstance(i, tirx.Ramp) else i, self.warp_env)
                flat = flat + np.asarray(value, dtype=np.int64) * extent_after
        except (UnknownValueError, TypeError, ValueError):
            return ()
        return tuple(int(v) for v in np.broadcast_to(flat, self.lanes.shape))

    def _note_lane_condition(self, cond, env) -> None:
        """Mark the enclosing vectorized loops a condition varies in: TVM's VectorizeLoop
        cannot turn a condition that differs between lanes into one (``if_then_else``, an
        ``if``), and leaves the loop serial, a scalar loop (``<var>_s``) for the unroller and
        LLVM. A padding stage's bounds check on the vectorized axis does: its loop runs one
        element at a time."""
        names: set[str] = set()
        for e in _subexprs(cond):
            if isinstance(e, tirx.Var) and e in env:
                names |= env[e].vars()
        self.scalarized |= {n for n in names if self.kinds.get(n) == ir.LoopKind.VECTORIZED and n in self.loops}

    def _statement(self, store, block_name: str, env) -> ir.Statement:
        accesses: list[ir.Access] = []
        nodes = list(_subexprs(store.value))
        for e in nodes:  # conditions that differ between lanes make their vector loops scalar
            if _is_if_then_else(e):
                self._note_lane_condition(e.args[0], env)
        for e in nodes:
            if isinstance(e, tvm.ir.TensorLoad):
                accesses.append(self._access(e.source, e.indices, False, env))
        accesses.append(self._access(store.buffer, store.indices, True, env))
        ops = tuple(_count_ops(store.value))
        return ir.Statement(
            name=block_name,
            accesses=tuple(accesses),
            ops=ops,
            dtype_bytes=dtype_bytes(_ty(store.value)),
            guards=self._guards(nodes, env, dict(ops).get("cmp", 0)),
            minmax=sum(1 for e in nodes if isinstance(e, (tirx.Max, tirx.Min)) and "float" in _ty(e)),
        )

    def _guards(self, nodes, env, cmps: int) -> tuple[tuple[ir.Index, int], ...]:
        """The parity tests of the value's zero guards (:attr:`tuna.ir.Statement.guards`);
        ``cmps``: the value's "cmp" operations."""
        found, selects = [], 0
        for e in nodes:
            if not _is_if_then_else(e):
                continue
            cond, other = e.args[0], e.args[2]
            if not (isinstance(other, (tirx.FloatImm, tirx.IntImm)) and other.value == 0):
                return ()
            conjuncts, tests = [cond], []
            while conjuncts:
                c = conjuncts.pop()
                if isinstance(c, tirx.And):
                    conjuncts += [c.a, c.b]
                elif (isinstance(c, tirx.EQ) and isinstance(c.a, (tirx.FloorMod, tirx.Mod))
                      and isinstance(c.a.b, tirx.IntImm) and c.a.b.value > 1 and isinstance(c.b, tirx.IntImm)):
                    form = _affine(c.a.a, env)
                    if form.opaque:
                        return ()
                    tests.append((form.index(), int(c.a.b.value)))
                else:
                    return ()
            found += tests
            selects += 1
        # Only when the tests are all the value's comparisons (each test and select one "cmp").
        return tuple(found) if cmps == len(found) + selects else ()

    def visit(self, stmt, env, block_name: str) -> list[ir.Node]:
        if isinstance(stmt, tirx.For):
            if not isinstance(stmt.extent, tvm.tirx.IntImm):
                raise AnalysisError(
                    f"loop {stmt.loop_var} has a symbolic extent {stmt.extent}; tuna needs static shapes"
                )
            name = self._name(stmt.loop_var)
            self.extents[name] = int(stmt.extent.value)
            self.ranges[stmt.loop_var] = tvm.ir.Range.from_min_extent(stmt.min, stmt.extent)
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
            self.kinds[name] = kind
            lanes, warp_env = self.lanes, self.warp_env
            value = int(stmt.min.value) if isinstance(stmt.min, tvm.tirx.IntImm) else 0
            if thread == "threadIdx.x":
                self.lanes = np.arange(min(WARP_SIZE, int(stmt.extent.value)), dtype=np.int64) + value
                value = self.lanes
            self.warp_env = {**warp_env, stmt.loop_var: value}
            body = tuple(self.visit(stmt.body, inner, block_name))
            self.lanes, self.warp_env = lanes, warp_env
            if vanishes:
                return list(body)
            self.loops.pop()
            if kind == ir.LoopKind.VECTORIZED and name in self.scalarized:
                kind = ir.LoopKind.SERIAL
            return [ir.Loop(name, int(stmt.extent.value), kind, body, thread, int(step))]
        if isinstance(stmt, tirx.SeqStmt):
            return [n for s in stmt.seq for n in self.visit(s, env, block_name)]
        if isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            inner = dict(env)
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                inner[iv.var] = _affine(value, env, self.extents)
                if self.lanes is not None:
                    try:
                        self.warp_env[iv.var] = warp_value(value, self.warp_env)
                    except (UnknownValueError, TypeError, ValueError):
                        self.warp_env.pop(iv.var, None)
            for buf in block.alloc_buffers:
                elems = math.prod(int(s) for s in buf.shape if isinstance(s, tvm.tirx.IntImm))
                self.allocations.append(ir.Allocation(
                    str(buf.name), str(buf.scope()), elems, dtype_bytes(buf.dtype),
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
            self._note_lane_condition(stmt.condition, env)
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

