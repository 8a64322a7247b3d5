"""The CPU IR tier: a static estimate from the loop tree alone, in a few milliseconds.

Per statement it counts SIMD arithmetic, loads and stores the way LLVM will emit them for TVM's
loops: vectorized loops become vector instructions of the target's width, and LLVM's own full
unrolling and auto-vectorization are applied to the loops TVM left serial
(:func:`tuna.cpu.codegen.codegen_loops`); the innermost unrolled and vectorized loops form a
register tile in which each distinct vector is loaded once; loads invariant in the loops just
outside the tile are hoisted while the tile fits in the vector registers (on x86, the part of the
operand read from memory that the registers cannot also hold is reloaded from the stack at each
use). A tile that does not fit reloads what an iteration of its loops cannot keep
(:func:`_tile_loads`), and LICM still hoists what the rolled loop around it does not vary
(:func:`_licm_hoisted`) and, in tiles of few enough copies, keeps the accumulators in registers
across it, the register allocator spilling what does not fit (:func:`_promoted_spills`).
Statements whose values do not change in a rolled loop count once for it (LICM,
:func:`tuna.cpu.codegen.hoisted_loops`). Accumulators TVM vectorized at a width that is not a
power of two, kept in registers over a rolled loop, are carried lane by lane (LLVM scalarizes
such loop-carried vectors: :data:`SCALARIZED_LANE_INSTRUCTIONS`). Vectors TVM reads at a stride
are built lane by lane, and LLVM builds those of such widths anew for every copy of the
statement in the register tile; read at a small stride from a buffer on the stack, they are
loaded whole and permuted instead (:func:`_deinterleaved`). Integer divisions of index
arithmetic are front-end instructions (:data:`INTEGER_DIVISION_INSTRUCTIONS`), not FP-pipe
divisions. Reductions are
bounded by the FMA latency over the updates independent of each accumulator (those inside the
innermost reduction loop, and instances of the reduction loops directly around it that the
reorder buffer overlaps). Each top-level loop nest's core cycles are those of its two busiest
resources added (FP pipes, load/store ports, front end, FMA chains, and the shuffle pipes that
lanes moved one at a time occupy: :func:`_core_cycles`), divided over the threads of TVM's pool
its outermost parallel loop can occupy (``machine.threads``); cache fills (integer-set data
movement over the nests in sequence, so that a nest finds what the ones before it left in
each level), DRAM traffic, calls of the C math library (one per lane of every exp, log, ...) and
the instructions around them are separate terms of the linear model in :mod:`tuna.linear`; the
latter counts what shares the calls' straight-line code, and the values that outlive the
registers the calling convention preserves, reloaded after every call. Buffers allocated in the
kernel and accessed only at constant subscripts once unrolled stay in registers
(:func:`tuna.cpu.codegen.register_buffers`).

The full tier takes two groups of these terms from here, each computed alone:
:func:`memory_terms` (cache fills and DRAM traffic) and :func:`loop_tree_bounds` (the loop
tree's FP-pipe and reduction-chain bounds).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from types import MappingProxyType

from .. import linear
from ..errors import TunaError
from ..estimate import Estimate
from ..ir import Access, Allocation, KernelIR, Loop, LoopKind, Statement, walk
from ..machine import Machine
from .cache import data_movement, known_sets
from .codegen import (
    MIN_AUTO_LANES,
    below_home,
    cache_view,
    codegen_loops,
    contiguous_in,
    folded_share,
    hoisted_loops,
    loop_vectorized_reads,
    register_buffers,
    rolled_around,
    strided_in,
    tvm_unrolled,
    unrolled_loops,
)
from .simulator import uarch

#: Instructions of loop control (increment, compare, branch) per iteration of a rolled loop.
LOOP_OVERHEAD_INSTRUCTIONS = 2
#: Instructions per lane with which a vector loop calls a scalar library function: extract
#: the lane, insert the result, and spill and reload the vectors the call clobbers. LLVM's
#: code for the rolled exp loops of the SFM-1 pool on Zen 4 has about five (candidate 6: 301
#: instructions beside its 64 calls, of which the row's vector load, subtract and store
#: make 0.2 a call).
LANE_CALL_INSTRUCTIONS = 5
#: Bytes from which TVM's lowering allocates a buffer placed inside a kernel from the runtime's
#: workspace (TVMBackendAllocWorkspace) instead of the stack: ``runtime::kMaxStackAlloca`` in
#: include/tvm/runtime/device_api.h, compared in src/tirx/transform/lower_tvm_builtin.cc.
MAX_STACK_ALLOCA = 1024
#: General-purpose values a workspace allocation keeps live until its free call at the end of
#: the loop body: the runtime's function table and the device id (LLVM's code for the SFM-1
#: picks of ES on Zen 4 holds them in r14 and ebx).
WORKSPACE_VALUES = 2
#: Instructions per lane with which LLVM carries a vector TVM made of a width that is not a
#: power of two, and wider than the machine's vectors, around a rolled loop (an accumulator
#: kept in registers over a reduction loop): such a loop-carried value is scalarized, each
#: lane inserted back into a vector at the top of the loop's body and extracted at its
#: bottom. Micro-kernels accumulating 1-8 vectors of 20-56 floats over a rolled loop (LLVM
#: of TVM 0.27, znver4) have 1.8-1.9 such instructions per lane and back edge; for
#: graviton2, 3 per lane in the whole function. The lanes that do not fit in the vector
#: registers are spilled and reloaded on every iteration as well.
SCALARIZED_LANE_INSTRUCTIONS = 2
#: Instructions per integer division of index arithmetic (a floor division by a constant): a
#: multiply-high and a shift (``mulx``, ``shr`` in TVM 0.27's LLVM code for znver4 of a loop
#: over ``a[i // 226 * 7 + i % 226]``). They run on the integer units and count at the front
#: end only. Counted as floating-point divisions, as they were until 2026-11-28, a padding
#: stage whose fused loop is split by divisions cost 2.5 cycles a division on Zen 4 and could
#: outweigh the convolution it feeds (a MobileNetV2 depthwise pool's fastest candidate was
#: predicted 2x slower than its ties). Over 71 development pools (``tuna bench rank --tiers
#: ir``) top-10 0.755 -> 0.756, Kendall tau 0.605 -> 0.619; on 15 held-out pools
#: (``docs/bench/heldout-pools-10`` to ``-12`` and ``-14``) 0.771 -> 0.793 and 0.655 -> 0.675.
INTEGER_DIVISION_INSTRUCTIONS = 2
#: LLVM unrolls a small rolled loop partly, in powers of two up to :data:`MAX_PARTIAL_UNROLL`
#: copies while the copies hold at most this many vector instructions (loads and
#: arithmetic). Fitted by hand to the same micro-kernels: one to eight accumulators of 16,
#: 28 and 56 lanes were unrolled 16 to 1 times, the copies holding 36-72 such instructions.
PARTIAL_UNROLL_SIZE = 72
MAX_PARTIAL_UNROLL = 16
#: Statement copies in a register tile up to which LLVM's LICM keeps the values the loop
#: around it reads and writes at invariant addresses (the accumulators) in registers across
#: it, whether they fit or not. LLVM caps the memory accesses a loop may have for that
#: (``licm-mssa-max-acc-promotion``, 250, in LICM.cpp), counted after its own clean-ups; in
#: probes (TVM 0.27, Emerald Rapids) of 8-16 accumulators of 64 floats updated 8-32 times,
#: and of a conv2d-like 2 x 7 x K x 4 tile of 56 floats, tiles of up to 210 copies were
#: promoted and from 216 on not, but for one of 224 (the conv2d-like one, K = 4).
LICM_PROMOTION_COPIES = 210
#: Share of the vector registers that the accumulators of a promoted tile too large for the
#: registers keep (:data:`LICM_PROMOTION_COPIES`); LLVM's register allocator spills the rest,
#: each reloaded and stored at every update. In probes of a rolled reduction loop around 32-64
#: accumulators of 16 floats (tests/test_codegen_llvm.py; TVM 0.27, Emerald Rapids and Zen 4,
#: 32 registers), 0.34-0.38 of the updates stored to the stack at 32 accumulators, 0.43-0.62 at
#: 40-42 and 0.77-0.92 at 64: about 20 kept, fewer in the largest tiles.
PROMOTED_KEPT_SHARE = 0.625
#: Classes of operations that occupy the FP pipes, counted by width as well (``pipe_<kind>``).
PIPE_KINDS = ("fma", "add", "mul", "div", "special")
#: Classes of the loop tree's operations that become one instruction each per execution.
INSTRUCTION_KINDS = ("fma", "add", "mul", "div", "special", "cast", "cmp", "load", "store")


def _instructions(counts: Counter) -> float:
    """Instructions of a statement's (or nest's) arithmetic, loads and stores."""
    return sum(counts[k] for k in INSTRUCTION_KINDS) + INTEGER_DIVISION_INSTRUCTIONS * counts["idiv"]


@cache
def _reorder_window(preset: str) -> int:
    """Reorder-buffer entries of the preset's core (0 without micro-architecture data)."""
    try:
        return uarch(preset).rob_size
    except TunaError:
        return 0


