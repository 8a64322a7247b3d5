"""The frozen kernel representation every analysis consumes.

A candidate schedule is lowered once (in :mod:`tuna.integration`, the only package that
imports TVM) into a :class:`KernelIR`: a tree of loops whose leaves are statements with
their buffer accesses. Machine code, when it has been generated, rides along: CPU code as
:class:`MachineCode`, compiled GPU kernels as :class:`tuna.gpu.full_tier.GpuCode`.
Analyses are pure functions of a ``KernelIR`` and a :class:`tuna.machine.Machine`.
"""

from __future__ import annotations

import enum
import math
import operator
from dataclasses import dataclass, field, fields


def _hash_once(cls: type) -> type:
    """Make a frozen dataclass remember its hash.

    The analyses key their caches by IR nodes, and a generated hash walks the node's whole
    subtree on every lookup: the cache model hashed each loop nest once per level. The hash
    is the generated one's (the compared fields as a tuple), kept beside the fields and left
    out of pickles, since string hashes differ between processes.
    """
    values = operator.attrgetter(*(f.name for f in fields(cls) if f.compare))

    def __hash__(self) -> int:  # noqa: N807
        value = self.__dict__.get("_hash")
        if value is None:
            value = hash(values(self))
            object.__setattr__(self, "_hash", value)
        return value

    def __getstate__(self) -> dict:  # noqa: N807
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls


class LoopKind(enum.Enum):
    """How a loop is executed."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD = "thread"


@_hash_once
@dataclass(frozen=True)
class Index:
    """One subscript of a buffer access, split into an affine and an opaque part.

    Attributes
    ----------
    coeffs : tuple of (str, int)
        Loop variable names and their integer coefficients in the affine part.
    const : int
        The constant term of the affine part.
    opaque : tuple of str
        Loop variables the subscript depends on through non-affine terms
        (floor division, modulo, selects); analyses bound these by the loop extent.
    runs : tuple of int
        Per variable of ``opaque`` (empty: all 1), the consecutive values of it, from 0 and
        with the other variables at 0, over which the non-affine terms keep their value:
        49 for a fused loop's ``f // 49``, 1 for its ``f % 8``. Over ``n`` values of the
        variable they take at most ``ceil(n / run)`` values.
    """

    coeffs: tuple[tuple[str, int], ...] = ()
    const: int = 0
    opaque: tuple[str, ...] = ()
    runs: tuple[int, ...] = ()

    def coeff(self, var: str) -> int:
        """Coefficient of ``var`` in the affine part (0 when absent)."""
        for name, c in self.coeffs:
            if name == var:
                return c
        return 0

    def run(self, var: str) -> int:
        """Consecutive values of ``var`` over which the non-affine terms hold (see ``runs``)."""
        for name, r in zip(self.opaque, self.runs):
            if name == var:
                return r
        return 1

    def depends_on(self, var: str) -> bool:
        """Whether the subscript changes with ``var``."""
        return self.coeff(var) != 0 or var in self.opaque


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Elements between neighbours of each dimension of a row-major array of ``shape``."""
    return tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))


@_hash_once
@dataclass(frozen=True)
class Access:
    """A load or store of one buffer element (or vector of elements).

    Attributes
    ----------
    buffer : str
        Buffer name.
    write : bool
        True for a store.
    indices : tuple of Index
        One subscript per buffer dimension.
    shape : tuple of int
        The buffer's shape, or one with the same row-major offsets where a run of dimensions
        is merged into its innermost (the others size 1 at subscript 0): where a fused loop
        splits into ``f // 7`` and ``f % 7`` over rows of 7 (see :mod:`tuna.integration.lower`).
    dtype_bytes : int
        Bytes per element.
    scope : str
        Storage scope ("global", "shared", "local", ...).
    warp : tuple of int
        In a GPU kernel, the element offset (row-major over ``shape``) each thread of the
        block's first warp accesses, with every loop variable other than ``threadIdx.x`` at
        0: what decides shared-memory bank conflicts and global-memory coalescing. Empty
        outside thread-bound loops and where a subscript cannot be evaluated.
    """

    buffer: str
    write: bool
    indices: tuple[Index, ...]
    shape: tuple[int, ...]
    dtype_bytes: int
    scope: str = "global"
    warp: tuple[int, ...] = ()

    def depends_on(self, var: str) -> bool:
        """Whether the accessed address changes with loop variable ``var``."""
        return any(ix.depends_on(var) for ix in self.indices)

    @property
    def strides(self) -> tuple[int, ...]:
        """Elements between neighbours of each dimension (row-major over ``shape``)."""
        return row_major_strides(self.shape)

    def byte_stride(self, var: str) -> int:
        """Bytes the address moves per step of loop variable ``var`` (its affine part)."""
        return sum(ix.coeff(var) * st for ix, st in zip(self.indices, self.strides)) * self.dtype_bytes


