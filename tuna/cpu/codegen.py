"""What TVM's and LLVM's code generation make of the loop tree: which loops stay loops.

TVM's ``UnrollLoop`` pass unrolls explicitly unrolled loops and small loops under a
``pragma_auto_unroll_max_step`` annotation (:func:`tvm_unrolled`, :func:`unrolled_loops`);
LLVM then unrolls small innermost loops completely and vectorizes the innermost loop TVM
left serial where its accesses allow (:func:`codegen_loops`). The loops left over are the
machine code's loops (:func:`rolled_around`), small buffers the unrolling leaves at
constant subscripts become registers (:func:`register_buffers`), and reads invariant in a
rolled loop are loaded once before it (:func:`cache_view`, the loop tree the caches see).
Both tiers use this: the IR tier to count instructions and cache fills the way LLVM's code
makes them, the loop mapping to know which TIR loops can match a machine loop. Pure
functions of the loop tree and the machine description.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from ..ir import Access, KernelIR, Loop, LoopKind, Node, Statement, walk
from ..machine import Machine

#: Size of an innermost loop nest (iterations times the statement's loads, stores and
#: operations) up to which LLVM unrolls it completely: its full-unroll cost threshold at -O3
#: (``-unroll-threshold``, 300) over the few cost units a simple instruction takes, approx.
FULL_UNROLL_SIZE = 300
#: Trip count up to which LLVM simulates a loop's full unrolling to find what it simplifies
#: (``-unroll-max-iteration-count-to-analyze``) and lets the simplified size decide
#: (:func:`_simplified_size`).
MAX_ANALYZED_TRIPS = 10
#: Cost units, for LLVM's full unrolling, of each lane of a TVM vector read at a stride
#: (:func:`strided_in`): TVM builds such a vector element by element (the lane's index
#: extracted, its address, a scalar load, an insert), where a contiguous vector is one load.
#: Counted so, a MobileNetV2 stride-2 conv2d's 3-iteration loop around a 28-lane strided
#: read stays rolled, as LLVM keeps it (TVM 0.27, znver4), instead of being unrolled. Probes
#: of taps around such reads (``tests/test_codegen_llvm.py``, ``_STRIDED_TAPS``) have LLVM unroll
#: 6 of 19 loops this keeps rolled; 3 units fits those probes better but unrolls the loops
#: around them too eagerly and ranked the development pools worse (BENCHMARKS.md, 2026-12-07).
STRIDED_LANE_UNROLL_COST = 4
#: Narrowest vector LLVM's loop vectorizer forms from a serial loop (lanes).
MIN_AUTO_LANES = 4
#: Memory accesses in the body of a rolled loop inside a parallel one (distinct addresses of
#: the copies TVM or LLVM unrolled inside it, a store counting twice) above which LLVM's loop
#: vectorizer leaves the loop scalar. Found by compiling (TVM 0.27's LLVM, znver4) rolled
#: loops of 64 iterations around unrolled copies of one statement: the largest bodies
#: vectorized had 332-352 such accesses and the smallest left scalar 376-448, in each of three
#: kinds tried (a matrix product's updates of 1-20 accumulators; the same with three streamed
#: operands; plain stores of products). The stores' weight and the bound were chosen to
#: separate these probes (by statement copies alone, the kinds disagree). Outside a parallel
#: loop, bodies of 1,024 copies were vectorized: TVM outlines a parallel loop's body into a
#: function that gets the buffers from a closure, without the kernel's no-alias attribute,
#: so the limit is probably that of the run-time overlap checks LLVM then needs.
MAX_LOOP_VECTORIZER_ACCESSES = 360


def tvm_unrolled(kernel: KernelIR) -> set[str]:
    """Variables of the loops TVM's ``UnrollLoop`` pass unrolls before code generation.

    Explicitly unrolled loops, and, under a ``pragma_auto_unroll_max_step`` annotation,
    every serial loop whose whole body runs at most that many statement instances
    (vectorized loops count once: they become single vector instructions).
    """
    unrolled: set[str] = set()

    def steps(node: Node, limit: int) -> int:
        if not isinstance(node, Loop):
            return 1
        limit = node.unroll_max_step or limit
        inner = sum(steps(child, limit) for child in node.body)
        total = inner if node.kind == LoopKind.VECTORIZED else inner * node.extent
        if node.kind == LoopKind.UNROLLED or (node.kind == LoopKind.SERIAL and total <= limit):
            unrolled.add(node.var)
        return total

    for node in kernel.body:
        steps(node, 0)
    return unrolled


#: Length of an unrolled chain of floating-point ``max`` (or ``min``) updates of one element,
#: whose result another ``max`` or ``min`` then takes (:func:`minmax_chain`), from which a
#: candidate is not compiled. LLVM's optimiser (TVM 0.27, -O3, x86-64) takes time doubling
#: with each step of such a chain: SFM:1's rfactored row maximum took 0.05 s at 16 steps,
#: 1.3 s at 24, 5.2 s at 26, 20 s at 28 and 81 s at 30 (Granite Rapids guest, 2026-12-06);
#: a 64-step chain ran past 600 CPU seconds. A sum in either place compiles in 0.05 s. From
#: 30 steps a compile outlasts every limit tuna and MetaSchedule's builder set (5 to 30 s).
SLOW_MINMAX_CHAIN = 30
#: Bytes of a local buffer addressed by a rolled loop's variable up to which LLVM still keeps
#: the buffer in a register (a chain into it then compiles as fast as a sum): rows of 2 and 4
#: floats compiled in 0.03 s at 24 steps, rows of 8, 16 and 32 in 0.8 s (probes, TVM 0.27).
MINMAX_REGISTER_ROW_BYTES = 16


def _minmax_update(stmt: Statement) -> Access | None:
    """The store of a statement that updates an element with a ``max`` or ``min`` of itself (else None)."""
    store = next((a for a in stmt.accesses if a.write), None)
    if not stmt.minmax or store is None:
        return None
    reads_itself = any(not a.write and a.buffer == store.buffer and a.indices == store.indices for a in stmt.accesses)
    return store if reads_itself else None


def minmax_chain(kernel: KernelIR) -> int:
    """Longest unrolled chain of ``max``/``min`` updates of one element that LLVM's optimiser
    is exponentially slow on (0: none; :data:`SLOW_MINMAX_CHAIN`).

    A chain is a statement updating an element with a ``max`` or ``min`` of itself, repeated
    by the loops TVM unrolls around it (:func:`tvm_unrolled`) that do not move the element,
    up to the first loop left rolled; vectorized loops add lanes, not steps. Counted only
    where that rolled loop moves the element within its buffer (the address is not a
    constant in the unrolled code) over more than :data:`MINMAX_REGISTER_ROW_BYTES`, and a
    ``max`` or ``min`` in the same rolled iteration reads the chain's result. Probes and
    SFM candidates compiled otherwise (the element's address constant or in a row of 4
    floats, the result read by a sum or read from a later loop through memory) take no
    longer than a sum's chain.
    """
    found = list(walk(kernel.body))
    updates = [(stmt, loops, store) for stmt, loops in found if (store := _minmax_update(stmt)) is not None]
    if not updates:  # most kernels: nothing more to walk on the IR tier's path
        return 0
    unrolled = tvm_unrolled(kernel)
    homes = {a.name: a.loop for a in kernel.allocations}
    longest = 0
    for stmt, loops, store in updates:
        steps, rolled = 1, None
        for pos in range(len(loops) - 1, -1, -1):
            lp = loops[pos]
            if lp.kind == LoopKind.VECTORIZED:
                continue
            if lp.var not in unrolled:
                rolled = pos
                break
            if not stmt.stores_vary_with(lp.var):
                steps *= lp.extent
        # The rolled loop must move the element inside its allocation: a buffer allocated in
        # (or outside) the loop itself is addressed by constants once the body is unrolled.
        if steps <= longest or rolled is None or below_home(loops, homes, store.buffer) > rolled:
            continue
        row = loops[rolled]
        if row.extent * abs(store.byte_stride(row.var)) <= MINMAX_REGISTER_ROW_BYTES:
            continue
        if any(other is not stmt and other.minmax
               and any(not a.write and a.buffer == store.buffer for a in other.accesses)
               and any(lp.var == row.var for lp in around)
               for other, around in found):
            longest = steps
    return longest


def unrolled_loops(loops: tuple[Loop, ...], tvm: frozenset[str] | None = None) -> set[str]:
    """Variables of loops that TVM or LLVM unrolls.

    Explicitly unrolled loops, and inner loops under a ``pragma_auto_unroll_max_step``
    annotation while the product of their extents stays within the step limit; or, given
    ``tvm`` (what TVM unrolls in the whole kernel, :func:`tvm_unrolled`, which
    also counts the sibling statements under a loop), those of ``loops`` among them.
    """
    unrolled = {lp.var for lp in loops if lp.kind == LoopKind.UNROLLED}
    if tvm is not None:
        return unrolled | {lp.var for lp in loops if lp.var in tvm}
    max_step, start = 0, len(loops)
    for pos, lp in enumerate(loops):
        if lp.unroll_max_step:
            max_step, start = lp.unroll_max_step, pos + 1
    steps = 1
    for lp in reversed(loops[start:]):
        if lp.kind == LoopKind.VECTORIZED:
            continue
        steps *= lp.extent
        if steps > max_step or lp.kind in (LoopKind.PARALLEL, LoopKind.THREAD):
            break
        unrolled.add(lp.var)
    return unrolled


def below_home(loops: tuple[Loop, ...], homes: Mapping[str, str | None] | None, buffer: str) -> int:
    """Position in ``loops`` just inside the loop ``buffer`` is allocated in (0: none of them)."""
    home = (homes or {}).get(buffer)
    return next((pos + 1 for pos, lp in enumerate(loops) if lp.var == home), 0)


def contiguous_in(access: Access, var: str) -> bool:
    """Whether consecutive iterations of ``var`` touch consecutive elements (unit stride, last dim)."""
    if not access.indices or any(ix.depends_on(var) for ix in access.indices[:-1]):
        return False
    last = access.indices[-1]
    return last.coeff(var) == 1 and var not in last.opaque


def strided_in(access: Access, var: str) -> bool:
    """Whether ``access`` moves along a dimension at a constant stride other than one element
    as ``var`` steps (TVM vectorizing ``var`` builds the vector lane by lane); accesses
    through the division of a fused loop (:attr:`~tuna.ir.Index.opaque`) are not counted."""
    return (access.depends_on(var) and not contiguous_in(access, var)
            and not any(var in ix.opaque for ix in access.indices))


#: Largest stride of a read with which LLVM's loop vectorizer still vectorizes a loop TVM left
#: serial (probed at stride 2 only; 3 taken to behave alike, as LLVM forms interleaved groups of
#: any small factor).
MAX_INTERLEAVED_STRIDE = 3
#: Trip count up to which LLVM's loop vectorizer gathers such reads on a machine with AVX-512
#: rather than loading them as interleaved groups. Compiled here (TVM 0.27, znver4; probes of
#: a serial loop reading at stride 2, 4 or 8 output channels unrolled inside, taps along the
#: row or down the columns alike): 7 and 14 iterations used ``vgatherdps``, 16 in one of two
#: shapes, 17 to 112 whole loads and shuffles; emeraldrapids the same. znver3 (no AVX-512)
#: never gathered: it left 14 iterations scalar and interleaved 28.
MAX_GATHERED_TRIPS = 16


def interleaved_stride(access: Access, var: str) -> int:
    """The stride at which ``access``, a read, steps along its last dimension as ``var`` does,
    where LLVM's loop vectorizer can still vectorize the loop of ``var`` (0 where it cannot).

    A read at stride 2 or 3 along the last dimension only. Over more than
    :data:`MAX_GATHERED_TRIPS` iterations LLVM loads the whole span and shuffles the lanes out
    (a scalar remainder keeps the last loads within bounds): the fastest candidate of a 5x5
    stride-2 depthwise pool (``docs/bench/heldout-pools-34``; TVM 0.27, znver4), whose 28
    output columns TVM left a serial loop, runs that loop as three 8-lane vectors with
    ``vshufps``/``vpermpd`` and four scalar iterations. Over fewer it gathers where the
    machine has AVX-512, else leaves it scalar (:func:`loop_vectorized_reads`).
    """
    if access.write or any(ix.depends_on(var) for ix in access.indices[:-1]) or not access.indices:
        return 0
    last = access.indices[-1]
    stride = last.coeff(var)
    return stride if 2 <= stride <= MAX_INTERLEAVED_STRIDE and var not in last.opaque else 0


def loop_vectorized_reads(loop: Loop, machine: Machine) -> str | None:
    """How LLVM's loop vectorizer, vectorizing ``loop``, reads at a stride of
    :func:`interleaved_stride`: ``"interleaved"`` (whole vectors, shuffled) or ``"gathered"``
    (``vgatherdps``: short loops on AVX-512 machines); None where it leaves the loop scalar
    (short loops without AVX-512: znver3 in the probes of :data:`MAX_GATHERED_TRIPS`; other
    instruction sets, not probed)."""
    if machine.isa != "x86-64":
        return None
    if loop.extent > MAX_GATHERED_TRIPS:
        return "interleaved"
    return "gathered" if machine.vector_bits >= 512 else None


def folded_share(stmt: Statement, loops: tuple[Loop, ...], tvm: frozenset[str] | None) -> float:
    """Share of a guarded statement's copies left once TVM's unrolling decides its guards (1: none).

    A zero guard ``(h + rh) % 2 == 0`` (:attr:`~tuna.ir.Statement.guards`) whose residue only
    loops TVM unrolls change is a constant in each unrolled copy: TVM's simplifier drops the
    copies it rules out and the condition from the others, which LLVM may then vectorize.
    A transposed convolution of stride 2 keeps a quarter of its copies: on Zen 4 the fastest
    candidate of ``docs/bench/heldout-pools-10``'s T2D-2 (0.64 ms, rh, rw, h and w tiles
    unrolled) ran 16 FMAs of 16 lanes where the loop tree has 64 products, and the loop
    tree's scalar, guarded count had predicted it 12 times slower than the IR tier's pick
    (5.1 times slower than it in fact).
    """
    if not stmt.guards:
        return 1.0
    unrolled = unrolled_loops(loops, tvm)
    share = 1.0
    for index, modulus in stmt.guards:
        if any(c % modulus and v not in unrolled for v, c in index.coeffs):
            return 1.0
        share /= modulus
    return share


def codegen_loops(
    stmt: Statement, loops: tuple[Loop, ...], machine: Machine, tvm: frozenset[str] | None = None,
    homes: Mapping[str, str | None] | None = None, in_registers: frozenset[str] = frozenset(),
) -> tuple[Loop, ...]:
    """``loops`` with the kinds LLVM gives them when it compiles TVM's loop nest.

    ``homes`` maps buffers allocated in the kernel to the loop they are allocated in
    (:attr:`~tuna.ir.Allocation.loop`; see :func:`_private_writes`).

    Innermost serial loops small enough for LLVM's full unrolling become unrolled. When TVM
    vectorized nothing, LLVM still does: the loop vectorizer takes the innermost rolled loop
    and the SLP vectorizer the copies of an unrolled one, provided the loop runs over the
    stored element's last dimension and every access is contiguous in it or independent of
    it (floating-point reductions are not reordered without fast-math, so a reduction loop
    stays scalar), and the statement has no condition (LLVM leaves conditional loads, such as
    those of an inlined padding, scalar) unless LLVM settles it by peeling the loop's first
    iterations (:func:`_guard_peeled`; ``in_registers``: the buffers
    :func:`register_buffers` finds in registers). The innermost such loop becomes vectorized;
    the loop vectorizer leaves a loop whose unrolled body accesses memory too often scalar
    (:data:`MAX_LOOP_VECTORIZER_ACCESSES`), and, inside a parallel loop, one whose body holds
    such conditional loads in any statement (:func:`_guarded_loads`).

    The SLP vectorizer does not merge copies that have a reduction unrolled inside them: each
    copy's accumulator is loaded, updated and stored once per step of the reduction, and the
    copies' stores sit among those of the other copies. Over the 52 pools of development
    (shipped and heldout-pools 1-5), candidates counted as vectorized there ran a median 1.6x
    slower than predicted relative to their pool (250 candidates; e.g. a 1 x 1 convolution's
    columns around its channel sum: LLVM packed four output channels with gathers instead).

    A store into a buffer allocated anew in each iteration of the loop does not keep the loop
    vectorizer from it (:func:`_private_writes`).
    """
    return _codegen(stmt, loops, machine, tvm, homes, in_registers)[0]


def _private_writes(
    stmt: Statement, loops: tuple[Loop, ...], pos: int, inside: set[str], unrolled: set[str], full: set[int],
    homes: Mapping[str, str | None],
) -> set[tuple]:
    """The stores of ``stmt`` into buffers private to each iteration of ``loops[pos]``
    (``inside``: the variables of that loop and those inside it; ``unrolled`` and ``full``: the
    loops TVM and LLVM unroll, as :func:`_codegen` has them).

    A buffer allocated in that loop or inside it (a cache-write stage MetaSchedule placed
    there, compacted to one iteration's tile) and stored at subscripts that only loops
    unrolled inside it vary is a set of scalars after the unrolling:
    LLVM's SROA keeps them in registers, one per iteration, and the loop vectorizer gives
    each lane its own. Compiled probes (TVM 0.27's LLVM, znver4: a depthwise 3 x 3 window
    around a rolled loop of 7-28 output columns, three channels' accumulators allocated in
    it, unrolled by MetaSchedule's explicit-unroll pragma) all vectorized the columns. Over 40
    development pools, LLVM vectorized 57 of the 77 candidates the IR tier had kept scalar for
    such a store (44 of 58 where the loop's other accesses allowed it), and the IR tier
    predicted those 57 a median 2x slower, relative to their pools, than they ran.
    """
    inner_unrolled = {x.var for i, x in enumerate(loops) if i > pos and (x.var in unrolled or i in full)}
    return {
        (a.buffer, a.indices)
        for a in stmt.accesses
        if a.write and homes.get(a.buffer) in inside
        and all(not ix.opaque and all(v in inner_unrolled for v, _ in ix.coeffs) for ix in a.indices)
    }


def _codegen(
    stmt: Statement, loops: tuple[Loop, ...], machine: Machine, tvm: frozenset[str] | None,
    homes: Mapping[str, str | None] | None = None, in_registers: frozenset[str] = frozenset(),
) -> tuple[tuple[Loop, ...], set[str], set[int]]:
    """:func:`codegen_loops`, with the loops TVM unrolls (names) and those LLVM unrolls completely (positions)."""
    unrolled = unrolled_loops(loops, tvm)
    if machine.in_order or not loops:
        return loops, unrolled, set()
    region, full = _llvm_unrolling(stmt, loops, unrolled, machine.lanes(stmt.dtype_bytes))
    out = [dataclasses.replace(lp, kind=LoopKind.UNROLLED) if pos in full else lp for pos, lp in enumerate(loops)]
    # Loops whose vectorizers may take a guarded statement: its test settled by peeling, with
    # everything inside unrolled by TVM.
    settled = {pos for pos in region if all(x.var in unrolled for x in loops[pos + 1:])
               and _guard_peeled(stmt, loops, pos, homes, in_registers)} if stmt.op_count("cmp") else set()
    if any(lp.kind == LoopKind.VECTORIZED for lp in loops) or (stmt.op_count("cmp") and not settled):
        return tuple(out), unrolled, full  # vectorized by TVM already, or conditional loads LLVM keeps
    writes = [a for a in stmt.accesses if a.write]
    parallel = any(lp.kind == LoopKind.PARALLEL for lp in loops)
    for pos in region:
        lp = loops[pos]
        slp = lp.var in unrolled or pos in full
        strided = (not slp and loop_vectorized_reads(lp, machine) is not None
                   and not _unrolled_late(stmt, loops[pos + 1 :], unrolled))
        if stmt.op_count("cmp") and pos not in settled:
            continue  # a bounds test that LLVM does not settle before its vectorizers run
        if slp and stmt.op_count("math"):
            continue  # the SLP vectorizer leaves copies of library calls without a vector form scalar
        if slp and any(not stmt.stores_vary_with(x.var) for x in loops[pos + 1 :]):
            continue  # each copy's stores sit between the updates of a reduction unrolled inside it
        if not slp and parallel and _body_accesses(stmt, loops[pos + 1 :]) > MAX_LOOP_VECTORIZER_ACCESSES:
            break  # the loop vectorizer gives up on a body this large (and takes only innermost loops)
        if not slp and parallel and _guarded_loads(loops, pos, tvm, homes, in_registers):
            break  # loads under a bounds test LLVM does not settle, in the same loop (_guarded_loads)
        private: set[tuple] = set()
        fresh: set[str] = set()
        if homes and not slp:
            inside = {x.var for x in loops[pos:]}
            private = _private_writes(stmt, loops, pos, inside, unrolled, full, homes)
            # With private stores, a read of another buffer allocated anew in each iteration (a
            # padding stage placed there) is not invariant either: each lane would need its own.
            fresh = {buf for buf, home in homes.items() if home in inside} if private else set()
        if (
            lp.extent >= MIN_AUTO_LANES
            and writes
            and all(contiguous_in(w, lp.var) or (w.buffer, w.indices) in private for w in writes)
            and all(
                contiguous_in(a, lp.var)
                or (strided and interleaved_stride(a, lp.var))
                or (not a.depends_on(lp.var) and (a.buffer not in fresh or (a.buffer, a.indices) in private))
                for a in stmt.accesses
            )
        ):
            out[pos] = dataclasses.replace(lp, kind=LoopKind.VECTORIZED)
            break
    return tuple(out), unrolled, full


#: Iterations LLVM peels off the front of a loop to settle a comparison of its induction
#: variable in the rest (``-unroll-peel-max-count``, 7, in LLVM's LoopPeel.cpp).
MAX_PEELED_ITERATIONS = 7
#: Size of a loop's body (loads, stores and operations of its statements over the copies
#: unrolled inside it, as :data:`FULL_UNROLL_SIZE` counts them) up to which LLVM peels an
#: iteration off it: the unrolling threshold must hold the loop and its peeled copy
#: (LoopPeel.cpp's ``computePeelCount``: at most ``threshold / size - 1`` iterations).
MAX_PEELED_BODY_SIZE = FULL_UNROLL_SIZE // 2


def _guard_peeled(
    stmt: Statement, loops: tuple[Loop, ...], pos: int, homes: Mapping[str, str | None] | None,
    in_registers: frozenset[str] = frozenset(),
) -> bool:
    """Whether ``stmt``'s guard is a padding test that LLVM settles inside ``lp = loops[pos]`` by peeling.

    ``stmt`` is a padding stage's copy into a buffer allocated in the kernel that LLVM keeps in
    registers (``in_registers``); its read leaves the padded buffer only in the first
    :data:`MAX_PEELED_ITERATIONS` iterations of ``lp`` or fewer and never in the last, and the
    body of ``lp`` is small enough to peel (:data:`MAX_PEELED_BODY_SIZE`). Compiled here (TVM
    0.27, znver4), the shipped ResNet-50 padded 3x3 stride-2 max pool has its fastest
    candidate's copies vectorized with the columns, the first column peeled
    (``tests/test_codegen_llvm.py``); ResNeXt's stride-2 grouped convolution whose column loop
    holds 72 such copies and 144 updates keeps them scalar (``heldout-pools-32``, conv2d8's
    candidate 40): a body too large to peel.
    """
    written = {a.buffer for a in stmt.accesses if a.write}
    if not written or not written <= in_registers or not homes or any(buf not in homes for buf in written) or any(
        a.buffer in written for a in stmt.accesses if not a.write
    ):
        return False
    lp = loops[pos]
    ranges = {x.var: x.extent - 1 for x in loops}
    padded = False
    for acc in stmt.accesses:
        if acc.write:
            continue
        for ix, size in zip(acc.indices, acc.shape, strict=True):
            if ix.opaque:
                continue
            low = ix.const + sum(min(0, c) * ranges.get(v, 0) for v, c in ix.coeffs)
            high = ix.const + sum(max(0, c) * ranges.get(v, 0) for v, c in ix.coeffs)
            if low >= 0 and high < size:
                continue
            padded = True
            step = ix.coeff(lp.var)
            if step <= 0:
                continue
            if high >= size:
                return False
            if math.ceil(-low / step) > MAX_PEELED_ITERATIONS:
                return False
    return padded and _body_size(loops[: pos + 1]) <= MAX_PEELED_BODY_SIZE


def _body_size(loops: tuple[Loop, ...]) -> int:
    """Size of the body of ``loops[-1]`` (the loops around it first): every statement's loads,
    stores and operations times the iterations of its loops inside it."""
    return sum((len(stmt.accesses) + stmt.op_count()) * math.prod(x.extent for x in inner[len(loops):])
               for stmt, inner in walk(loops[-1].body, loops))


def _guarded_loads(
    loops: tuple[Loop, ...], pos: int, tvm: frozenset[str] | None, homes: Mapping[str, str | None] | None,
    in_registers: frozenset[str] = frozenset(),
) -> bool:
    """Whether a statement in the body of ``loops[pos]`` loads under a bounds test that LLVM
    does not settle first (:func:`_guard_peeled`), nor TVM (:func:`folded_share`).

    In a parallel loop's body, which TVM outlines into a function that gets its buffers from a
    closure without the no-alias attribute, LLVM's loop vectorizer ignores the type-based alias
    information of the loads it must predicate, so it has to prove at run time that they do not
    overlap the loop's stores; mostly it gives up and leaves the whole loop scalar, every
    statement of its body with it. Its remarks (``scripts/llvm_remarks.py``): ResNeXt's stride-2
    grouped convolution (``heldout-pools-32``, conv2d8's candidate 40, 10.7 times its pool's
    best) "Too many SCEV assumptions", and "cannot prove it is safe to reorder memory
    operations" with that limit raised; probes of a padded stride-2 column loop (1-8 channels'
    windows, 1-8 output channels) were left scalar in 14 of 16 shapes inside a parallel loop
    and vectorized in the 5 shapes tried outside one (``tests/test_codegen_llvm.py``,
    ``_padded_columns``). Not every such loop stays scalar: a ConvNeXt 7x7 depthwise candidate
    (``heldout-pools-27``, candidate 87) holding 70 such loads is vectorized.
    """
    for other, inner in walk(loops[pos].body, loops[: pos + 1]):
        if (other.op_count("cmp") and any(not a.write for a in other.accesses)
                and folded_share(other, inner, tvm) == 1
                and not _guard_peeled(other, inner, pos, homes, in_registers)):
            return True
    return False


def _unrolled_late(stmt: Statement, inner: tuple[Loop, ...], unrolled: set[str]) -> bool:
    """Whether LLVM unrolls one of the ``inner`` loops only after its loop vectorizer has run.

    The loop vectorizer takes innermost loops only: a loop TVM left to LLVM whose copies exceed
    :data:`FULL_UNROLL_SIZE` (counted as :func:`_llvm_unrolling` does before what unrolling
    simplifies) is still a loop when it looks at the loop around; a later pass unrolls it.
    Compiled here (TVM 0.27, znver4), a rolled loop of 28 columns reading at stride 2 in a
    parallel loop: ResNet-18's stride-2 1x1 convolution kept it scalar around 4 x 16 copies
    left to LLVM (the size 320) and vectorized it around 4 x 4 x 2 (or 4 x 16 that TVM
    unrolled); probes vectorized it around 96 copies in no shape tried, around 64 in each. The
    size is a proxy: probes of 4 x 16 copies (320) were vectorized, and ResNet-18's 7x7 stride-2
    stem was not around 3 x 7 x 2 (210).
    """
    if all(lp.var in unrolled for lp in inner):
        return False
    return (len(stmt.accesses) + stmt.op_count()) * math.prod(lp.extent for lp in inner) > FULL_UNROLL_SIZE


def _body_accesses(stmt: Statement, inner: tuple[Loop, ...]) -> int:
    """Distinct addresses ``stmt``'s copies over the unrolled ``inner`` loops access, stores twice."""
    distinct = {}
    for acc in stmt.accesses:
        copies = math.prod(lp.extent for lp in inner if acc.depends_on(lp.var))
        distinct[(acc.buffer, acc.indices, acc.write)] = copies * (2 if acc.write else 1)
    return sum(distinct.values())


def _llvm_unrolling(
    stmt: Statement, loops: tuple[Loop, ...], unrolled: set[str], lanes: int
) -> tuple[list[int], set[int]]:
    """Positions of the innermost loops left to LLVM's loop passes, innermost first, and of
    those among them it unrolls completely (TVM's ``unrolled`` count as unrolled already).

    A loop TVM vectorized reaches LLVM as vector instructions (``lanes`` elements each), not
    as a loop: the serial loops around it are the innermost LLVM sees. A vector read at a
    stride costs :data:`STRIDED_LANE_UNROLL_COST` a lane, in the body of the loops it varies
    with only (LICM hoists it out of the others first). A loop of at most
    :data:`MAX_ANALYZED_TRIPS` iterations is also unrolled where its
    :func:`_simplified_size`, with the strided reads' lanes, is within the threshold.
    """
    region, full = [], set()
    size = len(stmt.accesses) + stmt.op_count()
    strided: dict[Access, float] = {}  # the lane-by-lane cost of strided reads, over the loops inside
    for pos in range(len(loops) - 1, -1, -1):
        lp = loops[pos]
        if lp.kind == LoopKind.VECTORIZED:
            vectors = math.ceil(lp.extent / lanes)
            size *= vectors
            if pos == len(loops) - 1:
                strided = {a: STRIDED_LANE_UNROLL_COST * lp.extent - vectors for a in stmt.accesses
                           if not a.write and strided_in(a, lp.var)}
            continue
        if lp.kind != LoopKind.SERIAL and lp.var not in unrolled:
            break
        region.append(pos)
        lane_by_lane = sum(cost for a, cost in strided.items() if a.depends_on(lp.var))
        body = size + lane_by_lane
        if lp.var not in unrolled:
            if body * lp.extent > FULL_UNROLL_SIZE and (
                lp.extent > MAX_ANALYZED_TRIPS
                or _simplified_size(stmt, loops, pos, lanes) + lane_by_lane * lp.extent > FULL_UNROLL_SIZE
            ):
                break  # the innermost loop LLVM keeps rolled
            full.add(pos)
        size *= lp.extent
        strided = {a: cost * lp.extent if a.depends_on(lp.var) else cost for a, cost in strided.items()}
    return region, full


def _simplified_size(stmt: Statement, loops: tuple[Loop, ...], pos: int, lanes: int) -> int:
    """Size of loop ``pos`` completely unrolled, its body's copies simplified as LLVM's analysis of
    short loops finds them: each distinct address accessed once (common subexpressions), reads
    that do not vary with the loop and that the statement does not write not at all (LICM).

    Compiling MetaSchedule's candidates of 59 Emerald Rapids pools (TVM 0.27) and finding the
    FMAs of their hottest loop, this size within :data:`FULL_UNROLL_SIZE` told which of 744
    short loops around unrolled bodies LLVM unrolled completely in 73% of the cases (the
    statement's size alone in 45%); it gets all the probes in ``tests/test_codegen_llvm.py``
    right, 2 x 96 updates unrolled and 10 x 20 not.
    """
    lp, inner = loops[pos], loops[pos + 1 :]

    def copies(access: Access | None) -> int:
        return math.prod(
            (math.ceil(x.extent / lanes) if x.kind == LoopKind.VECTORIZED else x.extent)
            for x in inner if access is None or access.depends_on(x.var)
        )

    written = {a.buffer for a in stmt.accesses if a.write}
    distinct = {
        (a.buffer, a.indices, a.write): copies(a) for a in stmt.accesses
        if a.write or a.buffer in written or a.depends_on(lp.var)
    }
    return lp.extent * (stmt.op_count() * copies(None) + sum(distinct.values()))


def rolled_around(
    stmt: Statement, loops: tuple[Loop, ...], machine: Machine, tvm: frozenset[str],
    homes: Mapping[str, str | None] | None = None,
) -> tuple[Loop, ...]:
    """The loops of ``stmt`` that stay loops in the machine code (with the kinds LLVM gives them).

    Statements with the same such loops share one straight-line run of code in the body of
    the innermost: everything between is unrolled or vectorized by TVM. A loop LLVM's loop
    vectorizer takes stays a loop (of vectors); those it unrolls completely do not.
    """
    code, unrolled, full = _codegen(stmt, loops, machine, tvm, homes)
    return tuple(
        code[pos]
        for pos, lp in enumerate(loops)
        if lp.var not in unrolled and lp.kind != LoopKind.VECTORIZED and pos not in full
    )


def ops_per_rolled_iteration(
    stmt: Statement, loops: tuple[Loop, ...], machine: Machine, tvm: frozenset[str],
    homes: Mapping[str, str | None] | None = None, kind: str = "fma",
) -> tuple[int, int]:
    """Operations of ``kind`` that one iteration of the innermost loop kept rolled around ``stmt``
    (:func:`rolled_around`) holds, one per vector of a TVM-vectorized loop, and that loop's trip
    count (1 where none stays rolled): what the model says LLVM's code repeats."""
    rolled = {lp.var for lp in rolled_around(stmt, loops, machine, tvm, homes)}
    inner = max((pos for pos, lp in enumerate(loops) if lp.var in rolled), default=-1)
    count = stmt.op_count(kind)
    for lp in loops[inner + 1:]:
        count *= math.ceil(lp.extent / machine.lanes(stmt.dtype_bytes)) if lp.kind == LoopKind.VECTORIZED else lp.extent
    return count, loops[inner].extent if inner >= 0 else 1


def hoisted_loops(
    statements: list[tuple[Statement, tuple[Loop, ...]]], machine: Machine, tvm: frozenset[str],
    homes: Mapping[str, str | None] | None = None,
) -> list[frozenset[str]]:
    """Per statement of one nest (``walk`` order), the rolled loops LLVM's LICM moves it out of.

    A statement none of whose accesses changes with a loop, and whose buffers no statement
    that does change with it writes, computes the same values in every iteration; once the
    loops between are unrolled its instructions sit in the loop's body, and LICM hoists
    them. MetaSchedule places reductions this way: a layer norm's variance, computed where
    each output element is (in the loop over the row's 768 elements), ran 34 us, the time of
    computing it once per row; counted per element it was predicted at 749 us.
    """
    out = []
    for stmt, loops in statements:
        rolled = {lp.var for lp in rolled_around(stmt, loops, machine, tvm, homes)}
        hoisted: set[str] = set()
        for depth in range(len(loops) - 1, -1, -1):
            lp = loops[depth]
            if lp.kind != LoopKind.SERIAL or lp.var not in rolled:
                if lp.kind in (LoopKind.PARALLEL, LoopKind.THREAD):
                    break
                continue  # unrolled or vectorized: no loop to leave
            if any(inner.var in rolled and inner.var not in hoisted for inner in loops[depth + 1 :]):
                break  # a loop stays around the statement inside this one
            if any(a.depends_on(lp.var) for a in stmt.accesses):
                break
            varying = {
                a.buffer
                for other, around in statements
                if any(x.var == lp.var for x in around) and any(b.depends_on(lp.var) for b in other.accesses)
                for a in other.accesses
                if a.write
            }
            if varying & {a.buffer for a in stmt.accesses}:
                break
            hoisted.add(lp.var)
        out.append(frozenset(hoisted))
    return out


def register_buffers(kernel: KernelIR, machine: Machine, tvm: frozenset[str]) -> frozenset[str]:
    """Buffers allocated in the kernel that LLVM keeps in registers: no loads or stores of them.

    A buffer allocated inside the kernel becomes a stack array (``alloca``). When every
    access to it, in every statement, is at a subscript that only loops unrolled inside its
    allocation vary (by TVM, or completely by LLVM: :func:`_codegen`), each element is at a
    constant address after the unrolling, and LLVM's SROA turns the elements into scalar
    values in registers; only arrays that fit the vector registers are counted so. Example:
    a padding stage of 7 floats placed in a conv1d's reduction loop (C1D-0, candidate 12 of
    the shipped pool, the pool's fastest): counted as 344,064 stores, its code stores 1,030
    times in all, the output. Over the 67 development pools the IR tier ranked a little
    better with the rule (top-1 0.687 -> 0.697, top-10 0.730 -> 0.732; BENCHMARKS.md, 2026-11-28).
    Vector accesses (a TVM-vectorized loop in the subscript) are not counted as promoted:
    counted so, the same pools ranked worse (top-10 0.717).
    """
    homes = {a.name: a.loop for a in kernel.allocations}
    promoted = {a.name for a in kernel.allocations
                if a.elements <= machine.vector_registers * machine.lanes(a.dtype_bytes)}
    for stmt, loops in walk(kernel.body):
        mine = [a for a in stmt.accesses if a.buffer in promoted]
        if not mine:
            continue
        code, unrolled, full = _codegen(stmt, loops, machine, tvm, homes)
        for acc in mine:
            start = below_home(loops, homes, acc.buffer)
            constant = {lp.var for pos, lp in enumerate(code) if pos >= start and (lp.var in unrolled or pos in full)}
            if any(ix.opaque or any(v not in constant for v, _ in ix.coeffs) for ix in acc.indices):
                promoted.discard(acc.buffer)
    return frozenset(promoted)


def cache_view(
    node: Node, machine: Machine, tvm: frozenset[str], homes: Mapping[str, str | None] | None = None,
) -> Node:
    """``node`` as its loads reach the data cache once LLVM's LICM has hoisted them.

    A read whose subscript no loop that stays rolled inside a loop changes (only loops
    unrolled there), of a buffer nothing under that loop writes, is loaded once before the
    loop, into a register or a stack slot when registers run out, not in every iteration.
    Each such read moves out of the outermost serial loop it is invariant in, into a
    statement of its own placed just before that loop, inside copies of the unrolled loops it
    varies with. The cache model (:mod:`tuna.cpu.cache`) sees this view: read where the loop
    tree has them, the 3 x 3 window of an NHWC conv2d's padded input (27 values 2 KiB apart,
    in two of Zen 4's L1 sets) was fetched again for every output channel: candidate 45 of
    C2D-3 (``docs/bench/heldout-pools-17``), as fast as the pool's best, was predicted 5.5
    times slower than it (2.2 times in this view); LLVM's code loads them once before the
    channel loop (``tests/test_codegen_llvm.py``).
    """
    if machine.in_order:
        return node
    statements = list(walk((node,)))
    written_under: dict[str, set[str]] = {}
    for stmt, loops in statements:
        for lp in loops:
            written_under.setdefault(lp.var, set()).update(a.buffer for a in stmt.accesses if a.write)
    moves: dict[tuple, list[tuple[str, Access, tuple[Loop, ...]]]] = {}
    for stmt, loops in statements:
        rolled = {lp.var for lp in rolled_around(stmt, loops, machine, tvm, homes)}
        for acc in stmt.accesses:
            if acc.write or (homes and homes.get(acc.buffer) is not None):
                continue
            target = None
            for depth in range(len(loops) - 1, -1, -1):
                lp = loops[depth]
                if lp.var not in rolled:
                    if lp.kind in (LoopKind.PARALLEL, LoopKind.THREAD):
                        break
                    continue
                if lp.kind != LoopKind.SERIAL or acc.depends_on(lp.var) or acc.buffer in written_under[lp.var]:
                    break
                target = depth
            if target is not None:
                inner = tuple(lp for lp in loops[target + 1:] if acc.depends_on(lp.var))
                moves.setdefault((id(stmt), tuple(lp.var for lp in loops)), []).append((loops[target].var, acc, inner))
    if not moves:
        return node

    def rebuild(n: Node, path: tuple[str, ...]) -> tuple[Node, dict[str, list[Node]]]:
        if isinstance(n, Statement):
            mine = moves.get((id(n), path), [])
            keep = tuple(a for a in n.accesses if not any(a is m for _, m, _ in mine))
            out: dict[str, list[Node]] = {}
            for var, acc, inner in mine:
                piece: Node = Statement(f"{n.name}.hoisted", (acc,), (), n.dtype_bytes)
                for lp in reversed(inner):
                    piece = dataclasses.replace(lp, body=(piece,))
                out.setdefault(var, []).append(piece)
            return dataclasses.replace(n, accesses=keep), out
        body: list[Node] = []
        pending: dict[str, list[Node]] = {}
        for child in n.body:
            new, pre = rebuild(child, (*path, n.var))
            if isinstance(child, Loop) and child.var in pre:
                body.extend(pre.pop(child.var))
            body.append(new)
            for var, nodes in pre.items():
                pending.setdefault(var, []).extend(nodes)
        return dataclasses.replace(n, body=tuple(body)), pending

    new, pre = rebuild(node, ())
    if pre.get(getattr(node, "var", None)):
        return Loop("__licm__", 1, LoopKind.SERIAL, (*pre.pop(node.var), new))
    return new