def _vector_loop(loops: tuple[Loop, ...]) -> Loop | None:
    vec = [lp for lp in loops if lp.kind == LoopKind.VECTORIZED]
    return vec[-1] if vec else None


def _wide_odd(lanes: int, hw_lanes: int) -> bool:
    """Whether a TVM vector of ``lanes`` is wider than the machine's and not a power of two:
    LLVM scalarizes such vectors where they are carried or shared (see :func:`statement_counts`)."""
    return lanes > hw_lanes and bool(lanes & (lanes - 1))


def _vector_cost(access: Access, vec: Loop | None, hw_lanes: int) -> int:
    """Instructions one access needs per iteration of the vectorized loop."""
    if vec is None or not access.depends_on(vec.var):
        return 1
    return math.ceil(vec.extent / hw_lanes) if contiguous_in(access, vec.var) else vec.extent


#: Bytes TVM aligns every buffer to (``kAllocAlignment``), and so the most its address
#: analysis can tell LLVM about an access's alignment.
BUFFER_ALIGNMENT = 64


def _alignment(access: Access, vec: Loop) -> int:
    """Bytes the first lane of a vector access is known to be aligned to, as TVM tells LLVM:
    the largest power of two dividing every step and offset of the address but the lanes'."""
    step = 0  # the gcd of the address's steps and offset, in elements (0: one constant address)
    for ix, stride in zip(access.indices, access.strides):
        if ix.opaque:
            return access.dtype_bytes
        step = math.gcd(step, ix.const * stride, *(c * stride for v, c in ix.coeffs if v != vec.var))
    if step == 0:
        return BUFFER_ALIGNMENT
    return min(BUFFER_ALIGNMENT, (step * access.dtype_bytes) & -(step * access.dtype_bytes))


def _read_pieces(size: int, align: int, element: int, widest: int) -> int:
    """Loads LLVM reads ``size`` bytes of a vector with (SelectionDAG's widening of a vector
    load, ``findMemType``): the widest power of two that fits what is left, or a wider one up
    to the vector's next power of two where the alignment keeps it within the page; a last
    single element alone; pieces that add up to one power of two become one load."""
    extra = (1 << (size - 1).bit_length()) - size
    pieces: list[int] = []
    left = size
    while left > 0:
        if left == element:
            pieces.append(element)
            break
        pick = 1 << (min(left, widest).bit_length() - 1)
        while pick * 2 <= min(widest, align, left + extra):
            pick *= 2
        pieces.append(pick)
        left -= pick
        align = min(align, pick)
    total = sum(pieces)
    return 1 if total & (total - 1) == 0 and total <= widest else len(pieces)


def _pieces(access: Access, vec: Loop, hw_lanes: int) -> int:
    """Memory instructions LLVM moves a TVM vector (the ``vec`` loop's lanes, contiguous) with.

    Full-width ones, then the rest: a store in power-of-two pieces (7 lanes: 4 + 2 + 1; 30
    lanes of 16: 16 + 8 + 4 + 2), since it may not write past the vector's end; a load as
    :func:`_read_pieces` finds, reading past the end where the alignment allows.
    """
    full, rest = divmod(vec.extent, hw_lanes)
    if not rest:
        return full
    if access.write:
        return full + rest.bit_count()
    size = access.dtype_bytes
    return full + _read_pieces(rest * size, _alignment(access, vec), size, hw_lanes * size)


def _access_lanes(access: Access, vec: Loop | None, hw_lanes: int) -> int:
    """Elements each of those instructions moves (one for scalar and broadcast accesses)."""
    if vec is None or not access.depends_on(vec.var) or not contiguous_in(access, vec.var):
        return 1
    return math.ceil(vec.extent / math.ceil(vec.extent / hw_lanes))


def _without_compares(stmt: Statement) -> Statement:
    """``stmt`` with its tests gone (its "cmp" operations and zero guards): decided before the
    code runs, by TVM's unrolling or LLVM's peeling."""
    return dataclasses.replace(stmt, ops=tuple((k, n) for k, n in stmt.ops if k != "cmp"), guards=())