@_hash_once
@dataclass(frozen=True)
class Statement:
    """A leaf: one assignment with the arithmetic it performs per execution.

    Attributes
    ----------
    name : str
        Name of the TIR block the statement came from.
    accesses : tuple of Access
        Loads and stores, in program order.
    ops : tuple of (str, int)
        Arithmetic operations per execution by class: "fma", "add", "mul", "div" (on
        floating point), "idiv" (integer division, floor division included: index arithmetic),
        "cmp", "special" (functions with an instruction: sqrt, rsqrt), "math" (functions
        CPU code calls the C math library for, per lane: exp, log, tanh counts 2, ...),
        "cast". Integer additions and multiplications are not counted.
    dtype_bytes : int
        Bytes per element of the value computed.
    guards : tuple of (Index, int)
        Conditions ``index % modulus == constant`` (one pair each) under which the value is
        computed, from zero guards ``if_then_else(a and b..., x, 0)`` whose conjuncts are all
        such tests (a transposed convolution's input taps). Set only where these tests and
        their selects are every "cmp" of ``ops``; otherwise empty, and the conditions are
        only counted as "cmp".
    minmax : int
        Of the "add" operations, the floating-point ``max`` and ``min`` (LLVM makes each a
        compare and a select, and analyses chains of them differently from sums).
    """

    name: str
    accesses: tuple[Access, ...]
    ops: tuple[tuple[str, int], ...]
    dtype_bytes: int = 4
    guards: tuple[tuple[Index, int], ...] = ()
    minmax: int = 0

    def op_count(self, kind: str | None = None) -> int:
        """Operations per execution, of one class or all."""
        return sum(n for k, n in self.ops if kind is None or k == kind)

    def stores_vary_with(self, var: str) -> bool:
        """Whether a store's subscript names loop variable ``var``; a loop it does not reduces
        into the stored values (each iteration updates the same elements)."""
        return any(a.write and a.depends_on(var) for a in self.accesses)


@_hash_once
@dataclass(frozen=True)
class Loop:
    """A loop with a constant trip count.

    Attributes
    ----------
    var : str
        Loop variable name (unique within the kernel).
    extent : int
        Trip count.
    kind : LoopKind
        Serial, parallel, vectorized, unrolled or bound to a GPU thread axis.
    body : tuple of Loop or Statement
        Children in program order.
    thread : str or None
        Thread axis ("blockIdx.x", "threadIdx.y", ...) for THREAD loops.
    unroll_max_step : int
        The ``pragma_auto_unroll_max_step`` annotation (0 when absent): TVM unrolls
        inner loop nests whose total trip count is at most this.
    """

    var: str
    extent: int
    kind: LoopKind
    body: tuple[Loop | Statement, ...]
    thread: str | None = None
    unroll_max_step: int = 0


Node = Loop | Statement


@dataclass(frozen=True)
class Allocation:
    """A buffer allocated inside the kernel (cache stages, shared memory).

    Attributes
    ----------
    name : str
        Buffer name.
    scope : str
        Storage scope.
    elements : int
        Elements allocated (per execution of the enclosing loop's body).
    dtype_bytes : int
        Bytes per element.
    loop : str or None
        Variable of the innermost loop the allocation sits in (None at the function's
        root): TVM's lowering places each buffer in the innermost loop holding all its uses.
    """

    name: str
    scope: str
    elements: int
    dtype_bytes: int
    loop: str | None = None


@dataclass(frozen=True)
class Instruction:
    """One machine instruction as the disassembler or PTX parser reports it."""

    address: int
    mnemonic: str
    operands: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    klass: str = "other"
    #: For a direct call in an object file, the symbol its relocation names (``expf``,
    #: ``memset``); empty where unknown (indirect calls, other instructions).
    callee: str = ""


@dataclass(frozen=True)
class BasicBlock:
    """A straight-line run of instructions with its successors' start addresses."""

    start: int
    instructions: tuple[Instruction, ...]
    successors: tuple[int, ...] = ()


@dataclass(frozen=True)
class MachineCode:
    """Generated code of one kernel function."""

    isa: str
    function: str
    blocks: tuple[BasicBlock, ...]


@dataclass(frozen=True)
class KernelIR:
    """One candidate schedule of one kernel, as the analyses see it.

    Attributes
    ----------
    name : str
        Function name.
    body : tuple of Node
        Top-level loops and statements.
    allocations : tuple of Allocation
        Buffers allocated by the schedule (e.g. cache-write stages, shared memory).
    params : tuple of str
        Names of the function's buffer parameters.
    code : tuple of MachineCode
        The generated functions (the kernel and its outlined parallel bodies), when the
        CPU full tier compiled the candidate; empty otherwise.
    gpu_code : tuna.gpu.full_tier.GpuCode or None
        The compiled CUDA kernels (PTX, ptxas' resources, launch shapes), when the GPU
        full tier compiled the candidate; None otherwise. Typed loosely here: the GPU
        modules build on this one, not the other way round.
    """

    name: str
    body: tuple[Node, ...]
    allocations: tuple[Allocation, ...] = ()
    params: tuple[str, ...] = ()
    code: tuple[MachineCode, ...] = field(default=(), compare=False)
    gpu_code: object | None = field(default=None, compare=False)


def walk(nodes: tuple[Node, ...], outer: tuple[Loop, ...] = ()):
    """Yield ``(statement, enclosing_loops)`` for every statement, outermost loop first."""
    for node in nodes:
        if isinstance(node, Loop):
            yield from walk(node.body, (*outer, node))
        else:
            yield node, outer