def statement_counts(
    stmt: Statement, loops: tuple[Loop, ...], machine: Machine, tvm: frozenset[str] | None = None,
    homes: Mapping[str, str | None] | None = None, in_registers: frozenset[str] = frozenset(),
    scalarized: frozenset[str] = frozenset(), on_stack: frozenset[str] = frozenset(),
) -> Counter:
    """Dynamic instruction counts of one statement, by class (``tvm``: see :func:`unrolled_loops`).

    ``homes`` maps buffers allocated in the kernel to the loop they are allocated in
    (:attr:`~tuna.ir.Allocation.loop`): an access to such a buffer is not hoisted out of
    that loop even where its subscript is invariant, since every iteration rewrites the buffer.
    Accesses to the buffers ``in_registers`` (:func:`~tuna.cpu.codegen.register_buffers`) are
    neither loads nor stores: LLVM keeps those buffers in registers. Accumulators in the buffers
    ``scalarized`` (:func:`_wide_vector_buffers`) are carried lane by lane around a rolled loop.
    Vectors read at a small stride from the buffers ``on_stack`` (allocated in the kernel, below
    :data:`MAX_STACK_ALLOCA`) are loaded whole and deinterleaved (:func:`_deinterleaved`);
    so are those of a loop LLVM's loop vectorizer takes, or gathered
    (:func:`~tuna.cpu.codegen.loop_vectorized_reads`).
    """
    share = folded_share(stmt, loops, tvm)
    if share < 1:
        stmt = _without_compares(stmt)
    counts: Counter = Counter()
    by_tvm = any(lp.kind == LoopKind.VECTORIZED for lp in loops)
    loops = codegen_loops(stmt, loops, machine, tvm, homes, in_registers)
    execs = math.prod(lp.extent for lp in loops)
    vec = _vector_loop(loops)
    if vec is not None and not by_tvm and stmt.op_count("cmp"):
        # A padding test LLVM settled by peeling (codegen._guard_peeled): the vector loop tests nothing.
        stmt = _without_compares(stmt)
    # LLVM's own loop vectorizer may pick another width than TVM's vectors get (Machine.auto_vector_bits).
    hw = machine.lanes(stmt.dtype_bytes, auto=vec is not None and not by_tvm)
    vl = vec.extent if vec else 1
    vinstr = math.ceil(vl / hw)
    # Pipe time of each instruction, in full-width instructions: a narrower vector issues
    # faster where the core splits full-width ones into several passes (Machine.width_cost).
    width = machine.width_cost(math.ceil(vl / vinstr), stmt.dtype_bytes)
    for kind, n in stmt.ops:
        # Library math functions run once per lane whatever the vector width (see "math" ops).
        counts[kind] += n * execs if kind == "math" else n * execs // vl * vinstr
        if kind in PIPE_KINDS:
            counts[f"pipe_{kind}"] += n * execs // vl * vinstr * width
    counts["lanes_fma"] += stmt.op_count("fma") * execs

    unrolled = unrolled_loops(loops, tvm)
    tile_start = len(loops)
    while tile_start > 0 and (
        loops[tile_start - 1].var in unrolled or loops[tile_start - 1].kind == LoopKind.VECTORIZED
    ):
        tile_start -= 1
    tile, outside = loops[tile_start:], loops[:tile_start]

    distinct: dict[tuple, int] = {}
    widths: dict[tuple, float] = {}
    pieces: dict[tuple, int] = {}
    for acc in stmt.accesses:
        n = _vector_cost(acc, vec, hw)
        if by_tvm and vec is not None and acc.depends_on(vec.var) and contiguous_in(acc, vec.var):
            pieces[(acc.buffer, acc.indices, acc.write)] = _pieces(acc, vec, hw)
        for lp in tile:
            if lp is not vec and acc.depends_on(lp.var):
                n *= lp.extent
        distinct[(acc.buffer, acc.indices, acc.write)] = n
        widths[(acc.buffer, acc.indices, acc.write)] = machine.width_cost(_access_lanes(acc, vec, hw), acc.dtype_bytes)
    need, in_memory, memory_vectors = _register_demand(stmt, tile, vec, hw, machine)
    fits = need <= machine.vector_registers
    # The operand read from memory, hoisted out of the rolled loop, needs registers the tile
    # may not have: LLVM spills what does not fit and reloads it at each use.
    spilled = max(0, need + memory_vectors - machine.vector_registers) / max(memory_vectors, 1)
    copies = math.prod(lp.extent for lp in tile if lp is not vec)
    # LLVM keeps the accumulators in registers across the loop around the tile (LICM's
    # promotion) while the tile is small enough, whether they fit or not.
    promoted = copies <= LICM_PROMOTION_COPIES
    licm: dict[tuple, float] = {}
    rebuilt = by_tvm and _wide_odd(vl, hw)
    kept: dict[tuple, float] = {}  # accumulators kept across the rolled loops: their spilled moves a tile
    if not fits:
        hoisted = _licm_hoisted(stmt, loops, tile_start, distinct, homes, in_registers)
        if hoisted and rebuilt:
            # LLVM builds hoisted vectors of such widths lane by lane before the loop: a scalar
            # load and an insert a lane (probes of 33-56 lanes in tests/test_codegen_llvm.py).
            vectors = sum(distinct[key] for key in hoisted) / vinstr
            lanes = vectors * vl * math.prod(lp.extent for lp in outside[:-1])
            counts["load"] += lanes
            counts["pipe_load"] += lanes
            counts["lane_shuffles"] += lanes
        if hoisted and by_tvm and vl % hw == 1 and machine.isa == "x86-64":
            licm = _licm_reloads(stmt, tile, hoisted, vec, hw, machine, distinct, copies)
        tile_vectors = distinct
        distinct = _tile_loads(stmt, tile, vec, hw, machine)
        if promoted and outside:
            kept = _promoted_spills(stmt, tile, vec, outside[-1], tile_vectors, machine)
            distinct.update({key: tile_vectors[key] for key in kept})

    # TVM builds a vector read at a stride lane by lane. One wider than the machine's, of a
    # width that is not a power of two, LLVM builds anew for every copy of the statement in
    # the tile and does not hoist: in its code of a MobileNetV2 stride-2 conv2d (TVM 0.27,
    # znver4), 28- and 56-lane strided reads that 8 and 16 output channels share were loaded
    # 7.7 and 13 times as often as the distinct vectors; in probes of 4 copies, 8-, 16- and
    # 32-lane ones were built once, 24- and 28-lane ones 2.3 to 4 times (tests/test_codegen_llvm.py).
    strided = {(a.buffer, a.indices, a.write) for a in stmt.accesses if vec is not None and strided_in(a, vec.var)}
    if _masked_tail(vec, by_tvm, machine):
        # One masked store a row each time the row is stored: LLVM does not keep masked rows in
        # registers across the loops around the tile, but stores a row once for the updates
        # the tile makes of it.
        for w in (a for a in stmt.accesses if a.write and a.buffer not in in_registers):
            updates = math.prod(lp.extent for lp in tile if lp is not vec and not w.depends_on(lp.var))
            counts["masked_stores"] += execs / vl / updates
    tile_runs = math.prod(lp.extent for lp in outside)  # executions of the register tile
    for (buf, idx, write), n in distinct.items():
        if buf in in_registers:
            continue
        hoisting = fits or (buf, idx, write) in licm or (buf, idx, write) in kept
        if (buf, idx, write) in strided and rebuilt and not write:
            n, hoisting = vl * copies, False
        # (no hoisting out of the loop the buffer is allocated in, nor out of those around it)
        inner_to = below_home(loops, homes, buf)
        for pos in range(len(outside) - 1, -1, -1):
            lp = outside[pos]
            if hoisting and pos >= inner_to and not any(ix.depends_on(lp.var) for ix in idx):
                if fits and (buf, idx) == in_memory and spilled:
                    n *= 1 + (lp.extent - 1) * spilled
                    hoisting = False
                    continue
                # LICM alone hoists out of the innermost rolled loop only; it promotes out of each
                hoisting = fits or (buf, idx, write) in kept
                continue
            hoisting = False
            n *= lp.extent
        if kept.get((buf, idx, write)):  # the spilled accumulators, moved at every update
            moved = kept[(buf, idx, write)] * tile_runs
            counts["store" if write else "load"] += moved
            counts["pipe_store" if write else "pipe_load"] += moved * widths[(buf, idx, write)]
        if (buf, idx, write) in licm:  # reloaded from the stack where it is used
            reloads = licm[(buf, idx, write)] * tile_runs
            counts["load"] += reloads
            counts["pipe_load"] += reloads * widths[(buf, idx, write)]
        # A vector of TVM's whose width is not a multiple of the machine's is moved in pieces
        # (registers hold it whole: the pieces change the memory instructions only, not
        # :func:`_live_vectors`), joined by inserts or split by extracts (tests/test_codegen_llvm.py).
        split = pieces.get((buf, idx, write), vinstr)
        if split > vinstr:
            counts["lane_shuffles"] += n * (split - vinstr) / vinstr
            n = n * split / vinstr
        spans = 0
        if (buf, idx, write) in strided and not write and machine.isa == "x86-64":
            form = "tvm" if by_tvm else loop_vectorized_reads(vec, machine)
            if form == "gathered":  # a load a lane, no inserts
                counts["load"] += n
                counts["pipe_load"] += n
                continue
            if form == "interleaved":  # (codegen vectorized it for its stride, codegen.interleaved_stride)
                spans = math.ceil(idx[-1].coeff(vec.var) * vl / hw)
            elif form == "tvm" and buf in on_stack:
                spans = _deinterleaved(idx, vec, hw)
        if spans:
            n = n / vl * spans  # the vectors the lanes span, each loaded whole and permuted once
            counts["lane_shuffles"] += n
            counts["load"] += n
            counts["pipe_load"] += n
            continue
        counts["store" if write else "load"] += n
        counts["pipe_store" if write else "pipe_load"] += n * widths[(buf, idx, write)]
        if (buf, idx, write) in strided:
            counts["lane_shuffles"] += n  # each lane inserted into its vector, or extracted to be stored

    # LLVM also scalarizes accumulators of a small buffer that another statement accesses as
    # such wide odd vectors (an epilogue reading a 7 x 7 tile as one 49-lane vector: a
    # MobileNetV2 1 x 1 conv2d's 21 accumulators of 7 lanes ran 10x slower so; a probe in
    # tests/test_codegen_llvm.py).
    odd = rebuilt or any(a.buffer in scalarized for a in stmt.accesses if a.write)
    if vec is not None and by_tvm and odd and (fits or promoted) and outside:
        _scalarized_carry(counts, stmt, distinct, vec, vinstr, tile, outside, homes, machine)

    writes = [a for a in stmt.accesses if a.write]
    # A loop the stores do not vary with reduces into them, unless a written buffer is
    # allocated inside it (compaction shrinks a per-iteration accumulator to one element):
    # then each iteration starts a fresh accumulator.
    fresh = max((below_home(loops, homes, w.buffer) for w in writes), default=0)
    reduce_at = [pos for pos, lp in enumerate(loops)
                 if pos >= fresh and not stmt.stores_vary_with(lp.var)]
    if writes and reduce_at and stmt.op_count("fma") + stmt.op_count("add"):
        # Updates of one accumulator form a dependency chain; the vector instructions of the
        # loops inside the innermost reduction loop are independent of it, and whole instances
        # of the reduction loops around it overlap when several fit in the reorder buffer.
        # An instance is the run of reduction loops directly around one another (consecutive
        # iterations of a reduction loop update the same accumulators: a 7 x 7 pooling window
        # is one chain of 49 adds, not seven of 7), and no more instances overlap than the
        # loops between it and the next reduction loop out give (other accumulators).
        inner = math.prod(
            math.ceil(lp.extent / hw) if lp.kind == LoopKind.VECTORIZED else lp.extent
            for lp in loops[reduce_at[-1] + 1 :]
        )
        first = reduce_at[-1]
        while first > 0 and first - 1 in reduce_at:
            first -= 1
        instance = (math.prod(lp.extent for lp in loops[first:reduce_at[-1] + 1]) * inner
                    * max(1, stmt.op_count() + len(stmt.accesses)))
        overlap = max(1.0, _reorder_window(machine.name) / instance)
        outer = [pos for pos in reduce_at if pos < first]
        if outer:
            overlap = min(overlap, math.prod(lp.extent for lp in loops[outer[-1] + 1:first]))
        chain = (stmt.op_count("fma") + stmt.op_count("add")) * execs // vl * vinstr
        chain *= machine.latency.get("fma", 4) / (inner * overlap)
        masked = _masked_accumulator_chain(stmt, writes, vec, hw, by_tvm, tile, outside, machine)
        aliased = _aliased_updates(stmt, writes, loops, reduce_at[-1], tile_start, vec, hw, machine)
        alias = aliased * execs // vl * vinstr
        counts["alias"] += alias
        counts["chain"] += max(chain, masked, alias)

    for pos, lp in enumerate(loops):
        if lp.var not in unrolled and lp.kind != LoopKind.VECTORIZED:
            counts["loop_iterations"] += math.prod(x.extent for x in loops[: pos + 1])
    if counts["math"]:  # the code around the library calls (see linear's call_block_ops)
        own = _instructions(counts)
        counts["call_block_ops"] = own + (LANE_CALL_INSTRUCTIONS * counts["math"] if vl > 1 else 0)
        counts["scalar_calls"] = counts["math"] if vl == 1 else 0
    if share < 1:
        for key in counts:
            counts[key] *= share
    return counts


#: Largest stride of a vector read from a stack buffer that :func:`_deinterleaved` counts as
#: loaded whole (the probes went to 3).
MAX_DEINTERLEAVED_STRIDE = 3


def _deinterleaved(indices: tuple, vec: Loop, hw_lanes: int) -> int:
    """Machine vectors LLVM loads to build a TVM vector read at a small stride from a buffer on
    the stack, or 0 where it builds it lane by lane (x86-64).

    A stack array's size is known to LLVM, so it may load the elements between the lanes too:
    a read of at most one machine vector's lanes at stride 2 or 3 along the last dimension
    becomes whole loads of the span and two-source permutes. Compiled probes (TVM 0.27's LLVM;
    a 3-tap filter over a row copied into a buffer allocated in the kernel,
    ``tests/test_codegen_llvm.py``): on znver4, 14 and 16 lanes at strides 2 and 3 and 8 lanes
    at stride 3 had no scalar load; 8 lanes at stride 2 kept 16 and 4 lanes 10 beside the
    permutes (17 and 72 from a workspace buffer); znver3 (8-lane vectors) alike; 28 lanes were
    built lane by lane, and so was every width read from a workspace buffer (above
    :data:`MAX_STACK_ALLOCA`) or from a function argument. The fastest candidates of a
    ShuffleNetV2 stride-2 depthwise pool (``docs/bench/heldout-pools-33``) read their padding
    stage so.
    """
    if vec.extent > hw_lanes or any(ix.depends_on(vec.var) for ix in indices[:-1]):
        return 0
    stride = indices[-1].coeff(vec.var)
    if not 2 <= stride <= MAX_DEINTERLEAVED_STRIDE:
        return 0
    return math.ceil(stride * vec.extent / hw_lanes)


#: LLVM's loop vectorizer folds the tail of a loop whose constant trip count is below this
#: into masked vector instructions rather than leave scalar iterations
#: (``-vectorizer-min-trip-count``, 16, in LLVM's LoopVectorize.cpp).
TINY_TRIP_COUNT = 16


def _llvm_masks_tail(vec: Loop | None, by_tvm: bool) -> bool:
    """Whether LLVM vectorizes ``vec`` itself (not TVM) and ends each of its rows in a masked
    vector: a trip count below :data:`TINY_TRIP_COUNT` that no vector width from
    :data:`~tuna.cpu.codegen.MIN_AUTO_LANES` lanes up divides."""
    return (vec is not None and not by_tvm and vec.extent % MIN_AUTO_LANES != 0
            and vec.extent < TINY_TRIP_COUNT)


def _masked_tail(vec: Loop | None, by_tvm: bool, machine: Machine) -> bool:
    """Whether such a masked row ends in AVX2's masked store (VMASKMOVPS: a 14-float row of a
    MobileNetV2 1 x 1 conv2d on Zen 3 is stored as 8 lanes and 6 masked), on an x86 machine
    with AVX but not AVX-512. AVX-512 machines mask with mask registers: their masked stores are
    timed as plain ones, and :func:`_masked_accumulator_chain` prices the rows' chain."""
    return _llvm_masks_tail(vec, by_tvm) and machine.isa == "x86-64" and 256 <= machine.vector_bits < 512


def _live_vectors(stmt: Statement, inner: tuple[Loop, ...], vec: Loop | None, hw: int, machine: Machine) -> int:
    """Vector registers the distinct vectors of ``stmt``'s copies over the unrolled and
    vectorized ``inner`` loops take (a value read and written counted once)."""
    return _register_demand(stmt, inner, vec, hw, machine)[0]


def _register_demand(
    stmt: Statement, inner: tuple[Loop, ...], vec: Loop | None, hw: int, machine: Machine,
) -> tuple[int, tuple | None, int]:
    """:func:`_live_vectors`, the read (buffer, subscripts) whose vectors it leaves in memory
    and their number: on x86 one operand of each arithmetic instruction is read from memory,
    the largest group of vectors the statement does not write (None, 0 elsewhere)."""
    live: dict[tuple, int] = {}
    for a in stmt.accesses:
        n = _vector_cost(a, vec, hw) * math.prod(lp.extent for lp in inner if lp is not vec and a.depends_on(lp.var))
        live[(a.buffer, a.indices)] = max(live.get((a.buffer, a.indices), 0), n)
    need = sum(live.values())
    if machine.isa != "x86-64":
        return need, None, 0
    written = {(a.buffer, a.indices) for a in stmt.accesses if a.write}
    operand = max((key for key in live if key not in written), key=live.get, default=None)
    return need - live.get(operand, 0), operand, live.get(operand, 0)


def _tile_loads(
    stmt: Statement, tile: tuple[Loop, ...], vec: Loop | None, hw: int, machine: Machine,
) -> dict[tuple, float]:
    """Vectors each access of ``stmt`` moves per execution of a register tile too large for the
    vector registers (``tile``: the unrolled and vectorized loops, outermost first).

    A vector is reused across a tile loop its subscript does not vary with while what one
    iteration of that loop touches stays in the registers; of the excess, the share that does
    not fit is loaded again in every iteration (LLVM reloads or spills it). The accumulators
    of a reduction loop in the tile are so kept across it while its body fits, whatever the
    spatial loops around it hold in all: in the fastest candidate of a ResNet-50 1 x 1
    conv2d (``docs/bench/emr-heldout4-pools``, ``resnet50-fused_conv2d21_add14_relu10`` #170:
    2 x 64 x 4 unrolled updates of 49 lanes), LLVM (TVM 0.27, Emerald Rapids) loads 1,400
    vectors a rolled iteration; the tile's 800 distinct ones all counted as live, with the
    excess spilled and nothing hoisted, made 4,050.
    """
    accesses = {(a.buffer, a.indices, a.write): a for a in stmt.accesses}
    # Per tile loop, what one of its iterations touches: the part the registers cannot keep, and all.
    excess = [(max(0.0, need - machine.vector_registers), max(need, 1))
              for need in (_live_vectors(stmt, tile[pos + 1:], vec, hw, machine) for pos in range(len(tile)))]
    loads = {}
    for key, a in accesses.items():
        n = float(_vector_cost(a, vec, hw))
        for lp, (over, need) in zip(tile, excess):
            if lp is vec:
                continue
            n *= lp.extent if a.depends_on(lp.var) else 1 + (lp.extent - 1) * over / need
        loads[key] = n
    return loads


def _promoted_spills(stmt: Statement, tile: tuple[Loop, ...], vec: Loop | None, around: Loop,
                     tile_vectors: Mapping[tuple, float], machine: Machine) -> dict[tuple, float]:
    """Accumulator accesses (an element the statement reads and writes at subscripts the rolled
    loop ``around`` the tile does not vary) of a register tile too large for the registers but
    small enough for LICM's promotion, with the vectors each moves per execution of the tile
    for the accumulators spilled (``tile_vectors``: the distinct vectors of each access over
    the tile).

    LLVM keeps such accumulators in registers across the rolled loops around the tile (loaded
    before, stored after) and spills those beyond :data:`PROMOTED_KEPT_SHARE` of the registers:
    those are reloaded and stored at every update. Counting every accumulator as loaded and
    stored at every iteration of the rolled loop instead made a ResNet-50 stride-2 conv2d's
    fastest candidate (``docs/bench/emr-heldout4-pools``, ``resnet50-fused_conv2d7_add6_relu4``
    #150: 32 accumulators of 7 floats updated three times a rolled iteration) store 5.3 times
    as often as LLVM's code does (26.6 million against 5.0).
    """
    read = {(a.buffer, a.indices) for a in stmt.accesses if not a.write}
    updated = {(a.buffer, a.indices) for a in stmt.accesses
               if a.write and (a.buffer, a.indices) in read and not a.depends_on(around.var)}
    accumulators = sum(tile_vectors[(*key, True)] for key in updated)
    if not accumulators:
        return {}
    spilled = max(0.0, accumulators - PROMOTED_KEPT_SHARE * machine.vector_registers) / accumulators
    return {
        (a.buffer, a.indices, a.write): spilled * tile_vectors[(a.buffer, a.indices, a.write)] * math.prod(
            lp.extent for lp in tile if lp is not vec and not a.depends_on(lp.var))
        for a in stmt.accesses if (a.buffer, a.indices) in updated
    }


def _licm_hoisted(stmt: Statement, loops: tuple[Loop, ...], tile_start: int, distinct: Mapping[tuple, float],
                  homes: Mapping[str, str | None] | None, in_registers: frozenset[str]) -> list[tuple]:
    """The accesses whose loads LICM hoists out of the rolled loop around the register tile
    that starts at ``tile_start``: reads of buffers the statement does not write that the loop
    does not vary. LLVM hoists them whatever the registers hold, and spills what does not fit
    (``tests/test_codegen_llvm.py``)."""
    if tile_start == 0:
        return []
    loop = loops[tile_start - 1]
    written = {a.buffer for a in stmt.accesses if a.write}
    return [key for key in distinct
            if not key[2] and key[0] not in written and key[0] not in in_registers
            and not any(ix.depends_on(loop.var) for ix in key[1])
            and tile_start - 1 >= below_home(loops, homes, key[0])]


def _licm_reloads(stmt: Statement, tile: tuple[Loop, ...], hoisted: list[tuple], vec: Loop | None, hw: int,
                  machine: Machine, distinct: Mapping[tuple, float], copies: int) -> dict[tuple, float]:
    """Stack reloads, per execution of a register tile of ``copies`` statement copies too large
    for the vector registers, of the ``hoisted`` vectors (:func:`_licm_hoisted`), where TVM's
    vectors end in one lane past a multiple of the machine's (17, 33, 49 floats on AVX-512).

    For most widths LLVM reloads each spilled vector once where the tile first needs it, as
    many loads as had it not hoisted them; with a one-lane remainder, every use reads the
    stack. A ResNet-50 1 x 1 conv2d's candidates with a rolled loop of output channels around
    64 x 4 unrolled updates of 49 lanes (``docs/bench/emr-heldout4-pools``,
    ``resnet50-fused_conv2d21_add14_relu10`` #143, #128, #172) hoist the 256 input vectors out
    of it: 1,314 of the loop's 1,586 loads read the stack (LLVM of TVM 0.27, Emerald Rapids),
    and they ran 3.1-4x slower than #170, whose rolled loop varies every input. Probes of the
    same shape (tests/test_codegen_llvm.py) load 1.5-1.8 times per FMA at 17, 33 and 49 lanes
    and 0.5-0.7 times at 24-64 lanes otherwise, on Zen 4 and Emerald Rapids alike.
    """
    held = sum(distinct[key] for key in hoisted)
    own = 0
    for a in stmt.accesses:  # the live vectors of one iteration of the tile's outermost loop
        if (a.buffer, a.indices, a.write) not in hoisted and not a.write:
            own = max(own, _vector_cost(a, vec, hw))
    own += sum(_vector_cost(a, vec, hw) * math.prod(lp.extent for lp in tile[1:] if lp is not vec
                                                     and a.depends_on(lp.var))
               for a in stmt.accesses if a.write)
    spilled = min(1.0, max(0.0, held + own - machine.vector_registers) / held)
    accesses = {(a.buffer, a.indices, a.write): a for a in stmt.accesses}
    return {key: spilled * copies * _vector_cost(accesses[key], vec, hw) for key in hoisted}


def _masked_accumulator_chain(stmt: Statement, writes: list[Access], vec: Loop | None, hw: int, by_tvm: bool,
                              tile: tuple[Loop, ...], outside: tuple[Loop, ...], machine: Machine) -> float:
    """Cycles of the chain through memory that masked vector accumulators make (0 if none).

    ``writes``: the statement's stores (at least one).

    A short loop LLVM vectorizes itself (not TVM), whose trip count no vector width from
    :data:`~tuna.cpu.codegen.MIN_AUTO_LANES` lanes up divides, ends each accumulator row in a
    masked load, operation and masked store on a machine with mask registers. LLVM keeps
    masked accesses in memory: across a rolled reduction loop around the register tile, each
    update loads what the last one stored. When the tile's rows lie closer together than a
    row's vectors cover (a whole number of vectors), a row's load overlaps the previous row's
    masked store without lying inside it, the store queue cannot forward it (the microbenchmark of
    ``scripts/microbench/zen4_memory.c``), and the rows' updates wait for one another: on Zen
    4 a 1x1 conv2d whose 8 rows of 14 floats are updated so ran 20 times slower than with
    TVM's 14-lane vectors (MobileNetV2 pool, candidates 162 and 166). Rows further apart
    forward their data, one round trip a reduction step.

    With a reduction unrolled inside the tile as well, each row is updated several times
    between its load and its store, and LLVM loads every row before it stores any (probes of
    4 rows x 2 updates and 4 x 7, against load, FMA and store a row with one update): the
    rows of an iteration wait for the last iteration's stores together, and the chain is one
    round trip and the row's updates an iteration. Counted row by row, a ResNet-50 3 x 3
    conv2d's candidate of 28 rows of 7 lanes, 2 updates each (2.6 ms on Zen 4, 2.1 times its
    pool's best), was predicted 11 times slower than it now is (ranked 158th of 192, now 32nd).
    """
    if machine.isa != "x86-64" or machine.vector_bits < 512:
        # Without mask registers LLVM leaves a scalar tail (SSE) or masks with AVX2's VMASKMOVPS,
        # whose stores the front end prices (:func:`_masked_tail`); the store queue's rule below
        # was measured on AVX-512 machines only.
        return 0.0
    if (not _llvm_masks_tail(vec, by_tvm) or not outside
            or not any(a.buffer == writes[0].buffer for a in stmt.accesses if not a.write)):
        return 0.0
    steps = [lp for lp in outside if lp.kind != LoopKind.PARALLEL and not stmt.stores_vary_with(lp.var)]
    if not steps:
        return 0.0
    try:
        ua = uarch(machine.name)
    except TunaError:
        return 0.0
    write = writes[0]
    rows = [lp for lp in tile if lp is not vec and write.depends_on(lp.var)]
    row_bytes = min((abs(write.byte_stride(lp.var)) for lp in rows), default=0)
    fma = machine.latency.get("fma", 4)
    iterations = math.prod(lp.extent for lp in outside)
    updates = math.prod(lp.extent for lp in tile if lp is not vec and not write.depends_on(lp.var))
    # A row's last, masked vector covers a whole vector's bytes: LLVM's 256-bit vectors on
    # Emerald Rapids store a 14-float row as 8 lanes and a masked 8 (64 bytes), and the next
    # row 56 bytes on overlaps it (tests/test_codegen_llvm.py).
    footprint = math.ceil(vec.extent / hw) * hw * write.dtype_bytes
    fails = bool(rows) and row_bytes < footprint and ua.store_forward_fail_latency is not None
    if fails and updates == 1:
        return iterations * math.prod(lp.extent for lp in rows) * (ua.store_forward_fail_latency + fma)
    return iterations * ((ua.store_forward_fail_latency if fails else ua.store_forward_latency) + fma * updates)


#: Address bits a load is compared on with the stores in flight before its full address is
#: (loads and stores a multiple of 4 KiB apart alias: the page offset).
ALIAS_BYTES = 4096


def _aliased_updates(stmt: Statement, writes: list[Access], loops: tuple[Loop, ...], reduce_pos: int,
                     tile_start: int, vec: Loop | None, hw: int, machine: Machine) -> float:
    """Cycles per update that accumulators in memory lose to loads held behind stores they alias.

    When a rolled loop that varies the accumulators runs inside the innermost reduction loop
    (``loops[reduce_pos]``; ``tile_start``: where the unrolled and vectorized loops around the
    statement begin), every step of the reduction loads each accumulator and stores it back.
    A load that agrees in its low 12 address bits with more stores still in the store queue
    than the core tolerates waits for them: accumulators a multiple of 4 KiB apart (the heads
    of a 12 x 128 x 128 float tensor, 64 KiB apart) update one after another instead of
    overlapping. On Zen 4 (``scripts/microbench/zen4_alias.c``) up to 7 such updates a step
    cost little; 8, 12, 16 and 20 take 38-65, 218-320, 428-496 and 516-599 cycles a step,
    16-57 with the addresses 64 bytes further apart; groups that alias among themselves but
    not with each other overlap (two to four groups of 12: 253-363). The updates of one
    store-queue window (the innermost loops whose updates fit in it, in program order) are
    grouped by their address modulo :data:`ALIAS_BYTES`; the largest group of ``A`` costs
    ``(A - store_alias_tolerated) * store_alias_penalty`` cycles (micro-architecture data),
    spread over the window's updates. 0 without those data.
    """
    inside = loops[reduce_pos + 1:]
    if tile_start <= reduce_pos + 1:
        # One accumulator a step, or a tile unrolled inside the reduction loop: its accumulators
        # are registers across it, and those that do not fit spill to the stack, not to C.
        return 0.0
    read = {(a.buffer, a.indices) for a in stmt.accesses if not a.write}
    write = next((w for w in writes if (w.buffer, w.indices) in read), None)
    if write is None:
        return 0.0
    try:
        ua = uarch(machine.name)
    except TunaError:
        return 0.0
    if ua.store_alias_tolerated is None or ua.store_alias_penalty is None or ua.store_queue is None:
        return 0.0
    lanes = hw if vec in inside and contiguous_in(write, vec.var) else 1
    window = ua.store_queue // (2 if lanes * write.dtype_bytes > 32 else 1)  # a 512-bit store takes two entries
    offsets = [0]
    for lp in reversed(inside):
        if any(lp.var in ix.opaque for ix in write.indices):
            return 0.0  # addresses through div/mod of a fused loop: not a progression
        stride = write.byte_stride(lp.var)
        steps = lp.extent
        if lp is vec:
            steps, stride = math.ceil(lp.extent / lanes), stride * lanes
        if len(offsets) * steps > window:
            break
        offsets = [o + k * stride for k in range(steps) for o in offsets]
    largest = max(Counter(o % ALIAS_BYTES for o in offsets).values())
    if largest <= ua.store_alias_tolerated:
        return 0.0
    return (largest - ua.store_alias_tolerated) * ua.store_alias_penalty / len(offsets)


def _scalarized_carry(
    counts: Counter, stmt: Statement, distinct: Mapping[tuple, int], vec: Loop, vinstr: int,
    tile: tuple[Loop, ...], outside: tuple[Loop, ...], homes: Mapping[str, str | None] | None, machine: Machine,
) -> None:
    """Count the lane moves (and spills) of accumulators carried as scalars around a rolled loop.

    The statement's TVM vectors of ``vec.extent`` lanes (not a power of two and wider than the
    machine's, or kept in a buffer that another statement accesses so) that it reads and
    writes without depending on the innermost rolled loop around its register ``tile``
    (``outside[-1]``) stay in registers across that loop, and LLVM carries them lane by lane
    (:data:`SCALARIZED_LANE_INSTRUCTIONS`) once per copy of the loop's body it unrolls partly
    (:data:`PARTIAL_UNROLL_SIZE`). ``distinct`` holds the vector instructions of each access
    per iteration of that loop.
    """
    carrier = outside[-1]
    if carrier.kind != LoopKind.SERIAL:
        return  # a parallel loop's iterations are calls of the outlined body: nothing carried
    inside = {lp.var for lp in (carrier, *tile)}
    lanes = 0
    for (buf, idx, write), n in distinct.items():
        updated = write and (buf, idx, False) in distinct  # read where it is written: an accumulator
        fresh = (homes or {}).get(buf) in inside  # allocated anew in each iteration: nothing carried
        if updated and not fresh and not any(ix.depends_on(carrier.var) for ix in idx):
            lanes += n // vinstr * vec.extent
    if not lanes:
        return
    body = sum(n for (buf, idx, write), n in distinct.items() if not write and (buf, idx, True) not in distinct)
    body += stmt.op_count() * math.prod(vinstr if lp is vec else lp.extent for lp in tile)
    copies = 1
    while (copies < MAX_PARTIAL_UNROLL and 2 * copies * body <= PARTIAL_UNROLL_SIZE
           and carrier.extent % (2 * copies) == 0):
        copies *= 2
    back_edges = math.prod(lp.extent for lp in outside) // copies
    counts["lane_moves"] += SCALARIZED_LANE_INSTRUCTIONS * lanes * back_edges
    counts["spill"] += max(0, lanes - machine.vector_registers) * back_edges


def _on_stack(alloc: Allocation) -> bool:
    """Whether TVM places a buffer allocated in the kernel on the stack (an ``alloca``, whose size
    LLVM knows) rather than in the runtime's workspace (:data:`MAX_STACK_ALLOCA`)."""
    return alloc.elements * alloc.dtype_bytes < MAX_STACK_ALLOCA


def _address_from(alloc: Allocation | None, inside: set[str]) -> str:
    """Where a nest gets a buffer's address: ``"closure"`` (a parameter, or a buffer allocated
    outside the nest, passed to the outlined parallel body), or for one allocated inside it,
    ``"stack"`` (addressed from the stack pointer) or ``"workspace"`` (from the runtime)."""
    if alloc is None or alloc.loop not in inside:
        return "closure"
    return "stack" if _on_stack(alloc) else "workspace"


def reloads_per_call(
    node: Loop | Statement, rolled: tuple[Loop, ...], run: list[Statement], machine: Machine,
    allocations: Mapping[str, Allocation],
) -> int:
    """Values reloaded from the stack after each library call of one straight-line run.

    A value live across a call stays in a register only if the calling convention preserves
    it (:attr:`~tuna.machine.Machine.callee_saved_gprs`). ``rolled`` are the loops that stay
    loops around the run in the nest ``node`` (an outlined parallel body,
    :func:`rolled_around`); ``run`` its statements from the first that makes calls on. Live
    across the calls are the addresses of the buffers those statements access, save buffers
    allocated in the nest on the stack (addressed from the stack pointer), and a counter and
    a scaled offset of the innermost rolled loop; when the run is the whole body of the
    nest's outer loop, also the parallel loop's bound, which only the runtime knows, the
    counters and offsets of any other rolled loops, and the runtime's values for freeing
    workspace buffers allocated in the nest. (Values used only before the first call, or
    outside an inner rolled loop, LLVM spills once around them.) The excess over the
    preserved registers is reloaded after every call, at most once for each value the run
    uses: the SFM-1 picks of ES on Zen 4 keep 8 live over their 512 unrolled expf calls and
    reload 2 after each.
    """
    if not machine.callee_saved_gprs:
        return 0
    inner = len(rolled) > 1
    inside = {lp.var for _, loops in walk((node,)) for lp in loops}
    buffers = {a.buffer for stmt in run for a in stmt.accesses}
    addresses = sum(_address_from(allocations.get(buf), inside) != "stack" for buf in buffers)
    workspace = not inner and any(_address_from(a, inside) == "workspace" for a in allocations.values())
    loops = 2 if inner else 2 * len(rolled) + any(lp.kind == LoopKind.PARALLEL for lp in rolled)
    live = addresses + WORKSPACE_VALUES * workspace + loops
    return min(max(0, live - machine.callee_saved_gprs), addresses + 2 * len(rolled))


def fill_terms(nests: Sequence[tuple[Loop | Statement, int]], machine: Machine, feats: Counter) -> None:
    """Add a kernel's cache-fill and DRAM terms (per thread) to ``feats``; ``nests`` are its
    top-level nests in program order, each with the threads that run it.

    The nests run one after another, so a nest finds in each level what the nests before it
    left there (Algorithm 2 over the sequence, :func:`tuna.cpu.cache.data_movement`): a layer
    norm written as four passes over its rows, of 1.2 MB, fills the 32 MB L3 once, as a
    single fused pass does, not four times. Each nest's share of a level's fills is its
    fills alone scaled to the sequence's. Private levels are filled by each of a nest's
    threads for its share; the shared level and memory serve them all. Data that misses the
    last level comes from DRAM, so the last level's fill volume is the DRAM traffic.
    """
    kernel = Loop("__kernel__", 1, LoopKind.SERIAL, tuple(n for n, _ in nests)) if len(nests) > 1 else None
    volume = 0.0
    for level in machine.caches:
        sets = known_sets(level)
        alone = [sum(data_movement(node, level.size_bytes, level.line_bytes, sets)[1].values()) for node, _ in nests]
        total = sum(alone)
        together = total if kernel is None else sum(data_movement(kernel, level.size_bytes, level.line_bytes,
                                                                  sets)[1].values())
        scale = min(1.0, together / total) if total else 0.0
        volume = scale * total
        feats[f"L{level.level}_fill_bytes"] += volume
        for (_, threads), bytes_alone in zip(nests, alone):
            per_thread = scale * bytes_alone / (1 if level.shared else threads)
            feats[f"l{level.level}_fill_cycles"] += per_thread / level.bytes_per_cycle
    feats["dram_bytes"] += volume
    feats["dram_cycles"] += volume / (machine.memory_gbps * 1e9) * machine.frequency_ghz * 1e9


def parallel_width(node: Loop | Statement) -> int:
    """Iterations of the outermost parallel loop on the nest's spine (1 if none)."""
    while isinstance(node, Loop):
        if node.kind == LoopKind.PARALLEL:
            return node.extent
        if len(node.body) != 1:
            return 1
        node = node.body[0]
    return 1


def _call_block_ops(
    node: Loop | Statement, stmts: list[tuple[Statement, tuple[Loop, ...], Counter]], machine: Machine,
    tvm: frozenset[str], allocations: Mapping[str, Allocation],
) -> float:
    """Instructions of the straight-line runs of one nest that call library functions.

    Each statement making calls contributes its own (with lane moves around vector calls,
    :func:`statement_counts`), the statements unrolled into the same run theirs, and every
    call the reloads of values it clobbers (:func:`reloads_per_call`), as the full tier
    counts the instructions of the basic blocks with calls.
    """
    runs: dict[tuple[str, ...], list] = {}
    homes = {name: alloc.loop for name, alloc in allocations.items()}
    for stmt, loops, counts in stmts:
        rolled = rolled_around(stmt, loops, machine, tvm, homes)
        runs.setdefault(tuple(lp.var for lp in rolled), [rolled, []])[1].append((stmt, counts))
    total = 0.0
    for rolled, members in runs.values():
        if not any(counts["math"] for _, counts in members):
            continue
        if not all(counts["scalar_calls"] for _, counts in members if counts["math"]):
            # Calls of vector lanes make their own blocks (lane moves, spills, the call).
            total += sum(counts["call_block_ops"] for _, counts in members)
            continue
        first = next(pos for pos, (_, counts) in enumerate(members) if counts["math"])
        reloads = reloads_per_call(node, rolled, [stmt for stmt, _ in members[first:]], machine, allocations)
        for _, counts in members:
            if counts["math"]:  # (around the calls of one vector, the vectors are spilled instead)
                total += counts["call_block_ops"] + reloads * counts["scalar_calls"]
            else:
                total += _instructions(counts)
    return total


def _nest_counts(
    node: Loop | Statement, machine: Machine, tvm: frozenset[str], allocations: Mapping[str, Allocation],
    in_registers: frozenset[str] = frozenset(), scalarized: frozenset[str] = frozenset(),
) -> tuple[list[tuple[Statement, tuple[Loop, ...], Counter]], Counter]:
    """Each statement of one top-level nest with its loops and counts, and their sum."""
    counts: Counter = Counter()
    homes = {name: alloc.loop for name, alloc in allocations.items()}
    on_stack = frozenset(name for name, alloc in allocations.items() if _on_stack(alloc))
    walked = list(walk((node,)))
    stmts = []
    for (stmt, loops), hoisted in zip(walked, hoisted_loops(walked, machine, tvm, homes), strict=True):
        # A loop LICM hoists the statement out of runs it once (codegen.hoisted_loops).
        counted = tuple(dataclasses.replace(lp, extent=1) if lp.var in hoisted else lp for lp in loops)
        stmts.append((stmt, loops, statement_counts(stmt, counted, machine, tvm, homes, in_registers, scalarized,
                                                        on_stack)))
    for _, _, own in stmts:
        counts.update(own)
    return stmts, counts


def _fp_cycles(counts: Counter, machine: Machine) -> float:
    """Cycles of the FP pipes for a nest's counts: FMA/multiply or add pipes, divisions and
    special functions, each instruction weighted by its width (``pipe_<kind>``)."""
    tp = machine.throughput
    return max(
        (counts["pipe_fma"] + counts["pipe_mul"]) / tp["fma"],
        counts["pipe_add"] / tp["add"],
    ) + counts["pipe_div"] / tp["div"] + counts["pipe_special"] / tp["special"]


@cache
def _masked_store_slots(preset: str, bits: int) -> int:
    """Dispatch slots an AVX2 masked store of ``bits`` takes beyond its own (microcode: 71 on
    Zen 3, ``scripts/microbench/avx2_masked_stores.c``; 0 without micro-architecture data)."""
    try:
        return uarch(preset).timing("vmaskstore", bits).slots
    except TunaError:
        return 0


@cache
def _shuffle_cost(preset: str) -> float:
    """Cycles of the shuffle pipes per 128-bit insert or extract (0 without micro-architecture data)."""
    try:
        return uarch(preset).timing("vshuffle", 128).rthroughput
    except TunaError:
        return 0.0


def _core_cycles(bounds: tuple[float, ...]) -> float:
    """Core cycles of a nest on an out-of-order core from its resources' bounds (FP pipes,
    load and store ports, front end, reduction chains, shuffle pipes): the two busiest, added.

    The counts behind the bounds are the loop tree's, not the code's, and an out-of-order
    core seldom overlaps its two busiest resources fully: taken as the busiest alone, the
    candidates of a pool tied on it (most often the FP pipes) were ordered by the smaller
    terms only, and those whose loads came closer to it could run twice as slow as their
    ties (a ResNet-50 1 x 1 conv2d of ``docs/bench/heldout-pools-7`` on Zen 4: FP-pipe bound
    6.42 M cycles for all, the fastest with a load bound of 4.10 M, two 2.1x slower with
    4.53 M, predicted as fast). Over the 67 development pools (2026-11-28, ``tuna bench rank
    --tiers ir``) the busiest alone ranked top-1 0.697, top-10 0.732, Kendall tau 0.595; with
    the second busiest added 0.728, 0.751, 0.606. Tried and not taken: a quarter or half of
    the second busiest added (top-10 0.733, 0.734), a quarter, half or all of every other
    bound added (0.732, 0.744, 0.741). On 14 pools held out from this choice
    (``docs/bench/heldout-pools-10`` to ``-13``) the gain is smaller: top-1 0.822 -> 0.811,
    top-10 0.751 -> 0.756, tau 0.612 -> 0.617 (BENCHMARKS.md, 2026-11-28).
    """
    ordered = sorted(bounds)
    return ordered[-1] + ordered[-2]


def _threads(node: Loop | Statement, machine: Machine) -> tuple[int, int, float]:
    """The nest's parallel width, the threads it occupies (TVM's thread pool), and the
    imbalance of its last round."""
    width = parallel_width(node)
    active = min(width, machine.threads)
    return width, active, math.ceil(width / active) * active / width


def _nest_terms(
    node: Loop | Statement, machine: Machine, feats: Counter, tvm: frozenset[str],
    allocations: Mapping[str, Allocation], in_registers: frozenset[str] = frozenset(),
    scalarized: frozenset[str] = frozenset(),
) -> tuple[Loop | Statement, int]:
    """Add one top-level nest's terms of the linear model (and diagnostics) but the cache fills
    to ``feats``; return the nest as the caches see it and the threads that run it (for
    :func:`fill_terms`)."""
    stmts, counts = _nest_counts(node, machine, tvm, allocations, in_registers, scalarized)
    if counts["math"]:
        counts["call_block_ops"] = _call_block_ops(node, stmts, machine, tvm, allocations)
    tp = machine.throughput
    fp = _fp_cycles(counts, machine)
    loads = (counts["pipe_load"] + counts["spill"]) / tp["load"]
    stores = (counts["pipe_store"] + counts["spill"]) / tp["store"]
    instructions = (
        _instructions(counts)
        + counts["lane_moves"]
        + 2 * counts["spill"]
        + LOOP_OVERHEAD_INSTRUCTIONS * counts["loop_iterations"]
    )
    # A masked store that microcode runs holds dispatch (Zen 3: 12 cycles, against 1).
    masked = counts["masked_stores"] * _masked_store_slots(machine.name, machine.vector_bits)
    frontend = (instructions + masked) / machine.issue_width
    # Lanes moved one at a time between vectors and scalars (inserts, extracts) occupy the
    # shuffle pipes: a MobileNetV2 stride-2 conv2d candidate whose innermost loop holds 82
    # inserts, extracts and shuffles (a 28-lane accumulator carried as scalars, a 28-lane
    # strided read) ran about 41 cycles an iteration on Zen 4, which has two such pipes.
    shuffles = (counts["lane_moves"] + counts["lane_shuffles"]) * _shuffle_cost(machine.name)
    width, active, imbalance = _threads(node, machine)
    # The caches see the loads LICM hoists out of rolled loops once, before the loop.
    homes = {name: alloc.loop for name, alloc in allocations.items()}
    view = cache_view(node, machine, tvm, homes)
    if machine.in_order:
        core = fp + loads + stores + counts["chain"] / 2
    else:
        core = _core_cycles((fp, loads, stores, frontend, counts["chain"], shuffles))
    for key in ("fma", "add", "mul", "load", "store", "spill", "lane_moves", "lane_shuffles", "lanes_fma",
                "loop_iterations", "chain"):
        feats[key] += counts[key]
    feats["fp_cycles"] += fp
    feats["shuffle_cycles"] += shuffles
    feats["tir_fp_cycles"] += fp / active * imbalance
    feats["tir_chain_cycles"] += counts["chain"] / active * imbalance
    feats["tir_alias_cycles"] += counts["alias"] / active * imbalance
    feats["load_cycles"] += loads
    feats["store_cycles"] += stores
    feats["frontend_cycles"] += frontend
    feats["compute_cycles"] += core / active * imbalance
    share = imbalance / active  # one thread's part of the nest's memory instructions
    feats["load_ops"] += (counts["load"] + counts["spill"]) * share
    feats["store_ops"] += (counts["store"] + counts["spill"]) * share
    feats["calls"] += counts["math"] * share
    feats["call_block_ops"] += counts["call_block_ops"] * share
    feats["launches"] += width > 1
    feats["threads_used"] = max(feats["threads_used"], active)
    return view, active


def _wide_vector_buffers(kernel: KernelIR, machine: Machine) -> frozenset[str]:
    """Buffers allocated in the kernel, small enough for the stack (:data:`MAX_STACK_ALLOCA`),
    that a statement accesses as a TVM vector wider than the machine's, of a width that is not a
    power of two: LLVM scalarizes the accumulators kept in them (:func:`_scalarized_carry`)."""
    allocated = {a.name for a in kernel.allocations if _on_stack(a)}
    out = set()
    for stmt, loops in walk(kernel.body):
        vec = _vector_loop(loops)
        if vec is None:
            continue
        vl, hw = vec.extent, machine.lanes(stmt.dtype_bytes)
        if _wide_odd(vl, hw):
            out |= {a.buffer for a in stmt.accesses if a.buffer in allocated and a.depends_on(vec.var)}
    return frozenset(out)


def features(kernel: KernelIR, machine: Machine) -> Counter:
    """The IR tier's terms of the linear model (and diagnostics) for ``kernel``."""
    feats: Counter = Counter()
    tvm = frozenset(tvm_unrolled(kernel))
    allocations = {a.name: a for a in kernel.allocations}
    in_registers = register_buffers(kernel, machine, tvm)
    scalarized = _wide_vector_buffers(kernel, machine)
    views = [_nest_terms(node, machine, feats, tvm, allocations, in_registers, scalarized) for node in kernel.body]
    if views:
        fill_terms(views, machine, feats)
    feats["const"] = 1.0
    return feats


def memory_terms(kernel: KernelIR, machine: Machine) -> Counter:
    """The cache-fill and DRAM terms of :func:`features` (``L<n>_fill_bytes``, ``l<n>_fill_cycles``,
    ``dram_bytes``, ``dram_cycles``) of the loop tree as written, which the full tier takes.

    :func:`features` gives the caches the tree after LICM (:func:`~tuna.cpu.codegen.cache_view`);
    this does not, so the two differ where LICM hoists loads. Giving the full tier that view
    too moved 185 of 3,071 Granite Rapids development candidates' predictions by at most 3.2%
    and no pool's ranking metric (BENCHMARKS.md, "Analysis time"): left for a change that refits
    the full tier.
    """
    feats: Counter = Counter()
    if kernel.body:
        fill_terms([(node, _threads(node, machine)[1]) for node in kernel.body], machine, feats)
    return feats


def loop_tree_bounds(kernel: KernelIR, machine: Machine) -> Counter:
    """The loop tree's FP-pipe and reduction-chain bounds of :func:`features` alone
    (``tir_fp_cycles``, ``tir_chain_cycles``, and ``tir_alias_cycles``, the part of the chains
    that stores aliasing loads make: per thread, summed over the top-level nests), with the
    same values."""
    feats: Counter = Counter()
    tvm = frozenset(tvm_unrolled(kernel))
    allocations = {a.name: a for a in kernel.allocations}
    for node in kernel.body:
        _, counts = _nest_counts(node, machine, tvm, allocations)
        _, active, imbalance = _threads(node, machine)
        feats["tir_fp_cycles"] += _fp_cycles(counts, machine) / active * imbalance
        feats["tir_chain_cycles"] += counts["chain"] / active * imbalance
        feats["tir_alias_cycles"] += counts["alias"] / active * imbalance
    return feats


def estimate(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of ``kernel`` on the CPU ``machine`` from its loop tree."""
    feats = features(kernel, machine)
    seconds = linear.seconds(feats, linear.coefficients(machine, "ir"), machine)
    feats["cycles"] = seconds * machine.frequency_ghz * 1e9
    return Estimate(seconds=seconds, tier="ir", features=MappingProxyType(dict(feats)))
